//! The repository tools: commit, branch, merge, git_tag, and pr and release
//! (which need a forge, and answer that none is configured).
//!
//! Each checks its path through `Access::repo_target` (visible, inside a
//! mount, at `commit`) and asks the file system's `repo` for the action, so
//! the gate's fence sees a change of a repository as it sees a file's. The
//! git work itself is `vfs::git`; this module puts its answers in words.

use super::params::{BranchAction, BranchParams, CommitParams, GitTagParams, MergeParams, PrParams, ReleaseParams};
use super::spec::{Action, Tool, Traits};
use super::{plural, Ctx, Outcome, ToolResult};
use crate::access::ToolError;
use crate::paths::VPath;
use crate::vfs::git::{FileChangeKind, RepoAction, RepoAnswer, RepoError};

/// Runs `action` on the mount `path` lies in, and says what happened.
fn act(ctx: &mut Ctx<'_>, path: &str, action: RepoAction) -> ToolResult {
    let (target, mount) = ctx.access.repo_target(path)?;
    let answer = ctx.access.fs().repo(&mount, &action, false).map_err(|e| refusal(e, &target.path, &mount))?;
    Ok(Outcome::Text { body: words(&answer, &mount), path: Some(mount) })
}

/// What a repository action did, for the model.
fn words(answer: &RepoAnswer, mount: &VPath) -> String {
    match answer {
        RepoAnswer::Committed { commit, branch, files, onto_moved } => {
            let mut out = if commit.is_empty() {
                format!("Commit to {branch} in {mount}: {}\n", plural(files.len(), "file", "files"))
            } else {
                format!("Committed {commit} to {branch} in {mount}: {}\n", plural(files.len(), "file", "files"))
            };
            for (path, kind) in files {
                let mark = match kind {
                    FileChangeKind::Added => "A",
                    FileChangeKind::Modified => "M",
                    FileChangeKind::Deleted => "D",
                };
                out.push_str(&format!("{mark} {}\n", mount.join_rel(path)));
            }
            if *onto_moved {
                out.push_str(&format!(
                    "{branch} had moved since this session's working copy was taken: the change was merged onto its new head, and the working copy now shows the result.\n"
                ));
            }
            out
        }
        RepoAnswer::Branches { current, mounted, list, staged } => {
            let mut out = format!("Branches of the repository mounted at {mount}");
            if current == mounted {
                out.push_str(&format!(" (the working copy follows {current}"));
            } else {
                out.push_str(&format!(" (the working copy follows {current}; the mount's branch is {mounted}"));
            }
            out.push_str(&format!("; {} staged):\n", plural(*staged, "file", "files")));
            for (name, at) in list {
                let mark = if name == current { "*" } else { " " };
                out.push_str(&format!("{mark} {name} {at}\n"));
            }
            out
        }
        RepoAnswer::BranchCreated { name, at } => {
            format!("Created the branch {name} at {at} in {mount}. The working copy stays where it was; switch to use it.\n")
        }
        RepoAnswer::Switched { name, carried } => format!(
            "This session's working copy of {mount} now follows {name}; {} staged carried over.\n",
            plural(*carried, "file", "files")
        ),
        RepoAnswer::Merged { from, into, commit, fast_forward, staged_behind } => {
            let how = if *fast_forward { "a fast-forward" } else { "a merge commit" };
            let mut out = if commit.is_empty() {
                format!("Merge {from} into {into} in {mount} ({how}).\n")
            } else {
                format!("Merged {from} into {into} in {mount}: {into} is now at {commit} ({how}).\n")
            };
            if *staged_behind {
                out.push_str(&format!(
                    "What this session staged conflicts with the merged files, so the working copy still shows {into} before the merge; the next commit merges it or says where it conflicts.\n"
                ));
            }
            out
        }
        RepoAnswer::AlreadyMerged { from, into } => {
            format!("Nothing to merge: {into} already contains everything on {from}.\n")
        }
        RepoAnswer::Tagged { name, at, branch } => {
            format!("Tagged {at} (the head of {branch}) as {name} in {mount}.\n")
        }
    }
}

