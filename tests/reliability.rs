//! Nothing lost, at a size that fits the test command: concurrent writers on
//! one file (ctxfs sessions in separate engines, as separate processes are,
//! and an outside program saving by rename), a crash right after an answer,
//! and ids across restarts. `bench/reliability.py` runs the larger campaign.

use ctxfs::engine::{Config, Engine, Posture, Session, SessionOptions};
use serde_json::json;
use std::path::Path;
use std::sync::{Arc, Barrier};

fn device_engine(root: &Path, data: &Path) -> Engine {
    Engine::new(Config {
        start: None,
        data_dir: Some(data.to_path_buf()),
        ..Config::new(Posture::Device { root: root.to_path_buf() })
    })
    .unwrap()
}

/// A file of `n` numbered lines padded to make it large (a slow write).
/// The next start of ctxfs on a root after a crash (`ctxfs call list`), which cleans up first.
fn next_start(bin: &str, root: &Path, data: &Path) -> std::process::Output {
    std::process::Command::new(bin)
        .args(["call", "--root"])
        .arg(root)
        .arg("--data")
        .arg(data)
        .args(["list", "{}"])
        .output()
        .unwrap()
}

fn big_file(n: usize) -> String {
    (0..n).map(|i| format!("line {i:06} {}\n", "x".repeat(100))).collect()
}

/// Two sessions of two engines (two processes' worth of state: their own
/// file descriptors and locks) read one file, then edit different lines at
/// the same moment. At most one may succeed; the other is told the file
/// changed; the file holds every edit that was answered as done.
#[test]
fn two_sessions_editing_at_once_never_lose_an_edit() {
    let ws = tempfile::tempdir().unwrap();
    let data_a = tempfile::tempdir().unwrap();
    let data_b = tempfile::tempdir().unwrap();
    let file = ws.path().join("f.txt");
    let a = device_engine(ws.path(), data_a.path());
    let b = device_engine(ws.path(), data_b.path());
    let (mut both, mut one) = (0, 0);
    for round in 0..40 {
        std::fs::write(&file, big_file(8000)).unwrap();
        let sa = a.open_session(SessionOptions::default()).unwrap();
        let sb = b.open_session(SessionOptions::default()).unwrap();
        for s in [&sa, &sb] {
            assert!(!s.call("read", json!({"file_path": "f.txt", "limit": 1})).is_error);
        }
        let barrier = Arc::new(Barrier::new(2));
        let edit = |s: Arc<Session>, line: usize, barrier: Arc<Barrier>| {
            std::thread::spawn(move || {
                barrier.wait();
                let old = format!("line {line:06} ");
                let new = format!("EDIT {line:06} ");
                s.call("edit", json!({"file_path": "f.txt", "old_string": old, "new_string": new}))
            })
        };
        let ta = edit(sa.clone(), 10, barrier.clone());
        let tb = edit(sb.clone(), 7000, barrier);
        let (ra, rb) = (ta.join().unwrap(), tb.join().unwrap());
        let now = std::fs::read_to_string(&file).unwrap();
        for (answer, line) in [(&ra, 10), (&rb, 7000)] {
            if answer.is_error {
                assert!(answer.text.contains("has changed since this session last read it"), "{}", answer.text);
            } else {
                assert!(now.contains(&format!("EDIT {line:06} ")), "round {round}: an edit answered as done is lost");
            }
        }
        match (ra.is_error, rb.is_error) {
            (false, false) => both += 1,
            (true, true) => panic!("round {round}: both refused, though one read the current file"),
            _ => one += 1,
        }
    }
    // Both succeeding is fine only when one ran wholly after the other had
    // finished (then the second's read was stale and it must have been
    // refused): with the lock and the checked exchange that cannot happen.
    assert_eq!(both, 0, "two edits from one stale read both succeeded ({one} rounds had one success)");
}

