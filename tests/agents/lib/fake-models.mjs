// Scripted fake model servers for end-to-end tests of real agents: one HTTP server that speaks
// the OpenAI chat completions API (`/v1/chat/completions`), the OpenAI Responses API
// (`/v1/responses`), Anthropic's Messages API (`/v1/messages`) and Gemini's generateContent
// (`/v1beta/models/M:streamGenerateContent`), streaming (SSE) or not, and answers from a script
// of steps instead of a model. It is not a model and does not read the prompt: the step it plays
// is chosen by how many tool results the conversation already holds, so an agent that retries a
// request, or sends side requests (titles, quota checks, summaries), gets consistent answers.
//
// A script is plain JSON, so it can be handed to the command-line form too:
//   {"steps": [{"tool": "read", "args": {"file_path": "/w/a.txt"}},
//              {"tool": "edit", "args": {"file_path": "/w/a.txt", "old_string": "a", "new_string": "b"}},
//              {"text": "Done."}],
//    "sideText": "Scripted title"}
// A step's `tool` is the bare name of an MCP tool; it is matched against the names the agent
// offers for the server named by `server` (default "ctxfs"): `ctxfs_read`, `mcp__ctxfs__read`,
// `mcp_ctxfs_read`, else a bare `read`. A request that offers no tools at all is a side request and
// gets `sideText`. Every request is recorded with the tool results it carried, so a test can check
// that what the tools answered reached the model.
//
// Use from Node:  const model = await startModelServer(script); ... model.url ...; await model.close();
// Use from a shell: node lib/fake-models.mjs SCRIPT.json [--port N]
//   prints one JSON line {"url": "http://127.0.0.1:PORT"} on stdout, serves GET /_fake/log (the
//   record as JSON), and exits on SIGTERM, SIGINT or when its stdin closes.

import http from "node:http";
import fs from "node:fs";
import { fileURLToPath } from "node:url";
import { spawnGroup, killGroup } from "./procs.mjs";

/** Finds the tool name the agent offers for the bare MCP tool `bare` of server `server`. */
export function resolveToolName(offered, bare, server = "ctxfs") {
  const escaped = server.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  const withServer = new RegExp(`(^|[^a-z0-9])${escaped}[^a-z0-9]+${bare}$`, "i");
  return offered.find((name) => withServer.test(name)) ?? (offered.includes(bare) ? bare : null);
}

/** Text of a tool result's content in any of the shapes the APIs use. */
function textOf(content) {
  if (content == null) return "";
  if (typeof content === "string") return content;
  if (Array.isArray(content)) return content.map(textOf).join("\n");
  if (typeof content === "object") {
    if (typeof content.text === "string") return content.text;
    if (content.content !== undefined) return textOf(content.content);
    if (content.output !== undefined) return textOf(content.output);
    if (content.response !== undefined) return textOf(content.response);
    return JSON.stringify(content);
  }
  return String(content);
}

/** The offered tool names and the tool results of a request, per API. */
const dialects = {
  openai(body) {
    const tools = (body.tools ?? []).map((t) => t.function?.name ?? t.name).filter(Boolean);
    const names = new Map();
    for (const m of body.messages ?? []) {
      for (const call of m.tool_calls ?? []) names.set(call.id, call.function?.name);
    }
    const results = (body.messages ?? [])
      .filter((m) => m.role === "tool")
      .map((m) => ({ tool: names.get(m.tool_call_id) ?? null, text: textOf(m.content) }));
    return { tools, results };
  },
  anthropic(body) {
    const tools = (body.tools ?? []).map((t) => t.name).filter(Boolean);
    const names = new Map();
    const results = [];
    for (const m of body.messages ?? []) {
      if (!Array.isArray(m.content)) continue;
      for (const block of m.content) {
        if (block.type === "tool_use") names.set(block.id, block.name);
        if (block.type === "tool_result") {
          results.push({ tool: names.get(block.tool_use_id) ?? null, text: textOf(block.content), isError: !!block.is_error });
        }
      }
    }
    return { tools, results };
  },
  responses(body) {
    // Codex groups an MCP server's tools in a namespace ({type: "namespace", name: "mcp__ctxfs",
    // tools: [...]}); they are offered here as "mcp__ctxfs__read" and called back with
    // {name: "read", namespace: "mcp__ctxfs"}.
    const tools = (body.tools ?? []).flatMap((t) =>
      t.type === "namespace" ? (t.tools ?? []).map((x) => `${t.name}__${x.name}`) : [t.name ?? t.function?.name],
    ).filter(Boolean);
    const names = new Map();
    const results = [];
    for (const item of Array.isArray(body.input) ? body.input : []) {
      if (item.type === "function_call") names.set(item.call_id, item.namespace ? `${item.namespace}__${item.name}` : item.name);
      if (item.type === "function_call_output") results.push({ tool: names.get(item.call_id) ?? null, text: textOf(item.output) });
    }
    return { tools, results };
  },
  gemini(body) {
    const tools = (body.tools ?? []).flatMap((t) => (t.functionDeclarations ?? []).map((f) => f.name));
    const results = [];
    for (const c of body.contents ?? []) {
      for (const part of c.parts ?? []) {
        if (part.functionResponse) results.push({ tool: part.functionResponse.name, text: textOf(part.functionResponse.response) });
      }
    }
    return { tools, results };
  },
};

