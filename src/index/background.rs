//! The background indexer: the search index of an engine, opened when first
//! needed, a thread that takes in the files changes write, off the call's
//! path, in batches, and a thread that readies the index between calls: it
//! goes on indexing what a search had no time for, walks for the next search
//! once the file system can count changes (at a session's start, or after a
//! search that walked before it could), and then follows the searched root's
//! changes from outside. Not the index itself
//! (`hybrid.rs`) and not when a search waits (the engine calls `settle` for
//! tools that need the index).

use super::hybrid::{Index, TokenChunker};
use super::EmbedderChoice;
use crate::access::{Access, Target};
use crate::paths::VPath;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// How long readying a list for the next search waits for the file system
/// to count changes (a watcher starting on a large tree) before it walks anyway.
const COUNT_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// What indexing in the background is asked to do for a root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readying {
    /// Take in the new and changed files a search had no time for.
    Unindexed,
    /// Walk once the file system can count changes, and make what searches
    /// need: at a session's start (indexing what changed since the last
    /// process), or after a search that walked before changes could be
    /// counted (so the next search would walk again).
    Uncounted,
    /// Take in what changed from outside since the last round (the file
    /// system's count moved), so that the next search finds its list up to
    /// date and ready: what the thread does when nothing else is asked.
    Changed,
}

/// The search index, opened when first needed (it loads the embedder).
pub(crate) struct IndexSlot {
    path: PathBuf,
    data_dir: PathBuf,
    cell: std::sync::OnceLock<Option<Arc<Index>>>,
    /// Written files waiting to be indexed off the call's path.
    queue: Mutex<Option<std::sync::mpsc::Sender<WrittenFile>>>,
    /// How many queued files are not indexed yet, to wait for before a search.
    pending: Arc<(Mutex<usize>, std::sync::Condvar)>,
    /// The embedder the index loads when it is opened.
    embedder: EmbedderChoice,
    /// What the readying thread is asked to do next, and whether it runs.
    later: Arc<Mutex<Later>>,
}

/// The readying asked for: the latest view, root and task, and whether the
/// thread runs (it ends when the engine goes away or it has nothing to follow).
#[derive(Default)]
struct Later {
    next: Option<(Access, Target, Readying)>,
    running: bool,
}

/// A file a change wrote, for the indexer.
pub(crate) struct WrittenFile {
    pub(crate) real: VPath,
    pub(crate) bytes: Vec<u8>,
    pub(crate) created_by: Option<String>,
}

impl IndexSlot {
    pub(crate) fn new(data_dir: &Path, path: PathBuf, embedder: EmbedderChoice) -> IndexSlot {
        IndexSlot {
            path,
            data_dir: data_dir.to_path_buf(),
            cell: std::sync::OnceLock::new(),
            queue: Mutex::new(None),
            pending: Default::default(),
            embedder,
            later: Default::default(),
        }
    }

    /// A slot holding an index opened already (tests choose its embedder).
    #[cfg(test)]
    pub(crate) fn opened(data_dir: &Path, index: Index) -> Arc<IndexSlot> {
        let slot = IndexSlot::new(data_dir, data_dir.join("index.db"), EmbedderChoice::None);
        assert!(slot.cell.set(Some(Arc::new(index))).is_ok(), "a new slot is empty");
        Arc::new(slot)
    }

    /// The index if it is open already; never opens it (memory search ranks by meaning only
    /// with an embedder a search has loaded, and never waits for one to load).
    pub(crate) fn loaded(&self) -> Option<&Index> {
        self.cell.get().and_then(|slot| slot.as_deref())
    }

    /// Indexes a written file in the background (the call does not wait for
    /// it; the first one also opens the index and loads the embedder there).
    pub(crate) fn enqueue(self: &Arc<Self>, file: WrittenFile) {
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        if queue.is_none() {
            let (sender, receiver) = std::sync::mpsc::channel::<WrittenFile>();
            let slot = self.clone();
            let spawned = std::thread::Builder::new().name("ctxfs-indexer".into()).spawn(move || {
                // Files queued while one is being indexed are indexed together, in one commit.
                while let Ok(first) = receiver.recv() {
                    let mut batch = vec![first];
                    batch.extend(receiver.try_iter().take(63));
                    if let Some(index) = slot.get() {
                        let files: Vec<_> =
                            batch.iter().map(|f| (&f.real, f.bytes.as_slice(), f.created_by.as_deref())).collect();
                        if let Err(e) = index.note_written_all(&files) {
                            tracing::warn!(error = %e, files = batch.len(), "could not index written files");
                        }
                    }
                    let (count, done) = &*slot.pending;
                    *count.lock().unwrap_or_else(|e| e.into_inner()) -= batch.len();
                    done.notify_all();
                }
            });
            if spawned.is_err() {
                tracing::warn!("could not start the indexer; written files are indexed at the next search");
                return;
            }
            *queue = Some(sender);
        }
        if let Some(sender) = queue.as_ref() {
            *self.pending.0.lock().unwrap_or_else(|e| e.into_inner()) += 1;
            if sender.send(file).is_err() {
                *self.pending.0.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
            }
        }
    }

