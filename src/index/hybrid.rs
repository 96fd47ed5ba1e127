//! The hybrid index: keeps the store current with what a session can see,
//! and ranks passages by words (BM25), by meaning (embeddings) and by path
//! and tags, fused by reciprocal rank.
//!
//! Every ranking is computed over the session's visible files only: the
//! candidates are the files a view-checked walk finds, and BM25's document
//! frequencies and lengths are counted over those alone. So a hidden file
//! changes neither which results come back, nor their order, nor how many.
//! Access itself is decided by `access`; this module only asks it.

use super::store::{IndexStore, NewChunk};
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
use std::sync::{Arc, Mutex, RwLock};

/// Files larger than this are not indexed.
pub const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;
/// Reciprocal rank fusion's constant.
const RRF_K: f64 = 60.0;
/// How deep each ranking goes into fusion.
const RANK_DEPTH: usize = 200;
const BM25_K1: f64 = 1.2;
const BM25_B: f64 = 0.75;

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

/// Vectors kept in memory for brute-force similarity, quantised to `i8`.
#[derive(Default)]
struct Vectors {
    rows: HashMap<i64, (Vec<i8>, f32)>,
}

impl Vectors {
    fn insert(&mut self, id: i64, vector: &[f32]) {
        let max = vector.iter().fold(0f32, |m, v| m.max(v.abs())).max(f32::MIN_POSITIVE);
        let scale = max / 127.0;
        self.rows.insert(id, (vector.iter().map(|v| (v / scale).round() as i8).collect(), scale));
    }

    fn score(&self, id: i64, query: &[f32]) -> Option<f32> {
        let (row, scale) = self.rows.get(&id)?;
        Some(row.iter().zip(query).map(|(a, b)| f32::from(*a) * b).sum::<f32>() * scale)
    }
}

/// A visible file found by a refresh.
#[derive(Debug, Clone)]
struct Seen {
    real: VPath,
    shown: VPath,
    blob: Sha,
    /// The file's path and tags as words, for the path-and-tags ranking.
    meta_rowid: Option<i64>,
}

pub struct Index {
    store: Mutex<IndexStore>,
    vectorizer: Option<Arc<dyn Vectorizer>>,
    chunker: Arc<dyn Chunker>,
    vectors: RwLock<Option<Vectors>>,
}

/// What one walk step found about a file.
struct Found {
    real: VPath,
    shown: VPath,
    size: i64,
    mtime: i64,
    source: Option<Source>,
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

impl Index {
    pub fn open(path: &Path, vectorizer: Option<Arc<dyn Vectorizer>>, chunker: Arc<dyn Chunker>) -> anyhow::Result<Index> {
        Ok(Index { store: Mutex::new(IndexStore::open(path)?), vectorizer, chunker, vectors: RwLock::new(None) })
    }

    fn store(&self) -> std::sync::MutexGuard<'_, IndexStore> {
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn has_vectors(&self) -> bool {
        self.vectorizer.is_some()
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
        pieces
            .into_iter()
            .enumerate()
            .map(|(i, (first_line, last_line, text))| NewChunk {
                first_line,
                last_line,
                words: words(&text),
                vector: vectors.as_ref().map(|v| v[i].clone()),
                text,
            })
            .collect()
    }

