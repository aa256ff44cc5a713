import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import {
  compoundName,
  configName,
  connectTarget,
  jobSessionName,
  pathMappings,
  rankConfiguration,
  rankTag,
  resolveDebugType,
  sessionName,
} from '../../src/debugConfig';
import { COMPOUND_NAME_TEMPLATE, CONFIG_NAME_TEMPLATE, formatConfigNamePrefix } from '../../src/generated/events';

describe('debug type', () => {
  test('auto: debugpy when the Python debugger is installed, else our own type', () => {
    assert.equal(resolveDebugType('auto', ['ms-python.debugpy']), 'debugpy');
    assert.equal(resolveDebugType('auto', ['MS-Python.python']), 'debugpy');
    assert.equal(resolveDebugType('auto', ['vscode.git']), 'remote-debug');
    assert.equal(resolveDebugType(undefined, []), 'remote-debug');
  });
  test('an explicit setting wins', () => {
    assert.equal(resolveDebugType('remote-debug', ['ms-python.debugpy']), 'remote-debug');
    assert.equal(resolveDebugType('debugpy', []), 'debugpy');
  });
});

describe('path mappings', () => {
  test('default: workspace folder <-> the code dir the CLI reports', () => {
    assert.deepEqual(pathMappings([], '/ws', '/jobs/j/code'), [{ localRoot: '/ws', remoteRoot: '/jobs/j/code' }]);
  });
  test("default remote root is SageMaker's /opt/ml/code", () => {
    assert.deepEqual(pathMappings(undefined, '/ws', undefined), [{ localRoot: '/ws', remoteRoot: '/opt/ml/code' }]);
  });
  test('the setting wins, with ${workspaceFolder} expanded; broken entries are ignored', () => {
    const setting = [
      { localRoot: '${workspaceFolder}/src', remoteRoot: '/opt/ml/code' },
      { localRoot: '', remoteRoot: '/x' },
      { localRoot: '/a' } as never,
    ];
    assert.deepEqual(pathMappings(setting, '/ws', '/ignored'), [{ localRoot: '/ws/src', remoteRoot: '/opt/ml/code' }]);
  });
  test('no workspace and no setting: no mapping', () => {
    assert.deepEqual(pathMappings([], undefined, '/c'), []);
  });
  test("the job's source folder is the local root: <ws>/training, not <ws>, holds what is in the code dir", () => {
    assert.deepEqual(pathMappings([], '/ws', '/jobs/j/code', '/ws/training'), [{ localRoot: '/ws/training', remoteRoot: '/jobs/j/code' }]);
    assert.deepEqual(pathMappings(undefined, '/ws', undefined, '/elsewhere/src'), [{ localRoot: '/elsewhere/src', remoteRoot: '/opt/ml/code' }]);
    // the setting still wins
    const setting = [{ localRoot: '${workspaceFolder}/lib', remoteRoot: '/opt/ml/code/lib' }];
    assert.deepEqual(pathMappings(setting, '/ws', '/c', '/ws/training'), [{ localRoot: '/ws/lib', remoteRoot: '/opt/ml/code/lib' }]);
  });
});

describe('rank configurations', () => {
  test('sessions are named rank first (64 rows stay apart in the Call Stack), tagged, attach+connect', () => {
    const c = rankConfiguration({ job: 'j', rank: 3, node: 'algo-2', port: 41234, debugType: 'remote-debug', workspaceFolder: '/ws', codeDir: '/opt/ml/code' });
    assert.equal(c.name, 'rank 3 · algo-2 · j');
    assert.equal(c.name, sessionName('j', 3, 'algo-2'));
    assert.equal(sessionName('a{rank}', 1, 'n'), 'rank 1 · n · a{rank}', 'a job name is not a template');
    assert.equal(jobSessionName('j'), 'Remote Debug: j');
    // the CLI's launch.json names (one definition, generated)
    assert.equal(configName('j', 3, 'algo-2'), 'remote-debug: j rank 3 (algo-2)');
    assert.equal(compoundName('j'), 'remote-debug: j all ranks');
    // one definition, generated from remote_debug/laptop/wire/events.py
    assert.equal(CONFIG_NAME_TEMPLATE, 'remote-debug: {job} rank {rank} ({node})');
    assert.equal(COMPOUND_NAME_TEMPLATE, 'remote-debug: {job} all ranks');
    assert.equal(configName('a$&{rank}', 0, 'n'), 'remote-debug: a$&{rank} rank 0 (n)', 'a job name is not a template');
    assert.ok(configName('j', 0, 'n').startsWith(formatConfigNamePrefix('j')) && compoundName('j').startsWith(formatConfigNamePrefix('j')));
    assert.equal(c.type, 'remote-debug');
    assert.equal(c.request, 'attach');
    assert.deepEqual(c.connect, { host: '127.0.0.1', port: 41234 });
    assert.deepEqual(c.pathMappings, [{ localRoot: '/ws', remoteRoot: '/opt/ml/code' }]);
    assert.equal(c.justMyCode, false);
    assert.equal(c.redirectOutput, true, "what the rank prints reaches its Debug Console (debugpy's default for attach: no)");
    assert.deepEqual(rankTag(c), { job: 'j', rank: 3, node: 'algo-2' });
  });
  test('debugpy configurations for the Python extension', () => {
    const c = rankConfiguration({ job: 'j', rank: 0, node: 'algo-1', port: 1, debugType: 'debugpy', justMyCode: true });
    assert.equal(c.type, 'debugpy');
    assert.equal(c.justMyCode, true);
  });
  test('refuses a rank without a port', () => {
    assert.throws(() => rankConfiguration({ job: 'j', rank: 1, node: 'a', port: 0, debugType: 'debugpy' }), /rank 1 of job j has no usable debug port/);
  });
  test('sessions that are not ours have no tag', () => {
    assert.equal(rankTag({ name: 'Python: Current File' }), undefined);
    assert.equal(rankTag(undefined), undefined);
  });
});

describe('connect target of our debug type', () => {
  test('connect.host/port, top-level host/port, default host', () => {
    assert.deepEqual(connectTarget({ connect: { host: '127.0.0.2', port: 4000 } }), { host: '127.0.0.2', port: 4000 });
    assert.deepEqual(connectTarget({ connect: { port: 4001 } }), { host: '127.0.0.1', port: 4001 });
    assert.deepEqual(connectTarget({ host: 'localhost', port: '4002' }), { host: 'localhost', port: 4002 });
  });
  test('missing or bad port: a message saying what to do', () => {
    assert.match(connectTarget({}) as string, /no "connect"/);
    assert.match(connectTarget({ connect: { port: 70000 } }) as string, /Attach All Ranks/);
  });
});
