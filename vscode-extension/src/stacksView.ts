// The Remote Debug > Stacks view: where is everyone.  `remote-debug stacks JOB --json` groups the ranks whose stacks
// are the same into classes (odd classes first: the one rank stuck elsewhere is the first row, not the 64th stack to
// read); the view shows one row per class ("ranks 0-62 (63)", its summary "all_reduce ← step (train.py:88)"), its
// frames and its ranks.  A frame opens its file at its line (mapped to this machine as the attach maps breakpoints);
// a rank shows its debug session, or offers to attach to it.  With PyTorch's Flight Recorder on, a line per stuck
// collective names the ranks missing from it (on top).  "Open Stacks as JSON" shows the CLI's document as it came.
//
// A CLI from before the classes prints only the ranks: the classes are then grouped here by the same rule (the
// main thread's frames), so the view works with either.

import * as fs from 'node:fs';
import * as path from 'node:path';

import * as vscode from 'vscode';

import { CliError, RunOptions, RunResult } from './cli';
import { PathMapping } from './debugConfig';
import { CliOutputError, parseJsonDocument, RankStacks, StackClass, StackFrame, StacksReport, StackThread, StuckCollective } from './events';
import { withCancellableProgress } from './progress';
import { formatRankRanges } from './ranks';

/** One class of ranks whose stacks are the same (the CLI's `classes` entry, read tolerantly). */
export interface RankClass {
  ranks: number[];
  /** `0-62`: the ranks short. */
  ranges: string;
  count: number;
  thread: string;
  /** Outermost first, as the CLI sends them. */
  frames: StackFrame[];
  summary: string;
  /** py-spy saw the thread in native code (a collective, I/O); null: not known (read through the hook). */
  blockedInNative: boolean | null;
  error: string | null;
  /** A rank held for a post-mortem: what it raised (its frames: where). */
  exception: string | null;
  /** Its failure came first in the job (torchelastic's root cause). */
  rootCause: boolean;
  /** Stopped in the debugger (a breakpoint, a pause, a step): its frames end where it stopped. */
  inDebugger: boolean;
}

export interface StacksDocument {
  job: string;
  ranks: RankStacks[];
  classes: RankClass[];
  /** Flight Recorder: one line per stuck collective (which ranks it misses). */
  collectives: string[];
  /** Node -> the job's code dir there (where its frames' files are). */
  codeDirs: Record<string, string>;
  /** The CLI printed no classes (an older one): they were grouped here. */
  derived: boolean;
}

function obj(value: unknown): Record<string, unknown> | undefined {
  return value && typeof value === 'object' && !Array.isArray(value) ? (value as Record<string, unknown>) : undefined;
}

function parseFrames(value: unknown): StackFrame[] {
  return (Array.isArray(value) ? value : []).flatMap((item): StackFrame[] => {
    const f = obj(item);
    return f && typeof f.file === 'string' && typeof f.line === 'number' && typeof f.function === 'string'
      ? [{ file: f.file, line: f.line, function: f.function }]
      : [];
  });
}

function parseThreads(value: unknown): StackThread[] {
  return (Array.isArray(value) ? value : []).flatMap((item): StackThread[] => {
    const t = obj(item);
    if (!t) {
      return [];
    }
    return [
      {
        ...(t as Partial<StackThread>),
        name: typeof t.name === 'string' ? t.name : '',
        frames: parseFrames(t.frames),
        exception: typeof t.exception === 'string' ? t.exception : null,
        internal: t.internal === true,
      },
    ];
  });
}

function parseRank(value: unknown): RankStacks[] {
  const r = obj(value);
  if (!r || typeof r.rank !== 'number') {
    return [];
  }
  return [
    {
      ...(r as Partial<RankStacks>),
      rank: r.rank,
      node: typeof r.node === 'string' ? r.node : null,
      pid: typeof r.pid === 'number' ? r.pid : 0,
      state: typeof r.state === 'string' ? r.state : null,
      hold_seconds_left: typeof r.hold_seconds_left === 'number' ? r.hold_seconds_left : null,
      source: typeof r.source === 'string' ? r.source : '',
      threads: parseThreads(r.threads),
      error: typeof r.error === 'string' ? r.error : null,
    },
  ];
}

