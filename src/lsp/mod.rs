//! The LSP front door: the engine's sessions over a language server
//! connection (tower-lsp-server, Content-Length framing on stdio).
//!
//! Editors start language servers; this is how their extensions reach
//! ctxfs. Besides ctxfs's own methods (`ctxfs/…`, see `protocol` and
//! `docs/protocol.md`), the connection gives what only an editor has: the
//! user's unsaved buffers (an [`Overlay`](crate::vfs::overlay::Overlay)
//! under the engine), edits applied in the editor (`workspace/applyEdit`,
//! through [`bridge`]), progress and log messages.
//!
//! Ordering:
//! - the input loop (`transport`) reads every message in arrival order and
//!   applies document notifications itself, so buffers change in order;
//! - each session has one thread running its calls from a FIFO queue. A
//!   handler puts its job in the queue before its first await, and tower
//!   starts handlers in arrival order, so calls run in the order they
//!   arrived and a write never overtakes an earlier read;
//! - waits for the client (applyEdit answers, approval prompts, progress
//!   tokens) happen on a session's thread (or the gate's prompt thread) or in
//!   spawned tasks with timeouts, never in a handler that tower counts: the
//!   input loop never stalls on them;
//! - when the connection ends, each session's thread finishes its queue and
//!   closes its session (results written, ids released) before `serve` returns.
//!
//! The gate: sessions start in the mode `initializationOptions` or `--mode`
//! give (default ask); a change that asks is put to the user with
//! `window/showMessageRequest` (see [`approve`]); `ctxfs/setMode` and
//! `ctxfs/grants` change the mode and list or revoke grants.

mod approve;
mod bridge;
mod edits;
pub mod framing;
pub mod protocol;
mod setup;
mod transport;

pub use crate::engine::Defaults;

use crate::engine::{Engine, Session, SessionOptions};
use crate::vfs::overlay::{Documents, Encoding};
use protocol::*;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tower_lsp_server::jsonrpc::{Error, ErrorCode, Result};
use tower_lsp_server::ls_types::{
    InitializeParams, InitializeResult, InitializedParams, MessageType, NumberOrString, PositionEncodingKind,
    ServerCapabilities, ServerInfo, TextDocumentSyncCapability, TextDocumentSyncKind, TextDocumentSyncOptions,
};
use tower_lsp_server::{Client, LanguageServer, LspService, Server};

/// How many results or changes a listing gives by default.
const LIST_LIMIT: u64 = 200;
/// The version of ctxfs's own LSP methods (`experimental.ctxfs.protocol`).
/// 2: `ctxfs/results`, `ctxfs/changes`, `ctxfs/changeText`, texts in approval requests.
pub const PROTOCOL_VERSION: u32 = 2;
/// How long a write to an open document waits for `workspace/applyEdit` by default.
const EDIT_TIMEOUT: Duration = Duration::from_secs(10);
/// grep, glob and search calls running longer than this report progress by default.
const PROGRESS_AFTER: Duration = Duration::from_millis(200);
/// How long the client may take to create a progress token.
const TOKEN_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the end of a connection waits for its sessions to close.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);
/// Handlers tower runs at once. Calls wait for their session's thread, not
/// for the client, so this only bounds how many calls are queued in tower.
const CONCURRENCY: usize = 32;

/// Serves LSP on stdin/stdout until the client exits or closes stdin.
pub async fn serve_stdio(defaults: Defaults) -> anyhow::Result<()> {
    serve(defaults, tokio::io::stdin(), tokio::io::stdout()).await
}

