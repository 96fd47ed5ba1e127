//! The shapes of ctxfs's own LSP methods (`ctxfs/…`) and of
//! `initializationOptions`, with their JSON Schemas.
//!
//! `schemas/protocol/*.json` is generated from these types (one file per
//! method, with `params` and `result`); a test fails when it is stale
//! (`CTXFS_BLESS=1 cargo test --lib lsp::protocol` writes it).
//! `docs/protocol.md` explains them.

use crate::engine::{ToolAnswer, ToolInfo};
use crate::gate::{Approval, ApprovalRequest, GrantInfo, Mode};
use crate::instructions::{Chain, Origin};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// `initializationOptions` of `initialize`: what `ctxfs mcp` takes as flags.
/// Every field is optional; they override the `ctxfs lsp` command line, which
/// overrides the workspace folders.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InitializationOptions {
    /// A directory presented as `/`, with grants and floors from `view` (tree posture).
    pub tree: Option<PathBuf>,
    /// The view file (grants and floors) for `tree`.
    pub view: Option<PathBuf>,
    /// The project root on the machine's own paths: the boundary, writable (device posture).
    pub root: Option<PathBuf>,
    /// The start directory, as a path of the session's world. Default: the boundary
    /// (with several workspace folders: the first folder).
    pub start: Option<String>,
    /// Where sessions, results and the trash live. Default: the platform's data directory.
    pub data: Option<PathBuf>,
    /// The user's config directory (global AGENTS.md, `skills/`, `config.json`).
    /// Default: the platform's config directory.
    pub config: Option<PathBuf>,
    /// What the agent's next model request carries: `resend` (every earlier result) or `fresh` (none).
    pub host: Option<HostName>,
    /// How long a write to an open document waits for the editor to answer
    /// `workspace/applyEdit`, in milliseconds. Default 10000.
    pub edit_timeout_ms: Option<u64>,
    /// grep, glob and search calls still running after this many milliseconds
    /// report `$/progress`. Default 200; 0 for every such call.
    pub progress_after_ms: Option<u64>,
    /// The permission mode sessions start in. Default: `--mode`, else `ask`.
    pub mode: Option<ModeName>,
    /// How long an approval prompt (`window/showMessageRequest`) waits for the
    /// user before the change is refused, in seconds (above 0). Default:
    /// `--approval-timeout`, else 120.
    pub approval_timeout: Option<f64>,
    /// The embedder search ranks meaning with, as `--embedder`: `static`,
    /// `minilm`, `none`, or an `http://HOST:PORT[/path]` embedding server
    /// (which is sent the text of the files it embeds). Default: `--embedder`,
    /// else `"embedder"` in config.json, else `static`.
    pub embedder: Option<String>,
    /// The model an embedding server is asked for, as `--embedder-model`.
    /// Default: `--embedder-model`, else `"embedder_model"` in config.json.
    pub embedder_model: Option<String>,
}

/// A permission mode, from strictest to freest: `read-only` (nothing
/// changes), `ask` (every change asks the user unless a rule or grant covers
/// it), `accept-edits` (changes run; removing or moving a path outside the
/// start directory asks), `trust` (no prompts; the view and deny rules still apply).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ModeName {
    ReadOnly,
    Ask,
    AcceptEdits,
    Trust,
}

impl From<ModeName> for Mode {
    fn from(mode: ModeName) -> Mode {
        match mode {
            ModeName::ReadOnly => Mode::ReadOnly,
            ModeName::Ask => Mode::Ask,
            ModeName::AcceptEdits => Mode::AcceptEdits,
            ModeName::Trust => Mode::Trust,
        }
    }
}

impl From<Mode> for ModeName {
    fn from(mode: Mode) -> ModeName {
        match mode {
            Mode::ReadOnly => ModeName::ReadOnly,
            Mode::Ask => ModeName::Ask,
            Mode::AcceptEdits => ModeName::AcceptEdits,
            Mode::Trust => ModeName::Trust,
        }
    }
}

/// The host kind, as `ctxfs mcp --host` takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum HostName {
    Resend,
    Fresh,
}

/// `ctxfs/tools` takes no params.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ToolsResult {
    pub tools: Vec<Tool>,
}

