//! search: the hybrid index when the engine has one, else BM25 by words
//! over passages of the files the session can see, computed at query time
//! with the index's own chunker, words, BM25 and ordering (`index::rank`), so
//! an answer has the same shape either way.
//!
//! Both rank exactly the visible files, so hidden files change neither the
//! scores nor the order. The index itself lives in `index`; this is the
//! tool's answer format (`/path:12-30` then the passage) and its fallback.
//!
//! An answer is kept under the context cap (400 lines, 40,000 characters,
//! past which the middle of a result is elided): when the passages would not
//! fit, each is shown as its best lines, the window of its share of the
//! answer holding the most of the query's words, with that window's line
//! range. So every result is seen, not the first and last few.

use super::params::SearchParams;
use super::spec::{Action, Effect, Tool, Traits};
use super::{Ctx, Outcome, ToolResult};
use crate::access::{Need, ToolError};
use crate::index::background::Readying;
use crate::index::chunk::HalfBytes;
use crate::index::hybrid::{Chunker, TokenChunker};
use crate::index::rank::{self, Bag};
use crate::vfs::Source;
use std::io::Read;
use std::sync::{Arc, Mutex};

/// Files larger than this are not searched by words.
const MAX_FILE_BYTES: u64 = 1024 * 1024;
const DEFAULT_LIMIT: u32 = 10;
/// Lines and characters an answer stays within, under the context cap's 400 and 40,000.
const ANSWER_LINES: usize = 380;
const ANSWER_CHARS: usize = 38_000;
/// The fewest lines a passage is cut to, however many results there are.
const MIN_PASSAGE_LINES: usize = 6;

/// A passage of a visible file, as the index's chunker cuts it, with its words counted.
struct Passage {
    path: String,
    first: usize,
    last: usize,
    text: String,
    words: Bag,
}

