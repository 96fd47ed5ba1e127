//! `Overlay`: an `Fs` that serves the editor's open buffers over another `Fs`.
//!
//! An editor connection (the LSP door) keeps the documents the user has open
//! in [`Documents`]: ropes keyed by their real host path, changed in place as
//! the editor reports edits. The overlay answers `read_file`, `walk` (as
//! `Source::Bytes`), `lstat` and `resolve` from a document's buffer when it
//! is open, so read, grep and search see what the user sees, unsaved, and the
//! stale guard compares the buffer's hash.
//!
//! A write to an open document is the editor's to make: with an
//! [`EditorBridge`] the new text is handed to the editor (which shows it and
//! can undo it) and the disk is left alone; the write fails, with nothing
//! changed, when the editor refuses. Without a bridge, and for every other
//! file, writes go to the inner `Fs`. Everything else is the inner `Fs`'s.
//!
//! Positions and ranges are the editor's (line, column), with columns in a
//! negotiated unit ([`Encoding`]). Line breaks are `\n`, `\r\n` and `\r`.
//! This module knows no protocol type.
//!
//! The change count is the inner one plus the buffers' own (every open,
//! change, close and write of a document moves it), and the change feed the
//! inner one's paths plus the documents touched since (`Fs::changed_since`).

use super::{Descend, DirEntry, Expect, Fs, FsError, Kind, Meta, Resolution, Source, Visitor, WalkEntry, WalkOptions};
use crate::paths::VPath;
use ropey::Rope;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

/// How long a write waits for the editor to report an earlier edit of the
/// same document (its `didChange`) before giving up.
pub const CONFIRM_WAIT: Duration = Duration::from_secs(3);

/// Hands a change of an open document to the editor, which applies it to
/// its buffer (where the user sees it and can undo it).
pub trait EditorBridge: Send + Sync {
    /// Asks the editor to turn the document's text `old` into `new`; blocks
    /// until the editor answered or a timeout passed. `Err` says why the
    /// change was not made (or, for `NoAnswer`, may not have been).
    fn apply(&self, doc: &DocRef, old: &str, new: &str) -> Result<(), EditorFailure>;
}

/// Why a change of a file open in the editor did not happen. The access
/// layer words each for the model, with the session's path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EditorFailure {
    /// The editor answered that it did not apply the edit, maybe with its reason.
    Refused(Option<String>),
    /// The editor answered the request with an error.
    Failed(String),
    /// No answer in time: the edit may still appear in the editor.
    NoAnswer(Duration),
    /// The editor holds text and the new content is not UTF-8.
    NotText,
    /// An earlier change to the file is not confirmed by the editor yet.
    Unconfirmed,
    /// The editor's name of the file could not be used.
    BadName,
}

/// Which open document, as the editor names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocRef {
    /// The URI the editor opened it under.
    pub uri: String,
    /// The version the editor last reported.
    pub version: i32,
}

/// The unit of a column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Utf8,
    Utf16,
    Utf32,
}

impl Encoding {
    /// The width of `text` in this unit.
    pub fn len_of_str(self, text: &str) -> usize {
        match self {
            Encoding::Utf8 => text.len(),
            Encoding::Utf16 => text.chars().map(char::len_utf16).sum(),
            Encoding::Utf32 => text.chars().count(),
        }
    }
}

/// A place in a document: a zero-based line and a column in the document
/// set's [`Encoding`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Pos {
    pub line: u32,
    pub col: u32,
}

/// One reported edit: `range` replaced by `text`, or the whole text when
/// `range` is `None`.
#[derive(Debug, Clone)]
pub struct Edit {
    pub range: Option<(Pos, Pos)>,
    pub text: String,
}

/// One open document.
struct Doc {
    uri: String,
    version: i32,
    rope: Rope,
    /// The rope's bytes, made on demand and dropped at each change.
    bytes: Option<Arc<[u8]>>,
    /// The text of a change this server made and the editor accepted, shown
    /// until the editor reports its next change (which then is the truth).
    pending: Option<Arc<[u8]>>,
}

