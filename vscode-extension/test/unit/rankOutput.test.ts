import assert from 'node:assert/strict';
import { beforeEach, describe, test } from 'node:test';

import { JobsModel } from '../../src/model';
import { Channel, JobOutput, logsArgs, parseLogLine, RankOutputs } from '../../src/rankOutput';
import { fakeCli, fakeScheduler, jobJson, until } from './helpers';
import { mock } from './vscode-mock';

/** An output channel that keeps its text (clear empties it), and whether it was shown / disposed. */
function channel(): Channel & { text: () => string; lines: () => string[]; shown: number; disposed: boolean } {
  let text = '';
  const c = {
    shown: 0,
    disposed: false,
    append: (t: string) => void (text += t),
    clear: () => void (text = ''),
    show: () => void c.shown++,
    dispose: () => void (c.disposed = true),
    text: () => text,
    lines: () => text.split('\n').filter(Boolean),
  };
  return c;
}

const out = (node: string, rank: number | null, line: string, time: number | null = 1.5) => ({ line: JSON.stringify({ node, rank, line, time }) });

describe('rank output: logs --follow --json', () => {
  beforeEach(() => mock.reset());

  test('one JSON object a line: a rank\'s, a node\'s own (rank null); anything else is skipped', () => {
    assert.deepEqual(parseLogLine('{"node": "algo-1", "rank": 3, "line": "loss 0.3", "time": 12.5}'), { node: 'algo-1', rank: 3, line: 'loss 0.3', time: 12.5 });
    assert.deepEqual(parseLogLine('{"node": "algo-2", "rank": null, "line": "torchrun: started", "time": null}'), {
      node: 'algo-2',
      rank: null,
      line: 'torchrun: started',
      time: null,
    });
    assert.equal(parseLogLine('not json'), undefined);
    assert.equal(parseLogLine('{"event": "waiting"}'), undefined);
    assert.deepEqual(logsArgs('j'), ['logs', 'j', '--follow', '--json']);
  });

  test('the channel shows every line as [rank N] / [node], live, then says the output ended', async () => {
    const { cli, invocations } = fakeCli({
      logs: { lines: [out('algo-1', null, 'launching 2 ranks'), out('algo-1', 0, 'loss 0.9'), out('algo-2', 1, 'loss 0.8', null)] },
    });
    const ch = channel();
    const o = new JobOutput('local-1', cli, ch);
    o.start();
    await until('the end', () => o.ended);
    assert.deepEqual(invocations().map((i) => i.args), [['logs', 'local-1', '--follow', '--json']]);
    assert.deepEqual(ch.lines(), ['[algo-1] launching 2 ranks', '[rank 0] loss 0.9', '[rank 1] loss 0.8', "── end of local-1's output ──"]);
    assert.deepEqual([...o.ranks], [0, 1]);
    assert.deepEqual([...o.nodes], ['algo-1']);
  });

  test('Filter by Rank: the channel is drawn again from the buffer with that rank only; new lines follow the filter', () => {
    const clock = fakeScheduler();
    const ch = channel();
    const o = new JobOutput('j', fakeCli({}).cli, ch, clock);
    o.add({ node: 'algo-1', rank: 0, line: 'a', time: null });
    o.add({ node: 'algo-1', rank: 1, line: 'b', time: null });
    assert.equal(ch.text(), '', 'lines gather before they are appended');
    clock.advance(100);
    assert.deepEqual(ch.lines(), ['[rank 0] a', '[rank 1] b']);
    o.setFilter({ kind: 'rank', rank: 1 });
    assert.deepEqual(ch.lines(), ['── showing rank 1 only (Remote Debug: Filter Output by Rank… shows the others) ──', '[rank 1] b']);
    o.add({ node: 'algo-1', rank: 0, line: 'c', time: null });
    o.add({ node: 'algo-1', rank: 1, line: 'd', time: null });
    clock.advance(100);
    assert.deepEqual(ch.lines().slice(1), ['[rank 1] b', '[rank 1] d']);
    o.setFilter({ kind: 'node', node: 'algo-1' });
    assert.deepEqual(ch.lines().slice(1), [], "algo-1's own lines: none");
    o.setFilter({ kind: 'all' });
    assert.deepEqual(ch.lines(), ['[rank 0] a', '[rank 1] b', '[rank 0] c', '[rank 1] d']);
  });

  test('bounded: the buffer and the channel keep the last lines and say how many went', () => {
    const clock = fakeScheduler();
    const ch = channel();
    const o = new JobOutput('j', fakeCli({}).cli, ch, clock, 8);
    for (let i = 0; i < 30; i++) {
      o.add({ node: 'algo-1', rank: 0, line: `line ${i}`, time: null });
    }
    clock.advance(100);
    assert.ok(o.shownLines().length <= 10, `at most the limit and a quarter: ${o.shownLines().length}`);
    assert.equal(o.shownLines().at(-1), '[rank 0] line 29');
    assert.ok(ch.lines().length <= 11, ch.text());
    assert.match(ch.lines()[0], /^── \d+ earlier lines not kept \(the channel keeps the last 8\) ──$/);
    assert.equal(ch.lines().at(-1), '[rank 0] line 29');
  });

  test('a CLI without logs: the channel says what to install', async () => {
    const ch = channel();
    const o = new JobOutput('j', fakeCli({}).cli, ch);
    o.start();
    await until('the end', () => o.ended);
    assert.match(ch.text(), /this remote-debug CLI has no "logs" command: pip install -U remote-debug-training/);
  });
});

