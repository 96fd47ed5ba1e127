//! BM25 over passages computed a window of chunks at a time, skipping the chunks only weak terms are in (MaxScore): the best passages and the files whose best passage is best, exactly as scoring every passage would rank them; not the gathering of a query's postings, the whole-file or path rankings, nor the fusion (`rankings`, `rank`).
//!
//! A query of common words names hundreds of thousands of passages, and
//! scoring each cost a search at a million passages most of its time (three
//! memory loads a posting). Each posting now comes with its part of the
//! score already computed (the pass that found it visible read the chunk's
//! length with its file), and the walk goes through the chunks in windows
//! of `WINDOW` keys: every term's parts in the window are added into one
//! array the size of the processor's nearest cache, term by term in the
//! query's order (Lucene's MaxScore scorer works in windows too). Each term
//! has an upper bound on what it adds to any passage (its highest part), and
//! once the rankings' threshold (the score the `depth`-th best file's best
//! passage has reached) exceeds the bounds of the weakest terms together, a
//! passage holding only those cannot rank: the next window then starts at
//! the next chunk a stronger term is in, and the weak terms' lists are
//! searched to it rather than walked. With many postings, the chunks of the
//! strongest term are scored first to start from a threshold rather than 0
//! (`seed_threshold`).
//!
//! This walk went a passage at a time before: each needed term's cursor was
//! asked at every chunk, and the weak terms' lists searched for each chunk
//! that might still rank. At a million passages most chunks of a question's
//! common words needed their weak terms' parts too, and those searches (a
//! hundred thousand a question) cost more than adding every part does here
//! (bench/README.md has the figures).
//!
//! The answer is the exhaustive one: a window's sum is each passage's parts
//! added in the query's term order, as the exhaustive loop adds them, so it
//! is the score to the bit; a window is skipped, or a passage left out, only
//! where even the bounds are below a threshold that never exceeds the final
//! one (with a margin for rounding). So the pruning changes no ranking, no
//! order and no tie; the statistics (idf, lengths) are those of the visible
//! passages, computed before (`rankings`).

use super::rank;
use std::cmp::Ordering;

/// One query term's postings among the visible passages: each chunk (its
/// key, ascending) with what the term adds to its score there, and the
/// most it adds to any passage's score.
pub(super) struct TermHits {
    /// The most the term adds to any passage's score (its highest part).
    pub bound: f64,
    /// Ends with `END`, which is no chunk's.
    keys: Vec<u32>,
    /// What the term adds to the score of chunk `keys[i]`: BM25 of its count
    /// and the chunk's length, computed once (the bound needs all of them).
    parts: Vec<f64>,
}

/// The key after a term's last hit.
const END: u32 = u32::MAX;

impl TermHits {
    /// A term of `idf` whose visible postings are the chunks `keys`
    /// (ascending), each with the term's `rank::saturation` there (its count
    /// and the chunk's length): each part is `rank::bm25` to the bit.
    pub(super) fn new(idf: f64, mut keys: Vec<u32>, saturations: Vec<f64>) -> TermHits {
        debug_assert_eq!(keys.len(), saturations.len());
        let mut parts = saturations;
        // The highest of the passages' own parts, so the bound is as tight as
        // it can be: a bound of a count at length zero was about a third higher.
        let mut bound = 0.0f64;
        for part in &mut parts {
            *part *= idf;
            bound = bound.max(*part);
        }
        // The walk reads a key past the last one instead of asking whether there is one.
        keys.push(END);
        parts.push(0.0);
        TermHits { bound, keys, parts }
    }

    /// The chunks that hold the term, ascending.
    pub(super) fn hits(&self) -> &[u32] {
        &self.keys[..self.keys.len() - 1]
    }

    /// What the term adds to chunk `key`'s score (0: not there).
    fn part_in(&self, key: u32) -> f64 {
        match self.keys.binary_search(&key) {
            Ok(at) => self.parts[at],
            Err(_) => 0.0,
        }
    }
}

/// Calls its closure with every visible unit of a chunk key (several when
/// the same content is visible under several paths).
pub(super) type UnitsOf<'a> = dyn Fn(u32, &mut dyn FnMut(u32)) + 'a;

/// What the passage ranking needs to know about the visible passages.
pub(super) struct Passages<'a> {
    pub units_of: &'a UnitsOf<'a>,
    /// Each unit's file.
    pub file: &'a [u32],
    /// How many files there are (`file`'s values are below it).
    pub files: usize,
}

