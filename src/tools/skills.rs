//! Skills: directories with a SKILL.md whose frontmatter names and describes
//! them. skills_list, skill_view and skill_manage.
//!
//! Skills live under the boundary's `skills/` (through the view, like any
//! file) and under the user's own config directory (read-only to the
//! model). This module checks a SKILL.md's shape; the file itself is written
//! by `files`, so writes stay atomic and answer with their diff.

use super::params::{SkillManageParams, SkillViewParams, SkillsListParams};
use super::spec::{ChangeContext, Tool, Traits};
use super::{Change, Ctx, FileChange, Outcome, ToolResult};
use crate::access::{Access, Need, ToolError};
use crate::paths::VPath;
use crate::text::TextFile;
use crate::vfs::{Descend, Kind, WalkEntry, WalkOptions};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The largest SKILL.md skill_manage writes.
pub const MAX_SKILL_BYTES: usize = 64 * 1024;
const MAX_NAME: usize = 64;
const MAX_DESCRIPTION: usize = 1024;

/// The frontmatter of a SKILL.md.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frontmatter {
    pub name: String,
    pub description: String,
}

/// Checks a skill name: lowercase letters, digits and single hyphens.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--");
    if ok {
        Ok(())
    } else {
        Err(format!(
            "the skill name {name:?} is not valid: use 1 to {MAX_NAME} lowercase letters, digits and single hyphens, such as \"release-notes\"."
        ))
    }
}

/// Parses and checks a SKILL.md's frontmatter (`---`, `name:`, `description:`, `---`).
pub fn parse_frontmatter(text: &str) -> Result<Frontmatter, String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.lines();
    if lines.next().map(str::trim_end) != Some("---") {
        return Err("it has no frontmatter: start the file with a line `---`, then `name: ...` and `description: ...`, then `---`.".into());
    }
    let mut name = None;
    let mut description = None;
    let mut closed = false;
    for line in lines.by_ref() {
        if line.trim_end() == "---" {
            closed = true;
            break;
        }
        if let Some((key, value)) = line.split_once(':') {
            let value = value.trim().trim_matches('"').trim_matches('\'').trim().to_string();
            match key.trim() {
                "name" => name = Some(value),
                "description" => description = Some(value),
                _ => {}
            }
        }
    }
    if !closed {
        return Err("its frontmatter is not closed: end it with a line `---`.".into());
    }
    let name = name.filter(|n| !n.is_empty()).ok_or("its frontmatter has no `name:`.")?;
    check_name(&name)?;
    let description = description.filter(|d| !d.is_empty()).ok_or("its frontmatter has no `description:`.")?;
    if description.chars().count() > MAX_DESCRIPTION {
        return Err(format!("its description is longer than {MAX_DESCRIPTION} characters; shorten it."));
    }
    Ok(Frontmatter { name, description })
}

/// The boundary's skills directory.
fn skills_dir(access: &Access) -> VPath {
    access.fs().boundary().join("skills")
}

/// A skill found on either side.
struct Found {
    front: Frontmatter,
    /// Where it is, as shown to the model.
    shown: String,
    place: Place,
}

enum Place {
    /// Under the boundary: the SKILL.md's path in the session's world.
    Boundary(VPath),
    /// Under the user's config directory.
    User(PathBuf),
}

/// Every skill on both sides, and notes on SKILL.md files that were skipped.
fn discover(access: &Access, user_dir: Option<&Path>) -> (Vec<Found>, Vec<String>) {
    let mut found = Vec::new();
    let mut notes = Vec::new();
    let dir = skills_dir(access);
    if let Ok(target) = access.check(dir.as_str(), dir.clone(), Need::Look) {
        if target.is_dir() {
            if let Ok(entries) = access.fs().read_dir(&target.real) {
                let mut names: Vec<String> =
                    entries.into_iter().filter(|e| e.kind != Kind::File).map(|e| e.name).collect();
                names.sort();
                for name in names {
                    let path = dir.join(&name).join("SKILL.md");
                    let Ok(file) = access.check(path.as_str(), path.clone(), Need::Look) else { continue };
                    if file.kind() != Some(Kind::File) {
                        continue;
                    }
                    let shown = path.strip_prefix(access.fs().boundary()).unwrap_or(path.as_str()).to_string();
                    let text = access
                        .fs()
                        .read_file(&file.real, MAX_SKILL_BYTES as u64)
                        .ok()
                        .and_then(|b| TextFile::decode(&b).ok());
                    match text.map(|t| parse_frontmatter(t.text())) {
                        Some(Ok(front)) => found.push(Found { front, shown, place: Place::Boundary(path) }),
                        Some(Err(why)) => notes.push(format!("{shown} was skipped: {why}")),
                        None => notes.push(format!("{shown} was skipped: it is not UTF-8 text of at most 64 KiB.")),
                    }
                }
            }
        }
    }
    if let Some(user) = user_dir {
        let root = user.join("skills");
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
            .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.is_dir()).collect())
            .unwrap_or_default();
        dirs.sort();
        for dir in dirs {
            let path = dir.join("SKILL.md");
            let shown = format!(
                "~/.config/ctxfs/skills/{}/SKILL.md",
                dir.file_name().map(|n| n.to_string_lossy()).unwrap_or_default()
            );
            let Ok(bytes) = std::fs::read(&path) else { continue };
            match TextFile::decode(&bytes)
                .map_err(|_| "it is not UTF-8 text.".to_string())
                .and_then(|t| parse_frontmatter(t.text()))
            {
                Ok(front) if found.iter().any(|f| f.front.name == front.name) => {
                    notes.push(format!("{shown} was skipped: the workspace has a skill of the same name."))
                }
                Ok(front) => found.push(Found { front, shown, place: Place::User(path) }),
                Err(why) => notes.push(format!("{shown} was skipped: {why}")),
            }
        }
    }
    (found, notes)
}

