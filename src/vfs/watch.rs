//! A change count and change feed for one directory tree on disk, fed by inotify.
//!
//! `Changes::get` answers a number that moves whenever anything below the
//! watched directory may have changed: the watcher's thread adds one when
//! it has read inotify's events (while events wait unread or are being
//! read, `get` waits up to `SETTLE_WAIT` for them to be counted, then
//! answers `None`), and `OsFs` adds one at the end of each of its
//! own changes (so a change made through ctxfs is counted before its call
//! returns). The search index keeps the visible files of a walk and walks
//! again only when the number moved.
//!
//! `Changes::since` is the feed: the host paths (files and directories the
//! events named) that changed after the count was some earlier value, so
//! the index can look at those alone instead of walking the tree. It is a
//! hint of where to look, never a verdict on what may be seen: it knows no
//! view, and the index checks every path as its walk would. It answers
//! `None` (walk) whenever it cannot vouch for the list being complete: the
//! event queue overflowed, a directory was made, moved, removed or
//! re-permissioned (the watches are rebuilt), an ignore file (`.gitignore`,
//! `.ignore`, `.rgignore`, anything in `.git/info`) or a `.git` changed, a
//! link appeared, an event named no file, or more than `MAX_DIRTY` paths
//! piled up. Changes made through ctxfs count without a path of their own;
//! their events name the paths.
//!
//! The first ask of a count waits (at most `FIRST_BUILD_WAIT`) for the
//! watches' first build, so that the walk it comes before is kept. While the
//! watches are being rebuilt, or when they cannot be (no
//! inotify, a file system inotify does not see changes on, such as NFS or
//! FUSE, or too many directories), both answer `None`, and the index walks
//! every time as it would without a watcher.
//!
//! Every directory below the watched one is watched, hidden and ignored ones
//! included (which ignore files count depends on the session's view), except
//! what lies inside `.git` but its `info/` (which holds `exclude`). Watches are
//! added by host path with `IN_DONT_FOLLOW | IN_ONLYDIR`; a directory swapped
//! for a link is refused by the kernel, and a link swapped into a path above a
//! directory at worst adds a watch whose events make the next query walk. A
//! new, moved, removed or re-permissioned directory, a changed ignore file or
//! a lost event queue rebuilds the watches, at most once a second (until
//! then the count is unknown and queries walk).
//!
//! It is not used by `MemFs` (whose tests set its count and feed by hand)
//! and `Overlay` adds its own buffers' changes to the inner count and feed.

use super::walk::walk_fd;
use super::{Descend, Kind, WalkEntry, WalkOptions};
use crate::paths::VPath;
use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use rustix::fs::{self as rfs, Mode, OFlags};
use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// Set (to anything) to run without a watcher: every search walks, as for benchmarks.
pub const NO_WATCH_ENV: &str = "CTXFS_NO_WATCH";

/// Whether `CTXFS_NO_WATCH` turns the watcher off (read once).
pub fn disabled() -> bool {
    static OFF: OnceLock<bool> = OnceLock::new();
    *OFF.get_or_init(|| std::env::var_os(NO_WATCH_ENV).is_some_and(|v| !v.is_empty()))
}

/// How many directory trees one file system watches at once (the searched
/// roots; the least recently asked is let go first).
const TREES: usize = 4;

/// The counters of the trees searched lately, and the changes made through
/// ctxfs, which every one of them counts.
#[derive(Debug, Default)]
pub struct Watchers {
    trees: std::sync::Mutex<Vec<(VPath, Arc<Changes>)>>,
    /// Set for a process that answers one call and ends: nothing is
    /// watched, since no later search could reuse a walk (`Watchers::off`).
    off: bool,
}

impl Watchers {
    /// Counters that never watch: every count is unknown, and every search walks.
    pub fn off() -> Watchers {
        Watchers { off: true, ..Watchers::default() }
    }

