//! Tools over a file's contents: read, write, edit, multiedit, apply_patch.
//!
//! They own the safety of the user's files: read before write, the stale
//! guard (the hash this session last saw must still be the file's), text
//! decoding that keeps line endings and a BOM, and all-or-nothing changes.
//! The bytes themselves are read and written through `Fs`, whose writes are
//! atomic. Numbering results and capping them is not done here.

use super::params::{ApplyPatchParams, EditParams, MultiEditParams, ReadParams, WriteParams};
use super::spec::{ChangeContext, Tool, Traits};
use super::{sha256, Change, ChangeTexts, Ctx, FileChange, Outcome, ReadOutcome, Sha, ToolResult};
use crate::access::{Need, Target, ToolError, MAX_OPEN_BYTES};
use crate::paths::VPath;
use crate::text::{self, PatchOp, TextFile};
use crate::vfs::journal::IntentStep;
use crate::vfs::{Expect, Kind};
use std::collections::HashSet;

/// Lines a read shows when no limit is given.
pub const READ_WINDOW: u64 = 2000;
/// The most bytes of lines one read returns.
pub const READ_MAX_BYTES: usize = 1024 * 1024;
/// Lines longer than this many characters are cut in a read.
pub const LINE_MAX_CHARS: usize = 2000;

/// Loads a checked target that must be an existing regular file.
fn load(ctx: &Ctx<'_>, target: &Target) -> Result<Vec<u8>, ToolError> {
    match target.kind() {
        None => return Err(ToolError::NotFound(target.path.clone())),
        Some(Kind::Dir) => return Err(ToolError::IsADir(target.path.clone())),
        Some(Kind::Special) => return Err(ToolError::NotRegular(target.path.clone())),
        Some(Kind::File) | Some(Kind::Link) => {}
    }
    ctx.access.fs().read_file(&target.real, MAX_OPEN_BYTES).map_err(|e| ToolError::from_fs(e, &target.path))
}

/// Loads an existing file for a change: it must have been observed by this
/// session, unchanged since.
fn load_for_change(ctx: &Ctx<'_>, target: &Target) -> Result<(Sha, TextFile), ToolError> {
    let bytes = load(ctx, target)?;
    writable(target)?;
    let sha = sha256(&bytes);
    match ctx.observed.get(&target.real) {
        None => {
            return Err(ToolError::Message(format!(
                "{} has not been read in this session. Read it before changing it.",
                target.path
            )))
        }
        Some(seen) if *seen != sha => {
            return Err(ToolError::Message(format!(
                "{} has changed since this session last read it. Read it again before changing it.",
                target.path
            )))
        }
        Some(_) => {}
    }
    let file = TextFile::decode(&bytes).map_err(|_| ToolError::Binary(target.path.clone()))?;
    Ok((sha, file))
}

/// Refuses an existing file whose permission bits forbid writing it: a
/// replacing write (temp file and rename) would pass them by.
fn writable(target: &Target) -> Result<(), ToolError> {
    match &target.meta {
        Some(meta) if meta.kind == Kind::File && !meta.writable => {
            Err(ToolError::WriteProtected(target.path.clone(), meta.mode))
        }
        _ => Ok(()),
    }
}

/// Writes bytes to a checked target, making missing parents first, if what
/// is there is still what `expect` says (checked as the change takes effect).
fn store(ctx: &mut Ctx<'_>, target: &Target, bytes: &[u8], expect: Expect) -> Result<Sha, ToolError> {
    if bytes.len() as u64 > MAX_OPEN_BYTES {
        return Err(ToolError::Message(text::EditError::TooLarge { bytes: bytes.len() }.message(target.path.as_str())));
    }
    ctx.access.create_parents(target)?;
    ctx.access.fs().write_file_if(&target.real, bytes, expect).map_err(|e| ToolError::from_fs(e, &target.path))?;
    let sha = sha256(bytes);
    ctx.observed.record(&target.real, sha);
    Ok(sha)
}

