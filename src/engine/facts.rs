//! The facts editors render about a tool's outcome (paths, hashes, diffs); not what the model reads.

use super::api::{Facts, ToolAnswer};
use crate::hash::hex;
use crate::hygiene::Shown;
use crate::tools::{Change, FileChange, Outcome};

/// The answer to a call: what hygiene showed the model, with the facts of its outcome.
pub(crate) fn answer(shown: Shown, facts: Facts) -> ToolAnswer {
    ToolAnswer { id: shown.id, text: shown.text, is_error: shown.is_error, facts }
}

fn change_facts(change: &FileChange) -> Facts {
    let mut facts =
        Facts { path: Some(change.path.to_string()), sha: change.sha.as_ref().map(hex), ..Facts::default() };
    match &change.change {
        Change::Created { .. } => facts.created = true,
        Change::Deleted => facts.deleted = true,
        Change::Modified { diff } | Change::Moved { diff, .. } => facts.diff = Some(diff.clone()),
    }
    facts
}

/// What editors are told about an outcome: the path, the hash after the call, each change's diff.
pub(crate) fn facts_of(outcome: &Outcome) -> Facts {
    match outcome {
        Outcome::Read(read) => {
            Facts { path: Some(read.path.to_string()), sha: Some(hex(&read.sha)), ..Facts::default() }
        }
        Outcome::Changed(change) => change_facts(change),
        Outcome::Patch(changes) => Facts { files: changes.iter().map(change_facts).collect(), ..Facts::default() },
        Outcome::Text { path, .. } => Facts { path: path.as_ref().map(|p| p.to_string()), ..Facts::default() },
        Outcome::Moved { to, .. } => Facts { path: Some(to.to_string()), ..Facts::default() },
    }
}
