//! The hybrid index: keeps the store current with what a session can see,
//! and ranks passages by words (BM25), by meaning (embeddings) and by path
//! and tags, fused by reciprocal rank.
//!
//! Every ranking is computed over the session's visible files only: the
//! candidates are the files a view-checked walk finds, and BM25's document
//! frequencies and lengths are counted over those alone. So a hidden file
//! changes neither which results come back, nor their order, nor how many.
//! Access itself is decided by `access`; this module only asks it.
//!
//! Speed: what the store holds about files and chunks is mirrored in memory
//! (`Mirror`: each file's size, time and blob; each blob's chunk ids, lines
//! and lengths; the vectors, quantised to `i8`, once a search needs them),
//! so a query reads from SQLite only the postings of its words and the
//! texts it answers. The mirror is dropped and read again when another
//! connection (another process) committed to the store. A refresh still
//! walks the visible tree on every query (that is how changes from outside
//! are seen), but it only stats unchanged files; new or changed files are
//! read, chunked and embedded on the walk's threads, and the store is
//! written from one.
//!
//! For benchmarks, `CTXFS_SEARCH_RANKINGS` (read once) limits which
//! rankings take part: `words`, `meaning`, `paths`, joined by `+` or `,`;
//! unset, `fused` or `all` is all three. It is a knob for measuring, not a
//! setting for users; `Index::search_with` takes the same choice per call.

use super::store::{decode_vector, quantize, IndexStore, NewChunk};
use crate::access::{Access, Target};
use crate::paths::VPath;
use crate::tools::find::visible_files;
use crate::tools::search::words;
use crate::tools::text::TextFile;
use crate::tools::{sha256, Sha};
use crate::vfs::Source;
use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

/// Files larger than this are not indexed.
pub const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;
/// Reciprocal rank fusion's constant. Lower than the customary 60, so a
/// passage near the top of one ranking counts for more than one in the middle
/// of several (see bench/README.md, "Search quality").
const RRF_K: f64 = 30.0;
/// The words ranking's weight in the fusion (meaning and paths weigh 1): on
/// code, a query's identifiers are more precise evidence than the static
/// embedder's sense of it.
const WORDS_WEIGHT: f64 = 1.2;
/// How deep each ranking goes into fusion.
const RANK_DEPTH: usize = 200;
const BM25_K1: f64 = 1.2;
const BM25_B: f64 = 0.75;
/// A refresh commits after this many written files or chunks.
const COMMIT_FILES: usize = 256;
const COMMIT_CHUNKS: usize = 4096;
/// Files in flight between the walk and the writer (each may carry its chunks).
const CHANNEL_BOUND: usize = 32;

/// Turns text into embedding vectors (see `index::embed` for the real ones).
pub trait Vectorizer: Send + Sync {
    /// A name that changes when vectors would differ (the model).
    fn name(&self) -> &str;
    fn embed(&self, texts: &[&str]) -> anyhow::Result<Vec<Vec<f32>>>;
}

/// Cuts a text into passages: `(first_line, last_line, text)`.
pub trait Chunker: Send + Sync {
    fn pieces(&self, text: &str) -> Vec<(usize, usize, String)>;
}

/// One search result.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    /// The path as the session names it.
    pub path: VPath,
    pub first_line: usize,
    pub last_line: usize,
    pub text: String,
}

/// Which rankings a search fuses (all three by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rankings {
    /// BM25 over the passages' words.
    pub words: bool,
    /// Cosine similarity of embeddings.
    pub meaning: bool,
    /// BM25 over each file's path and tags.
    pub paths: bool,
}

impl Rankings {
    pub const ALL: Rankings = Rankings { words: true, meaning: true, paths: true };

    /// `words`, `meaning`, `paths`, joined by `+` or `,`; `fused`, `all` or nothing is all three.
    pub fn parse(text: &str) -> Result<Rankings, String> {
        let text = text.trim();
        if text.is_empty() || text == "fused" || text == "all" {
            return Ok(Rankings::ALL);
        }
        let mut out = Rankings { words: false, meaning: false, paths: false };
        for part in text.split(['+', ',']).map(str::trim) {
            match part {
                "words" => out.words = true,
                "meaning" => out.meaning = true,
                "paths" => out.paths = true,
                other => return Err(format!("{other:?} is not a ranking (words, meaning, paths, fused)")),
            }
        }
        Ok(out)
    }

    /// The rankings `CTXFS_SEARCH_RANKINGS` names, read once (a benchmarking knob).
    pub fn from_env() -> Rankings {
        static FROM_ENV: OnceLock<Rankings> = OnceLock::new();
        *FROM_ENV.get_or_init(|| {
            let text = std::env::var("CTXFS_SEARCH_RANKINGS").unwrap_or_default();
            Rankings::parse(&text).unwrap_or_else(|e| {
                tracing::warn!("CTXFS_SEARCH_RANKINGS: {e}; fusing all rankings");
                Rankings::ALL
            })
        })
    }
}

/// How far a refresh or build has come.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    /// Visible files the walk has found so far.
    pub found: usize,
    /// Whether the walk has finished (`found` is then the total).
    pub walked: bool,
    /// Files checked (unchanged, indexed, or skipped as binary or too large).
    pub done: usize,
    /// Their size in bytes.
    pub bytes: u64,
    /// Files read and indexed because they were new or had changed, and their bytes.
    pub indexed: usize,
    pub bytes_indexed: u64,
    /// Chunks made (and embedded) for new content.
    pub chunks: usize,
    /// Files skipped: binary, too large or unreadable.
    pub skipped: usize,
    /// Files dropped from the index because they are gone.
    pub removed: usize,
}

/// One chunk of a blob, in memory.
#[derive(Debug, Clone, Copy)]
struct MemChunk {
    id: i64,
    first_line: u32,
    last_line: u32,
    words: u32,
}

