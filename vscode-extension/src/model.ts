// The Jobs view's state: jobs -> nodes -> ranks, merged from three sources.
//
//   `remote-debug jobs --json`       which jobs exist, their status, nodes and ranks per node
//   `remote-debug attach --json`     per-rank events while an attach process runs
//   the debug sessions we started    attached / paused / running, seen through a DAP tracker
//
// Pure TypeScript (no vscode import): the tree provider renders it, the unit tests drive it.

import { AttachEvent, formatSshAlias, GroupAction, isRunning, JobInfo, UnknownEvent } from './events';
import { parseRankText } from './ranks';

export type RankState =
  | 'starting' // the job has not started training yet
  | 'not-attached' // running; nobody asked the CLI about it yet
  | 'waiting' // its listener waits for a debugger before the script runs on (--wait)
  | 'listening' // its listener is up and forwarded; no debugger attached
  | 'attaching' // a debug session is being started
  | 'attached' // a debug session is attached and the rank runs
  | 'paused' // a debug session shows it stopped (breakpoint, step, pause, exception)
  | 'unavailable' // the rank has no debugger (skipped, failed)
  | 'failed' // the rank died of an uncaught exception (held: alive for a post-mortem debugger)
  | 'held' // hold on failure, the whole gang: paused where it was while another rank's failure is held
  | 'restarting' // `remote-debug run` replaced its process; the new one's rank-ready comes next
  | 'finished'; // the rank or the whole job has ended

export const RANK_STATE_LABEL: Record<RankState, string> = {
  starting: 'starting',
  'not-attached': 'not attached',
  waiting: 'waiting for debugger',
  listening: 'debugger port ready',
  attaching: 'attaching…',
  attached: 'attached',
  paused: 'paused',
  unavailable: 'no debugger',
  failed: 'failed',
  held: 'held',
  restarting: 'restarting',
  finished: 'finished',
};

/** A node's ranks in one phrase each, for a collapsed node: the state's label, shorter where it is long. */
const RANK_COUNT_WORDING: Partial<Record<RankState, string>> = { waiting: 'waiting', listening: 'ready', attaching: 'attaching' };
/** States not worth a count: every rank of an idle job is in one of them. */
const QUIET_STATES: ReadonlySet<RankState> = new Set<RankState>(['starting', 'not-attached']);

/** `["3 attached", "1 paused"]`: how many of `ranks` are in each state worth a glance (non-zero counts only). */
export function rankCounts(ranks: Iterable<RankEntry>): string[] {
  const counts = new Map<RankState, number>();
  for (const r of ranks) {
    counts.set(r.state, (counts.get(r.state) ?? 0) + 1);
  }
  return (Object.keys(RANK_STATE_LABEL) as RankState[])
    .filter((state) => !QUIET_STATES.has(state) && counts.get(state))
    .map((state) => `${counts.get(state)} ${RANK_COUNT_WORDING[state] ?? RANK_STATE_LABEL[state]}`);
}

export type AttachState = 'none' | 'connecting' | 'ready' | 'ended' | 'failed';

/** A Sync and Re-run of the job: copying the workspace (`sync`), then its `run` process is live. */
export type RerunState = 'syncing' | 'running';

export interface RankEntry {
  rank: number;
  node: string;
  state: RankState;
  localPort?: number;
  remotePort?: number;
  detail?: string; // why unavailable, where paused, ...
  /** Its debug session ended unexpectedly (the tunnel dropped) and was not started again: the view offers Re-attach. */
  lost?: boolean;
  /**
   * Held after a failure (hold on failure): its own (`heldFor` undefined) or the gang's, with rank `heldFor`.  `until`:
   * when the hold ends (ms, this machine's clock; from the job listing's seconds left), undefined when not known.
   */
  hold?: { until?: number; heldFor?: number; rootCause?: boolean; error?: string };
  /** Asked to pause or step with every rank, it is still in native code (a collective, I/O): `rank-waiting`. */
  waitingIn?: GroupAction;
}

export interface NodeEntry {
  name: string;
  alias?: string;
  connected: boolean;
  codeDir?: string;
  ranks: Map<number, RankEntry>;
}