/// Serves one LSP connection over a byte stream pair.
pub async fn serve<R, W>(defaults: Defaults, input: R, output: W) -> anyhow::Result<()>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin,
{
    let docs = Documents::new();
    let threads = Threads::default();
    let (service, socket) = LspService::build(|client| Backend::new(client, defaults, docs.clone(), threads.clone()))
        .custom_method("ctxfs/tools", Backend::tools)
        .custom_method("ctxfs/openSession", Backend::open_session)
        .custom_method("ctxfs/call", Backend::call)
        .custom_method("ctxfs/newRequest", Backend::new_request)
        .custom_method("ctxfs/compact", Backend::compact)
        .custom_method("ctxfs/rewind", Backend::rewind)
        .custom_method("ctxfs/recall", Backend::recall)
        .custom_method("ctxfs/setMode", Backend::set_mode)
        .custom_method("ctxfs/grants", Backend::grants)
        .custom_method("ctxfs/results", Backend::results)
        .custom_method("ctxfs/resultText", Backend::result_text)
        .custom_method("ctxfs/changes", Backend::changes)
        .custom_method("ctxfs/changeText", Backend::change_text)
        .custom_method(transport::INVALID, Backend::invalid)
        .finish();
    let report = Arc::new(Notable { client: service.inner().client.clone() });
    let (to_server, from_input) = tokio::io::duplex(1 << 20);
    let input = tokio::spawn(transport::pump(input, to_server, docs, report));
    Server::new(from_input, output, socket).concurrency_level(CONCURRENCY).serve(service).await;
    input.abort();
    close_sessions(threads).await;
    tracing::info!("LSP connection ended");
    Ok(())
}

/// The threads of a connection's sessions.
type Threads = Arc<Mutex<Vec<std::thread::JoinHandle<()>>>>;

/// After the connection ended (the backend and its workers are gone): waits
/// for each session's thread to finish its queue and close its session, so
/// its results are written and its ids released, for at most `CLOSE_TIMEOUT`.
async fn close_sessions(threads: Threads) {
    let handles = std::mem::take(&mut *threads.lock().unwrap_or_else(|e| e.into_inner()));
    if handles.is_empty() {
        return;
    }
    let joined = tokio::task::spawn_blocking(move || {
        for handle in handles {
            let _ = handle.join();
        }
    });
    if tokio::time::timeout(CLOSE_TIMEOUT, joined).await.is_err() {
        tracing::warn!("a session was still busy when the connection ended; its last results may not be kept");
    }
}

/// Sends notable events of the input loop to the log and the client's log.
struct Notable {
    client: Client,
}

impl transport::Report for Notable {
    fn notable(&self, what: String) {
        tracing::warn!("{what}");
        let client = self.client.clone();
        tokio::spawn(async move { client.log_message(MessageType::WARNING, format!("ctxfs: {what}")).await });
    }
}

/// A session and the thread that runs its calls, one at a time, in order.
struct Worker {
    session: Arc<Session>,
    queue: Mutex<std::sync::mpsc::Sender<Job>>,
}

type Job = Box<dyn FnOnce(&Session) + Send>;

impl Worker {
    /// Starts the session's thread (kept in `threads`, to be joined when the
    /// connection ends); it stops when the worker is dropped.
    fn start(session: Arc<Session>, threads: &Threads) -> std::io::Result<Arc<Worker>> {
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        let runner = session.clone();
        let thread = std::thread::Builder::new().name(format!("ctxfs-session-{}", session.id())).spawn(move || {
            for job in rx {
                // Session::call catches a tool's panic; this keeps the thread
                // alive through anything else.
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(&runner))).is_err() {
                    tracing::error!(session = runner.id(), "a session job panicked");
                }
            }
        })?;
        threads.lock().unwrap_or_else(|e| e.into_inner()).push(thread);
        Ok(Arc::new(Worker { session, queue: Mutex::new(tx) }))
    }

    /// Queues a job now (in the caller's order) and answers its result later.
    fn submit<T: Send + 'static>(
        &self,
        job: impl FnOnce(&Session) -> T + Send + 'static,
    ) -> tokio::sync::oneshot::Receiver<T> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move |session| {
            let _ = tx.send(job(session));
        });
        let queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        if queue.send(job).is_err() {
            tracing::error!(session = self.session.id(), "the session's thread is gone");
        }
        rx
    }
}

