//! Context hygiene: every result gets an id, is stored in full, and is
//! turned into what the model sees (a stub, a capped text, a diff).
//!
//! `Hygiene` is one session's state: the id counter, the dedupe table (the
//! results the request being built carries), the reads the next compaction
//! table covers, and the store of full texts. It acts only when a result is
//! inserted and never rewrites an earlier one. It does not run tools.

pub mod format;
pub mod store;

use crate::access::ToolError;
use crate::paths::VPath;
use crate::tools::{Change, FileChange, Outcome, ReadOutcome, Sha};
use format::*;
use std::collections::{BTreeMap, HashMap};
pub use store::{
    ChangeEntry, ChangeKind, ChangeRecord, MemoryStore, ResultEntry, ResultMeta, ResultStore, SqliteStore, Texts,
};

/// Which results a host's next request carries, deciding what a stub may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HostKind {
    /// Every request resends every earlier result (a CLI agent): the table
    /// lasts until a compaction or a rewind.
    Resend,
    /// A new request carries no earlier results (a chat's next reply): the
    /// table starts empty at each request.
    Fresh,
}

/// A full read in the dedupe table or the compaction history.
#[derive(Debug, Clone)]
struct ReadRecord {
    id: u64,
    given: String,
    real: VPath,
    first: usize,
    last: usize,
    total: usize,
    sha: Sha,
}

/// A listing or search in the dedupe table: its id and the hash of its text
/// (the text itself is in the store).
#[derive(Debug, Clone)]
struct SearchRecord {
    id: u64,
    body_sha: Sha,
}

/// What the model is shown of one result: its id (`#0001`), the text
/// starting with the bracket, and whether it is an error. The engine adds the
/// facts editors render.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shown {
    pub id: String,
    pub text: String,
    pub is_error: bool,
}

/// A result shaped for the model, with what is stored and listed of it.
struct Shaped {
    id: u64,
    answer: Shown,
    /// The path the result is about, kept with it for editors' lists.
    path: Option<String>,
    /// The full result, what recall shows.
    stored: String,
    stub: bool,
    capped: bool,
}

/// The files an outcome changed, as kept for editors' change lists.
fn change_records(outcome: &Outcome) -> Vec<ChangeRecord> {
    let record = |change: &FileChange| {
        let (kind, from) = match &change.change {
            Change::Created { .. } => (ChangeKind::Created, None),
            Change::Modified { .. } => (ChangeKind::Modified, None),
            Change::Deleted => (ChangeKind::Deleted, None),
            Change::Moved { from, .. } => (ChangeKind::Moved, Some(from.clone())),
        };
        ChangeRecord {
            path: change.path.to_string(),
            kind,
            from,
            before: change.texts.before.clone(),
            after: change.texts.after.clone(),
        }
    };
    match outcome {
        Outcome::Changed(change) => vec![record(change)],
        Outcome::Patch(changes) => changes.iter().map(record).collect(),
        Outcome::Moved { from, to, .. } => vec![ChangeRecord {
            path: to.to_string(),
            kind: ChangeKind::Moved,
            from: Some(from.to_string()),
            before: None,
            after: None,
        }],
        Outcome::Read(_) | Outcome::Text { .. } => Vec::new(),
    }
}

/// One session's hygiene state.
pub struct Hygiene {
    host: HostKind,
    next_id: u64,
    store: Box<dyn ResultStore>,
    /// Full reads in the dedupe table, oldest first.
    table_reads: Vec<ReadRecord>,
    /// Listings and searches in the dedupe table, by canonical call: each result
    /// of that call still in the table, oldest first.
    table_searches: HashMap<String, Vec<SearchRecord>>,
    /// Full reads since the last compaction, in turns still in the history.
    history: Vec<ReadRecord>,
}

/// The most full reads the dedupe table keeps (the oldest go first).
const MAX_TABLE_READS: usize = 4096;
/// The most listings and searches the dedupe table keeps.
const MAX_TABLE_SEARCHES: usize = 1024;
/// The most reads the compaction history keeps (its table shows at most 50 rows).
const MAX_HISTORY: usize = 4096;

impl Hygiene {
    pub fn new(host: HostKind, store: Box<dyn ResultStore>) -> Hygiene {
        let next_id = 1;
        Hygiene { host, next_id, store, table_reads: Vec::new(), table_searches: HashMap::new(), history: Vec::new() }
    }

    pub fn host(&self) -> HostKind {
        self.host
    }

