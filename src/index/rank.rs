//! Scoring and fusion for one search over the visible passages: BM25, the best-N selection, and the file-first reciprocal rank fusion; not the store, the refresh or the view.
//!
//! Everything here works on indices into the caller's lists (passages are
//! "units", files are places in the refresh's list), so it never sees a
//! hidden file: the caller only hands it visible ones, and every statistic is
//! computed over what it was handed. Ties go by `order` (shown path, line,
//! place), never by position, so the walk's order changes nothing.
//!
//! Fusion (the default: `fused_order`, then `cap_per_file`; `fuse_flat`
//! without the cap): passages are fused by reciprocal rank
//! of the passage rankings (words, meaning) and of the file rankings
//! (whole-file BM25, path and tags), each hit also adding its score as a
//! share of its ranking's best (`Weights::by_score`), so a ranking whose
//! first hit stands far above the rest speaks louder than one whose hits are
//! all alike; a file ranking votes for the file's
//! opening passage, which is what says what a file is (a module's doc
//! comment, its imports, its first definitions); for a query naming
//! identifiers, the caller has it vote for the file's best passage instead
//! (`rankings::FileVotes`). So the answer holds the best passages and the
//! openings of the best files. At most `Weights::per_file` passages of a
//! file come before the other files' (`cap_per_file`), so one file with many
//! good passages does not push the next files out of a short answer. Two
//! other fusions are kept for measuring, both below it on the tuning
//! questions (bench/README.md): `fuse_blend` (a file ranking votes for the
//! file's best passage instead) and
//! `fuse_file_first` (files ranked by a fusion of their own, then each
//! file's best passage in turn).

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

pub(crate) const BM25_K1: f64 = 1.2;
pub(crate) const BM25_B: f64 = 0.75;

/// The weights of the fusion and its constant (see the module header).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Weights {
    /// Reciprocal rank fusion's constant.
    pub k: f64,
    /// How much a hit's score counts beside its rank: each ranking adds
    /// `by_score * weight / (k + 1)` times the hit's score divided by the
    /// ranking's best (a score at or below zero adds nothing). Ranks alone
    /// say nothing of how far apart the scores are; with this, a hit close to
    /// its ranking's best gains up to `by_score` times what the top rank's
    /// reciprocal does, and one far below gains little.
    pub by_score: f64,
    /// Passages by words and by meaning (for the static table; another
    /// embedder's meaning counts as `Embedder::meaning_weight` says).
    pub words: f64,
    pub meaning: f64,
    /// Files by their best passage by words, by their best passage by meaning,
    /// by whole-file BM25, and by path and tags.
    pub file_words: f64,
    pub file_meaning: f64,
    pub files: f64,
    pub paths: f64,
    /// Files whose tags (an agent's `tag`: the task, what it relates to)
    /// hold most of the query's words (`rankings::TAGS_COVER`). Its 4 puts
    /// such a file above passages first in one or two rankings (a word of
    /// the question in the text, and its meaning), below one first in
    /// nearly all of them (6 rankings' worth). Not tuned on the held-out
    /// sets, which tag nothing.
    pub tags: f64,
    /// How many passages of one file come before every other ranked file has
    /// had its turn (0: no cap), in either fusion.
    pub per_file: f64,
}

impl Weights {
    /// Chosen on the tuning halves of bench/search_heldout.py's question sets (bench/README.md).
    pub const DEFAULT: Weights = Weights {
        k: 60.0,
        by_score: 3.0,
        words: 1.0,
        meaning: 1.0,
        file_words: 1.0,
        file_meaning: 1.0,
        files: 1.5,
        paths: 0.5,
        tags: 4.0,
        per_file: 2.0,
    };

