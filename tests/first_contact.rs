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