/// One blob's chunks (and vectors, once loaded), in memory.
#[derive(Debug, Default)]
struct BlobEntry {
    /// Made with the current vectorizer (else it is made again when seen).
    current: bool,
    chunks: Vec<MemChunk>,
    /// `dims` values per chunk, or empty when the blob has no vectors (or they are not loaded).
    vectors: Vec<i8>,
    scales: Vec<f32>,
}

/// One file row, in memory.
#[derive(Debug, Clone, Copy)]
struct FileEntry {
    rowid: i64,
    blob: Sha,
    size: i64,
    mtime: i64,
}

/// What the store holds, in memory (see the module header).
#[derive(Default)]
struct Mirror {
    /// The store's `data_version` when this was read; `None`: not read.
    version: Option<i64>,
    files: HashMap<String, FileEntry>,
    blobs: HashMap<Sha, BlobEntry>,
    /// Whether the blobs hold their vectors.
    vectors: bool,
    /// The vectors' length (0 until one is known).
    dims: usize,
}

impl Mirror {
    fn is_current(&self, sha: &Sha) -> bool {
        self.blobs.get(sha).is_some_and(|b| b.current)
    }

    /// Records a blob just stored; its vectors are kept when the others are.
    fn put_blob(&mut self, sha: Sha, current: bool, ids: &[i64], chunks: &[NewChunk]) {
        let mut entry = BlobEntry {
            current,
            chunks: ids
                .iter()
                .zip(chunks)
                .map(|(id, c)| MemChunk {
                    id: *id,
                    first_line: c.first_line as u32,
                    last_line: c.last_line as u32,
                    words: c.words.len() as u32,
                })
                .collect(),
            ..BlobEntry::default()
        };
        if self.vectors && !chunks.is_empty() && chunks.iter().all(|c| c.vector.is_some()) {
            let dims = chunks[0].vector.as_ref().map_or(0, Vec::len);
            if self.dims == 0 {
                self.dims = dims;
            }
            if dims == self.dims && chunks.iter().all(|c| c.vector.as_ref().is_some_and(|v| v.len() == dims)) {
                for c in chunks {
                    let (q, scale) = quantize(c.vector.as_deref().unwrap_or_default());
                    entry.vectors.extend_from_slice(&q);
                    entry.scales.push(scale);
                }
            }
        }
        self.blobs.insert(sha, entry);
    }
}

/// What the walk's threads count while they walk.
#[derive(Default)]
struct WalkCounts {
    found: AtomicUsize,
    same: AtomicUsize,
    skipped: AtomicUsize,
    bytes: AtomicU64,
    walked: AtomicBool,
}

impl WalkCounts {
    fn add(&self, counter: &AtomicUsize, size: i64) {
        counter.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(size.max(0) as u64, Ordering::Relaxed);
    }

    /// Brings the walk's side of `state` up to date (the writer keeps the rest).
    fn fill(&self, state: &mut Progress) {
        state.found = self.found.load(Ordering::Relaxed);
        state.walked = self.walked.load(Ordering::Relaxed);
        state.skipped = self.skipped.load(Ordering::Relaxed);
        state.done = self.same.load(Ordering::Relaxed) + state.skipped + state.indexed;
        state.bytes = self.bytes.load(Ordering::Relaxed) + state.bytes_indexed;
    }
}

/// A visible file found by a refresh.
#[derive(Debug, Clone)]
struct Seen {
    shown: VPath,
    blob: Sha,
    /// The file's row, whose path and tags are words for the path-and-tags ranking.
    rowid: i64,
}

/// What the walk hands the writer about one visible file.
enum Work {
    /// Unchanged since it was indexed.
    Same { real: VPath, shown: VPath, size: i64, entry: FileEntry },
    /// Read and hashed; chunked and embedded when its content was not indexed yet.
    Read { real: VPath, shown: VPath, size: i64, mtime: i64, sha: Sha, chunks: Option<Vec<NewChunk>> },
    /// Binary, too large or unreadable.
    Skip { size: i64 },
}

pub struct Index {
    store: Mutex<IndexStore>,
    vectorizer: Option<Arc<dyn Vectorizer>>,
    chunker: Arc<dyn Chunker>,
    mirror: RwLock<Mirror>,
}

fn mtime_of(source: &Source) -> (i64, i64) {
    match source {
        Source::File(file) => match file.metadata() {
            Ok(meta) => {
                use std::os::unix::fs::MetadataExt;
                (meta.size() as i64, meta.mtime() * 1_000_000_000 + meta.mtime_nsec())
            }
            Err(_) => (-1, -1),
        },
        Source::Bytes(bytes) => (bytes.len() as i64, -1),
    }
}

fn read_all(source: Source) -> Option<Vec<u8>> {
    match source {
        Source::File(file) => {
            let mut buf = Vec::new();
            file.take(MAX_FILE_BYTES + 1).read_to_end(&mut buf).ok()?;
            (buf.len() as u64 <= MAX_FILE_BYTES).then_some(buf)
        }
        Source::Bytes(bytes) => (bytes.len() as u64 <= MAX_FILE_BYTES).then(|| bytes.to_vec()),
    }
}

/// The dot product of two quantised vectors (exact, so the same on every run).
fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    a.iter().zip(b).map(|(x, y)| i32::from(*x) * i32::from(*y)).sum()
}

impl Index {
    pub fn open(path: &Path, vectorizer: Option<Arc<dyn Vectorizer>>, chunker: Arc<dyn Chunker>) -> anyhow::Result<Index> {
        Ok(Index { store: Mutex::new(IndexStore::open(path)?), vectorizer, chunker, mirror: RwLock::new(Mirror::default()) })
    }

