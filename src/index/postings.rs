//! The passages' inverted index, in SQLite tables of our own: each commit's new postings become one segment (per term, a list of chunk ids and counts, delta- and varint-encoded in one blob), segments of like size are merged, and a term's list is read back as a few blobs into the form memory holds (`List`); not the chunks, the vectors, the paths' terms or the ranking.
//!
//! Why not FTS5 (which held these terms until schema 4): its vocabulary
//! table hands a term's list back one occurrence per row, which cost a
//! query of common words 40 ms at a million passages (bench/README.md);
//! here a term is one blob per segment.
//!
//! What holds, and what relies on it:
//!
//! * A chunk id is never given twice (`chunks.id` is `AUTOINCREMENT`). So a
//!   removed chunk's postings can stay in their segment until a merge drops
//!   them: `read` may name chunks that are gone, never a chunk it does not
//!   belong to, and callers keep the ids of chunks they hold. Removed ids
//!   wait in `dead_chunks` until a merge of every segment.
//! * One writer at a time, and a commit's chunks get ids above every earlier
//!   commit's: a segment made by one commit covers ids no other segment
//!   holds, so a term's lists read in segment order are in id order. A merge
//!   of like-sized segments may span smaller ones made between them; `read`
//!   then merges each segment's run into what it read before (`merge_run`).
//! * Sizes by tiers of `FANOUT`: a segment's level grows with its chunks,
//!   and `FANOUT` segments of one level are merged into one. A term is read
//!   from at most a few segments a level, and each posting is written again
//!   about once a level (write amplification logarithmic in the index).

use super::terms::CountedTerms;
use integer_encoding::VarInt;
use rusqlite::{params, Connection, OptionalExtension};
use std::collections::HashSet;

/// The tables (created with the rest of the schema).
pub(super) const SCHEMA: &str = "
    CREATE TABLE IF NOT EXISTS postings_segments (
        id INTEGER PRIMARY KEY,
        level INTEGER NOT NULL,
        first_id INTEGER NOT NULL,
        last_id INTEGER NOT NULL,
        chunks INTEGER NOT NULL
    );
    CREATE TABLE IF NOT EXISTS chunk_postings (
        segment INTEGER NOT NULL,
        term TEXT NOT NULL,
        list BLOB NOT NULL,
        PRIMARY KEY (segment, term)
    ) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS dead_chunks (id INTEGER PRIMARY KEY);";

/// The tables, for a migration to drop.
pub(super) const TABLES: [&str; 3] = ["chunk_postings", "postings_segments", "dead_chunks"];

/// How many segments of one level are merged into one (8: a posting is
/// written about three times in a build of a million passages, against five with 4).
pub(super) const FANOUT: usize = 8;
/// The most chunks a segment of level 0 holds; each level above holds `FANOUT` times more.
const LEVEL0_CHUNKS: i64 = 256;
/// How many removed chunks wait before they may prompt a merge of every segment
/// (which happens once they are also half of the chunks written).
const DEAD_BEFORE_PURGE: i64 = 1024;

/// The postings of the chunks added in the open transaction, written as one segment at its commit.
///
/// The writer of a build spends its time here for every chunk, so the words
/// are counted by sorting them (no map a chunk), a term is copied only the
/// first time the transaction meets it, and the map hashes with FNV-1a.
#[derive(Default)]
pub(super) struct Pending {
    terms: fnv::FnvHashMap<String, Vec<(i64, u32)>>,
    ids: Option<(i64, i64)>,
    chunks: i64,
}

impl Pending {
    /// Adds a new chunk's counted words. Ids come in ascending order.
    pub(super) fn add(&mut self, id: i64, words: &CountedTerms) {
        for (term, &count) in &words.counts {
            let posting = (id, count);
            match self.terms.get_mut(term.as_str()) {
                Some(list) => list.push(posting),
                None => {
                    self.terms.insert(term.clone(), vec![posting]);
                }
            }
        }
        self.ids = Some(match self.ids {
            Some((first, last)) => (first.min(id), last.max(id)),
            None => (id, id),
        });
        self.chunks += 1;
    }

    pub(super) fn clear(&mut self) {
        *self = Pending::default();
    }
}

/// A segment's row.
#[derive(Debug, Clone, Copy)]
struct Segment {
    id: i64,
    first_id: i64,
    last_id: i64,
    chunks: i64,
}

/// Which merges a commit makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Merges {
    /// Every one due: a full level merged, and everything once removed chunks are many.
    All,
    /// Only a level grown to `OVERDUE` segments. A search that takes in an
    /// outside edit waits for its commit, and at a million passages even a
    /// merge of level 0 (177 chunks in 8 segments) cost it 50-90 ms (each
    /// term's list read, merged and written again). What is left is merged by
    /// the next commit that makes every merge (a build, the written files'
    /// indexer, a round in the background, all off any call's path) and costs
    /// a read a few more segments meanwhile.
    Overdue,
}

