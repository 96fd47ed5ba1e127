//! Where a session's results are kept in full, with what editors list of them.
//!
//! `ResultStore` is the seam: the in-memory store serves tests and one-shot
//! calls; the SQLite store keeps results across restarts and crashes. A store
//! also hands out result ids, so that no id is ever given twice in one data
//! directory. Neither decides what the model sees.

use rusqlite::OptionalExtension;
use std::collections::BTreeMap;

/// What an editor lists about a result, besides its text.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ResultMeta {
    pub tool: String,
    /// The path the result is about, when one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The model was shown a stub (an unchanged re-read, the same result again).
    #[serde(default)]
    pub stub: bool,
    /// The model was shown the head and tail only.
    #[serde(default)]
    pub capped: bool,
    #[serde(default)]
    pub is_error: bool,
    /// The first line the model saw.
    #[serde(default)]
    pub title: String,
}

/// A stored result as listed: its id, what it is about, and its full text's size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResultEntry {
    pub id: u64,
    pub meta: ResultMeta,
    /// Lines of the full stored text.
    pub lines: usize,
    /// Bytes of the full stored text.
    pub size: usize,
}

/// How a file changed, as listed for editors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    Created,
    Modified,
    Deleted,
    Moved,
}

impl ChangeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Created => "created",
            ChangeKind::Modified => "modified",
            ChangeKind::Deleted => "deleted",
            ChangeKind::Moved => "moved",
        }
    }

    fn parse(text: &str) -> Option<ChangeKind> {
        Some(match text {
            "created" => ChangeKind::Created,
            "modified" => ChangeKind::Modified,
            "deleted" => ChangeKind::Deleted,
            "moved" => ChangeKind::Moved,
            _ => return None,
        })
    }
}

/// One file a result changed, with its whole text before and after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeRecord {
    pub path: String,
    pub kind: ChangeKind,
    /// Where a moved file was before.
    pub from: Option<String>,
    pub before: Option<String>,
    pub after: Option<String>,
}

/// A change as listed: the result that made it and the file's record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeEntry {
    pub id: u64,
    pub tool: String,
    pub change: ChangeRecord,
}

/// Keeps every result's full text by id, and the changes results made.
pub trait ResultStore: Send {
    /// The next result id of this session; never one given before in this store.
    fn next_id(&mut self) -> anyhow::Result<u64>;
    /// Keeps a result; when this returns, the result survives the process.
    fn put(&mut self, id: u64, meta: &ResultMeta, text: &str) -> anyhow::Result<()>;
    fn get(&self, id: u64) -> anyhow::Result<Option<String>>;
    /// The session's results, newest first, at most `limit`.
    fn list(&self, limit: usize) -> anyhow::Result<Vec<ResultEntry>>;
    /// Keeps the files result `id` changed, in order.
    fn put_changes(&mut self, id: u64, tool: &str, changes: &[ChangeRecord]) -> anyhow::Result<()>;
    /// The session's changes, newest first, at most `limit`, without their
    /// texts (`before` and `after` are `None`; see `change_texts`).
    fn changes(&self, limit: usize) -> anyhow::Result<Vec<ChangeEntry>>;
    /// The texts before and after of the change result `id` made to `path`;
    /// `None` when it made none there.
    fn change_texts(&self, id: u64, path: &str) -> anyhow::Result<Option<Texts>>;
}

/// A file's text before and after a change (`None`: there was no text).
pub type Texts = (Option<String>, Option<String>);

fn count_lines(text: &str) -> usize {
    if text.is_empty() {
        0
    } else {
        text.lines().count()
    }
}

/// Results in memory, for tests and one-shot calls.
#[derive(Default)]
pub struct MemoryStore {
    last: u64,
    results: BTreeMap<u64, (ResultMeta, String)>,
    changes: Vec<ChangeEntry>,
}

impl ResultStore for MemoryStore {
    fn next_id(&mut self) -> anyhow::Result<u64> {
        self.last += 1;
        Ok(self.last)
    }

    fn put(&mut self, id: u64, meta: &ResultMeta, text: &str) -> anyhow::Result<()> {
        self.results.insert(id, (meta.clone(), text.to_string()));
        Ok(())
    }

    fn get(&self, id: u64) -> anyhow::Result<Option<String>> {
        Ok(self.results.get(&id).map(|(_, text)| text.clone()))
    }

    fn list(&self, limit: usize) -> anyhow::Result<Vec<ResultEntry>> {
        Ok(self
            .results
            .iter()
            .rev()
            .take(limit)
            .map(|(id, (meta, text))| ResultEntry {
                id: *id,
                meta: meta.clone(),
                lines: count_lines(text),
                size: text.len(),
            })
            .collect())
    }

    fn put_changes(&mut self, id: u64, tool: &str, changes: &[ChangeRecord]) -> anyhow::Result<()> {
        for change in changes {
            self.changes.push(ChangeEntry { id, tool: tool.to_string(), change: change.clone() });
        }
        Ok(())
    }

