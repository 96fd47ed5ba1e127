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
        posture: Posture::Device { root: root.to_path_buf() },
        start: None,
        data_dir: Some(data.to_path_buf()),
    })
    .unwrap()
}

/// A file of `n` numbered lines padded to make it large (a slow write).
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
    let outsider = {
        let (file, stop) = (file.clone(), stop.clone());
        std::thread::spawn(move || {
            let temp = file.with_file_name(".outside.tmp");
            let mut n = 0;
            let mut jitter: u64 = 0x2545_f491_4f6c_dd1d;
            while !stop.load(Ordering::Relaxed) {
                if std::env::var_os("NO_OUTSIDER").is_some() {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                    continue;
                }
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
    let (mut done, mut refused) = (0, 0);
    for n in 0..150 {
        session.call("read", json!({"file_path": "f.txt", "offset": 1, "limit": 1}));
        let answer = session.call(
            "edit",
            json!({"file_path": "f.txt", "old_string": "line 000000 ", "new_string": format!("session {n}\nline 000000 ")}),
        );
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
    stop.store(true, Ordering::Relaxed);
    let saved = outsider.join().unwrap();
    let now = std::fs::read_to_string(&file).unwrap();
    let lost: Vec<usize> = (0..saved).filter(|n| !now.contains(&format!("outside {n}\n"))).collect();
    assert!(lost.is_empty(), "outside saves overwritten by ctxfs: {} of {saved}: {lost:?}", lost.len());
    assert!(done > 0, "the session saved too ({done} done, {refused} refused)");
    eprintln!("session saved {done}, was refused {refused}; outside saved {saved}");
}
