//! A first walk through every tool over a real temporary workspace.

use ctxfs::engine::{Config, Engine, Posture, SessionOptions};
use serde_json::json;

#[test]
fn every_tool_answers() {
    let ws = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(ws.path().join("src")).unwrap();
    std::fs::write(ws.path().join("src/a.txt"), "one\r\ntwo\r\nthree\r\n").unwrap();
    std::fs::write(ws.path().join(".gitignore"), "ignored/\n").unwrap();
    std::fs::create_dir_all(ws.path().join("ignored")).unwrap();
    std::fs::write(ws.path().join("ignored/x.txt"), "two\n").unwrap();
    let engine = device_engine(ws.path(), data.path());
    let s = engine.open_session(SessionOptions::default()).unwrap();
    let root = ws.path().canonicalize().unwrap().to_string_lossy().into_owned();
    let show = |tool: &str, args: serde_json::Value| {
        let a = s.call(tool, args);
        eprintln!("--- {tool} -> error={}\n{}", a.is_error, a.text);
        a
    };
    let r = show("read", json!({"file_path": "src/a.txt"}));
    assert!(r.text.starts_with("[#0001 src/a.txt lines 1-3 of 3 sha "), "{}", r.text);
    assert!(r.text.contains("\n2: two\n"));
    let r = show("edit", json!({"file_path": "src/a.txt", "old_string": "two\n", "new_string": "TWO\n"}));
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(std::fs::read(ws.path().join("src/a.txt")).unwrap(), b"one\r\nTWO\r\nthree\r\n");
    let r = show("read", json!({"file_path": "/etc/passwd"}));
    assert_eq!(r.text, "[#0003]\nAccess denied: /etc/passwd is not open to this session.");
    let r = show("write", json!({"file_path": "new/b.md", "content": "hello\n"}));
    assert!(r.text.ends_with("] Created, 1 line."), "{}", r.text);
    show("list", json!({}));
    let r = show("grep", json!({"pattern": "two", "ignore_case": true}));
    assert_eq!(r.text, format!("[#0006]\n{root}/src/a.txt:2:TWO\n"));
    let r = show("glob", json!({"pattern": "*.txt"}));
    assert_eq!(r.text, format!("[#0007]\n{root}/src/a.txt\n"));
    let r = show("glob", json!({"pattern": "*.txt"}));
    assert_eq!(r.text, "[#0008] Same result as #0007.");
    show("stat", json!({"path": "src/a.txt"}));
    show("mkdir", json!({"path": "d/e"}));
    show("mv", json!({"source": "new/b.md", "destination": "d/e/b.md"}));
    show("rm", json!({"path": "d"}));
    show("search", json!({"query": "three"}));
    let r = show(
        "apply_patch",
        json!({"patch": "*** Begin Patch\n*** Add File: p.txt\n+x\n*** Update File: src/a.txt\n@@\n one\n-TWO\n+2\n*** End Patch\n"}),
    );
    assert!(!r.is_error, "{}", r.text);
    show("recall", json!({"id": "#0001"}));
    show("recall", json!({"id": "ffff"}));
    let r = show("nope", json!({}));
    assert!(r.is_error);
}

/// Two trees served with one data directory both name a file `/notes.md`.
/// Each search must find its own tree's text, even when the two files have the
/// same size and modification time (which is all a refresh compares before
/// reading a file again): each tree has an index of its own.
#[test]
fn two_trees_sharing_a_data_directory_never_see_each_others_text() {
    let data = tempfile::tempdir().unwrap();
    let view = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(view.path(), r#"{"grants": {"/": "commit"}}"#).unwrap();
    let stamp = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
    let make = |word: &str| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notes.md");
        // Same length in both trees, same mtime: only the content differs.
        std::fs::write(&path, format!("the {word} protocol is described here\n")).unwrap();
        std::fs::File::options().write(true).open(&path).unwrap().set_modified(stamp).unwrap();
        dir
    };
    let (alpha, omega) = (make("alpha"), make("omega"));
    let search = |tree: &std::path::Path, query: &str| {
        let engine = Engine::new(Config {
            start: None,
            data_dir: Some(data.path().to_path_buf()),
            ..Config::new(Posture::Tree { dir: tree.to_path_buf(), view: view.path().to_path_buf() })
        })
        .unwrap();
        let session = engine.open_session(SessionOptions::default()).unwrap();
        session.call("search", json!({"query": query})).text
    };
    assert!(search(alpha.path(), "alpha protocol").contains("the alpha protocol"));
    let answer = search(omega.path(), "omega protocol");
    assert!(answer.contains("the omega protocol"), "{answer}");
    assert!(!answer.contains("alpha"), "the other tree's text leaked: {answer}");
    let answer = search(omega.path(), "alpha protocol");
    assert!(!answer.contains("the alpha protocol"), "the other tree's text leaked: {answer}");
    // Each tree's index is a database of its own in its project directory.
    let indexes: Vec<_> = std::fs::read_dir(data.path().join("projects"))
        .unwrap()
        .map(|d| d.unwrap().path().join("index.db"))
        .filter(|p| p.is_file())
        .collect();
    assert_eq!(indexes.len(), 2, "{indexes:?}");
    assert!(!data.path().join("index.db").exists());
}

