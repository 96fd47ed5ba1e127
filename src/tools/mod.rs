//! The file tools: what each one does with a checked path.
//!
//! A tool takes its parsed arguments and a `Ctx` (the session's `Access` and
//! what it has observed) and answers an `Outcome` or a `ToolError`. It does
//! not number results, cap output or remember earlier answers: that is
//! `hygiene`, applied by the engine to every outcome alike.

pub mod files;
pub mod find;
pub mod memory;
pub mod nodes;
pub mod params;
pub mod repo;
pub mod search;
pub mod skills;
pub mod spec;

use crate::access::{Access, ToolError};
pub use crate::hash::{hex, sha256, Sha};
use crate::paths::VPath;
use std::collections::HashMap;

/// The content hash this session last saw of each file, by real path:
/// what makes a file safe to change (read before write, stale guard).
#[derive(Debug, Default, Clone)]
pub struct Observed {
    seen: HashMap<VPath, Sha>,
}

impl Observed {
    pub fn record(&mut self, real: &VPath, sha: Sha) {
        self.seen.insert(real.clone(), sha);
    }

    pub fn get(&self, real: &VPath) -> Option<&Sha> {
        self.seen.get(real)
    }

    /// Forgets `real` and everything below it (it was removed).
    pub fn forget_below(&mut self, real: &VPath) {
        self.seen.retain(|k, _| !k.starts_with(real));
    }

    /// Moves the observations of `from` (and everything below it) to `to`.
    pub fn moved(&mut self, from: &VPath, to: &VPath) {
        let keys: Vec<VPath> = self.seen.keys().filter(|k| k.starts_with(from)).cloned().collect();
        for key in keys {
            if let Some(sha) = self.seen.remove(&key) {
                let rest = key.strip_prefix(from).unwrap_or("");
                self.seen.insert(to.join_rel(rest), sha);
            }
        }
    }
}

/// What a tool works with.
pub struct Ctx<'a> {
    pub access: &'a Access,
    pub observed: &'a mut Observed,
    /// The user's own config directory (global skills), outside the view.
    pub user_dir: Option<&'a std::path::Path>,
    /// The search index, when the engine has one.
    pub index: Option<&'a crate::index::hybrid::Index>,
    /// Hears how far a search's indexing has come (a front door's progress report), if anyone.
    pub progress: Option<&'a dyn Fn(&crate::index::hybrid::Progress)>,
    /// This project's and the user's memory records, when the engine keeps them.
    pub memory: Option<&'a crate::memory::Memory>,
    /// Set by a search that leaves work for the index to do in the background
    /// (its root, and what: files it had no time for, or a walk to make again).
    pub readying: &'a std::sync::Mutex<Option<(crate::access::Target, crate::index::background::Readying)>>,
}

/// A change a call would make to records that are not files (memory), found without making it:
/// what the gate decides about and an approval prompt shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordChange {
    /// Whose records: `project` or `user` (what rules and grants of kind `memory` name).
    pub scope: &'static str,
    /// The change reaches beyond this project (the user's memory, read by every project):
    /// in mode accept-edits it asks.
    pub shared: bool,
    /// One line: `add a record to project memory`.
    pub description: String,
    /// What changes: the record's text before and after.
    pub summary: String,
}

/// A read of a file's lines.
#[derive(Debug, Clone)]
pub struct ReadOutcome {
    /// The path as the call gave it.
    pub given: String,
    pub path: VPath,
    pub real: VPath,
    /// First and last line shown (1-based); `last < first` when nothing was shown.
    pub first: usize,
    pub last: usize,
    /// The last line the call asked for: past `total` when an explicit limit
    /// reaches past the end of the file; `last` otherwise.
    pub asked_last: usize,
    pub total: usize,
    pub sha: Sha,
    /// The numbered lines, `N: text`, each ending in a newline.
    pub body: String,
    /// A note after the lines (a window cut short by the size limit).
    pub note: Option<String>,
}

/// How one file changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Created {
        lines: usize,
    },
    Modified {
        diff: String,
    },
    Deleted,
    /// Moved from `from` (its given path), possibly changed on the way.
    Moved {
        from: String,
        diff: String,
    },
}

/// One changed file.
#[derive(Debug, Clone)]
pub struct FileChange {
    pub given: String,
    pub path: VPath,
    /// The new content's hash; none for a deletion.
    pub sha: Option<Sha>,
    pub change: Change,
    /// A sentence the tool adds after the diff (a skill file written outside skill_manage).
    pub note: Option<String>,
    /// The whole text before and after the change, for editors' diff views
    /// (never shown to the model; `None` where there was no text: a new file,
    /// a removal, a binary or unreadable file).
    pub texts: ChangeTexts,
}

/// A changed file's text before and after, line breaks as `\n`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChangeTexts {
    pub before: Option<String>,
    pub after: Option<String>,
}

/// What a tool answers before hygiene.
#[derive(Debug, Clone)]
pub enum Outcome {
    Read(ReadOutcome),
    /// write, edit, multiedit: one file.
    Changed(FileChange),
    /// apply_patch: every file, in the patch's order.
    Patch(Vec<FileChange>),
    /// mv: a node moved (a file or a whole directory), shown as `body`.
    Moved {
        body: String,
        from: VPath,
        to: VPath,
    },
    /// Everything else: a listing, matches, a message.
    Text {
        body: String,
        path: Option<VPath>,
    },
}

impl Outcome {
    pub fn text(body: impl Into<String>) -> Outcome {
        Outcome::Text { body: body.into(), path: None }
    }
}

pub type ToolResult = Result<Outcome, ToolError>;

/// `1 file`, `2 files`: a count with its noun, for the sentences tools and approvals answer.
pub(crate) fn plural(n: usize, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}
