//! The gate's files: rules (allow and deny patterns per kind of change) and
//! remembered grants, read fresh at every gated call so an edit of a rules
//! file or a `ctxfs grants revoke` takes effect at once.
//!
//! Where they are:
//! - the user's rules: `<config dir>/rules.json`;
//! - the project's rules: `<data dir>/projects/<name>-<hash>/rules.json`,
//!   keyed by the project's host path (the data directory never lies inside
//!   the boundary, so the model cannot reach it);
//! - grants that last: `<data dir>/grants.json`, keyed by project.
//!
//! A file that is not valid is a [`Problem`] naming the file, line and
//! column. It never opens anything: a broken rules file makes every change
//! ask (its deny rules are unknown), a broken grants file grants nothing and
//! is never overwritten.

use super::pattern::Pattern;
use super::Kind;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// The project the gate works for: its key (the boundary's host path) and
/// where its files are.
#[derive(Debug, Clone)]
pub struct Project {
    /// The boundary's host path, as text: the key of grants and project rules.
    pub key: String,
    pub data_dir: PathBuf,
    /// The user's config directory, if any.
    pub config_dir: Option<PathBuf>,
}

impl Project {
    pub fn new(host_root: &Path, data_dir: &Path, config_dir: Option<&Path>) -> Project {
        Project {
            key: host_root.to_string_lossy().into_owned(),
            data_dir: data_dir.to_path_buf(),
            config_dir: config_dir.map(Path::to_path_buf),
        }
    }

    pub fn grants_path(&self) -> PathBuf {
        self.data_dir.join("grants.json")
    }

    pub fn user_rules_path(&self) -> Option<PathBuf> {
        self.config_dir.as_ref().map(|d| d.join("rules.json"))
    }

    /// `<data>/projects/<last name>-<16 hex of SHA-256 of the key>/rules.json`.
    pub fn project_rules_path(&self) -> PathBuf {
        project_dir(&self.data_dir, &self.key).join("rules.json")
    }
}

/// A project's own directory under the data directory:
/// `<data>/projects/<last name>-<16 hex of SHA-256 of the key>`, where the key
/// is the boundary's host path.
pub fn project_dir(data_dir: &Path, key: &str) -> PathBuf {
    let digest = Sha256::digest(key.as_bytes());
    let hash: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    let name: String = Path::new(key)
        .file_name()
        .map(|n| {
            n.to_string_lossy()
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' })
                .collect()
        })
        .filter(|n: &String| !n.is_empty())
        .unwrap_or_else(|| "root".into());
    data_dir.join("projects").join(format!("{name}-{hash}"))
}

/// Which file a rule or a problem comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    UserRules,
    ProjectRules,
    Grants,
}

impl Source {
    /// How the model is told of the file (no host path).
    pub fn role(self) -> &'static str {
        match self {
            Source::UserRules => "the user's rules.json",
            Source::ProjectRules => "the project's rules.json",
            Source::Grants => "grants.json",
        }
    }
}

/// A file that is not valid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub source: Source,
    pub path: PathBuf,
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl Problem {
    /// The sentence for the model: the file by its role, the line.
    pub fn for_model(&self) -> String {
        format!("{} is not valid (line {}, column {}: {})", self.source.role(), self.line, self.column, self.message)
    }
}

impl fmt::Display for Problem {
    /// The sentence for the user: the file by its path, the line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} is not valid (line {}, column {}): {}", self.path.display(), self.line, self.column, self.message)
    }
}

/// One allow or deny rule.
#[derive(Debug, Clone)]
pub struct Rule {
    /// `None` for `*`: every kind of change.
    pub kind: Option<Kind>,
    pub pattern: Pattern,
    pub source: Source,
}

impl Rule {
    /// Whether the rule covers a change of `kind` to `rel`. Memory is covered only by rules
    /// under the `memory` key, whose patterns name scopes (`project`, `user`, `*`): a rule for
    /// every kind of change (`*`) is about paths.
    pub fn covers(&self, kind: Kind, rel: &str) -> bool {
        let kind_fits = match kind {
            Kind::Memory => self.kind == Some(Kind::Memory),
            _ => self.kind.is_none_or(|k| k == kind),
        };
        kind_fits && self.pattern.matches(rel)
    }
}

