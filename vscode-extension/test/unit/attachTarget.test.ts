import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { beforeEach, test } from 'node:test';

import * as vscode from 'vscode';

import { AttachTargets, candidateSubfolders, folderFor, isLocalPath, LOCAL_ROOTS_KEY } from '../../src/attachTarget';
import { jobJson, tempDir } from './helpers';
import { mock, Uri } from './vscode-mock';

beforeEach(() => mock.reset());

function memento() {
  const store = new Map<string, unknown>();
  return { get: <T>(k: string) => store.get(k) as T, update: async (k: string, v: unknown) => void store.set(k, v), store };
}

function workspace(...names: string[]) {
  const root = tempDir('rd-mr');
  const folders = names.map((name, index) => {
    fs.mkdirSync(path.join(root, name, 'training'), { recursive: true });
    return { uri: Uri.file(path.join(root, name)), name, index };
  });
  mock.workspaceFolders = folders;
  return folders as unknown as vscode.WorkspaceFolder[];
}

const sagemaker = (overrides = {}) => jobJson({ name: 'sm', backend: 'sagemaker', source_dir: null, code_dirs: { 'algo-1': '/opt/ml/code' }, ...overrides });
const pickCount = (fn: string) => mock.calls.filter((c) => c.fn === fn).length;

test('a local job: its source folder is the local root, the session folder the one holding it; nothing is asked', async () => {
  const [ws, other] = workspace('ws', 'other');
  const source = path.join(ws.uri.fsPath, 'training');
  const target = await new AttachTargets(memento()).resolve(jobJson({ source_dir: source }));
  assert.deepEqual(target, { folder: ws, localRoot: source });
  assert.equal(pickCount('showQuickPick') + pickCount('showWorkspaceFolderPick'), 0);
  // the folder that holds it even when another one comes first, or the workspace opened a folder inside it
  assert.equal((await new AttachTargets(memento()).resolve(jobJson({ source_dir: path.dirname(other.uri.fsPath) })))?.folder, ws);
});

test('a local job whose source folder is gone: the folder as before, mapped whole', async () => {
  const [ws] = workspace('ws');
  const target = await new AttachTargets(memento()).resolve(jobJson({ source_dir: path.join(ws.uri.fsPath, 'deleted') }));
  assert.deepEqual(target, { folder: ws, localRoot: undefined });
});

test('a SageMaker job: the user picks the local root once (the workspace folder first), then it is remembered', async () => {
  const [ws] = workspace('ws');
  const state = memento();
  mock.quickPicks.push((items) => items[0]);
  const target = await new AttachTargets(state).resolve(sagemaker());
  assert.deepEqual(target, { folder: ws, localRoot: ws.uri.fsPath });
  const pick = mock.calls.find((c) => c.fn === 'showQuickPick')!;
  assert.deepEqual(pick.args[0].map((i: { detail?: string }) => i.detail), [ws.uri.fsPath, path.join(ws.uri.fsPath, 'training'), undefined]);
  assert.match(pick.args[1].placeHolder, /Which local folder holds the code of sm \(what the job has in \/opt\/ml\/code\)\?/);
  assert.deepEqual(state.store.get(LOCAL_ROOTS_KEY), { sm: ws.uri.fsPath });
  // the next attach asks nothing
  assert.deepEqual(await new AttachTargets(state).resolve(sagemaker()), { folder: ws, localRoot: ws.uri.fsPath });
  assert.equal(pickCount('showQuickPick'), 1);
  // an s3:// source is not a local folder either
  assert.equal(isLocalPath('s3://bucket/code.tar.gz'), false);
  assert.equal(isLocalPath(null), false);
});

