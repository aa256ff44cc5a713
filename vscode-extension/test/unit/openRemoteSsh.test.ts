// Open Remote-SSH from a remote window, and the ask-once before ~/.ssh/config is edited.

import assert from 'node:assert/strict';
import * as path from 'node:path';
import { beforeEach, describe, test } from 'node:test';

import * as vscode from 'vscode';

import { AttachProcess } from '../../src/attach';
import { remoteWindowKind } from '../../src/remoteSsh';
import { SSH_CONFIG_CONSENT_KEY, SshConfigConsent, sshIncludeArgs, startsWithOurInclude, stateRoot, useSshConsent } from '../../src/sshConsent';
import { commandsHarness, fakeCli, tempDir } from './helpers';
import { mock } from './vscode-mock';

const sshConfig = { 'ssh-config': { stdout: JSON.stringify({ aliases: ['algo-1.local-1'], config: '/c' }) } };

function store(initial: Record<string, unknown> = {}) {
  const map = new Map(Object.entries(initial));
  return { get: <T>(k: string) => map.get(k) as T | undefined, update: async (k: string, v: unknown) => void map.set(k, v), map };
}

const sshConfigRuns = (invocations: () => Array<{ args: string[] }>) => invocations().filter((i) => i.args[0] === 'ssh-config').length;

describe('Open Remote-SSH in a remote window', () => {
  beforeEach(() => mock.reset());

  test('does not claim Remote-SSH is missing: says a local window is needed, offers ssh from here', async () => {
    mock.remoteName = 'ssh-remote'; // Remote-SSH runs on the laptop: invisible from this side, so not in mock.extensions
    const { run } = commandsHarness(sshConfig);
    mock.messageAnswers.push('Allow', 'Copy ssh Command');
    await run('remoteDebug.openRemoteSsh');
    const said = mock.messages('showWarningMessage')[1];
    assert.match(said, /this is a Remote-SSH window/);
    assert.match(said, /needs a local VS Code window/);
    assert.match(said, /"ssh algo-1\.local-1"/);
    assert.doesNotMatch(said, /not installed/);
    assert.equal(mock.clipboard, 'ssh algo-1.local-1');
    assert.equal(mock.executed.filter((e) => e.command === 'vscode.openFolder').length, 0, 'no ssh-remote URI from a remote window');
  });

  test('a WSL window says so, and Open Terminal runs ssh there', async () => {
    mock.remoteName = 'wsl';
    mock.extensions = ['ms-vscode-remote.remote-ssh']; // even if it were visible: the window is remote
    const { run } = commandsHarness(sshConfig);
    mock.messageAnswers.push('Allow', 'Open Terminal');
    await run('remoteDebug.openRemoteSsh');
    assert.match(mock.messages('showWarningMessage')[1], /this is a WSL window/);
    assert.deepEqual(mock.terminals.map((t) => t.sent), [['ssh algo-1.local-1']]);
    assert.equal(mock.executed.filter((e) => e.command === 'vscode.openFolder').length, 0);
  });

  test('a local window without Remote-SSH keeps the "not installed" message', async () => {
    const { run } = commandsHarness(sshConfig);
    mock.messageAnswers.push('Allow', undefined);
    await run('remoteDebug.openRemoteSsh');
    assert.match(mock.messages('showWarningMessage')[1], /Remote - SSH extension \(ms-vscode-remote\.remote-ssh\) is not installed/);
  });

  test('remote window kinds read the way people call them', () => {
    assert.equal(remoteWindowKind('ssh-remote'), 'Remote-SSH');
    assert.equal(remoteWindowKind('dev-container'), 'Dev Container');
    assert.equal(remoteWindowKind('something-new'), 'something-new');
  });
});

