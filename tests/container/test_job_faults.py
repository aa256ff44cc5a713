"""Job faults on a node: a crashing rank leaves its traceback for attach; a stop (SageMaker's SIGTERM to
PID 1, SIGKILL 120 s later) ends the hook, sshd, every rank and debugpy adapter well within the grace,
also with a rank paused at a breakpoint and with training that ignores SIGTERM."""

from __future__ import annotations

import importlib.util
import os
import signal
import time

import pytest

from remote_debug.container.node.hook import stop_grace
from remote_debug.contract import spec
from tests.helpers.hook_runs import PYTHON, TOKEN_ENV, HookRun, MiniDap, alive, pids_with_env, wait_for

CRASH_SCRIPT = """\
def load(path):
    shard = path.upper()
    raise FileNotFoundError(f"no shard {shard}")  # RAISE
load("part-7")
"""


@pytest.mark.parametrize("ranks", ["all", "5"], ids=["debugged-rank", "rank-not-selected"])
def test_uncaught_exception_leaves_its_traceback_in_the_rank_document(run: HookRun, ranks: str) -> None:
    run.env[spec.ENV_RANKS] = ranks
    script = run.root / "train.py"
    script.write_text(CRASH_SCRIPT)
    run.start(PYTHON, str(script))
    assert run.wait(30) == 1
    doc = run.rank(0)
    assert doc["state"] == "failed" and doc["error"] == "FileNotFoundError: no shard PART-7"
    tb = doc["traceback"]
    assert tb.startswith("Traceback (most recent call last):")
    assert f'"{script}", line 3, in load' in tb and "FileNotFoundError: no shard PART-7" in tb
    assert run.stderr.count("Traceback (most recent call last):") == 1  # Python's own report, once


def _leftovers(run: HookRun) -> list[int]:
    return pids_with_env(f"{TOKEN_ENV}={run.env[TOKEN_ENV]}\0")


def _stop_and_measure(run: HookRun, timeout: float) -> tuple[int, float]:
    """SIGTERM to the hook (the container's PID 1); (its exit code, seconds until nothing is left)."""
    assert run.proc is not None
    sent = time.monotonic()
    os.kill(run.proc.pid, signal.SIGTERM)
    code = run.wait(timeout)
    wait_for(lambda: not _leftovers(run), 10, "every process of the job to exit")
    return code, time.monotonic() - sent


PAUSED_SCRIPT = """\
import os, pathlib, sys, time
rank = int(os.environ["RANK"])
marks = pathlib.Path(sys.argv[1])
(marks / f"started-{rank}").write_text(str(os.getpid()))
count = 0
while True:
    count += 1  # BREAK
    time.sleep(0.05)
"""


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_stop_with_a_rank_paused_at_a_breakpoint_leaves_nothing_running(run: HookRun) -> None:
    script = run.root / "paused.py"
    script.write_text(PAUSED_SCRIPT)
    run.start_torchrun(script)
    doc = wait_for(lambda: (d := run.rank_if_any(0)) is not None and d["port"] and d, 60, "rank 0's listener")
    wait_for(lambda: (run.marks / "started-1").exists(), 60, "rank 1")
    sshd_pid = int((run.state_dir / "sshd.pid").read_text())
    dap = MiniDap(doc["port"])
    try:
        dap.initialize()
        attach = dap.send("attach", justMyCode=False)
        dap.event("initialized")
        line = PAUSED_SCRIPT.splitlines().index("    count += 1  # BREAK") + 1
        dap.response_to(dap.send("setBreakpoints", source={"path": str(script)}, breakpoints=[{"line": line}]))
        dap.response_to(dap.send("configurationDone"))
        dap.response_to(attach)
        assert dap.event("stopped")["body"]["reason"] == "breakpoint"
        assert len(_leftovers(run)) >= 4  # hook, torchrun, 2 ranks
        code, took = _stop_and_measure(run, 60)
    finally:
        dap.close()
    print(f"stop with a rank paused at a breakpoint: everything gone {took:.2f} s after SIGTERM")
    assert took < 30, took  # SageMaker's grace is 120 s
    assert code != 0
    assert not alive(sshd_pid)
    assert run.node()["state"] == "stopped"


IGNORING_SCRIPT = """\
import os, pathlib, signal, subprocess, sys, time
marks = pathlib.Path(sys.argv[1])
signal.signal(signal.SIGTERM, signal.SIG_IGN)
# a helper that left the process tree and ignores SIGTERM too (a daemonized data server, say)
helper = subprocess.Popen(
    [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"],
    start_new_session=True,
)
(marks / "started").write_text(str(helper.pid))
while True:
    time.sleep(0.05)
"""


def test_stop_escalates_when_training_ignores_sigterm(run: HookRun) -> None:
    run.env[spec.ENV_STOP_GRACE] = "2"
    script = run.root / "stubborn.py"
    script.write_text(IGNORING_SCRIPT)
    run.start(PYTHON, str(script), str(run.marks))
    started = run.marks / "started"
    helper = int(wait_for(lambda: started.read_text() if started.exists() else None, 30, "the script to start"))
    code, took = _stop_and_measure(run, 20)
    print(f"stop of a job that ignores SIGTERM (grace 2 s): everything gone {took:.2f} s after SIGTERM")
    assert code == 128 + signal.SIGKILL  # as a shell reports a SIGKILLed command
    assert 2 <= took < 10, took
    assert not alive(helper)
    assert "did not stop within 2 s" in run.stderr
    assert run.node()["state"] == "stopped"


def test_leftover_processes_are_stopped_when_the_command_ends(run: HookRun) -> None:
    script = run.root / "leaves.py"
    script.write_text(
        "import subprocess, sys\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], start_new_session=True)\n"
        "open(sys.argv[1] + '/started', 'w').write(str(p.pid))\n"
    )
    run.start(PYTHON, str(script), str(run.marks))
    assert run.wait(30) == 0
    helper = int((run.marks / "started").read_text())
    assert not alive(helper)
    assert not _leftovers(run)
    assert run.node()["state"] == "completed"


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [("", 100.0), ("5", 5.0), ("0", 0.0), ("soon", 100.0), ("-3", 100.0), ("nan", 100.0), ("1e9", 100.0)],
)
def test_stop_grace_from_the_environment(raw: str, seconds: float) -> None:
    assert stop_grace({spec.ENV_STOP_GRACE: raw}) == seconds  # a bad value never disables the escalation
