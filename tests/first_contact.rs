//! Regressions of issue 13 ("first contact") that conformance cases cannot
//! express: the binary run as another user, its help texts and exit codes.
//! Each test starts `ctxfs` as a child process and waits for it to end.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

const CTXFS: &str = env!("CARGO_BIN_EXE_ctxfs");

/// `ctxfs replay` over `root` with `script` on stdin, as the user `uid`
/// (through setpriv when that is not who runs the test): its stdout and success.
fn replay_as(uid: Option<u32>, root: &Path, data: &Path, script: &str) -> (String, bool) {
    let mut command = match uid {
        Some(uid) => {
            let mut c = Command::new("setpriv");
            c.args([format!("--reuid={uid}"), format!("--regid={uid}"), "--clear-groups".into(), CTXFS.into()]);
            c
        }
        None => Command::new(CTXFS),
    };
    command
        .args(["replay", "--root"])
        .arg(root)
        .arg("--data")
        .arg(data)
        .arg("--config")
        .arg(data.join("config"))
        .arg("-")
        .env("HOME", data)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("ctxfs replay starts");
    child.stdin.take().unwrap().write_all(script.as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.stderr.is_empty() || output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    (text, output.status.success())
}

/// Issue 13, item 7: a 0444 file in a directory the user may write is not
/// replaced by an unprivileged user either (the temp-and-rename would pass
/// its bits by). Run as `nobody` when the test runs as root.
#[test]
fn write_protected_file_refused_for_an_unprivileged_user() {
    use std::os::unix::fs::{chown, PermissionsExt};
    let base = tempfile::tempdir().unwrap();
    let root = base.path().join("ws");
    let data = base.path().join("data");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(data.join("config")).unwrap();
    std::fs::write(root.join("ro.txt"), "keep\n").unwrap();
    std::fs::set_permissions(root.join("ro.txt"), std::fs::Permissions::from_mode(0o444)).unwrap();
    let as_root = rustix::process::geteuid().is_root();
    let uid = as_root.then_some(65534);
    if let Some(uid) = uid {
        std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        for dir in [&root, &data, &data.join("config")] {
            chown(dir, Some(uid), Some(uid)).unwrap();
        }
        chown(root.join("ro.txt"), Some(uid), Some(uid)).unwrap();
    }
    let script = concat!(
        r#"{"call": "read", "args": {"file_path": "ro.txt"}}"#,
        "\n",
        r#"{"call": "edit", "args": {"file_path": "ro.txt", "old_string": "keep", "new_string": "lost"}}"#,
        "\n",
        r#"{"call": "stat", "args": {"path": "ro.txt"}}"#,
        "\n"
    );
    let (out, _) = replay_as(uid, &root, &data, script);
    let lines: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert_eq!(lines[1]["is_error"], true, "{out}");
    assert!(lines[1]["text"].as_str().unwrap().contains("Write-protected:"), "{out}");
    assert!(lines[2]["text"].as_str().unwrap().contains("this session may: read only (the file is write-protected)"));
    assert_eq!(std::fs::read_to_string(root.join("ro.txt")).unwrap(), "keep\n");
}

/// `ctxfs call` with the given arguments: its stdout, stderr and success.
fn call(args: &[&str]) -> (String, String, bool) {
    let output = Command::new(CTXFS).args(args).output().expect("ctxfs call starts");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (text(&output.stdout), text(&output.stderr), output.status.success())
}

/// Issue 13, item 13: a data directory inside the boundary (`--root ~` with
/// the default one) is hidden from the session, not refused, and stderr says so.
#[test]
fn a_data_directory_inside_the_root_is_hidden_not_refused() {
    let base = tempfile::tempdir().unwrap();
    let root = base.path().canonicalize().unwrap();
    let data = root.join(".local/share/ctxfs");
    std::fs::write(root.join("notes.txt"), "hello\n").unwrap();
    let (root_text, data_text, config) =
        (root.to_str().unwrap(), data.to_str().unwrap(), root.join("config").to_str().unwrap().to_string());
    let posture = ["--root", root_text, "--data", data_text, "--config", config.as_str()];
    let run = |tool: &str, args: &str| {
        let mut all = vec!["call"];
        all.extend(posture);
        all.extend([tool, args]);
        call(&all)
    };
    let (out, err, ok) = run("read", r#"{"file_path": "notes.txt"}"#);
    assert!(ok, "{out}{err}");
    assert!(out.contains("1: hello"), "{out}");
    assert!(err.contains("is hidden from every session"), "stderr should say where the data went: {err}");
    assert!(data.join("sessions.db").exists(), "the data directory is used");
    let (out, _, ok) = run("list", r#"{"path": ".local/share"}"#);
    assert!(ok && !out.contains("ctxfs"), "the data directory is listed:\n{out}");
    let (out, _, ok) = run("read", &format!(r#"{{"file_path": "{data_text}/sessions.db"}}"#));
    assert!(!ok && out.contains("No such file or directory"), "the data directory reads as missing:\n{out}");
    let (out, _, ok) = run("glob", r#"{"pattern": "**/sessions.db"}"#);
    assert!(ok && !out.contains("sessions.db\n") && !out.contains(".local/share/ctxfs/"), "{out}");
    let (out, _, ok) = run("write", r#"{"file_path": ".local/share/ctxfs/x.txt", "content": "x"}"#);
    assert!(!ok, "a write into the data directory is refused:\n{out}");
    assert!(!data.join("x.txt").exists());
}

/// A start directory outside the boundary is read as the boundary (as the
/// reference says), and the user is told so on stderr rather than left to guess.
#[test]
fn a_start_outside_the_root_is_said_and_read_as_the_root() {
    let root = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    std::fs::write(root.path().join("a.txt"), "a\n").unwrap();
    let run = |start: &str| {
        Command::new(CTXFS)
            .args(["call", "--root"])
            .arg(root.path())
            .arg("--data")
            .arg(data.path())
            .args(["--start", start, "read", r#"{"file_path": "a.txt"}"#])
            .output()
            .unwrap()
    };
    for outside in ["/", "..", "../.."] {
        let output = run(outside);
        assert!(output.status.success(), "--start {outside}: {}", String::from_utf8_lossy(&output.stderr));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(&format!("the start directory {outside} lies outside the boundary")), "{stderr}");
        assert!(stderr.contains("sessions start at the boundary"), "{stderr}");
        assert!(String::from_utf8_lossy(&output.stdout).contains("1: a"), "a.txt is read from the boundary");
    }
    let inside = run(".");
    assert!(!String::from_utf8_lossy(&inside.stderr).contains("outside the boundary"), "inside: no note");
}

/// `ctxfs mcp` started by hand in a terminal says on stderr that it waits for a
/// client; given a pipe (as clients do) it says nothing there.
#[test]
fn a_server_started_in_a_terminal_says_it_waits_for_a_client() {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    let root = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let pty = rustix::pty::openpt(rustix::pty::OpenptFlags::RDWR | rustix::pty::OpenptFlags::NOCTTY).unwrap();
    rustix::pty::grantpt(&pty).unwrap();
    rustix::pty::unlockpt(&pty).unwrap();
    let name = rustix::pty::ptsname(&pty, Vec::new()).unwrap();
    let terminal = std::fs::OpenOptions::new().read(true).write(true).open(name.to_str().unwrap()).unwrap();
    let mut child = Command::new(CTXFS)
        .args(["mcp", "--root"])
        .arg(root.path())
        .arg("--data")
        .arg(data.path())
        .stdin(terminal)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut first = Vec::new();
        let mut byte = [0u8; 1];
        while stderr.read(&mut byte).unwrap_or(0) == 1 && byte[0] != b'\n' {
            first.push(byte[0]);
        }
        let _ = sender.send(first);
    });
    // A guard against a hang only (the server waits for its client forever), not a measure.
    let first = receiver.recv_timeout(std::time::Duration::from_secs(60));
    let pgid = rustix::process::Pid::from_child(&child);
    let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
    let _ = child.wait();
    drop(pty);
    let first = first.expect("ctxfs mcp said nothing on stderr");
    let first = String::from_utf8_lossy(&first);
    assert!(first.starts_with("ctxfs mcp: waiting for an MCP client"), "{first}");

    let piped = Command::new(CTXFS)
        .args(["mcp", "--root"])
        .arg(root.path())
        .arg("--data")
        .arg(data.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&piped.stderr).contains("waiting for"), "a pipe gets no note");
}

/// `ctxfs replay` answers every line, a bad one with "error", and then exits
/// non-zero when any line was not a step it knows; a tool's refusal is not one.
#[test]
fn replay_answers_every_line_and_fails_after_a_bad_step() {
    let root = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    std::fs::write(root.path().join("a.txt"), "a\n").unwrap();
    let good = "{\"call\": \"read\", \"args\": {\"file_path\": \"a.txt\"}}\n\
                {\"call\": \"read\", \"args\": {\"file_path\": \"missing.txt\"}}\n\
                // a comment\n\
                {\"event\": \"new_request\"}\n";
    let (text, ok) = replay_as(None, root.path(), data.path(), good);
    assert!(ok, "a script of known steps succeeds, a tool's refusal included: {text}");
    assert_eq!(text.lines().count(), 3, "{text}");
    let bad = format!(
        "{good}{{\"event\": \"teleport\"}}\nnot json\n{{\"call\": \"read\", \"args\": {{\"file_path\": \"a.txt\"}}}}\n"
    );
    let mut command = Command::new(CTXFS);
    command.args(["replay", "--root"]).arg(root.path()).arg("--data").arg(data.path()).arg("-");
    let mut child = command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(bad.as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(!output.status.success(), "an unknown event and a line that is not JSON fail the replay");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 6, "every line is answered, the last one too: {text}");
    assert!(lines[3].contains("unknown event") && lines[4].contains("not a step"), "{text}");
    assert!(lines[5].contains("\"is_error\":false"), "the script went on after the bad lines: {text}");
    assert!(String::from_utf8_lossy(&output.stderr).contains("not steps it knows"));
}

/// The long flags a command's `--help` lists (`-h, --help` aside).
fn flags_of(command: &[&str]) -> Vec<String> {
    let mut args = command.to_vec();
    args.push("--help");
    let (out, err, ok) = call(&args);
    assert!(ok, "{out}{err}");
    out.lines()
        .filter_map(|l| l.trim_start().strip_prefix("--"))
        .map(|l| l.split([' ', ',']).next().unwrap_or_default().to_string())
        .collect()
}

/// Issue 13, item 19: each command lists only the flags that do something
/// there, and the help texts say things in plain words.
#[test]
fn each_command_lists_only_the_flags_that_do_something_there() {
    let place = ["tree", "view", "root", "data", "config"];
    let with = |extra: &[&str]| -> Vec<String> { place.iter().chain(extra).map(|s| s.to_string()).collect() };
    // The index walks and embeds: no host, no approvals.
    assert_eq!(flags_of(&["index"]), with(&["start", "embedder", "embedder-model", "path"]));
    // Grants are the project's: no session at all.
    assert_eq!(flags_of(&["grants", "list"]), with(&[]));
    assert_eq!(flags_of(&["grants", "revoke"]), with(&[]));
    // One call: nobody to ask, no earlier results.
    assert_eq!(flags_of(&["call"]), with(&["start", "mode", "embedder", "embedder-model", "session"]));
    assert_eq!(
        flags_of(&["mcp"]),
        with(&["start", "host", "mode", "approval-timeout", "embedder", "embedder-model", "session"])
    );
    for command in
        [&["mcp"][..], &["lsp"], &["acp"], &["call"], &["replay"], &["index"], &["grants", "list"], &["chunk"]]
    {
        let mut args = command.to_vec();
        args.push("--help");
        let (out, _, _) = call(&args);
        for jargon in ["posture", "world", "boundary"] {
            assert!(!out.contains(jargon), "`ctxfs {} --help` says {jargon:?}:\n{out}", command.join(" "));
        }
    }
}

/// Issue 13, item 20: `ctxfs chunk` cuts as search does by default (the
/// installed embedder's tokenizer), not by the bytes stand-in.
#[test]
fn chunk_cuts_as_search_does_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("text.md");
    let text: String = (0..400).map(|i| format!("Paragraph {i}: tokenizers count words differently.\n\n")).collect();
    std::fs::write(&file, text).unwrap();
    let file = file.to_str().unwrap();
    let (default, err, ok) = call(&["chunk", file]);
    assert!(ok, "{err}");
    let (model, err, ok) = call(&["chunk", "--tokenizer", "model", file]);
    assert!(ok, "the model tokenizer is installed (scripts/build-embedder): {err}");
    let (bytes, _, _) = call(&["chunk", "--tokenizer", "bytes", file]);
    assert_eq!(default, model);
    assert_ne!(default, bytes);
}

/// Issue 13, item 20: `ctxfs index` says on stderr how many files it left out and why.
#[test]
fn index_says_what_it_left_out_and_why() {
    let base = tempfile::tempdir().unwrap();
    let root = base.path().join("ws");
    std::fs::create_dir_all(root.join("node_modules/lib")).unwrap();
    std::fs::write(root.join(".gitignore"), "node_modules/\n").unwrap();
    std::fs::write(root.join("node_modules/lib/index.js"), "x\n").unwrap();
    std::fs::write(root.join("notes.md"), "the alpha protocol\n").unwrap();
    std::fs::write(root.join("logo.png"), b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\xff\xfe").unwrap();
    let data = base.path().join("data");
    let (out, err, ok) = call(&["index", "--root", root.to_str().unwrap(), "--data", data.to_str().unwrap()]);
    assert!(ok, "{out}{err}");
    assert!(out.contains(": 2 files"), "{out}");
    let said = "ctxfs index: skipped 1 file: 1 not text (binary); not walked: 1 named by ignore files (.gitignore, .ignore, .rgignore) and 1 hidden (names starting with a dot) (files or directories, each with all below it).";
    assert!(err.contains(said), "{err}");
}
