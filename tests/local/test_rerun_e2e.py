"""Iterate on a live job (issue 15): keep-alive, ``remote-debug run`` and ``release`` on real local jobs
(torchrun ranks, debugpy, OpenSSH; two nodes in network namespaces when root), with an attach that
follows the re-run:

* the nodes hold after the training command ("kept alive, N s left"), sshd and manifests stay valid;
* an edit + ``run`` starts the entry again: every rank of a 2-node x 2 job stops at the breakpoint with
  the NEW value in the attach that was already running, on the same local ports;
* output streams with node and rank prefixes, the exit code is the run's, the nodes stay;
* ``release`` ends the job with the training command's exit code; Ctrl-C on ``run`` keeps the node;
  a job without keep-alive refuses ``run`` in one line (exit 2); a run replaces a training command
  that still runs.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from remote_debug.laptop.attach.attacher import AttachOptions
from remote_debug.laptop.core.jobinfo import JobStatus
from remote_debug.laptop.ide.editor import Editor
from remote_debug.laptop.ide.headless_session import HeadlessPlan
from remote_debug.laptop.wire import events
from tests.helpers.ddp_job import break_line
from tests.helpers.hook_runs import wait_for
from tests.helpers.jobs import AttachInThread, LocalJob, launch_job

SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    rank = int(os.environ["RANK"])
    VALUE = "old"
    seen = VALUE + str(rank)
    print(f"value {seen}", flush=True)  # BREAK-HERE
    sys.exit(int(os.environ.get("EXIT_CODE", "0")))
    """
)


def cli(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "remote_debug", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ),
    )


def edit_everywhere(job: LocalJob, old: str, new: str) -> None:
    """The user's edit, as `sync` would deliver it: the project and every node's code dir."""
    job_dir = job.paths.job_dir(job.name)
    for path in [job.project / "train.py", *sorted(job_dir.glob("nodes/*/code/train.py"))]:
        path.write_text(path.read_text().replace(old, new))


class BackgroundAttach(AttachInThread):
    """A headless attach that stays (``detach_when_done=False``): it must follow every re-run."""

    def __init__(self, job: LocalJob, line: int, ide: str = "vscode") -> None:
        plan = HeadlessPlan(breakpoints={str(job.project / "train.py"): [line]}, watch=("seen",), attach_timeout=60)
        options = AttachOptions(
            workspace=job.project,
            headless=plan,
            write_launch_json=False,
            edit_user_ssh_config=False,
            ready_timeout=60,
            ide=Editor(ide),
        )
        super().__init__(job, options)

    def stops_with(self, value_prefix: str) -> dict[int, str]:
        return {
            e.rank: e.variables.get("seen", "")
            for e in self.of(events.Stopped)
            if isinstance(e, events.Stopped) and e.variables.get("seen", "").strip("'\"").startswith(value_prefix)
        }


@pytest.fixture
def project(tmp_path: Path) -> Path:
    src = tmp_path / "project"
    src.mkdir()
    (src / "train.py").write_text(SCRIPT)
    return src


@pytest.fixture
def two_node_job(home: Path, project: Path) -> Iterator[LocalJob]:
    del home
    job = launch_job(
        "iterate", project, ["python", "train.py"], nodes=2, nproc_per_node=2, keep_alive=300, wait_seconds=60
    )
    yield job


