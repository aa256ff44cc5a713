"""pydevd-pycharm in a rank: path mappings, settrace's keywords, and a settrace that can never hang."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from remote_debug.container.rank import pycharm_rank
from tests.container.test_pycharm_link import VERSION_LINE, FarEnd, far_end


def test_path_mappings_and_settrace_keywords() -> None:
    assert pycharm_rank.merged_path_mappings(None, "", "/job") is None
    assert pycharm_rank.merged_path_mappings(None, "/ide", "/job") == '[["/ide", "/job"]]'
    # the user's own mappings come first and stay
    assert pycharm_rank.merged_path_mappings('[["/a", "/b"]]', "/ide", "/job") == '[["/a", "/b"], ["/ide", "/job"]]'
    assert pycharm_rank.merged_path_mappings("not json", "/ide", "/job") == "not json"

    def new(host: str, stdout_to_server: bool = False, stderr_to_server: bool = False, port: int = 0) -> None: ...
    def old(host: str, stdoutToServer: bool = False, stderrToServer: bool = False, port: int = 0) -> None: ...

    assert pycharm_rank.output_kwargs(new, True) == {"stdout_to_server": True, "stderr_to_server": True}
    assert pycharm_rank.output_kwargs(old, True) == {"stdoutToServer": True, "stderrToServer": True}


SETTRACE_SCRIPT = """
import sys, time
from remote_debug.container.rank import pycharm_rank as pr
pr.RUN_GRACE = 1.0
port = int(sys.argv[1])
t0 = time.monotonic()
from remote_debug.container.rank import pycharm_link
conn = pycharm_link.connect(port, time.monotonic() + 10)
ok, why = pr.settrace(conn, port, time.monotonic())
print("RESULT", ok, round(time.monotonic() - t0, 2), why, flush=True)
"""


def ide_that_never_runs(conn: socket.socket) -> None:
    conn.sendall(VERSION_LINE)  # handshake starts, but no breakpoints and no CMD_RUN ever follow
    time.sleep(60)


def ide_that_vanishes(conn: socket.socket) -> None:
    conn.sendall(VERSION_LINE)
    conn.recv(4096)  # pydevd's version reply
    conn.shutdown(socket.SHUT_RDWR)
    conn.close()


@pytest.mark.parametrize("behaviour", [ide_that_never_runs, ide_that_vanishes], ids=["no-run", "vanishes"])
def test_settrace_is_released_when_the_ide_never_says_run(behaviour: FarEnd) -> None:
    """pydevd's settrace waits for CMD_RUN without a timeout: our watchdog must release it."""
    with far_end(behaviour) as port:
        proc = subprocess.Popen(
            [sys.executable, "-c", SETTRACE_SCRIPT, str(port)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=90)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    result = [line for line in out.splitlines() if line.startswith("RESULT")]
    assert result, err[-2000:]
    _, attached, seconds, *_why = result[0].split()
    assert attached == "False"
    assert float(seconds) < 30
    assert proc.returncode == 0
