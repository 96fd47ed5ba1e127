//! Mounted repositories with several sessions at once: what one session
//! stages is invisible to every other (a property test over random changes),
//! two sessions staging in one mount both commit, and a commit merges onto a
//! branch another session moved. Repositories are made with the `git` CLI,
//! which tests may use (ctxfs never does). Single-session rules are data:
//! `conformance/mounts.json`.

#![cfg(unix)]

use ctxfs::engine::{Config, Engine, Posture, Session, SessionOptions};
use proptest::prelude::*;
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

fn git(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "Test")
        .env("GIT_AUTHOR_EMAIL", "test@example.com")
        .env("GIT_COMMITTER_NAME", "Test")
        .env("GIT_COMMITTER_EMAIL", "test@example.com")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .expect("git runs");
    assert!(output.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A workspace with a non-bare repository `app` on `main` holding `files`,
/// mounted at /Repos/app at `commit`; the engine over it.
struct World {
    _dir: tempfile::TempDir,
    repo: std::path::PathBuf,
    engine: Engine,
}

fn world(files: &[(&str, &str)]) -> World {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    let (ws, repo, data) = (base.join("ws"), base.join("app"), base.join("data"));
    for d in [&ws, &repo, &data] {
        std::fs::create_dir_all(d).unwrap();
    }
    git(&repo, &["init", "-q", "-b", "main"]);
    for (path, text) in files {
        let host = repo.join(path);
        std::fs::create_dir_all(host.parent().unwrap()).unwrap();
        std::fs::write(host, text).unwrap();
    }
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "First"]);
    let view = base.join("view.json");
    let text = json!({
        "grants": {"/": "ro", "/Repos/app": "commit"},
        "mounts": {"/Repos/app": {"repo": repo.to_str().unwrap(), "branch": "main"}}
    });
    std::fs::write(&view, text.to_string()).unwrap();
    let mut config = Config::new(Posture::Tree { dir: ws, view });
    config.data_dir = Some(data);
    // No user's own configuration is read.
    config.user_dir = None;
    World { _dir: dir, repo, engine: Engine::new(config).unwrap() }
}

fn session(world: &World) -> Arc<Session> {
    world.engine.open_session(SessionOptions::default()).unwrap()
}

/// A call's text without its id bracket's number, and whether it failed.
fn call(session: &Session, tool: &str, args: Value) -> (String, bool) {
    let answer = session.call(tool, args);
    let text = answer.text.split_once('\n').map_or(answer.text.clone(), |(head, rest)| {
        let head = head.split_once(' ').map_or("[#]".to_string(), |(_, h)| format!("[# {h}"));
        format!("{head}\n{rest}")
    });
    (text, answer.is_error)
}

fn ok(session: &Session, tool: &str, args: Value) -> String {
    let (text, error) = call(session, tool, args.clone());
    assert!(!error, "{tool} {args} failed: {text}");
    text
}

const FILES: &[(&str, &str)] =
    &[("README.md", "# App\nline two\n"), ("src/lib.rs", "fn lib() {}\n"), ("docs/guide.md", "guide\n")];

#[test]
fn two_sessions_stage_apart_and_both_commit() {
    let w = world(FILES);
    let (a, b) = (session(&w), session(&w));
    ok(&a, "write", json!({"file_path": "/Repos/app/a.txt", "content": "from a\n"}));
    ok(&b, "read", json!({"file_path": "/Repos/app/README.md"}));
    ok(&b, "edit", json!({"file_path": "/Repos/app/README.md", "old_string": "line two", "new_string": "line 2"}));
    // Neither sees the other's staged change.
    let (text, error) = call(&b, "read", json!({"file_path": "/Repos/app/a.txt"}));
    assert!(error && text.contains("No such file or directory: /Repos/app/a.txt"), "{text}");
    assert!(ok(&a, "read", json!({"file_path": "/Repos/app/README.md"})).contains("2: line two\n"));
    // A commits; B's working copy follows the branch and keeps its own change.
    assert!(ok(&a, "commit", json!({"path": "/Repos/app", "message": "From a"})).contains("A /Repos/app/a.txt"));
    assert!(ok(&b, "read", json!({"file_path": "/Repos/app/a.txt"})).contains("1: from a\n"));
    assert!(ok(&b, "read", json!({"file_path": "/Repos/app/README.md"})).contains("2: line 2\n"));
    let committed = ok(&b, "commit", json!({"path": "/Repos/app", "message": "From b"}));
    assert!(committed.contains("M /Repos/app/README.md") && !committed.contains("a.txt"), "{committed}");
    assert_eq!(git(&w.repo, &["log", "--format=%s", "main"]), "From b\nFrom a\nFirst\n");
    assert_eq!(git(&w.repo, &["show", "main:README.md"]), "# App\nline 2\n");
}

