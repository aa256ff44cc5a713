import assert from 'node:assert/strict';
import { test } from 'node:test';

import { JobsModel } from '../../src/model';
import { JobsTreeProvider, TreeNode } from '../../src/tree';
import { jobJson } from './helpers';

function render(
  provider: JobsTreeProvider,
  node?: TreeNode,
): Array<{ label: string; description?: string; context?: string; tooltip?: string; children: unknown[] }> {
  return provider.getChildren(node).map((child) => {
    const item = provider.getTreeItem(child);
    return {
      label: String(item.label),
      description: item.description as string | undefined,
      context: item.contextValue,
      tooltip: item.tooltip as string | undefined,
      children: render(provider, child),
    };
  });
}

test('loading, error and empty states', () => {
  const m = new JobsModel();
  const p = new JobsTreeProvider(m);
  assert.equal(render(p)[0].label, 'Loading jobs…');
  m.setError('cannot run remote-debug: not found');
  const error = render(p);
  assert.equal(error[0].label, 'Cannot list jobs');
  assert.equal(error[0].description, 'cannot run remote-debug: not found');
  assert.equal(error[1].label, 'Set the remote-debug CLI path…');
  m.setJobs([]);
  assert.deepEqual(render(p), [], 'empty: the view shows its welcome content');
});

test('jobs -> nodes -> ranks with states and menus', () => {
  const m = new JobsModel();
  const p = new JobsTreeProvider(m);
  let fired = 0;
  p.onDidChangeTreeData(() => fired++);
  m.setJobs([jobJson(), jobJson({ name: 'old', status: 'Failed', secondary_status: 'Failed', exit_code: 1, failure_reason: 'OOM', created: 1 })]);
  assert.equal(fired, 1);
  m.attachStarted('local-1');
  m.applyEvent('local-1', { event: 'node-connected', node: 'algo-1', alias: 'algo-1.local-1' });
  m.applyEvent('local-1', { event: 'rank-ready', rank: 0, node: 'algo-1', local_port: 4000, remote_port: 5000, state: 'waiting' });
  m.setRankSession('local-1', 1, 'paused', 'breakpoint');
  const tree = render(p);
  assert.deepEqual(
    tree.map((j) => [j.label, j.description, j.context]),
    [
      ['local-1', 'InProgress · Training · attaching… · local', 'job-running-attached'],
      ['old', 'Failed · exit 1 · local', 'job-ended'],
    ],
  );
  const node = tree[0].children[0] as { label: string; description: string; children: Array<{ label: string; description: string; context: string }> };
  assert.equal(node.label, 'algo-1');
  assert.equal(node.description, 'ssh algo-1.local-1 · 2 ranks · connected');
  assert.deepEqual(
    node.children.map((r) => [r.label, r.description, r.context]),
    [
      ['rank 0', 'waiting for debugger', 'rank-detached'],
      ['rank 1', 'paused · breakpoint', 'rank-attached'],
    ],
  );
  const failed = tree[1].children as Array<{ label: string; description: string }>;
  assert.deepEqual([failed[0].label, failed[0].description], ['Failure', 'OOM']);
});

test('getParent walks back up', () => {
  const p = new JobsTreeProvider(new JobsModel());
  assert.deepEqual(p.getParent({ kind: 'rank', job: 'j', node: 'algo-1', rank: 0 }), { kind: 'node', job: 'j', node: 'algo-1' });
  assert.deepEqual(p.getParent({ kind: 'node', job: 'j', node: 'algo-1' }), { kind: 'job', job: 'j' });
  assert.equal(p.getParent({ kind: 'job', job: 'j' }), undefined);
});

test('a kept-alive job: seconds left, its run, a re-run running; the menus that go with them', () => {
  const m = new JobsModel();
  const p = new JobsTreeProvider(m);
  const job = () => render(p)[0];
  m.setJobs([jobJson({ kept_alive_seconds_left: 87 })]);
  assert.equal(job().description, 'InProgress · Training · kept alive, 87 s left · local');
  assert.equal(job().context, 'job-running-keepalive');
  assert.match(job().tooltip!, /kept alive, 87 s left: Sync and Re-run runs it again, Release ends it/);

  // the CLI's secondary status may say it already: not twice
  m.setJobs([jobJson({ kept_alive_seconds_left: 80, secondary_status: 'kept alive, 80 s left' })]);
  assert.equal(job().description, 'InProgress · kept alive, 80 s left · local');
  m.setRerun('local-1', 'running');
  assert.equal(job().description, 'InProgress · Training · running · local', 'a re-run runs: the nodes do not hold');
  m.setRerun('local-1', undefined);

  m.setJobs([jobJson({ kept_alive_seconds_left: 60, run: 2 })]);
  m.attachStarted('local-1');
  assert.equal(job().description, 'InProgress · Training · kept alive, 60 s left · run 2 · attaching… · local');
  assert.equal(job().context, 'job-running-attached-keepalive');

  m.setRerun('local-1', 'syncing');
  assert.equal(job().description, 'InProgress · Training · run 2 · syncing… · attaching… · local');
  assert.equal(job().context, 'job-running-attached-keepalive-rerunning');
  m.setRerun('local-1', 'running');
  m.applyEvent('local-1', { event: 'run-started', v: 1, job: 'local-1', run: 3, nodes: ['algo-1'], command: [], master_port: null });
  assert.equal(job().description, 'InProgress · Training · run 3 · running · attaching… · local');
  assert.match(job().tooltip!, /run 3 \(a re-run of the training command\): running/);

  m.applyEvent('local-1', { event: 'rank-restarted', v: 1, rank: 1, node: 'algo-1', pid: 2, old_pid: 1, run: 3 });
  const ranks = (job().children[0] as { children: Array<{ label: string; description: string; context: string }> }).children;
  assert.deepEqual([ranks[1].label, ranks[1].description, ranks[1].context], ['rank 1', 'restarting · run 3', 'rank-detached']);

  m.setRerun('local-1', undefined);
  m.attachEnded('local-1');
  m.setJobs([jobJson({ run: 3, status: 'Completed', secondary_status: 'Completed', exit_code: 0 })]);
  assert.equal(job().description, 'Completed · exit 0 · run 3 · local');
  assert.equal(job().context, 'job-ended');
});

test('a job that is not kept alive shows none of it', () => {
  const m = new JobsModel();
  const p = new JobsTreeProvider(m);
  m.setJobs([jobJson()]);
  assert.equal(render(p)[0].description, 'InProgress · Training · local');
  assert.equal(render(p)[0].context, 'job-running');
  assert.doesNotMatch(render(p)[0].tooltip!, /kept alive|run \d/);
});