describe('ask once before editing ~/.ssh/config', () => {
  beforeEach(() => mock.reset());

  test('Not Now: no ssh-config run, an explanation, and the question comes again next time', async () => {
    mock.extensions = ['ms-vscode-remote.remote-ssh'];
    const { run, invocations, commands } = commandsHarness(sshConfig);
    mock.messageAnswers.push('Not Now', undefined, 'Not Now', undefined);
    await run('remoteDebug.openRemoteSsh');
    const modal = mock.calls.find((c) => c.fn === 'showWarningMessage')!;
    assert.equal(modal.args[1].modal, true);
    assert.match(modal.args[1].detail, /Include ".*ssh\/config"/);
    assert.deepEqual(modal.args.slice(2), ['Allow', 'Not Now', 'Never']);
    assert.equal(sshConfigRuns(invocations), 0, 'nothing written without a yes');
    assert.match(mock.messages('showInformationMessage')[0], /Open Remote-SSH needs the job's ssh Host entries.*remote-debug ssh-config local-1/);
    assert.equal(commands.sshConsent.decision(), undefined);
    await run('remoteDebug.openRemoteSsh');
    assert.equal(mock.messages('showWarningMessage').length, 2, 'asked again');
    assert.equal(mock.executed.filter((e) => e.command === 'vscode.openFolder').length, 0);
  });

  test('Never: remembered, never asked again; "Allow…" in the explanation still lets the user change their mind', async () => {
    mock.extensions = ['ms-vscode-remote.remote-ssh'];
    const { run, invocations, commands } = commandsHarness(sshConfig);
    mock.messageAnswers.push('Never', undefined);
    await run('remoteDebug.openRemoteSsh');
    assert.equal(commands.sshConsent.decision(), 'never');
    mock.messageAnswers.push('Allow…', 'Allow', 'Not Now' /* the Remote-SSH settings offer */);
    await run('remoteDebug.openRemoteSsh');
    assert.equal(mock.messages('showWarningMessage').filter((m) => /add one line/.test(m)).length, 2, 'asked only on request');
    assert.equal(commands.sshConsent.decision(), 'allowed');
    assert.equal(sshConfigRuns(invocations), 1);
    assert.equal(mock.executed.filter((e) => e.command === 'vscode.openFolder').length, 1);
  });

  test('Allow: remembered; the next Open Remote-SSH goes straight on', async () => {
    mock.extensions = ['ms-vscode-remote.remote-ssh'];
    const { run, invocations } = commandsHarness(sshConfig);
    mock.messageAnswers.push('Allow', 'Never Ask');
    await run('remoteDebug.openRemoteSsh');
    await run('remoteDebug.openRemoteSsh');
    assert.equal(mock.messages('showWarningMessage').length, 1);
    assert.equal(sshConfigRuns(invocations), 2);
  });

  test('attach passes --no-ssh-include until the user allows the edit (or the line is already there)', () => {
    const state = store();
    let present = false;
    const consent = new SshConfigConsent(state, () => present);
    const registration = useSshConsent(consent);
    try {
      assert.deepEqual(sshIncludeArgs(), ['--no-ssh-include'], 'not asked yet: no edit');
      state.map.set(SSH_CONFIG_CONSENT_KEY, 'never');
      assert.deepEqual(sshIncludeArgs(), ['--no-ssh-include']);
      present = true;
      assert.deepEqual(sshIncludeArgs(), [], 'already there: nothing would change');
      present = false;
      state.map.set(SSH_CONFIG_CONSENT_KEY, 'allowed');
      assert.deepEqual(sshIncludeArgs(), []);

      // and AttachProcess really puts it on the attach command line
      state.map.delete(SSH_CONFIG_CONSENT_KEY);
      const { cli } = fakeCli({});
      const folder = mock.folder(tempDir('rd-ws')) as unknown as vscode.WorkspaceFolder;
      const proc = new AttachProcess({ job: 'local-1', ranks: undefined, folder }, cli, {
        debugType: 'auto',
        pathMappings: [],
        justMyCode: false,
        readyTimeoutSeconds: 600,
      } as never);
      assert.ok(proc.process.inv.args.includes('--no-ssh-include'));
    } finally {
      registration.dispose();
    }
    assert.deepEqual(sshIncludeArgs(), [], 'without a registered consent: the CLI default');
  });

  test('the Include line counts only as the first line, quoted or not', () => {
    const root = stateRoot({}, '/home/u');
    assert.equal(root, '/home/u/.remote-debug');
    assert.equal(stateRoot({ REMOTE_DEBUG_HOME: '~/rd' }, '/home/u'), '/home/u/rd');
    const line = `Include "${path.join(root, 'ssh', 'config')}"`;
    assert.equal(startsWithOurInclude(`${line}\nHost x\n`, root), true);
    assert.equal(startsWithOurInclude(`Include ${path.join(root, 'ssh', 'config')}\n`, root), true);
    assert.equal(startsWithOurInclude(`Host x\n${line}\n`, root), false, 'elsewhere: the CLI would move it (an edit)');
    assert.equal(startsWithOurInclude('Include ~/.ssh/other\n', root), false);
    assert.equal(startsWithOurInclude('', root), false);
  });
});
