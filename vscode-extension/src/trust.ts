// Workspace Trust for the settings that name an executable.
//
// `remoteDebug.cliPath` and `remoteDebug.pythonPath` are run as programs, so a cloned repository's
// .vscode/settings.json could otherwise make the extension run any file it ships just by being opened.  package.json
// lists them in `capabilities.untrustedWorkspaces.restrictedConfigurations`: in Restricted Mode VS Code then leaves
// their workspace and folder values out of `get()`.  We do not rely on that alone (older hosts, forks, and a value
// read through another path would silently run the workspace's executable): while the workspace is not trusted these
// helpers take the user-level value, or the default, themselves.

import * as vscode from 'vscode';

/** The settings (under `remoteDebug.`) that package.json declares in `restrictedConfigurations`. */
export const RESTRICTED_SETTINGS = ['cliPath', 'pythonPath'] as const;
export type RestrictedSetting = (typeof RESTRICTED_SETTINGS)[number];

export interface ScopedValues<T> {
  defaultValue?: T;
  globalValue?: T;
  workspaceValue?: T;
  workspaceFolderValue?: T;
}

/**
 * The value to use: the effective one in a trusted workspace; in Restricted Mode the user's own (User settings, or
 * the remote machine's in a remote window, both of which VS Code reports as the global value), else the default.
 */
export function trustedValue<T>(values: ScopedValues<T> | undefined, effective: T, fallback: T, trusted: boolean): T {
  if (trusted) {
    return effective;
  }
  return values?.globalValue ?? values?.defaultValue ?? fallback;
}

/** `remoteDebug.<key>` as Workspace Trust allows it (see the module comment). */
export function restrictedSetting(config: vscode.WorkspaceConfiguration, key: RestrictedSetting, fallback: string): string {
  const trusted = vscode.workspace.isTrusted !== false;
  const value = trustedValue(config.inspect<string>(key), config.get<string>(key, fallback), fallback, trusted);
  return typeof value === 'string' ? value : fallback;
}

/** A workspace-level value the extension is ignoring right now (for a one-time hint), else undefined. */
export function ignoredWorkspaceValue(config: vscode.WorkspaceConfiguration, key: RestrictedSetting): string | undefined {
  if (vscode.workspace.isTrusted !== false) {
    return undefined;
  }
  const values = config.inspect<string>(key);
  const ws = values?.workspaceFolderValue ?? values?.workspaceValue;
  return typeof ws === 'string' && ws.trim() !== '' ? ws : undefined;
}

/**
 * The workspace folders while the workspace is not trusted (no executable inside them may run: src/cliResolve.ts),
 * else none.
 */
export function untrustedRoots(): string[] {
  if (vscode.workspace.isTrusted !== false) {
    return [];
  }
  return (vscode.workspace.workspaceFolders ?? []).map((f) => f.uri.fsPath);
}
