"""Issue 15's row (P10 here; the issue calls it P6): edit -> sync -> run -> every rank stopped again.

One run measures both ways to get a fixed line under the debugger in a 2-node x 2-rank local job:

* **iterate**: a kept-alive job (``--keep-alive``) with an attach that stays; the clock starts at the edit
  of one line, then ``remote-debug sync`` and ``remote-debug run`` (the real CLI, as a user types them)
  until the attach that was already running reports all 4 ranks stopped with the NEW value;
* **new job**: ``launch`` + ``attach`` of a fresh job with the same script, from the launch until all 4
  ranks stopped.

Goal: iterate <= 5 s, and <= 0.3x the new-job path.  ``python -m bench --iterate``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from bench.rank_jobs import break_line
from remote_debug.contract import spec
from remote_debug.laptop.attach.attacher import Attacher, AttachOptions
from remote_debug.laptop.core.paths import StatePaths
from remote_debug.laptop.ide.headless_session import HeadlessPlan
from remote_debug.laptop.machine.backend import LaunchRequest
from remote_debug.laptop.platforms import MachineBackend
from remote_debug.laptop.wire import events

NODES, NPROC = 2, 2
SCRIPT = textwrap.dedent(
    """
    import os
    VALUE = "v0"
    seen = VALUE + "-" + os.environ["RANK"]
    print(seen, flush=True)  # BENCH-BREAK
    """
)


class Stops:
    """Collects Stopped events (with the value of ``seen``) from an attach's emit."""

    def __init__(self) -> None:
        self.values: list[tuple[float, int, str]] = []  # (when, rank, seen)
        self.lock = threading.Lock()

    def emit(self, event: events.Event) -> None:
        if isinstance(event, events.Stopped):
            with self.lock:
                self.values.append((time.perf_counter(), event.rank, event.variables.get("seen", "")))

    def all_with(self, value: str, ranks: int, timeout: float) -> float:
        """When the last of ``ranks`` ranks stopped with ``value`` in ``seen`` (raises on timeout)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                hits = {rank: when for when, rank, seen in self.values if value in seen}
            if len(hits) == ranks:
                return max(hits.values())
            time.sleep(0.02)
        raise RuntimeError(f"iterate bench: not every rank stopped with {value!r} within {timeout:g} s")


def _launch(backend: MachineBackend, src: Path, name: str, keep_alive: float) -> None:
    backend.launch(
        LaunchRequest(
            command=["python", "train.py"],
            name=name,
            source_dir=src,
            nodes=NODES,
            nproc_per_node=NPROC,
            options=spec.DebugOptions(wait_seconds=120, keep_alive=keep_alive),
        )
    )


def _attach(backend: MachineBackend, paths: StatePaths, src: Path, name: str, stops: Stops) -> threading.Thread:
    script = src / "train.py"
    plan = HeadlessPlan(breakpoints={str(script): [break_line(script)]}, max_stops=1, watch=("seen",))
    options = AttachOptions(workspace=src, headless=plan, write_launch_json=False, edit_user_ssh_config=False)
    thread = threading.Thread(target=Attacher(backend, name, options, stops.emit, paths).run, daemon=True)
    thread.start()
    return thread


def _cli(paths: StatePaths, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "REMOTE_DEBUG_HOME": str(paths.root)}
    return subprocess.run(
        [sys.executable, "-m", "remote_debug", *args], capture_output=True, text=True, env=env, timeout=120
    )


def new_job_seconds(work: Path, paths: StatePaths) -> float:
    src = work / "iterate-new"
    src.mkdir(exist_ok=True)
    (src / "train.py").write_text(SCRIPT.replace('"v0"', '"v1"'))
    backend, stops, name = MachineBackend(paths), Stops(), "bench-iterate-new"
    start = time.perf_counter()
    _launch(backend, src, name, 0)
    thread = _attach(backend, paths, src, name, stops)
    try:
        return stops.all_with("v1", NODES * NPROC, 180) - start
    finally:
        backend.stop(name, wait_seconds=30)
        thread.join(30)


def iterate_seconds(work: Path, paths: StatePaths) -> dict[str, float]:
    src = work / "iterate-kept"
    src.mkdir(exist_ok=True)
    (src / "train.py").write_text(SCRIPT)
    backend, stops, name = MachineBackend(paths), Stops(), "bench-iterate"
    _launch(backend, src, name, 600)
    thread = _attach(backend, paths, src, name, stops)
    try:
        stops.all_with("v0", NODES * NPROC, 180)
        deadline = time.monotonic() + 60
        while backend.describe(name).kept_alive_seconds_left is None:  # the first run is over: nodes hold
            if time.monotonic() > deadline:
                raise RuntimeError("iterate bench: the job was not kept alive")
            time.sleep(0.1)
        start = time.perf_counter()
        train = src / "train.py"
        train.write_text(train.read_text().replace('"v0"', '"v1"'))
        synced = _cli(paths, "sync", name, "--source", str(src))
        if synced.returncode != 0:
            raise RuntimeError(f"iterate bench: sync failed: {synced.stderr.strip()}")
        after_sync = time.perf_counter()
        run = subprocess.Popen(
            [sys.executable, "-m", "remote_debug", "run", name],
            env={**os.environ, "REMOTE_DEBUG_HOME": str(paths.root)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        stopped = stops.all_with("v1", NODES * NPROC, 120)
        run.wait(120)
        return {"iterate_s": stopped - start, "sync_s": after_sync - start, "run_to_stopped_s": stopped - after_sync}
    finally:
        _cli(paths, "release", name)
        backend.stop(name, wait_seconds=30)
        thread.join(30)


def iterate_rows(work: Path, short: bool) -> dict[str, dict[str, float]]:
    del short  # one measurement of each is the row; both are seconds long
    paths = StatePaths(work / "state")
    row = iterate_seconds(work, paths)
    row["new_job_s"] = new_job_seconds(work, paths)
    row["iterate_vs_new_job"] = row["iterate_s"] / row["new_job_s"]
    return {"P10 iterate: edit -> sync -> run -> 2x2 ranks stopped, vs a new job (issue 15's P6)": row}