/// An outside program saves the file by rename every moment, as editors
/// do: it reads the file, adds a line and puts a new file in its place,
/// without any check. A session meanwhile adds its own lines with `edit`,
/// reading again whenever it is told the file changed. The outside program
/// may overwrite the session's lines (that is its doing), but only a ctxfs
/// write can drop one of the outside lines, since every outside save starts
/// from the file as it is: at the end every outside line must be there.
#[test]
fn an_outside_writer_saving_constantly_is_never_overwritten() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let ws = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let file = ws.path().join("f.txt");
    std::fs::write(&file, big_file(2000)).unwrap();
    let engine = device_engine(ws.path(), data.path());
    let session = engine.open_session(SessionOptions::default()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    // While held, the outsider finishes the save it is making and waits; `quiet` says it waits.
    let hold = Arc::new(AtomicBool::new(false));
    let quiet = Arc::new(AtomicBool::new(false));
    let outsider = {
        let (file, stop, hold, quiet) = (file.clone(), stop.clone(), hold.clone(), quiet.clone());
        std::thread::spawn(move || {
            let temp = file.with_file_name(".outside.tmp");
            let mut n = 0;
            let mut jitter: u64 = 0x2545_f491_4f6c_dd1d;
            while !stop.load(Ordering::SeqCst) {
                if hold.load(Ordering::SeqCst) || std::env::var_os("NO_OUTSIDER").is_some() {
                    quiet.store(true, Ordering::SeqCst);
                    std::thread::sleep(std::time::Duration::from_millis(1));
                    continue;
                }
                quiet.store(false, Ordering::SeqCst);
                let mut text = std::fs::read(&file).unwrap();
                text.extend_from_slice(format!("outside {n}\n").as_bytes());
                std::fs::write(&temp, &text).unwrap();
                std::fs::rename(&temp, &file).unwrap();
                n += 1;
                // Saves come 2 to 30 ms apart, at no fixed rhythm.
                jitter ^= jitter << 13;
                jitter ^= jitter >> 7;
                jitter ^= jitter << 17;
                std::thread::sleep(std::time::Duration::from_micros(2000 + jitter % 28000));
            }
            n
        })
    };
    let edit = |n: usize| {
        session.call("read", json!({"file_path": "f.txt", "offset": 1, "limit": 1}));
        session.call(
            "edit",
            json!({"file_path": "f.txt", "old_string": "line 000000 ", "new_string": format!("session {n}\nline 000000 ")}),
        )
    };
    let (mut done, mut refused) = (0, 0);
    for n in 0..150 {
        let answer = edit(n);
        if answer.is_error {
            assert!(answer.text.contains("has changed since"), "{}", answer.text);
            if refused == 0 {
                eprintln!("{}", answer.text);
            }
            refused += 1;
        } else {
            done += 1;
        }
    }
    // How many of those won the race depends on the machine's load; one more,
    // made while the outsider waits, must succeed (the guard refuses only real changes).
    hold.store(true, Ordering::SeqCst);
    while !quiet.load(Ordering::SeqCst) {
        std::thread::yield_now();
    }
    let last = edit(150);
    assert!(!last.is_error, "an edit with nobody else writing: {}", last.text);
    hold.store(false, Ordering::SeqCst);
    stop.store(true, Ordering::SeqCst);
    let saved = outsider.join().unwrap();
    let now = std::fs::read_to_string(&file).unwrap();
    let lost: Vec<usize> = (0..saved).filter(|n| !now.contains(&format!("outside {n}\n"))).collect();
    assert!(lost.is_empty(), "outside saves overwritten by ctxfs: {} of {saved}: {lost:?}", lost.len());
    assert!(now.contains("session 150\n"), "the quiet edit is in the file");
    eprintln!("session saved {done} amid outside saves, was refused {refused}; outside saved {saved}");
}

