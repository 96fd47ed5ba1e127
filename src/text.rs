//! Pure text handling for the file tools (decode, edit, patch, diff, count lines); no IO, paths or permissions.
//!
//! Everything here works on a file's content held with LF line breaks. A
//! [`TextFile`] turns a file's bytes into that form and back: it strips and
//! remembers a UTF-8 byte order mark, remembers whether the file's line breaks
//! are LF, CRLF or a mixture, and puts all of that back when the edited text is
//! encoded, so that a file nobody changed round-trips byte for byte.
//!
//! The edit functions ([`apply_edit`], [`apply_multiedit`]) do literal
//! replacement. The patch functions ([`parse_patch`], [`apply_update_chunks`])
//! understand the Codex `*** Begin Patch` grammar. [`unified_diff`] renders the
//! hunks that an edit's answer shows, and [`count_lines`] counts lines the way
//! a read numbers them.
//!
//! Errors carry what went wrong and render it as sentences the model reads;
//! the path in those sentences is supplied by the caller, because this module
//! never sees the file system.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use similar::{DiffOp, TextDiff};

/// How long a diff may search for a minimal answer before it settles for a
/// larger but still correct one; only pathological inputs ever reach it.
const DIFF_TIMEOUT: Duration = Duration::from_secs(2);

/// How many leading bytes are scanned for a NUL byte when telling text from
/// binary.
const BINARY_SNIFF_LEN: usize = 8 * 1024;

/// The UTF-8 byte order mark.
const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// How many match locations an ambiguity error lists at most.
const MAX_LISTED_MATCHES: usize = 10;

/// How many expected lines a patch error shows at most.
const MAX_SHOWN_LINES: usize = 6;

/// How many characters of one line an error message shows at most.
const MAX_SHOWN_LINE_CHARS: usize = 120;

// ---------------------------------------------------------------------------
// Decoding and encoding
// ---------------------------------------------------------------------------

/// The line-break convention a decoded file follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineEnding {
    /// Every line break is `\n`, or the file has no line break at all.
    Lf,
    /// Every line break is `\r\n`.
    Crlf,
    /// The file uses both `\n` and `\r\n`; each line's own ending is kept.
    Mixed,
}

/// Why a file's bytes are not treated as text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotText {
    /// A NUL byte was found at this byte offset, within the first 8 KiB.
    NulByte {
        /// The byte offset of the first NUL byte.
        offset: usize,
    },
    /// The bytes are not valid UTF-8 from this byte offset on.
    InvalidUtf8 {
        /// The byte offset where the first invalid sequence starts.
        offset: usize,
    },
}

impl NotText {
    /// Renders the refusal as a sentence naming `path`.
    pub fn message(&self, path: &str) -> String {
        match self {
            NotText::NulByte { offset } => {
                format!("{path} is not a text file: it has a NUL byte at offset {offset}, so it is treated as binary.")
            }
            NotText::InvalidUtf8 { offset } => {
                format!("{path} is not a UTF-8 text file: its bytes are not valid UTF-8 from offset {offset} on.")
            }
        }
    }
}

impl fmt::Display for NotText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message("the file"))
    }
}

impl std::error::Error for NotText {}

/// A text file's content held with LF line breaks, together with what is
/// needed to write it back the way the file was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextFile {
    /// The content without a BOM and with `\r\n` turned into `\n`.
    text: String,
    /// Whether the file started with a UTF-8 byte order mark.
    bom: bool,
    /// The file's line-break convention.
    line_ending: LineEnding,
    /// Whether the content ends with a line break.
    final_newline: bool,
    /// For a mixed file only: for each `\n` in `text`, in order, whether the
    /// file had `\r\n` there.
    crlf_at: Vec<bool>,
}

impl TextFile {
    /// Decodes a file's bytes as UTF-8 text.
    ///
    /// A leading UTF-8 byte order mark is stripped and remembered. A NUL byte
    /// within the first 8 KiB, or any invalid UTF-8, means the file is not
    /// text. Line breaks are normalised to LF; the file's convention is
    /// remembered so that [`TextFile::encode`] can restore it.
    pub fn decode(bytes: &[u8]) -> Result<TextFile, NotText> {
        let sniff = &bytes[..bytes.len().min(BINARY_SNIFF_LEN)];
        if let Some(offset) = sniff.iter().position(|&b| b == 0) {
            return Err(NotText::NulByte { offset });
        }
        let (bom, body) = match bytes.strip_prefix(UTF8_BOM) {
            Some(rest) => (true, rest),
            None => (false, bytes),
        };
        let raw = std::str::from_utf8(body)
            .map_err(|e| NotText::InvalidUtf8 { offset: e.valid_up_to() + if bom { UTF8_BOM.len() } else { 0 } })?;

        let raw_bytes = raw.as_bytes();
        let mut crlf_at = Vec::new();
        for (i, &b) in raw_bytes.iter().enumerate() {
            if b == b'\n' {
                crlf_at.push(i > 0 && raw_bytes[i - 1] == b'\r');
            }
        }
        let crlf = crlf_at.iter().filter(|&&c| c).count();
        let lf = crlf_at.len() - crlf;
        let line_ending = match (crlf, lf) {
            (0, _) => LineEnding::Lf,
            (_, 0) => LineEnding::Crlf,
            _ => LineEnding::Mixed,
        };
        let text = match line_ending {
            LineEnding::Lf => raw.to_string(),
            LineEnding::Crlf | LineEnding::Mixed => raw.replace("\r\n", "\n"),
        };
        if line_ending != LineEnding::Mixed {
            crlf_at.clear();
        }
        Ok(TextFile { final_newline: text.ends_with('\n'), text, bom, line_ending, crlf_at })
    }

    /// Returns the content with LF line breaks and without a BOM, the form
    /// that edits, patches and diffs work on.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Consumes the file and returns its LF content.
    pub fn into_text(self) -> String {
        self.text
    }

    /// Tells whether the file started with a UTF-8 byte order mark.
    pub fn has_bom(&self) -> bool {
        self.bom
    }

    /// Returns the file's line-break convention.
    pub fn line_ending(&self) -> LineEnding {
        self.line_ending
    }

    /// Tells whether the file's content ends with a line break.
    pub fn has_final_newline(&self) -> bool {
        self.final_newline
    }

    /// Counts the file's lines the way a read numbers them.
    pub fn line_count(&self) -> usize {
        count_lines(&self.text)
    }

    /// Encodes new LF content the way this file was stored.
    ///
    /// The BOM is put back if the file had one. A CRLF file gets `\r\n` for
    /// every `\n`. A mixed file keeps each unchanged line's own ending; a new
    /// or rewritten line takes the ending of the line it replaces or follows,
    /// or else the ending most of the file uses. A final newline is neither
    /// added nor removed: whatever `new_text_lf` ends with is kept. When
    /// `new_text_lf` equals [`TextFile::text`] the original bytes come back
    /// exactly.
    ///
    /// `new_text_lf` should use LF line breaks (see [`to_lf`]); a `\r\n` left
    /// in it is treated as a `\r` followed by a line break.
    pub fn encode(&self, new_text_lf: &str) -> Vec<u8> {
        let mut out = Vec::with_capacity(new_text_lf.len() + 3 + new_text_lf.len() / 32);
        if self.bom {
            out.extend_from_slice(UTF8_BOM);
        }
        match self.line_ending {
            LineEnding::Lf => out.extend_from_slice(new_text_lf.as_bytes()),
            LineEnding::Crlf => out.extend_from_slice(new_text_lf.replace('\n', "\r\n").as_bytes()),
            LineEnding::Mixed => out.extend_from_slice(self.encode_mixed(new_text_lf).as_bytes()),
        }
        out
    }

    /// [`TextFile::encode`] knowing where the new text's line breaks come
    /// from (see [`Breaks`]): in a mixed file each kept break keeps its own
    /// ending, even among lines that read alike, and a new one takes the
    /// ending of the break before it (else after it, else the file's usual one).
    pub fn encode_traced(&self, new_text_lf: &str, breaks: &[Option<usize>]) -> Vec<u8> {
        if self.line_ending != LineEnding::Mixed {
            return self.encode(new_text_lf);
        }
        let majority_crlf = self.crlf_at.iter().filter(|&&c| c).count() * 2 > self.crlf_at.len();
        let count = new_text_lf.bytes().filter(|&b| b == b'\n').count();
        let known: Vec<Option<bool>> =
            (0..count).map(|i| breaks.get(i).copied().flatten().and_then(|j| self.crlf_at.get(j).copied())).collect();
        let mut endings = Vec::with_capacity(count);
        for i in 0..count {
            let ending = known[i]
                .or_else(|| endings.last().copied())
                .or_else(|| known[i..].iter().find_map(|k| *k))
                .unwrap_or(majority_crlf);
            endings.push(ending);
        }
        let mut out = Vec::with_capacity(new_text_lf.len() + count + 3);
        if self.bom {
            out.extend_from_slice(UTF8_BOM);
        }
        let mut endings = endings.into_iter();
        for piece in new_text_lf.split_inclusive('\n') {
            match piece.strip_suffix('\n') {
                Some(body) => {
                    out.extend_from_slice(body.as_bytes());
                    out.extend_from_slice(if endings.next().unwrap_or(false) { b"\r\n" } else { b"\n" });
                }
                None => out.extend_from_slice(piece.as_bytes()),
            }
        }
        out
    }

    /// The unified diff from this file to `new_bytes` (as [`TextFile::encode`]
    /// makes them): over the LF texts, except in a mixed file, where lines
    /// that read alike may differ by their ending, so the lines are compared
    /// with their endings (and shown without the `\r`).
    pub fn diff_to(&self, new_text_lf: &str, new_bytes: &[u8]) -> String {
        if self.line_ending != LineEnding::Mixed {
            return unified_diff(&self.text, new_text_lf);
        }
        let old = self.encode(&self.text);
        let strip = |bytes: &[u8]| -> String {
            let bytes = bytes.strip_prefix(UTF8_BOM).unwrap_or(bytes);
            String::from_utf8_lossy(bytes).into_owned()
        };
        unified_diff(&strip(&old), &strip(new_bytes))
    }

