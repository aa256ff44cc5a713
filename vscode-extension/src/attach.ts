// Attach: `remote-debug attach JOB --json` as a managed background process, and the debug
// sessions we start for its ranks once they are ready.
//
// One AttachProcess per (job, rank selection) the user asked for; usually one per job.  Ranks a
// running process covers just get their sessions; the rest of a selection gets a process of its
// own (`--ranks` those), so attaching one node of 8 leaves the others untouched and attachable.
// A process owns its SSH tunnels: the sessions started on them live only as long as it runs, so
// detaching a job stops its sessions and its processes, and a process ending ends its sessions.
//
// The rank sessions are children of one session per job (jobSession.ts), named rank first.  A rank session
// that ends because the connection dropped is started again when the CLI says the node is back
// (`reconnected`) or the rank is ready again; what happens to many ranks at once is said in one notification
// (notices.ts); the attached jobs are remembered for a window reload (attachMemory.ts).

import * as vscode from 'vscode';

import { AttachMemory } from './attachMemory';
import { Cli, CliError, CliProcess, displayCommand } from './cli';
import {
  configName,
  debugTypeProblem,
  PathMapping,
  rankConfiguration,
  RankDebugConfiguration,
  rankTag,
  resolveDebugType,
  sessionName,
} from './debugConfig';
import {
  AttachEvent,
  describeEvent,
  EVENTS_VERSION,
  GROUP_ACTION_TITLES,
  GroupAction,
  GroupReply,
  isKnownEvent,
  isRunning,
  JobEndedEvent,
  newerVersion,
  parseEventLine,
  UnknownEvent,
} from './events';
import { describeGroupReply, runGroupAction } from './groupActions';
import { childOptions, ParentGroup, parentConfiguration, parentTag, ParentTag, RankTally } from './jobSession';
import { LineSink, Logger, logger } from './log';
import { formatRanks, JobsModel } from './model';
import { NoticeBatcher, NoticeSummary, Scheduler } from './notices';
import { RestartBudget, SessionEnds } from './sessionEnds';
import { sshIncludeArgs } from './sshConsent';

export interface AttachSettings {
  debugType: string;
  pathMappings: PathMapping[];
  justMyCode: boolean;
  readyTimeoutSeconds: number;
  /** One rank's stop pauses every rank, one Continue continues all (the CLI's default); false: `--non-stop`. */
  allStop?: boolean;
}

export interface AttachRequest {
  job: string;
  ranks: number[] | undefined; // undefined: all
  folder: vscode.WorkspaceFolder;
  /** The local folder whose contents are the job's code dir (attachTarget.ts); undefined: the workspace folder. */
  localRoot?: string;
  /** A launch.json configuration's own pathMappings / justMyCode: they win over the settings. */
  pathMappings?: PathMapping[];
  justMyCode?: boolean;
}

export interface AttachOptions {
  /** Where attached jobs are remembered for a window reload. */
  memory?: AttachMemory;
  /** The local root of a job when a request comes without one (a re-run's attach): attachTarget.ts `known`. */
  localRootFor?: (job: string) => string | undefined;
  /** How long notices gather before they are shown (notices.ts), and the clock that times it. */
  noticeDelayMs?: number;
  scheduler?: Scheduler;
  /** How long a job's own session may take to start before its ranks start without it. */
  parentTimeoutMs?: number;
  /** A lost session that ends this soon after its node's `reconnected` is started again at once. */
  recentReconnectMs?: number;
  restartBudget?: RestartBudget;
  /** How long after the user stopped a job's session it is forgotten for the next window (not when the window closed). */
  forgetDelayMs?: number;
  /**
   * How long a session lost to a dropped connection waits before it is said: the job may have ended (stopped from a
   * terminal, failed), which is the one news then, not a tunnel to wait for.
   */
  lostNoticeDelayMs?: number;
  /**
   * Whether the job listing's notification already said that the rank failed and is held (heldNotices.ts): the
   * attach's `rank-failed` for it is then not said again (after that notification's Attach it was a second toast,
   * "attach to see the exception", over the session paused at it).
   */
  heldFailureTold?: (job: string, rank: number) => boolean;
}

/** How long an all-stop or a rank waiting in native code stays in the status bar. */
const STATUS_LINE_MS = 10_000;
/** How long a lost session's notice waits for the job's end (the attach polls the job every second or so). */
const LOST_NOTICE_DELAY_MS = 4000;

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
  /** Stopped for a window reload / shutdown: its job stays remembered for the next window. */
  keepMemory = false;
  /** The debugType setting could not be used: said once. */
  toldDebugType = false;

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
      ...(settings.allStop === false ? ['--non-stop'] : []),
      ...sshIncludeArgs(), // --no-ssh-include until the user allows the ~/.ssh/config Include line (sshConsent.ts)
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

