"""The hook as the container's PID 1 (SageMaker execs a wrapped entry into it) reaps orphans and passes signals on.

Run in a PID namespace of its own (``unshare --pid --fork``), as in a container: a command that leaves an orphan
behind (a backgrounded grandchild that then exits) used to leave a zombie re-parented to the hook for the job's
whole life; the exit code and a SIGTERM sent to PID 1 must still behave as before.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from remote_debug.container.node.init_reaper import become_init_if_pid1

REPO = Path(__file__).resolve().parents[2]
UNSHARE = shutil.which("unshare")
pytestmark = pytest.mark.skipif(UNSHARE is None or os.geteuid() != 0, reason="needs root and unshare (a PID namespace)")

# After the orphan (a backgrounded sleep whose shell exits at once) ends, count the zombies in the namespace.
ORPHAN_THEN_COUNT = (
    'sh -c "sleep 0.3 &"; sleep 1.2; '
    'z=0; for f in /proc/[0-9]*/stat; do set -- $(cat $f 2>/dev/null); [ "$3" = Z ] && z=$((z+1)); done; '
    'echo "zombies=$z"; exit 7'
)


def _as_pid1(command: str, **popen: Any) -> subprocess.Popen[str]:
    assert UNSHARE is not None
    return subprocess.Popen(
        [
            UNSHARE,
            "--pid",
            "--fork",
            "--mount-proc",
            sys.executable,
            "-m",
            "remote_debug.container",
            "--",
            "sh",
            "-c",
            command,
        ],
        cwd=REPO,
        env={k: v for k, v in os.environ.items() if not k.startswith("REMOTE_DEBUG_")},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )


def test_orphans_are_reaped_and_the_exit_code_is_the_commands() -> None:
    proc = _as_pid1(ORPHAN_THEN_COUNT)
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 7, err
    assert "zombies=0" in out, out + err


def test_a_stop_signal_to_pid1_reaches_the_command() -> None:
    proc = _as_pid1(
        "trap 'echo got-term; exit 0' TERM; echo started; while :; do sleep 0.1; done", start_new_session=True
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "started"
        # the namespace's PID 1 is unshare's child: signal it as the platform signals a container's first process
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        deadline = time.monotonic() + 10
        while not children and time.monotonic() < deadline:
            time.sleep(0.05)
            children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        os.kill(int(children[0]), signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert "got-term" in out, out + err
    assert proc.returncode == 0, err


def test_not_pid1_changes_nothing() -> None:
    before = os.getpid()
    become_init_if_pid1()  # this test process is not PID 1: no fork
    assert os.getpid() == before
