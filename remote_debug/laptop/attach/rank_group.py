"""Many ranks, one debugger: all-stop and the group actions.

Each rank is its own debug session (its own pydevd), so on its own a breakpoint stops one rank while
the others run on into the next collective, and Continue acts on one session.  Every session of a VS
Code or headless attach passes through this process (:mod:`laptop.connection.dap_tap`), so the attach
sees each rank stop and run, and can act in each session.  :class:`RankGroup` uses that to make N
ranks behave like one program, the way a debugger's all-stop mode treats the threads of one:

* **all-stop** (the default of an IDE attach; ``--non-stop`` gives today's per-rank sessions): when
  any rank stops - a breakpoint, an exception, a pause, the end of a step - every other running rank
  is paused (DAP ``pause`` of all its threads).  A rank inside a collective pauses when it returns to
  Python; one that has not stopped after :data:`WAIT_SECONDS` is reported as waiting (``rank-waiting``,
  and a line in its Debug Console), not hung.  Its stop reaches the IDE as "All-stop: rank 0" (short: it is the
  session's state in VS Code's Call Stack), without taking the focus from the rank that stopped first.
  A Continue in any rank's session continues every rank (as Continue does for the threads of one
  program); a step steps only that rank.
* **group actions** (:meth:`RankGroup.act`, from ``remote-debug ranks ACTION JOB`` through
  :mod:`group_socket`, and from the VS Code extension): Continue All, Pause All, Step Over All (each
  stopped rank steps its main thread; ranks that block in a collective are reported waiting) and
  Detach All (each IDE session is told ``terminated``: VS Code and the headless client disconnect as
  they do at a debuggee's end, and pydevd lets the rank run on).

The collectives are pause-safe before any of this can happen: the attach raised every rank's
process-group timeout before it exposed the first rank (``pause_safe.py``).

The group itself speaks no protocol: each member is a :class:`RankSession` (pause every thread, continue,
step the main thread, end, a line in the rank's console), and what a session carries reaches the group as
plain news (the rank stopped - why, which thread -, runs again; the IDE is ready, continued, stepped, left).
Two adapters translate: :mod:`group_dap` for VS Code and headless ranks (DAP, in the forwards:
:mod:`dap_tap`), :mod:`group_pydevd` for PyCharm's ranks (pydevd's line protocol, in the reverse forwards:
:mod:`pydevd_tap`; what PyCharm cannot show is said there).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from remote_debug.laptop.attach.group_dap import DapHooks
from remote_debug.laptop.attach.group_pydevd import PydevdGroupHooks
from remote_debug.laptop.attach.rank_session import IdeSaid, RankSession
from remote_debug.laptop.connection.dap_tap import TapHooks
from remote_debug.laptop.connection.pydevd_tap import PydevdHooks
from remote_debug.laptop.wire import events
from remote_debug.laptop.wire.documents import GroupAction, RankInGroup, RankPhase
from remote_debug.laptop.wire.event_text import event_text

WAIT_SECONDS = 1.5  # a rank asked to pause or step that has not stopped by then is said to be waiting
TICK_SECONDS = 0.25
OVERTAKEN_SECONDS = 2.0  # a pause landing this soon after our continue overtook it is stale


@dataclass
class _Member:
    rank: int
    session: RankSession
    phase: RankPhase = RankPhase.RUNNING
    configured: bool = False  # the IDE finished its configuration: our requests may follow
    thread: Any = None  # the thread of its last stop
    reason: str = ""  # why it stopped last
    by_group: bool = False  # its last pause was the group's
    asked_at: float = 0.0  # when it was asked to pause or step
    waiting_said: bool = False
    # when a pause that had not landed yet was overtaken by our continue: the pause may still land first
    # (the rank leaves its collective as soon as the others run), before the continue is read
    overtaken_at: float | None = None


@dataclass(frozen=True)
class _Trigger:
    rank: int | None  # None: Pause All
    reason: str
    at: float


class RankGroup:
    def __init__(self, emit: events.Emit, *, all_stop: bool, clock: Callable[[], float] = time.monotonic) -> None:
        self.emit, self.all_stop, self._clock = emit, all_stop, clock
        self._lock = threading.Lock()
        self._members: dict[int, _Member] = {}
        self._trigger: _Trigger | None = None  # the stop the group's stop began with
        self._all_paused_said = False
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def hooks(self, rank: int) -> TapHooks:
        """What the rank's forward tells the group about its sessions."""
        return DapHooks(self, rank)

    def pydevd_hooks(self, rank: int) -> PydevdHooks:
        """What the rank's reverse forward tells the group about its connections to PyCharm."""
        return PydevdGroupHooks(self, rank)

    def close(self) -> None:
        self._stop.set()

    # --- what the group knows -------------------------------------------------------------------

    def status(self) -> list[RankInGroup]:
        with self._lock:
            return [
                RankInGroup(
                    rank=m.rank,
                    phase=m.phase,
                    reason=m.reason if m.phase == RankPhase.STOPPED else "",
                    by_group=m.by_group and m.phase == RankPhase.STOPPED,
                )
                for m in sorted(self._members.values(), key=lambda m: m.rank)
                if m.configured
            ]

    # --- group actions --------------------------------------------------------------------------

    def act(self, action: GroupAction, origin: str = "remote-debug ranks") -> list[int]:
        """Do ``action`` in every rank it applies to; the ranks it reached."""
        now = self._clock()
        sends: list[Callable[[], object]] = []
        with self._lock:
            members = [m for m in sorted(self._members.values(), key=lambda m: m.rank) if m.configured]
            if action == GroupAction.CONTINUE:
                acted = [m for m in members if m.phase != RankPhase.RUNNING]
                sends = [self._continue_locked(m) for m in acted]
                self._trigger = None
            elif action == GroupAction.PAUSE:
                acted = [m for m in members if m.phase in (RankPhase.RUNNING, RankPhase.STEPPING)]
                if acted and self._trigger is None:
                    self._begin_locked(_Trigger(None, "Pause All", now))
                sends = [self._pause_locked(m, now) for m in acted]
            elif action == GroupAction.STEP:
                acted = [m for m in members if m.phase == RankPhase.STOPPED]
                sends = [self._step_locked(m, now) for m in acted]
            else:
                acted = members
                sends = [m.session.end for m in acted]
        for send in sends:
            send()
        ranks = [m.rank for m in acted]
        self.emit(events.GroupActed(action=action, ranks=ranks, origin=origin))
        return ranks

    # --- what each session shows (the forwards' threads) ------------------------------------------

    def session_opened(self, rank: int, session: RankSession) -> None:
        with self._lock:
            self._members[rank] = _Member(rank, session)
            if self._ticker is None:
                self._ticker = threading.Thread(target=self._tick, name="rank-group", daemon=True)
                self._ticker.start()

    def session_closed(self, rank: int, session: RankSession) -> None:
        with self._lock:
            member = self._members.get(rank)
            if member is not None and member.session == session:
                del self._members[rank]
                self._settle_locked()
            said = self._all_paused_locked()
        self._say(said)

    def ide_said(self, rank: int, session: RankSession, said_by_ide: IdeSaid) -> None:
        now = self._clock()
        sends: list[Callable[[], object]] = []
        mirrored: list[int] = []
        said: events.AllPaused | None = None
        with self._lock:
            member = self._members.get(rank)
            if member is None or member.session != session:
                return
            if said_by_ide == IdeSaid.GONE:
                # nothing of ours may follow the IDE's goodbye: a pause read after it would leave the rank
                # suspended with no debugger, for the next one to find stopped
                del self._members[rank]
                self._settle_locked()
                said = self._all_paused_locked()
            elif said_by_ide == IdeSaid.READY:
                member.configured = True
                if self.all_stop and self._trigger is not None:  # a rank attached while the others are stopped
                    sends.append(self._pause_locked(member, now))
            elif said_by_ide == IdeSaid.CONTINUED:
                member.phase, member.by_group = RankPhase.RUNNING, False
                if self.all_stop:  # Continue resumes the whole program, every rank of it
                    others = [m for m in self._members.values() if m is not member and m.configured]
                    others = [m for m in others if m.phase != RankPhase.RUNNING]
                    sends = [self._continue_locked(m) for m in others]
                    mirrored = sorted(m.rank for m in others)
                    self._trigger = None
            elif said_by_ide == IdeSaid.STEPPED:
                member.phase, member.by_group, member.asked_at, member.waiting_said = (
                    RankPhase.STEPPING,
                    False,
                    now,
                    False,
                )
        for send in sends:
            send()
        if mirrored:
            self.emit(events.GroupActed(action=GroupAction.CONTINUE, ranks=mirrored, origin=f"rank {rank}"))
        self._say(said)

    def rank_running(self, rank: int, session: RankSession) -> None:
        """The rank runs again (after a stop)."""
        with self._lock:
            member = self._members.get(rank)
            if member is not None and member.session == session and member.phase == RankPhase.STOPPED:
                member.phase, member.by_group = RankPhase.RUNNING, False
            self._settle_locked()

    def rank_stopped(self, rank: int, session: RankSession, reason: str, thread: Any) -> str | None:
        """The rank stopped (``reason`` as DAP names it: breakpoint, exception, pause, step...).  How the IDE is
        to show it: "" as the rank said it, a text when the group caused it (why), None not at all (a stale
        pause that the continue behind it resumes)."""
        now = self._clock()
        sends: list[Callable[[], object]] = []
        began: _Trigger | None = None
        pausing: list[int] = []
        out = ""
        with self._lock:
            member = self._members.get(rank)
            if member is None or member.session != session:
                return ""
            if (
                reason == "pause"
                and member.phase == RankPhase.RUNNING
                and member.overtaken_at is not None
                and now - member.overtaken_at < OVERTAKEN_SECONDS
            ):
                member.overtaken_at = None
                return None  # a stale pause; the continue behind it resumes the rank: not a stop to show
            # the group's own pause or step landed (the rank may have hit a breakpoint of its own first)
            paused = member.phase == RankPhase.PAUSING and reason == "pause"
            stepped = member.phase == RankPhase.STEPPING and reason == "step"
            ours = member.by_group and (paused or stepped)
            member.phase, member.reason, member.waiting_said = RankPhase.STOPPED, reason, False
            if thread is not None:
                member.thread = thread
            if ours:
                out = _why(self._trigger) if paused else "Step Over All"
            else:
                member.by_group = False
                if self.all_stop:
                    if self._trigger is None:
                        began = _Trigger(rank, reason, now)
                        self._begin_locked(began)
                    running = [m for m in self._members.values() if m.configured and m.phase == RankPhase.RUNNING]
                    sends = [self._pause_locked(m, now) for m in sorted(running, key=lambda m: m.rank)]
                    pausing = sorted(m.rank for m in running)
            said = self._all_paused_locked()
        for send in sends:
            send()
        if began is not None and began.rank is not None:
            self.emit(events.AllStop(rank=began.rank, reason=reason, pausing=pausing))
        self._say(said)
        return out

    # --- under the lock: decide; the returned sends run after it ---------------------------------

    def _settle_locked(self) -> None:
        """Every rank left in the group runs (or none is left): the group's stop is over, the next stop is a
        new one (and a rank attaching now is not paused for an old one)."""
        if not any(m.phase != RankPhase.RUNNING for m in self._members.values()):
            self._trigger = None

    def _begin_locked(self, trigger: _Trigger) -> None:
        self._trigger, self._all_paused_said = trigger, False

    def _pause_locked(self, member: _Member, now: float) -> Callable[[], object]:
        member.phase, member.by_group, member.asked_at, member.waiting_said = RankPhase.PAUSING, True, now, False
        return member.session.pause_all

    def _continue_locked(self, member: _Member) -> Callable[[], object]:
        thread = member.thread if member.thread is not None else "*"
        member.overtaken_at = self._clock() if member.phase == RankPhase.PAUSING else None
        member.phase, member.by_group = RankPhase.RUNNING, False
        session = member.session
        return lambda: session.continue_all(thread)

    def _step_locked(self, member: _Member, now: float) -> Callable[[], object]:
        member.phase, member.by_group, member.asked_at, member.waiting_said = RankPhase.STEPPING, True, now, False
        session, fallback = member.session, member.thread
        return lambda: session.step_main(fallback)

    def _all_paused_locked(self) -> events.AllPaused | None:
        trigger = self._trigger
        if trigger is None or self._all_paused_said:
            return None
        members = [m for m in self._members.values() if m.configured]
        if len(members) < 2 or any(m.phase != RankPhase.STOPPED for m in members):
            return None  # one rank alone stopping is its own stop, not news of a group ("all 1 rank paused")
        self._all_paused_said = True
        return events.AllPaused(
            rank=trigger.rank,
            ranks=sorted(m.rank for m in members),
            seconds=round(self._clock() - trigger.at, 3),
        )

    def _say(self, event: events.Event | None) -> None:
        if event is not None:
            self.emit(event)

    # --- ranks that do not stop -----------------------------------------------------------------

    def _tick(self) -> None:
        while not self._stop.wait(TICK_SECONDS):
            self.report_waiting()

    def report_waiting(self) -> None:
        """Say once of each rank asked to pause or step that has not stopped after WAIT_SECONDS."""
        now = self._clock()
        late: list[tuple[_Member, GroupAction]] = []
        with self._lock:
            for m in self._members.values():
                asked = m.phase in (RankPhase.PAUSING, RankPhase.STEPPING) and not m.waiting_said
                if asked and now - m.asked_at >= WAIT_SECONDS:
                    m.waiting_said = True
                    action = GroupAction.PAUSE if m.phase == RankPhase.PAUSING else GroupAction.STEP
                    late.append((m, action))
        for m, action in late:
            event = events.RankWaiting(rank=m.rank, action=action, seconds=round(now - m.asked_at, 1))
            self.emit(event)
            m.session.say(f"[remote-debug] {event_text(event)}\n")


def _why(trigger: _Trigger | None) -> str:
    """Short: VS Code shows it as the session's state in the Call Stack, where a long one hides the rank's name."""
    if trigger is None or trigger.rank is None:
        return "Pause All"
    return f"All-stop: rank {trigger.rank}"