/// An engine over the real directory `ws` (device posture), keeping its state in `data`.
/// Issue 17: an engine that answers one call (`ctxfs call`) starts no file
/// watcher, whose build its one search would wait for in vain; a long-lived
/// one counts changes from its first search on.
#[test]
fn a_one_off_engine_watches_nothing_and_a_lasting_one_counts_from_its_first_search() {
    let ws = tempfile::tempdir().unwrap();
    if !watchable(ws.path()) {
        return;
    }
    std::fs::create_dir_all(ws.path().join("docs")).unwrap();
    std::fs::write(ws.path().join("docs/notes.md"), "the alpha protocol is described here\n").unwrap();
    for one_off in [true, false] {
        let data = tempfile::tempdir().unwrap();
        let engine = Engine::new(Config {
            data_dir: Some(data.path().to_path_buf()),
            one_off,
            ..Config::new(Posture::Device { root: ws.path().to_path_buf() })
        })
        .unwrap();
        let session = engine.open_session(SessionOptions::default()).unwrap();
        let answer = session.call("search", json!({"query": "alpha protocol"})).text;
        assert!(answer.contains("the alpha protocol"), "{answer}");
        let root = engine.fs().boundary().clone();
        let counted = engine.fs().changes(&root);
        assert_eq!(counted.is_none(), one_off, "one-off {one_off}: the count is {counted:?}");
    }
    // The command line's one call is such an engine: its log never says it watches.
    let data = tempfile::tempdir().unwrap();
    let run = |command: &str, input: &str| {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ctxfs"))
            .arg(command)
            .arg("--root")
            .arg(ws.path())
            .arg("--data")
            .arg(data.path())
            .args(if command == "call" { vec!["search", r#"{"query": "alpha protocol"}"#] } else { vec!["-"] })
            .env("CTXFS_LOG", "ctxfs::vfs::watch=debug")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let log = run("call", "");
    assert!(!log.contains("watching"), "ctxfs call watched:\n{log}");
    let log = run("replay", "{\"call\": \"search\", \"args\": {\"query\": \"alpha protocol\"}}\n");
    assert!(log.contains("watching"), "ctxfs replay did not watch:\n{log}");
}

fn device_engine(ws: &std::path::Path, data: &std::path::Path) -> Engine {
    Engine::new(Config {
        start: None,
        data_dir: Some(data.to_path_buf()),
        ..Config::new(Posture::Device { root: ws.to_path_buf() })
    })
    .unwrap()
}

/// Whether `dir` can be watched here; says why a test skips when not.
fn watchable(dir: &std::path::Path) -> bool {
    let ok = ctxfs::vfs::watch::available(dir);
    if !ok {
        eprintln!("skipped: no inotify on a local file system for {}", dir.display());
    }
    ok
}

/// Waits (up to a bound only a broken watcher reaches) until `f` holds.
fn eventually(what: &str, f: impl Fn() -> bool) {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !f() {
        assert!(std::time::Instant::now() < until, "never happened: {what}");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Searches reuse the last walk while the file watcher counts no change; a
/// change from outside (an edit, a new directory with a file) is found by the
/// next search once the watcher has counted it.
#[test]
fn search_finds_outside_changes_once_the_watcher_counted_them() {
    let Some((engine, ws, _data)) = searched_notes() else { return };
    let session = engine.open_session(SessionOptions::default()).unwrap();
    let root = engine.fs().boundary().clone();
    let search = |query: &str| session.call("search", json!({"query": query})).text;
    let answer = search("alpha protocol");
    assert!(answer.contains("the alpha protocol") || answer.contains("Same result as"), "{answer}");

    let before = engine.fs().changes(&root).unwrap();
    std::fs::write(ws.path().join("notes.md"), "the omega protocol replaced it\n").unwrap();
    eventually("the edit is counted", || engine.fs().changes(&root).is_some_and(|now| now != before));
    let answer = search("omega protocol");
    assert!(answer.contains("the omega protocol replaced it"), "{answer}");

    let before = engine.fs().changes(&root).unwrap();
    std::fs::create_dir(ws.path().join("fresh")).unwrap();
    std::fs::write(ws.path().join("fresh/more.md"), "a gamma protocol in a new directory\n").unwrap();
    eventually("the new directory is counted", || engine.fs().changes(&root).is_some_and(|now| now != before));
    let answer = search("gamma protocol");
    assert!(answer.contains("a gamma protocol in a new directory"), "{answer}");

    // A write through ctxfs is counted before its call returns.
    let before = engine.fs().changes(&root).unwrap();
    let written = session
        .call("write", json!({"file_path": "fresh/own.md", "content": "the delta protocol, written by the agent\n"}));
    assert!(!written.is_error, "{}", written.text);
    assert_ne!(engine.fs().changes(&root), Some(before));
    let answer = search("delta protocol");
    assert!(answer.contains("the delta protocol, written by the agent"), "{answer}");
}

/// A search rooted at `sub` that reaches a file through a link leading out of
/// `sub` is not kept: the root's watcher would not see the target change.
#[test]
fn a_walk_through_a_link_out_of_its_root_is_never_reused() {
    let ws = tempfile::tempdir().unwrap();
    if !watchable(ws.path()) {
        return;
    }
    let data = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(ws.path().join("other")).unwrap();
    std::fs::create_dir_all(ws.path().join("sub")).unwrap();
    std::fs::write(ws.path().join("other/target.md"), "the alpha protocol lives elsewhere\n").unwrap();
    std::os::unix::fs::symlink("../other/target.md", ws.path().join("sub/link.md")).unwrap();
    let engine = device_engine(ws.path(), data.path());
    let session = engine.open_session(SessionOptions::default()).unwrap();
    let sub = ctxfs::paths::VPath::parse(&format!("{}/sub", engine.fs().boundary())).unwrap();
    let search = |query: &str| session.call("search", json!({"query": query, "path": "sub"})).text;
    assert!(search("alpha protocol").contains("the alpha protocol lives elsewhere"));
    eventually("the watcher covers sub", || engine.fs().changes(&sub).is_some());
    let answer = search("protocol alpha");
    assert!(answer.contains("the alpha protocol lives elsewhere"), "{answer}");
    // Changed where sub's watcher does not look.
    std::fs::write(ws.path().join("other/target.md"), "the omega protocol lives elsewhere\n").unwrap();
    let answer = search("omega protocol");
    assert!(answer.contains("the omega protocol lives elsewhere"), "{answer}");
}

/// Once a session has searched, the index follows the tree's changes from
/// outside between calls: an edit is indexed with no call at all, and the
/// next search finds it.
#[test]
fn outside_changes_are_indexed_between_calls() {
    let Some((engine, ws, data)) = searched_notes() else { return };
    let session = engine.open_session(SessionOptions::default()).unwrap();
    let indexed = |text: &str| {
        let db = rusqlite::Connection::open(data.path().join("index.db")).unwrap();
        let sha: Vec<u8> = db
            .query_row("SELECT blob FROM files WHERE path LIKE '%/notes.md'", [], |row| row.get(0))
            .unwrap_or_default();
        sha == ctxfs::hash::sha256(text.as_bytes()).to_vec()
    };
    assert!(indexed("the alpha protocol is described here\n"));
    // Edited from outside, with no call after it.
    let edited = "the omega protocol replaced it\n";
    std::fs::write(ws.path().join("notes.md"), edited).unwrap();
    eventually("the edit is indexed between calls", || indexed(edited));
    let answer = session.call("search", json!({"query": "omega protocol"})).text;
    assert!(answer.contains("the omega protocol replaced it"), "{answer}");
}

/// A watched tree with one note, an engine over it whose session searched
/// it once, and the watcher covering it (`None`, said, where nothing can be
/// watched). Searches are rooted at the start directory, the boundary.
fn searched_notes() -> Option<(Engine, tempfile::TempDir, tempfile::TempDir)> {
    let ws = tempfile::tempdir().unwrap();
    if !watchable(ws.path()) {
        return None;
    }
    let data = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("notes.md"), "the alpha protocol is described here\n").unwrap();
    let engine = device_engine(ws.path(), data.path());
    let session = engine.open_session(SessionOptions::default()).unwrap();
    let answer = session.call("search", json!({"query": "alpha protocol"})).text;
    assert!(answer.contains("the alpha protocol"), "{answer}");
    let root = engine.fs().boundary().clone();
    eventually("the watcher covers the tree", || engine.fs().changes(&root).is_some());
    Some((engine, ws, data))
}
