// Adopt a Running Process… / Adopt Job…: parsing `remote-debug adopt --json`, the quick pick, refusals, and the
// Attach All Ranks that follows (the view's own, through the stand-in AttachManager of commandsHarness).

import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { beforeEach, describe, test } from 'node:test';

import { adoptedMessage, adoptPickItems, AdoptCandidate, parseAdoptCandidates, parseAdoptResult } from '../../src/adopt';
import { isAdoptableJob } from '../../src/events';
import { CliOutputError } from '../../src/events';
import { JobsModel } from '../../src/model';
import { jobContextValue } from '../../src/tree';
import { commandsHarness, jobJson } from './helpers';
import { mock } from './vscode-mock';

const manifest = JSON.parse(fs.readFileSync(path.resolve(__dirname, '../../../package.json'), 'utf8'));
const nls = JSON.parse(fs.readFileSync(path.resolve(__dirname, '../../../package.nls.json'), 'utf8'));

const torchrun = {
  pid: 1234,
  command: 'torchrun --nproc-per-node 2 train.py',
  cwd: '/home/me/project',
  kind: 'launcher',
  ranks: 2,
  python: '3.12',
  adoptable: true,
  reason: null,
  job: null,
};
const tooOld = { ...torchrun, pid: 99, command: 'python2 old.py', cwd: '/srv/old', kind: 'process', ranks: 1, python: '3.8', adoptable: false, reason: 'Python 3.8 is too old (3.10-3.13)' };
const adoptedBefore = { ...torchrun, pid: 555, command: 'python loop.py', kind: 'process', ranks: 1, job: 'adopted-loop' };

const result = (overrides: object = {}) =>
  JSON.stringify({
    job: 'adopted-1234',
    already: false,
    nodes: ['algo-1'],
    ranks: [
      { rank: 0, pid: 1240, node: 'algo-1', state: 'idle', note: null },
      { rank: 1, pid: 1241, node: 'algo-1', state: 'idle', note: null },
    ],
    ...overrides,
  });

const byPid = (pid: number) => (items: Array<{ candidate: AdoptCandidate }>) => items.find((i) => i.candidate.pid === pid);

describe('adopt: parsing the CLI', () => {
  test('the candidate list: every field, tolerant of what a newer CLI adds or leaves out', () => {
    const list = parseAdoptCandidates(JSON.stringify([torchrun, { pid: 7, adoptable: false, extra: 1 }]));
    assert.deepEqual(list[0], torchrun);
    assert.deepEqual(list[1], {
      pid: 7, command: '', cwd: '', kind: 'process', ranks: 1, python: null, adoptable: false, reason: 'the CLI gave no reason', job: null,
    });
    // stray lines before the document (a warning on stdout) are skipped, as for every --json command
    assert.equal(parseAdoptCandidates(`some note\n${JSON.stringify([torchrun])}\n`)[0].pid, 1234);
    assert.deepEqual(parseAdoptCandidates('[]'), []);
  });

  test('the candidate list: bad JSON or the wrong shape is a one-line error, never a crash', () => {
    const cases: Array<[string, RegExp]> = [
      ['', /adopt --list --json` printed no JSON: the remote-debug CLI printed nothing/],
      ['Traceback (most recent call last):\n  File "x"', /printed no JSON: .*Traceback/],
      ['{"pid": 1}', /did not print a list of processes/],
      ['[{"command": "python x.py"}]', /an entry without a process id \(entry 1\)/],
      ['[{"pid": "12"}]', /an entry without a process id/],
      ['[null]', /an entry without a process id/],
    ];
    for (const [stdout, message] of cases) {
      assert.throws(() => parseAdoptCandidates(stdout), (err: Error) => err instanceof CliOutputError && message.test(err.message) && !err.message.includes('\n'), stdout);
    }
  });

  test('the adopted job: every field; ranks in order', () => {
    const r = parseAdoptResult(result({ ranks: [{ rank: 1, pid: 11, node: 'algo-1', state: 'pending', note: 'in a syscall' }, { rank: 0, pid: 10, node: 'algo-1', state: 'idle', note: null }] }));
    assert.deepEqual(r, {
      job: 'adopted-1234',
      already: false,
      nodes: ['algo-1'],
      ranks: [
        { rank: 0, pid: 10, node: 'algo-1', state: 'idle', note: null },
        { rank: 1, pid: 11, node: 'algo-1', state: 'pending', note: 'in a syscall' },
      ],
    });
    assert.equal(parseAdoptResult(result({ already: true })).already, true);
  });

  test('the adopted job: bad JSON or the wrong shape is a one-line error', () => {
    const cases: Array<[string, RegExp]> = [
      ['not json', /adopt --json` printed no JSON/],
      ['[1, 2]', /did not print the adopted job/],
      ['{"already": false, "ranks": []}', /printed no job name/],
      ['{"job": "j"}', /printed no ranks for job j/],
      ['{"job": "j", "ranks": [{"pid": 3}]}', /a rank of job j without its number/],
    ];
    for (const [stdout, message] of cases) {
      assert.throws(() => parseAdoptResult(stdout), (err: Error) => err instanceof CliOutputError && message.test(err.message), stdout);
    }
  });
});

