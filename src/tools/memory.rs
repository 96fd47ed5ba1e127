//! memory: the tool over the memory records (`crate::memory`): its arguments (whose doc
//! comments are what the model reads), its answers, and what a change would do, for the gate.
//!
//! Not the store, the budgets or the ranking (those are `crate::memory`'s), and never a file.

use super::spec::{Action, Effect, Tool, Traits};
use super::{Ctx, Outcome, RecordChange, ToolResult};
use crate::access::ToolError;
use crate::memory::{self, thousands, Applied, Change, Memory, Refused, Scope};
use schemars::JsonSchema;
use serde::Deserialize;

/// Keep short facts across sessions, as records: the user's preferences, this project's
/// conventions, what was learned the hard way (not what the files or the history already say).
/// `add` keeps a fact and answers its id (such as `m12`); `list` shows the records; `search`
/// finds them by words and meaning; `replace` rewrites a record by id; `remove` forgets one. Each
/// record is one fact of at most 1,000 characters; each scope holds at most 10,000 characters.
/// Records are shown at the start of every session. Changes may need the user's approval.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryParams {
    /// `add`, `list`, `search`, `replace` or `remove`.
    pub action: MemoryAction,
    /// Whose memory: `project` (this project only; the default for add) or `user` (the user's,
    /// shared by every project: preferences that hold everywhere). list and search look at both
    /// unless it is given.
    pub scope: Option<MemoryScope>,
    /// add: the fact to keep; replace: the record's whole new text. At most 1,000 characters.
    pub text: Option<String>,
    /// replace, remove: the record's id, such as `m12`.
    pub id: Option<String>,
    /// search: what to look for, in words or by meaning.
    pub query: Option<String>,
    /// search: the most records to answer. Default 10.
    pub limit: Option<u32>,
}

/// What the memory tool does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum MemoryAction {
    Add,
    List,
    Search,
    Replace,
    Remove,
}

/// Whose memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum MemoryScope {
    Project,
    User,
}

impl MemoryScope {
    fn scope(self) -> Scope {
        match self {
            MemoryScope::Project => Scope::Project,
            MemoryScope::User => Scope::User,
        }
    }
}

const DEFAULT_LIMIT: u32 = 10;

fn needs(action: &str, what: &str) -> ToolError {
    ToolError::Message(format!("Invalid arguments for memory: {action} needs {what}."))
}

fn store<'a>(ctx: &Ctx<'a>) -> Result<&'a Memory, ToolError> {
    ctx.memory.ok_or_else(|| ToolError::Message("Memory is not available in this session.".into()))
}

fn failed(e: anyhow::Error) -> ToolError {
    ToolError::Message(format!("Memory could not be read or written: {e:#}. Nothing was changed."))
}

fn refused(r: Refused) -> ToolError {
    ToolError::Message(r.0)
}

fn id_of(params: &MemoryParams, action: &str) -> Result<u64, ToolError> {
    let Some(text) = params.id.as_deref() else { return Err(needs(action, "`id`, the record's id such as `m12`")) };
    memory::parse_id(text).ok_or_else(|| {
        ToolError::Message(format!("Invalid arguments for memory: `id` is a record's id such as `m12`, not {text:?}."))
    })
}

fn text_of<'a>(params: &'a MemoryParams, action: &str, what: &str) -> Result<&'a str, ToolError> {
    params.text.as_deref().ok_or_else(|| needs(action, what))
}

/// What a change call would do, checked against the records as they are; `None` for a look-up
/// or an add of a fact already kept.
fn plan(ctx: &Ctx<'_>, params: &MemoryParams) -> Result<Option<Change>, ToolError> {
    match params.action {
        MemoryAction::List | MemoryAction::Search => Ok(None),
        MemoryAction::Add => {
            let text = text_of(params, "add", "`text`, the fact to keep")?;
            let scope = params.scope.map_or(Scope::Project, MemoryScope::scope);
            store(ctx)?.plan_add(scope, text).map_err(failed)?.map_err(refused)
        }
        MemoryAction::Replace => {
            let id = id_of(params, "replace")?;
            let text = text_of(params, "replace", "`text`, the record's whole new text")?;
            store(ctx)?.plan_replace(id, text).map_err(failed)?.map(Some).map_err(refused)
        }
        MemoryAction::Remove => {
            let id = id_of(params, "remove")?;
            store(ctx)?.plan_remove(id).map_err(failed)?.map(Some).map_err(refused)
        }
    }
}

/// The used part of a scope's budget: `1,234 of 10,000 characters used`.
fn used(applied: &Applied) -> String {
    format!("{} of {} characters used", thousands(applied.used), thousands(memory::SCOPE_CHARS))
}

