// End to end in a real VS Code host (code-server + chromium, as attach.e2e.mjs): where is everyone, and what they print.
//
//   1. a local job of 2 nodes x 2 ranks (torchrun, gloo on CPU) that hangs: ranks 0-2 wait in all_reduce for rank 3,
//      which never gets there (it loops in wait_for_data(), sleeping); nobody is attached
//   2. Show Stacks from the job row's context menu: the Stacks view (no Untitled JSON buffer) shows rank 3's class
//      first ("rank 3", wait_for_data), then "ranks 0-2 (3)" with all_reduce
//   3. a click on wait_for_data's frame opens the workspace's hang.py at that line (the job's copy mapped back)
//   4. a click on rank 3: no debug session yet, so it offers to attach that rank; Attach Rank 3 attaches it alone
//   5. what the ranks print: Show Rank Output opens "Remote Debug: <job>" with every rank's lines from the start
//      ([rank 3] rank 3 starting); rank 3's own Debug Console shows what it printed since the attach
//   6. a tensor at a glance: a breakpoint in wait_for_data() stops rank 3 with `x = torch.zeros(64, 512)` in scope:
//      the Variables view's row for x reads "Tensor[64, 512] float32 cpu" (container/rank/tensor_view.py)
//
// Screenshots: test-artifacts/e2e/hangview/.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';

import {
  callStackRows,
  cli,
  clickLabel,
  env,
  isRankSession,
  launchJob,
  openWorkbench,
  outputPanelLines,
  rankRow,
  runCommand,
  say,
  screenshot,
  setBreakpoint,
  showJobsView,
  stacksPane,
  stacksRows,
  startCodeServer,
  state,
  step,
  useHarness,
  variablesText,
  viewRow,
  waitFor,
} from './harness.mjs';

useHarness('hangview');

const SCRIPT = `import time

import torch
import torch.distributed as dist


def wait_for_data():
    x = torch.zeros(64, 512)  # a batch that never fills
    i = 0
    while True:
        i += 1
        if i % 25 == 0:
            print(f"rank 3 still waiting ({i // 5} s)", flush=True)
        time.sleep(0.2)  # BREAKPOINT: rank 3 waits here, x in scope


def step(rank):
    if rank == 3:
        wait_for_data()
    total = torch.ones(4)
    dist.all_reduce(total)  # ranks 0-2 wait here for rank 3
    return total


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    print(f"rank {rank} starting", flush=True)
    step(rank)


if __name__ == "__main__":
    main()
`;
const lineOf = (marker) => SCRIPT.split('\n').findIndex((l) => l.includes(marker)) + 1;
const SLEEP_LINE = lineOf('# BREAKPOINT');

/** The row of the Stacks view whose label is `label` (at `level`, when given). */
const stacksRow = (label, level) =>
  stacksPane()
    .locator(`.monaco-list-row${level ? `[aria-level="${level}"]` : ''}`, { has: state.page.locator('.label-name', { hasText: new RegExp(`^${label}$`) }) })
    .first();