export interface JobEntry {
  info: JobInfo;
  nodes: Map<string, NodeEntry>;
  attach: AttachState;
  attachError?: string;
  warning?: string;
  /** Ranks the CLI forwards for us (local port known). */
  forwarded: Set<number>;
  /** A Sync and Re-run in progress (this window's): undefined when none. */
  rerun?: RerunState;
  /** Attached before the window reloaded and not attached again yet: the view offers Re-attach. */
  reattachable?: boolean;
  /** The last all-stop: the rank whose stop paused the others, and why it stopped (until the next group action). */
  allStop?: { rank: number; reason: string };
  /** Launched from this window with `--keep-alive` (Sync and Re-run works before its nodes first hold). */
  keepAlive?: boolean;
}

/**
 * The job keeps its nodes after its command (`launch --keep-alive`): they hold now (seconds left known), or
 * a re-run ran on them (only kept-alive jobs can be re-run), or this window runs one.
 */
export function isKeptAlive(entry: JobEntry): boolean {
  return (
    isRunning(entry.info) &&
    (entry.info.kept_alive_seconds_left !== null || entry.info.run > 0 || entry.rerun !== undefined || entry.keepAlive === true)
  );
}

/**
 * Something runs on the nodes again (a re-run): they do not hold until the next listing says so, nor does the
 * secondary status the CLI wrote while they held ("kept alive, 87 s left").
 */
function notHolding(info: JobInfo): JobInfo {
  const secondary = /^kept alive\b/i.test(info.secondary_status) ? 'Training' : info.secondary_status;
  return { ...info, kept_alive_seconds_left: null, secondary_status: secondary };
}

function startingLike(info: JobInfo): boolean {
  return isRunning(info) && /^(Starting|Pending|Downloading|LaunchingMLInstances|PreparingTraining)/i.test(info.secondary_status);
}

/** Global rank numbering of torchrun / SageMaker: node i (0-based, in `nodes` order) has ranks i*P .. i*P+P-1. */
export function expectedRanks(info: JobInfo): Array<{ node: string; rank: number }> {
  const out: Array<{ node: string; rank: number }> = [];
  info.nodes.forEach((node, i) => {
    for (let local = 0; local < info.nproc_per_node; local++) {
      out.push({ node, rank: i * info.nproc_per_node + local });
    }
  });
  return out;
}

/** The node a rank runs on by that numbering (undefined: ranks per node not known, or beyond the last node). */
export function expectedNode(info: JobInfo, rank: number): string | undefined {
  return info.nproc_per_node > 0 ? info.nodes[Math.floor(rank / info.nproc_per_node)] : undefined;
}

/** The states a rank has while one of our debug sessions holds it (what a job listing must not overwrite). */
const SESSION_STATES: ReadonlySet<RankState> = new Set<RankState>(['attaching', 'attached', 'paused']);

/** Seconds left until `until` (ms), never below 0. */
export function secondsLeft(until: number, now: number): number {
  return Math.max(0, Math.round((until - now) / 1000));
}

export class JobsModel {
  private readonly jobs = new Map<string, JobEntry>();

  /** `now`: the clock holds count down on (ms). */
  constructor(readonly now: () => number = Date.now) {}

  error: string | undefined; // `jobs --json` failed: the view says so instead of an empty list
  loaded = false;
  private listeners: Array<() => void> = [];

  onDidChange(listener: () => void): { dispose(): void } {
    this.listeners.push(listener);
    return { dispose: () => (this.listeners = this.listeners.filter((l) => l !== listener)) };
  }

  private changed(): void {
    this.listeners.forEach((l) => l());
  }

  list(): JobEntry[] {
    // running jobs first, newest first within each group
    return [...this.jobs.values()].sort((a, b) => {
      const ra = isRunning(a.info) ? 0 : 1;
      const rb = isRunning(b.info) ? 0 : 1;
      return ra - rb || b.info.created - a.info.created || a.info.name.localeCompare(b.info.name);
    });
  }

  get(job: string): JobEntry | undefined {
    return this.jobs.get(job);
  }

  running(): JobEntry[] {
    return this.list().filter((j) => isRunning(j.info));
  }

  setError(message: string): void {
    this.error = message;
    this.loaded = true;
    this.changed();
  }

