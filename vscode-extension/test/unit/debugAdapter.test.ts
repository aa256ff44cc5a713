import assert from 'node:assert/strict';
import { beforeEach, test } from 'node:test';

import * as vscode from 'vscode';

import { DynamicJobConfigurations, JobDebugging, RankAdapterFactory, RankConfigurationProvider, registerDebugType } from '../../src/debugAdapter';
import { JobAttachConfiguration } from '../../src/jobConfig';
import { JobParentAdapter, parentConfiguration } from '../../src/jobSession';
import { mock } from './vscode-mock';

beforeEach(() => mock.reset());

function jobs(running: string[] = ['job-a', 'job-b']) {
  const attaches: Array<{ folder: vscode.WorkspaceFolder | undefined; config: JobAttachConfiguration }> = [];
  const api: JobDebugging = {
    attachFromConfiguration: async (folder, config) => void attaches.push({ folder, config }),
    runningJobs: async () => running,
  };
  return { api, attaches };
}

const session = (configuration: object) => ({ configuration }) as unknown as vscode.DebugSession;

test('the adapter is the forwarded debugpy port itself', () => {
  const d = new RankAdapterFactory().createDebugAdapterDescriptor(session({ connect: { host: '127.0.0.1', port: 41001 } }));
  assert.ok(d instanceof vscode.DebugAdapterServer);
  assert.equal((d as vscode.DebugAdapterServer).port, 41001);
  assert.equal((d as vscode.DebugAdapterServer).host, '127.0.0.1');
});

test("the job's own session gets the inline adapter", () => {
  const d = new RankAdapterFactory().createDebugAdapterDescriptor(session(parentConfiguration('j', 'j#1')));
  assert.ok(d instanceof vscode.DebugAdapterInlineImplementation);
  assert.ok((d as unknown as { implementation: unknown }).implementation instanceof JobParentAdapter);
});

test('no port: the session fails with a message saying what to do', () => {
  assert.throws(() => new RankAdapterFactory().createDebugAdapterDescriptor(session({ type: 'remote-debug' })), /Attach All Ranks/);
});

test('the configuration provider checks connect configurations before a session starts', async () => {
  const p = new RankConfigurationProvider();
  const ok = (await p.resolveDebugConfiguration(undefined, { type: 'remote-debug', name: 'r', request: 'attach', connect: { port: 4000 } })) as vscode.DebugConfiguration;
  assert.equal(ok.justMyCode, false, 'debugpy needs at least one attach option');
  assert.equal(await p.resolveDebugConfiguration(undefined, { type: 'remote-debug', name: 'r', request: 'launch' }), undefined);
  assert.match(mock.messages('showErrorMessage')[0], /only "request": "attach"/);
  assert.equal(await p.resolveDebugConfiguration(undefined, { type: 'remote-debug', name: 'r', request: 'attach' }), undefined);
  assert.match(mock.messages('showErrorMessage')[1], /no "connect"/);
  // the job's own session passes untouched
  const parent = parentConfiguration('j', 'j#1');
  assert.equal(await p.resolveDebugConfiguration(undefined, parent), parent);
});

test('F5 without a launch.json, this debugger chosen: attach every rank of a job picked then', async () => {
  const p = new RankConfigurationProvider(jobs().api);
  const config = await p.resolveDebugConfiguration(undefined, { type: '', name: '', request: '' });
  assert.deepEqual(config, {
    type: 'remote-debug',
    request: 'attach',
    name: 'Remote Debug: attach to a job',
    job: '${command:remoteDebug.pickJob}',
    ranks: 'all',
  });
});

test('the job form: kept for substitution, then F5 runs the attach and starts no session of its own', async () => {
  const { api, attaches } = jobs();
  const p = new RankConfigurationProvider(api);
  const folder = mock.folder('/ws') as unknown as vscode.WorkspaceFolder;
  const raw = { type: 'remote-debug', name: 'ranks', request: 'attach', job: '${command:remoteDebug.pickJob}', ranks: [2, 0], justMyCode: true };
  assert.equal(await p.resolveDebugConfiguration(folder, raw), raw, 'the variable is substituted after this');
  const substituted = { ...raw, job: 'job-a' };
  assert.equal(await p.resolveDebugConfigurationWithSubstitutedVariables(folder, substituted), undefined);
  assert.deepEqual(attaches, [{ folder, config: { job: 'job-a', ranks: [0, 2], justMyCode: true } }]);
  assert.deepEqual(mock.messages('showErrorMessage'), []);
});

test('the job form: bad ranks, no job, or a job and a port say what is wrong, and start nothing', async () => {
  const { api, attaches } = jobs();
  const p = new RankConfigurationProvider(api);
  assert.equal(await p.resolveDebugConfiguration(undefined, { type: 'remote-debug', name: 'x', request: 'attach', job: 'j', ranks: 'some' }), undefined);
  assert.match(mock.messages('showErrorMessage')[0], /"ranks" must be "all", a list like "0,2"/);
  assert.equal(await p.resolveDebugConfigurationWithSubstitutedVariables(undefined, { type: 'remote-debug', name: 'x', request: 'attach', job: '' }), undefined);
  assert.match(mock.messages('showErrorMessage')[1], /names no job: set "job" to a job name or to "\$\{command:remoteDebug.pickJob\}"/);
  const both = { type: 'remote-debug', name: 'x', request: 'attach', job: 'j', connect: { port: 4000 } };
  assert.equal(await p.resolveDebugConfigurationWithSubstitutedVariables(undefined, both), undefined);
  assert.match(mock.messages('showErrorMessage')[2], /either "job" .* or "connect"/);
  assert.equal(attaches.length, 0);
  // a connect configuration is left as it is
  const connect = { type: 'remote-debug', name: 'r', request: 'attach', connect: { port: 4000 } };
  assert.equal(await p.resolveDebugConfigurationWithSubstitutedVariables(undefined, connect), connect);
});

test('the dynamic configurations: "Attach all ranks: <job>" per running job', async () => {
  const configs = await new DynamicJobConfigurations(jobs(['job-a', 'job-b']).api).provideDebugConfigurations();
  assert.deepEqual(configs, [
    { type: 'remote-debug', request: 'attach', name: 'Attach all ranks: job-a', job: 'job-a', ranks: 'all' },
    { type: 'remote-debug', request: 'attach', name: 'Attach all ranks: job-b', job: 'job-b', ranks: 'all' },
  ]);
});

test('registers the factory, the resolver and the dynamic provider for the remote-debug type', () => {
  registerDebugType(jobs().api);
  assert.deepEqual(
    mock.calls.map((c) => [c.fn, c.args[0], c.args[1]?.constructor?.name, c.args[2]]),
    [
      ['registerDebugAdapterDescriptorFactory', 'remote-debug', 'RankAdapterFactory', undefined],
      ['registerDebugConfigurationProvider', 'remote-debug', 'RankConfigurationProvider', undefined],
      ['registerDebugConfigurationProvider', 'remote-debug', 'DynamicJobConfigurations', vscode.DebugConfigurationProviderTriggerKind.Dynamic],
    ],
  );
});
