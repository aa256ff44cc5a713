"""Local jobs look like SageMaker from inside, over ssh too: real OpenSSH through our ProxyCommand.

* 2 nodes, each in its own network namespace (root): a script that takes ``SM_HOSTS[0]`` as its master
  address trains across both; inside node 2 ``hostname`` is ``algo-2`` and ``algo-1`` resolves to node
  1's address; what an ssh session started there is gone after ``remote-debug stop`` - even a process
  that left its session and dropped its environment, when no cgroup catches it (the namespace's sweep);
* a 1-rank job gives its script torchrun's variables, so a DDP script's ``init_process_group`` works.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from remote_debug.container.node import ssh_session
from remote_debug.laptop.core.paths import StatePaths
from remote_debug.laptop.machine.job_dir import read_job_file
from remote_debug.oskit import netns
from tests.helpers.hook_runs import alive, wait_for
from tests.helpers.jobs import LocalJob, launch_job

needs_netns = pytest.mark.skipif(not netns.available(), reason="network namespaces need root and iproute2")

# Many training scripts take the first host as the master address (and torchrun gives the rest).
MASTER_FROM_SM_HOSTS = textwrap.dedent(
    """
    import json, os, pathlib, socket, sys, time
    import torch
    import torch.distributed as dist
    os.environ["MASTER_ADDR"] = json.loads(os.environ["SM_HOSTS"])[0]
    dist.init_process_group("gloo")
    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    print(f"rank {dist.get_rank()} on {socket.gethostname()}: sum {t.item()}", flush=True)
    release = pathlib.Path(sys.argv[1])
    deadline = time.monotonic() + 120
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    dist.destroy_process_group()
    """
)

ONE_RANK_DDP = textwrap.dedent(
    """
    import os
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo")  # env://: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    t = torch.ones(1)
    dist.all_reduce(t)
    print(f"rank {dist.get_rank()} local {os.environ['LOCAL_RANK']} of {dist.get_world_size()}: {t.item()}", flush=True)
    dist.destroy_process_group()
    """
)


def ssh(paths: StatePaths, alias: str, command: str) -> str:
    result = subprocess.run(
        ["ssh", "-F", str(paths.ssh_config), "-o", "BatchMode=yes", alias, command],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def wait_for_log(job: LocalJob, *needles: str, timeout: float = 150) -> str:
    def found() -> str | None:
        logs = job.logs()
        assert job.status() in ("InProgress", "Completed"), logs[-3000:]
        return logs if all(n in logs for n in needles) else None

    return wait_for(found, timeout, f"{needles} in the job's logs", interval=0.3)


@needs_netns
def test_nodes_name_each_other_and_what_ssh_started_ends_with_stop(
    home: Path, tmp_path: Path, job_namespaces: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # No cgroup for the sessions, as in a SageMaker container: what leaves its session and its
    # environment behind is then found only by its network namespace.
    monkeypatch.setenv(ssh_session.ENV_CGROUP, "0")
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(MASTER_FROM_SM_HOSTS)
    release = tmp_path / "release"
    job = launch_job("named", project, ["python", "train.py", str(release)], nodes=2)
    state = read_job_file(job.paths.job_dir("named"))
    job_namespaces.extend(state["netns"])
    assert state["isolation"] == "netns"

    wait_for_log(job, "rank 0 on algo-1: sum 3.0", "rank 1 on algo-2: sum 3.0")
    subprocess.run(
        [sys.executable, "-m", "remote_debug", "ssh-config", "named"], check=True, capture_output=True, timeout=120
    )
    out = ssh(job.paths, "algo-2.named", "hostname; getent hosts algo-1; getent hosts algo-2")
    assert out.split() == [
        "algo-2",
        state["node_addresses"]["algo-1"],
        "algo-1",
        state["node_addresses"]["algo-2"],
        "algo-2",
    ]

    marks = tmp_path / "marks"
    marks.mkdir()
    escape = f"sh -c 'echo $$ > {marks / 'escaped'}; exec env -i /bin/sleep 301'"
    ssh(
        job.paths,
        "algo-2.named",
        f"nohup sleep 300 >/dev/null 2>&1 & echo $! > {marks / 'nohup'}; setsid -f {escape} </dev/null >/dev/null 2>&1",
    )
    pids = {
        n: int(wait_for(lambda n=n: (marks / n).exists() and (marks / n).read_text().strip(), 10, n))  # type: ignore[misc]  # mypy cannot type a lambda whose default binds the loop variable
        for n in ("nohup", "escaped")
    }
    assert all(alive(pid) for pid in pids.values())
    try:
        assert job.backend.stop("named", wait_seconds=60).status == "Stopped"
        wait_for(lambda: not any(alive(pid) for pid in pids.values()), 5, f"{pids} to be gone")
        assert not any(netns.exists(ns) for ns in state["netns"])
        assert not any((netns.ETC_NETNS / ns).exists() for ns in state["netns"])
    finally:
        for pid in pids.values():
            if alive(pid):
                os.kill(pid, 9)


def test_a_one_rank_job_gets_torchrun_variables(home: Path, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "ddp.py").write_text(ONE_RANK_DDP)
    job = launch_job("one-rank", project, ["python", "ddp.py"])
    assert job.wait_status(("Completed", "Failed"), timeout=120) == "Completed", job.logs()[-3000:]
    assert "rank 0 local 0 of 1: 1.0" in job.logs()