pub fn run(ctx: &mut Ctx<'_>, params: MemoryParams) -> ToolResult {
    let memory = store(ctx)?;
    let body = match params.action {
        MemoryAction::List => list(memory, params.scope)?,
        MemoryAction::Search => search(ctx, memory, &params)?,
        MemoryAction::Add | MemoryAction::Replace | MemoryAction::Remove => {
            let Some(change) = plan(ctx, &params)? else {
                // An add of a fact the scope already holds.
                let scope = params.scope.map_or(Scope::Project, MemoryScope::scope);
                let text = params.text.as_deref().unwrap_or_default();
                return Ok(Outcome::text(match memory.kept(scope, text).map_err(failed)? {
                    Some(record) => {
                        format!("Already remembered as {} in {}; nothing changed.\n", record.name(), scope.title())
                    }
                    None => "Nothing changed.\n".to_string(),
                }));
            };
            let applied = memory.apply(&change).map_err(failed)?.map_err(refused)?;
            let record = &applied.record;
            let scope = record.scope.title();
            match change {
                Change::Add { .. } => format!(
                    "Remembered as {} in {scope} ({} characters; {}).\n",
                    record.name(),
                    thousands(record.chars()),
                    used(&applied)
                ),
                Change::Replace { .. } => format!(
                    "Replaced {} in {scope} ({}).\nWas: {}\nNow: {}\n",
                    record.name(),
                    used(&applied),
                    applied.before.as_deref().unwrap_or_default(),
                    record.text
                ),
                Change::Remove { .. } => format!(
                    "Removed {} from {scope} ({}); its id is not given again.\nIt said: {}\n",
                    record.name(),
                    used(&applied),
                    record.text
                ),
            }
        }
    };
    Ok(Outcome::text(body))
}

/// One record as a line of a listing: `- m12: text`, later lines indented.
fn line(record: &memory::Record, with_scope: bool) -> String {
    let scope = if with_scope { format!(" ({})", record.scope.as_str()) } else { String::new() };
    let mut lines = record.text.lines();
    let mut out = format!("- {}{scope}: {}\n", record.name(), lines.next().unwrap_or_default());
    for more in lines {
        out.push_str(&format!("  {more}\n"));
    }
    out
}

fn list(memory: &Memory, scope: Option<MemoryScope>) -> Result<String, ToolError> {
    let scopes = match scope {
        Some(one) => vec![one.scope()],
        None => Scope::BOTH.to_vec(),
    };
    let mut out = String::new();
    for scope in scopes {
        let listing = memory.list(scope).map_err(failed)?;
        let title = match scope {
            Scope::Project => "Project memory",
            Scope::User => "User memory",
        };
        let budget = format!("{} of {} characters", thousands(listing.used), thousands(memory::SCOPE_CHARS));
        match listing.records.len() {
            0 => out.push_str(&format!("{title}: no records ({budget}).\n")),
            1 => out.push_str(&format!("{title}: 1 record, {budget}.\n")),
            n => out.push_str(&format!("{title}: {n} records, {budget}.\n")),
        }
        for record in &listing.records {
            out.push_str(&line(record, false));
        }
    }
    Ok(out)
}

fn search(ctx: &Ctx<'_>, memory: &Memory, params: &MemoryParams) -> Result<String, ToolError> {
    let Some(query) = params.query.as_deref() else { return Err(needs("search", "`query`, what to look for")) };
    if crate::index::terms::query_terms(query).is_empty() {
        return Err(ToolError::Message("The query has no words; describe what you are looking for.".into()));
    }
    let scopes = match params.scope {
        Some(one) => vec![one.scope()],
        None => Scope::BOTH.to_vec(),
    };
    let limit = params.limit.unwrap_or(DEFAULT_LIMIT).clamp(1, 100) as usize;
    let vectorizer = ctx.index.and_then(|index| index.vectorizer());
    let found = memory.search(&scopes, query, limit, vectorizer).map_err(failed)?;
    if found.is_empty() {
        return Ok(format!("No memory records match {query:?}.\n"));
    }
    let mut out = match found.len() {
        1 => format!("1 memory record matches {query:?}:\n"),
        n => format!("{n} memory records match {query:?}, best first:\n"),
    };
    for record in &found {
        out.push_str(&line(record, true));
    }
    Ok(out)
}

/// The approval's words for a change, from the typed arguments and the record they name.
fn describe(change: &Change) -> RecordChange {
    let quoted = |text: &str| text.lines().map(|l| format!("  {l}\n")).collect::<String>();
    let scope = change.scope();
    let (description, summary) = match change {
        Change::Add { text, .. } => {
            (format!("add a record to {}", scope.title()), format!("+ new record:\n{}", quoted(text)))
        }
        Change::Replace { record, text } => (
            format!("replace {} in {}", record.name(), scope.title()),
            format!("- {} was:\n{}+ {} becomes:\n{}", record.name(), quoted(&record.text), record.name(), quoted(text)),
        ),
        Change::Remove { record } => (
            format!("remove {} from {}", record.name(), scope.title()),
            format!("- {} said:\n{}", record.name(), quoted(&record.text)),
        ),
    };
    RecordChange { scope: scope.as_str(), shared: scope == Scope::User, description, summary }
}

// --- The tool's definition (see `spec`) ---------------------------------------

pub struct MemoryTool;

impl Tool for MemoryTool {
    const NAME: &'static str = "memory";
    const TITLE: &'static str = "Keep facts across sessions";
    // Records, not files: a user watching sees neither an edit nor a read.
    const TRAITS: Traits = Traits::GUARDED.effect(Effect::ChangesRecords).action(Action::Other);
    type Params = MemoryParams;

    fn run(ctx: &mut Ctx<'_>, params: MemoryParams) -> ToolResult {
        run(ctx, params)
    }

    fn preview(ctx: &mut Ctx<'_>, params: &MemoryParams) -> Result<Option<RecordChange>, ToolError> {
        Ok(plan(ctx, params)?.as_ref().map(describe))
    }
}
