// Many ranks, one debugger in VS Code: Continue / Pause / Step Over / Detach All Ranks (commands, the job's own
// session, keybindings and menus), the all-stop events, the job's end while attached, a bad debugType.

import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { beforeEach, describe, test } from 'node:test';

import * as vscode from 'vscode';

import { AttachManager, AttachOptions, AttachSettings } from '../../src/attach';
import { RankAdapterFactory } from '../../src/debugAdapter';
import { sessionName } from '../../src/debugConfig';
import { describeEvent, GroupReply, parseEventLine } from '../../src/events';
import { describeGroupReply, GroupCommands, groupArgs, parseGroupReply } from '../../src/groupActions';
import { ALL_RANKS_THREAD, JobParentAdapter, parentAnswer, parentTag } from '../../src/jobSession';
import { JobsModel } from '../../src/model';
import { JobsTreeProvider } from '../../src/tree';
import { attachLines, fakeCli, jobJson, ScenarioStep, tempDir, until } from './helpers';
import { mock } from './vscode-mock';

const root = path.resolve(__dirname, '../../..');
const manifest = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8'));
const settings: AttachSettings = { debugType: 'auto', pathMappings: [], justMyCode: false, readyTimeoutSeconds: 600 };
const managers: AttachManager[] = [];

function reply(action: string, ranks = [0, 1], extra: Partial<GroupReply> = {}): ScenarioStep {
  const status = ranks.map((rank) => ({ rank, phase: action === 'continue' ? 'running' : 'stopped', reason: 'pause', by_group: true }));
  return { stdout: JSON.stringify({ job: 'local-1', action, attaches: 1, ranks, status, ...extra }) };
}

const event = (o: object, after?: number) => ({ line: JSON.stringify({ v: 1, ...o }), after });

function setup(scenario: Record<string, ScenarioStep>, options: { attach?: AttachOptions; settings?: AttachSettings; installed?: string[] } = {}) {
  managers.splice(0).forEach((m) => m.dispose());
  mock.reset();
  const ws = tempDir('rd-ws');
  const folder = mock.folder(ws) as unknown as vscode.WorkspaceFolder;
  const { cli, invocations } = fakeCli({ attach: { lines: attachLines(), hold: true }, ...scenario });
  const model = new JobsModel();
  model.setJobs([jobJson()]);
  const log: string[] = [];
  const manager = new AttachManager(cli, model, { appendLine: (l) => log.push(l) }, () => options.settings ?? settings, () => options.installed ?? [], {
    noticeDelayMs: 30,
    lostNoticeDelayMs: 0,
    ...options.attach,
  });
  managers.push(manager);
  mock.startDebugging = async (_folder, config, opts) => {
    mock.startSession(config, opts);
    return true;
  };
  const commands = new GroupCommands(manager, { appendLine: (l) => log.push(l) });
  commands.register();
  const run = (name: string, ...args: unknown[]) => mock.commands.get(name)!(...args);
  const ranksRuns = () => invocations().filter((i) => i.args[0] === 'ranks').map((i) => i.args);
  return { ws, folder, model, manager, invocations, ranksRuns, log, run, commands };
}

const rankSessions = () => mock.sessions.filter((s) => s.configuration.remoteDebug);
const jobSession = () => mock.sessions.find((s) => parentTag(s.configuration));

/** The job session's inline adapter, as VS Code gets it from the factory, and what it sends. */
function parentAdapter(manager: AttachManager) {
  const descriptor = new RankAdapterFactory(manager.parentGroup()).createDebugAdapterDescriptor(jobSession()) as unknown as {
    implementation: JobParentAdapter;
  };
  const adapter = descriptor.implementation;
  const sent: Array<Record<string, any>> = [];
  adapter.onDidSendMessage((m) => sent.push(m as Record<string, any>));
  let seq = 0;
  const request = (command: string, args: object = {}) => {
    const s = ++seq;
    adapter.handleMessage({ type: 'request', seq: s, command, arguments: args } as vscode.DebugProtocolMessage);
    return until(`the answer to ${command}`, () => sent.find((m) => m.type === 'response' && m.request_seq === s));
  };
  const events = (name: string) => sent.filter((m) => m.type === 'event' && m.event === name);
  return { adapter, sent, request, events };
}

