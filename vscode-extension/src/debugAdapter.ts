// Our own debug type, `remote-debug`, in three forms:
//
//   {"job": "<name>" | "${command:remoteDebug.pickJob}", "ranks": "all"}   what users put in launch.json: F5 runs
//        the attach (AttachManager, as the view's Attach All Ranks does) and one session per rank starts under the
//        job's session; the launch itself starts no session (the resolver returns undefined once the attach runs).
//   {"connect": {"host", "port"}}   one forwarded rank: the per-rank configurations we generate when the Python
//        Debugger extension is absent.
//   the job's parent session (jobSession.ts), whose adapter is inline (and acts on every rank through `group`).
//
// Every rank's listener (debugpy.listen() in the job, forwarded here by `remote-debug attach`)
// already serves DAP, so the workbench can talk DAP to the forwarded port directly: the descriptor is just
// `new DebugAdapterServer(port, host)`.  (Starting `python -m debugpy.adapter` via DebugAdapterExecutable does not
// work for attach+connect: it waits for a debuggee to dial in.)

import * as vscode from 'vscode';

import { connectTarget, OWN_DEBUG_TYPE } from './debugConfig';
import {
  defaultJobConfiguration,
  dynamicJobConfiguration,
  isConfigurationError,
  isJobConfiguration,
  JobAttachConfiguration,
  parseJobConfiguration,
  parseRanksValue,
} from './jobConfig';
import { JobParentAdapter, ParentGroup, parentTag } from './jobSession';

/** What the job form needs: the attach behind F5, and the running jobs for the dynamic configurations. */
export interface JobDebugging {
  /** Attach as the configuration says (the same path as the view's attach); reports its own errors. */
  attachFromConfiguration(folder: vscode.WorkspaceFolder | undefined, config: JobAttachConfiguration): Promise<void>;
  /** The running jobs' names, freshly listed. */
  runningJobs(): Promise<string[]>;
}

export class RankAdapterFactory implements vscode.DebugAdapterDescriptorFactory {
  /** `group`: what the job's session acts through (its Pause / Continue / Step Over / Stop act on every rank). */
  constructor(private readonly group?: ParentGroup) {}

  createDebugAdapterDescriptor(session: vscode.DebugSession): vscode.ProviderResult<vscode.DebugAdapterDescriptor> {
    const parent = parentTag(session.configuration);
    if (parent) {
      return new vscode.DebugAdapterInlineImplementation(new JobParentAdapter(parent, this.group));
    }
    const target = connectTarget(session.configuration);
    if (typeof target === 'string') {
      throw new Error(target);
    }
    return new vscode.DebugAdapterServer(target.port, target.host);
  }
}

export class RankConfigurationProvider implements vscode.DebugConfigurationProvider {
  constructor(private readonly jobs?: JobDebugging) {}

  resolveDebugConfiguration(
    _folder: vscode.WorkspaceFolder | undefined,
    config: vscode.DebugConfiguration,
  ): vscode.ProviderResult<vscode.DebugConfiguration> {
    if (parentTag(config)) {
      return config; // the job's session, started by AttachManager
    }
    if (!config.type && !config.request && !config.name) {
      // F5 without a launch.json, this debugger chosen: attach every rank of a job the user picks
      return defaultJobConfiguration();
    }
    if (config.request !== 'attach') {
      void vscode.window.showErrorMessage(vscode.l10n.t('Remote Debug: only "request": "attach" is supported by the remote-debug type.'));
      return undefined;
    }
    if (isJobConfiguration(config)) {
      // `job` may still be ${command:remoteDebug.pickJob}: it is read once VS Code substituted it (below)
      const ranks = parseRanksValue(config.ranks);
      if (isConfigurationError(ranks)) {
        void vscode.window.showErrorMessage(vscode.l10n.t('Remote Debug: {0}', ranks.error));
        return undefined;
      }
      return config;
    }
    const target = connectTarget(config);
    if (typeof target === 'string') {
      void vscode.window.showErrorMessage(vscode.l10n.t('Remote Debug: {0}', target));
      return undefined;
    }
    // debugpy's attach fails inside pydevd when the arguments carry no options at all
    config.justMyCode ??= false;
    return config;
  }

  resolveDebugConfigurationWithSubstitutedVariables(
    folder: vscode.WorkspaceFolder | undefined,
    config: vscode.DebugConfiguration,
  ): vscode.ProviderResult<vscode.DebugConfiguration> {
    if (parentTag(config) || !isJobConfiguration(config)) {
      return config;
    }
    const parsed = parseJobConfiguration(config);
    if (isConfigurationError(parsed)) {
      void vscode.window.showErrorMessage(vscode.l10n.t('Remote Debug: {0}', parsed.error));
      return undefined;
    }
    if (!this.jobs) {
      return undefined;
    }
    // The attach runs on its own (its progress notification can be cancelled), its ranks' sessions start under
    // the job's session as they are ready: this launch itself starts nothing, so F5 returns at once.
    void this.jobs.attachFromConfiguration(folder, parsed);
    return undefined;
  }
}

/** The Run and Debug view's "Remote Debug…" entries: "Attach all ranks: <job>" for each running job. */
export class DynamicJobConfigurations implements vscode.DebugConfigurationProvider {
  constructor(private readonly jobs: JobDebugging) {}

  async provideDebugConfigurations(): Promise<vscode.DebugConfiguration[]> {
    const names = await this.jobs.runningJobs();
    return names.map((job) => dynamicJobConfiguration(job));
  }
}

export function registerDebugType(jobs?: JobDebugging, group?: ParentGroup): vscode.Disposable[] {
  const out = [
    vscode.debug.registerDebugAdapterDescriptorFactory(OWN_DEBUG_TYPE, new RankAdapterFactory(group)),
    vscode.debug.registerDebugConfigurationProvider(OWN_DEBUG_TYPE, new RankConfigurationProvider(jobs)),
  ];
  if (jobs) {
    out.push(
      vscode.debug.registerDebugConfigurationProvider(
        OWN_DEBUG_TYPE,
        new DynamicJobConfigurations(jobs),
        vscode.DebugConfigurationProviderTriggerKind.Dynamic,
      ),
    );
  }
  return out;
}
