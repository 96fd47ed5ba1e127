// The end-to-end harness: a scratch home, workspace and settings; code-server and Debian's
// Chromium each started in a process group of its own (ctxfs runs inside code-server's group,
// started by the extension) and killed by group at the end, pass or fail; playwright-core
// driving the page over CDP; helpers for the command palette, notifications, views and editors.
// It installs nothing: scripts/test-vscode does, and passes the paths in the environment.
import { spawn, spawnSync } from 'node:child_process';
import { appendFileSync, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { chromium } from 'playwright-core';

const groups = new Set();

/** Kills every process group this harness started: TERM, then KILL after a grace period. */
export async function killGroups() {
  for (const pgid of groups) {
    try {
      process.kill(-pgid, 'SIGTERM');
    } catch {
      groups.delete(pgid);
    }
  }
  for (let i = 0; i < 30 && [...groups].some(alive); i++) await sleep(100);
  for (const pgid of groups) {
    try {
      process.kill(-pgid, 'SIGKILL');
    } catch {
      // Already gone.
    }
  }
  groups.clear();
}

function alive(pgid) {
  try {
    process.kill(-pgid, 0);
    return true;
  } catch {
    return false;
  }
}

for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, () => {
    void killGroups().finally(() => process.exit(130));
  });
}
process.on('exit', () => {
  for (const pgid of groups) {
    try {
      process.kill(-pgid, 'SIGKILL');
    } catch {
      // Already gone.
    }
  }
});

/** Starts a command as the leader of a new process group, its output appended to `log`. */
export function startGroup(command, args, { env, log }) {
  const fd = openSync(log, 'a');
  const child = spawn(command, args, { env, detached: true, stdio: ['ignore', fd, fd] });
  groups.add(child.pid);
  return child;
}

/** The processes of a group, as [pid, command name, command line]. */
export function groupMembers(pgid) {
  const found = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const close = stat.lastIndexOf(')');
      const comm = stat.slice(stat.indexOf('(') + 1, close);
      const fields = stat.slice(close + 2).split(' ');
      if (Number(fields[2]) === pgid) {
        const cmdline = readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0').join(' ').trim();
        found.push([Number(entry), comm, cmdline]);
      }
    } catch {
      // The process ended meanwhile.
    }
  }
  return found;
}

export async function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
    server.on('error', reject);
  });
}

export async function waitFor(what, check, timeoutMs = 60000, everyMs = 250) {
  const until = Date.now() + timeoutMs;
  let last;
  while (Date.now() < until) {
    try {
      const value = await check();
      if (value) return value;
    } catch (e) {
      last = e;
    }
    await sleep(everyMs);
  }
  throw new Error(`timed out waiting for ${what}${last ? ` (last error: ${last.message})` : ''}`);
}

/** Everything a run needs, made under a fresh scratch directory. */
export function scratch() {
  const root = mkdtempSync(join(tmpdir(), 'ctxfs-vscode-e2e-'));
  const dirs = {
    root,
    home: join(root, 'home'),
    ws: join(root, 'workspace'),
    userData: join(root, 'user-data'),
    extensions: join(root, 'extensions'),
    out: join(root, 'out'),
    shots: process.env.CTXFS_VSCODE_SHOTS || join(root, 'screenshots'),
    chrome: join(root, 'chrome'),
  };
  for (const d of Object.values(dirs)) mkdirSync(d, { recursive: true });
  return dirs;
}

/**
 * Writes the settings: ctxfs's own into the machine settings (code-server's extension host is a
 * remote one, and `machine`-scoped settings are read there, as in VS Code Remote), the rest into
 * the user settings.
 */
export function writeSettings(dirs, settings) {
  const user = {};
  const machine = {};
  for (const [key, value] of Object.entries(settings)) (key.startsWith('ctxfs.') ? machine : user)[key] = value;
  for (const [dir, values] of [[join(dirs.userData, 'User'), user], [join(dirs.userData, 'Machine'), machine]]) {
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'settings.json'), JSON.stringify(values, null, 2));
  }
}

export function readSettings(dirs) {
  return {
    ...JSON.parse(readFileSync(join(dirs.userData, 'User', 'settings.json'), 'utf8')),
    ...JSON.parse(readFileSync(join(dirs.userData, 'Machine', 'settings.json'), 'utf8')),
  };
}

/** Installs the .vsix with code-server's own CLI (as a user would). */
export function installVsix({ codeServer, env, dirs, vsix }) {
  const r = spawnSync(codeServer, ['--extensions-dir', dirs.extensions, '--user-data-dir', dirs.userData, '--install-extension', vsix], {
    env,
    encoding: 'utf8',
    timeout: 120000,
  });
  if (r.status !== 0) throw new Error(`installing ${vsix} failed: ${r.stdout}\n${r.stderr}`);
  return r.stdout;
}

export async function startCodeServer({ codeServer, env, dirs, port }) {
  const log = join(dirs.root, 'code-server.log');
  const child = startGroup(
    codeServer,
    [
      '--auth', 'none',
      '--bind-addr', `127.0.0.1:${port}`,
      '--disable-telemetry',
      '--disable-update-check',
      '--disable-workspace-trust',
      '--disable-getting-started-override',
      '--extensions-dir', dirs.extensions,
      '--user-data-dir', dirs.userData,
      dirs.ws,
    ],
    { env, log },
  );
  await waitFor('code-server /healthz', async () => (await fetch(`http://127.0.0.1:${port}/healthz`)).ok, 60000);
  return { child, log };
}

