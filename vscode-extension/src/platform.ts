// Native Windows: the remote-debug CLI needs POSIX (fcntl file locks, ssh multiplexing), so every command would
// fail with a traceback about a missing module.  Said once, plainly, instead: use WSL or a Remote-SSH window,
// where the extension runs on Linux next to the CLI.  The Jobs view says it too (in place of the CLI's error).

import * as vscode from 'vscode';

import { JobsModel } from './model';

/** The message when the extension runs where the CLI cannot; undefined where it can. */
export function unsupportedPlatform(platform: string = process.platform, remoteName: string | undefined = vscode.env.remoteName): string | undefined {
  if (platform !== 'win32' || remoteName) {
    return undefined;
  }
  return vscode.l10n.t(
    'the remote-debug CLI does not run on Windows itself (it needs fcntl). Use WSL or Remote-SSH: open this folder in a WSL or Remote-SSH window, with remote-debug installed there.',
  );
}

/**
 * Say it once per window, and keep the Jobs view saying it: a listing error there is replaced by it (the CLI's
 * own error would be a traceback).  Returns what to dispose; nothing on a platform the CLI supports.
 */
export function warnIfUnsupported(model: JobsModel, message = unsupportedPlatform()): vscode.Disposable[] {
  if (!message) {
    return [];
  }
  const learnMore = vscode.l10n.t('WSL in VS Code');
  void Promise.resolve(vscode.window.showWarningMessage(vscode.l10n.t('Remote Debug: {0}', message), learnMore)).then((choice) =>
    choice === learnMore ? vscode.env.openExternal(vscode.Uri.parse('https://code.visualstudio.com/docs/remote/wsl')) : undefined,
  );
  const keep = () => {
    if (model.error !== undefined && model.error !== message) {
      model.setError(message);
    }
  };
  keep();
  const subscription = model.onDidChange(keep);
  return [{ dispose: () => subscription.dispose() }];
}
