"""A SIGKILLed emulator leaves nothing behind: its jobs' processes and network namespaces go with it.

``close()`` (Ctrl-C, SIGTERM) always cleaned up; a SIGKILL (the OOM killer, ``kill -9``) left a running job
training on in its namespaces, which stayed in /run/netns until removed by hand.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import boto3
import pytest

from remote_debug.emulator.nodes import Cluster, available
from remote_debug.oskit import netns

WHY_NO_NODES = available()
pytestmark = pytest.mark.skipif(WHY_NO_NODES is not None, reason=f"emulated nodes unavailable: {WHY_NO_NODES}")
MARKER = f"remote-debug-janitor-test-{os.getpid()}"


def _marked() -> list[int]:
    """Processes running the job's command (its marker is in their command line)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if MARKER.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_a_killed_emulator_takes_its_jobs_and_namespaces_with_it(tmp_path: Path) -> None:
    state = tmp_path / "state"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "REMOTE_DEBUG_"))}
    emulator = subprocess.Popen(
        [sys.executable, "-m", "remote_debug", "emulator", "--json", "--state", str(state), "--log-delay", "0.1"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    namespaces: list[str] = []
    try:
        assert emulator.stdout is not None
        started = json.loads(emulator.stdout.readline())
        url = started["endpoint_url"]
        keys = {"aws_access_key_id": started["access_key_id"], "aws_secret_access_key": started["secret_access_key"]}
        sm = boto3.client("sagemaker", endpoint_url=url, region_name="us-east-1", **keys)
        boto3.client("s3", endpoint_url=url, region_name="us-east-1", **keys).create_bucket(Bucket="janitor-bucket")
        sm.create_training_job(
            TrainingJobName="janitor-job",
            RoleArn="arn:aws:iam::123456789012:role/R",
            AlgorithmSpecification={
                "TrainingImage": "123456789012.dkr.ecr.us-east-1.amazonaws.com/byoc:1",
                "TrainingInputMode": "File",
                "ContainerEntrypoint": [sys.executable, "-c", "import time; time.sleep(600)", MARKER],
            },
            OutputDataConfig={"S3OutputPath": "s3://janitor-bucket/out"},
            ResourceConfig={"InstanceType": "ml.m5.large", "InstanceCount": 2, "VolumeSizeInGB": 1},
            StoppingCondition={"MaxRuntimeInSeconds": 900},
        )
        deadline = time.monotonic() + 60
        while len(_marked()) < 2:  # one per node
            assert time.monotonic() < deadline, "the job never started on both nodes"
            time.sleep(0.1)
        namespaces = Cluster("janitor-job", state / "jobs" / "janitor-job", ["algo-1", "algo-2"]).namespaces()
        assert all(netns.exists(ns) for ns in namespaces)

        os.kill(emulator.pid, signal.SIGKILL)  # no close(), no handler: the janitor is all that is left
        emulator.wait()
        deadline = time.monotonic() + 30
        while (_marked() or any(netns.exists(ns) for ns in namespaces)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _marked() == [], "the job's processes outlived the emulator"
        assert [ns for ns in namespaces if netns.exists(ns)] == [], "its namespaces outlived the emulator"
    finally:
        if emulator.poll() is None:
            os.killpg(emulator.pid, signal.SIGKILL)
            emulator.wait()
        for pid in _marked():
            os.kill(pid, signal.SIGKILL)
        netns.delete(namespaces)


def test_a_clean_close_dismisses_the_janitor(tmp_path: Path) -> None:
    from remote_debug.emulator.service import Emulator

    emulator = Emulator(tmp_path / "state")
    emulator.start()
    janitor = emulator._janitor
    assert janitor is not None and janitor.poll() is None
    emulator.close()
    assert janitor.wait(timeout=10) == 0
