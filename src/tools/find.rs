//! glob and grep: matching over the files the view-checked walk (`access::walk`) finds; not the walk.
//!
//! Matching uses ripgrep's own crates. Results are sorted by path so the
//! same call on the same tree answers the same text.

use super::params::{GlobParams, GrepOutput, GrepParams};
use super::spec::{Action, Tool, Traits};
use super::{Ctx, Outcome, ToolResult};
use crate::access::walk::Scope;
use crate::access::{Need, Target, ToolError};
use crate::vfs::Source;
use globset::{GlobBuilder, GlobMatcher};
use grep_matcher::LineTerminator;
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkContextKind, SinkMatch};
use std::sync::Mutex;

/// The most paths glob answers.
pub const GLOB_LIMIT: usize = 500;
/// The most lines grep keeps; past it, it stops and says so.
pub const GREP_LINE_LIMIT: usize = 20_000;
/// Matched lines longer than this are cut.
const GREP_LINE_CHARS: usize = 500;

/// A glob over paths relative to a search root: a pattern with no `/`
/// matches a file's name at any depth, as ripgrep's `--glob` does; a
/// filter starting with `!` keeps the files it does not match.
pub struct PathPattern {
    matcher: GlobMatcher,
    by_name: bool,
    negated: bool,
}

impl PathPattern {
    /// A pattern of files to find; a leading `!` is refused, saying why.
    pub fn new(pattern: &str) -> Result<PathPattern, ToolError> {
        if pattern.starts_with('!') {
            return Err(ToolError::Message(format!(
                "A pattern starting with `!` leaves files out, and glob only finds the files a pattern matches, so {pattern:?} would find nothing. Give the pattern of the files you want; to search every file but some, use grep with `glob: {pattern:?}`."
            )));
        }
        PathPattern::build(pattern, false)
    }

    /// A filter of files to search: `!pattern` keeps the files it does not match.
    pub fn filter(pattern: &str) -> Result<PathPattern, ToolError> {
        match pattern.strip_prefix('!') {
            Some(rest) => PathPattern::build(rest, true),
            None => PathPattern::build(pattern, false),
        }
    }

    fn build(pattern: &str, negated: bool) -> Result<PathPattern, ToolError> {
        let pattern = pattern.trim_start_matches("./");
        if pattern.split('/').any(|part| part == "..") {
            return Err(ToolError::Message(
                "A pattern may not contain `..`; give the directory to search as `path` instead.".into(),
            ));
        }
        let glob = GlobBuilder::new(pattern)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|e| ToolError::Message(format!("Invalid glob pattern {pattern:?}: {}.", e.kind())))?;
        Ok(PathPattern { matcher: glob.compile_matcher(), by_name: !pattern.contains('/'), negated })
    }

    pub fn is_match(&self, rel: &str) -> bool {
        let matched = if self.by_name {
            self.matcher.is_match(rel.rsplit('/').next().unwrap_or(rel))
        } else {
            self.matcher.is_match(rel)
        };
        matched != self.negated
    }
}

/// Splits an absolute glob pattern into the directory it names literally and the rest.
fn split_absolute(pattern: &str) -> (String, String) {
    let parts: Vec<&str> = pattern.split('/').collect();
    let literal = parts.iter().take_while(|p| !p.contains(['*', '?', '[', '{', '\\'])).count();
    let literal = literal.min(parts.len().saturating_sub(1));
    let dir = parts[..literal].join("/");
    (if dir.is_empty() { "/".to_string() } else { dir }, parts[literal..].join("/"))
}

/// Checks a directory to search in.
fn search_root(ctx: &Ctx<'_>, path: Option<&str>) -> Result<Target, ToolError> {
    let root = ctx.access.target(path.unwrap_or("."), Need::Look)?;
    match root.kind() {
        None => Err(ToolError::NotFound(root.path)),
        Some(_) => Ok(root),
    }
}

