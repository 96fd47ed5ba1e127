//! Opening ctxfs's own SQLite databases (stored results, the search index, memory) the one way
//! they are shared between sessions and processes. No schemas and no queries live here.

use anyhow::Context;
use std::path::Path;
use std::time::Duration;

/// Opens the database at `path`, making it and its directory on first use: write-ahead logging
/// (readers of other processes go on while one writes), `synchronous = NORMAL` (a commit is
/// durable against a crash of the process; WAL keeps the file whole on power loss), and a busy
/// wait of ten seconds, so writers take turns instead of failing.
pub fn open_shared(path: &Path) -> anyhow::Result<rusqlite::Connection> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
    }
    let db = rusqlite::Connection::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    db.busy_timeout(Duration::from_secs(10))?;
    // Turning a new database to WAL needs it alone, and SQLite answers "busy" at once (without
    // its busy wait) while another connection is doing the same: try again for a while.
    let mut tries = 0;
    loop {
        match db.pragma_update(None, "journal_mode", "WAL") {
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::DatabaseBusy && tries < 1000 =>
            {
                tries += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            other => break other.context("setting the journal mode")?,
        }
    }
    db.pragma_update(None, "synchronous", "NORMAL")?;
    Ok(db)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_new_database_is_made_in_wal_mode_with_its_directory() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b/c.db");
        let db = super::open_shared(&path).unwrap();
        let mode: String = db.pragma_query_value(None, "journal_mode", |r| r.get(0)).unwrap();
        assert_eq!(mode, "wal");
        assert!(path.exists());
    }

    /// Several connections making the same new database at once all succeed.
    #[test]
    fn connections_racing_to_make_a_database_all_open_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("race.db");
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let path = path.clone();
                std::thread::spawn(move || super::open_shared(&path).map(|_| ()))
            })
            .collect();
        for handle in handles {
            handle.join().unwrap().unwrap();
        }
    }
}
