//! The HTTP embedder end to end: the real binary's `index` and `call … search` with `--embedder http://…` against fake llama.cpp and OpenAI servers in the test process; not a test of the client's parsing (src/index/embed.rs has those) nor of any real server.
//!
//! The fake servers (`ctxfs::index::testing`) give vectors by topic: texts
//! that share no word but speak of the same thing are close. So a query
//! that shares no word with a file can find it only through the server's
//! vectors. Each server refuses texts beyond a small length, as a server
//! with a small context does, so a file longer than that is indexed only if
//! its passages are halved until the server takes them.

use ctxfs::index::testing::{self, FakeServer};
use std::path::Path;
use std::process::Command;

/// The tree: each file on one topic, none sharing a word with the queries below.
fn tree() -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| std::fs::write(root.path().join(name), text).unwrap();
    file("upload.rs", "// Retries a failed upload with exponential backoff.\nfn retry_upload() {}\n");
    file("image.md", "Resizing an image to a thumbnail keeps its aspect ratio.\n");
    file("colour.css", "/* The palette: one hue, painted in teal. */\n.paint { background: teal; }\n");
    // About 190 words, one passage by the chunker's measure, more than either server takes at once.
    file("hashing.md", &"Store each password hash with bcrypt and a fresh salt, never as plain text.\n".repeat(14));
    root
}

/// Runs the binary with the posture, the data directory and `--embedder`; answers stdout and stderr.
fn ctxfs(command: &[&str], root: &Path, data: &Path, embedder: &[&str], key: Option<&str>) -> (String, String) {
    let mut run = Command::new(env!("CARGO_BIN_EXE_ctxfs"));
    run.arg(command[0])
        .arg("--root")
        .arg(root)
        .arg("--data")
        .arg(data)
        .args(["--config", "/nonexistent/ctxfs-config"])
        .args(embedder);
    run.args(&command[1..]).env_remove("CTXFS_MODEL_DIR").env_remove("CTXFS_BERT_DIR");
    match key {
        Some(key) => run.env(ctxfs::index::EMBEDDER_KEY_ENV, key),
        None => run.env_remove(ctxfs::index::EMBEDDER_KEY_ENV),
    };
    let out = run.output().unwrap();
    let (stdout, stderr) =
        (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned());
    assert!(out.status.success(), "ctxfs {command:?} failed: {stdout}{stderr}");
    (stdout, stderr)
}

/// The files that come first in a search's answer, by name, in order.
fn ranked(answer: &str, root: &Path) -> Vec<String> {
    let root = root.canonicalize().unwrap();
    let mut names = Vec::new();
    for word in answer.split_whitespace() {
        let path = word.trim_end_matches(|c: char| c == ':' || c.is_ascii_digit() || c == '-');
        if let Some(name) = Path::new(path).strip_prefix(&root).ok().and_then(|p| p.to_str()) {
            if !name.is_empty() && !names.iter().any(|n| n == name) {
                names.push(name.to_owned());
            }
        }
    }
    names
}

/// The embedder each blob records, and for `name`'s content how many passages it has and how many of them have a vector.
fn stored(data: &Path, name: &str) -> (Vec<Option<String>>, (usize, usize)) {
    let db = rusqlite::Connection::open(data.join("index.db")).unwrap();
    let mut query = db.prepare("SELECT embedder FROM blobs ORDER BY sha").unwrap();
    let embedders = query.query_map([], |row| row.get(0)).unwrap().map(Result::unwrap).collect();
    let passages = db
        .query_row(
            "SELECT count(*), count(v.id) FROM files f JOIN chunks c ON c.blob = f.blob LEFT JOIN chunk_vectors v ON v.id = c.id WHERE f.path LIKE ?1",
            [format!("%/{name}")],
            |row| Ok((row.get::<_, i64>(0)? as usize, row.get::<_, i64>(1)? as usize)),
        )
        .unwrap();
    (embedders, passages)
}

/// Indexes the tree with the server, then searches by meaning, and checks what both should show.
fn index_and_search(server: &FakeServer, embedder: &[&str], key: Option<&str>, name_prefix: &str) {
    let (root, data) = (tree(), tempfile::tempdir().unwrap());
    let (summary, stderr) = ctxfs(&["index"], root.path(), data.path(), embedder, key);
    assert!(summary.contains("4 new or changed"), "{summary}");
    assert!(!summary.contains("words only") && !stderr.contains("words only"), "{summary}{stderr}");
    let (embedders, (passages, with_vectors)) = stored(data.path(), "hashing.md");
    assert_eq!(embedders.len(), 4);
    assert!(embedders.iter().all(|e| e.as_deref().is_some_and(|e| e.starts_with(name_prefix))), "{embedders:?}");
    // The long file was refused whole, halved, and every part embedded.
    assert!(passages > 1 && with_vectors == passages, "hashing.md: {passages} passages, {with_vectors} with a vector");

    // No word of these queries is in any file or path: only the server's vectors can rank.
    let search = |query: &str| {
        let args = serde_json::json!({ "query": query }).to_string();
        let (answer, _) = ctxfs(&["call", "search", &args], root.path(), data.path(), embedder, key);
        ranked(&answer, root.path())
    };
    let before = server.requests.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(search("picture photo pixels").first().map(String::as_str), Some("image.md"));
    assert_eq!(search("credentials secret").first().map(String::as_str), Some("hashing.md"));
    assert_eq!(search("colour shade").first().map(String::as_str), Some("colour.css"));
    // The index was current: the searches sent only their queries (and llama.cpp's token counts).
    let seen = server.seen();
    let sent: Vec<String> =
        seen[before..].iter().filter(|r| r.path != "/tokenize").map(|r| r.body.to_string()).collect();
    assert!(sent.iter().all(|body| !body.contains("Resizing")), "{sent:?}");
}

#[test]
fn llama_cpp_embeds_the_index_and_ranks_search_by_meaning() {
    // 40 words at the most: hashing.md's one passage of about 190 is refused.
    let server = testing::llama_cpp(testing::topic_vector, true, 40);
    index_and_search(&server, &["--embedder", &server.url], None, &format!("http:llama.cpp:{}:-:", server.url));
    let seen = server.seen();
    assert!(seen.iter().any(|r| r.path == "/tokenize"), "the chunker counts with the server's tokens");
    assert!(seen.iter().all(|r| r.header("authorization").is_none()), "no key was given");
    // The server refused at least once for length.
    assert!(seen.iter().any(
        |r| r.path == "/embedding" && r.body["content"].as_str().is_some_and(|c| c.split_whitespace().count() > 40)
    ));
}

#[test]
fn openai_embeds_with_the_model_and_the_key() {
    // 300 bytes at the most: hashing.md's one passage of about 1,050 is refused.
    let server = testing::openai(testing::topic_vector, "nomic-embed", 300);
    let url = format!("{}/v1", server.url);
    index_and_search(
        &server,
        &["--embedder", &url, "--embedder-model", "nomic-embed"],
        Some("k3y"),
        &format!("http:openai:{url}:nomic-embed:"),
    );
    let seen = server.seen();
    assert!(!seen.is_empty());
    assert!(seen.iter().all(|r| r.header("authorization") == Some("Bearer k3y")), "every request carries the key");
    assert!(seen.iter().all(|r| r.body["model"] == "nomic-embed"), "every request names the model");
}
