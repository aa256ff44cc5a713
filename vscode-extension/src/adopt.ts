// Adopt a Running Process… / Adopt Job…: `remote-debug adopt` makes a job started without remote-debug (a torchrun
// or a plain `python train.py` of this user on this machine, or a SageMaker job that was not enabled) look exactly
// like one launched with it: afterwards `jobs --json` lists it and attach, stacks, ssh and stop work on it unchanged.
//
//   adopt --list --json         the candidate process trees here  -> a quick pick
//   adopt --pid PID --json      adopt one of them                 -> {job, already, nodes, ranks: [{rank, pid, node, state, note}]}
//   adopt JOB --json            a SageMaker job that was not enabled (same answer)
//
// A refusal (another user's process, ptrace not permitted, Python too old, opted out) is exit 2 and one stderr line,
// which Cli.run turns into the CliError shown.  After adopting, Attach All Ranks is the view's own (Commands).

import * as vscode from 'vscode';

import { Cli, CliError } from './cli';
import type { AdoptCandidate, AdoptedRank, AdoptOutcome as AdoptResult } from './events';
import { CliOutputError, isAdoptableJob, parseJsonDocument } from './events';
import { LineSink, logger, Logger } from './log';
import { JobsModel } from './model';
import { withCancellableProgress } from './progress';
import { rankRanges } from './rankPicker';
import type { TreeNode } from './tree';

// The documents `adopt --list --json` and `adopt --json` print: generated from the CLI's own classes (AdoptResult is
// its AdoptOutcome; AdoptCandidate.kind: 'launcher', 'rank' or 'process', a newer CLI may say more).
export type { AdoptCandidate, AdoptedRank, AdoptOutcome as AdoptResult } from './events';

function obj(value: unknown): Record<string, unknown> | undefined {
  return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : undefined;
}

function strOrNull(value: unknown): string | null {
  return typeof value === 'string' && value !== '' ? value : null;
}

const isCount = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v) && v >= 0;

/** `adopt --list --json`: the candidates; a CliOutputError (one line) when it is not a list of processes. */
export function parseAdoptCandidates(stdout: string): AdoptCandidate[] {
  const what = '`remote-debug adopt --list --json`';
  let data: unknown;
  try {
    data = parseJsonDocument(stdout);
  } catch (err) {
    throw new CliOutputError(`${what} printed no JSON: ${err instanceof Error ? err.message : String(err)}`);
  }
  if (!Array.isArray(data)) {
    throw new CliOutputError(`${what} did not print a list of processes`);
  }
  return data.map((raw, i) => {
    const o = obj(raw);
    if (!o || !isCount(o.pid) || o.pid === 0) {
      throw new CliOutputError(`${what} printed an entry without a process id (entry ${i + 1})`);
    }
    const adoptable = o.adoptable === true;
    return {
      pid: o.pid,
      command: typeof o.command === 'string' ? o.command : '',
      cwd: typeof o.cwd === 'string' ? o.cwd : '',
      kind: typeof o.kind === 'string' ? o.kind : 'process',
      ranks: isCount(o.ranks) ? o.ranks : 1,
      python: strOrNull(o.python),
      adoptable,
      reason: strOrNull(o.reason) ?? (adoptable ? null : 'the CLI gave no reason'),
      job: strOrNull(o.job),
    };
  });
}

/** `adopt --pid PID --json` / `adopt JOB --json`: the adopted job; a CliOutputError (one line) when it is not one. */
export function parseAdoptResult(stdout: string): AdoptResult {
  const what = '`remote-debug adopt --json`';
  let data: unknown;
  try {
    data = parseJsonDocument(stdout);
  } catch (err) {
    throw new CliOutputError(`${what} printed no JSON: ${err instanceof Error ? err.message : String(err)}`);
  }
  const o = obj(data);
  if (!o) {
    throw new CliOutputError(`${what} did not print the adopted job (a JSON object)`);
  }
  const job = strOrNull(o.job);
  if (!job) {
    throw new CliOutputError(`${what} printed no job name`);
  }
  if (!Array.isArray(o.ranks)) {
    throw new CliOutputError(`${what} printed no ranks for job ${job}`);
  }
  const ranks = o.ranks.map((raw): AdoptedRank => {
    const r = obj(raw);
    if (!r || !isCount(r.rank)) {
      throw new CliOutputError(`${what} printed a rank of job ${job} without its number`);
    }
    return {
      rank: r.rank,
      pid: isCount(r.pid) ? r.pid : 0,
      node: typeof r.node === 'string' ? r.node : '',
      state: typeof r.state === 'string' ? r.state : 'idle',
      note: strOrNull(r.note),
    };
  });
  const nodes = Array.isArray(o.nodes) ? o.nodes.filter((n): n is string => typeof n === 'string') : [];
  return { job, already: o.already === true, nodes, ranks: ranks.sort((a, b) => a.rank - b.rank) };
}

