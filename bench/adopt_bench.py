"""Issue 19's row (P13): ``remote-debug adopt`` of a plain torchrun job - its time per rank, and the stall it
causes in a collective peer.

The job is started without remote_debug (N ranks, gloo, a second thread per rank spinning on the GIL, the case
where stock ``debugpy --pid`` hung).  Each rank runs ``all_reduce`` steps and records when each step ended and
how long it took.  The clock: ``remote-debug adopt --pid <torchrun>`` as a user runs it (the real CLI, a new
process: Python start-up included), from its start to its exit with every rank confirmed by its rank document.
The stall: the longest step that overlapped the adopt window, against the median step before it - gdb stops
one rank at a time, and its peers wait for it inside the collective.

``python -m bench --adopt [--short]``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

SCRIPT = textwrap.dedent(
    """
    import os, pathlib, threading, time
    import torch
    import torch.distributed as dist
    marks = pathlib.Path({marks!r})
    def spin():
        while not (marks / "done").exists():
            pass
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    threading.Thread(target=spin, daemon=True).start()
    out = open(marks / f"steps-{{rank}}", "a", buffering=1)
    deadline = time.monotonic() + 300
    while not (marks / "done").exists() and time.monotonic() < deadline:
        start = time.monotonic()
        tensor = torch.ones(1024)
        dist.all_reduce(tensor)
        time.sleep(0.01)
        end = time.monotonic()
        out.write(f"{{end}} {{end - start}}\\n")
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _steps(marks: Path, ranks: int) -> list[tuple[float, float]]:
    rows: list[tuple[float, float]] = []
    for rank in range(ranks):
        path = marks / f"steps-{rank}"
        if path.exists():
            for line in path.read_text().splitlines():
                end, took = line.split()
                rows.append((float(end), float(took)))
    return rows


def adopt_rows(work: Path, short: bool) -> dict[str, dict[str, float]]:
    ranks = 2 if short else 4
    marks, project = work / "adopt-marks", work / "adopt-project"
    marks.mkdir()
    project.mkdir()
    (project / "train.py").write_text(SCRIPT.format(marks=str(marks)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMOTE_DEBUG_") and k != "PYTHONPATH"}
    env["REMOTE_DEBUG_HOME"] = str(work / "adopt-state")
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(ranks),
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(_free_port()),
        "train.py",
    ]
    job = subprocess.Popen(
        argv, cwd=project, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 120
        while len({p.name for p in marks.glob("steps-*")}) < ranks or len(_steps(marks, ranks)) < 50 * ranks:
            if time.monotonic() > deadline or job.poll() is not None:
                raise RuntimeError("the plain torchrun job did not start")
            time.sleep(0.1)
        started = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "remote_debug", "adopt", "--pid", str(job.pid), "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        ended = time.monotonic()
        if proc.returncode != 0:
            raise RuntimeError(f"adopt failed: {proc.stderr.strip()}")
        outcome = json.loads(proc.stdout)
        if [r["state"] for r in outcome["ranks"]] != ["idle"] * ranks:
            raise RuntimeError(f"not every rank was adopted: {outcome['ranks']}")
        time.sleep(1.0)  # steps after the window, so the last overlapping one is written
        steps = _steps(marks, ranks)
        before = [took for end, took in steps if end < started]
        during = [took for end, took in steps if end - took < ended and end > started]
        median = statistics.median(before)
        stall = max(during) - median if during else 0.0
        subprocess.run(
            [sys.executable, "-m", "remote_debug", "stop", outcome["job"]], env=env, capture_output=True, timeout=120
        )
    finally:
        (marks / "done").write_text("")
        try:
            os.killpg(job.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        job.wait(timeout=30)
    wall = ended - started
    return {
        f"P13 adopt a plain {ranks}-rank torchrun (GIL-contending thread per rank)": {
            "adopt_s": wall,
            "per_rank_s": wall / ranks,
            "median_step_ms": median * 1000,
            "stall_ms": stall * 1000,
            "stall_vs_step": (stall + median) / median,
        }
    }
