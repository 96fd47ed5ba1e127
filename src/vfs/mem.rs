//! `MemFs`: an in-memory `Fs` for tests and property tests.
//!
//! The map of nodes is the whole machine: nodes may live anywhere, but only
//! those under the boundary are reachable through `Fs` (tests put "outside"
//! files beside the boundary to prove they are never read or changed).
//! Resolution goes through the shared resolver (`resolve_with`), exactly as
//! `OsFs` does; an absolute link target is a path of this same machine, mapped
//! into the boundary when it lies under it (component-wise) and refused
//! otherwise. Every other `Fs` method takes a real path and answers
//! `FsError::Raced` when it meets a link on it, like `OsFs`.
//!
//! `walk` follows the OS walker's contract sequentially, in name order: links
//! and specials are reported, never followed or opened; `.git` directories
//! are skipped; ignore files are read and ranked as in `walk`.
//!
//! The builder helpers (`add_dir`, `add_file`, ...) take an absolute path, or a
//! relative one read below the boundary, create missing parents, and panic on
//! misuse: they are for setting up tests.

use super::ignore::{self, Holds, Ignores, MAX_IGNORE_FILE};
use super::resolve::{resolve_with, Child, Lookup};
use super::{
    Descend, DirEntry, Expect, Fs, FsError, Kind, Meta, Readable, Resolution, Source, Visitor, WalkEntry, WalkOptions,
    WalkTally,
};
use crate::paths::VPath;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Seconds after the epoch of logical tick 0.
const CLOCK_BASE: u64 = 1_700_000_000;

#[derive(Debug, Clone)]
enum Node {
    Dir {
        mode: u32,
        mtime: u64,
    },
    File {
        data: Arc<[u8]>,
        mode: u32,
        mtime: u64,
        nlink: u64,
    },
    Link {
        target: String,
        mtime: u64,
    },
    /// A FIFO-like node: never opened.
    Special {
        mode: u32,
        mtime: u64,
    },
}

impl Node {
    fn kind(&self) -> Kind {
        match self {
            Node::Dir { .. } => Kind::Dir,
            Node::File { .. } => Kind::File,
            Node::Link { .. } => Kind::Link,
            Node::Special { .. } => Kind::Special,
        }
    }

    fn mtime_mut(&mut self) -> &mut u64 {
        match self {
            Node::Dir { mtime, .. }
            | Node::File { mtime, .. }
            | Node::Link { mtime, .. }
            | Node::Special { mtime, .. } => mtime,
        }
    }

    fn summary(&self) -> String {
        match self {
            Node::Dir { mode, .. } => format!("dir {mode:o}"),
            Node::File { data, mode, nlink, .. } => {
                let links = if *nlink > 1 { format!(" nlink={nlink}") } else { String::new() };
                let content = match std::str::from_utf8(data) {
                    Ok(text) if text.len() <= 80 => format!("{text:?}"),
                    _ => format!("{} bytes fnv:{:016x}", data.len(), fnv1a(data)),
                };
                format!("file {mode:o}{links} {content}")
            }
            Node::Link { target, .. } => format!("link -> {target}"),
            Node::Special { mode, .. } => format!("special {mode:o}"),
        }
    }
}

/// A 64-bit FNV-1a hash, enough to tell contents apart in a dump.
fn fnv1a(data: &[u8]) -> u64 {
    let mut hash = fnv::FnvHasher::default();
    std::hash::Hasher::write(&mut hash, data);
    std::hash::Hasher::finish(&hash)
}

fn time_of(tick: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(CLOCK_BASE + tick)
}

/// The key prefix of everything strictly below `dir`.
fn below(dir: &str) -> String {
    if dir == "/" {
        "/".to_string()
    } else {
        format!("{dir}/")
    }
}

struct State {
    nodes: BTreeMap<String, Node>,
    /// Trashed nodes, keyed `/<bin><original path>`; never reachable.
    trash: BTreeMap<String, Node>,
    clock: u64,
    bins: u64,
}

