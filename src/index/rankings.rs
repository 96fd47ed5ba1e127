//! The rankings of one search over the visible passages: which rankings take part and how they are fused (`Rankings`, read from `CTXFS_SEARCH_RANKINGS` for measuring), and the rankings themselves (BM25 by passage and by whole file, BM25 over paths and tags, meaning by the sign bits then the stored vectors); not the store, the refresh or the walk reuse (`hybrid`), nor the scoring and fusion arithmetic (`rank`).
//!
//! Everything is computed over the units it is handed, which are the
//! visible files' passages alone: BM25's document frequencies and lengths
//! are counted over those, so a hidden file changes neither scores nor
//! order. Every score is per passage or per file, and ties go by shown path,
//! line and place, so neither the walk's order nor anything hidden changes
//! a ranking.
//!
//! Evidence comes at two grains and is fused (`rank`): passages are ranked
//! by BM25 over their words and by meaning; files by whole-file BM25 (a
//! file's words are its passages'), by path and tags, and by tags alone
//! when they hold most of the query's words (`tag_scores`), each file ranking
//! voting for the file's opening passage, or, when the query names
//! identifiers, for its best passage (`FileVotes`). The passages' BM25 is computed
//! a passage at a time with MaxScore pruning (`maxscore`), whose answer is
//! the exhaustive one. Words are `terms::terms`:
//! identifiers split at `_` and case changes and also kept joined, English
//! function words left out of a query. Weights and constants were chosen on
//! the tuning halves of bench/search_heldout.py's question sets and are
//! reported on their held-out halves (bench/README.md). Meaning: the sign
//! bits of the visible passages' vectors pick the `RERANK` most alike to
//! the query's (all of them, or from `codes::LISTS_FROM` passages on those
//! of the lists nearest the query: `codes`); their `i8` vectors, read from
//! the store, give the exact scores (with fewer visible passages, all of
//! them).
//!
//! For benchmarks, `CTXFS_SEARCH_RANKINGS` (read once) limits which
//! rankings take part: `words`, `meaning`, `paths`, `files`, joined by `+`
//! or `,`; unset, `fused` or `all` is all four; `exact` scores every
//! passage's vector instead of those the sign bits pick; `blend` and
//! `grouped` choose the other fusions `rank` keeps for measuring; `apart`
//! and `together` compute the word and meaning rankings on two threads or on
//! one whatever the tree's size; `candidates=N` has the sign bits pick N
//! passages to score exactly; `every-code` scans every passage's sign bits
//! even where they are in lists, and `share=N` the nearest lists until they
//! hold one passage in N. It is a knob for measuring, not a setting
//! for users; `Index::search_with` takes the same choice per call.

use super::codes::{sign_code, Codes, Scan};
use super::hybrid::{PostingList, Postings, Seen, Units};
use super::maxscore;
use super::rank;
use super::store::quantize;
use std::collections::HashMap;
use std::sync::OnceLock;

/// Which passage of a file a file ranking (whole-file BM25, paths and tags)
/// votes for in the default fusion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FileVotes {
    /// The file's opening passage, which says what the file is (a question in words).
    Opening,
    /// The file's best passage by words, else by meaning, else its opening
    /// (a query naming identifiers: `terms::names_identifiers`). Otherwise a
    /// small file whose opening holds the names outranks the file whose
    /// later passages define them (bench/README.md).
    BestPassage,
}

/// How deep each ranking goes into fusion.
const RANK_DEPTH: usize = 200;
/// How many passages the meaning ranking scores exactly, picked by the sign
/// bits of their vectors. Each is a read from the store (the largest part of
/// a search at a million passages once BM25 was pruned); against 2,000, the
/// fused top 10 at 1.09M passages kept 0.995 of its passages either way and
/// the held-out sets' answers were the same (bench/README.md).
const RERANK: usize = 1000;

/// How a search's rankings are fused (see `rank`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fusion {
    /// Passages and files fused, a file ranking voting for the file's opening passage (the default).
    Opening,
    /// Passages fused, whole files and paths voting for their best passage, a few passages a file first.
    Blend,
    /// Files fused on their own, then each file's best passage in turn.
    Grouped,
}

