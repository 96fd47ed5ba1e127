//! The chunking conformance files (`conformance/chunk.json`, every character a
//! token; `conformance/chunk_tokens.json`, a token a run of non-whitespace) run
//! against `ctxfs::index::chunk::chunk`. Every case runs; failures are collected
//! and reported by name at the end. This is not the engine's runner
//! (`tests/conformance.rs`): a case here is a text and its pieces, no session.

use ctxfs::index::chunk::{chunk, Characters, Tokenizer, Whitespace};
use serde_json::Value;
use std::path::Path;

#[test]
fn chunk_characters() {
    run("chunk.json", "chars", &Characters);
}

#[test]
fn chunk_tokens() {
    run("chunk_tokens.json", "whitespace", &Whitespace);
}

fn run(file: &str, tokenizer_name: &str, tokenizer: &dyn Tokenizer) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("conformance").join(file);
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("the conformance file is readable"))
        .expect("the conformance file is JSON");
    assert_eq!(doc["tokenizer"], tokenizer_name, "{file} names another tokenizer");
    let cases = doc["cases"].as_array().expect("cases is a list");
    assert!(!cases.is_empty(), "{file} has no cases");
    let mut failures = Vec::new();
    for case in cases {
        let name = case["name"].as_str().expect("a case has a name");
        let text = case["text"].as_str().expect("a case has a text");
        let size = case["size"].as_u64().expect("a case has a size") as usize;
        let overlap = case["overlap"].as_u64().expect("a case has an overlap") as usize;
        let expected: Vec<(usize, usize, String)> = case["pieces"]
            .as_array()
            .expect("a case has pieces")
            .iter()
            .map(|p| {
                (
                    p["start"].as_u64().unwrap() as usize,
                    p["end"].as_u64().unwrap() as usize,
                    p["text"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        for (start, end, piece) in &expected {
            assert_eq!(
                text.get(*start..*end),
                Some(piece.as_str()),
                "{file} {name}: a piece's text is not text[start..end]"
            );
        }
        let got: Vec<(usize, usize, String)> =
            chunk(text, tokenizer, size, overlap).into_iter().map(|p| (p.start, p.end, p.text)).collect();
        if got != expected {
            let spans = |v: &[(usize, usize, String)]| {
                v.iter().map(|(s, e, _)| format!("{s}..{e}")).collect::<Vec<_>>().join(", ")
            };
            failures.push(format!("{name}: expected [{}], got [{}]", spans(&expected), spans(&got)));
        }
    }
    assert!(
        failures.is_empty(),
        "{file}: {} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
