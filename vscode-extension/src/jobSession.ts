// The job's own debug session: the parent of its rank sessions in the Call Stack.
//
// 64 rank sessions side by side are 64 top-level rows; as children of one "Remote Debug: <job>" session they fold
// into one row per job (and `compact` hides the parent while it has a single rank).  The parent debugs nothing:
// its adapter is inline (DebugAdapterInlineImplementation) and only answers what VS Code asks of any session until
// it is disconnected.  AttachManager owns the parents: one per attached job, started with the first rank session
// and ended with the job's attach; stopping it from the Call Stack detaches the job (its ranks and tunnels).
//
// The rank sessions are started with `lifecycleManagedByParent: false`: with `true`, VS Code hands every stop of a
// rank session to the parent (DebugSession.disconnect: `if (lifecycleManagedByParent && parentSession)
// parentSession.disconnect()`), `vscode.debug.stopDebugging(rank)` included, so Detach on one rank, or a re-run
// replacing one rank's process, would end the whole job's debugging.

import * as vscode from 'vscode';

import { jobSessionName, OWN_DEBUG_TYPE } from './debugConfig';

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

export interface ParentAnswer {
  success: boolean;
  body?: unknown;
  message?: string;
}

/** What the parent answers to each request: enough for the workbench, nothing to debug. */
export function parentAnswer(command: string): ParentAnswer {
  switch (command) {
    case 'initialize':
      // restart: the job's Restart is answered here (AttachManager starts its rank sessions again), not by a new session
      return { success: true, body: { supportsConfigurationDoneRequest: true, supportsRestartRequest: true } };
    case 'threads':
      return { success: true, body: { threads: [] } };
    case 'setBreakpoints':
    case 'setFunctionBreakpoints':
    case 'setDataBreakpoints':
    case 'setInstructionBreakpoints':
      // no data for this session: the editor shows each breakpoint as its rank sessions verify it
      return { success: true, body: { breakpoints: [] } };
    case 'evaluate':
      return {
        success: false,
        message: vscode.l10n.t("This is the job's session: select a rank's session (rank N · node · job) in the Call Stack to evaluate there."),
      };
    default:
      return { success: true, body: {} };
  }
}

export class JobParentAdapter implements vscode.DebugAdapter {
  private readonly emitter = new vscode.EventEmitter<vscode.DebugProtocolMessage>();
  readonly onDidSendMessage = this.emitter.event;
  private seq = 1;
  private disposed = false;

  handleMessage(message: vscode.DebugProtocolMessage): void {
    const request = message as Partial<DapRequest>;
    if (request.type !== 'request' || typeof request.command !== 'string') {
      return;
    }
    const command = request.command;
    const answer = parentAnswer(command);
    // answer after the workbench's send returns, as a real adapter's reply would arrive
    queueMicrotask(() => {
      this.send({ type: 'response', request_seq: request.seq, command, ...answer });
      if (command === 'initialize') {
        this.send({ type: 'event', event: 'initialized' });
      }
    });
  }

  private send(message: object): void {
    if (!this.disposed) {
      this.emitter.fire({ seq: this.seq++, ...message } as vscode.DebugProtocolMessage);
    }
  }

  dispose(): void {
    this.disposed = true;
    this.emitter.dispose();
  }
}
