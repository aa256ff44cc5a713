// Hold on failure in VS Code without an attach (the listing's held_ranks): own icons, seconds left, one notification
// with Attach, the root cause first; and what Launch Local Job… can set for it (nodes, keep-alive, hold on failure).

import assert from 'node:assert/strict';
import * as path from 'node:path';
import { beforeEach, describe, test } from 'node:test';

import * as vscode from 'vscode';

import { launchOptionArgs, parseJobShape } from '../../src/commands';
import { debugTypeProblem } from '../../src/debugConfig';
import { HeldRank } from '../../src/events';
import { heldNotice, HeldNotices } from '../../src/heldNotices';
import { isKeptAlive, JobsModel } from '../../src/model';
import { summarize } from '../../src/notices';
import { stuckRanks } from '../../src/rankPicker';
import { JobsTreeProvider } from '../../src/tree';
import { commandsHarness, jobJson, scaleJob } from './helpers';
import { mock, Uri } from './vscode-mock';

const held = (rank: number, extra: Partial<HeldRank> = {}): HeldRank => ({
  rank,
  node: 'algo-1',
  seconds_left: 87,
  error: 'ValueError: bad batch',
  root_cause: false,
  held_for: null,
  ...extra,
});

function view(jobs = [jobJson({ nproc_per_node: 4, held_ranks: [held(2, { root_cause: true }), held(1, { held_for: 2 })] })], now = 1_000_000) {
  let clock = now;
  const model = new JobsModel(() => clock);
  model.setJobs(jobs);
  const tree = new JobsTreeProvider(model);
  const rank = (r: number) => tree.getTreeItem({ kind: 'rank', job: jobs[0].name, node: 'algo-1', rank: r });
  const job = () => tree.getTreeItem({ kind: 'job', job: jobs[0].name });
  return { model, tree, rank, job, advance: (ms: number) => (clock += ms) };
}

