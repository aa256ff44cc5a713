import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { beforeEach, describe, test } from 'node:test';

import {
  classIcon,
  classLabel,
  deriveClasses,
  localFileFor,
  parseStacksDocument,
  stackSummary,
  StacksNode,
  StacksView,
} from '../../src/stacksView';
import { commandsHarness, jobJson, tempDir, until } from './helpers';
import { mock } from './vscode-mock';

// `stacks JOB --json` of a 2 x 2 job: ranks 0-2 wait in all_reduce, rank 3 in wait_for_data() (the CLI's classes)
const FIXTURE = path.resolve(__dirname, '../../../test/unit/fixtures/stacks-hang.json');
const hang = () => JSON.parse(fs.readFileSync(FIXTURE, 'utf8'));

interface Row {
  label: string;
  description?: string;
  icon?: string;
  color?: string;
  context?: string;
  command?: { command: string; arguments?: unknown[] };
  collapsible: number;
  node: StacksNode;
}

function rows(view: StacksView, parent?: StacksNode): Row[] {
  return view.getChildren(parent).map((node) => {
    const item = view.getTreeItem(node);
    const icon = item.iconPath as { id: string; color?: { id: string } } | undefined;
    return {
      label: String(item.label),
      description: item.description as string | undefined,
      icon: icon?.id,
      color: icon?.color?.id,
      context: item.contextValue,
      command: item.command,
      collapsible: item.collapsibleState ?? 0,
      node,
    };
  });
}

describe('stacks --json: the classes', () => {
  test("the CLI's classes in its order (the odd one first), its Flight Recorder lines, its code dirs", () => {
    const doc = parseStacksDocument(hang(), 'local-1');
    assert.equal(doc.derived, false);
    assert.deepEqual(doc.classes.map(classLabel), ['rank 3', 'ranks 0-2 (3)']);
    assert.equal(doc.classes[1].summary, 'all_reduce ← step (train.py:88) ← main (train.py:120)');
    assert.equal(doc.classes[1].blockedInNative, true);
    assert.equal(doc.classes[0].blockedInNative, null, 'not known: not false');
    assert.deepEqual(doc.collectives, ['default_pg: all_reduce #12 waits for rank 3 (ranks 0-2 entered it)']);
    assert.equal(doc.codeDirs['algo-2'], '/jobs/local-1/nodes/algo-2/code');
    assert.deepEqual(doc.ranks.map((r) => r.rank), [0, 1, 2, 3]);
  });

  test("an older CLI without classes: grouped here by the main thread (each node's copy of the code one file), odd class first", () => {
    const { classes: _classes, collectives: _collectives, code_dirs: codeDirs, ...older } = hang();
    const doc = parseStacksDocument(older, 'local-1', codeDirs);
    assert.equal(doc.derived, true);
    assert.deepEqual(doc.classes.map(classLabel), ['rank 3', 'ranks 0-2 (3)']);
    assert.equal(doc.classes[0].summary, stackSummary(older.ranks[3].threads[0].frames));
    assert.equal(doc.classes[0].summary, 'wait_for_data ← step (train.py:84) ← main (train.py:120)');
    assert.deepEqual(doc.collectives, []);
    // without the code dirs, algo-2's copy is another file: rank 2 is a class of its own
    assert.deepEqual(parseStacksDocument(older, 'local-1').classes.map(classLabel), ['rank 2', 'rank 3', 'ranks 0-1 (2)']);
  });

  test('derived classes: a root cause leads, then errors, then the fewest ranks; an unread rank is its own class', () => {
    const frames = [{ file: '/c/t.py', line: 1, function: 'main' }];
    const rank = (n: number, extra: object = {}) => ({
      rank: n,
      node: 'algo-1',
      pid: n,
      state: null,
      hold_seconds_left: null,
      source: 'control',
      error: null,
      threads: [{ name: 'MainThread', frames, exception: null, internal: false }],
      ...extra,
    });
    const classes = deriveClasses([rank(0), rank(1), rank(2, { error: 'no control channel', threads: [] }), rank(3, { root_cause: true, threads: [] })]);
    assert.deepEqual(classes.map((c) => [c.ranges, c.rootCause, c.error]), [
      ['3', true, null],
      ['2', false, 'no control channel'],
      ['0-1', false, null],
    ]);
  });

  test('a document without ranks is refused with one line', () => {
    assert.throws(() => parseStacksDocument({ job: 'x' }, 'x'), /did not print the ranks/);
  });

  test('icons: root cause, error, blocked in native code; the odd classes stand out', () => {
    const doc = parseStacksDocument(hang(), 'local-1');
    assert.deepEqual(classIcon(doc.classes[1], false), ['watch', undefined]);
    assert.deepEqual(classIcon(doc.classes[0], true), ['debug-stackframe-dot', 'charts.orange']);
    assert.deepEqual(classIcon({ ...doc.classes[0], error: 'gone' }, true), ['error', 'errorForeground']);
    assert.deepEqual(classIcon({ ...doc.classes[0], rootCause: true }, true), ['bug', 'errorForeground']);
    // ranks stopped at a breakpoint (the CLI's in_debugger): the pause icon, not a running frame's
    const stopped = parseStacksDocument({ ...hang(), classes: [{ ...hang().classes[0], in_debugger: true }] }, 'local-1');
    assert.equal(stopped.classes[0].inDebugger, true);
    assert.deepEqual(classIcon(stopped.classes[0], true), ['debug-pause', 'charts.orange']);
  });

  test("a frame's file here: through the mappings (the job's code dir -> its local root), else the path itself, else none", () => {
    const mappings = [{ localRoot: '/ws/src', remoteRoot: '/jobs/j/nodes/algo-1/code/' }];
    const here = new Set(['/ws/src/pkg/train.py', '/venv/lib/torch/x.py']);
    const exists = (p: string) => here.has(p);
    assert.equal(localFileFor('/jobs/j/nodes/algo-1/code/pkg/train.py', mappings, exists), '/ws/src/pkg/train.py');
    assert.equal(localFileFor('/venv/lib/torch/x.py', mappings, exists), '/venv/lib/torch/x.py');
    assert.equal(localFileFor('/jobs/j/nodes/algo-1/code/gone.py', mappings, exists), undefined);
    assert.equal(localFileFor('/jobs/j/nodes/algo-1/codex/pkg/train.py', mappings, exists), undefined, 'a sibling folder is not inside');
  });
});

