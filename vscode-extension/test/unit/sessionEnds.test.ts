import assert from 'node:assert/strict';
import { test } from 'node:test';

import { RestartBudget, SessionEnds } from '../../src/sessionEnds';

test("a session's end: the first sign wins", () => {
  const ends = new SessionEnds();
  // the tunnel dropped: the adapter's error first, VS Code's own disconnect after it
  ends.lost('a');
  ends.request('a', 'disconnect');
  assert.equal(ends.ended('a'), 'connection-lost');
  // the user stopped it: the disconnect first, the socket closing after it
  ends.request('b', 'continue');
  ends.request('b', 'disconnect');
  ends.lost('b');
  assert.equal(ends.ended('b'), 'asked');
  // the rank's process ended
  ends.event('c', 'stopped');
  ends.event('c', 'terminated');
  ends.lost('c');
  assert.equal(ends.ended('c'), 'debuggee-ended');
  // we stopped it
  ends.expect('d');
  ends.lost('d');
  assert.equal(ends.ended('d'), 'asked');
  // nothing seen: no cause (nothing is restarted for it)
  assert.equal(ends.ended('e'), undefined);
  assert.equal(ends.ended('a'), undefined, 'forgotten once read');
});

test('automatic restarts are capped per rank within a window', () => {
  let now = 0;
  const budget = new RestartBudget(2, 1000, () => now);
  assert.equal(budget.take('j#0'), true);
  assert.equal(budget.take('j#0'), true);
  assert.equal(budget.take('j#0'), false);
  assert.equal(budget.take('j#1'), true, 'per rank');
  now = 1500;
  assert.equal(budget.take('j#0'), true, 'the window moved on');
  budget.take('j#0');
  assert.equal(budget.take('j#0'), false);
  budget.reset('j#0');
  assert.equal(budget.take('j#0'), true, 'Re-attach resets it');
});