    /// Restores per-line endings of a mixed file by diffing the old and new
    /// LF content line by line.
    fn encode_mixed(&self, new_text: &str) -> String {
        let old_lines = split_lines_inclusive(&self.text);
        let new_lines = split_lines_inclusive(new_text);
        // The ending of old line `i`, if that line has one.
        let old_ending = |i: usize| -> Option<bool> {
            if i < old_lines.len() && old_lines[i].ends_with('\n') {
                self.crlf_at.get(i).copied()
            } else {
                None
            }
        };
        let crlf_count = self.crlf_at.iter().filter(|&&c| c).count();
        let majority_crlf = crlf_count * 2 > self.crlf_at.len();

        let mut out = String::with_capacity(new_text.len() + crlf_count + 16);
        let mut push = |line: &str, crlf: bool| match line.strip_suffix('\n') {
            Some(body) => {
                out.push_str(body);
                out.push_str(if crlf { "\r\n" } else { "\n" });
            }
            None => out.push_str(line),
        };

        if new_text == self.text {
            for (i, line) in new_lines.iter().enumerate() {
                push(line, old_ending(i).unwrap_or(majority_crlf));
            }
            return out;
        }

        let diff = TextDiff::configure().timeout(DIFF_TIMEOUT).diff_slices(&old_lines, &new_lines);
        for op in diff.ops() {
            match *op {
                DiffOp::Equal { old_index, new_index, len } => {
                    for k in 0..len {
                        let ending = old_ending(old_index + k).unwrap_or(majority_crlf);
                        push(new_lines[new_index + k], ending);
                    }
                }
                DiffOp::Delete { .. } => {}
                DiffOp::Insert { old_index, new_index, new_len } => {
                    let ending = old_index
                        .checked_sub(1)
                        .and_then(old_ending)
                        .or_else(|| old_ending(old_index))
                        .unwrap_or(majority_crlf);
                    for k in 0..new_len {
                        push(new_lines[new_index + k], ending);
                    }
                }
                DiffOp::Replace { old_index, old_len, new_index, new_len } => {
                    for k in 0..new_len {
                        let source = old_index + k.min(old_len.saturating_sub(1));
                        let ending = old_ending(source).unwrap_or(majority_crlf);
                        push(new_lines[new_index + k], ending);
                    }
                }
            }
        }
        out
    }
}

/// Turns every `\r\n` in `s` into `\n`, borrowing when there is none.
pub fn to_lf(s: &str) -> Cow<'_, str> {
    if s.contains("\r\n") {
        Cow::Owned(s.replace("\r\n", "\n"))
    } else {
        Cow::Borrowed(s)
    }
}

/// Counts the lines of `text` the way a read numbers them.
///
/// Each `\n` ends a line, and text after the last `\n` is one more line; a
/// final newline does not start a new line, and empty text has no lines.
pub fn count_lines(text: &str) -> usize {
    if text.is_empty() {
        return 0;
    }
    let breaks = text.bytes().filter(|&b| b == b'\n').count();
    breaks + usize::from(!text.ends_with('\n'))
}

/// Splits text into lines that keep their `\n`, the last one possibly
/// without it; empty text has no lines.
fn split_lines_inclusive(text: &str) -> Vec<&str> {
    text.split_inclusive('\n').collect()
}

/// Shortens a line for an error message.
fn shorten(line: &str) -> Cow<'_, str> {
    match line.char_indices().nth(MAX_SHOWN_LINE_CHARS) {
        Some((cut, _)) => Cow::Owned(format!("{}…", &line[..cut])),
        None => Cow::Borrowed(line),
    }
}

// ---------------------------------------------------------------------------
// Literal edits
// ---------------------------------------------------------------------------

/// Why a literal edit could not be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EditError {
    /// `old_string` was empty.
    EmptyOld,
    /// `old_string` and `new_string` were the same text.
    NoChange,
    /// `old_string` does not occur in the file.
    NotFound {
        /// A likely reason, when one was recognised.
        hint: Option<NotFoundHint>,
    },
    /// `old_string` occurs more than once and `replace_all` was not set.
    Ambiguous {
        /// How many times `old_string` occurs.
        count: usize,
        /// The distinct 1-based line numbers where matches start, at most ten.
        lines: Vec<usize>,
        /// Whether matches start on more lines than are listed.
        more: bool,
    },
    /// The result would be larger than a file the tools open.
    TooLarge {
        /// The result's size in bytes.
        bytes: usize,
    },
}

/// The largest text an edit may make, and the largest file the tools open (64 MiB).
pub const MAX_TEXT_BYTES: usize = 64 * 1024 * 1024;

/// A recognised near miss for an `old_string` that was not found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotFoundHint {
    /// The text matches these 1-based lines if leading and trailing whitespace
    /// of each line is ignored.
    Whitespace {
        /// The first matching line.
        first_line: usize,
        /// The last matching line.
        last_line: usize,
    },
    /// The text would match without the `N: ` line numbers a read puts in
    /// front of each line.
    LineNumbers,
}

impl EditError {
    /// Renders the error as sentences the model reads, naming `path`.
    pub fn message(&self, path: &str) -> String {
        match self {
            EditError::EmptyOld => format!(
                "old_string is empty, so it does not say what to replace in {path}; give the exact text to replace, or use write to replace the whole file."
            ),
            EditError::NoChange => format!(
                "old_string and new_string are the same, so the edit would not change {path}."
            ),
            EditError::NotFound { hint: None } => format!("old_string was not found in {path}."),
            EditError::NotFound {
                hint: Some(NotFoundHint::Whitespace { first_line, last_line }),
            } => {
                let place = if first_line == last_line {
                    format!("line {first_line} matches")
                } else {
                    format!("lines {first_line}-{last_line} match")
                };
                format!(
                    "old_string was not found in {path}, but {place} it if leading and trailing whitespace is ignored; copy the text exactly as the file has it, indentation included."
                )
            }
            EditError::NotFound { hint: Some(NotFoundHint::LineNumbers) } => format!(
                "old_string was not found in {path}; it seems to include the line numbers that read puts in front of each line, which are not part of the file."
            ),
            EditError::Ambiguous { count, lines, more } => {
                let mut listed = lines.iter().map(usize::to_string).collect::<Vec<_>>().join(", ");
                if *more {
                    listed.push_str(", …");
                }
                let noun = if lines.len() == 1 && !more { "line" } else { "lines" };
                format!(
                    "old_string matches {count} times in {path} ({noun} {listed}); give more context to make it unique, or set replace_all."
                )
            }
            EditError::TooLarge { bytes } => format!(
                "Not changed: {path} would become {bytes} bytes, more than the {} MiB a file may have here.",
                MAX_TEXT_BYTES >> 20
            ),
        }
    }
}

impl fmt::Display for EditError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message("the file"))
    }
}

impl std::error::Error for EditError {}

/// Replaces the literal text `old` with `new` in `text_lf`.
///
/// `old` and `new` are normalised to LF first, since the text is held with LF
/// line breaks. Without `replace_all`, `old` must occur exactly once; with it,
/// every non-overlapping occurrence is replaced. Returns the new text and the
/// number of replacements made.
pub fn apply_edit(text_lf: &str, old: &str, new: &str, replace_all: bool) -> Result<(String, usize), EditError> {
    apply_edit_traced(text_lf, old, new, replace_all).map(|(text, count, _)| (text, count))
}

/// Where each line break of an edited text comes from, for a file whose
/// lines end differently ([`TextFile::encode_traced`]): for the i-th `\n`,
/// the index of the original text's `\n` it is, or, for one an edit wrote in
/// place of others, the one it replaces (the k-th new for the k-th old,
/// the last old for any more); `None` for one added where none was.
pub type Breaks = Vec<Option<usize>>;

/// `text` with the byte ranges `cuts` (sorted, not overlapping) replaced by
/// `new`, and where the result's line breaks come from.
fn splice(text: &str, cuts: &[(usize, usize)], new: &str) -> (String, Breaks) {
    let mut out = String::with_capacity(text.len() + cuts.len() * new.len());
    let mut breaks = Vec::new();
    let mut seen = 0usize;
    let keep = |piece: &str, out: &mut String, breaks: &mut Breaks, seen: &mut usize| {
        for _ in piece.bytes().filter(|&b| b == b'\n') {
            breaks.push(Some(*seen));
            *seen += 1;
        }
        out.push_str(piece);
    };
    let mut at = 0;
    for &(start, end) in cuts {
        keep(&text[at..start], &mut out, &mut breaks, &mut seen);
        let replaced = text[start..end].bytes().filter(|&b| b == b'\n').count();
        for k in 0..new.bytes().filter(|&b| b == b'\n').count() {
            breaks.push((replaced > 0).then(|| seen + k.min(replaced - 1)));
        }
        seen += replaced;
        out.push_str(new);
        at = end;
    }
    keep(&text[at..], &mut out, &mut breaks, &mut seen);
    (out, breaks)
}

/// [`apply_edit`], also answering where the new text's line breaks come from.
pub fn apply_edit_traced(
    text_lf: &str,
    old: &str,
    new: &str,
    replace_all: bool,
) -> Result<(String, usize, Breaks), EditError> {
    let old = to_lf(old);
    let new = to_lf(new);
    if old.is_empty() {
        return Err(EditError::EmptyOld);
    }
    if old == new {
        return Err(EditError::NoChange);
    }
    let starts: Vec<usize> = text_lf.match_indices(old.as_ref()).map(|(i, _)| i).collect();
    match starts.len() {
        0 => Err(EditError::NotFound { hint: not_found_hint(text_lf, &old) }),
        count if count == 1 || replace_all => {
            // Checked before the text is made: a small file can grow without bound.
            let bytes = (text_lf.len() as u128 + count as u128 * new.len() as u128)
                .saturating_sub(count as u128 * old.len() as u128);
            if bytes > MAX_TEXT_BYTES as u128 {
                return Err(EditError::TooLarge { bytes: bytes.min(usize::MAX as u128) as usize });
            }
            let cuts: Vec<(usize, usize)> = starts.iter().map(|&at| (at, at + old.len())).collect();
            let (out, breaks) = splice(text_lf, &cuts, &new);
            Ok((out, count, breaks))
        }
        count => {
            let mut lines = Vec::new();
            let mut more = false;
            let (mut line, mut scanned) = (1, 0);
            for &at in &starts {
                line += text_lf.as_bytes()[scanned..at].iter().filter(|&&b| b == b'\n').count();
                scanned = at;
                if lines.last() == Some(&line) {
                    continue;
                }
                if lines.len() == MAX_LISTED_MATCHES {
                    more = true;
                    break;
                }
                lines.push(line);
            }
            Err(EditError::Ambiguous { count, lines, more })
        }
    }
}

/// Looks for a recognisable reason why `old` was not found in `text`.
fn not_found_hint(text: &str, old: &str) -> Option<NotFoundHint> {
    if let Some(stripped) = strip_read_line_numbers(old) {
        if text.contains(stripped.as_str()) || whitespace_location(text, &stripped).is_some() {
            return Some(NotFoundHint::LineNumbers);
        }
    }
    whitespace_location(text, old).map(|(first_line, last_line)| NotFoundHint::Whitespace { first_line, last_line })
}