describe('the Stacks view', () => {
  beforeEach(() => mock.reset());

  /** The commands over a fake CLI whose `stacks` prints the fixture; the job's code is in `ws`. */
  function setup(stacks: object = { stdout: JSON.stringify(hang()) }) {
    const h = commandsHarness({ stacks }, [jobJson({ nodes: ['algo-1', 'algo-2'] })]);
    return { ...h, view: h.commands.stacks };
  }

  test('Show Stacks fills the view: the Flight Recorder line, rank 3 first, then ranks 0-2 with all_reduce; no JSON buffer', async () => {
    const { run, view, invocations } = setup();
    await run('remoteDebug.showStacks', { kind: 'job', job: 'local-1' });
    assert.deepEqual(invocations().at(-1)?.args, ['stacks', 'local-1', '--json']);
    assert.equal(mock.documents.length, 0, 'no Untitled document');
    assert.ok(mock.executed.some((e) => e.command === 'remoteDebug.stacks.focus'), 'the view comes to the front');
    assert.ok(mock.executed.some((e) => e.command === 'setContext' && e.args[0] === 'remoteDebug.stacksShown' && e.args[1] === true));
    const top = rows(view);
    assert.deepEqual(
      top.map((r) => [r.label, r.description, r.icon]),
      [
        ['default_pg: all_reduce #12 waits for rank 3 (ranks 0-2 entered it)', undefined, 'warning'],
        ['rank 3', 'wait_for_data ← step (train.py:84) ← main (train.py:120)', 'debug-stackframe-dot'],
        ['ranks 0-2 (3)', 'all_reduce ← step (train.py:88) ← main (train.py:120)', 'watch'],
      ],
    );
    assert.equal(top[1].collapsible, 2, 'the odd class is open');
    assert.equal(top[2].collapsible, 1);
    assert.match(view.describe() ?? '', /^local-1 · 4 ranks in 2 groups · \d\d:\d\d:\d\d$/);

    // a class: its frames innermost first, then its ranks (each with its own frames)
    const cls = rows(view, top[2].node);
    assert.deepEqual(
      cls.map((r) => [r.label, r.description]),
      [
        ['all_reduce', 'distributed_c10d.py:2501'],
        ['step', 'train.py:88'],
        ['main', 'train.py:120'],
        ['rank 0', 'algo-1 · running'],
        ['rank 1', 'algo-1 · running'],
        ['rank 2', 'algo-2 · running'],
      ],
    );
    assert.deepEqual(cls[1].command, {
      command: 'remoteDebug.stacks.openFrame',
      title: 'Open File',
      arguments: ['local-1', 'algo-1', '/jobs/local-1/nodes/algo-1/code/train.py', 88],
    });
    assert.deepEqual(cls[5].command?.arguments, ['local-1', 2]);
    assert.equal(cls[5].context, 'stackRank');
    const rank2 = rows(view, cls[5].node);
    assert.deepEqual(rank2[1].command?.arguments, ['local-1', 'algo-2', '/jobs/local-1/nodes/algo-2/code/train.py', 88], "rank 2's own files");
  });

  test('while the CLI reads the ranks the view says what it waits for', async () => {
    const { run, view } = setup({ hold: true });
    const showing = run('remoteDebug.showStacks', { kind: 'job', job: 'local-1' });
    await until('the loading row', () => rows(view)[0]?.label === 'Reading the stacks of local-1…');
    assert.match(rows(view)[0].description ?? '', /waiting for remote-debug stacks/);
    mock.progressTokens.at(-1)!.cancel();
    await showing;
    assert.equal(rows(view)[0].label, 'Show Stacks on a job to see where each rank is', 'a cancel leaves the view as it was');
  });

  test('Open as JSON shows the document the CLI printed; Refresh reads the stacks again', async () => {
    const { run, invocations } = setup();
    await run('remoteDebug.showStacks', { kind: 'job', job: 'local-1' });
    await mock.commands.get('remoteDebug.stacks.openJson')!();
    assert.equal(mock.documents[0].language, 'json');
    assert.deepEqual(JSON.parse(mock.documents[0].content).classes[0].ranks, [3]);
    await mock.commands.get('remoteDebug.stacks.refresh')!();
    assert.equal(invocations().filter((i) => i.args[0] === 'stacks').length, 2);
  });

  test('a rank without a debug session: its click offers to attach to it (that rank only, or all)', async () => {
    const { run, requests } = setup();
    await run('remoteDebug.showStacks', { kind: 'job', job: 'local-1' });
    mock.messageAnswers.push('Attach Rank 3');
    await mock.commands.get('remoteDebug.stacks.openRank')!('local-1', 3);
    assert.match(mock.messages('showInformationMessage')[0], /rank 3 of local-1 has no debug session/);
    mock.messageAnswers.push('Attach All Ranks');
    await mock.commands.get('remoteDebug.stacks.openRank')!('local-1', 3);
    assert.deepEqual(requests.map((r) => [r.job, r.ranks]), [
      ['local-1', [3]],
      ['local-1', undefined],
    ]);
  });

  test("a rank with a debug session: its click shows that session; a class's Attach attaches the ranks without one", async () => {
    const { run, view, requests, commands } = setup();
    const sessions = new Set([1]);
    (commands as unknown as { attacher: { sessionFor: (j: string, r: number) => unknown } }).attacher.sessionFor = (_j, r) =>
      sessions.has(r) ? { id: `s${r}` } : undefined;
    await run('remoteDebug.showStacks', { kind: 'job', job: 'local-1' });
    await mock.commands.get('remoteDebug.stacks.openRank')!('local-1', 1);
    assert.deepEqual(mock.executed.filter((e) => e.command === 'remoteDebug.focusRankSession').map((e) => e.args), [['local-1', 1]]);
    const majority = rows(view)[2];
    const rank1 = rows(view, majority.node).find((r) => r.label === 'rank 1')!;
    assert.equal(rank1.context, 'stackRank-attached');
    assert.equal(rank1.icon, 'debug-alt');
    await mock.commands.get('remoteDebug.stacks.attach')!(majority.node);
    assert.deepEqual(requests.map((r) => r.ranks), [[0, 2]]);
  });

  test("a frame's click opens the file here at its line (the job's code dir mapped to its source dir)", async () => {
    const src = tempDir('rd-src');
    fs.writeFileSync(path.join(src, 'train.py'), 'print(1)\n');
    const { run, view, model } = setup();
    model.upsertJob(jobJson({ nodes: ['algo-1', 'algo-2'], source_dir: src }));
    await run('remoteDebug.showStacks', { kind: 'job', job: 'local-1' });
    const odd = rows(view, rows(view)[1].node);
    await mock.commands.get('remoteDebug.stacks.openFrame')!(...(odd[0].command!.arguments as unknown[]));
    const shown = mock.calls.find((c) => c.fn === 'showTextDocument')!;
    assert.equal(shown.args[0].fsPath, path.join(src, 'train.py'));
    assert.equal(shown.args[1].selection.start.line, 39, 'line 40, 0-based');

    // not on this machine: says so, opens nothing
    await mock.commands.get('remoteDebug.stacks.openFrame')!('local-1', 'algo-1', '/elsewhere/x.py', 3);
    assert.match(mock.messages('showInformationMessage')[0], /\/elsewhere\/x\.py is not on this machine/);
    assert.equal(mock.calls.filter((c) => c.fn === 'showTextDocument').length, 1);
  });

  test('output that is not the document: the view says so, Open as JSON shows it as it came', async () => {
    const { run, view } = setup({ stdout: 'rank 0: main\n' });
    await run('remoteDebug.showStacks', { kind: 'job', job: 'local-1' });
    assert.equal(rows(view)[0].label, 'Cannot read the stacks of local-1');
    await mock.commands.get('remoteDebug.stacks.openJson')!();
    assert.deepEqual(mock.documents[0], { content: 'rank 0: main\n', language: 'plaintext' });
  });
});
