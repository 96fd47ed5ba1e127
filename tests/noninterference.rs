//! Non-interference: what a session cannot see changes none of its answers.
//!
//! A property test over the engine in the tree posture, on the real OS file
//! system. It generates a small tree (directories and text files, names from
//! a small alphabet, contents from a few common words and ignore patterns)
//! and a view (grants and floors at random paths, always granting something
//! readable). It then makes a *hidden variation* of the tree: every path at
//! level none that is neither a passage nor an ancestor of something visible
//! may get new contents, be removed, be replaced by another subtree, and new
//! hidden names may appear. Two properties differ only in what the variation
//! may touch: `hidden_paths_change_no_answer` leaves hidden ignore files
//! alone, `hidden_ignore_files_change_no_answer` also varies `.gitignore`,
//! `.ignore` and `.git` (with an `info/exclude`) at hidden paths, which a
//! walk might be tempted to read. Minimal cases it found are kept at the
//! end as plain tests. The same
//! list of calls (list, read, stat, glob, grep, search, and changes: write,
//! mkdir, mv, rm; at every visible, hidden, passage and missing path and
//! below them) runs against both trees, each in a fresh engine and session,
//! and every answer text must be identical.
//!
//! Identity alone cannot see a hidden file that leaks the same way in both
//! trees, so every hidden file also carries a marker line that no answer
//! may ever hold.
//!
//! The view's levels are computed here by an independent model of the spec
//! (most specific grant, lowered to the most specific floor), not by the
//! server's `View`, so a bug there cannot hide itself.
//!
//! Times are pinned: every node of both trees gets the same modification
//! time, and `stat` is only called before any change (a change sets a
//! visible directory's time to the wall clock, which two runs cannot share).
//! A directory's modification time is itself a channel (creating a hidden
//! entry in a visible directory changes it); the variation is made before
//! the times are pinned, so that channel is not what this test looks at.

#![cfg(unix)]

use ctxfs::engine::{Config, Engine, Posture, Session, SessionOptions};
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, FileFailurePersistence};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File, FileTimes};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

/// A line every hidden file holds and no answer may.
const MARKER: &str = "qqsecretqq";

// ---------------------------------------------------------------------------
// Trees

#[derive(Clone, PartialEq, Eq)]
enum T {
    File(String),
    Dir(BTreeMap<String, T>),
}

impl std::fmt::Debug for T {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        fn go(t: &T, path: &str, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            match t {
                T::File(text) => writeln!(f, "  {path} = {text:?}"),
                T::Dir(children) => {
                    writeln!(f, "  {}/", if path.is_empty() { "" } else { path })?;
                    for (name, child) in children {
                        go(child, &format!("{path}/{name}"), f)?;
                    }
                    Ok(())
                }
            }
        }
        writeln!(f)?;
        go(self, "", f)
    }
}

const NAMES: [&str; 7] = ["a", "b", "c", "ab", "a.md", "b.txt", ".gitignore"];
/// Names the variation may add.
const NEW_NAMES: [&str; 8] = ["a", "b", "c", "ab", "a.md", "b.txt", "zz", "x.md"];
/// The names a walk reads for ignore rules (`.git` holds `info/exclude`).
const IGNORE_NAMES: [&str; 3] = [".gitignore", ".ignore", ".git"];

fn is_ignore_name(name: &str) -> bool {
    IGNORE_NAMES.contains(&name)
}
/// Names view entries are made of.
const KEY_NAMES: [&str; 8] = ["a", "b", "c", "ab", "a.md", "b.txt", ".gitignore", ".git"];
const LINES: [&str; 14] = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "fn main() {}",
    "TODO fix",
    "alpha beta",
    "*.md",
    "a",
    "b/",
    "!a.md",
    "*",
    "c*",
    "*.txt",
];

fn content() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(&LINES[..]), 0..5).prop_map(|lines| {
        let mut text = lines.join("\n");
        if !text.is_empty() {
            text.push('\n');
        }
        text
    })
}