impl Doc {
    fn current(&mut self) -> Arc<[u8]> {
        if let Some(pending) = &self.pending {
            return pending.clone();
        }
        if let Some(bytes) = &self.bytes {
            return bytes.clone();
        }
        let mut out = Vec::with_capacity(self.rope.len_bytes());
        for chunk in self.rope.chunks() {
            out.extend_from_slice(chunk.as_bytes());
        }
        let bytes: Arc<[u8]> = out.into();
        self.bytes = Some(bytes.clone());
        bytes
    }

    fn len(&self) -> u64 {
        match &self.pending {
            Some(p) => p.len() as u64,
            None => self.rope.len_bytes() as u64,
        }
    }
}

type DocCell = Arc<(Mutex<Doc>, Condvar)>;

/// Counts a document's change when dropped.
struct CountOnDrop<'a>(&'a Documents, &'a Path);

impl Drop for CountOnDrop<'_> {
    fn drop(&mut self) {
        self.0.touched(self.1);
    }
}

/// The most documents the feed names; past it a reader walks.
const MAX_TOUCHED: usize = 1024;

/// The documents touched, each with the count its last touch made.
#[derive(Default)]
struct Touched {
    /// The count from which on `paths` is complete.
    floor: u64,
    paths: HashMap<PathBuf, u64>,
}

/// The documents open in the editor, keyed by real host path.
pub struct Documents {
    docs: RwLock<HashMap<PathBuf, DocCell>>,
    /// Counts every open, change and close (see `Fs::changes`).
    edits: std::sync::atomic::AtomicU64,
    /// Which documents those were (see `Fs::changed_since`).
    touched: Mutex<Touched>,
    open: AtomicUsize,
    encoding: AtomicU8,
    bridge: RwLock<Option<Arc<dyn EditorBridge>>>,
}

impl Default for Documents {
    fn default() -> Self {
        Documents {
            docs: RwLock::new(HashMap::new()),
            edits: Default::default(),
            touched: Mutex::default(),
            open: AtomicUsize::new(0),
            encoding: AtomicU8::new(1),
            bridge: RwLock::new(None),
        }
    }
}

fn lock(cell: &DocCell) -> MutexGuard<'_, Doc> {
    cell.0.lock().unwrap_or_else(|e| e.into_inner())
}

impl Documents {
    pub fn new() -> Arc<Documents> {
        Arc::new(Documents::default())
    }

    /// Sets the unit of columns (negotiated with the editor; UTF-16 by default).
    pub fn set_encoding(&self, encoding: Encoding) {
        let code = match encoding {
            Encoding::Utf8 => 0,
            Encoding::Utf16 => 1,
            Encoding::Utf32 => 2,
        };
        self.encoding.store(code, Ordering::Relaxed);
    }

    pub fn encoding(&self) -> Encoding {
        match self.encoding.load(Ordering::Relaxed) {
            0 => Encoding::Utf8,
            2 => Encoding::Utf32,
            _ => Encoding::Utf16,
        }
    }

    /// Sets who applies writes to open documents; `None`: they go to disk.
    pub fn set_bridge(&self, bridge: Option<Arc<dyn EditorBridge>>) {
        *self.bridge.write().unwrap_or_else(|e| e.into_inner()) = bridge;
    }

