//! Non-interference of `search`: what a session cannot see changes neither
//! which passages it gets, nor their order, nor how many.
//!
//! A property test over the engine in the tree posture, on the real OS file
//! system, with all three rankings (words, meaning, paths and tags). The
//! static embedder runs with a tiny table made here (`CTXFS_MODEL_DIR`): a
//! WordPiece vocabulary of this test's words and letters and random rows;
//! the real table takes half a second to load in a debug build, and every
//! case starts several engines. Visible files (under `/pub`)
//! and hidden ones (under `/pub/h`, which the view's floor hides, and under
//! `/secret`, which no grant opens) are drawn from one small vocabulary, so
//! hidden files share the queries' words and would shift BM25's document
//! frequencies and lengths if they were counted. Two hidden variations of
//! the same visible tree (contents, presence and names all differ; one of
//! them may repeat the queries' words many times) are searched in fresh
//! engines with fresh data directories, and every answer's whole text must
//! be identical.
//!
//! The second property shares one data directory (one `index.db`) between
//! two engines over the same tree: one whose view shows `/pub/h`, one whose
//! view hides it. Whatever the first indexed, the second's answers must equal
//! those of an engine whose data directory never saw the hidden files.
//!
//! The third changes files from outside under one engine that has searched
//! once (so its file watcher's change feed, not a walk, may bring its kept
//! list up to date): hidden files written over or added, visible ones
//! edited or added. Its answers must equal those of a fresh engine over the
//! changed tree.
//!
//! A line no answer may hold marks every hidden file.

#![cfg(unix)]

use ctxfs::engine::{Config, Engine, Posture, SessionOptions};
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, FileFailurePersistence};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// A word every hidden file holds and no answer may.
const MARKER: &str = "qqhiddenqq";

/// The words files are made of; the queries use them too.
const WORDS: [&str; 14] = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "retry",
    "upload",
    "failed",
    "network",
    "token",
    "cache",
    "parse",
    "config",
    "retryFailedUpload",
    "parse_config",
];

/// The last shares no word with any file: only the meaning ranking answers it.
const QUERIES: [&str; 6] = [
    "alpha retry",
    "upload failed network config",
    "gamma",
    "how do we parse the token cache",
    "retry the failed upload",
    "how do we",
];

const VISIBLE_NAMES: [&str; 6] = ["a.md", "b.rs", "c.txt", "d/e.md", "d/f.rs", "g/h.rs"];
const HIDDEN_NAMES: [&str; 6] = ["h/x.md", "h/y.rs", "h/deep/z.txt", "secret/s.md", "secret/t.rs", "h/a.md"];

/// A text of a few lines of words; `long` makes it span several pieces.
fn text() -> impl Strategy<Value = String> {
    let line = prop::collection::vec(prop::sample::select(&WORDS[..]), 1..9).prop_map(|w| w.join(" "));
    (prop::collection::vec(line, 1..6), prop::bool::weighted(0.2)).prop_map(|(lines, long)| {
        let mut text = lines.join("\n");
        text.push('\n');
        if long {
            text = text.repeat(60);
        }
        text
    })
}

/// A hidden file's text: drawn like a visible one, or the queries' words repeated
/// many times (to move document frequencies and average lengths if they leaked).
fn hidden_text() -> impl Strategy<Value = String> {
    prop_oneof![text(), (1usize..80).prop_map(|n| format!("{}\n", QUERIES.join(" ")).repeat(n)),]
        .prop_map(|t| format!("{MARKER}\n{t}"))
}

fn files(
    names: &'static [&'static str],
    content: impl Strategy<Value = String>,
    max: usize,
) -> impl Strategy<Value = BTreeMap<String, String>> {
    prop::collection::btree_map(prop::sample::select(names).prop_map(str::to_string), content, 0..max)
}