fn tree() -> impl Strategy<Value = T> {
    let leaf = content().prop_map(T::File);
    let node = leaf.prop_recursive(3, 16, 3, |inner| {
        prop::collection::btree_map(prop::sample::select(&NAMES[..]).prop_map(str::to_string), inner, 0..4)
            .prop_map(T::Dir)
    });
    prop::collection::btree_map(prop::sample::select(&NAMES[..]).prop_map(str::to_string), node, 1..4).prop_map(T::Dir)
}

fn join(parent: &str, name: &str) -> String {
    if parent == "/" {
        format!("/{name}")
    } else {
        format!("{parent}/{name}")
    }
}

/// Every path of a tree, `/` included, with whether it is a directory.
fn paths(t: &T) -> Vec<(String, bool)> {
    fn go(t: &T, path: &str, out: &mut Vec<(String, bool)>) {
        out.push((path.to_string(), matches!(t, T::Dir(_))));
        if let T::Dir(children) = t {
            for (name, child) in children {
                go(child, &join(path, name), out);
            }
        }
    }
    let mut out = Vec::new();
    go(t, "/", &mut out);
    out
}

fn build(t: &T, at: &Path) {
    match t {
        T::File(text) => fs::write(at, text).unwrap(),
        T::Dir(children) => {
            fs::create_dir_all(at).unwrap();
            for (name, child) in children {
                build(child, &at.join(name));
            }
        }
    }
}

/// Gives every node below `at` (and `at`) the same access and modification time.
fn pin_times(at: &Path) {
    let meta = fs::symlink_metadata(at).unwrap();
    if meta.is_dir() {
        for entry in fs::read_dir(at).unwrap() {
            pin_times(&entry.unwrap().path());
        }
    }
    let when = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    File::open(at).unwrap().set_times(FileTimes::new().set_accessed(when).set_modified(when)).unwrap();
}

// ---------------------------------------------------------------------------
// The view, modelled independently

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Level {
    None,
    Ro,
    Stage,
}

impl Level {
    fn name(self) -> &'static str {
        match self {
            Level::None => "none",
            Level::Ro => "ro",
            Level::Stage => "stage",
        }
    }
}

#[derive(Clone, Debug)]
struct ViewModel {
    grants: BTreeMap<String, Level>,
    floors: BTreeMap<String, Level>,
}

/// `p` is `a` or lies below it, by components.
fn at_or_below(p: &str, a: &str) -> bool {
    a == "/" || p == a || (p.starts_with(a) && p.as_bytes().get(a.len()) == Some(&b'/'))
}

impl ViewModel {
    fn most_specific(map: &BTreeMap<String, Level>, p: &str) -> Option<Level> {
        map.iter()
            .filter(|(k, _)| at_or_below(p, k))
            .max_by_key(|(k, _)| if *k == "/" { 0 } else { k.matches('/').count() })
            .map(|(_, l)| *l)
    }

    fn level(&self, p: &str) -> Level {
        let granted = ViewModel::most_specific(&self.grants, p).unwrap_or(Level::None);
        match ViewModel::most_specific(&self.floors, p) {
            Some(floor) => granted.min(floor),
            None => granted,
        }
    }

    /// At none, and nothing below it visible: the variation may change it freely.
    fn hidden(&self, p: &str) -> bool {
        self.level(p) == Level::None
            && self
                .grants
                .keys()
                .chain(self.floors.keys())
                .all(|k| k == p || !at_or_below(k, p) || self.level(k) < Level::Ro)
    }

    fn json(&self) -> String {
        let map = |m: &BTreeMap<String, Level>| -> Value {
            m.iter().map(|(k, l)| (k.clone(), json!(l.name()))).collect::<serde_json::Map<_, _>>().into()
        };
        json!({"grants": map(&self.grants), "floors": map(&self.floors)}).to_string()
    }
}

