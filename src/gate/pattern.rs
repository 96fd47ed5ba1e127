//! Path patterns of rules and grants: `path.Match` globs over
//! workspace-relative paths.
//!
//! `*` matches any run of characters but `/`, `?` one character but `/`,
//! `[...]` one character of a class (`[^...]` or `[!...]` negated, `a-z`
//! ranges; never `/`), `\c` the character `c`. A glob does not cross `/`, so
//! `notes/*` covers `notes/todo.md` and not `notes/2026/todo.md`. The pattern
//! `*` on its own means any path. Nothing here knows of files.

use std::fmt;

/// A checked pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    text: String,
    /// The pattern `*` alone: any path, at any depth.
    any: bool,
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Pattern {
    /// Checks a pattern's syntax; the error is a sentence fragment saying what is wrong.
    pub fn parse(text: &str) -> Result<Pattern, String> {
        if text == "*" {
            return Ok(Pattern { text: text.into(), any: true });
        }
        if text.is_empty() {
            return Err("a pattern may not be empty".into());
        }
        if text.starts_with('/') {
            return Err(format!(
                "{text:?} starts with /: patterns are relative to the workspace (notes/*, not /notes/*)"
            ));
        }
        if text.ends_with('/') {
            return Err(format!("{text:?} ends with /: name the paths, such as {}*", text));
        }
        for segment in text.split('/') {
            if segment.is_empty() || segment == "." || segment == ".." {
                return Err(format!("{text:?} has an empty, . or .. part"));
            }
            check_segment(segment).map_err(|why| format!("{text:?}: {why}"))?;
        }
        Ok(Pattern { text: text.into(), any: false })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether the workspace-relative `path` (no leading `/`) matches.
    pub fn matches(&self, path: &str) -> bool {
        if self.any {
            return true;
        }
        let pattern: Vec<&str> = self.text.split('/').collect();
        let parts: Vec<&str> = path.split('/').collect();
        pattern.len() == parts.len()
            && pattern.iter().zip(&parts).all(|(p, s)| {
                let p: Vec<char> = p.chars().collect();
                let s: Vec<char> = s.chars().collect();
                match_segment(&p, &s)
            })
    }
}

/// The pattern matching exactly `literal`: its special characters escaped.
pub fn escape(literal: &str) -> String {
    let mut out = String::with_capacity(literal.len());
    for c in literal.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The one widening an approval offers: the files of the path's directory
/// (`notes/todo.md` → `notes/*`); none for a path at the workspace root.
pub fn directory_of(rel: &str) -> Option<String> {
    let (dir, _) = rel.rsplit_once('/')?;
    Some(format!("{}/*", escape(dir)))
}

fn check_segment(segment: &str) -> Result<(), String> {
    let chars: Vec<char> = segment.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '\\' => {
                if i + 1 >= chars.len() {
                    return Err("it ends with a lone \\".into());
                }
                i += 2;
            }
            '[' => i = class_end(&chars, i)?.1,
            ']' => return Err("it has a ] without a [".into()),
            _ => i += 1,
        }
    }
    Ok(())
}

/// Parses the class starting at `chars[start] == '['`: its ranges, whether
/// it is negated, and the index just past its `]`.
#[allow(clippy::type_complexity)]
fn class_end(chars: &[char], start: usize) -> Result<(Vec<(char, char)>, usize, bool), String> {
    let mut i = start + 1;
    let negated = matches!(chars.get(i), Some('^') | Some('!'));
    if negated {
        i += 1;
    }
    let mut ranges = Vec::new();
    let mut first = true;
    loop {
        let Some(&c) = chars.get(i) else { return Err("it has a [ without its ]".into()) };
        if c == ']' && !first {
            return Ok((ranges, i + 1, negated));
        }
        if c == ']' {
            return Err("it has an empty class []".into());
        }
        first = false;
        let (lo, next) = class_char(chars, i)?;
        i = next;
        if chars.get(i) == Some(&'-') && chars.get(i + 1).is_some_and(|c| *c != ']') {
            let (hi, next) = class_char(chars, i + 1)?;
            if hi < lo {
                return Err(format!("its range {lo}-{hi} is backwards"));
            }
            ranges.push((lo, hi));
            i = next;
        } else {
            ranges.push((lo, lo));
        }
    }
}

