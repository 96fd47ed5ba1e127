//! The view-checked walk: every file below a checked directory that the session may see, for glob,
//! grep and the search index alike. Not matching, ranking or formatting.
//!
//! It walks through `Fs::walk_in_view` (directory handles, no link followed
//! by the walk), keeps only entries the view shows, follows a file link
//! through the confined resolver and keeps it when where it leads is
//! visible, and lets ignore files count only where the session can see them.
//! A walk may be narrowed to some paths (`Only`): it then goes down only
//! towards them and reports only them, deciding each exactly as the whole
//! walk would (the same listings, hidden names, ignore files and levels).

use super::{Access, Level, Target, ToolError};
use crate::paths::VPath;
use crate::vfs::{Descend, Kind, Resolution, Source, Stamp, WalkEntry, WalkOptions, WalkTally};
use std::collections::HashSet;
use std::sync::Arc;

/// Some real paths below a walk's root, and the directories on the way to
/// them: a walk narrowed to them lists only those directories.
#[derive(Debug, Default)]
pub struct Only {
    paths: HashSet<VPath>,
    dirs: HashSet<VPath>,
}

impl Only {
    /// The paths strictly below `root` among `paths` (real paths).
    pub fn new(root: &VPath, paths: impl IntoIterator<Item = VPath>) -> Only {
        let mut only = Only::default();
        for path in paths {
            if path == *root || !path.starts_with(root) {
                continue;
            }
            let mut dir = path.parent();
            while let Some(d) = dir.filter(|d| d != root && d.starts_with(root)) {
                if !only.dirs.insert(d.clone()) {
                    break;
                }
                dir = d.parent();
            }
            only.paths.insert(path);
        }
        only
    }

    /// The paths (real) the walk is narrowed to.
    pub fn paths(&self) -> impl Iterator<Item = &VPath> {
        self.paths.iter()
    }

    pub fn contains(&self, real: &VPath) -> bool {
        self.paths.contains(real)
    }
}

/// A directory search: the checked root and how to decide each entry's level.
pub struct Scope<'a> {
    access: &'a Access,
    pub root: Target,
    /// Set when every path below the root is at the root's level.
    uniform: Option<Level>,
    /// When set, the walk goes only towards these paths and reports only them.
    only: Option<&'a Only>,
}

impl<'a> Scope<'a> {
    pub fn new(access: &'a Access, root: Target) -> Scope<'a> {
        let view = access.view();
        let uniform = (view.is_uniform_below(&root.real) && view.is_uniform_below(&root.path)).then_some(root.level);
        Scope { access, root, uniform, only: None }
    }

    /// The same walk narrowed to `only`'s paths.
    pub fn narrowed(mut self, only: &'a Only) -> Scope<'a> {
        self.only = Some(only);
        self
    }

    /// The path below the root, relative, for an entry found by the walk.
    fn rel<'p>(&self, real: &'p VPath) -> &'p str {
        real.strip_prefix(&self.root.real).unwrap_or("")
    }

    /// The entry's path as the model names it.
    fn shown(&self, rel: &str) -> VPath {
        self.root.path.join_rel(rel)
    }

    fn level(&self, real: &VPath, shown: &VPath) -> Level {
        match self.uniform {
            Some(level) => level,
            None => self.access.level(real).min(self.access.level(shown)),
        }
    }

    /// Whether a directory may hold anything visible.
    fn descend(&self, real: &VPath, shown: &VPath) -> Descend {
        if self.uniform.is_some() {
            return Descend::Yes;
        }
        let view = self.access.view();
        let open = |p: &VPath| self.access.level(p).can_read() || view.has_visible_below(p);
        if open(real) && open(shown) {
            Descend::Yes
        } else {
            Descend::No
        }
    }

    /// For a link met by the walk: where it leads, if that is a visible file.
    fn followed_file(&self, real: &VPath) -> Option<VPath> {
        match self.access.fs().resolve(real) {
            Ok(Resolution::Found { real: target, meta }) if meta.kind == Kind::File => {
                self.access.level(&target).can_read().then_some(target)
            }
            _ => None,
        }
    }

