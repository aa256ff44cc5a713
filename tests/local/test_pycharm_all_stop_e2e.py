"""All-stop with PyCharm's ranks, end to end: a local torchrun job whose ranks run pydevd-pycharm and connect out
through the reverse forwards (each one a :class:`PydevdTap` in the attach) to ``PydevdServer``, the stand-in for
PyCharm's Python Debug Server.

A breakpoint only rank 0 reaches: with all-stop rank 1 is suspended too (the stand-in receives its suspension,
marked as the group's, and its step counter stops moving), and the one CMD_THREAD_RUN the stand-in sends rank 0
resumes both; the job completes.  Non-stop is the control: rank 1 runs on.
"""

from __future__ import annotations

import importlib.util
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from remote_debug.laptop.attach import group_socket
from remote_debug.laptop.attach.attacher import Attacher, AttachOptions
from remote_debug.laptop.ide.editor import Editor
from remote_debug.laptop.ide.headless_session import HeadlessPlan
from remote_debug.laptop.ide.pycharm import PyCharmIde
from remote_debug.laptop.wire import events as ev
from remote_debug.laptop.wire.documents import RankPhase
from tests.helpers.ddp_job import break_line, marked_project
from tests.helpers.event_log import EventLog
from tests.helpers.jobs import launch_job
from tests.local.test_all_stop_e2e import PYTHON_LOOP, _steps

# Looked up, not imported: pydevd-pycharm must never be loaded into a process that may load debugpy.
pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("pydevd_pycharm") is None, reason="pydevd-pycharm is not installed"),
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed"),
]

# test_all_stop_e2e's loop, at the top level of the script, where pydevd-pycharm's own tracer piles up a wrapper
# per traced line until RecursionError (pycharm_top_level keeps it flat): rank 1 runs thousands of traced lines
# while rank 0 is held
HOLD_SECONDS = 4.0  # how long the stand-in stays at rank 0's breakpoint before its one CMD_THREAD_RUN


def _attach_and_watch(tmp_path: Path, *, all_stop: bool) -> tuple[EventLog, dict[str, Any]]:
    project, marks = marked_project(tmp_path, PYTHON_LOOP)
    job = launch_job("pyc-gang", project, nproc_per_node=2, ide="pycharm")
    log = EventLog()
    seen: dict[str, Any] = {}
    attacher: Attacher | None = None

    def status() -> dict[int, tuple[str, bool]]:
        reply = group_socket.ask(job.paths, job.name, "status")
        return {s.rank: (s.phase, s.by_group) for s in reply.status}

    def watch() -> None:
        """While the stand-in holds rank 0 at its breakpoint, then after its one resume."""
        try:
            assert attacher is not None and isinstance(attacher.ide, PyCharmIde) and attacher.ide.server
            server = attacher.ide.server
            deadline = time.monotonic() + 3.0
            while time.monotonic() < deadline:
                seen["held"] = status()
                if all(phase == RankPhase.STOPPED for phase, _ in seen["held"].values()):
                    break
                time.sleep(0.05)
            before = _steps(marks, 1)
            time.sleep(0.5)
            seen["moved_while_held"] = _steps(marks, 1) - before
            seen["group_stops"] = list(server.group_stops)
            deadline = time.monotonic() + HOLD_SECONDS + 10
            while time.monotonic() < deadline:
                seen["after"] = status()
                if all(phase == RankPhase.RUNNING for phase, _ in seen["after"].values()):
                    break
                time.sleep(0.1)
            before = _steps(marks, 1)
            time.sleep(0.5)
            seen["moved_after"] = _steps(marks, 1) - before
        finally:
            (marks / "done").write_text("")  # let the job end

    watcher = threading.Thread(target=watch, daemon=True)

    def emit(event: ev.Event) -> None:
        log.append(event)
        if isinstance(event, ev.RankAttached) and len([e for e in log if e["event"] == "rank-attached"]) == 2:
            (marks / "go").write_text("")  # both ranks' sessions are up: rank 0 reaches its breakpoint soon
        if isinstance(event, ev.Stopped) and event.rank == 0 and not watcher.is_alive():
            watcher.start()

    train = project / "train.py"
    plan = HeadlessPlan(breakpoints={str(train): [break_line(train)]}, pause_seconds=HOLD_SECONDS)
    options = AttachOptions(
        workspace=project, headless=plan, ide=Editor.PYCHARM, edit_user_ssh_config=False, all_stop=all_stop
    )
    attacher = Attacher(job.backend, job.name, options, emit, job.paths)
    result = attacher.run()
    watcher.join(20)
    seen["job"] = (result.job.status, result.job.failure_reason, job.logs()[-4000:])
    return log, seen


def test_a_breakpoint_in_rank_0_suspends_rank_1_and_one_resume_runs_both(home: Path, tmp_path: Path) -> None:
    log, seen = _attach_and_watch(tmp_path, all_stop=True)
    assert seen["job"][0] == "Completed", (seen["job"], log)
    [stop] = [e for e in log if e["event"] == "all-stop"]
    assert (stop["rank"], stop["reason"], stop["pausing"]) == (0, "breakpoint", [1])
    [paused] = [e for e in log if e["event"] == "all-paused"]
    assert paused["ranks"] == [0, 1] and paused["seconds"] < 3.0, paused
    # rank 0 at its own breakpoint, rank 1 suspended by the group: PyCharm got its suspension, marked
    assert seen["held"] == {0: (RankPhase.STOPPED, False), 1: (RankPhase.STOPPED, True)}
    assert seen["group_stops"] and {rank for rank, _ in seen["group_stops"]} == {1}
    assert all(why == "All-stop: rank 0" for _, why in seen["group_stops"]), seen["group_stops"]
    assert seen["moved_while_held"] == 0
    # the stand-in's one CMD_THREAD_RUN in rank 0 resumed rank 1 as well
    [continued] = [e for e in log if e["event"] == "group-action" and e["action"] == "continue"]
    assert continued["ranks"] == [1] and continued["origin"] == "rank 0"
    assert seen["after"] == {0: (RankPhase.RUNNING, False), 1: (RankPhase.RUNNING, False)}
    assert seen["moved_after"] > 0
    assert [e["rank"] for e in log if e["event"] == "stopped"] == [0]  # rank 1 had no stop of its own


def test_non_stop_leaves_rank_1_running(home: Path, tmp_path: Path) -> None:
    log, seen = _attach_and_watch(tmp_path, all_stop=False)
    assert seen["job"][0] == "Completed", (seen["job"], log)
    assert not [e for e in log if e["event"] in ("all-stop", "all-paused")]
    assert seen["group_stops"] == []
    assert seen["held"][0] == (RankPhase.STOPPED, False) and seen["held"][1][0] == RankPhase.RUNNING
    assert seen["moved_while_held"] > 0