impl State {
    fn get(&self, path: &VPath) -> Option<&Node> {
        self.nodes.get(path.as_str())
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// Sets the modification time of a directory whose entries changed.
    fn touch(&mut self, dir: &VPath, tick: u64) {
        if let Some(node @ Node::Dir { .. }) = self.nodes.get_mut(dir.as_str()) {
            *node.mtime_mut() = tick;
        }
    }

    /// The keys strictly below `dir`, in order.
    fn descendants(&self, dir: &str) -> Vec<String> {
        let prefix = below(dir);
        self.nodes.range(prefix.clone()..).take_while(|(k, _)| k.starts_with(&prefix)).map(|(k, _)| k.clone()).collect()
    }

    /// The direct children of `dir`: names and nodes, in name order.
    fn children(&self, dir: &VPath) -> Vec<(String, &Node)> {
        let prefix = below(dir.as_str());
        self.nodes
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .filter_map(|(k, node)| {
                let name = &k[prefix.len()..];
                (!name.is_empty() && !name.contains('/')).then(|| (name.to_string(), node))
            })
            .collect()
    }

    fn meta(&self, path: &VPath, node: &Node) -> Meta {
        match node {
            Node::Dir { mode, mtime } => {
                let subdirs = self.children(path).iter().filter(|(_, n)| matches!(n, Node::Dir { .. })).count();
                Meta {
                    kind: Kind::Dir,
                    len: 0,
                    mode: *mode,
                    modified: Some(time_of(*mtime)),
                    nlink: 2 + subdirs as u64,
                    writable: mode & 0o200 != 0,
                }
            }
            Node::File { data, mode, mtime, nlink } => Meta {
                kind: Kind::File,
                len: data.len() as u64,
                mode: *mode,
                modified: Some(time_of(*mtime)),
                nlink: *nlink,
                writable: mode & 0o200 != 0,
            },
            Node::Link { target, mtime } => Meta {
                kind: Kind::Link,
                len: target.len() as u64,
                mode: 0o777,
                modified: Some(time_of(*mtime)),
                nlink: 1,
                writable: true,
            },
            Node::Special { mode, mtime } => Meta {
                kind: Kind::Special,
                len: 0,
                mode: *mode,
                modified: Some(time_of(*mtime)),
                nlink: 1,
                writable: mode & 0o200 != 0,
            },
        }
    }

    /// Creates every missing ancestor of `path` as a directory (builder use).
    fn ensure_parents(&mut self, path: &VPath) {
        for dir in path.ancestors() {
            match self.nodes.get(dir.as_str()) {
                Some(Node::Dir { .. }) => {}
                None => {
                    let tick = self.tick();
                    self.nodes.insert(dir.to_string(), Node::Dir { mode: 0o755, mtime: tick });
                }
                Some(other) => panic!("MemFs: cannot create below {dir}: it is a {:?}", other.kind()),
            }
        }
    }

    /// Puts a non-directory node at `path` (builder use), replacing any
    /// non-directory already there.
    fn put(&mut self, path: &VPath, make: impl FnOnce(Option<&Node>, u64) -> Node) {
        self.ensure_parents(path);
        if let Some(Node::Dir { .. }) = self.get(path) {
            panic!("MemFs: {path} is a directory; remove it first");
        }
        let tick = self.tick();
        let node = make(self.get(path), tick);
        self.nodes.insert(path.to_string(), node);
        if let Some(parent) = path.parent() {
            self.touch(&parent, tick);
        }
    }

    /// Moves the node at `from` and everything below it out of the map.
    fn take_subtree(&mut self, from: &VPath) -> Vec<(String, Node)> {
        let mut keys = vec![from.to_string()];
        keys.extend(self.descendants(from.as_str()));
        keys.into_iter()
            .filter_map(|k| {
                let node = self.nodes.remove(&k)?;
                Some((k[from.as_str().len()..].to_string(), node))
            })
            .collect()
    }
}

/// An in-memory, confined file system. See the module documentation.
pub struct MemFs {
    boundary: VPath,
    state: Mutex<State>,
    /// What `changes` and `changed_since` answer: `None` (nothing is
    /// counted) unless a test sets it.
    changes: Mutex<Feed>,
    /// How many times a walk opened a file (`files_opened`).
    opened: std::sync::atomic::AtomicUsize,
}

/// A change count and feed set by tests (nothing outside a test changes a `MemFs`).
#[derive(Debug, Default)]
struct Feed {
    count: Option<u64>,
    /// The count from which on `paths` is complete.
    floor: u64,
    /// Each path noted, with the count its last change made.
    paths: BTreeMap<VPath, u64>,
}

impl MemFs {
    /// A machine holding only the boundary directory (and its ancestors).
    pub fn new(boundary: VPath) -> MemFs {
        let mut state = State { nodes: BTreeMap::new(), trash: BTreeMap::new(), clock: 0, bins: 0 };
        state.nodes.insert("/".to_string(), Node::Dir { mode: 0o755, mtime: 0 });
        state.ensure_parents(&boundary);
        if !boundary.is_root() {
            let tick = state.tick();
            state.nodes.insert(boundary.to_string(), Node::Dir { mode: 0o755, mtime: tick });
        }
        let (changes, opened) = (Mutex::new(Feed::default()), std::sync::atomic::AtomicUsize::new(0));
        MemFs { boundary, state: Mutex::new(state), changes, opened }
    }

    /// How many times a walk has opened a file so far, for tests of what a walk leaves unread.
    pub fn files_opened(&self) -> usize {
        self.opened.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Sets what `Fs::changes` answers, for tests of code that reuses a walk
    /// while the count stays the same (the files themselves count nothing).
    /// Nothing is known of the paths changed before this count.
    pub fn set_changes(&self, changes: Option<u64>) {
        *self.feed() = Feed { count: changes, floor: changes.unwrap_or(0), paths: BTreeMap::new() };
    }

    /// Counts a change of `path` made "from outside", as a watcher would
    /// report it: the count moves and the feed names the path (the path need
    /// not exist, be visible or be a file; nothing is checked).
    pub fn note_changed(&self, path: &str) {
        let path = VPath::parse(path).expect("an absolute path");
        let mut feed = self.feed();
        let now = feed.count.unwrap_or(0) + 1;
        feed.count = Some(now);
        feed.paths.insert(path, now);
    }

    /// Counts a change the feed cannot name (as an overflowed event queue):
    /// a reader of an earlier count is told to walk.
    pub fn note_lost(&self) {
        let mut feed = self.feed();
        let now = feed.count.unwrap_or(0) + 1;
        *feed = Feed { count: Some(now), floor: now, paths: BTreeMap::new() };
    }

    fn feed(&self) -> MutexGuard<'_, Feed> {
        self.changes.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A builder path: absolute as given, relative below the boundary.
    fn at(&self, path: &str) -> VPath {
        let parsed = if path.starts_with('/') { VPath::parse(path) } else { VPath::resolve(&self.boundary, path) };
        parsed.unwrap_or_else(|e| panic!("MemFs: bad path {path:?}: {e}"))
    }

    /// Makes a directory and any missing parents (`mkdir -p`).
    pub fn add_dir(&self, path: &str) {
        let path = self.at(path);
        let mut st = self.state();
        st.ensure_parents(&path);
        match st.get(&path) {
            Some(Node::Dir { .. }) => {}
            None => {
                let tick = st.tick();
                st.nodes.insert(path.to_string(), Node::Dir { mode: 0o755, mtime: tick });
                if let Some(parent) = path.parent() {
                    st.touch(&parent, tick);
                }
            }
            Some(other) => panic!("MemFs: {path} is already a {:?}", other.kind()),
        }
    }

    /// Makes a regular file (mode 0o644, or the mode of the file it replaces).
    pub fn add_file(&self, path: &str, bytes: impl Into<Vec<u8>>) {
        let path = self.at(path);
        let data: Arc<[u8]> = bytes.into().into();
        self.state().put(&path, |old, tick| {
            let mode = match old {
                Some(Node::File { mode, .. }) => *mode,
                _ => 0o644,
            };
            Node::File { data, mode, mtime: tick, nlink: 1 }
        });
    }

    /// Makes a symbolic link whose target text is `target` (not checked).
    pub fn add_link(&self, path: &str, target: &str) {
        let path = self.at(path);
        let target = target.to_string();
        self.state().put(&path, |_, tick| Node::Link { target, mtime: tick });
    }

    /// Makes a FIFO-like node that is never opened.
    pub fn add_special(&self, path: &str) {
        let path = self.at(path);
        self.state().put(&path, |_, tick| Node::Special { mode: 0o644, mtime: tick });
    }

    /// Sets the permission bits of an existing node (not following links).
    pub fn set_mode(&self, path: &str, new_mode: u32) {
        let path = self.at(path);
        let mut st = self.state();
        match st.nodes.get_mut(path.as_str()) {
            Some(Node::Dir { mode, .. }) | Some(Node::File { mode, .. }) | Some(Node::Special { mode, .. }) => {
                *mode = new_mode & 0o7777
            }
            Some(Node::Link { .. }) => {}
            None => panic!("MemFs: set_mode on missing {path}"),
        }
    }

    /// Sets the hard link count reported for an existing file.
    pub fn set_nlink(&self, path: &str, count: u64) {
        let path = self.at(path);
        match self.state().nodes.get_mut(path.as_str()) {
            Some(Node::File { nlink, .. }) => *nlink = count,
            _ => panic!("MemFs: set_nlink on {path}, which is not a file"),
        }
    }

    /// Removes a node and everything below it; answers whether it existed.
    /// For tests that change the tree behind a caller's back.
    pub fn remove(&self, path: &str) -> bool {
        let path = self.at(path);
        let mut st = self.state();
        let existed = !st.take_subtree(&path).is_empty();
        if existed {
            let tick = st.tick();
            if let Some(parent) = path.parent() {
                st.touch(&parent, tick);
            }
        }
        existed
    }

    /// The contents of a regular file (never following a link), for assertions.
    pub fn contents(&self, path: &str) -> Option<Vec<u8>> {
        let path = self.at(path);
        match self.state().get(&path) {
            Some(Node::File { data, .. }) => Some(data.to_vec()),
            _ => None,
        }
    }

    /// The kind of the node at `path` (never following a link).
    pub fn kind(&self, path: &str) -> Option<Kind> {
        let path = self.at(path);
        self.state().get(&path).map(Node::kind)
    }

    /// Every node of the machine, in path order, with a summary of its kind,
    /// mode and content (no times), so tests can compare before and after.
    pub fn dump(&self) -> Vec<(String, String)> {
        self.state().nodes.iter().map(|(k, n)| (k.clone(), n.summary())).collect()
    }

    /// Every trashed node, keyed `/<bin><original path>`, summarised as in `dump`.
    pub fn trashed(&self) -> Vec<(String, String)> {
        self.state().trash.iter().map(|(k, n)| (k.clone(), n.summary())).collect()
    }

    /// The names of a real path below the boundary.
    fn names<'a>(&self, real: &'a VPath) -> Result<Vec<&'a str>, FsError> {
        let rel = real.strip_prefix(&self.boundary).ok_or(FsError::Escapes)?;
        Ok(rel.split('/').filter(|n| !n.is_empty()).collect())
    }

