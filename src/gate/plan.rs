//! What a gated call would do, from its dry run: the paths it changes (its
//! subjects, by where they really are) and the words a prompt shows — a
//! one-line description and the diff or a summary.

use super::fence::Op;
use super::Kind;
use crate::paths::VPath;
use crate::text;
use crate::tools::spec::ChangeContext;
use crate::tools::{plural, Change, FileChange, Outcome};
use crate::vfs::{Fs, Kind as NodeKind};
use serde_json::Value;

/// The most lines of a prompt's summary.
const SUMMARY_LINES: usize = 400;
/// The most bytes of a prompt's summary.
const SUMMARY_BYTES: usize = 32 * 1024;
/// The most files a summary of a directory lists.
const LISTED_FILES: usize = 20;
/// The most entries counted below a directory.
const COUNT_LIMIT: usize = 100_000;

/// One path a call changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    pub kind: Kind,
    /// Where the change really lands.
    pub path: VPath,
    /// `path` relative to the boundary: what rules and grants match.
    pub rel: String,
    /// A move's source (relative), checked against deny rules only.
    pub source: Option<(VPath, String)>,
}

/// A gated call, understood.
#[derive(Debug, Clone)]
pub struct Plan {
    pub tool: String,
    pub subjects: Vec<Subject>,
    pub description: String,
    pub summary: String,
    /// Each changed file's whole text before and after, for an editor's diff view.
    pub files: Vec<FileTexts>,
}

/// The most bytes of one text a prompt carries for a diff view.
const FILE_TEXT_BYTES: usize = 2 * 1024 * 1024;

/// A changed file's texts as a prompt carries them: `None` when left out
/// (too large), `Some(None)` when there is none (a new file's before).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileTexts {
    pub path: String,
    pub before: Option<Option<String>>,
    pub after: Option<Option<String>>,
}

fn file_texts(preview: &Outcome) -> Vec<FileTexts> {
    let fit = |text: &Option<String>| match text {
        Some(t) if t.len() > FILE_TEXT_BYTES => None,
        other => Some(other.clone()),
    };
    let changes: &[FileChange] = match preview {
        Outcome::Changed(change) => std::slice::from_ref(change),
        Outcome::Patch(changes) => changes,
        _ => return Vec::new(),
    };
    changes
        .iter()
        .map(|c| FileTexts { path: c.path.to_string(), before: fit(&c.texts.before), after: fit(&c.texts.after) })
        .collect()
}

pub fn rel(boundary: &VPath, path: &VPath) -> String {
    path.strip_prefix(boundary).map(str::to_string).unwrap_or_else(|| path.as_str().to_string())
}

impl Plan {
    pub fn new(tool: &str, args: &Value, ops: &[Op], preview: &Outcome, fs: &dyn Fs) -> Plan {
        let boundary = fs.boundary().clone();
        let subjects = subjects(ops, &boundary);
        let (description, summary) = describe(tool, args, ops, preview, &subjects, fs, &boundary);
        Plan { tool: tool.to_string(), subjects, description, summary: cap(summary), files: file_texts(preview) }
    }
}

/// The subjects of a dry run's changes. Directories made only to hold
/// another change are implied by it, not subjects of their own.
fn subjects(ops: &[Op], boundary: &VPath) -> Vec<Subject> {
    let targets: Vec<&VPath> = ops
        .iter()
        .map(|op| match op {
            Op::Write { path, .. } | Op::CreateDir { path } | Op::Trash { path } => path,
            Op::Rename { to, .. } => to,
            Op::Repo { mount, .. } => mount,
        })
        .collect();
    let mut out: Vec<Subject> = Vec::new();
    for op in ops {
        let (kind, path, source) = match op {
            Op::Write { path, .. } => (Kind::Write, path, None),
            Op::CreateDir { path } => {
                if targets.iter().any(|t| *t != path && t.starts_with(path)) {
                    continue;
                }
                (Kind::Write, path, None)
            }
            Op::Rename { from, to } => (Kind::Move, to, Some((from.clone(), rel(boundary, from)))),
            Op::Trash { path } => (Kind::Remove, path, None),
            // A commit, merge, tag or new branch changes the mounted repository.
            Op::Repo { mount, .. } => (Kind::Commit, mount, None),
        };
        let subject = Subject { kind, path: path.clone(), rel: rel(boundary, path), source };
        // A moved file written at its new place is one move.
        if kind == Kind::Write && out.iter().any(|s| s.path == subject.path) {
            continue;
        }
        if !out.contains(&subject) {
            out.push(subject);
        }
    }
    out
}

