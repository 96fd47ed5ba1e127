//! The gate: whether a change the view allows may happen now — by the
//! session's mode, the user's rules, and the grants the user gave.
//!
//! Shared by every front door; the engine consults it in `Session::call`
//! for the change tools (write, edit, multiedit, apply_patch, mkdir, mv, rm,
//! skill_manage, and memory's add, replace and remove). Reads never reach it.
//!
//! Order of checks, and why the gate can only lower what the view allows:
//! 1. The call runs as a *dry run* (see `fence`): the view, confinement and
//!    the tool's own checks refuse exactly as without the gate, and nothing
//!    is changed. A refused call ends here, with the tool's own answer.
//! 2. The changes the dry run would make (by real path) are the call's
//!    subjects. Read-only mode refuses them; a deny rule covering any of
//!    them (or a move's source) refuses them; then the mode, allow rules and
//!    grants say whether they run or the user is asked.
//! 3. Asked, the front door's [`Approver`] answers within the timeout, or
//!    the call is refused. Nothing has changed until here.
//! 4. The call runs for real, fenced: a change the dry run did not show is
//!    refused as a race, so what was approved is what happens.
//!
//! A change to memory records is not a file's: the tool's own preview
//! (`Tool::preview`) checks it and says what it would do, and
//! [`Gate::run_records`] decides about it by the mode, the rules under the
//! `memory` key and grants of kind `memory` (both name scopes), then asks.
//!
//! Decisions are [`Decision`]s, never booleans. Grants and rules are
//! workspace-relative path patterns (see `pattern`); a grant of `*` covers
//! any path the view lets the session change, and nothing more.

pub mod cli;
pub mod fence;
pub mod pattern;
pub mod plan;
pub mod policy;

pub use plan::{Plan, Subject};
pub use policy::{Grant, GrantKind, Policy, Problem, Project};

use crate::access::{Access, ToolError};
use crate::tools::{Observed, RecordChange, ToolResult};
use fence::Fence;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a prompt waits for the user before the call is refused.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// The tools that change files: the ones the gate checks.
/// Whether the gate decides about calls of `tool`: those that change files
/// (by the tool table); an unknown tool is, to fail closed.
pub fn is_gated(tool: &str) -> bool {
    crate::tools::spec::find(tool).is_none_or(|t| t.gated())
}

/// A session's permission mode, from strictest to freest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Nothing changes.
    ReadOnly,
    /// Reads are free; every change asks unless a rule or grant covers it.
    #[default]
    Ask,
    /// Changes run; removing or moving a path outside the start directory asks.
    AcceptEdits,
    /// No prompts. The view, confinement and deny rules still apply.
    Trust,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::ReadOnly => "read-only",
            Mode::Ask => "ask",
            Mode::AcceptEdits => "accept-edits",
            Mode::Trust => "trust",
        }
    }

    /// The line the model's instructions carry about changes, if any, for
    /// a front door that can ask the user (`can_ask`) or not (an MCP client
    /// without elicitation: what would ask is refused, and the line says so).
    pub fn instruction(self, can_ask: bool) -> Option<&'static str> {
        match (self, can_ask) {
            (Mode::ReadOnly, _) => {
                Some("Changes: none. This session is read-only (mode read-only); every change is refused.")
            }
            (Mode::Ask, true) => Some(
                "Changes: the user approves each change before it is made (mode ask). A refused change says why; do not retry it unchanged.",
            ),
            (Mode::Ask, false) => Some(
                "Changes: this session asks the user before each change (mode ask), but this client shows no approval prompts, so a change is made only where an allow rule or a remembered grant covers it; any other is refused, and the refusal says how the user can allow it. Tell the user; do not retry a refused change unchanged.",
            ),
            (Mode::AcceptEdits, true) => Some(
                "Changes: they run without asking (mode accept-edits), except that removing or moving a path outside the start directory asks the user first.",
            ),
            (Mode::AcceptEdits, false) => Some(
                "Changes: they run without asking (mode accept-edits), except that removing or moving a path outside the start directory is refused: it would ask the user, and this client shows no approval prompts.",
            ),
            (Mode::Trust, _) => None,
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Mode {
    type Err = String;
    fn from_str(text: &str) -> Result<Mode, String> {
        match text {
            "read-only" => Ok(Mode::ReadOnly),
            "ask" => Ok(Mode::Ask),
            "accept-edits" => Ok(Mode::AcceptEdits),
            "trust" => Ok(Mode::Trust),
            other => Err(format!("{other:?} is not a mode; use read-only, ask, accept-edits or trust")),
        }
    }
}

/// A kind of change, as rules name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// write, edit, multiedit, mkdir, skill_manage; apply_patch's adds and updates.
    Write,
    /// rm; apply_patch's deletes.
    Remove,
    /// mv (checked against its destination); apply_patch's moves.
    Move,
    /// A change to memory records (memory's add, replace, remove), by scope.
    Memory,
    /// commit, merge, git_tag, branch create: a change of a mounted
    /// repository, checked against the mount point. Asked about in every
    /// mode but trust.
    Commit,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Write => "write",
            Kind::Remove => "remove",
            Kind::Move => "move",
            Kind::Memory => "memory",
            Kind::Commit => "commit",
        }
    }
}