    /// Walks a real directory path without following any link.
    fn dir_strict(&self, st: &State, names: &[&str]) -> Result<VPath, FsError> {
        let mut cur = self.boundary.clone();
        match st.get(&cur) {
            Some(Node::Dir { .. }) => {}
            Some(_) => return Err(FsError::NotADir),
            None => return Err(FsError::NotFound),
        }
        for name in names {
            cur = cur.join(name);
            match st.get(&cur) {
                Some(Node::Dir { .. }) => {}
                Some(Node::Link { .. }) => return Err(FsError::Raced),
                Some(_) => return Err(FsError::NotADir),
                None => return Err(FsError::NotFound),
            }
        }
        Ok(cur)
    }

    /// The existing parent directory of a real path, and its last name.
    fn open_parent(&self, st: &State, real: &VPath) -> Result<(VPath, String), FsError> {
        let names = self.names(real)?;
        let (last, parents) = names.split_last().ok_or(FsError::IsADir)?;
        Ok((self.dir_strict(st, parents)?, last.to_string()))
    }

    /// What a walk entry's `open` answers, as the OS walker does: a file is
    /// opened (without following a link) when asked; anything else is refused.
    fn open_source(&self, path: &VPath, listed: Kind) -> Result<Source, FsError> {
        match listed {
            Kind::Dir => return Err(FsError::IsADir),
            Kind::Link | Kind::Special => return Err(FsError::NotRegular),
            Kind::File => {}
        }
        match self.state().get(path) {
            Some(Node::File { data, .. }) => {
                self.opened.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Ok(Source::Bytes(data.clone()))
            }
            Some(Node::Dir { .. }) => Err(FsError::IsADir),
            Some(Node::Link { .. }) => Err(FsError::Raced),
            Some(Node::Special { .. }) => Err(FsError::NotRegular),
            None => Err(FsError::NotFound),
        }
    }

    /// The ignore chain below `dir` (`ignore::level`), its files read
    /// without following links.
    fn ignore_level(
        &self,
        st: &State,
        dir: &VPath,
        readable: &Readable<'_>,
        inherited: Option<Arc<Ignores>>,
    ) -> Option<Arc<Ignores>> {
        let holds = Holds::probe(|name| st.get(&dir.join(name)).map(Node::kind));
        ignore::level(dir, holds, readable, inherited, |names| {
            let path = names.iter().fold(dir.clone(), |path, name| path.join(name));
            match st.get(&path) {
                Some(Node::File { data, .. }) if data.len() as u64 <= MAX_IGNORE_FILE => Some(data.to_vec()),
                _ => None,
            }
        })
    }