#[test]
fn a_commit_onto_a_branch_another_session_moved_under_the_same_line_is_refused() {
    let w = world(FILES);
    let (a, b) = (session(&w), session(&w));
    for (s, word) in [(&a, "alpha"), (&b, "beta")] {
        ok(s, "read", json!({"file_path": "/Repos/app/README.md"}));
        ok(s, "edit", json!({"file_path": "/Repos/app/README.md", "old_string": "line two", "new_string": word}));
    }
    ok(&a, "commit", json!({"path": "/Repos/app", "message": "Alpha"}));
    let (text, error) = call(&b, "commit", json!({"path": "/Repos/app", "message": "Beta"}));
    assert!(error, "{text}");
    assert!(
        text.contains("Not committed: main has moved since") && text.contains("the change stays staged."),
        "{text}"
    );
    assert!(ok(&b, "read", json!({"file_path": "/Repos/app/README.md"})).contains("2: beta\n"));
    assert_eq!(git(&w.repo, &["show", "main:README.md"]), "# App\nalpha\n");
}

#[test]
fn a_reopened_session_finds_its_staged_change() {
    let w = world(FILES);
    let a = session(&w);
    ok(&a, "write", json!({"file_path": "/Repos/app/kept.txt", "content": "kept\n"}));
    let id = a.id().to_string();
    drop(a);
    let again = w.engine.reopen_session(&id, SessionOptions::default()).unwrap();
    assert!(ok(&again, "read", json!({"file_path": "/Repos/app/kept.txt"})).contains("1: kept\n"));
}

/// One change session A may make inside the mount.
#[derive(Debug, Clone)]
enum Change {
    Write(usize, String),
    Edit(usize),
    Rm(usize),
    Mv(usize, usize),
    Mkdir(usize),
}

const NAMES: &[&str] = &["README.md", "src/lib.rs", "docs/guide.md", "docs", "src", "new.md", "src/new.rs", "x/y.md"];

fn change() -> impl Strategy<Value = Change> {
    let name = 0..NAMES.len();
    prop_oneof![
        (name.clone(), "[a-z ]{0,12}").prop_map(|(n, t)| Change::Write(n, t)),
        name.clone().prop_map(Change::Edit),
        name.clone().prop_map(Change::Rm),
        (name.clone(), name.clone()).prop_map(|(a, b)| Change::Mv(a, b)),
        name.prop_map(Change::Mkdir),
    ]
}

/// A search by another session finds neither the words one session staged nor loses the
/// branch's own words, whichever session searched first; the index is shared by both.
#[test]
fn one_sessions_staged_words_are_never_found_by_another() {
    let w = world(FILES);
    let (a, b) = (session(&w), session(&w));
    let search = |s: &Session, query: &str| ok(s, "search", json!({"query": query, "path": "/Repos/app"}));
    // B searches first, so the index and its walk of the mount exist before A stages anything.
    assert!(search(&b, "line two").contains("README.md"));
    ok(&a, "read", json!({"file_path": "/Repos/app/README.md"}));
    ok(&a, "write", json!({"file_path": "/Repos/app/README.md", "content": "zebrafish quagga okapi\n"}));
    ok(&a, "write", json!({"file_path": "/Repos/app/src/new.rs", "content": "fn zebrafish_okapi() {}\n"}));
    assert!(search(&a, "zebrafish quagga okapi").contains("README.md"), "A finds what it staged");
    // B, then A, then B again (so each search follows the other session's indexing); a repeated
    // identical search would be a same-result stub, so each asks in other words.
    let found = search(&b, "zebrafish quagga okapi");
    assert!(!found.contains("zebrafish") && !found.contains("new.rs"), "B sees A's staged words: {found}");
    assert!(search(&b, "line two App").contains("line two"), "B lost the branch's words");
    // A still finds its own, though B's searches indexed the branch's README.md since.
    assert!(search(&a, "okapi zebrafish").contains("zebrafish quagga okapi"), "A lost its staged words");
    let found = search(&b, "quagga okapi zebrafish");
    assert!(!found.contains("zebrafish") && !found.contains("new.rs"), "B sees A's staged words: {found}");
    assert!(search(&b, "App line two").contains("line two"), "B lost the branch's words");
}

