// End to end in a real VS Code host (code-server + chromium, as attach.e2e.mjs): hold on failure, the whole gang.
//
//   1. a local job of 2 nodes x 2 ranks (torchrun, gloo on CPU) launched with `--hold-on-failure`: every rank
//      all_reduces in a loop; once all train, rank 3 raises an uncaught exception.  Before anyone attaches, the
//      Jobs view shows rank 3 failed and held (its own icon, "root cause", its error, the seconds its hold has left)
//      and the other three held with it; one notification says so, with an Attach button
//   2. that button: all four ranks in the Call Stack, rank 3 first and paused on its exception (its failure not
//      said again); the Jobs view: rank 3 the root cause, the others held with it.  KNOWN GAP: the others show
//      "Running" in the Call Stack, not paused: blocked in all_reduce (waiting for rank 3) pydevd cannot suspend
//      them until the call returns to Python; the Jobs view says so ("in native code")
//   3. Continue All Ranks releases them: the job fails with rank 3's exception, said once, and no "Attach failed"
//
// Screenshots: test-artifacts/e2e/held/.

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
  jobsViewRows,
  launchJob,
  openWorkbench,
  repo,
  runCommand,
  say,
  screenshot,
  showJobsView,
  startCodeServer,
  state,
  step,
  useHarness,
  viewRow,
  waitFor,
} from './harness.mjs';

useHarness('held');

const RANKS = 4;
const HOLD_SECONDS = 300;

// the script of tests/local/test_gang_hold_e2e.py too (see its header): a process-group timeout far shorter than
// the hold; the last rank raises once the test writes marks/fail.  A JSON string is a Python string literal.
const script = (marks) =>
  fs
    .readFileSync(path.join(repo, 'tests', 'fixtures', 'gang_crash.py.template'), 'utf8')
    .replaceAll('@MARKS@', JSON.stringify(marks))
    .replaceAll('@PORT@', '0');

const steps = (marks, rank) => {
  try {
    return Number(fs.readFileSync(path.join(marks, `step-${rank}`), 'utf8')) || 0;
  } catch {
    return 0;
  }
};

/**
 * Notifications, each once: the toasts, and the notification center's rows when it is open (the harness's
 * `notifications()` also lists the row inside each toast, which would count every toast twice).
 */
const distinctNotifications = async () =>
  state.page.evaluate(() =>
    [...document.querySelectorAll('.notifications-toasts .notification-toast, .notifications-center .monaco-list-row')].map((t) => ({
      text: ((t.querySelector('.notification-list-item-message') ?? t).textContent ?? '').replace(/\s+/g, ' ').trim(),
      error: !!t.querySelector('.codicon-error, .codicon-notifications-error'),
    })),
  );

/** The Call Stack's session rows: rank (undefined: not a rank's), the state badge's text, and whether it is an exception. */
const sessionRows = async () =>
  (
    await state.page.evaluate(() =>
      [...document.querySelectorAll('.debug-call-stack .monaco-list-row')]
        .filter((r) => (r.getAttribute('aria-label') ?? '').startsWith('Session '))
        .map((r) => ({
          label: r.getAttribute('aria-label') ?? '',
          name: (r.querySelector('.name, .label-name')?.textContent ?? '').trim(),
          state: (r.querySelector('.state')?.textContent ?? '').trim(),
          exception: !!r.querySelector('.state.exception, .exception'),
        })),
    )
  ).map((r) => ({ ...r, rank: /^Session rank (\d+) · algo-\d/.test(r.label) ? Number(/^Session rank (\d+)/.exec(r.label)[1]) : undefined }));

