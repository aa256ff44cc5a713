"""Waiting in a test for something a job or a process does, with a bound and a message that says what."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(
    check: Callable[[], object], timeout: float, what: str | Callable[[], object], every: float = 0.05
) -> None:
    """Until ``check()`` is true; AssertionError after ``timeout`` s naming ``what`` (a callable is asked
    then, so the message shows the state at the end: the rank states, the job's log)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what() if callable(what) else what}")
        time.sleep(every)
