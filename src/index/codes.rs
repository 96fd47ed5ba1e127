//! The sign bits of the visible passages' vectors, and how they pick the
//! passages most alike to a query: a scan of every code, exact, or, from
//! `LISTS_FROM` passages on, a scan of the lists of alike codes nearest the
//! query, approximate; not the stored vectors' exact scores (`rankings`),
//! nor where the codes come from (`hybrid`).
//!
//! The lists (an inverted file over the codes) are built from the visible
//! codes alone, when a search first needs them, and kept as long as the
//! walk they were made for: centres are trained on a sample chosen by the
//! codes' hashes, so neither the order the walk found files in nor anything
//! hidden moves them; ties between centres go by their number. A query
//! scans the lists whose centres agree most with it until they hold a
//! share of the passages (`PROBE_SHARE`) and many times the passages asked
//! for, then the exact scores of the stored vectors decide (`rankings`).
//!
//! Why not a nearest-neighbour crate (hnsw_rs, instant-distance, usearch):
//! each indexes what it is given once, and what a session may see is a
//! subset of the store that changes with every grant. One index over the
//! whole store lets hidden passages take part in the search even when they
//! are filtered from the answer (a graph walk steps through them, a
//! clustering is trained on them), so a hidden file would change which
//! visible passages come back; an index per view is rebuilt with every
//! change of view. Lists over the visible codes are built in one pass over
//! memory we hold anyway (bench/README.md has what that costs).

/// The sign bits of a vector, 64 to a word.
pub(super) fn sign_code(values: impl Iterator<Item = bool>, out: &mut Vec<u64>, dims: usize) {
    let start = out.len();
    out.resize(start + dims.div_ceil(64), 0);
    for (i, positive) in values.enumerate().take(dims) {
        if positive {
            out[start + i / 64] |= 1 << (i % 64);
        }
    }
}

/// The sign bits of a stored `i8` vector (above zero: set), 64 to a word, as
/// `sign_code` makes them: a first search at a million passages makes them
/// for every stored vector.
pub(super) fn sign_code_of_i8(values: &[i8], out: &mut Vec<u64>) {
    let (whole, rest) = values.as_chunks::<64>();
    out.extend(whole.iter().map(signs_of_64));
    if !rest.is_empty() {
        out.push(signs_of(rest));
    }
}

/// The sign bits of up to 64 values, one at a time.
fn signs_of(values: &[i8]) -> u64 {
    values.iter().enumerate().fold(0u64, |bits, (i, v)| bits | u64::from(*v > 0) << i)
}

/// The sign bits of 64 values, sixteen at a time: a byte comparison and
/// `pmovmskb` (SSE2, which every x86-64 CPU has). The compiler made the
/// one-at-a-time fold four values a step with shuffles, and that was a tenth
/// of a first search's samples at 1.27M passages (bench/README.md).
#[cfg(target_arch = "x86_64")]
fn signs_of_64(values: &[i8; 64]) -> u64 {
    use std::arch::x86_64::{__m128i, _mm_cmpgt_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_setzero_si128};
    let mut bits = 0u64;
    for (at, part) in values.as_chunks::<16>().0.iter().enumerate() {
        // SAFETY: SSE2 is part of every x86-64 CPU (the compiler assumes it
        // for all code of this target), and `part` is sixteen readable bytes,
        // all that an unaligned load reads.
        let above = unsafe {
            let part = _mm_loadu_si128(part.as_ptr().cast::<__m128i>());
            _mm_movemask_epi8(_mm_cmpgt_epi8(part, _mm_setzero_si128()))
        };
        bits |= u64::from(above as u16) << (16 * at);
    }
    bits
}

#[cfg(not(target_arch = "x86_64"))]
fn signs_of_64(values: &[i8; 64]) -> u64 {
    signs_of(values)
}

/// From how many passages with vectors a walk's codes are put in lists
/// (below, a scan of every code is fast enough, and exact).
pub(super) const LISTS_FROM: usize = 1 << 18;
/// About how many passages a list holds.
const LIST_SIZE: usize = 4096;
/// The most lists a walk's codes are put in.
const MOST_LISTS: usize = 1024;
/// How many codes of the sample each list's centre is trained on.
const SAMPLE_PER_LIST: usize = 32;
/// How many rounds the centres are trained for.
const TRAIN_ROUNDS: usize = 8;
/// A query scans the nearest lists until they hold at least this share of
/// the passages (one in `PROBE_SHARE`) ... At 1.09M passages, a quarter
/// kept 0.9925 of the fused top 10 that every code gives (every code:
/// 0.995 against scoring every vector exactly), an eighth 0.95, a sixteenth
/// 0.95 too (bench/README.md).
pub(super) const PROBE_SHARE: usize = 4;
/// ... and at least this many times the passages it asks for.
const PROBE_MARGIN: usize = 16;

/// Every how many codes the sample that sets the full scan's bar is taken (`Codes::most_alike`).
pub(super) const SAMPLE_EVERY: usize = 32;
/// How many times its share of the units asked for the sample lets through
/// the bar it sets, so that the whole scan almost always passes enough.
const SAMPLE_MARGIN: usize = 4;

/// From how many codes a full scan is shared between threads (below, a
/// thread's start costs more than the scan it would save).
pub(super) const SCAN_SPLIT_FROM: usize = 1 << 16;

/// The most threads a scan or the lists' building uses (a scan is bound by memory beyond a few).
const SCAN_THREADS: usize = 4;

/// In the lists' building: a unit without a vector, in no list.
pub(super) const NO_LIST: u32 = u32::MAX;
/// In `Codes::new`'s `like`: a unit whose list is not known (its chunk is new).
pub(super) const UNKNOWN_LIST: u32 = u32::MAX - 1;

/// The sign bits of every unit's vector, side by side (`words` `u64`s a
/// code) in the order they are scanned: unit order, or list by list when
/// they are in lists (then only the units with a vector have a code).
#[derive(Clone)]
#[cfg_attr(test, derive(Debug, PartialEq))]
pub(super) struct Codes {
    dims: usize,
    pub(super) words: usize,
    /// The codes, one a slot.
    bits: Vec<u64>,
    /// Whether the slot's unit has a vector (every slot does when listed).
    has: Vec<bool>,
    /// The unit of each slot; empty: the slot is the unit.
    units_of: Vec<u32>,
    /// How many units there are (with a vector or not).
    units: usize,
    lists: Option<Lists>,
}

