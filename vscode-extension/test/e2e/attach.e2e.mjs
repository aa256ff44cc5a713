// End to end in a real VS Code host: code-server (the real workbench and extension host) driven by
// Debian's chromium through playwright-core.  No Microsoft Python extension: the sessions use this
// extension's own `remote-debug` debug type.
//
//   1. install the built VSIX into a throwaway code-server
//   2. launch a local 2-rank DDP job with the Python CLI (ranks wait for a debugger)
//   3. open the script, set a breakpoint from the editor, run "Remote Debug: Attach All Ranks"
//   4. assert in the UI: each rank paused on the breakpoint, top frame `main` at that line,
//      its own value of `shard_marker` in the Variables view; continue each; the job completes
//
// The set-up, the tear-down and the workbench helpers are in ./harness.mjs (what it needs: see there).
// Screenshots go to test-artifacts/e2e/attach/ (git-ignored) on success and on failure.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';

import {
  callStackRows,
  continueRank,
  env,
  jobInfo,
  jobsViewRows,
  launchJob,
  openWorkbench,
  pausedRankLocals,
  placeExample,
  runCommand,
  say,
  screenshot,
  setBreakpoint,
  startCodeServer,
  state,
  step,
  useHarness,
  waitFor,
  waitForPausedSessions,
} from './harness.mjs';

useHarness('attach');

// --- the test ---------------------------------------------------------------------------------------

test('Attach All Ranks from the command palette stops both ranks at a breakpoint', { timeout: 900_000 }, async () => {
  const { script, marker } = placeExample();
  const bpLine = marker + 2; // the line after `shard_marker = ...` (1-based): shard_marker has its value there

  await step('launch the job', async () => {
    await launchJob(['--nproc-per-node', '2', '--wait', '600', '-H', 'steps=1'], [env.python, script]);
  });

  await step('start code-server', async () => {
    await startCodeServer();
  });

  await step('open the workbench', async () => {
    await openWorkbench();
  });

  await step('set a breakpoint in the editor', async () => {
    await setBreakpoint(script, bpLine);
    await screenshot('breakpoint');
  });

  await step('run Attach All Ranks', async () => {
    await runCommand('Remote Debug: Attach All Ranks');
  });

  await step('both ranks paused at the breakpoint', async () => {
    const rows = await waitForPausedSessions(2);
    for (const rank of [0, 1]) {
      assert.ok(rows.some((r) => r.label.startsWith(`Session rank ${rank} · algo-1`)), `a session for rank ${rank}`);
    }
    // under the job's own session
    assert.ok(rows.some((r) => r.label.startsWith(`Session Remote Debug: ${state.job}`)), "the job's session");
    await screenshot('paused');
  });

  for (const rank of [0, 1]) {
    await step(`rank ${rank}: top frame and variables`, async () => {
      const value = await pausedRankLocals(rank, { line: bpLine, script });
      assert.match(value('shard_marker') ?? '', new RegExp(`^shard_marker\\s*[:=]?\\s*${rank * 100}$`), `rank ${rank} sees shard_marker = ${rank * 100}`);
      assert.match(value('rank') ?? '', new RegExp(`^rank\\s*[:=]?\\s*${rank}$`), `rank ${rank} sees rank = ${rank}`);
      await screenshot(`rank-${rank}-paused`);
    });
  }

  await step('the Remote Debug view shows both ranks paused', async () => {
    await runCommand('View: Show Remote Debug');
    let seen = [];
    try {
      await waitFor('rank rows in the Remote Debug view', async () => {
        seen = await jobsViewRows();
        const ranks = seen.filter((r) => /^rank \d+/.test(r.text));
        return ranks.length === 2 && ranks.every((r) => /paused/.test(r.text));
      }, { timeout: 30_000 });
    } finally {
      say(`Remote Debug view: ${JSON.stringify(seen)}`);
    }
    await screenshot('view-paused');
    await runCommand('View: Show Run and Debug');
  });

  for (const rank of [0, 1]) {
    await step(`continue rank ${rank}`, async () => {
      await continueRank(rank);
    });
  }

  await step('the job completes', async () => {
    const job = await waitFor('the job to complete', async () => {
      const info = await jobInfo();
      return info && info.status !== 'InProgress' && info.status !== 'Stopping' ? info : undefined;
    }, { timeout: 180_000, interval: 1000 });
    assert.equal(job.status, 'Completed', `job ${state.job}: ${job.status} (${job.failure_reason ?? ''})`);
    assert.equal(job.exit_code, 0);
    // the extension makes its own debug configurations: the user's workspace gets no launch.json from it
    assert.ok(!fs.existsSync(path.join(state.workspace, '.vscode', 'launch.json')), 'attach wrote a launch.json');
    await waitFor('the debug sessions to end', async () => (await callStackRows()).filter((r) => r.level === '1').length === 0, {
      timeout: 60_000,
    });
    await runCommand('View: Show Remote Debug');
    await waitFor('the view to show the job completed', async () => {
      const rows = await jobsViewRows();
      return rows.some((r) => r.text.startsWith(state.job) && r.text.includes('Completed'));
    }, { timeout: 30_000 });
    await screenshot('completed');
  });
});
