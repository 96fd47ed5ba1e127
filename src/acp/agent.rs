//! The agent as a child process: started in a process group of its own
//! (so ending it ends what it started, MCP servers and a Node wrapper's
//! binary included), its stderr copied to ours line by line, the last lines
//! kept to explain a failure, and the group ended by id: closed stdin first,
//! then SIGTERM, then SIGKILL. Not here: its stdin and stdout (the relay's).

use rustix::process::{Pid, Signal};
use std::collections::VecDeque;
use std::ffi::OsString;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncBufReadExt;
use tokio::process::{ChildStderr, ChildStdin, ChildStdout, Command};

/// Lines of the agent's stderr kept to explain a failure.
const KEPT_LINES: usize = 20;
/// The longest stderr line copied whole.
const LONGEST_LINE: usize = 4000;

/// The agent's pipes, for the relay to use.
pub(crate) struct Pipes {
    pub stdin: ChildStdin,
    pub stdout: ChildStdout,
    pub stderr: ChildStderr,
}

#[derive(Default)]
struct State {
    /// How it ended, once it has.
    status: Option<std::process::ExitStatus>,
    stderr: VecDeque<String>,
}

/// The running agent (or the one that could not start).
#[derive(Clone)]
pub(crate) struct Agent {
    /// The command line, for messages.
    shown: String,
    /// Its process id, which is also its group's id.
    pid: Option<i32>,
    state: Arc<Mutex<State>>,
    exited: Arc<tokio::sync::Notify>,
}

impl Agent {
    /// Starts the agent; on failure, the agent that never ran and why.
    pub(crate) fn start(command: &[OsString]) -> Result<(Agent, Pipes), (Agent, String)> {
        let shown = command.iter().map(|a| a.to_string_lossy()).collect::<Vec<_>>().join(" ");
        let mut agent = Agent {
            shown,
            pid: None,
            state: Arc::new(Mutex::new(State::default())),
            exited: Arc::new(tokio::sync::Notify::new()),
        };
        let Some((program, args)) = command.split_first() else {
            return Err((agent, "ctxfs acp needs the agent's command after `--`".into()));
        };
        let mut builder = Command::new(program);
        builder
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .process_group(0)
            .kill_on_drop(false);
        #[cfg(target_os = "linux")]
        // SAFETY: between fork and exec only an async-signal-safe system call runs.
        unsafe {
            // Should the relay die without cleaning up, the agent is told at once.
            builder.pre_exec(|| {
                rustix::process::set_parent_process_death_signal(Some(Signal::TERM)).map_err(std::io::Error::from)
            });
        }
        let mut child = match builder.spawn() {
            Ok(child) => child,
            Err(e) => {
                let why = format!("ctxfs acp could not start the agent `{}`: {e}", agent.shown);
                return Err((agent, why));
            }
        };
        agent.pid = child.id().map(|id| id as i32);
        let (Some(stdin), Some(stdout), Some(stderr)) = (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err((agent, "the agent's pipes could not be opened".into()));
        };
        tracing::info!(pid = agent.pid, command = agent.shown, "agent started");
        let state = agent.state.clone();
        let exited = agent.exited.clone();
        tokio::spawn(async move {
            let status = child.wait().await;
            if let Ok(status) = status {
                tracing::info!(%status, "the agent exited");
                state.lock().unwrap_or_else(|e| e.into_inner()).status = Some(status);
            }
            exited.notify_waiters();
            exited.notify_one();
        });
        Ok((agent, Pipes { stdin, stdout, stderr }))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn group(&self) -> Option<Pid> {
        self.pid.and_then(Pid::from_raw)
    }

    /// Whether anything of the agent's group still runs. A zombie does not
    /// count (an orphan waits for the system's init to reap it), so on Linux
    /// the group's members are looked up in /proc.
    fn group_alive(&self) -> bool {
        let Some(group) = self.group() else { return false };
        if rustix::process::test_kill_process_group(group).is_err() {
            return false;
        }
        match running_members(group.as_raw_pid()) {
            Some(n) => n > 0,
            None => true,
        }
    }

    async fn wait_exit(&self, within: Duration) -> bool {
        if self.group().is_none() || self.state().status.is_some() {
            return true;
        }
        let notified = self.exited.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if self.state().status.is_some() {
            return true;
        }
        tokio::time::timeout(within, notified).await.is_ok()
    }

    /// Ends the agent's group: `grace` for it to end by itself (its stdin is
    /// closed by then), then SIGTERM, then SIGKILL. Waits for the leader.
    pub(crate) async fn end(&self, grace: Duration) {
        let Some(group) = self.group() else { return };
        self.wait_exit(grace).await;
        for (signal, wait) in [(Signal::TERM, Duration::from_secs(2)), (Signal::KILL, Duration::from_secs(2))] {
            if !self.group_alive() && self.state().status.is_some() {
                break;
            }
            tracing::debug!(?signal, "ending the agent's group");
            if let Err(e) = rustix::process::kill_process_group(group, signal) {
                if e != rustix::io::Errno::SRCH {
                    tracing::warn!("could not signal the agent's group: {e}");
                }
            }
            let deadline = tokio::time::Instant::now() + wait;
            while self.group_alive() && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            self.wait_exit(Duration::from_millis(200)).await;
        }
    }

    /// A failure explained: `why`, how the agent ended, and its last stderr line.
    pub(crate) fn explain(&self, why: &str) -> String {
        let state = self.state();
        let mut text = format!("ctxfs acp: {why}");
        if let Some(status) = state.status {
            let ended = match (status.code(), std::os::unix::process::ExitStatusExt::signal(&status)) {
                (Some(code), _) => format!("exited with status {code}"),
                (None, Some(signal)) => format!("was ended by signal {signal}"),
                _ => "ended".to_string(),
            };
            text.push_str(&format!("; the agent `{}` {ended}", self.shown));
        }
        if let Some(last) = state.stderr.back() {
            text.push_str(&format!("; its last words on stderr: {last}"));
        }
        text
    }
}

/// How many processes of group `pgid` run (zombies aside); `None` without /proc.
fn running_members(pgid: i32) -> Option<usize> {
    let entries = std::fs::read_dir("/proc").ok()?;
    let mut count = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_str().is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit())) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        // `pid (comm) state ppid pgrp …`: comm may hold spaces and parentheses.
        let Some(rest) = stat.rfind(')').map(|at| &stat[at + 1..]) else { continue };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.len() > 2 && fields[0] != "Z" && fields[2].parse::<i32>().ok() == Some(pgid) {
            count += 1;
        }
    }
    Some(count)
}

/// Copies the agent's stderr to ours, each line marked, keeping the last ones.
pub(crate) async fn relay_stderr(stderr: ChildStderr, agent: Agent) {
    let mut lines = tokio::io::BufReader::new(stderr).split(b'\n');
    while let Ok(Some(line)) = lines.next_segment().await {
        let mut text = String::from_utf8_lossy(&line).trim_end().to_string();
        if text.len() > LONGEST_LINE {
            let mut cut = LONGEST_LINE;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
            text.push('…');
        }
        eprintln!("[agent] {text}");
        let mut state = agent.state();
        if !text.is_empty() {
            if state.stderr.len() >= KEPT_LINES {
                state.stderr.pop_front();
            }
            state.stderr.push_back(text);
        }
    }
}
