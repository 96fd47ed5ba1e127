//! Unified-diff hunks, as `tools::text::unified_diff` writes them, applied to
//! a text forwards (old → new) or backwards (new → old), and a prompt's
//! summary split into its files.
//!
//! The relay shows the user whole files before and after a change, while a
//! result's facts and a prompt carry hunks: with the file read once (after
//! the call, or before the change for a prompt) the other side follows
//! exactly. Every context and removed line is checked; any mismatch gives
//! `None`, never a guessed text. Not a general patch tool: no fuzz, no
//! offsets, no `---`/`+++` parsing beyond what a prompt's summary holds.

/// One hunk line: its tag (' ', '-', '+') and its text with its line break.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Line {
    tag: char,
    text: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Hunk {
    old_start: usize,
    old_count: usize,
    new_start: usize,
    new_count: usize,
    lines: Vec<Line>,
}

/// `-12,7` → (12, 7); `-3` → (3, 1).
fn range(text: &str) -> Option<(usize, usize)> {
    let (start, count) = match text.split_once(',') {
        Some((s, c)) => (s.parse().ok()?, c.parse().ok()?),
        None => (text.parse().ok()?, 1),
    };
    Some((start, count))
}

/// `@@ -12,7 +12,8 @@` (anything after the second `@@` is ignored).
fn header(line: &str) -> Option<(usize, usize, usize, usize)> {
    let rest = line.strip_prefix("@@ -")?;
    let (old, rest) = rest.split_once(" +")?;
    let (new, _) = rest.split_once(" @@")?;
    let (old_start, old_count) = range(old)?;
    let (new_start, new_count) = range(new)?;
    Some((old_start, old_count, new_start, new_count))
}

/// Parses consecutive hunks; `None` when a line is not part of one.
fn hunks(diff: &str) -> Option<Vec<Hunk>> {
    let mut out: Vec<Hunk> = Vec::new();
    let mut lines = diff.split_inclusive('\n').peekable();
    while let Some(line) = lines.next() {
        let (old_start, old_count, new_start, new_count) = header(line.trim_end_matches('\n'))?;
        let mut hunk = Hunk { old_start, old_count, new_start, new_count, lines: Vec::new() };
        let (mut old_left, mut new_left) = (old_count, new_count);
        while old_left > 0 || new_left > 0 {
            let line = lines.next()?;
            let (tag, text) = line.split_at(line.chars().next()?.len_utf8());
            let tag = tag.chars().next()?;
            match tag {
                ' ' => {
                    old_left = old_left.checked_sub(1)?;
                    new_left = new_left.checked_sub(1)?;
                }
                '-' => old_left = old_left.checked_sub(1)?,
                '+' => new_left = new_left.checked_sub(1)?,
                _ => return None,
            }
            let mut text = text.to_string();
            if lines.peek().is_some_and(|next| next.starts_with('\\')) {
                lines.next();
                if text.ends_with('\n') {
                    text.pop();
                }
            }
            hunk.lines.push(Line { tag, text });
        }
        // A marker may follow the last line of the last hunk.
        if lines.peek().is_some_and(|next| next.starts_with('\\')) {
            lines.next();
            if let Some(last) = hunk.lines.last_mut() {
                if last.text.ends_with('\n') {
                    last.text.pop();
                }
            }
        }
        out.push(hunk);
    }
    Some(out)
}

/// Applies `diff` to `text`: forwards when `reverse` is false (the text is
/// the old side), backwards when true (the text is the new side).
pub(crate) fn apply(text: &str, diff: &str, reverse: bool) -> Option<String> {
    let hunks = hunks(diff)?;
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let mut out = String::with_capacity(text.len() + diff.len());
    let mut at = 0;
    for hunk in &hunks {
        let (start, count) = if reverse { (hunk.new_start, hunk.new_count) } else { (hunk.old_start, hunk.old_count) };
        let (from_tag, to_tag) = if reverse { ('+', '-') } else { ('-', '+') };
        // An empty range names the line after which it stands.
        let begin = if count == 0 { start } else { start.checked_sub(1)? };
        if begin < at || begin > lines.len() {
            return None;
        }
        for line in &lines[at..begin] {
            out.push_str(line);
        }
        at = begin;
        for line in &hunk.lines {
            if line.tag == ' ' || line.tag == from_tag {
                if lines.get(at) != Some(&line.text.as_str()) {
                    return None;
                }
                at += 1;
            }
            if line.tag == ' ' || line.tag == to_tag {
                out.push_str(&line.text);
            }
        }
    }
    for line in &lines[at..] {
        out.push_str(line);
    }
    Some(out)
}

/// One file's part of a prompt's summary (`--- a/x`, `+++ b/y`, hunks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Section {
    /// The old path, relative to the boundary; `None` for `/dev/null`.
    pub from: Option<String>,
    /// The new path; `None` for `/dev/null` (a deletion).
    pub to: Option<String>,
    /// The hunks, or a sentence (a deletion says where the file goes).
    pub body: String,
}

fn side(line: &str, prefix: &str, letter: &str) -> Option<Option<String>> {
    let rest = line.strip_prefix(prefix)?;
    if rest == "/dev/null" {
        return Some(None);
    }
    Some(Some(rest.strip_prefix(letter).unwrap_or(rest).to_string()))
}

