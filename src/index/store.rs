//! The index's database: files, content blobs, chunks, full-text terms and
//! vectors, in SQLite (WAL) under the data directory.
//!
//! Content is keyed by its SHA-256, so a file in many places or unchanged
//! across a move is chunked and embedded once. Terms live in FTS5 tables
//! (contentless), read back per term through `fts5vocab` so the caller can
//! compute BM25 with statistics of its own choosing. This module stores and
//! fetches; it does not rank and does not know about views.

use rusqlite::{params, Connection, OptionalExtension};
use std::collections::HashMap;
use std::path::Path;

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

/// One chunk of a blob, ready to store.
#[derive(Debug, Clone)]
pub struct NewChunk {
    pub first_line: usize,
    pub last_line: usize,
    pub text: String,
    /// The chunk's words, split for code (identifiers on case and `_`), lowercase.
    pub words: Vec<String>,
    pub vector: Option<Vec<f32>>,
}

/// A stored chunk, as ranking needs it.
#[derive(Debug, Clone)]
pub struct ChunkMeta {
    pub id: i64,
    pub first_line: usize,
    pub last_line: usize,
    /// Its length in words, for BM25.
    pub words: usize,
}

pub struct IndexStore {
    db: Connection,
}

fn vector_bytes(vector: &[f32]) -> Vec<u8> {
    vector.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn vector_from(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}

impl IndexStore {
    pub fn open(path: &Path) -> anyhow::Result<IndexStore> {
        let db = Connection::open(path)?;
        db.busy_timeout(std::time::Duration::from_secs(10))?;
        db.pragma_update(None, "journal_mode", "WAL")?;
        db.pragma_update(None, "synchronous", "NORMAL")?;
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
                 id INTEGER PRIMARY KEY,
                 blob BLOB NOT NULL,
                 first_line INTEGER NOT NULL,
                 last_line INTEGER NOT NULL,
                 text TEXT NOT NULL,
                 words INTEGER NOT NULL,
                 vector BLOB
             );
             CREATE INDEX IF NOT EXISTS chunks_blob ON chunks(blob);
             CREATE VIRTUAL TABLE IF NOT EXISTS chunk_terms USING fts5(words, content='', contentless_delete=1);
             CREATE VIRTUAL TABLE IF NOT EXISTS chunk_vocab USING fts5vocab(chunk_terms, 'instance');
             CREATE VIRTUAL TABLE IF NOT EXISTS meta_terms USING fts5(words, content='', contentless_delete=1);
             CREATE VIRTUAL TABLE IF NOT EXISTS meta_vocab USING fts5vocab(meta_terms, 'instance');",
        )?;
        Ok(IndexStore { db })
    }

    pub fn begin(&self) -> anyhow::Result<()> {
        self.db.execute_batch("BEGIN")?;
        Ok(())
    }

    pub fn commit(&self) -> anyhow::Result<()> {
        self.db.execute_batch("COMMIT")?;
        Ok(())
    }

    pub fn file(&self, path: &str) -> anyhow::Result<Option<FileRow>> {
        Ok(self
            .db
            .prepare_cached("SELECT path, blob, size, mtime, created_by, task, related FROM files WHERE path = ?1")?
            .query_row([path], |r| {
                Ok(FileRow {
                    path: r.get(0)?,
                    blob: r.get(1)?,
                    size: r.get(2)?,
                    mtime: r.get(3)?,
                    created_by: r.get(4)?,
                    task: r.get(5)?,
                    related: r.get(6)?,
                })
            })
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
        let rows = stmt.query_map(params![root, prefix, upper], |r| {
            Ok(FileRow {
                path: r.get(0)?,
                blob: r.get(1)?,
                size: r.get(2)?,
                mtime: r.get(3)?,
                created_by: r.get(4)?,
                task: r.get(5)?,
                related: r.get(6)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Records a file's content (and keeps its tags), refreshing its path-and-tags terms.
    pub fn put_file(&self, path: &str, blob: &[u8], size: i64, mtime: i64, created_by: Option<&str>) -> anyhow::Result<()> {
        self.db
            .prepare_cached(
                "INSERT INTO files (path, blob, size, mtime, created_by) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT(path) DO UPDATE SET blob = excluded.blob, size = excluded.size, mtime = excluded.mtime,
                     created_by = COALESCE(files.created_by, excluded.created_by)",
            )?
            .execute(params![path, blob, size, mtime, created_by])?;
        self.refresh_meta(path)
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

    fn refresh_meta(&self, path: &str) -> anyhow::Result<()> {
        let Some(row) = self.file(path)? else { return Ok(()) };
        let rowid: i64 = self.db.query_row("SELECT rowid FROM files WHERE path = ?1", [path], |r| r.get(0))?;
        let text = [Some(row.path.as_str()), row.created_by.as_deref(), row.task.as_deref(), row.related.as_deref()]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(" ");
        let words = crate::tools::search::words(&text).join(" ");
        self.db.prepare_cached("DELETE FROM meta_terms WHERE rowid = ?1")?.execute([rowid])?;
        self.db.prepare_cached("INSERT INTO meta_terms (rowid, words) VALUES (?1, ?2)")?.execute(params![rowid, words])?;
        Ok(())
    }

    pub fn remove_file(&self, path: &str) -> anyhow::Result<()> {
        let rowid: Option<i64> =
            self.db.query_row("SELECT rowid FROM files WHERE path = ?1", [path], |r| r.get(0)).optional()?;
        if let Some(rowid) = rowid {
            self.db.execute("DELETE FROM meta_terms WHERE rowid = ?1", [rowid])?;
            self.db.execute("DELETE FROM files WHERE rowid = ?1", [rowid])?;
        }
        Ok(())
    }

    /// The files' rowids by path, for the path-and-tags ranking.
    pub fn file_rowid(&self, path: &str) -> anyhow::Result<Option<i64>> {
        Ok(self.db.prepare_cached("SELECT rowid FROM files WHERE path = ?1")?.query_row([path], |r| r.get(0)).optional()?)
    }

    pub fn has_blob(&self, sha: &[u8]) -> anyhow::Result<bool> {
        Ok(self.db.prepare_cached("SELECT 1 FROM blobs WHERE sha = ?1")?.exists([sha])?)
    }

    /// The embedder a blob's vectors were made with (`None`: words only).
    pub fn blob_embedder(&self, sha: &[u8]) -> anyhow::Result<Option<Option<String>>> {
        Ok(self.db.prepare_cached("SELECT embedder FROM blobs WHERE sha = ?1")?.query_row([sha], |r| r.get(0)).optional()?)
    }

    /// Stores a blob's chunks (replacing any earlier ones).
    pub fn put_blob(&self, sha: &[u8], embedder: Option<&str>, chunks: &[NewChunk]) -> anyhow::Result<()> {
        self.drop_chunks(sha)?;
        self.db
            .prepare_cached("INSERT OR REPLACE INTO blobs (sha, embedder) VALUES (?1, ?2)")?
            .execute(params![sha, embedder])?;
        for chunk in chunks {
            self.db
                .prepare_cached(
                    "INSERT INTO chunks (blob, first_line, last_line, text, words, vector) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )?
                .execute(params![
                    sha,
                    chunk.first_line as i64,
                    chunk.last_line as i64,
                    chunk.text,
                    chunk.words.len() as i64,
                    chunk.vector.as_deref().map(vector_bytes)
                ])?;
            let id = self.db.last_insert_rowid();
            self.db
                .prepare_cached("INSERT INTO chunk_terms (rowid, words) VALUES (?1, ?2)")?
                .execute(params![id, chunk.words.join(" ")])?;
        }
        Ok(())
    }

    fn drop_chunks(&self, sha: &[u8]) -> anyhow::Result<()> {
        let ids: Vec<i64> = self
            .db
            .prepare_cached("SELECT id FROM chunks WHERE blob = ?1")?
            .query_map([sha], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        for id in ids {
            self.db.prepare_cached("DELETE FROM chunk_terms WHERE rowid = ?1")?.execute([id])?;
        }
        self.db.prepare_cached("DELETE FROM chunks WHERE blob = ?1")?.execute([sha])?;
        Ok(())
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
        let mut stmt = self.db.prepare_cached("SELECT id, first_line, last_line, words FROM chunks WHERE blob = ?1 ORDER BY id")?;
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

    pub fn chunk_vector(&self, id: i64) -> anyhow::Result<Option<Vec<f32>>> {
        let bytes: Option<Vec<u8>> = self.db.prepare_cached("SELECT vector FROM chunks WHERE id = ?1")?.query_row([id], |r| r.get(0))?;
        Ok(bytes.map(|b| vector_from(&b)))
    }

    /// Every stored vector with its chunk id (for the in-memory vector table).
    pub fn all_vectors(&self, mut each: impl FnMut(i64, Vec<f32>)) -> anyhow::Result<()> {
        let mut stmt = self.db.prepare("SELECT id, vector FROM chunks WHERE vector IS NOT NULL")?;
        let mut rows = stmt.query([])?;
        while let Some(row) = rows.next()? {
            let bytes: Vec<u8> = row.get(1)?;
            each(row.get(0)?, vector_from(&bytes));
        }
        Ok(())
    }

    /// How often `term` occurs in each chunk that holds it.
    pub fn chunk_postings(&self, term: &str) -> anyhow::Result<HashMap<i64, u32>> {
        self.postings("SELECT doc, count(*) FROM chunk_vocab WHERE term = ?1 GROUP BY doc", term)
    }

    /// How often `term` occurs in each file's path and tags (keyed by file rowid).
    pub fn meta_postings(&self, term: &str) -> anyhow::Result<HashMap<i64, u32>> {
        self.postings("SELECT doc, count(*) FROM meta_vocab WHERE term = ?1 GROUP BY doc", term)
    }

    fn postings(&self, sql: &str, term: &str) -> anyhow::Result<HashMap<i64, u32>> {
        let mut stmt = self.db.prepare_cached(sql)?;
        let rows = stmt.query_map([term], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)? as u32)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blobs_chunks_terms_and_tags_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let store = IndexStore::open(&dir.path().join("index.db")).unwrap();
        let sha = [7u8; 32];
        let chunk = |text: &str| NewChunk {
            first_line: 1,
            last_line: 2,
            text: text.into(),
            words: crate::tools::search::words(text),
            vector: Some(vec![0.5, -0.25]),
        };
        store.put_blob(&sha, Some("test"), &[chunk("retry failedUpload retry"), chunk("other words")]).unwrap();
        store.put_file("/a/x.rs", &sha, 10, 1, Some("agent")).unwrap();
        store.put_file("/a/y.rs", &sha, 10, 1, None).unwrap();
        assert!(store.has_blob(&sha).unwrap());
        let chunks = store.chunks_of(&sha).unwrap();
        assert_eq!(chunks.len(), 2);
        let postings = store.chunk_postings("retry").unwrap();
        assert_eq!(postings.get(&chunks[0].id), Some(&2));
        assert_eq!(store.chunk_postings("upload").unwrap().len(), 1);
        assert_eq!(store.chunk_vector(chunks[0].id).unwrap(), Some(vec![0.5, -0.25]));
        assert!(store.tag("/a/x.rs", Some("auth bug"), None).unwrap());
        let x = store.file_rowid("/a/x.rs").unwrap().unwrap();
        assert!(store.meta_postings("auth").unwrap().contains_key(&x));
        assert!(store.meta_postings("agent").unwrap().contains_key(&x));
        assert_eq!(store.files_under("/a").unwrap().len(), 2);
        assert_eq!(store.files_under("/a/x.rs").unwrap().len(), 1);
        store.remove_file("/a/x.rs").unwrap();
        store.remove_file("/a/y.rs").unwrap();
        assert_eq!(store.collect_garbage().unwrap(), 1);
        assert!(store.chunk_postings("retry").unwrap().is_empty());
    }
}
