//! The engine: sessions, and tool calls as plain data.
//!
//! A front door builds one `Engine` from a `Config`, opens `Session`s, and
//! hands each tool call over as a name and JSON arguments; it gets back a
//! `ToolAnswer`. Calls of one session run one at a time in the order they
//! arrive, so a write never overtakes an earlier call. A panic inside a call
//! is caught and answered. No protocol type appears here.

pub mod api;
mod facts;
mod progress;
pub mod registry;

pub use api::*;
pub(crate) use progress::ProgressSteps;

use crate::access::{Access, Level, View, ViewFile};
use crate::gate::{Approver, Gate, GrantInfo, Mode, Project};
use crate::hygiene::{HostKind, Hygiene, MemoryStore, ResultStore, SqliteStore};
use crate::index::background::IndexSlot;
use crate::instructions::{self, Chain, UserConfig};
use crate::paths::VPath;
use crate::tools::{Ctx, Observed, Outcome};
use crate::vfs::os::OsFs;
use crate::vfs::Fs;
use anyhow::{bail, Context};
use std::collections::HashSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// What `Engine::build_index` did.
pub struct IndexBuilt {
    /// The directory indexed.
    pub root: VPath,
    /// No embedder was loaded: only words are indexed.
    pub words_only: bool,
    pub done: crate::index::hybrid::Progress,
    /// What the walk before the build found and passed over.
    pub survey: crate::index::hybrid::Survey,
}

/// A running server's shared state: the confined file system and the view.
pub struct Engine {
    fs: Arc<dyn Fs>,
    view: View,
    start: VPath,
    data_dir: PathBuf,
    /// The host directory of the boundary, to map client roots.
    host_root: PathBuf,
    host: HostKind,
    /// The user's config directory: global instructions and skills.
    user: UserConfig,
    /// The search index, opened on first use and shared by the sessions.
    index: Arc<IndexSlot>,
    /// The mode new sessions start in, and how long a prompt waits.
    mode: Mode,
    approval_timeout: std::time::Duration,
    /// The root as the user gave it (host path, and as a path of the
    /// session's world), when links lead from it to the boundary.
    alias: Option<(PathBuf, VPath)>,
    /// This project's and the user's memory records (`<data>/memory.db`).
    memory: Arc<crate::memory::Memory>,
}

/// A path text under `alias` (a root given through a link) as the same
/// path under `boundary`; any other text as it is.
fn map_alias(alias: &VPath, boundary: &VPath, text: &str) -> String {
    match VPath::parse(text).ok().and_then(|p| p.strip_prefix(alias).map(str::to_string)) {
        Some(rel) => boundary.join_rel(&rel).to_string(),
        None => text.to_string(),
    }
}

static SESSION_COUNTER: AtomicU64 = AtomicU64::new(0);

/// The search index's database. On a device, paths are the machine's own, so
/// every project shares `<data>/index.db` (a file in two projects is embedded
/// once). A tree names its files from its own `/`, so two trees would mix
/// their `/src/main.rs`: each tree gets an index in its project directory.
fn index_path(boundary: &VPath, data_dir: &Path, host_root: &Path) -> PathBuf {
    if boundary.is_root() {
        crate::gate::policy::project_dir(data_dir, &host_root.to_string_lossy()).join("index.db")
    } else {
        data_dir.join("index.db")
    }
}

/// Whether a call of the tool may take long or wait on something: the user
/// (a change the gate may ask about), the index (search and tag wait for
/// written files to be indexed) or a whole tree (glob and grep walk it).
/// Adapters may run the others, which touch one file or directory, on their
/// protocol thread; these belong on a thread that may block.
pub fn may_wait(tool: &str) -> bool {
    crate::tools::spec::find(tool).is_none_or(|t| t.traits.may_block)
}

/// The most bytes of a file (or directory listing) a call may touch and
/// still count as quick: above it, the call's cost grows with its input.
const QUICK_BYTES: u64 = 256 * 1024;

/// The platform's data directory for ctxfs (`~/.local/share/ctxfs` on Linux).
pub fn default_data_dir() -> PathBuf {
    directories::ProjectDirs::from("", "", "ctxfs")
        .map(|d| d.data_dir().to_path_buf())
        .unwrap_or_else(|| std::env::temp_dir().join("ctxfs-data"))
}

/// Where a path that may not exist yet really is: its nearest existing
/// ancestor canonicalised, with the rest appended.
fn canonical_to_be(path: &Path) -> anyhow::Result<PathBuf> {
    let path = std::path::absolute(path)?;
    let mut missing = Vec::new();
    let mut existing = path.as_path();
    while !existing.exists() {
        missing.push(existing.file_name().context("no existing ancestor")?.to_owned());
        existing = existing.parent().context("no existing ancestor")?;
    }
    let mut out = existing.canonicalize()?;
    for name in missing.iter().rev() {
        if name == ".." || name == "." {
            bail!("{} is not a clean path", path.display());
        }
        out.push(name);
    }
    Ok(out)
}

