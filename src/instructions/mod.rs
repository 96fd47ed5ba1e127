//! The instruction chain: AGENTS.md / CLAUDE.md files the model follows.
//!
//! Collected from the boundary down to the start directory, outermost first,
//! one file per directory (AGENTS.md before CLAUDE.md), and only files the
//! session can read, checked through `Access` like any tool's path. The
//! user's global file comes first and files named in the configuration come
//! last. Below the start directory, "nearby" files are handed over once per
//! session with the first read under their directory. This module reads;
//! it never writes, and it does not decide where the chain is shown.

use crate::access::{Access, Need};
use crate::paths::VPath;
use crate::text::TextFile;
use crate::vfs::Kind;
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// The names a directory may hold its instructions under, preferred first.
pub const NAMES: [&str; 2] = ["AGENTS.md", "CLAUDE.md"];
/// Instruction files larger than this are skipped with a note.
pub const MAX_BYTES: u64 = 128 * 1024;

/// Where an instruction file came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The user's global file in the platform's config directory.
    Global,
    /// A directory from the boundary down to the start directory.
    Chain,
    /// A file named in ctxfs's configuration.
    Configured,
    /// A directory below the start directory, handed over with a read.
    Nearby,
}

/// One instruction file, for the model and for editors to render.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instruction {
    /// Its path relative to the boundary (or a label for files outside it).
    pub path: String,
    pub text: String,
    pub origin: Origin,
    /// Its place in the chain, from 0.
    pub order: usize,
    /// Where the file is, for an editor to open it.
    pub location: Location,
}

/// Where an instruction file is.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Location {
    /// A path of the session's world (in the view).
    InView(VPath),
    /// The user's own file, outside the view (a host path).
    Host(PathBuf),
    #[default]
    Unknown,
}

/// The whole chain, with notes on files that were skipped.
#[derive(Debug, Clone, Default)]
pub struct Chain {
    pub files: Vec<Instruction>,
    /// Sentences about files that were found but not loaded (binary, too large).
    pub notes: Vec<String>,
}

impl Chain {
    /// The chain as one text, for an MCP `instructions` field.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for file in &self.files {
            out.push_str(&format!("## Instructions from {}\n\n{}\n", file.path, file.text.trim_end()));
            out.push('\n');
        }
        for note in &self.notes {
            out.push_str(&format!("Note: {note}\n"));
        }
        out
    }
}

/// Where the user's own configuration lives.
#[derive(Debug, Clone, Default)]
pub struct UserConfig {
    /// The directory with the global AGENTS.md, `skills/` and `config.json`.
    pub dir: Option<PathBuf>,
}

/// The retention the user configured; each part left out takes the store's default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetentionSetting {
    pub days: Option<u64>,
    pub megabytes: Option<u64>,
}

impl UserConfig {
    /// The platform's config directory for ctxfs (`~/.config/ctxfs` on Linux).
    pub fn platform() -> UserConfig {
        UserConfig { dir: directories::ProjectDirs::from("", "", "ctxfs").map(|d| d.config_dir().to_path_buf()) }
    }

    /// A string setting of `config.json` (such as `"embedder"`), if the file has it.
    pub fn setting(&self, key: &str) -> Option<String> {
        let text = std::fs::read_to_string(self.dir.as_ref()?.join("config.json")).ok()?;
        let config: serde_json::Value = serde_json::from_str(&text).ok()?;
        config.get(key)?.as_str().map(str::to_owned)
    }

    /// How long sessions are kept, as `config.json` says:
    /// `"retention": {"days": N, "megabytes": N}`; what it leaves out is `None`.
    pub fn retention(&self) -> RetentionSetting {
        let text = self.dir.as_ref().and_then(|d| std::fs::read_to_string(d.join("config.json")).ok());
        let config: Option<serde_json::Value> = text.and_then(|t| serde_json::from_str(&t).ok());
        let section = config.as_ref().and_then(|c| c.get("retention"));
        let number = |key: &str| section.and_then(|s| s.get(key)).and_then(|v| v.as_u64());
        RetentionSetting { days: number("days"), megabytes: number("megabytes") }
    }

    /// Instruction files named in `config.json` (`{"instructions": [...]}`),
    /// relative to the config directory unless absolute.
    fn configured(&self) -> (Vec<PathBuf>, Vec<String>) {
        let Some(dir) = &self.dir else { return (Vec::new(), Vec::new()) };
        let path = dir.join("config.json");
        let Ok(text) = std::fs::read_to_string(&path) else { return (Vec::new(), Vec::new()) };
        #[derive(serde::Deserialize)]
        struct File {
            instructions: Vec<String>,
        }
        match serde_json::from_str::<File>(&text) {
            Ok(file) => (file.instructions.iter().map(|p| dir.join(p)).collect(), Vec::new()),
            Err(e) => {
                (Vec::new(), vec![format!("{} is not valid ({e}); its instructions were not loaded.", path.display())])
            }
        }
    }
}

/// What loading one candidate file found.
enum Loaded {
    Text(String),
    Skipped(String),
    Absent,
}