/// `kill -9` at any moment of a two-file `apply_patch`: after the next start
/// of ctxfs on that root, both files are old or both are new, and no
/// temporary file of the killed process is left in the workspace.
#[test]
fn a_patch_cut_by_a_kill_is_rolled_back_whole_at_the_next_start() {
    use std::io::{BufRead, Write};
    use std::os::unix::process::CommandExt;
    let ws = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let old_a = big_file(20_000);
    let old_b = big_file(20_000).replace("line", "LINE");
    let patch = "*** Begin Patch\n*** Update File: a.txt\n@@\n-line 000005 ".to_string()
        + &"x".repeat(100)
        + "\n+new 000005\n*** Update File: b.txt\n@@\n-LINE 000005 "
        + &"x".repeat(100)
        + "\n+new 000005\n*** End Patch\n";
    let bin = env!("CARGO_BIN_EXE_ctxfs");
    let (mut half_before, mut half_after, mut new_both, mut temps_left) = (0, 0, 0, 0);
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    // The first round runs the patch to its end, to learn how long it takes;
    // the others are killed at a moment within that time.
    let mut took = None;
    for _ in 0..12 {
        std::fs::write(ws.path().join("a.txt"), &old_a).unwrap();
        std::fs::write(ws.path().join("b.txt"), &old_b).unwrap();
        let mut child = std::process::Command::new(bin)
            .args(["replay", "--root"])
            .arg(ws.path())
            .arg("--data")
            .arg(data.path())
            .arg("-")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        for file in ["a.txt", "b.txt"] {
            writeln!(stdin, "{}", json!({"call": "read", "args": {"file_path": file, "limit": 1}})).unwrap();
            let mut line = String::new();
            stdout.read_line(&mut line).unwrap();
            assert!(line.contains("lines 1-1"), "{line}");
        }
        writeln!(stdin, "{}", json!({"call": "apply_patch", "args": {"patch": patch}})).unwrap();
        stdin.flush().unwrap();
        match took {
            None => {
                let sent = std::time::Instant::now();
                let mut line = String::new();
                stdout.read_line(&mut line).unwrap();
                assert!(line.contains("new 000005"), "{line}");
                took = Some(sent.elapsed());
            }
            Some(took) => {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                // The files are written at the end of the call: kills land in its later part.
                let micros = took.as_micros() as u64 + 1;
                std::thread::sleep(std::time::Duration::from_micros(micros / 2 + seed % (micros / 2 + 1)));
            }
        }
        // The whole process group, by id.
        let _ = rustix::process::kill_process_group(
            rustix::process::Pid::from_raw(child.id() as i32).unwrap(),
            rustix::process::Signal::KILL,
        );
        let _ = child.wait();
        let state = || {
            let a = std::fs::read_to_string(ws.path().join("a.txt")).unwrap_or_default();
            let b = std::fs::read_to_string(ws.path().join("b.txt")).unwrap_or_default();
            (a.contains("new 000005"), b.contains("new 000005"))
        };
        let (a, b) = state();
        if a != b {
            half_before += 1;
        }
        // The next start of ctxfs on this root cleans up.
        let next = next_start(bin, ws.path(), data.path());
        assert!(
            next.status.success(),
            "{}{}",
            String::from_utf8_lossy(&next.stdout),
            String::from_utf8_lossy(&next.stderr)
        );
        let (a, b) = state();
        if a != b {
            half_after += 1;
        }
        if a && b {
            new_both += 1;
        }
        temps_left += std::fs::read_dir(ws.path())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().contains(".ctxfs-"))
            .count();
    }
    eprintln!("half-applied before the next start: {half_before}; after: {half_after}; applied whole: {new_both}");
    assert_eq!(half_after, 0, "half-applied patches left after the next start");
    assert_eq!(temps_left, 0, "temporary files left in the workspace");
}

