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
//! A new area is one more test function: `#[test] fn area() { run_area("area"); }`.

use ctxfs::engine::{Config, Engine, Posture, SessionOptions};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

#[test]
fn fs_access() {
    run_area("fs_access");
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
    let doc: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not valid JSON: {e}", path.display()));
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
    let mut ran = 0usize;
    for case in cases {
        let name = case["name"].as_str().unwrap_or("<unnamed>").to_string();
        if !names.insert(name.clone()) {
            failures.push(format!("{area}/{name}: the name is used by more than one case"));
        }
        if filter.as_deref().is_some_and(|f| !name.contains(f)) {
            continue;
        }
        ran += 1;
        let known_bug = case.get("known_bug").and_then(Value::as_str);
        let mut problems = Vec::new();
        for &mode in &modes {
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

// ---------------------------------------------------------------------------
// The workspace of one case
// ---------------------------------------------------------------------------

/// A case's host directories, all under one temporary directory:
/// `ws` (the workspace, `{root}`), `outside` (`{outside}`), `data`, `view.json`.
struct World {
    _base: tempfile::TempDir,
    root: PathBuf,
    data: PathBuf,
    view: Option<PathBuf>,
    root_text: String,
    outside_text: String,
}

impl World {
    fn subst(&self, text: &str) -> String {
        text.replace("{root}", &self.root_text).replace("{outside}", &self.outside_text)
    }

    fn subst_value(&self, value: &Value) -> Value {
        match value {
            Value::String(s) => Value::String(self.subst(s)),
            Value::Array(items) => Value::Array(items.iter().map(|v| self.subst_value(v)).collect()),
            Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (self.subst(k), self.subst_value(v))).collect()),
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
        for dir in [&root, &outside, &data] {
            std::fs::create_dir_all(dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
        }
        std::fs::write(outside.join("secret.txt"), "TOP-SECRET").map_err(|e| format!("secret: {e}"))?;
        let mut world = World {
            root_text: root.to_str().ok_or("non-UTF-8 temp dir")?.to_string(),
            outside_text: outside.to_str().ok_or("non-UTF-8 temp dir")?.to_string(),
            _base: base,
            root,
            data,
            view: None,
        };

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
                    other => return Err(format!("tree entry {rel:?}: {other} is neither a string nor null")),
                }
            }
        }
        if let Some(links) = case.get("links").and_then(Value::as_object) {
            for (rel, target) in links {
                let host = relative(rel)?;
                let target = world.subst(target.as_str().ok_or_else(|| format!("link {rel:?}: target is not a string"))?);
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
                rustix::fs::mknodat(rustix::fs::CWD, &host, rustix::fs::FileType::Fifo, rustix::fs::Mode::from_raw_mode(0o644), 0)
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
        if case["posture"] == "tree" {
            let view = world.root.parent().expect("ws has a parent").join("view.json");
            let text = serde_json::to_string_pretty(case.get("view").unwrap_or(&json!({}))).map_err(|e| e.to_string())?;
            std::fs::write(&view, text).map_err(|e| format!("view: {e}"))?;
            world.view = Some(view);
        }
        Ok(world)
    }

    fn start(&self, case: &Value) -> Option<String> {
        case.get("start").and_then(Value::as_str).map(|s| self.subst(s))
    }

    fn config(&self, case: &Value) -> Result<Config, String> {
        let posture = match case["posture"].as_str() {
            Some("tree") => Posture::Tree { dir: self.root.clone(), view: self.view.clone().expect("tree posture has a view") },
            Some("device") => Posture::Device { root: self.root.clone() },
            other => return Err(format!("unknown posture {other:?}")),
        };
        Ok(Config { posture, start: self.start(case), data_dir: Some(self.data.clone()) })
    }

    fn mcp_args(&self, case: &Value) -> Vec<String> {
        let mut args = vec!["mcp".to_string()];
        match &self.view {
            Some(view) => {
                args.extend(["--tree".into(), self.root_text.clone(), "--view".into(), view.to_string_lossy().into_owned()])
            }
            None => args.extend(["--root".into(), self.root_text.clone()]),
        }
        if let Some(start) = self.start(case) {
            args.extend(["--start".into(), start]);
        }
        args.extend(["--data".into(), self.data.to_string_lossy().into_owned()]);
        args
    }
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
    /// A pseudo-call other than `external_write` (an area's own steps, such
    /// as a compaction); it may answer a text checked like a call's.
    fn pseudo(&mut self, name: &str, _args: &Value) -> Result<Option<Answer>, String> {
        Err(format!("the pseudo-call {name:?} is not known to this runner"))
    }
    fn finish(&mut self) -> Result<(), String> {
        Ok(())
    }
}

fn run_case(case: &Value, mode: Mode) -> Result<(), String> {
    let world = World::build(case).map_err(|e| format!("setup: {e}"))?;
    let mut door: Box<dyn Door> = match mode {
        Mode::Core => Box::new(CoreDoor::open(&world, case)?),
        Mode::Mcp => Box::new(McpDoor::open(&world, case)?),
    };
    let calls = case["calls"].as_array().ok_or("the case has no calls")?;
    let mut problems = Vec::new();
    for (index, step) in calls.iter().enumerate() {
        let number = index + 1;
        if let Some(external) = step.get("external_write") {
            let path = external["path"].as_str().ok_or("external_write without a path")?;
            let content = external["content"].as_str().ok_or("external_write without content")?;
            write_file(&world.host_path(path), content).map_err(|e| format!("step {number}: {e}"))?;
            continue;
        }
        let Some(tool) = step.get("tool").and_then(Value::as_str) else {
            // A pseudo-call: its one key that is not an expectation names it.
            let pseudo = step.as_object().and_then(|m| m.iter().find(|(k, _)| !k.starts_with("expect")));
            let Some((name, body)) = pseudo else {
                problems.push(format!("step {number} has neither a tool nor a pseudo-call"));
                continue;
            };
            match door.pseudo(name, &world.subst_value(body)) {
                Ok(Some(answer)) => {
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
        match door.call(tool, args.clone()) {
            Ok(answer) => {
                if std::env::var_os("CTXFS_CONFORMANCE_SHOW").is_some() {
                    eprintln!("--- {} [{}] step {number} {tool} {args} isError={}\n{}", case["name"], mode.name(), answer.is_error, answer.text);
                }
                if let Err(why) = check(step, &answer, &world) {
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
            Ok(meta) if path.ends_with('/') && !meta.is_dir() => wrong.push(format!("after: {path} is not a directory")),
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
                Ok(bytes) => wrong.push(format!(
                    "after: {path} holds {:?}, expected {want:?}",
                    String::from_utf8_lossy(&bytes)
                )),
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
}

impl CoreDoor {
    fn open(world: &World, case: &Value) -> Result<CoreDoor, String> {
        let engine = Engine::new(world.config(case)?).map_err(|e| format!("Engine::new: {e:#}"))?;
        let session = engine
            .open_session(SessionOptions { client_name: Some("conformance".into()), roots: None })
            .map_err(|e| format!("open_session: {e:#}"))?;
        Ok(CoreDoor { session, _engine: engine })
    }
}

impl Door for CoreDoor {
    fn call(&mut self, tool: &str, args: Value) -> Result<Answer, String> {
        let answer = self.session.call(tool, args);
        Ok(Answer { text: answer.text, is_error: answer.is_error })
    }
}

// ---------------------------------------------------------------------------
// (b) `ctxfs mcp` as a subprocess: newline-delimited JSON-RPC on stdio
// ---------------------------------------------------------------------------

struct McpDoor {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    next_id: u64,
    stderr_path: PathBuf,
}

impl McpDoor {
    fn open(world: &World, case: &Value) -> Result<McpDoor, String> {
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
        let mut door = McpDoor { child, stdin, lines, next_id: 0, stderr_path };
        let init = door.request(
            "initialize",
            json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "ctxfs-conformance", "version": "0"}
            }),
        )?;
        if init.get("result").is_none() {
            return Err(door.with_stderr(format!("initialize failed: {init}")));
        }
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
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
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
            let message: Value =
                serde_json::from_str(&line).map_err(|e| format!("ctxfs mcp wrote a line that is not JSON ({e}): {line}"))?;
            if message.get("id") == Some(&json!(id)) && message.get("method").is_none() {
                return Ok(message);
            }
        }
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
        let response = self.request("tools/call", json!({"name": tool, "arguments": args}))?;
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
