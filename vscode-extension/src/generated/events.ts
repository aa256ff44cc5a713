// Generated, do not edit: python tools/generate_wire.py (npm run generate)
// Source: remote_debug/laptop/wire/events.py (the attach event stream),
//   remote_debug.laptop.core.jobinfo.JobInfo,
//   remote_debug.laptop.wire.documents.VersionInfo,
//   remote_debug.laptop.wire.documents.ListingProblem,
//   remote_debug.laptop.wire.documents.SshConfigWritten,
//   remote_debug.laptop.wire.documents.SshConfigPreview,
//   remote_debug.laptop.wire.documents.SshJobEntriesRemoved,
//   remote_debug.laptop.wire.documents.SshEntriesRemoved,
//   remote_debug.laptop.wire.documents.Released,
//   remote_debug.laptop.wire.documents.StacksReport,
//   remote_debug.laptop.wire.documents.DoctorReport,
//   remote_debug.laptop.wire.documents.EnableReport,
//   remote_debug.laptop.wire.documents.CleanupReport,
//   remote_debug.laptop.wire.documents.EmulatorStarted,
//   remote_debug.laptop.wire.documents.GroupReply,
//   remote_debug.laptop.adopt.candidates.Candidate,
//   remote_debug.laptop.adopt.local_job.AdoptOutcome.
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

/** A node's ssh Host alias, as remote_debug.laptop.connection.ssh_config writes it. */
export const SSH_ALIAS_TEMPLATE = '{node}.{job}';

export function formatSshAlias(job: string, node: string): string {
  return fill(SSH_ALIAS_TEMPLATE, { job, node });
}

// The closed sets of values (Python StrEnums).  A newer CLI may send a value not listed here: the
// parsers in ../events.ts keep it as is, and it compares equal to none of these.

/** Why an attach left a job that still runs. */
export type DetachReason = 'stops-done' | 'interrupted';

/** What one action does to every rank a debugger is attached to (`remote-debug ranks ACTION JOB`). */
export type GroupAction = 'continue' | 'pause' | 'step' | 'detach';

/** How the nodes of a job on this machine are kept apart. */
export type Isolation = 'netns' | 'loopback';

/** A job's status: SageMaker's TrainingJobStatus (local jobs mirror it); `secondary_status` adds the detail (Starting, Downloading, Training, ...). */
export type JobStatus = 'InProgress' | 'Completed' | 'Failed' | 'Stopping' | 'Stopped';

/** Why a backend's jobs were not listed; all but `unreachable` and `error` are fixed with credentials, a profile or a region. */
export type ListingProblemKind =
  | 'no-credentials'
  | 'sso-expired'
  | 'profile-not-found'
  | 'no-region'
  | 'access-denied'
  | 'unreachable'
  | 'error';

/** What every selected rank of a job runs, which decides the direction of the debug connection. Which editor the laptop serves (and which of its files an attach writes) is the laptop's business (`laptop/ide/editor.py`): any DAP client can debug a DEBUGPY rank, any pydevd server a PYDEVD one. The values are the strings the spec (`REMOTE_DEBUG_IDE`) and the rank documents (`"ide"`) have always carried, named after the first editor of each kind: an older hook or laptop knows only those. */
export type RankDebugger = 'vscode' | 'pycharm';

/** Where a rank of an attach's group is. */
export type RankPhase = 'running' | 'stopped' | 'pausing' | 'stepping';

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

export interface AdoptedRank {
  rank: number;
  pid: number;
  node: string;
  state: string;
  note: string | null;
}

/** One check of `doctor`: `status` is ok, warn, fail or skip; `fix` the command or step that helps. */
export interface DoctorCheck {
  name: string;
  status: string;
  detail: string;
  fix: string;
  data: Record<string, unknown>;
}

/** A rank that died of an uncaught exception and is kept alive for a post-mortem debugger (`launch --hold-on-failure`): attach to it before `seconds_left` runs out. */
export interface HeldRank {
  rank: number;
  node: string;
  seconds_left: number | null;
  error: string | null;
  root_cause: boolean;
  held_for: number | null;
}

