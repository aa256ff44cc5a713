import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import { beforeEach, describe, test } from 'node:test';

import * as vscode from 'vscode';

import { AttachManager, AttachOptions, AttachSettings } from '../../src/attach';
import { AttachMemory } from '../../src/attachMemory';
import { JobInfo } from '../../src/events';
import { parentTag } from '../../src/jobSession';
import { JobsModel } from '../../src/model';
import { RestartBudget } from '../../src/sessionEnds';
import { attachLines, fakeCli, jobJson, ScenarioStep, tempDir, until } from './helpers';
import { mock } from './vscode-mock';

const managers: AttachManager[] = [];
const settings: AttachSettings = { debugType: 'auto', pathMappings: [], justMyCode: false, readyTimeoutSeconds: 600 };

function setup(
  attach: ScenarioStep,
  installed: string[] = [],
  byRanks: Record<string, ScenarioStep> = {},
  options: { settings?: (scope?: vscode.Uri) => AttachSettings; attach?: AttachOptions; jobs?: JobInfo[] } = {},
) {
  // the previous test's manager: its notices still gathering must not show in this test
  managers.splice(0).forEach((m) => m.dispose());
  mock.reset();
  const ws = tempDir('rd-ws');
  const folder = mock.folder(ws) as unknown as vscode.WorkspaceFolder;
  const { cli, invocations } = fakeCli({ attach, ...byRanks });
  const model = new JobsModel();
  model.setJobs(options.jobs ?? [jobJson()]);
  const log: string[] = [];
  const manager = new AttachManager(
    cli,
    model,
    { appendLine: (l) => log.push(l) },
    options.settings ?? (() => settings),
    () => installed,
    { noticeDelayMs: 30, lostNoticeDelayMs: 0, ...options.attach },
  );
  managers.push(manager);
  mock.startDebugging = async (_folder, config, opts) => {
    mock.startSession(config, opts);
    return true;
  };
  // the rank sessions' configurations (the job's own session is parentStarts')
  const started = () => mock.calls.filter((c) => c.fn === 'startDebugging' && c.args[1].remoteDebug).map((c) => c.args[1]);
  const parentStarts = () => mock.calls.filter((c) => c.fn === 'startDebugging' && parentTag(c.args[1])).map((c) => c.args[1]);
  return { ws, folder, model, manager, invocations, log, started, parentStarts };
}

/** The rank sessions VS Code runs (not the jobs' own sessions). */
const rankSessions = () => mock.sessions.filter((s) => s.configuration.remoteDebug);
const jobSessions = () => mock.sessions.filter((s) => parentTag(s.configuration));

