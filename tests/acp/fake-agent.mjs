// A scripted ACP agent for the relay's tests, written with the official SDK.
// It spawns the stdio MCP servers it is handed in session/new, session/load and
// session/resume (with the official MCP SDK, as real agents do), and each prompt
// is a JSON script of steps: call a tool of a server (reporting it the way Claude
// Code's adapter does: tool_call, its own permission request, tool_call_update),
// report what it saw, send extension messages, wait for a cancel, crash. It is not
// a model and decides nothing: the test says every step.
//
// Modes (argv): --exit-at-start N, --version V (answers initialize with V),
// --flood-lines, --flood-line, --claude (advertises Claude Code's _meta),
// --style opencode (names tools ctxfs_X instead of mcp__ctxfs__X).
import * as acp from "@agentclientprotocol/sdk";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { Readable, Writable } from "node:stream";

const argv = process.argv.slice(2);
const flag = (name) => argv.includes(name);
const value = (name) => {
  const at = argv.indexOf(name);
  return at >= 0 ? argv[at + 1] : undefined;
};

if (process.env.FAKE_AGENT_PIDFILE) {
  (await import("node:fs")).writeFileSync(process.env.FAKE_AGENT_PIDFILE, String(process.pid));
}
if (value("--exit-at-start") !== undefined) {
  process.stderr.write("fake agent: giving up at start\n");
  process.exit(Number(value("--exit-at-start")));
}
if (flag("--flood-lines")) {
  // Not ACP: endless lines of text on stdout.
  const line = "this is not an ACP message, and neither is the next one\n";
  const more = () => {
    while (process.stdout.write(line.repeat(64))) {}
    process.stdout.once("drain", more);
  };
  more();
} else if (flag("--flood-line")) {
  // One line that never ends.
  const chunk = "x".repeat(1 << 20);
  const more = () => {
    while (process.stdout.write(chunk)) {}
    process.stdout.once("drain", more);
  };
  more();
} else {
  serve();
}

