//! The texts of context hygiene: ids, brackets, stubs and the cap.
//!
//! Pure string functions with the spec's numbers. No state: which stub to
//! give, and what is stored, is decided in `hygiene`.

use crate::tools::{hex, Change, FileChange, ReadOutcome, Sha};

/// Hex digits an id has at least.
pub const ID_DIGITS: usize = 4;
/// Hex digits of a hash shown in a bracket.
pub const SHA_DIGITS: usize = 8;
pub const CAP_MAX_LINES: usize = 400;
pub const CAP_MAX_CHARS: usize = 40_000;
pub const HEAD_LINES: usize = 200;
pub const HEAD_CHARS: usize = 20_000;
pub const TAIL_LINES: usize = 100;
pub const TAIL_CHARS: usize = 10_000;
/// Lines a recall shows when no limit is given.
pub const RECALL_WINDOW: usize = 2000;
/// Rows of the compaction table at most.
pub const COMPACTION_ROWS: usize = 50;

/// `#0001`, `#000a`, `#10000`.
pub fn id_text(n: u64) -> String {
    format!("#{n:0ID_DIGITS$x}")
}

/// Parses `#00a1` or `00a1` (any case) to its number.
pub fn parse_id(text: &str) -> Option<u64> {
    let digits = text.trim().trim_start_matches('#');
    if digits.is_empty() || digits.len() > 16 || !digits.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(digits, 16).ok()
}

pub fn short_sha(sha: &Sha) -> String {
    hex(sha)[..SHA_DIGITS].to_string()
}

/// The bracket of a read: `[#0012 src/app.ts lines 1-200 of 340 sha 1c9e04ab]`.
pub fn read_bracket(id: &str, read: &ReadOutcome) -> String {
    if read.total == 0 {
        format!("[{id} {} empty sha {}]", read.given, short_sha(&read.sha))
    } else {
        format!(
            "[{id} {} lines {}-{} of {} sha {}]",
            read.given,
            read.first,
            read.last,
            read.total,
            short_sha(&read.sha)
        )
    }
}

/// What follows a result's bracket: a sentence on the same line, lines
/// below it, or both (a note after a one-line answer).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Body {
    pub inline: Option<String>,
    pub lines: Option<String>,
}

impl Body {
    pub fn lines(text: impl Into<String>) -> Body {
        Body { inline: None, lines: Some(text.into()) }
    }

    pub fn inline(text: impl Into<String>) -> Body {
        Body { inline: Some(text.into()), lines: None }
    }

    /// The result itself, as stored and recalled: what follows the bracket.
    pub fn stored(&self) -> String {
        match (&self.inline, &self.lines) {
            (Some(i), Some(l)) => format!("{i}\n{l}"),
            (Some(i), None) => i.clone(),
            (None, Some(l)) => l.clone(),
            (None, None) => String::new(),
        }
    }

    /// The text the model sees under `head`, with the lines capped when `capped`.
    pub fn render(&self, head: &str, id: &str, capped: bool) -> String {
        self.render_capped(head, id, capped).0
    }

    /// As `render`, and whether the cap cut the lines.
    pub fn render_capped(&self, head: &str, id: &str, capped: bool) -> (String, bool) {
        let mut cut = false;
        let mut out = head.to_string();
        if let Some(inline) = &self.inline {
            out.push(' ');
            out.push_str(inline);
        }
        if let Some(lines) = &self.lines {
            out.push('\n');
            match capped.then(|| cap(lines, id)).flatten() {
                Some(short) => {
                    cut = true;
                    out.push_str(&short)
                }
                None => out.push_str(lines),
            }
        }
        (out, cut)
    }
}

/// A full read's body: its numbered lines (none for an empty file).
pub fn read_body(read: &ReadOutcome) -> Body {
    if read.total == 0 {
        return Body::default();
    }
    let mut lines = read.body.clone();
    if let Some(note) = &read.note {
        lines.push_str(note);
        lines.push('\n');
    }
    Body::lines(lines)
}

/// A stub's bracket: the new read's, naming the lines asked for (context.md
/// §2), which reach past the file's length when the call asked past its end.
pub fn stub_bracket(id: &str, read: &ReadOutcome) -> String {
    format!(
        "[{id} {} lines {}-{} of {} sha {}]",
        read.given,
        read.first,
        read.asked_last.max(read.last),
        read.total,
        short_sha(&read.sha)
    )
}

/// The stub sentence of an unchanged re-read.
pub fn read_stub(earlier: &str, first: usize, last: usize) -> String {
    format!("Unchanged since {earlier}, which already shows lines {first}-{last}.")
}

fn lines_word(n: usize) -> &'static str {
    if n == 1 {
        "line"
    } else {
        "lines"
    }
}

