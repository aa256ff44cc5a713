"""Hold on failure, the whole gang: when one torchrun rank is held at its exception, every other rank is held
too - alive, not timed out in its collective (even with a 5 s process-group timeout), its document naming the
failed rank - and when the hold ends the job fails with that rank's exception (real hook, torchrun, gloo)."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from remote_debug.contract import job_secret, spec
from remote_debug.laptop.connection.rank_control import exchange
from tests.helpers.hook_runs import JOB_SECRET, REPO, HookRun, MiniDap, alive, free_port, wait_for

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")

# Every rank all_reduces in a loop, with a process-group timeout far shorter than the hold; rank FAILING
# raises in the step all ranks agree the test wrote marks/fail.  Rank 0 then computes in Python for a long
# while (a busy loop): its main thread is paused there, where it is, rather than in its next collective.
SCRIPT = """\
import datetime, pathlib, sys, time
import torch
import torch.distributed as dist

marks = pathlib.Path(sys.argv[1])
FAILING = 3


def train_step(failing):
    # every rank learns in the same step whether the test asked for the failure: rank 0's long computation
    # and rank FAILING's exception happen in that one step, whatever each rank saw of the file and when
    flag = torch.tensor([1.0 if failing else 0.0])
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # COLLECTIVE
    return bool(flag.item())


def busy(rank, seconds):
    spin_until = time.monotonic() + seconds
    while time.monotonic() < spin_until:
        pass  # BUSY


def fail(step):
    scale = step * 10
    raise ValueError(f"bad batch {scale}")


dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=5))
rank = dist.get_rank()
step = 0
deadline = time.monotonic() + 240
while time.monotonic() < deadline:
    failing = train_step((marks / "fail").exists())
    step += 1
    (marks / f"step-{rank}").write_text(str(step))
    if rank == FAILING and failing:
        fail(step)
    busy(rank, 60 if rank == 0 and failing else 0.01)
"""
FAILING = 3
HOLD = 25.0


def _stacks(port: int) -> list[dict[str, Any]]:
    payload = {"op": "stacks", "auth": job_secret.control_token(JOB_SECRET)}
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        reply = json.loads(exchange(sock, payload))
    assert reply["ok"], reply
    threads: list[dict[str, Any]] = reply["threads"]
    return threads


def _main_thread(control_port: int) -> list[tuple[str, int]]:
    """(function, line) of each frame of the rank's main thread, outermost first."""
    main = next(t for t in _stacks(control_port) if t["name"] == "MainThread")
    return [(f["function"], f["line"]) for f in main["frames"]]


def _line(marker: str) -> int:
    return next(i for i, line in enumerate(SCRIPT.splitlines(), 1) if marker in line)


def _steps(run: HookRun, rank: int) -> int:
    try:
        return int((run.marks / f"step-{rank}").read_text() or 0)
    except (OSError, ValueError):
        return 0


