// Many ranks, one debugger: Continue / Pause / Step Over / Detach All Ranks.
//
// The attach (`remote-debug attach JOB --json`) carries every rank's debug session through its forwards and keeps
// the ranks together (all-stop: one rank stops, every rank is paused); `remote-debug ranks ACTION JOB --json` asks
// that running attach to act on every rank at once and prints what it reached (GroupReply).  These commands run it
// for the job of the focused debug session, the Call Stack item, the Jobs view's item, or the one attached job;
// the job's own debug session (jobSession.ts) runs the same actions from its Pause / Continue / Step Over / Stop.

import * as vscode from 'vscode';

import type { AttachManager } from './attach';
import { Cli, CliError } from './cli';
import { rankTag } from './debugConfig';
import { GROUP_ACTION_TITLES, GroupAction, GroupReply, parseJsonDocument, RankInGroup, RankPhase } from './events';
import { parentTag } from './jobSession';
import { LineSink, Logger, logger } from './log';
import { formatRankRanges } from './ranks';

/** The command of each group action (package.json contributes them, with their keybindings). */
export const GROUP_COMMANDS: Record<GroupAction, string> = {
  continue: 'remoteDebug.continueAllRanks',
  pause: 'remoteDebug.pauseAllRanks',
  step: 'remoteDebug.stepOverAllRanks',
  detach: 'remoteDebug.detachAllRanks',
};

/** How long one `ranks ACTION` may take: the attach answers once the action went out to every rank. */
const GROUP_TIMEOUT_MS = 60_000;

export function groupArgs(action: GroupAction, job: string): string[] {
  return ['ranks', action, job, '--json'];
}

const PHASES: ReadonlySet<string> = new Set<RankPhase>(['running', 'stopped', 'pausing', 'stepping']);

/** `ranks ACTION JOB --json`'s document, read tolerantly (what a newer CLI adds is ignored). */
export function parseGroupReply(raw: unknown): GroupReply {
  const o = raw && typeof raw === 'object' && !Array.isArray(raw) ? (raw as Record<string, unknown>) : undefined;
  if (!o || typeof o.job !== 'string' || typeof o.action !== 'string' || !Array.isArray(o.ranks)) {
    throw new Error('`remote-debug ranks --json` did not print what it reached (job, action, ranks)');
  }
  const status = (Array.isArray(o.status) ? o.status : []).flatMap((item): RankInGroup[] => {
    const s = item && typeof item === 'object' ? (item as Record<string, unknown>) : undefined;
    return s && typeof s.rank === 'number'
      ? [
          {
            rank: s.rank,
            phase: (typeof s.phase === 'string' && PHASES.has(s.phase) ? s.phase : 'running') as RankPhase,
            reason: typeof s.reason === 'string' ? s.reason : '',
            by_group: s.by_group === true,
          },
        ]
      : [];
  });
  return {
    job: o.job,
    action: o.action,
    attaches: typeof o.attaches === 'number' ? o.attaches : 1,
    ranks: o.ranks.filter((r): r is number => typeof r === 'number'),
    status,
  };
}

/** `Continue All: ranks 0-3` (the output channel's line for a reply). */
export function describeGroupReply(reply: GroupReply): string {
  const title = GROUP_ACTION_TITLES[reply.action as GroupAction] ?? reply.action;
  const reached = reply.ranks.length
    ? `rank${reply.ranks.length === 1 ? '' : 's'} ${formatRankRanges(reply.ranks)}`
    : 'no rank (none was in a state it applies to)';
  const waiting = reply.status.filter((s) => s.phase === 'pausing' || s.phase === 'stepping').map((s) => s.rank);
  return `${title}: ${reached}${waiting.length ? `; still on their way: ${formatRankRanges(waiting)}` : ''}`;
}

/**
 * Run `remote-debug ranks ACTION JOB --json`.  Rejects with one line: the CLI's own (e.g. no attach of the job
 * runs), or what an older CLI without the command needs.
 */
export async function runGroupAction(cli: Cli, job: string, action: GroupAction): Promise<GroupReply> {
  try {
    return parseGroupReply(parseJsonDocument((await cli.run(groupArgs(action, job), { timeoutMs: GROUP_TIMEOUT_MS })).stdout));
  } catch (err) {
    if (err instanceof CliError && err.unknownCommand) {
      throw new Error(
        vscode.l10n.t(
          '{0} needs a newer remote-debug CLI (this one has no "ranks" command): pip install -U remote-debug-training',
          GROUP_ACTION_TITLES[action],
        ),
      );
    }
    throw err;
  }
}