pub fn read(ctx: &mut Ctx<'_>, params: ReadParams) -> ToolResult {
    let target = ctx.access.target(&params.file_path, Need::Look)?;
    if target.is_dir() {
        let body = super::nodes::listing(ctx.access, &target)?;
        return Ok(Outcome::Text { body, path: Some(target.path) });
    }
    let bytes = load(ctx, &target)?;
    let sha = sha256(&bytes);
    let file = TextFile::decode(&bytes).map_err(|_| ToolError::Binary(target.path.clone()))?;
    ctx.observed.record(&target.real, sha);
    let text = file.text();
    let total = text::count_lines(text);
    let offset = params.offset.unwrap_or(1).max(1);
    // A read is a window of at most READ_WINDOW lines, whatever limit asks for.
    let limit = match params.limit {
        Some(0) | None => READ_WINDOW,
        Some(n) => n.min(READ_WINDOW),
    };
    if total > 0 && offset as usize > total {
        return Err(ToolError::Message(format!(
            "Offset {offset} is past the end of {}, which has {total} line{}.",
            target.path,
            if total == 1 { "" } else { "s" }
        )));
    }
    let first = offset as usize;
    let mut body = String::new();
    let mut last = first.saturating_sub(1);
    let mut note = None;
    for (index, line) in text.split('\n').enumerate().skip(first - 1).take(limit.min(usize::MAX as u64) as usize) {
        let number = index + 1;
        if number > total {
            break;
        }
        let line = line.strip_suffix('\r').unwrap_or(line);
        let shown = cut_line(line);
        if body.len() + shown.len() + 12 > READ_MAX_BYTES && number > first {
            note = Some(format!(
                "(Stopped at line {last}: a read returns at most 1 MiB. Continue with offset {}.)",
                last + 1
            ));
            break;
        }
        body.push_str(&number.to_string());
        body.push_str(": ");
        body.push_str(&shown);
        body.push('\n');
        last = number;
    }
    // An explicit limit asks for lines up to first + limit - 1, which may lie past the end.
    let asked_last = match params.limit {
        Some(n) if n > 0 && last == total => last.max(first.saturating_add(n.min(READ_WINDOW) as usize) - 1),
        _ => last,
    };
    Ok(Outcome::Read(ReadOutcome {
        given: target.given,
        path: target.path,
        real: target.real,
        first,
        last,
        asked_last,
        total,
        sha,
        body,
        note,
    }))
}

/// A line as a read shows it: cut past `LINE_MAX_CHARS` with a marker.
fn cut_line(line: &str) -> std::borrow::Cow<'_, str> {
    match line.char_indices().nth(LINE_MAX_CHARS) {
        None => line.into(),
        Some((cut, _)) => {
            let total = line.chars().count();
            format!("{} […line cut: {LINE_MAX_CHARS} of {total} characters shown]", &line[..cut]).into()
        }
    }
}

/// Normalises text the model wrote to LF line breaks.
fn to_lf(text: &str) -> String {
    text.replace("\r\n", "\n")
}

pub fn write(ctx: &mut Ctx<'_>, params: WriteParams) -> ToolResult {
    let target = ctx.access.target(&params.file_path, Need::Create)?;
    if target.meta.is_none() {
        return Ok(Outcome::Changed(created(ctx, target, &params.content)?));
    }
    let (sha, file) = load_for_change(ctx, &target)?;
    let new_text = to_lf(params.content.strip_prefix('\u{feff}').unwrap_or(&params.content));
    Ok(Outcome::Changed(changed(ctx, target, &file, sha, &new_text, None)?))
}

/// Creates a new file with `content` as given.
fn created(ctx: &mut Ctx<'_>, target: Target, content: &str) -> Result<FileChange, ToolError> {
    let sha = store(ctx, &target, content.as_bytes(), Expect::Absent)?;
    let note = super::skills::note_for(ctx.access, &target.path, content);
    let lines = text::count_lines(content);
    let texts = ChangeTexts { before: None, after: Some(to_lf(content.strip_prefix('\u{feff}').unwrap_or(content))) };
    Ok(FileChange {
        given: target.given,
        path: target.path,
        sha: Some(sha),
        change: Change::Created { lines },
        note,
        texts,
    })
}

/// Writes the new text of an existing file, whose content had hash `old`,
/// and answers its diff.
fn changed(
    ctx: &mut Ctx<'_>,
    target: Target,
    file: &TextFile,
    old: Sha,
    new_text: &str,
    breaks: Option<&text::Breaks>,
) -> Result<FileChange, ToolError> {
    let bytes = match breaks {
        Some(breaks) => file.encode_traced(new_text, breaks),
        None => file.encode(new_text),
    };
    let sha = store(ctx, &target, &bytes, Expect::Content(old))?;
    let diff = file.diff_to(new_text, &bytes);
    let note = super::skills::note_for(ctx.access, &target.path, new_text);
    let texts = ChangeTexts { before: Some(file.text().to_string()), after: Some(new_text.to_string()) };
    Ok(FileChange {
        given: target.given,
        path: target.path,
        sha: Some(sha),
        change: Change::Modified { diff },
        note,
        texts,
    })
}

