"""What the rank group (:mod:`rank_group`) needs of one rank's debug session, whatever protocol it speaks, and
the IDE's doings it hears of.  The adapters: :mod:`group_dap` (VS Code and headless ranks) and :mod:`group_pydevd`
(PyCharm's ranks)."""

from __future__ import annotations

from enum import Enum
from typing import Any, Protocol


class RankSession(Protocol):
    """What the group does in one rank's debug session, whatever protocol it speaks.  Two sessions of one
    rank are told apart by ``==`` (an adapter compares equal to another adapter of the same connection)."""

    def pause_all(self) -> None:
        """Suspend every thread of the rank."""

    def continue_all(self, thread: Any) -> None:
        """Resume the rank (``thread``: its last stop's, where the protocol asks for one)."""

    def step_main(self, fallback: Any) -> None:
        """Step over in the rank's main thread (``fallback``: the last stop's thread, if there is no main)."""

    def end(self) -> None:
        """End the IDE's session; the rank runs on."""

    def say(self, text: str) -> None:
        """A line (with its newline) in the rank's console in the IDE."""


class IdeSaid(Enum):
    """What the IDE did in a rank's session, as far as the group cares."""

    READY = "ready"  # it finished configuring the session: the group's requests may follow
    CONTINUED = "continued"
    STEPPED = "stepped"
    GONE = "gone"  # it said goodbye: nothing of the group's may follow
