//! The index's state: keeps the store current with what a session can see
//! (refresh, time-boxed indexing that resumes), mirrors it in memory, and
//! reuses a walk's visible files and their passages laid out for ranking;
//! not the rankings and their fusion (`rankings`, `rank`), nor the SQL
//! (`store`).
//!
//! Every search ranks the session's visible files only: the candidates are
//! the files a view-checked walk finds, handed to `rankings` with their
//! passages (`Units`), so a hidden file changes neither which results come
//! back, nor their order, nor how many. Access itself is decided by
//! `access`; this module only asks it.
//!
//! Speed: what the store holds about files and chunks is mirrored in memory
//! (`Mirror`: each file's size, time and blob; each blob's chunk ids, lines
//! and lengths once a search needs them; the sign bits of their vectors, 48
//! bytes a passage, once a meaning search needs them). A walk's visible
//! files are kept while the file system's change count and the store stay
//! the same (`Walked`), and with them their passages laid out for ranking
//! (`Units`: lengths, the chunk-to-passage map, each file's place in path
//! order for settling ties as numbers, and the sign bits side by side,
//! in lists on a large tree: `codes`), made by the first search that needs
//! them. Terms' postings are read from SQLite once and kept as far as the
//! store's changes leave them true (a passages' list is brought up to date
//! by reading the chunks after those it covers; the paths' lists are kept
//! until a file's path or tags change); what a query needs that memory
//! lacks is shared with a second connection, on another thread. A query then reads from SQLite only the `i8` vectors of the
//! passages the meaning ranking scores exactly (half of them on the second
//! connection too) and the texts it answers.
//! The mirror is dropped and read again when another connection (another
//! process) committed to the store. When the file system can say which
//! paths changed since a kept walk (`Fs::changed_since`: files only, no
//! ignore file, link or directory among them), only those are looked at,
//! by the same walk narrowed to them (`Only`), so each is decided exactly as
//! a whole walk would decide it; the list keeps its walk's age. Otherwise
//! a refresh walks the visible tree when something may have changed; it
//! only stats unchanged files; new or changed files are read, chunked and
//! embedded on the walk's threads, and
//! the store is written from one, committed at least every second, so an
//! interrupted build resumes where it stopped. A search indexes for at most
//! `SEARCH_INDEX_BUDGET` and answers from what is indexed, saying how many
//! files are left. With a vectorizer that is not cheap (a model run whole, a
//! server), a search's own time to index and a round in the background
//! first store every new file's passages and words without vectors
//! (`Take::Words`), so even a session's first search finds each file by its
//! words, and then embed them, file by file.

use super::codes::{sign_code, sign_code_of_i8, Codes};
use super::embed::{EmbedError, Embedder};
use super::rankings::{rank as rank_units, FileVotes, Meaning, Quantised, Rankings, Tagged};
use super::store::{decode_vector, IndexStore, Merges, NewChunk, PostingsMarks};
use super::terms::{names_identifiers, query_terms, query_words, CountedTerms};
use crate::access::walk::{visible_files, visible_files_among, Found, Only};
use crate::access::{Access, Target};
use crate::hash::{sha256, Sha};
use crate::paths::VPath;
use crate::text::TextFile;
use crate::vfs::{FsError, Kind, Source};
use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

/// Files larger than this are not indexed.
pub const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;
/// A refresh commits after this many written files or chunks.
const COMMIT_FILES: usize = 256;
const COMMIT_CHUNKS: usize = 4096;
/// ... and at least this often, so a slow embedder loses little when the process is killed.
const COMMIT_EVERY: std::time::Duration = std::time::Duration::from_secs(1);
/// How long a search indexes new or changed files before it answers from what is indexed
/// (the rest is indexed in the background between calls, by later searches, or by `ctxfs index`).
pub const SEARCH_INDEX_BUDGET: std::time::Duration = std::time::Duration::from_secs(3);
/// How long indexing in the background waits before it looks again whether
/// anyone else still wants the store.
const GIVE_WAY: std::time::Duration = std::time::Duration::from_millis(20);
/// Passages embedded in one call while a file is indexed: between calls the search's budget is checked.
const EMBED_BATCH: usize = 32;
/// The same for indexing in the background, which a search arriving waits
/// for until the calls in flight end: shorter calls, a shorter wait.
const BACKGROUND_BATCH: usize = 8;
/// How many texts cut short by a search's time `PartialTexts` keeps (the oldest goes first):
/// a search's walk prepares a file or two at once, and a long file's passages with their
/// vectors may be megabytes.
const PARTIAL_TEXTS: usize = 4;

/// The passages embedded so far of texts a search's time ran out in, by
/// content: how many of the chunker's pieces were taken, and what they
/// became (a piece the embedder refused for its length is several).
#[derive(Default)]
struct PartialTexts(Vec<(Sha, usize, Vec<Embedded>)>);

/// A passage and its vector (none without a vectorizer, or when it failed).
type Embedded = (Passage, Option<Vec<f32>>);

impl PartialTexts {
    /// What was embedded of the text `sha` (of `pieces` pieces), taken out; none when nothing was kept.
    fn take(&mut self, sha: &Sha, pieces: usize) -> (usize, Vec<Embedded>) {
        match self.0.iter().position(|(kept, taken, _)| kept == sha && *taken <= pieces) {
            Some(at) => {
                let (_, taken, embedded) = self.0.remove(at);
                (taken, embedded)
            }
            None => (0, Vec::new()),
        }
    }

    /// Keeps what was embedded of the text `sha` (its first `taken` pieces), letting the oldest kept text go when `PARTIAL_TEXTS` are kept.
    fn keep(&mut self, sha: Sha, taken: usize, embedded: Vec<Embedded>) {
        self.0.retain(|(kept, _, _)| *kept != sha);
        if self.0.len() >= PARTIAL_TEXTS {
            self.0.remove(0);
        }
        self.0.push((sha, taken, embedded));
    }
}

/// Files in flight between the walk and the writer (each may carry its chunks).
const CHANNEL_BOUND: usize = 32;

/// A passage: `(first_line, last_line, text)`.
pub type Passage = (usize, usize, String);

/// Cuts a text into passages.
pub trait Chunker: Send + Sync {
    fn pieces(&self, text: &str) -> Vec<Passage>;
    /// `pieces`, and the text's token ids where the tokenizer had them, each
    /// passage with the range of them that is its own where they are
    /// (`chunk::chunk_with_ids`).
    fn pieces_with_ids(&self, text: &str) -> super::chunk::PiecesAndIds<Passage> {
        (self.pieces(text).into_iter().map(|passage| (passage, None)).collect(), Vec::new())
    }
    /// The tokenizer the passages were measured with, which halves a passage
    /// the vectorizer refuses for its length (`chunk::embed_fitted`); `None`:
    /// such a passage goes without a vector.
    fn tokenizer(&self) -> Option<&dyn super::chunk::Tokenizer> {
        None
    }
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

/// A search's answer: the passages, and how much is not indexed yet.
#[derive(Debug, Clone, PartialEq)]
pub struct Searched {
    pub hits: Vec<Hit>,
    /// New or changed visible files left unindexed because the search's time to index ran out, and their bytes.
    pub pending: usize,
    pub pending_bytes: u64,
    /// Of the `pending` files, those searched by their words alone (stored
    /// ahead of their vectors, `Take::Words`), and those searched as they
    /// were before they changed (their earlier version is indexed).
    pub pending_words: usize,
    pub pending_earlier: usize,
    /// The next search would walk again: the file system could not count
    /// changes yet when this one walked (`Progress::uncounted`).
    pub uncounted: bool,
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
    /// Files skipped: binary, too large or unreadable (the three below, in all).
    pub skipped: usize,
    /// Of those: not text (binary, or not UTF-8 / UTF-16).
    pub skipped_binary: usize,
    /// Of those: larger than `MAX_FILE_BYTES`.
    pub skipped_large: usize,
    /// Of those: could not be opened or read.
    pub skipped_unreadable: usize,
    /// Files dropped from the index because they are gone.
    pub removed: usize,
    /// New or changed files a search left unindexed (its time ran out), and their bytes.
    pub pending: usize,
    pub pending_bytes: u64,
    /// Of those, files whose words are stored and searched while they wait for their vectors,
    /// and changed files whose earlier version is searched meanwhile.
    pub pending_words: usize,
    pub pending_earlier: usize,
    /// The file system could not count changes when the walk began (its
    /// watcher was still starting), so the next search walks again.
    pub uncounted: bool,
    /// The round stores new files' words alone, ahead of their vectors
    /// (`Take::Words`); a round that embeds them follows.
    pub words_only: bool,
    /// Of the `pending` files, those whose words such a round read and stored.
    pub words_read: usize,
}

impl Progress {
    /// Files this round has had its turn with, and those it left for later:
    /// a round of words alone leaves every file it reads to the embedding,
    /// so those count as checked here.
    pub fn checked(&self) -> (usize, usize) {
        if self.words_only {
            (self.done + self.words_read, self.pending.saturating_sub(self.words_read))
        } else {
            (self.done, self.pending)
        }
    }

    /// One line for a progress report: files checked of those found (`N+` while the walk goes on), passages made.
    pub fn summary(&self) -> String {
        let found = if self.walked { self.found.to_string() } else { format!("{}+", self.found) };
        let (checked, left) = self.checked();
        let left = if left > 0 { format!(", {left} left for later") } else { String::new() };
        if self.words_only {
            format!(
                "indexing words: {checked} of {found} files checked, {} new or changed read ({} passages, searched by their words until embedded){left}",
                self.words_read, self.chunks
            )
        } else {
            format!(
                "indexing: {checked} of {found} files checked, {} new or changed indexed ({} passages){left}",
                self.indexed, self.chunks
            )
        }
    }
}

/// One chunk of a blob, in memory.
#[derive(Debug, Clone, Copy)]
struct MemChunk {
    id: i64,
    first_line: u32,
    last_line: u32,
    words: u32,
}

/// One blob in memory: its chunks (once a search needed them) and the sign
/// bits of their vectors (once a search needed those).
#[derive(Debug, Default)]
struct BlobEntry {
    /// Made with the current vectorizer (else it is made again when seen).
    current: bool,
    /// Its passages and words only, stored ahead of its vectors (`Take::Words`):
    /// searched by words, made again with vectors by the next round that embeds.
    words_only: bool,
    chunks: Vec<MemChunk>,
    /// `code_words` words of sign bits per chunk, or empty when the blob has
    /// no vectors (or they are not loaded).
    codes: Vec<u64>,
}

/// One file row, in memory.
#[derive(Debug)]
struct FileEntry {
    rowid: i64,
    blob: Sha,
    size: i64,
    mtime: i64,
    /// The last refresh that found the file (the walk's threads set it under a read lock).
    mark: AtomicU32,
}

/// What the store holds, in memory (see the module header).
#[derive(Default)]
struct Mirror {
    /// The store's `data_version` when this was read; `None`: not read.
    version: Option<i64>,
    files: HashMap<String, FileEntry>,
    blobs: HashMap<Sha, BlobEntry>,
    /// Whether the blobs hold their chunks (a build alone does not need them).
    chunks: bool,
    /// Whether the blobs hold their vectors' codes.
    vectors: bool,
    /// The vectors' length (0 until one is known), and the `u64` words of a code.
    dims: usize,
    /// The count of refreshes, for `FileEntry::mark`.
    epoch: u32,
    /// How many blobs were stored through this mirror: a list of visible
    /// files laid out before and after the same count, over the same store
    /// version, has the same passages.
    blobs_put: u64,
    /// How many times a blob's passages held here may have been made anew
    /// (stored again under a sha already held, or everything read again):
    /// passages laid out before are carried into a newer list only while
    /// this has not moved (`Units::remade`).
    blobs_remade: u64,
    /// The `Fs::source` a refresh read each file from, where it is not the
    /// shared tree's (0): a file of a mount is one session's working copy's,
    /// and is taken as unchanged only by a walk of that same copy.
    sources: HashMap<String, u64>,
}

impl Mirror {
    fn is_current(&self, sha: &Sha) -> bool {
        self.blobs.get(sha).is_some_and(|b| b.current)
    }

    /// Whether the blob is stored with its words and without vectors, waiting for them (`Take::Words`).
    fn is_words_only(&self, sha: &Sha) -> bool {
        self.blobs.get(sha).is_some_and(|b| b.words_only)
    }

    /// Whether searches may show the blob: made with the current vectorizer,
    /// or its words stored ahead of its vectors.
    fn is_searchable(&self, sha: &Sha) -> bool {
        self.blobs.get(sha).is_some_and(|b| b.current || b.words_only)
    }

    fn code_words(&self) -> usize {
        self.dims.div_ceil(64)
    }

    /// Whether the entry at `path` was read from `source` (see `sources`).
    fn read_from(&self, path: &str, source: u64) -> bool {
        self.sources.get(path).copied().unwrap_or(0) == source
    }

    /// Records where the entry at `path` was read from.
    fn set_source(&mut self, path: &str, source: u64) {
        if source == 0 {
            self.sources.remove(path);
        } else {
            self.sources.insert(path.to_owned(), source);
        }
    }

    /// Records a blob just stored; its chunks and codes are kept when the others' are.
    fn put_blob(&mut self, sha: Sha, take: Take, ids: &[i64], chunks: &[NewChunk]) {
        let (current, words_only) = (take == Take::Everything, take == Take::Words);
        let mut entry = BlobEntry { current, words_only, ..BlobEntry::default() };
        if self.chunks {
            entry.chunks = ids
                .iter()
                .zip(chunks)
                .map(|(id, c)| MemChunk {
                    id: *id,
                    first_line: c.first_line as u32,
                    last_line: c.last_line as u32,
                    words: c.words.total as u32,
                })
                .collect();
        }
        if self.chunks && self.vectors && !chunks.is_empty() {
            let dims = chunks[0].vector.as_ref().map_or(0, Vec::len);
            if self.dims == 0 {
                self.dims = dims;
            }
            if dims > 0
                && dims == self.dims
                && chunks.iter().all(|c| c.vector.as_ref().is_some_and(|v| v.len() == dims))
            {
                for c in chunks {
                    sign_code(c.vector.iter().flatten().map(|v| *v > 0.0), &mut entry.codes, dims);
                }
            }
        }
        if self.blobs.insert(sha, entry).is_some() {
            self.blobs_remade += 1;
        }
        self.blobs_put += 1;
    }
}

/// What the walk's threads count while they walk.
#[derive(Default)]
struct WalkCounts {
    found: AtomicUsize,
    same: AtomicUsize,
    skipped: AtomicUsize,
    skipped_binary: AtomicUsize,
    skipped_large: AtomicUsize,
    skipped_unreadable: AtomicUsize,
    bytes: AtomicU64,
    pending: AtomicUsize,
    pending_bytes: AtomicU64,
    pending_words: AtomicUsize,
    pending_earlier: AtomicUsize,
    /// Whether a file was left pending whose content has no words stored yet (`Index::words_owed`).
    words_owed: AtomicBool,
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
        state.skipped_binary = self.skipped_binary.load(Ordering::Relaxed);
        state.skipped_large = self.skipped_large.load(Ordering::Relaxed);
        state.skipped_unreadable = self.skipped_unreadable.load(Ordering::Relaxed);
        state.done = self.same.load(Ordering::Relaxed) + state.skipped + state.indexed;
        state.bytes = self.bytes.load(Ordering::Relaxed) + state.bytes_indexed;
        state.pending = self.pending.load(Ordering::Relaxed);
        state.pending_bytes = self.pending_bytes.load(Ordering::Relaxed);
        state.pending_words = self.pending_words.load(Ordering::Relaxed);
        state.pending_earlier = self.pending_earlier.load(Ordering::Relaxed);
    }
}

/// A visible file found by a refresh.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Seen {
    /// Shared: a list brought up to date from the change feed copies the
    /// kept list's entries, a million-passage tree's 90,000 paths each time.
    pub(super) shown: Arc<VPath>,
    blob: Sha,
    /// The file's row, whose path and tags are words for the path-and-tags ranking.
    rowid: i64,
}

/// What a refresh takes in of a new or changed file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Take {
    /// Its passages, words and vectors: the file is indexed.
    Everything,
    /// Its passages and words alone, for a slow vectorizer (`Embedder::is_cheap`):
    /// searches find the file by its words at once, and a later round that
    /// embeds makes it again with vectors. Such a file is still counted as
    /// pending, so no walk that found it is kept.
    Words,
}

/// What the walk hands the writer about one visible file.
enum Work {
    /// Unchanged since it was indexed.
    Same { shown: VPath, size: i64, blob: Sha, rowid: i64 },
    /// Read and hashed; chunked and embedded when its content was not indexed yet.
    Read { real: VPath, shown: VPath, size: i64, mtime: i64, sha: Sha, chunks: Option<Vec<NewChunk>>, origin: u64 },
    /// Binary, too large or unreadable.
    Skip { size: i64, why: SkipWhy },
    /// New or changed, left for later: the search's time to index ran out.
    /// A changed file's indexed version (`stale`) is still searched meanwhile.
    /// `words_owed`: its content's words are not stored either (`Take::Words` would store them).
    Pending { size: i64, stale: Option<Seen>, words_owed: bool, meanwhile: Meanwhile },
}

/// How a file left pending is searched while it waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Meanwhile {
    /// Not at all: nothing of it is indexed.
    NotSearched,
    /// By its words alone, stored ahead of its vectors (`Take::Words`).
    ByWords,
    /// As it was before it changed: its earlier version is indexed.
    AsBefore,
}

pub struct Index {
    store: Mutex<IndexStore>,
    vectorizer: Option<Arc<dyn Embedder>>,
    chunker: Arc<dyn Chunker>,
    mirror: RwLock<Mirror>,
    /// The visible files of the last few walks, reused while the file
    /// system's change count and the store stay as they were.
    walks: Mutex<Vec<Walked>>,
    /// Terms' postings read from the store, kept while it does not change.
    postings: Mutex<PostingsCache>,
    /// The store's file, and a second connection to it that reads half of a
    /// query's postings and exact vectors on another thread (opened when first needed).
    path: std::path::PathBuf,
    reader: Mutex<Option<IndexStore>>,
    /// How long a search indexes new or changed files before it answers (`SEARCH_INDEX_BUDGET`).
    index_budget: std::time::Duration,
    /// Texts whose embedding a search's time ran out in, by content: the
    /// passages embedded so far, which the next search goes on from.
    partial: Mutex<PartialTexts>,
    /// From how many visible passages with vectors their codes are put in lists (`codes::LISTS_FROM`).
    lists_from: usize,
    /// Whole walks made for searches, and kept walks brought up to date from
    /// the file system's feed instead (for tests and logs).
    walks_made: AtomicUsize,
    feeds_used: AtomicUsize,
    /// How many callers wait for the store now: indexing in the background
    /// gives way to them (`Until::Unwanted`).
    store_wanted: AtomicUsize,
    /// Set when the engine that owns the index goes away: indexing in the background stops.
    closing: std::sync::atomic::AtomicBool,
    /// Whether a search's own time to index and a round in the background
    /// take in new files' words before they embed any (`Take::Words`): with
    /// a vectorizer that is not cheap.
    words_first: bool,
    /// Whether a round may find files whose words are not in yet: set when
    /// the index opens and whenever a refresh leaves a file pending whose
    /// content has no words stored; a round of words that went to the end
    /// clears it (so a search that only found files still waiting for their
    /// vectors does not cost the next round a walk for words).
    words_owed: std::sync::atomic::AtomicBool,
    /// Whether indexing in the background takes in what a search had no time
    /// for (`index::background::Readying::Unindexed`): a search then takes in
    /// nothing itself and answers from what is indexed, instead of spending
    /// its own time on what the background does anyway.
    in_background: std::sync::atomic::AtomicBool,
    /// How many times a damaged store was emptied and opened again
    /// (`mended`): a failure seen before the latest one needs no mending.
    mends: AtomicUsize,
}

/// When a refresh stops taking in new content. It still walks to the end,
/// so what it leaves is counted as pending, and an indexed earlier version
/// of a file stays as it was.
#[derive(Clone, Copy)]
enum Until<'a> {
    /// Not before everything is in (`ctxfs index`).
    Done,
    /// At a time (a search's budget).
    Time(std::time::Instant),
    /// As soon as another caller wants the store, or the index closes
    /// (indexing in the background, which gives way to every search and write).
    Unwanted(&'a Index),
}

impl Until<'_> {
    fn after(budget: std::time::Duration) -> Until<'static> {
        Until::Time(std::time::Instant::now() + budget)
    }

    fn passed(&self) -> bool {
        match self {
            Until::Done => false,
            Until::Time(at) => std::time::Instant::now() >= *at,
            Until::Unwanted(index) => {
                index.store_wanted.load(Ordering::SeqCst) > 0 || index.closing.load(Ordering::SeqCst)
            }
        }
    }
}

/// Which postings: of passages' words, or of files' paths and tags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Postings {
    Chunks,
    Meta,
}

/// One term's postings: row or chunk id and the term's count there.
pub(super) type PostingList = Arc<super::postings::List>;

/// Postings read from the store, by term, kept across the store's changes
/// as far as they stay true. A passages' list knows the newest chunk it
/// covers, and only the chunks after it are read to bring it up to date: a
/// chunk id is never given twice and a commit's chunks come after every
/// earlier commit's (`postings`), so nothing at or before it can be added
/// (a removed chunk's postings may stay: callers keep the chunks they hold).
/// The paths' lists are kept while the store's count of changes to files'
/// paths and tags stays (`PostingsMarks::meta`); an outside edit of a file's
/// content leaves them. Everything starts over when the schema changes (a
/// migration gives chunk ids from 1 again) or the store's newest chunk is
/// older than one held (another store in its place).
#[derive(Default)]
struct PostingsCache {
    /// The marks the cache was last brought to (`keep_for`).
    marks: Option<PostingsMarks>,
    terms: HashMap<(Postings, String), Kept>,
    /// Postings held, to bound the memory.
    held: usize,
    /// Lists read whole, and lists brought up to date by what came after
    /// them, since the cache started (for tests and logs).
    read_whole: usize,
    read_after: usize,
    /// The tagged files and their tags' terms, read with the paths' lists
    /// and dropped with them when a path or tag changes.
    tagged: Option<Arc<Vec<Tagged>>>,
}

/// One term's list as held, and the newest chunk it covers (a passages' list).
struct Kept {
    list: PostingList,
    upto: i64,
}

/// What a term's list needs from the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reading {
    /// Every posting: memory holds none of it.
    All,
    /// The chunks after this one: memory holds the rest.
    After(i64),
}

/// The most postings kept in memory (8 bytes each); past that the cache starts over.
const POSTINGS_KEPT: usize = 8 << 20;

impl PostingsCache {
    /// Drops what no longer holds at `marks` (see the type), and everything
    /// once past `POSTINGS_KEPT`.
    fn keep_for(&mut self, marks: PostingsMarks) {
        let restart = match self.marks {
            None => true,
            Some(held) => {
                held.schema != marks.schema || marks.newest_chunk < held.newest_chunk || self.held > POSTINGS_KEPT
            }
        };
        if restart {
            if self.held > 0 {
                tracing::debug!(held = self.held, "postings cache starts over");
            }
            *self = PostingsCache { marks: Some(marks), ..PostingsCache::default() };
            return;
        }
        if self.marks.is_some_and(|held| held.meta != marks.meta) {
            self.tagged = None;
            self.terms.retain(|(kind, _), _| *kind != Postings::Meta);
            self.held = self.terms.values().map(|kept| kept.list.len()).sum();
        }
        self.marks = Some(marks);
    }

    /// What `which` needs to be as the store is at `marks` (`None`: nothing).
    fn reading(&self, which: &(Postings, String), marks: PostingsMarks) -> Option<Reading> {
        match self.terms.get(which) {
            None => Some(Reading::All),
            Some(kept) if which.0 == Postings::Chunks && kept.upto < marks.newest_chunk => {
                Some(Reading::After(kept.upto))
            }
            Some(_) => None,
        }
    }

    /// Keeps what was read for `which` at `marks` (all of it, or what came
    /// after the list held) and answers the whole list; `None` when the list
    /// it adds to is gone (the cache started over meanwhile).
    fn take_in(
        &mut self,
        which: (Postings, String),
        reading: Reading,
        read: super::postings::List,
        marks: PostingsMarks,
    ) -> Option<PostingList> {
        if self.marks != Some(marks) {
            return match reading {
                Reading::All => Some(Arc::new(read)),
                Reading::After(_) => None,
            };
        }
        self.held += read.len();
        let upto = marks.newest_chunk;
        match reading {
            Reading::All => {
                self.read_whole += 1;
                let list = Arc::new(read);
                self.terms.insert(which, Kept { list: list.clone(), upto });
                Some(list)
            }
            Reading::After(after) => {
                self.read_after += 1;
                let kept = self.terms.get_mut(&which).filter(|kept| kept.upto == after)?;
                // In place unless a search still holds the list.
                Arc::make_mut(&mut kept.list).append(read);
                kept.upto = upto;
                Some(kept.list.clone())
            }
        }
    }
}

impl Postings {
    /// This term's list of this kind, read from the store.
    #[cfg(test)]
    fn read(self, store: &IndexStore, term: &str) -> anyhow::Result<Vec<(i64, u32)>> {
        match self {
            Postings::Chunks => store.chunk_postings(term),
            Postings::Meta => store.meta_postings(term),
        }
    }

    /// What `reading` asks of this term's list as the store is at `marks`:
    /// a passages' list ends at `marks`' newest chunk (a connection whose
    /// snapshot is newer may see more; the rest is read when the marks move).
    fn read_at(
        self,
        store: &IndexStore,
        term: &str,
        reading: Reading,
        marks: PostingsMarks,
    ) -> anyhow::Result<super::postings::List> {
        match self {
            Postings::Chunks => {
                let after = match reading {
                    Reading::All => i64::MIN,
                    Reading::After(after) => after,
                };
                let mut list = store.chunk_list_after(term, after)?;
                list.keep_through(marks.newest_chunk);
                Ok(list)
            }
            Postings::Meta => Ok(super::postings::List::from_ids(store.meta_postings(term)?)),
        }
    }
}

/// The visible files one walk found, and what they depended on.
struct Walked {
    /// The view (grants, floors, roots) and the root, as text.
    key: String,
    /// `Fs::changes` before the walk; `None` when the file system could not
    /// count them yet (a watcher still starting): such a list is never
    /// answered from again, but a walk that finds the same files takes its
    /// passages laid out and their codes instead of making them again.
    changes: Option<u64>,
    /// The store's `data_version` before the walk (another process's commits
    /// move it) and this connection's `total_changes` after it (a walk of
    /// another root, an indexed write or a tag moves that).
    version: Option<i64>,
    store_changes: u64,
    /// The mirror's `blobs_put` when the list was laid out.
    blobs_put: u64,
    /// When the walk was made: a walk is not reused past `WALK_MAX_AGE`, in
    /// case the watcher missed something (it should not, but it is cheap).
    /// A list brought up to date from the feed keeps its walk's time.
    made: std::time::Instant,
    /// Whether a file was reached through a link: what it shows may change
    /// with its target, which the feed does not name, so it is walked again.
    linked: bool,
    seen: Arc<Visible>,
}