describe('a held crash, seen in the job listing (no attach)', () => {
  test('the failed rank: its own icon, the failure, the root cause, the seconds left; the job row says it too', () => {
    const { rank, job, model } = view();
    const r2 = rank(2);
    assert.equal((r2.iconPath as vscode.ThemeIcon).id, 'bug');
    assert.match(String(r2.description), /^failed · root cause · held after ValueError: bad batch · \d+ s left$/);
    assert.equal(r2.contextValue, 'rank-detached', 'attachable (post-mortem)');
    // the rank held with it (the whole gang held): paused where it was, with which rank
    const r1 = rank(1);
    assert.equal(model.rankEntry('local-1', 1)?.state, 'held');
    assert.match(String(r1.description), /^held · held with rank 2 · \d+ s left$/);
    assert.equal((r1.iconPath as vscode.ThemeIcon).id, 'debug-pause');
    assert.equal((rank(0).iconPath as vscode.ThemeIcon).id, 'circle-outline', 'the others as before');
    assert.match(String(job().description), /^InProgress · Training · rank 2 failed, held \d+ s · local$/);
    assert.equal((job().iconPath as vscode.ThemeIcon).id, 'bug');
    // Attach Paused and Failed Ranks takes both
    assert.deepEqual(stuckRanks(model.allRanks('local-1'), [2, 1]), [1, 2]);
  });

  test('the seconds count down between listings; a hold that ended leaves the failure, not "held"', () => {
    const { rank, model, advance } = view(undefined, 0);
    assert.match(String(rank(2).description), / 87 s left$/);
    advance(30_000);
    assert.match(String(rank(2).description), / 57 s left$/);
    model.setJobs([jobJson({ nproc_per_node: 4, held_ranks: [] })]);
    assert.equal(rank(2).description, 'failed · ValueError: bad batch');
    assert.equal((rank(2).iconPath as vscode.ThemeIcon).id, 'error');
    assert.equal(model.rankEntry('local-1', 1)?.state, 'not-attached');
  });

  test("a held rank's post-mortem session: paused, still saying what it failed of; its end leaves it failed and held", () => {
    const { rank, model } = view();
    model.setRankSession('local-1', 2, 'attaching');
    model.setRankSession('local-1', 2, 'paused', 'exception');
    assert.match(String(rank(2).description), /^paused · root cause · exception · held after ValueError: bad batch · \d+ s left$/);
    model.setRankSession('local-1', 2, 'detached');
    assert.equal(model.rankEntry('local-1', 2)?.state, 'failed');
    assert.match(String(rank(2).description), /^failed · root cause · held after ValueError/);
  });

  test('attached: rank 2 paused at its exception, said once; rank 1 still held with it', () => {
    const { rank, model } = view();
    model.setRankSession('local-1', 2, 'paused', 'bad batch'); // debugpy's stop: the exception's message
    model.setRankSession('local-1', 1, 'attached');
    assert.match(String(rank(2).description), /^paused · root cause · held after ValueError: bad batch · \d+ s left$/);
    assert.match(String(rank(1).description), /^attached · held with rank 2 · \d+ s left$/);
  });

  test('the job fails while attached: the failed rank says its failure, nothing says "held" any more', () => {
    const { model, rank } = view();
    model.setRankSession('local-1', 2, 'paused', 'bad batch');
    model.setRankSession('local-1', 1, 'attached');
    model.applyEvent('local-1', { event: 'job-ended', v: 1, status: 'Failed', exit_code: 1, failure_reason: 'ValueError: bad batch (rank 2)' });
    model.setRankSession('local-1', 2, 'detached');
    model.setRankSession('local-1', 1, 'detached');
    // an ended job's listing may still carry the ranks' last "held"
    const holds = model.get('local-1')!.info.held_ranks;
    model.setJobs([jobJson({ nproc_per_node: 4, status: 'Failed', secondary_status: 'Failed', exit_code: 1, held_ranks: holds })]);
    assert.deepEqual([rank(2).description, rank(1).description], ['failed · ValueError: bad batch', 'finished']);
  });

  test('the job fails: its failed ranks stay failed, the hold is gone', () => {
    const { model, rank } = view();
    model.setJobs([jobJson({ nproc_per_node: 4, status: 'Failed', secondary_status: 'Failed', exit_code: 1, held_ranks: [] })]);
    assert.deepEqual(model.allRanks('local-1').map((r) => r.state), ['finished', 'finished', 'failed', 'finished']);
    assert.equal(rank(2).description, 'failed · ValueError: bad batch');
  });

  test('the attach says a gang hold (`rank-held`) and a held failure with its root cause', () => {
    const model = new JobsModel();
    model.setJobs([scaleJob(1, 4, { name: 'j' })]);
    model.applyEvent('j', { event: 'rank-failed', v: 1, rank: 3, node: 'algo-1', pid: 7, error: 'boom', traceback: null, held: true, root_cause: true });
    model.applyEvent('j', { event: 'rank-held', v: 1, rank: 0, node: 'algo-1', pid: 5, held_for: 3, error: 'boom' });
    assert.deepEqual([model.rankEntry('j', 3)?.hold?.rootCause, model.rankEntry('j', 0)?.state, model.rankEntry('j', 0)?.detail], [true, 'held', 'held with rank 3']);
  });
});

describe('one notification per hold, with Attach', () => {
  beforeEach(() => mock.reset());

  test('said once, the root cause named first, with the seconds left; not while attached (the attach says it)', async () => {
    const notices = new HeldNotices();
    const job = jobJson({ nproc_per_node: 4, held_ranks: [held(3, { node: 'algo-1' }), held(1, { root_cause: true, seconds_left: 60 }), held(0, { held_for: 1 })] });
    mock.messageAnswers.push('Attach');
    notices.check([job], () => false);
    await new Promise((r) => setImmediate(r));
    assert.deepEqual(mock.messages('showErrorMessage'), [
      'Remote Debug (local-1): ranks 1, 3 failed (rank 1 first: ValueError: bad batch) (1 other ranks held with it) — held for a post-mortem debugger, 60 s left.',
    ]);
    assert.deepEqual(mock.calls.find((c) => c.fn === 'showErrorMessage')!.args.slice(1), ['Attach']);
    assert.deepEqual(mock.executed.map((e) => [e.command, e.args]), [['remoteDebug.attachStuckRanks', [{ kind: 'job', job: 'local-1' }]]]);
    notices.check([job], () => false);
    assert.equal(mock.messages('showErrorMessage').length, 1, 'not twice');
    const other = jobJson({ name: 'attached-job', held_ranks: [held(0)] });
    notices.check([other], () => true);
    notices.check([other], () => false);
    assert.equal(mock.messages('showErrorMessage').length, 1, 'an attached job: its attach says it');
    // what the attach then need not say again: the failed ranks the notification named
    assert.deepEqual([0, 1, 3].map((r) => notices.toldOf('local-1', r)), [false, true, true]);
    assert.equal(notices.toldOf('attached-job', 0), false);
  });

  test('one failed rank: where it failed', () => {
    assert.equal(
      heldNotice(jobJson(), [held(2, { node: 'algo-2', seconds_left: null })]),
      'Remote Debug (local-1): rank 2 on algo-2 failed: ValueError: bad batch — held for a post-mortem debugger.',
    );
    assert.equal(heldNotice(jobJson(), [held(2, { held_for: 1 })]), undefined, 'only ranks held with another: said with that one');
  });

  test("the attach's notice names the root cause first", () => {
    const n = (rank: number, rootCause = false) => ({ job: 'j', kind: 'rank-failed' as const, rank, node: 'algo-1', message: `boom ${rank}`, held: true, rootCause });
    assert.match(summarize([n(0), n(5, true), n(7)]).text, /^Remote Debug \(j\): 3 ranks failed: 0, 5, 7 \(rank 5: boom 5\)/);
  });
});

