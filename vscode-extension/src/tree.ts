// The Remote Debug > Jobs view: renders JobsModel as jobs -> nodes -> ranks.

import * as vscode from 'vscode';

import { isAdoptableJob, isRunning } from './events';
import { backendTitle, ListingProblem, ListingProblems } from './listingProblems';
import { formatRankRanges } from './ranks';
import { isKeptAlive, JobEntry, JobsModel, NodeEntry, RANK_STATE_LABEL, rankCounts, RankEntry, RankState, secondsLeft } from './model';

export type TreeNode =
  | { kind: 'job'; job: string }
  | { kind: 'node'; job: string; node: string }
  | { kind: 'rank'; job: string; node: string; rank: number }
  | {
      kind: 'message';
      id: string;
      label: string;
      detail?: string;
      command?: vscode.Command;
      icon?: string;
      iconColor?: string;
      /** Actions shown under the message (a listing problem's fixes); the message is expanded then. */
      children?: TreeNode[];
    };

const RANK_ICON: Record<RankState, [string, string?]> = {
  starting: ['loading~spin'],
  'not-attached': ['circle-outline'],
  waiting: ['watch', 'charts.yellow'],
  listening: ['circle-large-outline', 'charts.blue'],
  attaching: ['loading~spin'],
  attached: ['debug-start', 'charts.green'],
  paused: ['debug-pause', 'charts.orange'],
  unavailable: ['warning', 'problemsWarningIcon.foreground'],
  failed: ['error', 'errorForeground'],
  held: ['debug-pause', 'problemsWarningIcon.foreground'],
  restarting: ['debug-restart', 'charts.blue'],
  finished: ['pass', 'disabledForeground'],
};

function icon(id: string, color?: string): vscode.ThemeIcon {
  return color ? new vscode.ThemeIcon(id, new vscode.ThemeColor(color)) : new vscode.ThemeIcon(id);
}

/**
 * A rank's icon: its state's, except where one state covers what needs telling apart: a failed rank held for a
 * post-mortem (a bug to look at, not a dead rank), the rank whose stop paused the others (all-stop), and a rank
 * that was asked to pause or step with the others and is still in native code (a collective, I/O).
 */
export function rankIcon(r: RankEntry, allStop?: { rank: number }): [string, string?] {
  if (r.waitingIn && (r.state === 'attached' || r.state === 'paused')) {
    return ['clock', 'charts.yellow'];
  }
  if (r.hold && r.hold.heldFor === undefined && r.state === 'failed') {
    return ['bug', 'errorForeground'];
  }
  if (r.state === 'paused' && allStop?.rank === r.rank) {
    return ['debug-stackframe', 'debugIcon.breakpointCurrentStackframeForeground'];
  }
  return RANK_ICON[r.state];
}

/** `rank 3 failed, held 87 s`: a job's held failures, for its row (undefined: none). */
export function heldPhrase(entry: JobEntry, now = Date.now()): string | undefined {
  const failed = [...entry.nodes.values()].flatMap((n) => [...n.ranks.values()]).filter((r) => r.hold && r.hold.heldFor === undefined);
  if (failed.length === 0 || !isRunning(entry.info)) {
    return undefined;
  }
  const ranks = failed.map((r) => r.rank).sort((a, b) => a - b);
  const untils = failed.flatMap((r) => (r.hold?.until === undefined ? [] : [r.hold.until]));
  const left = untils.length ? `, held ${secondsLeft(Math.min(...untils), now)} s` : ', held';
  return ranks.length === 1 ? `rank ${ranks[0]} failed${left}` : `ranks ${formatRankRanges(ranks)} failed${left}`;
}

export function jobDescription(entry: JobEntry, now = Date.now()): string {
  const info = entry.info;
  const parts: string[] = [];
  const status = info.secondary_status && info.secondary_status !== info.status ? `${info.status} · ${info.secondary_status}` : info.status;
  parts.push(status);
  if (!isRunning(info) && info.exit_code !== null && info.exit_code !== undefined) {
    parts.push(`exit ${info.exit_code}`);
  }
  if (!info.debuggable) {
    parts.push('not debuggable');
  }
  const held = heldPhrase(entry, now);
  if (held) {
    parts.push(held);
  }
  parts.push(...runParts(entry));
  if (entry.attach === 'connecting') {
    parts.push('attaching…');
  } else if (entry.attach === 'ready') {
    parts.push('attached');
  } else if (entry.attach === 'failed') {
    parts.push('attach failed');
  }
  parts.push(info.backend);
  return parts.join(' · ');
}