/** What the script says to answer: {kind: "tool", name, args} or {kind: "text", text}. */
export function decide(script, parsed) {
  if (parsed.tools.length === 0) return { kind: "text", text: script.sideText ?? "Scripted title", side: true };
  const step = script.steps[parsed.results.length];
  if (!step) return { kind: "text", text: script.finalText ?? "Done." };
  if (step.text !== undefined) return { kind: "text", text: step.text };
  const name = resolveToolName(parsed.tools, step.tool, script.server ?? "ctxfs");
  if (!name) {
    return { kind: "text", text: `(fake model: no tool for "${step.tool}" among ${parsed.tools.join(", ")})`, missing: step.tool };
  }
  return { kind: "tool", name, args: step.args ?? {} };
}

let counter = 0;
const nextId = (prefix) => `${prefix}_${Date.now().toString(36)}${(++counter).toString(36)}`;

function sse(res, events) {
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive" });
  for (const [event, data] of events) {
    if (event) res.write(`event: ${event}\n`);
    res.write(`data: ${typeof data === "string" ? data : JSON.stringify(data)}\n\n`);
  }
  res.end();
}

function json(res, status, value) {
  const body = JSON.stringify(value);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
  res.end(body);
}

function answerOpenAI(res, body, answer) {
  const id = nextId("chatcmpl");
  const created = Math.floor(Date.now() / 1000);
  const model = body.model ?? "scripted";
  const usage = { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 };
  const callId = nextId("call");
  const message =
    answer.kind === "tool"
      ? { role: "assistant", content: null, tool_calls: [{ id: callId, type: "function", function: { name: answer.name, arguments: JSON.stringify(answer.args) } }] }
      : { role: "assistant", content: answer.text };
  const finish = answer.kind === "tool" ? "tool_calls" : "stop";
  if (!body.stream) {
    return json(res, 200, { id, object: "chat.completion", created, model, choices: [{ index: 0, message, finish_reason: finish }], usage });
  }
  const chunk = (delta, finish_reason = null, extra = {}) => [null, { id, object: "chat.completion.chunk", created, model, choices: [{ index: 0, delta, finish_reason }], ...extra }];
  const events = [chunk({ role: "assistant", content: "" })];
  if (answer.kind === "tool") {
    const args = JSON.stringify(answer.args);
    const half = Math.floor(args.length / 2);
    events.push(chunk({ tool_calls: [{ index: 0, id: callId, type: "function", function: { name: answer.name, arguments: args.slice(0, half) } }] }));
    events.push(chunk({ tool_calls: [{ index: 0, function: { arguments: args.slice(half) } }] }));
  } else {
    events.push(chunk({ content: answer.text }));
  }
  events.push(chunk({}, finish, { usage }));
  events.push([null, "[DONE]"]);
  sse(res, events);
}

function answerAnthropic(res, body, answer) {
  const id = nextId("msg");
  const model = body.model ?? "scripted";
  const toolId = nextId("toolu");
  const block = answer.kind === "tool" ? { type: "tool_use", id: toolId, name: answer.name, input: answer.args } : { type: "text", text: answer.text };
  const stop = answer.kind === "tool" ? "tool_use" : "end_turn";
  const usage = { input_tokens: 10, output_tokens: 5, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 };
  if (!body.stream) {
    return json(res, 200, { id, type: "message", role: "assistant", model, content: [block], stop_reason: stop, stop_sequence: null, usage });
  }
  const events = [["message_start", { type: "message_start", message: { id, type: "message", role: "assistant", model, content: [], stop_reason: null, stop_sequence: null, usage: { ...usage, output_tokens: 1 } } }]];
  if (answer.kind === "tool") {
    const args = JSON.stringify(answer.args);
    const half = Math.floor(args.length / 2);
    events.push(["content_block_start", { type: "content_block_start", index: 0, content_block: { type: "tool_use", id: toolId, name: answer.name, input: {} } }]);
    events.push(["content_block_delta", { type: "content_block_delta", index: 0, delta: { type: "input_json_delta", partial_json: args.slice(0, half) } }]);
    events.push(["content_block_delta", { type: "content_block_delta", index: 0, delta: { type: "input_json_delta", partial_json: args.slice(half) } }]);
  } else {
    events.push(["content_block_start", { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } }]);
    events.push(["content_block_delta", { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: answer.text } }]);
  }
  events.push(["content_block_stop", { type: "content_block_stop", index: 0 }]);
  events.push(["message_delta", { type: "message_delta", delta: { stop_reason: stop, stop_sequence: null }, usage: { output_tokens: 5 } }]);
  events.push(["message_stop", { type: "message_stop" }]);
  sse(res, events);
}

