//! The index's database: files, content blobs, chunks, their terms and
//! vectors, in SQLite (WAL) under the data directory.
//!
//! Content is keyed by its SHA-256, so a file in many places or unchanged
//! across a move is chunked and embedded once. The passages' terms live in
//! an inverted index of our own (`postings`: one segment a commit, merged by
//! size), the files' paths and tags in an FTS5 table (contentless) read back
//! through `fts5vocab`; both are read per term, so the caller can compute
//! BM25 with statistics of its own choosing. Vectors are stored
//! quantised to `i8` (one scale per vector) in a table of their own, so
//! loading them all reads nothing else; chunk metadata is covered by an
//! index, so loading it reads neither texts nor vectors. This module stores
//! and fetches; it does not rank and does not know about views.
//!
//! The schema carries a version (`PRAGMA user_version`). An index made by an
//! older schema is dropped and made again on the next refresh, except the
//! files' tags and creators, which are kept (their content is read again);
//! one made by a newer schema is not opened, and left as it is.

use super::postings;
pub use super::postings::Merges;
use super::terms::CountedTerms;
use rusqlite::{params, Connection, OptionalExtension, Transaction, TransactionBehavior};
use std::path::Path;

/// The schema's version; an older index is rebuilt (see the module header).
/// 5: the words are stemmed (`terms`), so an index of unstemmed words is made again.
const SCHEMA_VERSION: i64 = 5;

/// How much of the index file one page-cache hint names: Linux reads about
/// this much for one hint, so the file is hinted a window at a time.
const WARM_WINDOW: u64 = 8 << 20;

/// Asks the kernel, from a thread of its own, to read the whole index file
/// into the page cache while the index opens and its first search runs.
/// After a restart or once the file has left the cache, the first search at
/// 1.09M passages otherwise reads it a page at a time: 12.8–13.9 s against
/// 3.8–4.8 s with the hints (bench/README.md). When the file is cached
/// already, the hints take about 30 ms at that size; nothing is copied into
/// the process.
pub(super) fn warm_in_background(path: &Path) {
    let path = path.to_path_buf();
    let spawned = std::thread::Builder::new().name("ctxfs-warm".into()).spawn(move || {
        if let Err(e) = warm(&path) {
            tracing::debug!(error = %e, "the index file could not be hinted into the page cache");
        }
    });
    if let Err(e) = spawned {
        tracing::debug!(error = %e, "no thread to hint the index file into the page cache");
    }
}

/// The hints of `warm_in_background`, a window at a time: how many bytes
/// were hinted (the file's length; 0 for a file not made yet, or where the
/// platform has no such hint).
fn warm(path: &Path) -> std::io::Result<u64> {
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        let len = file.metadata()?.len();
        let mut at = 0;
        while at < len {
            let window = WARM_WINDOW.min(len - at);
            let advice = rustix::fs::Advice::WillNeed;
            rustix::fs::fadvise(&file, at, std::num::NonZeroU64::new(window), advice)?;
            at += window;
        }
        Ok(len)
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        drop(file);
        Ok(0)
    }
}

/// A file's row: where it is and what it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRow {
    pub path: String,
    pub blob: Vec<u8>,
    pub size: i64,
    pub mtime: i64,
    pub created_by: Option<String>,
    pub task: Option<String>,
    pub related: Option<String>,
}

/// A file as the refresh needs it: where, what, and when it was seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileStat {
    pub rowid: i64,
    pub path: String,
    pub blob: Vec<u8>,
    pub size: i64,
    pub mtime: i64,
}

impl FileRow {
    /// A row of `SELECT path, blob, size, mtime, created_by, task, related FROM files`.
    fn from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<FileRow> {
        Ok(FileRow {
            path: r.get(0)?,
            blob: r.get(1)?,
            size: r.get(2)?,
            mtime: r.get(3)?,
            created_by: r.get(4)?,
            task: r.get(5)?,
            related: r.get(6)?,
        })
    }
}

/// One chunk of a blob, ready to store.
#[derive(Debug, Clone)]
pub struct NewChunk {
    pub first_line: usize,
    pub last_line: usize,
    pub text: String,
    /// The chunk's words (`terms::terms`: split for code, identifiers also joined, stemmed), counted.
    pub words: CountedTerms,
    pub vector: Option<Vec<f32>>,
}

/// A stored chunk, as ranking needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkMeta {
    pub id: i64,
    pub first_line: usize,
    pub last_line: usize,
    /// Its length in words, for BM25.
    pub words: usize,
}

pub struct IndexStore {
    db: Connection,
    /// The terms of the chunks added in the open transaction, written at its commit.
    pending: std::cell::RefCell<postings::Pending>,
}

/// A vector quantised to `i8`: `value ≈ q × scale`, `scale = max |value| / 127`.
pub fn quantize(vector: &[f32]) -> (Vec<i8>, f32) {
    let max = vector.iter().fold(0f32, |m, v| m.max(v.abs()));
    if max <= 0.0 || !max.is_finite() {
        return (vec![0; vector.len()], 0.0);
    }
    let scale = max / 127.0;
    (vector.iter().map(|v| (v / scale).round().clamp(-127.0, 127.0) as i8).collect(), scale)
}

/// The stored form of a vector: its scale (f32, little-endian), then one `i8` per dimension.
fn vector_bytes(vector: &[f32]) -> Vec<u8> {
    let (q, scale) = quantize(vector);
    let mut out = Vec::with_capacity(4 + q.len());
    out.extend_from_slice(&scale.to_le_bytes());
    out.extend(q.iter().map(|v| *v as u8));
    out
}

