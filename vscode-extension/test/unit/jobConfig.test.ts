import assert from 'node:assert/strict';
import { test } from 'node:test';

import { defaultJobConfiguration, dynamicJobConfiguration, isJobConfiguration, parseJobConfiguration, parseRanksValue } from '../../src/jobConfig';

test('ranks: "all", "0,2", "0, 2", "0-3", [0, 2] or a number; anything else is a one-line error', () => {
  assert.equal(parseRanksValue(undefined), undefined);
  assert.equal(parseRanksValue('all'), undefined);
  assert.equal(parseRanksValue(' ALL '), undefined);
  assert.deepEqual(parseRanksValue('2,0'), [0, 2]);
  assert.deepEqual(parseRanksValue('0, 2, 2'), [0, 2]);
  assert.deepEqual(parseRanksValue([3, 1]), [1, 3]);
  assert.deepEqual(parseRanksValue(['1', 4]), [1, 4]);
  assert.deepEqual(parseRanksValue(5), [5]);
  assert.deepEqual(parseRanksValue('0-2'), [0, 1, 2]);
  for (const bad of ['3-0', 'some', [], [-1], [1.5], { rank: 1 }, true]) {
    const r = parseRanksValue(bad);
    assert.ok(r && !Array.isArray(r) && /"ranks" must be/.test(r.error), JSON.stringify(bad));
  }
});

test('a job configuration, substituted: the job, its ranks, its own mappings and justMyCode', () => {
  assert.deepEqual(parseJobConfiguration({ job: ' j ', ranks: 'all' }), { job: 'j', ranks: undefined });
  assert.deepEqual(
    parseJobConfiguration({ job: 'j', ranks: [1], justMyCode: true, pathMappings: [{ localRoot: '/a', remoteRoot: '/b' }, { localRoot: '' }] }),
    { job: 'j', ranks: [1], justMyCode: true, pathMappings: [{ localRoot: '/a', remoteRoot: '/b' }] },
  );
  assert.match((parseJobConfiguration({ job: '${command:nope}' }) as { error: string }).error, /could not substitute/);
  assert.match((parseJobConfiguration({ job: 'j', pathMappings: [{}] }) as { error: string }).error, /both "localRoot" and "remoteRoot"/);
  assert.equal(isJobConfiguration({ job: 'x' }), true);
  assert.equal(isJobConfiguration({ connect: { port: 1 } }), false);
});

test('the default and dynamic configurations name a job, never a port', () => {
  assert.equal(defaultJobConfiguration().job, '${command:remoteDebug.pickJob}');
  assert.deepEqual(dynamicJobConfiguration('big'), { type: 'remote-debug', request: 'attach', name: 'Attach all ranks: big', job: 'big', ranks: 'all' });
  for (const c of [defaultJobConfiguration(), dynamicJobConfiguration('x')]) {
    assert.equal('connect' in c || 'port' in c, false);
  }
});