/// What the gate decided about a call.
#[derive(Debug, Clone)]
pub enum Decision {
    Allow,
    /// Refused; `reason` is the sentence the model reads.
    Deny {
        reason: String,
    },
    Ask {
        request: ApprovalRequest,
    },
}

/// A user's answer to a prompt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Approval {
    AllowOnce,
    /// These paths, for the rest of the session.
    AllowSession,
    /// These files, from now on (remembered in grants.json).
    AlwaysFile,
    /// The files of their directories (`notes/*`), from now on.
    AlwaysDirectory,
    Deny,
    /// No answer was given (the prompt was dismissed, or could not be shown).
    Dismissed {
        why: String,
    },
}

impl Approval {
    /// The id of an offered answer (`allow_once`, …); none for `Dismissed`.
    pub fn id(&self) -> Option<&'static str> {
        match self {
            Approval::AllowOnce => Some("allow_once"),
            Approval::AllowSession => Some("allow_session"),
            Approval::AlwaysFile => Some("always_file"),
            Approval::AlwaysDirectory => Some("always_directory"),
            Approval::Deny => Some("deny"),
            Approval::Dismissed { .. } => None,
        }
    }

    pub fn from_id(id: &str) -> Option<Approval> {
        match id {
            "allow_once" => Some(Approval::AllowOnce),
            "allow_session" => Some(Approval::AllowSession),
            "always_file" => Some(Approval::AlwaysFile),
            "always_directory" => Some(Approval::AlwaysDirectory),
            "deny" => Some(Approval::Deny),
            _ => None,
        }
    }
}

/// One answer a prompt offers, with its label for the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalOption {
    pub approval: Approval,
    /// `Allow once`, `Always allow notes/*`, …
    pub label: String,
    /// The grant targets this answer would remember (the "always" answers).
    pub targets: Vec<String>,
}

/// What a prompt asks the user.
#[derive(Debug, Clone)]
pub struct ApprovalRequest {
    pub tool: String,
    pub mode: Mode,
    /// The workspace-relative paths the answer is about (a move: its destination).
    pub paths: Vec<String>,
    /// One line: `move notes/a.md to archive/a.md`.
    pub description: String,
    /// The unified diff of the change, or a summary of it.
    pub summary: String,
    /// The answers offered, in order: allow once, for this session, always
    /// this file, always its directory (when there is one), deny.
    pub options: Vec<ApprovalOption>,
    /// Why it asks, and problems the user should know (a broken rules file).
    pub notes: Vec<String>,
    /// Each changed file's whole text before and after, for an editor's diff view.
    pub files: Vec<plan::FileTexts>,
    /// How long the gate waits for the answer.
    pub timeout: Duration,
    /// For a change to memory: its scope (`project`, `user`), which the answers for the session
    /// and for always grant, in place of paths.
    pub records: Option<String>,
}

