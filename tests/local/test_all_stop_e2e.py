"""All-stop and the group actions on a real torchrun job (4 ranks, gloo on CPU), through SSH and the forwards.

A breakpoint in rank 0's branch only: with all-stop every other rank is paused too (pydevd really suspends
it: its session gets a ``stopped`` event, and the group's status says so), and rank 0's Continue continues them
all.  Non-stop (today's per-rank sessions) is the control: the same breakpoint leaves the others running.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from remote_debug.laptop.attach import group_socket
from remote_debug.laptop.attach.attacher import AttachOptions
from remote_debug.laptop.ide.headless_session import HeadlessPlan
from remote_debug.laptop.machine.job_dir import read_job_file
from remote_debug.laptop.wire import events as ev
from remote_debug.laptop.wire.documents import GroupReply, RankPhase
from remote_debug.oskit import netns
from tests.helpers.ddp_job import break_line, marked_project
from tests.helpers.event_log import EventLog
from tests.helpers.jobs import LocalJob, launch_job

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")

# Every rank runs Python (no collective) until the test drops "done": a pause lands at once.  Only rank 0
# executes the breakpoint line, once, 30 steps after the test dropped "go" (every rank's session attached:
# mpirun's ranks start unsynchronised, and a rank attached after the stop is not among those it paused).
# Each rank counts its steps in a file, so the test sees who ran.
PYTHON_LOOP = textwrap.dedent(
    """
    import pathlib, time
    import torch.distributed as dist

    marks = pathlib.Path({marks!r})
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    step, go = 0, None
    while not (marks / "done").exists():
        step += 1
        (marks / f"steps-{{rank}}").write_text(str(step))
        if go is None and (marks / "go").exists():
            go = step + 30
        if rank == 0 and step == go:
            hit = step  # BREAK-HERE
        time.sleep(0.02)
    dist.barrier()
    dist.destroy_process_group()
    """
)
# The same under mpirun, with MPI's own world (mpi4py): no torch in the ranks.
MPI_LOOP = (
    PYTHON_LOOP.replace("import torch.distributed as dist\n", "from mpi4py import MPI\n")
    .replace('dist.init_process_group("gloo")\n', "")
    .replace("rank = dist.get_rank()", "rank = MPI.COMM_WORLD.Get_rank()")
    .replace("dist.barrier()\ndist.destroy_process_group()", "MPI.COMM_WORLD.Barrier()")
)
MPIRUN = ["mpirun", "-n", "4", "--oversubscribe", "--mca", "btl", "self,vader"] + (
    ["--allow-run-as-root"] if os.geteuid() == 0 else []
)
needs_mpi = pytest.mark.skipif(
    shutil.which("mpirun") is None or importlib.util.find_spec("mpi4py") is None,
    reason="Open MPI (apt openmpi-bin) and mpi4py are needed (./dev setup installs both)",
)
needs_netns = pytest.mark.skipif(not netns.available(), reason="network namespaces need root and iproute2")

# The ranks all_reduce every step (whether to stop, so that all agree when): while rank 0 is stopped the others
# wait for it inside the collective, in native code, where no debugger can pause them.
COLLECTIVE_LOOP = textwrap.dedent(
    """
    import pathlib
    import torch
    import torch.distributed as dist

    marks = pathlib.Path({marks!r})
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    step, go = 0, None
    while True:
        flag = torch.tensor([1.0 if (marks / "done").exists() else 0.0])
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if flag.item():
            break
        step += 1
        (marks / f"steps-{{rank}}").write_text(str(step))
        if go is None and (marks / "go").exists():
            go = step + 30
        if rank == 0 and step == go:
            hit = step  # BREAK-HERE
    dist.barrier()
    dist.destroy_process_group()
    """
)


def _steps(marks: Path, rank: int) -> int:
    try:
        return int((marks / f"steps-{rank}").read_text() or 0)
    except (FileNotFoundError, ValueError):
        return 0


class _Watcher:
    """While rank 0 is held at its breakpoint: the group's status (as ``remote-debug ranks status`` reads it)
    once every rank is stopped, or the last one read; and whether the others' step counts moved."""

    def __init__(self, job: LocalJob, marks: Path, world: int) -> None:
        self.job, self.marks, self.world = job, marks, world
        self.status: GroupReply | None = None
        self.moved: dict[int, int] = {}
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            self.status = group_socket.ask(self.job.paths, self.job.name, "status")
            stopped = [s for s in self.status.status if s.phase == RankPhase.STOPPED]
            if len(stopped) == self.world:
                break
            time.sleep(0.05)
        before = {r: _steps(self.marks, r) for r in range(1, self.world)}
        time.sleep(0.5)
        self.moved = {r: _steps(self.marks, r) - before[r] for r in before}


