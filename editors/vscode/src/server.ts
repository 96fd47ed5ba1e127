// The connection to ctxfs: starts `ctxfs lsp --stdio` through vscode-languageclient (one server
// per window), checks the protocol it speaks, keeps the ctxfs sessions (one per chat) and resumes
// them after a restart. It is not the UI: the views, tools and approval prompt use it.
import * as vscode from 'vscode';
import {
  CloseAction,
  ErrorAction,
  LanguageClient,
  RevealOutputChannelOn,
  State,
  TransportKind,
  type LanguageClientOptions,
  type ServerOptions,
} from 'vscode-languageclient/node';
import { findBinary } from './binary';
import { initializationOptions, protocolProblem, type Mode } from './options';
import type { CallAnswer, OpenSessionAnswer } from './protocol';

/** How many unexpected exits within RESTART_WINDOW are restarted before giving up. */
const MAX_RESTARTS = 4;
const RESTART_WINDOW_MS = 3 * 60 * 1000;
const SESSIONS_KEY = 'ctxfs.sessions';

export type Status =
  | { kind: 'stopped'; why?: string }
  | { kind: 'starting' }
  | { kind: 'running'; binary: string; version?: string }
  | { kind: 'failed'; why: string };

export interface SessionInfo {
  id: string;
  chain: OpenSessionAnswer['chain'];
  instructions: string;
}

export class Server implements vscode.Disposable {
  private client: LanguageClient | undefined;
  private exits: number[] = [];
  private stopping = false;
  /** chat key → ctxfs session id (kept in the workspace state, so a reload resumes them). */
  private sessions = new Map<string, string>();
  private infos = new Map<string, SessionInfo>();
  private opening = new Map<string, Promise<string>>();
  /** The session the views show: the one that ran the last call. */
  current: string | undefined;
  /** The mode the user picked in this window (applied to every session), if any. */
  pickedMode: Mode | undefined;
  status: Status = { kind: 'stopped' };

  private readonly changed = new vscode.EventEmitter<void>();
  /** Fires when sessions, results or the server's state changed (views refresh). */
  readonly onDidChange = this.changed.event;
  private readonly started = new vscode.EventEmitter<LanguageClient>();
  /** Fires after each (re)start with the running client (handlers are set up here). */
  readonly onDidStart = this.started.event;

  constructor(
    private readonly context: vscode.ExtensionContext,
    readonly log: vscode.LogOutputChannel,
  ) {
    const saved = context.workspaceState.get<Record<string, string>>(SESSIONS_KEY) ?? {};
    for (const [key, id] of Object.entries(saved)) this.sessions.set(key, id);
  }

  get running(): LanguageClient | undefined {
    return this.client && this.client.state === State.Running ? this.client : undefined;
  }

