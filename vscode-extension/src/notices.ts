// One notification per job and kind instead of a toast per rank.
//
// At 64 ranks one NCCL timeout fails every rank within seconds, and a dropped tunnel ends every session on the
// node: a toast each is a wall the user must click away.  What happens to ranks within a short while is gathered
// and said once: "Remote Debug (job): 3 ranks failed: 1, 4, 7", with the action that helps.

import * as vscode from 'vscode';

import { rankRanges } from './rankPicker';

export type NoticeKind = 'rank-failed' | 'warning' | 'session-lost' | 'session-not-started';

export interface Notice {
  job: string;
  kind: NoticeKind;
  rank?: number;
  node?: string;
  message?: string;
  /** rank-failed: the rank is held for a post-mortem debugger. */
  held?: boolean;
  /** rank-failed: its failure came first in the job (the others follow from it): it is named first. */
  rootCause?: boolean;
}

export type NoticeAction = 'show-output' | 'attach-failed' | 'reattach';

export interface NoticeSummary {
  severity: 'error' | 'warning';
  text: string;
  actions: Array<{ title: string; action: NoticeAction }>;
}

function ranksPhrase(ranks: number[]): string {
  const sorted = [...new Set(ranks)].sort((a, b) => a - b);
  return rankRanges(sorted);
}

function count(n: number, one: string, many: string): string {
  return n === 1 ? one : many.replace('{n}', String(n));
}

/** What one batch of a job's notices of one kind says. */
export function summarize(notices: Notice[]): NoticeSummary {
  const { job, kind } = notices[0];
  const ranks = notices.flatMap((n) => (n.rank === undefined ? [] : [n.rank]));
  const showOutput = { title: vscode.l10n.t('Show Output'), action: 'show-output' as const };
  switch (kind) {
    case 'rank-failed': {
      const held = notices.some((n) => n.held);
      // the root cause first: in a cascade the rank that failed first says why, not the one reported first
      const first = notices.find((n) => n.rootCause) ?? notices[0];
      const why = first.message ?? vscode.l10n.t('uncaught exception');
      const text =
        notices.length === 1
          ? vscode.l10n.t('Remote Debug ({0}): rank {1} on {2} failed: {3}', job, String(first.rank), first.node ?? '?', why)
          : vscode.l10n.t('Remote Debug ({0}): {1} ranks failed: {2} (rank {3}: {4})', job, String(notices.length), ranksPhrase(ranks), String(first.rank), why);
      const heldText = held ? vscode.l10n.t(' — held for a post-mortem: attach to see the exception') : '';
      return {
        severity: 'error',
        text: text + heldText,
        actions: held ? [{ title: vscode.l10n.t('Attach Failed Ranks'), action: 'attach-failed' }, showOutput] : [showOutput],
      };
    }
    case 'warning': {
      const messages = [...new Set(notices.map((n) => n.message ?? ''))];
      const text =
        messages.length === 1
          ? vscode.l10n.t('Remote Debug ({0}): {1}', job, messages[0]) + (notices.length > 1 ? ` (×${notices.length})` : '')
          : vscode.l10n.t('Remote Debug ({0}): {1} warnings: {2} (and {3} more in the output)', job, String(notices.length), messages[0], String(messages.length - 1));
      return { severity: 'warning', text, actions: messages.length > 1 ? [showOutput] : [] };
    }
    case 'session-lost':
      return {
        severity: 'warning',
        text: vscode.l10n.t(
          'Remote Debug ({0}): the debug {1} ended when the connection dropped; {2} attached again once the tunnel is back.',
          job,
          count(ranks.length, vscode.l10n.t('session of rank {0}', ranksPhrase(ranks)), vscode.l10n.t('sessions of ranks {0}', ranksPhrase(ranks))),
          count(ranks.length, vscode.l10n.t('it is'), vscode.l10n.t('they are')),
        ),
        actions: [{ title: vscode.l10n.t('Re-attach Now'), action: 'reattach' }],
      };
    case 'session-not-started':
      return {
        severity: 'error',
        text: vscode.l10n.t(
          'Remote Debug ({0}): could not start the debug {1}.',
          job,
          count(ranks.length, vscode.l10n.t('session of rank {0}', ranksPhrase(ranks)), vscode.l10n.t('sessions of ranks {0}', ranksPhrase(ranks))),
        ),
        actions: [showOutput],
      };
  }
}

/** setTimeout / clearTimeout: the tests pass a clock they advance by hand. */
export interface Scheduler {
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

const timers: Scheduler = {
  // unref'd: a notice still gathering never holds the process open (tests, a shutting-down extension host)
  setTimeout: (fn, ms) => setTimeout(fn, ms).unref(),
  clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout),
};

/** How long a job's notices gather before they are said: a crash cascade or a tunnel drop fits in. */
export const NOTICE_DELAY_MS = 1500;

export class NoticeBatcher {
  private pending: Notice[] = [];
  private timer: unknown;

  constructor(
    private readonly show: (summary: NoticeSummary, job: string) => void,
    private readonly scheduler: Scheduler = timers,
    private readonly delayMs = NOTICE_DELAY_MS,
  ) {}

  add(notice: Notice): void {
    this.pending.push(notice);
    if (this.timer === undefined) {
      this.timer = this.scheduler.setTimeout(() => this.flush(), this.delayMs);
    }
  }

  /** Forget what has gathered of a job's `kind` (a lost session's notice once the job itself ended). */
  drop(job: string, kind: NoticeKind): void {
    this.pending = this.pending.filter((n) => n.job !== job || n.kind !== kind);
  }

  /** Say what has gathered now: one notification per job and kind, in the order they first came. */
  flush(): void {
    if (this.timer !== undefined) {
      this.scheduler.clearTimeout(this.timer);
      this.timer = undefined;
    }
    const groups = new Map<string, Notice[]>();
    for (const n of this.pending.splice(0)) {
      const k = `${n.job}\u0000${n.kind}`;
      groups.set(k, [...(groups.get(k) ?? []), n]);
    }
    for (const group of groups.values()) {
      this.show(summarize(group), group[0].job);
    }
  }

  dispose(): void {
    if (this.timer !== undefined) {
      this.scheduler.clearTimeout(this.timer);
      this.timer = undefined;
    }
    this.pending = [];
  }
}