def test_edit_run_stops_every_rank_with_the_new_value_in_the_same_attach(two_node_job: LocalJob) -> None:
    job = two_node_job
    line = break_line(job.project / "train.py")
    attach = BackgroundAttach(job, line)
    try:
        wait_for(lambda: len(attach.stops_with("old")) == 4 or None, 90, "all 4 ranks stopped with the old value")
        ports = {e.rank: e.local_port for e in attach.of(events.RankReady) if isinstance(e, events.RankReady)}
        # the training command ends (each rank continued after its stop): the nodes hold
        info = wait_for(
            lambda: ((i := job.backend.describe(job.name)).kept_alive_seconds_left is not None and i) or None,
            60,
            "the job kept alive",
        )
        assert info.status == JobStatus.IN_PROGRESS
        assert 250 < (info.kept_alive_seconds_left or 0) <= 300
        assert "kept alive" in info.secondary_status or any("kept alive" in n for n in info.notes)

        edit_everywhere(job, 'VALUE = "old"', 'VALUE = "new"')
        run = cli("run", job.name, timeout=120)
        assert run.returncode == 0, run.stderr
        new = wait_for(
            lambda: ((s := attach.stops_with("new")) and len(s) == 4 and s) or None,
            60,
            "all 4 ranks stopped with the new value",
        )
        assert sorted(new) == [0, 1, 2, 3]
        restarted = [e for e in attach.of(events.RankRestarted) if isinstance(e, events.RankRestarted)]
        assert sorted(e.rank for e in restarted) == [0, 1, 2, 3]
        assert all(e.pid != e.old_pid for e in restarted)
        ready = [e for e in attach.of(events.RankReady) if isinstance(e, events.RankReady)]
        assert {e.rank: e.local_port for e in ready[-4:]} == ports  # the IDE's ports did not move
        # output: node and rank prefixes, every rank's line
        for rank, node in ((0, "algo-1"), (1, "algo-1"), (2, "algo-2"), (3, "algo-2")):
            assert f"[{node}] [rank {rank}] value new{rank}" in run.stdout, run.stdout
        assert "run 1 ended, exit code 0" in run.stderr

        info = wait_for(
            lambda: ((i := job.backend.describe(job.name)).kept_alive_seconds_left is not None and i) or None,
            30,
            "kept alive again after the run",
        )
        assert info.run == 1 and info.status == JobStatus.IN_PROGRESS

        released = cli("release", job.name)
        assert released.returncode == 0, released.stderr
        assert "released job iterate" in released.stdout
        assert job.wait_status(("Completed", "Failed", "Stopped"), 60) == "Completed"
        attach.thread.join(30)
        assert attach.error is None, attach.error
        assert attach.result is not None and attach.result.job.status == JobStatus.COMPLETED
    finally:
        attach.attacher.connection.close()


def test_run_exit_code_and_ctrl_c_keeps_the_node(home: Path, project: Path) -> None:
    del home
    job = launch_job("iterate-1", project, ["python", "train.py"], keep_alive=300)
    wait_for(lambda: job.backend.describe(job.name).kept_alive_seconds_left is not None or None, 60, "kept alive")

    failing = cli("run", job.name, "--", "sh", "-c", "echo from-cmd; exit 7")
    assert failing.returncode == 7, failing.stderr
    assert "[algo-1] from-cmd" in failing.stdout

    # Ctrl-C: the run stops (its process is gone), the node stays
    marker = project / "run.pid"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "remote_debug",
            "run",
            job.name,
            "--",
            "sh",
            "-c",
            f"echo $$ > {marker}; exec sleep 300",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        wait_for(lambda: (marker.exists() and marker.read_text().strip()) or None, 60, "the run started")
        time.sleep(0.3)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert "stopped (Ctrl-C)" in err
    run_pid = int(marker.read_text())
    wait_for(lambda: not os.path.exists(f"/proc/{run_pid}") or None, 20, "the run's process to end")
    info = wait_for(
        lambda: ((i := job.backend.describe(job.name)).kept_alive_seconds_left is not None and i) or None,
        30,
        "kept alive after Ctrl-C",
    )
    assert info.status == JobStatus.IN_PROGRESS

    # stop during the hold: the job ends (Stopped), nothing of the run is left
    stopped = cli("stop", job.name)
    assert stopped.returncode == 0, stopped.stderr
    assert job.wait_status(("Stopped", "Completed", "Failed"), 60) == "Stopped"


