//! ctxfs: a confined, context-aware file system for AI coding agents.
//!
//! Layers depend one way only: `paths` ← `vfs` ← `access` ← {`tools`,
//! `hygiene`} ← `engine` ← {`mcp`, `cli`}. See ARCHITECTURE.md.

pub mod paths;
pub mod vfs;
