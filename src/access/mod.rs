//! Access: every path a tool names is checked here, and every refusal gets
//! its exact text here.
//!
//! `Access` joins a `View` (what the session may see and change) with an
//! `Fs` (where things really are) and the session's start directory. Tools
//! never call `Fs::resolve` themselves: they ask for a `Target`, which is the
//! proof that the path was resolved, its links followed inside the boundary,
//! and the needed level granted on both the path and where it really is.
//! This module knows nothing of tools' arguments or of result formatting.

mod view;
pub mod walk;

pub use view::{Level, MountEntry, View, ViewFile, Visibility};

use crate::paths::{PathError, VPath};
use crate::vfs::git::{MountProblem, ProblemKind};
use crate::vfs::overlay::EditorFailure;
use crate::vfs::{Fs, FsError, Kind, Meta, Resolution};
use std::fmt;
use std::sync::Arc;

/// A tool's refusal, as the model reads it. The first rows are the spec's
/// texts, to the letter; the rest are this server's own device errors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolError {
    NotFound(VPath),
    Denied(VPath),
    ReadOnly(VPath),
    IsADir(VPath),
    NotADir(VPath),
    Exists(VPath),
    InvalidPath(PathError),
    TooLarge {
        path: VPath,
        len: u64,
        max: u64,
    },
    Binary(VPath),
    NotRegular(VPath),
    Raced(VPath),
    Loop(VPath),
    /// A file whose permission bits forbid writing it, with its mode.
    WriteProtected(VPath, u32),
    /// A commit asked where the session may stage but not commit.
    NotCommitted(VPath),
    /// A repository tool used outside every mount.
    NothingToCommit(VPath),
    /// A mounted repository that cannot be used.
    Mount(MountProblem),
    /// Any other sentence a tool says (a failed edit, bad arguments).
    Message(String),
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ToolError::NotFound(p) => write!(f, "No such file or directory: {p}"),
            ToolError::Denied(p) => write!(f, "Access denied: {p} is not open to this session."),
            ToolError::ReadOnly(p) => write!(f, "Read-only: {p} can be read in this session but not changed."),
            ToolError::IsADir(p) => write!(f, "Is a directory: {p}"),
            ToolError::NotADir(p) => write!(f, "Not a directory: {p}"),
            ToolError::Exists(p) => write!(f, "Already exists: {p}"),
            ToolError::InvalidPath(e) => write!(f, "{e}"),
            ToolError::TooLarge { path, len, max } => write!(
                f,
                "File too large: {path} is {len} bytes, more than the {} MiB this tool opens. Search it with grep instead.",
                max / (1024 * 1024)
            ),
            ToolError::Binary(p) => {
                write!(f, "Binary file: {p} is not UTF-8 text, so it cannot be shown or edited as text.")
            }
            ToolError::NotRegular(p) => {
                write!(f, "Not a regular file: {p} is a FIFO, socket or device, which this tool never opens.")
            }
            ToolError::Raced(p) => write!(f, "The path changed during the call: {p}. Try again."),
            ToolError::Loop(p) => write!(f, "Too many levels of links: {p}"),
            ToolError::WriteProtected(p, mode) => write!(
                f,
                "Write-protected: {p} has no write permission (permissions {:04o}), so it was not changed. If it should change, the user can make it writable (chmod u+w).",
                mode & 0o7777
            ),
            ToolError::NotCommitted(p) => write!(
                f,
                "Not committed: this session may change {p} but not commit it; the change stays staged."
            ),
            ToolError::NothingToCommit(p) => write!(f, "Nothing to commit: {p} is not in a repository."),
            ToolError::Mount(problem) => f.write_str(&mount_problem(problem)),
            ToolError::Message(m) => f.write_str(m),
        }
    }
}

/// Why a mount cannot be used, in words for the model: never the host's
/// paths, and always that nothing staged is lost.
pub fn mount_problem(problem: &MountProblem) -> String {
    let mount = &problem.mount;
    let why = match &problem.kind {
        ProblemKind::Missing => "its repository is missing".to_string(),
        ProblemKind::Corrupt(_) => "its repository is not a readable git repository".to_string(),
        ProblemKind::NoBranch(branch) => format!("its repository has no branch {branch}"),
        ProblemKind::WorkingCopy(_) => "this session's working copy of it cannot be opened".to_string(),
    };
    format!(
        "Repository unavailable: {mount} is mounted from a repository that cannot be used now ({why}). Nothing in it can be read or changed until whoever mounted it fixes that; what this session staged there is kept."
    )
}

