// What the ranks print, in an output channel per job ("Remote Debug: JOB"): `remote-debug logs JOB --follow --json`
// prints every line of every rank from the start of the run, one JSON object a line ({"node", "rank", "line",
// "time"}), live, and exits when the job ends.  Lines read `[rank 3] loss 0.31`, a node's own (the launcher's) `[algo-1] ...`.
//
// A plain OutputChannel, not a LogOutputChannel: a log channel stamps each line with the time it reached VS Code and a
// level of its own ("info"), over training output that has its own times and no such levels, and it cannot be cleared
// to show one rank; a plain one shows the lines as the ranks printed them and is re-drawn for Filter by Rank….
// The channel keeps the last BUFFER_LIMIT lines (so does its re-drawn text): a long run's output is in its log files.
//
// The channel of a job starts with Show Rank Output (the Jobs view's job row), and with every attach unless the
// setting remoteDebug.output.followOnAttach is off.  The CLI process stops when the job ends (by itself), when the job
// leaves the listing (with its channel), and when the extension deactivates.

import * as vscode from 'vscode';

import type { Cli, CliError, CliProcess } from './cli';
import { jsonObjectLine, runOutputLine } from './events';
import type { JobsModel } from './model';
import type { Scheduler } from './tree';

/** One line a rank (or its node: `rank` null) printed. */
export interface LogLine {
  node: string;
  rank: number | null;
  line: string;
  time: number | null;
}

/** Lines kept per job (the channel shows at most these). */
export const BUFFER_LIMIT = 20_000;
/** How long lines gather before they go to the channel in one append (a busy job prints thousands a second). */
export const FLUSH_MS = 100;

export function logsArgs(job: string): string[] {
  return ['logs', job, '--follow', '--json'];
}

/** One line of `logs --json`: a rank's line, or undefined (a line that is not one: skipped). */
export function parseLogLine(text: string): LogLine | undefined {
  const o = jsonObjectLine(text);
  if (!o || typeof o.line !== 'string') {
    return undefined;
  }
  return {
    node: typeof o.node === 'string' ? o.node : '',
    rank: typeof o.rank === 'number' ? o.rank : null,
    line: o.line,
    time: typeof o.time === 'number' ? o.time : null,
  };
}

/** Which lines the channel shows: all, one rank's, or one node's own (the launcher's). */
export type RankFilter = { kind: 'all' } | { kind: 'rank'; rank: number } | { kind: 'node'; node: string };

export function matchesFilter(filter: RankFilter, l: LogLine): boolean {
  switch (filter.kind) {
    case 'all':
      return true;
    case 'rank':
      return l.rank === filter.rank;
    case 'node':
      return l.rank === null && l.node === filter.node;
  }
}

export function filterTitle(filter: RankFilter): string {
  return filter.kind === 'all' ? 'all ranks' : filter.kind === 'rank' ? `rank ${filter.rank}` : `${filter.node} (its own lines)`;
}

export function formatLogLine(l: LogLine): string {
  return l.node || l.rank !== null ? runOutputLine(l) : l.line;
}

/** What JobOutput writes to: an OutputChannel's part it uses. */
export interface Channel {
  append(text: string): void;
  clear(): void;
  show(preserveFocus?: boolean): void;
  dispose(): void;
}

const timers: Scheduler = {
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout),
};

/** One job's channel and its `logs --follow` process. */
export class JobOutput {
  private lines: LogLine[] = [];
  /** Lines dropped from the front of the buffer since the run's start (the channel says how many). */
  private dropped = 0;
  /** Dropped since the channel was last drawn whole: past a quarter of the limit it is drawn again (bounded too). */
  private droppedSinceDraw = 0;
  private pending: string[] = [];
  private timer: { handle: unknown } | undefined;
  private process: CliProcess | undefined;
  readonly ranks = new Set<number>();
  readonly nodes = new Set<string>();
  filter: RankFilter = { kind: 'all' };
  /** Why the last process ended (undefined: it runs, or never ran). */
  ended: string | undefined;

  constructor(
    readonly job: string,
    private readonly cli: Pick<Cli, 'stream'>,
    readonly channel: Channel,
    private readonly scheduler: Scheduler = timers,
    private readonly limit = BUFFER_LIMIT,
  ) {}

  get running(): boolean {
    return this.process?.running ?? false;
  }

