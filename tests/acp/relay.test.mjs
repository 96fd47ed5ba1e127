// End-to-end tests of `ctxfs acp` (the built binary) between an ACP client and
// the scripted fake agent (tests/acp/fake-agent.mjs), both from the official ACP
// SDK; the agent runs the injected `ctxfs mcp` with the official MCP SDK, so the
// tools, the gate and the side channel are the real ones. Each test checks, at
// its end, that no process of the relay or the agent survives.
import * as acp from "@agentclientprotocol/sdk";
import assert from "node:assert/strict";
import { existsSync, readFileSync, realpathSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import {
  CTXFS,
  close,
  initialize,
  messages,
  report,
  run,
  startRelay,
  toolCall,
  toolCalls,
  until,
  workspace,
} from "./harness.mjs";

const FILES = { "notes/a.md": "alpha\nbeta\n", "notes/sub/c.md": "see\n", "b.txt": "one\ntwo\n" };

/** A relay over the fake agent in a fresh workspace, initialized, with one session. */
async function setUp({ mode = "trust", flags = [], agentArgs = [], files = FILES, meta } = {}) {
  const ws = workspace(files);
  const relay = startRelay({ flags: ["--data", ws.data, "--config", ws.config, "--mode", mode, ...flags], agentArgs });
  await initialize(relay);
  const opened = await relay.agent.request(acp.methods.agent.session.new, {
    cwd: ws.root,
    mcpServers: [],
    ...(meta ? { _meta: meta } : {}),
  });
  const seen = await report(relay, opened.sessionId);
  return { ws, relay, sessionId: opened.sessionId, seen };
}

/** Closes the relay and checks nothing it or its agent started is left. */
async function tearDown({ relay, seen }) {
  await close(relay, { pids: seen?.mcpPids ?? [] });
}

/** Runs one call and returns its updates as the app saw them (the last state of each field). */
async function callOne(relay, sessionId, step) {
  const before = toolCalls(relay, sessionId).length;
  await run(relay, sessionId, [step]);
  const ids = toolCalls(relay, sessionId);
  assert.equal(ids.length, before + 1, "one tool call");
  return toolCall(relay, ids.at(-1));
}

const textOf = (update) =>
  (update.content ?? []).filter((c) => c.type === "content").map((c) => c.content.text).join("\n");
const diffsOf = (update) => (update.content ?? []).filter((c) => c.type === "diff");

test("injection: every session gets ctxfs, and the app's servers, fields and _meta pass untouched", async () => {
  const ws = workspace(FILES);
  const relay = startRelay({ flags: ["--data", ws.data, "--config", ws.config] });
  let seen;
  try {
    const init = await initialize(relay, { _meta: { app: { feature: [1, 2] } } });
    assert.equal(init.protocolVersion, 1);
    assert.deepEqual(init._meta, { fake: { answered: true } }, "the agent's _meta reaches the app");

    // The app's own MCP server (a plain ctxfs mcp, not injected) stays as the app gave it.
    const mine = { name: "mine", command: CTXFS, args: ["mcp", "--root", ws.root, "--data", ws.data], env: [{ name: "X_MINE", value: "1" }], _meta: { app: "kept" } };
    const opened = await relay.agent.request(acp.methods.agent.session.new, {
      cwd: ws.root,
      mcpServers: [mine],
      _meta: { app: { session: "meta" } },
    });
    assert.deepEqual(opened._meta, { fake: { opened: opened.sessionId } });
    seen = await report(relay, opened.sessionId);
    assert.deepEqual(seen.initialize._meta, { app: { feature: [1, 2] } }, "the app's _meta reaches the agent");
    const params = seen.sessions[opened.sessionId];
    assert.deepEqual(params._meta, { app: { session: "meta" } }, "no system prompt for an agent that does not take one");
    assert.equal(params.mcpServers.length, 2);
    assert.deepEqual(params.mcpServers[0], mine);
    const ours = params.mcpServers[1];
    assert.equal(ours.name, "ctxfs");
    assert.equal(ours.command, realpathSync(CTXFS), "this very binary");
    assert.deepEqual(ours.args.slice(0, 3), ["mcp", "--root", ws.root], "the session's cwd is the root");
    assert.deepEqual(ours.args.slice(ours.args.indexOf("--mode"), ours.args.indexOf("--mode") + 2), ["--mode", "ask"]);
    assert.ok(ours.args.includes("--acp-link") && ours.args.includes("--acp-token"));
    assert.equal(seen.mcpPids.length, 2, "the agent started both servers");

    // Extension methods and notifications, both ways, with their _meta.
    const echoed = await relay.agent.request("_ctxfs_test/echo", { n: 1.5, _meta: { deep: { list: [null, true] } } });
    assert.deepEqual(echoed, { echoed: { method: "_ctxfs_test/echo", params: { n: 1.5, _meta: { deep: { list: [null, true] } } } } });
    await relay.agent.notify("_ctxfs_test/note", { _meta: { k: "v" } });
    await run(relay, opened.sessionId, [
      { extRequest: { method: "_fake/ask", params: { q: 1, _meta: { z: [1] } } } },
      { extNotify: { method: "_fake/told", params: { _meta: { t: 2 } } } },
    ]);
    assert.deepEqual(relay.extRequests, [{ method: "_fake/ask", params: { q: 1, _meta: { z: [1] } } }]);
    const answer = messages(relay, opened.sessionId).find((t) => t.startsWith("EXT "));
    assert.deepEqual(JSON.parse(answer.slice(4)), { fromApp: { method: "_fake/ask", params: { q: 1, _meta: { z: [1] } } } });
    await until(() => relay.extNotifications.length === 1, "the agent's notification");
    assert.deepEqual(relay.extNotifications, [{ method: "_fake/told", params: { _meta: { t: 2 } } }]);
    seen = await report(relay, opened.sessionId);
    assert.deepEqual(seen.extNotifications, [{ method: "_ctxfs_test/note", params: { _meta: { k: "v" } } }]);

    // load and resume get the server too.
    await relay.agent.request(acp.methods.agent.session.load, { sessionId: opened.sessionId, cwd: ws.root, mcpServers: [] });
    await relay.agent.request(acp.methods.agent.session.resume, { sessionId: opened.sessionId, cwd: ws.root });
    seen = await report(relay, opened.sessionId);
    assert.deepEqual(seen.sessions[opened.sessionId].mcpServers.map((s) => s.name), ["ctxfs"]);
    assert.equal(seen.mcpPids.length, 4);
  } finally {
    await close(relay, { pids: seen?.mcpPids ?? [] });
  }
});

test("injection: Claude Code's adapter gets the system-prompt line, added to the app's", async () => {
  const env = await setUp({
    agentArgs: ["--claude"],
    meta: { systemPrompt: { append: "Mine." }, claudeCode: { options: { tools: [] } } },
  });
  try {
    const meta = env.seen.sessions[env.sessionId]._meta;
    assert.match(meta.systemPrompt.append, /^Mine\.\n\nFiles: ctxfs serves this project's files/);
    assert.deepEqual(meta.claudeCode, { options: { tools: [] } });
  } finally {
    await tearDown(env);
  }
});

test("rendering: kinds, locations, the bracketed id, and a whole-file diff for every change", async () => {
  const env = await setUp();
  const { relay, sessionId, ws } = env;
  const at = (p) => join(ws.root, p);
  try {
    const read = await callOne(relay, sessionId, { call: "read", args: { file_path: "notes/a.md" } });
    assert.equal(read.updates[0].sessionUpdate, "tool_call");
    assert.equal(read.updates[0].kind, "read", "the kind comes with the first update");
    assert.equal(read.updates[0].title, "read notes/a.md");
    assert.deepEqual(read.updates[0].locations, [{ path: at("notes/a.md") }]);
    assert.equal(read.last.status, "completed");
    assert.equal(read.last.kind, "read");
    assert.match(textOf(read.last), /\[#[0-9a-f]{4,} notes\/a\.md lines 1-2 of 2 sha [0-9a-f]{8}\]/);
    assert.deepEqual(diffsOf(read.last), []);

    const edit = await callOne(relay, sessionId, { call: "edit", args: { file_path: "notes/a.md", old_string: "beta", new_string: "gamma" } });
    assert.equal(edit.last.kind, "edit");
    assert.match(textOf(edit.last), /\[#[0-9a-f]{4,} notes\/a\.md sha/, "the id stays in the text");
    assert.deepEqual(diffsOf(edit.last), [{ type: "diff", path: at("notes/a.md"), oldText: "alpha\nbeta\n", newText: "alpha\ngamma\n" }]);
    assert.deepEqual(edit.last.locations, [{ path: at("notes/a.md") }]);
    assert.equal(readFileSync(at("notes/a.md"), "utf8"), "alpha\ngamma\n");

    const write = await callOne(relay, sessionId, { call: "write", args: { file_path: "new.md", content: "fresh\n" } });
    assert.deepEqual(diffsOf(write.last), [{ type: "diff", path: at("new.md"), oldText: null, newText: "fresh\n" }]);

    const multi = await callOne(relay, sessionId, {
      call: "multiedit",
      args: { file_path: "new.md", edits: [{ old_string: "fresh", new_string: "fresher" }] },
    });
    assert.deepEqual(diffsOf(multi.last), [{ type: "diff", path: at("new.md"), oldText: "fresh\n", newText: "fresher\n" }]);

    await callOne(relay, sessionId, { call: "read", args: { file_path: "b.txt" } });
    const patch = "*** Begin Patch\n*** Update File: b.txt\n@@\n one\n-two\n+TWO\n*** Add File: notes/d.md\n+dee\n*** End Patch";
    const patched = await callOne(relay, sessionId, { call: "apply_patch", args: { patch } });
    assert.equal(patched.last.kind, "edit");
    assert.deepEqual(diffsOf(patched.last), [
      { type: "diff", path: at("b.txt"), oldText: "one\ntwo\n", newText: "one\nTWO\n" },
      { type: "diff", path: at("notes/d.md"), oldText: null, newText: "dee\n" },
    ]);
    assert.deepEqual(patched.last.locations, [{ path: at("b.txt") }, { path: at("notes/d.md") }]);

    const moved = await callOne(relay, sessionId, { call: "mv", args: { source: "b.txt", destination: "moved/b.txt" } });
    assert.equal(moved.last.kind, "move");
    assert.equal(moved.updates[0].title, "mv b.txt → moved/b.txt");
    assert.deepEqual(moved.last.locations, [{ path: at("b.txt") }, { path: at("moved/b.txt") }]);

    const removed = await callOne(relay, sessionId, { call: "rm", args: { path: "new.md" } });
    assert.equal(removed.last.kind, "delete");
    assert.deepEqual(diffsOf(removed.last), [{ type: "diff", path: at("new.md"), oldText: "fresher\n", newText: "" }]);
    assert.ok(!existsSync(at("new.md")));

    const grep = await callOne(relay, sessionId, { call: "grep", args: { pattern: "alpha" } });
    assert.equal(grep.last.kind, "search");
    assert.equal(grep.updates[0].title, "grep alpha");
    const made = await callOne(relay, sessionId, { call: "mkdir", args: { path: "empty" } });
    assert.equal(made.last.kind, "edit");

    // A refused change renders as failed, with ctxfs's words and no diff.
    const refused = await callOne(relay, sessionId, { call: "edit", args: { file_path: "notes/a.md", old_string: "nope", new_string: "x" } });
    assert.equal(refused.last.status, "failed");
    assert.deepEqual(diffsOf(refused.last), []);
    assert.match(textOf(refused.last), /\[#[0-9a-f]{4,}/);

    // In trust mode nothing reached the app's permission prompt, and the agent's
    // own prompts for ctxfs's tools were answered by the relay.
    assert.deepEqual(relay.permissions, []);
    const seen = await report(relay, sessionId);
    assert.ok(seen.permissions.length >= 10);
    assert.ok(seen.permissions.every((p) => p.outcome.outcome === "selected" && p.outcome.optionId === "allow"));
  } finally {
    await tearDown(env);
  }
});

test("rendering: tools named the opencode way, and updates without a bracket, are matched too", async () => {
  const env = await setUp({ agentArgs: ["--style", "opencode"] });
  const { relay, sessionId, ws } = env;
  try {
    const read = await callOne(relay, sessionId, { call: "read", args: { file_path: "notes/a.md" } });
    assert.equal(read.updates[0].title, "read notes/a.md");
    assert.equal(read.last.kind, "read");
    // The agent sends no content: the relay matches the result by order and keeps what was shown.
    const edit = await callOne(relay, sessionId, { call: "edit", bare: true, args: { file_path: "notes/a.md", old_string: "alpha", new_string: "ALPHA" } });
    assert.deepEqual(diffsOf(edit.last), [
      { type: "diff", path: join(ws.root, "notes/a.md"), oldText: "alpha\nbeta\n", newText: "ALPHA\nbeta\n" },
    ]);
  } finally {
    await tearDown(env);
  }
});

/** Answers the app's prompts from a list of option ids (or "cancelled"), recording each. */
function answering(relay, answers) {
  relay.decide = (params) => {
    const answer = answers.shift();
    assert.ok(answer, `an unexpected prompt: ${JSON.stringify(params.toolCall.title)}`);
    return answer === "cancelled" ? { outcome: "cancelled" } : { outcome: "selected", optionId: answer };
  };
}

test("permissions in mode ask: one prompt, in the app, with the diff and the gate's answers", async () => {
  const env = await setUp({ mode: "ask" });
  const { relay, sessionId, ws } = env;
  const file = join(ws.root, "notes/a.md");
  try {
    await callOne(relay, sessionId, { call: "read", args: { file_path: "notes/a.md" } });
    assert.deepEqual(relay.permissions, [], "a read never asks");

    answering(relay, ["allow_once"]);
    const edit = await callOne(relay, sessionId, { call: "edit", args: { file_path: "notes/a.md", old_string: "beta", new_string: "gamma" } });
    assert.equal(relay.permissions.length, 1, "one prompt, not two");
    const prompt = relay.permissions[0];
    assert.equal(prompt.sessionId, sessionId);
    assert.equal(prompt.toolCall.toolCallId, edit.updates[0].toolCallId, "asked on the agent's own tool call");
    assert.equal(prompt.toolCall.kind, "edit");
    assert.deepEqual(prompt.toolCall.locations, [{ path: file }]);
    assert.deepEqual(
      prompt.options.map((o) => [o.optionId, o.kind]),
      [["allow_once", "allow_once"], ["allow_session", "allow_always"], ["always_file", "allow_always"], ["always_directory", "allow_always"], ["deny", "reject_once"]],
    );
    assert.deepEqual(prompt.options.map((o) => o.name), ["Allow once", "Allow notes/a.md for this session", "Always allow notes/a.md", "Always allow notes/*", "Deny"]);
    assert.deepEqual(diffsOf(prompt.toolCall), [{ type: "diff", path: file, oldText: "alpha\nbeta\n", newText: "alpha\ngamma\n" }]);
    assert.match(textOf(prompt.toolCall), /^Allow ctxfs to replace 1 occurrence in notes\/a\.md/);
    assert.equal(edit.last.status, "completed");
    assert.equal(readFileSync(file, "utf8"), "alpha\ngamma\n");

    answering(relay, ["deny"]);
    const denied = await callOne(relay, sessionId, { call: "edit", args: { file_path: "notes/a.md", old_string: "gamma", new_string: "delta" } });
    assert.equal(denied.last.status, "failed");
    assert.match(textOf(denied.last), /declined/);
    assert.equal(readFileSync(file, "utf8"), "alpha\ngamma\n");

    answering(relay, ["cancelled"]);
    const dismissed = await callOne(relay, sessionId, { call: "edit", args: { file_path: "notes/a.md", old_string: "gamma", new_string: "delta" } });
    assert.equal(dismissed.last.status, "failed");
    assert.match(textOf(dismissed.last), /got no answer/);
    assert.equal(readFileSync(file, "utf8"), "alpha\ngamma\n");

    answering(relay, ["allow_session"]);
    await callOne(relay, sessionId, { call: "edit", args: { file_path: "notes/a.md", old_string: "gamma", new_string: "delta" } });
    await callOne(relay, sessionId, { call: "edit", args: { file_path: "notes/a.md", old_string: "delta", new_string: "epsilon" } });
    assert.equal(relay.permissions.length, 4, "allowed for the session: the second edit did not ask");
    assert.equal(readFileSync(file, "utf8"), "alpha\nepsilon\n");

    answering(relay, ["always_directory"]);
    const created = await callOne(relay, sessionId, { call: "write", args: { file_path: "notes/sub/e.md", content: "e\n" } });
    assert.deepEqual(diffsOf(relay.permissions.at(-1).toolCall), [{ type: "diff", path: join(ws.root, "notes/sub/e.md"), oldText: null, newText: "e\n" }]);
    assert.equal(created.last.status, "completed");

    // Remembered for the project: a new session does not ask for that directory.
    const other = await relay.agent.request(acp.methods.agent.session.new, { cwd: ws.root, mcpServers: [] });
    const count = relay.permissions.length;
    await callOne(relay, other.sessionId, { call: "write", args: { file_path: "notes/sub/f.md", content: "f\n" } });
    assert.equal(relay.permissions.length, count);
    answering(relay, ["allow_once"]);
    await callOne(relay, other.sessionId, { call: "rm", args: { path: "b.txt" } });
    const rm = relay.permissions.at(-1);
    assert.equal(rm.toolCall.kind, "delete");
    assert.deepEqual(diffsOf(rm.toolCall), [{ type: "diff", path: join(ws.root, "b.txt"), oldText: "one\ntwo\n", newText: "" }]);
    assert.ok(!existsSync(join(ws.root, "b.txt")));
    env.seen = await report(relay, other.sessionId);
  } finally {
    await tearDown(env);
  }
});

test("permissions in mode read-only: no prompt, every change refused by ctxfs", async () => {
  const env = await setUp({ mode: "read-only" });
  const { relay, sessionId, ws } = env;
  try {
    await callOne(relay, sessionId, { call: "read", args: { file_path: "notes/a.md" } });
    const edit = await callOne(relay, sessionId, { call: "edit", args: { file_path: "notes/a.md", old_string: "beta", new_string: "gamma" } });
    assert.equal(edit.last.status, "failed");
    assert.match(textOf(edit.last), /read-only/);
    const rm = await callOne(relay, sessionId, { call: "rm", args: { path: "b.txt" } });
    assert.equal(rm.last.status, "failed");
    assert.deepEqual(relay.permissions, []);
    assert.equal(readFileSync(join(ws.root, "notes/a.md"), "utf8"), "alpha\nbeta\n");
    assert.ok(existsSync(join(ws.root, "b.txt")));
    const seen = await report(relay, sessionId);
    assert.deepEqual(seen.permissions.map((p) => p.outcome.optionId), ["allow", "allow", "allow"], "the agent's own prompts were answered");
  } finally {
    await tearDown(env);
  }
});

test("permissions in mode accept-edits: edits run, removing outside the start directory asks", async () => {
  const env = await setUp({ mode: "accept-edits", flags: ["--start", "notes"] });
  const { relay, sessionId, ws } = env;
  try {
    await callOne(relay, sessionId, { call: "read", args: { file_path: "a.md" } });
    const edit = await callOne(relay, sessionId, { call: "edit", args: { file_path: "a.md", old_string: "beta", new_string: "gamma" } });
    assert.equal(edit.last.status, "completed");
    assert.deepEqual(edit.last.locations, [{ path: join(ws.root, "notes/a.md") }], "paths start at --start");
    await callOne(relay, sessionId, { call: "write", args: { file_path: "../top.md", content: "t\n" } });
    assert.deepEqual(relay.permissions, [], "writes do not ask");
    answering(relay, ["deny"]);
    const rm = await callOne(relay, sessionId, { call: "rm", args: { path: "../b.txt" } });
    assert.equal(relay.permissions.length, 1);
    assert.equal(relay.permissions[0].toolCall.kind, "delete");
    assert.deepEqual(relay.permissions[0].options.map((o) => o.kind), ["allow_once", "allow_always", "allow_always", "reject_once"], "a root file offers no directory");
    assert.match(textOf(relay.permissions[0].toolCall), /Note: In mode accept-edits/);
    assert.equal(rm.last.status, "failed");
    assert.ok(existsSync(join(ws.root, "b.txt")));
    await callOne(relay, sessionId, { call: "rm", args: { path: "sub/c.md" } });
    assert.equal(relay.permissions.length, 1, "removing inside the start directory does not ask");
  } finally {
    await tearDown(env);
  }
});

test("permissions in mode trust: nothing asks", async () => {
  const env = await setUp({ mode: "trust", flags: ["--start", "notes"] });
  const { relay, sessionId, ws } = env;
  try {
    await callOne(relay, sessionId, { call: "rm", args: { path: "../b.txt" } });
    await callOne(relay, sessionId, { call: "write", args: { file_path: "x.md", content: "x\n" } });
    assert.deepEqual(relay.permissions, []);
    assert.ok(!existsSync(join(ws.root, "b.txt")));
    assert.equal(readFileSync(join(ws.root, "notes/x.md"), "utf8"), "x\n");
  } finally {
    await tearDown(env);
  }
});

test("cancel reaches the agent, and a result finished after it never counts as seen", async () => {
  const env = await setUp();
  const { relay, sessionId } = env;
  try {
    const waiting = run(relay, sessionId, [{ waitCancel: true }]);
    await until(() => messages(relay, sessionId).includes("WAITING"), "the agent to wait");
    await relay.agent.notify(acp.methods.agent.session.cancel, { sessionId, _meta: { why: "user" } });
    assert.equal((await waiting).stopReason, "cancelled");
    let seen = await report(relay, sessionId);
    assert.deepEqual(seen.cancels, [{ sessionId, _meta: { why: "user" } }]);

    // A read the agent runs after the cancel: its result is forgotten, so the next read is whole.
    const late = relay.agent.request(acp.methods.agent.session.prompt, {
      sessionId,
      prompt: [{ type: "text", text: JSON.stringify({ steps: [{ afterCancel: "read", args: { file_path: "notes/a.md" } }] }) }],
    });
    await until(() => messages(relay, sessionId).filter((t) => t === "WAITING").length === 2, "the agent to wait again");
    await relay.agent.notify(acp.methods.agent.session.cancel, { sessionId });
    assert.equal((await late).stopReason, "cancelled");
    const again = await callOne(relay, sessionId, { call: "read", args: { file_path: "notes/a.md" } });
    assert.match(textOf(again.last), /1: alpha/, "a whole read, not a stub");
    // Control: now the read counts, and the same read is a stub.
    const stub = await callOne(relay, sessionId, { call: "read", args: { file_path: "notes/a.md" } });
    assert.match(textOf(stub.last), /Unchanged since #[0-9a-f]{4}/);
    env.seen = await report(relay, sessionId);
  } finally {
    await tearDown(env);
  }
});

test("context: a compaction the agent reports, and a loaded session, empty the dedupe table", async () => {
  const env = await setUp({ agentArgs: ["--claude"] });
  const { relay, sessionId, ws } = env;
  try {
    await callOne(relay, sessionId, { call: "read", args: { file_path: "notes/a.md" } });
    assert.match(textOf((await callOne(relay, sessionId, { call: "read", args: { file_path: "notes/a.md" } })).last), /Unchanged since/);
    await run(relay, sessionId, [{ say: "Compacting..." }, { say: "\n\nCompacting completed." }]);
    const after = await callOne(relay, sessionId, { call: "read", args: { file_path: "notes/a.md" } });
    assert.match(textOf(after.last), /1: alpha/, "whole again after the compaction");

    // The server the session had before a load is reset (the agent may keep using it).
    assert.match(textOf((await callOne(relay, sessionId, { call: "read", args: { file_path: "notes/a.md" } })).last), /Unchanged since/);
    await relay.agent.request(acp.methods.agent.session.load, { sessionId, cwd: ws.root, mcpServers: [] });
    const old = await callOne(relay, sessionId, { call: "read", old: true, args: { file_path: "notes/a.md" } });
    assert.match(textOf(old.last), /1: alpha/, "whole again after the load");
    env.seen = await report(relay, sessionId);
  } finally {
    await tearDown(env);
  }
});

test("permissions: a prompt nobody answers is refused at the timeout and taken back from the app", async () => {
  const env = await setUp({ mode: "ask", flags: ["--approval-timeout", "1"] });
  const { relay, sessionId, ws } = env;
  let withdrawn = 0;
  relay.decide = (params, signal) =>
    new Promise((resolve) => {
      signal.addEventListener("abort", () => {
        withdrawn += 1;
        resolve({ outcome: "cancelled" });
      });
    });
  try {
    await callOne(relay, sessionId, { call: "read", args: { file_path: "notes/a.md" } });
    const edit = await callOne(relay, sessionId, { call: "edit", args: { file_path: "notes/a.md", old_string: "beta", new_string: "gamma" } });
    assert.equal(relay.permissions.length, 1);
    assert.equal(edit.last.status, "failed");
    assert.match(textOf(edit.last), /nobody answered the prompt .* within 1 second/);
    assert.equal(readFileSync(join(ws.root, "notes/a.md"), "utf8"), "alpha\nbeta\n");
    await until(() => withdrawn === 1, "the app's prompt to be withdrawn");
  } finally {
    await tearDown(env);
  }
});
