"""Lazy listeners and the rank's control channel, with real torchrun ranks (gloo, CPU)."""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path
from typing import Any

import pytest

from remote_debug import spec
from tests.container.helpers import (
    PYTHON,
    HookRun,
    MiniDap,
    control_request,
    listen_addresses,
    wait_for,
)

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")

# Rank 1 blocks in a barrier (a C call) until rank 0 is released; each rank records whether
# debugpy was ever imported and whether a tracer is installed in its main thread at the end.
SCRIPT = """\
import pathlib, sys, time
from datetime import timedelta
import torch.distributed as dist
marks = pathlib.Path(sys.argv[1])
dist.init_process_group("gloo", timeout=timedelta(seconds=120))
rank = dist.get_rank()
(marks / f"ready-{rank}").write_text(str("debugpy" in sys.modules))
def wait_for_release():
    deadline = time.monotonic() + 100
    while not (marks / "release").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
if rank == 0:
    wait_for_release()
dist.barrier()
(marks / f"trace-{rank}").write_text(repr(sys.gettrace()))
dist.destroy_process_group()
"""


def control(port: int, op: str) -> dict[str, Any]:
    return control_request(port, op)


def test_idle_ranks_start_debugpy_on_request_and_report_stacks_while_blocked(run: HookRun) -> None:
    run.env.pop(spec.ENV_LISTEN)  # the default: lazy
    script = run.root / "job.py"
    script.write_text(SCRIPT)
    run.start_torchrun(script)
    run.wait_ranks_ready("both ranks to initialise")
    # nobody asked: debugpy was never even imported
    assert [(run.marks / f"ready-{r}").read_text() for r in (0, 1)] == ["False", "False"]
    ranks = {r: run.rank(r) for r in (0, 1)}
    for r in (0, 1):
        assert ranks[r]["state"] == "idle" and ranks[r]["port"] == 0, ranks[r]
        assert ranks[r]["control_port"] > 0 and listen_addresses(ranks[r]["control_port"]) == ["0100007F"]

    # rank 1 sits in the barrier: its control thread still answers, with the blocked frame
    stacks = control(ranks[1]["control_port"], "stacks")
    assert stacks["ok"] and stacks["pid"] == ranks[1]["pid"]
    main = next(t for t in stacks["threads"] if t["name"] == "MainThread")
    assert main["frames"][-1]["function"] == "barrier", main["frames"][-3:]
    assert any(f["file"] == str(script) and f["line"] == 14 for f in main["frames"])
    assert not any(t["name"].startswith("remote-debug") for t in stacks["threads"])

    # ... and starts debugpy on request, while the main thread is still blocked
    reply = control(ranks[1]["control_port"], "listen")
    assert reply["ok"] and reply["port"] > 0, reply
    assert reply["detail"] == "process-group timeout 7200 s"
    assert control(ranks[1]["control_port"], "listen")["port"] == reply["port"]  # once only
    wait_for(lambda: run.rank(1)["state"] == "listening", 10, "rank 1 listening")
    assert run.rank(1)["port"] == reply["port"] and listen_addresses(reply["port"]) == ["0100007F"]
    dap = MiniDap(reply["port"])
    try:
        assert dap.initialize()["success"]
    finally:
        dap.close()
    assert run.rank(0)["state"] == "idle"
    assert control(ranks[0]["control_port"], "bogus") == {"ok": False, "error": "unknown op 'bogus'"}

    run.release()
    assert run.wait(60) == 0, run.stderr
    assert (run.marks / "trace-0").read_text() == "None"  # rank 0 never paid for a tracer
    assert [run.rank(r)["state"] for r in (0, 1)] == ["finished", "finished"]