/// Which rankings a search fuses (all four by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rankings {
    /// BM25 over the passages' words.
    pub words: bool,
    /// Cosine similarity of embeddings.
    pub meaning: bool,
    /// BM25 over each file's path and tags.
    pub paths: bool,
    /// BM25 over whole files.
    pub files: bool,
    /// How the rankings are fused (`rank`): by opening passages (the default), `blend` or `grouped`.
    pub fusion: Fusion,
    /// Match a query by its split words only, not its identifiers joined too (for measuring; `unjoined`).
    pub unjoined: bool,
    /// Score every passage's vector exactly instead of the `RERANK` its sign bits pick
    /// (for measuring what that costs; `exact` in `CTXFS_SEARCH_RANKINGS`).
    pub exact_meaning: bool,
    /// Whether the word and meaning rankings run side by side on two threads
    /// (by default from `SIDE_BY_SIDE_FROM` units on; `together` or `apart` to measure or test either).
    pub side_by_side: SideBySide,
    /// How many passages the sign bits pick for the meaning ranking to score
    /// exactly (`RERANK` by default; `candidates=N` to measure another count).
    pub candidates: usize,
    /// Scan every passage's sign bits even where they are in lists (`every-code`,
    /// to measure what the lists cost in answers and save in time).
    pub every_code: bool,
    /// Where the sign bits are in lists, the nearest lists are scanned until
    /// they hold one passage in this many (`codes::PROBE_SHARE`; `share=N` to measure another).
    pub lists_share: usize,
}

/// Whether a search computes its word and meaning rankings on two threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SideBySide {
    /// From `SIDE_BY_SIDE_FROM` units on (the default).
    BySize,
    /// Always on two threads (`apart`).
    Always,
    /// Always one after the other on one thread (`together`).
    Never,
}

/// The number above 0 that follows `prefix` in `part` (`what` names it when it is not one).
fn number_after(part: &str, prefix: &str, what: &str) -> Result<usize, String> {
    match part[prefix.len()..].parse() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("{part:?}: {what} is a number above 0")),
    }
}

impl Rankings {
    pub const ALL: Rankings = Rankings {
        words: true,
        meaning: true,
        paths: true,
        files: true,
        fusion: Fusion::Opening,
        unjoined: false,
        exact_meaning: false,
        side_by_side: SideBySide::BySize,
        candidates: RERANK,
        every_code: false,
        lists_share: super::codes::PROBE_SHARE,
    };
    pub const NONE: Rankings = Rankings {
        words: false,
        meaning: false,
        paths: false,
        files: false,
        fusion: Fusion::Opening,
        unjoined: false,
        exact_meaning: false,
        side_by_side: SideBySide::BySize,
        candidates: RERANK,
        every_code: false,
        lists_share: super::codes::PROBE_SHARE,
    };

    /// `words`, `meaning`, `paths`, `files`, joined by `+` or `,`; `fused`,
    /// `all` or nothing is all four; `exact` adds `exact_meaning`; `blend`
    /// and `grouped` choose those fusions; `unjoined` matches split words only;
    /// `apart` and `together` choose two threads or one whatever the size;
    /// `candidates=N` has the sign bits pick N passages for exact scoring;
    /// `every-code` scans every passage's sign bits where they are in lists;
    /// `share=N` scans the nearest lists until they hold one passage in N.
    pub fn parse(text: &str) -> Result<Rankings, String> {
        let mut out = Rankings::NONE;
        for part in text.split(['+', ',']).map(str::trim).filter(|p| !p.is_empty()) {
            match part {
                "words" => out.words = true,
                "meaning" => out.meaning = true,
                "paths" => out.paths = true,
                "files" => out.files = true,
                "fused" | "all" => (out.words, out.meaning, out.paths, out.files) = (true, true, true, true),
                "exact" => out.exact_meaning = true,
                "opening" | "flat" => out.fusion = Fusion::Opening,
                "blend" => out.fusion = Fusion::Blend,
                "grouped" => out.fusion = Fusion::Grouped,
                "unjoined" => out.unjoined = true,
                "apart" => out.side_by_side = SideBySide::Always,
                "together" => out.side_by_side = SideBySide::Never,
                "every-code" => out.every_code = true,
                share if share.starts_with("share=") => out.lists_share = number_after(share, "share=", "the share")?,
                count if count.starts_with("candidates=") => {
                    out.candidates = number_after(count, "candidates=", "the count of candidates")?
                }
                other => {
                    return Err(format!(
                        "{other:?} is not a ranking (words, meaning, paths, files, fused, exact, opening, blend, grouped, unjoined, apart, together, every-code, share=N, candidates=N)"
                    ))
                }
            }
        }
        if !(out.words || out.meaning || out.paths || out.files) {
            (out.words, out.meaning, out.paths, out.files) = (true, true, true, true);
        }
        Ok(out)
    }

