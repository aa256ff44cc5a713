"""The hybrid transport leaves nothing usable behind (issue 13, item 6).

The activation code registers a machine as an SSM managed instance of the job owner, with the
managed-instance role's credentials; ``ssm-activation.json`` in the job's S3 channel holds it.  So:

* the activation and that object go once every node has registered - the job's first node does it
  (signed calls from the container, against a fake SSM endpoint validated by botocore's model, and
  moto's S3 server) - or once the job has ended, whichever comes first - the laptop does it
  (:func:`retire_job`; SSM through a dict-driven fake on a real botocore client, S3 is moto);
* the activation expires two hours after ``enable()``, not at the end of the job's runtime;
* the execution role may deregister only instances tagged with its own ARN (a small evaluator of the
  template's conditions shows which instances a job could deregister, before and after);
* ``remote-debug cleanup`` lists the caller's leftovers of ended jobs and spent activations, deletes
  them with ``--yes`` only, and leaves other users' and running jobs' things alone.

moto has no SSM activations or managed instances (``tests/helpers/fake_aws.py``), hence the fakes; every request
they see has been validated by botocore against the real SSM model, and every answer is checked
against its output shape.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from botocore.validate import validate_parameters

import remote_debug
from remote_debug.container.node import hybrid
from remote_debug.container.node.hybrid import Activation, HybridError, HybridRegistration
from remote_debug.laptop.aws.enable import hybrid_activation as ha
from tests.cli.test_bad_input import run_cli
from tests.helpers.fake_aws import SSM_ANSWERS, FakeSsm, moto_cloud
from tests.helpers.hook_runs import wait_for
from tests.helpers.sagemaker_checks import IMAGE, MOTO_USER_ID, ROLE

REGION = "us-east-1"
BUCKET = "rd-leftovers"
ACTIVATION_ID = "0a1b2c3d-1111-2222-3333-444455556666"
CODE = "Xq7Z2sPk9LmN4vB8cD1e"
MI_ROLE = "arn:aws:iam::123456789012:role/RemoteDebugManagedInstance"
OTHER_ROLE = "arn:aws:iam::123456789012:role/OtherTeamExecution"
TEMPLATES = Path(__file__).resolve().parents[2] / "templates" / "iam"


# --- the container: the first node retires the activation once every node registered ----------------


class ActivationSsm(FakeSsm):
    """:class:`FakeSsm` that also answers the first node's watch: DescribeActivations lists the activation
    with one ``RegistrationsCount`` per call (the last repeated) until DeleteActivation deletes it."""

    def __init__(self, limit: int, registrations: list[int]) -> None:
        super().__init__()
        self.limit, self.registrations, self.deleted = limit, list(registrations), False

    def handle(self, target: str, body: bytes, authorization: str) -> tuple[int, dict[str, Any]]:
        operation = target.rpartition(".")[2]
        if operation == "DescribeActivations":
            count = self.registrations.pop(0) if len(self.registrations) > 1 else self.registrations[0]
            listed = (
                []
                if self.deleted
                else [
                    {
                        "ActivationId": ACTIVATION_ID,
                        "RegistrationLimit": self.limit,
                        "RegistrationsCount": count,
                        "Expired": False,
                        "Tags": [{"Key": "remote-debug:job", "Value": "job-a"}],
                    }
                ]
            )
            SSM_ANSWERS[operation] = {"ActivationList": listed}
        status, answer = super().handle(target, body, authorization)
        if operation == "DeleteActivation" and status == 200:
            self.deleted = True
        return status, answer


class FakeAgent:
    binary = "/usr/bin/amazon-ssm-agent"

    def available(self) -> bool:
        return True

    def register(self, activation: Activation) -> None:
        pass

    def instance_id(self) -> str:
        return "mi-0123456789abcdef0"

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def clear(self) -> None:
        pass


@pytest.fixture
def s3_server() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        url = f"http://{host}:{port}"
        s3 = boto3.client(
            "s3", endpoint_url=url, region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing"
        )
        s3.create_bucket(Bucket=BUCKET)
        yield url
    finally:
        server.stop()


def _keys(url: str) -> list[str]:
    s3 = boto3.client(
        "s3", endpoint_url=url, region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    return sorted(o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET).get("Contents", []))


def _node(tmp_path: Path, s3_url: str, ssm_url: str, node: str, hosts: list[str]) -> dict[str, str]:
    """A node's environment: its resourceconfig.json, its downloaded channel, endpoints and credentials."""
    config = tmp_path / node / "config"
    config.mkdir(parents=True)
    (config / "resourceconfig.json").write_text(json.dumps({"current_host": node, "hosts": hosts}))
    channel = tmp_path / node / "remote_debug"
    channel.mkdir()
    uri = f"s3://{BUCKET}/job-a/remote-debug/ssm-activation.json"
    (channel / "ssm-activation.json").write_text(
        json.dumps({"ActivationId": ACTIVATION_ID, "ActivationCode": CODE, "Region": REGION, "S3Uri": uri})
    )
    return {
        "SM_INPUT_CONFIG_DIR": str(config),
        hybrid.ENV_ACTIVATION_FILE: str(channel / "ssm-activation.json"),
        "AWS_ENDPOINT_URL_SSM": ssm_url,
        "AWS_ENDPOINT_URL_S3": s3_url,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "token",
    }


