//! Where a session's results are kept in full.
//!
//! `ResultStore` is the seam: the in-memory store serves tests and one-shot
//! calls; a durable store keeps results across restarts. Neither decides
//! what the model sees.

use std::collections::HashMap;

/// Keeps every result's full text by id.
pub trait ResultStore: Send {
    fn put(&mut self, id: u64, tool: &str, text: &str) -> anyhow::Result<()>;
    fn get(&self, id: u64) -> anyhow::Result<Option<String>>;
    /// The highest id stored, so a reopened session goes on from there.
    fn last_id(&self) -> Option<u64>;
}

/// Results in memory, for tests and one-shot calls.
#[derive(Default)]
pub struct MemoryStore {
    results: HashMap<u64, String>,
}

impl ResultStore for MemoryStore {
    fn put(&mut self, id: u64, _tool: &str, text: &str) -> anyhow::Result<()> {
        self.results.insert(id, text.to_string());
        Ok(())
    }

    fn get(&self, id: u64) -> anyhow::Result<Option<String>> {
        Ok(self.results.get(&id).cloned())
    }

    fn last_id(&self) -> Option<u64> {
        self.results.keys().max().copied()
    }
}
