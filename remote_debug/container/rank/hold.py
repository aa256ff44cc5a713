"""How a rank ends by an uncaught exception: recorded with its traceback, optionally held for a post-mortem.

Every claimed rank installs :class:`FailureHook` as ``sys.excepthook``.  On an uncaught exception it
writes the rank document's ``state`` ("failed"), ``error`` (one line) and ``traceback`` (bounded), so
``attach`` can report the crash with its traceback, then lets Python's own hook print it as before.

With a hold (``REMOTE_DEBUG_HOLD_ON_FAILURE=SECONDS``, ``launch --hold-on-failure``) a debugged rank
does not exit at once: it reports ``state="held"``, makes sure its debugger can be reached (a lazy
debugpy rank starts its listener now; a PyCharm rank tries to connect out to the IDE), and waits up to
SECONDS for a debugger.  When one is attached, the debugger stops the main thread *at the exception* -
the frames of the traceback, their locals readable - exactly as a stop on an uncaught exception looks
in the IDE.  The two debuggers differ only behind :class:`PostMortem`.  When the debugger continues or
detaches (or nobody came within SECONDS) the rank exits as it would have without the hold: the traceback was printed
before the hold, and returning from the excepthook gives Python's exit code 1.

Why in the excepthook: it runs after the exception has left the main module but before the
interpreter starts shutting down, with the traceback (and so every frame) still alive; the launcher
(torchrun) sees a live process, so the job stays InProgress and the other ranks stay debuggable.
"""

from __future__ import annotations

import atexit
import contextlib
import sys
import threading
import time
import traceback
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any, Protocol

from remote_debug.container.log import describe, log
from remote_debug.contract.spec import RankState

TRACEBACK_LIMIT = 8000  # characters of a traceback kept in the rank document (its end: the raising frames)
POLL_SECONDS = 0.1


class Reporter(Protocol):
    def update(
        self,
        *,
        state: RankState | None = ...,
        error: str | None = ...,
        traceback: str | None = ...,
        failed_at: float | None = ...,
        hold_until: float | None = ...,
        held_for: int | None = ...,
        held_for_error: str | None = ...,
        unless: tuple[RankState, ...] = ...,
    ) -> None: ...


ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None]


class PostMortem(Protocol):
    """A rank's debugger, as the hold needs it (debugpy's in ``rank``, PyCharm's in ``pycharm_rank``)."""

    def start(self) -> str:
        """Make the debugger reachable now; where it is, for the log ("port 40123")."""
        ...

    def attached(self) -> bool:
        """Whether an IDE is attached and ready to show a stop."""
        ...

    def stop_at(self, excinfo: ExcInfo) -> None:
        """Stop the calling thread at the exception; returns when the IDE resumes or goes away."""
        ...


class Gang(Protocol):
    """The rank's part in holding the whole job (``gang_hold.GangHold``), as the excepthook needs it."""

    def held_for(self) -> int | None:
        """The rank whose failure this rank is held for already (None: none)."""
        ...

    def holding(self) -> bool:
        """Held for another rank's failure, not released yet."""
        ...

    def announce(self, error: str, failed_at: float, hold_until: float | None) -> int | None:
        """This rank is about to be held at its exception; the rank whose failure holds the job (None: no group)."""
        ...

    def release(self) -> None:
        """This rank's hold ended."""
        ...


class Held:
    """The exception a rank is held at, while it is: ``stacks`` shows its traceback for the holding
    thread (whose own frames are only this excepthook's)."""

    def __init__(self, thread: int, excinfo: ExcInfo) -> None:
        self.thread = thread
        self.excinfo = excinfo


# At most one: the main thread's excepthook holds, and only once (the process exits after it).
_held: list[Held] = []


def held() -> Held | None:
    """The hold in progress in this process, if any."""
    return _held[0] if _held else None


