//! The conformance suite: cases as data (`conformance/<area>.json`), run two
//! ways each — over the engine (`Session::call`) and over `ctxfs mcp` as a
//! subprocess speaking newline-delimited JSON-RPC — with the same
//! expectations. Every case runs; failures are collected and reported by
//! name at the end. A case marked `known_bug` is run and reported as
//! skipped with its reason (and said to pass, when it does).
//!
//! The case format is described in the `about` of each area file. Narrow a
//! run with `CTXFS_CONFORMANCE_CASE=<part of a case name>` and
//! `CTXFS_CONFORMANCE_MODES=core` (or `mcp`); `CTXFS_CONFORMANCE_SHOW=1` prints
//! every answer (`--nocapture`).
//!
//! A new area is one more test function: `#[test] fn area() { run_area("area"); }`;
//! `every_conformance_file_is_run` fails for a file that has none.
//!
//! Session events (`{"event": "compact" | "rewind" | "new_request" | "reopen", ...}`)
//! exist over the engine only: MCP has no method for them. A case with one
//! runs over the core only, and so does a case whose `doors` says so; every
//! other case runs over both doors. `{"event": "instructions"}` runs over
//! both: the engine's structured chain, or the MCP `initialize` result's
//! `instructions` text.

use ctxfs::engine::{Config, Engine, Posture, SessionOptions};
use ctxfs::hygiene::HostKind;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

#[test]
fn fs_access() {
    run_area("fs_access");
}

#[test]
fn context() {
    run_area("context");
}

#[test]
fn instructions() {
    run_area("instructions");
}

#[test]
fn gate() {
    run_area("gate");
}

#[test]
fn arguments() {
    run_area("arguments");
}

#[test]
fn memory() {
    run_area("memory");
}

#[test]
fn edits() {
    run_area("edits");
}

#[test]
fn mounts() {
    run_area("mounts");
}

#[test]
fn peer_codex_apply_patch() {
    run_area("peer_codex_apply_patch");
}

#[test]
fn peer_globset() {
    run_area("peer_globset");
}

#[test]
fn peer_mcp_filesystem() {
    run_area("peer_mcp_filesystem");
}

#[test]
fn peer_ripgrep() {
    run_area("peer_ripgrep");
}

/// Every `conformance/*.json` runs: an engine area has its `run_area` above, a chunking
/// file its test in `tests/chunk_conformance.rs`. A new file without one fails here.
#[test]
fn every_conformance_file_is_run() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("conformance");
    let runner = include_str!("conformance.rs");
    let chunk_runner = include_str!("chunk_conformance.rs");
    let mut unrun = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        let Some(area) = name.strip_suffix(".json") else { continue };
        let engine_area = runner.contains(&format!("run_area(\"{area}\")"));
        let chunk_file = chunk_runner.contains(&format!("run(\"{name}\""));
        if !engine_area && !chunk_file {
            unrun.push(name);
        }
    }
    assert!(unrun.is_empty(), "conformance files no test runs: {unrun:?}");
}

/// A case, typed (conformance/README.md says what each key means). Every case is parsed into
/// this before it runs: a key the runner does not know (a misspelt expectation would otherwise
/// check nothing) or a value of the wrong kind fails the case with serde's sentence naming it.
/// Generated texts (`{"repeat": …}`, `{"parts": …}`) and free-form set-up stay JSON values.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // Read through the case's JSON by the steps below; the parse is the check.
struct Case {
    name: String,
    about: Option<String>,
    posture: PostureName,
    view: Option<ViewShape>,
    tree: Option<BTreeMap<String, Value>>,
    tree_many: Option<Vec<ManyFiles>>,
    links: Option<BTreeMap<String, String>>,
    fifos: Option<OneOrMany<String>>,
    modes: Option<BTreeMap<String, String>>,
    host_files: Option<BTreeMap<String, Value>>,
    start: Option<String>,
    root_link: Option<bool>,
    host: Option<HostName>,
    mode: Option<String>,
    answers: Option<OneOrMany<String>>,
    approval_timeout_ms: Option<u64>,
    user_config: Option<BTreeMap<String, Value>>,
    project_rules: Option<Value>,
    data_files: Option<BTreeMap<String, Value>>,
    calls: Vec<Step>,
    after: Option<After>,
    doors: Option<Vec<DoorName>>,
    known_bug: Option<String>,
    provenance: Option<Provenance>,
    /// Git repositories made before the case: name -> its commits, in order.
    repos: Option<BTreeMap<String, Vec<RepoCommit>>>,
}

/// A commit made into a case's repository, at set-up (`repos`) or as a step (`repo_commit`).
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct RepoCommit {
    /// The repository, in a step (`repos` names it by its key).
    repo: Option<String>,
    branch: String,
    from: Option<String>,
    /// Path -> text, or null to remove it.
    files: BTreeMap<String, Option<String>>,
    message: Option<String>,
}

/// A step's repository: `git` runs `args` in it, `repo_rename` renames it to `to`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct RepoStep {
    repo: String,
    args: Option<Vec<String>>,
    to: Option<String>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
enum PostureName {
    Tree,
    Device,
}

#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
enum HostName {
    Resend,
    Fresh,
}