/** The thread a class is about: the main thread (py-spy's flag, else its name), else the first of the rank's own. */
export function mainThread(r: RankStacks): StackThread | undefined {
  const threads = r.threads.filter((t) => !t.internal);
  return threads.find((t) => t.main === true) ?? threads.find((t) => t.name === 'MainThread') ?? threads[0];
}

/** `all_reduce ← step (train.py:88) ← main (train.py:120)`: the innermost frames first, each caller with its line. */
export function stackSummary(frames: readonly StackFrame[], depth = 3): string {
  return [...frames]
    .reverse()
    .slice(0, depth)
    .map((f, i) => (i === 0 ? f.function : `${f.function} (${path.basename(f.file)}:${f.line})`))
    .join(' ← ');
}

/** Root causes first, then failures, then the smaller classes (the odd ones), then by first rank. */
function classOrder(a: RankClass, b: RankClass): number {
  return Number(b.rootCause) - Number(a.rootCause) || Number(!!b.error) - Number(!!a.error) || a.count - b.count || a.ranks[0] - b.ranks[0];
}

/**
 * The classes of an older CLI's document: ranks whose main threads have the same frames (and error) together.  A file
 * under its node's code dir counts by its path there (each node of a job of this machine has its own copy of the code).
 */
export function deriveClasses(ranks: readonly RankStacks[], codeDirs: Record<string, string> = {}): RankClass[] {
  const groups = new Map<string, { thread: StackThread | undefined; members: RankStacks[] }>();
  for (const r of ranks) {
    const thread = mainThread(r);
    const frames = thread?.frames ?? [];
    const codeDir = r.node ? codeDirs[r.node] : undefined;
    const file = (f: StackFrame) => {
      const rest = codeDir === undefined ? undefined : inside(f.file, codeDir);
      return rest === undefined ? f.file : `<code>/${rest}`;
    };
    const key = JSON.stringify([thread?.name ?? '', frames.map((f) => [file(f), f.line, f.function]), r.error, thread?.exception ?? null]);
    const group = groups.get(key) ?? { thread, members: [] };
    group.members.push(r);
    groups.set(key, group);
  }
  return [...groups.values()]
    .map(({ thread, members }): RankClass => {
      const ordered = members.map((m) => m.rank).sort((a, b) => a - b);
      const frames = thread?.frames ?? [];
      const natives = members.map((m) => m.blocked_in_native);
      const error = members[0].error;
      return {
        ranks: ordered,
        ranges: formatRankRanges(ordered),
        count: ordered.length,
        thread: thread?.name ?? '',
        frames,
        summary: frames.length ? stackSummary(frames) : (error ?? 'no Python stack'),
        blockedInNative: natives.every((n) => n === true) ? true : natives.every((n) => n === false) ? false : null,
        error,
        exception: thread?.exception ?? null,
        rootCause: members.some((m) => m.root_cause === true),
        inDebugger: false, // an older CLI does not say
      };
    })
    .sort(classOrder);
}

/** A document's fields as they came (their names the CLI's: a name it does not send is a type error). */
type Raw<T> = Partial<Record<keyof T, unknown>>;

function parseClass(value: unknown): RankClass[] {
  const c = obj(value) as Raw<StackClass> | undefined;
  const ranks = (Array.isArray(c?.ranks) ? c.ranks : []).filter((r): r is number => typeof r === 'number');
  if (!c || ranks.length === 0) {
    return [];
  }
  const frames = parseFrames(c.frames);
  const error = typeof c.error === 'string' ? c.error : null;
  return [
    {
      ranks,
      ranges: typeof c.ranges === 'string' && c.ranges ? c.ranges : formatRankRanges(ranks),
      count: typeof c.count === 'number' ? c.count : ranks.length,
      thread: typeof c.thread === 'string' ? c.thread : '',
      frames,
      summary: typeof c.summary === 'string' && c.summary ? c.summary : frames.length ? stackSummary(frames) : (error ?? 'no Python stack'),
      blockedInNative: typeof c.blocked_in_native === 'boolean' ? c.blocked_in_native : null,
      error,
      exception: typeof c.exception === 'string' ? c.exception : null,
      rootCause: c.root_cause === true,
      inDebugger: c.in_debugger === true,
    },
  ];
}

/** A Flight Recorder entry as one line: the CLI's own wording when it has one. */
export function collectiveText(value: unknown): string {
  if (typeof value === 'string') {
    return value;
  }
  const o = obj(value) as (Raw<StuckCollective> & { text?: unknown }) | undefined;
  // the CLI's `summary`; `text` as its events say theirs
  for (const text of [o?.summary, o?.text]) {
    if (typeof text === 'string' && text) {
      return text;
    }
  }
  return JSON.stringify(value);
}