  /** Follow the job's output from the start of its run (a second start begins again: the channel is cleared). */
  start(): void {
    if (this.running) {
      return;
    }
    this.lines = [];
    this.dropped = 0;
    this.droppedSinceDraw = 0;
    this.pending = [];
    this.ended = undefined;
    this.channel.clear();
    const proc = this.cli.stream(logsArgs(this.job), {});
    this.process = proc;
    proc.start({
      line: (text) => {
        const l = parseLogLine(text);
        if (l) {
          this.add(l);
        }
      },
      exit: (code, _signal, error) => {
        if (proc === this.process) {
          this.onExit(code, error);
        }
      },
    });
  }

  private onExit(code: number | null, error: CliError | undefined): void {
    this.flush();
    if (error?.unknownCommand) {
      this.ended = 'this remote-debug CLI has no "logs" command: pip install -U remote-debug-training';
    } else if (error) {
      this.ended = `remote-debug logs stopped: ${error.message}`;
    } else {
      this.ended = code === 0 ? `end of ${this.job}'s output` : `remote-debug logs stopped`;
    }
    this.channel.append(`── ${this.ended} ──\n`);
  }

  add(l: LogLine): void {
    this.lines.push(l);
    if (l.rank !== null) {
      this.ranks.add(l.rank);
    } else if (l.node) {
      this.nodes.add(l.node);
    }
    // trimmed in steps (splice is O(n)), never beyond the limit by more than a quarter of it
    if (this.lines.length > this.limit + Math.ceil(this.limit / 4)) {
      const cut = this.lines.length - this.limit;
      this.lines.splice(0, cut);
      this.dropped += cut;
      this.droppedSinceDraw += cut;
    }
    if (this.droppedSinceDraw >= Math.ceil(this.limit / 4)) {
      this.redraw(); // the channel drops them too (it has no limit of its own)
      return;
    }
    if (matchesFilter(this.filter, l)) {
      this.pending.push(formatLogLine(l));
      this.timer ??= { handle: this.scheduler.setTimeout(() => this.flush(), FLUSH_MS) };
    }
  }

  /** The lines gathered so far, in one append. */
  flush(): void {
    if (this.timer) {
      this.scheduler.clearTimeout(this.timer.handle);
      this.timer = undefined;
    }
    if (this.pending.length) {
      this.channel.append(`${this.pending.join('\n')}\n`);
      this.pending = [];
    }
  }

  /** The buffered lines the filter lets through (what the channel shows after a redraw). */
  shownLines(): string[] {
    return this.lines.filter((l) => matchesFilter(this.filter, l)).map(formatLogLine);
  }

  setFilter(filter: RankFilter): void {
    this.filter = filter;
    this.redraw();
  }

  /** Draw the channel again from the buffer: a filter's lines, with a line saying what is left out. */
  redraw(): void {
    if (this.timer) {
      this.scheduler.clearTimeout(this.timer.handle);
      this.timer = undefined;
    }
    this.pending = [];
    this.droppedSinceDraw = 0;
    const head: string[] = [];
    if (this.dropped > 0) {
      head.push(`── ${this.dropped} earlier lines not kept (the channel keeps the last ${this.limit}) ──`);
    }
    if (this.filter.kind !== 'all') {
      head.push(`── showing ${filterTitle(this.filter)} only (Remote Debug: Filter Output by Rank… shows the others) ──`);
    }
    const tail = this.ended && !this.running ? [`── ${this.ended} ──`] : [];
    const text = [...head, ...this.shownLines(), ...tail];
    this.channel.clear();
    if (text.length) {
      this.channel.append(`${text.join('\n')}\n`);
    }
  }

  async stop(): Promise<void> {
    this.flush();
    await this.process?.stop();
  }

  dispose(): void {
    void this.stop();
    this.channel.dispose();
  }
}

export interface RankOutputsOptions {
  /** Whether an attach starts its job's channel (the setting remoteDebug.output.followOnAttach). */
  followOnAttach?: () => boolean;
  createChannel?: (name: string) => Channel;
  scheduler?: Scheduler;
  limit?: number;
}

type PickJob = (node: unknown) => Promise<string | undefined>;

/** The jobs' output channels: Show Rank Output, Filter Output by Rank…, and the channel an attach starts. */
export class RankOutputs implements vscode.Disposable {
  private readonly outputs = new Map<string, JobOutput>();
  /** The channel shown last: Filter by Rank… without a job acts on it. */
  private last: string | undefined;
  private readonly subscription: { dispose(): void };

  constructor(
    private readonly cli: Pick<Cli, 'stream'>,
    private readonly model: JobsModel,
    private readonly pickJob: PickJob,
    private readonly options: RankOutputsOptions = {},
  ) {
    this.subscription = model.onDidChange(() => this.onModelChange());
  }

