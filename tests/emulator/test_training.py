"""The training-job lifecycle, driven directly (no HTTP front): moto's server for S3 and CloudWatch Logs.

Jobs run in real emulated nodes (:mod:`remote_debug.emulator.nodes`); those tests are skipped where
nodes cannot run (not root, no namespaces).  Every answer is checked against botocore's output shape
of the operation, as the HTTP front checks it.
"""

from __future__ import annotations

import importlib.util
import io
import itertools
import json
import re
import sys
import tarfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import boto3
import botocore.session
import pytest
from botocore.validate import ParamValidator
from moto.server import ThreadedMotoServer

from remote_debug.emulator import channels, logship
from remote_debug.emulator.errors import ApiError
from remote_debug.emulator.images import PYTORCH_TRAINING_MODULE, ImageMap, ImageMapError, parse_image
from remote_debug.emulator.logship import LOG_GROUP, LogShipper
from remote_debug.emulator.nodes import Cluster, available
from remote_debug.emulator.training import TrainingJobs
from remote_debug.oskit import netns

REGION = "us-east-1"
ACCOUNT = "123456789012"
ROLE = f"arn:aws:iam::{ACCOUNT}:role/SageMakerRole"
BYOC_IMAGE = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/byoc:latest"
PYTORCH_IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.5.1-cpu-py311-ubuntu22.04-sagemaker"
TERMINAL = ("Completed", "Failed", "Stopped")
WHY_NO_NODES = available()
needs_nodes = pytest.mark.skipif(WHY_NO_NODES is not None, reason=f"emulated nodes unavailable: {WHY_NO_NODES}")

_MODEL = botocore.session.get_session().get_service_model("sagemaker")


def checked(operation: str, answer: dict[str, Any]) -> dict[str, Any]:
    """``answer`` as the HTTP front would let it through: valid for botocore's output shape."""
    report = ParamValidator().validate(answer, _MODEL.operation_model(operation).output_shape)
    assert not report.has_errors(), report.generate_report()
    json.dumps(answer)  # JSON-ready: timestamps are epoch floats
    return answer


# --- fixtures ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def client(endpoint: str, service: str) -> Any:
    return boto3.client(
        service, endpoint_url=endpoint, region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing"
    )


@pytest.fixture
def bucket(endpoint: str, request: pytest.FixtureRequest) -> str:
    name = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:50].strip("-") + "-bkt"
    client(endpoint, "s3").create_bucket(Bucket=name)
    return name


@pytest.fixture
def jobs(tmp_path: Path, endpoint: str) -> Iterator[TrainingJobs]:
    work_dir = tmp_path / "state"
    jobs = TrainingJobs(
        work_dir=work_dir,
        endpoint_url=endpoint,
        region=REGION,
        account_id=ACCOUNT,
        images=ImageMap.from_dict({"gpus": {"ml.g5.2xlarge": 2}}),
        log_delay=0.2,
        stop_grace=3.0,
        agent_delay=0.0,  # sessions as soon as Training: the agent's delay has a test of its own
    )
    try:
        yield jobs
    finally:
        jobs.shutdown()
        # nothing of a job may outlive the emulator: namespaces are derived from job name + dir
        for job_dir in (work_dir / "jobs").glob("*") if (work_dir / "jobs").is_dir() else []:
            hosts = [p.name for p in (job_dir / "nodes").glob("algo-*")] or ["algo-1"]
            left = [ns for ns in Cluster(job_dir.name, job_dir, sorted(hosts)).namespaces() if netns.exists(ns)]
            assert not left, f"namespaces left behind: {left}"


def byoc_request(name: str, bucket: str, code: str, **extra: Any) -> dict[str, Any]:
    request: dict[str, Any] = {
        "TrainingJobName": name,
        "RoleArn": ROLE,
        "AlgorithmSpecification": {
            "TrainingImage": BYOC_IMAGE,
            "TrainingInputMode": "File",
            "ContainerEntrypoint": [sys.executable, "-u", "-c", textwrap.dedent(code)],
        },
        "OutputDataConfig": {"S3OutputPath": f"s3://{bucket}/output"},
        "ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 1},
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
    }
    request.update(extra)
    return request


def wait_for(jobs: TrainingJobs, name: str, done: Any = None, timeout: float = 60.0) -> dict[str, Any]:
    """Poll DescribeTrainingJob until ``done(answer)`` (default: a terminal status); the last answer."""
    done = done or (lambda d: d["TrainingJobStatus"] in TERMINAL)
    deadline = time.monotonic() + timeout
    while True:
        answer = checked("DescribeTrainingJob", jobs.describe(name))
        if done(answer):
            return answer
        assert time.monotonic() < deadline, f"{name} stuck: {json.dumps(answer, indent=1)}"
        time.sleep(0.1)


def log_lines(endpoint: str, job: str) -> dict[str, list[str]]:
    logs = client(endpoint, "logs")
    streams = logs.describe_log_streams(logGroupName=LOG_GROUP, logStreamNamePrefix=f"{job}/")["logStreams"]
    out = {}
    for stream in streams:
        name = stream["logStreamName"]
        events = logs.get_log_events(logGroupName=LOG_GROUP, logStreamName=name, startFromHead=True)["events"]
        out[name] = [event["message"] for event in events]
    return out


