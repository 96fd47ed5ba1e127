//! Minimal text edits from one text to another, for `workspace/applyEdit`.
//!
//! The common start and end are cut off first (most changes are one place
//! in a large file), the rest is diffed by lines (`similar`), and a changed
//! run of lines short enough is diffed again by characters, so the editor
//! moves the least text (and keeps its cursors and folds). Positions are in
//! the old text, in the negotiated column unit. Edits never split a `\r\n`.

use crate::vfs::overlay::{Encoding, Pos};
use similar::{Algorithm, DiffOp, TextDiff};
use std::time::Duration;

/// A changed run of lines is diffed by characters when both sides are at most this long.
const CHAR_DIFF_MAX: usize = 4096;
/// A line diff taking longer than this settles for a coarser answer.
const DIFF_TIMEOUT: Duration = Duration::from_millis(500);

/// One edit: the old text from `start` to `end` becomes `text`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextEdit {
    pub start: Pos,
    pub end: Pos,
    pub text: String,
}

/// The edits turning `old` into `new`, in order, not overlapping.
pub fn text_edits(old: &str, new: &str, encoding: Encoding) -> Vec<TextEdit> {
    if old == new {
        return Vec::new();
    }
    let mut spans = Vec::new();
    // The common start and end, then whole lines around the rest.
    let prefix = common_prefix(old, new);
    let suffix = common_suffix(&old[prefix..], &new[prefix..]);
    let lo = old[..prefix].rfind('\n').map(|i| i + 1).unwrap_or(0);
    let old_cut = old.len() - suffix;
    let old_hi = if old_cut == lo || old.as_bytes()[old_cut - 1] == b'\n' {
        old_cut
    } else {
        old[old_cut..].find('\n').map(|i| old_cut + i + 1).unwrap_or(old.len())
    };
    let new_hi = new.len() - (old.len() - old_hi);
    line_spans(&old[lo..old_hi], &new[lo..new_hi], lo, &mut spans);
    let index = LineIndex::new(old);
    spans
        .into_iter()
        .map(|(a, b, text)| TextEdit { start: index.pos(old, a, encoding), end: index.pos(old, b, encoding), text })
        .collect()
}

/// Byte spans of `old` (offset by `base`) and their replacements.
fn line_spans(old: &str, new: &str, base: usize, out: &mut Vec<(usize, usize, String)>) {
    let diff = TextDiff::configure().algorithm(Algorithm::Myers).timeout(DIFF_TIMEOUT).diff_lines(old, new);
    let old_at = offsets(diff.iter_old_slices().map(str::len));
    let new_at = offsets(diff.iter_new_slices().map(str::len));
    for (a, b, na, nb) in changed_runs(diff.ops()) {
        let (oa, ob) = (old_at[a], old_at[b]);
        let (sa, sb) = (new_at[na], new_at[nb]);
        let (o, n) = (&old[oa..ob], &new[sa..sb]);
        if o.len() <= CHAR_DIFF_MAX && n.len() <= CHAR_DIFF_MAX && !o.contains('\r') && !n.contains('\r') {
            char_spans(o, n, base + oa, out);
        } else {
            out.push((base + oa, base + ob, n.to_string()));
        }
    }
}

fn char_spans(old: &str, new: &str, base: usize, out: &mut Vec<(usize, usize, String)>) {
    let diff = TextDiff::configure().algorithm(Algorithm::Myers).timeout(DIFF_TIMEOUT).diff_chars(old, new);
    let old_at = offsets(diff.iter_old_slices().map(str::len));
    let new_at = offsets(diff.iter_new_slices().map(str::len));
    for (a, b, na, nb) in changed_runs(diff.ops()) {
        out.push((base + old_at[a], base + old_at[b], new[new_at[na]..new_at[nb]].to_string()));
    }
}

/// Runs of consecutive non-equal ops, as (old start, old end, new start, new end) in slices.
fn changed_runs(ops: &[DiffOp]) -> Vec<(usize, usize, usize, usize)> {
    let mut runs: Vec<(usize, usize, usize, usize)> = Vec::new();
    let mut open = false;
    for op in ops {
        let (tag, o, n) = op.as_tag_tuple();
        if tag == similar::DiffTag::Equal {
            open = false;
            continue;
        }
        match runs.last_mut() {
            Some(run) if open => {
                run.1 = o.end;
                run.3 = n.end;
            }
            _ => runs.push((o.start, o.end, n.start, n.end)),
        }
        open = true;
    }
    runs
}

/// Start offsets of slices, and the total at the end.
fn offsets(lens: impl Iterator<Item = usize>) -> Vec<usize> {
    let mut out = vec![0];
    let mut at = 0;
    for len in lens {
        at += len;
        out.push(at);
    }
    out
}

