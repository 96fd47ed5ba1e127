//! The tools' arguments, as the model sees them.
//!
//! Each struct's doc comment is the tool's description and each field's doc
//! comment is the argument's: `schemas/tools/*.json` is generated from these
//! types, and a test fails when it is stale. Names are public API.
//! Nothing here runs a tool.

use schemars::JsonSchema;
use serde::Deserialize;

/// Read a text file, with numbered lines (`N: text`). Shows up to 2000 lines from `offset`
/// (at most 1 MiB per call); the first line of the answer says which lines of how many were
/// shown and the file's hash. Very long lines are cut with a marker. Given a directory, it lists
/// it. Binary files are refused. Reading a file is what allows changing it later.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadParams {
    /// Path of the file: absolute, or relative to the start directory.
    pub file_path: String,
    /// First line to show, counting from 1. Default 1.
    pub offset: Option<u64>,
    /// Number of lines to show: at most 2000, the default.
    pub limit: Option<u64>,
}

/// Write a whole text file, creating it (and missing parent directories) or replacing it. To
/// replace an existing file, read it first in this session; if it changed since, read it again.
/// The file's line endings, byte-order mark and permissions are kept; a file without write
/// permission is not replaced. Prefer edit for small changes to an existing file.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteParams {
    /// Path of the file: absolute, or relative to the start directory.
    pub file_path: String,
    /// The complete new content.
    pub content: String,
}

/// Replace literal text in a file read earlier in this session. `old_string` must occur exactly
/// once unless `replace_all` is set; include enough surrounding lines to make it unique. Line
/// endings need not match (LF text matches a CRLF file, which stays CRLF). Answers with the diff.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditParams {
    /// Path of the file: absolute, or relative to the start directory.
    pub file_path: String,
    /// The exact text to find. Must not be empty.
    pub old_string: String,
    /// The text to put in its place; empty deletes it.
    pub new_string: String,
    /// Replace every occurrence instead of requiring exactly one. Default false.
    pub replace_all: Option<bool>,
}

/// One replacement of a multiedit.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditItem {
    /// The exact text to find, in the file as the earlier edits left it.
    pub old_string: String,
    /// The text to put in its place.
    pub new_string: String,
    /// Replace every occurrence. Default false.
    pub replace_all: Option<bool>,
}

/// Make several replacements in one file, in order, all or nothing: if any edit fails, the file
/// is left untouched and the answer says which edit failed. The file must have been read in
/// this session. Answers with the diff.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MultiEditParams {
    /// Path of the file: absolute, or relative to the start directory.
    pub file_path: String,
    /// The replacements, applied one after another.
    pub edits: Vec<EditItem>,
}

/// Apply a patch that adds, updates, deletes or moves files, all or nothing across files. Format:
/// `*** Begin Patch`, then for each file `*** Add File: path` (lines starting with `+`),
/// `*** Delete File: path`, or `*** Update File: path` (optionally `*** Move to: path`) followed by
/// hunks that start with `@@` (optionally `@@ line to anchor on`) and lines starting with ` `
/// (context), `-` (remove) or `+` (add); then `*** End Patch`. Files to update must have been read
/// in this session. `*** Add File` and `*** Move to` never replace an existing file (update it, or
/// remove it first). Answers with each file's diff in the patch's order.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApplyPatchParams {
    /// The whole patch text, from `*** Begin Patch` to `*** End Patch`.
    pub patch: String,
}

/// List a directory: one entry per line, directories first (with a trailing `/`), then files, by
/// name. An entry this session can read but not change, in a directory it can change, is marked
/// `[read-only]`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    /// Directory to list: absolute, or relative to the start directory. Default: the start directory.
    pub path: Option<String>,
}