    fn walk_dir(
        &self,
        dir: &VPath,
        options: &WalkOptions,
        visit: &Visitor<'_>,
        readable: &Readable<'_>,
        inherited: Option<Arc<Ignores>>,
    ) -> Result<(), FsError> {
        // Take a snapshot, then let go of the lock: the visitor may call back.
        let (entries, ignores) = {
            let st = self.state();
            if !matches!(st.get(dir), Some(Node::Dir { .. })) {
                // Changed since it was listed: skipped, as the OS walker does.
                return Ok(());
            }
            let entries: Vec<(String, Kind)> = st.children(dir).into_iter().map(|(n, node)| (n, node.kind())).collect();
            let ignores = if options.gitignore { self.ignore_level(&st, dir, readable, inherited) } else { None };
            (entries, ignores)
        };
        for (name, kind) in entries {
            if kind == Kind::Dir && name == ".git" {
                continue;
            }
            if options.skip_hidden && name.starts_with('.') {
                if readable(&dir.join(&name)) {
                    WalkTally::count(&options.tally, |t| &t.hidden);
                }
                continue;
            }
            let path = dir.join(&name);
            if ignores.as_ref().is_some_and(|i| i.ignores(Path::new(path.as_str()), kind == Kind::Dir)) {
                if readable(&path) {
                    WalkTally::count(&options.tally, |t| &t.ignored);
                }
                continue;
            }
            let open_path = path.clone();
            let open = move || self.open_source(&open_path, kind);
            // Files in memory have no modification time to compare.
            let entry = WalkEntry { path: path.clone(), kind, open: &open, stamp: &|| None };
            let descend = visit(&entry);
            if kind == Kind::Dir && descend == Descend::Yes {
                self.walk_dir(&path, options, visit, readable, ignores.clone())?;
            }
        }
        Ok(())
    }
}

impl Lookup for MemFs {
    type Dir = VPath;

    fn boundary_dir(&self) -> Result<VPath, FsError> {
        match self.state().get(&self.boundary) {
            Some(Node::Dir { .. }) => Ok(self.boundary.clone()),
            Some(_) => Err(FsError::NotADir),
            None => Err(FsError::NotFound),
        }
    }

    fn child(&self, dir: &VPath, name: &str) -> Result<Child<VPath>, FsError> {
        let path = dir.join(name);
        let st = self.state();
        Ok(match st.get(&path) {
            None => Child::Missing,
            Some(Node::Dir { .. }) => Child::Dir(path),
            Some(Node::Link { target, .. }) => Child::Link(target.clone()),
            Some(node) => Child::Node(st.meta(&path, node)),
        })
    }

    fn dir_meta(&self, dir: &VPath) -> Result<Meta, FsError> {
        let st = self.state();
        match st.get(dir) {
            Some(node @ Node::Dir { .. }) => Ok(st.meta(dir, node)),
            Some(Node::Link { .. }) => Err(FsError::Raced),
            Some(_) => Err(FsError::NotADir),
            None => Err(FsError::NotFound),
        }
    }

    fn map_absolute(&self, target: &str) -> Option<Vec<String>> {
        let target = VPath::parse(target).ok()?;
        let rel = target.strip_prefix(&self.boundary)?;
        Some(rel.split('/').filter(|n| !n.is_empty()).map(str::to_string).collect())
    }
}

impl Fs for MemFs {
    fn boundary(&self) -> &VPath {
        &self.boundary
    }

    fn changes(&self, _under: &VPath) -> Option<u64> {
        self.feed().count
    }

    fn changed_since(&self, under: &VPath, since: u64) -> Option<(u64, Vec<VPath>)> {
        let feed = self.feed();
        let now = feed.count?;
        if since < feed.floor || since > now {
            return None;
        }
        let paths = feed.paths.iter().filter(|(p, at)| **at > since && p.starts_with(under)).map(|(p, _)| p.clone());
        Some((now, paths.collect()))
    }

    fn resolve(&self, path: &VPath) -> Result<Resolution, FsError> {
        resolve_with(self, &self.boundary, path)
    }

    fn lstat(&self, real: &VPath) -> Result<Meta, FsError> {
        let st = self.state();
        let names = self.names(real)?;
        let (path, node) = if names.is_empty() {
            let dir = self.dir_strict(&st, &[])?;
            let node = st.get(&dir).ok_or(FsError::NotFound)?;
            (dir, node)
        } else {
            let (dir, name) = self.open_parent(&st, real)?;
            let path = dir.join(&name);
            let node = st.get(&path).ok_or(FsError::NotFound)?;
            (path, node)
        };
        Ok(st.meta(&path, node))
    }

    fn read_file(&self, real: &VPath, max: u64) -> Result<Vec<u8>, FsError> {
        let st = self.state();
        let (dir, name) = self.open_parent(&st, real)?;
        match st.get(&dir.join(&name)) {
            Some(Node::File { data, .. }) => {
                let len = data.len() as u64;
                if len > max {
                    return Err(FsError::TooLarge { len });
                }
                Ok(data.to_vec())
            }
            Some(Node::Dir { .. }) => Err(FsError::IsADir),
            Some(Node::Link { .. }) => Err(FsError::Raced),
            Some(Node::Special { .. }) => Err(FsError::NotRegular),
            None => Err(FsError::NotFound),
        }
    }

    fn read_dir(&self, real: &VPath) -> Result<Vec<DirEntry>, FsError> {
        let st = self.state();
        let names = self.names(real)?;
        let dir = self.dir_strict(&st, &names)?;
        Ok(st.children(&dir).into_iter().map(|(name, node)| DirEntry { name, kind: node.kind() }).collect())
    }

    fn read_link(&self, real: &VPath) -> Result<String, FsError> {
        let st = self.state();
        let (dir, name) = self.open_parent(&st, real)?;
        match st.get(&dir.join(&name)) {
            Some(Node::Link { target, .. }) => Ok(target.clone()),
            Some(_) => Err(FsError::Io(std::io::Error::from(std::io::ErrorKind::InvalidInput))),
            None => Err(FsError::NotFound),
        }
    }

    fn write_file_if(&self, real: &VPath, data: &[u8], expect: Expect) -> Result<(), FsError> {
        let mut st = self.state();
        let (dir, name) = self.open_parent(&st, real)?;
        let path = dir.join(&name);
        match (expect, st.get(&path)) {
            (Expect::Absent, Some(_)) => return Err(FsError::Exists),
            (Expect::Content(_), None) => return Err(FsError::Changed),
            (Expect::Content(sha), Some(Node::File { data, .. })) if crate::hash::sha256(data) != sha => {
                return Err(FsError::Changed)
            }
            _ => {}
        }
        let mode = match st.get(&path) {
            Some(Node::File { mode, .. }) => *mode,
            None => 0o644,
            Some(Node::Dir { .. }) => return Err(FsError::IsADir),
            Some(Node::Link { .. }) => return Err(FsError::Raced),
            Some(Node::Special { .. }) => return Err(FsError::NotRegular),
        };
        let tick = st.tick();
        st.nodes.insert(path.to_string(), Node::File { data: data.into(), mode, mtime: tick, nlink: 1 });
        st.touch(&dir, tick);
        Ok(())
    }