/// What `initialize` settled.
struct Setup {
    engine: std::result::Result<Arc<Engine>, String>,
    roots: Option<Vec<PathBuf>>,
    describe: String,
    client_name: Option<String>,
    /// The client shows `$/progress` for tokens the server creates.
    progress: bool,
    progress_after: Duration,
    /// Writes to open documents go through `workspace/applyEdit`.
    edits_in_editor: bool,
    /// The mode sessions start in.
    mode: crate::gate::Mode,
}

pub struct Backend {
    client: Client,
    defaults: Defaults,
    docs: Arc<Documents>,
    setup: OnceLock<Setup>,
    sessions: Mutex<HashMap<String, Arc<Worker>>>,
    /// Held while a session is opened, so two opens of one id make one worker.
    opening: tokio::sync::Mutex<()>,
    tokens: AtomicU64,
    /// The sessions' threads.
    threads: Threads,
}

fn server_error(message: impl Into<String>) -> Error {
    Error { code: ErrorCode::ServerError(-32000), message: message.into().into(), data: None }
}

fn encoding_of(params: &InitializeParams) -> Encoding {
    let offered = params.capabilities.general.as_ref().and_then(|g| g.position_encodings.as_ref());
    match offered {
        Some(list) if list.contains(&PositionEncodingKind::UTF8) => Encoding::Utf8,
        _ => Encoding::Utf16,
    }
}

impl Backend {
    fn new(client: Client, defaults: Defaults, docs: Arc<Documents>, threads: Threads) -> Backend {
        Backend {
            client,
            defaults,
            docs,
            setup: OnceLock::new(),
            sessions: Mutex::new(HashMap::new()),
            opening: tokio::sync::Mutex::new(()),
            tokens: AtomicU64::new(1),
            threads,
        }
    }

    /// What `initialize` settled, when it can serve.
    fn engine(&self) -> Result<(&Setup, Arc<Engine>)> {
        let setup = self.setup.get().ok_or_else(|| server_error("not initialized"))?;
        match &setup.engine {
            Ok(engine) => Ok((setup, engine.clone())),
            Err(why) => Err(server_error(format!("ctxfs could not start: {why}"))),
        }
    }

    fn worker(&self, id: &str) -> Result<Arc<Worker>> {
        self.sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .cloned()
            .ok_or_else(|| Error::invalid_params(format!("no session {id:?}: open one with ctxfs/openSession")))
    }

    async fn tools(&self) -> Result<ToolsResult> {
        Ok(ToolsResult { tools: crate::engine::registry::tools().into_iter().map(Tool::from).collect() })
    }

    async fn open_session(&self, params: OpenSessionParams) -> Result<OpenSessionResult> {
        let (setup, engine) = self.engine()?;
        let _opening = self.opening.lock().await;
        let existing = params
            .resume
            .as_ref()
            .and_then(|id| self.sessions.lock().unwrap_or_else(|e| e.into_inner()).get(id).cloned());
        let worker = match existing {
            Some(worker) => worker,
            None => {
                let options = SessionOptions {
                    client_name: params.client_name.clone().or_else(|| setup.client_name.clone()),
                    roots: setup.roots.clone(),
                    // The editor asks through window/showMessageRequest.
                    ..Default::default()
                };
                let resume = params.resume.clone();
                let engine = engine.clone();
                let opened = tokio::task::spawn_blocking(move || match resume {
                    Some(id) => engine.reopen_session(&id, options),
                    None => engine.open_session(options),
                })
                .await
                .map_err(|e| server_error(format!("opening the session failed: {e}")))?;
                let session = opened.map_err(|e| match params.resume {
                    Some(_) => Error::invalid_params(format!("{e:#}")),
                    None => server_error(format!("{e:#}")),
                })?;
                // A change the gate asks about is put to the user in the editor.
                session.set_approver(Arc::new(approve::LspApprover {
                    client: self.client.clone(),
                    handle: tokio::runtime::Handle::current(),
                    session: session.id().to_string(),
                }));
                session.ready_index();
                let worker = Worker::start(session, &self.threads)
                    .map_err(|e| server_error(format!("cannot start the session: {e}")))?;
                self.sessions
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(worker.session.id().to_string(), worker.clone());
                tracing::info!(session = worker.session.id(), "session opened");
                worker
            }
        };
        let resumed = params.resume.is_some();
        let answer = worker.submit(|session| (session.instructions(), session.instruction_chain()));
        let (instructions, chain) = answer.await.map_err(|_| server_error("the session's thread is gone"))?;
        let chain = InstructionChain::new(chain, |path| engine.vpath_to_host(path));
        Ok(OpenSessionResult { session: worker.session.id().to_string(), resumed, instructions, chain })
    }