pub fn glob(ctx: &mut Ctx<'_>, params: GlobParams) -> ToolResult {
    let (path, pattern) = if params.pattern.starts_with('/') {
        if params.path.is_some() {
            return Err(ToolError::Message("Give either an absolute pattern or a path, not both.".into()));
        }
        let (dir, rest) = split_absolute(&params.pattern);
        (Some(dir), rest)
    } else {
        (params.path.clone(), params.pattern.clone())
    };
    let matcher = PathPattern::new(&pattern)?;
    let root = search_root(ctx, path.as_deref())?;
    if !root.is_dir() {
        return Err(ToolError::NotADir(root.path));
    }
    let found = Mutex::new(Vec::new());
    let scope = Scope::new(ctx.access, root);
    scope.files(&|shown, rel, _open| {
        if matcher.is_match(rel) {
            found.lock().unwrap_or_else(|e| e.into_inner()).push(shown.to_string());
        }
    })?;
    let mut found = found.into_inner().unwrap_or_else(|e| e.into_inner());
    found.sort_unstable();
    let total = found.len();
    let mut body = String::new();
    for path in found.iter().take(GLOB_LIMIT) {
        body.push_str(path);
        body.push('\n');
    }
    if total == 0 {
        body.push_str(&format!("No files match {:?} in {}.\n", params.pattern, scope.root.path));
    } else if total > GLOB_LIMIT {
        body.push_str(&format!("(Stopped at {GLOB_LIMIT} of {total} matches; narrow the pattern or the path.)\n"));
    }
    Ok(Outcome::Text { body, path: Some(scope.root.path) })
}

/// Collects one file's grep output in ripgrep's format.
struct FileSink<'a> {
    path: &'a str,
    mode: GrepOutput,
    out: String,
    lines: usize,
    matches: usize,
    binary: bool,
}

impl FileSink<'_> {
    fn line(&mut self, number: Option<u64>, sep: char, bytes: &[u8]) {
        let text = String::from_utf8_lossy(bytes);
        let text = text.trim_end_matches(['\n', '\r']);
        self.out.push_str(self.path);
        self.out.push(sep);
        if let Some(n) = number {
            self.out.push_str(&n.to_string());
            self.out.push(sep);
        }
        if text.chars().count() > GREP_LINE_CHARS {
            let cut: String = text.chars().take(GREP_LINE_CHARS).collect();
            self.out.push_str(&cut);
            self.out.push_str(" […line cut]");
        } else {
            self.out.push_str(text);
        }
        self.out.push('\n');
        self.lines += 1;
    }
}

impl Sink for FileSink<'_> {
    type Error = std::io::Error;

    fn matched(&mut self, _: &Searcher, mat: &SinkMatch<'_>) -> Result<bool, std::io::Error> {
        self.matches += 1;
        if self.mode == GrepOutput::Content {
            let first = mat.line_number();
            for (i, line) in mat.lines().enumerate() {
                self.line(first.map(|n| n + i as u64), ':', line);
            }
        }
        Ok(self.mode != GrepOutput::Files && self.lines < GREP_LINE_LIMIT)
    }

    fn context(&mut self, _: &Searcher, context: &SinkContext<'_>) -> Result<bool, std::io::Error> {
        if self.mode == GrepOutput::Content && !matches!(context.kind(), SinkContextKind::Other) {
            self.line(context.line_number(), '-', context.bytes());
        }
        Ok(self.lines < GREP_LINE_LIMIT)
    }

    fn context_break(&mut self, _: &Searcher) -> Result<bool, std::io::Error> {
        if self.mode == GrepOutput::Content {
            self.out.push_str("--\n");
        }
        Ok(true)
    }

    fn binary_data(&mut self, _: &Searcher, _: u64) -> Result<bool, std::io::Error> {
        self.binary = true;
        Ok(false)
    }
}

/// Searches one source; answers its output text and line count, or nothing.
fn grep_source(
    searcher: &mut Searcher,
    matcher: &RegexMatcher,
    shown: &str,
    mode: GrepOutput,
    source: Source,
) -> Option<(String, usize)> {
    let mut sink = FileSink { path: shown, mode, out: String::new(), lines: 0, matches: 0, binary: false };
    let result = match &source {
        Source::File(file) => searcher.search_file(matcher, file, &mut sink),
        Source::Bytes(bytes) => searcher.search_slice(matcher, bytes, &mut sink),
    };
    if result.is_err() || sink.binary || sink.matches == 0 {
        return None;
    }
    match mode {
        GrepOutput::Content => Some((sink.out, sink.lines)),
        GrepOutput::Files => Some((format!("{shown}\n"), 1)),
        GrepOutput::Count => Some((format!("{shown}:{}\n", sink.matches), 1)),
    }
}

