"""Job faults end to end (local jobs, real sshd, debugpy, torchrun): a crashing rank is reported by
``attach`` with its traceback, ``--hold-on-failure`` keeps it (and so the job and its other ranks) alive
for a post-mortem, and ``attach`` ends with a clear line and exit code when the job ends.

What "the other ranks stay usable" means: torchrun stops every rank as soon as one fails (it watches
its workers several times a second), so without a hold a crash ends the other ranks' sessions within
that interval - attach then reports each rank's end and the job's.  With a hold, the crashed rank is
still alive, torchrun sees nothing yet, and every other rank can be inspected and stepped until the
held rank is released; that is what the first test checks.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from remote_debug.laptop.attach.attacher import Attacher, AttachOptions, AttachResult
from remote_debug.laptop.ide.dap_client import attach_and_configure, inspect_stop
from remote_debug.laptop.wire import events as ev
from tests.helpers.event_log import as_json
from tests.helpers.hook_runs import kill_all, pids_with_env, wait_for
from tests.helpers.jobs import LocalJob, launch_job

Event = dict[str, Any]

# Rank 0 raises once the test drops "crash"; rank 1 runs into the breakpoint line once it sees "go".
TWO_RANKS = textwrap.dedent(
    """
    import os, pathlib, sys, time
    rank = int(os.environ.get("RANK", "0"))
    marks = pathlib.Path(sys.argv[1])
    def wait(name):
        deadline = time.monotonic() + 90
        while not (marks / name).exists() and time.monotonic() < deadline:
            time.sleep(0.02)
    def compute(n):
        bad_value = n * 6
        wait("crash")
        raise ValueError(f"bad {bad_value}")  # RAISE
    if rank == 0:
        compute(7)
    wait("go")
    value = 10  # BREAK
    value += 1
    print("rank", rank, "done", value, flush=True)
    """
)


def _line(marker: str) -> int:
    return next(i for i, line in enumerate(TWO_RANKS.splitlines(), 1) if f"# {marker}" in line)


def _project(tmp_path: Path) -> tuple[Path, Path]:
    project, marks = tmp_path / "project", tmp_path / "marks"
    project.mkdir()
    marks.mkdir()
    (project / "train.py").write_text(TWO_RANKS)
    return project, marks


class Recorder:
    """attach's events, waited for from the test thread."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._cond = threading.Condition()

    def __call__(self, event: ev.Event | Event) -> None:
        with self._cond:
            self.events.append(as_json(event))
            self._cond.notify_all()

    def wait(self, predicate: Callable[[Event], bool], timeout: float = 60) -> Event:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for event in self.events:
                    if predicate(event):
                        return event
                left = deadline - time.monotonic()
                assert left > 0, f"no such event in {self.events}"
                self._cond.wait(left)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_crashed_rank_is_reported_and_held_while_another_rank_is_stepped(home: Path, tmp_path: Path) -> None:
    project, marks = _project(tmp_path)
    job = launch_job("crash", project, ["python", "train.py", str(marks)], nproc_per_node=2, hold_on_failure=60)
    events = Recorder()
    attacher = Attacher(
        job.backend, job.name, AttachOptions(workspace=project, write_launch_json=False), events, job.paths
    )
    outcome: list[AttachResult] = []
    runner = threading.Thread(target=lambda: outcome.append(attacher.run()), daemon=True)
    runner.start()
    for rank in (0, 1):
        events.wait(lambda e, r=rank: e["event"] == "rank-ready" and e["rank"] == r)  # type: ignore[misc]
    local = {f.rank: f for f in attacher.forwards.values()}
    mapping = [(str(project), local[1].code_dir)]

    rank1 = attach_and_configure(
        "127.0.0.1",
        local[1].local_port,
        path_mappings=mapping,
        breakpoints={str(project / "train.py"): [_line("BREAK")]},
    )
    rank0 = None
    try:
        (marks / "go").write_text("")
        stop = inspect_stop(rank1, timeout=30)
        assert stop.line == _line("BREAK")

        (marks / "crash").write_text("")  # rank 0 dies of ValueError while rank 1 is stopped
        failed = events.wait(lambda e: e["event"] == "rank-failed" and e["rank"] == 0)
        assert failed["held"] is True and failed["error"] == "ValueError: bad 42"
        assert f"line {_line('RAISE')}, in compute" in failed["traceback"]
        assert job.status() == "InProgress"

        # rank 1 is still debuggable after rank 0's crash: step, read the new locals
        rank1.next(stop.thread_id)
        stepped = inspect_stop(rank1, timeout=30)
        assert stepped.line == _line("BREAK") + 1 and stepped.variables["value"] == "10"

        # rank 0, post-mortem: stopped at the exception with the raising frame's locals
        mapping0 = [(str(project), local[0].code_dir)]
        rank0 = attach_and_configure("127.0.0.1", local[0].local_port, path_mappings=mapping0)
        post = inspect_stop(rank0, timeout=30)
        assert post.reason == "exception" and post.function == "compute" and post.line == _line("RAISE")
        assert post.variables["bad_value"] == "42" and post.variables["n"] == "7"

        rank1.continue_(stepped.thread_id)
        rank0.continue_(post.thread_id)  # released: rank 0 exits with its failure, torchrun fails the job
        runner.join(60)
    finally:
        for client in (rank0, rank1):
            if client is not None:
                client.close()
    assert outcome, events.events
    result = outcome[0]
    assert result.job.status == "Failed" and result.exit_code == 1
    assert "rank 1 done 11" in job.logs()
    assert job.logs().count("ValueError: bad 42") >= 1
    ended = events.wait(lambda e: e["event"] == "job-ended")
    assert ended["status"] == "Failed"
    assert [e["rank"] for e in events.events if e["event"] == "rank-failed"] == [0]  # reported once