impl ToolError {
    /// Turns a file system failure about `path` into the text the model reads.
    /// Nothing of the host (its paths, its link targets) survives.
    pub fn from_fs(error: FsError, path: &VPath) -> ToolError {
        let path = path.clone();
        match error {
            FsError::NotFound => ToolError::NotFound(path),
            FsError::NotADir => ToolError::NotADir(path),
            FsError::IsADir => ToolError::IsADir(path),
            FsError::Exists => ToolError::Exists(path),
            FsError::Escapes => ToolError::Denied(path),
            FsError::Loop => ToolError::Loop(path),
            FsError::NotRegular => ToolError::NotRegular(path),
            FsError::TooLarge { len } => ToolError::TooLarge { path, len, max: MAX_OPEN_BYTES },
            FsError::Raced => ToolError::Raced(path),
            FsError::NotEmpty => ToolError::Message(format!("Directory not empty: {path}")),
            FsError::CrossDevice => {
                ToolError::Message(format!("Cannot move {path}: the source and the target are on different devices."))
            }
            FsError::NameTooLong => ToolError::Message(format!(
                "Cannot use {path}: names may have at most {NAME_MAX} bytes, and paths at most {PATH_MAX} bytes and {DEPTH_MAX} levels."
            )),
            FsError::Changed => ToolError::Message(format!(
                "{path} has changed since this session last read it. Read it again before changing it."
            )),
            FsError::Mount(problem) => {
                tracing::debug!(mount = %problem.mount, problem = ?problem.kind, "a mounted repository cannot be used");
                ToolError::Mount(problem)
            }
            FsError::Editor(failure) => ToolError::Message(editor_failure(&failure, &path)),
            FsError::Io(e) => ToolError::Message(format!("Cannot access {path}: {}.", io_reason(&e))),
        }
    }
}

/// Why a file open in the editor was not changed, in words.
fn editor_failure(failure: &EditorFailure, path: &VPath) -> String {
    match failure {
        EditorFailure::Refused(Some(reason)) if !reason.trim().is_empty() => {
            format!("The editor refused the edit of {path} ({}); the file was not changed.", reason.trim())
        }
        EditorFailure::Refused(_) => format!("The editor refused the edit of {path}; the file was not changed."),
        EditorFailure::Failed(why) => {
            format!("The editor could not apply the edit of {path} ({why}); the file was not changed.")
        }
        EditorFailure::NoAnswer(waited) => format!(
            "The editor did not answer within {} s about the edit of {path}; the edit may still appear there, so read the file again before retrying.",
            waited.as_secs_f32()
        ),
        EditorFailure::NotText => format!(
            "{path} is open in the editor, which holds text, and the new content is not UTF-8 text; the file was not changed."
        ),
        EditorFailure::Unconfirmed => format!(
            "The editor has not yet confirmed an earlier change to {path}; the file was not changed. Try again in a moment."
        ),
        EditorFailure::BadName => {
            format!("The editor's name for {path} could not be used; the file was not changed.")
        }
    }
}

/// The reason of an OS error without its decoration (`(os error 13)`).
fn io_reason(e: &std::io::Error) -> String {
    let text = e.to_string();
    match text.find(" (os error") {
        Some(cut) => text[..cut].to_lowercase(),
        None => text.to_lowercase(),
    }
}

pub use crate::vfs::os::NAME_MAX;
/// The longest path, in bytes (Linux's `PATH_MAX`).
pub const PATH_MAX: usize = 4096;
/// The deepest path, in names.
pub const DEPTH_MAX: usize = 255;

/// How deep a path is, and its longest name in bytes.
pub fn path_shape(path: &VPath) -> (usize, usize) {
    path.as_str()
        .split('/')
        .filter(|n| !n.is_empty())
        .fold((0, 0), |(depth, longest), name| (depth + 1, longest.max(name.len())))
}

/// The largest file any tool loads whole.
pub const MAX_OPEN_BYTES: u64 = crate::text::MAX_TEXT_BYTES as u64;

/// What a call means to do with a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// list, read, glob, grep, search, stat: ro.
    Look,
    /// edit, rm, mv's source: stage, on something that exists.
    Change,
    /// write, mkdir, mv's target: stage, on a name that may be made. A name
    /// taken by a hidden entry answers Access denied (the one thing the view
    /// cannot hide), where a change of it reads as a missing file.
    Create,
}

/// A checked path: resolved by text, its links followed inside the
/// boundary, and granted what the call needs.
#[derive(Debug, Clone)]
pub struct Target {
    /// The path text the call gave, for brackets.
    pub given: String,
    /// The text-resolved absolute path, for every other answer.
    pub path: VPath,
    /// Where it really is, once links are followed.
    pub real: VPath,
    /// Its metadata, when it exists.
    pub meta: Option<Meta>,
    /// For a missing target: whether its parent directory exists.
    pub parent_exists: bool,
    /// The lower of the levels of `path` and `real`.
    pub level: Level,
}

