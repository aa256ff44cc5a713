"""``remote-debug stacks --no-hook``: ranks read with py-spy alone - a plain torchrun job started without
remote-debug (``--pid``), a job of this machine (its rank documents, or its node processes), and the hooked
``stacks`` falling back to py-spy for a rank whose control channel cannot answer.  The real CLI, real py-spy."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from remote_debug.laptop.core.paths import StatePaths
from tests.helpers.ddp_job import marked_project
from tests.helpers.jobs import launch_job
from tests.helpers.second_user import needs_second_user, nobody, python_as_nobody

needs_pyspy = pytest.mark.skipif(
    not Path(sys.executable).with_name("py-spy").exists() and shutil.which("py-spy") is None,
    reason="py-spy is not installed (pip install py-spy)",
)
pytestmark = needs_pyspy
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
CLI = [sys.executable, "-m", "remote_debug"]

# rank 1 waits in a function of its own until released; rank 0 is already inside all_reduce, waiting for it
DDP_SCRIPT = textwrap.dedent(
    """
    import pathlib, sys, time
    import torch
    import torch.distributed as dist

    marks = pathlib.Path(sys.argv[1])

    def hold_rank_one():
        deadline = time.monotonic() + 120
        while not (marks / "release").exists() and time.monotonic() < deadline:
            time.sleep(0.05)  # HOLD-LINE

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    (marks / f"ready-{rank}").write_text("")
    if rank == 1:
        hold_rank_one()
    total = torch.tensor([rank + 1.0])
    dist.all_reduce(total)  # REDUCE-LINE
    dist.destroy_process_group()
    """
)

SLEEPER = textwrap.dedent(
    """
    import pathlib, sys, time

    def sleepy_function():
        time.sleep(300)  # SLEEP-LINE

    pathlib.Path(sys.argv[1]).write_text("")
    sleepy_function()
    """
)


def line_of(text: str, mark: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if mark in line)


def cli(
    *args: str, env: dict[str, str] | None = None, prefix: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*prefix, *CLI, *args],
        capture_output=True,
        text=True,
        timeout=180,
        env=env or dict(os.environ),
        cwd=Path(__file__).resolve().parents[2],
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(paths: list[Path], proc: subprocess.Popen[bytes] | None = None, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not all(p.exists() for p in paths):
        assert proc is None or proc.poll() is None, f"exited with {proc and proc.returncode}"
        assert time.monotonic() < deadline, f"not there: {[str(p) for p in paths if not p.exists()]}"
        time.sleep(0.1)


def main_thread(rank: dict[str, Any]) -> dict[str, Any]:
    return next(t for t in rank["threads"] if t["main"])


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes the test starts, each in its own session: their groups are killed by pid at the end."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        yield procs
    finally:
        for proc in procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()


def start(procs: list[subprocess.Popen[bytes]], argv: list[str], cwd: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMOTE_DEBUG_") and k != "PYTHONPATH"}
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=(cwd / "stderr.log").open("wb"),
        start_new_session=True,
    )
    procs.append(proc)
    return proc


def test_pid_of_a_python_process_shows_its_function_and_line(
    home: Path, tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    proc = start(started, [sys.executable, str(script), str(tmp_path / "ready")], tmp_path)
    wait_for([tmp_path / "ready"], proc)
    time.sleep(0.2)

    human = cli("stacks", "--no-hook", "--pid", str(proc.pid), "--flat")
    assert human.returncode == 0, human.stderr
    lines = human.stdout.splitlines()
    assert lines[:2] == [f"rank 0 (pid {proc.pid}, from py-spy)", "  thread MainThread (blocked in native code):"]
    assert f'    File "{script}", line {line_of(SLEEPER, "SLEEP-LINE")}, in sleepy_function' in lines

    # grouped (the default): py-spy's "blocked in native code" marks the class
    grouped = cli("stacks", "--no-hook", "--pid", str(proc.pid))
    assert grouped.returncode == 0, grouped.stderr
    call = SLEEPER.splitlines().index("sleepy_function()") + 1
    assert grouped.stdout.splitlines()[0] == (
        f"rank 0 (1): sleepy_function (sleeper.py:{line_of(SLEEPER, 'SLEEP-LINE')}) ← <module> (sleeper.py:{call})"
        " [blocked in native code]"
    )

    as_json = cli("stacks", "--no-hook", "--pid", str(proc.pid), "--json")
    assert as_json.returncode == 0, as_json.stderr
    report = json.loads(as_json.stdout)
    assert report["source"] == "py-spy" and report["pid"] == proc.pid and report["job"] is None
    [rank] = report["ranks"]
    assert rank["rank"] == 0 and rank["pid"] == proc.pid and rank["error"] is None and rank["source"] == "py-spy"
    assert main_thread(rank)["frames"][-1] == {
        "file": str(script),
        "line": line_of(SLEEPER, "SLEEP-LINE"),
        "function": "sleepy_function",
    }


@needs_torch
def test_plain_torchrun_job_rank_in_all_reduce_is_blocked_in_native_code(
    home: Path, tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    script = tmp_path / "ddp.py"
    script.write_text(DDP_SCRIPT)
    marks = tmp_path / "marks"
    marks.mkdir()
    launcher = start(
        started,
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes",
            "1",
            "--nproc-per-node",
            "2",
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            str(free_port()),
            str(script),
            str(marks),
        ],
        tmp_path,
    )
    try:
        wait_for([marks / "ready-0", marks / "ready-1"], launcher)
        time.sleep(1.0)  # rank 0 into all_reduce

        proc = cli("stacks", "--no-hook", "--pid", str(launcher.pid), "--json")
        assert proc.returncode == 0, proc.stderr
        report = json.loads(proc.stdout)
        assert report["source"] == "py-spy" and [r["rank"] for r in report["ranks"]] == [0, 1]
        zero, one = report["ranks"]
        assert zero["error"] is None and one["error"] is None and zero["pid"] != one["pid"] != launcher.pid
        frames0 = main_thread(zero)["frames"]
        assert frames0[-1]["function"] == "all_reduce", frames0
        assert {"file": str(script), "line": line_of(DDP_SCRIPT, "REDUCE-LINE"), "function": "<module>"} in frames0
        assert zero["blocked_in_native"] is True
        assert main_thread(one)["frames"][-1] == {
            "file": str(script),
            "line": line_of(DDP_SCRIPT, "HOLD-LINE"),
            "function": "hold_rank_one",
        }
        for r in (zero, one):
            print(f"rank {r['rank']}: py-spy dump {r['dump_seconds']:.3f} s")

        # one rank, as text
        human = cli("stacks", "--no-hook", "--pid", str(launcher.pid), "--ranks", "0", "--flat")
        assert human.returncode == 0, human.stderr
        lines = human.stdout.splitlines()
        assert lines[:2] == [
            f"rank 0 (pid {zero['pid']}, from py-spy)",
            "  thread MainThread (blocked in native code):",
        ]
        assert lines[-1].endswith(", in all_reduce") and "rank 1" not in human.stdout

        unknown = cli("stacks", "--no-hook", "--pid", str(launcher.pid), "--ranks", "5")
        assert unknown.returncode == 2
        assert unknown.stderr.strip() == (
            f"remote-debug: error: ranks [5] not found under pid {launcher.pid} (found: 0,1)"
        )
    finally:
        (marks / "release").write_text("")
    assert launcher.wait(60) == 0, (tmp_path / "stderr.log").read_text()


def one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stdout == "" and proc.stderr.count("\n") == 1, proc.stderr
    return proc.stderr.strip()


@needs_second_user
def test_another_users_process_is_one_line_exit_2(home: Path, tmp_path: Path) -> None:
    """A second user's process, and us without the capabilities that let root read anyone's."""
    victim = subprocess.Popen(
        python_as_nobody("import time\nprint('ready', flush=True)\ntime.sleep(300)"),
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        cwd="/",
    )
    try:
        assert victim.stdout is not None and victim.stdout.readline() == b"ready\n"
        drop = ("setpriv", "--inh-caps=-all", "--bounding-set=-all")
        line = one_line_error(cli("stacks", "--no-hook", "--pid", str(victim.pid), prefix=drop))
        assert line == (
            f"remote-debug: error: process {victim.pid} belongs to user nobody (uid {nobody().pw_uid}), "
            "not to you (user root (uid 0)): run remote-debug as that user (or as root)"
        )
    finally:
        victim.kill()
        victim.wait()


def test_bad_input_is_one_line_exit_2(home: Path, tmp_path: Path) -> None:
    env = {**os.environ, "REMOTE_DEBUG_PYSPY": str(tmp_path / "missing-py-spy")}
    line = one_line_error(cli("stacks", "--no-hook", "--pid", str(os.getpid()), env=env))
    assert line.startswith("remote-debug: error: py-spy not found: pip install py-spy")
    assert "REMOTE_DEBUG_PYSPY" in line

    arn = "arn:aws:sagemaker:us-east-1:123456789012:training-job/far-away"
    line = one_line_error(cli("stacks", "--no-hook", arn))
    assert line.startswith("remote-debug: error: stacks --no-hook is for jobs of this machine (for now): far-away")
    # a SageMaker job known from an earlier attach (its hint), by name
    hint = StatePaths.default().sagemaker_hint("sm-job")
    hint.parent.mkdir(parents=True, exist_ok=True)
    hint.write_text("{}")
    assert "is for jobs of this machine" in one_line_error(cli("stacks", "--no-hook", "sm-job"))

    gone = subprocess.Popen(["true"])
    gone.wait()
    assert one_line_error(cli("stacks", "--no-hook", "--pid", str(gone.pid))) == (
        f"remote-debug: error: process {gone.pid} does not exist (it ended?)"
    )
    assert "not both" in one_line_error(cli("stacks", "job", "--no-hook", "--pid", str(os.getpid())))
    assert "which job?" in one_line_error(cli("stacks", "--no-hook"))


# rank 1 calls libc's sleep holding the GIL (its control channel's thread cannot run); rank 0 waits for it
# inside all_reduce
HOOKED_SCRIPT = textwrap.dedent(
    """
    import ctypes, pathlib
    import torch
    import torch.distributed as dist

    marks = pathlib.Path({marks!r})
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    (marks / f"ready-{{rank}}").write_text("")

    def hold_the_gil():
        ctypes.PyDLL(None).sleep(100)  # GIL-LINE

    if rank == 1:
        hold_the_gil()
    dist.all_reduce(torch.tensor([1.0]))  # REDUCE-LINE
    """
)


@needs_torch
def test_job_of_this_machine_from_rank_documents_and_hooked_stacks_fall_back_to_py_spy(
    home: Path, tmp_path: Path
) -> None:
    project, marks = marked_project(tmp_path, HOOKED_SCRIPT)
    train = (project / "train.py").read_text()
    job = launch_job("gil-held", project, nproc_per_node=2)
    wait_for([marks / "ready-0", marks / "ready-1"], timeout=120)
    time.sleep(1.0)  # rank 0 into all_reduce, rank 1 into its C call
    code = Path(job.backend.describe(job.name).code_dirs["algo-1"]) / "train.py"

    proc = cli("stacks", "--no-hook", job.name, "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["job"] == job.name and report["source"] == "py-spy"
    zero, one = report["ranks"]
    documents = {r.rank: r for m in job.backend.manifests(job.name).values() if m for r in m.ranks}
    for r in (zero, one):  # the pids the ranks wrote in their documents, and their state
        assert r["error"] is None and r["node"] == "algo-1" and r["pid"] == documents[r["rank"]].pid
        assert r["state"] == str(documents[r["rank"]].state)
    assert main_thread(zero)["frames"][-1]["function"] == "all_reduce" and zero["blocked_in_native"]
    assert [t["name"] for t in zero["threads"]] == ["MainThread"]  # the hook's own threads left out
    held = main_thread(one)
    assert held["frames"][-1] == {"file": str(code), "line": line_of(train, "GIL-LINE"), "function": "hold_the_gil"}
    assert held["owns_gil"] and one["blocked_in_native"]

    # the hooked path: rank 0 answers on its control channel; rank 1 cannot, and is read with py-spy
    hooked = cli("stacks", job.name, "--json")
    assert hooked.returncode == 0, hooked.stderr
    zero, one = json.loads(hooked.stdout)["ranks"]
    assert zero["source"] == "control" and zero["error"] is None
    assert next(t for t in zero["threads"] if t["name"] == "MainThread")["frames"][-1]["function"] == "all_reduce"
    assert one["source"] == "py-spy" and one["error"] is None and one["control_error"]
    assert main_thread(one)["frames"][-1]["function"] == "hold_the_gil"
    job.backend.stop(job.name)


def test_job_without_rank_documents_is_found_under_its_node_process(home: Path, tmp_path: Path) -> None:
    """``python -I`` ignores PYTHONPATH: the hook's sitecustomize never runs, the rank writes no document."""
    project, marks = marked_project(
        tmp_path, SLEEPER.replace("pathlib.Path(sys.argv[1])", "(pathlib.Path({marks!r}) / 'ready')")
    )
    job = launch_job("no-documents", project, command=["python", "-I", "train.py"])
    wait_for([marks / "ready"], timeout=120)
    time.sleep(0.2)
    code = Path(job.backend.describe(job.name).code_dirs["algo-1"]) / "train.py"
    assert not any(m and m.ranks for m in job.backend.manifests(job.name).values())

    proc = cli("stacks", "--no-hook", job.name, "--flat")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("rank 0 (algo-1, pid ") and lines[0].endswith(", from py-spy)")
    assert lines[-1] == f'    File "{code}", line {line_of(SLEEPER, "SLEEP-LINE")}, in sleepy_function'
    job.backend.stop(job.name)
