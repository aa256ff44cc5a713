// End to end in a real VS Code host (code-server + chromium, as attach.e2e.mjs): iterate on a live,
// kept-alive job with "Remote Debug: Sync and Re-run".
//
//   1. launch a local 2-rank DDP job with the Python CLI, kept alive after its command (--keep-alive 300)
//   2. set a breakpoint, Attach All Ranks: both ranks stop with the OLD value of `shard_marker`; continue:
//      the training command ends, the Jobs view says "kept alive, N s left"
//   3. edit the line in the editor (typed, not saved), run "Sync and Re-run" from the command palette:
//      the edit is saved and synced to the node, and both ranks of run 1 stop at the breakpoint with the
//      NEW value, in new sessions of the attach that was already running; the view says "run 1 · running"
//   4. while they are paused, edit again and press the keybinding (Ctrl+Alt+R): run 1 is stopped, run 2
//      starts, both ranks stop with the newer value; continue: "run 2 ... ended with exit code 0", the run's
//      rank-prefixed output in the "Remote Debug: Run" channel, the job kept alive again
//   5. Release Kept-Alive Job (palette, confirmed in its dialog): the job completes
//
// Needs what ./harness.mjs says; screenshots in test-artifacts/e2e/rerun/.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';

import {
  callStackRows,
  continueRank,
  env,
  goToLine,
  jobInfo,
  jobsViewRows,
  launchJob,
  notifications,
  openFile,
  openWorkbench,
  outputPanelLines,
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
  isRankSession,
} from './harness.mjs';

useHarness('rerun');

// --- the test ---------------------------------------------------------------------------------------

