//! Where a session's results are kept in full.
//!
//! `ResultStore` is the seam: the in-memory store serves tests and one-shot
//! calls; a durable store keeps results across restarts. Neither decides
//! what the model sees.

use std::collections::HashMap;

/// Keeps every result's full text by id.
pub trait ResultStore: Send {
    fn put(&mut self, id: u64, tool: &str, text: &str) -> anyhow::Result<()>;
    fn get(&self, id: u64) -> anyhow::Result<Option<String>>;
    /// The highest id stored, so a reopened session goes on from there.
    fn last_id(&self) -> Option<u64>;
}

/// Results in memory, for tests and one-shot calls.
#[derive(Default)]
pub struct MemoryStore {
    results: HashMap<u64, String>,
}

impl ResultStore for MemoryStore {
    fn put(&mut self, id: u64, _tool: &str, text: &str) -> anyhow::Result<()> {
        self.results.insert(id, text.to_string());
        Ok(())
    }

    fn get(&self, id: u64) -> anyhow::Result<Option<String>> {
        Ok(self.results.get(&id).cloned())
    }

    fn last_id(&self) -> Option<u64> {
        self.results.keys().max().copied()
    }
}

/// Results in an SQLite database under the data directory (WAL mode), so
/// recall answers for as long as the session exists, across restarts.
/// Only the texts live there; nothing is cached in memory.
pub struct SqliteStore {
    db: rusqlite::Connection,
    session: String,
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` for `session`.
    pub fn open(path: &std::path::Path, session: &str) -> anyhow::Result<SqliteStore> {
        let db = rusqlite::Connection::open(path)?;
        db.busy_timeout(std::time::Duration::from_secs(10))?;
        db.pragma_update(None, "journal_mode", "WAL")?;
        db.pragma_update(None, "synchronous", "NORMAL")?;
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
                 PRIMARY KEY (session, id)
             ) WITHOUT ROWID;",
        )?;
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs();
        db.execute("INSERT OR IGNORE INTO sessions (id, created) VALUES (?1, ?2)", rusqlite::params![session, now as i64])?;
        Ok(SqliteStore { db, session: session.to_string() })
    }

    /// Whether a session was ever opened in the database at `path`.
    pub fn exists(path: &std::path::Path, session: &str) -> anyhow::Result<bool> {
        if !path.exists() {
            return Ok(false);
        }
        let db = rusqlite::Connection::open(path)?;
        let found: Option<i64> = db
            .query_row("SELECT 1 FROM sessions WHERE id = ?1", [session], |row| row.get(0))
            .map(Some)
            .or_else(|e| if e == rusqlite::Error::QueryReturnedNoRows { Ok(None) } else { Err(e) })
            .or_else(|e| if e.to_string().contains("no such table") { Ok(None) } else { Err(e) })?;
        Ok(found.is_some())
    }
}

impl ResultStore for SqliteStore {
    fn put(&mut self, id: u64, tool: &str, text: &str) -> anyhow::Result<()> {
        self.db
            .prepare_cached("INSERT OR REPLACE INTO results (session, id, tool, text) VALUES (?1, ?2, ?3, ?4)")?
            .execute(rusqlite::params![self.session, id as i64, tool, text])?;
        Ok(())
    }

    fn get(&self, id: u64) -> anyhow::Result<Option<String>> {
        let mut stmt = self.db.prepare_cached("SELECT text FROM results WHERE session = ?1 AND id = ?2")?;
        let mut rows = stmt.query(rusqlite::params![self.session, id as i64])?;
        Ok(match rows.next()? {
            Some(row) => Some(row.get(0)?),
            None => None,
        })
    }

    fn last_id(&self) -> Option<u64> {
        self.db
            .query_row("SELECT MAX(id) FROM results WHERE session = ?1", [&self.session], |row| row.get::<_, Option<i64>>(0))
            .ok()
            .flatten()
            .map(|id| id as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_keeps_results_across_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sessions.db");
        {
            let mut store = SqliteStore::open(&path, "s1").unwrap();
            store.put(1, "read", "[#0001]\nhello").unwrap();
            store.put(2, "grep", "[#0002]\nworld").unwrap();
        }
        assert!(SqliteStore::exists(&path, "s1").unwrap());
        assert!(!SqliteStore::exists(&path, "s2").unwrap());
        let store = SqliteStore::open(&path, "s1").unwrap();
        assert_eq!(store.last_id(), Some(2));
        assert_eq!(store.get(1).unwrap().as_deref(), Some("[#0001]\nhello"));
        assert_eq!(store.get(3).unwrap(), None);
        let other = SqliteStore::open(&path, "s2").unwrap();
        assert_eq!(other.get(1).unwrap(), None);
        assert_eq!(other.last_id(), None);
    }
}
