//! The one door to file contents: the `Fs` trait and its implementations.
//!
//! Everything that touches bytes goes through `Fs`. An `Fs` is confined to its
//! boundary by construction: it takes virtual absolute paths (`VPath`), follows
//! links only while their real target stays inside the boundary, and never
//! names anything outside it. It knows nothing of views, grants or sessions;
//! that is `access`.
//!
//! Two kinds of path cross this trait. `resolve` takes a path as the model
//! wrote it (links allowed) and answers where it really is. Every other method
//! takes such a *real* path and refuses to follow any link on the way
//! (`FsError::Raced`): a link appearing between the check and the use is a
//! race, and a race fails closed.

pub mod git;
mod ignore;
pub mod journal;
pub mod mem;
pub mod mount;
pub mod os;
pub mod overlay;
mod resolve;
pub mod walk;
pub mod watch;

use crate::paths::VPath;
use std::io;
use std::sync::Arc;
use std::time::SystemTime;

/// What a node is. Links never appear here after resolution, except as
/// entries of a listing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Dir,
    File,
    Link,
    /// A FIFO, socket or device: never opened.
    Special,
}

/// What `stat` knows of a node, without following a final link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    pub kind: Kind,
    pub len: u64,
    /// Unix permission bits (`0o644`).
    pub mode: u32,
    pub modified: Option<SystemTime>,
    /// Hard link count; more than one on a file is reported, never followed.
    pub nlink: u64,
    /// Whether the permission bits let this process write the node. For
    /// root, which the kernel lets write anything, whether any write bit is
    /// set: a write-protected file stays protected for ctxfs too.
    pub writable: bool,
}

/// One entry of a directory listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub name: String,
    pub kind: Kind,
}

/// Where a path really is, once its links are followed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// The node exists; `meta` is the final target's (never a link).
    Found { real: VPath, meta: Meta },
    /// Nothing is there. `real` is where it would be created; `parent_exists`
    /// says whether its parent is an existing directory.
    Missing { real: VPath, parent_exists: bool },
}

impl Resolution {
    pub fn real(&self) -> &VPath {
        match self {
            Resolution::Found { real, .. } | Resolution::Missing { real, .. } => real,
        }
    }
}

/// Why an `Fs` operation failed. Texts for the model are made by `access`,
/// never from these directly, so no host detail leaks.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error("not found")]
    NotFound,
    #[error("not a directory")]
    NotADir,
    #[error("is a directory")]
    IsADir,
    #[error("already exists")]
    Exists,
    /// A link leads outside the boundary (or a path was outside it).
    #[error("leads outside the boundary")]
    Escapes,
    #[error("too many levels of links")]
    Loop,
    /// A FIFO, socket or device where a file or directory was needed.
    #[error("not a regular file")]
    NotRegular,
    #[error("file too large")]
    TooLarge { len: u64 },
    /// A link appeared on a path that was resolved without one.
    #[error("the path changed during the call")]
    Raced,
    #[error("directory not empty")]
    NotEmpty,
    /// The two paths are on different devices or mounts.
    #[error("crosses devices")]
    CrossDevice,
    /// A conditional write found something other than it was told to
    /// replace: the file changed (or appeared) since it was read.
    #[error("changed since it was read")]
    Changed,
    /// A name longer than the file system takes, or a path deeper than the
    /// platform's limit.
    #[error("name too long")]
    NameTooLong,
    /// A mounted repository that cannot be used (missing, damaged, or
    /// without its branch); what the session staged there is kept.
    #[error("the mounted repository cannot be used")]
    Mount(git::MountProblem),
    /// A file open in the editor that the editor did not change.
    #[error("{0:?}")]
    Editor(overlay::EditorFailure),
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// What a write may replace: the stale guard's condition, checked by the
/// `Fs` at the moment the change takes effect, not before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Nothing may be at the path: a new file. Something there is `Exists`.
    Absent,
    /// Exactly the content with this SHA-256 (what the session read). Any
    /// other content is `Changed`, and nothing is written.
    Content(crate::hash::Sha),
    /// Whatever is there, or nothing: for test set-ups only.
    Anything,
}

