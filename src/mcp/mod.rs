//! The MCP front door: the engine's tools over MCP's stdio transport (rmcp).
//!
//! One connection is one session, opened at `initialize` with the client's
//! name. A client that declares roots is asked for them once initialized,
//! and the session is re-opened narrowed to them (the engine decides what
//! narrowing means; roots never widen anything).
//!
//! Ordering: rmcp runs each request in a task of its own, so two calls of
//! one connection could otherwise start in either order. The transport gives
//! every tool call a ticket as it reads it, and a call starts only when all
//! earlier ones have finished: calls run one at a time, in arrival order (see
//! `order`). The roots refresh takes a ticket too, so no call runs on the
//! un-narrowed session once the client has said it has roots.
//!
//! Bad input never ends the server: see `transport` for lines, and tool
//! errors are answers (`isError`), never protocol errors.

mod approve;
mod order;
mod transport;

/// How often a search's indexing is reported as `notifications/progress`, at most.
const PROGRESS_EVERY: Duration = Duration::from_millis(250);

/// Sends `notifications/progress` for `token` as a search's refresh goes: files
/// checked of those found (the total once the walk is over; a words stage and
/// the embedding after it on one scale, `ProgressSteps`), in order, at most
/// every `PROGRESS_EVERY` and always when a stage is over. The task that sends
/// them ends once the sink is dropped and all are sent.
fn progress_sink(
    peer: rmcp::service::Peer<RoleServer>,
    token: rmcp::model::ProgressToken,
) -> (crate::engine::ProgressSink, tokio::task::JoinHandle<()>) {
    let (send, mut receive) = tokio::sync::mpsc::unbounded_channel::<rmcp::model::ProgressNotificationParam>();
    let forwarded = tokio::spawn(async move {
        while let Some(param) = receive.recv().await {
            if peer.notify_progress(param).await.is_err() {
                break;
            }
        }
    });
    let steps = Mutex::new(crate::engine::ProgressSteps::new(PROGRESS_EVERY));
    let sink: crate::engine::ProgressSink = Arc::new(move |p: &crate::index::hybrid::Progress| {
        let Some(step) = steps.lock().unwrap_or_else(|e| e.into_inner()).next(p) else { return };
        let mut param = rmcp::model::ProgressNotificationParam::new(token.clone(), step.done as f64);
        param.total = step.total.map(|total| total as f64);
        param.message = Some(step.message);
        let _ = send.send(param);
    });
    (sink, forwarded)
}

#[cfg(test)]
mod tests;

use crate::engine::{Engine, Session, SessionOptions, ToolAnswer, ToolInfo};
use crate::paths::uri::file_uri_to_path;
use order::{Sequencer, Ticket};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, CustomRequest, CustomResult, DiscoverResult,
    ErrorData, Implementation, InitializeRequestParams, InitializeResult, ListToolsResult, MetaObject,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{RoleServer, ServerHandler};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};

/// How long to wait for the client's answer to `roots/list`.
const ROOTS_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves MCP on stdin/stdout until the client closes stdin. With `resume`
/// (`--session ID`) the connection's session goes on with that id.
pub async fn serve_stdio(engine: Arc<Engine>, resume: Option<String>) -> anyhow::Result<()> {
    let (read, write) = rmcp::transport::stdio_pipes();
    serve(engine, read, write, resume).await
}

/// Serves one MCP connection over a byte stream pair.
pub async fn serve<H, R, W>(host: Arc<H>, read: R, write: W, resume: Option<String>) -> anyhow::Result<()>
where
    H: Host,
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    serve_with(host, None, read, write, resume).await
}

/// Serves one MCP connection, with a companion watching its calls (the ACP
/// relay's side channel, `crate::acp::link`).
pub async fn serve_with<H, R, W>(
    host: Arc<H>,
    companion: Option<Arc<dyn Companion>>,
    read: R,
    write: W,
    resume: Option<String>,
) -> anyhow::Result<()>
where
    H: Host,
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    let transport = transport::LineTransport::new(read, write, Sequencer::new());
    serve_transport_with(host, companion, transport, resume).await
}

