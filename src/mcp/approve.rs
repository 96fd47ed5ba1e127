//! Approvals over MCP: the gate's prompt as an `elicitation/create` request
//! (one required choice `decision`) in the form the negotiated protocol
//! version defines, for clients that declared the elicitation capability.
//!
//! 2025-06-18 defines a string enum with `enum` and `enumNames` and no
//! `mode`; 2025-11-25 and later a titled `oneOf` of `const`/`title` and
//! `mode: "form"`; 2024-11-05 and 2025-03-26 have no elicitation, so a client
//! on them is never asked (as one without the capability). The request is
//! sent as the JSON built here, so that nothing the version does not define
//! goes out.
//!
//! The tool call runs on a blocking thread; the approver blocks on the
//! runtime's handle while the request goes out, and gives up after the
//! prompt's timeout (rmcp then tells the client the request is cancelled)
//! or when the tool call itself is cancelled. Accept with a decision is that
//! decision; decline is a denial; cancel, an error or no answer is a
//! dismissal. Every one of those but an allow refuses the change.

use crate::gate::{Approval, ApprovalRequest, Approver};
use rmcp::model::{ClientResult, CustomRequest, ProtocolVersion, ServerRequest};
use rmcp::service::PeerRequestOptions;
use rmcp::RoleServer;
use serde_json::{json, Value};

/// The name of the one field the prompt asks for.
pub const DECISION: &str = "decision";

/// The shape of an elicitation request a protocol version defines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElicitForm {
    /// 2024-11-05 and 2025-03-26: there is no elicitation.
    Unsupported,
    /// 2025-06-18: a string `enum` with `enumNames`, no `mode`, no schema title.
    EnumNames,
    /// 2025-11-25 and later: a titled `oneOf` of `const` and `title`, `mode: "form"`.
    Titled,
}

impl ElicitForm {
    /// The form of a negotiated protocol version (its text is a date).
    pub fn of(version: &str) -> ElicitForm {
        if version < ProtocolVersion::V_2025_06_18.as_str() {
            ElicitForm::Unsupported
        } else if version == ProtocolVersion::V_2025_06_18.as_str() {
            ElicitForm::EnumNames
        } else {
            ElicitForm::Titled
        }
    }
}

pub struct McpApprover {
    pub peer: rmcp::Peer<RoleServer>,
    pub handle: tokio::runtime::Handle,
    /// Turns true when the tool call is cancelled.
    pub cancelled: tokio::sync::watch::Receiver<bool>,
    pub form: ElicitForm,
}

/// The protocol version this request runs under: the one it names
/// (2026-07-28), else the one `initialize` agreed on. A version the client
/// asked for that ctxfs does not know was answered with the newest one that
/// has `initialize`, so it counts as that one.
pub fn negotiated(context: &rmcp::service::RequestContext<RoleServer>) -> ProtocolVersion {
    match context.protocol_version() {
        Some(version) if ProtocolVersion::KNOWN_VERSIONS.contains(&version) => version,
        _ => ProtocolVersion::LATEST_WITH_INITIALIZE,
    }
}

/// How the client can be asked: `None` when it cannot (it did not declare
/// elicitation, at `initialize` or with the request, or its protocol
/// version has none).
pub fn client_form(context: &rmcp::service::RequestContext<RoleServer>) -> Option<ElicitForm> {
    let declared = context.client_capabilities().is_some_and(|c| c.elicitation.is_some());
    let form = ElicitForm::of(negotiated(context).as_str());
    (declared && form != ElicitForm::Unsupported).then_some(form)
}