#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
enum DoorName {
    Core,
    Mcp,
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct ViewShape {
    grants: Option<BTreeMap<String, String>>,
    floors: Option<BTreeMap<String, String>>,
    mounts: Option<BTreeMap<String, MountShape>>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct MountShape {
    repo: String,
    branch: String,
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct ManyFiles {
    path: String,
    content: Value,
    from: u64,
    to: u64,
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct After {
    exists: Option<OneOrMany<String>>,
    absent: Option<OneOrMany<String>>,
    content: Option<BTreeMap<String, Value>>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct Provenance {
    repository: String,
    commit: String,
    path: String,
    test: Option<String>,
}

/// A step of a case: a tool call, a session event, a restart, a command line or an outside write,
/// with what its answer must show.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct Step {
    tool: Option<String>,
    args: Option<Value>,
    args_text: Option<String>,
    event: Option<String>,
    mode: Option<String>,
    to: Option<String>,
    carries_earlier: Option<bool>,
    restart: Option<Restart>,
    cli: Option<OneOrMany<String>>,
    external_write: Option<Value>,
    repo_commit: Option<RepoCommit>,
    repo_rename: Option<RepoStep>,
    git: Option<RepoStep>,
    expect: Option<Value>,
    expect_prefix: Option<Value>,
    expect_contains: Option<Value>,
    expect_in_order: Option<Value>,
    expect_not_contains: Option<Value>,
    expect_error: Option<bool>,
    expect_prompt: Option<Value>,
    expect_no_prompt: Option<bool>,
    expect_chain: Option<Vec<Value>>,
    expect_notes: Option<OneOrMany<String>>,
}

/// A restart's body: `{}`, or `{"root": "sub"}` to start the next server on that directory of the
/// workspace (another project over the same data and config directories).
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct Restart {
    root: Option<String>,
}

/// A value or a list of them: where a case may give either.
#[derive(Debug, serde::Deserialize)]
#[serde(untagged)]
#[allow(dead_code)]
enum OneOrMany<T> {
    One(T),
    Many(Vec<T>),
}

/// A case's shape checked before it runs (see `Case`).
fn check_keys(case: &Value) -> Result<(), String> {
    serde_json::from_value::<Case>(case.clone()).map(drop).map_err(|e| format!("the case is not well formed: {e}"))
}

/// How long one MCP answer may take before the case fails.
const MCP_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Core,
    Mcp,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Core => "core",
            Mode::Mcp => "mcp",
        }
    }
}

/// Runs every case of `conformance/<area>.json` in every mode and panics
/// with the list of failing cases, if any.
fn run_area(area: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("conformance").join(format!("{area}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let doc: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not valid JSON: {e}", path.display()));
    let cases = doc["cases"].as_array().unwrap_or_else(|| panic!("{} has no \"cases\" list", path.display()));

    let filter = std::env::var("CTXFS_CONFORMANCE_CASE").ok();
    let modes: Vec<Mode> = match std::env::var("CTXFS_CONFORMANCE_MODES").as_deref() {
        Ok("core") => vec![Mode::Core],
        Ok("mcp") => vec![Mode::Mcp],
        _ => vec![Mode::Core, Mode::Mcp],
    };

    let mut names = std::collections::HashSet::new();
    let mut failures: Vec<String> = Vec::new();
    let mut skipped: Vec<String> = Vec::new();
    let mut now_passing: Vec<String> = Vec::new();
    let mut only_some: Vec<String> = Vec::new();
    let mut ran = 0usize;
    for case in cases {
        let name = case["name"].as_str().unwrap_or("<unnamed>").to_string();
        if !names.insert(name.clone()) {
            failures.push(format!("{area}/{name}: the name is used by more than one case"));
        }
        if let Err(why) = check_provenance(area, case) {
            failures.push(format!("{area}/{name}: {why}"));
        }
        if let Err(why) = check_keys(case) {
            failures.push(format!("{area}/{name}: {why}"));
        }
        if filter.as_deref().is_some_and(|f| !name.contains(f)) {
            continue;
        }
        let doors = match case_doors(case) {
            Ok(doors) => doors,
            Err(why) => {
                failures.push(format!("{area}/{name}: {why}"));
                continue;
            }
        };
        let case_modes: Vec<Mode> = modes.iter().copied().filter(|m| doors.contains(m)).collect();
        if case_modes.is_empty() {
            continue;
        }
        if case_modes.len() < modes.len() {
            only_some.push(format!("{name} [{}]", case_modes.iter().map(|m| m.name()).collect::<Vec<_>>().join(", ")));
        }
        ran += 1;
        let known_bug = case.get("known_bug").and_then(Value::as_str);
        let mut problems = Vec::new();
        for &mode in &case_modes {
            if let Err(why) = run_case(case, mode) {
                problems.push(format!("[{}] {why}", mode.name()));
            }
        }
        match (known_bug, problems.is_empty()) {
            (Some(reason), false) => skipped.push(format!("{area}/{name} (known bug: {reason})")),
            (Some(reason), true) => now_passing.push(format!("{area}/{name} (marked: {reason})")),
            (None, false) => failures.push(format!("{area}/{name}\n{}", indent_by(&problems.join("\n"), "    "))),
            (None, true) => {}
        }
    }

    eprintln!("conformance {area}: {ran} cases run in {:?}", modes.iter().map(|m| m.name()).collect::<Vec<_>>());
    if !only_some.is_empty() {
        eprintln!(
            "  {} of them over some doors only (session events are the engine's): {}",
            only_some.len(),
            only_some.join("; ")
        );
    }
    for s in &skipped {
        eprintln!("  SKIPPED {s}");
    }
    for s in &now_passing {
        eprintln!("  PASSES, remove its known_bug mark: {s}");
    }
    if !failures.is_empty() {
        panic!("{} of {ran} {area} cases failed:\n\n{}\n", failures.len(), failures.join("\n\n"));
    }
}

/// A case of a `peer_*` area (converted from another project's tests) says
/// where it came from: `provenance` {repository, commit, path}.
fn check_provenance(area: &str, case: &Value) -> Result<(), String> {
    if !area.starts_with("peer_") {
        return Ok(());
    }
    let provenance = case.get("provenance").ok_or("a peer case needs a provenance")?;
    for key in ["repository", "commit", "path"] {
        if provenance.get(key).and_then(Value::as_str).is_none_or(str::is_empty) {
            return Err(format!("its provenance has no {key}"));
        }
    }
    Ok(())
}

/// Session events: the engine's own operations, which MCP has no method for.
const SESSION_EVENTS: [&str; 5] = ["compact", "rewind", "new_request", "reopen", "set_mode"];

/// The doors a case runs over: its `doors`, else the core alone when it has
/// a session event, else both.
fn case_doors(case: &Value) -> Result<Vec<Mode>, String> {
    let has_event = case["calls"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|step| step.get("event").and_then(Value::as_str).is_some_and(|e| SESSION_EVENTS.contains(&e)));
    let Some(doors) = case.get("doors") else {
        return Ok(if has_event { vec![Mode::Core] } else { vec![Mode::Core, Mode::Mcp] });
    };
    let doors = doors
        .as_array()
        .ok_or("doors is not a list")?
        .iter()
        .map(|n| match n.as_str() {
            Some("core") => Ok(Mode::Core),
            Some("mcp") => Ok(Mode::Mcp),
            other => Err(format!("unknown door {other:?} (core or mcp)")),
        })
        .collect::<Result<Vec<Mode>, String>>()?;
    if has_event && doors.contains(&Mode::Mcp) {
        return Err("a case with a session event cannot run over mcp".into());
    }
    Ok(doors)
}

// ---------------------------------------------------------------------------
// Generated texts
// ---------------------------------------------------------------------------

/// Whether `value` is a generated text: `{"repeat": "…{n}…", "from": a, "to": b}`
/// or `{"parts": [text, …]}`.
fn is_generated(value: &Value) -> bool {
    value.as_object().is_some_and(|m| {
        (m.len() == 1 && m.get("parts").is_some_and(Value::is_array))
            || (m.len() == 3
                && m.get("repeat").is_some_and(Value::is_string)
                && m.contains_key("from")
                && m.contains_key("to"))
    })
}

/// A text: a string, or a generated one (see `is_generated`); parts are
/// strings or generated texts.
fn gen_text(value: &Value) -> Result<String, String> {
    match value {
        Value::String(s) => Ok(s.clone()),
        Value::Object(m) if m.contains_key("repeat") => {
            let template = m["repeat"].as_str().ok_or("repeat is not a string")?;
            let from = m["from"].as_u64().ok_or("from is not a number")?;
            let to = m["to"].as_u64().ok_or("to is not a number")?;
            let mut out = String::new();
            for n in from..=to {
                out.push_str(&template.replace("{n}", &n.to_string()));
            }
            Ok(out)
        }
        Value::Object(m) if m.contains_key("parts") => {
            m["parts"].as_array().ok_or("parts is not a list")?.iter().map(gen_text).collect()
        }
        other => Err(format!("{other} is not a text")),
    }
}

/// `value` with every generated text in it replaced by the string it makes.
fn expand(value: &Value) -> Result<Value, String> {
    if is_generated(value) {
        return gen_text(value).map(Value::String);
    }
    Ok(match value {
        Value::Array(items) => Value::Array(items.iter().map(expand).collect::<Result<_, _>>()?),
        Value::Object(map) => {
            Value::Object(map.iter().map(|(k, v)| Ok((k.clone(), expand(v)?))).collect::<Result<_, String>>()?)
        }
        other => other.clone(),
    })
}

// ---------------------------------------------------------------------------
// The workspace of one case
// ---------------------------------------------------------------------------

/// A case's host directories, all under one temporary directory:
/// `ws` (the workspace, `{root}`), `outside` (`{outside}`), `config` (the
/// user's config directory, `{config}`: always given, so that no case reads
/// the real one), `data`, `view.json`.
struct World {
    _base: tempfile::TempDir,
    root: PathBuf,
    data: PathBuf,
    config: PathBuf,
    view: Option<PathBuf>,
    /// With `root_link: true`, a link to the workspace (`{root_link}`), given as the root.
    root_link: Option<PathBuf>,
    root_text: String,
    outside_text: String,
    config_text: String,
    data_text: String,
    /// After `{"restart": {"root": "sub"}}`: the boundary is this directory of the workspace
    /// (another project over the same data and config directories) until the next restart.
    boundary: std::cell::RefCell<Option<String>>,
    /// Where the case's git repositories are made (`{repos}`): `{repos}/NAME.git`.
    repos: PathBuf,
}

impl World {
    fn subst(&self, text: &str) -> String {
        let link = self.root_link.as_ref().map(|l| l.to_string_lossy().into_owned()).unwrap_or_default();
        text.replace("{root_link}", &link)
            .replace("{repos}", &self.repos.to_string_lossy())
            .replace("{root}", &self.root_text)
            .replace("{outside}", &self.outside_text)
            .replace("{config}", &self.config_text)
            .replace("{data}", &self.data_text)
    }

