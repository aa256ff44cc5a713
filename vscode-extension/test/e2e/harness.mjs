// What the end-to-end tests share: a throwaway code-server (the real workbench and extension host) with
// the built VSIX, Debian's chromium driven by playwright-core, the Python CLI for jobs, and helpers that
// read the workbench's DOM (call stack, variables, our Jobs view, notifications).
//
// Each *.e2e.mjs calls `useHarness(name)` once at the top: it checks the environment, registers the
// `before`/`after` hooks (everything started is stopped in `after`, whatever happened) and keeps its
// screenshots in test-artifacts/e2e/<name>/ (RD_ARTIFACTS: another root).
//
// Needs (./dev test-extension sets them): RD_CODE_SERVER (code-server executable), RD_NODE_BIN
// (a Node 24 bin dir), RD_CLI (remote-debug), RD_PYTHON (the venv's python), RD_VSIX, CHROMIUM.

import { after, before } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFile, execFileSync } from 'node:child_process';
import { promisify } from 'node:util';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';

import { chromium } from 'playwright-core';

const execFileP = promisify(execFile);
const here = path.dirname(fileURLToPath(import.meta.url));
const extensionDir = path.resolve(here, '../..');
export const repo = path.resolve(extensionDir, '..');

function required(name) {
  const value = process.env[name];
  if (!value) {
    throw new Error(`${name} is not set: run the e2e test through ./dev test-extension (it installs and sets everything)`);
  }
  return value;
}

export const env = {
  codeServer: required('RD_CODE_SERVER'),
  nodeBin: required('RD_NODE_BIN'),
  cli: required('RD_CLI'),
  python: required('RD_PYTHON'),
  vsix: process.env.RD_VSIX ?? path.join(extensionDir, 'dist', 'remote-debug.vsix'),
  chromium: process.env.CHROMIUM ?? '/usr/bin/chromium',
};

const started = Date.now();
const elapsed = () => `${((Date.now() - started) / 1000).toFixed(1)}s`;
export const say = (msg) => process.stdout.write(`# [e2e ${elapsed()}] ${msg}\n`);

export const state = {
  name: '',
  artifacts: '',
  root: '',
  home: '',
  workspace: '',
  job: '',
  url: '',
  codeServer: undefined,
  codeServerLog: '',
  browser: undefined,
  page: undefined,
  shot: 0,
};

async function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

/** The environment every process we start gets: a throwaway HOME, Node 24 first on PATH. */
export function childEnv() {
  const e = { ...process.env };
  delete e.REMOTE_DEBUG_HOME;
  delete e.VSCODE_IPC_HOOK_CLI;
  e.HOME = state.home;
  e.XDG_CONFIG_HOME = path.join(state.home, '.config');
  e.XDG_DATA_HOME = path.join(state.home, '.local', 'share');
  e.XDG_CACHE_HOME = path.join(state.home, '.cache');
  // code-server's sockets (vscode-ipc-*, vscode-git-*) and torchrun's temp dirs go under the test's root,
  // which is removed at the end: nothing is left in the machine's /tmp
  e.TMPDIR = path.join(state.root, 'tmp');
  e.PATH = `${env.nodeBin}:${path.dirname(env.python)}:${e.PATH}`;
  return e;
}

export async function cli(args, options = {}) {
  const { stdout } = await execFileP(env.cli, args, { env: childEnv(), cwd: state.workspace, timeout: 300_000, ...options });
  return stdout;
}

/** The job as `remote-debug jobs --json` lists it. */
export async function jobInfo() {
  return JSON.parse(await cli(['jobs', '--json'])).find((j) => j.name === state.job);
}

export async function screenshot(name) {
  if (!state.page) {
    return;
  }
  fs.mkdirSync(state.artifacts, { recursive: true });
  const file = path.join(state.artifacts, `${String(++state.shot).padStart(2, '0')}-${name}.png`);
  try {
    await state.page.screenshot({ path: file, timeout: 15_000 });
    say(`screenshot ${path.relative(repo, file)}`);
  } catch (err) {
    say(`screenshot ${name} failed: ${err.message}`);
  }
}