/// How many segments a level may gather while its merge waits (`Merges::Overdue`).
const OVERDUE: usize = 4 * FANOUT;

/// Writes what `pending` holds as a new segment, then merges where a level
/// is full (or removed chunks have become many), as far as `merges` allows.
/// Runs inside the caller's transaction; `pending` is empty afterwards.
pub(super) fn flush(db: &Connection, pending: &mut Pending, merges: Merges) -> anyhow::Result<()> {
    let Some((first_id, last_id)) = pending.ids else { return Ok(()) };
    let segment = new_segment(db, first_id, last_id, pending.chunks)?;
    let mut terms: Vec<(String, Vec<(i64, u32)>)> = std::mem::take(&mut pending.terms).into_iter().collect();
    terms.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let mut insert = db.prepare_cached("INSERT INTO chunk_postings (segment, term, list) VALUES (?1, ?2, ?3)")?;
    let mut bytes = Vec::new();
    for (term, list) in &terms {
        bytes.clear();
        encode(list, &mut bytes);
        insert.execute(params![segment, term, bytes])?;
    }
    pending.clear();
    settle(db, merges)
}

/// Records a chunk as removed: its postings are dropped by a later merge.
pub(super) fn forget(db: &Connection, id: i64) -> anyhow::Result<()> {
    db.prepare_cached("INSERT OR IGNORE INTO dead_chunks (id) VALUES (?1)")?.execute([id])?;
    Ok(())
}

/// A term's lists, one row a segment that holds it, in segment order. The
/// `CROSS JOIN` keeps the segments the outer loop (SQLite otherwise may scan
/// every posting for the term): a few key lookups, whatever the index's size.
/// Only segments reaching past `?2` are read.
const READ: &str = "SELECT p.list FROM postings_segments s CROSS JOIN chunk_postings p
                    ON p.segment = s.id AND p.term = ?1 WHERE s.last_id > ?2 ORDER BY s.first_id";

/// How often `term` occurs in each chunk that holds it, by chunk id
/// ascending. May name chunks removed since (see the module header). As ids
/// and counts, the plain form the tests check the held one (`List`) against.
#[cfg(test)]
pub(super) fn read(db: &Connection, term: &str) -> anyhow::Result<Vec<(i64, u32)>> {
    read_after(db, term, i64::MIN)
}

/// `read`, of the chunks after `after` only: what a list read when `after`
/// was the newest chunk lacks (a later commit's chunks all come after it).
#[cfg(test)]
pub(super) fn read_after(db: &Connection, term: &str, after: i64) -> anyhow::Result<Vec<(i64, u32)>> {
    let (lists, ends) = gather(db, term, after)?;
    let mut out = Vec::with_capacity(postings_in(&lists));
    decode_segments(&lists, &ends, &mut out, |id, n| Some((id, n)))?;
    drop_through(&mut out, after);
    Ok(out)
}

/// How often `term` occurs in each chunk after `after` that holds it, as
/// memory holds a list (`List`): each id as its distance from the list's
/// lowest, decoded straight into that form. What a list read when `after`
/// was the newest chunk lacks (a later commit's chunks all come after it);
/// it may name chunks removed since (see the module header).
pub(super) fn read_list_after(db: &Connection, term: &str, after: i64) -> anyhow::Result<List> {
    let (lists, ends) = gather(db, term, after)?;
    // Each segment's list opens with its lowest id (its distance from 0).
    let mut base = i64::MAX;
    let mut start = 0;
    for &end in &ends {
        if start < end {
            let first = varint(&lists[start..end], &mut 0).ok_or_else(damaged)?;
            base = base.min(i64::try_from(first).map_err(|_| damaged())?);
        }
        start = end;
    }
    if base == i64::MAX {
        return Ok(List::default());
    }
    let mut out = Vec::with_capacity(postings_in(&lists));
    let narrow = |id: i64, n: u32| Some((u32::try_from(id - base).ok()?, n));
    let mut list = if decode_segments(&lists, &ends, &mut out, narrow)? {
        List { runs: vec![Run { base, postings: out }] }
    } else {
        // Ids 2^32 or more apart: the list is held as several runs.
        let mut wide = Vec::with_capacity(out.capacity());
        decode_segments(&lists, &ends, &mut wide, |id, n| Some((id, n)))?;
        List::from_ids(wide)
    };
    // A merged segment reaching past `after` holds older chunks too.
    list.drop_through(after);
    Ok(list)
}

/// Drops the postings of `list` (ids ascending) up to `after`: a merged
/// segment reaching past `after` holds older chunks too.
#[cfg(test)]
fn drop_through(list: &mut Vec<(i64, u32)>, after: i64) {
    if after > i64::MIN {
        let first_new = list.partition_point(|(id, _)| *id <= after);
        list.drain(..first_new);
    }
}

