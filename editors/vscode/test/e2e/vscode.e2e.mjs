// End-to-end test of the extension in real VS Code: code-server 4.139.1 (VS Code 1.139) in
// headless Debian Chromium, driven by playwright-core through the command palette, the views,
// notifications and editors, with the real ctxfs binary. Only the "too old" server is a
// stand-in (old-server.mjs): building an older ctxfs here would take minutes.
// Needs (from scripts/test-vscode): CTXFS_BIN, CODE_SERVER, CTXFS_VSIX, NODE24_BIN. Fails, not
// skips, when one is missing.
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, readFileSync, readdirSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import {
  activeEditorText,
  calls,
  clickDialogButton,
  clickToastButton,
  dialog,
  dismissToasts,
  freePort,
  groupMembers,
  installVsix,
  plain,
  killGroups,
  palette,
  pick,
  readSettings,
  scratch,
  shot,
  startChromium,
  startCodeServer,
  toast,
  viewItems,
  viewRow,
  waitFor,
  writeSettings,
} from './harness.mjs';

const need = (name) => {
  const value = process.env[name];
  if (!value || !existsSync(value)) throw new Error(`${name} must name an existing file or directory (got ${value ?? 'nothing'}); run scripts/test-vscode`);
  return value;
};

const ctxfs = need('CTXFS_BIN');
const codeServer = need('CODE_SERVER');
const vsix = need('CTXFS_VSIX');
const node24 = need('NODE24_BIN');
if (!existsSync('/usr/bin/chromium')) throw new Error('/usr/bin/chromium is missing; run scripts/test-vscode (it installs Debian chromium)');
const oldServer = join(import.meta.dirname, 'old-server.mjs');

const dirs = scratch();
let page;
let codeServerChild;
let baseSettings;
let n = 0;

/** Starts a tool call through the extension's test command (vscode.lm.invokeTool); answers its tag. */
async function startCall(tool, input) {
  const tag = `call-${++n}`;
  await palette(page, 'ctxfs: Test: Invoke Tool');
  await page.locator('.quick-input-widget', { hasText: 'ctxfs test: tool call' }).waitFor({ state: 'visible', timeout: 20000 });
  const box = page.locator('.quick-input-widget .quick-input-box input');
  await box.fill(JSON.stringify({ tool, input, tag }));
  await box.press('Enter');
  return tag;
}

async function result(tag, timeoutMs = 60000) {
  const found = await waitFor(`the answer of ${tag}`, () => calls(dirs).find((c) => c.tag === tag), timeoutMs);
  assert.equal(found.error, undefined, `${tag} failed: ${found.error}`);
  return found.text;
}

async function call(tool, input) {
  return result(await startCall(tool, input));
}

