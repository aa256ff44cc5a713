// What the remote-debug CLI prints with --json, and tolerant parsers for it.
//
// The types are generated from the CLI's own definitions (remote_debug/laptop/wire/events.py and documents.py, and
// JobInfo in remote_debug/laptop/core/jobinfo.py) into ./generated/events.ts by tools/generate_wire.py:
// `npm run generate`, never by hand.  A
// field the extension reads that the CLI does not send is a type error.  The parsers never throw on what
// they don't know: a newer CLI may add fields or events, and an older extension must keep working.

import type {
  AttachEvent,
  AttachEventName,
  JobInfo,
  Isolation,
  JobStatus,
  Transport,
  MachineJobDetails,
  SageMakerJobDetails,
  GroupAction,
  HeldRank,
  RunOutputEvent,
  SyncedEvent,
} from './generated/events';
import { EVENTS_VERSION } from './generated/events';

export * from './generated/events';

export const TERMINAL_STATUSES: ReadonlySet<JobStatus> = new Set<JobStatus>(['Completed', 'Failed', 'Stopped']);

export function isRunning(job: Pick<JobInfo, 'status'>): boolean {
  return job.status === 'InProgress' || job.status === 'Stopping';
}

/** A running SageMaker job started without remote_debug: `adopt JOB` can make it debuggable. */
export function isAdoptableJob(info: JobInfo): boolean {
  return isRunning(info) && !info.debuggable && info.sagemaker !== null;
}

export class CliOutputError extends Error {}

function str(value: unknown, fallback = ''): string {
  return typeof value === 'string' ? value : fallback;
}

/**
 * A field of one of the generated closed sets (JobStatus, RankState, IDE, Transport, Isolation), as the CLI sent it.  Tolerant: a
 * newer CLI may send a value this extension does not know; it is kept as is, never refused nor replaced:
 * shown verbatim, and equal to none of the known values (a job status we do not know is neither running
 * nor terminal).  The field keeps its union type, so comparing it with a value the CLI never sends is a type
 * error.  Attach events get the same treatment: parseEventLine checks the kinds of the fields we rely on and
 * passes the values through.  `absent`: what a missing or non-string value reads as.
 */
function member<T extends string>(value: unknown, absent: string): T {
  return (typeof value === 'string' ? value : absent) as T;
}

function num(value: unknown, fallback = 0): number {
  return typeof value === 'number' && Number.isFinite(value) ? value : fallback;
}

function strList(value: unknown): string[] {
  return Array.isArray(value) ? value.filter((v): v is string => typeof v === 'string') : [];
}

function strMap(value: unknown): Record<string, string> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return {};
  }
  return Object.fromEntries(Object.entries(value as Record<string, unknown>).filter((e): e is [string, string] => typeof e[1] === 'string'));
}

function obj(value: unknown): Record<string, unknown> | undefined {
  return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : undefined;
}

function strOrNull(value: unknown): string | null {
  return typeof value === 'string' ? value : null;
}

function numOrNull(value: unknown): number | null {
  return typeof value === 'number' && Number.isFinite(value) ? value : null;
}

function machineDetails(value: unknown): MachineJobDetails | null {
  const o = obj(value);
  if (!o) {
    return null;
  }
  return {
    job_dir: str(o.job_dir),
    isolation: member<Isolation>(o.isolation, 'loopback'),
    node_netns: strMap(o.node_netns),
    node_addresses: strMap(o.node_addresses),
  };
}

function sagemakerDetails(value: unknown): SageMakerJobDetails | null {
  const o = obj(value);
  if (!o) {
    return null;
  }
  return {
    arn: strOrNull(o.arn),
    region: str(o.region),
    transport: member<Transport>(o.transport, 'ssm'),
    remote_debug_enabled: o.remote_debug_enabled === true,
    instance_type: strOrNull(o.instance_type),
  };
}

/** Ranks kept alive for a post-mortem debugger (absent from CLIs before it: none). */
function heldRanks(value: unknown): HeldRank[] {
  return (Array.isArray(value) ? value : []).flatMap((item) => {
    const o = obj(item);
    return o && typeof o.rank === 'number'
      ? [
          {
            rank: o.rank,
            node: str(o.node),
            seconds_left: numOrNull(o.seconds_left),
            error: strOrNull(o.error),
            root_cause: o.root_cause === true,
            held_for: numOrNull(o.held_for),
          },
        ]
      : [];
  });
}