fn key_path() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(&KEY_NAMES[..]), 0..4).prop_map(|names| format!("/{}", names.join("/")))
}

fn level() -> impl Strategy<Value = Level> {
    prop_oneof![2 => Just(Level::None), 1 => Just(Level::Ro), 1 => Just(Level::Stage)]
}

/// View entries at the tree's own paths (and at ignore-file names in its
/// directories) half of the time, at any path of the alphabet otherwise.
fn key_for(t: &T) -> BoxedStrategy<String> {
    let mut near: Vec<String> = Vec::new();
    for (p, is_dir) in paths(t) {
        if is_dir {
            for name in IGNORE_NAMES {
                near.push(join(&p, name));
            }
        }
        near.push(p);
    }
    prop_oneof![prop::sample::select(near), key_path()].boxed()
}

fn tree_and_view() -> impl Strategy<Value = (T, ViewModel)> {
    tree().prop_flat_map(|t| {
        let key = key_for(&t);
        (Just(t), view(key))
    })
}

fn view(key: BoxedStrategy<String>) -> impl Strategy<Value = ViewModel> {
    (
        // The root granted half of the time, so that walks cross what is hidden.
        prop_oneof![Just("/".to_string()), key.clone()],
        prop_oneof![Just(Level::Ro), Just(Level::Stage)],
        prop::collection::btree_map(key.clone(), level(), 0..4),
        prop::collection::btree_map(key, level(), 0..3),
    )
        .prop_map(|(readable, readable_level, mut grants, floors)| {
            grants.insert(readable.clone(), readable_level);
            // Always something visible: the readable grant stays above its floor.
            let mut view = ViewModel { grants, floors };
            if view.level(&readable) < Level::Ro {
                view.floors.retain(|k, _| !at_or_below(&readable, k));
            }
            view
        })
}

// ---------------------------------------------------------------------------
// The hidden variation

/// A small deterministic generator for the variation's choices (proptest
/// shrinks the tree and the view; the variation follows its seed).
/// `ignore_files` says whether the variation may touch ignore files
/// (`.gitignore`, `.ignore`, `.git`) at hidden paths.
struct Rng(u64, bool);

impl Rng {
    fn next(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn text(&mut self) -> String {
        let mut text = String::new();
        for _ in 0..self.below(4) {
            text.push_str(LINES[self.below(LINES.len() as u64) as usize]);
            text.push('\n');
        }
        text.push_str(MARKER);
        text.push('\n');
        text
    }

    /// Ignore rules (at least one), then the marker.
    fn rules(&mut self) -> String {
        const RULES: [&str; 8] = ["*", "*.md", "a", "b/", "!a.md", "c*", "*.txt", "ab"];
        let mut text = String::new();
        for _ in 0..=self.below(3) {
            text.push_str(RULES[self.below(RULES.len() as u64) as usize]);
            text.push('\n');
        }
        text.push_str(MARKER);
        text.push('\n');
        text
    }

    fn subtree(&mut self, name: &str, depth: u32) -> T {
        if name == ".git" {
            let mut info = BTreeMap::new();
            info.insert("exclude".to_string(), T::File(self.rules()));
            let mut git = BTreeMap::new();
            git.insert("info".to_string(), T::Dir(info));
            return T::Dir(git);
        }
        if name == ".gitignore" || name == ".ignore" {
            return T::File(self.rules());
        }
        if depth == 0 || self.below(2) == 0 {
            return T::File(self.text());
        }
        let mut children = BTreeMap::new();
        for _ in 0..self.below(3) {
            let child = self.name();
            children.insert(child.to_string(), self.subtree(child, depth - 1));
        }
        T::Dir(children)
    }

    fn names(&self) -> Vec<&'static str> {
        let mut names = NEW_NAMES.to_vec();
        if self.1 {
            names.extend(IGNORE_NAMES);
        }
        names
    }

    fn name(&mut self) -> &'static str {
        let names = self.names();
        names[self.below(names.len() as u64) as usize]
    }
}

