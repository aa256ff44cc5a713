"""The platform's SSM agent keeps its own time: sessions only once it is online, and StartSession is throttled.

AWS answers TargetNotConnected until the job's agent is online (some seconds after Training, or after
UpdateTrainingJob turned remote debugging on) and throttles StartSession; the emulator used to accept a session
the moment a job was Training.  The product's answer (``ssm.start_when_ready``): try again, spaced out, for up to
about 15 s, with one line to the user - not every 0.5-2 s, not silently.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from remote_debug.emulator.nodes import available
from remote_debug.emulator.service import Emulator
from remote_debug.laptop.aws import ssm

WHY_NO_NODES = available()
REGION = "us-east-1"
AGENT_DELAY = 2.0


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    emulator = Emulator(
        tmp_path_factory.mktemp("agent") / "state",
        region=REGION,
        log_delay=0.1,
        agent_delay=AGENT_DELAY,
        session_rate=(1.0, 3),
    )
    emulator.start()
    try:
        yield emulator
    finally:
        emulator.close()


def client(emulator: Emulator, service: str) -> Any:
    return boto3.client(
        service,
        endpoint_url=emulator.url,
        region_name=REGION,
        aws_access_key_id=emulator.keys.access_key_id,
        aws_secret_access_key=emulator.keys.secret_access_key,
    )


def sleeping_job(sm: Any, name: str, **extra: Any) -> None:
    sm.create_training_job(
        TrainingJobName=name,
        RoleArn="arn:aws:iam::123456789012:role/R",
        AlgorithmSpecification={
            "TrainingImage": "123456789012.dkr.ecr.us-east-1.amazonaws.com/byoc:1",
            "TrainingInputMode": "File",
            "ContainerEntrypoint": [sys.executable, "-c", "import time; time.sleep(120)"],
        },
        OutputDataConfig={"S3OutputPath": "s3://agent-bucket/out"},
        ResourceConfig={"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 1},
        StoppingCondition={"MaxRuntimeInSeconds": 600},
        **extra,
    )
    deadline = time.monotonic() + 60
    while sm.describe_training_job(TrainingJobName=name)["SecondaryStatus"] != "Training":
        assert time.monotonic() < deadline
        time.sleep(0.05)


@pytest.mark.skipif(WHY_NO_NODES is not None, reason=f"emulated nodes unavailable: {WHY_NO_NODES}")
def test_sessions_wait_for_the_agent_and_the_product_waits_with_one_line(emulator: Emulator) -> None:
    sm, ssm_client = client(emulator, "sagemaker"), client(emulator, "ssm")
    client(emulator, "s3").create_bucket(Bucket="agent-bucket")
    sleeping_job(sm, "agent-job", RemoteDebugConfig={"EnableRemoteDebug": True})
    sleeping_job(sm, "agent-later")
    try:
        target = "sagemaker-training-job:agent-job_algo-1"
        with pytest.raises(ClientError) as early:  # Training, but the agent is not online yet
            ssm_client.start_session(Target=target)
        assert early.value.response["Error"]["Code"] == "TargetNotConnected"

        said: list[str] = []
        started = time.monotonic()
        session = ssm.start_when_ready(lambda: ssm_client.start_session(Target=target), target, say=said.append)
        waited = time.monotonic() - started
        ssm_client.terminate_session(SessionId=session["SessionId"])
        assert 0.5 < waited < AGENT_DELAY + 4.5, waited
        assert said == [
            f"cannot open a session to {target} yet (its SSM agent is not online yet): trying again for up to 15 s"
        ]

        # turned on later (enable JOB, adopt JOB): the agent starts then, and takes its time again
        sm.update_training_job(TrainingJobName="agent-later", RemoteDebugConfig={"EnableRemoteDebug": True})
        later = "sagemaker-training-job:agent-later_algo-1"
        with pytest.raises(ClientError) as not_yet:
            ssm_client.start_session(Target=later)
        assert not_yet.value.response["Error"]["Code"] == "TargetNotConnected"
        time.sleep(AGENT_DELAY + 1.2)  # and the throttle's bucket refills meanwhile
        ssm_client.terminate_session(SessionId=ssm_client.start_session(Target=later)["SessionId"])

        # StartSession is throttled: a burst of 3, then 1 a second (seen without botocore's own retries, which
        # otherwise wait it out)
        once = boto3.client(
            "ssm",
            endpoint_url=emulator.url,
            region_name=REGION,
            aws_access_key_id=emulator.keys.access_key_id,
            aws_secret_access_key=emulator.keys.secret_access_key,
            config=Config(retries={"max_attempts": 1}),
        )
        codes = []
        for _ in range(6):
            try:
                once.start_session(Target="sagemaker-training-job:nope_algo-1")
            except ClientError as exc:
                codes.append(exc.response["Error"]["Code"])
        assert "ThrottlingException" in codes, codes
    finally:
        for name in ("agent-job", "agent-later"):
            sm.stop_training_job(TrainingJobName=name)


def _error(code: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": code}}, "StartSession")


def test_the_wait_is_spaced_out_bounded_and_only_for_what_can_pass() -> None:
    said: list[str] = []
    slept: list[float] = []
    answers: list[Any] = [_error("ThrottlingException"), _error("TargetNotConnected"), {"SessionId": "s"}]

    def start() -> dict[str, Any]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return dict(answer)

    assert ssm.start_when_ready(start, "t", say=said.append, sleep=slept.append) == {"SessionId": "s"}
    assert slept == [1.0, 2.0] and len(said) == 1 and "throttled by SSM" in said[0]

    def never() -> dict[str, Any]:
        raise _error("TargetNotConnected")

    started = time.monotonic()
    with pytest.raises(ClientError):
        ssm.start_when_ready(never, "t", wait=2.5, say=said.append)
    assert 0.9 < time.monotonic() - started < 2.5  # never a pause that ends past the bound: then the error itself

    def denied() -> dict[str, Any]:
        raise _error("AccessDeniedException")

    slept.clear()
    with pytest.raises(ClientError):
        ssm.start_when_ready(denied, "t", sleep=slept.append)
    assert slept == []  # nothing to wait for
