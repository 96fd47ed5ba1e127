//! Choosing the embedder through `ctxfs index`: the `--embedder` flag, config.json's `"embedder"`, and switching on an existing index; not a test of the vectors themselves (src/index/bert.rs has those).
//!
//! Each step runs the real binary and reads its summary line and the index's
//! `blobs` table, which records the embedder that made each blob's vectors.
//! Steps that need a model skip with a note when scripts/build-embedder has
//! not installed it.

use std::path::Path;
use std::process::Command;

/// Runs `ctxfs index` over `root` with `data`; answers the summary line (stdout) and stderr.
fn index(root: &Path, data: &Path, args: &[&str]) -> (String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ctxfs"))
        .args(["index", "--root"])
        .arg(root)
        .arg("--data")
        .arg(data)
        .args(args)
        // No user's config.json unless the test gives one.
        .args(if args.contains(&"--config") { &[][..] } else { &["--config", "/nonexistent/ctxfs-config"][..] })
        .env_remove("CTXFS_MODEL_DIR")
        .env_remove("CTXFS_BERT_DIR")
        .output()
        .unwrap();
    let (stdout, stderr) =
        (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned());
    assert!(out.status.success(), "ctxfs index {args:?} failed: {stdout}{stderr}");
    (stdout, stderr)
}

/// How many files and chunks the summary line says were indexed anew.
fn made(summary: &str) -> (usize, usize) {
    let number_before = |marker: &str| -> usize {
        let at = summary.find(marker).unwrap_or_else(|| panic!("no {marker:?} in {summary:?}"));
        summary[..at].rsplit([' ', '(']).next().unwrap().parse().unwrap()
    };
    (number_before(" new or changed"), number_before(" chunks"))
}

/// The embedder names recorded for the index's blobs.
fn embedders(data: &Path) -> Vec<Option<String>> {
    let db = rusqlite::Connection::open(data.join("index.db")).unwrap();
    let mut query = db.prepare("SELECT embedder FROM blobs ORDER BY sha").unwrap();
    query.query_map([], |row| row.get(0)).unwrap().map(Result::unwrap).collect()
}

/// Whether `models/DIR` is installed; a missing model fails the test (scripts/test installs them).
fn installed(dir: &str) -> bool {
    let found = Path::new(env!("CARGO_MANIFEST_DIR")).join("models").join(dir).join("model.safetensors").is_file();
    assert!(found, "models/{dir} is not installed: run scripts/build-embedder (scripts/test does)");
    found
}

fn tree() -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    std::fs::write(
        root.path().join("upload.rs"),
        "// Retries a failed upload with exponential backoff.\nfn retry_upload() {}\n".repeat(3),
    )
    .unwrap();
    std::fs::write(root.path().join("image.md"), "Resizing an image to a thumbnail keeps its aspect ratio.\n").unwrap();
    root
}

#[test]
fn switching_from_static_to_minilm_embeds_again() {
    if !installed("minilm-static") || !installed("minilm") {
        return;
    }
    let (root, data) = (tree(), tempfile::tempdir().unwrap());
    let (summary, _) = index(root.path(), data.path(), &[]);
    assert_eq!(made(&summary).0, 2, "{summary}");
    assert!(!summary.contains("words only"), "{summary}");
    let first = embedders(data.path());
    assert!(first.iter().all(|e| e.as_deref().is_some_and(|e| e.starts_with("static:"))), "{first:?}");

    // The files did not change, but their vectors were made by another embedder: all are embedded again.
    let (summary, _) = index(root.path(), data.path(), &["--embedder", "minilm"]);
    let (files, chunks) = made(&summary);
    assert_eq!(files, 2, "{summary}");
    assert!(chunks >= 2, "{summary}");
    let second = embedders(data.path());
    assert!(second.iter().all(|e| e.as_deref().is_some_and(|e| e.starts_with("bert:minilm:"))), "{second:?}");

    // Again with the same embedder: nothing to do.
    let (summary, _) = index(root.path(), data.path(), &["--embedder", "minilm"]);
    assert_eq!(made(&summary), (0, 0), "{summary}");
}

#[test]
fn config_json_chooses_when_no_flag_does() {
    let (root, data, config) = (tree(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    std::fs::write(config.path().join("config.json"), r#"{"embedder": "none"}"#).unwrap();
    let config_dir = config.path().to_str().unwrap();
    let (summary, _) = index(root.path(), data.path(), &["--config", config_dir]);
    assert!(summary.contains("words only"), "{summary}");
    assert!(embedders(data.path()).iter().all(Option::is_none));
    if !installed("minilm-static") {
        return;
    }
    // The flag wins over config.json.
    let (summary, _) = index(root.path(), data.path(), &["--config", config_dir, "--embedder", "static"]);
    assert_eq!(made(&summary).0, 2, "{summary}");
    assert!(embedders(data.path()).iter().all(|e| e.as_deref().is_some_and(|e| e.starts_with("static:"))));
}

#[test]
fn an_unreachable_server_means_words_only_said_once() {
    // Port 9 (discard) on the loopback: nothing listens there in a test run.
    let (root, data) = (tree(), tempfile::tempdir().unwrap());
    let (summary, stderr) = index(root.path(), data.path(), &["--embedder", "http://127.0.0.1:9"]);
    assert!(summary.contains("words only"), "{summary}");
    assert_eq!(stderr.matches("search ranks by words only").count(), 1, "{stderr}");
    assert!(stderr.contains("embedding server"), "{stderr}");
}

#[test]
fn a_bad_choice_is_refused_with_a_sentence() {
    let out = Command::new(env!("CARGO_BIN_EXE_ctxfs"))
        .args(["index", "--root", "/tmp", "--embedder", "bigmodel"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("is not an embedder; use static, minilm, paraphrase-l3, none or an http://HOST:PORT URL"),
        "{stderr}"
    );
}