/// A tool the model can call.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Tool {
    pub name: String,
    /// What the model reads about it.
    pub description: String,
    /// JSON Schema of its arguments.
    pub input_schema: serde_json::Value,
}

impl From<ToolInfo> for Tool {
    fn from(info: ToolInfo) -> Tool {
        Tool { name: info.name, description: info.description, input_schema: info.input_schema }
    }
}

/// `ctxfs/openSession`: opens a session, or reopens an earlier one by id.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OpenSessionParams {
    /// The id of an earlier session to reopen (also after a restart): its
    /// results stay recallable and its ids go on.
    pub resume: Option<String>,
    /// The agent's name, recorded with files it creates. Default: the
    /// editor's `clientInfo.name`.
    pub client_name: Option<String>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OpenSessionResult {
    /// The session's id, for every other method.
    pub session: String,
    /// Whether `resume` reopened an earlier session.
    pub resumed: bool,
    /// What the model is told at the start, as `ctxfs mcp` tells it: the
    /// start directory, the paths open to the session (the view) with what
    /// it may do there, and the instruction chain, as one text.
    pub instructions: String,
    /// The instruction chain, for rendering.
    pub chain: InstructionChain,
}

/// The instruction files (AGENTS.md, CLAUDE.md) the model follows, outermost first.
#[derive(Debug, Clone, Default, Serialize, JsonSchema)]
pub struct InstructionChain {
    pub files: Vec<InstructionFile>,
    /// Sentences about files found but not loaded (binary, too large).
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct InstructionFile {
    /// Its path relative to the boundary, or a label for files outside it.
    pub path: String,
    pub text: String,
    /// `global`, `chain`, `configured` or `nearby`.
    pub origin: String,
    /// Its place in the chain, from 0.
    pub order: usize,
    /// The file's absolute path on this machine, for an editor to open it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
}

impl InstructionChain {
    /// The chain as data; `host` maps a path of the session's world to the machine's.
    pub fn new(chain: Chain, host: impl Fn(&crate::paths::VPath) -> Option<PathBuf>) -> InstructionChain {
        InstructionChain {
            files: chain
                .files
                .into_iter()
                .map(|f| InstructionFile {
                    file: match &f.location {
                        crate::instructions::Location::InView(path) => host(path),
                        crate::instructions::Location::Host(path) => Some(path.clone()),
                        crate::instructions::Location::Unknown => None,
                    }
                    .map(|p| p.to_string_lossy().into_owned()),
                    path: f.path,
                    text: f.text,
                    origin: match f.origin {
                        Origin::Global => "global",
                        Origin::Chain => "chain",
                        Origin::Configured => "configured",
                        Origin::Nearby => "nearby",
                    }
                    .into(),
                    order: f.order,
                })
                .collect(),
            notes: chain.notes,
        }
    }
}

/// A progress token, as LSP's `workDoneToken`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum Token {
    Number(i32),
    String(String),
}

/// `ctxfs/call`: runs one tool call in a session. Calls of a session run
/// one at a time, in the order they arrived.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CallParams {
    /// The session's id, from `ctxfs/openSession`.
    pub session: String,
    /// The tool's name, as `ctxfs/tools` lists it.
    pub tool: String,
    /// The tool's arguments. Default `{}`.
    pub args: Option<serde_json::Map<String, serde_json::Value>>,
    /// A token of the client's for `$/progress` of this call.
    pub work_done_token: Option<Token>,
}

/// The answer to a tool call (and to `ctxfs/recall`).
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CallResult {
    /// The result's id, such as `#0001`.
    pub id: String,
    /// What the model sees, starting with the bracket.
    pub text: String,
    /// True when the tool refused or failed: the text says why, for the model.
    pub is_error: bool,
    /// Facts about the result for rendering; the model reads `text` only.
    pub facts: CallFacts,
}

pub use crate::wire::CallFacts;

impl From<ToolAnswer> for CallResult {
    fn from(a: ToolAnswer) -> CallResult {
        CallResult { id: a.id, text: a.text, is_error: a.is_error, facts: a.facts.into() }
    }
}

/// `ctxfs/newRequest`: the agent starts building a new model request.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NewRequestParams {
    /// The session's id, from `ctxfs/openSession`.
    pub session: String,
    /// Whether the request resends the earlier results (then stubs may point at them).
    pub carries_earlier: bool,
}