def wait_for_line(endpoint: str, job: str, text: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not any(text in line for lines in log_lines(endpoint, job).values() for line in lines):
        assert time.monotonic() < deadline, f"{text!r} never reached CloudWatch for {job}"
        time.sleep(0.1)


# --- a BYOC job, start to finish -----------------------------------------------------------------------


@needs_nodes
def test_byoc_job_goes_through_the_statuses_to_completed(jobs: TrainingJobs, endpoint: str, bucket: str) -> None:
    s3 = client(endpoint, "s3")
    s3.put_object(Bucket=bucket, Key="data/train/numbers.csv", Body=b"1,2,3\n")
    s3.put_object(Bucket=bucket, Key="data/train/nested/more.csv", Body=b"4\n")
    code = """
        import json, os, socket
        print("host", socket.gethostname())
        print("numbers", open("/opt/ml/input/data/train/numbers.csv").read().strip())
        print("nested", open("/opt/ml/input/data/train/nested/more.csv").read().strip())
        print("hp", json.load(open("/opt/ml/input/config/hyperparameters.json"))["epochs"])
        print("rc", json.load(open("/opt/ml/input/config/resourceconfig.json"))["current_host"])
        print("idc", json.dumps(json.load(open("/opt/ml/input/config/inputdataconfig.json"))["train"], sort_keys=True))
        print("env", os.environ["TRAINING_JOB_NAME"], os.environ["AWS_REGION"], os.environ["MY_SETTING"])
        import boto3  # the job's own AWS calls reach the emulator (AWS_ENDPOINT_URL, through the relay)
        print("buckets", len(boto3.client("s3").list_buckets()["Buckets"]) > 0)
        with open("/opt/ml/model/weights.txt", "w") as f:
            f.write("trained")
        with open("/opt/ml/output/data/metrics.json", "w") as f:
            f.write("{}")
        print("done")
    """
    request = byoc_request(
        "byoc-ok",
        bucket,
        code,
        HyperParameters={"epochs": "3"},
        Environment={"MY_SETTING": "on"},
        InputDataConfig=[
            {
                "ChannelName": "train",
                "ContentType": "text/csv",
                "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": f"s3://{bucket}/data/train"}},
            }
        ],
        Tags=[{"Key": "team", "Value": "ml"}],
    )
    started = time.time()
    answer = checked("CreateTrainingJob", jobs.create(request))
    assert answer == {"TrainingJobArn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-job/byoc-ok"}
    first = checked("DescribeTrainingJob", jobs.describe("byoc-ok"))
    assert first["TrainingJobStatus"] == "InProgress"

    final = wait_for(jobs, "byoc-ok")
    assert final["TrainingJobStatus"] == "Completed", final.get("FailureReason")
    assert final["SecondaryStatus"] == "Completed"
    transitions = final["SecondaryStatusTransitions"]
    assert [t["Status"] for t in transitions] == ["Starting", "Downloading", "Training", "Uploading", "Completed"]
    assert [t["StatusMessage"] for t in transitions] == [
        "Preparing the instances for training",
        "Downloading input data",
        "Training image download completed. Training in progress.",
        "Uploading generated training model",
        "Training job completed",
    ]
    for earlier, later in itertools.pairwise(transitions):
        assert earlier["EndTime"] == later["StartTime"]
    assert started <= final["CreationTime"] <= final["TrainingStartTime"] <= final["TrainingEndTime"]
    assert final["LastModifiedTime"] >= final["TrainingEndTime"]
    assert final["HyperParameters"] == {"epochs": "3"}
    assert final["StoppingCondition"] == {"MaxRuntimeInSeconds": 600}
    model = f"s3://{bucket}/output/byoc-ok/output/model.tar.gz"
    assert final["ModelArtifacts"] == {"S3ModelArtifacts": model}

    body = s3.get_object(Bucket=bucket, Key="output/byoc-ok/output/model.tar.gz")["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        assert tar.getnames() == ["weights.txt"]
        member = tar.extractfile("weights.txt")
        assert member is not None and member.read() == b"trained"
    body = s3.get_object(Bucket=bucket, Key="output/byoc-ok/output/output.tar.gz")["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        assert tar.getnames() == ["metrics.json"]

    streams = log_lines(endpoint, "byoc-ok")
    assert len(streams) == 1
    ((stream, lines),) = streams.items()
    assert re.fullmatch(r"byoc-ok/algo-1-\d{10}", stream)
    assert abs(int(stream.rsplit("-", 1)[1]) - final["TrainingStartTime"]) < 5
    assert lines == [
        "host algo-1",
        "numbers 1,2,3",
        "nested 4",
        "hp 3",
        "rc algo-1",
        'idc {"ContentType": "text/csv", "RecordWrapperType": "None", "S3DistributionType": "FullyReplicated", '
        '"TrainingInputMode": "File"}',
        "env byoc-ok us-east-1 on",
        "buckets True",
        "done",
    ]
    assert jobs.list_tags(final["TrainingJobArn"]) == [{"Key": "team", "Value": "ml"}]


@needs_nodes
def test_duplicate_name_is_refused(jobs: TrainingJobs, bucket: str) -> None:
    jobs.create(byoc_request("twice", bucket, "print(1)"))
    with pytest.raises(ApiError) as refused:
        jobs.create(byoc_request("twice", bucket, "print(2)"))
    assert refused.value.code == "ResourceInUse"
    assert "training-job/twice" in refused.value.message
    wait_for(jobs, "twice")
    with pytest.raises(ApiError) as still:  # also once it ended: names are never reused
        jobs.create(byoc_request("twice", bucket, "print(3)"))
    assert still.value.code == "ResourceInUse"


def test_unknown_job_is_what_aws_says(jobs: TrainingJobs) -> None:
    for call in (
        lambda: jobs.describe("nope"),
        lambda: jobs.stop("nope"),
        lambda: jobs.update({"TrainingJobName": "nope", "RemoteDebugConfig": {"EnableRemoteDebug": True}}),
        lambda: jobs.list_tags(f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-job/nope"),
    ):
        with pytest.raises(ApiError) as refused:
            call()
        assert (refused.value.code, refused.value.message) == ("ValidationException", "Requested resource not found.")


@needs_nodes
def test_network_isolated_job_cannot_reach_the_endpoint(jobs: TrainingJobs, endpoint: str, bucket: str) -> None:
    port = int(endpoint.rsplit(":", 1)[1])
    code = f"""
        import os, socket
        print("keys", "AWS_ACCESS_KEY_ID" in os.environ, "AWS_ENDPOINT_URL" in os.environ)
        try:
            socket.create_connection(("127.0.0.1", {port}), timeout=5).close()
            print("reached the endpoint")
        except OSError:
            print("isolated")
    """
    jobs.create(byoc_request("isolated-net", bucket, code, EnableNetworkIsolation=True))
    assert wait_for(jobs, "isolated-net")["TrainingJobStatus"] == "Completed"
    (lines,) = log_lines(endpoint, "isolated-net").values()
    assert lines == ["keys False False", "isolated"]


# --- failures, stops, MaxRuntime ----------------------------------------------------------------------


@needs_nodes
def test_failing_job_is_failed_with_its_reason(jobs: TrainingJobs, endpoint: str, bucket: str) -> None:
    jobs.create(byoc_request("fails-plain", bucket, "import sys\nprint('working')\nsys.exit('bad input: x < 0')"))
    code = """
        import sys
        with open("/opt/ml/output/failure", "w") as f:
            f.write("ValueError: learning rate must be positive")
        sys.exit(2)
    """
    jobs.create(byoc_request("fails-file", bucket, code))
    plain = wait_for(jobs, "fails-plain")
    assert (plain["TrainingJobStatus"], plain["SecondaryStatus"]) == ("Failed", "Failed")
    assert plain["FailureReason"] == "AlgorithmError: bad input: x < 0, exit code: 1"
    assert plain["SecondaryStatusTransitions"][-1]["StatusMessage"] == "Training job failed"
    assert plain["ModelArtifacts"] == {"S3ModelArtifacts": ""}
    with_file = wait_for(jobs, "fails-file")
    assert with_file["FailureReason"] == "AlgorithmError: ValueError: learning rate must be positive, exit code: 2"
    wait_for_line(endpoint, "fails-plain", "bad input: x < 0")  # stderr ships too


@needs_nodes
def test_one_failing_node_fails_the_job_and_stops_the_others(jobs: TrainingJobs, bucket: str) -> None:
    code = """
        import socket, sys, time
        if socket.gethostname() == "algo-2":
            time.sleep(0.5)
            sys.exit("algo-2 ran out of data")
        time.sleep(300)
    """
    request = byoc_request("one-fails", bucket, code)
    request["ResourceConfig"]["InstanceCount"] = 2
    started = time.monotonic()
    jobs.create(request)
    final = wait_for(jobs, "one-fails")
    assert final["TrainingJobStatus"] == "Failed"
    assert final["FailureReason"] == "AlgorithmError: algo-2 ran out of data, exit code: 1"
    assert time.monotonic() - started < 20  # algo-1 got SIGTERM, not 300 s


@needs_nodes
def test_stop_sends_sigterm_then_the_job_is_stopped_with_its_model(
    jobs: TrainingJobs, endpoint: str, bucket: str
) -> None:
    code = """
        import signal, sys, time
        def on_term(*_):
            print("got SIGTERM, saving")
            open("/opt/ml/model/partial.txt", "w").write("half")
            sys.exit(0)
        signal.signal(signal.SIGTERM, on_term)
        print("training")
        time.sleep(300)
    """
    jobs.create(byoc_request("stopped", bucket, code))
    wait_for_line(endpoint, "stopped", "training")
    jobs.stop("stopped")
    stopping = checked("DescribeTrainingJob", jobs.describe("stopped"))
    assert (stopping["TrainingJobStatus"], stopping["SecondaryStatus"]) == ("Stopping", "Stopping")
    with pytest.raises(ApiError) as again:
        jobs.stop("stopped")
    assert again.value.message == "The request was rejected because the training job is in status Stopping."
    final = wait_for(jobs, "stopped")
    assert (final["TrainingJobStatus"], final["SecondaryStatus"]) == ("Stopped", "Stopped")
    assert [t["Status"] for t in final["SecondaryStatusTransitions"]][-3:] == ["Stopping", "Uploading", "Stopped"]
    assert final["SecondaryStatusTransitions"][-1]["StatusMessage"] == "Training job stopped"
    assert "FailureReason" not in final
    assert final["ModelArtifacts"]["S3ModelArtifacts"].endswith("/stopped/output/model.tar.gz")
    wait_for_line(endpoint, "stopped", "got SIGTERM, saving")


@needs_nodes
def test_stop_kills_what_ignores_sigterm_after_the_grace(jobs: TrainingJobs, endpoint: str, bucket: str) -> None:
    code = """
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("stubborn")
        time.sleep(300)
    """
    jobs.create(byoc_request("stubborn", bucket, code))
    wait_for_line(endpoint, "stubborn", "stubborn")
    asked = time.monotonic()
    jobs.stop("stubborn")
    final = wait_for(jobs, "stubborn")
    took = time.monotonic() - asked
    assert final["TrainingJobStatus"] == "Stopped"
    assert 2.5 < took < 15, took  # the fixture's stop_grace is 3 s


@needs_nodes
def test_stop_before_the_containers_start(jobs: TrainingJobs, bucket: str) -> None:
    jobs.create(byoc_request("early-stop", bucket, "print('never')"))
    jobs.stop("early-stop")
    final = wait_for(jobs, "early-stop")
    assert (final["TrainingJobStatus"], final["SecondaryStatus"]) == ("Stopped", "Stopped")
    assert "TrainingStartTime" not in final
    assert [t["Status"] for t in final["SecondaryStatusTransitions"]] == ["Starting", "Stopping", "Stopped"]


@needs_nodes
def test_max_runtime_stops_the_job(jobs: TrainingJobs, bucket: str) -> None:
    request = byoc_request("too-long", bucket, "import time\ntime.sleep(300)")
    request["StoppingCondition"] = {"MaxRuntimeInSeconds": 2}
    jobs.create(request)
    final = wait_for(jobs, "too-long", timeout=30)
    # The API reference files MaxRuntimeExceeded under the Stopped status (not Failed)
    assert (final["TrainingJobStatus"], final["SecondaryStatus"]) == ("Stopped", "MaxRuntimeExceeded")
    assert "FailureReason" not in final
    assert 2 <= final["TrainingEndTime"] - final["TrainingStartTime"] < 10


@needs_nodes
def test_unsupported_channel_fails_the_job_as_a_client_error(jobs: TrainingJobs, bucket: str) -> None:
    pipe = {
        "ChannelName": "train",
        "InputMode": "Pipe",
        "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": f"s3://{bucket}/x"}},
    }
    jobs.create(byoc_request("pipe-mode", bucket, "print(1)", InputDataConfig=[pipe]))
    missing = dict(pipe, InputMode="File")
    missing["DataSource"] = {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": f"s3://{bucket}/nothing-here/"}}
    jobs.create(byoc_request("no-data", bucket, "print(1)", InputDataConfig=[missing]))
    assert wait_for(jobs, "pipe-mode")["FailureReason"].startswith("ClientError: channel train: Pipe input mode")
    assert (
        wait_for(jobs, "no-data")["FailureReason"]
        == f"ClientError: channel train: no objects at s3://{bucket}/nothing-here/"
    )


@needs_nodes
def test_sharded_and_replicated_channels_on_two_nodes(jobs: TrainingJobs, endpoint: str, bucket: str) -> None:
    s3 = client(endpoint, "s3")
    for i in range(5):
        s3.put_object(Bucket=bucket, Key=f"shards/part-{i}", Body=b"x")
    s3.put_object(Bucket=bucket, Key="vocab/words.txt", Body=b"x")
    code = """
        import os, socket
        host = socket.gethostname()
        for channel in ("shards", "vocab"):
            print(host, channel, sorted(os.listdir(f"/opt/ml/input/data/{channel}")))
    """

    def channel(name: str, distribution: str) -> dict[str, Any]:
        source = {"S3DataType": "S3Prefix", "S3Uri": f"s3://{bucket}/{name}/", "S3DataDistributionType": distribution}
        return {"ChannelName": name, "InputMode": "FastFile", "DataSource": {"S3DataSource": source}}

    request = byoc_request(
        "sharded",
        bucket,
        code,
        InputDataConfig=[channel("shards", "ShardedByS3Key"), channel("vocab", "FullyReplicated")],
    )
    request["ResourceConfig"]["InstanceCount"] = 2
    jobs.create(request)
    assert wait_for(jobs, "sharded")["TrainingJobStatus"] == "Completed"
    lines = sorted(line for stream in log_lines(endpoint, "sharded").values() for line in stream)
    assert lines == [
        "algo-1 shards ['part-0', 'part-2', 'part-4']",
        "algo-1 vocab ['words.txt']",
        "algo-2 shards ['part-1', 'part-3']",
        "algo-2 vocab ['words.txt']",
    ]


@needs_nodes
def test_shutdown_stops_running_jobs_with_a_short_grace(jobs: TrainingJobs, endpoint: str, bucket: str) -> None:
    code = """
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("running")
        time.sleep(300)
    """
    jobs.create(byoc_request("at-shutdown", bucket, code))
    wait_for_line(endpoint, "at-shutdown", "running")
    asked = time.monotonic()
    jobs.shutdown()
    assert time.monotonic() - asked < 15  # SHUTDOWN_GRACE (5 s), not stop_grace
    assert jobs.describe("at-shutdown")["TrainingJobStatus"] == "Stopped"
    with pytest.raises(ApiError) as refused:
        jobs.create(byoc_request("too-late", bucket, "print(1)"))
    assert refused.value.code == "ServiceUnavailable"


# --- UpdateTrainingJob and the SSM connector -------------------------------------------------------------

LISTENER = """
    import socket
    server = socket.create_server(("127.0.0.1", 4567))
    print("listening", flush=True)
    while True:
        conn, _ = server.accept()
        conn.sendall(socket.gethostname().encode())
        conn.close()
"""


@needs_nodes
def test_update_and_connector_follow_the_rules(jobs: TrainingJobs, endpoint: str, bucket: str) -> None:
    jobs.create(byoc_request("debug-on", bucket, LISTENER, RemoteDebugConfig={"EnableRemoteDebug": True}))
    jobs.create(byoc_request("debug-off", bucket, LISTENER))
    for name in ("debug-on", "debug-off"):
        wait_for_line(endpoint, name, "listening")

    for target in (
        "sagemaker-training-job:nope_algo-1",  # unknown job
        "sagemaker-training-job:debug-off_algo-1",  # remote debug not enabled
        "sagemaker-training-job:debug-on_algo-2",  # no such node
        "sagemaker-training-job:debug-on",  # no node at all
        "i-0123456789abcdef0",  # not a training job
    ):
        with pytest.raises(ApiError) as refused:
            jobs.connector(target)
        assert (refused.value.code, refused.value.message) == ("TargetNotConnected", f"{target} is not connected.")

    name, connect = jobs.connector("sagemaker-training-job:debug-on_algo-1")
    assert name == "debug-on"
    with connect(4567) as sock:
        assert sock.recv(100) == b"algo-1"  # 127.0.0.1 inside the node, not the host's

    # Update while Training: accepted, and the connector follows
    answer = checked(
        "UpdateTrainingJob",
        jobs.update({"TrainingJobName": "debug-off", "RemoteDebugConfig": {"EnableRemoteDebug": True}}),
    )
    assert answer == {"TrainingJobArn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-job/debug-off"}
    assert jobs.describe("debug-off")["RemoteDebugConfig"] == {"EnableRemoteDebug": True}
    with jobs.connector("sagemaker-training-job:debug-off_algo-1")[1](4567) as sock:
        assert sock.recv(100) == b"algo-1"
    jobs.update({"TrainingJobName": "debug-on", "RemoteDebugConfig": {"EnableRemoteDebug": False}})
    with pytest.raises(ApiError):
        jobs.connector("sagemaker-training-job:debug-on_algo-1")

    # once the job is no longer Downloading or Training: refused, and no connections either
    jobs.stop("debug-off")
    wait_for(jobs, "debug-off")
    with pytest.raises(ApiError) as late:
        jobs.update({"TrainingJobName": "debug-off", "RemoteDebugConfig": {"EnableRemoteDebug": False}})
    assert late.value.code == "ValidationException"
    assert "Downloading or Training" in late.value.message
    with pytest.raises(ApiError) as gone:
        jobs.connector("sagemaker-training-job:debug-off_algo-1")
    assert gone.value.code == "TargetNotConnected"
    # other updates stay possible, and are echoed by Describe
    jobs.update({"TrainingJobName": "debug-off", "ResourceConfig": {"KeepAlivePeriodInSeconds": 60}})
    assert jobs.describe("debug-off")["ResourceConfig"]["KeepAlivePeriodInSeconds"] == 60


def test_remote_debug_with_network_isolation_is_refused(jobs: TrainingJobs) -> None:
    request = byoc_request("isolated", "bucket", "print(1)", EnableNetworkIsolation=True)
    request["RemoteDebugConfig"] = {"EnableRemoteDebug": True}
    with pytest.raises(ApiError) as refused:
        jobs.create(request)
    assert refused.value.code == "ValidationException"


# --- ListTrainingJobs and tags --------------------------------------------------------------------------


@needs_nodes
def test_list_filters_sorts_and_pages(jobs: TrainingJobs, bucket: str) -> None:
    names = ["list-b", "list-a", "list-c", "other"]
    for name in names:
        jobs.create(byoc_request(name, bucket, "print(1)" if name != "list-c" else "raise SystemExit(1)"))
        time.sleep(0.01)  # distinct creation times
    for name in names:
        wait_for(jobs, name)

    def listed(**request: Any) -> list[str]:
        answer = checked("ListTrainingJobs", jobs.list(request))
        return [summary["TrainingJobName"] for summary in answer["TrainingJobSummaries"]]

    assert listed() == names  # CreationTime, Ascending: AWS's defaults
    assert listed(SortOrder="Descending") == names[::-1]
    assert listed(NameContains="LIST", SortBy="Name") == ["list-a", "list-b", "list-c"]
    assert listed(StatusEquals="Failed") == ["list-c"]
    created = {name: jobs.describe(name)["CreationTime"] for name in names}
    assert listed(CreationTimeAfter=created["list-a"], CreationTimeBefore=created["other"]) == ["list-c"]
    assert listed(LastModifiedTimeBefore=created["list-b"]) == []

    first = checked("ListTrainingJobs", jobs.list({"MaxResults": 3}))
    assert [s["TrainingJobName"] for s in first["TrainingJobSummaries"]] == names[:3]
    summary = first["TrainingJobSummaries"][0]
    assert set(summary) == {
        "TrainingJobName",
        "TrainingJobArn",
        "CreationTime",
        "LastModifiedTime",
        "TrainingJobStatus",
        "SecondaryStatus",
        "TrainingEndTime",
    }
    rest = checked("ListTrainingJobs", jobs.list({"MaxResults": 3, "NextToken": first["NextToken"]}))
    assert [s["TrainingJobName"] for s in rest["TrainingJobSummaries"]] == names[3:]
    assert "NextToken" not in rest
    with pytest.raises(ApiError):
        jobs.list({"NextToken": "not-a-token"})


@needs_nodes
def test_tags(jobs: TrainingJobs, bucket: str) -> None:
    arn = jobs.create(byoc_request("tagged", bucket, "print(1)", Tags=[{"Key": "a", "Value": "1"}]))["TrainingJobArn"]
    jobs.add_tags(arn, [{"Key": "b", "Value": "2"}, {"Key": "a", "Value": "changed"}])
    assert sorted(jobs.list_tags(arn), key=lambda t: t["Key"]) == [
        {"Key": "a", "Value": "changed"},
        {"Key": "b", "Value": "2"},
    ]
    jobs.delete_tags(arn, ["a", "not-there"])
    assert jobs.list_tags(arn) == [{"Key": "b", "Value": "2"}]
    with pytest.raises(ApiError):
        jobs.list_tags(arn.replace(REGION, "eu-west-1"))  # same name, another region: not this job
    wait_for(jobs, "tagged")


# --- the real toolkit, 2 nodes x 2 processes ----------------------------------------------------------

RANK_SCRIPT = """
import os, socket
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
total = torch.tensor([dist.get_rank() + 1.0])
dist.all_reduce(total)
line = (
    f"RANK={os.environ['RANK']} WORLD_SIZE={os.environ['WORLD_SIZE']} LOCAL_RANK={os.environ['LOCAL_RANK']} "
    f"host={socket.gethostname()} sum={int(total.item())} args={os.environ['SM_USER_ARGS']}\\n"
)
# One write per line: the DLC's PYTHONUNBUFFERED makes print() write the text and its newline
# separately, and the toolkit re-reads its ranks' shared pipe in chunks, so two ranks printing at
# once can end up on one line (on SageMaker too).
os.write(1, line.encode())
if dist.get_rank() == 0:
    with open(os.path.join(os.environ["SM_MODEL_DIR"], "model.pt"), "wb") as f:
        torch.save({"sum": total}, f)
dist.destroy_process_group()
"""


@needs_nodes
def test_toolkit_runs_torch_distributed_on_two_nodes_with_two_processes_each(
    jobs: TrainingJobs, endpoint: str, bucket: str
) -> None:
    # found, not imported: importing the toolkit creates /opt/ml/code on the host (environment.py does)
    for module in ("torch", "sagemaker_training", "sagemaker_pytorch_container"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed")
    source = io.BytesIO()
    with tarfile.open(fileobj=source, mode="w:gz") as tar:
        data = RANK_SCRIPT.encode()
        info = tarfile.TarInfo("train.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    s3 = client(endpoint, "s3")
    s3.put_object(Bucket=bucket, Key="ddp/source/sourcedir.tar.gz", Body=source.getvalue())
    # what the SDK v2 PyTorch estimator sends (values JSON-encoded), with no entrypoint override
    request = {
        "TrainingJobName": "ddp-2x2",
        "RoleArn": ROLE,
        "AlgorithmSpecification": {"TrainingImage": PYTORCH_IMAGE, "TrainingInputMode": "File"},
        "HyperParameters": {
            "epochs": "1",
            "sagemaker_program": json.dumps("train.py"),
            "sagemaker_submit_directory": json.dumps(f"s3://{bucket}/ddp/source/sourcedir.tar.gz"),
            "sagemaker_torch_distributed_enabled": "true",
            "sagemaker_container_log_level": "20",
            "sagemaker_job_name": json.dumps("ddp-2x2"),
            "sagemaker_region": json.dumps(REGION),
        },
        "OutputDataConfig": {"S3OutputPath": f"s3://{bucket}/ddp"},
        # ml.g5.2xlarge has 2 "GPUs" in this test's image map: the toolkit starts 2 processes per host
        "ResourceConfig": {"InstanceType": "ml.g5.2xlarge", "InstanceCount": 2, "VolumeSizeInGB": 1},
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
    }
    jobs.create(request)
    final = wait_for(jobs, "ddp-2x2", timeout=240)
    assert final["TrainingJobStatus"] == "Completed", final.get("FailureReason")

    streams = log_lines(endpoint, "ddp-2x2")
    assert sorted(re.sub(r"-\d+$", "", name) for name in streams) == ["ddp-2x2/algo-1", "ddp-2x2/algo-2"]
    ranks = {}
    for name, lines in streams.items():
        node = re.sub(r"-\d+$", "", name).split("/")[1]
        assert any("torchrun --nnodes 2 --nproc_per_node 2" in line for line in lines), lines
        assert any("Reporting training SUCCESS" in line for line in lines)
        for line in lines:
            match = re.match(r"RANK=(\d) WORLD_SIZE=(\d) LOCAL_RANK=(\d) host=(\S+) sum=(\d+) args=(.*)", line)
            if match:
                assert match.group(4) == node  # each rank's line is in its own node's stream
                ranks[int(match.group(1))] = match.groups()[1:]
    assert sorted(ranks) == [0, 1, 2, 3]
    assert {rank: (values[0], values[2], values[3]) for rank, values in ranks.items()} == {
        0: ("4", "algo-1", "10"),
        1: ("4", "algo-1", "10"),
        2: ("4", "algo-2", "10"),
        3: ("4", "algo-2", "10"),
    }
    assert all(values[4] == '["--epochs","1"]' for values in ranks.values())
    body = s3.get_object(Bucket=bucket, Key="ddp/ddp-2x2/output/model.tar.gz")["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        assert tar.getnames() == ["model.pt"]


# --- parts without nodes -------------------------------------------------------------------------------


def test_image_uris_are_parsed_like_docker() -> None:
    ref = parse_image(PYTORCH_IMAGE)
    assert (ref.registry, ref.repository, ref.tag, ref.name) == (
        "763104351884.dkr.ecr.us-east-1.amazonaws.com",
        "pytorch-training",
        "2.5.1-cpu-py311-ubuntu22.04-sagemaker",
        "pytorch-training",
    )
    ref = parse_image("localhost:5000/team/trainer@sha256:abc")
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == ("localhost:5000", "team/trainer", "", "sha256:abc")
    ref = parse_image("python:3.11")
    assert (ref.registry, ref.repository, ref.tag) == ("", "python", "3.11")
    ref = parse_image("registry.example.com:443/a/b:v1@sha256:0")
    assert (ref.registry, ref.repository, ref.tag) == ("registry.example.com:443", "a/b", "v1")


def test_image_map(tmp_path: Path) -> None:
    default = ImageMap.default()
    pytorch = default.resolve(PYTORCH_IMAGE)
    assert pytorch.python == Path(sys.executable)
    assert pytorch.env["SAGEMAKER_TRAINING_MODULE"] == PYTORCH_TRAINING_MODULE
    assert pytorch.train_argv() == [str(Path(sys.executable).parent / "train")]
    assert "SAGEMAKER_TRAINING_MODULE" not in default.resolve(BYOC_IMAGE).env
    assert default.gpus("ml.p4d.24xlarge") == 0

    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    mapping = {
        "images": {
            BYOC_IMAGE: {"venv": str(venv), "env": {"A": "exact"}},
            "pytorch-training": {"python": sys.executable, "env": {"OMP_NUM_THREADS": "1"}},
            "*": {"venv": str(venv), "train": ["python", "-m", "trainer"]},
        },
        "gpus": {"ml.p4d.24xlarge": 2},
    }
    path = tmp_path / "images.json"
    path.write_text(json.dumps(mapping))
    loaded = ImageMap.load(path)
    exact = loaded.resolve(BYOC_IMAGE)
    assert (exact.python, exact.bin_dir, exact.env) == (venv / "bin" / "python", venv / "bin", {"A": "exact"})
    by_name = loaded.resolve("123.dkr.ecr.eu-west-1.amazonaws.com/pytorch-training:1.0")
    assert by_name.env["OMP_NUM_THREADS"] == "1"
    assert by_name.env["SAGEMAKER_TRAINING_MODULE"] == PYTORCH_TRAINING_MODULE
    assert loaded.resolve("something/else:1").train_argv() == ["python", "-m", "trainer"]
    assert loaded.gpus("ml.p4d.24xlarge") == 2

    bad_maps: list[Any] = [
        {"images": {"x": {"venv": str(tmp_path / "missing")}}},
        {"gpus": {"ml.x": -1}},
        {"image": {}},
        [],
    ]
    for bad in bad_maps:
        with pytest.raises(ImageMapError):
            ImageMap.from_dict(bad)
    path.write_text("{not json")
    with pytest.raises(ImageMapError):
        ImageMap.load(path)


def test_channel_objects_follow_sagemakers_rules(endpoint: str, bucket: str, tmp_path: Path) -> None:
    s3 = client(endpoint, "s3")
    for key in ("data/train/a.csv", "data/train/b/c.csv", "data/train-extra/d.csv", "data/single.csv", "m/x", "m/y"):
        s3.put_object(Bucket=bucket, Key=key, Body=key.encode())
    s3.put_object(Bucket=bucket, Key="manifest.json", Body=json.dumps([{"prefix": f"s3://{bucket}/m/"}, "x", "y"]))

    def objects(uri: str, kind: str = "S3Prefix") -> list[tuple[str, str]]:
        channel = {"ChannelName": "c", "DataSource": {"S3DataSource": {"S3DataType": kind, "S3Uri": uri}}}
        return [(key, str(path)) for _, key, path in channels.channel_objects(s3, channel)]

    assert objects(f"s3://{bucket}/data/train") == [("data/train/a.csv", "a.csv"), ("data/train/b/c.csv", "b/c.csv")]
    assert objects(f"s3://{bucket}/data/train/") == [("data/train/a.csv", "a.csv"), ("data/train/b/c.csv", "b/c.csv")]
    assert objects(f"s3://{bucket}/data/single.csv") == [("data/single.csv", "single.csv")]
    assert objects(f"s3://{bucket}/data/tr") == [
        ("data/train-extra/d.csv", "train-extra/d.csv"),
        ("data/train/a.csv", "train/a.csv"),
        ("data/train/b/c.csv", "train/b/c.csv"),
    ]
    assert objects(f"s3://{bucket}/manifest.json", "ManifestFile") == [("m/x", "x"), ("m/y", "y")]
    listed = channels.channel_objects(
        s3,
        {"ChannelName": "c", "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": f"s3://{bucket}/"}}},
    )
    shards = [channels.shard(listed, i, 3) for i in range(3)]
    assert sorted(obj for shard in shards for obj in shard) == sorted(listed)
    assert all(abs(len(shard) - len(listed) / 3) < 1 for shard in shards)

    channels.download(
        s3,
        channels.channel_objects(
            s3,
            {
                "ChannelName": "c",
                "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": f"s3://{bucket}/data/train"}},
            },
        ),
        tmp_path / "c",
        "c",
    )
    assert sorted(p.relative_to(tmp_path / "c").as_posix() for p in (tmp_path / "c").rglob("*.csv")) == [
        "a.csv",
        "b/c.csv",
    ]
    with pytest.raises(channels.ChannelError):
        channels.download(s3, [(bucket, "does/not/exist", PurePosixPath("z"))], tmp_path / "d", "c")
    with pytest.raises(channels.ChannelError):
        channels.channel_objects(
            s3,
            {
                "ChannelName": "c",
                "DataSource": {
                    "S3DataSource": {"S3DataType": "ManifestFile", "S3Uri": f"s3://{bucket}/data/single.csv"}
                },
            },
        )


class FakeLogs:
    """Records PutLogEvents calls; enforces what CloudWatch enforces."""

    class exceptions:
        class ResourceAlreadyExistsException(Exception):
            pass

    def __init__(self) -> None:
        self.calls: list[list[dict[str, Any]]] = []

    def create_log_group(self, **_: Any) -> None:
        pass

    def create_log_stream(self, **_: Any) -> None:
        pass

    def put_log_events(self, *, logGroupName: str, logStreamName: str, logEvents: list[dict[str, Any]]) -> None:
        assert len(logEvents) <= 10_000
        assert sum(len(e["message"].encode()) + 26 for e in logEvents) <= 1_048_576
        assert all(0 < len(e["message"].encode()) <= 256 * 1024 - 26 for e in logEvents)
        stamps = [e["timestamp"] for e in logEvents]
        assert stamps == sorted(stamps)
        self.calls.append(logEvents)


def test_log_shipping_honours_put_log_events_limits() -> None:
    fake = FakeLogs()
    shipper = LogShipper(fake, delay=1.0)
    shipper.open_stream("job/algo-1-1")
    queued = time.monotonic()
    shipper.put("job/algo-1-1", "first")
    assert fake.calls == []  # held for the delay
    while not fake.calls:
        assert time.monotonic() - queued < 10, "never shipped"
        time.sleep(0.01)
    assert time.monotonic() - queued >= 1.0
    assert fake.calls == [[{"timestamp": fake.calls[0][0]["timestamp"], "message": "first"}]]

    for i in range(12_000):
        shipper.put("job/algo-1-1", f"line {i}")
    shipper.put("job/algo-1-1", "")  # dropped, as Docker's awslogs driver drops empty lines
    shipper.put("job/algo-1-1", "é" * 200_000)  # 400 kB of UTF-8: split between characters
    shipper.close()  # ships the rest at once
    messages = [event["message"] for call in fake.calls[1:] for event in call]
    assert messages[:12_000] == [f"line {i}" for i in range(12_000)]
    assert "".join(messages[12_000:]) == "é" * 200_000
    assert len(fake.calls) >= 3  # 12,000 events need two batches at least
    assert logship.batches([]) == []