/// Every file the view puts at none gets the marker line (both trees share this).
fn mark_hidden(t: &mut T, path: &str, view: &ViewModel) {
    match t {
        T::File(text) => {
            if view.level(path) == Level::None {
                text.push_str(MARKER);
                text.push('\n');
            }
        }
        T::Dir(children) => {
            for (name, child) in children.iter_mut() {
                mark_hidden(child, &join(path, name), view);
            }
        }
    }
}

/// The hidden variation of `t` at `path` (a directory that is not hidden).
fn vary(t: &T, path: &str, view: &ViewModel, rng: &mut Rng) -> T {
    let T::Dir(children) = t else { return t.clone() };
    let mut out = BTreeMap::new();
    for (name, child) in children {
        let p = join(path, name);
        if view.hidden(&p) && (rng.1 || !is_ignore_name(name)) {
            match rng.below(4) {
                0 => {
                    out.insert(name.clone(), child.clone());
                }
                1 => {} // removed
                2 => {
                    out.insert(name.clone(), rng.subtree(name, 2));
                }
                _ => {
                    let changed = match child {
                        T::File(_) => T::File(rng.text()),
                        T::Dir(_) => rng.subtree(name, 2),
                    };
                    out.insert(name.clone(), changed);
                }
            }
        } else {
            out.insert(name.clone(), vary(child, &p, view, rng));
        }
    }
    // New hidden names (a rename is a removal and one of these).
    for name in rng.names() {
        let p = join(path, name);
        let odds = if is_ignore_name(name) { 2 } else { 3 };
        if !children.contains_key(name) && view.hidden(&p) && rng.below(odds) == 0 {
            out.insert(name.to_string(), rng.subtree(name, 2));
        }
    }
    T::Dir(out)
}

// ---------------------------------------------------------------------------
// The calls

fn look_calls(p: &str, is_dir: bool, with_stat: bool) -> Vec<(&'static str, Value)> {
    let mut calls =
        vec![("read", json!({"file_path": p})), ("grep", json!({"pattern": "alpha|delta", "path": p, "context": 1}))];
    if with_stat {
        calls.push(("stat", json!({"path": p})));
    }
    if is_dir {
        calls.extend([
            ("list", json!({"path": p})),
            ("glob", json!({"pattern": "*", "path": p})),
            ("grep", json!({"pattern": "a", "path": p, "output": "count", "glob": "*.md"})),
            ("grep", json!({"pattern": "SECRET|gamma", "path": p, "output": "files", "ignore_case": true})),
            ("search", json!({"query": "alpha gamma secret", "path": p})),
        ]);
    }
    calls
}

/// Runs the same calls against sessions over both trees, comparing every answer.
struct Pair {
    a: Arc<Session>,
    b: Arc<Session>,
    calls: usize,
    /// The view and both trees, for the failure message.
    context: String,
}

impl Pair {
    fn same(&mut self, tool: &str, args: Value) -> Result<(), TestCaseError> {
        let x = self.a.call(tool, args.clone());
        let y = self.b.call(tool, args.clone());
        self.calls += 1;
        prop_assert!(
            !x.text.contains(MARKER) && !y.text.contains(MARKER),
            "call {} {tool} {args} shows a hidden file's content:\nA: {}\nB: {}\n{}",
            self.calls,
            x.text,
            y.text,
            self.context
        );
        prop_assert!(
            x.text == y.text && x.is_error == y.is_error,
            "call {} {tool} {args} answers differently over the hidden variation:\nA (original):\n{}\nB (varied):\n{}\n{}",
            self.calls,
            x.text,
            y.text,
            self.context
        );
        Ok(())
    }
}

fn engine(dir: &Path, view: &ViewModel, data: &Path) -> Engine {
    let view_file = data.join("view.json");
    fs::write(&view_file, view.json()).unwrap();
    Engine::new(Config {
        start: None,
        data_dir: Some(data.join("data")),
        ..Config::new(Posture::Tree { dir: dir.to_path_buf(), view: view_file })
    })
    .unwrap()
}

