"""The wait window: a rank waits up to N s for a debugger, then runs on; an attach ends it early."""

from __future__ import annotations

import json
import time

from remote_debug import spec
from tests.container.helpers import PYTHON, HookRun, MiniDap, wait_for

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