/**
 * `stacks JOB --json`'s document, read tolerantly (what a newer CLI adds is ignored; an older one's classes are grouped
 * here).  `knownCodeDirs`: the job's code dirs as the listing has them, for a document that does not say them.
 */
export function parseStacksDocument(raw: unknown, job: string, knownCodeDirs: Record<string, string> = {}): StacksDocument {
  const o = obj(raw) as Raw<StacksReport> | undefined;
  if (!o || !Array.isArray(o.ranks)) {
    throw new CliOutputError('`remote-debug stacks --json` did not print the ranks it read');
  }
  const ranks = o.ranks.flatMap(parseRank);
  const derived = !Array.isArray(o.classes);
  const own = Object.entries(obj(o.code_dirs) ?? {}).filter((e): e is [string, string] => typeof e[1] === 'string');
  const codeDirs = own.length ? Object.fromEntries(own) : { ...knownCodeDirs };
  return {
    job: typeof o.job === 'string' ? o.job : job,
    ranks,
    // the CLI's order (odd classes first) is kept as it sent it
    classes: derived ? deriveClasses(ranks, codeDirs) : (o.classes as unknown[]).flatMap(parseClass),
    collectives: (Array.isArray(o.collectives) ? o.collectives : []).map(collectiveText),
    codeDirs,
    derived,
  };
}

/** `rank 63` / `ranks 0-62 (63)`. */
export function classLabel(c: Pick<RankClass, 'ranks' | 'ranges' | 'count'>): string {
  return c.count === 1 ? `rank ${c.ranks[0]}` : `ranks ${c.ranges} (${c.count})`;
}

function inside(file: string, root: string): string | undefined {
  const r = root.replace(/[\\/]+$/, '');
  return file === r ? '' : file.startsWith(`${r}/`) ? file.slice(r.length + 1) : undefined;
}

/**
 * Where a file of the job is on this machine: through the first mapping whose remote root holds it and whose local
 * file exists, else the path itself when it exists here (a local job's libraries, torch's own files), else undefined.
 */
export function localFileFor(file: string, mappings: readonly PathMapping[], exists: (p: string) => boolean = fs.existsSync): string | undefined {
  for (const m of mappings) {
    const rest = inside(file, m.remoteRoot);
    if (rest !== undefined) {
      const local = rest ? path.join(m.localRoot, ...rest.split('/')) : m.localRoot;
      if (exists(local)) {
        return local;
      }
    }
  }
  return exists(file) ? file : undefined;
}

// --- the view --------------------------------------------------------------------------------------------

export type StacksNode =
  | { kind: 'message'; id: string; label: string; detail?: string; icon?: string; iconColor?: string; command?: vscode.Command }
  | { kind: 'collective'; index: number }
  | { kind: 'class'; index: number }
  | { kind: 'rank'; index: number; rank: number }
  | { kind: 'frame'; id: string; frame: StackFrame; node: string | null; innermost: boolean };

type State =
  | { phase: 'empty' }
  | { phase: 'loading'; job: string }
  | { phase: 'loaded'; job: string; doc: StacksDocument; at: Date }
  | { phase: 'failed'; job: string; error: string };

/** What the view needs of the rest of the extension. */
export interface StacksHost {
  run(args: string[], options: RunOptions): Promise<RunResult>;
  /** The rank's debug session, when it has one. */
  hasSession(job: string, rank: number): boolean;
  /** Attach these ranks of the job (undefined: every rank), as the Jobs view's Attach does. */
  attach(job: string, ranks: number[] | undefined): Promise<void>;
  /** The job's code dirs as the listing has them (node -> dir), for a CLI whose document does not say them. */
  codeDirs(job: string): Record<string, string>;
  /** The file on this machine (undefined: not here); `node`: the node whose code dir (`codeDir`, when known) holds it. */
  localFile(job: string, node: string | null, file: string, codeDir?: string): string | undefined;
}

export const STACKS_VIEW = 'remoteDebug.stacks';
/** How long one `stacks` may take (each rank is read through its node's hook, or by py-spy). */
const STACKS_TIMEOUT_MS = 120_000;
const RANK_REDRAW_MS = 250;

