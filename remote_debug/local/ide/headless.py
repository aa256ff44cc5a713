"""``attach --headless``: the built-in DAP client plays the IDE, one session per rank.

The ranks are exposed as for VS Code (and launch.json is written as for VS Code, so a real IDE can
take over); each new rank gets a :func:`headless.debug_rank` session in a thread of its own.
"""

from __future__ import annotations

import threading
from pathlib import Path

from remote_debug.local import events
from remote_debug.local.headless import HeadlessPlan, RankReport, debug_rank
from remote_debug.local.ide.base import RankForward
from remote_debug.local.ide.vscode import VsCodeIde
from remote_debug.spec import LOOPBACK

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

    def ranks_ready(self, forwards: list[RankForward]) -> None:
        for forward in forwards:
            self._start(forward)

    def rank_held(self, forward: RankForward) -> None:
        """A held rank whose session has finished gets a new one, which sees it stopped at the
        exception (a rank not forwarded yet gets one when it is)."""
        session = self._sessions.get(forward.rank)
        if not forward.local_port or (session is not None and session.is_alive()):
            return  # not exposed, or its session is still attached: the stop arrives there
        self._start(forward)

    def _start(self, forward: RankForward) -> None:
        def run() -> None:
            report = debug_rank(
                forward.rank,
                forward.node,
                LOOPBACK,
                forward.local_port,
                self.plan,
                path_mappings=[(str(self.workspace), forward.code_dir)],
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
