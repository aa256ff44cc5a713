"""``remote-debug stacks``: every torchrun rank's Python stack through SSH, while ranks are blocked,
without ptrace and without leaving a tracer behind."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.jobs import launch_job

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")

# rank 1 sleeps in a barrier (blocked in C) while rank 0 waits in wait_here(); both record their
# tracer at the end.
SCRIPT = textwrap.dedent(
    """
    import pathlib, sys, time
    import torch.distributed as dist

    marks = pathlib.Path({marks!r})
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    (marks / f"ready-{{rank}}").write_text("")

    def wait_here():
        deadline = time.monotonic() + 120
        while not (marks / "release").exists() and time.monotonic() < deadline:
            time.sleep(0.05)

    if rank == 0:
        wait_here()
    dist.barrier()
    (marks / f"trace-{{rank}}").write_text(repr(sys.gettrace()))
    dist.destroy_process_group()
    """
)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "remote_debug", *args], capture_output=True, text=True, timeout=120, env=dict(os.environ)
    )


def test_stacks_show_each_rank_blocked_frame_and_leave_no_tracer(home: Path, tmp_path: Path) -> None:
    project, marks = tmp_path / "project", tmp_path / "marks"
    project.mkdir()
    marks.mkdir()
    (project / "train.py").write_text(SCRIPT.format(marks=str(marks)))
    job = launch_job("hung", project, nproc_per_node=2)
    try:
        deadline = time.monotonic() + 90
        while not all((marks / f"ready-{r}").exists() for r in (0, 1)):
            assert time.monotonic() < deadline, "ranks did not start"
            time.sleep(0.2)
        time.sleep(0.5)  # rank 1 into its barrier

        proc = cli("stacks", "hung", "--json")
        assert proc.returncode == 0, proc.stderr
        report = json.loads(proc.stdout)
        assert report["job"] == "hung" and [r["rank"] for r in report["ranks"]] == [0, 1]
        for r in report["ranks"]:
            assert r["node"] == "algo-1" and r["error"] is None
            main = next(t for t in r["threads"] if t["name"] == "MainThread")
            frames = [(Path(f["file"]).name, f["function"]) for f in main["frames"]]
            assert ("train.py", "<module>") in frames, frames
            if r["rank"] == 0:
                assert frames[-1] == ("train.py", "wait_here"), frames
            else:
                assert frames[-1][1] == "barrier", frames

        human = cli("stacks", "hung", "--ranks", "1")
        assert human.returncode == 0, human.stderr
        assert human.stdout.startswith("rank 1 (algo-1, pid ") and "in barrier" in human.stdout
        assert "rank 0" not in human.stdout
    finally:
        (marks / "release").write_text("")
    assert job.wait_status(("Completed", "Failed", "Stopped")) == "Completed"
    assert [(marks / f"trace-{r}").read_text() for r in (0, 1)] == ["None", "None"]
