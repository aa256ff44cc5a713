// What the remote-debug CLI prints with --json, as TypeScript types, and tolerant parsers for it.
//
// The CLI is the source of truth (remote_debug/cli/output.py and remote_debug/local/attach.py); the
// extension only reads.  Parsers never throw on a field they don't know: a newer CLI may add
// fields or events, and an older extension must keep working.

export interface JobInfo {
  name: string;
  backend: string; // "local" | "sagemaker" | ...
  status: string; // SageMaker's TrainingJobStatus: InProgress, Completed, Failed, Stopping, Stopped
  secondary_status: string; // Starting, Downloading, Training, ...
  nodes: string[];
  nproc_per_node: number;
  created: number;
  ended: number | null;
  exit_code: number | null;
  failure_reason: string | null;
  debuggable: boolean;
  source_dir: string | null;
  extra: {
    code_dirs?: Record<string, string>;
    logs?: Record<string, string>;
    [key: string]: unknown;
  };
}

export const TERMINAL_STATUSES = new Set(['Completed', 'Failed', 'Stopped']);

export function isRunning(job: Pick<JobInfo, 'status'>): boolean {
  return job.status === 'InProgress' || job.status === 'Stopping';
}

export class CliOutputError extends Error {}

function str(value: unknown, fallback = ''): string {
  return typeof value === 'string' ? value : fallback;
}

function num(value: unknown, fallback = 0): number {
  return typeof value === 'number' && Number.isFinite(value) ? value : fallback;
}

function strList(value: unknown): string[] {
  return Array.isArray(value) ? value.filter((v): v is string => typeof v === 'string') : [];
}

