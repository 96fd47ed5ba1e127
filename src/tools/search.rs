//! search: the hybrid index when the engine has one, else BM25 by words
//! over passages of the files the session can see, computed at query time.
//!
//! Both rank exactly the visible files, so hidden files change neither the
//! scores nor the order. The index itself lives in `index`; this is the
//! tool's answer format (`/path:12-30` then the passage) and its fallback.

use super::params::SearchParams;
use super::spec::{Effect, Tool, Traits};
use super::{Ctx, Outcome, ToolResult};
use crate::access::{Need, ToolError};
use crate::index::terms::words;
use crate::vfs::Source;
use std::collections::HashMap;
use std::io::Read;
use std::sync::Mutex;

/// Lines per passage, and how many lines consecutive passages share.
const PASSAGE_LINES: usize = 30;
const PASSAGE_OVERLAP: usize = 5;
/// Files larger than this are not searched by words.
const MAX_FILE_BYTES: u64 = 1024 * 1024;
const DEFAULT_LIMIT: u32 = 10;

struct Passage {
    path: String,
    first: usize,
    last: usize,
    text: String,
    terms: HashMap<String, u32>,
    len: usize,
}

fn passages(path: &str, text: &str) -> Vec<Passage> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut start = 0;
    while start < lines.len() {
        let end = (start + PASSAGE_LINES).min(lines.len());
        let body = lines[start..end].join("\n");
        let tokens = words(&body);
        let mut terms = HashMap::new();
        for token in &tokens {
            *terms.entry(token.clone()).or_insert(0) += 1;
        }
        out.push(Passage { path: path.to_string(), first: start + 1, last: end, text: body, terms, len: tokens.len() });
        if end == lines.len() {
            break;
        }
        start = end - PASSAGE_OVERLAP;
    }
    out
}

pub fn search(ctx: &mut Ctx<'_>, params: SearchParams) -> ToolResult {
    let query = words(&params.query);
    if query.is_empty() {
        return Err(ToolError::Message("The query has no words; describe what you are looking for.".into()));
    }
    let limit = params.limit.unwrap_or(DEFAULT_LIMIT).clamp(1, 100) as usize;
    let root = ctx.access.target(params.path.as_deref().unwrap_or("."), Need::Look)?;
    if root.meta.is_none() {
        return Err(ToolError::NotFound(root.path));
    }
    if !root.is_dir() {
        return Err(ToolError::NotADir(root.path));
    }
    if let Some(index) = ctx.index {
        let hits = index
            .search(ctx.access, &root, &params.query, limit)
            .map_err(|e| ToolError::Message(format!("Search failed: {e}. grep still works.")))?;
        let mut body = String::new();
        for hit in &hits {
            body.push_str(&format!("{}:{}-{}\n{}\n\n", hit.path, hit.first_line, hit.last_line, hit.text.trim_end()));
        }
        if hits.is_empty() {
            body = format!("No passages match {:?} in {}.\n", params.query, root.path);
        }
        return Ok(Outcome::Text { body, path: Some(root.path) });
    }
    let found: Mutex<Vec<Passage>> = Mutex::new(Vec::new());
    crate::access::walk::visible_files(ctx.access, root.clone(), &|shown, _rel, file| {
        let Some(source) = (file.open)() else { return };
        let bytes = match source {
            Source::File(file) => {
                let mut buf = Vec::new();
                if file.take(MAX_FILE_BYTES + 1).read_to_end(&mut buf).is_err() || buf.len() as u64 > MAX_FILE_BYTES {
                    return;
                }
                buf
            }
            Source::Bytes(bytes) => bytes.to_vec(),
        };
        let Ok(text) = crate::text::TextFile::decode(&bytes) else { return };
        let mut pieces = passages(shown.as_str(), text.text());
        found.lock().unwrap_or_else(|e| e.into_inner()).append(&mut pieces);
    })?;
    let corpus = found.into_inner().unwrap_or_else(|e| e.into_inner());
    let ranked = rank(&corpus, &query);
    let mut body = String::new();
    for (index, _) in ranked.into_iter().take(limit) {
        let p = &corpus[index];
        body.push_str(&format!("{}:{}-{}\n{}\n\n", p.path, p.first, p.last, p.text));
    }
    if body.is_empty() {
        body = format!("No passages match {:?} in {}.\n", params.query, root.path);
    }
    Ok(Outcome::Text { body, path: Some(root.path) })
}

