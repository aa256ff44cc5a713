// Attach: `remote-debug attach JOB --json` as a managed background process, and the debug
// sessions we start for its ranks once they are ready.
//
// One AttachProcess per (job, rank selection) the user asked for; usually one per job.  Ranks a
// running process covers just get their sessions; the rest of a selection gets a process of its
// own (`--ranks` those), so attaching one node of 8 leaves the others untouched and attachable.
// A process owns its SSH tunnels: the sessions started on them live only as long as it runs, so
// detaching a job stops its sessions and its processes, and a process ending ends its sessions.

import * as vscode from 'vscode';

import { Cli, CliError, CliProcess, displayCommand } from './cli';
import {
  configName,
  PathMapping,
  rankConfiguration,
  RankDebugConfiguration,
  rankTag,
  resolveDebugType,
} from './debugConfig';
import {
  AttachEvent,
  describeEvent,
  EVENTS_VERSION,
  isKnownEvent,
  isRunning,
  JobEndedEvent,
  newerVersion,
  parseEventLine,
  UnknownEvent,
} from './events';
import { formatRanks, JobsModel } from './model';

export interface AttachSettings {
  debugType: string;
  pathMappings: PathMapping[];
  justMyCode: boolean;
  readyTimeoutSeconds: number;
}

export interface AttachRequest {
  job: string;
  ranks: number[] | undefined; // undefined: all
  folder: vscode.WorkspaceFolder;
}

interface Log {
  appendLine(line: string): void;
}

function key(job: string, rank: number): string {
  return `${job}#${rank}`;
}

export class AttachProcess {
  readonly wanted: Set<number> | 'all';
  readonly forwarded = new Map<number, { node: string; port: number; codeDir?: string }>();
  ready = false;
  cancelled = false;
  ended: JobEndedEvent | undefined;
  error: CliError | undefined;
  readonly process: CliProcess;
  private readyWaiters: Array<() => void> = [];
  private exitWaiters: Array<() => void> = [];
  exited = false;
  lastMessage = 'starting remote-debug attach';
  /** The CLI's event version was newer than ours: said once in the output channel. */
  toldNewerVersion = false;

  constructor(
    readonly request: AttachRequest,
    cli: Cli,
    settings: AttachSettings,
  ) {
    this.wanted = request.ranks === undefined ? 'all' : new Set(request.ranks);
    const args = [
      'attach',
      request.job,
      '--json',
      '--ide',
      'vscode',
      '--ranks',
      formatRanks(request.ranks),
      '--workspace',
      request.folder.uri.fsPath,
      '--timeout',
      String(settings.readyTimeoutSeconds),
      // the extension starts its own debug configurations: the CLI leaves the user's launch.json alone
      '--no-launch-json',
    ];
    this.process = cli.stream(args, { cwd: request.folder.uri.fsPath });
  }

  covers(rank: number): boolean {
    return this.wanted === 'all' || this.wanted.has(rank);
  }

  whenReadyOrExited(): Promise<void> {
    if (this.ready || this.exited) {
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      this.readyWaiters.push(resolve);
      this.exitWaiters.push(resolve);
    });
  }

  markReady(): void {
    this.ready = true;
    this.readyWaiters.splice(0).forEach((w) => w());
  }

  markExited(): void {
    this.exited = true;
    this.exitWaiters.splice(0).forEach((w) => w());
    this.readyWaiters.splice(0).forEach((w) => w());
  }
}

export class AttachManager implements vscode.Disposable {
  private readonly processes = new Map<string, AttachProcess[]>();
  /** Sessions we started, by job#rank. */
  private readonly sessions = new Map<string, vscode.DebugSession>();
  /** The attach process whose tunnel each job#rank's session was started on (it ends with that process). */
  private readonly sessionOwner = new Map<string, AttachProcess>();
  /** Ranks whose session start is in flight (so two events don't start two). */
  private readonly starting = new Set<string>();
  /** Ranks whose process `remote-debug run` replaced (rank-restarted), until the new process's rank-ready. */
  private readonly restarted = new Set<string>();
  /**
   * Ranks whose new process is ready while the replaced process's session has not ended yet: their session
   * starts once it has (the local port stays the same, so the new session must not race the old one).
   */
  private readonly pendingStart = new Map<string, AttachProcess>();
  private readonly disposables: vscode.Disposable[] = [];