/// Reads and checks a view file, naming the file (and line) on error.
pub fn load_view(path: &Path) -> anyhow::Result<View> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read the view file {}", path.display()))?;
    let file: ViewFile = serde_json::from_str(&text).map_err(|e| {
        anyhow::anyhow!("the view file {} is not valid (line {}, column {}): {e}", path.display(), e.line(), e.column())
    })?;
    let dir = path.parent().unwrap_or(Path::new("."));
    View::from_file_in(&file, dir).map_err(|e| anyhow::anyhow!("the view file {}: {e}", path.display()))
}

/// The boundary a posture lays out: its host directory, its path in the
/// session's world, the view over it, and the start a posture implies.
struct Layout {
    host_root: PathBuf,
    vroot: VPath,
    view: View,
    /// The root as the user gave it (host path, and as a path of the
    /// session's world), when links lead from it to the boundary.
    alias: Option<(PathBuf, VPath)>,
    /// Where sessions start when the configuration names no start.
    start: Option<String>,
}

impl Layout {
    fn of(posture: &Posture) -> anyhow::Result<Layout> {
        match posture {
            Posture::Tree { dir, view } => {
                let host = dir.canonicalize().with_context(|| format!("cannot open the tree {}", dir.display()))?;
                Ok(Layout { host_root: host, vroot: VPath::root(), view: load_view(view)?, alias: None, start: None })
            }
            Posture::Device { root } => {
                let host = root.canonicalize().with_context(|| format!("cannot open the root {}", root.display()))?;
                let vroot = vpath_of(&host, "the root")?;
                // A root given through a link (`/tmp` on macOS is one) keeps working
                // by the path the user gave: paths under it name the same files.
                let alias = root
                    .to_str()
                    .and_then(|given| VPath::parse(given).ok())
                    .filter(|given| given.as_str() != vroot.as_str())
                    .map(|given| (root.clone(), given));
                Ok(Layout {
                    host_root: host,
                    view: View::single(vroot.clone(), Level::Stage),
                    vroot,
                    alias,
                    start: None,
                })
            }
            Posture::Folders { folders } => {
                let mut folders: Vec<PathBuf> = folders
                    .iter()
                    .map(|f| {
                        f.canonicalize().with_context(|| format!("cannot open the workspace folder {}", f.display()))
                    })
                    .collect::<anyhow::Result<_>>()?;
                // A folder inside another adds nothing.
                folders.sort();
                folders.dedup();
                let all = folders.clone();
                folders.retain(|f| !all.iter().any(|o| o != f && f.starts_with(o)));
                match folders.as_slice() {
                    [] => bail!("no workspace folder"),
                    [one] => Layout::of(&Posture::Device { root: one.clone() }),
                    several => {
                        let ancestor = common_ancestor(several);
                        let mut grants = std::collections::BTreeMap::new();
                        for folder in several {
                            grants.insert(vpath_of(folder, "a workspace folder")?.to_string(), Level::Stage);
                        }
                        let view = View::from_file(&ViewFile { grants, ..ViewFile::default() })
                            .map_err(|e| anyhow::anyhow!("{e}"))?;
                        Ok(Layout {
                            vroot: vpath_of(&ancestor, "the folders' common ancestor")?,
                            host_root: ancestor,
                            view,
                            alias: None,
                            start: several[0].to_str().map(str::to_string),
                        })
                    }
                }
            }
        }
    }
}

/// A host directory as a path of the session's world (device postures).
fn vpath_of(host: &Path, what: &str) -> anyhow::Result<VPath> {
    let text = host.to_str().with_context(|| format!("{what}'s path is not UTF-8"))?;
    VPath::parse(text).map_err(|e| anyhow::anyhow!("{what}: {e}"))
}

/// The deepest directory holding every one of `paths` (absolute, canonical).
fn common_ancestor(paths: &[PathBuf]) -> PathBuf {
    let mut common = paths[0].clone();
    for path in &paths[1..] {
        while !path.starts_with(&common) {
            if !common.pop() {
                return PathBuf::from("/");
            }
        }
    }
    common
}

impl Engine {
    /// The one way to build an engine: lays out the boundary and the view,
    /// checks the data directory before anything is created, opens the
    /// confined file system (rolling back what a stopped ctxfs left), and
    /// prepares the index with the chosen embedder.
    pub fn new(config: Config) -> anyhow::Result<Engine> {
        Engine::new_layered(config, |fs, _| fs)
    }