    fn store(&self) -> std::sync::MutexGuard<'_, IndexStore> {
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn mirror(&self) -> std::sync::RwLockReadGuard<'_, Mirror> {
        self.mirror.read().unwrap_or_else(|e| e.into_inner())
    }

    fn mirror_mut(&self) -> std::sync::RwLockWriteGuard<'_, Mirror> {
        self.mirror.write().unwrap_or_else(|e| e.into_inner())
    }

    pub fn has_vectors(&self) -> bool {
        self.vectorizer.is_some()
    }

    fn current(&self) -> Option<&str> {
        self.vectorizer.as_ref().map(|v| v.name())
    }

    /// Reads the mirror again when it was never read or another connection committed since.
    fn sync_mirror(&self, store: &IndexStore) -> anyhow::Result<()> {
        let version = store.data_version()?;
        if self.mirror().version == Some(version) {
            return Ok(());
        }
        let mut mirror = Mirror::default();
        store.all_files(|f| {
            if let Ok(blob) = <Sha>::try_from(f.blob.as_slice()) {
                mirror.files.insert(f.path, FileEntry { rowid: f.rowid, blob, size: f.size, mtime: f.mtime });
            }
        })?;
        let current = self.current();
        store.all_blobs(|sha, embedder| {
            if let Ok(sha) = <Sha>::try_from(sha.as_slice()) {
                mirror.blobs.insert(sha, BlobEntry { current: embedder.as_deref() == current, ..BlobEntry::default() });
            }
        })?;
        store.all_chunks(|blob, c| {
            if let Some(entry) = mirror.blobs.get_mut(blob) {
                entry.chunks.push(MemChunk {
                    id: c.id,
                    first_line: c.first_line as u32,
                    last_line: c.last_line as u32,
                    words: c.words as u32,
                });
            }
        })?;
        mirror.version = Some(version);
        *self.mirror_mut() = mirror;
        Ok(())
    }

    /// Loads every stored vector into the mirror (once; new blobs bring their own).
    fn load_vectors(&self, store: &IndexStore) -> anyhow::Result<()> {
        if self.vectorizer.is_none() || self.mirror().vectors {
            return Ok(());
        }
        let mut mirror = self.mirror_mut();
        let mirror = &mut *mirror;
        let shas: Vec<Sha> = mirror.blobs.keys().copied().collect();
        let mut place: HashMap<i64, (u32, u32)> = HashMap::new();
        for (b, sha) in shas.iter().enumerate() {
            for (i, c) in mirror.blobs[sha].chunks.iter().enumerate() {
                place.insert(c.id, (b as u32, i as u32));
            }
        }
        let mut filled = vec![0u32; shas.len()];
        let mut dims = mirror.dims;
        let mut values = Vec::new();
        store.all_vectors(|id, bytes| {
            let Some(&(b, i)) = place.get(&id) else { return };
            values.clear();
            let Some(scale) = decode_vector(bytes, &mut values) else { return };
            if dims == 0 {
                dims = values.len();
            }
            if values.len() != dims {
                return;
            }
            let Some(entry) = mirror.blobs.get_mut(&shas[b as usize]) else { return };
            let n = entry.chunks.len();
            if entry.vectors.len() != n * dims {
                entry.vectors = vec![0; n * dims];
                entry.scales = vec![0.0; n];
            }
            let i = i as usize;
            entry.vectors[i * dims..(i + 1) * dims].copy_from_slice(&values);
            entry.scales[i] = scale;
            filled[b as usize] += 1;
        })?;
        // A blob with a chunk that has no vector has none at all.
        for (b, sha) in shas.iter().enumerate() {
            if let Some(entry) = mirror.blobs.get_mut(sha) {
                if filled[b] as usize != entry.chunks.len() {
                    entry.vectors = Vec::new();
                    entry.scales = Vec::new();
                }
                entry.vectors.shrink_to_fit();
            }
        }
        mirror.dims = dims;
        mirror.vectors = true;
        Ok(())
    }

    /// Chunks and embeds one text for the store.
    fn make_chunks(&self, text: &str) -> Vec<NewChunk> {
        let pieces = self.chunker.pieces(text);
        let vectors = match &self.vectorizer {
            Some(v) => {
                let texts: Vec<&str> = pieces.iter().map(|p| p.2.as_str()).collect();
                match v.embed(&texts) {
                    Ok(vectors) if vectors.len() == texts.len() => Some(vectors),
                    Ok(_) | Err(_) => None,
                }
            }
            None => None,
        };
        let mut vectors = vectors.map(Vec::into_iter);
        pieces
            .into_iter()
            .map(|(first_line, last_line, text)| NewChunk {
                first_line,
                last_line,
                words: words(&text),
                vector: vectors.as_mut().and_then(Iterator::next),
                text,
            })
            .collect()
    }

    /// Stores a blob's chunks unless it is already indexed with the current
    /// vectorizer; answers how many chunks it made.
    fn ensure_blob(&self, store: &IndexStore, sha: &Sha, chunks: impl FnOnce() -> Vec<NewChunk>) -> anyhow::Result<usize> {
        if self.mirror().is_current(sha) {
            return Ok(0);
        }
        let chunks = chunks();
        let ids = store.put_blob(sha, self.current(), &chunks)?;
        self.mirror_mut().put_blob(*sha, true, &ids, &chunks);
        Ok(chunks.len())
    }

    /// Drops a blob from the store and the mirror when no file holds it any more.
    fn drop_if_orphan(&self, store: &IndexStore, sha: &Sha) -> anyhow::Result<()> {
        if store.drop_blob_if_orphan(sha)? {
            self.mirror_mut().blobs.remove(sha);
        }
        Ok(())
    }

    /// Runs `f` in a transaction of its own; on error the transaction is
    /// rolled back and the mirror read again next time.
    fn write<T>(&self, store: &IndexStore, f: impl FnOnce() -> anyhow::Result<T>) -> anyhow::Result<T> {
        store.begin()?;
        match f() {
            Ok(v) => {
                store.commit()?;
                Ok(v)
            }
            Err(e) => {
                store.rollback();
                self.mirror_mut().version = None;
                Err(e)
            }
        }
    }

    /// Records a file written through ctxfs: its content is indexed now, and
    /// `created_by` is kept from its first write on.
    pub fn note_written(&self, real: &VPath, bytes: &[u8], created_by: Option<&str>) -> anyhow::Result<()> {
        let Ok(file) = TextFile::decode(bytes) else { return Ok(()) };
        if bytes.len() as u64 > MAX_FILE_BYTES {
            return Ok(());
        }
        let sha = sha256(bytes);
        let store = self.store();
        self.sync_mirror(&store)?;
        self.write(&store, || {
            self.ensure_blob(&store, &sha, || self.make_chunks(file.text()))?;
            let old = self.mirror().files.get(real.as_str()).map(|f| f.blob);
            // The time is unknown here; the next refresh stats the file again.
            let (size, mtime) = (bytes.len() as i64, -1);
            let rowid = store.put_file(real.as_str(), &sha, size, mtime, created_by)?;
            self.mirror_mut().files.insert(real.to_string(), FileEntry { rowid, blob: sha, size, mtime });
            if let Some(old) = old.filter(|old| *old != sha) {
                self.drop_if_orphan(&store, &old)?;
            }
            Ok(())
        })
    }

    /// Tags a file (which must be indexed or indexable).
    pub fn tag(&self, real: &VPath, bytes: &[u8], task: Option<&str>, related: Option<&str>) -> anyhow::Result<()> {
        let known = self.store().file(real.as_str())?.is_some();
        if !known {
            self.note_written(real, bytes, None)?;
        }
        self.store().tag(real.as_str(), task, related)?;
        Ok(())
    }

    /// What the walk does with one visible file (on the walk's threads):
    /// stat it, and when it is new or changed, read, hash, chunk and embed it.
    fn prepare(&self, real: VPath, shown: VPath, open: &dyn Fn() -> Option<Source>) -> Work {
        let Some(source) = open() else { return Work::Skip { size: 0 } };
        let (size, mtime) = mtime_of(&source);
        {
            let mirror = self.mirror();
            if let Some(entry) = mirror.files.get(real.as_str()) {
                if entry.size == size && entry.mtime == mtime && mtime >= 0 && mirror.is_current(&entry.blob) {
                    return Work::Same { real, shown, size, entry: *entry };
                }
            }
        }
        let Some(bytes) = read_all(source) else { return Work::Skip { size } };
        let Ok(text) = TextFile::decode(&bytes) else { return Work::Skip { size } };
        let sha = sha256(&bytes);
        let known = self.mirror().is_current(&sha);
        let chunks = (!known).then(|| self.make_chunks(text.text()));
        Work::Read { real, shown, size, mtime, sha, chunks }
    }

    /// Brings the index up to date with the visible files under `root`,
    /// answering them sorted by their shown path. Files changed since they
    /// were indexed are read again; visible files that are gone are dropped.
    ///
    /// The walk's threads stat every file; unchanged and skipped files stay
    /// with them (no hand-over per file), new and changed ones are read,
    /// chunked and embedded there and handed to this thread, the only one
    /// that writes the store.
    fn refresh(&self, store: &IndexStore, access: &Access, root: &Target, progress: &dyn Fn(&Progress)) -> anyhow::Result<Vec<Seen>> {
        self.sync_mirror(store)?;
        let (sender, receiver) = std::sync::mpsc::sync_channel::<Work>(CHANNEL_BOUND);
        let counts = WalkCounts::default();
        let unchanged: Mutex<Vec<(VPath, Seen)>> = Mutex::new(Vec::new());
        let stop = AtomicBool::new(false);
        let root_real = &root.real;
        let mut seen = Vec::new();
        let mut present: HashSet<String> = HashSet::new();
        let mut state = Progress::default();
        let mut walk_result = Ok(());
        store.begin()?;
        let written = std::thread::scope(|scope| -> anyhow::Result<()> {
            let walker = scope.spawn(|| {
                let sender = sender;
                let result = visible_files(access, root.clone(), &|shown, rel, open| {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    counts.found.fetch_add(1, Ordering::Relaxed);
                    match self.prepare(root_real.join_rel(rel), shown.clone(), open) {
                        Work::Same { real, shown, size, entry } => {
                            counts.add(&counts.same, size);
                            let seen = Seen { shown, blob: entry.blob, rowid: entry.rowid };
                            unchanged.lock().unwrap_or_else(|e| e.into_inner()).push((real, seen));
                        }
                        Work::Skip { size } => counts.add(&counts.skipped, size),
                        work => {
                            if sender.send(work).is_err() {
                                stop.store(true, Ordering::Relaxed);
                            }
                        }
                    }
                });
                counts.walked.store(true, Ordering::Relaxed);
                result
            });
            let outcome = (|| -> anyhow::Result<()> {
                let mut pending_orphans: Vec<Sha> = Vec::new();
                let (mut files_since, mut chunks_since) = (0usize, 0usize);
                let tick = std::time::Duration::from_millis(100);
                loop {
                    let work = match receiver.recv_timeout(tick) {
                        Ok(work) => work,
                        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                            counts.fill(&mut state);
                            progress(&state);
                            continue;
                        }
                        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                    };
                    let Work::Read { real, shown, size, mtime, sha, chunks } = work else { continue };
                    let made = match chunks {
                        Some(chunks) => self.ensure_blob(store, &sha, || chunks)?,
                        // Known when the walk looked, and nothing drops blobs before the walk ends.
                        None if self.mirror().is_current(&sha) => 0,
                        None => continue,
                    };
                    let old = self.mirror().files.get(real.as_str()).copied();
                    let rowid = match old {
                        Some(old) if old.blob == sha && old.size == size && old.mtime == mtime => old.rowid,
                        _ => {
                            let rowid = store.put_file(real.as_str(), &sha, size, mtime, None)?;
                            self.mirror_mut().files.insert(real.to_string(), FileEntry { rowid, blob: sha, size, mtime });
                            files_since += 1;
                            rowid
                        }
                    };
                    if let Some(old) = old.filter(|old| old.blob != sha) {
                        pending_orphans.push(old.blob);
                    }
                    present.insert(real.as_str().to_owned());
                    state.indexed += 1;
                    state.bytes_indexed += size.max(0) as u64;
                    state.chunks += made;
                    chunks_since += made;
                    seen.push(Seen { shown, blob: sha, rowid });
                    if files_since >= COMMIT_FILES || chunks_since >= COMMIT_CHUNKS {
                        store.commit()?;
                        store.begin()?;
                        (files_since, chunks_since) = (0, 0);
                    }
                    counts.fill(&mut state);
                    progress(&state);
                }
                for (real, s) in unchanged.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
                    present.insert(real.as_str().to_owned());
                    seen.push(s);
                }
                // Visible files that were not found again are gone.
                let gone: Vec<(String, Sha)> = {
                    let mirror = self.mirror();
                    mirror
                        .files
                        .iter()
                        .filter(|(path, _)| is_under(path, root_real.as_str()) && !present.contains(path.as_str()))
                        .filter(|(path, _)| VPath::parse(path).is_ok_and(|p| access.level(&p).can_read()))
                        .map(|(path, entry)| (path.clone(), entry.blob))
                        .collect()
                };
                for (path, blob) in gone {
                    store.remove_file(&path)?;
                    self.mirror_mut().files.remove(&path);
                    pending_orphans.push(blob);
                    state.removed += 1;
                }
                pending_orphans.sort_unstable();
                pending_orphans.dedup();
                for sha in &pending_orphans {
                    self.drop_if_orphan(store, sha)?;
                }
                Ok(())
            })();
            if outcome.is_err() {
                stop.store(true, Ordering::Relaxed);
                // Let the walk finish quickly: nobody reads what it sends now.
                drop(receiver);
            }
            match walker.join() {
                Ok(result) => walk_result = result,
                Err(panic) => std::panic::resume_unwind(panic),
            }
            outcome
        });
        match written {
            Ok(()) => store.commit()?,
            Err(e) => {
                store.rollback();
                self.mirror_mut().version = None;
                return Err(e);
            }
        }
        walk_result.map_err(|e| anyhow::anyhow!("{e}"))?;
        counts.fill(&mut state);
        progress(&state);
        seen.sort_by(|a, b| a.shown.cmp(&b.shown));
        Ok(seen)
    }

    /// Indexes everything visible under `root` (for `ctxfs index`), calling
    /// `progress` with the files done and found so far (found is 0 until the
    /// walk is over); answers how many visible files were found.
    pub fn build(&self, access: &Access, root: &Target, progress: &dyn Fn(usize, usize)) -> anyhow::Result<usize> {
        let summary = self.build_with(access, root, &|p| progress(p.done, if p.walked { p.found } else { 0 }))?;
        Ok(summary.found)
    }

    /// Indexes everything visible under `root`, reporting as it goes; answers the final figures.
    pub fn build_with(&self, access: &Access, root: &Target, progress: &dyn Fn(&Progress)) -> anyhow::Result<Progress> {
        let last = Mutex::new(Progress::default());
        let store = self.store();
        self.refresh(&store, access, root, &|p| {
            progress(p);
            *last.lock().unwrap_or_else(|e| e.into_inner()) = p.clone();
        })?;
        Ok(last.into_inner().unwrap_or_else(|e| e.into_inner()))
    }

    /// Ranks the visible passages under `root` for `query`, best first, with
    /// the rankings `CTXFS_SEARCH_RANKINGS` names (all by default).
    pub fn search(&self, access: &Access, root: &Target, query: &str, limit: usize) -> anyhow::Result<Vec<Hit>> {
        self.search_with(access, root, query, limit, Rankings::from_env())
    }

    /// Ranks the visible passages under `root` for `query` by the chosen rankings, fused.
    pub fn search_with(&self, access: &Access, root: &Target, query: &str, limit: usize, rankings: Rankings) -> anyhow::Result<Vec<Hit>> {
        let started = std::time::Instant::now();
        let mut times = Vec::new();
        let mut lap = |what: &'static str| times.push((what, started.elapsed()));
        let store = self.store();
        let seen = self.refresh(&store, access, root, &|_| {})?;
        lap("refresh");
        let want_meaning = rankings.meaning && self.vectorizer.is_some();
        if want_meaning {
            self.load_vectors(&store)?;
            lap("vectors");
        }
        let mirror = self.mirror();
        // The ranking units: each chunk of each visible file, in the order of the files' shown paths.
        let mut units: Vec<Unit<'_>> = Vec::new();
        for (file, s) in seen.iter().enumerate() {
            let Some(blob) = mirror.blobs.get(&s.blob) else { continue };
            for (index, chunk) in blob.chunks.iter().enumerate() {
                units.push(Unit { file: file as u32, index: index as u32, chunk, blob });
            }
        }
        let order = |a: u32, b: u32| {
            let (x, y) = (&units[a as usize], &units[b as usize]);
            seen[x.file as usize]
                .shown
                .cmp(&seen[y.file as usize].shown)
                .then(x.chunk.first_line.cmp(&y.chunk.first_line))
                .then(a.cmp(&b))
        };
        let terms = query_terms(query);
        let mut fused_from: Vec<(f64, Vec<u32>)> = Vec::new();

        // Words: BM25 with statistics over the visible units only.
        if rankings.words && !units.is_empty() && !terms.is_empty() {
            let n = units.len() as f64;
            let avg = (units.iter().map(|u| f64::from(u.chunk.words)).sum::<f64>() / n).max(1.0);
            // Chunk id → its units (a blob visible under several paths has several).
            let lo = units.iter().map(|u| u.chunk.id).min().unwrap_or(0);
            let hi = units.iter().map(|u| u.chunk.id).max().unwrap_or(0);
            let mut first = vec![u32::MAX; (hi - lo + 1) as usize];
            let mut next = vec![u32::MAX; units.len()];
            for (i, u) in units.iter().enumerate().rev() {
                let slot = &mut first[(u.chunk.id - lo) as usize];
                next[i] = *slot;
                *slot = i as u32;
            }
            let mut scores = vec![0f64; units.len()];
            let mut hits: Vec<(u32, u32)> = Vec::new();
            for term in &terms {
                hits.clear();
                for (doc, tf) in store.chunk_postings(term)? {
                    if doc < lo || doc > hi {
                        continue;
                    }
                    let mut unit = first[(doc - lo) as usize];
                    while unit != u32::MAX {
                        hits.push((unit, tf));
                        unit = next[unit as usize];
                    }
                }
                let df = hits.len() as f64;
                let idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
                for &(unit, tf) in &hits {
                    let tf = f64::from(tf);
                    let norm = 1.0 - BM25_B + BM25_B * f64::from(units[unit as usize].chunk.words) / avg;
                    scores[unit as usize] += idf * tf * (BM25_K1 + 1.0) / (tf + BM25_K1 * norm);
                }
            }
            fused_from.push((WORDS_WEIGHT, top(&scores, RANK_DEPTH, &order)));
            lap("words");
        }

        // Paths and tags: BM25 over each visible file's path and tags; a hit is the file's first passage.
        if rankings.paths && !seen.is_empty() && !terms.is_empty() {
            let mut first_unit = vec![u32::MAX; seen.len()];
            for (i, u) in units.iter().enumerate().rev() {
                first_unit[u.file as usize] = i as u32;
            }
            let mut by_rowid: HashMap<i64, Vec<usize>> = HashMap::new();
            for (i, s) in seen.iter().enumerate() {
                by_rowid.entry(s.rowid).or_default().push(i);
            }
            let n = seen.len() as f64;
            let mut scores = vec![0f64; units.len()];
            for term in &terms {
                let postings = store.meta_postings(term)?;
                let hits: Vec<(usize, u32)> = postings
                    .iter()
                    .filter_map(|(rowid, tf)| by_rowid.get(rowid).map(|files| files.iter().map(move |f| (*f, *tf))))
                    .flatten()
                    .collect();
                let idf = ((n - hits.len() as f64 + 0.5) / (hits.len() as f64 + 0.5) + 1.0).ln();
                for (file, tf) in hits {
                    if let Some(&unit) = first_unit.get(file).filter(|u| **u != u32::MAX) {
                        scores[unit as usize] += idf * f64::from(tf);
                    }
                }
            }
            fused_from.push((1.0, top(&scores, RANK_DEPTH, &order)));
            lap("paths");
        }

        // Meaning: cosine similarity to the query's vector (both quantised to `i8`).
        if want_meaning && !units.is_empty() {
            if let Some(q) = self.vectorizer.as_ref().and_then(|v| v.embed(&[query]).ok()).and_then(|mut v| v.pop()) {
                let dims = mirror.dims;
                let (q, q_scale) = quantize(&q);
                if dims > 0 && q.len() == dims {
                    let scores: Vec<f64> = units
                        .iter()
                        .map(|u| {
                            let i = u.index as usize;
                            match u.blob.vectors.get(i * dims..(i + 1) * dims) {
                                Some(row) => f64::from(dot_i8(row, &q)) * f64::from(u.blob.scales[i]) * f64::from(q_scale),
                                None => 0.0,
                            }
                        })
                        .collect();
                    fused_from.push((1.0, top(&scores, RANK_DEPTH, &order)));
                    lap("meaning");
                }
            }
        }

        // Reciprocal rank fusion, then the limit.
        let mut fused: HashMap<u32, f64> = HashMap::new();
        for (weight, ranking) in &fused_from {
            for (rank, unit) in ranking.iter().enumerate() {
                *fused.entry(*unit).or_default() += weight / (RRF_K + rank as f64 + 1.0);
            }
        }
        let mut ordered: Vec<(u32, f64)> = fused.into_iter().collect();
        ordered.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| order(a.0, b.0)));
        let mut hits = Vec::new();
        for (unit, _) in ordered.into_iter().take(limit) {
            let u = &units[unit as usize];
            hits.push(Hit {
                path: seen[u.file as usize].shown.clone(),
                first_line: u.chunk.first_line as usize,
                last_line: u.chunk.last_line as usize,
                text: store.chunk_text(u.chunk.id)?,
            });
        }
        lap("fused");
        tracing::debug!(files = seen.len(), units = units.len(), terms = terms.len(), ?times, "search");
        Ok(hits)
    }
}

