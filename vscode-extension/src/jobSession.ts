// The job's own debug session: the parent of its rank sessions in the Call Stack.
//
// 64 rank sessions side by side are 64 top-level rows; as children of one "Remote Debug: <job>" session they fold
// into one row per job (and `compact` hides the parent while it has a single rank).  The parent debugs nothing:
// its adapter is inline (DebugAdapterInlineImplementation) and only answers what VS Code asks of any session until
// it is disconnected.  AttachManager owns the parents: one per attached job, started with the first rank session
// and ended with the job's attach; stopping it from the Call Stack detaches the job (its ranks and tunnels).
//
// It acts on the group: its Pause, Continue, Step Over and Stop (DAP `pause`, `continue`, `next`, `disconnect`) are
// Pause / Continue / Step Over / Detach All Ranks (`remote-debug ranks ACTION JOB`, through ParentGroup).  For the
// debug toolbar to send them it reports one thread, "All ranks": stopped while any rank is stopped (its Continue and
// Step Over then apply), running otherwise (its Pause applies).  Without that thread the toolbar's Pause was enabled
// and did nothing, and it is the session VS Code focuses once every rank runs again.
//
// The rank sessions are started with `lifecycleManagedByParent: false`: with `true`, VS Code hands every stop of a
// rank session to the parent (DebugSession.disconnect: `if (lifecycleManagedByParent && parentSession)
// parentSession.disconnect()`), `vscode.debug.stopDebugging(rank)` included, so Detach on one rank, or a re-run
// replacing one rank's process, would end the whole job's debugging.

import * as vscode from 'vscode';

import { jobSessionName, OWN_DEBUG_TYPE } from './debugConfig';
import type { GroupAction } from './events';

/** The configuration key that marks a parent session (and says whose). */
export const PARENT_KEY = '__remoteDebugParent';

export interface ParentTag {
  job: string;
  /** Which start of the job's parent this is (a job attached, detached and attached again gets a new one). */
  id: string;
}

export function parentConfiguration(job: string, id: string): vscode.DebugConfiguration {
  return { type: OWN_DEBUG_TYPE, request: 'attach', name: jobSessionName(job), [PARENT_KEY]: { job, id } };
}

export function parentTag(configuration: { [key: string]: unknown } | undefined): ParentTag | undefined {
  const tag = configuration?.[PARENT_KEY] as Partial<ParentTag> | undefined;
  return tag && typeof tag.job === 'string' && typeof tag.id === 'string' ? { job: tag.job, id: tag.id } : undefined;
}

/** The options a rank session is started with under its job's session (see above for lifecycleManagedByParent). */
export function childOptions(parent: vscode.DebugSession): vscode.DebugSessionOptions {
  return { parentSession: parent, compact: true, lifecycleManagedByParent: false };
}

interface DapRequest {
  type: 'request';
  seq: number;
  command: string;
}

/** The one thread the job's session reports: every rank of the job. */
export const ALL_RANKS_THREAD = 1;

/** The job's ranks as its session shows them: how many have a debug session, how many of those are stopped. */
export interface RankTally {
  sessions: number;
  stopped: number;
}

/** What the job's session acts through (AttachManager). */
export interface ParentGroup {
  /** Run a group action for the job of this parent (`tag`); reports its own errors, never rejects. */
  act(tag: ParentTag, action: GroupAction): Promise<void>;
  ranks(job: string): RankTally;
  /** Something about some job's ranks changed: the parent asks `ranks` again. */
  onDidChangeRanks(listener: () => void): { dispose(): void };
}

export interface ParentAnswer {
  success: boolean;
  body?: unknown;
  message?: string;
}

/** The requests of the job's session that are group actions. */
const GROUP_REQUESTS: Readonly<Record<string, GroupAction>> = { pause: 'pause', continue: 'continue', next: 'step', disconnect: 'detach' };
/** Steps that only make sense in one rank. */
const ONE_RANK_STEPS = new Set(['stepIn', 'stepOut', 'stepBack', 'reverseContinue', 'goto', 'restartFrame']);

/**
 * What the parent answers to each request: enough for the workbench, nothing to debug.  `group`: it acts on the
 * ranks (reports the "All ranks" thread); without one (no attach behind it) it has no threads.
 */
