"""Small pieces several container modules need, one copy each.

Cheap to import (the standard library and the contract): ``bootstrap`` uses it from every Python
process of a job, before it knows whether the process matters.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

from remote_debug.container.log import log
from remote_debug.spec import env_seconds


def quiet_thread(target: Callable[[], object], name: str) -> threading.Thread:
    """A daemon thread that debugpy neither traces nor lists (it is ours, not the user's)."""
    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.pydev_do_not_trace = True  # type: ignore[attr-defined]
    thread.is_pydev_daemon_thread = True  # type: ignore[attr-defined]
    return thread


def seconds_knob(env: Mapping[str, str], name: str, default: float, *, low: float = 0.0, high: float) -> float:
    """A tuning knob in seconds (``REMOTE_DEBUG_STOP_GRACE`` & co.) from ``env``: unset or blank gives
    ``default``; so does a bad value, with one log line saying so - a knob never stops the hook or a rank.
    """
    value, problem = env_seconds(env, name, default, low=low, high=high)
    if problem:
        log(f"{problem}; using {default:g}")
    return value
