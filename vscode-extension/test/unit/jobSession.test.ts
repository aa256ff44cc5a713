import assert from 'node:assert/strict';
import { test } from 'node:test';

import * as vscode from 'vscode';

import { childOptions, JobParentAdapter, parentAnswer, parentConfiguration, parentTag } from '../../src/jobSession';

test("the job's session is marked as such, and whose it is", () => {
  const c = parentConfiguration('big', 'big#2');
  assert.equal(c.type, 'remote-debug');
  assert.equal(c.name, 'Remote Debug: big');
  assert.deepEqual(parentTag(c), { job: 'big', id: 'big#2' });
  assert.equal(parentTag({ name: 'rank 0 · algo-1 · big', remoteDebug: { job: 'big', rank: 0 } }), undefined);
});

test('the rank sessions go under it: compact, and each rank still stops on its own', () => {
  const parent = { id: 'p' } as unknown as vscode.DebugSession;
  assert.deepEqual(childOptions(parent), { parentSession: parent, compact: true, lifecycleManagedByParent: false });
});

test('its inline adapter answers the workbench: capabilities then initialized, no threads, no breakpoints, no evaluation', async () => {
  const adapter = new JobParentAdapter();
  const sent: Array<Record<string, unknown>> = [];
  adapter.onDidSendMessage((m) => sent.push(m as Record<string, unknown>));
  const request = (seq: number, command: string) => adapter.handleMessage({ type: 'request', seq, command } as vscode.DebugProtocolMessage);
  request(1, 'initialize');
  request(2, 'attach');
  request(3, 'threads');
  request(4, 'setBreakpoints');
  request(5, 'evaluate');
  request(6, 'disconnect');
  adapter.handleMessage({ type: 'event', event: 'x' } as vscode.DebugProtocolMessage); // not a request: ignored
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(
    sent.map((m) => [m.type, m.command ?? m.event, m.request_seq, m.success]),
    [
      ['response', 'initialize', 1, true],
      ['event', 'initialized', undefined, undefined],
      ['response', 'attach', 2, true],
      ['response', 'threads', 3, true],
      ['response', 'setBreakpoints', 4, true],
      ['response', 'evaluate', 5, false],
      ['response', 'disconnect', 6, true],
    ],
  );
  assert.deepEqual(sent[0].body, { supportsConfigurationDoneRequest: true, supportsRestartRequest: true });
  assert.deepEqual(sent[3].body, { threads: [] });
  assert.deepEqual(sent[4].body, { breakpoints: [] });
  assert.match(String(sent[5].message), /select a rank's session/);
  assert.deepEqual(new Set(sent.map((m) => m.seq)).size, sent.length, 'each message its own seq');
  adapter.dispose();
  request(7, 'threads');
  await new Promise((r) => setImmediate(r));
  assert.equal(sent.length, 7, 'nothing after dispose');
  assert.equal(parentAnswer('configurationDone').success, true);
});