/// The same from above the mount: a search of the whole tree walks into every session's own
/// working copy, and one session's walk is never another's.
#[test]
fn a_search_from_above_a_mount_never_shows_another_sessions_staged_words() {
    let w = world(FILES);
    let (a, b) = (session(&w), session(&w));
    ok(&b, "read", json!({"file_path": "/Repos/app/README.md"}));
    ok(&b, "write", json!({"file_path": "/Repos/app/README.md", "content": "platypus wombat numbat\n"}));
    assert!(ok(&b, "search", json!({"query": "platypus wombat", "path": "/"})).contains("platypus"));
    let found = ok(&a, "search", json!({"query": "platypus wombat", "path": "/"}));
    assert!(!found.contains("platypus"), "A sees B's staged words: {found}");
    assert!(ok(&a, "search", json!({"query": "line two App", "path": "/"})).contains("line two"));
    // And from the mount point itself.
    assert!(ok(&b, "search", json!({"query": "numbat platypus", "path": "/Repos/app"})).contains("platypus"));
    let found = ok(&a, "search", json!({"query": "numbat platypus", "path": "/Repos/app"}));
    assert!(!found.contains("platypus"), "A sees B's staged words from the mount point: {found}");
}

/// Two sessions that each staged as many changes: a walk one of them made is still never the
/// other's (their working copies' change counts may be equal).
#[test]
fn sessions_with_as_many_staged_changes_never_share_a_walk() {
    let w = world(FILES);
    let (a, b) = (session(&w), session(&w));
    ok(&a, "write", json!({"file_path": "/Repos/app/a.md", "content": "aardvark\n"}));
    ok(&b, "write", json!({"file_path": "/Repos/app/b.md", "content": "platypus wombat\n"}));
    assert!(ok(&b, "search", json!({"query": "platypus wombat", "path": "/Repos/app"})).contains("platypus"));
    let found = ok(&a, "search", json!({"query": "platypus wombat", "path": "/Repos/app"}));
    assert!(!found.contains("platypus"), "A sees B's staged words: {found}");
    assert!(ok(&a, "search", json!({"query": "aardvark", "path": "/Repos/app"})).contains("aardvark"));
}

/// A session always finds what it staged, whatever another session on the same mount indexed
/// of the same path in between (issue 18): B's searches index the branch's README.md, A's next
/// search still finds its own.
#[test]
fn a_session_finds_its_own_staged_words_after_another_indexed_the_branchs() {
    let w = world(FILES);
    let (a, b) = (session(&w), session(&w));
    let search = |s: &Session, query: &str| ok(s, "search", json!({"query": query, "path": "/Repos/app"}));
    ok(&a, "read", json!({"file_path": "/Repos/app/README.md"}));
    ok(&a, "write", json!({"file_path": "/Repos/app/README.md", "content": "zebrafish quagga okapi\n"}));
    assert!(search(&a, "zebrafish quagga okapi").contains("zebrafish"), "A finds what it staged");
    assert!(search(&b, "line two App").contains("line two"));
    assert!(search(&b, "App line two").contains("line two"));
    let found = search(&a, "okapi zebrafish");
    assert!(found.contains("zebrafish quagga okapi"), "A lost its staged words: {found}");
}

/// Two sessions staging different content at one path, searching in turn: each finds only its own.
#[test]
fn sessions_staging_one_path_apart_each_find_only_their_own_words() {
    search_in_turn(false);
}

