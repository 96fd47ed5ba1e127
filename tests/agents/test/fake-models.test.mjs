// Tests of the scripted fake model servers themselves (lib/fake-models.mjs): tool-name matching,
// the step choice, each API's answer (streamed and not) put back together as a client would,
// the record of tool results, and the command-line form in its own process group. The real
// agents in agents.test.mjs are the end-to-end check that the formats are what clients accept.

import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

import { startModelServer, startModelProcess, resolveToolName, decide } from "../lib/fake-models.mjs";
import { groupMembers } from "../lib/procs.mjs";

const script = {
  steps: [{ tool: "read", args: { file_path: "/w/a.txt" } }, { tool: "edit", args: { file_path: "/w/a.txt", old_string: "a", new_string: "b" } }],
  finalText: "All done.",
  sideText: "A title",
};

/** The `data:` payloads of an SSE body, JSON-parsed (`[DONE]` kept as a string). */
function events(body) {
  return body
    .split("\n")
    .filter((l) => l.startsWith("data: "))
    .map((l) => l.slice(6))
    .map((d) => (d === "[DONE]" ? d : JSON.parse(d)));
}

async function post(url, body) {
  const res = await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  assert.equal(res.status, 200, await res.clone().text());
  return res.text();
}

test("tool names are matched per server, else bare", () => {
  assert.equal(resolveToolName(["read", "ctxfs_read"], "read"), "ctxfs_read");
  assert.equal(resolveToolName(["mcp__ctxfs__read", "mcp__ctxfs__readx"], "read"), "mcp__ctxfs__read");
  assert.equal(resolveToolName(["mcp_ctxfs_edit"], "edit"), "mcp_ctxfs_edit");
  assert.equal(resolveToolName(["read"], "read"), "read");
  assert.equal(resolveToolName(["other_read", "read_file"], "read"), null);
});

test("the step is chosen by the number of tool results; no tools means a side request", () => {
  assert.deepEqual(decide(script, { tools: [], results: [] }), { kind: "text", text: "A title", side: true });
  assert.equal(decide(script, { tools: ["ctxfs_read", "ctxfs_edit"], results: [] }).name, "ctxfs_read");
  assert.equal(decide(script, { tools: ["ctxfs_read", "ctxfs_edit"], results: [{}] }).name, "ctxfs_edit");
  assert.deepEqual(decide(script, { tools: ["ctxfs_read"], results: [{}, {}] }), { kind: "text", text: "All done." });
  assert.equal(decide(script, { tools: ["bash"], results: [] }).missing, "read");
});

test("OpenAI chat completions: streamed tool call and text, and tool results recorded", async () => {
  const model = await startModelServer(script);
  try {
    const tools = [{ type: "function", function: { name: "ctxfs_read" } }];
    const first = events(await post(`${model.url}/v1/chat/completions`, { stream: true, tools, messages: [{ role: "user", content: "go" }] }));
    assert.equal(first.at(-1), "[DONE]");
    const args = first.flatMap((e) => e.choices?.[0]?.delta?.tool_calls ?? []).map((c) => c.function.arguments ?? "").join("");
    assert.deepEqual(JSON.parse(args), { file_path: "/w/a.txt" });
    assert.equal(first.find((e) => e.choices?.[0]?.finish_reason)?.choices[0].finish_reason, "tool_calls");
    const messages = [
      { role: "assistant", tool_calls: [{ id: "c1", type: "function", function: { name: "ctxfs_read", arguments: args } }] },
      { role: "tool", tool_call_id: "c1", content: "[#0001 a.txt]\n1: a" },
      { role: "assistant", tool_calls: [{ id: "c2", type: "function", function: { name: "ctxfs_edit", arguments: "{}" } }] },
      { role: "tool", tool_call_id: "c2", content: [{ type: "text", text: "[#0002 a.txt]" }] },
    ];
    const last = JSON.parse(await post(`${model.url}/v1/chat/completions`, { tools, messages }));
    assert.equal(last.choices[0].message.content, "All done.");
    assert.deepEqual(
      model.toolResults().map((r) => [r.tool, r.text]),
      [["ctxfs_read", "[#0001 a.txt]\n1: a"], ["ctxfs_edit", "[#0002 a.txt]"]],
    );
  } finally {
    await model.close();
  }
});