    fn take_id(&mut self) -> (u64, String) {
        let id = match self.store.next_id() {
            Ok(id) => id,
            Err(e) => {
                // The store cannot hand out ids: go on past the last one given,
                // in memory. Results of this session may then not be recallable.
                tracing::error!(error = %e, "the result store gave no id");
                self.next_id
            }
        };
        self.next_id = id + 1;
        (id, id_text(id))
    }

    fn keep(&mut self, id: u64, meta: &ResultMeta, full: &str) {
        if let Err(e) = self.store.put(id, meta, full) {
            tracing::error!(error = %e, "could not store result {}", id_text(id));
        }
    }

    /// Numbers, stores and shapes one tool result.
    /// `appendix` (nearby instructions) follows the result's text, in what is
    /// shown and what is stored. The result is stored before this returns.
    pub fn answer(
        &mut self,
        tool: &str,
        args: &serde_json::Value,
        result: Result<Outcome, ToolError>,
        appendix: Option<String>,
    ) -> Shown {
        let changes = match &result {
            Ok(outcome) => change_records(outcome),
            Err(_) => Vec::new(),
        };
        let Shaped { id, mut answer, path, mut stored, stub, capped } = self.shape(tool, args, result);
        if let Some(extra) = appendix {
            answer.text.push_str(&extra);
            stored.push_str(&extra);
        }
        let meta = ResultMeta {
            tool: tool.to_string(),
            path,
            stub,
            capped,
            is_error: answer.is_error,
            title: answer.text.lines().next().unwrap_or_default().to_string(),
        };
        if !changes.is_empty() {
            if let Err(e) = self.store.put_changes(id, tool, &changes) {
                tracing::error!(error = %e, "could not store the changes of result {}", id_text(id));
            }
        }
        self.keep(id, &meta, &stored);
        answer
    }

    /// The session's results, newest first, for editors to list.
    pub fn results(&self, limit: usize) -> Vec<ResultEntry> {
        self.store.list(limit).unwrap_or_else(|e| {
            tracing::error!(error = %e, "could not list the results");
            Vec::new()
        })
    }

    /// The session's changes, newest first, each with its unified diff.
    pub fn changes(&self, limit: usize) -> Vec<(ChangeEntry, String)> {
        let listed = self.store.changes(limit).unwrap_or_else(|e| {
            tracing::error!(error = %e, "could not list the changes");
            Vec::new()
        });
        listed
            .into_iter()
            .map(|entry| {
                let texts = self.store.change_texts(entry.id, &entry.change.path).ok().flatten();
                let diff = match texts {
                    Some((before, after)) => {
                        crate::text::unified_diff(before.as_deref().unwrap_or(""), after.as_deref().unwrap_or(""))
                    }
                    None => String::new(),
                };
                (entry, diff)
            })
            .collect()
    }

    /// A stored result's full text, without recording anything (for editors).
    pub fn stored(&self, id: &str) -> Option<String> {
        self.store.get(parse_id(id)?).ok().flatten()
    }

    /// The whole text before and after the change result `id` made to `path`.
    pub fn change_texts(&self, id: &str, path: &str) -> Option<Texts> {
        let id = parse_id(id)?;
        self.store.change_texts(id, path).ok().flatten()
    }