/// Removes `N: ` (or `N<tab>`) prefixes from every non-empty line of `s`, if
/// every non-empty line has one.
fn strip_read_line_numbers(s: &str) -> Option<String> {
    let mut out = Vec::new();
    let mut seen = false;
    for line in s.split('\n') {
        if line.trim().is_empty() {
            out.push(line);
            continue;
        }
        let body = line.trim_start();
        let digits = body.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let rest = &body[digits..];
        let rest = rest.strip_prefix(": ").or_else(|| rest.strip_prefix(':')).or_else(|| rest.strip_prefix('\t'))?;
        out.push(rest);
        seen = true;
    }
    seen.then(|| out.join("\n"))
}

/// Finds the first lines of `text` that match `old` when each line's leading
/// and trailing whitespace is ignored, returning their 1-based range.
///
/// The first line of `old` may be the end of a file line and its last line
/// the start of one, because `old` need not begin or end at a line boundary.
fn whitespace_location(text: &str, old: &str) -> Option<(usize, usize)> {
    let mut pat: Vec<&str> = old.split('\n').map(str::trim).collect();
    while pat.first().is_some_and(|l| l.is_empty()) {
        pat.remove(0);
    }
    while pat.last().is_some_and(|l| l.is_empty()) {
        pat.pop();
    }
    if pat.is_empty() {
        return None;
    }
    let lines: Vec<&str> = text.split('\n').map(str::trim).collect();
    if pat.len() > lines.len() {
        return None;
    }
    let n = pat.len();
    (0..=lines.len() - n)
        .find(|&i| {
            if n == 1 {
                return lines[i].contains(pat[0]);
            }
            lines[i].ends_with(pat[0])
                && lines[i + n - 1].starts_with(pat[n - 1])
                && (1..n - 1).all(|k| lines[i + k] == pat[k])
        })
        .map(|i| (i + 1, i + n))
}

/// Applies literal edits `(old, new, replace_all)` one after another, each to
/// the result of the one before, all or nothing.
///
/// If an edit fails, the error is that edit's 0-based index and why it
/// failed, and the caller keeps the original text; say it to the model as
/// "Edit {index + 1} of {edits.len()} failed, so none was made: …". Line
/// numbers in an ambiguity error count in the text as the earlier edits left
/// it. An empty list returns the text unchanged.
pub fn apply_multiedit<S: AsRef<str>>(text_lf: &str, edits: &[(S, S, bool)]) -> Result<String, (usize, EditError)> {
    apply_multiedit_traced(text_lf, edits).map(|(text, _)| text)
}

/// [`apply_multiedit`], also answering where the new text's line breaks come from.
pub fn apply_multiedit_traced<S: AsRef<str>>(
    text_lf: &str,
    edits: &[(S, S, bool)],
) -> Result<(String, Breaks), (usize, EditError)> {
    let mut text = text_lf.to_string();
    let mut breaks: Breaks = (0..text.bytes().filter(|&b| b == b'\n').count()).map(Some).collect();
    for (index, (old, new, replace_all)) in edits.iter().enumerate() {
        match apply_edit_traced(&text, old.as_ref(), new.as_ref(), *replace_all) {
            Ok((next, _, next_breaks)) => {
                breaks = next_breaks.iter().map(|b| b.and_then(|j| breaks.get(j).copied().flatten())).collect();
                text = next;
            }
            Err(error) => return Err((index, error)),
        }
    }
    Ok((text, breaks))
}

// ---------------------------------------------------------------------------
// apply_patch: parsing
// ---------------------------------------------------------------------------

const BEGIN_PATCH: &str = "*** Begin Patch";
const END_PATCH: &str = "*** End Patch";
const ADD_FILE: &str = "*** Add File:";
const DELETE_FILE: &str = "*** Delete File:";
const UPDATE_FILE: &str = "*** Update File:";
const MOVE_TO: &str = "*** Move to:";
const END_OF_FILE: &str = "*** End of File";

/// One file operation of a patch, with the path as the patch gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatchOp {
    /// Create a file with this content (LF line breaks, each line ending in
    /// `\n`, or empty).
    Add {
        /// The path of the file to create.
        path: String,
        /// The new file's content.
        content: String,
    },
    /// Delete a file.
    Delete {
        /// The path of the file to delete.
        path: String,
    },
    /// Change a file, and possibly move it.
    Update {
        /// The path of the file to change.
        path: String,
        /// Where the file moves to, if it moves.
        move_to: Option<String>,
        /// The changes, in file order; empty only for a pure move.
        chunks: Vec<UpdateChunk>,
    },
}

impl PatchOp {
    /// Returns the path the operation starts from (for a move, the source).
    pub fn path(&self) -> &str {
        match self {
            PatchOp::Add { path, .. } | PatchOp::Delete { path } | PatchOp::Update { path, .. } => path,
        }
    }
}

/// One line of an update chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChunkLine {
    /// A line that stays (` ` prefix, or an empty line inside a chunk).
    Context(String),
    /// A line that goes (`-` prefix).
    Remove(String),
    /// A line that comes (`+` prefix).
    Add(String),
}

/// One `@@` change of an `*** Update File:` operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdateChunk {
    /// The text after `@@`, a line to find before the chunk's lines (usually
    /// a function or class header), if one was given.
    pub context: Option<String>,
    /// The chunk's lines in patch order.
    pub lines: Vec<ChunkLine>,
    /// Whether `*** End of File` followed, so the lines sit at the file's end.
    pub end_of_file: bool,
    /// The 1-based line of the patch where the chunk starts.
    pub patch_line: usize,
}

impl UpdateChunk {
    /// Returns the lines the chunk expects to find: context and removed lines.
    pub fn old_lines(&self) -> Vec<&str> {
        self.lines
            .iter()
            .filter_map(|l| match l {
                ChunkLine::Context(s) | ChunkLine::Remove(s) => Some(s.as_str()),
                ChunkLine::Add(_) => None,
            })
            .collect()
    }

    /// Returns the lines the chunk leaves: context and added lines.
    pub fn new_lines(&self) -> Vec<&str> {
        self.lines
            .iter()
            .filter_map(|l| match l {
                ChunkLine::Context(s) | ChunkLine::Add(s) => Some(s.as_str()),
                ChunkLine::Remove(_) => None,
            })
            .collect()
    }
}

/// A patch that does not follow the grammar.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("The patch is malformed at line {line}: {detail}")]
pub struct PatchParseError {
    /// The 1-based line of the patch text where the problem is.
    pub line: usize,
    /// What was expected there and what was found, as a sentence.
    pub detail: String,
}

fn parse_error(line: usize, detail: impl Into<String>) -> PatchParseError {
    PatchParseError { line, detail: detail.into() }
}

/// Parses a patch in the Codex `*** Begin Patch` grammar into its file
/// operations, in patch order.
///
/// The grammar is `*** Begin Patch`, then operations, then `*** End Patch`.
/// `*** Add File: path` is followed by the content, each line prefixed `+`.
/// `*** Delete File: path` stands alone. `*** Update File: path` may be
/// followed by `*** Move to: path`, then by chunks: each starts with `@@` or
/// `@@ context line` (the first may omit it) and holds lines prefixed ` `
/// (context), `-` (removed) or `+` (added), optionally closed by
/// `*** End of File`.
///
/// Like Codex, parsing is lenient: surrounding blank lines and whitespace
/// around markers are ignored, `\r\n` line breaks and a missing final newline
/// are fine, a heredoc wrapper (`<<'EOF'` … `EOF`, also with
/// `apply_patch` before it) is removed, blank lines between chunks are
/// skipped, and an empty line inside a chunk is an empty context line. Beyond
/// Codex, a unified-diff header such as `@@ -12,3 +12,4 @@` counts as a bare
/// `@@`, blank lines inside an added file's content are kept as empty lines,
/// and an update with `*** Move to:` but no chunks is a pure move.
pub fn parse_patch(patch: &str) -> Result<Vec<PatchOp>, PatchParseError> {
    let lines: Vec<&str> = patch.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l)).collect();
    let non_blank = |i: &usize| !lines[*i].trim().is_empty();

    let Some(mut first) = (0..lines.len()).find(non_blank) else {
        return Err(parse_error(1, format!("the patch is empty; expected '{BEGIN_PATCH}'.")));
    };
    let mut last = (0..lines.len()).rev().find(non_blank).unwrap_or(first);

    if let Some(delimiter) = heredoc_delimiter(lines[first].trim()) {
        if last > first && lines[last].trim() == delimiter {
            last -= 1;
        }
        first += 1;
        match (first..=last).find(non_blank) {
            Some(f) => first = f,
            None => {
                return Err(parse_error(first + 1, format!("the heredoc holds no patch; expected '{BEGIN_PATCH}'.")))
            }
        }
        last = (first..=last).rev().find(non_blank).unwrap_or(first);
    }

    if lines[first].trim() != BEGIN_PATCH {
        return Err(parse_error(
            first + 1,
            format!("expected '{BEGIN_PATCH}' as the first line, found '{}'.", shorten(lines[first].trim())),
        ));
    }
    if last == first {
        return Err(parse_error(
            first + 2,
            format!("the patch ends after '{BEGIN_PATCH}'; expected file operations and then '{END_PATCH}'."),
        ));
    }
    if lines[last].trim() != END_PATCH {
        return Err(parse_error(
            last + 1,
            format!("expected '{END_PATCH}' as the last line, found '{}'.", shorten(lines[last].trim())),
        ));
    }

    let mut parser = Parser { lines: &lines, pos: first + 1, end: last };
    let ops = parser.operations()?;
    if ops.is_empty() {
        return Err(parse_error(
            last + 1,
            format!(
                "expected a file operation ('{ADD_FILE} path', '{UPDATE_FILE} path' or '{DELETE_FILE} path') before '{END_PATCH}'."
            ),
        ));
    }
    Ok(ops)
}

/// Recognises a heredoc opening line such as `<<'EOF'`, `<<EOF`, `<<"EOF"`,
/// `<<-EOF` or `apply_patch <<'PATCH'`, returning its delimiter.
fn heredoc_delimiter(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("apply_patch").map(str::trim_start).unwrap_or(line);
    let rest = rest.strip_prefix("<<")?;
    let rest = rest.strip_prefix('-').unwrap_or(rest).trim();
    let word = rest
        .strip_prefix('\'')
        .and_then(|r| r.strip_suffix('\''))
        .or_else(|| rest.strip_prefix('"').and_then(|r| r.strip_suffix('"')))
        .unwrap_or(rest);
    let valid = !word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    valid.then_some(word)
}