/// Appends a stored vector's `i8` values to `out` and answers its scale.
pub fn decode_vector(bytes: &[u8], out: &mut Vec<i8>) -> Option<f32> {
    let (head, rest) = bytes.split_first_chunk::<4>()?;
    out.extend(rest.iter().map(|b| *b as i8));
    Some(f32::from_le_bytes(*head))
}

/// Where postings read from the store stand, to know what of them is still true.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PostingsMarks {
    /// SQLite's schema cookie: a migration that drops the tables (and gives
    /// chunk ids again from 1) moves it.
    pub schema: i64,
    /// The newest chunk the passages' postings hold (`postings::newest`): a
    /// passages' list read then lacks only the chunks after it.
    pub newest_chunk: i64,
    /// A count moved by every change to a file's row or its path-and-tags
    /// terms (`META_VERSION`): the paths' lists read then hold while it stays.
    pub meta: i64,
}

/// The count behind `PostingsMarks::meta`. Triggers move it whenever a
/// file's row is added, removed, or its path or tags changed (the text its
/// path-and-tags terms are made of), whoever writes; `refresh_meta` moves it
/// too. A file's content changing leaves it (and the paths' lists) alone.
const META_VERSION: &str = "
    CREATE TABLE IF NOT EXISTS meta_version (id INTEGER PRIMARY KEY CHECK (id = 0), n INTEGER NOT NULL);
    INSERT OR IGNORE INTO meta_version (id, n) VALUES (0, 0);
    CREATE TRIGGER IF NOT EXISTS meta_version_on_insert AFTER INSERT ON files
        BEGIN UPDATE meta_version SET n = n + 1 WHERE id = 0; END;
    CREATE TRIGGER IF NOT EXISTS meta_version_on_delete AFTER DELETE ON files
        BEGIN UPDATE meta_version SET n = n + 1 WHERE id = 0; END;
    CREATE TRIGGER IF NOT EXISTS meta_version_on_update AFTER UPDATE OF path, created_by, task, related ON files
        WHEN OLD.path IS NOT NEW.path OR OLD.created_by IS NOT NEW.created_by
            OR OLD.task IS NOT NEW.task OR OLD.related IS NOT NEW.related
        BEGIN UPDATE meta_version SET n = n + 1 WHERE id = 0; END;";

fn create_schema(db: &Connection) -> rusqlite::Result<()> {
    db.execute_batch(postings::SCHEMA)?;
    db.execute_batch(
        "CREATE TABLE IF NOT EXISTS files (
             path TEXT PRIMARY KEY,
             blob BLOB NOT NULL,
             size INTEGER NOT NULL,
             mtime INTEGER NOT NULL,
             created_by TEXT,
             task TEXT,
             related TEXT
         );
         CREATE INDEX IF NOT EXISTS files_blob ON files(blob);
         CREATE TABLE IF NOT EXISTS blobs (
             sha BLOB PRIMARY KEY,
             embedder TEXT
         ) WITHOUT ROWID;
         CREATE TABLE IF NOT EXISTS chunks (
             id INTEGER PRIMARY KEY AUTOINCREMENT,
             blob BLOB NOT NULL,
             first_line INTEGER NOT NULL,
             last_line INTEGER NOT NULL,
             words INTEGER NOT NULL,
             text TEXT NOT NULL
         );
         CREATE INDEX IF NOT EXISTS chunks_meta ON chunks(blob, id, first_line, last_line, words);
         CREATE TABLE IF NOT EXISTS chunk_vectors (
             id INTEGER PRIMARY KEY,
             vector BLOB NOT NULL
         );
         CREATE VIRTUAL TABLE IF NOT EXISTS meta_terms USING fts5(
             words, content='', contentless_delete=1, tokenize='unicode61 remove_diacritics 0');
         CREATE VIRTUAL TABLE IF NOT EXISTS meta_vocab USING fts5vocab(meta_terms, 'instance');",
    )?;
    db.execute_batch(FILES_TAGGED)?;
    db.execute_batch(META_VERSION)
}

/// An index of a newer schema than this binary's is left as it is (a newer
/// ctxfs sharing the data directory would otherwise lose it, and then this
/// one's): opening it fails, and search ranks by words only.
fn refuse_newer(version: i64) -> anyhow::Result<()> {
    if version > SCHEMA_VERSION {
        anyhow::bail!(
            "the search index was made by a newer ctxfs (schema {version}; this one reads {SCHEMA_VERSION}); left as it is"
        );
    }
    Ok(())
}

/// Brings an index of an older schema to this one: everything derived from
/// content is dropped, the files keep their tags and are marked to be read again.
fn migrate(db: &Connection) -> anyhow::Result<()> {
    let version: i64 = db.pragma_query_value(None, "user_version", |r| r.get(0))?;
    if version == SCHEMA_VERSION {
        return Ok(());
    }
    let has_files = has_in_schema(db, "table", "files")?;
    // Rolled back when dropped on an error.
    let tx = Transaction::new_unchecked(db, TransactionBehavior::Immediate)?;
    // Another process may have migrated while this one waited for the lock.
    let version: i64 = db.pragma_query_value(None, "user_version", |r| r.get(0))?;
    refuse_newer(version)?;
    if version == SCHEMA_VERSION {
        return Ok(());
    }
    db.execute_batch(
        "DROP TABLE IF EXISTS chunk_vocab;
         DROP TABLE IF EXISTS chunk_terms;
         DROP TABLE IF EXISTS meta_vocab;
         DROP TABLE IF EXISTS meta_terms;
         DROP TABLE IF EXISTS chunk_vectors;
         DROP TABLE IF EXISTS chunks;
         DROP TABLE IF EXISTS blobs;",
    )?;
    for table in postings::TABLES {
        db.execute_batch(&format!("DROP TABLE IF EXISTS {table}"))?;
    }
    create_schema(db)?;
    if has_files {
        // Read every file again on its next refresh; its blob is gone.
        db.execute("UPDATE files SET mtime = -2", [])?;
        let paths: Vec<String> =
            db.prepare("SELECT path FROM files")?.query_map([], |r| r.get(0))?.collect::<Result<_, _>>()?;
        for path in &paths {
            refresh_meta(db, path)?;
        }
    }
    db.pragma_update(None, "user_version", SCHEMA_VERSION)?;
    tx.commit()?;
    Ok(())
}

