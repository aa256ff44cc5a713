// Per-rank attach configurations, for the Python extension's `debugpy` type or our own type.
//
// Pure (no vscode import): the same code runs in the unit tests.

import { formatCompoundName, formatConfigName } from './generated/events';

export const OWN_DEBUG_TYPE = 'remote-debug';
export const PYTHON_DEBUGGER_EXTENSIONS = ['ms-python.debugpy', 'ms-python.python'];
/** Where SageMaker's training toolkit puts the code when the CLI does not tell us. */
export const DEFAULT_REMOTE_ROOT = '/opt/ml/code';

export type DebugTypeSetting = 'auto' | 'debugpy' | 'remote-debug';

export interface PathMapping {
  localRoot: string;
  remoteRoot: string;
}

/** What we tag our configurations with, to recognise our sessions later. */
export interface RankTag {
  job: string;
  rank: number;
  node: string;
}

export interface RankDebugConfiguration {
  type: string;
  name: string;
  request: 'attach';
  connect: { host: string; port: number };
  pathMappings: PathMapping[];
  justMyCode: boolean;
  /** debugpy sends what the rank prints to its Debug Console (`output` events), live while attached. */
  redirectOutput: boolean;
  remoteDebug: RankTag;
  [key: string]: unknown;
}

export function resolveDebugType(setting: string | undefined, installedExtensionIds: string[]): string {
  if (setting === 'debugpy' || setting === OWN_DEBUG_TYPE) {
    return setting;
  }
  const ids = new Set(installedExtensionIds.map((id) => id.toLowerCase()));
  return PYTHON_DEBUGGER_EXTENSIONS.some((id) => ids.has(id)) ? 'debugpy' : OWN_DEBUG_TYPE;
}

/**
 * Why the `remoteDebug.debugType` setting cannot be used here (undefined: it can): "debugpy" needs the Python
 * Debugger extension, which contributes that type; without it VS Code refuses every rank's session.  `resolved`:
 * resolveDebugType's answer for the setting.
 */
export function debugTypeProblem(setting: string | undefined, resolved: string, installedExtensionIds: string[]): string | undefined {
  const ids = new Set(installedExtensionIds.map((id) => id.toLowerCase()));
  if (resolved === 'debugpy' && !PYTHON_DEBUGGER_EXTENSIONS.some((id) => ids.has(id))) {
    return (
      `the setting remoteDebug.debugType is "${setting}", but no installed extension debugs that type ` +
      `(the Python Debugger, ${PYTHON_DEBUGGER_EXTENSIONS[0]}): the ranks use Remote Debug's own debugger. ` +
      'Install the Python Debugger, or set remoteDebug.debugType to "auto".'
    );
  }
  if (setting !== undefined && !['auto', 'debugpy', OWN_DEBUG_TYPE, ''].includes(setting)) {
    return `the setting remoteDebug.debugType is "${setting}", which is none of "auto", "debugpy", "${OWN_DEBUG_TYPE}": it is read as "auto".`;
  }
  return undefined;
}

/** The CLI's own name for a rank's configuration (one definition: remote_debug/laptop/wire/events.py, generated). */
export function configName(job: string, rank: number, node: string): string {
  return formatConfigName(job, rank, node);
}

/**
 * The name of a rank's debug session as the Call Stack shows it: the rank first, so 64 rows stay apart when the
 * view cuts them short ("rank 3 · algo-1" rather than "remote-debug: job rank 3 (…").  The rank sessions are
 * children of the job's own session (jobSession.ts), which carries the job's name in full: under it a rank's name
 * leaves the job out (SESSION_NAME_TEMPLATE); without it (it could not start: the ranks go flat, maybe beside another
 * job's) the name says the job too (FLAT_SESSION_NAME_TEMPLATE).
 * (Until the CLI's template says the same: see formatConfigName, remote_debug/laptop/wire/events.py.)
 */
export const SESSION_NAME_TEMPLATE = 'rank {rank} · {node}';
export const FLAT_SESSION_NAME_TEMPLATE = 'rank {rank} · {node} · {job}';

export function sessionName(job: string, rank: number, node: string, underJob = false): string {
  const values: Record<string, string> = { job, rank: String(rank), node };
  const template = underJob ? SESSION_NAME_TEMPLATE : FLAT_SESSION_NAME_TEMPLATE;
  return template.replace(/\{(\w+)\}/g, (whole, key: string) => values[key] ?? whole);
}