/// The query's words for the word rankings (BM25 over passages, and over
/// paths and tags): split like the passages', without repeats, and without
/// English function words unless nothing else is left. A question in plain
/// English ("where do we retry the failed upload") otherwise weighs "the" and
/// "we" by their rarity in code, where they live in the odd comment.
fn query_terms(query: &str) -> Vec<String> {
    let mut terms = words(query);
    terms.sort();
    terms.dedup();
    if terms.iter().any(|t| !STOP.contains(&t.as_str())) {
        terms.retain(|t| !STOP.contains(&t.as_str()));
    }
    terms
}

/// English function words, left out of a query's word rankings (see `query_terms`).
const STOP: [&str; 64] = [
    "a", "an", "the", "of", "to", "in", "on", "for", "and", "or", "is", "are", "be", "by", "with", "as", "at", "it", "its",
    "this", "that", "from", "when", "if", "into", "not", "no", "do", "does", "how", "what", "which", "where", "we", "you",
    "can", "will", "all", "any", "such", "than", "then", "there", "these", "those", "was", "were", "has", "have", "had",
    "should", "would", "may", "so", "but", "also", "only", "our", "your", "their", "them", "they", "i", "s",
];

/// One ranking unit: a chunk of a visible file.
struct Unit<'m> {
    /// The file's place in the refresh's list.
    file: u32,
    /// The chunk's place in its blob.
    index: u32,
    chunk: &'m MemChunk,
    blob: &'m BlobEntry,
}