test("a SageMaker job's subfolder, or any folder (Browse…); dismissing attaches nothing", async () => {
  const [ws] = workspace('ws');
  mock.quickPicks.push((items) => items.find((i: { label: string }) => i.label.endsWith('training')));
  assert.equal((await new AttachTargets(memento()).resolve(sagemaker()))?.localRoot, path.join(ws.uri.fsPath, 'training'));
  mock.quickPicks.push((items) => items.at(-1));
  mock.openDialogs.push([Uri.file('/somewhere/else') as never]);
  assert.deepEqual(await new AttachTargets(memento()).resolve(sagemaker()), { folder: ws, localRoot: '/somewhere/else' });
  const dialog = mock.calls.find((c) => c.fn === 'showOpenDialog')!.args[0];
  assert.equal(dialog.canSelectFolders, true);
  assert.equal(dialog.defaultUri.fsPath, ws.uri.fsPath);
  mock.quickPicks.push(undefined);
  assert.equal(await new AttachTargets(memento()).resolve(sagemaker()), undefined);
});

test("the folder's remoteDebug.pathMappings wins: nothing to pick", async () => {
  const [ws] = workspace('ws');
  mock.folderConfig[ws.uri.fsPath] = { 'remoteDebug.pathMappings': [{ localRoot: '${workspaceFolder}/src', remoteRoot: '/opt/ml/code' }] };
  assert.deepEqual(await new AttachTargets(memento()).resolve(sagemaker()), { folder: ws, localRoot: undefined });
  assert.equal(pickCount('showQuickPick'), 0);
});

test('several folders and nothing to tell which: a workspace folder pick; a launch.json folder needs none', async () => {
  const [a, b] = workspace('a', 'b');
  mock.folderPicks.push((folders) => folders[1]);
  mock.quickPicks.push((items) => items[0]);
  assert.deepEqual(await new AttachTargets(memento()).resolve(sagemaker()), { folder: b, localRoot: b.uri.fsPath });
  assert.match(mock.calls.find((c) => c.fn === 'showWorkspaceFolderPick')!.args[0].placeHolder, /Which workspace folder holds the code of job sm\?/);
  mock.quickPicks.push((items) => items[0]);
  assert.deepEqual(await new AttachTargets(memento()).resolve(sagemaker(), a), { folder: a, localRoot: a.uri.fsPath });
  assert.equal(pickCount('showWorkspaceFolderPick'), 1);
  // a local job outside both folders: asked too
  mock.folderPicks.push(undefined);
  assert.equal(await new AttachTargets(memento()).resolve(jobJson({ source_dir: '/not/in/the/workspace' })), undefined);
  assert.equal(pickCount('showWorkspaceFolderPick'), 2);
});

test('no folder open: an error that says what to do', async () => {
  mock.workspaceFolders = undefined;
  await assert.rejects(new AttachTargets(memento()).resolve(sagemaker()), /open the folder with your training code first/);
});

test('Change Local Source Folder…: the current one first, the new one remembered', async () => {
  const [ws] = workspace('ws');
  const state = memento();
  const targets = new AttachTargets(state);
  await targets.remember('sm', ws.uri.fsPath);
  mock.quickPicks.push((items) => items.find((i: { label: string }) => i.label.endsWith('training')));
  assert.equal(await targets.change(sagemaker()), path.join(ws.uri.fsPath, 'training'));
  const items = mock.calls.find((c) => c.fn === 'showQuickPick')!.args[0];
  assert.deepEqual([items[0].description, items[0].detail], ['current', ws.uri.fsPath]);
  assert.equal(targets.known(sagemaker()), path.join(ws.uri.fsPath, 'training'));
});

test('helpers: the deepest folder holding a path; subfolders worth offering', () => {
  const folders = [{ uri: { fsPath: '/w' } }, { uri: { fsPath: '/w/inner' } }];
  assert.equal(folderFor(folders, '/w/inner/x'), folders[1]);
  assert.equal(folderFor(folders, '/w/x'), folders[0]);
  assert.equal(folderFor(folders, '/'), folders[0], 'a folder inside the path');
  assert.equal(folderFor(folders, '/elsewhere'), undefined);
  const list = () => ['.git', 'src', 'node_modules', 'venv', 'README.md', 'train'];
  assert.deepEqual(candidateSubfolders('/w', list, (p) => !p.endsWith('.md')), ['/w/src', '/w/train']);
});
