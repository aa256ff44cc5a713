import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';

import * as vscode from 'vscode';

import { activate, deactivate } from '../../src/extension';
import { attachLines, fakeCli, jobJson, tempDir, until } from './helpers';
import { mock } from './vscode-mock';

const manifest = JSON.parse(fs.readFileSync(path.resolve(__dirname, '../../../package.json'), 'utf8'));

test('activate registers exactly the commands package.json contributes, and lists jobs', async () => {
  mock.reset();
  fakeCli({ jobs: { stdout: JSON.stringify([jobJson()]) } });
  mock.config['remoteDebug.cliPath'] = process.env.FAKE_CLI_PATH ?? path.resolve(__dirname, '../../../test/unit/fixtures/fake-remote-debug.js');
  const context = {
    subscriptions: [] as Array<{ dispose(): unknown }>,
    globalState: { get: () => undefined, update: async () => undefined },
    workspaceState: { get: () => undefined, update: async () => undefined },
  };
  const api = activate(context as unknown as vscode.ExtensionContext);
  // the extension's log is a LogOutputChannel (levels, times)
  assert.ok(mock.logChannels.has('Remote Debug'));
  const contributed = manifest.contributes.commands.map((c: { command: string }) => c.command).sort();
  assert.deepEqual([...mock.commands.keys()].sort(), contributed);
  await until('the first listing', () => api.model.loaded);
  assert.deepEqual(api.model.list().map((j) => j.info.name), ['local-1']);
  assert.equal(mock.calls.find((c) => c.fn === 'createTreeView')?.args[0], 'remoteDebug.jobs');
  // the contexts of the group actions and Sync and Re-run (keybindings, menus): nothing attached, nothing kept alive,
  // no debug session of ours focused
  assert.deepEqual(mock.executed.filter((e) => e.command === 'setContext').map((e) => e.args).sort(), [
    ['remoteDebug.attached', false],
    ['remoteDebug.debugSessionFocused', false],
    ['remoteDebug.keptAliveJob', false],
  ]);
  assert.ok(api.runs, 'the re-runs are part of the API');
  context.subscriptions.forEach((d) => d.dispose());
  await deactivate();
});