    fn create_dir(&self, real: &VPath) -> Result<(), FsError> {
        let mut st = self.state();
        let (dir, name) = self.open_parent(&st, real)?;
        let path = dir.join(&name);
        if st.get(&path).is_some() {
            return Err(FsError::Exists);
        }
        let tick = st.tick();
        st.nodes.insert(path.to_string(), Node::Dir { mode: 0o755, mtime: tick });
        st.touch(&dir, tick);
        Ok(())
    }

    fn rename(&self, from: &VPath, to: &VPath) -> Result<(), FsError> {
        let mut st = self.state();
        let (from_dir, from_name) = self.open_parent(&st, from)?;
        let (to_dir, to_name) = self.open_parent(&st, to)?;
        let from = from_dir.join(&from_name);
        let to = to_dir.join(&to_name);
        if st.get(&from).is_none() {
            return Err(FsError::NotFound);
        }
        if st.get(&to).is_some() {
            return Err(FsError::Exists);
        }
        if to.starts_with(&from) {
            // A directory cannot move inside itself (EINVAL).
            return Err(FsError::Io(std::io::Error::from(std::io::ErrorKind::InvalidInput)));
        }
        let moved = st.take_subtree(&from);
        for (rest, node) in moved {
            st.nodes.insert(format!("{to}{rest}"), node);
        }
        let tick = st.tick();
        st.touch(&from_dir, tick);
        st.touch(&to_dir, tick);
        Ok(())
    }

    fn trash(&self, real: &VPath) -> Result<String, FsError> {
        let mut st = self.state();
        let (dir, name) = self.open_parent(&st, real)?;
        let path = dir.join(&name);
        if st.get(&path).is_none() {
            return Err(FsError::NotFound);
        }
        st.bins += 1;
        let bin = format!("/{}{}", st.bins, path);
        let moved = st.take_subtree(&path);
        for (rest, node) in moved {
            st.trash.insert(format!("{bin}{rest}"), node);
        }
        let tick = st.tick();
        st.touch(&dir, tick);
        Ok(format!("memfs-trash:{bin}"))
    }

    fn walk_in_view(
        &self,
        real: &VPath,
        options: &WalkOptions,
        visit: &Visitor<'_>,
        readable: &Readable<'_>,
    ) -> Result<(), FsError> {
        let (dir, inherited) = {
            let st = self.state();
            let names = self.names(real)?;
            let dir = self.dir_strict(&st, &names)?;
            // The ignore files of the directories from the boundary down to
            // the start's parent count too, as in the OS walker.
            let mut chain = None;
            if options.gitignore {
                let mut above = self.boundary.clone();
                for name in names.iter().take(names.len().saturating_sub(1)) {
                    chain = self.ignore_level(&st, &above, readable, chain);
                    above = above.join(name);
                }
                if !names.is_empty() {
                    chain = self.ignore_level(&st, &above, readable, chain);
                }
            }
            (dir, chain)
        };
        self.walk_dir(&dir, options, visit, readable, inherited)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vp(text: &str) -> VPath {
        VPath::parse(text).unwrap()
    }

    fn sample() -> MemFs {
        let fs = MemFs::new(vp("/ws"));
        fs.add_file("/ws/a.txt", "alpha");
        fs.add_file("/ws/src/lib.rs", "fn main() {}");
        fs.add_file("/outside/secret.txt", "secret");
        fs.add_file("/ws_evil/x", "evil");
        fs.add_link("/ws/rel", "src/lib.rs");
        fs.add_link("/ws/src/up", "../a.txt");
        fs.add_link("/ws/abs", "/ws/src");
        fs.add_link("/ws/srclink", "src");
        fs.add_link("/ws/out", "/outside/secret.txt");
        fs.add_link("/ws/evil", "/ws_evil/x");
        fs.add_link("/ws/dotdot", "../outside/secret.txt");
        fs.add_link("/ws/src/deep", "../../outside");
        fs.add_link("/ws/loop1", "loop2");
        fs.add_link("/ws/loop2", "loop1");
        fs.add_link("/ws/self", "./self");
        fs.add_link("/ws/dangling", "missing/new.txt");
        fs.add_link("/ws/dangling2", "new.txt");
        fs.add_link("/ws/dangling_abs", "/ws/fresh.txt");
        fs.add_link("/ws/dangling_out", "/outside/nothing");
        fs.add_link("/ws/dangling_up", "../nothing");
        fs.add_special("/ws/fifo");
        fs
    }

    fn found(fs: &MemFs, path: &str) -> (String, Kind) {
        match fs.resolve(&vp(path)) {
            Ok(Resolution::Found { real, meta }) => (real.to_string(), meta.kind),
            other => panic!("{path}: expected Found, got {other:?}"),
        }
    }

    fn missing(fs: &MemFs, path: &str) -> (String, bool) {
        match fs.resolve(&vp(path)) {
            Ok(Resolution::Missing { real, parent_exists }) => (real.to_string(), parent_exists),
            other => panic!("{path}: expected Missing, got {other:?}"),
        }
    }

    fn err<T: std::fmt::Debug>(result: Result<T, FsError>) -> FsError {
        result.expect_err("expected an error")
    }

    #[test]
    fn is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<MemFs>();
    }

    #[test]
    fn resolves_plain_paths() {
        let fs = sample();
        assert_eq!(found(&fs, "/ws"), ("/ws".into(), Kind::Dir));
        assert_eq!(found(&fs, "/ws/a.txt"), ("/ws/a.txt".into(), Kind::File));
        assert_eq!(found(&fs, "/ws/fifo"), ("/ws/fifo".into(), Kind::Special));
        assert_eq!(missing(&fs, "/ws/new.txt"), ("/ws/new.txt".into(), true));
        assert_eq!(missing(&fs, "/ws/nope/x"), ("/ws/nope/x".into(), false));
        assert!(matches!(fs.resolve(&vp("/outside/secret.txt")), Err(FsError::Escapes)));
        assert!(matches!(fs.resolve(&vp("/ws_evil/x")), Err(FsError::Escapes)));
    }