  constructor(
    private readonly cli: Cli,
    private readonly model: JobsModel,
    private readonly log: Log,
    private readonly settings: () => AttachSettings,
    private readonly installedExtensions: () => string[] = () => vscode.extensions.all.map((e) => e.id),
  ) {
    this.disposables.push(
      vscode.debug.onDidStartDebugSession((s) => this.onSessionStarted(s)),
      vscode.debug.onDidTerminateDebugSession((s) => this.onSessionEnded(s)),
      vscode.debug.registerDebugAdapterTrackerFactory('*', {
        createDebugAdapterTracker: (session) => this.tracker(session),
      }),
    );
  }

  dispose(): void {
    this.disposables.forEach((d) => d.dispose());
    void this.stopAll();
  }

  isAttached(job: string): boolean {
    return (this.processes.get(job) ?? []).some((p) => !p.exited);
  }

  activeJobs(): string[] {
    return [...this.processes.keys()].filter((j) => this.isAttached(j));
  }

  sessionFor(job: string, rank: number): vscode.DebugSession | undefined {
    return this.sessions.get(key(job, rank));
  }

  /**
   * Attach to ranks of a job and start their debug sessions when ready.  Resolves once the
   * sessions were started (or the attach failed / was cancelled); the process keeps running.
   */
  async attach(request: AttachRequest): Promise<void> {
    const entry = this.model.get(request.job);
    if (entry && !isRunning(entry.info)) {
      throw new Error(`job ${request.job} is ${entry.info.status}: nothing to attach to`);
    }
    const live = (this.processes.get(request.job) ?? []).filter((p) => !p.exited && !p.cancelled);
    const requested = request.ranks;
    const covering = this.covering(live, requested);
    // the tunnels of these are up (or coming): just start the sessions that are missing
    const starts = [...covering].map(async ([proc, ranks]) => {
      this.log.appendLine(`[${request.job}] already attached: starting sessions for ranks ${formatRanks(ranks)}`);
      await proc.whenReadyOrExited();
      await this.startSessions(proc, ranks);
    });
    // the rest needs an attach process of its own, for just those ranks (the others stay as they are)
    const rest = requested === undefined ? (covering.size ? [] : undefined) : requested.filter((r) => !live.some((p) => p.covers(r)));
    if (rest?.length === 0) {
      await Promise.all(starts);
      return;
    }
    await Promise.all([...starts, this.spawn({ ...request, ranks: rest }, live)]);
  }

  /** Which live process starts the sessions of which requested ranks (all: an `all` process, if one runs). */
  private covering(live: AttachProcess[], requested: number[] | undefined): Map<AttachProcess, number[] | undefined> {
    const out = new Map<AttachProcess, number[] | undefined>();
    if (requested === undefined) {
      const all = live.find((p) => p.wanted === 'all');
      if (all) {
        out.set(all, undefined);
      }
      return out;
    }
    for (const rank of requested) {
      const proc = live.find((p) => p.covers(rank));
      if (proc) {
        out.set(proc, [...(out.get(proc) ?? []), rank]);
      }
    }
    return out;
  }

  /** A new `remote-debug attach` for the request's ranks; resolves once their sessions were started. */
  private async spawn(request: AttachRequest, live: AttachProcess[]): Promise<void> {
    const requested = request.ranks;
    const proc = new AttachProcess(request, this.cli, this.settings());
    this.processes.set(request.job, [...live, proc]);
    if (live.length === 0) {
      // with another process running the job stays attached (or attaching) as it is; this one has its notification
      this.model.attachStarted(request.job);
    }
    await vscode.window.withProgress(
      {
        location: vscode.ProgressLocation.Notification,
        title: `Remote Debug: attaching to ${request.job}`,
        cancellable: true,
      },
      async (progress, token) => {
        token.onCancellationRequested(() => {
          this.log.appendLine(`[${request.job}] cancelled`);
          void this.stopProcess(proc);
        });
        this.run(proc, (message) => progress.report({ message }));
        await proc.whenReadyOrExited();
        if (proc.ready && !proc.cancelled) {
          progress.report({ message: 'starting debug sessions' });
          await this.startSessions(proc, requested);
        }
      },
    );
    if (proc.error && !proc.cancelled) {
      throw proc.error;
    }
  }

