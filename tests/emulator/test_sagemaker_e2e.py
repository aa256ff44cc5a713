"""The user's SageMaker path end to end, offline, with AWS's own code at every step but the endpoints.

``remote-debug emulator`` (a subprocess, as a user runs it) serves the AWS APIs; an unchanged launcher
from ``templates/launchers/`` creates the job through ``AWS_ENDPOINT_URL`` (plain boto3, or the real
SageMaker SDK v2 / v3 in their own venvs); the job runs on emulated nodes (network, mount and UTS
namespaces) under AWS's real training toolkit where the image's ``train`` is the entry. Then, with
nothing emulator-specific in the product: ``remote-debug ssh JOB --node algo-2 -- hostname`` and
``stacks`` and ``attach --headless`` go ``ssh`` -> ``remote-debug proxy`` -> AWS's real
session-manager-plugin -> the emulator's SSM data channel -> the node's sshd, and every rank on every
node stops at a breakpoint with its own values, and the job completes.

Skipped, with the reason, where the plugin binary is missing (a user's clone) or the machine cannot
make namespaces (not root). CI has both.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest

from remote_debug.emulator.nodes import available
from tests.helpers import sdk_env

REPO = Path(__file__).resolve().parents[2]
LAUNCHERS = REPO / "templates" / "launchers"
HERE = Path(__file__).resolve().parent
MPI_LAUNCHER = HERE / "mpi_launcher.py"
MPI_CODE = HERE / "mpi_code"
REGION = "us-east-1"
ROLE = "arn:aws:iam::123456789012:role/SageMakerExecution"
BUCKET = "rd-e2e"
# The instance type the launchers use for several nodes, with 2 "GPUs" = 2 processes per node (see
# remote_debug/emulator/images.py: a process count for the toolkit, training runs on the CPU).
MULTI_NODE_TYPE = "ml.g5.12xlarge"
# AWS's own PyTorch images, as nodes: no gdb, SSM shells as ssm-user, with or without passwordless sudo
DLC_IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.5-cpu-py311-dlc"
DLC_NO_SUDO_IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.5-cpu-py311-dlc-nosudo"
IMAGE_MAP = {
    "gpus": {MULTI_NODE_TYPE: 2},
    "images": {
        DLC_IMAGE: {"gdb": False, "shell_user": "ssm-user", "sudo": True},
        DLC_NO_SUDO_IMAGE: {"gdb": False, "shell_user": "ssm-user", "sudo": False},
    },
}


def _plugin() -> Path | None:
    candidates = [os.environ.get("REMOTE_DEBUG_SSM_PLUGIN", "")]
    candidates += [str(p / "shared/tools/session-manager-plugin/session-manager-plugin") for p in REPO.parents[:2]]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return Path(candidate)
    return None


PLUGIN = _plugin()
pytestmark = [
    pytest.mark.skipif(PLUGIN is None, reason="AWS's session-manager-plugin binary is not here (../shared/tools)"),
    pytest.mark.skipif(available() is not None, reason=f"no emulated nodes here: {available()}"),
    pytest.mark.timeout(600),
]


@dataclass
class Emulator:
    url: str
    env: dict[str, str]
    home: Path
    tmp: Path

    def client(self, service: str, region: str = REGION) -> Any:
        return boto3.client(
            service,
            endpoint_url=self.url,
            region_name=region,
            aws_access_key_id=self.env["AWS_ACCESS_KEY_ID"],  # the keys the emulator printed at start
            aws_secret_access_key=self.env["AWS_SECRET_ACCESS_KEY"],
        )

    def cli(self, *args: str, timeout: float = 120, region: str = REGION) -> subprocess.CompletedProcess[str]:
        """``remote-debug ARGS`` as the user runs it, with ``region`` exported (AWS_REGION, AWS_DEFAULT_REGION)."""
        return subprocess.run(
            [sys.executable, "-m", "remote_debug", *args],
            env={**self.env, "AWS_REGION": region, "AWS_DEFAULT_REGION": region},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    assert PLUGIN is not None
    tmp = tmp_path_factory.mktemp("emulator")
    home = tmp / "home"
    home.mkdir()
    (tmp / "images.json").write_text(json.dumps(IMAGE_MAP))
    # The SageMaker SDK's own config file (its "intelligent defaults"): a default bucket. Without it
    # the SDK names one after the account, which it asks STS at a hard-coded regional endpoint that
    # no AWS_ENDPOINT_URL redirects (sagemaker.utils.sts_regional_endpoint); the README says so.
    sdk_config = home / ".config" / "sagemaker"
    sdk_config.mkdir(parents=True)
    (sdk_config / "config.yaml").write_text(
        "SchemaVersion: '1.0'\nSageMaker:\n  PythonSDK:\n    Modules:\n      Session:\n"
        f"        DefaultS3Bucket: {BUCKET}\n"
    )
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "REMOTE_DEBUG_", "SM_"))}
    base.update(
        HOME=str(home),
        AWS_DEFAULT_REGION=REGION,
        AWS_REGION=REGION,
        PATH=os.pathsep.join([str(PLUGIN.parent), str(Path(sys.executable).parent), base.get("PATH", "")]),
        SAGEMAKER_VALIDATE_ROLE="false",  # SDK v3 simulates the role's policy first; IAM is not emulated
    )
    log = (tmp / "emulator.log").open("w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "remote_debug",
            "emulator",
            "--json",
            "--state",
            str(tmp / "state"),
            "--images",
            str(tmp / "images.json"),
            "--log-delay",
            "0.2",
        ],
        env=base,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, (tmp / "emulator.log").read_text()
        started = json.loads(line)
        url = started["endpoint_url"]
        # the keys it made at start, as a user exports them: it refuses any other signature
        env = {
            **base,
            "AWS_ENDPOINT_URL": url,
            "AWS_ACCESS_KEY_ID": started["access_key_id"],
            "AWS_SECRET_ACCESS_KEY": started["secret_access_key"],
        }
        emu = Emulator(url=url, env=env, home=home, tmp=tmp)
        emu.client("s3").create_bucket(Bucket=BUCKET)
        yield emu
    finally:
        proc.send_signal(signal.SIGTERM)  # an orderly end: it stops its jobs and removes its nodes
        try:
            proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
    assert proc.returncode == 0, (tmp / "emulator.log").read_text()[-3000:]


def wait_for_training(emu: Emulator, job: str, timeout: float = 180, region: str = REGION) -> None:
    sm = emu.client("sagemaker", region)
    deadline = time.monotonic() + timeout
    while True:
        d = sm.describe_training_job(TrainingJobName=job)
        if d["SecondaryStatus"] == "Training":
            return
        assert d["TrainingJobStatus"] == "InProgress", (d["TrainingJobStatus"], d.get("FailureReason"))
        assert time.monotonic() < deadline, f"{job} never reached Training: {d['SecondaryStatus']}"
        time.sleep(0.5)


def break_line(train: Path) -> int:
    return next(i for i, text in enumerate(train.read_text().splitlines(), 1) if "a good breakpoint" in text)


Stop = dict[str, Any]


def debug_every_rank(
    emu: Emulator,
    job: str,
    ranks: int,
    nodes: int,
    *,
    code: Path = LAUNCHERS / "code",
    script: str = "train.py",
    vscode_node: str | None = None,
    region: str = REGION,
    break_in: str | None = None,
) -> dict[int, Stop]:
    """What a user does with a running job, each step through the real plugin; then the job completes.

    ``vscode_node``: also connect to that node the way VS Code Remote-SSH does (see :func:`vscode_remote_ssh`)
    while the ranks wait for their debugger.  Returns each rank's ``stopped`` event."""
    wait_for_training(emu, job, region=region)
    hostname = emu.cli("ssh", job, "--node", f"algo-{nodes}", "--", "hostname", region=region)
    assert hostname.returncode == 0 and hostname.stdout.strip() == f"algo-{nodes}", hostname.stderr

    # every rank's Python stacks, once every rank has started (they wait for a debugger meanwhile)
    deadline = time.monotonic() + 120
    while True:
        stacks = emu.cli("stacks", job, "--json", region=region)
        assert stacks.returncode == 0, stacks.stderr
        seen = sorted(r["rank"] for r in json.loads(stacks.stdout)["ranks"])
        if seen == list(range(ranks)) or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert seen == list(range(ranks))

    if vscode_node is not None:
        vscode_remote_ssh(emu, job, vscode_node)

    workspace = emu.tmp / f"ws-{job}"
    shutil.copytree(code, workspace)
    train = workspace / (break_in or script)  # where the breakpoint goes: the script, or a module of the code
    attach = emu.cli(
        "attach",
        job,
        "--headless",
        "--follow",
        "--break",
        f"{train}:{break_line(train)}",
        "--json",
        "--workspace",
        str(workspace),
        "--no-ssh-include",
        "--timeout",
        "180",
        timeout=400,
        region=region,
    )
    assert attach.returncode == 0, attach.stderr[-3000:]
    events = [json.loads(line) for line in attach.stdout.splitlines()]
    stops = {e["rank"]: e for e in events if e["event"] == "stopped"}
    assert sorted(stops) == list(range(ranks)), [e["event"] for e in events]
    per_node = ranks // nodes
    for rank, stop in stops.items():
        assert stop["node"] == f"algo-{rank // per_node + 1}"
        assert stop["line"] == break_line(train)
        assert stop["variables"]["rank"] == str(rank)  # each rank's own value
    (ended,) = [e for e in events if e["event"] == "job-ended"]
    assert ended["status"] == "Completed", ended
    final = emu.client("sagemaker", region).describe_training_job(TrainingJobName=job)
    assert final["TrainingJobStatus"] == "Completed"
    assert [t["Status"] for t in final["SecondaryStatusTransitions"]][-2:] == ["Uploading", "Completed"]
    return stops


