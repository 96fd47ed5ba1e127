// Test harness for `ctxfs acp`: starts the built relay (in a process group of its
// own) over an agent, connects an ACP client from the official SDK to it, records
// what the app sees (session updates, permission prompts, extension messages),
// and at the end checks that no process of the relay or the agent is left.
// It is not a test itself and asserts only about processes and time-outs.
import * as acp from "@agentclientprotocol/sdk";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { Readable, Writable } from "node:stream";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
export const CTXFS = process.env.CTXFS_BIN ?? join(here, "..", "..", "target", "debug", "ctxfs");
export const FAKE_AGENT = join(here, "fake-agent.mjs");

/** Resolves after `ms`. */
export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Waits until `check()` is truthy (a safety net, not a timed assertion). */
export async function until(check, what, ms = 20_000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`gave up waiting for ${what}`);
    await sleep(20);
  }
}

const scratch = [];
process.on("exit", () => {
  for (const dir of scratch) rmSync(dir, { recursive: true, force: true });
});

/** A scratch workspace with files, plus data and config directories outside it (removed at exit). */
export function workspace(files = {}) {
  const top = mkdtempSync(join(tmpdir(), "ctxfs-acp-test-"));
  scratch.push(top);
  const root = join(top, "ws");
  for (const [path, text] of Object.entries({ ...files, ".keep": "" })) {
    mkdirSync(dirname(join(root, path)), { recursive: true });
    writeFileSync(join(root, path), text);
  }
  mkdirSync(join(top, "data"));
  mkdirSync(join(top, "config"));
  return { top, root, data: join(top, "data"), config: join(top, "config") };
}

/** The processes whose process group is `pgid` (zombies aside). */
export function groupMembers(pgid) {
  const out = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    let stat;
    try {
      stat = readFileSync(`/proc/${name}/stat`, "utf8");
    } catch {
      continue;
    }
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    if (fields[0] !== "Z" && Number(fields[2]) === pgid) out.push(Number(name));
  }
  return out;
}

/** Whether process `pid` runs (a zombie does not count). */
export function alive(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2)[0] !== "Z";
  } catch {
    return false;
  }
}

/**
 * Starts `ctxfs acp FLAGS -- AGENT…` and connects an ACP client.
 * `agent` defaults to the fake agent with `agentArgs`.
 */
export function startRelay({ flags = [], agent, agentArgs = [], env = {}, cleanEnv = false } = {}) {
  const command = agent ?? [process.execPath, FAKE_AGENT, ...agentArgs];
  const child = spawn(CTXFS, ["acp", ...flags, "--", ...command], {
    stdio: ["pipe", "pipe", "pipe"],
    detached: true,
    // `cleanEnv`: only `env` (a real agent's own), not this process's.
    env: { ...(cleanEnv ? {} : process.env), CTXFS_LOG: process.env.CTXFS_LOG ?? "warn", ...env },
  });
  const relay = {
    child,
    stderr: "",
    updates: [],
    permissions: [],
    extRequests: [],
    extNotifications: [],
    exited: new Promise((resolve) => child.on("exit", (code, signal) => resolve({ code, signal }))),
    /** How the app answers a permission prompt (params, the request's abort signal): an ACP outcome. */
    decide: (params) => ({ outcome: "selected", optionId: params.options[0].optionId }),
    agentPid: null,
  };
  child.stderr.on("data", (chunk) => {
    relay.stderr += chunk;
  });
  const app = acp
    .client({ name: "ctxfs-acp-test" })
    .onNotification(acp.methods.client.session.update, ({ params }) => {
      relay.updates.push(params);
    })
    .onRequest(acp.methods.client.session.requestPermission, async ({ params, signal }) => {
      relay.permissions.push(params);
      return { outcome: await relay.decide(params, signal) };
    })
    .onRequest("*", ({ method, params }) => {
      relay.extRequests.push({ method, params });
      return { fromApp: { method, params } };
    })
    .onNotification("*", ({ method, params }) => {
      relay.extNotifications.push({ method, params });
    });
  relay.connection = app.connect(acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout)));
  relay.agent = relay.connection.agent;
  return relay;
}

/** Initializes, as an app does. */
export async function initialize(relay, extra = {}) {
  return relay.agent.request(acp.methods.agent.initialize, {
    protocolVersion: acp.PROTOCOL_VERSION,
    clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false },
    clientInfo: { name: "ctxfs-acp-test", version: "1.0.0" },
    ...extra,
  });
}

/** The texts of the agent_message_chunks of a session. */
export function messages(relay, sessionId) {
  return relay.updates
    .filter((u) => u.sessionId === sessionId && u.update.sessionUpdate === "agent_message_chunk")
    .map((u) => u.update.content.text);
}

let turns = 0;

/**
 * Runs a prompt whose text is the fake agent's script; resolves when its
 * response and every update sent before it have arrived.
 */
export async function run(relay, sessionId, steps) {
  const marker = `END ${++turns}`;
  const response = await relay.agent.request(acp.methods.agent.session.prompt, {
    sessionId,
    prompt: [{ type: "text", text: JSON.stringify({ steps: [...steps, { say: marker }] }) }],
  });
  if (response.stopReason === "end_turn") {
    await until(() => messages(relay, sessionId).includes(marker), "the turn's last update");
  }
  return response;
}

/** The fake agent's report of what it saw. */
export async function report(relay, sessionId) {
  await run(relay, sessionId, [{ report: true }]);
  const text = messages(relay, sessionId).filter((t) => t.startsWith("REPORT ")).at(-1);
  const seen = JSON.parse(text.slice("REPORT ".length));
  relay.agentPid = seen.pid;
  return seen;
}

/** The updates of one tool call, in order, and the last state of each field. */
export function toolCall(relay, toolCallId) {
  const updates = relay.updates.filter((u) => u.update.toolCallId === toolCallId).map((u) => u.update);
  return { updates, last: Object.assign({}, ...updates) };
}

/** The ids of the fake agent's tool calls, in order. */
export function toolCalls(relay, sessionId) {
  return relay.updates
    .filter((u) => u.sessionId === sessionId && u.update.sessionUpdate === "tool_call")
    .map((u) => u.update.toolCallId);
}

/**
 * Ends the app's side (closes the relay's stdin) and checks that the relay
 * exits and that nothing of its group or the agent's is left running.
 */
export async function close(relay, { pids = [] } = {}) {
  relay.child.stdin.end();
  let timer;
  const exit = await Promise.race([relay.exited, new Promise((resolve) => (timer = setTimeout(resolve, 20_000, null)))]);
  clearTimeout(timer);
  const leftovers = () => [
    ...groupMembers(relay.child.pid),
    ...(relay.agentPid ? groupMembers(relay.agentPid) : []),
    ...pids.filter(alive),
  ];
  const left = exit ? leftovers() : [];
  if (!exit || left.length) {
    // A safety net, so a failing test leaves nothing behind either.
    for (const group of [relay.child.pid, relay.agentPid].filter(Boolean)) {
      try {
        process.kill(-group, "SIGKILL");
      } catch {}
    }
    for (const pid of pids.filter(alive)) process.kill(pid, "SIGKILL");
  }
  assert.ok(exit, `the relay did not exit after its app left; its stderr:\n${relay.stderr}`);
  assert.deepEqual(left, [], `processes left running; stderr:\n${relay.stderr}`);
  return exit;
}