/// How many files lie below a directory (up to a limit), and the first few.
fn files_below(fs: &dyn Fs, dir: &VPath, boundary: &VPath) -> (usize, Vec<String>, bool) {
    let mut count = 0;
    let mut listed = Vec::new();
    let mut stack = vec![dir.clone()];
    let mut seen = 0;
    while let Some(d) = stack.pop() {
        let Ok(mut entries) = fs.read_dir(&d) else { continue };
        entries.sort_by(|a, b| b.name.cmp(&a.name));
        for entry in entries {
            seen += 1;
            if seen > COUNT_LIMIT {
                return (count, listed, true);
            }
            let path = d.join(&entry.name);
            if entry.kind == NodeKind::Dir {
                stack.push(path);
            } else {
                count += 1;
                if listed.len() < LISTED_FILES {
                    listed.push(rel(boundary, &path));
                }
            }
        }
    }
    listed.sort();
    (count, listed, false)
}

/// `notes/old/ (3 files)` for a directory, `notes/a.md` for anything else,
/// and the files listed when it is a directory.
fn node_words(fs: &dyn Fs, path: &VPath, boundary: &VPath) -> (String, String) {
    let shown = rel(boundary, path);
    match fs.lstat(path) {
        Ok(meta) if meta.kind == NodeKind::Dir => {
            let (count, listed, more) = files_below(fs, path, boundary);
            let count_text = match (count, more) {
                (_, true) => format!("{count}+ files"),
                (1, false) => "1 file".to_string(),
                (n, false) => format!("{n} files"),
            };
            let mut list = listed.join("\n");
            if count > listed.len() {
                list.push_str(&format!("\n… and {} more", count - listed.len()));
            }
            (format!("{shown}/ ({count_text})"), list)
        }
        _ => (shown, String::new()),
    }
}

fn counts(diff: &str) -> (usize, usize) {
    let added = diff.lines().filter(|l| l.starts_with('+')).count();
    let removed = diff.lines().filter(|l| l.starts_with('-')).count();
    (added, removed)
}

/// The content a dry run would have written to `path`'s real place.
fn written(fs: &dyn Fs, ops: &[Op], path: &VPath) -> Option<String> {
    let real = fs.resolve(path).ok().map(|r| r.real().clone()).unwrap_or_else(|| path.clone());
    ops.iter().rev().find_map(|op| match op {
        Op::Write { path, bytes } if *path == real => Some(String::from_utf8_lossy(bytes).replace("\r\n", "\n")),
        _ => None,
    })
}

/// One file's part of a summary: a unified diff with its header.
fn file_diff(fs: &dyn Fs, ops: &[Op], change: &FileChange, boundary: &VPath) -> String {
    let to = rel(boundary, &change.path);
    match &change.change {
        Change::Created { .. } => {
            let body = written(fs, ops, &change.path).map(|t| text::unified_diff("", &t)).unwrap_or_default();
            format!("--- /dev/null\n+++ b/{to}\n{body}")
        }
        Change::Modified { diff } => format!("--- a/{to}\n+++ b/{to}\n{diff}"),
        Change::Moved { from, diff } => {
            let from = VPath::resolve(boundary, from).map(|p| rel(boundary, &p)).unwrap_or_else(|_| from.clone());
            format!("--- a/{from}\n+++ b/{to}\n{diff}")
        }
        Change::Deleted => format!("--- a/{to}\n+++ /dev/null\n(the file goes to the trash)\n"),
    }
}