    fn bridge(&self) -> Option<Arc<dyn EditorBridge>> {
        self.bridge.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn get(&self, host: &Path) -> Option<DocCell> {
        if self.open.load(Ordering::Relaxed) == 0 {
            return None;
        }
        self.docs.read().unwrap_or_else(|e| e.into_inner()).get(host).cloned()
    }

    /// How many documents are open.
    pub fn len(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The document's text and version as the overlay serves them.
    pub fn text(&self, host: &Path) -> Option<(Arc<[u8]>, i32)> {
        let cell = self.get(host)?;
        let mut doc = lock(&cell);
        Some((doc.current(), doc.version))
    }

    /// Counts a touch of the document at `host` (an open, change, close or write).
    fn touched(&self, host: &Path) {
        let mut touched = self.touched.lock().unwrap_or_else(|e| e.into_inner());
        let now = self.edits.fetch_add(1, Ordering::SeqCst) + 1;
        touched.paths.insert(host.to_path_buf(), now);
        if touched.paths.len() > MAX_TOUCHED {
            touched.floor = now;
            touched.paths.clear();
        }
    }

    /// The documents touched after the count was `since` (host paths), or
    /// `None` when that is not known.
    fn touched_since(&self, since: u64) -> Option<Vec<PathBuf>> {
        let touched = self.touched.lock().unwrap_or_else(|e| e.into_inner());
        (since >= touched.floor)
            .then(|| touched.paths.iter().filter(|(_, at)| **at > since).map(|(p, _)| p.clone()).collect())
    }

    /// The editor opened a document (again: it replaces the old one).
    pub fn open(&self, host: PathBuf, uri: String, version: i32, text: &str) {
        let doc = Doc { uri, version, rope: Rope::from_str(text), bytes: None, pending: None };
        let mut docs = self.docs.write().unwrap_or_else(|e| e.into_inner());
        if let Some(old) = docs.insert(host.clone(), Arc::new((Mutex::new(doc), Condvar::new()))) {
            old.1.notify_all();
        }
        self.open.store(docs.len(), Ordering::Relaxed);
        self.touched(&host);
    }

    /// The editor closed a document: the disk is the truth again.
    pub fn close(&self, host: &Path) -> bool {
        let mut docs = self.docs.write().unwrap_or_else(|e| e.into_inner());
        let removed = docs.remove(host);
        self.open.store(docs.len(), Ordering::Relaxed);
        self.touched(host);
        if let Some(cell) = &removed {
            lock(cell).pending = None;
            cell.1.notify_all();
        }
        removed.is_some()
    }

    /// The editor changed a document: `edits` apply one after the other.
    /// An edit that does not fit the text is an error (the document is then
    /// as the edits before it left it).
    pub fn change(&self, host: &Path, version: i32, edits: Vec<Edit>) -> Result<(), String> {
        let cell = self.get(host).ok_or_else(|| format!("{} is not open", host.display()))?;
        // Counted when the change is done, whatever it did.
        let _counted = CountOnDrop(self, host);
        let encoding = self.encoding();
        let mut doc = lock(&cell);
        doc.bytes = None;
        doc.pending = None;
        doc.version = version;
        let mut result = Ok(());
        for edit in edits {
            match edit.range {
                None => doc.rope = Rope::from_str(&edit.text),
                Some((start, end)) => {
                    let a = char_index(&doc.rope, start, encoding);
                    let b = char_index(&doc.rope, end, encoding);
                    if b < a {
                        result = Err(format!("an edit's range ends before it starts ({start:?} to {end:?})"));
                        break;
                    }
                    if b > a {
                        doc.rope.remove(a..b);
                    }
                    if !edit.text.is_empty() {
                        doc.rope.insert(a, &edit.text);
                    }
                }
            }
        }
        drop(doc);
        cell.1.notify_all();
        result
    }
}

/// The char index of a position, clamped as LSP says: a line past the end
/// is the end of the text, a column past the line's end is the line's end.
pub fn char_index(rope: &Rope, pos: Pos, encoding: Encoding) -> usize {
    let line = pos.line as usize;
    if line >= rope.len_lines() {
        return rope.len_chars();
    }
    let start = rope.line_to_char(line);
    let end = line_end(rope, line);
    let col = pos.col as usize;
    let at = match encoding {
        Encoding::Utf32 => start + col,
        Encoding::Utf16 => {
            let base = rope.char_to_utf16_cu(start);
            let last = rope.char_to_utf16_cu(end);
            if base + col >= last {
                end
            } else {
                rope.utf16_cu_to_char(base + col)
            }
        }
        Encoding::Utf8 => {
            let base = rope.char_to_byte(start);
            let last = rope.char_to_byte(end);
            if base + col >= last {
                end
            } else {
                // A column inside a character counts as its start.
                rope.byte_to_char(base + col)
            }
        }
    };
    at.min(end)
}

/// The char index where a line's text ends (before its line break).
fn line_end(rope: &Rope, line: usize) -> usize {
    if line + 1 >= rope.len_lines() {
        return rope.len_chars();
    }
    let next = rope.line_to_char(line + 1);
    let mut end = next;
    if end > 0 && rope.char(end - 1) == '\n' {
        end -= 1;
        if end > 0 && rope.char(end - 1) == '\r' {
            end -= 1;
        }
    } else if end > 0 && rope.char(end - 1) == '\r' {
        end -= 1;
    }
    end
}

/// The overlay itself. See the module documentation.
pub struct Overlay {
    inner: Arc<dyn Fs>,
    docs: Arc<Documents>,
    /// The host directory of the inner `Fs`'s boundary.
    host_root: PathBuf,
    /// The counts `changes` answered lately: (directory, the sum, the inner
    /// count, the buffers' count), so a feed reader's count can be split again.
    answered: Mutex<std::collections::VecDeque<(VPath, u64, u64, u64)>>,
}

/// How many answered counts are remembered.
const ANSWERED: usize = 32;

impl Overlay {
    /// An overlay of `docs` over `inner`, whose boundary is the host
    /// directory `host_root` (canonical, as document keys are).
    pub fn new(inner: Arc<dyn Fs>, docs: Arc<Documents>, host_root: PathBuf) -> Overlay {
        Overlay { inner, docs, host_root, answered: Mutex::default() }
    }

    /// The host path of a real path of the inner `Fs`.
    pub fn host_of(&self, real: &VPath) -> Option<PathBuf> {
        let rel = real.strip_prefix(self.inner.boundary())?;
        Some(if rel.is_empty() { self.host_root.clone() } else { self.host_root.join(rel) })
    }

    fn doc(&self, real: &VPath) -> Option<(PathBuf, DocCell)> {
        if self.docs.is_empty() {
            return None;
        }
        let host = self.host_of(real)?;
        let cell = self.docs.get(&host)?;
        Some((host, cell))
    }

    fn patch(&self, real: &VPath, meta: &mut Meta) {
        if meta.kind == Kind::File {
            if let Some((_, cell)) = self.doc(real) {
                meta.len = lock(&cell).len();
            }
        }
    }

    /// A write to an open document: through the editor, or to disk and
    /// shown until the editor reports the reload.
    fn write_open(&self, real: &VPath, host: &Path, cell: DocCell, data: &[u8], expect: Expect) -> Result<(), FsError> {
        let new = std::str::from_utf8(data).map_err(|_| FsError::Editor(EditorFailure::NotText))?;
        let bridge = self.docs.bridge();
        let mut doc = lock(&cell);
        // An earlier change this server made is not reported back yet: its
        // version is unknown, so wait for the editor's report.
        let deadline = Instant::now() + CONFIRM_WAIT;
        while doc.pending.is_some() && bridge.is_some() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(FsError::Editor(EditorFailure::Unconfirmed));
            }
            doc = cell.1.wait_timeout(doc, left).unwrap_or_else(|e| e.into_inner()).0;
        }
        if !self.docs.get(host).is_some_and(|c| Arc::ptr_eq(&c, &cell)) {
            // Closed (or reopened) meanwhile: the disk or the new buffer is the truth.
            drop(doc);
            return self.write(real, data, expect);
        }
        let current = doc.current();
        // The buffer is the file: the change must start from the text the
        // session read (the user may have typed since).
        match expect {
            Expect::Absent => return Err(FsError::Exists),
            Expect::Content(sha) if crate::hash::sha256(&current) != sha => return Err(FsError::Changed),
            Expect::Content(_) | Expect::Anything => {}
        }
        if *current == *data {
            return Ok(());
        }
        let Some(bridge) = bridge else {
            drop(doc);
            // The disk may hold an older text than the buffer the session
            // read: the buffer was checked above, the disk is replaced.
            self.inner.write_file_if(real, data, Expect::Anything)?;
            let mut doc = lock(&cell);
            let bytes: Arc<[u8]> = data.into();
            doc.pending = Some(bytes.clone());
            self.docs.touched(host);
            tracing::info!(path = %host.display(), "wrote an open document to disk (the editor applies no edits)");
            return Ok(());
        };
        let target = DocRef { uri: doc.uri.clone(), version: doc.version };
        drop(doc);
        let old = String::from_utf8_lossy(&current).into_owned();
        bridge.apply(&target, &old, new).map_err(FsError::Editor)?;
        let mut doc = lock(&cell);
        let bytes: Arc<[u8]> = data.into();
        // Shown until the editor reports its change; if it already did, its
        // report is the truth.
        if doc.version == target.version {
            doc.pending = Some(bytes);
            self.docs.touched(host);
        }
        Ok(())
    }