/// The passage and file rankings by words, and how much work they took.
pub(super) struct Ranked {
    /// The best units, best first (ties by the unit order), at most `depth`, each with its score.
    pub passages: Vec<(u32, f64)>,
    /// The files whose best unit scores best, best first (ties by the file order), at most `depth`, each with that score.
    pub files: Vec<(u32, f64)>,
    /// How many chunks the windows held, and how many of them reached the
    /// threshold at the time (the rest could not rank).
    pub visited: usize,
    pub scored: usize,
}

/// The score of chunk `key`: each term's part, summed in the query's order
/// (the order the exhaustive loop adds them in).
pub(super) fn score_of(terms: &[TermHits], key: u32) -> f64 {
    let mut score = 0.0;
    for term in terms {
        let part = term.part_in(key);
        if part > 0.0 {
            score += part;
        }
    }
    score
}

/// A relative margin on every comparison with the threshold: the bounds are
/// summed in another order than the scores, so they may differ in the last bits.
const MARGIN: f64 = 1e-9;

/// How many chunk keys one window of the walk spans: its sums are 32 KB,
/// which the processor's nearest cache holds.
const WINDOW: u32 = 4096;

/// From how many hits in all a ranking first scores the chunks of its
/// strongest term to start from a threshold (below, the walk is short anyway).
const SEED_FROM_HITS: usize = 50_000;
/// The most chunks that first scoring takes (each costs a search in every term's list).
const SEED_MOST: usize = 4096;

/// Ranks the visible passages by BM25 over `terms` (in the query's order),
/// and the files by their best passage, `depth` of each.
pub(super) fn rank(
    terms: &[TermHits],
    passages: &Passages<'_>,
    depth: usize,
    unit_order: &dyn Fn(u32, u32) -> Ordering,
    file_order: &dyn Fn(u32, u32) -> Ordering,
) -> Ranked {
    rank_seeded(terms, passages, depth, unit_order, file_order, SEED_FROM_HITS, WINDOW)
}

/// A threshold to start from: the chunks of the term with the highest bound
/// (when it has at most `SEED_MOST`), each scored whole, give the files'
/// best scores among them, and the `depth`-th of those is at most the final
/// threshold (a file's best among some of its passages is at most its best).
/// Without it, the threshold starts at 0 and every term is needed until
/// `depth` files have been scored, which with many terms of like weight
/// is most of the walk.
fn seed_threshold(terms: &[TermHits], passages: &Passages<'_>, depth: usize) -> f64 {
    let Some(strongest) = terms.iter().filter(|t| !t.hits().is_empty()).max_by(|a, b| a.bound.total_cmp(&b.bound))
    else {
        return 0.0;
    };
    if strongest.hits().len() > SEED_MOST {
        return 0.0;
    }
    let mut best_files = BestFiles::new(depth);
    let mut file_best: std::collections::HashMap<u32, f64> = std::collections::HashMap::new();
    for &key in strongest.hits() {
        let score = score_of(terms, key);
        (passages.units_of)(key, &mut |unit| {
            let file = passages.file[unit as usize];
            let best = file_best.entry(file).or_insert(0.0);
            if score > *best {
                *best = score;
                best_files.raise(file, score);
            }
        });
    }
    best_files.threshold()
}