test('package.json: every setting the code reads is contributed, the debug type and breakpoints are declared', () => {
  const props = Object.keys(manifest.contributes.configuration.properties);
  const src = path.resolve(__dirname, '../../../src');
  const source = (fs.readdirSync(src, { recursive: true }) as string[])
    .filter((f) => f.endsWith('.ts'))
    .map((f) => fs.readFileSync(path.join(src, f), 'utf8'))
    .join('\n');
  const read = [...source.matchAll(/c\.get<[^>]+>\('([^']+)'/g)].map((m) => `remoteDebug.${m[1]}`);
  assert.ok(read.length >= 8);
  for (const key of read) {
    assert.ok(props.includes(key), `${key} is contributed`);
  }
  assert.deepEqual(manifest.contributes.debuggers.map((d: { type: string }) => d.type), ['remote-debug']);
  assert.deepEqual(manifest.contributes.breakpoints, [{ language: 'python' }]);
  assert.equal(manifest.main, './dist/extension.js');
});

test('package.json: Sync and Re-run: a keybinding only while a kept-alive job is there (attached or in the Jobs view)', () => {
  const bindings = manifest.contributes.keybindings as Array<{ command: string; key: string; mac?: string; when?: string }>;
  const rerun = bindings.find((b) => b.command === 'remoteDebug.syncAndRerun');
  assert.ok(rerun, 'a keybinding');
  assert.equal(rerun.key, 'ctrl+alt+r');
  assert.equal(rerun.mac, 'cmd+alt+r');
  assert.equal(rerun.when, 'remoteDebug.keptAliveJob && (remoteDebug.attached || focusedView == remoteDebug.jobs)', 'never global');
  const menus = manifest.contributes.menus['view/item/context'] as Array<{ command: string; when: string }>;
  // offered only where it can work: a job that keeps its nodes (launch --keep-alive)
  const rerunMenus = menus.filter((m) => m.command === 'remoteDebug.syncAndRerun');
  assert.ok(rerunMenus.length >= 2 && rerunMenus.every((m) => /viewItem =~ \/\^job-running\.\*-keepalive\//.test(m.when)), JSON.stringify(rerunMenus));
  const title = (manifest.contributes.menus['view/title'] as Array<{ command: string; when: string }>).find((m) => m.command === 'remoteDebug.syncAndRerun');
  assert.equal(title?.when, 'view == remoteDebug.jobs && remoteDebug.keptAliveJob');
  assert.ok(menus.some((m) => m.command === 'remoteDebug.release' && /-keepalive/.test(m.when)), 'Release on kept-alive jobs');
  assert.ok(menus.some((m) => m.command === 'remoteDebug.stopRun' && /-rerunning/.test(m.when)));
  const setting = manifest.contributes.configuration.properties['remoteDebug.rerun.waitSeconds'];
  assert.equal(setting.default, 30);
});

test('package.json: the remote-debug debugger — the job form for launch.json, no "Select debugger" on every Python F5, no port 0', () => {
  const [dbg] = manifest.contributes.debuggers;
  assert.equal(dbg.languages, undefined, 'not offered for every Python file without a launch.json');
  const props = dbg.configurationAttributes.attach.properties;
  assert.deepEqual(Object.keys(props).sort(), ['connect', 'job', 'justMyCode', 'pathMappings', 'ranks']);
  for (const [name, p] of Object.entries(props) as Array<[string, { description?: string; markdownDescription?: string }]>) {
    assert.ok(p.description || p.markdownDescription, `${name} is described`);
  }
  assert.equal(dbg.configurationAttributes.attach.required, undefined, 'job or connect');
  assert.deepEqual(dbg.initialConfigurations, [
    { type: 'remote-debug', request: 'attach', name: 'Remote Debug: attach to a job', job: '${command:remoteDebug.pickJob}', ranks: 'all' },
  ]);
  assert.ok(dbg.configurationSnippets.length >= 1);
  for (const s of dbg.configurationSnippets) {
    assert.equal(s.body.type, 'remote-debug');
    assert.match(s.body.job, /command:remoteDebug\.pickJob/);
  }
  assert.doesNotMatch(JSON.stringify(dbg), /"port":\s*0\b/);
  assert.ok(manifest.activationEvents.includes('onDebugDynamicConfigurations:remote-debug'));
  const palette = manifest.contributes.menus.commandPalette as Array<{ command: string; when: string }>;
  assert.ok(palette.some((m) => m.command === 'remoteDebug.pickJob' && m.when === 'false'), 'a variable, not a palette command');
});

test('package.json: settings with a per-folder value are resource-scoped; the executables machine-overridable', () => {
  const props = manifest.contributes.configuration.properties;
  for (const key of ['pathMappings', 'justMyCode', 'debugType', 'defaultRanks', 'launch.nprocPerNode', 'launch.waitSeconds', 'reattachAfterReload']) {
    assert.equal(props[`remoteDebug.${key}`].scope, 'resource', key);
  }
  for (const key of ['cliPath', 'pythonPath']) {
    assert.equal(props[`remoteDebug.${key}`].scope, 'machine-overridable', key);
  }
});

test('package.json: the Stacks view (once Show Stacks ran) with Refresh and Open as JSON; Show Rank Output on every job row', () => {
  const stacks = (manifest.contributes.views.remoteDebug as Array<{ id: string; when?: string }>).find((v) => v.id === 'remoteDebug.stacks');
  assert.equal(stacks?.when, 'remoteDebug.stacksShown', 'no empty view in the container before it has something to show');
  const title = manifest.contributes.menus['view/title'] as Array<{ command: string; when: string; group: string }>;
  for (const command of ['remoteDebug.stacks.refresh', 'remoteDebug.stacks.openJson']) {
    assert.ok(title.some((m) => m.command === command && m.when === 'view == remoteDebug.stacks' && m.group.startsWith('navigation')), command);
  }
  const items = manifest.contributes.menus['view/item/context'] as Array<{ command: string; when: string; group: string }>;
  assert.ok(items.some((m) => m.command === 'remoteDebug.showRankOutput' && m.when.includes('viewItem =~ /^job-/')), 'ended jobs too');
  assert.ok(items.some((m) => m.command === 'remoteDebug.stacks.attach' && m.group.startsWith('inline') && m.when.includes('stack(Class|Rank)')));
  assert.equal(manifest.contributes.configuration.properties['remoteDebug.output.followOnAttach'].default, true);
});

test('package.json: Re-attach on a job or a rank whose session ended unexpectedly', () => {
  const menus = manifest.contributes.menus['view/item/context'] as Array<{ command: string; when: string; group: string }>;
  const reattach = menus.filter((m) => m.command === 'remoteDebug.reattach');
  assert.ok(reattach.some((m) => m.group.startsWith('inline') && m.when.includes('/^rank-detached-lost/')));
  assert.ok(reattach.some((m) => m.group.startsWith('inline') && m.when.includes('/^job-running.*-reattach/')));
  assert.ok(menus.some((m) => m.command === 'remoteDebug.attachStuckRanks' && /job-running/.test(m.when)));
  assert.ok(menus.some((m) => m.command === 'remoteDebug.changeLocalRoot' && /job-running/.test(m.when)));
});

test('activate attaches again to a job that was attached before the window reloaded', async () => {
  mock.reset();
  const ws = tempDir('rd-reload');
  mock.folder(ws);
  const { invocations } = fakeCli({ jobs: { stdout: JSON.stringify([jobJson()]) }, attach: { lines: attachLines(), hold: true } });
  mock.config['remoteDebug.cliPath'] = path.resolve(__dirname, '../../../test/unit/fixtures/fake-remote-debug.js');
  mock.startDebugging = async (_f, config, opts) => {
    mock.startSession(config, opts);
    return true;
  };
  const store = new Map<string, unknown>([['remoteDebug.attachedJobs', [{ job: 'local-1', ranks: 'all', folder: vscode.Uri.file(ws).toString() }]]]);
  const state = { get: (k: string) => store.get(k), update: async (k: string, v: unknown) => void store.set(k, v) };
  const context = { subscriptions: [] as Array<{ dispose(): unknown }>, globalState: state, workspaceState: state };
  const api = activate(context as unknown as vscode.ExtensionContext);
  await until('the attach', () => api.attacher.isAttached('local-1') && mock.sessions.some((s) => s.configuration.remoteDebug));
  assert.deepEqual(invocations().filter((i) => i.args[0] === 'attach').map((i) => i.args.slice(0, 2)), [['attach', 'local-1']]);
  await deactivate(); // the window closes: the job stays remembered
  assert.equal((store.get('remoteDebug.attachedJobs') as unknown[]).length, 1);
  context.subscriptions.forEach((d) => d.dispose());
});
