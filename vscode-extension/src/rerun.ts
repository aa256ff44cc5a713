// Sync and Re-run: iterate on a live, kept-alive job (`remote-debug launch --keep-alive S`) without relaunching it.
//
//   1. save the dirty editors of the synced folder (like VS Code's own "save before run")
//   2. `remote-debug sync JOB --json --source DIR`  copies the folder into every node's code dir
//   3. `remote-debug run JOB --json --wait S`       starts the job's entry again on every node, in the background;
//      its `run-output` lines go to an output channel, its exit code to a message
//   4. the attach process (started here when none runs) follows the re-run: `rank-restarted`, then `rank-ready`
//      on the same local port, and AttachManager starts the new processes' debug sessions, so they stop at the
//      breakpoints (`--wait S`: each new rank waits up to S s for its debugger).
//
// One run process per job: a second Sync and Re-run stops the current one first (SIGINT: the CLI stops the run
// and keeps the nodes; its `run` would replace the nodes' current run anyway).

import * as path from 'node:path';

import * as vscode from 'vscode';

import { AttachRequest, showError } from './attach';
import { Cli, CliError, CliProcess, displayCommand } from './cli';
import {
  describeSynced,
  isKnownEvent,
  JobInfo,
  parseEventLine,
  parseSynced,
  RunEndedEvent,
  runOutputLine,
  SyncedEvent,
} from './events';
import { JobsModel } from './model';

interface Log {
  appendLine(line: string): void;
}

interface Output extends Log {
  show(preserveFocus?: boolean): void;
}

/** What RunManager needs of AttachManager. */
export interface Attacher {
  isAttached(job: string): boolean;
  attach(request: AttachRequest): Promise<void>;
}

export interface RerunRequest {
  job: string;
  folder: vscode.WorkspaceFolder;
  /** The local folder `sync` copies (see syncSource). */
  source: string;
  /** `run --wait`: how long each new rank waits for a debugger (0: never). */
  waitSeconds: number;
  /** The ranks to attach when no attach process runs (undefined: all). */
  ranks: number[] | undefined;
}

/** How long a stopped `run` gets after SIGINT before SIGTERM (and SIGKILL after twice that): it stops remote ranks. */
const RUN_STOP_GRACE_MS = 25_000;

/** What an older CLI without sync/run gets instead of click's "No such command". */
function tooOld(command: string): string {
  return `Sync and Re-run needs a newer remote-debug CLI (this one has no "${command}" command): pip install -U remote-debug-training`;
}

export function syncArgs(job: string, source: string): string[] {
  return ['sync', job, '--json', '--source', source];
}

export function runArgs(job: string, waitSeconds: number): string[] {
  return ['run', job, '--json', '--wait', String(Math.max(0, waitSeconds))];
}

function within(child: string, parent: string): boolean {
  const c = path.resolve(child);
  const p = path.resolve(parent);
  return c === p || c.startsWith(p + path.sep);
}

/**
 * The local folder to sync: the job's own source dir when the workspace folder holds it (or is part of it),
 * so the code dir keeps the job's layout; otherwise the workspace folder, which is what the debug sessions'
 * path mappings map onto the code dir.
 */
export function syncSource(info: Pick<JobInfo, 'source_dir'>, folder: string): string {
  const src = info.source_dir;
  if (src && path.isAbsolute(src) && (within(src, folder) || within(folder, src))) {
    return path.resolve(src);
  }
  return folder;
}

/** A background `remote-debug run`. */
export class RunProcess {
  /** From `run-started`. */
  run: number | undefined;
  /** From `run-ended`. */
  ended: RunEndedEvent | undefined;
  readonly process: CliProcess;

  constructor(
    readonly job: string,
    cli: Cli,
    waitSeconds: number,
    cwd: string,
  ) {
    this.process = cli.stream(runArgs(job, waitSeconds), { cwd });
  }

  get name(): string {
    const run = this.ended?.run ?? this.run;
    return run !== undefined ? `run ${run} of ${this.job}` : `the run of ${this.job}`;
  }
}