/** Debian's Chromium in its own group, reached over CDP. */
export async function startChromium({ dirs, env }) {
  const log = join(dirs.root, 'chromium.log');
  const child = startGroup(
    '/usr/bin/chromium',
    [
      '--headless=new',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-dev-shm-usage',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--disable-quic',
      '--remote-debugging-port=0',
      '--remote-debugging-address=127.0.0.1',
      `--user-data-dir=${dirs.chrome}`,
      '--window-size=1600,1000',
      'about:blank',
    ],
    { env, log },
  );
  const endpoint = await waitFor('chromium DevTools endpoint', () => {
    const m = /DevTools listening on (ws:\/\/\S+)/.exec(readFileSync(log, 'utf8'));
    return m?.[1];
  }, 60000);
  const browser = await chromium.connectOverCDP(endpoint);
  const context = browser.contexts()[0] ?? (await browser.newContext());
  const page = context.pages()[0] ?? (await context.newPage());
  await page.setViewportSize({ width: 1600, height: 1000 });
  return { child, browser, page };
}

/** Runs a command from the palette; retries while the extension host is still coming up. */
export async function palette(page, title, { timeoutMs = 60000 } = {}) {
  const input = page.locator('.quick-input-widget .quick-input-box input');
  await waitFor(`command "${title}" in the palette`, async () => {
    await page.keyboard.press('Escape');
    await page.keyboard.press('F1');
    await input.waitFor({ state: 'visible', timeout: 5000 });
    await input.fill(`>${title}`);
    const row = page.locator('.quick-input-widget .quick-input-list .monaco-list-row', { hasText: title }).first();
    await row.waitFor({ state: 'visible', timeout: 3000 });
    await row.click();
    return true;
  }, timeoutMs, 500);
}

/** Picks the quick pick row that has `text`. */
export async function pick(page, text) {
  const row = page.locator('.quick-input-widget .quick-input-list .monaco-list-row', { hasText: text }).first();
  await row.waitFor({ state: 'visible', timeout: 20000 });
  await row.click();
}

/** The visible notification toast whose text matches. */
export function toast(page, match) {
  return page.locator('.notifications-toasts .notification-list-item', { hasText: match }).first();
}

export async function clickToastButton(page, match, label) {
  const item = toast(page, match);
  await item.waitFor({ state: 'visible', timeout: 30000 });
  const button = item.locator('.monaco-button', { hasText: label }).first();
  await button.click();
}

export async function dismissToasts(page) {
  await palette(page, 'Notifications: Clear All Notifications');
  await page.locator('.notifications-toasts .notification-list-item').first().waitFor({ state: 'hidden', timeout: 10000 }).catch(() => undefined);
}

/** The rows of a view pane (`Results`, `Changes`, `Instructions`) as their visible text. */
export async function viewRows(page, name) {
  const pane = page.locator('.pane', { has: page.locator('.pane-header', { hasText: new RegExp(`^\\s*${name}`, 'i') }) }).first();
  return pane.locator('.monaco-list-row').allInnerTexts();
}

export function viewRow(page, name, text) {
  const pane = page.locator('.pane', { has: page.locator('.pane-header', { hasText: new RegExp(`^\\s*${name}`, 'i') }) }).first();
  return pane.locator('.monaco-list-row', { hasText: text }).first();
}

/** Text as shown, with Monaco's no-break spaces made plain. */
export function plain(text) {
  return text.replace(/\u00a0/g, ' ');
}

/** The text of the active editor (what Monaco rendered; short documents only). */
export async function activeEditorText(page) {
  return plain(await page.locator('.editor-group-container.active .monaco-editor .view-lines').first().innerText());
}

/** The rows of a view pane as {label, description}. */
export async function viewItems(page, name) {
  const pane = page.locator('.pane', { has: page.locator('.pane-header', { hasText: new RegExp(`^\\s*${name}`, 'i') }) }).first();
  return pane.locator('.monaco-list-row').evaluateAll((rows) =>
    rows.map((row) => ({
      label: row.querySelector('.label-name')?.textContent ?? '',
      description: row.querySelector('.label-description')?.textContent ?? '',
    })),
  );
}

/** The modal dialog whose message matches, and a click on one of its buttons. */
export function dialog(page, match) {
  return page.locator('.monaco-dialog-box', { hasText: match }).first();
}

export async function clickDialogButton(page, match, label) {
  const box = dialog(page, match);
  await box.waitFor({ state: 'visible', timeout: 30000 });
  await box.locator('.dialog-buttons .monaco-button', { hasText: label }).first().click();
  await box.waitFor({ state: 'hidden', timeout: 10000 });
}

export async function shot(page, dirs, name) {
  // Notifications fade in: let them settle so the picture shows what a user reads.
  await page.waitForTimeout(400);
  const path = join(dirs.shots, `${name}.png`);
  await page.screenshot({ path });
  appendFileSync(join(dirs.out, 'screenshots.txt'), path + '\n');
  return path;
}

/** Tool calls the extension's test command recorded (calls.jsonl in its test directory). */
export function calls(dirs) {
  const file = join(dirs.out, 'calls.jsonl');
  if (!existsSync(file)) return [];
  return readFileSync(file, 'utf8').trim().split('\n').filter(Boolean).map((l) => JSON.parse(l));
}