    /// Remembers a count answered for `under`, and its parts.
    fn answer(&self, under: &VPath, disk: u64, edits: u64) -> u64 {
        let sum = disk.wrapping_add(edits);
        let mut answered = self.answered.lock().unwrap_or_else(|e| e.into_inner());
        if !answered.iter().any(|(u, s, d, e)| u == under && (*s, *d, *e) == (sum, disk, edits)) {
            answered.push_front((under.clone(), sum, disk, edits));
            answered.truncate(ANSWERED);
        }
        sum
    }

    fn write(&self, real: &VPath, data: &[u8], expect: Expect) -> Result<(), FsError> {
        match self.doc(real) {
            Some((host, cell)) => self.write_open(real, &host, cell, data, expect),
            None => self.inner.write_file_if(real, data, expect),
        }
    }
}

impl Fs for Overlay {
    fn boundary(&self) -> &VPath {
        self.inner.boundary()
    }

    fn resolve(&self, path: &VPath) -> Result<Resolution, FsError> {
        let mut resolution = self.inner.resolve(path)?;
        if let Resolution::Found { real, meta } = &mut resolution {
            self.patch(real, meta);
        }
        Ok(resolution)
    }

    fn lstat(&self, real: &VPath) -> Result<Meta, FsError> {
        let mut meta = self.inner.lstat(real)?;
        self.patch(real, &mut meta);
        Ok(meta)
    }