/// The newest chunk any segment holds (0: none): every posting of a chunk
/// up to it is in the segments, and a chunk added later comes after it.
pub(super) fn newest(db: &Connection) -> anyhow::Result<i64> {
    Ok(db.prepare_cached("SELECT coalesce(max(last_id), 0) FROM postings_segments")?.query_row([], |r| r.get(0))?)
}

/// The lists of `term` in the segments reaching past `after`, in segment
/// order: their bytes one after the other, and where each ends. They are
/// gathered first so the postings can be counted and given room once:
/// grown by doubling, a common word's list was copied and its new pages
/// faulted in several times over.
fn gather(db: &Connection, term: &str, after: i64) -> anyhow::Result<(Vec<u8>, Vec<usize>)> {
    let mut stmt = db.prepare_cached(READ)?;
    let mut rows = stmt.query(params![term, after])?;
    let mut lists = Vec::new();
    let mut ends = Vec::new();
    while let Some(row) = rows.next()? {
        lists.extend_from_slice(row.get_ref(0)?.as_blob()?);
        ends.push(lists.len());
    }
    Ok((lists, ends))
}

/// Decodes the segments `gather` found onto `out`, in id order, each
/// posting as `make` puts it; `false` (and `out` unfinished) as soon as
/// `make` refuses one.
fn decode_segments<P: Posting>(
    lists: &[u8],
    ends: &[usize],
    out: &mut Vec<P>,
    make: impl Fn(i64, u32) -> Option<P> + Copy,
) -> anyhow::Result<bool> {
    let mut room = MergeRoom::default();
    let mut start = 0;
    for &end in ends {
        if !add_segment(&lists[start..end], out, &mut room, make)? {
            return Ok(false);
        }
        start = end;
    }
    Ok(true)
}

/// A posting in memory: an id, or its distance from its list's base, and a count.
trait Posting: Copy {
    /// What orders postings (the distance, in a list of one base).
    fn key(&self) -> i64;
}

impl Posting for (i64, u32) {
    #[inline]
    fn key(&self) -> i64 {
        self.0
    }
}

impl Posting for (u32, u32) {
    #[inline]
    fn key(&self) -> i64 {
        i64::from(self.0)
    }
}

/// One term's postings as memory holds them (the postings cache, a search):
/// each chunk or row id as its distance from its run's base, 8 bytes a
/// posting. Held as ids and counts, 16 bytes, the lists a question read
/// for the first time were most of the new memory it touched, and each
/// fresh page cost a page fault (bench/README.md). A list's ids are one run
/// unless they lie 2^32 or more apart, which ids given one by one do not
/// reach in any index built here; such a list is cut into runs all the same.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct List {
    runs: Vec<Run>,
}

/// Postings whose ids are `base` plus their first field, in id order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Run {
    pub(super) base: i64,
    pub(super) postings: Vec<(u32, u32)>,
}

impl List {
    /// The list of `postings` (ids ascending).
    pub(super) fn from_ids(postings: Vec<(i64, u32)>) -> List {
        let mut list = List::default();
        list.extend(postings);
        list
    }

    /// Adds `postings`, whose ids come after every id held, in order.
    pub(super) fn extend(&mut self, postings: impl IntoIterator<Item = (i64, u32)>) {
        for (id, n) in postings {
            match self.runs.last_mut() {
                Some(run) if (run.base..=run.base + i64::from(u32::MAX)).contains(&id) => {
                    run.postings.push(((id - run.base) as u32, n));
                }
                _ => self.runs.push(Run { base: id, postings: vec![(0, n)] }),
            }
        }
    }

    /// Adds the postings of `later`, whose ids all come after this list's.
    pub(super) fn append(&mut self, later: List) {
        if self.runs.is_empty() {
            *self = later;
            return;
        }
        for run in later.runs {
            let Some(last) = self.runs.last_mut() else { break };
            match u32::try_from(run.base - last.base) {
                Ok(shift) if run.postings.last().is_some_and(|p| p.0.checked_add(shift).is_some()) => {
                    last.postings.extend(run.postings.iter().map(|&(at, n)| (at + shift, n)));
                }
                _ => self.runs.push(run),
            }
        }
    }

    /// Drops the postings of ids up to `after`.
    pub(super) fn drop_through(&mut self, after: i64) {
        for run in &mut self.runs {
            let first_new = run.postings.partition_point(|p| run.base + i64::from(p.0) <= after);
            run.postings.drain(..first_new);
        }
        self.runs.retain(|run| !run.postings.is_empty());
    }

    /// Keeps the postings of ids up to `newest` only.
    pub(super) fn keep_through(&mut self, newest: i64) {
        for run in &mut self.runs {
            let kept = run.postings.partition_point(|p| run.base + i64::from(p.0) <= newest);
            run.postings.truncate(kept);
        }
        self.runs.retain(|run| !run.postings.is_empty());
    }

    pub(super) fn len(&self) -> usize {
        self.runs.iter().map(|run| run.postings.len()).sum()
    }

