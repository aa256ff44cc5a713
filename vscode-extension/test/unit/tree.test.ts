import assert from 'node:assert/strict';
import { test } from 'node:test';

import { JobsModel } from '../../src/model';
import { JobsTreeProvider, TreeNode } from '../../src/tree';
import { fakeScheduler, jobJson, scaleJob } from './helpers';

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
  const clock = fakeScheduler();
  const p = new JobsTreeProvider(m, clock);
  let fired = 0;
  p.onDidChangeTreeData(() => fired++);
  m.setJobs([jobJson(), jobJson({ name: 'old', status: 'Failed', secondary_status: 'Failed', exit_code: 1, failure_reason: 'OOM', created: 1 })]);
  assert.equal(fired, 0, 'the refresh waits for the changes that come with it');
  clock.advance(100);
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
  const node = tree[0].children[0] as {
    label: string;
    description: string;
    context: string;
    children: Array<{ label: string; description: string; context: string }>;
  };
  assert.equal(node.label, 'algo-1');
  assert.equal(node.description, '2 ranks · 1 waiting · 1 paused · connected · ssh algo-1.local-1');
  assert.equal(p.getTreeItem({ kind: 'node', job: 'local-1', node: 'algo-1' }).collapsibleState, 2, 'the only node: expanded');
  assert.equal(node.context, 'node-attachable');
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

test('refreshes are spaced: the first change starts the timer, a steady stream still shows, the last change always', () => {
  const m = new JobsModel();
  const clock = fakeScheduler();
  const p = new JobsTreeProvider(m, clock, 80);
  let fired = 0;
  p.onDidChangeTreeData(() => fired++);
  m.setJobs([jobJson()]);
  clock.advance(79);
  assert.equal(fired, 0);
  clock.advance(1);
  assert.equal(fired, 1);
  // a change every 10 ms for a second: about one refresh per 80 ms, not one per change nor none until it stops
  for (let i = 0; i < 100; i++) {
    m.setRankSession('local-1', i % 2, i % 3 ? 'attached' : 'paused');
    clock.advance(10);
  }
  assert.ok(fired >= 1 + 12 && fired <= 1 + 13, `${fired} refreshes`);
  clock.advance(80);
  assert.equal(clock.pending(), 0, 'nothing left to show');
  p.dispose();
  m.setRankSession('local-1', 0, 'detached');
  assert.equal(clock.pending(), 0, 'disposed: no refresh scheduled');
});