  register(): vscode.Disposable[] {
    return [
      this,
      vscode.commands.registerCommand('remoteDebug.showRankOutput', (node?: unknown) => this.showCommand(node)),
      vscode.commands.registerCommand('remoteDebug.filterOutputByRank', (node?: unknown) => this.filterCommand(node)),
    ];
  }

  get(job: string): JobOutput | undefined {
    return this.outputs.get(job);
  }

  /** The job's channel, following its output (started again when its last process ended). */
  follow(job: string, show: boolean): JobOutput {
    let out = this.outputs.get(job);
    if (!out) {
      const create = this.options.createChannel ?? ((name: string) => vscode.window.createOutputChannel(name, 'log'));
      out = new JobOutput(job, this.cli, create(`Remote Debug: ${job}`), this.options.scheduler, this.options.limit);
      this.outputs.set(job, out);
    }
    if (!out.running && (out.ended === undefined || this.isRunning(job))) {
      out.start();
    }
    if (show) {
      this.last = job;
      out.channel.show(true);
    }
    return out;
  }

  private isRunning(job: string): boolean {
    const status = this.model.get(job)?.info.status;
    return status === 'InProgress' || status === 'Stopping';
  }

  private async showCommand(node?: unknown): Promise<void> {
    const job = await this.pickJob(node);
    if (job) {
      this.follow(job, true);
    }
  }

  private async filterCommand(node?: unknown): Promise<void> {
    const job = await this.jobToFilter(node);
    if (!job) {
      return;
    }
    const out = this.follow(job, false);
    const current = out.filter;
    const same = (f: RankFilter) => JSON.stringify(f) === JSON.stringify(current);
    type Item = vscode.QuickPickItem & { filter: RankFilter };
    const all: Item = { label: vscode.l10n.t('All ranks'), filter: { kind: 'all' } };
    const ranks = [...out.ranks].sort((a, b) => a - b).map((rank): Item => ({ label: `rank ${rank}`, filter: { kind: 'rank', rank } }));
    const nodes = [...out.nodes]
      .sort()
      .map((node): Item => ({ label: node, detail: vscode.l10n.t("the node's own lines (the launcher's)"), filter: { kind: 'node', node } }));
    const items = [all, ...ranks, ...nodes].map((item): Item => (same(item.filter) ? { ...item, description: vscode.l10n.t('shown') } : item));
    const picked = await vscode.window.showQuickPick(items, {
      placeHolder: vscode.l10n.t('Show the output of which rank of {0}? (from the last {1} lines)', job, String(BUFFER_LIMIT)),
    });
    if (picked) {
      out.setFilter(picked.filter);
      this.last = job;
      out.channel.show(true);
    }
  }

  /** The job of the view's row, else the channel shown last, else the one followed, else a pick. */
  private async jobToFilter(node?: unknown): Promise<string | undefined> {
    if (node && typeof node === 'object' && 'job' in node && typeof node.job === 'string') {
      return node.job;
    }
    if (this.last && this.outputs.has(this.last)) {
      return this.last;
    }
    const jobs = [...this.outputs.keys()];
    if (jobs.length === 1) {
      return jobs[0];
    }
    if (jobs.length === 0) {
      return this.pickJob(undefined);
    }
    return vscode.window.showQuickPick(jobs, { placeHolder: vscode.l10n.t('Filter the output of which job?') });
  }

  /** An attach started: follow its job (unless the setting says no); a job gone from the listing: its channel goes. */
  private onModelChange(): void {
    const follow = this.options.followOnAttach?.() ?? true;
    for (const entry of this.model.list()) {
      const attaching = entry.attach === 'connecting' || entry.attach === 'ready';
      if (follow && attaching && !this.outputs.has(entry.info.name)) {
        this.follow(entry.info.name, false);
      }
    }
    if (this.model.loaded && !this.model.error) {
      for (const [job, out] of [...this.outputs]) {
        if (!this.model.get(job)) {
          this.outputs.delete(job);
          out.dispose();
        }
      }
    }
  }

  /** Stop every `logs` process (the extension deactivates); the channels stay until disposed. */
  async stopAll(): Promise<void> {
    await Promise.all([...this.outputs.values()].map((o) => o.stop()));
  }

  dispose(): void {
    this.subscription.dispose();
    for (const out of this.outputs.values()) {
      out.dispose();
    }
    this.outputs.clear();
  }
}
