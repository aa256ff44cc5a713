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
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest

from remote_debug.emulator.nodes import available
from tests.sagemaker import sdk_env

REPO = Path(__file__).resolve().parents[2]
LAUNCHERS = REPO / "templates" / "launchers"
REGION = "us-east-1"
ROLE = "arn:aws:iam::123456789012:role/SageMakerExecution"
BUCKET = "rd-e2e"
# The instance type the launchers use for several nodes, with 2 "GPUs" = 2 processes per node (see
# remote_debug/emulator/images.py: a process count for the toolkit, training runs on the CPU).
MULTI_NODE_TYPE = "ml.g5.12xlarge"
IMAGE_MAP = {"gpus": {MULTI_NODE_TYPE: 2}}


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

    def client(self, service: str) -> Any:
        return boto3.client(
            service,
            endpoint_url=self.url,
            region_name=REGION,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "remote_debug", *args],
            env=self.env,
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
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION=REGION,
        AWS_REGION=REGION,
        PATH=os.pathsep.join([str(PLUGIN.parent), str(Path(sys.executable).parent), base.get("PATH", "")]),
        SAGEMAKER_VALIDATE_ROLE="false",  # SDK v3 simulates the role's policy first; IAM is not emulated
    )
    log = (tmp / "emulator.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "remote_debug", "emulator", "--json", "--state", str(tmp / "state"),
         "--images", str(tmp / "images.json"), "--log-delay", "0.2"],
        env=base,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, (tmp / "emulator.log").read_text()
        url = json.loads(line)["endpoint_url"]
        env = {**base, "AWS_ENDPOINT_URL": url}
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


def wait_for_training(emu: Emulator, job: str, timeout: float = 180) -> None:
    sm = emu.client("sagemaker")
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


def debug_every_rank(emu: Emulator, job: str, ranks: int, nodes: int) -> None:
    """What a user does with a running job, each step through the real plugin; then the job completes."""
    wait_for_training(emu, job)
    hostname = emu.cli("ssh", job, "--node", f"algo-{nodes}", "--", "hostname")
    assert hostname.returncode == 0 and hostname.stdout.strip() == f"algo-{nodes}", hostname.stderr

    # every rank's Python stacks, once every rank has started (they wait for a debugger meanwhile)
    deadline = time.monotonic() + 120
    while True:
        stacks = emu.cli("stacks", job, "--json")
        assert stacks.returncode == 0, stacks.stderr
        seen = sorted(r["rank"] for r in json.loads(stacks.stdout)["ranks"])
        if seen == list(range(ranks)) or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert seen == list(range(ranks))

    workspace = emu.tmp / f"ws-{job}"
    shutil.copytree(LAUNCHERS / "code", workspace)
    train = workspace / "train.py"
    attach = emu.cli(
        "attach", job, "--headless", "--break", f"{train}:{break_line(train)}", "--json",
        "--workspace", str(workspace), "--no-ssh-include", "--timeout", "180",
        timeout=400,
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
    final = emu.client("sagemaker").describe_training_job(TrainingJobName=job)
    assert final["TrainingJobStatus"] == "Completed"
    assert [t["Status"] for t in final["SecondaryStatusTransitions"]][-2:] == ["Uploading", "Completed"]


def test_boto3_byoc_launcher_unchanged_torchrun_two_nodes(emulator: Emulator) -> None:
    job = "rd-e2e-boto3"
    launch = subprocess.run(
        [sys.executable, str(LAUNCHERS / "boto3_request.py"), "--role", ROLE, "--bucket", BUCKET,
         "--image", f"763104351884.dkr.ecr.{REGION}.amazonaws.com/pytorch-training:2.5-cpu-py311",
         "--nodes", "2", "--procs-per-node", "2", "--instance-type", "ml.c5.xlarge", "--job", job],
        env=emulator.env, capture_output=True, text=True, timeout=120, check=False,
    )
    assert launch.returncode == 0, launch.stderr[-3000:]
    debug_every_rank(emulator, job, ranks=4, nodes=2)


def test_sdk_v2_pytorch_estimator_torch_distributed_through_the_toolkit(emulator: Emulator) -> None:
    python = sdk_env.ensure("v2")
    launch = subprocess.run(
        [str(python), str(LAUNCHERS / "sdk_v2_pytorch.py"), "--role", ROLE, "--nodes", "2",
         "--instance-type", MULTI_NODE_TYPE],
        env=emulator.env, capture_output=True, text=True, timeout=300, check=False,
    )
    assert launch.returncode == 0, launch.stderr[-3000:]
    job = launch.stdout.split("started ", 1)[1].split(":", 1)[0]
    debug_every_rank(emulator, job, ranks=4, nodes=2)


def test_sdk_v3_model_trainer_torchrun_two_nodes(emulator: Emulator) -> None:
    python = sdk_env.ensure("v3")
    launch = subprocess.run(
        [str(python), str(LAUNCHERS / "sdk_v3_model_trainer.py"), "--role", ROLE, "--region", REGION,
         "--nodes", "2", "--instance-type", MULTI_NODE_TYPE],
        env=emulator.env, capture_output=True, text=True, timeout=300, check=False,
    )
    assert launch.returncode == 0, launch.stderr[-3000:]
    jobs = emulator.client("sagemaker").list_training_jobs(NameContains="rd-v3-torchrun")["TrainingJobSummaries"]
    assert len(jobs) == 1, jobs
    debug_every_rank(emulator, jobs[0]["TrainingJobName"], ranks=4, nodes=2)