def test_every_rank_is_held_with_the_failed_one_then_the_job_fails_with_its_exception(run: HookRun) -> None:
    output = run.root / "output"
    output.mkdir()
    run.env["SM_OUTPUT_DIR"] = str(output)
    run.env[spec.ENV_HOLD_ON_FAILURE] = f"{HOLD:g}"
    run.env[spec.ENV_LISTEN] = "lazy"
    run.env[spec.ENV_RANKS] = "0,1,3"  # rank 2 has no debugger: held all the same
    script = run.root / "train.py"
    script.write_text(SCRIPT)
    run.start_torchrun(script, nproc=4)
    proc = run.proc
    assert proc is not None
    wait_for(lambda: all(_steps(run, r) > 2 for r in range(4)) or proc.poll() is not None, 120, "4 ranks training")
    assert proc.poll() is None, run.stderr
    (run.marks / "fail").write_text("")
    failed_at = time.monotonic()

    def held(doc: dict[str, Any]) -> bool:
        # a rank without a debugger stays "skipped" (nothing to attach to), held all the same
        return bool(doc["state"] == "held" or (doc["state"] == "skipped" and "held_for" in doc))

    def all_held() -> dict[int, dict[str, Any]] | None:
        docs = {r: doc for r in range(4) if (doc := run.rank_if_any(r)) is not None and held(doc)}
        return docs if len(docs) == 4 else None

    docs = wait_for(all_held, 30, "every rank held")
    assert [docs[r]["state"] for r in range(4)] == ["held", "held", "skipped", "held"]
    assert docs[FAILING]["error"].startswith("ValueError: bad batch") and "held_for" not in docs[FAILING]
    for r in range(3):
        assert docs[r]["held_for"] == FAILING and docs[r]["held_for_error"] == docs[FAILING]["error"], docs[r]
        assert "error" not in docs[r] or docs[r]["error"] is None, docs[r]
    # well past the 5 s process-group timeout: nobody timed out in a collective, everybody is still there
    time.sleep(max(0.0, failed_at + 10 - time.monotonic()))
    for r in range(4):
        doc = run.rank(r)
        assert held(doc) and doc.get("error") in (None, docs[r].get("error")), doc
        assert alive(doc["pid"]), r
    assert proc.poll() is None
    # where they are: ranks 1 and 2 wait in their collective (a thread in C pauses only when it returns)
    for r in (1, 2):
        main = _main_thread(run.rank(r)["control_port"])
        assert ("train_step", _line("COLLECTIVE")) in main, main
    # rank 0 was computing: paused right there, and a debugger that attaches now is told so
    main = _main_thread(run.rank(0)["control_port"])
    assert ("busy", _line("BUSY")) in main, main
    dap = MiniDap(run.rank(0)["port"])
    try:
        dap.attach()
        stopped = dap.event("stopped")["body"]
        frames = dap.response_to(dap.send("stackTrace", threadId=stopped["threadId"]))["body"]["stackFrames"]
        assert (frames[0]["name"], frames[0]["line"]) == ("busy", _line("BUSY")), frames[:3]
    finally:
        dap.close()
    assert "timed out" not in run.stderr.lower(), run.stderr[-3000:]

    # the hold runs out: the job fails, with rank 3's exception as the reason
    assert run.wait(HOLD + 60) == 1, run.stderr[-3000:]
    assert (output / "failure").read_text() == f"{docs[FAILING]['error']} (rank {FAILING})"
    assert "timed out" not in run.stderr.lower(), run.stderr[-3000:]
    final = {r: run.rank(r) for r in range(4)}
    assert final[FAILING]["state"] == "failed"
    assert all(final[r].get("held_for") == FAILING for r in range(3)), final


# A rank with hold on failure and a group: the watcher's cost, measured in the rank (its thread's CPU time from
# /proc, and one look's), the store's server in another process as torchrun's agent runs it.
COST_SCRIPT = """\
import datetime, os, sys, threading, time
import torch.distributed as dist
from remote_debug.container.rank import gang_hold

store = dist.TCPStore("127.0.0.1", int(sys.argv[1]), 2, False)
dist.init_process_group("gloo", store=store, rank=0, world_size=1)


class Reporter:
    def update(self, **fields):
        raise AssertionError(f"nothing failed, nothing to report: {fields}")


gang_hold.GangHold(Reporter(), 0, 60.0).start()
time.sleep(1.0)
[tid] = [t.native_id for t in threading.enumerate() if t.name == "remote-debug-gang-hold"]


def cpu():
    fields = open(f"/proc/self/task/{tid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


before = cpu()
time.sleep(float(sys.argv[2]))
watcher = cpu() - before
default = gang_hold.default_store()
started = time.thread_time()
for _ in range(1000):
    default.check([gang_hold.FAILED_KEY])
print(watcher, (time.thread_time() - started) / 1000)
"""


@pytest.mark.slow
def test_the_watcher_of_a_rank_that_did_not_fail_costs_well_under_a_percent_of_a_core(tmp_path: Path) -> None:
    port = free_port()
    serve = f"import torch.distributed as d, time\ns = d.TCPStore('127.0.0.1', {port}, 2, True, wait_for_workers=False)"
    server = subprocess.Popen([sys.executable, "-c", serve + "\ntime.sleep(120)"])
    try:
        script = tmp_path / "cost.py"
        script.write_text(COST_SCRIPT)
        seconds = 5.0
        env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
        out = subprocess.run(
            [sys.executable, str(script), str(port), str(seconds)], capture_output=True, text=True, timeout=120, env=env
        )
        assert out.returncode == 0, out.stderr[-3000:]
        watcher, per_look = (float(x) for x in out.stdout.split())
        # two looks a second: at most a clock tick or two of CPU in 5 s (a busy loop would be all 5 s)
        assert watcher <= 0.05, watcher
        assert per_look < 0.002, per_look  # one store round trip: tens of microseconds
    finally:
        server.kill()
        server.wait()