    /// The rankings `CTXFS_SEARCH_RANKINGS` names, read once (a benchmarking knob).
    pub fn from_env() -> Rankings {
        static FROM_ENV: OnceLock<Rankings> = OnceLock::new();
        *FROM_ENV.get_or_init(|| {
            let text = std::env::var("CTXFS_SEARCH_RANKINGS").unwrap_or_default();
            Rankings::parse(&text).unwrap_or_else(|e| {
                tracing::warn!("CTXFS_SEARCH_RANKINGS: {e}; fusing all rankings");
                Rankings::ALL
            })
        })
    }
}

/// What the meaning ranking needs: the query's vector, the units' sign bits,
/// and a passage's stored `i8` vector (with its scale) by chunk id.
pub(super) struct Meaning<'a> {
    pub query: Vec<f32>,
    /// How much this ranking counts in the fusion (`Embedder::meaning_weight`).
    pub weight: f64,
    pub dims: usize,
    pub codes: &'a Codes,
    pub vector: &'a StoredVector<'a>,
}

/// Passages' stored `i8` vectors with their scales by chunk id, in the order asked.
pub(super) type StoredVector<'a> = dyn Fn(&[i64]) -> anyhow::Result<Vec<Quantised>> + 'a;

/// A stored `i8` vector and its scale (`None`: the passage has none).
pub(super) type Quantised = Option<(Vec<i8>, f32)>;

