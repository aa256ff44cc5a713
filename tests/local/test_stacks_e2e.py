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

from tests.helpers.ddp_job import marked_project
from tests.helpers.jobs import launch_job

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
    project, marks = marked_project(tmp_path, SCRIPT)
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


# rank 1 raises and is held for a post-mortem (which starts debugpy in it); rank 0 carries on meanwhile
HELD_SCRIPT = textwrap.dedent(
    """
    import pathlib, time
    import torch.distributed as dist

    marks = pathlib.Path({marks!r})
    dist.init_process_group("gloo")

    def compute(n):
        bad_value = n * 6
        raise ValueError(f"bad {{bad_value}}")

    if dist.get_rank() == 1:
        compute(7)
    deadline = time.monotonic() + 120
    while not (marks / "release").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    """
)


def test_a_held_rank_shows_where_it_raised_and_debugpy_threads_only_when_asked(home: Path, tmp_path: Path) -> None:
    project, marks = marked_project(tmp_path, HELD_SCRIPT)
    job = launch_job("held-stacks", project, nproc_per_node=2, hold_on_failure=60)
    try:
        deadline = time.monotonic() + 90
        while not any(r.state == "held" for m in job.backend.manifests(job.name).values() if m for r in m.ranks):
            assert time.monotonic() < deadline, job.logs()
            time.sleep(0.2)

        proc = cli("stacks", "held-stacks", "--ranks", "1", "--json")
        assert proc.returncode == 0, proc.stderr
        [rank] = json.loads(proc.stdout)["ranks"]
        # the user's thread only, though debugpy runs in the rank since the hold started it
        assert [t["name"] for t in rank["threads"]] == ["MainThread"], rank["threads"]
        [main] = rank["threads"]
        # where it raised, as the traceback printed it: not the excepthook frames the rank waits in
        assert [(Path(f["file"]).name, f["function"], f["line"]) for f in main["frames"]] == [
            ("train.py", "<module>", 13),
            ("train.py", "compute", 10),
        ]
        assert main["exception"] == "ValueError: bad 42"
        assert rank["state"] == "held" and 30 < rank["hold_seconds_left"] <= 60

        everything = cli("stacks", "held-stacks", "--ranks", "1", "--all-threads", "--json")
        assert everything.returncode == 0, everything.stderr
        threads = json.loads(everything.stdout)["ranks"][0]["threads"]
        assert len(threads) > 1 and all(t["internal"] for t in threads if t["name"] != "MainThread")

        human = cli("stacks", "held-stacks", "--ranks", "1")
        assert human.returncode == 0, human.stderr
        lines = human.stdout.splitlines()
        assert lines[0].startswith("rank 1 (algo-1, pid ") and "): held for post-mortem, " in lines[0]
        raised_in = main["frames"][-1]["file"]
        assert lines[-2:] == [f'    File "{raised_in}", line 10, in compute', "  ValueError: bad 42"]
    finally:
        (marks / "release").write_text("")
        job.backend.stop(job.name)
