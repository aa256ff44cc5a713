"""``stop`` of a job whose supervisor died must not signal whatever process got its pid (issue 29, item 6).

A local job stores its supervisor's pid, and ``stop`` sends SIGTERM to it.  Pids are reused: once the
supervisor died (killed, OOM), the number may belong to any process, another user's included when we
are root.  The stored record is now the pid *and* the process's start time (``/proc/PID/stat`` field 22).

The reuse is played for real, except for the wait for the kernel to hand out the same number: a
"supervisor" is started, recorded and killed, then the stored pid is edited to a live process we started
(the "stranger"), keeping the dead one's start time - exactly what a reused pid looks like to ``stop``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from remote_debug.laptop.core.paths import StatePaths
from remote_debug.laptop.machine.job_dir import (
    SUPERVISOR_PID,
    SUPERVISOR_START,
    record_supervisor,
    supervisor_process,
)
from remote_debug.laptop.platforms import MachineBackend
from remote_debug.oskit import osutil

JOB = "reused"


def run_cli(*args: str) -> tuple[int, str, str]:
    """``remote-debug ARGS`` as the user runs it (this process's environment: HOME, REMOTE_DEBUG_HOME)."""
    proc = subprocess.run(
        [sys.executable, "-m", "remote_debug", *args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=180,
    )
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture
def stranger() -> Iterator[subprocess.Popen[bytes]]:
    """Another process, started after the supervisor died (as a reuse of its pid would be: a pid comes
    back only after the counter wrapped, ticks later; here 50 ms, so the start times differ)."""
    time.sleep(0.05)
    proc = subprocess.Popen(["sleep", "300"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def dead_supervisor(home: Path) -> osutil.ProcessRecord:
    """A local job's supervisor, started, recorded (pid and start time) and killed."""
    del home
    supervisor = subprocess.Popen(["sleep", "300"])
    record = osutil.ProcessRecord.of(supervisor.pid)
    supervisor.kill()
    supervisor.wait()
    return record


def dead_supervisor_job(paths: StatePaths, dead: osutil.ProcessRecord, stranger_pid: int) -> Path:
    """A running local job whose supervisor ``dead`` was recorded, then died; its pid is now ``stranger_pid``'s."""
    job_dir = paths.job_dir(JOB)
    job_dir.mkdir(parents=True)
    # created just now: describe() trusts the pid file for 5 s, so stop() itself decides what to signal
    state = {
        "name": JOB,
        "backend": "local",
        "status": "InProgress",
        "secondary_status": "Training",
        "nodes": [],
        "nproc_per_node": 1,
        "created": time.time(),
        "netns": [],
    }
    (job_dir / "job.json").write_text(json.dumps(state))
    (job_dir / SUPERVISOR_START).write_text(f"{dead.start}\n")  # as record_supervisor wrote it
    (job_dir / SUPERVISOR_PID).write_text(f"{stranger_pid}\n")  # the pid, reused by another process
    return job_dir


def test_stop_does_not_signal_a_process_that_reused_the_supervisors_pid(
    dead_supervisor: osutil.ProcessRecord, stranger: subprocess.Popen[bytes]
) -> None:
    assert dead_supervisor.start is not None
    paths = StatePaths.default()
    job_dir = dead_supervisor_job(paths, dead_supervisor, stranger.pid)
    code, out, err = run_cli("stop", JOB)
    assert code == 0, (out, err)
    time.sleep(0.2)
    assert stranger.poll() is None, "stop signalled the process that reused the dead supervisor's pid"
    assert json.loads((job_dir / "job.json").read_text())["status"] == "Stopped"  # recorded, as for a dead one
    assert not MachineBackend(paths).describe(JOB).running


def test_a_record_names_one_process(stranger: subprocess.Popen[bytes], tmp_path: Path) -> None:
    """The record of a live process matches it (and can signal it); the same pid with another start
    time matches nothing, and signals nothing."""
    record_supervisor(tmp_path, stranger.pid)
    record = supervisor_process(tmp_path)
    assert record is not None and record.alive() and record.start == osutil.process_start_ticks(stranger.pid)
    assert record.start is not None
    impostor = osutil.ProcessRecord(stranger.pid, record.start - 1)
    assert not impostor.alive() and not impostor.signal(15)
    assert stranger.poll() is None
    assert record.signal(15)
    assert stranger.wait(timeout=10) == -15


def test_an_adopted_jobs_supervisor_neither_watches_nor_stops_a_reused_root_pid(
    dead_supervisor: osutil.ProcessRecord, stranger: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    """An adopted job's supervisor watches the adopted root process and SIGTERMs it on ``stop``.  The root
    ended and its pid now belongs to the stranger: the job is over (not kept "running" by the stranger),
    and a ``stop`` signals nobody.  (``dead_supervisor`` plays the dead root: a process recorded, then gone.)"""
    job_dir = tmp_path / "adopted-job"
    job_dir.mkdir()
    state = {
        "name": "adopted-job",
        "backend": "local",
        "status": "InProgress",
        "secondary_status": "Training",
        "nodes": ["algo-1"],
        "node_plans": {},
        "stop_grace_seconds": 1,
        "adopted": {"roots": {"algo-1": stranger.pid}, "root_starts": {"algo-1": dead_supervisor.start}},
    }
    (job_dir / "job.json").write_text(json.dumps(state))
    supervisor = subprocess.Popen(
        [sys.executable, "-m", "remote_debug.laptop.machine.adopted_supervisor", str(job_dir)]
    )
    try:
        try:
            supervisor.wait(timeout=15)
        except subprocess.TimeoutExpired:  # still "watching" the stranger: stop the job, as `stop` does
            supervisor.terminate()
            supervisor.wait(timeout=15)
            time.sleep(0.2)
            assert stranger.poll() is None, "stop signalled the process that reused the adopted root's pid"
            raise AssertionError("the supervisor took the stranger for the adopted root: the job never ended") from None
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
            supervisor.wait()
    assert stranger.poll() is None
    assert json.loads((job_dir / "job.json").read_text())["status"] == "Completed"