function answerResponses(res, body, answer) {
  const id = nextId("resp");
  const model = body.model ?? "scripted";
  const itemId = nextId(answer.kind === "tool" ? "fc" : "msg");
  const callId = nextId("call");
  let call = null;
  if (answer.kind === "tool") {
    const ns = (body.tools ?? []).find((t) => t.type === "namespace" && answer.name.startsWith(`${t.name}__`));
    call = ns ? { name: answer.name.slice(ns.name.length + 2), namespace: ns.name } : { name: answer.name };
  }
  const item =
    answer.kind === "tool"
      ? { type: "function_call", id: itemId, call_id: callId, ...call, arguments: JSON.stringify(answer.args), status: "completed" }
      : { type: "message", id: itemId, role: "assistant", status: "completed", content: [{ type: "output_text", text: answer.text, annotations: [] }] };
  const usage = { input_tokens: 10, input_tokens_details: { cached_tokens: 0 }, output_tokens: 5, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 15 };
  const response = (status, output) => ({ id, object: "response", created_at: Math.floor(Date.now() / 1000), status, model, output, usage: status === "completed" ? usage : null });
  if (!body.stream) return json(res, 200, response("completed", [item]));
  const events = [["response.created", { type: "response.created", sequence_number: 0, response: response("in_progress", []) }]];
  if (answer.kind === "tool") {
    events.push(["response.output_item.added", { type: "response.output_item.added", output_index: 0, item: { ...item, arguments: "", status: "in_progress" } }]);
    events.push(["response.function_call_arguments.delta", { type: "response.function_call_arguments.delta", output_index: 0, item_id: itemId, delta: item.arguments }]);
    events.push(["response.function_call_arguments.done", { type: "response.function_call_arguments.done", output_index: 0, item_id: itemId, arguments: item.arguments }]);
  } else {
    events.push(["response.output_item.added", { type: "response.output_item.added", output_index: 0, item: { ...item, content: [], status: "in_progress" } }]);
    events.push(["response.output_text.delta", { type: "response.output_text.delta", output_index: 0, content_index: 0, item_id: itemId, delta: answer.text }]);
  }
  events.push(["response.output_item.done", { type: "response.output_item.done", output_index: 0, item }]);
  events.push(["response.completed", { type: "response.completed", response: response("completed", [item]) }]);
  sse(res, events.map(([e, d], i) => [e, { ...d, sequence_number: i }]));
}

function answerGemini(res, body, answer, stream) {
  const part = answer.kind === "tool" ? { functionCall: { name: answer.name, args: answer.args } } : { text: answer.text };
  const payload = {
    candidates: [{ content: { role: "model", parts: [part] }, finishReason: "STOP", index: 0 }],
    usageMetadata: { promptTokenCount: 10, candidatesTokenCount: 5, totalTokenCount: 15 },
    modelVersion: body.model ?? "scripted",
  };
  if (!stream) return json(res, 200, payload);
  sse(res, [[null, payload]]);
}

/**
 * Starts a scripted model server on 127.0.0.1. Returns {url, port, requests, toolResults(),
 * served(kind), close()}. `requests` holds every request: {method, path, dialect, body, tools,
 * results, answer}.
 */
