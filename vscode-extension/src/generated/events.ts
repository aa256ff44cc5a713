// Generated, do not edit: python -m remote_debug.laptop.wire.events_typescript
// Source: remote_debug/laptop/wire/events.py (the attach event stream), remote_debug.laptop.core.jobinfo.JobInfo.
/* eslint-disable */

export const EVENTS_VERSION = 1;

/** The VS Code configuration names, as remote_debug.laptop.ide.vscode_launch writes them. */
export const CONFIG_NAME_PREFIX_TEMPLATE = 'remote-debug: {job} ';
export const CONFIG_NAME_TEMPLATE = 'remote-debug: {job} rank {rank} ({node})';
export const COMPOUND_NAME_TEMPLATE = 'remote-debug: {job} all ranks';

function fill(template: string, values: Record<string, string | number>): string {
  return template.replace(/\{(\w+)\}/g, (whole: string, key: string) => (key in values ? String(values[key]) : whole));
}

export function formatConfigName(job: string, rank: number, node: string): string {
  return fill(CONFIG_NAME_TEMPLATE, { job, rank, node });
}

export function formatCompoundName(job: string): string {
  return fill(COMPOUND_NAME_TEMPLATE, { job });
}

export function formatConfigNamePrefix(job: string): string {
  return fill(CONFIG_NAME_PREFIX_TEMPLATE, { job });
}

// The closed sets of values (Python StrEnums).  A newer CLI may send a value not listed here: the
// parsers in ../events.ts keep it as is, and it compares equal to none of these.

/** Why an attach left a job that still runs. */
export type DetachReason = 'stops-done' | 'interrupted';

/** The IDE a job is debugged from; it decides the direction of the debug connection. */
export type IDE = 'vscode' | 'pycharm';

/** How the nodes of a job on this machine are kept apart. */
export type Isolation = 'netns' | 'loopback';

/** A job's status: SageMaker's TrainingJobStatus (local jobs mirror it); `secondary_status` adds the detail (Starting, Downloading, Training, ...). */
export type JobStatus = 'InProgress' | 'Completed' | 'Failed' | 'Stopping' | 'Stopped';

/** A rank document's `state`. */
export type RankState =
  | 'idle'
  | 'listening'
  | 'waiting'
  | 'attached'
  | 'running'
  | 'finished'
  | 'failed'
  | 'skipped'
  | 'held';

/** How the laptop's ssh reaches a node's sshd. */
export type Transport = 'local' | 'ssm' | 'hybrid' | 'direct';

/** A rank that died of an uncaught exception and is kept alive for a post-mortem debugger (`launch --hold-on-failure`): attach to it before `seconds_left` runs out. */
export interface HeldRank {
  rank: number;
  node: string;
  seconds_left: number | null;
  error: string | null;
}

/** A job of this machine (`launch --local`). */
export interface MachineJobDetails {
  job_dir: string;
  isolation: Isolation;
  node_netns: Record<string, string>;
  node_addresses: Record<string, string>;
}

/** One node's part of Synced. */
export interface NodeSynced {
  node: string;
  method: string;
  files: number;
  bytes: number;
  seconds: number;
}

/** One rank's headless session, in Summary (`file`/`line`/`variables`: its first stop). */
export interface RankSummary {
  rank: number;
  node: string;
  file: string | null;
  line: number | null;
  variables: Record<string, string>;
  stops: StopSummary[];
  error: string | null;
}

export interface SageMakerJobDetails {
  arn: string | null;
  region: string;
  transport: Transport;
  remote_debug_enabled: boolean;
  instance_type: string | null;
}

/** One stop of a rank, in Summary. */
export interface StopSummary {
  file: string;
  line: number;
  function: string;
  reason: string;
  variables: Record<string, string>;
}

/** `demo`: the example job was started. */
export interface LaunchedEvent {
  event: 'launched';
  v: number;
  job: string;
  workspace: string;
  nodes: number;
  nproc_per_node: number;
}

/** The platform is still starting the job (SageMaker: Starting -> Downloading -> Training). */
export interface JobStatusEvent {
  event: 'job-status';
  v: number;
  job: string;
  status: JobStatus;
  secondary_status: string;
  message: string;
}

