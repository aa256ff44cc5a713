"""Iterate on a live SageMaker job (issue 15), offline: keep-alive, ``sync``, ``run`` and ``release`` against
``remote-debug emulator`` with AWS's real session-manager-plugin, as ``test_sagemaker_e2e`` drives it.

The unchanged boto3 launcher (``templates/launchers/boto3_request.py --keep-alive --wait``) starts a 2-node x
2-process torchrun job whose entry the hook wraps.  Then, each step as a user runs it (``remote-debug`` as a
subprocess, every connection ``ssh`` -> ``remote-debug proxy`` -> the plugin -> the emulator's SSM channel ->
the node's sshd):

* a headless ``attach --follow`` stops all 4 ranks at the breakpoint with the OLD value, and lets them finish;
* the training command ends, the nodes hold ("kept alive for 300 s" in each node's CloudWatch log), and both
  ``jobs --json`` and DescribeTrainingJob still say InProgress;
* an edit of the workspace + ``sync`` puts the change in every node's code dir; ``run`` starts the entry
  again on every node: every rank stops with the NEW value in the attach that was already running
  (``rank-restarted``, then ``rank-ready`` on the same local port), and ``run``'s output carries node and rank;
* ``release`` ends the job: the attach sees it end, and DescribeTrainingJob says Completed.

The value: the marked line of ``code/train.py`` runs every 10th step; the edit makes it every 10th step plus 7,
so the first stop of a rank has ``step`` 0 before the edit and 7 after.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from remote_debug.emulator.nodes import available
from tests.emulator import test_sagemaker_e2e
from tests.emulator.test_sagemaker_e2e import (
    BUCKET,
    LAUNCHERS,
    PLUGIN,
    REGION,
    ROLE,
    Emulator,
    break_line,
    wait_for_training,
)

# test_sagemaker_e2e's fixture (module scope: this module gets its own emulator, stopped after its test)
emulator = test_sagemaker_e2e.emulator

pytestmark = [
    pytest.mark.skipif(PLUGIN is None, reason="AWS's session-manager-plugin binary is not here (../shared/tools)"),
    pytest.mark.skipif(available() is not None, reason=f"no emulated nodes here: {available()}"),
    pytest.mark.timeout(300),
]

NODES, PER_NODE = 2, 2
RANKS = NODES * PER_NODE
KEEP_ALIVE = 300
OLD_LINE, NEW_LINE = "if step % 10 == 0:", "if step % 10 == 7:"
Event = dict[str, Any]


class AttachProcess:
    """``remote-debug attach JOB --headless --follow --json`` in the background: its events as they come."""

    def __init__(self, emu: Emulator, job: str, workspace: Path, breakpoint_: str) -> None:
        self.stderr_path = emu.tmp / f"attach-{job}.err"
        self._stderr = self.stderr_path.open("w")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "remote_debug",
                "attach",
                job,
                "--headless",
                "--follow",
                "--break",
                breakpoint_,
                "--json",
                "--workspace",
                str(workspace),
                "--no-ssh-include",
                "--timeout",
                "180",
            ],
            env=emu.env,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        self.events: list[Event] = []
        self._lock = threading.Lock()
        self._new: queue.Queue[None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            with self._lock:
                self.events.append(event)
            self._new.put(None)
        self._new.put(None)

    def of(self, kind: str) -> list[Event]:
        with self._lock:
            return [e for e in self.events if e.get("event") == kind]

    def seen(self) -> str:
        """What this attach did so far, for a failure message: its exit code, events (with their rank), stderr."""
        with self._lock:
            events = [f"{e.get('event')}{'' if e.get('rank') is None else ' ' + str(e['rank'])}" for e in self.events]
        return f"attach exit code {self.proc.poll()}; events {events}; stderr {self.stderr_path.read_text()[-2000:]}"

    def wait_for(self, check: Callable[[], Any], timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            found = check()
            if found:
                return found
            left = deadline - time.monotonic()
            if left <= 0 or (self.proc.poll() is not None and self._new.empty() and not self._reader.is_alive()):
                raise AssertionError(f"no {what} within {timeout} s; {self.seen()}")
            try:
                self._new.get(timeout=min(left, 1.0))
            except queue.Empty:
                pass

    def stops_at_step(self, step: str) -> dict[int, Event]:
        return {e["rank"]: e for e in self.of("stopped") if e["variables"].get("step") == step}

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(10)
        self._stderr.close()


def node_logs(emu: Emulator, job: str) -> dict[str, str]:
    """Each node's CloudWatch log (stream ``<job>/algo-<n>-<epoch>``), as the emulator shipped it so far."""
    logs = emu.client("logs")
    streams = logs.describe_log_streams(logGroupName="/aws/sagemaker/TrainingJobs", logStreamNamePrefix=f"{job}/")
    out: dict[str, str] = {}
    for stream in streams["logStreams"]:
        name = stream["logStreamName"]
        node = name.split("/", 1)[1].rsplit("-", 1)[0]
        events = logs.get_log_events(
            logGroupName="/aws/sagemaker/TrainingJobs", logStreamName=name, startFromHead=True
        )["events"]
        out[node] = out.get(node, "") + "".join(e["message"] + "\n" for e in events)
    return out


