//! search: the hybrid index when the engine has one, else BM25 by words
//! over passages of the files the session can see, computed at query time
//! with the index's own chunker, words and BM25 (so an answer has the same
//! shape either way).
//!
//! Both rank exactly the visible files, so hidden files change neither the
//! scores nor the order. The index itself lives in `index`; this is the
//! tool's answer format (`/path:12-30` then the passage) and its fallback.

use super::params::SearchParams;
use super::{Ctx, Outcome, ToolResult};
use crate::access::{Need, ToolError};
use crate::vfs::Source;
use std::collections::HashMap;
use std::io::Read;
use std::sync::Mutex;

/// Files larger than this are not searched by words.
const MAX_FILE_BYTES: u64 = 1024 * 1024;
const DEFAULT_LIMIT: u32 = 10;

pub use crate::index::terms::words;

/// A passage of a visible file, as the index's chunker cuts it, with its words counted.
struct Passage {
    path: String,
    first: usize,
    last: usize,
    text: String,
    terms: HashMap<String, u32>,
    len: usize,
}

/// The file cut as the index cuts it without an embedder (480 tokens of ⌈bytes/2⌉, 64 of overlap),
/// so results have the same shape whether or not the index opened.
fn passages(path: &str, text: &str) -> Vec<Passage> {
    let pieces = crate::index::chunk::chunk(
        text,
        &crate::index::chunk::HalfBytes,
        crate::index::chunk::SIZE,
        crate::index::chunk::OVERLAP,
    );
    pieces
        .into_iter()
        .map(|piece| {
            let tokens = crate::index::terms::terms(&piece.text);
            let mut terms = HashMap::new();
            for token in &tokens {
                *terms.entry(token.clone()).or_insert(0) += 1;
            }
            Passage {
                path: path.to_string(),
                first: piece.first_line,
                last: piece.last_line,
                text: piece.text,
                terms,
                len: tokens.len(),
            }
        })
        .collect()
}

pub fn search(ctx: &mut Ctx<'_>, params: SearchParams) -> ToolResult {
    let query = crate::index::terms::query_terms(&params.query);
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
        let rankings = crate::index::hybrid::Rankings::from_env();
        let found = index
            .search_report(ctx.access, &root, &params.query, limit, rankings, ctx.progress.unwrap_or(&|_| {}))
            .map_err(|e| ToolError::Message(format!("Search failed: {e}. grep still works.")))?;
        let mut body = String::new();
        for hit in &found.hits {
            body.push_str(&format!("{}:{}-{}\n{}\n\n", hit.path, hit.first_line, hit.last_line, hit.text.trim_end()));
        }
        if found.hits.is_empty() {
            body = format!("No passages match {:?} in {}.\n", params.query, root.path);
        }
        if found.pending > 0 {
            body.push_str(&format!(
                "[{} new or changed files ({:.1} MB) are not indexed yet and were not searched; \
                 indexing goes on with each search (or run `ctxfs index`): search again for the rest.]\n",
                found.pending,
                found.pending_bytes as f64 / 1e6
            ));
        }
        return Ok(Outcome::Text { body, path: Some(root.path) });
    }
    let found: Mutex<Vec<Passage>> = Mutex::new(Vec::new());
    super::find::visible_files(ctx.access, root.clone(), &|shown, _rel, file| {
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
        let Ok(text) = super::text::TextFile::decode(&bytes) else { return };
        let mut pieces = passages(shown.as_str(), text.text());
        found.lock().unwrap_or_else(|e| e.into_inner()).append(&mut pieces);
    })?;
    let corpus = found.into_inner().unwrap_or_else(|e| e.into_inner());
    let ranked = rank(&corpus, &query);
    let mut body = String::new();
    for (index, _) in ranked.into_iter().take(limit) {
        let p = &corpus[index];
        body.push_str(&format!("{}:{}-{}\n{}\n\n", p.path, p.first, p.last, p.text.trim_end()));
    }
    if body.is_empty() {
        body = format!("No passages match {:?} in {}.\n", params.query, root.path);
    }
    Ok(Outcome::Text { body, path: Some(root.path) })
}

/// BM25 (the index's: `index::rank`) over the given passages only; ties broken by path and line.
fn rank(corpus: &[Passage], query: &[String]) -> Vec<(usize, f64)> {
    use crate::index::rank::{bm25, idf};
    let n = corpus.len() as f64;
    if corpus.is_empty() {
        return Vec::new();
    }
    let avg = corpus.iter().map(|p| p.len as f64).sum::<f64>() / n;
    let idfs: Vec<f64> =
        query.iter().map(|term| idf(n, corpus.iter().filter(|p| p.terms.contains_key(term)).count() as f64)).collect();
    let mut scored: Vec<(usize, f64)> = corpus
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let score = query
                .iter()
                .zip(&idfs)
                .map(|(term, idf)| match p.terms.get(term) {
                    Some(tf) => bm25(*idf, f64::from(*tf), p.len as f64, avg),
                    None => 0.0,
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