export interface WaitingEvent {
  event: 'waiting';
  v: number;
  what: string;
  nodes: string[];
  seconds: number;
  detail: string;
}

export interface SshConfigEvent {
  event: 'ssh-config';
  v: number;
  aliases: string[];
  config: string;
}

export interface NodeConnectedEvent {
  event: 'node-connected';
  v: number;
  node: string;
  alias: string;
}

/** `--ide pycharm` with a real PyCharm: the build whose pydevd-pycharm the ranks must match. */
export interface PycharmBuildEvent {
  event: 'pycharm-build';
  v: number;
  build: string;
  source: string;
  others: string[];
  installed: string | null;
}

export interface PycharmConfigEvent {
  event: 'pycharm-config';
  v: number;
  path: string;
  name: string;
  port: number;
  steps: string[];
}

/** A lazy rank started its debug listener when asked through its control channel (PyCharm: the rank was asked to connect out to the IDE through `remote_port`, its node port; `detail` says how it went). */
export interface RankListeningEvent {
  event: 'rank-listening';
  v: number;
  rank: number;
  node: string;
  remote_port: number;
  detail: string | null;
}

/** A rank is forwarded: VS Code attaches to 127.0.0.1:local_port (PyCharm: the IDE port). */
export interface RankReadyEvent {
  event: 'rank-ready';
  v: number;
  rank: number;
  node: string;
  local_port: number;
  remote_port: number;
  state: RankState;
  ide: IDE;
  code_dir: string;
}

export interface RankUnavailableEvent {
  event: 'rank-unavailable';
  v: number;
  rank: number;
  node: string;
  state: RankState;
  error: string | null;
}

/** A rank's process-group timeout was raised, so a peer paused in a debugger does not time it out. */
export interface PauseSafeEvent {
  event: 'pause-safe';
  v: number;
  rank: number;
  node: string;
  detail: string | null;
}

export interface LaunchJsonEvent {
  event: 'launch-json';
  v: number;
  path: string;
  compound: string;
  configurations: string[];
}

export interface ReadyEvent {
  event: 'ready';
  v: number;
  ranks: number[];
}

/** PyCharm: a rank's reverse-forwarded connection reached the IDE's debug server. */
export interface RankConnectedEvent {
  event: 'rank-connected';
  v: number;
  rank: number;
  node: string;
  ide_port: number;
}

/** PyCharm: a rank connected, but nothing listens on the IDE port (said once per rank). */
export interface IdeNotListeningEvent {
  event: 'ide-not-listening';
  v: number;
  rank: number;
  node: string;
  message: string;
}

/** A headless debugger attached (`pydevd`: the rank's pydevd version, headless PyCharm only). */
export interface RankAttachedEvent {
  event: 'rank-attached';
  v: number;
  rank: number;
  node: string;
  pydevd: string | null;
}

/** Headless: a rank stopped at a breakpoint or after a step. */
export interface StoppedEvent {
  event: 'stopped';
  v: number;
  rank: number;
  node: string;
  file: string;
  line: number;
  function: string;
  reason: string;
  variables: Record<string, string>;
}

export interface RankDetachedEvent {
  event: 'rank-detached';
  v: number;
  rank: number;
  node: string;
  error: string | null;
}

/** A rank died of an uncaught exception; `held`: it waits (hold on failure) for a post-mortem debugger. */
export interface RankFailedEvent {
  event: 'rank-failed';
  v: number;
  rank: number;
  node: string;
  pid: number;
  error: string | null;
  traceback: string | null;
  held: boolean;
}

/** A rank's process was replaced (`remote-debug run` started the entry again): the old one's debug session ends, and a `rank-ready` for the new process follows on the same `local_port`. */
export interface RankRestartedEvent {
  event: 'rank-restarted';
  v: number;
  rank: number;
  node: string;
  pid: number;
  old_pid: number;
  run: number;
}

export interface ReconnectedEvent {
  event: 'reconnected';
  v: number;
  node: string;
}

export interface TunnelDownEvent {
  event: 'tunnel-down';
  v: number;
  node: string;
  error: string;
}

