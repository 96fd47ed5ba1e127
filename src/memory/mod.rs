//! Memory: short records the agent keeps across sessions (the user's preferences, the
//! project's conventions, what was learned), in two scopes — this project's and the user's,
//! which every project shares — kept in SQLite under the data directory.
//!
//! Records, not files: each has an id (`m12`, from one counter that never gives an id twice,
//! even after a removal), a scope and a text of at most [`RECORD_CHARS`] characters; a scope
//! holds at most [`SCOPE_CHARS`]. A change is checked and written in one transaction taken
//! for writing at once, so sessions of several processes never pass a budget together.
//! Search ranks records by words with the index's BM25 and, when the engine's index has an
//! embedder loaded, by meaning too (BM25's arithmetic and the embedder are the index's). Also here: the text a session starts with (the records,
//! or an index of them past [`STARTUP_CHARS`]).
//!
//! Not here: the tool's arguments and answers (`tools::memory`), whether a change may happen
//! (the gate), where the database lives (the engine says).

use crate::index::embed::Embedder;
use crate::index::rank::{bm25_scores, fuse_flat, top_scored, Bag, Ranking, Weights};
use anyhow::Context;
use rusqlite::OptionalExtension;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The most characters one record holds.
pub const RECORD_CHARS: usize = 1_000;
/// The most characters the records of one scope hold together.
pub const SCOPE_CHARS: usize = 10_000;
/// The most characters of records a session's instructions carry in full; past it they carry
/// an index (each record's id and first line).
pub const STARTUP_CHARS: usize = 4_000;
/// The most characters of a record's first line in the index.
const INDEX_LINE_CHARS: usize = 80;
/// The most records the index names; the rest are counted.
const INDEX_RECORDS: usize = 60;

/// Whose memory a record is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// This project's (the boundary's).
    Project,
    /// The user's, shared by every project.
    User,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Project => "project",
            Scope::User => "user",
        }
    }

    pub fn parse(text: &str) -> Option<Scope> {
        match text {
            "project" => Some(Scope::Project),
            "user" => Some(Scope::User),
            _ => None,
        }
    }

    /// `project memory`, `user memory`.
    pub fn title(self) -> &'static str {
        match self {
            Scope::Project => "project memory",
            Scope::User => "user memory",
        }
    }

    pub const BOTH: [Scope; 2] = [Scope::Project, Scope::User];
}

/// One record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub id: u64,
    pub scope: Scope,
    pub text: String,
}

impl Record {
    /// `m12`.
    pub fn name(&self) -> String {
        name(self.id)
    }

    pub fn chars(&self) -> usize {
        self.text.chars().count()
    }
}

/// A record id as the model sees it: `m12`.
pub fn name(id: u64) -> String {
    format!("m{id}")
}

/// A record id from what the model gave: `m12`, `M12` or `12`.
pub fn parse_id(text: &str) -> Option<u64> {
    let text = text.trim();
    let digits = text.strip_prefix(['m', 'M']).unwrap_or(text);
    if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|id| *id > 0)
}

/// What a change does, found before it is made (the gate shows it) and made by [`Memory::apply`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Add { scope: Scope, text: String },
    Replace { record: Record, text: String },
    Remove { record: Record },
}

impl Change {
    pub fn scope(&self) -> Scope {
        match self {
            Change::Add { scope, .. } => *scope,
            Change::Replace { record, .. } | Change::Remove { record } => record.scope,
        }
    }
}

/// What a change did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub record: Record,
    /// The record's text before (a replacement).
    pub before: Option<String>,
    /// The characters the scope holds after the change.
    pub used: usize,
}

/// Why a change or a look-up was refused: a sentence the model reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused(pub String);

/// A scope's records and the characters they hold.
#[derive(Debug, Clone, Default)]
pub struct Listing {
    pub records: Vec<Record>,
    pub used: usize,
}

/// The memory of one project and of its user: the database, opened on first use.
pub struct Memory {
    path: PathBuf,
    /// The project's key (the boundary's host path).
    project: String,
    db: Mutex<Option<rusqlite::Connection>>,
}

