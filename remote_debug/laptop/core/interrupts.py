"""A Ctrl-C that cannot be lost.

Python raises KeyboardInterrupt wherever the main thread happens to be; when that is a ``__del__``
run by the garbage collector (measured: ``regex``'s ``Group.__del__`` while attach parses
launch.json), Python prints "Exception ignored" and carries on, and attach would then wait for the
job as if nothing happened.  The handler also records the request; long-running loops call
:func:`check` and raise it again.

An attach also ends this way on SIGHUP (its terminal closed) and SIGTERM (the VS Code extension's
escalation after SIGINT): left at their default, those killed it without its clean-up, and its
launch.json entries kept ports that any local user could then bind (:func:`end_attach_on_hangup`).
The clean-up itself runs :func:`deferred`: a second signal is recorded, not raised in the middle of
giving the entries back.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType

_requested = threading.Event()
_deferring = threading.Event()  # inside deferred(): record, do not raise


def _on_sigint(_signum: int, _frame: FrameType | None) -> None:
    _requested.set()
    if _deferring.is_set():
        return  # a clean-up is under way: it runs to its (bounded) end, then the process exits
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


def end_attach_on_hangup() -> None:
    """SIGHUP and SIGTERM end the process like Ctrl-C, so that its ``finally`` clean-up runs (main
    thread only, and only where they are at their default: an embedding caller's handlers stay)."""
    for signum in (signal.SIGHUP, signal.SIGTERM):
        try:
            if signal.getsignal(signum) == signal.SIG_DFL:
                signal.signal(signum, _on_sigint)
        except ValueError:  # not the main thread
            pass


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """A clean-up that a further Ctrl-C (SIGHUP, SIGTERM) must not cut short: those are only recorded
    meanwhile.  Keep it short: a process stuck in it can still be killed (SIGKILL), and the next attach
    or ``prune`` finishes its work."""
    was = _deferring.is_set()
    _deferring.set()
    try:
        yield
    finally:
        if not was:
            _deferring.clear()


def requested() -> bool:
    """Whether Ctrl-C was pressed since :func:`install`."""
    return _requested.is_set()


def check() -> None:
    """Raise KeyboardInterrupt if Ctrl-C was pressed, also when its first raise was swallowed."""
    if _requested.is_set():
        raise KeyboardInterrupt