impl ApprovalRequest {
    /// The prompt's text: the description, the summary, the notes.
    pub fn message(&self) -> String {
        let mut text = format!("Allow ctxfs to {}?", self.description);
        if !self.summary.trim().is_empty() {
            text.push_str("\n\n");
            text.push_str(self.summary.trim_end());
        }
        for note in &self.notes {
            text.push_str("\n\nNote: ");
            text.push_str(note);
        }
        text
    }

    pub fn offers(&self, approval: &Approval) -> bool {
        self.options.iter().any(|o| o.approval == *approval)
    }
}

/// The front door's user, asked about a change. `ask` blocks until the user
/// answers; the gate stops waiting after `request.timeout` and refuses, so
/// an implementation should give up by then too.
pub trait Approver: Send + Sync {
    fn ask(&self, request: &ApprovalRequest) -> Approval;
}

/// A session grant or a remembered one, for listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantInfo {
    pub target: String,
    /// `session` or `always`.
    pub scope: &'static str,
}

struct State {
    mode: Mode,
    approver: Option<Arc<dyn Approver>>,
    timeout: Duration,
    /// Grants for this session only.
    session: Vec<Grant>,
}

/// One session's gate.
pub struct Gate {
    project: Project,
    state: Mutex<State>,
}

impl Gate {
    pub fn new(project: Project, mode: Mode, timeout: Duration) -> Gate {
        Gate { project, state: Mutex::new(State { mode, approver: None, timeout, session: Vec::new() }) }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn project(&self) -> &Project {
        &self.project
    }

    pub fn mode(&self) -> Mode {
        self.state().mode
    }

    pub fn set_mode(&self, mode: Mode) {
        self.state().mode = mode;
    }

    pub fn set_approver(&self, approver: Option<Arc<dyn Approver>>) {
        self.state().approver = approver;
    }

    pub fn set_timeout(&self, timeout: Duration) {
        self.state().timeout = timeout;
    }

    /// The session's grants, then the project's remembered ones.
    pub fn grants(&self) -> Vec<GrantInfo> {
        let mut out: Vec<GrantInfo> =
            self.state().session.iter().map(|g| GrantInfo { target: g.shown(), scope: "session" }).collect();
        out.extend(
            Policy::load(&self.project).grants.into_iter().map(|g| GrantInfo { target: g.shown(), scope: "always" }),
        );
        out
    }

    /// Revokes the session's and the project's grants of `target` (all when
    /// `None`); answers how many were revoked.
    pub fn revoke(&self, target: Option<&str>) -> Result<usize, String> {
        let mut count = {
            let mut state = self.state();
            let before = state.session.len();
            state.session.retain(|g| target.is_some_and(|t| g.shown() != t));
            before - state.session.len()
        };
        count += policy::revoke(&self.project, target)?.len();
        Ok(count)
    }

    /// Runs a gated call: `run` is the tool, called with the `Access` and
    /// observations to use — once as a dry run, and once for real if the
    /// gate lets it.
    pub fn run(
        &self,
        access: &Access,
        observed: &mut Observed,
        tool: &str,
        args: &serde_json::Value,
        run: &mut dyn FnMut(&Access, &mut Observed) -> ToolResult,
    ) -> ToolResult {
        let mode = self.mode();
        let policy = Policy::load(&self.project);
        if mode == Mode::Trust && policy.deny.is_empty() && !policy.rules_broken() {
            return run(access, observed);
        }
        let dry = Arc::new(Fence::dry_run(access.fs_arc()));
        let dry_access = Access::new(dry.clone(), access.view().clone(), access.start().clone());
        // The view and the tool refuse first, as they would without the gate.
        let preview = run(&dry_access, &mut observed.clone())?;
        let ops = dry.ops();
        let plan = Plan::new(tool, args, &ops, &preview, dry.inner().as_ref());
        match self.decide(mode, &policy, &plan, access) {
            Decision::Allow => {}
            Decision::Deny { reason } => return Err(ToolError::Message(reason)),
            Decision::Ask { request } => {
                let refusal = unaskable(&request, &plan, &policy, &self.project);
                self.ask(request, refusal)?
            }
        }
        let fenced =
            Access::new(Arc::new(Fence::enforce(access.fs_arc(), &ops)), access.view().clone(), access.start().clone());
        run(&fenced, observed)
    }

    /// Decides about a planned call, without asking anyone.
    pub fn decide(&self, mode: Mode, policy: &Policy, plan: &Plan, access: &Access) -> Decision {
        if plan.subjects.is_empty() {
            return Decision::Allow;
        }
        if mode == Mode::ReadOnly {
            return Decision::Deny {
                reason: format!(
                    "Not changed: this session is read-only (mode read-only), so it may not {}. Reading is still open; the user can start ctxfs with --mode ask to allow changes with approval.",
                    plan.description
                ),
            };
        }
        for subject in &plan.subjects {
            let mut paths = vec![subject.rel.as_str()];
            if let Some((_, source)) = &subject.source {
                paths.push(source);
            }
            for path in paths {
                if let Some(rule) = policy.deny.iter().find(|r| r.covers(subject.kind, path)) {
                    let kind = rule.kind.map_or("every change", Kind::as_str);
                    return Decision::Deny {
                        reason: format!(
                            "Not changed: a deny rule in {} ({kind}: {}) covers {path}, so this session may not {}.",
                            rule.source.role(),
                            rule.pattern,
                            plan.description
                        ),
                    };
                }
            }
        }
        let broken: Vec<&Problem> = policy.problems.iter().filter(|p| p.source != policy::Source::Grants).collect();
        // A broken rules file may hold deny rules: nothing passes without asking.
        let effective = if broken.is_empty() { mode } else { mode.min(Mode::Ask) };
        let start = access.start();
        let outside_start = |s: &Subject| {
            !s.path.starts_with(start) || s.source.as_ref().is_some_and(|(from, _)| !from.starts_with(start))
        };
        let needs: Vec<&Subject> = match effective {
            Mode::Trust => Vec::new(),
            Mode::AcceptEdits => plan
                .subjects
                .iter()
                .filter(|s| s.kind == Kind::Commit || (matches!(s.kind, Kind::Remove | Kind::Move) && outside_start(s)))
                .collect(),
            Mode::Ask | Mode::ReadOnly => plan.subjects.iter().collect(),
        };
        let session = self.state().session.clone();
        let covered = |s: &Subject| {
            broken.is_empty()
                && (policy.allow.iter().any(|r| r.covers(s.kind, &s.rel))
                    || session.iter().chain(&policy.grants).any(|g| g.kind == GrantKind::File && g.covers(&s.rel)))
        };
        let uncovered: Vec<&Subject> = needs.into_iter().filter(|s| !covered(s)).collect();
        if uncovered.is_empty() {
            return Decision::Allow;
        }
        let paths: Vec<String> = uncovered.iter().map(|s| s.rel.clone()).collect();
        let mut notes = Vec::new();
        if effective == Mode::AcceptEdits {
            notes.push(format!(
                "In mode accept-edits, removing or moving a path outside the start directory ({}) asks first.",
                plan::rel(access.fs().boundary(), start).if_empty("the workspace root")
            ));
        }
        for problem in &broken {
            notes.push(format!("{problem}; every change asks until it is fixed."));
        }
        let grants_broken = policy.problems.iter().find(|p| p.source == policy::Source::Grants);
        if let Some(problem) = grants_broken {
            notes.push(format!("{problem}; no grant in it applies, and none can be remembered until it is fixed."));
        }
        // "For this session" covers exactly the paths of this change, so the label names them.
        let session_label = match paths.as_slice() {
            [one] => format!("Allow {one} for this session"),
            many => format!("Allow these paths for this session: {}", many.join(", ")),
        };
        let mut options = vec![
            ApprovalOption { approval: Approval::AllowOnce, label: "Allow once".into(), targets: Vec::new() },
            ApprovalOption { approval: Approval::AllowSession, label: session_label, targets: Vec::new() },
        ];
        if grants_broken.is_none() {
            let files: Vec<String> = paths.iter().map(|p| pattern::escape(p)).collect();
            let label = match files.as_slice() {
                [one] => format!("Always allow {one}"),
                many => format!("Always allow these files: {}", many.join(", ")),
            };
            options.push(ApprovalOption { approval: Approval::AlwaysFile, label, targets: dedup(files) });
            let dirs: Option<Vec<String>> = paths.iter().map(|p| pattern::directory_of(p)).collect();
            if let Some(dirs) = dirs {
                let dirs = dedup(dirs);
                let label = format!("Always allow {}", dirs.join(", "));
                options.push(ApprovalOption { approval: Approval::AlwaysDirectory, label, targets: dirs });
            }
        }
        options.push(ApprovalOption { approval: Approval::Deny, label: "Deny".into(), targets: Vec::new() });
        Decision::Ask {
            request: ApprovalRequest {
                tool: plan.tool.clone(),
                mode: effective,
                paths,
                description: plan.description.clone(),
                summary: plan.summary.clone(),
                options,
                notes,
                files: plan.files.clone(),
                timeout: self.state().timeout,
                records: None,
            },
        }
    }

    /// Runs a call that changes records (memory): `change` is what the tool's preview found it
    /// would do (`None`: nothing, a look-up), `run` the call itself, run once if the gate lets it.
    pub fn run_records(&self, change: Option<&RecordChange>, run: &mut dyn FnMut() -> ToolResult) -> ToolResult {
        let Some(change) = change else { return run() };
        let policy = Policy::load(&self.project);
        match self.decide_records(self.mode(), &policy, change) {
            Decision::Allow => {}
            Decision::Deny { reason } => return Err(ToolError::Message(reason)),
            Decision::Ask { request } => {
                let refusal = unaskable_records(&request, change, &self.project);
                self.ask(request, refusal)?
            }
        }
        run()
    }

    /// Decides about a change to records, without asking anyone: read-only refuses; a deny rule
    /// under `memory` naming the scope refuses; trust runs; accept-edits runs unless the change
    /// is shared (the user's memory, read by every project); otherwise an allow rule or a grant
    /// of the scope runs it, and anything else asks.
    pub fn decide_records(&self, mode: Mode, policy: &Policy, change: &RecordChange) -> Decision {
        if mode == Mode::ReadOnly {
            return Decision::Deny {
                reason: format!(
                    "Not changed: this session is read-only (mode read-only), so it may not {}. Reading is still open; the user can start ctxfs with --mode ask to allow changes with approval.",
                    change.description
                ),
            };
        }
        if let Some(rule) = policy.deny.iter().find(|r| r.covers(Kind::Memory, change.scope)) {
            return Decision::Deny {
                reason: format!(
                    "Not changed: a deny rule in {} (memory: {}) covers {} memory, so this session may not {}.",
                    rule.source.role(),
                    rule.pattern,
                    change.scope,
                    change.description
                ),
            };
        }
        let broken: Vec<&Problem> = policy.problems.iter().filter(|p| p.source != policy::Source::Grants).collect();
        let effective = if broken.is_empty() { mode } else { mode.min(Mode::Ask) };
        let needs = match effective {
            Mode::Trust => false,
            Mode::AcceptEdits => change.shared,
            Mode::Ask | Mode::ReadOnly => true,
        };
        let session = self.state().session.clone();
        let covered = broken.is_empty()
            && (policy.allow.iter().any(|r| r.covers(Kind::Memory, change.scope))
                || session.iter().chain(&policy.grants).any(|g| g.kind == GrantKind::Memory && g.covers(change.scope)));
        if !needs || covered {
            return Decision::Allow;
        }
        let mut notes = Vec::new();
        if effective == Mode::AcceptEdits {
            notes.push(
                "In mode accept-edits, a change to the user's memory asks first: every project reads it.".to_string(),
            );
        }
        for problem in &broken {
            notes.push(format!("{problem}; every change asks until it is fixed."));
        }
        let grants_broken = policy.problems.iter().find(|p| p.source == policy::Source::Grants);
        if let Some(problem) = grants_broken {
            notes.push(format!("{problem}; no grant in it applies, and none can be remembered until it is fixed."));
        }
        let mut options = vec![
            ApprovalOption { approval: Approval::AllowOnce, label: "Allow once".into(), targets: Vec::new() },
            ApprovalOption {
                approval: Approval::AllowSession,
                label: format!("Allow changes to {} memory for this session", change.scope),
                targets: Vec::new(),
            },
        ];
        if grants_broken.is_none() {
            options.push(ApprovalOption {
                approval: Approval::AlwaysFile,
                label: format!("Always allow changes to {} memory", change.scope),
                targets: vec![change.scope.to_string()],
            });
        }
        options.push(ApprovalOption { approval: Approval::Deny, label: "Deny".into(), targets: Vec::new() });
        Decision::Ask {
            request: ApprovalRequest {
                tool: "memory".into(),
                mode: effective,
                paths: Vec::new(),
                description: change.description.clone(),
                summary: change.summary.clone(),
                options,
                notes,
                files: Vec::new(),
                timeout: self.state().timeout,
                records: Some(change.scope.to_string()),
            },
        }
    }

    /// Asks the front door and acts on the answer: `Ok` lets the call run. `unaskable` is the
    /// refusal when there is nobody to ask.
    fn ask(&self, request: ApprovalRequest, unaskable: String) -> Result<(), ToolError> {
        let approver = self.state().approver.clone();
        let refuse = |text: String| Err(ToolError::Message(text));
        let Some(approver) = approver else {
            return refuse(unaskable);
        };
        let timeout = request.timeout;
        let (send, receive) = std::sync::mpsc::channel();
        let asked = request.clone();
        let spawned = std::thread::Builder::new().name("ctxfs-approval".into()).spawn(move || {
            let _ = send.send(approver.ask(&asked));
        });
        if let Err(e) = spawned {
            return refuse(format!(
                "Not changed: the approval prompt could not be shown ({e}), so this session may not {}.",
                request.description
            ));
        }
        let answer = match receive.recv_timeout(timeout) {
            Ok(answer) => answer,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                tracing::info!(tool = request.tool, "an approval prompt timed out");
                return refuse(format!(
                    "Not changed: nobody answered the prompt to {} within {}, so it was refused. Nothing was changed.",
                    request.description,
                    seconds(timeout)
                ));
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                Approval::Dismissed { why: "the prompt failed".into() }
            }
        };
        if answer.id().is_some() && !request.offers(&answer) {
            return refuse(format!(
                "Not changed: the answer to the prompt to {} was not one of those offered. Nothing was changed.",
                request.description
            ));
        }
        let targets = |approval: &Approval| {
            request.options.iter().find(|o| o.approval == *approval).map(|o| o.targets.clone()).unwrap_or_default()
        };
        match answer {
            Approval::AllowOnce => Ok(()),
            Approval::AllowSession => {
                let mut state = self.state();
                let grants: Vec<Grant> = match &request.records {
                    Some(scope) => vec![Grant::memory(scope.clone())],
                    None => request.paths.iter().map(|path| Grant::file(pattern::escape(path))).collect(),
                };
                for grant in grants {
                    if !state.session.contains(&grant) {
                        state.session.push(grant);
                    }
                }
                Ok(())
            }
            Approval::AlwaysFile | Approval::AlwaysDirectory => {
                let grant = |target: String| match request.records {
                    Some(_) => Grant::memory(target),
                    None => Grant::file(target),
                };
                let grants: Vec<Grant> = targets(&answer).into_iter().map(grant).collect();
                if let Err(e) = policy::remember(&self.project, &grants) {
                    // Still the user's yes: it lasts for the session.
                    tracing::error!("could not remember a grant: {e}");
                    let mut state = self.state();
                    for grant in grants {
                        if !state.session.contains(&grant) {
                            state.session.push(grant);
                        }
                    }
                }
                Ok(())
            }
            Approval::Deny => refuse(format!(
                "Not changed: the user declined to let this session {}. Ask the user before trying it another way.",
                request.description
            )),
            Approval::Dismissed { why } => refuse(format!(
                "Not changed: the prompt to {} got no answer ({why}). Nothing was changed.",
                request.description
            )),
        }
    }
}