function icon(id: string, color?: string): vscode.ThemeIcon {
  return color ? new vscode.ThemeIcon(id, new vscode.ThemeColor(color)) : new vscode.ThemeIcon(id);
}

/** A class's icon: a root cause or an error first, then blocked in native code; the odd classes in orange. */
export function classIcon(c: RankClass, odd: boolean): [string, string?] {
  if (c.rootCause) {
    return ['bug', 'errorForeground'];
  }
  if (c.error) {
    return ['error', 'errorForeground'];
  }
  const color = odd ? 'charts.orange' : undefined;
  return c.blockedInNative ? ['watch', color] : c.inDebugger ? ['debug-pause', color] : ['debug-stackframe-dot', color];
}

export class StacksView implements vscode.TreeDataProvider<StacksNode>, vscode.Disposable {
  private readonly emitter = new vscode.EventEmitter<StacksNode | undefined | void>();
  readonly onDidChangeTreeData = this.emitter.event;
  private state: State = { phase: 'empty' };
  /** What the CLI printed last (Open as JSON). */
  private raw: string | undefined;
  private view: vscode.TreeView<StacksNode> | undefined;
  private shown = false;
  private redrawTimer: NodeJS.Timeout | undefined;

  constructor(private readonly host: StacksHost) {}

  register(): vscode.Disposable[] {
    this.view = vscode.window.createTreeView(STACKS_VIEW, { treeDataProvider: this, showCollapseAll: true });
    const commands: Record<string, (...args: never[]) => Promise<unknown>> = {
      'remoteDebug.stacks.refresh': () => this.refresh(),
      'remoteDebug.stacks.openJson': () => this.openJson(),
      'remoteDebug.stacks.openFrame': (job: string, node: string | null, file: string, line: number) => this.openFrame(job, node, file, line),
      'remoteDebug.stacks.openRank': (job: string, rank: number) => this.openRank(job, rank),
      'remoteDebug.stacks.attach': (node?: StacksNode) => this.attachNode(node),
    };
    return [
      this,
      this.view,
      ...Object.entries(commands).map(([name, fn]) =>
        vscode.commands.registerCommand(name, async (...args: never[]) => {
          try {
            await fn(...args);
          } catch (err) {
            if (!(err instanceof CliError && err.message === 'cancelled')) {
              void vscode.window.showErrorMessage(vscode.l10n.t('Remote Debug: {0}', err instanceof Error ? err.message : String(err)));
            }
          }
        }),
      ),
    ];
  }

  dispose(): void {
    clearTimeout(this.redrawTimer);
    this.emitter.dispose();
  }

  /**
   * The ranks' debug sessions may have changed (the jobs model changed): the rank rows say which ranks are attached.
   * An attach of 64 ranks changes the model hundreds of times: one redraw per RANK_REDRAW_MS at most.
   */
  sessionsChanged(): void {
    if (this.state.phase !== 'loaded' || this.redrawTimer) {
      return;
    }
    this.redrawTimer = setTimeout(() => {
      this.redrawTimer = undefined;
      this.emitter.fire();
    }, RANK_REDRAW_MS);
  }

  /** The job shown (loaded, loading or failed), if any. */
  get job(): string | undefined {
    return this.state.phase === 'empty' ? undefined : this.state.job;
  }

  get document(): StacksDocument | undefined {
    return this.state.phase === 'loaded' ? this.state.doc : undefined;
  }

  private setState(state: State): void {
    this.state = state;
    if (this.view) {
      this.view.description = this.describe();
    }
    this.emitter.fire();
  }

  /** The view's description: the job, how many ranks in how many classes, and when they were read. */
  describe(): string | undefined {
    const s = this.state;
    if (s.phase === 'empty') {
      return undefined;
    }
    if (s.phase !== 'loaded') {
      return s.job;
    }
    const n = s.doc.ranks.length || s.doc.classes.reduce((sum, c) => sum + c.count, 0);
    const time = s.at.toTimeString().slice(0, 8);
    return `${s.job} · ${n} rank${n === 1 ? '' : 's'} in ${s.doc.classes.length} group${s.doc.classes.length === 1 ? '' : 's'} · ${time}`;
  }