export class RunManager implements vscode.Disposable {
  private readonly runs = new Map<string, RunProcess>();
  /** Per job, the latest Sync and Re-run: an older one that is overtaken while it syncs does not run. */
  private readonly generation = new Map<string, number>();
  /** Per job, the sync in flight (a second Sync and Re-run waits for it rather than syncing alongside). */
  private readonly syncing = new Map<string, Promise<unknown>>();

  constructor(
    private readonly cli: Cli,
    private readonly model: JobsModel,
    private readonly attacher: Attacher,
    private readonly log: Log,
    private readonly output: Output,
    private readonly refresh: () => Promise<void> = async () => undefined,
  ) {}

  dispose(): void {
    void this.stopAll();
  }

  isRunning(job: string): boolean {
    return this.runs.get(job)?.process.running ?? false;
  }

  activeJobs(): string[] {
    return [...this.runs.keys()];
  }

  /**
   * Save, sync (after stopping this job's current run, if any), then start the run in the background, and
   * attach if no attach process follows the job (after the run started: a kept-alive job that holds has no
   * ranks to attach to before it).  Resolves once the run was started and the attach, if one was needed, has
   * started its sessions.  A Sync and Re-run overtaken by a newer one for the same job while it waits or
   * syncs does not run.
   */
  async syncAndRerun(request: RerunRequest): Promise<void> {
    const { job } = request;
    const generation = (this.generation.get(job) ?? 0) + 1;
    this.generation.set(job, generation);
    const overtaken = () => this.generation.get(job) !== generation;

    const saved = await saveDirtyDocuments(request.source);
    if (saved.length) {
      this.log.appendLine(`[${job}] saved ${saved.join(', ')}`);
    }
    const inFlight = this.syncing.get(job);
    if (inFlight) {
      await inFlight.catch(() => undefined);
    }
    if (overtaken()) {
      return;
    }
    const previous = this.runs.get(job);
    if (previous) {
      this.log.appendLine(`[${job}] stopping ${previous.name} for the new one`);
      await this.stop(job);
    }
    if (overtaken()) {
      return;
    }

    this.model.setRerun(job, 'syncing');
    let synced: SyncedEvent;
    const sync = this.sync(request);
    this.syncing.set(job, sync);
    try {
      synced = await sync;
    } catch (err) {
      if (!overtaken()) {
        this.model.setRerun(job, this.runs.has(job) ? 'running' : undefined);
      }
      throw err;
    } finally {
      if (this.syncing.get(job) === sync) {
        this.syncing.delete(job);
      }
    }
    if (overtaken()) {
      return;
    }
    this.log.appendLine(`[${job}] ${describeSynced(synced)}`);

    this.start(request);
    if (!this.attacher.isAttached(job)) {
      // nothing follows the job's ranks: attach, so the new processes stop at the breakpoints
      this.log.appendLine(`[${job}] not attached: attaching so the re-run's ranks stop at breakpoints`);
      await this.attacher.attach({ job, ranks: request.ranks, folder: request.folder });
    }
  }

  private async sync(request: RerunRequest): Promise<SyncedEvent> {
    const args = syncArgs(request.job, request.source);
    this.log.appendLine(`[${request.job}] $ ${displayCommand(this.cli.invocation(args))}`);
    const result = await vscode.window.withProgress(
      {
        location: vscode.ProgressLocation.Notification,
        title: `Remote Debug: syncing ${path.basename(request.source) || request.source} to ${request.job}`,
        cancellable: true,
      },
      (_progress, token) => {
        const abort = new AbortController();
        token.onCancellationRequested(() => abort.abort());
        return this.cli.run(args, { cwd: request.folder.uri.fsPath, signal: abort.signal }).catch((err: unknown) => {
          throw err instanceof CliError && err.unknownCommand ? new Error(tooOld('sync')) : err;
        });
      },
    );
    return parseSynced(result.stdout);
  }