describe('rank output: the channels of the jobs', () => {
  beforeEach(() => mock.reset());

  function setup(options: { follow?: boolean } = {}) {
    const { cli, events } = fakeCli({ logs: { lines: [out('algo-1', 0, 'step 1'), out('algo-1', 1, 'step 1')], hold: true } });
    const model = new JobsModel();
    model.setJobs([jobJson()]);
    const channels = new Map<string, ReturnType<typeof channel>>();
    const picked: unknown[] = [];
    const outputs = new RankOutputs(
      cli,
      model,
      async (node) => {
        picked.push(node);
        return 'local-1';
      },
      {
        followOnAttach: () => options.follow ?? true,
        createChannel: (name) => {
          const c = channel();
          channels.set(name, c);
          return c;
        },
      },
    );
    outputs.register();
    const logsRuns = () => events().filter((e) => e.args[0] === 'logs');
    return { outputs, model, channels, logsRuns, picked };
  }

  test('an attach starts its job\'s channel (not shown: no focus stolen); the setting off: it does not', async () => {
    const { outputs, model, channels, logsRuns } = setup();
    model.attachStarted('local-1');
    await until('the lines', () => channels.get('Remote Debug: local-1')?.lines().length === 2);
    assert.equal(channels.get('Remote Debug: local-1')!.shown, 0);
    model.attachEnded('local-1');
    model.attachStarted('local-1');
    assert.equal(logsRuns().length, 1, 'one process per job');
    await outputs.stopAll();
    await until('the CLI to get SIGINT', () => logsRuns().some((e) => e.signal === 'SIGINT'));
    outputs.dispose();

    mock.reset();
    const off = setup({ follow: false });
    off.model.attachStarted('local-1');
    assert.equal(off.channels.size, 0);
    off.outputs.dispose();
  });

  test('Show Rank Output on a job row shows its channel; Filter Output by Rank… offers the ranks and nodes seen', async () => {
    const { outputs, channels, picked } = setup();
    const row = { kind: 'job', job: 'local-1' };
    await mock.commands.get('remoteDebug.showRankOutput')!(row);
    assert.deepEqual(picked, [row]);
    const ch = channels.get('Remote Debug: local-1')!;
    assert.equal(ch.shown, 1);
    await until('the lines', () => ch.lines().length === 2);
    outputs.get('local-1')!.add({ node: 'algo-2', rank: null, line: 'node up', time: null });
    mock.quickPicks.push((items) => items.find((i: { label: string }) => i.label === 'rank 1'));
    await mock.commands.get('remoteDebug.filterOutputByRank')!();
    const pick = mock.calls.find((c) => c.fn === 'showQuickPick')!;
    assert.deepEqual(pick.args[0].map((i: { label: string; description?: string }) => [i.label, i.description]), [
      ['All ranks', 'shown'],
      ['rank 0', undefined],
      ['rank 1', undefined],
      ['algo-2', undefined],
    ]);
    assert.match(pick.args[1].placeHolder, /from the last 20000 lines/);
    assert.deepEqual(ch.lines().slice(1), ['[rank 1] step 1']);
    outputs.dispose();
  });

  test('a job gone from the listing: its process is stopped and its channel goes', async () => {
    const { outputs, model, channels, logsRuns } = setup();
    outputs.follow('local-1', false);
    await until('logs to run', () => logsRuns().length === 1);
    model.setJobs([]);
    assert.equal(channels.get('Remote Debug: local-1')!.disposed, true);
    assert.equal(outputs.get('local-1'), undefined);
    await until('the CLI to get SIGINT', () => logsRuns().some((e) => e.signal === 'SIGINT'));
    outputs.dispose();
  });
});
