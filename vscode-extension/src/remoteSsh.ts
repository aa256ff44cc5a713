// Remote-SSH onto a job node: the URI we open and the settings we offer (only with consent).
//
// Pure helpers; the command in commands.ts asks the user and applies them.

export const REMOTE_SSH_EXTENSION = 'ms-vscode-remote.remote-ssh';

/** `vscode-remote://ssh-remote+<alias>/<code dir>`: Remote-SSH opens that folder on that host. */
export function remoteSshUri(alias: string, folder: string): string {
  if (!/^[A-Za-z0-9._-]+$/.test(alias)) {
    throw new Error(`bad ssh alias ${JSON.stringify(alias)}`);
  }
  const path = folder.startsWith('/') ? folder : `/${folder}`;
  return `vscode-remote://ssh-remote+${alias}${path.split('/').map(encodeURIComponent).join('/')}`;
}

export interface SettingChange {
  section: string; // e.g. "remote.SSH"
  key: string; // e.g. "localServerDownload"
  value: unknown;
  why: string;
}

export interface CurrentRemoteSshSettings {
  localServerDownload?: unknown;
  remotePlatform?: unknown;
}

/**
 * Settings that help Remote-SSH reach a training container, minus those already set that way:
 * containers often have no internet, so the VS Code Server should be downloaded here and copied
 * over; and declaring the platform of our hosts saves a prompt per node.
 */
export function suggestedSettings(current: CurrentRemoteSshSettings, aliases: string[]): SettingChange[] {
  const out: SettingChange[] = [];
  if (current.localServerDownload !== 'always') {
    out.push({
      section: 'remote.SSH',
      key: 'localServerDownload',
      value: 'always',
      why: 'download the VS Code Server on this machine and copy it to the node (training containers often have no internet)',
    });
  }
  const platforms =
    typeof current.remotePlatform === 'object' && current.remotePlatform !== null
      ? (current.remotePlatform as Record<string, unknown>)
      : {};
  const missing = aliases.filter((a) => platforms[a] !== 'linux');
  if (missing.length) {
    const merged: Record<string, unknown> = { ...platforms };
    for (const a of missing) {
      merged[a] = 'linux';
    }
    out.push({
      section: 'remote.SSH',
      key: 'remotePlatform',
      value: merged,
      why: `declare ${missing.join(', ')} as Linux hosts (saves a prompt per node)`,
    });
  }
  return out;
}

/** `ssh <alias>` for a terminal, when Remote-SSH is not installed. */
export function sshCommand(alias: string): string {
  return `ssh ${alias}`;
}

/**
 * What people call the kind of remote window VS Code is in (`vscode.env.remoteName`).  From such a window the
 * extension runs on the remote side, so it cannot see the Remote-SSH extension (a UI extension on the laptop) and the
 * ssh entries the CLI writes live on that remote machine, not where Remote-SSH would read them.
 */
export function remoteWindowKind(remoteName: string): string {
  switch (remoteName) {
    case 'ssh-remote':
      return 'Remote-SSH';
    case 'wsl':
      return 'WSL';
    case 'dev-container':
    case 'attached-container':
      return 'Dev Container';
    case 'codespaces':
      return 'Codespaces';
    case 'tunnel':
      return 'Remote Tunnel';
    default:
      return remoteName;
  }
}