    fn read_file(&self, real: &VPath, max: u64) -> Result<Vec<u8>, FsError> {
        let Some((_, cell)) = self.doc(real) else { return self.inner.read_file(real, max) };
        let bytes = lock(&cell).current();
        if bytes.len() as u64 > max {
            return Err(FsError::TooLarge { len: bytes.len() as u64 });
        }
        Ok(bytes.to_vec())
    }

    fn read_dir(&self, real: &VPath) -> Result<Vec<DirEntry>, FsError> {
        self.inner.read_dir(real)
    }

    fn read_link(&self, real: &VPath) -> Result<String, FsError> {
        self.inner.read_link(real)
    }

    fn write_file_if(&self, real: &VPath, data: &[u8], expect: Expect) -> Result<(), FsError> {
        self.write(real, data, expect)
    }

    fn create_dir(&self, real: &VPath) -> Result<(), FsError> {
        self.inner.create_dir(real)
    }

    fn begin_intent(&self, steps: &[super::journal::IntentStep]) -> Result<Option<super::journal::Intent>, FsError> {
        self.inner.begin_intent(steps)
    }

    fn rename(&self, from: &VPath, to: &VPath) -> Result<(), FsError> {
        self.inner.rename(from, to)
    }

    fn trash(&self, real: &VPath) -> Result<String, FsError> {
        self.inner.trash(real)
    }

    /// The disk's count plus the buffers' own: an edit in the editor moves it too.
    fn changes(&self, under: &VPath) -> Option<u64> {
        let disk = self.inner.changes(under)?;
        Some(self.answer(under, disk, self.docs.edits.load(Ordering::SeqCst)))
    }

    /// The inner feed's paths and the documents touched since, for a count this overlay answered.
    fn changed_since(&self, under: &VPath, since: u64) -> Option<(u64, Vec<VPath>)> {
        let (disk_then, edits_then) = {
            let answered = self.answered.lock().unwrap_or_else(|e| e.into_inner());
            let (_, _, d, e) = answered.iter().find(|(u, s, _, _)| u == under && *s == since)?;
            (*d, *e)
        };
        // Read first: a touch after it may be named too, which only means a look too many.
        let edits = self.docs.edits.load(Ordering::SeqCst);
        let (disk, mut paths) = self.inner.changed_since(under, disk_then)?;
        for host in self.docs.touched_since(edits_then)? {
            let Some(rel) = host.strip_prefix(&self.host_root).ok().and_then(|rel| rel.to_str()) else { continue };
            let path = self.inner.boundary().join_rel(rel);
            if path.starts_with(under) && !paths.contains(&path) {
                paths.push(path);
            }
        }
        Some((self.answer(under, disk, edits), paths))
    }

