// Restricted Mode must never run an executable from the workspace folder, whatever the platform's own lookup of a
// bare `remote-debug` would do.  Windows is simulated (platform 'win32', a set of files that exist): there, spawn's
// search looks in the cwd (the workspace folder) first, and relative or empty PATH entries mean the cwd too.

import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { ChildProcess, SpawnOptions } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { beforeEach, describe, test } from 'node:test';

import { Cli, CliError, CliSettings } from '../../src/cli';
import { isInside, resolveCommand } from '../../src/cliResolve';
import { CliSetup } from '../../src/cliSetup';
import { readSettings } from '../../src/commands';
import { tempDir } from './helpers';
import { mock } from './vscode-mock';

const WS = 'C:\\Users\\eve\\cloned-repo';
const USER_BIN = 'C:\\Users\\me\\AppData\\Local\\Programs\\Python\\Python312\\Scripts';
// what an attacker's repository ships: the CLI's name at the root, in a committed venv, in node_modules/.bin
const PLANTED = [
  `${WS}\\remote-debug.exe`,
  `${WS}\\remote-debug.com`,
  `${WS}\\.venv\\Scripts\\remote-debug.exe`,
  `${WS}\\node_modules\\.bin\\remote-debug.exe`,
  `${WS}\\python.exe`,
];
const WIN_SEAM = { platform: 'win32' as const, realpath: (p: string) => p };

interface Spawned {
  command: string;
  args: string[];
  cwd?: string;
}

/** A spawner that records what would run and exits 0 with `{}` on stdout. */
function recordingSpawner(spawned: Spawned[]) {
  return (command: string, args: string[], options: SpawnOptions): ChildProcess => {
    spawned.push({ command, args, cwd: options.cwd?.toString() });
    const child = new EventEmitter() as ChildProcess;
    const stdout = new EventEmitter() as NodeJS.ReadableStream & EventEmitter;
    const stderr = new EventEmitter() as NodeJS.ReadableStream & EventEmitter;
    (stdout as any).setEncoding = () => stdout;
    (stderr as any).setEncoding = () => stderr;
    Object.assign(child, { stdout, stderr, kill: () => true });
    setImmediate(() => {
      stdout.emit('data', '{}');
      child.emit('close', 0, null);
    });
    return child;
  };
}

function winCli(settings: Partial<CliSettings>, files: string[], env: NodeJS.ProcessEnv) {
  const spawned: Spawned[] = [];
  const all: CliSettings = { cliPath: 'remote-debug', pythonPath: '', untrustedRoots: [WS], ...settings };
  const cli = new Cli(() => all, recordingSpawner(spawned), { ...WIN_SEAM, isFile: (p) => files.includes(p) });
  return { cli, spawned, env };
}

/** Whether Windows would run a file inside the workspace for this spawn (what the attack needs). */
function runsFromWorkspace(s: Spawned): boolean {
  const bare = !/[\\/]/.test(s.command);
  return bare ? s.cwd === WS : isInside(s.command, WS, 'win32');
}

describe('Restricted Mode on Windows: no remote-debug.exe from the workspace', () => {
  test('a bare remote-debug resolves to the one on PATH, past the cwd, ".", "" and PATH entries in the folder', async () => {
    const env = { Path: `.;;.venv\\Scripts;${WS}\\node_modules\\.bin;"${USER_BIN}"`, PATHEXT: '.COM;.EXE;.BAT;.CMD;.PY' };
    const { cli, spawned } = winCli({}, [...PLANTED, `${USER_BIN}\\remote-debug.exe`], env);
    await cli.json(['jobs', '--json'], { cwd: WS, env });
    assert.equal(spawned.length, 1);
    assert.ok(!runsFromWorkspace(spawned[0]), `would run the workspace's file: ${JSON.stringify(spawned[0])}`);
    assert.equal(spawned[0].command, `${USER_BIN}\\remote-debug.exe`);
  });

  test('only the workspace has it: nothing runs, a not-found error says so', async () => {
    const env = { PATH: `.;${WS}\\.venv\\Scripts;C:\\Windows\\System32` };
    const { cli, spawned } = winCli({}, PLANTED, env);
    await assert.rejects(cli.run(['version', '--json'], { cwd: WS, env }), (err: CliError) => err.notFound && /not found/.test(err.message));
    assert.deepEqual(spawned, []);
  });

  test('the stream form (attach) refuses the same way, through its exit callback', async () => {
    const env = { PATH: '.' };
    const { cli, spawned } = winCli({}, PLANTED, env);
    const proc = cli.stream(['attach', 'job'], { cwd: WS, env });
    const error = await new Promise<CliError | undefined>((resolve) => proc.start({ exit: (_c, _s, e) => resolve(e) }));
    assert.ok(error?.notFound);
    assert.deepEqual(spawned, []);
  });

  test('a user-level cliPath into the folder (relative, other case, no extension) is refused', async () => {
    const env = { PATH: USER_BIN };
    for (const cliPath of ['.venv\\Scripts\\remote-debug.exe', `${WS.toUpperCase()}\\.venv\\Scripts\\remote-debug`, './remote-debug']) {
      const { cli, spawned } = winCli({ cliPath }, PLANTED, env);
      await assert.rejects(cli.run(['jobs'], { cwd: WS, env }), /inside the workspace folder|not trusted/, cliPath);
      assert.deepEqual(spawned, [], cliPath);
    }
  });

  test('pythonPath "python" (bare) is resolved too: not the python.exe at the folder root', async () => {
    const env = { PATH: `;${USER_BIN}` };
    const { cli, spawned } = winCli({ pythonPath: 'python' }, [...PLANTED, `${USER_BIN}\\python.exe`], env);
    await cli.run(['jobs'], { cwd: WS, env });
    assert.deepEqual(spawned[0].command, `${USER_BIN}\\python.exe`);
    assert.deepEqual(spawned[0].args.slice(0, 2), ['-m', 'remote_debug']);
  });

  test('a .cmd / .bat on PATH is not chosen (spawn runs those only through a shell)', () => {
    const r = resolveCommand('remote-debug', {
      ...WIN_SEAM,
      untrustedRoots: [WS],
      env: { PATH: 'C:\\a;C:\\b', PATHEXT: '.BAT;.CMD;.EXE' },
      isFile: (p) => p === 'C:\\a\\remote-debug.cmd' || p === 'C:\\b\\remote-debug.exe',
    });
    assert.deepEqual(r, { command: 'C:\\b\\remote-debug.exe' });
  });
});