/// The lists: each one's centre, and its slots.
#[derive(Clone)]
#[cfg_attr(test, derive(Debug, PartialEq))]
struct Lists {
    /// `words` `u64`s a list.
    centres: Vec<u64>,
    /// List `l` holds the slots `starts[l]..starts[l + 1]`, in unit order.
    starts: Vec<u32>,
    /// Whether the centres were trained for these codes (else taken from the walk before).
    trained: bool,
}

/// A newer list of units, as the codes of an older one see it (`Codes::carried_in_place`).
#[derive(Clone, Copy)]
pub(super) struct NewerUnits<'a> {
    /// Where the older units are in it: `(first, end, at)` says units
    /// `first..end` are its units `at..`; sorted and apart, and a unit in no
    /// run is not in it.
    pub(super) runs: &'a [(u32, u32, u32)],
    /// How many units it has.
    pub(super) units: usize,
    /// Its new units with a vector, in unit order.
    pub(super) added: &'a [u32],
    /// Their codes, side by side.
    pub(super) added_bits: &'a [u64],
}

/// Moves runs of `values` (`(from, to, len)`, in order and apart both ways)
/// to their places in the same memory, which then holds `len_after` values
/// (those in no run's place are left as they were, or zero-like where it
/// grew): the runs that move towards the front first, front to back, then
/// the others back to front, so that none overwrites a run not yet moved.
pub(super) fn move_runs<T: Copy + Default>(values: &mut Vec<T>, runs: &[(usize, usize, usize)], len_after: usize) {
    if len_after > values.len() {
        values.resize(len_after, T::default());
    }
    for &(from, to, len) in runs.iter().filter(|run| run.1 <= run.0) {
        values.copy_within(from..from + len, to);
    }
    for &(from, to, len) in runs.iter().rev().filter(|run| run.1 > run.0) {
        values.copy_within(from..from + len, to);
    }
    values.truncate(len_after);
}

/// Puts one list's slots (`units`, and their codes, `words` words each) in
/// unit order, when they are not: a list brought up to date has its carried
/// units in order and the added ones after them, which are mostly the last.
fn in_unit_order(units: &mut [u32], bits: &mut [u64], words: usize) {
    if units.is_sorted() {
        return;
    }
    let mut order: Vec<usize> = (0..units.len()).collect();
    order.sort_unstable_by_key(|at| units[*at]);
    let (old_units, old_bits) = (units.to_vec(), bits.to_vec());
    for (slot, at) in order.into_iter().enumerate() {
        units[slot] = old_units[at];
        bits[slot * words..(slot + 1) * words].copy_from_slice(&old_bits[at * words..(at + 1) * words]);
    }
}

/// How a query's codes are compared: with the nearest lists when the codes are in lists, or every code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scan {
    /// The nearest lists until they hold one passage in `share` (and `PROBE_MARGIN` times those asked for).
    NearestLists { share: usize },
    /// Every code, so the pick is exact.
    EveryCode,
}

impl Codes {
    /// The codes of `has.len()` units (`bits` holds `dims.div_ceil(64)` words
    /// a unit, zero where `has` is false), put in lists when at least
    /// `lists_from` units have a vector. With `like`, the codes of the walk
    /// this one was brought up to date from (the same view) and each unit's
    /// list there (`Codes::lists_of_units`, through the unit of the same
    /// chunk; `UNKNOWN_LIST` for a new one), its lists' centres are kept,
    /// not trained again: a unit keeps its list, a new one goes to the list
    /// of its nearest centre. The lists then depend on the codes a walk of
    /// this view saw first, never on anything hidden from it.
    pub(super) fn new(
        dims: usize,
        bits: Vec<u64>,
        has: Vec<bool>,
        lists_from: usize,
        like: Option<(&Codes, Vec<u32>)>,
    ) -> Codes {
        let words = dims.div_ceil(64);
        let units = has.len();
        let codes = Codes { dims, words, bits, has, units_of: Vec::new(), units, lists: None };
        let with_vector = codes.has.iter().filter(|h| **h).count();
        if words == 0 || with_vector == 0 || with_vector < lists_from {
            return codes;
        }
        match like {
            Some((previous, known)) if previous.words == words && known.len() == units => {
                if let Some(lists) = &previous.lists {
                    return codes.listed_like(with_vector, lists.centres.clone(), known);
                }
                codes.listed(with_vector)
            }
            _ => codes.listed(with_vector),
        }
    }