/// The file cut by the index's chunker without an embedder (⌈bytes/2⌉ tokens),
/// so results have the same shape whether or not the index opened.
fn passages(path: &str, text: &str) -> Vec<Passage> {
    TokenChunker::new(Arc::new(HalfBytes))
        .pieces(text)
        .into_iter()
        .map(|(first, last, text)| Passage { path: path.to_string(), first, last, words: Bag::of(&text), text })
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
    // A failing index (a full disk, a store another process holds too long)
    // leaves the words, read from the files now, with a line saying why.
    let mut unusable = None;
    if let Some(index) = ctx.index {
        let rankings = crate::index::rankings::Rankings::from_env();
        let progress = ctx.progress.unwrap_or(&|_| {});
        match index.search_report(ctx.access, &root, &params.query, limit, rankings, progress) {
            Ok(found) => return Ok(indexed_answer(ctx, &params.query, &query, root, found)),
            Err(e) => {
                tracing::error!(error = %format!("{e:#}"), "the search index failed; this search ranks by words only");
                unusable = Some(crate::sqlite::failure_in_words(&e));
            }
        }
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
    let bags: Vec<&Bag> = corpus.iter().map(|p| &p.words).collect();
    let scores = rank::bm25_scores(&bags, &query);
    // Ties by path and line, then by place in the file (a file's passages are found together, in order).
    let order = |a: u32, b: u32| {
        let (pa, pb) = (&corpus[a as usize], &corpus[b as usize]);
        pa.path.cmp(&pb.path).then(pa.first.cmp(&pb.first)).then(a.cmp(&b))
    };
    let shown: Vec<Shown<'_>> = rank::top(&scores, limit, &order)
        .into_iter()
        .map(|index| {
            let p = &corpus[index as usize];
            (p.path.as_str(), p.first, p.last, p.text.as_str())
        })
        .collect();
    let mut body = answer(&shown, &query);
    if body.is_empty() {
        body = no_match(&params.query, &root);
    }
    if let Some(why) = unusable {
        body.push_str(&format!(
            "[The search index could not be used ({why}), so these passages were ranked by their words alone, \
             read from the files now.]\n"
        ));
    }
    Ok(Outcome::Text { body, path: Some(root.path) })
}

/// The whole answer when nothing matches.
fn no_match(query: &str, root: &crate::access::Target) -> String {
    format!("No passages match {query:?} in {}.\n", root.path)
}

/// The answer from the index: its passages, the closing line when files
/// wait to be indexed, and what the index should do in the background next.
fn indexed_answer(
    ctx: &Ctx<'_>,
    query: &str,
    terms: &[String],
    root: crate::access::Target,
    found: crate::index::hybrid::Searched,
) -> Outcome {
    let shown: Vec<Shown<'_>> =
        found.hits.iter().map(|h| (h.path.as_str(), h.first_line, h.last_line, h.text.as_str())).collect();
    let mut body = answer(&shown, terms);
    if found.hits.is_empty() {
        body = no_match(query, &root);
    }
    if found.pending > 0 {
        body.push_str(&not_indexed_yet(found.pending, found.pending_words, found.pending_earlier, found.pending_bytes));
    }
    // What the index does in the background for the next search (and, with nothing left, it
    // follows this root's outside changes).
    let readying = match (found.pending, found.uncounted) {
        (1.., _) => Readying::Unindexed,
        (0, true) => Readying::Uncounted,
        (0, false) => Readying::Changed,
    };
    *ctx.readying.lock().unwrap_or_else(|e| e.into_inner()) = Some((root.clone(), readying));
    Outcome::Text { body, path: Some(root.path) }
}

/// The line that closes an answer when `pending` new or changed files
/// (`bytes` of them) wait to be indexed: `words` of them were searched by
/// their words alone (stored ahead of their vectors by a slow embedder),
/// `earlier` as they were before they changed, the rest not at all.
fn not_indexed_yet(pending: usize, words: usize, earlier: usize, bytes: u64) -> String {
    let one = pending == 1;
    let later = "indexing goes on in the background (or run `ctxfs index`)";
    let head = format!(
        "[{} ({:.1} MB) {} not indexed yet",
        counted(pending, "new or changed file", "new or changed files"),
        bytes as f64 / 1e6,
        if one { "is" } else { "are" }
    );
    let unsearched = pending.saturating_sub(words + earlier);
    if unsearched == pending {
        let was = if one { "was" } else { "were" };
        return format!("{head} and {was} not searched; {later}: search again later for the rest.]\n");
    }
    if words == pending {
        let (was, their, them) = if one { ("was", "its", "it") } else { ("were", "their", "them") };
        return format!(
            "{head} and {was} searched by {their} words alone; {later}: search again later to rank {them} by meaning too.]\n"
        );
    }
    let how = [
        (words, "was searched by its words alone", "were searched by their words alone"),
        (earlier, "was searched as it was before it changed", "were searched as they were before they changed"),
        (unsearched, "was not searched", "were not searched"),
    ];
    let how: Vec<String> = how.iter().filter(|(n, ..)| *n > 0).map(|(n, one, many)| counted(*n, one, many)).collect();
    format!("{head}: {}; {later}: search again later for the rest.]\n", how.join(", "))
}

/// `n` and what follows it, in the singular for one and the plural otherwise.
fn counted(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// A result to show: path, first and last line, text.
type Shown<'a> = (&'a str, usize, usize, &'a str);

/// The answer's text: each result's `path:first-last` and passage, every
/// passage cut to its best lines when they would not all fit (module header).
fn answer(results: &[Shown<'_>], query: &[String]) -> String {
    let whole = |(path, first, last, text): &Shown<'_>| format!("{path}:{first}-{last}\n{}\n\n", text.trim_end());
    let full: Vec<String> = results.iter().map(whole).collect();
    let lines: usize = full.iter().map(|r| r.lines().count()).sum();
    let chars: usize = full.iter().map(|r| r.chars().count()).sum();
    if lines <= ANSWER_LINES && chars <= ANSWER_CHARS {
        return full.concat();
    }
    let n = results.len().max(1);
    // Each result's share: its path line and the blank line after it, then passage lines.
    let share_lines = (ANSWER_LINES / n).saturating_sub(2).max(MIN_PASSAGE_LINES);
    let share_chars = ANSWER_CHARS / n;
    let mut out = String::new();
    for (path, first, last, text) in results {
        let all: Vec<&str> = text.trim_end().lines().collect();
        let (from, to) = best_window(&all, query, share_lines, share_chars);
        // A passage whose text has fewer lines than its range (a cut inside a line) keeps its own range.
        let (shown_first, shown_last) =
            if from == 0 && to == all.len() { (*first, *last) } else { (first + from, (first + to - 1).min(*last)) };
        out.push_str(&format!("{path}:{shown_first}-{shown_last}\n{}\n\n", all[from..to].join("\n")));
    }
    out
}

/// The window of at most `max_lines` lines (and, cut from its end, `max_chars`
/// characters, at least one line) holding the most of the query's words:
/// first the most distinct words, then the most occurrences, then the earliest.
fn best_window(lines: &[&str], query: &[String], max_lines: usize, max_chars: usize) -> (usize, usize) {
    let width = max_lines.min(lines.len()).max(1);
    let hits: Vec<Vec<usize>> = lines
        .iter()
        .map(|line| {
            let words = crate::index::terms::terms(line);
            query.iter().map(|q| words.iter().filter(|w| *w == q).count()).collect()
        })
        .collect();
    // Windows start at the passage's start or two lines above a line holding a word (moved up to fit).
    let mut starts = vec![0];
    starts.extend(hits.iter().enumerate().filter(|(_, h)| h.iter().any(|c| *c > 0)).map(|(i, _)| i.saturating_sub(2)));
    let mut best = (0usize, (0usize, 0usize));
    for start in starts {
        let start = start.min(lines.len().saturating_sub(width));
        let window = &hits[start..(start + width).min(lines.len())];
        let distinct = (0..query.len()).filter(|q| window.iter().any(|h| h[*q] > 0)).count();
        let total: usize = window.iter().flatten().sum();
        if (distinct, total) > best.1 || (start < best.0 && (distinct, total) == best.1) {
            best = (start, (distinct, total));
        }
    }
    let from = best.0;
    let mut to = (from + width).min(lines.len());
    while to > from + 1 && lines[from..to].iter().map(|l| l.chars().count() + 1).sum::<usize>() > max_chars {
        to -= 1;
    }
    (from, to)
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
    index.tag(&target.real, &bytes, params.task.as_deref(), params.related.as_deref()).map_err(|e| {
        tracing::error!(error = %format!("{e:#}"), path = %target.path, "could not tag");
        let why = crate::sqlite::failure_in_words(&e);
        ToolError::Message(format!("Could not tag {}: the search index could not be used ({why}).", target.path))
    })?;
    Ok(Outcome::Text { body: format!("Tagged {}\n", target.path), path: Some(target.path) })
}

// --- The tools' definitions (see `spec`) -------------------------------------

pub struct Search;

impl Tool for Search {
    const NAME: &'static str = "search";
    const TITLE: &'static str = "Search by meaning";
    const TRAITS: Traits = Traits::GUARDED.reads().action(Action::Search).dedupes().progress().needs_index();
    type Params = SearchParams;

    fn run(ctx: &mut Ctx<'_>, params: SearchParams) -> ToolResult {
        search(ctx, params)
    }
}

pub struct Tag;

impl Tool for Tag {
    const NAME: &'static str = "tag";
    const TITLE: &'static str = "Tag files for search";
    const TRAITS: Traits =
        Traits::GUARDED.effect(Effect::ChangesIndex).action(Action::Other).needs_index().adds_only().idempotent();
    type Params = super::params::TagParams;

    fn run(ctx: &mut Ctx<'_>, params: super::params::TagParams) -> ToolResult {
        tag(ctx, params)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_closing_line_says_how_the_waiting_files_were_searched() {
        let none = not_indexed_yet(3, 0, 0, 2_500_000);
        assert!(
            none.starts_with("[3 new or changed files (2.5 MB) are not indexed yet and were not searched;"),
            "{none}"
        );
        let all = not_indexed_yet(3, 3, 0, 2_500_000);
        assert!(all.contains("not indexed yet and were searched by their words alone;"), "{all}");
        assert!(all.ends_with("search again later to rank them by meaning too.]\n"), "{all}");
        let some = not_indexed_yet(3, 2, 0, 2_500_000);
        assert!(some.contains("not indexed yet: 2 were searched by their words alone, 1 was not searched;"), "{some}");
        let before = not_indexed_yet(3, 0, 3, 2_500_000);
        assert!(before.contains("not indexed yet: 3 were searched as they were before they changed;"), "{before}");
        let one = not_indexed_yet(1, 0, 1, 300_000);
        assert!(
            one.starts_with(
                "[1 new or changed file (0.3 MB) is not indexed yet: 1 was searched as it was before it changed;"
            ),
            "{one}"
        );
        let each = not_indexed_yet(4, 1, 2, 2_500_000);
        assert!(
            each.contains(
                ": 1 was searched by its words alone, 2 were searched as they were before they changed, 1 was not searched;"
            ),
            "{each}"
        );
    }

    #[test]
    fn an_answer_that_fits_is_every_passage_whole() {
        let results = [("/w/a.rs", 1, 2, "fn alpha() {}\nfn beta() {}\n"), ("/w/b.rs", 5, 5, "gamma\n")];
        assert_eq!(
            answer(&results, &["alpha".into()]),
            "/w/a.rs:1-2\nfn alpha() {}\nfn beta() {}\n\n/w/b.rs:5-5\ngamma\n\n"
        );
    }

    #[test]
    fn passages_that_would_pass_the_cap_are_cut_to_their_best_lines() {
        // Ten passages of 60 lines: 620 lines whole, over the cap; the query's word is on line 40 of each.
        let texts: Vec<String> = (0..10)
            .map(|f| {
                (0..60)
                    .map(|l| if l == 39 { format!("let retry_budget = {f};") } else { format!("// filler {l}") })
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .collect();
        let paths: Vec<String> = (0..10).map(|f| format!("/w/f{f}.rs")).collect();
        let results: Vec<Shown<'_>> = (0..10).map(|f| (paths[f].as_str(), 101, 160, texts[f].as_str())).collect();
        let body = answer(&results, &["budget".into(), "retry".into()]);
        assert!(body.lines().count() <= ANSWER_LINES && body.chars().count() <= ANSWER_CHARS);
        for (f, path) in paths.iter().enumerate() {
            // 38 lines a result less its path and blank line: 36 lines, the passage's last ones (the word's).
            let header = format!("{path}:125-160\n// filler 24\n");
            assert!(body.contains(&header), "{path} missing or cut elsewhere:\n{body}");
            assert!(body.contains(&format!("let retry_budget = {f};")));
        }
        // Without the words anywhere, each passage shows its opening lines.
        let body = answer(&results, &["nothing".into()]);
        assert!(body.starts_with("/w/f0.rs:101-136\n// filler 0\n"));
    }
}