describe('AttachManager', () => {
  beforeEach(() => mock.reset());

  test('runs attach --json, starts one session per rank when ready, tracks their state', async () => {
    const { ws, folder, model, manager, invocations, started, log } = setup({ lines: attachLines(), hold: true });
    await manager.attach({ job: 'local-1', ranks: undefined, folder });

    const inv = invocations()[0];
    assert.deepEqual(inv.args, [
      'attach', 'local-1', '--json', '--ide', 'vscode', '--ranks', 'all', '--workspace', ws, '--timeout', '600', '--no-launch-json',
    ]);
    assert.equal(fs.realpathSync(inv.cwd), fs.realpathSync(ws));
    assert.equal(mock.calls.find((c) => c.fn === 'withProgress')?.args[0].cancellable, true);

    const configs = started();
    assert.deepEqual(configs.map((c) => [c.name, c.type, c.connect.port]), [
      ['rank 0 · algo-1', 'remote-debug', 40000],
      ['rank 1 · algo-1', 'remote-debug', 40001],
    ]);
    assert.deepEqual(configs[0].pathMappings, [{ localRoot: ws, remoteRoot: '/jobs/local-1/nodes/algo-1/code' }]);
    assert.equal(model.get('local-1')?.attach, 'ready');
    assert.deepEqual(model.allRanks('local-1').map((r) => r.state), ['attached', 'attached']);
    assert.ok(log.some((l) => l.includes('rank 1 on algo-1: debugger at 127.0.0.1:40001')), 'events go to the output channel');

    // the DAP tracker turns stopped/continue into paused/attached
    const session = rankSessions()[1];
    const tracker = mock.tracker(session);
    tracker.onDidSendMessage({ type: 'event', event: 'stopped', body: { reason: 'breakpoint' } });
    assert.equal(model.rankEntry('local-1', 1)?.state, 'paused');
    assert.equal(model.rankEntry('local-1', 1)?.detail, 'breakpoint');
    tracker.onWillReceiveMessage({ type: 'request', command: 'continue' });
    assert.equal(model.rankEntry('local-1', 1)?.state, 'attached');
    assert.equal(mock.tracker({ configuration: { name: 'Python: Current File' } }), undefined, 'not our session: no tracker');

    // attaching again reuses the running process and does not duplicate sessions
    await manager.attach({ job: 'local-1', ranks: [1], folder });
    assert.equal(invocations().length, 1);
    assert.equal(started().length, 2);

    // a session that ends leaves the rank re-attachable
    mock.endSession(rankSessions()[0]);
    assert.equal(model.rankEntry('local-1', 0)?.state, 'listening');
    await manager.attach({ job: 'local-1', ranks: [0], folder });
    assert.equal(started().length, 3);

    await manager.detachRank('local-1', 0);
    assert.equal(mock.calls.filter((c) => c.fn === 'stopDebugging').length, 1, 'one rank detached');
    assert.equal(manager.isAttached('local-1'), true, 'the tunnels stay up');
    mock.calls = mock.calls.filter((c) => c.fn !== 'stopDebugging');
    await manager.detach('local-1');
    assert.equal(manager.isAttached('local-1'), false);
    // both rank sessions, then the job's own
    const stoppedNames = mock.calls.filter((c) => c.fn === 'stopDebugging').map((c) => c.args[0].configuration.name);
    assert.deepEqual([...stoppedNames.slice(0, 2).sort(), stoppedNames[2]], [
      'rank 0 · algo-1',
      'rank 1 · algo-1',
      'Remote Debug: local-1',
    ]);
    assert.equal(model.get('local-1')?.attach, 'ended', 'a detach we asked for is not a failure');
  });

  test('a newer CLI: its events still drive the attach, the version is said once, new events are logged', async () => {
    const v2 = (o: object) => ({ line: JSON.stringify({ v: 2, future_field: true, ...o }) });
    const lines = [
      v2({ event: 'rank-listening', rank: 0, node: 'algo-1', remote_port: 50000, detail: 'process-group timeout 7200 s' }),
      v2({ event: 'pause-safe', rank: 1, node: 'algo-1', detail: 'pending: no process group yet' }),
      v2({ event: 'something-new', x: 1 }),
      ...attachLines().map((l) => ({ ...l, line: JSON.stringify({ ...JSON.parse(l.line), v: 2 }) })),
    ];
    const { folder, manager, started, log } = setup({ lines, hold: true });
    await manager.attach({ job: 'local-1', ranks: undefined, folder });
    assert.equal(started().length, 2);
    assert.equal(log.filter((l) => l.includes('prints events of version 2')).length, 1);
    assert.ok(log.some((l) => l.includes('rank 0 on algo-1: debugger listening on its port 50000')));
    assert.ok(log.some((l) => l.includes('rank 1 on algo-1: pause-safe (pending: no process group yet)')));
    assert.ok(log.some((l) => l.includes('something-new')));
    await manager.stopAll();
  });

  test("the rank's code dir from rank-ready is the path mapping's remote root", async () => {
    const lines = attachLines().map((l) => {
      const e = JSON.parse(l.line);
      return e.event === 'rank-ready' ? { ...l, line: JSON.stringify({ ...e, code_dir: '/opt/ml/code' }) } : l;
    });
    const { ws, folder, manager, started } = setup({ lines, hold: true });
    await manager.attach({ job: 'local-1', ranks: undefined, folder });
    assert.deepEqual(started()[0].pathMappings, [{ localRoot: ws, remoteRoot: '/opt/ml/code' }]);
    await manager.stopAll();
  });

  test('uses debugpy configurations when the Python extension is installed', async () => {
    const { folder, manager, started } = setup({ lines: attachLines(), hold: true }, ['ms-python.debugpy']);
    await manager.attach({ job: 'local-1', ranks: undefined, folder });
    assert.deepEqual(started().map((c) => c.type), ['debugpy', 'debugpy']);
    await manager.stopAll();
  });

  test('a selection of ranks is passed to the CLI and only those sessions start', async () => {
    const { folder, manager, invocations, started } = setup({ lines: attachLines('local-1', [1]), hold: true });
    await manager.attach({ job: 'local-1', ranks: [1], folder });
    assert.deepEqual(invocations()[0].args.slice(5, 7), ['--ranks', '1']);
    assert.deepEqual(started().map((c) => c.remoteDebug.rank), [1]);
    await manager.stopAll();
  });

  test("a rank no running attach covers gets a process of its own (--ranks N); covered ranks just get their sessions", async () => {
    // the rank items' inline Attach: rank 0 first, then rank 1 while rank 0's process runs on
    const { folder, model, manager, invocations, started } = setup({ lines: attachLines(), hold: true }, [], {
      'attach --ranks 0': { lines: attachLines('local-1', [0]), hold: true },
      'attach --ranks 1': { lines: attachLines('local-1', [1]), hold: true },
    });
    const ranksArg = () => invocations().map((i) => i.args[i.args.indexOf('--ranks') + 1]);
    await manager.attach({ job: 'local-1', ranks: [0], folder });
    await manager.attach({ job: 'local-1', ranks: [1], folder });
    assert.deepEqual(ranksArg(), ['0', '1']);
    assert.deepEqual(started().map((c) => [c.remoteDebug.rank, c.connect.port]), [[0, 40000], [1, 40001]]);
    assert.deepEqual(model.allRanks('local-1').map((r) => r.state), ['attached', 'attached']);
    assert.equal(model.get('local-1')?.attach, 'ready');

    // both ranks, each covered by its own process: no third process, no second session
    await manager.attach({ job: 'local-1', ranks: [0, 1], folder });
    assert.deepEqual(ranksArg(), ['0', '1']);
    assert.equal(started().length, 2);
    // rank 0's session ended: picking both again starts just that one, on its process's port
    mock.endSession(rankSessions().find((s) => s.configuration.remoteDebug.rank === 0));
    await manager.attach({ job: 'local-1', ranks: [0, 1], folder });
    assert.deepEqual(started().slice(2).map((c) => [c.remoteDebug.rank, c.connect.port]), [[0, 40000]]);
    assert.equal(invocations().length, 2);
    await manager.stopAll();
    assert.equal(manager.isAttached('local-1'), false);
  });

  test("an attach process that exits stops only the sessions on its own tunnels; its ranks can be attached again", async () => {
    const exits = [...attachLines(), { line: JSON.stringify({ event: 'warning', message: 'bye' }), after: 300 }];
    const { folder, model, manager, invocations, started, log } = setup({ lines: exits, exit: 0 }, [], {
      'attach --ranks 0': { lines: attachLines('local-1', [0]), hold: true },
      'attach --ranks 1': { lines: attachLines('local-1', [1]), hold: true },
    });
    await manager.attach({ job: 'local-1', ranks: [0], folder });
    // all ranks: a process of its own (rank 0's session stays on the first process's tunnel)
    await manager.attach({ job: 'local-1', ranks: undefined, folder });
    assert.deepEqual(started().map((c) => c.remoteDebug.rank), [0, 1]);
    const [s0, s1] = rankSessions();
    await until('the all-ranks process to exit', () => log.some((l) => l.includes('remote-debug attach exited (code 0)')));
    assert.deepEqual(mock.calls.filter((c) => c.fn === 'stopDebugging').map((c) => c.args[0]), [s1], "rank 0's session is not its (nor the job's)");
    mock.endSession(s1);
    assert.deepEqual(model.allRanks('local-1').map((r) => r.state), ['attached', 'not-attached'], 'rank 1 has no tunnel any more');
    assert.equal(model.rankEntry('local-1', 1)?.localPort, undefined);
    assert.equal(model.get('local-1')?.attach, 'ready', 'the job is still attached');
    assert.equal(manager.sessionFor('local-1', 0), s0);

    await manager.attach({ job: 'local-1', ranks: [1], folder });
    assert.deepEqual(invocations().map((i) => i.args[i.args.indexOf('--ranks') + 1]), ['0', 'all', '1']);
    assert.deepEqual(started().slice(2).map((c) => c.remoteDebug.rank), [1]);
    await manager.stopAll();
  });

  test('a failing attach rejects with the CLI error line and marks the job', async () => {
    const { folder, model, manager, started } = setup({ stderr: 'remote-debug: error: nodes algo-1 of job local-1 did not publish an sshd within 600 s\n', exit: 2 });
    await assert.rejects(manager.attach({ job: 'local-1', ranks: undefined, folder }), /did not publish an sshd within 600 s/);
    assert.equal(model.get('local-1')?.attach, 'failed');
    assert.match(model.get('local-1')!.attachError!, /sshd/);
    assert.equal(started().length, 0);
  });

  test('cancelling the progress notification stops the attach process', async () => {
    const { folder, model, manager, started, invocations } = setup({ lines: attachLines().slice(0, 2), hold: true });
    const attaching = manager.attach({ job: 'local-1', ranks: undefined, folder });
    await until('the attach process', () => invocations().length === 1 && model.get('local-1')?.nodes.get('algo-1')?.alias);
    mock.progressTokens[0].cancel();
    await attaching; // resolves: a cancel is not an error
    assert.equal(manager.isAttached('local-1'), false);
    assert.equal(started().length, 0);
    assert.equal(model.get('local-1')?.attach, 'ended');
    assert.deepEqual(mock.messages('showErrorMessage'), []);
  });

  test('the job ending ends the attach: sessions stop, the user is told', async () => {
    const lines = [...attachLines(), { line: JSON.stringify({ event: 'job-ended', status: 'Completed', exit_code: 0, failure_reason: null }), after: 150 }];
    const { folder, model, manager } = setup({ lines, exit: 0 });
    await manager.attach({ job: 'local-1', ranks: undefined, folder });
    await until('the process to exit', () => !manager.isAttached('local-1'));
    assert.deepEqual(mock.messages('showInformationMessage'), ['Remote Debug: job local-1 ended (Completed, exit code 0).']);
    assert.equal(model.get('local-1')?.info.status, 'Completed');
    assert.deepEqual(model.allRanks('local-1').map((r) => r.state), ['finished', 'finished']);
    assert.equal(mock.calls.filter((c) => c.fn === 'stopDebugging').length, 3, 'both ranks and the job session');
  });

  test('a debug session that cannot start leaves the rank re-attachable and says why in the log', async () => {
    const { folder, model, manager, log } = setup({ lines: attachLines(), hold: true });
    mock.startDebugging = async () => false;
    await manager.attach({ job: 'local-1', ranks: undefined, folder });
    assert.deepEqual(model.allRanks('local-1').map((r) => r.state), ['listening', 'listening']);
    assert.ok(log.some((l) => l.includes('could not start "rank 0 · algo-1 · local-1"')));
    // one notification for both, not one per rank
    await until('the notice', () => mock.messages('showErrorMessage').length > 0);
    assert.deepEqual(mock.messages('showErrorMessage'), ['Remote Debug (local-1): could not start the debug sessions of ranks 0-1.']);
    await manager.stopAll();
  });

  describe('a re-run (remote-debug run) replaces the ranks', () => {
    const code = '/jobs/local-1/nodes/algo-1/code';
    const restarted = (rank: number, after?: number) => ({
      line: JSON.stringify({ event: 'rank-restarted', v: 1, rank, node: 'algo-1', pid: 200 + rank, old_pid: 100 + rank, run: 1 }),
      after,
    });
    const ready = (rank: number, after?: number) => ({
      line: JSON.stringify({ event: 'rank-ready', v: 1, rank, node: 'algo-1', local_port: 40000 + rank, remote_port: 50000 + rank, state: 'waiting', ide: 'vscode', code_dir: code }),
      after,
    });
    const stopped = () => mock.calls.filter((c) => c.fn === 'stopDebugging').map((c) => c.args[0]);

    test("each old session is stopped; the new one starts only once the old one has ended, on the same port", async () => {
      const lines = [...attachLines(), restarted(0, 300), restarted(1), ready(0, 50), ready(1)];
      const { folder, model, manager, started, log } = setup({ lines, hold: true });
      await manager.attach({ job: 'local-1', ranks: undefined, folder });
      const [old0, old1] = rankSessions();
      assert.equal(started().length, 2);

      await until('both old sessions to be stopped', () => stopped().length === 2);
      assert.deepEqual(stopped(), [old0, old1]);
      assert.deepEqual(model.allRanks('local-1').map((r) => r.state), ['restarting', 'restarting']);
      await until('the new processes to be ready', () => log.filter((l) => l.includes('new process ready')).length === 2);
      // the race: the old sessions have not ended yet, so no new session may start on their port
      assert.equal(started().length, 2, 'no session while the old ones are still there');
      assert.equal(manager.sessionFor('local-1', 0), old0);
      assert.deepEqual(model.allRanks('local-1').map((r) => r.state), ['waiting', 'waiting']);

      mock.endSession(old0);
      await until('a new session for rank 0', () => started().length === 3);
      assert.deepEqual([started()[2].remoteDebug.rank, started()[2].connect.port], [0, 40000]);
      assert.notEqual(manager.sessionFor('local-1', 0), old0);
      mock.endSession(old1);
      await until('a new session for rank 1', () => started().length === 4);
      assert.deepEqual([started()[3].remoteDebug.rank, started()[3].connect.port], [1, 40001]);
      assert.deepEqual(model.allRanks('local-1').map((r) => r.state), ['attached', 'attached']);
      assert.equal(model.get('local-1')?.info.run, 1);
      await manager.stopAll();
    });

    test('a rank whose old session had already ended gets its new session at once', async () => {
      const lines = [...attachLines(), restarted(0, 300), ready(0, 50)];
      const { folder, model, manager, started } = setup({ lines, hold: true });
      await manager.attach({ job: 'local-1', ranks: undefined, folder });
      mock.endSession(rankSessions()[0]); // the old process ran to its end: its session is gone
      assert.equal(model.rankEntry('local-1', 0)?.state, 'listening');
      await until('a new session for rank 0', () => started().length === 3);
      assert.equal(started()[2].remoteDebug.rank, 0);
      assert.equal(stopped().length, 0, 'nothing to stop');
      await manager.stopAll();
    });

    test('a rank-ready without a restart does not start a second session', async () => {
      const lines = [...attachLines(), ready(0, 200), { line: JSON.stringify({ event: 'warning', message: 'done' }), after: 10 }];
      const { folder, manager, started, log } = setup({ lines, hold: true });
      await manager.attach({ job: 'local-1', ranks: undefined, folder });
      await until('the late events', () => log.some((l) => l.includes('warning: done')));
      assert.equal(started().length, 2);
      await manager.stopAll();
    });

    test('a restart of a rank outside the selection starts nothing; a detach drops the pending start', async () => {
      const lines = [...attachLines('local-1', [0, 1]), restarted(0, 300), restarted(1), ready(0, 50), ready(1)];
      const { folder, manager, started, log } = setup({ lines, hold: true });
      await manager.attach({ job: 'local-1', ranks: [0], folder });
      assert.equal(started().length, 1);
      const old0 = rankSessions()[0];
      await until('the new rank 0 to be ready', () => log.some((l) => l.includes('rank 0: new process ready')));
      await until('rank 1 ready again', () => log.filter((l) => l.includes('rank 1 on algo-1: debugger at')).length === 2);
      assert.equal(stopped().length, 1);
      await manager.detach('local-1');
      mock.endSession(old0);
      await new Promise((r) => setTimeout(r, 50));
      assert.equal(started().length, 1, 'detached: no new session');
    });
  });

  test('refuses a job that has ended', async () => {
    const { folder, model, manager, invocations } = setup({ lines: attachLines(), hold: true });
    model.setJobs([jobJson({ status: 'Completed' })]);
    await assert.rejects(manager.attach({ job: 'local-1', ranks: undefined, folder }), /is Completed: nothing to attach to/);
    assert.equal(invocations().length, 0);
  });
});

