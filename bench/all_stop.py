"""``python -m bench --all-stop [--short]``: issue 31's rows, many ranks debugged as one program.

P14 first stop -> every rank paused (all-stop): a job of light ranks runs attached (headless, all-stop, no
    breakpoint hit yet); the bench drops a trigger file and rank 0 alone hits a breakpoint; the time from rank 0's
    stop to the last rank's ``stopped`` (the attach's ``all-paused`` event, measured by the group), at 8 and 64
    ranks (1 x 8, 8 x 8; ``--short``: 8).  Goals: <= 3 s at 64 on 2 cores (<= 1 s on a 16-core node).
P15 Continue All -> every rank running: from ``remote-debug ranks continue``'s action to the last rank's next
    step (each rank writes its step count; the bench reads them).
P16 the cost of all-stop on the training loop when no breakpoint is hit: a call-heavy loop in 2 ranks attached
    non-stop vs all-stop (its chunk times, median; best of 3 alternated runs, 1 with ``--short``), goal <= 1.02x.
"""

from __future__ import annotations

import statistics
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

from bench.rank_jobs import break_line, launch_rank_job, wait_for_ranks
from remote_debug.contract import spec
from remote_debug.laptop.attach.attacher import Attacher, AttachOptions
from remote_debug.laptop.core.paths import StatePaths
from remote_debug.laptop.ide.headless_session import HeadlessPlan
from remote_debug.laptop.wire import events
from remote_debug.laptop.wire.documents import GroupAction

STEPPING_RANK = textwrap.dedent(
    """
    import os, pathlib, time
    rank = int(os.environ.get("RANK", "0"))
    marks = pathlib.Path({marks!r})
    trigger = marks / "trigger"
    step = 0
    while not (marks / "done").exists():
        step += 1
        (marks / f"steps-{{rank}}").write_text(str(step))
        if rank == 0 and trigger.exists():
            trigger.unlink()  # BENCH-BREAK
        time.sleep(0.02)
    """
)
# chunks of a call-heavy loop, each timed: the cost of a debugger that is attached but never stops
TIMED_CHUNKS = textwrap.dedent(
    """
    import os, pathlib, time
    rank = int(os.environ.get("RANK", "0"))
    marks = pathlib.Path({marks!r})
    def f(x):
        return x + 1
    times = []
    while not (marks / "done").exists():
        start = time.perf_counter()
        total = 0
        for i in range(200000):
            total = f(total)
        times.append(time.perf_counter() - start)
        if (marks / "measure").exists():
            (marks / f"chunks-{{rank}}").write_text(" ".join(f"{{t:.6f}}" for t in times[-40:]))
        if total < 0:
            print("never")  # BENCH-BREAK (a breakpoint set, never hit)
        time.sleep(0.001)
    """
)
GOAL_PAUSE_64_S, GOAL_OVERHEAD = 3.0, 1.02