    pub(super) fn runs(&self) -> &[Run] {
        &self.runs
    }

    /// The postings as ids and counts, in id order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (i64, u32)> + '_ {
        self.runs.iter().flat_map(|run| run.postings.iter().map(|&(at, n)| (run.base + i64::from(at), n)))
    }
}

/// Room `add_segment` reuses from one segment to the next.
struct MergeRoom<P> {
    run: Vec<P>,
    tail: Vec<P>,
}

impl<P> Default for MergeRoom<P> {
    fn default() -> Self {
        MergeRoom { run: Vec::new(), tail: Vec::new() }
    }
}

/// Decodes one segment's list (`bytes`, as `encode` wrote it) onto `out`,
/// each posting as `make` puts it, and `out` stays in id order: a segment
/// whose id range reaches into those before (see the module header) is
/// merged in (`merge_run`). Segments are added in order of their first ids,
/// by `read` and by a merge alike. `false` when `make` refused a posting.
fn add_segment<P: Posting>(
    bytes: &[u8],
    out: &mut Vec<P>,
    room: &mut MergeRoom<P>,
    make: impl Fn(i64, u32) -> Option<P>,
) -> anyhow::Result<bool> {
    let from = out.len();
    if !decode(bytes, out, make)? {
        return Ok(false);
    }
    if from > 0 && from < out.len() && out[from].key() <= out[from - 1].key() {
        room.run.clear();
        room.run.extend_from_slice(&out[from..]);
        out.truncate(from);
        merge_run(out, &room.run, &mut room.tail);
    }
    Ok(true)
}

/// Adds the sorted `run` to the sorted `out`, which stays sorted: only the
/// part of `out` from the run's first id on is merged with it (`tail` is
/// room for that part), the rest of `out` is left where it is. Segments'
/// ranges overlap by a little at their ends: with the whole list sorted
/// instead (a stable sort, which merges its runs), reading the 40 benchmark
/// questions' lists at a million passages took twice as long. An id in
/// both (which a segment never shares) is kept once, from `out`.
fn merge_run<P: Posting>(out: &mut Vec<P>, run: &[P], tail: &mut Vec<P>) {
    let Some(first) = run.first() else { return };
    let from = out.partition_point(|p| p.key() < first.key());
    tail.clear();
    tail.extend_from_slice(&out[from..]);
    out.truncate(from);
    let (mut i, mut j) = (0, 0);
    while i < tail.len() && j < run.len() {
        match tail[i].key().cmp(&run[j].key()) {
            std::cmp::Ordering::Less => {
                out.push(tail[i]);
                i += 1;
            }
            std::cmp::Ordering::Greater => {
                out.push(run[j]);
                j += 1;
            }
            std::cmp::Ordering::Equal => {
                out.push(tail[i]);
                i += 1;
                j += 1;
            }
        }
    }
    out.extend_from_slice(&tail[i..]);
    out.extend_from_slice(&run[j..]);
}

/// The level of a segment of `chunks` chunks.
fn level_of(chunks: i64) -> i64 {
    let (mut level, mut most) = (0, LEVEL0_CHUNKS);
    while chunks > most {
        most = most.saturating_mul(FANOUT as i64);
        level += 1;
    }
    level
}

fn new_segment(db: &Connection, first_id: i64, last_id: i64, chunks: i64) -> anyhow::Result<i64> {
    db.prepare_cached("INSERT INTO postings_segments (level, first_id, last_id, chunks) VALUES (?1, ?2, ?3, ?4)")?
        .execute(params![level_of(chunks), first_id, last_id, chunks])?;
    Ok(db.last_insert_rowid())
}

/// Merges while a level holds `FANOUT` segments; then, when removed chunks
/// are many and half of what was written, every segment into one; each as
/// far as `merges` allows.
fn settle(db: &Connection, merges: Merges) -> anyhow::Result<()> {
    // Levels up to this one wait (`Merges::Overdue`).
    let mut waiting = -1;
    loop {
        let crowded: Option<i64> = db
            .prepare_cached(
                "SELECT level FROM postings_segments WHERE level > ?2
                 GROUP BY level HAVING count(*) >= ?1 ORDER BY level LIMIT 1",
            )?
            .query_row([FANOUT as i64, waiting], |r| r.get(0))
            .optional()?;
        let Some(level) = crowded else { break };
        let segments = segments(db, Some(level))?;
        if merges == Merges::Overdue && segments.len() < OVERDUE {
            waiting = level;
            continue;
        }
        let started = std::time::Instant::now();
        merge(db, &segments, false)?;
        let chunks: i64 = segments.iter().map(|s| s.chunks).sum();
        tracing::debug!(level, segments = segments.len(), chunks, took = ?started.elapsed(), "postings merged");
    }
    if merges != Merges::All {
        return Ok(());
    }
    let written: i64 =
        db.prepare_cached("SELECT coalesce(sum(chunks), 0) FROM postings_segments")?.query_row([], |r| r.get(0))?;
    let dead: i64 = db.prepare_cached("SELECT count(*) FROM dead_chunks")?.query_row([], |r| r.get(0))?;
    if dead >= DEAD_BEFORE_PURGE && dead * 2 > written {
        let all = segments(db, None)?;
        merge(db, &all, true)?;
    }
    Ok(())
}