    /// The `name=value` pairs of `text`, `,`-separated (names as the
    /// fields), each checked: a weight's name and a number.
    fn settings(text: &str) -> Result<Vec<(&str, f64)>, String> {
        let mut out = Vec::new();
        let mut checked = Weights::DEFAULT;
        for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').ok_or_else(|| format!("{pair:?} is not name=value"))?;
            let value: f64 = value.trim().parse().map_err(|_| format!("{pair:?}: not a number"))?;
            let name = name.trim();
            checked.set(name, value)?;
            out.push((name, value));
        }
        Ok(out)
    }

    /// These weights with `settings` (checked by `Weights::settings`) over them.
    fn over<S: AsRef<str>>(mut self, settings: &[(S, f64)]) -> Weights {
        for (name, value) in settings {
            // Every name was checked when the settings were read.
            let _ = self.set(name.as_ref(), *value);
        }
        self
    }

    /// Sets the weight named `name` (as the field).
    fn set(&mut self, name: &str, value: f64) -> Result<(), String> {
        let slot = match name {
            "k" => &mut self.k,
            "by_score" => &mut self.by_score,
            "words" => &mut self.words,
            "meaning" => &mut self.meaning,
            "file_words" => &mut self.file_words,
            "file_meaning" => &mut self.file_meaning,
            "files" => &mut self.files,
            "paths" => &mut self.paths,
            "tags" => &mut self.tags,
            "per_file" => &mut self.per_file,
            other => return Err(format!("{other:?} is not a weight")),
        };
        *slot = value;
        Ok(())
    }

    /// The weights of a search whose embedder's meaning ranking counts
    /// `meaning` (`Embedder::meaning_weight`), with what
    /// `CTXFS_SEARCH_WEIGHTS` gives over them: a knob for measuring and
    /// tuning, read and parsed once, not a user setting.
    pub fn from_env(meaning: f64) -> Weights {
        static FROM_ENV: std::sync::OnceLock<Vec<(String, f64)>> = std::sync::OnceLock::new();
        let knob = FROM_ENV.get_or_init(|| {
            let text = std::env::var("CTXFS_SEARCH_WEIGHTS").unwrap_or_default();
            match Weights::settings(&text) {
                Ok(settings) => settings.into_iter().map(|(name, value)| (name.to_owned(), value)).collect(),
                Err(e) => {
                    tracing::warn!("CTXFS_SEARCH_WEIGHTS: {e}; using the defaults");
                    Vec::new()
                }
            }
        });
        Weights { meaning, ..Weights::DEFAULT }.over(knob)
    }
}

/// BM25's inverse document frequency of a term found in `df` of `n` documents.
pub(crate) fn idf(n: f64, df: f64) -> f64 {
    ((n - df + 0.5) / (df + 0.5) + 1.0).ln()
}

/// One term's BM25 contribution to a document of `len` words (average `avg`) holding it `tf` times.
pub(crate) fn bm25(idf: f64, tf: f64, len: f64, avg: f64) -> f64 {
    idf * saturation(tf, len, avg)
}

/// What BM25 multiplies a term's idf by (`bm25` is exactly that product):
/// the count, saturating, normalised by the document's length. Apart, so a
/// pass that meets the counts before it knows the idf computes the same score.
pub(crate) fn saturation(tf: f64, len: f64, avg: f64) -> f64 {
    let norm = 1.0 - BM25_B + BM25_B * len / avg.max(1.0);
    tf * (BM25_K1 + 1.0) / (tf + BM25_K1 * norm)
}

/// `saturation` for one mean length, looked up for the counts and lengths
/// most passages have: the words' pass needs it for every posting, and its
/// two divisions were a fifth of that pass's time in a profile at a million
/// passages. Each value is `saturation`'s to the bit.
pub(crate) struct Saturations {
    avg: f64,
    values: Vec<f64>,
}

/// The counts (1 to this) and lengths (below this) `Saturations` holds: 32 KB;
/// 99.9 % of the passages of the 1M benchmark are shorter (the mean is 175 words).
const SATURATED_COUNTS: usize = 8;
const SATURATED_LENGTHS: usize = 512;

impl Saturations {
    pub(crate) fn new(avg: f64) -> Saturations {
        let mut values = Vec::with_capacity(SATURATED_COUNTS * SATURATED_LENGTHS);
        for tf in 1..=SATURATED_COUNTS {
            values.extend((0..SATURATED_LENGTHS).map(|len| saturation(tf as f64, len as f64, avg)));
        }
        Saturations { avg, values }
    }