/// What a refresh met on its way that limits how its list may be kept.
#[derive(Default)]
struct Met {
    /// A file reached through a link that leads outside the root or into `.git`.
    escaped: AtomicBool,
    /// A file reached through a link at all.
    linked: AtomicBool,
}

/// Names whose change changes which files a walk finds (ignore files, a
/// repository's root and its `info/exclude`): the feed is not enough.
const WALK_DECIDING_NAMES: [&str; 4] = [".gitignore", ".ignore", ".rgignore", ".git"];

/// The visible files of one walk, and (made by the first search that needs
/// them, kept while the walk is) their passages laid out for ranking.
struct Visible {
    seen: Vec<Seen>,
    units: OnceLock<Units>,
    codes: OnceLock<Codes>,
    /// The nearest list this one was brought up to date from (the same view)
    /// whose passages are laid out, kept until this one's are: those of its
    /// files that are still here are carried over from it (`units_carried`).
    units_from: Mutex<Option<Before>>,
    /// The nearest one whose codes are made, kept until this one's are: they
    /// are carried over from it, in its lists (`codes_of`).
    codes_from: Mutex<Option<Before>>,
}

/// In `Before::files`: a file the list before did not have.
const NEW_FILE: u32 = u32::MAX;

/// A list another was brought up to date from, and where each file of that
/// other one was in it.
struct Before {
    visible: Arc<Visible>,
    /// For each file of the newer list, its place in `visible.seen`, or `NEW_FILE`.
    files: Vec<u32>,
}

impl Before {
    /// The places in the same list of the files of a list made from the
    /// newer one (`files`: each one's place in the newer one).
    fn through(&self, files: &[u32]) -> Before {
        let place = |f: &u32| if *f == NEW_FILE { NEW_FILE } else { self.files[*f as usize] };
        Before { visible: self.visible.clone(), files: files.iter().map(place).collect() }
    }
}

/// Locks a mutex whose holder may have panicked (what it guards is whole between statements).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl Visible {
    /// The walk's files laid out by their passages' ids (`passage_order`).
    fn new(mut seen: Vec<Seen>, mirror: &Mirror) -> Visible {
        seen.sort_by_cached_key(|s| passage_order(mirror, s));
        Visible::laid_out(seen)
    }

    /// Files already in `passage_order`.
    fn laid_out(seen: Vec<Seen>) -> Visible {
        Visible {
            seen,
            units: OnceLock::new(),
            codes: OnceLock::new(),
            units_from: Mutex::new(None),
            codes_from: Mutex::new(None),
        }
    }

    /// This list, brought up to date from `old` (`files`: where each of its
    /// files was there, or `NEW_FILE`), takes its passages and codes from
    /// `old` when they are made, else from what `old` was waiting for.
    fn after(self, old: &Arc<Visible>, files: Vec<u32>) -> Visible {
        let from = |made: bool, waiting: &Mutex<Option<Before>>| {
            if made {
                Some(Before { visible: old.clone(), files: files.clone() })
            } else {
                lock(waiting).as_ref().map(|before| before.through(&files))
            }
        };
        *lock(&self.units_from) = from(old.units.get().is_some(), &old.units_from);
        *lock(&self.codes_from) = from(old.codes.get().is_some(), &old.codes_from);
        self
    }
}

/// Where a file goes in a walk's list: by its first passage's id (a blob's
/// passages have consecutive ids), files without passages last. A walk
/// finds files in no particular order; laid out so, a term's postings (in id
/// order) visit the units, and every array indexed by unit, front to back
/// instead of at random, which at a million passages halves the words
/// ranking's time. Nothing else depends on the order: scores are per unit
/// and ties go by shown path.
fn passage_order(mirror: &Mirror, seen: &Seen) -> i64 {
    mirror.blobs.get(&seen.blob).and_then(|b| b.chunks.first()).map_or(i64::MAX, |c| c.id)
}

/// Up to how many changed paths each kept entry of a list brought up to date
/// is compared with, rather than looked up in a set of them by hash.
const COMPARED_UP_TO: usize = 8;

/// From how many files brought up to date from the change feed the list is
/// sorted again, rather than each put in its place.
const PLACED_ONE_BY_ONE_UP_TO: usize = 64;

/// The ranking units of a walk: every chunk of every visible file, in the
/// list's order (`passage_order`; file `f` owns units `starts[f]..starts[f + 1]`),
/// with what BM25 needs about them. No result depends on that order: every
/// score is computed per unit, and ties go by shown path, line and place.
#[derive(Clone)]
#[cfg_attr(test, derive(Debug, PartialEq))]
pub(super) struct Units {
    pub(super) file: Vec<u32>,
    /// The chunk's place in its blob.
    pub(super) index: Vec<u32>,
    pub(super) id: Vec<i64>,
    pub(super) first_line: Vec<u32>,
    pub(super) last_line: Vec<u32>,
    /// Each unit's length in words.
    pub(super) words: Vec<u32>,
    pub(super) starts: Vec<u32>,
    /// Chunk id → its first unit (`first[id - lo]`), and each unit's next one
    /// with the same chunk (a blob visible under several paths has several).
    /// An entry is a unit with `MORE_UNITS` set when `next` holds another,
    /// so the usual chunk of one unit costs one load; `NO_UNIT`: none.
    pub(super) lo: i64,
    pub(super) first: Vec<u32>,
    pub(super) next: Vec<u32>,
    /// Chunk id → the file of its first unit, with `MORE_UNITS` set when
    /// `first` leads to more (`NO_UNIT`: none), and the chunk's length in
    /// words (`chunks[id - lo]`). The words' pass over every posting reads
    /// this alone: one load, where `first`, then `file` and `words` were
    /// three, each waiting on the one before.
    chunks: Vec<ChunkEntry>,
    /// The mean passage length, each file's length and the mean file length, in words.
    pub(super) avg: f64,
    pub(super) file_len: Vec<f64>,
    pub(super) files_n: f64,
    pub(super) file_avg: f64,
    /// Each visible file's row (one row may be several files, a path
    /// reached through links), sorted by row then file: a term's rows (in
    /// row order) are joined with it in one forward walk (`Units::files_of_rows`).
    /// A map of rows to lists of files cost a lookup and a cache miss a
    /// posting: 25 ms for the paths of a question of common words at 90k files.
    rows: Vec<(i64, u32)>,
    /// Each file's place among the files in the order of their shown paths
    /// (files of one path share it): what ties between scores are settled
    /// by, compared as numbers. Compared as paths, a ranking whose scores tie
    /// in their thousands (paths' words, shared by every copy of a tree)
    /// spent tens of milliseconds comparing strings.
    pub(super) path_rank: Vec<u32>,
    /// The files in the order of their shown paths (what `path_rank` numbers).
    by_path: Vec<u32>,
    /// The mirror's `blobs_remade` when these were laid out.
    remade: u64,
}

/// For each of `asked` (rows ascending, each once, with a count), calls
/// `each` with the file of every entry of `files` (sorted by row, then file)
/// that is that row, and the count: one forward walk that gallops over the
/// rows between two asked for (`rank::seek`), so a few rows cost a few
/// searches and many cost one pass.
fn join_rows(files: &[(i64, u32)], asked: impl IntoIterator<Item = (i64, u32)>, mut each: impl FnMut(u32, u32)) {
    let mut at = 0;
    for (row, count) in asked {
        at = super::rank::seek(files, at, |entry| entry.0 < row);
        while let Some(&(_, file)) = files.get(at).filter(|entry| entry.0 == row) {
            each(file, count);
            at += 1;
        }
    }
}

/// The files in the order of their shown paths, and each file's place in
/// that order, equal paths at one place.
fn path_ranks(seen: &[Seen]) -> (Vec<u32>, Vec<u32>) {
    let mut by_path: Vec<u32> = (0..seen.len() as u32).collect();
    by_path.sort_unstable_by(|a, b| seen[*a as usize].shown.cmp(&seen[*b as usize].shown));
    let rank = ranks_in_order(&by_path, seen.len(), |a, b| seen[a as usize].shown == seen[b as usize].shown);
    (by_path, rank)
}

/// Each file's place in `by_path` (files in order), the place of the first
/// of a run of files that `same` says have one path.
fn ranks_in_order(by_path: &[u32], files: usize, same: impl Fn(u32, u32) -> bool) -> Vec<u32> {
    let mut rank = vec![0u32; files];
    let mut place = 0u32;
    for (at, file) in by_path.iter().enumerate() {
        if at > 0 && !same(by_path[at - 1], *file) {
            place = at as u32;
        }
        rank[*file as usize] = place;
    }
    rank
}

/// Where the files of a list brought up to date went (`files`: where each
/// was in the list before, of `old_files` files, or `NEW_FILE`).
struct Places {
    /// Each old file's place now (`NEW_FILE`: gone).
    now: Vec<u32>,
    /// The new files, in the list's order.
    added: Vec<u32>,
}

impl Places {
    fn of(files: &[u32], old_files: usize) -> Places {
        let mut places = Places { now: vec![NEW_FILE; old_files], added: Vec::new() };
        for (f, at) in files.iter().enumerate() {
            match *at {
                NEW_FILE => places.added.push(f as u32),
                at => places.now[at as usize] = f as u32,
            }
        }
        places
    }
}

/// `path_ranks` of `seen`, a list brought up to date from one whose files'
/// path order is known (`old_by_path`, `old_rank`; `files`: where each file
/// of `seen` was there, or `NEW_FILE`; `places`, from them): the old order
/// with the files gone left out and the new ones merged in, so only a new
/// file's path is compared (a sort of every path was a sixth of laying out
/// a million passages).
fn path_ranks_after(
    seen: &[Seen],
    files: &[u32],
    places: &Places,
    old_by_path: &[u32],
    old_rank: &[u32],
) -> (Vec<u32>, Vec<u32>) {
    let now = &places.now;
    let mut added = places.added.clone();
    let shown = |f: u32| &seen[f as usize].shown;
    added.sort_unstable_by(|a, b| shown(*a).cmp(shown(*b)));
    let kept: Vec<u32> = old_by_path.iter().map(|at| now[*at as usize]).filter(|f| *f != NEW_FILE).collect();
    let mut by_path = Vec::with_capacity(seen.len());
    let mut from = 0;
    for file in added {
        let place = from + kept[from..].partition_point(|k| shown(*k) < shown(file));
        by_path.extend_from_slice(&kept[from..place]);
        by_path.push(file);
        from = place;
    }
    by_path.extend_from_slice(&kept[from..]);
    let same = |a: u32, b: u32| match (files[a as usize], files[b as usize]) {
        (NEW_FILE, _) | (_, NEW_FILE) => shown(a) == shown(b),
        (a, b) => old_rank[a as usize] == old_rank[b as usize],
    };
    let rank = ranks_in_order(&by_path, seen.len(), same);
    (by_path, rank)
}

/// `Units::rows` (each file's row, sorted) for a list brought up to date
/// from one whose rows were `old_rows` (`places`: where its files went).
/// The kept files keep their order, so their entries stay sorted; the new
/// ones are merged in. Sorting them all again cost 2-3 ms at 90,000 files.
fn rows_after(old_rows: &[(i64, u32)], seen: &[Seen], places: &Places) -> Vec<(i64, u32)> {
    let now = &places.now;
    let mut added: Vec<(i64, u32)> = places.added.iter().map(|f| (seen[*f as usize].rowid, *f)).collect();
    added.sort_unstable();
    let mut rows = Vec::with_capacity(seen.len());
    let mut added = added.into_iter().peekable();
    for &(row, at) in old_rows {
        let f = now[at as usize];
        if f == NEW_FILE {
            continue;
        }
        while let Some(new) = added.next_if(|new| *new < (row, f)) {
            rows.push(new);
        }
        rows.push((row, f));
    }
    rows.extend(added);
    rows
}

/// In `Units::first` and `Units::next`: no unit.
const NO_UNIT: u32 = u32::MAX;
/// In `Units::first` and `Units::next`: another unit of the same chunk follows in `next`.
const MORE_UNITS: u32 = 1 << 31;

/// What the words' pass needs of a chunk id (`Units::chunks`), side by side in memory.
#[derive(Clone, Copy)]
#[cfg_attr(test, derive(Debug, PartialEq))]
struct ChunkEntry {
    /// The file of the chunk's first unit, with `MORE_UNITS` when it has more; `NO_UNIT`: none.
    file: u32,
    /// The chunk's length in words.
    words: u32,
}

impl Units {
    /// The passages of the files of `seen`, laid out from the mirror.
    fn build(mirror: &Mirror, seen: &[Seen]) -> Units {
        let (by_path, path_rank) = path_ranks(seen);
        let mut u = Units {
            file: Vec::new(),
            index: Vec::new(),
            id: Vec::new(),
            first_line: Vec::new(),
            last_line: Vec::new(),
            words: Vec::new(),
            starts: Vec::with_capacity(seen.len() + 1),
            lo: 0,
            first: Vec::new(),
            next: Vec::new(),
            chunks: Vec::new(),
            avg: 1.0,
            file_len: Vec::with_capacity(seen.len()),
            files_n: 0.0,
            file_avg: 1.0,
            rows: Vec::with_capacity(seen.len()),
            path_rank,
            by_path,
            remade: mirror.blobs_remade,
        };
        for (f, s) in seen.iter().enumerate() {
            u.starts.push(u.id.len() as u32);
            let mut len = 0u64;
            if let Some(blob) = mirror.blobs.get(&s.blob) {
                for (index, chunk) in blob.chunks.iter().enumerate() {
                    u.file.push(f as u32);
                    u.index.push(index as u32);
                    u.id.push(chunk.id);
                    u.first_line.push(chunk.first_line);
                    u.last_line.push(chunk.last_line);
                    u.words.push(chunk.words);
                    len += u64::from(chunk.words);
                }
            }
            u.file_len.push(len as f64);
        }
        u.starts.push(u.id.len() as u32);
        u.rows.extend(seen.iter().zip(0u32..).map(|(s, f)| (s.rowid, f)));
        u.rows.sort_unstable();
        u.index_chunks(seen.len());
        u
    }

    /// Fills what is computed from the laid-out units: the mean lengths and
    /// the chunk id's units and files (in the memory those already have,
    /// when the units were carried over in place).
    fn index_chunks(&mut self, files: usize) {
        let u = self;
        let n = u.id.len();
        (u.avg, u.files_n, u.file_avg, u.lo) = (1.0, 0.0, 1.0, 0);
        u.first.clear();
        u.next.clear();
        u.chunks.clear();
        if n > 0 {
            // Summed as integers: the same whatever order the walk found the files in.
            let total: u64 = u.words.iter().map(|w| u64::from(*w)).sum();
            u.avg = (total as f64 / n as f64).max(1.0);
            u.files_n = u.file_len.iter().filter(|l| **l > 0.0).count() as f64;
            u.file_avg = (total as f64 / u.files_n.max(1.0)).max(1.0);
            let (lo, hi) = u.id.iter().fold((i64::MAX, i64::MIN), |(lo, hi), id| (lo.min(*id), hi.max(*id)));
            u.lo = lo;
            assert!(n.max(files) < MORE_UNITS as usize, "more passages than a search can lay out");
            let span = (hi - lo + 1) as usize;
            u.first.resize(span, NO_UNIT);
            u.chunks.resize(span, ChunkEntry { file: NO_UNIT, words: 0 });
            u.next.resize(n, NO_UNIT);
            // Back to front, so a chunk's entries end with its first unit's (one pass for both maps).
            for i in (0..n).rev() {
                let at = (u.id[i] - lo) as usize;
                let slot = &mut u.first[at];
                u.next[i] = *slot;
                let more = if *slot == NO_UNIT { 0 } else { MORE_UNITS };
                *slot = i as u32 | more;
                // A chunk's units are one content under several paths: one length.
                u.chunks[at] = ChunkEntry { file: u.file[i] | more, words: u.words[i] };
            }
        }
    }

    /// `build` for a list brought up to date from these units' (`files`:
    /// where each file of `seen` was there, or `NEW_FILE`), made in these
    /// units' own memory (a caller that still needs them carries a clone):
    /// the runs of files side by side in both are moved, those moving towards
    /// the front first, front to back, then the others back to front, and
    /// only the new files' passages are looked up, in the gaps. At a million
    /// passages, laying every one out from the mirror took ~100 ms after each
    /// outside edit, and copying them into new memory most of what is left
    /// (fresh pages cost more than the moves, as for `Codes::carried_in_place`).
    fn carried_in_place(mut self, mirror: &Mirror, seen: &[Seen], files: &[u32]) -> Units {
        let started = std::time::Instant::now();
        let (old_starts, old_file_len) = (std::mem::take(&mut self.starts), std::mem::take(&mut self.file_len));
        let places = Places::of(files, old_starts.len() - 1);
        let (by_path, path_rank) = path_ranks_after(seen, files, &places, &self.by_path, &self.path_rank);
        let ranked = started.elapsed();
        // Each file's first unit here and its length, and the runs of units moved: `(from, to, len)`.
        let mut starts = Vec::with_capacity(seen.len() + 1);
        let mut file_len = Vec::with_capacity(seen.len());
        let mut runs: Vec<(usize, usize, usize)> = Vec::new();
        let mut shifts: Vec<(usize, usize, i64)> = Vec::new();
        let mut total = 0usize;
        for (f, at) in files.iter().enumerate() {
            starts.push(total as u32);
            if *at == NEW_FILE {
                let blob = mirror.blobs.get(&seen[f].blob);
                total += blob.map_or(0, |b| b.chunks.len());
                file_len.push(blob.map_or(0, |b| b.chunks.iter().map(|c| u64::from(c.words)).sum::<u64>()) as f64);
                continue;
            }
            let at = *at as usize;
            let (from, len) = (old_starts[at] as usize, (old_starts[at + 1] - old_starts[at]) as usize);
            let shift = f as i64 - at as i64;
            match (runs.last_mut(), shifts.last_mut()) {
                (Some(run), Some(moved)) if run.0 + run.2 == from && run.1 + run.2 == total && moved.2 == shift => {
                    run.2 += len;
                    moved.1 = total + len;
                }
                _ => {
                    runs.push((from, total, len));
                    shifts.push((total, total + len, shift));
                }
            }
            file_len.push(old_file_len[at]);
            total += len;
        }
        starts.push(total as u32);
        let planned = started.elapsed();
        super::codes::move_runs(&mut self.file, &runs, total);
        super::codes::move_runs(&mut self.index, &runs, total);
        super::codes::move_runs(&mut self.id, &runs, total);
        super::codes::move_runs(&mut self.first_line, &runs, total);
        super::codes::move_runs(&mut self.last_line, &runs, total);
        super::codes::move_runs(&mut self.words, &runs, total);
        for (from, to, shift) in shifts {
            for file in &mut self.file[from..to] {
                *file = (i64::from(*file) + shift) as u32;
            }
        }
        for (f, _) in files.iter().enumerate().filter(|(_, at)| **at == NEW_FILE) {
            let Some(blob) = mirror.blobs.get(&seen[f].blob) else { continue };
            for (index, (unit, chunk)) in (starts[f] as usize..).zip(&blob.chunks).enumerate() {
                self.file[unit] = f as u32;
                self.index[unit] = index as u32;
                self.id[unit] = chunk.id;
                self.first_line[unit] = chunk.first_line;
                self.last_line[unit] = chunk.last_line;
                self.words[unit] = chunk.words;
            }
        }
        let moved = started.elapsed();
        self.rows = rows_after(&self.rows, seen, &places);
        let rows = started.elapsed();
        (self.starts, self.file_len, self.by_path, self.path_rank) = (starts, file_len, by_path, path_rank);
        self.remade = mirror.blobs_remade;
        self.index_chunks(seen.len());
        tracing::debug!(?ranked, ?planned, ?moved, ?rows, took = ?started.elapsed(), "passages carried over");
        self
    }

    pub(super) fn len(&self) -> usize {
        self.id.len()
    }

    /// Calls `each` with every visible file of each tagged row (ascending
    /// by row) and the row's place in `tagged`.
    pub(super) fn files_of_tagged(&self, tagged: &[Tagged], each: impl FnMut(u32, u32)) {
        join_rows(&self.rows, tagged.iter().enumerate().map(|(at, t)| (t.rowid, at as u32)), each);
    }

    /// Calls `each` with every visible file of each row of `rows` (ascending,
    /// each once, with a count), in that order, a row's files in file order.
    pub(super) fn files_of_rows(&self, rows: &super::postings::List, each: impl FnMut(u32, u32)) {
        join_rows(&self.rows, rows.iter(), each);
    }

    /// Calls `each` with the file of every unit of the chunk `id` (a file
    /// once for each of its units that is the chunk), and answers the
    /// chunk's length in words (`None`: no unit is the chunk).
    #[inline]
    pub(super) fn visible_chunk(&self, id: i64, mut each: impl FnMut(u32)) -> Option<u32> {
        let entry = usize::try_from(id - self.lo).ok().and_then(|at| self.chunks.get(at)).copied()?;
        if entry.file == NO_UNIT {
            return None;
        }
        if entry.file & MORE_UNITS == 0 {
            each(entry.file);
        } else {
            self.of_chunk(id, |unit| each(self.file[unit as usize]));
        }
        Some(entry.words)
    }

    /// Asks the processor to start loading what `visible_chunk` will read
    /// for chunk `id` (nothing when it has no entry): a term's postings are
    /// in id order with gaps the hardware does not foresee, and each such
    /// load left the words' pass waiting on memory.
    #[inline]
    pub(super) fn prefetch_chunk(&self, id: i64) {
        #[cfg(target_arch = "x86_64")]
        if let Some(entry) = usize::try_from(id - self.lo).ok().and_then(|at| self.chunks.get(at)) {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            // SAFETY: a prefetch reads nothing the program sees and cannot
            // fault; the address is that of a live element besides.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(std::ptr::from_ref(entry).cast()) };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = id;
    }

    /// Calls `each` with every unit of the chunk `id`.
    #[inline]
    pub(super) fn of_chunk(&self, id: i64, mut each: impl FnMut(u32)) {
        let Some(mut entry) = usize::try_from(id - self.lo).ok().and_then(|at| self.first.get(at)).copied() else {
            return;
        };
        while entry != NO_UNIT {
            let unit = entry & !MORE_UNITS;
            each(unit);
            if entry & MORE_UNITS == 0 {
                return;
            }
            entry = self.next[unit as usize];
        }
    }
}

/// The sign bits of the walk's units' vectors (`Codes`), put in lists from
/// `lists_from` units with a vector. With `before` (the list this one was
/// brought up to date from) whose codes are in lists, they are carried over
/// (`carried_codes`), or failing that put in its lists, each unit in the
/// list its chunk was in there: an outside edit at a million passages then
/// neither trains and fills the lists again (~0.4 s) nor gathers every code
/// from the mirror (~0.1 s).
fn codes_of(mirror: &Mirror, seen: &[Seen], units: &Units, lists_from: usize, before: Option<Before>) -> Codes {
    let Some(before) = before else { return gathered_codes(mirror, seen, units, lists_from, None) };
    match carried_codes(mirror, seen, units, lists_from, before) {
        Ok(codes) => codes,
        Err(before) => gathered_codes(mirror, seen, units, lists_from, before.as_ref()),
    }
}

/// The codes of `units` gathered from the mirror, put in the lists of
/// `before` when its codes are in lists (see `codes_of`), else in lists of their own.
fn gathered_codes(mirror: &Mirror, seen: &[Seen], units: &Units, lists_from: usize, before: Option<&Before>) -> Codes {
    let (dims, words) = (mirror.dims, mirror.code_words());
    let mut bits = vec![0u64; units.len() * words];
    let mut has = vec![false; units.len()];
    for (f, s) in seen.iter().enumerate() {
        let Some(blob) = mirror.blobs.get(&s.blob) else { continue };
        for u in units.starts[f]..units.starts[f + 1] {
            let at = units.index[u as usize] as usize * words;
            if let Some(code) = blob.codes.get(at..at + words) {
                bits[u as usize * words..(u as usize + 1) * words].copy_from_slice(code);
                has[u as usize] = true;
            }
        }
    }
    let like = before.and_then(|before| {
        let (old_units, old_codes) = (before.visible.units.get()?, before.visible.codes.get()?);
        let old_lists = old_codes.lists_of_units()?;
        let known = units
            .id
            .iter()
            .map(|id| {
                let mut list = super::codes::UNKNOWN_LIST;
                old_units.of_chunk(*id, |old| {
                    if list == super::codes::UNKNOWN_LIST && old_lists[old as usize] != super::codes::NO_LIST {
                        list = old_lists[old as usize];
                    }
                });
                list
            })
            .collect();
        Some((old_codes, known))
    });
    Codes::new(dims, bits, has, lists_from, like)
}

/// The codes of `units` carried over from those of `before` (`Codes::carried_in_place`,
/// on a clone of them when another holds the list before too):
/// a file it had keeps its units' codes (and lists), and only a new file's
/// codes are read from the mirror. `None` when its codes are not made, or
/// would be in lists where these are not (or the other way round), or the
/// mirror's passages were made anew since its units were laid out (then a
/// kept file's passages might not be those it had); then `before` is handed
/// back, unless its codes were already taken apart (`Codes::carried_in_place`:
/// those codes are only wanted when the carried ones would have been in
/// lists, and that failed only because too few were left for lists, so
/// they would not be in lists gathered either).
fn carried_codes(
    mirror: &Mirror,
    seen: &[Seen],
    units: &Units,
    lists_from: usize,
    before: Before,
) -> Result<Codes, Option<Before>> {
    let (Some(old_units), Some(old_codes)) = (before.visible.units.get(), before.visible.codes.get()) else {
        return Err(Some(before));
    };
    let words = mirror.code_words();
    if old_units.remade != mirror.blobs_remade
        || units.remade != mirror.blobs_remade
        || before.files.len() != seen.len()
        || old_codes.words != words
    {
        return Err(Some(before));
    }
    let (runs, added, added_bits) = runs_from(mirror, seen, units, &old_units.starts, &before.files);
    let newer = super::codes::NewerUnits { runs: &runs, units: units.len(), added: &added, added_bits: &added_bits };
    // The list before is let go of here, unless another holds it too.
    match Arc::try_unwrap(before.visible) {
        Ok(visible) => match visible.codes.into_inner() {
            Some(old_codes) => old_codes.carried_in_place(&newer, lists_from).ok_or(None),
            None => Err(None),
        },
        Err(shared) => {
            let before = Before { visible: shared, files: before.files };
            match before
                .visible
                .codes
                .get()
                .and_then(|old_codes| old_codes.clone().carried_in_place(&newer, lists_from))
            {
                Some(codes) => Ok(codes),
                None => Err(Some(before)),
            }
        }
    }
}

/// Where the units of the files a list before had (`old_starts`: its files'
/// first units; `files`: each file of `seen`'s place there, or `NEW_FILE`)
/// are in `units`, as runs of units side by side in both (`NewerUnits::runs`),
/// and the new files' units with a vector, with their codes side by side.
#[allow(clippy::type_complexity)] // The three parts of a `NewerUnits`, owned.
fn runs_from(
    mirror: &Mirror,
    seen: &[Seen],
    units: &Units,
    old_starts: &[u32],
    files: &[u32],
) -> (Vec<(u32, u32, u32)>, Vec<u32>, Vec<u64>) {
    let words = mirror.code_words();
    let mut runs: Vec<(u32, u32, u32)> = Vec::new();
    let (mut added, mut added_bits) = (Vec::new(), Vec::new());
    for (f, at) in files.iter().enumerate() {
        let here = units.starts[f]..units.starts[f + 1];
        if *at != NEW_FILE {
            let there = old_starts[*at as usize];
            match runs.last_mut() {
                Some(run) if run.1 == there && run.2 + (run.1 - run.0) == here.start => run.1 += here.len() as u32,
                _ if here.is_empty() => {}
                _ => runs.push((there, there + here.len() as u32, here.start)),
            }
        } else if let Some(blob) = mirror.blobs.get(&seen[f].blob) {
            for unit in here {
                let at = units.index[unit as usize] as usize * words;
                if let Some(code) = blob.codes.get(at..at + words) {
                    added.push(unit);
                    added_bits.extend_from_slice(code);
                }
            }
        }
    }
    runs.sort_unstable();
    (runs, added, added_bits)
}

/// The passages of `visible`, carried over from `before` (a list it was
/// brought up to date from). When nothing else holds that list but the
/// wait of `visible`'s codes for the same list, it is taken apart: its
/// passages and codes are carried over in their own memory
/// (`Units::carried_in_place`, `Codes::carried_in_place`), and `visible`'s
/// codes are made here with them. Otherwise its passages are cloned and
/// the clone carried over, and the codes wait as they did.
fn units_carried(mirror: &Mirror, visible: &Visible, lists_from: usize, before: Before) -> Units {
    let seen = &visible.seen;
    let carriable = before.visible.units.get().is_some_and(|old| old.remade == mirror.blobs_remade)
        && before.files.len() == seen.len();
    let codes_wait = lock(&visible.codes_from).take();
    let (codes_wait, codes_files) = match codes_wait {
        Some(wait) if carriable && Arc::ptr_eq(&wait.visible, &before.visible) => (None, Some(wait.files)),
        other => (other, None),
    };
    let Before { visible: old, files } = before;
    match Arc::try_unwrap(old).map(|old| (old.units.into_inner(), old.codes.into_inner())) {
        Ok((Some(old_units), old_codes)) if carriable => {
            *lock(&visible.codes_from) = codes_wait;
            let old_starts = old_units.starts.clone();
            let units = old_units.carried_in_place(mirror, seen, &files);
            if let (Some(codes_files), Some(old_codes)) = (codes_files, old_codes) {
                let (runs, added, added_bits) = runs_from(mirror, seen, &units, &old_starts, &codes_files);
                let newer = super::codes::NewerUnits {
                    runs: &runs,
                    units: units.len(),
                    added: &added,
                    added_bits: &added_bits,
                };
                let codes = old_codes
                    .carried_in_place(&newer, lists_from)
                    .unwrap_or_else(|| gathered_codes(mirror, seen, &units, lists_from, None));
                let _ = visible.codes.set(codes);
            }
            units
        }
        Ok(_) => {
            *lock(&visible.codes_from) = codes_wait;
            Units::build(mirror, seen)
        }
        Err(shared) => {
            let units = match shared.units.get().filter(|_| carriable) {
                Some(old_units) => old_units.clone().carried_in_place(mirror, seen, &files),
                None => Units::build(mirror, seen),
            };
            let codes_wait = codes_wait.or_else(|| codes_files.map(|files| Before { visible: shared, files }));
            *lock(&visible.codes_from) = codes_wait;
            units
        }
    }
}

/// The longest a walk is reused.
const WALK_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(30);

/// How many walks are kept (a few roots or views; each costs ~100 bytes a file).
const WALKS_KEPT: usize = 4;

fn mtime_of(source: &Source) -> (i64, i64) {
    match source {
        Source::File(file) => match file.metadata() {
            Ok(meta) => {
                let stamp = crate::vfs::Stamp::of(&meta);
                (stamp.len as i64, stamp.mtime_ns)
            }
            Err(_) => (-1, -1),
        },
        Source::Bytes(bytes) => (bytes.len() as i64, -1),
    }
}

fn read_all(source: Source) -> Result<Vec<u8>, SkipWhy> {
    let bytes = match source {
        Source::File(file) => {
            let mut buf = Vec::new();
            file.take(MAX_FILE_BYTES + 1).read_to_end(&mut buf).map_err(|_| SkipWhy::Unreadable)?;
            buf
        }
        Source::Bytes(bytes) => bytes.to_vec(),
    };
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(SkipWhy::Large);
    }
    Ok(bytes)
}

