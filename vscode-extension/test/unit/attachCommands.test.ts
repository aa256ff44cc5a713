import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { beforeEach, test } from 'node:test';

import * as vscode from 'vscode';

import { AttachRequest } from '../../src/attach';
import { AttachCommands } from '../../src/attachCommands';
import { AttachMemory } from '../../src/attachMemory';
import { AttachTargets } from '../../src/attachTarget';
import { JobInfo } from '../../src/events';
import { JobsModel } from '../../src/model';
import { TreeNode } from '../../src/tree';
import { jobJson, tempDir } from './helpers';
import { mock, Uri } from './vscode-mock';

beforeEach(() => mock.reset());

function memento() {
  const store = new Map<string, unknown>();
  return { get: <T>(k: string) => store.get(k) as T, update: async (k: string, v: unknown) => void store.set(k, v) };
}

function setup(jobs: JobInfo[], options: { lost?: Record<string, number[]>; reattached?: boolean; attached?: string[] } = {}) {
  const ws = tempDir('rd-ac');
  fs.mkdirSync(path.join(ws, 'training'));
  const folder = mock.folder(ws) as unknown as vscode.WorkspaceFolder;
  const model = new JobsModel();
  model.setJobs(jobs);
  const attaches: AttachRequest[] = [];
  const reattaches: Array<[string, number[] | undefined]> = [];
  const attacher = {
    attach: async (r: AttachRequest) => void attaches.push(r),
    reattach: async (job: string, ranks?: number[]) => (reattaches.push([job, ranks]), options.reattached ?? true),
    lostRanks: (job: string) => options.lost?.[job] ?? [],
    isAttached: (job: string) => (options.attached ?? []).includes(job),
    sessionFor: () => undefined,
  };
  const picks: string[] = [];
  const picker = {
    pickJob: async (o: { node?: TreeNode; placeHolder: string }) => {
      picks.push(o.placeHolder);
      return o.node && o.node.kind !== 'message' ? model.get(o.node.job)?.info : model.running()[0]?.info;
    },
    refresh: async () => undefined,
  };
  const memory = new AttachMemory(memento());
  const log: string[] = [];
  const commands = new AttachCommands(picker, model, attacher as never, new AttachTargets(memento()), memory, { appendLine: (l) => log.push(l) });
  commands.register();
  const run = (name: string, ...args: unknown[]) => mock.commands.get(name)!(...args);
  return { ws, folder, model, commands, attaches, reattaches, memory, run, log, picks };
}

test("remoteDebug.pickJob returns the picked running job's name (what ${command:…} substitutes)", async () => {
  const { run } = setup([jobJson({ name: 'j' })]);
  assert.equal(await run('remoteDebug.pickJob'), 'j');
});

test('F5 on a job configuration attaches from where the code is, with its ranks and overrides', async () => {
  const { ws, commands, attaches, folder } = setup([]);
  const { model } = { model: (commands as unknown as { model: JobsModel }).model };
  model.setJobs([jobJson({ name: 'j', source_dir: path.join(ws, 'training') })]);
  await commands.attachFromConfiguration(folder, { job: 'j', ranks: [0, 2], justMyCode: true });
  assert.deepEqual(
    attaches.map((r) => [r.job, r.ranks, r.folder.uri.fsPath, r.localRoot, r.justMyCode]),
    [['j', [0, 2], ws, path.join(ws, 'training'), true]],
  );
  await commands.attachFromConfiguration(folder, { job: 'nope', ranks: undefined });
  assert.match(mock.messages('showErrorMessage')[0], /there is no job named nope/);
  model.setError('AWS credentials expired');
  await commands.attachFromConfiguration(folder, { job: 'k', ranks: undefined });
  assert.match(mock.messages('showErrorMessage')[1], /cannot list jobs: AWS credentials expired/);
});

test('the dynamic configurations list the running, debuggable jobs', async () => {
  const { commands } = setup([jobJson({ name: 'a' }), jobJson({ name: 'b', status: 'Completed' }), jobJson({ name: 'c', debuggable: false })]);
  assert.deepEqual(await commands.runningJobs(), ['a']);
});

test('Re-attach: from a rank, a job, or the palette (the one job with lost sessions)', async () => {
  const { run, reattaches } = setup([jobJson({ name: 'a' }), jobJson({ name: 'b' })], { lost: { b: [3] } });
  await run('remoteDebug.reattach', { kind: 'rank', job: 'a', node: 'algo-1', rank: 1 });
  await run('remoteDebug.reattach', { kind: 'job', job: 'a' });
  await run('remoteDebug.reattach');
  assert.deepEqual(reattaches, [['a', [1]], ['a', undefined], ['b', undefined]]);
});

test('Re-attach with nothing to re-attach says so', async () => {
  const { run, reattaches } = setup([jobJson({ name: 'a' })], { reattached: false });
  await run('remoteDebug.reattach');
  assert.match(mock.messages('showInformationMessage')[0], /no debug session ended unexpectedly/);
  await run('remoteDebug.reattach', { kind: 'job', job: 'a' });
  assert.match(mock.messages('showInformationMessage')[1], /nothing of a to re-attach/);
  assert.equal(reattaches.length, 1);
});

