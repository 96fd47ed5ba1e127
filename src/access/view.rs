//! The view: grants and floors, the level each path is at, and the
//! repositories mounted in the tree.
//!
//! Pure data and arithmetic over `VPath`s. It never looks at a file system:
//! whether a path exists is `vfs`'s business (a mount's files too), and
//! turning a decision into an error text is `access`'s.

use crate::paths::VPath;
use crate::vfs::git::MountSpec;
use schemars::JsonSchema;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;

/// An access level, ordered from no access to commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, serde::Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    None,
    Ro,
    Stage,
    Commit,
}

impl Level {
    pub fn can_read(self) -> bool {
        self >= Level::Ro
    }

    pub fn can_change(self) -> bool {
        self >= Level::Stage
    }

    pub fn name(self) -> &'static str {
        match self {
            Level::None => "none",
            Level::Ro => "ro",
            Level::Stage => "stage",
            Level::Commit => "commit",
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What the model may know of a path, by the view alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Visibility {
    /// At ro or above: it exists for the model (if it exists at all).
    Visible(Level),
    /// At none, with something visible below it.
    Passage,
    /// At none, with nothing visible below it.
    Hidden,
}

/// A view file (`ctxfs mcp --tree DIR --view FILE`): what a session may see
/// and change in the tree, path by path, and the git repositories mounted in
/// it. Every key is an absolute path of the tree.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "ctxfs view file")]
pub struct ViewFile {
    /// A level for a path and everything below it; the most specific grant wins.
    #[serde(default)]
    pub grants: BTreeMap<String, Level>,
    /// The highest level a path and everything below it may have, whatever is granted.
    #[serde(default)]
    pub floors: BTreeMap<String, Level>,
    /// Git repositories mounted at directories of the tree, each at one
    /// branch. Below a mount point every file is the branch's, plus what the
    /// session staged in its own working copy; `commit` there lets it commit.
    #[serde(default)]
    pub mounts: BTreeMap<String, MountEntry>,
}

/// One mounted repository.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MountEntry {
    /// The repository's directory on the host (bare or not); a relative
    /// path is taken from the view file's directory.
    pub repo: String,
    /// The branch shown and committed to.
    pub branch: String,
}

/// Grants, floors and mounts of one session.
#[derive(Debug, Clone, Default)]
pub struct View {
    grants: BTreeMap<VPath, Level>,
    floors: BTreeMap<VPath, Level>,
    /// When set, nothing outside these paths is visible (a client's roots).
    roots: Option<Vec<VPath>>,
    mounts: BTreeMap<VPath, MountSpec>,
}

impl View {
    /// A view from a parsed view file; a path that does not parse is an
    /// error naming it. Relative repository paths are taken from `dir`.
    pub fn from_file_in(file: &ViewFile, dir: &std::path::Path) -> Result<View, String> {
        let mut view = View::from_file(file)?;
        for (path, entry) in &file.mounts {
            let point = View::absolute(path)?;
            if point.is_root() {
                return Err(format!("mount {path:?}: the root itself cannot be a mount"));
            }
            if entry.branch.trim().is_empty() {
                return Err(format!("mount {path:?}: the branch is empty"));
            }
            if let Some(other) = view.mounts.keys().find(|m| m.starts_with(&point) || point.starts_with(m)) {
                return Err(format!("mount {path:?}: it overlaps the mount {other}"));
            }
            let repo = dir.join(&entry.repo);
            view.mounts.insert(point, MountSpec { repo, branch: entry.branch.clone() });
        }
        Ok(view)
    }

    fn absolute(path: &str) -> Result<VPath, String> {
        if !path.starts_with('/') {
            return Err(format!("view path {path:?} must be absolute"));
        }
        VPath::parse(path).map_err(|e| format!("view path {path:?}: {e}"))
    }

    /// A view from a parsed view file without mounts; a path that does not parse is an error naming it.
    pub fn from_file(file: &ViewFile) -> Result<View, String> {
        let parse = |map: &BTreeMap<String, Level>| -> Result<BTreeMap<VPath, Level>, String> {
            map.iter()
                .map(|(path, level)| {
                    if !path.starts_with('/') {
                        return Err(format!("view path {path:?} must be absolute"));
                    }
                    VPath::parse(path).map(|p| (p, *level)).map_err(|e| format!("view path {path:?}: {e}"))
                })
                .collect()
        };
        Ok(View { grants: parse(&file.grants)?, floors: parse(&file.floors)?, roots: None, mounts: BTreeMap::new() })
    }

    /// One grant over a whole boundary (a device's posture).
    pub fn single(root: VPath, level: Level) -> View {
        View { grants: BTreeMap::from([(root, level)]), floors: BTreeMap::new(), roots: None, mounts: BTreeMap::new() }
    }

    /// The repositories mounted in the tree, by mount point.
    pub fn mounts(&self) -> &BTreeMap<VPath, MountSpec> {
        &self.mounts
    }

    /// Narrows the view to the given paths: nothing outside them stays
    /// visible and nothing is added. Narrowing twice keeps the intersection.
    pub fn restrict_to(&mut self, roots: Vec<VPath>) {
        let roots = match self.roots.take() {
            None => roots,
            Some(old) => roots
                .iter()
                .flat_map(|r| {
                    old.iter().filter_map(move |o| {
                        if r.starts_with(o) {
                            Some(r.clone())
                        } else if o.starts_with(r) {
                            Some(o.clone())
                        } else {
                            None
                        }
                    })
                })
                .collect(),
        };
        self.roots = Some(roots);
    }

