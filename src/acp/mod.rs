//! The ACP front door: `ctxfs acp -- AGENT [ARGS…]`, a relay that makes any
//! Agent Client Protocol agent a ctxfs agent.
//!
//! To the app it is an ordinary ACP agent on stdio; it starts the real agent
//! in a process group of its own and relays every message both ways, adding:
//! ctxfs as an MCP server in every `session/new`, `session/load`,
//! `session/resume` and `session/fork` (and, for Claude Code's adapter, a
//! system-prompt line saying to use it); ACP `kind`, `locations` and whole-file
//! `diff` content on ctxfs's tool calls; one permission layer (the agent's own
//! permission requests for ctxfs's tools are allowed by the relay, and ctxfs's
//! gate asks the user through the app's `session/request_permission`); and
//! context events (a load, a cancelled turn, a compaction) passed to the
//! injected server's dedupe table. The injected server reports to the relay
//! over a private Unix socket (`link`).
//!
//! Why a hand-written line relay and not the `agent-client-protocol` crate
//! (5.2): the crate's proxy role runs under its conductor (`proxy/initialize`,
//! `proxy/successor` envelopes), not between a plain stdio app and a plain
//! stdio agent; its agent and client roles parse every message into typed
//! structs and answer methods they do not know, while a relay must pass
//! unknown methods, notifications, fields and `_meta` on untouched. ACP's
//! wire is one JSON-RPC message per line: here a message the relay does not
//! act on goes on as the same bytes, and the few it edits are parsed as
//! `serde_json::Value`s and changed only in the fields named (`rewrite`).
//! Protocol shapes stay in this module (the door layer).
//!
//! Files: `relay` (the state machine), `rewrite` (message edits), `link`
//! (the side channel and the MCP server's end of it), `agent` (the child
//! process group). Not here: the tools, the gate (the injected `ctxfs mcp`
//! runs them) and the MCP protocol (`crate::mcp`).

mod agent;
pub mod link;
mod relay;
mod rewrite;

use crate::engine::Defaults;
use link::{Asked, Reported};
use relay::{Core, Effect, Injection, World};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot};

/// The longest message the relay takes from either side.
pub const MAX_MESSAGE: usize = 32 * 1024 * 1024;
/// How long a prompt of the gate waits for the agent to report the tool call
/// it is about (opencode reports it while the call already runs).
const CALL_PATIENCE: Duration = Duration::from_secs(2);

/// What `ctxfs acp` is started with.
#[derive(Debug, Clone)]
pub struct Options {
    /// The posture and gate flags the injected `ctxfs mcp` gets (no posture: each session's `cwd`).
    pub defaults: Defaults,
    /// The agent's command line.
    pub agent: Vec<OsString>,
}

/// A line read with a limit.
enum Line {
    Full(Vec<u8>),
    TooLong,
    Eof,
}

/// Reads one line (without its `\n` or `\r\n`). A line over `max` is
/// `TooLong`: with `skip`, after its rest was read and dropped; without,
/// at once (a flood has no end to wait for).
async fn next_line<R: AsyncBufRead + Unpin>(reader: &mut R, max: usize, skip: bool) -> std::io::Result<Line> {
    let mut out = Vec::new();
    let mut over = false;
    loop {
        let buf = reader.fill_buf().await?;
        if buf.is_empty() {
            return Ok(if over {
                Line::TooLong
            } else if out.is_empty() {
                Line::Eof
            } else {
                Line::Full(out)
            });
        }
        let (part, end) = match buf.iter().position(|b| *b == b'\n') {
            Some(at) => (at, true),
            None => (buf.len(), false),
        };
        if !over && out.len() + part > max {
            over = true;
            out = Vec::new();
            if !skip {
                return Ok(Line::TooLong);
            }
        }
        if !over {
            out.extend_from_slice(&buf[..part]);
        }
        reader.consume(part + usize::from(end));
        if end {
            if over {
                return Ok(Line::TooLong);
            }
            if out.last() == Some(&b'\r') {
                out.pop();
            }
            return Ok(Line::Full(out));
        }
    }
}

/// The running relay's shared parts.
struct Shell {
    core: Mutex<Core>,
    to_client: mpsc::Sender<Vec<u8>>,
    to_agent: Mutex<Option<mpsc::Sender<Vec<u8>>>>,
    links: Mutex<HashMap<String, mpsc::Sender<Vec<u8>>>>,
    asks: Mutex<HashMap<String, oneshot::Sender<Value>>>,
    agent: agent::Agent,
    /// The app left: the agent ending now is no failure.
    closing: std::sync::atomic::AtomicBool,
}