    /// These codes, in their lists, for the units of a list brought up to
    /// date from the one they were made for (`newer`), made in these codes'
    /// own memory (a caller that still needs them carries a clone). A carried
    /// code keeps its list and each added one goes to the list of its nearest
    /// centre, which is where any code of these lists is (a trained list's
    /// codes were put by nearest centre, and so was every code added since);
    /// so the lists are those `Codes::new` makes from the walk before,
    /// without a pass over the mirror's codes (~0.1 s at a million passages).
    /// The units' new places are found by run, not looked up one by one in a
    /// map: a list's units are spread over all the units, and a map of a
    /// million cost a cache miss each (~80 ms). In their own memory because
    /// at a million passages, writing the moved codes into a new allocation
    /// cost more in the kernel's fresh pages than the moves themselves
    /// (bench/README.md). Every kept slot keeps its order, so they are moved
    /// by runs (`move_runs`), then the added codes go in the gaps. Codes not in lists are
    /// carried in unit order, run by run. `None` when the newer units' codes
    /// would be in lists and these are not, or the other way round (then
    /// they are made afresh).
    pub(super) fn carried_in_place(mut self, newer: &NewerUnits<'_>, lists_from: usize) -> Option<Codes> {
        let Some(lists) = self.lists.take() else {
            return self.carried_in_unit_order(newer, lists_from);
        };
        let started = std::time::Instant::now();
        let NewerUnits { runs, units, added, added_bits } = *newer;
        let words = self.words;
        let lists_n = lists.starts.len() - 1;
        let list_slots = |list: usize| lists.starts[list] as usize..lists.starts[list + 1] as usize;
        // Each slot's unit renumbered, whether it stays (bit by bit), and how many stay in each list.
        let mut stays = vec![0u64; self.units_of.len().div_ceil(64)];
        let mut kept = vec![0u32; lists_n];
        for (list, kept) in kept.iter_mut().enumerate() {
            let mut run = 0;
            for slot in list_slots(list) {
                let unit = self.units_of[slot];
                if runs.get(run).is_none_or(|r| unit < r.0 || unit >= r.1) {
                    run = runs.partition_point(|r| r.1 <= unit);
                }
                if let Some(&(first, _, at)) = runs.get(run).filter(|r| r.0 <= unit) {
                    self.units_of[slot] = at + (unit - first);
                    stays[slot / 64] |= 1 << (slot % 64);
                    *kept += 1;
                }
            }
        }
        let stays = |slot: usize| stays[slot / 64] & (1 << (slot % 64)) != 0;
        let mut nearest = Vec::with_capacity(added.len());
        nearest_of(added_bits, &vec![true; added.len()], &Centres::new(&lists.centres, words), &mut nearest);
        let mut joining: Vec<(u32, u32, usize)> =
            nearest.iter().zip(added).enumerate().map(|(at, (list, unit))| (*list, *unit, at)).collect();
        joining.sort_unstable();
        let mut starts = Vec::with_capacity(lists_n + 1);
        let mut total = 0usize;
        let mut joining_at = 0;
        for (list, kept) in kept.iter().enumerate() {
            starts.push(total as u32);
            let joins = joining[joining_at..].iter().take_while(|(l, _, _)| *l as usize == list).count();
            joining_at += joins;
            total += *kept as usize + joins;
        }
        starts.push(total as u32);
        if total == 0 || total < lists_from {
            return None;
        }
        // The staying slots' runs, `(from, to, len)`, each list's to the front of its new place.
        let mut moves: Vec<(usize, usize, usize)> = Vec::new();
        for (list, start) in starts[..lists_n].iter().enumerate() {
            for (to, from) in (*start as usize..).zip(list_slots(list).filter(|slot| stays(*slot))) {
                match moves.last_mut() {
                    Some(run) if run.0 + run.2 == from && run.1 + run.2 == to => run.2 += 1,
                    _ => moves.push((from, to, 1)),
                }
            }
        }
        move_runs(&mut self.units_of, &moves, total);
        let moves: Vec<_> = moves.into_iter().map(|(from, to, len)| (from * words, to * words, len * words)).collect();
        move_runs(&mut self.bits, &moves, total * words);
        let mut filled = kept;
        for (list, unit, at) in joining {
            let to = (starts[list as usize] + filled[list as usize]) as usize;
            filled[list as usize] += 1;
            self.units_of[to] = unit;
            self.bits[to * words..(to + 1) * words].copy_from_slice(&added_bits[at * words..(at + 1) * words]);
        }
        for slots in starts.windows(2) {
            let slots = slots[0] as usize..slots[1] as usize;
            in_unit_order(
                &mut self.units_of[slots.clone()],
                &mut self.bits[slots.start * words..slots.end * words],
                words,
            );
        }
        tracing::debug!(added = added.len(), runs = runs.len(), took = ?started.elapsed(), "sign bits carried over");
        self.has.clear();
        self.has.resize(total, true);
        Some(Codes { units, lists: Some(Lists { centres: lists.centres, starts, trained: false }), ..self })
    }

    /// `carried_in_place` for codes not in lists.
    fn carried_in_unit_order(&self, newer: &NewerUnits<'_>, lists_from: usize) -> Option<Codes> {
        let NewerUnits { runs, units, added, added_bits } = *newer;
        let words = self.words;
        let mut bits = vec![0u64; units * words];
        let mut has = vec![false; units];
        for &(first, end, at) in runs {
            let (from, to) = (first as usize..end as usize, at as usize..at as usize + (end - first) as usize);
            bits[to.start * words..to.end * words].copy_from_slice(&self.bits[from.start * words..from.end * words]);
            has[to].copy_from_slice(&self.has[from]);
        }
        for (unit, code) in added.iter().zip(added_bits.chunks_exact(words)) {
            bits[*unit as usize * words..(*unit as usize + 1) * words].copy_from_slice(code);
            has[*unit as usize] = true;
        }
        let with_vector = has.iter().filter(|h| **h).count();
        if with_vector > 0 && with_vector >= lists_from {
            return None;
        }
        Some(Codes { dims: self.dims, words, bits, has, units_of: Vec::new(), units, lists: None })
    }

    /// Each unit's list (`NO_LIST` for a unit in none), when the codes are in lists.
    pub(super) fn lists_of_units(&self) -> Option<Vec<u32>> {
        let lists = self.lists.as_ref()?;
        let mut of = vec![NO_LIST; self.units];
        for (list, slots) in lists.starts.windows(2).enumerate() {
            for slot in slots[0]..slots[1] {
                of[self.units_of[slot as usize] as usize] = list as u32;
            }
        }
        Some(of)
    }

    /// The same codes in the lists of `centres`: each unit with a vector
    /// in its `known` list, or (`UNKNOWN_LIST`) that of its nearest centre.
    fn listed_like(self, with_vector: usize, centres: Vec<u64>, mut known: Vec<u32>) -> Codes {
        let started = std::time::Instant::now();
        let words = self.words;
        let new: Vec<usize> = (0..self.units).filter(|u| self.has[*u] && known[*u] == UNKNOWN_LIST).collect();
        let new_bits: Vec<u64> =
            new.iter().flat_map(|u| self.bits[u * words..(u + 1) * words].iter().copied()).collect();
        let mut nearest = Vec::with_capacity(new.len());
        nearest_of(&new_bits, &vec![true; new.len()], &Centres::new(&centres, words), &mut nearest);
        for (unit, list) in new.iter().zip(nearest) {
            known[*unit] = list;
        }
        for (unit, has) in self.has.iter().enumerate() {
            if !*has {
                known[unit] = NO_LIST;
            }
        }
        tracing::debug!(new = new.len(), placed = ?started.elapsed(), "sign bits put in the lists of the walk before");
        self.laid_out(with_vector, Lists { centres, starts: Vec::new(), trained: false }, known)
    }

    /// The same codes, in lists: centres trained on a sample, every code put
    /// in the list of the centre it agrees with most, the lists side by side.
    fn listed(self, with_vector: usize) -> Codes {
        let words = self.words;
        let started = std::time::Instant::now();
        let lists = with_vector.div_ceil(LIST_SIZE).clamp(1, MOST_LISTS);
        let centres = train_centres(&self.bits, &self.has, words, lists);
        let trained = started.elapsed();
        let nearest = nearest_centres(&self.bits, &self.has, &Centres::new(&centres, words));
        tracing::debug!(?trained, assigned = ?started.elapsed(), lists = centres.len() / words, "sign bits put in lists");
        self.laid_out(with_vector, Lists { centres, starts: Vec::new(), trained: true }, nearest)
    }