    #[test]
    fn follows_links_inside() {
        let fs = sample();
        assert_eq!(found(&fs, "/ws/rel"), ("/ws/src/lib.rs".into(), Kind::File));
        assert_eq!(found(&fs, "/ws/src/up"), ("/ws/a.txt".into(), Kind::File));
        assert_eq!(found(&fs, "/ws/abs"), ("/ws/src".into(), Kind::Dir));
        assert_eq!(found(&fs, "/ws/abs/lib.rs"), ("/ws/src/lib.rs".into(), Kind::File));
        // `..` after a link goes up from where the link led.
        assert_eq!(found(&fs, "/ws/srclink/../a.txt"), ("/ws/a.txt".into(), Kind::File));
        assert_eq!(found(&fs, "/ws/srclink/up"), ("/ws/a.txt".into(), Kind::File));
    }

    #[test]
    fn refuses_links_out() {
        let fs = sample();
        for path in ["/ws/out", "/ws/evil", "/ws/dotdot", "/ws/src/deep", "/ws/src/deep/secret.txt"] {
            assert!(matches!(fs.resolve(&vp(path)), Err(FsError::Escapes)), "{path}");
        }
    }

    #[test]
    fn boundary_at_root_maps_every_absolute_target() {
        let fs = MemFs::new(VPath::root());
        fs.add_file("/etc/hosts", "h");
        fs.add_link("/home/link", "/etc/hosts");
        assert_eq!(found(&fs, "/home/link"), ("/etc/hosts".into(), Kind::File));
        fs.add_link("/up", "../../etc/hosts");
        assert!(matches!(fs.resolve(&vp("/up")), Err(FsError::Escapes)));
    }

    #[test]
    fn loops_and_dangling_links() {
        let fs = sample();
        assert!(matches!(fs.resolve(&vp("/ws/loop1")), Err(FsError::Loop)));
        assert!(matches!(fs.resolve(&vp("/ws/self/x")), Err(FsError::Loop)));
        assert_eq!(missing(&fs, "/ws/dangling"), ("/ws/missing/new.txt".into(), false));
        assert_eq!(missing(&fs, "/ws/dangling2"), ("/ws/new.txt".into(), true));
        assert_eq!(missing(&fs, "/ws/dangling_abs"), ("/ws/fresh.txt".into(), true));
        assert!(matches!(fs.resolve(&vp("/ws/dangling_out")), Err(FsError::Escapes)));
        assert!(matches!(fs.resolve(&vp("/ws/dangling_up")), Err(FsError::Escapes)));
    }

    #[test]
    fn file_used_as_directory() {
        let fs = sample();
        assert!(matches!(fs.resolve(&vp("/ws/a.txt/x")), Err(FsError::NotADir)));
        assert!(matches!(fs.resolve(&vp("/ws/rel/x")), Err(FsError::NotADir)));
        assert!(matches!(fs.lstat(&vp("/ws/a.txt/x")), Err(FsError::NotADir)));
        assert!(matches!(fs.read_dir(&vp("/ws/a.txt")), Err(FsError::NotADir)));
        assert!(matches!(fs.read_dir(&vp("/ws/fifo")), Err(FsError::NotADir)));
    }

    #[test]
    fn methods_refuse_links_on_real_paths() {
        let fs = sample();
        let before = fs.dump();
        let through = vp("/ws/srclink/lib.rs");
        let leaf = vp("/ws/rel");
        assert!(matches!(err(fs.lstat(&through)), FsError::Raced));
        assert!(matches!(err(fs.read_file(&through, 1024)), FsError::Raced));
        assert!(matches!(err(fs.read_file(&leaf, 1024)), FsError::Raced));
        assert!(matches!(err(fs.read_file(&vp("/ws/out"), 1024)), FsError::Raced));
        assert!(matches!(err(fs.read_dir(&vp("/ws/srclink"))), FsError::Raced));
        assert!(matches!(err(fs.read_dir(&vp("/ws/abs"))), FsError::Raced));
        assert!(matches!(err(fs.read_link(&vp("/ws/srclink/up"))), FsError::Raced));
        assert!(matches!(err(fs.write_file(&through, b"x")), FsError::Raced));
        assert!(matches!(err(fs.write_file(&leaf, b"x")), FsError::Raced));
        assert!(matches!(err(fs.write_file(&vp("/ws/out"), b"x")), FsError::Raced));
        assert!(matches!(err(fs.write_file(&vp("/ws/src/deep/secret.txt"), b"x")), FsError::Raced));
        assert!(matches!(err(fs.create_dir(&vp("/ws/srclink/d"))), FsError::Raced));
        assert!(matches!(err(fs.rename(&through, &vp("/ws/moved"))), FsError::Raced));
        assert!(matches!(err(fs.rename(&vp("/ws/a.txt"), &vp("/ws/srclink/a.txt"))), FsError::Raced));
        assert!(matches!(err(fs.trash(&through)), FsError::Raced));
        assert!(matches!(err(fs.walk(&vp("/ws/srclink"), &WalkOptions::default(), &|_| Descend::Yes)), FsError::Raced));
        assert_eq!(fs.dump(), before);
        // The link itself can be looked at.
        assert_eq!(fs.lstat(&leaf).unwrap().kind, Kind::Link);
        assert_eq!(fs.read_link(&leaf).unwrap(), "src/lib.rs");
    }

    #[test]
    fn real_paths_outside_escape() {
        let fs = sample();
        assert!(matches!(err(fs.lstat(&vp("/outside/secret.txt"))), FsError::Escapes));
        assert!(matches!(err(fs.read_file(&vp("/ws_evil/x"), 1024)), FsError::Escapes));
        assert!(matches!(err(fs.write_file(&vp("/outside/secret.txt"), b"x")), FsError::Escapes));
        assert_eq!(fs.contents("/outside/secret.txt").unwrap(), b"secret");
    }

