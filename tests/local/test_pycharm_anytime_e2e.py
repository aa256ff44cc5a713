"""PyCharm any time (issue 16), end to end on real torchrun ranks on 2 nodes (network namespaces).

A job launched with ``--wait 0`` trains untraced; 30 s in, ``remote-debug attach --ide pycharm`` (the CLI,
as a user runs it) connects every rank to the debug server; the server goes away (PyCharm's Stop, or a
restart) and comes back; the attach is stopped with Ctrl-C and started again; a crashed rank held for a
post-mortem connects and stops at its exception.  The debug server is the stand-in for PyCharm's
"Python Debug Server" (``laptop/ide/pydevd_server.py``: pydevd's line protocol, the IDE side).

Each rank writes what it is doing after every step (its step count, and whether its main thread has a
tracer): that is how the tests see that training ran on while nobody was attached, and that the tracer
really went when PyCharm did.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from remote_debug.laptop.ide.headless_session import HeadlessPlan
from remote_debug.laptop.ide.pydevd_server import PydevdServer
from remote_debug.laptop.machine.backend import free_port
from remote_debug.laptop.wire import events as ev
from tests.helpers.ddp_job import marked_project
from tests.helpers.jobs import LocalJob, launch_job
from tests.helpers.waiting import wait_for

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("pydevd_pycharm") is None, reason="pydevd-pycharm is not installed"),
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed"),
    pytest.mark.skipif(os.geteuid() != 0, reason="2-node local jobs need network namespaces (root)"),
]

# Ranks train until the test writes marks/stop; every step is a collective, so a rank paused in the
# debugger holds its peer in all_reduce (pause-safe), and resumes it.
SCRIPT = textwrap.dedent(
    """
    import json, os, pathlib, sys, time
    import torch
    import torch.distributed as dist

    marks = pathlib.Path({marks!r})


    def train_step(step, rank):
        total = torch.tensor([float(step)])
        dist.all_reduce(total)  # BREAK-HERE
        return total


    def fail(rank, step):
        scale = step * 10
        raise ValueError(f"bad batch {{scale}}")  # RAISE-HERE


    def main():
        dist.init_process_group("gloo")
        rank = dist.get_rank()
        status = marks / f"rank{{rank}}.json"
        step = 0
        deadline = time.monotonic() + 300
        while not (marks / "stop").exists() and time.monotonic() < deadline:
            train_step(step, rank)
            step += 1
            if rank == 1 and (marks / "fail").exists():
                fail(rank, step)
            tmp = status.with_suffix(".tmp")
            tmp.write_text(json.dumps({{"step": step, "traced": sys.gettrace() is not None}}))
            tmp.replace(status)
            time.sleep(0.05)
        dist.destroy_process_group()


    main()
    """
)


def _line(script: Path, mark: str) -> int:
    return next(i for i, line in enumerate(script.read_text().splitlines(), 1) if mark in line)


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, Path]:
    return marked_project(tmp_path, SCRIPT)


class Server:
    """The stand-in debug server on a fixed port, as PyCharm's Debug Server: started, stopped, restarted."""

    def __init__(self, port: int, script: Path) -> None:
        self.port = port
        self.breakpoint = (str(script), _line(script, "BREAK-HERE"))
        self.stops: list[ev.Stopped] = []
        self.detached: list[int] = []
        self._lock = threading.Lock()
        self.server: PydevdServer | None = None

    def _emit(self, event: ev.Event) -> None:
        with self._lock:
            if isinstance(event, ev.Stopped):
                self.stops.append(event)
            elif isinstance(event, ev.RankDetached):
                self.detached.append(event.rank)

    def start(self, *, with_breakpoint: bool = True) -> None:
        """``with_breakpoint``: set before the ranks connect; else set later with :meth:`add_breakpoint`."""
        path, line = self.breakpoint
        plan = HeadlessPlan(breakpoints={path: [line]} if with_breakpoint else {}, max_stops=1)
        self.server = PydevdServer(plan, emit=self._emit, port=self.port)
        self.server.start()

    def add_breakpoint(self) -> None:
        assert self.server is not None
        self.server.add_breakpoint(*self.breakpoint)

    def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None

    def stops_by_step(self, count: int, timeout: float = 60) -> list[ev.Stopped]:
        wait_for(lambda: len(self.stops) >= count, timeout, lambda: f"{len(self.stops)} stops: {self.stops}")
        with self._lock:
            return list(self.stops)


