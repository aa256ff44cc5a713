// The attach commands beyond the view's Attach buttons:
//
//   remoteDebug.pickJob             a running job's name, for launch.json's "job": "${command:remoteDebug.pickJob}"
//   remoteDebug.reattach            start again the rank sessions that ended unexpectedly, or a job attached before
//                                   a window reload
//   remoteDebug.attachStuckRanks    attach just the ranks that wait for a debugger or failed and are held
//   remoteDebug.changeLocalRoot     pick again which local folder is a SageMaker job's code (path mappings)
//
// and what the launch.json job form needs (JobDebugging), and the re-attach after a window reload.

import * as vscode from 'vscode';

import { AttachManager, showError } from './attach';
import { AttachMemory } from './attachMemory';
import { AttachTargets, isLocalPath } from './attachTarget';
import { CliError } from './cli';
import { JobDebugging } from './debugAdapter';
import { isRunning, JobInfo } from './events';
import { JobAttachConfiguration } from './jobConfig';
import { LineSink, Logger, logger } from './log';
import { JobsModel } from './model';
import { rankRanges, stuckRanks } from './rankPicker';
import { TreeNode } from './tree';

/** What these commands need of Commands: its job pick and its listing. */
export interface JobPicker {
  pickJob(options: { node?: TreeNode; placeHolder: string; single?: boolean }): Promise<JobInfo | undefined>;
  refresh(): Promise<void>;
}

type Attacher = Pick<AttachManager, 'attach' | 'reattach' | 'lostRanks' | 'isAttached' | 'sessionFor'>;

export class AttachCommands implements JobDebugging {
  private readonly log: Logger;

  constructor(
    private readonly jobs: JobPicker,
    private readonly model: JobsModel,
    private readonly attacher: Attacher,
    private readonly targets: AttachTargets,
    private readonly memory: AttachMemory,
    log: LineSink,
  ) {
    this.log = logger(log);
  }

  register(): vscode.Disposable[] {
    const wrap =
      <A extends unknown[], R>(name: string, fn: (...args: A) => Promise<R>) =>
      async (...args: A): Promise<R | undefined> => {
        try {
          return await fn.apply(this, args);
        } catch (err) {
          if (err instanceof CliError && err.message === 'cancelled') {
            return undefined;
          }
          const message = err instanceof Error ? err.message : String(err);
          this.log.error(`${name}: ${message}`);
          await showError(message);
          return undefined;
        }
      };
    return [
      vscode.commands.registerCommand('remoteDebug.pickJob', wrap('remoteDebug.pickJob', this.pickJobName)),
      vscode.commands.registerCommand('remoteDebug.reattach', wrap('remoteDebug.reattach', this.reattach)),
      vscode.commands.registerCommand('remoteDebug.attachStuckRanks', wrap('remoteDebug.attachStuckRanks', this.attachStuckRanks)),
      vscode.commands.registerCommand('remoteDebug.changeLocalRoot', wrap('remoteDebug.changeLocalRoot', this.changeLocalRoot)),
    ];
  }

  /** `${command:remoteDebug.pickJob}`: the running job's name (the only one without asking); undefined cancels F5. */
  async pickJobName(): Promise<string | undefined> {
    const info = await this.jobs.pickJob({ placeHolder: vscode.l10n.t('Attach the debugger to which job?'), single: true });
    return info?.name;
  }

  // --- the launch.json job form (debugAdapter.ts) ---------------------------------------------------

  async attachFromConfiguration(folder: vscode.WorkspaceFolder | undefined, config: JobAttachConfiguration): Promise<void> {
    try {
      await this.jobs.refresh();
      const entry = this.model.get(config.job);
      if (!entry) {
        throw new Error(
          this.model.error
            ? vscode.l10n.t('cannot list jobs: {0}', this.model.error)
            : vscode.l10n.t('there is no job named {0} (the Remote Debug view lists the jobs)', config.job),
        );
      }
      const target = await this.targets.resolve(entry.info, folder);
      if (!target) {
        return;
      }
      await this.attacher.attach({
        job: config.job,
        ranks: config.ranks,
        folder: target.folder,
        localRoot: target.localRoot,
        pathMappings: config.pathMappings,
        justMyCode: config.justMyCode,
      });
    } catch (err) {
      if (err instanceof CliError && err.message === 'cancelled') {
        return;
      }
      const message = err instanceof Error ? err.message : String(err);
      this.log.error(`launch.json attach to ${config.job}: ${message}`);
      await showError(message);
    }
  }

  async runningJobs(): Promise<string[]> {
    await this.jobs.refresh();
    return this.model
      .running()
      .filter((e) => e.info.debuggable)
      .map((e) => e.info.name);
  }

  // --- Re-attach -------------------------------------------------------------------------------------

  /** Jobs with something to re-attach: lost rank sessions, or attached before the window reloaded. */
  reattachable(): string[] {
    return this.model
      .running()
      .map((e) => e.info.name)
      .filter((job) => this.attacher.lostRanks(job).length > 0 || this.model.get(job)?.reattachable);
  }