class _Attached:
    """A running job of this bench with a headless attach in a thread of its own (the group reachable)."""

    def __init__(
        self, paths: StatePaths, work: Path, name: str, nodes: int, nproc: int, script: str, *, all_stop: bool
    ):
        self.marks = work / f"{name}-marks"
        self.marks.mkdir(parents=True, exist_ok=True)
        self.ranks = nodes * nproc
        self.backend, self.src = launch_rank_job(
            paths, work, name, nodes, nproc, script=script.format(marks=str(self.marks)), wait_seconds=0
        )
        self.name, self.paths = name, paths
        self.events: list[tuple[float, events.Event]] = []
        self.attached = threading.Event()
        self.attacher: Attacher | None = None
        wait_for_ranks(self.backend, name, self.ranks, spec.RankState.IDLE)
        line = break_line(self.src / "ranks.py")
        plan = HeadlessPlan(
            breakpoints={str(self.src / "ranks.py"): [line]}, max_stops=1, pause_seconds=600, attach_timeout=120
        )
        options = AttachOptions(
            workspace=self.src,
            headless=plan,
            write_launch_json=False,
            edit_user_ssh_config=False,
            ready_timeout=120,
            all_stop=all_stop,
        )
        self.attacher = Attacher(self.backend, name, options, self._emit, paths)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        if not self.attached.wait(300):
            raise RuntimeError(f"{name}: not every rank attached")
        time.sleep(1.0)  # configurationDone follows rank-attached

    def _emit(self, event: events.Event) -> None:
        self.events.append((time.perf_counter(), event))
        if sum(isinstance(e, events.RankAttached) for _, e in self.events) == self.ranks:
            self.attached.set()

    def _run(self) -> None:
        assert self.attacher is not None
        self.attacher.run()

    def first(self, kind: type[events.Event], timeout: float = 60) -> tuple[float, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [(t, e) for t, e in self.events if isinstance(e, kind)]
            if found:
                return found[0]
            time.sleep(0.01)
        raise RuntimeError(f"{self.name}: no {kind.name} event in {timeout:g} s")

    def steps(self) -> dict[int, int]:
        out = {}
        for rank in range(self.ranks):
            try:
                out[rank] = int((self.marks / f"steps-{rank}").read_text() or 0)
            except (FileNotFoundError, ValueError):
                out[rank] = 0
        return out

    def stop(self) -> None:
        (self.marks / "done").write_text("")
        if self.attacher is not None:
            self.attacher.group.act(GroupAction.CONTINUE, origin="bench")
        self.backend.stop(self.name, wait_seconds=60)
        self.thread.join(60)


def _pause_and_continue(paths: StatePaths, work: Path, nodes: int, nproc: int) -> dict[str, float]:
    job = _Attached(paths, work, f"bench-allstop-{nodes}x{nproc}", nodes, nproc, STEPPING_RANK, all_stop=True)
    try:
        (job.marks / "trigger").write_text("")
        stopped_at, _ = job.first(events.AllStop)
        paused_at, paused = job.first(events.AllPaused)
        assert job.attacher is not None
        before = job.steps()
        start = time.perf_counter()
        job.attacher.group.act(GroupAction.CONTINUE, origin="bench")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if all(n > before[r] for r, n in job.steps().items()):
                break
            time.sleep(0.005)
        else:
            raise RuntimeError(f"{job.name}: not every rank ran again after Continue All")
        continued = time.perf_counter() - start
        return {
            "paused_s": paused.seconds,
            "event_gap_s": paused_at - stopped_at,
            "continue_all_s": continued,
        }
    finally:
        job.stop()


def _loop_cost(paths: StatePaths, work: Path, *, all_stop: bool) -> float:
    name = f"bench-allstop-cost-{'on' if all_stop else 'off'}-{time.monotonic_ns() % 100000}"
    job = _Attached(paths, work, name, 1, 2, TIMED_CHUNKS, all_stop=all_stop)
    try:
        (job.marks / "measure").write_text("")
        time.sleep(6.0)
        chunks = [float(t) for rank in range(job.ranks) for t in (job.marks / f"chunks-{rank}").read_text().split()]
        return statistics.median(chunks)
    finally:
        job.stop()


def all_stop_rows(work: Path, short: bool) -> dict[str, dict[str, float]]:
    paths = StatePaths(work / "state")
    shapes = [(1, 8)] if short else [(1, 8), (8, 8)]
    rows: dict[str, dict[str, float]] = {}
    for nodes, nproc in shapes:
        row = _pause_and_continue(paths, work, nodes, nproc)
        if nodes * nproc == 64:
            row["goal_paused_s"] = GOAL_PAUSE_64_S
        rows[f"P14/P15 all-stop, {nodes * nproc} ranks ({nodes} x {nproc})"] = row
    # alternated, the best of each: on a shared 2-core machine a neighbour's burst lands on one run or the other
    offs, ons = [], []
    for _ in range(1 if short else 3):
        offs.append(_loop_cost(paths, work, all_stop=False))
        ons.append(_loop_cost(paths, work, all_stop=True))
    off, on = min(offs), min(ons)
    rows["P16 call-heavy loop, attached all-stop vs non-stop (no stop)"] = {
        "non_stop_chunk_s": off,
        "all_stop_chunk_s": on,
        "ratio": on / off,
        "goal_ratio": GOAL_OVERHEAD,
    }
    return rows