fn decode(label: &str, bytes: &[u8]) -> Loaded {
    if bytes.len() as u64 > MAX_BYTES {
        return Loaded::Skipped(format!(
            "{label} was skipped: it is {} bytes, more than the {} KiB an instruction file may have.",
            bytes.len(),
            MAX_BYTES / 1024
        ));
    }
    match TextFile::decode(bytes) {
        Ok(file) => Loaded::Text(file.into_text()),
        Err(_) => Loaded::Skipped(format!("{label} was skipped: it is not UTF-8 text.")),
    }
}

/// A label for a path: relative to the boundary.
fn relative(access: &Access, path: &VPath) -> String {
    let boundary = access.fs().boundary();
    match path.strip_prefix(boundary) {
        Some("") => ".".into(),
        Some(rel) => rel.to_string(),
        None => path.to_string(),
    }
}

/// Loads `dir/name` if the session can read it as a regular file.
fn load_in_view(access: &Access, path: &VPath) -> Loaded {
    let Ok(target) = access.check(path.as_str(), path.clone(), Need::Look) else { return Loaded::Absent };
    match target.kind() {
        Some(Kind::File) => {}
        _ => return Loaded::Absent,
    }
    let label = relative(access, path);
    match target.meta.as_ref() {
        Some(meta) if meta.len > MAX_BYTES => return decode(&label, &vec![0; (MAX_BYTES + 1) as usize]),
        _ => {}
    }
    match access.fs().read_file(&target.real, MAX_BYTES) {
        Ok(bytes) => decode(&label, &bytes),
        Err(crate::vfs::FsError::TooLarge { len }) => Loaded::Skipped(format!(
            "{label} was skipped: it is {len} bytes, more than the {} KiB an instruction file may have.",
            MAX_BYTES / 1024
        )),
        Err(_) => Loaded::Absent,
    }
}

/// The instruction file a directory contributes, by the preference order.
fn directory_file(access: &Access, dir: &VPath, chain: &mut Chain, origin: Origin) -> Option<Instruction> {
    for name in NAMES {
        let path = dir.join(name);
        match load_in_view(access, &path) {
            Loaded::Text(text) => {
                let location = Location::InView(path.clone());
                return Some(Instruction { path: relative(access, &path), text, origin, order: 0, location });
            }
            Loaded::Skipped(note) => {
                chain.notes.push(note);
                return None;
            }
            Loaded::Absent => {}
        }
    }
    None
}

/// Loads a file outside the view (the user's own), with a label.
fn load_host(path: &Path, label: String, origin: Origin, chain: &mut Chain) {
    let Ok(meta) = std::fs::metadata(path) else { return };
    if !meta.is_file() {
        return;
    }
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) => {
            chain.notes.push(format!("{label} could not be read: {e}."));
            return;
        }
    };
    match decode(&label, &bytes) {
        Loaded::Text(text) => chain.files.push(Instruction {
            path: label,
            text,
            origin,
            order: 0,
            location: Location::Host(path.to_path_buf()),
        }),
        Loaded::Skipped(note) => chain.notes.push(note),
        Loaded::Absent => {}
    }
}

/// A host path with the home directory written `~`, for labels.
fn home_relative(path: &Path) -> String {
    let home = directories::BaseDirs::new().map(|d| d.home_dir().to_path_buf());
    match home.as_deref().and_then(|h| path.strip_prefix(h).ok()) {
        Some(rest) => format!("~/{}", rest.display()),
        None => path.display().to_string(),
    }
}

/// The chain for a session whose start directory is `access.start()`.
pub fn chain(access: &Access, user: &UserConfig) -> Chain {
    let mut chain = Chain::default();
    if let Some(dir) = &user.dir {
        let path = dir.join("AGENTS.md");
        load_host(&path, format!("{} (global)", home_relative(&path)), Origin::Global, &mut chain);
    }
    let boundary = access.fs().boundary().clone();
    let start = if access.start().starts_with(&boundary) { access.start().clone() } else { boundary.clone() };
    let mut dirs: Vec<VPath> = start.ancestors().into_iter().filter(|d| d.starts_with(&boundary)).collect();
    dirs.push(start);
    for dir in dirs {
        if let Some(file) = directory_file(access, &dir, &mut chain, Origin::Chain) {
            chain.files.push(file);
        }
    }
    let (configured, notes) = user.configured();
    chain.notes.extend(notes);
    for path in configured {
        let label = format!("{} (configured)", home_relative(&path));
        load_host(&path, label, Origin::Configured, &mut chain);
    }
    for (order, file) in chain.files.iter_mut().enumerate() {
        file.order = order;
    }
    chain
}

/// The nearby instruction files a read of `path` hands over: those of the
/// directories strictly below the start directory, down to the path's own
/// directory, not handed over before (`given` remembers directories looked at).
pub fn nearby(access: &Access, path: &VPath, is_dir: bool, given: &mut HashSet<VPath>) -> Chain {
    let mut chain = Chain::default();
    let start = access.start();
    let mut dirs = path.ancestors();
    if is_dir {
        dirs.push(path.clone());
    }
    for dir in dirs {
        if dir == *start || !dir.starts_with(start) || !given.insert(dir.clone()) {
            continue;
        }
        if let Some(file) = directory_file(access, &dir, &mut chain, Origin::Nearby) {
            chain.files.push(file);
        }
    }
    chain
}
