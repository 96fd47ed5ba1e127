// The status-bar item showing the permission mode, its quick pick (`ctxfs/setMode` on every
// session of the window) and the grants command (`ctxfs/grants`: list, revoke). It keeps no
// state of its own beyond the mode last picked; ctxfs holds the grants.
import * as vscode from 'vscode';
import { MODES, type Mode } from './options';
import type { Grant, SetModeAnswer } from './protocol';
import { message, type Server } from './server';

const MODE_TEXT: Record<Mode, { icon: string; detail: string }> = {
  'read-only': { icon: '$(lock)', detail: 'Nothing changes: every change is refused. Reads are open.' },
  ask: { icon: '$(shield)', detail: 'Each change asks you first, unless a grant covers it.' },
  'accept-edits': { icon: '$(pass)', detail: 'Changes run; removing or moving outside the start directory asks.' },
  trust: { icon: '$(unlock)', detail: 'Changes run without asking. The view and deny rules still apply.' },
};

export function registerMode(server: Server): vscode.Disposable[] {
  const item = vscode.window.createStatusBarItem('ctxfs.mode', vscode.StatusBarAlignment.Left, 100);
  item.name = 'ctxfs mode';
  item.command = 'ctxfs.setMode';
  const mode = (): string => server.pickedMode ?? vscode.workspace.getConfiguration('ctxfs').get<string>('mode') ?? 'ask';
  const render = () => {
    const s = server.status;
    if (s.kind === 'running') {
      const m = mode() as Mode;
      item.text = `${MODE_TEXT[m]?.icon ?? '$(shield)'} ctxfs: ${m}`;
      item.tooltip = `ctxfs ${s.version ?? ''} (${s.binary})\nMode: ${m}. ${MODE_TEXT[m]?.detail ?? ''}\nClick to change.`;
      item.backgroundColor = undefined;
    } else if (s.kind === 'starting') {
      item.text = '$(loading~spin) ctxfs';
      item.tooltip = 'ctxfs is starting';
    } else {
      item.text = '$(warning) ctxfs';
      item.tooltip = s.why ? `ctxfs is not running: ${s.why}` : 'ctxfs is not running';
      item.backgroundColor = s.kind === 'failed' ? new vscode.ThemeColor('statusBarItem.warningBackground') : undefined;
    }
    item.show();
  };
  render();

  const setMode = async (wanted?: string) => {
    let picked = wanted;
    if (!picked) {
      const current = mode();
      const choice = await vscode.window.showQuickPick(
        MODES.map((m) => ({ label: `${MODE_TEXT[m].icon} ${m}`, mode: m, description: m === current ? 'current' : undefined, detail: MODE_TEXT[m].detail })),
        { title: 'ctxfs permission mode', placeHolder: `Mode for this window's ctxfs sessions (now: ${current})` },
      );
      picked = choice?.mode;
    }
    if (!picked) return;
    if (!(MODES as readonly string[]).includes(picked)) throw new Error(`unknown mode ${picked}`);
    server.pickedMode = picked as Mode;
    let session = server.sessionIds()[0];
    session ??= await server.session('window');
    for (const s of server.sessionIds()) {
      try {
        const answer = await server.request<SetModeAnswer>('ctxfs/setMode', { session: s, mode: picked });
        server.log.info(`session ${s}: mode ${answer.previous} → ${answer.mode}`);
      } catch (e) {
        void vscode.window.showErrorMessage(`ctxfs could not set the mode of session ${s}: ${message(e)}`);
      }
    }
    render();
  };

  const grants = async () => {
    const session = server.current ?? server.sessionIds()[0] ?? (await server.session('window'));
    const answer = await server.request<{ grants: Grant[] }>('ctxfs/grants', { session });
    type Item = vscode.QuickPickItem & { target?: string };
    const items: Item[] = answer.grants.map((g) => ({
      label: g.target,
      description: g.scope === 'always' ? 'always (remembered for this project)' : 'this session',
      detail: 'Select to revoke',
      target: g.target,
    }));
    if (items.length) items.push({ label: 'Revoke all grants', target: '*', description: `${items.length} grant${items.length > 1 ? 's' : ''}` });
    const picked = await vscode.window.showQuickPick<Item>(items.length ? items : [{ label: 'No grants: every change in mode ask asks you.' }], {
      title: 'ctxfs grants',
      placeHolder: items.length ? 'Grants in force for this session; select one to revoke it' : undefined,
    });
    if (!picked?.target) return;
    const revoked = await server.request<{ revoked?: number }>('ctxfs/grants', { session, revoke: picked.target });
    void vscode.window.showInformationMessage(`ctxfs revoked ${revoked.revoked ?? 0} grant(s) for ${picked.target}.`);
  };

  return [
    item,
    server.onDidChange(render),
    vscode.workspace.onDidChangeConfiguration((e) => e.affectsConfiguration('ctxfs.mode') && render()),
    vscode.commands.registerCommand('ctxfs.setMode', setMode),
    vscode.commands.registerCommand('ctxfs.grants', grants),
  ];
}