export function parentAnswer(command: string, group = false): ParentAnswer {
  switch (command) {
    case 'initialize':
      // restart: the job's Restart is answered here (AttachManager starts its rank sessions again), not by a new session
      return { success: true, body: { supportsConfigurationDoneRequest: true, supportsRestartRequest: true } };
    case 'threads':
      return { success: true, body: { threads: group ? [{ id: ALL_RANKS_THREAD, name: vscode.l10n.t('All ranks') }] : [] } };
    case 'continue':
      return { success: true, body: { allThreadsContinued: true } };
    case 'stackTrace':
      return { success: true, body: { stackFrames: [], totalFrames: 0 } };
    case 'scopes':
      return { success: true, body: { scopes: [] } };
    case 'variables':
      return { success: true, body: { variables: [] } };
    case 'setBreakpoints':
    case 'setFunctionBreakpoints':
    case 'setDataBreakpoints':
    case 'setInstructionBreakpoints':
      // no data for this session: the editor shows each breakpoint as its rank sessions verify it
      return { success: true, body: { breakpoints: [] } };
    case 'evaluate':
      return {
        success: false,
        message: vscode.l10n.t("This is the job's session: select a rank's session (rank N · node) in the Call Stack to evaluate there."),
      };
    default:
      if (ONE_RANK_STEPS.has(command)) {
        return {
          success: false,
          message: vscode.l10n.t(
            "This is the job's session: Step Into and Step Out act on one rank (select its session); here Step Over steps every rank.",
          ),
        };
      }
      return { success: true, body: {} };
  }
}

/** How long after its own Continue / Step Over the parent waits for the ranks before it says they are stopped again. */
export const SETTLE_MS = 1000;

export class JobParentAdapter implements vscode.DebugAdapter {
  private readonly emitter = new vscode.EventEmitter<vscode.DebugProtocolMessage>();
  readonly onDidSendMessage = this.emitter.event;
  private seq = 1;
  private disposed = false;
  /** configurationDone came: the workbench listens to the thread's events. */
  private configured = false;
  /** What the workbench was told of the "All ranks" thread. */
  private shown = { stopped: false };
  private settleUntil = 0;
  private settleTimer: NodeJS.Timeout | undefined;
  private readonly subscription: { dispose(): void } | undefined;

  constructor(
    private readonly tag?: ParentTag,
    private readonly group?: ParentGroup,
    private readonly now: () => number = Date.now,
  ) {
    this.subscription = tag && group ? group.onDidChangeRanks(() => this.sync()) : undefined;
  }

  handleMessage(message: vscode.DebugProtocolMessage): void {
    const request = message as Partial<DapRequest>;
    if (request.type !== 'request' || typeof request.command !== 'string') {
      return;
    }
    const command = request.command;
    const acting = this.tag && this.group ? GROUP_REQUESTS[command] : undefined;
    const answer = parentAnswer(command, this.group !== undefined && this.tag !== undefined);
    const respond = () => {
      this.send({ type: 'response', request_seq: request.seq, command, ...answer });
      if (command === 'initialize') {
        this.send({ type: 'event', event: 'initialized' });
      }
    };
    if (acting) {
      // answered once the action went out to every rank: VS Code marks the thread running on a Continue's or Step
      // Over's answer, and waits for a stopped event after a Pause's
      void this.group!.act(this.tag!, acting).finally(() => {
        respond();
        if (acting === 'continue' || acting === 'step') {
          this.shown = { stopped: false };
          this.settleUntil = this.now() + SETTLE_MS;
        }
        this.sync();
      });
      return;
    }
    // answer after the workbench's send returns, as a real adapter's reply would arrive
    queueMicrotask(() => {
      respond();
      if (command === 'configurationDone') {
        this.configured = true;
        this.sync();
      }
    });
  }

  /** Tell the workbench where the "All ranks" thread is now: stopped while any rank is, else running. */
  private sync(): void {
    if (this.disposed || !this.configured || !this.tag || !this.group) {
      return;
    }
    const wait = this.settleUntil - this.now();
    if (wait > 0) {
      // after our own Continue / Step Over the ranks report running one by one: the next state, not each step
      this.settleTimer ??= setTimeout(() => {
        this.settleTimer = undefined;
        this.sync();
      }, wait);
      return;
    }
    const { stopped } = this.group.ranks(this.tag.job);
    if (stopped > 0) {
      if (!this.shown.stopped) {
        this.shown = { stopped: true };
        // One stop, one short description: the Call Stack's badge keeps a session's first stop while it stays
        // stopped (a count would go stale), and a long one hides the job's name.  Each rank's row says its own.
        // preserveFocusHint: the rank that stopped keeps the focus (its frame, its variables).
        this.send({
          type: 'event',
          event: 'stopped',
          body: {
            reason: 'pause',
            description: vscode.l10n.t('ranks paused'),
            threadId: ALL_RANKS_THREAD,
            allThreadsStopped: true,
            preserveFocusHint: true,
          },
        });
      }
    } else if (this.shown.stopped) {
      this.shown = { stopped: false };
      this.send({ type: 'event', event: 'continued', body: { threadId: ALL_RANKS_THREAD, allThreadsContinued: true } });
    }
  }

  private send(message: object): void {
    if (!this.disposed) {
      this.emitter.fire({ seq: this.seq++, ...message } as vscode.DebugProtocolMessage);
    }
  }

  dispose(): void {
    this.disposed = true;
    clearTimeout(this.settleTimer);
    this.subscription?.dispose();
    this.emitter.dispose();
  }
}