/// Creates or replaces a checked target with `text`, keeping an existing
/// file's line endings, BOM and mode. For tools whose own checks stand in
/// for read-before-write (skill_manage).
pub fn put_text(ctx: &mut Ctx<'_>, target: Target, text: &str) -> Result<FileChange, ToolError> {
    if target.meta.is_none() {
        return created(ctx, target, text);
    }
    let bytes = load(ctx, &target)?;
    writable(&target)?;
    let file = TextFile::decode(&bytes).map_err(|_| ToolError::Binary(target.path.clone()))?;
    changed(ctx, target, &file, sha256(&bytes), &to_lf(text), None)
}

pub fn edit(ctx: &mut Ctx<'_>, params: EditParams) -> ToolResult {
    let target = ctx.access.target(&params.file_path, Need::Change)?;
    let (sha, file) = load_for_change(ctx, &target)?;
    let (new_text, _, breaks) = text::apply_edit_traced(
        file.text(),
        &params.old_string,
        &params.new_string,
        params.replace_all.unwrap_or(false),
    )
    .map_err(|e| ToolError::Message(e.message(target.path.as_str())))?;
    Ok(Outcome::Changed(changed(ctx, target, &file, sha, &new_text, Some(&breaks))?))
}

pub fn multiedit(ctx: &mut Ctx<'_>, params: MultiEditParams) -> ToolResult {
    if params.edits.is_empty() {
        return Err(ToolError::Message("edits is empty; give at least one replacement.".into()));
    }
    let target = ctx.access.target(&params.file_path, Need::Change)?;
    let (sha, file) = load_for_change(ctx, &target)?;
    let edits: Vec<(String, String, bool)> =
        params.edits.into_iter().map(|e| (e.old_string, e.new_string, e.replace_all.unwrap_or(false))).collect();
    let (new_text, breaks) = text::apply_multiedit_traced(file.text(), &edits).map_err(|(index, e)| {
        ToolError::Message(format!(
            "Edit {} of {} failed, so none was made: {}",
            index + 1,
            edits.len(),
            e.message(target.path.as_str())
        ))
    })?;
    Ok(Outcome::Changed(changed(ctx, target, &file, sha, &new_text, Some(&breaks))?))
}

/// One file's part of a checked patch, ready to commit.
enum Step {
    Create {
        target: Target,
        bytes: Vec<u8>,
        lines: usize,
        note: Option<String>,
    },
    Update {
        target: Target,
        old: Sha,
        bytes: Vec<u8>,
        diff: String,
        moved_to: Option<Target>,
        note: Option<String>,
        texts: Box<ChangeTexts>,
    },
    Delete {
        target: Target,
        before: Option<String>,
    },
}

