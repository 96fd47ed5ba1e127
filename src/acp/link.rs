//! The side channel between `ctxfs acp` and the `ctxfs mcp` it injects: the
//! wire shapes, and the MCP server's end (`Link`, an `mcp::Companion`).
//!
//! The agent starts the MCP server, so the relay never sees its calls from
//! inside. The relay listens on a Unix socket in a private directory and
//! hands its path and a token to the injected server (`--acp-link`,
//! `--acp-token`). Over it, one JSON message per line:
//!
//! - `hello {token}`: the server says which injection it is.
//! - `result {Reported}` → `{forget}`: each call's id, tool, paths and the
//!   whole files before and after each change (as the engine keeps them for
//!   editors, `Session::change_texts`), sent before the agent gets the
//!   answer (so the relay knows it when the agent reports the call). `forget`
//!   says the call finished after its turn was cancelled: the result is taken
//!   out of the session's dedupe table, since the model never sees it.
//! - `approve {Asked}` → `{decision}` or `{dismissed}`: the gate's prompt
//!   with its files' texts, which the relay puts to the user through the
//!   app's own permission prompt.
//! - `context {event}` from the relay: `reset` or `compact` the dedupe table.
//!
//! This end uses plain threads and a blocking socket, so a call may wait for
//! the relay from the protocol's thread or a blocking one alike. When the
//! relay goes away the server has nothing left to serve: it exits once the
//! call in progress, if any, is done. Not here: the relay's end (`relay`).

use crate::engine::{Engine, ToolAnswer};
use crate::gate::{Approval, ApprovalRequest, Approver};
use crate::mcp::{Companion, ContextEvent, HostSession};
use crate::paths::VPath;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The largest text of a file shown whole in a diff (as in the LSP's prompts).
pub(crate) const MAX_TEXT: u64 = 2 * 1024 * 1024;
/// How long a call waits for the relay to take its report.
const REPORT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a relay that went away waits for the call in progress.
const LAST_CALL: Duration = Duration::from_secs(10);

/// A whole file before and after a change: `before` is `None` for a new file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Texts {
    pub before: Option<String>,
    pub after: String,
}

/// One file a call changed (or a prompt asks to change), by host path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct FileText {
    pub path: String,
    /// `created`, `modified`, `deleted` or `moved`.
    pub change: String,
    /// Both texts, when the file is text and small enough.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub texts: Option<Texts>,
}

/// A call's result, as the relay needs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Reported {
    pub token: String,
    pub tool: String,
    /// `#000c`.
    pub id: String,
    pub is_error: bool,
    /// The paths the result is about (host paths), for `locations`.
    pub paths: Vec<String>,
    pub files: Vec<FileText>,
}

/// One answer a prompt offers: the gate's id and label.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Choice {
    pub id: String,
    pub label: String,
}

/// The gate's prompt, as the relay shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Asked {
    pub token: String,
    pub tool: String,
    /// One line: `edit notes/a.md (+1 −1 lines)`.
    pub description: String,
    /// The whole prompt text (description, diff or summary, notes).
    pub message: String,
    pub options: Vec<Choice>,
    /// The paths asked about (host paths).
    pub paths: Vec<String>,
    pub files: Vec<FileText>,
    /// How long the gate waits for the answer, in seconds.
    pub timeout: f64,
}

/// The MCP server's end of the link.
pub struct Link(Arc<Shared>);

struct Shared {
    token: String,
    engine: Arc<Engine>,
    writer: Mutex<UnixStream>,
    pending: Mutex<HashMap<u64, std::sync::mpsc::Sender<Value>>>,
    next: AtomicU64,
    session: Mutex<Option<Arc<dyn HostSession>>>,
    /// Held while a call runs, so a relay that goes away lets it finish.
    busy: Mutex<()>,
}

impl Link {
    /// Connects to the relay at `socket` and starts reading its messages.
    pub fn connect(engine: Arc<Engine>, socket: &Path, token: String) -> anyhow::Result<Link> {
        let stream = UnixStream::connect(socket).map_err(|e| {
            anyhow::anyhow!(
                "could not reach the ACP relay at {} ({e}); is `ctxfs acp` still running?",
                socket.display()
            )
        })?;
        let reader = stream.try_clone()?;
        let link = Arc::new(Shared {
            token,
            engine,
            writer: Mutex::new(stream),
            pending: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
            session: Mutex::new(None),
            busy: Mutex::new(()),
        });
        link.send(&json!({"method": "hello", "params": {"token": link.token}}))?;
        let weak = Arc::downgrade(&link);
        std::thread::Builder::new().name("ctxfs-acp-link".into()).spawn(move || read_loop(weak, reader))?;
        Ok(Link(link))
    }
}

