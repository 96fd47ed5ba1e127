//! The relay's state machine: one line in (from the app, the agent or an
//! injected server), effects out. No I/O and no clock, so it is tested
//! message by message (`tests`); `acp::run` does the reading and writing.
//!
//! What it keeps: the app's requests still waiting for the agent (to answer
//! them itself when the agent dies, and to see the answers to `initialize`
//! and `session/new`), each injection's token and the session it serves,
//! each session's ctxfs tool calls (by `toolCallId`) and the results the
//! injected servers reported, not yet matched to a call. A message the relay
//! does not act on goes on as the very bytes it came as.

use super::link::{Asked, FileText, Reported};
use super::rewrite;
use crate::paths::VPath;
use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;

/// The protocol version the relay speaks (ACP v1).
pub(crate) const PROTOCOL_VERSION: u64 = 1;
/// Ids of the relay's own requests to the app start with this.
pub(crate) const RELAY_ID_PREFIX: &str = "ctxfs-relay-";
/// Lines on the agent's stdout that are not ACP, before the agent counts as broken.
const MAX_GARBAGE_LINES: usize = 100;
const MAX_GARBAGE_BYTES: usize = 1024 * 1024;
/// Results kept per injected server, waiting for their tool call.
const KEPT_RESULTS: usize = 256;
/// Tool calls kept per session.
const KEPT_CALLS: usize = 1024;
/// What Claude Code's adapter says when it finished compacting.
const CLAUDE_COMPACTED: &str = "Compacting completed.";

/// What the relay does after a line.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Effect {
    /// A line to the app.
    Client(Vec<u8>),
    /// A line to the agent.
    Agent(Vec<u8>),
    /// A message to an injected server.
    Link { token: String, message: Value },
    /// The app answered the relay's request `id`.
    Answer { id: String, response: Value },
    /// The agent cannot be relayed any more: end it and say why.
    Fatal(String),
}

/// Where the injected servers' world is, as the relay's flags say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum World {
    /// `--root DIR`, or, without it, each session's `cwd`.
    Root(Option<PathBuf>),
    /// `--tree DIR --view VIEW.json`.
    Tree { dir: PathBuf, view: PathBuf },
}

/// How the injected server is started.
#[derive(Debug, Clone)]
pub(crate) struct Injection {
    /// This binary.
    pub exe: String,
    /// The link's socket.
    pub socket: String,
    pub world: World,
    pub start: Option<String>,
    /// The other flags, passed on as they are (`--mode`, `--data`, …).
    pub flags: Vec<String>,
}

impl Injection {
    /// `ctxfs mcp`'s arguments for a session in `cwd`; none when the relay
    /// has no root and the session no absolute `cwd` (nothing says where to work).
    pub(crate) fn args(&self, cwd: Option<&str>, token: &str) -> Option<Vec<String>> {
        let mut args = vec!["mcp".to_string()];
        match &self.world {
            World::Root(root) => {
                let root = match root {
                    Some(root) => root.to_string_lossy().into_owned(),
                    None => cwd.filter(|c| c.starts_with('/'))?.to_string(),
                };
                args.push("--root".into());
                args.push(root);
            }
            World::Tree { dir, view } => {
                args.extend(["--tree".into(), dir.to_string_lossy().into_owned()]);
                args.extend(["--view".into(), view.to_string_lossy().into_owned()]);
            }
        }
        if let Some(start) = &self.start {
            args.extend(["--start".into(), start.clone()]);
        }
        args.extend(self.flags.iter().cloned());
        args.extend(["--acp-link".into(), self.socket.clone(), "--acp-token".into(), token.to_string()]);
        Some(args)
    }

    /// The host path of a path a call's argument gives, in a session in `cwd`.
    pub(crate) fn host_path(&self, cwd: Option<&str>, given: &str) -> Option<String> {
        match &self.world {
            World::Root(root) => {
                let root = root.as_ref().map(|r| r.to_string_lossy().into_owned()).or(cwd.map(str::to_string))?;
                let root = VPath::parse(&root).ok()?;
                let start = match &self.start {
                    Some(start) => VPath::resolve(&root, start).ok()?,
                    None => root,
                };
                Some(VPath::resolve(&start, given).ok()?.to_string())
            }
            World::Tree { dir, .. } => {
                let start = match &self.start {
                    Some(start) => VPath::resolve(&VPath::root(), start).ok()?,
                    None => VPath::root(),
                };
                let path = VPath::resolve(&start, given).ok()?;
                let rel = path.strip_prefix(&VPath::root())?;
                Some(dir.join(rel).to_string_lossy().into_owned())
            }
        }
    }
}