  /** Replace the job list with `jobs --json`, keeping what attach events told us about known jobs. */
  setJobs(infos: JobInfo[]): void {
    this.error = undefined;
    this.loaded = true;
    const seen = new Set<string>();
    for (const info of infos) {
      seen.add(info.name);
      const entry = this.jobs.get(info.name);
      if (entry) {
        entry.info = info;
      } else {
        this.jobs.set(info.name, { info, nodes: new Map(), attach: 'none', forwarded: new Set() });
      }
      this.reconcile(this.jobs.get(info.name)!);
    }
    for (const [name, entry] of this.jobs) {
      // keep a job we are attached to even if a listing missed it (e.g. another backend was slow)
      if (!seen.has(name) && !(entry.attach === 'connecting' || entry.attach === 'ready')) {
        this.jobs.delete(name);
      }
    }
    this.changed();
  }

  /** A Sync and Re-run started (`syncing`), runs its `run` process (`running`), or ended (undefined). */
  setRerun(job: string, state: RerunState | undefined): void {
    const entry = this.jobs.get(job);
    if (!entry || entry.rerun === state) {
      return;
    }
    entry.rerun = state;
    if (state === 'running') {
      entry.info = notHolding(entry.info);
    }
    this.changed();
  }

  /** Add or update one job (from `launch --json` / `stop --json`). */
  upsertJob(info: JobInfo): void {
    const entry = this.jobs.get(info.name);
    if (entry) {
      entry.info = info;
    } else {
      this.jobs.set(info.name, { info, nodes: new Map(), attach: 'none', forwarded: new Set() });
    }
    this.reconcile(this.jobs.get(info.name)!);
    this.changed();
  }

  private node(entry: JobEntry, name: string): NodeEntry {
    let node = entry.nodes.get(name);
    if (!node) {
      node = { name, connected: false, ranks: new Map() };
      entry.nodes.set(name, node);
    }
    return node;
  }

  /** The rank wherever it is; created on `nodeName` (or moved there when an event says so). */
  private rank(entry: JobEntry, rank: number, nodeName?: string): RankEntry {
    for (const node of entry.nodes.values()) {
      const r = node.ranks.get(rank);
      if (r) {
        if (nodeName && node.name !== nodeName) {
          node.ranks.delete(rank);
          r.node = nodeName;
          this.node(entry, nodeName).ranks.set(rank, r);
        }
        return r;
      }
    }
    const home = nodeName ?? expectedNode(entry.info, rank) ?? entry.info.nodes[0] ?? 'algo-1';
    const r: RankEntry = { rank, node: home, state: this.baseState(entry) };
    this.node(entry, home).ranks.set(rank, r);
    return r;
  }

  private baseState(entry: JobEntry): RankState {
    if (!isRunning(entry.info)) {
      return 'finished';
    }
    return startingLike(entry.info) ? 'starting' : 'not-attached';
  }

  /** Nodes and ranks implied by the job's shape; states implied by its status where we know nothing better. */
  private reconcile(entry: JobEntry): void {
    const codeDirs = entry.info.code_dirs ?? {};
    for (const name of entry.info.nodes) {
      const node = this.node(entry, name);
      node.codeDir ??= codeDirs[name];
    }
    // one pass over what is known: a scan of every node per expected rank is O(ranks x nodes) per listing
    const known = new Set([...entry.nodes.values()].flatMap((n) => [...n.ranks.keys()]));
    for (const { node, rank } of expectedRanks(entry.info)) {
      if (!known.has(rank)) {
        this.node(entry, node).ranks.set(rank, { rank, node, state: this.baseState(entry) });
      }
    }
    const base = this.baseState(entry);
    this.reconcileHolds(entry);
    for (const node of entry.nodes.values()) {
      for (const r of node.ranks.values()) {
        if (base === 'finished') {
          // a crash stays visible after the job, also one held for a post-mortem (its session showed it paused);
          // nothing is held any more (an ended job's listing may still carry the ranks' last "held")
          const ownFailure = r.hold && r.hold.heldFor === undefined ? (r.hold.error ?? 'uncaught exception') : undefined;
          if (ownFailure !== undefined) {
            r.detail = ownFailure;
          } else if (r.detail?.startsWith('held after ')) {
            r.detail = r.detail.slice('held after '.length);
          } else if (r.detail?.startsWith('held with rank ')) {
            r.detail = undefined;
          }
          r.state = r.state === 'failed' || ownFailure !== undefined ? 'failed' : 'finished';
          r.hold = undefined;
          r.waitingIn = undefined;
          r.localPort = undefined;
        } else if (r.state === 'starting' || r.state === 'not-attached') {
          r.state = base;
        }
      }
    }
    if (base === 'finished' && (entry.attach === 'connecting' || entry.attach === 'ready')) {
      // the attach process notices on its own and says job-ended; nothing to do here
    }
  }