/** Run a step; on failure keep a screenshot named after it, then fail. */
export async function step(name, fn) {
  say(`step: ${name}`);
  try {
    return await fn();
  } catch (err) {
    await screenshot(`FAILED-${name.replace(/[^a-z0-9]+/gi, '-')}`);
    throw err;
  }
}

export async function waitFor(what, fn, { timeout = 60_000, interval = 500 } = {}) {
  const deadline = Date.now() + timeout;
  let last;
  while (Date.now() < deadline) {
    try {
      const value = await fn();
      if (value) {
        return value;
      }
    } catch (err) {
      if (err.fatal) {
        throw err;
      }
      last = err;
    }
    await new Promise((r) => setTimeout(r, interval));
  }
  throw new Error(`timed out after ${timeout / 1000} s waiting for ${what}${last ? `: ${last.message}` : ''}`);
}

// --- workbench helpers ------------------------------------------------------------------------------

async function quickInput(text) {
  const page = state.page;
  const input = page.locator('.quick-input-widget input');
  await input.waitFor({ state: 'visible', timeout: 20_000 });
  await input.fill(text);
  return input;
}

/** F1, type the command's title, wait for its row, Enter (retried once: a fresh command can list late). */
export async function runCommand(title) {
  const page = state.page;
  for (let attempt = 1; attempt <= 2; attempt++) {
    await page.keyboard.press('Escape');
    await page.keyboard.press('F1');
    await quickInput(`>${title}`);
    const row = page.locator('.quick-input-list .monaco-list-row', { hasText: title }).first();
    try {
      await row.waitFor({ state: 'visible', timeout: attempt === 1 ? 15_000 : 45_000 });
      await page.keyboard.press('Enter');
      return;
    } catch (err) {
      if (attempt === 2) {
        throw new Error(`command "${title}" is not in the palette: ${err.message}`);
      }
      say(`command "${title}" not listed yet; retrying`);
      await page.keyboard.press('Escape');
      await page.waitForTimeout(3000);
    }
  }
}

export async function openFile(relative) {
  const page = state.page;
  await page.keyboard.press('Escape');
  await page.keyboard.press('F1');
  await quickInput(relative); // no '>': Quick Open searches files
  await page.locator('.quick-input-list .monaco-list-row', { hasText: path.basename(relative) }).first().waitFor({ timeout: 30_000 });
  await page.keyboard.press('Enter');
  await page.locator('.tab.active', { hasText: path.basename(relative) }).waitFor({ timeout: 30_000 });
  await page.locator('.monaco-editor.focused').waitFor({ timeout: 30_000 });
  await page.waitForTimeout(1000); // the editor restores its view state asynchronously
}

async function cursorLine() {
  const status = await state.page.locator('.statusbar-item[id="status.editor.selection"]').innerText();
  const m = /Ln (\d+)/.exec(status);
  return m ? Number(m[1]) : undefined;
}

/** Go to Line (Ctrl+G) until the cursor is there and stays there. */
export async function goToLine(line) {
  const page = state.page;
  await waitFor(`the cursor on line ${line}`, async () => {
    if ((await cursorLine()) !== line) {
      await page.locator('.monaco-editor.focused').waitFor({ timeout: 10_000 });
      await page.keyboard.press('Control+g');
      await page.locator('.quick-input-widget input').waitFor({ state: 'visible', timeout: 10_000 });
      await page.keyboard.type(String(line));
      await page.keyboard.press('Enter');
      await page.waitForTimeout(500);
    }
    await page.waitForTimeout(700);
    return (await cursorLine()) === line;
  }, { timeout: 60_000, interval: 200 });
}

