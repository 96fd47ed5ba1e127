//! `OsFs`: the real, confined file system of one boundary directory.
//!
//! Every operation starts from the boundary directory's file descriptor,
//! opened once, and walks name by name with `O_NOFOLLOW`, so no host path
//! outside the boundary is ever given to the kernel. Links are followed only
//! by `resolve` (through the shared resolver); every other method takes a real
//! path and answers `FsError::Raced` when a link turns up on it.
//! This is not where access is decided; see `access`.

use super::resolve::{resolve_with, Child, Lookup};
use super::{DirEntry, Expect, Fs, FsError, Kind, Meta, Readable, Resolution, Visitor, WalkOptions};
use crate::paths::VPath;
use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags, RenameFlags};
use rustix::io::Errno;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Flags for walking through a directory: no link follows, no read needed.
const TRAVERSE: OFlags = OFlags::PATH.union(OFlags::DIRECTORY).union(OFlags::NOFOLLOW).union(OFlags::CLOEXEC);
/// Flags for listing a directory.
const LIST: OFlags = OFlags::RDONLY.union(OFlags::DIRECTORY).union(OFlags::NOFOLLOW).union(OFlags::CLOEXEC);
/// Flags for reading a file: never follow, never block on a FIFO, never take a tty.
const READ: OFlags =
    OFlags::RDONLY.union(OFlags::NOFOLLOW).union(OFlags::NONBLOCK).union(OFlags::NOCTTY).union(OFlags::CLOEXEC);

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// The real file system below one host directory.
pub struct OsFs {
    host_root: PathBuf,
    /// Text of `host_root`, for mapping absolute link targets.
    host_root_text: String,
    vroot: VPath,
    root_fd: Arc<OwnedFd>,
    trash_dir: Option<PathBuf>,
    /// What this process is in the middle of, for the cleanup after a crash.
    journal: Option<super::journal::Journal>,
    /// Counts changes in the trees searched lately, its own and (once watched) everyone's.
    watchers: super::watch::Watchers,
}

impl OsFs {
    /// Opens `host_root` (canonicalised) as the boundary, presented to the
    /// model as `vroot`. `trash_dir` must lie outside the boundary.
    pub fn open(host_root: &Path, vroot: VPath, trash_dir: Option<PathBuf>) -> std::io::Result<OsFs> {
        let host_root = host_root.canonicalize()?;
        let root_fd = rfs::open(&host_root, TRAVERSE, Mode::empty())?;
        let host_root_text = host_root.to_string_lossy().into_owned();
        if let Some(trash) = &trash_dir {
            if trash.starts_with(&host_root) {
                return Err(std::io::Error::other("the trash directory must lie outside the boundary"));
            }
        }
        Ok(OsFs {
            host_root,
            host_root_text,
            vroot,
            root_fd: Arc::new(root_fd),
            trash_dir,
            journal: None,
            watchers: Default::default(),
        })
    }

    /// Starts no file watcher: for a process that answers one call and
    /// ends, whose walk no later search reuses (waiting for the watches to
    /// be built would only make its one search slower).
    pub fn without_watcher(mut self) -> OsFs {
        self.watchers = super::watch::Watchers::off();
        self
    }

    /// Keeps this process's journal (temporary files, unfinished multi-file
    /// changes) under `root`, which must lie outside the boundary.
    pub fn with_journal(mut self, root: &Path) -> OsFs {
        self.journal = Some(super::journal::Journal::new(root));
        self
    }

    /// The host path of a real path.
    fn host_path(&self, real: &VPath) -> PathBuf {
        match real.strip_prefix(&self.vroot) {
            Some(rel) if !rel.is_empty() => self.host_root.join(rel),
            _ => self.host_root.clone(),
        }
    }