def status(marks: Path, rank: int) -> dict[str, Any]:
    try:
        loaded: dict[str, Any] = json.loads((marks / f"rank{rank}.json").read_text())
        return loaded
    except (OSError, ValueError):
        return {}


def rank_states(job: LocalJob) -> dict[int, str]:
    manifests = job.backend.manifests(job.name)
    return {r.rank: str(r.state) for m in manifests.values() if m is not None for r in m.ranks}


@contextlib.contextmanager
def cli_attach(job: LocalJob, project: Path, ide_port: int) -> Iterator[subprocess.Popen[str]]:
    """``remote-debug attach JOB --ide pycharm`` as the user runs it (JSON events on stdout)."""
    cmd = [
        sys.executable,
        "-m",
        "remote_debug",
        "attach",
        job.name,
        "--ide",
        "pycharm",
        "--workspace",
        str(project),
        "--pycharm-port",
        str(ide_port),
        "--pycharm-build",
        "any",
        "--no-ssh-include",
        "--json",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)


def test_attach_30s_into_a_wait0_job_survives_a_server_restart_and_a_reattach(
    home: Path, project: tuple[Path, Path]
) -> None:
    src, marks = project
    script = src / "train.py"
    job = launch_job("anytime", src, nodes=2, nproc_per_node=1, wait_seconds=0, ide="pycharm")
    launched = time.monotonic()
    try:
        # --wait 0: the ranks train at once, idle (no tracer), reachable through their control channel
        wait_for(lambda: all(status(marks, r).get("step", 0) > 5 for r in (0, 1)), 120, job.logs)
        assert rank_states(job) == {0: "idle", 1: "idle"}
        assert not any(status(marks, r)["traced"] for r in (0, 1))
        # `stacks` reaches PyCharm ranks on both nodes through their control channels, with no tracer
        stacks = subprocess.run(
            [sys.executable, "-m", "remote_debug", "stacks", job.name, "--json"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert stacks.returncode == 0, stacks.stderr
        report = json.loads(stacks.stdout)
        assert [(r["rank"], r["node"]) for r in report["ranks"]] == [(0, "algo-1"), (1, "algo-2")]
        for r in report["ranks"]:
            main = next(t for t in r["threads"] if t["name"] == "MainThread")
            assert ("train.py", "main") in [(Path(f["file"]).name, f["function"]) for f in main["frames"]]
        time.sleep(max(0.0, 30 - (time.monotonic() - launched)))  # 30 s into the job

        ide_port = free_port()
        server = Server(ide_port, script)
        server.start()
        try:
            with cli_attach(job, src, ide_port) as first:
                # 1. attach any time: each rank connects from a background thread, stops at the breakpoint
                stops = server.stops_by_step(2)
                assert sorted(s.variables["rank"] for s in stops) == ["0", "1"]
                first_steps = {int(s.variables["rank"]): int(s.variables["step"]) for s in stops}
                assert all(step > 5 for step in first_steps.values()), first_steps
                wait_for(lambda: all(status(marks, r)["traced"] for r in (0, 1)), 30, lambda: rank_states(job))
                assert rank_states(job) == {0: "attached", 1: "attached"}

                # 2. the debug server goes away (Stop in PyCharm): the tracer goes, training runs on
                server.stop()
                wait_for(lambda: not any(status(marks, r)["traced"] for r in (0, 1)), 30, lambda: rank_states(job))
                wait_for(lambda: rank_states(job) == {0: "idle", 1: "idle"}, 30, lambda: rank_states(job))
                before = status(marks, 0)["step"]
                wait_for(lambda: status(marks, 0)["step"] > before + 5, 30, lambda: status(marks, 0))

                # ...and comes back (Debug again): the attach sees the port listening and asks the ranks;
                # this time the breakpoint is set after they connected (a click in the gutter)
                server.start(with_breakpoint=False)
                wait_for(lambda: rank_states(job) == {0: "attached", 1: "attached"}, 30, lambda: rank_states(job))
                wait_for(lambda: all(status(marks, r)["traced"] for r in (0, 1)), 30, lambda: rank_states(job))
                time.sleep(1.0)
                assert len(server.stops) == 2  # no breakpoint yet: nothing stopped
                server.add_breakpoint()
                stops = server.stops_by_step(4)[2:]
                assert sorted(s.variables["rank"] for s in stops) == ["0", "1"]
                assert all(int(s.variables["step"]) > first_steps[int(s.variables["rank"])] for s in stops)

                # 3. detach: Ctrl-C on the attach closes the tunnels; the ranks lose PyCharm and untrace
                wait_for(lambda: all(status(marks, r)["traced"] for r in (0, 1)), 30, lambda: rank_states(job))
                os.killpg(first.pid, signal.SIGINT)
                assert first.wait(30) == 130
                wait_for(lambda: not any(status(marks, r)["traced"] for r in (0, 1)), 30, lambda: rank_states(job))
                wait_for(lambda: rank_states(job) == {0: "idle", 1: "idle"}, 30, lambda: rank_states(job))

            # ...and a new attach connects them again, to the server that kept running
            with cli_attach(job, src, ide_port) as second:
                stops = server.stops_by_step(6)[4:]
                assert sorted(s.variables["rank"] for s in stops) == ["0", "1"]
                (marks / "stop").write_text("")
                out, err = second.communicate(timeout=120)
                assert second.returncode == 0, err[-2000:]
            events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
            assert events[-1]["event"] == "job-ended" and events[-1]["status"] == "Completed", events[-3:]
        finally:
            server.stop()
    finally:
        (marks / "stop").write_text("")
    assert job.wait_status(("Completed",), 60) == "Completed", job.logs()
    log = job.logs()
    for rank in (0, 1):
        assert f"rank {rank}: PyCharm debugger attached" in log
        assert f"rank {rank}: PyCharm debugger gone; tracing removed" in log
        assert "(session 3)" in log


def test_a_crashed_pycharm_rank_is_held_and_pycharm_stops_at_the_exception(
    home: Path, project: tuple[Path, Path]
) -> None:
    src, marks = project
    script = src / "train.py"
    job = launch_job("pm", src, nodes=2, nproc_per_node=1, wait_seconds=0, ide="pycharm", hold_on_failure=60)
    try:
        wait_for(lambda: all(status(marks, r).get("step", 0) > 2 for r in (0, 1)), 120, job.logs)
        (marks / "fail").write_text("")
        wait_for(lambda: rank_states(job).get(1) == "held", 60, lambda: (rank_states(job), job.logs()))

        # a headless attach only after the crash: the held rank connects out and stops at its exception
        stops: list[ev.Stopped] = []

        def record(event: ev.Event) -> None:
            if isinstance(event, ev.Stopped):
                stops.append(event)

        server = PydevdServer(HeadlessPlan(max_stops=1), emit=record)
        server.start()
        try:
            with cli_attach(job, src, server.port) as attach:
                wait_for(lambda: any(s.function == "fail" for s in stops), 60, lambda: (rank_states(job), job.logs()))
                (marks / "stop").write_text("")
                attach.communicate(timeout=120)
        finally:
            server.close()
    finally:
        (marks / "stop").write_text("")
    # (rank 0 may crash too once rank 1 is gone, and be held as well: its stop is not the one asked about)
    [stop] = [s for s in stops if s.function == "fail"]
    assert stop.reason == "exception"
    assert stop.function == "fail" and stop.line == _line(script, "RAISE-HERE")
    assert stop.variables["rank"] == "1" and int(stop.variables["scale"]) % 10 == 0
    assert job.wait_status(("Failed",), 60) == "Failed"
    assert "ValueError: bad batch" in (job.backend.describe(job.name).failure_reason or "")
