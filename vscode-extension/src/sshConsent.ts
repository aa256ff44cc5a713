// Ask once before anything edits ~/.ssh/config.
//
// The CLI keeps every ssh Host entry it writes under ~/.remote-debug/ssh/, and makes them visible to ssh (and so to
// Remote-SSH) with one line at the top of ~/.ssh/config: `Include "<state>/ssh/config"`.  `attach` adds that line
// unless given --no-ssh-include; `ssh-config JOB` always adds it.  The user's ssh config is theirs: the first edit
// needs a yes (Allow / Not Now / Never, remembered in globalState).  Attaching works without the line (the CLI
// talks to its own config), so attach never asks: until the user allows it, it passes --no-ssh-include; the
// question comes when the line is needed, at Open Remote-SSH.

import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

import * as vscode from 'vscode';

/** globalState key: 'allowed' | 'never' (absent: not asked yet, or "Not Now"). */
export const SSH_CONFIG_CONSENT_KEY = 'remoteDebug.sshConfigEdit';

export type SshConfigDecision = 'allowed' | 'never' | undefined;

/** The part of vscode.Memento used here (globalState; a map in tests). */
interface Memento {
  get(key: string): unknown;
  update(key: string, value: unknown): Thenable<void>;
}

/** The state dir the CLI uses: REMOTE_DEBUG_HOME, else ~/.remote-debug (remote_debug.laptop.core.paths.StatePaths). */
export function stateRoot(env: NodeJS.ProcessEnv = process.env, home: string = os.homedir()): string {
  const override = env.REMOTE_DEBUG_HOME?.trim();
  if (!override) {
    return path.join(home, '.remote-debug');
  }
  return override === '~' || override.startsWith('~/') ? path.join(home, override.slice(1)) : path.resolve(override);
}

/**
 * Whether the user's ssh config already starts with our Include line (then the CLI edits nothing and there is
 * nothing to ask).  The CLI moves its line to the top if it is elsewhere: that would be an edit, so only line 1 counts.
 */
export function startsWithOurInclude(userConfig: string, root: string): boolean {
  const first = userConfig.replace(/^\uFEFF/, '').split('\n')[0]?.trim() ?? '';
  const m = /^Include\s+"?(.*?)"?$/i.exec(first);
  return m !== null && m[1] === path.join(root, 'ssh', 'config');
}

function readUserSshConfig(home: string = os.homedir()): string {
  try {
    return fs.readFileSync(path.join(home, '.ssh', 'config'), 'utf8');
  } catch {
    return '';
  }
}

export class SshConfigConsent {
  constructor(
    private readonly state: Memento,
    private readonly includePresent: () => boolean = () => startsWithOurInclude(readUserSshConfig(), stateRoot()),
  ) {}

  decision(): SshConfigDecision {
    const value = this.state.get(SSH_CONFIG_CONSENT_KEY);
    return value === 'allowed' || value === 'never' ? value : undefined;
  }

  /** The CLI may add its Include line: the user allowed it, or it is already there (nothing would change). */
  mayEdit(): boolean {
    return this.decision() === 'allowed' || this.includePresent();
  }

  /** What attach adds to its argv: --no-ssh-include unless editing is allowed. */
  includeArgs(): string[] {
    return this.mayEdit() ? [] : ['--no-ssh-include'];
  }

  /** Ask (modal) unless already decided; true when the CLI may edit ~/.ssh/config now. */
  async ensure(): Promise<boolean> {
    if (this.mayEdit()) {
      return true;
    }
    if (this.decision() === 'never') {
      return false;
    }
    return this.ask();
  }

  /** The modal itself (also for "Allow…" after a Never). */
  async ask(): Promise<boolean> {
    const allow = vscode.l10n.t('Allow');
    const notNow = vscode.l10n.t('Not Now');
    const never = vscode.l10n.t('Never');
    const line = `Include "${path.join(stateRoot(), 'ssh', 'config')}"`;
    const choice = await vscode.window.showWarningMessage(
      vscode.l10n.t('Remote Debug: add one line to ~/.ssh/config?'),
      {
        modal: true,
        detail: vscode.l10n.t(
          'Remote-SSH and ssh reach job nodes through Host entries that remote-debug keeps in its own folder. One line at the top of ~/.ssh/config makes them visible:\n\n{0}\n\nNothing else in the file changes; "remote-debug ssh-config --remove" takes the line out again.',
          line,
        ),
      },
      allow,
      notNow,
      never,
    );
    if (choice === allow) {
      await this.state.update(SSH_CONFIG_CONSENT_KEY, 'allowed');
      return true;
    }
    if (choice === never) {
      await this.state.update(SSH_CONFIG_CONSENT_KEY, 'never');
    }
    return false;
  }
}

let active: SshConfigConsent | undefined;

/** Make `consent` the one sshIncludeArgs() consults (activate does this). */
export function useSshConsent(consent: SshConfigConsent): vscode.Disposable {
  active = consent;
  return new vscode.Disposable(() => {
    if (active === consent) {
      active = undefined;
    }
  });
}

/**
 * For attach's argv: [] when ~/.ssh/config may be edited, else ['--no-ssh-include'].  Before activation (unit tests
 * of other modules) there is no consent to consult and the CLI's own default applies.
 */
export function sshIncludeArgs(): string[] {
  return active ? active.includeArgs() : [];
}
