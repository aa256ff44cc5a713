"""A rank's pydevd serving DAP itself (``container/rank/dap_server.py``, the default): what debugpy's adapter
promised still holds - one debugger at a time, and a debugger that vanishes lets the rank run on."""

from __future__ import annotations

from pathlib import Path

import pytest

from remote_debug.contract import spec
from tests.helpers.hook_runs import PYTHON, HookRun, MiniDap, probe_and_reset, wait_for

# A rank that runs until told to stop, with a line to break on.
LOOPING_RANK = (
    "import pathlib, sys, time\n"
    "stop = pathlib.Path(sys.argv[1], 'stop')\n"
    "beats = 0\n"
    "while not stop.exists():\n"
    "    beats += 1  # BREAK\n"
    "    time.sleep(0.02)\n"
)
BREAK_LINE = LOOPING_RANK.splitlines().index("    beats += 1  # BREAK") + 1


def _looping_rank(run: HookRun) -> tuple[Path, int]:
    """The rank started, listening at once; its script and debug port."""
    script = run.root / "train.py"
    script.write_text(LOOPING_RANK)
    run.env[spec.ENV_LISTEN] = "eager"
    run.start(PYTHON, str(script), str(run.marks))
    port = wait_for(lambda: (d := run.rank_if_any(0)) is not None and d["port"] and d["port"], 30, "the listener")
    return script, int(port)


def _state(run: HookRun) -> str | None:
    """Rank 0's state; None while its document is being rewritten."""
    document = run.rank_if_any(0)
    return None if document is None else str(document["state"])


def _stopped_at_break(script: Path, port: int) -> tuple[MiniDap, int]:
    """A debugger attached with a breakpoint on BREAK_LINE, the rank stopped there; its stopped thread."""
    dap = MiniDap(port)
    dap.initialize()
    attach = dap.send("attach", justMyCode=False)
    dap.event("initialized")
    dap.response_to(dap.send("setBreakpoints", source={"path": str(script)}, breakpoints=[{"line": BREAK_LINE}]))
    dap.response_to(dap.send("configurationDone"))
    dap.response_to(attach)
    return dap, dap.event("stopped")["body"]["threadId"]


def test_a_rank_serving_dap_takes_one_debugger_at_a_time(run: HookRun) -> None:
    """pydevd serving DAP itself (no adapter process: the default) drops its debugger for any new
    connection.  A second client on the rank's own port (a second IDE over Remote-SSH, past the
    laptop forward's refusal) is answered with a clear refusal instead; a probe does not end the
    session either; the first debugger keeps its stopped rank, and once it detaches the next one gets in."""
    script, port = _looping_rank(run)
    first, thread = _stopped_at_break(script, port)
    second = None
    try:
        second = MiniDap(port)
        refused = second.initialize()
        assert refused["success"] is False
        assert refused["message"] == "rank 0 already has a debugger attached; detach it first"
        with pytest.raises(EOFError):
            second.receive()  # and closed
        probe_and_reset(port, 0.001)

        frame = first.response_to(first.send("stackTrace", threadId=thread))["body"]["stackFrames"][0]
        assert frame["line"] == BREAK_LINE  # the first debugger still has its stopped rank
        first.response_to(first.send("setBreakpoints", source={"path": str(script)}, breakpoints=[]))
        first.response_to(first.send("continue", threadId=thread))
        first.response_to(first.send("disconnect", terminateDebuggee=False))
    finally:
        first.close()
        if second is not None:
            second.close()

    third = MiniDap(port)
    try:
        assert third.attach()["success"]
    finally:
        third.close()
    (run.marks / "stop").write_text("")
    assert run.wait(30) == 0, run.stderr


def test_a_debugger_that_vanishes_at_a_breakpoint_lets_the_rank_run_on(run: HookRun) -> None:
    """The IDE's connection drops without a ``disconnect`` (VS Code killed, the tunnel cut): the rank
    does not stay paused (which would stall its peers at the next collective), its breakpoint is gone,
    its document says nobody is attached, and the next debugger gets in."""
    script, port = _looping_rank(run)
    dap, _thread = _stopped_at_break(script, port)
    wait_for(lambda: _state(run) == "attached", 10, "the rank to say it is attached")
    dap.sock.close()  # gone, without a word

    wait_for(lambda: _state(run) not in (None, "attached"), 10, "the rank to say nobody is attached")
    nxt = MiniDap(port)
    try:
        assert nxt.attach()["success"]
        body = nxt.response_to(nxt.send("threads"))["body"]
        main = [t for t in body["threads"] if t["name"] == "MainThread"]
        assert main, body
        # running (not stopped at the old breakpoint): a pause answers with a fresh "stopped" event
        nxt.response_to(nxt.send("pause", threadId=main[0]["id"]))
        assert nxt.event("stopped")["body"]["reason"] == "pause"
        nxt.response_to(nxt.send("continue", threadId=main[0]["id"]))
        nxt.response_to(nxt.send("disconnect", terminateDebuggee=False))
    finally:
        nxt.close()
    (run.marks / "stop").write_text("")
    assert run.wait(30) == 0, run.stderr
