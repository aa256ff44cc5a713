// End to end in a real VS Code host (code-server + chromium, as attach.e2e.mjs): many ranks, one debugger.
//
//   1. a local job of 2 nodes x 2 ranks whose ranks loop in Python; only rank 0 runs the line with the breakpoint
//   2. "Remote Debug: Attach All Ranks": rank 0 stops at the breakpoint and all-stop pauses the three others
//      (the attach carries every rank's session): the Call Stack shows all four paused, rank 0 "on breakpoint", the
//      others not; the job's own session shows its "All ranks" thread paused; the Jobs view marks rank 0
//   3. "Remote Debug: Continue All Ranks" (one command, not four Continues): every rank runs, the job completes
//
// Screenshots: test-artifacts/e2e/allstop/.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';

import {
  callStackRows,
  env,
  isRankSession,
  jobInfo,
  jobsPane,
  launchJob,
  openWorkbench,
  runCommand,
  say,
  screenshot,
  setBreakpoint,
  showJobsView,
  startCodeServer,
  state,
  step,
  useHarness,
  viewRow,
  waitFor,
} from './harness.mjs';

useHarness('allstop');

const RANKS = 4;
// a rank session's state when stopped: VS Code's own "Paused on breakpoint", or the description all-stop gives
const STOPPED = /Paused|All-stop/i;

// Every rank loops in Python (short sleeps: a pause lands within 0.1 s); rank 0 alone runs the marked line.
const SCRIPT = `import os
import time

rank = int(os.environ.get("RANK", "0"))
for i in range(300):
    if rank == 0 and i == 10:
        hit = "rank 0 only"  # BREAKPOINT
    time.sleep(0.1)
print(f"rank {rank} done", flush=True)
`;

test('a breakpoint in rank 0 pauses all four ranks; Continue All Ranks runs them all', { timeout: 900_000 }, async () => {
  fs.writeFileSync(path.join(state.workspace, 'allstop.py'), SCRIPT);
  const bpLine = SCRIPT.split('\n').findIndex((l) => l.includes('# BREAKPOINT')) + 1;

  await step('launch the 2 x 2 job', async () => {
    await launchJob(['--nodes', '2', '--nproc-per-node', '2', '--wait', '600'], [env.python, 'allstop.py']);
  });

  await step('start code-server and open the workbench', async () => {
    await startCodeServer({ 'remoteDebug.allStop': true });
    await openWorkbench();
  });

  await step("a breakpoint in rank 0's branch", async () => {
    await setBreakpoint('allstop.py', bpLine);
  });

  await step('run Attach All Ranks', async () => {
    await runCommand('Remote Debug: Attach All Ranks');
  });

  await step('all four ranks paused: rank 0 at the breakpoint, the others by all-stop', async () => {
    let rows = [];
    try {
      rows = await waitFor(`${RANKS} paused rank sessions`, async () => {
        const r = await callStackRows();
        const paused = r.filter((x) => isRankSession(x) && STOPPED.test(x.label));
        return paused.length === RANKS ? r : undefined;
      }, { timeout: 300_000, interval: 1000 });
    } finally {
      say(`call stack: ${JSON.stringify(rows.map((r) => r.label))}`);
    }
    const label = (rank) => rows.find((r) => isRankSession(r, rank))?.label ?? '';
    assert.match(label(0), /Paused on breakpoint$/i, 'rank 0 hit the breakpoint');
    for (const rank of [1, 2, 3]) {
      // the state VS Code shows is the stop's description: short, so that the rank's name stays readable
      assert.match(label(rank), /All-stop: rank 0$/i, `rank ${rank} never runs the line: paused by all-stop`);
    }
    // the rank sessions are named short, under the job's own session, whose "All ranks" thread is paused
    // (its one thread, "All ranks", is shown on the session's row)
    assert.ok(rows.some((r) => r.label === `Session Remote Debug: ${state.job} ranks paused`), "the job's session, paused");
    assert.ok(rows.some((r) => /^Session rank 3 · algo-2 All-stop/i.test(r.label)), 'rank 3 on algo-2, named without the job');
    await screenshot('all-paused');
  });

  await step('the Jobs view marks rank 0 as the one that stopped', async () => {
    await showJobsView();
    await waitFor('algo-1 open on its ranks', async () => {
      const rank0 = jobsPane().locator('.monaco-list-row', { hasText: /^rank 0/ }).first();
      if ((await rank0.count()) === 0) {
        await viewRow('algo-1').click();
        return false;
      }
      return (await rank0.locator('.codicon-debug-stackframe').count()) > 0;
    }, { timeout: 60_000, interval: 1000 });
    await screenshot('view-rank0-marked');
    await runCommand('View: Show Run and Debug');
  });

  await step('Continue All Ranks: every rank runs on', async () => {
    await runCommand('Remote Debug: Continue All Ranks');
    await waitFor('no rank paused', async () => !(await callStackRows()).some((r) => isRankSession(r) && STOPPED.test(r.label)), {
      timeout: 60_000,
    });
    await screenshot('all-running');
  });

  await step('the job completes', async () => {
    const job = await waitFor('the job to complete', async () => {
      const info = await jobInfo();
      return info && info.status !== 'InProgress' && info.status !== 'Stopping' ? info : undefined;
    }, { timeout: 180_000, interval: 1000 });
    assert.equal(job.status, 'Completed', `job ${state.job}: ${job.status} (${job.failure_reason ?? ''})`);
  });
});
