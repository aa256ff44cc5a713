// Running the remote-debug CLI: one-shot JSON commands and long-running JSON-lines processes.
//
// No vscode import here: the settings come in as plain values, so this is unit-tested against a
// stand-in CLI (a small script) with real processes.

import { ChildProcess, spawn, SpawnOptions } from 'node:child_process';
import * as path from 'node:path';
import * as fs from 'node:fs';

import { ResolveContext, resolveCommand } from './cliResolve';
import { firstLine, LineSplitter, parseJsonDocument } from './events';

export interface CliSettings {
  cliPath: string; // "remote-debug" or an absolute path
  pythonPath: string; // "" or an interpreter with remote_debug installed
  env?: Record<string, string>; // added to the extension host's environment (AWS_PROFILE, AWS_REGION)
  /** The workspace folders while the workspace is not trusted: no executable in them is run (src/cliResolve.ts). */
  untrustedRoots?: string[];
}

/** The environment the CLI runs in: the extension host's, plus what the settings add. */
export function cliEnv(settings: CliSettings, base: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
  const extra = Object.fromEntries(Object.entries(settings.env ?? {}).filter(([, v]) => typeof v === 'string' && v !== ''));
  return { ...base, ...extra };
}

export interface Invocation {
  command: string;
  args: string[];
}

/** How to run `remote-debug ARGS` with these settings. */
export function invocation(settings: CliSettings, args: string[]): Invocation {
  const python = settings.pythonPath.trim();
  if (python) {
    return { command: python, args: ['-m', 'remote_debug', ...args] };
  }
  return { command: settings.cliPath.trim() || 'remote-debug', args };
}