/// What a walk visitor says about a directory it was shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Descend {
    Yes,
    No,
}

/// Options of a recursive walk.
#[derive(Debug, Clone)]
pub struct WalkOptions {
    /// Honour `.gitignore`, `.ignore` and `.git/info/exclude` as ripgrep does.
    pub gitignore: bool,
    /// Skip names starting with `.` (ripgrep's default).
    pub skip_hidden: bool,
    /// Worker threads; 0 picks the number of cores.
    pub threads: usize,
    /// Where to count the entries passed over (only those `readable` allows).
    pub tally: Option<Arc<WalkTally>>,
}

impl Default for WalkOptions {
    fn default() -> Self {
        WalkOptions { gitignore: true, skip_hidden: true, threads: 0, tally: None }
    }
}

/// The entries a walk passed over without visiting them (nothing below a
/// directory passed over is walked, so it counts once).
#[derive(Debug, Default)]
pub struct WalkTally {
    /// Names starting with `.` (`skip_hidden`).
    pub hidden: std::sync::atomic::AtomicUsize,
    /// Paths an ignore file names (`gitignore`).
    pub ignored: std::sync::atomic::AtomicUsize,
}

impl WalkTally {
    fn count(tally: &Option<Arc<WalkTally>>, counter: fn(&WalkTally) -> &std::sync::atomic::AtomicUsize) {
        if let Some(tally) = tally {
            counter(tally).fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// A readable source handed to a walk visitor for a regular file.
pub enum Source {
    File(std::fs::File),
    Bytes(Arc<[u8]>),
}

/// What tells a file unchanged without reading it: its length and its
/// modification time (nanoseconds since the epoch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub len: u64,
    pub mtime_ns: i64,
}

impl Stamp {
    /// The stamp of an open file, the same as a walk's `stamp` gives for it.
    pub fn of(meta: &std::fs::Metadata) -> Stamp {
        use std::os::unix::fs::MetadataExt;
        Stamp { len: meta.size(), mtime_ns: meta.mtime() * 1_000_000_000 + meta.mtime_nsec() }
    }
}

/// One node met by a walk. Links are reported with `Kind::Link` and never
/// followed by the walk itself.
pub struct WalkEntry<'a> {
    pub path: VPath,
    pub kind: Kind,
    /// Opens a regular file found by the walk, relative to its already-open
    /// directory and without following links.
    pub open: &'a (dyn Fn() -> Result<Source, FsError> + Sync),
    /// The stamp of a regular file, without opening it (one `fstatat`, no
    /// link followed). `None` when it cannot be had cheaply or would not be
    /// true, as for an editor's unsaved buffer: then open the file.
    pub stamp: &'a (dyn Fn() -> Option<Stamp> + Sync),
}

/// The visitor of a walk. Called from several threads at once.
pub type Visitor<'a> = dyn Fn(&WalkEntry<'_>) -> Descend + Sync + 'a;

/// Says whether a walk may read a path for its own purposes (an ignore file,
/// a `.git` that marks a repository): a walk in a view honours only what
/// the session can see, so hidden files cannot change what it finds.
pub type Readable<'a> = dyn Fn(&VPath) -> bool + Sync + 'a;

/// A confined file system. See the module documentation for the two kinds
/// of path it takes.
pub trait Fs: Send + Sync {
    /// The boundary's own virtual path: `/` for a tree, the project root on a device.
    fn boundary(&self) -> &VPath;

    /// Follows every link on `path`, refusing targets outside the boundary.
    fn resolve(&self, path: &VPath) -> Result<Resolution, FsError>;

    /// Metadata of a real path, without following a final link.
    fn lstat(&self, real: &VPath) -> Result<Meta, FsError>;

    /// Reads a regular file whole. Refuses specials without blocking, and
    /// files longer than `max` bytes.
    fn read_file(&self, real: &VPath, max: u64) -> Result<Vec<u8>, FsError>;

