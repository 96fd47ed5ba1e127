// The extension's entry point: starts ctxfs for the window and wires the tools, views,
// approvals, mode item, MCP definition and commands. It holds no logic of its own beyond
// that wiring and the restart on a change of the settings that need one.
import * as vscode from 'vscode';
import { registerApprovals } from './approval';
import { registerMcp } from './mcp';
import { registerMode } from './mode';
import { Server } from './server';
import { registerTesting } from './testing';
import { registerTools } from './tools';
import { registerViews } from './views';

/** Settings whose change needs a new server. */
const RESTART_ON = ['ctxfs.path', 'ctxfs.mode', 'ctxfs.embedder', 'ctxfs.embedderModel', 'ctxfs.host', 'ctxfs.approvalTimeout', 'ctxfs.dataDirectory'];

let server: Server | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  const log = vscode.window.createOutputChannel('ctxfs', { log: true });
  server = new Server(context, log);
  const s = server;
  const toolNames = (context.extension.packageJSON.contributes.languageModelTools as { name: string }[]).map((t) => t.name);
  context.subscriptions.push(
    log,
    s,
    ...registerTools(s, toolNames),
    ...registerViews(s).disposables,
    ...registerApprovals(s),
    ...registerMode(s),
    ...registerMcp(),
    ...registerTesting(s),
    vscode.commands.registerCommand('ctxfs.showLog', () => log.show(true)),
    vscode.commands.registerCommand('ctxfs.restart', () => s.restart()),
    vscode.commands.registerCommand('ctxfs.openSettings', () => vscode.commands.executeCommand('workbench.action.openSettings', '@ext:ctxfs.ctxfs')),
    vscode.workspace.onDidChangeConfiguration((e) => {
      if (RESTART_ON.some((k) => e.affectsConfiguration(k))) {
        log.info('settings changed: restarting ctxfs');
        s.pickedMode = undefined;
        void s.restart();
      }
    }),
    vscode.workspace.onDidChangeWorkspaceFolders(() => {
      log.info('workspace folders changed: restarting ctxfs');
      void s.restart();
    }),
  );
  if (await s.start()) await s.resumeAll();
}

export async function deactivate(): Promise<void> {
  await server?.stop();
}