/// `ctxfs/compact`: the agent compacts its context.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CompactParams {
    /// The session's id, from `ctxfs/openSession`.
    pub session: String,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct CompactResult {
    /// The table of files read, to put in the compacted context.
    pub text: String,
}

/// `ctxfs/rewind`: takes the results after `to` out of the history.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RewindParams {
    /// The session's id, from `ctxfs/openSession`.
    pub session: String,
    /// The last result id to keep, such as `#0003`.
    pub to: String,
}

/// `ctxfs/recall`: shows an earlier result in full, or a window of its lines.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RecallParams {
    /// The session's id, from `ctxfs/openSession`.
    pub session: String,
    /// The result's id, with or without `#`.
    pub id: String,
    /// First line to show, counting from 1.
    pub offset: Option<u64>,
    /// Number of lines to show: at most 2000, the default.
    pub limit: Option<u64>,
}

/// `ctxfs/setMode`: changes a session's permission mode, at once: for its
/// calls that have not started yet (also those already queued). A call
/// waiting for the user's answer keeps the prompt it showed.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SetModeParams {
    /// The session's id, from `ctxfs/openSession`.
    pub session: String,
    pub mode: ModeName,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SetModeResult {
    /// The session's mode now.
    pub mode: ModeName,
    /// The mode before.
    pub previous: ModeName,
    /// The line the model's instructions carry about changes in this mode
    /// (none for `trust`), for the agent to tell its model.
    pub instruction: Option<String>,
}

/// `ctxfs/grants`: lists a session's grants, after revoking some if asked.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GrantsParams {
    /// The session's id, from `ctxfs/openSession`.
    pub session: String,
    /// A grant's target to revoke (such as `notes/*`), from the session and
    /// from the remembered ones; `*` revokes them all.
    pub revoke: Option<String>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GrantsResult {
    /// The grants in force: the session's first, then the project's remembered ones.
    pub grants: Vec<GrantEntry>,
    /// How many grants `revoke` took away (present when it was given).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revoked: Option<usize>,
}

/// A grant: paths the session may change without asking.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct GrantEntry {
    /// A workspace-relative path pattern: `notes/todo.md`, `notes/*`.
    pub target: String,
    /// `session` (until the session ends) or `always` (remembered in grants.json).
    pub scope: String,
}

impl From<GrantInfo> for GrantEntry {
    fn from(g: GrantInfo) -> GrantEntry {
        GrantEntry { target: g.target, scope: g.scope.to_string() }
    }
}

/// `ctxfs/results`: the session's results, newest first, for an editor to list.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResultsParams {
    /// The session's id, from `ctxfs/openSession`.
    pub session: String,
    /// How many results at most. Default 200.
    pub limit: Option<u64>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ResultsResult {
    /// Newest first.
    pub results: Vec<ResultItem>,
}

/// One stored result, as listed.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResultItem {
    /// Its id, such as `#000c`.
    pub id: String,
    pub tool: String,
    /// The absolute path the result is about, when one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Lines of the full stored result.
    pub lines: usize,
    /// Bytes of the full stored result.
    pub size: usize,
    /// The model was shown a stub (an unchanged re-read, the same result again).
    pub stub: bool,
    /// The model was shown the head and tail only; recall shows the rest.
    pub capped: bool,
    pub is_error: bool,
    /// The first line the model saw (its bracket).
    pub title: String,
}

impl From<crate::hygiene::ResultEntry> for ResultItem {
    fn from(e: crate::hygiene::ResultEntry) -> ResultItem {
        ResultItem {
            id: crate::hygiene::format::id_text(e.id),
            tool: e.meta.tool,
            path: e.meta.path,
            lines: e.lines,
            size: e.size,
            stub: e.meta.stub,
            capped: e.meta.capped,
            is_error: e.meta.is_error,
            title: e.meta.title,
        }
    }
}

/// `ctxfs/resultText`: a stored result's full text for the user to read,
/// without recording a new result (unlike `ctxfs/recall`, which is the model's).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResultTextParams {
    /// The session's id, from `ctxfs/openSession`.
    pub session: String,
    /// The result's id, with or without `#`.
    pub id: String,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ResultTextResult {
    /// The id, as `#000c`.
    pub id: String,
    /// The full stored result: what follows its bracket, uncapped.
    pub text: String,
}