test('Attach Paused and Failed Ranks: just the ranks waiting for a debugger or held after a failure', async () => {
  const job = jobJson({ name: 'j', nproc_per_node: 4, held_ranks: [{ rank: 3, node: 'algo-1', seconds_left: 100, error: 'boom', root_cause: true, held_for: null }] });
  const { run, model, attaches, ws } = setup([job]);
  model.applyEvent('j', { event: 'rank-ready', v: 1, rank: 1, node: 'algo-1', local_port: 1, remote_port: 2, state: 'waiting', ide: 'vscode', code_dir: '/c' });
  model.applyEvent('j', { event: 'rank-ready', v: 1, rank: 2, node: 'algo-1', local_port: 1, remote_port: 2, state: 'listening', ide: 'vscode', code_dir: '/c' });
  await run('remoteDebug.attachStuckRanks', { kind: 'job', job: 'j' });
  assert.deepEqual(attaches.map((r) => [r.ranks, r.folder.uri.fsPath]), [[[1, 3], ws]]);
  // nothing waits or failed: says so
  const quiet = setup([jobJson({ name: 'q' })]);
  await quiet.run('remoteDebug.attachStuckRanks', { kind: 'job', job: 'q' });
  assert.match(mock.messages('showInformationMessage')[0], /no rank of q waits for a debugger or is held after a failure/);
  assert.equal(quiet.attaches.length, 0);
});

test("Change Local Source Folder…: a SageMaker job's is picked again; a local job's comes from its source dir", async () => {
  const { run, ws, commands } = setup([jobJson({ name: 'sm', backend: 'sagemaker', source_dir: null }), jobJson({ name: 'loc', source_dir: '/ws-missing' })]);
  mock.quickPicks.push((items) => items.find((i: { label: string }) => i.label.endsWith('training')));
  await run('remoteDebug.changeLocalRoot', { kind: 'job', job: 'sm' });
  assert.match(mock.messages('showInformationMessage')[0], new RegExp(`sm now maps ${path.join(ws, 'training')}`));
  const targets = (commands as unknown as { targets: AttachTargets }).targets;
  assert.equal(targets.picked('sm'), path.join(ws, 'training'));
  const local = setup([jobJson({ name: 'loc2', source_dir: '' })]);
  const src = path.join(local.ws, 'training');
  local.model.setJobs([jobJson({ name: 'loc2', source_dir: src })]);
  await local.run('remoteDebug.changeLocalRoot', { kind: 'job', job: 'loc2' });
  assert.match(mock.messages('showInformationMessage').at(-1)!, /loc2 runs the code copied from .*training, which its debug sessions map/);
});

test('after a window reload: running jobs attached again, ended ones forgotten, listing errors keep them', async () => {
  const { commands, memory, reattaches, folder, model } = setup([jobJson({ name: 'live' }), jobJson({ name: 'done', status: 'Completed' })]);
  await memory.remember({ job: 'live', ranks: [0], folder: folder.uri });
  await memory.remember({ job: 'done', ranks: undefined, folder: folder.uri });
  await memory.remember({ job: 'gone', ranks: undefined, folder: folder.uri });
  model.setError('no credentials');
  await commands.restoreAfterReload();
  assert.equal(memory.list().length, 3, 'cannot tell which run: kept');
  model.setJobs([jobJson({ name: 'live' }), jobJson({ name: 'done', status: 'Completed' })]);
  await commands.restoreAfterReload();
  assert.deepEqual(reattaches, [['live', undefined]]);
  assert.deepEqual(memory.list().map((r) => r.job), ['live']);
});

test('after a window reload with remoteDebug.reattachAfterReload off: offered, and the view marks the job', async () => {
  const { commands, memory, reattaches, folder, model } = setup([jobJson({ name: 'live' })]);
  mock.config['remoteDebug.reattachAfterReload'] = false;
  await memory.remember({ job: 'live', ranks: undefined, folder: folder.uri });
  mock.messageAnswers.push('Re-attach');
  await commands.restoreAfterReload();
  assert.equal(model.get('live')?.reattachable, true);
  assert.deepEqual(mock.messages('showInformationMessage'), ['Remote Debug: live was attached before the window reloaded.']);
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(reattaches, [['live', undefined]]);
});

test("a job remembered from a folder that is not open now: Re-attach asks where the code is", async () => {
  const { commands, memory, attaches, ws } = setup([jobJson({ name: 'live', source_dir: null, backend: 'sagemaker' })], { reattached: false });
  await memory.remember({ job: 'live', ranks: [1], folder: Uri.file('/closed') as never });
  mock.quickPicks.push((items) => items[0]);
  await commands.reattach({ kind: 'job', job: 'live' });
  assert.deepEqual(attaches.map((r) => [r.job, r.ranks, r.localRoot]), [['live', [1], ws]]);
});