    /// The names of `real` below the boundary.
    fn names<'a>(&self, real: &'a VPath) -> Result<Vec<&'a str>, FsError> {
        let rel = real.strip_prefix(&self.vroot).ok_or(FsError::Escapes)?;
        Ok(rel.split('/').filter(|n| !n.is_empty()).collect())
    }

    /// Opens a real directory path without following any link.
    fn open_dir_strict(&self, names: &[&str], flags: OFlags) -> Result<OwnedFd, FsError> {
        let mut fd: Option<OwnedFd> = None;
        for (i, name) in names.iter().enumerate() {
            let last = i + 1 == names.len();
            let dir: BorrowedFd<'_> = fd.as_ref().map(|f| f.as_fd()).unwrap_or(self.root_fd.as_fd());
            let next = openat_dir(dir, name, if last { flags } else { TRAVERSE })?;
            fd = Some(next);
        }
        match fd {
            Some(fd) => Ok(fd),
            None => Ok(rfs::openat(self.root_fd.as_fd(), ".", flags, Mode::empty()).map_err(errno)?),
        }
    }

    /// Opens the parent directory of a real path, answering it with the last name.
    fn open_parent<'a>(&self, real: &'a VPath) -> Result<(OwnedFd, &'a str), FsError> {
        let names = self.names(real)?;
        let (last, parents) = names.split_last().ok_or(FsError::IsADir)?;
        Ok((self.open_dir_strict(parents, TRAVERSE)?, last))
    }
}

/// Opens a child directory without following it, telling a link (a race)
/// from a file.
fn openat_dir(dir: BorrowedFd<'_>, name: &str, flags: OFlags) -> Result<OwnedFd, FsError> {
    match rfs::openat(dir, name, flags, Mode::empty()) {
        Ok(fd) => Ok(fd),
        Err(Errno::NOTDIR) | Err(Errno::LOOP) => match rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Symlink => Err(FsError::Raced),
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => Err(FsError::Raced),
            Ok(_) => Err(FsError::NotADir),
            Err(e) => Err(errno(e)),
        },
        Err(e) => Err(errno(e)),
    }
}

/// Maps an OS error to an `FsError`.
pub(crate) fn errno(e: Errno) -> FsError {
    match e {
        Errno::NOENT => FsError::NotFound,
        Errno::NOTDIR => FsError::NotADir,
        Errno::ISDIR => FsError::IsADir,
        Errno::EXIST => FsError::Exists,
        Errno::LOOP => FsError::Raced,
        Errno::NOTEMPTY => FsError::NotEmpty,
        Errno::XDEV => FsError::CrossDevice,
        Errno::NAMETOOLONG => FsError::NameTooLong,
        other => FsError::Io(other.into()),
    }
}

pub(crate) fn meta_of(st: &rfs::Stat) -> Meta {
    let kind = match FileType::from_raw_mode(st.st_mode) {
        FileType::Directory => Kind::Dir,
        FileType::RegularFile => Kind::File,
        FileType::Symlink => Kind::Link,
        _ => Kind::Special,
    };
    let modified = if st.st_mtime >= 0 {
        Some(UNIX_EPOCH + Duration::new(st.st_mtime as u64, st.st_mtime_nsec as u32))
    } else {
        None
    };
    // `st_nlink` is u64 on x86-64 but u32 on other targets: the conversion keeps both building.
    #[allow(clippy::useless_conversion)]
    let nlink = u64::from(st.st_nlink);
    let writable = bits_allow_writing(st.st_mode, st.st_uid, st.st_gid);
    Meta { kind, len: st.st_size as u64, mode: st.st_mode & 0o7777, modified, nlink, writable }
}

/// Whether permission bits let this process write a node of `uid`/`gid`:
/// the owner's bit for its owner, the group's for a member, else the
/// others'; for root, any write bit (root passes the bits, ctxfs does not).
fn bits_allow_writing(mode: u32, uid: u32, gid: u32) -> bool {
    use rustix::process::{getegid, geteuid, getgroups};
    static GROUPS: std::sync::OnceLock<Vec<u32>> = std::sync::OnceLock::new();
    let euid = geteuid();
    if euid.is_root() {
        return mode & 0o222 != 0;
    }
    if euid.as_raw() == uid {
        return mode & 0o200 != 0;
    }
    let groups = GROUPS.get_or_init(|| {
        let mut groups: Vec<u32> = getgroups().unwrap_or_default().into_iter().map(|g| g.as_raw()).collect();
        groups.push(getegid().as_raw());
        groups
    });
    if groups.contains(&gid) {
        mode & 0o020 != 0
    } else {
        mode & 0o002 != 0
    }
}