pub fn grep(ctx: &mut Ctx<'_>, params: GrepParams) -> ToolResult {
    if params.pattern.is_empty() {
        return Err(ToolError::Message("The pattern is empty; give text or a regular expression to look for.".into()));
    }
    // Matching line by line (as ripgrep without -U) lets the matcher look for
    // a literal inside the pattern first: several times faster on most regexes.
    // CRLF mode (ripgrep's --crlf): `$` matches before `\r\n` too, so a CRLF
    // file answers as it reads (its lines shown without the `\r`).
    let matcher = RegexMatcherBuilder::new()
        .case_insensitive(params.ignore_case.unwrap_or(false))
        .fixed_strings(params.fixed_strings.unwrap_or(false))
        .crlf(true)
        .build(&params.pattern)
        .map_err(|e| {
            let hint = if params.pattern.contains("\\n") || params.pattern.contains('\n') {
                " grep matches one line at a time, so a pattern cannot contain a line break."
            } else {
                ""
            };
            ToolError::Message(format!("Invalid regular expression: {e}.{hint}"))
        })?;
    let filter = params.glob.as_deref().map(PathPattern::filter).transpose()?;
    let mode = params.output.unwrap_or(GrepOutput::Content);
    let context = params.context.unwrap_or(0).min(50) as usize;
    let builder = {
        let mut b = SearcherBuilder::new();
        b.binary_detection(BinaryDetection::quit(0))
            .line_terminator(LineTerminator::crlf())
            .line_number(true)
            .before_context(context)
            .after_context(context);
        b
    };
    let root = search_root(ctx, params.path.as_deref())?;
    let results: Mutex<Vec<(String, String, usize)>> = Mutex::new(Vec::new());
    if root.is_dir() {
        let scope = Scope::new(ctx.access, root.clone());
        thread_local! {
            static SEARCHER: std::cell::RefCell<Option<(usize, Searcher)>> = const { std::cell::RefCell::new(None) };
        }
        scope.files(&|shown, rel, found| {
            if filter.as_ref().is_some_and(|f| !f.is_match(rel)) {
                return;
            }
            let Some(source) = (found.open)() else { return };
            let shown = shown.to_string();
            let found = SEARCHER.with(|cell| {
                let mut cell = cell.borrow_mut();
                if cell.as_ref().is_none_or(|(key, _)| *key != context) {
                    *cell = Some((context, builder.build()));
                }
                let (_, searcher) = cell.as_mut().expect("just set");
                grep_source(searcher, &matcher, &shown, mode, source)
            });
            if let Some((text, lines)) = found {
                results.lock().unwrap_or_else(|e| e.into_inner()).push((shown, text, lines));
            }
        })?;
    } else {
        let bytes = ctx
            .access
            .fs()
            .read_file(&root.real, crate::access::MAX_OPEN_BYTES)
            .map_err(|e| ToolError::from_fs(e, &root.path))?;
        let shown = root.path.to_string();
        if let Some((text, lines)) =
            grep_source(&mut builder.build(), &matcher, &shown, mode, Source::Bytes(bytes.into()))
        {
            results.lock().unwrap_or_else(|e| e.into_inner()).push((shown, text, lines));
        }
    }
    let mut results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    results.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let mut body = String::new();
    let mut lines = 0usize;
    let mut stopped = false;
    for (_, text, count) in &results {
        if lines + count > GREP_LINE_LIMIT && lines > 0 {
            stopped = true;
            break;
        }
        if context > 0 && mode == GrepOutput::Content && !body.is_empty() {
            body.push_str("--\n");
        }
        body.push_str(text);
        lines += count;
    }
    if results.is_empty() {
        body.push_str(&format!("No matches for {:?} in {}.\n", params.pattern, root.path));
    } else if stopped {
        body.push_str(&format!("(Stopped at {lines} lines; narrow the pattern, the path or the glob.)\n"));
    }
    Ok(Outcome::Text { body, path: Some(root.path) })
}

// --- The tools' definitions (see `spec`) -------------------------------------

pub struct Glob;

impl Tool for Glob {
    const NAME: &'static str = "glob";
    const TITLE: &'static str = "Find files by name";
    const TRAITS: Traits = Traits::GUARDED.reads().action(Action::Search).dedupes().progress();
    type Params = GlobParams;

    fn run(ctx: &mut Ctx<'_>, params: GlobParams) -> ToolResult {
        glob(ctx, params)
    }
}

pub struct Grep;

impl Tool for Grep {
    const NAME: &'static str = "grep";
    const TITLE: &'static str = "Search file contents";
    const TRAITS: Traits = Traits::GUARDED.reads().action(Action::Search).dedupes().progress();
    type Params = GrepParams;

    fn run(ctx: &mut Ctx<'_>, params: GrepParams) -> ToolResult {
        grep(ctx, params)
    }
}