describe('Launch Local Job…: nodes, keep-alive, hold on failure', () => {
  beforeEach(() => mock.reset());

  test('the shape: ranks per node, or NODESxRANKS', () => {
    assert.deepEqual(parseJobShape('4'), { nodes: 1, nprocPerNode: 4 });
    assert.deepEqual(parseJobShape(' 2 x 4 '), { nodes: 2, nprocPerNode: 4 });
    assert.deepEqual(parseJobShape('2×8'), { nodes: 2, nprocPerNode: 8 });
    for (const bad of ['', '0', '2x0', 'x4', 'four', '-1']) {
      assert.equal(parseJobShape(bad), undefined, bad);
    }
    assert.deepEqual(launchOptionArgs(['hold-on-failure', 'keep-alive'], { keepAliveSeconds: 900, holdOnFailureSeconds: 120 }), [
      '--keep-alive',
      '900',
      '--hold-on-failure',
      '120',
    ]);
  });

  test('2 nodes x 4 ranks, kept alive and held on failure; the choice is offered again next time', async () => {
    const launched = jobJson({ name: 'local-2' });
    const { run, invocations, ws, model } = commandsHarness({ launch: { stdout: JSON.stringify(launched) } });
    mock.findFiles = [Uri.file(path.join(ws, 'train.py'))];
    mock.quickPicks.push((items) => items[0]);
    mock.inputBoxes.push('2x4');
    mock.quickPicks.push((items: Array<{ label: string }>) => items);
    await run('remoteDebug.launchLocalJob');
    const launch = invocations().find((i) => i.args[0] === 'launch')!;
    assert.deepEqual(launch.args.slice(0, launch.args.indexOf('--source-dir')), [
      'launch', '--local', '--nodes', '2', '--nproc-per-node', '4', '--wait', '300', '--keep-alive', '1800', '--hold-on-failure', '600',
    ]);
    // kept alive: Sync and Re-run can run it again before its nodes first hold
    assert.equal(isKeptAlive(model.get('local-2')!), true);
    const options = mock.calls.filter((c) => c.fn === 'showQuickPick')[1];
    assert.equal(options.args[1].canPickMany, true);
    assert.deepEqual(options.args[0].map((i: { picked: boolean }) => i.picked), [false, false]);
    // the next launch offers both picked; a dismissed pick launches nothing
    mock.quickPicks.push((items) => items[0]);
    mock.inputBoxes.push('1');
    mock.quickPicks.push(undefined);
    await run('remoteDebug.launchLocalJob');
    const again = mock.calls.filter((c) => c.fn === 'showQuickPick')[3];
    assert.deepEqual(again.args[0].map((i: { picked: boolean }) => i.picked), [true, true]);
    assert.equal(invocations().filter((i) => i.args[0] === 'launch').length, 1);
  });
});

test('debugType: what cannot work, and why', () => {
  assert.equal(debugTypeProblem('auto', 'remote-debug', []), undefined);
  assert.equal(debugTypeProblem('debugpy', 'debugpy', ['ms-python.debugpy']), undefined);
  assert.match(debugTypeProblem('debugpy', 'debugpy', [])!, /no installed extension debugs that type/);
  assert.match(debugTypeProblem('python', 'remote-debug', [])!, /"python", which is none of "auto", "debugpy", "remote-debug"/);
});
