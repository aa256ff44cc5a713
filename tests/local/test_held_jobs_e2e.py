"""A torchrun rank that failed, as the laptop sees it: held for a post-mortem in ``jobs`` (with the
seconds left, first as the root cause, its peer held with it) and in the node log; once failed, the job's
reason is the rank's exception line."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from remote_debug.laptop.core.jobinfo import HeldRank
from tests.helpers.ddp_job import marked_project
from tests.helpers.jobs import launch_job

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")

# rank 1 raises at once; rank 0 would carry on (no collective), but is held with rank 1 (the whole gang)
SCRIPT = textwrap.dedent(
    """
    import pathlib, sys, time
    import torch.distributed as dist

    marks = pathlib.Path({marks!r})
    dist.init_process_group("gloo")
    if dist.get_rank() == 1:
        raise ValueError("bad 42")
    deadline = time.monotonic() + 120
    while not (marks / "release").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    """
)


def test_jobs_shows_the_held_rank_and_its_seconds_left(home: Path, tmp_path: Path) -> None:
    project, marks = marked_project(tmp_path, SCRIPT)
    job = launch_job("held-jobs", project, nproc_per_node=2, hold_on_failure=60)
    try:
        deadline = time.monotonic() + 90
        while not (info := job.backend.describe(job.name)).held_ranks:
            assert time.monotonic() < deadline and info.running, (info, job.logs())
            time.sleep(0.2)
        while len((info := job.backend.describe(job.name)).held_ranks) < 2:  # its peer learns of it in a poll
            assert time.monotonic() < deadline and info.running, (info, job.logs())
            time.sleep(0.2)
        [held, peer] = info.held_ranks
        left = held.seconds_left
        assert held == HeldRank(rank=1, node="algo-1", seconds_left=left, error="ValueError: bad 42", root_cause=True)
        assert peer == HeldRank(rank=0, node="algo-1", seconds_left=left, error="ValueError: bad 42", held_for=1)
        assert left is not None and 40 < left <= 60
        assert info.notes == [
            f"rank 1 held for post-mortem, {left} s left (root cause)",
            "rank 0 held with rank 1, which failed",
        ]

        proc = subprocess.run(
            [sys.executable, "-m", "remote_debug", "jobs", "--json"],
            capture_output=True,
            text=True,
            timeout=60,
            env=dict(os.environ),
        )
        assert proc.returncode == 0, proc.stderr
        [listed] = json.loads(proc.stdout)
        entry, peer_entry = listed["held_ranks"]
        assert (entry["rank"], entry["node"], entry["error"], entry["root_cause"]) == (
            1,
            "algo-1",
            "ValueError: bad 42",
            True,
        )
        assert (peer_entry["rank"], peer_entry["held_for"], peer_entry["root_cause"]) == (0, 1, False)
        assert 40 < entry["seconds_left"] <= 60
        human = subprocess.run(
            [sys.executable, "-m", "remote_debug", "jobs"],
            capture_output=True,
            text=True,
            timeout=60,
            env=dict(os.environ),
        )
        [note] = [line for line in human.stdout.splitlines() if "post-mortem" in line]
        assert re.fullmatch(r"held-jobs: rank 1 held for post-mortem, \d+ s left \(root cause\)", note), human.stdout
        assert "held-jobs: rank 0 held with rank 1, which failed" in human.stdout.splitlines(), human.stdout

        # the node's watcher polls once a second: under load it notices the hold a second or two late
        line = re.compile(
            r"\[remote-debug\] node algo-1: rank 1 held for post-mortem, (\d+) s left: ValueError: bad 42"
        )
        deadline = time.monotonic() + 10
        while not (said := line.search(job.logs())):
            assert time.monotonic() < deadline, job.logs()
            time.sleep(0.2)
        assert 50 < int(said.group(1)) <= 60, said.group(0)
    finally:
        (marks / "release").write_text("")
        job.backend.stop(job.name)
    assert job.backend.describe(job.name).held_ranks == []  # a job that ended holds nothing


def test_a_failed_torchrun_job_says_which_exception(home: Path, tmp_path: Path) -> None:
    project, marks = marked_project(tmp_path, SCRIPT)
    job = launch_job("failed-reason", project, nproc_per_node=2)
    (marks / "release").write_text("")
    assert job.wait_status(("Completed", "Failed", "Stopped"), timeout=90) == "Failed"
    reason = job.backend.describe(job.name).failure_reason
    # not torchrun's "=====" banner, the last line the node printed
    assert reason == "node algo-1 exited with code 1: ValueError: bad 42 (rank 1)", reason
