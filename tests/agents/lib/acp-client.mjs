// A small ACP client for tests, on the official SDK (@agentclientprotocol/sdk): starts an agent
// command in its own process group, speaks ACP to it over stdio, records every session/update
// and permission request, answers permission requests by a policy, and ends the agent's process
// group when done, whatever happened. It is a test driver, not an editor: it offers no file
// system or terminal capabilities to the agent.

import * as acp from "@agentclientprotocol/sdk";
import { Readable, Writable } from "node:stream";
import { spawnGroup, killGroup } from "./procs.mjs";

/** Picks the option a permission policy means: "allow" (once), "always", "reject". */
function choose(options, policy) {
  const kinds = { allow: ["allow_once", "allow_always"], always: ["allow_always", "allow_once"], reject: ["reject_once", "reject_always"] }[policy];
  for (const kind of kinds ?? []) {
    const hit = options.find((o) => o.kind === kind);
    if (hit) return hit;
  }
  return null;
}

/** All text a tool call update carries: its content blocks, raw output and title. */
export function toolCallText(update) {
  const parts = [];
  if (update.title) parts.push(update.title);
  for (const c of update.content ?? []) {
    if (c.type === "content" && c.content?.type === "text") parts.push(c.content.text);
    if (c.type === "diff") parts.push(`diff ${c.path}`);
  }
  if (update.rawOutput !== undefined && update.rawOutput !== null) {
    parts.push(typeof update.rawOutput === "string" ? update.rawOutput : JSON.stringify(update.rawOutput));
  }
  return parts.join("\n");
}

/** Tool calls seen in session updates, merged by toolCallId: [{id, title, kind, status, text, updates}]. */
export function toolCalls(updates) {
  const calls = new Map();
  for (const n of updates) {
    const u = n.update;
    if (u.sessionUpdate !== "tool_call" && u.sessionUpdate !== "tool_call_update") continue;
    const call = calls.get(u.toolCallId) ?? { id: u.toolCallId, title: null, kind: null, status: null, text: "", rawInput: null, updates: [] };
    if (u.title) call.title = u.title;
    if (u.kind) call.kind = u.kind;
    if (u.status) call.status = u.status;
    if (u.rawInput !== undefined) call.rawInput = u.rawInput;
    const text = toolCallText(u);
    if (text) call.text += (call.text ? "\n" : "") + text;
    call.updates.push(u);
    calls.set(u.toolCallId, call);
  }
  return [...calls.values()];
}

/** The agent's message text in session updates, concatenated. */
export function agentText(updates) {
  return updates
    .filter((n) => n.update.sessionUpdate === "agent_message_chunk" && n.update.content?.type === "text")
    .map((n) => n.update.content.text)
    .join("");
}

/**
 * Starts `command args` in its own process group and runs `op(session)` with an initialized ACP
 * connection. `session` has: ctx (the SDK's ClientContext), init (the initialize answer),
 * updates (session/update params, in arrival order), permissions (request_permission params,
 * each with the `chosen` option), child, and stderr(). The agent's process group is ended when
 * `op` settles; an agent that exits early rejects with its stderr.
 */
export async function withAgent({ command, args = [], env, cwd, logFile, permission = "allow", clientCapabilities }, op) {
  const child = spawnGroup(command, args, { env, cwd, logFile });
  const updates = [];
  const permissions = [];
  const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
  const app = acp
    .client({ name: "ctxfs-agent-tests" })
    .onNotification(acp.methods.client.session.update, ({ params }) => {
      updates.push(params);
    })
    .onRequest(acp.methods.client.session.requestPermission, ({ params }) => {
      const option = choose(params.options ?? [], typeof permission === "function" ? permission(params) : permission);
      permissions.push({ ...params, chosen: option?.kind ?? "cancelled" });
      return option ? { outcome: { outcome: "selected", optionId: option.optionId } } : { outcome: { outcome: "cancelled" } };
    });
  const died = child.exited.then(({ code, signal, error }) => {
    throw new Error(`agent ${command} exited early (code ${code}, signal ${signal}${error ? `, ${error.message}` : ""}); stderr:\n${child.stderrText().slice(-4000)}`);
  });
  died.catch(() => {});
  try {
    return await app.connectWith(stream, async (ctx) => {
      const init = await Promise.race([
        ctx.request(acp.methods.agent.initialize, {
          protocolVersion: acp.PROTOCOL_VERSION,
          clientCapabilities: clientCapabilities ?? { fs: { readTextFile: false, writeTextFile: false }, terminal: false },
          clientInfo: { name: "ctxfs-agent-tests", version: "1.0.0" },
        }),
        died,
      ]);
      const session = { ctx, init, updates, permissions, child, stderr: () => child.stderrText(), died };
      return await Promise.race([op(session), died]);
    });
  } finally {
    await killGroup(child);
  }
}

/**
 * Sends a prompt and waits for its answer, then lets late session/updates arrive (an update sent
 * just before the answer may be delivered after it) until none came for `quietMs`.
 */
export async function promptAndDrain(session, sessionId, text, { quietMs = 300, timeoutMs = 120000 } = {}) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer to session/prompt within ${timeoutMs} ms; stderr:\n${session.stderr().slice(-4000)}`)), timeoutMs);
  });
  try {
    const answer = await Promise.race([
      session.ctx.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text }] }),
      timeout,
      session.died,
    ]);
    let seen = -1;
    while (seen !== session.updates.length) {
      seen = session.updates.length;
      await new Promise((r) => setTimeout(r, quietMs));
    }
    return answer;
  } finally {
    clearTimeout(timer);
  }
}
