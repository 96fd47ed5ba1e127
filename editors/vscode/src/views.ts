// The "ctxfs" views (Results, Changes, Instructions), the read-only documents they open
// (stored results, the before and after of a change) and the links that make `#000c` ids
// clickable. Data comes from ctxfs on each refresh; nothing is cached across restarts but
// the session ids the server module keeps.
import * as vscode from 'vscode';
import { findIds } from './ids';
import type { ChainFile, ChangeEntry, ChangeText, ResultEntry } from './protocol';
import { homedir } from 'node:os';
import { chainFilePath, chainLabel, changeLabel, orderedChain, resultDocument, resultLabel } from './render';
import { message, type Server } from './server';

export const RESULT_SCHEME = 'ctxfs-result';
export const CHANGE_SCHEME = 'ctxfs-change';

function roots(): string[] {
  return (vscode.workspace.workspaceFolders ?? []).map((f) => f.uri.fsPath);
}

/** `ctxfs-result:/#000c read a.rs?session=S&id=%23000c`: the tab shows the id and what it was. */
export function resultUri(session: string, id: string, entry?: ResultEntry): vscode.Uri {
  const base = entry?.path ? entry.path.split('/').pop() : undefined;
  const title = `${id} ${entry?.tool ?? 'result'}${base ? ' ' + base : ''}`.replace(/\//g, '∕');
  return vscode.Uri.from({
    scheme: RESULT_SCHEME,
    path: `/${title}`,
    query: new URLSearchParams({ session, id }).toString(),
  });
}

function changeUri(side: 'before' | 'after', session: string, change: ChangeEntry): vscode.Uri {
  return vscode.Uri.from({
    scheme: CHANGE_SCHEME,
    path: change.path,
    query: new URLSearchParams({ side, session, id: change.id }).toString(),
  });
}

class ResultsView implements vscode.TreeDataProvider<ResultEntry> {
  private readonly emitter = new vscode.EventEmitter<void>();
  readonly onDidChangeTreeData = this.emitter.event;
  /** The last list fetched, by session: the link provider and document titles use it. */
  readonly known = new Map<string, ResultEntry[]>();
  constructor(private readonly server: Server) {}
  refresh(): void {
    this.emitter.fire();
  }
  async getChildren(): Promise<ResultEntry[]> {
    const session = this.server.current ?? this.server.sessionIds()[0];
    if (!session || !this.server.running) return [];
    try {
      const answer = await this.server.request<{ results: ResultEntry[] }>('ctxfs/results', { session });
      this.known.set(session, answer.results);
      return answer.results;
    } catch (e) {
      this.server.log.warn(`ctxfs/results: ${message(e)}`);
      return [];
    }
  }
  getTreeItem(e: ResultEntry): vscode.TreeItem {
    const l = resultLabel(e, roots());
    const item = new vscode.TreeItem(l.label);
    item.description = l.description;
    item.tooltip = l.tooltip;
    item.iconPath = new vscode.ThemeIcon(e.isError ? 'error' : e.stub ? 'references' : e.capped ? 'fold' : 'output');
    item.contextValue = 'ctxfsResult';
    const session = this.server.current ?? this.server.sessionIds()[0] ?? '';
    item.command = { command: 'ctxfs.openResult', title: 'Open Result', arguments: [e.id, session] };
    return item;
  }
}

class ChangesView implements vscode.TreeDataProvider<ChangeEntry> {
  private readonly emitter = new vscode.EventEmitter<void>();
  readonly onDidChangeTreeData = this.emitter.event;
  constructor(private readonly server: Server) {}
  refresh(): void {
    this.emitter.fire();
  }
  async getChildren(): Promise<ChangeEntry[]> {
    const session = this.server.current ?? this.server.sessionIds()[0];
    if (!session || !this.server.running) return [];
    try {
      const answer = await this.server.request<{ changes: ChangeEntry[] }>('ctxfs/changes', { session });
      return answer.changes;
    } catch (e) {
      this.server.log.warn(`ctxfs/changes: ${message(e)}`);
      return [];
    }
  }
  getTreeItem(c: ChangeEntry): vscode.TreeItem {
    const l = changeLabel(c, roots());
    const item = new vscode.TreeItem(l.label);
    item.description = l.description;
    item.tooltip = l.tooltip;
    item.resourceUri = vscode.Uri.file(c.path);
    item.iconPath = new vscode.ThemeIcon(
      c.kind === 'created' ? 'diff-added' : c.kind === 'deleted' ? 'diff-removed' : c.kind === 'moved' ? 'diff-renamed' : 'diff-modified',
    );
    item.contextValue = 'ctxfsChange';
    const session = this.server.current ?? this.server.sessionIds()[0] ?? '';
    item.command = { command: 'ctxfs.openChange', title: 'Open Change', arguments: [c, session] };
    return item;
  }
}

interface ChainItem {
  file?: ChainFile;
  index: number;
  note?: string;
}

class InstructionsView implements vscode.TreeDataProvider<ChainItem> {
  private readonly emitter = new vscode.EventEmitter<void>();
  readonly onDidChangeTreeData = this.emitter.event;
  constructor(private readonly server: Server) {}
  refresh(): void {
    this.emitter.fire();
  }
  async getChildren(): Promise<ChainItem[]> {
    if (!this.server.running) return [];
    let session = this.server.current ?? this.server.sessionIds()[0];
    try {
      // Without a chat yet, the window's own session shows the chain a chat would get.
      session ??= await this.server.session('window');
      const info = await this.server.refreshSession(session);
      const files = orderedChain(info.chain.files).map((file, index) => ({ file, index }));
      const notes = info.chain.notes.map((note, i) => ({ note, index: files.length + i }));
      return [...files, ...notes];
    } catch (e) {
      this.server.log.warn(`instruction chain: ${message(e)}`);
      return [];
    }
  }
  getTreeItem(c: ChainItem): vscode.TreeItem {
    if (!c.file) {
      const item = new vscode.TreeItem(c.note ?? '');
      item.iconPath = new vscode.ThemeIcon('info');
      return item;
    }
    const path = chainFilePath(c.file.path, roots(), homedir());
    const l = chainLabel(c.file, c.index, roots(), path);
    const item = new vscode.TreeItem(l.label);
    item.description = l.description;
    item.tooltip = l.tooltip;
    item.iconPath = new vscode.ThemeIcon(c.file.origin === 'global' ? 'globe' : 'book');
    if (path) {
      item.resourceUri = vscode.Uri.file(path);
      item.command = { command: 'vscode.open', title: 'Open', arguments: [vscode.Uri.file(path)] };
    }
    return item;
  }
}

/** Registers the views, documents, links and the commands that open results and changes. */
export function registerViews(server: Server): { disposables: vscode.Disposable[]; refresh: () => void } {
  const results = new ResultsView(server);
  const changes = new ChangesView(server);
  const instructions = new InstructionsView(server);
  let timer: ReturnType<typeof setTimeout> | undefined;
  const refresh = () => {
    if (timer) clearTimeout(timer);
    timer = setTimeout(() => {
      results.refresh();
      changes.refresh();
      instructions.refresh();
    }, 150);
  };

  const resultDocs = new vscode.EventEmitter<vscode.Uri>();
  const resultProvider: vscode.TextDocumentContentProvider = {
    onDidChange: resultDocs.event,
    async provideTextDocumentContent(uri) {
      const q = new URLSearchParams(uri.query);
      const session = q.get('session') ?? '';
      const id = q.get('id') ?? '';
      try {
        const answer = await server.request<{ text: string }>('ctxfs/recall', { session, id });
        const entry = results.known.get(session)?.find((e) => e.id === id);
        return resultDocument(entry, id, answer.text);
      } catch (e) {
        return `ctxfs could not recall ${id} of session ${session}: ${message(e)}\n`;
      }
    },
  };
  const changeProvider: vscode.TextDocumentContentProvider = {
    async provideTextDocumentContent(uri) {
      const q = new URLSearchParams(uri.query);
      try {
        const text = await server.request<ChangeText>('ctxfs/changeText', { session: q.get('session'), id: q.get('id'), path: uri.path });
        const side = q.get('side') === 'before' ? text.before : text.after;
        return side ?? '';
      } catch (e) {
        return `ctxfs could not show this change: ${message(e)}\n`;
      }
    },
  };

  const linkSelector: vscode.DocumentSelector = [{ scheme: RESULT_SCHEME }, { scheme: 'output' }];
  const sessionOf = (doc: vscode.TextDocument) =>
    doc.uri.scheme === RESULT_SCHEME ? new URLSearchParams(doc.uri.query).get('session') ?? undefined : server.current;
  const links: vscode.DocumentLinkProvider = {
    provideDocumentLinks(doc) {
      const session = sessionOf(doc) ?? server.sessionIds()[0];
      if (!session) return [];
      const text = doc.getText();
      const known = results.known.get(session);
      return findIds(text)
        .filter((m) => !known || known.some((e) => e.id === m.id) || doc.uri.scheme === RESULT_SCHEME)
        .map((m) => {
          const range = new vscode.Range(doc.positionAt(m.start), doc.positionAt(m.end));
          const args = encodeURIComponent(JSON.stringify([m.id, session]));
          const link = new vscode.DocumentLink(range, vscode.Uri.parse(`command:ctxfs.openResult?${args}`));
          link.tooltip = `Open ctxfs result ${m.id}`;
          return link;
        });
    },
  };
  const hovers: vscode.HoverProvider = {
    provideHover(doc, position) {
      const session = sessionOf(doc);
      const offset = doc.offsetAt(position);
      const match = findIds(doc.lineAt(position.line).text).find((m) => {
        const start = doc.offsetAt(new vscode.Position(position.line, m.start));
        return start <= offset && offset <= start + (m.end - m.start);
      });
      if (!match || !session) return undefined;
      const entry = results.known.get(session)?.find((e) => e.id === match.id);
      const args = encodeURIComponent(JSON.stringify([match.id, session]));
      const md = new vscode.MarkdownString(`**${match.id}**${entry ? ` — ${entry.title}` : ''}\n\n[Open the stored result](command:ctxfs.openResult?${args})`);
      md.isTrusted = { enabledCommands: ['ctxfs.openResult'] };
      return new vscode.Hover(md);
    },
  };

  const openResult = async (id: string, session?: string) => {
    const s = session || server.current || server.sessionIds()[0];
    if (!s) {
      void vscode.window.showWarningMessage('ctxfs has no session yet: results appear after a tool call.');
      return;
    }
    const entry = results.known.get(s)?.find((e) => e.id === id);
    let doc = await vscode.workspace.openTextDocument(resultUri(s, id, entry));
    // Its own language: ids such as #0001 are not colours (no colour boxes), long lines wrap.
    if (doc.languageId !== 'ctxfs-result') doc = await vscode.languages.setTextDocumentLanguage(doc, 'ctxfs-result');
    await vscode.window.showTextDocument(doc, { preview: true });
  };
  const openChange = async (change: ChangeEntry, session?: string) => {
    const s = session || server.current || server.sessionIds()[0] || '';
    const name = change.path.split('/').pop();
    await vscode.commands.executeCommand(
      'vscode.diff',
      changeUri('before', s, change),
      changeUri('after', s, change),
      `${change.id} ${change.tool} ${name} (before ↔ after)`,
      { preview: true },
    );
  };

  const trees = [
    vscode.window.createTreeView('ctxfs.results', { treeDataProvider: results }),
    vscode.window.createTreeView('ctxfs.changes', { treeDataProvider: changes }),
    vscode.window.createTreeView('ctxfs.instructions', { treeDataProvider: instructions }),
  ];
  /** Each view says which session it shows, or why there is nothing to show. */
  const describe = () => {
    const session = server.current ?? server.sessionIds()[0];
    const status = server.status;
    const why =
      status.kind === 'failed' || status.kind === 'stopped'
        ? `ctxfs is not running${status.why ? `: ${status.why.replace(/\.$/, '')}` : ''}. See ctxfs: Show Log.`
        : undefined;
    for (const tree of trees) {
      tree.description = session ? `session ${session}` : undefined;
      tree.message = why;
    }
  };
  describe();

  const disposables: vscode.Disposable[] = [
    ...trees,
    server.onDidChange(describe),
    vscode.workspace.registerTextDocumentContentProvider(RESULT_SCHEME, resultProvider),
    vscode.workspace.registerTextDocumentContentProvider(CHANGE_SCHEME, changeProvider),
    vscode.languages.registerDocumentLinkProvider(linkSelector, links),
    vscode.languages.registerHoverProvider(linkSelector, hovers),
    vscode.commands.registerCommand('ctxfs.openResult', openResult),
    vscode.commands.registerCommand('ctxfs.openChange', openChange),
    vscode.commands.registerCommand('ctxfs.refreshViews', refresh),
    server.onDidChange(refresh),
    resultDocs,
  ];
  return { disposables, refresh };
}
