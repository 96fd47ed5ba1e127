//! The editor side of writes to open documents: `workspace/applyEdit`.
//!
//! `Overlay` calls [`LspBridge::apply`] from the thread running a tool call
//! (never from a tower handler or the runtime): the request is sent from a
//! task on the runtime and the call's thread waits for the answer, at most
//! `timeout`. The input loop keeps reading meanwhile, so the editor's answer
//! (and its `didChange`) gets through.

use super::edits::{text_edits, TextEdit};
use crate::vfs::overlay::{DocRef, EditorBridge, EditorFailure, Encoding};
use std::collections::HashMap;
use std::str::FromStr;
use std::time::Duration;
use tower_lsp_server::ls_types::{
    DocumentChanges, MessageType, OneOf, OptionalVersionedTextDocumentIdentifier, Position, Range, TextDocumentEdit,
    Uri, WorkspaceEdit,
};
use tower_lsp_server::Client;

pub struct LspBridge {
    pub client: Client,
    pub runtime: tokio::runtime::Handle,
    pub encoding: Encoding,
    /// The client takes `documentChanges` (versioned edits).
    pub document_changes: bool,
    pub timeout: Duration,
}

fn lsp_edit(edit: TextEdit) -> tower_lsp_server::ls_types::TextEdit {
    let pos = |p: crate::vfs::overlay::Pos| Position { line: p.line, character: p.col };
    tower_lsp_server::ls_types::TextEdit {
        range: Range { start: pos(edit.start), end: pos(edit.end) },
        new_text: edit.text,
    }
}

impl EditorBridge for LspBridge {
    fn apply(&self, doc: &DocRef, old: &str, new: &str) -> Result<(), EditorFailure> {
        let uri = Uri::from_str(&doc.uri).map_err(|e| {
            tracing::warn!(uri = doc.uri, error = %e, "the editor's name of an open file is not a URI");
            EditorFailure::BadName
        })?;
        let edits: Vec<_> = text_edits(old, new, self.encoding).into_iter().map(lsp_edit).collect();
        let count = edits.len();
        let edit = if self.document_changes {
            WorkspaceEdit {
                document_changes: Some(DocumentChanges::Edits(vec![TextDocumentEdit {
                    text_document: OptionalVersionedTextDocumentIdentifier { uri, version: Some(doc.version) },
                    edits: edits.into_iter().map(OneOf::Left).collect(),
                }])),
                ..Default::default()
            }
        } else {
            WorkspaceEdit { changes: Some(HashMap::from([(uri, edits)])), ..Default::default() }
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let client = self.client.clone();
        let name = doc.uri.clone();
        self.runtime.spawn(async move {
            let answer = client.apply_edit(edit).await;
            if let Err(answer) = tx.send(answer) {
                // The call gave up waiting; say what became of the edit.
                let what = match answer.0 {
                    Ok(r) if r.applied => "applied",
                    Ok(_) => "refused",
                    Err(_) => "failed",
                };
                tracing::warn!(uri = name, what, "the editor answered an applyEdit after the call gave up");
                client
                    .log_message(MessageType::WARNING, format!("ctxfs: a late answer to an edit of {name}: {what}"))
                    .await;
            }
        });
        tracing::debug!(uri = doc.uri, version = doc.version, edits = count, "sent workspace/applyEdit");
        match rx.recv_timeout(self.timeout) {
            Ok(Ok(response)) if response.applied => Ok(()),
            Ok(Ok(response)) => Err(EditorFailure::Refused(response.failure_reason)),
            Ok(Err(e)) => Err(EditorFailure::Failed(e.message.to_string())),
            Err(_) => Err(EditorFailure::NoAnswer(self.timeout)),
        }
    }
}