/** Line numbers that show a breakpoint dot in the glyph margin (matched by vertical position). */
export async function breakpointLines() {
  return state.page.evaluate(() => {
    const editor = document.querySelector('.monaco-editor.focused') ?? document.querySelector('.monaco-editor');
    if (!editor) {
      return [];
    }
    const numbers = [...editor.querySelectorAll('.line-numbers')].map((el) => ({ n: Number(el.textContent), y: el.getBoundingClientRect().top }));
    return [...editor.querySelectorAll('.codicon-debug-breakpoint')]
      .map((dot) => {
        const y = dot.getBoundingClientRect().top;
        const near = numbers.filter((l) => Math.abs(l.y - y) < 6);
        return near.length ? near[0].n : undefined;
      })
      .filter((n) => n !== undefined);
  });
}

/** Rows of the Call Stack view: their aria-labels (what a screen reader announces) and text. */
export async function callStackRows() {
  return state.page.evaluate(() => {
    // No call stack view: no debug session (without a launch.json -- the extension passes --no-launch-json --
    // the Run and Debug view then shows its welcome page, whose other lists must not count as sessions).
    const view = document.querySelector('.debug-call-stack, [id="workbench.debug.callStackView"]');
    if (!view) {
      return [];
    }
    return [...view.querySelectorAll('.monaco-list-row')].map((row) => ({
      label: row.getAttribute('aria-label') ?? '',
      text: row.textContent ?? '',
      expanded: row.getAttribute('aria-expanded'),
      level: row.getAttribute('aria-level'),
      index: row.getAttribute('data-index'),
    }));
  });
}

/** Rows of our Jobs view (label and description as text), when it is visible. */
export async function jobsViewRows() {
  return state.page.evaluate(() => {
    const panes = [...document.querySelectorAll('.pane')].filter((p) => {
      const title = p.querySelector('.pane-header .title, .pane-header h3');
      return title && /Jobs/.test(title.textContent ?? '') && p.offsetParent !== null;
    });
    const viewlet = document.querySelector('[id="workbench.view.extension.remoteDebug"]');
    const roots = panes.length ? panes : viewlet ? [viewlet] : [];
    return roots.flatMap((root) =>
      [...root.querySelectorAll('.monaco-list-row')].map((r) => ({
        text: (r.textContent ?? '').replace(/\s+/g, ' ').trim(),
        label: r.getAttribute('aria-label') ?? '',
      })),
    );
  });
}

/** Notifications on screen (toasts and the notification center): their text and severity. */
export async function notifications() {
  return state.page.evaluate(() =>
    [...document.querySelectorAll('.notification-toast, .notifications-list-container .monaco-list-row')].map((t) => ({
      // the message itself (a toast also holds a <style> for its list)
      text: ((t.querySelector('.notification-list-item-message') ?? t).textContent ?? '').replace(/\s+/g, ' ').trim(),
      error: !!t.querySelector('.codicon-error, .codicon-notifications-error'),
    })),
  );
}

/** Error notifications on screen (our failures surface there): fail fast instead of timing out. */
export async function errorToasts() {
  return (await notifications()).filter((n) => n.error).map((n) => n.text);
}

export async function failOnErrorToast() {
  const errors = await errorToasts();
  if (errors.length) {
    throw Object.assign(new Error(`error notification: ${errors.join(' | ')}`), { fatal: true });
  }
}

export async function variablesText() {
  return state.page.evaluate(() => {
    const view = document.querySelector('.debug-variables, [id="workbench.debug.variablesView"]');
    return view ? [...view.querySelectorAll('.monaco-list-row')].map((r) => r.textContent ?? '') : [];
  });
}

/** The lines an output channel shows in the panel (the channel on screen). */
export async function outputPanelLines() {
  return state.page.evaluate(() => {
    const view = document.querySelector('.part.panel .output-view, .part.panel [id="workbench.panel.output"]');
    const lines = view ? [...view.querySelectorAll('.view-line')] : [];
    return lines
      .map((l) => ({ y: l.getBoundingClientRect().top, text: (l.textContent ?? '').replace(/\u00a0/g, ' ') }))
      .sort((a, b) => a.y - b.y)
      .map((l) => l.text);
  });
}

// --- debug sessions ---------------------------------------------------------------------------------

