"""What SageMaker puts on an instance before ``docker run``: config files, environment, the command.

* ``/opt/ml/input/config/``: ``resourceconfig.json`` (current host, instance type and group, every
  host, instance groups, ``network_interface_name`` ``eth0`` as the nodes' interface is named),
  ``hyperparameters.json`` (string values, as given), ``inputdataconfig.json``, and
  ``trainingjobconfig.json`` / ``checkpointconfig.json`` the way the platform writes them too;
* the environment: the image's ENV, then what the platform sets (``TRAINING_JOB_NAME``,
  ``TRAINING_JOB_ARN``, ``AWS_REGION``), then the request's ``Environment``.  Where AWS hands the
  container an execution role, the emulator hands it itself: ``AWS_ENDPOINT_URL`` (reachable in the
  node through :mod:`.endpoint_relay`), the emulator's keys (it accepts no others), ``AWS_DEFAULT_REGION``
  (botocore here does not read ``AWS_REGION``) and no instance-metadata probing; a network-isolated job
  gets neither the endpoint nor keys;
* the command: ``ContainerEntrypoint`` + ``ContainerArguments`` if given, else the image's ``train``.
"""

from __future__ import annotations

import json
import os
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from remote_debug.emulator.channels import channel_config
from remote_debug.emulator.images import ImageEnv
from remote_debug.emulator.sigv4 import Keys

NETWORK_INTERFACE = "eth0"  # the name nodes.py gives each node's interface, and SageMaker's
SYSTEM_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
HOMOGENEOUS = "homogeneousCluster"
TAIL_LINES = 40
# Hyperparameters with which the toolkit runs mpirun (MPI, smdistributed data parallel): those need
# sshd on port 22 of every node before the toolkit starts.
MPI_HYPERPARAMETERS = ("sagemaker_mpi_enabled", "sagemaker_distributed_dataparallel_enabled")


@dataclass
class NodeRun:
    """One instance of a job: its place in the cluster, its process, the end of its output."""

    name: str  # algo-N
    group: str
    instance_type: str
    stream: str = ""
    proc: Any = None  # subprocess.Popen[bytes] once started
    exit_code: int | None = None
    tail: deque[tuple[bool, str]] = field(default_factory=lambda: deque(maxlen=TAIL_LINES))  # (stderr?, line)
    readers: list[threading.Thread] = field(default_factory=list)

    def last_error_line(self) -> str:
        """The last stderr line (else the last line at all): what a person would look at first."""
        for is_err, line in reversed(self.tail):
            if is_err and line.strip():
                return line.strip()
        for _, line in reversed(self.tail):
            if line.strip():
                return line.strip()
        return ""


def plan_nodes(resource_config: dict[str, Any]) -> list[NodeRun]:
    """algo-1..N over the instance groups in request order (one homogeneous group without them)."""
    groups = resource_config.get("InstanceGroups") or [
        {
            "InstanceGroupName": HOMOGENEOUS,
            "InstanceType": resource_config.get("InstanceType", "ml.m5.xlarge"),
            "InstanceCount": resource_config.get("InstanceCount", 1),
        }
    ]
    nodes: list[NodeRun] = []
    for group in groups:
        for _ in range(int(group["InstanceCount"])):
            nodes.append(NodeRun(f"algo-{len(nodes) + 1}", group["InstanceGroupName"], group["InstanceType"]))
    return nodes


def resource_config(node: NodeRun, nodes: list[NodeRun]) -> dict[str, Any]:
    groups: dict[str, dict[str, Any]] = {}
    for other in nodes:
        entry = groups.setdefault(
            other.group, {"instance_group_name": other.group, "instance_type": other.instance_type, "hosts": []}
        )
        entry["hosts"].append(other.name)
    return {
        "current_host": node.name,
        "current_instance_type": node.instance_type,
        "current_group_name": node.group,
        "hosts": sorted((other.name for other in nodes), key=_host_order),
        "instance_groups": list(groups.values()),
        "network_interface_name": NETWORK_INTERFACE,
    }


def _host_order(host: str) -> tuple[int, str]:
    # numeric (algo-9 before algo-10); either order keeps algo-1, the toolkit's master (hosts[0]), first
    suffix = host.rsplit("-", 1)[-1]
    return (int(suffix), host) if suffix.isdigit() else (1 << 30, host)


