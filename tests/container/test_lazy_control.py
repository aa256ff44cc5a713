"""Lazy listeners and the rank's control channel, with real torchrun ranks (gloo, CPU)."""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from remote_debug.contract import spec
from tests.helpers.hook_runs import (
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


def stop_once_at(port: int, script: Path, line: int = 8) -> None:
    """A DAP client attaches, stops at ``line`` of the loop once, clears the breakpoint, continues, leaves."""
    dap = MiniDap(port)
    try:
        configure(dap, script, line)
        stopped = dap.event("stopped")
        assert stopped["body"]["reason"] == "breakpoint"
        leave(dap, script, stopped)
    finally:
        dap.close()


def configure(dap: MiniDap, script: Path, line: int) -> None:
    """initialize -> attach -> initialized -> a breakpoint at ``line`` -> configurationDone -> attached."""
    dap.initialize()
    attach_seq = dap.send("attach", justMyCode=False)
    dap.event("initialized")
    bp = dap.response_to(dap.send("setBreakpoints", source={"path": str(script)}, breakpoints=[{"line": line}]))
    assert bp["success"], bp
    assert dap.response_to(dap.send("configurationDone"))["success"]
    assert dap.response_to(attach_seq)["success"]


def leave(dap: MiniDap, script: Path, stopped: dict[str, Any]) -> None:
    dap.response_to(dap.send("setBreakpoints", source={"path": str(script)}, breakpoints=[]))
    dap.response_to(dap.send("continue", threadId=stopped["body"]["threadId"]))
    dap.response_to(dap.send("disconnect"))


def event_within(dap: MiniDap, name: str, seconds: float) -> dict[str, Any] | None:
    """The event ``name`` if it comes within ``seconds`` (other messages are kept for later), else None.
    (``dap.event`` alone waits as long as the debuggee keeps sending thread events.)"""
    for message in dap.backlog:
        if message.get("type") == "event" and message.get("event") == name:
            dap.backlog.remove(message)
            return message
    deadline = time.monotonic() + seconds
    try:
        while (left := deadline - time.monotonic()) > 0:
            dap.sock.settimeout(left)
            try:
                message = dap.receive()  # a partial message stays in the buffer for the next call
            except TimeoutError:
                return None
            if message.get("type") == "event" and message.get("event") == name:
                return message
            dap.backlog.append(message)
        return None
    finally:
        dap.sock.settimeout(15.0)


# LOOP's loop, keeping a *twin* of its thread's state while marks/twin-wanted exists.  CPython (3.11
# and older) makes such a twin at every Thread.start(): the new thread's state is preallocated by its
# parent and carries the parent's thread id until the new thread runs; pydevd's helper that sets
# another thread's tracer writes the first state with that id it finds.  A loop that starts threads
# has a twin now and then (a race, met on a loaded machine); this one holds it open while the test
# asks, so that a tracer switch made meanwhile misses the loop every time.
TWIN_LOOP = """\
import ctypes, pathlib, sys, threading, time
marks = pathlib.Path(sys.argv[1])
api = ctypes.pythonapi
api.PyInterpreterState_Get.restype = ctypes.c_void_p
api._PyThreadState_Prealloc.restype = ctypes.c_void_p
api._PyThreadState_Prealloc.argtypes = [ctypes.c_void_p]
api.PyThreadState_Clear.argtypes = [ctypes.c_void_p]
api.PyThreadState_Delete.argtypes = [ctypes.c_void_p]
def mark(name, value):
    (marks / (name + ".tmp")).write_text(str(value))
    (marks / (name + ".tmp")).replace(marks / name)
def work(i):
    return i + 1
twin = None
deadline = time.monotonic() + 100
i = 0
while not (marks / "release").exists() and time.monotonic() < deadline:
    i = work(i)  # the breakpoint
    wanted = (marks / "twin-wanted").exists()
    if wanted and twin is None:
        twin = api._PyThreadState_Prealloc(api.PyInterpreterState_Get())  # as Thread.start() does
    elif twin is not None and not wanted:
        api.PyThreadState_Clear(twin)
        api.PyThreadState_Delete(twin)
        twin = None
    mark("twin", twin is not None)
    fresh = []
    t = threading.Thread(target=lambda: fresh.append(sys.gettrace() is not None))
    t.start()
    t.join()
    mark("main-traced", sys.gettrace() is not None)
    mark("fresh-traced", fresh[0])
    time.sleep(0.02)
"""
TWIN_BREAK_LINE = TWIN_LOOP.splitlines().index("    i = work(i)  # the breakpoint") + 1
needs_twins = pytest.mark.skipif(
    sys.version_info >= (3, 12), reason="CPython 3.11 and older, and pydevd's settrace (not sys.monitoring)"
)


def mark(run: HookRun, name: str) -> str | None:
    path = run.marks / name
    return path.read_text() if path.exists() else None


def twin(run: HookRun, wanted: bool) -> None:
    """The loop keeps (or drops) a twin of its thread's state; returns once it did."""
    flag = run.marks / "twin-wanted"
    if wanted:
        flag.write_text("")
    else:
        flag.unlink(missing_ok=True)
    wait_for(lambda: mark(run, "twin") == str(wanted), 10, f"the loop to {'keep' if wanted else 'drop'} a twin")


def start_twin_loop(run: HookRun) -> Path:
    run.env.pop(spec.ENV_LISTEN)
    script = run.root / "twin_loop.py"
    script.write_text(TWIN_LOOP)
    run.start(PYTHON, str(script), str(run.marks))
    wait_for(lambda: mark(run, "main-traced"), 30, "the loop to run")
    assert mark(run, "main-traced") == "False" and mark(run, "fresh-traced") == "False"
    return script


@needs_twins
def test_a_client_arriving_after_the_grace_still_stops(run: HookRun) -> None:
    """attach asks for "listen", the user presses F5 much later: the tracer went after the grace period
    (nobody came) and comes back when the client connects, so its breakpoint still stops.

    Both switches are made while the loop's thread has a twin (see TWIN_LOOP), as happens at random
    while it starts a thread: each must reach the loop once the twin is gone.  (With one attempt each,
    the rank stayed traced after the grace, and an F5 never stopped: the client waited for "stopped"
    until the debuggee exited - "EOF from the debug adapter".)"""
    script = start_twin_loop(run)
    port = control(run.rank(0)["control_port"], "listen")["port"]
    wait_for(lambda: mark(run, "main-traced") == "True", 10, "tracing after listen")

    # the untrace after the grace (nobody came), while the loop has a twin: it misses the loop...
    twin(run, True)
    wait_for(lambda: "debugger gone; tracing removed" in run.stderr, 20, "the untrace after the grace")
    time.sleep(1.0)  # two more polls of the watcher: their retries miss it too
    assert mark(run, "main-traced") == "True"
    assert mark(run, "fresh-traced") == "False"  # (threads started from now on are untraced already)
    # ... and reaches it once the twin is gone
    twin(run, False)
    wait_for(lambda: mark(run, "main-traced") == "False", 10, "tracing removed from the loop after the grace")

    # F5, much later: the retrace on attach, while the loop has a twin again
    twin(run, True)
    dap = MiniDap(port)
    try:
        configure(dap, script, TWIN_BREAK_LINE)
        wait_for(lambda: "tracing back on" in run.stderr, 10, "the retrace on attach")
        assert event_within(dap, "stopped", 1.0) is None  # it missed the loop: the breakpoint cannot hit yet
        twin(run, False)
        stopped = event_within(dap, "stopped", 10)  # ... until a retry reaches it
        assert stopped is not None, "the breakpoint never hit: tracing did not come back to the loop"
        assert stopped["body"]["reason"] == "breakpoint"
        leave(dap, script, stopped)
    finally:
        dap.close()
    run.release()
    assert run.wait(30) == 0, run.stderr


@needs_twins
def test_listen_reaches_a_loop_that_was_starting_a_thread(run: HookRun) -> None:
    """debugpy.listen() puts pydevd's tracer into every thread in one attempt, which misses a thread with
    a twin (see TWIN_LOOP); the rank checks which threads took it and tries again for the others."""
    script = start_twin_loop(run)
    twin(run, True)
    port = control(run.rank(0)["control_port"], "listen")["port"]
    wait_for(lambda: mark(run, "fresh-traced") == "True", 10, "new threads traced after listen")
    time.sleep(1.0)
    assert mark(run, "main-traced") == "False"  # listen's attempt, and the retries so far, missed it
    twin(run, False)
    wait_for(lambda: mark(run, "main-traced") == "True", 10, "tracing in the loop after listen")
    stop_once_at(port, script, TWIN_BREAK_LINE)
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
    stop_once_at(port, script)
    # (a session this short may fall between two polls of the watcher: then the grace period ends it)
    wait_for(lambda: traced(run) == "False", 20, "tracing removed after the second detach")
    run.release()
    assert run.wait(30) == 0, run.stderr
