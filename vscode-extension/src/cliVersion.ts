// Is the remote-debug CLI this extension drives installed, and new enough?
//
// `remote-debug version --json` answers a VersionInfo (generated from the CLI's definition).  CLIs older than
// that command fail with "No such command 'version'".  No vscode import: the classification is unit-tested on
// plain values and the check runs against a stand-in CLI.

import { Cli, CliError, DISTRIBUTION } from './cli';
import { parseJsonDocument, type VersionInfo } from './events';

/** The oldest CLI this extension works with.  Raise it when the extension starts relying on a newer command. */
export const MIN_CLI_VERSION = '0.1.0';

/** `remote-debug-training` (see cli.ts: the PyPI name `remote-debug` is an unrelated tool). */
export { DISTRIBUTION };

export interface CliVersionInfo {
  version: string;
  distribution: string;
  python: string; // sys.executable of the CLI: the interpreter to upgrade it with
  eventsVersion: number;
}

export type CliStatus =
  | { kind: 'ok'; info: CliVersionInfo }
  | { kind: 'missing'; detail: string } // nothing runs under that name
  | { kind: 'too-old'; version?: string; detail: string } // ours, but older than MIN_CLI_VERSION
  | { kind: 'foreign'; detail: string } // something else answers to `remote-debug` (e.g. the HPC tool)
  | { kind: 'broken'; detail: string }; // ours by the look of it, but it fails (a broken install, a bad venv)

/** The JSON `version --json` prints, or undefined when it is not that document. */
export function parseVersionInfo(stdout: string): CliVersionInfo | undefined {
  let doc: unknown;
  try {
    doc = parseJsonDocument(stdout);
  } catch {
    return undefined;
  }
  if (!doc || typeof doc !== 'object' || Array.isArray(doc)) {
    return undefined;
  }
  // the generated VersionInfo's keys: a field the CLI renamed is a type error here
  const o = doc as Partial<Record<keyof VersionInfo, unknown>>;
  if (typeof o.version !== 'string' || !o.version) {
    return undefined;
  }
  return {
    version: o.version,
    distribution: typeof o.distribution === 'string' ? o.distribution : '',
    python: typeof o.python === 'string' ? o.python : '',
    eventsVersion: typeof o.events_version === 'number' ? o.events_version : 0,
  };
}

interface ParsedVersion {
  release: number[];
  preRelease: boolean; // 0.1.0rc1, 0.1.0.dev3, 0.1.0a1: before 0.1.0
}

function parseVersion(text: string): ParsedVersion | undefined {
  // PEP 440 enough for our own versions: N(.N)*, then an optional pre/dev part, then an optional +local part
  const m = /^\s*v?(\d+(?:\.\d+)*)(.*?)(?:\+.*)?\s*$/i.exec(text);
  if (!m) {
    return undefined;
  }
  const rest = m[2].toLowerCase();
  const preRelease = /^[-_.]?(a|alpha|b|beta|c|rc|pre|preview|dev)\d*/.test(rest);
  return { release: m[1].split('.').map(Number), preRelease };
}

/** <0, 0, >0 like a comparator; unparseable versions sort before everything (treated as too old). */
export function compareVersions(a: string, b: string): number {
  const pa = parseVersion(a);
  const pb = parseVersion(b);
  if (!pa || !pb) {
    return pa ? 1 : pb ? -1 : 0;
  }
  const n = Math.max(pa.release.length, pb.release.length);
  for (let i = 0; i < n; i++) {
    const d = (pa.release[i] ?? 0) - (pb.release[i] ?? 0);
    if (d !== 0) {
      return d;
    }
  }
  return Number(pb.preRelease) - Number(pa.preRelease);
}

/** What the answer (or failure) of `version --json` says about the CLI. */
export function classifyVersionAnswer(
  answer: { stdout: string } | { error: CliError },
  minimum: string = MIN_CLI_VERSION,
): CliStatus {
  if ('error' in answer) {
    const err = answer.error;
    if (err.notFound) {
      return { kind: 'missing', detail: err.message };
    }
    if (err.unknownCommand) {
      // our CLI from before `version` existed (it has the other commands, not this one)
      return { kind: 'too-old', detail: err.message };
    }
    if (/No module named '?remote_debug/.test(err.stderr)) {
      // `<pythonPath> -m remote_debug` with an interpreter that lacks the package
      return { kind: 'missing', detail: err.message };
    }
    return { kind: 'broken', detail: err.message };
  }
  const info = parseVersionInfo(answer.stdout);
  if (!info) {
    return { kind: 'foreign', detail: answer.stdout.trim().split(/\r?\n/)[0] ?? '' };
  }
  if (compareVersions(info.version, minimum) < 0) {
    return { kind: 'too-old', version: info.version, detail: `version ${info.version}` };
  }
  return { kind: 'ok', info };
}

/** Run `version --json` (quickly: it only imports the version command) and classify what comes back. */
export async function checkCli(cli: Cli, minimum: string = MIN_CLI_VERSION, timeoutMs = 30_000): Promise<CliStatus> {
  try {
    const result = await cli.run(['version', '--json'], { timeoutMs });
    return classifyVersionAnswer({ stdout: result.stdout }, minimum);
  } catch (err) {
    if (err instanceof CliError) {
      return classifyVersionAnswer({ error: err }, minimum);
    }
    return { kind: 'broken', detail: err instanceof Error ? err.message : String(err) };
  }
}

/** `<python> -m pip install --upgrade remote-debug-training`, as argv (no shell: paths with spaces stay whole). */
export function pipInstallArgs(): string[] {
  return ['-m', 'pip', 'install', '--upgrade', DISTRIBUTION];
}