    fn changes(&self, limit: usize) -> anyhow::Result<Vec<ChangeEntry>> {
        // Newest result first; a result's files keep their order.
        let mut out: Vec<ChangeEntry> = Vec::new();
        let mut ids: Vec<u64> = self.changes.iter().map(|c| c.id).collect();
        ids.dedup();
        for id in ids.into_iter().rev() {
            out.extend(self.changes.iter().filter(|c| c.id == id).map(|c| {
                let mut c = c.clone();
                (c.change.before, c.change.after) = (None, None);
                c
            }));
        }
        out.truncate(limit);
        Ok(out)
    }

    fn change_texts(&self, id: u64, path: &str) -> anyhow::Result<Option<Texts>> {
        Ok(self
            .changes
            .iter()
            .find(|c| c.id == id && c.change.path == path)
            .map(|c| (c.change.before.clone(), c.change.after.clone())))
    }
}

/// Results in an SQLite database under the data directory (WAL mode,
/// `synchronous=NORMAL`), so recall answers for as long as the session
/// exists, across restarts.
///
/// Every `put` commits before it returns: an answer is sent only once its
/// result is in the database's log, so a crash of the process right after an
/// answer loses nothing the model holds (a power loss may lose the last
/// commits, which `synchronous=NORMAL` trades for speed).
///
/// Ids are unique in the data directory, not just in the session: a session
/// takes them in blocks from one counter, and gives the unused rest of its
/// block back when it closes, so sessions one after another number on where
/// the last one stopped, and a session that crashed keeps its block.
pub struct SqliteStore {
    db: rusqlite::Connection,
    session: String,
    /// The next id to give and the last one of this session's block.
    next: u64,
    block_last: u64,
    /// When the session's `used` time was last written (seconds).
    touched: i64,
}

/// Ids a session takes from the counter at a time.
const ID_BLOCK: u64 = 64;

fn has_column(db: &rusqlite::Connection, table: &str, column: &str) -> rusqlite::Result<bool> {
    let mut stmt = db.prepare(&format!("PRAGMA table_info({table})"))?;
    let names: Vec<String> = stmt.query_map([], |row| row.get::<_, String>(1))?.collect::<Result<_, _>>()?;
    Ok(names.iter().any(|n| n == column))
}

fn has_table(db: &rusqlite::Connection, table: &str) -> rusqlite::Result<bool> {
    let found: Option<i64> = db
        .query_row("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1", [table], |row| row.get(0))
        .optional()?;
    Ok(found.is_some())
}

/// Creates the tables, and brings a database of an earlier version up to date, in one
/// transaction taken for writing at once: two processes (or a session and the background
/// prune) opening a database of an earlier version never both add the same column.
fn prepare(db: &rusqlite::Connection) -> anyhow::Result<()> {
    use anyhow::Context;
    db.execute_batch("BEGIN IMMEDIATE").context("taking the database for its set-up")?;
    match prepare_tables(db).context("setting up the tables") {
        Ok(()) => Ok(db.execute_batch("COMMIT")?),
        Err(e) => {
            let _ = db.execute_batch("ROLLBACK");
            Err(e)
        }
    }
}

fn prepare_tables(db: &rusqlite::Connection) -> anyhow::Result<()> {
    db.execute_batch(
        "CREATE TABLE IF NOT EXISTS sessions (
             id TEXT PRIMARY KEY,
             created INTEGER NOT NULL
         );
         CREATE TABLE IF NOT EXISTS results (
             session TEXT NOT NULL,
             id INTEGER NOT NULL,
             tool TEXT NOT NULL,
             text TEXT NOT NULL,
             meta TEXT,
             PRIMARY KEY (session, id)
         ) WITHOUT ROWID;
         CREATE TABLE IF NOT EXISTS changes (
             session TEXT NOT NULL,
             id INTEGER NOT NULL,
             seq INTEGER NOT NULL,
             tool TEXT NOT NULL,
             path TEXT NOT NULL,
             kind TEXT NOT NULL,
             from_path TEXT,
             before_sha TEXT,
             after_sha TEXT,
             PRIMARY KEY (session, id, seq)
         ) WITHOUT ROWID;
         CREATE TABLE IF NOT EXISTS blobs (
             sha TEXT PRIMARY KEY,
             text TEXT NOT NULL
         ) WITHOUT ROWID;",
    )?;
    for (table, column, kind) in [
        ("results", "meta", "TEXT"),
        ("results", "packed", "BLOB"),
        ("results", "lines", "INTEGER"),
        ("results", "size", "INTEGER"),
        ("blobs", "packed", "BLOB"),
        ("sessions", "used", "INTEGER"),
    ] {
        if !has_column(db, table, column)? {
            db.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {column} {kind}"))?;
        }
    }
    db.execute_batch("CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT NOT NULL)")?;
    if !has_table(db, "id_counter")? {
        // The counter starts past every id an earlier version gave or reserved.
        let mut highest: i64 = db.query_row("SELECT COALESCE(MAX(id), 0) FROM results", [], |row| row.get(0))?;
        if has_table(db, "reservations")? {
            let reserved: i64 =
                db.query_row("SELECT COALESCE(MAX(reserved), 0) FROM reservations", [], |row| row.get(0))?;
            highest = highest.max(reserved);
        }
        db.execute_batch(
            "CREATE TABLE IF NOT EXISTS id_counter (one INTEGER PRIMARY KEY CHECK (one = 1), last INTEGER NOT NULL);
             CREATE TABLE IF NOT EXISTS id_blocks (session TEXT PRIMARY KEY, next INTEGER NOT NULL, last INTEGER NOT NULL);",
        )?;
        db.execute("INSERT OR IGNORE INTO id_counter (one, last) VALUES (1, ?1)", [highest])?;
    }
    Ok(())
}