    /// Like `new`, with the confined OS file system wrapped by `layer` (the
    /// LSP door puts its overlay of open editor buffers there; `layer` is
    /// given the boundary's host directory).
    pub fn new_layered(
        config: Config,
        layer: impl FnOnce(Arc<dyn Fs>, &Path) -> Arc<dyn Fs>,
    ) -> anyhow::Result<Engine> {
        let data_dir = config.data_dir.clone().unwrap_or_else(default_data_dir);
        let Layout { host_root, vroot, mut view, alias, start: implied_start } = Layout::of(&config.posture)?;
        let start = match (&alias, config.start.as_deref()) {
            (Some((_, given)), Some(start)) => Some(map_alias(given, &vroot, start)),
            (_, start) => start.map(str::to_string).or(implied_start),
        };
        if !host_root.is_dir() {
            bail!("{} is not a directory", host_root.display());
        }
        // A start directory outside the boundary is read as the boundary (filesystem.md,
        // Instruction files), and the user who gave it is told so.
        if let Some(given) = &start {
            if !VPath::resolve(&vroot, given).is_ok_and(|s| s.starts_with(&vroot)) {
                tracing::warn!(
                    "the start directory {given} lies outside the boundary {vroot}: sessions start at the boundary"
                );
            }
        }
        // Checked before anything is created: a refused data directory leaves nothing behind.
        let data_dir = canonical_to_be(&data_dir)?;
        let mut trash = Some(data_dir.join("trash"));
        // A data directory inside the boundary (`--root ~` with the default
        // one) is hidden from every session: it reads as missing, walks skip
        // it. The trash then goes outside, to the temporary directory if it can.
        if let Ok(rel) = data_dir.strip_prefix(&host_root) {
            let rel = rel.to_str().context("the data directory's path is not UTF-8")?;
            if rel.is_empty() {
                bail!("the data directory {} is the boundary itself; choose another with --data.", data_dir.display());
            }
            let hidden = vroot.join_rel(rel);
            let was_visible = view.level(&hidden).can_read();
            view.hide(hidden);
            let uid = rustix::process::getuid().as_raw();
            trash = Some(std::env::temp_dir().join(format!("ctxfs-trash-{uid}")))
                .and_then(|t| std::path::absolute(&t).ok())
                .filter(|t| !t.starts_with(&host_root));
            if was_visible {
                let trash_text =
                    trash.as_ref().map_or("none, so rm is not available".to_string(), |t| t.display().to_string());
                tracing::warn!(
                    "the data directory {} lies inside the boundary {}: it is hidden from every session (the model sees no such directory); the trash is {trash_text}",
                    data_dir.display(),
                    host_root.display()
                );
            }
        }
        std::fs::create_dir_all(&data_dir)
            .with_context(|| format!("cannot create the data directory {}", data_dir.display()))?;
        // A mount that cannot be used does not stop ctxfs: the session is told when it uses it.
        for (point, spec) in view.mounts() {
            if let Some(problem) = crate::vfs::git::check_mount(spec) {
                tracing::warn!(
                    "the repository mounted at {point} ({}, branch {}) cannot be used: {problem:?}",
                    spec.repo.display(),
                    spec.branch
                );
            }
        }
        let inflight = data_dir.join("inflight");
        let mut os = OsFs::open(&host_root, vroot.clone(), trash)?.with_journal(&inflight);
        if config.one_off {
            os = os.without_watcher();
        }
        // A ctxfs that stopped part-way (a crash, kill -9) left temporary files
        // or an unfinished multi-file change: cleaned up and rolled back first.
        for line in crate::vfs::journal::recover(&inflight, &host_root, &os) {
            tracing::warn!("{line}");
        }
        let fs: Arc<dyn Fs> = layer(Arc::new(os), &host_root);
        let boundary = fs.boundary().clone();
        let start = start
            .and_then(|s| VPath::resolve(&boundary, &s).ok())
            .filter(|s| s.starts_with(&boundary))
            .unwrap_or(boundary);
        let user = UserConfig { dir: config.user_dir };
        let embedder =
            crate::index::EmbedderChoice::resolve(config.embedder, config.embedder_model, |key| user.setting(key));
        let index = Arc::new(IndexSlot::new(&data_dir, index_path(fs.boundary(), &data_dir, &host_root), embedder));
        // One database for every project's memory and the user's, keyed by the boundary's host path
        // as the gate's project is.
        let memory = Arc::new(crate::memory::Memory::new(data_dir.join("memory.db"), &host_root.to_string_lossy()));
        Ok(Engine {
            memory,
            fs,
            view,
            start,
            data_dir,
            host_root,
            host: config.host,
            user,
            index,
            mode: config.mode,
            approval_timeout: config.approval_timeout,
            alias,
        })
    }

    /// The project as the gate knows it: its key and where its rules and grants are.
    pub fn project(&self) -> Project {
        Project::new(&self.host_root, &self.data_dir, self.user.dir.as_deref())
    }

    /// Builds or refreshes the search index of everything the view shows
    /// under `path` (default: the start directory), as a search there would
    /// (`ctxfs index`). A walk runs first and `walked` hears how many files
    /// it found, so a progress bar's total is known before indexing starts;
    /// `progress` then hears of the build as it goes.
    pub fn build_index(
        &self,
        path: Option<&str>,
        walked: impl FnOnce(usize),
        progress: &dyn Fn(&crate::index::hybrid::Progress),
    ) -> anyhow::Result<IndexBuilt> {
        let mut access = Access::new(self.fs.clone(), self.view.clone(), self.start.clone());
        access.set_alias(self.root_alias().cloned());
        let root = access.target(path.unwrap_or("."), crate::access::Need::Look).map_err(|e| anyhow::anyhow!("{e}"))?;
        if !root.is_dir() {
            bail!("{} is not a directory", root.path);
        }
        let index = self.index.open_now()?;
        let survey = crate::index::hybrid::survey(&access, &root)?;
        walked(survey.files);
        let done = index.build_with(&access, &root, progress)?;
        Ok(IndexBuilt { root: root.path.clone(), words_only: !index.has_vectors(), done, survey })
    }