/// `rank`, seeding its threshold (`seed_threshold`) from `seed_from` hits in
/// all, in windows of `window` keys (a multiple of 64).
fn rank_seeded(
    terms: &[TermHits],
    passages: &Passages<'_>,
    depth: usize,
    unit_order: &dyn Fn(u32, u32) -> Ordering,
    file_order: &dyn Fn(u32, u32) -> Ordering,
    seed_from: usize,
    window_keys: u32,
) -> Ranked {
    let mut cursors: Vec<Cursor<'_>> = terms
        .iter()
        .enumerate()
        .filter(|(_, t)| !t.hits().is_empty())
        .map(|(at, term)| Cursor { at, term, next: 0 })
        .collect();
    if depth == 0 || cursors.is_empty() {
        return Ranked { passages: Vec::new(), files: Vec::new(), visited: 0, scored: 0 };
    }
    // Weakest bound first: the terms that stop being needed first.
    cursors.sort_by(|a, b| a.term.bound.total_cmp(&b.term.bound).then(a.at.cmp(&b.at)));
    // below[i]: what the terms of cursors[..i] can add at most, together.
    let mut below = vec![0.0; cursors.len() + 1];
    for (i, cursor) in cursors.iter().enumerate() {
        below[i + 1] = below[i] + cursor.term.bound;
    }
    let mut scored_units: Vec<(u32, f64)> = Vec::new();
    let mut file_best = vec![0f64; passages.files];
    let mut files_scored: Vec<u32> = Vec::new();
    let mut best_files = BestFiles::new(depth);
    let hits: usize = terms.iter().map(|t| t.hits().len()).sum();
    let mut threshold = if hits >= seed_from { seed_threshold(terms, passages, depth) } else { 0.0 };
    // Cursors before `needed` cannot make a passage rank on their own.
    let mut needed = 0;
    let (mut visited, mut scored) = (0, 0);
    // The cursors in the query's order: each window sums the terms' parts in it.
    let mut in_query_order: Vec<usize> = (0..cursors.len()).collect();
    in_query_order.sort_by_key(|c| cursors[*c].at);
    // One window's scores (every term's parts, summed), and which chunks have any.
    let mut window = vec![0f64; window_keys as usize];
    let mut present = vec![0u64; window_keys.div_ceil(64) as usize];
    loop {
        // The weakest terms the threshold has left behind stop being needed.
        while needed < cursors.len() && below_threshold(below[needed + 1], threshold) {
            needed += 1;
        }
        // The next window starts at the next chunk a needed term is in: a
        // chunk only the others are in cannot rank.
        let start = cursors[needed..].iter().map(Cursor::key).min().unwrap_or(END);
        if start == END {
            break;
        }
        let end = start.saturating_add(window_keys);
        for &c in &in_query_order {
            let cursor = &mut cursors[c];
            if c < needed {
                cursor.seek(start);
            }
            loop {
                let key = cursor.key();
                if key >= end {
                    break;
                }
                let at = (key - start) as usize;
                window[at] += cursor.term.parts[cursor.next];
                present[at / 64] |= 1 << (at % 64);
                cursor.next += 1;
            }
        }
        for (word, chunks) in present.iter_mut().enumerate() {
            let mut bits = std::mem::take(chunks);
            while bits != 0 {
                let at = word * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                // Summed term by term in the query's order, as the exhaustive loop sums it.
                let score = std::mem::take(&mut window[at]);
                visited += 1;
                if below_threshold(score, threshold) {
                    continue;
                }
                scored += 1;
                (passages.units_of)(start + at as u32, &mut |unit| {
                    scored_units.push((unit, score));
                    let file = passages.file[unit as usize];
                    let best = &mut file_best[file as usize];
                    if score > *best {
                        if *best == 0.0 {
                            files_scored.push(file);
                        }
                        *best = score;
                        best_files.raise(file, score);
                    }
                });
                threshold = threshold.max(best_files.threshold());
            }
        }
    }
    Ranked {
        passages: rank::top_of_scored(&scored_units, depth, unit_order),
        files: rank::top_among(&files_scored, &file_best, depth, file_order),
        visited,
        scored,
    }
}

/// Whether `score` stays below `threshold` even with the rounding margin.
fn below_threshold(score: f64, threshold: f64) -> bool {
    score * (1.0 + MARGIN) < threshold
}

/// A term's place in its list of hits.
struct Cursor<'a> {
    /// The term's place in the query.
    at: usize,
    term: &'a TermHits,
    next: usize,
}

impl Cursor<'_> {
    /// The chunk the cursor is at (`END`: past the last).
    fn key(&self) -> u32 {
        self.term.keys[self.next]
    }

    /// Moves to the first hit at or after chunk `key`: galloping, then a
    /// binary search, so a list is passed over in steps as long as the gaps.
    fn seek(&mut self, key: u32) {
        self.next = rank::seek(&self.term.keys, self.next, |k| *k < key);
    }
}

/// The `depth` best files' best scores so far, to know the score a passage
/// must reach to matter: the least of them once there are `depth`.
struct BestFiles {
    depth: usize,
    /// Best first.
    kept: Vec<(f64, u32)>,
}

impl BestFiles {
    fn new(depth: usize) -> BestFiles {
        BestFiles { depth, kept: Vec::with_capacity(depth + 1) }
    }

    /// `file`'s best is now `score` (higher than before).
    fn raise(&mut self, file: u32, score: f64) {
        if let Some(at) = self.kept.iter().position(|(_, f)| *f == file) {
            self.kept.remove(at);
        } else if self.kept.len() == self.depth && self.kept.last().is_some_and(|(s, _)| *s >= score) {
            return;
        }
        let at = self.kept.partition_point(|(s, _)| *s >= score);
        self.kept.insert(at, (score, file));
        self.kept.truncate(self.depth);
    }