// The rank sessions are children of the job's own session ("Remote Debug: <job>", one level up in the Call Stack)
// and are named rank first: "rank 0 · algo-1" (with " · <job>" when they go flat, without the job's session).  Found
// by name, at whatever depth they are shown.
const escapeRegExp = (text) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
// (no end anchor: a row's text runs the name into its state, "… · e2e-x1Paused on breakpoint")
const rankName = (rank) => new RegExp(`rank ${rank === undefined ? '\\d+' : rank} · algo-\\d+(?: · ${escapeRegExp(state.job)})?(?![\\d])`);

/** A Call Stack row (callStackRows) that is a rank's session (`rank`: that rank's; undefined: any rank's). */
export const isRankSession = (row, rank) => row.label.startsWith('Session ') && rankName(rank).test(row.label);

/** The call stack row of a rank's session. */
export const rankRow = (rank) => state.page.locator('.debug-call-stack .monaco-list-row', { hasText: rankName(rank) }).first();

/** Click a row on its label, away from the inline actions (Continue/Pause...) that show on hover. */
export async function clickLabel(locator) {
  await locator.click({ position: { x: 60, y: 10 } });
  await state.page.mouse.move(800, 980);
}

/** Wait until `count` sessions are paused on a breakpoint; returns the call stack rows. */
export async function waitForPausedSessions(count, timeout = 300_000) {
  const rows = await waitFor(`${count} sessions paused on a breakpoint`, async () => {
    await failOnErrorToast();
    const r = await callStackRows();
    const paused = r.filter((x) => isRankSession(x) && /Paused on breakpoint$/i.test(x.label));
    if (paused.length === count) {
      return r;
    }
    // (kept by waitFor as the reason, should it time out)
    throw new Error(`the Call Stack shows ${JSON.stringify(r.map((x) => x.label))}`);
  }, { timeout, interval: 1000 });
  say(`call stack: ${JSON.stringify(rows.map((r) => r.label))}`);
  return rows;
}

/**
 * Select a paused rank's session, check its top frame (`main` at `line` of `script`), and read its locals:
 * returns `value(name)`, the Variables row of a local.  `marker`: a local the frame has (train_ddp.py's
 * `shard_marker` by default); `rankLocal`: the frame has a `rank` local equal to the rank (false: a script that
 * is not a torchrun rank, e.g. an adopted plain process).
 */
export async function pausedRankLocals(rank, { line, script, marker = 'shard_marker', rankLocal = true }) {
  await clickLabel(rankRow(rank));
  const topFrame = async () => {
    const rows = await callStackRows();
    const at = rows.findIndex((r) => isRankSession(r, rank));
    if (at < 0) {
      return undefined;
    }
    if (rows[at].expanded === 'false') {
      await clickLabel(rankRow(rank));
      await state.page.keyboard.press('ArrowRight');
      return undefined;
    }
    const next = rows[at + 1];
    return next && Number(next.level) > Number(rows[at].level) && next.label.startsWith('Stack Frame') ? next : undefined;
  };
  const frame = await waitFor(`the top frame of rank ${rank}`, topFrame, { timeout: 30_000 });
  say(`rank ${rank} top frame: ${frame.label}`);
  assert.equal(frame.label, `Stack Frame main, line ${line}, ${script}`, `rank ${rank} is paused in main() at line ${line}`);
  const clickFrame = async (row) => {
    await clickLabel(state.page.locator(`.debug-call-stack .monaco-list-row[data-index="${row.index}"]`));
    return Date.now();
  };
  let clickedAt = await clickFrame(frame);
  // The Variables view keeps showing the frame focused before the click (VS Code focuses the session that
  // stopped last) until it has fetched the new frame's scopes: wait for this rank's own `rank` local, else a
  // fast read would return the other rank's locals.  A click that lands while the Call Stack re-renders (another
  // rank's frames arriving shift the rows) selects nothing: after 3 s still showing another frame, click this
  // rank's top frame again, found afresh.
  const isThisRank = (v) => !rankLocal || v.some((t) => new RegExp(`^rank\\s*[:=]?\\s*${rank}$`).test(t));
  const vars = await waitFor(`the locals of rank ${rank}`, async () => {
    const v = await variablesText();
    if (v.includes('Locals') && !v.some((t) => t.startsWith(marker))) {
      const locals = state.page.locator('.debug-variables .monaco-list-row', { hasText: 'Locals' }).first();
      if ((await locals.getAttribute('aria-expanded')) === 'false') {
        await clickLabel(locals);
      }
      return undefined;
    }
    if (v.some((t) => t.startsWith(marker)) && isThisRank(v)) {
      return v;
    }
    if (Date.now() - clickedAt > 3000) {
      const again = await topFrame();
      clickedAt = again ? await clickFrame(again) : Date.now();
    }
    // (kept by waitFor as the reason, should it time out)
    throw new Error(`the Variables view shows ${JSON.stringify(v.slice(0, 16))}`);
  }, { timeout: 30_000 });
  const value = (name) => vars.find((t) => new RegExp(`^${name}\\s*[:= ]`).test(t));
  say(`rank ${rank} variables: ${rankLocal ? `${value('rank')}; ` : ''}${value(marker)} (${vars.length - 2} locals)`);
  return value;
}

