"""Pause-safe collectives: while a debugger may stop one rank, every rank of the job raises its
process-group timeout, so that its peers' collectives do not time out meanwhile.

A rank without a process group yet raises it itself at init ("pending").  A rank seen for the first
time (it reported after discovery, or torchrun restarted it: a new process with the same rank number)
is asked at once: a debugger may hold another rank stopped already, and the newcomer's next
collective would start with the short timeout.  Only ranks whose answer failed wait
:data:`RETRY_SECONDS` before they are asked again.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from remote_debug.contract import spec
from remote_debug.laptop.connection.rank_control import RankControl, fan_out
from remote_debug.laptop.core.errors import UserError, reason
from remote_debug.laptop.wire import events

RETRY_SECONDS = 2.0
# states in which a rank has no process group to protect any more
_OVER = (spec.RankState.FAILED, spec.RankState.FINISHED)


class PauseSafe:
    def __init__(self, control: Callable[[str], RankControl], emit: events.Emit) -> None:
        self._control = control  # node -> the control channels of its ranks
        self._emit = emit
        self._done: set[tuple[int, int]] = set()  # (rank, pid): a restarted rank is a new process
        self._asked: set[tuple[int, int]] = set()  # asked at least once (the failed ones wait to be retried)
        self._next = 0.0

    def done(self, rank: spec.RankEndpoint) -> None:
        """The rank is pause-safe already (its ``listen`` answer made it so)."""
        self._done.add((rank.rank, rank.pid))

    def announce(self, manifests: dict[str, spec.NodeManifest], *, force: bool = False) -> None:
        """Ask every rank seen for the first time now; the ones whose answer failed again once the
        last round is RETRY_SECONDS old (or ``force``)."""
        now = time.monotonic()
        retry = force or now >= self._next
        todo = [
            (node, r)
            for node, m in manifests.items()
            for r in m.ranks
            if (r.rank, r.pid) not in self._done
            and r.control_port
            and r.state not in _OVER
            and (retry or (r.rank, r.pid) not in self._asked)
        ]
        if not todo:
            return
        if retry:
            self._next = now + RETRY_SECONDS
        self._asked.update((r.rank, r.pid) for _node, r in todo)
        fan_out(todo, lambda item: self._ask(*item))  # a job's ranks answer in parallel

    def _ask(self, node: str, r: spec.RankEndpoint) -> None:
        try:
            detail = self._control(node).pause_safe(r)
        except (OSError, UserError) as exc:
            self._emit(events.WarningEvent(message=f"rank {r.rank}: pause-safe failed: {reason(exc)}"))
            return
        self._done.add((r.rank, r.pid))  # also when "pending": the rank applies it at init
        self._emit(events.PauseSafe(rank=r.rank, node=node, detail=detail))
