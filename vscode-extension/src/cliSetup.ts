// The CLI check at activation (and when the settings that pick the CLI change), and Install / Upgrade.
//
// What a Remote-SSH or Python extension user expects: one notification saying what is wrong with the tool and a
// button that fixes it in a terminal they can watch, then the extension picking the tool up without a reload.

import * as path from 'node:path';

import * as vscode from 'vscode';

import { Cli, CliSettings, displayCommand } from './cli';
import { resolveCommand } from './cliResolve';
import { checkCli, CliStatus, DISTRIBUTION, MIN_CLI_VERSION, pipInstallArgs } from './cliVersion';
import { runInTerminal } from './processTerminal';
import { installPython, PYTHON_EXTENSION } from './pythonInterpreter';
import { ignoredWorkspaceValue, untrustedRoots } from './trust';

interface Log {
  appendLine(line: string): void;
  show(preserveFocus?: boolean): void;
}

/** Set once the CLI answered `version --json` with a supported version: the walkthrough's install step completes. */
export const CLI_READY_CONTEXT = 'remoteDebug.cliReady';

export interface CliSetupDeps {
  cli: Cli;
  settings: () => CliSettings;
  log: Log;
  /** Re-list the jobs once a working CLI is in place. */
  refresh: () => Promise<void>;
  /** How the install runs (a terminal in VS Code; a stand-in in tests). */
  runInstall?: (python: string, args: string[]) => Promise<{ exitCode: number | null; output: string }>;
  /** A CLI over other settings (to try `<python> -m remote_debug` after an install). */
  cliFor?: (settings: CliSettings) => Cli;
}

/** The one-line message for a CLI that is not usable, and the button that fixes it. */
export function statusMessage(status: CliStatus, command: string): { text: string; action: string } | undefined {
  switch (status.kind) {
    case 'ok':
      return undefined;
    case 'missing':
      return {
        text: vscode.l10n.t(
          'Remote Debug: cannot find the remote-debug CLI ({0}). Install it ({1}), or set remoteDebug.cliPath / remoteDebug.pythonPath.',
          command,
          DISTRIBUTION,
        ),
        action: vscode.l10n.t('Install'),
      };
    case 'too-old':
      return {
        text: status.version
          ? vscode.l10n.t('Remote Debug: remote-debug {0} is older than {1}, the oldest this extension works with.', status.version, MIN_CLI_VERSION)
          : vscode.l10n.t('Remote Debug: this remote-debug CLI is older than {0} (it has no "version" command).', MIN_CLI_VERSION),
        action: vscode.l10n.t('Upgrade'),
      };
    case 'foreign':
      return {
        text: vscode.l10n.t(
          'Remote Debug: "{0}" is not the remote-debug CLI this extension drives (the PyPI package "remote-debug" is an unrelated tool). Install {1}.',
          command,
          DISTRIBUTION,
        ),
        action: vscode.l10n.t('Install'),
      };
    case 'broken':
      return {
        text: vscode.l10n.t('Remote Debug: remote-debug version --json failed: {0}', status.detail),
        action: vscode.l10n.t('Reinstall'),
      };
  }
}

/** "pip failed" with what to do next; PEP 668's "externally-managed-environment" gets its own advice. */
export function installFailureMessage(python: string, exitCode: number | null, output: string): string {
  if (/externally-managed-environment/.test(output)) {
    return vscode.l10n.t(
      'Remote Debug: {0} is managed by the system and pip may not install into it. Select a virtual environment\'s Python (Python: Select Interpreter) or set remoteDebug.pythonPath, then install again.',
      python,
    );
  }
  if (exitCode === null) {
    return vscode.l10n.t('Remote Debug: could not run {0} to install {1}: see the terminal.', python, DISTRIBUTION);
  }
  return vscode.l10n.t('Remote Debug: pip could not install {0} (exit code {1}): see the terminal.', DISTRIBUTION, exitCode);
}

export class CliSetup implements vscode.Disposable {
  private status: CliStatus | undefined;
  private checking: Promise<CliStatus> | undefined;
  private ready: boolean | undefined;
  private installing = false;
  private readonly disposables: vscode.Disposable[] = [];