/** What the job's keep-alive and re-runs add: `kept alive, 87 s left`, `run 2`, `running` / `syncing…`. */
export function runParts(entry: JobEntry): string[] {
  const info = entry.info;
  if (!isRunning(info)) {
    return info.run > 0 ? [`run ${info.run}`] : [];
  }
  const parts: string[] = [];
  // the CLI may already say it in the secondary status (one wording: "kept alive, 87 s left")
  if (info.kept_alive_seconds_left !== null && entry.rerun === undefined && !/kept alive/i.test(info.secondary_status)) {
    parts.push(keptAlivePhrase(info.kept_alive_seconds_left));
  }
  if (info.run > 0) {
    parts.push(`run ${info.run}`);
  }
  if (entry.rerun === 'syncing') {
    parts.push('syncing…');
  } else if (entry.rerun === 'running') {
    parts.push('running');
  }
  return parts;
}

/** remote_debug.contract.spec.kept_alive_phrase's wording. */
export function keptAlivePhrase(secondsLeft: number): string {
  return `kept alive, ${secondsLeft} s left`;
}

/**
 * `job-running` / `job-ended`, then `-attached` while an attach process runs, `-keepalive` for a kept-alive job
 * (Release, Sync and Re-run inline), `-rerunning` while this window's re-run runs (Stop Run), `-adoptable` for a running
 * SageMaker job launched without remote debugging (Adopt Job…).
 */
export function jobContextValue(entry: JobEntry): string {
  const running = isRunning(entry.info) ? 'job-running' : 'job-ended';
  const attached = entry.attach === 'connecting' || entry.attach === 'ready' ? '-attached' : '';
  const kept = isKeptAlive(entry) ? '-keepalive' : '';
  const rerunning = entry.rerun !== undefined ? '-rerunning' : '';
  // `-reattach`: ranks whose sessions ended unexpectedly, or attached before a window reload (Re-attach)
  const reattach = entry.reattachable || [...entry.nodes.values()].some((n) => [...n.ranks.values()].some((r) => r.lost)) ? '-reattach' : '';
  const adoptable = isAdoptableJob(entry.info) ? '-adoptable' : '';
  return running + attached + kept + rerunning + reattach + adoptable;
}

export function rankDescription(r: RankEntry, now = Date.now()): string {
  const parts = [RANK_STATE_LABEL[r.state]];
  if (r.hold?.rootCause) {
    parts.push(vscode.l10n.t('root cause'));
  }
  const heldError = r.hold && r.hold.heldFor === undefined ? r.hold.error : undefined;
  // a post-mortem stop's description is the held exception's message ("bad batch 40"), which "held after
  // ValueError: bad batch 40" says in full: not twice
  if (r.detail && !(r.state === 'paused' && heldError?.includes(r.detail))) {
    // a stop's description ("Paused by all-stop (rank 0 hit a breakpoint)") after the label "paused": not twice
    parts.push(r.state === 'paused' ? r.detail.replace(/^paused\s+(?=by\b)/i, '') : r.detail);
  }
  if (r.hold?.heldFor !== undefined && !r.detail?.includes(`held with rank ${r.hold.heldFor}`)) {
    // attached, it is still held with the rank that failed (and, blocked in a collective, waits for it)
    parts.push(vscode.l10n.t('held with rank {0}', r.hold.heldFor));
  }
  if (r.hold && r.hold.heldFor === undefined && r.hold.error && !r.detail?.includes(r.hold.error)) {
    parts.push(vscode.l10n.t('held after {0}', r.hold.error)); // its post-mortem session shows where it failed
  }
  if (r.hold?.until !== undefined) {
    parts.push(vscode.l10n.t('{0} s left', secondsLeft(r.hold.until, now)));
  }
  if (r.waitingIn && (r.state === 'attached' || r.state === 'paused')) {
    parts.push(
      r.waitingIn === 'pause'
        ? vscode.l10n.t('in native code: pauses when it returns to Python')
        : vscode.l10n.t('in native code: its step ends when it returns to Python'),
    );
  }
  if (r.lost) {
    parts.push(vscode.l10n.t('session ended unexpectedly'));
  }
  return parts.join(' · ');
}