async fn serve_transport_with<H, R, W>(
    host: Arc<H>,
    companion: Option<Arc<dyn Companion>>,
    transport: transport::LineTransport<R, W>,
    resume: Option<String>,
) -> anyhow::Result<()>
where
    H: Host,
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    let mut server = McpServer::new(host);
    server.resume = resume;
    server.companion = companion;
    let running = match rmcp::serve_server(server, transport).await {
        Ok(running) => running,
        Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => {
            tracing::info!("the client left before initializing");
            return Ok(());
        }
        Err(e) => return Err(anyhow::anyhow!("MCP handshake failed: {e}")),
    };
    let reason = running.waiting().await?;
    tracing::info!(?reason, "MCP connection ended");
    Ok(())
}

/// What the front door needs of the engine. `Engine` is the one real host;
/// the trait lets the protocol layer be tested without it.
pub trait Host: Send + Sync + 'static {
    type Session: HostSession;
    fn tools(&self) -> Vec<ToolInfo>;
    fn open_session(&self, options: SessionOptions) -> anyhow::Result<Arc<Self::Session>>;
}

pub trait HostSession: Send + Sync + 'static {
    fn id(&self) -> &str;
    fn call(&self, tool: &str, args: serde_json::Value) -> ToolAnswer;
    fn instructions(&self) -> String;
    /// Sets who is asked about a change (`None`: nobody can be asked).
    fn set_approver(&self, _approver: Option<Arc<dyn crate::gate::Approver>>) {}
    /// Sets who hears how far a search's indexing has come (`None`: nobody).
    fn set_progress(&self, _sink: Option<crate::engine::ProgressSink>) {}
    /// Whether a call may take long or wait on something (the user, the
    /// index, a walk of a tree, a large file). Only those leave the protocol's thread.
    fn may_wait(&self, _tool: &str, _args: &serde_json::Value) -> bool {
        true
    }
    /// Something outside the MCP connection changed what the model holds.
    fn context(&self, _event: &ContextEvent) {}
    /// Readies the search index in the background for the session's first
    /// search (`Session::ready_index`), once the session is set up.
    fn ready_index(&self) {}
    /// The whole text before and after the change result `id` made to `path`.
    fn change_texts(&self, _id: &str, _path: &str) -> Option<crate::hygiene::Texts> {
        None
    }
}

/// An event about the model's context that MCP itself never carries (the
/// ACP relay sees them in the app's protocol).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContextEvent {
    /// The next request carries no earlier result (a loaded or resumed session).
    Reset,
    /// The agent compacted its context.
    Compact,
    /// The result with this id never reaches the model (its turn was cancelled).
    Forget(String),
}

/// Watches one connection's sessions and calls; set up by `serve_with`.
/// Calls run on the protocol's thread or a blocking one, so its methods
/// may block, but briefly.
pub trait Companion: Send + Sync + 'static {
    /// Who is asked about changes, in place of elicitation.
    fn approver(&self) -> Arc<dyn crate::gate::Approver>;
    /// A session was opened (or re-opened, narrowed to roots) and is now the one in use.
    fn opened(&self, session: Arc<dyn HostSession>);
    /// Runs one call through `run` and returns its answer.
    fn call(
        &self,
        tool: &str,
        args: serde_json::Value,
        run: &mut dyn FnMut(serde_json::Value) -> ToolAnswer,
    ) -> ToolAnswer;
}

impl Host for Engine {
    type Session = Session;
    fn tools(&self) -> Vec<ToolInfo> {
        Engine::tools(self)
    }
    fn open_session(&self, options: SessionOptions) -> anyhow::Result<Arc<Session>> {
        let session = Engine::open_session(self, options)?;
        // MCP never says where a request begins.
        session.requests_are_unmarked();
        Ok(session)
    }
}