/** `remote-debug jobs --json` (and `launch`/`stop --json`, which print one job). */
export function parseJob(raw: unknown): JobInfo {
  const o = obj(raw);
  if (!o) {
    throw new CliOutputError('expected a job object from the remote-debug CLI');
  }
  const name = str(o.name);
  if (!name) {
    throw new CliOutputError('a job from the remote-debug CLI has no name');
  }
  // CLIs before the typed JobInfo said code_dirs, logs and why_not_debuggable in a free-form "extra"
  const legacy = obj(o.extra) ?? {};
  return {
    name,
    backend: str(o.backend, 'unknown'),
    status: member<JobStatus>(o.status, 'Unknown'),
    secondary_status: str(o.secondary_status),
    nodes: strList(o.nodes),
    // 0: not known yet (a SageMaker job before its first rank reports)
    nproc_per_node: Math.max(0, Math.trunc(num(o.nproc_per_node, 1))),
    created: num(o.created),
    ended: numOrNull(o.ended),
    exit_code: numOrNull(o.exit_code),
    failure_reason: strOrNull(o.failure_reason),
    debuggable: o.debuggable !== false,
    source_dir: strOrNull(o.source_dir),
    why_not_debuggable: strOrNull(o.why_not_debuggable ?? legacy.why_not_debuggable),
    status_message: str(o.status_message ?? legacy.status_message),
    provisioning: (o.provisioning ?? legacy.provisioning) === true,
    code_dirs: strMap(o.code_dirs ?? legacy.code_dirs),
    logs: strMap(o.logs ?? legacy.logs),
    machine: machineDetails(o.machine),
    sagemaker: sagemakerDetails(o.sagemaker),
    held_ranks: heldRanks(o.held_ranks),
    // keep-alive (`launch --keep-alive`): absent from CLIs before it, read as "not kept alive, run 0"
    kept_alive_seconds_left: numOrNull(o.kept_alive_seconds_left),
    run: Math.max(0, Math.trunc(num(o.run, 0))),
  };
}

export function parseJobs(stdout: string): JobInfo[] {
  const data = parseJsonDocument(stdout);
  if (!Array.isArray(data)) {
    throw new CliOutputError('`remote-debug jobs --json` did not print a list');
  }
  return data.map(parseJob);
}

/** The last JSON document in a command's stdout (commands print one; stray lines before it are ignored). */
export function parseJsonDocument(stdout: string): unknown {
  const text = stdout.trim();
  if (!text) {
    throw new CliOutputError('the remote-debug CLI printed nothing');
  }
  try {
    return JSON.parse(text);
  } catch {
    const lines = text.split(/\r?\n/).filter((l) => l.trim());
    for (let i = lines.length - 1; i >= 0; i--) {
      try {
        return JSON.parse(lines[i]);
      } catch {
        // not JSON: keep looking upwards
      }
    }
    throw new CliOutputError(`the remote-debug CLI printed no JSON: ${firstLine(text)}`);
  }
}

export function firstLine(text: string): string {
  const line = text.split(/\r?\n/).find((l) => l.trim()) ?? '';
  return line.length > 300 ? `${line.slice(0, 297)}...` : line;
}

// --- attach events (JSON lines) -------------------------------------------------------------------
//
// Versions: every event carries `v` (EVENTS_VERSION of the CLI that printed it; events of CLIs from
// before the field are read as v 0).  A newer `v` is tolerated, not refused: the fields below that we
// rely on are checked on every line, an event whose checked fields no longer fit is dropped like any
// malformed line, and everything else is ignored.  The attach process says once in its output channel
// when the CLI speaks a newer version than this extension knows (see `newerVersion`).

/** An event this extension does not know (a newer CLI), kept for the output channel. */
export interface UnknownEvent { event: string; [key: string]: unknown }

type Kind = 'string' | 'number' | 'array' | 'boolean';
type EventNamed<K extends AttachEventName> = Extract<AttachEvent, { event: K }>;
/** Per event, the fields the extension relies on; a key the schema lacks is a type error. */
type Checked = { [K in AttachEventName]: { [F in Exclude<keyof EventNamed<K>, 'event' | 'v'>]?: Kind } };