function memento() {
  const store = new Map<string, unknown>();
  return { get: (k: string) => store.get(k), update: async (k: string, v: unknown) => void store.set(k, v), keys: () => [...store.keys()] } as unknown as vscode.Memento;
}

const event = (o: object, after?: number) => ({ line: JSON.stringify({ v: 1, ...o }), after });

describe('AttachManager: the job session, path mappings, settings per folder', () => {
  beforeEach(() => mock.reset());

  test("the rank sessions are children of one session per job, named rank first", async () => {
    const { manager, folder, parentStarts, model } = setup({ lines: attachLines(), hold: true }, [], {
      'attach --ranks 1': { lines: attachLines('local-1', [1]), hold: true },
    });
    await manager.attach({ job: 'local-1', ranks: [0], folder });
    assert.deepEqual(parentStarts().map((c) => c.name), ['Remote Debug: local-1']);
    const [job] = jobSessions();
    const rankStarts = mock.calls.filter((c) => c.fn === 'startDebugging' && c.args[1].remoteDebug);
    assert.deepEqual(rankStarts.map((c) => [c.args[1].name, c.args[2]]), [
      ['rank 0 · algo-1', { parentSession: job, compact: true, lifecycleManagedByParent: false }],
    ]);
    // more ranks of the job (another attach process): under the same job session
    await manager.attach({ job: 'local-1', ranks: [1], folder });
    assert.equal(parentStarts().length, 1, 'one job session');
    assert.deepEqual(rankSessions().map((s) => [s.name, s.parentSession === job]), [
      ['rank 0 · algo-1', true],
      ['rank 1 · algo-1', true],
    ]);
    assert.deepEqual(model.allRanks('local-1').map((r) => r.state), ['attached', 'attached']);
    await manager.stopAll();
  });

  test("stopping the job's session (Call Stack) detaches the job: its ranks and its tunnels", async () => {
    const memory = new AttachMemory(memento());
    const { manager, folder, model } = setup({ lines: attachLines(), hold: true }, [], {}, { attach: { memory, forgetDelayMs: 20 } });
    await manager.attach({ job: 'local-1', ranks: undefined, folder });
    assert.equal(memory.list().length, 1);
    mock.endSession(jobSessions()[0]);
    await until('the attach to stop', () => !manager.isAttached('local-1'));
    assert.deepEqual(mock.calls.filter((c) => c.fn === 'stopDebugging').map((c) => c.args[0].name).sort(), [
      'rank 0 · algo-1',
      'rank 1 · algo-1',
    ]);
    assert.equal(model.get('local-1')?.attach, 'ended');
    await until('forgotten', () => memory.list().length === 0); // a detach is not re-attached after a reload
  });

  test("the window closing ends the job's session too: the job stays remembered for the next window", async () => {
    const memory = new AttachMemory(memento());
    const { manager, folder } = setup({ lines: attachLines(), hold: true }, [], {}, { attach: { memory, forgetDelayMs: 20 } });
    await manager.attach({ job: 'local-1', ranks: undefined, folder });
    mock.endSession(jobSessions()[0]); // VS Code shuts its sessions down...
    await manager.stopAll(); // ...and deactivates the extension
    await new Promise((r) => setTimeout(r, 60));
    assert.equal(memory.list().length, 1);
  });

  test("Restart on the job's session starts every rank's session again, on the same tunnels", async () => {
    const { manager, folder, started, invocations } = setup({ lines: attachLines(), hold: true });
    await manager.attach({ job: 'local-1', ranks: undefined, folder });
    const old = rankSessions();
    mock.tracker(jobSessions()[0]).onWillReceiveMessage({ type: 'request', command: 'restart', seq: 9 });
    assert.deepEqual(mock.calls.filter((c) => c.fn === 'stopDebugging').map((c) => c.args[0]), old);
    old.forEach((s) => mock.endSession(s));
    await until('both started again', () => started().length === 4);
    assert.deepEqual(started().slice(2).map((c) => [c.remoteDebug.rank, c.connect.port]), [[0, 40000], [1, 40001]]);
    assert.equal(invocations().length, 1, 'no new attach');
    assert.equal(manager.isAttached('local-1'), true);
    await manager.stopAll();
  });

  test("a job session that does not start: its ranks start on their own", async () => {
    const { manager, folder, started } = setup({ lines: attachLines(), hold: true });
    mock.startDebugging = async (_f, config, opts) => {
      if (parentTag(config)) {
        return false;
      }
      mock.startSession(config, opts);
      return true;
    };
    await manager.attach({ job: 'local-1', ranks: undefined, folder });
    assert.equal(started().length, 2);
    assert.deepEqual(mock.calls.filter((c) => c.fn === 'startDebugging' && c.args[1].remoteDebug).map((c) => c.args[2]), [undefined, undefined]);
    await manager.stopAll();
  });

  test('the local root (the job source folder) maps to the code dir; a request without one asks localRootFor', async () => {
    const { ws, manager, folder, started } = setup({ lines: attachLines(), hold: true }, [], {}, {
      attach: { localRootFor: (job) => (job === 'local-1' ? `${ws}/training` : undefined) },
    });
    await manager.attach({ job: 'local-1', ranks: undefined, folder });
    assert.deepEqual(started()[0].pathMappings, [{ localRoot: `${ws}/training`, remoteRoot: '/jobs/local-1/nodes/algo-1/code' }]);
    await manager.stopAll();
  });

  test("settings are read for the request's workspace folder; a launch.json's pathMappings and justMyCode win", async () => {
    const scopes: Array<string | undefined> = [];
    const perFolder = (scope?: vscode.Uri): AttachSettings => {
      scopes.push(scope?.fsPath);
      return { ...settings, justMyCode: true, debugType: 'debugpy', readyTimeoutSeconds: 42 };
    };
    // (debugpy: the Python Debugger is installed)
    const { ws, manager, folder, started, invocations } = setup({ lines: attachLines(), hold: true }, ['ms-python.debugpy'], {}, { settings: perFolder });
    await manager.attach({
      job: 'local-1',
      ranks: undefined,
      folder,
      pathMappings: [{ localRoot: '${workspaceFolder}/src', remoteRoot: '/code' }],
      justMyCode: false,
    });
    assert.ok(scopes.length > 0 && scopes.every((s) => s === ws), 'read with the folder as scope');
    assert.deepEqual(invocations()[0].args.slice(9, 11), ['--timeout', '42']);
    assert.deepEqual(started().map((c) => [c.type, c.justMyCode, c.pathMappings]), [
      ['debugpy', false, [{ localRoot: `${ws}/src`, remoteRoot: '/code' }]],
      ['debugpy', false, [{ localRoot: `${ws}/src`, remoteRoot: '/code' }]],
    ]);
    await manager.stopAll();
  });
});

