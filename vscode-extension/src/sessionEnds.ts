// Why a rank's debug session ended: asked to (the user, or us), the rank's process ended, or the connection
// went away under it (the SSH tunnel dropped: `remote-debug attach` reconnects it and says `reconnected`).
//
// Seen through the session's DAP tracker, and the first sign wins: VS Code answers a dropped connection with a
// `disconnect` request of its own, but only after the adapter's error; a disconnect the user asked for comes
// before any error (the socket closing after it is no news).
//
// Pure (no vscode import).

export type EndCause = 'asked' | 'debuggee-ended' | 'connection-lost';

export class SessionEnds {
  private readonly first = new Map<string, EndCause>();

  /** We are about to stop this session (Detach, a detach of the job, a re-run's replaced rank). */
  expect(sessionId: string): void {
    this.note(sessionId, 'asked');
  }

  /** The workbench sends the adapter a request. */
  request(sessionId: string, command: string | undefined): void {
    if (command === 'disconnect' || command === 'terminate') {
      this.note(sessionId, 'asked');
    }
  }

  /** The adapter sends the workbench an event. */
  event(sessionId: string, event: string | undefined): void {
    if (event === 'exited' || event === 'terminated') {
      this.note(sessionId, 'debuggee-ended');
    }
  }

  /** The adapter failed or went away (the socket to the rank closed). */
  lost(sessionId: string): void {
    this.note(sessionId, 'connection-lost');
  }

  /** The session has ended: why (undefined: nothing was seen; read as asked, nothing is started again for it). */
  ended(sessionId: string): EndCause | undefined {
    const cause = this.first.get(sessionId);
    this.first.delete(sessionId);
    return cause;
  }

  private note(sessionId: string, cause: EndCause): void {
    if (!this.first.has(sessionId)) {
      this.first.set(sessionId, cause);
    }
  }
}

/** Automatic restarts of a rank's session are capped: one that keeps dropping is left to the Re-attach action. */
export class RestartBudget {
  private readonly times = new Map<string, number[]>();

  constructor(
    private readonly max = 3,
    private readonly windowMs = 5 * 60_000,
    private readonly now: () => number = Date.now,
  ) {}

  /** Whether `key` may be restarted now (and counts it when so). */
  take(key: string): boolean {
    const t = this.now();
    const recent = (this.times.get(key) ?? []).filter((x) => t - x < this.windowMs);
    if (recent.length >= this.max) {
      this.times.set(key, recent);
      return false;
    }
    recent.push(t);
    this.times.set(key, recent);
    return true;
  }

  reset(key: string): void {
    this.times.delete(key);
  }
}