    /// The embedder the search index loads: `Config::embedder`, else
    /// `"embedder"` in the user's config.json, else the static table.
    pub fn embedder(&self) -> &crate::index::EmbedderChoice {
        self.index.embedder()
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The root as the user gave it, as a path of the session's world, when
    /// it reaches the boundary through a link (see `Access::set_alias`).
    pub fn root_alias(&self) -> Option<&VPath> {
        self.alias.as_ref().map(|(_, given)| given)
    }

    /// The confined file system the sessions share.
    pub fn fs(&self) -> &Arc<dyn Fs> {
        &self.fs
    }

    /// Maps a host path to the session's world, if it lies inside the boundary.
    pub fn host_to_vpath(&self, host: &Path) -> Option<VPath> {
        let rel = host
            .strip_prefix(&self.host_root)
            .or_else(|e| self.alias.as_ref().map_or(Err(e), |(given, _)| host.strip_prefix(given)))
            .ok()?;
        Some(self.fs.boundary().join_rel(rel.to_str()?))
    }

    /// Maps a path of the session's world to its host path.
    pub fn vpath_to_host(&self, path: &VPath) -> Option<PathBuf> {
        let rel = path.strip_prefix(self.fs.boundary())?;
        Some(if rel.is_empty() { self.host_root.clone() } else { self.host_root.join(rel) })
    }

    pub fn tools(&self) -> Vec<ToolInfo> {
        registry::tools()
    }

    /// Maps a host directory (a client root) into the session's world.
    fn root_to_vpath(&self, host: &Path) -> Option<VPath> {
        let host = host.canonicalize().ok()?;
        let rel = host.strip_prefix(&self.host_root).ok();
        match rel {
            Some(rel) => Some(self.fs.boundary().join_rel(rel.to_str()?)),
            // A root above the boundary narrows nothing.
            None if self.host_root.starts_with(&host) => Some(self.fs.boundary().clone()),
            None => None,
        }
    }

    pub fn open_session(&self, options: SessionOptions) -> anyhow::Result<Arc<Session>> {
        if let Some(id) = options.resume.clone() {
            check_session_id(&id)?;
            return self.session_with_id(id, options);
        }
        let id = format!(
            "{:x}-{:x}-{}",
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs(),
            std::process::id(),
            SESSION_COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        self.session_with_id(id, options)
    }

    /// Reopens a session by id after a restart: its results stay
    /// recallable and its ids go on from the last one. What it observed and
    /// its dedupe table start empty, as for a request without earlier results.
    pub fn reopen_session(&self, id: &str, options: SessionOptions) -> anyhow::Result<Arc<Session>> {
        check_session_id(id)?;
        if !SqliteStore::exists(&self.sessions_db(), id)? {
            bail!("no session {id} in {}", self.data_dir.display());
        }
        self.session_with_id(id.to_string(), options)
    }

    /// The file system a session works in: the shared one, with the view's
    /// repositories mounted in it, each in the session's own working copy
    /// under the data directory (kept for the session when it is reopened).
    fn session_fs(&self, id: &str) -> Arc<dyn Fs> {
        let mounts = self.view.mounts();
        if mounts.is_empty() {
            return self.fs.clone();
        }
        let copies = mounts
            .iter()
            .map(|(point, spec)| {
                let key = crate::hash::hex(&crate::hash::sha256(point.as_str().as_bytes()));
                let dir = self.data_dir.join("mounts").join(id).join(&key[..16]);
                Arc::new(crate::vfs::git::WorkingCopy::new(point.clone(), spec.clone(), dir))
            })
            .collect();
        Arc::new(crate::vfs::mount::Mounted::new(self.fs.clone(), copies))
    }

    fn sessions_db(&self) -> PathBuf {
        self.data_dir.join("sessions.db")
    }

    fn session_with_id(&self, id: String, options: SessionOptions) -> anyhow::Result<Arc<Session>> {
        // The first session of a process prunes old results, at most once a
        // day per data directory, in the background.
        static PRUNED: std::sync::Once = std::sync::Once::new();
        PRUNED.call_once(|| {
            let setting = self.user.retention();
            let retention = crate::hygiene::store::Retention::or_default(setting.days, setting.megabytes);
            let db = self.sessions_db();
            let _ = std::thread::Builder::new().name("ctxfs-prune".into()).spawn(move || {
                if let Err(e) = crate::hygiene::store::prune_daily(&db, retention) {
                    tracing::warn!(error = %e, "could not prune the stored results");
                }
            });
        });
        let mut view = self.view.clone();
        let mut start = self.start.clone();
        let mut narrowed = None;
        if let Some(roots) = &options.roots {
            let mapped: Vec<VPath> = roots.iter().filter_map(|r| self.root_to_vpath(r)).collect();
            view.restrict_to(mapped.clone());
            let open: Vec<VPath> = mapped.into_iter().filter(|r| view.level(r).can_read()).collect();
            // A start the roots hid moves to the first root, as an editor's first folder.
            if !view.level(&start).can_read() {
                if let Some(first) = open.first() {
                    start = first.clone();
                }
            }
            narrowed = Some(open);
        }
        let notice = narrowed.as_ref().map(|open| narrowed_notice(open, &start));
        let mut access = Access::new(self.session_fs(&id), view, start);
        access.set_alias(self.root_alias().cloned());
        let mut results_db = None;
        let store: Box<dyn ResultStore> = match SqliteStore::open_mending(&self.sessions_db(), &id) {
            Ok(store) => {
                results_db = Some(self.sessions_db());
                Box::new(store)
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot open the session store; results of this session live in memory only");
                Box::new(MemoryStore::default())
            }
        };
        let hygiene = Hygiene::new(self.host, store);
        Ok(Arc::new(Session {
            gate: Gate::new(self.project(), self.mode, self.approval_timeout),
            id,
            results_db,
            client_name: options.client_name,
            no_prompts: options.no_prompts,
            memory: self.memory.clone(),
            user: self.user.clone(),
            index: self.index.clone(),
            requests_unmarked: std::sync::atomic::AtomicBool::new(false),
            narrowed: narrowed.is_some(),
            progress: Mutex::new(None),
            state: Mutex::new(SessionState {
                notice,
                access,
                observed: Observed::default(),
                hygiene,
                nearby_seen: HashSet::new(),
            }),
        }))
    }
}

/// The note on a view narrowed to a client's roots: the roots still open and the start.
fn narrowed_notice(open: &[VPath], start: &VPath) -> String {
    match open {
        [] => "Note: the client's roots name no directory open to this session, so nothing is open.".into(),
        roots => {
            let names: Vec<&str> = roots.iter().map(VPath::as_str).collect();
            format!(
                "Note: the client's roots narrow this session to {}; nothing outside them is open. Relative paths start at {start}.",
                names.join(", ")
            )
        }
    }
}

/// A session id is 1 to 64 letters, digits, `-` and `_`.
fn check_session_id(id: &str) -> anyhow::Result<()> {
    if id.is_empty() || id.len() > 64 || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        bail!("{id:?} is not a session id: use 1 to 64 letters, digits, - and _");
    }
    Ok(())
}

struct SessionState {
    /// Said once, with the first result: how the client's roots narrowed the
    /// view (the model's instructions were given before the roots were known).
    notice: Option<String>,
    access: Access,
    observed: Observed,
    hygiene: Hygiene,
    /// Directories whose nearby instructions were looked at (handed over at most once).
    nearby_seen: HashSet<VPath>,
}

/// One agent's session: its view, what it observed, its results.
/// Hears how far the indexing a call waits for has come (`index::hybrid::Progress`).
pub type ProgressSink = Arc<dyn Fn(&crate::index::hybrid::Progress) + Send + Sync>;

pub struct Session {
    id: String,
    /// The database the session's results are kept in, when not in memory.
    results_db: Option<PathBuf>,
    client_name: Option<String>,
    /// The front door cannot ask the user (see `SessionOptions::no_prompts`).
    no_prompts: bool,
    user: UserConfig,
    index: Arc<IndexSlot>,
    /// Set by a front door that cannot tell where a request begins (MCP):
    /// for a `fresh` host every call is then a new request (no stubs at all).
    requests_unmarked: std::sync::atomic::AtomicBool,
    /// Who hears how far a search's indexing got (a front door reporting progress), if anyone.
    progress: Mutex<Option<ProgressSink>>,
    /// Whether a change may happen now: the mode, rules, grants, approvals.
    gate: Gate,
    /// The client's roots narrowed the view (see `SessionOptions::roots`).
    narrowed: bool,
    /// This project's and the user's memory records.
    memory: Arc<crate::memory::Memory>,
    state: Mutex<SessionState>,
}

impl Session {
    pub fn id(&self) -> &str {
        &self.id
    }