    /// Whether an earlier process left an index (a session's start readies it).
    pub(crate) fn exists(&self) -> bool {
        self.path.exists()
    }

    /// Readies the index in the background for the searches of the session
    /// with `access` under `root` (`Readying`): round after round on a thread
    /// of its own, each giving way to any search, write or tag that wants the
    /// index (`Index::index_in_background`), until nothing is left; then it
    /// follows that root's changes (`Readying::Changed`) until asked again.
    /// The first call opens the index there. A later call replaces a task not
    /// started yet; the thread ends when the engine goes away, or when the
    /// file system cannot count changes.
    pub(crate) fn go_on(self: &Arc<Self>, access: Access, root: Target, readying: Readying) {
        let mut later = lock(&self.later);
        later.next = Some((access, root, readying));
        // The searches after one that left files answer at once from what is indexed, even while
        // the thread is still in a round of another task (a session's start): it takes this task
        // as soon as that round gives way to them.
        if readying == Readying::Unindexed {
            if let Some(index) = self.loaded() {
                index.set_in_background(true);
            }
        }
        if later.running {
            return;
        }
        let shared = self.later.clone();
        let slot = Arc::downgrade(self);
        let spawned = std::thread::Builder::new().name("ctxfs-index-later".into()).spawn(move || {
            match slot.upgrade().and_then(|slot| slot.get().cloned()) {
                Some(index) => ready_in_background(&index, &shared),
                None => lock(&shared).running = false,
            }
        });
        match spawned {
            Ok(_) => later.running = true,
            Err(e) => tracing::warn!(error = %e, "could not start indexing in the background"),
        }
    }

