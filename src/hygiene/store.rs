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
///
/// Inserts go to a writer thread that commits them in batches (one
/// transaction per burst instead of one per result); until a result is
/// committed, `get` answers it from the small pending map. Dropping the store
/// waits for every pending result to be written.
pub struct SqliteStore {
    reader: rusqlite::Connection,
    session: String,
    pending: std::sync::Arc<std::sync::Mutex<HashMap<u64, String>>>,
    sender: Option<std::sync::mpsc::SyncSender<(u64, String, String)>>,
    writer: Option<std::thread::JoinHandle<()>>,
    /// The highest id put, so `last_id` needs no query while results are pending.
    last_put: Option<u64>,
    /// Ids up to this one are taken, recorded before use: after a crash that
    /// lost pending results, a reopened session goes on past them, so no id
    /// is ever given twice.
    reserved: u64,
}

/// Ids reserved at a time (one synchronous write per block).
const ID_BLOCK: u64 = 1024;

/// How long the writer waits for more results to commit with the first one.
const COALESCE: std::time::Duration = std::time::Duration::from_millis(2);

/// How many results may wait for the writer before `put` waits too.
const PENDING_LIMIT: usize = 1024;

fn connect(path: &std::path::Path) -> anyhow::Result<rusqlite::Connection> {
    let db = rusqlite::Connection::open(path)?;
    db.busy_timeout(std::time::Duration::from_secs(10))?;
    db.pragma_update(None, "journal_mode", "WAL")?;
    db.pragma_update(None, "synchronous", "NORMAL")?;
    Ok(db)
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` for `session`.
    pub fn open(path: &std::path::Path, session: &str) -> anyhow::Result<SqliteStore> {
        let db = connect(path)?;
        db.execute_batch(
            "CREATE TABLE IF NOT EXISTS sessions (
                 id TEXT PRIMARY KEY,
                 created INTEGER NOT NULL
             );
             CREATE TABLE IF NOT EXISTS reservations (
                 session TEXT PRIMARY KEY,
                 reserved INTEGER NOT NULL
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
        db.execute(
            "INSERT OR IGNORE INTO sessions (id, created) VALUES (?1, ?2)",
            rusqlite::params![session, now as i64],
        )?;
        let pending: std::sync::Arc<std::sync::Mutex<HashMap<u64, String>>> = Default::default();
        let (sender, receiver) = std::sync::mpsc::sync_channel::<(u64, String, String)>(PENDING_LIMIT);
        let writer = {
            let pending = pending.clone();
            let session = session.to_string();
            let mut db = connect(path)?;
            std::thread::Builder::new().name("ctxfs-store".into()).spawn(move || {
                while let Ok(first) = receiver.recv() {
                    // Results that follow within `COALESCE` share one commit: an
                    // agent's calls come a fraction of a millisecond apart, and a
                    // commit costs more than an insert.
                    // Sleeping instead of waiting on the channel also means the
                    // results sent meanwhile wake nobody.
                    std::thread::sleep(COALESCE);
                    let mut batch = vec![first];
                    batch.extend(receiver.try_iter().take(255));
                    let mut write = || -> rusqlite::Result<()> {
                        let tx = db.transaction()?;
                        {
                            let mut insert = tx.prepare_cached(
                                "INSERT OR REPLACE INTO results (session, id, tool, text) VALUES (?1, ?2, ?3, ?4)",
                            )?;
                            for (id, tool, text) in &batch {
                                insert.execute(rusqlite::params![session, *id as i64, tool, text])?;
                            }
                        }
                        tx.commit()
                    };
                    // A busy or briefly failing database gets a few more tries.
                    let mut written = write();
                    for attempt in 1..=3 {
                        if written.is_ok() {
                            break;
                        }
                        std::thread::sleep(std::time::Duration::from_millis(50 * attempt));
                        written = write();
                    }
                    if let Err(e) = written {
                        tracing::error!(error = %e, "could not store {} results; they stay in memory", batch.len());
                        continue;
                    }
                    let mut pending = pending.lock().unwrap_or_else(|e| e.into_inner());
                    for (id, _, _) in &batch {
                        pending.remove(id);
                    }
                }
            })?
        };
        let reserved: Option<i64> = db
            .query_row("SELECT reserved FROM reservations WHERE session = ?1", [session], |row| row.get(0))
            .map(Some)
            .or_else(|e| if e == rusqlite::Error::QueryReturnedNoRows { Ok(None) } else { Err(e) })?;
        let mut store = SqliteStore {
            reader: db,
            session: session.to_string(),
            pending,
            sender: Some(sender),
            writer: Some(writer),
            last_put: None,
            reserved: 0,
        };
        let stored = store.stored_last_id();
        let reserved = reserved.map(|r| r as u64);
        store.last_put = match (stored, reserved) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b).filter(|n| *n > 0),
        };
        store.reserved = store.last_put.unwrap_or(0);
        Ok(store)
    }

    fn stored_last_id(&self) -> Option<u64> {
        self.reader
            .query_row("SELECT MAX(id) FROM results WHERE session = ?1", [&self.session], |row| {
                row.get::<_, Option<i64>>(0)
            })
            .ok()
            .flatten()
            .map(|id| id as u64)
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

impl Drop for SqliteStore {
    fn drop(&mut self) {
        // Closing the channel lets the writer finish what is pending, then stop.
        self.sender.take();
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
        // Everything is written: a reopened session goes on right after the last id.
        if let Some(last) = self.last_put {
            let _ = self.reserve(last);
        }
    }
}

impl SqliteStore {
    fn reserve(&self, upto: u64) -> rusqlite::Result<usize> {
        self.reader.execute(
            "INSERT INTO reservations (session, reserved) VALUES (?1, ?2)
             ON CONFLICT(session) DO UPDATE SET reserved = excluded.reserved",
            rusqlite::params![self.session, upto as i64],
        )
    }
}

impl ResultStore for SqliteStore {
    fn put(&mut self, id: u64, tool: &str, text: &str) -> anyhow::Result<()> {
        if id > self.reserved {
            self.reserved = id + ID_BLOCK;
            self.reserve(self.reserved)?;
        }
        self.pending.lock().unwrap_or_else(|e| e.into_inner()).insert(id, text.to_string());
        let sender = self.sender.as_ref().ok_or_else(|| anyhow::anyhow!("the store is closed"))?;
        sender
            .send((id, tool.to_string(), text.to_string()))
            .map_err(|_| anyhow::anyhow!("the store's writer stopped"))?;
        self.last_put = Some(self.last_put.map_or(id, |last| last.max(id)));
        Ok(())
    }

    fn get(&self, id: u64) -> anyhow::Result<Option<String>> {
        if let Some(text) = self.pending.lock().unwrap_or_else(|e| e.into_inner()).get(&id) {
            return Ok(Some(text.clone()));
        }
        let mut stmt = self.reader.prepare_cached("SELECT text FROM results WHERE session = ?1 AND id = ?2")?;
        let mut rows = stmt.query(rusqlite::params![self.session, id as i64])?;
        Ok(match rows.next()? {
            Some(row) => Some(row.get(0)?),
            None => None,
        })
    }

    fn last_id(&self) -> Option<u64> {
        self.last_put
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

    #[test]
    fn a_crash_never_lets_an_id_be_given_twice() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sessions.db");
        let mut store = SqliteStore::open(&path, "s").unwrap();
        for id in 1..=5 {
            store.put(id, "read", "text").unwrap();
        }
        // A crash: nothing is flushed or recorded on the way out.
        std::mem::forget(store);
        let reopened = SqliteStore::open(&path, "s").unwrap();
        assert!(reopened.last_id().unwrap() >= 5, "ids up to 5 were given; the next must be past them");
    }

    #[test]
    fn a_clean_close_goes_on_right_after_the_last_id() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sessions.db");
        let mut store = SqliteStore::open(&path, "s").unwrap();
        store.put(1, "read", "one").unwrap();
        store.put(2, "read", "two").unwrap();
        drop(store);
        let reopened = SqliteStore::open(&path, "s").unwrap();
        assert_eq!(reopened.last_id(), Some(2));
        assert_eq!(reopened.get(2).unwrap().as_deref(), Some("two"));
    }
}
