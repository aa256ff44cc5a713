"""Hold on failure holds the whole gang, across nodes: 2 nodes x 2 torchrun ranks (each node in its own network
namespace), rank 3 raises.  Every rank is held - none dies of its 5 s process-group timeout - and rank 3 comes
first, as the root cause, in ``jobs``, ``stacks`` and ``attach``; when the debugger continues rank 3 the job fails
with rank 3's exception.  The same under mpirun (one node, three MPI ranks with a gloo group)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from remote_debug.contract import spec
from remote_debug.laptop.attach.attacher import AttachOptions
from remote_debug.laptop.connection.job_connection import JobConnection
from remote_debug.laptop.diagnose.stacks import collect_stacks, format_stacks
from remote_debug.laptop.ide.headless_session import HeadlessPlan
from remote_debug.laptop.machine.backend import free_port
from remote_debug.laptop.machine.job_dir import read_job_file
from remote_debug.laptop.wire import events as ev
from remote_debug.oskit import netns
from tests.helpers.jobs import LocalJob, launch_job

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
needs_netns = pytest.mark.skipif(not netns.available(), reason="network namespaces need root and iproute2")
needs_mpi = pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI (apt openmpi-bin) is needed")

# the script both gang-hold e2e tests run (this one and the VS Code one): see its header
SCRIPT = (Path(__file__).parents[1] / "fixtures" / "gang_crash.py.template").read_text()
HOLD = 120
PG_TIMEOUT = 5


def _project(root: Path, port: int = 0) -> tuple[Path, Path]:
    project, marks = root / "project", root / "marks"
    project.mkdir()
    marks.mkdir()
    (project / "train.py").write_text(SCRIPT.replace("@MARKS@", repr(str(marks))).replace("@PORT@", str(port)))
    return project, marks


def _steps(marks: Path, rank: int) -> int:
    try:
        return int((marks / f"step-{rank}").read_text() or 0)
    except (OSError, ValueError):
        return 0


def _ranks(job: LocalJob) -> dict[int, spec.RankEndpoint]:
    return {r.rank: r for m in job.backend.manifests(job.name).values() if m is not None for r in m.ranks}


def _wait(predicate: Any, timeout: float, what: Any) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, what()
        time.sleep(0.3)
    return value


def _fail_and_hold(job: LocalJob, marks: Path, world: int) -> dict[int, spec.RankEndpoint]:
    """Every rank training, then the last one fails: until every rank is held; then past the collective timeout."""
    _wait(lambda: all(_steps(marks, r) > 2 for r in range(world)), 180, lambda: (job.status(), job.logs()[-4000:]))
    (marks / "fail").write_text("")
    failed_at = time.monotonic()

    def all_held() -> dict[int, spec.RankEndpoint] | None:
        ranks = _ranks(job)
        held = len(ranks) == world and all(r.state == spec.RankState.HELD for r in ranks.values())
        return ranks if held else None

    _wait(all_held, 60, lambda: (_ranks(job), job.logs()[-4000:]))
    time.sleep(max(0.0, failed_at + 2 * PG_TIMEOUT - time.monotonic()))  # well past the collectives' timeout
    ranks: dict[int, spec.RankEndpoint] = _wait(all_held, 5, lambda: (_ranks(job), job.logs()[-4000:]))
    failing = world - 1
    assert str(ranks[failing].error).startswith("ValueError: bad batch")
    assert ranks[failing].held_for is None
    for r in range(failing):
        # held for rank 3's failure, not of an exception of their own (a collective that timed out)
        assert (ranks[r].held_for, ranks[r].held_for_error, ranks[r].error) == (failing, ranks[failing].error, None)
    assert "timed out" not in job.logs().lower(), job.logs()[-4000:]
    return ranks


@needs_netns
def test_two_nodes_all_ranks_held_root_cause_first_and_the_job_fails_with_its_exception(
    home: Path, tmp_path: Path, job_namespaces: list[str]
) -> None:
    project, marks = _project(tmp_path)
    job = launch_job("gang-hold", project, nodes=2, nproc_per_node=2, hold_on_failure=HOLD)
    job_namespaces.extend(read_job_file(job.paths.job_dir("gang-hold"))["netns"])
    ranks = _fail_and_hold(job, marks, 4)
    error = ranks[3].error
    assert {r: ranks[r].held_for for r in range(4)} == {0: 3, 1: 3, 2: 3, 3: None}
    assert "node algo-1: rank 0 held with rank 3, which failed" in job.logs()  # the other node knows too

    # jobs: rank 3 first, the root cause; the others held with it
    listed = subprocess.run(
        [sys.executable, "-m", "remote_debug", "jobs", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ),
    )
    assert listed.returncode == 0, listed.stderr
    [entry] = json.loads(listed.stdout)
    held = [(h["rank"], h["root_cause"], h["held_for"]) for h in entry["held_ranks"]]
    assert held == [(3, True, None), (0, False, 3), (1, False, 3), (2, False, 3)]
    notes = job.backend.describe(job.name).notes
    assert notes[0].startswith("rank 3 held for post-mortem") and notes[0].endswith("(root cause)"), notes
    assert notes[1:] == ["ranks 0-2 held with rank 3, which failed"], notes

    # stacks: rank 3 first, marked, at its exception; the others where they wait
    report = collect_stacks(JobConnection.open(job.name), timeout=60)
    assert [r["rank"] for r in report["ranks"]] == [3, 0, 1, 2]
    first = report["ranks"][0]
    assert first.get("root_cause") is True and [t["exception"] for t in first["threads"] if t["exception"]] == [error]
    assert all(r.get("held_for") == 3 for r in report["ranks"][1:])
    text = format_stacks(report)
    assert text.startswith("rank 3 (algo-2, pid ") and "(root cause)" in text.splitlines()[0], text[:300]
    assert "rank 0 (algo-1, pid " in text and "held with rank 3, which failed" in text

    # attach: rank 3's rank-failed first, the root cause; then the ranks held with it.  The headless debugger
    # stops rank 3 at its exception and continues: its hold ends, and the job fails with its exception.
    events: list[ev.Event] = []
    plan = HeadlessPlan(max_stops=1)
    result = job.attach(AttachOptions(workspace=project, headless=plan, ranks=(3,), ready_timeout=120), events.append)
    faults = [e for e in events if isinstance(e, (ev.RankFailed, ev.RankHeld))]
    assert isinstance(faults[0], ev.RankFailed) and (faults[0].rank, faults[0].root_cause) == (3, True), faults
    assert faults[0].held and faults[0].error == error
    assert sorted((e.rank, e.held_for) for e in faults[1:] if isinstance(e, ev.RankHeld)) == [(0, 3), (1, 3), (2, 3)]
    [report3] = result.reports
    assert report3.stops and report3.stops[0].function == "fail", report3
    assert result.job.status == "Failed"
    assert result.job.failure_reason is not None and result.job.failure_reason.endswith(f"{error} (rank 3)"), (
        result.job.failure_reason
    )
    assert "timed out" not in job.logs().lower(), job.logs()[-4000:]


@needs_mpi
def test_mpi_ranks_are_held_with_the_failed_one_until_its_hold_ends(home: Path, tmp_path: Path) -> None:
    project, marks = _project(tmp_path, port=free_port())
    mpirun = ["mpirun", "-n", "3", "--oversubscribe", "--mca", "btl", "self,vader"]
    if os.geteuid() == 0:
        mpirun.append("--allow-run-as-root")
    job = launch_job("gang-mpi", project, [*mpirun, "python", "train.py"], hold_on_failure=20)
    ranks = _fail_and_hold(job, marks, 3)
    assert {r: ranks[r].held_for for r in range(3)} == {0: 2, 1: 2, 2: None}
    info = job.backend.describe(job.name)
    assert [(h.rank, h.root_cause, h.held_for) for h in info.held_ranks] == [
        (2, True, None),
        (0, False, 2),
        (1, False, 2),
    ]
    # nobody attaches: the hold runs out, and the job fails with rank 2's exception
    assert job.wait_status(("Completed", "Failed", "Stopped"), timeout=90) == "Failed"
    reason = job.backend.describe(job.name).failure_reason
    assert reason is not None and reason.endswith(f"{ranks[2].error} (rank 2)"), (reason, job.logs()[-3000:])