/// The `elicitation/create` params for a prompt, in `form`.
pub fn params(request: &ApprovalRequest, form: ElicitForm) -> Value {
    let offered: Vec<(&str, &str)> =
        request.options.iter().filter_map(|o| o.approval.id().map(|id| (id, o.label.as_str()))).collect();
    let description = format!("Whether ctxfs may {}", request.description);
    match form {
        ElicitForm::EnumNames | ElicitForm::Unsupported => json!({
            "message": request.message(),
            "requestedSchema": {
                "type": "object",
                "properties": {
                    DECISION: {
                        "type": "string",
                        "title": "Your answer",
                        "description": description,
                        "enum": offered.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
                        "enumNames": offered.iter().map(|(_, label)| *label).collect::<Vec<_>>(),
                    }
                },
                "required": [DECISION],
            }
        }),
        ElicitForm::Titled => json!({
            "mode": "form",
            "message": request.message(),
            "requestedSchema": {
                "type": "object",
                "title": format!("ctxfs: {}", request.tool),
                "properties": {
                    DECISION: {
                        "type": "string",
                        "title": "Your answer",
                        "description": description,
                        "oneOf": offered.iter().map(|(id, label)| json!({"const": id, "title": label})).collect::<Vec<_>>(),
                    }
                },
                "required": [DECISION],
            }
        }),
    }
}

/// The user's answer in a client's reply to `elicitation/create`.
fn answer_of(result: &Value) -> Approval {
    match result.get("action").and_then(Value::as_str) {
        Some("accept") => {
            let chosen = result.get("content").and_then(|c| c.get(DECISION)).and_then(Value::as_str);
            match chosen.and_then(Approval::from_id) {
                Some(approval) => approval,
                None => Approval::Dismissed { why: "the answer named none of the choices".into() },
            }
        }
        Some("decline") => Approval::Deny,
        Some(_) => Approval::Dismissed { why: "the user dismissed it".into() },
        None => Approval::Dismissed { why: "the client answered something else".into() },
    }
}

impl Approver for McpApprover {
    fn ask(&self, request: &ApprovalRequest) -> Approval {
        let params = params(request, self.form);
        let peer = self.peer.clone();
        let mut cancelled = self.cancelled.clone();
        let timeout = request.timeout;
        self.handle.block_on(async move {
            let asked = async {
                let request = ServerRequest::CustomRequest(CustomRequest::new("elicitation/create", Some(params)));
                peer.send_request_with_option(
                    request,
                    PeerRequestOptions::with_timeout(timeout + std::time::Duration::from_secs(1)),
                )
                .await?
                .await_response()
                .await
            };
            let cancel = async {
                if cancelled.wait_for(|c| *c).await.is_err() {
                    std::future::pending::<()>().await;
                }
            };
            tokio::select! {
                answer = asked => match answer {
                    Ok(ClientResult::ElicitResult(result)) => match serde_json::to_value(&result) {
                        Ok(value) => answer_of(&value),
                        Err(_) => Approval::Dismissed { why: "the client answered something else".into() },
                    },
                    Ok(ClientResult::CustomResult(result)) => answer_of(&result.0),
                    Ok(_) => Approval::Dismissed { why: "the client answered something else".into() },
                    Err(rmcp::ServiceError::Timeout { .. }) => Approval::Dismissed { why: "no answer in time".into() },
                    Err(e) => Approval::Dismissed { why: format!("the client could not show it: {e}") },
                },
                _ = cancel => Approval::Dismissed { why: "the call was cancelled".into() },
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_protocol_version_has_its_form() {
        assert_eq!(ElicitForm::of("2024-11-05"), ElicitForm::Unsupported);
        assert_eq!(ElicitForm::of("2025-03-26"), ElicitForm::Unsupported);
        assert_eq!(ElicitForm::of("2025-06-18"), ElicitForm::EnumNames);
        assert_eq!(ElicitForm::of("2025-11-25"), ElicitForm::Titled);
        assert_eq!(ElicitForm::of("2026-07-28"), ElicitForm::Titled);
    }

    #[test]
    fn answers_are_read_from_the_reply() {
        assert_eq!(answer_of(&json!({"action": "accept", "content": {"decision": "deny"}})), Approval::Deny);
        assert_eq!(answer_of(&json!({"action": "decline"})), Approval::Deny);
        assert!(matches!(answer_of(&json!({"action": "cancel"})), Approval::Dismissed { .. }));
        assert!(matches!(
            answer_of(&json!({"action": "accept", "content": {"decision": "x"}})),
            Approval::Dismissed { .. }
        ));
    }
}
