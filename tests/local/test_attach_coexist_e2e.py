"""Attaches side by side on one live job, through the real CLI (`remote-debug attach` subprocesses,
a real 2-rank torchrun job, real debugpy ranks):

* a headless attach next to a VS Code attach stops both ranks through its own forwards, returns once
  its stops are done (the job runs on), and leaves launch.json and the VS Code attach's ports alone;
* a headless attach to a rank someone is debugging says so for that rank instead of hanging;
* a second VS Code attach is refused in one line naming the first;
* Ctrl-C detaches in one line and the job keeps running;
* ``--ranks 0`` names its compound "rank 0"; the job's end is no "tunnel down" fault.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from remote_debug.contract.spec import LOOPBACK
from remote_debug.laptop.ide.dap_client import attach_and_configure
from tests.helpers.ddp_job import break_line, marked_project
from tests.helpers.hook_runs import wait_for
from tests.helpers.jobs import LocalJob, launch_job

JOB = "coexist"
# Both ranks pass the marked line about 20 times a second until the test drops "done".
SCRIPT = textwrap.dedent(
    """
    import os, pathlib, time
    marks = pathlib.Path({marks!r})
    rank = int(os.environ["RANK"])
    i = 0
    deadline = time.monotonic() + 240
    while not (marks / "done").exists() and time.monotonic() < deadline:
        i += 1
        reached = rank + i  # BREAK-HERE
        time.sleep(0.05)
    """
)


class AttachProcess:
    """``remote-debug attach`` in its own process group (a terminal's foreground job: Ctrl-C reaches
    it and the ssh ProxyCommands it started); its stderr lines collected as they come."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "remote_debug", "attach", JOB, "--no-ssh-include", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(os.environ),
            start_new_session=True,
        )
        self.err: list[str] = []
        self.out: list[str] = []
        self._readers = [self._read(self.proc.stderr, self.err), self._read(self.proc.stdout, self.out)]

    @staticmethod
    def _read(stream: Any, into: list[str]) -> threading.Thread:
        thread = threading.Thread(target=lambda: into.extend(iter(stream.readline, "")), daemon=True)
        thread.start()
        return thread

    def wait_line(self, predicate: Callable[[str], bool], timeout: float, what: str) -> str:
        def seen() -> str | None:
            if self.proc.poll() is not None and not any(predicate(line) for line in self.err):
                raise AssertionError(f"attach exited ({self.proc.returncode}) before {what}: {''.join(self.err)}")
            return next((line for line in self.err if predicate(line)), None)

        return wait_for(seen, timeout, what)

    def wait(self, timeout: float) -> int:
        code = self.proc.wait(timeout)
        for reader in self._readers:
            reader.join(5)
        return code

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


@pytest.fixture
def attaches() -> Iterator[list[AttachProcess]]:
    started: list[AttachProcess] = []
    try:
        yield started
    finally:
        for attach in started:
            attach.stop()


def run_attach(*args: str, timeout: float) -> tuple[subprocess.CompletedProcess[str], float]:
    """``remote-debug attach`` to its end; what it printed, and how long it took."""
    started = time.monotonic()
    argv = [sys.executable, "-m", "remote_debug", "attach", JOB, "--no-ssh-include", *args]
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ), start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"{' '.join(args)} still ran after {timeout} s: {out}{err}") from None
    return subprocess.CompletedProcess(argv, proc.returncode, out, err), time.monotonic() - started


