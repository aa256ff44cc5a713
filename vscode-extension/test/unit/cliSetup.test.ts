// The CLI version gate and Install / Upgrade.

import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { beforeEach, describe, test } from 'node:test';

import * as vscode from 'vscode';

import { Cli, CliError, CliSettings } from '../../src/cli';
import { CliSetup, installFailureMessage, pythonPathTarget } from '../../src/cliSetup';
import { classifyVersionAnswer, compareVersions, DISTRIBUTION, MIN_CLI_VERSION, parseVersionInfo, pipInstallArgs } from '../../src/cliVersion';
import { ProcessPseudoterminal, toTerminalText } from '../../src/processTerminal';
import { defaultPython, installPython, selectedInterpreter } from '../../src/pythonInterpreter';
import { fakeCli, tempDir, until } from './helpers';
import { mock, Uri } from './vscode-mock';

const versionJson = (version: string, python = '/venv/bin/python') =>
  JSON.stringify({ version, distribution: 'remote-debug-training', python, events_version: 3 });

describe('version numbers and answers', () => {
  test('compareVersions: numeric parts, pre-releases before the release, local parts ignored', () => {
    assert.ok(compareVersions('0.1.0', '0.1.0') === 0);
    assert.ok(compareVersions('0.1', '0.1.0') === 0);
    assert.ok(compareVersions('0.10.0', '0.9.9') > 0, 'not string order');
    assert.ok(compareVersions('0.1.0rc1', '0.1.0') < 0);
    assert.ok(compareVersions('0.1.0.dev3', '0.1.0') < 0);
    assert.ok(compareVersions('0.1.0+g1234', '0.1.0') === 0);
    assert.ok(compareVersions('0.0.9', MIN_CLI_VERSION) < 0);
    assert.ok(compareVersions('garbage', '0.1.0') < 0, 'unreadable: too old');
  });

  test('parseVersionInfo reads version --json, and nothing else', () => {
    assert.deepEqual(parseVersionInfo(versionJson('0.2.0')), {
      version: '0.2.0',
      distribution: 'remote-debug-training',
      python: '/venv/bin/python',
      eventsVersion: 3,
    });
    assert.equal(parseVersionInfo('remote-debug 0.2.0'), undefined);
    assert.equal(parseVersionInfo('[1, 2]'), undefined);
  });

  test('classify: ok, too old, unknown command, missing, foreign, broken', () => {
    assert.equal(classifyVersionAnswer({ stdout: versionJson('0.1.0') }).kind, 'ok');
    assert.deepEqual(classifyVersionAnswer({ stdout: versionJson('0.0.5') }), { kind: 'too-old', version: '0.0.5', detail: 'version 0.0.5' });
    assert.equal(classifyVersionAnswer({ error: new CliError("No such command 'version'.", 2, "Error: No such command 'version'.") }).kind, 'too-old');
    assert.equal(classifyVersionAnswer({ error: new CliError('cannot run remote-debug: not found', null, '', true) }).kind, 'missing');
    assert.equal(
      classifyVersionAnswer({ error: new CliError('x', 1, "/usr/bin/python3: No module named remote_debug\n") }).kind,
      'missing',
      'pythonPath without the package',
    );
    assert.equal(classifyVersionAnswer({ stdout: 'HPC remote debugger 2.3\n' }).kind, 'foreign');
    assert.equal(classifyVersionAnswer({ error: new CliError('ImportError: boom', 1, 'Traceback...\nImportError: boom') }).kind, 'broken');
  });

  test('the install command is the renamed distribution, as argv', () => {
    assert.equal(DISTRIBUTION, 'remote-debug-training');
    assert.deepEqual(pipInstallArgs(), ['-m', 'pip', 'install', '--upgrade', 'remote-debug-training']);
  });
});

interface Harness {
  setup: CliSetup;
  installs: Array<{ python: string; args: string[] }>;
  refreshed: () => number;
  log: string[];
}