  /** Start `remote-debug run` for the job in the background (the caller stopped any previous one). */
  private start(request: RerunRequest): RunProcess {
    const { job } = request;
    const rp = new RunProcess(job, this.cli, request.waitSeconds, request.folder.uri.fsPath);
    this.runs.set(job, rp);
    this.model.setRerun(job, 'running');
    this.log.appendLine(`[${job}] $ ${displayCommand(rp.process.inv)}`);
    this.output.show(true);
    rp.process.start({
      line: (line) => this.onLine(rp, line),
      stderr: (line) => {
        if (line.trim()) {
          this.output.appendLine(`[${job}] ${line}`);
        }
      },
      exit: (code, signal, error) => {
        if (this.runs.get(job) === rp) {
          this.runs.delete(job);
          this.model.setRerun(job, undefined);
        }
        this.onExit(rp, code, signal, error && (error.unknownCommand ? tooOld('run') : error.message));
        void this.refresh();
      },
    });
    return rp;
  }

  private onLine(rp: RunProcess, line: string): void {
    const event = parseEventLine(line);
    if (!event || !isKnownEvent(event)) {
      if (line.trim()) {
        this.output.appendLine(`[${rp.job}] ${line}`);
      }
      return;
    }
    switch (event.event) {
      case 'run-output':
        this.output.appendLine(runOutputLine(event));
        break;
      case 'run-started':
        rp.run = event.run;
        this.model.applyEvent(rp.job, event);
        this.output.appendLine(
          `── ${rp.job}: run ${event.run} on ${(event.nodes ?? []).join(', ')}${event.command?.length ? `: ${event.command.join(' ')}` : ''} ──`,
        );
        break;
      case 'run-ended':
        rp.ended = event;
        break;
      default:
        this.output.appendLine(`[${rp.job}] ${line}`);
        break;
    }
  }

  private onExit(rp: RunProcess, code: number | null, signal: NodeJS.Signals | null, error: string | undefined): void {
    const ended = rp.ended;
    if (rp.process.stopping) {
      this.output.appendLine(`── ${rp.name}: stopped ──`);
      this.log.appendLine(`[${rp.job}] ${rp.name} stopped`);
      return;
    }
    if (ended) {
      const how = ended.interrupted ? `was interrupted (exit code ${ended.exit_code})` : `ended with exit code ${ended.exit_code}`;
      this.output.appendLine(`── ${rp.name} ${how} ──`);
      this.log.appendLine(`[${rp.job}] ${rp.name} ${how}`);
      if (ended.exit_code === 0 && !ended.interrupted) {
        void vscode.window.showInformationMessage(`Remote Debug: ${rp.name} ${how}.`);
      } else {
        void vscode.window.showErrorMessage(`Remote Debug: ${rp.name} ${how}.`, 'Show Output').then((choice) => {
          if (choice === 'Show Output') {
            this.output.show();
          }
        });
      }
      return;
    }
    // no run-ended: the CLI refused (not kept alive, no such job, ...) or died
    const why = error ?? `remote-debug run exited (${signal ?? `code ${code}`})`;
    this.output.appendLine(`── ${rp.name}: ${why} ──`);
    this.log.appendLine(`[${rp.job}] run: ${why}`);
    if (code === 0) {
      void vscode.window.showInformationMessage(`Remote Debug: ${rp.name} ended.`);
    } else {
      void showError(why);
    }
  }

  /** Stop the job's run process (SIGINT: the CLI stops the run on the nodes and keeps them); resolves once it exited. */
  async stop(job: string): Promise<boolean> {
    const rp = this.runs.get(job);
    if (!rp) {
      return false;
    }
    await rp.process.stop(RUN_STOP_GRACE_MS);
    return true;
  }

  async stopAll(): Promise<void> {
    await Promise.all([...this.runs.keys()].map((job) => this.stop(job)));
  }
}

/** Save the dirty editors of files under `folder` (what sync copies): their paths; throws when one cannot be saved. */
export async function saveDirtyDocuments(folder: string): Promise<string[]> {
  const dirty = vscode.workspace.textDocuments.filter(
    (d) => d.isDirty && !d.isUntitled && d.uri.scheme === 'file' && within(d.uri.fsPath, folder),
  );
  const saved = await Promise.all(dirty.map((d) => d.save()));
  const failed = dirty.filter((_, i) => !saved[i]).map((d) => path.relative(folder, d.uri.fsPath));
  if (failed.length) {
    throw new Error(`could not save ${failed.join(', ')}: nothing was synced`);
  }
  return dirty.map((d) => path.relative(folder, d.uri.fsPath));
}
