// End to end: real ACP agents installed from npm (opencode, claude-agent-acp, Gemini CLI,
// codex-acp), each started by an ACP client on the official SDK and handed `ctxfs mcp` in
// session/new, with a scripted model server that makes the model call ctxfs's `read`, then
// `edit`. Checks what the client saw (tool results with their bracketed ids), the file on disk,
// what reached the model, and that no process outlives the test. Mocked: only the model.
// An agent that is not installed fails its test; nothing here skips for a missing agent.

import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

import { startModelProcess, toolResultsOf } from "../lib/fake-models.mjs";
import { withAgent, promptAndDrain, toolCalls, agentText } from "../lib/acp-client.mjs";
import { survivors, killSurvivors } from "../lib/procs.mjs";
import { prepareAgent } from "../lib/agents.mjs";

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const ctxfsBin = path.resolve(process.env.CTXFS_BIN ?? path.join(repo, "target", "debug", "ctxfs"));
const TIMEOUT = 240_000;

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Waits (bounded) until no process carries the marker; returns what is still there. */
async function settle(marker, ms = 10_000) {
  const deadline = Date.now() + ms;
  let left = survivors(marker);
  while (left.length > 0 && Date.now() < deadline) {
    await sleep(200);
    left = survivors(marker);
  }
  return left;
}

/**
 * Runs one scripted session: the model reads notes.txt, then replaces "beta" with "gamma".
 * `adjust(plan)` may change the agent's plan (environment) before it starts.
 */
async function runScenario(agent, mode, { adjust, relativeRoot = false } = {}) {
  assert.ok(fs.existsSync(ctxfsBin), `the ctxfs binary is missing at ${ctxfsBin} (cargo build, or set CTXFS_BIN)`);
  const base = fs.mkdtempSync(path.join(os.tmpdir(), `ctxfs-agents-${agent}-`));
  const workspace = path.join(base, "workspace");
  fs.mkdirSync(workspace);
  const file = path.join(workspace, "notes.txt");
  fs.writeFileSync(file, "alpha\nbeta\n");
  const script = {
    steps: [
      { tool: "read", args: { file_path: file } },
      { tool: "edit", args: { file_path: file, old_string: "beta", new_string: "gamma" } },
      { text: "Done: beta is now gamma." },
    ],
    sideText: "Notes edit",
  };
  const model = await startModelProcess(script, {
    scriptFile: path.join(base, "script.json"),
    logFile: path.join(base, "model.log"),
  });
  let outcome;
  let requests = [];
  let left = [];
  try {
    const plan = prepareAgent(agent, { home: path.join(base, "home"), tmp: path.join(base, "tmp"), modelUrl: model.url });
    adjust?.(plan);
    const ctxfs = {
      name: "ctxfs",
      command: ctxfsBin,
      // A short approval timeout: an agent that takes MCP elicitation but never shows it
      // (codex-acp) gets its refusal in seconds instead of two minutes.
      args: ["mcp", "--root", relativeRoot ? "." : workspace, "--mode", mode, "--data", path.join(base, "data"), "--approval-timeout", "5"],
      env: [],
    };
    outcome = await withAgent(
      // With a relative root the agent itself runs elsewhere: `--root .` then works only if the
      // agent starts its MCP servers in the session's folder (all four do).
      { command: plan.command, args: plan.args, env: plan.env, cwd: relativeRoot ? base : workspace, logFile: path.join(base, "agent.log") },
      async (s) => {
        if (plan.authenticate) await s.ctx.request("authenticate", plan.authenticate);
        const created = await s.ctx.request("session/new", {
          cwd: workspace,
          mcpServers: [ctxfs],
          ...(plan.sessionMeta ? { _meta: plan.sessionMeta } : {}),
        });
        const answer = await promptAndDrain(s, created.sessionId, "Replace beta with gamma in notes.txt.", { timeoutMs: 180_000 });
        // While the session lives, the marker finds the agent and the ctxfs server it started:
        // the check that nothing survives below looks with the same eyes.
        const during = survivors(base);
        return { answer, updates: [...s.updates], permissions: [...s.permissions], during, dialect: plan.dialect };
      },
    );
  } finally {
    try {
      requests = await model.log();
    } finally {
      await model.close();
      // Also when the session failed: whatever the agent left behind is found and ended here.
      left = await settle(base);
      killSurvivors(left);
    }
  }
  return { ...outcome, requests, left, file, workspace, base };
}