    /// Counts a change made through ctxfs in every watched tree (a tree that
    /// does not hold it only walks once more than it needed to).
    pub fn bump(&self) {
        for (_, changes) in self.trees.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            changes.bump();
        }
    }

    /// The count for the directory `under` (a real path at or below the
    /// boundary `vroot`, whose host directory is `host_root`), watching it
    /// from now on; `None` while it cannot be known.
    pub fn get(&self, host_root: &Path, vroot: &VPath, under: &VPath) -> Option<u64> {
        if disabled() || self.off {
            return None;
        }
        let rel = under.strip_prefix(vroot)?;
        let changes = {
            let mut trees = self.trees.lock().unwrap_or_else(|e| e.into_inner());
            let at = trees.iter().position(|(path, _)| path == under);
            let entry = match at {
                Some(at) => trees.remove(at),
                None => (under.clone(), Arc::new(Changes::default())),
            };
            let changes = entry.1.clone();
            trees.insert(0, entry);
            trees.truncate(TREES);
            changes
        };
        changes.get(&host_root.join(rel), under)
    }

    /// The count now and the paths below `under` (as virtual paths under
    /// `vroot`) that changed since the count was `since`, or `None` when the
    /// feed cannot vouch for that list (see the module header): walk.
    pub fn since(&self, host_root: &Path, vroot: &VPath, under: &VPath, since: u64) -> Option<(u64, Vec<VPath>)> {
        if disabled() || self.off {
            return None;
        }
        let changes = {
            let trees = self.trees.lock().unwrap_or_else(|e| e.into_inner());
            trees.iter().find(|(path, _)| path == under)?.1.clone()
        };
        let (now, hosts) = changes.since(since)?;
        let mut paths = Vec::with_capacity(hosts.len());
        for host in hosts {
            // A name that is not UTF-8 cannot be a path of the session's; a walk skips it too.
            let rel = host.strip_prefix(host_root).ok()?.to_str()?;
            paths.push(vroot.join_rel(rel));
        }
        Some((now, paths))
    }
}

/// The longest a query waits for events being counted before it walks.
const SETTLE_WAIT: std::time::Duration = std::time::Duration::from_millis(50);

/// The most paths the feed keeps; past it the next query walks.
pub const MAX_DIRTY: usize = 4096;

/// The paths that changed, each with the count its last change made.
#[derive(Debug, Default)]
struct Log {
    /// The count from which on the paths are complete: a reader that saw an
    /// earlier count walks.
    floor: u64,
    paths: HashMap<PathBuf, u64>,
}

/// The most directories one boundary may have watched; past it the counter gives up.
const MAX_WATCHES: usize = 65_536;

/// The shared counter and whether the watches cover the tree now.
#[derive(Debug, Default)]
pub struct Changes {
    /// The inotify instance, once the thread made it: events waiting in it
    /// are changes not counted yet.
    queue: OnceLock<Arc<OwnedFd>>,
    count: AtomicU64,
    /// Whether every directory is watched (false while building and for good after a failure).
    ready: AtomicBool,
    /// The watcher's thread, started on the first `get`.
    started: OnceLock<()>,
    /// Directories watched at the last build (for tests and logs).
    watched: AtomicUsize,
    /// Set while the thread reads events and records them: they are out of
    /// the queue but not counted yet.
    reading: AtomicBool,
    /// The feed: which paths changed, and since when that is complete.
    log: Mutex<Log>,
    /// Set once the first build of the watches has ended (built, or given
    /// up); `get` waits for it (`FIRST_BUILD_WAIT`).
    first_built: Mutex<bool>,
    first_built_now: std::sync::Condvar,
}

impl Changes {
    /// Counts a change made through ctxfs itself (its events name its paths).
    pub fn bump(&self) {
        let _log = self.log();
        self.count.fetch_add(1, Ordering::SeqCst);
    }

    fn log(&self) -> std::sync::MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts one batch of events: the paths they named, or, when `lost`,
    /// that the feed cannot say what changed (readers of earlier counts walk).
    fn record(&self, paths: impl IntoIterator<Item = PathBuf>, lost: bool) {
        let mut log = self.log();
        let now = self.count.fetch_add(1, Ordering::SeqCst) + 1;
        if !lost {
            for path in paths {
                log.paths.insert(path, now);
            }
        }
        if lost || log.paths.len() > MAX_DIRTY {
            log.floor = now;
            log.paths.clear();
        }
    }