/// An app request waiting for the agent's answer.
#[derive(Debug, Clone)]
struct Pending {
    id: Value,
    method: String,
    token: Option<String>,
}

/// One injected server.
#[derive(Debug, Default)]
struct Token {
    session: Option<String>,
    cwd: Option<String>,
    /// Whether its server is connected now.
    live: bool,
    results: VecDeque<Reported>,
}

/// One ctxfs tool call the agent reported.
#[derive(Debug, Clone)]
struct Call {
    tool: &'static str,
    args: Value,
    /// The content it shows (the last the agent sent).
    content: Option<Value>,
    done: bool,
    /// A prompt of the gate was asked on it.
    asked: bool,
    seq: u64,
}

#[derive(Debug, Default)]
struct Session {
    cwd: Option<String>,
    calls: HashMap<String, Call>,
    /// The turn was cancelled and no prompt has started since.
    cancelled: bool,
}

/// The relay's state.
pub(crate) struct Core {
    injection: Injection,
    pending: HashMap<String, Pending>,
    tokens: HashMap<String, Token>,
    sessions: HashMap<String, Session>,
    /// The agent is Claude Code's adapter (it advertises `_meta.claudeCode`).
    claude: bool,
    next_token: u64,
    next_request: u64,
    seq: u64,
    /// Why the agent cannot be relayed, once it cannot.
    dead: Option<String>,
    garbage: (usize, usize),
}

fn key(id: &Value) -> String {
    id.to_string()
}

fn line(message: &Value) -> Vec<u8> {
    let mut out = serde_json::to_vec(message).unwrap_or_default();
    out.push(b'\n');
    out
}

/// A JSON-RPC error answer.
pub(crate) fn error_line(id: &Value, message: &str) -> Vec<u8> {
    line(&json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32603, "message": message}}))
}

fn str_at<'a>(value: &'a Value, pointer: &str) -> Option<&'a str> {
    value.pointer(pointer).and_then(Value::as_str)
}

impl Core {
    pub(crate) fn new(injection: Injection) -> Core {
        Core {
            injection,
            pending: HashMap::new(),
            tokens: HashMap::new(),
            sessions: HashMap::new(),
            claude: false,
            next_token: 1,
            next_request: 1,
            seq: 0,
            dead: None,
            garbage: (0, 0),
        }
    }

    pub(crate) fn is_dead(&self) -> bool {
        self.dead.is_some()
    }

    fn new_token(&mut self, cwd: Option<String>) -> String {
        let token = format!("t{}", self.next_token);
        self.next_token += 1;
        self.tokens.insert(token.clone(), Token { cwd, ..Token::default() });
        token
    }

    fn bind(&mut self, token: &str, session: &str) {
        let cwd = self.tokens.get(token).and_then(|t| t.cwd.clone());
        if let Some(t) = self.tokens.get_mut(token) {
            t.session = Some(session.to_string());
        }
        let entry = self.sessions.entry(session.to_string()).or_default();
        if entry.cwd.is_none() {
            entry.cwd = cwd;
        }
    }

    /// The live injected servers of a session.
    fn live_tokens(&self, session: &str) -> Vec<String> {
        let mut out: Vec<String> = self
            .tokens
            .iter()
            .filter(|(_, t)| t.live && t.session.as_deref() == Some(session))
            .map(|(k, _)| k.clone())
            .collect();
        out.sort();
        out
    }

    fn context_effects(&self, session: &str, event: &str) -> Vec<Effect> {
        self.live_tokens(session)
            .into_iter()
            .map(|token| Effect::Link { token, message: json!({"method": "context", "params": {"event": event}}) })
            .collect()
    }

    // ----- from the app -----