impl Memory {
    /// The memory kept in the database at `path` (created on first use), for the project whose
    /// key is `project`.
    pub fn new(path: PathBuf, project: &str) -> Memory {
        Memory { path, project: project.to_string(), db: Mutex::new(None) }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn key(&self, scope: Scope) -> String {
        match scope {
            Scope::Project => format!("project:{}", self.project),
            Scope::User => "user".to_string(),
        }
    }

    fn scope_of(&self, key: &str) -> Option<Scope> {
        if key == "user" {
            Some(Scope::User)
        } else if key.strip_prefix("project:") == Some(self.project.as_str()) {
            Some(Scope::Project)
        } else {
            None
        }
    }

    /// Runs `f` on the open database, opening it first if needed.
    fn with_db<T>(&self, f: impl FnOnce(&mut rusqlite::Connection) -> anyhow::Result<T>) -> anyhow::Result<T> {
        let mut guard = self.db.lock().unwrap_or_else(|e| e.into_inner());
        if guard.is_none() {
            *guard = Some(open(&self.path)?);
        }
        f(guard.as_mut().expect("opened above"))
    }

    /// The records of a scope, oldest first, and the characters they hold.
    pub fn list(&self, scope: Scope) -> anyhow::Result<Listing> {
        let key = self.key(scope);
        self.with_db(|db| read_scope(db, &key, scope))
    }

    /// The record `id`, if it is in this project's or the user's memory.
    pub fn get(&self, id: u64) -> anyhow::Result<Option<Record>> {
        self.with_db(|db| {
            let row: Option<(String, String)> = db
                .query_row("SELECT scope, text FROM records WHERE id = ?1", [id as i64], |row| {
                    Ok((row.get(0)?, row.get(1)?))
                })
                .optional()?;
            Ok(row.and_then(|(key, text)| self.scope_of(&key).map(|scope| Record { id, scope, text })))
        })
    }

    /// What adding, replacing or removing would do, checked against the records and the budgets
    /// as they are now; nothing is changed. `None` for an add of a text the scope already holds.
    pub fn plan_add(&self, scope: Scope, text: &str) -> anyhow::Result<Result<Option<Change>, Refused>> {
        let text = clean(text);
        if let Err(refused) = check_text(&text) {
            return Ok(Err(refused));
        }
        let listing = self.list(scope)?;
        if listing.records.iter().any(|r| r.text == text) {
            return Ok(Ok(None));
        }
        if let Err(refused) = check_room(scope, listing.used, text.chars().count(), None) {
            return Ok(Err(refused));
        }
        Ok(Ok(Some(Change::Add { scope, text })))
    }

    /// The record of `scope` that already says `text` (as `plan_add` compares them), if one does.
    pub fn kept(&self, scope: Scope, text: &str) -> anyhow::Result<Option<Record>> {
        let text = clean(text);
        Ok(self.list(scope)?.records.into_iter().find(|r| r.text == text))
    }

    pub fn plan_replace(&self, id: u64, text: &str) -> anyhow::Result<Result<Change, Refused>> {
        let Some(record) = self.get(id)? else { return Ok(Err(unknown(id))) };
        let text = clean(text);
        if let Err(refused) = check_text(&text) {
            return Ok(Err(refused));
        }
        let listing = self.list(record.scope)?;
        if let Err(refused) = check_room(record.scope, listing.used, text.chars().count(), Some(record.chars())) {
            return Ok(Err(refused));
        }
        Ok(Ok(Change::Replace { record, text }))
    }

    pub fn plan_remove(&self, id: u64) -> anyhow::Result<Result<Change, Refused>> {
        Ok(match self.get(id)? {
            Some(record) => Ok(Change::Remove { record }),
            None => Err(unknown(id)),
        })
    }

    /// Makes a planned change, checking it again in the transaction that writes it (another
    /// session may have changed the records since it was planned).
    pub fn apply(&self, change: &Change) -> anyhow::Result<Result<Applied, Refused>> {
        let scope = change.scope();
        let key = self.key(scope);
        self.with_db(|db| {
            let tx = db.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let listing = read_scope(&tx, &key, scope)?;
            let now = now();
            let outcome = match change {
                Change::Add { text, .. } => {
                    if let Err(refused) = check_room(scope, listing.used, text.chars().count(), None) {
                        return Ok(Err(refused));
                    }
                    tx.execute(
                        "INSERT INTO records (scope, text, created, updated) VALUES (?1, ?2, ?3, ?3)",
                        rusqlite::params![key, text, now],
                    )?;
                    let id = tx.last_insert_rowid() as u64;
                    let used = listing.used + text.chars().count();
                    Applied { record: Record { id, scope, text: text.clone() }, before: None, used }
                }
                Change::Replace { record, text } => {
                    let Some(current) = listing.records.iter().find(|r| r.id == record.id) else {
                        return Ok(Err(unknown(record.id)));
                    };
                    if let Err(refused) = check_room(scope, listing.used, text.chars().count(), Some(current.chars())) {
                        return Ok(Err(refused));
                    }
                    tx.execute(
                        "UPDATE records SET text = ?1, updated = ?2 WHERE id = ?3",
                        rusqlite::params![text, now, record.id as i64],
                    )?;
                    let used = listing.used - current.chars() + text.chars().count();
                    let record = Record { id: record.id, scope, text: text.clone() };
                    Applied { record, before: Some(current.text.clone()), used }
                }
                Change::Remove { record } => {
                    let Some(current) = listing.records.iter().find(|r| r.id == record.id) else {
                        return Ok(Err(unknown(record.id)));
                    };
                    tx.execute("DELETE FROM records WHERE id = ?1", [record.id as i64])?;
                    Applied { record: current.clone(), before: None, used: listing.used - current.chars() }
                }
            };
            tx.commit()?;
            Ok(Ok(outcome))
        })
    }

    /// The records of `scopes` best matching `query`, best first, at most `limit`: by words
    /// (BM25 over these records alone) and, with a vectorizer, by meaning, fused by rank.
    pub fn search(
        &self,
        scopes: &[Scope],
        query: &str,
        limit: usize,
        vectorizer: Option<&dyn Embedder>,
    ) -> anyhow::Result<Vec<Record>> {
        let mut records = Vec::new();
        for scope in scopes {
            records.extend(self.list(*scope)?.records);
        }
        Ok(rank(records, query, limit, vectorizer))
    }

    /// The text a session's instructions carry: every record when they fit in
    /// [`STARTUP_CHARS`], else an index of them; a line saying memory is empty when it is.
    pub fn startup_text(&self) -> anyhow::Result<String> {
        let listings: Vec<(Scope, Listing)> =
            Scope::BOTH.iter().map(|s| Ok((*s, self.list(*s)?))).collect::<anyhow::Result<_>>()?;
        Ok(startup_text(&listings))
    }
}

/// The text without leading and trailing blank space, and with `\r\n` as `\n`.
fn clean(text: &str) -> String {
    text.replace("\r\n", "\n").trim().to_string()
}

fn check_text(text: &str) -> Result<(), Refused> {
    let chars = text.chars().count();
    if chars == 0 {
        return Err(Refused("Not remembered: the text is empty. Give the fact to keep, in a sentence or two.".into()));
    }
    if chars > RECORD_CHARS {
        return Err(Refused(format!(
            "Not remembered: the text is {} characters, and a record holds at most {}. Say it shorter, or keep it as \
             several records of one fact each.",
            thousands(chars),
            thousands(RECORD_CHARS)
        )));
    }
    Ok(())
}

/// Whether a scope holding `used` characters has room for `adding` more, in place of a record of
/// `replacing` characters.
fn check_room(scope: Scope, used: usize, adding: usize, replacing: Option<usize>) -> Result<(), Refused> {
    let after = used - replacing.unwrap_or(0) + adding;
    if after <= SCOPE_CHARS {
        return Ok(());
    }
    Err(Refused(format!(
        "Not remembered: {} holds {} of its {} characters, and this would bring it to {}. Remove records that no \
         longer hold, or merge several into one shorter record (memory list shows them), then try again.",
        scope.title(),
        thousands(used),
        thousands(SCOPE_CHARS),
        thousands(after)
    )))
}

fn unknown(id: u64) -> Refused {
    Refused(format!(
        "No memory record {}: this project's memory and the user's have none by that id. memory list shows the ids.",
        name(id)
    ))
}

/// `10,000`.
pub fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

fn read_scope(db: &rusqlite::Connection, key: &str, scope: Scope) -> anyhow::Result<Listing> {
    let mut stmt = db.prepare_cached("SELECT id, text FROM records WHERE scope = ?1 ORDER BY id")?;
    let records: Vec<Record> = stmt
        .query_map([key], |row| Ok(Record { id: row.get::<_, i64>(0)? as u64, scope, text: row.get(1)? }))?
        .collect::<Result<_, _>>()?;
    let used = records.iter().map(Record::chars).sum();
    Ok(Listing { records, used })
}

/// Opens the memory database (`open_tables`) and reads every record once, so that damage is
/// met here rather than by a tool later (the memory is small: a few scopes of at most
/// [`SCOPE_CHARS`] each); a damaged database is mended first (`mend`).
fn open(path: &Path) -> anyhow::Result<rusqlite::Connection> {
    let read_through = || -> anyhow::Result<rusqlite::Connection> {
        let db = open_tables(path)?;
        db.query_row("SELECT count(*), COALESCE(sum(length(scope) + length(text)), 0) FROM records", [], |r| {
            r.get::<_, i64>(1)
        })?;
        Ok(db)
    };
    match read_through() {
        Err(e) if crate::sqlite::is_damage(&e) => {
            mend(path, &e)?;
            read_through()
        }
        other => other,
    }
}

/// A damaged memory database made usable again. Its records are the user's and exist nowhere
/// else, so the file (and its log) is first copied aside whole, for a recovery tool; then every
/// record that can still be read is kept (read a few ids at a time, so one unreadable page
/// loses only the records on it), the file is emptied in place (`sqlite::empty_in_place`) and
/// the kept records are written back with their ids. Ids go on past the highest one the
/// damaged file shows, so none is given twice. stderr says where the copy is and what was kept.
fn mend(path: &Path, error: &anyhow::Error) -> anyhow::Result<()> {
    let aside = PathBuf::from(format!("{}.damaged-{}", path.display(), now()));
    std::fs::copy(path, &aside).with_context(|| format!("copying the damaged memory to {}", aside.display()))?;
    let wal = PathBuf::from(format!("{}-wal", path.display()));
    if wal.exists() {
        std::fs::copy(&wal, format!("{}-wal", aside.display())).context("copying the damaged memory's log")?;
    }
    let salvage = salvage(path);
    crate::sqlite::empty_in_place(path)?;
    let db = open_tables(path)?;
    let tx = db.unchecked_transaction()?;
    for (id, scope, text, created, updated) in &salvage.records {
        tx.execute(
            "INSERT INTO records (id, scope, text, created, updated) VALUES (?1, ?2, ?3, ?4, ?5)",
            rusqlite::params![id, scope, text, created, updated],
        )?;
    }
    // AUTOINCREMENT's counter, past every id the damaged file shows.
    if tx.execute("UPDATE sqlite_sequence SET seq = max(seq, ?1) WHERE name = 'records'", [salvage.highest])? == 0 {
        tx.execute("INSERT INTO sqlite_sequence (name, seq) VALUES ('records', ?1)", [salvage.highest])?;
    }
    tx.commit()?;
    tracing::error!(
        path = %path.display(), error = %error, copy = %aside.display(), kept = salvage.records.len(),
        unreadable_ids = salvage.unreadable,
        "the memory database was damaged: copied aside, emptied, and the {} records still readable written back{}",
        salvage.records.len(),
        if salvage.unreadable > 0 { "; some could not be read (the copy has them)" } else { "" }
    );
    Ok(())
}

/// What a damaged memory database still gives: its readable records (id, scope, text,
/// created, updated), the highest id it shows, and how many ids could not be read.
struct Salvage {
    records: Vec<(i64, String, String, i64, i64)>,
    highest: i64,
    unreadable: usize,
}

/// Reads a damaged memory database's records `SALVAGE_SPAN` ids at a time, and one at a time
/// where a span meets the damage.
fn salvage(path: &Path) -> Salvage {
    /// How many ids one read asks for: an unreadable page costs the records of its read only.
    const SALVAGE_SPAN: i64 = 8;
    let mut out = Salvage { records: Vec::new(), highest: 0, unreadable: 0 };
    let Ok(db) = rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY) else {
        out.unreadable = 1;
        return out;
    };
    let shown = ["SELECT seq FROM sqlite_sequence WHERE name = 'records'", "SELECT max(id) FROM records"]
        .iter()
        .filter_map(|query| db.query_row(query, [], |r| r.get::<_, Option<i64>>(0)).ok().flatten())
        .max();
    let Some(highest) = shown else {
        out.unreadable = 1;
        return out;
    };
    out.highest = highest;
    // One reading of rows for a span of ids and for one id alone.
    let read = |filter: &str, ids: &[i64]| {
        db.prepare_cached(&format!("SELECT id, scope, text, created, updated FROM records WHERE {filter} ORDER BY id"))
            .and_then(|mut stmt| {
                stmt.query_map(rusqlite::params_from_iter(ids), |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
                })?
                .collect::<Result<Vec<_>, _>>()
            })
    };
    let mut from = 1;
    // A damaged counter could claim any number; no memory holds more than a million records.
    while from <= highest.min(1 << 20) {
        let last = from + SALVAGE_SPAN - 1;
        match read("id BETWEEN ?1 AND ?2", &[from, last]) {
            Ok(mut records) => out.records.append(&mut records),
            // A span that meets the damaged page may also hold records on good pages beside it:
            // each id is asked for alone then, by equality (a range's scan steps on to the next
            // row, which may be on the damaged page).
            Err(_) => {
                for id in from..=last {
                    match read("id = ?1", &[id]) {
                        Ok(mut records) => out.records.append(&mut records),
                        Err(_) => out.unreadable += 1,
                    }
                }
            }
        }
        from = last + 1;
    }
    out
}

