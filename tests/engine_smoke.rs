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
    let engine = Engine::new(Config {
        posture: Posture::Device { root: ws.path().to_path_buf() },
        start: None,
        data_dir: Some(data.path().to_path_buf()),
    })
    .unwrap();
    let s = engine.open_session(SessionOptions::default()).unwrap();
    let root = ws.path().canonicalize().unwrap().to_string_lossy().into_owned();
    let show = |tool: &str, args: serde_json::Value| {
        let a = s.call(tool, args);
        println!("--- {tool} -> error={}\n{}", a.is_error, a.text);
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
    let r = show("apply_patch", json!({"patch": "*** Begin Patch\n*** Add File: p.txt\n+x\n*** Update File: src/a.txt\n@@\n one\n-TWO\n+2\n*** End Patch\n"}));
    assert!(!r.is_error, "{}", r.text);
    show("recall", json!({"id": "#0001"}));
    show("recall", json!({"id": "ffff"}));
    let r = show("nope", json!({}));
    assert!(r.is_error);
}