fn check(original: T, view: ViewModel, seed: u64, ignore_files: bool) -> Result<(), TestCaseError> {
    let mut a_tree = original;
    mark_hidden(&mut a_tree, "/", &view);
    let b_tree = vary(&a_tree, "/", &view, &mut Rng(seed, ignore_files));
    compare(&a_tree, &b_tree, &view)
}

/// Runs the call list over two trees that differ only where `view` hides.
fn compare(a_tree: &T, b_tree: &T, view: &ViewModel) -> Result<(), TestCaseError> {
    let base = tempfile::Builder::new().prefix("ctxfs-ni-").tempdir().unwrap();
    let (a_dir, b_dir) = (base.path().join("a/ws"), base.path().join("b/ws"));
    build(a_tree, &a_dir);
    build(b_tree, &b_dir);
    pin_times(&a_dir);
    pin_times(&b_dir);
    let (a_data, b_data) = (base.path().join("a"), base.path().join("b"));
    let (ea, eb) = (engine(&a_dir, view, &a_data), engine(&b_dir, view, &b_data));
    let mut pair = Pair {
        a: ea.open_session(SessionOptions::default()).unwrap(),
        b: eb.open_session(SessionOptions::default()).unwrap(),
        calls: 0,
        context: format!("view: {}\ntree A (original): {a_tree:?}tree B (varied): {b_tree:?}", view.json()),
    };
    // Each session names its own id; the rest must be the same.
    let without_id = |text: String| text.lines().filter(|l| !l.starts_with("Session: ")).collect::<Vec<_>>().join("\n");
    prop_assert_eq!(without_id(pair.a.instructions()), without_id(pair.b.instructions()));

    // Every path of either tree, every view entry, and a missing name below each.
    let mut all: BTreeMap<String, bool> = BTreeMap::new();
    for (p, is_dir) in paths(a_tree).into_iter().chain(paths(b_tree)) {
        *all.entry(p).or_default() |= is_dir;
    }
    for k in view.grants.keys().chain(view.floors.keys()) {
        all.entry(k.clone()).or_insert(true);
    }
    let dirs: BTreeSet<String> = all.iter().filter(|(_, d)| **d).map(|(p, _)| p.clone()).collect();
    for d in &dirs {
        all.entry(join(d, "zz_missing")).or_insert(false);
    }
    let all: Vec<(String, bool)> = all.into_iter().collect();

    // Looking, before any change (stat shows times).
    for (p, is_dir) in &all {
        for (tool, args) in look_calls(p, *is_dir, true) {
            pair.same(tool, args)?;
        }
    }
    for (tool, args) in [
        ("glob", json!({"pattern": "**"})),
        ("glob", json!({"pattern": "/**/*.md"})),
        ("grep", json!({"pattern": "."})),
        ("grep", json!({"pattern": "gamma", "context": 3})),
        ("search", json!({"query": "fix main"})),
        ("list", json!({})),
    ] {
        pair.same(tool, args)?;
    }

    // Changing: refused the same way where hidden, done the same way where visible.
    for (i, (p, _)) in all.iter().enumerate() {
        pair.same("write", json!({"file_path": join(p, "n.txt"), "content": "new alpha\n"}))?;
        pair.same("mkdir", json!({"path": join(p, "nd")}))?;
        pair.same("write", json!({"file_path": p, "content": "over beta\n"}))?;
        pair.same("mv", json!({"source": p, "destination": format!("/moved_{i}")}))?;
        pair.same("mv", json!({"source": format!("/moved_{i}"), "destination": p}))?;
    }
    for (p, _) in all.iter().step_by(2) {
        pair.same("rm", json!({"path": p}))?;
    }

    // Looking again, without stat.
    for (p, is_dir) in &all {
        for (tool, args) in look_calls(p, *is_dir, false) {
            pair.same(tool, args)?;
        }
    }
    pair.same("glob", json!({"pattern": "**"}))?;
    pair.same("grep", json!({"pattern": "."}))?;
    Ok(())
}