/// Why a visible file was left out of the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SkipWhy {
    Binary,
    Large,
    Unreadable,
}

/// Before the row of `gone` is removed: when it holds what only the index
/// knows of the file (its creator, its tags) and a path new in this walk has
/// the very same content, that is where the file went (a rename or move, by
/// ctxfs or anyone else), and the new path takes it over, keeping any of its
/// own. A file both moved and changed is not recognised, and its tags go
/// with its old path.
fn carry_kept(
    store: &IndexStore,
    gone: &str,
    blob: &Sha,
    arrived: &mut HashMap<Sha, Vec<String>>,
) -> anyhow::Result<()> {
    let Some(paths) = arrived.get_mut(blob) else { return Ok(()) };
    if paths.is_empty() {
        return Ok(());
    }
    let Some(kept) = store.kept(gone)? else { return Ok(()) };
    if let Some(to) = paths.pop() {
        store.take_over(&to, &kept)?;
    }
    Ok(())
}

/// Opens the store at `path`, emptying it first when it is damaged.
fn open_mending(path: &Path) -> anyhow::Result<IndexStore> {
    match IndexStore::open(path) {
        Err(e) if crate::sqlite::is_damage(&e) => reopened_empty(path, &e),
        other => other,
    }
}

/// Empties the damaged store at `path` (`damage::empty_and_reopen`), saying
/// on stderr what happened and whether any tags could not be kept.
fn reopened_empty(path: &Path, error: &anyhow::Error) -> anyhow::Result<IndexStore> {
    let (store, salvage) = super::damage::empty_and_reopen(path)?;
    let kept = salvage.kept.len();
    match &salvage.cut_short {
        None => tracing::warn!(
            path = %path.display(), error = %error, kept,
            "the search index was damaged; it was emptied to be built again, keeping the tags and creators of {kept} files"
        ),
        Some(why) => tracing::error!(
            path = %path.display(), error = %error, kept, why = %why,
            "the search index was damaged; it was emptied to be built again, and its files' tags and creators \
             could be read back only in part ({kept} kept)"
        ),
    }
    Ok(store)
}

impl Index {
    pub fn open(
        path: &Path,
        vectorizer: Option<Arc<dyn Embedder>>,
        chunker: Arc<dyn Chunker>,
    ) -> anyhow::Result<Index> {
        super::store::warm_in_background(path);
        let words_first = vectorizer.as_ref().is_some_and(|v| !v.is_cheap());
        Ok(Index {
            store: Mutex::new(open_mending(path)?),
            vectorizer,
            chunker,
            mirror: RwLock::new(Mirror::default()),
            walks: Mutex::new(Vec::new()),
            postings: Mutex::new(PostingsCache::default()),
            path: path.to_path_buf(),
            reader: Mutex::new(None),
            index_budget: SEARCH_INDEX_BUDGET,
            partial: Mutex::new(PartialTexts::default()),
            lists_from: super::codes::LISTS_FROM,
            walks_made: AtomicUsize::new(0),
            feeds_used: AtomicUsize::new(0),
            store_wanted: AtomicUsize::new(0),
            closing: std::sync::atomic::AtomicBool::new(false),
            words_first,
            words_owed: std::sync::atomic::AtomicBool::new(true),
            in_background: std::sync::atomic::AtomicBool::new(false),
            mends: AtomicUsize::new(0),
        })
    }

    /// Runs `op`; when it fails because the store's file is damaged
    /// (`damage::is_damage`), empties the store in place keeping its tags,
    /// forgets what this index held of it, and runs `op` once more (a search
    /// then answers as a session's first does, from what its time takes in).
    fn mended<T>(&self, op: impl Fn() -> anyhow::Result<T>) -> anyhow::Result<T> {
        let mends = self.mends.load(Ordering::SeqCst);
        match op() {
            Err(e) if crate::sqlite::is_damage(&e) => {
                self.mend(mends, &e)?;
                op()
            }
            other => other,
        }
    }

    /// Empties the damaged store and starts this index's memory of it over,
    /// unless another caller did since `seen` mends.
    fn mend(&self, seen: usize, error: &anyhow::Error) -> anyhow::Result<()> {
        let mut store = self.store();
        if self.mends.load(Ordering::SeqCst) != seen {
            return Ok(());
        }
        *lock(&self.reader) = None;
        let fresh = reopened_empty(&self.path, error)?;
        *store = fresh;
        *self.mirror_mut() = Mirror::default();
        lock(&self.walks).clear();
        *lock(&self.postings) = PostingsCache::default();
        *lock(&self.partial) = PartialTexts::default();
        self.words_owed.store(true, Ordering::SeqCst);
        self.mends.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    /// Lets the store grow no more, as a full disk would (`IndexStore::stop_growing`).
    #[cfg(test)]
    pub(crate) fn stop_growing(&self) {
        self.store().stop_growing();
    }

    /// The store, for a search, a write, a tag or a build: counted as wanted
    /// while it waits, so that indexing in the background gives way to it.
    fn store(&self) -> std::sync::MutexGuard<'_, IndexStore> {
        self.store_wanted.fetch_add(1, Ordering::SeqCst);
        let store = lock(&self.store);
        self.store_wanted.fetch_sub(1, Ordering::SeqCst);
        store
    }

