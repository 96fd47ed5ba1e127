//! Confinement attacks over the real OS file system (see
//! shared/notes/attacks.md): every attack that broke a peer server, tried in
//! both postures (`Posture::Device`, where the boundary is a host directory
//! under its own host path, and `Posture::Tree`, where it is `/`).
//!
//! Layout of every fixture, in a fresh temporary directory `base`:
//!
//! ```text
//! base/ws/                     the boundary (the workspace)
//! base/sentinel_outside/       secret.txt, sub/deep.txt, a FIFO
//! base/ws_evil/ ws-backup/ ws.bak/   siblings sharing the root's prefix, each with secret.txt
//! base/hl_origin/shared.txt    the outside name of a hard link planted inside
//! base/.gitignore, base/.ignore   "*": ignore files above the boundary, never to be read
//! ```
//!
//! Every answer is checked, whatever the attack: it never holds the secret's
//! content, and never names the outside directory, a sibling, `secret.txt` or
//! `TOP-SECRET` unless the call itself named them (an error echoes the path
//! the call gave, which is no leak). After every test the outside is checked:
//! its listing, kinds, modes, link targets and bytes are what they were
//! (nothing written, created, moved or removed), and every outside file's and
//! directory's access time is still the one the fixture set, so nothing
//! outside was read or listed either (the fixture sets atime = mtime in the
//! past, so that relatime updates the atime on any read; the test itself reads
//! with `O_NOATIME` and puts the times back). Last, no regular file inside
//! the workspace holds the secret (nothing was copied or moved in).
//!
//! Failures are collected per test and reported together, each with the
//! posture, the call and the answer.

#![cfg(target_os = "linux")]

use ctxfs::engine::{Config, Engine, Posture, Session, SessionOptions, ToolAnswer};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fs::{self, File, FileTimes, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{symlink, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The secret every outside file holds. The second line never appears in any
/// call, so no answer may ever hold it.
const SECRET: &str = "TOP-SECRET\ncrown-jewels-8d1f\n";
const JEWEL: &str = "crown-jewels-8d1f";
/// What the tree posture hides inside the boundary (a grant of none).
const PRIVATE: &str = "private-hidden-7c2e";
const OUTSIDE: &str = "sentinel_outside";
const SIBLINGS: [&str; 3] = ["ws_evil", "ws-backup", "ws.bak"];
/// Texts an answer may hold only when the call named them itself.
const NAMED: [&str; 6] = ["TOP-SECRET", OUTSIDE, "ws_evil", "ws-backup", "ws.bak", "secret.txt"];
/// Texts no answer may ever hold (`/etc/passwd`'s first line, for one).
const NEVER: [&str; 2] = [JEWEL, "root:x:0:0"];
const INSIDE: &str = "inside content";

/// `O_NOATIME` and `O_NONBLOCK` on Linux (x86_64 and aarch64 alike).
const O_NOATIME: i32 = 0o1000000;
const O_NONBLOCK: i32 = 0o4000;
/// The access and modification time of everything outside.
const PAST_SECS: u64 = 1_600_000_000;
/// The hang detector's bound (not a timing assertion: a blocked call never answers).
const HANG: Duration = Duration::from_secs(20);

fn past() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(PAST_SECS)
}

// ---------------------------------------------------------------------------
// The outside, recorded

#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    Dir(u32),
    File(u32, Vec<u8>),
    Link(PathBuf),
    /// A FIFO, socket or device: never opened by the snapshot.
    Other(u32),
}

type Snap = BTreeMap<PathBuf, Node>;

fn open_quiet(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().read(true).custom_flags(O_NOATIME | O_NONBLOCK).open(path)
}

/// Everything below `base` but the workspace, read without touching access times.
fn snapshot(base: &Path) -> Snap {
    fn walk(dir: &Path, rel: &Path, out: &mut Snap) {
        let mut names: Vec<_> = fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        names.sort();
        for name in names {
            if rel.as_os_str().is_empty() && name == "ws" {
                continue;
            }
            let path = dir.join(&name);
            let r = rel.join(&name);
            let meta = fs::symlink_metadata(&path).unwrap();
            let mode = meta.permissions().mode() & 0o7777;
            let ft = meta.file_type();
            if ft.is_symlink() {
                out.insert(r, Node::Link(fs::read_link(&path).unwrap()));
            } else if ft.is_dir() {
                out.insert(r.clone(), Node::Dir(mode));
                walk(&path, &r, out);
            } else if ft.is_file() {
                let mut bytes = Vec::new();
                open_quiet(&path).unwrap().read_to_end(&mut bytes).unwrap();
                out.insert(r, Node::File(mode, bytes));
            } else {
                out.insert(r, Node::Other(mode));
            }
        }
    }
    let mut out = Snap::new();
    walk(base, Path::new(""), &mut out);
    out
}

/// Sets atime = mtime = `past()` on `base` and everything recorded below it.
fn reset_times(base: &Path, snap: &Snap) {
    let times = FileTimes::new().set_accessed(past()).set_modified(past());
    let mut paths: Vec<PathBuf> =
        snap.iter().filter(|(_, n)| !matches!(n, Node::Link(_))).map(|(rel, _)| base.join(rel)).collect();
    // Children first: a parent's times are set last (setting times never
    // changes the parent's, but keep the order obvious).
    paths.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    paths.push(base.to_path_buf());
    for path in paths {
        if let Ok(file) = open_quiet(&path) {
            let _ = file.set_times(times);
        }
    }
}

/// Whether this file system updates access times on reads (relatime or strictatime).
fn atime_works() -> bool {
    static WORKS: OnceLock<bool> = OnceLock::new();
    *WORKS.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let probe = dir.path().join("probe");
        fs::write(&probe, "x").unwrap();
        File::options()
            .write(true)
            .open(&probe)
            .unwrap()
            .set_times(FileTimes::new().set_accessed(past()).set_modified(past()))
            .unwrap();
        let _ = fs::read(&probe).unwrap();
        let works = fs::metadata(&probe).unwrap().atime() as u64 != PAST_SECS;
        if !works {
            eprintln!(
                "note: access times do not change on reads here (noatime); reads outside are detected by content only"
            );
        }
        works
    })
}

// ---------------------------------------------------------------------------
// The fixture

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Device,
    Tree,
}

struct Fx {
    kind: Kind,
    base: PathBuf,
    ws: PathBuf,
    outside: PathBuf,
    data: PathBuf,
    engine: Engine,
    expected: Snap,
    failures: Mutex<Vec<String>>,
    _dirs: Vec<tempfile::TempDir>,
}

fn write(path: &Path, text: &str) {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).unwrap();
    }
    fs::write(path, text).unwrap();
}

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo").arg(path).status().expect("mkfifo runs");
    assert!(status.success(), "mkfifo {}", path.display());
}

fn text(p: &Path) -> String {
    p.to_str().unwrap().to_string()
}