  /**
   * The job listing's held ranks (hold on failure): a crash is visible without an attach, with the seconds its hold
   * has left; a rank held with another rank's failure (the gang) is `held`.  A hold the listing no longer has ended.
   */
  private reconcileHolds(entry: JobEntry): void {
    const held = new Map(entry.info.held_ranks.map((h) => [h.rank, h]));
    const now = this.now();
    for (const h of held.values()) {
      this.rank(entry, h.rank, h.node || undefined);
    }
    for (const node of entry.nodes.values()) {
      for (const r of node.ranks.values()) {
        const h = held.get(r.rank);
        if (h) {
          const heldFor = typeof h.held_for === 'number' ? h.held_for : undefined;
          r.hold = {
            until: h.seconds_left === null ? undefined : now + h.seconds_left * 1000,
            heldFor,
            rootCause: h.root_cause === true || undefined,
            error: h.error ?? undefined,
          };
          if (!SESSION_STATES.has(r.state)) {
            this.showHold(r);
          }
        } else if (r.hold) {
          // the hold ended: the failed rank is gone with its failure, the others with the job
          r.hold = undefined;
          if (r.state === 'failed' && r.detail?.startsWith('held after ')) {
            r.detail = r.detail.slice('held after '.length);
          } else if (r.state === 'held') {
            r.state = this.baseState(entry);
            r.detail = undefined;
          }
        }
      }
    }
  }

  /** A held rank without a session: failed (its own failure held) or held (with the rank that failed). */
  private showHold(r: RankEntry): void {
    const hold = r.hold!;
    r.state = hold.heldFor === undefined ? 'failed' : 'held';
    r.detail = hold.heldFor === undefined ? `held after ${hold.error ?? 'uncaught exception'}` : `held with rank ${hold.heldFor}`;
  }

  // --- attach process ---------------------------------------------------------------------------

  attachStarted(job: string): void {
    const entry = this.jobs.get(job);
    if (!entry) {
      return;
    }
    entry.attach = 'connecting';
    entry.attachError = undefined;
    entry.warning = undefined;
    this.changed();
  }

  /** The attach process exited; error: its one-line message when it failed. */
  attachEnded(job: string, error?: string): void {
    const entry = this.jobs.get(job);
    if (!entry) {
      return;
    }
    entry.attach = error ? 'failed' : 'ended';
    entry.attachError = error;
    entry.forwarded.clear();
    for (const node of entry.nodes.values()) {
      node.connected = false;
      for (const r of node.ranks.values()) {
        r.localPort = undefined;
        r.waitingIn = undefined;
        if (r.hold && isRunning(entry.info)) {
          this.showHold(r); // still held: the attach went, the failure did not
        } else if (r.state !== 'finished' && r.state !== 'unavailable' && r.state !== 'failed') {
          r.state = this.baseState(entry);
        }
      }
    }
    this.changed();
  }

  /**
   * One of several attach processes of the job exited: the tunnels of `ranks` (those no other process forwards) are
   * gone, the job's attach goes on.  Their sessions end on their own; a rank nobody debugs is no longer reachable.
   */
  forwardingEnded(job: string, ranks: number[]): void {
    const entry = this.jobs.get(job);
    if (!entry || ranks.length === 0) {
      return;
    }
    for (const rank of ranks) {
      entry.forwarded.delete(rank);
      const r = this.rankEntry(job, rank);
      if (r) {
        r.localPort = undefined;
        if (r.state === 'waiting' || r.state === 'listening') {
          r.state = this.baseState(entry);
        }
      }
    }
    this.changed();
  }