    #[test]
    fn reads_and_errors() {
        let fs = sample();
        assert_eq!(fs.read_file(&vp("/ws/a.txt"), 5).unwrap(), b"alpha");
        assert!(matches!(err(fs.read_file(&vp("/ws/a.txt"), 4)), FsError::TooLarge { len: 5 }));
        assert!(matches!(err(fs.read_file(&vp("/ws/src"), 4)), FsError::IsADir));
        assert!(matches!(err(fs.read_file(&vp("/ws/fifo"), 4)), FsError::NotRegular));
        assert!(matches!(err(fs.read_file(&vp("/ws/nope"), 4)), FsError::NotFound));
        assert!(matches!(err(fs.read_file(&vp("/ws"), 4)), FsError::IsADir));
        assert!(matches!(err(fs.lstat(&vp("/ws/nope/x"))), FsError::NotFound));
        let mut names: Vec<String> = fs.read_dir(&vp("/ws/src")).unwrap().into_iter().map(|e| e.name).collect();
        names.sort();
        assert_eq!(names, ["deep", "lib.rs", "up"]);
        let meta = fs.lstat(&vp("/ws/a.txt")).unwrap();
        assert_eq!((meta.kind, meta.len, meta.mode, meta.nlink), (Kind::File, 5, 0o644, 1));
        assert_eq!(fs.lstat(&vp("/ws")).unwrap().kind, Kind::Dir);
    }

    #[test]
    fn writes_keep_modes_and_never_replace() {
        let fs = sample();
        fs.set_mode("/ws/a.txt", 0o600);
        fs.write_file(&vp("/ws/a.txt"), b"beta").unwrap();
        assert_eq!(fs.contents("a.txt").unwrap(), b"beta");
        assert_eq!(fs.lstat(&vp("/ws/a.txt")).unwrap().mode, 0o600);
        fs.write_file(&vp("/ws/new.txt"), b"n").unwrap();
        assert_eq!(fs.lstat(&vp("/ws/new.txt")).unwrap().mode, 0o644);
        assert!(matches!(err(fs.write_file(&vp("/ws/nope/x"), b"x")), FsError::NotFound));
        assert!(matches!(err(fs.write_file(&vp("/ws/src"), b"x")), FsError::IsADir));
        assert!(matches!(err(fs.write_file(&vp("/ws/fifo"), b"x")), FsError::NotRegular));

        fs.create_dir(&vp("/ws/d")).unwrap();
        assert!(matches!(err(fs.create_dir(&vp("/ws/d"))), FsError::Exists));
        assert!(matches!(err(fs.create_dir(&vp("/ws/rel"))), FsError::Exists));
        assert!(matches!(err(fs.create_dir(&vp("/ws/x/y"))), FsError::NotFound));

        assert!(matches!(err(fs.rename(&vp("/ws/a.txt"), &vp("/ws/new.txt"))), FsError::Exists));
        assert!(matches!(err(fs.rename(&vp("/ws/zzz"), &vp("/ws/d/zzz"))), FsError::NotFound));
        assert!(matches!(err(fs.rename(&vp("/ws/src"), &vp("/ws/src/inner"))), FsError::Io(_)));
        fs.rename(&vp("/ws/src"), &vp("/ws/d/src")).unwrap();
        assert_eq!(fs.contents("/ws/d/src/lib.rs").unwrap(), b"fn main() {}");
        assert_eq!(fs.kind("/ws/d/src/up"), Some(Kind::Link));
        assert_eq!(fs.kind("/ws/src"), None);
        assert_eq!(fs.contents("/ws/new.txt").unwrap(), b"n");
    }

    #[test]
    fn trash_moves_out_of_reach() {
        let fs = sample();
        let outside: Vec<_> = fs.dump().into_iter().filter(|(p, _)| !p.starts_with("/ws/")).collect();
        let note = fs.trash(&vp("/ws/src")).unwrap();
        assert!(note.contains("/ws/src"), "{note}");
        assert!(matches!(fs.resolve(&vp("/ws/src/lib.rs")), Ok(Resolution::Missing { .. })));
        assert!(fs.trashed().iter().any(|(p, s)| p.ends_with("/ws/src/lib.rs") && s.contains("fn main")));
        assert!(matches!(err(fs.trash(&vp("/ws/src"))), FsError::NotFound));
        assert!(matches!(err(fs.trash(&vp("/ws"))), FsError::IsADir));
        // A link is trashed itself, never its target.
        fs.trash(&vp("/ws/out")).unwrap();
        let after: Vec<_> = fs.dump().into_iter().filter(|(p, _)| !p.starts_with("/ws/")).collect();
        assert_eq!(after, outside);
    }

    #[test]
    fn modification_times_move_forward() {
        let fs = sample();
        let before = fs.lstat(&vp("/ws")).unwrap().modified.unwrap();
        fs.write_file(&vp("/ws/n.txt"), b"1").unwrap();
        let after = fs.lstat(&vp("/ws")).unwrap().modified.unwrap();
        assert!(after > before);
        let file = fs.lstat(&vp("/ws/n.txt")).unwrap().modified.unwrap();
        fs.write_file(&vp("/ws/n.txt"), b"2").unwrap();
        assert!(fs.lstat(&vp("/ws/n.txt")).unwrap().modified.unwrap() > file);
    }

    fn walked(
        fs: &MemFs,
        root: &str,
        options: WalkOptions,
        descend: impl Fn(&str) -> bool + Sync,
    ) -> Vec<(String, Kind)> {
        let seen = Mutex::new(Vec::new());
        fs.walk(&vp(root), &options, &|entry| {
            seen.lock().unwrap().push((entry.path.to_string(), entry.kind));
            if descend(entry.path.as_str()) {
                Descend::Yes
            } else {
                Descend::No
            }
        })
        .unwrap();
        let mut out = seen.into_inner().unwrap();
        out.sort();
        out
    }