def _attach(
    tmp_path: Path,
    script: str,
    *,
    all_stop: bool,
    launch: dict[str, Any] | None = None,
    namespaces: list[str] | None = None,
) -> tuple[EventLog, _Watcher, Any]:
    project, marks = marked_project(tmp_path, script)
    job = launch_job("gang", project, **(launch or {"nproc_per_node": 4}))
    if namespaces is not None:
        namespaces.extend(read_job_file(job.paths.job_dir("gang")).get("netns", []))
    log = EventLog()
    watcher = _Watcher(job, marks, 4)

    def emit(event: ev.Event) -> None:
        log.append(event)
        if isinstance(event, ev.RankAttached) and len([e for e in log if e["event"] == "rank-attached"]) == 4:
            (marks / "go").write_text("")
        if isinstance(event, ev.Stopped) and event.rank == 0:
            watcher.thread.start()
        if isinstance(event, ev.RankDetached) and event.rank == 0:
            (marks / "done").write_text("")  # rank 0 had its stop: let the job end

    train = project / "train.py"
    plan = HeadlessPlan(breakpoints={str(train): [break_line(train)]}, pause_seconds=4.0)
    options = AttachOptions(workspace=project, headless=plan, write_launch_json=False, all_stop=all_stop)
    result = job.attach(options, emit)
    assert result.job.status == "Completed", (result.job.failure_reason, log, job.logs()[-4000:])
    return log, watcher, result


@pytest.mark.parametrize(
    "launcher",
    [
        "torchrun",
        pytest.param("torchrun-2-nodes", marks=needs_netns),
        pytest.param("mpirun", marks=needs_mpi),
    ],
)
def test_a_breakpoint_in_one_rank_pauses_every_rank_and_continue_resumes_all(
    home: Path, tmp_path: Path, launcher: str, job_namespaces: list[str]
) -> None:
    launch: dict[str, Any] = {"nproc_per_node": 4}
    script = PYTHON_LOOP
    if launcher == "torchrun-2-nodes":  # each node in its own network namespace: reached only through its sshd
        launch = {"nodes": 2, "nproc_per_node": 2}
    elif launcher == "mpirun":
        launch = {"command": [*MPIRUN, "python", "train.py"]}
        script = MPI_LOOP
    log, watcher, _ = _attach(tmp_path, script, all_stop=True, launch=launch, namespaces=job_namespaces)
    watcher.thread.join(10)
    if launcher == "torchrun-2-nodes":
        assert sorted({e["node"] for e in log if e["event"] == "rank-ready"}) == ["algo-1", "algo-2"]

    [stop] = [e for e in log if e["event"] == "all-stop"]
    assert (stop["rank"], stop["reason"], stop["pausing"]) == (0, "breakpoint", [1, 2, 3])
    [paused] = [e for e in log if e["event"] == "all-paused"]
    assert paused["rank"] == 0 and paused["ranks"] == [0, 1, 2, 3]
    assert paused["seconds"] < 3.0, paused  # the goal on 2 cores
    assert watcher.status is not None
    phases = {s.rank: (s.phase, s.by_group) for s in watcher.status.status}
    # rank 0 stopped at its breakpoint; the others were paused by all-stop, and really do not run
    assert phases == {0: (RankPhase.STOPPED, False), **{r: (RankPhase.STOPPED, True) for r in (1, 2, 3)}}
    assert watcher.moved == {1: 0, 2: 0, 3: 0}, watcher.moved
    # rank 0's one Continue continued the three others
    continued = [e for e in log if e["event"] == "group-action" and e["action"] == "continue"]
    assert continued and continued[0]["ranks"] == [1, 2, 3] and continued[0]["origin"] == "rank 0"
    # the headless sessions of ranks 1-3 took no group pause for a stop of their own
    assert [e["rank"] for e in log if e["event"] == "stopped"] == [0]