  private run(proc: AttachProcess, report: (message: string) => void): void {
    const job = proc.request.job;
    this.log.appendLine(`[${job}] $ ${displayCommand(proc.process.inv)}`);
    proc.process.start({
      line: (line) => {
        const event = parseEventLine(line);
        if (!event) {
          if (line.trim()) {
            this.log.appendLine(`[${job}] ${line}`);
          }
          return;
        }
        const newer = newerVersion(event);
        if (newer !== undefined && !proc.toldNewerVersion) {
          proc.toldNewerVersion = true;
          this.log.appendLine(
            `[${job}] the remote-debug CLI prints events of version ${newer}; this extension knows version ${EVENTS_VERSION} ` +
              '(it reads what it knows and ignores the rest: consider updating the extension)',
          );
        }
        this.log.appendLine(`[${job}] ${describeEvent(event)}`);
        this.onEvent(proc, event, report);
      },
      stderr: (line) => {
        if (line.trim()) {
          this.log.appendLine(`[${job}] ${line}`);
        }
      },
      exit: (code, signal, error) => {
        proc.error = error;
        this.log.appendLine(`[${job}] remote-debug attach exited (${signal ?? `code ${code}`})${error ? `: ${error.message}` : ''}`);
        proc.markExited();
        const others = (this.processes.get(job) ?? []).filter((p) => p !== proc && !p.exited);
        this.processes.set(job, others);
        // only the sessions on its tunnels: another process of the job may debug other ranks (or the same ones)
        this.stopSessions(job, (rank) => {
          const owner = this.sessionOwner.get(key(job, rank));
          return owner ? owner === proc : proc.forwarded.has(rank);
        });
        if (others.length === 0) {
          this.model.attachEnded(job, proc.cancelled ? undefined : error?.message);
        } else {
          const lost = [...proc.forwarded.keys()].filter((rank) => !others.some((o) => o.forwarded.has(rank)));
          this.model.forwardingEnded(job, lost);
        }
        if (proc.ended) {
          const e = proc.ended;
          const how = `${e.status}${e.exit_code !== null ? `, exit code ${e.exit_code}` : ''}${e.failure_reason ? `: ${e.failure_reason}` : ''}`;
          void vscode.window.showInformationMessage(`Remote Debug: job ${job} ended (${how}).`);
        } else if (error && proc.ready && !proc.cancelled) {
          // failures before "ready" are reported by attach()'s caller
          void showError(`attach to ${job} stopped: ${error.message}`);
        }
      },
    });
  }