/// BM25 (k1 1.2, b 0.75) over the given passages only; ties broken by path and line.
fn rank(corpus: &[Passage], query: &[String]) -> Vec<(usize, f64)> {
    let n = corpus.len() as f64;
    if corpus.is_empty() {
        return Vec::new();
    }
    let avg = corpus.iter().map(|p| p.len as f64).sum::<f64>() / n;
    let mut unique: Vec<&String> = query.iter().collect();
    unique.sort();
    unique.dedup();
    let idf: Vec<f64> = unique
        .iter()
        .map(|term| {
            let df = corpus.iter().filter(|p| p.terms.contains_key(*term)).count() as f64;
            ((n - df + 0.5) / (df + 0.5) + 1.0).ln()
        })
        .collect();
    let mut scored: Vec<(usize, f64)> = corpus
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let score = unique
                .iter()
                .zip(&idf)
                .map(|(term, idf)| {
                    let tf = f64::from(*p.terms.get(*term).unwrap_or(&0));
                    idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * p.len as f64 / avg.max(1.0)))
                })
                .sum::<f64>();
            (i, score)
        })
        .filter(|(_, s)| *s > 0.0)
        .collect();
    scored.sort_by(|a, b| {
        b.1.total_cmp(&a.1)
            .then_with(|| corpus[a.0].path.cmp(&corpus[b.0].path))
            .then_with(|| corpus[a.0].first.cmp(&corpus[b.0].first))
    });
    scored
}

pub fn tag(ctx: &mut Ctx<'_>, params: super::params::TagParams) -> ToolResult {
    let target = ctx.access.target(&params.path, Need::Change)?;
    match target.kind() {
        None => return Err(ToolError::NotFound(target.path)),
        Some(crate::vfs::Kind::File) => {}
        Some(crate::vfs::Kind::Dir) => return Err(ToolError::IsADir(target.path)),
        Some(_) => return Err(ToolError::NotRegular(target.path)),
    }
    if params.task.is_none() && params.related.is_none() {
        return Err(ToolError::Message("Give task, related or both.".into()));
    }
    let Some(index) = ctx.index else {
        return Err(ToolError::Message("Tags need the search index, which this server runs without.".into()));
    };
    let bytes = ctx
        .access
        .fs()
        .read_file(&target.real, crate::access::MAX_OPEN_BYTES)
        .map_err(|e| ToolError::from_fs(e, &target.path))?;
    index
        .tag(&target.real, &bytes, params.task.as_deref(), params.related.as_deref())
        .map_err(|e| ToolError::Message(format!("Could not tag {}: {e}.", target.path)))?;
    Ok(Outcome::Text { body: format!("Tagged {}\n", target.path), path: Some(target.path) })
}

// --- The tools' definitions (see `spec`) -------------------------------------

pub struct Search;

impl Tool for Search {
    const NAME: &'static str = "search";
    const TRAITS: Traits = Traits::GUARDED.reads().dedupes().progress().needs_index();
    type Params = SearchParams;

    fn run(ctx: &mut Ctx<'_>, params: SearchParams) -> ToolResult {
        search(ctx, params)
    }
}

pub struct Tag;

impl Tool for Tag {
    const NAME: &'static str = "tag";
    const TRAITS: Traits = Traits::GUARDED.effect(Effect::ChangesIndex).needs_index();
    type Params = super::params::TagParams;

    fn run(ctx: &mut Ctx<'_>, params: super::params::TagParams) -> ToolResult {
        tag(ctx, params)
    }
}
