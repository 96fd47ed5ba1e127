// `ctxfs acp` over agents that fail: missing, exiting at start, speaking another
// protocol version, flooding stdout, crashing mid-turn; and a relay that is ended
// by a signal or killed outright. In each case the app gets a clear ACP error (not
// a hang) and no process of the agent is left.
import * as acp from "@agentclientprotocol/sdk";
import assert from "node:assert/strict";
import { readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { alive, close, groupMembers, initialize, messages, report, run, startRelay, until, workspace } from "./harness.mjs";

/** A relay over the fake agent that writes its pid to a file, so a test can find it however it fails. */
function startFake(agentArgs, flags = []) {
  const ws = workspace({ "a.md": "a\n" });
  const pidFile = join(ws.top, "agent.pid");
  const relay = startRelay({ agentArgs, flags: ["--data", ws.data, "--config", ws.config, ...flags], env: { FAKE_AGENT_PIDFILE: pidFile } });
  const agentPid = () => {
    try {
      return Number(readFileSync(pidFile, "utf8"));
    } catch {
      return null;
    }
  };
  return { ws, relay, agentPid };
}

async function rejection(promise) {
  try {
    await promise;
  } catch (e) {
    return e;
  }
  assert.fail("the request was answered, not refused");
}

test("a missing agent: initialize is refused with the reason, and the relay ends with its app", async () => {
  const relay = startRelay({ agent: ["/nonexistent/ctxfs-test-agent", "--flag"] });
  try {
    const error = await rejection(initialize(relay));
    assert.match(error.message, /could not start the agent `\/nonexistent\/ctxfs-test-agent --flag`: No such file or directory/);
    const again = await rejection(relay.agent.request(acp.methods.agent.session.new, { cwd: "/", mcpServers: [] }));
    assert.match(again.message, /could not start the agent/, "every later request too");
  } finally {
    const exit = await close(relay);
    assert.equal(exit.code, 1, "the relay says the agent failed");
  }
});

test("an agent that exits at start: the exit status and its last stderr line reach the app", async () => {
  const { relay, agentPid } = startFake(["--exit-at-start", "3"]);
  try {
    const error = await rejection(initialize(relay));
    assert.match(error.message, /the agent `.*fake-agent\.mjs --exit-at-start 3` exited with status 3/);
    assert.match(error.message, /its last words on stderr: fake agent: giving up at start/);
    assert.match(relay.stderr, /\[agent\] fake agent: giving up at start/, "its stderr is in the relay's log");
  } finally {
    relay.agentPid = agentPid();
    await close(relay);
  }
});

/** Starts the fake agent with `args`, expects `initialize` to fail with `pattern`, then closes the relay. */
async function refusedAtInitialize(args, pattern, afterwards = async () => {}) {
  const { relay, agentPid } = startFake(args);
  try {
    const error = await rejection(initialize(relay));
    assert.match(error.message, pattern);
    await afterwards(agentPid);
  } finally {
    relay.agentPid = agentPid();
    await close(relay);
  }
}

test("an agent speaking another protocol version is refused and ended", async () => {
  await refusedAtInitialize(
    ["--version", "2"],
    /the agent speaks ACP protocol version 2, and ctxfs acp relays version 1 only/,
    async (agentPid) => {
      const pid = agentPid();
      assert.ok(pid);
      await until(() => groupMembers(pid).length === 0, "the agent's group to end before the app leaves");
    },
  );
});

test("an agent flooding stdout with lines that are not ACP is ended with an error", async () => {
  await refusedAtInitialize(["--flood-lines"], /lines \(\d+ bytes\) on stdout that are not ACP messages/);
});

test("an agent writing one endless line is ended with an error", async () => {
  await refusedAtInitialize(["--flood-line"], /the agent wrote a message over 32 MiB/);
});

test("an agent crashing mid-turn: the prompt gets an error, not a hang, and its MCP servers end", async () => {
  const { ws, relay, agentPid } = startFake([]);
  let seen;
  try {
    await initialize(relay);
    const { sessionId } = await relay.agent.request(acp.methods.agent.session.new, { cwd: ws.root, mcpServers: [] });
    seen = await report(relay, sessionId);
    const error = await rejection(run(relay, sessionId, [{ say: "about to crash" }, { crash: 5 }]));
    assert.match(error.message, /exited with status 5/);
    assert.match(error.message, /fake agent: crashing as told/);
    await until(() => seen.mcpPids.every((pid) => !alive(pid)), "the orphaned MCP server to be ended");
    const later = await rejection(relay.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [] }));
    assert.match(later.message, /exited with status 5/);
  } finally {
    relay.agentPid = agentPid();
    await close(relay, { pids: seen?.mcpPids ?? [] });
  }
});

test("a relay ended by SIGTERM ends its agent's group", async () => {
  const { ws, relay, agentPid } = startFake([]);
  await initialize(relay);
  const { sessionId } = await relay.agent.request(acp.methods.agent.session.new, { cwd: ws.root, mcpServers: [] });
  const seen = await report(relay, sessionId);
  relay.child.kill("SIGTERM");
  const exit = await relay.exited;
  assert.equal(exit.code, 0);
  assert.deepEqual(groupMembers(agentPid()), []);
  assert.deepEqual(seen.mcpPids.filter(alive), []);
  await close(relay, { pids: seen.mcpPids });
});

test("a relay killed outright: the agent is told (parent-death signal) and the injected server leaves with the link", async () => {
  const { ws, relay, agentPid } = startFake([]);
  await initialize(relay);
  const { sessionId } = await relay.agent.request(acp.methods.agent.session.new, { cwd: ws.root, mcpServers: [] });
  const seen = await report(relay, sessionId);
  relay.child.kill("SIGKILL");
  await relay.exited;
  await until(() => !alive(agentPid()), "the agent to end");
  await until(() => seen.mcpPids.every((pid) => !alive(pid)), "the injected ctxfs mcp to end");
  assert.deepEqual(groupMembers(agentPid()), []);
  await close(relay, { pids: seen.mcpPids });
  // A killed relay cannot remove its link's private directory: the test does.
  for (const name of readdirSync(tmpdir()).filter((n) => n.startsWith(`ctxfs-acp-${relay.child.pid}-`))) {
    rmSync(join(tmpdir(), name), { recursive: true, force: true });
  }
});

test("the app's messages to a dead agent are answered, and a waiting prompt is released", async () => {
  const { ws, relay, agentPid } = startFake([]);
  let seen;
  try {
    await initialize(relay);
    const { sessionId } = await relay.agent.request(acp.methods.agent.session.new, { cwd: ws.root, mcpServers: [] });
    seen = await report(relay, sessionId);
    const waiting = relay.agent.request(acp.methods.agent.session.prompt, {
      sessionId,
      prompt: [{ type: "text", text: JSON.stringify({ steps: [{ waitCancel: true }] }) }],
    });
    await until(() => messages(relay, sessionId).includes("WAITING"), "the agent to wait");
    process.kill(agentPid(), "SIGKILL");
    const error = await rejection(waiting);
    assert.match(error.message, /was ended by signal 9/);
  } finally {
    relay.agentPid = agentPid();
    await close(relay, { pids: seen?.mcpPids ?? [] });
  }
});