/** Select the rank's session and run Debug: Continue; wait until it is no longer paused. */
export async function continueRank(rank) {
  await clickLabel(rankRow(rank));
  await runCommand('Debug: Continue');
  await waitFor(`rank ${rank} to run on`, async () => {
    const rows = await callStackRows();
    const row = rows.find((r) => isRankSession(r, rank));
    return !row || !/Paused/i.test(row.label);
  }, { timeout: 30_000 });
}

// --- the Jobs view --------------------------------------------------------------------------------------

/** The Jobs view's pane (the view container must be showing). */
export const jobsPane = () => state.page.locator('[id="workbench.view.extension.remoteDebug"]');

/** A row of the Jobs view whose text starts with `text`. */
export const viewRow = (text) => jobsPane().locator('.monaco-list-row', { hasText: text }).first();

/** Hover a row of the Jobs view and click one of its inline action buttons (by the command's title). */
export async function clickInline(row, title) {
  await row.hover();
  const button = row.locator(`.actions .action-label[aria-label="${title}"]`);
  await button.waitFor({ state: 'visible', timeout: 15_000 });
  await button.click();
}

/** The Stacks view's pane in the Remote Debug container (there once Show Stacks ran). */
export const stacksPane = () =>
  state.page.locator('[id="workbench.view.extension.remoteDebug"] .pane', {
    has: state.page.locator('.pane-header .title', { hasText: /^Stacks$/ }),
  });

/** The Stacks view's rows: label, description, tree level, expanded. */
export async function stacksRows() {
  return stacksPane()
    .locator('.monaco-list-row')
    .evaluateAll((rows) =>
      rows.map((r) => ({
        label: (r.querySelector('.label-name')?.textContent ?? '').trim(),
        description: (r.querySelector('.label-description')?.textContent ?? '').trim(),
        level: Number(r.getAttribute('aria-level')),
        expanded: r.getAttribute('aria-expanded'),
      })),
    );
}

export async function showJobsView() {
  await runCommand('View: Show Remote Debug');
  await jobsPane().waitFor({ state: 'visible', timeout: 30_000 });
}

// --- set-up and tear-down ---------------------------------------------------------------------------

/** Launch a local job from the workspace with the Python CLI; `args` go before `--`. */
export async function launchJob(args, command) {
  const name = `e2e-${Date.now().toString(36)}`;
  const out = await cli(['launch', '--local', '--name', name, ...args, '--json', '--', ...command]);
  state.job = JSON.parse(out).name;
  say(`job ${state.job}`);
}

/** Replace the code-server machine's settings (where machine-scoped settings such as remoteDebug.cliPath live). */
export function writeMachineSettings(settings) {
  const dir = path.join(state.root, 'user-data', 'Machine');
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, 'settings.json'), JSON.stringify(settings, null, 2));
}

