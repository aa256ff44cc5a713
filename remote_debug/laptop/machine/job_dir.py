"""On-disk layout and launch plan of a local, SageMaker-shaped job.

A local job lives in ``<state>/jobs/<job>/``::

    job.json                      state (written by launch, then only by the supervisor)
    supervisor.log
    logs/<node>.log               everything the node printed (hook, sshd, ranks)
    nodes/<node>/                 a root mirroring /opt/ml on a SageMaker instance
        input/config/resourceconfig.json, hyperparameters.json
        input/data/  model/  output/data/  code/   (code/ = copy of the user's source dir)
        remote-debug/manifest/    node.json + rank-*.json (the contract's manifest documents)
        remote-debug/hook/        the hook's private dir (sshd host key, config), 0700
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from remote_debug.contract import spec
from remote_debug.contract.spec import LOOPBACK
from remote_debug.oskit import osutil

PYTHON_NAMES = ("python", "python3", f"python3.{sys.version_info.minor}")
# `python -m <these>` starts ranks rather than being one: it must not get a rank's variables.
LAUNCHER_PACKAGES = ("torch", "accelerate", "deepspeed", "debugpy")


@dataclass(frozen=True)
class NodeLayout:
    job_dir: Path
    node: str

    @property
    def root(self) -> Path:
        return self.job_dir / "nodes" / self.node

    @property
    def config_dir(self) -> Path:
        return self.root / "input" / "config"

    @property
    def code_dir(self) -> Path:
        return self.root / "code"

    @property
    def model_dir(self) -> Path:
        return self.root / "model"

    @property
    def output_dir(self) -> Path:
        return self.root / "output"

    @property
    def manifest_dir(self) -> Path:
        return self.root / "remote-debug" / "manifest"

    @property
    def hook_dir(self) -> Path:
        return self.root / "remote-debug" / "hook"

    @property
    def log_file(self) -> Path:
        return self.job_dir / "logs" / f"{self.node}.log"


def node_names(count: int) -> list[str]:
    return [f"algo-{i}" for i in range(1, count + 1)]


def read_job_file(job_dir: Path) -> dict[str, Any]:
    try:
        data = json.loads((job_dir / "job.json").read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise spec.ContractError(f"job state {job_dir / 'job.json'} is unreadable: {exc}") from None
    if not isinstance(data, dict):
        raise spec.ContractError(f"job state {job_dir / 'job.json'} is not a JSON object")
    return data


def write_job_file(job_dir: Path, data: dict[str, Any]) -> None:
    osutil.atomic_write_text(job_dir / "job.json", json.dumps(data, indent=2) + "\n")


SUPERVISOR_PID = "supervisor.pid"  # its pid alone (what older versions and their readers know)
SUPERVISOR_START = "supervisor.start"  # its start time (/proc stat field 22): pid + start is one process


def record_supervisor(job_dir: Path, pid: int) -> None:
    """Store the supervisor we just started (call before reaping it: until then the pid is surely ours).
    The start time goes first: a reader never pairs a new pid with no start time."""
    start = osutil.process_start_ticks(pid)
    if start is not None:
        osutil.atomic_write_text(job_dir / SUPERVISOR_START, f"{start}\n")
    osutil.atomic_write_text(job_dir / SUPERVISOR_PID, f"{pid}\n")


def supervisor_process(job_dir: Path) -> osutil.ProcessRecord | None:
    """The job's supervisor as stored (None when no pid is stored).  Its start time tells a supervisor
    that died from a stranger's process that got its pid: ``stop`` must never signal that one."""
    try:
        pid = int((job_dir / SUPERVISOR_PID).read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        start: int | None = int((job_dir / SUPERVISOR_START).read_text().strip())
    except FileNotFoundError:
        start = None  # a job of an older version: only its pid is known
    except (OSError, ValueError):
        start = -1  # unreadable: matches no process, so nothing is signalled
    return osutil.ProcessRecord(pid, start) if pid > 0 else None


def prepare_node(
    layout: NodeLayout, hosts: list[str], hyperparameters: dict[str, str], cpus: int, interface: str = "lo"
) -> None:
    """Create the /opt/ml mirror of one node (the code copy is made by the caller)."""
    for d in (
        layout.config_dir,
        layout.root / "input" / "data",
        layout.model_dir,
        layout.output_dir / "data",
        layout.manifest_dir,
    ):
        d.mkdir(parents=True, exist_ok=True)
    layout.hook_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(layout.hook_dir, 0o700)
    resource_config = {
        "current_host": layout.node,
        "current_instance_type": "local",
        "current_group_name": "homogeneousCluster",
        "hosts": hosts,
        "instance_groups": [{"instance_group_name": "homogeneousCluster", "instance_type": "local", "hosts": hosts}],
        "network_interface_name": interface,
    }
    osutil.atomic_write_text(layout.config_dir / "resourceconfig.json", json.dumps(resource_config, indent=2) + "\n")
    osutil.atomic_write_text(layout.config_dir / "hyperparameters.json", json.dumps(hyperparameters, indent=2) + "\n")
    layout.log_file.parent.mkdir(parents=True, exist_ok=True)
    del cpus  # recorded in the environment (SM_NUM_CPUS), not in a file


def node_environment(
    layout: NodeLayout,
    job: str,
    hosts: list[str],
    hyperparameters: dict[str, str],
    cpus: int,
    debug_env: dict[str, str],
) -> dict[str, str]:
    """What SageMaker (and its training toolkit) would put into this node's environment."""
    env = {
        "TRAINING_JOB_NAME": job,
        "TRAINING_JOB_ARN": f"local:training-job/{job}",
        "SM_CURRENT_HOST": layout.node,
        "SM_HOSTS": json.dumps(hosts),
        "SM_HOST_COUNT": str(len(hosts)),
        "SM_CURRENT_HOST_RANK": str(hosts.index(layout.node)),
        "SM_NUM_CPUS": str(cpus),
        "SM_NUM_GPUS": "0",
        "SM_MODEL_DIR": str(layout.model_dir),
        "SM_OUTPUT_DIR": str(layout.output_dir),
        "SM_OUTPUT_DATA_DIR": str(layout.output_dir / "data"),
        "SM_INPUT_DIR": str(layout.root / "input"),
        "SM_INPUT_CONFIG_DIR": str(layout.config_dir),
        "SM_MODULE_DIR": str(layout.code_dir),
        "SM_HPS": json.dumps(hyperparameters),
        "PYTHONUNBUFFERED": "1",
        spec.ENV_MANIFEST_DIR: str(layout.manifest_dir),
        spec.ENV_STATE_DIR: str(layout.hook_dir),
        "REMOTE_DEBUG_CODE_DIR": str(layout.code_dir),
    }
    for key, value in hyperparameters.items():
        env[f"SM_HP_{key.upper().replace('-', '_')}"] = value
    env.update(debug_env)
    return env


def node_command(
    command: list[str], *, nodes: int, nproc: int, node_rank: int, master_port: int, master_addr: str = LOOPBACK
) -> list[str]:
    """The command a node runs, wrapped in the container hook (and torchrun for >1 rank).

    SageMaker's toolkit runs torchrun on every host with ``--nnodes N --node_rank i`` and
    algo-1 as the rendezvous master; we do the same on loopback (or node 1's private address when
    nodes have their own network namespaces).  A 1-rank Python script gets the variables torchrun
    would give its one rank instead (:func:`single_rank_env`), so a DDP script runs unchanged
    without paying for torchrun's start.
    """
    inner = list(command)
    if nodes * nproc > 1:
        torchrun = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes",
            str(nodes),
            "--node_rank",
            str(node_rank),
            "--nproc_per_node",
            str(nproc),
            "--master_addr",
            master_addr,
            "--master_port",
            str(master_port),
        ]
        if Path(inner[0]).name in PYTHON_NAMES and len(inner) > 1:
            inner = torchrun + inner[1:]  # torchrun runs scripts (and `-m module`) with its own python
        else:
            inner = [*torchrun, "--no-python", *inner]
    elif Path(inner[0]).name in PYTHON_NAMES:
        inner = [sys.executable, *inner[1:]]  # the interpreter remote-debug runs in has the hook's deps
        if _runs_one_rank(inner):
            # `env` execs the script (same pid), so only the script's process tree sees them, as under torchrun
            variables = single_rank_env(master_addr, master_port)
            inner = [shutil.which("env") or "/usr/bin/env", *(f"{k}={v}" for k, v in variables.items()), *inner]
    return [sys.executable, "-m", "remote_debug.container", "--", *inner]