    /// Walks the root and calls `file` with (shown path, relative path, the file)
    /// for every visible regular file (links to visible files included).
    pub fn files(&self, file: &FileVisitor<'_>) -> Result<(), ToolError> {
        self.files_tallied(file, None)
    }

    /// As `files`, counting in `tally` the visible entries passed over (hidden
    /// names, paths ignore files name).
    pub fn files_tallied(&self, file: &FileVisitor<'_>, tally: Option<Arc<WalkTally>>) -> Result<(), ToolError> {
        let visit = |entry: &WalkEntry<'_>| -> Descend {
            if let Some(only) = self.only {
                let wanted =
                    if entry.kind == Kind::Dir { only.dirs.contains(&entry.path) } else { only.contains(&entry.path) };
                if !wanted {
                    return Descend::No;
                }
            }
            let rel = self.rel(&entry.path);
            let shown = self.shown(rel);
            match entry.kind {
                Kind::Dir => self.descend(&entry.path, &shown),
                Kind::File => {
                    if self.level(&entry.path, &shown).can_read() {
                        file(&shown, rel, &Found { open: &|| (entry.open)().ok(), stamp: entry.stamp, target: None });
                    }
                    Descend::No
                }
                Kind::Link => {
                    if self.level(&entry.path, &shown).can_read() {
                        if let Some(target) = self.followed_file(&entry.path) {
                            let fs = self.access.fs();
                            let open =
                                || fs.read_file(&target, super::MAX_OPEN_BYTES).ok().map(|b| Source::Bytes(b.into()));
                            // A link's own stamp is not its target's: the target is read.
                            file(&shown, rel, &Found { open: &open, stamp: &|| None, target: Some(&target) });
                        }
                    }
                    Descend::No
                }
                Kind::Special => Descend::No,
            }
        };
        // Ignore files count only where the session can see them, as anything else does;
        // those of the directories above the root by where they are.
        let readable = |real: &VPath| {
            if !real.starts_with(&self.root.real) {
                return self.access.level(real).can_read();
            }
            let rel = self.rel(real);
            self.level(real, &self.shown(rel)).can_read()
        };
        self.access
            .fs()
            .walk_in_view(&self.root.real, &WalkOptions { tally, ..WalkOptions::default() }, &visit, &readable)
            .map_err(|e| ToolError::from_fs(e, &self.root.path))
    }
}

/// A visible file met by a walk: how to open it, and its stamp when that can
/// be had without opening it.
pub struct Found<'a> {
    pub open: &'a (dyn Fn() -> Option<Source> + Sync),
    pub stamp: &'a (dyn Fn() -> Option<Stamp> + Sync),
    /// For a file reached through a link: where the link leads.
    pub target: Option<&'a VPath>,
}

/// What a walk of visible files calls: (shown path, path relative to the root, the file).
pub type FileVisitor<'a> = dyn Fn(&VPath, &str, &Found<'_>) + Sync + 'a;

/// Calls `file` with (shown path, path relative to `root`, the file) for every
/// regular file below the checked directory `root` that the session can see.
pub fn visible_files(access: &Access, root: Target, file: &FileVisitor<'_>) -> Result<(), ToolError> {
    Scope::new(access, root).files(file)
}

/// As `visible_files`, for the files among `only`'s paths alone: what the
/// whole walk would report of them, without listing anything else.
pub fn visible_files_among(
    access: &Access,
    root: Target,
    only: &Only,
    file: &FileVisitor<'_>,
) -> Result<(), ToolError> {
    Scope::new(access, root).narrowed(only).files(file)
}

/// As `visible_files`, counting in `tally` the visible entries the walk passed over.
pub fn visible_files_tallied(
    access: &Access,
    root: Target,
    file: &FileVisitor<'_>,
    tally: Arc<WalkTally>,
) -> Result<(), ToolError> {
    Scope::new(access, root).files_tallied(file, Some(tally))
}