impl Lookup for OsFs {
    type Dir = OwnedFd;

    fn boundary_dir(&self) -> Result<OwnedFd, FsError> {
        rfs::openat(self.root_fd.as_fd(), ".", TRAVERSE, Mode::empty()).map_err(errno)
    }

    fn child(&self, dir: &OwnedFd, name: &str) -> Result<Child<OwnedFd>, FsError> {
        let st = match rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::NOENT) => return Ok(Child::Missing),
            Err(e) => return Err(errno(e)),
        };
        let meta = meta_of(&st);
        match meta.kind {
            Kind::Dir => Ok(Child::Dir(openat_dir(dir.as_fd(), name, TRAVERSE)?)),
            Kind::Link => {
                // EINVAL: it stopped being a link since the lstat, a race.
                let target = rfs::readlinkat(dir, name, Vec::new()).map_err(|e| match e {
                    Errno::INVAL => FsError::Raced,
                    other => errno(other),
                })?;
                Ok(Child::Link(target.to_string_lossy().into_owned()))
            }
            Kind::File | Kind::Special => Ok(Child::Node(meta)),
        }
    }

    fn dir_meta(&self, dir: &OwnedFd) -> Result<Meta, FsError> {
        Ok(meta_of(&rfs::fstat(dir).map_err(errno)?))
    }

    fn map_absolute(&self, target: &str) -> Option<Vec<String>> {
        let target = VPath::parse(target).ok()?;
        let root = VPath::parse(&self.host_root_text).ok()?;
        let rel = target.strip_prefix(&root)?;
        Some(rel.split('/').filter(|n| !n.is_empty()).map(str::to_string).collect())
    }
}

/// Counts a change again when dropped, at the end of the call that made it.
struct Bump<'a>(&'a super::watch::Watchers);

impl Drop for Bump<'_> {
    fn drop(&mut self) {
        self.0.bump();
    }
}

impl Fs for OsFs {
    fn boundary(&self) -> &VPath {
        &self.vroot
    }

    fn resolve(&self, path: &VPath) -> Result<Resolution, FsError> {
        resolve_with(self, &self.vroot, path)
    }