/// The same, at the worst moment exactly: the process dies right after the
/// first file of the patch is written (`CTXFS_CRASH_AFTER_WRITES`). The
/// patch is half-applied until ctxfs starts again, which rolls it back.
#[test]
fn a_crash_between_the_files_of_a_patch_is_rolled_back() {
    let ws = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("a.txt"), "a\nold\n").unwrap();
    std::fs::write(ws.path().join("b.txt"), "b\nold\n").unwrap();
    std::fs::write(ws.path().join("c.txt"), "c\n").unwrap();
    let patch = "*** Begin Patch\n*** Update File: a.txt\n@@\n a\n-old\n+new\n*** Add File: n.txt\n+n\n\
                 *** Update File: b.txt\n@@\n b\n-old\n+new\n*** Delete File: c.txt\n*** End Patch\n";
    let script = [
        json!({"call": "read", "args": {"file_path": "a.txt"}}),
        json!({"call": "read", "args": {"file_path": "b.txt"}}),
        json!({"call": "read", "args": {"file_path": "c.txt"}}),
        json!({"call": "apply_patch", "args": {"patch": patch}}),
    ]
    .map(|s| s.to_string())
    .join("\n");
    let script_file = data.path().join("script.jsonl");
    std::fs::write(&script_file, script).unwrap();
    let bin = env!("CARGO_BIN_EXE_ctxfs");
    for after in 1..=3 {
        for (name, text) in [("a.txt", "a\nold\n"), ("b.txt", "b\nold\n"), ("c.txt", "c\n")] {
            std::fs::write(ws.path().join(name), text).unwrap();
        }
        let _ = std::fs::remove_file(ws.path().join("n.txt"));
        let crashed = std::process::Command::new(bin)
            .args(["replay", "--root"])
            .arg(ws.path())
            .arg("--data")
            .arg(data.path())
            .arg(&script_file)
            .env("CTXFS_CRASH_AFTER_WRITES", after.to_string())
            .output()
            .unwrap();
        assert!(!crashed.status.success(), "the process was meant to stop after write {after}");
        let read = |name: &str| std::fs::read_to_string(ws.path().join(name)).ok();
        let changed = [read("a.txt").as_deref() == Some("a\nnew\n"), read("n.txt").is_some()];
        assert!(changed.iter().any(|c| *c), "after write {after} something was half-done: {changed:?}");
        let next = next_start(bin, ws.path(), data.path());
        assert!(next.status.success());
        let listing = String::from_utf8_lossy(&next.stdout);
        assert!(!listing.contains(".ctxfs-"), "{listing}");
        assert_eq!(read("a.txt").as_deref(), Some("a\nold\n"), "after write {after}");
        assert_eq!(read("b.txt").as_deref(), Some("b\nold\n"), "after write {after}");
        assert_eq!(read("c.txt").as_deref(), Some("c\n"), "after write {after}");
        assert_eq!(read("n.txt"), None, "after write {after}");
        let left: Vec<String> = std::fs::read_dir(ws.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".ctxfs-"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }
}

/// A crash while a write's temporary file exists: no tool shows the
/// temporary file, and the next start of ctxfs removes it.
#[test]
fn temporary_files_of_a_crashed_write_are_hidden_and_removed() {
    let ws = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let bin = env!("CARGO_BIN_EXE_ctxfs");
    let run = |args: &[&str], crash: bool| {
        let mut command = std::process::Command::new(bin);
        command.args(["call", "--root"]).arg(ws.path()).arg("--data").arg(data.path()).args(args);
        if crash {
            command.env("CTXFS_CRASH_BEFORE_RENAME", "1");
        }
        command.output().unwrap()
    };
    let crashed = run(&["write", r#"{"file_path": "new.txt", "content": "x\n"}"#], true);
    assert!(!crashed.status.success());
    let temps = || -> Vec<String> {
        std::fs::read_dir(ws.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".ctxfs-"))
            .collect()
    };
    assert_eq!(temps().len(), 1, "the crash left its temporary file");
    // Hidden from a session of a process that is still running (no cleanup
    // yet for a live one), then removed by a start.
    let engine = Engine::new(Config {
        start: None,
        data_dir: Some(tempfile::tempdir().unwrap().path().to_path_buf()),
        ..Config::new(Posture::Device { root: ws.path().to_path_buf() })
    })
    .unwrap();
    let session = engine.open_session(SessionOptions::default()).unwrap();
    for (tool, args) in [("list", json!({})), ("glob", json!({"pattern": "**/*"})), ("grep", json!({"pattern": "x"}))] {
        let answer = session.call(tool, args);
        assert!(!answer.text.contains(".ctxfs-"), "{tool}: {}", answer.text);
    }
    let listed = run(&["list", "{}"], false);
    assert!(listed.status.success());
    assert!(temps().is_empty(), "the next start removed it: {:?}", temps());
}

/// An edit whose result would be larger than the tools open is refused
/// before anything is made or written, however small the file.
#[test]
fn an_edit_that_would_grow_a_file_past_the_limit_is_refused_at_once() {
    let ws = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("small.txt"), "ab".repeat(100_000)).unwrap();
    let engine = device_engine(ws.path(), data.path());
    let session = engine.open_session(SessionOptions::default()).unwrap();
    session.call("read", json!({"file_path": "small.txt", "limit": 1}));
    let answer = session.call(
        "edit",
        json!({"file_path": "small.txt", "old_string": "a", "new_string": "x".repeat(1000), "replace_all": true}),
    );
    assert!(answer.is_error && answer.text.contains("more than the 64 MiB"), "{}", answer.text);
    assert_eq!(std::fs::metadata(ws.path().join("small.txt")).unwrap().len(), 200_000);
}