/** The job's parent session: "Remote Debug: job". */
export function jobSessionName(job: string): string {
  return `Remote Debug: ${job}`;
}

export function compoundName(job: string): string {
  return formatCompoundName(job);
}

export function substituteWorkspace(value: string, workspaceFolder: string | undefined): string {
  if (!workspaceFolder) {
    return value;
  }
  return value.replace(/\$\{workspaceFolder\}/g, workspaceFolder).replace(/\$\{workspaceRoot\}/g, workspaceFolder);
}

/** The entries of a pathMappings value (a setting, a launch.json attribute) that have both roots. */
export function validMappings(value: unknown): PathMapping[] {
  return (Array.isArray(value) ? (value as Array<Partial<PathMapping> | null>) : []).filter(
    (m): m is PathMapping => !!m && typeof m.localRoot === 'string' && typeof m.remoteRoot === 'string' && !!m.localRoot && !!m.remoteRoot,
  );
}

/**
 * The path mappings for a rank: the user's setting if any (with ${workspaceFolder} expanded), otherwise
 * `localRoot` <-> the job's code dir.  `localRoot` is the folder whose contents are in the code dir: the job's
 * source dir (`--source-dir <ws>/training` puts the contents of training/ there, not the workspace folder's), or
 * the folder the user picked for a SageMaker job; without one, the workspace folder.
 */
export function pathMappings(
  setting: PathMapping[] | undefined,
  workspaceFolder: string | undefined,
  codeDir: string | undefined,
  localRoot?: string,
): PathMapping[] {
  const valid = validMappings(setting);
  if (valid.length) {
    return valid.map((m) => ({ localRoot: substituteWorkspace(m.localRoot, workspaceFolder), remoteRoot: m.remoteRoot }));
  }
  const local = localRoot ?? workspaceFolder;
  if (!local) {
    return [];
  }
  return [{ localRoot: local, remoteRoot: codeDir ?? DEFAULT_REMOTE_ROOT }];
}

export interface RankConfigInput {
  job: string;
  rank: number;
  node: string;
  port: number;
  host?: string;
  debugType: string;
  workspaceFolder?: string;
  /** The local folder whose contents are the code dir (default: the workspace folder). */
  localRoot?: string;
  codeDir?: string;
  pathMappingSetting?: PathMapping[];
  justMyCode?: boolean;
}

export function rankConfiguration(input: RankConfigInput): RankDebugConfiguration {
  if (!Number.isInteger(input.port) || input.port < 1 || input.port > 65535) {
    throw new Error(`rank ${input.rank} of job ${input.job} has no usable debug port (${input.port})`);
  }
  return {
    type: input.debugType,
    name: sessionName(input.job, input.rank, input.node),
    request: 'attach',
    connect: { host: input.host ?? '127.0.0.1', port: input.port },
    pathMappings: pathMappings(input.pathMappingSetting, input.workspaceFolder, input.codeDir, input.localRoot),
    justMyCode: input.justMyCode ?? false,
    redirectOutput: true,
    remoteDebug: { job: input.job, rank: input.rank, node: input.node },
  };
}

/** Our tag on a session's configuration, if it is one of ours. */
export function rankTag(configuration: { [key: string]: unknown } | undefined): RankTag | undefined {
  const tag = configuration?.remoteDebug as Partial<RankTag> | undefined;
  if (tag && typeof tag.job === 'string' && typeof tag.rank === 'number') {
    return { job: tag.job, rank: tag.rank, node: typeof tag.node === 'string' ? tag.node : '' };
  }
  return undefined;
}

/**
 * Where our own debug type connects: `connect` (what we generate, and what debugpy configurations
 * use) or the older top-level host/port.  Returns an error message instead when there is none.
 */
export function connectTarget(configuration: { [key: string]: unknown }): { host: string; port: number } | string {
  const connect = configuration.connect as { host?: unknown; port?: unknown } | undefined;
  const host = typeof connect?.host === 'string' ? connect.host : typeof configuration.host === 'string' ? configuration.host : '127.0.0.1';
  const rawPort = connect?.port ?? configuration.port;
  const port = typeof rawPort === 'string' ? Number(rawPort) : rawPort;
  if (typeof port !== 'number' || !Number.isInteger(port) || port < 1 || port > 65535) {
    return (
      'this remote-debug configuration has no "connect": {"port": N}; start it from the Remote Debug view ' +
      '(Attach All Ranks) or copy the port that `remote-debug attach` prints'
    );
  }
  return { host, port };
}
