//! Tools about nodes rather than contents: list, stat, mkdir, mv and rm.
//!
//! Each checks its paths through `Access` and acts through `Fs`; none reads
//! or writes a file's bytes (that is `files`).

use super::params::{ListParams, MkdirParams, MvParams, RmParams, StatParams};
use super::spec::{Action, Tool, Traits};
use super::{Change, ChangeTexts, Ctx, FileChange, Outcome, ToolResult};
use crate::access::{Access, Need, Target, ToolError, MAX_OPEN_BYTES};
use crate::paths::VPath;
use crate::text::TextFile;
use crate::vfs::{FsError, Kind, Resolution};
use std::time::UNIX_EPOCH;

/// The listing of a checked directory, in the spec's format.
pub fn listing(access: &Access, dir: &Target) -> Result<String, ToolError> {
    let entries = access.fs().read_dir(&dir.real).map_err(|e| ToolError::from_fs(e, &dir.path))?;
    let dir_writable = dir.level.can_change();
    let mounts = access.fs().mounts();
    let mut rows: Vec<(bool, String, bool, bool)> = Vec::with_capacity(entries.len());
    for entry in entries {
        let level = access.entry_level(dir, &entry.name);
        if !level.can_read() {
            continue;
        }
        let is_dir = match entry.kind {
            Kind::Dir => true,
            Kind::Link => link_leads_to_dir(access, dir, &entry.name),
            Kind::File | Kind::Special => false,
        };
        let mount = mounts.contains(&dir.real.join(&entry.name));
        rows.push((is_dir, entry.name, mount, dir_writable && !level.can_change()));
    }
    rows.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let mut out = String::new();
    for (is_dir, name, mount, read_only) in rows {
        out.push_str(&name);
        if is_dir {
            out.push('/');
        }
        if mount {
            out.push_str(" [mount]");
        }
        if read_only {
            out.push_str(" [read-only]");
        }
        out.push('\n');
    }
    Ok(out)
}

/// Whether a listed link leads to a directory the session can see.
fn link_leads_to_dir(access: &Access, dir: &Target, name: &str) -> bool {
    match access.fs().resolve(&dir.real.join(name)) {
        Ok(Resolution::Found { real, meta }) => meta.kind == Kind::Dir && access.level(&real).can_read(),
        _ => false,
    }
}

pub fn list(ctx: &mut Ctx<'_>, params: ListParams) -> ToolResult {
    let text = params.path.as_deref().unwrap_or(".");
    let dir = ctx.access.target(text, Need::Look)?;
    match dir.kind() {
        None => Err(ToolError::NotFound(dir.path)),
        Some(Kind::Dir) => Ok(Outcome::Text { body: listing(ctx.access, &dir)?, path: Some(dir.path) }),
        Some(_) => Err(ToolError::NotADir(dir.path)),
    }
}

pub fn stat(ctx: &mut Ctx<'_>, params: StatParams) -> ToolResult {
    let target = ctx.access.target(&params.path, Need::Look)?;
    let Some(meta) = target.meta.clone() else {
        return Err(ToolError::NotFound(target.path));
    };
    let kind = match meta.kind {
        Kind::Dir => "directory",
        Kind::File => "file",
        Kind::Special => "special (FIFO, socket or device)",
        Kind::Link => "link",
    };
    let mut out = format!("path: {}\nkind: {kind}\n", target.path);
    if target.real != target.path {
        out.push_str(&format!("link to: {}\n", target.real));
    }
    if meta.kind == Kind::File {
        out.push_str(&format!("size: {} bytes\n", meta.len));
        if let Ok(bytes) = ctx.access.fs().read_file(&target.real, crate::access::MAX_OPEN_BYTES) {
            match crate::text::TextFile::decode(&bytes) {
                Ok(file) => out.push_str(&format!("lines: {}\n", crate::text::count_lines(file.text()))),
                Err(_) => out.push_str("binary: yes\n"),
            }
            out.push_str(&format!("sha256: {}\n", super::hex(&super::sha256(&bytes))));
        }
        if meta.nlink > 1 {
            out.push_str(&format!("hard links: {}\n", meta.nlink));
        }
    }
    if let Some(modified) = meta.modified.and_then(|m| m.duration_since(UNIX_EPOCH).ok()) {
        out.push_str(&format!("modified: {}\n", format_utc(modified.as_secs())));
    }
    out.push_str(&format!("permissions: {:04o}\n", meta.mode & 0o7777));
    let access = if !target.level.can_change() {
        "read only"
    } else if meta.kind == Kind::File && !meta.writable {
        "read only (the file is write-protected)"
    } else {
        "read and change"
    };
    out.push_str(&format!("this session may: {access}\n"));
    Ok(Outcome::Text { body: out, path: Some(target.path) })
}

