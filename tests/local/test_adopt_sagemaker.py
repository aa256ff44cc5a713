"""``remote-debug adopt JOB``: a SageMaker job started WITHOUT remote_debug, adopted and debugged, offline.

The emulator (``remote-debug emulator``, a subprocess) runs a plain PyTorch script through AWS's training
toolkit (``torch_distributed``: torchrun on 2 nodes x 2 processes), created with plain boto3: no
``remote_debug.enable``, no spec in its environment, remote debugging off.  Then the real CLI: ``adopt JOB
--json`` (UpdateTrainingJob, an SSM shell per node through AWS's real plugin, bundle upload, probe, node
daemon, gdb pending calls) and ``attach JOB --headless``, where every rank stops with its own values.

Skipped like ``tests/emulator/test_sagemaker_e2e.py`` (whose emulator fixture this uses): no plugin binary,
or no namespaces (not root); also without gdb, torch or AWS's toolkit here.
"""

from __future__ import annotations

import importlib.util
import io
import json
import shutil
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest

from tests.emulator.test_sagemaker_e2e import (
    BUCKET,
    DLC_IMAGE,
    DLC_NO_SUDO_IMAGE,
    MULTI_NODE_TYPE,
    PLUGIN,
    ROLE,
    Emulator,
    emulator,
    wait_for_training,
)

__all__ = ["emulator"]  # the module-scoped fixture, shared

IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.5-cpu-py311"
MISSING = [
    m for m in ("torch", "sagemaker_training", "sagemaker_pytorch_container") if importlib.util.find_spec(m) is None
]
pytestmark = [
    pytest.mark.skipif(PLUGIN is None, reason="AWS's session-manager-plugin binary is not here (../shared/tools)"),
    pytest.mark.skipif(bool(MISSING), reason=f"not installed: {', '.join(MISSING)}"),
    pytest.mark.skipif(shutil.which("gdb") is None, reason="gdb is not installed (Python < 3.14 ranks need it)"),
    pytest.mark.timeout(600),
]

# An ordinary DDP-style script: nothing debug-related, a loop that runs until the job is stopped.
TRAIN = """\
import os
import time

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    node = os.uname().nodename
    total = torch.ones(1)
    for step in range(3000):
        total.fill_(rank)
        dist.all_reduce(total)
        time.sleep(0.2)
        print(f"rank {rank} step {step} total {int(total.item())}", flush=True)  # a good breakpoint
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""


def create_plain_job(emu: Emulator, job: str, nodes: int = 2, image: str = IMAGE, **extra: object) -> None:
    """What the SDK v2 PyTorch estimator sends for torch_distributed, without remote debugging."""
    source = io.BytesIO()
    with tarfile.open(fileobj=source, mode="w:gz") as tar:
        data = TRAIN.encode()
        info = tarfile.TarInfo("train.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    emu.client("s3").put_object(Bucket=BUCKET, Key=f"{job}/sourcedir.tar.gz", Body=source.getvalue())
    emu.client("sagemaker").create_training_job(
        TrainingJobName=job,
        RoleArn=ROLE,
        AlgorithmSpecification={"TrainingImage": image, "TrainingInputMode": "File"},
        HyperParameters={
            "sagemaker_program": json.dumps("train.py"),
            "sagemaker_submit_directory": json.dumps(f"s3://{BUCKET}/{job}/sourcedir.tar.gz"),
            "sagemaker_torch_distributed_enabled": "true",
        },
        OutputDataConfig={"S3OutputPath": f"s3://{BUCKET}/{job}"},
        ResourceConfig={"InstanceType": MULTI_NODE_TYPE, "InstanceCount": nodes, "VolumeSizeInGB": 1},
        StoppingCondition={"MaxRuntimeInSeconds": 900},
        **extra,
    )


def wait_for_ranks(emu: Emulator, job: str, nodes: int = 2, timeout: float = 120) -> None:
    """Until torchrun has started the job's ranks (2 per node), seen in /proc: the emulated nodes share the
    machine's PID space.  Then a moment for them to reach their loop."""
    del emu
    wanted = (f"TRAINING_JOB_NAME={job}\0".encode(), b"\0LOCAL_RANK=")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = 0
        for environ in Path("/proc").glob("[0-9]*/environ"):
            try:
                data = b"\0" + environ.read_bytes()
            except OSError:
                continue
            found += all(part in data for part in wanted)
        if found >= 2 * nodes:
            time.sleep(3)
            return
        time.sleep(1)
    raise AssertionError(f"the ranks of {job} never started")