fn write_tree(dir: &Path, visible: &BTreeMap<String, String>, hidden: &BTreeMap<String, String>) {
    std::fs::create_dir_all(dir.join("pub")).unwrap();
    std::fs::create_dir_all(dir.join("secret")).unwrap();
    for (name, text) in visible {
        let path = dir.join("pub").join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    for (name, text) in hidden {
        let path = if let Some(rest) = name.strip_prefix("secret/") {
            dir.join("secret").join(rest)
        } else {
            dir.join("pub").join(name)
        };
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
}

/// The view that hides `/pub/h` (and `/secret`, which no grant opens).
const HIDING_VIEW: &str = r#"{"grants": {"/pub": "ro"}, "floors": {"/pub/h": "none"}}"#;
/// The view that shows `/pub/h` too.
const SHOWING_VIEW: &str = r#"{"grants": {"/pub": "ro"}, "floors": {}}"#;

/// A tiny static embedding table (see the header), made once per test process.
fn tiny_model() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::Builder::new().prefix("ctxfs-sni-model-").tempdir().unwrap().keep();
        let special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"];
        let mut pieces: Vec<String> = special.iter().map(|s| s.to_string()).collect();
        for word in ["alpha", "beta", "gamma", "delta", "retry", "upload", "failed", "network", "token", "cache", "parse", "config", "how", "do", "we", "the"] {
            pieces.push(word.into());
        }
        for c in ('a'..='z').chain('0'..='9') {
            pieces.push(c.to_string());
            pieces.push(format!("##{c}"));
        }
        for c in "_.,:;!?()[]{}<>/\\'\"-+=*&|#@$%^~`".chars() {
            pieces.push(c.to_string());
        }
        let vocab: serde_json::Map<String, serde_json::Value> = pieces.iter().enumerate().map(|(i, p)| (p.clone(), json!(i))).collect();
        let added: Vec<serde_json::Value> = special
            .iter()
            .enumerate()
            .map(|(i, s)| json!({"id": i, "content": s, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}))
            .collect();
        let tokenizer = json!({
            "version": "1.0", "truncation": null, "padding": null, "added_tokens": added,
            "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true, "strip_accents": null, "lowercase": true},
            "pre_tokenizer": {"type": "BertPreTokenizer"}, "post_processor": null, "decoder": null,
            "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##", "max_input_chars_per_word": 100, "vocab": vocab},
        });
        std::fs::write(dir.join("tokenizer.json"), tokenizer.to_string()).unwrap();
        // Rows of 16 pseudo-random values in [0, 1): every cosine is positive, so
        // the meaning ranking ranks every passage.
        const DIMS: usize = 16;
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut data = Vec::with_capacity(pieces.len() * DIMS * 4);
        for _ in 0..pieces.len() * DIMS {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let value = (state >> 40) as f32 / (1u64 << 24) as f32;
            data.extend_from_slice(&value.to_le_bytes());
        }
        let header = json!({"embeddings": {"dtype": "F32", "shape": [pieces.len(), DIMS], "data_offsets": [0, data.len()]}}).to_string();
        let mut file = (header.len() as u64).to_le_bytes().to_vec();
        file.extend_from_slice(header.as_bytes());
        file.extend_from_slice(&data);
        std::fs::write(dir.join("model.safetensors"), file).unwrap();
        let embedder = ctxfs::index::table::StaticEmbedder::load(&dir).expect("the tiny table loads");
        let vector = ctxfs::index::embed::Embedder::embed(&embedder, &["retry the failed upload"]).unwrap().remove(0);
        assert!(vector.iter().any(|v| *v != 0.0));
        // Read when an engine first searches; every engine of this process uses this table.
        std::env::set_var("CTXFS_MODEL_DIR", &dir);
        dir
    })
}

fn engine(tree: &Path, view: &str, data: &Path, name: &str) -> Engine {
    tiny_model();
    let view_file = data.parent().unwrap().join(format!("{name}.view.json"));
    std::fs::write(&view_file, view).unwrap();
    Engine::new(Config {
        start: None,
        data_dir: Some(data.to_path_buf()),
        ..Config::new(Posture::Tree { dir: tree.to_path_buf(), view: view_file })
    })
    .unwrap()
}

/// `text` with every result id written relative to the session's first
/// (`#+0`, `#+1`, …). Ids are unique in a data directory, so sessions sharing
/// one start at different ids; what they refer to must still be the same.
fn relative_ids(text: &str, first: u64) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('#') {
        out.push_str(&rest[..at]);
        let digits: String = rest[at + 1..].chars().take_while(|c| c.is_ascii_hexdigit()).collect();
        match u64::from_str_radix(&digits, 16) {
            Ok(n) if digits.len() >= 4 => out.push_str(&format!("#+{}", n.saturating_sub(first))),
            _ => {
                out.push('#');
                out.push_str(&digits);
            }
        }
        rest = &rest[at + 1 + digits.len()..];
    }
    out.push_str(rest);
    out
}

/// Every query, at a few roots and limits, in one fresh session: the answers' texts.
fn answers(engine: &Engine) -> Vec<String> {
    let session = engine.open_session(SessionOptions::default()).unwrap();
    let mut out = Vec::new();
    let mut first = None;
    for query in QUERIES {
        for args in [
            json!({"query": query, "path": "/pub"}),
            json!({"query": query, "path": "/pub", "limit": 3}),
            json!({"query": query, "path": "/pub/d"}),
        ] {
            let answer = session.call("search", args.clone());
            let id = u64::from_str_radix(answer.id.trim_start_matches('#'), 16).unwrap();
            let first = *first.get_or_insert(id);
            out.push(format!("{args} -> {}", relative_ids(&answer.text, first)));
        }
    }
    out
}

fn check_answers(a: &[String], b: &[String], context: &str) -> Result<(), TestCaseError> {
    for (x, y) in a.iter().zip(b) {
        prop_assert!(!x.contains(MARKER) && !y.contains(MARKER), "an answer shows a hidden file:\n{x}\n{y}\n{context}");
        prop_assert_eq!(x, y, "{}", context);
    }
    prop_assert_eq!(a.len(), b.len());
    Ok(())
}

fn config() -> ProptestConfig {
    let mut config = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = 32;
    }
    config.failure_persistence = Some(Box::new(FileFailurePersistence::Off));
    if std::env::var_os("PROPTEST_MAX_SHRINK_TIME").is_none() {
        config.max_shrink_time = 30_000;
    }
    config
}

