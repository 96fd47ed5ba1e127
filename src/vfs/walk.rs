//! A race-safe, parallel recursive walk over directory file descriptors.
//!
//! The walk never builds or opens a host path. Every directory is opened
//! relative to an already-open ancestor with `O_NOFOLLOW | O_DIRECTORY`, and
//! every file handed out is opened relative to its own directory with
//! `O_NOFOLLOW | O_NONBLOCK | O_NOCTTY` and checked with `fstat` to be a
//! regular file. Links are reported (`Kind::Link`) and never followed; FIFOs,
//! sockets and devices are reported (`Kind::Special`) and never opened. A
//! directory swapped for a link between its listing and its opening fails the
//! no-follow open and is skipped, so nothing outside is ever listed.
//!
//! Ignore files are honoured like ripgrep does when `WalkOptions::gitignore`
//! is set: `.rgignore` (highest precedence, across the whole chain), then
//! `.ignore`, then `.gitignore` up to the nearest repository root (a
//! directory holding `.git`), then that root's `.git/info/exclude`. Unlike
//! ripgrep, `.gitignore` is honoured outside a git repository too. Ignore
//! files are read through the directory's fd, without following links (a
//! linked ignore file is not read), and matched against virtual paths, so a
//! matcher's root is the virtual path of its directory. The ignore files of
//! the directories above the start directory count too, as ripgrep's do, up
//! to the boundary (the caller opens those directories: `walk_fd_in_view`'s
//! `parents`); the global git excludes are not read.
//!
//! Names that are not valid UTF-8 cannot be named by a `VPath` and are
//! skipped, with everything below them.
//!
//! Work is shared by `WalkOptions::threads` workers through a LIFO stack of
//! jobs, so the walk is depth-first-ish and the directories kept open are
//! mostly those on the paths being walked. Pending directories are opened
//! from the nearest ancestor whose fd was kept (an *anchor*); at most
//! `FD_BUDGET` fds are kept per walk beyond one in use per worker, and once
//! the budget is spent, deeper directories are opened name by name from an
//! older anchor instead (slower, but never running out of fds).
//!
//! Threads cost more than a small walk: the calling thread walks alone first
//! and starts the other workers only when the walk outlasts `SOLO_TIME` with
//! work still pending, so a listing of a few hundred files starts none.

use super::ignore::{self, Holds, Ignores, MAX_IGNORE_FILE};
use super::os::{errno, meta_of};
use super::{Descend, FsError, Kind, Readable, Source, Stamp, Visitor, WalkEntry, WalkOptions, WalkTally};
use crate::paths::VPath;
use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags, RawDir, SeekFrom};
use std::io::Read;
use std::mem::MaybeUninit;
use std::ops::Range;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

/// Flags for a directory to be listed.
const LIST: OFlags = OFlags::RDONLY.union(OFlags::DIRECTORY).union(OFlags::NOFOLLOW).union(OFlags::CLOEXEC);
/// Flags for a directory only passed through on the way to another.
const TRAVERSE: OFlags = OFlags::PATH.union(OFlags::DIRECTORY).union(OFlags::NOFOLLOW).union(OFlags::CLOEXEC);
/// Flags for a file: never follow, never block on a FIFO, never take a tty.
const READ: OFlags =
    OFlags::RDONLY.union(OFlags::NOFOLLOW).union(OFlags::NONBLOCK).union(OFlags::NOCTTY).union(OFlags::CLOEXEC);

/// Directory fds a walk may keep open for pending work.
const FD_BUDGET: usize = 256;
/// Entries of one directory visited as one job; bigger directories are split
/// so their files are visited by several workers.
const CHUNK: usize = 256;
/// How long the calling thread walks alone before it starts the other workers.
const SOLO_TIME: std::time::Duration = std::time::Duration::from_micros(500);

/// The machine's parallelism, asked once (the answer reads cgroup files).
fn machine_threads() -> usize {
    static THREADS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *THREADS.get_or_init(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1))
}
/// Size of each worker's `getdents` buffer.
const DIRENT_BUF: usize = 32 * 1024;

/// Walks below the open directory `dir` (opened `O_RDONLY | O_DIRECTORY`),
/// whose virtual path is `path`, calling `visit` for every entry below it
/// (not for `dir` itself), possibly from several threads at once.
///
/// Only a failure to list `dir` itself is an error; anything failing below
/// it (permissions, races) skips that entry and the walk goes on.
pub fn walk_fd(dir: OwnedFd, path: VPath, options: &WalkOptions, visit: &Visitor<'_>) -> Result<(), FsError> {
    walk_with(dir, path, None, options, visit, &|_| true, &Budget::new(FD_BUDGET))
}

/// `walk_fd` reading ignore files and `.git` only where `readable` allows,
/// and honouring the ignore files of `parents`: the directories above `dir`
/// (each open, `O_PATH` is enough, with its virtual path), outermost first.
pub fn walk_fd_in_view(
    dir: OwnedFd,
    path: VPath,
    parents: &[(OwnedFd, VPath)],
    options: &WalkOptions,
    visit: &Visitor<'_>,
    readable: &Readable<'_>,
) -> Result<(), FsError> {
    let inherited = if options.gitignore { parent_ignores(parents, readable) } else { None };
    walk_with(dir, path, inherited, options, visit, readable, &Budget::new(FD_BUDGET))
}

