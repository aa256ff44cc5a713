// End to end in a real VS Code host (code-server + chromium, as attach.e2e.mjs): a job started WITHOUT remote-debug,
// adopted from the command palette and debugged like a launched one.
//
//   1. the test starts a plain Python script (no remote-debug anywhere in its environment: it is not a job) whose
//      loop has known locals: `counter` counts up, `pid_marker` is computed from its own pid
//   2. a breakpoint on the loop's line, set in the editor
//   3. "Remote Debug: Adopt a Running Process…" from the command palette: the quick pick lists the script, picked;
//      the notification "adopted pid P as job J (1 rank)" offers Attach All Ranks, clicked
//   4. the session is paused at that line, and the Variables view shows the process's own values
//   5. Stop Job from the Jobs view's row: the job is Stopped and the process is gone
//
// The script is the test's: it is killed by its pid in the tear-down whatever happened (and on Ctrl-C).  Needs the
// CLI's `adopt` (gdb for Python 3.10-3.13).  Screenshots in test-artifacts/e2e/adopt/.

import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';

import {
  callStackRows,
  childEnv,
  cli,
  clickInline,
  env,
  jobInfo,
  jobsViewRows,
  notifications,
  openWorkbench,
  pausedRankLocals,
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
  waitForPausedSessions,
} from './harness.mjs';

useHarness('adopt');

const SCRIPT = 'loop.py';
const SOURCE = `import os
import time


def main():
    pid_marker = os.getpid() * 10 + 7
    counter = 0
    print(f"loop {os.getpid()} started", flush=True)
    while True:
        counter += 1
        total = counter * pid_marker  # ADOPT-BREAKPOINT
        time.sleep(0.05)


if __name__ == "__main__":
    main()
`;

/** The plain script the test runs (not a remote-debug job until adopted). */
let loop;
let loopOutput = '';