    /// `saturation(tf, len, avg)`.
    #[inline]
    pub(crate) fn of(&self, tf: u32, len: u32) -> f64 {
        let (row, column) = ((tf as usize).wrapping_sub(1), len as usize);
        if row < SATURATED_COUNTS && column < SATURATED_LENGTHS {
            self.values[row * SATURATED_LENGTHS + column]
        } else {
            saturation(f64::from(tf), f64::from(len), self.avg)
        }
    }
}

/// A text's words for BM25 when there is no store to count them: each term's count, and the text's length in words.
pub(crate) struct Bag {
    terms: fnv::FnvHashMap<String, u32>,
    len: usize,
}

impl Bag {
    /// The bag of the text's words (`terms::terms`), as the store counts a passage's.
    pub(crate) fn of(text: &str) -> Bag {
        let counted = super::terms::CountedTerms::of(text);
        Bag { terms: counted.counts, len: counted.total }
    }
}

/// BM25 of each bag for the query's terms, with document frequencies and the
/// mean length counted over `bags` alone (the candidates are all there is).
pub(crate) fn bm25_scores(bags: &[&Bag], query: &[String]) -> Vec<f64> {
    if bags.is_empty() {
        return Vec::new();
    }
    let n = bags.len() as f64;
    let avg = bags.iter().map(|b| b.len as f64).sum::<f64>() / n;
    let idfs: Vec<f64> =
        query.iter().map(|term| idf(n, bags.iter().filter(|b| b.terms.contains_key(term)).count() as f64)).collect();
    bags.iter()
        .map(|b| {
            query
                .iter()
                .zip(&idfs)
                .map(|(term, idf)| match b.terms.get(term) {
                    Some(tf) => bm25(*idf, f64::from(*tf), b.len as f64, avg),
                    None => 0.0,
                })
                .sum::<f64>()
        })
        .collect()
}

/// The `depth` best indices with a positive score, best first; ties by `order`.
///
/// One pass keeps the best so far in a bounded heap whose head is the worst
/// of them: at a million passages most scores are passed over with one
/// comparison, where collecting every positive score and selecting among
/// them cost a words ranking of common words most of its time.
pub(crate) fn top(scores: &[f64], depth: usize, order: &dyn Fn(u32, u32) -> Ordering) -> Vec<u32> {
    top_scored(scores, depth, order).into_iter().map(|(i, _)| i).collect()
}

/// `top`, each index with its score.
pub(crate) fn top_scored(scores: &[f64], depth: usize, order: &dyn Fn(u32, u32) -> Ordering) -> Vec<(u32, f64)> {
    top_of((0..scores.len() as u32).map(|i| (i, scores[i as usize])), depth, order)
}

/// `top_scored` when only `candidates` (each once) may score above zero: the
/// same answer, without a pass over every index (a ranking of a million
/// passages where a few thousand scored).
pub(crate) fn top_among(
    candidates: &[u32],
    scores: &[f64],
    depth: usize,
    order: &dyn Fn(u32, u32) -> Ordering,
) -> Vec<(u32, f64)> {
    top_of(candidates.iter().map(|i| (*i, scores[*i as usize])), depth, order)
}

/// `top_scored` of indices given with their scores (each index once).
pub(crate) fn top_of_scored(
    scored: &[(u32, f64)],
    depth: usize,
    order: &dyn Fn(u32, u32) -> Ordering,
) -> Vec<(u32, f64)> {
    top_of(scored.iter().copied(), depth, order)
}

fn top_of(
    scored: impl ExactSizeIterator<Item = (u32, f64)>,
    depth: usize,
    order: &dyn Fn(u32, u32) -> Ordering,
) -> Vec<(u32, f64)> {
    if depth == 0 {
        return Vec::new();
    }
    let mut kept: BinaryHeap<Ranked<'_>> = BinaryHeap::with_capacity(depth.min(scored.len()) + 1);
    for (i, score) in scored {
        if score <= 0.0 {
            continue;
        }
        let entry = Ranked { score, index: i, order };
        if kept.len() < depth {
            kept.push(entry);
        } else if kept.peek().is_some_and(|worst| entry < *worst) {
            kept.pop();
            kept.push(entry);
        }
    }
    kept.into_sorted_vec().into_iter().map(|r| (r.index, r.score)).collect()
}

