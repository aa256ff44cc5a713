"""remote_debug/oskit/osutil.py: atomic writes and process liveness, shared by the job and the laptop."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from remote_debug.oskit import osutil


def test_atomic_write_mode(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "f.txt"
    osutil.atomic_write_text(target, "one", mode=0o600)
    assert target.read_text() == "one" and target.stat().st_mode & 0o777 == 0o600
    osutil.atomic_write_text(target, "two")
    assert target.read_text() == "two" and target.stat().st_mode & 0o777 == 0o644


def test_pid_alive_sees_running_zombie_and_gone_processes() -> None:

    assert osutil.pid_alive(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 10
    while osutil.pid_alive(child.pid) and time.monotonic() < deadline:  # exited, not reaped yet: a zombie
        time.sleep(0.02)
    assert not osutil.pid_alive(child.pid)
    child.wait()
    assert not osutil.pid_alive(child.pid) and not osutil.pid_alive(0)


# --- the choices are enums; the wire format is the same strings --------------------------------------


def test_proc_stat_reads_state_and_parent() -> None:

    fields = osutil.proc_stat(os.getpid())
    assert fields is not None and fields[0] in "RS" and fields[1] == str(os.getppid())
    assert osutil.proc_stat(0) is None and osutil.proc_stat(2**22 + 12345) is None