/// The ignore chain of the directories above a walk's start, outermost
/// first, read as a walk reads its own directories' files.
fn parent_ignores(parents: &[(OwnedFd, VPath)], readable: &Readable<'_>) -> Option<Arc<Ignores>> {
    let mut chain = None;
    for (fd, path) in parents {
        let has = |name: &str| match rfs::statat(fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Some(meta_of(&st).kind),
            Err(_) => None,
        };
        chain = ignore_level(fd.as_fd(), path, Holds::probe(has), readable, chain);
    }
    chain
}

fn walk_with(
    dir: OwnedFd,
    path: VPath,
    inherited: Option<Arc<Ignores>>,
    options: &WalkOptions,
    visit: &Visitor<'_>,
    readable: &Readable<'_>,
    budget: &Budget,
) -> Result<(), FsError> {
    let threads = match options.threads {
        0 => machine_threads(),
        n => n,
    };
    // A listing starts where the fd stands; start at the beginning.
    let _ = rfs::seek(&dir, SeekFrom::Start(0));
    let mut buf = vec![MaybeUninit::<u8>::uninit(); DIRENT_BUF];
    let root = Arc::new(Anchor { fd: dir, path, permit: Some(budget.force()) });
    let listing = Arc::new(read_listing(root, None, inherited, options, readable, &mut buf)?);

    let queue = Queue::new();
    let n = listing.entries.len();
    let mut first: Vec<Job<'_>> = (0..n)
        .step_by(CHUNK)
        .map(|start| Job::Chunk { listing: listing.clone(), range: start..(start + CHUNK).min(n) })
        .collect();
    drop(listing);
    queue.push(&mut first);

    let ctx = Ctx { options, visit, readable, budget, queue: &queue, chunking: threads > 1 };
    if threads == 1 {
        worker(&ctx, buf);
    } else if solo(&ctx, &mut buf) {
        // The walk ended before the other workers were worth starting.
    } else {
        std::thread::scope(|scope| {
            for _ in 1..threads {
                let ctx = &ctx;
                scope.spawn(move || worker(ctx, vec![MaybeUninit::<u8>::uninit(); DIRENT_BUF]));
            }
            worker(&ctx, buf);
        });
    }
    Ok(())
}

/// What every worker shares.
struct Ctx<'q, 'w, 'v> {
    options: &'q WalkOptions,
    visit: &'q Visitor<'v>,
    readable: &'q Readable<'v>,
    budget: &'w Budget,
    queue: &'q Queue<'w>,
    chunking: bool,
}

/// The fds a walk may keep open for pending work.
struct Budget {
    used: AtomicUsize,
    limit: usize,
    peak: AtomicUsize,
}

/// One kept fd, given back when dropped.
struct Permit<'w>(&'w Budget);

impl Budget {
    fn new(limit: usize) -> Budget {
        Budget { used: AtomicUsize::new(0), limit, peak: AtomicUsize::new(0) }
    }

    fn try_acquire(&self) -> Option<Permit<'_>> {
        let mut used = self.used.load(Ordering::Relaxed);
        loop {
            if used >= self.limit {
                return None;
            }
            match self.used.compare_exchange_weak(used, used + 1, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => {
                    self.peak.fetch_max(used + 1, Ordering::Relaxed);
                    return Some(Permit(self));
                }
                Err(now) => used = now,
            }
        }
    }

    fn force(&self) -> Permit<'_> {
        let used = self.used.fetch_add(1, Ordering::Relaxed);
        self.peak.fetch_max(used + 1, Ordering::Relaxed);
        Permit(self)
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.0.used.fetch_sub(1, Ordering::Relaxed);
    }
}

/// An open directory and its virtual path. With a permit it may be kept for
/// pending work (children opened from it, chunks visited later).
struct Anchor<'w> {
    fd: OwnedFd,
    path: VPath,
    permit: Option<Permit<'w>>,
}

/// One entry of a listing; its name is `names[start..end]`.
struct Entry {
    start: u32,
    end: u32,
    kind: Kind,
}

/// A directory read whole.
struct Listing<'w> {
    /// The directory itself.
    dir: Arc<Anchor<'w>>,
    /// Where its children are opened from when `dir` may not be kept.
    parent: Option<Arc<Anchor<'w>>>,
    /// The ignore chain that applies to its entries (its own files included).
    ignores: Option<Arc<Ignores>>,
    names: String,
    entries: Vec<Entry>,
}

impl Listing<'_> {
    fn name(&self, entry: &Entry) -> &str {
        &self.names[entry.start as usize..entry.end as usize]
    }
}