/// Find files by name pattern, below a directory. `*` and `?` do not cross `/`, `**` does,
/// `{a,b}` picks one; a pattern without `/` matches file names at any depth (`*.rs`); a leading
/// `!` is refused (grep's `glob` takes one). Skips hidden files and what ignore files name, as
/// ripgrep does: `.rgignore` over `.ignore` over `.gitignore` (and `.git/info/exclude`), those of
/// the directories above `path` up to the workspace root included; `.gitignore` counts outside a
/// git repository too. Answers absolute paths, sorted, and stops at 500 matches (saying so).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GlobParams {
    /// The pattern, relative to `path`, such as `src/**/*.ts` or `*.md`.
    pub pattern: String,
    /// Directory to search in. Default: the start directory.
    pub path: Option<String>,
}

/// Search file contents with a regular expression (Rust regex syntax, as ripgrep), one line at a
/// time, below a directory or in one file. `$` matches at a line's end also before `\r\n`. Skips
/// hidden and binary files and what ignore files name, as glob does (`.rgignore`, `.ignore`,
/// `.gitignore`, also those above `path`, and outside a git repository too). Answers
/// `path:line:text` lines (context lines as `path-line-text`), sorted by path.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrepParams {
    /// The regular expression (or literal text with `fixed_strings`).
    pub pattern: String,
    /// File or directory to search. Default: the start directory.
    pub path: Option<String>,
    /// Only search files whose path (relative to `path`) matches this glob, such as `*.rs` or
    /// `src/**/*.py`; `!*.rs` searches the files it does not match.
    pub glob: Option<String>,
    /// Match case-insensitively. Default false.
    pub ignore_case: Option<bool>,
    /// Treat the pattern as literal text, not a regular expression. Default false.
    pub fixed_strings: Option<bool>,
    /// Lines of context to show before and after each match. Default 0.
    pub context: Option<u32>,
    /// `content` (matching lines, the default), `files` (paths of matching files only) or
    /// `count` (the number of matching lines per file, as ripgrep's `--count`).
    pub output: Option<GrepOutput>,
}

/// What grep answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum GrepOutput {
    Content,
    Files,
    Count,
}

/// Find passages by meaning and by words, best first: describe what you are looking for in
/// plain language ("where failed uploads are retried"). Each result is `path:first-last` and
/// then the passage. Use grep for exact text.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchParams {
    /// What to look for.
    pub query: String,
    /// Directory to search in. Default: the start directory.
    pub path: Option<String>,
    /// Most results to answer. Default 10.
    pub limit: Option<u32>,
}

/// Make a directory, and any missing parents.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MkdirParams {
    /// Path of the new directory.
    pub path: String,
}

/// Move or rename a file or directory. The destination must not exist.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MvParams {
    /// What to move.
    pub source: String,
    /// Its new path (not a directory to move into).
    pub destination: String,
}

/// Remove a file or directory by moving it to a trash outside the workspace, where the user can
/// restore it.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RmParams {
    /// What to remove.
    pub path: String,
}

/// Show what a path is: its kind, size, line count, modification time, permissions, and what
/// this session may do with it.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StatParams {
    /// The path to look at.
    pub path: String,
}

/// Show an earlier result of this session again, in full, by its id (such as `#0012`), up to
/// 2000 lines from `offset`. Use it for output that was shortened, or a result no longer in view.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RecallParams {
    /// The result's id, with or without `#`.
    pub id: String,
    /// First line to show, counting from 1. Default 1.
    pub offset: Option<u64>,
    /// Number of lines to show: at most 2000, the default.
    pub limit: Option<u64>,
}

/// List the skills this session can use: each skill's name, what it is for, and where its
/// SKILL.md is. Load one with skill_view before following it.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SkillsListParams {}

/// Load a skill: its SKILL.md in full and the list of its other files (read them with read).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SkillViewParams {
    /// The skill's name, as skills_list shows it.
    pub name: String,
}