    /// The score below which a passage changes neither ranking (0 until `depth` files scored).
    fn threshold(&self) -> f64 {
        if self.kept.len() == self.depth {
            self.kept.last().map_or(0.0, |(s, _)| *s)
        } else {
            0.0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small corpus: `chunks[c]` is chunk `c`'s words and unit `c` of file
    /// `c / per_file`; every seventh chunk is also a unit of a file of its own
    /// (the same content under another path).
    struct Corpus {
        chunks: Vec<Vec<&'static str>>,
        per_file: usize,
    }

    impl Corpus {
        /// A chunk's units: the chunk's own, and `n + c` for every seventh.
        fn units(&self, key: u32) -> Vec<u32> {
            let n = self.chunks.len() as u32;
            if key.is_multiple_of(7) {
                vec![key, n + key]
            } else {
                vec![key]
            }
        }

        fn unit_count(&self) -> usize {
            self.chunks.len() * 2
        }

        fn chunk_of(&self, unit: u32) -> u32 {
            unit % self.chunks.len() as u32
        }

        fn files(&self) -> Vec<u32> {
            let n = self.chunks.len();
            (0..self.unit_count())
                .map(|u| if u < n { (u / self.per_file) as u32 } else { (n.div_ceil(self.per_file) + u - n) as u32 })
                .collect()
        }

        /// Each query term's idf over the visible units and its hits among units of mean length `avg`.
        fn term_hits(&self, query: &[&str], avg: f64) -> Vec<(f64, TermHits)> {
            let visible: usize = (0..self.chunks.len() as u32).map(|c| self.units(c).len()).sum();
            query
                .iter()
                .map(|term| {
                    let keys: Vec<u32> = (0..self.chunks.len() as u32).filter(|c| self.count(*c, term) > 0).collect();
                    let saturations = keys
                        .iter()
                        .map(|c| {
                            let len = self.chunks[*c as usize].len() as f64;
                            rank::saturation(f64::from(self.count(*c, term)), len, avg)
                        })
                        .collect();
                    let df: usize = keys.iter().map(|c| self.units(*c).len()).sum();
                    let idf = rank::idf(visible as f64, df as f64);
                    (idf, TermHits::new(idf, keys, saturations))
                })
                .collect()
        }

        /// How often chunk `c` holds `term`.
        fn count(&self, c: u32, term: &str) -> u32 {
            self.chunks[c as usize].iter().filter(|w| **w == term).count() as u32
        }
    }

    /// Every unit scored the way the exhaustive loop scored them: each
    /// term's BM25 from its count and the chunk's length, in the query's order.
    fn exhaustive(corpus: &Corpus, query: &[&str], terms: &[(f64, TermHits)], avg: f64) -> Vec<f64> {
        let mut scores = vec![0.0; corpus.unit_count()];
        for (word, (idf, _)) in query.iter().zip(terms) {
            for key in 0..corpus.chunks.len() as u32 {
                let count = corpus.count(key, word);
                if count == 0 {
                    continue;
                }
                for unit in corpus.units(key) {
                    let len = corpus.chunks[key as usize].len() as f64;
                    scores[unit as usize] += rank::bm25(*idf, f64::from(count), len, avg);
                }
            }
        }
        scores
    }

    fn corpus(seed: u64, chunks: usize) -> Corpus {
        // Words of very different frequencies, so that some terms stop being needed.
        const WORDS: [&str; 8] = ["common", "usual", "often", "some", "rare", "scarce", "unique", "filler"];
        let mut state = seed;
        let mut next = move || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 33) as usize
        };
        let chunks = (0..chunks)
            .map(|_| {
                let len = 1 + next() % 12;
                (0..len)
                    .map(|_| {
                        let r = next() % 100;
                        match r {
                            0..=39 => WORDS[0],
                            40..=59 => WORDS[1],
                            60..=74 => WORDS[2],
                            75..=84 => WORDS[3],
                            85..=87 => WORDS[4],
                            88 => WORDS[5],
                            89 if next() % 4 == 0 => WORDS[6],
                            _ => WORDS[7],
                        }
                    })
                    .collect()
            })
            .collect();
        Corpus { chunks, per_file: 5 }
    }

