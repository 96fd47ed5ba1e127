// A real agent through the relay: claude-agent-acp (Claude Code's ACP adapter, from npm)
// started as `ctxfs acp -- claude-agent-acp`, with a scripted fake Anthropic model server, and
// an ACP client that passes no MCP servers at all. The fake model (tests/agents/lib, shared with
// the agent tests) makes the model call ctxfs's read and edit; the test checks what the app sees
// (one permission prompt, the gate's, with the diff; kinds, locations, diffs and bracketed ids),
// what the model saw (the injected tools, the system-prompt line, the results), the file, and
// that nothing of the agent is left. The model is the only fake here.
import * as acp from "@agentclientprotocol/sdk";
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { startModelServer } from "../agents/lib/fake-models.mjs";
import { prepareAgent } from "../agents/lib/agents.mjs";
import { survivors, killSurvivors } from "../agents/lib/procs.mjs";
import { close, startRelay, toolCall, toolCalls, until, workspace } from "./harness.mjs";

const textOf = (update) =>
  (update.content ?? []).filter((c) => c.type === "content").map((c) => c.content.text).join("\n");
const diffsOf = (update) => (update.content ?? []).filter((c) => c.type === "diff");

/** The relay's children (the agent, in a process group of its own). */
function childrenOf(pid) {
  const out = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      if (Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]) === pid) out.push(Number(name));
    } catch {}
  }
  return out;
}

test("claude-agent-acp through ctxfs acp: ctxfs's tools, one prompt with the diff, rendered calls", { timeout: 180_000 }, async () => {
  const ws = workspace({ "notes/a.md": "alpha\nbeta\n" });
  const file = join(ws.root, "notes/a.md");
  const model = await startModelServer({
    steps: [
      { tool: "read", args: { file_path: file } },
      { tool: "edit", args: { file_path: file, old_string: "beta", new_string: "gamma" } },
      { text: "Done." },
    ],
    sideText: "Scripted title",
  });
  const plan = prepareAgent("claude", { home: join(ws.top, "home"), tmp: join(ws.top, "tmp"), modelUrl: model.url });
  const relay = startRelay({
    agent: [plan.command, ...plan.args],
    flags: ["--data", ws.data, "--config", ws.config, "--mode", "ask"],
    env: plan.env,
    cleanEnv: true,
  });
  relay.decide = () => ({ outcome: "selected", optionId: "allow_once" });
  try {
    const init = await relay.agent.request(acp.methods.agent.initialize, {
      protocolVersion: acp.PROTOCOL_VERSION,
      clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false },
      clientInfo: { name: "ctxfs-acp-test", version: "1.0.0" },
    });
    assert.equal(init.protocolVersion, 1);
    assert.ok(init.agentCapabilities._meta.claudeCode, "it is Claude Code's adapter");
    relay.agentPid = childrenOf(relay.child.pid)[0];
    assert.ok(relay.agentPid, "the relay started the agent");

    // The app hands no MCP servers: the relay's are the only ones.
    const { sessionId } = await relay.agent.request(acp.methods.agent.session.new, {
      cwd: ws.root,
      mcpServers: [],
      _meta: plan.sessionMeta,
    });
    const response = await relay.agent.request(acp.methods.agent.session.prompt, {
      sessionId,
      prompt: [{ type: "text", text: "Change beta to gamma in notes/a.md." }],
    });
    assert.equal(response.stopReason, "end_turn");
    assert.equal(readFileSync(file, "utf8"), "alpha\ngamma\n");

    // What the model saw: ctxfs's tools, the system-prompt line, the results with their ids.
    const answered = model.served("anthropic").filter((r) => r.tools.length > 0);
    assert.ok(answered.length >= 3, "three turns of the model");
    assert.ok(answered[0].tools.includes("mcp__ctxfs__read") && answered[0].tools.includes("mcp__ctxfs__edit"));
    assert.match(JSON.stringify(answered[0].body.system), /Files: ctxfs serves this project's files/);
    const results = model.toolResults();
    assert.match(results[0].text, /^\[#[0-9a-f]{4,} .*notes\/a\.md lines 1-2 of 2 sha [0-9a-f]{8}\]/);
    assert.match(results[1].text, /^\[#[0-9a-f]{4,} .*notes\/a\.md sha [0-9a-f]{8}\]\n@@ -1,2 \+1,2 @@/);

    // What the app saw: one prompt (the gate's), on the agent's own call, with the diff.
    await until(() => toolCalls(relay, sessionId).length === 2, "both tool calls");
    const [readId, editId] = toolCalls(relay, sessionId);
    assert.equal(relay.permissions.length, 1, "one prompt, not two");
    const prompt = relay.permissions[0];
    assert.equal(prompt.toolCall.toolCallId, editId);
    assert.deepEqual(prompt.options.map((o) => o.kind), ["allow_once", "allow_always", "allow_always", "allow_always", "reject_once"]);
    assert.deepEqual(diffsOf(prompt.toolCall), [{ type: "diff", path: file, oldText: "alpha\nbeta\n", newText: "alpha\ngamma\n" }]);

    await until(() => toolCall(relay, editId).last.status === "completed", "the edit to finish");
    const read = toolCall(relay, readId).last;
    assert.equal(read.kind, "read");
    assert.equal(read.title, "read notes/a.md");
    assert.deepEqual(read.locations, [{ path: file }]);
    assert.match(textOf(read), /\[#[0-9a-f]{4,} /);
    const edit = toolCall(relay, editId).last;
    assert.equal(edit.kind, "edit");
    assert.match(textOf(edit), /\[#[0-9a-f]{4,} .*notes\/a\.md sha/);
    assert.deepEqual(diffsOf(edit), [{ type: "diff", path: file, oldText: "alpha\nbeta\n", newText: "alpha\ngamma\n" }]);
  } finally {
    await close(relay);
    await model.close();
    const left = survivors(ws.top);
    killSurvivors(left);
    assert.deepEqual(left, [], "nothing that names the test's folder is left running");
  }
});