def events_of(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def launch_config(project: Path) -> tuple[bytes, dict[int, tuple[int, str]], list[str]]:
    """launch.json's bytes, each rank's (port, remoteRoot) and the compounds' names."""
    raw = (project / ".vscode" / "launch.json").read_bytes()
    data = json.loads("\n".join(line for line in raw.decode().splitlines() if not line.strip().startswith("//")))
    ranks = {}
    for config in data["configurations"]:
        rank = int(config["name"].split(" rank ")[1].split()[0])
        ranks[rank] = (config["connect"]["port"], config["pathMappings"][0]["remoteRoot"])
    return raw, ranks, [c["name"] for c in data["compounds"]]


def stop_through(port: int, project: Path, code_dir: str, line: int) -> Any:
    """What VS Code does on F5 with the rank's configuration: attach, a breakpoint, stopped there."""
    client = attach_and_configure(
        LOOPBACK,
        port,
        path_mappings=[(str(project), code_dir)],
        breakpoints={str(project / "train.py"): [line]},
        timeout=30,
    )
    stopped = client.wait_stopped(30)
    assert client.stack_trace(int(stopped["threadId"]), levels=1)[0]["line"] == line
    return client


def test_attaches_side_by_side_on_one_live_job(home: Path, tmp_path: Path, attaches: list[AttachProcess]) -> None:
    project, marks = marked_project(tmp_path, SCRIPT)
    line = break_line(project / "train.py")
    job: LocalJob = launch_job(JOB, project, nproc_per_node=2)
    workspace = ["--workspace", str(project)]

    # 1. the VS Code attach: launch.json, one forward per rank
    ide = AttachProcess(*workspace)
    attaches.append(ide)
    ide.wait_line(lambda s: "ready: ranks [0, 1]" in s, 90, "the VS Code attach to be ready")
    launch_bytes, ports, compounds = launch_config(project)
    assert sorted(ports) == [0, 1] and compounds == [f"remote-debug: {JOB} all ranks"]

    # 2. a headless attach next to it stops both ranks, returns (the job runs on), touches no launch.json
    headless, took = run_attach(
        *workspace, "--headless", "--break", f"train.py:{line}", "--steps", "1", "--json", timeout=90
    )
    assert headless.returncode == 0, headless.stderr
    events = events_of(headless.stdout)
    stops = [(e["rank"], e["line"]) for e in events if e["event"] == "stopped"]
    assert sorted(stops) == [(0, line), (0, line + 1), (1, line), (1, line + 1)], events
    assert [e for e in events if e["event"] == "detached"] == [
        {
            "event": "detached",
            "v": 1,
            "job": JOB,
            "reason": "stops-done",
            "status": "InProgress",
            "text": f"detached (every rank had its stops): job {JOB} keeps running",  # the one wording
        }
    ]
    assert not [e for e in events if e["event"] in ("launch-json", "job-ended")]
    assert {e["local_port"] for e in events if e["event"] == "rank-ready"}.isdisjoint(p for p, _ in ports.values())
    assert (project / ".vscode" / "launch.json").read_bytes() == launch_bytes
    assert job.status() == "InProgress"

    # 3. the VS Code attach's forwards still work: F5 on rank 0 stops there...
    client = stop_through(ports[0][0], project, ports[0][1], line)
    try:
        # ...and a headless attach meanwhile says rank 0 has a debugger, stops rank 1, and returns
        busy, busy_took = run_attach(*workspace, "--headless", "--break", f"train.py:{line}", timeout=60)
        assert busy.returncode == 1, busy.stderr
        assert any("rank 0 detached: it already has a debugger attached" in s for s in busy.stderr.splitlines())
        assert "rank 1 stopped at" in busy.stderr
        assert busy_took < 30, busy_took
    finally:
        client.disconnect()
    stop_through(ports[1][0], project, ports[1][1], line).disconnect()

    # 4. a second VS Code attach is refused, in one line naming the first
    second, _ = run_attach(*workspace, "--json", timeout=60)
    assert second.returncode == 2, second.stdout + second.stderr
    assert second.stdout == ""
    [refusal] = second.stderr.splitlines()
    assert refusal.startswith(
        f"remote-debug: error: job {JOB} is already attached by remote-debug attach for VS Code "
        f"(pid {ide.proc.pid}, since "
    ), refusal
    assert (project / ".vscode" / "launch.json").read_bytes() == launch_bytes

    # 5. Ctrl-C on the VS Code attach while VS Code debugs rank 0 through it: one line, the job runs on
    client = stop_through(ports[0][0], project, ports[0][1], line)
    before = len(ide.err)
    os.killpg(ide.proc.pid, signal.SIGINT)
    assert ide.wait(30) == 130
    assert ide.err[before:] == [f"remote-debug: detached (Ctrl-C): job {JOB} keeps running\n"], ide.err
    assert ide.out == []
    wait_for(lambda: client.closed, 10, "VS Code's session to end with the attach")
    client.close()
    assert job.status() == "InProgress"

    # 6. the lock went with it: a new attach, of rank 0 only, names its compound for what it holds...
    rank0 = AttachProcess(*workspace, "--ranks", "0")
    attaches.append(rank0)
    rank0.wait_line(lambda s: "ready: ranks [0]" in s, 90, "the rank-0 attach to be ready")
    assert launch_config(project)[2] == [f"remote-debug: {JOB} rank 0"]
    # ...and the job ending under it is no tunnel fault, also when the platform reports the end late
    # (SageMaker: seconds to minutes after the node's sshd went): the supervisor is held meanwhile
    supervisor = int((job.paths.job_dir(JOB) / "supervisor.pid").read_text())
    node = job.paths.job_dir(JOB) / "nodes" / "algo-1" / "remote-debug" / "manifest" / "node.json"
    os.kill(supervisor, signal.SIGSTOP)
    try:
        (marks / "done").write_text("")
        wait_for(lambda: json.loads(node.read_text())["state"] == "completed", 60, "the node to end")
        time.sleep(4.0)  # reconnect attempts 0.5, 1, 2 s apart
        assert job.status() == "InProgress" and rank0.proc.poll() is None
    finally:
        os.kill(supervisor, signal.SIGCONT)
    assert rank0.wait(60) == 0, rank0.err
    assert rank0.err[-1].startswith("remote-debug: job ended: Completed"), rank0.err
    assert not [s for s in rank0.err if "down, retrying" in s], rank0.err
    print(f"\nheadless next to VS Code returned in {took:.1f} s; next to a debugged rank in {busy_took:.1f} s")
