// A rank held after a failure (`launch --hold-on-failure`), said when the job listing first shows it.
//
// While attached, the attach says it (`rank-failed`, notices.ts).  Without an attach a held crash was invisible
// until someone attached: the listing's `held_ranks` now make one notification per hold, with the seconds its hold
// has left and an Attach button (Attach Paused and Failed Ranks), the rank that failed first (the root cause) named.

import * as vscode from 'vscode';

import { HeldRank, isRunning, JobInfo } from './events';
import { rankRanges } from './rankPicker';

/** What one job's new holds say: undefined when none of its failed ranks is held. */
export function heldNotice(info: Pick<JobInfo, 'name' | 'held_ranks'>, ranks: HeldRank[]): string | undefined {
  const failed = ranks.filter((h) => h.held_for === null || h.held_for === undefined);
  if (failed.length === 0) {
    return undefined;
  }
  const first = failed.find((h) => h.root_cause) ?? [...failed].sort((a, b) => a.rank - b.rank)[0];
  const why = first.error ?? vscode.l10n.t('uncaught exception');
  const lefts = failed.flatMap((h) => (h.seconds_left === null ? [] : [h.seconds_left]));
  const left = lefts.length ? vscode.l10n.t(', {0} s left', Math.round(Math.min(...lefts))) : '';
  const gang = ranks.length - failed.length;
  const others = gang > 0 ? vscode.l10n.t(' ({0} other ranks held with it)', gang) : '';
  const what =
    failed.length === 1
      ? vscode.l10n.t('rank {0} on {1} failed: {2}', first.rank, first.node || '?', why)
      : vscode.l10n.t('ranks {0} failed (rank {1} first: {2})', rankRanges(failed.map((h) => h.rank).sort((a, b) => a - b)), first.rank, why);
  return vscode.l10n.t('Remote Debug ({0}): {1}{2} — held for a post-mortem debugger{3}.', info.name, what, others, left);
}

export class HeldNotices {
  /** Holds already said (job#rank#held_for), also those an attach said: none is said twice. */
  private readonly said = new Set<string>();
  /** The failed ranks (job#rank) a notification named: the user knows, an attach's `rank-failed` need not say it again. */
  private readonly told = new Set<string>();

  /** Whether a notification named rank `rank` of `job` as failed and held. */
  toldOf(job: string, rank: number): boolean {
    return this.told.has(`${job}#${rank}`);
  }

  /**
   * Say the holds the listing shows for the first time, one notification per job; `attached`: jobs whose attach
   * says its own (their holds are only noted).
   */
  check(jobs: JobInfo[], attached: (job: string) => boolean): void {
    for (const info of jobs) {
      if (!isRunning(info)) {
        continue;
      }
      const fresh = info.held_ranks.filter((h) => !this.said.has(`${info.name}#${h.rank}#${h.held_for ?? ''}`));
      fresh.forEach((h) => this.said.add(`${info.name}#${h.rank}#${h.held_for ?? ''}`));
      const text = fresh.length && !attached(info.name) ? heldNotice(info, fresh) : undefined;
      if (text) {
        fresh.filter((h) => h.held_for === null || h.held_for === undefined).forEach((h) => this.told.add(`${info.name}#${h.rank}`));
        void this.show(info.name, text);
      }
    }
  }

  private async show(job: string, text: string): Promise<void> {
    const attach = vscode.l10n.t('Attach');
    const choice = await vscode.window.showErrorMessage(text, attach);
    if (choice === attach) {
      await vscode.commands.executeCommand('remoteDebug.attachStuckRanks', { kind: 'job', job });
    }
  }
}