impl Fx {
    fn new(kind: Kind) -> Arc<Fx> {
        let base_dir = tempfile::Builder::new().prefix("ctxfs-attack-").tempdir().unwrap();
        let data_dir = tempfile::Builder::new().prefix("ctxfs-data-").tempdir().unwrap();
        let etc_dir = tempfile::Builder::new().prefix("ctxfs-view-").tempdir().unwrap();
        let base = base_dir.path().canonicalize().unwrap();
        let ws = base.join("ws");
        let outside = base.join(OUTSIDE);

        // Outside.
        write(&outside.join("secret.txt"), SECRET);
        write(&outside.join("sub/deep.txt"), SECRET);
        mkfifo(&outside.join("fifo"));
        for sibling in SIBLINGS {
            write(&base.join(sibling).join("secret.txt"), SECRET);
        }
        write(&base.join("hl_origin/shared.txt"), "shared through a hard link\n");
        write(&base.join(".gitignore"), "*\n");
        write(&base.join(".ignore"), "*\n");

        // Inside.
        write(&ws.join("a.txt"), &format!("{INSIDE}\nalpha\n"));
        write(&ws.join("sub/b.txt"), &format!("{INSIDE}\nbeta\n"));
        write(&ws.join("private/hidden.txt"), &format!("{PRIVATE}\n"));
        let o = text(&outside);
        let links: Vec<(&str, String)> = vec![
            ("file_out_abs", format!("{o}/secret.txt")),
            ("file_out_rel", format!("../{OUTSIDE}/secret.txt")),
            ("sub/deep_out", format!("../../{OUTSIDE}/sub/deep.txt")),
            ("evil_out", "../ws_evil/secret.txt".into()),
            ("dir_out_abs", o.clone()),
            ("dir_out_rel", format!("../{OUTSIDE}")),
            ("evil_dir_abs", format!("{}_evil", text(&ws))),
            ("fifo_out", format!("{o}/fifo")),
            ("dang_abs", format!("{o}/created_abs.txt")),
            ("dang_rel", format!("../{OUTSIDE}/created_rel.txt")),
            ("sub/dang_deep", format!("../../{OUTSIDE}/created_deep.txt")),
            ("dang_dir_abs", format!("{o}/created_dir")),
            ("in_abs", format!("{}/a.txt", text(&ws))),
            ("in_dir_abs", format!("{}/sub", text(&ws))),
            ("to_private", "private/hidden.txt".into()),
            ("loop_a", "loop_b".into()),
            ("loop_b", "loop_a".into()),
            ("loop_self", "loop_self".into()),
            ("sub/up", "..".into()),
        ];
        for (name, target) in links {
            symlink(target, ws.join(name)).unwrap();
        }
        fs::hard_link(base.join("hl_origin/shared.txt"), ws.join("hl.txt")).unwrap();

        let expected = snapshot(&base);
        reset_times(&base, &expected);

        let posture = match kind {
            Kind::Device => Posture::Device { root: ws.clone() },
            Kind::Tree => {
                let view = etc_dir.path().join("view.json");
                fs::write(&view, r#"{"grants": {"/": "stage", "/private": "none"}}"#).unwrap();
                Posture::Tree { dir: ws.clone(), view }
            }
        };
        let engine =
            Engine::new(Config { start: None, data_dir: Some(data_dir.path().to_path_buf()), ..Config::new(posture) })
                .unwrap();
        let data = data_dir.path().to_path_buf();
        Arc::new(Fx {
            kind,
            base,
            ws,
            outside,
            data,
            engine,
            expected,
            failures: Mutex::new(Vec::new()),
            _dirs: vec![base_dir, data_dir, etc_dir],
        })
    }

    fn session(&self) -> Arc<Session> {
        self.engine.open_session(SessionOptions::default()).unwrap()
    }

    /// A path of the session's world for a name below the boundary.
    fn v(&self, rel: &str) -> String {
        match self.kind {
            Kind::Device => format!("{}/{rel}", text(&self.ws)),
            Kind::Tree => format!("/{rel}"),
        }
    }

    fn fail(&self, message: String) {
        self.failures.lock().unwrap().push(format!("[{:?}] {message}", self.kind));
    }

    /// The leak checks every answer gets.
    fn inspect(&self, tool: &str, args: &Value, answer: &ToolAnswer) {
        let asked = args.to_string();
        // Everything a door sends: the text and the facts as they go on the wire.
        let facts = serde_json::to_string(&ctxfs::wire::CallFacts::from(answer.facts.clone())).unwrap();
        let shown = format!("{} {} {facts}", answer.id, answer.text);
        let mut never: Vec<&str> = NEVER.to_vec();
        if self.kind == Kind::Tree {
            never.push(PRIVATE);
        }
        for word in never {
            if shown.contains(word) {
                self.fail(format!("{tool} {asked} leaked {word:?}:\n{}", answer.text));
            }
        }
        for word in NAMED {
            if !asked.contains(word) && shown.contains(word) {
                self.fail(format!("{tool} {asked} named {word:?}, which the call did not:\n{}", answer.text));
            }
        }
    }

    fn call(&self, s: &Session, tool: &str, args: Value) -> ToolAnswer {
        let answer = s.call(tool, args.clone());
        self.inspect(tool, &args, &answer);
        answer
    }

    /// A call that must be refused.
    fn refused(&self, s: &Session, tool: &str, args: Value) -> ToolAnswer {
        let answer = self.call(s, tool, args.clone());
        if !answer.is_error {
            self.fail(format!("{tool} {args} was not refused:\n{}", answer.text));
        }
        answer
    }

    /// A call that must succeed, its text holding `needle`.
    fn works(&self, s: &Session, tool: &str, args: Value, needle: &str) -> ToolAnswer {
        let answer = self.call(s, tool, args.clone());
        if answer.is_error || !answer.text.contains(needle) {
            self.fail(format!("{tool} {args} should succeed with {needle:?}:\n{}", answer.text));
        }
        answer
    }

    /// Runs one call on its own thread and fails the test if it has not
    /// answered within `HANG` (a blocked open never answers at all).
    fn call_within(&self, s: &Arc<Session>, tool: &str, args: Value) -> ToolAnswer {
        let (tx, rx) = mpsc::channel();
        let session = s.clone();
        let (t, a) = (tool.to_string(), args.clone());
        std::thread::spawn(move || {
            let _ = tx.send(session.call(&t, a));
        });
        match rx.recv_timeout(HANG) {
            Ok(answer) => {
                self.inspect(tool, &args, &answer);
                answer
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                panic!("[{:?}] {tool} {args} has not answered in {HANG:?}: it hangs", self.kind)
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => panic!("[{:?}] {tool} {args} panicked", self.kind),
        }
    }

    /// Checks the outside (read, listed, written?) and the inside (secret copied in?).
    fn check_outside(&self) {
        if atime_works() {
            let mut read = Vec::new();
            for (rel, node) in self.expected.iter().map(|(r, n)| (r.clone(), Some(n))).chain([(PathBuf::new(), None)]) {
                // The hard link's outside name shares its inode with a file
                // inside, which reads may legitimately touch.
                if matches!(node, Some(Node::Link(_))) || rel.starts_with("hl_origin/shared.txt") {
                    continue;
                }
                let path = self.base.join(&rel);
                if let Ok(meta) = fs::symlink_metadata(&path) {
                    if meta.atime() as u64 != PAST_SECS || meta.atime_nsec() != 0 {
                        read.push(format!("{}{}", rel.display(), if meta.is_dir() { "/ (listed)" } else { " (read)" }));
                    }
                }
            }
            if !read.is_empty() {
                self.fail(format!("something outside the boundary was read: {read:?}"));
            }
        }
        let now = snapshot(&self.base);
        if now != self.expected {
            let mut diff = Vec::new();
            for (rel, node) in &self.expected {
                match now.get(rel) {
                    None => diff.push(format!("removed or moved: {}", rel.display())),
                    Some(n) if n != node => diff.push(format!("changed: {}", rel.display())),
                    _ => {}
                }
            }
            for rel in now.keys().filter(|r| !self.expected.contains_key(*r)) {
                diff.push(format!("created: {}", rel.display()));
            }
            self.fail(format!("the outside changed: {diff:?}"));
        }
        reset_times(&self.base, &self.expected);
        let mut copied = Vec::new();
        scan_for_secret(&self.ws, &mut copied);
        if !copied.is_empty() {
            self.fail(format!("the secret is now inside the workspace: {copied:?}"));
        }
    }

    /// Ends a test: checks the outside and reports every failure.
    fn finish(&self) {
        self.check_outside();
        let failures = self.failures.lock().unwrap();
        if !failures.is_empty() {
            panic!("{} failure(s):\n\n{}", failures.len(), failures.join("\n\n"));
        }
    }
}

/// Regular files below `dir` (links not followed) whose bytes hold the secret.
fn scan_for_secret(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(meta) = fs::symlink_metadata(&path) else { continue };
        if meta.is_dir() {
            scan_for_secret(&path, out);
        } else if meta.is_file() {
            let mut bytes = Vec::new();
            if open_quiet(&path).and_then(|mut f| f.read_to_end(&mut bytes)).is_ok()
                && String::from_utf8_lossy(&bytes).contains(JEWEL)
            {
                out.push(path);
            }
        }
    }
}

fn both(test: impl Fn(&Arc<Fx>)) {
    for kind in [Kind::Device, Kind::Tree] {
        let fx = Fx::new(kind);
        test(&fx);
        fx.finish();
    }
}

// ---------------------------------------------------------------------------
// Call sets

/// Every way to look at a path.
fn look_calls(p: &str) -> Vec<(&'static str, Value)> {
    vec![
        ("read", json!({"file_path": p})),
        ("stat", json!({"path": p})),
        ("list", json!({"path": p})),
        ("glob", json!({"pattern": "**", "path": p})),
        ("glob", json!({"pattern": "*.txt", "path": p})),
        ("grep", json!({"pattern": ".", "path": p})),
        ("grep", json!({"pattern": "SECRET", "path": p, "output": "files"})),
        ("grep", json!({"pattern": "jewels", "path": p, "output": "count"})),
        ("search", json!({"query": "secret jewels", "path": p})),
    ]
}

fn patch(body: &str) -> String {
    format!("*** Begin Patch\n{body}*** End Patch\n")
}

/// Every way to change a path (and to carry something to or from it).
fn change_calls(p: &str) -> Vec<(&'static str, Value)> {
    vec![
        ("write", json!({"file_path": p, "content": "pwned\n"})),
        ("write", json!({"file_path": format!("{p}/new.txt"), "content": "pwned\n"})),
        ("write", json!({"file_path": format!("{p}/newdir/new.txt"), "content": "pwned\n"})),
        ("edit", json!({"file_path": p, "old_string": "SECRET", "new_string": "pwned"})),
        ("multiedit", json!({"file_path": p, "edits": [{"old_string": "SECRET", "new_string": "pwned"}]})),
        ("mkdir", json!({"path": p})),
        ("mkdir", json!({"path": format!("{p}/newdir")})),
        ("mkdir", json!({"path": format!("{p}/newdir/deeper")})),
        ("mv", json!({"source": p, "destination": "stolen"})),
        ("mv", json!({"source": format!("{p}/secret.txt"), "destination": "stolen.txt"})),
        ("mv", json!({"source": "a.txt", "destination": p})),
        ("mv", json!({"source": "a.txt", "destination": format!("{p}/a.txt")})),
        ("rm", json!({"path": p})),
        ("rm", json!({"path": format!("{p}/secret.txt")})),
        ("apply_patch", json!({"patch": patch(&format!("*** Add File: {p}\n+pwned\n"))})),
        ("apply_patch", json!({"patch": patch(&format!("*** Add File: {p}/added.txt\n+pwned\n"))})),
        ("apply_patch", json!({"patch": patch(&format!("*** Delete File: {p}\n"))})),
        ("apply_patch", json!({"patch": patch(&format!("*** Delete File: {p}/secret.txt\n"))})),
        ("apply_patch", json!({"patch": patch(&format!("*** Update File: {p}\n@@\n-TOP-SECRET\n+pwned\n"))})),
    ]
}

/// Tries to read `p` first (so a change is not refused merely for want of a
/// read), then asks for the changes; every one must be refused.
fn all_refused(fx: &Fx, p: &str) {
    let s = fx.session();
    fx.call(&s, "read", json!({"file_path": p}));
    fx.call(&s, "read", json!({"file_path": format!("{p}/secret.txt")}));
    for (tool, args) in look_calls(p).into_iter().chain(change_calls(p)) {
        fx.refused(&s, tool, args);
    }
}

// ---------------------------------------------------------------------------
// The attacks

/// Attack 1: `/ws_evil`, `/ws-backup`, `/ws.bak` beside the boundary `/ws`.
#[test]
fn sibling_prefix_directories_are_outside() {
    both(|fx| {
        let ws = text(&fx.ws);
        let mut paths = Vec::new();
        for sibling in SIBLINGS {
            paths.push(format!("../{sibling}"));
            paths.push(format!("../{sibling}/secret.txt"));
        }
        // The root's own text with a suffix: the classic `starts_with` bug.
        for suffix in ["_evil", "-backup", ".bak"] {
            paths.push(format!("{ws}{suffix}"));
            paths.push(format!("{ws}{suffix}/secret.txt"));
        }
        if fx.kind == Kind::Device {
            for p in &paths {
                all_refused(fx, p);
            }
            // Glob and grep rooted in them, absolute patterns into them.
            let s = fx.session();
            for sibling in SIBLINGS {
                let dir = fx.base.join(sibling);
                fx.refused(&s, "glob", json!({"pattern": format!("{}/*", text(&dir))}));
                fx.refused(&s, "glob", json!({"pattern": format!("{}/**/*.txt", text(&dir))}));
                fx.refused(&s, "grep", json!({"pattern": "SECRET", "path": text(&dir)}));
            }
        } else {
            // In a tree, these texts name paths inside it, which do not exist:
            // looking finds nothing; changing creates inside (checked by the
            // outside snapshot).
            let s = fx.session();
            for p in &paths {
                for (tool, args) in look_calls(p) {
                    fx.refused(&s, tool, args);
                }
            }
            for p in &paths {
                for (tool, args) in change_calls(p) {
                    fx.call(&s, tool, args);
                }
            }
        }
        // A link inside to a sibling, by relative and by absolute target.
        for link in ["evil_out", "evil_dir_abs", "evil_dir_abs/secret.txt"] {
            all_refused(fx, link);
        }
    });
}

/// Attack 2: `..` anywhere, including below components that do not exist.
#[test]
fn dot_dot_anywhere() {
    both(|fx| {
        let paths = [
            "../sentinel_outside",
            "../sentinel_outside/secret.txt",
            "./../sentinel_outside/./secret.txt",
            "sub/../../sentinel_outside/secret.txt",
            "sub//..//..//sentinel_outside//secret.txt",
            "missing/../../sentinel_outside/secret.txt",
            "missing/deeper/../../../sentinel_outside/secret.txt",
            "sub/missing/../../../sentinel_outside/sub/deep.txt",
            "../ws/../sentinel_outside/secret.txt",
            "../../../../../../../../sentinel_outside/secret.txt",
        ];
        let s = fx.session();
        match fx.kind {
            Kind::Device => {
                for p in paths {
                    all_refused(fx, p);
                }
                // `..` alone is the boundary's parent: a passage.
                for (tool, args) in look_calls("..") {
                    fx.refused(&s, tool, args);
                }
                fx.refused(&s, "write", json!({"file_path": "missing/../../escaped.txt", "content": "x"}));
                fx.refused(&s, "mkdir", json!({"path": "missing/../../escaped_dir"}));
                fx.refused(&s, "write", json!({"file_path": "sub/x/../../../escaped.txt", "content": "x"}));
                // `..` resolved by text stays inside: a positive case.
                fx.works(&s, "read", json!({"file_path": "missing/../sub/../a.txt"}), INSIDE);
                fx.works(&s, "read", json!({"file_path": "sub/up/sub/b.txt"}), INSIDE);
            }
            Kind::Tree => {
                // `..` above `/` stays at `/` (the spec): inside, always.
                fx.works(&s, "read", json!({"file_path": "../../a.txt"}), INSIDE);
                fx.works(&s, "read", json!({"file_path": "missing/../../../sub/b.txt"}), INSIDE);
                fx.works(&s, "list", json!({"path": "../.."}), "a.txt");
                for p in paths {
                    for (tool, args) in look_calls(p) {
                        fx.refused(&s, tool, args);
                    }
                }
                for p in paths {
                    for (tool, args) in change_calls(p) {
                        fx.call(&s, tool, args);
                    }
                }
                let a = fx.call(&s, "write", json!({"file_path": "missing/../../escaped.txt", "content": "x"}));
                if !a.is_error && !fx.ws.join("escaped.txt").is_file() {
                    fx.fail(format!("a write above / should land at /escaped.txt inside: {}", a.text));
                }
            }
        }
    });
}

/// Absolute paths outside the boundary.
#[test]
fn absolute_paths_outside() {
    both(|fx| {
        let o = text(&fx.outside);
        let b = text(&fx.base);
        let paths = [
            o.clone(),
            format!("{o}/secret.txt"),
            format!("{o}/sub/deep.txt"),
            format!("{o}//sub/./deep.txt"),
            format!("{o}/missing/../secret.txt"),
            format!("{}/../{OUTSIDE}/secret.txt", text(&fx.ws)),
            format!("{b}/hl_origin/shared.txt"),
        ];
        let s = fx.session();
        match fx.kind {
            Kind::Device => {
                for p in &paths {
                    all_refused(fx, p);
                }
                for p in ["/", "/etc", "/etc/passwd", b.as_str(), "/proc/self/environ", "/dev/zero"] {
                    for (tool, args) in look_calls(p) {
                        fx.refused(&s, tool, args);
                    }
                }
                fx.refused(&s, "write", json!({"file_path": format!("{b}/escaped.txt"), "content": "x"}));
                fx.refused(&s, "mkdir", json!({"path": format!("{b}/escaped_dir")}));
            }
            Kind::Tree => {
                // A host path is a path of the tree, which has no such thing.
                for p in &paths {
                    for (tool, args) in look_calls(p) {
                        fx.refused(&s, tool, args);
                    }
                }
                for p in ["/etc/passwd", "/proc/self/environ", "/dev/zero"] {
                    for (tool, args) in look_calls(p) {
                        fx.refused(&s, tool, args);
                    }
                }
                for p in &paths {
                    for (tool, args) in change_calls(p) {
                        fx.call(&s, tool, args);
                    }
                }
            }
        }
    });
}

/// Attack 3: A file link pointing outside: read, stat, list, grep, glob.
#[test]
fn file_links_out() {
    both(|fx| {
        for link in ["file_out_abs", "file_out_rel", "sub/deep_out", "evil_out", "fifo_out"] {
            all_refused(fx, link);
        }
        let s = fx.session();
        // A listing shows the link by its name only: not where it leads, not as a directory.
        let listing = fx.works(&s, "list", json!({}), "a.txt");
        for name in ["file_out_abs", "file_out_rel", "dir_out_abs", "dir_out_rel", "evil_dir_abs"] {
            let shown: Vec<&str> = listing.text.lines().filter(|l| l.starts_with(name)).collect();
            if shown.iter().any(|l| *l != name) {
                fx.fail(format!(
                    "the listing shows the link {name} as {shown:?}, more than its name:\n{}",
                    listing.text
                ));
            }
        }
        let listing = fx.works(&s, "list", json!({"path": "sub"}), "b.txt");
        if listing.text.lines().any(|l| l.starts_with("deep_out") && l != "deep_out") {
            fx.fail(format!("sub's listing says more of deep_out than its name:\n{}", listing.text));
        }
        // Searches through the whole tree succeed and skip the links.
        for (tool, args) in [
            ("grep", json!({"pattern": "."})),
            ("grep", json!({"pattern": "SECRET"})),
            ("grep", json!({"pattern": "jewels", "output": "files"})),
            ("grep", json!({"pattern": "SECRET", "output": "count"})),
            ("grep", json!({"pattern": ".", "context": 3})),
            ("grep", json!({"pattern": "SECRET", "glob": "*_out*"})),
            ("glob", json!({"pattern": "**"})),
            ("glob", json!({"pattern": "**/*out*"})),
            ("search", json!({"query": "secret jewels crown"})),
            ("read", json!({"file_path": "."})),
        ] {
            let a = fx.call(&s, tool, args.clone());
            if a.is_error {
                fx.fail(format!("{tool} {args} over the tree should answer, skipping the links:\n{}", a.text));
            }
        }
        fx.works(&s, "grep", json!({"pattern": "alpha"}), "a.txt:2:alpha");
        fx.works(&s, "glob", json!({"pattern": "*.txt"}), "b.txt");
    });
}

/// Attack 4: A directory link pointing outside, then read / create / mkdir under it.
#[test]
fn directory_links_out() {
    both(|fx| {
        for link in ["dir_out_abs", "dir_out_rel", "evil_dir_abs"] {
            all_refused(fx, link);
            all_refused(fx, &format!("{link}/sub"));
            all_refused(fx, &format!("{link}/sub/deep.txt"));
            all_refused(fx, &format!("{link}/missing/deeper"));
        }
        let s = fx.session();
        fx.refused(&s, "write", json!({"file_path": "dir_out_abs/secret.txt", "content": "overwritten\n"}));
        fx.refused(&s, "write", json!({"file_path": "dir_out_rel/new/deep/file.txt", "content": "x"}));
        fx.refused(&s, "mkdir", json!({"path": "dir_out_rel/a/b/c"}));
        // A pattern through the link from a directory inside is no refusal:
        // the walk never follows the link, so it matches nothing there.
        for pattern in ["dir_out_abs/**", "dir_out_rel/*.txt", "evil_dir_abs/*", "*/secret.txt", "**/deep.txt"] {
            let a = fx.call(&s, "glob", json!({"pattern": pattern}));
            if a.is_error || !a.text.contains("No files match") {
                fx.fail(format!("glob {pattern:?} should match nothing:\n{}", a.text));
            }
        }
        // The same through the link's absolute path of the session's world.
        fx.refused(&s, "read", json!({"file_path": fx.v("dir_out_abs/secret.txt")}));
        fx.refused(&s, "write", json!({"file_path": fx.v("dir_out_abs/new.txt"), "content": "x"}));
    });
}

/// Attack 5: A dangling link leaf whose target is outside, as the target of every change.
#[test]
fn dangling_links_out_are_never_created() {
    both(|fx| {
        let s = fx.session();
        fx.works(&s, "read", json!({"file_path": "a.txt"}), INSIDE);
        for link in ["dang_abs", "dang_rel", "sub/dang_deep", "dang_dir_abs"] {
            fx.refused(&s, "write", json!({"file_path": link, "content": "pwned\n"}));
            fx.refused(&s, "write", json!({"file_path": fx.v(link), "content": "pwned\n"}));
            fx.refused(&s, "write", json!({"file_path": format!("{link}/inner.txt"), "content": "pwned\n"}));
            fx.refused(&s, "edit", json!({"file_path": link, "old_string": "a", "new_string": "b"}));
            fx.refused(&s, "multiedit", json!({"file_path": link, "edits": [{"old_string": "a", "new_string": "b"}]}));
            fx.refused(&s, "mkdir", json!({"path": link}));
            fx.refused(&s, "mkdir", json!({"path": format!("{link}/inner")}));
            fx.refused(&s, "mv", json!({"source": "a.txt", "destination": link}));
            fx.refused(&s, "mv", json!({"source": "sub", "destination": link}));
            fx.refused(&s, "mv", json!({"source": "a.txt", "destination": format!("{link}/a.txt")}));
            fx.refused(&s, "apply_patch", json!({"patch": patch(&format!("*** Add File: {link}\n+pwned\n"))}));
            fx.refused(
                &s,
                "apply_patch",
                json!({"patch": patch(&format!("*** Add File: {link}/inner.txt\n+pwned\n"))}),
            );
            fx.refused(
                &s,
                "apply_patch",
                json!({"patch": patch(&format!("*** Update File: a.txt\n*** Move to: {link}\n@@\n-alpha\n+ALPHA\n"))}),
            );
            // Several files, the bad one last: all or nothing.
            fx.refused(
                &s,
                "apply_patch",
                json!({"patch": patch(&format!("*** Add File: fine_{}.txt\n+ok\n*** Add File: {link}\n+pwned\n", link.replace('/', "_")))}),
            );
            for (tool, args) in look_calls(link) {
                fx.refused(&s, tool, args);
            }
        }
        if fx.ws.join("a.txt").symlink_metadata().map(|m| !m.is_file()).unwrap_or(true) {
            fx.fail("a.txt is gone after refused moves".into());
        }
        if fs::read_to_string(fx.ws.join("a.txt")).unwrap_or_default() != format!("{INSIDE}\nalpha\n") {
            fx.fail("a.txt changed after a refused patch".into());
        }
        if fs::read_dir(&fx.ws).unwrap().flatten().any(|e| e.file_name().to_string_lossy().starts_with("fine_")) {
            fx.fail("a refused patch left its first file behind (not all or nothing)".into());
        }
    });
}

/// An absolute link whose target is inside the root is followed.
#[test]
fn absolute_link_inside_is_followed() {
    both(|fx| {
        let s = fx.session();
        fx.works(&s, "read", json!({"file_path": "in_abs"}), INSIDE);
        fx.works(&s, "stat", json!({"path": "in_abs"}), &format!("link to: {}", fx.v("a.txt")));
        fx.works(&s, "list", json!({"path": "in_dir_abs"}), "b.txt");
        fx.works(&s, "read", json!({"file_path": "in_dir_abs/b.txt"}), INSIDE);
        fx.works(&s, "grep", json!({"pattern": "beta", "path": "in_dir_abs"}), "beta");
        fx.works(&s, "glob", json!({"pattern": "*.txt", "path": "in_dir_abs"}), "b.txt");
        fx.works(&s, "edit", json!({"file_path": "in_abs", "old_string": "alpha", "new_string": "ALPHA"}), "ALPHA");
        if fs::read_to_string(fx.ws.join("a.txt")).unwrap() != format!("{INSIDE}\nALPHA\n") {
            fx.fail("an edit through an absolute link inside did not change its target".into());
        }
        if !fx.ws.join("in_abs").symlink_metadata().unwrap().file_type().is_symlink() {
            fx.fail("an edit through a link replaced the link itself".into());
        }
        fx.works(&s, "write", json!({"file_path": "in_dir_abs/c.txt", "content": "made through a link\n"}), "Created");
        if !fx.ws.join("sub/c.txt").is_file() {
            fx.fail("a write through an absolute directory link inside did not land in its target".into());
        }
        // A link to a hidden place inside (tree: /private at none) is refused like one outside.
        if fx.kind == Kind::Tree {
            for (tool, args) in look_calls("to_private") {
                fx.refused(&s, tool, args);
            }
            for (tool, args) in look_calls("private/hidden.txt") {
                fx.refused(&s, tool, args);
            }
        }
    });
}

/// Attack 15: Link loops answer, and do not hang, for read, list, glob, grep.
#[test]
fn link_loops_answer() {
    both(|fx| {
        let s = fx.session();
        for link in ["loop_a", "loop_b", "loop_self", "loop_a/x", "loop_self/x/y"] {
            for (tool, args) in look_calls(link) {
                let a = fx.call_within(&s, tool, args.clone());
                if !a.is_error {
                    fx.fail(format!("{tool} {args} through a loop should be refused:\n{}", a.text));
                }
            }
            for (tool, args) in [
                ("write", json!({"file_path": link, "content": "x"})),
                ("mkdir", json!({"path": link})),
                ("mv", json!({"source": "a.txt", "destination": link})),
            ] {
                let a = fx.call_within(&s, tool, args.clone());
                if !a.is_error {
                    fx.fail(format!("{tool} {args} through a loop should be refused:\n{}", a.text));
                }
            }
        }
        // A directory link back up (sub/up -> ..) makes a cycle; walks still end.
        let deep = "sub/up/".repeat(30) + "a.txt";
        fx.call_within(&s, "read", json!({"file_path": deep}));
        for (tool, args) in [
            ("list", json!({})),
            ("list", json!({"path": "sub"})),
            ("glob", json!({"pattern": "**"})),
            ("glob", json!({"pattern": "**/*.txt", "path": "sub/up"})),
            ("grep", json!({"pattern": "."})),
            ("grep", json!({"pattern": "beta", "path": "sub/up/sub"})),
            ("search", json!({"query": "alpha beta"})),
        ] {
            let a = fx.call_within(&s, tool, args.clone());
            if a.is_error {
                fx.fail(format!("{tool} {args} should answer despite the loops:\n{}", a.text));
            }
        }
        let a = fx.call_within(&s, "glob", json!({"pattern": "**/b.txt"}));
        if a.text.matches("b.txt").count() != 1 {
            fx.fail(format!("glob followed the cycle sub/up (b.txt found more than once):\n{}", a.text));
        }
    });
}

/// Swaps `ws/<name>` between a real directory and a link to the outside
/// until `stop`, by renames (the stash names live inside the workspace too).
/// Whatever the server makes in the way (a write's missing parent made anew
/// while the name was free) is parked under another name, and a stash link
/// moved away is made again, so the swapping goes on whatever the calls do.
fn swapper(ws: PathBuf, name: &'static str, outside: PathBuf, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<usize> {
    let live = ws.join(name);
    let stash_dir = ws.join(format!("{name}_stash_dir"));
    let stash_link = ws.join(format!("{name}_stash_link"));
    std::thread::spawn(move || {
        let mut swaps = 0;
        let mut parked = 0;
        let mut put = |from: &Path, to: &Path| {
            if fs::rename(from, to).is_err() && from.symlink_metadata().is_ok() && to.symlink_metadata().is_ok() {
                let _ = fs::rename(to, ws.join(format!("{name}_parked_{parked}")));
                parked += 1;
                let _ = fs::rename(from, to);
            }
        };
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        while !stop.load(Ordering::Relaxed) {
            if stash_link.symlink_metadata().is_err()
                && !live.symlink_metadata().is_ok_and(|m| m.file_type().is_symlink())
            {
                let _ = symlink(&outside, &stash_link);
            }
            put(&live, &stash_dir);
            put(&stash_link, &live);
            hold(&mut seed);
            put(&live, &stash_link);
            put(&stash_dir, &live);
            hold(&mut seed);
            swaps += 1;
        }
        swaps
    })
}

/// Keeps the current state of a swap for a short random while, so that
/// calls meet both states and every moment between them.
fn hold(seed: &mut u64) {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    for _ in 0..(*seed % 4000) {
        std::hint::spin_loop();
    }
    std::thread::yield_now();
}

/// Attack 6: A directory swapped for a link to the outside during calls (TOCTOU).
fn swapped_directory(fx: &Arc<Fx>, iterations: usize) {
    write(&fx.ws.join("swap/f.txt"), &format!("{INSIDE} swap tick\n"));
    write(&fx.ws.join("swap/sub/g.txt"), &format!("{INSIDE} g\n"));
    let stop = Arc::new(AtomicBool::new(false));
    let handle = swapper(fx.ws.clone(), "swap", fx.outside.clone(), stop.clone());
    let s = fx.session();
    let ok = AtomicUsize::new(0);
    let started = Instant::now();
    for i in 0..iterations {
        s.new_request(false); // no dedupe: every read really reads
        let calls: Vec<(&str, Value)> = match i % 10 {
            0 => vec![("read", json!({"file_path": "swap/f.txt"}))],
            1 => vec![("write", json!({"file_path": format!("swap/new_{i}.txt"), "content": "written inside\n"}))],
            2 => vec![("grep", json!({"pattern": ".", "path": "swap"}))],
            3 => vec![("list", json!({"path": "swap"}))],
            4 => vec![("mkdir", json!({"path": format!("swap/d_{i}")}))],
            5 => vec![("grep", json!({"pattern": "SECRET|jewels|swap"})), ("glob", json!({"pattern": "**"}))],
            6 => vec![("stat", json!({"path": "swap/f.txt"})), ("read", json!({"file_path": "swap/sub/g.txt"}))],
            7 => {
                vec![("write", json!({"file_path": format!("swap/sub/deep_{i}/w.txt"), "content": "written inside\n"}))]
            }
            8 => vec![
                ("glob", json!({"pattern": "**/*.txt", "path": "swap"})),
                ("search", json!({"query": "secret swap", "path": "swap"})),
            ],
            _ => {
                let a = fx.call(&s, "read", json!({"file_path": "swap/f.txt"}));
                let (from, to) = if a.text.contains("tick") { ("tick", "tock") } else { ("tock", "tick") };
                vec![("edit", json!({"file_path": "swap/f.txt", "old_string": from, "new_string": to}))]
            }
        };
        for (tool, args) in calls {
            let a = fx.call(&s, tool, args.clone());
            if !a.is_error {
                ok.fetch_add(1, Ordering::Relaxed);
                if tool == "read" && !a.text.contains(INSIDE) {
                    fx.fail(format!("{tool} {args} succeeded without the inside content:\n{}", a.text));
                }
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = handle.join().unwrap();
    eprintln!(
        "[{:?}] swapped directory: {iterations} iterations, {} calls succeeded, {swaps} swaps, {:?}",
        fx.kind,
        ok.load(Ordering::Relaxed),
        started.elapsed()
    );
}

#[test]
fn swapped_directory_device() {
    let fx = Fx::new(Kind::Device);
    swapped_directory(&fx, 2000);
    fx.finish();
}

#[test]
fn swapped_directory_tree() {
    let fx = Fx::new(Kind::Tree);
    swapped_directory(&fx, 1000);
    fx.finish();
}

/// Attack 7: mv whose source (its parent, or the source itself) is swapped during the call.
fn swapped_mv_source(fx: &Arc<Fx>, iterations: usize) {
    // The parent swapped: mvdir is a real directory or a link to the outside.
    write(&fx.ws.join("mvdir/f.txt"), &format!("{INSIDE} moved\n"));
    fs::create_dir_all(fx.ws.join("mvback")).unwrap();
    fs::create_dir_all(fx.ws.join("moved")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let handle = swapper(fx.ws.clone(), "mvdir", fx.outside.clone(), stop.clone());
    // The leaf swapped: `leaf` is replaced, atomically, by a file inside or a
    // link to the outside secret, recreated whenever a move took it away.
    let leaf_stop = Arc::new(AtomicBool::new(false));
    let leaf = {
        let (ws, target, stop) = (fx.ws.clone(), fx.outside.join("secret.txt"), leaf_stop.clone());
        std::thread::spawn(move || {
            let (mut n, mut seed) = (0u64, 0x9e37_79b9_7f4a_7c15u64);
            while !stop.load(Ordering::Relaxed) {
                let (file, link) = (ws.join(format!(".leaf_file_{n}")), ws.join(format!(".leaf_link_{n}")));
                let _ = fs::write(&file, format!("{INSIDE} leaf\n"));
                let _ = symlink(&target, &link);
                let _ = fs::rename(&file, ws.join("leaf"));
                hold(&mut seed);
                let _ = fs::rename(&link, ws.join("leaf"));
                hold(&mut seed);
                n += 1;
            }
        })
    };
    let s = fx.session();
    let mut moved = 0;
    for i in 0..iterations {
        let calls = [
            ("mv", json!({"source": "mvdir/f.txt", "destination": "mvback/f.txt"})),
            ("mv", json!({"source": "mvback/f.txt", "destination": "mvdir/f.txt"})),
            ("mv", json!({"source": "mvdir", "destination": format!("moved/dir_{i}")})),
            ("mv", json!({"source": "leaf", "destination": format!("moved/leaf_{i}")})),
            ("mv", json!({"source": "mvdir/sub_missing", "destination": "mvback/nothing"})),
        ];
        let (tool, args) = calls[i % calls.len()].clone();
        let a = fx.call(&s, tool, args.clone());
        if !a.is_error {
            moved += 1;
        } else if std::env::var_os("ATTACKS_DEBUG").is_some() {
            eprintln!("{args} -> {}", a.text.lines().nth(1).unwrap_or(""));
        }
        // A directory moved away is put back so the swapper goes on.
        if i % calls.len() == 2 && !a.is_error {
            let from = fx.ws.join(format!("moved/dir_{i}"));
            if from.symlink_metadata().map(|m| m.is_dir()).unwrap_or(false) {
                let _ = fs::rename(&from, fx.ws.join("mvdir_stash_dir"));
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    leaf_stop.store(true, Ordering::Relaxed);
    handle.join().unwrap();
    leaf.join().unwrap();
    eprintln!("[{:?}] swapped mv source: {iterations} moves, {moved} succeeded", fx.kind);
}

#[test]
fn swapped_mv_source_device() {
    let fx = Fx::new(Kind::Device);
    swapped_mv_source(&fx, 1000);
    fx.finish();
}

#[test]
fn swapped_mv_source_tree() {
    let fx = Fx::new(Kind::Tree);
    swapped_mv_source(&fx, 500);
    fx.finish();
}

/// Attack 16: Glob patterns with `..` or absolute parts.
#[test]
fn glob_patterns_outside() {
    both(|fx| {
        let s = fx.session();
        let o = text(&fx.outside);
        let ws = text(&fx.ws);
        let refused_everywhere = [
            json!({"pattern": "../sentinel_outside/*"}),
            json!({"pattern": "../**"}),
            json!({"pattern": "../*/secret.txt"}),
            json!({"pattern": "**/../../sentinel_outside/*"}),
            json!({"pattern": "sub/../../sentinel_outside/**"}),
            json!({"pattern": "./../sentinel_outside/secret.txt"}),
            json!({"pattern": "*", "path": "../sentinel_outside"}),
            json!({"pattern": "../sentinel_outside/*", "path": "sub"}),
            json!({"pattern": "dir_out_abs/*"}),
        ];
        for args in refused_everywhere.iter().take(8) {
            fx.refused(&s, "glob", args.clone());
        }
        // A pattern through a link out matches nothing (the walk never follows it).
        let a = fx.call(&s, "glob", refused_everywhere[8].clone());
        if !a.is_error && a.text.lines().any(|l| l.contains("dir_out_abs/") && !l.starts_with("No files match")) {
            fx.fail(format!("glob went through a link out:\n{}", a.text));
        }
        fx.refused(&s, "grep", json!({"pattern": ".", "glob": "../sentinel_outside/*"}));
        fx.refused(&s, "grep", json!({"pattern": ".", "glob": "**/../../**"}));
        let absolute = [
            format!("{o}/*"),
            format!("{o}/**/*.txt"),
            format!("{ws}/../{OUTSIDE}/*"),
            format!("{ws}_evil/*"),
            format!("{ws}.bak/**"),
        ];
        for pattern in &absolute {
            let a = fx.call(&s, "glob", json!({"pattern": pattern}));
            if fx.kind == Kind::Device && !a.is_error {
                fx.fail(format!("glob {pattern:?} was not refused:\n{}", a.text));
            }
        }
        for pattern in ["/**/secret.txt", "/*", "/**"] {
            let a = fx.call(&s, "glob", json!({"pattern": pattern}));
            if fx.kind == Kind::Device && !a.is_error {
                fx.fail(format!("glob {pattern:?} from / was not refused:\n{}", a.text));
            }
            if fx.kind == Kind::Tree && a.is_error {
                fx.fail(format!("glob {pattern:?} over the tree should answer:\n{}", a.text));
            }
        }
        // Braces and classes cannot smuggle `..` into what a walk matches.
        for pattern in ["{a.txt,../sentinel_outside/secret.txt}", "{..,sub}/*", "[.][.]/*", "**/{secret,deep}.txt"] {
            fx.call(&s, "glob", json!({"pattern": pattern}));
            fx.call(&s, "grep", json!({"pattern": ".", "glob": pattern}));
        }
        fx.refused(&s, "glob", json!({"pattern": "*", "path": o}));
        fx.refused(&s, "glob", json!({"pattern": format!("{o}/*"), "path": "."}));
    });
}

/// Attack 9: NUL bytes in paths.
#[test]
fn nul_in_paths() {
    both(|fx| {
        let s = fx.session();
        for p in ["a.txt\0", "\0", "sub\0/../../sentinel_outside/secret.txt", "dir_out_abs\0/secret.txt", "a\0b"] {
            for (tool, args) in look_calls(p).into_iter().chain(change_calls(p)) {
                let a = fx.refused(&s, tool, args);
                if a.text.contains('\0') {
                    fx.fail(format!("an answer holds a raw NUL: {:?}", a.text));
                }
            }
            fx.refused(&s, "mv", json!({"source": "a.txt", "destination": format!("x{p}")}));
            fx.refused(&s, "grep", json!({"pattern": "alpha", "path": format!(".{p}")}));
        }
        for pattern in ["*\0", "\0/**", "../\0/*"] {
            let a = fx.call(&s, "glob", json!({"pattern": pattern}));
            if !a.is_error && a.text.contains("a.txt") {
                fx.fail(format!("glob with a NUL in its pattern matched files:\n{}", a.text));
            }
        }
        fx.works(&s, "read", json!({"file_path": "a.txt"}), INSIDE);
    });
}

/// Attack 10: `~` is a name like any other: `~/x` is relative to the start directory.
#[test]
fn tilde_is_literal() {
    both(|fx| {
        let s = fx.session();
        let name = format!("ctxfs-tilde-{}.txt", std::process::id());
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let at_home = home.as_ref().map(|h| h.join(&name));
        let existed = at_home.as_ref().is_some_and(|p| p.exists());
        fx.refused(&s, "read", json!({"file_path": "~/.bashrc"}));
        fx.refused(&s, "read", json!({"file_path": "~root/.profile"}));
        fx.refused(&s, "list", json!({"path": "~"}));
        let a = fx.works(&s, "write", json!({"file_path": format!("~/{name}"), "content": "tilde\n"}), "Created");
        if !fx.ws.join("~").join(&name).is_file() {
            fx.fail(format!("write ~/{name} did not create <start>/~/{name}: {}", a.text));
        }
        if !existed && at_home.as_ref().is_some_and(|p| p.exists()) {
            fx.fail("write ~/… created a file in the home directory".into());
        }
        fx.works(&s, "read", json!({"file_path": format!("~/{name}")}), "tilde");
        fx.works(&s, "list", json!({"path": "~"}), &name);
        fx.works(&s, "stat", json!({"path": format!("./~/{name}")}), &fx.v(&format!("~/{name}")));
        fx.works(&s, "mkdir", json!({"path": "~user"}), "Created");
        if !fx.ws.join("~user").is_dir() {
            fx.fail("mkdir ~user did not make <start>/~user".into());
        }
    });
}

/// Attack 13: FIFOs never block a call (a FIFO read blocks forever).
#[test]
fn fifos_never_block() {
    both(|fx| {
        mkfifo(&fx.ws.join("fifo"));
        mkfifo(&fx.ws.join("sub/fifo2"));
        let s = fx.session();
        for p in ["fifo", "sub/fifo2"] {
            for (tool, args) in [
                ("read", json!({"file_path": p})),
                ("grep", json!({"pattern": ".", "path": p})),
                ("write", json!({"file_path": p, "content": "x"})),
                ("edit", json!({"file_path": p, "old_string": "a", "new_string": "b"})),
                ("apply_patch", json!({"patch": patch(&format!("*** Update File: {p}\n@@\n-a\n+b\n"))})),
                ("list", json!({"path": p})),
            ] {
                let a = fx.call_within(&s, tool, args.clone());
                if !a.is_error {
                    fx.fail(format!("{tool} {args} on a FIFO should be refused:\n{}", a.text));
                }
            }
            let a = fx.call_within(&s, "stat", json!({"path": p}));
            if a.is_error || !a.text.contains("special") {
                fx.fail(format!("stat of a FIFO should say it is special:\n{}", a.text));
            }
        }
        // The FIFO outside, through a link: refused, never opened.
        for (tool, args) in look_calls("fifo_out") {
            let a = fx.call_within(&s, tool, args.clone());
            if !a.is_error {
                fx.fail(format!("{tool} {args} should be refused:\n{}", a.text));
            }
        }
        for (tool, args) in [
            ("grep", json!({"pattern": "."})),
            ("grep", json!({"pattern": ".", "path": "sub"})),
            ("glob", json!({"pattern": "**"})),
            ("glob", json!({"pattern": "fifo*"})),
            ("search", json!({"query": "inside content"})),
            ("list", json!({})),
            ("list", json!({"path": "sub"})),
        ] {
            let a = fx.call_within(&s, tool, args.clone());
            if a.is_error {
                fx.fail(format!("{tool} {args} over a directory with a FIFO should answer:\n{}", a.text));
            }
        }
    });
}

/// Attack 13: Device files are never opened (a read of a `/dev/zero` twin never
/// ends). Making one needs CAP_MKNOD; without it this test only says so.
#[test]
fn device_files_never_block() {
    both(|fx| {
        let made = std::process::Command::new("mknod")
            .arg(fx.ws.join("zero"))
            .args(["c", "1", "5"])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !made {
            eprintln!("note: mknod is not permitted here; device files are covered by /dev paths only");
            return;
        }
        let s = fx.session();
        for (tool, args) in [
            ("read", json!({"file_path": "zero"})),
            ("grep", json!({"pattern": ".", "path": "zero"})),
            ("write", json!({"file_path": "zero", "content": "x"})),
        ] {
            let a = fx.call_within(&s, tool, args.clone());
            if !a.is_error {
                fx.fail(format!("{tool} {args} on a device should be refused:\n{}", a.text));
            }
        }
        for (tool, args) in [
            ("grep", json!({"pattern": "."})),
            ("glob", json!({"pattern": "**"})),
            ("search", json!({"query": "zero"})),
        ] {
            let a = fx.call_within(&s, tool, args.clone());
            if a.is_error {
                fx.fail(format!("{tool} {args} over a directory with a device should answer:\n{}", a.text));
            }
        }
        let a = fx.call_within(&s, "stat", json!({"path": "zero"}));
        if a.is_error || !a.text.contains("special") {
            fx.fail(format!("stat of a device should say it is special:\n{}", a.text));
        }
    });
}

/// 8, 10, 11. No normalisation: lookalikes of `..`, `/` and outside names
/// (spaces, quotes, backslashes, Unicode slashes and dots, drive letters,
/// NFC/NFD twins) are names like any other, never the thing they look like.
#[test]
fn lookalike_paths_are_literal() {
    both(|fx| {
        let s = fx.session();
        let o = text(&fx.outside);
        let lookalikes = [
            " ../sentinel_outside/secret.txt".to_string(),
            "../sentinel_outside/secret.txt ".to_string(),
            "\"../sentinel_outside/secret.txt\"".to_string(),
            "'../sentinel_outside/secret.txt'".to_string(),
            "..\\sentinel_outside\\secret.txt".to_string(),
            "..\u{2215}sentinel_outside\u{2215}secret.txt".to_string(),
            "\u{ff0e}\u{ff0e}/sentinel_outside/secret.txt".to_string(),
            "\u{2024}\u{2024}/sentinel_outside/secret.txt".to_string(),
            "C:\\..\\sentinel_outside\\secret.txt".to_string(),
            "C:/../sentinel_outside/secret.txt".to_string(),
            "file://".to_string() + &o + "/secret.txt",
            "%2e%2e/sentinel_outside/secret.txt".to_string(),
            "..%2fsentinel_outside%2fsecret.txt".to_string(),
            "...//sentinel_outside/secret.txt".to_string(),
            "sub/.../../../sentinel_outside/secret.txt".to_string(),
            format!(" {o}/secret.txt"),
            format!("{}\u{200b}/../{OUTSIDE}/secret.txt", text(&fx.ws)),
        ];
        for p in &lookalikes {
            for (tool, args) in look_calls(p) {
                fx.refused(&s, tool, args);
            }
        }
        // Unicode twins: a name made in NFC is not found by its NFD spelling.
        fx.works(&s, "write", json!({"file_path": "caf\u{e9}.txt", "content": "nfc\n"}), "Created");
        fx.refused(&s, "read", json!({"file_path": "cafe\u{301}.txt"}));
        fx.works(&s, "read", json!({"file_path": "caf\u{e9}.txt"}), "nfc");
        // Case is not folded: A.TXT is not a.txt.
        fx.refused(&s, "read", json!({"file_path": "A.TXT"}));
        fx.refused(&s, "read", json!({"file_path": "SUB/b.txt"}));
        // Lookalikes as targets of changes land inside, under their literal names, or are refused.
        for p in &lookalikes {
            fx.call(&s, "write", json!({"file_path": p, "content": "literal\n"}));
            fx.call(&s, "mkdir", json!({"path": format!("{p}.d")}));
        }
    });
}

/// Attack 13: Sockets are never opened either.
#[test]
fn sockets_are_refused() {
    both(|fx| {
        let _listener = std::os::unix::net::UnixListener::bind(fx.ws.join("sock")).unwrap();
        let s = fx.session();
        for (tool, args) in [
            ("read", json!({"file_path": "sock"})),
            ("grep", json!({"pattern": ".", "path": "sock"})),
            ("write", json!({"file_path": "sock", "content": "x"})),
            ("list", json!({"path": "sock"})),
        ] {
            let a = fx.call_within(&s, tool, args.clone());
            if !a.is_error {
                fx.fail(format!("{tool} {args} on a socket should be refused:\n{}", a.text));
            }
        }
        fx.works(&s, "stat", json!({"path": "sock"}), "special");
        let a = fx.call_within(&s, "grep", json!({"pattern": "."}));
        if a.is_error {
            fx.fail(format!("grep over a directory with a socket should answer:\n{}", a.text));
        }
        if !std::os::unix::fs::FileTypeExt::is_socket(&fx.ws.join("sock").symlink_metadata().unwrap().file_type()) {
            fx.fail("the socket was replaced".into());
        }
    });
}

/// Attack 17: Hard links to a file outside. Decision: a hard link cannot be told
/// from the original (both names are the same inode; `st_nlink` is the only
/// hint), so a hard link inside the boundary is a regular file inside, read
/// like any other; stat reports "hard links: 2" as that hint. A change never
/// writes through it: writes replace the file atomically (a new inode under
/// the name inside), so the outside name keeps its old bytes, and the link
/// count drops back to 1. Planting the hard link needs write access to the
/// workspace and read access to the outside file on the host already.
#[test]
fn hard_links_are_files_inside() {
    both(|fx| {
        let s = fx.session();
        fx.works(&s, "read", json!({"file_path": "hl.txt"}), "shared through a hard link");
        fx.works(&s, "stat", json!({"path": "hl.txt"}), "hard links: 2");
        fx.works(&s, "grep", json!({"pattern": "shared"}), "hl.txt:1:shared");
        fx.works(
            &s,
            "edit",
            json!({"file_path": "hl.txt", "old_string": "shared", "new_string": "changed"}),
            "changed",
        );
        if fs::read_to_string(fx.ws.join("hl.txt")).unwrap() != "changed through a hard link\n" {
            fx.fail("the edit of hl.txt did not land inside".into());
        }
        // The outside name is unchanged (check_outside compares its bytes too).
        if fs::read_to_string(fx.base.join("hl_origin/shared.txt")).unwrap() != "shared through a hard link\n" {
            fx.fail("an edit wrote through a hard link to the outside".into());
        }
        let a = fx.works(&s, "stat", json!({"path": "hl.txt"}), "kind: file");
        if a.text.contains("hard links") {
            fx.fail(format!("after a replace, hl.txt should be a file of its own:\n{}", a.text));
        }
        // A hard link to the secret itself is, by the same decision, a file
        // inside; what matters is that the server never makes one.
    });
}

/// Attack 14: Client roots can only narrow the view.
#[test]
fn client_roots_only_narrow() {
    both(|fx| {
        let open = |roots: Vec<PathBuf>| {
            fx.engine.open_session(SessionOptions { roots: Some(roots), ..Default::default() }).unwrap()
        };
        let everything = |s: &Session, fx: &Fx| {
            for p in ["a.txt", "sub/b.txt", ".", "sub", "in_abs", "/"] {
                for (tool, args) in look_calls(p) {
                    fx.refused(s, tool, args);
                }
            }
            for (tool, args) in look_calls(&text(&fx.outside)).into_iter().chain(look_calls("../sentinel_outside")) {
                fx.refused(s, tool, args);
            }
            fx.refused(s, "write", json!({"file_path": "new.txt", "content": "x"}));
            fx.refused(s, "write", json!({"file_path": format!("{}/new.txt", text(&fx.outside)), "content": "x"}));
            fx.refused(s, "mkdir", json!({"path": "newdir"}));
        };
        // Roots outside the boundary: nothing outside, and nothing at all.
        for roots in [
            vec![fx.outside.clone()],
            vec![fx.base.join("ws_evil")],
            vec![PathBuf::from(format!("{}_evil", text(&fx.ws)))],
            vec![fx.ws.join("dir_out_abs")],
            vec![fx.outside.join("sub"), fx.base.join("ws.bak")],
            vec![PathBuf::from("/nonexistent/ctxfs/root")],
            vec![],
        ] {
            let s = open(roots.clone());
            everything(&s, fx);
            let told = s.instructions();
            for word in NAMED.iter().chain(NEVER.iter()) {
                if told.contains(word) {
                    fx.fail(format!("the instructions for roots {roots:?} name {word:?}:\n{told}"));
                }
            }
        }
        // A root at a subdirectory hides its siblings.
        for roots in
            [vec![fx.ws.join("sub")], vec![fx.ws.join("in_dir_abs")], vec![fx.ws.join("sub"), fx.outside.clone()]]
        {
            let s = open(roots.clone());
            // The start moved to the root (issue 13, item 12): relative paths start there.
            // The workspace as a path of the session's world (a tree's is `/`).
            let ws = match fx.kind {
                Kind::Device => text(&fx.ws),
                Kind::Tree => String::new(),
            };
            let sub = format!("{ws}/sub");
            let top = if ws.is_empty() { "/".to_string() } else { ws.clone() };
            let told = s.instructions();
            if !told.contains(&format!("Start directory: {sub}\n")) || !told.contains("The client's roots narrow") {
                fx.fail(format!("roots {roots:?}: the instructions do not name the narrowed start:\n{told}"));
            }
            let first = fx.works(&s, "read", json!({"file_path": "b.txt"}), INSIDE);
            let notice = format!("Note: the client's roots narrow this session to {sub}; nothing outside them is open. Relative paths start at {sub}.");
            if !first.text.contains(&notice) {
                fx.fail(format!(
                    "roots {roots:?}: the first result does not say how the view is narrowed:\n{}",
                    first.text
                ));
            }
            fx.works(&s, "list", json!({"path": sub}), "b.txt");
            fx.works(&s, "list", json!({}), "b.txt");
            fx.works(&s, "grep", json!({"pattern": INSIDE, "path": sub}), "b.txt");
            fx.works(&s, "grep", json!({"pattern": INSIDE}), "b.txt");
            let g = fx.works(&s, "glob", json!({"pattern": "**", "path": sub}), "b.txt");
            if g.text.contains("a.txt") {
                fx.fail(format!("roots {roots:?}: glob below sub shows a sibling:\n{}", g.text));
            }
            for p in ["a.txt", "in_abs", "hl.txt", "sub/up/a.txt"] {
                fx.refused(&s, "read", json!({"file_path": format!("{ws}/{p}")}));
            }
            fx.refused(&s, "read", json!({"file_path": "up/a.txt"}));
            for p in [top.as_str(), ".."] {
                for (tool, args) in look_calls(p) {
                    fx.refused(&s, tool, args);
                }
            }
            fx.refused(&s, "write", json!({"file_path": format!("{ws}/new.txt"), "content": "x"}));
            fx.refused(&s, "mv", json!({"source": "b.txt", "destination": "../b.txt"}));
            fx.refused(&s, "mv", json!({"source": format!("{ws}/a.txt"), "destination": "a.txt"}));
        }
        // A root above the boundary narrows nothing and widens nothing.
        let s = open(vec![fx.base.clone(), PathBuf::from("/")]);
        fx.works(&s, "read", json!({"file_path": "a.txt"}), INSIDE);
        for (tool, args) in
            look_calls(&format!("{}/secret.txt", text(&fx.outside))).into_iter().chain(look_calls("file_out_abs"))
        {
            fx.refused(&s, tool, args);
        }
        if fx.kind == Kind::Device {
            fx.refused(&s, "list", json!({"path": text(&fx.base)}));
        }
    });
}

/// The data directory (results, trash) inside the boundary is hidden from
/// the sessions (issue 13, item 13: `--root ~` with the default one); the
/// boundary itself as the data directory is refused at start.
#[test]
fn data_dir_inside_is_hidden() {
    for kind in [Kind::Device, Kind::Tree] {
        let fx = Fx::new(kind);
        let view = fx._dirs[2].path().join("view.json");
        fs::write(&view, r#"{"grants": {"/": "stage"}}"#).unwrap();
        let posture = || match kind {
            Kind::Device => Posture::Device { root: fx.ws.clone() },
            Kind::Tree => Posture::Tree { dir: fx.ws.clone(), view: view.clone() },
        };
        if Engine::new(Config { start: None, data_dir: Some(fx.ws.clone()), ..Config::new(posture()) }).is_ok() {
            fx.fail("the boundary itself was accepted as the data directory".into());
        }
        // A link outside that leads into the workspace is inside too.
        let sneaky = fx._dirs[1].path().join("sneaky");
        symlink(fx.ws.join("sub"), &sneaky).unwrap();
        // Each: the data directory given, its place in the workspace, what to remove after.
        for (data, rel, made) in [
            (fx.ws.join(".ctxfs"), ".ctxfs", ".ctxfs"),
            (fx.ws.join("sub/deeper/data"), "sub/deeper/data", "sub/deeper"),
            (sneaky.join("deeper2"), "sub/deeper2", "sub/deeper2"),
        ] {
            let engine =
                match Engine::new(Config { start: None, data_dir: Some(data.clone()), ..Config::new(posture()) }) {
                    Ok(engine) => engine,
                    Err(e) => {
                        fx.fail(format!("a data directory inside the boundary was refused: {}: {e}", data.display()));
                        continue;
                    }
                };
            let s = engine.open_session(SessionOptions::default()).unwrap();
            let world = match kind {
                Kind::Device => format!("{}/{rel}", text(&fx.ws)),
                Kind::Tree => format!("/{rel}"),
            };
            for (tool, args) in look_calls(&world).into_iter().chain(look_calls(&format!("{world}/sessions.db"))) {
                fx.refused(&s, tool, args);
            }
            fx.refused(&s, "write", json!({"file_path": format!("{world}/x.txt"), "content": "x"}));
            drop(s);
            drop(engine);
            fs::remove_dir_all(fx.ws.join(made)).unwrap();
        }
        // Beside the boundary (or above it) is fine.
        for data in [fx.data.join("elsewhere"), fx.base.join("data_beside")] {
            if let Err(e) = Engine::new(Config { start: None, data_dir: Some(data.clone()), ..Config::new(posture()) })
            {
                fx.fail(format!("a data directory outside the boundary was refused: {}: {e}", data.display()));
            }
        }
        let _ = fs::remove_dir_all(fx.base.join("data_beside"));
        fx.finish();
    }
}

/// Ignore files above the boundary are never read (they say `*` here).
#[test]
fn ignore_files_above_the_boundary_are_not_read() {
    both(|fx| {
        let s = fx.session();
        fx.works(&s, "glob", json!({"pattern": "*.txt"}), "a.txt");
        fx.works(&s, "grep", json!({"pattern": "beta"}), "b.txt:2:beta");
        fx.works(&s, "search", json!({"query": "alpha"}), "a.txt");
    });
}

/// The harness itself: a read outside, a listing outside and a write outside
/// are each noticed by `check_outside`.
#[test]
fn the_outside_check_notices() {
    let fx = Fx::new(Kind::Device);
    fx.check_outside();
    assert!(fx.failures.lock().unwrap().is_empty(), "{:?}", fx.failures.lock().unwrap());
    type Leak = Box<dyn Fn(&Fx)>;
    let cases: Vec<(&str, Leak)> = vec![
        ("read", Box::new(|fx: &Fx| drop(fs::read(fx.outside.join("secret.txt")).unwrap()))),
        ("listed", Box::new(|fx: &Fx| assert!(fs::read_dir(fx.outside.join("sub")).unwrap().count() > 0))),
        ("created", Box::new(|fx: &Fx| fs::write(fx.outside.join("new.txt"), "x").unwrap())),
        ("secret is now inside", Box::new(|fx: &Fx| fs::write(fx.ws.join("copy.txt"), SECRET).unwrap())),
    ];
    for (what, act) in cases {
        act(&fx);
        fx.check_outside();
        let failures = std::mem::take(&mut *fx.failures.lock().unwrap());
        if what == "read" || what == "listed" {
            if atime_works() {
                assert!(failures.iter().any(|f| f.contains(what)), "a {what} outside went unnoticed: {failures:?}");
            }
        } else {
            assert!(failures.iter().any(|f| f.contains(what)), "{what} went unnoticed: {failures:?}");
        }
        let _ = fs::remove_file(fx.outside.join("new.txt"));
        let _ = fs::remove_file(fx.ws.join("copy.txt"));
        reset_times(&fx.base, &fx.expected);
    }
    fx.check_outside();
    fx.finish();
}
