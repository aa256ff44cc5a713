"""A Ctrl-C that cannot be lost.

Python raises KeyboardInterrupt wherever the main thread happens to be; when that is a ``__del__``
run by the garbage collector (measured: ``regex``'s ``Group.__del__`` while attach parses
launch.json), Python prints "Exception ignored" and carries on, and attach would then wait for the
job as if nothing happened.  The handler also records the request; long-running loops call
:func:`check` and raise it again.
"""

from __future__ import annotations

import signal
import sys
import threading
from types import FrameType

_requested = threading.Event()


def _on_sigint(_signum: int, _frame: FrameType | None) -> None:
    _requested.set()
    raise KeyboardInterrupt


def _quiet_unraisable(unraisable: sys.UnraisableHookArgs) -> None:
    if issubclass(unraisable.exc_type, KeyboardInterrupt) and _requested.is_set():
        return  # recorded: check() raises it again where it can propagate; no "Exception ignored" noise
    _python_unraisablehook(unraisable)


_python_unraisablehook = sys.unraisablehook


def install() -> None:
    """Route SIGINT through the recording handler (main thread only; elsewhere a no-op)."""
    _requested.clear()
    sys.unraisablehook = _quiet_unraisable
    try:
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not when SIGINT is ignored
            signal.signal(signal.SIGINT, _on_sigint)
    except ValueError:  # not the main thread
        pass


def requested() -> bool:
    """Whether Ctrl-C was pressed since :func:`install`."""
    return _requested.is_set()


def check() -> None:
    """Raise KeyboardInterrupt if Ctrl-C was pressed, also when its first raise was swallowed."""
    if _requested.is_set():
        raise KeyboardInterrupt
