"""``attach --ranks 0`` on a job launched with ``--wait``: the ranks it did not select are told, through
their control channels over SSH, to leave their wait window (real local job, torchrun, debugpy)."""

from __future__ import annotations

import importlib.util
import textwrap
import time
from pathlib import Path

import pytest

from remote_debug.contract import spec
from remote_debug.laptop.connection.job_connection import JobConnection
from remote_debug.laptop.connection.rank_control import WaitRelease
from tests.helpers.jobs import launch_job

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")

# no collective: a rank's start says when its own window ended
SCRIPT = textwrap.dedent(
    """
    import os, pathlib, time
    pathlib.Path({marks!r}, "started-" + os.environ["RANK"]).write_text(repr(time.monotonic()))
    """
)


def _waiting(connection: JobConnection) -> dict[str, spec.NodeManifest]:
    deadline = time.monotonic() + 90
    while True:
        manifests = connection.manifests()
        states = [r.state for m in manifests.values() for r in m.ranks]
        if states == [spec.RankState.WAITING] * 2:
            return manifests
        assert time.monotonic() < deadline, states
        time.sleep(0.2)


def test_unselected_ranks_leave_their_wait_window(home: Path, tmp_path: Path) -> None:
    project, marks = tmp_path / "project", tmp_path / "marks"
    project.mkdir()
    marks.mkdir()
    (project / "train.py").write_text(SCRIPT.format(marks=str(marks)))
    job = launch_job("waits", project, nproc_per_node=2, wait_seconds=120)
    with JobConnection(job.backend, job.name, job.paths) as connection:
        connection.write_ssh_entries(connection.wait_for_manifests(60), edit_user_config=False)
        manifests = _waiting(connection)
        release = WaitRelease(connection.control)
        assert release.release(manifests, None) == []  # every rank selected: all keep waiting
        told_at = time.monotonic()
        assert release.release(manifests, (0,)) == [1]
        assert release.release(manifests, (0,)) == []  # told once
        deadline = time.monotonic() + 30
        while not (marks / "started-1").exists():
            assert time.monotonic() < deadline, job.logs()
            time.sleep(0.1)
        assert float((marks / "started-1").read_text()) - told_at < 15  # not the 120 s window
        assert not (marks / "started-0").exists()  # the selected rank still waits for its debugger

        assert release.release(_waiting_rank0(connection), (1,)) == [0]  # as a second attach --ranks 1 would
    assert job.wait_status(("Completed", "Failed", "Stopped")) == "Completed"
    assert "rank 1: attach selected other ranks; leaving the wait window after" in job.logs()


def _waiting_rank0(connection: JobConnection) -> dict[str, spec.NodeManifest]:
    manifests = connection.manifests()
    states = {r.rank: r.state for m in manifests.values() for r in m.ranks}
    assert states[0] == spec.RankState.WAITING, states
    return manifests


def test_attach_ranks_0_lets_the_other_ranks_run_on(home: Path, tmp_path: Path) -> None:
    """The user's path: `attach --ranks 0 --headless` on a `--wait 120` job stops rank 0 at its breakpoint
    while rank 1 starts at once, not after its 120 s window."""
    from remote_debug.laptop.attach.attacher import AttachOptions
    from remote_debug.laptop.ide.headless_session import HeadlessPlan

    project, marks = tmp_path / "project", tmp_path / "marks"
    project.mkdir()
    marks.mkdir()
    (project / "train.py").write_text(SCRIPT.format(marks=str(marks)) + "value = 42  # break here\n")
    job = launch_job("waits-attach", project, nproc_per_node=2, wait_seconds=120)
    started = time.monotonic()
    plan = HeadlessPlan(breakpoints={str(project / "train.py"): [4]}, steps=0)
    result = job.attach(AttachOptions(ranks=(0,), workspace=project, headless=plan, write_launch_json=False), None)
    assert [(r.rank, r.stops[0].line) for r in result.reports] == [(0, 4)], result.reports
    assert result.job.status == "Completed", job.logs()
    assert time.monotonic() - started < 60, job.logs()  # neither rank sat out the 120 s window
    assert "rank 1: attach selected other ranks; leaving the wait window after" in job.logs()