function idOf(text) {
  return /^\[(#[0-9a-f]{4,})/.exec(text)?.[1];
}

async function openFile(name) {
  await palette(page, 'Go to File');
  const box = page.locator('.quick-input-widget .quick-input-box input');
  await box.fill(name);
  await pick(page, name);
  await page.locator('.tabs-container .tab.active', { hasText: name }).waitFor({ timeout: 20000 });
}

/** What the extension reports through its test command: ctxfs/results of the current session
 *  (ids, newest first), the chain it was last given, the active editor's file. */
async function extensionState() {
  const file = join(dirs.out, 'state.json');
  rmSync(file, { force: true });
  await palette(page, 'ctxfs: Test: Write State');
  return waitFor('the extension state', () => (existsSync(file) ? JSON.parse(readFileSync(file, 'utf8')) : undefined), 20000);
}

async function statusText() {
  return page.locator('.statusbar-item', { hasText: 'ctxfs' }).first().innerText();
}

async function setSettings(extra) {
  writeSettings(dirs, { ...baseSettings, ...extra });
}

before(async () => {
  const ws = dirs.ws;
  mkdirSync(join(ws, 'notes'), { recursive: true });
  mkdirSync(join(ws, 'src'), { recursive: true });
  writeFileSync(join(ws, 'AGENTS.md'), '# Project rules\n\nKeep notes short.\n');
  writeFileSync(join(ws, 'notes', 'todo.md'), '# Todo\n\n- buy milk\n');
  writeFileSync(join(ws, 'src', 'main.txt'), 'main\n');
  const config = join(dirs.home, '.config', 'ctxfs');
  mkdirSync(config, { recursive: true });
  writeFileSync(join(config, 'AGENTS.md'), '# My global rules\n\nBe brief.\n');
  baseSettings = {
    'files.autoSave': 'off',
    'workbench.startupEditor': 'none',
    'workbench.tips.enabled': false,
    'security.workspace.trust.enabled': false,
    'telemetry.telemetryLevel': 'off',
    'extensions.autoCheckUpdates': false,
    'extensions.autoUpdate': false,
    'update.mode': 'none',
    'workbench.enableExperiments': false,
    'chat.commandCenter.enabled': false,
    'ctxfs.path': ctxfs,
    'window.commandCenter': false,
  };
  writeSettings(dirs, baseSettings);
  const env = {
    PATH: `${node24}:/usr/local/bin:/usr/bin:/bin`,
    HOME: dirs.home,
    XDG_CONFIG_HOME: join(dirs.home, '.config'),
    XDG_DATA_HOME: join(dirs.home, '.local', 'share'),
    XDG_CACHE_HOME: join(dirs.home, '.cache'),
    CTXFS_VSCODE_TEST: dirs.out,
    CTXFS_LOG: 'info',
    LANG: 'C.UTF-8',
  };
  installVsix({ codeServer, env, dirs, vsix });
  const port = await freePort();
  codeServerChild = (await startCodeServer({ codeServer, env, dirs, port })).child;
  ({ page } = await startChromium({ dirs, env }));
  await page.goto(`http://127.0.0.1:${port}/?folder=${encodeURIComponent(ws)}`);
  await page.locator('.monaco-workbench').waitFor({ timeout: 120000 });
  await waitFor('the ctxfs status item', async () => /ctxfs: ask/.test(await statusText()), 120000);
});

after(async () => {
  try {
    if (page) await shot(page, dirs, 'zz-last').catch(() => undefined);
  } finally {
    await killGroups();
    const left = codeServerChild ? groupMembers(codeServerChild.pid) : [];
    console.log(`screenshots: ${dirs.shots}; scratch: ${dirs.root}; processes left in code-server's group: ${left.length}`);
  }
});

let readId;

test('a tool call through vscode.lm.invokeTool reads the unsaved buffer', async () => {
  await openFile('todo.md');
  await page.locator('.editor-group-container.active .monaco-editor .view-lines').click();
  await page.keyboard.press('Control+End');
  await page.keyboard.type('- UNSAVED LINE 42');
  await page.locator('.tabs-container .tab.active.dirty', { hasText: 'todo.md' }).waitFor({ timeout: 10000 });
  assert.doesNotMatch(readFileSync(join(dirs.ws, 'notes', 'todo.md'), 'utf8'), /UNSAVED/);
  const text = await call('ctxfs_read', { file_path: join(dirs.ws, 'notes', 'todo.md') });
  assert.match(text, /UNSAVED LINE 42/, text);
  readId = idOf(text);
  assert.ok(readId, `no id in ${text}`);
});

/** Answers a prompt left open by a failed step, so later steps do not queue behind it. */
async function denyLeftover() {
  const box = page.locator('.monaco-dialog-box');
  if (await box.count()) await box.locator('.dialog-buttons .monaco-button', { hasText: 'Deny' }).first().click().catch(() => undefined);
}

test('an edit asks once (diff beside), lands in the open buffer, and undo reverts it', async () => {
  try {
    const tag = await startCall('ctxfs_edit', { file_path: join(dirs.ws, 'notes', 'todo.md'), old_string: 'UNSAVED LINE 42', new_string: 'EDITED BY CTXFS' });
    const prompt = dialog(page, 'Allow ctxfs (edit) to');
    await prompt.waitFor({ state: 'visible', timeout: 30000 });
    await page.locator('.tabs-container .tab', { hasText: 'ctxfs asks: edit todo.md' }).waitFor({ timeout: 20000 });
    const proposed = page.locator('.monaco-diff-editor').first();
    await proposed.waitFor({ state: 'visible', timeout: 20000 });
    await waitFor('the proposed change in the diff', async () => /EDITED BY CTXFS/.test(plain(await proposed.innerText())), 20000);
    await shot(page, dirs, '01-approval-edit');
    const buttons = (await prompt.locator('.dialog-buttons .monaco-button').allInnerTexts()).map((b) => b.trim());
    for (const label of ['Allow once', 'Allow notes/todo.md for this session', 'Always allow notes/todo.md', 'Always allow notes/*', 'Deny']) {
      assert.ok(buttons.includes(label), `${label} in ${buttons.join(' | ')}`);
    }
    // One prompt: ctxfs's. VS Code showed no confirmation of its own.
    assert.equal(await page.locator('.monaco-dialog-box').count(), 1);
    assert.equal(await page.locator('.chat-confirmation-widget').count(), 0);
    await clickDialogButton(page, 'Allow ctxfs (edit) to', 'Allow once');
    const text = await result(tag);
    assert.doesNotMatch(text, /Not changed/, text);
    await waitFor('the approval diff to close', async () => (await page.locator('.tabs-container .tab', { hasText: 'ctxfs asks:' }).count()) === 0, 20000);
    await openFile('todo.md');
    await waitFor('the edit in the buffer', async () => /EDITED BY CTXFS/.test(await activeEditorText(page)), 20000);
    assert.doesNotMatch(readFileSync(join(dirs.ws, 'notes', 'todo.md'), 'utf8'), /EDITED/, 'the disk is left to the editor');
    await shot(page, dirs, '02-edit-in-buffer');
    await page.locator('.editor-group-container.active .monaco-editor .view-lines').click();
    await page.keyboard.press('Control+Z');
    await waitFor('undo to revert the edit', async () => {
      const t = await activeEditorText(page);
      return /UNSAVED LINE 42/.test(t) && !/EDITED BY CTXFS/.test(t);
    }, 20000);
  } finally {
    await denyLeftover();
  }
});

test('an approval answered "Always allow notes/*" is remembered and listed in the grants', async () => {
  try {
    const tag = await startCall('ctxfs_write', { file_path: join(dirs.ws, 'notes', 'new.md'), content: 'new note\n' });
    await dialog(page, 'Allow ctxfs (write) to').waitFor({ state: 'visible', timeout: 30000 });
    await page.locator('.tabs-container .tab', { hasText: 'ctxfs asks: write new.md' }).waitFor({ timeout: 20000 });
    await shot(page, dirs, '03-approval-write');
    await clickDialogButton(page, 'Allow ctxfs (write) to', 'Always allow notes/*');
    const text = await result(tag);
    assert.doesNotMatch(text, /Not changed/, text);
    assert.equal(readFileSync(join(dirs.ws, 'notes', 'new.md'), 'utf8'), 'new note\n');
    // The grant covers the next write in notes/: no prompt.
    const second = await call('ctxfs_write', { file_path: join(dirs.ws, 'notes', 'other.md'), content: 'other\n' });
    assert.doesNotMatch(second, /Not changed/, second);
    assert.equal(await page.locator('.monaco-dialog-box').count(), 0);
    await palette(page, 'ctxfs: Grants: List and Revoke');
    const row = page.locator('.quick-input-widget .quick-input-list .monaco-list-row', { hasText: 'notes/*' }).first();
    await row.waitFor({ timeout: 20000 });
    assert.match(await row.innerText(), /always/);
    await shot(page, dirs, '04-grants');
    // Revoking it: the next write in notes/ asks again, and Deny refuses it.
    await row.click();
    await toast(page, 'ctxfs revoked 1 grant(s) for notes/*').waitFor({ state: 'visible', timeout: 20000 });
    const again = await startCall('ctxfs_write', { file_path: join(dirs.ws, 'notes', 'third.md'), content: 'third\n' });
    await clickDialogButton(page, 'Allow ctxfs (write) to', 'Deny');
    assert.match(await result(again), /Not changed: the user declined/);
    assert.equal(existsSync(join(dirs.ws, 'notes', 'third.md')), false);
  } finally {
    await denyLeftover();
  }
});

test('a patch over two files asks once, with both diffs in one multi-file diff', async () => {
  try {
    for (const name of ['new.md', 'other.md']) await call('ctxfs_read', { file_path: join(dirs.ws, 'notes', name) });
    const patch = [
      '*** Begin Patch',
      '*** Update File: notes/new.md',
      '@@',
      '-new note',
      '+new note, patched',
      '*** Update File: notes/other.md',
      '@@',
      '-other',
      '+other, patched',
      '*** End Patch',
    ].join('\n');
    const tag = await startCall('ctxfs_apply_patch', { patch });
    await dialog(page, 'Allow ctxfs (apply_patch) to').waitFor({ state: 'visible', timeout: 30000 });
    await page.locator('.tabs-container .tab', { hasText: 'ctxfs asks:' }).waitFor({ timeout: 20000 });
    await waitFor('both proposed files', async () => {
      const t = plain(await page.locator('.editor-group-container.active').innerText());
      return /new note, patched/.test(t) && /other, patched/.test(t);
    }, 20000);
    await shot(page, dirs, '04b-approval-patch');
    await clickDialogButton(page, 'Allow ctxfs (apply_patch) to', 'Allow once');
    assert.doesNotMatch(await result(tag), /Not changed/);
    assert.equal(readFileSync(join(dirs.ws, 'notes', 'new.md'), 'utf8'), 'new note, patched\n');
    assert.equal(readFileSync(join(dirs.ws, 'notes', 'other.md'), 'utf8'), 'other, patched\n');
  } finally {
    await denyLeftover();
  }
});

test('the mode switch changes what a write does', async () => {
  await page.locator('.statusbar-item', { hasText: 'ctxfs: ask' }).first().click();
  await pick(page, 'read-only');
  await waitFor('the status item to say read-only', async () => /ctxfs: read-only/.test(await statusText()), 20000);
  await shot(page, dirs, '05-mode-read-only');
  const refused = await call('ctxfs_write', { file_path: join(dirs.ws, 'src', 'mode.txt'), content: 'x\n' });
  assert.match(refused, /read-only/i, refused);
  assert.equal(existsSync(join(dirs.ws, 'src', 'mode.txt')), false);
  await palette(page, 'ctxfs: Set Permission Mode');
  await pick(page, 'trust');
  await waitFor('the status item to say trust', async () => /ctxfs: trust/.test(await statusText()), 20000);
  const written = await call('ctxfs_write', { file_path: join(dirs.ws, 'src', 'mode.txt'), content: 'x\n' });
  assert.doesNotMatch(written, /Not changed/, written);
  assert.equal(readFileSync(join(dirs.ws, 'src', 'mode.txt'), 'utf8'), 'x\n');
  assert.equal(await page.locator('.monaco-dialog-box').count(), 0, 'trust asks nothing');
});

test('the Results view lists ids newest first and opens the stored result with id links', async () => {
  await palette(page, 'ctxfs: Focus on Results View');
  const rows = await waitFor('result rows', async () => {
    const r = await viewItems(page, 'Results');
    return r.length >= 4 ? r : undefined;
  }, 30000);
  const ids = rows.map((r) => r.label);
  assert.ok(ids.every((id) => /^#[0-9a-f]{4,}$/.test(id)), JSON.stringify(rows));
  const readRow = rows.find((r) => r.label === readId);
  assert.match(readRow?.description ?? '', /^read · notes\/todo\.md · 4 lines · \d+ B/, JSON.stringify(readRow));
  const numbers = ids.map((id) => parseInt(id.slice(1), 16));
  assert.deepEqual(numbers, [...numbers].sort((a, b) => b - a), `newest first: ${ids.join(' ')}`);
  assert.ok(ids.includes(readId), `${readId} in ${ids.join(' ')}`);
  await shot(page, dirs, '06-results-view');
  const before = await extensionState();
  assert.ok(before.results?.includes(readId), JSON.stringify(before));
  await viewRow(page, 'Results', readId).click();
  await page.locator('.tabs-container .tab.active', { hasText: readId }).waitFor({ timeout: 20000 });
  await waitFor('the stored result', async () => /UNSAVED LINE 42/.test(await activeEditorText(page)), 20000);
  await waitFor('id links', async () => (await page.locator('.editor-group-container.active .monaco-editor .detected-link').count()) > 0, 20000);
  await shot(page, dirs, '07-stored-result');
  const shown = await activeEditorText(page);
  assert.match(shown, new RegExp(`^ctxfs result ${readId} \\(read `), shown);
  assert.doesNotMatch(shown, /recall/, 'shown through ctxfs/resultText, not a recall');
  // Looking recorded nothing: the same results, and the next call takes the very next id.
  const after = await extensionState();
  assert.deepEqual(after.results, before.results, 'ctxfs/results before and after opening a result');
  const next = idOf(await call('ctxfs_read', { file_path: join(dirs.ws, 'AGENTS.md') }));
  assert.equal(parseInt(next.slice(1), 16), parseInt(before.results[0].slice(1), 16) + 1, `${next} follows ${before.results[0]}`);
});

test('the Changes view opens a diff editor', async () => {
  await palette(page, 'ctxfs: Focus on Changes View');
  const row = viewRow(page, 'Changes', 'todo.md');
  await row.waitFor({ timeout: 30000 });
  assert.match(await row.innerText(), /edit/);
  const rows = await viewItems(page, 'Changes');
  assert.ok(rows.some((r) => /^write · notes\/new\.md \(created\) \+1 −0$/.test(r.description)), JSON.stringify(rows));
  const patched = rows.filter((r) => r.description.startsWith('apply_patch · '));
  assert.deepEqual(patched.map((r) => r.description), ['apply_patch · notes/new.md (modified) +1 −1', 'apply_patch · notes/other.md (modified) +1 −1']);
  assert.equal(patched[0].label, patched[1].label, 'one id for both files of the patch');
  await row.click();
  await page.locator('.tabs-container .tab.active', { hasText: 'before ↔ after' }).waitFor({ timeout: 20000 });
  const diff = page.locator('.editor-group-container.active .monaco-diff-editor').first();
  await diff.waitFor({ state: 'visible', timeout: 20000 });
  await waitFor('both sides of the diff', async () => {
    const t = plain(await diff.innerText());
    return /UNSAVED LINE 42/.test(t) && /EDITED BY CTXFS/.test(t);
  }, 20000);
  await shot(page, dirs, '08-change-diff');
});

test('the Instructions view lists the AGENTS.md chain in order with origins', async () => {
  await palette(page, 'ctxfs: Focus on Instructions View');
  const rows = await waitFor('instruction rows', async () => {
    const r = await viewItems(page, 'Instructions');
    return r.length >= 2 ? r : undefined;
  }, 30000);
  assert.deepEqual(rows.slice(0, 2), [
    { label: '1. AGENTS.md', description: `global · ${join(dirs.home, '.config', 'ctxfs')}` },
    { label: '2. AGENTS.md', description: 'chain' },
  ]);
  await shot(page, dirs, '09-instructions');
  // ctxfs names each file's place on the machine (`file`); a click opens that file.
  const { chain } = await extensionState();
  const files = chain.map((f) => f.file).slice(0, 2);
  assert.deepEqual(files, [realpathSync(join(dirs.home, '.config', 'ctxfs', 'AGENTS.md')), realpathSync(join(dirs.ws, 'AGENTS.md'))], JSON.stringify(chain));
  await viewRow(page, 'Instructions', '2. AGENTS.md').click();
  await waitFor('the chain file opened', async () => /Keep notes short/.test(await activeEditorText(page)), 20000);
  assert.equal((await extensionState()).activeEditor, files[1]);
  await viewRow(page, 'Instructions', '1. AGENTS.md').click();
  await waitFor('the global file opened', async () => /My global rules/.test(await activeEditorText(page)), 20000);
  assert.equal((await extensionState()).activeEditor, files[0]);
});

test('ctxfs mcp is offered as an MCP server definition', async () => {
  await palette(page, 'MCP: List Servers');
  const row = page.locator('.quick-input-widget .quick-input-list .monaco-list-row', { hasText: 'ctxfs' }).first();
  await row.waitFor({ state: 'visible', timeout: 30000 });
  await shot(page, dirs, '09b-mcp-servers');
  // Started from VS Code's own MCP UI, the definition runs a real `ctxfs mcp`.
  await row.click();
  await pick(page, 'Start Server');
  const mcp = () => groupMembers(codeServerChild.pid).filter(([, comm, cmd]) => comm === 'ctxfs' && / mcp --root /.test(cmd));
  await waitFor('ctxfs mcp running', () => mcp().length === 1, 30000);
  const tools = readdirSync(join(import.meta.dirname, '..', '..', '..', '..', 'schemas', 'tools')).filter((f) => f.endsWith('.json')).length;
  await waitFor(`VS Code to discover ${tools} tools`, async () => new RegExp(`Discovered ${tools} tools`).test(plain(await page.locator('.part.panel').innerText())), 30000);
  await palette(page, 'MCP: List Servers');
  const running = page.locator('.quick-input-widget .quick-input-list .monaco-list-row', { hasText: 'ctxfs' }).first();
  await waitFor('the server listed as running', async () => /Running/i.test(await running.innerText()), 30000);
  await shot(page, dirs, '09c-mcp-running');
  await running.click();
  await pick(page, 'Stop Server');
  await waitFor('ctxfs mcp stopped', () => mcp().length === 0, 30000);
});

test('ctxfs: Show Log shows the server log, with result ids as links', async () => {
  await palette(page, 'ctxfs: Show Log');
  const panel = page.locator('.part.panel');
  // The extension's own lines: `<session> <tool>: [#000c …]`.
  await waitFor('the ctxfs log', async () => /[0-9a-f]+-[0-9a-f]+-\d+ (read|write|edit|apply_patch|recall): \[#[0-9a-f]{4}/.test(plain(await panel.innerText())), 20000);
  // Monaco splits a link across the log's tokens (`#`, `0008`): the linked spans, joined, hold ids.
  await waitFor('id links in the log', async () => /#[0-9a-f]{4}/.test((await panel.locator('.detected-link').allInnerTexts()).join('')), 20000);
  await shot(page, dirs, '09d-log');
});

test('a server that dies is restarted and its session resumed', async () => {
  const lsp = () => groupMembers(codeServerChild.pid).filter(([, comm, cmd]) => comm === 'ctxfs' && / lsp --stdio$/.test(cmd));
  const before = lsp();
  assert.equal(before.length, 1, JSON.stringify(before));
  process.kill(before[0][0], 'SIGKILL');
  await toast(page, 'ctxfs stopped unexpectedly; it was restarted and resumed').waitFor({ state: 'visible', timeout: 60000 });
  await shot(page, dirs, '10-restarted');
  const now = lsp();
  assert.equal(now.length, 1);
  assert.notEqual(now[0][0], before[0][0]);
  const recalled = await call('ctxfs_recall', { id: readId });
  assert.match(recalled, /UNSAVED LINE 42/, recalled);
  await dismissToasts(page);
});

test('a server that keeps dying is given up on, with a Restart button that resumes', async () => {
  const lsp = () => groupMembers(codeServerChild.pid).filter(([, comm, cmd]) => comm === 'ctxfs' && / lsp --stdio$/.test(cmd));
  const giveUp = toast(page, 'so it is not restarted again');
  // VS Code shows three toasts at most: each restart's notice is cleared so the last one shows.
  await dismissToasts(page);
  let gaveUp = false;
  for (let kill = 0; kill < 6 && !gaveUp; kill++) {
    const [pid] = await waitFor('a running ctxfs lsp', () => (lsp().length === 1 ? lsp()[0] : undefined), 30000);
    process.kill(pid, 'SIGKILL');
    const next = await waitFor('a restart or the give-up', async () => {
      if (lsp().length === 1 && lsp()[0][0] !== pid) return 'restarted';
      if (lsp().length === 0 && !/ctxfs: /.test(await statusText())) return 'given up';
      return undefined;
    }, 30000);
    gaveUp = next === 'given up';
    if (!gaveUp) {
      await toast(page, 'it was restarted and resumed').waitFor({ state: 'visible', timeout: 30000 });
      await dismissToasts(page);
    }
  }
  await giveUp.waitFor({ state: 'visible', timeout: 10000 });
  assert.equal(lsp().length, 0, 'not restarted after giving up');
  await shot(page, dirs, '10b-given-up');
  await clickToastButton(page, 'so it is not restarted again', 'Restart ctxfs');
  await waitFor('ctxfs running again', async () => /ctxfs: /.test(await statusText()) && lsp().length === 1, 30000);
  const recalled = await call('ctxfs_recall', { id: readId });
  assert.match(recalled, /UNSAVED LINE 42/, recalled);
  await dismissToasts(page);
});

test('no binary, a missing path and a too-old server each get a clear message with a way out', async () => {
  await setSettings({ 'ctxfs.path': '' });
  const none = toast(page, 'ctxfs was not found');
  await none.waitFor({ state: 'visible', timeout: 60000 });
  assert.match(await none.innerText(), /Open Settings/);
  await shot(page, dirs, '11-no-binary');
  await dismissToasts(page);
  await setSettings({ 'ctxfs.path': '/nonexistent/ctxfs' });
  await toast(page, 'no executable file is there').waitFor({ state: 'visible', timeout: 60000 });
  await dismissToasts(page);
  await setSettings({ 'ctxfs.path': oldServer });
  const old = toast(page, 'speaking protocol 1; this extension needs protocol 2');
  await old.waitFor({ state: 'visible', timeout: 60000 });
  await shot(page, dirs, '12-too-old');
  await dismissToasts(page);
  assert.doesNotMatch(await statusText(), /ctxfs: /, 'the status item shows ctxfs is not running');
  await setSettings({ 'ctxfs.path': ctxfs });
  await waitFor('ctxfs running again', async () => /ctxfs: ask/.test(await statusText()), 60000);
  assert.equal(readSettings(dirs)['ctxfs.path'], ctxfs);
});

test('a window without a folder says ctxfs needs one and offers to open one', async () => {
  const url = new URL(page.url());
  await page.goto(`${url.origin}/?ew=true`);
  await page.locator('.monaco-workbench').waitFor({ timeout: 120000 });
  const message = toast(page, 'ctxfs needs a folder');
  await message.waitFor({ state: 'visible', timeout: 120000 });
  assert.match(await message.innerText(), /Open Folder/);
  await shot(page, dirs, '13-no-folder');
});