/// The refusal when the change needs asking and no one can be asked. It
/// names the rules files by their paths: the user reads them to allow it.
fn unaskable(request: &ApprovalRequest, plan: &Plan, policy: &Policy, project: &Project) -> String {
    let why = match request.mode {
        Mode::AcceptEdits => {
            "in mode accept-edits, removing or moving a path outside the start directory asks the user first"
                .to_string()
        }
        _ => "this session asks the user before each change (mode ask)".to_string(),
    };
    let mut text = format!(
        "Not changed: {why}, and this client cannot ask (it shows no approval prompts), so this session may not {}.",
        plan.description
    );
    let broken: Vec<String> =
        policy.problems.iter().filter(|p| p.source != policy::Source::Grants).map(Problem::for_model).collect();
    if !broken.is_empty() {
        text.push_str(&format!(" Every change asks because {}.", broken.join(" and ")));
    }
    let subject = plan.subjects.iter().find(|s| request.paths.contains(&s.rel));
    let example = subject.map(|s| {
        let target = pattern::directory_of(&s.rel).unwrap_or_else(|| pattern::escape(&s.rel));
        format!(" such as {{\"allow\": {{\"{}\": [\"{}\"]}}}}", s.kind.as_str(), target.replace('\\', "\\\\"))
    });
    let files = rules_files(project);
    text.push_str(&format!(
        " To allow it, the user can start ctxfs with --mode accept-edits or --mode trust, or add an allow rule{} to {files}.",
        example.unwrap_or_default()
    ));
    text
}

