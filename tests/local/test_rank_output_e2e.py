"""What the ranks print, on real torchrun jobs: ``remote-debug logs`` (from the start of the run, each line with its
rank, ``--follow`` until the job ends), and ``attach --headless --log`` / ``--show-output`` (every rank's logpoint
lines and prints, tagged with the rank, without pausing anyone).  Bad input: tests/cli/test_logs_cli.py."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.helpers.jobs import LocalJob, launch_job

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
CLI = [sys.executable, "-m", "remote_debug"]
T = TypeVar("T")

# Each rank prints (Python: tagged by its agent; C level: untagged), waits for the test's "late", prints again
PRINTER = textwrap.dedent(
    """
    import os, pathlib, sys, time

    rank = int(os.environ["RANK"])
    marks = pathlib.Path({marks!r})
    print(f"hello from {{rank}}", flush=True)
    print(f"warning of {{rank}}", file=sys.stderr, flush=True)
    os.write(1, f"raw write of local rank {{os.environ['LOCAL_RANK']}}\\n".encode())
    while not (marks / "late").exists():
        time.sleep(0.05)
    print(f"late line of {{rank}}", flush=True)
    """
)

# Every rank loops (no collective) until the test drops "done"; LOG-HERE is the logpoint's line
LOOP = textwrap.dedent(
    """
    import os, pathlib, time

    rank = int(os.environ["RANK"])
    marks = pathlib.Path({marks!r})
    step = 0
    while not (marks / "done").exists():
        step += 1
        (marks / f"steps-{{rank}}").write_text(str(step))
        loss = round(1.0 / step, 4)  # LOG-HERE
        if step % 25 == 0:
            print(f"tick {{step}}", flush=True)
        time.sleep(0.02)
    """
)
LOG_LINE = LOOP.splitlines().index("    loss = round(1.0 / step, 4)  # LOG-HERE") + 1


def _wait(check: Callable[[], T], timeout: float, why: Callable[[], object]) -> T:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, why()
        time.sleep(0.1)
    return value


def _project(tmp_path: Path, script: str) -> tuple[Path, Path]:
    project, marks = tmp_path / "project", tmp_path / "marks"
    project.mkdir()
    marks.mkdir()
    (project / "train.py").write_text(script.format(marks=str(marks)))
    return project, marks


def _logs(job: LocalJob, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "logs", job.name, *args], capture_output=True, text=True, timeout=60)


def test_logs_attribute_each_line_to_its_rank_and_follow_to_the_end(home: Path, tmp_path: Path) -> None:
    del home
    project, marks = _project(tmp_path, PRINTER)
    job = launch_job("printer", project, nodes=2, nproc_per_node=2, netns=False)
    _wait(lambda: job.logs().count("hello from") == 4, 120, lambda: (job.status(), job.logs()))

    done = _logs(job, "--json")
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    for rank in range(4):
        node = f"algo-{1 + rank // 2}"
        assert {"node": node, "rank": rank, "line": f"hello from {rank}", "time": None} in lines, lines
        assert {"node": node, "rank": rank, "line": f"warning of {rank}", "time": None} in lines, lines
    # written below Python: only its node is known (the line itself names the local rank here)
    raw = [line for line in lines if line["line"].startswith("raw write")]
    assert sorted((line["node"], line["rank"]) for line in raw) == [("algo-1", None)] * 2 + [("algo-2", None)] * 2
    assert not [line for line in lines if "[remote-debug]" in line["line"] or "[rank " in line["line"]], lines

    # one rank's lines; the text form
    only = _logs(job, "--ranks", "3")
    assert only.returncode == 0 and only.stdout.splitlines() == ["[rank 3] hello from 3", "[rank 3] warning of 3"]
    assert "[algo-1] raw write of local rank 0" in _logs(job).stdout.splitlines()
    tail = [json.loads(line) for line in _logs(job, "--ranks", "0-3", "--tail", "2", "--json").stdout.splitlines()]
    assert len(tail) == 2 and {line["node"] for line in tail} == {"algo-2"}, tail  # algo-2's file is read last

    # --follow: the run so far, then a line printed later, and it ends with the job
    seen: list[dict[str, Any]] = []
    with subprocess.Popen(
        [*CLI, "logs", job.name, "--follow", "--json", "--ranks", "0,3"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as follower:
        reader = threading.Thread(target=lambda: seen.extend(json.loads(line) for line in follower.stdout or []))
        reader.start()
        try:
            _wait(lambda: len([s for s in seen if s["line"].startswith("hello")]) == 2, 30, lambda: seen)
            (marks / "late").touch()
            assert follower.wait(timeout=90) == 0, follower.stderr.read() if follower.stderr else ""
        finally:
            follower.kill()
            reader.join(10)
        said = follower.stderr.read() if follower.stderr else ""
    assert [(s["rank"], s["line"]) for s in seen if s["line"].startswith("late")] in (
        [(0, "late line of 0"), (3, "late line of 3")],
        [(3, "late line of 3"), (0, "late line of 0")],
    ), seen
    assert f"following the output of job {job.name} until it ends" in said and "ended (Completed)" in said, said
    assert job.status() == "Completed"


def test_headless_logpoints_print_every_rank_tagged_without_pausing(home: Path, tmp_path: Path) -> None:
    del home
    project, marks = _project(tmp_path, LOOP)
    job = launch_job("logpoints", project, nodes=1, nproc_per_node=4)
    steps = {r: marks / f"steps-{r}" for r in range(4)}
    _wait(lambda: all(p.exists() for p in steps.values()), 120, lambda: (job.status(), job.logs()))

    events: list[dict[str, Any]] = []
    with subprocess.Popen(
        [
            *CLI,
            "attach",
            job.name,
            "--headless",
            "--no-ssh-include",
            "--json",
            "--workspace",
            str(project),
            "--log",
            f"train.py:{LOG_LINE}:step={{step}} loss={{loss}}",
            "--show-output",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as attach:
        reader = threading.Thread(target=lambda: events.extend(json.loads(line) for line in attach.stdout or []))
        reader.start()
        try:

            def hits(kind: str) -> dict[int, list[dict[str, Any]]]:
                out: dict[int, list[dict[str, Any]]] = {}
                for e in list(events):
                    if e["event"] == kind:
                        out.setdefault(e["rank"], []).append(e)
                return out

            _wait(lambda: len(hits("logpoint")) == 4 and len(hits("rank-output")) == 4, 120, lambda: events)
            # nobody paused: every rank's step counter keeps moving while its logpoint prints
            before = {r: int(p.read_text() or 0) for r, p in steps.items()}
            _wait(lambda: all(int(p.read_text() or 0) > before[r] + 10 for r, p in steps.items()), 30, lambda: before)
            for rank, logged in hits("logpoint").items():
                first = logged[0]
                assert first["file"] == str(project / "train.py") and first["line"] == LOG_LINE, first
                assert first["message"].startswith("step=") and " loss=" in first["message"], first
                assert first["text"] == f"[rank {rank}] {first['message']}"
                assert len(logged) > 1  # a hit per step: the logpoint stays
            for rank, printed in hits("rank-output").items():
                line = printed[0]["line"]
                assert line.startswith("tick ") and printed[0]["text"] == f"[rank {rank}] {line}", printed
            (marks / "done").touch()
            assert attach.wait(timeout=90) == 0, attach.stderr.read() if attach.stderr else ""
        finally:
            (marks / "done").touch()
            attach.kill()
            reader.join(10)
    assert job.wait_status(("Completed",), 60) == "Completed"
    assert not [e for e in events if e["event"] == "stopped"]