test('64 ranks: an attach of 8 nodes x 8 ranks refreshes the view a handful of times and shows every state', () => {
  const m = new JobsModel();
  const clock = fakeScheduler();
  const p = new JobsTreeProvider(m, clock);
  let fired = 0;
  let changes = 0;
  let changesShown = 0;
  m.onDidChange(() => changes++);
  p.onDidChangeTreeData(() => {
    fired++;
    changesShown = changes;
  });
  const job = scaleJob(8, 8);
  m.setJobs([job]);
  clock.advance(100);
  fired = 0;

  // what `remote-debug attach big --json` prints, then what the debug sessions report; a line every millisecond
  const nodes = job.nodes;
  const node = (rank: number) => nodes[Math.floor(rank / 8)];
  const ranks = Array.from({ length: 64 }, (_, r) => r);
  const steps: Array<() => void> = [
    () => m.attachStarted('big'),
    () => m.applyEvent('big', { event: 'waiting', v: 1, what: 'nodes', nodes }),
    () => m.applyEvent('big', { event: 'ssh-config', v: 1, aliases: nodes.map((n) => `${n}.big`), config: '/c' }),
    ...nodes.map((n) => () => m.applyEvent('big', { event: 'node-connected', v: 1, node: n, alias: `${n}.big` })),
    ...ranks.map((r) => () => m.applyEvent('big', { event: 'rank-listening', v: 1, rank: r, node: node(r), remote_port: 50000 + r, detail: null })),
    ...ranks.map((r) => () =>
      r === 63
        ? m.applyEvent('big', { event: 'rank-unavailable', v: 1, rank: r, node: node(r), state: 'failed', error: 'no debugpy' })
        : m.applyEvent('big', {
            event: 'rank-ready', v: 1, rank: r, node: node(r), local_port: 40000 + r, remote_port: 50000 + r,
            state: 'waiting', ide: 'vscode', code_dir: '/opt/ml/code',
          }),
    ),
    ...ranks.map((r) => () => m.applyEvent('big', { event: 'pause-safe', v: 1, rank: r, node: node(r), detail: null })),
    () => m.applyEvent('big', { event: 'ready', v: 1, ranks: ranks.filter((r) => r !== 63) }),
    ...ranks.filter((r) => r !== 63).map((r) => () => m.setRankSession('big', r, 'attaching')),
    ...ranks.filter((r) => r !== 63).map((r) => () => m.setRankSession('big', r, 'attached')),
    // a breakpoint on rank 3 (the DAP tracker's "stopped"; the CLI's `stopped` is for headless attaches)
    () => m.setRankSession('big', 3, 'paused', 'breakpoint'),
    () => m.applyEvent('big', { event: 'stopped', v: 1, rank: 3, node: 'algo-1', file: 'train.py', line: 9, function: 'step', reason: 'breakpoint', variables: {} }),
    () => m.applyEvent('big', { event: 'rank-failed', v: 1, rank: 10, node: 'algo-2', pid: 7, error: 'CUDA OOM', traceback: null, held: true }),
  ];
  for (const step of steps) {
    step();
    clock.advance(1);
  }
  clock.advance(100);

  assert.ok(changes > 250, `${changes} model changes`);
  // ~330 ms of events (one per ms) at one refresh per 80 ms at most: 5, and the last one shows the last change
  assert.ok(fired <= 5, `${fired} refreshes for ${changes} changes`);
  assert.equal(changesShown, changes, 'the last refresh came after the last change');
  assert.equal(clock.pending(), 0);

  const tree = render(p);
  const rows = tree[0].children as Array<{ label: string; description: string; context: string; children: Array<{ label: string; description: string }> }>;
  // the held crash is on the job's row too (its own icon: tree.test's held-rank test)
  assert.equal(tree[0].description, 'InProgress · Training · rank 10 failed, held · attached · sagemaker');
  assert.deepEqual(rows.map((n) => n.label), nodes);
  assert.ok(rows.every((n) => n.children.length === 8 && n.context === 'node-attachable'));
  assert.deepEqual(rows.map((n) => n.description), [
    '8 ranks · 7 attached · 1 paused · connected · ssh algo-1.big',
    '8 ranks · 7 attached · 1 failed · connected · ssh algo-2.big',
    ...nodes.slice(2, 7).map((n) => `8 ranks · 8 attached · connected · ssh ${n}.big`),
    '8 ranks · 7 attached · 1 no debugger · connected · ssh algo-8.big',
  ]);
  assert.deepEqual(rows[0].children.map((r) => r.label), ['rank 0', 'rank 1', 'rank 2', 'rank 3', 'rank 4', 'rank 5', 'rank 6', 'rank 7']);
  assert.equal(rows[0].children[3].description, 'paused · breakpoint');
  assert.equal(rows[1].children[2].description, 'failed · held after CUDA OOM');
  assert.equal(rows[7].children[7].description, 'no debugger · failed: no debugpy');
  assert.equal(rows[5].children[0].description, 'attached');
  const collapsed = p.getTreeItem({ kind: 'node', job: 'big', node: 'algo-3' }).collapsibleState;
  assert.equal(collapsed, 1, 'several nodes: collapsed, their rows say enough');
});

test('a rank whose session ended unexpectedly, and a job attached before a reload, offer Re-attach', () => {
  const m = new JobsModel();
  const p = new JobsTreeProvider(m);
  m.setJobs([jobJson()]);
  m.attachStarted('local-1');
  m.applyEvent('local-1', { event: 'rank-ready', v: 1, rank: 0, node: 'algo-1', local_port: 1, remote_port: 2, state: 'listening', ide: 'vscode', code_dir: '/c' });
  m.setRankLost('local-1', 0, true);
  const job = () => render(p)[0];
  const rank0 = () => (job().children[0] as { children: Array<{ description: string; context: string }> }).children[0];
  assert.equal(job().context, 'job-running-attached-reattach');
  assert.deepEqual([rank0().description, rank0().context], ['debugger port ready · session ended unexpectedly', 'rank-detached-lost']);
  m.setRankLost('local-1', 0, false);
  assert.deepEqual([job().context, rank0().context], ['job-running-attached', 'rank-detached']);
  m.attachEnded('local-1');
  m.setReattachable('local-1', true);
  assert.equal(job().context, 'job-running-reattach');
  m.setReattachable('local-1', false);
  assert.equal(job().context, 'job-running');
});