    fn state(&self) -> std::sync::MutexGuard<'_, SessionState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs one tool call. Never panics; a tool's refusal is an answer with `is_error`.
    pub fn call(&self, tool: &str, args: serde_json::Value) -> ToolAnswer {
        let mut guard = self.state();
        let state = &mut *guard;
        if state.hygiene.host() == HostKind::Fresh && self.requests_unmarked.load(Ordering::Relaxed) {
            state.hygiene.new_request(false);
        }
        if crate::tools::spec::find(tool).is_some_and(|t| t.traits.from_history) {
            return match crate::tools::spec::parse::<crate::tools::spec::Recall>(args) {
                Ok(p) => facts::answer(state.hygiene.recall(&p.id, p.offset, p.limit), Facts::default()),
                Err(e) => {
                    facts::answer(state.hygiene.answer(tool, &serde_json::Value::Null, Err(e), None), Facts::default())
                }
            };
        }
        let def = crate::tools::spec::find(tool);
        let index = match def {
            Some(def) if def.traits.needs_index => {
                self.index.settle();
                self.index.get().map(|i| &**i)
            }
            // Others (memory's search) rank by meaning only with an embedder already loaded.
            _ => self.index.loaded(),
        };
        let user_dir = self.user.dir.as_deref();
        let memory = Some(&*self.memory);
        let sink = self.progress.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let progress = sink.as_deref().map(|f| f as &dyn Fn(&crate::index::hybrid::Progress));
        let readying = Mutex::new(None);
        let result = catch_unwind(AssertUnwindSafe(|| {
            let readying = &readying;
            let mut run = |access: &Access, observed: &mut Observed| {
                let mut ctx = Ctx { access, observed, user_dir, index, progress, memory, readying };
                registry::dispatch(&mut ctx, tool, args.clone())
            };
            if let Some(def) = def.filter(|d| d.traits.effect == crate::tools::spec::Effect::ChangesRecords) {
                // Records, not files: the tool says what it would change (or refuses), the gate decides.
                let (access, observed) = (&state.access, &mut state.observed);
                let mut ctx = Ctx { access, observed, user_dir, index, progress, memory, readying };
                let change = def.preview(&mut ctx, args.clone())?;
                self.gate.run_records(change.as_ref(), &mut || run(&state.access, &mut state.observed))
            } else if crate::gate::is_gated(tool) {
                // Waits for the user while holding the session: its calls are ordered anyway.
                self.gate.run(&state.access, &mut state.observed, tool, &args, &mut run)
            } else {
                run(&state.access, &mut state.observed)
            }
        }));
        let result = result.unwrap_or_else(|panic| {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown".into());
            tracing::error!(tool, what, "a tool call panicked");
            Err(crate::access::ToolError::Message(format!(
                "Internal error in {tool}: {what}. Nothing more was done; the session goes on."
            )))
        });
        if let Ok(outcome) = &result {
            self.index_changes(&state.access, outcome);
        }
        if let Some((root, readying)) = readying.into_inner().unwrap_or_else(|e| e.into_inner()) {
            self.index.go_on(state.access.clone(), root, readying);
        }
        let mut appendix = match (&result, tool) {
            (Ok(outcome), "read") => nearby_appendix(state, outcome),
            _ => None,
        };
        if let Some(notice) = state.notice.take() {
            appendix = Some(format!("\n{notice}{}", appendix.unwrap_or_default()));
        }
        let facts = result.as_ref().map(facts::facts_of).unwrap_or_default();
        facts::answer(state.hygiene.answer(tool, &args, result, appendix), facts)
    }