/** What pydevd says through a rank's session: stopped / continued. */
function rankSays(rank: number, eventName: 'stopped' | 'continued', body: object = {}): void {
  const session = rankSessions().find((s) => s.configuration.remoteDebug.rank === rank);
  mock.tracker(session).onDidSendMessage({ type: 'event', event: eventName, body });
}

describe('remote-debug ranks ACTION JOB --json', () => {
  test('its arguments, its document read tolerantly, and its line', () => {
    assert.deepEqual(groupArgs('step', 'j'), ['ranks', 'step', 'j', '--json']);
    const r = parseGroupReply({
      job: 'j',
      action: 'step',
      attaches: 1,
      ranks: [0, 1, 2, 3],
      status: [{ rank: 2, phase: 'stepping', reason: '', by_group: true }, { rank: 3, phase: 'warping' }, { nope: 1 }],
      future: true,
    });
    assert.deepEqual(r.status.map((s) => [s.rank, s.phase]), [[2, 'stepping'], [3, 'running']]);
    assert.equal(describeGroupReply(r), 'Step Over All: ranks 0-3; still on their way: 2');
    assert.equal(describeGroupReply({ ...r, ranks: [], status: [] }), 'Step Over All: no rank (none was in a state it applies to)');
    assert.throws(() => parseGroupReply([]), /did not print what it reached/);
  });

  test('the new attach events have their lines (an older CLI without `text`)', () => {
    const line = (o: object) => describeEvent(parseEventLine(JSON.stringify({ v: 1, ...o }))!);
    assert.equal(line({ event: 'all-stop', rank: 0, reason: 'breakpoint', pausing: [1, 2, 3] }), 'rank 0 stopped (breakpoint): pausing 1, 2, 3 (all-stop)');
    assert.equal(line({ event: 'all-paused', rank: null, ranks: [0, 1], seconds: 0.5 }), 'all 2 ranks paused, 0.50 s after Pause All');
    assert.match(line({ event: 'rank-waiting', rank: 2, action: 'step', seconds: 1.5 }), /^rank 2 has not finished its step after 1\.5 s: it is in native code/);
    assert.equal(line({ event: 'group-action', action: 'continue', ranks: [0, 1], origin: 'rank 0' }), 'Continue All (rank 0): 0, 1');
    assert.equal(line({ event: 'all-stop', rank: 0, reason: 'pause', pausing: [], text: 'the CLI says' }), 'the CLI says');
  });
});