const REQUIRED: Checked = {
  launched: { job: 'string' },
  'job-status': { status: 'string' },
  waiting: { what: 'string' },
  'ssh-config': { aliases: 'array' },
  'node-connected': { node: 'string' },
  'pycharm-build': { build: 'string' },
  'pycharm-config': { path: 'string' },
  'rank-listening': { rank: 'number', node: 'string' },
  'rank-ready': { rank: 'number', node: 'string', local_port: 'number' },
  'rank-unavailable': { rank: 'number', node: 'string' },
  'pause-safe': { rank: 'number', node: 'string' },
  'launch-json': { path: 'string' },
  ready: { ranks: 'array' },
  'rank-connected': { rank: 'number', node: 'string' },
  'ide-not-listening': { rank: 'number', node: 'string', message: 'string' },
  'rank-attached': { rank: 'number' },
  stopped: { rank: 'number' },
  logpoint: { rank: 'number', message: 'string' },
  'rank-output': { rank: 'number', line: 'string' },
  'rank-detached': { rank: 'number' },
  'rank-failed': { rank: 'number', node: 'string' },
  'rank-held': { rank: 'number', node: 'string', held_for: 'number' },
  'rank-restarted': { rank: 'number', node: 'string', run: 'number' },
  reconnected: { node: 'string' },
  'tunnel-down': { node: 'string' },
  warning: { message: 'string' },
  'breakpoints-missed': { breakpoints: 'array' },
  detached: { job: 'string', reason: 'string' },
  'job-ended': { status: 'string' },
  summary: { ranks: 'array' },
  // `sync --json` and `run --json`
  synced: { job: 'string', files: 'number', bytes: 'number' },
  'run-started': { job: 'string', run: 'number' },
  'run-output': { node: 'string', line: 'string' },
  'run-ended': { job: 'string', run: 'number', exit_code: 'number' },
  // all-stop and the group actions (laptop/attach/rank_group.py)
  'all-stop': { rank: 'number', reason: 'string', pausing: 'array' },
  'all-paused': { ranks: 'array', seconds: 'number' },
  'rank-waiting': { rank: 'number', action: 'string', seconds: 'number' },
  'group-action': { action: 'string', ranks: 'array' },
};

/** A line of the CLI's output that is one JSON object (an event, a listing problem); undefined for any other line. */
export function jsonObjectLine(line: string): Record<string, unknown> | undefined {
  const text = line.trim();
  if (!text.startsWith('{')) {
    return undefined;
  }
  try {
    return obj(JSON.parse(text));
  } catch {
    return undefined;
  }
}

/**
 * One line of `remote-debug attach --json`.  Returns undefined for a line that is not a JSON
 * object with an "event" (the CLI may print other things) and for a known event missing a field
 * we rely on; an unknown event is returned as is, for the output channel.
 */
export function parseEventLine(line: string): AttachEvent | UnknownEvent | undefined {
  const o = jsonObjectLine(line);
  if (!o || typeof o.event !== 'string') {
    return undefined;
  }
  const required = (REQUIRED as Record<string, Record<string, Kind | undefined>>)[o.event];
  if (!required || !Object.prototype.hasOwnProperty.call(REQUIRED, o.event)) {
    return o as UnknownEvent;
  }
  for (const [key, kind] of Object.entries(required)) {
    const v = o[key];
    const ok = kind === 'array' ? Array.isArray(v) : typeof v === kind;
    if (!ok) {
      return undefined;
    }
  }
  return { ...o, v: typeof o.v === 'number' ? o.v : 0 } as unknown as AttachEvent;
}

export function isKnownEvent(e: AttachEvent | UnknownEvent): e is AttachEvent {
  return Object.prototype.hasOwnProperty.call(REQUIRED, e.event);
}

/** The event's version when it is newer than this extension's EVENTS_VERSION, else undefined. */
export function newerVersion(e: AttachEvent | UnknownEvent): number | undefined {
  return typeof e.v === 'number' && e.v > EVENTS_VERSION ? e.v : undefined;
}

/**
 * A human line for the output channel: the CLI's own (`text`, worded once in remote_debug/laptop/wire/event_text.py,
 * also for an event this extension does not know); for an older CLI that sends none, a plain line of our own.
 */
