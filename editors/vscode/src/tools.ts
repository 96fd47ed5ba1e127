// ctxfs's tools as VS Code language model tools (`ctxfs_read`, `ctxfs_edit`, …): each invocation
// runs `ctxfs/call` in the ctxfs session of its chat. It asks no confirmation of its own: ctxfs's
// gate is the one approval for changes (see approval.ts). The contributions themselves are
// generated into package.json by scripts/gen-tools.mjs.
import * as vscode from 'vscode';
import type { Server } from './server';

/** A chat session's resource as a string, whether VS Code passed a Uri or its plain JSON form. */
function resourceKey(resource: unknown): string | undefined {
  if (!resource) return undefined;
  if (typeof resource === 'string') return resource;
  if (resource instanceof vscode.Uri) return resource.toString();
  const c = resource as { scheme?: unknown; authority?: string; path?: string; query?: string; fragment?: string };
  if (typeof c.scheme !== 'string') return undefined;
  return vscode.Uri.from({ scheme: c.scheme, authority: c.authority, path: c.path ?? '', query: c.query, fragment: c.fragment }).toString();
}

/** The chat a tool invocation belongs to, from VS Code's (opaque) invocation token. */
export function chatKey(token: unknown): string {
  const resource = resourceKey((token as { sessionResource?: unknown } | undefined)?.sessionResource);
  if (resource) return `chat:${resource}`;
  const sessionId = (token as { sessionId?: unknown } | undefined)?.sessionId;
  if (typeof sessionId === 'string') return `chat:${sessionId}`;
  return 'window';
}

/** What VS Code 1.139 passes to prepareInvocation besides the input (not in the stable types). */
interface PrepareExtras {
  chatRequestId?: string;
  chatSessionResource?: unknown;
}

/** One line saying what a call does, for VS Code's progress message. */
export function describeCall(tool: string, input: Record<string, unknown>): string {
  const target = input.file_path ?? input.path ?? input.source ?? input.pattern ?? input.query ?? input.id ?? input.name;
  return `ctxfs ${tool}${typeof target === 'string' ? ` ${target}` : ''}`;
}

export function registerTools(server: Server, names: string[]): vscode.Disposable[] {
  // The last model request seen per chat, and the chats whose next call starts a new request.
  const lastRequest = new Map<string, string>();
  const newRequest = new Set<string>();
  return names.map((name) => {
    const tool = name.replace(/^ctxfs_/, '');
    return vscode.lm.registerTool<Record<string, unknown>>(name, {
      prepareInvocation(options) {
        const extras = options as unknown as PrepareExtras;
        if (extras.chatRequestId && extras.chatSessionResource) {
          const key = chatKey({ sessionResource: extras.chatSessionResource });
          if (lastRequest.get(key) !== extras.chatRequestId) {
            lastRequest.set(key, extras.chatRequestId);
            newRequest.add(key);
          }
        }
        // No confirmationMessages: a change is confirmed once, by ctxfs's own prompt, which
        // offers its grants (this session / file / directory) and shows the diff beside it.
        return { invocationMessage: describeCall(tool, options.input ?? {}) };
      },
      async invoke(options, token) {
        const key = chatKey(options.toolInvocationToken);
        const session = await server.session(key);
        if (newRequest.delete(key)) {
          const carries = vscode.workspace.getConfiguration('ctxfs').get<string>('host') !== 'fresh';
          await server.request('ctxfs/newRequest', { session, carriesEarlier: carries }).catch((e) => {
            server.log.warn(`ctxfs/newRequest: ${String(e)}`);
          });
        }
        const answer = await server.call(session, tool, options.input ?? {}, token);
        const first = answer.text.split('\n', 1)[0];
        server.log.info(`${session} ${tool}: ${first}`);
        return new vscode.LanguageModelToolResult([new vscode.LanguageModelTextPart(answer.text)]);
      },
    });
  });
}