    /// Readies the search index for this session's searches, in the
    /// background, when an earlier process left one: what changed since is
    /// indexed, and the start directory is walked once the file system can
    /// count changes, so that the first search answers without a walk. A
    /// door with a long-lived session calls this once it is set up (its
    /// client's roots known); a one-off call does not.
    pub fn ready_index(&self) {
        if !self.index.exists() {
            return;
        }
        let state = self.state();
        if let Ok(root) = state.access.target(".", crate::access::Need::Look) {
            if root.is_dir() {
                self.index.go_on(state.access.clone(), root, crate::index::background::Readying::Uncounted);
            }
        }
    }

    /// Indexes the files a change wrote, with the client as their creator.
    fn index_changes(&self, access: &Access, outcome: &Outcome) {
        let changes: &[crate::tools::FileChange] = match outcome {
            Outcome::Changed(change) => std::slice::from_ref(change),
            Outcome::Patch(changes) => changes,
            _ => return,
        };
        for change in changes.iter().filter(|c| c.sha.is_some()) {
            let Ok(target) = access.check(change.path.as_str(), change.path.clone(), crate::access::Need::Look) else {
                continue;
            };
            if let Ok(bytes) = access.fs().read_file(&target.real, crate::index::hybrid::MAX_FILE_BYTES) {
                let created_by = self.client_name.clone();
                self.index.enqueue(crate::index::background::WrittenFile { real: target.real, bytes, created_by });
            }
        }
    }

    /// Whether this call may take long or wait on something: a tool that
    /// may (see `may_wait`), or a read or listing of something large. A front
    /// door runs only the others on its protocol thread. Never waits itself:
    /// while a call holds the session, the answer is yes.
    pub fn call_may_wait(&self, tool: &str, args: &serde_json::Value) -> bool {
        if may_wait(tool) {
            return true;
        }
        let field = match tool {
            "read" => "file_path",
            "list" | "stat" => "path",
            _ => return false,
        };
        let Ok(state) = self.state.try_lock() else { return true };
        let text = args.get(field).and_then(|v| v.as_str()).unwrap_or(".");
        // Resolving a path costs with its depth: a deep one is not looked at here.
        let shallow = state.access.path(text).is_ok_and(|p| crate::access::path_shape(&p).0 <= 64);
        if !shallow {
            return true;
        }
        match state.access.target(text, crate::access::Need::Look) {
            Ok(target) => target.meta.as_ref().is_some_and(|m| m.len > QUICK_BYTES),
            // A refusal is quick to give.
            Err(_) => false,
        }
    }