LOOP = """\
import pathlib, sys, threading, time
marks = pathlib.Path(sys.argv[1])
def work(i):
    return i + 1
deadline = time.monotonic() + 100
i = 0
while not (marks / "release").exists() and time.monotonic() < deadline:
    i = work(i)  # line 8
    fresh = []
    t = threading.Thread(target=lambda: fresh.append(sys.gettrace() is not None))
    t.start()
    t.join()
    (marks / "traced.tmp").write_text(str(sys.gettrace() is not None or fresh[0]))
    (marks / "traced.tmp").replace(marks / "traced")
    time.sleep(0.02)
"""


def traced(run: HookRun) -> str | None:
    path = run.marks / "traced"
    return path.read_text() if path.exists() else None


def stop_once_at_line_8(port: int, script: Path) -> None:
    """A DAP client attaches, stops at the loop's line 8 once, clears the breakpoint, continues, leaves."""
    dap = MiniDap(port)
    try:
        dap.initialize()
        attach_seq = dap.send("attach", justMyCode=False)
        dap.event("initialized")
        bp = dap.response_to(dap.send("setBreakpoints", source={"path": str(script)}, breakpoints=[{"line": 8}]))
        assert bp["success"], bp
        assert dap.response_to(dap.send("configurationDone"))["success"]
        assert dap.response_to(attach_seq)["success"]
        stopped = dap.event("stopped")
        assert stopped["body"]["reason"] == "breakpoint"
        dap.response_to(dap.send("setBreakpoints", source={"path": str(script)}, breakpoints=[]))
        dap.response_to(dap.send("continue", threadId=stopped["body"]["threadId"]))
        dap.response_to(dap.send("disconnect"))
    finally:
        dap.close()


def test_a_client_arriving_after_the_grace_still_stops(run: HookRun) -> None:
    """attach asks for "listen", the user presses F5 much later: the tracer went after the grace period
    (nobody came) and comes back when the client connects, so its breakpoint still stops."""
    run.env.pop(spec.ENV_LISTEN)
    script = run.root / "loop.py"
    script.write_text(LOOP)
    run.start(PYTHON, str(script), str(run.marks))
    wait_for(lambda: traced(run), 30, "the loop to run")
    port = control(run.rank(0)["control_port"], "listen")["port"]
    wait_for(lambda: traced(run) == "True", 10, "tracing after listen")
    wait_for(lambda: traced(run) == "False", 15, "tracing removed after the grace with no client")
    stop_once_at_line_8(port, script)
    run.release()
    assert run.wait(30) == 0, run.stderr


def test_detach_removes_tracing_and_a_new_attach_stops_again(run: HookRun) -> None:
    run.env.pop(spec.ENV_LISTEN)
    script = run.root / "loop.py"
    script.write_text(LOOP)
    run.start(PYTHON, str(script), str(run.marks))
    wait_for(lambda: traced(run), 30, "the loop to run")
    assert traced(run) == "False" and run.rank(0)["state"] == "idle"
    control_port = run.rank(0)["control_port"]

    port = control(control_port, "listen")["port"]
    dap = MiniDap(port)
    try:
        assert dap.attach()["success"]
        wait_for(lambda: traced(run) == "True", 10, "pydevd's tracer in the main thread")
        wait_for(lambda: run.rank(0)["state"] == "attached", 10, "state attached")
        dap.response_to(dap.send("disconnect"))
    finally:
        dap.close()
    # the last client left: the tracer is gone from the main thread, and stays gone
    wait_for(lambda: run.rank(0)["state"] == "listening", 10, "state listening after detach")
    wait_for(lambda: traced(run) == "False", 10, "tracing removed after detach")
    time.sleep(0.5)
    assert traced(run) == "False"

    # attaching again puts tracing back: a breakpoint in the running loop stops
    assert control(control_port, "listen")["port"] == port
    stop_once_at_line_8(port, script)
    # (a session this short may fall between two polls of the watcher: then the grace period ends it)
    wait_for(lambda: traced(run) == "False", 20, "tracing removed after the second detach")
    run.release()
    assert run.wait(30) == 0, run.stderr