/// An index with its score, ordered best first: higher score, then `order`.
struct Ranked<'a> {
    score: f64,
    index: u32,
    order: &'a dyn Fn(u32, u32) -> Ordering,
}

impl Ord for Ranked<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        other.score.total_cmp(&self.score).then_with(|| (self.order)(self.index, other.index))
    }
}

impl PartialOrd for Ranked<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Ranked<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Ranked<'_> {}

/// The first place at or after `from` whose item is not `before`, in
/// `items` whose items from `from` on are all `before` up to some place and
/// none after it (a sorted list and "below a key"): galloping, then a
/// binary search, so a walk of ascending keys over a list costs steps as
/// long as the gaps it passes over. Both walks of one sorted list by another
/// use it: MaxScore's terms seeking a chunk, the paths' rows joined with the
/// visible files'.
pub(crate) fn seek<T>(items: &[T], from: usize, before: impl Fn(&T) -> bool) -> usize {
    let (mut lo, mut step) = (from, 1);
    while lo + step < items.len() && before(&items[lo + step]) {
        lo += step;
        step *= 2;
    }
    let hi = (lo + step + 1).min(items.len());
    lo + items[lo..hi].partition_point(before)
}

/// Every unit with a vector (`u16::MAX`: none).
pub(crate) fn select_all(agree: &[u16]) -> Vec<u32> {
    (0..agree.len() as u32).filter(|i| agree[*i as usize] != u16::MAX).collect()
}

/// How many units agree with the query in each count of bits, `0..=dims`
/// (`u16::MAX`: no vector, not counted).
pub(crate) fn histogram(agree: &[u16], dims: usize) -> Vec<usize> {
    let mut histogram = vec![0usize; dims + 1];
    for a in agree.iter().filter(|a| **a != u16::MAX) {
        histogram[(*a as usize).min(dims)] += 1;
    }
    histogram
}

/// The `n` units whose codes agree most with the query's; ties at the
/// threshold go by `order` (path, line, place), so the choice depends on the
/// visible units alone. The agreements' histogram (`histogram`, counted by
/// the scan) gives the threshold without sorting a million units.
pub(crate) fn select_most(
    agree: &[u16],
    histogram: &[usize],
    n: usize,
    order: &dyn Fn(u32, u32) -> Ordering,
) -> Vec<u32> {
    let dims = histogram.len().saturating_sub(1);
    if histogram.iter().sum::<usize>() <= n {
        return select_all(agree);
    }
    // The highest agreement `t` with at least `n` units at or above it.
    let (mut t, mut at_or_above) = (dims, 0);
    loop {
        at_or_above += histogram[t];
        if at_or_above >= n || t == 0 {
            break;
        }
        t -= 1;
    }
    // One pass: those above the threshold, and those at it.
    let (mut out, mut ties): (Vec<u32>, Vec<u32>) = (Vec::with_capacity(n), Vec::new());
    for (i, a) in agree.iter().enumerate() {
        match (*a as usize).cmp(&t) {
            _ if *a == u16::MAX => {}
            Ordering::Greater => out.push(i as u32),
            Ordering::Equal => ties.push(i as u32),
            Ordering::Less => {}
        }
    }
    let room = n - out.len();
    if ties.len() > room {
        ties.select_nth_unstable_by(room, |a, b| order(*a, *b));
        ties.truncate(room);
    }
    out.extend(ties);
    out
}

/// Each file's best score among its units (files own the units
/// `starts[f]..starts[f + 1]`): the plain form `best_per_file_of` is checked against.
#[cfg(test)]
pub(crate) fn best_per_file(unit_scores: &[f64], starts: &[u32]) -> Vec<f64> {
    starts.windows(2).map(|w| unit_scores[w[0] as usize..w[1] as usize].iter().copied().fold(0.0, f64::max)).collect()
}

/// `best_per_file` when only the units `scored` (each with its score) may
/// score above zero (`unit_file`: each unit's file).
pub(crate) fn best_per_file_of(scored: &[(u32, f64)], unit_file: &[u32], files: usize) -> Vec<f64> {
    let mut best = vec![0.0; files];
    for (unit, score) in scored {
        let file = unit_file[*unit as usize] as usize;
        best[file] = f64::max(best[file], *score);
    }
    best
}

