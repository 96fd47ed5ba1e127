//! A change counter for one directory tree on disk, fed by inotify.
//!
//! `Changes::get` answers a number that moves whenever anything below the
//! watched directory may have changed: the watcher's thread adds one when
//! it has read inotify's events (`get` answers `None` while events wait
//! unread), and `OsFs` adds one at the end of each of its own changes (so
//! a change made through ctxfs is counted before its call returns). The
//! search index keeps the visible files of a walk and walks again only when
//! the number moved: a query over a tree nobody touched skips the walk.
//!
//! It is not a change feed: it never says what changed, and a reader learns
//! nothing from it but "maybe something". While the watches are being
//! (re)built, or when they cannot be (no inotify, a file system inotify does
//! not see changes on, such as NFS or FUSE, or too many directories), it
//! answers `None`, and the index walks every time as it would without it.
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
//! It is not used by `MemFs` (nothing outside a test changes that) and
//! `Overlay` adds its own buffers' changes to the inner count.

use super::walk::walk_fd;
use super::{Descend, Kind, WalkEntry, WalkOptions};
use crate::paths::VPath;
use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use rustix::fs::{self as rfs, Mode, OFlags};
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};

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
}

impl Watchers {
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
        if disabled() {
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
}

impl Changes {
    /// Counts a change made through ctxfs itself.
    pub fn bump(&self) {
        self.count.fetch_add(1, Ordering::SeqCst);
    }

    /// The counter, or `None` while the watches do not cover the tree.
    /// The first call starts the watcher for `host_root` (presented as `vroot`).
    pub fn get(self: &Arc<Self>, host_root: &Path, vroot: &VPath) -> Option<u64> {
        self.started.get_or_init(|| start(Arc::downgrade(self), host_root.to_path_buf(), vroot.clone()));
        // Events the thread has not read yet are changes it has not counted.
        let queue = self.queue.get()?;
        if rustix::io::ioctl_fionread(&**queue).map_or(true, |waiting| waiting > 0) {
            return None;
        }
        // The count is read after `ready`: a change that lands between the two
        // reads moves the count, so the caller's next look differs.
        self.ready.load(Ordering::SeqCst).then(|| self.count.load(Ordering::SeqCst))
    }

    /// How many directories the last build watched.
    pub fn watched(&self) -> usize {
        self.watched.load(Ordering::SeqCst)
    }
}

fn start(changes: Weak<Changes>, host_root: PathBuf, vroot: VPath) {
    let spawned = std::thread::Builder::new().name("ctxfs-watch".into()).spawn(move || run(changes, host_root, vroot));
    if let Err(e) = spawned {
        tracing::info!(error = %e, "no file watcher: every search walks the tree");
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
                Ok(n) => {
                    tracing::debug!(directories = n, root = %host_root.display(), "watching");
                    shared.watched.store(n, Ordering::SeqCst);
                    // Anything may have changed while the watches were missing.
                    shared.bump();
                    shared.ready.store(true, Ordering::SeqCst);
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
        let mut reader = inotify::Reader::new(&*fd, &mut buf);
        loop {
            let event = match reader.next() {
                Ok(event) => event,
                Err(rustix::io::Errno::AGAIN) | Err(rustix::io::Errno::INTR) => break,
                Err(e) => return give_up(&shared, &format!("reading events failed: {e}")),
            };
            rebuild |= needs_rebuild(event.events(), event.file_name().map(|n| n.to_bytes()));
            if reader.is_buffer_empty() {
                break;
            }
        }
        shared.bump();
    }
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
    let ignore_file = matches!(name, Some(b".gitignore" | b".ignore"));
    dir_moved || lost || ignore_file
}

/// Watches the directory and every one below it but those inside `.git`
/// (its `info/` is watched); answers how many, or why it cannot.
fn add_watches(fd: &OwnedFd, host_root: &Path, vroot: &VPath) -> Result<usize, String> {
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
    let watch = |host: &Path| {
        if count.fetch_add(1, Ordering::SeqCst) >= MAX_WATCHES {
            *failed.lock().unwrap_or_else(|e| e.into_inner()) = Some(format!("more than {MAX_WATCHES} directories"));
            return false;
        }
        match inotify::add_watch(fd, host, flags) {
            Ok(_) => true,
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
    Ok(count.load(Ordering::SeqCst))
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