describe('adopt: what the user sees', () => {
  test('the quick pick: adoptable first, then the ones already a job, then those that cannot be adopted (with why)', () => {
    const items = adoptPickItems(parseAdoptCandidates(JSON.stringify([tooOld, adoptedBefore, torchrun])));
    assert.deepEqual(
      items.map((i) => [i.label, i.description, i.detail]),
      [
        ['pid 1234 · torchrun --nproc-per-node 2 train.py', '2 ranks · Python 3.12', '/home/me/project'],
        ['$(debug-alt) pid 555 · python loop.py', '1 rank · Python 3.12 · already job adopted-loop', '/home/me/project'],
        ['$(circle-slash) pid 99 · python2 old.py', 'cannot adopt: Python 3.8 is too old (3.10-3.13)', '/srv/old'],
      ],
    );
  });

  test('the message: the job and its ranks, and the ranks blocked in native code', () => {
    const two = parseAdoptResult(result());
    assert.equal(adoptedMessage(two, { pid: 1234 }), 'Remote Debug: adopted pid 1234 as job adopted-1234 (2 ranks).');
    const onePending = parseAdoptResult(result({ ranks: [{ rank: 0, pid: 1, node: 'algo-1', state: 'pending', note: null }] }));
    assert.equal(
      adoptedMessage(onePending, { pid: 1 }),
      'Remote Debug: adopted pid 1 as job adopted-1234 (1 rank). 1 rank (rank 0) is blocked in native code; it gets the debugger when it returns to Python.',
    );
    const pending = parseAdoptResult(
      result({ ranks: [0, 1, 2, 3].map((rank) => ({ rank, pid: 10 + rank, node: 'algo-1', state: rank === 0 ? 'idle' : 'pending', note: null })) }),
    );
    assert.match(adoptedMessage(pending, { pid: 10 }), /\(4 ranks\)\. 3 ranks \(1-3\) are blocked in native code; they get the debugger when they return to Python\.$/);
    assert.equal(adoptedMessage(parseAdoptResult(result({ already: true })), { job: 'sm' }), 'Remote Debug: job sm was already adopted (2 ranks).');
  });

  test('Adopt Job… is on the rows of running SageMaker jobs launched without remote debugging, and nowhere else', () => {
    const sagemaker = { arn: 'arn:aws:sagemaker:us-west-2:1:training-job/sm', region: 'us-west-2', transport: 'ssm' as const, remote_debug_enabled: false, instance_type: null };
    const model = new JobsModel();
    const cases: Array<[Parameters<typeof jobJson>[0], boolean]> = [
      [{ name: 'sm', backend: 'sagemaker', debuggable: false, sagemaker }, true],
      [{ name: 'sm-enabled', backend: 'sagemaker', debuggable: true, sagemaker: { ...sagemaker, remote_debug_enabled: true } }, false],
      [{ name: 'sm-done', backend: 'sagemaker', debuggable: false, sagemaker, status: 'Completed' }, false],
      [{ name: 'local-plain', debuggable: false }, false],
    ];
    const menu = (manifest.contributes.menus['view/item/context'] as Array<{ command: string; when: string }>).find((m) => m.command === 'remoteDebug.adoptJob');
    assert.ok(menu, 'a context-menu item');
    const re = new RegExp(/viewItem =~ \/(.+)\//.exec(menu.when)![1]);
    for (const [overrides, adoptable] of cases) {
      const info = jobJson(overrides);
      model.upsertJob(info);
      assert.equal(isAdoptableJob(info), adoptable, info.name);
      assert.equal(re.test(jobContextValue(model.get(info.name)!)), adoptable, `${info.name}: ${jobContextValue(model.get(info.name)!)}`);
    }
  });

  test('package.json: in the palette and the Jobs view\'s "..." menu; Adopt Job… only on job rows', () => {
    const title = (id: string) => nls[/^%(.+)%$/.exec(manifest.contributes.commands.find((c: { command: string }) => c.command === id).title)![1]];
    assert.equal(title('remoteDebug.adopt'), 'Adopt a Running Process…');
    assert.equal(title('remoteDebug.adoptJob'), 'Adopt Job…');
    const viewTitle = (manifest.contributes.menus['view/title'] as Array<{ command: string; when: string; group: string }>).find((m) => m.command === 'remoteDebug.adopt');
    assert.ok(viewTitle && viewTitle.when === 'view == remoteDebug.jobs' && !viewTitle.group.startsWith('navigation'), 'in the "..." menu');
    const palette = manifest.contributes.menus.commandPalette as Array<{ command: string; when: string }>;
    assert.ok(!palette.some((m) => m.command === 'remoteDebug.adopt'), 'in the palette');
    assert.ok(palette.some((m) => m.command === 'remoteDebug.adoptJob' && m.when === 'false'));
  });
});

describe('adopt: the commands', () => {
  beforeEach(() => mock.reset());

  const adoptedJob = () => [jobJson({ name: 'adopted-1234', source_dir: '/home/me/project' })];

  test('Adopt a Running Process…: pick, adopt with progress, refresh, then Attach All Ranks attaches the adopted job', async () => {
    const h = commandsHarness(
      { 'adopt --list': { stdout: JSON.stringify([tooOld, torchrun]) }, 'adopt --pid': { stdout: result() } },
      adoptedJob(),
    );
    mock.quickPicks.push(byPid(1234));
    mock.messageAnswers.push('Attach All Ranks');
    await h.run('remoteDebug.adopt');
    const pick = mock.calls.find((c) => c.fn === 'showQuickPick')!;
    assert.equal(pick.args[0].length, 2);
    const args = h.invocations().map((i) => i.args);
    assert.deepEqual(args[0], ['adopt', '--list', '--json']);
    assert.deepEqual(args[1], ['adopt', '--pid', '1234', '--json']);
    assert.deepEqual(args[2], ['jobs', '--json'], 'the view is refreshed after adopting');
    assert.ok(mock.calls.some((c) => c.fn === 'withProgress' && c.args[0].title === 'Remote Debug: adopting pid 1234'));
    assert.deepEqual(mock.messages('showInformationMessage'), ['Remote Debug: adopted pid 1234 as job adopted-1234 (2 ranks).']);
    assert.deepEqual(mock.calls.find((c) => c.fn === 'showInformationMessage')!.args.slice(1), ['Attach All Ranks']);
    assert.deepEqual(h.requests.map((r) => [r.job, r.ranks, r.folder.uri.fsPath]), [['adopted-1234', undefined, h.ws]]);
    assert.ok(h.model.get('adopted-1234'), 'the adopted job is in the view');
    assert.deepEqual(mock.messages('showErrorMessage'), []);
    assert.ok(h.log.some((l) => /adopted pid 1234 as job adopted-1234: 2 rank\(s\) on algo-1/.test(l)), h.log.join('\n'));
  });

  test('pending ranks are said; dismissing the notification attaches nothing', async () => {
    const pending = result({ ranks: [{ rank: 0, pid: 1240, node: 'algo-1', state: 'pending', note: 'blocked in a C call' }] });
    const h = commandsHarness({ 'adopt --list': { stdout: JSON.stringify([torchrun]) }, 'adopt --pid': { stdout: pending } }, adoptedJob());
    mock.quickPicks.push(byPid(1234));
    await h.run('remoteDebug.adopt');
    assert.match(mock.messages('showInformationMessage')[0], /\(1 rank\)\. 1 rank \(rank 0\) is blocked in native code; it gets the debugger when it returns to Python\.$/);
    assert.ok(h.log.some((l) => l.includes('rank 0 (pid 1240 on algo-1): pending: blocked in a C call')));
    assert.equal(h.requests.length, 0);
  });

  test("a refusal: the CLI's one line in an error notification, nothing attached", async () => {
    const h = commandsHarness(
      {
        'adopt --list': { stdout: JSON.stringify([torchrun]) },
        'adopt --pid': { stderr: 'remote-debug: error: cannot attach to pid 1240: ptrace is not permitted (kernel.yama.ptrace_scope is 1); run as root or set it to 0\n', exit: 2 },
      },
      adoptedJob(),
    );
    mock.quickPicks.push(byPid(1234));
    await h.run('remoteDebug.adopt');
    assert.deepEqual(mock.messages('showErrorMessage'), [
      'Remote Debug: cannot attach to pid 1240: ptrace is not permitted (kernel.yama.ptrace_scope is 1); run as root or set it to 0',
    ]);
    assert.deepEqual(mock.messages('showInformationMessage'), []);
    assert.equal(h.requests.length, 0);
  });

  test('a process that cannot be adopted is refused with its reason, without asking the CLI', async () => {
    const h = commandsHarness({ 'adopt --list': { stdout: JSON.stringify([tooOld, torchrun]) }, 'adopt --pid': { stdout: result() } });
    mock.quickPicks.push(byPid(99));
    await h.run('remoteDebug.adopt');
    assert.deepEqual(mock.messages('showErrorMessage'), ['Remote Debug: cannot adopt pid 99: Python 3.8 is too old (3.10-3.13)']);
    assert.ok(!h.invocations().some((i) => i.args.includes('--pid')));
    assert.equal(h.requests.length, 0);
  });

  test('a process that already is a job: not adopted again; Attach All Ranks attaches that job', async () => {
    const h = commandsHarness({ 'adopt --list': { stdout: JSON.stringify([adoptedBefore]) } }, [jobJson({ name: 'adopted-loop' })]);
    mock.quickPicks.push(byPid(555));
    mock.messageAnswers.push('Attach All Ranks');
    await h.run('remoteDebug.adopt');
    assert.ok(!h.invocations().some((i) => i.args.includes('--pid')));
    assert.deepEqual(mock.messages('showInformationMessage'), ['Remote Debug: pid 555 already is job adopted-loop.']);
    assert.deepEqual(h.requests.map((r) => r.job), ['adopted-loop']);
  });

  test('unusable output of the list: a clear error, no quick pick', async () => {
    const h = commandsHarness({ 'adopt --list': { stdout: '{"processes": []}\n' } });
    await h.run('remoteDebug.adopt');
    assert.deepEqual(mock.messages('showErrorMessage'), ['Remote Debug: `remote-debug adopt --list --json` did not print a list of processes']);
    assert.equal(mock.calls.filter((c) => c.fn === 'showQuickPick').length, 0);
  });

  test('unusable output of adopt: a clear error, nothing attached', async () => {
    const h = commandsHarness({ 'adopt --list': { stdout: JSON.stringify([torchrun]) }, 'adopt --pid': { stdout: '{"job": "x"}' } });
    mock.quickPicks.push(byPid(1234));
    await h.run('remoteDebug.adopt');
    assert.deepEqual(mock.messages('showErrorMessage'), ['Remote Debug: `remote-debug adopt --json` printed no ranks for job x']);
    assert.equal(h.requests.length, 0);
  });

  test('nothing to adopt, or the pick dismissed: says so / does nothing', async () => {
    const h = commandsHarness({ 'adopt --list': { stdout: '[]' } });
    await h.run('remoteDebug.adopt');
    assert.match(mock.messages('showInformationMessage')[0], /^Remote Debug: no training process of yours runs on this machine/);

    mock.reset();
    const d = commandsHarness({ 'adopt --list': { stdout: JSON.stringify([torchrun]) } });
    mock.quickPicks.push(undefined);
    await d.run('remoteDebug.adopt');
    assert.deepEqual(d.invocations().map((i) => i.args[1]), ['--list']);
    assert.deepEqual(mock.messages(), []);
  });

  test('a CLI without the adopt command: offers to upgrade it instead of an error', async () => {
    const h = commandsHarness({});
    await h.run('remoteDebug.adopt');
    assert.deepEqual(mock.messages('showErrorMessage'), []);
    assert.match(mock.messages('showInformationMessage')[0], /this remote-debug CLI cannot adopt a running process \(it has no "adopt" command\)/);
  });

  test('Adopt Job… on a SageMaker job row: `adopt JOB --json`, then Attach All Ranks for it', async () => {
    const sm = jobJson({ name: 'sm', backend: 'sagemaker', source_dir: null, debuggable: false });
    const h = commandsHarness({ 'adopt sm': { stdout: result({ job: 'sm' }) } }, [sm]);
    mock.messageAnswers.push('Attach All Ranks');
    mock.quickPicks.push((items) => items[0]); // the view's Attach All Ranks asks where a SageMaker job's code is
    await h.run('remoteDebug.adoptJob', { kind: 'job', job: 'sm' });
    assert.deepEqual(h.invocations()[0].args, ['adopt', 'sm', '--json']);
    assert.ok(mock.calls.some((c) => c.fn === 'withProgress' && c.args[0].title === 'Remote Debug: adopting sm'));
    assert.deepEqual(mock.messages('showInformationMessage'), ['Remote Debug: adopted job sm (2 ranks).']);
    // the view's own Attach All Ranks: a SageMaker job's local folder is asked for, then every rank is attached
    assert.ok(mock.calls.some((c) => c.fn === 'showQuickPick' && /Which local folder holds the code of sm/.test(c.args[1].placeHolder)));
    assert.deepEqual(h.requests.map((r) => [r.job, r.ranks, r.localRoot]), [['sm', undefined, h.ws]]);
  });

  test("Adopt Job… refused (e.g. not implemented yet for SageMaker): the CLI's line", async () => {
    const sm = jobJson({ name: 'sm', backend: 'sagemaker', debuggable: false });
    const h = commandsHarness({ 'adopt sm': { stderr: 'remote-debug: error: adopting a SageMaker job is not supported yet\n', exit: 2 } }, [sm]);
    await h.run('remoteDebug.adoptJob', { kind: 'job', job: 'sm' });
    assert.deepEqual(mock.messages('showErrorMessage'), ['Remote Debug: adopting a SageMaker job is not supported yet']);
    assert.equal(h.requests.length, 0);
  });
});