    fn lstat(&self, real: &VPath) -> Result<Meta, FsError> {
        let names = self.names(real)?;
        if names.is_empty() {
            return Ok(meta_of(&rfs::fstat(self.root_fd.as_fd()).map_err(errno)?));
        }
        let (dir, name) = self.open_parent(real)?;
        Ok(meta_of(&rfs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW).map_err(errno)?))
    }

    fn read_file(&self, real: &VPath, max: u64) -> Result<Vec<u8>, FsError> {
        let (dir, name) = self.open_parent(real)?;
        let before = meta_of(&rfs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW).map_err(errno)?);
        match before.kind {
            Kind::File => {}
            Kind::Dir => return Err(FsError::IsADir),
            Kind::Link => return Err(FsError::Raced),
            Kind::Special => return Err(FsError::NotRegular),
        }
        let fd = rfs::openat(&dir, name, READ, Mode::empty()).map_err(errno)?;
        let meta = meta_of(&rfs::fstat(&fd).map_err(errno)?);
        if meta.kind != Kind::File {
            return Err(FsError::NotRegular);
        }
        if meta.len > max {
            return Err(FsError::TooLarge { len: meta.len });
        }
        let mut file = std::fs::File::from(fd);
        let mut out = Vec::with_capacity(meta.len as usize);
        Read::by_ref(&mut file).take(max.saturating_add(1)).read_to_end(&mut out)?;
        if out.len() as u64 > max {
            return Err(FsError::TooLarge { len: out.len() as u64 });
        }
        Ok(out)
    }

    fn read_dir(&self, real: &VPath) -> Result<Vec<DirEntry>, FsError> {
        let names = self.names(real)?;
        let fd = self.open_dir_strict(&names, LIST)?;
        let mut dir = rfs::Dir::new(fd).map_err(errno)?;
        let mut out = Vec::new();
        while let Some(entry) = dir.read() {
            let entry = entry.map_err(errno)?;
            // A name that is not UTF-8 cannot be named by a path of the
            // session's, so it is not listed (walks skip it too), and a write's
            // temporary file is not the user's.
            let Ok(name) = entry.file_name().to_str() else { continue };
            if name == "." || name == ".." || is_temp_name(name).is_some() {
                continue;
            }
            let kind = match entry.file_type() {
                FileType::Directory => Kind::Dir,
                FileType::RegularFile => Kind::File,
                FileType::Symlink => Kind::Link,
                FileType::Unknown => {
                    match rfs::statat(dir.fd().map_err(errno)?, entry.file_name(), AtFlags::SYMLINK_NOFOLLOW) {
                        Ok(st) => meta_of(&st).kind,
                        Err(_) => continue,
                    }
                }
                _ => Kind::Special,
            };
            out.push(DirEntry { name: name.to_string(), kind });
        }
        Ok(out)
    }

    fn read_link(&self, real: &VPath) -> Result<String, FsError> {
        let (dir, name) = self.open_parent(real)?;
        Ok(rfs::readlinkat(&dir, name, Vec::new()).map_err(errno)?.to_string_lossy().into_owned())
    }

    fn changes(&self, under: &VPath) -> Option<u64> {
        self.watchers.get(&self.host_root, &self.vroot, under)
    }

    fn changed_since(&self, under: &VPath, since: u64) -> Option<(u64, Vec<VPath>)> {
        self.watchers.since(&self.host_root, &self.vroot, under, since)
    }

    fn write_file_if(&self, real: &VPath, data: &[u8], expect: Expect) -> Result<(), FsError> {
        // Counted once the change is done (or failed): a search that read the
        // count before then walks again, whatever its walk saw.
        let _counted = Bump(&self.watchers);
        let (dir, name) = self.open_parent(real)?;
        check_name(name)?;
        let dir_rw = dir_for_sync(&dir)?;
        // ctxfs writers (sessions and processes) take turns per directory, so
        // two of them never both pass the check below on the same content.
        let _turn = DirLock::exclusive(&dir_rw)?;
        let existing = match rfs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Some(meta_of(&st)),
            Err(Errno::NOENT) => None,
            Err(e) => return Err(errno(e)),
        };
        match existing.as_ref().map(|m| m.kind) {
            Some(Kind::Dir) => return Err(FsError::IsADir),
            Some(Kind::Link) => return Err(FsError::Raced),
            Some(Kind::Special) => return Err(FsError::NotRegular),
            Some(Kind::File) | None => {}
        }
        // The file the change is meant to replace, held open: after the
        // exchange below it must be what was displaced, with the same content.
        let observed = match expect {
            Expect::Absent if existing.is_some() => return Err(FsError::Exists),
            Expect::Content(_) if existing.is_none() => return Err(FsError::Changed),
            Expect::Content(sha) => {
                let fd = rfs::openat(&dir, name, READ, Mode::empty()).map_err(errno)?;
                if content_sha(&fd)? != sha {
                    return Err(FsError::Changed);
                }
                Some((fd, sha))
            }
            Expect::Absent | Expect::Anything => None,
        };
        let temp = temp_name(name);
        if let Some(journal) = &self.journal {
            journal.note_temp(&self.host_path(&real.parent().unwrap_or_else(VPath::root)), &temp);
        }
        let create = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rfs::openat(&dir, temp.as_str(), create, Mode::from_raw_mode(0o666)).map_err(errno)?;
        let mut file = std::fs::File::from(fd);
        let written = (|| -> Result<(), FsError> {
            if let Some(meta) = &existing {
                rfs::fchmod(&file, Mode::from_raw_mode(meta.mode)).map_err(errno)?;
            }
            file.write_all(data)?;
            file.sync_all()?;
            Ok(())
        })();
        if let Err(e) = written {
            let _ = rfs::unlinkat(&dir, temp.as_str(), AtFlags::empty());
            return Err(e);
        }
        crash_point("CTXFS_CRASH_BEFORE_RENAME");
        let placed = match observed {
            None => {
                let flags = if expect == Expect::Absent { RenameFlags::NOREPLACE } else { RenameFlags::empty() };
                rfs::renameat_with(&dir, temp.as_str(), &dir, name, flags).map_err(|e| match e {
                    Errno::EXIST => FsError::Exists,
                    e => errno(e),
                })
            }
            Some((old, sha)) => exchange_checked(&dir, &temp, name, &file, &old, sha),
        };
        if let Err(e) = placed {
            let _ = rfs::unlinkat(&dir, temp.as_str(), AtFlags::empty());
            return Err(e);
        }
        // The rename is durable once the directory is synced.
        rfs::fsync(&dir_rw).map_err(errno)?;
        crash_point("CTXFS_CRASH_AFTER_WRITES");
        Ok(())
    }

    fn begin_intent(&self, steps: &[super::journal::IntentStep]) -> Result<Option<super::journal::Intent>, FsError> {
        match &self.journal {
            Some(journal) => Ok(Some(journal.begin(&self.host_root, steps)?)),
            None => Ok(None),
        }
    }

    fn create_dir(&self, real: &VPath) -> Result<(), FsError> {
        let _counted = Bump(&self.watchers);
        let (dir, name) = self.open_parent(real)?;
        rfs::mkdirat(&dir, name, Mode::from_raw_mode(0o777)).map_err(errno)
    }

    fn rename(&self, from: &VPath, to: &VPath) -> Result<(), FsError> {
        let _counted = Bump(&self.watchers);
        let (from_dir, from_name) = self.open_parent(from)?;
        let (to_dir, to_name) = self.open_parent(to)?;
        rfs::renameat_with(&from_dir, from_name, &to_dir, to_name, RenameFlags::NOREPLACE).map_err(errno)?;
        rfs::fsync(&dir_for_sync(&to_dir)?).map_err(errno)?;
        Ok(())
    }

    fn trash(&self, real: &VPath) -> Result<String, FsError> {
        let _counted = Bump(&self.watchers);
        let trash_root =
            self.trash_dir.as_ref().ok_or_else(|| FsError::Io(std::io::Error::other("no trash directory")))?;
        let stamp = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let bin = trash_root.join(format!(
            "{}-{}-{}",
            stamp.as_secs(),
            std::process::id(),
            TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&bin)?;
        let bin_fd = rfs::open(&bin, TRAVERSE, Mode::empty()).map_err(errno)?;
        let (dir, name) = self.open_parent(real)?;
        match rfs::renameat_with(&dir, name, &bin_fd, name, RenameFlags::NOREPLACE) {
            Ok(()) => {}
            Err(Errno::XDEV) => {
                copy_out(dir.as_fd(), name, &bin.join(name))?;
                remove_tree(dir.as_fd(), name)?;
            }
            Err(e) => return Err(errno(e)),
        }
        // A note beside the moved node says where it came from, for restoring.
        std::fs::write(bin.join(".origin"), format!("{}\n{}\n", self.host_root.display(), real))?;
        Ok(bin.join(name).to_string_lossy().into_owned())
    }

    fn walk_in_view(
        &self,
        real: &VPath,
        options: &WalkOptions,
        visit: &Visitor<'_>,
        readable: &Readable<'_>,
    ) -> Result<(), FsError> {
        let names = self.names(real)?;
        let fd = self.open_dir_strict(&names, LIST)?;
        // The directories from the boundary down to the start's parent, for
        // their ignore files (ripgrep reads its parents' too).
        let mut parents = Vec::new();
        if options.gitignore && !names.is_empty() {
            let mut dir = self.open_dir_strict(&[], TRAVERSE)?;
            let mut path = self.vroot.clone();
            for name in &names[..names.len() - 1] {
                let next = openat_dir(dir.as_fd(), name, TRAVERSE)?;
                parents.push((dir, path.clone()));
                dir = next;
                path = path.join(name);
            }
            parents.push((dir, path));
        }
        super::walk::walk_fd_in_view(fd, real.clone(), &parents, options, visit, readable)
    }
}