def test_run_replaces_a_running_training_command_and_the_job_ends_with_the_run(home: Path, project: Path) -> None:
    del home
    (project / "train.py").write_text("import time\nprint('training', flush=True)\ntime.sleep(300)\n")
    job = launch_job("iterate-2", project, ["python", "train.py"], keep_alive=300)
    wait_for(lambda: "training" in job.logs() or None, 60, "the training command runs")
    run = cli("run", job.name, "--", "sh", "-c", "echo replaced; exit 3")
    assert run.returncode == 3, run.stderr
    assert "[algo-1] [remote-debug] stopping the training command" in run.stdout
    info = wait_for(
        lambda: ((i := job.backend.describe(job.name)).kept_alive_seconds_left is not None and i) or None,
        30,
        "kept alive after the run",
    )
    assert info.status == JobStatus.IN_PROGRESS and info.run == 1
    assert cli("release", job.name).returncode == 0
    # the training command was replaced: the job ends as its last run did
    assert job.wait_status(("Completed", "Failed", "Stopped"), 60) == "Failed"
    assert job.backend.describe(job.name).exit_code == 3


def test_run_and_release_refuse_a_job_without_keep_alive(home: Path, project: Path) -> None:
    del home
    (project / "train.py").write_text("import time\ntime.sleep(300)\n")
    job = launch_job("iterate-3", project, ["python", "train.py"])
    try:
        for args in (("run", job.name), ("release", job.name)):
            done = cli(*args)
            assert done.returncode == 2, done
            lines = done.stderr.strip().splitlines()
            assert len(lines) == 1 and "without --keep-alive" in lines[0], done.stderr
        assert job.status() == "InProgress"  # refused, not stopped
    finally:
        cli("stop", job.name)


@pytest.mark.skipif(importlib.util.find_spec("pydevd_pycharm") is None, reason="pydevd-pycharm is not installed")
def test_pycharm_ranks_of_a_run_connect_to_the_ide_again(home: Path, project: Path) -> None:
    """The same loop with --ide pycharm: the new ranks connect out to the PyCharm stand-in of the attach
    that was already running, and stop with the new value."""
    del home
    job = launch_job(
        "iterate-pyc", project, ["python", "train.py"], nproc_per_node=2, keep_alive=300, wait_seconds=60, ide="pycharm"
    )
    attach = BackgroundAttach(job, break_line(project / "train.py"), ide="pycharm")
    try:
        wait_for(lambda: len(attach.stops_with("old")) == 2 or None, 90, "both ranks stopped with the old value")
        wait_for(lambda: job.backend.describe(job.name).kept_alive_seconds_left is not None or None, 60, "kept alive")
        edit_everywhere(job, 'VALUE = "old"', 'VALUE = "new"')
        run = cli("run", job.name, timeout=120)
        assert run.returncode == 0, run.stderr
        assert sorted(
            wait_for(
                lambda: ((s := attach.stops_with("new")) and len(s) == 2 and s) or None,
                60,
                "both ranks stopped with the new value",
            )
        ) == [0, 1]
        assert cli("release", job.name).returncode == 0
        assert job.wait_status(("Completed", "Failed", "Stopped"), 60) == "Completed"
        attach.thread.join(30)
        assert attach.error is None, attach.error
    finally:
        attach.attacher.connection.close()


def test_the_hold_ends_on_its_own_with_the_training_commands_exit_code(home: Path, project: Path) -> None:
    del home
    train = project / "train.py"
    train.write_text(train.read_text().replace('os.environ.get("EXIT_CODE", "0")', '"4"'))  # the command fails
    job = launch_job("iterate-4", project, ["python", "train.py"], keep_alive=4, wait_seconds=0)
    info = wait_for(
        lambda: ((i := job.backend.describe(job.name)).kept_alive_seconds_left is not None and i) or None,
        60,
        "kept alive after the failed command",
    )
    assert info.status == JobStatus.IN_PROGRESS  # a failed command is held too
    assert job.wait_status(("Completed", "Failed", "Stopped"), 30) == "Failed"
    ended = job.backend.describe(job.name)
    assert ended.exit_code == 4
    assert "keep-alive over" in job.logs()
