"""``attach --headless``: the built-in DAP client plays the IDE for one rank.

Per rank: attach through the rank's forwarded port, set the breakpoints, and at each stop report
the top frame and its locals, step ``steps`` times, then continue.  After ``max_stops`` stops the
breakpoints are cleared so the rank runs to the end (a loop would otherwise stop every iteration).

Logpoints (``--log``) print without stopping, for as long as the session lasts: a plan with logpoints keeps its
sessions until the job ends (or Ctrl-C), after its stops too.  Each hit reaches us tagged by the rank's forward
(:mod:`~remote_debug.laptop.connection.logpoint_tags`) and is said as a :class:`~ev.LogpointHit`; with
``show_output`` the rank's own prints come too (DAP ``redirectOutput``), one :class:`~ev.RankPrinted` per line.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from remote_debug.contract.spec import ALREADY_ATTACHED, RANK_OUTPUT_PREFIX
from remote_debug.laptop.connection.dap_tap import GROUP_MARK
from remote_debug.laptop.connection.logpoint_tags import LOGPOINT_KEY
from remote_debug.laptop.ide.dap_client import (
    DapClient,
    DapError,
    DapRequestFailedError,
    StopInfo,
    attach_and_configure,
    describe_stop,
    inspect_stop,
)
from remote_debug.laptop.wire import events as ev

# DAP's ``stopped`` reason for a line breakpoint (a step, a pause or an exception stop is not one)
BREAKPOINT_REASON = "breakpoint"


@dataclass
class HeadlessPlan:
    breakpoints: dict[str, list[int]] = field(default_factory=dict)  # local file -> lines
    steps: int = 0  # `next` this many times at each stop
    max_stops: int = 1
    attach_timeout: float = 60.0
    watch: tuple[str, ...] = ()  # locals to report (empty: all)
    pause_seconds: float = 0.0  # stay stopped this long at each stop before stepping/continuing
    logpoints: dict[str, list[tuple[int, str]]] = field(default_factory=dict)  # local file -> (line, message)
    show_output: bool = False  # say each line the rank prints while attached


@dataclass
class StopRecord:
    file: str
    line: int
    function: str
    reason: str
    variables: dict[str, str]

    @classmethod
    def from_stop(cls, stop: StopInfo, watch: tuple[str, ...]) -> StopRecord:
        variables = {k: v for k, v in stop.variables.items() if not watch or k in watch}
        return cls(stop.file, stop.line, stop.function, stop.reason, variables)

    def event(self, rank: int, node: str) -> ev.Stopped:
        return ev.Stopped(
            rank=rank,
            node=node,
            file=self.file,
            line=self.line,
            function=self.function,
            reason=self.reason,
            variables=dict(self.variables),
        )


@dataclass
class RankReport:
    rank: int
    node: str
    stops: list[StopRecord] = field(default_factory=list)
    error: str | None = None

    def summary(self) -> ev.RankSummary:
        """This rank in the headless ``summary`` line (``file``/``line``/``variables``: its first stop)."""
        first = self.stops[0] if self.stops else None
        return ev.RankSummary(
            rank=self.rank,
            node=self.node,
            file=first.file if first else None,
            line=first.line if first else None,
            variables=dict(first.variables) if first else {},
            stops=[ev.StopSummary(**vars(s)) for s in self.stops],
            error=self.error,
        )

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self.summary())


def missed_breakpoints(plan: HeadlessPlan, reports: list[RankReport], workspace: Path) -> list[str]:
    """The plan's breakpoints as ``FILE:LINE`` (relative to ``workspace`` when in it) when it asked for stops
    at breakpoints and no rank stopped at one; else none.  A plan without breakpoints misses nothing."""
    if plan.max_stops < 1 or any(s.reason == BREAKPOINT_REASON for r in reports for s in r.stops):
        return []
    return [f"{_shown(path, workspace)}:{line}" for path, lines in plan.breakpoints.items() for line in lines]


def _shown(path: str, workspace: Path) -> str:
    try:
        return Path(path).relative_to(workspace).as_posix()
    except ValueError:  # not under the workspace: as given
        return path


class RankStream:
    """One rank's ``output`` events (the DAP client's reader thread): logpoint hits, and the rank's prints as lines
    when asked for (pydevd sends a ``print`` as its pieces: text, then the newline)."""

    def __init__(self, rank: int, node: str, emit: ev.Emit, *, show_output: bool) -> None:
        self.rank, self.node, self.emit, self.show_output = rank, node, emit, show_output
        self._tag = RANK_OUTPUT_PREFIX.format(rank=rank)
        self._partial: dict[str, str] = {}  # category -> its line so far
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> None:
        text = str(body.get("output", ""))
        if body.get(LOGPOINT_KEY):
            found = body.get("source")
            source: dict[str, Any] = found if isinstance(found, dict) else {}
            message = text.removeprefix(self._tag).rstrip("\r\n")
            line = body.get("line")
            self.emit(
                ev.LogpointHit(
                    rank=self.rank,
                    node=self.node,
                    file=str(source.get("path") or source.get("name") or ""),
                    line=line if isinstance(line, int) else 0,
                    message=message,
                )
            )
            return
        category = str(body.get("category") or "console")
        if not self.show_output or category not in ("stdout", "stderr"):
            return  # pydevd's own messages (console, telemetry), or prints nobody asked for
        with self._lock:
            *lines, self._partial[category] = (self._partial.get(category, "") + text).split("\n")
        for line in lines:
            self.emit(ev.RankPrinted(rank=self.rank, node=self.node, line=line.rstrip("\r"), stream=category))

    def flush(self) -> None:
        """The session is over: a last line without its newline is said too."""
        with self._lock:
            rest, self._partial = self._partial, {}
        for category, line in rest.items():
            if line:
                self.emit(ev.RankPrinted(rank=self.rank, node=self.node, line=line, stream=category))


def debug_rank(
    rank: int,
    node: str,
    host: str,
    port: int,
    plan: HeadlessPlan,
    *,
    path_mappings: list[tuple[str, str]],
    emit: ev.Emit,
    stop: threading.Event,
) -> RankReport:
    report = RankReport(rank, node)
    client: DapClient | None = None
    stream = RankStream(rank, node, emit, show_output=plan.show_output)
    try:
        client = attach_and_configure(
            host,
            port,
            path_mappings=path_mappings,
            breakpoints=plan.breakpoints,
            logpoints=plan.logpoints,
            timeout=plan.attach_timeout,
            # pydevd sends what the rank prints only when asked (and then for as long as the rank lives)
            extra={"redirectOutput": True} if plan.show_output else None,
            on_output=stream,
        )
        emit(ev.RankAttached(rank=rank, node=node))
        hits, cleared = 0, False
        # logpoints print for as long as the session lasts: it lasts, after the stops too, until the job ends
        while (hits < plan.max_stops or plan.logpoints) and not stop.is_set() and not client.closed:
            try:
                stopped = client.wait_stopped(timeout=1.0)
            except DapError:
                continue  # no stop yet: check whether we should give up, then wait again
            if GROUP_MARK in stopped:
                continue  # all-stop paused it for another rank's stop: that rank's Continue resumes it
            # the rank is paused now: the requests get the client's full timeout, never the poll's
            hit = describe_stop(client, stopped)
            hits += 1
            _record(report, hit, plan, emit, rank, node)
            if plan.pause_seconds > 0:
                stop.wait(plan.pause_seconds)
            for _ in range(plan.steps):
                client.next(hit.thread_id)
                hit = inspect_stop(client, timeout=30.0)
                _record(report, hit, plan, emit, rank, node)
            if hits >= plan.max_stops and not cleared:
                cleared = True
                for path in plan.breakpoints:  # the file's logpoints stay
                    client.set_breakpoints(path, [], logpoints=plan.logpoints.get(path, ()))
            client.continue_(hit.thread_id)
        emit(ev.RankDetached(rank=rank, node=node))
    except (DapError, OSError) as exc:
        report.error = _why(exc)
        emit(ev.RankDetached(rank=rank, node=node, error=report.error))
    finally:
        stream.flush()
        if client is not None:
            if not client.closed:
                try:
                    client.disconnect()
                except (DapError, OSError):
                    pass
            client.close()
    return report


# debugpy 1.8's answer to a second client's ``attach`` (the first one may be an IDE through another attach)
_ALREADY_DEBUGGED = "is already being debugged"


def _why(exc: Exception) -> str:
    """One line for a session that failed; a rank that has a debugger already is said to."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    # a rank serving DAP itself (or a forward of ours) refuses the second debugger's initialize
    if isinstance(exc, DapRequestFailedError) and (_ALREADY_DEBUGGED in text or ALREADY_ATTACHED in text):
        return "it already has a debugger attached (an IDE, or another attach): detach that one to debug it here"
    return text


def _record(report: RankReport, hit: StopInfo, plan: HeadlessPlan, emit: ev.Emit, rank: int, node: str) -> None:
    record = StopRecord.from_stop(hit, plan.watch)
    report.stops.append(record)
    emit(record.event(rank, node))