enum Job<'w> {
    /// A directory to open (from `anchor`, which is it or an ancestor), list and visit.
    Dir { anchor: Arc<Anchor<'w>>, path: VPath, ignores: Option<Arc<Ignores>> },
    /// Some entries of a listing to visit.
    Chunk { listing: Arc<Listing<'w>>, range: Range<usize> },
}

/// The shared stack of jobs.
struct Queue<'w> {
    state: Mutex<State<'w>>,
    wake: Condvar,
}

struct State<'w> {
    jobs: Vec<Job<'w>>,
    /// Workers running a job (which may push more).
    active: usize,
    /// Workers waiting for a job.
    idle: usize,
    stop: bool,
}

impl<'w> Queue<'w> {
    fn new() -> Queue<'w> {
        Queue { state: Mutex::new(State { jobs: Vec::new(), active: 0, idle: 0, stop: false }), wake: Condvar::new() }
    }

    fn lock(&self) -> MutexGuard<'_, State<'w>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn push(&self, jobs: &mut Vec<Job<'w>>) {
        if jobs.is_empty() {
            return;
        }
        let mut state = self.lock();
        state.jobs.append(jobs);
        if state.idle > 0 {
            self.wake.notify_one();
        }
    }

    /// Ends the caller's current job (if `finished`), pushing what it found,
    /// and waits for the next one. `None` when the walk is over.
    fn next(&self, found: &mut Vec<Job<'w>>, finished: bool) -> Option<Job<'w>> {
        let mut state = self.lock();
        if finished {
            state.active -= 1;
        }
        state.jobs.append(found);
        loop {
            if state.stop {
                return None;
            }
            if let Some(job) = state.jobs.pop() {
                state.active += 1;
                if state.idle > 0 && !state.jobs.is_empty() {
                    self.wake.notify_one();
                }
                return Some(job);
            }
            if state.active == 0 {
                state.stop = true;
                self.wake.notify_all();
                return None;
            }
            state.idle += 1;
            state = self.wake.wait(state).unwrap_or_else(PoisonError::into_inner);
            state.idle -= 1;
        }
    }

    fn abort(&self) {
        let mut state = self.lock();
        state.stop = true;
        state.jobs.clear();
        self.wake.notify_all();
    }
}

/// Stops the other workers when a visitor panics, so the panic reaches the
/// caller instead of leaving them waiting for its job.
struct AbortOnPanic<'a, 'w>(&'a Queue<'w>);

impl Drop for AbortOnPanic<'_, '_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.abort();
        }
    }
}

/// Runs jobs on the calling thread alone until none is left (`true`) or
/// `SOLO_TIME` has passed (`false`, with the pending jobs back on the queue).
fn solo(ctx: &Ctx<'_, '_, '_>, buf: &mut [MaybeUninit<u8>]) -> bool {
    let started = std::time::Instant::now();
    let mut found = Vec::new();
    loop {
        let job = {
            let mut state = ctx.queue.lock();
            state.jobs.append(&mut found);
            if started.elapsed() >= SOLO_TIME {
                return state.jobs.is_empty();
            }
            state.jobs.pop()
        };
        match job {
            Some(job) => run(ctx, job, buf, &mut found),
            None => return true,
        }
    }
}

fn worker(ctx: &Ctx<'_, '_, '_>, mut buf: Vec<MaybeUninit<u8>>) {
    let mut found = Vec::new();
    let mut finished = false;
    while let Some(job) = ctx.queue.next(&mut found, finished) {
        finished = true;
        let guard = AbortOnPanic(ctx.queue);
        run(ctx, job, &mut buf, &mut found);
        drop(guard);
    }
}

fn run<'w>(ctx: &Ctx<'_, 'w, '_>, job: Job<'w>, buf: &mut [MaybeUninit<u8>], found: &mut Vec<Job<'w>>) {
    match job {
        Job::Chunk { listing, range } => visit_range(ctx, &listing, range, found),
        Job::Dir { anchor, path, ignores } => {
            let fd = match open_below(&anchor, &path) {
                Ok(fd) => fd,
                Err(e) => {
                    tracing::debug!(path = %path, error = %e, "walk: skipping a directory");
                    return;
                }
            };
            let permit = ctx.budget.try_acquire();
            // A kept directory is where its children are opened from; otherwise
            // they are opened from this one's anchor, and it is let go at once.
            let parent = if permit.is_some() { None } else { Some(anchor) };
            let dir = Arc::new(Anchor { fd, path, permit });
            let listing = match read_listing(dir, parent, ignores, ctx.options, ctx.readable, buf) {
                Ok(listing) => listing,
                Err(e) => {
                    tracing::debug!(error = %e, "walk: skipping an unreadable directory");
                    return;
                }
            };
            let n = listing.entries.len();
            if ctx.chunking && n > CHUNK && listing.dir.permit.is_some() {
                let listing = Arc::new(listing);
                let mut rest: Vec<Job<'w>> = (CHUNK..n)
                    .step_by(CHUNK)
                    .map(|start| Job::Chunk { listing: listing.clone(), range: start..(start + CHUNK).min(n) })
                    .collect();
                ctx.queue.push(&mut rest);
                visit_range(ctx, &listing, 0..CHUNK, found);
            } else {
                visit_range(ctx, &listing, 0..n, found);
            }
        }
    }
}