/// Seconds since the epoch as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn format_utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil-from-days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

pub fn mkdir(ctx: &mut Ctx<'_>, params: MkdirParams) -> ToolResult {
    let target = ctx.access.target(&params.path, Need::Create)?;
    if target.meta.is_some() {
        return Err(ToolError::Exists(target.path));
    }
    ctx.access.create_parents(&target)?;
    ctx.access.fs().create_dir(&target.real).map_err(|e| ToolError::from_fs(e, &target.path))?;
    Ok(Outcome::Text { body: format!("Created directory {}\n", target.path), path: Some(target.path) })
}

/// Refuses to change the boundary itself (it is where the session lives).
fn refuse_boundary(access: &Access, target: &Target, what: &str) -> Result<(), ToolError> {
    if target.real == *access.fs().boundary() || target.path == *access.fs().boundary() {
        return Err(ToolError::Message(format!("Cannot {what} {}: it is the root of this session.", target.path)));
    }
    Ok(())
}

/// Refuses to remove or move a mounted repository, or a directory holding
/// one: a mount is removed by whoever mounted it, not by a session.
fn refuse_mount(access: &Access, target: &Target, what: &str) -> Result<(), ToolError> {
    let mounts = access.fs().mounts();
    if let Some(mount) = mounts.iter().find(|m| m.starts_with(&target.real) || m.starts_with(&target.path)) {
        let text = if *mount == target.real || *mount == target.path {
            format!(
                "Cannot {what} {}: it is a mounted repository, which only whoever mounted it can {what}.",
                target.path
            )
        } else {
            format!(
                "Cannot {what} {}: it holds the mounted repository {mount}, which only whoever mounted it can {what}.",
                target.path
            )
        };
        return Err(ToolError::Message(text));
    }
    Ok(())
}

/// Refuses a directory that holds entries the session sees at another level
/// (a hidden or read-only corner), so a move or removal never carries them off.
fn refuse_mixed_levels(access: &Access, target: &Target, what: &str) -> Result<(), ToolError> {
    if target.is_dir() && !access.view().is_uniform_below(&target.real) {
        return Err(ToolError::Message(format!(
            "Cannot {what} {}: it holds entries this session may not change.",
            target.path
        )));
    }
    Ok(())
}

pub fn mv(ctx: &mut Ctx<'_>, params: MvParams) -> ToolResult {
    let source = ctx.access.target(&params.source, Need::Change)?;
    if source.meta.is_none() {
        return Err(ToolError::NotFound(source.path));
    }
    refuse_boundary(ctx.access, &source, "move")?;
    refuse_mount(ctx.access, &source, "move")?;
    refuse_mixed_levels(ctx.access, &source, "move")?;
    let dest = ctx.access.target(&params.destination, Need::Create)?;
    let (from_mount, to_mount) = (ctx.access.mount_of(&source.real), ctx.access.mount_of(&dest.real));
    if from_mount != to_mount {
        let edge = match (from_mount, to_mount) {
            (Some(a), Some(b)) => format!("between two mounted repositories ({a}, {b})"),
            (Some(m), None) | (None, Some(m)) => format!("across the edge of the mounted repository {m}"),
            (None, None) => String::new(),
        };
        return Err(ToolError::Message(format!(
            "Cannot move {} to {}: a move may not go {edge}. Copy it with read and write instead.",
            source.path, dest.path
        )));
    }
    if dest.meta.is_some() {
        return Err(ToolError::Exists(dest.path));
    }
    if dest.real.starts_with(&source.real) {
        return Err(ToolError::Message(format!("Cannot move {} into itself ({}).", source.path, dest.path)));
    }
    ctx.access.create_parents(&dest)?;
    let from = node_of(ctx.access, &source);
    match ctx.access.fs().rename(&from, &dest.real) {
        Ok(()) => {}
        Err(FsError::Exists) => return Err(ToolError::Exists(dest.path)),
        Err(FsError::NotFound) => return Err(ToolError::NotFound(source.path)),
        Err(e) => return Err(ToolError::from_fs(e, &source.path)),
    }
    ctx.observed.moved(&from, &dest.real);
    ctx.observed.moved(&source.real, &dest.real);
    Ok(Outcome::Moved { body: format!("Moved {} to {}\n", source.path, dest.path), from: source.path, to: dest.path })
}