    fn walk_in_view(
        &self,
        real: &VPath,
        options: &WalkOptions,
        visit: &Visitor<'_>,
        readable: &super::Readable<'_>,
    ) -> Result<(), FsError> {
        if self.docs.is_empty() {
            return self.inner.walk_in_view(real, options, visit, readable);
        }
        let wrapped = |entry: &WalkEntry<'_>| -> Descend {
            if entry.kind == Kind::File {
                if let Some((_, cell)) = self.doc(&entry.path) {
                    let open = move || -> Result<Source, FsError> { Ok(Source::Bytes(lock(&cell).current())) };
                    // The disk's stamp says nothing about an unsaved buffer: it is always read.
                    return visit(&WalkEntry {
                        path: entry.path.clone(),
                        kind: entry.kind,
                        open: &open,
                        stamp: &|| None,
                    });
                }
            }
            visit(entry)
        };
        self.inner.walk_in_view(real, options, &wrapped, readable)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vfs::mem::MemFs;

    fn p(s: &str) -> VPath {
        VPath::parse(s).unwrap()
    }

    fn pos(line: u32, col: u32) -> Pos {
        Pos { line, col }
    }

    fn text(docs: &Documents, host: &str) -> String {
        String::from_utf8(docs.text(Path::new(host)).unwrap().0.to_vec()).unwrap()
    }

    #[test]
    fn incremental_changes_in_each_unit() {
        let docs = Documents::new();
        docs.open("/h/a".into(), "file:///h/a".into(), 1, "a😀b\r\nline two\rthree\n");
        // UTF-16: the emoji is two units; 'b' is at column 3.
        docs.change(Path::new("/h/a"), 2, vec![Edit { range: Some((pos(0, 3), pos(0, 4))), text: "B".into() }])
            .unwrap();
        assert_eq!(text(&docs, "/h/a"), "a😀B\r\nline two\rthree\n");
        // A column past the line's end is the line's end (before the CRLF).
        docs.change(Path::new("/h/a"), 3, vec![Edit { range: Some((pos(0, 99), pos(0, 99))), text: "!".into() }])
            .unwrap();
        assert_eq!(text(&docs, "/h/a"), "a😀B!\r\nline two\rthree\n");
        // A lone CR breaks a line.
        docs.change(Path::new("/h/a"), 4, vec![Edit { range: Some((pos(2, 0), pos(2, 5))), text: "3".into() }])
            .unwrap();
        assert_eq!(text(&docs, "/h/a"), "a😀B!\r\nline two\r3\n");
        docs.set_encoding(Encoding::Utf8);
        docs.change(Path::new("/h/a"), 5, vec![Edit { range: Some((pos(0, 5), pos(0, 6))), text: "b".into() }])
            .unwrap();
        assert_eq!(text(&docs, "/h/a"), "a😀b!\r\nline two\r3\n");
        docs.set_encoding(Encoding::Utf32);
        docs.change(Path::new("/h/a"), 6, vec![Edit { range: Some((pos(0, 1), pos(0, 2))), text: "-".into() }])
            .unwrap();
        assert_eq!(text(&docs, "/h/a"), "a-b!\r\nline two\r3\n");
        // A line past the end is the end; a whole-text change replaces.
        docs.change(Path::new("/h/a"), 7, vec![Edit { range: Some((pos(9, 0), pos(9, 0))), text: "end".into() }])
            .unwrap();
        assert!(text(&docs, "/h/a").ends_with("3\nend"));
        docs.change(Path::new("/h/a"), 8, vec![Edit { range: None, text: "new".into() }]).unwrap();
        assert_eq!(text(&docs, "/h/a"), "new");
        assert_eq!(docs.text(Path::new("/h/a")).unwrap().1, 8);
        assert!(docs.close(Path::new("/h/a")));
        assert!(docs.text(Path::new("/h/a")).is_none());
    }

    struct Recorder {
        answer: Result<(), EditorFailure>,
        seen: Mutex<Vec<(DocRef, String, String)>>,
    }

    impl EditorBridge for Recorder {
        fn apply(&self, doc: &DocRef, old: &str, new: &str) -> Result<(), EditorFailure> {
            self.seen.lock().unwrap().push((doc.clone(), old.into(), new.into()));
            self.answer.clone()
        }
    }