test("Anthropic messages: streamed tool_use with its input split in deltas", async () => {
  const model = await startModelServer(script);
  try {
    const body = await post(`${model.url}/v1/messages`, { stream: true, tools: [{ name: "mcp__ctxfs__read" }], messages: [{ role: "user", content: "go" }] });
    assert.match(body, /^event: message_start$/m);
    const all = events(body);
    const start = all.find((e) => e.type === "content_block_start");
    assert.equal(start.content_block.name, "mcp__ctxfs__read");
    const json = all.filter((e) => e.delta?.type === "input_json_delta").map((e) => e.delta.partial_json).join("");
    assert.deepEqual(JSON.parse(json), { file_path: "/w/a.txt" });
    assert.equal(all.find((e) => e.type === "message_delta").delta.stop_reason, "tool_use");
    const messages = [
      { role: "assistant", content: [{ type: "tool_use", id: "t1", name: "mcp__ctxfs__read", input: {} }] },
      { role: "user", content: [{ type: "tool_result", tool_use_id: "t1", content: [{ type: "text", text: "[#0001 x]" }] }] },
    ];
    const next = JSON.parse(await post(`${model.url}/v1/messages`, { tools: [{ name: "mcp__ctxfs__edit" }], messages }));
    assert.equal(next.content[0].name, "mcp__ctxfs__edit");
    assert.deepEqual(model.toolResults()[0], { tool: "mcp__ctxfs__read", text: "[#0001 x]", isError: false });
  } finally {
    await model.close();
  }
});

test("OpenAI Responses: a namespaced MCP tool is called back by name and namespace", async () => {
  const model = await startModelServer(script);
  try {
    const tools = [{ type: "function", name: "exec_command" }, { type: "namespace", name: "mcp__ctxfs", tools: [{ name: "read" }, { name: "edit" }] }];
    const all = events(await post(`${model.url}/v1/responses`, { stream: true, tools, input: [] }));
    const done = all.find((e) => e.type === "response.output_item.done");
    assert.equal(done.item.type, "function_call");
    assert.equal(done.item.name, "read");
    assert.equal(done.item.namespace, "mcp__ctxfs");
    assert.equal(all.at(-1).type, "response.completed");
    const input = [
      { type: "function_call", call_id: "k1", name: "read", namespace: "mcp__ctxfs", arguments: "{}" },
      { type: "function_call_output", call_id: "k1", output: "[#0001 y]" },
    ];
    await post(`${model.url}/v1/responses`, { stream: true, tools, input });
    assert.deepEqual(model.toolResults()[0], { tool: "mcp__ctxfs__read", text: "[#0001 y]" });
  } finally {
    await model.close();
  }
});

test("Gemini generateContent: a functionCall part, streamed", async () => {
  const model = await startModelServer(script);
  try {
    const body = { contents: [{ role: "user", parts: [{ text: "go" }] }], tools: [{ functionDeclarations: [{ name: "mcp_ctxfs_read" }] }] };
    const [chunk] = events(await post(`${model.url}/v1beta/models/m:streamGenerateContent?alt=sse`, body));
    assert.deepEqual(chunk.candidates[0].content.parts[0].functionCall, { name: "mcp_ctxfs_read", args: { file_path: "/w/a.txt" } });
  } finally {
    await model.close();
  }
});

test("the command-line form runs in its own process group and serves its record", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "ctxfs-fake-model-"));
  const model = await startModelProcess(script, { scriptFile: path.join(dir, "script.json") });
  assert.equal(groupMembers(model.child.pid).includes(model.child.pid), true, "the server leads its own group");
  await post(`${model.url}/v1/chat/completions`, { messages: [] });
  const log = await model.log();
  assert.equal(log.length, 1);
  assert.equal(log[0].answer.side, true);
  await model.close();
  assert.deepEqual(groupMembers(model.child.pid), []);
  fs.rmSync(dir, { recursive: true, force: true });
});