/// Opens the directory `path` below `anchor`, name by name, following no link.
fn open_below(anchor: &Anchor<'_>, path: &VPath) -> Result<OwnedFd, FsError> {
    let rel = path.strip_prefix(&anchor.path).filter(|rel| !rel.is_empty()).ok_or(FsError::Escapes)?;
    let mut names = rel.split('/').peekable();
    let mut cur: Option<OwnedFd> = None;
    while let Some(name) = names.next() {
        let flags = if names.peek().is_some() { TRAVERSE } else { LIST };
        let at = cur.as_ref().map(|fd| fd.as_fd()).unwrap_or(anchor.fd.as_fd());
        cur = Some(rfs::openat(at, name, flags, Mode::empty()).map_err(errno)?);
    }
    cur.ok_or(FsError::NotFound)
}

/// Lists `dir` whole and reads its ignore files.
fn read_listing<'w>(
    dir: Arc<Anchor<'w>>,
    parent: Option<Arc<Anchor<'w>>>,
    inherited: Option<Arc<Ignores>>,
    options: &WalkOptions,
    readable: &Readable<'_>,
    buf: &mut [MaybeUninit<u8>],
) -> Result<Listing<'w>, FsError> {
    let fd = dir.fd.as_fd();
    let mut names = String::new();
    let mut entries = Vec::new();
    let mut holds = Holds::default();
    let mut raw = RawDir::new(fd, buf);
    while let Some(item) = raw.next() {
        let item = item.map_err(errno)?;
        let bytes = item.file_name().to_bytes();
        if bytes == b"." || bytes == b".." {
            continue;
        }
        let Ok(name) = std::str::from_utf8(bytes) else {
            continue;
        };
        // A write's temporary file is not the user's: never shown.
        if super::os::is_temp_name(name).is_some() {
            continue;
        }
        let kind = match item.file_type() {
            FileType::Directory => Kind::Dir,
            FileType::RegularFile => Kind::File,
            FileType::Symlink => Kind::Link,
            FileType::Unknown => match rfs::statat(fd, item.file_name(), AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => meta_of(&st).kind,
                Err(_) => continue,
            },
            _ => Kind::Special,
        };
        if options.gitignore {
            holds.note(name, kind);
        }
        let start = names.len() as u32;
        names.push_str(name);
        entries.push(Entry { start, end: names.len() as u32, kind });
    }
    let ignores = ignore_level(fd, &dir.path, holds, readable, inherited);
    Ok(Listing { dir, parent, ignores, names, entries })
}

/// The ignore chain below the directory `fd` (virtual path `root`), which
/// holds `holds` (`ignore::level`), its files read through `fd`.
fn ignore_level(
    fd: BorrowedFd<'_>,
    root: &VPath,
    holds: Holds,
    readable: &Readable<'_>,
    inherited: Option<Arc<Ignores>>,
) -> Option<Arc<Ignores>> {
    ignore::level(root, holds, readable, inherited, |names| match names {
        [name] => read_small(fd, name),
        _ => read_exclude(fd),
    })
}

/// Reads a small regular file of `dir` without following a link.
fn read_small(dir: BorrowedFd<'_>, name: &str) -> Option<Vec<u8>> {
    let fd = rfs::openat(dir, name, READ, Mode::empty()).ok()?;
    let st = rfs::fstat(&fd).ok()?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile || st.st_size as u64 > MAX_IGNORE_FILE {
        return None;
    }
    let mut out = Vec::with_capacity(st.st_size as usize);
    std::fs::File::from(fd).take(MAX_IGNORE_FILE).read_to_end(&mut out).ok()?;
    Some(out)
}

/// Reads `.git/info/exclude` of a repository root, following no link.
fn read_exclude(dir: BorrowedFd<'_>) -> Option<Vec<u8>> {
    let git = rfs::openat(dir, ".git", TRAVERSE, Mode::empty()).ok()?;
    let info = rfs::openat(&git, "info", TRAVERSE, Mode::empty()).ok()?;
    read_small(info.as_fd(), "exclude")
}

/// Opens a regular file of `dir` without following a link or blocking.
fn open_file(dir: BorrowedFd<'_>, name: &str) -> Result<Source, FsError> {
    let fd = rfs::openat(dir, name, READ, Mode::empty()).map_err(errno)?;
    let st = rfs::fstat(&fd).map_err(errno)?;
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => Ok(Source::File(std::fs::File::from(fd))),
        FileType::Directory => Err(FsError::IsADir),
        _ => Err(FsError::NotRegular),
    }
}

/// The stamp of a regular file of `dir`, from `fstatat` without following a link.
fn file_stamp(dir: BorrowedFd<'_>, name: &str) -> Option<Stamp> {
    let st = rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).ok()?;
    (FileType::from_raw_mode(st.st_mode) == FileType::RegularFile).then(|| Stamp {
        len: st.st_size as u64,
        mtime_ns: st.st_mtime as i64 * 1_000_000_000 + st.st_mtime_nsec as i64,
    })
}