    /// Hides `path` and everything below it from the session (a floor at
    /// none): it reads as missing. The data directory inside a boundary.
    pub fn hide(&mut self, path: VPath) {
        self.floors.insert(path, Level::None);
    }

    fn inside_roots(&self, path: &VPath) -> bool {
        self.roots.as_ref().is_none_or(|roots| roots.iter().any(|r| path.starts_with(r)))
    }

    pub fn grants(&self) -> &BTreeMap<VPath, Level> {
        &self.grants
    }

    /// The most specific entry of `map` at or above `path`.
    fn most_specific(map: &BTreeMap<VPath, Level>, path: &VPath) -> Option<Level> {
        if let Some(level) = map.get(path) {
            return Some(*level);
        }
        path.ancestors().iter().rev().find_map(|a| map.get(a).copied())
    }

    /// The level of `path`: its most specific grant, lowered to its most
    /// specific floor; none without a grant.
    pub fn level(&self, path: &VPath) -> Level {
        if !self.inside_roots(path) {
            return Level::None;
        }
        let granted = View::most_specific(&self.grants, path).unwrap_or(Level::None);
        match View::most_specific(&self.floors, path) {
            Some(floor) => granted.min(floor),
            None => granted,
        }
    }

    /// True when something strictly below `path` is visible.
    pub fn has_visible_below(&self, path: &VPath) -> bool {
        // Views hold a handful of entries; a scan is simpler than ordered ranges,
        // which string order makes wrong (`/a-b` sorts between `/a` and `/a/b`).
        let below = |g: &VPath| g != path && g.starts_with(path) && self.level(g).can_read();
        self.grants.keys().any(below) || self.roots.iter().flatten().any(below)
    }

    pub fn visibility(&self, path: &VPath) -> Visibility {
        let level = self.level(path);
        if level.can_read() {
            Visibility::Visible(level)
        } else if self.has_visible_below(path) {
            Visibility::Passage
        } else {
            Visibility::Hidden
        }
    }

    /// Whether no grant or floor lies strictly below `path`, so that every
    /// path below it is at `level(path)`. Walks use this to skip per-entry checks.
    pub fn is_uniform_below(&self, path: &VPath) -> bool {
        let below = |g: &VPath| g != path && g.starts_with(path);
        !self.grants.keys().any(below) && !self.floors.keys().any(below) && !self.roots.iter().flatten().any(below)
    }

    /// The granted paths the model may use, with their levels, for telling it.
    pub fn describe(&self) -> Vec<(VPath, Level)> {
        let mut keys: Vec<&VPath> =
            self.grants.keys().chain(self.floors.keys()).chain(self.roots.iter().flatten()).collect();
        keys.sort();
        keys.dedup();
        keys.into_iter().map(|p| (p.clone(), self.level(p))).filter(|(_, l)| l.can_read()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> VPath {
        VPath::parse(s).unwrap()
    }

    fn view(grants: &[(&str, Level)], floors: &[(&str, Level)]) -> View {
        View {
            grants: grants.iter().map(|(k, v)| (p(k), *v)).collect(),
            floors: floors.iter().map(|(k, v)| (p(k), *v)).collect(),
            roots: None,
            mounts: BTreeMap::new(),
        }
    }

    #[test]
    fn most_specific_grant_wins_and_floors_lower() {
        let v = view(
            &[("/", Level::Ro), ("/Notes", Level::Stage), ("/Notes/Private", Level::None)],
            &[("/Notes/Locked", Level::Ro)],
        );
        assert_eq!(v.level(&p("/Notes/a.md")), Level::Stage);
        assert_eq!(v.level(&p("/b.md")), Level::Ro);
        assert_eq!(v.level(&p("/Notes/Private/x")), Level::None);
        assert_eq!(v.level(&p("/Notes/Locked/x")), Level::Ro);
        assert_eq!(v.visibility(&p("/Notes/Private")), Visibility::Hidden);
    }

    #[test]
    fn passages_of_the_spec_example() {
        let v = view(&[("/AGENTS.md", Level::Ro), ("/Dir1/Dir3", Level::Ro)], &[]);
        assert_eq!(v.visibility(&p("/")), Visibility::Passage);
        assert_eq!(v.visibility(&p("/Dir1")), Visibility::Passage);
        assert_eq!(v.visibility(&p("/Dir2")), Visibility::Hidden);
        assert_eq!(v.visibility(&p("/Dir1/Dir3/x")), Visibility::Visible(Level::Ro));
        // A sibling with a shared prefix is not below.
        assert!(!v.has_visible_below(&p("/Dir1/Dir")));
        let w = view(&[("/a-b", Level::Ro), ("/a/b", Level::Ro)], &[]);
        assert_eq!(w.visibility(&p("/a")), Visibility::Passage);
    }

    #[test]
    fn a_floor_of_none_removes_a_passage() {
        let v = view(&[("/a/b", Level::Ro)], &[("/a", Level::None)]);
        assert_eq!(v.visibility(&p("/a")), Visibility::Hidden);
        assert_eq!(v.visibility(&p("/")), Visibility::Hidden);
    }
}