/** Install the VSIX into a throwaway code-server and start it on the workspace; `settings`: added user settings. */
export async function startCodeServer(settings = {}, { workspaceTrust = false } = {}) {
  const ud = path.join(state.root, 'user-data');
  const ext = path.join(state.root, 'extensions');
  fs.mkdirSync(path.join(ud, 'User'), { recursive: true });
  fs.writeFileSync(
    path.join(ud, 'User', 'settings.json'),
    JSON.stringify(
      {
        'workbench.startupEditor': 'none',
        'security.workspace.trust.enabled': workspaceTrust,
        'extensions.autoUpdate': false,
        'extensions.autoCheckUpdates': false,
        'telemetry.telemetryLevel': 'off',
        'workbench.tips.enabled': false,
        'update.mode': 'none',
        'workbench.secondarySideBar.defaultVisibility': 'hidden',
        'chat.disableAIFeatures': true,
        'remote.autoForwardPorts': false,
        'remoteDebug.cliPath': env.cli,
        'remoteDebug.refreshIntervalSeconds': 3,
        // the tests written for ranks that each stop at their own breakpoint debug them non-stop;
        // allstop.e2e.mjs turns all-stop (the setting's default) back on
        'remoteDebug.allStop': false,
        ...settings,
      },
      null,
      2,
    ),
  );
  // cliPath / pythonPath are machine settings (scope machine-overridable, like the Python extension's interpreter
  // path): in a remote window -- and code-server's workbench is one -- VS Code reads those from the machine's
  // settings (Machine/settings.json), never from the user's, which belong to the laptop
  writeMachineSettings({ 'remoteDebug.cliPath': env.cli });
  const config = path.join(state.root, 'code-server.yaml');
  fs.writeFileSync(config, 'auth: none\ncert: false\n');
  const common = ['--config', config, '--user-data-dir', ud, '--extensions-dir', ext];
  const t0 = Date.now();
  const { stdout } = await execFileP(env.codeServer, [...common, '--install-extension', env.vsix], { env: childEnv(), timeout: 120_000 });
  say(`installed the VSIX in ${((Date.now() - t0) / 1000).toFixed(1)} s: ${stdout.trim().split('\n').pop()}`);
  const port = await freePort();
  state.url = `http://127.0.0.1:${port}`;
  state.codeServer = spawn(
    env.codeServer,
    [
      ...common,
      '--bind-addr', `127.0.0.1:${port}`, '--auth', 'none', '--disable-telemetry', '--disable-update-check',
      ...(workspaceTrust ? [] : ['--disable-workspace-trust']), '--disable-getting-started-override', '--reconnection-grace-time', '5',
      state.workspace,
    ],
    { env: childEnv(), detached: true, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const append = (d) => (state.codeServerLog += d.toString());
  state.codeServer.stdout.on('data', append);
  state.codeServer.stderr.on('data', append);
  await waitFor('code-server /healthz', async () => {
    if (state.codeServer.exitCode !== null) {
      throw new Error(`code-server exited: ${state.codeServerLog.slice(-2000)}`);
    }
    const res = await fetch(`${state.url}/healthz`);
    return res.ok;
  }, { timeout: 60_000 });
}

export async function openWorkbench() {
  state.browser = await chromium.launch({
    executablePath: env.chromium,
    headless: true,
    args: [
      '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage',
    ],
  });
  const context = await state.browser.newContext({ viewport: { width: 1600, height: 1000 } });
  state.page = await context.newPage();
  state.page.setDefaultTimeout(30_000);
  await state.page.goto(`${state.url}/?folder=${encodeURIComponent(state.workspace)}`, { timeout: 120_000 });
  await state.page.locator('.monaco-workbench .part.statusbar').waitFor({ timeout: 120_000 });
  await state.page.waitForTimeout(1500); // let the workbench settle (restored views, focus)
  await screenshot('workbench');
}

/** Open the script, go to the line, F9: exactly one breakpoint there. */
export async function setBreakpoint(script, line) {
  await openFile(script);
  await goToLine(line);
  await state.page.keyboard.press('F9'); // Debug: Toggle Breakpoint, at the cursor
  await waitFor(`a breakpoint dot on line ${line}`, async () => (await breakpointLines()).includes(line), { timeout: 20_000 });
  assert.deepEqual(await breakpointLines(), [line], 'exactly one breakpoint, on the line we chose');
}

/** Interrupted (Ctrl-C, a CI time-out): `after` would not run, so stop what we started right here. */
function emergencyStop(signal) {
  say(`${signal}: stopping code-server and the job`);
  try {
    if (state.codeServer?.pid) {
      process.kill(-state.codeServer.pid, 'SIGKILL');
    }
  } catch {
    // already gone
  }
  if (state.job) {
    try {
      execFileSync(env.cli, ['stop', state.job, '--json'], { env: childEnv(), stdio: 'ignore', timeout: 150_000 });
    } catch {
      // it may have ended already
    }
  }
  process.exit(130);
}

/** Check the environment, and register the hooks that make and remove everything the test uses. */
/** Copy the example training script into the workspace; its lines, and the index (0-based) of the line
 *  marked REMOTE-DEBUG-BREAKPOINT (the tests stop on the line after it, where shard_marker has its value). */
export function placeExample(script = 'train_ddp.py') {
  const source = fs.readFileSync(path.join(repo, 'remote_debug', 'examples', script), 'utf8');
  fs.writeFileSync(path.join(state.workspace, script), source);
  const lines = source.split('\n');
  const marker = lines.findIndex((l) => l.includes('# REMOTE-DEBUG-BREAKPOINT'));
  assert.ok(marker >= 0, 'the example has a REMOTE-DEBUG-BREAKPOINT line');
  return { script, lines, marker };
}

export function useHarness(name) {
  state.name = name;
  state.artifacts = path.join(path.resolve(process.env.RD_ARTIFACTS ?? path.join(repo, 'test-artifacts', 'e2e')), name);
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
    process.once(signal, () => emergencyStop(signal));
  }

  before(async () => {
    for (const [key, file] of Object.entries(env)) {
      if (key !== 'nodeBin' && !fs.existsSync(file)) {
        throw new Error(`${key}: ${file} does not exist (run ./dev test-extension)`);
      }
    }
    fs.rmSync(state.artifacts, { recursive: true, force: true });
    fs.mkdirSync(state.artifacts, { recursive: true });
    state.root = fs.mkdtempSync(path.join(os.tmpdir(), `rd-e2e-${name}-`));
    state.home = path.join(state.root, 'home');
    state.workspace = path.join(state.root, 'workspace');
    fs.mkdirSync(state.home, { recursive: true, mode: 0o700 });
    fs.mkdirSync(state.workspace, { recursive: true });
    fs.mkdirSync(path.join(state.root, 'tmp'), { recursive: true, mode: 0o700 });
    say(`root ${state.root}`);
  });

  after(async () => {
    say('tear-down');
    try {
      await state.browser?.close();
    } catch (err) {
      say(`closing chromium: ${err.message}`);
    }
    if (state.job) {
      try {
        const job = await jobInfo();
        if (job && (job.status === 'InProgress' || job.status === 'Stopping')) {
          say(`stopping job ${state.job}`);
          await cli(['stop', state.job, '--json']);
        }
      } catch (err) {
        say(`stopping job ${state.job}: ${err.message}`);
      }
    }
    const cs = state.codeServer;
    if (cs && cs.exitCode === null && cs.signalCode === null) {
      // its own process group: code-server, its extension hosts and anything they started
      const gone = new Promise((resolve) => cs.once('exit', resolve));
      try {
        process.kill(-cs.pid, 'SIGTERM');
      } catch {
        // already gone
      }
      const timer = setTimeout(() => {
        try {
          process.kill(-cs.pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }, 10_000);
      await gone;
      clearTimeout(timer);
    }
    if (state.codeServerLog) {
      fs.mkdirSync(state.artifacts, { recursive: true });
      fs.writeFileSync(path.join(state.artifacts, 'code-server.log'), state.codeServerLog);
    }
    if (state.root && !process.env.RD_E2E_KEEP) {
      fs.rmSync(state.root, { recursive: true, force: true });
    }
    say('tear-down done');
  });
}