/** One thing the hybrid transport left in AWS: `id` an activation id, an `mi-` id or an `s3://` URI. */
export interface LeftoverItem {
  kind: string;
  id: string;
  job: string;
  why: string;
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

export interface RankInGroup {
  rank: number;
  phase: RankPhase;
  reason: string;
  by_group: boolean;
}

/** One rank's threads (`source`: "control", its control channel, or "py-spy"); `error`: it could not be read. */
export interface RankStacks {
  control_error?: string;
  blocked_in_native?: boolean;
  nonblocking?: boolean;
  dump_seconds?: number;
  root_cause?: boolean;
  held_for?: number;
  collectives?: GroupCollectives[];
  rank: number;
  node: string | null;
  pid: number;
  state: string | null;
  hold_seconds_left: number | null;
  source: string;
  threads: StackThread[];
  error: string | null;
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

/** A SageMaker training job. */
export interface SageMakerJobDetails {
  arn: string | null;
  region: string;
  transport: Transport;
  remote_debug_enabled: boolean;
  instance_type: string | null;
}

/** One job's entries, in SshEntriesRemoved. */
export interface SshEntries {
  job: string;
  aliases: string[];
  known_hosts: number;
}

/** Ranks whose stacks are the same (`stacks`' hang view), in the order printed: the odd ones first. `frames`: the class's thread (the main one), outermost first; `summary`: the call path as the header line prints it (innermost frame first); `blocked_in_native`: None when not known (a control channel's reading says True only for a wait in a torch.distributed collective); `error`: why these ranks could not be read; `exception`: a rank held for a post-mortem, what it raised (`frames`: where). */
export interface StackClass {
  ranks: number[];
  ranges: string;
  count: number;
  thread: string | null;
  frames: StackFrame[];
  summary: string;
  blocked_in_native: boolean | null;
  error: string | null;
  exception: string | null;
  root_cause: boolean;
  in_debugger: boolean;
}

/** A collective some members of its process group entered and others never did (Flight Recorder). */
export interface StuckCollective {
  group: string;
  desc: string | null;
  seq: number;
  op: string | null;
  entered: number[];
  missing: number[];
  unknown: number[];
  summary: string;
}

/** One process group of a rank as its PyTorch Flight Recorder saw it (the job has it on). */
export interface GroupCollectives {
  group: string;
  desc: string | null;
  ranks: number[] | null;
  last_entered: number;
  last_completed: number | null;
  op: string | null;
}

export interface StackFrame {
  file: string;
  line: number;
  function: string;
}

/** One thread's stack, outermost frame first; `exception`: a rank held for a post-mortem, where it raised. */
export interface StackThread {
  main?: boolean;
  os_id?: number | null;
  active?: boolean | null;
  owns_gil?: boolean | null;
  name: string;
  frames: StackFrame[];
  exception: string | null;
  internal: boolean;
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
  text?: string;
  job: string;
  workspace: string;
  nodes: number;
  nproc_per_node: number;
}

/** The platform is still starting the job (SageMaker: Starting -> Downloading -> Training). */
export interface JobStatusEvent {
  event: 'job-status';
  v: number;
  text?: string;
  job: string;
  status: JobStatus;
  secondary_status: string;
  message: string;
}

export interface WaitingEvent {
  event: 'waiting';
  v: number;
  text?: string;
  what: string;
  nodes: string[];
  seconds: number;
  detail: string;
}

export interface SshConfigEvent {
  event: 'ssh-config';
  v: number;
  text?: string;
  aliases: string[];
  config: string;
}

export interface NodeConnectedEvent {
  event: 'node-connected';
  v: number;
  text?: string;
  node: string;
  alias: string;
}

/** `--ide pycharm` with a real PyCharm: the build whose pydevd-pycharm the ranks must match. */
export interface PycharmBuildEvent {
  event: 'pycharm-build';
  v: number;
  text?: string;
  build: string;
  source: string;
  others: string[];
  installed: string | null;
}

export interface PycharmConfigEvent {
  event: 'pycharm-config';
  v: number;
  text?: string;
  path: string;
  name: string;
  port: number;
  steps: string[];
}

/** A lazy rank started its debug listener when asked through its control channel (PyCharm: the rank was asked to connect out to the IDE through `remote_port`, its node port; `detail` says how it went). */
export interface RankListeningEvent {
  event: 'rank-listening';
  v: number;
  text?: string;
  rank: number;
  node: string;
  remote_port: number;
  detail: string | null;
}

/** A rank is forwarded: VS Code attaches to 127.0.0.1:local_port (PyCharm: the IDE port). */
export interface RankReadyEvent {
  event: 'rank-ready';
  v: number;
  text?: string;
  rank: number;
  node: string;
  local_port: number;
  remote_port: number;
  state: RankState;
  ide: RankDebugger;
  code_dir: string;
}

export interface RankUnavailableEvent {
  event: 'rank-unavailable';
  v: number;
  text?: string;
  rank: number;
  node: string;
  state: RankState;
  error: string | null;
}

/** A rank's process-group timeout was raised, so a peer paused in a debugger does not time it out. */
export interface PauseSafeEvent {
  event: 'pause-safe';
  v: number;
  text?: string;
  rank: number;
  node: string;
  detail: string | null;
}

export interface LaunchJsonEvent {
  event: 'launch-json';
  v: number;
  text?: string;
  path: string;
  compound: string;
  configurations: string[];
}

export interface ReadyEvent {
  event: 'ready';
  v: number;
  text?: string;
  ranks: number[];
}

/** PyCharm: a rank's reverse-forwarded connection reached the IDE's debug server. */
export interface RankConnectedEvent {
  event: 'rank-connected';
  v: number;
  text?: string;
  rank: number;
  node: string;
  ide_port: number;
}

/** PyCharm: a rank connected, but nothing listens on the IDE port (said once per rank). */
export interface IdeNotListeningEvent {
  event: 'ide-not-listening';
  v: number;
  text?: string;
  rank: number;
  node: string;
  message: string;
}

/** A headless debugger attached (`pydevd`: the rank's pydevd version, headless PyCharm only). */
export interface RankAttachedEvent {
  event: 'rank-attached';
  v: number;
  text?: string;
  rank: number;
  node: string;
  pydevd: string | null;
}

/** Headless: a rank stopped at a breakpoint or after a step. */
export interface StoppedEvent {
  event: 'stopped';
  v: number;
  text?: string;
  rank: number;
  node: string;
  file: string;
  line: number;
  function: string;
  reason: string;
  variables: Record<string, string>;
}

/** Headless (`--log FILE:LINE:MESSAGE`): a rank passed a logpoint, which printed `message` (its `{expr}` replaced by their values) without stopping it; `file` is the local path the logpoint was set in. */
export interface LogpointHitEvent {
  event: 'logpoint';
  v: number;
  text?: string;
  rank: number;
  node: string;
  file: string;
  line: number;
  message: string;
}

/** Headless (`--show-output`): a line a rank printed while the debugger was attached (`stream`: DAP's output category, `stdout` or `stderr`). */
export interface RankPrintedEvent {
  event: 'rank-output';
  v: number;
  text?: string;
  rank: number;
  node: string;
  line: string;
  stream: string;
}

export interface RankDetachedEvent {
  event: 'rank-detached';
  v: number;
  text?: string;
  rank: number;
  node: string;
  error: string | null;
}

/** A rank died of an uncaught exception; `held`: it waits (hold on failure) for a post-mortem debugger; `root_cause`: its failure came first in the job (torchelastic's "root cause": the others' follow from it), reported before the others'. */
export interface RankFailedEvent {
  event: 'rank-failed';
  v: number;
  text?: string;
  rank: number;
  node: string;
  pid: number;
  error: string | null;
  traceback: string | null;
  held: boolean;
  root_cause: boolean;
}

/** Hold on failure, the whole gang: rank `held_for` failed (its `rank-failed` comes first), and this rank is held with it, paused where it was, until that rank's hold ends; `error`: that rank's exception line. */
export interface RankHeldEvent {
  event: 'rank-held';
  v: number;
  text?: string;
  rank: number;
  node: string;
  pid: number;
  held_for: number;
  error: string | null;
}

/** A rank's process was replaced (`remote-debug run` started the entry again): the old one's debug session ends, and a `rank-ready` for the new process follows on the same `local_port`. */
export interface RankRestartedEvent {
  event: 'rank-restarted';
  v: number;
  text?: string;
  rank: number;
  node: string;
  pid: number;
  old_pid: number;
  run: number;
}

export interface ReconnectedEvent {
  event: 'reconnected';
  v: number;
  text?: string;
  node: string;
}

export interface TunnelDownEvent {
  event: 'tunnel-down';
  v: number;
  text?: string;
  node: string;
  error: string;
}

/** Something the user should know; `code` names the kind when a reader may act on it (`debugger-refused`), `rank`/`node` say where. */
export interface WarningEvent {
  event: 'warning';
  v: number;
  text?: string;
  message: string;
  code: string | null;
  rank: number | null;
  node: string | null;
}

/** `attach --headless --break`: no rank stopped at a breakpoint (a wrong line or file, code that does not run there): `breakpoints` as `FILE:LINE` (relative to the workspace when in it), `ranks` the ranks that were debugged. The attach then exits 1. */
export interface BreakpointsMissedEvent {
  event: 'breakpoints-missed';
  v: number;
  text?: string;
  breakpoints: string[];
  ranks: number[];
}

/** The attach ended and the job runs on (its debuggers detached, its tunnels closed); instead of `job-ended`. `status`: the job's status when known. */
export interface DetachedEvent {
  event: 'detached';
  v: number;
  text?: string;
  job: string;
  reason: DetachReason;
  status: JobStatus | null;
}

export interface JobEndedEvent {
  event: 'job-ended';
  v: number;
  text?: string;
  status: JobStatus;
  exit_code: number | null;
  failure_reason: string | null;
}

/** `attach --headless --json`: the last line, after `job-ended`. */
export interface SummaryEvent {
  event: 'summary';
  v: number;
  text?: string;
  job: string;
  exit_code: number | null;
  ranks: RankSummary[];
}

/** `sync` copied the workspace into every node's code dir (`--watch`: once per change). */
export interface SyncedEvent {
  event: 'synced';
  v: number;
  text?: string;
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
  text?: string;
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
  text?: string;
  node: string;
  line: string;
  rank: number | null;
}

/** The run ended on every node (`exit_code`: the first non-zero node's, else 0); the nodes are kept. */
export interface RunEndedEvent {
  event: 'run-ended';
  v: number;
  text?: string;
  job: string;
  run: number;
  exit_code: number;
  exit_codes: Record<string, number>;
  interrupted: boolean;
}

/** A rank stopped (`reason`: DAP's, e.g. "breakpoint", "exception", "pause", "step") and all-stop pauses every other rank that runs: `pausing`. */
export interface AllStopEvent {
  event: 'all-stop';
  v: number;
  text?: string;
  rank: number;
  reason: string;
  pausing: number[];
}

/** Every rank a debugger is attached to is stopped now, `seconds` after `rank` stopped first (None: after Pause All). */
export interface AllPausedEvent {
  event: 'all-paused';
  v: number;
  text?: string;
  rank: number | null;
  ranks: number[];
  seconds: number;
}

/** A rank asked to pause (or to step) has not stopped after `seconds`: it runs native code (a collective waiting for paused ranks, I/O) and stops when it returns to Python. */
export interface RankWaitingEvent {
  event: 'rank-waiting';
  v: number;
  text?: string;
  rank: number;
  action: GroupAction;
  seconds: number;
}

/** A group action reached `ranks`; `origin`: who asked ("rank 0" when all-stop followed one rank's Continue, else "remote-debug ranks"). */
export interface GroupActedEvent {
  event: 'group-action';
  v: number;
  text?: string;
  action: GroupAction;
  ranks: number[];
  origin: string;
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

/** `version --json`: the extension checks a minimum version and upgrades with `python` (`sys.executable`). */
export interface VersionInfo {
  version: string;
  distribution: string;
  python: string;
  events_version: number;
}

/** `jobs --json` keeps stdout the jobs it could list; for each backend it could not, stderr gets this. */
export interface ListingProblem {
  unlisted: string;
  problem: ListingProblemKind;
  message: string;
  fix: string | null;
  profile: string | null;
  region: string | null;
}

/** `ssh-config JOB --json`: the Host entries were written (`aliases`: one per node, `format_ssh_alias`). */
export interface SshConfigWritten {
  aliases: string[];
  config: string;
  user_config: string;
  user_config_changed: boolean;
}

/** `ssh-config JOB --dry-run --json`: what would be written. */
export interface SshConfigPreview {
  aliases: string[];
  dry_run: boolean;
  user_config_diff: string;
  job_config: string;
}

/** `ssh-config JOB --remove --json`: one job's entries are gone (`dry_run`: would be). */
export interface SshJobEntriesRemoved {
  removed_job: string;
  aliases: string[];
  known_hosts: number;
  dry_run: boolean;
}

/** `ssh-config --remove --json`: every job's entries and our Include line in ~/.ssh/config are gone. */
export interface SshEntriesRemoved {
  removed_jobs: SshEntries[];
  restored: string;
  changed: boolean;
  dry_run: boolean;
  user_config_diff: string;
}

/** `release JOB --json`: the kept-alive job's nodes end now. */
export interface Released {
  job: string;
  released: string[];
}

/** `stacks --json`: every selected rank (`ranks`: in rank order, the flat form), and the same ranks grouped by stack (`classes`). */
export interface StacksReport {
  pid?: number;
  source?: string;
  code_dirs?: Record<string, string>;
  classes?: StackClass[];
  collectives?: StuckCollective[];
  job: string | null;
  ranks: RankStacks[];
}

/** `doctor --json` (exit code 1 when not `ok`). */
export interface DoctorReport {
  ok: boolean;
  checks: DoctorCheck[];
}

/** `enable JOB --json`: SageMaker's native remote debugging on a running job. */
export interface EnableReport {
  job: string;
  updated: boolean;
  status: string;
  secondary_status: string;
  has_spec: boolean;
  claimed: boolean;
  region: string;
  region_source: string;
}

/** `cleanup --json`: what the caller's hybrid jobs left behind, and whether it was deleted. */
export interface CleanupReport {
  region: string;
  owner: string;
  days: number;
  deleted: boolean;
  leftovers: LeftoverItem[];
}

/** `emulator --json`: where the emulator listens, and the access key it made at this start. */
export interface EmulatorStarted {
  endpoint_url: string;
  region: string;
  state: string;
  access_key_id: string;
  secret_access_key: string;
}

/** `ranks ACTION JOB --json`: what the action reached, in every running attach of the job. */
export interface GroupReply {
  job: string;
  action: string;
  attaches: number;
  ranks: number[];
  status: RankInGroup[];
}

export interface AdoptCandidate {
  pid: number;
  command: string;
  cwd: string;
  kind: string;
  ranks: number;
  python: string | null;
  adoptable: boolean;
  reason: string | null;
  job: string | null;
}

/** What `adopt --json` prints. */
export interface AdoptOutcome {
  job: string;
  already: boolean;
  nodes: string[];
  ranks: AdoptedRank[];
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
  | LogpointHitEvent
  | RankPrintedEvent
  | RankDetachedEvent
  | RankFailedEvent
  | RankHeldEvent
  | RankRestartedEvent
  | ReconnectedEvent
  | TunnelDownEvent
  | WarningEvent
  | BreakpointsMissedEvent
  | DetachedEvent
  | JobEndedEvent
  | SummaryEvent
  | SyncedEvent
  | RunStartedEvent
  | RunOutputEvent
  | RunEndedEvent
  | AllStopEvent
  | AllPausedEvent
  | RankWaitingEvent
  | GroupActedEvent;

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
  'logpoint',
  'rank-output',
  'rank-detached',
  'rank-failed',
  'rank-held',
  'rank-restarted',
  'reconnected',
  'tunnel-down',
  'warning',
  'breakpoints-missed',
  'detached',
  'job-ended',
  'summary',
  'synced',
  'run-started',
  'run-output',
  'run-ended',
  'all-stop',
  'all-paused',
  'rank-waiting',
  'group-action',
];