/// Create a skill or replace its SKILL.md under `skills/<name>/`. The content must start with
/// frontmatter: a line `---`, then `name: <name>` and `description: <what it is for and when to
/// use it>`, then `---`; the name is lowercase letters, digits and single hyphens; at most 64 KiB.
/// Other files of the skill are written with write.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SkillManageParams {
    /// The skill's name, such as `release-notes`; the same as in the frontmatter.
    pub name: String,
    /// The whole SKILL.md, frontmatter first.
    pub content: String,
}

/// Tag a file so search can find it by why it exists: the task it belongs to and the apps or
/// areas it relates to. Tagging again replaces the given tags and keeps the others.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TagParams {
    /// The file to tag.
    pub path: String,
    /// The task the file belongs to, such as `fix the auth bug`.
    pub task: Option<String>,
    /// What it relates to, such as `login, session store`.
    pub related: Option<String>,
}

/// Commit what this session staged in a mounted git repository: every change made with the
/// file tools below the mount point (writes, edits, moves, removals) becomes one commit on the
/// branch the session's working copy follows. Needs the `commit` level there. If the branch moved
/// since the working copy was taken, the change is merged onto its new head; when it does not
/// apply cleanly nothing is committed and the change stays staged.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CommitParams {
    /// Any path inside the mounted repository, such as its mount point.
    pub path: String,
    /// The commit message: a short first line saying what the change does, then more lines if needed.
    pub message: String,
}

/// What branch does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum BranchAction {
    /// The branches, and which one the working copy follows.
    List,
    /// A new branch at the head of `from` (default: the working copy's branch).
    Create,
    /// Moves this session's working copy to the branch `name`, carrying what is staged.
    Switch,
}

/// The branches of a mounted git repository: list them, create one, or switch this session's
/// working copy to another (what is staged comes along when it applies cleanly there; other
/// sessions are not affected). Needs the `commit` level inside the mount.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BranchParams {
    /// Any path inside the mounted repository, such as its mount point.
    pub path: String,
    /// `list` (the default), `create` or `switch`.
    pub action: Option<BranchAction>,
    /// The branch to create or switch to.
    pub name: Option<String>,
    /// For `create`: the branch whose head the new one starts at. Default: the working copy's branch.
    pub from: Option<String>,
}

/// Merge a branch of a mounted git repository into the branch this session's working copy
/// follows (the mount's branch unless switched). A fast-forward when possible, else a merge
/// commit. When files conflict, each is named with how it conflicts and nothing is merged.
/// Needs the `commit` level inside the mount.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MergeParams {
    /// Any path inside the mounted repository, such as its mount point.
    pub path: String,
    /// The branch to merge in.
    pub branch: String,
    /// The merge commit's message. Default: `Merge branch '<branch>' into <current>`.
    pub message: Option<String>,
}

/// Tag the head of the branch this session's working copy follows in a mounted git repository
/// (a git tag; `tag` labels files for search). With a message the tag is annotated. An existing
/// tag is never moved. Needs the `commit` level inside the mount.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GitTagParams {
    /// Any path inside the mounted repository, such as its mount point.
    pub path: String,
    /// The tag's name, such as `v1.2.0`.
    pub name: String,
    /// A message for an annotated tag.
    pub message: Option<String>,
}

/// Open a pull request on the forge a mounted repository comes from. Needs a forge, and none is
/// configured for ctxfs: the answer says so. Use branch, commit and merge instead.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PrParams {
    /// Any path inside the mounted repository.
    pub path: String,
    /// The pull request's title.
    pub title: String,
    /// What it changes and why.
    pub body: Option<String>,
    /// The branch to ask to merge. Default: the working copy's branch.
    pub branch: Option<String>,
}

/// Publish a release on the forge a mounted repository comes from. Needs a forge, and none is
/// configured for ctxfs: the answer says so. Use git_tag to mark a version.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReleaseParams {
    /// Any path inside the mounted repository.
    pub path: String,
    /// The tag the release is made from.
    pub tag: String,
    /// The release's notes.
    pub notes: Option<String>,
}
