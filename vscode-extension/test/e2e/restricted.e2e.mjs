// End to end in a real VS Code host (code-server + chromium, as attach.e2e.mjs), with Workspace Trust on: a
// cloned repository whose .vscode/settings.json names its own "remote-debug" (a script that would run the moment
// the extension lists jobs) is opened in Restricted Mode.
//
//   - the extension still works there (limited support): the Jobs view lists the job with the CLI from the
//     machine's settings
//   - the workspace's executable never runs (it would leave a marker file); the output channel names the
//     CLI that did run
//
// Needs what ./harness.mjs says; screenshots in test-artifacts/e2e/restricted/.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';

import {
  env,
  jobsViewRows,
  launchJob,
  openWorkbench,
  outputPanelLines,
  runCommand,
  say,
  screenshot,
  startCodeServer,
  state,
  step,
  useHarness,
  waitFor,
} from './harness.mjs';

useHarness('restricted');

test('Restricted Mode: the Jobs view works with the machine CLI; the workspace cliPath never runs', { timeout: 600_000 }, async () => {
  const marker = path.join(state.root, 'workspace-cli-ran');
  const evil = path.join(state.workspace, 'tools', 'remote-debug');
  fs.mkdirSync(path.dirname(evil), { recursive: true });
  fs.writeFileSync(evil, `#!/bin/sh\ntouch '${marker}'\necho '[]'\n`, { mode: 0o755 });
  fs.mkdirSync(path.join(state.workspace, '.vscode'));
  fs.writeFileSync(path.join(state.workspace, '.vscode', 'settings.json'), JSON.stringify({ 'remoteDebug.cliPath': evil }, null, 2));
  fs.writeFileSync(path.join(state.workspace, 'train.py'), 'import time\ntime.sleep(600)\n');

  await step('launch a job with the CLI', async () => {
    await launchJob(['--wait', '0'], [env.python, 'train.py']);
  });

  await step('start code-server with Workspace Trust on', async () => {
    await startCodeServer({}, { workspaceTrust: true });
  });

  await step('open the workbench and decline to trust the folder', async () => {
    await openWorkbench();
    // code-server opens a folder it has not seen in Restricted Mode at once (a banner); a desktop VS Code
    // asks first: decline if it does
    const dialog = state.page.locator('.monaco-dialog-box');
    if (await dialog.waitFor({ state: 'visible', timeout: 5_000 }).then(() => true, () => false)) {
      say(`trust dialog: ${(await dialog.innerText()).replace(/\s+/g, ' ').slice(0, 200)}`);
      await dialog.locator('.monaco-button', { hasText: /No, I don.t trust the authors/ }).click();
    }
    await state.page.locator('.statusbar-item', { hasText: 'Restricted Mode' }).first().waitFor({ timeout: 30_000 });
  });

  await step('the Jobs view lists the job with the machine CLI', async () => {
    await runCommand('View: Show Remote Debug');
    let rows = [];
    try {
      await waitFor('the job in the view', async () => {
        rows = await jobsViewRows();
        return rows.some((r) => r.text.startsWith(state.job) && /InProgress/.test(r.text));
      }, { timeout: 90_000 });
    } finally {
      say(`Jobs view: ${JSON.stringify(rows.map((r) => r.text))}`);
    }
    await screenshot('restricted-jobs');
  });

  await step("the workspace's remote-debug never ran: the output names the machine's CLI", async () => {
    await runCommand('Remote Debug: Show Output');
    // (VS Code also leaves a restricted setting's workspace value out of inspect() here, so the extension's
    // "ignoring the workspace setting" hint has nothing to name: the proof is what ran)
    const bin = path.dirname(path.resolve(env.python)); // (./dev passes it as .../vscode-extension/../.venv/...)
    await waitFor("the CLI check's line in the output", async () =>
      (await outputPanelLines()).some((l) => l.includes(`(remote-debug-training) on ${bin}/`)), { timeout: 30_000 });
    await screenshot('restricted-output');
    assert.ok(!fs.existsSync(marker), 'the workspace-configured executable ran in Restricted Mode');
  });
});
