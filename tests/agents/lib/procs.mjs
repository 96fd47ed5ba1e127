// Process helpers for the agent tests: every process a test starts runs in its own process group
// (a new session, `detached`), is ended with its group by id (SIGTERM, then SIGKILL), and a scan
// of /proc finds anything that outlived it. A process counts as the test's when its command line
// or environment mentions the test's marker (its scratch directory), which every agent, the MCP
// servers it spawns (their `--root` lies under it) and their children (HOME lies under it) carry.
// This is not a general process supervisor: it is Linux-only and meant for tests.

import { spawn } from "node:child_process";
import fs from "node:fs";

const started = new Set();

/**
 * Starts `command` in a new process group with piped stdio. Collects stderr (the last 256 KiB)
 * in `child.stderrText()` and copies it to `logFile` when given.
 */
export function spawnGroup(command, args, { env, cwd, logFile, stdio = ["pipe", "pipe", "pipe"] } = {}) {
  const child = spawn(command, args, { env, cwd, stdio, detached: true });
  started.add(child);
  let tail = "";
  const log = logFile ? fs.createWriteStream(logFile, { flags: "a" }) : null;
  child.stderr?.on("data", (d) => {
    tail = (tail + d.toString("utf8")).slice(-262144);
    log?.write(d);
  });
  child.stderrText = () => tail;
  child.exited = new Promise((resolve) => {
    child.once("exit", (code, signal) => resolve({ code, signal }));
    child.once("error", (error) => resolve({ code: null, signal: null, error }));
  });
  child.exited.then(() => log?.end());
  return child;
}

/** The process group id of a pid, or null when it is gone. */
export function pgidOf(pid) {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
    // Fields after the command name, which is in parentheses and may hold spaces.
    const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return Number(rest[2]);
  } catch {
    return null;
  }
}

/** Live (non-zombie) pids whose process group is `pgid`. */
export function groupMembers(pgid) {
  const out = [];
  for (const name of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${name}/stat`, "utf8");
      const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      if (rest[0] !== "Z" && Number(rest[2]) === pgid) out.push(Number(name));
    } catch {
      // The process ended while we looked.
    }
  }
  return out;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * Ends a process group started by spawnGroup: SIGTERM to the group, then SIGKILL to what is
 * left after `graceMs`. Waits until no member of the group is alive (bounded by a safety net).
 */
export async function killGroup(child, { graceMs = 3000 } = {}) {
  if (!child?.pid) return;
  const pgid = child.pid;
  const signal = (sig) => {
    try {
      process.kill(-pgid, sig);
    } catch {
      // The group is already empty.
    }
  };
  signal("SIGTERM");
  const deadline = Date.now() + graceMs;
  while (groupMembers(pgid).length > 0 && Date.now() < deadline) await sleep(50);
  if (groupMembers(pgid).length > 0) signal("SIGKILL");
  for (let i = 0; i < 100 && groupMembers(pgid).length > 0; i++) await sleep(50);
  started.delete(child);
}

/** Ends every group this module started and has not ended yet. */
export async function killAllStarted() {
  await Promise.all([...started].map((c) => killGroup(c)));
}

/**
 * Processes (other than this one) whose command line or environment contains `marker`:
 * [{pid, pgid, cmd}]. Zombies are left out: they hold no resources and their parent reaps them.
 */
export function survivors(marker) {
  const out = [];
  for (const name of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue;
    try {
      const stat = fs.readFileSync(`/proc/${name}/stat`, "utf8");
      if (stat.slice(stat.lastIndexOf(")") + 2).startsWith("Z")) continue;
      const cmd = fs.readFileSync(`/proc/${name}/cmdline`, "utf8").replace(/\0/g, " ").trim();
      let environ = "";
      try {
        environ = fs.readFileSync(`/proc/${name}/environ`, "utf8");
      } catch {
        // Not ours to read: it cannot carry our marker either.
      }
      if (cmd.includes(marker) || environ.includes(marker)) out.push({ pid: Number(name), pgid: pgidOf(Number(name)), cmd });
    } catch {
      // The process ended while we looked.
    }
  }
  return out;
}

/** Kills survivors by pid (the test fails on them anyway; this only keeps the machine clean). */
export function killSurvivors(list) {
  for (const p of list) {
    try {
      process.kill(p.pid, "SIGKILL");
    } catch {
      // Already gone.
    }
  }
}
