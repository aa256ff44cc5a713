"""Shared fixtures: a throwaway HOME/state dir, and cleanup of every local job a test launched."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from remote_debug.laptop.core.paths import StatePaths
from tests.helpers import strict_aws

# every in-process boto3 request meets AWS's server-side checks (patterns, lengths), not only botocore's
strict_aws.install()


def _kill_group(pid: int) -> None:
    """Kill a process group we started (nodes and supervisors run in their own sessions)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def cleanup_jobs(paths: StatePaths) -> None:
    if not paths.jobs_dir.is_dir():
        return
    for job_dir in paths.jobs_dir.iterdir():
        pid_file = job_dir / "supervisor.pid"
        if pid_file.exists():
            try:
                _kill_group(int(pid_file.read_text()))
            except ValueError:
                pass
        try:
            state = json.loads((job_dir / "job.json").read_text())
        except (OSError, ValueError):
            continue
        for pid in (state.get("node_pids") or {}).values():
            _kill_group(int(pid))
        if state.get("netns"):  # multi-node jobs as root: the nodes' network namespaces
            from remote_debug.oskit import netns

            time.sleep(0.1)
            netns.delete([str(name) for name in state["netns"]])


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """HOME -> a temp dir (our state dir follows it).  OpenSSH ignores $HOME: tests pass -F."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("REMOTE_DEBUG_HOME", raising=False)
    for name in list(os.environ):
        if name.startswith("REMOTE_DEBUG_"):
            monkeypatch.delenv(name)
    paths = StatePaths.default()
    try:
        yield home
    finally:
        cleanup_jobs(paths)
        time.sleep(0.1)


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A live process of ours that is not a job (a pid that exists, for "job still alive" checks)."""
    proc = subprocess.Popen(["sleep", "300"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()