/// Whether `path` is `root` or lies below it.
fn is_under(path: &str, root: &str) -> bool {
    root == "/" || path == root || (path.starts_with(root) && path.as_bytes().get(root.len()) == Some(&b'/'))
}

/// The `depth` best units with a positive score, best first; ties by `order` (path, line, unit).
fn top(scores: &[f64], depth: usize, order: &dyn Fn(u32, u32) -> std::cmp::Ordering) -> Vec<u32> {
    let mut candidates: Vec<u32> = (0..scores.len() as u32).filter(|i| scores[*i as usize] > 0.0).collect();
    let cmp = |a: &u32, b: &u32| scores[*b as usize].total_cmp(&scores[*a as usize]).then_with(|| order(*a, *b));
    if candidates.len() > depth {
        candidates.select_nth_unstable_by(depth, cmp);
        candidates.truncate(depth);
    }
    candidates.sort_by(cmp);
    candidates
}

/// The default chunker: the spec's token rules with a `chunk::Tokenizer`
/// (the embedder's own, or the bytes/2 stand-in), 480 tokens, 64 of overlap.
pub struct TokenChunker {
    pub tokenizer: Arc<dyn super::chunk::Tokenizer>,
    pub size: usize,
    pub overlap: usize,
}

impl TokenChunker {
    pub fn new(tokenizer: Arc<dyn super::chunk::Tokenizer>) -> TokenChunker {
        TokenChunker { tokenizer, size: 480, overlap: 64 }
    }
}