def test_the_activation_and_its_code_object_go_once_every_node_registered(
    tmp_path: Path, s3_server: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(hybrid, "RETIRE_POLL", 0.05, raising=False)
    monkeypatch.setitem(SSM_ANSWERS, "DescribeActivations", {})
    monkeypatch.setitem(SSM_ANSWERS, "DeleteActivation", {})
    s3 = boto3.client(
        "s3", endpoint_url=s3_server, region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    for name, body in (("ssm-activation.json", CODE), ("ssm-activation.txt", "note")):
        s3.put_object(Bucket=BUCKET, Key=f"job-a/remote-debug/{name}", Body=body.encode())
    hosts = ["algo-1", "algo-2"]
    # algo-2 registered first, then algo-1; the count reaches the limit on the third look
    with ActivationSsm(limit=2, registrations=[1, 1, 2]) as ssm:
        second = HybridRegistration(
            _node(tmp_path, s3_server, ssm.url, "algo-2", hosts),
            agent=FakeAgent(),  # type: ignore[arg-type]  # an AgentCli by duck typing
            deregister=lambda *_: None,
        )
        second.start()
        first = HybridRegistration(
            _node(tmp_path, s3_server, ssm.url, "algo-1", hosts),
            agent=FakeAgent(),  # type: ignore[arg-type]  # an AgentCli by duck typing
            deregister=lambda *_: None,
        )
        first.start()
        wait_for(lambda: ssm.calls("DeleteActivation"), 10, "the first node to delete the activation")
        wait_for(
            lambda: _keys(s3_server) == ["job-a/remote-debug/ssm-activation.txt"],
            10,
            "the activation file to be deleted (its note keeps the channel non-empty)",
        )
        assert ssm.calls("DeleteActivation") == [{"ActivationId": ACTIVATION_ID}]
        # one watcher per job: three looks, all by algo-1 (algo-2 never asks)
        assert len(ssm.calls("DescribeActivations")) == 3
        first.stop()
        second.stop()
    err = capsys.readouterr().err
    assert "deleted SSM activation 0a1b2c3d-1111-2222-3333-444455556666: every node registered (2/2)" in err
    assert CODE not in err
    # a node that comes later (a restarted job) sees why it cannot register, in one line
    channel = tmp_path / "late" / "remote_debug"
    channel.mkdir(parents=True)
    (channel / "ssm-activation.txt").write_text("note")
    with pytest.raises(HybridError, match=r"activation was retired once every node had registered"):
        Activation.load({hybrid.ENV_ACTIVATION_FILE: str(channel / "ssm-activation.json")})


def test_a_node_that_may_not_retire_says_so_once_and_stops(
    tmp_path: Path, s3_server: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(hybrid, "RETIRE_POLL", 0.05, raising=False)
    with FakeSsm() as ssm:  # the default execution role: no DescribeActivations (nor DeleteActivation)
        ssm.failures["DescribeActivations"] = (400, "AccessDeniedException", "not authorized")
        node = HybridRegistration(
            _node(tmp_path, s3_server, ssm.url, "algo-1", ["algo-1"]),
            agent=FakeAgent(),  # type: ignore[arg-type]  # an AgentCli by duck typing
            deregister=lambda *_: None,
        )
        node.start()
        wait_for(lambda: "could not retire" in capsys.readouterr().err, 10, "the one line")
        assert len(ssm.calls("DescribeActivations")) == 1 and not ssm.calls("DeleteActivation")
        node.stop()


def test_the_nodes_s3_delete_is_signed_as_botocore_signs_it() -> None:
    """The node's stdlib S3 DELETE carries botocore's own SigV4 signature (key with characters to encode)."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    from remote_debug.container.node import awscall

    creds = awscall.Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "session-token")
    raw = hybrid.s3_object_url("my-bucket", "a job/rd ü/ssm-activation.json", REGION, {})
    assert raw == "https://my-bucket.s3.us-east-1.amazonaws.com/a job/rd ü/ssm-activation.json"
    empty = hashlib.sha256(b"").hexdigest()
    ours = awscall.sign(
        method="DELETE",
        url=raw,
        headers={"x-amz-content-sha256": empty},
        body=b"",
        region=REGION,
        service="s3",
        credentials=creds,
        amz_date="20260101T120000Z",
    )
    encoded = "https://my-bucket.s3.us-east-1.amazonaws.com/a%20job/rd%20%C3%BC/ssm-activation.json"
    request = AWSRequest(
        "DELETE",
        encoded,
        data=b"",
        headers={
            "X-Amz-Date": "20260101T120000Z",
            "X-Amz-Content-SHA256": empty,
            "X-Amz-Security-Token": "session-token",
            "Host": "my-bucket.s3.us-east-1.amazonaws.com",
        },
    )
    request.context["timestamp"] = "20260101T120000Z"
    auth = S3SigV4Auth(Credentials(creds.access_key, creds.secret_key, creds.token), "s3", REGION)
    expected = auth.signature(auth.string_to_sign(request, auth.canonical_request(request)), request)
    assert ours["Authorization"].endswith(f"Signature={expected}")
    assert (
        hybrid.s3_object_url("dotted.bucket", "k", REGION, {}) == "https://s3.us-east-1.amazonaws.com/dotted.bucket/k"
    )


# --- the laptop: the job ends first ---------------------------------------------------------------------


class FakeSsmApi:
    """SSM on a real botocore client: requests are built and validated by botocore, answered from the
    state below (validated against the output shapes), and recorded."""

    def __init__(self, client: Any) -> None:
        self.activations: dict[str, dict[str, Any]] = {}
        self.instances: dict[str, dict[str, str]] = {}  # mi- id -> tags
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.refused: set[str] = set()  # operations answered AccessDeniedException
        client.meta.events.register("before-parameter-build.ssm.*", self._record)
        client.meta.events.register("before-call.ssm.*", self._answer)

    def _record(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        self.calls.append((model.name, dict(params)))

    def called(self, operation: str) -> list[dict[str, Any]]:
        return [params for name, params in self.calls if name == operation]

    def _answer(self, model: Any, **_: Any) -> Any:
        from botocore.awsrequest import AWSResponse

        params = self.calls[-1][1]
        answer: dict[str, Any]
        if model.name in self.refused:
            error = {"Error": {"Code": "AccessDeniedException", "Message": "not authorized"}}
            return AWSResponse("https://ssm.local", 400, {}, None), error
        if model.name == "DescribeActivations":
            wanted = {
                v for f in params.get("Filters", []) if f["FilterKey"] == "ActivationIds" for v in f["FilterValues"]
            }
            answer = {"ActivationList": [a for i, a in self.activations.items() if not wanted or i in wanted]}
        elif model.name == "DeleteActivation":
            if self.activations.pop(params["ActivationId"], None) is None:
                error = {"Error": {"Code": "InvalidActivation", "Message": "no such activation"}}
                return AWSResponse("https://ssm.local", 400, {}, None), error
            answer = {}
        elif model.name == "DescribeInstanceInformation":
            tag_filters = {
                f["Key"][len("tag:") :]: f["Values"] for f in params.get("Filters", []) if f["Key"].startswith("tag:")
            }
            answer = {
                "InstanceInformationList": [
                    {"InstanceId": i, "ResourceType": "ManagedInstance", "PingStatus": "ConnectionLost"}
                    for i, tags in self.instances.items()
                    if all(tags.get(k) in values for k, values in tag_filters.items())
                ]
            }
        elif model.name == "ListTagsForResource":
            tags = self.instances[params["ResourceId"]]
            answer = {"TagList": [{"Key": k, "Value": v} for k, v in tags.items()]}
        elif model.name == "DeregisterManagedInstance":
            self.instances.pop(params["InstanceId"])
            answer = {}
        else:
            raise AssertionError(f"unexpected SSM call {model.name}")
        validate_parameters(answer, model.output_shape)
        return AWSResponse("https://ssm.local", 200, {}, None), answer


class FakeSageMakerApi:
    """DescribeTrainingJob / ListTags / ListTrainingJobs from ``jobs`` (name -> (status, tags)), validated."""

    def __init__(self, client: Any, jobs: dict[str, tuple[str, dict[str, str]]], channel: Callable[[str], str]) -> None:
        self.jobs, self.channel = jobs, channel
        self.calls: list[tuple[str, dict[str, Any]]] = []
        client.meta.events.register("before-parameter-build.sagemaker.*", self._record)
        client.meta.events.register("before-call.sagemaker.*", self._answer)

    def _record(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        self.calls.append((model.name, dict(params)))

    @staticmethod
    def arn(job: str) -> str:
        return f"arn:aws:sagemaker:{REGION}:123456789012:training-job/{job}"

    def described(self, job: str) -> dict[str, Any]:
        status, _tags = self.jobs[job]
        now = datetime.now(timezone.utc)
        return {
            "TrainingJobName": job,
            "TrainingJobArn": self.arn(job),
            "TrainingJobStatus": status,
            "SecondaryStatus": "Training" if status == "InProgress" else status,
            "AlgorithmSpecification": {"TrainingImage": IMAGE, "TrainingInputMode": "File"},
            "RoleArn": ROLE,
            "ModelArtifacts": {"S3ModelArtifacts": f"s3://{BUCKET}/{job}/model.tar.gz"},
            "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 2, "VolumeSizeInGB": 30},
            "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
            "CreationTime": now,
            "InputDataConfig": [
                {
                    "ChannelName": "remote_debug",
                    "InputMode": "File",
                    "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": self.channel(job)}},
                }
            ],
        }

    def _answer(self, model: Any, **_: Any) -> Any:
        from botocore.awsrequest import AWSResponse

        params = self.calls[-1][1]
        if model.name == "DescribeTrainingJob":
            job = params["TrainingJobName"]
            if job not in self.jobs:
                error = {"Error": {"Code": "ValidationException", "Message": "Requested resource not found."}}
                return AWSResponse("https://sagemaker.local", 400, {}, None), error
            answer = self.described(job)
        elif model.name == "ListTags":
            job = params["ResourceArn"].rpartition("/")[2]
            answer = {"Tags": [{"Key": k, "Value": v} for k, v in self.jobs[job][1].items()]}
        elif model.name == "ListTrainingJobs":
            now = datetime.now(timezone.utc)
            answer = {
                "TrainingJobSummaries": [
                    {"TrainingJobName": j, "TrainingJobArn": self.arn(j), "CreationTime": now, "TrainingJobStatus": s}
                    for j, (s, _tags) in self.jobs.items()
                ]
            }
        else:
            raise AssertionError(f"unexpected SageMaker call {model.name}")
        validate_parameters(answer, model.output_shape)
        return AWSResponse("https://sagemaker.local", 200, {}, None), answer


def _activation(
    job: str,
    owner: str,
    registered: int,
    *,
    limit: int = 2,
    age: timedelta = timedelta(minutes=20),
    activation_id: str = ACTIVATION_ID,
) -> dict[str, Any]:
    now = datetime.now(timezone.utc)
    return {
        "ActivationId": activation_id,
        "RegistrationLimit": limit,
        "Expired": False,
        "CreatedDate": now - age,
        "ExpirationDate": now - age + timedelta(hours=2),
        "Tags": [
            {"Key": "remote-debug:owner", "Value": owner},
            {"Key": "remote-debug:job", "Value": job},
            {"Key": "remote-debug:execution-role", "Value": ROLE},
        ],
        # botocore's model: RegistrationsCount is at least 1, i.e. absent before the first registration
        **({"RegistrationsCount": registered} if registered else {}),
    }


def _job_tags(owner: str, activation_id: str) -> dict[str, str]:
    return {
        "remote-debug:owner": owner,
        "remote-debug:transport": "hybrid",
        "remote-debug:ssm-activation": activation_id,
    }


@pytest.fixture
def cloud(monkeypatch: pytest.MonkeyPatch) -> Iterator[boto3.Session]:
    with moto_cloud(monkeypatch, REGION):
        session = boto3.Session(region_name=REGION)
        session.client("s3").create_bucket(Bucket=BUCKET)
        yield session


def _put_channel(s3: Any, job: str, activation_id: str | None = None) -> None:
    """The channel's two files as enable() writes them (``activation_id``: their metadata)."""
    metadata = {ha.METADATA_ACTIVATION: activation_id} if activation_id else {}
    for name in ("ssm-activation.json", "ssm-activation.txt"):
        s3.put_object(Bucket=BUCKET, Key=f"{job}/remote-debug/{name}", Body=CODE.encode(), Metadata=metadata)


def _objects(s3: Any) -> list[str]:
    return sorted(o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET).get("Contents", []))


def test_the_laptop_retires_the_activation_when_the_job_ends_before_every_node_registered(cloud: Any) -> None:
    from remote_debug.laptop.aws.enable.leftovers import retire_job

    ssm, s3 = cloud.client("ssm"), cloud.client("s3")
    api = FakeSsmApi(ssm)
    api.activations[ACTIVATION_ID] = _activation("job-a", MOTO_USER_ID, registered=1)  # algo-2 never came
    _put_channel(s3, "job-a")
    described = FakeSageMakerApi(cloud.client("sagemaker"), {}, lambda j: f"s3://{BUCKET}/{j}/remote-debug")
    described.jobs["job-a"] = ("Failed", _job_tags(MOTO_USER_ID, ACTIVATION_ID))
    done = retire_job("job-a", described.described("job-a"), described.jobs["job-a"][1], ssm=ssm, s3=s3)
    assert [(d.kind, d.id) for d in done] == [
        ("activation", ACTIVATION_ID),
        ("s3-object", f"s3://{BUCKET}/job-a/remote-debug/ssm-activation.json"),
        ("s3-object", f"s3://{BUCKET}/job-a/remote-debug/ssm-activation.txt"),
    ]
    assert api.activations == {} and _objects(s3) == []
    assert all(d.why == "the job is Failed" for d in done)


def test_an_ended_jobs_retirement_leaves_a_newer_jobs_file_in_a_shared_channel(cloud: Any) -> None:
    """Two jobs given the same package_uri (against the rules): the channel holds the newer job's files,
    which the older job's retirement must not delete while the newer job's nodes still need them."""
    from remote_debug.laptop.aws.enable.leftovers import retire_job

    ssm, s3 = cloud.client("ssm"), cloud.client("s3")
    api = FakeSsmApi(ssm)
    newer = "0a1b2c3d-1111-2222-3333-999999999999"
    api.activations[ACTIVATION_ID] = _activation("old-job", MOTO_USER_ID, registered=2)
    _put_channel(s3, "shared", activation_id=newer)  # overwritten by the newer job's enable()
    jobs = {"old-job": ("Completed", _job_tags(MOTO_USER_ID, ACTIVATION_ID))}
    fake = FakeSageMakerApi(cloud.client("sagemaker"), jobs, lambda j: f"s3://{BUCKET}/shared/remote-debug")
    done = retire_job("old-job", fake.described("old-job"), fake.jobs["old-job"][1], ssm=ssm, s3=s3)
    assert [d.kind for d in done] == ["activation"]
    assert len(_objects(s3)) == 2


def test_the_laptop_retires_a_running_jobs_spent_activation_but_keeps_the_channel(cloud: Any) -> None:
    from remote_debug.laptop.aws.enable.leftovers import retire_job

    ssm, s3 = cloud.client("ssm"), cloud.client("s3")
    api = FakeSsmApi(ssm)
    _put_channel(s3, "job-b")
    jobs = {"job-b": ("InProgress", _job_tags(MOTO_USER_ID, ACTIVATION_ID))}
    fake = FakeSageMakerApi(cloud.client("sagemaker"), jobs, lambda j: f"s3://{BUCKET}/{j}/remote-debug")
    described, tags = fake.described("job-b"), fake.jobs["job-b"][1]
    api.activations[ACTIVATION_ID] = _activation("job-b", MOTO_USER_ID, registered=1)
    assert retire_job("job-b", described, tags, ssm=ssm, s3=s3) == []  # a node still to register: keep both
    assert ACTIVATION_ID in api.activations and len(_objects(s3)) == 2
    api.activations[ACTIVATION_ID]["RegistrationsCount"] = 2
    done = retire_job("job-b", described, tags, ssm=ssm, s3=s3)
    assert [d.kind for d in done] == ["activation", "s3-object"]
    assert api.activations == {} and _objects(s3) == ["job-b/remote-debug/ssm-activation.txt"]


# --- the expiry ------------------------------------------------------------------------------------------


def test_the_activation_expires_hours_after_enable_not_after_the_jobs_runtime(
    cloud: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("REMOTE_DEBUG_HYBRID_REGISTRATION_WINDOW", raising=False)
    monkeypatch.setattr(ha, "_pending", {})
    sent: list[dict[str, Any]] = []

    class Session:
        events = cloud.events

        def __init__(self) -> None:
            self.ssm = cloud.client("ssm")
            self.stub = Stubber(self.ssm)
            self.stub.add_response("create_activation", {"ActivationId": ACTIVATION_ID, "ActivationCode": CODE})
            self.stub.add_response("get_service_setting", {"ServiceSetting": {"SettingValue": "advanced"}})
            self.ssm.meta.events.register(
                "provide-client-params.ssm.CreateActivation", lambda params, **_: sent.append(dict(params))
            )
            self.stub.activate()

        def client(self, name: str, **kwargs: Any) -> Any:
            return self.ssm if name == "ssm" else cloud.client(name, **kwargs)

    request = {
        "TrainingJobName": "long-job",
        "RoleArn": ROLE,
        "AlgorithmSpecification": {
            "TrainingImage": IMAGE,
            "TrainingInputMode": "File",
            "ContainerEntrypoint": ["python3", "train.py"],
        },
        "OutputDataConfig": {"S3OutputPath": f"s3://{BUCKET}/out"},
        "ResourceConfig": {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 4, "VolumeSizeInGB": 500},
        "StoppingCondition": {"MaxRuntimeInSeconds": 5 * 86400},  # a five-day job
    }
    before = datetime.now(timezone.utc)
    out = remote_debug.enable(
        request,
        transport="hybrid",
        hybrid_role=MI_ROLE,
        owner="alice",
        package_uri=f"s3://{BUCKET}/long-job/remote-debug",
        boto_session=Session(),
        key_dir=tmp_path,
    )
    assert ha.tag_value(out["Tags"], "remote-debug:ssm-activation") == ACTIVATION_ID
    [params] = sent
    lifetime = params["ExpirationDate"] - before
    # long enough for big GPU instances to start, pull the image and register; nothing like 5 days (+1 h)
    assert timedelta(hours=1) < lifetime <= timedelta(hours=2, minutes=1)
    assert params["RegistrationLimit"] == 4
    # and the instances it registers carry the tag the execution role's policy scopes deregistration by
    assert {"Key": "remote-debug:execution-role", "Value": ROLE} in params["Tags"]


# --- the execution role's deregistration scope ------------------------------------------------------------


def _condition_holds(operator: str, key: str, expected: Any, context: dict[str, str]) -> bool:
    if key not in context:
        return False
    values = expected if isinstance(expected, list) else [expected]
    values = [re.sub(r"\$\{([^}]+)\}", lambda m: context.get(m.group(1), "\0"), v) for v in values]
    if operator == "StringEquals":
        return context[key] in values
    if operator == "StringLike":
        return any(fnmatch.fnmatchcase(context[key], v) for v in values)
    raise AssertionError(f"no evaluator for {operator}")


def allowed(policy: dict[str, Any], action: str, resource: str, context: dict[str, str]) -> bool:
    """Whether an identity policy of Allow statements allows ``action`` on ``resource`` (StringEquals /
    StringLike conditions with policy variables; a missing key fails its condition, as in IAM)."""
    for statement in policy["Statement"]:
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        if action not in actions or not any(fnmatch.fnmatchcase(resource, r) for r in resources):
            continue
        if all(
            _condition_holds(op, key, value, context)
            for op, keys in statement.get("Condition", {}).items()
            for key, value in keys.items()
        ):
            return True
    return False


def test_the_execution_role_deregisters_only_instances_of_jobs_running_as_itself() -> None:
    policy = json.loads((TEMPLATES / "hybrid-execution-role-policy.json").read_text())
    [statement] = [s for s in policy["Statement"] if "ssm:DeregisterManagedInstance" in json.dumps(s["Action"])]
    assert statement["Condition"]["StringEquals"] == {
        "ssm:resourceTag/remote-debug:execution-role": "${aws:PrincipalArn}"
    }
    # the key is the tag enable() puts on the activation (and SSM on its instances), with the job's RoleArn
    assert ha.TAG_ROLE == "remote-debug:execution-role" and ha.execution_role_tag({"RoleArn": ROLE}) == ROLE

    instance = "arn:aws:ssm:us-east-1:123456789012:managed-instance/mi-0123456789abcdef0"
    job = {"aws:PrincipalArn": ROLE}  # a training job's role session: aws:PrincipalArn is the role's ARN

    def tagged(**tags: str) -> dict[str, str]:
        return {**job, **{f"ssm:resourceTag/{k.replace('_', '-').replace('--', ':')}": v for k, v in tags.items()}}

    own = tagged(
        **{
            "remote_debug--owner": "AROAEXAMPLE:alice",
            "remote_debug--job": "job-a",
            "remote_debug--execution_role": ROLE,
        }
    )
    assert allowed(policy, "ssm:DeregisterManagedInstance", instance, own)
    other_team = tagged(
        **{
            "remote_debug--owner": "AROAEXAMPLE:bob",
            "remote_debug--job": "job-b",
            "remote_debug--execution_role": OTHER_ROLE,
        }
    )
    assert not allowed(policy, "ssm:DeregisterManagedInstance", instance, other_team)
    on_premises = tagged(Environment="Production")  # somebody's server registered with SSM
    assert not allowed(policy, "ssm:DeregisterManagedInstance", instance, on_premises)
    forged = tagged(**{"remote_debug--owner": "x", "remote_debug--execution_role": OTHER_ROLE})
    assert not allowed(policy, "ssm:DeregisterManagedInstance", instance, forged)
    assert not allowed(policy, "ssm:DeleteActivation", "*", own)  # not in the default policy

    retire = json.loads((TEMPLATES / "hybrid-execution-role-retire-policy.json").read_text())
    assert allowed(retire, "s3:DeleteObject", f"arn:aws:s3:::{BUCKET}/job-a/remote-debug/ssm-activation.json", job)
    assert not allowed(retire, "s3:DeleteObject", f"arn:aws:s3:::{BUCKET}/job-a/model.tar.gz", job)


# --- remote-debug cleanup --------------------------------------------------------------------------------


def _ids(n: int) -> str:
    return f"0a1b2c3d-1111-2222-3333-{n:012d}"


@pytest.fixture
def account(cloud: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeSsmApi, Any]]:
    """Mine: A (Failed, 1/2 registered, an instance left), B (running, 1/2), C (running, 2/2), G (Completed,
    activation gone, files left), E (never created, 3 h old), F (not created yet, 5 min old).  Bob's: D
    (Failed) with an activation, an instance and files."""
    from remote_debug.cli import cleanup as cleanup_cli

    me, bob = MOTO_USER_ID, "AROAEXAMPLE:bob"
    ssm, s3, sagemaker = cloud.client("ssm"), cloud.client("s3"), cloud.client("sagemaker")
    api = FakeSsmApi(ssm)
    jobs = {
        "job-a": ("Failed", _job_tags(me, _ids(1))),
        "job-b": ("InProgress", _job_tags(me, _ids(2))),
        "job-c": ("InProgress", _job_tags(me, _ids(3))),
        "job-g": ("Completed", _job_tags(me, _ids(7))),
        "job-d": ("Failed", _job_tags(bob, _ids(4))),
    }
    FakeSageMakerApi(sagemaker, jobs, lambda j: f"s3://{BUCKET}/{j}/remote-debug")
    for n, job, owner, registered, age in (
        (1, "job-a", me, 1, 20),
        (2, "job-b", me, 1, 20),
        (3, "job-c", me, 2, 20),
        (4, "job-d", bob, 1, 20),
        (5, "job-e", me, 0, 180),
        (6, "job-f", me, 0, 5),
    ):
        api.activations[_ids(n)] = _activation(
            job, owner, registered, age=timedelta(minutes=age), activation_id=_ids(n)
        )
    for mi, job, owner in (
        ("mi-0000000000000000a", "job-a", me),
        ("mi-0000000000000000b", "job-b", me),
        ("mi-0000000000000000c", "job-c", me),
        ("mi-0000000000000000d", "job-d", bob),
    ):
        api.instances[mi] = {"remote-debug:owner": owner, "remote-debug:job": job}
    for job in ("job-a", "job-b", "job-c", "job-g", "job-d"):
        _put_channel(s3, job)

    class Session:
        def client(self, name: str, **_kwargs: Any) -> Any:
            return {"ssm": ssm, "s3": s3, "sagemaker": sagemaker}.get(name) or cloud.client(name)

    monkeypatch.setattr(cleanup_cli, "open_session", lambda region: Session())
    yield api, s3


EXPECTED = {
    ("activation", _ids(1), "job-a", "the job is Failed"),
    ("s3-object", f"s3://{BUCKET}/job-a/remote-debug/ssm-activation.json", "job-a", "the job is Failed"),
    ("s3-object", f"s3://{BUCKET}/job-a/remote-debug/ssm-activation.txt", "job-a", "the job is Failed"),
    ("activation", _ids(3), "job-c", "every node registered (2/2)"),
    ("s3-object", f"s3://{BUCKET}/job-c/remote-debug/ssm-activation.json", "job-c", "every node registered (2/2)"),
    ("activation", _ids(5), "job-e", "its job was never created"),
    ("managed-instance", "mi-0000000000000000a", "job-a", "the job is Failed"),
    ("s3-object", f"s3://{BUCKET}/job-g/remote-debug/ssm-activation.json", "job-g", "the job is Completed"),
    ("s3-object", f"s3://{BUCKET}/job-g/remote-debug/ssm-activation.txt", "job-g", "the job is Completed"),
}


def test_cleanup_lists_only_without_yes(account: tuple[FakeSsmApi, Any]) -> None:
    api, s3 = account
    before = _objects(s3)
    code, out, err = run_cli("cleanup", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["owner"] == MOTO_USER_ID and report["deleted"] is False
    assert {(i["kind"], i["id"], i["job"], i["why"]) for i in report["leftovers"]} == EXPECTED
    deleting = ("DeleteActivation", "DeregisterManagedInstance")
    assert not [c for c in api.calls if c[0] in deleting] and _objects(s3) == before
    code, out, _ = run_cli("cleanup")
    assert code == 0 and "nothing deleted: run 'remote-debug cleanup --yes' to delete these 9" in out


def test_cleanup_yes_deletes_them_and_leaves_other_users_and_running_jobs_alone(
    account: tuple[FakeSsmApi, Any],
) -> None:
    api, s3 = account
    code, out, err = run_cli("cleanup", "--yes", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["deleted"] is True and all(i["error"] is None for i in report["leftovers"])
    assert {(i["kind"], i["id"]) for i in report["leftovers"]} == {(k, i) for k, i, _j, _w in EXPECTED}
    # left: B's activation (a node still to register), D's (Bob's), F's (its job may still be submitted)
    assert sorted(api.activations) == [_ids(2), _ids(4), _ids(6)]
    # left: the running jobs' instances and Bob's; gone: the ended job's
    assert sorted(api.instances) == ["mi-0000000000000000b", "mi-0000000000000000c", "mi-0000000000000000d"]
    assert _objects(s3) == [
        "job-b/remote-debug/ssm-activation.json",
        "job-b/remote-debug/ssm-activation.txt",
        "job-c/remote-debug/ssm-activation.txt",  # the running job's channel stays non-empty
        "job-d/remote-debug/ssm-activation.json",
        "job-d/remote-debug/ssm-activation.txt",
    ]
    # Bob's job was never even described: his tags said it is not ours
    assert [c for c in api.called("DescribeInstanceInformation")] == [
        {"Filters": [{"Key": "tag:remote-debug:owner", "Values": [MOTO_USER_ID]}]}
    ]
    code, out, _ = run_cli("cleanup")  # nothing left to do
    assert code == 0 and "no leftovers of hybrid jobs of" in out


def test_cleanup_reports_a_refused_deletion_and_exits_1(account: tuple[FakeSsmApi, Any]) -> None:
    api, _s3 = account
    api.refused.add("DeregisterManagedInstance")
    code, out, err = run_cli("cleanup", "--yes")
    assert code == 1, (out, err)
    assert "could not delete: deregistering managed-instance mi-0000000000000000a of job job-a: access denied" in err
    assert "deleted: activation" in out


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["cleanup", "--days", "0"], "--days"),
        (["cleanup", "--days", "many"], "--days"),
        (["cleanup", "--yes", "--bogus"], "--bogus"),
        (["cleanup", "extra-arg"], "extra-arg"),
    ],
)
def test_cleanup_bad_input_is_one_line_and_exit_2(args: list[str], needle: str) -> None:
    code, _out, err = run_cli(*args)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("remote-debug: error: ") and needle in lines[0], err


def test_cleanup_without_a_region_is_one_line_and_exit_2(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    code, _out, err = run_cli("cleanup")
    assert code == 2 and err.count("\n") == 1 and "no AWS region" in err
