"""An attach to a kept-alive job whose ranks are those of a run that ended (``launch --keep-alive``, the training
command done) targets the run that comes: it says what it waits for, and attaches the ranks ``remote-debug run``
starts - whether the attach came first, or right after ``run``, while the nodes still showed the ended run's ranks.
It used to report the finished ranks as having no debugger and end at once, 0 ranks, exit code 0."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from remote_debug.contract import spec
from remote_debug.contract.spec import LOOPBACK
from remote_debug.laptop.attach.attacher import AttachOptions, AttachResult, _of_an_ended_run
from remote_debug.laptop.core.jobinfo import JobStatus
from remote_debug.laptop.ide.headless_session import HeadlessPlan
from remote_debug.laptop.wire import events
from tests.helpers.ddp_job import break_line
from tests.helpers.hook_runs import wait_for
from tests.helpers.jobs import AttachInThread, LocalJob, launch_job

# Each rank says which run it belongs to (REMOTE_DEBUG_RUN: 0 the training command, n the n-th `run`).
SCRIPT = textwrap.dedent(
    """
    import os
    rank = int(os.environ["RANK"])
    seen = "run" + os.environ.get("REMOTE_DEBUG_RUN", "0") + "-rank" + str(rank)
    print(seen, flush=True)  # BREAK-HERE
    """
)


def headless_attach(job: LocalJob) -> AttachInThread:
    """``attach --headless --break`` as the CLI runs it (it returns once every rank had its stops), in a thread."""
    line = break_line(job.project / "train.py")
    plan = HeadlessPlan(breakpoints={str(job.project / "train.py"): [line]}, watch=("seen",), attach_timeout=60)
    options = AttachOptions(
        workspace=job.project,
        headless=plan,
        write_launch_json=False,
        edit_user_ssh_config=False,
        ready_timeout=60,
        detach_when_done=True,
    )
    return AttachInThread(job, options)


def start_run(job: LocalJob) -> subprocess.Popen[str]:
    """``remote-debug run JOB --wait 60``: every new rank waits for its debugger."""
    return subprocess.Popen(
        [sys.executable, "-m", "remote_debug", "run", job.name, "--wait", "60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )


def stops(result: AttachResult) -> dict[int, str]:
    return {r.rank: s.variables.get("seen", "").strip("'\"") for r in result.reports for s in r.stops}


@pytest.fixture
def kept_alive(home: Path, tmp_path: Path) -> Iterator[LocalJob]:
    """A 2-rank job whose training command ran (no debugger) and ended: its node holds."""
    del home
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(SCRIPT)
    job = launch_job("follow", project, nproc_per_node=2, keep_alive=300)
    wait_for(lambda: job.backend.describe(job.name).kept_alive_seconds_left is not None or None, 60, "kept alive")
    yield job


def test_an_attach_waits_for_the_next_run_and_attaches_its_ranks(kept_alive: LocalJob) -> None:
    job = kept_alive
    # 1. attach while nothing runs: it waits for run 1, saying so
    attach = headless_attach(job)
    waiting = wait_for(lambda: attach.of(events.Waiting) or None, 30, "the attach to say what it waits for")
    assert isinstance(waiting[0], events.Waiting) and waiting[0].what == "the ranks of run 1", waiting
    time.sleep(2)  # a while later it still waits: the ended run's ranks are not what it attaches to
    assert attach.thread.is_alive(), attach.events
    assert not attach.of(events.RankUnavailable) and not attach.of(events.Ready), attach.events

    first = start_run(job)
    result = attach.join(90)
    assert stops(result) == {0: "run1-rank0", 1: "run1-rank1"}, attach.events
    assert result.exit_code == 0
    assert first.wait(60) == 0, first.stderr.read() if first.stderr else ""

    # 2. attach right after `run`: the node still shows run 1's finished ranks for a moment
    wait_for(lambda: job.backend.describe(job.name).kept_alive_seconds_left is not None or None, 30, "kept alive")
    second = start_run(job)
    attach = headless_attach(job)
    result = attach.join(90)
    assert stops(result) == {0: "run2-rank0", 1: "run2-rank1"}, attach.events
    assert result.exit_code == 0
    assert second.wait(60) == 0, second.stderr.read() if second.stderr else ""
    assert job.backend.describe(job.name).status == JobStatus.IN_PROGRESS


def _rank(rank: int, state: spec.RankState, start_ticks: int | None) -> spec.RankEndpoint:
    return spec.RankEndpoint(rank, rank, 2, 5000 + rank, 100 + rank, state=state, start_ticks=start_ticks)


def _node(run: int, holds: bool, *ranks: spec.RankEndpoint) -> spec.NodeManifest:
    return spec.NodeManifest(
        "j", "algo-1", ["algo-1"], LOOPBACK, 22, "u", "ssh-ed25519 AAAA", "/code",
        state=spec.NodeState.RUNNING, run=run, kept_alive_until=time.time() + 60 if holds else None, ranks=list(ranks),
    )  # fmt: skip


def test_which_rank_documents_are_an_ended_runs() -> None:
    """What discovery waits past: a finished rank on a node that holds, or on a run whose ranks have not replaced
    it yet (its process started well before theirs); never a training command's, nor a live rank."""
    finished, live = spec.RankState.FINISHED, spec.RankState.WAITING
    old, new = _rank(1, finished, 5_000), _rank(0, live, 90_000)
    assert not _of_an_ended_run(_node(0, False, _rank(1, finished, 5_000), new), old)  # no keep-alive, or run 0
    assert _of_an_ended_run(_node(1, True, old), old)  # the node holds: nothing runs
    assert _of_an_ended_run(_node(2, False, old), old)  # run 2 is on, none of its ranks reported yet
    assert _of_an_ended_run(_node(2, False, new, old), old)  # rank 0 of run 2 did, rank 1 not yet
    this_run = _rank(1, finished, 90_010)
    assert not _of_an_ended_run(_node(2, False, new, this_run), this_run)  # rank 1 of run 2 ended already
    assert not _of_an_ended_run(_node(2, False, new, old), new)
    older_hook = _rank(1, finished, None)
    assert not _of_an_ended_run(_node(2, False, _rank(0, live, None), older_hook), older_hook)
