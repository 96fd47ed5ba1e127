//! A race-safe recursive walk over directory file descriptors (placeholder; being written).

use super::{FsError, Visitor, WalkOptions};
use crate::paths::VPath;
use std::os::fd::OwnedFd;

/// Walks below the open directory `dir`, whose virtual path is `path`.
pub fn walk_fd(_dir: OwnedFd, _path: VPath, _options: &WalkOptions, _visit: &Visitor<'_>) -> Result<(), FsError> {
    Err(FsError::Io(std::io::Error::other("walk is not written yet")))
}