    fn shape(&mut self, tool: &str, args: &serde_json::Value, result: Result<Outcome, ToolError>) -> Shaped {
        let (id, id_str) = self.take_id();
        let plain = format!("[{id_str}]");
        let outcome = match result {
            Ok(outcome) => outcome,
            Err(error) => {
                let body = Body::lines(error.to_string());
                let (text, capped) = body.render_capped(&plain, &id_str, true);
                let answer = Shown { id: id_str, text, is_error: true };
                return Shaped { id, answer, path: None, stored: body.stored(), stub: false, capped };
            }
        };
        let path = outcome_path(&outcome);
        let mut stub = false;
        let (stored, (shown, capped)) = match outcome {
            Outcome::Read(read) => {
                let head = read_bracket(&id_str, &read);
                let body = read_body(&read);
                let full = body.render_capped(&head, &id_str, false);
                let earlier = self.stub_for(&read).map(|e| (e.id, e.first, e.last));
                // Only the content hash decides (a file changed and changed back is a stub too).
                let stubbed = earlier.map(|(earlier, first, last)| {
                    let head = stub_bracket(&id_str, &read);
                    Body::inline(read_stub(&id_text(earlier), first, last)).render_capped(&head, &id_str, false)
                });
                match stubbed {
                    Some(short) => {
                        stub = true;
                        (body.stored(), short)
                    }
                    None => {
                        let record = ReadRecord {
                            id,
                            given: read.given.clone(),
                            real: read.real.clone(),
                            first: read.first,
                            last: read.last,
                            total: read.total,
                            sha: read.sha,
                        };
                        self.table_reads.push(record.clone());
                        self.history.push(record);
                        // A session's memory stays flat however many calls it makes:
                        // the oldest entries go first (a later read is then a full one).
                        if self.table_reads.len() > MAX_TABLE_READS {
                            self.table_reads.drain(..self.table_reads.len() - MAX_TABLE_READS);
                        }
                        if self.history.len() > MAX_HISTORY {
                            self.history.drain(..self.history.len() - MAX_HISTORY);
                        }
                        // Reads are not capped: they have their own window.
                        (body.stored(), full)
                    }
                }
            }
            Outcome::Text { body: text, .. } | Outcome::Moved { body: text, .. } => {
                let body = Body::lines(text);
                if crate::tools::spec::find(tool).is_some_and(|t| t.traits.dedupes) {
                    let key = format!("{tool} {}", canonical_json(args));
                    let body_sha = crate::tools::sha256(body.stored().as_bytes());
                    // Any result of the same call still in the table counts, not only the newest
                    // (grep, edit, grep, undo, grep: the third grep is the first's result again).
                    let same = self
                        .table_searches
                        .get(&key)
                        .and_then(|earlier| earlier.iter().rev().find(|e| e.body_sha == body_sha))
                        .map(|e| e.id);
                    match same {
                        Some(earlier) => {
                            let shown = format!("{plain} Same result as {}.", id_text(earlier));
                            let answer = Shown { id: id_str, text: shown, is_error: false };
                            return Shaped { id, answer, path, stored: body.stored(), stub: true, capped: false };
                        }
                        None => {
                            self.table_searches.entry(key).or_default().push(SearchRecord { id, body_sha });
                            self.bound_searches();
                        }
                    }
                }
                (body.stored(), body.render_capped(&plain, &id_str, true))
            }
            Outcome::Changed(change) => {
                let (head, body) = change_parts(Some(&id_str), &change);
                (body.stored(), body.render_capped(&head, &id_str, true))
            }
            Outcome::Patch(changes) => {
                let texts: Vec<String> = changes.iter().map(|c| change_text(None, c)).collect();
                let body = Body::lines(texts.join("\n"));
                (body.stored(), body.render_capped(&plain, &id_str, true))
            }
        };
        let answer = Shown { id: id_str, text: shown, is_error: false };
        Shaped { id, answer, path, stored, stub, capped }
    }

    /// Keeps the dedupe table's listings and searches within their bound, oldest out first.
    fn bound_searches(&mut self) {
        while self.table_searches.values().map(Vec::len).sum::<usize>() > MAX_TABLE_SEARCHES {
            let oldest = self
                .table_searches
                .iter()
                .filter_map(|(key, records)| records.first().map(|r| (r.id, key.clone())))
                .min_by_key(|(id, _)| *id);
            let Some((_, key)) = oldest else { break };
            if let Some(records) = self.table_searches.get_mut(&key) {
                records.remove(0);
                if records.is_empty() {
                    self.table_searches.remove(&key);
                }
            }
        }
    }

    /// The earlier full read in the table that an unchanged re-read lies within.
    fn stub_for(&self, read: &ReadOutcome) -> Option<&ReadRecord> {
        if read.total == 0 || read.last < read.first {
            return None;
        }
        self.table_reads
            .iter()
            .rev()
            .find(|r| r.real == read.real && r.sha == read.sha && r.first <= read.first && read.last <= r.last)
    }