/// Why a repository action did nothing, for the model.
fn refusal(error: RepoError, path: &VPath, mount: &VPath) -> ToolError {
    let text = match error {
        RepoError::NotMounted => return ToolError::NothingToCommit(path.clone()),
        RepoError::Broken(problem) => return ToolError::Mount(problem),
        RepoError::NothingStaged { branch } => format!(
            "Nothing staged: this session's working copy of {mount} is the same as {branch}, so there is nothing to commit."
        ),
        RepoError::Moved { branch, files } => format!(
            "Not committed: {branch} has moved since this session's working copy of {mount} was taken, and the change conflicts with what was committed there meanwhile, in {}; the change stays staged.",
            files.join(", ")
        ),
        RepoError::MergeConflicts { from, into, files } => {
            let mut out = format!(
                "Not merged: merging {from} into {into} conflicts in {}; nothing was changed.",
                plural(files.len(), "file", "files")
            );
            for (file, how) in files {
                out.push_str(&format!("\n{}: {how}", mount.join_rel(&file)));
            }
            out
        }
        RepoError::SwitchConflicts { name, files } => format!(
            "Not switched: what this session staged in {} conflicts with the branch {name}; the working copy stays where it was and the change stays staged.",
            files.join(", ")
        ),
        RepoError::NoBranch(branch) => format!("No such branch: {branch} in the repository mounted at {mount}."),
        RepoError::BranchExists(branch) => {
            format!("Already exists: the branch {branch} in the repository mounted at {mount}.")
        }
        RepoError::TagExists(tag) => {
            format!("Already exists: the tag {tag} in the repository mounted at {mount}; a tag is never moved.")
        }
        RepoError::BadName { what, name } => format!("Invalid {what} name: {name:?} is not a name git accepts."),
        RepoError::EmptyMessage => "Invalid arguments for commit: `message` must say what the change does.".into(),
        RepoError::Raced { branch } => format!(
            "Not committed: {branch} moved while the change was being made; the change stays staged. Try again."
        ),
        RepoError::Failed(why) => format!("The repository mounted at {mount} refused: {why}. Nothing staged was lost."),
    };
    ToolError::Message(text)
}

// --- The tools' definitions (see `spec`) -------------------------------------

pub struct Commit;

impl Tool for Commit {
    const NAME: &'static str = "commit";
    const TITLE: &'static str = "Commit staged changes";
    const TRAITS: Traits = Traits::GUARDED.action(Action::Other).adds_only();
    type Params = CommitParams;

    fn run(ctx: &mut Ctx<'_>, params: CommitParams) -> ToolResult {
        act(ctx, &params.path, RepoAction::Commit { message: params.message })
    }
}

pub struct Branch;

impl Tool for Branch {
    const NAME: &'static str = "branch";
    const TITLE: &'static str = "List, create or switch branches";
    const TRAITS: Traits = Traits::GUARDED.action(Action::Other).adds_only();
    type Params = BranchParams;

    fn run(ctx: &mut Ctx<'_>, params: BranchParams) -> ToolResult {
        let name = || {
            params.name.clone().filter(|n| !n.is_empty()).ok_or_else(|| {
                ToolError::Message("Invalid arguments for branch: `name` is required to create or switch.".into())
            })
        };
        let action = match params.action.unwrap_or(BranchAction::List) {
            BranchAction::List => RepoAction::Branches,
            BranchAction::Create => RepoAction::CreateBranch { name: name()?, from: params.from.clone() },
            BranchAction::Switch => RepoAction::Switch { name: name()? },
        };
        act(ctx, &params.path, action)
    }
}

pub struct Merge;

impl Tool for Merge {
    const NAME: &'static str = "merge";
    const TITLE: &'static str = "Merge a branch";
    const TRAITS: Traits = Traits::GUARDED.action(Action::Other).adds_only();
    type Params = MergeParams;

    fn run(ctx: &mut Ctx<'_>, params: MergeParams) -> ToolResult {
        act(ctx, &params.path, RepoAction::Merge { branch: params.branch, message: params.message })
    }
}

pub struct GitTag;

impl Tool for GitTag {
    const NAME: &'static str = "git_tag";
    const TITLE: &'static str = "Tag a commit";
    const TRAITS: Traits = Traits::GUARDED.action(Action::Other).adds_only();
    type Params = GitTagParams;

    fn run(ctx: &mut Ctx<'_>, params: GitTagParams) -> ToolResult {
        act(ctx, &params.path, RepoAction::Tag { name: params.name, message: params.message })
    }
}

/// pr's unavailable text: what its requirement is, and that it is not met.
pub const PR_UNAVAILABLE: &str = "pr is unavailable: it needs a forge (the server a repository is hosted on), and none is configured for this ctxfs. Nothing was sent; use branch, commit and merge in the mounted repository instead.";
/// release's unavailable text.
pub const RELEASE_UNAVAILABLE: &str = "release is unavailable: it needs a forge (the server a repository is hosted on), and none is configured for this ctxfs. Nothing was published; use git_tag to mark the version instead.";

pub struct Pr;

impl Tool for Pr {
    const NAME: &'static str = "pr";
    const TITLE: &'static str = "Open a pull request (needs a forge)";
    const TRAITS: Traits = Traits::GUARDED.reads().quick().action(Action::Other);
    type Params = PrParams;

    fn run(_ctx: &mut Ctx<'_>, _params: PrParams) -> ToolResult {
        Err(ToolError::Message(PR_UNAVAILABLE.into()))
    }
}

pub struct Release;

impl Tool for Release {
    const NAME: &'static str = "release";
    const TITLE: &'static str = "Publish a release (needs a forge)";
    const TRAITS: Traits = Traits::GUARDED.reads().quick().action(Action::Other);
    type Params = ReleaseParams;

    fn run(_ctx: &mut Ctx<'_>, _params: ReleaseParams) -> ToolResult {
        Err(ToolError::Message(RELEASE_UNAVAILABLE.into()))
    }
}