impl Chunker for TokenChunker {
    fn pieces(&self, text: &str) -> Vec<(usize, usize, String)> {
        super::chunk::chunk(text, &*self.tokenizer, self.size, self.overlap)
            .into_iter()
            .map(|p| (p.first_line, p.last_line, p.text))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::{Level, Need, View};
    use crate::vfs::mem::MemFs;

    fn index(dir: &Path) -> Index {
        let chunker = Arc::new(TokenChunker::new(Arc::new(super::super::chunk::HalfBytes)));
        Index::open(&dir.join("index.db"), None, chunker).unwrap()
    }

    fn access(fs: Arc<MemFs>, grants: &[(&str, Level)]) -> Access {
        let file = crate::access::ViewFile {
            grants: grants.iter().map(|(p, l)| (p.to_string(), *l)).collect(),
            floors: Default::default(),
        };
        Access::new(fs, View::from_file(&file).unwrap(), VPath::root())
    }

    #[test]
    fn words_rank_and_hidden_files_change_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let run = |hidden: &str| {
            let fs = Arc::new(MemFs::new(VPath::root()));
            fs.add_file("/pub/upload.rs", "fn retry_failed_upload() { retry(); }\n".repeat(3));
            fs.add_file("/pub/other.rs", "fn unrelated() {}\n// retry once\n");
            fs.add_file("/secret/x.rs", hidden);
            let access = access(fs, &[("/pub", Level::Ro)]);
            let root = access.target("/pub", Need::Look).unwrap();
            let sub = tempfile::tempdir_in(dir.path()).unwrap();
            index(sub.path()).search(&access, &root, "retry upload", 10).unwrap()
        };
        let a = run("retry retry retry upload upload");
        let b = run("nothing here");
        assert_eq!(a, b);
        assert_eq!(a[0].path.as_str(), "/pub/upload.rs");
        assert_eq!(a.len(), 2);
    }

