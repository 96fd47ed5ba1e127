//! `ctxfs`: the command line. Logs go to stderr (filter: `CTXFS_LOG`, default `warn`).

// The commands that are not servers (sessions, chunk, call, index) answer on stdout.
#![allow(clippy::print_stdout)]

use anyhow::Context;
use clap::{ArgGroup, Args, Parser, Subcommand};
use ctxfs::engine::{Config, Engine, Posture, SessionOptions};
use ctxfs::gate::Mode;
use ctxfs::hygiene::HostKind;
use ctxfs::index::EmbedderChoice;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(name = "ctxfs", version, about = "A confined, context-aware file system for AI coding agents.")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve MCP on stdin/stdout.
    Mcp {
        #[command(flatten)]
        place: PlaceArgs,
        #[command(flatten)]
        start: StartArg,
        #[command(flatten)]
        host: HostArg,
        #[command(flatten)]
        gate: GateArgs,
        #[command(flatten)]
        embed: EmbedArgs,
        /// Go on with the session of this id (results stay recallable and ids go on after a
        /// restart); a new session under that id when the data directory has none. Default: a
        /// new session, whose id the instructions name.
        #[arg(long, value_name = "ID")]
        session: Option<String>,
        #[command(flatten)]
        link: AcpLinkArgs,
    },
    /// Relay the Agent Client Protocol to AGENT (`ctxfs acp [FLAGS] -- AGENT [ARGS…]`), adding
    /// ctxfs as an MCP server to every session, its diffs to the app's tool calls and its
    /// approvals to the app's permission prompts. Without --root or --tree, each session's
    /// working directory is its root. Register it in the app as a custom agent.
    Acp {
        #[command(flatten)]
        defaults: LspArgs,
        /// The agent's command line, after `--`.
        #[arg(last = true, required = true, value_name = "AGENT")]
        agent: Vec<std::ffi::OsString>,
    },
    /// Serve LSP on stdin/stdout (Content-Length framing), for editor extensions.
    /// What the session may see (root, or tree and view) comes from the client's
    /// initializationOptions, else these flags, else the workspace folders (one: its
    /// root; several: one grant each).
    Lsp {
        #[command(flatten)]
        defaults: LspArgs,
        /// Accepted for clients that append it; stdio is the only transport.
        #[arg(long)]
        stdio: bool,
    },
    /// Run one tool call and print its answer (exit 1 when it is an error).
    Call {
        #[command(flatten)]
        place: PlaceArgs,
        #[command(flatten)]
        start: StartArg,
        /// The permission mode: `trust` (the default: you run the call yourself), `accept-edits`,
        /// `read-only`, or `ask` (which refuses every change: nobody can be asked here).
        #[arg(long, value_name = "MODE", value_parser = parse_mode)]
        mode: Option<Mode>,
        #[command(flatten)]
        embed: EmbedArgs,
        /// Run the call in the session of this id (as `mcp --session`), so `recall` finds
        /// the results of earlier calls. Default: a new session.
        #[arg(long, value_name = "ID")]
        session: Option<String>,
        /// The tool's name, such as `read`.
        tool: String,
        /// The arguments, as a JSON object.
        #[arg(default_value = "{}")]
        args: String,
    },
    /// Run a script of tool calls and session events (JSON lines; `-` for stdin),
    /// printing each answer as a JSON line.
    Replay {
        #[command(flatten)]
        place: PlaceArgs,
        #[command(flatten)]
        start: StartArg,
        #[command(flatten)]
        host: HostArg,
        /// The permission mode: `trust` (the default), `accept-edits`, `read-only`, or `ask`
        /// (which refuses every change: nobody can be asked here).
        #[arg(long, value_name = "MODE", value_parser = parse_mode)]
        mode: Option<Mode>,
        #[command(flatten)]
        embed: EmbedArgs,
        /// The script file, or `-` to read steps from stdin as they come.
        script: PathBuf,
    },
    /// Run a scripted session over a temporary workspace and print it.
    Demo,
    /// List or revoke the project's remembered grants ("always allow" answers),
    /// and show the rules files in force.
    Grants {
        #[command(subcommand)]
        action: GrantsAction,
    },
    /// List the sessions kept in a data directory, or prune them by age and size.
    Sessions {
        #[command(subcommand)]
        action: SessionsAction,
    },
    /// Cut a file into search pieces by tokens and print each as a JSON line
    /// (`start`, `end`, `first_line`, `last_line`, `tokens`, `text`), for debugging and tests.
    Chunk {
        /// How tokens are counted: `search` (the default: what search counts with the default
        /// embedder, its model's tokenizer, or `bytes` when none is installed), `model` (the
        /// installed embedder's tokenizer), `whitespace` (a run of non-whitespace), `bytes`
        /// (ceil(UTF-8 bytes / 2)) or `chars` (one per character).
        #[arg(long, value_enum, default_value = "search")]
        tokenizer: ChunkTokenizer,
        /// The most tokens in a piece.
        #[arg(long, value_name = "N", default_value_t = ctxfs::index::chunk::SIZE)]
        size: usize,
        /// How many tokens a piece repeats from the one before it.
        #[arg(long, value_name = "N", default_value_t = ctxfs::index::chunk::OVERLAP)]
        overlap: usize,
        /// Where to look for the embedder's table (`models/` under it), for `--tokenizer search`
        /// and `model`. Default: the platform's data directory.
        #[arg(long, value_name = "DIR")]
        data: Option<PathBuf>,
        /// The file to cut (UTF-8 text).
        file: PathBuf,
    },
    /// Build or refresh the search index of everything visible under a directory:
    /// a progress line on stderr, a summary line on stdout.
    Index {
        #[command(flatten)]
        place: PlaceArgs,
        #[command(flatten)]
        start: StartArg,
        #[command(flatten)]
        embed: EmbedArgs,
        /// The directory to index, written as the session writes paths (see --start).
        /// Default: the start directory.
        #[arg(long, value_name = "PATH")]
        path: Option<String>,
    },
}

