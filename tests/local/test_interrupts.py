"""A Ctrl-C that Python swallows (raised inside a destructor) is still honoured, and quietly."""

from __future__ import annotations

import os
import signal
import sys

import pytest

from remote_debug.laptop.core import interrupts


class RaisesInDestructor:
    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGINT)  # the handler runs here: its KeyboardInterrupt is "ignored"
        for _ in range(1000):
            pass


def test_ctrl_c_swallowed_in_a_destructor_is_raised_again(capsys: pytest.CaptureFixture[str]) -> None:
    previous_handler, previous_hook = signal.getsignal(signal.SIGINT), sys.unraisablehook
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        interrupts.install()
        interrupts.check()  # nothing pressed yet
        obj = RaisesInDestructor()
        del obj  # Python prints "Exception ignored in ..." and runs on -- without the record, Ctrl-C is lost
        with pytest.raises(KeyboardInterrupt):
            interrupts.check()
        assert "Exception ignored" not in capsys.readouterr().err
    finally:
        signal.signal(signal.SIGINT, previous_handler)
        sys.unraisablehook = previous_hook
        interrupts._requested.clear()


def test_a_signal_during_a_deferred_clean_up_is_recorded_not_raised() -> None:
    """The attach's clean-up (giving launch.json entries back) runs to its end under a second Ctrl-C,
    SIGHUP or SIGTERM; outside it they raise as before."""
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM)}
    previous_hook = sys.unraisablehook
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for s in (signal.SIGHUP, signal.SIGTERM):
        signal.signal(s, signal.SIG_DFL)
    try:
        interrupts.install()
        interrupts.end_attach_on_hangup()
        for s in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
            with interrupts.deferred():
                os.kill(os.getpid(), s)
                for _ in range(1000):  # the handler runs between bytecodes
                    pass
            assert interrupts.requested()
            interrupts._requested.clear()
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), s)
                for _ in range(1000):
                    pass
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        sys.unraisablehook = previous_hook
        interrupts._requested.clear()
