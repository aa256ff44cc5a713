// Long CLI commands run under a progress notification the user can cancel: the cancel aborts the run, which
// stops the CLI process (Cli.run: SIGINT, SIGKILL if it does not go) and rejects with CliError('cancelled'),
// which the commands treat as "nothing to say".

import * as vscode from 'vscode';

export function withCancellableProgress<T>(title: string, task: (signal: AbortSignal) => Promise<T>): Thenable<T> {
  return vscode.window.withProgress({ location: vscode.ProgressLocation.Notification, title, cancellable: true }, (_progress, token) => {
    const abort = new AbortController();
    const subscription = token.onCancellationRequested(() => abort.abort());
    return task(abort.signal).finally(() => subscription.dispose());
  });
}