def wait_until(check: Callable[[], Any], timeout: float, what: str, every: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(every)


def assert_every_rank(stops: dict[int, Event], line: int, step: str) -> None:
    assert sorted(stops) == list(range(RANKS)), sorted(stops)
    for rank, stop in stops.items():
        assert stop["node"] == f"algo-{rank // PER_NODE + 1}", stop
        assert stop["line"] == line, stop
        assert (stop["variables"]["rank"], stop["variables"]["step"]) == (str(rank), step), stop["variables"]


def test_keep_alive_sync_run_release_stop_every_rank_with_the_new_value_in_the_same_attach(emulator: Emulator) -> None:
    emu = emulator
    job = f"rd-e2e-iterate-{time.strftime('%H%M%S')}-{os.getpid()}"  # this run's own /tmp/remote-debug/<job>
    started = time.monotonic()
    launch = subprocess.run(
        [
            sys.executable,
            str(LAUNCHERS / "boto3_request.py"),
            "--role",
            ROLE,
            "--bucket",
            BUCKET,
            "--image",
            f"763104351884.dkr.ecr.{REGION}.amazonaws.com/pytorch-training:2.5-cpu-py311",
            "--nodes",
            str(NODES),
            "--procs-per-node",
            str(PER_NODE),
            "--instance-type",
            "ml.c5.xlarge",
            "--job",
            job,
            "--wait",
            "120",
            "--keep-alive",
            str(KEEP_ALIVE),
        ],
        env=emu.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert launch.returncode == 0, launch.stderr[-3000:]
    assert launch.stderr.count("SageMaker bills that time") == 1, launch.stderr  # enable()'s one billing note
    sm = emu.client("sagemaker")
    assert sm.describe_training_job(TrainingJobName=job)["Environment"]["REMOTE_DEBUG_KEEP_ALIVE"] == str(KEEP_ALIVE)

    workspace = emu.tmp / f"ws-{job}"
    shutil.copytree(LAUNCHERS / "code", workspace)
    train = workspace / "train.py"
    line = break_line(train)
    assert OLD_LINE in train.read_text()
    wait_for_training(emu, job)
    attach = AttachProcess(emu, job, workspace, f"{train}:{line}")
    try:
        # 1. every rank stops with the old value, then runs free (one stop each) to the end of training
        old = attach.wait_for(
            lambda: len(s := attach.stops_at_step("0")) == RANKS and s, 150, "stop of every rank at step 0"
        )
        assert_every_rank(old, line, "0")
        ports = {e["rank"]: e["local_port"] for e in attach.of("rank-ready")}
        assert sorted(ports) == list(range(RANKS)), attach.of("rank-ready")
        print(f"iterate e2e: every rank stopped (old) {time.monotonic() - started:.1f} s after the launch")

        # 2. the training command ends on every node; the nodes hold and the job stays InProgress
        held = f"kept alive for {KEEP_ALIVE} s"
        logs = wait_until(
            lambda: (
                (got := node_logs(emu, job))
                and all(held in got.get(f"algo-{n}", "") for n in range(1, NODES + 1))
                and got
            ),
            90,
            f"'{held}' in every node's log",
        )
        assert all("the command ended (exit code 0)" in logs[f"algo-{n}"] for n in range(1, NODES + 1)), logs
        listed = emu.cli("jobs", "--json")
        assert listed.returncode == 0, listed.stderr[-2000:]
        [info] = [j for j in json.loads(listed.stdout) if j["name"] == job]
        assert info["status"] == "InProgress", info
        assert sm.describe_training_job(TrainingJobName=job)["TrainingJobStatus"] == "InProgress"
        assert attach.proc.poll() is None  # --follow: the attach stays while the job holds
        print(f"iterate e2e: every node kept alive {time.monotonic() - started:.1f} s after the launch")

        # 3. the edit, synced into every node's code dir (what the entry runs: the code channel)
        train.write_text(train.read_text().replace(OLD_LINE, NEW_LINE))
        assert break_line(train) == line  # the breakpoint's line did not move
        synced = emu.cli("sync", job, "--source", str(workspace), "--json", timeout=120)
        assert synced.returncode == 0, synced.stderr[-2000:]
        event = json.loads(synced.stdout.splitlines()[-1])
        assert sorted(n["node"] for n in event["nodes"]) == [f"algo-{n}" for n in range(1, NODES + 1)], event
        assert all(n["files"] >= 1 for n in event["nodes"]), event
        on_node = emu.cli("ssh", job, "--node", f"algo-{NODES}", "--", "grep", "-c", NEW_LINE, "train.py")
        assert on_node.returncode == 0 and on_node.stdout.strip() == "1", (on_node.stdout, on_node.stderr)

        # 4. run: the entry again on every node; the attach that was already there stops every new rank
        try:
            run = emu.cli("run", job, timeout=240)
        except subprocess.TimeoutExpired as exc:  # what did the attach see of run 1's ranks?
            output = (exc.output or b"")[-2000:]
            raise AssertionError(f"run 1 did not end within 240 s; {attach.seen()}; run's output {output!r}") from None
        assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-3000:])
        new = attach.wait_for(
            lambda: len(s := attach.stops_at_step("7")) == RANKS and s, 30, "stop of every rank at step 7"
        )
        assert_every_rank(new, line, "7")
        restarted = attach.of("rank-restarted")
        assert sorted(e["rank"] for e in restarted) == list(range(RANKS)), restarted
        assert all(e["pid"] != e["old_pid"] and e["run"] == 1 for e in restarted), restarted
        ready = attach.of("rank-ready")[RANKS:]  # the new ranks': the IDE's ports did not move
        assert {e["rank"]: e["local_port"] for e in ready} == ports, ready
        for rank in range(RANKS):  # every rank's output, with its node and rank
            node = f"algo-{rank // PER_NODE + 1}"
            assert f"[{node}] [rank {rank}] rank {rank} step 7 loss" in run.stdout, run.stdout[-3000:]
            assert f"rank {rank} step 0 loss" not in run.stdout  # the old code did not run again
        assert "run 1 ended, exit code 0" in run.stderr, run.stderr[-2000:]
        assert sm.describe_training_job(TrainingJobName=job)["TrainingJobStatus"] == "InProgress"
        print(f"iterate e2e: every rank stopped (new) {time.monotonic() - started:.1f} s after the launch")

        # 5. release: the job ends now, Completed (the training command's exit code), and the attach with it
        released = emu.cli("release", job)
        assert released.returncode == 0, released.stderr[-2000:]
        assert f"released job {job}" in released.stdout
        ended = attach.wait_for(lambda: attach.of("job-ended"), 90, "job-ended")
        assert ended[0]["status"] == "Completed", ended
        assert attach.proc.wait(timeout=30) == 0, attach.stderr_path.read_text()[-2000:]
        final = wait_until(
            lambda: (d := sm.describe_training_job(TrainingJobName=job))["TrainingJobStatus"] != "InProgress" and d,
            60,
            "the job's end",
        )
        assert final["TrainingJobStatus"] == "Completed", final.get("FailureReason")
        assert [t["Status"] for t in final["SecondaryStatusTransitions"]][-2:] == ["Uploading", "Completed"]
        logs = node_logs(emu, job)
        assert all(f"node algo-{n}: released" in logs[f"algo-{n}"] for n in range(1, NODES + 1)), logs
        print(f"iterate e2e: released and Completed {time.monotonic() - started:.1f} s after the launch")
    finally:
        attach.close()
        with contextlib.suppress(Exception):  # a failed step must not leave its nodes held
            if sm.describe_training_job(TrainingJobName=job)["TrainingJobStatus"] == "InProgress":
                sm.stop_training_job(TrainingJobName=job)