test('the hang view: rank 3 stuck elsewhere first, ranks 0-2 in all_reduce; a click attaches rank 3; its output; its tensor', { timeout: 1_200_000 }, async () => {
  fs.writeFileSync(path.join(state.workspace, 'hang.py'), SCRIPT);

  await step('launch the 2 x 2 job that hangs', async () => {
    await launchJob(['--nodes', '2', '--nproc-per-node', '2'], [env.python, 'hang.py']);
  });

  await step('the CLI sees the hang: rank 3 alone, ranks 0-2 together', async () => {
    const classes = await waitFor('the ranks in place', async () => {
      const doc = JSON.parse(await cli(['stacks', state.job, '--json']));
      const c = (doc.classes ?? []).map((k) => k.ranks);
      return JSON.stringify(c) === JSON.stringify([[3], [0, 1, 2]]) ? doc.classes : undefined;
    }, { timeout: 240_000, interval: 2000 });
    say(`classes: ${classes.map((c) => `${c.ranges}: ${c.summary}`).join(' | ')}`);
  });

  await step('start code-server and open the workbench', async () => {
    await startCodeServer();
    await openWorkbench();
  });

  await step("Show Stacks from the job row's context menu", async () => {
    await showJobsView();
    await waitFor('the job row', async () => (await viewRow(state.job).count()) > 0, { timeout: 60_000 });
    await viewRow(state.job).click({ button: 'right', position: { x: 60, y: 10 } });
    await state.page.locator('.context-view .action-label', { hasText: 'Show Stacks' }).first().hover();
    await state.page.keyboard.press('Enter');
  });

  await step('the Stacks view: rank 3 first (wait_for_data), then ranks 0-2 (3) in all_reduce', async () => {
    let rows = [];
    try {
      rows = await waitFor('the classes in the Stacks view', async () => {
        const r = await stacksRows();
        // both classes: the tree may be drawn a row at a time, and a read between two draws sees one
        return r.some((x) => x.label === 'ranks 0-2 (3)') && r.some((x) => x.label === 'rank 3') ? r : undefined;
      }, { timeout: 120_000 });
    } finally {
      say(`Stacks view: ${JSON.stringify(rows)}`);
    }
    const classes = rows.filter((r) => r.level === 1);
    assert.equal(classes[0].label, 'rank 3', 'the odd one first');
    assert.match(classes[0].description, /^wait_for_data/);
    const majority = classes.find((r) => r.label === 'ranks 0-2 (3)');
    assert.match(majority.description, /^all_reduce/);
    assert.equal(classes.length, 2);
    // the odd class is open on its frames (innermost first) and its rank
    assert.deepEqual(rows.filter((r) => r.level === 2).map((r) => r.label).slice(0, 3), ['wait_for_data', 'step', 'main']);
    assert.equal(await state.page.locator('.tab', { hasText: /Untitled/ }).count(), 0, 'no Untitled JSON buffer');
    await screenshot('hang-view');
  });

  await step("a click on wait_for_data's frame opens hang.py at its line", async () => {
    await stacksRow('wait_for_data', 2).locator('.label-name').click();
    await state.page.locator('.tab.active', { hasText: 'hang.py' }).waitFor({ timeout: 30_000 });
    await waitFor(`the cursor on line ${SLEEP_LINE}`, async () => {
      const status = await state.page.locator('.statusbar-item[id="status.editor.selection"]').innerText();
      return new RegExp(`Ln ${SLEEP_LINE},`).test(status);
    }, { timeout: 20_000 });
  });

  await step('a click on rank 3 offers to attach it; Attach Rank 3 attaches that rank alone', async () => {
    await stacksRow('rank 3', 2).locator('.label-name').click();
    const toast = state.page.locator('.notification-toast', { hasText: 'rank 3 of' }).first();
    await toast.waitFor({ timeout: 30_000 });
    assert.match(await toast.innerText(), /has no debug session/);
    await toast.locator('.monaco-button', { hasText: 'Attach Rank 3' }).click();
    // the Stacks view keeps the side bar: its rank row says when the session is there, the Call Stack says whose
    await waitFor('rank 3 attached in the Stacks view', async () =>
      (await stacksRows()).some((r) => r.label === 'rank 3' && r.level === 2 && /attached/.test(r.description)), { timeout: 240_000, interval: 1000 });
    await runCommand('View: Show Run and Debug');
    let rows = [];
    try {
      rows = await waitFor("rank 3's session", async () => {
        const r = await callStackRows();
        // the job's session holds its ranks' sessions; while none is stopped it stays collapsed
        const job = r.find((x) => x.label.startsWith(`Session Remote Debug: ${state.job}`));
        if (job?.expanded === 'false') {
          await clickLabel(state.page.locator(`.debug-call-stack .monaco-list-row[data-index="${job.index}"]`));
          await state.page.keyboard.press('ArrowRight');
          return undefined;
        }
        return r.some((x) => isRankSession(x, 3)) ? r : undefined;
      }, { timeout: 60_000, interval: 1000 });
    } finally {
      say(`call stack: ${JSON.stringify(rows.map((r) => r.label))}`);
    }
    assert.deepEqual(rows.filter((r) => isRankSession(r)).length, 1, 'rank 3 only');
    await screenshot('rank3-attached');
  });

  await step("rank 3's click now shows its debug session", async () => {
    await runCommand('View: Show Remote Debug');
    await stacksRow('rank 3', 2).locator('.label-name').click();
    const input = state.page.locator('.quick-input-widget input');
    await waitFor("the session picker on rank 3's session", async () => /^debug consoles rank 3 · algo-2/.test(await input.inputValue()), {
      timeout: 20_000,
    });
    await state.page.keyboard.press('Escape');
  });

  await step("Show Rank Output: the job's channel, live ([rank 3] ... still waiting)", async () => {
    await runCommand('Remote Debug: Show Rank Output');
    let lines = [];
    try {
      // the channel scrolls with its output: its last lines are on screen
      lines = await waitFor("rank 3's latest line", async () => {
        const l = await outputPanelLines();
        return l.some((t) => /^\[rank 3\] rank 3 still waiting/.test(t)) ? l : undefined;
      }, { timeout: 90_000 });
    } finally {
      say(`output: ${JSON.stringify(lines.slice(-8))}`);
    }
    await screenshot('rank-output');
  });

  await step('Filter Output by Rank…: rank 2 only, from the start of the run', async () => {
    await runCommand('Remote Debug: Filter Output by Rank…');
    const input = state.page.locator('.quick-input-widget input');
    await state.page.locator('.quick-input-list .monaco-list-row', { hasText: 'rank 2' }).first().waitFor({ timeout: 20_000 });
    await input.fill('rank 2');
    await state.page.keyboard.press('Enter');
    let lines = [];
    try {
      lines = await waitFor("rank 2's lines only", async () => {
        const l = await outputPanelLines();
        return l.some((t) => /showing rank 2 only/.test(t)) && l.includes('[rank 2] rank 2 starting') ? l : undefined;
      }, { timeout: 30_000 });
    } finally {
      say(`output: ${JSON.stringify(lines.slice(0, 8))}`);
    }
    assert.ok(lines.filter((t) => t.startsWith('[')).every((t) => t.startsWith('[rank 2] ')), 'no other rank');
    await screenshot('rank-output-filtered');
  });

  await step('a breakpoint in wait_for_data(): rank 3 stops, x in scope', async () => {
    await setBreakpoint('hang.py', SLEEP_LINE);
    await waitFor('rank 3 paused on the breakpoint', async () =>
      (await callStackRows()).some((r) => isRankSession(r, 3) && /Paused on breakpoint$/i.test(r.label)), { timeout: 60_000, interval: 1000 });
  });

  await step("rank 3's Debug Console: what it printed since the attach", async () => {
    // the panel shows the output channel: its Debug Console tab
    await state.page.locator('.part.panel .composite-bar .action-label', { hasText: 'Debug Console' }).first().click();
    const text = await waitFor('a line rank 3 printed', async () => {
      const t = await state.page.evaluate(() => document.querySelector('.repl')?.textContent ?? '');
      return /rank 3 still waiting/.test(t) ? t : undefined;
    }, { timeout: 30_000 });
    say(`debug console: ${text.slice(0, 200)}`);
  });

  await step("the Variables view: x reads Tensor[64, 512] float32 cpu", async () => {
    await runCommand('View: Show Run and Debug');
    await clickLabel(rankRow(3));
    let vars = [];
    try {
      vars = await waitFor('x in the Variables view', async () => {
        const rows = await callStackRows();
        const at = rows.findIndex((r) => isRankSession(r, 3));
        const frame = rows[at + 1];
        if (at >= 0 && frame?.label.startsWith('Stack Frame wait_for_data')) {
          await clickLabel(state.page.locator(`.debug-call-stack .monaco-list-row[data-index="${frame.index}"]`));
        } else if (at >= 0 && rows[at].expanded === 'false') {
          await clickLabel(rankRow(3));
          await state.page.keyboard.press('ArrowRight');
        }
        const v = await variablesText();
        return v.some((t) => /^x\b/.test(t)) ? v : undefined;
      }, { timeout: 60_000, interval: 1000 });
    } finally {
      say(`variables: ${JSON.stringify(vars.slice(0, 12))}`);
    }
    const x = vars.find((t) => /^x\b/.test(t));
    assert.match(x, /^x\s*[:=]?\s*Tensor\[64, 512\] float32 cpu$/);
    await screenshot('tensor-row');
  });
});