/// An open write transaction of an `IndexStore` (`IndexStore::writing`):
/// what `commit` or `checkpoint` has not made durable is rolled back when it
/// is dropped, so a failure on any path leaves the store as last committed.
pub struct Writing<'a> {
    store: &'a IndexStore,
    /// The merges of the postings' segments its commits make.
    merges: Merges,
}

impl Writing<'_> {
    /// Makes what was written so far durable and goes on in a new
    /// transaction (a long refresh commits in batches, so an interruption
    /// keeps what was done).
    pub fn checkpoint(&self) -> anyhow::Result<()> {
        self.store.flush_and_commit(self.merges)?;
        self.store.db.execute_batch("BEGIN")?;
        Ok(())
    }

    /// Makes everything written durable and ends the transaction.
    pub fn commit(self) -> anyhow::Result<()> {
        self.store.flush_and_commit(self.merges)
        // `drop` then finds no transaction open, unless the commit failed.
    }
}

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        self.store.rollback();
    }
}

/// Writes a file's path-and-tags terms again; answers its rowid (-1: no such file).
fn refresh_meta(db: &Connection, path: &str) -> anyhow::Result<i64> {
    // The rowid, then the path, creator, task and related, as one text.
    let row: Option<(i64, String)> = db
        .prepare_cached("SELECT rowid, path, created_by, task, related FROM files WHERE path = ?1")?
        .query_row([path], |r| {
            let parts: [Option<String>; 4] = [r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?];
            Ok((r.get(0)?, parts.into_iter().flatten().collect::<Vec<_>>().join(" ")))
        })
        .optional()?;
    let Some((rowid, text)) = row else { return Ok(-1) };
    let words = super::terms::terms(&text).join(" ");
    db.prepare_cached("DELETE FROM meta_terms WHERE rowid = ?1")?.execute([rowid])?;
    db.prepare_cached("INSERT INTO meta_terms (rowid, words) VALUES (?1, ?2)")?.execute(params![rowid, words])?;
    db.prepare_cached("UPDATE meta_version SET n = n + 1 WHERE id = 0")?.execute([])?;
    Ok(rowid)
}

impl IndexStore {
    /// Opens (creating it and its directory if needed) the database at `path`.
    pub fn open(path: &Path) -> anyhow::Result<IndexStore> {
        let db = crate::sqlite::open_shared(path)?;
        // 16 MB of page cache (the default is 2 MB); memory stays bounded.
        db.pragma_update(None, "cache_size", -16_384)?;
        db.set_prepared_statement_cache_capacity(64);
        create_schema_or_migrate(&db)?;
        Ok(IndexStore { db, pending: Default::default() })
    }