describe('AttachManager: sessions lost to a dropped tunnel', () => {
  beforeEach(() => mock.reset());

  /** What VS Code does when the socket to a rank closes: the adapter's error, its own disconnect, the end. */
  function dropConnection(session: { configuration: unknown }): void {
    const tracker = mock.tracker(session);
    tracker.onError(new Error('connection closed'));
    tracker.onWillReceiveMessage({ type: 'request', command: 'disconnect' });
    mock.endSession(session);
  }

  test('a session that ends when the tunnel drops is started again once the CLI says the node is back', async () => {
    const lines = [...attachLines(), event({ event: 'tunnel-down', node: 'algo-1', error: 'timeout' }, 400), event({ event: 'reconnected', node: 'algo-1' }, 100)];
    const { manager, folder, started, model, log } = setup({ lines, hold: true });
    await manager.attach({ job: 'local-1', ranks: undefined, folder });
    const [s0] = rankSessions();
    dropConnection(s0);
    assert.equal(model.rankEntry('local-1', 0)?.lost, true, 'the view marks it (Re-attach)');
    assert.deepEqual(manager.lostRanks('local-1'), [0]);
    await until('the notice', () => mock.messages('showWarningMessage').length > 0);
    assert.deepEqual(mock.messages('showWarningMessage'), [
      'Remote Debug (local-1): the debug session of rank 0 ended when the connection dropped; it is attached again once the tunnel is back.',
    ]);
    assert.equal(started().length, 2, 'not before the node is back');
    await until('rank 0 attached again', () => started().length === 3);
    assert.deepEqual([started()[2].remoteDebug.rank, started()[2].connect.port], [0, 40000]);
    assert.equal(model.rankEntry('local-1', 0)?.lost, undefined);
    assert.deepEqual(manager.lostRanks('local-1'), []);
    assert.ok(log.some((l) => l.includes('attaching ranks 0 again')));
    await manager.stopAll();
  });

  test('a session that ends while another rank of the job failed is no tunnel news', async () => {
    // a gang held after rank 1's failure is released: the others' sessions end as the job fails
    const { manager, folder, model } = setup({ lines: attachLines(), hold: true });
    await manager.attach({ job: 'local-1', ranks: undefined, folder });
    model.rankEntry('local-1', 1)!.state = 'failed';
    dropConnection(rankSessions()[0]);
    await new Promise((r) => setTimeout(r, 120)); // the notice delays (0 ms and 30 ms here) are over
    assert.deepEqual(mock.messages('showWarningMessage'), []);
    await manager.stopAll();
  });

  test('a session the user stopped, or whose rank ended, is not started again', async () => {
    const lines = [...attachLines(), event({ event: 'reconnected', node: 'algo-1' }, 300), event({ event: 'warning', message: 'done' }, 50)];
    const { manager, folder, started, log } = setup({ lines, hold: true });
    await manager.attach({ job: 'local-1', ranks: undefined, folder });
    const [s0, s1] = rankSessions();
    const t0 = mock.tracker(s0);
    t0.onWillReceiveMessage({ type: 'request', command: 'disconnect' }); // the user's Stop
    t0.onError(new Error('connection closed')); // the socket closing after it is no news
    mock.endSession(s0);
    const t1 = mock.tracker(s1);
    t1.onDidSendMessage({ type: 'event', event: 'terminated' }); // the rank's process ended
    t1.onError(new Error('connection closed'));
    mock.endSession(s1);
    await until('the node to be back', () => log.some((l) => l.includes('warning: done')));
    assert.equal(started().length, 2);
    assert.deepEqual(manager.lostRanks('local-1'), []);
    await manager.stopAll();
  });

  test('the node came back just before the session noticed: started again at once', async () => {
    const lines = [...attachLines(), event({ event: 'reconnected', node: 'algo-1' }, 50)];
    const { manager, folder, started, log } = setup({ lines, hold: true });
    await manager.attach({ job: 'local-1', ranks: undefined, folder });
    await until('reconnected', () => log.some((l) => l.includes('reconnected to algo-1')));
    dropConnection(rankSessions()[1]);
    await until('rank 1 attached again', () => started().length === 3);
    assert.equal(started()[2].remoteDebug.rank, 1);
    await new Promise((r) => setTimeout(r, 80));
    assert.deepEqual(mock.messages('showWarningMessage'), [], 'nothing to tell');
    await manager.stopAll();
  });

  test('a session that keeps dropping is left to Re-attach, which starts it again', async () => {
    const reconnected = (after: number) => event({ event: 'reconnected', node: 'algo-1' }, after);
    const lines = [...attachLines(), reconnected(300), reconnected(300)];
    const { manager, folder, started, log, model } = setup({ lines, hold: true }, [], {}, { attach: { restartBudget: new RestartBudget(1), recentReconnectMs: 0 } });
    await manager.attach({ job: 'local-1', ranks: undefined, folder });
    dropConnection(rankSessions()[0]);
    await until('the first restart', () => started().length === 3);
    dropConnection(rankSessions().find((s) => s.configuration.remoteDebug.rank === 0));
    await until('the second reconnect', () => log.some((l) => l.includes('keeps dropping')));
    assert.equal(started().length, 3, 'not again');
    assert.deepEqual(manager.lostRanks('local-1'), [0]);
    assert.equal(model.rankEntry('local-1', 0)?.lost, true);
    assert.equal(await manager.reattach('local-1'), true);
    assert.equal(started().length, 4);
    assert.deepEqual(manager.lostRanks('local-1'), []);
    assert.equal(await manager.reattach('local-1'), false, 'nothing lost any more');
    await manager.stopAll();
  });
});