/// Visits some entries of a listing, collecting the directories to descend into.
fn visit_range<'w>(ctx: &Ctx<'_, 'w, '_>, listing: &Listing<'w>, range: Range<usize>, found: &mut Vec<Job<'w>>) {
    let options = ctx.options;
    let dir = listing.dir.fd.as_fd();
    for entry in &listing.entries[range] {
        let name = listing.name(entry);
        let kind = entry.kind;
        if kind == Kind::Dir && name == ".git" {
            continue;
        }
        if options.skip_hidden && name.starts_with('.') {
            if options.tally.is_some() && (ctx.readable)(&listing.dir.path.join(name)) {
                WalkTally::count(&options.tally, |t| &t.hidden);
            }
            continue;
        }
        let path = listing.dir.path.join(name);
        if options.gitignore {
            if let Some(ignores) = &listing.ignores {
                if ignores.ignores(Path::new(path.as_str()), kind == Kind::Dir) {
                    if (ctx.readable)(&path) {
                        WalkTally::count(&options.tally, |t| &t.ignored);
                    }
                    continue;
                }
            }
        }
        let open = move || match kind {
            Kind::File => open_file(dir, name),
            Kind::Dir => Err(FsError::IsADir),
            Kind::Link | Kind::Special => Err(FsError::NotRegular),
        };
        let stamp = move || match kind {
            Kind::File => file_stamp(dir, name),
            _ => None,
        };
        let walk_entry = WalkEntry { path, kind, open: &open, stamp: &stamp };
        if (ctx.visit)(&walk_entry) == Descend::Yes && kind == Kind::Dir {
            let anchor = match &listing.parent {
                Some(parent) => parent.clone(),
                None => listing.dir.clone(),
            };
            found.push(Job::Dir { anchor, path: walk_entry.path, ignores: listing.ignores.clone() });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::fs;
    use std::os::unix::fs::symlink;
    use std::path::PathBuf;

    fn open_dir(host: &Path) -> OwnedFd {
        rfs::open(host, LIST, Mode::empty()).unwrap()
    }

    fn opts(gitignore: bool, skip_hidden: bool, threads: usize) -> WalkOptions {
        WalkOptions { gitignore, skip_hidden, threads, tally: None }
    }

    /// Walks `host` as `/ws`, descending everywhere, answering path -> kind.
    fn walk_all(host: &Path, options: WalkOptions) -> BTreeMap<String, Kind> {
        let seen = Mutex::new(BTreeMap::new());
        walk_fd(open_dir(host), VPath::parse("/ws").unwrap(), &options, &|e: &WalkEntry<'_>| {
            let old = seen.lock().unwrap().insert(e.path.to_string(), e.kind);
            assert!(old.is_none(), "visited twice: {}", e.path);
            Descend::Yes
        })
        .unwrap();
        seen.into_inner().unwrap()
    }

    fn write(root: &Path, rel: &str, text: &str) {
        let path = root.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    fn keys(map: &BTreeMap<String, Kind>) -> Vec<&str> {
        map.keys().map(String::as_str).collect()
    }

    #[test]
    fn nested_gitignore_with_negation() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        write(root, ".gitignore", "# comment\n*.log\nbuild/\n/top_only\n");
        write(root, "a.log", "");
        write(root, "keep.txt", "");
        write(root, "top_only", "");
        write(root, "build/out.txt", "");
        write(root, "sub/build", ""); // a file: `build/` is for directories only
        write(root, "sub/x.log", "");
        write(root, "sub/y.log", "");
        write(root, "sub/top_only", ""); // `/top_only` is anchored to the root
        write(root, "sub/secret", "");
        write(root, "sub/.gitignore", "!x.log\r\nsecret\n");
        write(root, "secret", "");
        write(root, "other/.ignore", "z.txt\n");
        write(root, "other/z.txt", "");
        write(root, "other/w.txt", "");
        // `.ignore` wins over `.gitignore`.
        write(root, "pri/.gitignore", "!p.log\n");
        write(root, "pri/.ignore", "p.log\n");
        write(root, "pri/p.log", "");

        let seen = walk_all(root, opts(true, true, 2));
        assert_eq!(
            keys(&seen),
            vec![
                "/ws/keep.txt",
                "/ws/other",
                "/ws/other/w.txt",
                "/ws/pri",
                "/ws/secret",
                "/ws/sub",
                "/ws/sub/build",
                "/ws/sub/top_only",
                "/ws/sub/x.log",
            ]
        );
        assert_eq!(seen["/ws/sub"], Kind::Dir);
        assert_eq!(seen["/ws/sub/build"], Kind::File);

        // Without gitignore, everything but hidden names.
        let all = walk_all(root, opts(false, true, 1));
        for path in ["/ws/a.log", "/ws/build/out.txt", "/ws/sub/y.log", "/ws/sub/secret", "/ws/other/z.txt"] {
            assert!(all.contains_key(path), "{path} missing");
        }
    }

    #[test]
    fn repository_root_and_exclude() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        write(root, ".gitignore", "*.tmp\n");
        write(root, "a.tmp", "");
        write(root, "excluded.txt", "");
        write(root, "repo/.git/info/exclude", "excluded.txt\n");
        write(root, "repo/.git/HEAD", "ref: refs/heads/main\n");
        write(root, "repo/excluded.txt", "");
        write(root, "repo/inner.tmp", ""); // the outer .gitignore stops at a repository root
        write(root, "repo/kept.txt", "");
        let seen = walk_all(root, opts(true, false, 2));
        assert_eq!(
            keys(&seen),
            vec!["/ws/.gitignore", "/ws/excluded.txt", "/ws/repo", "/ws/repo/inner.tmp", "/ws/repo/kept.txt"]
        );
    }

    /// The ignore files of the directories above the start count, as
    /// ripgrep's do, but only those the reader may see; `.rgignore` first.
    #[test]
    fn parent_ignore_files_apply_where_readable() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        write(root, ".gitignore", "*.log\n");
        write(root, ".rgignore", "a.txt\n");
        write(root, "mid/.ignore", "a.txt\nc.rs\n");
        write(root, "mid/.rgignore", "!c.rs\n");
        for name in ["a.txt", "b.log", "c.rs"] {
            write(root, &format!("mid/sub/{name}"), "");
        }
        let walk = |readable: &Readable<'_>| {
            let parents = vec![
                (open_dir(root), VPath::parse("/ws").unwrap()),
                (open_dir(&root.join("mid")), VPath::parse("/ws/mid").unwrap()),
            ];
            let seen = Mutex::new(Vec::new());
            walk_fd_in_view(
                open_dir(&root.join("mid/sub")),
                VPath::parse("/ws/mid/sub").unwrap(),
                &parents,
                &opts(true, true, 1),
                &|e: &WalkEntry<'_>| {
                    seen.lock().unwrap().push(e.path.to_string());
                    Descend::Yes
                },
                readable,
            )
            .unwrap();
            let mut seen = seen.into_inner().unwrap();
            seen.sort();
            seen
        };
        assert_eq!(walk(&|_| true), vec!["/ws/mid/sub/c.rs"]);
        let hidden = |p: &VPath| p.as_str() != "/ws/.gitignore" && p.as_str() != "/ws/mid/.rgignore";
        assert_eq!(walk(&hidden), vec!["/ws/mid/sub/b.log"]);
    }

    #[test]
    fn hidden_names_are_skipped() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        write(root, ".hidden", "");
        write(root, ".hdir/inner", "");
        write(root, "shown/.also", "");
        write(root, "shown/file", "");
        write(root, ".git/config", "");
        let seen = walk_all(root, opts(false, true, 2));
        assert_eq!(keys(&seen), vec!["/ws/shown", "/ws/shown/file"]);
        let seen = walk_all(root, opts(false, false, 2));
        assert_eq!(
            keys(&seen),
            vec!["/ws/.hdir", "/ws/.hdir/inner", "/ws/.hidden", "/ws/shown", "/ws/shown/.also", "/ws/shown/file"]
        );
    }

    /// A file's stamp is what the opened file's metadata says; links and
    /// directories have none (a link's target is not stamped through it).
    #[test]
    fn stamps_match_the_opened_file_and_skip_links_and_directories() {
        let tmp = tempfile::tempdir().unwrap();
        write(tmp.path(), "d/f.txt", "some text");
        symlink(tmp.path().join("d/f.txt"), tmp.path().join("link")).unwrap();
        let stamps = Mutex::new(BTreeMap::new());
        walk_fd(open_dir(tmp.path()), VPath::parse("/ws").unwrap(), &opts(false, true, 1), &|e: &WalkEntry<'_>| {
            let opened = match (e.open)() {
                Ok(Source::File(f)) => Some(Stamp::of(&f.metadata().unwrap())),
                _ => None,
            };
            stamps.lock().unwrap().insert(e.path.to_string(), ((e.stamp)(), opened));
            Descend::Yes
        })
        .unwrap();
        let stamps = stamps.into_inner().unwrap();
        let (stamp, opened) = stamps["/ws/d/f.txt"];
        assert_eq!(stamp, opened);
        assert_eq!(stamp.map(|s| s.len), Some(9));
        assert_eq!(stamps["/ws/link"], (None, None));
        assert_eq!(stamps["/ws/d"].0, None);
    }

    #[test]
    fn links_are_reported_not_followed() {
        let outside = tempfile::tempdir().unwrap();
        write(outside.path(), "secret", "outside");
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        write(root, "f", "inside");
        symlink(outside.path(), root.join("out")).unwrap();
        symlink(outside.path().join("secret"), root.join("file_link")).unwrap();
        let results = Mutex::new(BTreeMap::new());
        walk_fd(open_dir(root), VPath::parse("/ws").unwrap(), &opts(true, true, 2), &|e: &WalkEntry<'_>| {
            let opened = match (e.open)() {
                Ok(Source::File(mut f)) => {
                    let mut s = String::new();
                    f.read_to_string(&mut s).unwrap();
                    Ok(s)
                }
                Ok(Source::Bytes(_)) => unreachable!(),
                Err(err) => Err(err.to_string()),
            };
            results.lock().unwrap().insert(e.path.to_string(), (e.kind, opened));
            Descend::Yes
        })
        .unwrap();
        let results = results.into_inner().unwrap();
        assert_eq!(results.len(), 3, "{:?}", results.keys().collect::<Vec<_>>());
        assert_eq!(results["/ws/f"], (Kind::File, Ok("inside".to_string())));
        assert_eq!(results["/ws/out"].0, Kind::Link);
        assert!(results["/ws/out"].1.is_err());
        assert_eq!(results["/ws/file_link"].0, Kind::Link);
        assert!(results["/ws/file_link"].1.is_err());
    }

    #[test]
    fn fifo_is_special_and_never_opened() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        rfs::mknodat(rfs::CWD, root.join("pipe"), FileType::Fifo, Mode::from_raw_mode(0o644), 0).unwrap();
        let seen = Mutex::new(Vec::new());
        walk_fd(open_dir(root), VPath::parse("/ws").unwrap(), &opts(true, true, 1), &|e: &WalkEntry<'_>| {
            let err = matches!((e.open)(), Err(FsError::NotRegular));
            seen.lock().unwrap().push((e.path.to_string(), e.kind, err));
            Descend::Yes
        })
        .unwrap();
        assert_eq!(seen.into_inner().unwrap(), vec![("/ws/pipe".to_string(), Kind::Special, true)]);
        // Even opened as if it were a file (a race), it is refused without blocking.
        let dir = open_dir(root);
        assert!(matches!(open_file(dir.as_fd(), "pipe"), Err(FsError::NotRegular)));
    }

    /// A chain `depth` levels deep, each level with a file, a leaf
    /// directory and the next level, so pending siblings keep parents busy.
    fn deep_tree(root: &Path, depth: usize) -> (PathBuf, usize) {
        let mut dir = root.to_path_buf();
        let mut count = 0;
        for i in 0..depth {
            fs::create_dir(dir.join("leaf")).unwrap();
            fs::write(dir.join("leaf").join("x"), "").unwrap();
            fs::write(dir.join(format!("f{i}")), "").unwrap();
            fs::create_dir(dir.join("d")).unwrap();
            count += 4;
            dir = dir.join("d");
        }
        fs::write(dir.join("bottom"), "").unwrap();
        (dir, count + 1)
    }

    #[test]
    fn deep_tree_is_walked_whole() {
        let tmp = tempfile::tempdir().unwrap();
        let (_, count) = deep_tree(tmp.path(), 40);
        for threads in [1, 2, 4] {
            let seen = walk_all(tmp.path(), opts(true, true, threads));
            assert_eq!(seen.len(), count);
            let bottom = format!("/ws{}/bottom", "/d".repeat(40));
            assert_eq!(seen[&bottom], Kind::File);
        }
    }

    #[test]
    fn fd_budget_bounds_kept_directories() {
        let tmp = tempfile::tempdir().unwrap();
        let (_, count) = deep_tree(tmp.path(), 60);
        for threads in [1, 3] {
            let budget = Budget::new(4);
            let seen = AtomicUsize::new(0);
            walk_with(
                open_dir(tmp.path()),
                VPath::parse("/ws").unwrap(),
                None,
                &opts(false, true, threads),
                &|_e: &WalkEntry<'_>| {
                    seen.fetch_add(1, Ordering::Relaxed);
                    Descend::Yes
                },
                &|_| true,
                &budget,
            )
            .unwrap();
            assert_eq!(seen.into_inner(), count);
            assert!(budget.peak.load(Ordering::Relaxed) <= 4);
            assert_eq!(budget.used.load(Ordering::Relaxed), 0);
        }
        // With the normal budget, a deep tree keeps about one fd per level.
        let budget = Budget::new(FD_BUDGET);
        walk_with(
            open_dir(tmp.path()),
            VPath::parse("/ws").unwrap(),
            None,
            &opts(false, true, 2),
            &|_e: &WalkEntry<'_>| Descend::Yes,
            &|_| true,
            &budget,
        )
        .unwrap();
        assert!(budget.peak.load(Ordering::Relaxed) <= 2 * 60 + 4, "peak {}", budget.peak.load(Ordering::Relaxed));
    }

    #[test]
    fn wide_directories_are_split_and_walked_whole() {
        let tmp = tempfile::tempdir().unwrap();
        for i in 0..(3 * CHUNK + 7) {
            fs::write(tmp.path().join(format!("f{i}")), "").unwrap();
        }
        for i in 0..(CHUNK + 1) {
            fs::create_dir(tmp.path().join(format!("d{i}"))).unwrap();
            fs::write(tmp.path().join(format!("d{i}/x")), "").unwrap();
        }
        let seen = walk_all(tmp.path(), opts(true, true, 3));
        assert_eq!(seen.len(), 3 * CHUNK + 7 + 2 * (CHUNK + 1));
    }

    #[test]
    fn descend_no_prunes() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        write(root, "keep/a", "");
        write(root, "keep/deeper/b", "");
        write(root, "prune/c", "");
        write(root, "prune/deeper/d", "");
        let seen = Mutex::new(Vec::new());
        walk_fd(open_dir(root), VPath::parse("/").unwrap(), &opts(true, true, 2), &|e: &WalkEntry<'_>| {
            seen.lock().unwrap().push(e.path.to_string());
            if e.path.as_str() == "/prune" {
                Descend::No
            } else {
                Descend::Yes
            }
        })
        .unwrap();
        let mut seen = seen.into_inner().unwrap();
        seen.sort();
        assert_eq!(seen, vec!["/keep", "/keep/a", "/keep/deeper", "/keep/deeper/b", "/prune"]);
    }

    #[test]
    fn directory_swapped_for_a_link_is_skipped() {
        let outside = tempfile::tempdir().unwrap();
        write(outside.path(), "secret", "outside");
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        write(&root, "d/inner", "inside");
        write(&root, "f", "inside");
        let seen = Mutex::new(Vec::new());
        let opened = Mutex::new(None);
        walk_fd(open_dir(&root), VPath::parse("/ws").unwrap(), &opts(true, true, 1), &|e: &WalkEntry<'_>| {
            seen.lock().unwrap().push(e.path.to_string());
            match e.path.as_str() {
                "/ws/d" => {
                    // Between the listing and the descent, `d` becomes a link outside.
                    fs::rename(root.join("d"), root.join("moved")).unwrap();
                    symlink(outside.path(), root.join("d")).unwrap();
                }
                "/ws/f" => {
                    // Between the listing and the open, `f` becomes a link to a file outside.
                    fs::remove_file(root.join("f")).unwrap();
                    symlink(outside.path().join("secret"), root.join("f")).unwrap();
                    *opened.lock().unwrap() = Some((e.open)().is_err());
                }
                _ => {}
            }
            Descend::Yes
        })
        .unwrap();
        let mut seen = seen.into_inner().unwrap();
        seen.sort();
        assert_eq!(seen, vec!["/ws/d", "/ws/f"]);
        assert_eq!(opened.into_inner().unwrap(), Some(true));
    }

    #[test]
    fn unreadable_start_is_an_error_and_unreadable_below_is_skipped() {
        let tmp = tempfile::tempdir().unwrap();
        write(tmp.path(), "a", "");
        // An fd that is not a directory cannot be listed.
        let file = rfs::open(tmp.path().join("a"), OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()).unwrap();
        let result =
            walk_fd(file, VPath::parse("/ws").unwrap(), &WalkOptions::default(), &|_e: &WalkEntry<'_>| Descend::Yes);
        assert!(result.is_err());
    }

    #[test]
    fn visitor_panic_reaches_the_caller() {
        let tmp = tempfile::tempdir().unwrap();
        for i in 0..50 {
            write(tmp.path(), &format!("d{i}/f"), "");
        }
        let result = std::panic::catch_unwind(|| {
            walk_fd(open_dir(tmp.path()), VPath::parse("/ws").unwrap(), &opts(true, true, 3), &|e: &WalkEntry<'_>| {
                if e.path.as_str() == "/ws/d7/f" {
                    panic!("visitor failed");
                }
                Descend::Yes
            })
        });
        assert!(result.is_err());
    }

    #[test]
    fn os_fs_walk_goes_through_here() {
        use crate::vfs::os::OsFs;
        use crate::vfs::Fs;
        let tmp = tempfile::tempdir().unwrap();
        write(tmp.path(), "src/main.rs", "fn main() {}");
        write(tmp.path(), "target/debug/x", "");
        write(tmp.path(), ".gitignore", "/target\n");
        let fs = OsFs::open(tmp.path(), VPath::parse("/ws").unwrap(), None).unwrap();
        let seen = Mutex::new(Vec::new());
        fs.walk(&VPath::parse("/ws").unwrap(), &WalkOptions::default(), &|e: &WalkEntry<'_>| {
            seen.lock().unwrap().push(e.path.to_string());
            Descend::Yes
        })
        .unwrap();
        let mut seen = seen.into_inner().unwrap();
        seen.sort();
        assert_eq!(seen, vec!["/ws/src", "/ws/src/main.rs"]);
    }

    /// `cargo test --release --lib vfs::walk::tests::bench -- --ignored --nocapture`
    /// (compare with `rg --files ~/.cargo/registry/src | wc -l`).
    #[test]
    #[ignore]
    fn bench() {
        let dir = std::env::var("WALK_BENCH_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|_| PathBuf::from(std::env::var("HOME").unwrap()).join(".cargo/registry/src"));
        for _ in 0..3 {
            let start = std::time::Instant::now();
            let files = AtomicUsize::new(0);
            walk_fd(open_dir(&dir), VPath::parse("/src").unwrap(), &WalkOptions::default(), &|e: &WalkEntry<'_>| {
                if e.kind != Kind::Dir {
                    files.fetch_add(1, Ordering::Relaxed);
                }
                Descend::Yes
            })
            .unwrap();
            eprintln!("{} entries in {:?}", files.into_inner(), start.elapsed());
        }
    }
}
