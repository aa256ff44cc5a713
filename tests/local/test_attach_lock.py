"""One IDE attach per job: a second one is refused in one line naming the first; a crashed holder
never blocks the next attach; attaches to different jobs do not exclude each other."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from remote_debug.laptop.core.paths import StatePaths
from remote_debug.laptop.ide.attach_lock import AttachLock, AttachRefusedError
from remote_debug.laptop.ide.editor import Editor
from tests.helpers.hook_runs import wait_for

ROOT = Path(__file__).resolve().parents[2]

# holds job "train"'s lock as an attach would, then sleeps until killed
HOLDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from remote_debug.laptop.ide.attach_lock import AttachLock
    from remote_debug.laptop.core.paths import StatePaths
    from remote_debug.laptop.ide.editor import Editor
    AttachLock.acquire(StatePaths(Path(sys.argv[1])), "train", ide=Editor.VSCODE, workspace=Path(sys.argv[2]))
    print("locked", flush=True)
    time.sleep(120)
    """
)


def test_a_second_ide_attach_is_refused_naming_the_first(tmp_path: Path) -> None:
    paths = StatePaths(tmp_path / "state")
    first = AttachLock.acquire(paths, "train", ide=Editor.VSCODE, workspace=tmp_path / "ws")
    try:
        with pytest.raises(AttachRefusedError) as refused:
            AttachLock.acquire(paths, "train", ide=Editor.VSCODE, workspace=tmp_path / "other")
        message = str(refused.value)
        assert "\n" not in message
        assert f"pid {os.getpid()}" in message and f"workspace {tmp_path / 'ws'}" in message
        assert re.search(r"since \d\d:\d\d:\d\d,", message)  # since when (today: the time of day)
        assert "--headless" in message  # what runs alongside instead
        # another job in the same workspace: its own lock
        AttachLock.acquire(paths, "eval", ide=Editor.VSCODE, workspace=tmp_path / "ws").release()
    finally:
        first.release()
    AttachLock.acquire(paths, "train", ide=Editor.PYCHARM, workspace=tmp_path / "ws").release()
    assert not paths.attach_lock("train").parent.exists()  # released: nothing of it is left


def test_a_killed_holder_does_not_block_the_next_attach(tmp_path: Path) -> None:
    state = tmp_path / "state"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(state), str(tmp_path / "ws")],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        with pytest.raises(AttachRefusedError, match=f"pid {holder.pid},"):
            AttachLock.acquire(StatePaths(state), "train", ide=Editor.VSCODE, workspace=tmp_path)
        holder.send_signal(signal.SIGKILL)  # no clean-up of its own
        holder.wait(10)
        lock = wait_for(lambda: _try_acquire(StatePaths(state)), 5, "the lock to be free once its holder died")
        lock.release()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(10)


def _try_acquire(paths: StatePaths) -> AttachLock | None:
    try:
        return AttachLock.acquire(paths, "train", ide=Editor.VSCODE, workspace=paths.root)
    except AttachRefusedError:
        return None