    /// Indexes one blob unless it is already indexed with the current vectorizer.
    fn ensure_blob(&self, store: &IndexStore, sha: &Sha, text: &str) -> anyhow::Result<bool> {
        let current = self.vectorizer.as_ref().map(|v| v.name().to_string());
        if let Some(made_with) = store.blob_embedder(sha)? {
            if made_with == current {
                return Ok(false);
            }
        }
        let chunks = self.make_chunks(text);
        store.put_blob(sha, current.as_deref(), &chunks)?;
        if let Some(vectors) = self.vectors.write().unwrap_or_else(|e| e.into_inner()).as_mut() {
            for (meta, chunk) in store.chunks_of(sha)?.iter().zip(&chunks) {
                if let Some(v) = &chunk.vector {
                    vectors.insert(meta.id, v);
                }
            }
        }
        Ok(true)
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
        store.begin()?;
        self.ensure_blob(&store, &sha, file.text())?;
        // The size and time are unknown here; the next refresh stats the file again.
        store.put_file(real.as_str(), &sha, bytes.len() as i64, -1, created_by)?;
        store.commit()
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

    /// Brings the index up to date with the visible files under `root`,
    /// answering them. Files changed since they were indexed are read again;
    /// visible files that are gone are dropped.
    fn refresh(&self, access: &Access, root: &Target, progress: &dyn Fn(usize, usize)) -> anyhow::Result<Vec<Seen>> {
        let (sender, receiver) = std::sync::mpsc::sync_channel::<Found>(256);
        let root_real = root.real.clone();
        let mut seen = Vec::new();
        let mut walk_error = None;
        std::thread::scope(|scope| -> anyhow::Result<()> {
            let walker = scope.spawn(|| {
                let sender = Mutex::new(sender);
                visible_files(access, root.clone(), &|shown, rel, open| {
                    let Some(source) = open() else { return };
                    let (size, mtime) = mtime_of(&source);
                    let found = Found { real: root_real.join_rel(rel), shown: shown.clone(), size, mtime, source: Some(source) };
                    let _ = sender.lock().unwrap_or_else(|e| e.into_inner()).send(found);
                })
            });
            let store = self.store();
            store.begin()?;
            let mut done = 0usize;
            for mut found in receiver {
                let row = store.file(found.real.as_str())?;
                let blob = match row {
                    Some(row) if row.size == found.size && row.mtime == found.mtime && found.mtime >= 0 => {
                        <Sha>::try_from(row.blob.as_slice()).ok()
                    }
                    _ => {
                        let Some(bytes) = found.source.take().and_then(read_all) else { continue };
                        let Ok(text) = TextFile::decode(&bytes) else { continue };
                        let sha = sha256(&bytes);
                        self.ensure_blob(&store, &sha, text.text())?;
                        store.put_file(found.real.as_str(), &sha, found.size, found.mtime, None)?;
                        Some(sha)
                    }
                };
                let Some(blob) = blob else { continue };
                let meta_rowid = store.file_rowid(found.real.as_str())?;
                seen.push(Seen { real: found.real, shown: found.shown, blob, meta_rowid });
                done += 1;
                if done % 256 == 0 {
                    store.commit()?;
                    store.begin()?;
                    progress(done, 0);
                }
            }
            // Visible files that were not found again are gone.
            let present: HashSet<&VPath> = seen.iter().map(|s| &s.real).collect();
            for row in store.files_under(root_real.as_str())? {
                let Ok(path) = VPath::parse(&row.path) else { continue };
                if !present.contains(&path) && access.level(&path).can_read() {
                    store.remove_file(&row.path)?;
                }
            }
            store.collect_garbage()?;
            store.commit()?;
            progress(done, done);
            if let Ok(Err(e)) = walker.join() {
                walk_error = Some(e);
            }
            Ok(())
        })?;
        if let Some(e) = walk_error {
            return Err(anyhow::anyhow!("{e}"));
        }
        seen.sort_by(|a, b| a.shown.cmp(&b.shown));
        Ok(seen)
    }

    /// Indexes everything visible under `root` (for `ctxfs index`).
    pub fn build(&self, access: &Access, root: &Target, progress: &dyn Fn(usize, usize)) -> anyhow::Result<usize> {
        Ok(self.refresh(access, root, progress)?.len())
    }

    fn load_vectors(&self, store: &IndexStore) -> anyhow::Result<()> {
        if self.vectorizer.is_none() || self.vectors.read().unwrap_or_else(|e| e.into_inner()).is_some() {
            return Ok(());
        }
        let mut vectors = Vectors::default();
        store.all_vectors(|id, v| vectors.insert(id, &v))?;
        *self.vectors.write().unwrap_or_else(|e| e.into_inner()) = Some(vectors);
        Ok(())
    }

    /// Ranks the visible passages under `root` for `query`, best first.
    pub fn search(&self, access: &Access, root: &Target, query: &str, limit: usize) -> anyhow::Result<Vec<Hit>> {
        let seen = self.refresh(access, root, &|_, _| {})?;
        let store = self.store();
        self.load_vectors(&store)?;
        // The ranking units: each chunk of each visible file.
        struct Unit {
            file: usize,
            chunk: i64,
            first_line: usize,
            last_line: usize,
            words: usize,
        }
        let mut units = Vec::new();
        let mut blob_chunks: HashMap<Sha, Vec<super::store::ChunkMeta>> = HashMap::new();
        for (file, s) in seen.iter().enumerate() {
            if !blob_chunks.contains_key(&s.blob) {
                blob_chunks.insert(s.blob, store.chunks_of(&s.blob)?);
            }
            for c in &blob_chunks[&s.blob] {
                units.push(Unit { file, chunk: c.id, first_line: c.first_line, last_line: c.last_line, words: c.words });
            }
        }
        let mut terms = words(query);
        terms.sort();
        terms.dedup();
        let mut rankings: Vec<Vec<usize>> = Vec::new();

        // Words: BM25 with statistics over the visible units only.
        if !units.is_empty() && !terms.is_empty() {
            let n = units.len() as f64;
            let avg = units.iter().map(|u| u.words as f64).sum::<f64>() / n;
            let mut scores = vec![0f64; units.len()];
            for term in &terms {
                let postings = store.chunk_postings(term)?;
                let hits: Vec<(usize, u32)> =
                    units.iter().enumerate().filter_map(|(i, u)| postings.get(&u.chunk).map(|tf| (i, *tf))).collect();
                let idf = ((n - hits.len() as f64 + 0.5) / (hits.len() as f64 + 0.5) + 1.0).ln();
                for (i, tf) in hits {
                    let tf = f64::from(tf);
                    let norm = 1.0 - BM25_B + BM25_B * units[i].words as f64 / avg.max(1.0);
                    scores[i] += idf * tf * (BM25_K1 + 1.0) / (tf + BM25_K1 * norm);
                }
            }
            rankings.push(ranked(&scores, |i| (&seen[units[i].file].shown, units[i].first_line)));
        }

        // Paths and tags: BM25 over each visible file's path and tags; a hit is the file's first passage.
        if !seen.is_empty() && !terms.is_empty() {
            let first_unit: HashMap<usize, usize> =
                units.iter().enumerate().rev().map(|(i, u)| (u.file, i)).collect();
            let rowids: HashMap<i64, usize> = seen.iter().enumerate().filter_map(|(i, s)| s.meta_rowid.map(|r| (r, i))).collect();
            let n = seen.len() as f64;
            let mut scores = vec![0f64; units.len()];
            for term in &terms {
                let postings = store.meta_postings(term)?;
                let hits: Vec<(usize, u32)> = postings.iter().filter_map(|(r, tf)| rowids.get(r).map(|f| (*f, *tf))).collect();
                let idf = ((n - hits.len() as f64 + 0.5) / (hits.len() as f64 + 0.5) + 1.0).ln();
                for (file, tf) in hits {
                    if let Some(unit) = first_unit.get(&file) {
                        scores[*unit] += idf * f64::from(tf);
                    }
                }
            }
            rankings.push(ranked(&scores, |i| (&seen[units[i].file].shown, units[i].first_line)));
        }

        // Meaning: cosine similarity to the query's vector.
        if let Some(vectorizer) = &self.vectorizer {
            if let Ok(mut query_vectors) = vectorizer.embed(&[query]) {
                if let Some(q) = query_vectors.pop() {
                    let vectors = self.vectors.read().unwrap_or_else(|e| e.into_inner());
                    if let Some(vectors) = vectors.as_ref() {
                        let scores: Vec<f64> =
                            units.iter().map(|u| vectors.score(u.chunk, &q).map_or(0.0, f64::from)).collect();
                        rankings.push(ranked(&scores, |i| (&seen[units[i].file].shown, units[i].first_line)));
                    }
                }
            }
        }

        // Reciprocal rank fusion, then the limit.
        let mut fused: HashMap<usize, f64> = HashMap::new();
        for ranking in &rankings {
            for (rank, unit) in ranking.iter().take(RANK_DEPTH).enumerate() {
                *fused.entry(*unit).or_default() += 1.0 / (RRF_K + rank as f64 + 1.0);
            }
        }
        let mut order: Vec<(usize, f64)> = fused.into_iter().collect();
        order.sort_by(|a, b| {
            b.1.total_cmp(&a.1)
                .then_with(|| seen[units[a.0].file].shown.cmp(&seen[units[b.0].file].shown))
                .then_with(|| units[a.0].first_line.cmp(&units[b.0].first_line))
        });
        let mut hits = Vec::new();
        for (unit, _) in order.into_iter().take(limit) {
            let u = &units[unit];
            hits.push(Hit {
                path: seen[u.file].shown.clone(),
                first_line: u.first_line,
                last_line: u.last_line,
                text: store.chunk_text(u.chunk)?,
            });
        }
        Ok(hits)
    }
}

/// Indices with a positive score, best first; ties by path and line.
fn ranked<'a>(scores: &[f64], key: impl Fn(usize) -> (&'a VPath, usize)) -> Vec<usize> {
    let mut order: Vec<usize> = (0..scores.len()).filter(|i| scores[*i] > 0.0).collect();
    order.sort_by(|a, b| scores[*b].total_cmp(&scores[*a]).then_with(|| key(*a).cmp(&key(*b))));
    order
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