pub fn skills_list(ctx: &mut Ctx<'_>, _params: SkillsListParams) -> ToolResult {
    let (found, notes) = discover(ctx.access, ctx.user_dir);
    let mut body = String::new();
    for skill in &found {
        body.push_str(&format!("- {}: {} ({})\n", skill.front.name, skill.front.description, skill.shown));
    }
    if found.is_empty() {
        body.push_str("No skills yet. skill_manage makes one under skills/.\n");
    }
    for note in notes {
        body.push_str(&format!("Note: {note}\n"));
    }
    Ok(Outcome::text(body))
}

pub fn skill_view(ctx: &mut Ctx<'_>, params: SkillViewParams) -> ToolResult {
    let (found, _) = discover(ctx.access, ctx.user_dir);
    let Some(skill) = found.into_iter().find(|s| s.front.name == params.name) else {
        return Err(ToolError::Message(format!(
            "No skill named {:?}. skills_list shows the skills there are.",
            params.name
        )));
    };
    let (text, files) = match &skill.place {
        Place::Boundary(path) => {
            let target = ctx.access.check(path.as_str(), path.clone(), Need::Look)?;
            let bytes = ctx
                .access
                .fs()
                .read_file(&target.real, MAX_SKILL_BYTES as u64)
                .map_err(|e| ToolError::from_fs(e, &target.path))?;
            ctx.observed.record(&target.real, super::sha256(&bytes));
            let text = TextFile::decode(&bytes).map_err(|_| ToolError::Binary(target.path.clone()))?.into_text();
            let dir = path.parent().unwrap_or_else(VPath::root);
            (text, boundary_files(ctx.access, &dir)?)
        }
        Place::User(path) => {
            let bytes =
                std::fs::read(path).map_err(|e| ToolError::Message(format!("Cannot read {}: {e}.", skill.shown)))?;
            let text = TextFile::decode(&bytes)
                .map_err(|_| ToolError::Message(format!("{} is not text.", skill.shown)))?
                .into_text();
            (text, user_files(path.parent().unwrap_or(path)))
        }
    };
    let mut body = format!("Skill {} ({})\n\n{}\n", skill.front.name, skill.shown, text.trim_end());
    body.push_str("\nFiles of this skill:\n");
    for file in files {
        body.push_str(&format!("{file}\n"));
    }
    Ok(Outcome::text(body))
}

/// The visible files of a skill's directory under the boundary, sorted.
fn boundary_files(access: &Access, dir: &VPath) -> Result<Vec<String>, ToolError> {
    let target = access.check(dir.as_str(), dir.clone(), Need::Look)?;
    let out = Mutex::new(Vec::new());
    let options = WalkOptions { gitignore: false, skip_hidden: true, threads: 1, ..WalkOptions::default() };
    let visit = |entry: &WalkEntry<'_>| {
        let visible = access.level(&entry.path).can_read();
        if entry.kind == Kind::File && visible {
            out.lock().unwrap_or_else(|e| e.into_inner()).push(entry.path.to_string());
        }
        if entry.kind == Kind::Dir && visible {
            Descend::Yes
        } else {
            Descend::No
        }
    };
    access.fs().walk(&target.real, &options, &visit).map_err(|e| ToolError::from_fs(e, &target.path))?;
    let mut files = out.into_inner().unwrap_or_else(|e| e.into_inner());
    files.sort();
    Ok(files)
}