test('Sync and Re-run: an edit reaches both ranks of a kept-alive job, which stop at the breakpoint again', { timeout: 1_100_000 }, async () => {
  const { script, lines, marker } = placeExample();
  const editLine = marker + 1; // `shard_marker = rank * 100 + step  # REMOTE-DEBUG-BREAKPOINT` (1-based)
  const bpLine = marker + 2; // the line after it: shard_marker has its value there
  const original = lines[marker].trim();
  assert.equal(original, 'shard_marker = rank * 100 + step  # REMOTE-DEBUG-BREAKPOINT', 'the line this test edits');
  const edited = (extra) => `shard_marker = rank * 100 + step + ${extra}  # REMOTE-DEBUG-BREAKPOINT`;

  /** Replace the marker line in the editor by typing (the file stays unsaved: Sync and Re-run saves it). */
  const editMarkerLine = async (text) => {
    await openFile(script);
    await goToLine(editLine);
    await state.page.keyboard.press('End');
    await state.page.keyboard.press('Shift+Home'); // to the first non-blank: the indentation stays
    await state.page.keyboard.type(text);
    await waitFor('the editor to show the edit', async () =>
      state.page.evaluate((want) => [...document.querySelectorAll('.monaco-editor .view-line')].some((l) => (l.textContent ?? '').replace(/\u00a0/g, ' ').trim() === want), text),
    { timeout: 10_000 });
    await waitFor('the editor to be dirty', async () => (await state.page.locator('.tab.active.dirty').count()) === 1, { timeout: 10_000 });
  };
  const onDisk = () => fs.readFileSync(path.join(state.workspace, script), 'utf8').split('\n')[marker].trim();

  /** Both ranks paused at the breakpoint, each with shard_marker = rank * 100 + extra. */
  const bothRanksStopWith = async (extra, label) => {
    for (const rank of [0, 1]) {
      await step(`${label}: rank ${rank} stopped with shard_marker ${rank * 100 + extra}`, async () => {
        const value = await pausedRankLocals(rank, { line: bpLine, script });
        assert.match(
          value('shard_marker') ?? '',
          new RegExp(`^shard_marker\\s*[:=]?\\s*${rank * 100 + extra}$`),
          `rank ${rank} sees shard_marker = ${rank * 100 + extra}`,
        );
        await screenshot(`${label.replace(/[^a-z0-9]+/gi, '-')}-rank-${rank}`);
      });
    }
  };

  /** Our Jobs view until the job's row matches; returns its text. */
  const jobRowShows = async (what, pattern, timeout = 60_000) => {
    await runCommand('View: Show Remote Debug');
    let seen = [];
    try {
      const row = await waitFor(`the job's row to say ${what}`, async () => {
        seen = await jobsViewRows();
        return seen.find((r) => r.text.startsWith(state.job) && pattern.test(r.text));
      }, { timeout, interval: 1000 });
      say(`job row: ${row.text}`);
      return row.text;
    } finally {
      if (!seen.some((r) => r.text.startsWith(state.job) && pattern.test(r.text))) {
        say(`Remote Debug view: ${JSON.stringify(seen)}`);
      }
    }
  };

  await step('launch the job (kept alive)', async () => {
    await launchJob(['--nproc-per-node', '2', '--wait', '300', '--keep-alive', '300', '-H', 'steps=1'], [env.python, script]);
  });

  await step('start code-server', async () => {
    await startCodeServer({
      'remoteDebug.rerun.waitSeconds': 90,
      // the panel keeps the run's output channel (the debug console would take it at the first session)
      'debug.internalConsoleOptions': 'neverOpen',
      // the edit stays unsaved until Sync and Re-run saves it (the web workbench saves after a delay by default)
      'files.autoSave': 'off',
      // typed edits stay exactly what we type
      'editor.quickSuggestions': { other: false, comments: false, strings: false },
      'editor.suggestOnTriggerCharacters': false,
    });
  });

  await step('open the workbench', async () => {
    await openWorkbench();
  });

  await step('set a breakpoint in the editor', async () => {
    await setBreakpoint(script, bpLine);
  });

  await step('run Attach All Ranks', async () => {
    await runCommand('Remote Debug: Attach All Ranks');
  });

  await step('run 0: both ranks paused at the breakpoint', async () => {
    await waitForPausedSessions(2);
  });
  await bothRanksStopWith(0, 'run 0');

  for (const rank of [0, 1]) {
    await step(`run 0: continue rank ${rank}`, async () => {
      await continueRank(rank);
    });
  }

  await step('the training command ended: the job is kept alive', async () => {
    const text = await jobRowShows('kept alive', /kept alive, \d+ s left/, 120_000);
    assert.match(text, /InProgress/);
    await screenshot('kept-alive');
  });

  await step('edit the line in the editor (unsaved)', async () => {
    await editMarkerLine(edited(7));
    assert.equal(onDisk(), original, 'not saved yet');
    await screenshot('edited');
  });

  await step('run Sync and Re-run from the command palette', async () => {
    await runCommand('Remote Debug: Sync and Re-run');
    await runCommand('View: Show Run and Debug');
  });

  await step('run 1: both ranks paused at the breakpoint', async () => {
    await waitForPausedSessions(2);
    assert.equal(onDisk(), edited(7), 'Sync and Re-run saved the editor');
    const codeDir = (await jobInfo()).code_dirs['algo-1'];
    const synced = fs.readFileSync(path.join(codeDir, script), 'utf8').split('\n')[marker].trim();
    assert.equal(synced, edited(7), "the edit is in the node's code dir");
  });
  await bothRanksStopWith(7, 'run 1');

  await step('the view shows run 1 running', async () => {
    await jobRowShows('run 1 · running', /run 1 · running/);
    await screenshot('view-run-1');
    await runCommand('View: Show Run and Debug');
  });

  await step('edit again while run 1 is paused', async () => {
    await editMarkerLine(edited(9));
  });

  await step('Sync and Re-run with the keybinding (Ctrl+Alt+R): run 1 is replaced by run 2', async () => {
    await state.page.keyboard.press('Control+Alt+r');
    await runCommand('View: Show Run and Debug');
    // run 1's ranks are stopped: their paused sessions end before run 2's start
    await waitFor("run 1's paused sessions to end", async () => {
      const paused = (await callStackRows()).filter((x) => isRankSession(x) && /Paused on breakpoint$/i.test(x.label));
      return paused.length < 2;
    }, { timeout: 120_000, interval: 250 });
  });

  await step('run 2: both ranks paused at the breakpoint', async () => {
    await waitForPausedSessions(2);
    assert.equal(onDisk(), edited(9), 'saved again');
  });
  await bothRanksStopWith(9, 'run 2');

  for (const rank of [0, 1]) {
    await step(`run 2: continue rank ${rank}`, async () => {
      await continueRank(rank);
    });
  }

  await step('run 2 ends: its exit code, its output, the job kept alive again', async () => {
    const ended = await waitFor('the run-ended message', async () => {
      const all = await notifications();
      return all.find((n) => /run 2 of .* ended with exit code 0/.test(n.text));
    }, { timeout: 120_000, interval: 500 });
    say(`notification: ${ended.text}`);
    const all = await notifications();
    assert.ok(!all.some((n) => /run 1 of/.test(n.text)), 'run 1 was stopped on purpose: no message about it');
    const output = await waitFor('the run output', async () => {
      const shown = await outputPanelLines();
      return shown.some((l) => /── run 2 of .* ended with exit code 0 ──/.test(l)) ? shown : undefined;
    }, { timeout: 30_000 });
    say(`output: ${JSON.stringify(output)}`);
    for (const rank of [0, 1]) {
      assert.ok(
        output.some((l) => new RegExp(`^\\[rank ${rank}\\] rank ${rank}/2 step 0 loss \\S+ marker ${rank * 100 + 9}$`).test(l)),
        `rank ${rank}'s line, prefixed, with the new value`,
      );
    }
    await screenshot('run-2-ended');
    const text = await jobRowShows('kept alive again, run 2', /kept alive, \d+ s left · run 2/);
    assert.doesNotMatch(text, /running/);
  });

  await step('Release Kept-Alive Job: the job completes', async () => {
    await runCommand('Remote Debug: Release Kept-Alive Job');
    const dialog = state.page.locator('.monaco-dialog-box');
    await dialog.waitFor({ state: 'visible', timeout: 30_000 });
    assert.match(await dialog.innerText(), new RegExp(`Release job ${state.job}\\?`));
    await dialog.locator('.monaco-button', { hasText: 'Release' }).first().click();
    const job = await waitFor('the job to complete', async () => {
      const info = await jobInfo();
      return info && info.status !== 'InProgress' && info.status !== 'Stopping' ? info : undefined;
    }, { timeout: 180_000, interval: 1000 });
    assert.equal(job.status, 'Completed', `job ${state.job}: ${job.status} (${job.failure_reason ?? ''})`);
    assert.equal(job.exit_code, 0, 'the last run ended with 0');
    await jobRowShows('Completed', /Completed/);
    await screenshot('released');
  });
});