    fn mirror(&self) -> std::sync::RwLockReadGuard<'_, Mirror> {
        self.mirror.read().unwrap_or_else(|e| e.into_inner())
    }

    fn mirror_mut(&self) -> std::sync::RwLockWriteGuard<'_, Mirror> {
        self.mirror.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The postings of `wanted` (each of its terms' lists of its kind), from
    /// memory as far as it holds them (`PostingsCache`); what it lacks is read
    /// from the store, shared with another thread through a second connection
    /// (a common word's list is read and decoded from its segments, the
    /// paths' from FTS5 one occurrence at a time; the passages' lists, the
    /// costly ones, come first in `wanted`, so both threads start on them),
    /// all here when the second connection cannot be opened.
    fn postings_of<'w>(
        &self,
        store: &IndexStore,
        wanted: &'w [(Postings, String)],
    ) -> anyhow::Result<HashMap<(Postings, &'w str), PostingList>> {
        let marks = store.postings_marks()?;
        let mut lists = HashMap::with_capacity(wanted.len());
        let mut missing: Vec<(&(Postings, String), Reading)> = Vec::new();
        {
            let mut cache = lock(&self.postings);
            cache.keep_for(marks);
            for which in wanted {
                let key = (which.0, which.1.as_str());
                if lists.contains_key(&key) || missing.iter().any(|(w, _)| *w == which) {
                    continue;
                }
                match cache.reading(which, marks) {
                    None => {
                        lists.insert(key, cache.terms[which].list.clone());
                    }
                    Some(reading) => missing.push((which, reading)),
                }
            }
        }
        // One at a time: a list's cost is not known before it is read.
        let read = self.on_two_connections(store, &missing, 1, |store, which| {
            which.iter().map(|((kind, term), reading)| kind.read_at(store, term, *reading, marks)).collect()
        })?;
        let mut cache = lock(&self.postings);
        for ((which, reading), read) in missing.into_iter().zip(read) {
            let list = match cache.take_in(which.clone(), reading, read, marks) {
                Some(list) => list,
                // The list this was to be added to is gone: read it whole.
                None => Arc::new(which.0.read_at(store, &which.1, Reading::All, marks)?),
            };
            lists.insert((which.0, which.1.as_str()), list);
        }
        Ok(lists)
    }

    /// The tagged files as the store holds them now, from the cache that
    /// `postings_of` just brought up to date, else read.
    fn tagged_of(&self, store: &IndexStore) -> anyhow::Result<Arc<Vec<Tagged>>> {
        if let Some(tagged) = lock(&self.postings).tagged.clone() {
            return Ok(tagged);
        }
        let tagged: Arc<Vec<Tagged>> = Arc::new(
            store
                .tagged()?
                .into_iter()
                .map(|(rowid, text)| {
                    let mut terms = super::terms::terms(&text);
                    terms.sort_unstable();
                    terms.dedup();
                    Tagged { rowid, terms }
                })
                .collect(),
        );
        lock(&self.postings).tagged = Some(tagged.clone());
        Ok(tagged)
    }

    /// `work` over `items`, shared between `store` here and the second
    /// connection on another thread; the answers in `items`' order. The two
    /// take the next `grain` items from one queue as each finishes its last,
    /// so one common word's long list does not leave the other thread idle
    /// (a fixed split in halves gave one of them every passage list and the
    /// other every cheap path list); the costliest items are best put first.
    /// With fewer than two items, or when the second connection cannot be
    /// opened, all of it runs here. Each connection does its part in one read
    /// transaction (`IndexStore::in_one_read`).
    fn on_two_connections<T: Sync, R: Send>(
        &self,
        store: &IndexStore,
        items: &[T],
        grain: usize,
        work: impl Fn(&IndexStore, &[T]) -> anyhow::Result<Vec<R>> + Sync,
    ) -> anyhow::Result<Vec<R>> {
        let alone = || store.in_one_read(|| work(store, items));
        if items.len() < 2 {
            return alone();
        }
        let mut reader = lock(&self.reader);
        if reader.is_none() {
            match IndexStore::open(&self.path) {
                Ok(opened) => *reader = Some(opened),
                Err(e) => {
                    tracing::debug!(error = %e, "no second connection to the index; it is read on one");
                    return alone();
                }
            }
        }
        let Some(second) = reader.take() else { return alone() };
        let grain = grain.max(1);
        let next = AtomicUsize::new(0);
        // The runs of items one connection took: where each starts, and its answers.
        let take = |store: &IndexStore| {
            store.in_one_read(|| {
                let mut runs: Vec<(usize, Vec<R>)> = Vec::new();
                loop {
                    let from = next.fetch_add(grain, Ordering::Relaxed);
                    if from >= items.len() {
                        return Ok(runs);
                    }
                    let run = &items[from..(from + grain).min(items.len())];
                    let got = work(store, run)?;
                    anyhow::ensure!(got.len() == run.len(), "a read answered {} of {} items", got.len(), run.len());
                    runs.push((from, got));
                }
            })
        };
        let (got, theirs) = std::thread::scope(|scope| {
            // A connection is used by one thread at a time: it goes to the other thread and comes back.
            let other = scope.spawn(|| {
                let got = take(&second);
                (second, got)
            });
            let got = take(store);
            let theirs = match other.join() {
                Ok((second, theirs)) => {
                    *reader = Some(second);
                    theirs
                }
                Err(_) => Err(anyhow::anyhow!("the second connection's thread stopped")),
            };
            (got, theirs)
        });
        let mut runs = got?;
        runs.extend(theirs?);
        runs.sort_unstable_by_key(|(from, _)| *from);
        Ok(runs.into_iter().flat_map(|(_, got)| got).collect())
    }

    /// How many vectors a connection takes from the queue at a time (`on_two_connections`).
    const VECTORS_A_TURN: usize = 32;

    /// The stored `i8` vectors (with their scales) of the chunks `ids`, in
    /// their order, read on two connections.
    fn stored_vectors(&self, store: &IndexStore, ids: &[i64]) -> anyhow::Result<Vec<Quantised>> {
        // In runs: each vector costs about the same, and the queue's turns are not free.
        self.on_two_connections(store, ids, Self::VECTORS_A_TURN, |store, ids| {
            ids.iter()
                .map(|id| {
                    let mut row = Vec::new();
                    Ok(store.vector(*id, &mut row)?.map(|scale| (row, scale)))
                })
                .collect()
        })
    }

    /// Sets how long a search indexes new or changed files before it answers from what is indexed.
    pub fn set_index_budget(&mut self, budget: std::time::Duration) {
        self.index_budget = budget;
    }

    /// Sets from how many visible passages with vectors a meaning search
    /// scans the lists of codes nearest the query rather than every code
    /// (`codes::LISTS_FROM` by default; tests put small trees in lists).
    pub fn set_lists_from(&mut self, passages: usize) {
        self.lists_from = passages;
    }

    pub fn has_vectors(&self) -> bool {
        self.vectorizer.is_some()
    }

    /// The embedder the index ranks by meaning with, if it has one (memory search uses it too).
    pub fn vectorizer(&self) -> Option<&dyn Embedder> {
        self.vectorizer.as_deref()
    }

    fn current(&self) -> Option<&str> {
        self.vectorizer.as_ref().map(|v| v.name())
    }

    /// Reads the mirror again when it was never read or another connection
    /// committed since; with `chunks`, makes sure it holds the blobs' chunks.
    fn sync_mirror(&self, store: &IndexStore, chunks: bool) -> anyhow::Result<()> {
        let version = store.data_version()?;
        {
            let mirror = self.mirror();
            if mirror.version == Some(version) && (mirror.chunks || !chunks) {
                return Ok(());
            }
        }
        let mut mirror = self.mirror_mut();
        if mirror.version != Some(version) {
            // A reread counts as a blob stored: nothing laid out before it is kept.
            let (epoch, blobs_put, blobs_remade) = (mirror.epoch, mirror.blobs_put + 1, mirror.blobs_remade + 1);
            *mirror = Mirror { epoch, blobs_put, blobs_remade, ..Mirror::default() };
            store.all_files(|f| {
                if let Ok(blob) = <Sha>::try_from(f.blob.as_slice()) {
                    let entry =
                        FileEntry { rowid: f.rowid, blob, size: f.size, mtime: f.mtime, mark: AtomicU32::new(epoch) };
                    mirror.files.insert(f.path, entry);
                }
            })?;
            let current = self.current();
            store.all_blobs(|sha, embedder| {
                if let Ok(sha) = <Sha>::try_from(sha.as_slice()) {
                    // With a vectorizer, a blob stored without one is one whose vectors are still to come.
                    let words_only = embedder.is_none() && current.is_some();
                    let entry =
                        BlobEntry { current: embedder.as_deref() == current, words_only, ..BlobEntry::default() };
                    mirror.blobs.insert(sha, entry);
                }
            })?;
            mirror.version = Some(version);
        }
        if chunks && !mirror.chunks {
            mirror.blobs_remade += 1;
            for blob in mirror.blobs.values_mut() {
                blob.chunks.clear();
            }
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
            for blob in mirror.blobs.values_mut() {
                blob.chunks.shrink_to_fit();
            }
            mirror.chunks = true;
        }
        Ok(())
    }

    /// Loads the sign bits of every stored vector into the mirror (once; new blobs bring their own).
    fn load_vectors(&self, store: &IndexStore) -> anyhow::Result<()> {
        if self.vectorizer.is_none() || self.mirror().vectors {
            return Ok(());
        }
        let mut mirror = self.mirror_mut();
        let mirror = &mut *mirror;
        let shas: Vec<Sha> = mirror.blobs.keys().copied().collect();
        // Every chunk's blob and place in it, by id: the store gives the
        // vectors in id order, so one forward walk finds each (a map of a
        // million ids, and a blob looked up by hash a vector, were a tenth of
        // a first search at a million passages).
        let mut place: Vec<(i64, u32, u32)> = Vec::new();
        for (b, sha) in shas.iter().enumerate() {
            for (i, c) in mirror.blobs[sha].chunks.iter().enumerate() {
                place.push((c.id, b as u32, i as u32));
            }
        }
        place.sort_unstable();
        let chunks: Vec<usize> = shas.iter().map(|sha| mirror.blobs[sha].chunks.len()).collect();
        let mut codes: Vec<Vec<u64>> = vec![Vec::new(); shas.len()];
        let mut filled = vec![0u32; shas.len()];
        let mut dims = mirror.dims;
        let mut values = Vec::new();
        let mut code = Vec::new();
        let mut at = 0;
        store.all_vectors(|id, bytes| {
            while place.get(at).is_some_and(|p| p.0 < id) {
                at += 1;
            }
            let Some(&(_, b, i)) = place.get(at).filter(|p| p.0 == id) else { return };
            values.clear();
            if decode_vector(bytes, &mut values).is_none() {
                return;
            }
            if dims == 0 {
                dims = values.len();
            }
            if values.len() != dims || dims == 0 {
                return;
            }
            let words = dims.div_ceil(64);
            let blob = &mut codes[b as usize];
            if blob.is_empty() {
                *blob = vec![0; chunks[b as usize] * words];
            }
            code.clear();
            sign_code_of_i8(&values, &mut code);
            let i = i as usize;
            blob[i * words..(i + 1) * words].copy_from_slice(&code);
            filled[b as usize] += 1;
        })?;
        // A blob with a chunk that has no vector has none at all.
        for (b, (sha, blob_codes)) in shas.iter().zip(codes).enumerate() {
            if let Some(entry) = mirror.blobs.get_mut(sha) {
                entry.codes = if filled[b] as usize == entry.chunks.len() { blob_codes } else { Vec::new() };
            }
        }
        mirror.dims = dims;
        mirror.vectors = true;
        Ok(())
    }

    /// Chunks and embeds one text for the store. When the vectorizer refuses
    /// a passage for its length, the passages are embedded one at a time and
    /// each refused one is halved until every part is taken; the parts are
    /// stored as passages of their own, so nothing goes without a vector.
    /// When `until` has passed before a text's passages are all embedded, it
    /// gives `None` (checked between calls of `EMBED_BATCH` passages), and
    /// what was embedded is kept under its content `sha` for the next call
    /// to go on from: with a slow embedder, a text of more passages than one
    /// search's time embeds would otherwise be started over by every search
    /// and never indexed by any.
    fn make_chunks(&self, text: &str, sha: &Sha, until: Until<'_>) -> Option<Vec<NewChunk>> {
        let (pieces, ids) = self.chunker.pieces_with_ids(text);
        let (mut taken, mut embedded) = lock(&self.partial).take(sha, pieces.len());
        let mut pieces = pieces.into_iter().skip(taken).peekable();
        let per_call = if matches!(until, Until::Unwanted(_)) { BACKGROUND_BATCH } else { EMBED_BATCH };
        while pieces.peek().is_some() {
            let batch: Vec<(Passage, Option<Range<usize>>)> = pieces.by_ref().take(per_call).collect();
            taken += batch.len();
            embedded.extend(self.embed_pieces(batch, &ids));
            if pieces.peek().is_some() && until.passed() {
                lock(&self.partial).keep(*sha, taken, embedded);
                return None;
            }
        }
        Some(
            embedded
                .into_iter()
                .map(|((first_line, last_line, text), vector)| NewChunk {
                    first_line,
                    last_line,
                    words: CountedTerms::of(&text),
                    vector,
                    text,
                })
                .collect(),
        )
    }

    /// Passages with their vectors (none without a vectorizer, or when it fails), from their token ids where they came with them.
    fn embed_pieces(&self, pieces: Vec<(Passage, Option<Range<usize>>)>, ids: &[u32]) -> Vec<Embedded> {
        let Some(v) = &self.vectorizer else { return pieces.into_iter().map(|(p, _)| (p, None)).collect() };
        let answer = {
            let texts: Vec<(&str, Option<&[u32]>)> =
                pieces.iter().map(|(p, own)| (p.2.as_str(), own.clone().and_then(|own| ids.get(own)))).collect();
            v.embed_tokenized(&texts)
        };
        let pieces: Vec<Passage> = pieces.into_iter().map(|(p, _)| p).collect();
        match (answer, self.chunker.tokenizer()) {
            (Ok(vectors), _) if vectors.len() == pieces.len() => {
                pieces.into_iter().zip(vectors.into_iter().map(Some)).collect()
            }
            (Err(e), Some(tokenizer)) if is_too_long(&e) => {
                pieces.into_iter().flat_map(|p| fitted(&**v, tokenizer, p)).collect()
            }
            _ => pieces.into_iter().map(|p| (p, None)).collect(),
        }
    }

    /// Stores a blob's chunks unless it is already indexed with the current
    /// vectorizer (or, taking words alone, stored with its words); answers
    /// how many chunks it made. A blob of words alone is stored without a
    /// vectorizer's name, so that it is made again when vectors can be.
    fn ensure_blob(
        &self,
        store: &IndexStore,
        sha: &Sha,
        take: Take,
        chunks: impl FnOnce() -> Vec<NewChunk>,
    ) -> anyhow::Result<usize> {
        if self.is_taken(sha, take) {
            return Ok(0);
        }
        let chunks = chunks();
        let embedder = match take {
            Take::Everything => self.current(),
            Take::Words => None,
        };
        let ids = store.put_blob(sha, embedder, &chunks)?;
        self.mirror_mut().put_blob(*sha, take, &ids, &chunks);
        Ok(chunks.len())
    }

    /// Whether the blob holds what `take` would store of it.
    fn is_taken(&self, sha: &Sha, take: Take) -> bool {
        let mirror = self.mirror();
        match take {
            Take::Everything => mirror.is_current(sha),
            Take::Words => mirror.is_searchable(sha),
        }
    }

    /// A text's passages and their words, without vectors (`Take::Words`).
    fn word_chunks(&self, text: &str) -> Vec<NewChunk> {
        self.chunker
            .pieces(text)
            .into_iter()
            .map(|(first_line, last_line, text)| NewChunk {
                first_line,
                last_line,
                words: CountedTerms::of(&text),
                vector: None,
                text,
            })
            .collect()
    }

    /// Drops a blob from the store and the mirror when no file holds it any more.
    fn drop_if_orphan(&self, store: &IndexStore, sha: &Sha) -> anyhow::Result<()> {
        if store.drop_blob_if_orphan(sha)? {
            self.mirror_mut().blobs.remove(sha);
        }
        Ok(())
    }

    /// Runs `f` in a transaction of its own; when `f` or the commit fails the
    /// transaction is rolled back and the mirror, which `f` may have moved
    /// ahead of the store, read again next time.
    fn write<T>(&self, store: &IndexStore, f: impl FnOnce() -> anyhow::Result<T>) -> anyhow::Result<T> {
        store.in_transaction(f).inspect_err(|_| self.mirror_mut().version = None)
    }

    /// Records a file written through ctxfs: its content is indexed now, and
    /// `created_by` is kept from its first write on.
    pub fn note_written(&self, real: &VPath, bytes: &[u8], created_by: Option<&str>) -> anyhow::Result<()> {
        self.note_written_all(&[(real, bytes, created_by)])
    }

    /// `note_written` for several files in one transaction (a burst of
    /// writes costs one commit). Files that are not text or too big are skipped.
    pub fn note_written_all(&self, files: &[(&VPath, &[u8], Option<&str>)]) -> anyhow::Result<()> {
        self.mended(|| self.note_written_all_unmended(files))
    }

    /// `note_written_all`, without mending a damaged store.
    fn note_written_all_unmended(&self, files: &[(&VPath, &[u8], Option<&str>)]) -> anyhow::Result<()> {
        let store = self.store();
        self.sync_mirror(&store, false)?;
        self.write(&store, || {
            for &(real, bytes, created_by) in files {
                let Ok(file) = TextFile::decode(bytes) else { continue };
                if bytes.len() as u64 > MAX_FILE_BYTES {
                    continue;
                }
                let sha = sha256(bytes);
                self.ensure_blob(&store, &sha, Take::Everything, || {
                    self.make_chunks(file.text(), &sha, Until::Done).unwrap_or_default()
                })?;
                let old = self.mirror().files.get(real.as_str()).map(|f| f.blob);
                // The time is unknown here; the next refresh stats the file again.
                let (size, mtime) = (bytes.len() as i64, -1);
                let rowid = store.put_file(real.as_str(), &sha, size, mtime, created_by)?;
                let mut mirror = self.mirror_mut();
                let mark = AtomicU32::new(mirror.epoch);
                mirror.files.insert(real.to_string(), FileEntry { rowid, blob: sha, size, mtime, mark });
                mirror.set_source(real.as_str(), 0);
                drop(mirror);
                if let Some(old) = old.filter(|old| *old != sha) {
                    self.drop_if_orphan(&store, &old)?;
                }
            }
            Ok(())
        })
    }

    /// Tags a file (which must be indexed or indexable).
    pub fn tag(&self, real: &VPath, bytes: &[u8], task: Option<&str>, related: Option<&str>) -> anyhow::Result<()> {
        self.mended(|| self.tag_unmended(real, bytes, task, related))
    }

    /// `tag`, without mending a damaged store.
    fn tag_unmended(
        &self,
        real: &VPath,
        bytes: &[u8],
        task: Option<&str>,
        related: Option<&str>,
    ) -> anyhow::Result<()> {
        let known = self.store().file(real.as_str())?.is_some();
        if !known {
            self.note_written(real, bytes, None)?;
        }
        self.store().tag(real.as_str(), task, related)?;
        Ok(())
    }

    /// What the walk does with one visible file (on the walk's threads):
    /// stat it, and when it is new or changed, read, hash, chunk and embed it.
    /// Once `until` has passed, a new or changed file is left `Pending` (an indexed
    /// earlier version stays as it was, and is not taken for gone). An entry
    /// read from another `origin` (`Fs::source`: another session's working
    /// copy of a mount) is neither unchanged nor an earlier version.
    #[allow(clippy::too_many_arguments)]
    fn prepare(
        &self,
        real: VPath,
        shown: VPath,
        file: &Found<'_>,
        epoch: u32,
        until: Until<'_>,
        take: Take,
        origin: u64,
    ) -> Work {
        let late = || until.passed();
        let pending = |size: i64, words_owed: bool| {
            let mirror = self.mirror();
            let stale = mirror.files.get(real.as_str()).map(|entry| {
                entry.mark.store(epoch, Ordering::Relaxed);
                Seen { shown: Arc::new(shown.clone()), blob: entry.blob, rowid: entry.rowid }
            });
            let own = mirror.read_from(real.as_str(), origin);
            let stale = stale.filter(|s| own && mirror.is_searchable(&s.blob));
            let meanwhile = match &stale {
                None => Meanwhile::NotSearched,
                Some(s) if mirror.is_words_only(&s.blob) => Meanwhile::ByWords,
                Some(_) => Meanwhile::AsBefore,
            };
            Work::Pending { size, stale, words_owed, meanwhile }
        };
        let unchanged = |size: i64, mtime: i64| -> Option<Work> {
            let mirror = self.mirror();
            let entry = mirror.files.get(real.as_str())?;
            if entry.size != size || entry.mtime != mtime || mtime < 0 || !mirror.read_from(real.as_str(), origin) {
                return None;
            }
            let (blob, rowid) = (entry.blob, entry.rowid);
            if mirror.is_current(&blob) {
                entry.mark.store(epoch, Ordering::Relaxed);
                return Some(Work::Same { shown: shown.clone(), size, blob, rowid });
            }
            // Its words are in and its vectors are not: still pending, and searched meanwhile.
            if take == Take::Words && mirror.is_words_only(&blob) {
                entry.mark.store(epoch, Ordering::Relaxed);
                let stale = Some(Seen { shown: Arc::new(shown.clone()), blob, rowid });
                return Some(Work::Pending { size, stale, words_owed: false, meanwhile: Meanwhile::ByWords });
            }
            None
        };
        // Most files are unchanged: one `fstatat` tells, without opening them.
        let stamp = (file.stamp)();
        if let Some(stamp) = &stamp {
            if let Some(same) = unchanged(stamp.len as i64, stamp.mtime_ns) {
                return same;
            }
        }
        // A walk that takes words alone leaves the rest unread once its time
        // is up: the walk after it (a search's, or the round's embedding)
        // reads them anyway, and a search may be waiting for the store.
        if take == Take::Words && late() {
            return pending(stamp.map_or(0, |s| s.len as i64), true);
        }
        let Some(source) = (file.open)() else { return Work::Skip { size: 0, why: SkipWhy::Unreadable } };
        let (size, mtime) = mtime_of(&source);
        if let Some(same) = unchanged(size, mtime) {
            return same;
        }
        let bytes = match read_all(source) {
            Ok(bytes) => bytes,
            Err(why) => return Work::Skip { size, why },
        };
        let Ok(text) = TextFile::decode(&bytes) else { return Work::Skip { size, why: SkipWhy::Binary } };
        let sha = sha256(&bytes);
        let known = self.is_taken(&sha, take);
        let words_owed = || !self.mirror().is_searchable(&sha);
        // Reading and hashing are cheap; chunking and embedding new content is what waits when time is up.
        if !known && late() {
            return pending(size, words_owed());
        }
        let chunks = match (known, take) {
            (true, _) => None,
            (false, Take::Words) => Some(self.word_chunks(text.text())),
            (false, Take::Everything) => match self.make_chunks(text.text(), &sha, until) {
                Some(chunks) => Some(chunks),
                None => return pending(size, words_owed()),
            },
        };
        Work::Read { real, shown, size, mtime, sha, chunks, origin }
    }

    /// The visible files under `root`, the index brought up to date: the last
    /// walk's for this view and root while nothing under the boundary changed
    /// (`Fs::changes`) and no other process wrote the store, else a new walk.
    /// The list is exactly what a walk would find, so results do not depend
    /// on which it was.
    /// New or changed files are indexed `until` a search's budget is spent
    /// or someone else wants the store; the ones left are counted in the
    /// answer's `Progress` (`pending`), and such a walk is not kept, so the
    /// next search or round in the background goes on indexing.
    fn visible(
        &self,
        store: &IndexStore,
        access: &Access,
        root: &Target,
        until: Until<'_>,
        progress: &dyn Fn(&Progress),
    ) -> anyhow::Result<(Arc<Visible>, Progress)> {
        let walks = || lock(&self.walks);
        // Inside `.git` nothing is watched.
        let in_git = root.real.as_str().split('/').any(|name| name == ".git");
        // Read before the walk: a change during it moves the count, so the next query walks again.
        let changes = if in_git { None } else { access.fs().changes(&root.real) };
        // Counts of different sources never compare: each session's working copy of a mount has its own.
        let source = access.fs().source(&root.real);
        let key = format!("{:?}\n{:?}\n{:?}\n{source}", access.view(), root.real, root.path);
        self.sync_mirror(store, true)?;
        let version = self.mirror().version;
        if let Some(changes) = changes {
            let kept = |w: &&Walked| {
                w.key == key
                    && w.version == version
                    && w.store_changes == store.total_changes()
                    && w.made.elapsed() < WALK_MAX_AGE
            };
            // One kept walk a key; one without a count (`Walked::changes`) is not answered from.
            let found =
                walks().iter().filter(kept).find_map(|w| w.changes.map(|at| (at, w.linked, w.made, w.seen.clone())));
            match found {
                Some((at, _, _, seen)) if at == changes => return Ok((seen, Progress::default())),
                // Only what changed since is looked at, when the file system can say what that is.
                Some((at, false, made, old)) => {
                    let kept = (key.as_str(), at, made, old);
                    if let Some(done) = self.refresh_changed(store, access, root, kept, until, progress)? {
                        self.feeds_used.fetch_add(1, Ordering::Relaxed);
                        return Ok(done);
                    }
                }
                _ => {}
            }
        }
        self.walks_made.fetch_add(1, Ordering::Relaxed);
        let met = Met::default();
        let (seen, mut done) =
            self.refresh(store, access, root, true, None, &met, until, Take::Everything, progress)?;
        done.uncounted = changes.is_none() && !in_git;
        let seen = Visible::new(seen, &self.mirror());
        // A walk that found what a kept one found, over a store that has not
        // changed since, keeps its passages laid out and their codes' lists
        // (a walk past `WALK_MAX_AGE`, or after a change that changed nothing
        // the view shows, would otherwise make them again).
        let (now_version, blobs_put) = {
            let mirror = self.mirror();
            (mirror.version, mirror.blobs_put)
        };
        let same = walks()
            .iter()
            .find(|w| w.key == key && w.version == now_version && w.blobs_put == blobs_put && w.seen.seen == seen.seen)
            .map(|w| w.seen.clone());
        let seen = same.unwrap_or_else(|| Arc::new(seen));
        // A file reached through a link to outside the root (or into `.git`)
        // can change without the root's watcher seeing it. A walk made before
        // the file system could count changes is kept too, for its layout
        // alone (`Walked::changes`): the second search of a process at 1.09M
        // passages would otherwise lay out and list them all again.
        if let (false, 0) = (met.escaped.load(Ordering::Relaxed), done.pending) {
            let mut walks = walks();
            walks.retain(|w| w.key != key);
            let made = std::time::Instant::now();
            let linked = met.linked.load(Ordering::Relaxed);
            let store_changes = store.total_changes();
            let walked = Walked { key, changes, version, store_changes, blobs_put, made, linked, seen: seen.clone() };
            walks.insert(0, walked);
            walks.truncate(WALKS_KEPT);
        }
        Ok((seen, done))
    }

    /// A kept walk's list (`kept`: its key, the count it was made at, when,
    /// and the list) brought up to date by looking at the paths that changed since
    /// alone, as the file system's feed names them; `None` when the feed
    /// cannot name them or they may change more than themselves (a
    /// directory, a link, an ignore file, `.git`): then the caller walks.
    /// Each path is decided by the walk itself narrowed to it (`Only`), so
    /// the list is exactly what a whole walk would find.
    fn refresh_changed(
        &self,
        store: &IndexStore,
        access: &Access,
        root: &Target,
        kept: (&str, u64, std::time::Instant, Arc<Visible>),
        until: Until<'_>,
        progress: &dyn Fn(&Progress),
    ) -> anyhow::Result<Option<(Arc<Visible>, Progress)>> {
        let (key, at, made, old) = kept;
        let blobs_before = self.mirror().blobs_put;
        let fs = access.fs();
        let Some((now, paths)) = fs.changed_since(&root.real, at) else { return Ok(None) };
        for path in paths.iter().filter(|p| p.starts_with(&root.real)) {
            if *path == root.real || path.components().any(|name| WALK_DECIDING_NAMES.contains(&name)) {
                return Ok(None);
            }
            match fs.lstat(path) {
                Ok(meta) if meta.kind == Kind::File => {}
                Err(FsError::NotFound) => {}
                _ => return Ok(None),
            }
        }
        let only = Only::new(&root.real, paths);
        let met = Met::default();
        let started = std::time::Instant::now();
        let (fresh, done) =
            self.refresh(store, access, root, true, Some(&only), &met, until, Take::Everything, progress)?;
        if met.linked.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let indexed = started.elapsed();
        // The changed paths' entries are replaced by what the narrowed walk found of them.
        let changed: HashSet<VPath> =
            only.paths().filter_map(|p| p.strip_prefix(&root.real)).map(|rel| root.path.join_rel(rel)).collect();
        // A few changed paths are compared with each kept entry; hashing each
        // kept path cost more (at 90,000 files, milliseconds of the search).
        let few: Vec<&VPath> = if changed.len() <= COMPARED_UP_TO { changed.iter().collect() } else { Vec::new() };
        let is_changed = |shown: &VPath| if few.is_empty() { changed.contains(shown) } else { few.contains(&shown) };
        // Each file, and its place in the kept list (`NEW_FILE` for a fresh one).
        let (mut seen, mut files) = (Vec::with_capacity(old.seen.len() + fresh.len()), Vec::new());
        files.reserve(seen.capacity());
        for (kept, at) in old.seen.iter().zip(0u32..) {
            if !is_changed(&kept.shown) {
                seen.push(kept.clone());
                files.push(at);
            }
        }
        let seen = {
            let mirror = self.mirror();
            if fresh.len() > PLACED_ONE_BY_ONE_UP_TO {
                let mut both: Vec<(Seen, u32)> = seen.into_iter().zip(files).collect();
                both.extend(fresh.into_iter().map(|s| (s, NEW_FILE)));
                both.sort_by_cached_key(|(s, _)| passage_order(&mirror, s));
                (seen, files) = both.into_iter().unzip();
            } else {
                // The kept list is laid out already: each fresh file goes in its place.
                for file in fresh {
                    let at = passage_order(&mirror, &file);
                    let place = seen.partition_point(|s| passage_order(&mirror, s) <= at);
                    seen.insert(place, file);
                    files.insert(place, NEW_FILE);
                }
            }
            drop(mirror);
            Visible::laid_out(seen).after(&old, files)
        };
        let listed = started.elapsed();
        // Nothing the view shows changed (a file written with what it held):
        // the kept list's passages and their codes' lists stay.
        let blobs_put = self.mirror().blobs_put;
        let seen = if blobs_put == blobs_before && seen.seen == old.seen { old } else { Arc::new(seen) };
        if done.pending == 0 {
            let mut walks = lock(&self.walks);
            walks.retain(|w| w.key != key);
            let (version, store_changes) = (self.mirror().version, store.total_changes());
            let key = key.to_owned();
            walks.insert(
                0,
                Walked {
                    key,
                    changes: Some(now),
                    version,
                    store_changes,
                    blobs_put,
                    made,
                    linked: false,
                    seen: seen.clone(),
                },
            );
            walks.truncate(WALKS_KEPT);
        }
        tracing::debug!(
            paths = changed.len(),
            ?indexed,
            ?listed,
            took = ?started.elapsed(),
            "search list brought up to date from the change feed"
        );
        Ok(Some((seen, done)))
    }

    /// Whole walks made for searches, and kept lists brought up to date from the feed instead.
    #[cfg(test)]
    fn walk_counts(&self) -> (usize, usize) {
        (self.walks_made.load(Ordering::Relaxed), self.feeds_used.load(Ordering::Relaxed))
    }

    /// Brings the index up to date with the visible files under `root`,
    /// answering them (in no particular order) when `collect` is set. Files
    /// changed since they were indexed are read again; visible files that
    /// are gone are dropped.
    ///
    /// The walk's threads stat every file; unchanged and skipped files stay
    /// with them (no hand-over per file), new and changed ones are read,
    /// chunked and embedded there and handed to this thread, the only one
    /// that writes the store.
    /// With `only`, the walk is narrowed to those paths (`Only`), and only
    /// they may be found gone.
    /// `met` says whether a file was reached through a link, and whether one leads
    /// outside `root` or into a `.git` directory.
    #[allow(clippy::too_many_arguments)] // Each is one thing a refresh is asked to do; a struct would only rename them.
    fn refresh(
        &self,
        store: &IndexStore,
        access: &Access,
        root: &Target,
        collect: bool,
        only: Option<&Only>,
        met: &Met,
        until: Until<'_>,
        take: Take,
        progress: &dyn Fn(&Progress),
    ) -> anyhow::Result<(Vec<Seen>, Progress)> {
        self.sync_mirror(store, collect)?;
        let epoch = {
            let mut mirror = self.mirror_mut();
            mirror.epoch = mirror.epoch.wrapping_add(1);
            mirror.epoch
        };
        let (sender, receiver) = std::sync::mpsc::sync_channel::<Work>(CHANNEL_BOUND);
        let counts = WalkCounts::default();
        let unchanged: Mutex<Vec<Seen>> = Mutex::new(Vec::new());
        let stop = AtomicBool::new(false);
        let root_real = &root.real;
        let mut seen = Vec::new();
        let mut state = Progress { words_only: take == Take::Words, ..Progress::default() };
        let mut walk_result = Ok(());
        // A search waits for the files the change feed names: their commit
        // leaves the postings' merges to a whole walk, a build, the written
        // files' indexer or a round in the background (`Merges::Overdue`). A
        // whole walk merges as it goes, so a first index never gathers large
        // levels; a round in the background makes the merges waiting before
        // its list is kept, so no search waits for them.
        let merges = match (only, until) {
            (Some(_), Until::Done | Until::Time(_)) => Merges::Overdue,
            (None, _) | (Some(_), Until::Unwanted(_)) => Merges::All,
        };
        let writing = store.writing_with(merges)?;
        let written = std::thread::scope(|scope| -> anyhow::Result<()> {
            let walker = scope.spawn(|| {
                let sender = sender;
                let visit = |shown: &VPath, rel: &str, file: &Found<'_>| {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    counts.found.fetch_add(1, Ordering::Relaxed);
                    if let Some(target) = file.target {
                        met.linked.store(true, Ordering::Relaxed);
                        if !target.starts_with(root_real) || target.as_str().split('/').any(|name| name == ".git") {
                            met.escaped.store(true, Ordering::Relaxed);
                        }
                    }
                    let real = root_real.join_rel(rel);
                    let origin = access.fs().source(&real);
                    match self.prepare(real, shown.clone(), file, epoch, until, take, origin) {
                        Work::Same { shown, size, blob, rowid } => {
                            counts.add(&counts.same, size);
                            if collect {
                                lock(&unchanged).push(Seen { shown: Arc::new(shown), blob, rowid });
                            }
                        }
                        Work::Skip { size, why } => {
                            counts.add(&counts.skipped, size);
                            let counter = match why {
                                SkipWhy::Binary => &counts.skipped_binary,
                                SkipWhy::Large => &counts.skipped_large,
                                SkipWhy::Unreadable => &counts.skipped_unreadable,
                            };
                            counter.fetch_add(1, Ordering::Relaxed);
                        }
                        Work::Pending { size, stale, words_owed, meanwhile } => {
                            if words_owed {
                                counts.words_owed.store(true, Ordering::Relaxed);
                            }
                            match meanwhile {
                                Meanwhile::NotSearched => {}
                                Meanwhile::ByWords => _ = counts.pending_words.fetch_add(1, Ordering::Relaxed),
                                Meanwhile::AsBefore => _ = counts.pending_earlier.fetch_add(1, Ordering::Relaxed),
                            }
                            counts.pending.fetch_add(1, Ordering::Relaxed);
                            counts.pending_bytes.fetch_add(size.max(0) as u64, Ordering::Relaxed);
                            if let (Some(stale), true) = (stale, collect) {
                                lock(&unchanged).push(stale);
                            }
                        }
                        work => {
                            if sender.send(work).is_err() {
                                stop.store(true, Ordering::Relaxed);
                            }
                        }
                    }
                };
                let result = match only {
                    Some(only) => visible_files_among(access, root.clone(), only, &visit),
                    None => visible_files(access, root.clone(), &visit),
                };
                counts.walked.store(true, Ordering::Relaxed);
                result
            });
            let outcome = (|| -> anyhow::Result<()> {
                let mut pending_orphans: Vec<Sha> = Vec::new();
                // Paths new to the index in this walk, by content: a tagged file that is gone may
                // have moved to one of them (`carry_kept`).
                let mut arrived: HashMap<Sha, Vec<String>> = HashMap::new();
                let (mut files_since, mut chunks_since) = (0usize, 0usize);
                let mut last_commit = std::time::Instant::now();
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
                    let Work::Read { real, shown, size, mtime, sha, chunks, origin } = work else { continue };
                    let made = match chunks {
                        Some(chunks) => self.ensure_blob(store, &sha, take, || chunks)?,
                        // Known when the walk looked, and nothing drops blobs before the walk ends.
                        None if self.is_taken(&sha, take) => 0,
                        None => continue,
                    };
                    let old = self.mirror().files.get(real.as_str()).map(|f| (f.rowid, f.blob, f.size, f.mtime));
                    let same_origin = self.mirror().read_from(real.as_str(), origin);
                    let rowid = match old {
                        Some((rowid, blob, old_size, old_mtime))
                            if blob == sha && old_size == size && old_mtime == mtime && same_origin =>
                        {
                            if let Some(f) = self.mirror().files.get(real.as_str()) {
                                f.mark.store(epoch, Ordering::Relaxed);
                            }
                            rowid
                        }
                        _ => {
                            let rowid = store.put_file(real.as_str(), &sha, size, mtime, None)?;
                            if old.is_none() {
                                arrived.entry(sha).or_default().push(real.to_string());
                            }
                            let entry = FileEntry { rowid, blob: sha, size, mtime, mark: AtomicU32::new(epoch) };
                            let mut mirror = self.mirror_mut();
                            mirror.files.insert(real.as_str().to_owned(), entry);
                            mirror.set_source(real.as_str(), origin);
                            drop(mirror);
                            files_since += 1;
                            rowid
                        }
                    };
                    if let Some((_, blob, _, _)) = old.filter(|o| o.1 != sha) {
                        pending_orphans.push(blob);
                    }
                    if self.mirror().is_current(&sha) {
                        state.indexed += 1;
                        state.bytes_indexed += size.max(0) as u64;
                    } else {
                        // Its words alone (`Take::Words`): searched, and still to be embedded.
                        state.words_read += 1;
                        counts.pending.fetch_add(1, Ordering::Relaxed);
                        counts.pending_bytes.fetch_add(size.max(0) as u64, Ordering::Relaxed);
                    }
                    state.chunks += made;
                    chunks_since += made;
                    if collect {
                        seen.push(Seen { shown: Arc::new(shown), blob: sha, rowid });
                    }
                    if files_since >= COMMIT_FILES
                        || chunks_since >= COMMIT_CHUNKS
                        || (files_since > 0 && last_commit.elapsed() >= COMMIT_EVERY)
                    {
                        writing.checkpoint()?;
                        (files_since, chunks_since) = (0, 0);
                        last_commit = std::time::Instant::now();
                    }
                    counts.fill(&mut state);
                    progress(&state);
                }
                seen.append(&mut lock(&unchanged));
                // Visible files under the root that this walk did not find are gone.
                let gone: Vec<(String, Sha)> = {
                    let mirror = self.mirror();
                    let candidates: Box<dyn Iterator<Item = (&String, &FileEntry)>> = match only {
                        Some(only) => Box::new(only.paths().filter_map(|p| mirror.files.get_key_value(p.as_str()))),
                        None => Box::new(mirror.files.iter().filter(|(path, _)| is_under(path, root_real.as_str()))),
                    };
                    candidates
                        .filter(|(_, f)| f.mark.load(Ordering::Relaxed) != epoch)
                        .filter(|(path, _)| VPath::parse(path).is_ok_and(|p| access.level(&p).can_read()))
                        .map(|(path, f)| (path.clone(), f.blob))
                        .collect()
                };
                for (path, blob) in gone {
                    carry_kept(store, &path, &blob, &mut arrived)?;
                    store.remove_file(&path)?;
                    let mut mirror = self.mirror_mut();
                    mirror.files.remove(&path);
                    mirror.set_source(&path, 0);
                    drop(mirror);
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
        // What was not committed is rolled back (`Writing`): the mirror is read again.
        if let Err(e) = written.and_then(|()| writing.commit()) {
            self.mirror_mut().version = None;
            return Err(e);
        }
        walk_result.map_err(|e| anyhow::anyhow!("{e}"))?;
        counts.fill(&mut state);
        progress(&state);
        if take == Take::Everything && counts.words_owed.load(Ordering::Relaxed) {
            self.words_owed.store(true, Ordering::SeqCst);
        }
        Ok((seen, state))
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
        self.mended(|| self.build_unmended(access, root, progress))
    }

    /// `build_with`, without mending a damaged store.
    fn build_unmended(&self, access: &Access, root: &Target, progress: &dyn Fn(&Progress)) -> anyhow::Result<Progress> {
        let last = Mutex::new(Progress::default());
        let store = self.store();
        self.refresh(&store, access, root, false, None, &Met::default(), Until::Done, Take::Everything, &|p| {
            progress(p);
            *lock(&last) = p.clone();
        })?;
        Ok(last.into_inner().unwrap_or_else(|e| e.into_inner()))
    }

    /// One round of indexing in the background: takes in the new and changed
    /// files under `root` that `access` sees, as a search would but with no
    /// time limit, giving way as soon as a search, a write or a tag wants the
    /// store (it waits while one does before it starts). Answers the round's
    /// figures, with `pending` above 0 when it gave way, or `None` when the
    /// index is closing. A round that ends with nothing pending keeps its
    /// walk, so the next search of the same view answers without one, and
    /// makes what that search needs before it ranks (`ready_for_searches`).
    pub fn index_in_background(&self, access: &Access, root: &Target) -> anyhow::Result<Option<Progress>> {
        self.mended(|| self.index_in_background_unmended(access, root))
    }

    /// `index_in_background`, without mending a damaged store.
    fn index_in_background_unmended(&self, access: &Access, root: &Target) -> anyhow::Result<Option<Progress>> {
        let store = loop {
            if self.closing.load(Ordering::SeqCst) {
                return Ok(None);
            }
            if self.store_wanted.load(Ordering::SeqCst) == 0 {
                let store = lock(&self.store);
                if self.store_wanted.load(Ordering::SeqCst) == 0 {
                    break store;
                }
            }
            std::thread::sleep(GIVE_WAY);
        };
        // Every new file's words first (a whole walk, which gives way as the
        // round does), so that a search finds every file by its words long
        // before the last is embedded.
        if let Some(words) = self.take_words_first(&store, access, root, Until::Unwanted(self), &|_| {})? {
            return Ok(Some(words));
        }
        let (visible, done) = self.visible(&store, access, root, Until::Unwanted(self), &|_| {})?;
        if done.pending == 0 {
            self.ready_for_searches(&store, &visible)?;
        }
        Ok(Some(done))
    }

    /// With a slow vectorizer (`words_first`), and while some file's words
    /// may be missing (`words_owed`), stores every new file's passages and
    /// words without vectors (`Take::Words`) `until` the time is up. Answers
    /// the walk's figures when the time ran out first: the words are then
    /// still owed, and the caller leaves the rest for later. `progress`
    /// hears how far it got (`Progress::words_only`).
    fn take_words_first(
        &self,
        store: &IndexStore,
        access: &Access,
        root: &Target,
        until: Until<'_>,
        progress: &dyn Fn(&Progress),
    ) -> anyhow::Result<Option<Progress>> {
        if !self.words_first || !self.words_owed.swap(false, Ordering::SeqCst) {
            return Ok(None);
        }
        let words = self.refresh(store, access, root, false, None, &Met::default(), until, Take::Words, progress);
        let cut_short = until.passed();
        if words.is_err() || cut_short {
            self.words_owed.store(true, Ordering::SeqCst);
        }
        let (_, done) = words?;
        Ok(cut_short.then_some(done))
    }

    /// Says whether indexing in the background now takes in what a search
    /// had no time for (set when a search asks for that, and by the thread
    /// that readies the index as it takes each task; see `in_background`).
    pub fn set_in_background(&self, on: bool) {
        self.in_background.store(on, Ordering::SeqCst);
    }

    /// A list's passages laid out (made once, carried over from the list
    /// it was brought up to date from when it can be).
    fn units_of<'v>(&self, mirror: &Mirror, visible: &'v Visible) -> &'v Units {
        visible.units.get_or_init(|| match lock(&visible.units_from).take() {
            Some(before) => units_carried(mirror, visible, self.lists_from, before),
            None => Units::build(mirror, &visible.seen),
        })
    }

    /// A list's passages' codes (made once, carried over as its units are).
    fn codes_in<'v>(&self, mirror: &Mirror, visible: &'v Visible, units: &Units) -> &'v Codes {
        visible.codes.get_or_init(|| {
            let before = lock(&visible.codes_from).take();
            codes_of(mirror, &visible.seen, units, self.lists_from, before)
        })
    }

    /// Makes now what every search of this list needs before it ranks: the
    /// stored vectors in memory, the passages laid out and their codes.
    fn ready_for_searches(&self, store: &IndexStore, visible: &Visible) -> anyhow::Result<()> {
        self.load_vectors(store)?;
        let mirror = self.mirror();
        let units = self.units_of(&mirror, visible);
        if self.vectorizer.is_some() && mirror.dims > 0 && units.len() > 0 {
            self.codes_in(&mirror, visible, units);
        }
        Ok(())
    }

    /// Whether a search now leaves what is not indexed to the background (`set_in_background`).
    #[cfg(test)]
    pub(crate) fn takes_in_background(&self) -> bool {
        self.in_background.load(Ordering::SeqCst)
    }

    /// Whether the index is closing (`close`).
    pub fn is_closing(&self) -> bool {
        self.closing.load(Ordering::SeqCst)
    }

    /// Stops indexing in the background, for good (its engine is going away):
    /// a round ends after the embedder call it is in.
    pub fn close(&self) {
        self.closing.store(true, Ordering::SeqCst);
    }

    /// Ranks the visible passages under `root` for `query`, best first, with
    /// the rankings `CTXFS_SEARCH_RANKINGS` names (all by default).
    pub fn search(&self, access: &Access, root: &Target, query: &str, limit: usize) -> anyhow::Result<Vec<Hit>> {
        self.search_with(access, root, query, limit, Rankings::from_env())
    }

    /// Ranks the visible passages under `root` for `query` by the chosen rankings, fused.
    pub fn search_with(
        &self,
        access: &Access,
        root: &Target,
        query: &str,
        limit: usize,
        rankings: Rankings,
    ) -> anyhow::Result<Vec<Hit>> {
        Ok(self.search_report(access, root, query, limit, rankings, &|_| {})?.hits)
    }

    /// Ranks the visible passages under `root` for `query`, saying how much
    /// is not indexed yet: new or changed files are indexed for at most
    /// `SEARCH_INDEX_BUDGET` first (`progress` hears how far that got), and a
    /// search answers from what is indexed by then.
    pub fn search_report(
        &self,
        access: &Access,
        root: &Target,
        query: &str,
        limit: usize,
        rankings: Rankings,
        progress: &dyn Fn(&Progress),
    ) -> anyhow::Result<Searched> {
        self.mended(|| self.search_report_unmended(access, root, query, limit, rankings, progress))
    }

    /// `search_report`, without mending a damaged store.
    fn search_report_unmended(
        &self,
        access: &Access,
        root: &Target,
        query: &str,
        limit: usize,
        rankings: Rankings,
        progress: &dyn Fn(&Progress),
    ) -> anyhow::Result<Searched> {
        let started = std::time::Instant::now();
        let mut times = Vec::new();
        let mut lap = |what: &'static str| times.push((what, started.elapsed()));
        let store = self.store();
        // While indexing goes on in the background, a search takes in nothing itself.
        let budget =
            if self.in_background.load(Ordering::SeqCst) { std::time::Duration::ZERO } else { self.index_budget };
        let until = Until::after(budget);
        // The search's own time goes to every new file's words first, as a
        // round in the background's does, so a session's first search
        // already finds each file by its words.
        if !budget.is_zero() {
            self.take_words_first(&store, access, root, until, progress)?;
        }
        let want_meaning = rankings.meaning && self.vectorizer.is_some();
        // The stored vectors are loaded before the walk: a session's first
        // search would otherwise wait for the file watcher's first build
        // (`Fs::changes`, 0.3 s at 15,737 directories) doing nothing, where
        // now the build runs beside the loading. Vectors the walk stores
        // are added to those in memory as they are stored.
        if want_meaning && !self.mirror().vectors {
            self.sync_mirror(&store, true)?;
            self.load_vectors(&store)?;
        }
        let (visible, coverage) = self.visible(&store, access, root, until, progress)?;
        lap("refresh");
        if want_meaning {
            self.load_vectors(&store)?;
            lap("vectors");
        }
        let mirror = self.mirror();
        let seen = &visible.seen;
        let units = self.units_of(&mirror, &visible);
        lap("units");
        let vector = |ids: &[i64]| self.stored_vectors(&store, ids);
        let meaning = if want_meaning && units.len() > 0 {
            let dims = mirror.dims;
            self.vectorizer.as_ref().and_then(|v| {
                let query = v.embed_query(query).ok().filter(|q| dims > 0 && q.len() == dims)?;
                let codes = self.codes_in(&mirror, &visible, units);
                // A ranking that sees only some files counts only that share:
                // in a slow embedder's first searches, the few files embedded
                // so far would otherwise outrank the many found by words alone.
                let by_words = coverage.pending_words.min(seen.len());
                let share = if seen.is_empty() { 1.0 } else { (seen.len() - by_words) as f64 / seen.len() as f64 };
                Some(Meaning { query, weight: v.meaning_weight() * share, dims, codes, vector: &vector })
            })
        } else {
            None
        };
        lap("embed");
        let terms = if rankings.unjoined { query_words(query) } else { query_terms(query) };
        let mut wanted: Vec<(Postings, String)> = Vec::new();
        if (rankings.words || rankings.files) && units.len() > 0 {
            wanted.extend(terms.iter().map(|t| (Postings::Chunks, t.clone())));
        }
        if rankings.paths && !seen.is_empty() {
            wanted.extend(terms.iter().map(|t| (Postings::Meta, t.clone())));
        }
        // Taken here, on the thread that holds the store, for the rankings to read from any thread.
        let lists = self.postings_of(&store, &wanted)?;
        let tagged = if rankings.paths { self.tagged_of(&store)? } else { Arc::default() };
        lap("postings");
        let postings = |kind: Postings, term: &str| {
            lists.get(&(kind, term)).cloned().ok_or_else(|| anyhow::anyhow!("the postings of {term:?} were not read"))
        };
        let votes = if names_identifiers(query) { FileVotes::BestPassage } else { FileVotes::Opening };
        let chosen = rank_units(seen, units, &terms, &tagged, votes, limit, rankings, &postings, meaning, &mut lap)?;
        let hits = store.in_one_read(|| {
            let mut hits = Vec::with_capacity(chosen.len());
            for unit in chosen {
                let u = unit as usize;
                hits.push(Hit {
                    path: VPath::clone(&seen[units.file[u] as usize].shown),
                    first_line: units.first_line[u] as usize,
                    last_line: units.last_line[u] as usize,
                    text: store.chunk_text(units.id[u])?,
                });
            }
            Ok(hits)
        })?;
        lap("fused");
        tracing::debug!(files = seen.len(), units = units.len(), terms = terms.len(), ?times, "search");
        let (pending, pending_bytes, uncounted) = (coverage.pending, coverage.pending_bytes, coverage.uncounted);
        let (pending_words, pending_earlier) = (coverage.pending_words, coverage.pending_earlier);
        Ok(Searched { hits, pending, pending_bytes, pending_words, pending_earlier, uncounted })
    }
}

