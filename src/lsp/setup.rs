//! From `initialize` to an engine: the boundary, the view and the options.
//!
//! What decides the posture, first that applies:
//! 1. `initializationOptions`: `tree` + `view`, or `root`;
//! 2. the `ctxfs lsp` command line: `--tree` + `--view`, or `--root`;
//! 3. the workspace folders: one folder is a device posture on it; several
//!    are one grant each (writable) over their common ancestor, which itself
//!    stays hidden.
//!
//! With an explicit posture (1 or 2), workspace folders inside its boundary
//! narrow the sessions to them, as an MCP client's roots do.
//! Relative paths in the options are taken from the first workspace folder.

use super::protocol::{HostName, InitializationOptions};
use crate::engine::{Config, Defaults, Engine, Posture};
use crate::gate::Mode;
use crate::hygiene::HostKind;
use crate::index::EmbedderChoice;
use crate::vfs::overlay::{Documents, Overlay};
use crate::vfs::Fs;
use anyhow::{bail, Context};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The mode sessions start in: `initializationOptions`, else the command line, else ask.
pub fn mode_of(defaults: &Defaults, options: &InitializationOptions) -> Mode {
    options.mode.map(Mode::from).or(defaults.mode).unwrap_or(Mode::Ask)
}

/// The approval timeout `initializationOptions` gives, checked.
pub fn approval_timeout(options: &InitializationOptions) -> Result<Option<Duration>, String> {
    match options.approval_timeout {
        None => Ok(None),
        Some(s) if s.is_finite() && s > 0.0 && s < 1e9 => Ok(Some(Duration::from_secs_f64(s))),
        Some(s) => Err(format!("approvalTimeout: {s} is not a number of seconds above 0")),
    }
}

/// The embedder and server model in force: `initializationOptions`' (the
/// embedder checked), else the command line's; `None` leaves the choice to
/// config.json, else the static table (`Engine::choose_embedder`).
pub fn embedder_of(
    defaults: &Defaults,
    options: &InitializationOptions,
) -> Result<(Option<EmbedderChoice>, Option<String>), String> {
    let embedder = match &options.embedder {
        Some(text) => Some(text.parse::<EmbedderChoice>().map_err(|e| format!("embedder: {e}"))?),
        None => defaults.embedder.clone(),
    };
    Ok((embedder, options.embedder_model.clone().or_else(|| defaults.embedder_model.clone())))
}

/// An engine ready to serve, and how to open its sessions.
pub struct Built {
    pub engine: Arc<Engine>,
    /// Host directories to narrow sessions to (workspace folders under an explicit posture).
    pub roots: Option<Vec<PathBuf>>,
    /// A sentence for the log: what is served.
    pub describe: String,
}

pub fn build(
    defaults: &Defaults,
    options: &InitializationOptions,
    folders: &[PathBuf],
    docs: &Arc<Documents>,
) -> anyhow::Result<Built> {
    let base = folders.first().cloned().or_else(|| std::env::current_dir().ok()).unwrap_or_else(|| PathBuf::from("/"));
    let absolute = |p: &PathBuf| if p.is_absolute() { p.clone() } else { base.join(p) };
    let (embedder, embedder_model) =
        embedder_of(defaults, options).map_err(anyhow::Error::msg).context("initializationOptions")?;
    let approval_timeout = approval_timeout(options)
        .map_err(anyhow::Error::msg)
        .context("initializationOptions")?
        .or(defaults.approval_timeout)
        .unwrap_or(crate::gate::DEFAULT_TIMEOUT);
    let from_options = posture(
        options.tree.as_ref().map(absolute),
        options.view.as_ref().map(absolute),
        options.root.as_ref().map(absolute),
    )
    .context("initializationOptions")?;
    let explicit = match from_options {
        Some(p) => Some(p),
        None => {
            posture(defaults.tree.clone(), defaults.view.clone(), defaults.root.clone()).context("the command line")?
        }
    };
    // Under an explicit posture, workspace folders inside its boundary narrow the sessions.
    let narrow_to = |host_root: &std::path::Path| {
        let inside: Vec<PathBuf> =
            folders.iter().filter_map(|f| f.canonicalize().ok()).filter(|f| f.starts_with(host_root)).collect();
        (!inside.is_empty() && !inside.iter().any(|f| f == host_root)).then_some(inside)
    };
    let (posture, describe) = match explicit {
        Some(posture) => {
            let describe = match &posture {
                Posture::Tree { dir, view } => format!("the tree {} with the view {}", dir.display(), view.display()),
                Posture::Device { root } => format!("the project root {}", root.display()),
                Posture::Folders { .. } => unreachable!("options and flags name a tree or a root"),
            };
            (posture, describe)
        }
        None if folders.is_empty() => bail!(
            "no workspace folder, and no posture given: open a folder, or give `root` (or `tree` and `view`) in initializationOptions"
        ),
        None => {
            let names: Vec<String> = folders.iter().map(|f| f.display().to_string()).collect();
            let describe = match names.as_slice() {
                [one] => format!("the workspace folder {one}"),
                several => format!("the workspace folders {}", several.join(", ")),
            };
            (Posture::Folders { folders: folders.to_vec() }, describe)
        }
    };
    let explicit = !matches!(posture, Posture::Folders { .. });
    let defaults_config = Config::new(posture);
    let config = Config {
        start: options.start.clone().or_else(|| defaults.start.clone()),
        data_dir: options.data.as_ref().map(absolute).or_else(|| defaults.data.clone()),
        mode: mode_of(defaults, options),
        approval_timeout,
        host: match options.host {
            Some(HostName::Resend) => HostKind::Resend,
            Some(HostName::Fresh) => HostKind::Fresh,
            None => defaults.host.unwrap_or(HostKind::Resend),
        },
        user_dir: options
            .config
            .as_ref()
            .map(absolute)
            .or_else(|| defaults.config.clone())
            .or(defaults_config.user_dir.clone()),
        embedder,
        embedder_model,
        ..defaults_config
    };
    let docs = docs.clone();
    let mut boundary = PathBuf::new();
    let engine = Engine::new_layered(config, |fs, host_root| {
        boundary = host_root.to_path_buf();
        Arc::new(Overlay::new(fs, docs, host_root.to_path_buf())) as Arc<dyn Fs>
    })?;
    let roots = if explicit { narrow_to(&boundary) } else { None };
    Ok(Built { engine: Arc::new(engine), roots, describe })
}