impl Shell {
    fn core(&self) -> std::sync::MutexGuard<'_, Core> {
        self.core.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Carries out effects, in order.
    async fn apply(self: &Arc<Self>, effects: Vec<Effect>) {
        for effect in effects {
            match effect {
                Effect::Client(line) => {
                    let _ = self.to_client.send(line).await;
                }
                Effect::Agent(line) => {
                    let sender = self.to_agent.lock().unwrap_or_else(|e| e.into_inner()).clone();
                    if let Some(sender) = sender {
                        let _ = sender.send(line).await;
                    }
                }
                Effect::Link { token, message } => {
                    let sender = self.links.lock().unwrap_or_else(|e| e.into_inner()).get(&token).cloned();
                    if let Some(sender) = sender {
                        let _ = sender.send(json_line(&message)).await;
                    }
                }
                Effect::Answer { id, response } => {
                    if let Some(waiting) = self.asks.lock().unwrap_or_else(|e| e.into_inner()).remove(&id) {
                        let _ = waiting.send(response);
                    }
                }
                Effect::Fatal(why) => Box::pin(self.fail(why)).await,
            }
        }
    }

    /// The agent cannot be relayed: end its group and answer what waits.
    async fn fail(self: &Arc<Self>, why: String) {
        if self.core().is_dead() {
            return;
        }
        tracing::error!("{why}");
        self.to_agent.lock().unwrap_or_else(|e| e.into_inner()).take();
        self.agent.end(Duration::from_millis(200)).await;
        let message = self.agent.explain(&why);
        let effects = self.core().agent_gone(&message);
        self.asks.lock().unwrap_or_else(|e| e.into_inner()).clear();
        Box::pin(self.apply(effects)).await;
    }
}

fn json_line(message: &Value) -> Vec<u8> {
    let mut out = serde_json::to_vec(message).unwrap_or_default();
    out.push(b'\n');
    out
}

/// The injected server's flags from the relay's.
fn injection(defaults: &Defaults, exe: String, socket: String) -> Injection {
    let world = match (&defaults.tree, &defaults.view) {
        (Some(dir), Some(view)) => World::Tree { dir: dir.clone(), view: view.clone() },
        _ => World::Root(defaults.root.clone()),
    };
    let mut flags = Vec::new();
    let mut flag = |name: &str, value: Option<String>| {
        if let Some(value) = value {
            flags.push(format!("--{name}"));
            flags.push(value);
        }
    };
    let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.to_string_lossy().into_owned());
    flag("data", path(&defaults.data));
    flag("config", path(&defaults.config));
    flag(
        "host",
        defaults.host.map(|h| if h == crate::hygiene::HostKind::Fresh { "fresh" } else { "resend" }.to_string()),
    );
    flag("mode", Some(defaults.mode.unwrap_or_default().as_str().to_string()));
    flag("approval-timeout", defaults.approval_timeout.map(|t| t.as_secs_f64().to_string()));
    flag("embedder", defaults.embedder.as_ref().map(|e| e.to_string()));
    flag("embedder-model", defaults.embedder_model.clone());
    Injection { exe, socket, world, start: defaults.start.clone(), flags }
}

/// A private directory for the link's socket (mode 0700), removed on drop.
struct Private(PathBuf);

