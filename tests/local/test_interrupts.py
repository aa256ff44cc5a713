"""A Ctrl-C that Python swallows (raised inside a destructor) is still honoured, and quietly."""

from __future__ import annotations

import os
import signal
import sys

import pytest

from remote_debug.local import interrupts


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