/** Every notification not closed (the center lists the toasts Escape hid too): their texts. */
async function notificationCenter() {
  const bell = state.page.locator('.statusbar-item[id="status.notifications"]');
  await state.page.keyboard.press('Escape');
  await bell.click();
  await state.page.locator('.notifications-center').waitFor({ state: 'visible', timeout: 15_000 });
  await state.page.waitForTimeout(500);
  const texts = await state.page.evaluate(() =>
    [...document.querySelectorAll('.notifications-center .monaco-list-row')].map((t) =>
      ((t.querySelector('.notification-list-item-message') ?? t).textContent ?? '').replace(/\s+/g, ' ').trim(),
    ),
  );
  await bell.click();
  await state.page.locator('.notifications-center').waitFor({ state: 'hidden', timeout: 15_000 });
  return texts;
}

/** Our held notification (heldNotices.ts): an error toast naming the job and "held for a post-mortem debugger". */
const heldToasts = async () =>
  (await distinctNotifications()).filter((n) => n.text.includes(`Remote Debug (${state.job})`) && /held for a post-mortem debugger/.test(n.text));

/** The Jobs view's row of a rank, with its icon's codicon. */
async function rankViewRow(rank) {
  return jobsPane()
    .locator('.monaco-list-row')
    .evaluateAll(
      (rows, want) =>
        rows
          .map((r) => ({
            text: (r.textContent ?? '').replace(/\s+/g, ' ').trim(),
            icon: [...((r.querySelector('.custom-view-tree-node-item-icon') ?? r.querySelector('.codicon:not(.monaco-tl-twistie)'))?.classList ?? [])].find((c) => c.startsWith('codicon-')) ?? '',
          }))
          .find((r) => new RegExp(`^rank ${want}(?!\\d)`).test(r.text)),
      rank,
    );
}

