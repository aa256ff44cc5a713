import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { afterEach, beforeEach, describe, test } from 'node:test';

import { runArgs, syncArgs, syncSource } from '../../src/rerun';
import { commandsHarness as makeHarness, jobJson, ScenarioStep, until } from './helpers';
import { mock } from './vscode-mock';

const ev = (o: object, after?: number) => ({ line: JSON.stringify({ v: 1, ...o }), after });
const synced = (job = 'local-1') =>
  JSON.stringify({
    event: 'synced',
    v: 1,
    job,
    source: '/ws',
    files: 2,
    bytes: 2048,
    seconds: 0.25,
    nodes: [{ node: 'algo-1', method: 'rsync', files: 2, bytes: 2048, seconds: 0.2 }],
  }) + '\n';
const runStarted = (job = 'local-1', run = 1) => ev({ event: 'run-started', job, run, nodes: ['algo-1'], command: ['python', 'train.py'], master_port: 29500 });
const runEnded = (exitCode: number, job = 'local-1', run = 1, interrupted = false) =>
  ev({ event: 'run-ended', job, run, exit_code: exitCode, exit_codes: { 'algo-1': exitCode }, interrupted }, 20);

/** `run --json` of a run that prints two lines and ends with `exitCode`. */
function runStep(exitCode = 0): ScenarioStep {
  return {
    lines: [
      runStarted(),
      ev({ event: 'run-output', node: 'algo-1', rank: 0, line: 'rank 0/2 step 0 marker 7' }, 10),
      ev({ event: 'run-output', node: 'algo-1', rank: null, line: 'torchrun: all ranks done' }, 10),
      runEnded(exitCode),
    ],
    exit: exitCode,
  };
}

// every run process a test started is stopped after it, pass or fail (a held stand-in would keep the runner waiting)
const harnesses: Array<ReturnType<typeof makeHarness>> = [];
afterEach(async () => {
  await Promise.all(harnesses.splice(0).map((h) => h.runs.stopAll()));
});
function commandsHarness(...args: Parameters<typeof makeHarness>) {
  const h = makeHarness(...args);
  harnesses.push(h);
  return h;
}

const keptAlive = (overrides = {}) => jobJson({ kept_alive_seconds_left: 120, ...overrides });
const args = (invs: Array<{ args: string[] }>, cmd: string) => invs.filter((i) => i.args[0] === cmd).map((i) => i.args);

describe('Sync and Re-run: the argument lists', () => {
  test('sync and run', () => {
    assert.deepEqual(syncArgs('local-1', '/ws'), ['sync', 'local-1', '--json', '--source', '/ws']);
    assert.deepEqual(runArgs('local-1', 30), ['run', 'local-1', '--json', '--wait', '30']);
    assert.deepEqual(runArgs('local-1', -5), ['run', 'local-1', '--json', '--wait', '0']);
  });

  test("what is synced: the job's source dir when the workspace holds it or is part of it, else the workspace", () => {
    assert.equal(syncSource({ source_dir: '/ws/train' }, '/ws'), '/ws/train');
    assert.equal(syncSource({ source_dir: '/ws/' }, '/ws'), '/ws');
    assert.equal(syncSource({ source_dir: '/proj' }, '/proj/sub'), '/proj');
    assert.equal(syncSource({ source_dir: '/elsewhere' }, '/ws'), '/ws');
    assert.equal(syncSource({ source_dir: '/wsx' }, '/ws'), '/ws', 'a sibling with the same prefix is not inside');
    assert.equal(syncSource({ source_dir: null }, '/ws'), '/ws');
    assert.equal(syncSource({ source_dir: 's3://bucket/code' }, '/ws'), '/ws');
  });
});