/// A remembered grant: `{kind: "file", target}` (a path pattern) or `{kind: "memory", target}`
/// (a memory scope: `project` or `user`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grant {
    pub kind: GrantKind,
    pub target: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GrantKind {
    File,
    Memory,
}

impl Grant {
    pub fn file(target: impl Into<String>) -> Grant {
        Grant { kind: GrantKind::File, target: target.into() }
    }

    pub fn memory(scope: impl Into<String>) -> Grant {
        Grant { kind: GrantKind::Memory, target: scope.into() }
    }

    /// How listings name it and `revoke` finds it: the target, `memory:` before a memory scope.
    pub fn shown(&self) -> String {
        match self.kind {
            GrantKind::File => self.target.clone(),
            GrantKind::Memory => format!("memory:{}", self.target),
        }
    }

    pub fn covers(&self, rel: &str) -> bool {
        Pattern::parse(&self.target).is_ok_and(|p| p.matches(rel))
    }
}

/// Everything the files say, read at one moment.
#[derive(Debug, Default)]
pub struct Policy {
    pub allow: Vec<Rule>,
    pub deny: Vec<Rule>,
    /// The project's remembered grants.
    pub grants: Vec<Grant>,
    pub problems: Vec<Problem>,
}

impl Policy {
    pub fn load(project: &Project) -> Policy {
        let mut policy = Policy::default();
        let mut files = Vec::new();
        if let Some(user) = project.user_rules_path() {
            files.push((Source::UserRules, user));
        }
        files.push((Source::ProjectRules, project.project_rules_path()));
        for (source, path) in files {
            match read_rules(&path, source) {
                Ok(Some((allow, deny))) => {
                    policy.allow.extend(allow);
                    policy.deny.extend(deny);
                }
                Ok(None) => {}
                Err(problem) => policy.problems.push(problem),
            }
        }
        match read_grants(&project.grants_path()) {
            Ok(file) => policy.grants = file.projects.get(&project.key).cloned().unwrap_or_default(),
            Err(problem) => policy.problems.push(problem),
        }
        for problem in &policy.problems {
            tracing::error!("{problem}; every change it could allow asks until it is fixed");
        }
        policy
    }

    /// Whether a rules file is broken: its deny rules are unknown, so
    /// nothing may be let through without asking.
    pub fn rules_broken(&self) -> bool {
        self.problems.iter().any(|p| p.source != Source::Grants)
    }
}

/// The rules file's shape: `{"allow": {"write": ["notes/*"]}, "deny": {"*": ["secrets/*"]}}`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RulesFile {
    #[serde(default)]
    allow: BTreeMap<KindKey, Vec<String>>,
    #[serde(default)]
    deny: BTreeMap<KindKey, Vec<String>>,
    /// Free text for the reader.
    #[serde(default, rename = "about")]
    _about: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
enum KindKey {
    #[serde(rename = "write")]
    Write,
    #[serde(rename = "remove")]
    Remove,
    #[serde(rename = "move")]
    Move,
    /// Changes to memory records; the patterns name scopes (`project`, `user`).
    #[serde(rename = "memory")]
    Memory,
    #[serde(rename = "commit")]
    Commit,
    #[serde(rename = "*")]
    Any,
}

impl KindKey {
    fn kind(self) -> Option<Kind> {
        match self {
            KindKey::Write => Some(Kind::Write),
            KindKey::Remove => Some(Kind::Remove),
            KindKey::Move => Some(Kind::Move),
            KindKey::Memory => Some(Kind::Memory),
            KindKey::Commit => Some(Kind::Commit),
            KindKey::Any => None,
        }
    }
}

