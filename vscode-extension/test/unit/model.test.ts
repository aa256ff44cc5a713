import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { expectedRanks, formatRanks, isKeptAlive, JobsModel, parseRanks } from '../../src/model';
import { jobJson } from './helpers';

const states = (m: JobsModel, job = 'local-1') => m.allRanks(job).map((r) => `${r.rank}@${r.node}:${r.state}`);

describe('jobs -> nodes -> ranks', () => {
  test('ranks follow torchrun numbering across nodes', () => {
    const info = jobJson({ nodes: ['algo-1', 'algo-2'], nproc_per_node: 2 });
    assert.deepEqual(expectedRanks(info), [
      { node: 'algo-1', rank: 0 },
      { node: 'algo-1', rank: 1 },
      { node: 'algo-2', rank: 2 },
      { node: 'algo-2', rank: 3 },
    ]);
    const m = new JobsModel();
    m.setJobs([info]);
    assert.deepEqual(states(m), ['0@algo-1:not-attached', '1@algo-1:not-attached', '2@algo-2:not-attached', '3@algo-2:not-attached']);
    assert.equal(m.codeDir('local-1', 'algo-1'), '/jobs/local-1/nodes/algo-1/code');
  });

  test('state follows the job: starting, running, finished', () => {
    const m = new JobsModel();
    m.setJobs([jobJson({ secondary_status: 'Starting' })]);
    assert.deepEqual(states(m), ['0@algo-1:starting', '1@algo-1:starting']);
    m.setJobs([jobJson({ secondary_status: 'Training' })]);
    assert.deepEqual(states(m), ['0@algo-1:not-attached', '1@algo-1:not-attached']);
    m.setJobs([jobJson({ status: 'Completed', secondary_status: 'Completed', exit_code: 0 })]);
    assert.deepEqual(states(m), ['0@algo-1:finished', '1@algo-1:finished']);
  });

  test('a SageMaker job whose ranks are not known yet: nodes only, ranks appear as they report', () => {
    const m = new JobsModel();
    m.setJobs([jobJson({ name: 'sm', backend: 'sagemaker', nodes: ['algo-1', 'algo-2'], nproc_per_node: 0, secondary_status: 'Starting' })]);
    assert.deepEqual([...m.get('sm')!.nodes.keys()], ['algo-1', 'algo-2']);
    assert.deepEqual(states(m, 'sm'), []);
    m.applyEvent('sm', { event: 'job-status', job: 'sm', status: 'InProgress', secondary_status: 'Training' });
    assert.equal(m.get('sm')?.info.secondary_status, 'Training');
    m.applyEvent('sm', { event: 'rank-ready', rank: 3, node: 'algo-2', local_port: 1, remote_port: 2, state: 'listening' });
    assert.deepEqual(states(m, 'sm'), ['3@algo-2:listening']);
  });

  test('running jobs first, newest first; vanished jobs go away', () => {
    const m = new JobsModel();
    m.setJobs([
      jobJson({ name: 'old', created: 1 }),
      jobJson({ name: 'done', status: 'Completed', created: 5 }),
      jobJson({ name: 'new', created: 3 }),
    ]);
    assert.deepEqual(m.list().map((j) => j.info.name), ['new', 'old', 'done']);
    assert.deepEqual(m.running().map((j) => j.info.name), ['new', 'old']);
    m.setJobs([jobJson({ name: 'new', created: 3 })]);
    assert.deepEqual(m.list().map((j) => j.info.name), ['new']);
  });

  test('an error replaces the list until the next good listing', () => {
    const m = new JobsModel();
    let changes = 0;
    m.onDidChange(() => changes++);
    m.setError('cannot run remote-debug: not found');
    assert.equal(m.error, 'cannot run remote-debug: not found');
    assert.equal(m.loaded, true);
    m.setJobs([]);
    assert.equal(m.error, undefined);
    assert.equal(changes, 2);
  });
});

