"""PyCharm mode end to end with real parts: local job (torchrun ranks) -> hook (sshd) -> each rank
connects OUT to its node port -> paramiko reverse forward over the ProxyCommand -> the pydevd
line-protocol server standing in for PyCharm's Python Debug Server."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from remote_debug.laptop.attach.attacher import AttachOptions
from remote_debug.laptop.ide.editor import Editor
from remote_debug.laptop.ide.headless_session import HeadlessPlan
from remote_debug.laptop.ide.pycharm import PyCharmOptions
from remote_debug.laptop.ide.pydevd_server import PydevdServer
from remote_debug.laptop.machine.backend import free_port
from remote_debug.laptop.wire import events as ev
from tests.helpers.ddp_job import break_line, make_project
from tests.helpers.event_log import EventLog, as_json
from tests.helpers.jobs import launch_job

# Looked up, not imported: pydevd-pycharm must never be loaded into a process that may load debugpy.
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("pydevd_pycharm") is None, reason="pydevd-pycharm is not installed"
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path)


@pytest.mark.parametrize(("nodes", "nproc"), [(1, 2), (2, 1)], ids=["1node-2ranks", "2nodes-1rank"])
def test_every_torchrun_rank_stops_in_the_pycharm_stand_in_through_reverse_tunnels(
    home: Path, project: Path, nodes: int, nproc: int
) -> None:
    job = launch_job("pyc", project, nodes=nodes, nproc_per_node=nproc, wait_seconds=120, ide="pycharm")
    events = EventLog()
    stamped: list[tuple[float, dict[str, Any]]] = []

    def emit(event: ev.Event) -> None:
        events.append(event)
        stamped.append((time.monotonic(), as_json(event)))

    script = project / "train.py"
    plan = HeadlessPlan(breakpoints={str(script): [break_line(script)]}, steps=1)
    options = AttachOptions(workspace=project, headless=plan, ide=Editor.PYCHARM, edit_user_ssh_config=False)
    result = job.attach(options, emit)

    assert result.job.status == "Completed", result.job.failure_reason
    assert result.job.exit_code == 0
    assert [r.rank for r in result.reports] == [0, 1]
    assert [r.node for r in result.reports] == (["algo-1", "algo-1"] if nodes == 1 else ["algo-1", "algo-2"])
    for report in result.reports:
        assert report.error is None, report.error
        first, after_step = report.stops[0], report.stops[1]
        # Frames come back in the IDE's paths: the rank mapped its code dir to the workspace.
        assert first.file == str(script) and first.line == break_line(script)
        assert first.reason == "breakpoint"
        assert first.variables["rank"] == str(report.rank)
        assert first.variables["tensor"] == "Tensor[1] float32 cpu = [3.]"  # all_reduce done; the tensor view is on
        assert after_step.line == first.line + 1
        assert after_step.variables["secret"] == str(1000 + 7 * report.rank)  # rank-dependent
    # One IDE port for all ranks: every rank's node port is reverse-forwarded to it.
    assert len({f.local_port for f in result.forwards}) == 1
    assert all(f.remote_port and f.remote_port != f.local_port for f in result.forwards)
    assert sorted(e["rank"] for e in events if e["event"] == "rank-connected") == [0, 1]
    # PyCharm ranks have a control channel too: attach made every rank's collectives pause-safe
    assert sorted(e["rank"] for e in events if e["event"] == "pause-safe") == [0, 1], events
    assert not (project / ".vscode").exists()  # no launch.json in PyCharm mode
    logs = "".join(p.read_text() for p in (job.paths.job_dir("pyc") / "logs").glob("algo-*.log"))
    assert logs.count("PyCharm debugger attached") == 2

    # Measured figures for the report: connect -> first stop, and one step.
    for rank in (0, 1):
        connected = next(t for t, e in stamped if e["event"] == "rank-connected" and e["rank"] == rank)
        stops = [t for t, e in stamped if e["event"] == "stopped" and e["rank"] == rank]
        print(f"rank {rank}: connect->hit {stops[0] - connected:.3f} s, step {stops[1] - stops[0]:.3f} s")


def test_tunnel_up_but_no_ide_listening_job_completes_and_says_why(home: Path, project: Path) -> None:
    wait = 6.0
    job = launch_job("noide", project, nproc_per_node=2, wait_seconds=wait, ide="pycharm")
    nobody = free_port()  # nothing listens here: PyCharm's debug server was never started
    events = EventLog()
    options = AttachOptions(
        workspace=project,
        ide=Editor.PYCHARM,
        edit_user_ssh_config=False,
        pycharm=PyCharmOptions(port=nobody, build="any"),
    )
    started = time.monotonic()
    result = job.attach(options, events.append)
    elapsed = time.monotonic() - started

    assert result.job.status == "Completed", result.job.failure_reason
    assert result.job.exit_code == 0
    assert elapsed < 120
    # The tunnels were up (both ranks forwarded) and the ranks were told nobody listens.
    assert sorted(e["rank"] for e in events if e["event"] == "rank-ready") == [0, 1]
    assert sorted(e["rank"] for e in events if e["event"] == "ide-not-listening") == [0, 1]
    log = (job.paths.job_dir("noide") / "logs" / "algo-1.log").read_text()
    for rank in (0, 1):
        # each rank's lines carry its tag (multi-rank jobs tag their output by default)
        said = f"[rank {rank}] [remote-debug] rank {rank}: no PyCharm debugger"
        line = next(x for x in log.splitlines() if x.startswith(said))
        assert f"within {wait:g} s" in line and f"127.0.0.1:{nobody}" in line and "runs on" in line
    # Both ranks trained to the end, and their documents keep the reason for the attach side.
    ranks = job.backend.manifests("noide")["algo-1"].ranks  # type: ignore[union-attr]
    assert [(r.state, "nothing listens" in (r.error or "")) for r in ranks] == [("finished", True)] * 2
    # The run configuration PyCharm would start, on the port the tunnels lead to.
    config = project / ".idea" / "runConfigurations" / "noide.xml"
    assert f'<option name="PORT" value="{nobody}" />' in config.read_text()


def test_ranks_wait_for_pycharm_started_after_the_tunnels(home: Path, project: Path) -> None:
    """The usual order: attach first (tunnels up, nobody listening), then start the debug server.

    Non-headless attach, as with a real PyCharm: the stand-in server is a separate listener on the
    port of the run configuration, started a few seconds later; waiting ranks then connect to it.
    """
    job = launch_job("late", project, nproc_per_node=2, wait_seconds=120, ide="pycharm")
    script = project / "train.py"
    ide_port = free_port()
    server = PydevdServer(HeadlessPlan(breakpoints={str(script): [break_line(script)]}), port=ide_port)
    events = EventLog()
    started: list[float] = []

    def emit(event: ev.Event) -> None:
        events.append(event)
        if isinstance(event, ev.IdeNotListening) and not started:
            started.append(time.monotonic())
            server.start()  # the user pressed Debug on the run configuration

    options = AttachOptions(
        workspace=project,
        ide=Editor.PYCHARM,
        edit_user_ssh_config=False,
        pycharm=PyCharmOptions(port=ide_port, build="any"),
    )
    try:
        result = job.attach(options, emit)
        server.join(10)
    finally:
        server.close()
    assert result.job.status == "Completed", result.job.failure_reason
    assert started, "no rank reported the missing debug server"  # the tunnels were up before it started
    reports = server.reports
    assert len(reports) == 2 and all(r.error is None for r in reports), [r.error for r in reports]
    assert sorted(r.stops[0].variables["rank"] for r in reports) == ["0", "1"]
    assert all(r.stops[0].file == str(script) for r in reports)


def test_demo_cli_pycharm_headless(home: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "remote_debug", "demo", "--ide", "pycharm", "--headless", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "HOME": str(home)},
    )
    try:
        out, err = proc.communicate(timeout=240)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, err[-3000:]
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["exit_code"] == 0 and summary["status"] == "Completed"
    assert [r["rank"] for r in summary["ranks"]] == [0, 1]
    for r in summary["ranks"]:
        assert r["file"].endswith("train_ddp.py") and r["variables"]["rank"] == str(r["rank"])
        assert r["stops"][1]["variables"]["shard_marker"] == str(r["rank"] * 100)  # after one step