    /// recall: a stored result again, a window of its lines.
    pub fn recall(&mut self, target: &str, offset: Option<u64>, limit: Option<u64>) -> Shown {
        let (id, id_str) = self.take_id();
        let wanted = parse_id(target);
        let stored = wanted.and_then(|n| self.store.get(n).ok().flatten());
        let (text, is_error) = match (wanted, stored) {
            (Some(n), Some(full)) => {
                let limit = match limit {
                    Some(0) | None => RECALL_WINDOW,
                    Some(n) => (n as usize).min(RECALL_WINDOW),
                };
                let (first, last, total, body) = window(&full, offset.unwrap_or(1) as usize, limit);
                if first > total && total > 0 {
                    // As a read past the end of a file: an error that says how long it is.
                    let lines = if total == 1 { "line" } else { "lines" };
                    let text = format!("Offset {first} is past the end of {}, which has {total} {lines}.", id_text(n));
                    let shown = format!("[{id_str}] {text}");
                    let meta = ResultMeta {
                        tool: "recall".into(),
                        is_error: true,
                        title: shown.clone(),
                        ..ResultMeta::default()
                    };
                    self.keep(id, &meta, &text);
                    return Shown { id: id_str, text: shown, is_error: true };
                }
                let text = format!("[{id_str} recall {} lines {first}-{last} of {total}]\n{body}", id_text(n));
                let title = text.lines().next().unwrap_or_default().to_string();
                self.keep(id, &ResultMeta { tool: "recall".into(), title, ..ResultMeta::default() }, &body);
                return Shown { id: id_str, text, is_error: false };
            }
            (Some(n), None) => (format!("No stored result {} in this session.", id_text(n)), true),
            (None, _) => {
                let shown = target.trim().trim_start_matches('#');
                (format!("No stored result #{shown} in this session."), true)
            }
        };
        let shown = format!("[{id_str}] {text}");
        let meta = ResultMeta { tool: "recall".into(), is_error, title: shown.clone(), ..ResultMeta::default() };
        self.keep(id, &meta, &text);
        let text = shown;
        Shown { id: id_str, text, is_error }
    }

    /// A new request is being built. A host that does not carry earlier
    /// results (or a request that does not) starts with an empty table.
    pub fn new_request(&mut self, carries_earlier: bool) {
        if self.host == HostKind::Fresh || !carries_earlier {
            self.table_reads.clear();
            self.table_searches.clear();
        }
    }

    /// Takes every result newer than `id` out of the history and the table
    /// (an undo, a rewind, a regenerated turn). Ids are never reused.
    pub fn rewind(&mut self, id: u64) {
        self.table_reads.retain(|r| r.id <= id);
        for records in self.table_searches.values_mut() {
            records.retain(|s| s.id <= id);
        }
        self.table_searches.retain(|_, records| !records.is_empty());
        self.history.retain(|r| r.id <= id);
    }

    /// Compaction: answers the table of files read since the last one and
    /// empties the dedupe table. Empty text when nothing was read.
    pub fn compact(&mut self) -> String {
        let mut newest: BTreeMap<&VPath, &ReadRecord> = BTreeMap::new();
        for read in &self.history {
            newest.insert(&read.real, read);
        }
        let mut rows: Vec<&ReadRecord> = newest.into_values().collect();
        rows.sort_by_key(|r| r.id);
        let skip = rows.len().saturating_sub(COMPACTION_ROWS);
        let mut text = String::new();
        if !rows.is_empty() {
            text.push_str("## Files read before this summary\n\nRead a file again for its content; recall shows a result by its id.\n\n| Path | Lines | sha | Result |\n|---|---|---|---|\n");
            for r in &rows[skip..] {
                let lines =
                    if r.total == 0 { "empty".to_string() } else { format!("{}-{} of {}", r.first, r.last, r.total) };
                text.push_str(&format!("| {} | {lines} | {} | {} |\n", r.given, short_sha(&r.sha), id_text(r.id)));
            }
        }
        self.history.clear();
        self.table_reads.clear();
        self.table_searches.clear();
        text
    }
}

/// JSON with object keys sorted, for comparing calls.
pub fn canonical_json(value: &serde_json::Value) -> String {
    // serde_json keeps insertion order with `preserve_order`, so write keys in order by hand.
    fn write(value: &serde_json::Value, out: &mut String) {
        match value {
            serde_json::Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                out.push('{');
                for (i, key) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&serde_json::Value::String(key.clone()).to_string());
                    out.push(':');
                    write(&map[key], out);
                }
                out.push('}');
            }
            serde_json::Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(item, out);
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut out = String::new();
    write(value, &mut out);
    out
}

/// The path a result is about, kept with it for editors' lists.
fn outcome_path(outcome: &Outcome) -> Option<String> {
    match outcome {
        Outcome::Read(read) => Some(read.path.to_string()),
        Outcome::Changed(change) => Some(change.path.to_string()),
        Outcome::Patch(changes) => changes.first().map(|c| c.path.to_string()),
        Outcome::Text { path, .. } => path.as_ref().map(|p| p.to_string()),
        Outcome::Moved { to, .. } => Some(to.to_string()),
    }
}
