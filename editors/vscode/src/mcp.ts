// Offers `ctxfs mcp` to VS Code's MCP support (for MCP consumers such as agent mode with MCP
// tools), rooted at the workspace folders. It starts nothing itself: VS Code starts the server
// when a chat wants its tools. It is the alternative to the language model tools, not a second copy.
import * as vscode from 'vscode';
import { findBinary } from './binary';

export function registerMcp(): vscode.Disposable[] {
  const lm = vscode.lm as typeof vscode.lm & { registerMcpServerDefinitionProvider?: unknown };
  if (typeof lm.registerMcpServerDefinitionProvider !== 'function') return [];
  const changed = new vscode.EventEmitter<void>();
  const provider: vscode.McpServerDefinitionProvider<vscode.McpStdioServerDefinition> = {
    onDidChangeMcpServerDefinitions: changed.event,
    provideMcpServerDefinitions() {
      const config = vscode.workspace.getConfiguration('ctxfs');
      if (!config.get<boolean>('mcp.enabled', true)) return [];
      const folders = vscode.workspace.workspaceFolders ?? [];
      if (!folders.length) return [];
      const found = findBinary(config.inspect<string>('path')?.globalValue, process.env.PATH);
      if ('problem' in found) return [];
      // `ctxfs mcp` needs a posture: the first folder is its root (several folders: the first one
      // only; the LSP door, used by the language model tools, takes every folder).
      const args = ['mcp', '--root', folders[0].uri.fsPath];
      const def = new vscode.McpStdioServerDefinition('ctxfs', found.path, args, {}, '0.1.0');
      def.cwd = folders[0].uri;
      return [def];
    },
  };
  return [
    vscode.lm.registerMcpServerDefinitionProvider('ctxfs.mcp', provider),
    vscode.workspace.onDidChangeConfiguration((e) => e.affectsConfiguration('ctxfs') && changed.fire()),
    vscode.workspace.onDidChangeWorkspaceFolders(() => changed.fire()),
    changed,
  ];
}