/// Opens (and on first use makes) the memory database: WAL, so sessions of several processes
/// read while one writes; a busy wait, so they take turns writing.
fn open_tables(path: &Path) -> anyhow::Result<rusqlite::Connection> {
    let db = crate::sqlite::open_shared(path)?;
    // AUTOINCREMENT: an id is never given again, even after the newest record is removed.
    db.execute_batch(
        "CREATE TABLE IF NOT EXISTS records (
             id INTEGER PRIMARY KEY AUTOINCREMENT,
             scope TEXT NOT NULL,
             text TEXT NOT NULL,
             created INTEGER NOT NULL,
             updated INTEGER NOT NULL
         );
         CREATE INDEX IF NOT EXISTS records_by_scope ON records (scope, id);",
    )
    .context("setting up the memory tables")?;
    Ok(db)
}

/// Records ranked for a query: by words, and by meaning when a vectorizer is given (see `search`).
fn rank(records: Vec<Record>, query: &str, limit: usize, vectorizer: Option<&dyn Embedder>) -> Vec<Record> {
    let terms = crate::index::terms::query_terms(query);
    let bags: Vec<Bag> = records.iter().map(|r| Bag::of(&r.text)).collect();
    let scores = bm25_scores(&bags.iter().collect::<Vec<_>>(), &terms);
    let by_id = |a: usize, b: usize| records[a].id.cmp(&records[b].id);
    let mut rankings =
        vec![Ranking::new(1.0, top_scored(&scores, records.len(), &|a, b| by_id(a as usize, b as usize)))];
    if let Some(meaning) = vectorizer.and_then(|v| by_meaning(&records, query, v)) {
        rankings.push(Ranking::new(1.0, meaning.into_iter().map(|(i, score)| (i as u32, f64::from(score))).collect()));
    }
    // Fused as the index fuses its rankings, with its constants; ties by id.
    let Weights { k, by_score, .. } = Weights::DEFAULT;
    let chosen = fuse_flat(&rankings, k, by_score, &|a, b| by_id(a as usize, b as usize), limit);
    let mut records: Vec<Option<Record>> = records.into_iter().map(Some).collect();
    chosen.into_iter().filter_map(|i| records[i as usize].take()).collect()
}