    /// A toy vectorizer: one dimension per topic word.
    struct Topics;

    impl Vectorizer for Topics {
        fn name(&self) -> &str {
            "topics"
        }
        fn embed(&self, texts: &[&str]) -> anyhow::Result<Vec<Vec<f32>>> {
            const TOPICS: [&[&str]; 4] = [&["upload", "send", "transfer"], &["retry", "again", "backoff"], &["disk", "file"], &["colour", "paint"]];
            Ok(texts
                .iter()
                .map(|t| {
                    let w = words(t);
                    let mut v: Vec<f32> = TOPICS.iter().map(|topic| w.iter().filter(|x| topic.contains(&x.as_str())).count() as f32).collect();
                    v.push(0.1);
                    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                    v.iter_mut().for_each(|x| *x /= norm);
                    v
                })
                .collect())
        }
    }

    fn index_with(path: &Path, vectors: bool) -> Index {
        let chunker = Arc::new(TokenChunker::new(Arc::new(super::super::chunk::HalfBytes)));
        let vectorizer: Option<Arc<dyn Vectorizer>> = vectors.then(|| Arc::new(Topics) as Arc<dyn Vectorizer>);
        Index::open(&path.join("index.db"), vectorizer, chunker).unwrap()
    }

    #[test]
    fn rankings_parse() {
        assert_eq!(Rankings::parse("").unwrap(), Rankings::ALL);
        assert_eq!(Rankings::parse("fused").unwrap(), Rankings::ALL);
        assert_eq!(Rankings::parse("words").unwrap(), Rankings { words: true, meaning: false, paths: false });
        assert_eq!(Rankings::parse("meaning+paths").unwrap(), Rankings { words: false, meaning: true, paths: true });
        assert!(Rankings::parse("vibes").is_err());
    }

