// Attach Rank…'s quick pick, made for 8 nodes x 8 ranks: "All ranks" first, then per node one item that
// picks the whole node and the node's ranks beneath it, so a node is one click and a single rank is still there.

import * as vscode from 'vscode';

import { RANK_STATE_LABEL, rankCounts, RankEntry } from './model';
import { formatRankRanges } from './ranks';
import { naturalCompare } from './tree';

export interface RankPickItem extends vscode.QuickPickItem {
  /** What picking the item means: every rank of the job, or these ranks (undefined: a separator). */
  ranks?: 'all' | number[];
}

/** `0-7`, `0, 2-4`: ranks, short (the CLI's format, ranks.ts). */
export const rankRanges: (ranks: number[]) => string = formatRankRanges;

/**
 * The ranks that stopped for a debugger and have none: waiting for one before their script runs (`--wait`, the
 * CLI's "waiting"), or failed and held alive for a post-mortem (`held`: the job listing's held_ranks).  A paused
 * rank has a session already.  Attaching just these is what a 64-rank job needs when a few ranks hang or crash.
 */
export function stuckRanks(ranks: RankEntry[], held: Iterable<number> = []): number[] {
  const heldSet = new Set(held);
  const attachedish = new Set(['attaching', 'attached', 'paused']);
  return ranks
    .filter((r) => !attachedish.has(r.state))
    .filter((r) => r.state === 'waiting' || heldSet.has(r.rank) || (r.state === 'failed' && !!r.detail?.startsWith('held')))
    .map((r) => r.rank)
    .sort((a, b) => a - b);
}

/**
 * The items for the job's ranks (`JobsModel.allRanks`), nodes in their natural order; `stuck` (stuckRanks), when
 * any: one item for just those, after "All ranks".
 */
export function rankPickItems(ranks: RankEntry[], stuck: number[] = []): RankPickItem[] {
  const byNode = new Map<string, RankEntry[]>();
  for (const r of ranks) {
    byNode.set(r.node, [...(byNode.get(r.node) ?? []), r]);
  }
  const items: RankPickItem[] = [
    { label: ranks.length ? vscode.l10n.t('All ranks ({0})', ranks.length) : vscode.l10n.t('All ranks'), ranks: 'all' },
  ];
  if (stuck.length) {
    items.push({
      label: vscode.l10n.t('Paused and failed ranks ({0})', stuck.length),
      description: rankRanges(stuck),
      detail: vscode.l10n.t('waiting for a debugger, or held after a failure'),
      ranks: stuck,
    });
  }
  for (const node of [...byNode.keys()].sort(naturalCompare)) {
    const own = byNode.get(node)!.sort((a, b) => a.rank - b.rank);
    const numbers = own.map((r) => r.rank);
    items.push(
      { label: node, kind: vscode.QuickPickItemKind.Separator },
      {
        label: `${node} · rank${numbers.length === 1 ? '' : 's'} ${rankRanges(numbers)}`,
        description: rankCounts(own).join(' · '),
        ranks: numbers,
      },
      ...own.map((r): RankPickItem => ({ label: `rank ${r.rank}`, description: RANK_STATE_LABEL[r.state], ranks: [r.rank] })),
    );
  }
  return items;
}

/**
 * What the picks ask to attach: undefined (all) for "All ranks" or when together they are every rank of the job
 * (`all`), else the sorted union of the picked nodes' and ranks' numbers ([]: nothing).
 */
export function pickedRanks(picked: readonly RankPickItem[], all: number[]): number[] | undefined {
  if (picked.some((p) => p.ranks === 'all')) {
    return undefined;
  }
  const union = new Set(picked.flatMap((p) => (Array.isArray(p.ranks) ? p.ranks : [])));
  if (all.length > 0 && all.every((r) => union.has(r))) {
    return undefined;
  }
  return [...union].sort((a, b) => a - b);
}