/// Walks the lines between `*** Begin Patch` and `*** End Patch`.
struct Parser<'a> {
    lines: &'a [&'a str],
    /// The 0-based index of the next line to read.
    pos: usize,
    /// The 0-based index of the `*** End Patch` line.
    end: usize,
}

impl Parser<'_> {
    fn operations(&mut self) -> Result<Vec<PatchOp>, PatchParseError> {
        let mut ops = Vec::new();
        while self.pos < self.end {
            let line = self.lines[self.pos].trim();
            let line_no = self.pos + 1;
            if line.is_empty() {
                self.pos += 1;
            } else if let Some(path) = line.strip_prefix(ADD_FILE) {
                let path = header_path(path, line_no, ADD_FILE)?;
                self.pos += 1;
                let content = self.add_content();
                ops.push(PatchOp::Add { path, content });
            } else if let Some(path) = line.strip_prefix(DELETE_FILE) {
                let path = header_path(path, line_no, DELETE_FILE)?;
                self.pos += 1;
                ops.push(PatchOp::Delete { path });
            } else if let Some(path) = line.strip_prefix(UPDATE_FILE) {
                let path = header_path(path, line_no, UPDATE_FILE)?;
                self.pos += 1;
                ops.push(self.update(path, line_no)?);
            } else if line == END_PATCH {
                return Err(parse_error(
                    line_no,
                    format!("found '{END_PATCH}' before the end of the patch; send one patch with every operation between '{BEGIN_PATCH}' and a single '{END_PATCH}'."),
                ));
            } else {
                return Err(parse_error(
                    line_no,
                    format!(
                        "expected a file operation ('{ADD_FILE} path', '{UPDATE_FILE} path' or '{DELETE_FILE} path'), found '{}'.",
                        shorten(line)
                    ),
                ));
            }
        }
        Ok(ops)
    }

    /// Reads the `+` lines of an added file.
    fn add_content(&mut self) -> String {
        let mut content = String::new();
        while self.pos < self.end {
            let line = self.lines[self.pos];
            if let Some(body) = line.strip_prefix('+') {
                content.push_str(body);
                content.push('\n');
                self.pos += 1;
            } else if line.trim().is_empty() {
                // A blank line is content only if more content follows it.
                let next = (self.pos..self.end).find(|&i| !self.lines[i].trim().is_empty());
                if !next.is_some_and(|i| self.lines[i].starts_with('+')) {
                    break;
                }
                content.push('\n');
                self.pos += 1;
            } else {
                break;
            }
        }
        content
    }

    /// Reads an update operation after its header line.
    fn update(&mut self, path: String, header_line: usize) -> Result<PatchOp, PatchParseError> {
        self.skip_blank();
        let mut move_to = None;
        if self.pos < self.end {
            if let Some(target) = self.lines[self.pos].trim().strip_prefix(MOVE_TO) {
                move_to = Some(header_path(target, self.pos + 1, MOVE_TO)?);
                self.pos += 1;
            }
        }

        let mut chunks: Vec<UpdateChunk> = Vec::new();
        loop {
            self.skip_blank();
            if self.pos >= self.end {
                break;
            }
            let line = self.lines[self.pos];
            let line_no = self.pos + 1;
            let trimmed = line.trim();
            if trimmed == END_OF_FILE {
                return Err(parse_error(
                    line_no,
                    format!("'{END_OF_FILE}' must follow the lines of a change, but no change precedes it here."),
                ));
            }
            if line.starts_with('*') {
                break;
            }
            let context = if let Some(rest) = trimmed.strip_prefix("@@") {
                self.pos += 1;
                at_at_context(rest)
            } else if chunks.is_empty() && line.starts_with([' ', '-', '+']) {
                None
            } else {
                return Err(parse_error(
                    line_no,
                    format!(
                        "expected a line starting with ' ' (context), '-' (removed) or '+' (added), '@@' to start the next change, or the next '*** ' operation, found '{}'.",
                        shorten(line)
                    ),
                ));
            };
            let chunk = self.chunk_body(context, line_no);
            if chunk.lines.is_empty() {
                return Err(parse_error(
                    line_no,
                    format!("the change in '{path}' that starts here has no lines; expected lines starting with ' ', '-' or '+'."),
                ));
            }
            chunks.push(chunk);
        }

        if chunks.is_empty() && move_to.is_none() {
            return Err(parse_error(
                header_line,
                format!(
                    "'{UPDATE_FILE} {path}' has no changes; expected '@@' and lines starting with ' ', '-' or '+'."
                ),
            ));
        }
        Ok(PatchOp::Update { path, move_to, chunks })
    }

    /// Reads a chunk's lines, from the line after its `@@` (if any).
    fn chunk_body(&mut self, context: Option<String>, patch_line: usize) -> UpdateChunk {
        let mut chunk = UpdateChunk { context, lines: Vec::new(), end_of_file: false, patch_line };
        // Empty lines count as context only when more chunk lines follow.
        let mut pending_blank = 0;
        while self.pos < self.end {
            let line = self.lines[self.pos];
            let kind = match line.chars().next() {
                None => {
                    pending_blank += 1;
                    self.pos += 1;
                    continue;
                }
                Some(' ') => ChunkLine::Context(line[1..].to_string()),
                Some('-') => ChunkLine::Remove(line[1..].to_string()),
                Some('+') => ChunkLine::Add(line[1..].to_string()),
                Some(_) => {
                    if line.trim() == END_OF_FILE {
                        chunk.end_of_file = true;
                        self.pos += 1;
                    }
                    break;
                }
            };
            for _ in 0..pending_blank {
                chunk.lines.push(ChunkLine::Context(String::new()));
            }
            pending_blank = 0;
            chunk.lines.push(kind);
            self.pos += 1;
        }
        chunk
    }

    fn skip_blank(&mut self) {
        while self.pos < self.end && self.lines[self.pos].trim().is_empty() {
            self.pos += 1;
        }
    }
}

/// Reads a path after an operation marker.
fn header_path(rest: &str, line: usize, marker: &str) -> Result<String, PatchParseError> {
    let path = rest.trim();
    if path.is_empty() {
        return Err(parse_error(line, format!("expected a path after '{marker}'.")));
    }
    Ok(path.to_string())
}

/// Reads what follows `@@`: nothing, a context line, or a unified-diff range
/// header (`-12,3 +12,4 @@ tail`) whose tail, if any, is the context line.
fn at_at_context(rest: &str) -> Option<String> {
    let rest = rest.trim();
    let rest = unified_range_tail(rest).unwrap_or(rest).trim();
    (!rest.is_empty()).then(|| rest.to_string())
}

/// If `s` is `-a[,b] +c[,d] @@ tail`, returns `tail`.
fn unified_range_tail(s: &str) -> Option<&str> {
    fn range(s: &str, sign: char) -> Option<&str> {
        let s = s.strip_prefix(sign)?;
        let n = s.bytes().take_while(|b| b.is_ascii_digit() || *b == b',').count();
        (n > 0).then(|| &s[n..])
    }
    let s = range(s, '-')?;
    let s = range(s.strip_prefix(' ')?, '+')?;
    s.trim_start().strip_prefix("@@")
}

// ---------------------------------------------------------------------------
// apply_patch: applying update chunks
// ---------------------------------------------------------------------------

/// Why an update's chunks could not be applied to the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatchError {
    /// A chunk's `@@ context` line was not found.
    AnchorNotFound {
        /// The 1-based number of the chunk within its update.
        chunk: usize,
        /// The 1-based patch line where the chunk starts.
        patch_line: usize,
        /// The context line that was looked for.
        context: String,
        /// The search started below this many lines of the file.
        after_line: usize,
    },
    /// A chunk's context and removed lines were not found in order.
    LinesNotFound {
        /// The 1-based number of the chunk within its update.
        chunk: usize,
        /// The 1-based patch line where the chunk starts.
        patch_line: usize,
        /// The lines that were looked for.
        expected: Vec<String>,
        /// The search started below this many lines of the file.
        after_line: usize,
        /// Whether the lines had to be at the end of the file.
        end_of_file: bool,
    },
}

impl PatchError {
    /// Renders the error as sentences the model reads, naming `path`.
    pub fn message(&self, path: &str) -> String {
        let after = |n: usize| {
            if n > 0 {
                format!(" after line {n}")
            } else {
                String::new()
            }
        };
        match self {
            PatchError::AnchorNotFound { chunk, patch_line, context, after_line } => format!(
                "Change {chunk} to {path} (patch line {patch_line}) did not apply: no line matching '@@ {}' was found{}. Read the file again and anchor the change on a line it has.",
                shorten(context),
                after(*after_line)
            ),
            PatchError::LinesNotFound { chunk, patch_line, expected, after_line, end_of_file } => {
                let place = if *end_of_file { " at the end of the file" } else { "" };
                let mut shown: String = expected
                    .iter()
                    .take(MAX_SHOWN_LINES)
                    .map(|l| format!("\n  {}", shorten(l)))
                    .collect();
                if expected.len() > MAX_SHOWN_LINES {
                    shown.push_str(&format!("\n  … ({} more lines)", expected.len() - MAX_SHOWN_LINES));
                }
                format!(
                    "Change {chunk} to {path} (patch line {patch_line}) did not apply: these lines were not found{place}{}:{shown}\nRead the file again and copy its lines exactly; changes must come in file order.",
                    after(*after_line)
                )
            }
        }
    }
}

impl fmt::Display for PatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message("the file"))
    }
}

impl std::error::Error for PatchError {}

/// How loosely two lines may match, from strictest to loosest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fuzz {
    Exact,
    TrimEnd,
    Trim,
    /// Trimmed, with typographic dashes, quotes and spaces read as ASCII.
    Punctuation,
    /// For `@@` anchors only: the file line starts with the anchor.
    Prefix,
}

const LINE_FUZZ: [Fuzz; 4] = [Fuzz::Exact, Fuzz::TrimEnd, Fuzz::Trim, Fuzz::Punctuation];
const ANCHOR_FUZZ: [Fuzz; 5] = [Fuzz::Exact, Fuzz::TrimEnd, Fuzz::Trim, Fuzz::Punctuation, Fuzz::Prefix];

fn ascii_punctuation(s: &str) -> String {
    s.trim()
        .chars()
        .map(|c| match c {
            '\u{2010}'..='\u{2015}' | '\u{2212}' => '-',
            '\u{2018}'..='\u{201B}' => '\'',
            '\u{201C}'..='\u{201F}' => '"',
            '\u{00A0}' | '\u{2002}'..='\u{200A}' | '\u{202F}' | '\u{205F}' | '\u{3000}' => ' ',
            other => other,
        })
        .collect()
}

