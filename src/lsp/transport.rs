//! The input loop: framed bytes in, checked messages on to tower-lsp.
//!
//! Every body the [`Deframer`](super::framing::Deframer) hands over is checked
//! here to be a message tower-lsp will take (its decoder ends the connection
//! on anything else), in arrival order:
//!
//! - `textDocument/didOpen`, `didChange` and `didClose` are applied to the
//!   open documents right here, and not passed on: tower-lsp may run
//!   notification handlers out of order, this loop cannot;
//! - other requests, notifications and responses go on unchanged;
//! - a JSON object with an `id` that is not a valid message is answered
//!   "Invalid request" (through the internal method [`INVALID`]); other
//!   bodies that are not JSON-RPC are skipped (answering garbage can start
//!   an error storm).

use super::framing::{Deframer, Event, Skip};
use crate::vfs::overlay::{Documents, Edit, Pos};
use serde::Deserialize;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tower_lsp_server::jsonrpc::Request;

/// The internal method that answers a malformed request with its id.
pub const INVALID: &str = "ctxfs/$invalidRequest";

/// What the loop reports besides messages.
pub trait Report: Send + Sync + 'static {
    /// Something was skipped or refused; `what` is a sentence for the log.
    fn notable(&self, what: String);
}

/// Reads `input` until it ends, writing checked frames to `output`.
pub async fn pump<R, W>(mut input: R, mut output: W, docs: Arc<Documents>, report: Arc<dyn Report>)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut deframer = Deframer::new();
    let mut documents = DocumentTable::new(docs);
    let mut chunk = vec![0u8; 256 * 1024];
    loop {
        let n = match input.read(&mut chunk).await {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) => {
                tracing::warn!("reading stdin failed: {e}");
                break;
            }
        };
        deframer.push(&chunk[..n]);
        while let Some(event) = deframer.next() {
            if !handle(event, &mut output, &mut documents, &*report).await {
                return;
            }
        }
    }
    if let Some(event) = deframer.finish() {
        handle(event, &mut output, &mut documents, &*report).await;
    }
    let _ = output.shutdown().await;
}

/// Handles one event; false when the server stopped reading.
async fn handle<W: AsyncWrite + Unpin>(
    event: Event,
    output: &mut W,
    documents: &mut DocumentTable,
    report: &dyn Report,
) -> bool {
    let body = match event {
        Event::Body(body) => body,
        Event::Skipped(skip) => {
            let what = match skip {
                Skip::Garbage(n) => format!("skipped {n} bytes outside any message"),
                Skip::HugeHeader => "skipped a header block over 8 KiB".to_string(),
                Skip::BadHeader(why) => format!("skipped a message with a bad header: {why}"),
                Skip::TooLarge(n) => format!("skipped a message of {n} bytes (too large)"),
                Skip::Cut { declared, found } => {
                    format!(
                        "skipped a message whose Content-Length ({declared}) did not match its body ({found} bytes)"
                    )
                }
                Skip::Truncated => "the input ended inside a message".to_string(),
            };
            report.notable(what);
            return true;
        }
    };
    match classify(&body) {
        Kind::Forward => forward(output, &body).await,
        Kind::Rewritten(body) => forward(output, &body).await,
        Kind::Document(method, params) => {
            if let Err(why) = documents.apply(&method, params) {
                report.notable(format!("{method}: {why}"));
            }
            true
        }
        Kind::Invalid(id, why) => {
            let request = serde_json::json!({"jsonrpc": "2.0", "id": id, "method": INVALID, "params": {"why": why}});
            forward(output, &serde_json::to_vec(&request).unwrap_or_default()).await
        }
        Kind::Skip(why) => {
            report.notable(format!("skipped a body that is not a JSON-RPC message: {why}"));
            true
        }
    }
}

async fn forward<W: AsyncWrite + Unpin>(output: &mut W, body: &[u8]) -> bool {
    let header = format!("Content-Length: {}\r\n\r\n", body.len());
    let sent = async {
        output.write_all(header.as_bytes()).await?;
        output.write_all(body).await?;
        output.flush().await
    };
    match sent.await {
        Ok(()) => true,
        Err(e) => {
            tracing::debug!("the server stopped reading: {e}");
            false
        }
    }
}

enum Kind {
    Forward,
    /// A ctxfs request whose empty-array params (a Lua `{}`) were made objects.
    Rewritten(Vec<u8>),
    Document(String, serde_json::Value),
    Invalid(serde_json::Value, String),
    Skip(String),
}

