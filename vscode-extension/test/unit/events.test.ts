import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import {
  CliOutputError,
  describeEvent,
  EVENT_NAMES,
  EVENTS_VERSION,
  formatBytes,
  isKnownEvent,
  isRunning,
  LineSplitter,
  newerVersion,
  parseEventLine,
  parseJob,
  parseJobs,
  parseJsonDocument,
  parseSynced,
} from '../../src/events';
import { jobJson } from './helpers';

describe('jobs --json', () => {
  test('parses what the CLI prints', () => {
    const jobs = parseJobs(JSON.stringify([jobJson(), jobJson({ name: 'sm-2', backend: 'sagemaker', status: 'Completed', exit_code: 0 })]));
    assert.equal(jobs.length, 2);
    assert.equal(jobs[0].name, 'local-1');
    assert.deepEqual(jobs[0].nodes, ['algo-1']);
    assert.equal(jobs[0].nproc_per_node, 2);
    assert.equal(jobs[0].code_dirs['algo-1'], '/jobs/local-1/nodes/algo-1/code');
    assert.equal(isRunning(jobs[0]), true);
    assert.equal(isRunning(jobs[1]), false);
  });

  test('keeps a status, transport or isolation value a newer CLI may send, unchanged', () => {
    const job = parseJob({
      name: 'x',
      status: 'Expired',
      sagemaker: { region: 'eu-west-1', transport: 'carrier-pigeon', remote_debug_enabled: true },
      machine: { job_dir: '/j', isolation: 'vm' },
    });
    assert.equal(job.status, 'Expired');
    assert.equal(isRunning(job), false, 'an unknown status is neither running nor assumed ended');
    assert.equal(job.sagemaker?.transport, 'carrier-pigeon');
    assert.equal(job.machine?.isolation, 'vm');
    const event = parseEventLine(JSON.stringify({ event: 'rank-ready', v: 1, rank: 0, node: 'algo-1', local_port: 1, remote_port: 2, state: 'hibernating', ide: 'vscode', code_dir: '/c' }));
    assert.ok(event && event.event === 'rank-ready' && event.state === 'hibernating');
  });

  test('tolerates missing and unknown fields', () => {
    const job = parseJob({ name: 'x', status: 'InProgress', new_field: 1, code_dirs: { a: 1, b: '/c' } });
    assert.equal(job.backend, 'unknown');
    assert.deepEqual(job.nodes, []);
    assert.equal(job.nproc_per_node, 1);
    assert.equal(parseJob({ name: 'sm', nproc_per_node: 0 }).nproc_per_node, 0, 'SageMaker: unknown until a rank reports');
    assert.deepEqual(job.code_dirs, { b: '/c' });
    assert.equal(job.debuggable, true);
    assert.equal(job.why_not_debuggable, null);
    assert.equal(job.machine, null);
    assert.equal(job.sagemaker, null);
  });

  test('reads the typed details, and what older CLIs put in "extra"', () => {
    const sm = parseJob({
      name: 'sm',
      sagemaker: { arn: 'arn:aws:sagemaker:us-east-1:1:training-job/sm', region: 'us-east-1', transport: 'ssm', remote_debug_enabled: true },
      machine: 'not an object',
    });
    assert.equal(sm.sagemaker?.transport, 'ssm');
    assert.equal(sm.sagemaker?.instance_type, null);
    assert.equal(sm.machine, null);
    const old = parseJob({ name: 'old', debuggable: false, extra: { code_dirs: { 'algo-1': '/opt/ml/code' }, why_not_debuggable: 'no RemoteDebugConfig' } });
    assert.deepEqual(old.code_dirs, { 'algo-1': '/opt/ml/code' });
    assert.equal(old.why_not_debuggable, 'no RemoteDebugConfig');
  });

  test('refuses what is not a job list, with a one-line message', () => {
    assert.throws(() => parseJobs('{"name": "x"}'), CliOutputError);
    assert.throws(() => parseJobs(''), /printed nothing/);
    assert.throws(() => parseJobs('[{"status": "InProgress"}]'), /no name/);
    assert.throws(() => parseJobs('Traceback (most recent call last):\n  boom'), /printed no JSON: Traceback/);
  });

  test('finds the JSON document after stray lines', () => {
    assert.deepEqual(parseJsonDocument('warning: something\n[1, 2]\n'), [1, 2]);
  });
});

