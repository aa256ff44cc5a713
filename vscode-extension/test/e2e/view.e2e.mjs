// End to end in a real VS Code host (code-server + chromium, as attach.e2e.mjs): the Jobs view the way a user
// drives it with the mouse, on a job of 8 ranks whose source is a subfolder of the workspace.
//
//   1. ~/.aws/config has an IAM Identity Center profile that never logged in, and the extension is set to use
//      it: the Jobs view shows "SageMaker jobs not listed ... aws sso login --profile dev" with its fixes, and
//      the status bar names the profile (not "No debuggable jobs yet")
//   2. a local job of 2 nodes x 4 ranks launched with `--source-dir training` (its code dir holds the contents
//      of training/, so the breakpoint in training/train_ddp.py binds only with localRoot = training/)
//   3. the job row's inline "Attach All Ranks" button: all 8 ranks pause at the breakpoint with their own
//      values; the view's node rows open onto 8 paused ranks
//   4. Show Stacks from the job row's context menu: the Stacks view groups the 8 ranks by stack; Open Stacks as JSON
//      shows the CLI's document with every rank
//   5. the job row's inline "Stop Job" button, confirmed in its dialog: the job is Stopped
//   6. Launch Local Job… from the view's title bar: a script pick and a ranks prompt start a job
//   7. a remoteDebug.cliPath that does not exist: the extension offers to install remote-debug-training
//
// Microsoft's Python Debugger extension (the `debugpy` debug type) cannot be installed here: open-vsx.org does
// not resolve from this machine, and the npm registry (the one registry reachable) has no package carrying its
// VSIX. These sessions use the extension's own `remote-debug` type; the `debugpy` configurations are unit-tested.
//
// Screenshots (test-artifacts/e2e/view/): the credentials warning, the view with 8 paused ranks, and more.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';

import {
  cli,
  callStackRows,
  clickInline,
  env,
  jobInfo,
  jobsPane,
  jobsViewRows,
  launchJob,
  notifications,
  openWorkbench,
  pausedRankLocals,
  placeExample,
  runCommand,
  say,
  screenshot,
  setBreakpoint,
  showJobsView,
  stacksRows,
  startCodeServer,
  state,
  step,
  useHarness,
  viewRow,
  waitFor,
  isRankSession,
  writeMachineSettings,
} from './harness.mjs';

useHarness('view');

const NODES = 2;
const PER_NODE = 4;
const RANKS = NODES * PER_NODE;

const AWS_CONFIG = `[profile dev]
sso_session = corp
sso_account_id = 123456789012
sso_role_name = MLEngineer
region = us-west-2

[sso-session corp]
sso_start_url = https://corp.awsapps.com/start
sso_region = us-east-1
`;