/// Whether the vectorizer refused a text for its length.
fn is_too_long(e: &EmbedError) -> bool {
    matches!(e, EmbedError::TooLong { .. })
}

/// A passage embedded alone, halved (`chunk::embed_fitted`) as often as the
/// vectorizer refuses a part for its length: the parts with their vectors, or
/// the passage whole without one when the vectorizer fails otherwise or a
/// single character is refused.
fn fitted(v: &dyn Embedder, tokenizer: &dyn super::chunk::Tokenizer, passage: Passage) -> Vec<Embedded> {
    let (first_line, last_line, text) = passage;
    // Offsets and the token count are relative to the passage and not read back.
    let piece = super::chunk::Piece { start: 0, end: text.len(), first_line, last_line, tokens: 0, text };
    let parts = super::chunk::embed_fitted(piece.clone(), tokenizer, |part| match v.embed(&[part.text.as_str()]) {
        Ok(mut vectors) if vectors.len() == 1 => Ok(vectors.pop()),
        Ok(vectors) => Err(EmbedError::Count { asked: 1, got: vectors.len() }),
        Err(e) if is_too_long(&e) => Ok(None),
        Err(e) => Err(e),
    });
    match parts {
        Ok(parts) => parts.into_iter().map(|(p, vector)| ((p.first_line, p.last_line, p.text), Some(vector))).collect(),
        Err(_) => vec![((piece.first_line, piece.last_line, piece.text), None)],
    }
}

/// How many files the session can see under `root`: one walk that opens
/// nothing, so a build's progress can show its total from the start.
pub fn count_visible(access: &Access, root: &Target) -> anyhow::Result<usize> {
    Ok(survey(access, root)?.files)
}

/// What a walk of `root` finds before indexing: the visible files, and the
/// visible entries it passes over (each counted once, nothing below it walked).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Survey {
    pub files: usize,
    /// Files and directories an ignore file (`.gitignore`, `.ignore`, `.rgignore`) names.
    pub ignored: usize,
    /// Files and directories whose names start with `.`.
    pub hidden: usize,
}

/// One walk that opens nothing: the files a build will look at, and what it will pass over.
pub fn survey(access: &Access, root: &Target) -> anyhow::Result<Survey> {
    let found = AtomicUsize::new(0);
    let tally = Arc::new(crate::vfs::WalkTally::default());
    crate::access::walk::visible_files_tallied(
        access,
        root.clone(),
        &|_, _, _| {
            found.fetch_add(1, Ordering::Relaxed);
        },
        tally.clone(),
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(Survey {
        files: found.into_inner(),
        ignored: tally.ignored.load(Ordering::Relaxed),
        hidden: tally.hidden.load(Ordering::Relaxed),
    })
}

/// One line on what a build left out and why, or `None` when it left out nothing.
pub fn skipped_summary(survey: &Survey, done: &Progress) -> Option<String> {
    let mut parts = Vec::new();
    let mut say = |n: usize, what: &str| {
        if n > 0 {
            parts.push(format!("{n} {what}"));
        }
    };
    say(done.skipped_binary, "not text (binary)");
    say(done.skipped_large, &format!("larger than {} MiB", MAX_FILE_BYTES / (1024 * 1024)));
    say(done.skipped_unreadable, "unreadable");
    let files = parts.join(", ");
    let mut passed = Vec::new();
    if survey.ignored > 0 {
        passed.push(format!("{} named by ignore files (.gitignore, .ignore, .rgignore)", survey.ignored));
    }
    if survey.hidden > 0 {
        passed.push(format!("{} hidden (names starting with a dot)", survey.hidden));
    }
    let passed = passed.join(" and ");
    let skipped = format!("skipped {} file{}", done.skipped, if done.skipped == 1 { "" } else { "s" });
    match (files.is_empty(), passed.is_empty()) {
        (true, true) => None,
        (false, true) => Some(format!("{skipped}: {files}.")),
        (true, false) => Some(format!("not walked: {passed} (files or directories, each with all below it).")),
        (false, false) => {
            Some(format!("{skipped}: {files}; not walked: {passed} (files or directories, each with all below it)."))
        }
    }
}

/// Whether `path` is `root` or lies below it.
fn is_under(path: &str, root: &str) -> bool {
    root == "/" || path == root || (path.starts_with(root) && path.as_bytes().get(root.len()) == Some(&b'/'))
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
        TokenChunker { tokenizer, size: super::chunk::SIZE, overlap: super::chunk::OVERLAP }
    }
}

impl Chunker for TokenChunker {
    fn pieces(&self, text: &str) -> Vec<Passage> {
        super::chunk::chunk(text, &*self.tokenizer, self.size, self.overlap)
            .into_iter()
            .map(|p| (p.first_line, p.last_line, p.text))
            .collect()
    }

    fn pieces_with_ids(&self, text: &str) -> super::chunk::PiecesAndIds<Passage> {
        let (pieces, ids) = super::chunk::chunk_with_ids(text, &*self.tokenizer, self.size, self.overlap);
        (pieces.into_iter().map(|(p, own)| ((p.first_line, p.last_line, p.text), own)).collect(), ids)
    }

    fn tokenizer(&self) -> Option<&dyn super::chunk::Tokenizer> {
        Some(&*self.tokenizer)
    }
}

#[cfg(test)]
mod tests {
    use super::super::terms::words;
    use super::*;