  /** Show Stacks: read the job's stacks into the view and bring it to the front. */
  async show(job: string): Promise<void> {
    if (!this.shown) {
      this.shown = true;
      // the view is there once it has something to show (package.json: its `when`)
      await vscode.commands.executeCommand('setContext', 'remoteDebug.stacksShown', true);
    }
    void Promise.resolve(vscode.commands.executeCommand(`${STACKS_VIEW}.focus`)).catch(() => undefined);
    await this.load(job);
  }

  async refresh(): Promise<void> {
    const job = this.job;
    if (!job) {
      await vscode.commands.executeCommand('remoteDebug.showStacks');
      return;
    }
    await this.load(job);
  }

  private async load(job: string): Promise<void> {
    const before = this.state;
    this.setState({ phase: 'loading', job });
    let stdout: string;
    try {
      stdout = (
        await withCancellableProgress(vscode.l10n.t('Remote Debug: stacks of {0}', job), (signal) =>
          this.host.run(['stacks', job, '--json'], { timeoutMs: STACKS_TIMEOUT_MS, signal }),
        )
      ).stdout;
    } catch (err) {
      if (err instanceof CliError && err.message === 'cancelled') {
        this.setState(before);
        return;
      }
      if (err instanceof CliError && err.unknownCommand) {
        this.setState(before);
        await vscode.window.showInformationMessage(
          'Remote Debug: Show Stacks is not available yet: this remote-debug CLI has no "stacks" command. ' +
            'Attach the debugger (Attach All Ranks) and pause a rank to see its stack.',
        );
        return;
      }
      this.setState({ phase: 'failed', job, error: err instanceof Error ? err.message : String(err) });
      throw err;
    }
    this.raw = stdout;
    try {
      const doc = parseStacksDocument(parseJsonDocument(stdout), job, this.host.codeDirs(job));
      this.setState({ phase: 'loaded', job, doc, at: new Date() });
    } catch (err) {
      // not the document we know: the view says so, Open as JSON shows what came
      this.setState({ phase: 'failed', job, error: err instanceof Error ? err.message : String(err) });
    }
  }

  /** Open as JSON: the CLI's document in an editor (what Show Stacks opened before the view). */
  async openJson(): Promise<void> {
    if (this.raw === undefined) {
      await vscode.window.showInformationMessage(vscode.l10n.t('Remote Debug: no stacks read yet: run Show Stacks on a job first.'));
      return;
    }
    let content = this.raw;
    let language = 'plaintext';
    try {
      content = JSON.stringify(parseJsonDocument(this.raw), null, 2);
      language = 'json';
    } catch {
      // not JSON: as the CLI printed it
    }
    const doc = await vscode.workspace.openTextDocument({ content, language });
    await vscode.window.showTextDocument(doc, { preview: true });
  }

  async openFrame(job: string, node: string | null, file: string, line: number): Promise<void> {
    const codeDir = node ? this.document?.codeDirs[node] : undefined;
    const local = this.host.localFile(job, node, file, codeDir);
    if (!local) {
      await vscode.window.showInformationMessage(
        vscode.l10n.t(
          'Remote Debug: {0} is not on this machine (the job\'s code is mapped by the setting remoteDebug.pathMappings, or Change Local Source Folder… on the job).',
          file,
        ),
      );
      return;
    }
    const at = new vscode.Position(Math.max(0, line - 1), 0);
    await vscode.window.showTextDocument(vscode.Uri.file(local), { selection: new vscode.Range(at, at), preview: true });
  }

  /** A rank's click: its debug session when it has one, else an offer to attach to it (or to every rank). */
  async openRank(job: string, rank: number): Promise<void> {
    if (this.host.hasSession(job, rank)) {
      await vscode.commands.executeCommand('remoteDebug.focusRankSession', job, rank);
      return;
    }
    const one = vscode.l10n.t('Attach Rank {0}', rank);
    const all = vscode.l10n.t('Attach All Ranks');
    const choice = await vscode.window.showInformationMessage(
      vscode.l10n.t('Remote Debug: rank {0} of {1} has no debug session.', rank, job),
      one,
      all,
    );
    if (choice === one) {
      await this.host.attach(job, [rank]);
    } else if (choice === all) {
      await this.host.attach(job, undefined);
    }
  }

