// The launch.json form of the remote-debug type that names a job instead of a port:
//
//   {"type": "remote-debug", "request": "attach", "name": "…", "job": "${command:remoteDebug.pickJob}", "ranks": "all"}
//
// F5 on it runs the same attach as the view's Attach All Ranks (AttachManager): the CLI forwards each rank's
// debugger and one session per rank starts, under the job's session.  The ports are only known once the CLI has
// forwarded them, which is why a launch.json cannot name them and the per-rank `connect` form is what we generate.

import * as vscode from 'vscode';

import { OWN_DEBUG_TYPE, PathMapping, validMappings } from './debugConfig';
import { parseRankValue, RankListError } from './ranks';

/** The command a launch.json names in `${command:…}` to ask for a running job. */
export const PICK_JOB_COMMAND = 'remoteDebug.pickJob';

export interface JobAttachConfiguration {
  job: string;
  /** undefined: every rank. */
  ranks: number[] | undefined;
  /** The configuration's own (they win over the settings); undefined: the settings'. */
  pathMappings?: PathMapping[];
  justMyCode?: boolean;
}

/** A configuration that names a job (rather than a forwarded port in `connect`). */
export function isJobConfiguration(config: { [key: string]: unknown }): boolean {
  return config.job !== undefined;
}

/**
 * `ranks` as launch.json may say it: "all" (or absent), "0,2", "0-3, 8" (the CLI's grammar, ranks.ts), [0, 2].
 * Returns the sorted ranks, undefined for all, or a one-line message saying what is wrong.
 */
export function parseRanksValue(value: unknown): number[] | undefined | { error: string } {
  try {
    return parseRankValue(value);
  } catch (e) {
    if (!(e instanceof RankListError)) {
      throw e;
    }
    return {
      error: vscode.l10n.t(
        '"ranks" must be "all", a list like "0,2" or "0-3,8", or an array of rank numbers like [0, 2] (got {0})',
        JSON.stringify(value),
      ),
    };
  }
}

/** A job-form configuration after VS Code substituted its variables, checked; or a one-line message. */
export function parseJobConfiguration(config: { [key: string]: unknown }): JobAttachConfiguration | { error: string } {
  const job = typeof config.job === 'string' ? config.job.trim() : '';
  if (!job) {
    return {
      error: vscode.l10n.t(
        'this remote-debug configuration names no job: set "job" to a job name or to "{0}" (asks for a running job)',
        `\${command:${PICK_JOB_COMMAND}}`,
      ),
    };
  }
  if (job.includes('${')) {
    return { error: vscode.l10n.t('"job" is still {0}: VS Code could not substitute it (the command or variable is unknown)', JSON.stringify(job)) };
  }
  if (config.connect !== undefined) {
    return { error: vscode.l10n.t('a remote-debug configuration has either "job" (attach to its ranks) or "connect" (one forwarded rank), not both') };
  }
  const ranks = parseRanksValue(config.ranks);
  if (ranks !== undefined && !Array.isArray(ranks)) {
    return ranks;
  }
  const out: JobAttachConfiguration = { job, ranks };
  if (config.pathMappings !== undefined) {
    const mappings = validMappings(config.pathMappings);
    if (mappings.length === 0) {
      return { error: vscode.l10n.t('"pathMappings" needs entries with both "localRoot" and "remoteRoot"') };
    }
    out.pathMappings = mappings;
  }
  if (typeof config.justMyCode === 'boolean') {
    out.justMyCode = config.justMyCode;
  }
  return out;
}

export function isConfigurationError(value: unknown): value is { error: string } {
  return typeof value === 'object' && value !== null && !Array.isArray(value) && typeof (value as { error?: unknown }).error === 'string';
}

/** What F5 gets without a launch.json once the user chose this debugger: attach every rank of a picked job. */
export function defaultJobConfiguration(): { type: string; request: 'attach'; name: string; job: string; ranks: string } {
  return {
    type: OWN_DEBUG_TYPE,
    request: 'attach',
    name: vscode.l10n.t('Remote Debug: attach to a job'),
    job: `\${command:${PICK_JOB_COMMAND}}`,
    ranks: 'all',
  };
}

/** The Run and Debug view's dynamic entry for a running job. */
export function dynamicJobConfiguration(job: string): { type: string; request: 'attach'; name: string; job: string; ranks: string } {
  return { type: OWN_DEBUG_TYPE, request: 'attach', name: vscode.l10n.t('Attach all ranks: {0}', job), job, ranks: 'all' };
}