describe('AttachManager: notifications and memory', () => {
  beforeEach(() => mock.reset());

  test('failures and warnings of many ranks: one notification each, with what helps', async () => {
    const failed = (rank: number) => event({ event: 'rank-failed', rank, node: 'algo-1', pid: 1, error: 'RuntimeError: NCCL timeout', held: true }, 5);
    const lines = [
      ...attachLines('local-1', [0, 1, 2, 3]),
      failed(3),
      failed(1),
      failed(2),
      event({ event: 'warning', message: 'rank 1: slow' }, 5),
      event({ event: 'warning', message: 'rank 2: slow' }, 5),
    ];
    const { manager, folder } = setup({ lines, hold: true }, [], {}, { jobs: [jobJson({ nproc_per_node: 4 })] });
    mock.messageAnswers.push('Attach Failed Ranks');
    await manager.attach({ job: 'local-1', ranks: undefined, folder });
    await until('the notices', () => mock.messages('showErrorMessage').length === 1 && mock.messages('showWarningMessage').length === 1);
    const error = mock.calls.find((c) => c.fn === 'showErrorMessage')!;
    assert.equal(
      error.args[0],
      'Remote Debug (local-1): 3 ranks failed: 1-3 (rank 3: RuntimeError: NCCL timeout) — held for a post-mortem: attach to see the exception',
    );
    assert.deepEqual(error.args.slice(1), ['Attach Failed Ranks', 'Show Output']);
    assert.deepEqual(mock.messages('showWarningMessage'), ['Remote Debug (local-1): 2 warnings: rank 1: slow (and 1 more in the output)']);
    await until('the action', () => mock.executed.some((e) => e.command === 'remoteDebug.attachStuckRanks'));
    assert.deepEqual(mock.executed.find((e) => e.command === 'remoteDebug.attachStuckRanks')?.args, [{ kind: 'job', job: 'local-1' }]);
    await manager.stopAll();
  });

  test("a held failure the listing's notification said: its session starts first, its failure is not said again", async () => {
    const hold = (rank: number, heldFor: number | null) => ({
      rank,
      node: 'algo-1',
      seconds_left: 200,
      error: 'ValueError: bad batch 40',
      root_cause: heldFor === null,
      held_for: heldFor,
    });
    const job = jobJson({ nproc_per_node: 4, held_ranks: [hold(3, null), hold(0, 3), hold(1, 3), hold(2, 3)] });
    const lines = [
      ...attachLines('local-1', [0, 1, 2, 3]),
      event({ event: 'rank-failed', rank: 3, node: 'algo-1', pid: 1, error: 'ValueError: bad batch 40', held: true, root_cause: true }),
    ];
    const told = (heldFailureTold: (job: string, rank: number) => boolean) =>
      setup({ lines, hold: true }, [], {}, { jobs: [job], attach: { heldFailureTold } });
    const { manager, folder, started } = told((j, rank) => j === 'local-1' && rank === 3);
    await manager.attach({ job: 'local-1', ranks: undefined, folder });
    // the Call Stack lists the sessions as they start: the rank to look at first
    assert.deepEqual(started().map((c) => c.remoteDebug.rank), [3, 0, 1, 2]);
    await new Promise((r) => setTimeout(r, 100)); // past the notices' gathering
    assert.deepEqual(mock.messages('showErrorMessage'), [], 'said by the notification whose Attach started this');
    await manager.stopAll();

    // not said before (the job was attached when it failed): the attach says it
    const again = told(() => false);
    await again.manager.attach({ job: 'local-1', ranks: undefined, folder: again.folder });
    await until('the notice', () => mock.messages('showErrorMessage').length === 1);
    assert.match(mock.messages('showErrorMessage')[0], /^Remote Debug \(local-1\): rank 3 on algo-1 failed: ValueError: bad batch 40 — held/);
    await again.manager.stopAll();
  });

  test('attached jobs are remembered for a window reload, and attached again from the memory', async () => {
    const memory = new AttachMemory(memento());
    const first = setup({ lines: attachLines(), hold: true }, [], {}, { attach: { memory } });
    await first.manager.attach({ job: 'local-1', ranks: [0], folder: first.folder, localRoot: `${first.ws}/training` });
    assert.deepEqual(memory.list(), [{ job: 'local-1', ranks: [0], folder: first.folder.uri.toString(), localRoot: `${first.ws}/training` }]);
    await first.manager.stopAll(); // the window reloads
    assert.equal(memory.list().length, 1, 'kept for the next window');
    first.manager.dispose();

    // the next window: the same folder, a new manager
    const model = new JobsModel();
    model.setJobs([jobJson()]);
    const { cli, invocations } = fakeCli({ attach: { lines: attachLines('local-1', [0]), hold: true } });
    const manager = new AttachManager(cli, model, { appendLine: () => undefined }, () => settings, () => [], { memory, noticeDelayMs: 30 });
    assert.equal(await manager.reattach('local-1'), true);
    assert.deepEqual(invocations()[0].args.slice(5, 7), ['--ranks', '0']);
    const configs = mock.calls.filter((c) => c.fn === 'startDebugging' && c.args[1].remoteDebug).map((c) => c.args[1]);
    assert.deepEqual(configs.at(-1).pathMappings, [{ localRoot: `${first.ws}/training`, remoteRoot: '/jobs/local-1/nodes/algo-1/code' }]);
    assert.equal(await manager.reattach('other-job'), false);
    await manager.detach('local-1');
    assert.deepEqual(memory.list(), [], 'a detach forgets it');
    manager.dispose();
  });

  test('a job that ends is forgotten', async () => {
    const memory = new AttachMemory(memento());
    const lines = [...attachLines(), { line: JSON.stringify({ event: 'job-ended', status: 'Completed', exit_code: 0, failure_reason: null }), after: 100 }];
    const { manager, folder } = setup({ lines, exit: 0 }, [], {}, { attach: { memory } });
    await manager.attach({ job: 'local-1', ranks: undefined, folder });
    await until('the process to exit', () => !manager.isAttached('local-1'));
    assert.deepEqual(memory.list(), []);
    assert.equal(jobSessions().length, 1, 'the mock keeps sessions until ended');
    assert.ok(mock.calls.some((c) => c.fn === 'stopDebugging' && parentTag(c.args[0].configuration)), "the job's session is stopped");
  });
});