    /// The session's permission mode.
    pub fn mode(&self) -> Mode {
        self.gate.mode()
    }

    /// Changes the session's permission mode (a front door's setting).
    pub fn set_mode(&self, mode: Mode) {
        self.gate.set_mode(mode);
    }

    /// Sets who is asked about a change (the front door's user). Without
    /// one, a change that needs asking is refused, saying why.
    pub fn set_approver(&self, approver: Arc<dyn Approver>) {
        self.gate.set_approver(Some(approver));
    }

    /// Sets who hears how far a search's indexing has come (`None`: nobody).
    pub fn set_progress(&self, sink: Option<ProgressSink>) {
        *self.progress.lock().unwrap_or_else(|e| e.into_inner()) = sink;
    }

    pub fn clear_approver(&self) {
        self.gate.set_approver(None);
    }

    /// Sets how long a prompt waits before the change is refused.
    pub fn set_approval_timeout(&self, timeout: std::time::Duration) {
        self.gate.set_timeout(timeout);
    }

    /// The grants in force: this session's, then the project's remembered ones.
    pub fn grants(&self) -> Vec<GrantInfo> {
        self.gate.grants()
    }

    /// Revokes the grants of `target` (all when `None`), this session's and remembered ones.
    pub fn revoke_grants(&self, target: Option<&str>) -> Result<usize, String> {
        self.gate.revoke(target)
    }

    /// The instruction chain as structured data, for editors to render.
    pub fn instruction_chain(&self) -> Chain {
        instructions::chain(&self.state().access, &self.user)
    }

    /// Runs `list` over the session's stored results without waiting for a
    /// running call (which may be waiting for the user): through a reader of
    /// the database when the session has one, else its own store.
    fn listing<T>(&self, list: impl FnOnce(&Hygiene) -> T) -> T {
        if let Some(db) = &self.results_db {
            match SqliteStore::reader(db, &self.id) {
                Ok(reader) => return list(&Hygiene::new(HostKind::Resend, Box::new(reader))),
                Err(e) => tracing::warn!(error = %e, "cannot open a reader of the results"),
            }
        }
        list(&self.state().hygiene)
    }

    /// The session's results, newest first, for editors to list.
    pub fn results(&self, limit: usize) -> Vec<crate::hygiene::ResultEntry> {
        self.listing(|h| h.results(limit))
    }

    /// The session's changes, newest first, each with its unified diff.
    pub fn changes(&self, limit: usize) -> Vec<(crate::hygiene::ChangeEntry, String)> {
        self.listing(|h| h.changes(limit))
    }

    /// A stored result's full text, as recall would show it whole, but
    /// without recording a result (an editor showing it to the user).
    pub fn stored_result(&self, id: &str) -> Option<String> {
        self.listing(|h| h.stored(id))
    }

    /// The whole text before and after the change result `id` made to `path`.
    pub fn change_texts(&self, id: &str, path: &str) -> Option<crate::hygiene::Texts> {
        self.listing(|h| h.change_texts(id, path))
    }

    /// A new request is being built; `carries_earlier` says whether it
    /// resends the earlier results.
    pub fn new_request(&self, carries_earlier: bool) {
        self.state().hygiene.new_request(carries_earlier);
    }

    /// Says the front door cannot mark requests (see `HostKind`).
    pub fn requests_are_unmarked(&self) {
        self.requests_unmarked.store(true, Ordering::Relaxed);
    }

    /// Compaction: the table of files read, then an empty dedupe table.
    pub fn compact(&self) -> String {
        self.state().hygiene.compact()
    }

    /// Takes the results after `id` out of the history.
    pub fn rewind(&self, id: &str) -> Result<(), String> {
        let n = crate::hygiene::format::parse_id(id).ok_or_else(|| format!("{id:?} is not a result id"))?;
        self.state().hygiene.rewind(n);
        Ok(())
    }