    fn subst_value(&self, value: &Value) -> Value {
        match value {
            Value::String(s) => Value::String(self.subst(s)),
            Value::Array(items) => Value::Array(items.iter().map(|v| self.subst_value(v)).collect()),
            Value::Object(map) => {
                Value::Object(map.iter().map(|(k, v)| (self.subst(k), self.subst_value(v))).collect())
            }
            other => other.clone(),
        }
    }

    /// A path of `after` or `external_write`: relative to the workspace, or a template.
    fn host_path(&self, text: &str) -> PathBuf {
        let text = self.subst(text);
        if text.starts_with('/') {
            PathBuf::from(text)
        } else {
            self.root.join(text)
        }
    }

    fn build(case: &Value) -> Result<World, String> {
        let base = tempfile::tempdir().map_err(|e| format!("tempdir: {e}"))?;
        let canonical = base.path().canonicalize().map_err(|e| format!("canonicalize: {e}"))?;
        let root = canonical.join("ws");
        let outside = canonical.join("outside");
        let data = canonical.join("data");
        let config = canonical.join("config");
        for dir in [&root, &outside, &data, &config] {
            std::fs::create_dir_all(dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
        }
        std::fs::write(outside.join("secret.txt"), "TOP-SECRET").map_err(|e| format!("secret: {e}"))?;
        let mut world = World {
            root_text: root.to_str().ok_or("non-UTF-8 temp dir")?.to_string(),
            outside_text: outside.to_str().ok_or("non-UTF-8 temp dir")?.to_string(),
            config_text: config.to_str().ok_or("non-UTF-8 temp dir")?.to_string(),
            data_text: data.to_str().ok_or("non-UTF-8 temp dir")?.to_string(),
            _base: base,
            root,
            data,
            config,
            view: None,
            root_link: None,
            boundary: Default::default(),
            repos: canonical.join("repos"),
        };
        if case.get("root_link").and_then(Value::as_bool) == Some(true) {
            let link = canonical.join("link");
            std::os::unix::fs::symlink(&world.root, &link).map_err(|e| format!("root link: {e}"))?;
            world.root_link = Some(link);
        }

        let relative = |rel: &str| -> Result<PathBuf, String> {
            if rel.is_empty() || rel.starts_with('/') || rel.split('/').any(|p| p == "..") {
                return Err(format!("{rel:?}: tree paths must be relative and stay inside the workspace"));
            }
            Ok(world.root.join(rel))
        };
        if let Some(tree) = case.get("tree").and_then(Value::as_object) {
            for (rel, content) in tree {
                let host = relative(rel)?;
                match content {
                    Value::Null => mkdirs(&host)?,
                    Value::String(_) if rel.ends_with('/') => mkdirs(&host)?,
                    Value::String(text) => write_file(&host, text)?,
                    other if is_generated(other) => write_file(&host, &gen_text(other)?)?,
                    other => return Err(format!("tree entry {rel:?}: {other} is neither a text nor null")),
                }
            }
        }
        // Permission bits: relative path -> octal text ("0444").
        if let Some(modes) = case.get("modes").and_then(Value::as_object) {
            for (rel, mode) in modes {
                let mode = mode.as_str().and_then(|m| u32::from_str_radix(m, 8).ok()).ok_or("a mode is octal text")?;
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(relative(rel)?, std::fs::Permissions::from_mode(mode))
                    .map_err(|e| format!("chmod {rel}: {e}"))?;
            }
        }
        // Many files at once: {path with {n}, content (may use {n}), from, to}.
        if let Some(many) = case.get("tree_many").and_then(Value::as_array) {
            for group in many {
                let path = group["path"].as_str().ok_or("tree_many: path is not a string")?;
                let content = group["content"].as_str().ok_or("tree_many: content is not a string")?;
                let from = group["from"].as_u64().ok_or("tree_many: from is not a number")?;
                let to = group["to"].as_u64().ok_or("tree_many: to is not a number")?;
                for n in from..=to {
                    let n = n.to_string();
                    write_file(&relative(&path.replace("{n}", &n))?, &content.replace("{n}", &n))?;
                }
            }
        }
        if let Some(links) = case.get("links").and_then(Value::as_object) {
            for (rel, target) in links {
                let host = relative(rel)?;
                let target =
                    world.subst(target.as_str().ok_or_else(|| format!("link {rel:?}: target is not a string"))?);
                if let Some(parent) = host.parent() {
                    mkdirs(parent)?;
                }
                std::os::unix::fs::symlink(&target, &host).map_err(|e| format!("symlink {rel}: {e}"))?;
            }
        }
        if let Some(fifos) = case.get("fifos").and_then(Value::as_array) {
            for rel in fifos {
                let host = relative(rel.as_str().ok_or("a fifo path is not a string")?)?;
                if let Some(parent) = host.parent() {
                    mkdirs(parent)?;
                }
                rustix::fs::mknodat(
                    rustix::fs::CWD,
                    &host,
                    rustix::fs::FileType::Fifo,
                    rustix::fs::Mode::from_raw_mode(0o644),
                    0,
                )
                .map_err(|e| format!("mkfifo {}: {e}", host.display()))?;
            }
        }
        if let Some(files) = case.get("host_files").and_then(Value::as_object) {
            for (path, content) in files {
                let host = PathBuf::from(world.subst(path));
                if !host.starts_with(canonical_base(&world)) {
                    return Err(format!("host file {path:?} must lie in the case's temporary directory"));
                }
                write_file(&host, content.as_str().ok_or("host file content is not a string")?)?;
            }
        }
        if let Some(files) = case.get("user_config").and_then(Value::as_object) {
            for (rel, content) in files {
                if rel.is_empty() || rel.starts_with('/') || rel.split('/').any(|p| p == "..") {
                    return Err(format!(
                        "user_config {rel:?}: paths must be relative and stay inside the config directory"
                    ));
                }
                write_file(&world.config.join(rel), &world.subst(&gen_text(content)?))?;
            }
        }
        // The gate's files: data_files (relative to the data directory -> text),
        // project_rules (the project's rules file: a text, or an object written as JSON).
        if let Some(files) = case.get("data_files").and_then(Value::as_object) {
            for (rel, content) in files {
                if rel.is_empty() || rel.starts_with('/') || rel.split('/').any(|p| p == "..") {
                    return Err(format!(
                        "data_files {rel:?}: paths must be relative and stay inside the data directory"
                    ));
                }
                write_file(&world.data.join(rel), &world.subst(&gen_text(content)?))?;
            }
        }
        if let Some(rules) = case.get("project_rules") {
            let text = match rules {
                Value::String(text) => text.clone(),
                other => serde_json::to_string_pretty(other).map_err(|e| e.to_string())?,
            };
            let project = ctxfs::gate::Project::new(&world.root, &world.data, Some(&world.config));
            write_file(&project.project_rules_path(), &world.subst(&text))?;
        }
        // Git repositories: {"NAME": [commit, …]}, each commit {"branch", "from"?, "files", "message"?}
        // made in order into the bare repository {repos}/NAME.git (see `repo_commit`).
        if let Some(repos) = case.get("repos").and_then(Value::as_object) {
            for (name, commits) in repos {
                let dir = world.repos.join(format!("{name}.git"));
                mkdirs(&dir)?;
                git(&dir, &["init", "--bare", "-q", "-b", "main"], None)?;
                for commit in commits.as_array().ok_or("repos: a repository is a list of commits")? {
                    repo_commit(&dir, commit)?;
                }
            }
        }
        if case["posture"] == "tree" {
            let view = world.root.parent().expect("ws has a parent").join("view.json");
            let text = serde_json::to_string_pretty(&world.subst_value(case.get("view").unwrap_or(&json!({}))))
                .map_err(|e| e.to_string())?;
            std::fs::write(&view, text).map_err(|e| format!("view: {e}"))?;
            world.view = Some(view);
        }
        Ok(world)
    }

    /// The workspace's host directory the server is started on: `ws`, or a directory of it after
    /// a restart that names one.
    fn boundary_dir(&self) -> PathBuf {
        match self.boundary.borrow().as_deref() {
            Some(sub) => self.root.join(sub),
            None => self.root.clone(),
        }
    }

    fn start(&self, case: &Value) -> Option<String> {
        case.get("start").and_then(Value::as_str).map(|s| self.subst(s))
    }

    fn config(&self, case: &Value) -> Result<Config, String> {
        let posture = match case["posture"].as_str() {
            Some("tree") => {
                Posture::Tree { dir: self.boundary_dir(), view: self.view.clone().expect("tree posture has a view") }
            }
            Some("device") => Posture::Device {
                root: self
                    .root_link
                    .clone()
                    .filter(|_| self.boundary.borrow().is_none())
                    .unwrap_or(self.boundary_dir()),
            },
            other => return Err(format!("unknown posture {other:?}")),
        };
        Ok(Config { start: self.start(case), data_dir: Some(self.data.clone()), ..Config::new(posture) })
    }

    fn mcp_args(&self, case: &Value) -> Vec<String> {
        let mut args = vec!["mcp".to_string()];
        match &self.view {
            Some(view) => args.extend([
                "--tree".into(),
                self.boundary_dir().to_string_lossy().into_owned(),
                "--view".into(),
                view.to_string_lossy().into_owned(),
            ]),
            None => {
                let root = self.root_link.as_ref().map(|l| l.to_string_lossy().into_owned());
                let root = match self.boundary.borrow().is_some() {
                    true => self.boundary_dir().to_string_lossy().into_owned(),
                    false => root.unwrap_or_else(|| self.root_text.clone()),
                };
                args.extend(["--root".into(), root])
            }
        }
        if let Some(start) = self.start(case) {
            args.extend(["--start".into(), start]);
        }
        args.extend(["--data".into(), self.data.to_string_lossy().into_owned()]);
        args.extend(["--config".into(), self.config_text.clone()]);
        if let Some(host) = case.get("host").and_then(Value::as_str) {
            args.extend(["--host".into(), host.to_string()]);
        }
        args.extend(["--mode".into(), case_mode(case).as_str().to_string()]);
        if let Some(timeout) = approval_timeout(case) {
            args.extend(["--approval-timeout".into(), format!("{}", timeout.as_secs_f64())]);
        }
        args
    }

    /// `ctxfs ARGS` with the case's posture flags, as a subprocess: its output and success.
    fn cli(&self, case: &Value, args: &[String]) -> Result<Answer, String> {
        let mut command = Command::new(env!("CARGO_BIN_EXE_ctxfs"));
        command.args(args);
        let mut posture = self.mcp_args(case);
        posture.remove(0);
        // Only the posture: --mode and what follows are the server's.
        if let Some(at) = posture.iter().position(|a| a == "--mode") {
            posture.truncate(at);
        }
        let output = command.args(posture).output().map_err(|e| format!("cannot run ctxfs: {e}"))?;
        let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&output.stderr));
        Ok(Answer { text, is_error: !output.status.success() })
    }
}