/** `remote-debug jobs --json` (and `launch`/`stop --json`, which print one job). */
export function parseJob(raw: unknown): JobInfo {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    throw new CliOutputError('expected a job object from the remote-debug CLI');
  }
  const o = raw as Record<string, unknown>;
  const name = str(o.name);
  if (!name) {
    throw new CliOutputError('a job from the remote-debug CLI has no name');
  }
  const extraRaw = typeof o.extra === 'object' && o.extra !== null ? (o.extra as Record<string, unknown>) : {};
  const extra: JobInfo['extra'] = { ...extraRaw };
  if (typeof extraRaw.code_dirs === 'object' && extraRaw.code_dirs !== null) {
    extra.code_dirs = Object.fromEntries(
      Object.entries(extraRaw.code_dirs as Record<string, unknown>).filter(
        (e): e is [string, string] => typeof e[1] === 'string',
      ),
    );
  } else {
    delete extra.code_dirs;
  }
  return {
    name,
    backend: str(o.backend, 'unknown'),
    status: str(o.status, 'Unknown'),
    secondary_status: str(o.secondary_status),
    nodes: strList(o.nodes),
    // 0: not known yet (a SageMaker job before its first rank reports)
    nproc_per_node: Math.max(0, Math.trunc(num(o.nproc_per_node, 1))),
    created: num(o.created),
    ended: typeof o.ended === 'number' ? o.ended : null,
    exit_code: typeof o.exit_code === 'number' ? o.exit_code : null,
    failure_reason: typeof o.failure_reason === 'string' ? o.failure_reason : null,
    debuggable: o.debuggable !== false,
    source_dir: typeof o.source_dir === 'string' ? o.source_dir : null,
    extra,
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

export interface JobStatusEvent { event: 'job-status'; job: string; status: string; secondary_status: string; message?: string }
export interface WaitingEvent { event: 'waiting'; what: string; nodes: string[] }
export interface SshConfigEvent { event: 'ssh-config'; aliases: string[]; config: string }
export interface NodeConnectedEvent { event: 'node-connected'; node: string; alias: string }
export interface RankReadyEvent {
  event: 'rank-ready';
  rank: number;
  node: string;
  local_port: number;
  remote_port: number;
  state: string;
  code_dir?: string; // not printed by every CLI version: the job's extra.code_dirs is the fallback
}
export interface RankUnavailableEvent {
  event: 'rank-unavailable';
  rank: number;
  node: string;
  state: string;
  error: string | null;
}
export interface LaunchJsonEvent { event: 'launch-json'; path: string; compound: string; configurations: string[] }
export interface ReadyEvent { event: 'ready'; ranks: number[] }
export interface RankAttachedEvent { event: 'rank-attached'; rank: number; node: string }
export interface RankDetachedEvent { event: 'rank-detached'; rank: number; node: string; error?: string }
export interface StoppedEvent { event: 'stopped'; rank: number; node: string; file?: string; line?: number; reason?: string }
export interface ReconnectedEvent { event: 'reconnected'; node: string }
export interface TunnelDownEvent { event: 'tunnel-down'; node: string; error: string }
export interface WarningEvent { event: 'warning'; message: string }
/** A rank died of an uncaught exception; `held`: it waits (--hold-on-failure) for a post-mortem debugger. */
export interface RankFailedEvent {
  event: 'rank-failed';
  rank: number;
  node: string;
  error: string | null;
  traceback?: string | null;
  held?: boolean;
}
export interface JobEndedEvent {
  event: 'job-ended';
  status: string;
  exit_code: number | null;
  failure_reason: string | null;
}
export interface LaunchedEvent { event: 'launched'; job: string; workspace: string; nodes: number; nproc_per_node: number }
export interface UnknownEvent { event: string; [key: string]: unknown }

export type AttachEvent =
  | JobStatusEvent
  | WaitingEvent
  | SshConfigEvent
  | NodeConnectedEvent
  | RankReadyEvent
  | RankUnavailableEvent
  | LaunchJsonEvent
  | ReadyEvent
  | RankAttachedEvent
  | RankDetachedEvent
  | StoppedEvent
  | ReconnectedEvent
  | TunnelDownEvent
  | WarningEvent
  | RankFailedEvent
  | JobEndedEvent
  | LaunchedEvent;

const REQUIRED: Record<string, Record<string, 'string' | 'number' | 'array'>> = {
  'job-status': { status: 'string' },
  waiting: { what: 'string' },
  'ssh-config': { aliases: 'array' },
  'node-connected': { node: 'string' },
  'rank-ready': { rank: 'number', node: 'string', local_port: 'number' },
  'rank-unavailable': { rank: 'number', node: 'string' },
  'launch-json': { path: 'string' },
  ready: { ranks: 'array' },
  'rank-attached': { rank: 'number' },
  'rank-detached': { rank: 'number' },
  stopped: { rank: 'number' },
  reconnected: { node: 'string' },
  'tunnel-down': { node: 'string' },
  warning: { message: 'string' },
  'rank-failed': { rank: 'number', node: 'string' },
  'job-ended': { status: 'string' },
  launched: { job: 'string' },
};

/**
 * One line of `remote-debug attach --json`.  Returns undefined for a line that is not a JSON
 * object with an "event" (the CLI may print other things) and for a known event missing a field
 * we rely on; an unknown event is returned as is, for the output channel.
 */
export function parseEventLine(line: string): AttachEvent | UnknownEvent | undefined {
  const text = line.trim();
  if (!text.startsWith('{')) {
    return undefined;
  }
  let data: unknown;
  try {
    data = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (typeof data !== 'object' || data === null || Array.isArray(data)) {
    return undefined;
  }
  const o = data as Record<string, unknown>;
  if (typeof o.event !== 'string') {
    return undefined;
  }
  const required = REQUIRED[o.event];
  if (!required) {
    return o as UnknownEvent;
  }
  for (const [key, kind] of Object.entries(required)) {
    const v = o[key];
    const ok = kind === 'array' ? Array.isArray(v) : typeof v === kind;
    if (!ok) {
      return undefined;
    }
  }
  return o as unknown as AttachEvent;
}

export function isKnownEvent(e: AttachEvent | UnknownEvent): e is AttachEvent {
  return e.event in REQUIRED;
}

/** A human line for the output channel (mirrors the CLI's own wording where it has one). */
export function describeEvent(e: AttachEvent | UnknownEvent): string {
  if (!isKnownEvent(e)) {
    return `${e.event}: ${JSON.stringify(e)}`;
  }
  switch (e.event) {
    case 'job-status':
      return `job ${e.job}: ${e.status} / ${e.secondary_status}${e.message ? `: ${e.message}` : ''}`;
    case 'waiting':
      return `waiting for ${e.what} to start: ${(e.nodes ?? []).join(', ')}`;
    case 'ssh-config':
      return `ssh entries written (${e.aliases.join(', ')})${e.aliases[0] ? `: try \`ssh ${e.aliases[0]}\`` : ''}`;
    case 'node-connected':
      return `connected to ${e.alias ?? e.node}`;
    case 'rank-ready':
      return `rank ${e.rank} on ${e.node}: debugger at 127.0.0.1:${e.local_port} (${e.state})`;
    case 'rank-unavailable':
      return `rank ${e.rank} on ${e.node} has no debugger (${e.state}${e.error ? `: ${e.error}` : ''})`;
    case 'launch-json':
      return `launch.json updated: ${e.path}`;
    case 'ready':
      return `ready: ranks ${e.ranks.join(', ') || '(none)'}`;
    case 'rank-attached':
      return `rank ${e.rank}: debugger attached`;
    case 'rank-detached':
      return `rank ${e.rank} detached${e.error ? `: ${e.error}` : ''}`;
    case 'stopped':
      return `rank ${e.rank} stopped at ${e.file}:${e.line} (${e.reason})`;
    case 'reconnected':
      return `reconnected to ${e.node}`;
    case 'tunnel-down':
      return `tunnel to ${e.node} is down, retrying: ${e.error}`;
    case 'warning':
      return `warning: ${e.message}`;
    case 'rank-failed':
      return (
        `rank ${e.rank} on ${e.node} failed: ${e.error ?? 'uncaught exception'}` +
        (e.held ? ' (held for a post-mortem: attach to see it stopped at the exception)' : '') +
        (e.traceback ? `\n${e.traceback.trimEnd()}` : '')
      );
    case 'job-ended':
      return `job ended: ${e.status}, exit code ${e.exit_code}${e.failure_reason ? ` (${e.failure_reason})` : ''}`;
    case 'launched':
      return `launched job ${e.job}`;
  }
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
