//! A damaged index store made usable again: the file emptied in place
//! (`sqlite::empty_in_place`) with the tags it still holds kept; not how
//! damage is told (`sqlite::is_damage`), the store's schema (`store`), nor
//! when an index decides to mend (`hybrid::Index::mended`).
//!
//! The index is a cache of the files it describes, with one exception: a
//! file's creator and the task and related notes an agent tagged it with
//! live nowhere else. So before the file is emptied, every row that carries
//! one of them is read back (as far as the damage lets a reader go), and
//! written into the new store, which reads each file again at its next walk.
//!
//! The file is emptied where it is, by SQLite's own reset (the
//! `SQLITE_DBCONFIG_RESET_DATABASE` flag, then `VACUUM`), not renamed or
//! deleted: other processes may have it open, and a renamed database whose
//! write-ahead log another process still names would lose that log's pages
//! or take the new file's. Those processes see an empty store at their next
//! read, as after any other process's change, and walk again.

use super::store::IndexStore;
#[cfg(test)]
use crate::sqlite::is_damage;
use rusqlite::{Connection, OpenFlags};
use std::path::Path;

/// What only the index holds of one file: who created it and how it was tagged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Kept {
    pub(crate) path: String,
    pub(crate) created_by: Option<String>,
    pub(crate) task: Option<String>,
    pub(crate) related: Option<String>,
}

impl Kept {
    /// The row of a `SELECT path, created_by, task, related`.
    pub(crate) fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Kept> {
        Ok(Kept { path: row.get(0)?, created_by: row.get(1)?, task: row.get(2)?, related: row.get(3)? })
    }
}

/// The tags a damaged store gave back before it was emptied.
#[derive(Debug, Default)]
pub(crate) struct Salvage {
    pub(crate) kept: Vec<Kept>,
    /// Why the reading stopped before the last row, if it did: some tags
    /// may then be lost, and the caller says so.
    pub(crate) cut_short: Option<String>,
}

/// Empties the damaged store at `path` in place, makes its schema again and
/// writes back the tags it could still read; answers the new store and
/// what was salvaged.
pub(crate) fn empty_and_reopen(path: &Path) -> anyhow::Result<(IndexStore, Salvage)> {
    let salvage = salvage(path);
    crate::sqlite::empty_in_place(path)?;
    let store = IndexStore::open(path)?;
    store.put_kept(&salvage.kept)?;
    Ok((store, salvage))
}

/// Reads every row that carries a creator or tags, in rowid order, until the
/// end or the first page the damage makes unreadable.
fn salvage(path: &Path) -> Salvage {
    let mut out = Salvage::default();
    let read = (|| -> rusqlite::Result<()> {
        let db = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)?;
        let mut rows = db.prepare(
            "SELECT path, created_by, task, related FROM files
             WHERE created_by IS NOT NULL OR task IS NOT NULL OR related IS NOT NULL",
        )?;
        let mut rows = rows.query([])?;
        while let Some(row) = rows.next()? {
            out.kept.push(Kept::from_row(row)?);
        }
        Ok(())
    })();
    if let Err(e) = read {
        out.cut_short = Some(e.to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sqlite::spoiling::{root_page, spoil_page};

    fn store_with_tags(path: &Path) {
        let store = IndexStore::open(path).unwrap();
        store.put_file("/w/a.rs", &[1; 32], 10, 5, Some("agent-one")).unwrap();
        store.put_file("/w/b.rs", &[2; 32], 10, 5, None).unwrap();
        store.put_file("/w/c.rs", &[3; 32], 10, 5, None).unwrap();
        assert!(store.tag("/w/c.rs", Some("auth bug"), Some("login flow")).unwrap());
    }

    #[test]
    fn damage_is_told_apart_from_other_failures() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index.db");
        std::fs::write(&path, vec![0x5A; 8192]).unwrap();
        let not_a_database = IndexStore::open(&path).err().expect("garbage is not a database");
        assert!(is_damage(&not_a_database), "{not_a_database:#}");
        let busy = anyhow::Error::new(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
            None,
        ));
        assert!(!is_damage(&busy));
        assert!(!is_damage(&anyhow::anyhow!("database disk image is malformed")), "the text alone is not the code");
    }

    #[test]
    fn a_damaged_store_is_emptied_in_place_with_its_tags_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index.db");
        store_with_tags(&path);
        // The blobs' table is damaged; the files' rows are still readable.
        spoil_page(&path, root_page(&path, "blobs"));
        let damaged = IndexStore::open(&path).and_then(|s| s.has_blob(&[1; 32]));
        assert!(damaged.as_ref().is_err_and(is_damage), "{damaged:?}");

        let (store, salvage) = empty_and_reopen(&path).unwrap();
        assert_eq!(salvage.cut_short, None);
        assert_eq!(
            salvage.kept.iter().map(|k| k.path.as_str()).collect::<Vec<_>>(),
            ["/w/a.rs", "/w/c.rs"],
            "only rows with something of their own"
        );
        assert!(!store.has_blob(&[1; 32]).unwrap(), "the store is empty and readable");
        let a = store.file("/w/a.rs").unwrap().expect("kept");
        assert_eq!((a.created_by.as_deref(), a.mtime), (Some("agent-one"), -2), "read again at the next walk");
        let c = store.file("/w/c.rs").unwrap().expect("kept");
        assert_eq!((c.task.as_deref(), c.related.as_deref()), (Some("auth bug"), Some("login flow")));
        assert!(store.file("/w/b.rs").unwrap().is_none(), "a row with nothing of its own is found by the walk");
        drop(store);
        // The same file, still in WAL mode, opens as any index does.
        let journal: String =
            Connection::open(&path).unwrap().pragma_query_value(None, "journal_mode", |r| r.get(0)).unwrap();
        assert_eq!(journal, "wal");
        assert!(IndexStore::open(&path).unwrap().file("/w/c.rs").unwrap().is_some());
    }

    #[test]
    fn a_file_that_is_not_a_database_becomes_an_empty_store() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index.db");
        store_with_tags(&path);
        spoil_page(&path, 1);
        let (store, salvage) = empty_and_reopen(&path).unwrap();
        assert!(salvage.kept.is_empty());
        assert!(salvage.cut_short.is_some(), "the loss is told");
        assert!(store.file("/w/a.rs").unwrap().is_none());
        store.put_file("/w/d.rs", &[4; 32], 1, 1, None).unwrap();
        assert!(store.file("/w/d.rs").unwrap().is_some(), "and takes new rows");
    }
}