  applyEvent(job: string, event: AttachEvent | UnknownEvent): void {
    const entry = this.jobs.get(job);
    if (!entry) {
      return;
    }
    const e = event as AttachEvent;
    switch (e.event) {
      case 'job-status':
        entry.info = { ...entry.info, status: e.status, secondary_status: e.secondary_status ?? entry.info.secondary_status };
        this.reconcile(entry);
        break;
      case 'waiting':
        for (const name of e.nodes ?? []) {
          this.node(entry, name);
        }
        break;
      case 'ssh-config':
        {
          // the nodes this job is known to have (node-connected names the others with their alias)
          const known = new Set([...entry.info.nodes, ...entry.nodes.keys()]);
          for (const alias of e.aliases) {
            const name = [...known].find((n) => formatSshAlias(job, n) === alias);
            if (name !== undefined) {
              this.node(entry, name).alias = alias;
            }
          }
        }
        break;
      case 'node-connected': {
        const node = this.node(entry, e.node);
        node.connected = true;
        if (e.alias) {
          node.alias = e.alias;
        }
        break;
      }
      case 'rank-ready': {
        const r = this.rank(entry, e.rank, e.node);
        r.localPort = e.local_port;
        r.remotePort = e.remote_port;
        r.detail = undefined;
        entry.forwarded.add(e.rank);
        if (e.code_dir) {
          this.node(entry, e.node).codeDir = e.code_dir;
        }
        if (!['attaching', 'attached', 'paused'].includes(r.state)) {
          r.state = e.state === 'waiting' ? 'waiting' : e.state === 'finished' ? 'finished' : 'listening';
        }
        break;
      }
      case 'rank-listening': {
        // its listener started on request (lazy ranks); it is forwarded next (rank-ready)
        const r = this.rank(entry, e.rank, e.node);
        r.remotePort = e.remote_port;
        break;
      }
      case 'rank-connected': {
        // PyCharm: the rank reached the IDE's debug server through its reverse tunnel
        const r = this.rank(entry, e.rank, e.node);
        if (r.state !== 'paused') {
          r.state = 'attached';
        }
        r.detail = undefined;
        break;
      }
      case 'ide-not-listening': {
        // PyCharm: the rank waits for the IDE's debug server to be started
        const r = this.rank(entry, e.rank, e.node);
        r.state = 'waiting';
        r.detail = e.message;
        break;
      }
      case 'rank-unavailable': {
        const r = this.rank(entry, e.rank, e.node);
        r.state = e.state === 'finished' ? 'finished' : 'unavailable';
        r.detail = [e.state, e.error].filter(Boolean).join(': ');
        r.localPort = undefined;
        break;
      }
      case 'ready':
        entry.attach = 'ready';
        break;
      case 'warning':
        entry.warning = e.message;
        break;
      case 'rank-failed': {
        const r = this.rank(entry, e.rank, e.node);
        r.state = 'failed';
        r.detail = `${e.held ? 'held after ' : ''}${e.error ?? 'uncaught exception'}`;
        r.waitingIn = undefined;
        if (e.held) {
          r.hold = { ...r.hold, heldFor: undefined, rootCause: e.root_cause === true || undefined, error: e.error ?? undefined };
        }
        break;
      }
      case 'rank-held': {
        // the gang's hold: paused where it was while rank held_for's failure is held (a debugger shows it paused)
        const r = this.rank(entry, e.rank, e.node);
        r.hold = { ...r.hold, heldFor: e.held_for, error: e.error ?? undefined };
        if (!SESSION_STATES.has(r.state)) {
          this.showHold(r);
        }
        break;
      }
      case 'all-stop':
        // which rank's stop paused the others (the view marks it)
        entry.allStop = { rank: e.rank, reason: e.reason };
        break;
      case 'all-paused':
        if (e.rank === null) {
          entry.allStop = undefined; // Pause All: no rank's stop did it
        }
        break;
      case 'group-action':
        entry.allStop = undefined;
        break;
      case 'rank-waiting': {
        const r = this.rank(entry, e.rank);
        r.waitingIn = e.action;
        break;
      }
      case 'tunnel-down':
        this.node(entry, e.node).connected = false;
        break;
      case 'reconnected':
        this.node(entry, e.node).connected = true;
        break;
      case 'rank-restarted': {
        // `remote-debug run` replaced the rank's process: its session (if any) ends, a rank-ready follows
        const r = this.rank(entry, e.rank, e.node);
        r.state = 'restarting';
        r.detail = `run ${e.run}`;
        entry.info = { ...notHolding(entry.info), run: Math.max(entry.info.run, e.run) };
        break;
      }
      case 'run-started':
        entry.info = { ...notHolding(entry.info), run: e.run };
        break;
      case 'job-ended':
        entry.info = {
          ...entry.info,
          status: e.status,
          secondary_status: e.status,
          exit_code: e.exit_code,
          failure_reason: e.failure_reason,
        };
        this.reconcile(entry);
        break;
      default:
        return; // nothing the view shows
    }
    this.changed();
  }