/// One changed file: its bracket (with the id inside when given) and what follows.
pub fn change_parts(id: Option<&str>, change: &FileChange) -> (String, Body) {
    let open = match id {
        Some(id) => format!("[{id} {}", change.given),
        None => format!("[{}", change.given),
    };
    let sha = change.sha.as_ref().map(short_sha).unwrap_or_default();
    let diff = |d: &str| d.trim_end_matches('\n').to_string();
    let (head, mut body) = match &change.change {
        Change::Created { lines } => {
            (format!("{open} sha {sha}]"), Body::inline(format!("Created, {lines} {}.", lines_word(*lines))))
        }
        Change::Deleted => (format!("{open} deleted]"), Body::default()),
        Change::Modified { diff: d } if d.is_empty() => (format!("{open} sha {sha}]"), Body::inline("No change.")),
        Change::Modified { diff: d } => (format!("{open} sha {sha}]"), Body::lines(diff(d))),
        Change::Moved { from, diff: d } if d.is_empty() => {
            (format!("{open} sha {sha}]"), Body::inline(format!("Moved from {from}.")))
        }
        Change::Moved { from, diff: d } => {
            (format!("{open} sha {sha}]"), Body { inline: Some(format!("Moved from {from}.")), lines: Some(diff(d)) })
        }
    };
    if let Some(note) = &change.note {
        body.lines = Some(match body.lines.take() {
            Some(lines) => format!("{lines}\n{note}"),
            None => note.clone(),
        });
    }
    (head, body)
}

/// One changed file as one text (inside an apply_patch answer).
pub fn change_text(id: Option<&str>, change: &FileChange) -> String {
    let (head, body) = change_parts(id, change);
    body.render(&head, "", false)
}

/// Caps a result over `CAP_MAX_LINES` lines or `CAP_MAX_CHARS` characters to
/// its head and tail with the elided line between. `None` when it fits.
pub fn cap(text: &str, full_id: &str) -> Option<String> {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let chars = text.chars().count();
    if lines.len() <= CAP_MAX_LINES && chars <= CAP_MAX_CHARS {
        return None;
    }
    let len = |line: &str| line.chars().count();
    let mut head = String::new();
    let mut head_lines = 0;
    let mut head_chars = 0;
    if len(lines[0]) > HEAD_CHARS {
        head.extend(lines[0].chars().take(HEAD_CHARS));
        head.push_str("[…cut]\n");
        head_lines = 1;
    } else {
        for line in &lines {
            if head_lines == HEAD_LINES || head_chars + len(line) > HEAD_CHARS {
                break;
            }
            head.push_str(line);
            head_chars += len(line);
            head_lines += 1;
        }
        if !head.ends_with('\n') {
            head.push('\n');
        }
    }
    let mut tail_start = lines.len();
    let mut tail_chars = 0;
    while tail_start > head_lines && lines.len() - tail_start < TAIL_LINES {
        let line = lines[tail_start - 1];
        if tail_chars + len(line) > TAIL_CHARS {
            break;
        }
        tail_chars += len(line);
        tail_start -= 1;
    }
    let elided = tail_start - head_lines;
    let mut out = head;
    out.push_str(&format!("[{elided} lines elided, full output {full_id}]\n"));
    for line in &lines[tail_start..] {
        out.push_str(line);
    }
    Some(out)
}

/// A window of a stored text's lines: `(first, last, total, body)`.
pub fn window(text: &str, offset: usize, limit: usize) -> (usize, usize, usize, String) {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let total = lines.len();
    let first = offset.max(1);
    let mut body = String::new();
    let mut last = first - 1;
    for (index, line) in lines.iter().enumerate().skip(first - 1).take(limit) {
        body.push_str(line);
        last = index + 1;
    }
    if !body.is_empty() && !body.ends_with('\n') {
        body.push('\n');
    }
    (first, last, total, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_lowercase_hex_of_at_least_four_digits() {
        assert_eq!(id_text(1), "#0001");
        assert_eq!(id_text(10), "#000a");
        assert_eq!(id_text(0x10000), "#10000");
        assert_eq!(parse_id("#000A"), Some(10));
        assert_eq!(parse_id("ffff"), Some(0xffff));
        assert_eq!(parse_id("#xyz"), None);
    }

    #[test]
    fn cap_keeps_head_and_tail_with_exact_counts() {
        let text: String = (1..=1000).map(|i| format!("line {i}\n")).collect();
        let capped = cap(&text, "#0020").unwrap();
        let lines: Vec<&str> = capped.lines().collect();
        assert_eq!(lines.len(), 200 + 1 + 100);
        assert_eq!(lines[199], "line 200");
        assert_eq!(lines[200], "[700 lines elided, full output #0020]");
        assert_eq!(lines[201], "line 901");
        assert!(cap("short\n", "#0001").is_none());
    }

    #[test]
    fn cap_cuts_a_huge_first_line() {
        let text = format!("{}\nsecond\n", "x".repeat(50_000));
        let capped = cap(&text, "#0002").unwrap();
        let first = capped.lines().next().unwrap();
        assert!(first.ends_with("[…cut]"));
        assert_eq!(first.chars().count(), HEAD_CHARS + "[…cut]".chars().count());
        assert_eq!(capped.lines().nth(1).unwrap(), "[0 lines elided, full output #0002]");
    }
}
