"""The rank group's adapter for pydevd's line protocol: PyCharm's ranks, which connect out to PyCharm through
reverse forwards (:mod:`~remote_debug.laptop.connection.pydevd_tap`).

What PyCharm cannot show: a pause's reason.  PyCharm treats a suspension that is no breakpoint's as a plain
position reached and shows no text for it, so a rank paused by all-stop says so in its Debug Console
("[remote-debug] rank 1: All-stop: rank 0"); the suspension also carries it as pydevd's ``message`` (which
PyCharm ignores there, and the headless stand-in reads)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from remote_debug.laptop.attach.rank_session import IdeSaid
from remote_debug.laptop.connection import pydevd_tap as pydevd
from remote_debug.laptop.connection.pydevd_tap import Line, PydevdTap

if TYPE_CHECKING:
    from remote_debug.laptop.attach.rank_group import RankGroup


@dataclass(eq=False)
class PydevdSession:
    """A PyCharm connection as the group acts in it, and what its rank's threads do."""

    tap: PydevdTap
    suspended: set[str] = field(default_factory=set)  # the rank's threads suspended now
    # why the group stopped the rank in this stop (its other threads' suspensions say it too); "" its own stop
    why: str = ""

    def pause_all(self) -> None:
        self.tap.request(pydevd.CMD_THREAD_SUSPEND, "*")  # pydevd suspends every thread it traces

    def continue_all(self, thread: Any) -> None:
        self.tap.request(pydevd.CMD_THREAD_RUN, "*")  # every thread: a pause suspended them all

    def step_main(self, fallback: Any) -> None:
        tap = self.tap

        def step_main(answer: Line) -> None:
            # the training loop is the main thread's; the last stop may have been any thread's
            main = _main_thread(answer.text) if answer.cmd == pydevd.CMD_RETURN else None
            target = main or fallback
            if target is not None:
                tap.request(pydevd.CMD_STEP_OVER, str(target))

        tap.request(pydevd.CMD_LIST_THREADS, "", step_main)

    def end(self) -> None:
        # pydevd has no "the session ended" for the IDE: the connection ends.  The rank, resumed first so that
        # nothing stays suspended, sees PyCharm go and runs on untraced (pycharm_rank)
        self.tap.request(pydevd.CMD_THREAD_RUN, "*")
        self.tap.close()

    def say(self, text: str) -> None:
        self.tap.say(text)


def _main_thread(text: str) -> str | None:
    try:
        root = ET.fromstring(text)
    except ET.ParseError:
        return None
    return next((t.get("id") for t in root.iter("thread") if unquote(t.get("name", "")) == "MainThread"), None)


def _suspension(text: str) -> tuple[str, str] | None:
    """(thread id, the group's name of the reason) of a CMD_THREAD_SUSPEND; None if it names no thread."""
    try:
        thread = ET.fromstring(text).find("thread")
    except ET.ParseError:
        return None
    if thread is None or not thread.get("id"):
        return None
    stop_reason = thread.get("stop_reason", "")
    reason = pydevd.STOP_REASONS.get(int(stop_reason), "") if stop_reason.isdigit() else ""
    return thread.get("id", ""), reason or f"stop_reason {stop_reason}"


class PydevdGroupHooks:
    """One rank's connections to PyCharm (pydevd's line protocol), told to the group.

    pydevd reports each thread: a pause suspends every thread, and each one says so.  The rank stopped when
    the first of its threads did, and runs when the last one runs again; a further thread's suspension by
    request in the same stop is not news, a breakpoint's or a step's always is."""

    def __init__(self, group: RankGroup, rank: int) -> None:
        self.group, self.rank = group, rank
        self._sessions: dict[int, PydevdSession] = {}  # id(tap) -> its session, while it is open

    def opened(self, session: PydevdTap) -> None:
        member = self._sessions[id(session)] = PydevdSession(session)
        self.group.session_opened(self.rank, member)

    def from_ide(self, session: PydevdTap, line: Line) -> None:
        member = self._sessions.get(id(session))
        if member is None:
            return
        if line.cmd == pydevd.CMD_RUN:
            self.group.ide_said(self.rank, member, IdeSaid.READY)
        elif line.cmd == pydevd.CMD_THREAD_RUN:
            self.group.ide_said(self.rank, member, IdeSaid.CONTINUED)
        elif line.cmd in pydevd.IDE_STEPS:
            self.group.ide_said(self.rank, member, IdeSaid.STEPPED)

    def from_rank(self, session: PydevdTap, line: Line) -> Line | None:
        member = self._sessions.get(id(session))
        if member is None:
            return line
        if line.cmd == pydevd.CMD_THREAD_RUN:
            member.suspended.discard(line.text.split("\t", 1)[0])
            if not member.suspended:
                member.why = ""
                self.group.rank_running(self.rank, member)
            return line
        suspension = _suspension(line.text) if line.cmd == pydevd.CMD_THREAD_SUSPEND else None
        if suspension is None:
            return line
        thread, reason = suspension
        news = not member.suspended or reason != "pause"
        member.suspended.add(thread)
        if news:
            why = self.group.rank_stopped(self.rank, member, reason, thread)
            if why is None:
                return None
            member.why = why
            if why:  # what PyCharm shows of it: a pause's suspension has no text there
                member.say(f"[remote-debug] rank {self.rank}: {why}\n")
        if not member.why:
            return line
        return Line(line.cmd, line.seq, pydevd.with_message(line.text, pydevd.GROUP_MESSAGE + member.why))

    def closed(self, session: PydevdTap) -> None:
        member = self._sessions.pop(id(session), None)
        if member is not None:
            self.group.session_closed(self.rank, member)