/** The job's parent session: starting, running, or being stopped by us. */
interface ParentState {
  id: string;
  session?: vscode.DebugSession;
  starting?: Promise<vscode.DebugSession | undefined>;
  /** It could not be started: the job's ranks start without it until the job's attach ends. */
  failed?: boolean;
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
  /** The job's own session, the parent of its rank sessions (jobSession.ts), by job. */
  private readonly parents = new Map<string, ParentState>();
  private readonly parentWaiters = new Map<string, (session: vscode.DebugSession) => void>();
  /** A Detach All in flight, by job: the job's attach is stopped only once it has reached the ranks. */
  private readonly groupDetaching = new Map<string, Promise<unknown>>();
  private parentSeq = 0;
  /** Why each rank session ended (a stop, the rank's end, a dropped connection). */
  private readonly ends = new SessionEnds();
  /** Ranks whose session ended when the connection dropped, by job#rank: started again when their node is back. */
  private readonly lost = new Map<string, AttachProcess>();
  /** When each job/node last said `reconnected`. */
  private readonly reconnectedAt = new Map<string, number>();
  private readonly budget: RestartBudget;
  /** stopAll() ran: the window closes or reloads (what ends now is no user's detach). */
  private shuttingDown = false;
  private readonly notices: NoticeBatcher;
  private statusMessage: vscode.Disposable | undefined;
  private readonly log: Logger;
  private readonly disposables: vscode.Disposable[] = [];