fn lines_match(file: &str, patch: &str, fuzz: Fuzz) -> bool {
    match fuzz {
        Fuzz::Exact => file == patch,
        Fuzz::TrimEnd => file.trim_end() == patch.trim_end(),
        Fuzz::Trim => file.trim() == patch.trim(),
        Fuzz::Punctuation => ascii_punctuation(file) == ascii_punctuation(patch),
        Fuzz::Prefix => {
            let p = ascii_punctuation(patch);
            !p.is_empty() && ascii_punctuation(file).starts_with(&p)
        }
    }
}

/// Finds `pattern` in `lines` at one of `candidates`, trying every candidate
/// at each strictness before loosening.
fn seek(lines: &[&str], pattern: &[&str], candidates: &[usize], levels: &[Fuzz]) -> Option<usize> {
    levels.iter().find_map(|&fuzz| {
        candidates.iter().copied().find(|&at| {
            at + pattern.len() <= lines.len() && pattern.iter().zip(&lines[at..]).all(|(p, l)| lines_match(l, p, fuzz))
        })
    })
}

/// Where a chunk may match: from `from` on, or, for an end-of-file chunk,
/// where only blank lines follow it (the very end first).
fn candidates(lines: &[&str], len: usize, from: usize, end_of_file: bool) -> Vec<usize> {
    if len > lines.len() {
        return Vec::new();
    }
    let last = lines.len() - len;
    if !end_of_file {
        return (from..=last).collect();
    }
    let mut out = Vec::new();
    let mut at = last;
    loop {
        if at < from {
            break;
        }
        out.push(at);
        // Moving up one line is allowed only over a blank trailing line.
        if at == 0 || len == 0 || !lines[at + len - 1].trim().is_empty() {
            break;
        }
        at -= 1;
    }
    out
}

/// Applies an update's chunks to the file's LF content and returns the new
/// content.
///
/// Chunks are located in order, each below the one before. A chunk's
/// `@@ context` line is found first and the chunk's lines are looked for
/// below it. Lines match exactly if they can, else ignoring trailing
/// whitespace, else ignoring surrounding whitespace, else also reading
/// typographic dashes, quotes and spaces as ASCII; an `@@` anchor may also be
/// the start of a file line. An `*** End of File` chunk must match at the end
/// of the file (blank lines may follow). If a chunk's lines end in an empty
/// line that does not match, it is retried without it, since that line often
/// stands for the file's final newline. Context lines keep the file's own
/// text, so a loose match does not rewrite them.
///
/// A chunk with nothing to find but lines to add goes right below its
/// `@@ context` line, or, without one (or with `*** End of File`), at the end
/// of the file. The result ends with a newline if the original did or was
/// empty; otherwise its missing final newline stays missing.
pub fn apply_update_chunks(original_lf: &str, chunks: &[UpdateChunk]) -> Result<String, PatchError> {
    apply_update_chunks_traced(original_lf, chunks).map(|(text, _)| text)
}

/// [`apply_update_chunks`], also answering where the new text's line breaks
/// come from: a kept or context line keeps its own; an added line takes the
/// one of the line it replaces (removed lines and added lines paired in order).
pub fn apply_update_chunks_traced(original_lf: &str, chunks: &[UpdateChunk]) -> Result<(String, Breaks), PatchError> {
    let lines: Vec<&str> = if original_lf.is_empty() {
        Vec::new()
    } else {
        original_lf.strip_suffix('\n').unwrap_or(original_lf).split('\n').collect()
    };
    let final_newline = original_lf.is_empty() || original_lf.ends_with('\n');

    // (start, removed line count, lines that take their place with the old line each stands for)
    type Placed = Vec<(String, Option<usize>)>;
    let mut replacements: Vec<(usize, usize, Placed)> = Vec::new();
    let mut cursor = 0;
    for (i, chunk) in chunks.iter().enumerate() {
        let number = i + 1;
        if let Some(context) = &chunk.context {
            let anchor_at: Vec<usize> = (cursor..lines.len()).collect();
            match seek(&lines, &[context.as_str()], &anchor_at, &ANCHOR_FUZZ) {
                Some(at) => cursor = at + 1,
                None => {
                    return Err(PatchError::AnchorNotFound {
                        chunk: number,
                        patch_line: chunk.patch_line,
                        context: context.clone(),
                        after_line: cursor,
                    })
                }
            }
        }

        let old = chunk.old_lines();
        if old.is_empty() {
            let adds: Vec<(String, Option<usize>)> =
                chunk.new_lines().into_iter().map(|l| (l.to_string(), None)).collect();
            if chunk.context.is_some() && !chunk.end_of_file {
                replacements.push((cursor, 0, adds));
            } else {
                replacements.push((lines.len(), 0, adds));
            }
            continue;
        }

        let mut body: &[ChunkLine] = &chunk.lines;
        let mut found = None;
        for attempt in 0..2 {
            if attempt == 1 {
                // Retry without a trailing empty line that stands for the final newline.
                match last_old_line(body) {
                    Some(k)
                        if matches!(&body[k], ChunkLine::Context(s) | ChunkLine::Remove(s) if s.trim().is_empty())
                            && body[k + 1..].iter().all(|l| matches!(l, ChunkLine::Add(_))) =>
                    {
                        body = &body[..k];
                    }
                    _ => break,
                }
            }
            let pattern: Vec<&str> = old_of(body);
            if pattern.is_empty() {
                break;
            }
            let at = candidates(&lines, pattern.len(), cursor, chunk.end_of_file);
            if let Some(start) = seek(&lines, &pattern, &at, &LINE_FUZZ) {
                found = Some((start, pattern.len()));
                break;
            }
        }
        let Some((start, len)) = found else {
            return Err(PatchError::LinesNotFound {
                chunk: number,
                patch_line: chunk.patch_line,
                expected: old.iter().map(|s| s.to_string()).collect(),
                after_line: cursor,
                end_of_file: chunk.end_of_file,
            });
        };

        let mut new_lines = Vec::new();
        let mut k = start;
        // Lines removed since the last context line, which added lines replace in order.
        let mut removed: std::collections::VecDeque<usize> = Default::default();
        let mut last_removed = None;
        for line in body {
            match line {
                ChunkLine::Context(_) => {
                    new_lines.push((lines[k].to_string(), Some(k)));
                    removed.clear();
                    last_removed = None;
                    k += 1;
                }
                ChunkLine::Remove(_) => {
                    removed.push_back(k);
                    last_removed = Some(k);
                    k += 1;
                }
                ChunkLine::Add(s) => new_lines.push((s.clone(), removed.pop_front().or(last_removed))),
            }
        }
        // Lines added after a trailing empty line that was dropped still belong here.
        for line in &chunk.lines[body.len()..] {
            if let ChunkLine::Add(s) = line {
                new_lines.push((s.clone(), None));
            }
        }
        replacements.push((start, len, new_lines));
        cursor = start + len;
    }

    replacements.sort_by_key(|r| r.0);
    let mut out: Vec<(String, Option<usize>)> = Vec::with_capacity(lines.len());
    let mut next = 0;
    for (start, len, new_lines) in replacements {
        out.extend((next..start).map(|i| (lines[i].to_string(), Some(i))));
        out.extend(new_lines);
        next = start + len;
    }
    out.extend((next..lines.len()).map(|i| (lines[i].to_string(), Some(i))));

    // Old line i ends with the original's i-th line break, if it has one.
    let old_breaks = original_lf.bytes().filter(|&b| b == b'\n').count();
    let mut text = String::with_capacity(original_lf.len());
    let mut breaks = Breaks::with_capacity(out.len());
    for (i, (line, origin)) in out.iter().enumerate() {
        text.push_str(line);
        if i + 1 < out.len() || final_newline {
            text.push('\n');
            breaks.push(origin.filter(|&o| o < old_breaks));
        }
    }
    Ok((text, breaks))
}

/// Returns the index of the last context or removed line of a chunk.
fn last_old_line(lines: &[ChunkLine]) -> Option<usize> {
    lines.iter().rposition(|l| !matches!(l, ChunkLine::Add(_)))
}

/// Returns the context and removed lines of a chunk's lines.
fn old_of(lines: &[ChunkLine]) -> Vec<&str> {
    lines
        .iter()
        .filter_map(|l| match l {
            ChunkLine::Context(s) | ChunkLine::Remove(s) => Some(s.as_str()),
            ChunkLine::Add(_) => None,
        })
        .collect()
}

// ---------------------------------------------------------------------------
// Diffs
// ---------------------------------------------------------------------------

