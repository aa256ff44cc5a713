// Attach Rank…'s quick pick, made for 8 nodes x 8 ranks: "All ranks" first, then per node one item that
// picks the whole node and the node's ranks beneath it, so a node is one click and a single rank is still there.

import * as vscode from 'vscode';

import { RANK_STATE_LABEL, rankCounts, RankEntry } from './model';
import { naturalCompare } from './tree';

export interface RankPickItem extends vscode.QuickPickItem {
  /** What picking the item means: every rank of the job, or these ranks (undefined: a separator). */
  ranks?: 'all' | number[];
}

/** `0-7`, `0, 2-4`: a node's ranks, short. */
export function rankRanges(ranks: number[]): string {
  const out: string[] = [];
  for (let i = 0; i < ranks.length; ) {
    let j = i;
    while (j + 1 < ranks.length && ranks[j + 1] === ranks[j] + 1) {
      j++;
    }
    out.push(j === i ? `${ranks[i]}` : `${ranks[i]}-${ranks[j]}`);
    i = j + 1;
  }
  return out.join(', ');
}

/** The items for the job's ranks (`JobsModel.allRanks`), nodes in their natural order. */
export function rankPickItems(ranks: RankEntry[]): RankPickItem[] {
  const byNode = new Map<string, RankEntry[]>();
  for (const r of ranks) {
    byNode.set(r.node, [...(byNode.get(r.node) ?? []), r]);
  }
  const items: RankPickItem[] = [{ label: ranks.length ? `All ranks (${ranks.length})` : 'All ranks', ranks: 'all' }];
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