impl HostSession for Session {
    fn id(&self) -> &str {
        Session::id(self)
    }
    fn call(&self, tool: &str, args: serde_json::Value) -> ToolAnswer {
        Session::call(self, tool, args)
    }
    fn instructions(&self) -> String {
        Session::instructions(self)
    }
    fn set_progress(&self, sink: Option<crate::engine::ProgressSink>) {
        Session::set_progress(self, sink)
    }
    fn set_approver(&self, approver: Option<Arc<dyn crate::gate::Approver>>) {
        match approver {
            Some(approver) => Session::set_approver(self, approver),
            None => Session::clear_approver(self),
        }
    }
    fn may_wait(&self, tool: &str, args: &serde_json::Value) -> bool {
        Session::call_may_wait(self, tool, args)
    }
    fn ready_index(&self) {
        Session::ready_index(self)
    }
    fn context(&self, event: &ContextEvent) {
        match event {
            ContextEvent::Reset => Session::new_request(self, false),
            ContextEvent::Compact => {
                let table = Session::compact(self);
                tracing::info!(lines = table.lines().count(), "compacted: the dedupe table is empty");
            }
            ContextEvent::Forget(id) => {
                let earlier =
                    crate::hygiene::format::parse_id(id).map(|n| crate::hygiene::format::id_text(n.saturating_sub(1)));
                if let Some(Err(e)) = earlier.map(|earlier| Session::rewind(self, &earlier)) {
                    tracing::warn!("could not forget {id}: {e}");
                }
            }
        }
    }
    fn change_texts(&self, id: &str, path: &str) -> Option<crate::hygiene::Texts> {
        Session::change_texts(self, id, path)
    }
}

/// One connection's handler.
pub struct McpServer<H: Host> {
    host: Arc<H>,
    tools: Vec<Tool>,
    state: Mutex<State<H::Session>>,
    /// Held while a session is being opened, so two openers never race.
    opening: tokio::sync::Mutex<()>,
    /// The session id to go on with (`--session`), also when roots reopen it.
    resume: Option<String>,
    companion: Option<Arc<dyn Companion>>,
}

struct State<S> {
    client_name: Option<String>,
    /// The current session, or why there is none.
    session: Option<Result<Arc<S>, String>>,
    instructions: String,
    /// The roots the session was last narrowed to.
    roots: Option<Vec<PathBuf>>,
    /// The client cannot show approval prompts (no elicitation, no companion).
    no_prompts: bool,
}

