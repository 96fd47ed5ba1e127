// The one approval for a change: ctxfs's own prompt (`window/showMessageRequest`, answered with
// one of its choices, which ctxfs remembers as grants), shown as a VS Code notification, with
// the change's diff opened beside it from the `ctxfs/approvalRequest` notification. VS Code's
// tool confirmation is not used (tools.ts returns no confirmationMessages), so nothing asks twice.
import * as vscode from 'vscode';
import type { LanguageClient } from 'vscode-languageclient/node';
import type { ApprovalRequest } from './protocol';
import type { Server } from './server';

export const APPROVAL_SCHEME = 'ctxfs-approval';

interface MessageRequestParams {
  type: number;
  message: string;
  actions?: { title: string }[];
}

/** The approval texts shown in diff editors, by URI (before/after of each file of a request). */
class ApprovalDocs implements vscode.TextDocumentContentProvider {
  readonly texts = new Map<string, string>();
  provideTextDocumentContent(uri: vscode.Uri): string {
    return this.texts.get(uri.toString()) ?? '';
  }
}

let counter = 0;

/** The lines of the change's summary shown in the prompt itself (the diff editor has it all). */
const SUMMARY_LINES = 24;

/** What each answer means, under its button's label. */
const MEANING: Record<string, string> = {
  allow_once: 'this change only',
  allow_session: 'these paths, until the session ends',
  always_file: 'these files, from now on (remembered for this project)',
  always_directory: 'the files of this directory, from now on (remembered for this project)',
  deny: 'refuse; nothing is changed',
};

/**
 * Puts ctxfs's question to the user as a modal dialog (every choice readable in full, which a
 * notification's buttons are not), with the diff editor already open beside it.
 */
async function ask(request: ApprovalRequest, titles: string[]): Promise<string | undefined> {
  const lines = request.summary.split('\n');
  const summary = lines.slice(0, SUMMARY_LINES).join('\n') + (lines.length > SUMMARY_LINES ? `\n… (${lines.length - SUMMARY_LINES} more lines in the diff editor)` : '');
  const meanings = request.options
    .filter((o) => titles.includes(o.label))
    .map((o) => `${o.label}: ${MEANING[o.approval] ?? o.approval}`)
    .join('\n');
  const notes = request.notes.length ? `\n\n${request.notes.join('\n')}` : '';
  const beside = (request.files ?? []).length ? ' The proposed change is open in a diff editor.' : '';
  const items: vscode.MessageItem[] = titles.map((title) => ({ title, isCloseAffordance: title === 'Deny' }));
  const picked = await vscode.window.showWarningMessage(
    `Allow ctxfs (${request.tool}) to ${request.description}?`,
    { modal: true, detail: `${summary}${notes}\n\n${meanings}\n\nMode ${request.mode}.${beside}` },
    ...items,
  );
  return picked?.title;
}

export function registerApprovals(server: Server): vscode.Disposable[] {
  const docs = new ApprovalDocs();
  /** Requests announced by the notification and not yet asked, by their message text. */
  const pending = new Map<string, { request: ApprovalRequest; uris: string[] }>();

  const showDiff = async (request: ApprovalRequest): Promise<string[]> => {
    const files = (request.files ?? []).filter((f) => f.before !== undefined || f.after !== undefined);
    const n = ++counter;
    const triples: [vscode.Uri, vscode.Uri, vscode.Uri][] = files.map((f) => {
      const mk = (side: string) =>
        vscode.Uri.from({ scheme: APPROVAL_SCHEME, path: f.path, query: `${side}&n=${n}` });
      const before = mk('before');
      const after = mk('after');
      docs.texts.set(before.toString(), f.before ?? '');
      docs.texts.set(after.toString(), f.after ?? '');
      return [vscode.Uri.file(f.path), before, after];
    });
    if (triples.length === 1) {
      const [, before, after] = triples[0];
      const name = files[0].path.split('/').pop();
      await vscode.commands.executeCommand('vscode.diff', before, after, `ctxfs asks: ${request.tool} ${name} (proposed)`, {
        preview: true,
        preserveFocus: true,
        viewColumn: vscode.ViewColumn.Beside,
      });
    } else if (triples.length > 1) {
      const title = `ctxfs asks: ${request.description}`;
      await vscode.commands.executeCommand('vscode.changes', title, triples);
      return [...triples.flatMap(([, b, a]) => [b.toString(), a.toString()]), `title:${title}`];
    }
    return triples.flatMap(([, b, a]) => [b.toString(), a.toString()]);
  };

  /** Closes the approval's diff tabs; `keys` are document URIs and `title:` + a multi diff's title. */
  const closeDiff = async (keys: string[]) => {
    const wanted = new Set(keys);
    const tabs = vscode.window.tabGroups.all.flatMap((g) => g.tabs).filter((t) => {
      const input = t.input;
      if (input instanceof vscode.TabInputTextDiff) return wanted.has(input.modified.toString());
      // A multi-file change opens a multi diff editor, known here by its title.
      return wanted.has(`title:${t.label}`);
    });
    if (tabs.length) await vscode.window.tabGroups.close(tabs, true);
    for (const k of keys) docs.texts.delete(k);
  };

  const onNotification = (request: ApprovalRequest) => {
    server.log.info(`approval asked: ${request.description} (${request.mode})`);
    const entry = { request, uris: [] as string[] };
    pending.set(request.message, entry);
    showDiff(request).then(
      (uris) => (entry.uris = uris),
      (e) => server.log.warn(`approval diff: ${String(e)}`),
    );
  };

  const onMessageRequest = async (params: MessageRequestParams): Promise<{ title: string } | null> => {
    const titles = (params.actions ?? []).map((a) => a.title);
    const entry = pending.get(params.message);
    if (!entry) {
      // Not an approval: shown as languageclient would.
      const show =
        params.type === 1 ? vscode.window.showErrorMessage : params.type === 2 ? vscode.window.showWarningMessage : vscode.window.showInformationMessage;
      const picked = await show(params.message, ...titles);
      return picked ? { title: picked } : null;
    }
    pending.delete(params.message);
    const { request } = entry;
    const picked = await ask(request, titles);
    server.log.info(`approval answered: ${picked ?? '(closed)'} for ${request.description}`);
    void closeDiff(entry.uris);
    return picked ? { title: picked } : null;
  };

  const install = (client: LanguageClient) => {
    client.onNotification('ctxfs/approvalRequest', onNotification);
    // Replaces languageclient's own handler, which would show the raw diff in the toast.
    client.onRequest('window/showMessageRequest', onMessageRequest);
  };
  if (server.running) install(server.running);
  return [vscode.workspace.registerTextDocumentContentProvider(APPROVAL_SCHEME, docs), server.onDidStart(install)];
}