/// The units to show for `terms`, best first, at most `limit`: each chosen
/// ranking over `units` (the passages of `seen`, the visible files), fused.
/// `postings` answers a term's postings; `lap` hears when each step is done.
///
/// From `SIDE_BY_SIDE_FROM` units on (or as `rankings.side_by_side` says),
/// the word rankings (passages, whole files, paths) are computed on a thread
/// of their own while this one does the meaning ranking (whose stored vectors
/// are read through the store this thread holds). Neither reads what the
/// other writes, so the rankings are the same either way; the `words` lap is
/// then when this thread had them.
#[allow(clippy::too_many_arguments)] // Each is one input of the search; a struct would only rename them.
pub(super) fn rank(
    seen: &[Seen],
    units: &Units,
    terms: &[String],
    tagged: &[Tagged],
    votes: FileVotes,
    limit: usize,
    rankings: Rankings,
    postings: &PostingsOf<'_>,
    meaning: Option<Meaning<'_>>,
    lap: &mut dyn FnMut(&'static str),
) -> anyhow::Result<Vec<u32>> {
    // By shown path (`Units::path_rank` is its order), then line and place.
    let path_rank = &units.path_rank;
    let order = |a: u32, b: u32| {
        let (a, b) = (a as usize, b as usize);
        path_rank[units.file[a] as usize]
            .cmp(&path_rank[units.file[b] as usize])
            .then(units.first_line[a].cmp(&units.first_line[b]))
            .then(units.index[a].cmp(&units.index[b]))
    };
    let file_order = |a: u32, b: u32| path_rank[a as usize].cmp(&path_rank[b as usize]);
    let starts = &units.starts;
    let weights = rank::Weights::from_env(meaning.as_ref().map_or(rank::Weights::DEFAULT.meaning, |m| m.weight));
    let by_words = || word_rankings(seen, units, terms, tagged, rankings, postings, &weights, &order, &file_order);
    let two_threads = meaning.is_some()
        && match rankings.side_by_side {
            SideBySide::BySize => units.len() >= SIDE_BY_SIDE_FROM,
            SideBySide::Always => true,
            SideBySide::Never => false,
        };
    let by_meaning = |lap: &mut dyn FnMut(&'static str)| {
        meaning.map(|meaning| meaning_ranking(meaning, units, seen.len(), rankings, &weights, &order, &file_order, lap))
    };
    let (words, by_meaning) = if two_threads {
        std::thread::scope(|scope| {
            let words = scope.spawn(by_words);
            let by_meaning = by_meaning(lap);
            let words = words.join().unwrap_or_else(|_| Err(anyhow::anyhow!("the word rankings' thread stopped")));
            (words, by_meaning)
        })
    } else {
        (by_words(), by_meaning(lap))
    };
    let Evidence { mut passage_rankings, mut file_rankings, own_file_rankings, scores: words_scores } = words?;
    lap("words");
    let mut meaning_scores = UnitScores::None;
    if let Some(Evidence { passage_rankings: passages, file_rankings: files, scores, .. }) = by_meaning.transpose()? {
        passage_rankings.extend(passages);
        file_rankings.extend(files);
        meaning_scores = scores;
    }

    // The passage shown for a file no passage ranking reached: its best by words, else by meaning, else its first.
    let fallback = |file: u32| {
        let range = starts[file as usize]..starts[file as usize + 1];
        let best = |scores: &UnitScores| {
            range
                .clone()
                .map(|u| (u, scores.of(units, u)))
                .filter(|(_, score)| *score > 0.0)
                .max_by(|(a, x), (b, y)| x.total_cmp(y).then_with(|| order(*b, *a)))
                .map(|(u, _)| u)
        };
        best(&words_scores).or_else(|| best(&meaning_scores)).unwrap_or(range.start)
    };
    let layout = rank::Layout {
        unit_file: &units.file,
        starts,
        unit_order: &order,
        file_order: &file_order,
        fallback: &fallback,
        k: weights.k,
    };
    let per_file = weights.per_file.max(0.0) as usize;
    let chosen = match rankings.fusion {
        Fusion::Blend => rank::fuse_blend(&passage_rankings, &own_file_rankings, &layout, per_file, limit),
        Fusion::Grouped => rank::fuse_file_first(&passage_rankings, &file_rankings, &layout, limit),
        Fusion::Opening => {
            let mut flat = passage_rankings.clone();
            // A file's best passage, found once though both file rankings may name the file.
            let mut best_of: HashMap<u32, u32> = HashMap::new();
            for files in &own_file_rankings {
                // One passage a file, so a file's vote is its rank's and its score's.
                let voted: Vec<(u32, f64)> = match votes {
                    FileVotes::Opening => files.ranked.iter().map(|(f, score)| (starts[*f as usize], *score)).collect(),
                    FileVotes::BestPassage => files
                        .ranked
                        .iter()
                        .map(|(f, score)| (*best_of.entry(*f).or_insert_with(|| fallback(*f)), *score))
                        .collect(),
                };
                flat.push(rank::Ranking::new(files.weight, voted));
            }
            let ordered = rank::fused_order(&flat, weights.k, weights.by_score, &order);
            rank::cap_per_file(ordered, &units.file, per_file, limit)
        }
    };
    Ok(chosen)
}

/// How many postings ahead the words' pass asks for its next loads.
const PREFETCH_AHEAD: usize = 32;

/// From how many units the word and meaning rankings are computed side by
/// side (below, a thread's start costs about what it would save).
const SIDE_BY_SIDE_FROM: usize = 1 << 16;

/// A term's postings of one kind, from any thread.
pub(super) type PostingsOf<'a> = dyn Fn(Postings, &str) -> anyhow::Result<PostingList> + Sync + 'a;

/// What one side of a search found: its passage rankings, its file rankings
/// (all of them, and those not made of passages, which vote for a passage of
/// their file), and its score for any unit.
#[derive(Default)]
struct Evidence {
    passage_rankings: Vec<rank::Ranking>,
    file_rankings: Vec<rank::Ranking>,
    own_file_rankings: Vec<rank::Ranking>,
    scores: UnitScores,
}

/// One side's score for any unit: what the passage shown for a file that no
/// passage ranking reached is chosen by.
#[derive(Default)]
enum UnitScores {
    /// The side scored no unit.
    #[default]
    None,
    /// The units scored, by unit (the others have none).
    Among(Vec<(u32, f64)>),
    /// BM25 over the query's terms (in its order), computed for the unit asked.
    Words(Vec<maxscore::TermHits>),
}

impl UnitScores {
    fn of(&self, units: &Units, unit: u32) -> f64 {
        let at = unit as usize;
        match self {
            UnitScores::None => 0.0,
            UnitScores::Among(scored) => match scored.binary_search_by_key(&unit, |(u, _)| *u) {
                Ok(found) => scored[found].1,
                Err(_) => 0.0,
            },
            UnitScores::Words(terms) => {
                // Every unit's chunk lies within `first`'s span (see `word_rankings`).
                let key = (units.id[at] - units.lo) as u32;
                maxscore::score_of(terms, key)
            }
        }
    }
}

/// The rankings made of words: BM25 by passage and by whole file (a file's
/// words are its passages' words), then BM25 over paths and tags, each with
/// statistics over the visible units or files only.
///
/// One pass over each term's postings keeps the visible ones, counts them
/// (the passage idf), computes each one's part of its passage's score and
/// adds them to their files' counts (whole-file BM25); the passages are
/// then ranked a window of chunks at a time with MaxScore pruning
/// (`maxscore`).
#[allow(clippy::too_many_arguments)] // The search's inputs and its two orders.
fn word_rankings(
    seen: &[Seen],
    units: &Units,
    terms: &[String],
    tagged: &[Tagged],
    rankings: Rankings,
    postings: &PostingsOf<'_>,
    weights: &rank::Weights,
    order: &(dyn Fn(u32, u32) -> std::cmp::Ordering + Sync),
    file_order: &(dyn Fn(u32, u32) -> std::cmp::Ordering + Sync),
) -> anyhow::Result<Evidence> {
    let mut out = Evidence::default();
    let started = std::time::Instant::now();
    if (rankings.words || rankings.files) && units.len() > 0 && !terms.is_empty() {
        let whole_files = rankings.files;
        let files_n = if whole_files { seen.len() } else { 0 };
        let (mut file_scores, mut file_tf) = (vec![0f64; files_n], vec![0u32; files_n]);
        let mut touched: Vec<u32> = Vec::new();
        let mut passage_terms = Vec::with_capacity(terms.len());
        let saturation = rank::Saturations::new(units.avg);
        for term in terms {
            let list = postings(Postings::Chunks, term)?;
            let (mut keys, mut saturations, mut df) =
                (Vec::with_capacity(list.len() + 1), Vec::with_capacity(list.len() + 1), 0usize);
            for run in list.runs() {
                let (base, postings) = (run.base, &run.postings);
                for (at, &(offset, tf)) in postings.iter().enumerate() {
                    if let Some((ahead, _)) = postings.get(at + PREFETCH_AHEAD) {
                        units.prefetch_chunk(base + i64::from(*ahead));
                    }
                    let id = base + i64::from(offset);
                    let words = units.visible_chunk(id, |file| {
                        df += 1;
                        if whole_files {
                            let file = file as usize;
                            if file_tf[file] == 0 {
                                touched.push(file as u32);
                            }
                            file_tf[file] += tf;
                        }
                    });
                    if let Some(words) = words {
                        // Within `first`'s span, so it fits: `first` is indexed by it.
                        keys.push((id - units.lo) as u32);
                        saturations.push(saturation.of(tf, words));
                    }
                }
            }
            let file_idf = rank::idf(units.files_n, touched.len() as f64);
            for file in touched.drain(..) {
                let file = file as usize;
                let (tf, len) = (f64::from(file_tf[file]), units.file_len[file]);
                file_scores[file] += rank::bm25(file_idf, tf, len, units.file_avg);
                file_tf[file] = 0;
            }
            passage_terms.push(maxscore::TermHits::new(rank::idf(units.len() as f64, df as f64), keys, saturations));
        }
        let passed = started.elapsed();
        if rankings.words {
            let units_of = |key: u32, each: &mut dyn FnMut(u32)| units.of_chunk(i64::from(key) + units.lo, each);
            let passages = maxscore::Passages { units_of: &units_of, file: &units.file, files: seen.len() };
            let ranked = maxscore::rank(&passage_terms, &passages, RANK_DEPTH, order, file_order);
            let postings: usize = passage_terms.iter().map(|t| t.hits().len()).sum();
            // With when the pass and the ranking were done: bench/README.md splits the words' side by them.
            let (visited, scored, ranked_at) = (ranked.visited, ranked.scored, started.elapsed());
            tracing::debug!(postings, visited, scored, ?passed, ?ranked_at, "words: passages scored whole");
            out.passage_rankings.push(rank::Ranking::new(weights.words, ranked.passages));
            out.file_rankings.push(rank::Ranking::new(weights.file_words, ranked.files));
        }
        if whole_files {
            let ranking = rank::Ranking::new(weights.files, rank::top_scored(&file_scores, RANK_DEPTH, file_order));
            out.own_file_rankings.push(ranking.clone());
            out.file_rankings.push(ranking);
        }
        out.scores = UnitScores::Words(passage_terms);
    }
    let files_at = started.elapsed();
    if rankings.paths && !seen.is_empty() && !terms.is_empty() {
        let starts = &units.starts;
        let n = seen.len() as f64;
        let mut scores = vec![0f64; seen.len()];
        let mut hits: Vec<(usize, u32)> = Vec::new();
        for term in terms {
            let postings = postings(Postings::Meta, term)?;
            hits.clear();
            units.files_of_rows(&postings, |file, tf| hits.push((file as usize, tf)));
            let idf = rank::idf(n, hits.len() as f64);
            for &(file, tf) in &hits {
                if starts[file] < starts[file + 1] {
                    scores[file] += idf * f64::from(tf);
                }
            }
        }
        let ranking = rank::Ranking::new(weights.paths, rank::top_scored(&scores, RANK_DEPTH, file_order));
        out.own_file_rankings.push(ranking.clone());
        out.file_rankings.push(ranking);
        if let Some(scores) = tag_scores(seen.len(), units, terms, tagged) {
            let ranking = rank::Ranking::new(weights.tags, rank::top_scored(&scores, RANK_DEPTH, file_order));
            out.own_file_rankings.push(ranking.clone());
            out.file_rankings.push(ranking);
        }
    }
    tracing::debug!(?files_at, paths_at = ?started.elapsed(), "words: done");
    Ok(out)
}

/// A tagged file's row and its tags' terms (`terms::terms` of its task and
/// what it relates to, each once, sorted).
pub(super) struct Tagged {
    pub(super) rowid: i64,
    pub(super) terms: Vec<String>,
}

/// The share of the query's words, weighed by their rarity, that a file's
/// tags must hold for the tags ranking to name it: a tag is a deliberate
/// statement of what a file is for, but a single common word of it (`fix`,
/// `bug`) should not lift the file for every question holding that word.
pub(super) const TAGS_COVER: f64 = 0.5;

/// The tags ranking's score for every visible file (`None` when no visible
/// file's tags cover the query): each query word its tags hold adds its
/// inverse document frequency among the visible tagged files (as the paths'
/// ranking, the visible files counted, so nothing hidden changes a score), for
/// files whose tags hold at least `TAGS_COVER` of what all the query's words
/// would add. The paths' ranking counts the tags' words too, but as one of
/// many weak votes; a file tagged with the very words asked for is the
/// file asked for, even when its text shares none of them.
fn tag_scores(files: usize, units: &Units, terms: &[String], tagged: &[Tagged]) -> Option<Vec<f64>> {
    if tagged.is_empty() || terms.is_empty() {
        return None;
    }
    let starts = &units.starts;
    let mut visible: Vec<(u32, u32)> = Vec::new();
    units.files_of_tagged(tagged, |file, at| {
        if starts[file as usize] < starts[file as usize + 1] {
            visible.push((file, at));
        }
    });
    let holds = |at: u32, term: &String| tagged[at as usize].terms.binary_search(term).is_ok();
    let n = files as f64;
    let idf: Vec<f64> = terms
        .iter()
        .map(|term| rank::idf(n, visible.iter().filter(|&&(_, at)| holds(at, term)).count() as f64))
        .collect();
    let whole: f64 = idf.iter().sum();
    let mut scores = vec![0f64; files];
    let mut any = false;
    for &(file, at) in &visible {
        let score: f64 = terms.iter().zip(&idf).filter(|(term, _)| holds(at, term)).map(|(_, idf)| idf).sum();
        if score > 0.0 && score >= TAGS_COVER * whole {
            scores[file as usize] = score;
            any = true;
        }
    }
    any.then_some(scores)
}

/// The meaning ranking: cosine similarity to the query's vector. The sign
/// bits of every visible passage's vector pick the `rankings.candidates` most alike (all
/// of them with `exact_meaning`); their `i8` vectors, read from the store,
/// give the exact scores. Passages, and files by their best passage.
#[allow(clippy::too_many_arguments)] // The search's inputs and its two orders.
fn meaning_ranking(
    meaning: Meaning<'_>,
    units: &Units,
    files: usize,
    rankings: Rankings,
    weights: &rank::Weights,
    order: &dyn Fn(u32, u32) -> std::cmp::Ordering,
    file_order: &dyn Fn(u32, u32) -> std::cmp::Ordering,
    lap: &mut dyn FnMut(&'static str),
) -> anyhow::Result<Evidence> {
    let Meaning { query, dims, codes, vector, .. } = meaning;
    let mut q_code = Vec::with_capacity(codes.words);
    sign_code(query.iter().map(|v| *v > 0.0), &mut q_code, dims);
    let candidates = if rankings.exact_meaning {
        codes.with_vectors()
    } else {
        let scan =
            if rankings.every_code { Scan::EveryCode } else { Scan::NearestLists { share: rankings.lists_share } };
        codes.most_alike(&q_code, rankings.candidates, order, scan)
    };
    lap("codes");
    let (q, q_scale) = quantize(&query);
    // Each chunk read once, in id order (the store's order), whatever units share it.
    let mut ids: Vec<i64> = candidates.iter().map(|unit| units.id[*unit as usize]).collect();
    ids.sort_unstable();
    ids.dedup();
    let exact: HashMap<i64, f64> = ids
        .iter()
        .copied()
        .zip(vector(&ids)?)
        .map(|(id, stored)| {
            let score = match stored {
                Some((row, scale)) if row.len() == dims => {
                    f64::from(dot_i8(&row, &q)) * f64::from(scale) * f64::from(q_scale)
                }
                _ => 0.0,
            };
            (id, score)
        })
        .collect();
    // The candidates alone, by unit: no array of every passage to clear each search.
    let mut scored: Vec<(u32, f64)> =
        candidates.iter().map(|unit| (*unit, exact.get(&units.id[*unit as usize]).copied().unwrap_or(0.0))).collect();
    scored.sort_unstable_by_key(|(unit, _)| *unit);
    let best = rank::best_per_file_of(&scored, &units.file, files);
    lap("meaning");
    Ok(Evidence {
        passage_rankings: vec![rank::Ranking::new(weights.meaning, rank::top_of_scored(&scored, RANK_DEPTH, order))],
        file_rankings: vec![rank::Ranking::new(weights.file_meaning, rank::top_scored(&best, RANK_DEPTH, file_order))],
        own_file_rankings: Vec::new(),
        scores: UnitScores::Among(scored),
    })
}

/// The dot product of two quantised vectors (exact, so the same on every run).
fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    a.iter().zip(b).map(|(x, y)| i32::from(*x) * i32::from(*y)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rankings_parse() {
        assert_eq!(Rankings::parse("").unwrap(), Rankings::ALL);
        assert_eq!(Rankings::parse("fused").unwrap(), Rankings::ALL);
        assert_eq!(Rankings::parse("words").unwrap(), Rankings { words: true, ..Rankings::NONE });
        assert_eq!(
            Rankings::parse("meaning+paths").unwrap(),
            Rankings { meaning: true, paths: true, ..Rankings::NONE }
        );
        assert_eq!(
            Rankings::parse("meaning+exact").unwrap(),
            Rankings { meaning: true, exact_meaning: true, ..Rankings::NONE }
        );
        assert_eq!(Rankings::parse("exact").unwrap(), Rankings { exact_meaning: true, ..Rankings::ALL });
        assert_eq!(Rankings::parse("apart").unwrap(), Rankings { side_by_side: SideBySide::Always, ..Rankings::ALL });
        assert_eq!(
            Rankings::parse("words+together").unwrap(),
            Rankings { words: true, side_by_side: SideBySide::Never, ..Rankings::NONE }
        );
        assert_eq!(Rankings::parse("fused+candidates=500").unwrap(), Rankings { candidates: 500, ..Rankings::ALL });
        assert_eq!(Rankings::parse("every-code").unwrap(), Rankings { every_code: true, ..Rankings::ALL });
        assert_eq!(Rankings::parse("share=4").unwrap(), Rankings { lists_share: 4, ..Rankings::ALL });
        assert!(Rankings::parse("share=0").is_err());
        assert!(Rankings::parse("candidates=0").is_err() && Rankings::parse("candidates=many").is_err());
        assert!(Rankings::parse("vibes").is_err());
    }
}