fn class_char(chars: &[char], i: usize) -> Result<(char, usize), String> {
    match chars.get(i) {
        Some('\\') => chars.get(i + 1).map(|c| (*c, i + 2)).ok_or_else(|| "it ends with a lone \\".into()),
        Some(c) => Ok((*c, i + 1)),
        None => Err("it has a [ without its ]".into()),
    }
}

/// Matches one segment (no `/` on either side) with backtracking on `*`.
fn match_segment(p: &[char], s: &[char]) -> bool {
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() {
            match p[pi] {
                '*' => {
                    star = Some((pi, si));
                    pi += 1;
                    continue;
                }
                '?' => {
                    pi += 1;
                    si += 1;
                    continue;
                }
                '[' => {
                    if let Ok((ranges, end, negated)) = class_end(p, pi) {
                        let inside = ranges.iter().any(|(lo, hi)| *lo <= s[si] && s[si] <= *hi);
                        if inside != negated {
                            pi = end;
                            si += 1;
                            continue;
                        }
                    }
                }
                '\\' if pi + 1 < p.len() && p[pi + 1] == s[si] => {
                    pi += 2;
                    si += 1;
                    continue;
                }
                c if c != '\\' && c == s[si] => {
                    pi += 1;
                    si += 1;
                    continue;
                }
                _ => {}
            }
        }
        match star {
            Some((sp, ss)) => {
                pi = sp + 1;
                si = ss + 1;
                star = Some((sp, ss + 1));
            }
            None => return false,
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pattern: &str, path: &str) -> bool {
        Pattern::parse(pattern).unwrap().matches(path)
    }

    #[test]
    fn globs_do_not_cross_slashes() {
        assert!(m("notes/*", "notes/todo.md"));
        assert!(!m("notes/*", "notes/2026/todo.md"));
        assert!(!m("notes/*", "notes"));
        assert!(m("notes/*/todo.md", "notes/2026/todo.md"));
        assert!(m("*", "notes/2026/todo.md"));
        assert!(m("*", "a"));
        assert!(!m("*.md", "notes/a.md"));
        assert!(m("*.md", "a.md"));
        assert!(m("notes/todo.md", "notes/todo.md"));
        assert!(!m("notes/todo.md", "notes/todo.mdx"));
        assert!(m("n?tes/a*b*c", "notes/aXXbYYc"));
        assert!(!m("n?tes/*", "n/tes/a"));
    }

    #[test]
    fn classes_and_escapes() {
        assert!(m("[a-c].md", "b.md"));
        assert!(!m("[a-c].md", "d.md"));
        assert!(m("[^a-c].md", "d.md"));
        assert!(m("[!a-c].md", "d.md"));
        assert!(!m("[^a-c].md", "a.md"));
        assert!(m(r"\*.md", "*.md"));
        assert!(!m(r"\*.md", "a.md"));
        assert!(m(&escape("notes/[draft] *?.md"), "notes/[draft] *?.md"));
        assert!(!m(&escape("notes/[draft].md"), "notes/d.md"));
    }

    #[test]
    fn bad_patterns_are_refused() {
        for bad in ["", "/notes/*", "notes/", "notes//a", "../a", "a/./b", "[abc", "a\\", "[]", "a]", "[z-a]"] {
            assert!(Pattern::parse(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn the_widening_is_the_directory() {
        assert_eq!(directory_of("notes/todo.md").as_deref(), Some("notes/*"));
        assert_eq!(directory_of("a/b/c.md").as_deref(), Some("a/b/*"));
        assert_eq!(directory_of("todo.md"), None);
        assert_eq!(directory_of("n[1]/a").as_deref(), Some(r"n\[1\]/*"));
    }
}
