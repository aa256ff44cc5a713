import assert from 'node:assert/strict';
import { beforeEach, test } from 'node:test';

import * as vscode from 'vscode';

import { RankAdapterFactory, RankConfigurationProvider, registerDebugType } from '../../src/debugAdapter';
import { mock } from './vscode-mock';

beforeEach(() => mock.reset());

test('the adapter is the forwarded debugpy port itself', () => {
  const d = new RankAdapterFactory().createDebugAdapterDescriptor({ configuration: { connect: { host: '127.0.0.1', port: 41001 } } } as unknown as vscode.DebugSession);
  assert.ok(d instanceof vscode.DebugAdapterServer);
  assert.equal((d as vscode.DebugAdapterServer).port, 41001);
  assert.equal((d as vscode.DebugAdapterServer).host, '127.0.0.1');
});

test('no port: the session fails with a message saying what to do', () => {
  assert.throws(
    () => new RankAdapterFactory().createDebugAdapterDescriptor({ configuration: { type: 'remote-debug' } } as unknown as vscode.DebugSession),
    /Attach All Ranks/,
  );
});

test('the configuration provider checks configurations before a session starts', async () => {
  const p = new RankConfigurationProvider();
  const ok = (await p.resolveDebugConfiguration(undefined, { type: 'remote-debug', name: 'r', request: 'attach', connect: { port: 4000 } })) as vscode.DebugConfiguration;
  assert.equal(ok.justMyCode, false, 'debugpy needs at least one attach option');
  assert.equal(await p.resolveDebugConfiguration(undefined, { type: 'remote-debug', name: 'r', request: 'launch' }), undefined);
  assert.match(mock.messages('showErrorMessage')[0], /only "request": "attach"/);
  assert.equal(await p.resolveDebugConfiguration(undefined, { type: 'remote-debug', name: 'r', request: 'attach' }), undefined);
  assert.match(mock.messages('showErrorMessage')[1], /no "connect"/);
  assert.equal(await p.resolveDebugConfiguration(undefined, { type: '', name: '', request: '' }), undefined);
  assert.match(mock.messages('showInformationMessage')[0], /attach from the Remote Debug view/);
});

test('registers the factory and the provider for the remote-debug type', () => {
  registerDebugType();
  assert.deepEqual(mock.calls.map((c) => [c.fn, c.args[0]]), [
    ['registerDebugAdapterDescriptorFactory', 'remote-debug'],
    ['registerDebugConfigurationProvider', 'remote-debug'],
  ]);
});