  constructor(private readonly deps: CliSetupDeps) {}

  get lastStatus(): CliStatus | undefined {
    return this.status;
  }

  /** The command and the listeners: a check whenever the settings that choose the CLI change, or trust is granted. */
  register(): vscode.Disposable[] {
    this.disposables.push(
      vscode.commands.registerCommand('remoteDebug.installCli', () => this.install()),
      vscode.workspace.onDidChangeConfiguration((e) => {
        if (e.affectsConfiguration('remoteDebug.cliPath') || e.affectsConfiguration('remoteDebug.pythonPath')) {
          void this.check();
        }
      }),
      // Restricted Mode ignored the workspace's cliPath / pythonPath; with trust they apply: a different CLI
      vscode.workspace.onDidGrantWorkspaceTrust(() => void this.check().then(() => this.deps.refresh())),
    );
    return [this];
  }

  dispose(): void {
    this.disposables.splice(0).forEach((d) => d.dispose());
  }

  /** `version --json`; says what is wrong (once per check) and offers the fix.  Concurrent calls share one run. */
  check(): Promise<CliStatus> {
    this.checking ??= (async () => {
      try {
        const status = await checkCli(this.deps.cli);
        this.status = status;
        this.report(status);
        return status;
      } finally {
        this.checking = undefined;
      }
    })();
    return this.checking;
  }

  private report(status: CliStatus): void {
    const inv = this.deps.cli.invocation(['version', '--json']);
    for (const key of ['cliPath', 'pythonPath'] as const) {
      const ignored = ignoredWorkspaceValue(vscode.workspace.getConfiguration('remoteDebug'), key);
      if (ignored) {
        this.deps.log.appendLine(
          vscode.l10n.t('Restricted Mode: ignoring the workspace setting remoteDebug.{0} ({1}); trust the workspace to use it', key, ignored),
        );
      }
    }
    void this.setReady(status.kind === 'ok');
    if (status.kind === 'ok') {
      this.deps.log.appendLine(
        vscode.l10n.t('remote-debug {0} ({1}) on {2}', status.info.version, status.info.distribution || DISTRIBUTION, status.info.python || inv.command),
      );
      return;
    }
    this.deps.log.appendLine(`${displayCommand(inv)}: ${status.kind}: ${status.detail}`);
    if (!this.installing) {
      // during an install, afterInstall says how it went instead
      this.prompt(status);
    }
  }

  /** The warning for an unusable CLI, with its fix (Install / Upgrade) and Open Settings. */
  private prompt(status: CliStatus): void {
    const message = statusMessage(status, this.deps.cli.invocation([]).command);
    if (!message) {
      return;
    }
    const settings = vscode.l10n.t('Open Settings');
    void vscode.window.showWarningMessage(message.text, message.action, settings).then((choice) => {
      if (choice === message.action) {
        return this.install();
      }
      if (choice === settings) {
        return vscode.commands.executeCommand('workbench.action.openSettings', 'remoteDebug.');
      }
      return undefined;
    });
  }

  private async setReady(ready: boolean): Promise<void> {
    const was = this.ready ?? false; // the context key starts out unset (false): never "false" first
    this.ready = ready;
    if (ready && was) {
      // Confirmed again (e.g. Install or Upgrade clicked in the walkthrough with the CLI already there).  The
      // walkthrough completes its step on a *change* of the key; one it missed (it was not open then: seen in
      // code-server) would otherwise never come, so say it again.
      await vscode.commands.executeCommand('setContext', CLI_READY_CONTEXT, false);
      await vscode.commands.executeCommand('setContext', CLI_READY_CONTEXT, true);
    } else if (ready !== was) {
      await vscode.commands.executeCommand('setContext', CLI_READY_CONTEXT, ready);
    }
  }

