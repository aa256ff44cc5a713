import assert from 'node:assert/strict';
import { test } from 'node:test';

import { ATTACHED_JOBS_KEY, AttachMemory, mergeRanks } from '../../src/attachMemory';
import { Uri } from './vscode-mock';

function memento(initial: Record<string, unknown> = {}) {
  const store = new Map<string, unknown>(Object.entries(initial));
  return { get: <T>(k: string) => store.get(k) as T, update: async (k: string, v: unknown) => void store.set(k, v) };
}

test('remembers the attached jobs with their ranks, folder and local root; a detach forgets', async () => {
  const memory = new AttachMemory(memento());
  const folder = Uri.file('/ws') as never;
  await memory.remember({ job: 'a', ranks: [2], folder, localRoot: '/ws/training' });
  await memory.remember({ job: 'a', ranks: [0], folder });
  await memory.remember({ job: 'b', ranks: undefined, folder });
  assert.deepEqual(memory.list(), [
    { job: 'a', ranks: [0, 2], folder: 'file:///ws', localRoot: '/ws/training' },
    { job: 'b', ranks: 'all', folder: 'file:///ws' },
  ]);
  await memory.remember({ job: 'a', ranks: undefined, folder });
  assert.equal(memory.get('a')?.ranks, 'all');
  await memory.forget('a');
  assert.deepEqual(memory.list().map((r) => r.job), ['b']);
});

test('what a workspace state holds that is not a remembered attach is ignored', () => {
  const memory = new AttachMemory(memento({ [ATTACHED_JOBS_KEY]: [{ job: 'ok', ranks: 'all', folder: 'file:///ws' }, { job: 1 }, null, { job: 'x', ranks: ['a'], folder: 'f' }] }));
  assert.deepEqual(memory.list().map((r) => r.job), ['ok']);
  assert.deepEqual(new AttachMemory(memento({ [ATTACHED_JOBS_KEY]: 'garbage' })).list(), []);
  assert.deepEqual(mergeRanks([3, 1], [1, 2]), [1, 2, 3]);
  assert.equal(mergeRanks('all', [1]), 'all');
});