/// What the session may see: exactly one of `--root DIR` and `--tree DIR --view VIEW.json`;
/// where ctxfs keeps its data, and the user's config directory.
#[derive(Args, Debug, Clone)]
#[command(group(ArgGroup::new("place").required(true).multiple(false).args(["tree", "root"])))]
struct PlaceArgs {
    /// A directory shown to the session as `/`, with what it may see and change from `--view`.
    #[arg(long, value_name = "DIR", requires = "view")]
    tree: Option<PathBuf>,
    /// The view file for `--tree`: which paths the session may read, change or not see.
    #[arg(long, value_name = "VIEW.json", requires = "tree")]
    view: Option<PathBuf>,
    /// The project directory: the session sees and may change everything under it, by its
    /// real paths, and nothing outside it.
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// Where sessions, results, the search index and the trash live. Default: the platform's data
    /// directory.
    #[arg(long, value_name = "DIR")]
    data: Option<PathBuf>,
    /// The user's config directory (global AGENTS.md, skills/, config.json, rules.json).
    /// Default: the platform's config directory.
    #[arg(long, value_name = "DIR")]
    config: Option<PathBuf>,
}

/// Where relative paths start.
#[derive(Args, Debug, Clone)]
struct StartArg {
    /// The start directory, where relative paths begin, written as the session writes paths:
    /// a real path under --root, or a path from the tree's `/` with --tree. Default: the root.
    #[arg(long, value_name = "PATH")]
    start: Option<String>,
}

/// What the client's requests carry (it decides whether a stub may point at an earlier result).
#[derive(Args, Debug, Clone)]
struct HostArg {
    /// What the client's next request carries: `resend` (every earlier result, as agent
    /// CLIs do; stubs may point at earlier results) or `fresh` (none; no stubs).
    #[arg(long, value_name = "KIND", default_value = "resend", value_parser = parse_host)]
    host: HostKind,
}

/// How changes are approved, for a server that can ask someone.
#[derive(Args, Debug, Clone)]
struct GateArgs {
    /// The permission mode: `read-only` (nothing changes), `ask` (the default: every change asks
    /// the user unless a rule or grant covers it), `accept-edits` (changes run; removing or
    /// moving outside the start directory asks) or `trust` (no prompts).
    #[arg(long, value_name = "MODE", value_parser = parse_mode)]
    mode: Option<Mode>,
    /// How long an approval prompt waits for the user before the change is refused.
    #[arg(long, value_name = "SECONDS", default_value = "120", value_parser = parse_seconds)]
    approval_timeout: Duration,
}

