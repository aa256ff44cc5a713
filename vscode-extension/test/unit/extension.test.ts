import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';

import * as vscode from 'vscode';

import { activate, deactivate } from '../../src/extension';
import { fakeCli, jobJson, until } from './helpers';
import { mock } from './vscode-mock';

const manifest = JSON.parse(fs.readFileSync(path.resolve(__dirname, '../../../package.json'), 'utf8'));

test('activate registers exactly the commands package.json contributes, and lists jobs', async () => {
  mock.reset();
  fakeCli({ jobs: { stdout: JSON.stringify([jobJson()]) } });
  mock.config['remoteDebug.cliPath'] = process.env.FAKE_CLI_PATH ?? path.resolve(__dirname, '../../../test/unit/fixtures/fake-remote-debug.js');
  const context = { subscriptions: [] as Array<{ dispose(): unknown }>, globalState: { get: () => undefined, update: async () => undefined } };
  const api = activate(context as unknown as vscode.ExtensionContext);
  const contributed = manifest.contributes.commands.map((c: { command: string }) => c.command).sort();
  assert.deepEqual([...mock.commands.keys()].sort(), contributed);
  await until('the first listing', () => api.model.loaded);
  assert.deepEqual(api.model.list().map((j) => j.info.name), ['local-1']);
  assert.equal(mock.calls.find((c) => c.fn === 'createTreeView')?.args[0], 'remoteDebug.jobs');
  // the Sync and Re-run keybinding's context: nothing attached yet
  assert.deepEqual(mock.executed.filter((e) => e.command === 'setContext').map((e) => e.args), [['remoteDebug.attached', false]]);
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

test('package.json: Sync and Re-run has a keybinding that only applies while attached (or in the Jobs view)', () => {
  const bindings = manifest.contributes.keybindings as Array<{ command: string; key: string; mac?: string; when?: string }>;
  const rerun = bindings.find((b) => b.command === 'remoteDebug.syncAndRerun');
  assert.ok(rerun, 'a keybinding');
  assert.equal(rerun.key, 'ctrl+alt+r');
  assert.equal(rerun.mac, 'cmd+alt+r');
  assert.equal(rerun.when, 'remoteDebug.attached || focusedView == remoteDebug.jobs', 'never global');
  const menus = manifest.contributes.menus['view/item/context'] as Array<{ command: string; when: string }>;
  assert.ok(menus.some((m) => m.command === 'remoteDebug.syncAndRerun' && /viewItem =~ \/\^job-running\//.test(m.when)));
  assert.ok(menus.some((m) => m.command === 'remoteDebug.release' && /-keepalive/.test(m.when)), 'Release on kept-alive jobs');
  assert.ok(menus.some((m) => m.command === 'remoteDebug.stopRun' && /-rerunning/.test(m.when)));
  const setting = manifest.contributes.configuration.properties['remoteDebug.rerun.waitSeconds'];
  assert.equal(setting.default, 30);
});
