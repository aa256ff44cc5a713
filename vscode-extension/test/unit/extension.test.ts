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