export function describeEvent(e: AttachEvent | UnknownEvent): string {
  if (typeof e.text === 'string' && e.text) {
    return e.text;
  }
  if (!isKnownEvent(e)) {
    return `${e.event}: ${JSON.stringify(e)}`;
  }
  switch (e.event) {
    case 'job-status':
      return `job ${e.job}: ${e.status} / ${e.secondary_status}${e.message ? `: ${e.message}` : ''}`;
    case 'waiting': {
      const seconds = Math.round(e.seconds ?? 0);
      const soFar = seconds ? ` (${seconds} second${seconds === 1 ? '' : 's'} so far)` : '';
      const detail = e.detail ? `: looking for ${e.detail}` : '';
      return `waiting for ${e.what} to start: ${(e.nodes ?? []).join(', ') || 'none listed yet'}${soFar}${detail}`;
    }
    case 'ssh-config':
      return `ssh entries written (${e.aliases.join(', ')})${e.aliases[0] ? `: try \`ssh ${e.aliases[0]}\`` : ''}`;
    case 'node-connected':
      return `connected to ${e.alias ?? e.node}`;
    case 'pycharm-build':
      return `PyCharm build ${e.build} from ${e.source}`;
    case 'pycharm-config':
      return `PyCharm run configuration '${e.name}' (port ${e.port}) written to ${e.path}`;
    case 'rank-listening':
      return `rank ${e.rank} on ${e.node}: debugger listening on its port ${e.remote_port}${e.detail ? ` (${e.detail})` : ''}`;
    case 'rank-ready':
      return `rank ${e.rank} on ${e.node}: debugger at 127.0.0.1:${e.local_port} (${e.state})`;
    case 'rank-unavailable':
      return `rank ${e.rank} on ${e.node} has no debugger (${e.state}${e.error ? `: ${e.error}` : ''})`;
    case 'pause-safe':
      return `rank ${e.rank} on ${e.node}: pause-safe${e.detail ? ` (${e.detail})` : ''}`;
    case 'launch-json':
      return `launch.json updated: ${e.path}`;
    case 'ready':
      return `ready: ranks ${e.ranks.join(', ') || '(none)'}`;
    case 'rank-connected':
      return `rank ${e.rank} on ${e.node}: connected to PyCharm's debug server`;
    case 'ide-not-listening':
      return `rank ${e.rank} on ${e.node} is waiting: ${e.message}`;
    case 'rank-attached':
      return `rank ${e.rank}: debugger attached`;
    case 'rank-detached':
      return `rank ${e.rank} detached${e.error ? `: ${e.error}` : ''}`;
    case 'stopped':
      return `rank ${e.rank} stopped at ${e.file}:${e.line} (${e.reason})`;
    case 'logpoint':
      return `[rank ${e.rank}] ${e.message}`;
    case 'rank-output':
      return `[rank ${e.rank}] ${e.line}`;
    case 'reconnected':
      return `reconnected to ${e.node}`;
    case 'tunnel-down':
      return `tunnel to ${e.node} is down, retrying: ${e.error}`;
    case 'warning':
      return `warning: ${e.message}`;
    case 'breakpoints-missed':
      return `no rank stopped at a breakpoint: ${e.breakpoints.join(', ')} never hit`;
    case 'rank-failed':
      return (
        `rank ${e.rank} on ${e.node} failed: ${e.error ?? 'uncaught exception'}` +
        (e.held ? ' (held for a post-mortem: attach to see it stopped at the exception)' : '') +
        (e.traceback ? `\n${e.traceback.trimEnd()}` : '')
      );
    case 'rank-held':
      return `rank ${e.rank} on ${e.node} held with rank ${e.held_for}, which failed: paused where it was`;
    case 'detached':
      return `detached (${e.reason === 'interrupted' ? 'Ctrl-C' : 'every rank had its stops'}): job ${e.job} keeps running`;
    case 'job-ended':
      return `job ended: ${e.status}, exit code ${e.exit_code}${e.failure_reason ? ` (${e.failure_reason})` : ''}`;
    case 'launched':
      return `launched job ${e.job}`;
    case 'summary':
      return `summary: ${e.ranks.length} rank(s), exit code ${e.exit_code}`;
    case 'rank-restarted':
      return `rank ${e.rank} on ${e.node} restarted (run ${e.run}): pid ${e.old_pid} -> ${e.pid}`;
    case 'synced':
      return describeSynced(e);
    case 'run-started':
      return `run ${e.run} of ${e.job} started on ${(e.nodes ?? []).join(', ') || 'its nodes'}${e.command?.length ? `: ${e.command.join(' ')}` : ''}`;
    case 'run-output':
      return runOutputLine(e);
    case 'run-ended':
      return `run ${e.run} of ${e.job} ${e.interrupted ? 'was interrupted' : 'ended'}: exit code ${e.exit_code}`;
    case 'all-stop':
      return e.pausing.length
        ? `rank ${e.rank} stopped (${e.reason}): pausing ${e.pausing.join(', ')} (all-stop)`
        : `rank ${e.rank} stopped (${e.reason}); every other rank is stopped already`;
    case 'all-paused':
      return `all ${plural(e.ranks.length, 'rank')} paused, ${e.seconds.toFixed(2)} s after ${e.rank === null ? 'Pause All' : `rank ${e.rank} stopped`}`;
    case 'rank-waiting':
      return (
        `rank ${e.rank} has not ${e.action === 'pause' ? 'paused' : 'finished its step'} after ${e.seconds.toFixed(1)} s: ` +
        'it is in native code (a collective waiting for paused ranks, or I/O) and stops when it returns to Python'
      );
    case 'group-action':
      return `${GROUP_ACTION_TITLES[e.action] ?? e.action} (${e.origin}): ${e.ranks.length ? e.ranks.join(', ') : 'no rank (none is in that state)'}`;
  }
}