impl Shared {
    fn send(&self, message: &Value) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(message).map_err(std::io::Error::other)?;
        line.push(b'\n');
        let mut writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        writer.write_all(&line)?;
        writer.flush()
    }

    /// Sends a request and waits up to `timeout` for its answer.
    fn request(&self, method: &str, params: Value, timeout: Duration) -> Option<Value> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (send, receive) = std::sync::mpsc::channel();
        self.pending.lock().unwrap_or_else(|e| e.into_inner()).insert(id, send);
        if let Err(e) = self.send(&json!({"id": id, "method": method, "params": params})) {
            tracing::warn!("the ACP relay could not be told of a {method}: {e}");
            self.pending.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
            return None;
        }
        let answer = receive.recv_timeout(timeout).ok();
        self.pending.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
        answer
    }

    fn session(&self) -> Option<Arc<dyn HostSession>> {
        self.session.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn boundary(&self) -> VPath {
        self.engine.fs().boundary().clone()
    }

    fn host(&self, path: &VPath) -> String {
        match self.engine.vpath_to_host(path) {
            Some(host) => host.to_string_lossy().into_owned(),
            None => path.to_string(),
        }
    }

    /// What the relay is told of an answer: its paths and each change's texts.
    fn report(&self, tool: &str, answer: &ToolAnswer) -> Reported {
        let facts = &answer.facts;
        let each: Vec<&crate::engine::Facts> =
            if facts.files.is_empty() { vec![facts] } else { facts.files.iter().collect() };
        let session = self.session();
        let mut paths = Vec::new();
        let mut files = Vec::new();
        for file in each {
            let Some(path) = file.path.as_deref() else { continue };
            let host = VPath::parse(path).map(|p| self.host(&p)).unwrap_or_else(|_| path.to_string());
            paths.push(host.clone());
            if answer.is_error {
                continue;
            }
            let change = match (file.created, file.deleted, tool) {
                (true, _, _) => "created",
                (_, true, _) => "deleted",
                (_, _, "mv") => "moved",
                _ if file.diff.is_some() => "modified",
                _ => continue,
            };
            let texts = session.as_ref().and_then(|s| s.change_texts(&answer.id, path)).and_then(shown);
            files.push(FileText { path: host, change: change.into(), texts });
        }
        Reported {
            token: self.token.clone(),
            tool: tool.into(),
            id: answer.id.clone(),
            is_error: answer.is_error,
            paths,
            files,
        }
    }
}

/// A change's texts as a diff shows them: a file that is gone is empty
/// after; none when neither text is known, or one is too large.
fn shown((before, after): (Option<String>, Option<String>)) -> Option<Texts> {
    if before.is_none() && after.is_none() {
        return None;
    }
    let large = |t: &Option<String>| t.as_ref().is_some_and(|t| t.len() as u64 > MAX_TEXT);
    if large(&before) || large(&after) {
        return None;
    }
    Some(Texts { before, after: after.unwrap_or_default() })
}

fn read_loop(link: std::sync::Weak<Shared>, stream: UnixStream) {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let Some(link) = link.upgrade() else { return };
        let Ok(message) = serde_json::from_str::<Value>(&line) else {
            tracing::warn!("the ACP relay sent a line that is not JSON");
            continue;
        };
        if let Some(id) = message.get("id").and_then(Value::as_u64) {
            if let Some(waiting) = link.pending.lock().unwrap_or_else(|e| e.into_inner()).remove(&id) {
                let _ = waiting.send(message.get("result").cloned().unwrap_or(Value::Null));
            }
            continue;
        }
        if message.get("method").and_then(Value::as_str) == Some("context") {
            let event = match message.pointer("/params/event").and_then(Value::as_str) {
                Some("reset") => ContextEvent::Reset,
                Some("compact") => ContextEvent::Compact,
                other => {
                    tracing::warn!(?other, "unknown context event from the ACP relay");
                    continue;
                }
            };
            tracing::info!(?event, "context event from the ACP relay");
            if let Some(session) = link.session() {
                session.context(&event);
            }
        }
    }
    // The relay is gone: waiting prompts and reports give up now.
    let Some(link) = link.upgrade() else { return };
    link.pending.lock().unwrap_or_else(|e| e.into_inner()).clear();
    tracing::warn!("the ACP relay went away; ctxfs mcp ends with it");
    let (done, wait) = std::sync::mpsc::channel::<()>();
    let busy = link.clone();
    std::thread::spawn(move || {
        let _idle = busy.busy.lock();
        let _ = done.send(());
    });
    let _ = wait.recv_timeout(LAST_CALL);
    std::process::exit(0);
}

impl Companion for Link {
    fn approver(&self) -> Arc<dyn Approver> {
        // The session holds its approver and the link holds the session: weakly back.
        Arc::new(LinkApprover(Arc::downgrade(&self.0)))
    }

    fn opened(&self, session: Arc<dyn HostSession>) {
        *self.0.session.lock().unwrap_or_else(|e| e.into_inner()) = Some(session);
    }