/// Splits a prompt's summary into its files. Hunk lines are counted by their
/// headers, so a removed line that reads `-- x` is not taken for a header.
pub(crate) fn sections(summary: &str) -> Vec<Section> {
    let mut out: Vec<Section> = Vec::new();
    let lines: Vec<&str> = summary.split_inclusive('\n').collect();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim_end_matches('\n');
        let next = lines.get(i + 1).map(|l| l.trim_end_matches('\n'));
        if let (Some(from), Some(Some(to))) = (side(line, "--- ", "a/"), next.map(|n| side(n, "+++ ", "b/"))) {
            out.push(Section { from, to, body: String::new() });
            i += 2;
            continue;
        }
        let Some(current) = out.last_mut() else {
            i += 1;
            continue;
        };
        if let Some((_, old_count, _, new_count)) = header(line) {
            current.body.push_str(lines[i]);
            i += 1;
            let (mut old_left, mut new_left) = (old_count, new_count);
            while (old_left > 0 || new_left > 0) && i < lines.len() {
                let hunk_line = lines[i];
                match hunk_line.chars().next() {
                    Some(' ') => {
                        old_left = old_left.saturating_sub(1);
                        new_left = new_left.saturating_sub(1);
                    }
                    Some('-') => old_left = old_left.saturating_sub(1),
                    Some('+') => new_left = new_left.saturating_sub(1),
                    Some('\\') => {}
                    _ => break,
                }
                current.body.push_str(hunk_line);
                i += 1;
            }
            while i < lines.len() && lines[i].starts_with('\\') {
                current.body.push_str(lines[i]);
                i += 1;
            }
            continue;
        }
        current.body.push_str(lines[i]);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::text::unified_diff;
    use proptest::prelude::*;

    fn both_ways(old: &str, new: &str) {
        let diff = unified_diff(old, new);
        assert_eq!(apply(old, &diff, false).as_deref(), Some(new), "forwards:\n{diff}");
        assert_eq!(apply(new, &diff, true).as_deref(), Some(old), "backwards:\n{diff}");
    }

    #[test]
    fn hunks_apply_both_ways() {
        let old: String = (1..=30).map(|i| format!("line {i}\n")).collect();
        both_ways(&old, &old.replace("line 15\n", "line fifteen\n"));
        both_ways(&old, &old.replace("line 1\n", ""));
        both_ways(&old, &format!("{old}tail\n"));
        both_ways(&old, &old.replace("line 3\n", "a\nb\nc\n").replace("line 28\n", ""));
        both_ways("", "one\ntwo\n");
        both_ways("one\ntwo\n", "");
        both_ways("x", "y");
        both_ways("a\nb", "a\nb\n");
        both_ways("a\nb\n", "a\nc");
        both_ways("-- a\n--- b\n+++ c\n", "--- b\n");
    }

    #[test]
    fn a_text_the_hunks_do_not_fit_gives_none() {
        let diff = unified_diff("a\nb\nc\n", "a\nB\nc\n");
        assert_eq!(apply("a\nx\nc\n", &diff, false), None);
        assert_eq!(apply("a\nb\nc\n", &diff, true), None);
        assert_eq!(apply("a\n", "not a diff\n", false), None);
        assert_eq!(apply("a\nb\nc\n", "", false).as_deref(), Some("a\nb\nc\n"));
    }

    #[test]
    fn a_summary_splits_into_files() {
        let one = unified_diff("a\n-- b\nc\n", "a\nc\n");
        let two = unified_diff("", "new\n");
        let summary = format!(
            "--- a/notes/a.md\n+++ b/notes/a.md\n{one}--- /dev/null\n+++ b/b.md\n{two}--- a/gone.md\n+++ /dev/null\n(the file goes to the trash)\n"
        );
        let found = sections(&summary);
        assert_eq!(found.len(), 3, "{found:?}");
        assert_eq!(found[0].from.as_deref(), Some("notes/a.md"));
        assert_eq!(found[0].body, one);
        assert_eq!(found[1].from, None);
        assert_eq!(found[1].to.as_deref(), Some("b.md"));
        assert_eq!(apply("", &found[1].body, false).as_deref(), Some("new\n"));
        assert_eq!(found[2].to, None);
        assert_eq!(found[2].from.as_deref(), Some("gone.md"));
    }

    proptest! {
        #[test]
        fn any_change_round_trips(old in proptest::collection::vec("[abc]{0,3}", 0..12),
                                  new in proptest::collection::vec("[abc]{0,3}", 0..12),
                                  old_end in any::<bool>(), new_end in any::<bool>()) {
            let join = |lines: &[String], end: bool| {
                let mut text = lines.join("\n");
                if end && !text.is_empty() { text.push('\n'); }
                text
            };
            let (old, new) = (join(&old, old_end), join(&new, new_end));
            let diff = unified_diff(&old, &new);
            prop_assert_eq!(apply(&old, &diff, false), Some(new.clone()));
            prop_assert_eq!(apply(&new, &diff, true), Some(old));
        }
    }
}
