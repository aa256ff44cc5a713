"""Switch pydevd's tracer into or out of every thread of a running rank (see :class:`TraceSwitch`).

Shared by debugpy ranks (``rank``: tracing removed at a detach, back on at the next attach) and
PyCharm ranks (``pycharm_rank``: the same when PyCharm's debug server goes away and comes back).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

TRACE_RETRY_SECONDS = 10.0  # a thread a tracer switch did not reach gets it again at every poll for this long


def uses_sys_monitoring() -> bool:
    """Whether the loaded pydevd traces with sys.monitoring (Python 3.12+): then there is no per-thread
    tracer to switch.  debugpy's pydevd and pydevd-pycharm name the switch differently."""
    from _pydevd_bundle import pydevd_constants

    return bool(
        getattr(pydevd_constants, "PYDEVD_USE_SYS_MONITORING", False)
        or getattr(pydevd_constants, "USE_LOW_IMPACT_MONITORING", False)
    )


class TraceSwitch:
    """pydevd's tracer into or out of every thread of the rank, with a receipt from each thread.

    Python 3.11 cannot set another thread's tracer; pydevd's helper (``set_trace_to_threads``) writes
    it into the PyThreadState it finds by thread id, says it did, and stops at the first match.  But
    while a thread starts another one, CPython (3.11 and older) has *two* states with that id: the new
    thread's, preallocated by its parent, carries the parent's id until the new thread runs.  The
    helper may write that one: the new thread gets the change, its parent (the training loop, say)
    keeps what it had.  So one attempt may leave a detached rank traced (its idle cost back), or an
    attached one untraced (breakpoints verified, never hit: a dead F5 for the user).

    So the tracer installed is ours: at a thread's next call event it does what is wanted *now* (hand
    over to pydevd, or take itself out) and checks that thread off; ``retry`` (every watcher poll)
    installs it again in the threads that have not checked off, for TRACE_RETRY_SECONDS.  (Which of
    them ran Python meanwhile cannot be told reliably, so a thread blocked in C gets it again too:
    harmless, it checks off when it returns to Python.)  A thread in a loop without calls never
    checks off: it keeps its tracer until it calls something, as before.

    pydevd stays loaded and listening throughout.  (``pydevd.stoptrace()`` is no way to untrace: it
    kills pydevd's threads, and debugpy cannot listen twice in a process; it also untraces only the
    calling thread.)  Works with both pydevds: debugpy's vendored one and pydevd-pycharm (a PyCharm
    rank untraces with it when the IDE goes away, and traces again when it comes back).
    """

    def __init__(self) -> None:
        # what a thread's next call event must do: (trace?, threads yet to check off, pydevd's
        # dispatcher, sys.settrace); replaced whole, so a thread acts and checks off in one version
        self._state: tuple[bool, dict[int, None], Callable[..., Any] | None, Callable[[Any], None]] = (
            True,
            {},
            None,
            sys.settrace,
        )
        self._retry_until = 0.0

    def set(self, traced: bool) -> None:
        """Tracing on (as pydevd does when it attaches to a running process) or off in every thread;
        raises first where pydevd traces with sys.monitoring (Python 3.12+: nothing per thread)."""
        import pydevd  # debugpy's vendored pydevd, on sys.path once debugpy.listen() ran
        import pydevd_tracing
        from _pydev_bundle import pydev_monkey

        if uses_sys_monitoring():
            raise RuntimeError("pydevd traces with sys.monitoring here: there is no per-thread tracer to switch")
        py_db = pydevd.get_global_debugger()
        if traced and py_db is None:
            return
        set_trace = getattr(pydevd_tracing.TracingFunctionHolder, "_original_tracing", None) or sys.settrace
        if traced:
            pydev_monkey.patch_thread_modules()  # new threads start traced
        else:
            threading.settrace(None)
            pydev_monkey.undo_patch_thread_modules()  # new threads start untraced too
        idents = self._threads()
        self._state = (traced, dict.fromkeys(idents), py_db.trace_dispatch if traced else None, set_trace)
        self._retry_until = time.monotonic() + TRACE_RETRY_SECONDS
        self._install(idents)
        if traced:
            py_db.set_tracing_for_untraced_contexts()  # frames already running get pydevd's tracer

    def retry(self) -> None:
        """The switch once more in threads that have not checked off (see the class)."""
        pending = self._state[1]  # (threads check themselves off concurrently: only pop it here)
        if not pending:
            return
        if time.monotonic() > self._retry_until:
            pending.clear()
            return
        alive = set(sys._current_frames())
        for ident in list(pending):
            if ident not in alive:
                pending.pop(ident, None)
        if pending:
            self._install(list(pending))

    def _tracer(self, frame: FrameType, event: str, arg: Any) -> Any:
        traced, pending, dispatch, set_trace = self._state
        pending.pop(threading.get_ident(), None)
        if traced and dispatch is not None:
            return dispatch(frame, event, arg)  # pydevd puts its own thread tracer in place of this one
        set_trace(None)
        return None

    def _install(self, idents: list[int]) -> None:
        import pydevd_tracing

        try:
            # create_dummy_thread=False: a thread still starting is not in threading's table yet, and
            # pydevd's stand-in for it would overwrite the real entry
            pydevd_tracing.set_trace_to_threads(self._tracer, thread_idents=idents, create_dummy_thread=False)
        except TypeError:
            # pydevd-pycharm's helper takes no thread list: it writes every thread but pydevd's own, which
            # is harmless here (a thread that checked off does what is wanted now, once more)
            pydevd_tracing.set_trace_to_threads(self._tracer)

    @staticmethod
    def _threads() -> list[int]:
        """Every thread running Python but pydevd's and ours.  (Not from threading.enumerate(): it lists
        a thread still starting with ident None, and pydevd then files a stand-in thread under None.)"""
        skip = {
            t.ident
            for t in threading.enumerate()
            if getattr(t, "pydev_do_not_trace", False) or getattr(t, "is_pydev_daemon_thread", False)
        }
        return [ident for ident in sys._current_frames() if ident not in skip]