/** Something the user should know; `code` names the kind when a reader may act on it (`debugger-refused`), `rank`/`node` say where. */
export interface WarningEvent {
  event: 'warning';
  v: number;
  message: string;
  code: string | null;
  rank: number | null;
  node: string | null;
}

/** The attach ended and the job runs on (its debuggers detached, its tunnels closed); instead of `job-ended`. `status`: the job's status when known. */
export interface DetachedEvent {
  event: 'detached';
  v: number;
  job: string;
  reason: DetachReason;
  status: JobStatus | null;
}

export interface JobEndedEvent {
  event: 'job-ended';
  v: number;
  status: JobStatus;
  exit_code: number | null;
  failure_reason: string | null;
}

/** `attach --headless --json`: the last line, after `job-ended`. */
export interface SummaryEvent {
  event: 'summary';
  v: number;
  job: string;
  exit_code: number | null;
  ranks: RankSummary[];
}

/** `sync` copied the workspace into every node's code dir (`--watch`: once per change). */
export interface SyncedEvent {
  event: 'synced';
  v: number;
  job: string;
  source: string;
  files: number;
  bytes: number;
  seconds: number;
  nodes: NodeSynced[];
}

/** `run` started the entry (or the given command) again on every node. */
export interface RunStartedEvent {
  event: 'run-started';
  v: number;
  job: string;
  run: number;
  nodes: string[];
  command: string[];
  master_port: number | null;
}

/** A line the run printed; `rank` when a rank printed it (else the launcher). */
export interface RunOutputEvent {
  event: 'run-output';
  v: number;
  node: string;
  line: string;
  rank: number | null;
}

/** The run ended on every node (`exit_code`: the first non-zero node's, else 0); the nodes are kept. */
export interface RunEndedEvent {
  event: 'run-ended';
  v: number;
  job: string;
  run: number;
  exit_code: number;
  exit_codes: Record<string, number>;
  interrupted: boolean;
}

export interface JobInfo {
  name: string;
  backend: string;
  status: JobStatus;
  secondary_status: string;
  nodes: string[];
  nproc_per_node: number;
  created: number;
  ended: number | null;
  exit_code: number | null;
  failure_reason: string | null;
  debuggable: boolean;
  source_dir: string | null;
  why_not_debuggable: string | null;
  status_message: string;
  provisioning: boolean;
  code_dirs: Record<string, string>;
  logs: Record<string, string>;
  machine: MachineJobDetails | null;
  sagemaker: SageMakerJobDetails | null;
  held_ranks: HeldRank[];
  kept_alive_seconds_left: number | null;
  run: number;
}

export type AttachEvent =
  | LaunchedEvent
  | JobStatusEvent
  | WaitingEvent
  | SshConfigEvent
  | NodeConnectedEvent
  | PycharmBuildEvent
  | PycharmConfigEvent
  | RankListeningEvent
  | RankReadyEvent
  | RankUnavailableEvent
  | PauseSafeEvent
  | LaunchJsonEvent
  | ReadyEvent
  | RankConnectedEvent
  | IdeNotListeningEvent
  | RankAttachedEvent
  | StoppedEvent
  | RankDetachedEvent
  | RankFailedEvent
  | RankRestartedEvent
  | ReconnectedEvent
  | TunnelDownEvent
  | WarningEvent
  | DetachedEvent
  | JobEndedEvent
  | SummaryEvent
  | SyncedEvent
  | RunStartedEvent
  | RunOutputEvent
  | RunEndedEvent;

export type AttachEventName = AttachEvent['event'];

export const EVENT_NAMES: readonly AttachEventName[] = [
  'launched',
  'job-status',
  'waiting',
  'ssh-config',
  'node-connected',
  'pycharm-build',
  'pycharm-config',
  'rank-listening',
  'rank-ready',
  'rank-unavailable',
  'pause-safe',
  'launch-json',
  'ready',
  'rank-connected',
  'ide-not-listening',
  'rank-attached',
  'stopped',
  'rank-detached',
  'rank-failed',
  'rank-restarted',
  'reconnected',
  'tunnel-down',
  'warning',
  'detached',
  'job-ended',
  'summary',
  'synced',
  'run-started',
  'run-output',
  'run-ended',
];
