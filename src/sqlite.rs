//! Opening ctxfs's own SQLite databases (stored results, the search index, memory) the one way
//! they are shared between sessions and processes, telling their failures apart, and emptying a
//! damaged one in place. No schemas and no queries live here.

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

/// Whether `error` says the database's file is damaged: SQLite found a page it
/// cannot read as what it should be, or a file that is not a database.
pub fn is_damage(error: &anyhow::Error) -> bool {
    matches!(failure_code(error), Some(rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase))
}

/// SQLite's code for the failure behind `error`, if SQLite failed.
fn failure_code(error: &anyhow::Error) -> Option<rusqlite::ErrorCode> {
    error.chain().find_map(|cause| match cause.downcast_ref::<rusqlite::Error>() {
        Some(rusqlite::Error::SqliteFailure(failure, _)) => Some(failure.code),
        _ => None,
    })
}

/// Why a store failed, in words for the model: the kind of failure, not
/// SQLite's message (which stderr has).
pub fn failure_in_words(error: &anyhow::Error) -> &'static str {
    use rusqlite::ErrorCode::*;
    match failure_code(error) {
        Some(DiskFull) => "the disk that holds it is full",
        Some(DatabaseBusy | DatabaseLocked) => "another process kept it busy",
        Some(ReadOnly | PermissionDenied | CannotOpen) => "its file cannot be written",
        Some(DatabaseCorrupt | NotADatabase) => "its file is damaged",
        Some(SystemIoFailure) => "the disk failed to read or write it",
        _ => "it failed",
    }
}

/// Empties the database at `path` in place with SQLite's reset, which
/// works on a file however damaged, keeping its journal mode. In place,
/// not renamed or deleted: other processes may have it open, and a renamed
/// database whose write-ahead log another process still names would lose
/// that log's pages or take the new file's. They see an empty database at
/// their next read.
pub fn empty_in_place(path: &Path) -> anyhow::Result<()> {
    let db = rusqlite::Connection::open(path)?;
    db.busy_timeout(Duration::from_secs(10))?;
    // SQLite's recipe: read the schema first (errors and all), so that a
    // database in WAL mode stays in it after the reset.
    let _ = db.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get::<_, i64>(0));
    db.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_RESET_DATABASE, true)?;
    let emptied = db.execute_batch("VACUUM");
    db.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_RESET_DATABASE, false)?;
    emptied?;
    Ok(())
}

/// Damage made on purpose, for the tests of what a damaged database becomes.
#[cfg(test)]
pub(crate) mod spoiling {
    use rusqlite::Connection;
    use std::path::Path;

    /// Writes garbage over page `page` (1-based) of the database at `path`,
    /// whose connections are all closed (so its log is in the file).
    pub(crate) fn spoil_page(path: &Path, page: u64) {
        use std::io::{Seek, Write};
        let size: i64 = Connection::open(path).unwrap().pragma_query_value(None, "page_size", |r| r.get(0)).unwrap();
        let size = size as u64;
        let mut file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        file.seek(std::io::SeekFrom::Start((page - 1) * size)).unwrap();
        file.write_all(&vec![0xA5; size as usize]).unwrap();
        file.sync_all().unwrap();
    }

    /// The `nth` (from 0) leaf page of a table or index of the database at `path`.
    pub(crate) fn leaf_page(path: &Path, name: &str, nth: i64) -> u64 {
        Connection::open(path)
            .unwrap()
            .query_row(
                "SELECT pageno FROM dbstat WHERE name = ?1 AND pagetype = 'leaf' ORDER BY pageno LIMIT 1 OFFSET ?2",
                rusqlite::params![name, nth],
                |r| r.get::<_, i64>(0),
            )
            .unwrap() as u64
    }

    /// The first page of a table or index of the database at `path`.
    pub(crate) fn root_page(path: &Path, name: &str) -> u64 {
        Connection::open(path)
            .unwrap()
            .query_row("SELECT rootpage FROM sqlite_master WHERE name = ?1", [name], |r| r.get::<_, i64>(0))
            .unwrap() as u64
    }
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