  private onEvent(proc: AttachProcess, event: AttachEvent | UnknownEvent, report: (message: string) => void): void {
    const job = proc.request.job;
    this.model.applyEvent(job, event);
    if (!isKnownEvent(event)) {
      return;
    }
    switch (event.event) {
      case 'job-status':
        report(`job ${event.status}${event.secondary_status ? ` / ${event.secondary_status}` : ''}${event.message ? `: ${event.message}` : ''}`);
        break;
      case 'waiting':
        report(`waiting for ${event.what} to start`);
        break;
      case 'node-connected':
        report(`connected to ${event.alias ?? event.node}`);
        break;
      case 'rank-ready': {
        proc.forwarded.set(event.rank, { node: event.node, port: event.local_port, codeDir: event.code_dir });
        report(`rank ${event.rank} ready (${proc.forwarded.size} forwarded)`);
        const k = key(job, event.rank);
        const restarted = this.restarted.delete(k);
        if (!proc.covers(event.rank)) {
          break;
        }
        if (restarted && (this.sessions.has(k) || this.starting.has(k))) {
          // the replaced process's session is still ending: start the new one after it
          this.log.appendLine(`[${job}] rank ${event.rank}: new process ready; its debug session starts once the old one has ended`);
          this.pendingStart.set(k, proc);
        } else if (proc.ready || restarted) {
          // a late rank (after the ready timeout), or a re-run's new process: attach it as it comes
          void this.startSessions(proc, [event.rank]);
        }
        break;
      }
      case 'rank-restarted': {
        // `remote-debug run` replaced the rank's process: end the old process's session; the new process's
        // rank-ready (same local port) follows, and its session starts once the old one has ended
        const k = key(job, event.rank);
        this.restarted.add(k);
        this.pendingStart.delete(k);
        report(`rank ${event.rank} restarted (run ${event.run})`);
        const session = this.sessions.get(k);
        if (session) {
          void Promise.resolve(vscode.debug.stopDebugging(session)).catch(() => undefined);
        }
        break;
      }
      case 'rank-listening':
        report(`rank ${event.rank} listening`);
        break;
      case 'ide-not-listening':
        report(`rank ${event.rank} waits for the IDE's debug server`);
        break;
      case 'warning':
        void vscode.window.showWarningMessage(`Remote Debug (${job}): ${event.message}`);
        break;
      case 'rank-failed':
        void vscode.window.showErrorMessage(
          `Remote Debug (${job}): rank ${event.rank} on ${event.node} failed: ${event.error ?? 'uncaught exception'}` +
            (event.held ? ' — held for a post-mortem: start its debug session to see the exception' : ''),
        );
        break;
      case 'ready':
        proc.markReady();
        break;
      case 'job-ended':
        proc.ended = event;
        break;
      default:
        break;
    }
  }

  /** Start a debug session for every forwarded rank in `ranks` (all: undefined) that has none. */
  async startSessions(proc: AttachProcess, ranks: number[] | undefined): Promise<void> {
    const job = proc.request.job;
    const targets = [...proc.forwarded.entries()]
      .filter(([rank]) => (ranks === undefined ? proc.covers(rank) : ranks.includes(rank)))
      .filter(([rank]) => !this.sessions.has(key(job, rank)) && !this.starting.has(key(job, rank)))
      .sort((a, b) => a[0] - b[0]);
    if (ranks !== undefined) {
      const missing = ranks.filter((r) => !proc.forwarded.has(r));
      if (missing.length) {
        void vscode.window.showWarningMessage(`Remote Debug: ranks ${missing.join(', ')} of ${job} have no debugger to attach to (yet).`);
      }
    }
    const settings = this.settings();
    const debugType = resolveDebugType(settings.debugType, this.installedExtensions());
    const configs: RankDebugConfiguration[] = targets.map(([rank, f]) =>
      rankConfiguration({
        job,
        rank,
        node: f.node,
        port: f.port,
        debugType,
        workspaceFolder: proc.request.folder.uri.fsPath,
        codeDir: f.codeDir ?? this.model.codeDir(job, f.node),
        pathMappingSetting: settings.pathMappings,
        justMyCode: settings.justMyCode,
      }),
    );
    // Like a compound: every rank gets its own top-level session, started together.
    await Promise.all(
      configs.map(async (config) => {
        const k = key(job, config.remoteDebug.rank);
        this.starting.add(k);
        this.sessionOwner.set(k, proc);
        this.model.setRankSession(job, config.remoteDebug.rank, 'attaching');
        try {
          const ok = await vscode.debug.startDebugging(proc.request.folder, config as vscode.DebugConfiguration);
          if (!ok) {
            this.log.appendLine(`[${job}] could not start "${config.name}" (type ${config.type})`);
            this.model.setRankSession(job, config.remoteDebug.rank, 'detached');
          }
        } catch (err) {
          this.log.appendLine(`[${job}] could not start "${config.name}": ${String(err)}`);
          this.model.setRankSession(job, config.remoteDebug.rank, 'detached');
        } finally {
          this.starting.delete(k);
          this.startPending(k);
        }
      }),
    );
  }

  private onSessionStarted(session: vscode.DebugSession): void {
    const tag = rankTag(session.configuration);
    if (!tag) {
      return;
    }
    this.sessions.set(key(tag.job, tag.rank), session);
    this.model.setRankSession(tag.job, tag.rank, 'attached');
  }

