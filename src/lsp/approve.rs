//! Approvals over LSP: the gate's prompt as `window/showMessageRequest`
//! (type Warning, the prompt's text, one button per answer offered), after a
//! `ctxfs/approvalRequest` notification carrying the whole request as data
//! (for an extension that renders the diff itself).
//!
//! `ask` blocks. The gate calls it from a thread of its own (spawned for
//! the prompt, while the session's thread waits for it), never from the
//! runtime, so blocking on the runtime's handle is fine there; the request
//! itself runs as a task on the runtime, and the input loop goes on reading
//! meanwhile (the answer, `didChange`, other sessions' calls). The wait is
//! bounded by the prompt's timeout and a second, so the gate's own timeout
//! answers first; a button pressed after that is told it came too late.

use super::protocol::{ApprovalRequestNotification, ApprovalRequestParams};
use crate::gate::{Approval, ApprovalRequest, Approver};
use std::time::Duration;
use tower_lsp_server::ls_types::{MessageActionItem, MessageType};
use tower_lsp_server::Client;

/// How long a prompt the gate gave up on may still be answered, to say so.
const LATE_ANSWER: Duration = Duration::from_secs(600);

pub struct LspApprover {
    pub client: Client,
    pub handle: tokio::runtime::Handle,
    /// The session whose calls this approver answers for.
    pub session: String,
}

/// The answer a button stands for.
pub fn approval_of(request: &ApprovalRequest, title: &str) -> Option<Approval> {
    request.options.iter().find(|o| o.label == title).map(|o| o.approval.clone())
}

impl Approver for LspApprover {
    fn ask(&self, request: &ApprovalRequest) -> Approval {
        if tokio::runtime::Handle::try_current().is_ok() {
            // Not expected: the gate asks from a thread of its own. `block_on`
            // would panic here, so the prompt goes on a thread of ours.
            tracing::warn!("an approval was asked from the runtime");
            return std::thread::scope(|scope| {
                let asked = std::thread::Builder::new()
                    .name("ctxfs-prompt".into())
                    .spawn_scoped(scope, || self.prompt(request));
                match asked {
                    Ok(thread) => {
                        thread.join().unwrap_or_else(|_| Approval::Dismissed { why: "the prompt failed".into() })
                    }
                    Err(e) => Approval::Dismissed { why: format!("the prompt could not be shown ({e})") },
                }
            });
        }
        self.prompt(request)
    }
}

impl LspApprover {
    fn prompt(&self, request: &ApprovalRequest) -> Approval {
        let notice = ApprovalRequestParams::new(&self.session, request);
        let message = request.message();
        let actions: Vec<MessageActionItem> = request
            .options
            .iter()
            .map(|o| MessageActionItem { title: o.label.clone(), properties: Default::default() })
            .collect();
        let timeout = request.timeout;
        let wait = timeout + Duration::from_secs(1);
        let client = self.client.clone();
        let description = request.description.clone();
        let started = std::time::Instant::now();
        tracing::debug!(session = self.session, tool = request.tool, "asking the editor");
        let answer = self.handle.block_on(async move {
            client.send_notification::<ApprovalRequestNotification>(notice).await;
            let asking = client.clone();
            let mut prompt =
                tokio::spawn(
                    async move { asking.show_message_request(MessageType::WARNING, message, Some(actions)).await },
                );
            match tokio::time::timeout(wait, &mut prompt).await {
                Ok(Ok(answer)) => {
                    if let Ok(Some(item)) = &answer {
                        if started.elapsed() >= timeout {
                            // Within the grace second: the gate has refused already.
                            tokio::spawn(too_late(client, item.title.clone(), description));
                        }
                    }
                    Ok(answer)
                }
                Ok(Err(e)) => Err(format!("the prompt failed: {e}")),
                Err(_) => {
                    // The gate has refused by now; a button pressed later changes nothing.
                    tokio::spawn(async move {
                        if let Ok(Ok(Ok(Some(item)))) = tokio::time::timeout(LATE_ANSWER, prompt).await {
                            too_late(client, item.title, description).await;
                        }
                    });
                    Err("no answer in time".to_string())
                }
            }
        });
        match answer {
            Ok(Ok(Some(item))) => approval_of(request, &item.title).unwrap_or_else(|| Approval::Dismissed {
                why: format!("the answer {:?} was none of the choices", item.title),
            }),
            Ok(Ok(None)) => Approval::Dismissed { why: "the user closed the prompt".into() },
            Ok(Err(e)) => Approval::Dismissed { why: format!("the editor could not show it: {}", e.message) },
            Err(why) => Approval::Dismissed { why },
        }
    }
}

/// Tells the user that the button they pressed came after the gate gave up.
async fn too_late(client: Client, title: String, description: String) {
    tracing::info!(title, "an approval prompt was answered too late");
    let text = format!(
        "ctxfs: \"{title}\" came too late: nobody answered in time, so the change ({description}) was refused and nothing was changed."
    );
    client.show_message(MessageType::WARNING, text).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::{ApprovalOption, Mode};

    #[test]
    fn buttons_map_back_to_their_answers() {
        let option = |approval, label: &str| ApprovalOption { approval, label: label.into(), targets: vec![] };
        let request = ApprovalRequest {
            tool: "write".into(),
            mode: Mode::Ask,
            paths: vec!["notes/a.md".into()],
            description: "create notes/a.md".into(),
            summary: String::new(),
            files: Vec::new(),
            options: vec![
                option(Approval::AllowOnce, "Allow once"),
                option(Approval::AlwaysFile, "Always allow notes/a.md"),
                option(Approval::AlwaysDirectory, "Always allow notes/*"),
                option(Approval::Deny, "Deny"),
            ],
            notes: vec![],
            timeout: Duration::from_secs(1),
        };
        assert_eq!(approval_of(&request, "Always allow notes/*"), Some(Approval::AlwaysDirectory));
        assert_eq!(approval_of(&request, "Always allow notes/a.md"), Some(Approval::AlwaysFile));
        assert_eq!(approval_of(&request, "Deny"), Some(Approval::Deny));
        assert_eq!(approval_of(&request, "Allow notes/a.md for this session"), None);
    }
}