/** Removes a passed test's scratch folder; a failed one keeps it (agent.log, model.log) for a look. */
function cleanUp(run) {
  fs.rmSync(run.base, { recursive: true, force: true });
}

function describeCalls(calls) {
  return calls.map((c) => `${c.title} [${c.status}] ${c.text.slice(0, 200)}`).join("\n---\n");
}

function checkProcesses(run) {
  const ctxfsServer = run.during.filter((p) => p.cmd.includes(ctxfsBin) && p.cmd.includes(" mcp ") && p.cmd.includes(run.base));
  assert.ok(ctxfsServer.length >= 1, `the agent's ctxfs mcp server was not seen while the session ran: ${JSON.stringify(run.during)}`);
  assert.deepEqual(run.left, [], `processes outlived the test (killed now): ${JSON.stringify(run.left)}`);
}

function checkModelSaw(run, dialect) {
  const served = run.requests.filter((r) => r.dialect === dialect && r.tools.length > 0);
  assert.ok(served.length >= 3, `the model server answered ${served.length} ${dialect} requests with tools`);
  const offered = served[0].tools;
  assert.ok(offered.some((t) => /ctxfs/.test(t)), `no ctxfs tool was offered to the model: ${offered.join(", ")}`);
  return toolResultsOf(run.requests);
}

const AGENT_NAMES = ["opencode", "claude", "gemini", "codex"];

// What ctxfs answers in ask mode. opencode, claude-agent-acp and Gemini CLI offer their MCP
// servers no elicitation, so ctxfs refuses at once and says how to allow changes. codex-acp
// offers elicitation but shows the question to no one over ACP, so the prompt times out.
const ASK_REFUSAL = {
  opencode: [/cannot ask/, /--mode accept-edits/],
  claude: [/cannot ask/, /--mode accept-edits/],
  gemini: [/cannot ask/, /--mode accept-edits/],
  codex: [/nobody answered the prompt/, /within 5 seconds/],
};