/// Renders the change from `old_lf` to `new_lf` as unified-diff hunks with
/// three lines of context and no `---`/`+++` header lines.
///
/// Lines are split at `\n` only, so hunk line numbers agree with
/// [`count_lines`] and with how a read numbers lines. A last line without a
/// final newline is followed by `\ No newline at end of file`. Identical
/// texts give an empty string.
pub fn unified_diff(old_lf: &str, new_lf: &str) -> String {
    let old_lines = split_lines_inclusive(old_lf);
    let new_lines = split_lines_inclusive(new_lf);
    let diff = TextDiff::configure().newline_terminated(true).timeout(DIFF_TIMEOUT).diff_slices(&old_lines, &new_lines);
    let mut out = String::new();
    let mut udiff = diff.unified_diff();
    udiff.context_radius(3);
    for hunk in udiff.iter_hunks() {
        out.push_str(&hunk.header().to_string());
        out.push('\n');
        for change in hunk.iter_changes() {
            out.push_str(&change.tag().to_string());
            // A mixed file's lines are compared with their endings and shown without the `\r`.
            let value: &str = change.value();
            let value = match value.strip_suffix("\r\n") {
                Some(body) => std::borrow::Cow::Owned(format!("{body}\n")),
                None => std::borrow::Cow::Borrowed(value),
            };
            out.push_str(&value);
            if !value.ends_with('\n') {
                out.push_str("\n\\ No newline at end of file\n");
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;

    const P: &str = "/abs/path";

    fn decode(bytes: &[u8]) -> TextFile {
        TextFile::decode(bytes).expect("text")
    }

    fn update_chunks(patch: &str) -> Vec<UpdateChunk> {
        match parse_patch(patch).expect("parses").remove(0) {
            PatchOp::Update { chunks, .. } => chunks,
            other => panic!("expected an update, got {other:?}"),
        }
    }

    fn apply(original: &str, patch: &str) -> Result<String, PatchError> {
        apply_update_chunks(original, &update_chunks(patch))
    }

    // --- decoding and encoding ---

    #[test]
    fn lf_file_round_trips() {
        let bytes = b"one\ntwo\n";
        let f = decode(bytes);
        assert_eq!(f.text(), "one\ntwo\n");
        assert_eq!(f.line_ending(), LineEnding::Lf);
        assert!(f.has_final_newline());
        assert!(!f.has_bom());
        assert_eq!(f.encode(f.text()), bytes);
    }

    #[test]
    fn crlf_file_is_held_as_lf_and_round_trips() {
        let bytes = b"one\r\ntwo\r\n";
        let f = decode(bytes);
        assert_eq!(f.text(), "one\ntwo\n");
        assert_eq!(f.line_ending(), LineEnding::Crlf);
        assert_eq!(f.encode(f.text()), bytes);
    }

    #[test]
    fn crlf_file_edited_with_lf_old_string_stays_crlf_everywhere() {
        let f = decode(b"fn a() {\r\n    one();\r\n    two();\r\n}\r\n");
        let (new, n) =
            apply_edit(f.text(), "    one();\n    two();\n", "    uno();\n    dos();\n    tres();\n", false).unwrap();
        assert_eq!(n, 1);
        let bytes = f.encode(&new);
        assert_eq!(bytes, b"fn a() {\r\n    uno();\r\n    dos();\r\n    tres();\r\n}\r\n");
        let lone_lf = bytes.windows(2).filter(|w| w[1] == b'\n' && w[0] != b'\r').count();
        assert_eq!(lone_lf, 0);
    }

    #[test]
    fn crlf_old_and_new_strings_are_normalised() {
        let f = decode(b"a\r\nb\r\nc\r\n");
        let (new, _) = apply_edit(f.text(), "a\r\nb\r\n", "x\r\ny\r\n", false).unwrap();
        assert_eq!(new, "x\ny\nc\n");
        assert_eq!(f.encode(&new), b"x\r\ny\r\nc\r\n");
    }

    #[test]
    fn bom_is_stripped_and_restored() {
        let f = decode(b"\xEF\xBB\xBFhello\r\nworld\r\n");
        assert!(f.has_bom());
        assert_eq!(f.text(), "hello\nworld\n");
        let (new, _) = apply_edit(f.text(), "world", "there", false).unwrap();
        assert_eq!(f.encode(&new), b"\xEF\xBB\xBFhello\r\nthere\r\n");
        assert_eq!(f.encode(f.text()), b"\xEF\xBB\xBFhello\r\nworld\r\n");
    }

    #[test]
    fn missing_final_newline_is_kept() {
        let f = decode(b"a\r\nb\r\nc");
        assert!(!f.has_final_newline());
        assert_eq!(f.line_ending(), LineEnding::Crlf);
        let (new, _) = apply_edit(f.text(), "a", "A", false).unwrap();
        assert_eq!(f.encode(&new), b"A\r\nb\r\nc");
        let (new, _) = apply_edit(f.text(), "c", "C", false).unwrap();
        assert_eq!(f.encode(&new), b"a\r\nb\r\nC");
        assert_eq!(f.encode(f.text()), b"a\r\nb\r\nc");
    }

    #[test]
    fn text_without_line_breaks_is_lf() {
        let f = decode(b"single");
        assert_eq!(f.line_ending(), LineEnding::Lf);
        assert!(!f.has_final_newline());
        assert_eq!(f.line_count(), 1);
        assert_eq!(f.encode("single\nmore"), b"single\nmore");
    }

    #[test]
    fn empty_file_decodes() {
        let f = decode(b"");
        assert_eq!(f.text(), "");
        assert_eq!(f.line_count(), 0);
        assert_eq!(f.encode(""), b"");
    }

    #[test]
    fn mixed_file_round_trips_byte_exact() {
        let bytes = b"a\r\nb\nc\r\nd";
        let f = decode(bytes);
        assert_eq!(f.line_ending(), LineEnding::Mixed);
        assert_eq!(f.text(), "a\nb\nc\nd");
        assert_eq!(f.encode(f.text()), bytes);
    }

    #[test]
    fn mixed_file_keeps_each_unchanged_lines_ending() {
        let f = decode(b"one\r\ntwo\nthree\r\nfour\n");
        let (new, _) = apply_edit(f.text(), "three", "THREE", false).unwrap();
        assert_eq!(f.encode(&new), b"one\r\ntwo\nTHREE\r\nfour\n");
        let (new, _) = apply_edit(f.text(), "two\n", "two\ntwo-and-a-half\n", false).unwrap();
        assert_eq!(f.encode(&new), b"one\r\ntwo\ntwo-and-a-half\nthree\r\nfour\n");
        let (new, _) = apply_edit(f.text(), "four\n", "", false).unwrap();
        assert_eq!(f.encode(&new), b"one\r\ntwo\nthree\r\n");
    }

    /// Issue 13, item 8: lines that read alike keep their own endings; the
    /// removed one is the one the change named, in the bytes and the diff.
    #[test]
    fn mixed_file_alike_lines_keep_their_own_endings() {
        let f = decode(b"same\r\nsame\n");
        let patch = "*** Begin Patch\n*** Update File: f\n@@\n-same\n same\n*** End Patch";
        let (new, breaks) = apply_update_chunks_traced(f.text(), &update_chunks(patch)).unwrap();
        assert_eq!(new, "same\n");
        let bytes = f.encode_traced(&new, &breaks);
        assert_eq!(bytes, b"same\n");
        assert_eq!(f.diff_to(&new, &bytes), "@@ -1,2 +1 @@\n-same\n same\n");
        // The second line removed instead: the first keeps its CRLF.
        let patch = "*** Begin Patch\n*** Update File: f\n@@\n same\n-same\n*** End Patch";
        let (new, breaks) = apply_update_chunks_traced(f.text(), &update_chunks(patch)).unwrap();
        let bytes = f.encode_traced(&new, &breaks);
        assert_eq!(bytes, b"same\r\n");
        assert_eq!(f.diff_to(&new, &bytes), "@@ -1,2 +1 @@\n same\n-same\n");
        // An edit of the first of two alike lines keeps the second's LF.
        let (new, _, breaks) = apply_edit_traced(f.text(), "same\nsame", "other\nsame", false).unwrap();
        assert_eq!(f.encode_traced(&new, &breaks), b"other\r\nsame\n");
        // replace_all, then a multiedit over it: each surviving break keeps its ending.
        let g = decode(b"x\r\ny\nx\r\ny\n");
        let (new, breaks) = apply_multiedit_traced(g.text(), &[("x\n", "z\nz\n", true), ("y", "Y", true)]).unwrap();
        assert_eq!(g.encode_traced(&new, &breaks), b"z\r\nz\r\nY\nz\r\nz\r\nY\n");
        // An added line takes the ending of the line it replaces, else the one before it.
        let patch = "*** Begin Patch\n*** Update File: f\n@@\n-same\n+one\n+two\n same\n*** End Patch";
        let (new, breaks) = apply_update_chunks_traced(f.text(), &update_chunks(patch)).unwrap();
        assert_eq!(f.encode_traced(&new, &breaks), b"one\r\ntwo\r\nsame\n");
    }

    #[test]
    fn lone_carriage_returns_survive() {
        let bytes = b"a\rb\r\r\nc\r\n";
        let f = decode(bytes);
        assert_eq!(f.line_ending(), LineEnding::Crlf);
        assert_eq!(f.text(), "a\rb\r\nc\n");
        assert_eq!(f.encode(f.text()), bytes);
    }

    #[test]
    fn binary_and_invalid_utf8_are_not_text() {
        assert_eq!(TextFile::decode(b"abc\0def"), Err(NotText::NulByte { offset: 3 }));
        assert_eq!(TextFile::decode(b"ok \xFF bad"), Err(NotText::InvalidUtf8 { offset: 3 }));
        assert_eq!(TextFile::decode(b"\xEF\xBB\xBFok\xC3"), Err(NotText::InvalidUtf8 { offset: 5 }));
        // UTF-16 has NUL bytes.
        assert!(matches!(TextFile::decode(b"\xFF\xFEa\0b\0"), Err(NotText::NulByte { .. })));
        // A NUL byte past the first 8 KiB does not make the file binary.
        let mut late = vec![b'a'; BINARY_SNIFF_LEN];
        late.push(0);
        assert!(TextFile::decode(&late).is_ok());
        assert!(NotText::NulByte { offset: 3 }.message(P).starts_with("/abs/path is not a text file"));
    }

    proptest::proptest! {
        #[test]
        fn any_decodable_text_round_trips_byte_exact(
            body in "(a|é|\r|\n|\r\n| ){0,40}",
            bom in proptest::bool::ANY,
        ) {
            let mut bytes = if bom { UTF8_BOM.to_vec() } else { Vec::new() };
            bytes.extend_from_slice(body.as_bytes());
            let f = TextFile::decode(&bytes).unwrap();
            proptest::prop_assert_eq!(f.encode(f.text()), bytes);
        }

        #[test]
        fn changing_one_line_keeps_every_other_lines_ending(
            lines in proptest::collection::vec(("[a-z]{1,4}", proptest::bool::ANY), 1..12),
            last_has_break in proptest::bool::ANY,
            pick in 0usize..12,
        ) {
            let k = pick % lines.len();
            let render = |replace: Option<usize>| -> Vec<u8> {
                let mut out = String::new();
                for (i, (body, crlf)) in lines.iter().enumerate() {
                    out.push_str(if replace == Some(i) { "CHANGED" } else { body });
                    if i + 1 < lines.len() || last_has_break {
                        out.push_str(if *crlf { "\r\n" } else { "\n" });
                    }
                }
                out.into_bytes()
            };
            let f = TextFile::decode(&render(None)).unwrap();
            let mut new_lines: Vec<&str> = f.text().split('\n').collect();
            new_lines[k] = "CHANGED";
            let new_text = new_lines.join("\n");
            // Where the file is uniform, every ending follows the file; where it
            // is mixed, each line keeps its own.
            let expected = match f.line_ending() {
                LineEnding::Mixed => render(Some(k)),
                LineEnding::Crlf => String::from_utf8(render(Some(k))).unwrap().replace("\r\n", "\n").replace('\n', "\r\n").into_bytes(),
                LineEnding::Lf => render(Some(k)),
            };
            proptest::prop_assert_eq!(f.encode(&new_text), expected);
        }
    }

    #[test]
    fn count_lines_matches_read_numbering() {
        assert_eq!(count_lines(""), 0);
        assert_eq!(count_lines("a"), 1);
        assert_eq!(count_lines("a\n"), 1);
        assert_eq!(count_lines("a\nb"), 2);
        assert_eq!(count_lines("a\nb\n"), 2);
        assert_eq!(count_lines("\n"), 1);
        assert_eq!(count_lines("\n\n"), 2);
        assert_eq!(count_lines("a\r\nb\r\n"), 2);
    }

    // --- edits ---

    #[test]
    fn edit_replaces_a_unique_match() {
        let (out, n) = apply_edit("let x = 1;\nlet y = 2;\n", "y = 2", "y = 3", false).unwrap();
        assert_eq!(out, "let x = 1;\nlet y = 3;\n");
        assert_eq!(n, 1);
    }

    #[test]
    fn edit_errors_have_the_documented_wording() {
        assert_eq!(apply_edit("abc", "", "x", false), Err(EditError::EmptyOld));
        assert_eq!(apply_edit("abc", "b", "b", false), Err(EditError::NoChange));
        assert_eq!(apply_edit("abc", "b\r\n", "b\n", false), Err(EditError::NoChange));
        let err = apply_edit("abc", "zzz", "y", false).unwrap_err();
        assert_eq!(err, EditError::NotFound { hint: None });
        assert_eq!(err.message(P), "old_string was not found in /abs/path.");
    }

    #[test]
    fn ambiguous_edit_lists_match_lines() {
        let text = "x\nx\nfoo\nx\nx\nx\nx\nx\nfoo\nx\nx\nx\nx\nx\nx\nx\nfoo\n";
        let err = apply_edit(text, "foo", "bar", false).unwrap_err();
        assert_eq!(err, EditError::Ambiguous { count: 3, lines: vec![3, 9, 17], more: false });
        assert_eq!(
            err.message(P),
            "old_string matches 3 times in /abs/path (lines 3, 9, 17); give more context to make it unique, or set replace_all."
        );
    }

    #[test]
    fn ambiguous_edit_lists_at_most_ten_lines() {
        let text = "k\n".repeat(14);
        let err = apply_edit(&text, "k", "K", false).unwrap_err();
        let EditError::Ambiguous { count, ref lines, more } = err else { panic!("{err:?}") };
        assert_eq!(count, 14);
        assert_eq!(lines, &(1..=10).collect::<Vec<_>>());
        assert!(more);
        assert!(err.message(P).contains("(lines 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, …)"));
    }

    #[test]
    fn ambiguous_matches_on_one_line_are_listed_once() {
        let err = apply_edit("a a\nb\n", "a", "c", false).unwrap_err();
        assert_eq!(err, EditError::Ambiguous { count: 2, lines: vec![1], more: false });
        assert!(err.message(P).contains("matches 2 times in /abs/path (line 1);"));
    }

    #[test]
    fn replace_all_replaces_every_match_and_counts() {
        let (out, n) = apply_edit("a b a b a", "a", "z", true).unwrap();
        assert_eq!(out, "z b z b z");
        assert_eq!(n, 3);
        let (out, n) = apply_edit("only once", "once", "twice", true).unwrap();
        assert_eq!((out.as_str(), n), ("only twice", 1));
    }

    #[test]
    fn not_found_hints_at_whitespace() {
        let text = "fn main() {\n    let a = 1;\n    let b = 2;\n}\n";
        let err = apply_edit(text, "let a = 1;\nlet b = 2;", "x", false).unwrap_err();
        assert_eq!(err, EditError::NotFound { hint: Some(NotFoundHint::Whitespace { first_line: 2, last_line: 3 }) });
        assert!(err.message(P).contains("lines 2-3 match it if leading and trailing whitespace is ignored"));
    }

    #[test]
    fn not_found_hints_at_read_line_numbers() {
        let text = "alpha\nbeta\ngamma\n";
        let err = apply_edit(text, "2: beta\n3: gamma", "x", false).unwrap_err();
        assert_eq!(err, EditError::NotFound { hint: Some(NotFoundHint::LineNumbers) });
        assert!(err.message(P).contains("line numbers that read puts in front"));
    }

    #[test]
    fn multiedit_applies_in_sequence() {
        let text = "a\nb\nc\n";
        let out = apply_multiedit(text, &[("a", "A", false), ("A\nb", "AB", false), ("c", "C", true)]).unwrap();
        assert_eq!(out, "AB\nC\n");
        let owned = vec![(String::from("b"), String::from("B"), false)];
        assert_eq!(apply_multiedit(text, &owned).unwrap(), "a\nB\nc\n");
        let none: [(&str, &str, bool); 0] = [];
        assert_eq!(apply_multiedit(text, &none).unwrap(), text);
    }

    #[test]
    fn multiedit_is_all_or_nothing_and_names_the_failed_edit() {
        let text = "a\nb\nc\n";
        let err = apply_multiedit(text, &[("a", "A", false), ("zzz", "y", false), ("c", "C", false)]).unwrap_err();
        assert_eq!(err, (1, EditError::NotFound { hint: None }));
        // A later edit fails after an earlier one succeeded: nothing is returned but the error.
        let err = apply_multiedit(text, &[("a", "A", false), ("b", "B", false), ("A", "x", false), ("q", "r", false)])
            .unwrap_err();
        assert_eq!(err.0, 3);
        // An edit that makes a later one ambiguous; lines count in the intermediate text.
        let err = apply_multiedit(text, &[("a", "c", false), ("c", "d", false)]).unwrap_err();
        assert_eq!(err, (1, EditError::Ambiguous { count: 2, lines: vec![1, 3], more: false }));
        assert!(err.1.message(P).contains("(lines 1, 3)"));
    }

    // --- patch parsing ---

    #[test]
    fn parses_add_delete_update_and_move() {
        let patch = "*** Begin Patch\n\
                     *** Add File: docs/new.md\n\
                     +# Title\n\
                     +\n\
                     +body\n\
                     *** Delete File: old.txt\n\
                     *** Update File: src/a.py\n\
                     *** Move to: src/b.py\n\
                     @@ def f():\n\
                     -    pass\n\
                     +    return 1\n\
                     *** End Patch\n";
        let ops = parse_patch(patch).unwrap();
        assert_eq!(
            ops,
            vec![
                PatchOp::Add { path: "docs/new.md".into(), content: "# Title\n\nbody\n".into() },
                PatchOp::Delete { path: "old.txt".into() },
                PatchOp::Update {
                    path: "src/a.py".into(),
                    move_to: Some("src/b.py".into()),
                    chunks: vec![UpdateChunk {
                        context: Some("def f():".into()),
                        lines: vec![ChunkLine::Remove("    pass".into()), ChunkLine::Add("    return 1".into()),],
                        end_of_file: false,
                        patch_line: 9,
                    }],
                },
            ]
        );
        assert_eq!(ops[2].path(), "src/a.py");
    }

    #[test]
    fn parses_multiple_chunks_and_end_of_file() {
        let patch = "*** Begin Patch\n*** Update File: f.txt\n@@\n a\n-b\n+B\n\n@@ section\n c\n-d\n+D\n*** End of File\n*** End Patch";
        let chunks = update_chunks(patch);
        assert_eq!(chunks.len(), 2);
        assert_eq!(chunks[0].context, None);
        assert_eq!(chunks[0].old_lines(), vec!["a", "b"]);
        assert_eq!(chunks[0].new_lines(), vec!["a", "B"]);
        assert!(!chunks[0].end_of_file);
        assert_eq!(chunks[0].patch_line, 3);
        assert_eq!(chunks[1].context.as_deref(), Some("section"));
        assert!(chunks[1].end_of_file);
        assert_eq!(chunks[1].patch_line, 8);
    }

    #[test]
    fn empty_line_inside_a_chunk_is_context_but_trailing_ones_are_not() {
        let chunks = update_chunks("*** Begin Patch\n*** Update File: f\n@@\n a\n\n-b\n+B\n\n\n*** End Patch");
        assert_eq!(
            chunks[0].lines,
            vec![
                ChunkLine::Context("a".into()),
                ChunkLine::Context("".into()),
                ChunkLine::Remove("b".into()),
                ChunkLine::Add("B".into()),
            ]
        );
    }

    #[test]
    fn first_chunk_may_omit_the_at_at_line() {
        let chunks = update_chunks("*** Begin Patch\n*** Update File: f\n import x\n+import y\n*** End Patch");
        assert_eq!(chunks[0].context, None);
        assert_eq!(chunks[0].new_lines(), vec!["import x", "import y"]);
    }

    #[test]
    fn unified_range_header_counts_as_bare_at_at() {
        let chunks = update_chunks("*** Begin Patch\n*** Update File: f\n@@ -3,2 +3,2 @@\n-a\n+b\n@@ -9 +9 @@ fn main()\n-c\n+d\n*** End Patch");
        assert_eq!(chunks[0].context, None);
        assert_eq!(chunks[1].context.as_deref(), Some("fn main()"));
    }

    #[test]
    fn lenient_wrapping_is_accepted() {
        let body = "*** Begin Patch\n*** Delete File: x\n*** End Patch";
        let expected = vec![PatchOp::Delete { path: "x".into() }];
        assert_eq!(parse_patch(body).unwrap(), expected);
        assert_eq!(parse_patch(&format!("\n\n  {body}  \n\n")).unwrap(), expected);
        assert_eq!(parse_patch(&body.replace('\n', "\r\n")).unwrap(), expected);
        assert_eq!(parse_patch(&format!("<<'EOF'\n{body}\nEOF\n")).unwrap(), expected);
        assert_eq!(parse_patch(&format!("<<EOF\n{body}\nEOF")).unwrap(), expected);
        assert_eq!(parse_patch(&format!("apply_patch <<\"PATCH\"\n{body}\nPATCH\n")).unwrap(), expected);
        assert_eq!(parse_patch("*** Begin Patch\n   *** Delete File:   x  \n*** End Patch").unwrap(), expected);
    }

    #[test]
    fn pure_move_is_allowed() {
        let ops = parse_patch("*** Begin Patch\n*** Update File: a\n*** Move to: b\n*** End Patch").unwrap();
        assert_eq!(ops, vec![PatchOp::Update { path: "a".into(), move_to: Some("b".into()), chunks: vec![] }]);
    }

    #[test]
    fn add_file_may_be_empty() {
        let ops = parse_patch("*** Begin Patch\n*** Add File: empty.txt\n*** Add File: b\n+x\n*** End Patch").unwrap();
        assert_eq!(ops[0], PatchOp::Add { path: "empty.txt".into(), content: String::new() });
        assert_eq!(ops[1], PatchOp::Add { path: "b".into(), content: "x\n".into() });
    }

    #[test]
    fn context_lines_that_look_like_markers_stay_context() {
        let chunks =
            update_chunks("*** Begin Patch\n*** Update File: doc.md\n@@\n *** End Patch\n-old\n+new\n*** End Patch");
        assert_eq!(chunks[0].old_lines(), vec!["*** End Patch", "old"]);
    }

    #[test]
    fn malformed_patches_name_the_line() {
        let err = |p: &str| parse_patch(p).unwrap_err();

        let e = err("");
        assert_eq!(e.line, 1);

        let e = err("\nhello\n*** End Patch");
        assert_eq!(e.line, 2);
        assert!(e.detail.contains("expected '*** Begin Patch'"), "{e}");

        let e = err("*** Begin Patch\n*** Delete File: x\n");
        assert_eq!(e.line, 2);
        assert!(e.detail.contains("expected '*** End Patch'"), "{e}");

        let e = err("*** Begin Patch\n*** Delete File: x\nsome words\n*** End Patch");
        assert_eq!(e.line, 3);
        assert!(e.detail.contains("expected a file operation"), "{e}");
        assert_eq!(e.to_string(), format!("The patch is malformed at line 3: {}", e.detail));

        let e = err("*** Begin Patch\n*** Update File: f\n*** End Patch");
        assert_eq!(e.line, 2);
        assert!(e.detail.contains("has no changes"), "{e}");

        let e = err("*** Begin Patch\n*** Update File: f\n@@\n-a\n+b\nno prefix\n*** End Patch");
        assert_eq!(e.line, 6);
        assert!(e.detail.contains("expected a line starting with ' '"), "{e}");

        let e = err("*** Begin Patch\n*** Update File: f\n@@\n@@\n-a\n*** End Patch");
        assert_eq!(e.line, 3);
        assert!(e.detail.contains("has no lines"), "{e}");

        let e = err("*** Begin Patch\n*** Add File:   \n+x\n*** End Patch");
        assert_eq!(e.line, 2);
        assert!(e.detail.contains("expected a path"), "{e}");

        let e = err("*** Begin Patch\n*** End Patch");
        assert_eq!(e.line, 2);
        assert!(e.detail.contains("expected a file operation"), "{e}");

        let e = err(
            "*** Begin Patch\n*** Delete File: a\n*** End Patch\n*** Begin Patch\n*** Delete File: b\n*** End Patch",
        );
        assert_eq!(e.line, 3);
        assert!(e.detail.contains("before the end of the patch"), "{e}");

        let e = err("*** Begin Patch\n*** Update File: f\n*** End of File\n*** End Patch");
        assert_eq!(e.line, 3);
    }

    // --- applying update chunks ---

    #[test]
    fn applies_a_simple_update() {
        let out =
            apply("foo\nbar\n", "*** Begin Patch\n*** Update File: f\n@@\n foo\n-bar\n+baz\n*** End Patch").unwrap();
        assert_eq!(out, "foo\nbaz\n");
    }

    #[test]
    fn applies_multiple_chunks_in_order() {
        let original = "a\nb\nc\nd\ne\nf\n";
        let patch = "*** Begin Patch\n*** Update File: f\n@@\n a\n-b\n+B\n@@\n c\n d\n-e\n+E\n@@\n f\n+g\n*** End of File\n*** End Patch";
        assert_eq!(apply(original, patch).unwrap(), "a\nB\nc\nd\nE\nf\ng\n");
    }

    #[test]
    fn context_anchor_selects_the_right_occurrence() {
        let original = "fn one() {\n    x = 1;\n}\nfn two() {\n    x = 1;\n}\n";
        let patch = "*** Begin Patch\n*** Update File: f\n@@ fn two() {\n-    x = 1;\n+    x = 2;\n*** End Patch";
        assert_eq!(apply(original, patch).unwrap(), "fn one() {\n    x = 1;\n}\nfn two() {\n    x = 2;\n}\n");
        // An anchor may be the start of a line.
        let patch = "*** Begin Patch\n*** Update File: f\n@@ fn two\n-    x = 1;\n+    x = 3;\n*** End Patch";
        assert!(apply(original, patch).unwrap().contains("fn two() {\n    x = 3;"));
    }

    #[test]
    fn pure_addition_after_an_anchor_goes_below_it() {
        let original = "class A:\n    pass\nclass B:\n    pass\n";
        let patch = "*** Begin Patch\n*** Update File: f\n@@ class B:\n+    x = 1\n*** End Patch";
        assert_eq!(apply(original, patch).unwrap(), "class A:\n    pass\nclass B:\n    x = 1\n    pass\n");
    }

    #[test]
    fn pure_addition_without_an_anchor_appends() {
        let patch = "*** Begin Patch\n*** Update File: f\n@@\n+tail\n*** End Patch";
        assert_eq!(apply("a\nb\n", patch).unwrap(), "a\nb\ntail\n");
        assert_eq!(apply("", patch).unwrap(), "tail\n");
    }

    #[test]
    fn fuzzy_whitespace_matching_keeps_the_files_context_text() {
        let original = "if x:   \n\t  y = 1\nz = 2\n";
        let patch = "*** Begin Patch\n*** Update File: f\n@@\n if x:\n-y = 1\n+    y = 10\n z = 2\n*** End Patch";
        // The context line keeps its trailing spaces; only the changed line changes.
        assert_eq!(apply(original, patch).unwrap(), "if x:   \n    y = 10\nz = 2\n");
    }

    #[test]
    fn typographic_punctuation_matches_ascii() {
        let original = "say(\u{201C}hi\u{201D}) \u{2013} ok\n";
        let patch = "*** Begin Patch\n*** Update File: f\n@@\n-say(\"hi\") - ok\n+say(\"bye\")\n*** End Patch";
        assert_eq!(apply(original, patch).unwrap(), "say(\"bye\")\n");
    }

    #[test]
    fn end_of_file_chunk_matches_at_the_end() {
        let original = "}\nfn a() {\n}\n";
        let patch = "*** Begin Patch\n*** Update File: f\n@@\n-}\n+} // end\n*** End of File\n*** End Patch";
        assert_eq!(apply(original, patch).unwrap(), "}\nfn a() {\n} // end\n");
        // Trailing blank lines are tolerated.
        assert_eq!(apply("x\n}\n\n", patch).unwrap(), "x\n} // end\n\n");
        // Not at the end: an error, not a match elsewhere.
        let err = apply("}\nlast\n", patch).unwrap_err();
        assert!(matches!(err, PatchError::LinesNotFound { end_of_file: true, .. }));
        assert!(err.message(P).contains("were not found at the end of the file"));
    }

    #[test]
    fn trailing_empty_line_standing_for_final_newline_is_retried_without() {
        let patch = "*** Begin Patch\n*** Update File: f\n@@\n-b\n-\n+c\n*** End Patch";
        assert_eq!(apply("a\nb\n", patch).unwrap(), "a\nc\n");
    }

    #[test]
    fn missing_final_newline_is_kept_by_patches() {
        let patch = "*** Begin Patch\n*** Update File: f\n@@\n-b\n+B\n*** End Patch";
        assert_eq!(apply("a\nb", patch).unwrap(), "a\nB");
        assert_eq!(apply("a\nb\n", patch).unwrap(), "a\nB\n");
    }

    #[test]
    fn chunks_must_come_in_file_order() {
        let patch = "*** Begin Patch\n*** Update File: f\n@@\n-c\n+C\n@@\n-a\n+A\n*** End Patch";
        let err = apply("a\nb\nc\n", patch).unwrap_err();
        assert_eq!(
            err,
            PatchError::LinesNotFound {
                chunk: 2,
                patch_line: 6,
                expected: vec!["a".into()],
                after_line: 3,
                end_of_file: false
            }
        );
        let msg = err.message(P);
        assert!(
            msg.starts_with(
                "Change 2 to /abs/path (patch line 6) did not apply: these lines were not found after line 3:\n  a\n"
            ),
            "{msg}"
        );
    }

    #[test]
    fn missing_anchor_is_reported() {
        let patch = "*** Begin Patch\n*** Update File: f\n@@ nonexistent\n-bar\n+baz\n*** End Patch";
        let err = apply("foo\nbar\n", patch).unwrap_err();
        assert!(matches!(err, PatchError::AnchorNotFound { chunk: 1, patch_line: 3, .. }));
        assert!(err.message(P).contains("no line matching '@@ nonexistent' was found"));
    }

    #[test]
    fn long_expected_blocks_are_shown_briefly() {
        let mut patch = String::from("*** Begin Patch\n*** Update File: f\n@@\n");
        for i in 0..10 {
            patch.push_str(&format!("-missing {i}\n"));
        }
        patch.push_str("*** End Patch");
        let msg = apply("a\n", &patch).unwrap_err().message(P);
        assert!(msg.contains("  missing 5\n  … (4 more lines)"), "{msg}");
        assert!(!msg.contains("missing 6"));
    }

    // --- diffs ---

    #[test]
    fn diff_has_hunks_only_with_three_lines_of_context() {
        let old: String = (1..=30).map(|i| format!("line {i}\n")).collect();
        let new = old.replace("line 15\n", "line fifteen\n");
        let d = unified_diff(&old, &new);
        assert_eq!(
            d,
            "@@ -12,7 +12,7 @@\n line 12\n line 13\n line 14\n-line 15\n+line fifteen\n line 16\n line 17\n line 18\n"
        );
        assert!(!d.contains("---") && !d.contains("+++"));
    }

    #[test]
    fn diff_header_shape_for_a_three_line_change() {
        let old: String = (1..=20).map(|i| format!("{i}\n")).collect();
        let new = old.replace("12\n13\n14\n", "twelve\nthirteen\nfourteen\n");
        let d = unified_diff(&old, &new);
        // 3 context + 3 changed + 3 context
        assert!(d.starts_with("@@ -9,9 +9,9 @@\n"), "{d}");
        // A change with no room for context at either end.
        assert_eq!(unified_diff("a\nb\nc\n", "a\nB\nc\n"), "@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n");
        let d = unified_diff("x\n", "y\n");
        assert_eq!(d, "@@ -1 +1 @@\n-x\n+y\n");
    }

    #[test]
    fn diff_of_identical_texts_is_empty() {
        assert_eq!(unified_diff("same\n", "same\n"), "");
        assert_eq!(unified_diff("", ""), "");
    }

    #[test]
    fn diff_marks_a_missing_final_newline() {
        assert_eq!(
            unified_diff("a\nb", "a\nc"),
            "@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n"
        );
        assert_eq!(unified_diff("a", "a\n"), "@@ -1 +1 @@\n-a\n\\ No newline at end of file\n+a\n");
    }

    #[test]
    fn diff_line_numbers_ignore_lone_carriage_returns() {
        let d = unified_diff("a\rb\nc\n", "a\rb\nC\n");
        assert_eq!(d, "@@ -1,2 +1,2 @@\n a\rb\n-c\n+C\n");
    }

    #[test]
    fn diff_of_new_and_emptied_files() {
        assert_eq!(unified_diff("", "a\nb\n"), "@@ -0,0 +1,2 @@\n+a\n+b\n");
        assert_eq!(unified_diff("a\n", ""), "@@ -1 +0,0 @@\n-a\n");
    }
}