/// A crash on purpose, for tests of what a crash leaves: with
/// `CTXFS_CRASH_AFTER_WRITES=N` in its environment the process aborts right
/// after its Nth file write, with `CTXFS_CRASH_BEFORE_RENAME=N` just before
/// its Nth write puts the new file in place (its temporary file written), as
/// a `kill -9` at that moment would stop it.
fn crash_point(name: &'static str) {
    static POINTS: std::sync::OnceLock<[(&str, Option<AtomicU64>); 2]> = std::sync::OnceLock::new();
    let points = POINTS.get_or_init(|| {
        ["CTXFS_CRASH_AFTER_WRITES", "CTXFS_CRASH_BEFORE_RENAME"]
            .map(|var| (var, std::env::var(var).ok().and_then(|n| n.parse().ok()).map(AtomicU64::new)))
    });
    for (var, left) in points {
        if *var == name && left.as_ref().is_some_and(|left| left.fetch_sub(1, Ordering::SeqCst) == 1) {
            tracing::error!("{var}: stopping here, as a crash would");
            std::process::abort();
        }
    }
}

/// The name of a temporary file for a write of `name`: hidden, marked as
/// ctxfs's (see [`is_temp_name`]) and unique to this process.
fn temp_name(name: &str) -> String {
    let mut short: String = name.chars().take(64).collect();
    while short.len() > 150 {
        short.pop();
    }
    format!(".{short}.ctxfs-{}-{}.tmp", std::process::id(), TEMP_COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// Whether a name is a temporary file of a ctxfs write (`.NAME.ctxfs-PID-N.tmp`),
/// and of which process. Tools never show such names.
pub fn is_temp_name(name: &str) -> Option<u32> {
    let rest = name.strip_prefix('.')?.strip_suffix(".tmp")?;
    let at = rest.rfind(".ctxfs-")?;
    let mut parts = rest[at + ".ctxfs-".len()..].split('-');
    let pid: u32 = parts.next()?.parse().ok()?;
    let _count: u64 = parts.next()?.parse().ok()?;
    parts.next().is_none().then_some(pid)
}

/// Refuses a name longer than the file system takes (255 bytes on Linux).
fn check_name(name: &str) -> Result<(), FsError> {
    if name.len() > NAME_MAX {
        return Err(FsError::NameTooLong);
    }
    Ok(())
}

/// The longest name most Linux file systems take, in bytes.
pub const NAME_MAX: usize = 255;

/// The SHA-256 of an open file's whole content, read from its start.
fn content_sha(fd: &OwnedFd) -> Result<crate::hash::Sha, FsError> {
    use sha2::Digest;
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut offset = 0u64;
    loop {
        let n = rustix::io::pread(fd, &mut buf[..], offset).map_err(errno)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        offset += n as u64;
    }
    Ok(hasher.finalize().into())
}

/// Puts the new file `temp` in place of `name` with one atomic exchange,
/// then checks that what it displaced is the file `old` the change was meant
/// for, unchanged: a save by another program between the check and the
/// exchange is then noticed, the exchange undone, and `Changed` answered.
///
/// The cheap checks come first (is `old` still the file at `name`, before
/// the exchange; was it the file displaced, right after), so the new content
/// is visible for microseconds when the change is undone. Where the file
/// system cannot exchange (`EINVAL`), the same checks are made just before a
/// plain rename, which leaves a window of microseconds in which an outside
/// save is overwritten.
fn exchange_checked(
    dir: &OwnedFd,
    temp: &str,
    name: &str,
    new: &std::fs::File,
    old: &OwnedFd,
    sha: crate::hash::Sha,
) -> Result<(), FsError> {
    let same_node = |a: &rfs::Stat, b: &rfs::Stat| a.st_dev == b.st_dev && a.st_ino == b.st_ino;
    let old_stat = rfs::fstat(old).map_err(errno)?;
    // Saved over while the new content was written: nothing to undo yet.
    let there = rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).map_err(errno)?;
    if !same_node(&there, &old_stat) {
        return Err(FsError::Changed);
    }
    match rfs::renameat_with(dir, temp, dir, name, RenameFlags::EXCHANGE) {
        Ok(()) => {}
        Err(Errno::INVAL | Errno::NOSYS | Errno::NOTSUP) => {
            if content_sha(old)? != sha {
                return Err(FsError::Changed);
            }
            return rfs::renameat(dir, temp, dir, name).map_err(errno);
        }
        Err(e) => return Err(errno(e)),
    }
    // `temp` now names what was displaced.
    let displaced = rfs::statat(dir, temp, AtFlags::SYMLINK_NOFOLLOW).map_err(errno)?;
    if same_node(&displaced, &old_stat) && content_sha(old)? == sha {
        rfs::unlinkat(dir, temp, AtFlags::empty()).map_err(errno)?;
        return Ok(());
    }
    // Another writer got in first: its file goes back, unless yet another
    // save has replaced this change already (then that save stands).
    let ours = rfs::fstat(new).map_err(errno)?;
    let there = rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).map_err(errno)?;
    if same_node(&there, &ours) {
        rfs::renameat_with(dir, temp, dir, name, RenameFlags::EXCHANGE).map_err(errno)?;
    }
    tracing::info!(name, "a write found the file changed by another program and was undone");
    Err(FsError::Changed)
}