impl<H: Host> McpServer<H> {
    pub fn new(host: Arc<H>) -> Self {
        let tools = host.tools().into_iter().map(to_mcp_tool).collect();
        McpServer {
            host,
            tools,
            state: Mutex::new(State {
                client_name: None,
                session: None,
                instructions: String::new(),
                roots: None,
                no_prompts: false,
            }),
            opening: tokio::sync::Mutex::new(()),
            resume: None,
            companion: None,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State<H::Session>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Opens a session for the current client name and `roots`, replacing the current one.
    /// Opening may take a while (the engine reads the instruction chain): runs off the runtime.
    async fn open(&self, roots: Option<Vec<PathBuf>>) {
        let _opening = self.opening.lock().await;
        self.open_locked(roots).await
    }

    async fn open_locked(&self, roots: Option<Vec<PathBuf>>) {
        let client_name = self.state().client_name.clone();
        let host = self.host.clone();
        let no_prompts = self.state().no_prompts;
        let options = SessionOptions { client_name, roots: roots.clone(), resume: self.resume.clone(), no_prompts };
        let opened = tokio::task::spawn_blocking(move || {
            host.open_session(options).map(|s| {
                let instructions = s.instructions();
                (s, instructions)
            })
        })
        .await
        .map_err(|e| anyhow::anyhow!("opening the session panicked: {e}"))
        .and_then(|r| r);
        let mut state = self.state();
        state.roots = roots;
        match opened {
            Ok((session, instructions)) => {
                tracing::info!(session = session.id(), "session opened");
                if let Some(companion) = &self.companion {
                    companion.opened(session.clone());
                }
                state.session = Some(Ok(session));
                state.instructions = instructions;
            }
            Err(e) => {
                tracing::error!("could not open a session: {e:#}");
                state.session = Some(Err(format!("{e:#}")));
            }
        }
    }

    /// The session, opening one first if none was (a client that skipped
    /// `initialize`, using 2026-07-28 inline metadata: its name comes with
    /// each request).
    async fn session(&self, context: &RequestContext<RoleServer>) -> Result<Arc<H::Session>, String> {
        if let Some(existing) = self.state().session.clone() {
            return existing;
        }
        let _opening = self.opening.lock().await;
        {
            let mut state = self.state();
            if let Some(existing) = state.session.clone() {
                return existing;
            }
            if state.client_name.is_none() {
                state.client_name = context.client_info().map(|c| c.name);
            }
            state.no_prompts = self.companion.is_none() && approve::client_form(context).is_none();
        }
        self.open_locked(None).await;
        self.state().session.clone().unwrap_or_else(|| Err("no session".into()))
    }

    /// Asks the client for its roots and re-opens the session narrowed to them.
    #[allow(deprecated)] // roots are deprecated from protocol 2026-07-28 on; older clients use them
    async fn refresh_roots(&self, peer: &rmcp::Peer<RoleServer>) {
        let declared = peer.peer_info().is_some_and(|info| info.capabilities.roots.is_some());
        if !declared {
            return;
        }
        let asked = tokio::time::timeout(ROOTS_TIMEOUT, peer.list_roots()).await;
        let roots = match asked {
            Ok(Ok(result)) => result.roots,
            Ok(Err(e)) => {
                tracing::warn!("the client declared roots but roots/list failed: {e}; keeping the session as it is");
                return;
            }
            Err(_) => {
                tracing::warn!("the client did not answer roots/list in time; keeping the session as it is");
                return;
            }
        };
        let mut paths = Vec::new();
        for root in &roots {
            match file_uri_to_path(&root.uri) {
                Some(path) => paths.push(path),
                None => tracing::warn!(uri = root.uri, "ignored a root that is not a local file:// URI"),
            }
        }
        if paths.is_empty() {
            // No usable roots says nothing about where to work: keep the posture's own view.
            tracing::warn!("the client's roots name no local directory; the session is not narrowed");
            return;
        }
        // The client's order counts (the first root is the start), repeats do not.
        let mut seen = std::collections::HashSet::new();
        paths.retain(|p| seen.insert(p.clone()));
        if self.state().roots.as_ref() == Some(&paths) {
            return;
        }
        tracing::info!(?paths, "narrowing the session to the client's roots");
        self.open(Some(paths)).await;
    }
}

fn to_mcp_tool(info: ToolInfo) -> Tool {
    let annotations = annotations(&info);
    let schema = match info.input_schema {
        serde_json::Value::Object(map) => map,
        other => {
            tracing::error!(tool = info.name, "input schema is not an object: {other}");
            serde_json::Map::from_iter([("type".to_string(), serde_json::Value::from("object"))])
        }
    };
    Tool::new(info.name, info.description, Arc::new(schema)).with_annotations(annotations).with_title(info.title)
}

/// A tool's MCP annotations (issue 13, item 14), which clients use to let
/// reads run unasked: its title, and hints from the tool table's traits. Every
/// tool works on the project's files only, a closed world.
fn annotations(info: &ToolInfo) -> rmcp::model::ToolAnnotations {
    let annotations = rmcp::model::ToolAnnotations::with_title(info.title.clone()).open_world(false);
    if info.hints.read_only {
        annotations.read_only(true)
    } else {
        annotations.read_only(false).destructive(info.hints.destructive).idempotent(info.hints.idempotent)
    }
}

/// The MCP result for an engine answer: the text the model reads, `isError`,
/// and the answer's id and facts in `_meta` (not in `structuredContent`:
/// some clients, Claude Code among them, then show the model that JSON
/// instead of the text).
fn to_mcp_result(answer: ToolAnswer) -> CallToolResult {
    let content = vec![ContentBlock::text(answer.text)];
    let result = if answer.is_error { CallToolResult::error(content) } else { CallToolResult::success(content) };
    let mut meta = serde_json::Map::new();
    meta.insert("ctxfs/id".into(), answer.id.into());
    if answer.facts != Default::default() {
        if let Ok(facts) = serde_json::to_value(crate::wire::CallFacts::from(answer.facts.clone())) {
            meta.insert("ctxfs/facts".into(), facts);
        }
    }
    result.with_meta(Some(MetaObject(meta)))
}

fn tool_error(text: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(text)])
}

