//! `Fence`: an `Fs` wrapper that learns what a call would change, and then
//! lets the call change that and nothing else.
//!
//! In a *dry run* every change (`write_file`, `create_dir`, `rename`,
//! `trash`) is recorded and reported done without touching anything; reads
//! go through. The tool runs its own checks as always, so a call the view
//! or the tool refuses is refused exactly as without the gate, and a call
//! that would change files says which, where they really are (links
//! followed), and what the tool would answer (with its diffs).
//!
//! In the *real run* after an approval, a change the dry run did not show
//! (a link swapped meanwhile, say) is refused as a race, so what was
//! approved is what happens. Undoing its own changes (apply_patch puts
//! written files back when a later step fails) stays allowed.

use crate::paths::VPath;
use crate::vfs::git::{RepoAction, RepoAnswer, RepoError};
use crate::vfs::{DirEntry, Expect, Fs, FsError, Meta, Readable, Resolution, Visitor, WalkOptions};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

/// One change a call makes, by real path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Write {
        path: VPath,
        bytes: Vec<u8>,
    },
    CreateDir {
        path: VPath,
    },
    Rename {
        from: VPath,
        to: VPath,
    },
    Trash {
        path: VPath,
    },
    /// A change of a mounted repository (a commit, a merge, a tag, a new
    /// branch), in a few words.
    Repo {
        mount: VPath,
        action: String,
    },
}

enum Mode {
    DryRun,
    /// What the dry run showed; changes made so far in this run.
    Enforce(Box<(Allowed, Done)>),
}

#[derive(Default)]
struct Allowed {
    writes: HashSet<VPath>,
    dirs: HashSet<VPath>,
    renames: HashSet<(VPath, VPath)>,
    trash: HashSet<VPath>,
    repo: HashSet<(VPath, String)>,
}

#[derive(Default)]
struct Done {
    written: HashSet<VPath>,
    renamed: HashSet<(VPath, VPath)>,
}

pub struct Fence {
    inner: Arc<dyn Fs>,
    mode: Mutex<Mode>,
    ops: Mutex<Vec<Op>>,
}

impl Fence {
    /// A dry run over `inner`.
    pub fn dry_run(inner: Arc<dyn Fs>) -> Fence {
        Fence { inner, mode: Mutex::new(Mode::DryRun), ops: Mutex::new(Vec::new()) }
    }

    /// A real run allowed to make exactly `ops` (and the parent directories they imply).
    pub fn enforce(inner: Arc<dyn Fs>, ops: &[Op]) -> Fence {
        let mut allowed = Allowed::default();
        for op in ops {
            match op {
                Op::Write { path, .. } => {
                    allowed.writes.insert(path.clone());
                }
                Op::CreateDir { path } => {
                    allowed.dirs.insert(path.clone());
                }
                Op::Rename { from, to } => {
                    allowed.renames.insert((from.clone(), to.clone()));
                }
                Op::Trash { path } => {
                    allowed.trash.insert(path.clone());
                }
                Op::Repo { mount, action } => {
                    allowed.repo.insert((mount.clone(), action.clone()));
                }
            }
        }
        Fence {
            inner,
            mode: Mutex::new(Mode::Enforce(Box::new((allowed, Done::default())))),
            ops: Mutex::new(Vec::new()),
        }
    }

    /// The changes recorded (a dry run) or made (a real run), in order.
    pub fn ops(&self) -> Vec<Op> {
        self.ops.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn inner(&self) -> &Arc<dyn Fs> {
        &self.inner
    }

    /// Records `op`; answers whether to carry it out on the inner `Fs`
    /// (`Ok(false)`: a dry run, report it done), or refuses it.
    fn admit(&self, op: Op) -> Result<bool, FsError> {
        let mut mode = self.mode.lock().unwrap_or_else(|e| e.into_inner());
        let carry_out = match &mut *mode {
            Mode::DryRun => false,
            Mode::Enforce(enforced) => {
                let (allowed, done) = &mut **enforced;
                let ok = match &op {
                    Op::Write { path, .. } => allowed.writes.contains(path),
                    Op::CreateDir { path } => allowed.dirs.contains(path),
                    Op::Rename { from, to } => {
                        allowed.renames.contains(&(from.clone(), to.clone()))
                            || done.renamed.contains(&(to.clone(), from.clone()))
                    }
                    Op::Trash { path } => allowed.trash.contains(path) || done.written.contains(path),
                    Op::Repo { mount, action } => allowed.repo.contains(&(mount.clone(), action.clone())),
                };
                if !ok {
                    tracing::warn!(?op, "a change the approval did not cover was refused");
                    return Err(FsError::Raced);
                }
                match &op {
                    Op::Write { path, .. } => {
                        done.written.insert(path.clone());
                    }
                    Op::Rename { from, to } => {
                        done.renamed.insert((from.clone(), to.clone()));
                    }
                    _ => {}
                }
                true
            }
        };
        // A real run keeps no copy of the bytes.
        let op = match op {
            Op::Write { path, .. } if carry_out => Op::Write { path, bytes: Vec::new() },
            other => other,
        };
        self.ops.lock().unwrap_or_else(|e| e.into_inner()).push(op);
        Ok(carry_out)
    }
}

impl Fs for Fence {
    fn boundary(&self) -> &VPath {
        self.inner.boundary()
    }