    pub(crate) fn on_client(&mut self, raw: &[u8]) -> Vec<Effect> {
        let Ok(mut message) = serde_json::from_slice::<Value>(raw) else {
            // Not ours to judge: the agent answers a parse error.
            return if self.is_dead() { Vec::new() } else { vec![Effect::Agent(raw.to_vec())] };
        };
        let method = message.get("method").and_then(Value::as_str).map(str::to_string);
        let id = message.get("id").cloned();
        match (method, id) {
            (None, Some(id)) => {
                if let Some(ours) = id.as_str().filter(|s| s.starts_with(RELAY_ID_PREFIX)) {
                    return vec![Effect::Answer { id: ours.to_string(), response: message }];
                }
                if self.is_dead() {
                    return Vec::new();
                }
                vec![Effect::Agent(raw.to_vec())]
            }
            (Some(method), Some(id)) => {
                if let Some(why) = &self.dead {
                    return vec![Effect::Client(error_line(&id, why))];
                }
                let (changed, token) = self.client_request(&method, &mut message);
                let mut effects = Vec::new();
                if let Some(session) = str_at(&message, "/params/sessionId").map(str::to_string) {
                    if method == "session/load" || method == "session/resume" {
                        // Whatever the agent kept of this session, the model's context is rebuilt.
                        effects.extend(self.context_effects(&session, "reset"));
                    }
                    if let Some(token) = &token {
                        if method != "session/fork" {
                            self.bind(token, &session);
                        }
                    }
                }
                self.pending.insert(key(&id), Pending { id, method, token });
                effects.push(Effect::Agent(if changed { line(&message) } else { raw.to_vec() }));
                effects
            }
            (Some(method), None) => {
                if self.is_dead() {
                    return Vec::new();
                }
                if method == "session/cancel" {
                    if let Some(session) = str_at(&message, "/params/sessionId") {
                        self.sessions.entry(session.to_string()).or_default().cancelled = true;
                    }
                }
                vec![Effect::Agent(raw.to_vec())]
            }
            (None, None) => {
                if self.is_dead() {
                    Vec::new()
                } else {
                    vec![Effect::Agent(raw.to_vec())]
                }
            }
        }
    }

    /// Edits an app request on its way to the agent: whether it changed, and
    /// the token of the server injected into it.
    fn client_request(&mut self, method: &str, message: &mut Value) -> (bool, Option<String>) {
        let Some(params) = message.get_mut("params") else { return (false, None) };
        match method {
            "initialize" => match params.get("protocolVersion").and_then(Value::as_u64) {
                Some(asked) if asked > PROTOCOL_VERSION => {
                    params["protocolVersion"] = Value::from(PROTOCOL_VERSION);
                    (true, None)
                }
                _ => (false, None),
            },
            "session/new" | "session/load" | "session/resume" | "session/fork" => {
                let cwd = params.get("cwd").and_then(Value::as_str).map(str::to_string);
                let token = self.new_token(cwd.clone());
                let Some(args) = self.injection.args(cwd.as_deref(), &token) else {
                    tracing::warn!(method, "a session without an absolute cwd: ctxfs is not added to it");
                    self.tokens.remove(&token);
                    return (false, None);
                };
                let server = rewrite::stdio_server(&self.injection.exe, &args);
                if !rewrite::inject_server(params, server) {
                    self.tokens.remove(&token);
                    return (false, None);
                }
                if self.claude {
                    rewrite::append_claude_prompt(params, rewrite::PROMPT_ADDITION);
                }
                (true, Some(token))
            }
            "session/prompt" => {
                if let Some(session) = params.get("sessionId").and_then(Value::as_str) {
                    self.sessions.entry(session.to_string()).or_default().cancelled = false;
                }
                (false, None)
            }
            _ => (false, None),
        }
    }

    // ----- from the agent -----

    pub(crate) fn on_agent(&mut self, raw: &[u8]) -> Vec<Effect> {
        if self.is_dead() {
            return Vec::new();
        }
        let message = match serde_json::from_slice::<Value>(raw) {
            Ok(message) if message.is_object() => message,
            _ => return self.garbage(raw),
        };
        let method = message.get("method").and_then(Value::as_str).map(str::to_string);
        let id = message.get("id").cloned();
        match (method.as_deref(), id) {
            (None, Some(id)) => self.agent_response(raw, &message, &id),
            (Some("session/request_permission"), Some(id)) => {
                let call = message.pointer("/params/toolCall").cloned().unwrap_or(Value::Null);
                let session = str_at(&message, "/params/sessionId").unwrap_or_default();
                let tracked = str_at(&call, "/toolCallId")
                    .and_then(|c| self.sessions.get(session).and_then(|s| s.calls.get(c)))
                    .map(|c| c.tool);
                if rewrite::tool_of(&call).or(tracked).is_some() {
                    if let Some(option) = message.get("params").and_then(rewrite::allow_option) {
                        // ctxfs's gate decides (and asks, through the app, when it must).
                        let answer = json!({"jsonrpc": "2.0", "id": id,
                            "result": {"outcome": {"outcome": "selected", "optionId": option}}});
                        return vec![Effect::Agent(line(&answer))];
                    }
                }
                vec![Effect::Client(raw.to_vec())]
            }
            (Some("session/update"), None) => {
                let mut message = message;
                let changed = self.agent_update(&mut message);
                let mut effects = changed.1;
                effects.insert(0, Effect::Client(if changed.0 { line(&message) } else { raw.to_vec() }));
                effects
            }
            _ => vec![Effect::Client(raw.to_vec())],
        }
    }