  /**
   * `<python> -m pip install --upgrade remote-debug-training` in a terminal, with the Python extension's interpreter,
   * else remoteDebug.pythonPath, else python3.  Then: check again; if the configured CLI still is not the new one but
   * that Python has it, offer to point remoteDebug.pythonPath at it.
   */
  async install(): Promise<void> {
    if (this.installing) {
      await vscode.window.showInformationMessage(vscode.l10n.t('Remote Debug: an install of {0} is already running.', DISTRIBUTION));
      return;
    }
    this.installing = true;
    try {
      const folder = vscode.workspace.workspaceFolders?.[0]?.uri;
      const trusted = vscode.workspace.isTrusted !== false;
      const picked = await installPython({ pythonPath: this.deps.settings().pythonPath, folder, trusted });
      // untrusted, `python` must not resolve to the workspace's own (a python.exe in the folder, the cwd on Windows)
      const resolved = resolveCommand(picked.python, { untrustedRoots: untrustedRoots() });
      if (resolved.error !== undefined) {
        await vscode.window.showErrorMessage(vscode.l10n.t('Remote Debug: cannot install {0}: {1}', DISTRIBUTION, resolved.error));
        return;
      }
      const { python, from } = { python: resolved.command, from: picked.from };
      this.deps.log.appendLine(vscode.l10n.t('installing {0} with {1} (from {2})', DISTRIBUTION, python, from));
      const run =
        this.deps.runInstall ??
        ((command: string, args: string[]) => runInTerminal(vscode.l10n.t('Install {0}', DISTRIBUTION), command, args));
      const result = await run(python, pipInstallArgs());
      if (result.exitCode !== 0) {
        const select = vscode.l10n.t('Select Interpreter');
        const buttons = vscode.extensions.getExtension(PYTHON_EXTENSION) ? [select] : [];
        const choice = await vscode.window.showErrorMessage(installFailureMessage(python, result.exitCode, result.output), ...buttons);
        if (choice === select) {
          await vscode.commands.executeCommand('python.setInterpreter');
        }
        return;
      }
      await this.afterInstall(python);
    } finally {
      this.installing = false;
    }
  }

  private async afterInstall(python: string): Promise<void> {
    const status = await this.check();
    if (status.kind === 'ok') {
      await vscode.window.showInformationMessage(
        vscode.l10n.t('Remote Debug: remote-debug {0} is ready ({1}).', status.info.version, status.info.python || python),
      );
      await this.deps.refresh();
      return;
    }
    // installed, but what the settings run is not it (not on the PATH VS Code sees, or an older one first on it)
    const cliFor = this.deps.cliFor ?? ((s: CliSettings) => new Cli(() => s));
    const viaPython = await checkCli(cliFor({ ...this.deps.settings(), cliPath: '', pythonPath: python }));
    if (viaPython.kind !== 'ok') {
      this.prompt(status);
      return;
    }
    const interpreter = viaPython.info.python || python;
    const use = vscode.l10n.t('Use This Python');
    const choice = await vscode.window.showInformationMessage(
      vscode.l10n.t(
        'Remote Debug: {0} {1} is installed for {2}, but the remote-debug command the extension runs is not that one. Run it with this Python (set remoteDebug.pythonPath)?',
        DISTRIBUTION,
        viaPython.info.version,
        interpreter,
      ),
      use,
      vscode.l10n.t('Not Now'),
    );
    if (choice !== use) {
      return;
    }
    await vscode.workspace.getConfiguration('remoteDebug').update('pythonPath', interpreter, pythonPathTarget(interpreter));
    this.deps.log.appendLine(vscode.l10n.t('set remoteDebug.pythonPath = {0}', interpreter));
    // the configuration listener checks again and the jobs view refreshes on the settings change
  }
}

/**
 * Where to save remoteDebug.pythonPath: the workspace when the interpreter is the workspace's own (a .venv inside
 * a trusted folder), else the user settings (an interpreter elsewhere serves every window).
 */
export function pythonPathTarget(interpreter: string): vscode.ConfigurationTarget {
  const folders = vscode.workspace.workspaceFolders ?? [];
  const inside = folders.some((f) => {
    const rel = path.relative(f.uri.fsPath, interpreter);
    return rel !== '' && !rel.startsWith('..') && !path.isAbsolute(rel);
  });
  return inside && vscode.workspace.isTrusted !== false ? vscode.ConfigurationTarget.Workspace : vscode.ConfigurationTarget.Global;
}