    /// The codes laid out in `lists` (whose `starts` this fills), list by
    /// list (`nearest`: each unit's list, `NO_LIST` for none).
    fn laid_out(self, with_vector: usize, lists: Lists, nearest: Vec<u32>) -> Codes {
        let Codes { dims, words, bits, units, .. } = self;
        let Lists { centres, trained, .. } = lists;
        let lists = centres.len() / words;
        let mut starts = vec![0u32; lists + 1];
        for list in nearest.iter().filter(|l| **l != NO_LIST) {
            starts[*list as usize + 1] += 1;
        }
        for l in 0..lists {
            starts[l + 1] += starts[l];
        }
        let mut place = starts.clone();
        let mut units_of = vec![0u32; with_vector];
        let mut listed = vec![0u64; with_vector * words];
        for (unit, list) in nearest.iter().enumerate().filter(|(_, l)| **l != NO_LIST) {
            let slot = place[*list as usize] as usize;
            place[*list as usize] += 1;
            units_of[slot] = unit as u32;
            listed[slot * words..(slot + 1) * words].copy_from_slice(&bits[unit * words..(unit + 1) * words]);
        }
        Codes {
            dims,
            words,
            bits: listed,
            has: vec![true; with_vector],
            units_of,
            units,
            lists: Some(Lists { centres, starts, trained }),
        }
    }

    /// Whether the codes are in lists.
    #[cfg(test)]
    pub(super) fn is_listed(&self) -> bool {
        self.lists.is_some()
    }

    /// Whether the codes' lists were trained for them (`None`: not in lists).
    #[cfg(test)]
    pub(super) fn trained_here(&self) -> Option<bool> {
        self.lists.as_ref().map(|lists| lists.trained)
    }

    /// The units that have a vector, in unit order.
    pub(super) fn with_vectors(&self) -> Vec<u32> {
        if self.units_of.is_empty() {
            return (0..self.has.len() as u32).filter(|u| self.has[*u as usize]).collect();
        }
        let mut units = self.units_of.clone();
        units.sort_unstable();
        units
    }

    /// The `n` units whose codes share the most sign bits with `query`, ties
    /// by `order` (path, line, place), so the choice depends on the visible
    /// units alone; in no particular order. With `Scan::EveryCode`, or when
    /// the codes are not in lists, exactly the `n` a count of every unit's
    /// agreement would pick; otherwise the `n` among the nearest lists'.
    ///
    /// The scan of every code does not keep that count for a million units:
    /// a sample of every `SAMPLE_EVERY`-th code sets a bar that about
    /// `SAMPLE_MARGIN` times `n` codes reach, the scan keeps the units at or
    /// above it alone, and the `n` are picked among those. Since at least `n`
    /// units reach the bar (else the scan is made again without one), every
    /// unit that agrees as much as the `n`-th best is among them, so the
    /// pick is the same. (The scan used to write each unit's count and a
    /// histogram of them: a store and a dependent increment a unit, a fifth
    /// of the scan's time.)
    pub(super) fn most_alike(
        &self,
        query: &[u64],
        n: usize,
        order: &dyn Fn(u32, u32) -> std::cmp::Ordering,
        scan: Scan,
    ) -> Vec<u32> {
        if self.words == 0 || query.len() != self.words || n == 0 {
            return Vec::new();
        }
        let mut passed = match (&self.lists, scan) {
            (Some(lists), Scan::NearestLists { share }) => self.in_nearest_lists(lists, query, n, share),
            _ => {
                let bar = self.bar_from_sample(query, n);
                let passed = self.passing(query, bar);
                if passed.len() < n && bar > 0 {
                    self.passing(query, 0)
                } else {
                    passed
                }
            }
        };
        if !self.units_of.is_empty() {
            for (slot, _) in &mut passed {
                *slot = self.units_of[*slot as usize];
            }
        }
        let agree: Vec<u16> = passed.iter().map(|(_, agree)| *agree).collect();
        let histogram = super::rank::histogram(&agree, self.dims);
        let picked =
            super::rank::select_most(&agree, &histogram, n, &|a, b| order(passed[a as usize].0, passed[b as usize].0));
        picked.into_iter().map(|at| passed[at as usize].0).collect()
    }

    /// Every slot of the lists whose centres agree most with `query` (ties
    /// by list number), taken until they hold one slot in `share` and
    /// `PROBE_MARGIN` times `n`, with its agreement.
    fn in_nearest_lists(&self, lists: &Lists, query: &[u64], n: usize, share: usize) -> Vec<(u32, u16)> {
        let words = self.words;
        let mut nearest: Vec<(u32, u32)> = lists
            .centres
            .chunks_exact(words)
            .enumerate()
            .map(|(list, centre)| (agreement(centre, query, self.dims), list as u32))
            .collect();
        nearest.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let enough = (self.has.len() / share.max(1)).max(n.saturating_mul(PROBE_MARGIN));
        let mut out = Vec::with_capacity(enough + LIST_SIZE);
        for (_, list) in nearest {
            if out.len() >= enough {
                break;
            }
            let (from, to) = (lists.starts[list as usize] as usize, lists.starts[list as usize + 1] as usize);
            let input = ScanInput {
                bits: &self.bits[from * words..to * words],
                has: &self.has[from..to],
                words,
                query,
                dims: self.dims,
            };
            scan_passing(input, 0, from as u32, &mut out);
        }
        out
    }

    /// The highest agreement that at least `SAMPLE_MARGIN` times the sample's
    /// share of `n` sampled codes reach (0, letting every code through, when
    /// the sample is smaller than that).
    fn bar_from_sample(&self, query: &[u64], n: usize) -> u16 {
        let mut histogram = vec![0usize; self.dims + 1];
        for u in (0..self.has.len()).step_by(SAMPLE_EVERY).filter(|u| self.has[*u]) {
            let agree = agreement(&self.bits[u * self.words..(u + 1) * self.words], query, self.dims);
            histogram[(agree as usize).min(self.dims)] += 1;
        }
        let want = n.div_ceil(SAMPLE_EVERY).saturating_mul(SAMPLE_MARGIN);
        let mut at_or_above = 0;
        for (agree, count) in histogram.iter().enumerate().rev() {
            at_or_above += count;
            if at_or_above >= want {
                return agree as u16;
            }
        }
        0
    }

    /// Every slot with a vector whose code shares at least `bar` sign bits
    /// with `query`, with that count, in slot order. From `SCAN_SPLIT_FROM`
    /// slots on the scan is shared between threads, each taking a part of
    /// the slots, so the answer is the same either way.
    fn passing(&self, query: &[u64], bar: u16) -> Vec<(u32, u16)> {
        let (words, dims) = (self.words, self.dims);
        in_parts(self.has.len(), |slots| {
            let (from, to) = (slots.start, slots.end);
            let input =
                ScanInput { bits: &self.bits[from * words..to * words], has: &self.has[from..to], words, query, dims };
            let mut out = Vec::new();
            scan_passing(input, bar, from as u32, &mut out);
            out
        })
    }
}