function serve() {
  const version = Number(value("--version") ?? acp.PROTOCOL_VERSION);
  const claude = flag("--claude");
  const style = value("--style") ?? "claude";
  const sessions = new Map();
  const seen = { initialize: null, sessions: {}, cancels: [], extNotifications: [], mcpPids: [], permissions: [] };
  let nextSession = 1;
  let nextCall = 1;

  async function connectServers(servers) {
    const connected = [];
    for (const server of servers ?? []) {
      if (server.type && server.type !== "stdio") continue;
      const env = Object.fromEntries((server.env ?? []).map((e) => [e.name, e.value]));
      const transport = new StdioClientTransport({
        command: server.command,
        args: server.args,
        env: { ...process.env, ...env },
        stderr: "inherit",
      });
      const client = new Client({ name: "fake-agent", version: "1.0.0" });
      await client.connect(transport);
      seen.mcpPids.push(transport.pid);
      connected.push({ name: server.name, client, transport });
    }
    return connected;
  }

  async function openSession(id, params) {
    seen.sessions[id] = params;
    const old = sessions.get(id);
    const servers = await connectServers(params.mcpServers);
    sessions.set(id, { servers, cancelled: false, wake: null, old });
  }

  const toolName = (server, tool) => (style === "opencode" ? `${server}_${tool}` : `mcp__${server}__${tool}`);

  async function call(ctx, sessionId, step) {
    const session = sessions.get(sessionId);
    // `old`: the server the session had before it was loaded again (still running).
    const servers = step.old ? session.old.servers : session.servers;
    const server = servers.find((s) => s.name === (step.server ?? "ctxfs"));
    if (!server) throw new Error(`no MCP server named ${step.server ?? "ctxfs"}`);
    const toolCallId = `call-${nextCall++}`;
    const name = toolName(server.name, step.tool);
    const meta = style === "claude" ? { _meta: { claudeCode: { toolName: name } } } : {};
    await ctx.client.notify(acp.methods.client.session.update, {
      sessionId,
      update: { sessionUpdate: "tool_call", toolCallId, title: name, kind: "other", status: "pending", rawInput: step.args, content: [], ...meta },
    });
    if (step.ask !== false) {
      // As Claude Code's adapter does before an MCP tool runs.
      const answer = await ctx.client.request(acp.methods.client.session.requestPermission, {
        sessionId,
        toolCall: { toolCallId, title: name, kind: "other", rawInput: step.args, content: [] },
        options: [
          { kind: "allow_always", name: "Always Allow", optionId: "allow_always" },
          { kind: "allow_once", name: "Allow", optionId: "allow" },
          { kind: "reject_once", name: "Reject", optionId: "reject" },
        ],
      });
      seen.permissions.push({ toolCallId, outcome: answer.outcome });
      if (answer.outcome.outcome !== "selected" || answer.outcome.optionId === "reject") {
        await ctx.client.notify(acp.methods.client.session.update, {
          sessionId,
          update: { sessionUpdate: "tool_call_update", toolCallId, status: "failed", ...meta },
        });
        return;
      }
    }
    const result = await server.client.callTool({ name: step.tool, arguments: step.args }, undefined, { timeout: 600_000 });
    const text = result.content.filter((c) => c.type === "text").map((c) => c.text).join("\n");
    const content = step.bare ? {} : { content: [{ type: "content", content: { type: "text", text: "```\n" + text + "\n```" } }] };
    await ctx.client.notify(acp.methods.client.session.update, {
      sessionId,
      update: { sessionUpdate: "tool_call_update", toolCallId, status: result.isError ? "failed" : "completed", rawOutput: step.bare ? undefined : result.content, ...content, ...meta },
    });
  }

  async function say(ctx, sessionId, text) {
    await ctx.client.notify(acp.methods.client.session.update, {
      sessionId,
      update: { sessionUpdate: "agent_message_chunk", content: { type: "text", text } },
    });
  }

  const app = acp
    .agent({ name: "fake-agent" })
    .onRequest(acp.methods.agent.initialize, ({ params }) => {
      seen.initialize = params;
      return {
        protocolVersion: version,
        agentCapabilities: {
          loadSession: true,
          sessionCapabilities: { resume: {} },
          ...(claude ? { _meta: { claudeCode: { promptQueueing: true } } } : {}),
        },
        agentInfo: { name: "fake-agent", version: "1.0.0" },
        _meta: { fake: { answered: true } },
      };
    })
    .onRequest(acp.methods.agent.session.new, async ({ params }) => {
      const id = `fake-session-${nextSession++}`;
      await openSession(id, params);
      return { sessionId: id, _meta: { fake: { opened: id } } };
    })
    .onRequest(acp.methods.agent.session.load, async ({ params }) => {
      await openSession(params.sessionId, params);
      return {};
    })
    .onRequest(acp.methods.agent.session.resume, async ({ params }) => {
      await openSession(params.sessionId, params);
      return {};
    })
    .onNotification(acp.methods.agent.session.cancel, ({ params }) => {
      seen.cancels.push(params);
      const session = sessions.get(params.sessionId);
      if (session) {
        session.cancelled = true;
        session.wake?.();
      }
    })
    .onRequest(acp.methods.agent.session.prompt, async ({ params, client }) => {
      const ctx = { client };
      const session = sessions.get(params.sessionId);
      session.cancelled = false;
      const script = JSON.parse(params.prompt.find((b) => b.type === "text").text);
      for (const step of script.steps) {
        if (step.afterCancel) {
          // A slow agent: it runs a call it had already decided on after the user cancelled.
          await say(ctx, params.sessionId, "WAITING");
          await new Promise((resolve) => {
            session.wake = resolve;
            if (session.cancelled) resolve();
          });
          await call(ctx, params.sessionId, { tool: step.afterCancel, ...step, ask: false });
          return { stopReason: "cancelled" };
        }
        if (session.cancelled) return { stopReason: "cancelled" };
        if (step.call) await call(ctx, params.sessionId, { tool: step.call, ...step });
        if (step.say) await say(ctx, params.sessionId, step.say);
        if (step.report) await say(ctx, params.sessionId, "REPORT " + JSON.stringify({ pid: process.pid, ...seen }));
        if (step.extRequest) {
          const answer = await client.request(step.extRequest.method, step.extRequest.params);
          await say(ctx, params.sessionId, "EXT " + JSON.stringify(answer));
        }
        if (step.extNotify) await client.notify(step.extNotify.method, step.extNotify.params);
        if (step.waitCancel) {
          await say(ctx, params.sessionId, "WAITING");
          await new Promise((resolve) => {
            session.wake = resolve;
            if (session.cancelled) resolve();
          });
          return { stopReason: "cancelled" };
        }
        if (step.crash !== undefined) {
          process.stderr.write("fake agent: crashing as told\n");
          process.exit(step.crash);
        }
      }
      return { stopReason: "end_turn", _meta: { fake: { steps: script.steps.length } } };
    })
    .onRequest("*", ({ method, params }) => ({ echoed: { method, params } }))
    .onNotification("*", ({ method, params }) => {
      seen.extNotifications.push({ method, params });
    });

  const connection = app.connect(acp.ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin)));
  // Like a Node wrapper that leaves when its app does: its MCP servers are left behind for the relay to end.
  connection.closed.then(() => process.exit(0));
}