/// The records' indices by closeness of meaning to the query, closest first, each with its cosine; `None` when the
/// vectorizer fails (the words' ranking stands alone then). Records too far from the query (a
/// cosine of at most 0.2) are left out, so a query that matches nothing finds nothing.
fn by_meaning(records: &[Record], query: &str, vectorizer: &dyn Embedder) -> Option<Vec<(usize, f32)>> {
    if records.is_empty() {
        return Some(Vec::new());
    }
    let mut q = vectorizer.embed_query(query).ok()?;
    crate::index::embed::normalize(&mut q);
    let texts: Vec<&str> = records.iter().map(|r| r.text.as_str()).collect();
    let vectors = vectorizer.embed(&texts).ok()?;
    let mut scored: Vec<(usize, f32)> = vectors
        .into_iter()
        .enumerate()
        .map(|(i, mut v)| {
            crate::index::embed::normalize(&mut v);
            (i, crate::index::embed::dot(&q, &v))
        })
        .filter(|(_, s)| *s > 0.2)
        .collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| records[a.0].id.cmp(&records[b.0].id)));
    Some(scored)
}

/// A record's text as one list item: its first line after `- m12: `, later lines indented.
fn item(record: &Record) -> String {
    let mut lines = record.text.lines();
    let mut out = format!("- {}: {}\n", record.name(), lines.next().unwrap_or_default());
    for line in lines {
        out.push_str(&format!("  {line}\n"));
    }
    out
}