/// What search ranks meaning with.
#[derive(Args, Debug, Clone)]
struct EmbedArgs {
    /// The embedder search ranks meaning with: `static` (a table distilled from all-MiniLM-L6-v2:
    /// fast), `minilm` (the full transformer: the model's own vectors, much slower indexing), `none` (words
    /// only) or `http://HOST:PORT[/path]` (a llama.cpp or OpenAI-compatible server you run; an API
    /// key, if needed, from CTXFS_EMBEDDER_KEY). Default: "embedder" in config.json, else static.
    #[arg(long, value_name = "NAME|URL", value_parser = parse_embedder)]
    embedder: Option<EmbedderChoice>,
    /// The model to ask an embedding server for (OpenAI-compatible servers need one).
    /// Default: "embedder_model" in config.json.
    #[arg(long, value_name = "NAME")]
    embedder_model: Option<String>,
}

/// The link from a `ctxfs mcp` that `ctxfs acp` injected back to the relay (set by the relay).
#[derive(Args, Debug, Clone)]
struct AcpLinkArgs {
    #[arg(long, hide = true, requires = "acp_token")]
    acp_link: Option<PathBuf>,
    #[arg(long, hide = true, requires = "acp_link")]
    acp_token: Option<String>,
}

#[derive(Subcommand, Debug)]
enum SessionsAction {
    /// Each session: its id, when it was created and last used, its results and their size.
    List {
        /// The data directory. Default: the platform's.
        #[arg(long, value_name = "DIR")]
        data: Option<PathBuf>,
    },
    /// Remove sessions unused for longer than DAYS, then the ones used longest ago while all
    /// stored results take more than MEGABYTES (never one used within the last hour).
    /// Defaults: "retention" in config.json, else 30 days and 1024 MB.
    Prune {
        /// The data directory. Default: the platform's.
        #[arg(long, value_name = "DIR")]
        data: Option<PathBuf>,
        #[arg(long, value_name = "DAYS")]
        days: Option<u64>,
        #[arg(long, value_name = "MEGABYTES")]
        megabytes: Option<u64>,
        /// Say what would be removed, and remove nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(Subcommand, Debug)]
enum GrantsAction {
    /// List the remembered grants and the rules files in force.
    List {
        #[command(flatten)]
        place: PlaceArgs,
    },
    /// Revoke the remembered grant of TARGET (such as `notes/*`), or all of them.
    Revoke {
        #[command(flatten)]
        place: PlaceArgs,
        /// The grant's target, as `list` shows it. Without it, every grant of the project.
        target: Option<String>,
    },
}

fn parse_mode(text: &str) -> Result<Mode, String> {
    text.parse()
}

fn parse_seconds(text: &str) -> Result<Duration, String> {
    match text.parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 && s < 1e9 => Ok(Duration::from_secs_f64(s)),
        _ => Err(format!("{text:?} is not a number of seconds above 0")),
    }
}

fn parse_embedder(text: &str) -> Result<EmbedderChoice, String> {
    text.parse()
}

fn parse_host(text: &str) -> Result<HostKind, String> {
    match text {
        "resend" => Ok(HostKind::Resend),
        "fresh" => Ok(HostKind::Fresh),
        other => Err(format!("{other:?} is not a host kind; use resend or fresh")),
    }
}

/// What an engine is built with, besides where it looks: each command gives what it has flags for.
#[derive(Default)]
struct EngineFlags<'a> {
    start: Option<&'a StartArg>,
    host: Option<&'a HostArg>,
    mode: Option<Mode>,
    approval_timeout: Option<Duration>,
    embed: Option<&'a EmbedArgs>,
    /// The process answers one call and ends (`Config::one_off`).
    one_off: bool,
}

impl PlaceArgs {
    /// The engine's configuration: where it looks from these flags, the rest
    /// from the command's own (`flags`), else the defaults; sessions start in
    /// `flags.mode`, else in `default_mode`.
    fn config(&self, flags: EngineFlags<'_>, default_mode: Mode) -> anyhow::Result<Config> {
        let absolute = |p: &PathBuf| std::path::absolute(p).with_context(|| format!("bad path {}", p.display()));
        let posture = match (&self.tree, &self.view, &self.root) {
            (Some(dir), Some(view), None) => Posture::Tree { dir: absolute(dir)?, view: absolute(view)? },
            (None, None, Some(root)) => Posture::Device { root: absolute(root)? },
            // clap enforces the combinations; this is a guard, not a path users reach.
            _ => anyhow::bail!("give either --tree DIR --view VIEW.json, or --root DIR"),
        };
        let defaults = Config::new(posture);
        let (embedder, embedder_model) =
            flags.embed.map(|e| (e.embedder.clone(), e.embedder_model.clone())).unwrap_or_default();
        Ok(Config {
            start: flags.start.and_then(|s| s.start.clone()),
            data_dir: self.data.as_ref().map(absolute).transpose()?,
            mode: flags.mode.unwrap_or(default_mode),
            approval_timeout: flags.approval_timeout.unwrap_or(defaults.approval_timeout),
            host: flags.host.map_or(defaults.host, |h| h.host),
            user_dir: match &self.config {
                Some(dir) => Some(absolute(dir)?),
                None => defaults.user_dir.clone(),
            },
            embedder,
            embedder_model,
            one_off: flags.one_off,
            ..defaults
        })
    }

