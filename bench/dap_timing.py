"""How long a DAP ``next`` takes: the step loop P5 runs on every path (direct, tunnel, SSM)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from remote_debug.laptop.ide.dap_client import DapClient, inspect_stop


def dap_next_ms(connect: Callable[[], DapClient], script: str, steps: int, stop_timeout: float = 60) -> float:
    """Median ms of ``steps`` DAP ``next`` requests (request -> ``stopped``) in the client ``connect``
    returns, once it has stopped at its breakpoint in ``script``; the debuggee then runs on."""
    client = connect()
    try:
        hit = inspect_stop(client, stop_timeout)
        client.set_breakpoints(script, [])
        times = []
        for _ in range(steps):
            t = time.perf_counter()
            client.next(hit.thread_id)
            client.wait_stopped(30)
            times.append(time.perf_counter() - t)
        client.continue_(hit.thread_id)
        client.disconnect()
    finally:
        client.close()
    return statistics.median(times) * 1000