describe('Sync and Re-run', () => {
  beforeEach(() => mock.reset());

  test('the one attached job: saves its dirty files, syncs, runs in the background, shows the output and the exit code', async () => {
    const h = commandsHarness({ sync: { stdout: synced() }, run: runStep(0) }, [keptAlive()], ['local-1']);
    await h.run('remoteDebug.refresh');
    const train = path.join(h.ws, 'train.py');
    mock.document(train, { dirty: true });
    mock.document(path.join(h.ws, 'clean.py'), { dirty: false });
    mock.document('/elsewhere/notes.py', { dirty: true });
    mock.document('Untitled-1', { dirty: true, untitled: true });

    await h.run('remoteDebug.syncAndRerun');
    assert.equal(mock.calls.filter((c) => c.fn === 'showQuickPick').length, 0, 'the attached job, without asking');
    assert.deepEqual(mock.saved, [train], 'only the dirty files of the synced folder');
    const progress = mock.calls.find((c) => c.fn === 'withProgress')!.args[0];
    assert.equal(progress.title, `Remote Debug: syncing ${path.basename(h.ws)} to local-1`);
    assert.equal(progress.cancellable, true);

    await until('the run to end', () => mock.messages('showInformationMessage').length > 0);
    assert.deepEqual(args(h.invocations(), 'sync'), [['sync', 'local-1', '--json', '--source', h.ws]]);
    assert.deepEqual(args(h.invocations(), 'run'), [['run', 'local-1', '--json', '--wait', '30']]);
    const runCwd = h.invocations().find((i) => i.args[0] === 'run')!.cwd;
    assert.equal(fs.realpathSync(runCwd), fs.realpathSync(h.ws));
    assert.deepEqual(h.requests, [], 'attached already: no second attach');
    assert.deepEqual(h.output, [
      '── local-1: run 1 on algo-1: python train.py ──',
      '[rank 0] rank 0/2 step 0 marker 7',
      '[algo-1] torchrun: all ranks done',
      '── run 1 of local-1 ended with exit code 0 ──',
    ]);
    assert.ok(h.outputShown() >= 1, 'the run output is shown');
    assert.deepEqual(mock.messages('showInformationMessage'), ['Remote Debug: run 1 of local-1 ended with exit code 0.']);
    assert.ok(h.log.includes('[local-1] saved train.py'), h.log.join('\n'));
    assert.ok(h.log.some((l) => l === '[local-1] synced 2 files (2.0 kB) to 1 node in 0.25 s (rsync)'), h.log.join('\n'));
    assert.equal(h.model.get('local-1')?.rerun, undefined);
    assert.equal(h.model.get('local-1')?.info.run, 1, 'from run-started');
    await until('a refresh after the run', () => args(h.invocations(), 'jobs').length === 2);
  });

  test('no attach process: picks the job, starts the run, then attaches (the default ranks) so the new ranks stop', async () => {
    mock.config['remoteDebug.defaultRanks'] = '0,1';
    mock.config['remoteDebug.rerun.waitSeconds'] = 45;
    const h = commandsHarness({ sync: { stdout: synced('b') }, run: { lines: [runStarted('b')], hold: true } }, [
      keptAlive({ name: 'a', created: 2 }),
      keptAlive({ name: 'b', created: 1 }),
      jobJson({ name: 'done', status: 'Completed' }),
    ]);
    mock.quickPicks.push((items) => items.find((i: { label: string }) => i.label === 'b'));
    await h.run('remoteDebug.syncAndRerun');
    const pick = mock.calls.find((c) => c.fn === 'showQuickPick')!;
    assert.deepEqual(pick.args[0].map((i: { label: string }) => i.label), ['a', 'b'], 'running jobs only');
    assert.deepEqual(h.requests.map((r) => [r.job, r.ranks, r.folder.uri.fsPath]), [['b', [0, 1], h.ws]]);
    const runLine = h.log.findIndex((l) => /^\[b\] \$ .* run b --json --wait 45$/.test(l));
    const attachLine = h.log.findIndex((l) => l.startsWith('[b] not attached: attaching'));
    assert.ok(runLine >= 0 && attachLine > runLine, `the run starts before the attach:\n${h.log.join('\n')}`);
    assert.equal(h.runs.isRunning('b'), true);
    await until('run-started', () => h.model.get('b')?.info.run === 1);
    assert.equal(h.model.get('b')?.rerun, 'running');
    assert.equal(h.model.get('b')?.info.kept_alive_seconds_left, null);
    await h.runs.stopAll();
  });

  test('from the view: the job of the item, even with another one attached', async () => {
    const h = commandsHarness({ sync: { stdout: synced('b') }, run: runStep(0) }, [keptAlive({ name: 'a' }), keptAlive({ name: 'b' })], ['a']);
    await h.run('remoteDebug.refresh');
    await h.run('remoteDebug.syncAndRerun', { kind: 'job', job: 'b' });
    assert.deepEqual(args(h.invocations(), 'sync')[0].slice(0, 2), ['sync', 'b']);
    assert.deepEqual(h.requests.map((r) => r.job), ['b']);
    await until('the run to end', () => !h.runs.isRunning('b'));
  });

  test('a failing run: its exit code in an error message that opens the output', async () => {
    const h = commandsHarness({ sync: { stdout: synced() }, run: runStep(3) }, [keptAlive()], ['local-1']);
    await h.run('remoteDebug.refresh');
    mock.messageAnswers.push('Show Output');
    const shownBefore = h.outputShown();
    await h.run('remoteDebug.syncAndRerun');
    await until('the run to end', () => mock.messages('showErrorMessage').length > 0);
    const error = mock.calls.find((c) => c.fn === 'showErrorMessage')!;
    assert.deepEqual(error.args, ['Remote Debug: run 1 of local-1 ended with exit code 3.', 'Show Output']);
    await until('the output shown', () => h.outputShown() === shownBefore + 2);
  });

  test("the CLI refuses the run: its one error line, nothing left running", async () => {
    const stderr = 'remote-debug: error: job local-1 was not launched with --keep-alive: nothing to run again\n';
    const h = commandsHarness({ sync: { stdout: synced() }, run: { stderr, exit: 2 } }, [jobJson()], ['local-1']);
    await h.run('remoteDebug.refresh');
    await h.run('remoteDebug.syncAndRerun');
    await until('the error', () => mock.messages('showErrorMessage').length > 0);
    assert.deepEqual(mock.messages('showErrorMessage'), ['Remote Debug: job local-1 was not launched with --keep-alive: nothing to run again']);
    assert.equal(h.runs.isRunning('local-1'), false);
    assert.equal(h.model.get('local-1')?.rerun, undefined);
  });

  test('sync fails: its one error line, no run', async () => {
    const h = commandsHarness({ sync: { stderr: 'remote-debug: error: job local-1 is Completed: nothing to sync to\n', exit: 2 }, run: runStep(0) }, [keptAlive()], ['local-1']);
    await h.run('remoteDebug.refresh');
    await h.run('remoteDebug.syncAndRerun');
    assert.deepEqual(mock.messages('showErrorMessage'), ['Remote Debug: job local-1 is Completed: nothing to sync to']);
    assert.deepEqual(args(h.invocations(), 'run'), []);
    assert.equal(h.model.get('local-1')?.rerun, undefined);
  });

  test('a CLI without sync or run: says to update it', async () => {
    const h = commandsHarness({}, [keptAlive()], ['local-1']);
    await h.run('remoteDebug.refresh');
    await h.run('remoteDebug.syncAndRerun');
    assert.deepEqual(mock.messages('showErrorMessage'), [
      'Remote Debug: Sync and Re-run needs a newer remote-debug CLI (this one has no "sync" command): pip install -U remote-debug-training',
    ]);
    mock.reset();
    const h2 = commandsHarness({ sync: { stdout: synced() } }, [keptAlive()], ['local-1']);
    await h2.run('remoteDebug.refresh');
    await h2.run('remoteDebug.syncAndRerun');
    await until('the error', () => mock.messages('showErrorMessage').length > 0);
    assert.match(mock.messages('showErrorMessage')[0], /no "run" command\): pip install -U remote-debug-training$/);
  });

  test('a file that cannot be saved: nothing is synced', async () => {
    const h = commandsHarness({ sync: { stdout: synced() }, run: runStep(0) }, [keptAlive()], ['local-1']);
    await h.run('remoteDebug.refresh');
    mock.document(path.join(h.ws, 'ro.py'), { dirty: true, saves: false });
    await h.run('remoteDebug.syncAndRerun');
    assert.deepEqual(mock.messages('showErrorMessage'), ['Remote Debug: could not save ro.py: nothing was synced']);
    assert.deepEqual(args(h.invocations(), 'sync'), []);
  });

  test('cancelling the sync: no error, no run', async () => {
    const h = commandsHarness({ sync: { hold: true }, run: runStep(0) }, [keptAlive()], ['local-1']);
    await h.run('remoteDebug.refresh');
    const running = h.run('remoteDebug.syncAndRerun');
    await until('the sync to start', () => args(h.invocations(), 'sync').length === 1 && mock.progressTokens.length === 1);
    assert.equal(h.model.get('local-1')?.rerun, 'syncing');
    mock.progressTokens[0].cancel();
    await running;
    assert.deepEqual(mock.messages('showErrorMessage'), []);
    assert.deepEqual(args(h.invocations(), 'run'), []);
    assert.equal(h.model.get('local-1')?.rerun, undefined);
  });

  test('a second Sync and Re-run stops the running one first; Stop Run stops the second', async () => {
    const run: ScenarioStep = { lines: [runStarted()], hold: true, onInterrupt: [runEnded(130, 'local-1', 1, true).line] };
    const h = commandsHarness({ sync: { stdout: synced() }, run }, [keptAlive()], ['local-1']);
    await h.run('remoteDebug.refresh');
    await h.run('remoteDebug.syncAndRerun');
    await until('the first run to start', () => h.output.length === 1);
    await h.run('remoteDebug.syncAndRerun');
    await until('the second run to start', () => h.output.filter((l) => l.startsWith('── local-1: run 1')).length === 2);
    assert.deepEqual(
      h.events().map((e) => `${e.args[0]}${e.signal ? ` ${e.signal}` : ''}`).filter((e) => e !== 'jobs'),
      ['sync', 'run', 'run SIGINT', 'sync', 'run'],
      'the first run was interrupted before the second sync',
    );
    assert.ok(h.output.includes('── run 1 of local-1: stopped ──'));
    assert.deepEqual(mock.messages(), [], 'a run we stopped is no news');
    assert.equal(h.model.get('local-1')?.rerun, 'running');

    await h.run('remoteDebug.stopRun', { kind: 'job', job: 'local-1' });
    assert.deepEqual(h.events().filter((e) => e.signal).length, 2);
    assert.equal(h.runs.isRunning('local-1'), false);
    assert.equal(h.model.get('local-1')?.rerun, undefined);
    await h.run('remoteDebug.stopRun');
    assert.match(mock.messages('showInformationMessage')[0] ?? '', /no re-run/, 'nothing left to stop');
  });

  test('a Sync and Re-run overtaken while it syncs does not run; the newer one syncs after it, then runs', async () => {
    const slowSync: ScenarioStep = { lines: [{ line: synced().trim(), after: 300 }] };
    const h = commandsHarness({ sync: slowSync, run: runStep(0) }, [keptAlive()], ['local-1']);
    await h.run('remoteDebug.refresh');
    const first = h.run('remoteDebug.syncAndRerun');
    await until('the first sync to start', () => args(h.invocations(), 'sync').length === 1);
    const second = h.run('remoteDebug.syncAndRerun');
    await Promise.all([first, second]);
    assert.equal(args(h.invocations(), 'sync').length, 2, 'the second synced again, after the first');
    await until('the run to end', () => mock.messages('showInformationMessage').length > 0);
    assert.equal(args(h.invocations(), 'run').length, 1, 'only the newer one ran');
    assert.deepEqual(mock.messages('showErrorMessage'), []);
  });

  test('Stop Job stops the re-run before the job', async () => {
    const stopped = jobJson({ status: 'Stopped', secondary_status: 'Stopped' });
    const h = commandsHarness({ sync: { stdout: synced() }, run: { lines: [runStarted()], hold: true }, stop: { stdout: JSON.stringify(stopped) } }, [keptAlive()], ['local-1']);
    await h.run('remoteDebug.refresh');
    await h.run('remoteDebug.syncAndRerun');
    await until('the run to start', () => h.output.length === 1);
    mock.messageAnswers.push('Stop Job');
    await h.run('remoteDebug.stopJob', { kind: 'job', job: 'local-1' });
    const order = h.events().map((e) => `${e.args[0]}${e.signal ? ` ${e.signal}` : ''}`);
    assert.ok(order.indexOf('run SIGINT') >= 0 && order.indexOf('run SIGINT') < order.indexOf('stop'), order.join(', '));
    assert.deepEqual(h.detached, ['local-1']);
  });
});

