//! The engine's public shapes: what a front door passes in and gets back.
//!
//! Plain data only: no JSON-RPC, MCP or LSP types. A front door turns its
//! protocol's messages into these and back.

use serde::Serialize;
use std::path::PathBuf;
use std::time::Duration;

/// How the session's world is laid out.
#[derive(Debug, Clone)]
pub enum Posture {
    /// A directory presented as `/`, with grants and floors from a view file.
    Tree { dir: PathBuf, view: PathBuf },
    /// The machine's own paths; the boundary is the project root, writable.
    Device { root: PathBuf },
    /// An editor's workspace folders, on the machine's own paths: one
    /// writable grant each over their common ancestor, which is the boundary
    /// and itself stays hidden. One folder (after dropping folders inside
    /// others) is a device posture on it.
    Folders { folders: Vec<PathBuf> },
}

/// Everything an engine is built from: the one description every door and
/// command fills in, and only `Engine::new` turns into a file system, a data
/// directory and an index.
#[derive(Debug, Clone)]
pub struct Config {
    pub posture: Posture,
    /// The start directory, as a path of the session's world; default: the
    /// boundary (with several folders, the first folder).
    pub start: Option<String>,
    /// Where sessions, results and the trash live; default: the platform's data directory.
    pub data_dir: Option<PathBuf>,
    /// The permission mode sessions start in. `Config::new` says trust: an
    /// engine does what its view allows; the doors choose `ask`.
    pub mode: crate::gate::Mode,
    /// How long an approval prompt waits before the change is refused.
    pub approval_timeout: Duration,
    /// What the client's next request carries (see `HostKind`).
    pub host: crate::hygiene::HostKind,
    /// The user's config directory (global AGENTS.md, skills/, config.json,
    /// rules.json); `None` for none. `Config::new` says the platform's.
    pub user_dir: Option<PathBuf>,
    /// The embedder the index loads (default: config.json's `embedder`,
    /// else the static table) and the model a server is asked for.
    pub embedder: Option<crate::index::EmbedderChoice>,
    pub embedder_model: Option<String>,
    /// The engine answers one call and ends (`ctxfs call`): no file watcher
    /// is started, since no later search would reuse a walk.
    pub one_off: bool,
}

impl Config {
    /// A configuration of `posture` with every other setting at its default.
    pub fn new(posture: Posture) -> Config {
        Config {
            posture,
            start: None,
            data_dir: None,
            mode: crate::gate::Mode::Trust,
            approval_timeout: crate::gate::DEFAULT_TIMEOUT,
            host: crate::hygiene::HostKind::Resend,
            user_dir: crate::instructions::UserConfig::platform().dir,
            embedder: None,
            embedder_model: None,
            one_off: false,
        }
    }
}

/// What a door was started with on its command line (all optional), before a
/// client says more: `ctxfs lsp` and `ctxfs acp` build sessions from it.
#[derive(Debug, Clone, Default)]
pub struct Defaults {
    pub tree: Option<PathBuf>,
    pub view: Option<PathBuf>,
    pub root: Option<PathBuf>,
    pub start: Option<String>,
    pub data: Option<PathBuf>,
    pub host: Option<crate::hygiene::HostKind>,
    /// The user's config directory (global AGENTS.md, skills/, config.json).
    pub config: Option<PathBuf>,
    /// The permission mode sessions start in (default: ask).
    pub mode: Option<crate::gate::Mode>,
    /// How long an approval prompt waits (default: `gate::DEFAULT_TIMEOUT`).
    pub approval_timeout: Option<std::time::Duration>,
    /// The embedder (default: config.json's, else the static table) and the model a server is asked for.
    pub embedder: Option<crate::index::EmbedderChoice>,
    pub embedder_model: Option<String>,
}

/// What a front door knows of its client when it opens a session.
#[derive(Debug, Clone, Default)]
pub struct SessionOptions {
    /// The client's name (MCP clientInfo.name), recorded with files it creates.
    pub client_name: Option<String>,
    /// Host directories the client asked to work in (MCP roots). They can
    /// only narrow the view: nothing outside them is visible, nothing is added.
    pub roots: Option<Vec<PathBuf>>,
    /// A session id to go on with (`--session`): reopened when the data
    /// directory has it, else a new session under that id.
    pub resume: Option<String>,
    /// The client cannot show the user approval prompts (an MCP client
    /// without elicitation): what would ask is refused, and the model's
    /// instructions say so from the start.
    pub no_prompts: bool,
}

/// A tool the model can call.
#[derive(Debug, Clone, Serialize)]
pub struct ToolInfo {
    pub name: String,
    /// A short title for people (a client's list of tools).
    pub title: String,
    /// The description the model reads, from the parameter type's doc comment.
    pub description: String,
    /// JSON Schema of the arguments, generated from the parameter type.
    pub input_schema: serde_json::Value,
    /// What a call does to the world, for clients that let reads run unasked.
    pub hints: ToolHints,
}

/// What a call of a tool does to the world, from the tool table's traits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ToolHints {
    /// It changes nothing.
    pub read_only: bool,
    /// A change may take something away (overwrite, delete, forget).
    pub destructive: bool,
    /// The same call twice does what it does once.
    pub idempotent: bool,
}

/// Structured facts about a result, for editors to render. The model reads `text` only.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    /// The resolved absolute path the result is about, if one.
    pub path: Option<String>,
    /// The file's full SHA-256 (hex) after the call, for reads and changes.
    pub sha: Option<String>,
    /// The unified diff of a change, uncapped.
    pub diff: Option<String>,
    pub created: bool,
    pub deleted: bool,
    /// Every file a multi-file change touched, in order.
    pub files: Vec<Facts>,
}

/// The answer to one tool call.
#[derive(Debug, Clone)]
pub struct ToolAnswer {
    /// The result's id, `#0001`.
    pub id: String,
    /// What the model sees, starting with the bracket.
    pub text: String,
    pub is_error: bool,
    pub facts: Facts,
}