/** The job a debug session belongs to, when it is one of ours (a rank's, or the job's own). */
export function jobOfSession(session: { configuration?: { [key: string]: unknown } } | undefined): string | undefined {
  return rankTag(session?.configuration)?.job ?? parentTag(session?.configuration)?.job;
}

/** What the commands need of AttachManager. */
export type GroupHost = Pick<AttachManager, 'activeJobs' | 'isAttached' | 'jobOfSessionId' | 'groupAction' | 'detachAfterGroup' | 'sessionFor'>;

/** Continue / Pause / Step Over / Detach All Ranks, and the Jobs view's click on a rank. */
export class GroupCommands {
  private readonly log: Logger;

  constructor(
    private readonly host: GroupHost,
    log: LineSink,
  ) {
    this.log = logger(log);
  }

  register(): vscode.Disposable[] {
    const out = (Object.keys(GROUP_COMMANDS) as GroupAction[]).map((action) =>
      vscode.commands.registerCommand(GROUP_COMMANDS[action], (...args: unknown[]) => this.run(action, args)),
    );
    out.push(
      vscode.commands.registerCommand('remoteDebug.focusRankSession', (job: unknown, rank: unknown) => this.focusRankSession(job, rank)),
      // the toolbar's and the keybindings' `when`: the focused debug session is one of ours
      vscode.debug.onDidChangeActiveDebugSession((s) => void this.setFocusedContext(s)),
    );
    void this.setFocusedContext(vscode.debug.activeDebugSession);
    return out;
  }

  private async setFocusedContext(session: vscode.DebugSession | undefined): Promise<void> {
    await vscode.commands.executeCommand('setContext', 'remoteDebug.debugSessionFocused', jobOfSession(session) !== undefined);
  }

  /** Run one group action; every error is one message (never thrown to the workbench). */
  async run(action: GroupAction, args: unknown[] = []): Promise<void> {
    try {
      const job = await this.jobFor(args, action);
      if (!job) {
        return;
      }
      if (action === 'detach') {
        await this.host.detachAfterGroup(job);
      } else {
        await this.host.groupAction(job, action);
      }
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      this.log.error(`${GROUP_ACTION_TITLES[action]}: ${message}`);
      const showOutput = vscode.l10n.t('Show Output');
      const choice = await vscode.window.showErrorMessage(vscode.l10n.t('Remote Debug: {0}', message), showOutput);
      if (choice === showOutput) {
        await vscode.commands.executeCommand('remoteDebug.showOutput');
      }
    }
  }

  /**
   * Whose ranks: the Jobs view's item (a job, node or rank), the Call Stack's item (its session id, as the
   * workbench passes it to `debug/callstack/context` commands), the focused debug session, else the one attached
   * job, else a pick of the attached jobs.  Undefined: the pick was dismissed.
   */
  async jobFor(args: unknown[], action: GroupAction): Promise<string | undefined> {
    for (const arg of args) {
      if (arg && typeof arg === 'object' && 'kind' in arg && 'job' in arg && typeof arg.job === 'string') {
        return arg.job;
      }
      const id = typeof arg === 'string' ? arg : arg && typeof arg === 'object' && 'sessionId' in arg ? arg.sessionId : undefined;
      const job = typeof id === 'string' ? this.host.jobOfSessionId(id) : undefined;
      if (job) {
        return job;
      }
    }
    const focused = jobOfSession(vscode.debug.activeDebugSession);
    if (focused && this.host.isAttached(focused)) {
      return focused;
    }
    const attached = this.host.activeJobs();
    if (attached.length === 0) {
      throw new Error(vscode.l10n.t('{0}: no job is attached (Attach All Ranks first)', GROUP_ACTION_TITLES[action]));
    }
    if (attached.length === 1) {
      return attached[0];
    }
    return vscode.window.showQuickPick(attached, { placeHolder: vscode.l10n.t('{0} of which job?', GROUP_ACTION_TITLES[action]) });
  }

  /**
   * The Jobs view's click on a rank with a debug session.  No stable API focuses a given debug session
   * (`vscode.debug.activeDebugSession` is read-only; `workbench.action.debug.focusProcess` wants the workbench's own
   * session object), so this opens the workbench's session picker ("debug consoles") filtered to the rank's
   * session: Enter focuses it in the Call Stack, with its frame, variables and Debug Console.
   */
  async focusRankSession(job: unknown, rank: unknown): Promise<void> {
    const session = typeof job === 'string' && typeof rank === 'number' ? this.host.sessionFor(job, rank) : undefined;
    if (!session) {
      return;
    }
    await vscode.commands.executeCommand('workbench.action.quickOpen', `debug consoles ${session.name}`);
  }
}
