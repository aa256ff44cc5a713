// Which jobs this workspace had attached, so they come back after a window reload.
//
// A reload ends the extension host, and with it the attach processes (their tunnels) and every debug session.
// What was attached is kept in workspaceState: the job, its ranks, the workspace folder and the local root of its
// path mappings.  On activation the jobs that still run are attached again (remoteDebug.reattachAfterReload), or
// offered.  A job leaves the memory when the user detaches it, when it ends, or when its attach fails.

import * as vscode from 'vscode';

export const ATTACHED_JOBS_KEY = 'remoteDebug.attachedJobs';

export interface RememberedAttach {
  job: string;
  /** 'all', or the ranks asked for (every attach of the job adds its ranks). */
  ranks: 'all' | number[];
  /** The workspace folder's URI (a string: Mementos hold JSON). */
  folder: string;
  localRoot?: string;
}

function valid(item: unknown): item is RememberedAttach {
  const o = item as Partial<RememberedAttach> | null;
  return (
    !!o &&
    typeof o.job === 'string' &&
    typeof o.folder === 'string' &&
    (o.ranks === 'all' || (Array.isArray(o.ranks) && o.ranks.every((r) => Number.isInteger(r)))) &&
    (o.localRoot === undefined || typeof o.localRoot === 'string')
  );
}

/** The union of two rank selections ('all' absorbs any list). */
export function mergeRanks(a: 'all' | number[], b: 'all' | number[]): 'all' | number[] {
  if (a === 'all' || b === 'all') {
    return 'all';
  }
  return [...new Set([...a, ...b])].sort((x, y) => x - y);
}

export class AttachMemory {
  constructor(private readonly state: Pick<vscode.Memento, 'get' | 'update'>) {}

  list(): RememberedAttach[] {
    const raw = this.state.get<unknown>(ATTACHED_JOBS_KEY);
    return Array.isArray(raw) ? raw.filter(valid) : [];
  }

  get(job: string): RememberedAttach | undefined {
    return this.list().find((r) => r.job === job);
  }

  /** The job was attached (these ranks, undefined: all): remembered, its earlier ranks kept. */
  async remember(entry: { job: string; ranks: number[] | undefined; folder: vscode.Uri; localRoot?: string }): Promise<void> {
    const all = this.list();
    const old = all.find((r) => r.job === entry.job);
    const ranks = entry.ranks === undefined ? 'all' : entry.ranks;
    const item: RememberedAttach = {
      job: entry.job,
      ranks: old ? mergeRanks(old.ranks, ranks) : ranks,
      folder: entry.folder.toString(),
      ...(entry.localRoot ?? old?.localRoot ? { localRoot: entry.localRoot ?? old?.localRoot } : {}),
    };
    await this.state.update(ATTACHED_JOBS_KEY, [...all.filter((r) => r.job !== entry.job), item]);
  }

  async forget(job: string): Promise<void> {
    const all = this.list();
    if (all.some((r) => r.job === job)) {
      await this.state.update(
        ATTACHED_JOBS_KEY,
        all.filter((r) => r.job !== job),
      );
    }
  }
}
