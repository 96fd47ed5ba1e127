//! Approvals over MCP: the gate's prompt as an `elicitation/create` request
//! (form mode, one required choice `decision`), for clients that declared
//! the elicitation capability.
//!
//! The tool call runs on a blocking thread; the approver blocks on the
//! runtime's handle while the request goes out, and gives up after the
//! prompt's timeout (rmcp then tells the client the request is cancelled)
//! or when the tool call itself is cancelled. Accept with a decision is that
//! decision; decline is a denial; cancel, an error or no answer is a
//! dismissal. Every one of those but an allow refuses the change.

use crate::gate::{Approval, ApprovalRequest, Approver};
use rmcp::model::{ClientResult, ElicitRequest, ElicitRequestParams, ElicitationAction, ServerRequest};
use rmcp::service::PeerRequestOptions;
use rmcp::RoleServer;
use serde_json::{json, Value};

/// The name of the one field the prompt asks for.
pub const DECISION: &str = "decision";

pub struct McpApprover {
    pub peer: rmcp::Peer<RoleServer>,
    pub handle: tokio::runtime::Handle,
    /// Turns true when the tool call is cancelled.
    pub cancelled: tokio::sync::watch::Receiver<bool>,
}

/// Whether the client said it can answer elicitation requests: at
/// `initialize`, or (protocol 2026-07-28, without it) with the request.
pub fn client_elicits(context: &rmcp::service::RequestContext<RoleServer>) -> bool {
    context.client_capabilities().is_some_and(|c| c.elicitation.is_some())
}

/// The `elicitation/create` params for a prompt.
pub fn params(request: &ApprovalRequest) -> Result<ElicitRequestParams, serde_json::Error> {
    let choices: Vec<Value> = request
        .options
        .iter()
        .filter_map(|o| o.approval.id().map(|id| json!({"const": id, "title": o.label})))
        .collect();
    serde_json::from_value(json!({
        "mode": "form",
        "message": request.message(),
        "requestedSchema": {
            "type": "object",
            "title": format!("ctxfs: {}", request.tool),
            "properties": {
                DECISION: {
                    "type": "string",
                    "title": "Your answer",
                    "description": format!("Whether ctxfs may {}", request.description),
                    "oneOf": choices,
                }
            },
            "required": [DECISION],
        }
    }))
}

impl Approver for McpApprover {
    fn ask(&self, request: &ApprovalRequest) -> Approval {
        let params = match params(request) {
            Ok(params) => params,
            Err(e) => return Approval::Dismissed { why: format!("the prompt could not be built: {e}") },
        };
        let peer = self.peer.clone();
        let mut cancelled = self.cancelled.clone();
        let timeout = request.timeout;
        self.handle.block_on(async move {
            let asked = async {
                let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
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
                    Ok(ClientResult::ElicitResult(result)) => match result.action {
                        ElicitationAction::Accept => {
                            let chosen = result.content.as_ref().and_then(|c| c.get(DECISION)).and_then(Value::as_str);
                            match chosen.and_then(Approval::from_id) {
                                Some(approval) => approval,
                                None => Approval::Dismissed { why: "the answer named none of the choices".into() },
                            }
                        }
                        ElicitationAction::Decline => Approval::Deny,
                        _ => Approval::Dismissed { why: "the user dismissed it".into() },
                    },
                    Ok(_) => Approval::Dismissed { why: "the client answered something else".into() },
                    Err(rmcp::ServiceError::Timeout { .. }) => Approval::Dismissed { why: "no answer in time".into() },
                    Err(e) => Approval::Dismissed { why: format!("the client could not show it: {e}") },
                },
                _ = cancel => Approval::Dismissed { why: "the call was cancelled".into() },
            }
        })
    }
}