/// Where the user's allow rules live, for a refusal that says how to allow a change.
fn rules_files(project: &Project) -> String {
    match project.user_rules_path() {
        Some(user) => format!(
            "{} (every project) or {} (this project only)",
            user.display(),
            project.project_rules_path().display()
        ),
        None => format!("{} (this project)", project.project_rules_path().display()),
    }
}

/// The refusal when a change to records needs asking and no one can be asked: how the user can
/// allow it.
fn unaskable_records(request: &ApprovalRequest, change: &RecordChange, project: &Project) -> String {
    let why = match request.mode {
        Mode::AcceptEdits => "in mode accept-edits, a change to the user's memory asks the user first",
        _ => "this session asks the user before each change (mode ask)",
    };
    let files = rules_files(project);
    format!(
        "Not changed: {why}, and this client cannot ask (it shows no approval prompts), so this session may not {}. To allow it, the user can start ctxfs with --mode trust, or add an allow rule such as {{\"allow\": {{\"memory\": [\"{}\"]}}}} to {files}.",
        change.description, change.scope
    )
}

/// `120 seconds`, `1 second`, `0.5 seconds`.
fn seconds(duration: Duration) -> String {
    let secs = duration.as_secs_f64();
    if secs == 1.0 {
        "1 second".into()
    } else if secs.fract() == 0.0 {
        format!("{secs:.0} seconds")
    } else {
        format!("{} seconds", (secs * 10.0).round() / 10.0)
    }
}