/// The files of a skill in the user's config directory, sorted.
fn user_files(dir: &Path) -> Vec<String> {
    fn walk(dir: &Path, base: &Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(kind) = entry.file_type() else { continue };
            if kind.is_dir() {
                walk(&path, base, out);
            } else if kind.is_file() {
                out.push(path.strip_prefix(base).unwrap_or(&path).to_string_lossy().into_owned());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

pub fn skill_manage(ctx: &mut Ctx<'_>, params: SkillManageParams) -> ToolResult {
    check_name(&params.name).map_err(|why| ToolError::Message(format!("Not saved: {why}")))?;
    if params.content.len() > MAX_SKILL_BYTES {
        return Err(ToolError::Message(format!(
            "Not saved: the SKILL.md is {} bytes, more than the {} KiB a skill may have. Move details into other files of the skill.",
            params.content.len(),
            MAX_SKILL_BYTES / 1024
        )));
    }
    let front = parse_frontmatter(&params.content)
        .map_err(|why| ToolError::Message(format!("Not saved: the SKILL.md is not valid: {why}")))?;
    if front.name != params.name {
        return Err(ToolError::Message(format!(
            "Not saved: the frontmatter names the skill {:?}, but name is {:?}; make them the same.",
            front.name, params.name
        )));
    }
    let path = skills_dir(ctx.access).join(&params.name).join("SKILL.md");
    let shown = path.strip_prefix(ctx.access.fs().boundary()).unwrap_or(path.as_str()).to_string();
    let target = ctx.access.check(&shown, path, Need::Create)?;
    let change: FileChange = super::files::put_text(ctx, target, &params.content)?;
    Ok(Outcome::Changed(change))
}

/// A note for a SKILL.md changed by write, edit or apply_patch: what is
/// wrong with it, since skill_manage's checks did not run.
pub fn note_for(access: &Access, path: &VPath, text: &str) -> Option<String> {
    let rel = path.strip_prefix(&skills_dir(access))?;
    let mut parts = rel.split('/');
    let (Some(dir), Some("SKILL.md"), None) = (parts.next(), parts.next(), parts.next()) else { return None };
    match parse_frontmatter(text) {
        Ok(front) if front.name == dir => None,
        Ok(front) => Some(format!(
            "Note: this skill's frontmatter names it {:?}, but its directory is {dir:?}; skills_list shows it by the frontmatter's name.",
            front.name
        )),
        Err(why) => Some(format!("Note: this SKILL.md is not a valid skill, so skills_list skips it: {why}")),
    }
}

// --- The tools' definitions (see `spec`) -------------------------------------

pub struct SkillsList;

impl Tool for SkillsList {
    const NAME: &'static str = "skills_list";
    const TITLE: &'static str = "List skills";
    const TRAITS: Traits = Traits::GUARDED.reads().quick();
    type Params = SkillsListParams;

    fn run(ctx: &mut Ctx<'_>, params: SkillsListParams) -> ToolResult {
        skills_list(ctx, params)
    }
}

pub struct SkillView;

impl Tool for SkillView {
    const NAME: &'static str = "skill_view";
    const TITLE: &'static str = "Read a skill";
    const TRAITS: Traits = Traits::GUARDED.reads().quick();
    type Params = SkillViewParams;

    fn run(ctx: &mut Ctx<'_>, params: SkillViewParams) -> ToolResult {
        skill_view(ctx, params)
    }
}

pub struct SkillManage;

impl Tool for SkillManage {
    const NAME: &'static str = "skill_manage";
    const TITLE: &'static str = "Change a skill";
    type Params = SkillManageParams;

    fn run(ctx: &mut Ctx<'_>, params: SkillManageParams) -> ToolResult {
        skill_manage(ctx, params)
    }

    fn describe(params: &SkillManageParams, change: &ChangeContext<'_>) -> Option<String> {
        let (name, path) = (&params.name, change.path);
        match change.change {
            Change::Created { lines } => {
                let noun = if *lines == 1 { "line" } else { "lines" };
                Some(format!("create the skill {name} ({path}, {lines} {noun})"))
            }
            Change::Modified { .. } => Some(format!("replace the SKILL.md of the skill {name} ({path})")),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_frontmatter_are_checked() {
        assert!(check_name("release-notes").is_ok());
        for bad in ["", "Release", "a_b", "-a", "a-", "a--b", &"x".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
        let good = "---\nname: deploy\ndescription: How we deploy.\n---\nSteps.\n";
        assert_eq!(
            parse_frontmatter(good).unwrap(),
            Frontmatter { name: "deploy".into(), description: "How we deploy.".into() }
        );
        assert!(parse_frontmatter("no frontmatter").unwrap_err().contains("no frontmatter"));
        assert!(parse_frontmatter("---\nname: x\n").unwrap_err().contains("not closed"));
        assert!(parse_frontmatter("---\nname: x\n---\n").unwrap_err().contains("description"));
        assert!(parse_frontmatter("---\nname: Bad Name\ndescription: d\n---\n").unwrap_err().contains("not valid"));
    }
}