fn json_problem(source: Source, path: &Path, e: &serde_json::Error) -> Problem {
    Problem {
        source,
        path: path.to_path_buf(),
        line: e.line(),
        column: e.column(),
        message: e.to_string().split(" at line ").next().unwrap_or_default().to_string(),
    }
}

/// The line and column where the string `value` first appears in `text`.
fn locate(text: &str, value: &str) -> (usize, usize) {
    let quoted = serde_json::to_string(value).unwrap_or_default();
    match text.find(&quoted) {
        Some(at) => {
            let before = &text[..at];
            let line = before.matches('\n').count() + 1;
            let column = at - before.rfind('\n').map(|n| n + 1).unwrap_or(0) + 1;
            (line, column)
        }
        None => (1, 1),
    }
}

type RuleLists = (Vec<Rule>, Vec<Rule>);

/// Reads one rules file; `None` when there is none.
fn read_rules(path: &Path, source: Source) -> Result<Option<RuleLists>, Problem> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(Problem {
                source,
                path: path.to_path_buf(),
                line: 0,
                column: 0,
                message: format!("cannot read it: {e}"),
            })
        }
    };
    let file: RulesFile = serde_json::from_str(&text).map_err(|e| json_problem(source, path, &e))?;
    let mut lists = (Vec::new(), Vec::new());
    for (map, out) in [(&file.allow, &mut lists.0), (&file.deny, &mut lists.1)] {
        for (key, patterns) in map {
            for text_pattern in patterns {
                let pattern = Pattern::parse(text_pattern).map_err(|why| {
                    let (line, column) = locate(&text, text_pattern);
                    Problem { source, path: path.to_path_buf(), line, column, message: format!("bad pattern: {why}") }
                })?;
                out.push(Rule { kind: key.kind(), pattern, source });
            }
        }
    }
    Ok(Some(lists))
}

/// `grants.json`: `{"projects": {"<host path>": [{"kind": "file", "target": "notes/*"}]}}`.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrantsFile {
    #[serde(default)]
    pub version: u32,
    #[serde(default)]
    pub projects: BTreeMap<String, Vec<Grant>>,
}

/// Reads `grants.json` (empty when there is none), checking every target.
pub fn read_grants(path: &Path) -> Result<GrantsFile, Problem> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(GrantsFile::default()),
        Err(e) => {
            return Err(Problem {
                source: Source::Grants,
                path: path.to_path_buf(),
                line: 0,
                column: 0,
                message: format!("cannot read it: {e}"),
            })
        }
    };
    let file: GrantsFile = serde_json::from_str(&text).map_err(|e| json_problem(Source::Grants, path, &e))?;
    for grant in file.projects.values().flatten() {
        if let Err(why) = Pattern::parse(&grant.target) {
            let (line, column) = locate(&text, &grant.target);
            return Err(Problem {
                source: Source::Grants,
                path: path.to_path_buf(),
                line,
                column,
                message: format!("bad target: {why}"),
            });
        }
    }
    Ok(file)
}

/// Changes the project's list in `grants.json` and writes it back
/// atomically; refuses (and writes nothing) when the file is not valid.
pub fn update_grants<T>(project: &Project, change: impl FnOnce(&mut Vec<Grant>) -> T) -> Result<T, String> {
    let path = project.grants_path();
    let mut file = read_grants(&path).map_err(|p| format!("{p}; it was left as it is"))?;
    let list = file.projects.entry(project.key.clone()).or_default();
    let out = change(list);
    if list.is_empty() {
        file.projects.remove(&project.key);
    }
    file.version = 1;
    let mut text = serde_json::to_string_pretty(&file).map_err(|e| e.to_string())?;
    text.push('\n');
    std::fs::create_dir_all(&project.data_dir)
        .map_err(|e| format!("cannot create {}: {e}", project.data_dir.display()))?;
    let temp = path.with_extension(format!("json.{}.tmp", std::process::id()));
    std::fs::write(&temp, text).and_then(|_| std::fs::rename(&temp, &path)).map_err(|e| {
        let _ = std::fs::remove_file(&temp);
        format!("cannot write {}: {e}", path.display())
    })?;
    Ok(out)
}