# --- through the CLI, as a user (or the VS Code extension) runs it --------------------------------

ONE_RANK = textwrap.dedent(
    """
    import pathlib, sys, time
    marks = pathlib.Path(sys.argv[1])
    deadline = time.monotonic() + 90
    while not (marks / "end").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    how = (marks / "end").read_text()
    def compute(n):
        bad_value = n * 6
        raise ValueError(f"bad {bad_value}")
    if how == "crash":
        compute(7)
    """
)


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "remote_debug", *args]


def _attach_cli(job: LocalJob, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        _cli("attach", job.name, "--workspace", str(job.project), "--no-ssh-include", *extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )


def _one_rank_job(tmp_path: Path, name: str, **request: Any) -> tuple[LocalJob, Path]:
    project, marks = tmp_path / "project", tmp_path / "marks"
    project.mkdir()
    marks.mkdir()
    (project / "train.py").write_text(ONE_RANK)
    return launch_job(name, project, ["python", "train.py", str(marks)], **request), marks


def _ready_then(proc: subprocess.Popen[str], action: Callable[[], None]) -> tuple[int, str]:
    """Wait for attach's "ready" line, run ``action``, then for attach to exit; (code, stderr)."""
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if "ready: ranks" in line:
            break
    else:
        raise AssertionError("attach ended before it was ready: " + "".join(seen))
    action()
    try:
        _out, rest = proc.communicate(timeout=60)
    finally:
        proc.kill()
    return proc.returncode, "".join(seen) + rest


@pytest.mark.parametrize(
    ("how", "code", "status"), [("complete", 0, "Completed"), ("crash", 1, "Failed"), ("stop", 1, "Stopped")]
)
def test_cli_attach_ends_with_the_job(home: Path, tmp_path: Path, how: str, code: int, status: str) -> None:
    job, marks = _one_rank_job(tmp_path, f"ends-{how}")

    def end() -> None:
        if how == "stop":  # StopTrainingJob: the job's processes get SIGTERM
            subprocess.run(_cli("stop", job.name), check=True, capture_output=True, timeout=60)
        else:
            (marks / "end").write_text(how)

    rc, stderr = _ready_then(_attach_cli(job), end)
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert rc == code, stderr
    assert lines[-1].startswith(f"remote-debug: job ended: {status}, exit code "), stderr
    if how == "crash":
        # the crash, with the traceback, before the end
        at = next(i for i, line in enumerate(lines) if "rank 0 on algo-1 failed: ValueError: bad 42" in line)
        assert lines[at + 1].strip() == "Traceback (most recent call last):"
        assert any("line 10, in compute" in line for line in lines[at:]), stderr
        assert lines[-1].endswith("exit code 1 (node algo-1 exited with code 1: ValueError: bad 42)"), lines[-1]
    else:
        assert "failed:" not in stderr


def test_cli_headless_attach_to_a_held_rank_sees_the_exception(home: Path, tmp_path: Path) -> None:
    job, marks = _one_rank_job(tmp_path, "held", hold_on_failure=60)
    (marks / "end").write_text("crash")
    manifest_dir = job.paths.job_dir(job.name) / "nodes" / "algo-1" / "remote-debug" / "manifest"
    wait_for(
        lambda: (d := manifest_dir / "rank-0.json").exists() and json.loads(d.read_text())["state"] == "held",
        30,
        "the rank to be held",
    )
    assert job.status() == "InProgress"  # the job lives on while held
    started = time.monotonic()
    proc = subprocess.run(
        _cli("attach", job.name, "--workspace", str(job.project), "--no-ssh-include", "--headless", "--json"),
        capture_output=True,
        text=True,
        timeout=90,
        env=dict(os.environ),
    )
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert time.monotonic() - started < 30  # released by the debugger, not by the end of the 60 s hold
    [failed] = [e for e in events if e["event"] == "rank-failed"]
    assert failed["held"] is True and "ValueError: bad 42" in failed["traceback"]
    [stopped] = [e for e in events if e["event"] == "stopped"]
    assert stopped["reason"] == "exception" and stopped["function"] == "compute"
    assert stopped["variables"]["bad_value"] == "42"
    ended = next(e for e in events if e["event"] == "job-ended")
    assert ended["status"] == "Failed" and ended["exit_code"] == 1
    assert "ValueError: bad 42" in ended["failure_reason"]
    assert job.logs().count("Traceback (most recent call last):") == 1


IGNORES_SIGTERM = textwrap.dedent(
    """
    import pathlib, signal, subprocess, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # a helper that left the process tree and ignores SIGTERM too (a daemonized data server, say)
    subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                      "time.sleep(600)"], start_new_session=True)
    (pathlib.Path(sys.argv[1]) / "started").write_text("")
    while True:
        time.sleep(0.05)
    """
)


def test_stop_of_a_job_that_ignores_sigterm_ends_within_the_grace(home: Path, tmp_path: Path) -> None:
    """StopTrainingJob's shape (SIGTERM, SIGKILL after the grace; 12 s here instead of 120 s): the hook
    escalates at 5/6 of it (10 s), so it still stops sshd and records the end before the supervisor's
    SIGKILL (2 s of margin on a loaded machine), and nothing is left running."""
    project, marks = tmp_path / "project", tmp_path / "marks"
    project.mkdir()
    marks.mkdir()
    (project / "train.py").write_text(IGNORES_SIGTERM)
    job = launch_job("stubborn", project, ["python", "train.py", str(marks)], stop_grace_seconds=12)
    wait_for(lambda: (marks / "started").exists(), 30, "the job to start")
    manifest_dir = job.paths.job_dir(job.name) / "nodes" / "algo-1" / "remote-debug" / "manifest"
    token = f"REMOTE_DEBUG_MANIFEST_DIR={manifest_dir}\0"
    try:
        assert len(pids_with_env(token)) >= 3  # hook, sshd, training, its helper
        started = time.monotonic()
        info = job.backend.stop(job.name, wait_seconds=30)
        wait_for(lambda: not pids_with_env(token), 20, "every process of the job to exit")
        took = time.monotonic() - started
    finally:  # the helper ignores SIGTERM in a session of its own: the home fixture would not find it
        kill_all(token)
    print(f"local stop of a job ignoring SIGTERM (grace 12 s): everything gone {took:.2f} s after stop")
    assert info.status == "Stopped"
    assert took < 12 + 5, took
    node = json.loads((manifest_dir / "node.json").read_text())
    assert node["state"] == "stopped"  # the hook ended on its own terms, before the supervisor's SIGKILL
    assert "did not stop within 10 s" in job.logs()


def test_cli_refuses_a_bad_hold_on_failure(home: Path, tmp_path: Path) -> None:
    for bad in ("-1", "nan", "1e9", "inf"):
        proc = subprocess.run(
            _cli(
                "launch",
                "--local",
                "--name",
                "bad-hold",
                "--source-dir",
                str(tmp_path),
                "--hold-on-failure",
                bad,
                "--",
                "python",
                "train.py",
            ),
            capture_output=True,
            text=True,
            timeout=60,
            env=dict(os.environ),
        )
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, (bad, proc.stderr)
        assert "hold-on-failure" in lines[0] or "hold on failure" in lines[0], lines[0]
    assert not (home / ".remote-debug" / "jobs" / "bad-hold").exists()
    assert not list((home / ".remote-debug").rglob("bad-hold*"))  # not even a key


@pytest.mark.parametrize("when", ["waiting-for-nodes", "connecting"])
def test_job_ending_while_attach_sets_up_ends_attach_like_the_job(home: Path, tmp_path: Path, when: str) -> None:
    """The job crashes while attach is still starting: attach reports the crash and the end (exit 1), not a
    tunnel error or "nothing to attach to" (exit 2)."""
    job, marks = _one_rank_job(tmp_path, f"early-{when}")
    wait_for(lambda: job.backend.manifests(job.name).get("algo-1"), 30, "the node's manifest")

    class EndsDuringSetup(type(job.backend)):  # type: ignore[misc]
        injected = False

        def manifests(self, name: str) -> Any:
            if not self.injected:  # the fault: the job ends right here
                self.injected = True
                (marks / "end").write_text("crash")
                job.wait_status(("Failed",), 30)
                if when == "waiting-for-nodes":
                    return {"algo-1": None}  # not published yet, as far as this look knows
            return super().manifests(name)

    events = Recorder()
    result = Attacher(
        EndsDuringSetup(job.paths), job.name, AttachOptions(workspace=job.project), events, job.paths
    ).run()
    assert result.job.status == "Failed" and result.exit_code == 1
    failed = events.wait(lambda e: e["event"] == "rank-failed")
    assert "ValueError: bad 42" in failed["traceback"]
    assert events.events[-1]["event"] == "job-ended" and events.events[-1]["status"] == "Failed"
