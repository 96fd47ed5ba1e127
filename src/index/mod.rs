//! The search index: token chunks, embeddings, full text, fused ranks.
//!
//! Keyed by content hash and stored under `--data`. It ranks only what the
//! session's view shows, computing its word statistics over that alone, so
//! hidden files change neither results nor order. It never decides access
//! itself: every path goes through `access`.

pub mod chunk;
pub mod embed;
pub mod hybrid;
pub mod store;

use std::path::Path;
use std::sync::Arc;

/// The default models: the embedded static embedder when its table is
/// installed (with its own tokenizer for chunking), else words only with the
/// bytes/2 stand-in for counting tokens. Says so once when it falls back.
pub fn default_models(data_dir: &Path) -> (Option<Arc<dyn hybrid::Vectorizer>>, Arc<dyn chunk::Tokenizer>) {
    // `default_static` says once that it fell back when no table is installed.
    match embed::default_static(data_dir) {
        Some(embedder) => {
            let tokenizer = embedder.tokenizer();
            (Some(embedder as Arc<dyn hybrid::Vectorizer>), tokenizer)
        }
        None => (None, Arc::new(chunk::HalfBytes)),
    }
}