    fn garbage(&mut self, raw: &[u8]) -> Vec<Effect> {
        self.garbage.0 += 1;
        self.garbage.1 += raw.len();
        let shown: String = String::from_utf8_lossy(raw).chars().take(200).collect();
        tracing::warn!("the agent wrote a line that is not an ACP message: {shown}");
        if self.garbage.0 > MAX_GARBAGE_LINES || self.garbage.1 > MAX_GARBAGE_BYTES {
            return vec![Effect::Fatal(format!(
                "the agent wrote {} lines ({} bytes) on stdout that are not ACP messages, the last: {shown:?}",
                self.garbage.0, self.garbage.1
            ))];
        }
        Vec::new()
    }

    fn agent_response(&mut self, raw: &[u8], message: &Value, id: &Value) -> Vec<Effect> {
        let Some(pending) = self.pending.remove(&key(id)) else {
            return vec![Effect::Client(raw.to_vec())];
        };
        match pending.method.as_str() {
            "initialize" if message.get("result").is_some() => {
                let version = message.pointer("/result/protocolVersion");
                if version.and_then(Value::as_u64) != Some(PROTOCOL_VERSION) {
                    // Answered (with the reason) when the relay ends the agent.
                    self.pending.insert(key(id), pending);
                    let shown = version.map_or("none".to_string(), |v| v.to_string());
                    return vec![Effect::Fatal(format!(
                        "the agent speaks ACP protocol version {shown}, and ctxfs acp relays version {PROTOCOL_VERSION} only"
                    ))];
                }
                self.claude =
                    message.pointer("/result/agentCapabilities/_meta/claudeCode").is_some_and(Value::is_object);
            }
            "session/new" | "session/fork" => match (&pending.token, str_at(message, "/result/sessionId")) {
                (Some(token), Some(session)) => {
                    let session = session.to_string();
                    self.bind(token, &session);
                }
                (Some(token), None) => {
                    self.tokens.remove(token);
                }
                _ => {}
            },
            _ => {}
        }
        vec![Effect::Client(raw.to_vec())]
    }

    /// A `session/update`: ctxfs's tool calls rendered, compaction noticed.
    fn agent_update(&mut self, message: &mut Value) -> (bool, Vec<Effect>) {
        let Some(session) = str_at(message, "/params/sessionId").map(str::to_string) else {
            return (false, Vec::new());
        };
        let Some(update) = message.pointer_mut("/params/update") else { return (false, Vec::new()) };
        match update.get("sessionUpdate").and_then(Value::as_str) {
            Some("tool_call" | "tool_call_update") => (self.tool_call(&session, update), Vec::new()),
            Some("agent_message_chunk") if self.claude => {
                let text = str_at(update, "/content/text").unwrap_or_default();
                if text.contains(CLAUDE_COMPACTED) {
                    return (false, self.context_effects(&session, "compact"));
                }
                (false, Vec::new())
            }
            _ => (false, Vec::new()),
        }
    }