    /// The engine, its sessions in the mode given, else in `default_mode`.
    fn engine(&self, flags: EngineFlags<'_>, default_mode: Mode) -> anyhow::Result<Engine> {
        Engine::new(self.config(flags, default_mode)?)
    }
}

/// `ctxfs lsp`'s flags: those of `ctxfs mcp`, all optional (defaults under
/// the client's initializationOptions).
#[derive(Args, Debug, Clone)]
struct LspArgs {
    /// A directory shown to the session as `/`, with what it may see and change from `--view`.
    #[arg(long, value_name = "DIR", requires = "view", conflicts_with = "root")]
    tree: Option<PathBuf>,
    /// The view file for `--tree`: which paths the session may read, change or not see.
    #[arg(long, value_name = "VIEW.json", requires = "tree")]
    view: Option<PathBuf>,
    /// The project directory: the session sees and may change everything under it, by its
    /// real paths, and nothing outside it.
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// The start directory, where relative paths begin, written as the session writes paths:
    /// a real path under --root, or a path from the tree's `/` with --tree. Default: the root.
    #[arg(long, value_name = "PATH")]
    start: Option<String>,
    /// Where sessions, results, the search index and the trash live. Default: the platform's data
    /// directory.
    #[arg(long, value_name = "DIR")]
    data: Option<PathBuf>,
    /// What the client's next request carries: `resend` or `fresh` (see `ctxfs mcp --help`).
    #[arg(long, value_name = "KIND", value_parser = parse_host)]
    host: Option<HostKind>,
    /// The user's config directory (global AGENTS.md, skills/, config.json, rules.json).
    /// Default: the platform's config directory.
    #[arg(long, value_name = "DIR")]
    config: Option<PathBuf>,
    /// The permission mode: `read-only`, `ask` (each change asks the user in the editor
    /// unless a rule or grant covers it), `accept-edits` or `trust` (see `ctxfs mcp --help`).
    /// Default: ask.
    #[arg(long, value_name = "MODE", value_parser = parse_mode)]
    mode: Option<Mode>,
    /// How long an approval prompt waits for the user before the change is refused.
    /// Default: 120.
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
    approval_timeout: Option<Duration>,
    /// The embedder search ranks meaning with: `static` (a table distilled from all-MiniLM-L6-v2:
    /// fast), `minilm` (the full transformer: the model's own vectors, much slower indexing), `none` (words
    /// only) or `http://HOST:PORT[/path]` (a llama.cpp or OpenAI-compatible server you run; an API
    /// key, if needed, from CTXFS_EMBEDDER_KEY). Default: "embedder" in config.json, else static.
    #[arg(long, value_name = "NAME|URL", value_parser = parse_embedder)]
    embedder: Option<EmbedderChoice>,
    /// The model to ask an embedding server for (OpenAI-compatible servers need one).
    /// Default: "embedder_model" in config.json.
    #[arg(long, value_name = "NAME")]
    embedder_model: Option<String>,
}

impl LspArgs {
    fn defaults(&self) -> anyhow::Result<ctxfs::engine::Defaults> {
        let absolute = |p: &PathBuf| std::path::absolute(p).with_context(|| format!("bad path {}", p.display()));
        Ok(ctxfs::engine::Defaults {
            tree: self.tree.as_ref().map(absolute).transpose()?,
            view: self.view.as_ref().map(absolute).transpose()?,
            root: self.root.as_ref().map(absolute).transpose()?,
            start: self.start.clone(),
            data: self.data.as_ref().map(absolute).transpose()?,
            host: self.host,
            config: self.config.as_ref().map(absolute).transpose()?,
            mode: self.mode,
            approval_timeout: self.approval_timeout,
            embedder: self.embedder.clone(),
            embedder_model: self.embedder_model.clone(),
        })
    }
}