    /// What the model is told at the start: the paths it may use, and the
    /// instruction chain.
    pub fn instructions(&self) -> String {
        let state = self.state();
        let access = &state.access;
        let mut text = String::from(
            "ctxfs serves this session's files. Every result starts with an id in brackets; recall shows any earlier result by its id.\n",
        );
        text.push_str(&format!("Session: {} (its results stay recallable when it is resumed).\n", self.id));
        text.push_str(&format!("Start directory: {}\n", access.start()));
        if self.narrowed {
            text.push_str("The client's roots narrow this session: nothing outside them is open.\n");
        }
        text.push_str("Paths open to this session:\n");
        for (path, level) in access.view().describe() {
            if path.starts_with(access.fs().boundary()) {
                let what = if level.can_change() { "read and change" } else { "read only" };
                text.push_str(&format!("- {path} ({what})\n"));
            }
        }
        let mounts: Vec<(&VPath, &crate::vfs::git::MountSpec)> = access
            .view()
            .mounts()
            .iter()
            .filter(|(point, _)| point.starts_with(access.fs().boundary()) && access.level(point).can_read())
            .collect();
        if !mounts.is_empty() {
            text.push_str("Git repositories mounted here (a change below one is staged in this session's own working copy; commit, branch, merge and git_tag work where the level is commit):
");
            for (point, spec) in mounts {
                let what = match access.level(point) {
                    Level::Commit => "may commit",
                    Level::Stage => "changes stay staged",
                    _ => "read only",
                };
                text.push_str(&format!("- {point} (branch {}; {what})\n", spec.branch));
            }
        }
        if let Some(line) = self.gate.mode().instruction(!self.no_prompts) {
            text.push_str(line);
            text.push('\n');
        }
        let chain = instructions::chain(access, &self.user).render();
        if !chain.is_empty() {
            text.push('\n');
            text.push_str(&chain);
        }
        text.push('\n');
        match self.memory.startup_text() {
            Ok(memory) => text.push_str(&memory),
            Err(e) => {
                tracing::error!(error = %format!("{e:#}"), "cannot read the memory records");
                text.push_str(&format!(
                    "Memory: the records could not be read ({e:#}); the memory tool may fail too.\n"
                ));
            }
        }
        text
    }
}

/// Nearby instruction files a read hands over with its result, once per session.
fn nearby_appendix(state: &mut SessionState, outcome: &Outcome) -> Option<String> {
    // Nearby instructions go by where a file really is, not by a link's place.
    let (path, is_dir) = match outcome {
        Outcome::Read(read) => (read.real.clone(), false),
        Outcome::Text { path: Some(path), .. } => match state.access.fs().resolve(path) {
            Ok(resolution) => (resolution.real().clone(), true),
            Err(_) => return None,
        },
        _ => return None,
    };
    let found = instructions::nearby(&state.access, &path, is_dir, &mut state.nearby_seen);
    let mut text = String::new();
    for file in &found.files {
        text.push_str(&format!(
            "\n## Instructions from {} (they apply to files under its directory)\n\n{}\n",
            file.path,
            file.text.trim_end()
        ));
    }
    for note in &found.notes {
        text.push_str(&format!("\nNote: {note}\n"));
    }
    (!text.is_empty()).then_some(text)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    #[test]
    fn the_common_ancestor_of_folders() {
        let p = |s: &str| PathBuf::from(s);
        assert_eq!(super::common_ancestor(&[p("/a/b/c"), p("/a/b/d")]), p("/a/b"));
        assert_eq!(super::common_ancestor(&[p("/a/bc"), p("/a/b")]), p("/a"));
        assert_eq!(super::common_ancestor(&[p("/x"), p("/y")]), p("/"));
    }

    /// Issue 17: an index that cannot take in what changed (here a store
    /// that may grow no more, as on a full disk) leaves search ranking the
    /// files' words as they are now, saying why, instead of failing.
    #[test]
    fn a_search_whose_index_fails_ranks_the_words_and_says_why() {
        use super::{Config, Engine, Posture, SessionOptions};
        use serde_json::json;
        let ws = tempfile::tempdir().unwrap();
        let data = tempfile::tempdir().unwrap();
        std::fs::write(ws.path().join("notes.md"), "the alpha protocol is described here\n").unwrap();
        let engine = Engine::new(Config {
            data_dir: Some(data.path().to_path_buf()),
            one_off: true,
            ..Config::new(Posture::Device { root: ws.path().to_path_buf() })
        })
        .unwrap();
        let session = engine.open_session(SessionOptions::default()).unwrap();
        let first = session.call("search", json!({"query": "alpha protocol"}));
        assert!(
            first.text.contains("the alpha protocol") && !first.text.contains("could not be used"),
            "{}",
            first.text
        );
        engine.index.loaded().expect("opened by the search").stop_growing();
        for n in 0..40 {
            let words: String = (0..200).map(|i| format!("beta{n}x{i} ")).collect();
            std::fs::write(ws.path().join(format!("new{n}.md")), format!("the beta protocol {words}\n")).unwrap();
        }
        let answer = session.call("search", json!({"query": "beta protocol"}));
        assert!(!answer.is_error, "{}", answer.text);
        assert!(answer.text.contains("/new") && answer.text.contains("the beta protocol"), "{}", answer.text);
        assert!(
            answer.text.trim_end().ends_with(
                "[The search index could not be used (the disk that holds it is full), so these passages were \
                 ranked by their words alone, read from the files now.]"
            ),
            "{}",
            answer.text
        );
    }

    #[test]
    fn an_unknown_tool_never_runs_on_a_protocol_thread() {
        assert!(super::may_wait("nope"));
    }
}