    fn tool_call(&mut self, session: &str, update: &mut Value) -> bool {
        let Some(call_id) = update.get("toolCallId").and_then(Value::as_str).map(str::to_string) else { return false };
        let state = self.sessions.entry(session.to_string()).or_default();
        let known = state.calls.get(&call_id).map(|c| c.tool);
        let Some(tool) = rewrite::tool_of(update).or(known) else { return false };
        self.seq += 1;
        let seq = self.seq;
        if state.calls.len() >= KEPT_CALLS && !state.calls.contains_key(&call_id) {
            let oldest = state.calls.iter().min_by_key(|(_, c)| c.seq).map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                state.calls.remove(&oldest);
            }
        }
        let call = state.calls.entry(call_id).or_insert(Call {
            tool,
            args: Value::Null,
            content: None,
            done: false,
            asked: false,
            seq,
        });
        if let Some(args) = update.get("rawInput").filter(|a| a.as_object().is_some_and(|o| !o.is_empty())) {
            call.args = args.clone();
        }
        if let Some(content) = update.get("content").filter(|c| c.is_array()) {
            call.content = Some(content.clone());
        }
        let args = call.args.clone();
        let content = call.content.clone();
        let finishing = rewrite::finished(update) && !call.done;
        if rewrite::finished(update) {
            call.done = true;
        }
        let cwd = state.cwd.clone();
        if update.get("title").and_then(Value::as_str).is_some_and(rewrite::is_raw_name) && !args.is_null() {
            let mut title = rewrite::title(tool, &args);
            if let Some(cwd) = cwd.as_deref().filter(|c| c.len() > 1) {
                // Paths under the session's directory are shown from it.
                title = title.replace(&format!("{}/", cwd.trim_end_matches('/')), "");
            }
            update["title"] = Value::from(title);
        }
        let named: Vec<Value> = rewrite::named_paths(tool, &args)
            .into_iter()
            .filter_map(|(given, line)| {
                self.injection.host_path(cwd.as_deref(), &given).map(|path| rewrite::location(&path, line))
            })
            .collect();
        let reported = if finishing { self.take_result(session, tool, &rewrite::shown_text(update)) } else { None };
        let (locations, diffs) = match &reported {
            Some(result) => {
                let locations = if tool == "mv" || tool == "read" || result.paths.is_empty() {
                    named
                } else {
                    result.paths.iter().map(|p| rewrite::location(p, None)).collect()
                };
                (locations, diffs_of(&result.files))
            }
            None => (named, Vec::new()),
        };
        rewrite::render(update, tool, locations, diffs, content.as_ref());
        true
    }

    /// The reported result a finished call shows: the one whose id its text
    /// names, else the oldest of that tool not yet shown. An agent that keeps
    /// one MCP server per directory (opencode) runs every session's calls on
    /// the server injected last, so an id is looked for in every server's
    /// results too (ids are unique in a data directory).
    fn take_result(&mut self, session: &str, tool: &str, text: &str) -> Option<Reported> {
        let mut own: Vec<String> =
            self.tokens.iter().filter(|(_, t)| t.session.as_deref() == Some(session)).map(|(k, _)| k.clone()).collect();
        own.sort();
        let mut all: Vec<String> = self.tokens.keys().cloned().collect();
        all.sort();
        for token in own.iter().chain(&all) {
            let results = &mut self.tokens.get_mut(token)?.results;
            if let Some(at) = results.iter().position(|r| rewrite::mentions(text, &r.id)) {
                return results.remove(at);
            }
        }
        for token in &own {
            let results = &mut self.tokens.get_mut(token)?.results;
            if let Some(at) = results.iter().position(|r| r.tool == tool) {
                return results.remove(at);
            }
        }
        None
    }

    // ----- from the injected servers -----

    pub(crate) fn link_up(&mut self, token: &str) -> bool {
        match self.tokens.get_mut(token) {
            Some(t) => {
                t.live = true;
                true
            }
            None => false,
        }
    }

    pub(crate) fn link_down(&mut self, token: &str) {
        if let Some(t) = self.tokens.get_mut(token) {
            t.live = false;
        }
    }

    /// A call's result: kept for its tool call. True when its turn was
    /// cancelled, so the model never sees it.
    pub(crate) fn reported(&mut self, result: Reported) -> bool {
        let Some(token) = self.tokens.get_mut(&result.token) else { return false };
        let cancelled = token.session.as_ref().and_then(|s| self.sessions.get(s)).is_some_and(|s| s.cancelled);
        if token.results.len() >= KEPT_RESULTS {
            token.results.pop_front();
        }
        token.results.push_back(result);
        cancelled
    }

    /// The gate's prompt as the app's `session/request_permission`, asked on
    /// the agent's tool call for it. Without one (the agent reports its calls
    /// late, or not at all) it is `Ok(None)` unless `may_show`, and then the
    /// relay shows a call of its own to ask on. `Err`: why it cannot be asked.
    pub(crate) fn ask(&mut self, asked: &Asked, may_show: bool) -> Result<Option<Asking>, String> {
        if let Some(why) = &self.dead {
            return Err(why.clone());
        }
        let own = self.tokens.get(&asked.token).and_then(|t| t.session.clone());
        let waiting_in = |session: &Session| {
            session
                .calls
                .iter()
                .filter(|(_, c)| !c.done && !c.asked && c.tool == asked.tool)
                .min_by_key(|(_, c)| c.seq)
                .map(|(k, c)| (k.clone(), c.seq))
        };
        // The server's own session first; else (one server for many sessions)
        // the session with the newest call of that tool still waiting.
        let found = own.as_ref().and_then(|s| self.sessions.get(s).and_then(waiting_in).map(|(k, _)| (s.clone(), k)));
        let found = found.or_else(|| {
            self.sessions
                .iter()
                .filter_map(|(name, s)| waiting_in(s).map(|(k, seq)| (seq, name.clone(), k)))
                .max_by_key(|(seq, _, _)| *seq)
                .map(|(_, name, k)| (name, k))
        });
        let (session, waiting) = match (found, own) {
            (Some((session, call)), _) => (session, Some(call)),
            (None, Some(_)) if !may_show => return Ok(None),
            (None, Some(session)) => (session, None),
            (None, None) => return Err("the relay knows no session for this server".to_string()),
        };
        let id = format!("{RELAY_ID_PREFIX}{}", self.next_request);
        self.next_request += 1;
        let mut effects = Vec::new();
        let locations: Vec<Value> = asked.paths.iter().map(|p| rewrite::location(p, None)).collect();
        let kind = rewrite::kind(&asked.tool);
        let (call_id, shown) = match waiting {
            Some(call_id) => {
                if let Some(call) = self.sessions.get_mut(&session).and_then(|s| s.calls.get_mut(&call_id)) {
                    call.asked = true;
                }
                (call_id, None)
            }
            None => {
                let call_id = format!("ctxfs-call-{}", self.next_request);
                let update = json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session,
                    "update": {"sessionUpdate": "tool_call", "toolCallId": call_id, "title": asked.description,
                        "kind": kind, "status": "pending", "locations": locations}}});
                effects.push(Effect::Client(line(&update)));
                (call_id.clone(), Some((session.clone(), call_id)))
            }
        };
        let diffs = diffs_of(&asked.files);
        let every_file_shown = !asked.files.is_empty() && diffs.len() == asked.files.len();
        let text = if every_file_shown {
            // The diffs show the change; the text keeps the question and its notes.
            asked
                .message
                .split("\n\n")
                .filter(|p| p.starts_with("Allow ") || p.starts_with("Note: "))
                .collect::<Vec<_>>()
                .join("\n\n")
        } else {
            asked.message.clone()
        };
        let mut content = vec![rewrite::text_content(&text)];
        content.extend(diffs);
        let offered: Vec<(String, String)> = asked.options.iter().map(|c| (c.id.clone(), c.label.clone())).collect();
        let request = json!({"jsonrpc": "2.0", "id": id, "method": "session/request_permission", "params": {
            "sessionId": session,
            "toolCall": {"toolCallId": call_id, "title": asked.description, "kind": kind, "status": "pending",
                "locations": locations, "content": content},
            "options": rewrite::permission_options(&offered),
        }});
        effects.push(Effect::Client(line(&request)));
        Ok(Some(Asking { id, effects, shown }))
    }

    /// The agent cannot be relayed: every app request still waiting gets
    /// `why`, and so will every later one.
    pub(crate) fn agent_gone(&mut self, why: &str) -> Vec<Effect> {
        if self.dead.is_some() {
            return Vec::new();
        }
        self.dead = Some(why.to_string());
        let mut pending: Vec<Pending> = self.pending.drain().map(|(_, p)| p).collect();
        pending.sort_by_key(|p| p.id.to_string());
        pending.into_iter().map(|p| Effect::Client(error_line(&p.id, why))).collect()
    }
}

/// A prompt put to the app (see `Core::ask`).
#[derive(Debug)]
pub(crate) struct Asking {
    /// The request's id.
    pub id: String,
    pub effects: Vec<Effect>,
    /// The session and id of the tool call the relay showed to ask on, to be
    /// finished with the answer (the agent's own calls finish themselves).
    pub shown: Option<(String, String)>,
}

/// The update that finishes a tool call the relay showed for a prompt.
pub(crate) fn finish_shown(session: &str, call_id: &str, allowed: bool) -> Effect {
    let status = if allowed { "completed" } else { "failed" };
    Effect::Client(line(&json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session,
        "update": {"sessionUpdate": "tool_call_update", "toolCallId": call_id, "status": status}}})))
}

/// The diff contents of the files with texts.
fn diffs_of(files: &[FileText]) -> Vec<Value> {
    files
        .iter()
        .filter_map(|f| f.texts.as_ref().map(|t| rewrite::diff_content(&f.path, t.before.as_deref(), &t.after)))
        .collect()
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