/// `ctxfs/changes`: the files the session changed, newest first.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChangesParams {
    /// The session's id, from `ctxfs/openSession`.
    pub session: String,
    /// How many changes at most. Default 200.
    pub limit: Option<u64>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ChangesResult {
    /// Newest first; the files of one result in the result's order.
    pub changes: Vec<ChangeItem>,
}

/// What happened to a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ChangeKindName {
    Created,
    Modified,
    Deleted,
    Moved,
}

/// One file one result changed.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ChangeItem {
    /// The result that made the change, such as `#000c`.
    pub id: String,
    pub tool: String,
    /// The file's absolute path (after a move: where it went).
    pub path: String,
    pub kind: ChangeKindName,
    /// Where a moved file was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// The unified diff of the change (empty for a move of a directory).
    pub diff: String,
}

impl From<(crate::hygiene::ChangeEntry, String)> for ChangeItem {
    fn from((entry, diff): (crate::hygiene::ChangeEntry, String)) -> ChangeItem {
        use crate::hygiene::ChangeKind;
        ChangeItem {
            id: crate::hygiene::format::id_text(entry.id),
            tool: entry.tool,
            path: entry.change.path,
            kind: match entry.change.kind {
                ChangeKind::Created => ChangeKindName::Created,
                ChangeKind::Modified => ChangeKindName::Modified,
                ChangeKind::Deleted => ChangeKindName::Deleted,
                ChangeKind::Moved => ChangeKindName::Moved,
            },
            from: entry.change.from,
            diff,
        }
    }
}

/// `ctxfs/changeText`: a changed file's whole text before and after one change.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChangeTextParams {
    /// The session's id, from `ctxfs/openSession`.
    pub session: String,
    /// The result that made the change, such as `#000c`.
    pub id: String,
    /// The file's path as `ctxfs/changes` lists it.
    pub path: String,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ChangeTextResult {
    pub path: String,
    /// The text before the change; `null` when the file did not exist.
    pub before: Option<String>,
    /// The text after the change; `null` when the file no longer exists.
    pub after: Option<String>,
}

/// `ctxfs/approvalRequest` (a notification to the client): what the
/// `window/showMessageRequest` that follows it asks, as data, so an editor
/// extension can show the change (its diff) its own way. The answer is still
/// given to the prompt.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRequestParams {
    /// The session whose call asks.
    pub session: String,
    /// The tool called.
    pub tool: String,
    /// The mode that made it ask.
    pub mode: ModeName,
    /// The workspace-relative paths the answer is about (a move: its destination).
    pub paths: Vec<String>,
    /// One line: `move notes/a.md to archive/a.md`.
    pub description: String,
    /// The unified diff of the change, or a summary of it.
    pub summary: String,
    /// The answers offered, in the prompt's order.
    pub options: Vec<ApprovalChoice>,
    /// Why it asks, and problems the user should know (a broken rules file).
    pub notes: Vec<String>,
    /// The prompt's text, as `window/showMessageRequest` carries it.
    pub message: String,
    /// Each changed file's whole text before and after, for a diff view.
    #[serde(default)]
    pub files: Vec<ApprovalFile>,
    /// How long the prompt waits for an answer before the change is refused.
    pub timeout_ms: u64,
}

/// A changed file's texts in an approval request.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ApprovalFile {
    /// The file's absolute path.
    pub path: String,
    /// The text before; `null` for a new file; absent when over 2 MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<Option<String>>,
    /// The text after; `null` for a removal; absent when over 2 MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<Option<String>>,
}

/// One answer a prompt offers.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ApprovalChoice {
    pub approval: ApprovalName,
    /// The prompt's button: `Allow once`, `Always allow notes/*`, …
    pub label: String,
    /// The grant targets an "always" answer remembers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<String>,
}

/// The answers a prompt may offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalName {
    /// This change only.
    AllowOnce,
    /// These paths, for the rest of the session.
    AllowSession,
    /// These files, from now on.
    AlwaysFile,
    /// The files of their directories (`notes/*`), from now on.
    AlwaysDirectory,
    Deny,
}