    fn setup() -> (Arc<MemFs>, Arc<Documents>, Overlay) {
        let mem = Arc::new(MemFs::new(p("/")));
        mem.write_file(&p("/a.txt"), b"disk\n").unwrap();
        mem.write_file(&p("/b.txt"), b"other\n").unwrap();
        let docs = Documents::new();
        let overlay = Overlay::new(mem.clone(), docs.clone(), PathBuf::from("/host"));
        (mem, docs, overlay)
    }

    /// Opening, changing and closing a buffer move the change count, on top
    /// of the disk's (and there is none when the disk has none).
    #[test]
    fn buffer_edits_move_the_change_count() {
        let (mem, docs, overlay) = setup();
        let root = p("/");
        assert_eq!(overlay.changes(&root), None, "no count on the disk, none here");
        mem.set_changes(Some(10));
        let mut last = overlay.changes(&root).unwrap();
        let mut moved = |what: &str| {
            let now = overlay.changes(&root).unwrap();
            assert!(now > last, "{what} did not move the count");
            last = now;
        };
        docs.open("/host/a.txt".into(), "file:///host/a.txt".into(), 1, "buffer\n");
        moved("open");
        docs.change(Path::new("/host/a.txt"), 2, vec![Edit { range: None, text: "changed\n".into() }]).unwrap();
        moved("change");
        docs.close(Path::new("/host/a.txt"));
        moved("close");
        mem.set_changes(Some(11));
        moved("a change on disk");
    }

    /// The feed names the disk's paths and the documents touched since a
    /// count this overlay answered (issue 17); an unknown count means walk.
    #[test]
    fn the_feed_names_the_disk_paths_and_the_touched_documents() {
        let (mem, docs, overlay) = setup();
        let root = p("/");
        mem.set_changes(Some(10));
        let start = overlay.changes(&root).unwrap();
        assert_eq!(overlay.changed_since(&root, start), Some((start, vec![])));
        assert_eq!(overlay.changed_since(&root, start + 1000), None, "a count it never answered");
        docs.open("/host/a.txt".into(), "file:///host/a.txt".into(), 1, "buffer\n");
        mem.note_changed("/b.txt");
        let now = overlay.changes(&root).unwrap();
        let (at, mut paths) = overlay.changed_since(&root, start).unwrap();
        paths.sort();
        assert_eq!((at, paths), (now, vec![p("/a.txt"), p("/b.txt")]));
        docs.change(Path::new("/host/a.txt"), 2, vec![Edit { range: None, text: "changed\n".into() }]).unwrap();
        let (later, paths) = overlay.changed_since(&root, now).unwrap();
        assert!(later > now);
        assert_eq!(paths, [p("/a.txt")], "only what changed after that count");
        mem.note_lost();
        let last = overlay.changes(&root).unwrap();
        assert_eq!(overlay.changed_since(&root, later), None, "the disk's feed lost track");
        assert_eq!(overlay.changed_since(&root, last), Some((last, vec![])));
    }

    #[test]
    fn reads_and_walks_see_the_buffer() {
        let (_mem, docs, overlay) = setup();
        docs.open("/host/a.txt".into(), "file:///host/a.txt".into(), 1, "unsaved buffer\n");
        assert_eq!(overlay.read_file(&p("/a.txt"), 1 << 20).unwrap(), b"unsaved buffer\n");
        assert_eq!(overlay.lstat(&p("/a.txt")).unwrap().len, 15);
        assert_eq!(overlay.read_file(&p("/b.txt"), 1 << 20).unwrap(), b"other\n");
        assert!(matches!(overlay.read_file(&p("/a.txt"), 4), Err(FsError::TooLarge { len: 15 })));
        let seen = Mutex::new(Vec::new());
        overlay
            .walk(&p("/"), &WalkOptions::default(), &|entry| {
                if entry.kind == Kind::File {
                    let bytes = match (entry.open)().unwrap() {
                        Source::Bytes(b) => b.to_vec(),
                        Source::File(_) => panic!("mem gives bytes"),
                    };
                    seen.lock().unwrap().push((entry.path.to_string(), bytes));
                }
                Descend::Yes
            })
            .unwrap();
        let mut seen = seen.into_inner().unwrap();
        seen.sort();
        assert_eq!(seen, vec![("/a.txt".into(), b"unsaved buffer\n".to_vec()), ("/b.txt".into(), b"other\n".to_vec())]);
    }

