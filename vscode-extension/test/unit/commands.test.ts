import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { beforeEach, describe, test } from 'node:test';

import * as vscode from 'vscode';

import { rankConfiguration } from '../../src/debugConfig';
import { commandsHarness, FAKE_CLI, jobJson, scaleJob, ScenarioStep, tempDir, until } from './helpers';
import { mock, Uri } from './vscode-mock';

function setup(scenario: Record<string, ScenarioStep>, jobs = [jobJson()]) {
  return commandsHarness(scenario, jobs);
}

describe('commands', () => {
  beforeEach(() => mock.reset());

  test('refresh fills the model, or shows why it cannot', async () => {
    const ok = setup({});
    await ok.run('remoteDebug.refresh');
    assert.deepEqual(ok.model.list().map((j) => j.info.name), ['local-1']);

    mock.reset();
    const bad = setup({ jobs: { stderr: 'remote-debug: error: AWS credentials expired\n', exit: 2 } });
    await bad.run('remoteDebug.refresh');
    assert.equal(bad.model.error, 'AWS credentials expired');
  });

  test('Attach All Ranks takes the only running job without asking', async () => {
    const { run, requests, ws } = setup({}, [jobJson(), jobJson({ name: 'done', status: 'Completed' })]);
    await run('remoteDebug.attachAllRanks');
    assert.equal(mock.calls.filter((c) => c.fn === 'showQuickPick').length, 0);
    assert.deepEqual(requests.map((r) => [r.job, r.ranks, r.folder.uri.fsPath]), [['local-1', undefined, ws]]);
  });

  test('Attach to Job… asks which job and uses the default ranks setting', async () => {
    mock.config['remoteDebug.defaultRanks'] = '0,2';
    const { run, requests } = setup({}, [jobJson({ name: 'a', created: 2 }), jobJson({ name: 'b', created: 1 })]);
    mock.quickPicks.push((items) => items.find((i: { label: string }) => i.label === 'b'));
    await run('remoteDebug.attachToJob');
    const pick = mock.calls.find((c) => c.fn === 'showQuickPick')!;
    assert.deepEqual(pick.args[0].map((i: { label: string }) => i.label), ['a', 'b']);
    assert.deepEqual(requests.map((r) => [r.job, r.ranks]), [['b', [0, 2]]]);
  });

  test('Attach Rank… from the palette asks for ranks; from a rank item it attaches that rank', async () => {
    const { run, requests } = setup({});
    mock.quickPicks.push((items) => items.filter((i: { label: string }) => i.label === 'rank 1'));
    await run('remoteDebug.attachRank');
    await run('remoteDebug.attachRank', { kind: 'rank', job: 'local-1', node: 'algo-1', rank: 0 });
    assert.deepEqual(requests.map((r) => r.ranks), [[1], [0]]);
    assert.equal(mock.calls.find((c) => c.fn === 'showQuickPick')?.args[1].canPickMany, true);
  });

  test('Attach Rank… at 8 x 8 ranks: whole nodes and single ranks in one pick, all ranks in one click', async () => {
    const { run, requests } = setup({}, [scaleJob(8, 8)]);
    const pick = (...labels: string[]) => (items: Array<{ label: string }>) => items.filter((i) => labels.includes(i.label));
    mock.quickPicks.push(pick('algo-3 · ranks 16-23', 'rank 2', 'rank 17'), pick('All ranks (64)'), undefined);
    await run('remoteDebug.attachRank');
    await run('remoteDebug.attachRank');
    await run('remoteDebug.attachRank'); // dismissed
    assert.deepEqual(requests.map((r) => r.ranks), [[2, 16, 17, 18, 19, 20, 21, 22, 23], undefined]);
    await run('remoteDebug.attachAllRanks');
    assert.equal(mock.calls.filter((c) => c.fn === 'showQuickPick').length, 3, 'Attach All Ranks asks nothing');
    assert.deepEqual(requests[2].ranks, undefined);
  });

  test("Attach to This Node's Ranks: a node item attaches exactly that node's ranks", async () => {
    const { run, requests, model } = setup({}, [scaleJob(8, 8)]);
    await run('remoteDebug.refresh');
    await run('remoteDebug.attachNode', { kind: 'node', job: 'big', node: 'algo-2' });
    assert.deepEqual(requests.map((r) => [r.job, r.ranks]), [['big', [8, 9, 10, 11, 12, 13, 14, 15]]]);
    assert.equal(mock.calls.filter((c) => c.fn === 'showQuickPick').length, 0);

    // a node whose ranks are not known yet (SageMaker before its ranks report): says what to do instead
    model.upsertJob(scaleJob(2, 0, { name: 'sm' }));
    await run('remoteDebug.attachNode', { kind: 'node', job: 'sm', node: 'algo-1' });
    assert.match(mock.messages('showErrorMessage')[0], /ranks on algo-1 of sm are not known yet: use Attach All Ranks/);
    assert.equal(requests.length, 1);
  });

  test('Detach: a rank item stops that rank, a job item the whole job', async () => {
    const { run, detached } = setup({});
    await run('remoteDebug.detach', { kind: 'rank', job: 'local-1', node: 'algo-1', rank: 1 });
    await run('remoteDebug.detach', { kind: 'job', job: 'local-1' });
    assert.deepEqual(detached, ['local-1#1', 'local-1']);
  });

  test('no running job: says so and offers to launch one', async () => {
    const { run, requests } = setup({}, [jobJson({ status: 'Completed' })]);
    await run('remoteDebug.attachAllRanks');
    assert.match(mock.messages('showInformationMessage')[0], /no running jobs/);
    assert.equal(requests.length, 0);
  });

  test('no folder open: an error that says what to do', async () => {
    const { run, requests } = setup({});
    mock.workspaceFolders = undefined;
    await run('remoteDebug.attachAllRanks');
    assert.match(mock.messages('showErrorMessage')[0], /^Remote Debug: open the folder with your training code first/);
    assert.equal(requests.length, 0);
  });

  test("a job whose source is a subfolder: the folder that holds it, and the subfolder <-> the code dir", async () => {
    const other = tempDir('rd-other');
    const src = tempDir('rd-src');
    const sub = path.join(src, 'sub');
    fs.mkdirSync(sub);
    const code = '/jobs/local-1/nodes/algo-1/code';
    const { run, requests } = setup({}, [jobJson({ source_dir: sub })]);
    mock.workspaceFolders = [
      { uri: Uri.file(other), name: 'other', index: 0 },
      { uri: Uri.file(src), name: 'src', index: 1 },
    ];
    await run('remoteDebug.attachAllRanks');
    assert.equal(requests[0].folder.uri.fsPath, src);
    assert.equal(requests[0].localRoot, sub);
    // what the rank sessions get (AttachManager builds them from the request): sub's contents are in the code dir
    const config = rankConfiguration({
      job: 'local-1', rank: 0, node: 'algo-1', port: 40000, debugType: 'remote-debug',
      workspaceFolder: requests[0].folder.uri.fsPath, localRoot: requests[0].localRoot, codeDir: code,
    });
    assert.deepEqual(config.pathMappings, [{ localRoot: sub, remoteRoot: code }]);
    assert.equal(mock.calls.filter((c) => c.fn === 'showQuickPick' || c.fn === 'showWorkspaceFolderPick').length, 0, 'nothing asked');
  });

  test('a SageMaker job: its local folder is picked once, then every attach (and Sync and Re-run) uses it', async () => {
    const sm = jobJson({ name: 'sm', backend: 'sagemaker', source_dir: null, code_dirs: { 'algo-1': '/opt/ml/code' } });
    const { run, requests, ws } = setup({}, [sm]);
    fs.mkdirSync(path.join(ws, 'training'));
    mock.quickPicks.push((items) => items.find((i: { label: string }) => i.label.endsWith('training')));
    await run('remoteDebug.attachAllRanks');
    await run('remoteDebug.attachAllRanks');
    assert.deepEqual(requests.map((r) => [r.folder.uri.fsPath, r.localRoot]), [
      [ws, path.join(ws, 'training')],
      [ws, path.join(ws, 'training')],
    ]);
    assert.equal(mock.calls.filter((c) => c.fn === 'showQuickPick').length, 1, 'asked once');
  });

  test('Attach Rank… offers the paused and failed ranks as one item', async () => {
    const job = jobJson({ nproc_per_node: 4, held_ranks: [{ rank: 2, node: 'algo-1', seconds_left: 60, error: 'boom', root_cause: true, held_for: null }] });
    const { run, requests, model } = setup({}, [job]);
    await run('remoteDebug.refresh');
    model.applyEvent('local-1', { event: 'rank-ready', v: 1, rank: 0, node: 'algo-1', local_port: 1, remote_port: 2, state: 'waiting', ide: 'vscode', code_dir: '/c' });
    mock.quickPicks.push((items) => items.filter((i: { label: string }) => i.label.startsWith('Paused and failed ranks')));
    await run('remoteDebug.attachRank');
    const items = mock.calls.find((c) => c.fn === 'showQuickPick')!.args[0];
    assert.deepEqual([items[1].label, items[1].description], ['Paused and failed ranks (2)', '0, 2']);
    assert.deepEqual(requests.map((r) => r.ranks), [[0, 2]]);
  });

  test('settings are read per workspace folder: Attach to Job… uses that folder\'s default ranks', async () => {
    const { run, requests, ws } = setup({});
    mock.config['remoteDebug.defaultRanks'] = 'all';
    mock.folderConfig[ws] = { 'remoteDebug.defaultRanks': '1' };
    mock.quickPicks.push((items) => items[0]);
    await run('remoteDebug.attachToJob');
    assert.deepEqual(requests.map((r) => r.ranks), [[1]]);
  });

  test('long commands can be cancelled: the CLI process is stopped, nothing is said', async () => {
    const { run, events } = setup({ stacks: { hold: true } });
    const stacks = run('remoteDebug.showStacks');
    await until('stacks to run', () => events().some((e) => e.args[0] === 'stacks'));
    const progress = mock.calls.find((c) => c.fn === 'withProgress' && /stacks of/.test(c.args[0].title))!;
    assert.equal(progress.args[0].cancellable, true);
    mock.progressTokens.at(-1)!.cancel();
    await stacks;
    await until('the CLI to get SIGINT', () => events().some((e) => e.args[0] === 'stacks' && e.signal === 'SIGINT'));
    assert.deepEqual(mock.messages('showErrorMessage'), []);
    assert.equal(mock.documents.length, 0);
  });

  test('Open Remote-SSH without the Remote-SSH extension offers plain ssh', async () => {
    const { run, invocations } = setup({ 'ssh-config': { stdout: JSON.stringify({ aliases: ['algo-1.local-1'], config: '/c' }) } });
    mock.messageAnswers.push('Allow', 'Open Terminal'); // Allow: the ask-once for ~/.ssh/config
    await run('remoteDebug.openRemoteSsh');
    assert.deepEqual(invocations().map((i) => i.args[0]), ['jobs', 'ssh-config']);
    assert.match(mock.messages('showWarningMessage')[0], /add one line to ~\/\.ssh\/config/);
    assert.match(mock.messages('showWarningMessage')[1], /Remote - SSH extension .* is not installed.*"algo-1.local-1"/);
    assert.deepEqual(mock.terminals.map((t) => t.sent), [['ssh algo-1.local-1']]);
    assert.equal(mock.executed.filter((e) => e.command === 'vscode.openFolder').length, 0);
  });

  test('Open Remote-SSH asks before changing settings, then opens the node', async () => {
    mock.extensions = ['ms-vscode-remote.remote-ssh'];
    const aliases = ['algo-1.local-1', 'algo-2.local-1'];
    const { run, model } = setup({ 'ssh-config': { stdout: JSON.stringify({ aliases }) } }, [jobJson({ nodes: ['algo-1', 'algo-2'], code_dirs: { 'algo-2': '/opt/ml/code' } })]);
    mock.messageAnswers.push('Allow', 'Change Settings');
    await run('remoteDebug.openRemoteSsh', { kind: 'node', job: 'local-1', node: 'algo-2' });
    assert.ok(model.get('local-1'));
    const prompt = mock.calls.find((c) => c.fn === 'showInformationMessage')!;
    assert.equal(prompt.args[1].modal, true);
    assert.match(prompt.args[1].detail, /localServerDownload/);
    assert.deepEqual(mock.configUpdates.map((u) => [u.section, u.key, u.target]), [
      ['remote.SSH', 'localServerDownload', vscode.ConfigurationTarget.Global],
      ['remote.SSH', 'remotePlatform', vscode.ConfigurationTarget.Global],
    ]);
    const open = mock.executed.find((e) => e.command === 'vscode.openFolder')!;
    assert.equal(String(open.args[0]), 'vscode-remote://ssh-remote+algo-2.local-1/opt/ml/code');
    assert.deepEqual(open.args[1], { forceNewWindow: true });

    // settings already set: no second prompt
    mock.calls = [];
    await run('remoteDebug.openRemoteSsh', { kind: 'node', job: 'local-1', node: 'algo-1' });
    assert.equal(mock.messages('showInformationMessage').length, 0);
  });

  test('Open Remote-SSH changes nothing without consent, and "Never Ask" sticks', async () => {
    mock.extensions = ['ms-vscode-remote.remote-ssh'];
    const { run } = setup({ 'ssh-config': { stdout: JSON.stringify({ aliases: ['algo-1.local-1'] }) } });
    mock.messageAnswers.push('Allow', 'Never Ask');
    await run('remoteDebug.openRemoteSsh');
    await run('remoteDebug.openRemoteSsh');
    assert.equal(mock.configUpdates.length, 0);
    assert.equal(mock.messages('showInformationMessage').length, 1, 'asked once');
    assert.equal(mock.executed.filter((e) => e.command === 'vscode.openFolder').length, 2);
  });

  test('Show Stacks: a clear message while the CLI has no stacks command', async () => {
    const { run } = setup({});
    await run('remoteDebug.showStacks');
    assert.match(mock.messages('showInformationMessage')[0], /Show Stacks is not available yet/);
    assert.deepEqual(mock.messages('showErrorMessage'), []);
  });

  test('Show Stacks: shows what a CLI with stacks prints in the Stacks view (Open as JSON: the document)', async () => {
    const { run, invocations, commands } = setup({ stacks: { stdout: '{"ranks": [{"rank": 0, "frames": ["main"]}]}' } });
    await run('remoteDebug.showStacks');
    assert.deepEqual(invocations()[1].args, ['stacks', 'local-1', '--json']);
    assert.equal(mock.documents.length, 0, 'no Untitled buffer to save');
    assert.deepEqual(commands.stacks.document?.classes.map((c) => c.ranks), [[0]]);
    await run('remoteDebug.stacks.openJson');
    assert.equal(mock.documents[0].language, 'json');
    assert.match(mock.documents[0].content, /"frames"/);
  });

  test('Stop Job asks first, detaches, stops through the CLI', async () => {
    const stopped = jobJson({ status: 'Stopped', secondary_status: 'Stopped' });
    const { run, invocations, detached, model } = setup({ stop: { stdout: JSON.stringify(stopped) } });
    await run('remoteDebug.refresh');
    mock.messageAnswers.push(undefined); // dismissed
    await run('remoteDebug.stopJob', { kind: 'job', job: 'local-1' });
    assert.equal(invocations().filter((i) => i.args[0] === 'stop').length, 0);
    assert.match(mock.messages('showWarningMessage')[0], /Stop job local-1\?/);
    mock.messageAnswers.push('Stop Job');
    await run('remoteDebug.stopJob', { kind: 'job', job: 'local-1' });
    assert.deepEqual(detached, ['local-1']);
    assert.deepEqual(invocations().find((i) => i.args[0] === 'stop')?.args, ['stop', 'local-1', '--json']);
    assert.equal(model.get('local-1')?.info.status, 'InProgress', 'the fake CLI lists it running again afterwards');
  });

  test('Launch Local Job… runs launch --local with the script and the ranks asked for', async () => {
    const launched = jobJson({ name: 'local-2' });
    const { run, invocations, ws, model } = setup({ launch: { stdout: JSON.stringify(launched) } });
    mock.findFiles = [Uri.file(path.join(ws, 'a.py')), Uri.file(path.join(ws, 'train', 'main.py'))];
    mock.quickPicks.push((items) => items.find((i: { label: string }) => i.label === 'train/main.py'));
    mock.inputBoxes.push('4');
    mock.quickPicks.push(() => []); // no launch options
    await run('remoteDebug.launchLocalJob');
    const launch = invocations().find((i) => i.args[0] === 'launch')!;
    const python = launch.args[launch.args.indexOf('--') + 1];
    assert.deepEqual(launch.args, ['launch', '--local', '--nproc-per-node', '4', '--wait', '300', '--source-dir', ws, '--json', '--', python, 'train/main.py']);
    assert.equal(python, 'python3', `no pythonPath and a relative CLI: python3 (cli is ${FAKE_CLI})`);
    assert.ok(model.get('local-2'));
    assert.match(mock.messages('showInformationMessage')[0], /launched local-2.*wait up to 300 s/);
  });
});