proptest! {
    #![proptest_config(config())]

    /// Two hidden variations of one visible tree, each in a fresh engine and data directory.
    #[test]
    fn hidden_files_change_no_search_result(
        visible in files(&VISIBLE_NAMES, text(), 5),
        hidden_a in files(&HIDDEN_NAMES, hidden_text(), 4),
        hidden_b in files(&HIDDEN_NAMES, hidden_text(), 4),
    ) {
        let base = tempfile::Builder::new().prefix("ctxfs-sni-").tempdir().unwrap();
        let (tree_a, tree_b) = (base.path().join("a/ws"), base.path().join("b/ws"));
        write_tree(&tree_a, &visible, &hidden_a);
        write_tree(&tree_b, &visible, &hidden_b);
        let a = answers(&engine(&tree_a, HIDING_VIEW, &base.path().join("a/data"), "a"));
        let b = answers(&engine(&tree_b, HIDING_VIEW, &base.path().join("b/data"), "b"));
        let context = format!("visible: {visible:?}\nhidden A: {hidden_a:?}\nhidden B: {hidden_b:?}");
        check_answers(&a, &b, &context)?;
        // Meaning takes part: a query without any file's words still finds the visible passages.
        let pub_files = visible.keys().count();
        prop_assert_eq!(a[a.len() - 3].contains("No passages match"), pub_files == 0, "{}", a[a.len() - 3]);
    }

    /// One index shared by a view that shows `/pub/h` and one that hides it.
    #[test]
    fn a_shared_index_leaks_nothing_between_views(
        visible in files(&VISIBLE_NAMES, text(), 5),
        hidden in files(&HIDDEN_NAMES, hidden_text(), 4),
        changed in files(&HIDDEN_NAMES, hidden_text(), 4),
        hiding_first in any::<bool>(),
    ) {
        let base = tempfile::Builder::new().prefix("ctxfs-sni-").tempdir().unwrap();
        let tree = base.path().join("ws");
        write_tree(&tree, &visible, &hidden);
        let shared = base.path().join("shared");
        let (showing, hiding) = (engine(&tree, SHOWING_VIEW, &shared, "showing"), engine(&tree, HIDING_VIEW, &shared, "hiding"));
        let pristine = engine(&tree, HIDING_VIEW, &base.path().join("pristine"), "pristine");
        let context = format!("visible: {visible:?}\nhidden: {hidden:?}\nchanged: {changed:?}\nhiding first: {hiding_first}");
        if hiding_first {
            answers(&hiding);
        }
        let shown = answers(&showing);
        prop_assert_eq!(shown.len(), QUERIES.len() * 3);
        let expected = answers(&pristine);
        check_answers(&answers(&hiding), &expected, &context)?;
        // The hidden files change (the showing view re-indexes them, dropping old blobs).
        let h = tree.join("pub/h");
        if h.exists() {
            std::fs::remove_dir_all(&h).unwrap();
        }
        for (name, text) in changed.iter().filter(|(n, _)| n.starts_with("h/")) {
            let path = tree.join("pub").join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        answers(&showing);
        check_answers(&answers(&hiding), &expected, &context)?;
    }

    /// Outside changes seen through the watcher's feed (issue 17) answer as a fresh engine does.
    #[test]
    fn outside_changes_answer_as_a_fresh_walk_does(
        visible in files(&VISIBLE_NAMES, text(), 5),
        hidden in files(&HIDDEN_NAMES, hidden_text(), 4),
        visible_changed in files(&VISIBLE_NAMES, text(), 3),
        hidden_changed in files(&HIDDEN_NAMES, hidden_text(), 4),
    ) {
        let base = tempfile::Builder::new().prefix("ctxfs-sni-").tempdir().unwrap();
        let tree = base.path().join("ws");
        write_tree(&tree, &visible, &hidden);
        let kept = engine(&tree, HIDING_VIEW, &base.path().join("kept"), "kept");
        answers(&kept);
        // The watcher builds its watches after the first search; walks are kept once it has.
        std::thread::sleep(std::time::Duration::from_millis(100));
        answers(&kept);
        // Files only where their directory exists (a new directory makes the next search walk).
        let dir_of = |name: &str| if let Some(rest) = name.strip_prefix("secret/") {
            tree.join("secret").join(rest)
        } else {
            tree.join("pub").join(name)
        };
        for (name, text) in visible_changed.iter().chain(&hidden_changed) {
            let path = dir_of(name);
            if path.parent().unwrap().is_dir() {
                std::fs::write(path, text).unwrap();
            }
        }
        let fresh = engine(&tree, HIDING_VIEW, &base.path().join("fresh"), "fresh");
        let context = format!(
            "visible: {visible:?}\nhidden: {hidden:?}\nvisible changed: {visible_changed:?}\nhidden changed: {hidden_changed:?}"
        );
        check_answers(&answers(&kept), &answers(&fresh), &context)?;
    }
}