impl ApprovalName {
    pub fn of(approval: &Approval) -> Option<ApprovalName> {
        Some(match approval {
            Approval::AllowOnce => ApprovalName::AllowOnce,
            Approval::AllowSession => ApprovalName::AllowSession,
            Approval::AlwaysFile => ApprovalName::AlwaysFile,
            Approval::AlwaysDirectory => ApprovalName::AlwaysDirectory,
            Approval::Deny => ApprovalName::Deny,
            Approval::Dismissed { .. } => return None,
        })
    }
}

impl ApprovalRequestParams {
    pub fn new(session: &str, request: &ApprovalRequest) -> ApprovalRequestParams {
        // Every field named, so a new one in the gate's request cannot be left behind.
        let ApprovalRequest { tool, mode, paths, description, summary, options, notes, files, timeout } = request;
        ApprovalRequestParams {
            session: session.to_string(),
            tool: tool.clone(),
            mode: (*mode).into(),
            paths: paths.clone(),
            description: description.clone(),
            summary: summary.clone(),
            options: options
                .iter()
                .filter_map(|o| {
                    ApprovalName::of(&o.approval).map(|approval| ApprovalChoice {
                        approval,
                        label: o.label.clone(),
                        targets: o.targets.clone(),
                    })
                })
                .collect(),
            notes: notes.clone(),
            message: request.message(),
            files: files
                .iter()
                .map(|f| ApprovalFile { path: f.path.clone(), before: f.before.clone(), after: f.after.clone() })
                .collect(),
            timeout_ms: timeout.as_millis().try_into().unwrap_or(u64::MAX),
        }
    }
}

/// The `ctxfs/approvalRequest` notification, for `Client::send_notification`.
pub enum ApprovalRequestNotification {}

impl tower_lsp_server::ls_types::notification::Notification for ApprovalRequestNotification {
    type Params = ApprovalRequestParams;
    const METHOD: &'static str = "ctxfs/approvalRequest";
}

/// The notifications ctxfs sends to the client, each with the schema of its params.
pub fn notifications() -> Vec<(&'static str, schemars::Schema)> {
    vec![("ctxfs/approvalRequest", schemars::schema_for!(ApprovalRequestParams))]
}

/// The methods, each with the schema of its params and result (`None`: absent / null).
pub fn methods() -> Vec<(&'static str, Option<schemars::Schema>, Option<schemars::Schema>)> {
    use schemars::schema_for;
    vec![
        ("ctxfs/tools", None, Some(schema_for!(ToolsResult))),
        ("ctxfs/openSession", Some(schema_for!(OpenSessionParams)), Some(schema_for!(OpenSessionResult))),
        ("ctxfs/call", Some(schema_for!(CallParams)), Some(schema_for!(CallResult))),
        ("ctxfs/newRequest", Some(schema_for!(NewRequestParams)), None),
        ("ctxfs/compact", Some(schema_for!(CompactParams)), Some(schema_for!(CompactResult))),
        ("ctxfs/rewind", Some(schema_for!(RewindParams)), None),
        ("ctxfs/recall", Some(schema_for!(RecallParams)), Some(schema_for!(CallResult))),
        ("ctxfs/setMode", Some(schema_for!(SetModeParams)), Some(schema_for!(SetModeResult))),
        ("ctxfs/grants", Some(schema_for!(GrantsParams)), Some(schema_for!(GrantsResult))),
        ("ctxfs/results", Some(schema_for!(ResultsParams)), Some(schema_for!(ResultsResult))),
        ("ctxfs/resultText", Some(schema_for!(ResultTextParams)), Some(schema_for!(ResultTextResult))),
        ("ctxfs/changes", Some(schema_for!(ChangesParams)), Some(schema_for!(ChangesResult))),
        ("ctxfs/changeText", Some(schema_for!(ChangeTextParams)), Some(schema_for!(ChangeTextResult))),
    ]
}