  async reattach(node?: TreeNode): Promise<void> {
    let job = node && node.kind !== 'message' ? node.job : undefined;
    if (!job) {
      const candidates = this.reattachable();
      if (candidates.length === 0) {
        await vscode.window.showInformationMessage(vscode.l10n.t('Remote Debug: no debug session ended unexpectedly; nothing to re-attach.'));
        return;
      }
      job =
        candidates.length === 1
          ? candidates[0]
          : await vscode.window.showQuickPick(candidates, { placeHolder: vscode.l10n.t('Re-attach which job?') });
      if (!job) {
        return;
      }
    }
    const ranks = node?.kind === 'rank' ? [node.rank] : undefined;
    if (await this.attacher.reattach(job, ranks)) {
      return;
    }
    const remembered = this.memory.get(job);
    const info = this.model.get(job)?.info;
    if (remembered && info && !this.attacher.isAttached(job)) {
      // remembered from before a reload, but its workspace folder is not open now: ask where the code is
      const target = await this.targets.resolve(info);
      if (target) {
        const wanted = ranks ?? (remembered.ranks === 'all' ? undefined : remembered.ranks);
        await this.attacher.attach({ job, ranks: wanted, folder: target.folder, localRoot: target.localRoot });
      }
      return;
    }
    await vscode.window.showInformationMessage(vscode.l10n.t('Remote Debug: nothing of {0} to re-attach (use Attach All Ranks).', job));
  }

  // --- Attach Paused and Failed Ranks -------------------------------------------------------------------

  async attachStuckRanks(node?: TreeNode): Promise<void> {
    const info = await this.jobs.pickJob({ node, placeHolder: vscode.l10n.t('Attach the paused and failed ranks of which job?'), single: true });
    if (!info) {
      return;
    }
    const held = info.held_ranks.map((h) => h.rank);
    const ranks = stuckRanks(this.model.allRanks(info.name), held).filter((r) => !this.attacher.sessionFor(info.name, r));
    if (ranks.length === 0) {
      await vscode.window.showInformationMessage(
        vscode.l10n.t('Remote Debug: no rank of {0} waits for a debugger or is held after a failure.', info.name),
      );
      return;
    }
    const target = await this.targets.resolve(info);
    if (!target) {
      return;
    }
    this.log.info(`[${info.name}] attaching the paused and failed ranks ${rankRanges(ranks)}`);
    await this.attacher.attach({ job: info.name, ranks, folder: target.folder, localRoot: target.localRoot });
  }

  // --- Change Local Source Folder… ----------------------------------------------------------------------

  async changeLocalRoot(node?: TreeNode): Promise<void> {
    const info = await this.jobs.pickJob({ node, placeHolder: vscode.l10n.t('Change the local source folder of which job?') });
    if (!info) {
      return;
    }
    if (isLocalPath(info.source_dir) && this.targets.known(info) === info.source_dir) {
      await vscode.window.showInformationMessage(
        vscode.l10n.t(
          'Remote Debug: {0} runs the code copied from {1}, which its debug sessions map. To map something else, set "remoteDebug.pathMappings".',
          info.name,
          info.source_dir,
        ),
      );
      return;
    }
    const picked = await this.targets.change(info);
    if (!picked) {
      return;
    }
    this.log.info(`[${info.name}] local source folder: ${picked}`);
    await vscode.window.showInformationMessage(
      this.attacher.isAttached(info.name)
        ? vscode.l10n.t('Remote Debug: {0} now maps {1}. Rank sessions started from now on use it (Detach and attach again for the others).', info.name, picked)
        : vscode.l10n.t('Remote Debug: {0} now maps {1}.', info.name, picked),
    );
  }

  // --- after a window reload ------------------------------------------------------------------------

  /**
   * The jobs attached before the window reloaded: attached again when they still run (remoteDebug.reattachAfterReload,
   * else offered), forgotten when they ended.  Call after the first listing.
   */
  async restoreAfterReload(): Promise<void> {
    if (this.model.error || !this.model.loaded) {
      return; // cannot tell which still run: keep them for the next window
    }
    for (const remembered of this.memory.list()) {
      const entry = this.model.get(remembered.job);
      if (!entry || !isRunning(entry.info)) {
        this.log.info(`[${remembered.job}] attached before the window reloaded; it has ended since`);
        await this.memory.forget(remembered.job);
        continue;
      }
      if (this.attacher.isAttached(remembered.job)) {
        continue;
      }
      const folder = (vscode.workspace.workspaceFolders ?? []).find((f) => f.uri.toString() === remembered.folder);
      const auto = vscode.workspace.getConfiguration('remoteDebug', folder?.uri).get<boolean>('reattachAfterReload', true);
      if (auto && folder) {
        this.log.info(`[${remembered.job}] attached before the window reloaded: attaching again`);
        void this.attacher.reattach(remembered.job).catch((err) => showError(err instanceof Error ? err.message : String(err)));
        continue;
      }
      this.model.setReattachable(remembered.job, true);
      const again = vscode.l10n.t('Re-attach');
      void Promise.resolve(
        vscode.window.showInformationMessage(vscode.l10n.t('Remote Debug: {0} was attached before the window reloaded.', remembered.job), again),
      ).then((choice) => (choice === again ? this.reattach({ kind: 'job', job: remembered.job }) : undefined));
    }
  }
}
