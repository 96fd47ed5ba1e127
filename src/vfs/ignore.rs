//! Ignore rules as ripgrep ranks them, shared by the OS walk (`walk`) and the in-memory file system (`mem`): which ignore files a directory holds, their matchers, and the precedence; not listing directories, and not reading files (each file system reads its own, never following a link).
//!
//! Precedence: the innermost `.rgignore` decision, across the whole chain,
//! else the innermost `.ignore` one, else the innermost `.gitignore` one up
//! to the nearest repository root (a directory holding `.git`), else that
//! root's `.git/info/exclude`. Unlike ripgrep, `.gitignore` counts outside a
//! repository too. Matchers are rooted at the virtual path of their
//! directory, so paths are matched as the session names them. Only ignore
//! files the walk's reader may see count.

use super::{Kind, Readable};
use crate::paths::VPath;
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::Match;
use std::path::Path;
use std::sync::Arc;

/// Ignore files longer than this are not read.
pub(super) const MAX_IGNORE_FILE: u64 = 1 << 20;

/// The ignore files (and `.git`) a directory holds, by kind, links not followed.
#[derive(Default)]
pub(super) struct Holds {
    rg_ignore: bool,
    dot_ignore: bool,
    gitignore: bool,
    git: Option<Kind>,
}

impl Holds {
    /// Notes one entry of the directory's listing.
    pub(super) fn note(&mut self, name: &str, kind: Kind) {
        match name {
            ".rgignore" => self.rg_ignore = kind == Kind::File,
            ".ignore" => self.dot_ignore = kind == Kind::File,
            ".gitignore" => self.gitignore = kind == Kind::File,
            ".git" => self.git = Some(kind),
            _ => {}
        }
    }

    /// What a directory holds, by `kind_of(name)` for each of the names that matter.
    pub(super) fn probe(kind_of: impl Fn(&str) -> Option<Kind>) -> Holds {
        let mut holds = Holds::default();
        for name in [".rgignore", ".ignore", ".gitignore", ".git"] {
            if let Some(kind) = kind_of(name) {
                holds.note(name, kind);
            }
        }
        holds
    }
}

/// The ignore files of one directory, chained to those of its ancestors.
pub(super) struct Ignores {
    parent: Option<Arc<Ignores>>,
    rg_ignore: Option<Gitignore>,
    dot_ignore: Option<Gitignore>,
    gitignore: Option<Gitignore>,
    /// From `.git/info/exclude`, on a repository root.
    exclude: Option<Gitignore>,
    /// The directory holds `.git`: outer `.gitignore` files stop here.
    repo_root: bool,
}

/// The ignore chain below the directory `root`, which holds `holds`: a new
/// level over `inherited`, or `inherited` itself when the directory adds
/// nothing. `read(names)` reads a small regular file below the directory
/// (`[".gitignore"]`, `[".git", "info", "exclude"]`) without following a
/// link; only files `readable` allows are read.
pub(super) fn level(
    root: &VPath,
    holds: Holds,
    readable: &Readable<'_>,
    inherited: Option<Arc<Ignores>>,
    read: impl Fn(&[&str]) -> Option<Vec<u8>>,
) -> Option<Arc<Ignores>> {
    let rg_ignore = holds.rg_ignore && readable(&root.join(".rgignore"));
    let dot_ignore = holds.dot_ignore && readable(&root.join(".ignore"));
    let gitignore = holds.gitignore && readable(&root.join(".gitignore"));
    let git = holds.git.filter(|_| readable(&root.join(".git")));
    if !rg_ignore && !dot_ignore && !gitignore && git.is_none() {
        return inherited;
    }
    let file =
        |wanted: bool, name: &str| if wanted { read(&[name]).and_then(|text| matcher(root, &text)) } else { None };
    let exclude = match git {
        Some(Kind::Dir) if readable(&root.join(".git").join("info").join("exclude")) => {
            read(&[".git", "info", "exclude"]).and_then(|text| matcher(root, &text))
        }
        _ => None,
    };
    Some(Arc::new(Ignores {
        parent: inherited,
        rg_ignore: file(rg_ignore, ".rgignore"),
        dot_ignore: file(dot_ignore, ".ignore"),
        gitignore: file(gitignore, ".gitignore"),
        exclude,
        repo_root: git.is_some(),
    }))
}

impl Ignores {
    fn levels(&self) -> impl Iterator<Item = &Ignores> + Clone {
        std::iter::successors(Some(self), |level| level.parent.as_deref())
    }

    /// Whether `path` (virtual) is ignored, by the precedence in the module header.
    pub(super) fn ignores(&self, path: &Path, is_dir: bool) -> bool {
        fn decided(matcher: &Option<Gitignore>, path: &Path, is_dir: bool) -> Option<bool> {
            match matcher.as_ref()?.matched(path, is_dir) {
                Match::None => None,
                Match::Ignore(_) => Some(true),
                Match::Whitelist(_) => Some(false),
            }
        }
        for level in self.levels() {
            if let Some(d) = decided(&level.rg_ignore, path, is_dir) {
                return d;
            }
        }
        for level in self.levels() {
            if let Some(d) = decided(&level.dot_ignore, path, is_dir) {
                return d;
            }
        }
        for level in self.levels() {
            if let Some(d) = decided(&level.gitignore, path, is_dir) {
                return d;
            }
            if level.repo_root {
                break;
            }
        }
        if let Some(root) = self.levels().find(|level| level.repo_root) {
            if let Some(d) = decided(&root.exclude, path, is_dir) {
                return d;
            }
        }
        false
    }
}

/// A matcher for the text of an ignore file of the directory `root`, or
/// `None` when it holds no pattern. Bad lines are skipped, as ripgrep does.
fn matcher(root: &VPath, text: &[u8]) -> Option<Gitignore> {
    let mut builder = GitignoreBuilder::new(Path::new(root.as_str()));
    for (i, line) in text.split(|&b| b == b'\n').enumerate() {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Ok(mut line) = std::str::from_utf8(line) else { continue };
        if i == 0 {
            line = line.trim_start_matches('\u{feff}');
        }
        let _ = builder.add_line(None, line);
    }
    builder.build().ok().filter(|g| !g.is_empty())
}