pub fn rm(ctx: &mut Ctx<'_>, params: RmParams) -> ToolResult {
    let target = ctx.access.target(&params.path, Need::Change)?;
    if target.meta.is_none() {
        return Err(ToolError::NotFound(target.path));
    }
    refuse_boundary(ctx.access, &target, "remove")?;
    refuse_mount(ctx.access, &target, "remove")?;
    refuse_mixed_levels(ctx.access, &target, "remove")?;
    // The removed file's text, for editors' diff views: a regular text file only.
    let before = match target.kind() {
        Some(Kind::File) => ctx
            .access
            .fs()
            .read_file(&target.real, MAX_OPEN_BYTES)
            .ok()
            .and_then(|bytes| TextFile::decode(&bytes).ok())
            .map(|file| file.text().to_string()),
        _ => None,
    };
    remove(ctx, &target)?;
    Ok(Outcome::Changed(FileChange {
        given: target.given,
        path: target.path,
        sha: None,
        change: Change::Deleted,
        note: None,
        texts: ChangeTexts { before, after: None },
    }))
}

/// The node a path names: where its parent really is, plus its own name,
/// so a final link is moved or removed itself, not what it leads to.
fn node_of(access: &Access, target: &Target) -> VPath {
    let parent = target.path.parent().unwrap_or_else(VPath::root);
    match (access.fs().resolve(&parent), target.path.name()) {
        (Ok(Resolution::Found { real, .. }), Some(name)) => real.join(name),
        _ => target.real.clone(),
    }
}

/// Moves a checked, existing target to the trash.
pub fn remove(ctx: &mut Ctx<'_>, target: &Target) -> Result<(), ToolError> {
    let node = node_of(ctx.access, target);
    ctx.access.fs().trash(&node).map_err(|e| ToolError::from_fs(e, &target.path))?;
    ctx.observed.forget_below(&node);
    tracing::info!(path = %target.path, "moved to the trash");
    Ok(())
}

// --- The tools' definitions (see `spec`) -------------------------------------

pub struct List;

impl Tool for List {
    const NAME: &'static str = "list";
    const TITLE: &'static str = "List a directory";
    const TRAITS: Traits = Traits::GUARDED.reads().quick().dedupes();
    type Params = ListParams;

    fn run(ctx: &mut Ctx<'_>, params: ListParams) -> ToolResult {
        list(ctx, params)
    }
}

pub struct Stat;

impl Tool for Stat {
    const NAME: &'static str = "stat";
    const TITLE: &'static str = "Describe a path";
    const TRAITS: Traits = Traits::GUARDED.reads().quick();
    type Params = StatParams;

    fn run(ctx: &mut Ctx<'_>, params: StatParams) -> ToolResult {
        stat(ctx, params)
    }
}

pub struct Mkdir;

impl Tool for Mkdir {
    const NAME: &'static str = "mkdir";
    const TITLE: &'static str = "Make a directory";
    const TRAITS: Traits = Traits::GUARDED.adds_only().idempotent();
    type Params = MkdirParams;

    fn run(ctx: &mut Ctx<'_>, params: MkdirParams) -> ToolResult {
        mkdir(ctx, params)
    }
}

pub struct Mv;

impl Tool for Mv {
    const NAME: &'static str = "mv";
    const TITLE: &'static str = "Move or rename";
    const TRAITS: Traits = Traits::GUARDED.action(Action::Move);
    type Params = MvParams;

    fn run(ctx: &mut Ctx<'_>, params: MvParams) -> ToolResult {
        mv(ctx, params)
    }
}

pub struct Rm;

impl Tool for Rm {
    const NAME: &'static str = "rm";
    const TITLE: &'static str = "Remove (to the trash)";
    const TRAITS: Traits = Traits::GUARDED.action(Action::Delete);
    type Params = RmParams;

    fn run(ctx: &mut Ctx<'_>, params: RmParams) -> ToolResult {
        rm(ctx, params)
    }
}