  /** Starts the server; a problem is shown as a notification with a way out, not thrown. */
  async start(): Promise<boolean> {
    if (this.client) return this.status.kind === 'running';
    if (!vscode.workspace.workspaceFolders?.length) {
      this.setStatus({ kind: 'stopped', why: 'no folder is open' });
      void this.offer(
        'ctxfs needs a folder: its tools work inside the workspace folders, and this window has none. Open a folder to start ctxfs.',
        [['Open Folder', 'workbench.action.files.openFolder']],
        'info',
      );
      return false;
    }
    const config = vscode.workspace.getConfiguration('ctxfs');
    const found = findBinary(userValue<string>(config, 'path'), process.env.PATH);
    if ('problem' in found) {
      this.fail(found.problem, [['Open Settings', 'ctxfs.openSettings']]);
      return false;
    }
    const mapped = initializationOptions({
      mode: config.get<string>('mode'),
      // An embedding server is sent the files' text: only the user's own settings may name one.
      embedder: userValue<string>(config, 'embedder'),
      embedderModel: userValue<string>(config, 'embedderModel'),
      host: config.get<string>('host'),
      approvalTimeout: config.get<number>('approvalTimeout'),
      data: userValue<string>(config, 'dataDirectory'),
    });
    for (const problem of mapped.problems) {
      this.log.warn(problem);
      void vscode.window.showWarningMessage(problem);
    }
    const serverOptions: ServerOptions = {
      command: found.path,
      // languageclient adds `--stdio` for the stdio transport: `ctxfs lsp --stdio`.
      args: ['lsp'],
      transport: TransportKind.stdio,
      options: { env: { ...process.env, CTXFS_LOG: process.env.CTXFS_LOG ?? 'info' } },
    };
    const clientOptions: LanguageClientOptions = {
      // Every file document: ctxfs reads the unsaved buffers of open files.
      documentSelector: [{ scheme: 'file' }],
      initializationOptions: mapped.options,
      outputChannel: this.log,
      revealOutputChannelOn: RevealOutputChannelOn.Never,
      errorHandler: {
        error: (_error, _message, count) => ({
          action: (count ?? 0) <= 3 ? ErrorAction.Continue : ErrorAction.Shutdown,
          handled: true,
        }),
        closed: () => this.closed(),
      },
    };
    this.setStatus({ kind: 'starting' });
    this.log.info(`starting ${found.path} lsp --stdio (from ${found.from}) with options ${JSON.stringify(mapped.options)}`);
    const client = new LanguageClient('ctxfs', 'ctxfs', serverOptions, clientOptions);
    this.client = client;
    client.onDidChangeState((e) => {
      if (e.newState === State.Running && e.oldState === State.Starting && this.status.kind === 'running') {
        // A restart after an unexpected exit: the sessions are resumed on the new server.
        void this.afterRestart(client);
      }
    });
    try {
      await client.start();
    } catch (e) {
      this.client = undefined;
      this.fail(`ctxfs could not be started (${found.path}): ${message(e)}`, [
        ['Show Log', 'ctxfs.showLog'],
        ['Open Settings', 'ctxfs.openSettings'],
      ]);
      return false;
    }
    const experimental = client.initializeResult?.capabilities.experimental;
    const problem = protocolProblem(experimental, found.path);
    if (problem) {
      this.stopping = true;
      await client.stop().catch(() => undefined);
      this.stopping = false;
      this.client = undefined;
      this.fail(problem, [
        ['Open Settings', 'ctxfs.openSettings'],
        ['Show Log', 'ctxfs.showLog'],
      ]);
      return false;
    }
    const version = (experimental as { ctxfs?: { version?: string } }).ctxfs?.version;
    this.setStatus({ kind: 'running', binary: found.path, version });
    this.log.info(`ctxfs ${version ?? ''} is running (protocol ${(experimental as { ctxfs: { protocol: number } }).ctxfs.protocol})`);
    this.started.fire(client);
    return true;
  }

  /** Stops the server (sessions stay resumable: their ids are kept). */
  async stop(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    this.infos.clear();
    if (client) {
      this.stopping = true;
      try {
        await client.stop(5000);
      } catch (e) {
        this.log.warn(`stopping ctxfs: ${message(e)}`);
      } finally {
        this.stopping = false;
      }
    }
    this.setStatus({ kind: 'stopped' });
  }

  /** Restarts run one after another (two settings files changing fire two events). */
  private restarting: Promise<void> = Promise.resolve();

  /** Stops and starts again, then resumes the sessions. */
  restart(): Promise<void> {
    const run = async () => {
      await this.stop();
      this.exits = [];
      if (await this.start()) await this.resumeAll();
    };
    this.restarting = this.restarting.then(run, run);
    return this.restarting;
  }

  /** The server ended without being asked: restart it unless it keeps dying. */
  private closed(): { action: CloseAction; handled: boolean } {
    if (this.stopping) return { action: CloseAction.DoNotRestart, handled: true };
    const now = Date.now();
    this.exits = this.exits.filter((t) => now - t < RESTART_WINDOW_MS);
    this.exits.push(now);
    this.infos.clear();
    if (this.exits.length > MAX_RESTARTS) {
      const why = `ctxfs stopped ${this.exits.length} times in 3 minutes, so it is not restarted again. The log says why.`;
      const dead = this.client;
      this.client = undefined;
      // Disposed once languageclient has finished with its close handling.
      setTimeout(() => void dead?.dispose().catch(() => undefined), 0);
      this.fail(why, [
        ['Restart ctxfs', 'ctxfs.restart'],
        ['Show Log', 'ctxfs.showLog'],
      ]);
      return { action: CloseAction.DoNotRestart, handled: true };
    }
    this.log.warn('ctxfs stopped unexpectedly; restarting it');
    return { action: CloseAction.Restart, handled: true };
  }

  private async afterRestart(client: LanguageClient): Promise<void> {
    this.started.fire(client);
    const resumed = await this.resumeAll();
    const ids = resumed.length ? ` and resumed session${resumed.length > 1 ? 's' : ''} ${resumed.join(', ')}` : '';
    void this.offer(`ctxfs stopped unexpectedly; it was restarted${ids}. Earlier results can still be recalled.`, [
      ['Show Log', 'ctxfs.showLog'],
    ], 'warning');
  }