fn classify(body: &[u8]) -> Kind {
    if let Err(e) = std::str::from_utf8(body) {
        return Kind::Skip(format!("not UTF-8 ({e})"));
    }
    // What tower-lsp's decoder takes: a response parses as a request without
    // a method (and tower answers a request without one "method not found").
    let why = match serde_json::from_slice::<Request>(body) {
        Ok(request) => {
            let is_document =
                matches!(request.method(), "textDocument/didOpen" | "textDocument/didChange" | "textDocument/didClose");
            if is_document && request.id().is_none() {
                let (method, _, params) = request.into_parts();
                return Kind::Document(method.into_owned(), params.unwrap_or_default());
            }
            if request.method().starts_with("ctxfs/") {
                if let Some(body) = lenient_params(body) {
                    return Kind::Rewritten(body);
                }
            }
            return Kind::Forward;
        }
        Err(e) => e.to_string(),
    };
    match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(serde_json::Value::Object(map)) => match map.get("id") {
            Some(id) if id.is_string() || id.is_i64() => Kind::Invalid(id.clone(), why),
            _ => Kind::Skip(why),
        },
        Ok(_) => Kind::Skip("not a JSON object".into()),
        Err(e) => Kind::Skip(format!("not JSON ({e})")),
    }
}

/// Clients whose empty tables are arrays (Neovim's Lua `{}` is sent as `[]`)
/// send `[]` where an object is meant, and may leave out params whose fields
/// are all optional. A ctxfs request's `[]` or missing params become `{}`
/// (none at all for `ctxfs/tools`, which takes none), and so does `args: []`;
/// `None` when nothing needs changing.
fn lenient_params(body: &[u8]) -> Option<Vec<u8>> {
    let mut message: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(body).ok()?;
    let method = message.get("method")?.as_str()?.to_string();
    let empty_array = |v: Option<&serde_json::Value>| matches!(v, Some(serde_json::Value::Array(a)) if a.is_empty());
    let mut changed = false;
    let params = message.get("params");
    if method == "ctxfs/tools" {
        if empty_array(params) || matches!(params, Some(serde_json::Value::Object(o)) if o.is_empty()) {
            message.remove("params");
            changed = true;
        }
    } else if params.is_none() || matches!(params, Some(serde_json::Value::Null)) || empty_array(params) {
        message.insert("params".into(), serde_json::Value::Object(Default::default()));
        changed = true;
    }
    if let Some(serde_json::Value::Object(params)) = message.get_mut("params") {
        for key in ["args"] {
            if empty_array(params.get(key)) {
                params.insert(key.into(), serde_json::Value::Object(Default::default()));
                changed = true;
            }
        }
    }
    changed.then(|| serde_json::to_vec(&message).unwrap_or_else(|_| body.to_vec()))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DidOpen {
    text_document: OpenedDocument,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct OpenedDocument {
    uri: String,
    version: i32,
    text: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DidChange {
    text_document: VersionedDocument,
    content_changes: Vec<ContentChange>,
}

#[derive(Deserialize)]
struct VersionedDocument {
    uri: String,
    version: i32,
}

#[derive(Deserialize)]
struct ContentChange {
    range: Option<LspRange>,
    text: String,
}

#[derive(Deserialize, Clone, Copy)]
struct LspRange {
    start: LspPosition,
    end: LspPosition,
}

#[derive(Deserialize, Clone, Copy)]
struct LspPosition {
    line: u32,
    character: u32,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DidClose {
    text_document: NamedDocument,
}

#[derive(Deserialize)]
struct NamedDocument {
    uri: String,
}

/// The open documents by URI, and where each really is.
struct DocumentTable {
    docs: Arc<Documents>,
    paths: HashMap<String, PathBuf>,
}

impl DocumentTable {
    fn new(docs: Arc<Documents>) -> DocumentTable {
        DocumentTable { docs, paths: HashMap::new() }
    }

    fn apply(&mut self, method: &str, params: serde_json::Value) -> Result<(), String> {
        match method {
            "textDocument/didOpen" => {
                let open: DidOpen = serde_json::from_value(params).map_err(|e| format!("bad params: {e}"))?;
                let doc = open.text_document;
                let Some(path) = real_path(&doc.uri) else {
                    tracing::debug!(uri = doc.uri, "not a local file; not kept");
                    return Ok(());
                };
                tracing::debug!(uri = doc.uri, path = %path.display(), bytes = doc.text.len(), "didOpen");
                self.docs.open(path.clone(), doc.uri.clone(), doc.version, &doc.text);
                self.paths.insert(doc.uri, path);
                Ok(())
            }
            "textDocument/didChange" => {
                let change: DidChange = serde_json::from_value(params).map_err(|e| format!("bad params: {e}"))?;
                let Some(path) = self.paths.get(&change.text_document.uri) else {
                    return Err(format!("{} is not open", change.text_document.uri));
                };
                let pos = |p: LspPosition| Pos { line: p.line, col: p.character };
                let edits = change
                    .content_changes
                    .into_iter()
                    .map(|c| Edit { range: c.range.map(|r| (pos(r.start), pos(r.end))), text: c.text })
                    .collect();
                self.docs.change(path, change.text_document.version, edits)
            }
            "textDocument/didClose" => {
                let close: DidClose = serde_json::from_value(params).map_err(|e| format!("bad params: {e}"))?;
                if let Some(path) = self.paths.remove(&close.text_document.uri) {
                    self.docs.close(&path);
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

/// The real host path of a `file://` URI: links resolved, so that it is
/// the key the overlay looks up (a missing file: its parent resolved).
pub fn real_path(uri: &str) -> Option<PathBuf> {
    let path = crate::paths::uri::file_uri_to_path(uri)?;
    if let Ok(real) = path.canonicalize() {
        return Some(real);
    }
    let name = path.file_name()?;
    let parent = path.parent()?.canonicalize().ok()?;
    Some(parent.join(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Log(std::sync::Mutex<Vec<String>>);

    impl Report for Log {
        fn notable(&self, what: String) {
            self.0.lock().unwrap().push(what);
        }
    }

    fn frame(body: &str) -> Vec<u8> {
        format!("Content-Length: {}\r\n\r\n{}", body.len(), body).into_bytes()
    }

    /// Runs the pump over `input` and answers the frames it passed on.
    async fn run(input: Vec<u8>, docs: Arc<Documents>) -> (Vec<String>, Vec<String>) {
        let (write, mut read) = tokio::io::duplex(1 << 20);
        let log = Arc::new(Log(Default::default()));
        pump(&input[..], write, docs, log.clone()).await;
        let mut out = Vec::new();
        read.read_to_end(&mut out).await.unwrap();
        let mut d = Deframer::new();
        d.push(&out);
        let mut bodies = Vec::new();
        while let Some(Event::Body(b)) = d.next() {
            bodies.push(String::from_utf8(b).unwrap());
        }
        let notes = log.0.lock().unwrap().clone();
        (bodies, notes)
    }

    #[tokio::test]
    async fn documents_are_kept_here_and_the_rest_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.txt");
        std::fs::write(&file, "disk\n").unwrap();
        let uri = format!("file://{}", file.display());
        let mut input = Vec::new();
        input.extend(frame(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#));
        input.extend(frame(&format!(
            r#"{{"jsonrpc":"2.0","method":"textDocument/didOpen","params":{{"textDocument":{{"uri":"{uri}","languageId":"text","version":1,"text":"one\ntwo\n"}}}}}}"#
        )));
        input.extend(frame(&format!(
            r#"{{"jsonrpc":"2.0","method":"textDocument/didChange","params":{{"textDocument":{{"uri":"{uri}","version":2}},"contentChanges":[{{"range":{{"start":{{"line":1,"character":0}},"end":{{"line":1,"character":3}}}},"text":"TWO"}}]}}}}"#
        )));
        input.extend(frame(r#"{"jsonrpc":"1.0","id":7,"method":"x"}"#));
        input.extend(frame(r#"[1,2,3]"#));
        input.extend(frame(r#"{"jsonrpc":"2.0","id":3,"result":null}"#));
        let docs = Documents::new();
        let (bodies, notes) = run(input, docs.clone()).await;
        assert_eq!(bodies.len(), 3, "{bodies:?}");
        assert!(bodies[0].contains("initialize"));
        assert!(bodies[1].contains(INVALID) && bodies[1].contains(r#""id":7"#), "{}", bodies[1]);
        assert!(bodies[2].contains(r#""result""#));
        assert_eq!(notes.len(), 1, "{notes:?}");
        let real = file.canonicalize().unwrap();
        assert_eq!(&*docs.text(&real).unwrap().0, b"one\nTWO\n");
    }

    #[test]
    fn empty_arrays_and_missing_params_of_ctxfs_requests_become_objects() {
        let rewrite = |body: &str| -> Option<serde_json::Value> {
            lenient_params(body.as_bytes()).map(|b| serde_json::from_slice(&b).unwrap())
        };
        let open = rewrite(r#"{"jsonrpc":"2.0","id":1,"method":"ctxfs/openSession","params":[]}"#).unwrap();
        assert_eq!(open["params"], serde_json::json!({}));
        let absent = rewrite(r#"{"jsonrpc":"2.0","id":1,"method":"ctxfs/openSession"}"#).unwrap();
        assert_eq!(absent["params"], serde_json::json!({}));
        let call = rewrite(
            r#"{"jsonrpc":"2.0","id":2,"method":"ctxfs/call","params":{"session":"s","tool":"list","args":[]}}"#,
        )
        .unwrap();
        assert_eq!(call["params"]["args"], serde_json::json!({}));
        assert_eq!(call["params"]["tool"], "list");
        let tools = rewrite(r#"{"jsonrpc":"2.0","id":3,"method":"ctxfs/tools","params":[]}"#).unwrap();
        assert!(tools.get("params").is_none());
        assert!(rewrite(r#"{"jsonrpc":"2.0","id":4,"method":"ctxfs/call","params":{"session":"s","tool":"list"}}"#)
            .is_none());
        assert!(rewrite(r#"{"jsonrpc":"2.0","id":5,"method":"ctxfs/tools"}"#).is_none());
    }
}
