//! Absolute, text-resolved paths of the session's world (`VPath`).
//!
//! This module only parses and normalises path *text*: it never touches a
//! file system, follows a link or consults a view. A `VPath` is the proof that
//! `.`/`..`/repeated `/` were resolved, that the path is absolute, and that no
//! component is empty or holds a NUL byte.

pub mod uri;

use std::fmt;

/// Why a path text could not be turned into a `VPath`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathError {
    /// The text held a NUL byte, which no file system name may contain.
    Nul,
    /// The text was empty.
    Empty,
}

impl fmt::Display for PathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathError::Nul => f.write_str("Invalid path: a path may not contain a NUL byte."),
            PathError::Empty => f.write_str("Invalid path: the path is empty."),
        }
    }
}

/// An absolute path whose text has been resolved: it starts with `/`, has no
/// `.`, `..` or empty components, and no trailing `/` (except `/` itself).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VPath(String);

impl VPath {
    /// The root, `/`.
    pub fn root() -> VPath {
        VPath("/".to_string())
    }

    /// Resolves `text` against `start` (used when `text` is relative).
    /// `..` above `/` stays at `/`.
    pub fn resolve(start: &VPath, text: &str) -> Result<VPath, PathError> {
        if text.contains('\0') {
            return Err(PathError::Nul);
        }
        if text.is_empty() {
            return Err(PathError::Empty);
        }
        let mut parts: Vec<&str> = if text.starts_with('/') { Vec::new() } else { start.components().collect() };
        for part in text.split('/') {
            match part {
                "" | "." => {}
                ".." => {
                    parts.pop();
                }
                name => parts.push(name),
            }
        }
        Ok(VPath::from_components(parts))
    }

    /// Parses an absolute path text (relative texts resolve against `/`).
    pub fn parse(text: &str) -> Result<VPath, PathError> {
        VPath::resolve(&VPath::root(), text)
    }

    fn from_components<'a>(parts: impl IntoIterator<Item = &'a str>) -> VPath {
        let mut s = String::new();
        for part in parts {
            s.push('/');
            s.push_str(part);
        }
        if s.is_empty() {
            s.push('/');
        }
        VPath(s)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn is_root(&self) -> bool {
        self.0 == "/"
    }

    /// The names from the root down; empty for `/`.
    pub fn components(&self) -> impl DoubleEndedIterator<Item = &str> + Clone {
        self.0.split('/').filter(|c| !c.is_empty())
    }

    /// The last name, or `None` for `/`.
    pub fn name(&self) -> Option<&str> {
        if self.is_root() {
            None
        } else {
            self.0.rsplit('/').next()
        }
    }

    /// The containing directory, or `None` for `/`.
    pub fn parent(&self) -> Option<VPath> {
        if self.is_root() {
            return None;
        }
        let cut = self.0.rfind('/').unwrap_or(0);
        Some(if cut == 0 { VPath::root() } else { VPath(self.0[..cut].to_string()) })
    }

    /// `self` followed by one name. The name must not contain `/`.
    pub fn join(&self, name: &str) -> VPath {
        debug_assert!(!name.contains('/') && !name.is_empty());
        let base = if self.is_root() { "" } else { self.0.as_str() };
        let mut out = String::with_capacity(base.len() + 1 + name.len());
        out.push_str(base);
        out.push('/');
        out.push_str(name);
        VPath(out)
    }

    /// `self` followed by a relative `/`-separated tail of clean names.
    pub fn join_rel(&self, rel: &str) -> VPath {
        let base = if self.is_root() { "" } else { self.0.as_str() };
        let mut out = String::with_capacity(base.len() + 1 + rel.len());
        out.push_str(base);
        for part in rel.split('/').filter(|p| !p.is_empty()) {
            out.push('/');
            out.push_str(part);
        }
        if out.is_empty() {
            out.push('/');
        }
        VPath(out)
    }

    /// True when `self` is `other` or lies below it (component-wise, so
    /// `/ws_evil` is not below `/ws`).
    pub fn starts_with(&self, other: &VPath) -> bool {
        if other.is_root() {
            return true;
        }
        self.0 == other.0 || (self.0.starts_with(&other.0) && self.0.as_bytes().get(other.0.len()) == Some(&b'/'))
    }

    /// The part of `self` below `base`, without a leading `/`; `""` when equal.
    pub fn strip_prefix(&self, base: &VPath) -> Option<&str> {
        if !self.starts_with(base) {
            return None;
        }
        if base.is_root() {
            return Some(&self.0[1..]);
        }
        Some(self.0[base.0.len()..].trim_start_matches('/'))
    }

    /// Every ancestor from the root down to the parent of `self`.
    pub fn ancestors(&self) -> Vec<VPath> {
        let mut out = Vec::new();
        let mut cur = self.parent();
        while let Some(p) = cur {
            cur = p.parent();
            out.push(p);
        }
        out.reverse();
        out
    }
}

impl fmt::Display for VPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for VPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(start: &str, text: &str) -> String {
        VPath::resolve(&VPath::parse(start).unwrap(), text).unwrap().to_string()
    }

    #[test]
    fn resolves_text() {
        assert_eq!(r("/", "a//b/./c/"), "/a/b/c");
        assert_eq!(r("/ws", "../../.."), "/");
        assert_eq!(r("/ws/src", "../lib/x.rs"), "/ws/lib/x.rs");
        assert_eq!(r("/ws", "missing/../../etc"), "/etc");
        assert_eq!(r("/ws", "/"), "/");
        assert_eq!(r("/ws", "."), "/ws");
        assert_eq!(r("/ws", "~/x"), "/ws/~/x");
    }

    #[test]
    fn refuses_nul_and_empty() {
        assert_eq!(VPath::parse("/a\0b"), Err(PathError::Nul));
        assert_eq!(VPath::parse(""), Err(PathError::Empty));
    }

    #[test]
    fn prefix_is_by_component() {
        let ws = VPath::parse("/ws").unwrap();
        assert!(!VPath::parse("/ws_evil").unwrap().starts_with(&ws));
        assert!(VPath::parse("/ws/a").unwrap().starts_with(&ws));
        assert_eq!(VPath::parse("/ws/a/b").unwrap().strip_prefix(&ws), Some("a/b"));
        assert_eq!(ws.parent().unwrap(), VPath::root());
        assert_eq!(ws.ancestors(), vec![VPath::root()]);
    }
}