/// `work` over `0..len` cut in consecutive parts, the results joined in
/// order: from `SCAN_SPLIT_FROM` on, a part for each of a few threads (the
/// first on this one), so the answer is the one of a single part.
fn in_parts<T: Send>(len: usize, work: impl Fn(std::ops::Range<usize>) -> Vec<T> + Sync) -> Vec<T> {
    let parts = if len >= SCAN_SPLIT_FROM {
        std::thread::available_parallelism().map_or(1, |n| n.get()).min(SCAN_THREADS)
    } else {
        1
    };
    if parts <= 1 {
        return work(0..len);
    }
    let per = len.div_ceil(parts);
    let part = |at: usize| (at * per).min(len)..((at + 1) * per).min(len);
    std::thread::scope(|scope| {
        let work = &work;
        let others: Vec<_> = (1..parts).map(|at| scope.spawn(move || work(part(at)))).collect();
        let mut out = work(part(0));
        for other in others {
            out.extend(other.join().expect("a sign-bit scan's thread stopped"));
        }
        out
    })
}

/// The lists' centres, `words` `u64`s each: at most `lists` codes of a
/// sample (each code there once), trained by rounds of putting the sample's
/// codes in the list of the centre they agree with most and taking each
/// bit of a centre from the majority of its list (an even split keeps it).
/// The sample is the codes with the smallest hashes, which depends on the
/// codes alone, not on the units' order.
fn train_centres(bits: &[u64], has: &[bool], words: usize, lists: usize) -> Vec<u64> {
    let code = |u: u32| &bits[u as usize * words..(u as usize + 1) * words];
    let mut hashed: Vec<(u64, u32)> =
        (0..has.len() as u32).filter(|u| has[*u as usize]).map(|u| (hash_code(code(u)), u)).collect();
    // Room for copies of a code (a tree copied into itself), which count once.
    let keep = lists * SAMPLE_PER_LIST * 8;
    if hashed.len() > keep {
        hashed.select_nth_unstable(keep);
        hashed.truncate(keep);
    }
    hashed.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| code(a.1).cmp(code(b.1))));
    hashed.dedup_by(|a, b| code(a.1) == code(b.1));
    hashed.truncate(lists * SAMPLE_PER_LIST);
    let sample: Vec<u64> = hashed.iter().flat_map(|(_, u)| code(*u).iter().copied()).collect();
    let mut centres: Vec<u64> = sample[..lists.min(hashed.len()) * words].to_vec();
    let lists = centres.len() / words;
    let dims = words * 64;
    for _ in 0..TRAIN_ROUNDS {
        let mut ones = vec![0u32; lists * dims];
        let mut sizes = vec![0u32; lists];
        let mut nearest = Vec::with_capacity(sample.len() / words);
        nearest_of(&sample, &vec![true; sample.len() / words], &Centres::new(&centres, words), &mut nearest);
        for (code, list) in sample.chunks_exact(words).zip(nearest) {
            let list = list as usize;
            sizes[list] += 1;
            for (w, word) in code.iter().enumerate() {
                let mut rest = *word;
                while rest != 0 {
                    ones[list * dims + w * 64 + rest.trailing_zeros() as usize] += 1;
                    rest &= rest - 1;
                }
            }
        }
        for list in 0..lists {
            for bit in 0..dims {
                let (count, size) = (ones[list * dims + bit] * 2, sizes[list]);
                let word = &mut centres[list * words + bit / 64];
                if count > size {
                    *word |= 1 << (bit % 64);
                } else if count < size {
                    *word &= !(1 << (bit % 64));
                }
            }
        }
    }
    centres
}

/// A hash of a code that does not depend on where it is (SplitMix64's finaliser over its words).
fn hash_code(code: &[u64]) -> u64 {
    code.iter().fold(0x9e37_79b9_7f4a_7c15u64, |state, word| {
        let mut z = (state ^ word).wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    })
}

/// The centres laid out to be compared with a code all at once: word `w`
/// of every centre side by side (`by_word[w * lists + l]`), so a comparison
/// is a few sweeps the compiler turns into vector instructions.
struct Centres {
    words: usize,
    lists: usize,
    by_word: Vec<u64>,
    /// `0..lists`, what a code's keys start from.
    numbers: Vec<u64>,
}

impl Centres {
    /// `centres`: `words` `u64`s a centre.
    fn new(centres: &[u64], words: usize) -> Centres {
        let lists = centres.len() / words;
        let mut by_word = vec![0u64; lists * words];
        for (list, centre) in centres.chunks_exact(words).enumerate() {
            for (w, word) in centre.iter().enumerate() {
                by_word[w * lists + list] = *word;
            }
        }
        Centres { words, lists, by_word, numbers: (0..lists as u64).collect() }
    }
}

/// Each unit's nearest centre (`NO_LIST` for a unit without a vector),
/// computed on a few threads, each taking a part of the units.
fn nearest_centres(bits: &[u64], has: &[bool], centres: &Centres) -> Vec<u32> {
    let words = centres.words;
    in_parts(has.len(), |units| {
        let mut out = Vec::with_capacity(units.len());
        nearest_of(&bits[units.start * words..units.end * words], &has[units.clone()], centres, &mut out);
        out
    })
}

/// Pushes each code's nearest centre onto `out` (the first of those that
/// agree as much; `NO_LIST` where `has` is false), with the widest
/// population count the CPU has: AVX-512's counts eight words at once,
/// where `popcnt` counts one (at a million passages, about a second's
/// building became a fifth of one).
fn nearest_of(bits: &[u64], has: &[bool], centres: &Centres, out: &mut Vec<u32>) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("avx512vpopcntdq") {
            // SAFETY: the function differs from the portable one only by the
            // instructions it may use, which the CPU was just found to have.
            unsafe { nearest_of_avx512(bits, has, centres, out) };
            return;
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("popcnt") {
            // SAFETY: as above.
            unsafe { nearest_of_avx2(bits, has, centres, out) };
            return;
        }
    }
    nearest_of_portable(bits, has, centres, out);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vpopcntdq")]
