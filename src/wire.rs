//! The JSON shapes more than one front door sends (MCP's `_meta`, the LSP
//! door's results, `ctxfs replay`'s lines): the facts of a result, built from
//! the engine's plain `Facts`. Not a protocol: no JSON-RPC, MCP or LSP types.

use crate::engine::Facts;
use schemars::JsonSchema;
use serde::Serialize;

/// Structured facts about a result.
#[derive(Debug, Clone, Default, Serialize, JsonSchema)]
pub struct CallFacts {
    /// The resolved absolute path the result is about.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The file's SHA-256 (hex) after the call, for reads and changes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha: Option<String>,
    /// The unified diff of a change, uncapped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
    /// Present (true) when the call created the file.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub created: bool,
    /// Present (true) when the call deleted the file.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub deleted: bool,
    /// Every file a multi-file change touched, in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<CallFacts>,
}

impl From<Facts> for CallFacts {
    fn from(f: Facts) -> CallFacts {
        // Every field named, so a new one in `Facts` cannot be left behind.
        let Facts { path, sha, diff, created, deleted, files } = f;
        CallFacts { path, sha, diff, created, deleted, files: files.into_iter().map(CallFacts::from).collect() }
    }
}
