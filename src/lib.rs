//! ctxfs: a confined, context-aware file system for AI coding agents.
//!
//! Layers depend one way only: `paths`, `text`, `hash` ← `vfs` ← `access` ← {`tools`,
//! `hygiene`, `instructions`, `index`, `gate`, `memory`} ← `engine` ← {`lsp`, `mcp`,
//! `cli`}. See ARCHITECTURE.md.

pub mod access;
pub mod acp;
pub mod cli;
pub mod engine;
pub mod gate;
pub mod hash;
pub mod hygiene;
pub mod index;
pub mod instructions;
pub mod lsp;
pub mod mcp;
pub mod memory;
pub mod paths;
pub mod sqlite;
pub mod text;
pub mod tools;
pub mod vfs;
pub mod wire;
