"""Keep pydevd-pycharm's tracer of a script's top-level frame from growing until the rank dies of it.

pydevd-pycharm (its Cython tracer, what it runs on Python 3.11) attached to a running ``python train.py`` gives
the script's bottom frame (no ``f_back``) a ``TopLevelThreadTracerNoBackFrame``, whose dispatch returns itself
wrapped in a ``SafeCallWrapper``, which ``SafeCallWrapper.__call__`` wraps once more: every traced line of the
module's own code adds a level.  A training loop at the top level of the script (no ``main()``) dies of
``RecursionError`` after about a thousand traced lines, seconds after PyCharm attached, and the traceback goes
to PyCharm's console, not the job's log.  (debugpy's vendored pydevd returns the bound method instead: fixed
there.)

The fix, from outside: pydevd gives a thread its top-level tracer from its global dispatcher, at the thread's
first call event after the tracer went in (``fix_top_level_trace_and_get_trace_func``).  We wrap the debugger's
``trace_dispatch`` so that right after it, in the same thread, the bottom frame's tracer becomes a plain
function that calls the top-level tracer's dispatch and returns itself: one level, for good.  Everything else
of pydevd's tracing is untouched; where pydevd differs (another tracer class, sys.monitoring) nothing is done.
"""

from __future__ import annotations

import threading
from types import FrameType
from typing import Any

_FLAT = "_remote_debug_flat"  # on our functions: the top-level tracer a flat one calls; True on the dispatch
_GROWING = "TopLevelThreadTracerNoBackFrame"


def install(py_db: Any) -> bool:
    """Wrap ``py_db.trace_dispatch`` (pydevd reads it from the instance each time it installs tracing); True
    when it is wrapped (now or before).  Call after ``settrace``, before tracing is installed again."""
    original = getattr(py_db, "trace_dispatch", None)
    if original is None or getattr(original, _FLAT, False):
        return original is not None

    def trace_dispatch(frame: FrameType, event: str, arg: Any) -> Any:
        ret = original(frame, event, arg)
        try:
            bottom = _flatten(frame)
        except Exception:  # never let this break tracing: pydevd's own behaviour is what remains
            return ret
        return bottom.f_trace if bottom is frame and bottom.f_trace is not None else ret

    setattr(trace_dispatch, _FLAT, True)
    py_db.trace_dispatch = trace_dispatch
    return True


def _flatten(frame: FrameType) -> FrameType:
    """The bottom frame of ``frame``'s stack, its tracer made flat when pydevd just gave it the growing one."""
    bottom = frame
    while bottom.f_back is not None:
        bottom = bottom.f_back
    # threading's table, not current_thread(): inside a tracer a thread threading does not know must not get a
    # dummy Thread object (pydevd avoids it too)
    thread = threading._active.get(threading.get_ident())  # type: ignore[attr-defined]
    tracer = getattr(thread, "_top_level_thread_tracer", None)
    if tracer is None or type(tracer).__name__ != _GROWING:
        return bottom
    current = bottom.f_trace
    if current is None or getattr(current, _FLAT, None) is tracer:
        return bottom
    dispatch = tracer.trace_dispatch_and_unhandled_exceptions

    def top_level(frame: FrameType, event: str, arg: Any) -> Any:
        dispatch(frame, event, arg)  # what it returns is itself, wrapped: the level that would pile up
        return top_level

    setattr(top_level, _FLAT, tracer)
    bottom.f_trace = top_level
    return bottom