fn dedup(items: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for item in items {
        if !out.contains(&item) {
            out.push(item);
        }
    }
    out
}

trait IfEmpty {
    fn if_empty(self, instead: &str) -> String;
}

impl IfEmpty for String {
    fn if_empty(self, instead: &str) -> String {
        if self.is_empty() {
            instead.to_string()
        } else {
            self
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_unknown_tool_is_gated() {
        assert!(super::is_gated("nope"), "the gate decides about a tool it does not know");
    }

    use super::*;
    use crate::access::{Level, View};
    use crate::paths::VPath;
    use crate::tools::{Change, FileChange, Outcome};
    use crate::vfs::mem::MemFs;
    use crate::vfs::Fs;

    struct Always(Approval);

    impl Approver for Always {
        fn ask(&self, _request: &ApprovalRequest) -> Approval {
            self.0.clone()
        }
    }

    fn setup(dir: &std::path::Path) -> (Arc<MemFs>, Access, Gate) {
        let root = VPath::parse("/ws").unwrap();
        let fs = Arc::new(MemFs::new(root.clone()));
        let access = Access::new(fs.clone(), View::single(root.clone(), Level::Stage), root);
        let gate =
            Gate::new(Project::new(std::path::Path::new("/ws"), &dir.join("data"), None), Mode::Ask, DEFAULT_TIMEOUT);
        (fs, access, gate)
    }

    /// A "tool" that writes `path` through the access it is given.
    fn writer(path: &'static str) -> impl FnMut(&Access, &mut Observed) -> ToolResult {
        move |access: &Access, _: &mut Observed| {
            let target = access.target(path, crate::access::Need::Create)?;
            access.fs().write_file(&target.real, b"x\n").map_err(|e| ToolError::from_fs(e, &target.path))?;
            Ok(Outcome::Changed(FileChange {
                given: path.into(),
                path: target.path,
                sha: None,
                change: Change::Created { lines: 1 },
                note: None,
                texts: Default::default(),
            }))
        }
    }

    #[test]
    fn a_refused_call_changes_nothing_and_an_allowed_one_runs_once() {
        let dir = tempfile::tempdir().unwrap();
        let (fs, access, gate) = setup(dir.path());
        let args = serde_json::json!({});
        let refused = gate.run(&access, &mut Observed::default(), "write", &args, &mut writer("a.md"));
        assert!(matches!(refused, Err(ToolError::Message(ref m)) if m.contains("cannot ask")), "{refused:?}");
        assert!(fs.lstat(&VPath::parse("/ws/a.md").unwrap()).is_err(), "the dry run wrote nothing");

        gate.set_approver(Some(Arc::new(Always(Approval::AllowOnce))));
        gate.run(&access, &mut Observed::default(), "write", &args, &mut writer("a.md")).unwrap();
        assert_eq!(fs.read_file(&VPath::parse("/ws/a.md").unwrap(), 100).unwrap(), b"x\n");
    }

    #[test]
    fn the_real_run_may_change_only_what_was_approved() {
        let dir = tempfile::tempdir().unwrap();
        let (fs, access, gate) = setup(dir.path());
        gate.set_approver(Some(Arc::new(Always(Approval::AllowOnce))));
        // The dry run writes a.md; the real run (a link swapped meanwhile, say) writes b.md.
        let mut calls = 0;
        let mut first = writer("a.md");
        let mut second = writer("b.md");
        let mut tool = |access: &Access, observed: &mut Observed| {
            calls += 1;
            if calls == 1 {
                first(access, observed)
            } else {
                second(access, observed)
            }
        };
        let result = gate.run(&access, &mut Observed::default(), "write", &serde_json::json!({}), &mut tool);
        assert!(matches!(result, Err(ToolError::Raced(_))), "{result:?}");
        assert!(fs.lstat(&VPath::parse("/ws/a.md").unwrap()).is_err());
        assert!(fs.lstat(&VPath::parse("/ws/b.md").unwrap()).is_err());
    }

    #[test]
    fn an_answer_not_offered_is_a_refusal() {
        let dir = tempfile::tempdir().unwrap();
        let (fs, access, gate) = setup(dir.path());
        // A file at the root offers no directory.
        gate.set_approver(Some(Arc::new(Always(Approval::AlwaysDirectory))));
        let result = gate.run(&access, &mut Observed::default(), "write", &serde_json::json!({}), &mut writer("a.md"));
        assert!(
            matches!(result, Err(ToolError::Message(ref m)) if m.contains("not one of those offered")),
            "{result:?}"
        );
        assert!(fs.lstat(&VPath::parse("/ws/a.md").unwrap()).is_err());
        assert!(gate.grants().is_empty());
    }

    #[test]
    fn modes_parse_and_order_from_strictest() {
        for mode in [Mode::ReadOnly, Mode::Ask, Mode::AcceptEdits, Mode::Trust] {
            assert_eq!(mode.as_str().parse::<Mode>().unwrap(), mode);
        }
        assert!(Mode::ReadOnly < Mode::Ask && Mode::Ask < Mode::AcceptEdits && Mode::AcceptEdits < Mode::Trust);
        assert_eq!(Mode::default(), Mode::Ask);
        assert!("yolo".parse::<Mode>().is_err());
    }
}