# --- VS Code Remote-SSH's pattern -----------------------------------------------------------------

VSCODE_MARKER = "remote-debug-vscode-e2e"


def _lines(pipe: Any, out: queue.Queue[str | None]) -> None:
    for raw in iter(pipe.readline, b""):
        out.put(raw.decode(errors="replace").rstrip("\r\n"))
    out.put(None)


def _read_until(lines: queue.Queue[str | None], wanted: str, seen: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while wanted not in seen:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError(f"no {wanted!r} within {timeout} s; the session printed {seen}") from None
        if line is None:
            raise AssertionError(f"the session ended before {wanted!r}; it printed {seen}")
        seen.append(line)


def socks5_connect(proxy_port: int, host: str, port: int, timeout: float = 30) -> socket.socket:
    """A SOCKS5 CONNECT (no auth, IPv4) through ssh's dynamic forward; returns the connected socket."""
    sock = socket.create_connection(("127.0.0.1", proxy_port), timeout=timeout)
    try:
        sock.sendall(b"\x05\x01\x00")  # version 5, one method: no authentication
        assert _recv_exact(sock, 2) == b"\x05\x00"
        sock.sendall(b"\x05\x01\x00\x01" + socket.inet_aton(host) + port.to_bytes(2, "big"))
        reply = _recv_exact(sock, 10)  # VER REP RSV ATYP=1 BND.ADDR(4) BND.PORT(2)
        assert reply[:2] == b"\x05\x00", f"SOCKS5 CONNECT to {host}:{port} refused: {reply!r}"
        return sock
    except BaseException:
        sock.close()
        raise


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise AssertionError(f"the SOCKS proxy closed the connection after {data!r}")
        data += chunk
    return data


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def vscode_remote_ssh(emu: Emulator, job: str, node: str) -> None:
    """VS Code Remote-SSH's connection, with the OpenSSH client and the Host entries we generate.

    VS Code runs ``ssh -T -D <port> <alias> bash`` and writes its install script on stdin; the SOCKS
    forward is how it then reaches its server in the remote.  Here: the entries ``ssh-config JOB``
    writes (``-F`` the generated config under the test HOME's state dir: pinned host keys, the proxy,
    AWS's plugin, the emulator's SSM channel), a script that prints a marker and ``hostname`` and
    stays open, a SOCKS5 CONNECT through ``-D`` to the node's sshd port (a listener only inside the
    node: its banner comes back), then the rest of the script and a clean exit."""
    config = emu.cli("ssh-config", job, "--json")
    assert config.returncode == 0, config.stderr[-2000:]
    written = json.loads(config.stdout)
    alias = f"{node}.{job}"
    assert alias in written["aliases"], written
    ssh_config = written["config"]
    assert Path(ssh_config).is_relative_to(emu.home), ssh_config  # the test HOME's state dir, not the user's
    ssh = shutil.which("ssh")
    assert ssh is not None
    # ssh's own reading of the entry: the node's sshd port (dialled through the proxy), pinned keys
    resolved = subprocess.run(
        [ssh, "-G", "-F", ssh_config, alias], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    options = dict(line.split(" ", 1) for line in resolved.splitlines() if " " in line)
    # the host key is pinned: our own known_hosts (under the test HOME), looked up by a HostKeyAlias
    assert options["stricthostkeychecking"] == "true" and options["hostkeyalias"].endswith(alias), options
    assert Path(options["userknownhostsfile"]).is_relative_to(emu.home), options
    sshd_port = int(options["port"])

    socks_port = _free_port()
    session = subprocess.Popen(
        [
            ssh,
            "-F",
            ssh_config,
            "-T",
            "-D",
            f"127.0.0.1:{socks_port}",
            "-o",
            "ConnectTimeout=15",
            "-o",
            "ExitOnForwardFailure=yes",
            "-o",
            "BatchMode=yes",
            alias,
            "bash",
        ],
        env=emu.env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert session.stdin is not None and session.stdout is not None and session.stderr is not None
    lines: queue.Queue[str | None] = queue.Queue()
    errors: list[bytes] = []
    stderr = session.stderr
    readers = [
        threading.Thread(target=_lines, args=(session.stdout, lines), daemon=True),
        threading.Thread(target=lambda: errors.append(stderr.read()), daemon=True),
    ]
    for reader in readers:
        reader.start()
    seen: list[str] = []
    try:
        session.stdin.write(f"echo {VSCODE_MARKER}-start\nhostname\necho {VSCODE_MARKER}-ready\n".encode())
        session.stdin.flush()
        _read_until(lines, f"{VSCODE_MARKER}-ready", seen, timeout=60)
        assert seen == [f"{VSCODE_MARKER}-start", node, f"{VSCODE_MARKER}-ready"], seen

        # the dynamic forward, while the session is open: a listener that exists only inside the node
        with socks5_connect(socks_port, "127.0.0.1", sshd_port) as tunnel:
            banner = tunnel.makefile("rb").readline()
        assert banner.startswith(b"SSH-2.0-"), banner

        session.stdin.write(f"echo {VSCODE_MARKER}-end\nexit 0\n".encode())
        session.stdin.close()
        _read_until(lines, f"{VSCODE_MARKER}-end", seen, timeout=30)
        assert session.wait(timeout=30) == 0
    finally:
        if session.poll() is None:
            session.kill()
            session.wait()
        for reader in readers:
            reader.join(10)
    assert session.returncode == 0, b"".join(errors).decode(errors="replace")[-2000:]


def test_boto3_byoc_launcher_unchanged_torchrun_two_nodes(emulator: Emulator) -> None:
    # a name of this run only: the emulated nodes share the host's /tmp, where a node's manifest dir
    # (/tmp/remote-debug/<job>/<node>) would otherwise hold an earlier run's rank documents
    job = f"rd-e2e-boto3-{time.strftime('%H%M%S')}-{os.getpid()}"
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
            "2",
            "--procs-per-node",
            "2",
            "--instance-type",
            "ml.c5.xlarge",
            "--job",
            job,
        ],
        env=emulator.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert launch.returncode == 0, launch.stderr[-3000:]
    debug_every_rank(emulator, job, ranks=4, nodes=2, vscode_node="algo-2")


def test_sdk_v2_pytorch_estimator_torch_distributed_through_the_toolkit(emulator: Emulator) -> None:
    python = sdk_env.ensure("v2")
    launch = subprocess.run(
        [
            str(python),
            str(LAUNCHERS / "sdk_v2_pytorch.py"),
            "--role",
            ROLE,
            "--nodes",
            "2",
            "--instance-type",
            MULTI_NODE_TYPE,
        ],
        env=emulator.env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert launch.returncode == 0, launch.stderr[-3000:]
    job = launch.stdout.split("started ", 1)[1].split(":", 1)[0]
    debug_every_rank(emulator, job, ranks=4, nodes=2)


def test_sdk_v3_model_trainer_torchrun_two_nodes(emulator: Emulator) -> None:
    python = sdk_env.ensure("v3")
    launch = subprocess.run(
        [
            str(python),
            str(LAUNCHERS / "sdk_v3_model_trainer.py"),
            "--role",
            ROLE,
            "--region",
            REGION,
            "--nodes",
            "2",
            "--instance-type",
            MULTI_NODE_TYPE,
        ],
        env=emulator.env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert launch.returncode == 0, launch.stderr[-3000:]
    jobs = emulator.client("sagemaker").list_training_jobs(NameContains="rd-v3-torchrun")["TrainingJobSummaries"]
    assert len(jobs) == 1, jobs
    debug_every_rank(emulator, jobs[0]["TrainingJobName"], ranks=4, nodes=2)


def test_sdk_v2_pytorch_estimator_mpi_two_nodes_two_processes(emulator: Emulator) -> None:
    """SDK v2 ``PyTorch(distribution={"mpi": ...})``: the toolkit on algo-1 runs mpirun over every node's sshd
    on port 22, each rank knows itself only from ``OMPI_COMM_WORLD_*``, and ``mpirun -x`` hands every
    rank the master's ``SM_CURRENT_HOST``; ranks 2 and 3 must still be reported (and stop) on algo-2."""
    python = sdk_env.ensure("v2")
    launch = subprocess.run(
        [
            str(python),
            str(MPI_LAUNCHER),
            "--role",
            ROLE,
            "--nodes",
            "2",
            "--processes-per-host",
            "2",
            "--instance-type",
            "ml.c5.xlarge",
        ],  # a CPU type: the count is processes_per_host's, not a GPU shim's
        env=emulator.env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert launch.returncode == 0, launch.stderr[-3000:]
    job = launch.stdout.split("started ", 1)[1].split()[0]
    hyperparameters = emulator.client("sagemaker").describe_training_job(TrainingJobName=job)["HyperParameters"]
    assert json.loads(hyperparameters["sagemaker_mpi_enabled"]) is True
    assert json.loads(hyperparameters["sagemaker_mpi_num_of_processes_per_host"]) == 2

    stops = debug_every_rank(emulator, job, ranks=4, nodes=2, code=MPI_CODE, script="train_mpi.py")
    for rank, stop in stops.items():
        values = stop["variables"]
        node = f"algo-{rank // 2 + 1}"
        assert values["size"] == "4" and values["total"] == "6", values  # the allreduce crossed both nodes
        assert values["node"] == repr(node), values  # the rank really runs there (its own UTS namespace)
        assert values["torchrun_vars"] == "[]", values  # MPI only: no RANK / LOCAL_RANK / WORLD_SIZE
        # the trap: every rank inherited the master's SM_CURRENT_HOST, yet stop["node"] above came out
        # right because the rank reads its node's resourceconfig.json first (container/node_env.py)
        assert values["sm_current_host"] == "'algo-1'", values
    assert {stops[2]["node"], stops[3]["node"]} == {"algo-2"}


# --- launchers written like a stranger's ------------------------------------------------------------------

STRANGERS = HERE / "strangers"


def test_a_strangers_launcher_in_its_own_region(emulator: Emulator) -> None:
    """A launcher that pins its own region (eu-west-1) while the shell says us-east-1: the job, its logs and its
    SSM targets live in eu-west-1, as in AWS.  Asked in the shell's region, attach says the job is not there and
    which region it looked in (it used to find the job everywhere, then wait silently for logs that had gone to
    the emulator's default region); asked in the job's region, every rank on both nodes stops."""
    job = f"rd-e2e-eu-{time.strftime('%H%M%S')}-{os.getpid()}"
    launch = subprocess.run(
        [sys.executable, str(STRANGERS / "eu_west_launcher.py"), job, str(LAUNCHERS / "code")],
        env=emulator.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert launch.returncode == 0, launch.stderr[-3000:]
    wait_for_training(emulator, job, region="eu-west-1")
    elsewhere = emulator.cli("attach", job, "--headless", "--json", "--timeout", "20")
    assert elsewhere.returncode == 2, elsewhere.stderr[-2000:]
    assert f"no SageMaker training job by that name in region {REGION} (from AWS_REGION)" in elsewhere.stderr
    assert "--region REGION" in elsewhere.stderr and len(elsewhere.stderr.splitlines()) == 1
    debug_every_rank(emulator, job, ranks=2, nodes=2, region="eu-west-1")


@pytest.mark.parametrize("how", ["torchrun", "mpi"])
def test_a_raw_toolkit_request_with_a_breakpoint_in_a_submodule(emulator: Emulator, how: str) -> None:
    """A hand-written request shaped like the SDK's (the image's own ``train``, ``sagemaker_program`` and
    ``sagemaker_submit_directory``, the hook in the ``remote-debug`` channel), on 2 nodes through the toolkit, under
    torchrun and under MPI.  The node daemon starts with the toolkit, before the code reaches /opt/ml/code: the
    node's code dir was "/" and a breakpoint given by workspace path, here in helpers/step.py, bound in 0 of 4 ranks.
    Each rank now reports where its code is."""
    job = f"rd-e2e-raw-{how}-{time.strftime('%H%M%S')}-{os.getpid()}"
    source = STRANGERS / "toolkit_src"
    launch = subprocess.run(
        [sys.executable, str(STRANGERS / "toolkit_raw_launcher.py"), job, str(source), how, BUCKET],
        env=emulator.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert launch.returncode == 0, launch.stderr[-3000:]
    stops = debug_every_rank(emulator, job, ranks=4, nodes=2, code=source, break_in="helpers/step.py")
    for stop in stops.values():
        assert stop["file"].endswith("helpers/step.py"), stop
        assert stop["variables"]["step"] == "0", stop["variables"]