def _runs_one_rank(command: list[str]) -> bool:
    """``python [options] script.py ...`` or ``python -m module ...`` that is not itself a launcher
    (torchrun, accelerate...: a launcher holding RANK would be taken for rank 0 and its ranks would
    not listen).  ``-c`` and stdin are one-liners, not training scripts."""
    args = iter(command[1:])
    for arg in args:
        if arg.startswith("-c") or arg == "-":
            return False
        if arg.startswith("-m"):
            module = arg[2:] or next(args, "")
            return bool(module) and module.split(".")[0] not in LAUNCHER_PACKAGES
        if arg in ("-W", "-X"):
            next(args, None)  # their value
        elif not arg.startswith("-"):
            return True
    return False


def single_rank_env(master_addr: str, master_port: int) -> dict[str, str]:
    """What torchrun gives the only rank of a 1-node, 1-process job (its elastic-agent bookkeeping aside:
    there is no agent, so rank 0 hosts the store, as ``init_process_group`` does without one)."""
    return {
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_WORLD_SIZE": "1",
        "GROUP_RANK": "0",
        "GROUP_WORLD_SIZE": "1",
        "ROLE_RANK": "0",
        "ROLE_WORLD_SIZE": "1",
        "ROLE_NAME": "default",
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port),
    }