def test_non_stop_leaves_the_other_ranks_running(home: Path, tmp_path: Path) -> None:
    log, watcher, _ = _attach(tmp_path, PYTHON_LOOP, all_stop=False)
    watcher.thread.join(10)
    assert not [e for e in log if e["event"] in ("all-stop", "all-paused")]
    assert watcher.status is not None
    assert {s.rank: s.phase for s in watcher.status.status} == {
        0: RankPhase.STOPPED,
        1: "running",
        2: "running",
        3: "running",
    }
    assert all(moved > 0 for moved in watcher.moved.values()), watcher.moved


def test_ranks_waiting_in_a_collective_are_reported_not_hung(home: Path, tmp_path: Path) -> None:
    """The others wait for rank 0 inside all_reduce: they cannot pause until it returns, and are said to wait."""
    log, watcher, _ = _attach(tmp_path, COLLECTIVE_LOOP, all_stop=True)
    watcher.thread.join(10)
    waiting = sorted(e["rank"] for e in log if e["event"] == "rank-waiting")
    assert waiting == [1, 2, 3], log
    assert all(e["action"] == "pause" for e in log if e["event"] == "rank-waiting")
    assert not [e for e in log if e["event"] == "all-paused"]  # they never all stopped: not claimed


def test_the_ranks_command_pauses_steps_and_continues_every_rank(home: Path, tmp_path: Path) -> None:
    """``remote-debug ranks pause|step|continue JOB`` from another process, during a non-stop attach."""
    project, marks = marked_project(tmp_path, PYTHON_LOOP.replace("rank == 0 and step == go", "False"))
    job = launch_job("group", project, nproc_per_node=2)
    log = EventLog()
    replies: dict[str, Any] = {}
    ready = threading.Event()

    def emit(event: ev.Event) -> None:
        log.append(event)
        if isinstance(event, ev.RankAttached):
            attached = [e for e in log if e["event"] == "rank-attached"]
            if len(attached) == 2:
                ready.set()

    def cli(*args: str) -> dict[str, Any]:
        out = subprocess.run(
            [sys.executable, "-m", "remote_debug", "ranks", *args, job.name, "--json"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        import json

        return dict(json.loads(out.stdout))

    def until(ask: Any, name: str, done: Any, seconds: float = 60.0) -> None:
        """``replies[name]``: the last answer of ``ask``, asked until its ranks are ``done`` or time is up."""
        deadline = time.monotonic() + seconds
        while True:
            replies[name] = ask()
            if done(replies[name]["status"]) or time.monotonic() > deadline:
                return
            time.sleep(0.1)

    def drive() -> None:
        try:
            assert ready.wait(60)
            time.sleep(0.5)  # configurationDone follows rank-attached
            replies["pause"] = cli("pause")
            # each `ranks status` is a Python start-up: on a loaded machine a few seconds; the waits are long
            until(lambda: cli("status"), "paused", lambda ranks: all(s["phase"] == "stopped" for s in ranks))
            before = {r: _steps(marks, r) for r in (0, 1)}
            replies["step"] = cli("step")
            until(lambda: cli("status"), "stepped", lambda ranks: all(s["reason"] == "step" for s in ranks))
            replies["moved"] = {r: _steps(marks, r) - before[r] for r in (0, 1)}
            replies["continue"] = cli("continue")
            until(lambda: cli("status"), "running", lambda ranks: all(s["phase"] == "running" for s in ranks))
        finally:
            (marks / "done").write_text("")

    driver = threading.Thread(target=drive, daemon=True)
    driver.start()
    options = AttachOptions(workspace=project, headless=HeadlessPlan(), write_launch_json=False, all_stop=False)
    result = job.attach(options, emit)
    driver.join(30)
    assert result.job.status == "Completed", (result.job.failure_reason, log, replies)

    assert replies["pause"]["ranks"] == [0, 1] and replies["pause"]["attaches"] == 1
    assert [(s["phase"], s["by_group"]) for s in replies["paused"]["status"]] == [("stopped", True)] * 2
    assert replies["step"]["ranks"] == [0, 1]
    # a step over in the loop's body: each rank stopped again on a later line, without running a whole step
    assert [(s["phase"], s["reason"]) for s in replies["stepped"]["status"]] == [("stopped", "step")] * 2
    assert replies["moved"] == {0: 0, 1: 0} or all(m <= 1 for m in replies["moved"].values()), replies["moved"]
    assert replies["continue"]["ranks"] == [0, 1]
    assert [s["phase"] for s in replies["running"]["status"]] == ["running"] * 2