/// Every file of `schemas/protocol/`, by name, as it should read.
pub fn schema_files() -> Vec<(String, String)> {
    let null = serde_json::json!({"type": "null"});
    let mut out = Vec::new();
    for (method, params, result) in methods() {
        let value = serde_json::json!({
            "method": method,
            "params": params.map(|s| s.to_value()).unwrap_or_else(|| null.clone()),
            "result": result.map(|s| s.to_value()).unwrap_or_else(|| null.clone()),
        });
        let name = method.trim_start_matches("ctxfs/");
        out.push((format!("{name}.json"), serde_json::to_string_pretty(&value).expect("schemas serialise") + "\n"));
    }
    for (method, params) in notifications() {
        let value = serde_json::json!({"notification": method, "params": params.to_value()});
        let name = method.trim_start_matches("ctxfs/");
        out.push((format!("{name}.json"), serde_json::to_string_pretty(&value).expect("schemas serialise") + "\n"));
    }
    let options = schemars::schema_for!(InitializationOptions).to_value();
    out.push((
        "initializationOptions.json".into(),
        serde_json::to_string_pretty(&options).expect("schemas serialise") + "\n",
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// `schemas/protocol/*.json` must be what the types generate.
    /// `CTXFS_BLESS=1 cargo test --lib lsp::protocol` rewrites them.
    #[test]
    fn protocol_schemas_are_current() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas/protocol");
        let bless = std::env::var_os("CTXFS_BLESS").is_some();
        let files = schema_files();
        let mut stale = Vec::new();
        for (name, text) in &files {
            let path = dir.join(name);
            if bless {
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(&path, text).unwrap();
            } else if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
                stale.push(name.clone());
            }
        }
        let on_disk: Vec<String> = std::fs::read_dir(&dir)
            .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        for name in on_disk {
            if !files.iter().any(|(n, _)| *n == name) {
                stale.push(format!("{name} (no such method)"));
            }
        }
        assert!(
            stale.is_empty(),
            "stale protocol schemas: {stale:?}; regenerate with CTXFS_BLESS=1 cargo test --lib lsp::protocol"
        );
    }

    #[test]
    fn the_approval_notification_carries_the_whole_request() {
        // A new field in gate::ApprovalRequest must be carried here too.
        use crate::gate::ApprovalOption;
        let request = ApprovalRequest {
            tool: "write".into(),
            mode: Mode::AcceptEdits,
            paths: vec!["notes/a.md".into()],
            description: "create notes/a.md (1 line)".into(),
            summary: "+x".into(),
            options: vec![
                ApprovalOption { approval: Approval::AllowOnce, label: "Allow once".into(), targets: vec![] },
                ApprovalOption {
                    approval: Approval::AlwaysDirectory,
                    label: "Always allow notes/*".into(),
                    targets: vec!["notes/*".into()],
                },
                ApprovalOption { approval: Approval::Deny, label: "Deny".into(), targets: vec![] },
            ],
            notes: vec!["a note".into()],
            files: vec![crate::gate::plan::FileTexts {
                path: "/ws/notes/a.md".into(),
                before: Some(None),
                after: Some(Some("x\n".into())),
            }],
            timeout: std::time::Duration::from_millis(1500),
        };
        let ours = serde_json::to_value(ApprovalRequestParams::new("s-1", &request)).unwrap();
        assert_eq!(ours["tool"], "write");
        assert_eq!(ours["mode"], "accept-edits");
        assert_eq!(ours["paths"], serde_json::json!(["notes/a.md"]));
        assert_eq!(ours["description"], request.description);
        assert_eq!(ours["summary"], request.summary);
        assert_eq!(ours["notes"], serde_json::json!(["a note"]));
        assert_eq!(ours["options"].as_array().map(Vec::len), Some(request.options.len()));
        assert_eq!(ours["session"], "s-1");
        assert_eq!(ours["timeoutMs"], 1500);
        assert_eq!(ours["message"], request.message());
        assert_eq!(ours["files"], serde_json::json!([{"path": "/ws/notes/a.md", "before": null, "after": "x\n"}]));
        // It reads back, as a client would.
        let _: ApprovalRequestParams = serde_json::from_value(ours).unwrap();
    }

    #[test]
    fn mode_names_are_the_gate_modes() {
        for mode in [Mode::ReadOnly, Mode::Ask, Mode::AcceptEdits, Mode::Trust] {
            let name = ModeName::from(mode);
            assert_eq!(serde_json::to_value(name).unwrap(), mode.as_str());
            assert_eq!(Mode::from(name), mode);
        }
    }
}
