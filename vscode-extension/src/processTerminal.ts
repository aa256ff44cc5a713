// Run one program in a terminal the user can watch, and learn how it ended.
//
// For `pip install`: a plain terminal plus sendText cannot tell us when pip is done or whether it worked, and a
// terminal created with shellPath closes (taking pip's error with it) the moment the process exits.  An extension
// terminal (Pseudoterminal) over a child process gives both: the output stays on screen with the exit code under
// it, and the caller gets the code to act on (re-check the CLI, offer to set remoteDebug.pythonPath).  No shell:
// argv goes to the program as is, so interpreter paths with spaces need no quoting.

import { ChildProcess, spawn, SpawnOptions } from 'node:child_process';

import * as vscode from 'vscode';

import { displayCommand } from './cli';

type Spawner = (command: string, args: string[], options: SpawnOptions) => ChildProcess;

export interface ProcessResult {
  exitCode: number | null; // null: it could not start, or a signal ended it
  output: string; // what it printed (stdout and stderr, in order), for the follow-up message
}

/** Terminal text wants CRLF; a child's output has bare LFs. */
export function toTerminalText(text: string): string {
  return text.replace(/\r?\n/g, '\r\n');
}

/**
 * A Pseudoterminal that runs `command args` once it opens.  Ctrl+C interrupts the program; after it exits, any key
 * closes the terminal (as a finished task's terminal does).
 */
export class ProcessPseudoterminal implements vscode.Pseudoterminal {
  private readonly writeEmitter = new vscode.EventEmitter<string>();
  private readonly closeEmitter = new vscode.EventEmitter<number | void>();
  readonly onDidWrite = this.writeEmitter.event;
  readonly onDidClose = this.closeEmitter.event;
  private child: ChildProcess | undefined;
  private finished = false;
  private output = '';
  private lastCode: number | null = null;
  private resolveResult!: (r: ProcessResult) => void;
  /** Settles once the program has exited (or failed to start). */
  readonly result: Promise<ProcessResult> = new Promise((resolve) => (this.resolveResult = resolve));

  constructor(
    private readonly command: string,
    private readonly args: string[],
    private readonly options: { cwd?: string; env?: NodeJS.ProcessEnv } = {},
    private readonly spawner: Spawner = spawn,
  ) {}

  open(): void {
    this.write(`$ ${displayCommand({ command: this.command, args: this.args })}\n`);
    try {
      this.child = this.spawner(this.command, this.args, {
        cwd: this.options.cwd,
        env: this.options.env ?? process.env,
        stdio: ['ignore', 'pipe', 'pipe'],
      });
    } catch (err) {
      this.finish(null, err instanceof Error ? err.message : String(err));
      return;
    }
    const onData = (d: string) => {
      this.output += d;
      this.write(d);
    };
    this.child.stdout?.setEncoding('utf8').on('data', onData);
    this.child.stderr?.setEncoding('utf8').on('data', onData);
    this.child.on('error', (err: NodeJS.ErrnoException) =>
      this.finish(null, err.code === 'ENOENT' ? vscode.l10n.t('{0}: not found', this.command) : err.message),
    );
    this.child.on('close', (code) => this.finish(code));
  }

  handleInput(data: string): void {
    if (!this.finished) {
      if (data === '\x03') {
        this.child?.kill('SIGINT');
      }
      return;
    }
    this.closeEmitter.fire(this.lastCode ?? undefined);
  }

  close(): void {
    // the user closed the terminal: a pip still running would finish unseen, so stop it
    if (!this.finished) {
      this.child?.kill('SIGTERM');
    }
  }

  private finish(code: number | null, problem?: string): void {
    if (this.finished) {
      return;
    }
    this.finished = true;
    this.lastCode = code;
    if (problem) {
      this.write(`${problem}\n`);
      this.output += `${problem}\n`;
    }
    const status = code === null ? vscode.l10n.t('did not run to the end') : vscode.l10n.t('exited with code {0}', code);
    this.write(`\n${vscode.l10n.t('{0} {1}. Press any key to close this terminal.', this.command, status)}\n`);
    this.resolveResult({ exitCode: code, output: this.output });
  }

  private write(text: string): void {
    this.writeEmitter.fire(toTerminalText(text));
  }
}

/** Show a terminal named `name` running `command args`; resolves when the program has exited. */
export function runInTerminal(
  name: string,
  command: string,
  args: string[],
  options: { cwd?: string; env?: NodeJS.ProcessEnv } = {},
): Promise<ProcessResult> {
  const pty = new ProcessPseudoterminal(command, args, options);
  const terminal = vscode.window.createTerminal({ name, pty });
  terminal.show();
  return pty.result;
}