/** A command line a person can paste (for messages and the output channel). */
export function displayCommand(inv: Invocation): string {
  const quote = (s: string) => (/^[\w@%+=:,./-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`);
  return [inv.command, ...inv.args].map(quote).join(' ');
}

/** The interpreter a local job's training script should run with: the one remote-debug runs on. */
export function trainingPython(settings: CliSettings, exists: (p: string) => boolean = fs.existsSync): string {
  if (settings.pythonPath.trim()) {
    return settings.pythonPath.trim();
  }
  const cli = settings.cliPath.trim();
  if (path.isAbsolute(cli)) {
    // a venv's bin/remote-debug sits next to that venv's python
    for (const name of ['python', 'python3']) {
      const candidate = path.join(path.dirname(cli), name);
      if (exists(candidate)) {
        return candidate;
      }
    }
  }
  return 'python3';
}

export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode: number | null,
    readonly stderr: string,
    readonly notFound = false,
  ) {
    super(message);
  }

  /** The CLI said it has no such command (an older CLI than this extension expects). */
  get unknownCommand(): boolean {
    return /No such command/i.test(this.stderr);
  }
}

/**
 * The one line worth showing from a failed command: the CLI's own `remote-debug: error: ...`
 * line if there is one (the CLI promises exactly one), else the last non-empty line of stderr.
 */
export function errorMessage(stderr: string, exitCode: number | null, inv?: Invocation): string {
  const lines = stderr.split(/\r?\n/).map((l) => l.trim()).filter(Boolean);
  const own = lines.find((l) => l.startsWith('remote-debug: error:'));
  if (own) {
    return own.slice('remote-debug: error:'.length).trim();
  }
  // typer/click usage errors: "Error: No such command 'stacks'." inside a box
  const usage = lines.map((l) => l.replace(/^[│|]\s*|\s*[│|]$/g, '').trim()).find((l) => /^(Error|No such|Missing|Invalid|Got unexpected)/.test(l));
  if (usage) {
    return usage;
  }
  const last = lines[lines.length - 1];
  if (last) {
    return last.length > 300 ? `${last.slice(0, 297)}...` : last;
  }
  const what = inv ? displayCommand(inv) : 'remote-debug';
  return `${what} failed with exit code ${exitCode}`;
}

/**
 * The CLI's name on PyPI.  Not `remote-debug`: that PyPI name belongs to an unrelated HPC tool, and installing it
 * installs the wrong program.  The command stays `remote-debug`.
 */
export const DISTRIBUTION = 'remote-debug-training';

export function notFoundMessage(inv: Invocation): string {
  return (
    `cannot run ${inv.command}: not found. Install the CLI (pip install ${DISTRIBUTION}, or the command ` +
    `"Remote Debug: Install or Upgrade the remote-debug CLI") or set "remoteDebug.cliPath" / "remoteDebug.pythonPath" in the settings`
  );
}

export interface RunOptions {
  cwd?: string;
  env?: NodeJS.ProcessEnv;
  timeoutMs?: number;
  signal?: AbortSignal;
}

export interface RunResult {
  stdout: string;
  stderr: string;
  exitCode: number | null;
}

type Spawner = (command: string, args: string[], options: SpawnOptions) => ChildProcess;

/** What a spawn needs besides the settings' roots: the platform and file checks (a seam for the unit tests). */
export type ResolveSeam = Omit<ResolveContext, 'untrustedRoots' | 'env'>;

export class Cli {
  constructor(
    private readonly settings: () => CliSettings,
    private readonly spawner: Spawner = spawn,
    private readonly seam: ResolveSeam = {},
  ) {}

  invocation(args: string[]): Invocation {
    return invocation(this.settings(), args);
  }

  /**
   * The invocation to spawn: in an untrusted workspace its command resolved to an absolute file outside the
   * workspace folders (src/cliResolve.ts), else a CliError saying why none may run.
   */
  private spawnable(args: string[], env: NodeJS.ProcessEnv): Invocation | CliError {
    const settings = this.settings();
    const inv = invocation(settings, args);
    const resolved = resolveCommand(inv.command, { ...this.seam, untrustedRoots: settings.untrustedRoots, env });
    if (resolved.error !== undefined) {
      return new CliError(resolved.notFound ? notFoundMessage(inv) : resolved.error, null, resolved.error, resolved.notFound);
    }
    return { command: resolved.command, args: inv.args };
  }

  trainingPython(): string {
    return trainingPython(this.settings());
  }

  /** Run to completion; rejects with a CliError (one line) on a non-zero exit. */
  run(args: string[], options: RunOptions = {}): Promise<RunResult> {
    const env = options.env ?? cliEnv(this.settings());
    const inv = this.spawnable(args, env);
    if (inv instanceof CliError) {
      return Promise.reject(inv);
    }
    return new Promise((resolve, reject) => {
      let child: ChildProcess;
      try {
        child = this.spawner(inv.command, inv.args, {
          cwd: options.cwd,
          env,
          stdio: ['ignore', 'pipe', 'pipe'],
        });
      } catch (err) {
        reject(new CliError(notFoundMessage(inv), null, String(err), true));
        return;
      }
      let stdout = '';
      let stderr = '';
      let settled = false;
      const finish = (fn: () => void) => {
        if (!settled) {
          settled = true;
          clearTimeout(timer);
          options.signal?.removeEventListener('abort', onAbort);
          fn();
        }
      };
      const onAbort = () => {
        // a cancel (the progress notification's): SIGINT lets the CLI clean up; one that ignores it is killed
        child.kill('SIGINT');
        const kill = setTimeout(() => child.kill('SIGKILL'), 5000);
        kill.unref?.();
        child.once('close', () => clearTimeout(kill));
        finish(() => reject(new CliError('cancelled', null, stderr)));
      };
      const timer = options.timeoutMs
        ? setTimeout(() => {
            child.kill('SIGTERM');
            finish(() =>
              reject(new CliError(`${displayCommand(inv)} did not finish within ${options.timeoutMs! / 1000} s`, null, stderr)),
            );
          }, options.timeoutMs)
        : undefined;
      options.signal?.addEventListener('abort', onAbort);
      child.stdout?.setEncoding('utf8').on('data', (d: string) => (stdout += d));
      child.stderr?.setEncoding('utf8').on('data', (d: string) => (stderr += d));
      child.on('error', (err: NodeJS.ErrnoException) => {
        const notFound = err.code === 'ENOENT';
        finish(() => reject(new CliError(notFound ? notFoundMessage(inv) : `${inv.command}: ${err.message}`, null, stderr, notFound)));
      });
      child.on('close', (code) => {
        if (code === 0) {
          finish(() => resolve({ stdout, stderr, exitCode: code }));
        } else {
          finish(() => reject(new CliError(errorMessage(stderr, code, inv), code, stderr)));
        }
      });
    });
  }

  /** Run a `--json` command and parse the JSON document it prints. */
  async json(args: string[], options: RunOptions = {}): Promise<unknown> {
    const result = await this.run(args, options);
    return parseJsonDocument(result.stdout);
  }

  /** Start a long-running command whose stdout is JSON lines (attach). */
  stream(args: string[], options: { cwd?: string; env?: NodeJS.ProcessEnv }): CliProcess {
    const env = options.env ?? cliEnv(this.settings());
    const inv = this.spawnable(args, env);
    if (inv instanceof CliError) {
      return new CliProcess(this.invocation(args), this.spawner, { ...options, env }, inv);
    }
    return new CliProcess(inv, this.spawner, { ...options, env });
  }
}

export interface CliProcessHandlers {
  line?: (line: string) => void;
  stderr?: (line: string) => void;
  exit?: (code: number | null, signal: NodeJS.Signals | null, error?: CliError) => void;
}

/**
 * A managed background CLI process: line-wise stdout/stderr, graceful stop (SIGINT lets the CLI
 * close its tunnels; SIGTERM, then SIGKILL if it does not go), exactly one exit callback.
 */
export class CliProcess {
  private child: ChildProcess | undefined;
  private readonly stdoutLines = new LineSplitter();
  private readonly stderrLines = new LineSplitter();
  private stderrTail: string[] = [];
  private exited = false;
  private exitWaiters: Array<() => void> = [];
  private killTimers: NodeJS.Timeout[] = [];
  private handlers: CliProcessHandlers = {};
  stopping = false;

  constructor(
    readonly inv: Invocation,
    private readonly spawner: Spawner,
    private readonly options: { cwd?: string; env?: NodeJS.ProcessEnv },
    /** Set when nothing may be spawned (an untrusted workspace's executable): start() reports it as the exit. */
    private readonly refused?: CliError,
  ) {}

  get pid(): number | undefined {
    return this.child?.pid;
  }

  get running(): boolean {
    return this.child !== undefined && !this.exited;
  }

  start(handlers: CliProcessHandlers): void {
    this.handlers = handlers;
    if (this.refused) {
      this.onExit(null, null, this.refused);
      return;
    }
    try {
      this.child = this.spawner(this.inv.command, this.inv.args, {
        cwd: this.options.cwd,
        env: this.options.env ?? process.env,
        stdio: ['ignore', 'pipe', 'pipe'],
      });
    } catch (err) {
      this.onExit(null, null, new CliError(notFoundMessage(this.inv), null, String(err), true));
      return;
    }
    const child = this.child;
    child.stdout?.setEncoding('utf8').on('data', (d: string) => this.stdoutLines.push(d).forEach((l) => this.handlers.line?.(l)));
    child.stderr?.setEncoding('utf8').on('data', (d: string) => this.stderrLines.push(d).forEach((l) => this.onStderr(l)));
    child.on('error', (err: NodeJS.ErrnoException) => {
      const notFound = err.code === 'ENOENT';
      this.onExit(null, null, new CliError(notFound ? notFoundMessage(this.inv) : `${this.inv.command}: ${err.message}`, null, '', notFound));
    });
    child.on('close', (code, signal) => {
      this.stdoutLines.flush().forEach((l) => this.handlers.line?.(l));
      this.stderrLines.flush().forEach((l) => this.onStderr(l));
      const stderr = this.stderrTail.join('\n');
      const error =
        code === 0 || this.stopping ? undefined : new CliError(errorMessage(stderr, code, this.inv), code, stderr);
      this.onExit(code, signal, error);
    });
  }

  private onStderr(line: string): void {
    this.stderrTail.push(line);
    if (this.stderrTail.length > 50) {
      this.stderrTail.shift();
    }
    this.handlers.stderr?.(line);
  }

  private onExit(code: number | null, signal: NodeJS.Signals | null, error?: CliError): void {
    if (this.exited) {
      return;
    }
    this.exited = true;
    this.killTimers.forEach(clearTimeout);
    this.handlers.exit?.(code, signal, error);
    this.exitWaiters.splice(0).forEach((w) => w());
  }

  /** Ask the process to stop (SIGINT), escalate after graceMs; resolves once it has exited. */
  stop(graceMs = 5000): Promise<void> {
    if (!this.child || this.exited) {
      return Promise.resolve();
    }
    const child = this.child;
    const done = new Promise<void>((resolve) => this.exitWaiters.push(resolve));
    if (!this.stopping) {
      this.stopping = true;
      child.kill('SIGINT');
      this.killTimers.push(
        setTimeout(() => child.kill('SIGTERM'), graceMs),
        setTimeout(() => child.kill('SIGKILL'), graceMs * 2),
      );
    }
    return done;
  }

  /** Resolves when the process has exited (at once if it never started or already exited). */
  whenExited(): Promise<void> {
    if (!this.child || this.exited) {
      return Promise.resolve();
    }
    return new Promise((resolve) => this.exitWaiters.push(resolve));
  }
}

export { firstLine };
