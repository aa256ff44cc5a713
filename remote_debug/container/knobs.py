"""Tuning knobs in seconds from the environment, read the same way by the hook and every rank.

Cheap to import (the standard library and the contract): ``bootstrap`` uses it from every Python
process of a job, before it knows whether the process matters.
"""

from __future__ import annotations

from collections.abc import Mapping

from remote_debug.container.log import log
from remote_debug.contract.spec import env_seconds


def seconds_knob(env: Mapping[str, str], name: str, default: float, *, low: float = 0.0, high: float) -> float:
    """A tuning knob in seconds (``REMOTE_DEBUG_STOP_GRACE`` & co.) from ``env``: unset or blank gives
    ``default``; so does a bad value, with one log line saying so - a knob never stops the hook or a rank.
    """
    value, problem = env_seconds(env, name, default, low=low, high=high)
    if problem:
        log(f"{problem}; using {default:g}")
    return value