describe('Continue / Pause / Step Over / Detach All Ranks', () => {
  beforeEach(() => mock.reset());

  test('each runs `ranks ACTION JOB --json` for the focused debug session, the view item or the Call Stack item', async () => {
    const { folder, manager, ranksRuns, run, log } = setup({
      'ranks continue': reply('continue'),
      'ranks pause': reply('pause'),
      'ranks step': reply('step'),
    });
    await manager.attach({ job: 'local-1', ranks: undefined, folder });
    mock.focusSession(rankSessions()[1]);
    await run('remoteDebug.continueAllRanks');
    await run('remoteDebug.pauseAllRanks', { kind: 'job', job: 'local-1' });
    await run('remoteDebug.stepOverAllRanks', rankSessions()[0].id, { sessionId: rankSessions()[0].id });
    assert.deepEqual(ranksRuns(), [groupArgs('continue', 'local-1'), groupArgs('pause', 'local-1'), groupArgs('step', 'local-1')]);
    assert.ok(log.some((l) => l.includes('[local-1] Continue All: ranks 0-1')), log.join('\n'));
    assert.deepEqual(mock.messages(), [], 'no message when it worked');
    // the keybindings' and the debug toolbar's context: our session is focused
    assert.deepEqual(mock.executed.filter((e) => e.command === 'setContext' && e.args[0] === 'remoteDebug.debugSessionFocused').map((e) => e.args[1]), [
      false,
      true,
    ]);
    await manager.stopAll();
  });

  test('an error is one message: the CLI refusing, an older CLI, no job attached', async () => {
    const { folder, manager, run, ranksRuns } = setup({
      'ranks pause': { stderr: 'remote-debug: error: no attach of job local-1 runs (remote-debug attach local-1 first)\n', exit: 2 },
    });
    await run('remoteDebug.continueAllRanks');
    assert.deepEqual(mock.messages('showErrorMessage'), ['Remote Debug: Continue All: no job is attached (Attach All Ranks first)']);
    await manager.attach({ job: 'local-1', ranks: undefined, folder });
    await run('remoteDebug.pauseAllRanks');
    await run('remoteDebug.stepOverAllRanks'); // the fake CLI has no "ranks step": "No such command"
    assert.equal(ranksRuns().length, 2);
    assert.deepEqual(mock.messages('showErrorMessage').slice(1), [
      'Remote Debug: no attach of job local-1 runs (remote-debug attach local-1 first)',
      'Remote Debug: Step Over All needs a newer remote-debug CLI (this one has no "ranks" command): pip install -U remote-debug-training',
    ]);
    await manager.stopAll();
  });

  test('several jobs attached and nothing focused: a pick of them', async () => {
    const { manager, commands } = setup({});
    const host = manager as unknown as { activeJobs: () => string[] };
    host.activeJobs = () => ['a', 'b'];
    mock.quickPicks.push((items: string[]) => items[1]);
    assert.equal(await commands.jobFor([], 'pause'), 'b');
    assert.match(mock.calls.find((c) => c.fn === 'showQuickPick')!.args[1].placeHolder, /Pause All of which job/);
  });

  test('Detach All Ranks: every rank let go at once by the attach, then the job detached (sessions, attach)', async () => {
    const { folder, manager, ranksRuns, run, model, invocations } = setup({ 'ranks detach': reply('detach') });
    await manager.attach({ job: 'local-1', ranks: undefined, folder });
    await run('remoteDebug.detachAllRanks', { kind: 'job', job: 'local-1' });
    assert.deepEqual(ranksRuns(), [groupArgs('detach', 'local-1')]);
    assert.equal(manager.isAttached('local-1'), false);
    assert.equal(model.get('local-1')?.attach, 'ended');
    assert.equal(invocations().filter((i) => i.args[0] === 'attach').length, 1);
    // the rank sessions end as asked: none is "lost", nothing offers Re-attach
    rankSessions().forEach((s) => mock.endSession(s));
    assert.deepEqual(manager.lostRanks('local-1'), []);
  });

  test('Detach All Ranks with an older CLI: each rank detached as before, said in the log only', async () => {
    const { folder, manager, run, log } = setup({});
    await manager.attach({ job: 'local-1', ranks: undefined, folder });
    await run('remoteDebug.detachAllRanks');
    assert.equal(manager.isAttached('local-1'), false);
    assert.equal(mock.calls.filter((c) => c.fn === 'stopDebugging').length, 3, 'both ranks and the job session');
    assert.ok(log.some((l) => /Detach All: .*stopping each rank's session instead/.test(l)), log.join('\n'));
    assert.deepEqual(mock.messages('showErrorMessage'), []);
  });

  test('a click on an attached rank in the Jobs view opens the session picker on its session', async () => {
    const { folder, manager, model } = setup({});
    await manager.attach({ job: 'local-1', ranks: undefined, folder });
    const item = new JobsTreeProvider(model).getTreeItem({ kind: 'rank', job: 'local-1', node: 'algo-1', rank: 1 });
    assert.deepEqual(item.command?.arguments, ['local-1', 1]);
    await mock.commands.get(item.command!.command)!(...item.command!.arguments!);
    assert.deepEqual(mock.executed.find((e) => e.command === 'workbench.action.quickOpen')?.args, ['debug consoles rank 1 · algo-1']);
    await manager.stopAll();
  });
});

describe("the job's own session acts on every rank", () => {
  beforeEach(() => mock.reset());

  test('it reports one "All ranks" thread: stopped while a rank is, its Pause / Continue / Step Over act on all', async () => {
    const { folder, manager, ranksRuns } = setup({
      'ranks pause': reply('pause'),
      'ranks continue': reply('continue'),
      'ranks step': reply('step'),
    });
    await manager.attach({ job: 'local-1', ranks: undefined, folder });
    const { request, events, sent } = parentAdapter(manager);
    await request('initialize');
    await request('attach');
    await request('configurationDone');
    const threads = await request('threads');
    assert.deepEqual(threads.body.threads, [{ id: ALL_RANKS_THREAD, name: 'All ranks' }]);
    assert.equal(events('stopped').length, 0, 'every rank runs');

    // its Pause (the toolbar's, enabled while the thread runs) is Pause All
    const pause = await request('pause', { threadId: ALL_RANKS_THREAD });
    assert.equal(pause.success, true);
    assert.deepEqual(ranksRuns(), [groupArgs('pause', 'local-1')]);
    rankSays(0, 'stopped', { reason: 'breakpoint' });
    assert.deepEqual(events('stopped').map((e) => e.body), [
      { reason: 'pause', description: 'ranks paused', threadId: ALL_RANKS_THREAD, allThreadsStopped: true, preserveFocusHint: true },
    ]);
    rankSays(1, 'stopped', { reason: 'pause', description: 'Paused by all-stop (rank 0 hit a breakpoint)' });
    assert.equal(events('stopped').length, 1, 'said once: the badge keeps the first stop');
    assert.equal((await request('stackTrace', { threadId: ALL_RANKS_THREAD })).body.totalFrames, 0);

    // its Continue is Continue All (VS Code marks the thread running on the answer)
    const cont = await request('continue', { threadId: ALL_RANKS_THREAD });
    assert.deepEqual(cont.body, { allThreadsContinued: true });
    assert.deepEqual(ranksRuns().at(-1), groupArgs('continue', 'local-1'));
    rankSays(0, 'continued');
    rankSays(1, 'continued');
    await new Promise((r) => setTimeout(r, 1100));
    assert.equal(events('stopped').length, 1, 'the ranks run: not stopped again');
    assert.equal(events('continued').length, 0, 'VS Code took the answer as running: no event needed');

    // Step Over steps every rank; Step Into is one rank's
    rankSays(0, 'stopped', { reason: 'pause' });
    await request('next', { threadId: ALL_RANKS_THREAD });
    assert.deepEqual(ranksRuns().at(-1), groupArgs('step', 'local-1'));
    const into = await request('stepIn', { threadId: ALL_RANKS_THREAD });
    assert.equal(into.success, false);
    assert.match(into.message, /Step Into and Step Out act on one rank/);
    assert.equal(sent.filter((m) => m.type === 'response' && !m.success).length, 1);
    await manager.stopAll();
  });

  test('a failed action says why once, and the thread shows the ranks as they are', async () => {
    const { folder, manager } = setup({ 'ranks continue': { stderr: 'remote-debug: error: no attach of job local-1 runs\n', exit: 2 } });
    await manager.attach({ job: 'local-1', ranks: undefined, folder });
    const { request, events } = parentAdapter(manager);
    await request('initialize');
    await request('configurationDone');
    rankSays(0, 'stopped', { reason: 'breakpoint' });
    assert.equal(events('stopped').length, 1);
    await request('continue', { threadId: ALL_RANKS_THREAD });
    await until('the error', () => mock.messages('showErrorMessage').length > 0);
    assert.deepEqual(mock.messages('showErrorMessage'), ['Remote Debug: no attach of job local-1 runs']);
    // VS Code took the answer as running; rank 0 still is stopped: said again once the moment has passed
    await until('stopped again', () => events('stopped').length === 2, 3000);
    await manager.stopAll();
  });

  test('its Stop is Detach All, then the job is detached (the attach only once the ranks were let go)', async () => {
    const { folder, manager, ranksRuns } = setup({ 'ranks detach': { ...reply('detach'), lines: [{ line: '', after: 300 }] } });
    await manager.attach({ job: 'local-1', ranks: undefined, folder });
    const { request } = parentAdapter(manager);
    await request('initialize');
    const answered = request('disconnect', { restart: false });
    mock.endSession(jobSession()); // VS Code may end the session before the (slow) answer
    assert.equal(manager.isAttached('local-1'), true, 'the attach waits for Detach All to reach the ranks');
    await answered;
    await until('detached', () => !manager.isAttached('local-1'));
    assert.deepEqual(ranksRuns(), [groupArgs('detach', 'local-1')]);
  });

  test('a job session we end ourselves (the attach ended) runs no Detach All', async () => {
    const { folder, manager, ranksRuns } = setup({ 'ranks detach': reply('detach') });
    await manager.attach({ job: 'local-1', ranks: undefined, folder });
    const { request } = parentAdapter(manager);
    await manager.detach('local-1');
    await request('disconnect');
    assert.deepEqual(ranksRuns(), []);
  });

  test('without a group (no attach behind it) it reports no thread, as before', () => {
    assert.deepEqual(parentAnswer('threads').body, { threads: [] });
    assert.deepEqual(parentAnswer('threads', true).body, { threads: [{ id: 1, name: 'All ranks' }] });
  });
});

describe('all-stop in the view, the status bar and the log', () => {
  beforeEach(() => mock.reset());

  test('the rank whose stop paused the others is marked; a rank still in native code has its own icon and words', async () => {
    const lines = [
      ...attachLines(),
      event({ event: 'all-stop', rank: 0, reason: 'breakpoint', pausing: [1], text: 'rank 0 stopped (breakpoint): pausing 1 (all-stop)' }, 200),
      event({ event: 'rank-waiting', rank: 1, action: 'pause', seconds: 1.5 }, 20),
      event({ event: 'all-paused', rank: 0, ranks: [0, 1], seconds: 2.1, text: 'all 2 ranks paused, 2.10 s after rank 0 stopped' }, 20),
    ];
    const { folder, manager, model, log } = setup({ attach: { lines, hold: true } });
    await manager.attach({ job: 'local-1', ranks: undefined, folder });
    rankSays(0, 'stopped', { reason: 'breakpoint' });
    await until('rank 1 waiting', () => model.rankEntry('local-1', 1)?.waitingIn);
    const tree = new JobsTreeProvider(model);
    const item = (rank: number) => tree.getTreeItem({ kind: 'rank', job: 'local-1', node: 'algo-1', rank });
    assert.equal((item(0).iconPath as vscode.ThemeIcon).id, 'debug-stackframe', 'rank 0 hit it');
    assert.equal((item(1).iconPath as vscode.ThemeIcon).id, 'clock');
    assert.equal(item(1).description, 'attached · in native code: pauses when it returns to Python');
    // the moment's news in the status bar, not a notification
    const status = mock.calls.filter((c) => c.fn === 'setStatusBarMessage').map((c) => c.args[0]);
    assert.equal(status[0], '$(debug-pause) local-1: rank 0 stopped (breakpoint): pausing 1 (all-stop)');
    assert.match(status[1], /^\$\(clock\) local-1: rank 1 has not paused after 1\.5 s/);
    assert.deepEqual(mock.calls.filter((c) => /^show\w+Message$/.test(c.fn)), [], 'no notification');
    await until('all-paused in the log', () => log.some((l) => l.includes('[local-1] all 2 ranks paused, 2.10 s after rank 0 stopped')));
    // it stops at last: its stop says why ("Paused by all-stop ..."), once, after "paused"
    rankSays(1, 'stopped', { reason: 'pause', description: 'Paused by all-stop (rank 0 hit a breakpoint)' });
    assert.equal(item(1).description, 'paused · by all-stop (rank 0 hit a breakpoint)');
    assert.equal((item(1).iconPath as vscode.ThemeIcon).id, 'debug-pause');
    assert.equal(item(0).description, 'paused · breakpoint');
    await manager.stopAll();
  });
});

describe("the job's end while attached", () => {
  beforeEach(() => mock.reset());

  test('a job that fails: its failure, once; not "attach failed"', async () => {
    const lines = [
      ...attachLines(),
      event({ event: 'rank-failed', rank: 1, node: 'algo-1', pid: 7, error: 'ValueError: bad batch', traceback: null, held: false, root_cause: true }, 100),
      event({ event: 'job-ended', status: 'Failed', exit_code: 1, failure_reason: 'rank 1: ValueError: bad batch' }, 50),
    ];
    const { folder, manager, model } = setup({ attach: { lines, exit: 1 } });
    await manager.attach({ job: 'local-1', ranks: undefined, folder });
    await until('the attach to end', () => !manager.isAttached('local-1'));
    const entry = model.get('local-1')!;
    assert.equal(entry.attach, 'ended');
    assert.equal(entry.attachError, undefined);
    const rows = new JobsTreeProvider(model).getChildren({ kind: 'job', job: 'local-1' });
    assert.ok(!rows.some((r) => r.kind === 'message' && r.label === 'Attach failed'), JSON.stringify(rows));
    assert.equal(model.rankEntry('local-1', 1)?.state, 'failed');
    await until('the messages', () => mock.messages('showErrorMessage').length === 2);
    assert.deepEqual(mock.messages('showErrorMessage'), [
      'Remote Debug (local-1): rank 1 on algo-1 failed: ValueError: bad batch',
      'Remote Debug: job local-1 failed (Failed, exit code 1: rank 1: ValueError: bad batch).',
    ]);
  });

  test('a job stopped from a terminal while attached: one notice, no "attached again once the tunnel is back"', async () => {
    const lines = [...attachLines(), event({ event: 'job-ended', status: 'Stopped', exit_code: 143, failure_reason: null }, 400)];
    const { folder, manager } = setup({ attach: { lines, exit: 1 } }, { attach: { lostNoticeDelayMs: 1500 } });
    await manager.attach({ job: 'local-1', ranks: undefined, folder });
    // the ranks die first: their sessions drop (the socket closed), then the attach says the job ended
    for (const s of rankSessions()) {
      mock.tracker(s).onError(new Error('connection closed'));
      mock.endSession(s);
    }
    await until('the attach to end', () => !manager.isAttached('local-1'));
    await new Promise((r) => setTimeout(r, 1700));
    assert.deepEqual(mock.messages(), ['Remote Debug: job local-1 ended (Stopped, exit code 143).']);
    assert.deepEqual(manager.lostRanks('local-1'), [], 'no Re-attach offered');
  });
});

describe('the Call Stack at 64 ranks; a bad debugType', () => {
  beforeEach(() => mock.reset());

  test("a rank's session is named short under the job's session, with the job when flat", () => {
    assert.equal(sessionName('big', 12, 'algo-2', true), 'rank 12 · algo-2');
    assert.equal(sessionName('big', 12, 'algo-2'), 'rank 12 · algo-2 · big');
  });

  test('debugType "debugpy" without the Python Debugger: one message with why, the ranks still debugged', async () => {
    const { folder, manager, log } = setup({}, { settings: { ...settings, debugType: 'debugpy' } });
    await manager.attach({ job: 'local-1', ranks: undefined, folder });
    const types = mock.calls.filter((c) => c.fn === 'startDebugging' && c.args[1].remoteDebug).map((c) => c.args[1].type);
    assert.deepEqual(types, ['remote-debug', 'remote-debug']);
    assert.equal(mock.messages().length, 1);
    assert.match(mock.messages('showWarningMessage')[0], /remoteDebug\.debugType is "debugpy", but no installed extension debugs that type .*ms-python\.debugpy/);
    assert.ok(log.some((l) => l.includes('remoteDebug.debugType')));
    await manager.stopAll();
  });
});

describe('package.json: the group actions', () => {
  const keys = manifest.contributes.keybindings as Array<{ command: string; key: string; mac?: string; when?: string }>;
  const commands = ['remoteDebug.continueAllRanks', 'remoteDebug.pauseAllRanks', 'remoteDebug.stepOverAllRanks', 'remoteDebug.detachAllRanks'];

  test('keybindings: the debug keys with ctrl+shift+alt, only while attached', () => {
    assert.deepEqual(
      commands.map((c) => keys.find((k) => k.command === c)).map((k) => [k?.key, k?.when]),
      [
        ['ctrl+shift+alt+f5', 'remoteDebug.attached'],
        ['ctrl+shift+alt+f6', 'remoteDebug.attached'],
        ['ctrl+shift+alt+f10', 'remoteDebug.attached'],
        ['ctrl+shift+alt+f7', 'remoteDebug.attached'],
      ],
    );
    // VS Code's own debug keys stay theirs (F5, shift+F5, ctrl+shift+F5, F6, F10, ctrl+F5, alt+F5 ...): none of ours
    assert.equal(new Set(keys.map((k) => k.key)).size, keys.length, 'no key twice');
  });

  test('in the debug toolbar (our session focused), the Call Stack menu and the Jobs view menu of an attached job', () => {
    const menus = manifest.contributes.menus;
    for (const c of commands) {
      assert.ok(menus['debug/toolBar'].some((m: { command: string; when: string }) => m.command === c && m.when === 'remoteDebug.debugSessionFocused'), c);
      assert.ok(menus['debug/callstack/context'].some((m: { command: string; when: string }) => m.command === c && /remoteDebug\.attached/.test(m.when)), c);
      assert.ok(menus['view/item/context'].some((m: { command: string; when: string }) => m.command === c && /-attached\//.test(m.when)), c);
      assert.ok(menus.commandPalette.some((m: { command: string; when: string }) => m.command === c && m.when === 'remoteDebug.attached'), c);
    }
    assert.ok(menus.commandPalette.some((m: { command: string; when: string }) => m.command === 'remoteDebug.focusRankSession' && m.when === 'false'));
  });
});
