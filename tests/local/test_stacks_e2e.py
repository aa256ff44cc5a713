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

        human = cli("stacks", "hung", "--ranks", "1", "--flat")
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

        raised_in = main["frames"][-1]["file"]
        flat = cli("stacks", "held-stacks", "--ranks", "1", "--flat")
        assert flat.returncode == 0, flat.stderr
        lines = flat.stdout.splitlines()
        assert lines[0].startswith("rank 1 (algo-1, pid ") and "): held for post-mortem, " in lines[0]
        assert lines[-2:] == [f'    File "{raised_in}", line 10, in compute', "  ValueError: bad 42"]

        # grouped (the default): where it raised, innermost first, the hold marked, the exception after the frames
        human = cli("stacks", "held-stacks", "--ranks", "1")
        assert human.returncode == 0, human.stderr
        lines = human.stdout.splitlines()
        assert lines[0].startswith(
            "rank 1 (1): compute (train.py:10) ← <module> (train.py:13) [root cause] [held for post-mortem, "
        )
        assert lines[-2:] == [f'  File "{raised_in}", line 10, in compute', "  ValueError: bad 42"]
    finally:
        (marks / "release").write_text("")
        job.backend.stop(job.name)


# the hang view: ranks 0-2 wait in an all_reduce that rank 3, still in load_batch(), never entered; the Flight
# Recorder is on (set before torch is imported, as a user's launcher would), so its gloo records say so too
HANG_SCRIPT = textwrap.dedent(
    """
    import os
    os.environ["TORCH_FR_BUFFER_SIZE"] = "64"
    import pathlib, time
    import torch
    import torch.distributed as dist

    marks = pathlib.Path({marks!r})
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    dist.barrier()
    (marks / f"ready-{{rank}}").write_text("")

    def load_batch():
        deadline = time.monotonic() + 120
        while not (marks / "release").exists() and time.monotonic() < deadline:
            time.sleep(0.05)  # LOAD-LINE

    if rank == 3:
        load_batch()  # CALL-LINE
    dist.all_reduce(torch.ones(4))  # REDUCE-LINE
    dist.destroy_process_group()
    """
)


def test_stacks_groups_ranks_by_stack_the_odd_rank_first(home: Path, tmp_path: Path) -> None:
    project, marks = marked_project(tmp_path, HANG_SCRIPT)
    source = (project / "train.py").read_text().splitlines()
    load_line, call_line, reduce_line = (
        next(i for i, text in enumerate(source, 1) if mark in text)
        for mark in ("LOAD-LINE", "CALL-LINE", "REDUCE-LINE")
    )
    job = launch_job("hang-view", project, nproc_per_node=4)
    try:
        deadline = time.monotonic() + 90
        while not all((marks / f"ready-{r}").exists() for r in range(4)):
            assert time.monotonic() < deadline, job.logs()
            time.sleep(0.2)
        time.sleep(1.0)  # ranks 0-2 into their all_reduce

        human = cli("stacks", "hang-view")
        assert human.returncode == 0, human.stderr
        lines = human.stdout.splitlines()
        # the odd rank first, then the three that agree, each class once, the innermost frame first
        assert lines[0] == f"rank 3 (1): load_batch (train.py:{load_line}) ← <module> (train.py:{call_line})"
        [header] = [line for line in lines if line.startswith("ranks ")]
        assert header.startswith("ranks 0-2 (3): all_reduce (distributed_c10d.py:"), header
        assert f"← <module> (train.py:{reduce_line})" in header and header.endswith(" [blocked in native code]")
        assert lines.index(header) > 0
        code = Path(job.backend.describe(job.name).code_dirs["algo-1"]) / "train.py"
        assert f'  File "{code}", line {load_line}, in load_batch' in lines
        # the Flight Recorder: the three entered the job's second collective (a barrier, then all_reduce), rank 3 not
        assert lines[-1] == (
            "Flight Recorder: collective #2 all_reduce (group 0, default_pg): "
            "rank 3 never entered it (its newest: #1 barrier); ranks 0-2 wait in it"
        ), human.stdout

        as_json = cli("stacks", "hang-view", "--json")
        assert as_json.returncode == 0, as_json.stderr
        report = json.loads(as_json.stdout)
        assert [r["rank"] for r in report["ranks"]] == [0, 1, 2, 3]  # the flat form, as before
        classes = report["classes"]
        assert [(c["ranks"], c["ranges"], c["count"]) for c in classes] == [([3], "3", 1), ([0, 1, 2], "0-2", 3)]
        # the header line's call path (its marks apart: those are fields of their own)
        assert [c["summary"] for c in classes] == [
            lines[0].split(": ", 1)[1],
            header.split(": ", 1)[1].removesuffix(" [blocked in native code]"),
        ]
        assert classes[1]["frames"][-1]["function"] == "all_reduce" and classes[1]["blocked_in_native"] is True
        assert classes[0]["blocked_in_native"] is None and classes[0]["thread"] == "MainThread"
        [stuck] = report["collectives"]
        assert (stuck["seq"], stuck["op"], stuck["missing"], stuck["entered"]) == (2, "all_reduce", [3], [0, 1, 2])

        flat = cli("stacks", "hang-view", "--flat")
        assert flat.returncode == 0, flat.stderr
        assert [line.split(" (")[0] for line in flat.stdout.splitlines() if line.startswith("rank ")] == [
            f"rank {r}" for r in range(4)
        ]
        assert f'    File "{code}", line {load_line}, in load_batch' in flat.stdout.splitlines()
    finally:
        (marks / "release").write_text("")
    assert job.wait_status(("Completed", "Failed", "Stopped")) == "Completed", job.logs()