    async fn call(&self, params: CallParams) -> Result<CallResult> {
        let (setup, _) = self.engine()?;
        let worker = self.worker(&params.session)?;
        let tool = params.tool.clone();
        let args = serde_json::Value::Object(params.args.unwrap_or_default());
        // A search may index first: its counts go to the `$/progress` report.
        let (counts_send, counts) = tokio::sync::mpsc::unbounded_channel::<(u32, String)>();
        let sink = (tool == "search").then(|| counts_sink(counts_send));
        // Queued before the first await: arrival order.
        let answer = {
            let tool = tool.clone();
            worker.submit(move |session| {
                session.set_progress(sink);
                let answer = session.call(&tool, args);
                session.set_progress(None);
                answer
            })
        };
        let done = self.progress(setup, &tool, params.work_done_token, counts);
        let answer = answer.await.map_err(|_| server_error("the session's thread is gone"))?;
        drop(done);
        Ok(answer.into())
    }

    /// Reports `$/progress` for a long grep, glob or search: from a spawned
    /// task (creating a token waits for the client), ended when the returned
    /// sender is dropped; a search's indexing counts (`counts`: percentage and
    /// message) are reported as they come.
    fn progress(
        &self,
        setup: &Setup,
        tool: &str,
        token: Option<Token>,
        mut counts: tokio::sync::mpsc::UnboundedReceiver<(u32, String)>,
    ) -> Option<tokio::sync::oneshot::Sender<()>> {
        let reports = crate::tools::spec::find(tool).is_some_and(|t| t.traits.progress);
        if !reports || (token.is_none() && !setup.progress) {
            return None;
        }
        let (done, mut finished) = tokio::sync::oneshot::channel::<()>();
        let client = self.client.clone();
        let after = setup.progress_after;
        let number = self.tokens.fetch_add(1, Ordering::Relaxed);
        let title = format!("ctxfs: {tool}");
        tokio::spawn(async move {
            if !after.is_zero() {
                tokio::select! {
                    _ = tokio::time::sleep(after) => {}
                    _ = &mut finished => return,
                }
            }
            let token = match token {
                Some(Token::Number(n)) => NumberOrString::Number(n),
                Some(Token::String(s)) => NumberOrString::String(s),
                None => {
                    let token = NumberOrString::String(format!("ctxfs-{number}"));
                    match tokio::time::timeout(TOKEN_TIMEOUT, client.create_work_done_progress(token.clone())).await {
                        Ok(Ok(())) => token,
                        _ => return,
                    }
                }
            };
            let progress = client.progress(token, title).with_message("searching").with_percentage(0).begin().await;
            let mut counting = true;
            loop {
                tokio::select! {
                    _ = &mut finished => break,
                    count = counts.recv(), if counting => match count {
                        Some((percentage, message)) => progress.report_with_message(message, percentage).await,
                        None => counting = false,
                    },
                }
            }
            progress.finish().await;
        });
        Some(done)
    }

    async fn new_request(&self, params: NewRequestParams) -> Result<()> {
        self.engine()?;
        let worker = self.worker(&params.session)?;
        let carries = params.carries_earlier;
        worker.submit(move |s| s.new_request(carries)).await.map_err(|_| server_error("the session's thread is gone"))
    }

    async fn compact(&self, params: CompactParams) -> Result<CompactResult> {
        self.engine()?;
        let worker = self.worker(&params.session)?;
        let text = worker.submit(|s| s.compact()).await.map_err(|_| server_error("the session's thread is gone"))?;
        Ok(CompactResult { text })
    }

