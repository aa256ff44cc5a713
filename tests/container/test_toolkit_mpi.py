"""Node identity under AWS's training toolkit (SDK v2) running MPI / smdistributed jobs.

The master node's toolkit starts every rank of every node with ``mpirun``, and forwards the
toolkit's whole ``SM_*`` environment with ``-x NAME`` (``sagemaker_training/mpi.py``,
``MasterRunner._create_command``): a rank on algo-2 sees the master's ``SM_CURRENT_HOST=algo-1``.
Here the real toolkit builds both nodes' environments and the mpirun command, from which the
environment a rank on algo-2 really gets is derived; the hook must still say algo-2.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from remote_debug.container import node_env

pytest.importorskip("sagemaker_training.mpi")

HOSTS = ["algo-1", "algo-2"]

# What the toolkit's entry (sagemaker_pytorch_container.training -> entry_point.run) does on a
# node, up to the command the MPI runner would start: the environment it exports, then (on the
# master) the mpirun command line.
TOOLKIT_NODE = """
import json, os, sys
from sagemaker_training import environment, runner

env = environment.Environment()
env_vars = env.to_env_vars()
environment.write_env_vars(env_vars)  # entry_point.run: os.environ gets them (and PYTHONPATH)
out = {"environ": dict(os.environ)}
if env.is_master:
    mpi = runner.get(runner.MPIRunnerType, "train.py", [], env_vars)
    out["runner"] = type(mpi).__name__
    out["cmd"] = mpi._create_command()
print(json.dumps(out))
"""


def _toolkit_node(base: Path, current_host: str) -> dict[str, Any]:
    """Run the toolkit's start-up on a node whose resourceconfig says ``current_host``."""
    config = base / "input" / "config"
    config.mkdir(parents=True, exist_ok=True)
    (base / "code").mkdir(exist_ok=True)
    (config / "resourceconfig.json").write_text(
        json.dumps(
            {
                "current_host": current_host,
                "hosts": HOSTS,
                "current_instance_type": "ml.p4d.24xlarge",
                "current_group_name": "homogeneousCluster",
                "network_interface_name": "eth0",
                "instance_groups": [
                    {"instance_group_name": "homogeneousCluster", "instance_type": "ml.p4d.24xlarge", "hosts": HOSTS}
                ],
            }
        )
    )
    (config / "inputdataconfig.json").write_text("{}")
    (config / "hyperparameters.json").write_text(
        json.dumps(
            {
                "sagemaker_program": json.dumps("train.py"),
                "sagemaker_mpi_enabled": "true",
                "sagemaker_mpi_num_of_processes_per_host": "2",
            }
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SM_", "REMOTE_DEBUG_"))}
    env.update(SAGEMAKER_BASE_DIR=str(base), AWS_DEFAULT_REGION="us-west-2", TRAINING_JOB_NAME="mpi-job")
    proc = subprocess.run(
        [sys.executable, "-c", TOOLKIT_NODE], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def rank_environment(cmd: list[str], master: dict[str, str], worker: dict[str, str]) -> dict[str, str]:
    """The environment mpirun gives a rank on a worker: the worker's own (orted starts through the
    worker's sshd, whose /etc/environment the toolkit's WorkerRunner filled from the worker's env),
    overridden by every ``-x NAME`` (the master's value) and ``-x NAME=VALUE``."""
    env = dict(worker)
    for flag, value in itertools.pairwise(cmd):
        if flag != "-x":
            continue
        name, sep, given = value.partition("=")
        if sep:
            env[name] = given
        elif name in master:
            env[name] = master[name]
    return env


def test_rank_on_the_second_node_under_the_toolkits_mpirun_is_algo_2(tmp_path: Path) -> None:
    base = tmp_path / "opt" / "ml"  # the same path on every node, as /opt/ml is
    master = _toolkit_node(base, "algo-1")
    worker = _toolkit_node(base, "algo-2")  # from here on, the files are the worker's own
    assert master["runner"] == "MasterRunner"
    cmd = master["cmd"]
    assert cmd[0] == "mpirun" and ("-x", "SM_CURRENT_HOST") in set(itertools.pairwise(cmd))
    rank_env = rank_environment(cmd, master["environ"], worker["environ"])
    # the finding, reproduced with the toolkit's own code: the rank on algo-2 is told it is algo-1
    assert rank_env["SM_CURRENT_HOST"] == "algo-1"
    assert rank_env["SM_INPUT_CONFIG_DIR"] == str(base / "input" / "config")
    identity = node_env.identify(rank_env)
    assert identity == node_env.NodeIdentity("algo-2", HOSTS)