describe('attach --json events', () => {
  test('every event the CLI prints parses', () => {
    const lines = [
      { event: 'job-status', job: 'j', status: 'InProgress', secondary_status: 'Downloading', message: 'pulling image' },
      { event: 'waiting', what: 'nodes', nodes: ['algo-1'] },
      { event: 'ssh-config', aliases: ['algo-1.j'], config: '/c' },
      { event: 'node-connected', node: 'algo-1', alias: 'algo-1.j' },
      { event: 'rank-ready', rank: 0, node: 'algo-1', local_port: 4000, remote_port: 5000, state: 'waiting' },
      { event: 'rank-unavailable', rank: 1, node: 'algo-1', state: 'skipped', error: null },
      { event: 'launch-json', path: '/ws/.vscode/launch.json', compound: 'c', configurations: [] },
      { event: 'ready', ranks: [0] },
      { event: 'rank-attached', rank: 0, node: 'algo-1' },
      { event: 'stopped', rank: 0, node: 'algo-1', file: 'a.py', line: 3, reason: 'breakpoint' },
      { event: 'logpoint', v: 1, rank: 2, node: 'algo-1', file: '/ws/train.py', line: 12, message: 'loss=0.31' },
      { event: 'rank-output', v: 1, rank: 3, node: 'algo-2', line: 'epoch 1 done', stream: 'stdout' },
      { event: 'rank-detached', rank: 0, node: 'algo-1' },
      { event: 'reconnected', node: 'algo-1' },
      { event: 'tunnel-down', node: 'algo-1', error: 'EOF' },
      { event: 'warning', message: 'slow' },
      { event: 'breakpoints-missed', v: 1, breakpoints: ['train.py:42'], ranks: [0, 1] },
      { event: 'rank-failed', rank: 1, node: 'algo-1', pid: 7, error: 'ValueError: bad batch', traceback: 'Traceback...', held: true },
      { event: 'rank-held', v: 1, rank: 0, node: 'algo-1', pid: 6, held_for: 1, error: 'ValueError: bad batch' },
      { event: 'job-ended', status: 'Completed', exit_code: 0, failure_reason: null },
      { event: 'all-stop', v: 1, rank: 0, reason: 'breakpoint', pausing: [1, 2, 3] },
      { event: 'all-paused', v: 1, rank: 0, ranks: [0, 1, 2, 3], seconds: 0.31 },
      { event: 'rank-waiting', v: 1, rank: 2, action: 'pause', seconds: 1.5 },
      { event: 'group-action', v: 1, action: 'continue', ranks: [0, 1, 2, 3], origin: 'rank 0' },
      { event: 'launched', job: 'j', workspace: '/ws', nodes: 1, nproc_per_node: 2 },
      { event: 'rank-listening', v: 1, rank: 0, node: 'algo-1', remote_port: 5000, detail: 'process-group timeout 7200 s' },
      { event: 'pause-safe', v: 1, rank: 1, node: 'algo-1', detail: 'pending: no process group yet' },
      { event: 'rank-connected', v: 1, rank: 0, node: 'algo-1', ide_port: 5678 },
      { event: 'ide-not-listening', v: 1, rank: 1, node: 'algo-1', message: 'start the debug server' },
      { event: 'pycharm-build', v: 1, build: '263.1', source: '/opt/pycharm', others: [], installed: null },
      { event: 'pycharm-config', v: 1, path: '/ws/.idea/x.xml', name: 'remote-debug: j', port: 5678, steps: [] },
      { event: 'summary', v: 1, job: 'j', exit_code: 0, ranks: [] },
      { event: 'detached', v: 1, job: 'j', reason: 'interrupted', status: 'InProgress' },
      { event: 'rank-restarted', v: 1, rank: 1, node: 'algo-1', pid: 202, old_pid: 101, run: 2 },
      { event: 'synced', v: 1, job: 'j', source: '/ws', files: 3, bytes: 12_400, seconds: 0.42, nodes: [{ node: 'algo-1', method: 'rsync', files: 3, bytes: 12_400, seconds: 0.4 }] },
      { event: 'run-started', v: 1, job: 'j', run: 2, nodes: ['algo-1', 'algo-2'], command: ['python', 'train.py'], master_port: 29511 },
      { event: 'run-output', v: 1, node: 'algo-1', line: 'step 0 loss 0.5', rank: 1 },
      { event: 'run-ended', v: 1, job: 'j', run: 2, exit_code: 0, exit_codes: { 'algo-1': 0 }, interrupted: false },
    ];
    assert.deepEqual(new Set(lines.map((l) => l.event)), new Set(EVENT_NAMES), 'one sample per event of the schema');
    for (const l of lines) {
      const e = parseEventLine(JSON.stringify(l));
      assert.ok(e, `parses ${l.event}`);
      assert.equal(e.event, l.event);
      assert.ok(describeEvent(e).length > 0);
    }
    assert.equal(describeEvent(parseEventLine(JSON.stringify(lines[4]))!), 'rank 0 on algo-1: debugger at 127.0.0.1:4000 (waiting)');
    const failed = describeEvent(parseEventLine(JSON.stringify(lines.find((l) => l.event === 'rank-failed')))!);
    assert.match(failed, /^rank 1 on algo-1 failed: ValueError: bad batch \(held for a post-mortem/);
    assert.match(failed, /\nTraceback\.\.\.$/);
  });

  test('ignores lines that are not events, and events missing what we rely on', () => {
    assert.equal(parseEventLine(''), undefined);
    assert.equal(parseEventLine('remote-debug: connecting'), undefined);
    assert.equal(parseEventLine('{not json'), undefined);
    assert.equal(parseEventLine('[1]'), undefined);
    assert.equal(parseEventLine('{"no_event": 1}'), undefined);
    assert.equal(parseEventLine('{"event": "rank-ready", "rank": "0", "node": "algo-1", "local_port": 1}'), undefined);
    assert.equal(parseEventLine('{"event": "ready", "ranks": "all"}'), undefined);
  });

  test('the new events have their lines', () => {
    const line = (o: object) => describeEvent(parseEventLine(JSON.stringify(o))!);
    assert.equal(
      line({ event: 'rank-listening', v: 1, rank: 0, node: 'algo-1', remote_port: 5000, detail: 'process-group timeout 7200 s' }),
      'rank 0 on algo-1: debugger listening on its port 5000 (process-group timeout 7200 s)',
    );
    assert.equal(line({ event: 'pause-safe', v: 1, rank: 1, node: 'algo-2', detail: null }), 'rank 1 on algo-2: pause-safe');
    assert.equal(line({ event: 'rank-connected', v: 1, rank: 0, node: 'algo-1', ide_port: 1 }), "rank 0 on algo-1: connected to PyCharm's debug server");
    assert.equal(line({ event: 'ide-not-listening', v: 1, rank: 1, node: 'algo-1', message: 'start it' }), 'rank 1 on algo-1 is waiting: start it');
    // a wait that drags on: the CLI's own wording, with where it looks
    assert.equal(
      line({ event: 'waiting', v: 1, what: 'nodes', nodes: ['algo-2'], seconds: 12.4, detail: 'lines in group G, region eu-west-1' }),
      'waiting for nodes to start: algo-2 (12 seconds so far): looking for lines in group G, region eu-west-1',
    );
    assert.equal(line({ event: 'waiting', v: 1, what: 'nodes', nodes: ['algo-1'], seconds: 0, detail: '' }), 'waiting for nodes to start: algo-1');
  });

  test('every event of the schema is known, with a version', () => {
    for (const name of EVENT_NAMES) {
      assert.ok(isKnownEvent({ event: name }), name);
    }
    assert.equal(EVENTS_VERSION, 1);
    assert.equal(parseEventLine('{"event": "ready", "v": 1, "ranks": [0]}')?.v, 1);
    assert.equal(parseEventLine('{"event": "ready", "ranks": [0]}')?.v, 0, 'a CLI from before versioned events');
  });

  test('tolerates a newer version: reads the fields it knows, ignores the rest', () => {
    const e = parseEventLine(JSON.stringify({ event: 'rank-ready', v: 7, rank: 0, node: 'algo-1', local_port: 4000, remote_port: 5000, state: 'listening', brand_new: { x: 1 } }));
    assert.ok(e && isKnownEvent(e) && e.event === 'rank-ready');
    assert.equal(e.local_port, 4000);
    assert.equal(newerVersion(e), 7);
    assert.equal(newerVersion(parseEventLine('{"event": "ready", "v": 1, "ranks": []}')!), undefined);
    // what we rely on still has to fit
    assert.equal(parseEventLine('{"event": "rank-ready", "v": 7, "rank": 0, "node": "algo-1", "local_port": "4000"}'), undefined);
  });

  test('keeps unknown (newer) events for the output channel', () => {
    const e = parseEventLine('{"event": "something-new", "x": 1}');
    assert.equal(e?.event, 'something-new');
    assert.match(describeEvent(e!), /something-new/);
  });
});

describe('keep-alive, sync and run', () => {
  test('jobs --json: the keep-alive seconds and the run, absent from older CLIs', () => {
    const kept = parseJob({ name: 'x', status: 'InProgress', kept_alive_seconds_left: 87, run: 2 });
    assert.equal(kept.kept_alive_seconds_left, 87);
    assert.equal(kept.run, 2);
    const old = parseJob({ name: 'x', status: 'InProgress' });
    assert.equal(old.kept_alive_seconds_left, null);
    assert.equal(old.run, 0);
    const odd = parseJob({ name: 'x', kept_alive_seconds_left: 'soon', run: -1 });
    assert.equal(odd.kept_alive_seconds_left, null);
    assert.equal(odd.run, 0);
  });

  test('the lines of rank-restarted, synced, run-started, run-output and run-ended', () => {
    const line = (o: object) => describeEvent(parseEventLine(JSON.stringify(o))!);
    assert.equal(line({ event: 'rank-restarted', v: 1, rank: 1, node: 'algo-1', pid: 202, old_pid: 101, run: 2 }), 'rank 1 on algo-1 restarted (run 2): pid 101 -> 202');
    // the CLI's own wording (remote_debug/cli/sync.py synced_line)
    const node = (name: string, files: number, bytes: number, method = 'rsync') => ({ node: name, method, files, bytes, seconds: 0.3 });
    assert.equal(
      line({ event: 'synced', v: 1, job: 'j', source: '/ws', files: 6, bytes: 24_800, seconds: 0.414, nodes: [node('algo-1', 3, 12_400), node('algo-2', 3, 12_400)] }),
      'synced 3 files (12.4 kB) to 2 nodes in 0.41 s (rsync)',
    );
    assert.equal(
      line({ event: 'synced', v: 1, job: 'j', source: '/ws', files: 4, bytes: 2_500, seconds: 1, nodes: [node('algo-1', 3, 2_000), node('algo-2', 1, 500, 'sftp')] }),
      'synced 4 files (2.5 kB: algo-1: 3 files, 2.0 kB; algo-2: 1 file, 500 B) to 2 nodes in 1.00 s (rsync, sftp)',
    );
    assert.equal(line({ event: 'synced', v: 1, job: 'j', source: '/ws', files: 0, bytes: 0, seconds: 0, nodes: [] }), 'synced 0 files (0 B) to 0 nodes in 0.00 s');
    assert.equal(
      line({ event: 'run-started', v: 1, job: 'j', run: 2, nodes: ['algo-1'], command: ['python', 'train.py'], master_port: null }),
      'run 2 of j started on algo-1: python train.py',
    );
    assert.equal(line({ event: 'run-output', v: 1, node: 'algo-1', line: 'loss 0.5', rank: 1 }), '[rank 1] loss 0.5');
    assert.equal(line({ event: 'run-output', v: 1, node: 'algo-2', line: 'torchrun: starting', rank: null }), '[algo-2] torchrun: starting');
    assert.equal(line({ event: 'run-ended', v: 1, job: 'j', run: 2, exit_code: 1, exit_codes: {}, interrupted: false }), 'run 2 of j ended: exit code 1');
    assert.equal(line({ event: 'run-ended', v: 1, job: 'j', run: 2, exit_code: 130, exit_codes: {}, interrupted: true }), 'run 2 of j was interrupted: exit code 130');
  });

  test('what sync/run events must carry', () => {
    assert.equal(parseEventLine('{"event": "rank-restarted", "rank": 0, "node": "algo-1"}'), undefined, 'no run');
    assert.equal(parseEventLine('{"event": "run-output", "node": "algo-1", "rank": 0}'), undefined, 'no line');
    assert.equal(parseEventLine('{"event": "run-ended", "job": "j", "run": 1, "exit_code": "0"}'), undefined);
    assert.ok(parseEventLine('{"event": "run-output", "node": "algo-1", "line": "x"}'), 'rank may be absent: the launcher');
  });

  test('formatBytes', () => {
    assert.equal(formatBytes(0), '0 B');
    assert.equal(formatBytes(999), '999 B');
    assert.equal(formatBytes(1000), '1.0 kB');
    assert.equal(formatBytes(2_500_000), '2.5 MB');
    assert.equal(formatBytes(3e9), '3.0 GB');
  });

  test('parseSynced: the one synced event of sync --json, after stray lines', () => {
    const e = parseSynced('rsync: warning\n{"event": "synced", "v": 1, "job": "j", "source": "/ws", "files": 2, "bytes": 5, "seconds": 0.1, "nodes": []}\n');
    assert.equal(e.files, 2);
    assert.equal(e.job, 'j');
    assert.throws(() => parseSynced('{"event": "run-started", "job": "j", "run": 1}'), /did not print a "synced" event/);
    assert.throws(() => parseSynced('{"event": "synced", "job": "j"}'), /without its counts/);
    assert.throws(() => parseSynced(''), /printed nothing/);
  });
});

test('LineSplitter joins chunks into lines', () => {
  const s = new LineSplitter();
  assert.deepEqual(s.push('{"a"'), []);
  assert.deepEqual(s.push(': 1}\r\n{"b": 2}\n{"c"'), ['{"a": 1}', '{"b": 2}']);
  assert.deepEqual(s.flush(), ['{"c"']);
  assert.deepEqual(s.flush(), []);
});