/** `1 rank`, `2 ranks`. */
function rankCount(n: number): string {
  return n === 1 ? vscode.l10n.t('1 rank') : vscode.l10n.t('{0} ranks', n);
}

export interface AdoptPickItem extends vscode.QuickPickItem {
  candidate: AdoptCandidate;
}

/** 'adoptable' first, then the ones that already are a job, then those that cannot be adopted. */
function group(c: AdoptCandidate): number {
  return c.job ? 1 : c.adoptable ? 0 : 2;
}

/**
 * The quick pick's items: `pid 1234 · torchrun --nproc-per-node 2 train.py`, `2 ranks · Python 3.12`, the cwd below;
 * a process that already is a job says which, one that cannot be adopted says why.
 */
export function adoptPickItems(candidates: AdoptCandidate[]): AdoptPickItem[] {
  return [...candidates]
    .sort((a, b) => group(a) - group(b))
    .map((c) => {
      const shape = [rankCount(c.ranks), c.python ? vscode.l10n.t('Python {0}', c.python) : undefined].filter(Boolean).join(' · ');
      const command = c.command || vscode.l10n.t('(command line not readable)');
      if (c.job) {
        return {
          label: `$(debug-alt) pid ${c.pid} · ${command}`,
          description: vscode.l10n.t('{0} · already job {1}', shape, c.job),
          detail: c.cwd,
          candidate: c,
        };
      }
      if (!c.adoptable) {
        return {
          label: `$(circle-slash) pid ${c.pid} · ${command}`,
          description: vscode.l10n.t('cannot adopt: {0}', c.reason ?? ''),
          detail: c.cwd,
          candidate: c,
        };
      }
      return { label: `pid ${c.pid} · ${command}`, description: shape, detail: c.cwd, candidate: c };
    });
}

/** `1 rank (rank 1) is blocked in native code; …`, or undefined when every rank can take the debugger now. */
export function pendingPhrase(result: AdoptResult): string | undefined {
  const pending = result.ranks.filter((r) => r.state === 'pending').map((r) => r.rank);
  if (pending.length === 0) {
    return undefined;
  }
  return pending.length === 1
    ? vscode.l10n.t('1 rank (rank {0}) is blocked in native code; it gets the debugger when it returns to Python.', pending[0])
    : vscode.l10n.t(
        '{0} ranks ({1}) are blocked in native code; they get the debugger when they return to Python.',
        pending.length,
        rankRanges(pending),
      );
}

/** The notification after adopting: `Remote Debug: adopted pid 1234 as job adopted-x (2 ranks).` and the pending ranks. */
export function adoptedMessage(result: AdoptResult, what: { pid?: number; job?: string }): string {
  const ranks = rankCount(result.ranks.length);
  const subject = what.pid !== undefined ? vscode.l10n.t('pid {0}', what.pid) : vscode.l10n.t('job {0}', what.job ?? result.job);
  const head =
    what.pid === undefined
      ? result.already
        ? vscode.l10n.t('Remote Debug: {0} was already adopted ({1}).', subject, ranks)
        : vscode.l10n.t('Remote Debug: adopted {0} ({1}).', subject, ranks)
      : result.already
        ? vscode.l10n.t('Remote Debug: {0} was already adopted as job {1} ({2}).', subject, result.job, ranks)
        : vscode.l10n.t('Remote Debug: adopted {0} as job {1} ({2}).', subject, result.job, ranks);
  const pending = pendingPhrase(result);
  return pending ? `${head} ${pending}` : head;
}

/** A job row that Adopt Job… is for: a running SageMaker job launched without remote debugging. */
/** What adopting needs of the rest of the extension: the job listing and the view's Attach All Ranks. */
export interface AdoptHost {
  refresh(): Promise<void>;
  attachAllRanks(node?: TreeNode): Promise<void>;
}

export class Adopter {
  private readonly log: Logger;

  constructor(
    private readonly cli: Cli,
    private readonly model: JobsModel,
    private readonly host: AdoptHost,
    log: LineSink,
  ) {
    this.log = logger(log);
  }