impl Private {
    fn new() -> std::io::Result<Private> {
        use std::os::unix::fs::DirBuilderExt;
        let base = std::env::temp_dir();
        let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        for attempt in 0..100u32 {
            let dir = base.join(format!("ctxfs-acp-{}-{stamp:x}-{attempt}", std::process::id()));
            match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => return Ok(Private(dir)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(std::io::Error::other("could not make a private directory for the link"))
    }
}

impl Drop for Private {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs the relay until the app closes its end (or a signal ends it).
/// Exit 0 when the agent was well to the end, 1 when it failed.
pub async fn run(options: Options) -> anyhow::Result<bool> {
    let private = Private::new()?;
    let socket = private.0.join("link.sock");
    let listener = tokio::net::UnixListener::bind(&socket)?;
    let exe = std::env::current_exe()?.to_string_lossy().into_owned();
    let core = Core::new(injection(&options.defaults, exe, socket.to_string_lossy().into_owned()));

    let (to_client, client_lines) = mpsc::channel::<Vec<u8>>(256);
    let client_writer = tokio::spawn(write_lines(tokio::io::stdout(), client_lines));

    let started = agent::Agent::start(&options.agent);
    let (agent, pipes, failed) = match started {
        Ok((agent, pipes)) => (agent, Some(pipes), None),
        Err((agent, why)) => (agent, None, Some(why)),
    };
    let shell = Arc::new(Shell {
        core: Mutex::new(core),
        to_client,
        to_agent: Mutex::new(None),
        links: Mutex::new(HashMap::new()),
        asks: Mutex::new(HashMap::new()),
        agent,
        closing: std::sync::atomic::AtomicBool::new(false),
    });
    if let Some(why) = failed {
        let effects = shell.core().agent_gone(&why);
        shell.apply(effects).await;
        tracing::error!("{why}");
    }
    if let Some(pipes) = pipes {
        let (to_agent, agent_lines) = mpsc::channel::<Vec<u8>>(256);
        *shell.to_agent.lock().unwrap_or_else(|e| e.into_inner()) = Some(to_agent);
        tokio::spawn(write_lines(pipes.stdin, agent_lines));
        tokio::spawn(agent::relay_stderr(pipes.stderr, shell.agent.clone()));
        tokio::spawn(from_agent(shell.clone(), pipes.stdout));
    }
    tokio::spawn(accept_links(shell.clone(), listener));

    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    tokio::select! {
        _ = from_client(shell.clone()) => tracing::info!("the app closed its end"),
        _ = terminate.recv() => tracing::info!("terminated"),
        _ = interrupt.recv() => tracing::info!("interrupted"),
        _ = hangup.recv() => tracing::info!("hung up"),
    }
    let healthy = !shell.core().is_dead();
    shell.closing.store(true, std::sync::atomic::Ordering::SeqCst);
    // Closing its stdin asks the agent to end; its group ends regardless.
    shell.to_agent.lock().unwrap_or_else(|e| e.into_inner()).take();
    shell.agent.end(Duration::from_secs(2)).await;
    // An empty line tells the writer to stop once everything before it is out.
    let _ = shell.to_client.send(Vec::new()).await;
    drop(shell);
    let _ = tokio::time::timeout(Duration::from_secs(2), client_writer).await;
    drop(private);
    Ok(healthy)
}

/// Writes each line, ending it with `\n` if it has none (lines as read have
/// none), until an empty one.
async fn write_lines<W: tokio::io::AsyncWrite + Unpin>(mut out: W, mut lines: mpsc::Receiver<Vec<u8>>) {
    while let Some(mut line) = lines.recv().await {
        if line.is_empty() {
            break;
        }
        if line.last() != Some(&b'\n') {
            line.push(b'\n');
        }
        if out.write_all(&line).await.is_err() || out.flush().await.is_err() {
            tracing::warn!("a peer stopped reading");
            break;
        }
    }
}

async fn from_client(shell: Arc<Shell>) {
    let mut reader = BufReader::with_capacity(1 << 16, tokio::io::stdin());
    loop {
        match next_line(&mut reader, MAX_MESSAGE, true).await {
            Ok(Line::Full(line)) if line.iter().all(u8::is_ascii_whitespace) => {}
            Ok(Line::Full(line)) => {
                let effects = shell.core().on_client(&line);
                shell.apply(effects).await;
            }
            Ok(Line::TooLong) => tracing::warn!("the app sent a message over {MAX_MESSAGE} bytes; it was dropped"),
            Ok(Line::Eof) => return,
            Err(e) => {
                tracing::warn!("reading the app's messages failed: {e}");
                return;
            }
        }
    }
}

async fn from_agent(shell: Arc<Shell>, stdout: tokio::process::ChildStdout) {
    let mut reader = BufReader::with_capacity(1 << 16, stdout);
    let why = loop {
        match next_line(&mut reader, MAX_MESSAGE, false).await {
            Ok(Line::Full(line)) if line.iter().all(u8::is_ascii_whitespace) => {}
            Ok(Line::Full(line)) => {
                let effects = shell.core().on_agent(&line);
                shell.apply(effects).await;
                if shell.core().is_dead() {
                    return;
                }
            }
            Ok(Line::TooLong) => break format!("the agent wrote a message over {} MiB", MAX_MESSAGE >> 20),
            Ok(Line::Eof) => break "the agent closed its output".to_string(),
            Err(e) => break format!("reading the agent's output failed: {e}"),
        }
    };
    if shell.closing.load(std::sync::atomic::Ordering::SeqCst) {
        return;
    }
    shell.fail(why).await;
}

async fn accept_links(shell: Arc<Shell>, listener: tokio::net::UnixListener) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(serve_link(shell.clone(), stream));
            }
            Err(e) => {
                tracing::error!("the link socket failed: {e}");
                return;
            }
        }
    }
}