    #[test]
    fn walk_reports_links_and_honours_ignores() {
        let fs = MemFs::new(vp("/ws"));
        fs.add_file("/ws/.gitignore", "target/\n*.log\n!keep.log\n");
        fs.add_file("/ws/.hidden", "h");
        fs.add_file("/ws/main.rs", "m");
        fs.add_file("/ws/run.log", "l");
        fs.add_file("/ws/keep.log", "k");
        fs.add_file("/ws/target/out.bin", "o");
        fs.add_file("/ws/sub/.gitignore", "gen.rs\n");
        fs.add_file("/ws/sub/gen.rs", "g");
        fs.add_file("/ws/sub/real.rs", "r");
        fs.add_file("/ws/skip/inner.rs", "i");
        fs.add_link("/ws/sub/link", "/outside");
        fs.add_special("/ws/pipe");
        fs.add_file("/outside/secret", "s");

        let got = walked(&fs, "/ws", WalkOptions::default(), |p| p != "/ws/skip");
        let expected: Vec<(String, Kind)> = [
            ("/ws/keep.log", Kind::File),
            ("/ws/main.rs", Kind::File),
            ("/ws/pipe", Kind::Special),
            ("/ws/skip", Kind::Dir),
            ("/ws/sub", Kind::Dir),
            ("/ws/sub/link", Kind::Link),
            ("/ws/sub/real.rs", Kind::File),
        ]
        .into_iter()
        .map(|(p, k)| (p.to_string(), k))
        .collect();
        assert_eq!(got, expected);

        let options = WalkOptions { gitignore: false, skip_hidden: false, threads: 1, tally: None };
        let all = walked(&fs, "/ws", options, |_| true);
        assert_eq!(all.len(), 15);
        assert!(all.iter().any(|(p, _)| p == "/ws/target/out.bin"));
        assert!(all.iter().any(|(p, _)| p == "/ws/.hidden"));
        assert!(!all.iter().any(|(p, _)| p.starts_with("/outside")));

        // Opening: bytes for files, refusals for the rest.
        fs.walk(&vp("/ws"), &WalkOptions::default(), &|entry| {
            let opened = (entry.open)();
            match entry.kind {
                Kind::File => {
                    let Ok(Source::Bytes(bytes)) = opened else { panic!("{}: not bytes", entry.path) };
                    assert_eq!(bytes.len(), 1);
                }
                Kind::Special => assert!(matches!(opened, Err(FsError::NotRegular))),
                Kind::Link => assert!(matches!(opened, Err(FsError::NotRegular))),
                Kind::Dir => assert!(matches!(opened, Err(FsError::IsADir))),
            }
            Descend::Yes
        })
        .unwrap();

        assert!(matches!(
            err(fs.walk(&vp("/ws/main.rs"), &WalkOptions::default(), &|_| Descend::Yes)),
            FsError::NotADir
        ));
        assert!(matches!(err(fs.walk(&vp("/ws/none"), &WalkOptions::default(), &|_| Descend::Yes)), FsError::NotFound));
        assert!(matches!(
            err(fs.walk(&vp("/ws/sub/link"), &WalkOptions::default(), &|_| Descend::Yes)),
            FsError::Raced
        ));
    }

    #[test]
    fn walk_ignore_precedence_matches_os_walker() {
        let fs = MemFs::new(vp("/ws"));
        fs.add_file("/ws/.gitignore", "*.tmp\n");
        fs.add_file("/ws/a.tmp", "");
        fs.add_file("/ws/excluded.txt", "");
        fs.add_file("/ws/repo/.git/info/exclude", "excluded.txt\n");
        fs.add_file("/ws/repo/.git/HEAD", "ref: refs/heads/main\n");
        fs.add_file("/ws/repo/excluded.txt", "");
        fs.add_file("/ws/repo/inner.tmp", ""); // the outer .gitignore stops at a repository root
        fs.add_file("/ws/repo/kept.txt", "");
        fs.add_file("/ws/pri/.gitignore", "!p.log\r\n");
        fs.add_file("/ws/pri/.ignore", "p.log\n"); // `.ignore` wins over `.gitignore`
        fs.add_file("/ws/pri/p.log", "");
        fs.add_file("/ws/pri/q.log", "");
        fs.add_link("/ws/linked/.gitignore", "/ws/.gitignore"); // a linked ignore file is not read
        fs.add_file("/ws/linked/b.tmp", "");
        let options = WalkOptions { gitignore: true, skip_hidden: false, threads: 1, tally: None };
        let got: Vec<String> = walked(&fs, "/ws", options, |_| true).into_iter().map(|(p, _)| p).collect();
        assert_eq!(
            got,
            [
                "/ws/.gitignore",
                "/ws/excluded.txt",
                "/ws/linked",
                "/ws/linked/.gitignore",
                "/ws/pri",
                "/ws/pri/.gitignore",
                "/ws/pri/.ignore",
                "/ws/pri/q.log",
                "/ws/repo",
                "/ws/repo/inner.tmp",
                "/ws/repo/kept.txt",
            ]
        );
    }

    /// As the OS walker: ignore files above the start count, `.rgignore` first.
    #[test]
    fn walk_honours_parent_ignore_files() {
        let fs = MemFs::new(vp("/ws"));
        fs.add_file("/ws/.gitignore", "*.log\n");
        fs.add_file("/ws/.rgignore", "a.txt\n");
        fs.add_file("/ws/mid/.ignore", "a.txt\nc.rs\n");
        fs.add_file("/ws/mid/.rgignore", "!c.rs\n");
        for name in ["a.txt", "b.log", "c.rs"] {
            fs.add_file(&format!("/ws/mid/sub/{name}"), "");
        }
        let options = WalkOptions { gitignore: true, skip_hidden: true, threads: 1, tally: None };
        let seen = Mutex::new(Vec::new());
        fs.walk(&vp("/ws/mid/sub"), &options, &|entry| {
            seen.lock().unwrap().push(entry.path.to_string());
            Descend::Yes
        })
        .unwrap();
        assert_eq!(seen.into_inner().unwrap(), vec!["/ws/mid/sub/c.rs"]);
    }

    #[test]
    fn walk_visitor_may_call_back() {
        let fs = sample();
        fs.walk(&vp("/ws"), &WalkOptions::default(), &|entry| {
            let _ = fs.lstat(&entry.path).unwrap();
            Descend::Yes
        })
        .unwrap();
    }
}