/// The case's mode (`mode`): trust unless the case is about the gate.
fn case_mode(case: &Value) -> ctxfs::gate::Mode {
    case.get("mode").and_then(Value::as_str).map_or(ctxfs::gate::Mode::Trust, |m| m.parse().expect("a known mode"))
}

/// The case's `approval_timeout_ms`, if any.
fn approval_timeout(case: &Value) -> Option<Duration> {
    case.get("approval_timeout_ms").and_then(Value::as_u64).map(Duration::from_millis)
}

/// The answers a case's user gives to prompts, in order (`answers`): an
/// option's id, `decline`, `cancel`, or `none` (never answers).
type Answers = std::sync::Arc<std::sync::Mutex<std::collections::VecDeque<String>>>;

/// A prompt a door saw: its text, the ids of its options and their labels.
#[derive(Debug, Clone)]
struct Prompt {
    message: String,
    options: Vec<String>,
    labels: Vec<String>,
}

/// The core door's user: answers from the case's list and keeps what it was asked.
struct ScriptedApprover {
    answers: Answers,
    asked: std::sync::Arc<std::sync::Mutex<Vec<Prompt>>>,
}

impl ctxfs::gate::Approver for ScriptedApprover {
    fn ask(&self, request: &ctxfs::gate::ApprovalRequest) -> ctxfs::gate::Approval {
        use ctxfs::gate::Approval;
        let options = request.options.iter().filter_map(|o| o.approval.id().map(str::to_string)).collect();
        let labels = request.options.iter().map(|o| o.label.clone()).collect();
        self.asked.lock().unwrap().push(Prompt { message: request.message(), options, labels });
        let Some(answer) = self.answers.lock().unwrap().pop_front() else {
            return Approval::Dismissed { why: "the case gave no answer for this prompt".into() };
        };
        match answer.as_str() {
            "decline" => Approval::Deny,
            "cancel" => Approval::Dismissed { why: "the user dismissed it".into() },
            "none" => {
                // Answers only long after the gate stopped waiting: a yes it must not take.
                std::thread::sleep(request.timeout + Duration::from_secs(3));
                Approval::AllowOnce
            }
            id => Approval::from_id(id).unwrap_or_else(|| panic!("unknown answer {id:?} in the case")),
        }
    }
}

impl World {
    /// The repository a step names (`"repo": NAME`).
    fn repo_of(&self, body: &Value) -> Result<PathBuf, String> {
        let name = body.get("repo").and_then(Value::as_str).ok_or("a repository step names its repo")?;
        Ok(self.repos.join(format!("{name}.git")))
    }
}

/// Runs `git` on the repository `dir` (tests may use the git CLI; ctxfs never does).
fn git(dir: &Path, args: &[&str], input: Option<&[u8]>) -> Result<String, String> {
    git_with_index(dir, args, input, None)
}