def write_config(root: Path, node: NodeRun, nodes: list[NodeRun], request: dict[str, Any]) -> None:
    config = root / "input" / "config"
    config.mkdir(parents=True, exist_ok=True)
    algorithm = request.get("AlgorithmSpecification", {})
    files: dict[str, Any] = {
        "resourceconfig.json": resource_config(node, nodes),
        "hyperparameters.json": request.get("HyperParameters", {}),
        "inputdataconfig.json": {
            channel["ChannelName"]: channel_config(channel, algorithm) for channel in request.get("InputDataConfig", [])
        },
        "trainingjobconfig.json": {key: value for key, value in request.items() if key != "Tags"},
    }
    if "CheckpointConfig" in request:
        files["checkpointconfig.json"] = {
            "S3Uri": request["CheckpointConfig"]["S3Uri"],
            "LocalPath": request["CheckpointConfig"].get("LocalPath", "/opt/ml/checkpoints"),
        }
    for name, content in files.items():
        (config / name).write_text(json.dumps(content), encoding="utf-8")
    for sub in ("input/data", "model", "output/data", "code"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    for channel in request.get("InputDataConfig", []):
        (root / "input" / "data" / channel["ChannelName"]).mkdir(parents=True, exist_ok=True)


def needs_mpi_sshd(hyperparameters: dict[str, str]) -> bool:
    for name in MPI_HYPERPARAMETERS:
        raw = hyperparameters.get(name)
        if raw is None:
            continue
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw
        if value is True or str(value).lower() == "true":
            return True
    return False


def gpu_shim(directory: Path, count: int, instance_type: str) -> Path:
    """An ``nvidia-smi`` that lists ``count`` GPUs: the toolkit's processes-per-host probe (see images.py)."""
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        f"# remote-debug emulator: {count} process slot(s) per host for {instance_type}, reported as GPUs\n"
        "# so that AWS's training toolkit starts that many processes; there is no CUDA behind them.\n"
        f'i=0; while [ "$i" -lt {count} ]; do\n'
        '  echo "GPU $i: Emulated process slot (UUID: GPU-remote-debug-emulator-$i)"; i=$((i+1))\n'
        "done\n",
        encoding="utf-8",
    )
    script.chmod(0o755)
    return directory


def node_environment(
    *,
    node: NodeRun,
    image: ImageEnv,
    shim_dir: Path | None,
    job_name: str,
    job_arn: str,
    region: str,
    endpoint_url: str | None,
    environment: dict[str, str],
    keys: Keys,
) -> dict[str, str]:
    """The node's whole environment (nothing of the emulator's own leaks in, as with ``docker run``).

    ``endpoint_url`` None: a network-isolated job, which on AWS gets no route out and no role
    credentials either."""
    path = [str(image.bin_dir), *([str(shim_dir)] if shim_dir else []), *SYSTEM_PATH]
    env = {
        "PATH": os.pathsep.join(path),
        "HOME": "/root" if os.geteuid() == 0 else os.path.expanduser("~"),
        "HOSTNAME": node.name,
    }
    env.update(image.env)
    env.update(
        {
            "TRAINING_JOB_NAME": job_name,
            "TRAINING_JOB_ARN": job_arn,
            "AWS_REGION": region,
            "AWS_DEFAULT_REGION": region,
            # offline there is no instance metadata service: probing it costs botocore seconds per client
            "AWS_EC2_METADATA_DISABLED": "true",
        }
    )
    if endpoint_url is not None:
        env.update(
            {
                "AWS_ENDPOINT_URL": endpoint_url,
                **keys.env(),
            }
        )
    env.update(environment)
    return env


def command(request: dict[str, Any], image: ImageEnv) -> list[str]:
    algorithm = request.get("AlgorithmSpecification", {})
    entrypoint = list(algorithm.get("ContainerEntrypoint", []))
    arguments = list(algorithm.get("ContainerArguments", []))
    if entrypoint:
        return entrypoint + arguments
    # `docker run <image> train`: the DLC images' ENTRYPOINT only sets the hostname and execs its
    # arguments, so ContainerArguments without an entrypoint replace "train", as they would there
    return arguments or image.train_argv()


def start_readers(
    node: NodeRun,
    sink: Callable[[str], None],
    log_file: IO[str],
    log_lock: threading.Lock,
) -> None:
    """One thread per pipe: each line to ``sink`` (CloudWatch), the node's log file and its tail."""

    def read(pipe: IO[bytes], is_err: bool) -> None:
        with pipe:
            for raw in iter(pipe.readline, b""):
                line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                node.tail.append((is_err, line))
                with log_lock:
                    log_file.write(line + "\n")
                    log_file.flush()
                sink(line)

    for pipe, is_err in ((node.proc.stdout, False), (node.proc.stderr, True)):
        thread = threading.Thread(target=read, args=(pipe, is_err), name=f"emulator-out-{node.name}", daemon=True)
        thread.start()
        node.readers.append(thread)