fn init_logging() {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_env("CTXFS_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ctxfs: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Started by hand in a terminal, a server says what it waits for (on stderr: stdout is the protocol).
fn waiting_note(command: &str, client: &str) {
    use std::io::IsTerminal;
    if std::io::stdin().is_terminal() {
        eprintln!(
            "{command}: waiting for {client} on stdin. It is a server: a client starts it and speaks to it \
             (the README shows the configurations). Ctrl-D or Ctrl-C ends it."
        );
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Mcp { place, start, host, gate, embed, session, link } => {
            let flags = EngineFlags {
                start: Some(&start),
                host: Some(&host),
                mode: gate.mode,
                approval_timeout: Some(gate.approval_timeout),
                embed: Some(&embed),
                one_off: false,
            };
            let engine = Arc::new(place.engine(flags, Mode::Ask)?);
            waiting_note("ctxfs mcp", "an MCP client (an agent or editor)");
            // One thread for the protocol: calls run one at a time in the
            // blocking pool anyway, and a second worker only costs wake-ups.
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            let served = match (link.acp_link, link.acp_token) {
                (Some(socket), Some(token)) => {
                    runtime.block_on(ctxfs::acp::link::serve(engine, socket, token, session))
                }
                _ => runtime.block_on(ctxfs::mcp::serve_stdio(engine, session)),
            };
            // A call still running when the client left gets a moment to finish.
            runtime.shutdown_timeout(Duration::from_secs(10));
            served?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Lsp { defaults, stdio: _ } => {
            let defaults = defaults.defaults()?;
            waiting_note("ctxfs lsp", "an editor's LSP client");
            let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
            let served = runtime.block_on(ctxfs::lsp::serve_stdio(defaults));
            // After `exit` nothing more is answered; stdin's reader may still be
            // blocked in a read, and session threads hold nothing unsaved.
            runtime.shutdown_background();
            served?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Acp { defaults, agent } => {
            let options = ctxfs::acp::Options { defaults: defaults.defaults()?, agent };
            let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
            let healthy = runtime.block_on(ctxfs::acp::run(options));
            // The app's stdin reader may still be blocked in a read.
            runtime.shutdown_background();
            Ok(if healthy? { ExitCode::SUCCESS } else { ExitCode::from(1) })
        }
        Command::Call { place, start, mode, embed, session, tool, args } => {
            let args: serde_json::Value = serde_json::from_str(&args)
                .context("the arguments must be a JSON object, such as '{\"file_path\": \"a.txt\"}'")?;
            let flags =
                EngineFlags { start: Some(&start), mode, embed: Some(&embed), one_off: true, ..EngineFlags::default() };
            let engine = place.engine(flags, Mode::Trust)?;
            let options =
                SessionOptions { client_name: Some("ctxfs-cli".into()), resume: session, ..Default::default() };
            let session = engine.open_session(options)?;
            let answer = session.call(&tool, args);
            if answer.text.ends_with('\n') {
                print!("{}", answer.text);
            } else {
                println!("{}", answer.text);
            }
            Ok(if answer.is_error { ExitCode::from(1) } else { ExitCode::SUCCESS })
        }
        Command::Replay { place, start, host, mode, embed, script } => {
            let flags = EngineFlags {
                start: Some(&start),
                host: Some(&host),
                mode,
                embed: Some(&embed),
                ..EngineFlags::default()
            };
            let engine = place.engine(flags, Mode::Trust)?;
            let stdout = std::io::stdout().lock();
            let all_known = if script.as_os_str() == "-" {
                ctxfs::cli::replay::run(&engine, std::io::stdin().lock(), stdout)?
            } else {
                let file = std::fs::File::open(&script).with_context(|| format!("cannot open {}", script.display()))?;
                ctxfs::cli::replay::run(&engine, std::io::BufReader::new(file), stdout)?
            };
            if !all_known {
                eprintln!("ctxfs replay: some lines were not steps it knows (their answers say which)");
            }
            Ok(if all_known { ExitCode::SUCCESS } else { ExitCode::from(1) })
        }
        Command::Demo => {
            ctxfs::cli::demo::run(std::io::stdout().lock())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Grants { action } => {
            let (place, target) = match &action {
                GrantsAction::List { place } => (place, None),
                GrantsAction::Revoke { place, target } => (place, Some(target.as_deref())),
            };
            let engine = place.engine(EngineFlags::default(), Mode::Ask)?;
            let (text, ok) = ctxfs::gate::cli::grants(&engine.project(), target);
            print!("{text}");
            Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
        }
        Command::Sessions { action } => sessions_command(action),
        Command::Chunk { tokenizer, size, overlap, data, file } => {
            chunk_file(tokenizer, size, overlap, data, &file)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Index { place, start, embed, path } => index_tree(&place, &start, &embed, path.as_deref()),
    }
}

/// `ctxfs sessions list|prune`.
fn sessions_command(action: SessionsAction) -> anyhow::Result<ExitCode> {
    use ctxfs::hygiene::store;
    let data_of = |data: Option<PathBuf>| -> anyhow::Result<PathBuf> {
        Ok(match data {
            Some(dir) => std::path::absolute(dir)?,
            None => ctxfs::engine::default_data_dir(),
        })
    };
    let day = |secs: i64| {
        let days = secs / 86_400;
        // Civil date from days since the epoch (proleptic Gregorian).
        let (z, era_days) = (days + 719_468, 146_097);
        let era = z.div_euclid(era_days);
        let doe = z - era * era_days;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let d = doy - (153 * mp + 2) / 5 + 1;
        let m = if mp < 10 { mp + 3 } else { mp - 9 };
        let y = yoe + era * 400 + i64::from(m <= 2);
        format!("{y:04}-{m:02}-{d:02}")
    };
    match action {
        SessionsAction::List { data } => {
            let db = data_of(data)?.join("sessions.db");
            let listed = store::sessions(&db)?;
            if listed.is_empty() {
                println!("No sessions in {}.", db.display());
                return Ok(ExitCode::SUCCESS);
            }
            println!("{:<28} {:<10} {:<10} {:>8} {:>10}", "session", "created", "used", "results", "stored");
            for s in listed {
                let size = format!("{:.1} MB", s.bytes as f64 / 1_048_576.0);
                println!("{:<28} {:<10} {:<10} {:>8} {:>10}", s.id, day(s.created), day(s.used), s.results, size);
            }
            Ok(ExitCode::SUCCESS)
        }
        SessionsAction::Prune { data, days, megabytes, dry_run } => {
            let db = data_of(data)?.join("sessions.db");
            let configured = ctxfs::instructions::UserConfig::platform().retention();
            let retention = store::Retention::or_default(days.or(configured.days), megabytes.or(configured.megabytes));
            let pruned = store::prune(&db, retention, dry_run)?;
            let verb = if dry_run { "Would remove" } else { "Removed" };
            println!(
                "{verb} {} session(s), {:.1} MB (keeping {} days, at most {} MB).",
                pruned.sessions.len(),
                pruned.bytes as f64 / 1_048_576.0,
                retention.days,
                retention.megabytes
            );
            for id in pruned.sessions {
                println!("  {id}");
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The tokenizers `ctxfs chunk` can count with.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum ChunkTokenizer {
    Search,
    Whitespace,
    Bytes,
    Chars,
    Model,
}

/// `ctxfs chunk`: the pieces of one file as JSON lines.
fn chunk_file(
    kind: ChunkTokenizer,
    size: usize,
    overlap: usize,
    data: Option<PathBuf>,
    file: &std::path::Path,
) -> anyhow::Result<()> {
    use ctxfs::index::chunk::{chunk, Characters, HalfBytes, Tokenizer, Whitespace};
    use std::io::Write;
    let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    let text = String::from_utf8(bytes).map_err(|_| anyhow::anyhow!("{} is not UTF-8 text", file.display()))?;
    let tokenizer: Box<dyn Tokenizer> = match kind {
        ChunkTokenizer::Search => {
            // As search counts with the default embedder (the static table's tokenizer, or bytes without it).
            let data = data.unwrap_or_else(ctxfs::engine::default_data_dir);
            Box::new(ctxfs::index::default_models(&data).1)
        }
        ChunkTokenizer::Whitespace => Box::new(Whitespace),
        ChunkTokenizer::Bytes => Box::new(HalfBytes),
        ChunkTokenizer::Chars => Box::new(Characters),
        ChunkTokenizer::Model => {
            let data = data.unwrap_or_else(ctxfs::engine::default_data_dir);
            match ctxfs::index::models::model_tokenizer(&data) {
                Some(model) => Box::new(model),
                None => {
                    anyhow::bail!("the model tokenizer is not installed; use --tokenizer bytes, whitespace or chars")
                }
            }
        }
    };
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for piece in chunk(&text, tokenizer.as_ref(), size, overlap) {
        // One JSON object a line; its keys are the command's output format (chunking.md).
        let ctxfs::index::chunk::Piece { start, end, first_line, last_line, tokens, text } = piece;
        let line = serde_json::json!({"start": start, "end": end, "first_line": first_line,
            "last_line": last_line, "tokens": tokens, "text": text});
        serde_json::to_writer(&mut out, &line)?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(())
}

/// `ctxfs index`: builds or refreshes the search index of everything the
/// session may see under `path`, as a search there would, with a progress line.
fn index_tree(place: &PlaceArgs, start: &StartArg, embed: &EmbedArgs, path: Option<&str>) -> anyhow::Result<ExitCode> {
    let flags = EngineFlags { start: Some(start), embed: Some(embed), ..EngineFlags::default() };
    let engine = place.engine(flags, Mode::Trust)?;
    let line = std::cell::OnceCell::<ProgressLine>::new();
    let built = engine.build_index(
        path,
        |total| {
            let _ = line.set(ProgressLine::new(total));
        },
        &|p| {
            if let Some(line) = line.get() {
                line.show(p, false)
            }
        },
    )?;
    let (line, done) = (line.get().context("the walk never reported")?, &built.done);
    line.show(done, true);
    if let Some(skipped) = ctxfs::index::hybrid::skipped_summary(&built.survey, done) {
        eprintln!("ctxfs index: {skipped}");
    }
    let secs = line.started.elapsed().as_secs_f64().max(1e-3);
    let mb = |b: u64| b as f64 / 1e6;
    println!(
        "indexed {}: {} files ({:.1} MB); {} new or changed ({:.1} MB, {} chunks{}), {} skipped, {} removed; {:.1} s ({:.1} MB/s, {:.0} chunks/s)",
        built.root,
        done.found,
        mb(done.bytes),
        done.indexed,
        mb(done.bytes_indexed),
        done.chunks,
        if built.words_only { ", words only" } else { "" },
        done.skipped,
        done.removed,
        secs,
        mb(done.bytes_indexed) / secs,
        done.chunks as f64 / secs
    );
    Ok(ExitCode::SUCCESS)
}

/// `ctxfs index`'s progress on stderr: one redrawn line on a terminal, else a plain line every few seconds.
struct ProgressLine {
    started: std::time::Instant,
    /// The files a walk found before the build started (the build's own count takes over if it finds more).
    total: usize,
    last: std::cell::Cell<Option<std::time::Instant>>,
    terminal: bool,
}

impl ProgressLine {
    fn new(total: usize) -> ProgressLine {
        use std::io::IsTerminal;
        let (started, terminal) = (std::time::Instant::now(), std::io::stderr().is_terminal());
        // A plain line first comes after one interval, so a quick run prints none.
        ProgressLine { started, total, last: std::cell::Cell::new((!terminal).then_some(started)), terminal }
    }

    fn show(&self, p: &ctxfs::index::hybrid::Progress, last: bool) {
        let now = std::time::Instant::now();
        let every = Duration::from_millis(if self.terminal { 100 } else { 2000 });
        if !last && self.last.get().is_some_and(|at| now - at < every) {
            return;
        }
        self.last.set(Some(now));
        let secs = (now - self.started).as_secs_f64().max(1e-3);
        let total = if p.walked { p.found } else { p.found.max(self.total) };
        let found = total.to_string();
        let text = format!(
            "{}/{} files, {:.1} MB, {} chunks, {:.0} chunks/s",
            p.done,
            found,
            p.bytes as f64 / 1e6,
            p.chunks,
            p.chunks as f64 / secs
        );
        if self.terminal {
            const WIDTH: usize = 24;
            let filled = (p.done * WIDTH).checked_div(total).unwrap_or(0).min(WIDTH);
            eprint!("\r[{}{}] {text}\x1b[K", "#".repeat(filled), ".".repeat(WIDTH - filled));
            if last {
                eprintln!();
            }
        } else if !last {
            eprintln!("ctxfs index: {text}");
        }
    }
}