impl Target {
    pub fn kind(&self) -> Option<Kind> {
        self.meta.as_ref().map(|m| m.kind)
    }

    pub fn is_dir(&self) -> bool {
        self.kind() == Some(Kind::Dir)
    }
}

/// The checked gateway from path texts to file system operations. A clone
/// is the same view of the same file system (indexing in the background
/// keeps one of the session it goes on for).
#[derive(Clone)]
pub struct Access {
    fs: Arc<dyn Fs>,
    view: View,
    start: VPath,
    /// Another name of the boundary: the root as the user gave it, through a link.
    alias: Option<VPath>,
}

impl Access {
    /// `start` outside the boundary or not visible is read as the boundary.
    pub fn new(fs: Arc<dyn Fs>, view: View, start: VPath) -> Access {
        let start = if start.starts_with(fs.boundary()) { start } else { fs.boundary().clone() };
        Access { fs, view, start, alias: None }
    }

    /// Makes paths under `alias` (the root as the user gave it, which links
    /// lead to the boundary) name the same paths under the boundary.
    pub fn set_alias(&mut self, alias: Option<VPath>) {
        self.alias = alias.filter(|a| a != self.fs.boundary());
    }

    pub fn fs(&self) -> &dyn Fs {
        &*self.fs
    }

    pub fn fs_arc(&self) -> Arc<dyn Fs> {
        self.fs.clone()
    }

    pub fn view(&self) -> &View {
        &self.view
    }

    pub fn start(&self) -> &VPath {
        &self.start
    }

    /// Resolves a path text against the start directory.
    pub fn path(&self, text: &str) -> Result<VPath, ToolError> {
        let path = VPath::resolve(&self.start, text).map_err(ToolError::InvalidPath)?;
        Ok(match self.alias.as_ref().and_then(|alias| path.strip_prefix(alias)) {
            Some(rel) => self.fs.boundary().join_rel(rel),
            None => path,
        })
    }

    /// Refuses to make a path the platform could not hold: a name over 255
    /// bytes, over 4096 bytes in all, or deeper than 255 levels (a tree that
    /// deep would make every later call on it slow).
    fn check_makeable(path: &VPath) -> Result<(), ToolError> {
        let (depth, longest) = path_shape(path);
        if longest > NAME_MAX || path.as_str().len() > PATH_MAX || depth > DEPTH_MAX {
            return Err(ToolError::Message(format!(
                "Cannot make {path}: names may have at most {NAME_MAX} bytes, and paths at most {PATH_MAX} bytes and {DEPTH_MAX} levels."
            )));
        }
        Ok(())
    }

    /// The level of a path by the view, taking the boundary into account.
    pub fn level(&self, path: &VPath) -> Level {
        if path.starts_with(self.fs.boundary()) {
            self.view.level(path)
        } else {
            Level::None
        }
    }

    fn visibility(&self, path: &VPath) -> Visibility {
        if path.starts_with(self.fs.boundary()) {
            self.view.visibility(path)
        } else if self.fs.boundary().starts_with(path) && self.view.level(self.fs.boundary()).can_read() {
            Visibility::Passage
        } else {
            match self.view.visibility(path) {
                Visibility::Visible(_) => Visibility::Hidden,
                other => other,
            }
        }
    }

    /// The answer for a path the session cannot see: by its nearest ancestor
    /// that is visible (No such file) or a passage (Access denied). A change
    /// of a name directly under a visible directory is Access denied: the
    /// name may be taken, and that is all the answer says.
    pub fn unseen(&self, path: &VPath, need: Need) -> ToolError {
        if self.visibility(path) == Visibility::Passage {
            return ToolError::Denied(path.clone());
        }
        if need == Need::Create {
            if let Some(parent) = path.parent() {
                if matches!(self.visibility(&parent), Visibility::Visible(_)) {
                    return ToolError::Denied(path.clone());
                }
            }
        }
        for ancestor in path.ancestors().iter().rev() {
            match self.visibility(ancestor) {
                Visibility::Visible(_) => return ToolError::NotFound(path.clone()),
                Visibility::Passage => return ToolError::Denied(path.clone()),
                Visibility::Hidden => {}
            }
        }
        ToolError::Denied(path.clone())
    }