    #[test]
    fn pruned_rankings_are_the_exhaustive_ones() {
        let queries: [&[&str]; 5] = [
            &["common", "rare"],
            &["common", "usual", "often", "unique"],
            &["scarce", "common", "some", "usual"],
            &["common"],
            &["unique", "scarce", "rare", "missing"],
        ];
        let (mut pruned_somewhere, mut seed_saved) = (false, false);
        for seed in 0..12 {
            let corpus = corpus(seed, 600);
            let file = corpus.files();
            let files = file.iter().max().map_or(0, |f| *f as usize + 1);
            let avg = {
                let visible: Vec<u32> = (0..corpus.chunks.len() as u32).flat_map(|c| corpus.units(c)).collect();
                let words: usize = visible.iter().map(|u| corpus.chunks[corpus.chunk_of(*u) as usize].len()).sum();
                words as f64 / visible.len() as f64
            };
            // Units of one file in a row, files by number: a total order with ties only between equal units.
            let unit_order = |a: u32, b: u32| file[a as usize].cmp(&file[b as usize]).then(a.cmp(&b));
            let file_order = |a: u32, b: u32| a.cmp(&b);
            let units_of = |key: u32, each: &mut dyn FnMut(u32)| corpus.units(key).into_iter().for_each(each);
            let passages = Passages { units_of: &units_of, file: &file, files };
            for query in queries {
                let with_idf = corpus.term_hits(query, avg);
                let scores = exhaustive(&corpus, query, &with_idf, avg);
                let terms: Vec<TermHits> = with_idf.into_iter().map(|(_, t)| t).collect();
                let runs = [1, 3, 10, 40].into_iter().flat_map(|d| [(d, usize::MAX), (d, 0)]);
                for ((depth, seed_from), window) in runs.flat_map(|run| [(run, 64), (run, WINDOW)]) {
                    let got = rank_seeded(&terms, &passages, depth, &unit_order, &file_order, seed_from, window);
                    let scored: Vec<u32> = (0..scores.len() as u32).filter(|u| scores[*u as usize] > 0.0).collect();
                    assert_eq!(
                        got.passages,
                        rank::top_among(&scored, &scores, depth, &unit_order),
                        "{query:?} {depth} {seed_from} {window}"
                    );
                    let pairs: Vec<(u32, f64)> = scored.iter().map(|u| (*u, scores[*u as usize])).collect();
                    let best = rank::best_per_file_of(&pairs, &file, files);
                    assert_eq!(
                        got.files,
                        rank::top_scored(&best, depth, &file_order),
                        "{query:?} {depth} {seed_from} {window}"
                    );
                    let hit_chunks =
                        terms.iter().flat_map(|t| t.hits().iter().copied()).collect::<std::collections::BTreeSet<_>>();
                    pruned_somewhere |= got.scored < hit_chunks.len();
                    if seed_from == 0 {
                        let unseeded =
                            rank_seeded(&terms, &passages, depth, &unit_order, &file_order, usize::MAX, window);
                        seed_saved |= got.visited < unseeded.visited;
                    }
                    // A unit's own score, as the fallback asks for it, is the exhaustive one to the bit.
                    for unit in scored.iter().take(50) {
                        let key = corpus.chunk_of(*unit);
                        assert_eq!(score_of(&terms, key).to_bits(), scores[*unit as usize].to_bits());
                    }
                }
            }
        }
        // The test is only worth something if the bounds passed passages over.
        assert!(pruned_somewhere, "no query was pruned");
        assert!(seed_saved, "a threshold to start from never spared a visit");
    }

    #[test]
    fn best_files_keep_the_depth_best_distinct_files() {
        let mut best = BestFiles::new(2);
        best.raise(1, 1.0);
        assert_eq!(best.threshold(), 0.0);
        best.raise(2, 2.0);
        assert_eq!(best.threshold(), 1.0);
        best.raise(1, 3.0);
        assert_eq!(best.threshold(), 2.0);
        best.raise(3, 1.5);
        assert_eq!(best.kept, vec![(3.0, 1), (2.0, 2)]);
        best.raise(3, 2.5);
        assert_eq!(best.kept, vec![(3.0, 1), (2.5, 3)]);
    }

    #[test]
    fn seek_finds_the_first_hit_at_or_after() {
        let term = TermHits::new(1.0, (0..100).map(|i| i * 3).collect(), vec![1.0; 100]);
        for start in [0, 5, 50] {
            for key in [0, 1, 3, 4, 150, 297, 298, 400] {
                let mut cursor = Cursor { at: 0, term: &term, next: start };
                cursor.seek(key);
                let expected = start.max(term.hits().partition_point(|k| *k < key));
                assert_eq!(cursor.next, expected, "from {start} to {key}");
            }
        }
    }
}