  /** The inline Attach of a class (its ranks) or a rank; ranks that have a session already are shown instead. */
  async attachNode(node?: StacksNode): Promise<void> {
    const job = this.job;
    const doc = this.document;
    if (!job || !doc || !node || (node.kind !== 'class' && node.kind !== 'rank')) {
      return;
    }
    const ranks = node.kind === 'rank' ? [node.rank] : doc.classes[node.index]?.ranks ?? [];
    const missing = ranks.filter((r) => !this.host.hasSession(job, r));
    if (missing.length === 0) {
      await vscode.commands.executeCommand('remoteDebug.focusRankSession', job, ranks[0]);
      return;
    }
    await this.host.attach(job, missing);
  }

  // --- TreeDataProvider ----------------------------------------------------------------------------

  getChildren(element?: StacksNode): StacksNode[] {
    const s = this.state;
    if (!element) {
      switch (s.phase) {
        case 'empty':
          return [
            {
              kind: 'message',
              id: 'empty',
              label: vscode.l10n.t('Show Stacks on a job to see where each rank is'),
              icon: 'info',
              command: { command: 'remoteDebug.showStacks', title: vscode.l10n.t('Show Stacks') },
            },
          ];
        case 'loading':
          return [
            {
              kind: 'message',
              id: 'loading',
              label: vscode.l10n.t('Reading the stacks of {0}…', s.job),
              detail: vscode.l10n.t('waiting for remote-debug stacks: every rank, through its node'),
              icon: 'loading~spin',
            },
          ];
        case 'failed':
          return [
            {
              kind: 'message',
              id: 'failed',
              label: vscode.l10n.t('Cannot read the stacks of {0}', s.job),
              detail: s.error,
              icon: 'error',
              command: { command: 'remoteDebug.stacks.refresh', title: vscode.l10n.t('Refresh') },
            },
          ];
        case 'loaded': {
          const out: StacksNode[] = s.doc.collectives.map((_, index) => ({ kind: 'collective', index }));
          out.push(...s.doc.classes.map((_, index): StacksNode => ({ kind: 'class', index })));
          if (s.doc.classes.length === 0) {
            out.push({ kind: 'message', id: 'no-ranks', label: vscode.l10n.t('No rank of {0} could be read', s.job), icon: 'info' });
          }
          return out;
        }
      }
    }
    const doc = this.document;
    if (!doc) {
      return [];
    }
    if (element.kind === 'class') {
      const c = doc.classes[element.index];
      if (!c) {
        return [];
      }
      const node = this.rankStacks(c.ranks[0])?.node ?? null;
      const frames = this.frameNodes(`class:${c.ranges}`, c.frames, node);
      const exception: StacksNode[] = c.exception ? [{ kind: 'message', id: `class:${c.ranges}/exception`, label: c.exception, icon: 'error' }] : [];
      // the frames, then the ranks (a click on one shows its debug session, or attaches)
      return [...exception, ...frames, ...c.ranks.map((rank): StacksNode => ({ kind: 'rank', index: element.index, rank }))];
    }
    if (element.kind === 'rank') {
      const c = doc.classes[element.index];
      const r = this.rankStacks(element.rank);
      const thread = r && c ? (r.threads.find((t) => t.name === c.thread && !t.internal) ?? mainThread(r)) : undefined;
      const frames = thread?.frames.length ? thread.frames : c?.frames ?? [];
      const out = this.frameNodes(`rank:${element.rank}`, frames, r?.node ?? null);
      if (thread?.exception) {
        out.unshift({ kind: 'message', id: `rank:${element.rank}/exception`, label: thread.exception, icon: 'error' });
      }
      return out;
    }
    return [];
  }

  private rankStacks(rank: number): RankStacks | undefined {
    return this.document?.ranks.find((r) => r.rank === rank);
  }

  /** Frames innermost first, as a Call Stack shows them. */
  private frameNodes(parent: string, frames: readonly StackFrame[], node: string | null): StacksNode[] {
    const n = frames.length;
    return [...frames].reverse().map((frame, i) => ({ kind: 'frame', id: `${parent}/${n - 1 - i}`, frame, node, innermost: i === 0 }));
  }

