"""The wait window: a rank waits up to N s for a debugger, then runs on; an attach ends it early."""

from __future__ import annotations

import importlib.util
import json
import time
from typing import Any

import pytest

from remote_debug.contract import spec
from tests.helpers.hook_runs import PYTHON, HookRun, MiniDap, control_request, wait_for

# The script reports the state its own rank document had when the script body started.
SCRIPT = """\
import json, os, pathlib, sys, time
manifest = pathlib.Path(os.environ["REMOTE_DEBUG_MANIFEST_DIR"], "rank-0.json")
state = json.loads(manifest.read_text())["state"]
pathlib.Path(sys.argv[1], "state-at-start").write_text(state)
pathlib.Path(sys.argv[1], "started-at").write_text(repr(time.monotonic()))
"""


def test_no_client_runs_on_after_the_window(run: HookRun) -> None:
    run.env[spec.ENV_WAIT] = "2"
    script = run.root / "train.py"
    script.write_text(SCRIPT)
    run.start(PYTHON, str(script), str(run.marks))
    assert run.wait(60) == 0, run.stderr
    started = float((run.marks / "started-at").read_text())
    assert started - run.started_at >= 2.0  # monotonic clocks are system-wide on Linux
    assert (run.marks / "state-at-start").read_text() == "running"
    assert "no debugger attached to rank 0 within 2 s; running on" in run.stderr
    assert run.rank(0)["state"] == "finished"


def test_attach_ends_the_window_early(run: HookRun) -> None:
    run.env[spec.ENV_WAIT] = "60"
    script = run.root / "train.py"
    script.write_text(SCRIPT)
    run.start(PYTHON, str(script), str(run.marks))
    rank = wait_for(lambda: run.rank_if_any(0), 30, "the rank document")
    assert rank["state"] == "waiting"
    dap = MiniDap(rank["port"])
    try:
        attached_at = time.monotonic()
        response = dap.attach()
        assert response["success"], response
        # wait_for_client() returns after configurationDone: the script body runs only now.
        wait_for(lambda: (run.marks / "state-at-start").exists(), 20, "the script to run on")
        assert (run.marks / "state-at-start").read_text() == "attached"
        assert float((run.marks / "started-at").read_text()) >= attached_at
        dap.send("disconnect", terminateDebuggee=False)
        assert run.wait(30) == 0, run.stderr
    finally:
        dap.close()
    assert time.monotonic() - run.started_at < 40  # far less than the 60 s window
    assert "no debugger attached" not in run.stderr
    assert json.loads((run.manifest_dir / "rank-0.json").read_text())["state"] == "finished"


# Each torchrun rank records when its script body started (after its wait window); no collectives, so a
# rank's start does not depend on the other's.
RANK_SCRIPT = """\
import os, pathlib, sys, time
pathlib.Path(sys.argv[1], f"started-{os.environ['RANK']}").write_text(repr(time.monotonic()))
"""


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_run_on_ends_the_window_of_a_rank_attach_did_not_select(run: HookRun) -> None:
    """``attach --ranks 0``: the other ranks are told "run-on" and leave their window at once."""
    run.env[spec.ENV_WAIT] = "60"
    script = run.root / "job.py"
    script.write_text(RANK_SCRIPT)
    run.start_torchrun(script)

    def both_waiting() -> list[dict[str, Any]] | None:
        docs = [run.rank_if_any(r) for r in (0, 1)]
        return [d for d in docs if d] if all(d and d["state"] == "waiting" for d in docs) else None

    ranks = wait_for(both_waiting, 60, "both ranks in their wait window")
    told_at = time.monotonic()
    assert control_request(ranks[1]["control_port"], "run-on") == {"ok": True, "detail": "leaving the wait window"}
    wait_for(lambda: (run.marks / "started-1").exists(), 20, "rank 1 to run on")
    assert float((run.marks / "started-1").read_text()) - told_at < 10
    assert run.rank(1)["state"] in ("running", "finished")
    assert "rank 1: attach selected other ranks; leaving the wait window after" in run.stderr
    # rank 0, the selected one, still waits for its debugger
    assert run.rank(0)["state"] == "waiting" and not (run.marks / "started-0").exists()

    dap = MiniDap(ranks[0]["port"])
    try:
        assert dap.attach()["success"]
        wait_for(lambda: (run.marks / "started-0").exists(), 20, "rank 0 to run on once attached")
        dap.send("disconnect", terminateDebuggee=False)
        assert run.wait(60) == 0, run.stderr
    finally:
        dap.close()
    assert time.monotonic() - run.started_at < 50  # nobody sat out the 60 s window