/// The same when both staged files have one length and one modification time, so that neither
/// tells them apart from the index's entry without reading them.
#[test]
fn sessions_staging_one_path_apart_with_one_length_and_time_each_find_only_their_own_words() {
    search_in_turn(true);
}

fn search_in_turn(same_time: bool) {
    let w = world(FILES);
    let (a, b) = (session(&w), session(&w));
    // Of one length.
    for (s, text) in [(&a, "zebrafish quagga okapi\n"), (&b, "platypus wombat numbat\n")] {
        ok(s, "read", json!({"file_path": "/Repos/app/README.md"}));
        ok(s, "write", json!({"file_path": "/Repos/app/README.md", "content": text}));
    }
    if same_time {
        // Each session's working copy is under the data directory: `mounts/<session>/<key>/tree`.
        let mut copies = 0;
        for session in std::fs::read_dir(w._dir.path().join("data/mounts")).unwrap() {
            for key in std::fs::read_dir(session.unwrap().path()).unwrap() {
                let readme = key.unwrap().path().join("tree/README.md");
                let time = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
                std::fs::File::options().write(true).open(readme).unwrap().set_modified(time).unwrap();
                copies += 1;
            }
        }
        assert_eq!(copies, 2);
    }
    // Each round asks in other words: a repeated identical search would be a same-result stub.
    let queries = ["zebrafish platypus", "quagga wombat", "okapi numbat", "numbat okapi quagga", "wombat zebrafish"];
    for query in queries {
        for (s, own, other) in [(&a, "zebrafish", "platypus"), (&b, "platypus", "zebrafish")] {
            let found = ok(s, "search", json!({"query": query, "path": "/Repos/app"}));
            assert!(found.contains(own), "{own} is not found by its own session ({query}): {found}");
            assert!(!found.contains(other), "{other} is found by another session ({query}): {found}");
        }
    }
}

/// What another session asks, in the same order each time.
fn observe(b: &Session) -> Vec<(String, bool)> {
    let mut out = vec![
        call(b, "list", json!({"path": "/Repos/app"})),
        call(b, "list", json!({"path": "/Repos"})),
        call(b, "glob", json!({"pattern": "**/*", "path": "/Repos/app"})),
        call(b, "grep", json!({"pattern": "[a-z]", "path": "/Repos"})),
        call(b, "branch", json!({"path": "/Repos/app"})),
    ];
    for name in NAMES {
        out.push(call(b, "read", json!({"file_path": format!("/Repos/app/{name}")})));
    }
    // The commit ids in `branch`'s listing are the repository's, the same for both sessions.
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, failure_persistence: None, ..ProptestConfig::default() })]

    /// Whatever session A stages, another session's answers stay the same.
    #[test]
    fn what_one_session_stages_is_invisible_to_another(changes in proptest::collection::vec(change(), 1..8)) {
        let w = world(FILES);
        // Each look is a fresh session: a second identical call in one session is answered with a stub.
        let a = session(&w);
        let before = observe(&session(&w));
        for change in &changes {
            let path = |n: usize| format!("/Repos/app/{}", NAMES[n]);
            let _ = match change {
                Change::Write(n, text) => {
                    let _ = a.call("read", json!({"file_path": path(*n)}));
                    a.call("write", json!({"file_path": path(*n), "content": text}))
                }
                Change::Edit(n) => {
                    let _ = a.call("read", json!({"file_path": path(*n)}));
                    a.call("edit", json!({"file_path": path(*n), "old_string": "e", "new_string": "E", "replace_all": true}))
                }
                Change::Rm(n) => a.call("rm", json!({"path": path(*n)})),
                Change::Mv(x, y) => a.call("mv", json!({"source": path(*x), "destination": path(*y)})),
                Change::Mkdir(n) => a.call("mkdir", json!({"path": path(*n)})),
            };
        }
        let after = observe(&session(&w));
        prop_assert_eq!(before, after);
        prop_assert_eq!(git(&w.repo, &["log", "--format=%s", "main"]), "First\n");
    }
}