fn posture(tree: Option<PathBuf>, view: Option<PathBuf>, root: Option<PathBuf>) -> anyhow::Result<Option<Posture>> {
    match (tree, view, root) {
        (None, None, None) => Ok(None),
        (Some(dir), Some(view), None) => Ok(Some(Posture::Tree { dir, view })),
        (None, None, Some(root)) => Ok(Some(Posture::Device { root })),
        (Some(_), None, None) => bail!("`tree` needs `view`"),
        (None, Some(_), None) => bail!("`view` needs `tree`"),
        _ => bail!("give either `tree` and `view`, or `root`, not both"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn several_folders_are_several_grants() {
        let tmp = tempfile::tempdir().unwrap();
        let a = tmp.path().join("a");
        let b = tmp.path().join("b");
        let hidden = tmp.path().join("hidden");
        for d in [&a, &b, &hidden] {
            std::fs::create_dir(d).unwrap();
        }
        std::fs::write(a.join("x.txt"), "in a\n").unwrap();
        std::fs::write(b.join("y.txt"), "in b\n").unwrap();
        std::fs::write(hidden.join("z.txt"), "secret\n").unwrap();
        let data = tempfile::tempdir().unwrap();
        let options = InitializationOptions { data: Some(data.path().to_path_buf()), ..Default::default() };
        let built = build(&Defaults::default(), &options, &[a.clone(), b.clone()], &Documents::new()).unwrap();
        let session = built.engine.open_session(Default::default()).unwrap();
        let read = |p: &Path| session.call("read", serde_json::json!({"file_path": p.to_str().unwrap()}));
        assert!(!read(&a.join("x.txt")).is_error);
        assert!(!read(&b.join("y.txt")).is_error);
        let denied = read(&hidden.join("z.txt"));
        assert!(denied.is_error && !denied.text.contains("secret"), "{}", denied.text);
        // One folder: the device posture on it.
        let built = build(&Defaults::default(), &options, std::slice::from_ref(&a), &Documents::new()).unwrap();
        let session = built.engine.open_session(Default::default()).unwrap();
        assert!(!session.call("read", serde_json::json!({"file_path": "x.txt"})).is_error);
        // A data directory inside a folder, or between the folders under their
        // common ancestor, is hidden from the sessions as under any boundary.
        for data in [a.join("data"), tmp.path().join("store")] {
            let options = InitializationOptions { data: Some(data.clone()), ..Default::default() };
            let built = build(&Defaults::default(), &options, &[a.clone(), b.clone()], &Documents::new()).unwrap();
            let session = built.engine.open_session(Default::default()).unwrap();
            assert!(data.join("sessions.db").exists(), "{}", data.display());
            let parent = data.parent().unwrap().to_str().unwrap();
            let listed = session.call("list", serde_json::json!({"path": parent}));
            let name = data.file_name().unwrap().to_str().unwrap();
            assert!(!listed.text.contains(name), "{}", listed.text);
            let inside =
                session.call("read", serde_json::json!({"file_path": data.join("sessions.db").to_str().unwrap()}));
            // As any path there that the session cannot see: missing inside a
            // folder, not open beside the folders.
            let hidden_file = data.parent().unwrap().join("nothing-here");
            let missing = session.call("read", serde_json::json!({"file_path": hidden_file.to_str().unwrap()}));
            assert!(inside.is_error, "{}", inside.text);
            let kind = |text: &str| text.lines().nth(1).and_then(|l| l.split(':').next()).map(str::to_string);
            assert!(kind(&inside.text).is_some_and(|k| k == "Access denied" || k == "No such file or directory"));
            assert_eq!(kind(&inside.text), kind(&missing.text), "{} / {}", inside.text, missing.text);
        }
        // No folder and no posture: a sentence saying what to do.
        let error = build(&Defaults::default(), &options, &[], &Documents::new()).err().unwrap();
        assert!(error.to_string().contains("no workspace folder"), "{error}");
    }

    #[test]
    fn the_embedder_comes_from_the_command_line_then_config_json() {
        let tmp = tempfile::tempdir().unwrap();
        let (folder, config) = (tmp.path().join("a"), tmp.path().join("config"));
        std::fs::create_dir(&folder).unwrap();
        std::fs::create_dir(&config).unwrap();
        std::fs::write(config.join("config.json"), r#"{"embedder": "minilm"}"#).unwrap();
        let data = tempfile::tempdir().unwrap();
        let options =
            InitializationOptions { data: Some(data.path().to_path_buf()), config: Some(config), ..Default::default() };
        let embedder = |defaults: &Defaults| {
            build(defaults, &options, std::slice::from_ref(&folder), &Documents::new())
                .unwrap()
                .engine
                .embedder()
                .clone()
        };
        assert_eq!(embedder(&Defaults::default()), EmbedderChoice::MiniLm);
        assert_eq!(
            embedder(&Defaults { embedder: Some(EmbedderChoice::None), ..Default::default() }),
            EmbedderChoice::None
        );
    }

    #[test]
    fn the_embedder_in_the_options_wins_over_the_command_line() {
        let tmp = tempfile::tempdir().unwrap();
        let folder = tmp.path().join("a");
        std::fs::create_dir(&folder).unwrap();
        let data = tempfile::tempdir().unwrap();
        let base = InitializationOptions {
            data: Some(data.path().to_path_buf()),
            config: Some(tmp.path().join("no-config")),
            ..Default::default()
        };
        let flags = Defaults {
            embedder: Some(EmbedderChoice::MiniLm),
            embedder_model: Some("flag-model".into()),
            ..Default::default()
        };
        let embedder = |options: &InitializationOptions| {
            build(&flags, options, std::slice::from_ref(&folder), &Documents::new())
                .map(|b| b.engine.embedder().clone())
        };
        assert_eq!(embedder(&base).unwrap(), EmbedderChoice::MiniLm);
        let none = InitializationOptions { embedder: Some("none".into()), ..base.clone() };
        assert_eq!(embedder(&none).unwrap(), EmbedderChoice::None);
        // A server named in the options is asked for the options' model, else the command line's.
        let server = InitializationOptions { embedder: Some("http://127.0.0.1:8080/v1".into()), ..base.clone() };
        let asked =
            |model: &str| EmbedderChoice::Http { url: "http://127.0.0.1:8080/v1".into(), model: Some(model.into()) };
        assert_eq!(embedder(&server).unwrap(), asked("flag-model"));
        let with_model = InitializationOptions { embedder_model: Some("nomic".into()), ..server.clone() };
        assert_eq!(embedder(&with_model).unwrap(), asked("nomic"));
        // Not an embedder: initialize fails with a sentence (the LSP door answers -32602).
        let bad = InitializationOptions { embedder: Some("huge".into()), ..base.clone() };
        let error = embedder(&bad).err().unwrap();
        assert!(format!("{error:#}").contains("embedder: \"huge\" is not an embedder"), "{error:#}");
        assert!(embedder_of(&flags, &bad).is_err());
    }

    #[test]
    fn the_mode_comes_from_the_options_then_the_command_line_then_ask() {
        let tmp = tempfile::tempdir().unwrap();
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        std::fs::create_dir(&a).unwrap();
        std::fs::create_dir(&b).unwrap();
        let data = tempfile::tempdir().unwrap();
        let base = InitializationOptions { data: Some(data.path().to_path_buf()), ..Default::default() };
        let mode = |defaults: &Defaults, options: &InitializationOptions, folders: &[PathBuf]| {
            let built = build(defaults, options, folders, &Documents::new()).unwrap();
            built.engine.open_session(Default::default()).unwrap().mode()
        };
        let one = std::slice::from_ref(&a);
        let two = [a.clone(), b.clone()];
        assert_eq!(mode(&Defaults::default(), &base, one), Mode::Ask);
        assert_eq!(mode(&Defaults::default(), &base, &two), Mode::Ask);
        let flags = Defaults { mode: Some(Mode::ReadOnly), ..Default::default() };
        assert_eq!(mode(&flags, &base, one), Mode::ReadOnly);
        let trust = InitializationOptions { mode: Some(super::super::protocol::ModeName::Trust), ..base.clone() };
        assert_eq!(mode(&flags, &trust, one), Mode::Trust);
        assert_eq!(mode(&flags, &trust, &two), Mode::Trust);
        let bad = InitializationOptions { approval_timeout: Some(-1.0), ..base.clone() };
        let error = build(&Defaults::default(), &bad, one, &Documents::new()).err().unwrap();
        assert!(format!("{error:#}").contains("approvalTimeout"), "{error:#}");
    }
}
