import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Notice, NoticeBatcher, NoticeSummary, summarize } from '../../src/notices';
import { fakeScheduler } from './helpers';

const failed = (rank: number, held = false): Notice => ({ job: 'j', kind: 'rank-failed', rank, node: 'algo-1', message: 'boom', held });

test('one failed rank reads as before; many as one line with their numbers', () => {
  assert.deepEqual(summarize([failed(4)]), {
    severity: 'error',
    text: 'Remote Debug (j): rank 4 on algo-1 failed: boom',
    actions: [{ title: 'Show Output', action: 'show-output' }],
  });
  const many = summarize([failed(7), failed(1, true), failed(4), failed(5)]);
  assert.equal(many.text, 'Remote Debug (j): 4 ranks failed: 1, 4-5, 7 (rank 7: boom) — held for a post-mortem: attach to see the exception');
  assert.deepEqual(many.actions.map((a) => a.action), ['attach-failed', 'show-output']);
});

test('warnings, lost and unstarted sessions', () => {
  const w = (message: string): Notice => ({ job: 'j', kind: 'warning', message });
  assert.equal(summarize([w('a')]).text, 'Remote Debug (j): a');
  assert.equal(summarize([w('a'), w('a')]).text, 'Remote Debug (j): a (×2)');
  assert.equal(summarize([w('a'), w('b'), w('c')]).text, 'Remote Debug (j): 3 warnings: a (and 2 more in the output)');
  const lost = summarize([0, 1, 2, 3].map((rank): Notice => ({ job: 'j', kind: 'session-lost', rank })));
  assert.equal(lost.text, 'Remote Debug (j): the debug sessions of ranks 0-3 ended when the connection dropped; they are attached again once the tunnel is back.');
  assert.deepEqual(lost.actions, [{ title: 'Re-attach Now', action: 'reattach' }]);
  assert.equal(summarize([{ job: 'j', kind: 'session-not-started', rank: 2 }]).text, 'Remote Debug (j): could not start the debug session of rank 2.');
});

test('notices gather for a moment, then one notification per job and kind', () => {
  const clock = fakeScheduler();
  const shown: Array<[string, NoticeSummary]> = [];
  const batcher = new NoticeBatcher((summary, job) => shown.push([job, summary]), clock, 1000);
  for (let rank = 0; rank < 64; rank++) {
    batcher.add({ job: 'big', kind: 'rank-failed', rank, node: `algo-${1 + Math.floor(rank / 8)}`, message: 'NCCL timeout' });
  }
  batcher.add({ job: 'other', kind: 'warning', message: 'slow' });
  clock.advance(999);
  assert.equal(shown.length, 0);
  clock.advance(1);
  assert.deepEqual(shown.map(([job, s]) => [job, s.text]), [
    ['big', 'Remote Debug (big): 64 ranks failed: 0-63 (rank 0: NCCL timeout)'],
    ['other', 'Remote Debug (other): slow'],
  ]);
  // the next batch starts its own wait; flush says it at once
  batcher.add(failed(1));
  batcher.flush();
  assert.equal(shown.length, 3);
  assert.equal(clock.pending(), 0);
});