describe('attach events and debug sessions', () => {
  test('a whole attach, as the CLI reports it, then the debugger', () => {
    const m = new JobsModel();
    m.setJobs([jobJson()]);
    m.attachStarted('local-1');
    assert.equal(m.get('local-1')?.attach, 'connecting');
    m.applyEvent('local-1', { event: 'ssh-config', aliases: ['algo-1.local-1'], config: '/c' });
    m.applyEvent('local-1', { event: 'node-connected', node: 'algo-1', alias: 'algo-1.local-1' });
    m.applyEvent('local-1', { event: 'rank-ready', rank: 0, node: 'algo-1', local_port: 4000, remote_port: 5000, state: 'waiting' });
    m.applyEvent('local-1', { event: 'rank-ready', rank: 1, node: 'algo-1', local_port: 4001, remote_port: 5001, state: 'listening' });
    m.applyEvent('local-1', { event: 'ready', ranks: [0, 1] });
    const node = m.get('local-1')!.nodes.get('algo-1')!;
    assert.equal(node.alias, 'algo-1.local-1');
    assert.equal(node.connected, true);
    assert.deepEqual(states(m), ['0@algo-1:waiting', '1@algo-1:listening']);
    assert.equal(m.rankEntry('local-1', 0)?.localPort, 4000);
    assert.equal(m.get('local-1')?.attach, 'ready');

    m.setRankSession('local-1', 0, 'attached');
    m.setRankSession('local-1', 1, 'paused', 'breakpoint');
    assert.deepEqual(states(m), ['0@algo-1:attached', '1@algo-1:paused']);
    assert.equal(m.rankEntry('local-1', 1)?.detail, 'breakpoint');
    // a late rank-ready must not hide the session state
    m.applyEvent('local-1', { event: 'rank-ready', rank: 1, node: 'algo-1', local_port: 4001, remote_port: 5001, state: 'attached' });
    assert.equal(m.rankEntry('local-1', 1)?.state, 'paused');
    m.setRankSession('local-1', 1, 'detached');
    assert.equal(m.rankEntry('local-1', 1)?.state, 'listening', 'still forwarded: re-attachable');

    m.applyEvent('local-1', { event: 'tunnel-down', node: 'algo-1', error: 'EOF' });
    assert.equal(node.connected, false);
    m.applyEvent('local-1', { event: 'reconnected', node: 'algo-1' });
    assert.equal(node.connected, true);

    m.applyEvent('local-1', { event: 'job-ended', status: 'Completed', exit_code: 0, failure_reason: null });
    assert.equal(m.get('local-1')?.info.status, 'Completed');
    assert.deepEqual(states(m), ['0@algo-1:finished', '1@algo-1:finished']);
    m.attachEnded('local-1');
    assert.equal(m.get('local-1')?.attach, 'ended');
    assert.equal(m.rankEntry('local-1', 0)?.localPort, undefined);
  });

  test('lazy listeners, and the PyCharm events: listening, connected, IDE not listening', () => {
    const m = new JobsModel();
    m.setJobs([jobJson()]);
    m.attachStarted('local-1');
    m.applyEvent('local-1', { event: 'rank-listening', v: 1, rank: 0, node: 'algo-1', remote_port: 5000, detail: null });
    assert.equal(m.rankEntry('local-1', 0)?.remotePort, 5000);
    assert.equal(m.rankEntry('local-1', 0)?.state, 'not-attached', 'not forwarded yet: rank-ready says when');
    m.applyEvent('local-1', { event: 'pause-safe', v: 1, rank: 1, node: 'algo-1', detail: 'process-group timeout 7200 s' });
    assert.deepEqual(states(m), ['0@algo-1:not-attached', '1@algo-1:not-attached'], 'pause-safe: only the log shows it');
    m.applyEvent('local-1', { event: 'ide-not-listening', v: 1, rank: 1, node: 'algo-1', message: 'start the debug server' });
    assert.equal(m.rankEntry('local-1', 1)?.state, 'waiting');
    assert.equal(m.rankEntry('local-1', 1)?.detail, 'start the debug server');
    m.applyEvent('local-1', { event: 'rank-connected', v: 1, rank: 1, node: 'algo-1', ide_port: 5678 });
    assert.equal(m.rankEntry('local-1', 1)?.state, 'attached');
    assert.equal(m.rankEntry('local-1', 1)?.detail, undefined);
  });

  test('ranks without a debugger, warnings, a failed attach', () => {
    const m = new JobsModel();
    m.setJobs([jobJson()]);
    m.attachStarted('local-1');
    m.applyEvent('local-1', { event: 'rank-unavailable', rank: 1, node: 'algo-1', state: 'failed', error: 'port in use' });
    m.applyEvent('local-1', { event: 'warning', message: 'not every selected rank published a listener in time' });
    assert.equal(m.rankEntry('local-1', 1)?.state, 'unavailable');
    assert.equal(m.rankEntry('local-1', 1)?.detail, 'failed: port in use');
    assert.match(m.get('local-1')!.warning!, /in time/);
    m.attachEnded('local-1', 'job local-1 is Failed');
    assert.equal(m.get('local-1')?.attach, 'failed');
    assert.equal(m.get('local-1')?.attachError, 'job local-1 is Failed');
    assert.equal(m.rankEntry('local-1', 1)?.state, 'unavailable', 'stays: it never had a debugger');
    assert.equal(m.rankEntry('local-1', 0)?.state, 'not-attached');
  });

  test('a crashed rank shows failed, held or not, and stays failed after the job ends', () => {
    const m = new JobsModel();
    m.setJobs([jobJson()]);
    m.attachStarted('local-1');
    m.applyEvent('local-1', { event: 'rank-failed', rank: 1, node: 'algo-1', error: 'ValueError: bad batch', traceback: 'Traceback (most recent call last):\n', held: true });
    assert.equal(m.rankEntry('local-1', 1)?.state, 'failed');
    assert.equal(m.rankEntry('local-1', 1)?.detail, 'held after ValueError: bad batch');
    m.setRankSession('local-1', 1, 'attached');
    m.setRankSession('local-1', 1, 'detached');
    m.applyEvent('local-1', { event: 'rank-failed', rank: 1, node: 'algo-1', error: 'ValueError: bad batch', held: false });
    m.applyEvent('local-1', { event: 'job-ended', status: 'Failed', exit_code: 1, failure_reason: 'rank 1 failed' });
    assert.equal(m.rankEntry('local-1', 1)?.state, 'failed');
    assert.equal(m.rankEntry('local-1', 1)?.detail, 'ValueError: bad batch');
    assert.equal(m.rankEntry('local-1', 0)?.state, 'finished');
  });

  test('an event can place a rank on another node than the numbering guessed', () => {
    const m = new JobsModel();
    m.setJobs([jobJson({ nodes: ['algo-1', 'algo-2'], nproc_per_node: 1 })]);
    m.applyEvent('local-1', { event: 'rank-ready', rank: 0, node: 'algo-2', local_port: 1, remote_port: 2, state: 'waiting' });
    assert.equal(m.rankEntry('local-1', 0)?.node, 'algo-2');
    assert.equal(m.get('local-1')!.nodes.get('algo-1')!.ranks.has(0), false);
  });

  test('events for unknown jobs and unknown events are ignored', () => {
    const m = new JobsModel();
    m.applyEvent('nope', { event: 'ready', ranks: [] });
    m.setJobs([jobJson()]);
    m.applyEvent('local-1', { event: 'brand-new' });
    assert.equal(m.get('local-1')?.attach, 'none');
  });

  test('a job being attached survives a listing that misses it', () => {
    const m = new JobsModel();
    m.setJobs([jobJson()]);
    m.attachStarted('local-1');
    m.setJobs([]);
    assert.ok(m.get('local-1'));
  });
});