    async fn rewind(&self, params: RewindParams) -> Result<()> {
        self.engine()?;
        let worker = self.worker(&params.session)?;
        let to = params.to.clone();
        let result =
            worker.submit(move |s| s.rewind(&to)).await.map_err(|_| server_error("the session's thread is gone"))?;
        result.map_err(Error::invalid_params)
    }

    async fn recall(&self, params: RecallParams) -> Result<CallResult> {
        self.engine()?;
        let worker = self.worker(&params.session)?;
        let mut args = serde_json::Map::new();
        args.insert("id".into(), params.id.into());
        if let Some(offset) = params.offset {
            args.insert("offset".into(), offset.into());
        }
        if let Some(limit) = params.limit {
            args.insert("limit".into(), limit.into());
        }
        let answer = worker
            .submit(move |s| s.call("recall", serde_json::Value::Object(args)))
            .await
            .map_err(|_| server_error("the session's thread is gone"))?;
        Ok(answer.into())
    }

    /// Changes a session's mode at once (not queued behind its calls).
    async fn set_mode(&self, params: SetModeParams) -> Result<SetModeResult> {
        self.engine()?;
        let worker = self.worker(&params.session)?;
        let mode = crate::gate::Mode::from(params.mode);
        let previous = worker.session.mode();
        worker.session.set_mode(mode);
        tracing::info!(session = worker.session.id(), %previous, %mode, "mode changed");
        Ok(SetModeResult {
            mode: mode.into(),
            previous: previous.into(),
            instruction: mode.instruction(true).map(str::to_string),
        })
    }

    /// Lists a session's grants, after revoking some if asked. Not queued
    /// behind the session's calls: it answers while a prompt is open.
    async fn grants(&self, params: GrantsParams) -> Result<GrantsResult> {
        self.engine()?;
        let worker = self.worker(&params.session)?;
        let session = worker.session.clone();
        let revoke = params.revoke.clone();
        let done = tokio::task::spawn_blocking(move || {
            let revoked = match revoke.as_deref() {
                None => None,
                Some("*") => Some(session.revoke_grants(None)?),
                Some(target) => Some(session.revoke_grants(Some(target))?),
            };
            Ok::<_, String>(GrantsResult {
                grants: session.grants().into_iter().map(GrantEntry::from).collect(),
                revoked,
            })
        })
        .await
        .map_err(|e| server_error(format!("listing the grants failed: {e}")))?;
        done.map_err(|e| server_error(format!("nothing revoked: {e}")))
    }

    /// Lists a session's results, newest first. Not queued behind its calls.
    async fn results(&self, params: ResultsParams) -> Result<ResultsResult> {
        self.engine()?;
        let worker = self.worker(&params.session)?;
        let limit = params.limit.unwrap_or(LIST_LIMIT).min(usize::MAX as u64) as usize;
        let session = worker.session.clone();
        let listed = tokio::task::spawn_blocking(move || session.results(limit))
            .await
            .map_err(|e| server_error(format!("listing the results failed: {e}")))?;
        Ok(ResultsResult { results: listed.into_iter().map(ResultItem::from).collect() })
    }

    /// A stored result's full text, without recording a result. Not queued behind its calls.
    async fn result_text(&self, params: ResultTextParams) -> Result<ResultTextResult> {
        self.engine()?;
        let worker = self.worker(&params.session)?;
        let session = worker.session.clone();
        let id = params.id.clone();
        let text = tokio::task::spawn_blocking(move || session.stored_result(&id))
            .await
            .map_err(|e| server_error(format!("reading the result failed: {e}")))?;
        let number = crate::hygiene::format::parse_id(&params.id);
        match (text, number) {
            (Some(text), Some(n)) => Ok(ResultTextResult { id: crate::hygiene::format::id_text(n), text }),
            _ => Err(Error::invalid_params(format!("no stored result {} in this session", params.id))),
        }
    }