  // --- debug sessions ---------------------------------------------------------------------------

  setRankSession(job: string, rank: number, state: 'attaching' | 'attached' | 'paused' | 'detached', detail?: string): void {
    const entry = this.jobs.get(job);
    if (!entry) {
      return;
    }
    const r = this.rank(entry, rank);
    r.waitingIn = undefined; // it stopped, ran on or went: it no longer waits in native code
    if (state === 'detached' && r.state === 'restarting') {
      // the replaced process's session ended: the new process's rank-ready says what comes next
    } else if (state === 'detached') {
      if (r.hold) {
        // a held rank's post-mortem session ended: it still failed (or is still held with the one that did)
        this.showHold(r);
      } else if (r.state === 'failed') {
        // a failed rank stays failed, saying what it failed of
      } else if (!isRunning(entry.info)) {
        r.state = 'finished';
      } else if (r.state !== 'unavailable' && r.state !== 'finished') {
        r.state = entry.forwarded.has(rank) ? 'listening' : this.baseState(entry);
      }
      if (r.state !== 'failed' || r.hold) {
        r.detail = undefined;
      }
    } else {
      r.state = state;
      r.detail = detail;
    }
    this.changed();
  }

  /** Launched from this window with `--keep-alive`: Sync and Re-run can run it again before its nodes first hold. */
  markKeepAlive(job: string): void {
    const entry = this.jobs.get(job);
    if (entry && !entry.keepAlive) {
      entry.keepAlive = true;
      this.changed();
    }
  }

  /** A rank's session ended unexpectedly (true), or it was started again or is not wanted any more (false). */
  setRankLost(job: string, rank: number, lost: boolean): void {
    const r = this.rankEntry(job, rank);
    if (r && !!r.lost !== lost) {
      r.lost = lost || undefined;
      this.changed();
    }
  }

  /** The job was attached before a window reload (true) until it is attached again or forgotten (false). */
  setReattachable(job: string, reattachable: boolean): void {
    const entry = this.jobs.get(job);
    if (entry && !!entry.reattachable !== reattachable) {
      entry.reattachable = reattachable || undefined;
      this.changed();
    }
  }

  rankEntry(job: string, rank: number): RankEntry | undefined {
    const entry = this.jobs.get(job);
    for (const node of entry?.nodes.values() ?? []) {
      const r = node.ranks.get(rank);
      if (r) {
        return r;
      }
    }
    return undefined;
  }

  /** The ranks the view shows on a node, in order ([] when none are known yet). */
  nodeRanks(job: string, node: string): number[] {
    return [...(this.jobs.get(job)?.nodes.get(node)?.ranks.keys() ?? [])].sort((a, b) => a - b);
  }

  codeDir(job: string, node: string): string | undefined {
    return this.jobs.get(job)?.nodes.get(node)?.codeDir;
  }

  allRanks(job: string): RankEntry[] {
    const entry = this.jobs.get(job);
    if (!entry) {
      return [];
    }
    return [...entry.nodes.values()].flatMap((n) => [...n.ranks.values()]).sort((a, b) => a.rank - b.rank);
  }
}

/** "all", "*", "0, 2,3" or "0-3" -> undefined (all) or the sorted ranks (the CLI's grammar, ranks.ts); throws a one-line Error on bad input. */
export function parseRanks(text: string): number[] | undefined {
  return parseRankText(text);
}

/** The selection as `--ranks` takes it ("all", "0,2"). */
export function formatRanks(ranks: number[] | undefined): string {
  return ranks === undefined ? 'all' : ranks.join(',');
}