def format_traceback(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> str:
    """The traceback as Python prints it, its last TRACEBACK_LIMIT characters (the raising end)."""
    text = "".join(traceback.format_exception(exc_type, exc, tb))
    return text if len(text) <= TRACEBACK_LIMIT else "...\n" + text[-TRACEBACK_LIMIT:]


class FailureHook:
    """``sys.excepthook`` of a rank: report, print as before, hold for a post-mortem when asked."""

    def __init__(
        self,
        reporter: Reporter,
        rank: int,
        *,
        hold_seconds: float = 0.0,
        debugger: PostMortem | None = None,
    ) -> None:
        self.reporter = reporter
        self.rank = rank
        self.hold_seconds = hold_seconds
        self.debugger = debugger  # None: no debugger in this rank, nothing to hold for
        # with hold on failure, this rank's part in holding every rank of the job (``gang_hold``); None: off
        self.gang: Gang | None = None
        self.previous: Callable[[type[BaseException], BaseException, TracebackType | None], Any] = sys.excepthook

    def install(self) -> None:
        self.previous = sys.excepthook
        sys.excepthook = self
        # Python runs sys.excepthook before atexit handlers, so "failed" is already set and kept.
        atexit.register(
            lambda: self.reporter.update(
                state=RankState.FINISHED, unless=(RankState.FAILED, RankState.SKIPPED, RankState.HELD)
            )
        )

    def __call__(self, exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        interrupted = issubclass(exc_type, KeyboardInterrupt)  # Ctrl-C: the user wants it gone
        hold = self.hold_seconds > 0 and self.debugger is not None and not interrupted
        seen = hold and reported_by_pydevd(exc)
        gang = self.gang if not interrupted else None
        # held with another rank that failed first (gang_hold): this exception is a consequence (a collective
        # that timed out...), and the rank stays until that rank's hold ends, debugger or not
        following = gang is not None and gang.held_for() is not None
        now = time.time()
        # the deadline is wall-clock for the readers (jobs: "N s left"); the hold itself counts monotonic
        deadline = time.monotonic() + self.hold_seconds
        # (held with another rank without a debugger of its own: it stays "skipped", nothing to attach to)
        state = RankState.HELD if hold or (following and self.debugger is not None) else RankState.FAILED
        with contextlib.suppress(Exception):
            self.reporter.update(
                state=None if following and self.debugger is None else state,
                error=describe(exc),
                traceback=format_traceback(exc_type, exc, tb),
                failed_at=now,
                hold_until=now + self.hold_seconds if hold and not seen and not following else None,
            )
        # Printed first: the log says why the rank is held, and it is the traceback a run without the
        # hold prints.
        self.previous(exc_type, exc, tb)
        if not hold and not following:
            return
        try:
            if seen and not following:
                log(f"rank {self.rank} failed; the attached debugger stopped at the exception, exiting as it resumed")
            else:
                if gang is not None and not following:  # the job's other ranks are held too (or one failed first)
                    following = gang.announce(describe(exc), now, now + self.hold_seconds) not in (None, self.rank)
                _held[:] = [Held(threading.get_ident(), (exc_type, exc, tb))]
                if hold and not seen:
                    self._hold((exc_type, exc, tb), deadline)
                while gang is not None and gang.holding():  # until the rank that failed first is released
                    time.sleep(POLL_SECONDS)
        except Exception as error:  # the hold is a courtesy: never turn the user's failure into ours
            log(f"rank {self.rank}: post-mortem hold failed: {describe(error)}")
        finally:
            _held.clear()
            with contextlib.suppress(Exception):
                self.reporter.update(state=RankState.FAILED)
            if gang is not None:
                gang.release()  # (the ranks held with this one go now)

    def reinstall(self) -> None:
        """Be ``sys.excepthook`` again: pydevd-pycharm puts its own there when it connects."""
        if sys.excepthook is not self:
            sys.excepthook = self

    def _hold(self, excinfo: ExcInfo, deadline: float) -> None:
        debugger = self.debugger
        assert debugger is not None
        where = debugger.start()
        self.reporter.update(state=RankState.HELD)  # starting a lazy listener reported it "listening"
        log(
            f"rank {self.rank} failed with {describe(excinfo[1])}: held up to {self.hold_seconds:g} s for a "
            f"post-mortem debugger ({where}); it exits when the debugger continues or detaches"
        )
        while not debugger.attached():
            if time.monotonic() > deadline and not (self.gang is not None and self.gang.holding()):
                log(f"rank {self.rank}: no debugger within {self.hold_seconds:g} s; exiting with the failure")
                return
            time.sleep(POLL_SECONDS)
        log(f"rank {self.rank}: debugger attached; stopped at the exception")
        debugger.stop_at(excinfo)
        log(f"rank {self.rank}: debugger resumed the failed rank; exiting with the failure")


# The exception pydevd last stopped at as "unhandled" (see track_unhandled_stops); a strong reference,
# so the identity check below cannot be fooled by a recycled id.
_last_unhandled_stop: list[BaseException] = []


def track_unhandled_stops() -> None:
    """Remember each exception pydevd stops at as unhandled, from now on (idempotent; called by the
    rank's connection watcher as soon as debugpy runs).  An IDE attached with the "uncaught" exception
    filter (VS Code's default) is stopped by pydevd itself while the exception leaves the main module,
    before the excepthook; the hold must then not stop a second time, even if the user detached there."""
    pydevd = sys.modules.get("pydevd")
    py_db = pydevd.get_global_debugger() if pydevd is not None else None
    if py_db is None or getattr(py_db, "_remote_debug_tracked", False):
        return
    # debugpy's pydevd names it do_stop_on_unhandled_exception, pydevd-pycharm stop_on_unhandled_exception
    method = next(
        (m for m in ("do_stop_on_unhandled_exception", "stop_on_unhandled_exception") if hasattr(py_db, m)), None
    )
    if method is None:
        return
    original = getattr(py_db, method)

    def do_stop_on_unhandled_exception(thread: Any, frame: Any, frames_byid: Any, arg: Any) -> Any:
        # only the main thread's exceptions reach sys.excepthook (the hold); keeping another thread's
        # would pin its frames and their locals (tensors) for the rest of the run
        if thread is threading.main_thread():
            with contextlib.suppress(Exception):
                _last_unhandled_stop[:] = [arg[1]]
        return original(thread, frame, frames_byid, arg)

    # an instance attribute: pydevd's tracers (Python and Cython) call it through the instance
    setattr(py_db, method, do_stop_on_unhandled_exception)
    py_db._remote_debug_tracked = True


def reported_by_pydevd(exc: BaseException) -> bool:
    """True when pydevd already stopped at ``exc`` as unhandled (the user has seen it and resumed)."""
    return any(seen is exc for seen in _last_unhandled_stop)


def traceback_frames(excinfo: ExcInfo) -> list[FrameType]:
    """The frames of the exception's traceback, outermost first (the last one raised)."""
    frames = []
    tb = excinfo[2]
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    return frames


def stop_at_exception(excinfo: ExcInfo) -> None:
    """Stop the calling thread at ``excinfo``'s innermost user frame, reported to the attached client as
    an exception stop; returns when the client resumes (continue, detach).  Stepping is not possible:
    the frames have already been unwound (as with ``pdb.post_mortem``)."""
    import debugpy

    trigger = getattr(debugpy, "trigger_exception_handler", None)
    if trigger is not None:  # debugpy >= 1.8.2x: the public way, stops regardless of the client's filters
        trigger(excinfo, as_uncaught=False)
        return
    # Older debugpy: what that function does, through pydevd (vendored by debugpy).
    import pydevd

    py_db = pydevd.get_global_debugger()
    frames = traceback_frames(excinfo)
    if py_db is None or not frames:
        return
    thread = threading.current_thread()
    info = py_db.set_additional_thread_info(thread)
    info.is_tracing += 1
    try:
        py_db.do_stop_on_unhandled_exception(thread, frames[-1], {id(f): f for f in frames}, excinfo)
    finally:
        info.is_tracing -= 1