    /// The join of a term's rows with the visible files' rows gives what a
    /// map from each row to its files gives, in the same order.
    #[test]
    fn rows_join_their_files_as_a_map_would() {
        let mut state = 5u64;
        let mut next = |below: u64| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 33) % below
        };
        for (files_n, rows_n, asked_n) in [(0, 10, 5), (50, 40, 0), (500, 300, 7), (2000, 900, 600), (300, 1000, 1000)]
        {
            // Some rows are several files (links), most one, some none visible.
            let mut files: Vec<(i64, u32)> = (0..files_n).map(|f| (next(rows_n) as i64, f as u32)).collect();
            let mut by_row: HashMap<i64, Vec<u32>> = HashMap::new();
            for (row, file) in &files {
                by_row.entry(*row).or_default().push(*file);
            }
            files.sort_unstable();
            let mut asked: Vec<(i64, u32)> =
                (0..asked_n).map(|_| (next(rows_n + 5) as i64, 1 + next(4) as u32)).collect();
            asked.sort_unstable_by_key(|a| a.0);
            asked.dedup_by_key(|a| a.0);
            let want: Vec<(u32, u32)> = asked
                .iter()
                .flat_map(|(row, count)| by_row.get(row).into_iter().flatten().map(move |f| (*f, *count)))
                .collect();
            let mut got = Vec::new();
            join_rows(&files, asked.iter().copied(), |file, count| got.push((file, count)));
            assert_eq!(got, want, "{files_n} files over {rows_n} rows, {asked_n} asked");
        }
    }

    /// Runs moved in place land where a copy puts them, whether the values
    /// grow or shrink and runs move towards the front or the back.
    #[test]
    fn runs_moved_in_place_are_those_copied() {
        for seed in 1..200u64 {
            let mut random = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            let mut next = |below: usize| {
                random ^= random << 13;
                random ^= random >> 7;
                random ^= random << 17;
                (random % below as u64) as usize
            };
            let old: Vec<u32> = (0..500).collect();
            let (mut runs, mut from, mut to) = (Vec::new(), next(20), next(20));
            while from < old.len() {
                let len = (1 + next(30)).min(old.len() - from);
                if next(3) > 0 {
                    runs.push((from, to, len));
                    to += len;
                }
                from += len + next(3) * next(10);
                to += next(3) * next(12);
            }
            let mut moved = old.clone();
            super::super::codes::move_runs(&mut moved, &runs, to);
            assert_eq!(moved.len(), to);
            for (from, to, len) in runs {
                assert_eq!(moved[to..to + len], old[from..from + len], "seed {seed}");
            }
        }
    }

    /// Files compared by their places in path order compare as their shown
    /// paths do, equal paths included.
    #[test]
    fn path_ranks_order_files_as_their_paths_do() {
        let paths = ["/w/b/x.rs", "/w/a.rs", "/w/b/x.rs", "/w/a/z.rs", "/w/ab.rs", "/v/q.md", "/w/a.rs"];
        let seen: Vec<Seen> = paths
            .iter()
            .enumerate()
            .map(|(at, p)| Seen { shown: Arc::new(VPath::parse(p).unwrap()), blob: [at as u8; 32], rowid: at as i64 })
            .collect();
        let (_, ranks) = path_ranks(&seen);
        for a in 0..seen.len() {
            for b in 0..seen.len() {
                assert_eq!(
                    ranks[a].cmp(&ranks[b]),
                    seen[a].shown.cmp(&seen[b].shown),
                    "{} against {}",
                    paths[a],
                    paths[b]
                );
            }
        }
    }

    use crate::access::{Level, Need, View};
    use crate::vfs::mem::MemFs;

    fn index(dir: &Path) -> Index {
        let chunker = Arc::new(TokenChunker::new(Arc::new(super::super::chunk::HalfBytes)));
        Index::open(&dir.join("index.db"), None, chunker).unwrap()
    }

    fn access(fs: Arc<MemFs>, grants: &[(&str, Level)]) -> Access {
        let file = crate::access::ViewFile {
            grants: grants.iter().map(|(p, l)| (p.to_string(), *l)).collect(),
            ..Default::default()
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

    /// A file tagged with the words asked for comes first, even when its
    /// text holds none of them and other files' meaning is close; a tag
    /// that holds only a minor share of the question's words does not lift
    /// the file; and a tagged file the view hides changes nothing.
    #[test]
    fn a_file_tagged_with_the_words_asked_for_comes_first() {
        let dir = tempfile::tempdir().unwrap();
        let run = |hidden_tag: Option<&str>| {
            let fs = Arc::new(MemFs::new(VPath::root()));
            fs.add_file("/pub/paint.rs", "fn colour() { paint(); }\n");
            for n in 0..8 {
                fs.add_file(
                    &format!("/pub/road{n}.rs"),
                    format!("fn cross_{n}() {{}}\n// crossing the road at the lights {n}\n"),
                );
            }
            fs.add_file("/pub/disk.rs", "fn store_file() { disk(); }\n// upload the file to the store\n");
            fs.add_file("/secret/x.rs", "fn hidden() {}\n");
            let access = access(fs, &[("/pub", Level::Stage)]);
            let root = access.target("/pub", Need::Look).unwrap();
            let sub = tempfile::tempdir_in(dir.path()).unwrap();
            let index = index_with(sub.path(), true);
            index.search(&access, &root, "anything", 3).unwrap();
            index
                .tag(&VPath::parse("/pub/paint.rs").unwrap(), b"", Some("zebra crossing investigation"), None)
                .unwrap();
            if let Some(tag) = hidden_tag {
                index.tag(&VPath::parse("/secret/x.rs").unwrap(), b"", Some(tag), None).unwrap();
            }
            let first = |query: &str| index.search(&access, &root, query, 3).unwrap()[0].path.to_string();
            [
                "zebra crossing",
                "the zebra crossing investigation",
                "zebra",
                "crossing the road lights zebra",
                "upload the file",
            ]
            .map(first)
        };
        let shown = run(None);
        assert_eq!(shown[..3], ["/pub/paint.rs", "/pub/paint.rs", "/pub/paint.rs"], "{shown:?}");
        assert!(shown[3].starts_with("/pub/road"), "the tag holds a minor share of the question: {shown:?}");
        assert_eq!(shown[4], "/pub/disk.rs", "{shown:?}");
        assert_eq!(run(Some("zebra crossing investigation")), shown, "a hidden tagged file changes nothing");
        assert_eq!(run(Some("upload the file")), shown);
    }

    /// A query naming identifiers shows a file by the passage that holds
    /// them: the whole-file vote goes to the file's best passage, not to its
    /// opening (a long doc comment here), so the defining passage ranks with
    /// both votes and the opening does not take a place of its own.
    #[test]
    fn a_query_naming_identifiers_shows_the_passage_that_defines_them() {
        let dir = tempfile::tempdir().unwrap();
        let fs = Arc::new(MemFs::new(VPath::root()));
        let mut builder = String::new();
        for line in 0..80 {
            builder.push_str(&format!("//! Composing wrappers around a handler, step {line} of the guide.\n"));
        }
        builder.push_str("pub struct ServiceBuilder { layers: Vec<Layer> }\n");
        builder.push_str("impl ServiceBuilder {\n    pub fn layer_fn(self) -> ServiceBuilder { self }\n}\n");
        fs.add_file("/pub/builder.rs", builder);
        fs.add_file("/pub/other.rs", "fn unrelated() {}\n// wrappers and handlers\n");
        let access = access(fs, &[("/pub", Level::Ro)]);
        let root = access.target("/pub", Need::Look).unwrap();
        let index = index(dir.path());
        let found = index.search(&access, &root, "ServiceBuilder layer_fn", 10).unwrap();
        assert_eq!(found[0].path.as_str(), "/pub/builder.rs", "{found:?}");
        assert!(found[0].text.contains("pub struct ServiceBuilder"), "{found:?}");
        assert!(!found.iter().any(|hit| hit.path.as_str() == "/pub/builder.rs" && hit.first_line == 1), "{found:?}");
        // A question in words still has the file vote for the opening, which says what the file is.
        let asked = index.search(&access, &root, "service builder layer", 10).unwrap();
        assert!(asked.iter().any(|hit| hit.path.as_str() == "/pub/builder.rs" && hit.first_line == 1), "{asked:?}");
    }

    /// A file whose many passages all match does not fill a short answer on
    /// its own: after two of them, the next file that matches has its place.
    #[test]
    fn one_file_does_not_crowd_the_others_out_of_a_short_answer() {
        let dir = tempfile::tempdir().unwrap();
        let fs = Arc::new(MemFs::new(VPath::root()));
        let long: String = (0..200).map(|i| format!("fn retry_upload_{i}() {{ retry(); upload(); }}\n")).collect();
        fs.add_file("/pub/long.rs", long);
        // Without the cap, long.rs's first three passages outrank short.rs's one mention.
        let other: String = (0..12).map(|i| format!("fn unrelated_{i}() {{ parse(); render(); }}\n")).collect();
        fs.add_file("/pub/short.rs", format!("// upload\n{other}"));
        let access = access(fs, &[("/pub", Level::Ro)]);
        let root = access.target("/pub", Need::Look).unwrap();
        let found = index(dir.path()).search(&access, &root, "retry upload", 3).unwrap();
        let paths: Vec<&str> = found.iter().map(|h| h.path.as_str()).collect();
        assert!(found.len() == 3 && paths.contains(&"/pub/short.rs"), "{paths:?}");
        assert_eq!(paths.iter().filter(|p| **p == "/pub/long.rs").count(), 2, "{paths:?}");
    }

    /// A question in other forms of the code's words finds it (words only,
    /// no embedder): the index and the query are both stemmed, so "padded
    /// sequences" meets "Pads every sequence" and `pad_batch`.
    #[test]
    fn other_forms_of_a_word_find_it() {
        let dir = tempfile::tempdir().unwrap();
        let fs = Arc::new(MemFs::new(VPath::root()));
        fs.add_file("/pub/batch.rs", "/// Pads every sequence of a batch to one length.\nfn pad_batch() {}\n");
        fs.add_file("/pub/other.rs", "fn unrelated() {}\n// one batch of sequence numbers\n");
        let access = access(fs, &[("/pub", Level::Ro)]);
        let root = access.target("/pub", Need::Look).unwrap();
        let found = index(dir.path()).search(&access, &root, "padded sequences", 10).unwrap();
        assert_eq!(found.first().map(|r| r.path.as_str()), Some("/pub/batch.rs"), "{found:?}");
    }

    /// A query of several words reads their postings on two connections at
    /// once; memory then holds each word's list (passages and paths), the
    /// same as one connection reads, and the answer is what it was.
    #[test]
    fn postings_read_on_two_connections_are_those_one_reads() {
        let dir = tempfile::tempdir().unwrap();
        let fs = Arc::new(MemFs::new(VPath::root()));
        fs.add_file("/pub/upload.rs", "fn retry_failed_upload() { retry(); }\n".repeat(3));
        fs.add_file("/pub/other.rs", "fn unrelated() {}\n// retry once, upload twice\n");
        fs.add_file("/pub/retry/mod.rs", "// nothing\n");
        let access = access(fs, &[("/pub", Level::Ro)]);
        let root = access.target("/pub", Need::Look).unwrap();
        let index = index(dir.path());
        let found = index.search(&access, &root, "retry failed upload", 10).unwrap();
        assert_eq!(found[0].path.as_str(), "/pub/upload.rs");
        assert!(index.reader.lock().unwrap().is_some(), "the second connection was not used");
        let cache = index.postings.lock().unwrap();
        let store = index.store();
        for term in query_terms("retry failed upload") {
            for kind in [Postings::Chunks, Postings::Meta] {
                let held = cache.terms.get(&(kind, term.clone())).unwrap_or_else(|| panic!("{kind:?} {term} not read"));
                let one = kind.read(&store, &term).unwrap();
                assert_eq!(held.list.iter().collect::<Vec<_>>(), one, "{kind:?} {term}");
            }
        }
        assert!(!cache.terms[&(Postings::Meta, super::super::terms::stem("retry"))].list.runs().is_empty());
        drop((cache, store));
        assert_eq!(index.search(&access, &root, "retry failed upload", 10).unwrap(), found);
    }

    /// A toy vectorizer: one dimension per topic word.
    struct Topics;

    impl Embedder for Topics {
        fn name(&self) -> &str {
            "topics"
        }
        fn dims(&self) -> usize {
            5
        }
        fn max_tokens(&self) -> usize {
            usize::MAX
        }
        fn count_tokens(&self, text: &str) -> usize {
            words(text).len()
        }
        fn token_spans(&self, text: &str) -> Vec<std::ops::Range<usize>> {
            super::super::chunk::Tokenizer::tokens(&super::super::chunk::Whitespace, text)
        }
        fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
            const TOPICS: [&[&str]; 4] = [
                &["upload", "send", "transfer"],
                &["retry", "again", "backoff"],
                &["disk", "file"],
                &["colour", "paint"],
            ];
            Ok(texts
                .iter()
                .map(|t| {
                    let w = words(t);
                    let mut v: Vec<f32> = TOPICS
                        .iter()
                        .map(|topic| w.iter().filter(|x| topic.contains(&x.as_str())).count() as f32)
                        .collect();
                    v.push(0.1);
                    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                    v.iter_mut().for_each(|x| *x /= norm);
                    v
                })
                .collect())
        }
    }

    /// Three files under `/w` at `level`, each about one of `Topics`' topics
    /// (sending, painting, storing), the first saying so only by meaning.
    fn three_topics(level: Level) -> Access {
        let fs = Arc::new(MemFs::new(VPath::root()));
        fs.add_file("/w/net.rs", "fn push_blob() { transfer(); send(); }\n// when it fails, backoff and go again\n");
        fs.add_file("/w/paint.rs", "fn colour() { paint(); }\n");
        fs.add_file("/w/disk.rs", "fn store_file() { disk(); }\n");
        access(fs, &[("/w", level)])
    }

    fn index_with(path: &Path, vectors: bool) -> Index {
        let chunker = Arc::new(TokenChunker::new(Arc::new(super::super::chunk::HalfBytes)));
        let vectorizer: Option<Arc<dyn Embedder>> = vectors.then(|| Arc::new(Topics) as Arc<dyn Embedder>);
        Index::open(&path.join("index.db"), vectorizer, chunker).unwrap()
    }

    #[test]
    fn meaning_finds_passages_without_the_words_and_survives_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let access = three_topics(Level::Ro);
        let root = access.target("/w", Need::Look).unwrap();
        let meaning = Rankings { meaning: true, ..Rankings::NONE };
        let first = index_with(dir.path(), true).search_with(&access, &root, "retry upload", 3, meaning).unwrap();
        assert_eq!(first[0].path.as_str(), "/w/net.rs");
        // Words alone find nothing: no passage holds "retry" or "upload".
        let words_only = Rankings { words: true, ..Rankings::NONE };
        assert!(index_with(dir.path(), true)
            .search_with(&access, &root, "retry upload", 3, words_only)
            .unwrap()
            .is_empty());
        // A new process reads the vectors back from the store.
        let again = index_with(dir.path(), true).search_with(&access, &root, "retry upload", 3, meaning).unwrap();
        assert_eq!(first, again);
    }

    /// With the sign bits in lists, a search answers from the visible
    /// passages alone: a store that also holds passages of files this view
    /// hides (indexed through a wider view) answers as one that never had
    /// them, and the meaning ranking still finds a passage by its meaning.
    #[test]
    fn listed_codes_answer_from_the_visible_passages_alone() {
        let queries = ["retry upload", "paint the disk", "store a file", "colour"];
        let answers = |hidden: bool| {
            let dir = tempfile::tempdir().unwrap();
            let fs = Arc::new(MemFs::new(VPath::root()));
            fs.add_file(
                "/w/net.rs",
                "fn push_blob() { transfer(); send(); }\n// when it fails, backoff and go again\n",
            );
            fs.add_file("/w/paint.rs", "fn colour() { paint(); }\n");
            fs.add_file("/w/disk.rs", "fn store_file() { disk(); }\n");
            for i in 0..30 {
                fs.add_file(&format!("/w/more/m{i}.rs"), ["fn a() { paint(); }\n", "fn b() { disk(); }\n"][i % 2]);
            }
            if hidden {
                for i in 0..40 {
                    fs.add_file(&format!("/secret/s{i}.rs"), ["fn upload() { retry(); }\n", "// send again\n"][i % 2]);
                }
            }
            // A file system that counts its changes, so the walk (and its codes) is kept.
            fs.set_changes(Some(1));
            let mut index = index_with(dir.path(), true);
            index.set_lists_from(0);
            if hidden {
                let wide = access(fs.clone(), &[("/w", Level::Ro), ("/secret", Level::Ro)]);
                index.build(&wide, &wide.target("/secret", Need::Look).unwrap(), &|_, _| {}).unwrap();
            }
            let narrow = access(fs, &[("/w", Level::Ro)]);
            let root = narrow.target("/w", Need::Look).unwrap();
            let meaning = Rankings { meaning: true, ..Rankings::NONE };
            let found: Vec<_> = queries
                .iter()
                .flat_map(|q| {
                    [
                        index.search(&narrow, &root, q, 10).unwrap(),
                        index.search_with(&narrow, &root, q, 10, meaning).unwrap(),
                    ]
                })
                .collect();
            let walks = index.walks.lock().unwrap();
            assert!(
                walks.iter().any(|w| w.seen.codes.get().is_some_and(|c| c.is_listed())),
                "the codes were not listed"
            );
            found
        };
        let plain = answers(false);
        assert_eq!(plain[1][0].path.as_str(), "/w/net.rs");
        assert_eq!(answers(true), plain);
    }

    /// With the sign bits in lists, a list brought up to date from the feed
    /// puts its codes in the lists of the one it came from: every passage of
    /// an unchanged file keeps its list, and the answers are a fresh index's.
    #[test]
    fn an_outside_edit_keeps_the_lists_of_the_walk_before() {
        let (dir, fresh_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let fs = Arc::new(MemFs::new(VPath::root()));
        fs.add_file("/w/net.rs", "fn push_blob() { transfer(); send(); }\n// when it fails, backoff and go again\n");
        for i in 0..40 {
            fs.add_file(&format!("/w/more/m{i}.rs"), ["fn a() { paint(); }\n", "fn b() { disk(); }\n"][i % 3 % 2]);
        }
        fs.set_changes(Some(1));
        let access = access(fs.clone(), &[("/w", Level::Ro)]);
        let root = access.target("/w", Need::Look).unwrap();
        let mut index = index_with(dir.path(), true);
        index.set_lists_from(0);
        let kept = |index: &Index| index.walks.lock().unwrap().first().expect("a kept walk").seen.clone();
        index.search(&access, &root, "retry upload", 10).unwrap();
        let before = kept(&index);
        let lists_by_chunk = |visible: &Visible| -> HashMap<i64, u32> {
            let (units, codes) = (visible.units.get().unwrap(), visible.codes.get().unwrap());
            let lists = codes.lists_of_units().expect("the codes are in lists");
            units.id.iter().zip(lists).map(|(id, list)| (*id, list)).collect()
        };
        let old = lists_by_chunk(&before);
        fs.add_file("/w/more/m7.rs", "fn c() { upload(); retry(); }\n");
        fs.note_changed("/w/more/m7.rs");
        let hits = index.search(&access, &root, "retry upload", 10).unwrap();
        assert_eq!(index.walk_counts(), (1, 1));
        let after = kept(&index);
        assert!(!Arc::ptr_eq(&before, &after) && after.codes_from.lock().unwrap().is_none());
        assert_eq!(before.codes.get().unwrap().trained_here(), Some(true));
        assert_eq!(after.codes.get().unwrap().trained_here(), Some(false), "the lists were trained again");
        let new = lists_by_chunk(&after);
        let kept_lists = old.iter().filter(|(id, list)| new.get(id) == Some(list)).count();
        assert_eq!(kept_lists, new.keys().filter(|id| old.contains_key(id)).count());
        let mut fresh = index_with(fresh_dir.path(), true);
        fresh.set_lists_from(0);
        assert_eq!(hits, fresh.search(&access, &root, "retry upload", 10).unwrap());
    }

    /// The word and meaning rankings computed on two threads give the search
    /// one thread gives, for each query and ranking.
    /// After outside edits (a file changed, one gone, new ones, one with a
    /// blob another path shows, more than are put in place one by one), the
    /// passages and codes carried over from the list before are those laid
    /// out and gathered afresh, also when a search in between made the
    /// passages but not the codes; with the codes in lists and not.
    #[test]
    fn passages_and_codes_carried_over_edits_are_those_made_afresh() {
        carried_over_edits_as_made_afresh(0);
        carried_over_edits_as_made_afresh(super::super::codes::LISTS_FROM);
    }

    fn carried_over_edits_as_made_afresh(lists_from: usize) {
        let dir = tempfile::tempdir().unwrap();
        let fs = Arc::new(MemFs::new(VPath::root()));
        let texts = [
            "fn push_blob() { transfer(); send(); }\n// when it fails, backoff and go again\n",
            "fn colour() { paint(); }\n",
            "fn store_file() { disk(); }\n// and upload it\n",
        ];
        let text = |i: usize| texts[i % 3].repeat(1 + i % 4 * 6);
        for i in 0..60 {
            fs.add_file(&format!("/w/d{}/f{i}.rs", i % 5), text(i));
        }
        fs.set_changes(Some(1));
        let access = access(fs.clone(), &[("/w", Level::Ro)]);
        let root = access.target("/w", Need::Look).unwrap();
        let mut index = index_with(dir.path(), true);
        index.set_lists_from(lists_from);
        let fused = |index: &Index| index.search(&access, &root, "retry upload", 10).unwrap();
        let first = fused(&index);
        assert!(!first.is_empty());
        // Brings the list up to date, and checks what it carries over (and then keeps it).
        let check = |index: &Index| {
            let store = index.store();
            let (visible, _) = index.visible(&store, &access, &root, Until::Done, &|_| {}).unwrap();
            assert_eq!(index.walk_counts().0, 1, "the list was walked again");
            index.load_vectors(&store).unwrap();
            let mirror = index.mirror();
            let seen = &visible.seen;
            let units_from = lock(&visible.units_from).take().expect("the list before, with its passages");
            let codes_from = lock(&visible.codes_from).take().expect("the list before, with its codes");
            assert_eq!(units_from.visible.units.get().unwrap().remade, mirror.blobs_remade);
            assert!(units_from.files.contains(&NEW_FILE) && units_from.files.iter().any(|f| *f != NEW_FILE));
            let fresh = Units::build(&mirror, seen);
            let gathered = gathered_codes(&mirror, seen, &fresh, lists_from, Some(&codes_from));
            assert_eq!(gathered.trained_here(), (lists_from == 0).then_some(false));
            // While another holds the list before, its codes are copied.
            let shared = Before { visible: codes_from.visible.clone(), files: codes_from.files.clone() };
            let Ok(copied) = carried_codes(&mirror, seen, &fresh, lists_from, shared) else {
                panic!("the codes were not carried over")
            };
            assert_eq!(copied, gathered);
            // Else it is taken apart: its passages, and its codes when they wait for the same list.
            let same_list = Arc::ptr_eq(&units_from.visible, &codes_from.visible);
            *lock(&visible.codes_from) = Some(codes_from);
            let held = Before { visible: units_from.visible.clone(), files: units_from.files.clone() };
            assert_eq!(units_carried(&mirror, &visible, lists_from, held), fresh, "copied while held elsewhere");
            assert!(visible.codes.get().is_none() && lock(&visible.codes_from).is_some(), "the codes stopped waiting");
            let units = units_carried(&mirror, &visible, lists_from, units_from);
            assert_eq!(units, fresh, "carried in place");
            if same_list {
                assert_eq!(visible.codes.get(), Some(&gathered), "codes carried in place with the passages");
            } else {
                let codes_from = lock(&visible.codes_from).take().expect("the codes still wait");
                assert_eq!(Arc::strong_count(&codes_from.visible), 1, "the list before is held elsewhere");
                let Ok(codes) = carried_codes(&mirror, seen, &units, lists_from, codes_from) else {
                    panic!("the codes were not carried over in place")
                };
                assert_eq!(codes, gathered);
                assert!(visible.codes.set(codes).is_ok());
            }
            assert!(visible.units.set(units).is_ok());
            same_list
        };
        fs.add_file("/w/d2/f7.rs", "fn c() { upload(); retry(); }\n".repeat(9));
        fs.note_changed("/w/d2/f7.rs");
        fs.remove("/w/d3/f3.rs");
        fs.note_changed("/w/d3/f3.rs");
        fs.add_file("/w/d0/again.rs", text(1));
        fs.note_changed("/w/d0/again.rs");
        fs.add_file("/w/a.rs", "fn first_of_all() { upload(); }\n");
        fs.note_changed("/w/a.rs");
        assert!(check(&index), "the passages and the codes were not from one list");
        // A search of the words alone carries the codes with the passages, when it takes the list before apart.
        let words = Rankings { words: true, ..Rankings::NONE };
        fs.add_file("/w/d1/f11.rs", text(5));
        fs.note_changed("/w/d1/f11.rs");
        index.search_report(&access, &root, "retry upload", 10, words, &|_| {}).unwrap();
        let kept = || lock(&index.walks).first().expect("a kept walk").seen.clone();
        assert!(kept().codes.get().is_some(), "the codes were not carried with the passages");
        fs.remove("/w/d0/f0.rs");
        fs.note_changed("/w/d0/f0.rs");
        for i in 0..PLACED_ONE_BY_ONE_UP_TO + 6 {
            let path = format!("/w/new/n{i}.rs");
            fs.add_file(&path, text(i * 7 + 1) + &format!("// note {i}\n"));
            fs.note_changed(&path);
        }
        // A list brought up to date with nothing laid out: the next one carries through it.
        index.visible(&index.store(), &access, &root, Until::Done, &|_| {}).unwrap();
        assert!(kept().units.get().is_none());
        fs.add_file("/w/d4/f9.rs", text(2) + "// once more\n");
        fs.note_changed("/w/d4/f9.rs");
        assert!(check(&index), "the passages and the codes were not from one list");
        assert_eq!(index.walk_counts(), (1, 4));
        let dir = tempfile::tempdir().unwrap();
        let mut fresh = index_with(dir.path(), true);
        fresh.set_lists_from(lists_from);
        assert_eq!(fused(&index), fused(&fresh));
    }

    #[test]
    fn rankings_side_by_side_are_those_of_one_thread() {
        use super::super::rankings::SideBySide;
        let dir = tempfile::tempdir().unwrap();
        let fs = Arc::new(MemFs::new(VPath::root()));
        fs.add_file("/w/net.rs", "fn push_blob() { transfer(); send(); }\n// when it fails, backoff and retry\n");
        fs.add_file("/w/paint.rs", "fn colour() { paint(); }\n// retry the brush\n");
        fs.add_file("/w/disk.rs", "fn store_file() { disk(); }\n".repeat(40));
        fs.add_file("/w/upload/retry.md", "upload and send again when the disk fails\n");
        let access = access(fs, &[("/w", Level::Ro)]);
        let root = access.target("/w", Need::Look).unwrap();
        let index = index_with(dir.path(), true);
        for query in ["retry upload", "paint the disk", "send", "nothing matches zyx"] {
            for base in [Rankings::ALL, Rankings { meaning: true, paths: true, ..Rankings::NONE }] {
                let apart = Rankings { side_by_side: SideBySide::Always, ..base };
                let together = Rankings { side_by_side: SideBySide::Never, ..base };
                let one = index.search_with(&access, &root, query, 10, together).unwrap();
                assert_eq!(index.search_with(&access, &root, query, 10, apart).unwrap(), one, "{query}");
                if query != "nothing matches zyx" {
                    assert!(!one.is_empty(), "{query}");
                }
            }
        }
    }

    /// Postings kept across edits (the index's own, another process's, a
    /// file added, changed, removed and tagged) are those the store gives
    /// afresh: a passages' list is brought up to date by reading what came
    /// after it, keeping only the postings of chunks that are gone besides;
    /// the paths' lists are kept while no path or tag changed and read again
    /// when one did. The answers are a fresh index's.
    #[test]
    fn postings_kept_over_edits_are_those_read_afresh() {
        let dir = tempfile::tempdir().unwrap();
        let fs = Arc::new(MemFs::new(VPath::root()));
        for i in 0..12 {
            let text = ["fn retry_upload() { retry(); }\n", "fn upload_file() {}\n", "fn other() {}\n"][i % 3];
            fs.add_file(&format!("/w/retry/f{i}.rs"), text.repeat(1 + i));
        }
        fs.set_changes(Some(1));
        let access = access(fs.clone(), &[("/w", Level::Ro)]);
        let root = access.target("/w", Need::Look).unwrap();
        let index = index(dir.path());
        let query = "retry the upload";
        let terms = query_terms(query);
        index.search(&access, &root, query, 10).unwrap();
        let counts = || {
            let cache = lock(&index.postings);
            (cache.read_whole, cache.read_after)
        };
        assert_eq!(counts(), (2 * terms.len(), 0));
        // What memory holds for each term is what the store gives now, but for chunks that are gone.
        let check = |what: &str| {
            let store = index.store();
            let mut alive = HashSet::new();
            store
                .all_chunks(|_, chunk| {
                    alive.insert(chunk.id);
                })
                .unwrap();
            let cache = lock(&index.postings);
            for term in &terms {
                let held = &cache.terms[&(Postings::Chunks, term.clone())];
                let now = Postings::Chunks.read(&store, term).unwrap();
                let held_alive: Vec<(i64, u32)> = held.list.iter().filter(|(id, _)| alive.contains(id)).collect();
                let now_alive: Vec<(i64, u32)> = now.iter().copied().filter(|(id, _)| alive.contains(id)).collect();
                assert_eq!(held_alive, now_alive, "{what}: {term}");
                let held_ids: Vec<i64> = held.list.iter().map(|(id, _)| id).collect();
                assert!(held_ids.windows(2).all(|w| w[0] < w[1]), "{what}: {term} out of order");
                let meta = &cache.terms[&(Postings::Meta, term.clone())];
                let meta_held: Vec<(i64, u32)> = meta.list.iter().collect();
                assert_eq!(meta_held, Postings::Meta.read(&store, term).unwrap(), "{what}: {term}");
            }
        };
        check("first search");
        // A file's content changed from outside: the passages' lists read only what came after.
        fs.add_file("/w/retry/f1.rs", "fn upload_again() { retry(); }\n".repeat(5));
        fs.note_changed("/w/retry/f1.rs");
        index.search(&access, &root, query, 10).unwrap();
        assert_eq!(counts(), (2 * terms.len(), terms.len()), "paths' lists read again, or passages' whole");
        check("a file changed");
        // A file removed, one added: paths changed, so the paths' lists are read again.
        fs.remove("/w/retry/f4.rs");
        fs.note_changed("/w/retry/f4.rs");
        fs.add_file("/w/upload.rs", "fn retry_later() { upload(); }\n");
        fs.note_changed("/w/upload.rs");
        index.search(&access, &root, query, 10).unwrap();
        assert_eq!(counts(), (3 * terms.len(), 2 * terms.len()));
        check("a file removed and one added");
        // Another process writes (its own connection) and tags a file.
        let other = super::Index::open(&dir.path().join("index.db"), None, index.chunker.clone()).unwrap();
        let bytes = "fn retry_upload_twice() { retry(); upload(); }\n".repeat(3);
        fs.add_file("/w/retry/f7.rs", bytes.clone());
        other.note_written(&VPath::parse("/w/retry/f7.rs").unwrap(), bytes.as_bytes(), Some("agent")).unwrap();
        let f2 = "fn other() {}\n".repeat(3);
        other.tag(&VPath::parse("/w/retry/f2.rs").unwrap(), f2.as_bytes(), Some("upload retry work"), None).unwrap();
        fs.note_changed("/w/retry/f7.rs");
        index.search(&access, &root, query, 10).unwrap();
        check("another process wrote and tagged");
        // Edits enough for the segments to merge: a merged one, reaching past a
        // list's newest chunk, holds older chunks too, which are not added twice.
        for round in 0..2 * super::super::postings::FANOUT {
            let path = format!("/w/retry/f{}.rs", round % 12);
            fs.add_file(&path, format!("fn retry_{round}() {{ upload(); }}\n").repeat(2));
            fs.note_changed(&path);
            index.search(&access, &root, query, 10).unwrap();
            check(&format!("edit {round}"));
        }
        // Nothing changed: nothing is read.
        let before = counts();
        index.search(&access, &root, query, 10).unwrap();
        assert_eq!(counts(), before);
        let fresh_dir = tempfile::tempdir().unwrap();
        let fresh = super::Index::open(&fresh_dir.path().join("index.db"), None, index.chunker.clone()).unwrap();
        fresh.tag(&VPath::parse("/w/retry/f2.rs").unwrap(), f2.as_bytes(), Some("upload retry work"), None).unwrap();
        assert_eq!(index.search(&access, &root, query, 10).unwrap(), fresh.search(&access, &root, query, 10).unwrap());
    }

    /// The meaning ranking's vectors read on two connections are those one
    /// reads, in the order asked, a missing chunk answered with none.
    #[test]
    fn vectors_read_on_two_connections_are_those_one_reads() {
        let dir = tempfile::tempdir().unwrap();
        let fs = Arc::new(MemFs::new(VPath::root()));
        for (i, text) in
            ["fn push_blob() { transfer(); }\n", "fn colour() { paint(); }\n", "fn store_file() { disk(); }\n"]
                .iter()
                .enumerate()
        {
            fs.add_file(&format!("/w/{i}.rs"), *text);
        }
        let access = access(fs, &[("/w", Level::Ro)]);
        let root = access.target("/w", Need::Look).unwrap();
        let index = index_with(dir.path(), true);
        index.search(&access, &root, "send upload", 3).unwrap();
        let mut ids = Vec::new();
        index.store().all_vectors(|id, _| ids.push(id)).unwrap();
        assert!(ids.len() >= 3, "{ids:?}");
        ids.reverse();
        ids.insert(1, i64::MAX);
        let store = index.store();
        let got = index.stored_vectors(&store, &ids).unwrap();
        assert!(index.reader.lock().unwrap().is_some(), "the second connection was not used");
        let one_by_one = |ids: &[i64]| -> Vec<Quantised> {
            ids.iter()
                .map(|id| {
                    let mut row = Vec::new();
                    store.vector(*id, &mut row).unwrap().map(|scale| (row, scale))
                })
                .collect()
        };
        assert_eq!(got, one_by_one(&ids));
        assert!(got[1].is_none() && got.iter().filter(|v| v.is_some()).count() == ids.len() - 1);
        // Several turns' worth: the runs the two connections took come back in the order asked.
        let many: Vec<i64> = (0..200).map(|i| if i % 17 == 3 { i64::MAX } else { ids[i % ids.len()] }).collect();
        assert_eq!(index.stored_vectors(&store, &many).unwrap(), one_by_one(&many));
    }

    /// `Topics` with an embedder's limits: refusing a text of more than `max`
    /// words for its length (as an embedder with a small context does),
    /// taking `delay` for every call (as one slower than a search's time
    /// does), and counting the passages it embeds (`QUERY`, the searches'
    /// own query, is not one).
    struct Toy {
        max: usize,
        delay: std::time::Duration,
        passages: AtomicUsize,
        /// What `meaning_weight` says.
        weight: f64,
    }

    impl Toy {
        /// The query the tests that count passages search for.
        const QUERY: &'static str = "upload";

        fn new(max: usize, delay: std::time::Duration) -> Toy {
            Toy { max, delay, passages: AtomicUsize::new(0), weight: 1.0 }
        }
    }

    impl Embedder for Toy {
        fn name(&self) -> &str {
            "toy"
        }
        fn dims(&self) -> usize {
            5
        }
        fn max_tokens(&self) -> usize {
            self.max
        }
        fn count_tokens(&self, text: &str) -> usize {
            words(text).len()
        }
        fn token_spans(&self, text: &str) -> Vec<std::ops::Range<usize>> {
            Topics.token_spans(text)
        }
        fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
            if let Some((index, text)) = texts.iter().enumerate().find(|(_, t)| words(t).len() > self.max) {
                return Err(EmbedError::TooLong { index, tokens: words(text).len(), max: self.max });
            }
            std::thread::sleep(self.delay);
            self.passages.fetch_add(texts.iter().filter(|t| **t != Toy::QUERY).count(), Ordering::Relaxed);
            Topics.embed(texts)
        }
        fn meaning_weight(&self) -> f64 {
            self.weight
        }
    }

    #[test]
    fn a_passage_refused_for_its_length_is_halved_and_every_part_ranks_by_meaning() {
        let dir = tempfile::tempdir().unwrap();
        let fs = Arc::new(MemFs::new(VPath::root()));
        // One passage of about 90 words, each line about 7 of them.
        let long: String = (0..12).map(|i| format!("fn push_blob_{i}() {{ transfer(); send(); }}\n")).collect();
        fs.add_file("/w/net.rs", long.clone());
        fs.add_file("/w/paint.rs", "fn colour() { paint(); }\n");
        let access = access(fs, &[("/w", Level::Ro)]);
        let root = access.target("/w", Need::Look).unwrap();
        let chunker = Arc::new(TokenChunker::new(Arc::new(super::super::chunk::HalfBytes)));
        let index =
            Index::open(&dir.path().join("index.db"), Some(Arc::new(Toy::new(12, std::time::Duration::ZERO))), chunker)
                .unwrap();
        let meaning = Rankings { meaning: true, ..Rankings::NONE };
        let hits = index.search_with(&access, &root, "upload", 50, meaning).unwrap();
        let mut parts: Vec<&Hit> = hits.iter().filter(|h| h.path.as_str() == "/w/net.rs").collect();
        assert!(parts.len() > 1, "{hits:?}");
        // Every part has a vector, so every part is ranked (the text check
        // below), and the best two, all a file shows before the next file's
        // turn, rank above the unrelated file.
        assert!(hits[..2].iter().all(|h| h.path.as_str() == "/w/net.rs"), "{hits:?}");
        // The parts share nothing and together are the passage.
        parts.sort_by_key(|h| (h.first_line, h.last_line));
        assert_eq!(parts.iter().map(|h| h.text.as_str()).collect::<String>(), long);
        assert_eq!((parts[0].first_line, parts.last().unwrap().last_line), (1, 12));
    }

    #[test]
    fn files_written_together_are_all_indexed_in_order_and_binary_ones_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let index = index_with(dir.path(), true);
        let (a, b, bin) =
            (VPath::parse("/w/a.md").unwrap(), VPath::parse("/w/b.md").unwrap(), VPath::parse("/w/x.bin").unwrap());
        let files: [(&VPath, &[u8], Option<&str>); 4] = [
            (&a, b"first version of a\n", Some("agent-one")),
            (&b, b"retry the upload again\n", None),
            (&bin, b"\0\x01\x02binary", Some("agent-one")),
            (&a, b"second version of a\n", Some("agent-two")),
        ];
        index.note_written_all(&files).unwrap();
        let store = index.store();
        let row = store.file("/w/a.md").unwrap().expect("a is indexed");
        assert_eq!(row.blob, sha256(b"second version of a\n").to_vec(), "the later write wins");
        assert_eq!(row.created_by.as_deref(), Some("agent-one"), "created_by is kept from the first write");
        assert!(store.file("/w/b.md").unwrap().is_some());
        assert!(store.file("/w/x.bin").unwrap().is_none(), "binary files are not indexed");
    }

    /// A walk is reused only while the change count, the view and the root
    /// stay the same; the files' own changes are not looked at in between.
    #[test]
    fn a_walk_is_reused_only_while_nothing_moved() {
        let dir = tempfile::tempdir().unwrap();
        let fs = Arc::new(MemFs::new(VPath::root()));
        fs.add_file("/w/a.md", "the first text about uploads\n");
        fs.add_file("/w/s/b.md", "secret words about uploads\n");
        fs.set_changes(Some(1));
        let index = index_with(dir.path(), false);
        let wide = access(fs.clone(), &[("/w", Level::Ro)]);
        let narrow = access(fs.clone(), &[("/w", Level::Ro), ("/w/s", Level::None)]);
        let paths = |access: &Access| -> Vec<String> {
            let root = access.target("/w", Need::Look).unwrap();
            index
                .search(access, &root, "uploads", 10)
                .unwrap()
                .iter()
                .map(|h| format!("{}:{}", h.path, h.text.trim()))
                .collect()
        };
        assert_eq!(paths(&wide).len(), 2);
        // The narrower view is another key: its own walk, which hides /w/s.
        assert_eq!(paths(&narrow), vec!["/w/a.md:the first text about uploads"]);
        // A new file while the count stays: both views keep their walks.
        fs.add_file("/w/c.md", "more uploads here\n");
        assert_eq!(paths(&wide).len(), 2);
        assert_eq!(paths(&narrow).len(), 1);
        // The count moves: both walk again and find it.
        fs.set_changes(Some(2));
        assert_eq!(paths(&wide).len(), 3);
        assert_eq!(paths(&narrow).len(), 2);
        // Without a count, every search walks.
        fs.add_file("/w/d.md", "uploads again\n");
        fs.set_changes(None);
        assert_eq!(paths(&wide).len(), 4);
    }

    /// `ctxfs index` says what it left out and why (issue 13, item 20): binary,
    /// too large, unreadable, named by an ignore file, hidden; and nothing the
    /// session cannot see is counted.
    #[test]
    fn a_build_counts_what_it_left_out_and_why() {
        let dir = tempfile::tempdir().unwrap();
        let fs = Arc::new(MemFs::new(VPath::root()));
        fs.add_file("/w/a.md", "the alpha protocol\n");
        fs.add_file("/w/logo.png", b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\xff\xfe".to_vec());
        fs.add_file("/w/big.txt", vec![b'x'; MAX_FILE_BYTES as usize + 1]);
        fs.add_file("/w/.gitignore", "node_modules/\n*.log\n");
        fs.add_file("/w/node_modules/lib/index.js", "x\n");
        fs.add_file("/w/debug.log", "x\n");
        fs.add_file("/w/.env", "SECRET=1\n");
        fs.add_file("/w/secret/.hidden", "x\n");
        fs.add_file("/w/secret/skip.log", "x\n");
        let access = access(fs, &[("/w", Level::Ro), ("/w/secret", Level::None)]);
        let root = access.target("/w", Need::Look).unwrap();
        let survey = survey(&access, &root).unwrap();
        // Ignored: node_modules/ and debug.log; hidden: .gitignore and .env. The floor's entries are not counted.
        assert_eq!(survey, Survey { files: 3, ignored: 2, hidden: 2 });
        let done = index_with(dir.path(), false).build_with(&access, &root, &|_| {}).unwrap();
        assert_eq!((done.indexed, done.skipped, done.skipped_binary, done.skipped_large), (1, 2, 1, 1));
        assert_eq!(
            skipped_summary(&survey, &done).unwrap(),
            "skipped 2 files: 1 not text (binary), 1 larger than 4 MiB; not walked: 2 named by ignore files \
             (.gitignore, .ignore, .rgignore) and 2 hidden (names starting with a dot) (files or directories, \
             each with all below it)."
        );
        assert_eq!(skipped_summary(&Survey { files: 1, ..Survey::default() }, &Progress::default()), None);
    }

    /// The store moving under a kept walk (here a written file indexed while
    /// the change count stays) means a new walk: the kept one names blobs
    /// that may be gone.
    #[test]
    fn a_walk_is_not_reused_once_the_store_changed() {
        let dir = tempfile::tempdir().unwrap();
        let fs = Arc::new(MemFs::new(VPath::root()));
        fs.add_file("/w/a.md", "the alpha protocol is here\n");
        fs.set_changes(Some(7));
        let index = index_with(dir.path(), false);
        let access = access(fs.clone(), &[("/w", Level::Ro)]);
        let root = access.target("/w", Need::Look).unwrap();
        let texts = |query: &str| -> Vec<String> {
            index.search(&access, &root, query, 10).unwrap().into_iter().map(|h| h.text).collect()
        };
        assert_eq!(texts("alpha"), vec!["the alpha protocol is here\n"]);
        fs.add_file("/w/a.md", "the omega protocol replaced it\n");
        index.note_written(&VPath::parse("/w/a.md").unwrap(), b"the omega protocol replaced it\n", None).unwrap();
        assert_eq!(texts("omega"), vec!["the omega protocol replaced it\n"]);
        assert!(texts("alpha").is_empty());
    }

    /// A file written over and over, and files removed while their passages
    /// were the newest, leave postings behind until merges drop them; a search
    /// sees none of them: after 1,200 versions (past the purge of removed
    /// chunks) it answers as a fresh index does.
    #[test]
    fn old_versions_of_a_file_change_no_answer() {
        let dir = tempfile::tempdir().unwrap();
        let fs = Arc::new(MemFs::new(VPath::root()));
        fs.add_file("/w/b.md", "alpha beta gamma\n");
        fs.add_file("/w/c.md", "beta beta\nalpha\n");
        let access = access(fs.clone(), &[("/w", Level::Ro)]);
        let root = access.target("/w", Need::Look).unwrap();
        let churned = index_with(&dir.path().join("churned"), false);
        assert_eq!(churned.search(&access, &root, "alpha", 10).unwrap().len(), 2);
        for version in 0..1200 {
            // A file whose passages are the newest, removed before the next write.
            if version % 50 == 0 {
                let temp = format!("alpha alpha beta temp {version}\n");
                fs.add_file("/w/t.md", temp.clone());
                churned.note_written(&VPath::parse("/w/t.md").unwrap(), temp.as_bytes(), None).unwrap();
                fs.remove("/w/t.md");
                churned.search(&access, &root, "temp", 10).unwrap();
            }
            let text = format!("alpha version {version}\nbeta {}\n", "alpha ".repeat(version % 5));
            fs.add_file("/w/a.md", text.clone());
            churned.note_written(&VPath::parse("/w/a.md").unwrap(), text.as_bytes(), None).unwrap();
        }
        // The last file removed held the newest passage; a new file comes after it.
        fs.add_file("/w/t.md", "temp alpha\n");
        churned.note_written(&VPath::parse("/w/t.md").unwrap(), b"temp alpha\n", None).unwrap();
        fs.remove("/w/t.md");
        assert_eq!(churned.search(&access, &root, "temp", 10).unwrap().len(), 0);
        fs.add_file("/w/d.md", "delta\n");
        churned.note_written(&VPath::parse("/w/d.md").unwrap(), b"delta\n", None).unwrap();
        assert_eq!(churned.search(&access, &root, "temp", 10).unwrap(), vec![], "a removed passage's words");
        let fresh = index_with(&dir.path().join("fresh"), false);
        for query in ["alpha", "beta", "version 1199", "version 7", "gamma beta", "delta"] {
            let got = churned.search(&access, &root, query, 10).unwrap();
            assert_eq!(got, fresh.search(&access, &root, query, 10).unwrap(), "{query}");
        }
        assert!(churned.search(&access, &root, "version 7", 10).unwrap().iter().all(|h| h.text.contains("1199")));
        let store = churned.store();
        let dead: i64 = store.db().query_row("SELECT count(*) FROM dead_chunks", [], |r| r.get(0)).unwrap();
        assert!(dead < 1024, "{dead} removed chunks are still waiting: the purge did not run");
    }

    #[test]
    fn a_search_out_of_time_to_index_answers_from_what_is_indexed_and_says_what_is_left() {
        let dir = tempfile::tempdir().unwrap();
        let fs = Arc::new(MemFs::new(VPath::root()));
        fs.add_file("/w/a.md", "the alpha protocol\n");
        let access = access(fs.clone(), &[("/w", Level::Ro)]);
        let root = access.target("/w", Need::Look).unwrap();
        let mut index = index(dir.path());
        assert_eq!(index.search(&access, &root, "alpha", 5).unwrap().len(), 1);
        // No time to index: the new file is left for later, the indexed one still answers.
        index.set_index_budget(std::time::Duration::ZERO);
        fs.add_file("/w/b.md", "the alpha and beta protocols\n");
        let first = index.search_report(&access, &root, "alpha", 5, Rankings::ALL, &|_| {}).unwrap();
        assert_eq!(first.hits.iter().map(|h| h.path.as_str()).collect::<Vec<_>>(), ["/w/a.md"]);
        assert_eq!((first.pending, first.pending_bytes), (1, 29));
        // A changed file out of time keeps its indexed version (it is not taken for gone).
        fs.add_file("/w/a.md", "the alpha protocol, changed\n");
        let second = index.search_report(&access, &root, "alpha", 5, Rankings::ALL, &|_| {}).unwrap();
        assert_eq!(second.hits.len(), 1);
        assert_eq!(second.hits[0].text, "the alpha protocol\n");
        assert_eq!((second.pending, second.pending_earlier, second.pending_words), (2, 1, 0));
        // With time, the next search indexes the rest.
        index.set_index_budget(SEARCH_INDEX_BUDGET);
        let third = index.search_report(&access, &root, "alpha", 5, Rankings::ALL, &|_| {}).unwrap();
        assert_eq!((third.hits.len(), third.pending), (2, 0));
        assert!(third.hits.iter().any(|h| h.text == "the alpha protocol, changed\n"));
    }

    #[test]
    fn a_text_longer_than_one_search_can_embed_is_indexed_over_several_searches() {
        let dir = tempfile::tempdir().unwrap();
        let fs = Arc::new(MemFs::new(VPath::root()));
        let long: String = (0..2400).map(|i| format!("fn push_blob_{i}() {{ transfer(); send(); }}\n")).collect();
        fs.add_file("/w/net.rs", long.clone());
        let access = access(fs, &[("/w", Level::Ro)]);
        let root = access.target("/w", Need::Look).unwrap();
        let chunker = Arc::new(TokenChunker::new(Arc::new(super::super::chunk::HalfBytes)));
        let pieces = chunker.pieces(&long).len();
        assert!(pieces > 2 * EMBED_BATCH, "{pieces} pieces: the text must need three calls of the embedder");
        // Each call of the embedder outlasts a search's time, so every search
        // that starts the text runs out of time after one call of it.
        let slow = Arc::new(Toy::new(usize::MAX, std::time::Duration::from_millis(150)));
        let mut index = Index::open(&dir.path().join("index.db"), Some(slow.clone()), chunker).unwrap();
        index.set_index_budget(std::time::Duration::from_millis(100));
        let mut searches = 0;
        let found = loop {
            searches += 1;
            let report = index.search_report(&access, &root, Toy::QUERY, 5, Rankings::ALL, &|_| {}).unwrap();
            if report.pending == 0 {
                break report;
            }
            // A search that could not even start the text (time up before it) is no failure, only no progress.
            assert!(searches < 40, "still {} files left after {searches} searches", report.pending);
        };
        assert!(searches >= 3, "indexed in {searches} searches: the searches did not run out of time");
        assert_eq!(found.hits[0].path.as_str(), "/w/net.rs");
        // Each search went on from where the one before stopped: every passage was embedded once.
        assert_eq!(slow.passages.load(Ordering::Relaxed), pieces);
    }

    /// With a slow vectorizer a round in the background stores every new
    /// file's words before it embeds any: a search that interrupts the
    /// embedding finds every file by its words, though most have no vector
    /// yet, and a restart keeps them so. Each passage is still embedded once.
    #[test]
    fn a_slow_vectorizers_round_takes_in_every_files_words_before_it_embeds_any() {
        let files = 24;
        let dir = tempfile::tempdir().unwrap();
        let (_, access, root) = files_holding_the_query(files);
        let open = || {
            let (slow, mut index) = toy_index(dir.path(), std::time::Duration::from_millis(40));
            index.set_index_budget(std::time::Duration::ZERO);
            (slow, index)
        };
        let (slow, index) = open();
        let search =
            |index: &Index| index.search_report(&access, &root, Toy::QUERY, 2 * files, Rankings::ALL, &|_| {}).unwrap();
        let paths = |report: &Searched| -> HashSet<String> { report.hits.iter().map(|h| h.path.to_string()).collect() };
        // The search itself has no time to index: nothing is found yet.
        let first = search(&index);
        assert_eq!((first.hits.len(), first.pending), (0, files), "{first:?}");
        let (_, searched) = search_during_a_round(&index, &access, &root, &slow, || search(&index));
        // Most files wait for their vectors, yet every one is found by its words.
        assert!(searched.pending > 0, "the round did not give way: {searched:?}");
        assert_eq!(paths(&searched).len(), files, "{searched:?}");
        // A restart finds the files whose words alone are stored, and leaves them pending.
        let (again_slow, again) = open();
        let restarted = search(&again);
        assert_eq!(paths(&restarted).len(), files, "{restarted:?}");
        assert_eq!(restarted.pending, searched.pending);
        // Rounds finish the embedding; no passage was embedded twice.
        drop(again);
        let mut rounds = 0;
        while index.index_in_background(&access, &root).unwrap().unwrap().pending > 0 {
            rounds += 1;
            assert!(rounds < 10, "still pending after {rounds} rounds");
        }
        let last = search(&index);
        assert_eq!((paths(&last).len(), last.pending), (files, 0));
        assert_eq!(slow.passages.load(Ordering::Relaxed) + again_slow.passages.load(Ordering::Relaxed), files);
    }

    /// With a slow vectorizer a search's own time to index goes to every new
    /// file's words first: a session's first search, with no round in the
    /// background yet, finds every file by its words and says that the files
    /// waiting for their vectors were searched by them.
    #[test]
    fn a_slow_vectorizers_first_search_finds_every_file_by_its_words() {
        let files = 24;
        let dir = tempfile::tempdir().unwrap();
        let (_, access, root) = files_holding_the_query(files);
        // Each file is one call of the embedder: embedding them all would take ten seconds, five times the budget.
        let (slow, mut index) = toy_index(dir.path(), std::time::Duration::from_millis(400));
        index.set_index_budget(std::time::Duration::from_secs(2));
        let first = index.search_report(&access, &root, Toy::QUERY, 2 * files, Rankings::ALL, &|_| {}).unwrap();
        let paths: HashSet<String> = first.hits.iter().map(|h| h.path.to_string()).collect();
        assert_eq!(paths.len(), files, "{first:?}");
        assert!(first.pending > 0 && first.pending < files, "{first:?}");
        assert_eq!(first.pending_words, first.pending, "{first:?}");
        assert!(slow.passages.load(Ordering::Relaxed) < files);
    }

    /// While most files are searched by their words alone, waiting for a
    /// slow embedder, the few it has embedded do not outrank them by meaning
    /// alone: the meaning ranking counts only the share of files it sees.
    #[test]
    fn a_meaning_ranking_that_sees_few_files_counts_that_much() {
        let dir = tempfile::tempdir().unwrap();
        let fs = Arc::new(MemFs::new(VPath::root()));
        // Two files about sending (the toy's topic of the query), embedded.
        for i in 0..2 {
            fs.add_file(&format!("/w/a{i}.rs"), format!("fn send_{i}() {{ transfer(); send(); }}\n"));
        }
        fs.set_changes(Some(0));
        let access = access(fs.clone(), &[("/w", Level::Ro)]);
        let root = access.target("/w", Need::Look).unwrap();
        let chunker = Arc::new(TokenChunker::new(Arc::new(super::super::chunk::HalfBytes)));
        let mut toy = Toy::new(usize::MAX, std::time::Duration::ZERO);
        // A model whose meaning counts as much as the transformer's.
        toy.weight = 2.5;
        let mut index = Index::open(&dir.path().join("index.db"), Some(Arc::new(toy)), chunker).unwrap();
        assert_eq!(index.search(&access, &root, "colour", 10).unwrap().len(), 2);
        // Ten files naming the query's word, their words stored, no vectors yet.
        for i in 0..10 {
            fs.add_file(&format!("/w/b{i}.rs"), format!("fn part_{i}() {{ upload(); }}\n"));
        }
        fs.set_changes(Some(1));
        let store = index.store();
        index.refresh(&store, &access, &root, false, None, &Met::default(), Until::Done, Take::Words, &|_| {}).unwrap();
        drop(store);
        index.set_index_budget(std::time::Duration::ZERO);
        let found = index.search_report(&access, &root, "upload", 4, Rankings::ALL, &|_| {}).unwrap();
        assert_eq!(found.pending_words, 10, "{found:?}");
        let paths: Vec<&str> = found.hits.iter().map(|h| h.path.as_str()).collect();
        assert!(paths.iter().all(|p| p.starts_with("/w/b")), "{paths:?}");
    }

    /// A walk that takes words alone and runs out of time leaves the files
    /// it has not reached unread (the walk after it reads them anyway), and
    /// counts them as waiting, not as gone.
    #[test]
    fn a_words_walk_out_of_time_leaves_the_rest_unread() {
        let files = 12;
        let dir = tempfile::tempdir().unwrap();
        let (fs, access, root) = files_holding_the_query(files);
        let (_, index) = toy_index(dir.path(), std::time::Duration::ZERO);
        let store = index.store();
        let late = Until::after(std::time::Duration::ZERO);
        let (_, done) =
            index.refresh(&store, &access, &root, false, None, &Met::default(), late, Take::Words, &|_| {}).unwrap();
        assert_eq!((done.pending, done.indexed, done.removed, fs.files_opened()), (files, 0, 0, 0), "{done:?}");
        // With time, the words go in: each file read once.
        let (_, done) = index
            .refresh(&store, &access, &root, false, None, &Met::default(), Until::Done, Take::Words, &|_| {})
            .unwrap();
        assert_eq!((done.pending, fs.files_opened()), (files, files), "{done:?}");
        drop(store);
        let found = index.search_report(&access, &root, Toy::QUERY, 2 * files, Rankings::ALL, &|_| {}).unwrap();
        assert_eq!(found.hits.len(), files);
    }

    /// `files` one-passage files under /w, each holding the searches' own
    /// word (`Toy::QUERY`, which the toy does not count as a passage), on a
    /// file system whose count of changes stands still.
    fn files_holding_the_query(files: usize) -> (Arc<MemFs>, Access, Target) {
        let fs = Arc::new(MemFs::new(VPath::root()));
        for i in 0..files {
            fs.add_file(&format!("/w/f{i:02}.rs"), format!("fn {}_part_{i}() {{ transfer(); }}\n", Toy::QUERY));
        }
        fs.set_changes(Some(0));
        let access = access(fs.clone(), &[("/w", Level::Ro)]);
        let root = access.target("/w", Need::Look).unwrap();
        (fs, access, root)
    }

    /// An index in `dir` whose embedder, the toy, takes `delay` a call, passages cut by `HalfBytes`.
    fn toy_index(dir: &std::path::Path, delay: std::time::Duration) -> (Arc<Toy>, Index) {
        let chunker = Arc::new(TokenChunker::new(Arc::new(super::super::chunk::HalfBytes)));
        let slow = Arc::new(Toy::new(usize::MAX, delay));
        (slow.clone(), Index::open(&dir.join("index.db"), Some(slow), chunker).unwrap())
    }

    /// A round in the background, and `search` run once the round has
    /// embedded something, long before it could end: the round's figures
    /// and what the search answered.
    fn search_during_a_round<T>(
        index: &Index,
        access: &Access,
        root: &Target,
        slow: &Toy,
        search: impl FnOnce() -> T,
    ) -> (Option<Progress>, T) {
        std::thread::scope(|scope| {
            let round = scope.spawn(|| index.index_in_background(access, root).unwrap());
            let waited = std::time::Instant::now();
            while slow.passages.load(Ordering::Relaxed) == 0 {
                assert!(waited.elapsed() < std::time::Duration::from_secs(120), "the round never embedded");
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            let searched = search();
            (round.join().unwrap(), searched)
        })
    }

    /// `files` one-passage files under /w, a file system whose count of changes is `changes`, and an
    /// index whose embedder takes `delay` a call and whose searches have no time to index (they
    /// leave every file to the background).
    fn tree_for_the_background(
        files: usize,
        changes: Option<u64>,
        delay: std::time::Duration,
    ) -> (tempfile::TempDir, Access, Target, Arc<Toy>, Index) {
        let dir = tempfile::tempdir().unwrap();
        let fs = Arc::new(MemFs::new(VPath::root()));
        for i in 0..files {
            fs.add_file(&format!("/w/f{i:02}.rs"), format!("fn send_part_{i}() {{ transfer(); }}\n"));
        }
        fs.set_changes(changes);
        let access = access(fs, &[("/w", Level::Ro)]);
        let root = access.target("/w", Need::Look).unwrap();
        let chunker = Arc::new(TokenChunker::new(Arc::new(super::super::chunk::HalfBytes)));
        let slow = Arc::new(Toy::new(usize::MAX, delay));
        let mut index = Index::open(&dir.path().join("index.db"), Some(slow.clone()), chunker).unwrap();
        index.set_index_budget(std::time::Duration::ZERO);
        (dir, access, root, slow, index)
    }

    #[test]
    fn indexing_in_the_background_gives_way_to_a_search_and_finishes_what_searches_left() {
        let files = 24;
        // A watcher that counts no change: a walk with nothing pending may be answered from again.
        let (_dir, access, root, slow, index) =
            tree_for_the_background(files, Some(0), std::time::Duration::from_millis(40));
        let search =
            |index: &Index| index.search_report(&access, &root, Toy::QUERY, 5, Rankings::ALL, &|_| {}).unwrap();
        assert_eq!(search(&index).pending, files);
        let (round, searched) = search_during_a_round(&index, &access, &root, &slow, || search(&index));
        let round = round.expect("the index is open");
        assert!(round.pending > 0, "the round did not give way: {round:?}");
        // Each file is one passage (`chunks` counts new passages; `indexed` counts
        // the files read, which in memory, with no times, are all of them).
        assert!(round.chunks > 0, "{round:?}");
        // What the round took in was committed before the search read the store.
        assert_eq!(searched.pending, files - round.chunks, "{round:?}");
        // Nobody else wants the store now: the next round takes in the rest, and keeps its walk.
        let rest = index.index_in_background(&access, &root).unwrap().unwrap();
        assert_eq!((rest.pending, round.chunks + rest.chunks), (0, files), "{rest:?}");
        let walks = index.walk_counts().0;
        let last = search(&index);
        assert_eq!(last.pending, 0);
        assert_eq!(index.walk_counts().0, walks, "the search walked again");
        assert!(last.hits.iter().any(|h| h.path.as_str() == "/w/f00.rs"), "{:?}", last.hits);
        // Nothing was embedded twice, though the first round gave way mid-walk.
        assert_eq!(slow.passages.load(Ordering::Relaxed), files);
        // A closed index does no more rounds.
        index.close();
        assert!(index.index_in_background(&access, &root).unwrap().is_none());
    }

    #[test]
    fn a_walk_made_before_changes_could_be_counted_is_made_again_in_the_background_for_the_next_search() {
        let dir = tempfile::tempdir().unwrap();
        let fs = Arc::new(MemFs::new(VPath::root()));
        for i in 0..6 {
            fs.add_file(&format!("/w/f{i}.rs"), format!("fn upload_part_{i}() {{ send(); }}\n"));
        }
        // The watcher is still starting: the file system cannot count changes yet.
        fs.set_changes(None);
        let access = access(fs.clone(), &[("/w", Level::Ro)]);
        let root = access.target("/w", Need::Look).unwrap();
        let index = index_with(dir.path(), true);
        let search = || index.search_report(&access, &root, "upload", 5, Rankings::ALL, &|_| {}).unwrap();
        let first = search();
        assert!(first.uncounted && first.pending == 0, "{first:?}");
        assert_eq!(index.walk_counts().0, 1);
        // Once changes can be counted, a round in the background walks and readies the list.
        fs.set_changes(Some(0));
        let round = index.index_in_background(&access, &root).unwrap().unwrap();
        assert!(!round.uncounted && round.pending == 0, "{round:?}");
        assert_eq!(index.walk_counts().0, 2);
        {
            let walks = lock(&index.walks);
            let kept = &walks[0].seen;
            assert!(kept.units.get().is_some() && kept.codes.get().is_some(), "the list was not readied");
        }
        // The next search answers from that list, without a walk, and as the first did.
        let second = search();
        assert_eq!(index.walk_counts().0, 2, "the second search walked again");
        assert!(!second.uncounted);
        assert_eq!(second.hits, first.hits);
    }

    /// Issue 17: on disk, a session's first search waits for the watcher's
    /// first build, so its walk is kept and the second search does not walk.
    #[test]
    fn on_disk_the_first_search_walks_once_for_the_searches_after_it() {
        let (tmp, dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let host = tmp.path().canonicalize().unwrap();
        if !crate::vfs::watch::available(&host) {
            eprintln!("skipped: no inotify on a local file system for {}", host.display());
            return;
        }
        for i in 0..40 {
            std::fs::create_dir_all(host.join(format!("d{}", i % 8))).unwrap();
            std::fs::write(host.join(format!("d{}/f{i}.rs", i % 8)), format!("fn upload_part_{i}() {{ send(); }}\n"))
                .unwrap();
        }
        let fs = Arc::new(crate::vfs::os::OsFs::open(&host, VPath::parse("/w").unwrap(), None).unwrap());
        let file = crate::access::ViewFile { grants: [("/w".to_string(), Level::Ro)].into(), ..Default::default() };
        let access = Access::new(fs, View::from_file(&file).unwrap(), VPath::root());
        let root = access.target("/w", Need::Look).unwrap();
        let index = index_with(dir.path(), true);
        let search = || index.search_report(&access, &root, "upload", 5, Rankings::ALL, &|_| {}).unwrap();
        let first = search();
        assert!(!first.uncounted, "the first walk was made before the watcher counted changes");
        assert_eq!(first.pending, 0);
        let second = search();
        assert_eq!(index.walk_counts().0, 1, "the second search walked again");
        assert_eq!(second.hits, first.hits);
    }

    #[test]
    fn a_search_that_leaves_files_while_a_session_start_waits_for_the_watcher_hands_them_over_at_once() {
        use super::super::background::{IndexSlot, Readying};
        let files = 24;
        // The watcher is still starting: a session's start waits for it before it walks.
        let (dir, access, root, slow, index) =
            tree_for_the_background(files, None, std::time::Duration::from_millis(20));
        let slot = IndexSlot::opened(dir.path(), index);
        let index = slot.loaded().unwrap();
        slot.go_on(access.clone(), root.clone(), Readying::Uncounted);
        let search = || index.search_report(&access, &root, Toy::QUERY, 5, Rankings::ALL, &|_| {}).unwrap();
        assert_eq!(search().pending, files);
        // The search hands what it left over before it answers: the next one takes in nothing itself,
        // though the thread is still busy with the session's start.
        slot.go_on(access.clone(), root.clone(), Readying::Unindexed);
        assert!(index.takes_in_background(), "the next search would index itself");
        // The thread leaves its wait for the watcher (which still cannot count) for the files left.
        let waited = std::time::Instant::now();
        while search().pending > 0 {
            assert!(
                waited.elapsed() < std::time::Duration::from_secs(30),
                "the files left were not indexed while the thread waited for the watcher"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert_eq!(slow.passages.load(Ordering::Relaxed), files, "a passage was embedded twice");
    }

    #[test]
    fn merges_searches_leave_waiting_are_made_by_a_round_in_the_background() {
        let dir = tempfile::tempdir().unwrap();
        let fs = Arc::new(MemFs::new(VPath::root()));
        fs.add_file("/w/a.md", "alpha beta\n");
        fs.add_file("/w/b.md", "gamma delta\n");
        fs.set_changes(Some(0));
        let access = access(fs.clone(), &[("/w", Level::Ro)]);
        let root = access.target("/w", Need::Look).unwrap();
        let index = index_with(dir.path(), true);
        let search = |query: &str| index.search(&access, &root, query, 5).unwrap();
        let level0 = || -> i64 {
            let store = index.store();
            store.db().query_row("SELECT count(*) FROM postings_segments WHERE level = 0", [], |r| r.get(0)).unwrap()
        };
        search("alpha");
        // Outside edits, each taken in by the next search from the change feed: one segment each, merges waiting.
        for n in 0..super::super::postings::FANOUT + 2 {
            let text = format!("alpha edit {n}\n");
            fs.add_file("/w/a.md", text);
            fs.note_changed("/w/a.md");
            assert!(search(&format!("edit {n}")).iter().any(|h| h.text.contains(&format!("edit {n}"))));
        }
        assert!(level0() >= super::super::postings::FANOUT as i64, "no merge was left waiting");
        // One more edit, taken in by a round in the background: the merges are made there.
        fs.add_file("/w/b.md", "gamma epsilon\n");
        fs.note_changed("/w/b.md");
        let round = index.index_in_background(&access, &root).unwrap().unwrap();
        assert_eq!(round.pending, 0);
        assert!(level0() < super::super::postings::FANOUT as i64, "the round left {} segments at level 0", level0());
        // The round's list is kept after its merges: the next search neither walks nor misses the edit.
        let walks = index.walk_counts();
        assert!(search("epsilon").iter().any(|h| h.path.as_str() == "/w/b.md"));
        assert_eq!(index.walk_counts(), walks);
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
        assert_eq!(
            (done.found, done.done, done.indexed, done.skipped, done.removed, done.walked),
            (3, 3, 2, 1, 0, true)
        );
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

    /// A store whose file was damaged while no process had it open (a crash,
    /// a disk that lost a write) is emptied by the first search that meets
    /// the damage, which then answers as a first search does; the tags are
    /// kept, and the index answers as one built afresh.
    #[test]
    fn a_damaged_store_is_emptied_by_the_search_that_meets_it_keeping_the_tags() {
        let dir = tempfile::tempdir().unwrap();
        let access = three_topics(Level::Stage);
        let root = access.target("/w", Need::Look).unwrap();
        let path = dir.path().join("index.db");
        {
            let index = index_with(dir.path(), true);
            assert_eq!(index.search(&access, &root, "retry upload", 3).unwrap()[0].path.as_str(), "/w/net.rs");
            index.tag(&VPath::parse("/w/paint.rs").unwrap(), b"", Some("auth bug"), None).unwrap();
        }
        let vectors = crate::sqlite::spoiling::root_page(&path, "chunk_vectors");
        crate::sqlite::spoiling::spoil_page(&path, vectors);

        let index = index_with(dir.path(), true);
        let hits = index.search(&access, &root, "retry upload", 3).unwrap();
        assert_eq!(index.mends.load(Ordering::SeqCst), 1, "the search met the damage");
        assert_eq!(hits[0].path.as_str(), "/w/net.rs", "{hits:?}");
        let tagged = index.search(&access, &root, "auth", 3).unwrap();
        assert_eq!(tagged[0].path.as_str(), "/w/paint.rs", "the tag was kept: {tagged:?}");
        let row = index.store().file("/w/paint.rs").unwrap().expect("indexed again");
        assert_eq!((row.blob, row.task.as_deref()), (sha256(b"fn colour() { paint(); }\n").to_vec(), Some("auth bug")));
        let fresh_dir = tempfile::tempdir().unwrap();
        let fresh = index_with(fresh_dir.path(), true);
        fresh.tag(&VPath::parse("/w/paint.rs").unwrap(), b"", Some("auth bug"), None).unwrap();
        for query in ["retry upload", "paint", "auth", "colour transfer"] {
            assert_eq!(hits_of(&index, &access, query), hits_of(&fresh, &access, query), "{query}");
        }
        assert_eq!(index.mends.load(Ordering::SeqCst), 1, "mended once");
    }

    /// Another process with the store open when one empties it (two
    /// indexes over one file stand for them) reads the emptied store at its
    /// next search, as after any other process's change, and answers as an
    /// index built afresh.
    #[test]
    fn an_index_sharing_the_store_goes_on_after_another_empties_it() {
        let dir = tempfile::tempdir().unwrap();
        let access = three_topics(Level::Stage);
        let (one, other) = (index_with(dir.path(), true), index_with(dir.path(), true));
        let before: Vec<_> = ["retry upload", "paint", "store a file"].map(|q| hits_of(&other, &access, q)).into();
        assert!(before.iter().all(|hits| !hits.is_empty()), "{before:?}");
        hits_of(&one, &access, "paint");
        let damage = anyhow::Error::new(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CORRUPT),
            None,
        ));
        let walks = other.walks_made.load(Ordering::SeqCst);
        one.mend(0, &damage).unwrap();
        assert!(one.store().file("/w/net.rs").unwrap().is_none(), "emptied");
        let after: Vec<_> = ["retry upload", "paint", "store a file"].map(|q| hits_of(&other, &access, q)).into();
        assert_eq!(after, before);
        assert!(other.walks_made.load(Ordering::SeqCst) > walks, "the other index walked again");
        assert_eq!(hits_of(&one, &access, "retry upload"), before[0]);
        assert_eq!(other.mends.load(Ordering::SeqCst), 0, "the other met no damage");
    }

    /// A file that is not a database at all (its first page overwritten) is
    /// emptied when the index opens: searching and writing work at once.
    #[test]
    fn an_index_file_that_is_not_a_database_is_emptied_when_it_opens() {
        let dir = tempfile::tempdir().unwrap();
        let fs = Arc::new(MemFs::new(VPath::root()));
        fs.add_file("/w/a.md", "alpha beta\n");
        let access = access(fs, &[("/w", Level::Stage)]);
        let root = access.target("/w", Need::Look).unwrap();
        let path = dir.path().join("index.db");
        index_with(dir.path(), false).search(&access, &root, "alpha", 3).unwrap();
        crate::sqlite::spoiling::spoil_page(&path, 1);
        let index = index_with(dir.path(), false);
        assert_eq!(index.search(&access, &root, "alpha", 3).unwrap()[0].path.as_str(), "/w/a.md");
        index.note_written(&VPath::parse("/w/b.md").unwrap(), b"gamma\n", Some("agent-one")).unwrap();
        assert_eq!(index.store().file("/w/b.md").unwrap().unwrap().created_by.as_deref(), Some("agent-one"));
        assert_eq!(index.mends.load(Ordering::SeqCst), 0, "mended before the index was made");
    }

    /// A tagged file moved to another path (by ctxfs's `mv`, an editor or
    /// `git mv`: the walk sees one path gone and one new with the same
    /// content) keeps its tags and creator there; one moved and changed at
    /// once is a new file.
    #[test]
    fn tags_follow_a_file_that_moved() {
        let dir = tempfile::tempdir().unwrap();
        let fs = Arc::new(MemFs::new(VPath::root()));
        fs.add_file("/w/a.md", "alpha beta\n");
        fs.add_file("/w/b.md", "gamma delta\n");
        let access = access(fs.clone(), &[("/w", Level::Stage)]);
        let root = access.target("/w", Need::Look).unwrap();
        let index = index(dir.path());
        index.search(&access, &root, "alpha", 5).unwrap();
        index.tag(&VPath::parse("/w/a.md").unwrap(), b"", Some("auth bug"), None).unwrap();
        index.note_written(&VPath::parse("/w/b.md").unwrap(), b"gamma delta\n", Some("agent-one")).unwrap();
        index.tag(&VPath::parse("/w/b.md").unwrap(), b"", None, Some("login flow")).unwrap();
        // a.md moves as it is; b.md moves and changes.
        assert!(fs.remove("/w/a.md") && fs.remove("/w/b.md"));
        fs.add_file("/w/docs/moved.md", "alpha beta\n");
        fs.add_file("/w/docs/changed.md", "gamma delta epsilon\n");
        assert_eq!(index.search(&access, &root, "auth bug", 5).unwrap()[0].path.as_str(), "/w/docs/moved.md");
        let store = index.store();
        assert_eq!(store.file("/w/docs/moved.md").unwrap().unwrap().task.as_deref(), Some("auth bug"));
        let changed = store.file("/w/docs/changed.md").unwrap().unwrap();
        assert_eq!((changed.related, changed.created_by), (None, None), "changed as it moved: a new file");
        assert!(store.file("/w/a.md").unwrap().is_none() && store.file("/w/b.md").unwrap().is_none());
    }

    /// The kept walk's files are in `passage_order`, so its units' chunk ids rise.
    fn assert_laid_out_by_passage(index: &Index) {
        let walks = index.walks.lock().unwrap();
        let seen = &walks.first().expect("a kept walk").seen.seen;
        let mirror = index.mirror();
        let order: Vec<i64> = seen.iter().map(|s| passage_order(&mirror, s)).collect();
        assert!(order.windows(2).all(|w| w[0] <= w[1]), "{order:?}");
        assert!(order.iter().filter(|id| **id != i64::MAX).count() >= 2, "{order:?}");
    }

    /// Every hit of a search, as text, for comparing two indexes.
    fn hits_of(index: &Index, access: &Access, query: &str) -> Vec<String> {
        let root = access.target("/w", Need::Look).unwrap();
        let hits = index.search(access, &root, query, 50).unwrap();
        hits.iter().map(|h| format!("{}:{}-{}:{}", h.path, h.first_line, h.last_line, h.text.trim())).collect()
    }

    /// Files of the same content share their passages (one blob, one set of
    /// chunk ids): each is a unit of its own, found by words and by meaning,
    /// three copies, two, or one, each laid out apart.
    #[test]
    fn files_of_the_same_content_each_rank() {
        let dir = tempfile::tempdir().unwrap();
        let fs = Arc::new(MemFs::new(VPath::root()));
        let text = "fn retry_upload() { send(); }\n// when it fails, backoff and retry\n";
        for name in ["/w/a.rs", "/w/b.rs", "/w/c/d.rs"] {
            fs.add_file(name, text);
        }
        fs.add_file("/w/other.rs", "fn colour() { paint(); }\n");
        fs.add_file("/w/pair1.rs", "fn paint_twice() {}\n");
        fs.add_file("/w/pair2.rs", "fn paint_twice() {}\n");
        // Counted changes: the walk is kept, and its layout can be looked at.
        fs.set_changes(Some(1));
        let access = access(fs, &[("/w", Level::Ro)]);
        let root = access.target("/w", Need::Look).unwrap();
        let index = index_with(dir.path(), true);
        let paths = |query: &str, rankings: Rankings| {
            let mut got: Vec<String> = index
                .search_with(&access, &root, query, 10, rankings)
                .unwrap()
                .into_iter()
                .map(|h| h.path.to_string())
                .collect();
            got.sort();
            got
        };
        let words = Rankings { words: true, ..Rankings::NONE };
        assert_eq!(paths("retry upload", words), ["/w/a.rs", "/w/b.rs", "/w/c/d.rs"]);
        assert_eq!(paths("paint twice", words), ["/w/other.rs", "/w/pair1.rs", "/w/pair2.rs"]);
        assert_eq!(paths("colour", words), ["/w/other.rs"]);
        // Whole files: each path of a shared content counts its words.
        let files = Rankings { files: true, ..Rankings::NONE };
        assert_eq!(paths("retry upload", files), ["/w/a.rs", "/w/b.rs", "/w/c/d.rs"]);
        assert_eq!(paths("paint twice", files), ["/w/other.rs", "/w/pair1.rs", "/w/pair2.rs"]);
        let meaning = Rankings { meaning: true, ..Rankings::NONE };
        assert!(paths("retry upload", meaning).len() >= 3);
        let walks = index.walks.lock().unwrap();
        let units = walks[0].seen.units.get().expect("laid out");
        let ids: HashSet<i64> = units.id.iter().copied().collect();
        assert_eq!((units.len(), ids.len()), (6, 3), "six files, three contents");
    }

    /// A walk lays its files out by their passages' ids, whatever order it
    /// found them in: here a file edited since the index was made has the
    /// newest passages, though the walk meets it first.
    #[test]
    fn a_walk_lays_its_files_out_by_their_passages() {
        let (dir, fresh_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let fs = Arc::new(MemFs::new(VPath::root()));
        for name in ["a", "b", "c", "d"] {
            fs.add_file(&format!("/w/{name}.md"), format!("{name} speaks of alpha\n"));
        }
        fs.set_changes(Some(1));
        let access = access(fs.clone(), &[("/w", Level::Ro)]);
        let index = index(dir.path());
        assert_eq!(hits_of(&index, &access, "alpha").len(), 4);
        fs.add_file("/w/a.md", "a speaks of alpha, and again of alpha\n");
        fs.add_file("/w/b.md", "b still speaks of alpha\n");
        // A change the feed cannot name: the next search walks the whole tree.
        fs.note_lost();
        let hits = hits_of(&index, &access, "alpha");
        assert_eq!(hits, hits_of(&self::index(fresh_dir.path()), &access, "alpha"));
        assert_eq!(index.walk_counts(), (2, 0));
        assert_laid_out_by_passage(&index);
        let walks = index.walks.lock().unwrap();
        let shown: Vec<&str> = walks[0].seen.seen.iter().map(|s| s.shown.as_str()).collect();
        assert_eq!(
            shown[2..].iter().copied().collect::<HashSet<_>>(),
            HashSet::from(["/w/a.md", "/w/b.md"]),
            "{shown:?}"
        );
    }

    /// Issue 17: an outside change the feed names is looked at alone (no
    /// walk), and the search then answers exactly what a fresh index, which
    /// walks, answers: an edit, a new file, a removed file.
    #[test]
    fn outside_changes_the_feed_names_are_picked_up_without_a_walk() {
        let (dir, fresh_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let fs = Arc::new(MemFs::new(VPath::root()));
        fs.add_file("/w/a.md", "the alpha protocol\n");
        fs.add_file("/w/b.md", "beta and alpha together\n");
        fs.add_file("/w/deep/c.md", "gamma, nothing else\n");
        fs.set_changes(Some(1));
        let access = access(fs.clone(), &[("/w", Level::Ro)]);
        let index = index(dir.path());
        let same_as_a_walk = |query: &str| {
            let fresh = self::index(fresh_dir.path());
            let hits = hits_of(&index, &access, query);
            assert_eq!(hits, hits_of(&fresh, &access, query), "{query}");
            assert_laid_out_by_passage(&index);
            hits
        };
        assert_eq!(same_as_a_walk("alpha").len(), 2);
        assert_eq!(index.walk_counts(), (1, 0));
        // Nothing moved: the walk is reused.
        same_as_a_walk("alpha");
        assert_eq!(index.walk_counts(), (1, 0));
        // An edit deep down.
        fs.add_file("/w/deep/c.md", "gamma and now alpha too\n");
        fs.note_changed("/w/deep/c.md");
        assert!(same_as_a_walk("alpha").iter().any(|h| h.starts_with("/w/deep/c.md:")));
        assert_eq!(index.walk_counts(), (1, 1), "looked at the one file, no walk");
        // A new file, in a directory that existed.
        fs.add_file("/w/deep/d.md", "delta speaks of alpha\n");
        fs.note_changed("/w/deep/d.md");
        assert_eq!(same_as_a_walk("alpha").len(), 4);
        // A removed file, and a path named twice; the store forgets it.
        assert!(fs.remove("/w/b.md"));
        fs.note_changed("/w/b.md");
        fs.note_changed("/w/deep/d.md");
        let hits = same_as_a_walk("alpha");
        assert!(!hits.iter().any(|h| h.starts_with("/w/b.md:")), "{hits:?}");
        assert!(index.store().file("/w/b.md").unwrap().is_none());
        assert_eq!(index.walk_counts(), (1, 3));
        // A changed file that is now binary leaves the results, as a walk would have it.
        fs.add_file("/w/a.md", b"\0\x01alpha".to_vec());
        fs.note_changed("/w/a.md");
        assert!(!same_as_a_walk("alpha").iter().any(|h| h.starts_with("/w/a.md:")));
        assert_eq!(index.walk_counts(), (1, 4));
    }

    /// A change that changes nothing the view shows (a file written with
    /// what it held) keeps the kept list itself, with its passages laid out
    /// and their codes; a change that does changes it.
    #[test]
    fn a_change_that_changes_nothing_keeps_the_laid_out_passages() {
        let dir = tempfile::tempdir().unwrap();
        let fs = Arc::new(MemFs::new(VPath::root()));
        fs.add_file("/w/a.md", "the alpha protocol\n");
        fs.add_file("/w/b.md", "beta and alpha together\n");
        fs.set_changes(Some(1));
        let access = access(fs.clone(), &[("/w", Level::Ro)]);
        let index = index(dir.path());
        let kept = || index.walks.lock().unwrap().first().expect("a kept walk").seen.clone();
        let hits = hits_of(&index, &access, "alpha");
        let before = kept();
        assert!(before.units.get().is_some());
        fs.add_file("/w/a.md", "the alpha protocol\n");
        fs.note_changed("/w/a.md");
        assert_eq!(hits_of(&index, &access, "alpha"), hits);
        assert_eq!(index.walk_counts(), (1, 1));
        assert!(Arc::ptr_eq(&before, &kept()), "the same files were laid out again");
        fs.add_file("/w/a.md", "the alpha protocol, changed\n");
        fs.note_changed("/w/a.md");
        assert_ne!(hits_of(&index, &access, "alpha"), hits);
        assert!(!Arc::ptr_eq(&before, &kept()));
    }

    /// A walk made before the file system could count its changes (its
    /// watcher still starting) is not answered from again, but the next walk,
    /// finding the same files, takes its passages laid out and their codes.
    #[test]
    fn a_walk_made_before_changes_are_counted_lends_its_layout_to_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let fs = Arc::new(MemFs::new(VPath::root()));
        fs.add_file("/w/a.md", "the alpha protocol\n");
        fs.add_file("/w/b.md", "beta and alpha together\n");
        fs.set_changes(None);
        let access = access(fs.clone(), &[("/w", Level::Ro)]);
        let index = index(dir.path());
        let kept = || index.walks.lock().unwrap().first().expect("a kept walk").seen.clone();
        let hits = hits_of(&index, &access, "alpha");
        let first = kept();
        assert!(first.units.get().is_some());
        // Without a count the list is walked again, whatever was kept.
        assert_eq!(hits_of(&index, &access, "alpha"), hits);
        assert_eq!(index.walk_counts(), (2, 0));
        // Counted now: walked again, the same files, so the same layout.
        fs.set_changes(Some(1));
        assert_eq!(hits_of(&index, &access, "alpha"), hits);
        assert_eq!(index.walk_counts(), (3, 0));
        assert!(Arc::ptr_eq(&first, &kept()), "the same files were laid out again");
        // And with the count kept, the next search answers from the list without a walk.
        assert_eq!(hits_of(&index, &access, "alpha"), hits);
        assert_eq!(index.walk_counts(), (3, 0));
        // A file the walk finds changed is laid out anew.
        fs.set_changes(None);
        fs.add_file("/w/a.md", "the alpha protocol, changed\n");
        assert_ne!(hits_of(&index, &access, "alpha"), hits);
        assert!(!Arc::ptr_eq(&first, &kept()));
    }

    /// What the feed cannot vouch for makes the next search walk: an ignore
    /// file, a directory, a link, a lost feed, no count at all.
    #[test]
    fn changes_that_decide_what_a_walk_finds_make_the_search_walk() {
        let dir = tempfile::tempdir().unwrap();
        let fs = Arc::new(MemFs::new(VPath::root()));
        fs.add_file("/w/a.md", "alpha one\n");
        fs.add_file("/w/debug.log", "alpha in a log\n");
        fs.set_changes(Some(1));
        let access = access(fs.clone(), &[("/w", Level::Ro)]);
        let index = index(dir.path());
        assert_eq!(hits_of(&index, &access, "alpha").len(), 2);
        assert_eq!(index.walk_counts(), (1, 0));
        // A new .gitignore hides the log: walked, and the log is gone.
        fs.add_file("/w/.gitignore", "*.log\n");
        fs.note_changed("/w/.gitignore");
        assert_eq!(hits_of(&index, &access, "alpha"), ["/w/a.md:1-1:alpha one"]);
        assert_eq!(index.walk_counts(), (2, 0));
        // Its removal shows the log again (the path is gone, still a walk).
        assert!(fs.remove("/w/.gitignore"));
        fs.note_changed("/w/.gitignore");
        assert_eq!(hits_of(&index, &access, "alpha").len(), 2);
        assert_eq!(index.walk_counts(), (3, 0));
        // A new directory: everything below it is new.
        fs.add_file("/w/sub/e.md", "alpha below\n");
        fs.note_changed("/w/sub");
        assert_eq!(hits_of(&index, &access, "alpha").len(), 3);
        assert_eq!(index.walk_counts(), (4, 0));
        // A link to a file.
        fs.add_link("/w/l.md", "/w/a.md");
        fs.note_changed("/w/l.md");
        assert_eq!(hits_of(&index, &access, "alpha").len(), 4);
        assert_eq!(index.walk_counts(), (5, 0));
        // A walk that met a link is walked again, whatever changed.
        fs.add_file("/w/f.md", "alpha again\n");
        fs.note_changed("/w/f.md");
        assert_eq!(hits_of(&index, &access, "alpha").len(), 5);
        assert_eq!(index.walk_counts(), (6, 0));
        assert!(fs.remove("/w/l.md"));
        fs.note_changed("/w/l.md");
        assert_eq!(hits_of(&index, &access, "alpha").len(), 4);
        assert_eq!(index.walk_counts(), (7, 0));
        // Now without links, a file is looked at alone...
        fs.add_file("/w/f.md", "alpha, changed\n");
        fs.note_changed("/w/f.md");
        assert!(hits_of(&index, &access, "alpha").contains(&"/w/f.md:1-1:alpha, changed".to_string()));
        assert_eq!(index.walk_counts(), (7, 1));
        // ...but not once the feed lost track, or there is no count.
        fs.add_file("/w/g.md", "alpha unnamed\n");
        fs.note_lost();
        assert_eq!(hits_of(&index, &access, "alpha").len(), 5);
        assert_eq!(index.walk_counts(), (8, 1));
        fs.set_changes(None);
        hits_of(&index, &access, "alpha");
        hits_of(&index, &access, "alpha");
        assert_eq!(index.walk_counts(), (10, 1));
    }

    /// A file the session cannot see (a floor, a hidden name, an ignored
    /// path, inside `.git`) changed from outside never changes a result, its
    /// order or how many, whether the feed names it or not.
    #[test]
    fn a_hidden_file_changed_from_outside_never_appears() {
        let (dir, fresh_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let fs = Arc::new(MemFs::new(VPath::root()));
        fs.add_file("/w/a.md", "alpha visible\n");
        fs.add_file("/w/.gitignore", "*.log\n");
        fs.add_file("/w/s/secret.md", "alpha secret\n");
        fs.set_changes(Some(1));
        let access = access(fs.clone(), &[("/w", Level::Ro), ("/w/s", Level::None), ("/w/private.md", Level::None)]);
        let index = index(dir.path());
        let before = hits_of(&index, &access, "alpha");
        assert_eq!(before, ["/w/a.md:1-1:alpha visible"]);
        let hidden = [
            ("/w/s/secret.md", "alpha alpha alpha secret\n"),
            ("/w/s/new.md", "alpha new secret\n"),
            ("/w/private.md", "alpha private\n"),
            ("/w/.env", "alpha=1\n"),
            ("/w/trace.log", "alpha in an ignored log\n"),
        ];
        for (path, text) in hidden {
            fs.add_file(path, text);
            fs.note_changed(path);
            assert_eq!(hits_of(&index, &access, "alpha"), before, "{path}");
        }
        assert_eq!(index.walk_counts(), (1, hidden.len()), "the feed was used each time");
        assert!(index.store().file("/w/s/secret.md").unwrap().is_none(), "nothing hidden is read");
        assert!(fs.remove("/w/s/secret.md"));
        fs.note_changed("/w/s/secret.md");
        assert_eq!(hits_of(&index, &access, "alpha"), before);
        assert_eq!(hits_of(&self::index(fresh_dir.path()), &access, "alpha"), before);
    }

    /// An editor's buffer edit (the LSP door's overlay) is looked at alone too,
    /// and the search sees the unsaved text.
    #[test]
    fn a_buffer_edit_is_picked_up_from_the_feed_without_a_walk() {
        use crate::vfs::overlay::{Documents, Edit, Overlay};
        let dir = tempfile::tempdir().unwrap();
        let mem = Arc::new(MemFs::new(VPath::root()));
        mem.add_file("/w/a.md", "alpha on disk\n");
        mem.add_file("/w/b.md", "beta on disk\n");
        mem.set_changes(Some(1));
        let docs = Documents::new();
        let overlay = Arc::new(Overlay::new(mem.clone(), docs.clone(), std::path::PathBuf::from("/host")));
        let file = crate::access::ViewFile {
            grants: [("/w".to_string(), Level::Ro)].into_iter().collect(),
            floors: Default::default(),
            mounts: Default::default(),
        };
        let access = Access::new(overlay, View::from_file(&file).unwrap(), VPath::root());
        let index = index(dir.path());
        assert_eq!(hits_of(&index, &access, "alpha"), ["/w/a.md:1-1:alpha on disk"]);
        docs.open("/host/w/b.md".into(), "file:///host/w/b.md".into(), 1, "beta on disk\n");
        docs.change(Path::new("/host/w/b.md"), 2, vec![Edit { range: None, text: "alpha typed\n".into() }]).unwrap();
        assert_eq!(hits_of(&index, &access, "alpha").len(), 2);
        assert!(hits_of(&index, &access, "alpha").contains(&"/w/b.md:1-1:alpha typed".to_string()));
        assert_eq!(index.walk_counts(), (1, 1));
    }
}
