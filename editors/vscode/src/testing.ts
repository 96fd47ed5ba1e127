// Test-only commands, registered only when the environment variable CTXFS_VSCODE_TEST names a
// directory (the end-to-end test sets it for code-server). They drive what a chat would drive,
// through the same public APIs (vscode.lm.invokeTool), and write what happened to that
// directory for the test to read. Users never see them.
import { appendFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import * as vscode from 'vscode';
import type { Server } from './server';

export function registerTesting(server: Server): vscode.Disposable[] {
  const dir = process.env.CTXFS_VSCODE_TEST;
  if (!dir) return [];
  void vscode.commands.executeCommand('setContext', 'ctxfs.testing', true);
  let n = 0;
  const invoke = async (given?: string) => {
    const json = given ?? (await vscode.window.showInputBox({ title: 'ctxfs test: tool call', prompt: '{"tool": "ctxfs_read", "input": {...}}', ignoreFocusOut: true }));
    if (!json) return;
    const call = JSON.parse(json) as { tool: string; input: object; tag?: string };
    const seq = ++n;
    let text: string;
    let error: string | undefined;
    try {
      const result = await vscode.lm.invokeTool(call.tool, { input: call.input, toolInvocationToken: undefined });
      text = result.content.map((p) => (p instanceof vscode.LanguageModelTextPart ? p.value : JSON.stringify(p))).join('');
    } catch (e) {
      text = '';
      error = e instanceof Error ? e.message : String(e);
    }
    appendFileSync(join(dir, 'calls.jsonl'), JSON.stringify({ seq, tag: call.tag, tool: call.tool, text, error }) + '\n');
  };
  const state = () => {
    writeFileSync(
      join(dir, 'state.json'),
      JSON.stringify({ status: server.status, sessions: server.sessionIds(), current: server.current, mode: server.pickedMode }),
    );
  };
  return [vscode.commands.registerCommand('ctxfs.test.invokeTool', invoke), vscode.commands.registerCommand('ctxfs.test.state', state)];
}
