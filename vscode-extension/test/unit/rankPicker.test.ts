import assert from 'node:assert/strict';
import { test } from 'node:test';

import * as vscode from 'vscode';

import { JobsModel } from '../../src/model';
import { pickedRanks, RankPickItem, rankPickItems, rankRanges, stuckRanks } from '../../src/rankPicker';
import { scaleJob } from './helpers';

function bigModel(): JobsModel {
  const m = new JobsModel();
  m.setJobs([scaleJob(8, 8)]);
  return m;
}

test('rank ranges: runs of ranks shortened', () => {
  assert.equal(rankRanges([0, 1, 2, 3, 4, 5, 6, 7]), '0-7');
  assert.equal(rankRanges([0, 2, 3, 4, 9]), '0, 2-4, 9');
  assert.equal(rankRanges([5]), '5');
  assert.equal(rankRanges([]), '');
});

test('the pick at 64 ranks: all ranks first, then each node with its ranks beneath it', () => {
  const m = bigModel();
  m.setRankSession('big', 9, 'attached');
  m.setRankSession('big', 10, 'paused', 'breakpoint');
  const items = rankPickItems(m.allRanks('big'));
  assert.equal(items.length, 1 + 8 * (1 + 1 + 8));
  assert.deepEqual([items[0].label, items[0].ranks], ['All ranks (64)', 'all']);
  const separators = items.filter((i) => i.kind === vscode.QuickPickItemKind.Separator);
  assert.deepEqual(separators.map((i) => i.label), ['algo-1', 'algo-2', 'algo-3', 'algo-4', 'algo-5', 'algo-6', 'algo-7', 'algo-8']);
  const node2 = items.findIndex((i) => i.label === 'algo-2 · ranks 8-15');
  assert.equal(items[node2 - 1].label, 'algo-2', 'under its separator');
  assert.deepEqual(items[node2].ranks, [8, 9, 10, 11, 12, 13, 14, 15]);
  assert.equal(items[node2].description, '1 attached · 1 paused');
  assert.deepEqual(
    items.slice(node2 + 1, node2 + 4).map((i) => [i.label, i.description, i.ranks]),
    [
      ['rank 8', 'not attached', [8]],
      ['rank 9', 'attached', [9]],
      ['rank 10', 'paused', [10]],
    ],
  );
});

test('picked nodes and ranks: their sorted union; "All ranks", or every rank picked, is all', () => {
  const m = bigModel();
  const items = rankPickItems(m.allRanks('big'));
  const all = m.allRanks('big').map((r) => r.rank);
  const item = (label: string) => items.find((i) => i.label === label)!;
  assert.deepEqual(pickedRanks([item('rank 40'), item('algo-2 · ranks 8-15'), item('rank 9'), item('rank 3')], all), [3, 8, 9, 10, 11, 12, 13, 14, 15, 40]);
  assert.equal(pickedRanks([item('All ranks (64)'), item('rank 3')], all), undefined);
  const nodes = items.filter((i) => /^algo-\d+ · ranks/.test(i.label));
  assert.equal(nodes.length, 8);
  assert.equal(pickedRanks(nodes, all), undefined, 'every node picked: all ranks');
  assert.deepEqual(pickedRanks([] as RankPickItem[], all), []);
});

test('a job whose ranks are not known yet: just "All ranks"', () => {
  const m = new JobsModel();
  m.setJobs([scaleJob(2, 0)]);
  assert.deepEqual(rankPickItems(m.allRanks('big')).map((i) => i.label), ['All ranks']);
});

test('the paused and failed ranks: waiting for a debugger or held after a failure, without a session', () => {
  const m = bigModel();
  const ready = (rank: number, state: 'waiting' | 'listening') =>
    m.applyEvent('big', { event: 'rank-ready', v: 1, rank, node: 'algo-1', local_port: 1, remote_port: 2, state, ide: 'vscode', code_dir: '/c' });
  ready(1, 'waiting');
  ready(2, 'listening');
  ready(3, 'waiting');
  m.setRankSession('big', 3, 'paused', 'breakpoint'); // attached and paused: has its session
  m.applyEvent('big', { event: 'rank-failed', v: 1, rank: 9, node: 'algo-2', pid: 1, error: 'boom', traceback: null, held: true });
  m.applyEvent('big', { event: 'rank-failed', v: 1, rank: 10, node: 'algo-2', pid: 1, error: 'boom', traceback: null, held: false });
  const stuck = stuckRanks(m.allRanks('big'), [40]);
  assert.deepEqual(stuck, [1, 9, 40]);
  const items = rankPickItems(m.allRanks('big'), stuck);
  assert.deepEqual([items[1].label, items[1].description, items[1].ranks], ['Paused and failed ranks (3)', '1, 9, 40', [1, 9, 40]]);
  assert.deepEqual(pickedRanks([items[1]], m.allRanks('big').map((r) => r.rank)), [1, 9, 40]);
  assert.equal(rankPickItems(m.allRanks('big')).some((i) => /Paused/.test(i.label)), false, 'none: no item');
});