    /// Checks a path text for `need` and resolves it.
    pub fn target(&self, text: &str, need: Need) -> Result<Target, ToolError> {
        let path = self.path(text)?;
        if need == Need::Create {
            Access::check_makeable(&path)?;
        }
        self.check(text, path, need)
    }

    /// Checks an already text-resolved path.
    pub fn check(&self, given: &str, path: VPath, need: Need) -> Result<Target, ToolError> {
        let lexical = match self.visibility(&path) {
            Visibility::Visible(level) => level,
            _ => return Err(self.unseen(&path, need)),
        };
        let resolution = self.fs.resolve(&path).map_err(|e| ToolError::from_fs(e, &path))?;
        let real = resolution.real().clone();
        let level = if real == path {
            lexical
        } else {
            match self.visibility(&real) {
                Visibility::Visible(level) => level.min(lexical),
                // The link is visible, where it leads is not: its name is all it says.
                _ => return Err(ToolError::Denied(path)),
            }
        };
        if need != Need::Look && !level.can_change() {
            return Err(ToolError::ReadOnly(path));
        }
        let (meta, parent_exists) = match resolution {
            Resolution::Found { meta, .. } => (Some(meta), true),
            Resolution::Missing { parent_exists, .. } => (None, parent_exists),
        };
        Ok(Target { given: given.to_string(), path, real, meta, parent_exists, level })
    }

    /// The mount point of the mounted repository a real path lies in, if any.
    pub fn mount_of(&self, real: &VPath) -> Option<VPath> {
        self.fs.mounts().into_iter().find(|m| real.starts_with(m))
    }

    /// Checks a path text for a repository tool: visible, inside a mount,
    /// and at `commit` (a session at `stage` is told its change stays
    /// staged). Answers the target and its mount point.
    pub fn repo_target(&self, text: &str) -> Result<(Target, VPath), ToolError> {
        let path = self.path(text)?;
        let target = self.check(text, path, Need::Look)?;
        let Some(mount) = self.mount_of(&target.real) else {
            return Err(ToolError::NothingToCommit(target.path));
        };
        match target.level {
            Level::Commit => Ok((target, mount)),
            Level::Stage => Err(ToolError::NotCommitted(target.path)),
            _ => Err(ToolError::ReadOnly(target.path)),
        }
    }

    /// Makes every missing directory above a checked target, refusing to
    /// create a name the session could not see.
    pub fn create_parents(&self, target: &Target) -> Result<(), ToolError> {
        if target.parent_exists {
            return Ok(());
        }
        let boundary = self.fs.boundary();
        for dir in target.real.ancestors() {
            if !dir.starts_with(boundary) || dir == *boundary {
                continue;
            }
            match self.fs.lstat(&dir) {
                Ok(meta) if meta.kind == Kind::Dir => continue,
                Ok(_) => return Err(ToolError::NotADir(target.path.clone())),
                Err(FsError::NotFound) => {}
                Err(e) => return Err(ToolError::from_fs(e, &target.path)),
            }
            if !self.level(&dir).can_change() {
                return Err(ToolError::Denied(target.path.clone()));
            }
            match self.fs.create_dir(&dir) {
                Ok(()) | Err(FsError::Exists) => {}
                Err(e) => return Err(ToolError::from_fs(e, &target.path)),
            }
        }
        Ok(())
    }

    /// The level of an entry `name` in the listed directory `dir`: the lower
    /// of its level by the path the model used and by where it really is.
    pub fn entry_level(&self, dir: &Target, name: &str) -> Level {
        let by_path = self.level(&dir.path.join(name));
        if dir.real == dir.path {
            by_path
        } else {
            by_path.min(self.level(&dir.real.join(name)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_edit_the_editor_did_not_make_says_so_in_plain_words() {
        let path = VPath::parse("/src/main.rs").unwrap();
        let said = |failure| ToolError::from_fs(FsError::Editor(failure), &path).to_string();
        assert_eq!(
            said(EditorFailure::Refused(Some("the user said no".into()))),
            "The editor refused the edit of /src/main.rs (the user said no); the file was not changed."
        );
        assert_eq!(
            said(EditorFailure::Refused(None)),
            "The editor refused the edit of /src/main.rs; the file was not changed."
        );
        assert_eq!(
            said(EditorFailure::NoAnswer(std::time::Duration::from_millis(300))),
            "The editor did not answer within 0.3 s about the edit of /src/main.rs; the edit may still appear there, so read the file again before retrying."
        );
        for failure in [
            EditorFailure::Failed("x".into()),
            EditorFailure::NotText,
            EditorFailure::Unconfirmed,
            EditorFailure::BadName,
        ] {
            assert!(!said(failure).contains("Cannot access"));
        }
    }
}