/// The segments of `level` (all of them with `None`), in id order.
fn segments(db: &Connection, level: Option<i64>) -> anyhow::Result<Vec<Segment>> {
    let mut stmt = db.prepare_cached(
        "SELECT id, first_id, last_id, chunks FROM postings_segments WHERE ?1 IS NULL OR level = ?1 ORDER BY first_id",
    )?;
    let rows = stmt.query_map([level], |r| {
        Ok(Segment { id: r.get(0)?, first_id: r.get(1)?, last_id: r.get(2)?, chunks: r.get(3)? })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Merges `inputs` into one new segment, term by term (each input is read
/// in term order, so memory holds one term's lists at a time), leaving out
/// removed chunks. With `all` (every segment is an input) the removed
/// chunks are forgotten too: no segment holds them any more.
fn merge(db: &Connection, inputs: &[Segment], all: bool) -> anyhow::Result<()> {
    if inputs.is_empty() {
        return Ok(());
    }
    let mut dead: HashSet<i64> = HashSet::new();
    {
        let mut stmt = db.prepare_cached("SELECT id FROM dead_chunks WHERE id BETWEEN ?1 AND ?2")?;
        for input in inputs {
            for id in stmt.query_map([input.first_id, input.last_id], |r| r.get::<_, i64>(0))? {
                dead.insert(id?);
            }
        }
    }
    let first_id = inputs.iter().map(|s| s.first_id).min().unwrap_or(0);
    let last_id = inputs.iter().map(|s| s.last_id).max().unwrap_or(0);
    let chunks = inputs.iter().map(|s| s.chunks).sum::<i64>().saturating_sub(dead.len() as i64).max(0);
    let segment = new_segment(db, first_id, last_id, chunks)?;

    // One cursor per input, each in term order; the inputs stay in id order.
    let mut statements = Vec::with_capacity(inputs.len());
    for _ in inputs {
        statements.push(db.prepare("SELECT term, list FROM chunk_postings WHERE segment = ?1 ORDER BY term")?);
    }
    let mut cursors = Vec::with_capacity(inputs.len());
    for (stmt, input) in statements.iter_mut().zip(inputs) {
        cursors.push(stmt.query([input.id])?);
    }
    let mut heads: Vec<Option<(String, Vec<u8>)>> = Vec::with_capacity(cursors.len());
    for cursor in &mut cursors {
        heads.push(next_row(cursor)?);
    }
    let mut insert = db.prepare_cached("INSERT INTO chunk_postings (segment, term, list) VALUES (?1, ?2, ?3)")?;
    let (mut list, mut bytes, mut room) = (Vec::new(), Vec::new(), MergeRoom::default());
    while let Some(term) = heads.iter().flatten().map(|(t, _)| t).min().cloned() {
        list.clear();
        for (head, cursor) in heads.iter_mut().zip(cursors.iter_mut()) {
            if head.as_ref().is_some_and(|(t, _)| *t == term) {
                if let Some((_, blob)) = head.take() {
                    add_segment(&blob, &mut list, &mut room, |id, n| Some((id, n)))?;
                }
                *head = next_row(cursor)?;
            }
        }
        list.retain(|(id, _)| !dead.contains(id));
        if !list.is_empty() {
            bytes.clear();
            encode(&list, &mut bytes);
            insert.execute(params![segment, term, bytes])?;
        }
    }
    drop(cursors);
    let mut drop_rows = db.prepare_cached("DELETE FROM chunk_postings WHERE segment = ?1")?;
    let mut drop_segment = db.prepare_cached("DELETE FROM postings_segments WHERE id = ?1")?;
    for input in inputs {
        drop_rows.execute([input.id])?;
        drop_segment.execute([input.id])?;
    }
    if all {
        db.execute("DELETE FROM dead_chunks", [])?;
    }
    Ok(())
}

fn next_row(rows: &mut rusqlite::Rows<'_>) -> anyhow::Result<Option<(String, Vec<u8>)>> {
    Ok(match rows.next()? {
        Some(row) => Some((row.get(0)?, row.get(1)?)),
        None => None,
    })
}

/// A list (ids ascending) as varints: each id's distance from the one before (the first's from 0), then its count.
fn encode(list: &[(i64, u32)], out: &mut Vec<u8>) {
    let mut buf = [0u8; 10];
    let mut last = 0i64;
    for &(id, n) in list {
        let gap = (id - last) as u64;
        last = id;
        let len = gap.encode_var(&mut buf);
        out.extend_from_slice(&buf[..len]);
        let len = n.encode_var(&mut buf);
        out.extend_from_slice(&buf[..len]);
    }
}

/// How many postings lists `encode` wrote hold: each posting is two varints,
/// and every varint ends with the one byte of it below 0x80.
fn postings_in(lists: &[u8]) -> usize {
    lists.iter().filter(|b| **b < 0x80).count() / 2
}

/// Appends the list `encode` wrote to `out`, each posting as `make` puts
/// it; `false` as soon as `make` refuses one.
fn decode<P>(bytes: &[u8], out: &mut Vec<P>, make: impl Fn(i64, u32) -> Option<P>) -> anyhow::Result<bool> {
    let mut last = 0i64;
    let mut at = 0;
    while at < bytes.len() {
        let gap = varint(bytes, &mut at).ok_or_else(damaged)?;
        let n = varint(bytes, &mut at).and_then(|n| u32::try_from(n).ok()).ok_or_else(damaged)?;
        last += gap as i64;
        let Some(posting) = make(last, n) else { return Ok(false) };
        out.push(posting);
    }
    Ok(true)
}

fn damaged() -> anyhow::Error {
    anyhow::anyhow!("a postings list in the index is damaged")
}

/// The varint at `bytes[*at..]`, moving `at` past it. Most are one byte (a
/// common word's gaps, nearly every count): those are read here, the rest
/// by the crate. Through the crate alone, reading the 40 benchmark
/// questions' lists at a million passages took about a tenth longer.
#[inline]
fn varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let first = *bytes.get(*at)?;
    if first < 0x80 {
        *at += 1;
        return Some(u64::from(first));
    }
    let (value, used) = u64::decode_var(&bytes[*at..])?;
    *at += used;
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn db() -> Connection {
        let db = Connection::open_in_memory().unwrap();
        db.execute_batch(SCHEMA).unwrap();
        db
    }

    /// The words of a text as they are, counted.
    fn words(text: &str) -> CountedTerms {
        let mut counted = CountedTerms::default();
        for word in text.split_whitespace() {
            *counted.counts.entry(word.to_owned()).or_default() += 1;
            counted.total += 1;
        }
        counted
    }

    #[test]
    fn lists_round_trip_through_their_encoding() {
        let list = vec![(1, 1), (2, 300), (1_000_000, 2), (i64::from(u32::MAX) * 4, 1)];
        let mut bytes = Vec::new();
        encode(&list, &mut bytes);
        let mut back = Vec::new();
        assert!(decode(&bytes, &mut back, |id, n| Some((id, n))).unwrap());
        assert_eq!(back, list);
        assert_eq!(postings_in(&bytes), list.len(), "counted without decoding");
        assert!(decode(&[0x80], &mut back, |id, n| Some((id, n))).is_err(), "a varint cut short is refused");
        let mut narrow: Vec<(u32, u32)> = Vec::new();
        let whole = decode(&bytes, &mut narrow, |id, n| Some((u32::try_from(id - 1).ok()?, n))).unwrap();
        assert!(!whole, "the last id lies 2^32 or more past the first: refused");
    }

    /// A list held as distances from a base gives back the ids it was made
    /// of, whatever their spread, and so does one grown, cut or added to.
    #[test]
    fn held_lists_give_back_their_ids() {
        let far = i64::from(u32::MAX);
        let cases: [Vec<(i64, u32)>; 4] = [
            vec![],
            vec![(7, 1), (8, 2), (1_000, 3)],
            vec![(1, 1), (far, 2), (far + 1, 3), (3 * far, 1), (3 * far + 5, 9)],
            vec![(-5, 1), (0, 1), (far - 6, 4)],
        ];
        for ids in cases {
            let list = List::from_ids(ids.clone());
            assert_eq!(list.iter().collect::<Vec<_>>(), ids);
            assert_eq!(list.len(), ids.len());
            assert!(list.runs().iter().all(|run| !run.postings.is_empty()));
            for cut in ids.iter().map(|p| p.0).chain([i64::MIN, i64::MAX, 0, far]) {
                let mut through = list.clone();
                through.keep_through(cut);
                let want: Vec<_> = ids.iter().copied().filter(|p| p.0 <= cut).collect();
                assert_eq!(through.iter().collect::<Vec<_>>(), want, "kept through {cut}");
                let mut after = list.clone();
                after.drop_through(cut);
                let rest: Vec<_> = ids.iter().copied().filter(|p| p.0 > cut).collect();
                assert_eq!(after.iter().collect::<Vec<_>>(), rest, "dropped through {cut}");
                // What came after the cut, added to what was kept: the whole list again.
                through.append(after);
                assert_eq!(through.iter().collect::<Vec<_>>(), ids, "joined at {cut}");
            }
        }
        let one_run = List::from_ids(vec![(10, 1), (far + 9, 1)]);
        assert_eq!(one_run.runs().len(), 1, "ids less than 2^32 apart share a run");
        let mut joined = one_run.clone();
        joined.append(List::from_ids(vec![(far + 10, 1)]));
        assert_eq!(joined.runs().len(), 1, "2^32 - 1 past the base is the run's last");
        joined.append(List::from_ids(vec![(far + 11, 1)]));
        assert_eq!(joined.runs().len(), 2, "an id 2^32 past the base starts a run");
    }

    /// Lists read straight into memory's form are the lists read as ids,
    /// from every point on, over segments that merged around others.
    #[test]
    fn lists_read_as_held_are_those_read_as_ids() {
        let db = db();
        let mut pending = Pending::default();
        let mut id = 0;
        for commit in 0..30 {
            for _ in 0..(1 + commit * 37 % 300) {
                id += 1;
                pending.add(id, &words(if id % 4 == 0 { "alpha beta" } else { "alpha" }));
            }
            flush(&db, &mut pending, Merges::All).unwrap();
        }
        // A chunk far past the others: its list cannot be one run.
        let far = id + i64::from(u32::MAX) + 2;
        pending.add(far, &words("alpha gamma"));
        flush(&db, &mut pending, Merges::All).unwrap();
        for term in ["alpha", "beta", "gamma", "missing"] {
            for after in [i64::MIN, 0, 1, id / 2, id, far - 1, far] {
                let held = read_list_after(&db, term, after).unwrap();
                assert_eq!(
                    held.iter().collect::<Vec<_>>(),
                    read_after(&db, term, after).unwrap(),
                    "{term} after {after}"
                );
            }
        }
        assert_eq!(read_list_after(&db, "alpha", i64::MIN).unwrap().runs().len(), 2);
        assert_eq!(read_list_after(&db, "beta", i64::MIN).unwrap().runs().len(), 1);
    }

    /// A run merged into a list touches only the part of it from the
    /// run's first id on, and the list comes out as sorting both would make it.
    #[test]
    fn runs_merge_into_a_sorted_list() {
        let cases: [(&[i64], &[i64]); 5] = [
            (&[1, 5, 9], &[10, 11]),
            (&[1, 5, 9, 20], &[6, 7, 30]),
            (&[1, 5, 9], &[2, 3, 4]),
            (&[4, 8], &[1, 2]),
            (&[1, 5, 9], &[5, 9, 12]),
        ];
        let mut tail = Vec::new();
        for (list, run) in cases {
            let mut out: Vec<(i64, u32)> = list.iter().map(|id| (*id, 1)).collect();
            let run: Vec<(i64, u32)> = run.iter().map(|id| (*id, 2)).collect();
            merge_run(&mut out, &run, &mut tail);
            // What sorting both by id, the list's first, would make.
            let mut want: Vec<(i64, u32)> = list.iter().map(|id| (*id, 1)).chain(run.iter().copied()).collect();
            want.sort_by_key(|p| p.0);
            want.dedup_by_key(|p| p.0);
            assert_eq!(out, want, "{list:?} and {run:?}");
        }
    }

    #[test]
    fn levels_grow_by_the_fanout() {
        assert_eq!([1, 256, 257, 2048, 2049, 16384, 16385].map(level_of), [0, 0, 1, 1, 2, 2, 3]);
    }

    /// Many small commits, merged as they go, read back as one list per term
    /// in id order; removed chunks leave every list once all is merged.
    #[test]
    fn segments_merge_and_read_back_what_was_written() {
        let db = db();
        let mut pending = Pending::default();
        let mut expected: HashMap<&str, Vec<(i64, u32)>> = HashMap::new();
        let mut id = 0;
        for commit in 0..40 {
            for _ in 0..(1 + commit % 7) {
                id += 1;
                let text = if id % 3 == 0 { "retry upload retry" } else { "upload once" };
                pending.add(id, &words(text));
                expected.entry("upload").or_default().push((id, 1));
                if id % 3 == 0 {
                    expected.entry("retry").or_default().push((id, 2));
                } else {
                    expected.entry("once").or_default().push((id, 1));
                }
            }
            flush(&db, &mut pending, Merges::All).unwrap();
        }
        let count: i64 = db.query_row("SELECT count(*) FROM postings_segments", [], |r| r.get(0)).unwrap();
        assert!(count < 10, "{count} segments after 40 commits: merges keep them few");
        for (term, list) in &expected {
            assert_eq!(&read(&db, term).unwrap(), list, "{term}");
        }
        assert!(read(&db, "missing").unwrap().is_empty());

        // Every other chunk removed: read may still name them until a merge of everything.
        let removed: Vec<i64> = (1..=id).filter(|i| i % 2 == 0).collect();
        for i in &removed {
            forget(&db, *i).unwrap();
        }
        let all = segments(&db, None).unwrap();
        merge(&db, &all, true).unwrap();
        let live = |list: &Vec<(i64, u32)>| list.iter().filter(|p| p.0 % 2 == 1).copied().collect::<Vec<_>>();
        for (term, list) in &expected {
            assert_eq!(read(&db, term).unwrap(), live(list), "{term}");
        }
        let dead: i64 = db.query_row("SELECT count(*) FROM dead_chunks", [], |r| r.get(0)).unwrap();
        assert_eq!(dead, 0);
    }

    /// Commits that make only overdue merges leave a full level as it is
    /// (reads are the same) until it is overdue; the next commit that makes
    /// every merge merges it.
    #[test]
    fn merges_wait_for_a_commit_that_makes_them() {
        let db = db();
        let mut pending = Pending::default();
        let mut id = 0;
        let mut expected = Vec::new();
        let mut commit = |chunks: i64, merges: Merges, pending: &mut Pending| {
            for _ in 0..chunks {
                id += 1;
                pending.add(id, &words("alpha beta"));
                expected.push((id, 1));
            }
            flush(&db, pending, merges).unwrap();
            (expected.clone(), segments(&db, Some(0)).unwrap().len())
        };
        let mut level0 = 0;
        for _ in 0..FANOUT + 3 {
            (_, level0) = commit(3, Merges::Overdue, &mut pending);
        }
        assert_eq!(level0, FANOUT + 3, "the level's merge did not wait");
        let (all, waiting) = commit(3, Merges::Overdue, &mut pending);
        assert_eq!(waiting, FANOUT + 4);
        assert_eq!(read(&db, "alpha").unwrap(), all, "reads are the same with merges waiting");
        // A commit that makes every merge takes the level in.
        let (all, merged) = commit(1, Merges::All, &mut pending);
        assert_eq!(merged, 1, "the waiting level was not merged");
        assert_eq!(read(&db, "beta").unwrap(), all);
        // Overdue: a level of OVERDUE segments is merged even by a commit of overdue merges only.
        for _ in 0..OVERDUE - 2 {
            (_, level0) = commit(2, Merges::Overdue, &mut pending);
        }
        assert_eq!(level0, OVERDUE - 1);
        let (all, overdue) = commit(2, Merges::Overdue, &mut pending);
        assert_eq!(overdue, 1, "an overdue level was left");
        assert_eq!(read(&db, "alpha").unwrap(), all);
    }

    /// A merge of like-sized segments that spans a smaller one made between
    /// them still reads in id order.
    #[test]
    fn interleaved_segments_read_in_id_order() {
        let db = db();
        let mut pending = Pending::default();
        let mut id = 0;
        let mut commit = |n: i64, pending: &mut Pending| {
            for _ in 0..n {
                id += 1;
                pending.add(id, &words("alpha"));
            }
            flush(&db, pending, Merges::All).unwrap();
        };
        // Big segments but one, a small one, then the last big one: the big ones merge around the small one.
        for _ in 0..FANOUT - 1 {
            commit(300, &mut pending);
        }
        commit(2, &mut pending);
        commit(300, &mut pending);
        let count: i64 = db.query_row("SELECT count(*) FROM postings_segments", [], |r| r.get(0)).unwrap();
        assert_eq!(count, 2, "the big ones merged, the small one apart");
        let list = read(&db, "alpha").unwrap();
        let all = 300 * FANOUT as i64 + 2;
        assert_eq!(list.len() as i64, all);
        assert!(list.windows(2).all(|w| w[0].0 < w[1].0));
        assert_eq!(list.last().unwrap().0, all);
    }

    /// A read looks a term up in each segment by key; it never scans the
    /// postings (which cost a query 300 ms at a million passages).
    #[test]
    fn a_read_looks_up_each_segment_by_key() {
        let db = db();
        let plan: Vec<String> = db
            .prepare(&format!("EXPLAIN QUERY PLAN {READ}"))
            .unwrap()
            .query_map(params!["retry", 0], |r| r.get::<_, String>(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(plan.iter().any(|step| step.starts_with("SCAN s")), "{plan:?}");
        assert!(plan.iter().any(|step| step.contains("SEARCH p USING PRIMARY KEY (segment=? AND term=?)")), "{plan:?}");
        assert!(!plan.iter().any(|step| step.starts_with("SCAN p")), "{plan:?}");
    }

    /// Removed chunks past the threshold, and half of all written, prompt a merge of everything.
    #[test]
    fn many_removed_chunks_are_purged() {
        let db = db();
        let mut pending = Pending::default();
        for id in 1..=3000 {
            pending.add(id, &words("gamma delta"));
        }
        flush(&db, &mut pending, Merges::All).unwrap();
        for id in 1..=2000 {
            forget(&db, id).unwrap();
        }
        pending.add(3001, &words("gamma"));
        flush(&db, &mut pending, Merges::All).unwrap();
        let dead: i64 = db.query_row("SELECT count(*) FROM dead_chunks", [], |r| r.get(0)).unwrap();
        assert_eq!(dead, 0, "the purge forgot the removed chunks");
        assert_eq!(read(&db, "gamma").unwrap().len(), 1001);
        assert_eq!(read(&db, "delta").unwrap().len(), 1000);
    }
}
