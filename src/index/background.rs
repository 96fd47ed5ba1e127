//! The background indexer: the search index of an engine, opened when first
//! needed, and a thread that takes in the files changes write, off the
//! call's path, in batches. Not the index itself (`hybrid.rs`) and not when a
//! search waits (the engine calls `settle` for tools that need the index).

use super::hybrid::{Index, TokenChunker};
use super::EmbedderChoice;
use crate::paths::VPath;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

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
        }
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