    fn resolve(&self, path: &VPath) -> Result<Resolution, FsError> {
        self.inner.resolve(path)
    }

    fn lstat(&self, real: &VPath) -> Result<Meta, FsError> {
        self.inner.lstat(real)
    }

    fn read_file(&self, real: &VPath, max: u64) -> Result<Vec<u8>, FsError> {
        self.inner.read_file(real, max)
    }

    fn read_dir(&self, real: &VPath) -> Result<Vec<DirEntry>, FsError> {
        self.inner.read_dir(real)
    }

    fn read_link(&self, real: &VPath) -> Result<String, FsError> {
        self.inner.read_link(real)
    }

    fn begin_intent(
        &self,
        steps: &[crate::vfs::journal::IntentStep],
    ) -> Result<Option<crate::vfs::journal::Intent>, FsError> {
        let dry = matches!(*self.mode.lock().unwrap_or_else(|e| e.into_inner()), Mode::DryRun);
        if dry {
            Ok(None)
        } else {
            self.inner.begin_intent(steps)
        }
    }

    fn write_file_if(&self, real: &VPath, data: &[u8], expect: Expect) -> Result<(), FsError> {
        if self.admit(Op::Write { path: real.clone(), bytes: data.to_vec() })? {
            self.inner.write_file_if(real, data, expect)
        } else {
            Ok(())
        }
    }

    fn create_dir(&self, real: &VPath) -> Result<(), FsError> {
        if self.admit(Op::CreateDir { path: real.clone() })? {
            self.inner.create_dir(real)
        } else {
            Ok(())
        }
    }

    fn rename(&self, from: &VPath, to: &VPath) -> Result<(), FsError> {
        if self.admit(Op::Rename { from: from.clone(), to: to.clone() })? {
            self.inner.rename(from, to)
        } else {
            Ok(())
        }
    }

    fn trash(&self, real: &VPath) -> Result<String, FsError> {
        if self.admit(Op::Trash { path: real.clone() })? {
            self.inner.trash(real)
        } else {
            Ok(String::new())
        }
    }

    fn walk_in_view(
        &self,
        real: &VPath,
        options: &WalkOptions,
        visit: &Visitor<'_>,
        readable: &Readable<'_>,
    ) -> Result<(), FsError> {
        self.inner.walk_in_view(real, options, visit, readable)
    }

    fn source(&self, real: &VPath) -> u64 {
        self.inner.source(real)
    }

    fn mounts(&self) -> Vec<VPath> {
        self.inner.mounts()
    }

    /// A change of a repository is recorded like a file's: a dry run decides
    /// it in memory (so a conflict is refused before anyone is asked), and
    /// the real run may make only the change that was shown.
    fn repo(&self, mount: &VPath, action: &RepoAction, dry: bool) -> Result<RepoAnswer, RepoError> {
        if !action.changes_repository() {
            let in_dry_run = matches!(*self.mode.lock().unwrap_or_else(|e| e.into_inner()), Mode::DryRun);
            return self.inner.repo(mount, action, dry || in_dry_run);
        }
        match self.admit(Op::Repo { mount: mount.clone(), action: action.describe() }) {
            Ok(carry_out) => self.inner.repo(mount, action, dry || !carry_out),
            Err(_) => Err(RepoError::Failed("the approved change is not this one".into())),
        }
    }
}
