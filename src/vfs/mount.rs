//! `Mounted`: a session's file system with git repositories mounted in it.
//!
//! Paths at or below a mount point are served by that mount's working copy
//! (`git::WorkingCopy`, an `OsFs` over the session's own checkout); every
//! other path by the shared file system below. The mount point is a
//! directory whatever the tree holds there, and the directories above it
//! exist for the session even where the tree has none. A rename or a link
//! never crosses a mount's edge. This module knows nothing of views, levels
//! or error texts for the model.

use super::git::{RepoAction, RepoAnswer, RepoError, WorkingCopy};
use super::{
    Descend, DirEntry, Expect, Fs, FsError, Kind, Meta, Readable, Resolution, Source, Visitor, WalkEntry, WalkOptions,
};
use crate::paths::VPath;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

/// A file system with mounted repositories over another.
pub struct Mounted {
    base: Arc<dyn Fs>,
    mounts: Vec<Arc<WorkingCopy>>,
}

/// What a directory that the tree lacks, above a mount point, looks like.
fn synthetic_dir() -> Meta {
    Meta { kind: Kind::Dir, len: 0, mode: 0o755, modified: None, nlink: 1, writable: false }
}

impl Mounted {
    /// `mounts` over `base`; a mount outside `base`'s boundary is left out.
    pub fn new(base: Arc<dyn Fs>, mounts: Vec<Arc<WorkingCopy>>) -> Mounted {
        let boundary = base.boundary().clone();
        let mounts =
            mounts.into_iter().filter(|m| m.mount().starts_with(&boundary) && *m.mount() != boundary).collect();
        Mounted { base, mounts }
    }

    /// The mount a path lies in (at or below its mount point).
    fn route(&self, path: &VPath) -> Option<&Arc<WorkingCopy>> {
        self.mounts.iter().find(|m| path.starts_with(m.mount()))
    }

    /// Whether a path lies strictly above some mount point.
    fn above_mount(&self, path: &VPath) -> bool {
        self.mounts.iter().any(|m| m.mount() != path && m.mount().starts_with(path))
    }

    fn files<'a>(&self, mount: &'a WorkingCopy) -> Result<&'a dyn Fs, FsError> {
        Ok(mount.ready()?)
    }
}

impl Fs for Mounted {
    fn boundary(&self) -> &VPath {
        self.base.boundary()
    }

    fn resolve(&self, path: &VPath) -> Result<Resolution, FsError> {
        if let Some(mount) = self.route(path) {
            return self.files(mount)?.resolve(path);
        }
        let resolution = match self.base.resolve(path) {
            Err(FsError::NotFound | FsError::NotADir) if self.above_mount(path) => {
                return Ok(Resolution::Found { real: path.clone(), meta: synthetic_dir() })
            }
            other => other?,
        };
        // A link of the tree leading into a mount leads into the mount.
        if let Some(mount) = self.route(resolution.real()) {
            return self.files(mount)?.resolve(resolution.real());
        }
        match resolution {
            Resolution::Missing { real, .. } if self.above_mount(&real) => {
                Ok(Resolution::Found { real, meta: synthetic_dir() })
            }
            Resolution::Missing { real, parent_exists } => {
                let parent_made = real.parent().is_some_and(|p| self.above_mount(&p));
                Ok(Resolution::Missing { real, parent_exists: parent_exists || parent_made })
            }
            found => Ok(found),
        }
    }

    fn lstat(&self, real: &VPath) -> Result<Meta, FsError> {
        if let Some(mount) = self.route(real) {
            return self.files(mount)?.lstat(real);
        }
        match self.base.lstat(real) {
            Err(FsError::NotFound | FsError::NotADir) if self.above_mount(real) => Ok(synthetic_dir()),
            Ok(meta) if self.above_mount(real) && meta.kind != Kind::Dir => Ok(synthetic_dir()),
            other => other,
        }
    }

    fn read_file(&self, real: &VPath, max: u64) -> Result<Vec<u8>, FsError> {
        match self.route(real) {
            Some(mount) => self.files(mount)?.read_file(real, max),
            None => self.base.read_file(real, max),
        }
    }

    fn read_dir(&self, real: &VPath) -> Result<Vec<DirEntry>, FsError> {
        if let Some(mount) = self.route(real) {
            return self.files(mount)?.read_dir(real);
        }
        let mut entries = match self.base.read_dir(real) {
            Err(FsError::NotFound | FsError::NotADir) if self.above_mount(real) => Vec::new(),
            other => other?,
        };
        // The mount points and the directories leading to them, one entry each.
        let mut names = HashSet::new();
        for mount in &self.mounts {
            let Some(rest) = mount.mount().strip_prefix(real) else { continue };
            if let Some(name) = rest.split('/').find(|n| !n.is_empty()) {
                names.insert(name.to_string());
            }
        }
        entries.retain(|e| !names.contains(&e.name));
        entries.extend(names.into_iter().map(|name| DirEntry { name, kind: Kind::Dir }));
        Ok(entries)
    }

    fn read_link(&self, real: &VPath) -> Result<String, FsError> {
        match self.route(real) {
            Some(mount) => self.files(mount)?.read_link(real),
            None => self.base.read_link(real),
        }
    }

    fn write_file_if(&self, real: &VPath, data: &[u8], expect: Expect) -> Result<(), FsError> {
        match self.route(real) {
            Some(mount) => self.files(mount)?.write_file_if(real, data, expect),
            None if self.above_mount(real) => Err(FsError::IsADir),
            None => self.base.write_file_if(real, data, expect),
        }
    }