/// The longest common prefix, in bytes, ending on a char boundary and not
/// between `\r` and `\n`.
fn common_prefix(a: &str, b: &str) -> usize {
    let mut n = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    while !a.is_char_boundary(n) || !b.is_char_boundary(n) {
        n -= 1;
    }
    if n > 0 && a.as_bytes()[n - 1] == b'\r' {
        n -= 1;
    }
    n
}

/// The longest common suffix, in bytes, starting on a char boundary and not
/// between `\r` and `\n`.
fn common_suffix(a: &str, b: &str) -> usize {
    let mut n = a.bytes().rev().zip(b.bytes().rev()).take_while(|(x, y)| x == y).count();
    while !a.is_char_boundary(a.len() - n) || !b.is_char_boundary(b.len() - n) {
        n -= 1;
    }
    if n > 0 && a.as_bytes()[a.len() - n] == b'\n' && a.len() > n && a.as_bytes()[a.len() - n - 1] == b'\r' {
        n -= 1;
    }
    n
}

/// Where the lines of a text start (after `\n`, `\r\n` or a lone `\r`).
struct LineIndex {
    starts: Vec<usize>,
}

impl LineIndex {
    fn new(text: &str) -> LineIndex {
        let bytes = text.as_bytes();
        let mut starts = vec![0];
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'\n' => starts.push(i + 1),
                b'\r' if bytes.get(i + 1) != Some(&b'\n') => starts.push(i + 1),
                _ => {}
            }
            i += 1;
        }
        LineIndex { starts }
    }

    fn pos(&self, text: &str, offset: usize, encoding: Encoding) -> Pos {
        let line = self.starts.partition_point(|s| *s <= offset) - 1;
        let start = self.starts[line];
        Pos { line: line as u32, col: encoding.len_of_str(&text[start..offset]) as u32 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vfs::overlay::{Documents, Edit};
    use proptest::prelude::*;
    use std::path::Path;

    /// Applies edits (all relative to the old text, as LSP does) with the overlay's own code.
    fn apply(old: &str, edits: &[TextEdit], encoding: Encoding) -> String {
        let docs = Documents::new();
        docs.set_encoding(encoding);
        docs.open("/d".into(), "file:///d".into(), 1, old);
        let reversed: Vec<Edit> =
            edits.iter().rev().map(|e| Edit { range: Some((e.start, e.end)), text: e.text.clone() }).collect();
        docs.change(Path::new("/d"), 2, reversed).unwrap();
        String::from_utf8(docs.text(Path::new("/d")).unwrap().0.to_vec()).unwrap()
    }

    fn check(old: &str, new: &str) -> Vec<TextEdit> {
        let mut first = None;
        for encoding in [Encoding::Utf16, Encoding::Utf8, Encoding::Utf32] {
            let edits = text_edits(old, new, encoding);
            for pair in edits.windows(2) {
                assert!(pair[0].end <= pair[1].start, "overlap: {edits:?}");
            }
            assert_eq!(apply(old, &edits, encoding), new, "{encoding:?}: {edits:?}");
            first.get_or_insert(edits);
        }
        first.unwrap()
    }

    #[test]
    fn one_word_changed_in_a_long_text_is_one_small_edit() {
        let old: String = (0..10_000).map(|i| format!("line {i} of the text\n")).collect();
        let new = old.replace("line 5000 of", "line 5000 in");
        let edits = check(&old, &new);
        assert_eq!(
            edits,
            vec![TextEdit { start: Pos { line: 5000, col: 10 }, end: Pos { line: 5000, col: 12 }, text: "in".into() }]
        );
    }

    #[test]
    fn edits_in_each_unit_and_line_ending() {
        check("", "new\n");
        check("old\n", "");
        check("a😀b\r\nc\r\n", "a😀B\r\nc\r\nd\r\n");
        check("a\r\nb\r\n", "a\nb\n");
        check("x\ry\rz", "x\ry2\rz");
        check("fn main() {\n    println!(\"hi\");\n}\n", "fn main() {\n    let x = 1;\n    println!(\"hi {x}\");\n}\n");
        check("no newline at end", "no newline at the end");
        check("é\n", "e\u{301}\n");
    }

    proptest! {
        #[test]
        fn edits_turn_old_into_new(
            old in proptest::collection::vec(prop_oneof!["a", "b", "\n", "\r\n", "\r", "😀", "é", " "], 0..40),
            new in proptest::collection::vec(prop_oneof!["a", "b", "\n", "\r\n", "\r", "😀", "é", " "], 0..40),
        ) {
            check(&old.concat(), &new.concat());
        }
    }
}