test('The Jobs view: credentials warning, 8 ranks of a subfolder job, inline buttons, stacks, stop, launch', { timeout: 1_200_000 }, async () => {
  // the job's code is training/: its code dir on the node holds training/'s contents
  fs.mkdirSync(path.join(state.workspace, 'training'));
  const { marker } = placeExample();
  fs.renameSync(path.join(state.workspace, 'train_ddp.py'), path.join(state.workspace, 'training', 'train_ddp.py'));
  const script = 'training/train_ddp.py';
  const bpLine = marker + 2; // the line after `shard_marker = ...` (1-based): shard_marker has its value there
  fs.mkdirSync(path.join(state.home, '.aws'), { recursive: true });
  fs.writeFileSync(path.join(state.home, '.aws', 'config'), AWS_CONFIG);

  await step('launch the 8-rank job from the subfolder', async () => {
    await launchJob(
      ['--nodes', String(NODES), '--nproc-per-node', String(PER_NODE), '--wait', '600', '--source-dir', 'training', '-H', 'steps=1'],
      [env.python, 'train_ddp.py'],
    );
    const info = await jobInfo();
    assert.equal(info.source_dir, path.join(state.workspace, 'training'));
  });

  await step('start code-server with the SSO profile chosen', async () => {
    await startCodeServer({ 'remoteDebug.aws.profile': 'dev' });
  });

  await step('open the workbench', async () => {
    await openWorkbench();
  });

  await step('the view says why SageMaker jobs are missing, with the fix', async () => {
    await showJobsView();
    let rows = [];
    try {
      await waitFor('the credentials warning and the local job', async () => {
        rows = await jobsViewRows();
        return rows.some((r) => /SageMaker jobs not listed/.test(r.text)) && rows.some((r) => r.text.startsWith(state.job));
      }, { timeout: 90_000 });
    } finally {
      say(`Jobs view: ${JSON.stringify(rows.map((r) => r.text))}`);
    }
    const warning = rows.find((r) => /SageMaker jobs not listed/.test(r.text));
    assert.match(warning.text, /aws sso login --profile dev/, 'the warning names the fix');
    assert.ok(rows.some((r) => r.text === 'Run aws sso login --profile dev'), 'a row runs the fix');
    assert.ok(rows.some((r) => r.text.startsWith('Pick AWS Profile')), 'a row picks the profile');
    assert.ok(!rows.some((r) => /No debuggable jobs yet/.test(r.text)));
    const status = await state.page.locator('.statusbar-item', { hasText: 'AWS: dev' }).first().innerText({ timeout: 30_000 });
    assert.match(status, /AWS: dev · us-west-2/);
    await screenshot('credentials-warning');
  });

  await step('set a breakpoint in training/train_ddp.py', async () => {
    await setBreakpoint(script, bpLine);
  });

  await step("the job row's inline Attach All Ranks button", async () => {
    await showJobsView();
    await clickInline(viewRow(state.job), 'Attach All Ranks');
  });

  await step(`the view: ${NODES} nodes, all ${RANKS} ranks paused at the breakpoint`, async () => {
    // the Call Stack renders only the rows on screen; the Jobs view (the whole side bar) shows all 8, and
    // "paused" there comes from each rank session's own stopped event.  Each session that starts brings
    // Run and Debug to the front (debug.openDebug): show the view and open its node rows again until done.
    let seen = [];
    try {
      await waitFor(`${RANKS} paused rank rows`, async () => {
        if (!(await jobsPane().isVisible())) {
          await showJobsView();
        }
        for (let n = 1; n <= NODES; n++) {
          const node = viewRow(`algo-${n}`);
          if ((await node.count()) && (await node.getAttribute('aria-expanded')) === 'false') {
            await node.click({ position: { x: 60, y: 10 } });
          }
        }
        seen = await jobsViewRows();
        const ranks = seen.filter((r) => /^rank \d+/.test(r.text));
        return ranks.length === RANKS && ranks.every((r) => /paused/.test(r.text));
      }, { timeout: 600_000, interval: 1000 });
    } finally {
      say(`Jobs view: ${JSON.stringify(seen.map((r) => r.text))}`);
    }
    await screenshot('view-8-ranks');
  });

  await step("the Call Stack: the job's session holding the rank sessions", async () => {
    await runCommand('View: Show Run and Debug');
    const rows = await waitFor("the job's session and rank 0 paused", async () => {
      const r = await callStackRows();
      return r.some((x) => x.label.startsWith(`Session Remote Debug: ${state.job}`)) &&
        r.some((x) => isRankSession(x, 0) && /Paused on breakpoint$/i.test(x.label)) ? r : undefined;
    }, { timeout: 60_000 });
    say(`call stack: ${JSON.stringify(rows.map((r) => r.label))}`);
    await screenshot('paused-8-ranks');
  });

  for (const rank of [0, RANKS - 1]) {
    await step(`rank ${rank}: its own values, in the subfolder's file`, async () => {
      if (rank === RANKS - 1) {
        // the last session row is below the fold: select the first and jump to the end of the list
        await state.page.locator('.debug-call-stack .monaco-list-row', { hasText: `Remote Debug: ${state.job}` }).first().click({ position: { x: 80, y: 10 } });
        await state.page.keyboard.press('End');
      }
      const value = await pausedRankLocals(rank, { line: bpLine, script: 'train_ddp.py' });
      assert.match(value('shard_marker') ?? '', new RegExp(`^shard_marker\\s*[:=]?\\s*${rank * 100}$`));
      assert.match(value('rank') ?? '', new RegExp(`^rank\\s*[:=]?\\s*${rank}$`));
    });
  }

  await step("Show Stacks from the job row's context menu", async () => {
    await showJobsView();
    await viewRow(state.job).click({ button: 'right', position: { x: 60, y: 10 } });
    // the menu takes the item under the pointer on Enter (a synthetic click does not always land on it)
    await state.page.locator('.context-view .action-label', { hasText: 'Show Stacks' }).first().hover();
    await state.page.keyboard.press('Enter');
    // the Stacks view: every rank in one of its classes ("ranks 0-7 (8)", or a few when their stacks differ)
    let rows = [];
    try {
      rows = await waitFor('the classes in the Stacks view', async () => {
        const r = (await stacksRows()).filter((x) => x.level === 1 && /^ranks? /.test(x.label));
        const size = (label) => Number(/\((\d+)\)$/.exec(label)?.[1] ?? 1); // "ranks 0-7 (8)", "rank 3"
        const count = r.reduce((n, x) => n + size(x.label), 0);
        return count === RANKS ? r : undefined;
      }, { timeout: 120_000 });
    } finally {
      say(`Stacks view: ${JSON.stringify(rows)}`);
    }
    await screenshot('stacks-view');
    await runCommand('Remote Debug: Open Stacks as JSON');
    const editor = state.page.locator('.monaco-editor .view-lines').first();
    await waitFor('the stacks document', async () => /"ranks"/.test((await editor.innerText()).replace(/\u00a0/g, ' ')), { timeout: 120_000 });
    const text = (await editor.innerText()).replace(/\u00a0/g, ' ');
    assert.match(text, /"job": "e2e-/);
    await screenshot('stacks');
    // every rank is in it: the CLI's own output, the same the document shows
    const stacks = JSON.parse(await cli(['stacks', state.job, '--json']));
    assert.deepEqual(stacks.ranks.map((r) => r.rank), [...Array(RANKS).keys()]);
  });

  await step("the job row's inline Stop Job button, confirmed", async () => {
    await showJobsView();
    await clickInline(viewRow(state.job), 'Stop Job');
    const dialog = state.page.locator('.monaco-dialog-box');
    await dialog.waitFor({ state: 'visible', timeout: 20_000 });
    assert.match(await dialog.innerText(), new RegExp(`Stop job ${state.job}\\?`));
    await dialog.locator('.monaco-button', { hasText: 'Stop Job' }).click();
    const job = await waitFor('the job to be stopped', async () => {
      const info = await jobInfo();
      return info && info.status !== 'InProgress' && info.status !== 'Stopping' ? info : undefined;
    }, { timeout: 240_000, interval: 1000 });
    assert.equal(job.status, 'Stopped');
    await waitFor('the rank sessions to end', async () => !(await callStackRows()).some((r) => /Paused/.test(r.label)), { timeout: 60_000 });
    await waitFor('the view to say Stopped', async () => (await jobsViewRows()).some((r) => r.text.startsWith(state.job) && r.text.includes('Stopped')), {
      timeout: 60_000,
    });
  });

  await step("Launch Local Job… from the view's title bar", async () => {
    const before = new Set(JSON.parse(await cli(['jobs', '--json'])).map((j) => j.name));
    await showJobsView();
    // a container of one view shows the view's title actions in the side bar's title; of two (the Stacks view is
    // there since Show Stacks), in the view's own header, on hover
    const header = state.page.locator('.part.sidebar .pane-header', { hasText: 'Jobs' }).first();
    if (await header.isVisible()) {
      await header.hover();
    }
    await state.page.locator('.part.sidebar .action-label[aria-label="Launch Local Job…"]:visible').first().click();
    const input = state.page.locator('.quick-input-widget input');
    await input.waitFor({ state: 'visible', timeout: 20_000 });
    await input.fill('train_ddp');
    await state.page.locator('.quick-input-list .monaco-list-row', { hasText: 'train_ddp.py' }).first().waitFor({ timeout: 30_000 });
    await state.page.keyboard.press('Enter');
    await waitFor('the ranks prompt', async () => /Ranks per node/.test(await state.page.locator('.quick-input-widget').innerText()), { timeout: 20_000 });
    await input.fill('1');
    await state.page.keyboard.press('Enter');
    // the launch options (keep-alive, hold on failure): none picked, OK
    await waitFor('the launch options', async () => /Keep alive/.test(await state.page.locator('.quick-input-widget').innerText()), { timeout: 20_000 });
    await state.page.keyboard.press('Enter');
    const launched = await waitFor('a new job', async () => JSON.parse(await cli(['jobs', '--json'])).find((j) => !before.has(j.name)), { timeout: 120_000 });
    say(`launched ${launched.name}`);
    try {
      await waitFor('the launch notification', async () => (await notifications()).some((n) => n.text.includes(`launched ${launched.name}`)), { timeout: 60_000 });
      await waitFor('the new job in the view', async () => (await jobsViewRows()).some((r) => r.text.startsWith(launched.name)), { timeout: 60_000 });
      assert.equal(launched.source_dir, state.workspace);
    } finally {
      await cli(['stop', launched.name, '--json']);
    }
  });

  await step('a CLI path that does not exist: the install offer names remote-debug-training', async () => {
    writeMachineSettings({ 'remoteDebug.cliPath': path.join(state.root, 'no-such-remote-debug') });
    const offer = await waitFor('the install offer', async () =>
      (await notifications()).find((n) => /cannot find the remote-debug CLI/.test(n.text)), { timeout: 90_000 });
    assert.match(offer.text, /remote-debug-training/);
    const toast = state.page.locator('.notification-toast', { hasText: 'cannot find the remote-debug CLI' }).first();
    assert.ok(await toast.locator('.monaco-button', { hasText: 'Install' }).count(), 'an Install button');
    await screenshot('install-offer');
  });
});