describe('Release', () => {
  beforeEach(() => mock.reset());

  test('asks first, then runs release --json and lists the jobs again', async () => {
    const released = keptAlive({ status: 'Completed', secondary_status: 'Completed', kept_alive_seconds_left: null, exit_code: 0 });
    const h = commandsHarness({ release: { stdout: JSON.stringify(released) } }, [keptAlive()]);
    await h.run('remoteDebug.refresh');
    mock.messageAnswers.push(undefined); // dismissed
    await h.run('remoteDebug.release', { kind: 'job', job: 'local-1' });
    assert.deepEqual(args(h.invocations(), 'release'), []);
    const ask = mock.calls.find((c) => c.fn === 'showWarningMessage')!;
    assert.equal(ask.args[0], 'Release job local-1?');
    assert.equal(ask.args[1].modal, true);
    assert.match(ask.args[1].detail, /stop being kept alive: the job ends/);
    assert.equal(ask.args[2], 'Release');

    mock.messageAnswers.push('Release');
    await h.run('remoteDebug.release', { kind: 'job', job: 'local-1' });
    assert.deepEqual(args(h.invocations(), 'release'), [['release', 'local-1', '--json']]);
    assert.equal(args(h.invocations(), 'jobs').length, 2, 'listed again');
    assert.deepEqual(mock.messages('showErrorMessage'), []);
  });

  test("the CLI's error line when it refuses", async () => {
    const h = commandsHarness({ release: { stderr: 'remote-debug: error: job local-1 is not kept alive\n', exit: 2 } }, [jobJson()]);
    mock.messageAnswers.push('Release');
    await h.run('remoteDebug.release');
    assert.deepEqual(mock.messages('showErrorMessage'), ['Remote Debug: job local-1 is not kept alive']);
  });
});