  getTreeItem(element: StacksNode): vscode.TreeItem {
    const job = this.job ?? '';
    switch (element.kind) {
      case 'message': {
        const item = new vscode.TreeItem(element.label, vscode.TreeItemCollapsibleState.None);
        item.id = `message:${element.id}`;
        item.description = element.detail;
        item.tooltip = element.detail ? `${element.label}\n${element.detail}` : element.label;
        item.iconPath = element.icon ? icon(element.icon, element.iconColor) : undefined;
        item.command = element.command;
        item.contextValue = 'stackMessage';
        return item;
      }
      case 'collective': {
        const text = this.document?.collectives[element.index] ?? '';
        const item = new vscode.TreeItem(text, vscode.TreeItemCollapsibleState.None);
        item.id = `collective:${element.index}`;
        item.tooltip = vscode.l10n.t('Flight Recorder: {0}', text);
        item.iconPath = icon('warning', 'problemsWarningIcon.foreground');
        item.contextValue = 'stackCollective';
        return item;
      }
      case 'class': {
        const doc = this.document!;
        const c = doc.classes[element.index];
        const largest = Math.max(...doc.classes.map((k) => k.count));
        const odd = doc.classes.length > 1 && c.count < largest;
        // the first class (the odd one: the CLI orders them so) open at once, the others on demand
        const item = new vscode.TreeItem(
          classLabel(c),
          element.index === 0 ? vscode.TreeItemCollapsibleState.Expanded : vscode.TreeItemCollapsibleState.Collapsed,
        );
        item.id = `class:${job}/${c.ranges}`;
        item.description = c.summary;
        const [id, color] = classIcon(c, odd);
        item.iconPath = icon(id, color);
        item.tooltip = [
          `${classLabel(c)}${c.thread ? ` · ${c.thread}` : ''}`,
          c.summary,
          c.rootCause ? vscode.l10n.t('root cause: its failure came first in the job') : undefined,
          c.error ? vscode.l10n.t('error: {0}', c.error) : undefined,
          c.exception ? vscode.l10n.t('raised: {0}', c.exception) : undefined,
          c.blockedInNative ? vscode.l10n.t('blocked in native code (a collective, I/O, a sleep)') : undefined,
          c.inDebugger ? vscode.l10n.t('stopped in the debugger') : undefined,
        ]
          .filter(Boolean)
          .join('\n');
        item.contextValue = 'stackClass';
        return item;
      }
      case 'rank': {
        const r = this.rankStacks(element.rank);
        const session = this.host.hasSession(job, element.rank);
        const parts = [
          r?.node ?? undefined,
          r?.state ?? undefined,
          r?.blocked_in_native ? vscode.l10n.t('in native code') : undefined,
          r?.root_cause ? vscode.l10n.t('root cause') : undefined,
          r?.error ?? undefined,
          session ? vscode.l10n.t('attached') : undefined,
        ].filter(Boolean);
        const c = this.document?.classes[element.index];
        const hasFrames = (r && mainThread(r)?.frames.length) || c?.frames.length;
        const item = new vscode.TreeItem(
          `rank ${element.rank}`,
          hasFrames ? vscode.TreeItemCollapsibleState.Collapsed : vscode.TreeItemCollapsibleState.None,
        );
        item.id = `rank:${job}/${element.index}/${element.rank}`;
        item.description = parts.join(' · ');
        item.tooltip = `rank ${element.rank}${r?.node ? ` on ${r.node}` : ''}${r?.pid ? `, pid ${r.pid}` : ''}: ${
          session ? vscode.l10n.t('click to show its debug session') : vscode.l10n.t('click to attach to it')
        }`;
        item.iconPath = session ? icon('debug-alt', 'charts.green') : r?.error ? icon('warning', 'problemsWarningIcon.foreground') : icon('circle-outline');
        item.contextValue = session ? 'stackRank-attached' : 'stackRank';
        item.command = {
          command: 'remoteDebug.stacks.openRank',
          title: session ? vscode.l10n.t('Show Debug Session') : vscode.l10n.t('Attach'),
          arguments: [job, element.rank],
        };
        return item;
      }
      case 'frame': {
        const f = element.frame;
        const item = new vscode.TreeItem(f.function, vscode.TreeItemCollapsibleState.None);
        item.id = `frame:${job}/${element.id}`;
        item.description = `${path.basename(f.file)}:${f.line}`;
        item.tooltip = `${f.function}\n${f.file}:${f.line}`;
        item.iconPath = icon(element.innermost ? 'debug-stackframe' : 'debug-stackframe-dot');
        item.contextValue = 'stackFrame';
        item.command = {
          command: 'remoteDebug.stacks.openFrame',
          title: vscode.l10n.t('Open File'),
          arguments: [job, element.node, f.file, f.line],
        };
        return item;
      }
    }
  }
}