/// One ranking to fuse: its weight, and its indices best first, each with
/// its score (higher is better; scores are compared only within a ranking).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Ranking {
    pub weight: f64,
    pub ranked: Vec<(u32, f64)>,
}

impl Ranking {
    pub(crate) fn new(weight: f64, ranked: Vec<(u32, f64)>) -> Ranking {
        Ranking { weight, ranked }
    }
}

/// Reciprocal rank fusion of weighted rankings of indices, with the constant `k`.
fn rrf(rankings: &[Ranking], k: f64) -> HashMap<u32, f64> {
    fused_scores(rankings, k, 0.0)
}

/// Reciprocal rank fusion, each hit also adding `by_score` shares of its
/// score relative to its ranking's best (see `Weights::by_score`).
fn fused_scores(rankings: &[Ranking], k: f64, by_score: f64) -> HashMap<u32, f64> {
    let mut fused: HashMap<u32, f64> = HashMap::new();
    for Ranking { weight, ranked } in rankings {
        let best = ranked.first().map_or(0.0, |(_, score)| *score);
        for (rank, (i, score)) in ranked.iter().enumerate() {
            let mut gain = weight / (k + rank as f64 + 1.0);
            if by_score > 0.0 && best > 0.0 {
                gain += by_score * weight / (k + 1.0) * (score / best).clamp(0.0, 1.0);
            }
            *fused.entry(*i).or_default() += gain;
        }
    }
    fused
}

/// What file-first fusion needs to know about the units and files.
pub(crate) struct Layout<'a> {
    /// The file of each unit.
    pub unit_file: &'a [u32],
    /// File `f` owns units `starts[f]..starts[f + 1]`.
    pub starts: &'a [u32],
    /// Ties between units: shown path, line, place.
    pub unit_order: &'a dyn Fn(u32, u32) -> Ordering,
    /// Ties between files: shown path.
    pub file_order: &'a dyn Fn(u32, u32) -> Ordering,
    /// The passage to show for a file that no passage ranking reached.
    pub fallback: &'a dyn Fn(u32) -> u32,
    /// Reciprocal rank fusion's constant.
    pub k: f64,
}

/// The first `limit` units, best passages of the best files first (see the module header).
pub(crate) fn fuse_file_first(passages: &[Ranking], files: &[Ranking], layout: &Layout<'_>, limit: usize) -> Vec<u32> {
    let passage_score = rrf(passages, layout.k);
    let file_score = rrf(files, layout.k);
    let mut ranked_files: Vec<(u32, f64)> = file_score.iter().map(|(f, s)| (*f, *s)).collect();
    // A file reached only through its passages still counts, below every file a file ranking reached.
    let mut only_passages: Vec<u32> = passage_score
        .keys()
        .map(|unit| layout.unit_file[*unit as usize])
        .filter(|file| !file_score.contains_key(file))
        .collect();
    only_passages.sort_unstable();
    only_passages.dedup();
    ranked_files.extend(only_passages.into_iter().map(|file| (file, 0.0)));
    ranked_files.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| (layout.file_order)(a.0, b.0)));
    let mut per_file: Vec<Vec<u32>> = ranked_files
        .iter()
        .map(|(file, _)| {
            let range = layout.starts[*file as usize]..layout.starts[*file as usize + 1];
            let mut own: Vec<u32> = range.filter(|u| passage_score.contains_key(u)).collect();
            own.sort_by(|a, b| passage_score[b].total_cmp(&passage_score[a]).then_with(|| (layout.unit_order)(*a, *b)));
            if own.is_empty() {
                own.push((layout.fallback)(*file));
            }
            own
        })
        .collect();
    let mut out = Vec::with_capacity(limit);
    let mut round = 0;
    while out.len() < limit {
        let mut any = false;
        for own in per_file.iter_mut() {
            if let Some(unit) = own.get(round) {
                any = true;
                out.push(*unit);
                if out.len() == limit {
                    break;
                }
            }
        }
        if !any {
            break;
        }
        round += 1;
    }
    out
}