def test_adopt_a_plain_sagemaker_job_then_every_rank_stops(emulator: Emulator) -> None:
    emu = emulator
    job = f"rd-adopt-{time.strftime('%H%M%S')}"
    sagemaker = emu.client("sagemaker")
    create_plain_job(emu, job)
    try:
        wait_for_training(emu, job)
        wait_for_ranks(emu, job)
        before = sagemaker.describe_training_job(TrainingJobName=job)
        assert not before.get("RemoteDebugConfig", {}).get("EnableRemoteDebug")
        refused = emu.cli("attach", job, "--headless", "--json")
        assert refused.returncode == 2 and "not started with remote-debug" in refused.stderr, refused.stderr

        started = time.monotonic()
        adopted = emu.cli("adopt", job, "--json", timeout=400)
        took = time.monotonic() - started
        assert adopted.returncode == 0, adopted.stderr[-3000:]
        outcome = json.loads(adopted.stdout)
        print(f"adopt {job}: {took:.1f} s for 2 nodes")
        assert outcome["job"] == job and outcome["already"] is False
        assert outcome["nodes"] == ["algo-1", "algo-2"]
        assert [r["rank"] for r in outcome["ranks"]] == [0, 1, 2, 3], outcome
        assert {r["rank"]: r["node"] for r in outcome["ranks"]} == {0: "algo-1", 1: "algo-1", 2: "algo-2", 3: "algo-2"}
        assert all(r["state"] != "failed" for r in outcome["ranks"]), outcome
        after = sagemaker.describe_training_job(TrainingJobName=job)
        assert after["RemoteDebugConfig"]["EnableRemoteDebug"] is True
        tags = {t["Key"]: t["Value"] for t in sagemaker.list_tags(ResourceArn=after["TrainingJobArn"])["Tags"]}
        assert tags["remote-debug:transport"] == "ssm"
        assert spec_free(after), "adopting must not touch the job's environment"

        stops = attach_and_stop(emu, job)
        assert sorted(stops) == [0, 1, 2, 3], stops
        for rank, stop in stops.items():
            node = f"algo-{rank // 2 + 1}"
            assert stop["node"] == node and stop["line"] == BREAK_LINE
            assert stop["variables"]["rank"] == str(rank)  # each rank's own value
            assert stop["variables"]["node"] == repr(node)  # and it runs in its own node

        again = emu.cli("adopt", job, "--json", timeout=400)  # adopting twice changes nothing
        assert again.returncode == 0, again.stderr[-3000:]
        assert json.loads(again.stdout)["already"] is True
    finally:
        end_job(emu, job)


def test_adopt_on_a_node_of_awss_own_image_no_gdb_and_ssm_user(emulator: Emulator) -> None:
    """A node as AWS's PyTorch images make it: no gdb, the SSM shell as ssm-user.  With passwordless sudo adopt
    takes root through it and queues the agent with its own ptrace call, and both ranks stop; without sudo it is
    refused in one line and nothing of ours stays in the container."""
    emu = emulator
    job = f"rd-adopt-dlc-{time.strftime('%H%M%S')}"
    no_sudo = f"rd-adopt-nosudo-{time.strftime('%H%M%S')}"
    create_plain_job(emu, job, nodes=1, image=DLC_IMAGE)
    create_plain_job(emu, no_sudo, nodes=1, image=DLC_NO_SUDO_IMAGE)
    try:
        wait_for_training(emu, job)
        wait_for_ranks(emu, job, nodes=1)
        adopted = emu.cli("adopt", job, "--json", timeout=400)
        assert adopted.returncode == 0, adopted.stderr[-3000:]
        outcome = json.loads(adopted.stdout)
        assert [r["rank"] for r in outcome["ranks"]] == [0, 1], outcome
        stops = attach_and_stop(emu, job)
        assert sorted(stops) == [0, 1] and all(s["variables"]["rank"] == str(r) for r, s in stops.items())

        wait_for_training(emu, no_sudo)
        refused = emu.cli("adopt", no_sudo, "--json", timeout=400)
        assert refused.returncode == 2, refused.stderr[-2000:]
        errors = [line for line in refused.stderr.splitlines() if line.startswith("remote-debug: error:")]
        assert len(errors) == 1 and "is not root and may not sudo" in errors[0], refused.stderr
        assert not list(Path("/tmp").glob(f"remote-debug-adopt-{no_sudo}.*"))
    finally:
        end_job(emu, job)
        end_job(emu, no_sudo)