impl<H: Host> ServerHandler for McpServer<H> {
    fn get_info(&self) -> ServerConfig {
        let config = ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("ctxfs", env!("CARGO_PKG_VERSION")).with_title("ctxfs"));
        // Always a string (maybe empty), so clients need not tell "none" from "empty".
        config.with_instructions(self.state().instructions.clone())
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        context.peer.set_peer_info(request.clone());
        let first = {
            let mut state = self.state();
            let first = state.session.is_none();
            if first {
                state.client_name = Some(request.client_info.name.clone());
                // A client on a protocol version without elicitation cannot be asked either.
                state.no_prompts = self.companion.is_none() && approve::client_form(&context).is_none();
            }
            first
        };
        if first {
            self.open(None).await;
        }
        // A failed open is not a failed handshake (that would end the server):
        // tool calls answer why instead.
        self.negotiate_initialize(&request)
    }

    /// The 2026-07-28 opener: opens the session (as `initialize` does) so
    /// that the answer carries the instructions.
    async fn discover(&self, context: RequestContext<RoleServer>) -> Result<DiscoverResult, ErrorData> {
        let _ = self.session(&context).await;
        Ok(DiscoverResult::from_server_info(self.supported_protocol_versions().into_owned(), self.get_info()))
    }

    async fn on_initialized(&self, mut context: NotificationContext<RoleServer>) {
        let ticket = context.extensions.remove::<Ticket>();
        if let Some(ticket) = &ticket {
            ticket.turn().await;
        }
        self.refresh_roots(&context.peer).await;
        // The session is set up (narrowed to the client's roots, if any): the index can be readied for it.
        let session = self.state().session.clone();
        if let Some(Ok(session)) = session {
            session.ready_index();
        }
        drop(ticket);
    }

    async fn on_roots_list_changed(&self, mut context: NotificationContext<RoleServer>) {
        let ticket = context.extensions.remove::<Ticket>();
        if let Some(ticket) = &ticket {
            ticket.turn().await;
        }
        self.refresh_roots(&context.peer).await;
        drop(ticket);
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools.clone()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        mut context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let ticket = context.extensions.remove::<Ticket>();
        if let Some(ticket) = &ticket {
            tokio::select! {
                _ = ticket.turn() => {}
                _ = context.ct.cancelled() => {
                    tracing::info!(tool = %request.name, "call cancelled before it started");
                    return Err(ErrorData::invalid_request("cancelled", None));
                }
            }
        }
        if context.ct.is_cancelled() {
            return Err(ErrorData::invalid_request("cancelled", None));
        }
        let session = match self.session(&context).await {
            Ok(session) => session,
            Err(why) => return Ok(tool_error(format!("The session could not be opened: {why}")).into()),
        };
        let name = request.name.to_string();
        let mut args = request.arguments.unwrap_or_default();
        // Arguments that were not an object (see the transport): the tool refuses them.
        let args = match args.remove(transport::NOT_AN_OBJECT) {
            Some(given) => given,
            None => serde_json::Value::Object(args),
        };
        tracing::debug!(tool = name, "call");
        // A change the gate asks about is put to the user by elicitation,
        // when the client can; else the session's mode decides alone.
        let (cancel_send, cancelled) = tokio::sync::watch::channel(false);
        let (done_send, done) = tokio::sync::oneshot::channel::<()>();
        if let Some(companion) = &self.companion {
            session.set_approver(Some(companion.approver()));
        } else if let Some(form) = approve::client_form(&context) {
            let approver = approve::McpApprover {
                peer: context.peer.clone(),
                handle: tokio::runtime::Handle::current(),
                cancelled,
                form,
            };
            session.set_approver(Some(Arc::new(approver)));
            let ct = context.ct.clone();
            tokio::spawn(async move {
                tokio::select! {
                    _ = ct.cancelled() => { let _ = cancel_send.send(true); }
                    _ = done => {}
                }
            });
        } else {
            session.set_approver(None);
        }
        // A search may index first: a client that sent a progress token hears how far it got.
        let token = context.meta.get_progress_token().filter(|_| name == "search");
        let (sink, forwarded) = match token {
            Some(token) => {
                let (sink, forwarded) = progress_sink(context.peer.clone(), token);
                (Some(sink), Some(forwarded))
            }
            None => (None, None),
        };
        session.set_progress(sink);
        let answer = if session.may_wait(&name, &args) {
            // The ticket moves into the blocking job: the next call starts only
            // when this one has really finished, even if this future is dropped.
            let companion = self.companion.clone();
            tokio::task::spawn_blocking(move || {
                let answer = match companion {
                    Some(companion) => companion.call(&name, args, &mut |args| session.call(&name, args)),
                    None => session.call(&name, args),
                };
                session.set_progress(None);
                drop(ticket);
                drop(done_send);
                answer
            })
            .await
            .map_err(|e| e.to_string())
        } else {
            // A call of one file or directory runs right here: the hand-off
            // to the blocking pool and back cost as much as the call.
            let answer = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match &self.companion {
                Some(companion) => companion.call(&name, args, &mut |args| session.call(&name, args)),
                None => session.call(&name, args),
            }));
            drop(ticket);
            drop(done_send);
            answer.map_err(|_| "panicked".to_owned())
        };
        // Every progress notification goes out before the answer (the sink is gone with the call).
        if let Some(forwarded) = forwarded {
            let _ = forwarded.await;
        }
        Ok(match answer {
            Ok(answer) => to_mcp_result(answer),
            Err(e) => {
                tracing::error!("a tool call panicked: {e}");
                tool_error("Internal error: the call failed unexpectedly. The server is still running.")
            }
        }
        .into())
    }

    /// Well-formed requests rmcp could not type land here (its request enum is
    /// untagged): a known method with bad params answers "invalid params".
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        let CustomRequest { method, params, .. } = request;
        if method == "tools/call" {
            let why = match serde_json::from_value::<CallToolRequestParams>(params.unwrap_or_default()) {
                Err(e) => e.to_string(),
                Ok(_) => "unexpected shape".into(),
            };
            return Err(ErrorData::invalid_params(format!("Invalid params for tools/call: {why}"), None));
        }
        if KNOWN_METHODS.contains(&method.as_str()) {
            return Err(ErrorData::invalid_params(format!("Invalid params for {method}"), None));
        }
        Err(ErrorData::new(rmcp::model::ErrorCode::METHOD_NOT_FOUND, format!("Method not found: {method}"), None))
    }
}

const KNOWN_METHODS: &[&str] = &[
    "initialize",
    "ping",
    "server/discover",
    "tools/list",
    "tools/call",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "resources/subscribe",
    "resources/unsubscribe",
    "completion/complete",
    "logging/setLevel",
];