/// One injected server's connection.
async fn serve_link(shell: Arc<Shell>, stream: tokio::net::UnixStream) {
    let (read, write) = stream.into_split();
    let (send, lines) = mpsc::channel::<Vec<u8>>(64);
    tokio::spawn(write_lines(write, lines));
    let mut reader = BufReader::new(read);
    let mut token: Option<String> = None;
    loop {
        let line = match next_line(&mut reader, MAX_MESSAGE, true).await {
            Ok(Line::Full(line)) => line,
            Ok(Line::TooLong) => continue,
            Ok(Line::Eof) | Err(_) => break,
        };
        let Ok(message) = serde_json::from_slice::<Value>(&line) else { continue };
        let id = message.get("id").cloned();
        let params = message.get("params").cloned().unwrap_or(Value::Null);
        match message.get("method").and_then(Value::as_str) {
            Some("hello") => {
                let Some(said) = params.get("token").and_then(Value::as_str) else { continue };
                if !shell.core().link_up(said) {
                    tracing::warn!("an MCP server with an unknown token connected; ignored");
                    break;
                }
                shell.links.lock().unwrap_or_else(|e| e.into_inner()).insert(said.to_string(), send.clone());
                token = Some(said.to_string());
            }
            Some("result") => {
                let forget = match serde_json::from_value::<Reported>(params) {
                    Ok(reported) if token.as_deref() == Some(reported.token.as_str()) => {
                        shell.core().reported(reported)
                    }
                    _ => false,
                };
                let _ = send.send(json_line(&json!({"id": id, "result": {"forget": forget}}))).await;
            }
            Some("approve") => {
                let Ok(asked) = serde_json::from_value::<Asked>(params) else { continue };
                if token.as_deref() != Some(asked.token.as_str()) {
                    continue;
                }
                let (shell, send) = (shell.clone(), send.clone());
                tokio::spawn(async move {
                    let answer = approve(&shell, &asked).await;
                    let _ = send.send(json_line(&json!({"id": id, "result": answer}))).await;
                });
            }
            _ => {}
        }
    }
    if let Some(token) = token {
        shell.core().link_down(&token);
        shell.links.lock().unwrap_or_else(|e| e.into_inner()).remove(&token);
    }
}

/// Puts the gate's prompt to the user through the app, on the agent's tool
/// call for it: an agent that reports its calls late gets a moment to do so.
async fn approve(shell: &Arc<Shell>, asked: &Asked) -> Value {
    let patience = tokio::time::Instant::now() + CALL_PATIENCE;
    let asking = loop {
        let may_show = tokio::time::Instant::now() >= patience;
        match shell.core().ask(asked, may_show) {
            Ok(Some(asking)) => break asking,
            Ok(None) => {}
            Err(why) => return json!({"dismissed": why}),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let (send, answered) = oneshot::channel();
    shell.asks.lock().unwrap_or_else(|e| e.into_inner()).insert(asking.id.clone(), send);
    shell.apply(asking.effects).await;
    let offered: Vec<(String, String)> = asked.options.iter().map(|c| (c.id.clone(), c.label.clone())).collect();
    let within = Duration::from_secs_f64(asked.timeout.clamp(0.0, 1e9) + 1.0);
    let answer = tokio::time::timeout(within, answered).await;
    shell.asks.lock().unwrap_or_else(|e| e.into_inner()).remove(&asking.id);
    let unanswered = !matches!(answer, Ok(Ok(_)));
    let decision = match answer {
        Ok(Ok(response)) => rewrite::chosen(&response, &offered),
        Ok(Err(_)) => Err("the agent ended before the answer".to_string()),
        Err(_) => Err("no answer in time".to_string()),
    };
    if unanswered {
        // The prompt may still be up in the app: take it back.
        let cancel = json!({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": asking.id}});
        let _ = shell.to_client.send(json_line(&cancel)).await;
    }
    if let Some((session, call_id)) = &asking.shown {
        let allowed = decision.as_ref().is_ok_and(|d| d != "deny");
        shell.apply(vec![relay::finish_shown(session, call_id, allowed)]).await;
    }
    match decision {
        Ok(decision) => json!({"decision": decision}),
        Err(why) => json!({"dismissed": why}),
    }
}

#[cfg(test)]
mod line_tests {
    use super::*;

    async fn all(mut input: &[u8], max: usize, skip: bool) -> Vec<Option<String>> {
        let mut out = Vec::new();
        loop {
            match next_line(&mut input, max, skip).await.unwrap() {
                Line::Full(line) => out.push(Some(String::from_utf8(line).unwrap())),
                Line::TooLong => {
                    out.push(None);
                    if !skip {
                        return out;
                    }
                }
                Line::Eof => return out,
            }
        }
    }

    #[tokio::test]
    async fn lines_are_cut_at_newlines_and_held_to_the_limit() {
        let some = |s: &str| Some(s.to_string());
        assert_eq!(all(b"a\r\nbbb\n\nlast", 4, true).await, [some("a"), some("bbb"), some(""), some("last")]);
        // Too long: dropped to its end with `skip`, else the end of reading.
        assert_eq!(all(b"abcd\nok\n", 3, true).await, [None, some("ok")]);
        assert_eq!(all(b"abcdabcdabcd", 3, true).await, [None]);
        assert_eq!(all(b"ok\nabcd\nmore\n", 3, false).await, [some("ok"), None]);
        assert_eq!(all(b"", 3, true).await, Vec::<Option<String>>::new());
    }
}