BREAK_LINE = next(i for i, text in enumerate(TRAIN.splitlines(), 1) if "a good breakpoint" in text)


def attach_and_stop(emu: Emulator, job: str) -> dict[int, dict[str, Any]]:
    """``attach JOB --headless`` with a breakpoint on the training script's marked line, from a workspace holding
    the script; each rank's ``stopped`` event."""
    workspace = emu.tmp / f"ws-{job}"
    workspace.mkdir()
    train = workspace / "train.py"
    train.write_text(TRAIN)
    attach = emu.cli(
        "attach",
        job,
        "--headless",
        "--break",
        f"{train}:{BREAK_LINE}",
        "--json",
        "--workspace",
        str(workspace),
        "--no-ssh-include",
        "--timeout",
        "180",
        timeout=400,
    )
    assert attach.returncode == 0, attach.stderr[-3000:]
    return {e["rank"]: e for e in map(json.loads, attach.stdout.splitlines()) if e["event"] == "stopped"}


def end_job(emu: Emulator, job: str) -> None:
    """The job stopped, and what adopt left in the emulated nodes' /tmp (the machine's: no namespace of its own)."""
    sagemaker = emu.client("sagemaker")
    if sagemaker.describe_training_job(TrainingJobName=job)["TrainingJobStatus"] == "InProgress":
        sagemaker.stop_training_job(TrainingJobName=job)
        emu_wait_ended(emu, job)
    for left in Path("/tmp").glob(f"remote-debug-adopt-{job}.*"):  # node_dir's random names
        shutil.rmtree(left, ignore_errors=True)


def emu_wait_ended(emu: Emulator, job: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while emu.client("sagemaker").describe_training_job(TrainingJobName=job)["TrainingJobStatus"] in (
        "InProgress",
        "Stopping",
    ):
        assert time.monotonic() < deadline, f"{job} did not stop"
        time.sleep(0.5)


def spec_free(description: dict[str, object]) -> bool:
    environment = description.get("Environment") or {}
    assert isinstance(environment, dict)
    return not any(str(name).startswith("REMOTE_DEBUG_") for name in environment)


def test_refusals_are_one_line_and_leave_nothing(emulator: Emulator) -> None:
    emu = emulator
    unknown = emu.cli("adopt", "no-such-job-here", "--json")
    assert unknown.returncode == 2 and len(unknown.stderr.strip().splitlines()) == 1, unknown.stderr

    isolated = f"rd-adopt-iso-{time.strftime('%H%M%S')}"
    opted_out = f"rd-adopt-out-{time.strftime('%H%M%S')}"
    create_plain_job(emu, isolated, nodes=1, EnableNetworkIsolation=True)
    create_plain_job(emu, opted_out, nodes=1, Environment={"PYTHON_DISABLE_REMOTE_DEBUG": "1"})
    try:
        wait_for_training(emu, isolated)
        result = emu.cli("adopt", isolated, "--json")
        assert result.returncode == 2, result.stderr
        assert result.stderr.strip().splitlines() == [
            f"remote-debug: error: job {isolated} runs with network isolation, which SageMaker's remote debugging "
            "(SSM) cannot reach: relaunch it without EnableNetworkIsolation to debug it"
        ]

        wait_for_training(emu, opted_out)
        wait_for_ranks(emu, opted_out, nodes=1)
        result = emu.cli("adopt", opted_out, "--json", timeout=300)
        assert result.returncode == 2, result.stderr
        # one error line (a progress line may come before it: the node's SSM agent had not come online yet)
        (line,) = [text for text in result.stderr.splitlines() if text.startswith("remote-debug: error:")]
        assert line.startswith("remote-debug: error: cannot adopt algo-1: rank 0 (pid ") and line.endswith(
            "opted out of remote debugging (PYTHON_DISABLE_REMOTE_DEBUG)"
        ), line
        arn = emu.client("sagemaker").describe_training_job(TrainingJobName=opted_out)["TrainingJobArn"]
        tags = {t["Key"] for t in emu.client("sagemaker").list_tags(ResourceArn=arn)["Tags"]}
        assert tags <= {"remote-debug:owner"}  # claimed (to be allowed to turn remote debug on), not made debuggable
        assert not list(Path("/tmp").glob(f"remote-debug-adopt-{opted_out}.*"))  # nor left anything in the node
        assert not (emu.home / ".remote-debug" / "keys" / opted_out).exists()  # nor made a key
    finally:
        end_job(emu, isolated)
        end_job(emu, opted_out)