/** A node's row: `8 ranks · 3 attached · 1 paused · connected · ssh algo-1.job` (what a collapsed node is up to first). */
export function nodeDescription(node: NodeEntry): string {
  const ranks = node.ranks.size;
  const rankText = ranks === 0 ? 'ranks not known yet' : `${ranks} rank${ranks === 1 ? '' : 's'}`;
  return [rankText, ...rankCounts(node.ranks.values()), node.connected ? 'connected' : undefined, node.alias ? `ssh ${node.alias}` : undefined]
    .filter(Boolean)
    .join(' · ');
}

/** setTimeout / clearTimeout: the tests pass a clock they advance by hand. */
export interface Scheduler {
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

const timers: Scheduler = {
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout),
};

/** How long model changes gather before the view refreshes: short enough to feel immediate. */
export const REFRESH_DELAY_MS = 80;

export class JobsTreeProvider implements vscode.TreeDataProvider<TreeNode>, vscode.Disposable {
  private readonly emitter = new vscode.EventEmitter<TreeNode | undefined | void>();
  readonly onDidChangeTreeData = this.emitter.event;
  private readonly subscription: { dispose(): void };
  private timer: { handle: unknown } | undefined;

  constructor(
    private readonly model: JobsModel,
    private readonly scheduler: Scheduler = timers,
    private readonly delayMs = REFRESH_DELAY_MS,
    private readonly listing: ListingProblems = new ListingProblems(),
  ) {
    const jobs = model.onDidChange(() => this.scheduleRefresh());
    const problems = listing.onDidChange(() => this.scheduleRefresh());
    this.subscription = { dispose: () => (jobs.dispose(), problems.dispose()) };
  }

  /**
   * Attaching 64 ranks changes the model several hundred times within a few seconds (listening, ready, attaching,
   * attached per rank), and each whole-tree refresh makes VS Code ask for every visible item again.  So the first
   * change starts a timer, the changes until it runs ride along, and its one refresh shows the model as it is
   * then: at most one refresh per interval, and the last change is always shown (unlike a debounce that restarts
   * its timer, a steady stream of events cannot hold the view back).
   */
  private scheduleRefresh(): void {
    if (this.timer) {
      return;
    }
    this.timer = {
      handle: this.scheduler.setTimeout(() => {
        this.timer = undefined;
        this.emitter.fire();
      }, this.delayMs),
    };
  }

  dispose(): void {
    if (this.timer) {
      this.scheduler.clearTimeout(this.timer.handle);
      this.timer = undefined;
    }
    this.subscription.dispose();
    this.emitter.dispose();
  }

  getChildren(element?: TreeNode): TreeNode[] {
    if (!element) {
      if (this.model.error) {
        return [
          {
            kind: 'message',
            id: 'error',
            label: 'Cannot list jobs',
            detail: this.model.error,
            icon: 'error',
            command: { command: 'remoteDebug.showOutput', title: 'Show Output' },
          },
          {
            kind: 'message',
            id: 'settings',
            label: 'Set the remote-debug CLI path…',
            icon: 'gear',
            command: { command: 'workbench.action.openSettings', title: 'Open Settings', arguments: ['remoteDebug.'] },
          },
          ...(cliNotInstalled(this.model.error) ? [installNode()] : []),
        ];
      }
      if (!this.model.loaded) {
        return [{ kind: 'message', id: 'loading', label: 'Loading jobs…', icon: 'loading~spin' }];
      }
      const jobs = this.model.list().map((e): TreeNode => ({ kind: 'job', job: e.info.name }));
      // No jobs: [] makes the view show its welcome content (package.json viewsWelcome), which names the listing
      // problem when there is one (context key remoteDebug.listingProblem).  With jobs, the problems go on top.
      return jobs.length === 0 ? [] : [...this.listing.problems.map(problemNode), ...jobs];
    }
    if (element.kind === 'message') {
      return element.children ?? [];
    }
    if (element.kind === 'job') {
      const entry = this.model.get(element.job);
      if (!entry) {
        return [];
      }
      const out: TreeNode[] = [];
      if (entry.attachError) {
        out.push({ kind: 'message', id: `${element.job}/attach-error`, label: 'Attach failed', detail: entry.attachError, icon: 'error' });
      }
      if (entry.warning) {
        out.push({ kind: 'message', id: `${element.job}/warning`, label: 'Warning', detail: entry.warning, icon: 'warning' });
      }
      if (!entry.info.debuggable) {
        const why = entry.info.why_not_debuggable || 'launched without remote debugging';
        out.push({ kind: 'message', id: `${element.job}/not-debuggable`, label: 'Not debuggable', detail: why, icon: 'info' });
      }
      if (entry.info.failure_reason) {
        out.push({ kind: 'message', id: `${element.job}/failure`, label: 'Failure', detail: entry.info.failure_reason, icon: 'error' });
      }
      const nodes = [...entry.nodes.keys()].sort(naturalCompare);
      out.push(...nodes.map((node): TreeNode => ({ kind: 'node', job: element.job, node })));
      return out;
    }
    if (element.kind === 'node') {
      const node = this.model.get(element.job)?.nodes.get(element.node);
      if (!node) {
        return [];
      }
      return [...node.ranks.keys()].sort((a, b) => a - b).map((rank) => ({ kind: 'rank', job: element.job, node: element.node, rank }));
    }
    return [];
  }