/// An exclusive `flock` on a directory, taken in turns by ctxfs writers of
/// that directory (every process and session), released when dropped.
struct DirLock<'a>(&'a OwnedFd);

/// How long a write waits for its turn in a directory.
const TURN_WAIT: Duration = Duration::from_secs(10);

impl<'a> DirLock<'a> {
    fn exclusive(dir: &'a OwnedFd) -> Result<DirLock<'a>, FsError> {
        let deadline = std::time::Instant::now() + TURN_WAIT;
        let mut pause = Duration::from_micros(50);
        loop {
            match rfs::flock(dir, rfs::FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => return Ok(DirLock(dir)),
                Err(Errno::WOULDBLOCK) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(5));
                }
                Err(Errno::WOULDBLOCK) => {
                    return Err(FsError::Io(std::io::Error::other(
                        "another ctxfs write in this directory did not finish within 10 seconds",
                    )))
                }
                Err(e) => return Err(errno(e)),
            }
        }
    }
}

impl Drop for DirLock<'_> {
    fn drop(&mut self) {
        let _ = rfs::flock(self.0, rfs::FlockOperation::Unlock);
    }
}

/// An fd that can be fsynced (an `O_PATH` fd cannot).
fn dir_for_sync(dir: &OwnedFd) -> Result<OwnedFd, FsError> {
    rfs::openat(dir, ".", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()).map_err(errno)
}

