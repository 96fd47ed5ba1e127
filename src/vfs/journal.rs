//! What a process is in the middle of, kept in the data directory so that a
//! later start can clean up after a crash: the temporary files of its writes,
//! and the multi-file changes (an `apply_patch`) it began, with every file's
//! earlier content, so a change cut short is rolled back whole.
//!
//! Each process has its own folder, `inflight/PID-START` (START tells a
//! reused process id apart). A start of ctxfs looks at the folders of
//! processes that are gone: it removes their temporary files and rolls back
//! their unfinished changes in its own boundary, then the folder. Nothing
//! here decides what may be written; the rollback goes through the confined
//! file system like any write.
//!
//! What it protects against is a process that dies (a crash, `kill -9`): the
//! records are not synced to disk, so a power loss may lose them.

use crate::hash::{hex, sha256, Sha};
use crate::paths::VPath;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// One file of a multi-file change: what it was, and what the change makes it.
#[derive(Debug, Clone)]
pub struct IntentStep {
    /// Where the file really is.
    pub path: VPath,
    /// Its content before the change; `None` when it did not exist.
    pub old: Option<Vec<u8>>,
    /// The hash of its content after the change; `None` when the change removes it.
    pub new: Option<Sha>,
}

/// The folder of this process's records.
pub struct Journal {
    dir: PathBuf,
    /// The list of temporary files, opened at the first write.
    temps: Mutex<Option<std::fs::File>>,
    counter: AtomicU64,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct IntentFile {
    /// The host directory of the boundary the paths are in.
    host_root: PathBuf,
    steps: Vec<StepFile>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct StepFile {
    path: String,
    /// The file in the intent folder holding the earlier content.
    old: Option<String>,
    new: Option<String>,
}

/// A multi-file change under way; `done` removes its record.
pub struct Intent {
    dir: PathBuf,
}

impl Intent {
    /// The change finished (or was put back by its own undo): nothing to roll back.
    pub fn done(self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The start time of a process, in clock ticks since boot (field 22 of
/// `/proc/PID/stat`), which tells a process from a later one with its id.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields follow the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(19)?.parse().ok()
}

/// Whether the process that made a folder named `PID-START` still runs.
fn alive(name: &str) -> bool {
    let Some((pid, start)) = name.split_once('-') else { return false };
    let (Ok(pid), Ok(start)) = (pid.parse::<u32>(), start.parse::<u64>()) else { return false };
    start_time(pid) == Some(start)
}

impl Journal {
    /// This process's journal under `root` (`DATA/inflight`), made when first used.
    pub fn new(root: &Path) -> Journal {
        let pid = std::process::id();
        let start = start_time(pid).unwrap_or(0);
        Journal { dir: root.join(format!("{pid}-{start}")), temps: Mutex::new(None), counter: AtomicU64::new(0) }
    }

    /// Notes a temporary file about to be made at `dir/name` (host paths).
    pub fn note_temp(&self, dir: &Path, name: &str) {
        let mut temps = self.temps.lock().unwrap_or_else(|e| e.into_inner());
        if temps.is_none() {
            let opened = std::fs::create_dir_all(&self.dir)
                .and_then(|()| std::fs::OpenOptions::new().create(true).append(true).open(self.dir.join("temps")));
            match opened {
                Ok(file) => *temps = Some(file),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot note temporary files; a crash may leave some behind");
                    return;
                }
            }
        }
        if let Some(file) = temps.as_mut() {
            let mut line = dir.join(name).into_os_string().into_encoded_bytes();
            line.push(b'\n');
            let _ = file.write_all(&line);
        }
    }

    /// Records a multi-file change in the boundary at `host_root` before its first step.
    pub fn begin(&self, host_root: &Path, steps: &[IntentStep]) -> std::io::Result<Intent> {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let dir = self.dir.join(format!("intent-{n}"));
        std::fs::create_dir_all(&dir)?;
        let mut files = Vec::with_capacity(steps.len());
        for (i, step) in steps.iter().enumerate() {
            let old = match &step.old {
                Some(bytes) => {
                    let name = format!("old-{i}");
                    std::fs::write(dir.join(&name), bytes)?;
                    Some(name)
                }
                None => None,
            };
            files.push(StepFile { path: step.path.to_string(), old, new: step.new.as_ref().map(hex) });
        }
        let record = IntentFile { host_root: host_root.to_path_buf(), steps: files };
        // Written last and renamed into place: a record is whole or absent.
        let text = serde_json::to_vec(&record).map_err(std::io::Error::other)?;
        std::fs::write(dir.join("intent.json.part"), text)?;
        std::fs::rename(dir.join("intent.json.part"), dir.join("intent.json"))?;
        Ok(Intent { dir })
    }
}

/// What recovery did, in sentences for the log.
pub type Report = Vec<String>;

/// Cleans up after processes that are gone, whose folders are in `root`
/// (`DATA/inflight`): removes their temporary files, and rolls back their
/// unfinished changes in the boundary at `host_root` through `fs`.
pub fn recover(root: &Path, host_root: &Path, fs: &dyn super::Fs) -> Report {
    let mut report = Vec::new();
    let Ok(entries) = std::fs::read_dir(root) else { return report };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if alive(&name) {
            continue;
        }
        let folder = entry.path();
        let pid: Option<u32> = name.split('-').next().and_then(|p| p.parse().ok());
        remove_temps(&folder, pid, &mut report);
        let mut left = false;
        if let Ok(intents) = std::fs::read_dir(&folder) {
            for intent in intents.flatten().filter(|i| i.file_name().to_string_lossy().starts_with("intent-")) {
                match roll_back(&intent.path(), host_root, fs, &mut report) {
                    Some(()) => {
                        let _ = std::fs::remove_dir_all(intent.path());
                    }
                    None => left = true,
                }
            }
        }
        if !left {
            let _ = std::fs::remove_dir_all(&folder);
        }
    }
    report
}

/// Removes the temporary files a gone process listed, when they are still
/// there under the name it gave them.
fn remove_temps(folder: &Path, pid: Option<u32>, report: &mut Report) {
    let Ok(list) = std::fs::read(folder.join("temps")) else { return };
    let mut removed = 0;
    for line in list.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let path = PathBuf::from(os_string(line));
        let ours = path.file_name().and_then(|n| n.to_str()).and_then(super::os::is_temp_name);
        let is_file = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file());
        if ours.is_some() && ours == pid && is_file && std::fs::remove_file(&path).is_ok() {
            removed += 1;
        }
    }
    if removed > 0 {
        report.push(format!("removed {removed} temporary file(s) a stopped ctxfs process left"));
    }
    let _ = std::fs::remove_file(folder.join("temps"));
}