/** What each group action is called in the UI (the CLI's words, remote_debug/laptop/wire/event_text.py). */
export const GROUP_ACTION_TITLES: Record<GroupAction, string> = {
  continue: 'Continue All',
  pause: 'Pause All',
  step: 'Step Over All',
  detach: 'Detach All',
};

function plural(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? '' : 's'}`;
}

/**
 * The CLI's own line (remote_debug/cli/sync.py synced_line): `synced 3 files (12.4 kB) to 2 nodes in 0.41 s
 * (rsync)`, counted per node when every node got the same, else the totals with each node's part.
 */
export function describeSynced(e: Pick<SyncedEvent, 'files' | 'bytes' | 'seconds' | 'nodes'>): string {
  const nodes = (Array.isArray(e.nodes) ? e.nodes : []).filter((n) => n && typeof n === 'object');
  const methods = [...new Set(nodes.map((n) => String(n.method)))].sort().join(', ');
  const counts = new Set(nodes.map((n) => `${n.files}/${n.bytes}`));
  let what: string;
  if (counts.size <= 1) {
    const [files, bytes] = nodes.length ? [nodes[0].files, nodes[0].bytes] : [0, 0];
    what = `${plural(files, 'file')} (${formatBytes(bytes)})`;
  } else {
    const parts = nodes.map((n) => `${n.node}: ${plural(n.files, 'file')}, ${formatBytes(n.bytes)}`).join('; ');
    what = `${plural(e.files, 'file')} (${formatBytes(e.bytes)}: ${parts})`;
  }
  const seconds = typeof e.seconds === 'number' ? e.seconds : 0;
  return `synced ${what} to ${plural(nodes.length, 'node')} in ${seconds.toFixed(2)} s${methods ? ` (${methods})` : ''}`;
}

/** A run's output line as the output channel shows it: `[rank 1] loss 0.3`, the launcher's as `[algo-1] ...`. */
export function runOutputLine(e: Pick<RunOutputEvent, 'node' | 'rank' | 'line'>): string {
  const who = typeof e.rank === 'number' ? `rank ${e.rank}` : e.node;
  return `[${who}] ${e.line}`;
}

export function formatBytes(bytes: number): string {
  if (!Number.isFinite(bytes) || bytes < 1000) {
    return `${Number.isFinite(bytes) ? bytes : 0} B`;
  }
  const units = ['kB', 'MB', 'GB', 'TB'];
  let value = bytes;
  let unit = 'B';
  for (const u of units) {
    if (value < 1000) {
      break;
    }
    value /= 1000;
    unit = u;
  }
  return `${value.toFixed(1)} ${unit}`;
}

/** The one `synced` event `sync --json` prints (stray lines before it are ignored). */
export function parseSynced(stdout: string): SyncedEvent {
  const data = parseJsonDocument(stdout);
  const o = obj(data);
  if (!o || o.event !== 'synced') {
    throw new CliOutputError('`remote-debug sync --json` did not print a "synced" event');
  }
  const e = parseEventLine(JSON.stringify(o));
  if (!e || e.event !== 'synced') {
    throw new CliOutputError('`remote-debug sync --json` printed a "synced" event without its counts');
  }
  return e as SyncedEvent;
}

/** Splits a byte stream into lines; keeps the unfinished tail for the next chunk. */
export class LineSplitter {
  private buffer = '';

  push(chunk: string): string[] {
    this.buffer += chunk;
    const parts = this.buffer.split(/\r?\n/);
    this.buffer = parts.pop() ?? '';
    return parts;
  }

  flush(): string[] {
    const rest = this.buffer;
    this.buffer = '';
    return rest ? [rest] : [];
  }
}
