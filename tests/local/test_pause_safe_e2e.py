"""Pause-safe collectives: a rank paused at a breakpoint longer than the process-group timeout
no longer kills a torchrun job (real ranks, gloo on CPU, attach through SSH, lazy listeners)."""

from __future__ import annotations

import importlib.util
import textwrap
import time
from pathlib import Path

import pytest

from remote_debug.laptop.attach.attacher import AttachOptions
from remote_debug.laptop.ide.headless_session import HeadlessPlan
from remote_debug.laptop.wire import events as ev
from tests.helpers.ddp_job import break_line
from tests.helpers.event_log import EventLog
from tests.helpers.jobs import launch_job

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")

# Both ranks all_reduce in a loop until the test drops a "done" file; only rank 0 executes the
# breakpoint line.  The process-group timeout is 10 s; rank 0 is held 20 s at the breakpoint.
SCRIPT = textwrap.dedent(
    """
    import pathlib, time
    from datetime import timedelta
    import torch
    import torch.distributed as dist

    done = pathlib.Path({done!r})
    dist.init_process_group("gloo", timeout=timedelta(seconds=10))
    rank = dist.get_rank()
    step = 0
    deadline = time.monotonic() + 150
    while True:
        flag = torch.tensor([1.0 if done.exists() or time.monotonic() > deadline else 0.0])
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if flag.item():
            break
        if rank == 0:
            step += 1  # BREAK-HERE
        time.sleep(0.1)
    dist.barrier()
    dist.destroy_process_group()
    """
)


def test_twenty_second_pause_survives_a_ten_second_pg_timeout(home: Path, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    done = tmp_path / "done"
    (project / "train.py").write_text(SCRIPT.format(done=str(done)))
    job = launch_job("pause", project, nproc_per_node=2)
    events = EventLog()
    times: dict[str, float] = {}

    def emit(event: ev.Event) -> None:
        events.append(event)
        if isinstance(event, (ev.Stopped, ev.RankDetached)):
            times.setdefault(event.name, time.monotonic())
        if isinstance(event, ev.RankDetached):
            done.write_text("")  # let the job end

    plan = HeadlessPlan(breakpoints={str(project / "train.py"): [break_line(project / "train.py")]}, pause_seconds=20)
    options = AttachOptions(workspace=project, headless=plan, ranks=(0,), write_launch_json=False)
    result = job.attach(options, emit)

    assert result.job.status == "Completed", (result.job.failure_reason, events, job.logs()[-6000:])
    assert result.job.exit_code == 0
    [report] = result.reports
    assert report.error is None and report.stops and report.stops[0].variables
    assert times["rank-detached"] - times["stopped"] >= 20
    # rank 0 was started lazily; rank 1 (not attached, waiting in all_reduce) was told to be pause-safe
    listening = [e for e in events if e["event"] == "rank-listening"]
    assert [e["rank"] for e in listening] == [0]
    safe = {e["rank"]: e["detail"] for e in events if e["event"] == "pause-safe"}
    # raised at once, or (attached before init_process_group) by the rank itself right after init
    assert list(safe) == [1], events
    assert safe[1] in ("process-group timeout 7200 s", "pending: no process group yet")
