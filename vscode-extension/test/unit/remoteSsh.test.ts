import assert from 'node:assert/strict';
import { test } from 'node:test';

import { remoteSshUri, sshCommand, suggestedSettings } from '../../src/remoteSsh';

test('the Remote-SSH folder URI', () => {
  assert.equal(remoteSshUri('algo-1.local-1', '/opt/ml/code'), 'vscode-remote://ssh-remote+algo-1.local-1/opt/ml/code');
  assert.equal(remoteSshUri('algo-2.j', 'opt/ml/my code'), 'vscode-remote://ssh-remote+algo-2.j/opt/ml/my%20code');
  assert.throws(() => remoteSshUri('bad alias;rm', '/x'), /bad ssh alias/);
  assert.equal(sshCommand('algo-1.j'), 'ssh algo-1.j');
});

test('suggests only settings not already set that way', () => {
  const all = suggestedSettings({}, ['algo-1.j', 'algo-2.j']);
  assert.deepEqual(all.map((c) => c.key), ['localServerDownload', 'remotePlatform']);
  assert.equal(all[0].value, 'always');
  assert.deepEqual(all[1].value, { 'algo-1.j': 'linux', 'algo-2.j': 'linux' });

  const merged = suggestedSettings({ localServerDownload: 'always', remotePlatform: { other: 'windows', 'algo-1.j': 'linux' } }, ['algo-1.j', 'algo-2.j']);
  assert.deepEqual(merged.map((c) => c.key), ['remotePlatform']);
  assert.deepEqual(merged[0].value, { other: 'windows', 'algo-1.j': 'linux', 'algo-2.j': 'linux' }, "keeps the user's other hosts");

  assert.deepEqual(suggestedSettings({ localServerDownload: 'always', remotePlatform: { 'algo-1.j': 'linux' } }, ['algo-1.j']), []);
});