/// Adds grants that last for the project (each once).
pub fn remember(project: &Project, grants: &[Grant]) -> Result<(), String> {
    update_grants(project, |list| {
        for grant in grants {
            if !list.contains(grant) {
                list.push(grant.clone());
            }
        }
    })
}

/// Revokes the project's grant with `target`, or all of them; answers what was revoked.
pub fn revoke(project: &Project, target: Option<&str>) -> Result<Vec<Grant>, String> {
    update_grants(project, |list| {
        let (gone, kept): (Vec<Grant>, Vec<Grant>) =
            list.drain(..).partition(|g| target.is_none_or(|t| g.shown() == t));
        *list = kept;
        gone
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn project(dir: &Path) -> Project {
        Project::new(Path::new("/home/u/proj"), &dir.join("data"), Some(&dir.join("config")))
    }

    #[test]
    fn rules_are_read_and_bad_ones_are_located() {
        let dir = tempfile::tempdir().unwrap();
        let p = project(dir.path());
        std::fs::create_dir_all(dir.path().join("config")).unwrap();
        std::fs::write(
            p.user_rules_path().unwrap(),
            "{\n  \"allow\": {\"write\": [\"notes/*\"]},\n  \"deny\": {\"*\": [\"secrets/*\"]}\n}\n",
        )
        .unwrap();
        let policy = Policy::load(&p);
        assert!(policy.problems.is_empty(), "{:?}", policy.problems);
        assert_eq!(policy.allow.len(), 1);
        assert!(policy.allow[0].covers(Kind::Write, "notes/a.md"));
        assert!(!policy.allow[0].covers(Kind::Remove, "notes/a.md"));
        assert!(policy.deny[0].covers(Kind::Move, "secrets/k"));

        std::fs::write(p.user_rules_path().unwrap(), "{\n  \"allow\": {\"write\": [\"notes/*\",]}\n}\n").unwrap();
        let policy = Policy::load(&p);
        assert_eq!(policy.problems.len(), 1);
        assert_eq!(policy.problems[0].line, 2);
        assert!(policy.rules_broken());

        std::fs::write(p.user_rules_path().unwrap(), "{\n  \"allow\": {\n    \"write\": [\"[oops\"]\n  }\n}\n")
            .unwrap();
        let policy = Policy::load(&p);
        assert_eq!((policy.problems[0].line, policy.problems[0].column), (3, 15));

        std::fs::write(p.user_rules_path().unwrap(), "{\"allow\": {\"erase\": [\"*\"]}}").unwrap();
        assert!(Policy::load(&p).problems[0].message.contains("erase"));
    }

    #[test]
    fn grants_are_kept_per_project_and_a_broken_file_is_never_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let p = project(dir.path());
        remember(&p, &[Grant::file("notes/*"), Grant::file("a.md")]).unwrap();
        remember(&p, &[Grant::file("notes/*")]).unwrap();
        let other = Project { key: "/elsewhere".into(), ..p.clone() };
        remember(&other, &[Grant::file("*")]).unwrap();
        assert_eq!(Policy::load(&p).grants, vec![Grant::file("notes/*"), Grant::file("a.md")]);
        assert_eq!(revoke(&p, Some("a.md")).unwrap(), vec![Grant::file("a.md")]);
        assert_eq!(Policy::load(&p).grants, vec![Grant::file("notes/*")]);
        assert_eq!(Policy::load(&other).grants, vec![Grant::file("*")]);

        std::fs::write(p.grants_path(), "{\"projects\": {\n\"/home/u/proj\": [{\"kind\": \"dir\"}]}}").unwrap();
        let policy = Policy::load(&p);
        assert!(policy.grants.is_empty());
        assert_eq!(policy.problems[0].line, 2);
        assert!(!policy.rules_broken());
        assert!(remember(&p, &[Grant::file("x")]).is_err());
        assert!(std::fs::read_to_string(p.grants_path()).unwrap().contains("\"dir\""));
    }
}