for (const agent of AGENT_NAMES) {
  test(`${agent}: ctxfs mcp in accept-edits mode reads, then edits the file`, { timeout: TIMEOUT }, async (t) => {
    const run = await runScenario(agent, "accept-edits");
    const calls = toolCalls(run.updates);
    t.diagnostic(`tool calls seen by the client:\n${describeCalls(calls)}`);
    t.diagnostic(`permission requests: ${run.permissions.length} (${run.permissions.map((p) => p.toolCall?.title).join(", ")})`);
    assert.equal(run.answer.stopReason, "end_turn");

    const read = calls.find((c) => /\[#0001 /.test(c.text) && c.text.includes("1: alpha"));
    assert.ok(read, `the client saw no read result with its id:\n${describeCalls(calls)}`);
    const edit = calls.find((c) => /\[#0002 /.test(c.text) && c.text.includes("+gamma"));
    assert.ok(edit, `the client saw no edit result with its id and diff:\n${describeCalls(calls)}`);
    assert.notEqual(edit.status, "failed");

    assert.equal(fs.readFileSync(run.file, "utf8"), "alpha\ngamma\n", "the file on disk was not edited");

    const results = checkModelSaw(run, run.dialect);
    assert.ok(results.some((r) => /\[#0001 /.test(r.text) && r.text.includes("2: beta")), `the model never got the read result: ${JSON.stringify(results)}`);
    assert.ok(results.some((r) => /\[#0002 /.test(r.text) && r.text.includes("+gamma")), `the model never got the edit result: ${JSON.stringify(results)}`);
    assert.match(agentText(run.updates), /Done: beta is now gamma\./);
    checkProcesses(run);
    cleanUp(run);
  });

  test(`${agent}: ctxfs mcp --root . in ask mode refuses the edit, since nobody can be asked`, { timeout: TIMEOUT }, async (t) => {
    const run = await runScenario(agent, "ask", { relativeRoot: true });
    const calls = toolCalls(run.updates);
    t.diagnostic(`tool calls seen by the client:\n${describeCalls(calls)}`);
    const read = calls.find((c) => /\[#0001 /.test(c.text));
    assert.ok(read, `the read still runs in ask mode:\n${describeCalls(calls)}`);
    const refusal = calls.find((c) => c.text.includes("[#0002]") && c.text.includes("Not changed"));
    assert.ok(refusal, `the client saw no refusal of the edit:\n${describeCalls(calls)}`);
    for (const pattern of ASK_REFUSAL[agent]) assert.match(refusal.text, pattern);
    assert.equal(fs.readFileSync(run.file, "utf8"), "alpha\nbeta\n", "the file changed although nobody approved");
    const results = checkModelSaw(run, run.dialect);
    assert.ok(results.some((r) => r.text.includes("[#0002]") && r.text.includes("Not changed")), "the model never learnt why");
    checkProcesses(run);
    cleanUp(run);
  });
}

test("gemini: without a trusted folder Gemini CLI does not hand ctxfs to the model", { timeout: TIMEOUT }, async () => {
  const run = await runScenario("gemini", "accept-edits", {
    adjust: (plan) => delete plan.env.GEMINI_CLI_TRUST_WORKSPACE,
  });
  const served = run.requests.filter((r) => r.dialect === "gemini" && r.tools.length > 0);
  assert.ok(served.length >= 1, "Gemini CLI asked the model nothing");
  for (const r of served) assert.ok(!r.tools.some((name) => /ctxfs/.test(name)), `ctxfs was offered: ${r.tools.join(", ")}`);
  assert.match(agentText(run.updates), /no tool for "read"/);
  assert.equal(fs.readFileSync(run.file, "utf8"), "alpha\nbeta\n");
  assert.deepEqual(run.left, []);
  cleanUp(run);
});

/** Starts an agent and opens a session with no MCP servers; returns session/new's answer. */
async function openSession(agent, adjust) {
  const base = fs.mkdtempSync(path.join(os.tmpdir(), `ctxfs-agents-${agent}-`));
  try {
    const plan = prepareAgent(agent, { home: path.join(base, "home"), tmp: path.join(base, "tmp"), modelUrl: "http://127.0.0.1:9" });
    adjust(plan);
    return await withAgent({ command: plan.command, args: plan.args, env: plan.env, cwd: base }, async (s) => {
      if (plan.authenticate) await s.ctx.request("authenticate", plan.authenticate);
      return await s.ctx.request("session/new", { cwd: base, mcpServers: [], ...(plan.sessionMeta ? { _meta: plan.sessionMeta } : {}) });
    });
  } finally {
    const left = await settle(base);
    killSurvivors(left);
    assert.deepEqual(left, [], `processes outlived the test: ${JSON.stringify(left)}`);
    fs.rmSync(base, { recursive: true, force: true });
  }
}

test("claude: as root, bypassPermissions needs IS_SANDBOX=1, and another IS_SANDBOX value breaks session/new", { timeout: TIMEOUT }, async (t) => {
  if (process.getuid?.() !== 0) {
    t.skip("these are root-only behaviours; this run is not root");
    return;
  }
  const modes = (answer) => answer.modes.availableModes.map((m) => m.id);
  const plain = await openSession("claude", (plan) => delete plan.env.IS_SANDBOX);
  assert.ok(!modes(plain).includes("bypassPermissions"), `offered without IS_SANDBOX: ${modes(plain)}`);
  assert.ok(modes(plain).includes("default"));
  const sandbox = await openSession("claude", (plan) => (plan.env.IS_SANDBOX = "1"));
  assert.ok(modes(sandbox).includes("bypassPermissions"), `not offered with IS_SANDBOX=1: ${modes(sandbox)}`);
  await assert.rejects(openSession("claude", (plan) => (plan.env.IS_SANDBOX = "yes")), /Internal error/);
});