describe('keep-alive and re-runs', () => {
  test('a re-run: run-started, rank-restarted, the old session ending, the new rank-ready and session', () => {
    const m = new JobsModel();
    m.setJobs([jobJson({ kept_alive_seconds_left: 120, run: 0 })]);
    m.attachStarted('local-1');
    m.applyEvent('local-1', { event: 'rank-ready', v: 1, rank: 0, node: 'algo-1', local_port: 4000, remote_port: 5000, state: 'waiting', ide: 'vscode', code_dir: '/c' });
    m.setRankSession('local-1', 0, 'paused', 'breakpoint');
    assert.equal(isKeptAlive(m.get('local-1')!), true);

    m.setRerun('local-1', 'syncing');
    assert.equal(m.get('local-1')?.rerun, 'syncing');
    m.setRerun('local-1', 'running');
    assert.equal(m.get('local-1')?.info.kept_alive_seconds_left, null, 'something runs: the nodes do not hold');
    m.applyEvent('local-1', { event: 'run-started', v: 1, job: 'local-1', run: 1, nodes: ['algo-1'], command: ['python', 't.py'], master_port: null });
    assert.equal(m.get('local-1')?.info.run, 1);

    m.applyEvent('local-1', { event: 'rank-restarted', v: 1, rank: 0, node: 'algo-1', pid: 2, old_pid: 1, run: 1 });
    assert.equal(m.rankEntry('local-1', 0)?.state, 'restarting');
    assert.equal(m.rankEntry('local-1', 0)?.detail, 'run 1');
    m.setRankSession('local-1', 0, 'detached');
    assert.equal(m.rankEntry('local-1', 0)?.state, 'restarting', "the old process's session ending does not hide the restart");
    m.setJobs([jobJson({ run: 1 })]);
    assert.equal(m.rankEntry('local-1', 0)?.state, 'restarting', 'a listing keeps it too');
    m.applyEvent('local-1', { event: 'rank-ready', v: 1, rank: 0, node: 'algo-1', local_port: 4000, remote_port: 5000, state: 'waiting', ide: 'vscode', code_dir: '/c' });
    assert.equal(m.rankEntry('local-1', 0)?.state, 'waiting');
    assert.equal(m.rankEntry('local-1', 0)?.detail, undefined);
    m.setRankSession('local-1', 0, 'attaching');
    m.setRankSession('local-1', 0, 'paused', 'breakpoint');
    assert.equal(m.rankEntry('local-1', 0)?.state, 'paused');

    m.setRerun('local-1', undefined);
    assert.equal(m.get('local-1')?.rerun, undefined);
    assert.equal(isKeptAlive(m.get('local-1')!), true, 'run 1: only kept-alive jobs are re-run');
  });

  test('a rank-restarted of a later run raises the run; a held job is kept alive, others are not', () => {
    const m = new JobsModel();
    m.setJobs([jobJson(), jobJson({ name: 'held', kept_alive_seconds_left: 30 }), jobJson({ name: 'done', status: 'Completed', run: 3 })]);
    assert.equal(isKeptAlive(m.get('local-1')!), false);
    assert.equal(isKeptAlive(m.get('held')!), true);
    assert.equal(isKeptAlive(m.get('done')!), false, 'ended: nothing to keep');
    m.applyEvent('local-1', { event: 'rank-restarted', v: 1, rank: 1, node: 'algo-1', pid: 2, old_pid: 1, run: 4 });
    assert.equal(m.get('local-1')?.info.run, 4);
    m.applyEvent('local-1', { event: 'rank-restarted', v: 1, rank: 0, node: 'algo-1', pid: 3, old_pid: 1, run: 3 });
    assert.equal(m.get('local-1')?.info.run, 4, 'never lowered');
    let changes = 0;
    m.onDidChange(() => changes++);
    m.setRerun('local-1', undefined);
    m.setRerun('nope', 'running');
    assert.equal(changes, 0, 'no change, no event');
  });
});

test('rank lists', () => {
  assert.equal(parseRanks('all'), undefined);
  assert.equal(parseRanks(' '), undefined);
  assert.deepEqual(parseRanks('2, 0,2'), [0, 2]);
  assert.deepEqual(parseRanks('0-2, 5'), [0, 1, 2, 5]);
  assert.throws(() => parseRanks('0;3'), /bad rank list/);
  assert.equal(formatRanks(undefined), 'all');
  assert.equal(formatRanks([0, 2]), '0,2');
});
