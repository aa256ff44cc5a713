"""``remote-debug adopt``: real jobs started without remote_debug become debuggable, through the real CLI.

What a user relies on: after ``adopt --pid <torchrun>``, every rank stops at a breakpoint with its own
values (while a second thread in each rank contends for the GIL, the case where stock ``debugpy --pid``
hung), ``jobs`` lists the job, adopting again changes nothing, the debugger leaves no tracer behind, a rank
blocked in a collective gets its agent when the collective returns, ``stop`` ends the job; Python 3.12 and
3.13 targets (pyenv) work; another user's process and an opted-out one are refused with one line and
nothing written.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from remote_debug.laptop.attach.attacher import AttachOptions
from remote_debug.laptop.core.paths import StatePaths
from remote_debug.laptop.ide.headless_session import HeadlessPlan
from remote_debug.laptop.wire import events as ev
from remote_debug.oskit import netns
from tests.helpers.adopt_targets import Plain, plain_env, plain_python, plain_torchrun, pyenv_python, wait_file
from tests.helpers.ddp_job import break_line, marked_project
from tests.helpers.hook_runs import free_port, wait_for
from tests.helpers.jobs import LocalJob
from tests.helpers.second_user import ATTACKER_PYTHON, as_nobody, needs_second_user

CLI = [sys.executable, "-m", "remote_debug"]
needs_netns = pytest.mark.skipif(not netns.available(), reason="network namespaces need root and iproute2")

# A plain torchrun rank: a second thread spins (GIL contention), the main thread loops over a collective,
# and reports whether any tracer is installed (main thread or a fresh thread).
DDP = textwrap.dedent(
    """
    import os, pathlib, sys, threading, time
    import torch
    import torch.distributed as dist
    marks = pathlib.Path({marks!r})
    def spin():
        x = 0
        while not (marks / "done").exists():
            x += 1
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    threading.Thread(target=spin, daemon=True).start()
    if rank == 0 and (marks / "hold").exists():
        pass  # rank 1 holds the first collective: rank 0 waits inside all_reduce (native code)
    if rank == 1:
        while (marks / "hold").exists():
            time.sleep(0.05)
    deadline = time.monotonic() + 240
    while not (marks / "done").exists() and time.monotonic() < deadline:
        tensor = torch.tensor([float(rank + 1)])
        dist.all_reduce(tensor)
        marker = 1000 * rank + 7  # BREAK-HERE
        fresh = []
        t = threading.Thread(target=lambda: fresh.append(sys.gettrace() is not None))
        t.start()
        t.join()
        state = marks / f"traced-{{rank}}"
        state.with_suffix(".tmp").write_text(str(sys.gettrace() is not None or fresh[0]))
        state.with_suffix(".tmp").replace(state)
        time.sleep(0.02)
    """
)

# A single plain process (any Python: no torch), its own values derived from its pid.
SINGLE = textwrap.dedent(
    """
    import os, pathlib, threading, time
    marks = pathlib.Path({marks!r})
    def spin():
        while not (marks / "done").exists():
            pass
    threading.Thread(target=spin, daemon=True).start()
    counter = 0
    deadline = time.monotonic() + 240
    while not (marks / "done").exists() and time.monotonic() < deadline:
        counter += 1
        marker = os.getpid() % 1000  # BREAK-HERE
        (marks / "running").write_text(str(counter))
        time.sleep(0.02)
    """
)


def cli(
    *args: str, check: bool = True, env: dict[str, str] | None = None, prefix: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([*prefix, *CLI, *args], capture_output=True, text=True, timeout=120, env=env)
    if check:
        assert proc.returncode == 0, (proc.returncode, proc.stderr)
    return proc


def adopt(*args: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(cli("adopt", *args, "--json").stdout)
    return result


def traced(marks: Path, rank: int) -> str | None:
    path = marks / f"traced-{rank}"
    return path.read_text() if path.exists() else None


def attach_headless(job: str, project: Path, script: Path, line: int, emit: ev.Emit | None = None) -> Any:
    plan = HeadlessPlan(breakpoints={str(script): [line]})
    return LocalJob(job, project).attach(
        AttachOptions(
            workspace=project, headless=plan, write_launch_json=False, ready_timeout=60, detach_when_done=True
        ),
        emit,
    )


def test_plain_torchrun_adopted_every_rank_stops_with_its_values_and_no_tracer_stays(
    home: Path, tmp_path: Path
) -> None:
    project, marks = marked_project(tmp_path, DDP)
    script = project / "train.py"
    with plain_torchrun(project) as job:
        wait_for(lambda: traced(marks, 0) and traced(marks, 1), 90, f"both ranks running: {job.output()}")
        [offered] = [c for c in json.loads(cli("adopt", "--list", "--json").stdout) if c["pid"] == job.pid]
        assert (offered["kind"], offered["ranks"], offered["adoptable"], offered["job"]) == ("launcher", 2, True, None)
        started = time.monotonic()
        outcome = adopt("--pid", str(job.pid), "--name", "plain-ddp")
        took = time.monotonic() - started
        assert outcome["job"] == "plain-ddp" and outcome["already"] is False and outcome["nodes"] == ["algo-1"]
        assert [(r["rank"], r["state"]) for r in outcome["ranks"]] == [(0, "idle"), (1, "idle")], outcome
        # the ranks' own pids, children of the launcher
        launcher_children = set(Path(f"/proc/{job.pid}/task/{job.pid}/children").read_text().split())
        assert {str(r["pid"]) for r in outcome["ranks"]} <= launcher_children

        listed = json.loads(cli("jobs", "--json").stdout)
        assert [(j["name"], j["backend"], j["status"]) for j in listed] == [("plain-ddp", "local", "InProgress")]

        [listed_again] = [c for c in json.loads(cli("adopt", "--list", "--json").stdout) if c["pid"] == job.pid]
        assert (listed_again["adoptable"], listed_again["job"]) == (False, "plain-ddp")
        again = adopt("--pid", str(job.pid))
        assert (again["job"], again["already"]) == ("plain-ddp", True)
        assert [r["pid"] for r in again["ranks"]] == [r["pid"] for r in outcome["ranks"]]
        assert job.output().count("adopted as rank") == 2, job.output()  # each agent ran once

        assert (traced(marks, 0), traced(marks, 1)) == ("False", "False")  # idle: no tracer before attach
        detached: set[int] = set()
        untraced: dict[int, bool] = {}

        def emit(event: ev.Event) -> None:
            if isinstance(event, ev.RankDetached):
                detached.add(event.rank)
                if detached == {0, 1}:
                    threading.Thread(target=after_detach, daemon=True).start()

        def after_detach() -> None:
            for rank in (0, 1):
                try:
                    wait_for(lambda rank=rank: traced(marks, rank) == "False", 20, f"rank {rank} untraced")  # type: ignore[misc]  # mypy cannot type a lambda whose default binds the loop variable
                    untraced[rank] = True
                except AssertionError:
                    untraced[rank] = False

        result = attach_headless("plain-ddp", project, script, break_line(script) + 1, emit)
        assert [r.rank for r in result.reports] == [0, 1], result.reports
        for report in result.reports:
            stop = report.stops[0]
            assert (stop.file, stop.line) == (str(script), break_line(script) + 1)
            assert stop.variables["rank"] == str(report.rank)
            assert stop.variables["marker"] == str(1000 * report.rank + 7)
            assert stop.variables["tensor"] == "Tensor[1] float32 cpu = [3.]"  # the collective really ran
        wait_for(lambda: len(untraced) == 2, 30, "the ranks' tracer state after detach")
        assert untraced == {0: True, 1: True}, untraced

        # ssh lands on the node, where the job's processes run (their cwd)
        assert cli("ssh", "plain-ddp", "--", "pwd").stdout.strip() == str(project)
        cli("stop", "plain-ddp")
        wait_for(lambda: job.proc.poll() is not None, 60, "the adopted torchrun to end")
        ended = json.loads(cli("jobs", "--json").stdout)
        assert [(j["name"], j["status"]) for j in ended] == [("plain-ddp", "Stopped")]
    print(f"adopt of 2 ranks: {took:.2f} s")


def test_a_rank_blocked_in_a_collective_gets_its_agent_when_it_returns(home: Path, tmp_path: Path) -> None:
    project, marks = marked_project(tmp_path, DDP)
    script = project / "train.py"
    (marks / "hold").write_text("")  # rank 1 stays out of the first all_reduce: rank 0 blocks inside it
    with plain_torchrun(project) as job:
        wait_for(lambda: _ranks_up(job), 90, f"both ranks started: {job.output()}")
        time.sleep(3)  # rank 0 is inside all_reduce by now (init_process_group took the rendezvous)
        outcome = adopt("--pid", str(job.pid), "--name", "blocked")
        states = {r["rank"]: (r["state"], r["note"]) for r in outcome["ranks"]}
        assert states[1] == ("idle", None), outcome
        assert states[0][0] == "pending" and "native code" in states[0][1], outcome
        assert "main thread in all_reduce" in states[0][1], outcome  # where it waits, from py-spy
        (marks / "hold").unlink()  # rank 1 joins: the collective returns, rank 0 runs its queued agent
        result = attach_headless("blocked", project, script, break_line(script) + 1)
        assert {r.rank: r.stops[0].variables["marker"] for r in result.reports} == {0: "7", 1: "1007"}


def path_without_gdb(directory: Path) -> str:
    """A PATH like ours without gdb (AWS's PyTorch images have none): one dir of links to everything else."""
    directory.mkdir()
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        with contextlib.suppress(OSError):
            for tool in Path(entry).iterdir():
                if not tool.name.startswith("gdb") and not (directory / tool.name).exists():
                    (directory / tool.name).symlink_to(tool)
    return str(directory)


def test_without_gdb_every_rank_is_adopted_through_ptrace_and_stops(home: Path, tmp_path: Path) -> None:
    project, marks = marked_project(tmp_path, DDP)
    script = project / "train.py"
    env = {**os.environ, "PATH": path_without_gdb(tmp_path / "bin")}
    with plain_torchrun(project) as job:
        wait_for(lambda: traced(marks, 0) and traced(marks, 1), 90, f"both ranks running: {job.output()}")
        started = time.monotonic()
        adopted = cli("adopt", "--pid", str(job.pid), "--name", "no-gdb", "--json", env=env)
        took = time.monotonic() - started
        outcome = json.loads(adopted.stdout)
        assert [(r["rank"], r["state"]) for r in outcome["ranks"]] == [(0, "idle"), (1, "idle")], outcome
        try:
            result = attach_headless("no-gdb", project, script, break_line(script) + 1)
            assert {r.rank: r.stops[0].variables["marker"] for r in result.reports} == {0: "7", 1: "1007"}
        finally:
            (marks / "done").write_text("")  # torchrun's workers have sessions of their own: they end themselves
            wait_for(lambda: not _children(job.pid), 30, "the ranks to end")
    print(f"adopt of 2 ranks without gdb: {took:.2f} s")


@needs_second_user
def test_a_rank_the_kernel_will_not_let_us_trace_is_refused_with_the_reason(home: Path, tmp_path: Path) -> None:
    """Root without CAP_SYS_PTRACE (a container started without --cap-add SYS_PTRACE) and a rank holding
    capabilities it lacks: the kernel says no, and the line says why and what to do, not "another user"."""
    project, marks = marked_project(tmp_path, SINGLE)
    with plain_python(project, sys.executable) as job:
        wait_file(marks / "running", 30, "the process running")
        no_ptrace = ("setpriv", "--inh-caps=-sys_ptrace", "--bounding-set=-sys_ptrace", "--")
        refused = cli("adopt", "--pid", str(job.pid), check=False, prefix=no_ptrace)
        assert refused.returncode == 2, refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        assert "holds capabilities you lack" in refused.stderr and "--cap-add SYS_PTRACE" in refused.stderr, (
            refused.stderr
        )
        assert _no_jobs()
        assert job.proc.poll() is None


def _ranks_up(job: Plain) -> bool:
    return job.output().count("OMP_NUM_THREADS") >= 1 and len(_children(job.pid)) == 2


def _children(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []


@pytest.mark.parametrize("minor", ["3.12", "3.13"])
def test_a_python_3_12_or_3_13_process_is_adopted_and_stops_with_its_values(
    home: Path, tmp_path: Path, minor: str
) -> None:
    python = pyenv_python(minor)
    if python is None:
        pytest.skip(f"no pyenv Python {minor} on this machine")
    project, marks = marked_project(tmp_path, SINGLE)
    script = project / "train.py"
    with plain_python(project, python) as job:
        wait_file(marks / "running", 30, "the process running")
        outcome = adopt("--pid", str(job.pid), "--name", f"py{minor.replace('.', '')}")
        assert [(r["rank"], r["pid"], r["state"]) for r in outcome["ranks"]] == [(0, job.pid, "idle")]
        result = attach_headless(outcome["job"], project, script, break_line(script) + 1)
        [report] = result.reports
        assert report.stops[0].variables["marker"] == str(job.pid % 1000)
        assert int(report.stops[0].variables["counter"]) > 0


def _no_jobs() -> bool:
    jobs_dir = StatePaths.default().jobs_dir
    return not jobs_dir.exists() or not any(jobs_dir.iterdir())


@needs_second_user
def test_another_users_process_is_refused_in_one_line_and_nothing_is_written(home: Path, tmp_path: Path) -> None:
    del tmp_path  # pytest's tmp dirs are private: nobody's process needs a dir it can reach
    marks = Path(tempfile.mkdtemp(prefix="rd-adopt-nobody-"))
    os.chmod(marks, 0o777)
    script = marks / "train.py"
    script.write_text(SINGLE.format(marks=str(marks)))
    os.chmod(script, 0o644)
    proc = subprocess.Popen(as_nobody(ATTACKER_PYTHON, "-I", "-S", str(script)), start_new_session=True)
    try:
        wait_file(marks / "running", 30, "nobody's process running")
        refused = cli("adopt", "--pid", str(proc.pid), check=False)
        assert refused.returncode == 2
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        assert "uid" in refused.stderr and "as the user that runs the job" in refused.stderr, refused.stderr
        # root may not adopt it, but py-spy may read it: what can be had is offered, not a bare no
        assert f"its stacks can still be read: remote-debug stacks --no-hook --pid {proc.pid}" in refused.stderr
        assert _no_jobs()
        assert proc.poll() is None  # untouched, still running
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()
        shutil.rmtree(marks, ignore_errors=True)


def test_an_opted_out_process_is_refused_and_an_unknown_pid_too(home: Path, tmp_path: Path) -> None:
    project, marks = marked_project(tmp_path, SINGLE)
    job = Plain(
        [sys.executable, "-X", "disable_remote_debug", "train.py"],
        project,
        {**os.environ, "PYTHONPATH": ""},
        tmp_path / "opted.log",
    )
    try:
        wait_file(marks / "running", 30, "the process running")
        refused = cli("adopt", "--pid", str(job.pid), check=False)
        assert refused.returncode == 2 and "opted out" in refused.stderr and "-X disable_remote_debug" in refused.stderr
        assert _no_jobs()
    finally:
        job.stop()
    gone = cli("adopt", "--pid", str(job.pid), check=False)
    assert gone.returncode == 2 and f"process {job.pid} does not exist" in gone.stderr, gone.stderr
    assert _no_jobs()


@needs_netns
def test_two_nodes_in_network_namespaces_are_adopted_and_every_rank_stops(home: Path, tmp_path: Path) -> None:
    """A plain 2-node torchrun job, each node a network namespace of its own (as SageMaker's instances are
    separate hosts): one --pid per node; each node's sshd runs in its namespace, reached only through the relay."""
    project, marks = marked_project(tmp_path, DDP)
    script = project / "train.py"
    plan = netns.plan_for(tmp_path)
    made: list[str] = []
    nodes: list[Plain] = []
    try:
        made = netns.create(plan, 2)
        port = free_port()
        env = plain_env(**{name: netns.IFNAME for name in netns.IFNAME_ENV})
        for i in range(2):
            argv = [
                *netns.exec_prefix(plan.namespace(i)),
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes",
                "2",
                "--node-rank",
                str(i),
                "--nproc-per-node",
                "1",
                "--master-addr",
                plan.address(0),
                "--master-port",
                str(port),
                "train.py",
            ]
            nodes.append(Plain(argv, project, env, tmp_path / f"node{i}.log"))
        wait_for(
            lambda: traced(marks, 0) and traced(marks, 1), 90, f"both ranks running: {[n.output() for n in nodes]}"
        )
        outcome = adopt("--pid", str(nodes[0].pid), "--pid", str(nodes[1].pid), "--name", "two-nodes")
        assert outcome["nodes"] == ["algo-1", "algo-2"]
        assert [(r["rank"], r["node"], r["state"]) for r in outcome["ranks"]] == [
            (0, "algo-1", "idle"),
            (1, "algo-2", "idle"),
        ], outcome
        state = json.loads((StatePaths.default().job_dir("two-nodes") / "job.json").read_text())
        assert state["node_netns"] == {"algo-1": plan.namespace(0), "algo-2": plan.namespace(1)}
        result = attach_headless("two-nodes", project, script, break_line(script) + 1)
        assert [(r.rank, r.node, r.stops[0].variables["marker"]) for r in result.reports] == [
            (0, "algo-1", "7"),
            (1, "algo-2", "1007"),
        ]
    finally:
        for node in nodes:
            node.stop()
        netns.delete(made)


def test_adopt_list_offers_a_launcher_that_a_python_wrapper_started(home: Path, tmp_path: Path) -> None:
    """A torchrun started by a Python script (a wrapper, a notebook, a test runner) is offered on its own: the
    wrapper's tree does not hide it (CI found that: the runner's process took the job for its own)."""
    project, marks = marked_project(tmp_path, DDP)
    wrapper = project / "wrapper.py"
    wrapper.write_text(
        textwrap.dedent(
            f"""
        import subprocess, sys
        subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                        "--master-addr", "127.0.0.1", "--master-port", "{free_port()}", "train.py"])
        """
        )
    )
    job = Plain([sys.executable, "wrapper.py"], project, plain_env(), tmp_path / "wrapper.log")
    try:
        wait_for(lambda: traced(marks, 0) and traced(marks, 1), 90, f"both ranks running: {job.output()}")
        [launcher] = _children(job.pid)
        offered = {c["pid"]: c for c in json.loads(cli("adopt", "--list", "--json").stdout)}
        assert (offered[int(launcher)]["kind"], offered[int(launcher)]["ranks"]) == ("launcher", 2), offered
        assert offered[job.pid]["kind"] == "process"
    finally:
        job.stop()