/// Texts at least this long are kept compressed.
const PACK_FROM: usize = 4096;

/// A text as kept: small ones as they are, larger ones compressed (LZ4).
fn pack(text: &str) -> (&str, Option<Vec<u8>>) {
    if text.len() < PACK_FROM {
        (text, None)
    } else {
        ("", Some(lz4_flex::compress_prepend_size(text.as_bytes())))
    }
}

/// A text as it was kept.
fn unpack(text: String, packed: Option<Vec<u8>>) -> anyhow::Result<String> {
    match packed {
        None => Ok(text),
        Some(bytes) => {
            let raw = lz4_flex::decompress_size_prepended(&bytes)
                .map_err(|e| anyhow::anyhow!("a stored text is damaged: {e}"))?;
            Ok(String::from_utf8(raw)?)
        }
    }
}

fn now_secs() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs() as i64
}

fn text_sha(text: &str) -> String {
    crate::tools::hex(&crate::tools::sha256(text.as_bytes()))
}

/// Where ids go on from after a damaged store that shows no id at all: far
/// past what sessions reach (a thousand ids a day is a busy user), so that an
/// id given before the damage is not given again.
const AFTER_UNREADABLE: u64 = 1 << 20;

/// The highest id the (damaged) database at `path` still shows: its counter,
/// its results' and its reserved blocks', whichever can be read.
fn highest_id_readable(path: &std::path::Path) -> Option<u64> {
    let db = rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).ok()?;
    ["SELECT last FROM id_counter WHERE one = 1", "SELECT MAX(id) FROM results", "SELECT MAX(last) FROM id_blocks"]
        .iter()
        .filter_map(|query| db.query_row(query, [], |r| r.get::<_, Option<i64>>(0)).ok().flatten())
        .max()
        .map(|n| n.max(0) as u64)
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` for `session`.
    pub fn open(path: &std::path::Path, session: &str) -> anyhow::Result<SqliteStore> {
        let db = crate::sqlite::open_shared(path)?;
        prepare(&db)?;
        let now = now_secs();
        db.execute("INSERT OR IGNORE INTO sessions (id, created) VALUES (?1, ?2)", rusqlite::params![session, now])?;
        db.execute("UPDATE sessions SET used = ?2 WHERE id = ?1", rusqlite::params![session, now])?;
        // A block this session held when it last stopped without closing is
        // not handed out again: the ids in it may have been given.
        db.execute("DELETE FROM id_blocks WHERE session = ?1", [session])?;
        Ok(SqliteStore { db, session: session.to_string(), next: 1, block_last: 0, touched: now })
    }

    /// `open`, emptying the database in place first when it is damaged
    /// (`sqlite::is_damage`). Its stored results are lost (`recall` then
    /// says it has no such result), but the id counter goes on from the
    /// highest id the damaged file still shows (or from `AFTER_UNREADABLE`
    /// when it shows none), so that no id is given twice.
    pub fn open_mending(path: &std::path::Path, session: &str) -> anyhow::Result<SqliteStore> {
        match SqliteStore::open(path, session) {
            Err(e) if crate::sqlite::is_damage(&e) => {
                let highest = highest_id_readable(path);
                crate::sqlite::empty_in_place(path)?;
                let store = SqliteStore::open(path, session)?;
                let from = highest.unwrap_or(AFTER_UNREADABLE);
                store.db.execute("UPDATE id_counter SET last = MAX(last, ?1) WHERE one = 1", [from as i64])?;
                tracing::error!(
                    path = %path.display(), error = %e, ids_from = from + 1,
                    "the stored results were damaged: emptied, so earlier results cannot be recalled; ids go on past {}",
                    if highest.is_some() { "the last one given" } else { "any an earlier session is likely to have used" }
                );
                Ok(store)
            }
            other => other,
        }
    }

    /// Opens the database at `path` to list and read `session`'s results
    /// beside the session's own store (a reader takes no ids).
    pub fn reader(path: &std::path::Path, session: &str) -> anyhow::Result<SqliteStore> {
        let db = crate::sqlite::open_shared(path)?;
        Ok(SqliteStore { db, session: session.to_string(), next: 1, block_last: 0, touched: i64::MAX })
    }

    /// Takes a new block of ids from the data directory's counter.
    fn take_block(&mut self) -> anyhow::Result<()> {
        let tx = self.db.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let last: i64 = tx.query_row("SELECT last FROM id_counter WHERE one = 1", [], |row| row.get(0))?;
        let first = last as u64 + 1;
        let block_last = last as u64 + ID_BLOCK;
        tx.execute("UPDATE id_counter SET last = ?1 WHERE one = 1", [block_last as i64])?;
        tx.execute(
            "INSERT INTO id_blocks (session, next, last) VALUES (?1, ?2, ?3)
             ON CONFLICT(session) DO UPDATE SET next = excluded.next, last = excluded.last",
            rusqlite::params![self.session, first as i64, block_last as i64],
        )?;
        tx.commit()?;
        self.next = first;
        self.block_last = block_last;
        Ok(())
    }

    /// Whether a session was ever opened in the database at `path`.
    pub fn exists(path: &std::path::Path, session: &str) -> anyhow::Result<bool> {
        if !path.exists() {
            return Ok(false);
        }
        let db = rusqlite::Connection::open(path)?;
        if !has_table(&db, "sessions")? {
            return Ok(false);
        }
        let found: Option<i64> =
            db.query_row("SELECT 1 FROM sessions WHERE id = ?1", [session], |row| row.get(0)).optional()?;
        Ok(found.is_some())
    }

    fn blob(&self, sha: Option<String>) -> anyhow::Result<Option<String>> {
        let Some(sha) = sha else { return Ok(None) };
        let mut stmt = self.db.prepare_cached("SELECT text, packed FROM blobs WHERE sha = ?1")?;
        let found: Option<(String, Option<Vec<u8>>)> =
            stmt.query_row([sha], |row| Ok((row.get(0)?, row.get(1)?))).optional()?;
        found.map(|(text, packed)| unpack(text, packed)).transpose()
    }
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        // The unused rest of the block goes back when nobody took ids after it,
        // so the next session numbers on from this one's last id.
        let give_back = || -> rusqlite::Result<()> {
            let tx = self.db.unchecked_transaction()?;
            tx.execute(
                "UPDATE id_counter SET last = ?1 WHERE one = 1 AND last = ?2",
                rusqlite::params![self.next as i64 - 1, self.block_last as i64],
            )?;
            tx.execute("DELETE FROM id_blocks WHERE session = ?1", [&self.session])?;
            tx.commit()
        };
        if self.block_last > 0 {
            if let Err(e) = give_back() {
                tracing::warn!(error = %e, "could not give back unused result ids");
            }
        }
    }
}

impl ResultStore for SqliteStore {
    fn next_id(&mut self) -> anyhow::Result<u64> {
        if self.block_last == 0 || self.next > self.block_last {
            self.take_block()?;
        }
        let id = self.next;
        self.next += 1;
        Ok(id)
    }

    fn put(&mut self, id: u64, meta: &ResultMeta, text: &str) -> anyhow::Result<()> {
        let meta_json = serde_json::to_string(meta)?;
        let (plain, packed) = pack(text);
        let mut insert = self.db.prepare_cached(
            "INSERT OR REPLACE INTO results (session, id, tool, text, meta, packed, lines, size)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )?;
        insert.execute(rusqlite::params![
            self.session,
            id as i64,
            meta.tool,
            plain,
            meta_json,
            packed,
            count_lines(text) as i64,
            text.len() as i64
        ])?;
        // When the session was last used, for retention: written at most once a minute.
        let now = now_secs();
        if now - self.touched >= 60 {
            self.db.execute("UPDATE sessions SET used = ?2 WHERE id = ?1", rusqlite::params![self.session, now])?;
            self.touched = now;
        }
        Ok(())
    }

    fn get(&self, id: u64) -> anyhow::Result<Option<String>> {
        let mut stmt = self.db.prepare_cached("SELECT text, packed FROM results WHERE session = ?1 AND id = ?2")?;
        let found: Option<(String, Option<Vec<u8>>)> = stmt
            .query_row(rusqlite::params![self.session, id as i64], |row| Ok((row.get(0)?, row.get(1)?)))
            .optional()?;
        found.map(|(text, packed)| unpack(text, packed)).transpose()
    }

    fn list(&self, limit: usize) -> anyhow::Result<Vec<ResultEntry>> {
        let mut stmt = self.db.prepare_cached(
            "SELECT id, tool, meta, lines, size, CASE WHEN lines IS NULL THEN text END FROM results
             WHERE session = ?1 ORDER BY id DESC LIMIT ?2",
        )?;
        type Row = (i64, String, Option<String>, Option<i64>, Option<i64>, Option<String>);
        let rows: Vec<Row> = stmt
            .query_map(rusqlite::params![self.session, limit.min(i64::MAX as usize) as i64], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?, row.get(5)?))
            })?
            .collect::<Result<_, _>>()?;
        let mut out = Vec::new();
        for (id, tool, meta, lines, size, text) in rows {
            let meta = meta
                .and_then(|m| serde_json::from_str::<ResultMeta>(&m).ok())
                .unwrap_or_else(|| ResultMeta { tool: tool.clone(), ..ResultMeta::default() });
            // Rows of an earlier version have no sizes: counted from their text.
            let text = text.unwrap_or_default();
            let lines = lines.map_or_else(|| count_lines(&text), |n| n as usize);
            let size = size.map_or(text.len(), |n| n as usize);
            out.push(ResultEntry { id: id as u64, meta, lines, size });
        }
        Ok(out)
    }

    fn put_changes(&mut self, id: u64, tool: &str, changes: &[ChangeRecord]) -> anyhow::Result<()> {
        let tx = self.db.transaction()?;
        {
            let mut blob = tx.prepare_cached("INSERT OR IGNORE INTO blobs (sha, text, packed) VALUES (?1, ?2, ?3)")?;
            let mut row = tx.prepare_cached(
                "INSERT OR REPLACE INTO changes (session, id, seq, tool, path, kind, from_path, before_sha, after_sha)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            )?;
            for (seq, change) in changes.iter().enumerate() {
                let mut keep = |text: &Option<String>| -> rusqlite::Result<Option<String>> {
                    match text {
                        None => Ok(None),
                        Some(text) => {
                            let sha = text_sha(text);
                            let (plain, packed) = pack(text);
                            blob.execute(rusqlite::params![sha, plain, packed])?;
                            Ok(Some(sha))
                        }
                    }
                };
                let before = keep(&change.before)?;
                let after = keep(&change.after)?;
                row.execute(rusqlite::params![
                    self.session,
                    id as i64,
                    seq as i64,
                    tool,
                    change.path,
                    change.kind.as_str(),
                    change.from,
                    before,
                    after
                ])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    fn changes(&self, limit: usize) -> anyhow::Result<Vec<ChangeEntry>> {
        let mut stmt = self.db.prepare_cached(
            "SELECT id, tool, path, kind, from_path FROM changes
             WHERE session = ?1 ORDER BY id DESC, seq ASC LIMIT ?2",
        )?;
        type Row = (i64, String, String, String, Option<String>);
        let rows: Vec<Row> = stmt
            .query_map(rusqlite::params![self.session, limit.min(i64::MAX as usize) as i64], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?))
            })?
            .collect::<Result<_, _>>()?;
        let mut out = Vec::with_capacity(rows.len());
        for (id, tool, path, kind, from) in rows {
            let Some(kind) = ChangeKind::parse(&kind) else { continue };
            let change = ChangeRecord { path, kind, from, before: None, after: None };
            out.push(ChangeEntry { id: id as u64, tool, change });
        }
        Ok(out)
    }

    fn change_texts(&self, id: u64, path: &str) -> anyhow::Result<Option<Texts>> {
        let mut stmt = self.db.prepare_cached(
            "SELECT before_sha, after_sha FROM changes WHERE session = ?1 AND id = ?2 AND path = ?3 ORDER BY seq LIMIT 1",
        )?;
        let shas: Option<(Option<String>, Option<String>)> = stmt
            .query_row(rusqlite::params![self.session, id as i64, path], |row| Ok((row.get(0)?, row.get(1)?)))
            .optional()?;
        match shas {
            None => Ok(None),
            Some((before, after)) => Ok(Some((self.blob(before)?, self.blob(after)?))),
        }
    }
}

/// How long sessions are kept, and how much room their stored results may
/// take, in one data directory. Set in config.json (`"retention": {"days":
/// 30, "megabytes": 1024}`) or on `ctxfs sessions prune`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Sessions not used for longer are removed.
    pub days: u64,
    /// Above this, the sessions used longest ago are removed until it fits.
    pub megabytes: u64,
}