test('rank 3 raises under hold on failure: held with its gang, shown, attached at its exception, released', { timeout: 900_000 }, async () => {
  const marks = path.join(state.root, 'marks');
  fs.mkdirSync(marks);
  fs.writeFileSync(path.join(state.workspace, 'gang.py'), script(marks));
  const raiseLine = script(marks).split('\n').findIndex((l) => l.includes('# RAISE-HERE')) + 1;

  await step('launch the 2 x 2 job with hold on failure', async () => {
    await launchJob(['--nodes', '2', '--nproc-per-node', '2', '--hold-on-failure', String(HOLD_SECONDS)], [env.python, 'gang.py']);
  });

  await step('start code-server (all-stop, the default) and open the workbench', async () => {
    await startCodeServer({ 'remoteDebug.allStop': true });
    await openWorkbench();
    await showJobsView();
  });

  await step('every rank trains, then rank 3 raises', async () => {
    await waitFor('all four ranks stepping', async () => [0, 1, 2, 3].every((r) => steps(marks, r) > 2), { timeout: 180_000, interval: 500 });
    fs.writeFileSync(path.join(marks, 'fail'), '');
  });

  let error = '';
  await step('the job listing holds rank 3 (root cause) and the three others with it', async () => {
    const job = await waitFor('four held ranks in the listing', async () => {
      const info = await jobInfo();
      return info?.held_ranks?.length === RANKS ? info : undefined;
    }, { timeout: 90_000, interval: 1000 });
    const held = job.held_ranks.map((h) => [h.rank, h.root_cause, h.held_for ?? null]);
    assert.deepEqual(held, [[3, true, null], [0, false, 3], [1, false, 3], [2, false, 3]], 'rank 3 first, the root cause');
    error = job.held_ranks[0].error;
    assert.match(error, /^ValueError: bad batch \d+$/);
  });

  await step('one notification, with an Attach button, says rank 3 failed and is held', async () => {
    const [toast] = await waitFor('the held notification', async () => {
      const t = await heldToasts();
      return t.length ? t : undefined;
    }, { timeout: 30_000, interval: 500 });
    say(`notification: ${toast.text}`);
    assert.ok(toast.error, 'an error notification');
    assert.match(
      toast.text,
      new RegExp(`^Remote Debug \\(${state.job}\\): rank 3 on algo-2 failed: ${error} \\(3 other ranks held with it\\) — held for a post-mortem debugger, (\\d+) s left\\.`),
    );
    const left = Number(/, (\d+) s left/.exec(toast.text)[1]);
    assert.ok(left > 0 && left <= HOLD_SECONDS, `seconds left: ${left}`);
    const button = state.page.locator('.notification-toast', { hasText: 'held for a post-mortem debugger' }).locator('.monaco-button', { hasText: /^Attach$/ });
    assert.equal(await button.count(), 1, 'the notification has an Attach button');
    // said once: the next listings (every 3 s) do not say it again
    await state.page.waitForTimeout(7000);
    assert.equal((await heldToasts()).length, 1, 'one held notification');
  });

  await step('the Jobs view: rank 3 failed, held, root cause; ranks 0-2 held with it', async () => {
    const jobRow = await waitFor('the job row says rank 3 failed, held', async () => {
      const rows = await jobsViewRows();
      return rows.find((r) => r.text.startsWith(state.job) && /rank 3 failed, held \d+ s/.test(r.text));
    }, { timeout: 30_000 });
    say(`job row: ${jobRow.text}`);
    assert.equal(await viewRow(state.job).locator('.codicon-bug').count(), 1, "the job's row has the bug icon");
    // two nodes: collapsed until opened
    for (const node of ['algo-1', 'algo-2']) {
      const nodeRow = viewRow(node);
      if ((await nodeRow.getAttribute('aria-expanded')) === 'false') {
        await nodeRow.click();
      }
    }
    const rows = await waitFor('the four ranks, held', async () => {
      const r = await Promise.all([0, 1, 2, 3].map(rankViewRow));
      return r.every((x) => x) && /held/.test(r[3].text) && [0, 1, 2].every((k) => /held with rank 3/.test(r[k].text)) ? r : undefined;
    }, { timeout: 30_000 });
    say(`rank rows: ${JSON.stringify(rows)}`);
    const rank3 = rows[3];
    assert.match(rank3.text, new RegExp(`^rank 3failed · root cause · held after ${error} · (\\d+) s left$`));
    assert.equal(rank3.icon, 'codicon-bug', 'rank 3: the bug icon (a failure held for a post-mortem)');
    for (const r of [0, 1, 2]) {
      assert.match(rows[r].text, new RegExp(`^rank ${r}held · held with rank 3 · \\d+ s left$`));
      assert.equal(rows[r].icon, 'codicon-debug-pause', `rank ${r}: the paused icon (held)`);
    }
    await screenshot('view-held');
  });

  await step('Attach (the notification button): four rank sessions, rank 3 first, paused on its exception', async () => {
    await runCommand('View: Show Run and Debug');
    const button = state.page.locator('.notification-toast', { hasText: 'held for a post-mortem debugger' }).locator('.monaco-button', { hasText: /^Attach$/ });
    await button.click();
    // VS Code shows a stop on an exception with the exception's message as the session's state, in red
    const rows = await waitFor('four rank sessions, rank 3 on its exception', async () => {
      const r = (await sessionRows()).filter((x) => x.rank !== undefined);
      return r.length === RANKS && r.find((x) => x.rank === 3)?.exception ? r : undefined;
    }, { timeout: 90_000, interval: 1000 }).finally(async () => say(`call stack: ${JSON.stringify(await sessionRows())}`));
    await screenshot('attached');
    assert.deepEqual(rows.map((x) => x.rank), [3, 0, 1, 2], 'the root cause listed first, then by rank');
    assert.equal(rows[0].state, error.replace(/^ValueError: /, ''), "rank 3's state: its exception");
    for (const other of rows.slice(1)) {
      // KNOWN GAP (the issue asks for them shown paused): blocked in all_reduce, waiting for rank 3, pydevd cannot
      // suspend them until the call returns to Python, so VS Code shows them "Running"; the Jobs view says why
      assert.ok(!other.exception, `rank ${other.rank}: no exception of its own (${other.state})`);
    }
    const before = (await notificationCenter()).length;
    await state.page.waitForTimeout(3000); // the attach's notices gather 1.5 s
    const after = await notificationCenter();
    say(`notifications after attach: ${JSON.stringify(after)}`);
    // the Attach button closed the held notification; the attach's own "rank 3 failed … attach to see the
    // exception" (with Attach Failed Ranks) would say it again over the session paused at it
    assert.ok(!after.some((t) => t.includes(error)), `rank 3's failure is not said again: ${JSON.stringify(after)}`);
    assert.equal(after.length, before, 'nothing new to click away');
  });

  await step("rank 3's top frame is fail() at the raise", async () => {
    const rows = await callStackRows();
    const at = rows.findIndex((r) => isRankSession(r, 3));
    const frame = rows.slice(at + 1).find((r) => r.label.startsWith('Stack Frame'));
    say(`rank 3 first frame shown: ${frame?.label}`);
    assert.equal(frame?.label, `Stack Frame fail, line ${raiseLine}, gang.py`);
  });

  await step('the Jobs view, attached: rank 3 paused, root cause; ranks 0-2 attached, held with it, in a collective', async () => {
    await showJobsView();
    const rows = await waitFor('the ranks attached', async () => {
      const r = await Promise.all([0, 1, 2, 3].map(rankViewRow));
      return r.every((x) => x && /^rank \d(paused|attached)/.test(x.text)) && /in native code/.test(r[0].text) ? r : undefined;
    }, { timeout: 30_000 }).finally(async () => say(`rank rows: ${JSON.stringify(await Promise.all([0, 1, 2, 3].map(rankViewRow)))}`));
    assert.match(rows[3].text, new RegExp(`^rank 3paused · root cause · held after ${error} · \\d+ s left$`));
    for (const r of [0, 1, 2]) {
      assert.match(rows[r].text, new RegExp(`^rank ${r}attached · held with rank 3 · \\d+ s left · in native code: pauses when it returns to Python$`));
    }
    await screenshot('view-attached');
    await runCommand('View: Show Run and Debug');
  });

  await step("Continue All Ranks: the job fails with rank 3's exception, said once", async () => {
    await runCommand('Remote Debug: Continue All Ranks');
    const job = await waitFor('the job to end', async () => {
      const info = await jobInfo();
      return info && info.status !== 'InProgress' && info.status !== 'Stopping' ? info : undefined;
    }, { timeout: 90_000, interval: 1000 });
    assert.equal(job.status, 'Failed');
    assert.ok(job.failure_reason?.endsWith(`${error} (rank 3)`), `failure reason: ${job.failure_reason}`);
    await waitFor('no rank session left', async () => !(await sessionRows()).some((x) => x.rank !== undefined), { timeout: 30_000 });
    const ended = await waitFor('the job-failed notification', async () => {
      const n = (await distinctNotifications()).filter((x) => x.text.startsWith(`Remote Debug: job ${state.job} failed`));
      return n.length ? n : undefined;
    }, { timeout: 30_000 });
    assert.ok(ended[0].text.includes(error), `it names rank 3's exception: ${ended[0].text}`);
    await screenshot('ended');
    await showJobsView();
    const viewRows = await waitFor('the Jobs view shows the job failed', async () => {
      const r = await jobsViewRows();
      return r.some((x) => x.text.startsWith(`${state.job}Failed`)) ? r : undefined;
    }, { timeout: 30_000 }).finally(async () => say(`jobs view: ${JSON.stringify((await jobsViewRows()).map((r) => r.text))}`));
    assert.ok(!viewRows.some((r) => /attach failed/i.test(r.text)), 'no "Attach failed" in the Jobs view');
    await screenshot('view-ended');
    const all = await notificationCenter();
    say(`notifications: ${JSON.stringify(all)}`);
    assert.ok(!all.some((t) => /attach .* stopped|attach failed/i.test(t)), 'no attach failure said');
    assert.deepEqual(all.filter((t) => t.includes(error)), [ended[0].text], "rank 3's exception said once: by the job's end");
  });
});
