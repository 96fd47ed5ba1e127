//! Link resolution inside a boundary, shared by every `Fs`.
//!
//! This is the one place that decides whether a link may be followed. It walks
//! a path one name at a time from the boundary's own directory, asking the
//! backend for each child without following it, and follows a link by hand:
//! a relative target continues from the link's directory, an absolute one is
//! mapped into the boundary or refused, and `..` above the boundary is
//! refused. It never builds a host path and never opens anything itself.

use super::{FsError, Kind, Meta, Resolution};
use crate::paths::VPath;
use std::collections::VecDeque;

/// The most links one resolution follows before it answers `Loop` (Linux's own limit).
const MAX_LINKS: usize = 40;

/// One child of a directory, looked at without following it.
pub enum Child<D> {
    Dir(D),
    /// A file or a special node, with its metadata.
    Node(Meta),
    Link(String),
    Missing,
}

/// What a backend offers the resolver: directories as handles, children
/// looked up without following links.
pub trait Lookup {
    type Dir;
    fn boundary_dir(&self) -> Result<Self::Dir, FsError>;
    fn child(&self, dir: &Self::Dir, name: &str) -> Result<Child<Self::Dir>, FsError>;
    fn dir_meta(&self, dir: &Self::Dir) -> Result<Meta, FsError>;
    /// Maps an absolute link target to names below the boundary, or `None`
    /// when it points outside it.
    fn map_absolute(&self, target: &str) -> Option<Vec<String>>;
}

fn split(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split('/').filter(|c| !c.is_empty() && *c != ".").map(str::to_string)
}

fn real_path(boundary: &VPath, names: &[String]) -> VPath {
    let mut out = boundary.clone();
    for name in names {
        out = out.join(name);
    }
    out
}

/// Resolves `path` (which must lie inside `boundary`) with `backend`.
pub fn resolve_with<L: Lookup>(backend: &L, boundary: &VPath, path: &VPath) -> Result<Resolution, FsError> {
    let rel = path.strip_prefix(boundary).ok_or(FsError::Escapes)?;
    let mut pending: VecDeque<String> = split(rel).collect();
    let mut names: Vec<String> = Vec::new();
    let mut dirs: Vec<L::Dir> = vec![backend.boundary_dir()?];
    let mut links = 0usize;

    while let Some(name) = pending.pop_front() {
        if name == ".." {
            if names.pop().is_none() {
                return Err(FsError::Escapes);
            }
            dirs.pop();
            continue;
        }
        let here = dirs.last().expect("the boundary directory is never popped");
        match backend.child(here, &name)? {
            Child::Dir(dir) => {
                names.push(name);
                dirs.push(dir);
            }
            Child::Node(meta) => {
                names.push(name);
                if pending.is_empty() {
                    return Ok(Resolution::Found { real: real_path(boundary, &names), meta });
                }
                return Err(FsError::NotADir);
            }
            Child::Link(target) => {
                links += 1;
                if links > MAX_LINKS {
                    return Err(FsError::Loop);
                }
                let mut next: VecDeque<String> = if target.starts_with('/') {
                    let mapped = backend.map_absolute(&target).ok_or(FsError::Escapes)?;
                    names.clear();
                    dirs.truncate(1);
                    mapped.into_iter().collect()
                } else {
                    split(&target).collect()
                };
                next.extend(pending.drain(..));
                pending = next;
            }
            Child::Missing => {
                names.push(name);
                let parent_exists = pending.is_empty();
                // The rest can only be placed by its text: nothing exists there.
                for rest in pending.drain(..) {
                    if rest == ".." {
                        if names.pop().is_none() {
                            return Err(FsError::Escapes);
                        }
                    } else {
                        names.push(rest);
                    }
                }
                return Ok(Resolution::Missing { real: real_path(boundary, &names), parent_exists });
            }
        }
    }
    let meta = backend.dir_meta(dirs.last().expect("never empty"))?;
    debug_assert_eq!(meta.kind, Kind::Dir);
    Ok(Resolution::Found { real: real_path(boundary, &names), meta })
}