fn nearest_of_avx512(bits: &[u64], has: &[bool], centres: &Centres, out: &mut Vec<u32>) {
    nearest_of_portable(bits, has, centres, out);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,popcnt")]
fn nearest_of_avx2(bits: &[u64], has: &[bool], centres: &Centres, out: &mut Vec<u32>) {
    nearest_of_portable(bits, has, centres, out);
}

/// The comparison itself: a code's key for each centre is the bits they do
/// not share, shifted up, plus the centre's number, so the smallest key
/// names the nearest centre and settles ties by number, and every step is
/// the same operation on each centre (which the compiler makes vector code).
#[inline(always)]
fn nearest_of_portable(bits: &[u64], has: &[bool], centres: &Centres, out: &mut Vec<u32>) {
    let Centres { words, lists, by_word, numbers } = centres;
    let mut keys = numbers.clone();
    for (code, has) in bits.chunks_exact(*words).zip(has) {
        if !*has || *lists == 0 {
            out.push(NO_LIST);
            continue;
        }
        keys.copy_from_slice(numbers);
        for (word, row) in code.iter().zip(by_word.chunks_exact(*lists)) {
            for (key, centre) in keys.iter_mut().zip(row) {
                *key += u64::from((centre ^ word).count_ones()) << 32;
            }
        }
        let nearest = keys.iter().copied().min().unwrap_or(0);
        out.push((nearest & 0xffff_ffff) as u32);
    }
}

/// One part of a scan: its slots' codes (`words` `u64`s a slot) and whether
/// each has one, and the query's code of `dims` bits.
#[derive(Clone, Copy)]
struct ScanInput<'a> {
    bits: &'a [u64],
    has: &'a [bool],
    words: usize,
    query: &'a [u64],
    dims: usize,
}

/// Pushes onto `out` each slot of the part (numbered from `first`) that has
/// a vector and shares at least `bar` sign bits with the query, with that
/// count, using the CPU's population count when it has one: the portable
/// build's `count_ones` is a dozen instructions a word instead of one.
fn scan_passing(input: ScanInput<'_>, bar: u16, first: u32, out: &mut Vec<(u32, u16)>) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("popcnt") {
        // SAFETY: `scan_passing_popcnt` only differs from the portable scan
        // by using the `popcnt` instruction, which the CPU was just found to have.
        unsafe { scan_passing_popcnt(input, bar, first, out) };
        return;
    }
    scan_passing_portable(input, bar, first, out);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "popcnt")]
fn scan_passing_popcnt(input: ScanInput<'_>, bar: u16, first: u32, out: &mut Vec<(u32, u16)>) {
    scan_passing_portable(input, bar, first, out);
}

/// The scan itself; 384 dimensions (six words, every embedder ctxfs ships) get
/// a loop the compiler unrolls, with the query's words in registers. A slot
/// costs a load of its code, six counts and a comparison: nothing is
/// written but the few slots that pass.
#[inline(always)]
fn scan_passing_portable(input: ScanInput<'_>, bar: u16, first: u32, out: &mut Vec<(u32, u16)>) {
    let ScanInput { bits, has, words, query, dims } = input;
    let bar = u32::from(bar);
    if let Ok(&q) = <&[u64; 6]>::try_from(query) {
        let [q0, q1, q2, q3, q4, q5] = q;
        let (codes, _) = bits.as_chunks::<6>();
        for (at, (code, has)) in codes.iter().zip(has).enumerate() {
            // Written out: as a loop over the words, the compiler kept the query on the stack.
            let [c0, c1, c2, c3, c4, c5] = *code;
            let differ = (c0 ^ q0).count_ones()
                + (c1 ^ q1).count_ones()
                + (c2 ^ q2).count_ones()
                + (c3 ^ q3).count_ones()
                + (c4 ^ q4).count_ones()
                + (c5 ^ q5).count_ones();
            let agree = (dims as u32).saturating_sub(differ);
            if agree >= bar && *has {
                out.push((first + at as u32, agree as u16));
            }
        }
        return;
    }
    for (at, (code, has)) in bits.chunks_exact(words).zip(has).enumerate() {
        let agree = agreement(code, query, dims);
        if agree >= bar && *has {
            out.push((first + at as u32, agree as u16));
        }
    }
}