impl Default for Retention {
    fn default() -> Self {
        Retention { days: 30, megabytes: 1024 }
    }
}

impl Retention {
    /// The retention given in parts, each part left out taking the default.
    pub fn or_default(days: Option<u64>, megabytes: Option<u64>) -> Retention {
        let defaults = Retention::default();
        Retention { days: days.unwrap_or(defaults.days), megabytes: megabytes.unwrap_or(defaults.megabytes) }
    }
}

/// Sessions used this recently are never removed for room (they may be open).
const IN_USE_SECS: i64 = 3600;

/// One session of a data directory, as `ctxfs sessions list` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionInfo {
    pub id: String,
    /// Seconds since the epoch.
    pub created: i64,
    pub used: i64,
    pub results: u64,
    /// Bytes its results take as stored (compressed where they are).
    pub bytes: u64,
}

/// What a prune removed (or would remove, on a dry run).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pruned {
    pub sessions: Vec<String>,
    /// Bytes of results and change texts freed.
    pub bytes: u64,
}

/// The sessions of the database at `path`, the most recently used first.
pub fn sessions(path: &std::path::Path) -> anyhow::Result<Vec<SessionInfo>> {
    if !path.exists() {
        return Ok(Vec::new());
    }
    let db = crate::sqlite::open_shared(path)?;
    prepare(&db)?;
    let mut stmt = db.prepare(
        "SELECT s.id, s.created, COALESCE(s.used, s.created), COUNT(r.id),
                COALESCE(SUM(length(r.text) + COALESCE(length(r.packed), 0)), 0)
         FROM sessions s LEFT JOIN results r ON r.session = s.id
         GROUP BY s.id ORDER BY 3 DESC, 1",
    )?;
    let rows = stmt.query_map([], |row| {
        Ok(SessionInfo {
            id: row.get(0)?,
            created: row.get(1)?,
            used: row.get(2)?,
            results: row.get::<_, i64>(3)? as u64,
            bytes: row.get::<_, i64>(4)? as u64,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Removes the sessions `retention` does not keep: those unused for longer
/// than its days, then, while everything stored takes more than its size,
/// the ones used longest ago (never one used within the last hour). With
/// `dry_run`, only says what it would remove.
pub fn prune(path: &std::path::Path, retention: Retention, dry_run: bool) -> anyhow::Result<Pruned> {
    let listed = sessions(path)?;
    if listed.is_empty() {
        return Ok(Pruned::default());
    }
    let db = crate::sqlite::open_shared(path)?;
    let now = now_secs();
    let blob_bytes: i64 =
        db.query_row("SELECT COALESCE(SUM(length(text) + COALESCE(length(packed), 0)), 0) FROM blobs", [], |row| {
            row.get(0)
        })?;
    let mut total: u64 = listed.iter().map(|s| s.bytes).sum::<u64>() + blob_bytes as u64;
    let limit = retention.megabytes.saturating_mul(1024 * 1024);
    let max_age = retention.days.saturating_mul(86_400).min(i64::MAX as u64) as i64;
    let mut pruned = Pruned::default();
    // Oldest use first.
    for session in listed.iter().rev() {
        let too_old = now - session.used > max_age;
        let too_big = total > limit && now - session.used > IN_USE_SECS;
        if !(too_old || too_big) {
            continue;
        }
        pruned.sessions.push(session.id.clone());
        pruned.bytes += session.bytes;
        total = total.saturating_sub(session.bytes);
    }
    if dry_run || pruned.sessions.is_empty() {
        return Ok(pruned);
    }
    let mut db = db;
    let tx = db.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    for id in &pruned.sessions {
        for table in ["results", "changes", "id_blocks", "sessions"] {
            let column = if table == "sessions" { "id" } else { "session" };
            tx.execute(&format!("DELETE FROM {table} WHERE {column} = ?1"), [id])?;
        }
    }
    let freed_blobs = tx.execute(
        "DELETE FROM blobs WHERE sha NOT IN (SELECT before_sha FROM changes WHERE before_sha IS NOT NULL
                                             UNION SELECT after_sha FROM changes WHERE after_sha IS NOT NULL)",
        [],
    )?;
    tx.commit()?;
    let blob_after: i64 =
        db.query_row("SELECT COALESCE(SUM(length(text) + COALESCE(length(packed), 0)), 0) FROM blobs", [], |row| {
            row.get(0)
        })?;
    pruned.bytes += (blob_bytes - blob_after).max(0) as u64;
    tracing::info!(
        sessions = pruned.sessions.len(),
        blobs = freed_blobs,
        bytes = pruned.bytes,
        "pruned the stored results"
    );
    Ok(pruned)
}

/// Prunes by `retention` at most once a day per data directory (the time of
/// the last prune is kept in the database); for the start of a server.
pub fn prune_daily(path: &std::path::Path, retention: Retention) -> anyhow::Result<Option<Pruned>> {
    if !path.exists() {
        return Ok(None);
    }
    let db = crate::sqlite::open_shared(path)?;
    prepare(&db)?;
    let last: Option<String> =
        db.query_row("SELECT value FROM settings WHERE key = 'pruned_at'", [], |row| row.get(0)).optional()?;
    let now = now_secs();
    if last.and_then(|l| l.parse::<i64>().ok()).is_some_and(|l| now - l < 86_400) {
        return Ok(None);
    }
    db.execute(
        "INSERT INTO settings (key, value) VALUES ('pruned_at', ?1)
         ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        [now.to_string()],
    )?;
    drop(db);
    prune(path, retention, false).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(tool: &str) -> ResultMeta {
        ResultMeta { tool: tool.into(), title: format!("[{tool}]"), ..ResultMeta::default() }
    }

    fn put(store: &mut dyn ResultStore, tool: &str, text: &str) -> u64 {
        let id = store.next_id().unwrap();
        store.put(id, &meta(tool), text).unwrap();
        id
    }

    #[test]
    fn sqlite_keeps_results_across_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sessions.db");
        {
            let mut store = SqliteStore::open(&path, "s1").unwrap();
            assert_eq!(put(&mut store, "read", "[#0001]\nhello"), 1);
            assert_eq!(put(&mut store, "grep", "[#0002]\nworld"), 2);
        }
        assert!(SqliteStore::exists(&path, "s1").unwrap());
        assert!(!SqliteStore::exists(&path, "s2").unwrap());
        let store = SqliteStore::open(&path, "s1").unwrap();
        assert_eq!(store.get(1).unwrap().as_deref(), Some("[#0001]\nhello"));
        assert_eq!(store.get(3).unwrap(), None);
        let listed = store.list(10).unwrap();
        assert_eq!(listed.iter().map(|e| e.id).collect::<Vec<_>>(), vec![2, 1], "newest first");
        assert_eq!(listed[0].meta.tool, "grep");
        assert_eq!((listed[0].lines, listed[0].size), (2, 13));
        let other = SqliteStore::open(&path, "s2").unwrap();
        assert_eq!(other.get(1).unwrap(), None);
    }

    #[test]
    fn many_opening_a_new_database_at_once_all_succeed() {
        // Sessions and the background prune open the database together at a process's
        // start; the one that creates the tables must not race the others' checks.
        for round in 0..8 {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("sessions.db");
            let barrier = std::sync::Barrier::new(6);
            std::thread::scope(|scope| {
                for n in 0..6 {
                    let (path, barrier) = (&path, &barrier);
                    scope.spawn(move || {
                        barrier.wait();
                        if n % 2 == 0 {
                            SqliteStore::open(path, &format!("s{n}")).map(drop)
                        } else {
                            prune(path, Retention::default(), true).map(drop)
                        }
                        .unwrap_or_else(|e| panic!("round {round}, opener {n}: {e:#}"));
                    });
                }
            });
        }
    }

    /// A damaged store (here its results' first page, the pages a new
    /// session writes first) is emptied when a session opens it: the earlier
    /// results are gone, and the ids go on past every one given before.
    #[test]
    fn a_damaged_store_is_emptied_and_never_gives_an_id_twice() {
        use crate::sqlite::spoiling::{root_page, spoil_page};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sessions.db");
        let mut store = SqliteStore::open(&path, "s").unwrap();
        let given: Vec<u64> = (0..5).map(|_| put(&mut store, "read", "text")).collect();
        drop(store);
        spoil_page(&path, root_page(&path, "results"));
        spoil_page(&path, root_page(&path, "sessions"));
        let damaged = SqliteStore::open(&path, "s").err().expect("the damage is met at open");
        assert!(crate::sqlite::is_damage(&damaged), "{damaged:#}");
        let mut mended = SqliteStore::open_mending(&path, "s").unwrap();
        let next = mended.next_id().unwrap();
        assert!(next > *given.iter().max().unwrap(), "{next} after {given:?}");
        assert_eq!(mended.get(given[0]).unwrap(), None, "the earlier results are gone");
        let id = put(&mut mended, "read", "again");
        assert_eq!(mended.get(id).unwrap().as_deref(), Some("again"));
        drop(mended);
        assert!(SqliteStore::open(&path, "t").unwrap().next_id().unwrap() > id, "and later sessions number on");
    }

    /// A file that shows no id at all (its first page overwritten) goes on
    /// far past what sessions use.
    #[test]
    fn a_store_that_shows_no_id_goes_on_far_past_any() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sessions.db");
        let mut store = SqliteStore::open(&path, "s").unwrap();
        put(&mut store, "read", "text");
        drop(store);
        crate::sqlite::spoiling::spoil_page(&path, 1);
        let mut mended = SqliteStore::open_mending(&path, "s").unwrap();
        assert!(mended.next_id().unwrap() > AFTER_UNREADABLE);
    }

    #[test]
    fn a_crash_never_lets_an_id_be_given_twice() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sessions.db");
        let mut store = SqliteStore::open(&path, "s").unwrap();
        for _ in 1..=5 {
            put(&mut store, "read", "text");
        }
        // A crash: nothing is given back on the way out.
        std::mem::forget(store);
        let mut reopened = SqliteStore::open(&path, "s").unwrap();
        assert!(reopened.next_id().unwrap() > 5, "ids up to 5 were given; the next must be past them");
        let mut other = SqliteStore::open(&path, "t").unwrap();
        assert!(other.next_id().unwrap() > 5, "another session never reuses them either");
    }

    #[test]
    fn sessions_one_after_another_number_on_and_never_share_an_id() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sessions.db");
        let mut first = SqliteStore::open(&path, "a").unwrap();
        put(&mut first, "read", "one");
        put(&mut first, "read", "two");
        drop(first);
        let mut second = SqliteStore::open(&path, "b").unwrap();
        assert_eq!(put(&mut second, "read", "three"), 3, "the next session goes on after the last id");
        // Two sessions at once take separate blocks.
        let mut third = SqliteStore::open(&path, "c").unwrap();
        let a: Vec<u64> = (0..100).map(|_| put(&mut second, "read", "x")).collect();
        let b: Vec<u64> = (0..100).map(|_| put(&mut third, "read", "y")).collect();
        assert!(a.iter().all(|id| !b.contains(id)), "concurrent sessions never share an id");
        assert_eq!(second.get(a[50]).unwrap().as_deref(), Some("x"));
        assert_eq!(third.get(a[50]).unwrap(), None, "a session never recalls another's result");
    }

    #[test]
    fn changes_keep_texts_once_and_list_newest_first() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sessions.db");
        let mut store = SqliteStore::open(&path, "s").unwrap();
        let record = |path: &str, kind, before: Option<&str>, after: Option<&str>| ChangeRecord {
            path: path.into(),
            kind,
            from: None,
            before: before.map(String::from),
            after: after.map(String::from),
        };
        store.put_changes(1, "write", &[record("/a", ChangeKind::Created, None, Some("x\n"))]).unwrap();
        store
            .put_changes(
                2,
                "apply_patch",
                &[
                    record("/a", ChangeKind::Modified, Some("x\n"), Some("y\n")),
                    record("/b", ChangeKind::Deleted, Some("b\n"), None),
                ],
            )
            .unwrap();
        drop(store);
        let store = SqliteStore::open(&path, "s").unwrap();
        let listed = store.changes(10).unwrap();
        let shape: Vec<(u64, &str, ChangeKind)> =
            listed.iter().map(|c| (c.id, c.change.path.as_str(), c.change.kind)).collect();
        assert_eq!(
            shape,
            vec![(2, "/a", ChangeKind::Modified), (2, "/b", ChangeKind::Deleted), (1, "/a", ChangeKind::Created)]
        );
        assert_eq!(listed[0].change.before, None, "listing carries no texts");
        assert_eq!(store.change_texts(2, "/a").unwrap(), Some((Some("x\n".into()), Some("y\n".into()))));
        assert_eq!(store.change_texts(2, "/b").unwrap(), Some((Some("b\n".into()), None)));
        assert_eq!(store.change_texts(1, "/b").unwrap(), None);
        let blobs: i64 = store.db.query_row("SELECT COUNT(*) FROM blobs", [], |row| row.get(0)).unwrap();
        assert_eq!(blobs, 3, "x, y and b, each once");
    }

    #[test]
    fn large_texts_are_kept_compressed_and_read_back_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sessions.db");
        let mut store = SqliteStore::open(&path, "s").unwrap();
        let big: String = (0..20_000).map(|i| format!("-line {i}\n+line {i} changed\n")).collect();
        let id = put(&mut store, "edit", &big);
        assert_eq!(store.get(id).unwrap().as_deref(), Some(big.as_str()));
        let listed = store.list(1).unwrap();
        assert_eq!((listed[0].lines, listed[0].size), (40_000, big.len()));
        let stored: i64 = store
            .db
            .query_row(
                "SELECT length(text) + COALESCE(length(packed), 0) FROM results WHERE id = ?1",
                [id as i64],
                |r| r.get(0),
            )
            .unwrap();
        assert!((stored as usize) < big.len() / 3, "{stored} bytes stored for {}", big.len());
    }

    #[test]
    fn prune_removes_old_sessions_then_the_oldest_until_it_fits() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sessions.db");
        for (id, age_days) in [("old", 40), ("mid", 10), ("new", 2)] {
            let mut store = SqliteStore::open(&path, id).unwrap();
            put(&mut store, "read", &"x".repeat(3000));
            store
                .put_changes(
                    1_000_000 + age_days,
                    "write",
                    &[ChangeRecord {
                        path: format!("/{id}"),
                        kind: ChangeKind::Created,
                        from: None,
                        before: None,
                        after: Some(format!("{id} text\n")),
                    }],
                )
                .unwrap();
            let used = now_secs() - age_days as i64 * 86_400;
            store.db.execute("UPDATE sessions SET used = ?2 WHERE id = ?1", rusqlite::params![id, used]).unwrap();
        }
        let dry = prune(&path, Retention { days: 30, megabytes: 1024 }, true).unwrap();
        assert_eq!(dry.sessions, vec!["old".to_string()]);
        assert_eq!(sessions(&path).unwrap().len(), 3, "a dry run removes nothing");
        let done = prune(&path, Retention { days: 30, megabytes: 0 }, false).unwrap();
        assert_eq!(done.sessions, vec!["old".to_string(), "mid".to_string(), "new".to_string()]);
        assert!(sessions(&path).unwrap().is_empty());
        let db = crate::sqlite::open_shared(&path).unwrap();
        let blobs: i64 = db.query_row("SELECT COUNT(*) FROM blobs", [], |r| r.get(0)).unwrap();
        assert_eq!(blobs, 0, "texts no change refers to are gone too");
    }
}