function harness(scenario: Parameters<typeof fakeCli>[0], installResult = { exitCode: 0 as number | null, output: '' }, pythonScenario?: Parameters<typeof fakeCli>[0]): Harness {
  const { cli } = fakeCli(scenario);
  const installs: Array<{ python: string; args: string[] }> = [];
  let refreshed = 0;
  const log: string[] = [];
  const settings = (): CliSettings => ({
    cliPath: String(mock.config['remoteDebug.cliPath'] ?? 'remote-debug'),
    pythonPath: String(mock.config['remoteDebug.pythonPath'] ?? ''),
  });
  const setup = new CliSetup({
    cli,
    settings,
    log: { appendLine: (l) => log.push(l), show: () => undefined },
    refresh: async () => void refreshed++,
    runInstall: async (python, args) => {
      installs.push({ python, args });
      return installResult;
    },
    // `<python> -m remote_debug`: the stand-in answers as the freshly installed CLI (pythonScenario)
    cliFor: () => fakeCli(pythonScenario ?? scenario).cli,
  });
  return { setup, installs, refreshed: () => refreshed, log };
}

describe('the version gate', () => {
  beforeEach(() => mock.reset());

  test('a supported CLI: no message, the walkthrough step completes (context key)', async () => {
    const { setup, log } = harness({ version: { stdout: versionJson('0.1.0') } });
    const status = await setup.check();
    assert.equal(status.kind, 'ok');
    assert.deepEqual(mock.messages(), []);
    const contexts = () => mock.executed.filter((e) => e.command === 'setContext').map((e) => e.args);
    assert.deepEqual(contexts(), [['remoteDebug.cliReady', true]]);
    assert.match(log.join('\n'), /remote-debug 0\.1\.0 \(remote-debug-training\) on \/venv\/bin\/python/);
    // confirmed again (Install or Upgrade from the walkthrough): a change the walkthrough sees, even if it missed the first
    await setup.check();
    assert.deepEqual(contexts().slice(1), [['remoteDebug.cliReady', false], ['remoteDebug.cliReady', true]]);
  });

  test('an older CLI (no version command): Upgrade installs with pip in a terminal, then checks again', async () => {
    const { setup, installs } = harness({}, { exitCode: 0, output: '' });
    mock.messageAnswers.push('Upgrade');
    await setup.check();
    const warning = mock.messages('showWarningMessage')[0];
    assert.match(warning, new RegExp(`older than ${MIN_CLI_VERSION.replace(/\./g, '\\.')}`));
    await until('the install', () => installs.length === 1);
    await until('the check after it', () => mock.messages('showWarningMessage').length === 2);
    assert.deepEqual(installs[0], { python: 'python3', args: ['-m', 'pip', 'install', '--upgrade', 'remote-debug-training'] });
    assert.deepEqual(mock.executed.filter((e) => e.command === 'setContext'), [], 'never "false" first');
  });

  test('an old version number says which', async () => {
    const { setup } = harness({ version: { stdout: versionJson('0.0.3') } });
    mock.messageAnswers.push(undefined);
    await setup.check();
    assert.match(mock.messages('showWarningMessage')[0], /remote-debug 0\.0\.3 is older than 0\.1\.0/);
    const buttons = mock.calls.find((c) => c.fn === 'showWarningMessage')!.args.slice(1);
    assert.deepEqual(buttons, ['Upgrade', 'Open Settings']);
  });

  test('a missing CLI offers Install, and names the package', async () => {
    mock.config['remoteDebug.cliPath'] = path.join(tempDir('rd-none'), 'remote-debug');
    const setup = new CliSetup({
      cli: new Cli(() => ({ cliPath: String(mock.config['remoteDebug.cliPath']), pythonPath: '' })),
      settings: () => ({ cliPath: '', pythonPath: '' }),
      log: { appendLine: () => undefined, show: () => undefined },
      refresh: async () => undefined,
    });
    mock.messageAnswers.push(undefined);
    const status = await setup.check();
    assert.equal(status.kind, 'missing');
    assert.match(mock.messages('showWarningMessage')[0], /cannot find the remote-debug CLI .*Install it \(remote-debug-training\)/);
    assert.equal(mock.calls.find((c) => c.fn === 'showWarningMessage')!.args[1], 'Install');
  });

  test('changing remoteDebug.cliPath or pythonPath checks again; other settings do not', async () => {
    const { setup } = harness({ version: { stdout: versionJson('0.1.0') } });
    const disposables = setup.register();
    const runs = () => fs.readFileSync(process.env.FAKE_RD_LOG!, 'utf8').split('\n').filter((l) => l.includes('"version"')).length;
    await setup.check();
    mock.changeConfig('remoteDebug.justMyCode');
    mock.changeConfig('remoteDebug.pythonPath');
    await until('a second check', () => runs() === 2);
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(runs(), 2);
    disposables.forEach((d) => d.dispose());
  });

  test('after installing, a CLI that is not on PATH: asks, then points remoteDebug.pythonPath at that interpreter', async () => {
    // `remote-debug` stays the old one; `<python> -m remote_debug` is the new one
    const { setup, refreshed } = harness({}, { exitCode: 0, output: '' }, { version: { stdout: versionJson('0.1.0', '/home/u/.venv/bin/python3') } });
    mock.messageAnswers.push('Use This Python');
    await setup.install();
    const ask = mock.messages('showInformationMessage')[0];
    assert.match(ask, /remote-debug-training 0\.1\.0 is installed for \/home\/u\/\.venv\/bin\/python3.*set remoteDebug\.pythonPath/);
    assert.deepEqual(
      mock.configUpdates.map((u) => [u.section, u.key, u.value, u.target]),
      [['remoteDebug', 'pythonPath', '/home/u/.venv/bin/python3', vscode.ConfigurationTarget.Global]],
    );
    assert.equal(refreshed(), 0, 'the settings change refreshes the view');
  });

  test('after installing, "Not Now" changes no setting', async () => {
    const { setup } = harness({}, { exitCode: 0, output: '' }, { version: { stdout: versionJson('0.1.0') } });
    mock.messageAnswers.push('Not Now');
    await setup.install();
    assert.deepEqual(mock.configUpdates, []);
  });

  test('after installing, a CLI that now works: says so and lists the jobs', async () => {
    const { setup, refreshed } = harness({ version: { stdout: versionJson('0.1.2') } });
    await setup.install();
    assert.match(mock.messages('showInformationMessage')[0], /remote-debug 0\.1\.2 is ready/);
    assert.equal(refreshed(), 1);
  });

  test('pip failing: one line with what to do; PEP 668 gets its own advice', async () => {
    const { setup } = harness({}, { exitCode: 1, output: 'error: externally-managed-environment\n' });
    await setup.install();
    assert.match(mock.messages('showErrorMessage')[0], /python3 is managed by the system.*Python: Select Interpreter.*remoteDebug\.pythonPath/);
    assert.match(installFailureMessage('py', 2, 'ERROR: No matching distribution'), /pip could not install remote-debug-training \(exit code 2\): see the terminal/);
    assert.match(installFailureMessage('/x/py', null, ''), /could not run \/x\/py/);
  });

  test('pythonPath goes to the workspace only for an interpreter inside a trusted workspace folder', () => {
    mock.folder('/ws');
    assert.equal(pythonPathTarget('/ws/.venv/bin/python'), vscode.ConfigurationTarget.Workspace);
    assert.equal(pythonPathTarget('/usr/bin/python3'), vscode.ConfigurationTarget.Global);
    assert.equal(pythonPathTarget('/wsx/bin/python'), vscode.ConfigurationTarget.Global);
    mock.trusted = false;
    assert.equal(pythonPathTarget('/ws/.venv/bin/python'), vscode.ConfigurationTarget.Global);
  });
});