    #[test]
    fn writes_to_open_documents_go_through_the_editor() {
        let (mem, docs, overlay) = setup();
        docs.open("/host/a.txt".into(), "file:///host/a.txt".into(), 4, "buffer\n");
        let bridge = Arc::new(Recorder { answer: Ok(()), seen: Mutex::new(Vec::new()) });
        docs.set_bridge(Some(bridge.clone()));
        let read = overlay.read_file(&p("/a.txt"), 1 << 20).unwrap();
        overlay.write_file_if(&p("/a.txt"), b"buffer\nmore\n", Expect::Content(crate::hash::sha256(&read))).unwrap();
        let seen = bridge.seen.lock().unwrap().clone();
        assert_eq!(
            seen,
            vec![(DocRef { uri: "file:///host/a.txt".into(), version: 4 }, "buffer\n".into(), "buffer\nmore\n".into())]
        );
        // The disk is untouched; the overlay shows the accepted text until the editor reports.
        assert_eq!(mem.read_file(&p("/a.txt"), 1 << 20).unwrap(), b"disk\n");
        assert_eq!(overlay.read_file(&p("/a.txt"), 1 << 20).unwrap(), b"buffer\nmore\n");
        docs.change(
            Path::new("/host/a.txt"),
            5,
            vec![Edit { range: Some((pos(1, 0), pos(1, 0))), text: "more\n".into() }],
        )
        .unwrap();
        assert_eq!(overlay.read_file(&p("/a.txt"), 1 << 20).unwrap(), b"buffer\nmore\n");
        // Closed files go to disk.
        overlay.write_file(&p("/b.txt"), b"changed\n").unwrap();
        assert_eq!(mem.read_file(&p("/b.txt"), 1 << 20).unwrap(), b"changed\n");
    }

    #[test]
    fn a_refused_edit_changes_nothing() {
        let (mem, docs, overlay) = setup();
        docs.open("/host/a.txt".into(), "file:///host/a.txt".into(), 1, "buffer\n");
        docs.set_bridge(Some(Arc::new(Recorder {
            answer: Err(EditorFailure::Refused(Some("the user said no".into()))),
            seen: Mutex::new(Vec::new()),
        })));
        let error = overlay.write_file(&p("/a.txt"), b"new\n").unwrap_err();
        assert!(
            matches!(&error, FsError::Editor(EditorFailure::Refused(Some(why))) if why == "the user said no"),
            "{error}"
        );
        assert_eq!(overlay.read_file(&p("/a.txt"), 1 << 20).unwrap(), b"buffer\n");
        assert_eq!(mem.read_file(&p("/a.txt"), 1 << 20).unwrap(), b"disk\n");
    }

    #[test]
    fn a_buffer_changed_after_the_read_is_not_overwritten() {
        let (_mem, docs, overlay) = setup();
        docs.open("/host/a.txt".into(), "file:///host/a.txt".into(), 1, "buffer\n");
        docs.set_bridge(Some(Arc::new(Recorder { answer: Ok(()), seen: Mutex::new(Vec::new()) })));
        let read = overlay.read_file(&p("/a.txt"), 1 << 20).unwrap();
        docs.change(Path::new("/host/a.txt"), 2, vec![Edit { range: None, text: "typed\n".into() }]).unwrap();
        let error =
            overlay.write_file_if(&p("/a.txt"), b"model\n", Expect::Content(crate::hash::sha256(&read))).unwrap_err();
        assert!(matches!(error, FsError::Changed), "{error}");
        assert_eq!(overlay.read_file(&p("/a.txt"), 1 << 20).unwrap(), b"typed\n");
    }

    #[test]
    fn without_a_bridge_open_documents_are_written_to_disk() {
        let (mem, docs, overlay) = setup();
        docs.open("/host/a.txt".into(), "file:///host/a.txt".into(), 1, "buffer\n");
        overlay.write_file(&p("/a.txt"), b"new\n").unwrap();
        assert_eq!(mem.read_file(&p("/a.txt"), 1 << 20).unwrap(), b"new\n");
        assert_eq!(overlay.read_file(&p("/a.txt"), 1 << 20).unwrap(), b"new\n");
    }
}