/// How many sign bits two codes share (the dimensions minus their Hamming distance).
fn agreement(a: &[u64], b: &[u64], dims: usize) -> u32 {
    dims as u32 - a.iter().zip(b).map(|(x, y)| (x ^ y).count_ones()).sum::<u32>()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cmp::Ordering;

    /// The sign-bit scan picks what a plain count of every unit's agreeing
    /// bits and `rank::select_most` pick (the top `n`, ties by the order),
    /// alone or shared between threads, for six words a code and others, and
    /// when the sample's bar lets too few through.
    #[test]
    fn sign_bit_scan_picks_what_a_plain_count_picks() {
        let mut state = 11u64;
        let mut next = || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            state
        };
        // An order unrelated to the unit numbers, so ties are not settled by position.
        let order = |a: u32, b: u32| {
            (a.wrapping_mul(2654435761) % 977).cmp(&(b.wrapping_mul(2654435761) % 977)).then(a.cmp(&b))
        };
        let check = |codes: &Codes, query: &[u64], n: usize, what: &str| {
            let plain: Vec<u16> = (0..codes.has.len())
                .map(|u| {
                    if codes.has[u] {
                        let code = &codes.bits[u * codes.words..(u + 1) * codes.words];
                        let differ: u32 = code.iter().zip(query).map(|(c, q)| (c ^ q).count_ones()).sum();
                        (codes.dims as u32 - differ) as u16
                    } else {
                        u16::MAX
                    }
                })
                .collect();
            let histogram = super::super::rank::histogram(&plain, codes.dims);
            let mut want = super::super::rank::select_most(&plain, &histogram, n, &order);
            want.sort_unstable();
            let mut got = codes.most_alike(query, n, &order, Scan::NearestLists { share: PROBE_SHARE });
            got.sort_unstable();
            assert_eq!(got, want, "{what}, n {n}");
        };
        for (words, units) in [(6, 1000), (6, SCAN_SPLIT_FROM + 7), (2, 300), (2, SCAN_SPLIT_FROM * 2 + 1)] {
            let dims = words * 64;
            let bits: Vec<u64> = (0..units * words).map(|_| next()).collect();
            let has: Vec<bool> = (0..units).map(|_| next() % 7 != 0).collect();
            let query: Vec<u64> = (0..words).map(|_| next()).collect();
            let codes = Codes::new(dims, bits, has, usize::MAX, None);
            for n in [1, 10, 200, 1000, units + 5] {
                check(&codes, &query, n, &format!("{units} units, {words} words"));
            }
        }
        // The sampled units agree in every bit and the others in none: the
        // sample's bar lets the sampled units alone through, fewer than asked.
        let (words, units) = (6, 10_000);
        let query: Vec<u64> = (0..words).map(|_| next()).collect();
        let bits: Vec<u64> =
            (0..units).flat_map(|u| query.iter().map(move |q| if u % SAMPLE_EVERY == 0 { *q } else { !*q })).collect();
        let codes = Codes::new(384, bits, vec![true; units], usize::MAX, None);
        let sampled = units.div_ceil(SAMPLE_EVERY);
        assert!(codes.passing(&query, codes.bar_from_sample(&query, 1000)).len() == sampled && sampled < 1000);
        check(&codes, &query, 1000, "a bar too high");
    }

    /// Codes in clusters: `clusters` random centres, each unit a centre with
    /// about one bit in `flip` turned, and every seventh unit without a vector.
    fn clustered(units: usize, clusters: usize, flip: u64, seed: u64) -> (Vec<u64>, Vec<bool>, Vec<u64>) {
        let mut state = seed;
        let mut next = move || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            state ^ (state >> 29)
        };
        let centres: Vec<u64> = (0..clusters * 6).map(|_| next()).collect();
        let noise = |next: &mut dyn FnMut() -> u64| (0..flip.trailing_zeros()).fold(!0u64, |m, _| m & next());
        let mut bits = Vec::with_capacity(units * 6);
        let mut has = Vec::with_capacity(units);
        for u in 0..units {
            let c = (next() % clusters as u64) as usize;
            for w in 0..6 {
                bits.push(centres[c * 6 + w] ^ noise(&mut next));
            }
            has.push(u % 7 != 3);
        }
        let c = (next() % clusters as u64) as usize;
        let query = (0..6).map(|w| centres[c * 6 + w] ^ noise(&mut next)).collect();
        (bits, has, query)
    }

    /// What a plain count of every unit's agreement picks (ties by `order`).
    fn plain_pick(
        bits: &[u64],
        has: &[bool],
        query: &[u64],
        n: usize,
        order: &dyn Fn(u32, u32) -> Ordering,
    ) -> Vec<u32> {
        let plain: Vec<u16> = has
            .iter()
            .enumerate()
            .map(|(u, h)| if *h { agreement(&bits[u * 6..(u + 1) * 6], query, 384) as u16 } else { u16::MAX })
            .collect();
        let histogram = super::super::rank::histogram(&plain, 384);
        let mut want = super::super::rank::select_most(&plain, &histogram, n, order);
        want.sort_unstable();
        want
    }

    /// In lists, every unit with a vector is in one list, a scan of every
    /// code still picks what the plain count picks, and so do the nearest
    /// lists when they are all it takes to hold enough.
    #[test]
    fn listed_codes_pick_what_a_plain_count_picks_when_scanned_whole() {
        let order = |a: u32, b: u32| (a % 13).cmp(&(b % 13)).then(a.cmp(&b));
        let (bits, has, query) = clustered(40_000, 50, 8, 3);
        let listed = Codes::new(384, bits.clone(), has.clone(), 0, None);
        assert!(listed.lists.is_some() && Codes::new(384, bits.clone(), has.clone(), 40_000, None).lists.is_none());
        let with: Vec<u32> = (0..has.len() as u32).filter(|u| has[*u as usize]).collect();
        assert_eq!(listed.with_vectors(), with);
        let lists = listed.lists.as_ref().unwrap();
        assert_eq!(*lists.starts.last().unwrap() as usize, with.len());
        assert!(lists.starts.len() > 2, "one list for 40,000 codes");
        for n in [1, 10, 1000] {
            let want = plain_pick(&bits, &has, &query, n, &order);
            let mut got = listed.most_alike(&query, n, &order, Scan::EveryCode);
            got.sort_unstable();
            assert_eq!(got, want, "every code, n {n}");
        }
        // Asking for more than a share of the codes scans every list.
        let n = with.len() / PROBE_MARGIN + 1;
        let mut got = listed.most_alike(&query, n, &order, Scan::NearestLists { share: PROBE_SHARE });
        got.sort_unstable();
        assert_eq!(got, plain_pick(&bits, &has, &query, n, &order));
    }

    /// The nearest lists find most of what a scan of every code finds, on
    /// codes that come in clusters (fewer than the lists), while scanning a
    /// small share of them.
    #[test]
    fn nearest_lists_find_most_of_the_most_alike() {
        let order = |a: u32, b: u32| a.cmp(&b);
        for seed in [1, 2, 3] {
            let (bits, has, query) = clustered(150_000, 20, 16, seed);
            let listed = Codes::new(384, bits.clone(), has.clone(), 0, None);
            let n = 200;
            let want = plain_pick(&bits, &has, &query, n, &order);
            let got = listed.most_alike(&query, n, &order, Scan::NearestLists { share: PROBE_SHARE });
            let found = got.iter().filter(|u| want.binary_search(u).is_ok()).count();
            assert!(found * 10 >= n * 9, "seed {seed}: the lists found {found} of the {n} most alike");
            let scanned = listed.in_nearest_lists(listed.lists.as_ref().unwrap(), &query, n, PROBE_SHARE).len();
            assert!(scanned * 2 < listed.has.len(), "seed {seed}: {scanned} of {} codes scanned", listed.has.len());
        }
    }

    /// A stored vector's sign bits are those `sign_code` makes of its values.
    #[test]
    fn sign_codes_of_stored_vectors_are_the_general_ones() {
        for dims in [384, 5, 64, 130, 256] {
            // Every byte value, zero and both extremes among them, in each place of a word.
            let values: Vec<i8> = (0..dims).map(|i| ((i * 37 + dims) % 256) as u8 as i8).collect();
            let (mut fast, mut general) = (Vec::new(), Vec::new());
            sign_code_of_i8(&values, &mut fast);
            sign_code(values.iter().map(|v| *v > 0), &mut general, dims);
            assert_eq!(fast, general, "{dims} dimensions");
        }
    }

    /// Each code's nearest centre is the first of those it differs from in
    /// the fewest bits, for six words a code and two, numbers of centres the
    /// vector code does not divide, and centres that tie.
    #[test]
    fn nearest_centres_are_those_a_plain_count_finds() {
        let mut state = 17u64;
        let mut next = || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            state ^ (state >> 31)
        };
        for (words, lists, units) in [(6, 37, 5000), (6, 8, 300), (2, 13, SCAN_SPLIT_FROM + 3), (6, 1, 10)] {
            let mut centres: Vec<u64> = (0..lists * words).map(|_| next()).collect();
            if lists > 3 {
                let copy = centres[..words].to_vec();
                centres[2 * words..3 * words].copy_from_slice(&copy);
            }
            let bits: Vec<u64> = (0..units * words).map(|_| next()).collect();
            let has: Vec<bool> = (0..units).map(|u| u % 5 != 1).collect();
            let want: Vec<u32> = bits
                .chunks_exact(words)
                .zip(&has)
                .map(|(code, has)| {
                    let differ = |l: usize| -> u32 {
                        centres[l * words..(l + 1) * words].iter().zip(code).map(|(a, b)| (a ^ b).count_ones()).sum()
                    };
                    if *has {
                        (0..lists).min_by_key(|l| (differ(*l), *l)).unwrap() as u32
                    } else {
                        NO_LIST
                    }
                })
                .collect();
            assert_eq!(
                nearest_centres(&bits, &has, &Centres::new(&centres, words)),
                want,
                "{words} words, {lists} lists"
            );
            // The portable loop too, where the CPU has wider counts.
            let mut portable = Vec::new();
            nearest_of_portable(&bits, &has, &Centres::new(&centres, words), &mut portable);
            assert_eq!(portable, want, "{words} words, {lists} lists, portable");
        }
    }

    /// Codes put in the lists of the walk before keep the lists they had
    /// there, and a code whose list is not known goes where a fresh
    /// assignment to those centres puts it; the picks are those of the walk
    /// before.
    #[test]
    fn codes_put_in_the_lists_of_the_walk_before_keep_them() {
        let order = |a: u32, b: u32| a.cmp(&b);
        let (bits, has, query) = clustered(20_000, 30, 8, 5);
        let first = Codes::new(384, bits.clone(), has.clone(), 0, None);
        let known = first.lists_of_units().unwrap();
        assert_eq!(known.iter().filter(|l| **l != NO_LIST).count(), has.iter().filter(|h| **h).count());
        let again = Codes::new(384, bits.clone(), has.clone(), 0, Some((&first, known.clone())));
        assert_eq!(again.lists_of_units().as_ref(), Some(&known));
        assert_eq!((first.trained_here(), again.trained_here()), (Some(true), Some(false)));
        let picks = |codes: &Codes| {
            let mut got = codes.most_alike(&query, 300, &order, Scan::NearestLists { share: PROBE_SHARE });
            got.sort_unstable();
            got
        };
        assert_eq!(picks(&again), picks(&first));
        let placed = Codes::new(384, bits, has.clone(), 0, Some((&first, vec![UNKNOWN_LIST; has.len()])));
        assert_eq!(placed.lists_of_units(), Some(known));
    }

    /// Codes carried over in their own memory are those `Codes::new` puts in
    /// the lists of the walk before, whether the newer list has more units
    /// or fewer, with units gone from anywhere and new ones put anywhere.
    #[test]
    fn codes_carried_in_place_are_those_put_in_the_lists_before() {
        let (bits, has, _) = clustered(20_000, 30, 8, 11);
        let (more_bits, _, _) = clustered(3_000, 30, 8, 12);
        for (seed, gone_share, added_share) in [(1u64, 3, 1), (2, 1, 3), (3, 0, 1), (4, 1, 0), (5, 2, 2)] {
            let mut random = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            let mut next = |below: u64| {
                random ^= random << 13;
                random ^= random >> 7;
                random ^= random << 17;
                random % below
            };
            // Blocks of the old units, each kept or gone, with new units put between them.
            let (mut runs, mut added, mut added_bits, mut unit, mut old) =
                (Vec::new(), Vec::new(), Vec::new(), 0u32, 0u32);
            while (old as usize) < has.len() {
                let block = (1 + next(300) as u32).min(has.len() as u32 - old);
                if next(4) >= gone_share {
                    runs.push((old, old + block, unit));
                    unit += block;
                }
                old += block;
                for _ in 0..(if next(4) < added_share { next(40) } else { 0 }) {
                    let code = next(3_000) as usize;
                    added.push(unit);
                    added_bits.extend_from_slice(&more_bits[code * 6..code * 6 + 6]);
                    unit += 1;
                }
            }
            let newer = NewerUnits { runs: &runs, units: unit as usize, added: &added, added_bits: &added_bits };
            let before = Codes::new(384, bits.clone(), has.clone(), 0, None);
            // The newer units' codes side by side, each kept one with its list before.
            let old_lists = before.lists_of_units().unwrap();
            let (mut new_bits, mut new_has) = (vec![0u64; unit as usize * 6], vec![false; unit as usize]);
            let mut known = vec![UNKNOWN_LIST; unit as usize];
            for &(first, end, at) in &runs {
                for (old, new) in (first as usize..end as usize).zip(at as usize..) {
                    new_bits[new * 6..new * 6 + 6].copy_from_slice(&bits[old * 6..old * 6 + 6]);
                    (new_has[new], known[new]) = (has[old], old_lists[old]);
                }
            }
            for (unit, code) in added.iter().zip(added_bits.chunks_exact(6)) {
                new_bits[*unit as usize * 6..*unit as usize * 6 + 6].copy_from_slice(code);
                new_has[*unit as usize] = true;
            }
            let put = Codes::new(384, new_bits, new_has, 0, Some((&before, known)));
            assert_eq!(before.carried_in_place(&newer, 0).expect("carried in place"), put, "seed {seed}");
            assert_eq!(put.units, unit as usize);
        }
    }

    /// The lists depend on the codes, not on the units' order: units put in
    /// another order pick the same units (renumbered).
    #[test]
    fn lists_do_not_depend_on_the_units_order() {
        let (bits, has, query) = clustered(20_000, 30, 8, 9);
        let units = has.len();
        let moved = |u: usize| (u * 7919) % units;
        let mut bits2 = vec![0u64; bits.len()];
        let mut has2 = vec![false; units];
        for u in 0..units {
            bits2[moved(u) * 6..moved(u) * 6 + 6].copy_from_slice(&bits[u * 6..u * 6 + 6]);
            has2[moved(u)] = has[u];
        }
        let mut back = vec![0u32; units];
        for u in 0..units {
            back[moved(u)] = u as u32;
        }
        let order = |a: u32, b: u32| a.cmp(&b);
        let order2 = |a: u32, b: u32| back[a as usize].cmp(&back[b as usize]);
        let one = Codes::new(384, bits, has, 0, None);
        let two = Codes::new(384, bits2, has2, 0, None);
        assert_eq!(one.lists.as_ref().unwrap().centres, two.lists.as_ref().unwrap().centres);
        let mut a = one.most_alike(&query, 300, &order, Scan::NearestLists { share: PROBE_SHARE });
        let mut b: Vec<u32> = two
            .most_alike(&query, 300, &order2, Scan::NearestLists { share: PROBE_SHARE })
            .iter()
            .map(|u| back[*u as usize])
            .collect();
        a.sort_unstable();
        b.sort_unstable();
        assert_eq!(a, b);
    }
}