    /// Lists a session's changes, newest first, with their diffs. Not queued behind its calls.
    async fn changes(&self, params: ChangesParams) -> Result<ChangesResult> {
        self.engine()?;
        let worker = self.worker(&params.session)?;
        let limit = params.limit.unwrap_or(LIST_LIMIT).min(usize::MAX as u64) as usize;
        let session = worker.session.clone();
        let listed = tokio::task::spawn_blocking(move || session.changes(limit))
            .await
            .map_err(|e| server_error(format!("listing the changes failed: {e}")))?;
        Ok(ChangesResult { changes: listed.into_iter().map(ChangeItem::from).collect() })
    }

    /// A changed file's text before and after one change.
    async fn change_text(&self, params: ChangeTextParams) -> Result<ChangeTextResult> {
        self.engine()?;
        let worker = self.worker(&params.session)?;
        let session = worker.session.clone();
        let (id, path) = (params.id.clone(), params.path.clone());
        let texts = tokio::task::spawn_blocking(move || session.change_texts(&id, &path))
            .await
            .map_err(|e| server_error(format!("reading the change failed: {e}")))?;
        match texts {
            Some((before, after)) => Ok(ChangeTextResult { path: params.path, before, after }),
            None => Err(Error::invalid_params(format!("result {} changed no file {}", params.id, params.path))),
        }
    }

    /// Answers a malformed request the input loop could still read an id from.
    async fn invalid(&self, params: serde_json::Value) -> Result<()> {
        let why = params.get("why").and_then(|w| w.as_str()).unwrap_or("not a JSON-RPC 2.0 request");
        Err(Error { code: ErrorCode::InvalidRequest, message: format!("Invalid request: {why}").into(), data: None })
    }
}

impl LanguageServer for Backend {
    async fn initialize(&self, params: InitializeParams) -> Result<InitializeResult> {
        let options: InitializationOptions = match params.initialization_options.clone() {
            None | Some(serde_json::Value::Null) => InitializationOptions::default(),
            // A Lua `{}` (Neovim's `init_options = {}`) arrives as `[]`.
            Some(serde_json::Value::Array(items)) if items.is_empty() => InitializationOptions::default(),
            Some(value) => serde_json::from_value(value)
                .map_err(|e| Error::invalid_params(format!("initializationOptions: {e}")))?,
        };
        // Checked here, so a bad value fails `initialize` as a bad mode does.
        setup::approval_timeout(&options).map_err(|e| Error::invalid_params(format!("initializationOptions: {e}")))?;
        setup::embedder_of(&self.defaults, &options)
            .map_err(|e| Error::invalid_params(format!("initializationOptions: {e}")))?;
        let mode = setup::mode_of(&self.defaults, &options);
        let encoding = encoding_of(&params);
        self.docs.set_encoding(encoding);
        let mut folders: Vec<PathBuf> = params
            .workspace_folders
            .iter()
            .flatten()
            .filter_map(|f| crate::paths::uri::file_uri_to_path(f.uri.as_str()))
            .collect();
        #[allow(deprecated)]
        if folders.is_empty() {
            if let Some(path) = params.root_uri.as_ref().and_then(|u| crate::paths::uri::file_uri_to_path(u.as_str())) {
                folders.push(path);
            } else if let Some(path) = params.root_path.as_ref() {
                folders.push(PathBuf::from(path));
            }
        }
        let defaults = self.defaults.clone();
        let docs = self.docs.clone();
        let built_options = options.clone();
        let built = tokio::task::spawn_blocking(move || setup::build(&defaults, &built_options, &folders, &docs))
            .await
            .map_err(|e| server_error(format!("initialize failed: {e}")))?;
        let caps = &params.capabilities;
        let workspace = caps.workspace.as_ref();
        let apply_edit = workspace.and_then(|w| w.apply_edit).unwrap_or(false);
        let document_changes =
            workspace.and_then(|w| w.workspace_edit.as_ref()).and_then(|e| e.document_changes).unwrap_or(false);
        if apply_edit {
            self.docs.set_bridge(Some(Arc::new(bridge::LspBridge {
                client: self.client.clone(),
                runtime: tokio::runtime::Handle::current(),
                encoding,
                document_changes,
                timeout: options.edit_timeout_ms.map(Duration::from_millis).unwrap_or(EDIT_TIMEOUT),
            })));
        }
        let (engine, roots, describe) = match built {
            Ok(built) => (Ok(built.engine), built.roots, built.describe),
            Err(e) => {
                tracing::error!("cannot serve: {e:#}");
                (Err(format!("{e:#}")), None, String::new())
            }
        };
        let setup = Setup {
            engine,
            roots,
            describe,
            client_name: params.client_info.as_ref().map(|c| c.name.clone()),
            progress: caps.window.as_ref().and_then(|w| w.work_done_progress).unwrap_or(false),
            progress_after: options.progress_after_ms.map(Duration::from_millis).unwrap_or(PROGRESS_AFTER),
            edits_in_editor: apply_edit,
            mode,
        };
        if self.setup.set(setup).is_err() {
            return Err(Error::invalid_request());
        }
        let position_encoding = match encoding {
            Encoding::Utf8 => PositionEncodingKind::UTF8,
            Encoding::Utf16 | Encoding::Utf32 => PositionEncodingKind::UTF16,
        };
        let methods: Vec<&str> = protocol::methods().into_iter().map(|(m, _, _)| m).collect();
        let notifications: Vec<&str> = protocol::notifications().into_iter().map(|(m, _)| m).collect();
        Ok(InitializeResult {
            capabilities: ServerCapabilities {
                position_encoding: Some(position_encoding),
                text_document_sync: Some(TextDocumentSyncCapability::Options(TextDocumentSyncOptions {
                    open_close: Some(true),
                    change: Some(TextDocumentSyncKind::INCREMENTAL),
                    ..Default::default()
                })),
                experimental: Some(serde_json::json!({"ctxfs": {
                    "protocol": PROTOCOL_VERSION,
                    "version": env!("CARGO_PKG_VERSION"),
                    "methods": methods,
                    "notifications": notifications
                }})),
                ..Default::default()
            },
            server_info: Some(ServerInfo { name: "ctxfs".into(), version: Some(env!("CARGO_PKG_VERSION").into()) }),
            offset_encoding: None,
        })
    }