/// A record's first line, cut to [`INDEX_LINE_CHARS`] characters.
fn first_line(record: &Record) -> String {
    let line = record.text.lines().next().unwrap_or_default();
    if line.chars().count() <= INDEX_LINE_CHARS && record.text.lines().count() == 1 {
        return line.to_string();
    }
    let cut: String = line.chars().take(INDEX_LINE_CHARS).collect();
    format!("{}…", cut.trim_end())
}

fn startup_text(listings: &[(Scope, Listing)]) -> String {
    let total: usize = listings.iter().map(|(_, l)| l.records.len()).sum();
    if total == 0 {
        return "Memory: no records yet. Keep what should outlast this session (the user's preferences, this \
                project's conventions, what was learned the hard way) with the memory tool.\n"
            .to_string();
    }
    let chars: usize = listings.iter().map(|(_, l)| l.used).sum();
    let whole = chars <= STARTUP_CHARS;
    let mut text = if whole {
        "Memory (records kept across sessions; change them with the memory tool, by id):\n".to_string()
    } else {
        format!(
            "Memory: {total} records of {} characters, too many to show whole; here each record's id and first \
             line. memory search finds records by words and meaning, memory list shows them in full.\n",
            thousands(chars)
        )
    };
    let mut named = 0;
    for (scope, listing) in listings {
        if listing.records.is_empty() {
            continue;
        }
        let what = match scope {
            Scope::Project => "Project (this project only)",
            Scope::User => "User (every project)",
        };
        text.push_str(&format!("{what}:\n"));
        for record in &listing.records {
            if whole {
                text.push_str(&item(record));
            } else if named < INDEX_RECORDS {
                text.push_str(&format!("- {}: {}\n", record.name(), first_line(record)));
                named += 1;
            }
        }
    }
    if named < total && !whole {
        text.push_str(&format!("… and {} more records (memory list shows every one).\n", total - named));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory(dir: &Path, project: &str) -> Memory {
        Memory::new(dir.join("memory.db"), project)
    }

    fn add(m: &Memory, scope: Scope, text: &str) -> Result<Applied, Refused> {
        match m.plan_add(scope, text).unwrap() {
            Ok(Some(change)) => m.apply(&change).unwrap(),
            Ok(None) => Err(Refused("already there".into())),
            Err(refused) => Err(refused),
        }
    }

    /// A damaged memory database (one of its records' pages overwritten) is copied aside whole,
    /// keeps every record not on that page with its id, and never gives an id twice.
    #[test]
    fn a_damaged_memory_keeps_what_it_can_and_its_copy() {
        let dir = tempfile::tempdir().unwrap();
        let mut ids = Vec::new();
        for project in ["/a", "/b", "/c", "/d", "/e", "/f"] {
            let m = memory(dir.path(), project);
            for n in 0..14 {
                let text = format!("{project} note {n}: {}", "remember this detail ".repeat(30));
                ids.push(add(&m, Scope::Project, &text).unwrap().record.id);
            }
        }
        let path = dir.path().join("memory.db");
        let leaf = crate::sqlite::spoiling::leaf_page(&path, "records", 2);
        let on_leaf: i64 = rusqlite::Connection::open(&path)
            .unwrap()
            .query_row("SELECT ncell FROM dbstat WHERE pageno = ?1", [leaf as i64], |r| r.get(0))
            .unwrap();
        crate::sqlite::spoiling::spoil_page(&path, leaf);
        let damaged = open_tables(&path)
            .and_then(|db| Ok(db.query_row("SELECT sum(length(text)) FROM records", [], |r| r.get::<_, i64>(0))?));
        assert!(damaged.as_ref().is_err_and(crate::sqlite::is_damage), "{damaged:?}");

        let m = memory(dir.path(), "/c");
        let kept = m.list(Scope::Project).unwrap().records;
        let all: usize = ["/a", "/b", "/c", "/d", "/e", "/f"]
            .iter()
            .map(|p| memory(dir.path(), p).list(Scope::Project).unwrap().records.len())
            .sum();
        assert_eq!(all, ids.len() - on_leaf as usize, "the damaged page's records lost, all others kept");
        assert!(kept.iter().all(|r| ids.contains(&r.id) && r.text.starts_with("/c note")), "kept with their ids");
        let next = add(&m, Scope::User, "a new note").unwrap().record.id;
        assert!(next > *ids.iter().max().unwrap(), "{next}");
        let copies: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|name| name.starts_with("memory.db.damaged-") && !name.ends_with("-wal"))
            .collect();
        assert_eq!(copies.len(), 1, "{copies:?}");
        let copy = rusqlite::Connection::open(dir.path().join(&copies[0])).unwrap();
        let in_copy: i64 = copy.query_row("SELECT count(*) FROM records", [], |r| r.get(0)).unwrap();
        assert_eq!(in_copy as usize, ids.len(), "the copy still holds every record's id");
    }

    #[test]
    fn ids_are_never_given_twice() {
        let dir = tempfile::tempdir().unwrap();
        let m = memory(dir.path(), "/p");
        let a = add(&m, Scope::Project, "one").unwrap().record.id;
        let b = add(&m, Scope::Project, "two").unwrap().record.id;
        let change = m.plan_remove(b).unwrap().unwrap();
        m.apply(&change).unwrap().unwrap();
        let c = add(&m, Scope::Project, "three").unwrap().record.id;
        assert!(a < b && b < c, "{a} {b} {c}");
    }

    #[test]
    fn scopes_of_two_projects_are_apart_and_the_user_s_is_shared() {
        let dir = tempfile::tempdir().unwrap();
        let one = memory(dir.path(), "/one");
        let two = memory(dir.path(), "/two");
        let mine = add(&one, Scope::Project, "tabs in one").unwrap().record.id;
        add(&one, Scope::User, "answers in English").unwrap();
        assert!(two.list(Scope::Project).unwrap().records.is_empty());
        assert_eq!(two.list(Scope::User).unwrap().records.len(), 1);
        assert!(two.get(mine).unwrap().is_none(), "another project's record is unknown here");
        assert!(two.plan_remove(mine).unwrap().is_err());
    }

    #[test]
    fn budgets_hold_per_record_and_per_scope() {
        let dir = tempfile::tempdir().unwrap();
        let m = memory(dir.path(), "/p");
        let long = "x".repeat(RECORD_CHARS + 1);
        assert!(add(&m, Scope::Project, &long).unwrap_err().0.contains("at most 1,000"));
        for i in 0..10 {
            add(&m, Scope::Project, &format!("{i}{}", "y".repeat(RECORD_CHARS - 1))).unwrap();
        }
        let full = add(&m, Scope::Project, "one more").unwrap_err().0;
        assert!(full.contains("holds 10,000 of its 10,000"), "{full}");
        // The user's scope has its own budget.
        add(&m, Scope::User, "one more").unwrap();
    }

    #[test]
    fn two_writers_never_pass_the_budget_together() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_path_buf();
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let path = path.clone();
                std::thread::spawn(move || {
                    let m = memory(&path, "/p");
                    let mut added = 0;
                    for i in 0..6 {
                        let text = format!("{t}-{i} {}", "z".repeat(900));
                        // Planned while there was room; applied only if there still is.
                        if let Ok(Some(change)) = m.plan_add(Scope::Project, &text).unwrap() {
                            if m.apply(&change).unwrap().is_ok() {
                                added += 1;
                            }
                        }
                    }
                    added
                })
            })
            .collect();
        let added: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        let listing = memory(&path, "/p").list(Scope::Project).unwrap();
        assert_eq!(listing.records.len(), added);
        assert!(listing.used <= SCOPE_CHARS, "{}", listing.used);
        assert!(added >= 10, "the scope filled up: {added}");
    }

    #[test]
    fn search_ranks_by_words_and_by_meaning() {
        struct Fake;
        impl Embedder for Fake {
            fn name(&self) -> &str {
                "fake"
            }
            fn dims(&self) -> usize {
                2
            }
            fn max_tokens(&self) -> usize {
                512
            }
            fn count_tokens(&self, text: &str) -> usize {
                text.split_whitespace().count()
            }
            fn token_spans(&self, _text: &str) -> Vec<std::ops::Range<usize>> {
                Vec::new()
            }
            // A text about tabs or indentation points one way, anything else another.
            fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, crate::index::embed::EmbedError> {
                Ok(texts
                    .iter()
                    .map(|t| if t.contains("tab") || t.contains("indent") { vec![1.0, 0.0] } else { vec![0.0, 1.0] })
                    .collect())
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let m = memory(dir.path(), "/p");
        add(&m, Scope::Project, "Use tabs in Go files").unwrap();
        add(&m, Scope::Project, "The release branch is cut on Fridays").unwrap();
        let words = m.search(&Scope::BOTH, "release day", 10, None).unwrap();
        assert_eq!(words.len(), 1);
        assert!(words[0].text.contains("Fridays"));
        assert!(m.search(&Scope::BOTH, "indentation", 10, None).unwrap().is_empty());
        let meaning = m.search(&Scope::BOTH, "indentation", 10, Some(&Fake)).unwrap();
        assert_eq!(meaning.len(), 1);
        assert!(meaning[0].text.contains("tabs"));
    }

    #[test]
    fn the_startup_text_is_whole_or_an_index() {
        let dir = tempfile::tempdir().unwrap();
        let m = memory(dir.path(), "/p");
        assert!(m.startup_text().unwrap().starts_with("Memory: no records yet."));
        add(&m, Scope::Project, "Use tabs\nexcept in YAML").unwrap();
        let few = m.startup_text().unwrap();
        assert!(few.contains("- m1: Use tabs\n  except in YAML\n"), "{few}");
        for i in 0..9 {
            add(&m, Scope::User, &format!("fact {i} {}", "w".repeat(600))).unwrap();
        }
        let many = m.startup_text().unwrap();
        assert!(many.starts_with("Memory: 10 records of"), "{many}");
        assert!(many.contains("- m1: Use tabs…\n"), "{many}");
        assert!(!many.contains(&"w".repeat(100)), "{many}");
    }

    #[test]
    fn ids_parse_with_or_without_their_letter() {
        assert_eq!(parse_id("m12"), Some(12));
        assert_eq!(parse_id("12"), Some(12));
        assert_eq!(parse_id("M3"), Some(3));
        assert_eq!(parse_id("m"), None);
        assert_eq!(parse_id("m0"), None);
        assert_eq!(parse_id("x1"), None);
        assert_eq!(thousands(10000), "10,000");
        assert_eq!(thousands(999), "999");
    }
}