    /// Whether the count can be trusted now: `None` while events wait
    /// unread or uncounted (the thread is about to count them), else whether
    /// the watches cover the tree.
    fn quiet(&self) -> Option<bool> {
        // Events the thread has not read yet are changes it has not counted.
        let Some(queue) = self.queue.get() else { return Some(false) };
        if rustix::io::ioctl_fionread(&**queue).map_or(true, |waiting| waiting > 0) {
            return None;
        }
        // Read after the queue: an event read from it since is being counted
        // (`reading`) or is counted already.
        if self.reading.load(Ordering::SeqCst) {
            return None;
        }
        Some(self.ready.load(Ordering::SeqCst))
    }

    /// Whether the count can be trusted, waiting up to `SETTLE_WAIT` for
    /// events the thread is about to count (a query right after an outside
    /// change would otherwise walk).
    fn settled(&self) -> bool {
        let until = std::time::Instant::now() + SETTLE_WAIT;
        loop {
            if let Some(ready) = self.quiet() {
                return ready;
            }
            if std::time::Instant::now() >= until {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
    }

    /// The count now and every path that changed since the count was
    /// `since` (host paths, in no order), or `None` when that list cannot be
    /// vouched for: the reader walks.
    pub fn since(&self, since: u64) -> Option<(u64, Vec<PathBuf>)> {
        if !self.settled() {
            return None;
        }
        let log = self.log();
        let now = self.count.load(Ordering::SeqCst);
        if since < log.floor || since > now {
            return None;
        }
        let paths = log.paths.iter().filter(|(_, at)| **at > since).map(|(path, _)| path.clone()).collect();
        drop(log);
        // Quiet still: nothing was read from the queue while the log was looked at.
        (self.quiet() == Some(true)).then_some((now, paths))
    }

    /// The counter, or `None` while the watches do not cover the tree.
    /// The first call starts the watcher for `host_root` (presented as
    /// `vroot`); every call waits (at most `FIRST_BUILD_WAIT`) until the first
    /// build of the watches has ended.
    pub fn get(self: &Arc<Self>, host_root: &Path, vroot: &VPath) -> Option<u64> {
        self.started.get_or_init(|| start(Arc::downgrade(self), host_root.to_path_buf(), vroot.clone()));
        self.wait_for_first_build(FIRST_BUILD_WAIT);
        // The count is read after `settled`: a change that lands between the two
        // reads moves the count, so the caller's next look differs.
        self.settled().then(|| self.count.load(Ordering::SeqCst))
    }

    /// Waits until the first build of the watches has ended, at most `wait`.
    fn wait_for_first_build(&self, wait: std::time::Duration) {
        let mut built = self.first_built.lock().unwrap_or_else(|e| e.into_inner());
        let until = std::time::Instant::now() + wait;
        while !*built {
            let Some(left) = until.checked_duration_since(std::time::Instant::now()) else { return };
            built = self.first_built_now.wait_timeout(built, left).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    /// Says that the first build of the watches has ended (built or given up).
    fn first_build_ended(&self) {
        *self.first_built.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.first_built_now.notify_all();
    }

    /// How many directories the last build watched.
    pub fn watched(&self) -> usize {
        self.watched.load(Ordering::SeqCst)
    }
}

/// The longest `Changes::get` waits for the first build of the watches.
/// A walk made before the watches cover the tree is not kept (a change in a
/// directory it had read could go unseen), so a search that came with the
/// watcher still starting walked, and the search after it walked again: at
/// 1.27M passages (15,737 directories, watched in 0.3 s) the second search
/// of a session took 280-430 ms instead of some 15 ms. The build is a walk
/// of the directories alone, so at any size it ends before a walk of the
/// files would; the bound only matters where it cannot finish (at the rate
/// measured, the most the watcher takes, `MAX_WATCHES`, would need about 1.3 s).
const FIRST_BUILD_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

fn start(changes: Weak<Changes>, host_root: PathBuf, vroot: VPath) {
    // However the thread ends, or when it cannot start (the closure is
    // dropped unrun), nobody waits for a first build any longer.
    let ended = FirstBuildEnded(changes.clone());
    let spawned = std::thread::Builder::new().name("ctxfs-watch".into()).spawn(move || {
        let _ended = ended;
        run(changes, host_root, vroot)
    });
    if let Err(e) = spawned {
        tracing::info!(error = %e, "no file watcher: every search walks the tree");
    }
}

/// Ends the wait for a first build when dropped (the watcher's thread ends,
/// or it never started).
struct FirstBuildEnded(Weak<Changes>);

impl Drop for FirstBuildEnded {
    fn drop(&mut self) {
        if let Some(c) = self.0.upgrade() {
            c.first_build_ended();
        }
    }
}

fn give_up(changes: &Changes, why: &str) {
    tracing::info!("no file watcher ({why}): every search walks the tree");
    changes.ready.store(false, Ordering::SeqCst);
}

/// The shortest time between two builds of the watches.
const REBUILD_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// File systems whose changes inotify sees, all made on this machine
/// (`statfs` magic numbers: ext2/3/4, xfs, btrfs, tmpfs, overlayfs, zfs,
/// f2fs, bcachefs, reiserfs, jfs). On any other (NFS, SMB, FUSE, 9p, ...)
/// another machine's changes are never reported, so nothing is watched.
const LOCAL_FILE_SYSTEMS: [u64; 10] = [
    0xEF53,
    0x5846_5342,
    0x9123_683E,
    0x0102_1994,
    0x794C_7630,
    0x2FC1_2FC1,
    0xF2F5_2010,
    0xCA45_1A4E,
    0x5265_4973,
    0x3153_464A,
];

/// Whether a directory can be watched here at all: it lies on a local file
/// system and inotify works (for tests to say why they skip, and for logs).
pub fn available(dir: &Path) -> bool {
    let local = rustix::fs::statfs(dir).is_ok_and(|st| LOCAL_FILE_SYSTEMS.contains(&(st.f_type as u64 & 0xFFFF_FFFF)));
    local && inotify::init(CreateFlags::CLOEXEC).is_ok()
}

/// The watcher's thread: builds the watches, then counts events until the
/// counter is dropped (checked twice a second) or the watches cannot be kept.
fn run(changes: Weak<Changes>, host_root: PathBuf, vroot: VPath) {
    if !available(&host_root) {
        if let Some(c) = changes.upgrade() {
            give_up(&c, "the file system may change without telling inotify");
        }
        return;
    }
    let fd = match inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK) {
        Ok(fd) => Arc::new(fd),
        Err(_) => {
            if let Some(c) = changes.upgrade() {
                give_up(&c, "inotify is not available");
            }
            return;
        }
    };
    match changes.upgrade() {
        Some(c) => {
            let _ = c.queue.set(fd.clone());
        }
        None => return,
    }
    let mut rebuild = true;
    let mut last_build: Option<std::time::Instant> = None;
    // The watched directories by watch descriptor, from the last build.
    let mut dirs: HashMap<i32, PathBuf> = HashMap::new();
    let mut buf = vec![MaybeUninit::<u8>::uninit(); 64 * 1024];
    loop {
        let Some(shared) = changes.upgrade() else { return };
        if rebuild {
            // Unknown from now until the watches are whole again.
            shared.ready.store(false, Ordering::SeqCst);
        }
        // A build that makes directories by the thousand (a compiler's output,
        // a package install) rebuilds at most once per `REBUILD_EVERY`; until
        // then every query walks, as without a watcher.
        if rebuild && last_build.is_none_or(|at| at.elapsed() >= REBUILD_EVERY) {
            last_build = Some(std::time::Instant::now());
            match add_watches(&fd, &host_root, &vroot) {
                Ok(built) => {
                    let n = built.len();
                    tracing::debug!(directories = n, root = %host_root.display(), "watching");
                    // Watches of directories no longer in the tree (moved out) are let go.
                    for wd in dirs.keys().filter(|wd| !built.contains_key(wd)) {
                        let _ = inotify::remove_watch(&*fd, *wd);
                    }
                    dirs = built;
                    shared.watched.store(n, Ordering::SeqCst);
                    // Anything may have changed while the watches were missing.
                    shared.record([], true);
                    shared.ready.store(true, Ordering::SeqCst);
                    shared.first_build_ended();
                }
                Err(why) => return give_up(&shared, &why),
            }
            rebuild = false;
        }
        drop(shared);
        let mut poll = [rustix::event::PollFd::new(&*fd, rustix::event::PollFlags::IN)];
        let timeout = rustix::event::Timespec { tv_sec: 0, tv_nsec: 500_000_000 };
        match rustix::event::poll(&mut poll, Some(&timeout)) {
            Ok(0) | Err(rustix::io::Errno::INTR) => continue,
            Ok(_) => {}
            Err(e) => {
                if let Some(c) = changes.upgrade() {
                    give_up(&c, &format!("poll failed: {e}"));
                }
                return;
            }
        }
        // While events wait unread `get` says `None`; they are counted once
        // read, so a walk made before then is not reused.
        let Some(shared) = changes.upgrade() else { return };
        // Set before the read: a reader that finds the queue empty then waits for the count.
        shared.reading.store(true, Ordering::SeqCst);
        let mut reader = inotify::Reader::new(&*fd, &mut buf);
        let mut paths = Vec::new();
        let mut lost = false;
        loop {
            let event = match reader.next() {
                Ok(event) => event,
                Err(rustix::io::Errno::AGAIN) | Err(rustix::io::Errno::INTR) => break,
                Err(e) => {
                    shared.reading.store(false, Ordering::SeqCst);
                    return give_up(&shared, &format!("reading events failed: {e}"));
                }
            };
            let name = event.file_name().map(|n| n.to_bytes());
            rebuild |= needs_rebuild(event.events(), name);
            match named(&dirs, event.wd(), event.events(), name) {
                Some(path) => paths.push(path),
                None => lost = true,
            }
            if reader.is_buffer_empty() {
                break;
            }
        }
        shared.record(paths, lost);
        shared.reading.store(false, Ordering::SeqCst);
    }
}

/// The path an event names, or `None` when the feed cannot say what a walk
/// would find now: the watches are rebuilt (or the queue overflowed), the
/// watch is unknown, the event names no file, or `untrusted` says so.
fn named(dirs: &HashMap<i32, PathBuf>, wd: i32, mask: ReadFlags, name: Option<&[u8]>) -> Option<PathBuf> {
    if needs_rebuild(mask, name) {
        return None;
    }
    let (dir, name) = (dirs.get(&wd)?, name?);
    (!untrusted(dir, name, mask)).then(|| dir.join(std::ffi::OsStr::from_bytes(name)))
}

/// Whether an event about the file `name` in the watched directory `dir`
/// leaves the feed unable to say what a walk would find now: a link appeared
/// (a walk follows file links, and one may lead anywhere), or it is in
/// `.git/info` (`exclude` decides which files are visible).
fn untrusted(dir: &Path, name: &[u8], mask: ReadFlags) -> bool {
    if dir.ends_with(".git/info") || name == b".git" {
        return true;
    }
    // A link appears by a name's creation or a rename onto it; writes go through to its target.
    if mask.intersects(ReadFlags::CREATE | ReadFlags::MOVED_TO) {
        let path = dir.join(std::ffi::OsStr::from_bytes(name));
        // Gone since: its removal is another event, and a missing file is what the index drops.
        return std::fs::symlink_metadata(path).is_ok_and(|meta| !meta.is_file());
    }
    false
}

/// Whether an event changes which directories exist or which are ignored.
fn needs_rebuild(mask: ReadFlags, name: Option<&[u8]>) -> bool {
    // A directory's permissions decide whether it can be listed, and so watched.
    let dir_moved = mask.contains(ReadFlags::ISDIR)
        && mask.intersects(
            ReadFlags::CREATE | ReadFlags::DELETE | ReadFlags::MOVED_FROM | ReadFlags::MOVED_TO | ReadFlags::ATTRIB,
        );
    let lost =
        mask.intersects(ReadFlags::QUEUE_OVERFLOW | ReadFlags::IGNORED | ReadFlags::DELETE_SELF | ReadFlags::MOVE_SELF);
    let ignore_file = matches!(name, Some(b".gitignore" | b".ignore" | b".rgignore" | b".git"));
    dir_moved || lost || ignore_file
}

/// Watches the directory and every one below it but those inside `.git`
/// (its `info/` is watched); answers the watched directories by watch
/// descriptor, or why it cannot.
fn add_watches(fd: &OwnedFd, host_root: &Path, vroot: &VPath) -> Result<HashMap<i32, PathBuf>, String> {
    let flags = WatchFlags::CREATE
        | WatchFlags::DELETE
        | WatchFlags::MODIFY
        | WatchFlags::CLOSE_WRITE
        | WatchFlags::ATTRIB
        | WatchFlags::MOVED_FROM
        | WatchFlags::MOVED_TO
        | WatchFlags::DELETE_SELF
        | WatchFlags::MOVE_SELF
        | WatchFlags::DONT_FOLLOW
        | WatchFlags::ONLYDIR;
    let count = AtomicUsize::new(0);
    let failed: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);
    let dirs: Mutex<HashMap<i32, PathBuf>> = Mutex::new(HashMap::new());
    let watch = |host: &Path| {
        if count.fetch_add(1, Ordering::SeqCst) >= MAX_WATCHES {
            *failed.lock().unwrap_or_else(|e| e.into_inner()) = Some(format!("more than {MAX_WATCHES} directories"));
            return false;
        }
        match inotify::add_watch(fd, host, flags) {
            Ok(wd) => {
                dirs.lock().unwrap_or_else(|e| e.into_inner()).insert(wd, host.to_path_buf());
                true
            }
            // Gone or swapped for something else since it was listed: the
            // event that did it has moved the counter already.
            Err(rustix::io::Errno::NOENT) | Err(rustix::io::Errno::NOTDIR) | Err(rustix::io::Errno::ACCESS) => true,
            Err(e) => {
                *failed.lock().unwrap_or_else(|e| e.into_inner()) = Some(format!("inotify_add_watch: {e}"));
                false
            }
        }
    };
    // The walk never enters `.git`; its `info/` (which holds `exclude`) is watched beside each directory.
    let with_git_info = |host: &Path| {
        let info = host.join(".git").join("info");
        watch(host) && (!info.is_dir() || watch(&info))
    };
    if !with_git_info(host_root) {
        return Err(failed.into_inner().unwrap_or_else(|e| e.into_inner()).unwrap_or_default());
    }
    let dir =
        rfs::open(host_root, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| format!("cannot open the boundary: {e}"))?;
    let options = WalkOptions { gitignore: false, skip_hidden: false, threads: 1, tally: None };
    let walked = walk_fd(dir, vroot.clone(), &options, &|entry: &WalkEntry<'_>| {
        if entry.kind != Kind::Dir {
            return Descend::No;
        }
        let Some(rel) = entry.path.strip_prefix(vroot) else { return Descend::No };
        if with_git_info(&host_root.join(rel)) {
            Descend::Yes
        } else {
            Descend::No
        }
    });
    if let Some(why) = failed.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(why);
    }
    walked.map_err(|e| format!("cannot walk the boundary: {e}"))?;
    Ok(dirs.into_inner().unwrap_or_else(|e| e.into_inner()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// Waits (up to a generous bound, which only a broken watcher reaches) until `f` holds.
    fn eventually(what: &str, f: impl Fn() -> bool) {
        let until = Instant::now() + Duration::from_secs(20);
        while !f() {
            assert!(Instant::now() < until, "never happened: {what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// A temporary directory (kept alive by the first part) and its canonical
    /// path, or `None`, said on stderr, where it cannot be watched.
    fn watchable_tempdir() -> Option<(tempfile::TempDir, PathBuf)> {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        if !available(&root) {
            eprintln!("skipped: no inotify on a local file system for {}", root.display());
            return None;
        }
        Some((tmp, root))
    }

    #[test]
    fn the_count_moves_for_changes_anywhere_below_even_in_new_directories() {
        let Some((_tmp, root)) = watchable_tempdir() else { return };
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("a/b/f.txt"), "one").unwrap();
        let vroot = VPath::parse("/ws").unwrap();
        let changes = Arc::new(Changes::default());
        eventually("the watches are built", || changes.get(&root, &vroot).is_some());
        assert_eq!(changes.watched(), 3, "the root, a and a/b");
        type Step<'a> = (&'a str, Box<dyn Fn() + 'a>);
        let steps: [Step<'_>; 5] = [
            ("a file changes deep down", Box::new(|| std::fs::write(root.join("a/b/f.txt"), "two").unwrap())),
            ("a directory appears", Box::new(|| std::fs::create_dir(root.join("a/new")).unwrap())),
            (
                "a file appears in the new directory",
                Box::new(|| std::fs::write(root.join("a/new/g.txt"), "x").unwrap()),
            ),
            (
                "a file is renamed",
                Box::new(|| std::fs::rename(root.join("a/new/g.txt"), root.join("a/new/h.txt")).unwrap()),
            ),
            ("an ignore file is written", Box::new(|| std::fs::write(root.join(".gitignore"), "a/\n").unwrap())),
        ];
        for (what, step) in steps {
            // Wait for the count to settle (a rebuild may still be bumping it).
            eventually("the counter settles", || {
                let a = changes.get(&root, &vroot);
                std::thread::sleep(Duration::from_millis(30));
                a.is_some() && a == changes.get(&root, &vroot)
            });
            let before = changes.get(&root, &vroot).unwrap();
            step();
            eventually(what, || changes.get(&root, &vroot).is_some_and(|now| now != before));
        }
        assert_eq!(changes.watched(), 4, "a/new is watched after the rebuild");
    }

    /// Issue 17: the first ask waits for the watches to be built, so a walk
    /// made right after it is kept (before, it answered `None`, and a
    /// session's second search walked again).
    #[test]
    fn the_first_ask_waits_for_the_watches_and_knows_the_count() {
        let Some((_tmp, root)) = watchable_tempdir() else { return };
        for i in 0..200 {
            std::fs::create_dir_all(root.join(format!("d{}/e{i}", i % 10))).unwrap();
        }
        let vroot = VPath::parse("/ws").unwrap();
        let changes = Arc::new(Changes::default());
        let first = changes.get(&root, &vroot);
        assert!(first.is_some(), "the first ask did not wait for the watches");
        assert_eq!(changes.watched(), 211, "the root, ten d and 200 e");
        // On a file system inotify cannot follow, the first ask ends at once with `None`.
        let unwatchable = Arc::new(Changes::default());
        let proc_dir = Path::new("/proc/self");
        if !available(proc_dir) {
            assert_eq!(unwatchable.get(proc_dir, &vroot), None);
            assert!(*unwatchable.first_built.lock().unwrap(), "the wait did not end with the give-up");
        }
    }

    /// Waits until the count is known and stays put a moment; answers it.
    fn settled(changes: &Arc<Changes>, root: &Path, vroot: &VPath) -> u64 {
        eventually("the counter settles", || {
            let a = changes.get(root, vroot);
            std::thread::sleep(Duration::from_millis(30));
            a.is_some() && a == changes.get(root, vroot)
        });
        changes.get(root, vroot).unwrap()
    }

    /// Issue 17: the feed names the files changed from outside, and answers
    /// `None` (walk) after a change it cannot vouch for.
    #[test]
    fn the_feed_names_changed_files_and_gives_up_on_directories_links_and_ignore_files() {
        let Some((_tmp, root)) = watchable_tempdir() else { return };
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("a/b/f.txt"), "one").unwrap();
        std::fs::write(root.join("g.txt"), "one").unwrap();
        let vroot = VPath::parse("/ws").unwrap();
        let changes = Arc::new(Changes::default());
        eventually("the watches are built", || changes.get(&root, &vroot).is_some());
        let sorted = |mut paths: Vec<PathBuf>| {
            paths.sort();
            paths
        };
        // An edit deep down, then a removal and a new file: each named, nothing else.
        let start = settled(&changes, &root, &vroot);
        assert_eq!(changes.since(start), Some((start, vec![])));
        std::fs::write(root.join("a/b/f.txt"), "two").unwrap();
        eventually("the edit is counted", || changes.get(&root, &vroot).is_some_and(|now| now != start));
        let (now, paths) = changes.since(start).expect("an edit is named");
        assert_eq!(paths, [root.join("a/b/f.txt")]);
        std::fs::remove_file(root.join("g.txt")).unwrap();
        std::fs::write(root.join("a/h.txt"), "new").unwrap();
        eventually("both are counted", || changes.since(now).is_some_and(|(_, p)| p.len() == 2));
        assert_eq!(sorted(changes.since(now).unwrap().1), [root.join("a/h.txt"), root.join("g.txt")]);
        assert_eq!(sorted(changes.since(start).unwrap().1).len(), 3, "everything since the older count");
        // Each of these leaves the feed unable to vouch for what changed before it.
        type Step<'a> = (&'a str, Box<dyn Fn() + 'a>);
        let steps: [Step<'_>; 4] = [
            ("a directory appears", Box::new(|| std::fs::create_dir(root.join("a/new")).unwrap())),
            ("a link appears", Box::new(|| std::os::unix::fs::symlink("g.txt", root.join("l.txt")).unwrap())),
            ("an ignore file is written", Box::new(|| std::fs::write(root.join("a/.rgignore"), "*.txt\n").unwrap())),
            ("a directory goes", Box::new(|| std::fs::remove_dir(root.join("a/new")).unwrap())),
        ];
        for (what, step) in steps {
            let before = settled(&changes, &root, &vroot);
            step();
            eventually(what, || changes.get(&root, &vroot).is_some_and(|now| now != before));
            assert_eq!(changes.since(before), None, "{what}: walk");
            let after = settled(&changes, &root, &vroot);
            assert_eq!(changes.since(after), Some((after, vec![])), "{what}: trusted again from then on");
        }
    }

    /// A lost event queue (or one past `MAX_DIRTY` paths) means walk; so does
    /// an event of a watch the feed does not know.
    #[test]
    fn an_overflowed_queue_or_too_many_paths_mean_walk() {
        let dirs = HashMap::from([(1, PathBuf::from("/h/ws"))]);
        let file = ReadFlags::MODIFY;
        assert_eq!(named(&dirs, 1, file, Some(b"missing.txt")), Some(PathBuf::from("/h/ws/missing.txt")));
        assert_eq!(named(&dirs, -1, ReadFlags::QUEUE_OVERFLOW, None), None);
        assert_eq!(named(&dirs, 2, file, Some(b"f.txt")), None, "an unknown watch");
        assert_eq!(named(&dirs, 1, ReadFlags::CREATE | ReadFlags::ISDIR, Some(b"d")), None);
        assert_eq!(named(&dirs, 1, file, Some(b".gitignore")), None);
        let changes = Changes::default();
        changes.record([PathBuf::from("/h/ws/a")], false);
        let start = changes.count.load(Ordering::SeqCst);
        changes.record([PathBuf::from("/h/ws/b")], false);
        let log = |since| {
            let log = changes.log();
            (since >= log.floor).then(|| log.paths.iter().filter(|(_, at)| **at > since).count())
        };
        assert_eq!((log(0), log(start)), (Some(2), Some(1)));
        changes.record([], true);
        assert_eq!((log(0), log(start)), (None, None), "lost: readers of earlier counts walk");
        let now = changes.count.load(Ordering::SeqCst);
        assert_eq!(log(now), Some(0));
        changes.record((0..MAX_DIRTY).map(|i| PathBuf::from(format!("/h/ws/{i}"))), false);
        assert_eq!(log(now), Some(MAX_DIRTY), "as many as it keeps");
        changes.record([PathBuf::from("/h/ws/one-more")], false);
        assert_eq!(log(now), None, "past the bound");
    }

    #[test]
    fn git_internals_are_not_watched_but_its_info_and_other_hidden_directories_are() {
        let Some((_tmp, root)) = watchable_tempdir() else { return };
        for dir in [".git/objects/ab", ".git/info", ".config/tool", "src"] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
        }
        let vroot = VPath::parse("/").unwrap();
        let changes = Arc::new(Changes::default());
        eventually("the watches are built", || changes.get(&root, &vroot).is_some());
        assert_eq!(changes.watched(), 5, "the root, .git/info, .config, .config/tool and src");
        let before = changes.get(&root, &vroot).unwrap();
        std::fs::write(root.join(".git/info/exclude"), "*.log\n").unwrap();
        eventually("an edit of .git/info/exclude is counted", || {
            changes.get(&root, &vroot).is_some_and(|now| now != before)
        });
        let before = changes.get(&root, &vroot).unwrap();
        changes.bump();
        assert_eq!(changes.get(&root, &vroot), Some(before + 1));
    }
}