    /// Waits until every queued file is indexed (before a search or a tag).
    pub(crate) fn settle(&self) {
        let (count, done) = &*self.pending;
        let mut count = count.lock().unwrap_or_else(|e| e.into_inner());
        while *count > 0 {
            count = done.wait(count).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// The index, or `None` when it cannot be opened (search then ranks by words on the fly).
    pub(crate) fn get(&self) -> Option<&Arc<Index>> {
        self.cell
            .get_or_init(|| {
                self.open_now()
                    .map(Arc::new)
                    .inspect_err(|e| {
                        tracing::error!(error = %e, "cannot open the search index; search ranks by words only");
                    })
                    .ok()
            })
            .as_ref()
    }

    /// The embedder the index loads.
    pub(crate) fn embedder(&self) -> &EmbedderChoice {
        &self.embedder
    }

    /// Opens the index with the chosen embedder, now (`ctxfs index`), or says why it cannot.
    pub(crate) fn open_now(&self) -> anyhow::Result<Index> {
        let (vectorizer, tokenizer) = super::models(&self.embedder, &self.data_dir);
        Index::open(&self.path, vectorizer, Arc::new(TokenChunker::new(tokenizer)))
    }
}

impl Drop for IndexSlot {
    /// Stops the indexing in the background of an engine that goes away.
    fn drop(&mut self) {
        if let Some(Some(index)) = self.cell.get() {
            index.close();
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// The thread that readies the index: takes each task asked for (the
/// latest replaces one not started), runs its rounds until nothing is left
/// or a search asks for another root, then follows the last root's changes.
fn ready_in_background(index: &Index, shared: &Mutex<Later>) {
    let (mut rounds, mut files) = (0usize, 0usize);
    let mut last: Option<(Access, Target, Option<u64>)> = None;
    loop {
        let asked = {
            let mut later = lock(shared);
            let next = later.next.take();
            // Searches leave files to this thread only while it takes in what a search had
            // no time for; otherwise a search takes in a change itself, as it always does.
            index.set_in_background(matches!(next, Some((_, _, Readying::Unindexed))));
            next
        };
        let (access, root, readying) = match asked {
            Some(task) => task,
            None => match idle(index, shared, &last) {
                Idle::Changed => match last.take() {
                    Some((access, root, _)) => (access, root, Readying::Changed),
                    None => continue,
                },
                // Asked while it followed: the task is taken at the top.
                Idle::Asked => continue,
                Idle::Done => {
                    let mut later = lock(shared);
                    if later.next.is_some() && !index.is_closing() {
                        continue;
                    }
                    return stop(index, &mut later);
                }
            },
        };
        // A task asked while the thread waits comes first (a search that left files must not
        // wait for a watcher that is still starting).
        if readying == Readying::Uncounted && !wait_for_count(index, shared, &access, &root) {
            continue;
        }
        // The count the round brings the list up to date with: a change during the round moves
        // it again, and the thread then follows with another round.
        let count = access.fs().changes(&root.real);
        let finished = loop {
            rounds += 1;
            match index.index_in_background(&access, &root) {
                Ok(Some(done)) => {
                    files += done.indexed;
                    if done.pending == 0 {
                        break true;
                    }
                    // It gave way to a search that may have asked for another root: that one comes first.
                    if lock(shared).next.is_some() {
                        break false;
                    }
                }
                Ok(None) => break false,
                Err(e) => {
                    tracing::warn!(error = %e, root = %root.path, "indexing in the background stopped");
                    break false;
                }
            }
        };
        // A root queued while its indexing was finishing finds nothing left: not worth a line.
        if finished && files > 0 {
            let why =
                if readying == Readying::Changed { "outside changes indexed" } else { "indexed in the background" };
            tracing::info!(root = %root.path, files, rounds, "{why}");
        }
        if finished {
            (rounds, files) = (0, 0);
        }
        if index.is_closing() {
            return stop(index, &mut lock(shared));
        }
        last = Some((access, root, count));
    }
}

/// The thread ends (under the lock of what is asked, so that a task asked
/// after this starts a new thread): searches take in changes themselves again.
fn stop(index: &Index, later: &mut Later) {
    later.running = false;
    index.set_in_background(false);
}

/// Whether the thread should leave what it waits for: a task was asked, or the index closes.
fn interrupted(index: &Index, shared: &Mutex<Later>) -> bool {
    index.is_closing() || lock(shared).next.is_some()
}

/// How often a waiting thread looks again: whether the followed root
/// changed, or whether the file system can count changes yet.
const LOOK_EVERY: std::time::Duration = std::time::Duration::from_millis(100);
/// How long it lets a burst of saves settle before a round takes them in.
const SETTLE: std::time::Duration = std::time::Duration::from_millis(100);

/// What the thread found with nothing asked of it.
enum Idle {
    /// The followed root changed.
    Changed,
    /// A task was asked for.
    Asked,
    /// Nothing to follow (no root yet, or no count of changes), or the index closes.
    Done,
}

/// With nothing asked, follows the last root (and the count of changes its
/// list is up to date with) until it changes or a task is asked.
fn idle(index: &Index, shared: &Mutex<Later>, last: &Option<(Access, Target, Option<u64>)>) -> Idle {
    match last {
        Some((access, root, Some(count))) if !index.is_closing() => {
            if follow(index, shared, access, root, *count) {
                Idle::Changed
            } else if index.is_closing() {
                Idle::Done
            } else {
                Idle::Asked
            }
        }
        _ => Idle::Done,
    }
}

/// Waits until the file system's count of changes under `root` moves from
/// `count` (true), or a task is asked or the index closes (false).
fn follow(index: &Index, shared: &Mutex<Later>, access: &Access, root: &Target, count: u64) -> bool {
    loop {
        if interrupted(index, shared) {
            return false;
        }
        match access.fs().changes(&root.real) {
            Some(now) if now == count => std::thread::sleep(LOOK_EVERY),
            // Moved, or the count is lost for now (a rebuild of the watches): a round finds out what changed.
            _ => {
                std::thread::sleep(SETTLE);
                return true;
            }
        }
    }
}

/// Waits (at most `COUNT_WAIT`) until the file system can count changes
/// under `root`, so that the walk that follows is kept for the next search.
/// False when another task was asked meanwhile (it comes first; a search
/// that walks before changes can be counted asks for this again) or the
/// index closes.
fn wait_for_count(index: &Index, shared: &Mutex<Later>, access: &Access, root: &Target) -> bool {
    let waited = std::time::Instant::now();
    while access.fs().changes(&root.real).is_none() && waited.elapsed() < COUNT_WAIT {
        if interrupted(index, shared) {
            return false;
        }
        std::thread::sleep(LOOK_EVERY);
    }
    true
}