describe('Restricted Mode elsewhere, and trusted workspaces', () => {
  test('Linux: PATH entries that are empty, relative or in the folder are skipped', () => {
    const files = ['/ws/remote-debug', '/ws/node_modules/.bin/remote-debug', '/ws/bin/remote-debug', '/usr/local/bin/remote-debug'];
    const r = resolveCommand('remote-debug', {
      platform: 'linux',
      untrustedRoots: ['/ws'],
      env: { PATH: '::.:bin:/ws/node_modules/.bin:/usr/local/bin' },
      isFile: (p) => files.includes(p),
      realpath: (p) => p,
    });
    assert.deepEqual(r, { command: '/usr/local/bin/remote-debug' });
  });

  test('Linux: a PATH directory that is a symlink into the folder is skipped', () => {
    const r = resolveCommand('remote-debug', {
      platform: 'linux',
      untrustedRoots: ['/ws'],
      env: { PATH: '/home/me/linked' },
      isFile: () => true,
      realpath: (p) => p.replace('/home/me/linked', '/ws/.venv/bin'),
    });
    assert.equal(r.error !== undefined && r.notFound, true);
  });

  test('trusted: the command is left to the platform, as before', () => {
    assert.deepEqual(resolveCommand('remote-debug', { platform: 'win32', untrustedRoots: [], env: { PATH: '.' } }), { command: 'remote-debug' });
  });
});

describe('the settings carry the untrusted folders', () => {
  beforeEach(() => mock.reset());

  test('readSettings: untrusted → the workspace folders; trusted → none', () => {
    mock.folder('/ws');
    mock.trusted = false;
    assert.deepEqual(readSettings().untrustedRoots, ['/ws']);
    mock.trusted = true;
    assert.deepEqual(readSettings().untrustedRoots, []);
  });
});

describe('Install in Restricted Mode', () => {
  beforeEach(() => mock.reset());

  test("pip never runs the workspace's own python3 (PATH reaching into the folder)", async () => {
    const ws = tempDir('rd-untrusted-ws');
    const planted = path.join(ws, 'python3');
    fs.writeFileSync(planted, '#!/bin/sh\necho pwned\n', { mode: 0o755 });
    mock.folder(ws);
    mock.trusted = false;
    const installs: string[] = [];
    const setup = new CliSetup({
      cli: new Cli(() => readSettings()),
      settings: () => readSettings(),
      log: { appendLine: () => undefined, show: () => undefined },
      refresh: async () => undefined,
      runInstall: async (python) => {
        installs.push(python);
        return { exitCode: 1, output: '' };
      },
    });
    const saved = process.env.PATH;
    process.env.PATH = `.:${ws}`; // a PATH whose entries both mean the workspace folder
    try {
      await setup.install();
    } finally {
      process.env.PATH = saved;
    }
    // what a spawn of a bare name would run: PATH's first hit, relative entries against the cwd (the folder)
    const runs = (cmd: string) => (path.isAbsolute(cmd) ? cmd : [ws, ws].map((d) => path.join(d, cmd)).find((f) => fs.existsSync(f)));
    assert.ok(installs.every((py) => runs(py) !== planted), `would run the workspace's python: ${installs.join(', ')}`);
    assert.match(mock.messages('showErrorMessage')[0] ?? '', /cannot install .*not found on PATH/);
  });
});