    fn call(&self, tool: &str, args: Value, run: &mut dyn FnMut(Value) -> ToolAnswer) -> ToolAnswer {
        let this = &self.0;
        let _busy = this.busy.lock().unwrap_or_else(|e| e.into_inner());
        let answer = run(args);
        let report = this.report(tool, &answer);
        let reply = this.request("result", serde_json::to_value(&report).unwrap_or(Value::Null), REPORT_TIMEOUT);
        if reply.as_ref().and_then(|r| r.get("forget")).and_then(Value::as_bool) == Some(true) {
            tracing::info!(id = answer.id, "the turn was cancelled: the result is forgotten");
            if let Some(session) = this.session() {
                session.context(&ContextEvent::Forget(answer.id.clone()));
            }
        }
        answer
    }
}

struct LinkApprover(std::sync::Weak<Shared>);

impl Approver for LinkApprover {
    fn ask(&self, request: &ApprovalRequest) -> Approval {
        let Some(link) = self.0.upgrade() else {
            return Approval::Dismissed { why: "the ACP relay is gone".into() };
        };
        let asked = Asked {
            token: link.token.clone(),
            tool: request.tool.clone(),
            description: request.description.clone(),
            message: request.message(),
            options: request
                .options
                .iter()
                .filter_map(|o| o.approval.id().map(|id| Choice { id: id.into(), label: o.label.clone() }))
                .collect(),
            paths: request.paths.iter().map(|rel| link.host(&link.boundary().join_rel(rel))).collect(),
            files: request
                .files
                .iter()
                .map(|file| {
                    let host = VPath::parse(&file.path).map(|p| link.host(&p)).unwrap_or_else(|_| file.path.clone());
                    let change = match (&file.before, &file.after) {
                        (Some(None), _) => "created",
                        (_, Some(None)) => "deleted",
                        _ => "modified",
                    };
                    let texts = match (&file.before, &file.after) {
                        (Some(before), Some(after)) => shown((before.clone(), after.clone())),
                        _ => None,
                    };
                    FileText { path: host, change: change.into(), texts }
                })
                .collect(),
            timeout: request.timeout.as_secs_f64(),
        };
        let params = serde_json::to_value(&asked).unwrap_or(Value::Null);
        // The gate stops waiting at the timeout; a little more lets a late answer be logged, not lost.
        match link.request("approve", params, request.timeout + Duration::from_secs(1)) {
            None => Approval::Dismissed { why: "the app did not answer in time".into() },
            Some(answer) => match answer.get("decision").and_then(Value::as_str).and_then(Approval::from_id) {
                Some(approval) => approval,
                None => Approval::Dismissed {
                    why: answer.get("dismissed").and_then(Value::as_str).unwrap_or("no answer").to_string(),
                },
            },
        }
    }
}

/// `ctxfs mcp --acp-link SOCKET --acp-token TOKEN`: serves MCP on stdio with
/// the link to the relay as the connection's companion.
pub async fn serve(engine: Arc<Engine>, socket: PathBuf, token: String, resume: Option<String>) -> anyhow::Result<()> {
    let link = Link::connect(engine.clone(), &socket, token)?;
    let (read, write) = rmcp::transport::stdio_pipes();
    crate::mcp::serve_with(engine, Some(Arc::new(link) as Arc<dyn Companion>), read, write, resume).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_show_as_a_diff_only_when_known_and_small() {
        let some = |s: &str| Some(s.to_string());
        assert_eq!(shown((some("a\n"), some("b\n"))), Some(Texts { before: some("a\n"), after: "b\n".into() }));
        assert_eq!(shown((None, some("new\n"))), Some(Texts { before: None, after: "new\n".into() }), "created");
        assert_eq!(
            shown((some("gone\n"), None)),
            Some(Texts { before: some("gone\n"), after: String::new() }),
            "removed"
        );
        assert_eq!(shown((None, None)), None);
        let large = "x".repeat(MAX_TEXT as usize + 1);
        assert_eq!(shown((some("a"), Some(large))), None);
    }

    #[test]
    fn wire_shapes_round_trip() {
        let asked = Asked {
            token: "t1".into(),
            tool: "edit".into(),
            description: "edit a.md".into(),
            message: "Allow ctxfs to edit a.md?".into(),
            options: vec![Choice { id: "allow_once".into(), label: "Allow once".into() }],
            paths: vec!["/w/a.md".into()],
            files: vec![FileText { path: "/w/a.md".into(), change: "modified".into(), texts: None }],
            timeout: 120.0,
        };
        let value = serde_json::to_value(&asked).unwrap();
        assert!(value["files"][0].get("texts").is_none(), "absent, not null");
        assert_eq!(serde_json::from_value::<Asked>(value).unwrap(), asked);
    }
}