    /// The entries of a directory, in no particular order.
    fn read_dir(&self, real: &VPath) -> Result<Vec<DirEntry>, FsError>;

    /// The target text of a link (for `stat`).
    fn read_link(&self, real: &VPath) -> Result<String, FsError>;

    /// Replaces or creates a file atomically, when what is there is what
    /// `expect` says: a crash leaves the old or the new content, and a
    /// change another writer made before this one takes effect is never
    /// overwritten (`Changed` or `Exists`, nothing written). An existing file
    /// keeps its permissions; a new one gets the process's default.
    fn write_file_if(&self, real: &VPath, data: &[u8], expect: Expect) -> Result<(), FsError>;

    /// `write_file_if` with no condition, for set-ups and tests.
    fn write_file(&self, real: &VPath, data: &[u8]) -> Result<(), FsError> {
        self.write_file_if(real, data, Expect::Anything)
    }

    /// Records a change of several files before its first step, so that a
    /// crash part-way is rolled back whole at the next start (see `journal`).
    /// `None` where nothing is recorded (in memory, a dry run).
    fn begin_intent(&self, _steps: &[journal::IntentStep]) -> Result<Option<journal::Intent>, FsError> {
        Ok(None)
    }

    /// Makes one directory; its parent must exist.
    fn create_dir(&self, real: &VPath) -> Result<(), FsError>;

    /// Renames without replacing an existing target.
    fn rename(&self, from: &VPath, to: &VPath) -> Result<(), FsError>;

    /// Moves a node out of the boundary into the trash, answering where it
    /// went (a host path, for the user; never shown to the model).
    fn trash(&self, real: &VPath) -> Result<String, FsError>;

    /// Walks below the directory `real`, calling `visit` for every entry
    /// (possibly from several threads). Directories are descended into when
    /// the visitor says so. Ignore files and `.git` count only where
    /// `readable` allows.
    fn walk_in_view(
        &self,
        real: &VPath,
        options: &WalkOptions,
        visit: &Visitor<'_>,
        readable: &Readable<'_>,
    ) -> Result<(), FsError>;

    /// `walk_in_view` honouring every ignore file.
    fn walk(&self, real: &VPath, options: &WalkOptions, visit: &Visitor<'_>) -> Result<(), FsError> {
        self.walk_in_view(real, options, visit, &|_| true)
    }

    /// A number that moves whenever anything below the real directory
    /// `under` may have changed (see `watch`; asking starts watching it), or
    /// `None` when that cannot be known: a walk's result may be reused only
    /// while it stays the same.
    fn changes(&self, _under: &VPath) -> Option<u64> {
        None
    }

    /// Which copy of the files a real path's bytes (and its `changes`) come
    /// from: 0 for the shared tree, another number for each session's
    /// working copy of a mount, and for a directory above mounts the shared
    /// tree's and theirs together. Two sessions see the same files at a path
    /// only when it is the same; numbers of different sources never compare.
    fn source(&self, _real: &VPath) -> u64 {
        0
    }

    /// The mount points of mounted repositories (`mount::Mounted`); none
    /// elsewhere.
    fn mounts(&self) -> Vec<VPath> {
        Vec::new()
    }

    /// Runs a repository action on the mount at `mount`. A `dry` run decides
    /// everything, conflicts included, and changes nothing.
    fn repo(&self, _mount: &VPath, _action: &git::RepoAction, _dry: bool) -> Result<git::RepoAnswer, git::RepoError> {
        Err(git::RepoError::NotMounted)
    }

    /// The count now (as `changes` answers it) and the real paths below
    /// `under` that changed after the count was `since` (files, and
    /// directories a change named), or `None` when the list cannot be
    /// vouched for: then walk. A hint of where to look, nothing more: it
    /// knows no view, and a path in it may be gone, hidden or ignored.
    fn changed_since(&self, _under: &VPath, _since: u64) -> Option<(u64, Vec<VPath>)> {
        None
    }
}
