//! An in-memory `Fs` for tests (placeholder; being written).