  private onSessionEnded(session: vscode.DebugSession): void {
    const tag = rankTag(session.configuration);
    if (!tag) {
      return;
    }
    const k = key(tag.job, tag.rank);
    if (this.sessions.get(k) === session) {
      this.sessions.delete(k);
      this.sessionOwner.delete(k);
    }
    this.model.setRankSession(tag.job, tag.rank, 'detached');
    this.startPending(k);
  }

  /** A rank's session waited for its replaced process's session to end: start it if nothing is in the way now. */
  private startPending(k: string): void {
    const proc = this.pendingStart.get(k);
    if (!proc || this.sessions.has(k) || this.starting.has(k)) {
      return;
    }
    this.pendingStart.delete(k);
    const rank = Number(k.slice(k.lastIndexOf('#') + 1));
    if (!proc.exited && !proc.cancelled && proc.forwarded.has(rank)) {
      void this.startSessions(proc, [rank]);
    }
  }

  /** Drop the restarts and pending starts of ranks whose sessions are being stopped (detach, the attach ended). */
  private forget(job: string, which: (rank: number) => boolean): void {
    const prefix = `${job}#`;
    const ours = (k: string) => k.startsWith(prefix) && which(Number(k.slice(prefix.length)));
    for (const k of [...this.pendingStart.keys()]) {
      if (ours(k)) {
        this.pendingStart.delete(k);
      }
    }
    for (const k of [...this.restarted]) {
      if (ours(k)) {
        this.restarted.delete(k);
      }
    }
  }

  private tracker(session: vscode.DebugSession): vscode.DebugAdapterTracker | undefined {
    const tag = rankTag(session.configuration);
    if (!tag) {
      return undefined;
    }
    return {
      onDidSendMessage: (message: { type?: string; event?: string; body?: { reason?: string; description?: string } }) => {
        if (message.type !== 'event') {
          return;
        }
        if (message.event === 'stopped') {
          this.model.setRankSession(tag.job, tag.rank, 'paused', message.body?.description ?? message.body?.reason);
        } else if (message.event === 'continued') {
          this.model.setRankSession(tag.job, tag.rank, 'attached');
        }
      },
      onWillReceiveMessage: (message: { type?: string; command?: string }) => {
        if (message.type === 'request' && ['continue', 'next', 'stepIn', 'stepOut', 'reverseContinue'].includes(message.command ?? '')) {
          this.model.setRankSession(tag.job, tag.rank, 'attached');
        }
      },
    };
  }

  private stopSessions(job: string, which: (rank: number) => boolean = () => true): void {
    this.forget(job, which);
    for (const [k, session] of [...this.sessions]) {
      const tag = rankTag(session.configuration);
      if (tag && tag.job === job && which(tag.rank)) {
        this.sessions.delete(k);
        this.sessionOwner.delete(k);
        void Promise.resolve(vscode.debug.stopDebugging(session)).catch(() => undefined);
      }
    }
  }

  private async stopProcess(proc: AttachProcess): Promise<void> {
    proc.cancelled = true;
    await proc.process.stop();
  }

  /** Stop one rank's debug session; the tunnels stay up, so it can be attached again. */
  async detachRank(job: string, rank: number): Promise<void> {
    this.pendingStart.delete(key(job, rank));
    const session = this.sessions.get(key(job, rank));
    if (session) {
      await Promise.resolve(vscode.debug.stopDebugging(session)).catch(() => undefined);
    }
  }

  /** Stop the job's debug sessions and attach processes (the job keeps running). */
  async detach(job: string): Promise<void> {
    this.stopSessions(job);
    await Promise.all((this.processes.get(job) ?? []).map((p) => this.stopProcess(p)));
  }

  async stopAll(): Promise<void> {
    await Promise.all([...this.processes.keys()].map((job) => this.detach(job)));
  }
}

export async function showError(message: string): Promise<void> {
  const choice = await vscode.window.showErrorMessage(`Remote Debug: ${message}`, 'Show Output');
  if (choice === 'Show Output') {
    await vscode.commands.executeCommand('remoteDebug.showOutput');
  }
}

export { configName };