    #[test]
    fn meaning_finds_passages_without_the_words_and_survives_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let fs = Arc::new(MemFs::new(VPath::root()));
        fs.add_file("/w/net.rs", "fn push_blob() { transfer(); send(); }\n// when it fails, backoff and go again\n");
        fs.add_file("/w/paint.rs", "fn colour() { paint(); }\n");
        fs.add_file("/w/disk.rs", "fn store_file() { disk(); }\n");
        let access = access(fs, &[("/w", Level::Ro)]);
        let root = access.target("/w", Need::Look).unwrap();
        let meaning = Rankings { words: false, meaning: true, paths: false };
        let first = index_with(dir.path(), true).search_with(&access, &root, "retry upload", 3, meaning).unwrap();
        assert_eq!(first[0].path.as_str(), "/w/net.rs");
        // Words alone find nothing: no passage holds "retry" or "upload".
        let words_only = Rankings { words: true, meaning: false, paths: false };
        assert!(index_with(dir.path(), true).search_with(&access, &root, "retry upload", 3, words_only).unwrap().is_empty());
        // A new process reads the vectors back from the store.
        let again = index_with(dir.path(), true).search_with(&access, &root, "retry upload", 3, meaning).unwrap();
        assert_eq!(first, again);
    }

    #[test]
    fn one_content_under_two_paths_is_two_results() {
        let dir = tempfile::tempdir().unwrap();
        let fs = Arc::new(MemFs::new(VPath::root()));
        fs.add_file("/w/a.md", "gamma ray burst\n");
        fs.add_file("/w/b.md", "gamma ray burst\n");
        fs.add_file("/w/c.md", "nothing to see\n");
        let access = access(fs, &[("/w", Level::Ro)]);
        let root = access.target("/w", Need::Look).unwrap();
        let hits = index(dir.path()).search(&access, &root, "gamma", 5).unwrap();
        assert_eq!(hits.iter().map(|h| h.path.as_str()).collect::<Vec<_>>(), ["/w/a.md", "/w/b.md"]);
    }

    #[test]
    fn another_connection_changing_the_store_is_seen() {
        let dir = tempfile::tempdir().unwrap();
        let fs = Arc::new(MemFs::new(VPath::root()));
        let original = "alpha beta gamma delta\n".repeat(40);
        fs.add_file("/w/a.md", original.clone());
        fs.add_file("/w/b.md", "beta only here\n");
        let access = access(fs.clone(), &[("/w", Level::Ro)]);
        let root = access.target("/w", Need::Look).unwrap();
        let (one, two) = (index(dir.path()), index(dir.path()));
        let before = two.search(&access, &root, "beta", 5).unwrap();
        // The first index drops a.md's blob and stores it again under new chunk ids.
        fs.add_file("/w/a.md", "something else entirely\n");
        one.search(&access, &root, "beta", 5).unwrap();
        fs.add_file("/w/a.md", original);
        one.search(&access, &root, "beta", 5).unwrap();
        assert_eq!(two.search(&access, &root, "beta", 5).unwrap(), before);
        let fresh = tempfile::tempdir().unwrap();
        assert_eq!(index(fresh.path()).search(&access, &root, "beta", 5).unwrap(), before);
    }

    #[test]
    fn build_reports_progress_and_drops_what_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let fs = Arc::new(MemFs::new(VPath::root()));
        fs.add_file("/w/a.md", "alpha beta\n");
        fs.add_file("/w/b.bin", vec![0u8, 159, 146, 150, 0, 1]);
        fs.add_file("/w/c.md", "gamma\n");
        let access = access(fs.clone(), &[("/w", Level::Ro)]);
        let root = access.target("/w", Need::Look).unwrap();
        let index = index(dir.path());
        let calls = std::cell::Cell::new(0);
        let done = index.build_with(&access, &root, &|_| calls.set(calls.get() + 1)).unwrap();
        assert!(calls.get() >= 1);
        assert_eq!((done.found, done.done, done.indexed, done.skipped, done.removed, done.walked), (3, 3, 2, 1, 0, true));
        assert_eq!(done.chunks, 2);
        fs.remove("/w/c.md");
        let done = index.build_with(&access, &root, &|_| {}).unwrap();
        assert_eq!((done.found, done.removed, done.chunks), (2, 1, 0));
        assert!(index.search(&access, &root, "gamma", 5).unwrap().is_empty());
    }

    #[test]
    fn changes_are_picked_up_and_tags_are_searched() {
        let dir = tempfile::tempdir().unwrap();
        let fs = Arc::new(MemFs::new(VPath::root()));
        fs.add_file("/w/a.md", "alpha beta\n");
        fs.add_file("/w/b.md", "gamma delta\n");
        let access = access(fs.clone(), &[("/w", Level::Stage)]);
        let root = access.target("/w", Need::Look).unwrap();
        let index = index(dir.path());
        assert_eq!(index.search(&access, &root, "gamma", 5).unwrap()[0].path.as_str(), "/w/b.md");
        fs.add_file("/w/a.md", "gamma gamma gamma epsilon\n");
        let hits = index.search(&access, &root, "epsilon", 5).unwrap();
        assert_eq!(hits[0].path.as_str(), "/w/a.md");
        assert!(fs.remove("/w/b.md"));
        assert!(index.search(&access, &root, "delta", 5).unwrap().is_empty());
        index.tag(&VPath::parse("/w/a.md").unwrap(), b"", Some("auth bug"), None).unwrap();
        assert_eq!(index.search(&access, &root, "auth", 5).unwrap()[0].path.as_str(), "/w/a.md");
    }
}
