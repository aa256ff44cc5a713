"""Regions as AWS keeps them: a job, its ARN, its logs and its SSM targets live in the region of the request.

A launcher that names its own region (``boto3.Session(region_name="eu-west-1")``) is common; the emulator used to
list such a job in every region while shipping its logs to its default one, so ``attach`` in the job's region
waited for a manifest that never came.
"""

from __future__ import annotations

import sys
import textwrap
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from remote_debug.emulator.logship import LOG_GROUP
from remote_debug.emulator.nodes import available
from remote_debug.emulator.service import Emulator

WHY_NO_NODES = available()
pytestmark = pytest.mark.skipif(WHY_NO_NODES is not None, reason=f"emulated nodes unavailable: {WHY_NO_NODES}")

DEFAULT = "us-east-1"
OTHER = "eu-west-1"
ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    emulator = Emulator(tmp_path_factory.mktemp("regions") / "state", region=DEFAULT, log_delay=0.1, agent_delay=0.0)
    emulator.start()
    try:
        yield emulator
    finally:
        emulator.close()


def client(emulator: Emulator, service: str, region: str) -> Any:
    return boto3.client(
        service,
        endpoint_url=emulator.url,
        region_name=region,
        aws_access_key_id=emulator.keys.access_key_id,
        aws_secret_access_key=emulator.keys.secret_access_key,
    )


def request(name: str, code: str, **extra: Any) -> dict[str, Any]:
    return {
        "TrainingJobName": name,
        "RoleArn": ROLE,
        "AlgorithmSpecification": {
            "TrainingImage": "123456789012.dkr.ecr.eu-west-1.amazonaws.com/byoc:1",
            "TrainingInputMode": "File",
            "ContainerEntrypoint": [sys.executable, "-u", "-c", textwrap.dedent(code)],
        },
        "OutputDataConfig": {"S3OutputPath": "s3://region-bucket/out"},
        "ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 1},
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
        **extra,
    }


def wait_for(sm: Any, name: str, done: Any, timeout: float = 90) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        answer: dict[str, Any] = sm.describe_training_job(TrainingJobName=name)
        if done(answer):
            return answer
        assert time.monotonic() < deadline, answer
        time.sleep(0.2)


def job_lines(logs: Any, job: str) -> list[str]:
    try:
        events = logs.filter_log_events(logGroupName=LOG_GROUP, logStreamNamePrefix=f"{job}/")["events"]
    except ClientError as exc:  # no log group in that region at all
        assert exc.response["Error"]["Code"] == "ResourceNotFoundException"
        return []
    return [event["message"] for event in events]


def test_a_job_its_logs_and_its_arn_live_in_the_region_of_the_request(emulator: Emulator) -> None:
    client(emulator, "s3", OTHER).create_bucket(
        Bucket="region-bucket", CreateBucketConfiguration={"LocationConstraint": OTHER}
    )
    here, there = client(emulator, "sagemaker", OTHER), client(emulator, "sagemaker", DEFAULT)
    code = "import os; print('region', os.environ['AWS_REGION'], os.environ['AWS_DEFAULT_REGION'])"
    arn = here.create_training_job(**request("regional-job", code))["TrainingJobArn"]
    assert arn == f"arn:aws:sagemaker:{OTHER}:123456789012:training-job/regional-job"
    final = wait_for(here, "regional-job", lambda d: d["TrainingJobStatus"] != "InProgress")
    assert final["TrainingJobStatus"] == "Completed", final.get("FailureReason")

    # unknown in every other region, as AWS answers for a job that is not there
    with pytest.raises(ClientError) as caught:
        there.describe_training_job(TrainingJobName="regional-job")
    assert caught.value.response["Error"]["Code"] == "ValidationException"
    assert "regional-job" not in [s["TrainingJobName"] for s in there.list_training_jobs()["TrainingJobSummaries"]]
    assert "regional-job" in [s["TrainingJobName"] for s in here.list_training_jobs()["TrainingJobSummaries"]]
    with pytest.raises(ClientError):
        there.list_tags(ResourceArn=arn)

    # its output reaches CloudWatch in its own region only, and the container knows its region
    deadline = time.monotonic() + 30
    while not job_lines(client(emulator, "logs", OTHER), "regional-job"):
        assert time.monotonic() < deadline, "the job's log never reached CloudWatch in its region"
        time.sleep(0.2)
    assert job_lines(client(emulator, "logs", OTHER), "regional-job") == [f"region {OTHER} {OTHER}"]
    assert job_lines(client(emulator, "logs", DEFAULT), "regional-job") == []

    # a name is unique per region, not per account
    there.create_training_job(**request("regional-job", "print('default region')"))
    assert (
        wait_for(there, "regional-job", lambda d: d["TrainingJobStatus"] != "InProgress")["TrainingJobStatus"]
        == "Completed"
    )


def test_ssm_targets_are_regional_too(emulator: Emulator) -> None:
    here = client(emulator, "sagemaker", OTHER)
    here.create_training_job(
        **request("regional-debug", "import time; time.sleep(60)", RemoteDebugConfig={"EnableRemoteDebug": True})
    )
    try:
        wait_for(here, "regional-debug", lambda d: d["SecondaryStatus"] == "Training")
        target = "sagemaker-training-job:regional-debug_algo-1"
        with pytest.raises(ClientError) as caught:
            client(emulator, "ssm", DEFAULT).start_session(Target=target)
        assert caught.value.response["Error"]["Code"] == "TargetNotConnected"
        ssm = client(emulator, "ssm", OTHER)
        session = ssm.start_session(Target=target)
        ssm.terminate_session(SessionId=session["SessionId"])
    finally:
        here.stop_training_job(TrainingJobName="regional-debug")
