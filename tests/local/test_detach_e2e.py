"""Detach restores the idle cost in real torchrun ranks: after the debugger leaves, no tracer is left in
any rank (``sys.gettrace()`` in the main thread and in a fresh thread), checked by the ranks themselves."""

from __future__ import annotations

import textwrap
import threading
import time
from pathlib import Path

from remote_debug.laptop.attach.attacher import AttachOptions
from remote_debug.laptop.ide.headless_session import HeadlessPlan
from remote_debug.laptop.wire import events as ev
from tests.helpers.ddp_job import break_line, marked_project
from tests.helpers.hook_runs import wait_for
from tests.helpers.jobs import launch_job

# Each rank loops until the test drops "done", writing whether any tracer is installed.  Both ranks
# pass the marked line at every iteration; the headless client stops each once, then clears its breakpoints.
SCRIPT = textwrap.dedent(
    """
    import os, pathlib, sys, threading, time
    marks = pathlib.Path({marks!r})
    rank = int(os.environ["RANK"])
    def work(i):
        return i + 1
    i = 0
    deadline = time.monotonic() + 120
    while not (marks / "done").exists() and time.monotonic() < deadline:
        i = work(i)
        reached = rank  # BREAK-HERE
        fresh = []
        t = threading.Thread(target=lambda: fresh.append(sys.gettrace() is not None))
        t.start()
        t.join()
        state = marks / f"traced-{{rank}}"
        state.with_suffix(".tmp").write_text(str(sys.gettrace() is not None or fresh[0]))
        state.with_suffix(".tmp").replace(state)
        time.sleep(0.02)
    """
)


def traced(marks: Path, rank: int) -> str | None:
    path = marks / f"traced-{rank}"
    return path.read_text() if path.exists() else None


def test_after_detach_no_rank_keeps_a_tracer(home: Path, tmp_path: Path) -> None:
    project, marks = marked_project(tmp_path, SCRIPT)
    script = project / "train.py"
    job = launch_job("untrace", project, nproc_per_node=2)
    # idle: lazy listeners, nobody attached yet -> no tracer in either rank
    wait_for(lambda: traced(marks, 0) and traced(marks, 1), 60, "both ranks running")
    assert (traced(marks, 0), traced(marks, 1)) == ("False", "False")

    detached: set[int] = set()

    def emit(event: ev.Event) -> None:
        if isinstance(event, ev.RankDetached):
            detached.add(event.rank)
            if detached == {0, 1}:
                threading.Thread(target=finish, daemon=True).start()

    after: dict[int, float] = {}

    def finish() -> None:
        # the ranks run on after the detach; each must drop its tracer (the watcher polls every 0.5 s)
        start = time.monotonic()
        try:
            for rank in (0, 1):
                wait_for(lambda rank=rank: traced(marks, rank) == "False", 20, f"rank {rank} untraced")  # type: ignore[misc]  # mypy cannot type a lambda whose default binds the loop variable
                after[rank] = time.monotonic() - start
            time.sleep(1.0)
            after[2] = float(traced(marks, 0) == traced(marks, 1) == "False")  # and it stays so
        finally:
            (marks / "done").write_text("")

    plan = HeadlessPlan(breakpoints={str(script): [break_line(script)]})
    result = job.attach(AttachOptions(workspace=project, headless=plan, write_launch_json=False), emit)
    assert result.job.status == "Completed", (result.job.failure_reason, job.logs())
    assert all(report.stops for report in result.reports), result.reports
    assert set(after) == {0, 1, 2} and after[2] == 1.0, after
    print(f"detach -> no tracer: rank 0 {after[0]:.2f} s, rank 1 {after[1]:.2f} s")