fn config() -> ProptestConfig {
    let mut config = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = 64;
    }
    // No regression file next to the tests: a failure prints its minimal case.
    config.failure_persistence = Some(Box::new(FileFailurePersistence::Off));
    // Every case runs a few hundred calls twice; bound the shrinking.
    if std::env::var_os("PROPTEST_MAX_SHRINK_TIME").is_none() {
        config.max_shrink_time = 20_000;
    }
    config
}

proptest! {
    #![proptest_config(config())]

    /// Hidden contents, hidden files and directories appearing, vanishing
    /// and renamed.
    #[test]
    fn hidden_paths_change_no_answer((original, view) in tree_and_view(), seed in any::<u64>()) {
        check(original, view, seed, false)?;
    }

    /// The same, with hidden ignore files too: a `.gitignore`, `.ignore` or
    /// `.git/info/exclude` the session cannot see must not decide what it sees.
    #[test]
    fn hidden_ignore_files_change_no_answer((original, view) in tree_and_view(), seed in any::<u64>()) {
        check(original, view, seed, true)?;
    }
}

// ---------------------------------------------------------------------------
// Minimal cases found by the property, kept as plain tests

fn dir(children: &[(&str, T)]) -> T {
    T::Dir(children.iter().map(|(n, t)| (n.to_string(), t.clone())).collect())
}

fn file(text: &str) -> T {
    T::File(text.to_string())
}

fn view_of(grants: &[(&str, Level)], floors: &[(&str, Level)]) -> ViewModel {
    ViewModel {
        grants: grants.iter().map(|(k, l)| (k.to_string(), *l)).collect(),
        floors: floors.iter().map(|(k, l)| (k.to_string(), *l)).collect(),
    }
}

fn run(a: T, b: T, view: ViewModel) {
    if let Err(e) = compare(&a, &b, &view) {
        panic!("{e}");
    }
}

/// A `.git/info/exclude` at none in a visible directory hides visible files
/// from glob and grep (found by `hidden_ignore_files_change_no_answer`).
#[test]
fn hidden_git_exclude_changes_no_answer() {
    let view = view_of(&[("/", Level::Ro)], &[("/d/.git", Level::None)]);
    let a = dir(&[("d", dir(&[("a.md", file("alpha\n"))]))]);
    let b = dir(&[(
        "d",
        dir(&[
            ("a.md", file("alpha\n")),
            (".git", dir(&[("info", dir(&[("exclude", file(&format!("*\n{MARKER}\n")))]))])),
        ]),
    )]);
    run(a, b, view);
}

/// A `.gitignore` at none in a visible directory.
#[test]
fn hidden_gitignore_changes_no_answer() {
    let view = view_of(&[("/", Level::Ro), ("/d/.gitignore", Level::None)], &[]);
    let a = dir(&[("d", dir(&[("a.md", file("alpha\n"))]))]);
    let b = dir(&[("d", dir(&[("a.md", file("alpha\n")), (".gitignore", file(&format!("*.md\n{MARKER}\n")))]))]);
    run(a, b, view);
}

/// A `.ignore` at none in a passage, above a granted directory.
#[test]
fn hidden_dot_ignore_in_a_passage_changes_no_answer() {
    let view = view_of(&[("/", Level::Ro), ("/p", Level::None), ("/p/v", Level::Ro)], &[]);
    let a = dir(&[("p", dir(&[("v", dir(&[("a.md", file("alpha\n"))]))]))]);
    let b =
        dir(&[("p", dir(&[("v", dir(&[("a.md", file("alpha\n"))])), (".ignore", file(&format!("v/\n{MARKER}\n")))]))]);
    run(a, b, view);
}