/// A step that puts back one file a failed patch had already changed.
type Undo = Box<dyn FnOnce(&mut Ctx<'_>)>;

pub fn apply_patch(ctx: &mut Ctx<'_>, params: ApplyPatchParams) -> ToolResult {
    let ops = text::parse_patch(&params.patch).map_err(|e| ToolError::Message(e.to_string()))?;
    // Check everything before changing anything.
    let mut steps = Vec::with_capacity(ops.len());
    let mut named: HashSet<VPath> = HashSet::new();
    let mut once = |target: &Target| -> Result<(), ToolError> {
        if named.insert(target.real.clone()) {
            Ok(())
        } else {
            Err(ToolError::Message(format!(
                "The patch names {} more than once; put all its changes in one section.",
                target.path
            )))
        }
    };
    for op in ops {
        match op {
            PatchOp::Add { path, content } => {
                let target = ctx.access.target(&path, Need::Create)?;
                if target.meta.is_some() {
                    return Err(ToolError::Message(format!(
                        "{}. `*** Add File` only makes new files; to change this one, read it and use `*** Update File` (or write to replace it whole). Nothing was changed.",
                        ToolError::Exists(target.path)
                    )));
                }
                once(&target)?;
                let lines = text::count_lines(&content);
                let note = super::skills::note_for(ctx.access, &target.path, &content);
                steps.push(Step::Create { target, bytes: content.into_bytes(), lines, note });
            }
            PatchOp::Delete { path } => {
                let target = ctx.access.target(&path, Need::Change)?;
                let bytes = load(ctx, &target)?;
                once(&target)?;
                let before = TextFile::decode(&bytes).ok().map(|file| file.text().to_string());
                steps.push(Step::Delete { target, before });
            }
            PatchOp::Update { path, move_to, chunks } => {
                let target = ctx.access.target(&path, Need::Change)?;
                let (old, file) = load_for_change(ctx, &target)?;
                once(&target)?;
                let (new_text, breaks) = text::apply_update_chunks_traced(file.text(), &chunks)
                    .map_err(|e| ToolError::Message(e.message(target.path.as_str())))?;
                let moved_to = match move_to {
                    Some(dest) => {
                        let dest = ctx.access.target(&dest, Need::Create)?;
                        if dest.meta.is_some() && dest.real != target.real {
                            return Err(ToolError::Message(format!(
                                "{}. `*** Move to` never replaces a file; move to a new path, or remove the one there first (rm, or `*** Delete File` in an earlier patch). Nothing was changed.",
                                ToolError::Exists(dest.path)
                            )));
                        }
                        once(&dest)?;
                        Some(dest)
                    }
                    None => None,
                };
                let bytes = file.encode_traced(&new_text, &breaks);
                let diff = file.diff_to(&new_text, &bytes);
                let note = super::skills::note_for(ctx.access, &moved_to.as_ref().unwrap_or(&target).path, &new_text);
                let texts = Box::new(ChangeTexts { before: Some(file.text().to_string()), after: Some(new_text) });
                steps.push(Step::Update { target, old, bytes, diff, moved_to, note, texts });
            }
        }
    }
    commit(ctx, steps)
}

/// Carries out checked patch steps: writes first, removals last, and on a
/// failure puts back what was already written.
fn commit(ctx: &mut Ctx<'_>, steps: Vec<Step>) -> ToolResult {
    // A change of several files is recorded first, so that a crash part-way
    // through is rolled back whole at the next start.
    let intent = if steps.len() > 1 {
        let record = intent_steps(ctx, &steps)?;
        ctx.access.fs().begin_intent(&record).map_err(|e| {
            ToolError::Message(format!("Nothing was changed: the change could not be recorded first ({e})."))
        })?
    } else {
        None
    };
    let mut undo: Vec<Undo> = Vec::new();
    let mut changes: Vec<Option<FileChange>> = Vec::with_capacity(steps.len());
    let mut failure = None;
    for step in &steps {
        let result = match step {
            Step::Create { target, bytes, lines, note } => store(ctx, target, bytes, Expect::Absent).map(|sha| {
                let real = target.real.clone();
                let shown = target.clone();
                undo.push(Box::new(move |ctx| {
                    let _ = ctx.access.fs().trash(&real);
                    let _ = shown;
                }));
                Some(FileChange {
                    given: target.given.clone(),
                    path: target.path.clone(),
                    sha: Some(sha),
                    change: Change::Created { lines: *lines },
                    note: note.clone(),
                    texts: ChangeTexts { before: None, after: std::str::from_utf8(bytes).ok().map(to_lf) },
                })
            }),
            Step::Update { target, old: old_sha, bytes, diff, moved_to, note, texts } => {
                let old = ctx
                    .access
                    .fs()
                    .read_file(&target.real, MAX_OPEN_BYTES)
                    .map_err(|e| ToolError::from_fs(e, &target.path));
                old.and_then(|old| {
                    let dest = moved_to.as_ref().unwrap_or(target);
                    if let Some(dest) = moved_to {
                        ctx.access.create_parents(dest)?;
                        if dest.real != target.real {
                            ctx.access
                                .fs()
                                .rename(&target.real, &dest.real)
                                .map_err(|e| ToolError::from_fs(e, &target.path))?;
                            ctx.observed.forget_below(&target.real);
                        }
                    }
                    let sha = store(ctx, dest, bytes, Expect::Content(*old_sha))?;
                    let (from, to, previous) = (target.real.clone(), dest.real.clone(), old);
                    undo.push(Box::new(move |ctx| {
                        // Put back only over this patch's own content.
                        let _ = ctx.access.fs().write_file_if(&to, &previous, Expect::Content(sha));
                        if from != to {
                            let _ = ctx.access.fs().rename(&to, &from);
                        }
                    }));
                    let change = match moved_to {
                        Some(_) if dest.real != target.real => {
                            Change::Moved { from: target.given.clone(), diff: diff.clone() }
                        }
                        _ => Change::Modified { diff: diff.clone() },
                    };
                    Ok(Some(FileChange {
                        given: dest.given.clone(),
                        path: dest.path.clone(),
                        sha: Some(sha),
                        change,
                        note: note.clone(),
                        texts: (**texts).clone(),
                    }))
                })
            }
            Step::Delete { .. } => Ok(None),
        };
        match result {
            Ok(change) => changes.push(change),
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    if failure.is_none() {
        for (index, step) in steps.iter().enumerate() {
            if let Step::Delete { target, before } = step {
                match super::nodes::remove(ctx, target) {
                    Ok(()) => {
                        changes[index] = Some(FileChange {
                            given: target.given.clone(),
                            path: target.path.clone(),
                            sha: None,
                            change: Change::Deleted,
                            note: None,
                            texts: ChangeTexts { before: before.clone(), after: None },
                        })
                    }
                    Err(e) => {
                        failure = Some(e);
                        break;
                    }
                }
            }
        }
    }
    if let Some(error) = failure {
        for step in undo.into_iter().rev() {
            step(ctx);
        }
        if let Some(intent) = intent {
            intent.done();
        }
        return Err(error);
    }
    if let Some(intent) = intent {
        intent.done();
    }
    Ok(Outcome::Patch(changes.into_iter().flatten().collect()))
}

/// What each file of a patch is before and after it, for the record that
/// makes a crash roll back (see `vfs::journal`).
fn intent_steps(ctx: &Ctx<'_>, steps: &[Step]) -> Result<Vec<IntentStep>, ToolError> {
    let old = |target: &Target| {
        ctx.access.fs().read_file(&target.real, MAX_OPEN_BYTES).map_err(|e| ToolError::from_fs(e, &target.path))
    };
    let mut out = Vec::with_capacity(steps.len());
    for step in steps {
        match step {
            Step::Create { target, bytes, .. } => {
                out.push(IntentStep { path: target.real.clone(), old: None, new: Some(sha256(bytes)) })
            }
            Step::Update { target, bytes, moved_to, .. } => {
                let before = old(target)?;
                match moved_to {
                    Some(dest) if dest.real != target.real => {
                        out.push(IntentStep { path: dest.real.clone(), old: None, new: Some(sha256(bytes)) });
                        out.push(IntentStep { path: target.real.clone(), old: Some(before), new: None });
                    }
                    _ => {
                        out.push(IntentStep { path: target.real.clone(), old: Some(before), new: Some(sha256(bytes)) })
                    }
                }
            }
            Step::Delete { target, .. } => {
                out.push(IntentStep { path: target.real.clone(), old: Some(old(target)?), new: None })
            }
        }
    }
    Ok(out)
}

// --- The tools' definitions (see `spec`) -------------------------------------

pub struct Read;

impl Tool for Read {
    const NAME: &'static str = "read";
    const TITLE: &'static str = "Read a file";
    const TRAITS: Traits = Traits::GUARDED.reads().quick();
    type Params = ReadParams;

    fn run(ctx: &mut Ctx<'_>, params: ReadParams) -> ToolResult {
        read(ctx, params)
    }
}

pub struct Write;

impl Tool for Write {
    const NAME: &'static str = "write";
    const TITLE: &'static str = "Write a file";
    const TRAITS: Traits = Traits::GUARDED.idempotent();
    type Params = WriteParams;

    fn run(ctx: &mut Ctx<'_>, params: WriteParams) -> ToolResult {
        write(ctx, params)
    }
}

pub struct Edit;

impl Tool for Edit {
    const NAME: &'static str = "edit";
    const TITLE: &'static str = "Edit a file";
    type Params = EditParams;

    fn run(ctx: &mut Ctx<'_>, params: EditParams) -> ToolResult {
        edit(ctx, params)
    }

    fn describe(params: &EditParams, change: &ChangeContext<'_>) -> Option<String> {
        let before = change.before?;
        let count = match params.replace_all {
            Some(true) => before.matches(text::to_lf(&params.old_string).as_ref()).count(),
            _ => 1,
        };
        let noun = if count == 1 { "occurrence" } else { "occurrences" };
        Some(format!("replace {count} {noun} in {}", change.path))
    }
}

pub struct MultiEdit;

impl Tool for MultiEdit {
    const NAME: &'static str = "multiedit";
    const TITLE: &'static str = "Edit a file in several places";
    type Params = MultiEditParams;

    fn run(ctx: &mut Ctx<'_>, params: MultiEditParams) -> ToolResult {
        multiedit(ctx, params)
    }

    fn describe(params: &MultiEditParams, change: &ChangeContext<'_>) -> Option<String> {
        let n = params.edits.len();
        let noun = if n == 1 { "replacement" } else { "replacements" };
        Some(format!("make {n} {noun} in {}", change.path))
    }
}

pub struct ApplyPatch;

impl Tool for ApplyPatch {
    const NAME: &'static str = "apply_patch";
    const TITLE: &'static str = "Apply a patch";
    type Params = ApplyPatchParams;

    fn run(ctx: &mut Ctx<'_>, params: ApplyPatchParams) -> ToolResult {
        apply_patch(ctx, params)
    }
}