    async fn initialized(&self, _: InitializedParams) {
        let Some(setup) = self.setup.get() else { return };
        match &setup.engine {
            Ok(_) => {
                let narrowed = match &setup.roots {
                    Some(roots) => format!(", sessions narrowed to {} workspace folder(s)", roots.len()),
                    None => String::new(),
                };
                let edits = if setup.edits_in_editor {
                    "edits of open files go through the editor"
                } else {
                    "edits go to disk"
                };
                let text = format!(
                    "ctxfs {}: serving {}{narrowed}; {edits}; mode {}",
                    env!("CARGO_PKG_VERSION"),
                    setup.describe,
                    setup.mode
                );
                tracing::info!("{text}");
                self.client.log_message(MessageType::INFO, text).await;
            }
            Err(why) => {
                self.client.log_message(MessageType::ERROR, format!("ctxfs cannot serve: {why}")).await;
            }
        }
    }

    async fn shutdown(&self) -> Result<()> {
        Ok(())
    }
}

/// How often a search's indexing counts are reported, at most.
const COUNTS_EVERY: Duration = Duration::from_millis(250);

/// A session's progress sink that passes a search's indexing counts on as
/// (percentage, message), at most every `COUNTS_EVERY` and always at a stage's end (`ProgressSteps`).
fn counts_sink(send: tokio::sync::mpsc::UnboundedSender<(u32, String)>) -> crate::engine::ProgressSink {
    let steps = Mutex::new(crate::engine::ProgressSteps::new(COUNTS_EVERY));
    Arc::new(move |p: &crate::index::hybrid::Progress| {
        if let Some(step) = steps.lock().unwrap_or_else(|e| e.into_inner()).next(p) {
            let _ = send.send((step.percentage, step.message));
        }
    })
}