function killLoop() {
  if (loop?.pid && loop.exitCode === null && loop.signalCode === null) {
    say(`killing the script, pid ${loop.pid}`);
    try {
      process.kill(loop.pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
}

// whatever happens (a failed step, a time-out, Ctrl-C: the harness exits the process then), the script goes
process.on('exit', killLoop);
after(() => {
  killLoop();
  if (loopOutput) {
    fs.mkdirSync(state.artifacts, { recursive: true });
    fs.writeFileSync(path.join(state.artifacts, 'loop.log'), loopOutput);
  }
});

test('Adopt a Running Process… from the command palette: a plain script stops at a breakpoint with its own values', { timeout: 900_000 }, async () => {
  fs.writeFileSync(path.join(state.workspace, SCRIPT), SOURCE);
  const bpLine = SOURCE.split('\n').findIndex((l) => l.includes('# ADOPT-BREAKPOINT')) + 1;
  assert.ok(bpLine > 0);
  let pid;
  let job;

  await step('start the script, without remote-debug', async () => {
    const e = childEnv();
    for (const key of Object.keys(e)) {
      if (key.startsWith('REMOTE_DEBUG_') || key === 'PYTHONPATH') {
        delete e[key];
      }
    }
    loop = spawn(env.python, ['-u', SCRIPT], { cwd: state.workspace, env: e, stdio: ['ignore', 'pipe', 'pipe'] });
    loop.stdout.on('data', (d) => (loopOutput += d.toString()));
    loop.stderr.on('data', (d) => (loopOutput += d.toString()));
    pid = loop.pid;
    await waitFor('the script to start', async () => {
      if (loop.exitCode !== null) {
        throw Object.assign(new Error(`the script exited: ${loopOutput}`), { fatal: true });
      }
      return loopOutput.includes(`loop ${pid} started`);
    }, { timeout: 30_000, interval: 200 });
    const environ = fs.readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0');
    assert.ok(!environ.some((v) => v.startsWith('REMOTE_DEBUG_')), 'nothing of remote-debug in its environment');
    const jobs = JSON.parse(await cli(['jobs', '--json']));
    assert.deepEqual(jobs.map((j) => j.name), [], 'no job before it is adopted');
    say(`script pid ${pid}`);
  });

  await step('start code-server', async () => {
    await startCodeServer();
  });

  await step('open the workbench', async () => {
    await openWorkbench();
  });

  await step("set a breakpoint on the loop's line", async () => {
    await setBreakpoint(SCRIPT, bpLine);
  });

  await step('run Adopt a Running Process… and pick the script', async () => {
    await runCommand('Remote Debug: Adopt a Running Process…');
    const input = state.page.locator('.quick-input-widget input');
    const row = state.page.locator('.quick-input-list .monaco-list-row', { hasText: `pid ${pid} · ` }).first();
    // the list comes from `remote-debug adopt --list --json` (a progress notification meanwhile)
    await waitFor('the script in the quick pick', async () => {
      // narrow the list to the script (other processes of this user may be listed); only in our pick, not in the
      // command palette that is still closing
      const ours = (await input.isVisible()) && /Adopt which running process/.test((await input.getAttribute('placeholder')) ?? '');
      if (ours && (await input.inputValue()) !== `pid ${pid}`) {
        await input.fill(`pid ${pid}`);
      }
      return row.isVisible();
    }, { timeout: 120_000 });
    const text = (await row.innerText()).replace(/\s+/g, ' ');
    say(`quick pick row: ${text}`);
    assert.match(text, new RegExp(`pid ${pid} · \\S*python\\S* -u ${SCRIPT}`), 'the command line');
    assert.match(text, /1 rank · Python 3\.\d+/, 'its shape');
    assert.ok(text.includes(state.workspace), 'its working directory');
    await screenshot('quick-pick');
    await row.click();
  });

  await step('the notification names the job; click Attach All Ranks', async () => {
    const toast = state.page.locator('.notification-toast', { hasText: `adopted pid ${pid} as job` }).first();
    let seen = [];
    try {
      await waitFor('the adopted notification', async () => {
        seen = await notifications();
        const error = seen.find((n) => n.error);
        if (error) {
          throw Object.assign(new Error(`error notification: ${error.text}`), { fatal: true });
        }
        return toast.isVisible();
      }, { timeout: 300_000 });
    } finally {
      say(`notifications: ${JSON.stringify(seen.map((n) => n.text))}`);
    }
    const text = (await toast.locator('.notification-list-item-message').innerText()).replace(/\s+/g, ' ');
    const m = /adopted pid \d+ as job (\S+) \(1 rank\)\./.exec(text);
    assert.ok(m, `the notification says the job and its rank: ${text}`);
    job = m[1];
    state.job = job; // the harness stops it in the tear-down if it still runs
    const info = await jobInfo();
    assert.equal(info?.status, 'InProgress', 'jobs --json lists the adopted job');
    assert.equal(info.backend, 'local');
    await screenshot('adopted');
    await toast.locator('.monaco-button', { hasText: 'Attach All Ranks' }).click();
  });

  await step('paused at the breakpoint, with the process\'s own values', async () => {
    const rows = await waitForPausedSessions(1);
    assert.ok(rows.some((r) => r.label.startsWith('Session rank 0 · algo-1')), 'the rank session');
    const value = await pausedRankLocals(0, { line: bpLine, script: SCRIPT, marker: 'pid_marker', rankLocal: false });
    assert.match(value('pid_marker') ?? '', new RegExp(`^pid_marker\\s*[:=]?\\s*${pid * 10 + 7}$`), 'pid_marker from its own pid');
    const counter = /^counter\s*[:=]?\s*(\d+)$/.exec(value('counter') ?? '');
    assert.ok(counter && Number(counter[1]) > 0, `counter has counted: ${value('counter')}`);
    await screenshot('paused');
  });

  await step('Stop Job from the Jobs view', async () => {
    await showJobsView();
    await waitFor('the job in the view', async () => (await jobsViewRows()).some((r) => r.text.startsWith(job)), { timeout: 60_000 });
    await clickInline(viewRow(job), 'Stop Job');
    const dialog = state.page.locator('.monaco-dialog-box');
    await dialog.waitFor({ state: 'visible', timeout: 20_000 });
    assert.match(await dialog.innerText(), new RegExp(`Stop job ${job}\\?`));
    await dialog.locator('.monaco-button', { hasText: 'Stop Job' }).click();
    const info = await waitFor('the job to be stopped', async () => {
      const i = await jobInfo();
      return i && i.status !== 'InProgress' && i.status !== 'Stopping' ? i : undefined;
    }, { timeout: 240_000, interval: 1000 });
    assert.equal(info.status, 'Stopped');
    await waitFor('the script to end', async () => loop.exitCode !== null || loop.signalCode !== null, { timeout: 60_000 });
    say(`the script ended: ${loop.signalCode ?? `exit ${loop.exitCode}`}`);
    await waitFor('the session to end', async () => !(await callStackRows()).some((r) => /Paused/.test(r.label)), { timeout: 60_000 });
    await waitFor('the view to say Stopped', async () => (await jobsViewRows()).some((r) => r.text.startsWith(job) && r.text.includes('Stopped')), {
      timeout: 60_000,
    });
    await screenshot('stopped');
  });
});
