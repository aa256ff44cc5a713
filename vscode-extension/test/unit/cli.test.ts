import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { describe, test } from 'node:test';

import { Cli, CliError, displayCommand, errorMessage, invocation, trainingPython } from '../../src/cli';
import { fakeCli, tempDir, until } from './helpers';

describe('how the CLI is run', () => {
  test('cliPath, or python -m remote_debug when pythonPath is set', () => {
    assert.deepEqual(invocation({ cliPath: 'remote-debug', pythonPath: '' }, ['jobs', '--json']), {
      command: 'remote-debug',
      args: ['jobs', '--json'],
    });
    assert.deepEqual(invocation({ cliPath: '', pythonPath: '' }, ['jobs']).command, 'remote-debug');
    assert.deepEqual(invocation({ cliPath: '/x/remote-debug', pythonPath: ' /venv/bin/python ' }, ['jobs']), {
      command: '/venv/bin/python',
      args: ['-m', 'remote_debug', 'jobs'],
    });
  });

  test('displayCommand quotes what a shell would split', () => {
    assert.equal(displayCommand({ command: '/a b/rd', args: ['attach', "it's", '--json'] }), `'/a b/rd' attach 'it'\\''s' --json`);
  });

  test('the training Python: pythonPath, else the python next to an absolute CLI, else python3', () => {
    assert.equal(trainingPython({ cliPath: '/v/bin/remote-debug', pythonPath: '/p/python' }), '/p/python');
    assert.equal(trainingPython({ cliPath: '/v/bin/remote-debug', pythonPath: '' }, (p) => p === '/v/bin/python'), '/v/bin/python');
    assert.equal(trainingPython({ cliPath: 'remote-debug', pythonPath: '' }, () => true), 'python3');
  });
});

describe('error lines', () => {
  test("the CLI's own one-line error wins", () => {
    assert.equal(errorMessage('noise\nremote-debug: error: job x is Completed: nothing to attach to\n', 2), 'job x is Completed: nothing to attach to');
  });
  test('typer usage errors inside a box', () => {
    const stderr = "Usage: remote-debug [OPTIONS] COMMAND\n╭─ Error ───╮\n│ No such command 'stacks'. │\n╰───────────╯\n";
    assert.equal(errorMessage(stderr, 2), "No such command 'stacks'.");
  });
  test('otherwise the last line, or the exit code', () => {
    assert.equal(errorMessage('a\nKeyError: x\n', 1), 'KeyError: x');
    assert.match(errorMessage('', 3, { command: 'rd', args: ['jobs'] }), /rd jobs failed with exit code 3/);
  });
});

describe('running the CLI (a stand-in script, real processes)', () => {
  test('json() parses stdout', async () => {
    const { cli, invocations } = fakeCli({ jobs: { stdout: '[{"name": "a"}]\n' } });
    assert.deepEqual(await cli.json(['jobs', '--json']), [{ name: 'a' }]);
    assert.deepEqual(invocations()[0].args, ['jobs', '--json']);
  });

  test('a failing command rejects with its one error line and exit code', async () => {
    const { cli } = fakeCli({ stop: { stderr: 'remote-debug: error: unknown job nope\n', exit: 2 } });
    await assert.rejects(cli.run(['stop', 'nope']), (err: CliError) => {
      assert.ok(err instanceof CliError);
      assert.equal(err.message, 'unknown job nope');
      assert.equal(err.exitCode, 2);
      assert.equal(err.unknownCommand, false);
      return true;
    });
  });

  test('a command the CLI does not have is recognisable', async () => {
    const { cli } = fakeCli({});
    await assert.rejects(cli.run(['stacks', 'j', '--json']), (err: CliError) => err.unknownCommand);
  });

  test('a CLI that is not installed says how to fix it', async () => {
    const cli = new Cli(() => ({ cliPath: path.join(os.tmpdir(), 'no-such-remote-debug'), pythonPath: '' }));
    await assert.rejects(cli.run(['jobs']), (err: CliError) => {
      assert.equal(err.notFound, true);
      assert.match(err.message, /not found.*remoteDebug\.cliPath/);
      return true;
    });
  });

  test('a command that hangs times out', async () => {
    const { cli } = fakeCli({ jobs: { hold: true } });
    await assert.rejects(cli.run(['jobs'], { timeoutMs: 300 }), /did not finish within 0.3 s/);
  });

  test('runs in the cwd it is given', async () => {
    const dir = tempDir('rd-cwd');
    const { cli, invocations } = fakeCli({ launch: { stdout: '{}' } });
    await cli.run(['launch'], { cwd: dir });
    assert.equal(fs.realpathSync(invocations()[0].cwd), fs.realpathSync(dir));
  });

  test('stream(): lines as they come, stop() interrupts gracefully (no error)', async () => {
    const { cli } = fakeCli({ attach: { lines: [{ line: '{"event": "ready", "ranks": [0]}' }, { line: 'partial', after: 20 }], hold: true } });
    const proc = cli.stream(['attach', 'j', '--json'], {});
    const lines: string[] = [];
    let exit: { code: number | null; error?: CliError } | undefined;
    proc.start({ line: (l) => lines.push(l), exit: (code, _signal, error) => (exit = { code, error }) });
    await until('two lines', () => lines.length === 2);
    assert.equal(proc.running, true);
    await proc.stop();
    assert.equal(proc.running, false);
    assert.equal(exit?.code, 130);
    assert.equal(exit?.error, undefined, 'a stop we asked for is not an error');
    assert.deepEqual(lines, ['{"event": "ready", "ranks": [0]}', 'partial']);
  });

  test('stream(): a process that fails on its own reports its error line', async () => {
    const { cli } = fakeCli({ attach: { stderr: 'remote-debug: error: job j is Failed: nothing to attach to\n', exit: 2 } });
    const proc = cli.stream(['attach', 'j'], {});
    const done = new Promise<CliError | undefined>((resolve) => proc.start({ exit: (_c, _s, e) => resolve(e) }));
    const err = await done;
    assert.equal(err?.message, 'job j is Failed: nothing to attach to');
    await proc.whenExited();
  });
});

test('settings add AWS_PROFILE / AWS_REGION to the CLI environment; empty ones change nothing', async () => {
  const { cliEnv } = await import('../../src/cli');
  const env = cliEnv({ cliPath: 'x', pythonPath: '', env: { AWS_PROFILE: 'ml', AWS_REGION: '' } }, { PATH: '/bin', AWS_REGION: 'eu-west-1' });
  assert.deepEqual(env, { PATH: '/bin', AWS_REGION: 'eu-west-1', AWS_PROFILE: 'ml' });
});