/// `git` with its index file at `index` (plumbing on a bare repository).
fn git_with_index(dir: &Path, args: &[&str], input: Option<&[u8]>, index: Option<&Path>) -> Result<String, String> {
    let mut command = Command::new("git");
    if args.first() == Some(&"init") {
        command.args(args).arg(dir);
    } else {
        command.arg("--git-dir").arg(dir).args(args);
    }
    if let Some(index) = index {
        command.env("GIT_INDEX_FILE", index);
    }
    command
        .env("GIT_AUTHOR_NAME", "Case")
        .env("GIT_AUTHOR_EMAIL", "case@example.com")
        .env("GIT_COMMITTER_NAME", "Case")
        .env("GIT_COMMITTER_EMAIL", "case@example.com")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().map_err(|e| format!("cannot run git: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(input.unwrap_or_default()).map_err(|e| format!("git stdin: {e}"))?;
    }
    let output = child.wait_with_output().map_err(|e| format!("git: {e}"))?;
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    if output.status.success() {
        Ok(text)
    } else {
        Err(format!("git {args:?} failed: {}{text}", String::from_utf8_lossy(&output.stderr)))
    }
}

/// One commit on a branch of a bare repository, with git's plumbing:
/// `{"branch", "from"?, "files": {path: text or null}, "message"?}`. A branch
/// not made yet starts at `from` (a branch or commit), else with no parent.
/// Answers the new commit's id.
fn repo_commit(dir: &Path, commit: &Value) -> Result<String, String> {
    let branch = commit.get("branch").and_then(Value::as_str).ok_or("a commit names its branch")?;
    let message = commit.get("message").and_then(Value::as_str).unwrap_or("A commit of the case");
    let parent = match git(dir, &["rev-parse", "--verify", "-q", &format!("refs/heads/{branch}")], None) {
        Ok(id) => Some(id.trim().to_string()),
        Err(_) => match commit.get("from").and_then(Value::as_str) {
            Some(from) => Some(git(dir, &["rev-parse", "--verify", from], None)?.trim().to_string()),
            None => None,
        },
    };
    let index = dir.join(format!("case-index-{}", std::process::id()));
    let with_index = |args: &[&str], input: Option<&[u8]>| git_with_index(dir, args, input, Some(&index));
    let _ = std::fs::remove_file(&index);
    match &parent {
        Some(parent) => with_index(&["read-tree", parent], None)?,
        None => with_index(&["read-tree", "--empty"], None)?,
    };
    for (path, content) in commit.get("files").and_then(Value::as_object).into_iter().flatten() {
        match content {
            Value::String(text) => {
                let id = git(dir, &["hash-object", "-w", "--stdin"], Some(text.as_bytes()))?;
                let info = format!("100644,{},{path}", id.trim());
                with_index(&["update-index", "--add", "--cacheinfo", &info], None)?;
            }
            Value::Null => {
                let line = format!("0 {}\t{path}\n", "0".repeat(40));
                with_index(&["update-index", "--index-info"], Some(line.as_bytes()))?;
            }
            other => return Err(format!("a commit's file {path:?}: {other} is neither a text nor null")),
        }
    }
    let tree = with_index(&["write-tree"], None)?.trim().to_string();
    let _ = std::fs::remove_file(&index);
    let mut args = vec!["commit-tree", tree.as_str(), "-m", message];
    if let Some(parent) = &parent {
        args.extend(["-p", parent.as_str()]);
    }
    let id = git(dir, &args, None)?.trim().to_string();
    git(dir, &["update-ref", &format!("refs/heads/{branch}"), &id], None)?;
    Ok(id)
}

fn canonical_base(world: &World) -> &Path {
    world.root.parent().expect("ws has a parent")
}

fn mkdirs(path: &Path) -> Result<(), String> {
    std::fs::create_dir_all(path).map_err(|e| format!("mkdir {}: {e}", path.display()))
}

fn write_file(path: &Path, content: &str) -> Result<(), String> {
    if let Some(parent) = path.parent() {
        mkdirs(parent)?;
    }
    std::fs::write(path, content).map_err(|e| format!("write {}: {e}", path.display()))
}

// ---------------------------------------------------------------------------
// Running a case
// ---------------------------------------------------------------------------

/// What a front door answered to one call.
struct Answer {
    text: String,
    is_error: bool,
}

/// One front door to a fresh session.
trait Door {
    fn call(&mut self, tool: &str, args: Value) -> Result<Answer, String>;
    /// A call whose arguments are JSON text, sent with its keys in the
    /// text's order where the door can (`args_text`; the engine takes a
    /// parsed value, so over the core it is the same as `args`).
    fn call_text(&mut self, tool: &str, args_text: &str) -> Result<Answer, String> {
        let args = serde_json::from_str(args_text).map_err(|e| format!("args_text is not JSON: {e}"))?;
        self.call(tool, args)
    }
    /// A pseudo-call other than `external_write` (an area's own steps, such
    /// as a compaction); it may answer a text checked like a call's.
    fn pseudo(&mut self, name: &str, _args: &Value) -> Result<Option<Answer>, String> {
        Err(format!("the pseudo-call {name:?} is not known to this runner"))
    }
    fn finish(&mut self) -> Result<(), String> {
        Ok(())
    }
    /// The approval prompts the door's user saw since the last call of this.
    fn prompts(&mut self) -> Vec<Prompt> {
        Vec::new()
    }
}

fn run_case(case: &Value, mode: Mode) -> Result<(), String> {
    let world = World::build(case).map_err(|e| format!("setup: {e}"))?;
    let answers: Answers = Default::default();
    answers.lock().unwrap().extend(as_list(case.get("answers")));
    let open = |world: &World| -> Result<Box<dyn Door>, String> {
        Ok(match mode {
            Mode::Core => Box::new(CoreDoor::open(world, case, &answers)?),
            Mode::Mcp => Box::new(McpDoor::open(world, case, &answers)?),
        })
    };
    let mut door = open(&world)?;
    let calls = case["calls"].as_array().ok_or("the case has no calls")?;
    let mut problems = Vec::new();
    for (index, step) in calls.iter().enumerate() {
        let number = index + 1;
        let step = &match expand(step) {
            Ok(step) => world.subst_value(&step),
            Err(why) => {
                problems.push(format!("step {number}: {why}"));
                continue;
            }
        };
        if let Some(external) = step.get("external_write") {
            let path = external["path"].as_str().ok_or("external_write without a path")?;
            let content = external["content"].as_str().ok_or("external_write without content")?;
            write_file(&world.host_path(path), content).map_err(|e| format!("step {number}: {e}"))?;
            continue;
        }
        let Some(tool) = step.get("tool").and_then(Value::as_str) else {
            // A pseudo-call: a session event ({"event": name, ...}, the step
            // is its body), else its one key that is not an expectation.
            let pseudo = match step.get("event").and_then(Value::as_str) {
                Some(event) => Some((event, step)),
                None => step
                    .as_object()
                    .and_then(|m| m.iter().find(|(k, _)| !k.starts_with("expect")))
                    .map(|(k, v)| (k.as_str(), v)),
            };
            let Some((name, body)) = pseudo else {
                problems.push(format!("step {number} has neither a tool nor a pseudo-call"));
                continue;
            };
            // A restart: the server again, over the same directories; a new session. With
            // `{"root": "sub"}` the server's boundary is that directory of the workspace.
            if name == "restart" {
                let sub = body.get("root").and_then(Value::as_str).filter(|s| !s.is_empty());
                if let Some(sub) = sub {
                    if sub.starts_with('/') || sub.split('/').any(|p| p == "..") {
                        problems.push(format!("step {number} restart: the root {sub:?} must lie in the workspace"));
                        continue;
                    }
                }
                *world.boundary.borrow_mut() = sub.map(str::to_string);
                if let Err(why) = door.finish() {
                    problems.push(format!("step {number} restart: {why}"));
                }
                door = open(&world).map_err(|e| format!("step {number} restart: {e}"))?;
                continue;
            }
            // `ctxfs ARGS` with the case's posture flags, checked like a call.
            let answered = match name {
                "cli" => {
                    let args: Vec<String> = as_list(Some(body));
                    Some(world.cli(case, &args))
                }
                // Another writer commits to a case's repository (a branch moves).
                "repo_commit" => Some(
                    world
                        .repo_of(body)
                        .and_then(|dir| repo_commit(&dir, body))
                        .map(|id| Answer { text: id, is_error: false }),
                ),
                // A repository goes missing (or comes back): {repo, to}.
                "repo_rename" => Some(world.repo_of(body).and_then(|dir| {
                    let to = body.get("to").and_then(Value::as_str).ok_or("repo_rename names where to")?;
                    std::fs::rename(&dir, world.repos.join(format!("{to}.git")))
                        .map(|()| Answer { text: String::new(), is_error: false })
                        .map_err(|e| format!("rename: {e}"))
                })),
                // `git ARGS` in a case's repository: its output, checked like a call's.
                "git" => Some(world.repo_of(body).map(|dir| {
                    let args: Vec<String> = as_list(body.get("args"));
                    let args: Vec<&str> = args.iter().map(String::as_str).collect();
                    match git(&dir, &args, None) {
                        Ok(text) => Answer { text, is_error: false },
                        Err(text) => Answer { text, is_error: true },
                    }
                })),
                _ => None,
            };
            let answered = match answered {
                Some(answer) => answer.map(Some),
                None => door.pseudo(name, body),
            };
            match answered {
                Ok(Some(answer)) => {
                    if std::env::var_os("CTXFS_CONFORMANCE_SHOW").is_some() {
                        eprintln!("--- {} [{}] step {number} {name}\n{}", case["name"], mode.name(), answer.text);
                    }
                    if let Err(why) = check(step, &answer, &world) {
                        problems.push(format!("step {number} {name}: {why}"));
                    }
                }
                Ok(None) => {}
                Err(why) => problems.push(format!("step {number} {name}: {why}")),
            }
            continue;
        };
        let args = world.subst_value(step.get("args").unwrap_or(&json!({})));
        let answered = match step.get("args_text").and_then(Value::as_str) {
            Some(text) => door.call_text(tool, text),
            None => door.call(tool, args.clone()),
        };
        let args = step.get("args_text").cloned().unwrap_or(args);
        match answered {
            Ok(answer) => {
                if std::env::var_os("CTXFS_CONFORMANCE_SHOW").is_some() {
                    eprintln!(
                        "--- {} [{}] step {number} {tool} {args} isError={}\n{}",
                        case["name"],
                        mode.name(),
                        answer.is_error,
                        answer.text
                    );
                }
                if let Err(why) = check(step, &answer, &world) {
                    problems.push(format!("step {number} {tool} {args}: {why}"));
                }
                if let Err(why) = check_prompts(step, &door.prompts(), &world) {
                    problems.push(format!("step {number} {tool} {args}: {why}"));
                }
            }
            Err(why) => {
                // The door itself broke: later calls would only repeat it.
                problems.push(format!("step {number} {tool} {args}: {why}"));
                break;
            }
        }
    }
    if let Err(why) = door.finish() {
        problems.push(why);
    }
    if let Some(after) = case.get("after") {
        problems.extend(check_after(after, &world));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

fn as_list(value: Option<&Value>) -> Vec<String> {
    match value {
        None => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => items.iter().filter_map(|v| v.as_str().map(str::to_string)).collect(),
        Some(other) => vec![other.to_string()],
    }
}

/// Compares one answer with the call's expectations.
fn check(step: &Value, answer: &Answer, world: &World) -> Result<(), String> {
    let mut wrong = Vec::new();
    let want_error = step.get("expect_error").and_then(Value::as_bool).unwrap_or(false);
    if answer.is_error != want_error {
        wrong.push(format!("isError {} where {want_error} was expected", answer.is_error));
    }
    if let Some(expect) = step.get("expect").and_then(Value::as_str) {
        let expect = world.subst(expect);
        if answer.text != expect {
            wrong.push(format!("expected\n{}\ngot\n{}", indent(&expect), indent(&answer.text)));
        }
    }
    if let Some(prefix) = step.get("expect_prefix").and_then(Value::as_str) {
        let prefix = world.subst(prefix);
        if !answer.text.starts_with(&prefix) {
            wrong.push(format!("expected a text starting with {prefix:?}, got\n{}", indent(&answer.text)));
        }
    }
    for part in as_list(step.get("expect_contains")) {
        let part = world.subst(&part);
        if !answer.text.contains(&part) {
            wrong.push(format!("expected a text containing {part:?}, got\n{}", indent(&answer.text)));
        }
    }
    if let Some(parts) = step.get("expect_in_order") {
        let mut from = 0;
        for part in as_list(Some(parts)) {
            let part = world.subst(&part);
            match answer.text[from..].find(&part) {
                Some(at) => from += at + part.len(),
                None => {
                    wrong.push(format!("expected {part:?} after what came before it, got\n{}", indent(&answer.text)));
                    break;
                }
            }
        }
    }
    for part in as_list(step.get("expect_not_contains")) {
        let part = world.subst(&part);
        if answer.text.contains(&part) {
            wrong.push(format!("expected a text without {part:?}, got\n{}", indent(&answer.text)));
        }
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(wrong.join("; "))
    }
}

/// A call's prompt expectations: `expect_prompt` ({options: [ids], contains:
/// [texts], not_contains: [texts]}: exactly one prompt, like that) or
/// `expect_no_prompt: true`.
fn check_prompts(step: &Value, prompts: &[Prompt], world: &World) -> Result<(), String> {
    let mut wrong = Vec::new();
    if step.get("expect_no_prompt").and_then(Value::as_bool) == Some(true) && !prompts.is_empty() {
        wrong.push(format!("expected no prompt, got {prompts:?}"));
    }
    if let Some(expect) = step.get("expect_prompt") {
        match prompts {
            [prompt] => {
                if let Some(options) = expect.get("options") {
                    let want = as_list(Some(options));
                    if prompt.options != want {
                        wrong.push(format!("the prompt offered {:?}, expected {want:?}", prompt.options));
                    }
                }
                if let Some(labels) = expect.get("labels") {
                    let want: Vec<String> = as_list(Some(labels)).iter().map(|l| world.subst(l)).collect();
                    if prompt.labels != want {
                        wrong.push(format!("the prompt's labels were {:?}, expected {want:?}", prompt.labels));
                    }
                }
                for part in as_list(expect.get("contains")) {
                    let part = world.subst(&part);
                    if !prompt.message.contains(&part) {
                        wrong.push(format!("expected a prompt containing {part:?}, got\n{}", indent(&prompt.message)));
                    }
                }
                for part in as_list(expect.get("not_contains")) {
                    let part = world.subst(&part);
                    if prompt.message.contains(&part) {
                        wrong.push(format!("expected a prompt without {part:?}, got\n{}", indent(&prompt.message)));
                    }
                }
            }
            other => wrong.push(format!("expected one prompt, got {}: {other:?}", other.len())),
        }
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(wrong.join("; "))
    }
}

fn indent(text: &str) -> String {
    indent_by(text, "  | ")
}

fn indent_by(text: &str, by: &str) -> String {
    text.lines().map(|l| format!("{by}{l}")).collect::<Vec<_>>().join("\n")
}

/// The disk checks of `after`.
fn check_after(after: &Value, world: &World) -> Vec<String> {
    let mut wrong = Vec::new();
    for path in as_list(after.get("exists")) {
        let host = world.host_path(&path);
        match std::fs::symlink_metadata(&host) {
            Ok(meta) if path.ends_with('/') && !meta.is_dir() => {
                wrong.push(format!("after: {path} is not a directory"))
            }
            Ok(_) => {}
            Err(_) => wrong.push(format!("after: {path} does not exist")),
        }
    }
    for path in as_list(after.get("absent")) {
        if std::fs::symlink_metadata(world.host_path(&path)).is_ok() {
            wrong.push(format!("after: {path} exists"));
        }
    }
    if let Some(contents) = after.get("content").and_then(Value::as_object) {
        for (path, want) in contents {
            let want = world.subst(want.as_str().unwrap_or_default());
            match std::fs::read(world.host_path(path)) {
                Ok(bytes) if bytes == want.as_bytes() => {}
                Ok(bytes) => {
                    wrong.push(format!("after: {path} holds {:?}, expected {want:?}", String::from_utf8_lossy(&bytes)))
                }
                Err(e) => wrong.push(format!("after: cannot read {path}: {e}")),
            }
        }
    }
    wrong
}

// ---------------------------------------------------------------------------
// (a) The engine, in process
// ---------------------------------------------------------------------------

struct CoreDoor {
    session: std::sync::Arc<ctxfs::engine::Session>,
    _engine: Engine,
    /// What the engine was built with, to build it again (`reopen`).
    config: Config,
    host: HostKind,
    user_config: PathBuf,
    /// The case's gate settings and its user, when it has answers.
    mode: ctxfs::gate::Mode,
    timeout: Option<Duration>,
    approver: Option<std::sync::Arc<ScriptedApprover>>,
}

impl CoreDoor {
    fn open(world: &World, case: &Value, answers: &Answers) -> Result<CoreDoor, String> {
        let host = match case.get("host").and_then(Value::as_str) {
            None | Some("resend") => HostKind::Resend,
            Some("fresh") => HostKind::Fresh,
            Some(other) => return Err(format!("unknown host {other:?} (resend or fresh)")),
        };
        let config = world.config(case)?;
        let approver = case
            .get("answers")
            .map(|_| std::sync::Arc::new(ScriptedApprover { answers: answers.clone(), asked: Default::default() }));
        let (mode, timeout) = (case_mode(case), approval_timeout(case));
        let engine = CoreDoor::build(&config, host, &world.config, mode, timeout)?;
        // A case without answers has a user who cannot be asked, as an MCP client without elicitation.
        let no_prompts = approver.is_none();
        let session = engine
            .open_session(SessionOptions { client_name: Some("conformance".into()), no_prompts, ..Default::default() })
            .map_err(|e| format!("open_session: {e:#}"))?;
        if let Some(approver) = &approver {
            session.set_approver(approver.clone());
        }
        Ok(CoreDoor {
            session,
            _engine: engine,
            config,
            host,
            user_config: world.config.clone(),
            mode,
            timeout,
            approver,
        })
    }

    fn build(
        config: &Config,
        host: HostKind,
        user_config: &Path,
        mode: ctxfs::gate::Mode,
        timeout: Option<Duration>,
    ) -> Result<Engine, String> {
        let config = Config {
            host,
            user_dir: Some(user_config.to_path_buf()),
            mode,
            approval_timeout: timeout.unwrap_or(ctxfs::gate::DEFAULT_TIMEOUT),
            ..config.clone()
        };
        Engine::new(config).map_err(|e| format!("Engine::new: {e:#}"))
    }

    fn engine(&self) -> Result<Engine, String> {
        CoreDoor::build(&self.config, self.host, &self.user_config, self.mode, self.timeout)
    }

    fn attach(&mut self, session: std::sync::Arc<ctxfs::engine::Session>, engine: Engine) {
        if let Some(approver) = &self.approver {
            session.set_approver(approver.clone());
        }
        self.session = session;
        self._engine = engine;
    }
}

impl Door for CoreDoor {
    fn call(&mut self, tool: &str, args: Value) -> Result<Answer, String> {
        let answer = self.session.call(tool, args);
        Ok(Answer { text: answer.text, is_error: answer.is_error })
    }

    fn prompts(&mut self) -> Vec<Prompt> {
        self.approver.as_ref().map(|a| std::mem::take(&mut *a.asked.lock().unwrap())).unwrap_or_default()
    }

    /// The session events, and `instructions`: the structured chain is
    /// checked here, the text (`Session::instructions`) is answered.
    fn pseudo(&mut self, name: &str, step: &Value) -> Result<Option<Answer>, String> {
        match name {
            "reopen" => {
                // A restart: a new engine over the same data directory, the session reopened by id.
                let id = self.session.id().to_string();
                let engine = self.engine()?;
                // The old process is gone: its session (and its store's writer) is closed first.
                let placeholder = engine.open_session(SessionOptions::default()).map_err(|e| format!("{e:#}"))?;
                drop(std::mem::replace(&mut self.session, placeholder));
                let session = engine
                    .reopen_session(
                        &id,
                        SessionOptions {
                            client_name: Some("conformance".into()),
                            no_prompts: self.approver.is_none(),
                            ..Default::default()
                        },
                    )
                    .map_err(|e| format!("reopen_session: {e:#}"))?;
                self.attach(session, engine);
                Ok(None)
            }
            "set_mode" => {
                let mode = step.get("mode").and_then(Value::as_str).ok_or("set_mode without a \"mode\"")?;
                self.session.set_mode(mode.parse()?);
                Ok(None)
            }
            "compact" => Ok(Some(Answer { text: self.session.compact(), is_error: false })),
            "rewind" => {
                let to = step.get("to").and_then(Value::as_str).ok_or("rewind without a \"to\" id")?;
                self.session.rewind(to)?;
                Ok(None)
            }
            "new_request" => {
                let carries = step.get("carries_earlier").and_then(Value::as_bool).unwrap_or(true);
                self.session.new_request(carries);
                Ok(None)
            }
            "instructions" => {
                // The chain as the doors send it (the LSP door's wire shape).
                let chain = ctxfs::lsp::protocol::InstructionChain::new(self.session.instruction_chain(), |_| None);
                let chain = serde_json::to_value(chain).map_err(|e| e.to_string())?;
                check_chain(step, &chain)?;
                Ok(Some(Answer { text: self.session.instructions(), is_error: false }))
            }
            other => Err(format!("the pseudo-call {other:?} is not known to this runner")),
        }
    }
}

/// An `instructions` step's `expect_chain` (the files, in order: `path`,
/// `origin`, `order`, `text`, each compared when given) and `expect_notes`
/// (one substring per note, as many notes as given) against the engine's chain.
fn check_chain(step: &Value, chain: &Value) -> Result<(), String> {
    let short = |v: &Value| {
        let text = v.to_string();
        if text.chars().count() > 300 {
            format!("{}…", text.chars().take(300).collect::<String>())
        } else {
            text
        }
    };
    let mut wrong = Vec::new();
    if let Some(expected) = step.get("expect_chain").and_then(Value::as_array) {
        let files = chain["files"].as_array().cloned().unwrap_or_default();
        if files.len() != expected.len() {
            wrong.push(format!(
                "expected {} instruction files, got {}: {}",
                expected.len(),
                files.len(),
                files
                    .iter()
                    .map(|f| format!("{} ({}, {})", f["path"], f["origin"], f["order"]))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        for (i, (want, got)) in expected.iter().zip(&files).enumerate() {
            for (key, value) in want.as_object().into_iter().flatten() {
                if got.get(key) != Some(value) {
                    wrong.push(format!("file {i}: {key} is {}, expected {}", short(&got[key]), short(value)));
                }
            }
        }
    }
    if let Some(expected) = step.get("expect_notes") {
        let notes: Vec<String> =
            chain["notes"].as_array().into_iter().flatten().filter_map(|n| n.as_str().map(str::to_string)).collect();
        let expected = as_list(Some(expected));
        if notes.len() != expected.len() {
            wrong.push(format!("expected {} notes, got {notes:?}", expected.len()));
        }
        for part in expected {
            if !notes.iter().any(|n| n.contains(&part)) {
                wrong.push(format!("no note mentions {part:?}: {notes:?}"));
            }
        }
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(wrong.join("; "))
    }
}

/// The same over the one text MCP has: each expected file's text in the
/// chain's order (and its path somewhere), each note's substring.
fn check_chain_text(step: &Value, text: &str) -> Result<(), String> {
    let mut wrong = Vec::new();
    let mut from = 0;
    for (i, want) in step.get("expect_chain").and_then(Value::as_array).into_iter().flatten().enumerate() {
        if let Some(body) = want.get("text").and_then(Value::as_str) {
            match text[from..].find(body.trim_end()) {
                Some(at) => from += at + body.trim_end().len(),
                None => wrong.push(format!("file {i}'s text is not in the instructions after the files before it")),
            }
        }
        if let Some(path) = want.get("path").and_then(Value::as_str) {
            if !text.contains(path) {
                wrong.push(format!("file {i}'s path {path:?} is not in the instructions"));
            }
        }
    }
    for part in as_list(step.get("expect_notes")) {
        if !text.contains(&part) {
            wrong.push(format!("no note mentions {part:?}"));
        }
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(format!("{}; the instructions were\n{}", wrong.join("; "), indent(text)))
    }
}

// ---------------------------------------------------------------------------
// (b) `ctxfs mcp` as a subprocess: newline-delimited JSON-RPC on stdio
// ---------------------------------------------------------------------------

struct McpDoor {
    /// The `instructions` of the `initialize` result.
    instructions: String,
    /// The case's user, answering `elicitation/create`, and the prompts it saw.
    answers: Answers,
    prompts: Vec<Prompt>,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    next_id: u64,
    stderr_path: PathBuf,
}

impl McpDoor {
    fn open(world: &World, case: &Value, answers: &Answers) -> Result<McpDoor, String> {
        let stderr_path = canonical_base(world).join("mcp-stderr.log");
        let stderr = std::fs::File::create(&stderr_path).map_err(|e| format!("stderr log: {e}"))?;
        let mut child = Command::new(env!("CARGO_BIN_EXE_ctxfs"))
            .args(world.mcp_args(case))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .spawn()
            .map_err(|e| format!("cannot start ctxfs mcp: {e}"))?;
        let stdout = child.stdout.take().expect("piped stdout");
        let (send, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        let mut door = McpDoor {
            instructions: String::new(),
            answers: answers.clone(),
            prompts: Vec::new(),
            child,
            stdin,
            lines,
            next_id: 0,
            stderr_path,
        };
        // A case with answers has a user who can be asked: the client elicits.
        let capabilities = if case.get("answers").is_some() { json!({"elicitation": {}}) } else { json!({}) };
        let init = door.request(
            "initialize",
            json!({
                "protocolVersion": "2025-06-18",
                "capabilities": capabilities,
                "clientInfo": {"name": "ctxfs-conformance", "version": "0"}
            }),
        )?;
        if init.get("result").is_none() {
            return Err(door.with_stderr(format!("initialize failed: {init}")));
        }
        door.instructions = init["result"]["instructions"].as_str().unwrap_or_default().to_string();
        door.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))?;
        Ok(door)
    }

    fn send(&mut self, message: &Value) -> Result<(), String> {
        let stdin = self.stdin.as_mut().ok_or("stdin already closed")?;
        let mut line = serde_json::to_string(message).expect("JSON serialises");
        line.push('\n');
        stdin.write_all(line.as_bytes()).and_then(|_| stdin.flush()).map_err(|e| format!("writing to ctxfs mcp: {e}"))
    }

    /// Sends a request and waits for the response with its id, skipping
    /// anything else the server says in between.
    fn request(&mut self, method: &str, params: Value) -> Result<Value, String> {
        let params = serde_json::to_string(&params).expect("JSON serialises");
        self.request_text(method, &params)
    }

    /// `request` with the params as JSON text, sent as they are written.
    fn request_text(&mut self, method: &str, params: &str) -> Result<Value, String> {
        self.next_id += 1;
        let id = self.next_id;
        let method_json = Value::String(method.to_string());
        let line =
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":{method_json},"params":{}}}"#, params.replace('\n', " "));
        {
            let stdin = self.stdin.as_mut().ok_or("stdin already closed")?;
            stdin
                .write_all(line.as_bytes())
                .and_then(|_| stdin.write_all(b"\n"))
                .and_then(|_| stdin.flush())
                .map_err(|e| format!("writing to ctxfs mcp: {e}"))?;
        }
        let deadline = Instant::now() + MCP_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = match self.lines.recv_timeout(left) {
                Ok(line) => line,
                Err(RecvTimeoutError::Timeout) => {
                    return Err(self.with_stderr(format!("no answer to {method} within {MCP_TIMEOUT:?}")))
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(self.with_stderr(format!("ctxfs mcp closed its output before answering {method}")))
                }
            };
            if line.trim().is_empty() {
                continue;
            }
            let message: Value = serde_json::from_str(&line)
                .map_err(|e| format!("ctxfs mcp wrote a line that is not JSON ({e}): {line}"))?;
            if message.get("id") == Some(&json!(id)) && message.get("method").is_none() {
                return Ok(message);
            }
            if message.get("method").and_then(Value::as_str) == Some("elicitation/create") {
                self.elicited(&message)?;
            }
        }
    }

    /// Answers an `elicitation/create` from the case's answers (`none`: not at all).
    fn elicited(&mut self, message: &Value) -> Result<(), String> {
        let params = &message["params"];
        let decision = &params["requestedSchema"]["properties"]["decision"];
        let strings = |list: &Value, key: Option<&str>| -> Vec<String> {
            let list = list.as_array().into_iter().flatten();
            list.filter_map(|o| key.map_or(o, |k| &o[k]).as_str().map(str::to_string)).collect()
        };
        // 2025-06-18 (which this runner speaks) defines `enum` and `enumNames`; later versions `oneOf`.
        let (options, labels) = if decision.get("oneOf").is_some() {
            (strings(&decision["oneOf"], Some("const")), strings(&decision["oneOf"], Some("title")))
        } else {
            (strings(&decision["enum"], None), strings(&decision["enumNames"], None))
        };
        let text = params["message"].as_str().unwrap_or_default().to_string();
        self.prompts.push(Prompt { message: text, options, labels });
        let answer = self.answers.lock().unwrap().pop_front();
        let result = match answer.as_deref() {
            None | Some("cancel") => json!({"action": "cancel"}),
            Some("decline") => json!({"action": "decline"}),
            Some("none") => return Ok(()),
            Some(id) => json!({"action": "accept", "content": {"decision": id}}),
        };
        self.send(&json!({"jsonrpc": "2.0", "id": message["id"], "result": result}))
    }

    fn with_stderr(&self, message: String) -> String {
        let log = std::fs::read_to_string(&self.stderr_path).unwrap_or_default();
        if log.trim().is_empty() {
            message
        } else {
            format!("{message}\n  stderr:\n{}", indent(log.trim_end()))
        }
    }
}

impl Door for McpDoor {
    fn call(&mut self, tool: &str, args: Value) -> Result<Answer, String> {
        let args = serde_json::to_string(&args).expect("JSON serialises");
        self.call_text(tool, &args)
    }

    fn call_text(&mut self, tool: &str, args_text: &str) -> Result<Answer, String> {
        let name = Value::String(tool.to_string());
        let response = self.request_text("tools/call", &format!(r#"{{"name":{name},"arguments":{args_text}}}"#))?;
        let Some(result) = response.get("result") else {
            return Err(format!("tools/call answered a protocol error instead of a result: {response}"));
        };
        let text = result["content"][0]["text"]
            .as_str()
            .ok_or_else(|| format!("result.content[0].text is missing: {result}"))?
            .to_string();
        let is_error = result.get("isError").and_then(Value::as_bool).unwrap_or(false);
        Ok(Answer { text, is_error })
    }

    fn prompts(&mut self) -> Vec<Prompt> {
        std::mem::take(&mut self.prompts)
    }

    /// `instructions` only: MCP has no method for the session events.
    fn pseudo(&mut self, name: &str, step: &Value) -> Result<Option<Answer>, String> {
        match name {
            "instructions" => {
                check_chain_text(step, &self.instructions)?;
                Ok(Some(Answer { text: self.instructions.clone(), is_error: false }))
            }
            other => Err(format!(
                "{other:?} is a session event, which MCP has no method for: run the case over the core only"
            )),
        }
    }

    /// Closes stdin and expects the server to leave on its own.
    fn finish(&mut self) -> Result<(), String> {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) if status.success() => return Ok(()),
                Ok(Some(status)) => return Err(self.with_stderr(format!("ctxfs mcp exited with {status}"))),
                Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
                Ok(None) => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    return Err("ctxfs mcp did not exit after its stdin was closed".into());
                }
                Err(e) => return Err(format!("waiting for ctxfs mcp: {e}")),
            }
        }
    }
}

impl Drop for McpDoor {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[test]
fn a_misspelt_or_mistyped_key_fails_its_case() {
    let good = json!({"name": "n", "posture": "device", "calls": [{"tool": "read", "args": {}, "expect_error": true}]});
    assert_eq!(check_keys(&good), Ok(()));
    let misspelt = json!({"name": "n", "posture": "device", "calls": [{"tool": "read", "expect_eror": true}]});
    assert!(check_keys(&misspelt).is_err_and(|e| e.contains("expect_eror")));
    let mistyped = json!({"name": "n", "posture": "device", "calls": [{"tool": "read", "expect_error": "yes"}]});
    assert!(check_keys(&mistyped).is_err_and(|e| e.contains("invalid type")));
    let unknown_posture = json!({"name": "n", "posture": "forest", "calls": []});
    assert!(check_keys(&unknown_posture).is_err_and(|e| e.contains("forest")));
}