fn os_string(bytes: &[u8]) -> std::ffi::OsString {
    use std::os::unix::ffi::OsStringExt;
    std::ffi::OsString::from_vec(bytes.to_vec())
}

/// Rolls back one unfinished change when it is in this boundary; `None`
/// when it belongs to another (left for that boundary's next start).
fn roll_back(dir: &Path, host_root: &Path, fs: &dyn super::Fs, report: &mut Report) -> Option<()> {
    let Ok(text) = std::fs::read(dir.join("intent.json")) else {
        // Cut short before its record was whole: no step was taken yet.
        return Some(());
    };
    let Ok(record) = serde_json::from_slice::<IntentFile>(&text) else { return Some(()) };
    if record.host_root != host_root {
        return None;
    }
    let mut restored = Vec::new();
    let mut kept = Vec::new();
    for step in &record.steps {
        let Ok(path) = VPath::parse(&step.path) else { continue };
        let old = match &step.old {
            Some(name) => match std::fs::read(dir.join(name)) {
                Ok(bytes) => Some(bytes),
                Err(_) => continue,
            },
            None => None,
        };
        let current = fs.read_file(&path, u64::MAX).ok();
        let current_sha = current.as_deref().map(sha256);
        let new = step.new.as_deref();
        let is_new = match (new, current_sha) {
            (Some(new), Some(sha)) => hex(&sha) == new,
            (None, None) => true,
            _ => false,
        };
        let is_old = match (&old, current_sha) {
            (Some(old), Some(sha)) => sha256(old) == sha,
            (None, None) => true,
            _ => false,
        };
        if is_old {
            continue;
        }
        if !is_new {
            // Changed by someone else since: theirs stands.
            kept.push(step.path.clone());
            continue;
        }
        let done = match (&old, current_sha) {
            (Some(old), Some(sha)) => fs.write_file_if(&path, old, super::Expect::Content(sha)).is_ok(),
            (Some(old), None) => fs.write_file_if(&path, old, super::Expect::Absent).is_ok(),
            (None, Some(_)) => fs.trash(&path).is_ok(),
            (None, None) => true,
        };
        if done {
            restored.push(step.path.clone());
        } else {
            kept.push(step.path.clone());
        }
    }
    if !restored.is_empty() {
        report.push(format!("rolled back an unfinished change of a stopped ctxfs process: {}", restored.join(", ")));
    }
    if !kept.is_empty() {
        report.push(format!("left as they are (changed since): {}", kept.join(", ")));
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_is_told_from_a_later_one_with_its_id() {
        let pid = std::process::id();
        let start = start_time(pid).unwrap();
        assert!(alive(&format!("{pid}-{start}")));
        assert!(!alive(&format!("{pid}-{}", start + 1)));
        assert!(!alive("not-a-folder"));
    }
}