/// The first `limit` units of the blended fusion (the default): passages by
/// reciprocal rank fusion of the passage rankings, each file ranking voting
/// for its file's best passage (the best by those rankings, else
/// `layout.fallback`); at most `per_file` passages of a file come before
/// every other voted-for passage has had its place (0: no cap).
pub(crate) fn fuse_blend(
    passages: &[Ranking],
    files: &[Ranking],
    layout: &Layout<'_>,
    per_file: usize,
    limit: usize,
) -> Vec<u32> {
    let passage_score = rrf(passages, layout.k);
    let mut best: HashMap<u32, u32> = HashMap::new();
    for (&unit, score) in &passage_score {
        let file = layout.unit_file[unit as usize];
        let better = match best.get(&file) {
            None => true,
            Some(&other) => {
                score.total_cmp(&passage_score[&other]).then_with(|| (layout.unit_order)(other, unit)).is_gt()
            }
        };
        if better {
            best.insert(file, unit);
        }
    }
    let mut score = passage_score.clone();
    for Ranking { weight, ranked } in files {
        for (rank, (file, _)) in ranked.iter().enumerate() {
            let unit = best.get(file).copied().unwrap_or_else(|| (layout.fallback)(*file));
            *score.entry(unit).or_default() += weight / (layout.k + rank as f64 + 1.0);
        }
    }
    let mut ordered: Vec<(u32, f64)> = score.into_iter().collect();
    ordered.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| (layout.unit_order)(a.0, b.0)));
    cap_per_file(ordered.into_iter().map(|(u, _)| u), layout.unit_file, per_file, limit)
}

/// The first `limit` of `ordered`, at most `per_file` passages of a file
/// coming before every other file's passages have had their place (0: no
/// cap), so one file with many good passages does not crowd the others out.
pub(crate) fn cap_per_file(
    ordered: impl IntoIterator<Item = u32>,
    unit_file: &[u32],
    per_file: usize,
    limit: usize,
) -> Vec<u32> {
    if per_file == 0 {
        return ordered.into_iter().take(limit).collect();
    }
    let mut taken: HashMap<u32, usize> = HashMap::new();
    let (mut out, mut later) = (Vec::with_capacity(limit), Vec::new());
    for unit in ordered {
        let count = taken.entry(unit_file[unit as usize]).or_default();
        *count += 1;
        if *count <= per_file {
            out.push(unit);
            if out.len() == limit {
                return out;
            }
        } else {
            later.push(unit);
        }
    }
    out.extend(later.into_iter().take(limit - out.len()));
    out
}

/// The first `limit` units by `fused_scores` of passage rankings (ties by `order`).
pub(crate) fn fuse_flat(
    rankings: &[Ranking],
    k: f64,
    by_score: f64,
    order: &dyn Fn(u32, u32) -> Ordering,
    limit: usize,
) -> Vec<u32> {
    fused_order(rankings, k, by_score, order).take(limit).collect()
}

