"""Our own threads inside a training process: invisible to the user's debugger.

Cheap to import (the standard library only): ``bootstrap`` uses it from every Python process of a job.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


def quiet_thread(target: Callable[[], object], name: str) -> threading.Thread:
    """A daemon thread that debugpy neither traces nor lists (it is ours, not the user's)."""
    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.pydev_do_not_trace = True  # type: ignore[attr-defined]
    thread.is_pydev_daemon_thread = True  # type: ignore[attr-defined]
    return thread