  getParent(element: TreeNode): TreeNode | undefined {
    if (element.kind === 'node') {
      return { kind: 'job', job: element.job };
    }
    if (element.kind === 'rank') {
      return { kind: 'node', job: element.job, node: element.node };
    }
    return undefined;
  }

  getTreeItem(element: TreeNode): vscode.TreeItem {
    switch (element.kind) {
      case 'message': {
        const collapsible = element.children?.length ? vscode.TreeItemCollapsibleState.Expanded : vscode.TreeItemCollapsibleState.None;
        const item = new vscode.TreeItem(element.label, collapsible);
        item.id = `message:${element.id}`;
        item.description = element.detail;
        item.tooltip = element.detail ? `${element.label}: ${element.detail}` : element.label;
        item.iconPath = element.icon ? icon(element.icon, element.iconColor) : undefined;
        item.command = element.command;
        item.contextValue = 'message';
        return item;
      }
      case 'job': {
        const entry = this.model.get(element.job)!;
        const expanded = isRunning(entry.info) ? vscode.TreeItemCollapsibleState.Expanded : vscode.TreeItemCollapsibleState.Collapsed;
        const item = new vscode.TreeItem(element.job, expanded);
        item.id = `job:${element.job}`;
        item.description = jobDescription(entry, this.model.now());
        item.contextValue = jobContextValue(entry);
        item.tooltip = jobTooltip(entry);
        item.iconPath = isRunning(entry.info)
          ? heldPhrase(entry)
            ? icon('bug', 'errorForeground')
            : entry.attach === 'ready'
            ? icon('debug-alt', 'charts.green')
            : icon('run')
          : entry.info.status === 'Completed'
            ? icon('pass', 'testing.iconPassed')
            : icon('error', entry.info.status === 'Failed' ? 'testing.iconFailed' : undefined);
        return item;
      }
      case 'node': {
        const entry = this.model.get(element.job);
        const node: NodeEntry = entry?.nodes.get(element.node) ?? { name: element.node, connected: false, ranks: new Map() };
        // 8 nodes x 8 ranks expanded is a 72-row wall: the node rows' counts say enough until one is opened
        const collapsed = (entry?.nodes.size ?? 0) > 1;
        const item = new vscode.TreeItem(
          element.node,
          collapsed ? vscode.TreeItemCollapsibleState.Collapsed : vscode.TreeItemCollapsibleState.Expanded,
        );
        item.id = `node:${element.job}/${element.node}`;
        item.description = nodeDescription(node);
        item.tooltip = [
          node.codeDir ? `${element.node}: code in ${node.codeDir}` : element.node,
          node.alias ? `ssh ${node.alias}` : undefined,
        ]
          .filter(Boolean)
          .join('\n');
        // `node-attachable`: Attach to This Node's Ranks (a running job whose ranks on the node are known)
        const attachable = entry !== undefined && isRunning(entry.info) && node.ranks.size > 0;
        item.contextValue = attachable ? 'node-attachable' : 'node';
        item.iconPath = icon('server', node.connected ? 'charts.green' : undefined);
        return item;
      }
      case 'rank': {
        const r = this.model.rankEntry(element.job, element.rank)!;
        const item = new vscode.TreeItem(`rank ${element.rank}`, vscode.TreeItemCollapsibleState.None);
        item.id = `rank:${element.job}/${element.rank}`;
        item.description = rankDescription(r, this.model.now());
        item.tooltip = `rank ${r.rank} on ${r.node}: ${item.description}${r.localPort ? `\ndebugger forwarded to 127.0.0.1:${r.localPort}` : ''}`;
        const attachedish = r.state === 'attached' || r.state === 'paused' || r.state === 'attaching';
        // a held failed rank can still be debugged (post-mortem); any other failed rank is done
        const done = r.state === 'finished' || r.state === 'unavailable' || (r.state === 'failed' && !r.hold && !r.detail?.startsWith('held'));
        // `rank-detached-lost`: its session ended unexpectedly (Re-attach inline)
        item.contextValue = attachedish ? 'rank-attached' : done ? 'rank-done' : r.lost ? 'rank-detached-lost' : 'rank-detached';
        const [id, color] = rankIcon(r, this.model.get(element.job)?.allStop);
        item.iconPath = icon(id, color);
        if (r.state === 'attached' || r.state === 'paused') {
          // a click shows its debug session (groupActions.ts: the session picker, filtered to it)
          item.command = {
            command: 'remoteDebug.focusRankSession',
            title: vscode.l10n.t('Show Debug Session'),
            arguments: [element.job, element.rank],
          };
        }
        return item;
      }
    }
  }
}