fn describe(
    tool: &str,
    args: &Value,
    ops: &[Op],
    preview: &Outcome,
    subjects: &[Subject],
    fs: &dyn Fs,
    boundary: &VPath,
) -> (String, String) {
    if let Some((mount, action)) = ops.iter().find_map(|op| match op {
        Op::Repo { mount, action } => Some((mount, action)),
        _ => None,
    }) {
        let summary = match preview {
            Outcome::Text { body, .. } => body.clone(),
            _ => String::new(),
        };
        return (format!("{action} in the repository mounted at {}", rel(boundary, mount)), summary);
    }
    match (tool, preview) {
        ("rm", _) => {
            let Some(subject) = subjects.iter().find(|s| s.kind == Kind::Remove) else {
                return ("remove a path".into(), String::new());
            };
            let (words, list) = node_words(fs, &subject.path, boundary);
            (format!("move {words} to the trash"), list)
        }
        ("mv", _) => {
            let Some((subject, (from, _))) = subjects.iter().find_map(|s| s.source.as_ref().map(|src| (s, src))) else {
                return ("move a path".into(), String::new());
            };
            let (words, list) = node_words(fs, from, boundary);
            let dir = words.ends_with(')');
            let to = if dir { format!("{}/", subject.rel) } else { subject.rel.clone() };
            (format!("move {words} to {to}"), list)
        }
        ("mkdir", _) => {
            let made = subjects.iter().map(|s| s.rel.as_str()).collect::<Vec<_>>().join(", ");
            (format!("make the directory {made}"), String::new())
        }
        (_, Outcome::Changed(change)) => {
            let summary = file_diff(fs, ops, change, boundary);
            let path = rel(boundary, &change.path);
            // The tool's own words from its typed arguments, else generic ones.
            let context = ChangeContext { path: &path, change: &change.change, before: change.texts.before.as_deref() };
            let own = crate::tools::spec::find(tool).and_then(|t| t.describe(args, &context));
            let description = match &change.change {
                Change::Created { lines } => {
                    own.unwrap_or_else(|| format!("create {path} ({})", plural(*lines, "line", "lines")))
                }
                Change::Modified { diff } => {
                    let (added, removed) = counts(diff);
                    let what = own.unwrap_or_else(|| format!("rewrite {path}"));
                    format!("{what} (+{added} −{removed} lines)")
                }
                Change::Deleted => format!("move {path} to the trash"),
                Change::Moved { .. } => format!("move a file to {path}"),
            };
            (description, summary)
        }
        (_, Outcome::Patch(changes)) => {
            let mut parts = Vec::new();
            let mut summary = String::new();
            for change in changes {
                let path = rel(boundary, &change.path);
                parts.push(match &change.change {
                    Change::Created { .. } => format!("add {path}"),
                    Change::Modified { .. } => format!("update {path}"),
                    Change::Moved { from, .. } => {
                        let from =
                            VPath::resolve(boundary, from).map(|p| rel(boundary, &p)).unwrap_or_else(|_| from.clone());
                        format!("move {from} to {path}")
                    }
                    Change::Deleted => format!("delete {path}"),
                });
                summary.push_str(&file_diff(fs, ops, change, boundary));
            }
            (format!("apply a patch: {}", parts.join(", ")), summary)
        }
        _ => {
            let paths = subjects.iter().map(|s| s.rel.as_str()).collect::<Vec<_>>().join(", ");
            (format!("{tool} {paths}"), String::new())
        }
    }
}

/// A summary cut to what a prompt can show.
fn cap(summary: String) -> String {
    let lines = summary.lines().count();
    if lines <= SUMMARY_LINES && summary.len() <= SUMMARY_BYTES {
        return summary;
    }
    let mut out = String::new();
    let mut shown = 0;
    for line in summary.lines() {
        if shown >= SUMMARY_LINES || out.len() + line.len() + 1 > SUMMARY_BYTES {
            break;
        }
        out.push_str(line);
        out.push('\n');
        shown += 1;
    }
    out.push_str(&format!("… ({} more lines)\n", lines - shown));
    out
}