  /** Reopens every known session on the (new) server; answers the ids resumed. */
  async resumeAll(): Promise<string[]> {
    const done: string[] = [];
    for (const id of new Set(this.sessions.values())) {
      try {
        await this.openSession(id);
        done.push(id);
      } catch (e) {
        this.log.warn(`session ${id} could not be resumed: ${message(e)}`);
      }
    }
    this.changed.fire();
    return done;
  }

  /** Opens or resumes a session; `applyMode` puts it in the mode picked in this window. */
  private async openSession(resume: string | undefined, applyMode = true): Promise<SessionInfo> {
    const client = this.need();
    const params: Record<string, unknown> = { clientName: 'VS Code' };
    if (resume) params.resume = resume;
    const answer = await client.sendRequest<OpenSessionAnswer>('ctxfs/openSession', params);
    const info = { id: answer.session, chain: answer.chain, instructions: answer.instructions };
    this.infos.set(info.id, info);
    if (applyMode && this.pickedMode) {
      await client.sendRequest('ctxfs/setMode', { session: info.id, mode: this.pickedMode }).catch((e) => {
        this.log.warn(`setting mode on ${info.id}: ${message(e)}`);
      });
    }
    return info;
  }

  /** The ctxfs session for a chat (opened or resumed on first use). */
  async session(key: string): Promise<string> {
    const known = this.sessions.get(key);
    if (known && this.infos.has(known)) return known;
    const pending = this.opening.get(key);
    if (pending) return pending;
    const opening = (async () => {
      let info: SessionInfo;
      try {
        info = await this.openSession(known);
      } catch (e) {
        if (!known) throw e;
        this.log.warn(`session ${known} could not be resumed (${message(e)}); opening a new one`);
        info = await this.openSession(undefined);
      }
      this.sessions.set(key, info.id);
      await this.context.workspaceState.update(SESSIONS_KEY, Object.fromEntries(this.sessions));
      this.changed.fire();
      return info.id;
    })();
    this.opening.set(key, opening);
    try {
      return await opening;
    } finally {
      this.opening.delete(key);
    }
  }

  info(session: string | undefined): SessionInfo | undefined {
    return session ? this.infos.get(session) : undefined;
  }

  /** Every session id this window knows. */
  sessionIds(): string[] {
    return [...new Set(this.sessions.values())];
  }

  /** Refreshes a session's chain (openSession answers an open session as is). */
  async refreshSession(session: string): Promise<SessionInfo> {
    return this.openSession(session, false);
  }

  async call(session: string, tool: string, args: unknown, token?: vscode.CancellationToken): Promise<CallAnswer> {
    const answer = await this.need().sendRequest<CallAnswer>('ctxfs/call', { session, tool, args }, token);
    this.current = session;
    this.changed.fire();
    return answer;
  }

  async request<T>(method: string, params: unknown): Promise<T> {
    return this.need().sendRequest<T>(method, params);
  }

  private need(): LanguageClient {
    const client = this.running;
    if (!client) {
      const why = this.status.kind === 'failed' || this.status.kind === 'stopped' ? this.status.why : undefined;
      throw new Error(`ctxfs is not running${why ? `: ${why}` : ''}`);
    }
    return client;
  }

  private fail(why: string, actions: [string, string][]): void {
    this.log.error(why);
    this.setStatus({ kind: 'failed', why });
    void this.offer(why, actions, 'error');
  }

  /** A notification with buttons that run commands. */
  async offer(text: string, actions: [string, string][], level: 'info' | 'warning' | 'error'): Promise<void> {
    const show =
      level === 'error' ? vscode.window.showErrorMessage : level === 'warning' ? vscode.window.showWarningMessage : vscode.window.showInformationMessage;
    const picked = await show(text, ...actions.map(([label]) => label));
    const command = actions.find(([label]) => label === picked)?.[1];
    if (command) await vscode.commands.executeCommand(command);
  }

  private setStatus(status: Status): void {
    this.status = status;
    this.changed.fire();
  }

  dispose(): void {
    void this.stop();
    this.changed.dispose();
    this.started.dispose();
  }
}

/** A setting's value from the user's own settings only (not a workspace's). */
function userValue<T>(config: vscode.WorkspaceConfiguration, key: string): T | undefined {
  const inspected = config.inspect<T>(key);
  return inspected?.globalValue ?? inspected?.defaultValue;
}

export function message(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