function jobTooltip(entry: JobEntry): string {
  const i = entry.info;
  const lines = [
    `${i.name} (${i.backend})`,
    `status: ${i.status}${i.secondary_status ? ` / ${i.secondary_status}` : ''}`,
    `${i.nodes.length} node(s) × ${i.nproc_per_node || "?"} rank(s)`,
  ];
  if (i.source_dir) {
    lines.push(`source: ${i.source_dir}`);
  }
  if (i.kept_alive_seconds_left !== null) {
    lines.push(`${keptAlivePhrase(i.kept_alive_seconds_left)}: Sync and Re-run runs it again, Release ends it`);
  }
  if (i.run > 0) {
    lines.push(`run ${i.run} (a re-run of the training command)${entry.rerun === 'running' ? ': running' : ''}`);
  }
  if (i.failure_reason) {
    lines.push(`failure: ${i.failure_reason}`);
  }
  return lines.join('\n');
}

/** The CLI could not be started at all (not on PATH, or the interpreter lacks the package): offer to install it. */
export function cliNotInstalled(error: string | undefined): boolean {
  return error !== undefined && /: not found\b|No module named '?remote_debug/.test(error);
}

function installNode(): TreeNode {
  return {
    kind: 'message',
    id: 'install-cli',
    label: vscode.l10n.t('Install the remote-debug CLI (pip install remote-debug-training)…'),
    icon: 'cloud-download',
    command: { command: 'remoteDebug.installCli', title: vscode.l10n.t('Install or Upgrade the remote-debug CLI') },
  };
}

/** `SageMaker jobs not listed: AWS SSO token expired (profile dev)`: the profile only when the message lacks it. */
export function problemLabel(p: ListingProblem): string {
  const profile = p.profile && !p.message.includes(p.profile) ? vscode.l10n.t(' (profile {0})', p.profile) : '';
  return vscode.l10n.t('{0} jobs not listed: {1}{2}', backendTitle(p.backend), p.message, profile);
}

/** A listing problem as a warning with its fixes underneath, the way the AWS Toolkit shows a broken connection. */
export function problemNode(p: ListingProblem): TreeNode {
  const id = `problem:${p.backend}`;
  const actions: TreeNode[] = [];
  if (p.fix) {
    actions.push({
      kind: 'message',
      id: `${id}/fix`,
      label: vscode.l10n.t('Run {0}', p.fix),
      icon: 'terminal',
      command: { command: 'remoteDebug.aws.runFix', title: vscode.l10n.t('Run in Terminal'), arguments: [p.fix] },
    });
  }
  if (p.problem !== 'unreachable' && p.problem !== 'error') {
    actions.push(
      {
        kind: 'message',
        id: `${id}/profile`,
        label: vscode.l10n.t('Pick AWS Profile…'),
        detail: p.profile,
        icon: 'account',
        command: { command: 'remoteDebug.aws.pickProfile', title: vscode.l10n.t('Pick AWS Profile…') },
      },
      {
        kind: 'message',
        id: `${id}/region`,
        label: vscode.l10n.t('Pick AWS Region…'),
        detail: p.region,
        icon: 'globe',
        command: { command: 'remoteDebug.aws.pickRegion', title: vscode.l10n.t('Pick AWS Region…') },
      },
    );
  }
  actions.push({
    kind: 'message',
    id: `${id}/refresh`,
    label: vscode.l10n.t('Refresh'),
    icon: 'refresh',
    command: { command: 'remoteDebug.refresh', title: vscode.l10n.t('Refresh') },
  });
  return { kind: 'message', id, label: problemLabel(p), icon: 'warning', iconColor: 'problemsWarningIcon.foreground', children: actions };
}

export function naturalCompare(a: string, b: string): number {
  return a.localeCompare(b, undefined, { numeric: true });
}