describe('which Python installs the CLI', () => {
  beforeEach(() => mock.reset());

  function pythonExtension(executable: string | undefined, seen: unknown[] = []) {
    mock.extensions = ['ms-python.python'];
    mock.extensionExports['ms-python.python'] = {
      environments: {
        getActiveEnvironmentPath: (resource: unknown) => (seen.push(resource), { id: 'env', path: '/ws/.venv' }),
        resolveEnvironment: async () => ({ executable: { uri: executable ? Uri.file(executable) : undefined } }),
      },
    };
  }

  test("the Python extension's selected interpreter for the folder first", async () => {
    const seen: unknown[] = [];
    pythonExtension('/ws/.venv/bin/python', seen);
    const folder = Uri.file('/ws') as unknown as vscode.Uri;
    assert.deepEqual(await installPython({ pythonPath: '/p/python', folder, trusted: true }), { python: '/ws/.venv/bin/python', from: 'python-extension' });
    assert.equal(seen[0], folder);
  });

  test('then remoteDebug.pythonPath, then python3', async () => {
    assert.deepEqual(await installPython({ pythonPath: ' /p/python ', trusted: true }), { python: '/p/python', from: 'setting' });
    assert.deepEqual(await installPython({ pythonPath: '', trusted: true }), { python: defaultPython(), from: 'default' });
    assert.equal(defaultPython('win32'), 'python');
    assert.equal(defaultPython('linux'), 'python3');
  });

  test("in Restricted Mode the Python extension's (often workspace) interpreter is not used", async () => {
    pythonExtension('/ws/.venv/bin/python');
    assert.deepEqual(await installPython({ pythonPath: '', trusted: false }), { python: defaultPython(), from: 'default' });
  });

  test('a Python extension that is old, broken or has no interpreter counts as none', async () => {
    mock.extensions = ['ms-python.python'];
    mock.extensionExports['ms-python.python'] = { settings: {} }; // no environments API
    assert.equal(await selectedInterpreter(), undefined);
    mock.extensionExports['ms-python.python'] = {
      environments: { getActiveEnvironmentPath: () => { throw new Error('boom'); }, resolveEnvironment: async () => undefined },
    };
    assert.equal(await selectedInterpreter(), undefined);
    pythonExtension(undefined);
    assert.equal(await selectedInterpreter(), undefined);
    mock.extensions = [];
    assert.equal(await selectedInterpreter(), undefined);
  });
});