/// Every unit `fused_scores` reaches, best first (ties by `order`).
pub(crate) fn fused_order(
    rankings: &[Ranking],
    k: f64,
    by_score: f64,
    order: &dyn Fn(u32, u32) -> Ordering,
) -> impl Iterator<Item = u32> {
    let mut ordered: Vec<(u32, f64)> = fused_scores(rankings, k, by_score).into_iter().collect();
    ordered.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| order(a.0, b.0)));
    ordered.into_iter().map(|(u, _)| u)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saturations_looked_up_are_those_computed() {
        let table = Saturations::new(174.98);
        for tf in [0, 1, 2, 7, 8, 9, 40] {
            for len in [0, 1, 175, 511, 512, 3415] {
                let computed = saturation(f64::from(tf), f64::from(len), 174.98);
                assert_eq!(table.of(tf, len).to_bits(), computed.to_bits(), "{tf} {len}");
            }
        }
    }

    proptest::proptest! {
        /// The bounded pass keeps what sorting every positive score keeps, in
        /// the same order, ties (scores drawn from a few values) included.
        #[test]
        fn top_is_the_sorted_positive_scores_cut_at_depth(
            picks in proptest::collection::vec(0usize..6, 0..300),
            depth in 0usize..40,
        ) {
            let values = [0.0, -1.0, 0.5, 1.25, 3.0, 3.0];
            let scores: Vec<f64> = picks.iter().map(|p| values[*p]).collect();
            // Ties go by a key that is not the index, as paths are not the walk's order.
            let key = |i: u32| (i * 7919) % 1009;
            let order = |a: u32, b: u32| key(a).cmp(&key(b)).then(a.cmp(&b));
            let mut expected: Vec<u32> = (0..scores.len() as u32).filter(|i| scores[*i as usize] > 0.0).collect();
            expected.sort_by(|a, b| scores[*b as usize].total_cmp(&scores[*a as usize]).then_with(|| order(*a, *b)));
            expected.truncate(depth);
            proptest::prop_assert_eq!(top(&scores, depth, &order), expected.clone());
            // Among candidates in any order (here reversed), with every scored index among them: the same.
            let candidates: Vec<u32> = (0..scores.len() as u32).rev().filter(|i| picks[*i as usize] != 0).collect();
            let among: Vec<u32> = top_among(&candidates, &scores, depth, &order).into_iter().map(|(i, _)| i).collect();
            proptest::prop_assert_eq!(among, expected);
            // Files of three units each: the best per file is the same counted either way.
            let unit_file: Vec<u32> = (0..scores.len() as u32).map(|u| u / 3).collect();
            let files = scores.len().div_ceil(3);
            let starts: Vec<u32> = (0..=files as u32).map(|f| (f * 3).min(scores.len() as u32)).collect();
            proptest::prop_assert_eq!(
                best_per_file_of(&candidates.iter().map(|u| (*u, scores[*u as usize])).collect::<Vec<_>>(), &unit_file, files),
                best_per_file(&scores, &starts)
            );
        }
    }

    #[test]
    fn select_most_is_the_top_by_agreement_then_order() {
        let mut state = 7u64;
        let agree: Vec<u16> = (0..5000)
            .map(|_| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                if state >> 60 == 0 {
                    u16::MAX
                } else {
                    ((state >> 33) % 40) as u16
                }
            })
            .collect();
        // An order unrelated to the index, so ties are not settled by position.
        let order = |a: u32, b: u32| {
            (a.wrapping_mul(2654435761) % 1000).cmp(&(b.wrapping_mul(2654435761) % 1000)).then(a.cmp(&b))
        };
        for n in [1, 10, 500, 4000, 6000] {
            let mut expected = select_all(&agree);
            expected.sort_by(|a, b| agree[*b as usize].cmp(&agree[*a as usize]).then_with(|| order(*a, *b)));
            expected.truncate(n);
            expected.sort();
            let mut got = select_most(&agree, &histogram(&agree, 39), n, &order);
            got.sort();
            assert_eq!(got, expected, "n = {n}");
        }
    }

    #[test]
    fn file_first_shows_the_best_passage_of_each_file_before_second_ones() {
        // Three files: 0 owns units 0-2, 1 owns 3-4, 2 owns 5.
        let unit_file = [0, 0, 0, 1, 1, 2];
        let starts = [0, 3, 5, 6];
        let by_index = |a: u32, b: u32| a.cmp(&b);
        let layout = Layout {
            unit_file: &unit_file,
            starts: &starts,
            unit_order: &by_index,
            file_order: &by_index,
            fallback: &|f| starts[f as usize],
            k: 30.0,
        };
        // Passages: 1 then 2 (file 0), then 4 (file 1). Files: 1 first, then 0, then 2 (no passage ranked).
        let passages = [ranking(&[1, 2, 4])];
        let files = [ranking(&[1, 0, 2])];
        assert_eq!(fuse_file_first(&passages, &files, &layout, 10), vec![4, 1, 5, 2]);
        assert_eq!(fuse_file_first(&passages, &files, &layout, 2), vec![4, 1]);
        // A file only passages reach comes after the ranked ones.
        assert_eq!(fuse_file_first(&passages, &[ranking(&[2])], &layout, 10), vec![5, 1, 4, 2]);
        assert_eq!(fuse_flat(&passages, 30.0, 0.0, &by_index, 2), vec![1, 2]);
        // Blended: a file's vote goes to its best passage; at most one passage a file before the others.
        let blended = fuse_blend(&[ranking(&[1, 2, 4])], &[ranking(&[2, 1])], &layout, 1, 10);
        assert_eq!(blended, vec![4, 1, 5, 2]);
        assert_eq!(fuse_blend(&[ranking(&[1, 2, 4])], &[], &layout, 0, 10), vec![1, 2, 4]);
    }

    #[test]
    fn a_file_shows_at_most_its_share_before_the_next_files() {
        // File 0 owns units 0-3, file 1 unit 4, file 2 unit 5; file 0's passages lead.
        let unit_file = [0, 0, 0, 0, 1, 2];
        let ordered = [0, 1, 2, 4, 3, 5];
        assert_eq!(cap_per_file(ordered, &unit_file, 2, 4), vec![0, 1, 4, 5]);
        // The passages held back come next, in their order.
        assert_eq!(cap_per_file(ordered, &unit_file, 2, 10), vec![0, 1, 4, 5, 2, 3]);
        assert_eq!(cap_per_file(ordered, &unit_file, 1, 3), vec![0, 4, 5]);
        // No cap: the order as it was.
        assert_eq!(cap_per_file(ordered, &unit_file, 0, 4), vec![0, 1, 2, 4]);
    }

    /// A ranking of `ids` whose scores fall by one from 100.
    fn ranking(ids: &[u32]) -> Ranking {
        Ranking::new(1.0, ids.iter().enumerate().map(|(rank, i)| (*i, 100.0 - rank as f64)).collect())
    }

    #[test]
    fn a_hit_far_ahead_in_its_ranking_outweighs_a_rank_that_is_only_a_rank() {
        // Each ranking puts a different unit first; by ranks alone, a tie
        // settled by order (unit 1 first). Ranking A's first hit stands far
        // above its second, B's first barely above its second.
        let a = Ranking::new(1.0, vec![(2, 9.0), (1, 1.0)]);
        let b = Ranking::new(1.0, vec![(1, 5.0), (2, 4.9)]);
        let by_index = |x: u32, y: u32| x.cmp(&y);
        let rankings = [a, b];
        assert_eq!(fuse_flat(&rankings, 60.0, 0.0, &by_index, 2), vec![1, 2]);
        assert_eq!(fuse_flat(&rankings, 60.0, 3.0, &by_index, 2), vec![2, 1]);
        // Only shares of a ranking's best count: every score scaled leaves the fusion as it was.
        let scaled: Vec<Ranking> = rankings
            .iter()
            .map(|r| Ranking::new(r.weight, r.ranked.iter().map(|(i, s)| (*i, s * 1000.0)).collect()))
            .collect();
        assert_eq!(fused_scores(&scaled, 60.0, 3.0), fused_scores(&rankings, 60.0, 3.0));
        // A score at or below zero adds nothing beyond its rank; nor does any score of a ranking whose best is not positive.
        let low = [Ranking::new(1.0, vec![(7, 2.0), (8, -1.0)]), Ranking::new(1.0, vec![(9, -0.5)])];
        let fused = fused_scores(&low, 60.0, 3.0);
        assert_eq!(fused[&8], 1.0 / 62.0);
        assert_eq!(fused[&9], 1.0 / 61.0);
        assert_eq!(fused[&7], 1.0 / 61.0 + 3.0 / 61.0);
    }

    #[test]
    fn weights_parse_over_the_defaults() {
        let parse = |text| Weights::settings(text).map(|settings| Weights::DEFAULT.over(&settings));
        assert_eq!(parse("").unwrap(), Weights::DEFAULT);
        let w = parse("files=2, k=30, by_score=0").unwrap();
        assert_eq!((w.files, w.k, w.by_score, w.words), (2.0, 30.0, 0.0, Weights::DEFAULT.words));
        assert!(parse("vibes=1").is_err() && parse("files").is_err());
        // The embedder's meaning weight is the base the knob goes over.
        let files = Weights::settings("files=2").unwrap();
        assert_eq!(Weights { meaning: 2.5, ..Weights::DEFAULT }.over(&files).meaning, 2.5);
    }

    #[test]
    fn best_per_file_takes_the_maximum_of_each_files_units() {
        assert_eq!(best_per_file(&[0.5, 2.0, 0.0, 1.0, 0.0], &[0, 2, 4, 5]), vec![2.0, 1.0, 0.0]);
    }
}