export async function startModelServer(script, { port = 0, log = () => {} } = {}) {
  if (!script || !Array.isArray(script.steps)) throw new Error("a script needs a steps array");
  const requests = [];
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      const raw = Buffer.concat(chunks).toString("utf8");
      let body = {};
      try {
        body = raw ? JSON.parse(raw) : {};
      } catch {
        body = { unparsed: raw };
      }
      const url = new URL(req.url, "http://x");
      const path = url.pathname;
      if (req.method === "GET" && path === "/_fake/log") return json(res, 200, { requests });
      const record = { method: req.method, path, dialect: null, body, tools: [], results: [], answer: null };
      requests.push(record);
      const play = (dialect, respond) => {
        const parsed = dialects[dialect](body);
        const answer = decide(script, parsed);
        Object.assign(record, { dialect, tools: parsed.tools, results: parsed.results, answer });
        log(`fake model: ${dialect} ${path} with ${parsed.tools.length} tools, ${parsed.results.length} results -> ${answer.kind === "tool" ? answer.name : JSON.stringify(answer.text)}`);
        respond(answer);
      };
      try {
        if (req.method === "GET" && /\/models$/.test(path)) {
          return json(res, 200, { object: "list", data: [{ id: "scripted", object: "model", created: 0, owned_by: "ctxfs-tests" }] });
        }
        if (req.method !== "POST") return json(res, 404, { error: { message: `no ${req.method} ${path}` } });
        if (path.endsWith("/chat/completions")) return play("openai", (a) => answerOpenAI(res, body, a));
        if (path.endsWith("/messages/count_tokens")) return json(res, 200, { input_tokens: 10 });
        if (path.endsWith("/messages")) return play("anthropic", (a) => answerAnthropic(res, body, a));
        if (path.endsWith("/responses")) return play("responses", (a) => answerResponses(res, body, a));
        const gemini = path.match(/\/models\/[^/:]+:(streamGenerateContent|generateContent|countTokens)$/);
        if (gemini) {
          if (gemini[1] === "countTokens") return json(res, 200, { totalTokens: 10 });
          return play("gemini", (a) => answerGemini(res, body, a, gemini[1] === "streamGenerateContent"));
        }
        log(`fake model: unknown ${req.method} ${path}`);
        return json(res, 404, { error: { message: `the fake model server has no ${path}` } });
      } catch (e) {
        log(`fake model: ${e.stack}`);
        json(res, 500, { error: { message: String(e) } });
      }
    });
  });
  await new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, "127.0.0.1", resolve);
  });
  const actual = server.address().port;
  return {
    url: `http://127.0.0.1:${actual}`,
    port: actual,
    requests,
    /** Every tool result the model was sent, deduplicated by text, in order of first sight. */
    toolResults() {
      const seen = new Map();
      for (const r of requests) for (const t of r.results) if (!seen.has(t.text)) seen.set(t.text, t);
      return [...seen.values()];
    },
    /** The requests of one dialect that the script answered (side requests included). */
    served(dialect) {
      return requests.filter((r) => r.dialect === dialect);
    },
    close() {
      server.closeAllConnections?.();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

/** Reads the record of a fake model server started as a separate process. */
export async function fetchLog(url) {
  const res = await fetch(`${url}/_fake/log`);
  if (!res.ok) throw new Error(`fake model log: HTTP ${res.status}`);
  return (await res.json()).requests;
}

/** Every tool result in a fetched record, deduplicated by text. */
export function toolResultsOf(requests) {
  const seen = new Map();
  for (const r of requests) for (const t of r.results) if (!seen.has(t.text)) seen.set(t.text, t);
  return [...seen.values()];
}

/**
 * Starts the server as a separate process in its own process group (the command-line form),
 * with the script written to `scriptFile`. Returns {url, child, log(), toolResults(), close()}:
 * log() fetches the record, close() ends the process group.
 */
export async function startModelProcess(script, { scriptFile, logFile, timeoutMs = 20000 } = {}) {
  fs.writeFileSync(scriptFile, JSON.stringify(script, null, 2));
  const child = spawnGroup(process.execPath, [fileURLToPath(import.meta.url), scriptFile], { logFile });
  let timer;
  try {
    const url = await new Promise((resolve, reject) => {
      let out = "";
      timer = setTimeout(() => reject(new Error(`the fake model server did not start: ${child.stderrText()}`)), timeoutMs);
      child.stdout.on("data", (d) => {
        out += d;
        const line = out.split("\n")[0];
        if (out.includes("\n")) resolve(JSON.parse(line).url);
      });
      child.exited.then(({ code }) => reject(new Error(`the fake model server exited (${code}): ${child.stderrText()}`)));
    });
    return {
      url,
      child,
      log: () => fetchLog(url),
      async toolResults() {
        return toolResultsOf(await fetchLog(url));
      },
      close: () => killGroup(child),
    };
  } catch (e) {
    await killGroup(child);
    throw e;
  } finally {
    clearTimeout(timer);
  }
}

async function main(argv) {
  const file = argv.find((a) => !a.startsWith("--"));
  const portAt = argv.indexOf("--port");
  if (!file) {
    process.stderr.write("usage: node fake-models.mjs SCRIPT.json [--port N]\n");
    process.exit(2);
  }
  const script = JSON.parse(fs.readFileSync(file, "utf8"));
  const model = await startModelServer(script, {
    port: portAt >= 0 ? Number(argv[portAt + 1]) : 0,
    log: (line) => process.stderr.write(line + "\n"),
  });
  process.stdout.write(JSON.stringify({ url: model.url }) + "\n");
  const stop = () => model.close().then(() => process.exit(0));
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
  process.stdin.on("end", stop);
  process.stdin.resume();
}

if (process.argv[1] && fileURLToPath(import.meta.url) === fs.realpathSync(process.argv[1])) {
  main(process.argv.slice(2));
}