describe('the install terminal', () => {
  beforeEach(() => mock.reset());

  test('shows the command and its output, reports the exit code, and closes on a key once done', async () => {
    const pty = new ProcessPseudoterminal(process.execPath, ['-e', 'console.log("Successfully installed"); console.error("warn"); process.exit(3)']);
    let written = '';
    let closed: number | void | undefined;
    pty.onDidWrite((d) => (written += d));
    pty.onDidClose((c) => (closed = c ?? -1));
    pty.handleInput('x'); // before it runs: ignored
    pty.open();
    const result = await pty.result;
    assert.equal(result.exitCode, 3);
    assert.match(result.output, /Successfully installed/);
    assert.match(written, /^\$ .*node.* -e /);
    assert.match(written, /exited with code 3\. Press any key to close this terminal\./);
    assert.ok(!/[^\r]\n/.test(written), 'CRLF line ends for the terminal');
    assert.equal(closed, undefined);
    pty.handleInput('q');
    assert.equal(closed, 3);
  });

  test('a program that does not exist: no exception, the terminal says so', async () => {
    const pty = new ProcessPseudoterminal(path.join(tempDir('rd-nopy'), 'python3'), ['-m', 'pip']);
    let written = '';
    pty.onDidWrite((d) => (written += d));
    pty.open();
    const result = await pty.result;
    assert.equal(result.exitCode, null);
    assert.match(written, /python3: not found/);
  });

  test('toTerminalText turns LF into CRLF once', () => {
    assert.equal(toTerminalText('a\nb\r\nc'), 'a\r\nb\r\nc');
  });
});
