"""``attach --headless``: the built-in DAP client plays the IDE, one session per rank.

The ranks are exposed as for VS Code, through this attach's own forwards; each new rank gets a
:func:`headless.debug_rank` session in a thread of its own.  ``remote-debug attach --headless`` has
no IDE and writes no launch.json (``write_launch_json=False``): it runs alongside an IDE attach to the
same job without moving that one's ports; a rank the IDE is debugging refuses a second debugger, and
the session says so.  (In-process callers such as ``demo`` may still have launch.json written, so
that VS Code can take over.)
"""

from __future__ import annotations

import threading
from pathlib import Path

from remote_debug.contract.spec import LOOPBACK
from remote_debug.laptop.ide.base import RankForward
from remote_debug.laptop.ide.headless_session import HeadlessPlan, RankReport, debug_rank
from remote_debug.laptop.ide.vscode import VsCodeIde
from remote_debug.laptop.wire import events

# how long the end of a job waits for each rank's session to say what it saw
JOIN_SECONDS = 10.0


class HeadlessIde(VsCodeIde):
    def __init__(
        self, job: str, workspace: Path, emit: events.Emit, plan: HeadlessPlan, *, write_launch_json: bool
    ) -> None:
        super().__init__(job, workspace, emit, write_launch_json=write_launch_json)
        self.plan = plan
        self.reports: list[RankReport] = []
        self._lock = threading.Lock()
        self._sessions: dict[int, threading.Thread] = {}
        self._finished: list[threading.Thread] = []
        self._stop = threading.Event()
        # a held rank we debugged ends the job once let go: then how the job ended is the news
        self._held = False

    def ranks_ready(self, forwards: list[RankForward]) -> None:
        for forward in forwards:
            self._start(forward)

    def rank_held(self, forward: RankForward) -> None:
        """A held rank whose session has finished gets a new one, which sees it stopped at the
        exception (a rank not forwarded yet gets one when it is)."""
        if forward.local_port:
            self._held = True
        session = self._sessions.get(forward.rank)
        if not forward.local_port or (session is not None and session.is_alive()):
            return  # not exposed, or its session is still attached: the stop arrives there
        self._start(forward)

    def finished(self) -> bool:
        """Every exposed rank's session is over (its stops done, or it could not attach)."""
        return not self._held and not any(t.is_alive() for t in self._sessions.values())

    def _start(self, forward: RankForward) -> None:
        def run() -> None:
            report = debug_rank(
                forward.rank,
                forward.node,
                LOOPBACK,
                forward.local_port,
                self.plan,
                path_mappings=[(str(self.local_root), forward.code_dir)],
                emit=self.emit,
                stop=self._stop,
            )
            with self._lock:
                self.reports.append(report)

        previous = self._sessions.get(forward.rank)
        if previous is not None:
            self._finished.append(previous)
        thread = threading.Thread(target=run, name=f"dap-rank-{forward.rank}", daemon=True)
        self._sessions[forward.rank] = thread
        thread.start()

    def finish(self) -> list[RankReport]:
        for thread in [*self._finished, *self._sessions.values()]:
            thread.join(timeout=JOIN_SECONDS)
        with self._lock:
            return list(self.reports)

    def close(self) -> None:
        self._stop.set()