  /** Remote Debug: Adopt a Running Process… */
  async adoptProcess(): Promise<void> {
    const listed = await this.runAdopt(['adopt', '--list', '--json'], vscode.l10n.t('Remote Debug: looking for training processes'), 60_000);
    if (listed === undefined) {
      return;
    }
    const candidates = parseAdoptCandidates(listed);
    if (candidates.length === 0) {
      await vscode.window.showInformationMessage(
        vscode.l10n.t(
          'Remote Debug: no training process of yours runs on this machine (a torchrun, mpirun or Python process tree). Start the job, then adopt it.',
        ),
      );
      return;
    }
    const picked = await vscode.window.showQuickPick(adoptPickItems(candidates), {
      placeHolder: vscode.l10n.t('Adopt which running process as a debuggable job?'),
      matchOnDescription: true,
      matchOnDetail: true,
    });
    if (!picked) {
      return;
    }
    const c = picked.candidate;
    if (c.job) {
      // adopted before, or launched with remote-debug: nothing to do but attach
      this.log.info(`pid ${c.pid} already is job ${c.job}`);
      await this.host.refresh();
      await this.offerAttach(c.job, vscode.l10n.t('Remote Debug: pid {0} already is job {1}.', c.pid, c.job));
      return;
    }
    if (!c.adoptable) {
      throw new Error(vscode.l10n.t('cannot adopt pid {0}: {1}', c.pid, c.reason ?? ''));
    }
    const args = ['adopt', '--pid', String(c.pid), '--json'];
    const out = await this.runAdopt(args, vscode.l10n.t('Remote Debug: adopting pid {0}', c.pid), 300_000);
    if (out === undefined) {
      return;
    }
    await this.adopted(parseAdoptResult(out), { pid: c.pid });
  }

  /** Adopt Job… on a SageMaker job's row that is not debuggable (from the palette: a pick of those jobs). */
  async adoptJob(node?: TreeNode): Promise<void> {
    let job = node && node.kind !== 'message' ? node.job : undefined;
    if (!job) {
      await this.host.refresh();
      const jobs = this.model.running().filter((e) => isAdoptableJob(e.info)).map((e) => e.info.name);
      if (jobs.length === 0) {
        await vscode.window.showInformationMessage(vscode.l10n.t('Remote Debug: no running SageMaker job without remote debugging to adopt.'));
        return;
      }
      job = jobs.length === 1 ? jobs[0] : await vscode.window.showQuickPick(jobs, { placeHolder: vscode.l10n.t('Adopt which SageMaker job?') });
      if (!job) {
        return;
      }
    }
    const out = await this.runAdopt(['adopt', job, '--json'], vscode.l10n.t('Remote Debug: adopting {0}', job), 600_000);
    if (out === undefined) {
      return;
    }
    await this.adopted(parseAdoptResult(out), { job });
  }

  /** `remote-debug adopt ...` under a progress notification; undefined when this CLI has no `adopt` (said here). */
  private async runAdopt(args: string[], title: string, timeoutMs: number): Promise<string | undefined> {
    try {
      const result = await withCancellableProgress(title, (signal) => this.cli.run(args, { timeoutMs, signal }));
      return result.stdout;
    } catch (err) {
      if (err instanceof CliError && err.unknownCommand) {
        const upgrade = vscode.l10n.t('Upgrade the CLI');
        const choice = await vscode.window.showInformationMessage(
          vscode.l10n.t('Remote Debug: this remote-debug CLI cannot adopt a running process (it has no "adopt" command). Upgrade it, then try again.'),
          upgrade,
        );
        if (choice === upgrade) {
          await vscode.commands.executeCommand('remoteDebug.installCli');
        }
        return undefined;
      }
      throw err;
    }
  }

  private async adopted(result: AdoptResult, what: { pid?: number; job?: string }): Promise<void> {
    const source = what.pid !== undefined ? `pid ${what.pid}` : `job ${what.job}`;
    this.log.info(
      `${result.already ? `${source} was already adopted as` : `adopted ${source} as`} job ${result.job}: ` +
        `${result.ranks.length} rank(s) on ${result.nodes.join(', ') || '?'}`,
    );
    for (const r of result.ranks) {
      this.log.info(`[${result.job}] rank ${r.rank} (pid ${r.pid} on ${r.node || '?'}): ${r.state}${r.note ? `: ${r.note}` : ''}`);
    }
    await this.host.refresh();
    await this.offerAttach(result.job, adoptedMessage(result, what));
  }

  private async offerAttach(job: string, message: string): Promise<void> {
    const attach = vscode.l10n.t('Attach All Ranks');
    const choice = await vscode.window.showInformationMessage(message, attach);
    if (choice === attach) {
      // the view's own Attach All Ranks for that job: where its code is, then the attach process and the sessions
      await this.host.attachAllRanks({ kind: 'job', job });
    }
  }
}
