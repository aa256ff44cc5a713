// Our own debug type, for VS Code without the Microsoft Python extension.
//
// Every rank's listener (debugpy.listen() in the job, forwarded here by `remote-debug attach`)
// already runs debugpy's DAP adapter, so the workbench can talk DAP to the forwarded port
// directly: the descriptor is just `new DebugAdapterServer(port, host)`.  (Starting
// `python -m debugpy.adapter` via DebugAdapterExecutable does not work for attach+connect: it
// waits for a debuggee to dial in.)

import * as vscode from 'vscode';

import { connectTarget, OWN_DEBUG_TYPE } from './debugConfig';

export class RankAdapterFactory implements vscode.DebugAdapterDescriptorFactory {
  createDebugAdapterDescriptor(session: vscode.DebugSession): vscode.ProviderResult<vscode.DebugAdapterDescriptor> {
    const target = connectTarget(session.configuration);
    if (typeof target === 'string') {
      throw new Error(target);
    }
    return new vscode.DebugAdapterServer(target.port, target.host);
  }
}

export class RankConfigurationProvider implements vscode.DebugConfigurationProvider {
  resolveDebugConfiguration(
    _folder: vscode.WorkspaceFolder | undefined,
    config: vscode.DebugConfiguration,
  ): vscode.ProviderResult<vscode.DebugConfiguration> {
    if (!config.type && !config.request && !config.name) {
      // F5 with no launch.json: nothing sensible to attach to without a job; point at the view
      void vscode.window
        .showInformationMessage('Remote Debug: attach from the Remote Debug view (Attach All Ranks).', 'Attach All Ranks')
        .then((choice) => (choice ? vscode.commands.executeCommand('remoteDebug.attachAllRanks') : undefined));
      return undefined;
    }
    if (config.request !== 'attach') {
      void vscode.window.showErrorMessage('Remote Debug: only "request": "attach" is supported by the remote-debug type.');
      return undefined;
    }
    const target = connectTarget(config);
    if (typeof target === 'string') {
      void vscode.window.showErrorMessage(`Remote Debug: ${target}`);
      return undefined;
    }
    // debugpy's attach fails inside pydevd when the arguments carry no options at all
    config.justMyCode ??= false;
    return config;
  }
}

export function registerDebugType(): vscode.Disposable[] {
  return [
    vscode.debug.registerDebugAdapterDescriptorFactory(OWN_DEBUG_TYPE, new RankAdapterFactory()),
    vscode.debug.registerDebugConfigurationProvider(OWN_DEBUG_TYPE, new RankConfigurationProvider()),
  ];
}