  constructor(
    private readonly cli: Cli,
    private readonly model: JobsModel,
    log: LineSink,
    private readonly settings: (scope?: vscode.Uri) => AttachSettings,
    private readonly installedExtensions: () => string[] = () => vscode.extensions.all.map((e) => e.id),
    private readonly options: AttachOptions = {},
  ) {
    this.log = logger(log);
    this.budget = options.restartBudget ?? new RestartBudget();
    this.notices = new NoticeBatcher((summary, job) => this.showNotice(summary, job), options.scheduler, options.noticeDelayMs);
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
    this.notices.dispose();
    this.statusMessage?.dispose();
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

  /** The job of one of our sessions (a rank's or the job's own), by the session's id. */
  jobOfSessionId(id: string): string | undefined {
    for (const session of this.sessions.values()) {
      if (session.id === id) {
        return rankTag(session.configuration)?.job;
      }
    }
    return [...this.parents.entries()].find(([, state]) => state.session?.id === id)?.[0];
  }

  // --- group actions: every rank of a job at once (groupActions.ts) --------------------------------------

  /**
   * `remote-debug ranks ACTION JOB`: the job's running attach continues, pauses, steps or detaches every rank it
   * debugs.  Rejects with one line (the job is not attached, the CLI's refusal).
   */
  async groupAction(job: string, action: GroupAction): Promise<GroupReply> {
    if (!this.isAttached(job)) {
      throw new Error(vscode.l10n.t('{0}: {1} is not attached', GROUP_ACTION_TITLES[action], job));
    }
    if (action === 'detach') {
      // each rank's session is told `terminated`: an end we asked for, not a dropped connection to recover
      for (const [k, session] of this.sessions) {
        if (k.startsWith(`${job}#`)) {
          this.ends.expect(session.id);
        }
      }
    }
    const run = runGroupAction(this.cli, job, action);
    if (action === 'detach') {
      this.groupDetaching.set(job, run.catch(() => undefined));
    }
    try {
      const reply = await run;
      this.log.info(`[${job}] ${describeGroupReply(reply)}`);
      return reply;
    } finally {
      if (action === 'detach') {
        this.groupDetaching.delete(job);
      }
    }
  }

  /**
   * Detach All Ranks: every rank let go at once by the attach (none stays paused by all-stop while the others are
   * let go one by one), then the job detached as the view's Detach does (its sessions, its attach, its tunnels).
   * Without the group (an older CLI, the attach gone) each rank's session is stopped on its own, as before.
   */
  async detachAfterGroup(job: string): Promise<void> {
    try {
      await this.groupAction(job, 'detach');
    } catch (err) {
      this.log.warn(`[${job}] Detach All: ${err instanceof Error ? err.message : String(err)}; stopping each rank's session instead`);
    }
    await this.detach(job);
  }

  /** What the jobs' own sessions act through (jobSession.ts): their Pause / Continue / Step Over / Stop. */
  parentGroup(): ParentGroup {
    return {
      act: (tag, action) => this.parentAction(tag, action),
      ranks: (job) => this.tally(job),
      onDidChangeRanks: (listener) => this.model.onDidChange(listener),
    };
  }

  private async parentAction(tag: ParentTag, action: GroupAction): Promise<void> {
    // a parent we are ending ourselves (the job's attach ended, Detach): nothing of the job to act on
    if (this.parents.get(tag.job)?.id !== tag.id || !this.isAttached(tag.job)) {
      return;
    }
    try {
      await this.groupAction(tag.job, action);
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      if (action === 'detach') {
        this.log.warn(`[${tag.job}] Detach All: ${message}; stopping each rank's session instead`);
      } else {
        this.log.error(`[${tag.job}] ${GROUP_ACTION_TITLES[action]}: ${message}`);
        void showError(message);
      }
    }
  }

  private tally(job: string): RankTally {
    let sessions = 0;
    let stopped = 0;
    for (const k of this.sessions.keys()) {
      if (k.startsWith(`${job}#`)) {
        sessions++;
        if (this.model.rankEntry(job, rankOf(k))?.state === 'paused') {
          stopped++;
        }
      }
    }
    return { sessions, stopped };
  }

  /**
   * Attach to ranks of a job and start their debug sessions when ready.  Resolves once the
   * sessions were started (or the attach failed / was cancelled); the process keeps running.
   */
  async attach(request: AttachRequest): Promise<void> {
    const entry = this.model.get(request.job);
    if (entry && !isRunning(entry.info)) {
      throw new Error(vscode.l10n.t('job {0} is {1}: nothing to attach to', request.job, entry.info.status));
    }
    request = { ...request, localRoot: request.localRoot ?? this.options.localRootFor?.(request.job) };
    this.model.setReattachable(request.job, false);
    void this.options.memory?.remember({ job: request.job, ranks: request.ranks, folder: request.folder.uri, localRoot: request.localRoot });
    const live = (this.processes.get(request.job) ?? []).filter((p) => !p.exited && !p.cancelled);
    const requested = request.ranks;
    const covering = this.covering(live, requested);
    // the tunnels of these are up (or coming): just start the sessions that are missing
    const starts = [...covering].map(async ([proc, ranks]) => {
      this.log.info(`[${request.job}] already attached: starting sessions for ranks ${formatRanks(ranks)}`);
      await proc.whenReadyOrExited();
      ranks?.forEach((rank) => this.budget.reset(key(request.job, rank)));
      await this.startSessions(proc, ranks, request);
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
    const proc = new AttachProcess(request, this.cli, this.settings(request.folder.uri));
    this.processes.set(request.job, [...live, proc]);
    if (live.length === 0) {
      // with another process running the job stays attached (or attaching) as it is; this one has its notification
      this.model.attachStarted(request.job);
    }
    await vscode.window.withProgress(
      {
        location: vscode.ProgressLocation.Notification,
        title: vscode.l10n.t('Remote Debug: attaching to {0}', request.job),
        cancellable: true,
      },
      async (progress, token) => {
        token.onCancellationRequested(() => {
          this.log.info(`[${request.job}] cancelled`);
          void this.stopProcess(proc);
        });
        this.run(proc, (message) => progress.report({ message }));
        await proc.whenReadyOrExited();
        if (proc.ready && !proc.cancelled) {
          progress.report({ message: vscode.l10n.t('starting debug sessions') });
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
    this.log.info(`[${job}] $ ${displayCommand(proc.process.inv)}`);
    proc.process.start({
      line: (line) => {
        const event = parseEventLine(line);
        if (!event) {
          if (line.trim()) {
            this.log.info(`[${job}] ${line}`);
          }
          return;
        }
        const newer = newerVersion(event);
        if (newer !== undefined && !proc.toldNewerVersion) {
          proc.toldNewerVersion = true;
          this.log.warn(
            `[${job}] the remote-debug CLI prints events of version ${newer}; this extension knows version ${EVENTS_VERSION} ` +
              '(it reads what it knows and ignores the rest: consider updating the extension)',
          );
        }
        this.log.info(`[${job}] ${describeEvent(event)}`);
        this.onEvent(proc, event, report);
      },
      stderr: (line) => {
        if (line.trim()) {
          this.log.info(`[${job}] ${line}`);
        }
      },
      exit: (code, signal, exitError) => {
        // after `job-ended` the attach's exit code is the job's outcome (1: it did not complete), no attach failure:
        // the job's end says it (a failed job showed as "finished" plus a false "Attach failed")
        const error = proc.ended ? undefined : exitError;
        proc.error = error;
        const how = `[${job}] remote-debug attach exited (${signal ?? `code ${code}`})${error ? `: ${error.message}` : ''}`;
        if (error && !proc.cancelled) {
          this.log.error(how);
        } else {
          this.log.info(how);
        }
        proc.markExited();
        const others = (this.processes.get(job) ?? []).filter((p) => p !== proc && !p.exited);
        this.processes.set(job, others);
        // only the sessions on its tunnels: another process of the job may debug other ranks (or the same ones)
        const ours = (rank: number) => {
          const owner = this.sessionOwner.get(key(job, rank));
          return owner ? owner === proc : proc.forwarded.has(rank);
        };
        this.stopSessions(job, ours);
        this.forgetLost(job, (rank) => this.lost.get(key(job, rank)) === proc);
        if (others.length === 0) {
          this.endParent(job);
          this.model.attachEnded(job, proc.cancelled ? undefined : error?.message);
          // the job ended, the attach failed or was cancelled: nothing to attach again after a reload
          if (!proc.keepMemory && (proc.ended || proc.cancelled || error)) {
            void this.options.memory?.forget(job);
          }
        } else {
          const lost = [...proc.forwarded.keys()].filter((rank) => !others.some((o) => o.forwarded.has(rank)));
          this.model.forwardingEnded(job, lost);
        }
        if (proc.ended) {
          this.showJobEnded(job, proc.ended);
        } else if (error && proc.ready && !proc.cancelled) {
          // failures before "ready" are reported by attach()'s caller
          void showError(vscode.l10n.t('attach to {0} stopped: {1}', job, error.message));
        }
      },
    });
  }

  /**
   * The job ended while attached: one message.  A job that did not complete says so as an error, with why; what was
   * gathered about its ranks (a crash's "rank failed") comes first, and a session lost as the job went is no news.
   */
  private showJobEnded(job: string, e: JobEndedEvent): void {
    const how = `${e.status}${e.exit_code !== null ? `, exit code ${e.exit_code}` : ''}${e.failure_reason ? `: ${e.failure_reason}` : ''}`;
    this.notices.drop(job, 'session-lost');
    this.notices.flush();
    if (e.status === 'Completed') {
      void vscode.window.showInformationMessage(vscode.l10n.t('Remote Debug: job {0} ended ({1}).', job, how));
      return;
    }
    const showOutput = vscode.l10n.t('Show Output');
    const text =
      e.status === 'Failed'
        ? vscode.l10n.t('Remote Debug: job {0} failed ({1}).', job, how)
        : vscode.l10n.t('Remote Debug: job {0} ended ({1}).', job, how);
    void Promise.resolve(vscode.window.showErrorMessage(text, showOutput)).then((choice) =>
      choice === showOutput ? vscode.commands.executeCommand('remoteDebug.showOutput') : undefined,
    );
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
        // a wait that drags on says where it looks (log group, region, profile) and for how long: show it
        report(event.detail ? `waiting for ${event.what} (${Math.round(event.seconds ?? 0)} s): ${event.detail}` : `waiting for ${event.what} to start`);
        break;
      case 'node-connected':
        report(vscode.l10n.t('connected to {0}', event.alias ?? event.node));
        break;
      case 'reconnected':
        this.onReconnected(proc, event.node);
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
          this.log.info(`[${job}] rank ${event.rank}: new process ready; its debug session starts once the old one has ended`);
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
          this.stopSession(session);
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
        this.notices.add({ job, kind: 'warning', message: event.message, rank: event.rank ?? undefined });
        break;
      case 'rank-failed':
        if (event.held && this.options.heldFailureTold?.(job, event.rank)) {
          break; // said by the listing's notification (the output has the event's line)
        }
        this.notices.add({
          job,
          kind: 'rank-failed',
          rank: event.rank,
          node: event.node,
          message: event.error ?? undefined,
          held: event.held,
          rootCause: event.root_cause === true,
        });
        break;
      case 'all-stop':
      case 'rank-waiting':
        // the news of a moment, not a notification to click away: the status bar, for a while
        this.statusLine(job, event.event === 'all-stop' ? 'debug-pause' : 'clock', describeEvent(event));
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

  /**
   * Start a debug session for every forwarded rank in `ranks` (all: undefined) that has none, as children of the
   * job's session.  `from`: the request whose local root, mappings and justMyCode apply (default: the process's).
   */
  async startSessions(proc: AttachProcess, ranks: number[] | undefined, from: AttachRequest = proc.request): Promise<void> {
    const job = proc.request.job;
    const targets = [...proc.forwarded.entries()]
      .filter(([rank]) => (ranks === undefined ? proc.covers(rank) : ranks.includes(rank)))
      .filter(([rank]) => !this.sessions.has(key(job, rank)) && !this.starting.has(key(job, rank)))
      // by rank, a held root cause first (hold on failure): the Call Stack lists the sessions as they start, and the
      // rank that failed first is the one to look at
      .sort((a, b) => Number(this.isRootCause(job, b[0])) - Number(this.isRootCause(job, a[0])) || a[0] - b[0]);
    if (ranks !== undefined) {
      const missing = ranks.filter((r) => !proc.forwarded.has(r));
      if (missing.length) {
        void vscode.window.showWarningMessage(
          vscode.l10n.t('Remote Debug: ranks {0} of {1} have no debugger to attach to (yet).', missing.join(', '), job),
        );
      }
    }
    if (targets.length === 0) {
      return;
    }
    const settings = this.settings(proc.request.folder.uri);
    const installed = this.installedExtensions();
    let debugType = resolveDebugType(settings.debugType, installed);
    const problem = debugTypeProblem(settings.debugType, debugType, installed);
    if (problem) {
      // VS Code answers each rank's start of a type nobody debugs with a modal: one message here instead, and the
      // ranks use what "auto" picks (this extension's own debugger when the Python Debugger is missing)
      debugType = resolveDebugType('auto', installed);
      if (!proc.toldDebugType) {
        proc.toldDebugType = true;
        this.log.warn(`[${job}] ${problem}`);
        void vscode.window.showWarningMessage(vscode.l10n.t('Remote Debug: {0}', problem));
      }
    }
    const configs: RankDebugConfiguration[] = [];
    for (const [rank, f] of targets) {
      try {
        configs.push(
          rankConfiguration({
            job,
            rank,
            node: f.node,
            port: f.port,
            debugType,
            workspaceFolder: proc.request.folder.uri.fsPath,
            // the job's local root as it is now (Change Local Source Folder… applies to the sessions started after it)
            localRoot: this.options.localRootFor?.(job) ?? from.localRoot ?? proc.request.localRoot,
            codeDir: f.codeDir ?? this.model.codeDir(job, f.node),
            pathMappingSetting: from.pathMappings ?? settings.pathMappings,
            justMyCode: from.justMyCode ?? settings.justMyCode,
          }),
        );
      } catch (err) {
        this.log.error(`[${job}] ${err instanceof Error ? err.message : String(err)}`);
        this.notices.add({ job, kind: 'session-not-started', rank });
      }
    }
    // claimed before the job's session is awaited: a rank-ready meanwhile must not start a second session
    for (const config of configs) {
      const k = key(job, config.remoteDebug.rank);
      this.starting.add(k);
      this.sessionOwner.set(k, proc);
      this.model.setRankSession(job, config.remoteDebug.rank, 'attaching');
    }
    const parent = await this.parentFor(job, proc.request.folder);
    // under the job's session (which names the job) a rank's name is short enough for the Call Stack at 64 ranks;
    // without it (it could not start) the ranks go flat and say their job
    for (const config of configs) {
      config.name = sessionName(job, config.remoteDebug.rank, config.remoteDebug.node, parent !== undefined);
    }
    // Like a compound: every rank gets its own session, started together, under the job's.
    await Promise.all(
      configs.map(async (config) => {
        const rank = config.remoteDebug.rank;
        const k = key(job, rank);
        try {
          if (proc.exited || proc.cancelled) {
            this.model.setRankSession(job, rank, 'detached'); // its tunnel went while the job's session started
            return;
          }
          const ok = await vscode.debug.startDebugging(proc.request.folder, config as vscode.DebugConfiguration, parent ? childOptions(parent) : undefined);
          if (!ok) {
            this.log.error(`[${job}] could not start "${config.name}" (type ${config.type})`);
            this.model.setRankSession(job, rank, 'detached');
            this.notices.add({ job, kind: 'session-not-started', rank });
          }
        } catch (err) {
          this.log.error(`[${job}] could not start "${config.name}": ${String(err)}`);
          this.model.setRankSession(job, rank, 'detached');
          this.notices.add({ job, kind: 'session-not-started', rank });
        } finally {
          this.starting.delete(k);
          this.startPending(k);
        }
      }),
    );
  }

  private isRootCause(job: string, rank: number): boolean {
    const hold = this.model.rankEntry(job, rank)?.hold;
    return hold?.rootCause === true && hold.heldFor === undefined;
  }

  // --- the job's own session (the rank sessions' parent) ---------------------------------------------

  /** The job's session, started with its first rank session; undefined when it cannot be (the ranks go flat). */
  private parentFor(job: string, folder: vscode.WorkspaceFolder): Promise<vscode.DebugSession | undefined> {
    const current = this.parents.get(job);
    if (current) {
      if (current.session) {
        return Promise.resolve(current.session);
      }
      if (current.starting) {
        return current.starting;
      }
      if (current.failed) {
        return Promise.resolve(undefined);
      }
    }
    const id = `${job}#${++this.parentSeq}`;
    const state: ParentState = { id };
    this.parents.set(job, state);
    state.starting = (async () => {
      let timer: NodeJS.Timeout | undefined;
      const started = new Promise<vscode.DebugSession | undefined>((resolve) => {
        this.parentWaiters.set(id, resolve);
        timer = setTimeout(() => resolve(undefined), this.options.parentTimeoutMs ?? 10_000);
      });
      let session: vscode.DebugSession | undefined;
      try {
        if (await vscode.debug.startDebugging(folder, parentConfiguration(job, id))) {
          session = await started;
        }
      } catch (err) {
        this.log.warn(`[${job}] the job's debug session did not start: ${String(err)}`);
      } finally {
        clearTimeout(timer);
        this.parentWaiters.delete(id);
        state.starting = undefined;
      }
      if (!session && this.parents.get(job) === state) {
        this.log.warn(`[${job}] the job's debug session did not start: its ranks' sessions start on their own`);
        state.failed = true;
      }
      return session;
    })();
    return state.starting;
  }

  /** Stop the job's session (ours: its end is no request to detach). */
  private endParent(job: string): void {
    const state = this.parents.get(job);
    if (!state) {
      return;
    }
    this.parents.delete(job);
    const stop = (session: vscode.DebugSession | undefined) => {
      if (session) {
        void Promise.resolve(vscode.debug.stopDebugging(session)).catch(() => undefined);
      }
    };
    if (state.session) {
      stop(state.session);
    } else {
      void state.starting?.then(stop);
    }
  }

  private onSessionStarted(session: vscode.DebugSession): void {
    const parent = parentTag(session.configuration);
    if (parent) {
      const state = this.parents.get(parent.job);
      if (state?.id === parent.id) {
        state.session = session;
      }
      this.parentWaiters.get(parent.id)?.(session);
      return;
    }
    const tag = rankTag(session.configuration);
    if (!tag) {
      return;
    }
    const k = key(tag.job, tag.rank);
    this.sessions.set(k, session);
    this.clearLost(tag.job, tag.rank);
    this.model.setRankSession(tag.job, tag.rank, 'attached');
  }

  private onSessionEnded(session: vscode.DebugSession): void {
    const parent = parentTag(session.configuration);
    if (parent) {
      const state = this.parents.get(parent.job);
      if (state?.id === parent.id) {
        // not ours to end (endParent forgets it first): the user stopped the job's session, i.e. detached the job.
        // Unless the window is closing (VS Code ends its sessions then too): the job is forgotten for the next
        // window only if the extension is still running a moment later.
        this.parents.delete(parent.job);
        this.log.info(`[${parent.job}] the job's debug session was stopped: detaching`);
        // its Stop ran Detach All (jobSession.ts): the attach goes once that has reached the ranks
        const detaching = this.groupDetaching.get(parent.job) ?? Promise.resolve();
        void detaching.then(() => this.detach(parent.job, { forget: false }));
        setTimeout(() => {
          if (!this.shuttingDown) {
            void this.options.memory?.forget(parent.job);
          }
        }, this.options.forgetDelayMs ?? 3000).unref();
      }
      return;
    }
    const tag = rankTag(session.configuration);
    if (!tag) {
      return;
    }
    const k = key(tag.job, tag.rank);
    const cause = this.ends.ended(session.id);
    const owner = this.sessionOwner.get(k);
    if (this.sessions.get(k) === session) {
      this.sessions.delete(k);
      this.sessionOwner.delete(k);
    }
    this.model.setRankSession(tag.job, tag.rank, 'detached');
    const replaced = this.restarted.has(k) || this.pendingStart.has(k);
    if (cause === 'connection-lost' && owner && !owner.exited && !owner.cancelled && owner.forwarded.has(tag.rank) && !replaced) {
      this.onSessionLost(owner, tag.rank);
    }
    this.startPending(k);
  }

  // --- sessions lost to a dropped connection ----------------------------------------------------------

  private onSessionLost(proc: AttachProcess, rank: number): void {
    const job = proc.request.job;
    this.lost.set(key(job, rank), proc);
    this.model.setRankLost(job, rank, true);
    const node = proc.forwarded.get(rank)?.node;
    this.log.warn(`[${job}] rank ${rank}: its debug session ended unexpectedly (the connection to ${node ?? 'its node'} dropped?)`);
    const since = node === undefined ? Infinity : Date.now() - (this.reconnectedAt.get(`${job}/${node}`) ?? -Infinity);
    if (since < (this.options.recentReconnectMs ?? 30_000)) {
      // the node said `reconnected` just before this session noticed the drop
      this.restartLost(proc, [rank]);
      return;
    }
    // A job stopped from a terminal (or failing) ends its ranks' sessions the same way, a moment before the attach
    // says `job-ended`: the notice waits that moment, and is dropped when the job or its attach ended meanwhile.
    const timer = setTimeout(() => {
      const entry = this.model.get(job);
      const rankState = this.model.rankEntry(job, rank)?.state;
      if (
        this.lost.get(key(job, rank)) === proc &&
        !proc.exited &&
        !proc.ended &&
        entry !== undefined &&
        isRunning(entry.info) &&
        rankState !== 'finished' &&
        rankState !== 'failed' &&
        // a gang held after a failure ends with it: its sessions end because the job fails, not the tunnel
        !this.model.allRanks(job).some((r) => r.state === 'failed' || r.hold !== undefined)
      ) {
        this.notices.add({ job, kind: 'session-lost', rank, node });
      }
    }, this.options.lostNoticeDelayMs ?? LOST_NOTICE_DELAY_MS);
    timer.unref?.();
  }

  /** The CLI reconnected a node's tunnel: start the sessions that were lost on it again. */
  private onReconnected(proc: AttachProcess, node: string): void {
    const job = proc.request.job;
    this.reconnectedAt.set(`${job}/${node}`, Date.now());
    const ranks = [...this.lost]
      .filter(([k, owner]) => owner === proc && proc.forwarded.get(rankOf(k))?.node === node)
      .map(([k]) => rankOf(k));
    this.restartLost(proc, ranks);
  }

  private restartLost(proc: AttachProcess, ranks: number[]): void {
    const job = proc.request.job;
    const again = ranks.filter((rank) => {
      const k = key(job, rank);
      const state = this.model.rankEntry(job, rank)?.state;
      if (state === 'finished' || state === 'unavailable') {
        this.clearLost(job, rank); // nothing left to debug
        return false;
      }
      if (!this.budget.take(k)) {
        this.log.warn(`[${job}] rank ${rank}: its session keeps dropping; not started again (use Re-attach)`);
        return false;
      }
      return true;
    });
    if (again.length) {
      this.log.info(`[${job}] attaching ranks ${formatRanks(again)} again (their sessions ended when the connection dropped)`);
      void this.startSessions(proc, again);
    }
  }

  private clearLost(job: string, rank: number): void {
    if (this.lost.delete(key(job, rank)) || this.model.rankEntry(job, rank)?.lost) {
      this.model.setRankLost(job, rank, false);
    }
  }

  private forgetLost(job: string, which: (rank: number) => boolean): void {
    for (const k of [...this.lost.keys()]) {
      if (k.startsWith(`${job}#`) && which(rankOf(k))) {
        this.clearLost(job, rankOf(k));
      }
    }
  }

  /** The ranks of a job whose sessions ended unexpectedly and were not started again. */
  lostRanks(job: string): number[] {
    return [...this.lost.keys()].filter((k) => k.startsWith(`${job}#`)).map(rankOf).sort((a, b) => a - b);
  }

  /**
   * Re-attach: start the sessions of `ranks` (default: the lost ones) again on the job's running attach, or, when
   * none runs (after a window reload), attach as remembered.  False: nothing to re-attach.
   */
  async reattach(job: string, ranks?: number[]): Promise<boolean> {
    const live = (this.processes.get(job) ?? []).filter((p) => !p.exited && !p.cancelled);
    if (live.length) {
      const wanted = ranks ?? this.lostRanks(job);
      if (wanted.length === 0) {
        return false;
      }
      wanted.forEach((rank) => this.budget.reset(key(job, rank)));
      await this.attach({ ...live[0].request, ranks: wanted });
      return true;
    }
    const remembered = this.options.memory?.get(job);
    const folder = remembered && (vscode.workspace.workspaceFolders ?? []).find((f) => f.uri.toString() === remembered.folder);
    if (!remembered || !folder) {
      return false;
    }
    await this.attach({
      job,
      ranks: ranks ?? (remembered.ranks === 'all' ? undefined : remembered.ranks),
      folder,
      localRoot: this.options.localRootFor?.(job) ?? remembered.localRoot,
    });
    return true;
  }

  // --- notifications ------------------------------------------------------------------------------

  private showNotice(summary: NoticeSummary, job: string): void {
    const show = summary.severity === 'error' ? vscode.window.showErrorMessage : vscode.window.showWarningMessage;
    void Promise.resolve(show(summary.text, ...summary.actions.map((a) => a.title))).then((choice) => {
      const action = summary.actions.find((a) => a.title === choice)?.action;
      const node = { kind: 'job', job };
      if (action === 'show-output') {
        return vscode.commands.executeCommand('remoteDebug.showOutput');
      }
      if (action === 'attach-failed') {
        return vscode.commands.executeCommand('remoteDebug.attachStuckRanks', node);
      }
      if (action === 'reattach') {
        return vscode.commands.executeCommand('remoteDebug.reattach', node);
      }
      return undefined;
    });
  }

  /** A line in the status bar for a while (all-stop, a rank waiting in native code); the next one replaces it. */
  private statusLine(job: string, icon: string, text: string): void {
    this.statusMessage?.dispose();
    this.statusMessage = vscode.window.setStatusBarMessage(`$(${icon}) ${job}: ${text}`, STATUS_LINE_MS);
  }

  /** A rank's session waited for its replaced process's session to end: start it if nothing is in the way now. */
  private startPending(k: string): void {
    const proc = this.pendingStart.get(k);
    if (!proc || this.sessions.has(k) || this.starting.has(k)) {
      return;
    }
    this.pendingStart.delete(k);
    const rank = rankOf(k);
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
    const parent = parentTag(session.configuration);
    if (parent) {
      // Restart on the job's session: every rank's session is started again (on the same tunnels)
      return {
        onWillReceiveMessage: (message: { type?: string; command?: string }) => {
          if (message.type === 'request' && message.command === 'restart') {
            this.restartSessions(parent.job);
          }
        },
      };
    }
    const tag = rankTag(session.configuration);
    if (!tag) {
      return undefined;
    }
    return {
      onDidSendMessage: (message: { type?: string; event?: string; body?: { reason?: string; description?: string } }) => {
        if (message.type !== 'event') {
          return;
        }
        this.ends.event(session.id, message.event);
        if (message.event === 'stopped') {
          this.model.setRankSession(tag.job, tag.rank, 'paused', message.body?.description ?? message.body?.reason);
        } else if (message.event === 'continued') {
          this.model.setRankSession(tag.job, tag.rank, 'attached');
        }
      },
      onWillReceiveMessage: (message: { type?: string; command?: string }) => {
        if (message.type !== 'request') {
          return;
        }
        this.ends.request(session.id, message.command);
        if (['continue', 'next', 'stepIn', 'stepOut', 'reverseContinue'].includes(message.command ?? '')) {
          this.model.setRankSession(tag.job, tag.rank, 'attached');
        }
      },
      // the connection to the rank went away (a dropped tunnel): seen before VS Code's own `disconnect`
      onError: () => this.ends.lost(session.id),
      onExit: () => this.ends.lost(session.id),
    };
  }

  private stopSessions(job: string, which: (rank: number) => boolean = () => true): void {
    this.forget(job, which);
    for (const [k, session] of [...this.sessions]) {
      const tag = rankTag(session.configuration);
      if (tag && tag.job === job && which(tag.rank)) {
        this.sessions.delete(k);
        this.sessionOwner.delete(k);
        this.stopSession(session);
      }
    }
  }

  /** Stop the job's rank sessions and start each again once it has ended (the job session's Restart). */
  private restartSessions(job: string): void {
    this.log.info(`[${job}] restarting the job's debug sessions`);
    for (const [k, session] of [...this.sessions]) {
      const owner = this.sessionOwner.get(k);
      if (k.startsWith(`${job}#`) && owner && !owner.exited && !owner.cancelled) {
        this.pendingStart.set(k, owner);
        void this.stopSession(session);
      }
    }
  }

  /** Stop a rank session we mean to stop (its end is no dropped connection). */
  private stopSession(session: vscode.DebugSession): Promise<void> {
    this.ends.expect(session.id);
    return Promise.resolve(vscode.debug.stopDebugging(session)).catch(() => undefined);
  }

  private async stopProcess(proc: AttachProcess): Promise<void> {
    proc.cancelled = true;
    await proc.process.stop();
  }

  /** Stop one rank's debug session; the tunnels stay up, so it can be attached again. */
  async detachRank(job: string, rank: number): Promise<void> {
    this.pendingStart.delete(key(job, rank));
    this.clearLost(job, rank);
    const session = this.sessions.get(key(job, rank));
    if (session) {
      await this.stopSession(session);
    }
  }

  /**
   * Stop the job's debug sessions and attach processes (the job keeps running).  `forget`: the user detached, so
   * the job is not attached again after a window reload (false: the window is closing).
   */
  async detach(job: string, options: { forget?: boolean } = {}): Promise<void> {
    const forget = options.forget ?? true;
    this.stopSessions(job);
    this.forgetLost(job, () => true);
    this.endParent(job);
    this.model.setReattachable(job, false);
    const procs = this.processes.get(job) ?? [];
    procs.forEach((p) => (p.keepMemory = !forget));
    if (forget) {
      void this.options.memory?.forget(job);
    }
    await Promise.all(procs.map((p) => this.stopProcess(p)));
  }

  /** Stop everything (the window closes or reloads): the attached jobs stay remembered for the next window. */
  async stopAll(): Promise<void> {
    this.shuttingDown = true;
    await Promise.all([...this.processes.keys()].map((job) => this.detach(job, { forget: false })));
  }
}

function rankOf(k: string): number {
  return Number(k.slice(k.lastIndexOf('#') + 1));
}

export async function showError(message: string): Promise<void> {
  const showOutput = vscode.l10n.t('Show Output');
  const choice = await vscode.window.showErrorMessage(vscode.l10n.t('Remote Debug: {0}', message), showOutput);
  if (choice === showOutput) {
    await vscode.commands.executeCommand('remoteDebug.showOutput');
  }
}

export { configName };