/// Copies a node (file, directory or link, never following links) from
/// inside the boundary to a host path in the trash.
fn copy_out(dir: BorrowedFd<'_>, name: &str, dest: &Path) -> Result<(), FsError> {
    let meta = meta_of(&rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).map_err(errno)?);
    match meta.kind {
        Kind::File => {
            let fd = rfs::openat(dir, name, READ, Mode::empty()).map_err(errno)?;
            let mut src = std::fs::File::from(fd);
            let mut out = std::fs::File::create(dest)?;
            std::io::copy(&mut src, &mut out)?;
            out.sync_all()?;
        }
        Kind::Dir => {
            std::fs::create_dir(dest)?;
            let sub = openat_dir(dir, name, LIST)?;
            for child in child_names(&sub)? {
                copy_out(sub.as_fd(), &child, &dest.join(&child))?;
            }
        }
        Kind::Link => {
            let target = rfs::readlinkat(dir, name, Vec::new()).map_err(errno)?;
            std::os::unix::fs::symlink(target.to_string_lossy().as_ref(), dest)?;
        }
        Kind::Special => {}
    }
    Ok(())
}

/// The names in an open directory, without `.` and `..`.
fn child_names(dir: &OwnedFd) -> Result<Vec<String>, FsError> {
    let mut listing = rfs::Dir::read_from(dir).map_err(errno)?;
    let mut names = Vec::new();
    while let Some(entry) = listing.read() {
        let child = entry.map_err(errno)?.file_name().to_string_lossy().into_owned();
        if child != "." && child != ".." {
            names.push(child);
        }
    }
    Ok(names)
}

/// Removes a node and everything below it, never following links.
fn remove_tree(dir: BorrowedFd<'_>, name: &str) -> Result<(), FsError> {
    let meta = meta_of(&rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).map_err(errno)?);
    if meta.kind == Kind::Dir {
        let sub = openat_dir(dir, name, LIST)?;
        for child in child_names(&sub)? {
            remove_tree(sub.as_fd(), &child)?;
        }
        rfs::unlinkat(dir, name, AtFlags::REMOVEDIR).map_err(errno)
    } else {
        rfs::unlinkat(dir, name, AtFlags::empty()).map_err(errno)
    }
}
