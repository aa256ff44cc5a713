// End to end in a real VS Code host (code-server + chromium, as attach.e2e.mjs): the debugger contribution a user
// puts in launch.json.  F5 on
//
//   {"type": "remote-debug", "request": "attach", "name": "All ranks", "job": "${command:remoteDebug.pickJob}", "ranks": "all"}
//
// asks for the job (the only running one is taken without asking), runs the attach, and both ranks of a 2-rank
// job pause at the breakpoint in sessions under the job's session.  The workspace's launch.json is left as the
// user wrote it (the extension writes none).
//
// Needs what ./harness.mjs says; screenshots in test-artifacts/e2e/launchjson/.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';

import {
  continueRank,
  env,
  isRankSession,
  jobInfo,
  launchJob,
  openWorkbench,
  pausedRankLocals,
  placeExample,
  screenshot,
  setBreakpoint,
  startCodeServer,
  state,
  step,
  useHarness,
  waitFor,
  waitForPausedSessions,
} from './harness.mjs';

useHarness('launchjson');

test('F5 on a launch.json "remote-debug" job configuration attaches every rank', { timeout: 900_000 }, async () => {
  const { script, marker } = placeExample();
  const bpLine = marker + 2;
  const launchJson = JSON.stringify(
    {
      version: '0.2.0',
      configurations: [
        { type: 'remote-debug', request: 'attach', name: 'All ranks', job: '${command:remoteDebug.pickJob}', ranks: 'all' },
      ],
    },
    null,
    2,
  );
  fs.mkdirSync(path.join(state.workspace, '.vscode'));
  fs.writeFileSync(path.join(state.workspace, '.vscode', 'launch.json'), launchJson);

  await step('launch the job', async () => {
    await launchJob(['--nproc-per-node', '2', '--wait', '600', '-H', 'steps=1'], [env.python, script]);
  });

  await step('start code-server', async () => {
    await startCodeServer();
  });

  await step('open the workbench', async () => {
    await openWorkbench();
  });

  await step('set a breakpoint', async () => {
    await setBreakpoint(script, bpLine);
  });

  await step('F5', async () => {
    await state.page.keyboard.press('F5');
  });

  await step('both ranks paused, under the job session', async () => {
    const rows = await waitForPausedSessions(2);
    assert.ok(rows.some((r) => r.label.startsWith(`Session Remote Debug: ${state.job}`)), "the job's session");
    for (const rank of [0, 1]) {
      assert.ok(rows.some((r) => isRankSession(r, rank)), `a session for rank ${rank}`);
    }
    await screenshot('paused');
  });

  for (const rank of [0, 1]) {
    await step(`rank ${rank}: its own values`, async () => {
      const value = await pausedRankLocals(rank, { line: bpLine, script });
      assert.match(value('shard_marker') ?? '', new RegExp(`^shard_marker\\s*[:=]?\\s*${rank * 100}$`));
      await continueRank(rank);
    });
  }

  await step('the job completes; launch.json is as the user wrote it', async () => {
    const job = await waitFor('the job to complete', async () => {
      const info = await jobInfo();
      return info && info.status !== 'InProgress' && info.status !== 'Stopping' ? info : undefined;
    }, { timeout: 180_000, interval: 1000 });
    assert.equal(job.status, 'Completed', `job ${state.job}: ${job.status} (${job.failure_reason ?? ''})`);
    assert.equal(fs.readFileSync(path.join(state.workspace, '.vscode', 'launch.json'), 'utf8'), launchJson);
  });
});