    /// Opens a write transaction, rolled back when the answer is dropped
    /// before `Writing::commit` ends it: an error anywhere between cannot
    /// leave it open or half written.
    pub fn writing(&self) -> anyhow::Result<Writing<'_>> {
        self.writing_with(Merges::All)
    }

    /// `writing`, whose commits make only the postings' merges `merges` allows.
    pub fn writing_with(&self, merges: Merges) -> anyhow::Result<Writing<'_>> {
        self.pending.borrow_mut().clear();
        self.db.execute_batch("BEGIN")?;
        Ok(Writing { store: self, merges })
    }

    /// Writes the new chunks' terms, then commits.
    fn flush_and_commit(&self, merges: Merges) -> anyhow::Result<()> {
        let started = std::time::Instant::now();
        postings::flush(&self.db, &mut self.pending.borrow_mut(), merges)?;
        let flushed = started.elapsed();
        self.db.execute_batch("COMMIT")?;
        tracing::debug!(?flushed, took = ?started.elapsed(), "index committed");
        Ok(())
    }

    /// Runs `f` in a transaction: committed when it succeeds, rolled back
    /// when it or the commit fails.
    pub fn in_transaction<T>(&self, f: impl FnOnce() -> anyhow::Result<T>) -> anyhow::Result<T> {
        let writing = self.writing()?;
        let out = f()?;
        writing.commit()?;
        Ok(out)
    }

    /// Runs `reads` in one read transaction (unless one is open already):
    /// many small reads then share one snapshot and one lock, where each
    /// statement on its own takes and drops SQLite's shared lock (a query's
    /// 2,000 vectors spent most of their time there).
    pub fn in_one_read<T>(&self, reads: impl FnOnce() -> anyhow::Result<T>) -> anyhow::Result<T> {
        if !self.db.is_autocommit() {
            return reads();
        }
        let snapshot = self.db.unchecked_transaction()?;
        let out = reads()?;
        snapshot.commit()?;
        Ok(out)
    }

    /// Rolls back the open transaction, if there is one.
    fn rollback(&self) {
        self.pending.borrow_mut().clear();
        if !self.db.is_autocommit() {
            let _ = self.db.execute_batch("ROLLBACK");
        }
    }

    /// How many rows this connection has changed since it opened: with
    /// `data_version` (other connections' commits), what says the store moved.
    pub fn total_changes(&self) -> u64 {
        self.db.total_changes()
    }

    /// Changes whenever another connection (another process) committed since the last call.
    pub fn data_version(&self) -> anyhow::Result<i64> {
        Ok(self.db.pragma_query_value(None, "data_version", |r| r.get(0))?)
    }

    pub fn file(&self, path: &str) -> anyhow::Result<Option<FileRow>> {
        Ok(self
            .db
            .prepare_cached("SELECT path, blob, size, mtime, created_by, task, related FROM files WHERE path = ?1")?
            .query_row([path], FileRow::from_row)
            .optional()?)
    }

    /// Every file row whose path is `root` or lies below it.
    pub fn files_under(&self, root: &str) -> anyhow::Result<Vec<FileRow>> {
        let prefix = if root == "/" { "/".to_string() } else { format!("{root}/") };
        let upper = format!("{}\u{10ffff}", prefix);
        let mut stmt = self.db.prepare_cached(
            "SELECT path, blob, size, mtime, created_by, task, related FROM files
             WHERE path = ?1 OR (path >= ?2 AND path < ?3) ORDER BY path",
        )?;
        let rows = stmt.query_map(params![root, prefix, upper], FileRow::from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Every file, as the refresh needs it.
    pub fn all_files(&self, mut each: impl FnMut(FileStat)) -> anyhow::Result<()> {
        let mut stmt = self.db.prepare("SELECT rowid, path, blob, size, mtime FROM files")?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            each(FileStat { rowid: r.get(0)?, path: r.get(1)?, blob: r.get(2)?, size: r.get(3)?, mtime: r.get(4)? });
        }
        Ok(())
    }

    /// Records a file's content (and keeps its tags), refreshing its
    /// path-and-tags terms; answers the file's rowid.
    pub fn put_file(
        &self,
        path: &str,
        blob: &[u8],
        size: i64,
        mtime: i64,
        created_by: Option<&str>,
    ) -> anyhow::Result<i64> {
        let before: Option<(i64, Option<String>)> = self
            .db
            .prepare_cached("SELECT rowid, created_by FROM files WHERE path = ?1")?
            .query_row([path], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        self.db
            .prepare_cached(
                "INSERT INTO files (path, blob, size, mtime, created_by) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT(path) DO UPDATE SET blob = excluded.blob, size = excluded.size, mtime = excluded.mtime,
                     created_by = COALESCE(files.created_by, excluded.created_by)",
            )?
            .execute(params![path, blob, size, mtime, created_by])?;
        match before {
            // The path and tags are unchanged unless this sets the creator: no terms to redo.
            Some((rowid, had)) if had.is_some() || created_by.is_none() => Ok(rowid),
            _ => self.refresh_meta(path),
        }
    }

    /// What only the index holds of the file at `path` (its creator, its
    /// tags), if it holds any of it.
    pub(crate) fn kept(&self, path: &str) -> anyhow::Result<Option<super::damage::Kept>> {
        Ok(self
            .db
            .prepare_cached(
                "SELECT path, created_by, task, related FROM files WHERE path = ?1
                 AND (created_by IS NOT NULL OR task IS NOT NULL OR related IS NOT NULL)",
            )?
            .query_row([path], super::damage::Kept::from_row)
            .optional()?)
    }

    /// Gives the file at `path` the creator and tags of `kept` where it has
    /// none of its own.
    pub(crate) fn take_over(&self, path: &str, kept: &super::damage::Kept) -> anyhow::Result<()> {
        let changed = self
            .db
            .prepare_cached(
                "UPDATE files SET created_by = COALESCE(created_by, ?2), task = COALESCE(task, ?3),
                     related = COALESCE(related, ?4) WHERE path = ?1",
            )?
            .execute(params![path, kept.created_by, kept.task, kept.related])?;
        if changed > 0 {
            self.refresh_meta(path)?;
        }
        Ok(())
    }

    /// Every tagged file's row id and its tags (its task, then what it
    /// relates to), by row id.
    pub fn tagged(&self) -> anyhow::Result<Vec<(i64, String)>> {
        let mut rows = self.db.prepare_cached(
            "SELECT rowid, COALESCE(task, ''), COALESCE(related, '') FROM files
             WHERE task IS NOT NULL OR related IS NOT NULL ORDER BY rowid",
        )?;
        let rows =
            rows.query_map([], |r| Ok((r.get(0)?, format!("{} {}", r.get::<_, String>(1)?, r.get::<_, String>(2)?))))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Sets a file's tags; `None` leaves one as it is.
    pub fn tag(&self, path: &str, task: Option<&str>, related: Option<&str>) -> anyhow::Result<bool> {
        let changed = self.db.execute(
            "UPDATE files SET task = COALESCE(?2, task), related = COALESCE(?3, related) WHERE path = ?1",
            params![path, task, related],
        )?;
        if changed > 0 {
            self.refresh_meta(path)?;
        }
        Ok(changed > 0)
    }

    /// Writes back what a damaged store's rows held of their own
    /// (`damage::Kept`), in one transaction: each row is read again at the
    /// next walk (its content is unknown: no blob, `mtime` -2, as after a
    /// migration), and a file that is gone by then is dropped as any is.
    pub(crate) fn put_kept(&self, kept: &[super::damage::Kept]) -> anyhow::Result<()> {
        self.in_transaction(|| {
            for row in kept {
                self.db
                    .prepare_cached(
                        "INSERT OR REPLACE INTO files (path, blob, size, mtime, created_by, task, related)
                         VALUES (?1, ?2, -1, -2, ?3, ?4, ?5)",
                    )?
                    .execute(params![row.path, [0u8; 32], row.created_by, row.task, row.related])?;
                self.refresh_meta(&row.path)?;
            }
            Ok(())
        })
    }

    fn refresh_meta(&self, path: &str) -> anyhow::Result<i64> {
        refresh_meta(&self.db, path)
    }

    /// Lets the database grow no more, as a full disk would: SQLite's own
    /// "database or disk is full" at the next commit that needs a page.
    #[cfg(test)]
    pub(crate) fn stop_growing(&self) {
        let pages: i64 = self.db.pragma_query_value(None, "page_count", |r| r.get(0)).unwrap();
        self.db.pragma_update(None, "max_page_count", pages).unwrap();
    }

    pub fn remove_file(&self, path: &str) -> anyhow::Result<()> {
        let rowid: Option<i64> = self
            .db
            .prepare_cached("SELECT rowid FROM files WHERE path = ?1")?
            .query_row([path], |r| r.get(0))
            .optional()?;
        if let Some(rowid) = rowid {
            self.db.prepare_cached("DELETE FROM meta_terms WHERE rowid = ?1")?.execute([rowid])?;
            self.db.prepare_cached("DELETE FROM files WHERE rowid = ?1")?.execute([rowid])?;
        }
        Ok(())
    }

    /// The files' rowids by path, for the path-and-tags ranking.
    pub fn file_rowid(&self, path: &str) -> anyhow::Result<Option<i64>> {
        Ok(self
            .db
            .prepare_cached("SELECT rowid FROM files WHERE path = ?1")?
            .query_row([path], |r| r.get(0))
            .optional()?)
    }

    pub fn has_blob(&self, sha: &[u8]) -> anyhow::Result<bool> {
        Ok(self.db.prepare_cached("SELECT 1 FROM blobs WHERE sha = ?1")?.exists([sha])?)
    }

    /// The embedder a blob's vectors were made with (`None`: words only).
    pub fn blob_embedder(&self, sha: &[u8]) -> anyhow::Result<Option<Option<String>>> {
        Ok(self
            .db
            .prepare_cached("SELECT embedder FROM blobs WHERE sha = ?1")?
            .query_row([sha], |r| r.get(0))
            .optional()?)
    }

    /// Every blob with the embedder it was made with.
    pub fn all_blobs(&self, mut each: impl FnMut(Vec<u8>, Option<String>)) -> anyhow::Result<()> {
        let mut stmt = self.db.prepare("SELECT sha, embedder FROM blobs")?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            each(r.get(0)?, r.get(1)?);
        }
        Ok(())
    }

    /// Every chunk's metadata with its blob, grouped by blob, in order within
    /// each (read from the covering index alone).
    pub fn all_chunks(&self, mut each: impl FnMut(&[u8], ChunkMeta)) -> anyhow::Result<()> {
        let mut stmt = self.db.prepare(
            "SELECT blob, id, first_line, last_line, words FROM chunks INDEXED BY chunks_meta ORDER BY blob, id",
        )?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            let blob = r.get_ref(0)?.as_blob()?;
            let meta = ChunkMeta {
                id: r.get(1)?,
                first_line: r.get::<_, i64>(2)? as usize,
                last_line: r.get::<_, i64>(3)? as usize,
                words: r.get::<_, i64>(4)? as usize,
            };
            each(blob, meta);
        }
        Ok(())
    }

    /// Stores a blob's chunks (replacing any earlier ones); answers their ids
    /// in order. Outside a transaction it makes one of its own (the terms are
    /// written when a transaction commits).
    pub fn put_blob(&self, sha: &[u8], embedder: Option<&str>, chunks: &[NewChunk]) -> anyhow::Result<Vec<i64>> {
        if self.db.is_autocommit() {
            return self.in_transaction(|| self.put_blob(sha, embedder, chunks));
        }
        self.drop_chunks(sha)?;
        self.db
            .prepare_cached("INSERT OR REPLACE INTO blobs (sha, embedder) VALUES (?1, ?2)")?
            .execute(params![sha, embedder])?;
        let mut ids = Vec::with_capacity(chunks.len());
        for chunk in chunks {
            self.db
                .prepare_cached(
                    "INSERT INTO chunks (blob, first_line, last_line, words, text) VALUES (?1, ?2, ?3, ?4, ?5)",
                )?
                .execute(params![
                    sha,
                    chunk.first_line as i64,
                    chunk.last_line as i64,
                    chunk.words.total as i64,
                    chunk.text
                ])?;
            let id = self.db.last_insert_rowid();
            if let Some(vector) = &chunk.vector {
                self.db
                    .prepare_cached("INSERT INTO chunk_vectors (id, vector) VALUES (?1, ?2)")?
                    .execute(params![id, vector_bytes(vector)])?;
            }
            self.pending.borrow_mut().add(id, &chunk.words);
            ids.push(id);
        }
        Ok(ids)
    }

    fn drop_chunks(&self, sha: &[u8]) -> anyhow::Result<()> {
        let ids: Vec<i64> = self
            .db
            .prepare_cached("SELECT id FROM chunks WHERE blob = ?1")?
            .query_map([sha], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        for id in ids {
            postings::forget(&self.db, id)?;
            self.db.prepare_cached("DELETE FROM chunk_vectors WHERE id = ?1")?.execute([id])?;
        }
        self.db.prepare_cached("DELETE FROM chunks WHERE blob = ?1")?.execute([sha])?;
        Ok(())
    }

    /// Drops a blob when no file holds it any more; answers whether it did.
    pub fn drop_blob_if_orphan(&self, sha: &[u8]) -> anyhow::Result<bool> {
        if self.db.prepare_cached("SELECT 1 FROM files WHERE blob = ?1")?.exists([sha])? {
            return Ok(false);
        }
        self.drop_chunks(sha)?;
        let dropped = self.db.prepare_cached("DELETE FROM blobs WHERE sha = ?1")?.execute([sha])?;
        Ok(dropped > 0)
    }

    /// Drops blobs no file holds any more.
    pub fn collect_garbage(&self) -> anyhow::Result<usize> {
        let orphans: Vec<Vec<u8>> = self
            .db
            .prepare("SELECT sha FROM blobs WHERE sha NOT IN (SELECT blob FROM files)")?
            .query_map([], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        for sha in &orphans {
            self.drop_chunks(sha)?;
            self.db.execute("DELETE FROM blobs WHERE sha = ?1", [sha])?;
        }
        Ok(orphans.len())
    }

    /// The chunks of a blob, in order.
    pub fn chunks_of(&self, sha: &[u8]) -> anyhow::Result<Vec<ChunkMeta>> {
        let mut stmt = self.db.prepare_cached(
            "SELECT id, first_line, last_line, words FROM chunks INDEXED BY chunks_meta WHERE blob = ?1 ORDER BY id",
        )?;
        let rows = stmt.query_map([sha], |r| {
            Ok(ChunkMeta {
                id: r.get(0)?,
                first_line: r.get::<_, i64>(1)? as usize,
                last_line: r.get::<_, i64>(2)? as usize,
                words: r.get::<_, i64>(3)? as usize,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    pub fn chunk_text(&self, id: i64) -> anyhow::Result<String> {
        Ok(self.db.prepare_cached("SELECT text FROM chunks WHERE id = ?1")?.query_row([id], |r| r.get(0))?)
    }

    /// A chunk's vector as stored (quantised), back as `f32`.
    pub fn chunk_vector(&self, id: i64) -> anyhow::Result<Option<Vec<f32>>> {
        let bytes: Option<Vec<u8>> = self
            .db
            .prepare_cached("SELECT vector FROM chunk_vectors WHERE id = ?1")?
            .query_row([id], |r| r.get(0))
            .optional()?;
        let Some(bytes) = bytes else { return Ok(None) };
        let mut q = Vec::new();
        let scale = decode_vector(&bytes, &mut q).unwrap_or(0.0);
        Ok(Some(q.iter().map(|v| f32::from(*v) * scale).collect()))
    }

    /// A chunk's stored vector: its `i8` values appended to `out`, and its scale.
    pub fn vector(&self, id: i64, out: &mut Vec<i8>) -> anyhow::Result<Option<f32>> {
        let mut stmt = self.db.prepare_cached("SELECT vector FROM chunk_vectors WHERE id = ?1")?;
        let mut rows = stmt.query([id])?;
        Ok(match rows.next()? {
            Some(row) => decode_vector(row.get_ref(0)?.as_blob()?, out),
            None => None,
        })
    }

    /// Every stored vector (as stored: see `decode_vector`) with its chunk id, in id order.
    pub fn all_vectors(&self, mut each: impl FnMut(i64, &[u8])) -> anyhow::Result<()> {
        let mut stmt = self.db.prepare("SELECT id, vector FROM chunk_vectors ORDER BY id")?;
        let mut rows = stmt.query([])?;
        while let Some(row) = rows.next()? {
            each(row.get(0)?, row.get_ref(1)?.as_blob()?);
        }
        Ok(())
    }

    /// The connection, for tests that look at tables directly.
    #[cfg(test)]
    pub(crate) fn db(&self) -> &Connection {
        &self.db
    }

    /// How often `term` occurs in each chunk that holds it, by chunk id
    /// ascending. It may name chunks removed since (ids are never given again):
    /// callers keep the chunks they hold. The plain form tests check against.
    #[cfg(test)]
    pub fn chunk_postings(&self, term: &str) -> anyhow::Result<Vec<(i64, u32)>> {
        postings::read(&self.db, term)
    }

    /// How often `term` occurs in each chunk after `after` that holds it
    /// (see `postings_marks`), as memory holds a list.
    pub(super) fn chunk_list_after(&self, term: &str, after: i64) -> anyhow::Result<postings::List> {
        postings::read_list_after(&self.db, term, after)
    }

    /// What says whether postings read before are still the store's
    /// (`PostingsMarks`), read in one snapshot.
    pub fn postings_marks(&self) -> anyhow::Result<PostingsMarks> {
        self.in_one_read(|| {
            Ok(PostingsMarks {
                schema: self.db.pragma_query_value(None, "schema_version", |r| r.get(0))?,
                newest_chunk: postings::newest(&self.db)?,
                meta: self.db.prepare_cached("SELECT n FROM meta_version WHERE id = 0")?.query_row([], |r| r.get(0))?,
            })
        })
    }

    /// How often `term` occurs in each file's path and tags (keyed by file rowid).
    pub fn meta_postings(&self, term: &str) -> anyhow::Result<Vec<(i64, u32)>> {
        self.postings("SELECT doc FROM meta_vocab WHERE term = ?1", term)
    }

    /// One row per occurrence, in document order (how fts5vocab's `instance`
    /// table walks a term's list), counted into runs here: no sort, no temp table.
    fn postings(&self, sql: &str, term: &str) -> anyhow::Result<Vec<(i64, u32)>> {
        let mut stmt = self.db.prepare_cached(sql)?;
        let mut rows = stmt.query([term])?;
        let mut out: Vec<(i64, u32)> = Vec::new();
        while let Some(row) = rows.next()? {
            let doc: i64 = row.get(0)?;
            match out.last_mut() {
                Some((last, n)) if *last == doc => *n += 1,
                _ => out.push((doc, 1)),
            }
        }
        // Guards against an order the virtual table does not promise.
        if out.windows(2).any(|w| w[0].0 >= w[1].0) {
            out.sort_unstable();
            let mut merged: Vec<(i64, u32)> = Vec::with_capacity(out.len());
            for (doc, n) in out {
                match merged.last_mut() {
                    Some((last, m)) if *last == doc => *m += n,
                    _ => merged.push((doc, n)),
                }
            }
            out = merged;
        }
        Ok(out)
    }
}

/// Whether the store has a table of this name.
/// Whether the schema holds a `kind` (`table`, `index`) named `name`.
fn has_in_schema(db: &Connection, kind: &str, name: &str) -> rusqlite::Result<bool> {
    db.query_row("SELECT count(*) FROM sqlite_master WHERE type = ?1 AND name = ?2", [kind, name], |r| {
        r.get::<_, i64>(0)
    })
    .map(|n| n > 0)
}

fn create_schema_or_migrate(db: &Connection) -> anyhow::Result<()> {
    let version: i64 = db.pragma_query_value(None, "user_version", |r| r.get(0))?;
    let empty: bool = db.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get::<_, i64>(0))? == 0;
    if empty {
        let tx = Transaction::new_unchecked(db, TransactionBehavior::Immediate)?;
        create_schema(db)?;
        db.pragma_update(None, "user_version", SCHEMA_VERSION)?;
        tx.commit()?;
        return Ok(());
    }
    refuse_newer(version)?;
    if version != SCHEMA_VERSION {
        migrate(db)?;
    }
    // An index made before the paths' version was kept gets it now (a read
    // first: most opens find it and take no write lock).
    if !has_in_schema(db, "table", "meta_version")? {
        let tx = Transaction::new_unchecked(db, TransactionBehavior::Immediate)?;
        db.execute_batch(META_VERSION)?;
        tx.commit()?;
    }
    // Likewise the tagged files' index, which `IndexStore::tagged` reads;
    // without it (a store another process keeps busy) that read scans the
    // files' rows instead, so failing to make it fails nothing.
    if !has_in_schema(db, "index", "files_tagged")? {
        let made = Transaction::new_unchecked(db, TransactionBehavior::Immediate)
            .and_then(|tx| db.execute_batch(FILES_TAGGED).and_then(|()| tx.commit()));
        if let Err(e) = made {
            tracing::warn!(error = %e, "could not add the tagged files' index; tags are read by a scan");
        }
    }
    Ok(())
}

/// The files an agent tagged, apart, so a search reads them without
/// scanning every file's row (`IndexStore::tagged`).
const FILES_TAGGED: &str = "CREATE INDEX IF NOT EXISTS files_tagged ON files(task, related)
    WHERE task IS NOT NULL OR related IS NOT NULL;";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_whole_index_file_is_hinted_a_window_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index.db");
        assert_eq!(warm(&path).unwrap(), 0, "a file not made yet is not an error");
        // Two whole windows and a part of a third.
        let len = 2 * WARM_WINDOW + 5;
        std::fs::File::create(&path).unwrap().set_len(len).unwrap();
        let hinted = warm(&path).unwrap();
        if cfg!(any(target_os = "linux", target_os = "android")) {
            assert_eq!(hinted, len);
        } else {
            assert_eq!(hinted, 0);
        }
    }

    #[test]
    fn blobs_chunks_terms_and_tags_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let store = IndexStore::open(&dir.path().join("index.db")).unwrap();
        let sha = [7u8; 32];
        let chunk = |text: &str| NewChunk {
            first_line: 1,
            last_line: 2,
            text: text.into(),
            words: CountedTerms::of(text),
            vector: Some(vec![0.5, -0.25]),
        };
        let ids =
            store.put_blob(&sha, Some("test"), &[chunk("retry failedUpload retry"), chunk("other words")]).unwrap();
        store.put_file("/a/x.rs", &sha, 10, 1, Some("agent")).unwrap();
        store.put_file("/a/y.rs", &sha, 10, 1, None).unwrap();
        assert!(store.has_blob(&sha).unwrap());
        let chunks = store.chunks_of(&sha).unwrap();
        assert_eq!(chunks.iter().map(|c| c.id).collect::<Vec<_>>(), ids);
        assert_eq!(chunks.len(), 2);
        let postings = store.chunk_postings(&crate::index::terms::stem("retry")).unwrap();
        assert_eq!(postings, vec![(chunks[0].id, 2)]);
        assert_eq!(store.chunk_postings("upload").unwrap().len(), 1);
        let v = store.chunk_vector(chunks[0].id).unwrap().unwrap();
        assert!((v[0] - 0.5).abs() < 0.01 && (v[1] + 0.25).abs() < 0.01, "{v:?}");
        let mut all = Vec::new();
        store.all_chunks(|blob, meta| all.push((blob.to_vec(), meta))).unwrap();
        assert_eq!(all.len(), 2);
        assert!(store.tag("/a/x.rs", Some("auth bug"), None).unwrap());
        let x = store.file_rowid("/a/x.rs").unwrap().unwrap();
        assert!(store.meta_postings("auth").unwrap().iter().any(|(r, _)| *r == x));
        assert!(store.meta_postings("agent").unwrap().iter().any(|(r, _)| *r == x));
        assert_eq!(store.files_under("/a").unwrap().len(), 2);
        assert_eq!(store.files_under("/a/x.rs").unwrap().len(), 1);
        store.remove_file("/a/x.rs").unwrap();
        assert!(!store.drop_blob_if_orphan(&sha).unwrap());
        store.remove_file("/a/y.rs").unwrap();
        assert_eq!(store.collect_garbage().unwrap(), 1);
        // The removed chunks' postings may stay until a merge; their ids are never given again.
        assert!(store.chunks_of(&sha).unwrap().is_empty());
        let again = store.put_blob(&[8u8; 32], None, &[chunk("retry later")]).unwrap();
        assert!(again[0] > *ids.iter().max().unwrap(), "{again:?} after {ids:?}");
        let retry = store.chunk_postings(&crate::index::terms::stem("retry")).unwrap();
        assert_eq!(retry.last(), Some(&(again[0], 1)));
        let mut vectors = Vec::new();
        store.all_vectors(|id, _| vectors.push(id)).unwrap();
        assert_eq!(vectors, again, "the removed chunks' vectors are gone");
    }

    #[test]
    fn a_write_keeps_its_checkpoints_and_rolls_back_the_rest_when_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let store = IndexStore::open(&dir.path().join("index.db")).unwrap();
        let chunk = |text: &str| NewChunk {
            first_line: 1,
            last_line: 1,
            text: text.into(),
            words: CountedTerms::of(text),
            vector: None,
        };
        {
            let writing = store.writing().unwrap();
            store.put_blob(&[1u8; 32], None, &[chunk("kept after checkpoint")]).unwrap();
            store.put_file("/a/kept.rs", &[1u8; 32], 5, 1, None).unwrap();
            writing.checkpoint().unwrap();
            store.put_blob(&[2u8; 32], None, &[chunk("lost when dropped")]).unwrap();
            store.put_file("/a/lost.rs", &[2u8; 32], 5, 1, None).unwrap();
            // Dropped without `commit`, as on an error's early return.
        }
        assert!(store.db.is_autocommit(), "no transaction is left open");
        assert!(store.file("/a/kept.rs").unwrap().is_some());
        assert!(store.file("/a/lost.rs").unwrap().is_none());
        assert!(!store.has_blob(&[2u8; 32]).unwrap());
        assert_eq!(store.chunk_postings("checkpoint").unwrap().len(), 1, "the flushed postings stay");
        assert!(store.chunk_postings("dropped").unwrap().is_empty(), "the pending postings went with the rest");
        // A failing step in `in_transaction` leaves nothing either.
        let failed: anyhow::Result<()> = store.in_transaction(|| {
            store.put_file("/a/failed.rs", &[1u8; 32], 5, 1, None)?;
            anyhow::bail!("the step failed")
        });
        assert!(failed.is_err());
        assert!(store.file("/a/failed.rs").unwrap().is_none());
        let writing = store.writing().unwrap();
        store.put_file("/a/committed.rs", &[1u8; 32], 5, 1, None).unwrap();
        writing.commit().unwrap();
        assert!(store.file("/a/committed.rs").unwrap().is_some());
    }

    #[test]
    fn an_older_schema_is_rebuilt_and_keeps_tags() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index.db");
        {
            let db = Connection::open(&path).unwrap();
            db.execute_batch(
                "CREATE TABLE files (path TEXT PRIMARY KEY, blob BLOB NOT NULL, size INTEGER NOT NULL, mtime INTEGER NOT NULL,
                     created_by TEXT, task TEXT, related TEXT);
                 CREATE TABLE chunks (id INTEGER PRIMARY KEY, blob BLOB NOT NULL, first_line INTEGER NOT NULL,
                     last_line INTEGER NOT NULL, text TEXT NOT NULL, words INTEGER NOT NULL, vector BLOB);
                 INSERT INTO files VALUES ('/a.rs', x'07', 3, 5, 'agent', 'auth bug', NULL);",
            )
            .unwrap();
        }
        let store = IndexStore::open(&path).unwrap();
        let row = store.file("/a.rs").unwrap().unwrap();
        assert_eq!((row.mtime, row.task.as_deref(), row.created_by.as_deref()), (-2, Some("auth bug"), Some("agent")));
        let rowid = store.file_rowid("/a.rs").unwrap().unwrap();
        assert!(store.meta_postings("auth").unwrap().iter().any(|(r, _)| *r == rowid));
        drop(store);
        // Opening again changes nothing.
        let store = IndexStore::open(&path).unwrap();
        assert_eq!(store.file("/a.rs").unwrap().unwrap().mtime, -2);
    }

    #[test]
    fn a_newer_schema_is_left_as_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index.db");
        drop(IndexStore::open(&path).unwrap());
        {
            let db = Connection::open(&path).unwrap();
            db.execute_batch("INSERT INTO files (path, blob, size, mtime) VALUES ('/a.rs', x'07', 3, 5)").unwrap();
            db.pragma_update(None, "user_version", SCHEMA_VERSION + 1).unwrap();
        }
        let error = IndexStore::open(&path).err().expect("a newer index was opened").to_string();
        assert!(error.contains("made by a newer ctxfs"), "{error}");
        let db = Connection::open(&path).unwrap();
        let version: i64 = db.pragma_query_value(None, "user_version", |r| r.get(0)).unwrap();
        let files: i64 = db.query_row("SELECT count(*) FROM files", [], |r| r.get(0)).unwrap();
        assert_eq!((version, files), (SCHEMA_VERSION + 1, 1));
    }
}