    fn begin_intent(&self, steps: &[super::journal::IntentStep]) -> Result<Option<super::journal::Intent>, FsError> {
        // Only the shared tree keeps a journal: a working copy is the session's own.
        if steps.iter().all(|s| self.route(&s.path).is_none()) {
            self.base.begin_intent(steps)
        } else {
            Ok(None)
        }
    }

    fn create_dir(&self, real: &VPath) -> Result<(), FsError> {
        match self.route(real) {
            Some(mount) if mount.mount() == real => Err(FsError::Exists),
            Some(mount) => self.files(mount)?.create_dir(real),
            None if self.above_mount(real) && self.base.lstat(real).is_err() => Err(FsError::Exists),
            None => self.base.create_dir(real),
        }
    }

    fn rename(&self, from: &VPath, to: &VPath) -> Result<(), FsError> {
        let (a, b) = (self.route(from), self.route(to));
        match (a, b) {
            (Some(a), Some(b)) if Arc::ptr_eq(a, b) && a.mount() != from && a.mount() != to => {
                self.files(a)?.rename(from, to)
            }
            (None, None) if !self.above_mount(from) => self.base.rename(from, to),
            _ => Err(FsError::CrossDevice),
        }
    }

    fn trash(&self, real: &VPath) -> Result<String, FsError> {
        match self.route(real) {
            Some(mount) if mount.mount() == real => Err(FsError::CrossDevice),
            Some(mount) => self.files(mount)?.trash(real),
            None if self.above_mount(real) => Err(FsError::CrossDevice),
            None => self.base.trash(real),
        }
    }

    fn walk_in_view(
        &self,
        real: &VPath,
        options: &WalkOptions,
        visit: &Visitor<'_>,
        readable: &Readable<'_>,
    ) -> Result<(), FsError> {
        if let Some(mount) = self.route(real) {
            return self.files(mount)?.walk_in_view(real, options, visit, readable);
        }
        let below: Vec<&Arc<WorkingCopy>> =
            self.mounts.iter().filter(|m| m.mount() != real && m.mount().starts_with(real)).collect();
        if below.is_empty() {
            return self.base.walk_in_view(real, options, visit, readable);
        }
        // The tree's walk, with the mount points (and what the tree holds
        // there) left out; directories the visitor declined are kept, so a
        // mount below one is not walked either.
        let declined: Mutex<Vec<VPath>> = Mutex::new(Vec::new());
        let wrapped = |entry: &WalkEntry<'_>| -> Descend {
            if below.iter().any(|m| entry.path.starts_with(m.mount())) {
                return Descend::No;
            }
            let answer = visit(entry);
            if entry.kind == Kind::Dir && answer == Descend::No {
                declined.lock().unwrap_or_else(|e| e.into_inner()).push(entry.path.clone());
            }
            answer
        };
        match self.base.walk_in_view(real, options, &wrapped, readable) {
            Ok(()) => {}
            Err(FsError::NotFound | FsError::NotADir) if self.above_mount(real) => {}
            Err(e) => return Err(e),
        }
        let declined = declined.into_inner().unwrap_or_else(|e| e.into_inner());
        let no_file = || -> Result<Source, FsError> { Err(FsError::IsADir) };
        for mount in below {
            let point = mount.mount();
            if declined.iter().any(|d| point.starts_with(d)) {
                continue;
            }
            let entry = WalkEntry { path: point.clone(), kind: Kind::Dir, open: &no_file, stamp: &|| None };
            if visit(&entry) == Descend::No {
                continue;
            }
            // A mount that cannot be used is left out of a walk; using it says why.
            if let Ok(files) = self.files(mount) {
                files.walk_in_view(point, options, visit, readable)?;
            }
        }
        Ok(())
    }

    fn changes(&self, under: &VPath) -> Option<u64> {
        if let Some(mount) = self.route(under) {
            return self.files(mount).ok()?.changes(under);
        }
        let mut count = self.base.changes(under)?;
        for mount in self.mounts.iter().filter(|m| m.mount().starts_with(under)) {
            count = count.wrapping_add(self.files(mount).ok()?.changes(mount.mount())?);
        }
        Some(count)
    }

    /// The feed of the one file system that counts `under`'s changes (as `changes` routes them);
    /// none when mounts lie below `under`, whose counts `changes` adds together.
    fn changed_since(&self, under: &VPath, since: u64) -> Option<(u64, Vec<VPath>)> {
        if let Some(mount) = self.route(under) {
            return self.files(mount).ok()?.changed_since(under, since);
        }
        if self.mounts.iter().any(|m| m.mount().starts_with(under)) {
            return None;
        }
        self.base.changed_since(under, since)
    }

    fn source(&self, real: &VPath) -> u64 {
        if let Some(mount) = self.route(real) {
            return mount.source();
        }
        // Above mounts: the tree's and every mount's below, in their order.
        let below = self.mounts.iter().filter(|m| m.mount().starts_with(real));
        below.fold(self.base.source(real), |source, m| source.rotate_left(7) ^ m.source())
    }

    fn mounts(&self) -> Vec<VPath> {
        self.mounts.iter().map(|m| m.mount().clone()).collect()
    }

    fn repo(&self, mount: &VPath, action: &RepoAction, dry: bool) -> Result<RepoAnswer, RepoError> {
        match self.mounts.iter().find(|m| m.mount() == mount) {
            Some(working) => working.act(action, dry),
            None => Err(RepoError::NotMounted),
        }
    }
}
