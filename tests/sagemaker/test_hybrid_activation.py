"""``enable(..., transport="hybrid")``: the job's SSM activation is created, handed over in the
``remote_debug`` channel and nowhere else, and deleted when CreateTrainingJob fails.

moto has no CreateActivation / DeleteActivation, so SSM goes through ``botocore.stub.Stubber``
(which still validates every parameter against botocore's SSM model); S3, STS and SageMaker are moto.
"""

from __future__ import annotations

import copy
import json
import warnings
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, EndpointConnectionError
from botocore.stub import Stubber

import remote_debug
from remote_debug.container.node.hybrid import DEFAULT_ACTIVATION_FILE
from remote_debug.contract.spec import DebugOptions
from remote_debug.laptop.aws import sagemaker_backend as backend
from remote_debug.laptop.aws import ssm
from remote_debug.laptop.aws.enable import hybrid_activation as ha
from remote_debug.laptop.aws.enable import sdk_v2
from remote_debug.laptop.aws.enable.bundle import CHANNEL_ROOT, CODE_ROOT, inject_dir
from remote_debug.laptop.aws.enable.intercept import PendingEnable, marked
from remote_debug.laptop.aws.enable.keyed_request import enable_with_key
from remote_debug.laptop.aws.enable.terms import JobTransport, RemoteDebugWarning, role_name
from remote_debug.laptop.core.errors import UserError
from remote_debug.laptop.core.jobinfo import SageMakerJobDetails
from remote_debug.laptop.core.paths import StatePaths
from tests.helpers.fake_aws import moto_cloud
from tests.helpers.sagemaker_checks import IMAGE, MOTO_USER_ID, ROLE, validate

REGION = "us-east-1"
BUCKET = "rd-bucket"
JOB = "rd-hybrid-1"
PACKAGE_URI = f"s3://{BUCKET}/{JOB}/remote-debug"
MI_ROLE = "arn:aws:iam::123456789012:role/service-role/RemoteDebugManagedInstance"
MI_ROLE_NAME = "service-role/RemoteDebugManagedInstance"
ACTIVATION_ID = "0a1b2c3d-1111-2222-3333-444455556666"
CODE = "Xq7Z2sPk9LmN4vB8cD1e"  # what an activation code looks like; must never leave the S3 object
NOW = datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
TIER = "/ssm/managed-instance/activation-tier"

REQUEST: dict[str, Any] = {
    "TrainingJobName": JOB,
    "RoleArn": ROLE,
    "AlgorithmSpecification": {
        "TrainingImage": IMAGE,
        "TrainingInputMode": "File",
        "ContainerEntrypoint": ["python3", "/opt/ml/input/data/code/train.py"],
    },
    "InputDataConfig": [
        {
            "ChannelName": "code",
            "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": f"s3://{BUCKET}/{JOB}/code"}},
        }
    ],
    "OutputDataConfig": {"S3OutputPath": f"s3://{BUCKET}/output"},
    "ResourceConfig": {"InstanceType": "ml.g5.12xlarge", "InstanceCount": 2, "VolumeSizeInGB": 50},
    "StoppingCondition": {"MaxRuntimeInSeconds": 4 * 3600},
    "Environment": {"USER_VAR": "kept"},
    "Tags": [{"Key": "team", "Value": "ml"}],
}


def expected_create(
    job: str = JOB, count: int = 2, lifetime: timedelta = timedelta(hours=2), owner: str = MOTO_USER_ID
) -> dict[str, Any]:
    return {
        "Description": f"remote-debug hybrid transport of SageMaker training job {job}",
        "DefaultInstanceName": job,
        "IamRole": MI_ROLE_NAME,
        "RegistrationLimit": count,
        "ExpirationDate": NOW + lifetime,  # the registration window, not the job's runtime
        "Tags": [
            {"Key": "remote-debug:owner", "Value": owner},
            {"Key": "remote-debug:job", "Value": job},
            {"Key": "remote-debug:execution-role", "Value": ROLE},
        ],
    }


class StubbedSession:
    """A boto3 session (moto behind it) whose SSM client is a Stubber's."""

    def __init__(self) -> None:
        self.real = boto3.Session(region_name=REGION)
        self.ssm = self.real.client("ssm")
        self.stub = Stubber(self.ssm)
        self.stub.activate()
        self.events = self.real.events

    def client(self, name: str, **kwargs: Any) -> Any:
        return self.ssm if name == "ssm" else self.real.client(name, **kwargs)

    def expect_create(
        self, activation_id: str = ACTIVATION_ID, code: str = CODE, tier: str | None = "advanced", **expected: Any
    ) -> None:
        """CreateActivation, then (``tier``: enable() accepted the job) the instance tier it reads."""
        self.stub.add_response(
            "create_activation", {"ActivationId": activation_id, "ActivationCode": code}, expected_create(**expected)
        )
        if tier is not None:
            self.expect_tier(tier)

    def expect_tier(self, value: str) -> None:
        self.stub.add_response(
            "get_service_setting",
            {
                "ServiceSetting": {
                    "SettingId": TIER,
                    "SettingValue": value,
                    "Status": "Default",
                }
            },
            {"SettingId": TIER},
        )

    def expect_delete(self, activation_id: str = ACTIVATION_ID) -> None:
        self.stub.add_response("delete_activation", {}, {"ActivationId": activation_id})


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(ha, "_pending", {})
    monkeypatch.setattr(ha, "_utcnow", lambda: NOW)
    yield


@pytest.fixture
def session(monkeypatch: pytest.MonkeyPatch) -> Iterator[StubbedSession]:
    with moto_cloud(monkeypatch, REGION):
        made = StubbedSession()
        made.real.client("s3").create_bucket(Bucket=BUCKET)
        yield made
        made.stub.assert_no_pending_responses()


def capturing(client: Any) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []
    client.meta.events.register(
        "before-call.sagemaker.CreateTrainingJob", lambda params, **_: sent.append(json.loads(params["body"]))
    )
    return sent


NOTE = "ssm-activation.txt"


def s3_object(session: StubbedSession, uri: str) -> Any:
    bucket, _, prefix = uri[len("s3://") :].partition("/")
    body = session.real.client("s3").get_object(Bucket=bucket, Key=f"{prefix}/ssm-activation.json")["Body"].read()
    return json.loads(body)


def s3_keys(session: StubbedSession) -> list[str]:
    listed = session.real.client("s3").list_objects_v2(Bucket=BUCKET)
    return sorted(o["Key"] for o in listed.get("Contents", []))


def no_secret_on_disk(root: Path) -> None:
    for path in root.rglob("*"):
        if path.is_file():
            assert CODE.encode() not in path.read_bytes(), path


def enable_hybrid(request: dict[str, Any], session: StubbedSession, state: Path, **kwargs: Any) -> dict[str, Any]:
    out: dict[str, Any] = remote_debug.enable(
        request,
        transport="hybrid",
        hybrid_role=MI_ROLE,
        package_uri=kwargs.pop("package_uri", PACKAGE_URI),
        boto_session=session,
        key_dir=state,
        **kwargs,
    )
    return out


# --- the raw request path ---------------------------------------------------------------------------


def test_raw_request_gets_an_activation_in_its_channel_and_nowhere_else(session: StubbedSession, state: Path) -> None:
    session.expect_create()
    original = copy.deepcopy(REQUEST)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RemoteDebugWarning)  # the tier is advanced: nothing to say
        out = enable_hybrid(REQUEST, session, state)
    assert original == REQUEST
    assert ha.pending() == {ACTIVATION_ID: JOB}

    sagemaker = session.client("sagemaker")  # made after enable(): it inherits the failure hooks
    sent = capturing(sagemaker)
    sagemaker.create_training_job(**out)
    [request] = sent
    validate("CreateTrainingJob", request)

    # The code is in no part of the request: not the environment, hyperparameters, tags nor argv.
    assert CODE not in json.dumps(request) and CODE not in json.dumps(out)
    no_secret_on_disk(state)
    # It is in the remote_debug channel, which SageMaker puts at the container's default path.
    [channel] = [c for c in request["InputDataConfig"] if c["ChannelName"] == "remote_debug"]
    assert channel["DataSource"]["S3DataSource"]["S3Uri"] == PACKAGE_URI and channel["InputMode"] == "File"
    assert s3_object(session, PACKAGE_URI) == {
        "ActivationId": ACTIVATION_ID,
        "ActivationCode": CODE,
        "Region": REGION,
        "S3Uri": f"{PACKAGE_URI}/ssm-activation.json",  # where the node finds it to retire it
    }
    assert s3_keys(session) == [f"{JOB}/remote-debug/ssm-activation.json", f"{JOB}/remote-debug/{NOTE}"]
    for name in ("ssm-activation.json", NOTE):  # which activation they belong to (a shared prefix is not ours)
        head = session.real.client("s3").head_object(Bucket=BUCKET, Key=f"{JOB}/remote-debug/{name}")
        assert head["Metadata"] == {"remote-debug-activation": ACTIVATION_ID}
    assert f"{CHANNEL_ROOT}/{ha.ACTIVATION_FILE}" == DEFAULT_ACTIVATION_FILE  # where the container looks

    assert "RemoteDebugConfig" not in request  # hybrid replaces native remote debugging
    assert request["Environment"]["REMOTE_DEBUG_TRANSPORT"] == "hybrid"
    assert "PYTHONPATH" not in request["Environment"]  # the wrapped entry's hook sets it (keeping the image's)
    assert request["Tags"] == [
        {"Key": "team", "Value": "ml"},
        {"Key": "remote-debug:owner", "Value": MOTO_USER_ID},
        {"Key": "remote-debug:enabled", "Value": "spec-v1"},
        {"Key": "remote-debug:transport", "Value": "hybrid"},
        {"Key": "remote-debug:ssm-activation", "Value": ACTIVATION_ID},
    ]
    assert ha.pending() == {}  # the job exists: its nodes register and deregister; nothing to clean up

    # The laptop picks the hybrid transport from the tag (moto, like SageMaker, keeps the tags).
    described = sagemaker.describe_training_job(TrainingJobName=JOB)
    tags = {t["Key"]: t["Value"] for t in sagemaker.list_tags(ResourceArn=described["TrainingJobArn"])["Tags"]}
    info = backend.job_info(JOB, {**described, "Environment": {}}, tags, REGION)
    assert (sm := info.details_of(SageMakerJobDetails)) is not None and sm.transport == "hybrid" and info.debuggable


def test_failed_create_training_job_deletes_the_activation(session: StubbedSession, state: Path) -> None:
    session.expect_create()
    session.expect_delete()
    out = enable_hybrid(REQUEST, session, state)
    assert s3_keys(session) == [f"{JOB}/remote-debug/ssm-activation.json", f"{JOB}/remote-debug/{NOTE}"]
    sagemaker = session.client("sagemaker")
    with Stubber(sagemaker) as refusing:
        refusing.add_client_error("create_training_job", "ResourceLimitExceeded", http_status_code=400)
        with pytest.raises(ClientError, match="ResourceLimitExceeded"):
            sagemaker.create_training_job(**out)
    assert ha.pending() == {}
    assert s3_keys(session) == []  # the file (and its note) went with it


def test_no_response_deletes_the_activation_too(session: StubbedSession, state: Path) -> None:
    session.expect_create()
    session.expect_delete()
    out = enable_hybrid(REQUEST, session, state)
    sagemaker = session.client("sagemaker", config=Config(retries={"total_max_attempts": 1}))

    def unreachable(**_kwargs: Any) -> None:
        raise EndpointConnectionError(endpoint_url="https://api.sagemaker.us-east-1.amazonaws.com")

    sagemaker.meta.events.register_first("before-send.sagemaker.CreateTrainingJob", unreachable)
    with pytest.raises(EndpointConnectionError):
        sagemaker.create_training_job(**out)
    assert ha.pending() == {} and s3_keys(session) == []


def test_a_client_made_elsewhere_is_watched_on_request(session: StubbedSession, state: Path) -> None:
    session.expect_create()
    session.expect_delete()
    sagemaker = boto3.client("sagemaker", region_name=REGION)  # not from the session given to enable()
    out = enable_hybrid(REQUEST, session, state)
    ha.watch_client(sagemaker)
    with Stubber(sagemaker) as refusing:
        refusing.add_client_error("create_training_job", "ValidationException")
        with pytest.raises(ClientError):
            sagemaker.create_training_job(**out)
    assert ha.pending() == {}


def test_a_second_create_of_a_started_job_does_not_delete_its_activation(session: StubbedSession, state: Path) -> None:
    session.expect_create()  # and no delete: the running job's nodes need it
    out = enable_hybrid(REQUEST, session, state)
    sagemaker = session.client("sagemaker")
    sagemaker.create_training_job(**out)
    with Stubber(sagemaker) as refusing:
        refusing.add_client_error("create_training_job", "ResourceInUse")
        with pytest.raises(ClientError):
            sagemaker.create_training_job(**out)
    assert s3_keys(session) == [f"{JOB}/remote-debug/ssm-activation.json", f"{JOB}/remote-debug/{NOTE}"]


def test_discard_and_enabling_again_leave_no_activation_behind(session: StubbedSession, state: Path) -> None:
    second_id = "0a1b2c3d-1111-2222-3333-777788889999"
    session.expect_create()
    session.expect_delete(ACTIVATION_ID)  # replaced by the second enable()
    session.expect_create(activation_id=second_id, code="AnotherCode123456789")
    session.expect_delete(second_id)  # discarded
    once = enable_hybrid(REQUEST, session, state)
    twice = enable_hybrid(once, session, state)
    assert ha.tag_value(twice["Tags"], "remote-debug:ssm-activation") == second_id
    assert [t["Key"] for t in twice["Tags"]] == [t["Key"] for t in once["Tags"]]
    assert ha.pending() == {second_id: JOB}
    # The second activation's file is the one at the channel's key.
    assert s3_object(session, PACKAGE_URI)["ActivationId"] == second_id
    assert ha.discard(twice) and not ha.discard(twice)
    assert ha.pending() == {} and s3_keys(session) == []


def test_an_unwritable_channel_deletes_the_activation_and_leaves_no_key(session: StubbedSession, state: Path) -> None:
    session.expect_create(tier=None)
    session.expect_delete()
    with pytest.raises(UserError, match=r"writing the SSM activation of job rd-hybrid-1 to s3://missing-bucket/"):
        enable_hybrid(REQUEST, session, state, package_uri="s3://missing-bucket/x/remote-debug")
    assert ha.pending() == {}
    assert not (state / "keys" / JOB).exists()


def test_create_activation_errors_are_one_line(session: StubbedSession, state: Path) -> None:
    session.stub.add_client_error("create_activation", "AccessDeniedException", "not authorized: iam:PassRole")
    with pytest.raises(UserError, match=r"creating the SSM activation of job rd-hybrid-1 .*access denied") as info:
        enable_hybrid(REQUEST, session, state)
    assert "\n" not in str(info.value)
    assert not (state / "keys" / JOB).exists()


# --- the account's instance tier ---------------------------------------------------------------------


def test_a_standard_tier_is_a_warning_with_the_command_that_fixes_it(session: StubbedSession, state: Path) -> None:
    session.expect_create(tier="standard")
    with pytest.warns(RemoteDebugWarning) as caught:
        out = enable_hybrid(REQUEST, session, state)
    [warning] = caught
    message = str(warning.message)
    assert "standard in us-east-1" in message
    assert "refuses sessions to the job's hybrid (mi-) managed instances" in message
    assert f"aws ssm update-service-setting --setting-id {TIER} --setting-value advanced --region {REGION}" in message
    assert "\n" not in message
    assert warning.filename == __file__  # shown at the launcher's line, not inside remote_debug
    assert ha.tag_value(out["Tags"], "remote-debug:ssm-activation") == ACTIVATION_ID  # the job is still made


def test_an_unreadable_tier_is_a_warning_too(session: StubbedSession, state: Path) -> None:
    session.expect_create(tier=None)
    session.stub.add_client_error("get_service_setting", "AccessDeniedException", "not authorized")
    with pytest.warns(RemoteDebugWarning, match=r"could not check the SSM managed-instance tier .*--setting-value"):
        enable_hybrid(REQUEST, session, state)


def test_the_tier_setting_is_the_one_doctor_reads() -> None:
    assert ha.TIER_SETTING == ssm.ACTIVATION_TIER_SETTING == TIER


def test_the_note_is_the_file_the_container_looks_for() -> None:
    from remote_debug.container.node import hybrid

    assert ha.NOTE_FILE == hybrid.NOTE_FILE and Path(DEFAULT_ACTIVATION_FILE).name == ha.ACTIVATION_FILE


@pytest.mark.parametrize(
    ("role", "needle"),
    [
        (None, "the request has no RoleArn"),
        ("SageMakerExecution", "the request has no RoleArn"),
        ("arn:aws:iam::123456789012:role/" + "p/" * 120 + "R", "over the 256 of an SSM tag value"),
    ],
)
def test_the_execution_role_tag_needs_a_role_arn_that_fits(role: str | None, needle: str) -> None:
    with pytest.raises(UserError, match=needle):
        ha.execution_role_tag({} if role is None else {"RoleArn": role})


# --- the SDK paths' requests (no SDK needed: the requests they send, through the same hook) ----------


def test_sdk_v2_request_gets_a_channel_next_to_its_code(session: StubbedSession, state: Path) -> None:
    job = "rd-test-2030-01-02-03-04-05-678"
    submit = f"s3://{BUCKET}/{job}/source/sourcedir.tar.gz"
    session.expect_create(job=job, count=1, owner="alice", tier=None)
    hybrid = JobTransport.parse("hybrid", MI_ROLE)
    apply = sdk_v2.request_rewriter(
        DebugOptions(), hybrid, owner="alice", paths=StatePaths(state), boto_session=session
    )
    pending = PendingEnable(apply)
    sagemaker = session.client("sagemaker")
    pending.install(clients=[sagemaker])
    ha.watch_client(sagemaker)
    sent = capturing(sagemaker)
    sagemaker.create_training_job(  # what SDK v2's PyTorch estimator sends (see test_sdk_capture)
        TrainingJobName=job,
        RoleArn=ROLE,
        AlgorithmSpecification={"TrainingImage": IMAGE, "TrainingInputMode": "File"},
        HyperParameters={"sagemaker_submit_directory": json.dumps(submit), "sagemaker_program": '"train.py"'},
        OutputDataConfig={"S3OutputPath": f"s3://{BUCKET}/"},
        ResourceConfig={"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 30},
        StoppingCondition={"MaxRuntimeInSeconds": 86400},
        Environment=marked({"USER_VAR": "kept"}, pending),
    )
    [request] = sent
    validate("CreateTrainingJob", request)
    assert CODE not in json.dumps(request)
    channel_uri = f"s3://{BUCKET}/{job}/source/remote_debug"
    assert request["InputDataConfig"] == [
        {
            "ChannelName": "remote_debug",
            "DataSource": {
                "S3DataSource": {
                    "S3DataType": "S3Prefix",
                    "S3Uri": channel_uri,
                    "S3DataDistributionType": "FullyReplicated",
                }
            },
            "InputMode": "File",
        }
    ]
    assert s3_object(session, channel_uri)["ActivationCode"] == CODE
    # no entry to wrap (the toolkit runs the script): the environment carries the hook, from the code dir
    assert request["Environment"]["PYTHONPATH"] == inject_dir(CODE_ROOT)
    assert "RemoteDebugConfig" not in request
    assert {"Key": "remote-debug:transport", "Value": "hybrid"} in request["Tags"]
    assert ha.pending() == {}


def test_sdk_v3_request_uses_the_channel_the_sdk_uploaded(session: StubbedSession, state: Path) -> None:
    job = "rd-test-20300102030405"
    channel_uri = f"s3://{BUCKET}/rd-test/{job}/input/remote_debug"
    session.expect_create(job=job, count=3, owner="alice", tier=None)
    request = {
        **{k: v for k, v in REQUEST.items() if k != "Tags"},
        "TrainingJobName": job,
        "AlgorithmSpecification": {**REQUEST["AlgorithmSpecification"], "ContainerEntrypoint": ["/bin/bash"]},
        "InputDataConfig": [
            {
                "ChannelName": "remote_debug",
                "DataSource": {
                    "S3DataSource": {
                        "S3DataType": "S3Prefix",
                        "S3Uri": channel_uri,
                        "S3DataDistributionType": "FullyReplicated",
                    }
                },
                "InputMode": "File",
            }
        ],
        "ResourceConfig": {
            "InstanceGroups": [
                {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "InstanceGroupName": "a"},
                {"InstanceType": "ml.g5.xlarge", "InstanceCount": 2, "InstanceGroupName": "b"},
            ],
            "VolumeSizeInGB": 30,
        },
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
    }
    activations = ha.Activations.for_session(MI_ROLE, session)
    hybrid = JobTransport.parse("hybrid", MI_ROLE)
    out = enable_with_key(
        request, DebugOptions(), transport=hybrid, owner="alice", paths=StatePaths(state), activations=activations
    )
    validate("CreateTrainingJob", out)
    assert out["InputDataConfig"] == request["InputDataConfig"]  # nothing added: the SDK's channel carries it
    assert s3_object(session, channel_uri)["ActivationId"] == ACTIVATION_ID
    assert CODE not in json.dumps(out)


# --- refusals and the numbers -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"transport": "hybrid"}, "transport='hybrid' needs hybrid_role"),
        ({"hybrid_role": MI_ROLE}, "hybrid_role applies to transport='hybrid' only"),
        ({"transport": "hybrid", "hybrid_role": "arn:aws:iam::123456789012:user/bob"}, "is not an IAM role ARN"),
        ({"transport": "hybrid", "hybrid_role": "x" * 65}, "is not an IAM role name SSM accepts"),
        ({"transport": "hybrid", "hybrid_role": MI_ROLE}, "pass package_uri='s3://...'"),
    ],
)
def test_hybrid_refusals_happen_before_any_aws_call(state: Path, kwargs: dict[str, Any], needle: str) -> None:
    class NoAws:
        events = None

        def client(self, *_args: Any, **_kwargs: Any) -> Any:
            return self

        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"AWS was called: {name}")

    request = {**REQUEST, "InputDataConfig": []}
    with pytest.raises(UserError, match=needle) as info:
        remote_debug.enable(request, owner="alice", key_dir=state, boto_session=NoAws(), **kwargs)
    assert "\n" not in str(info.value)
    assert not state.exists() or not any((state / "keys").glob("*"))


def test_pipe_mode_channel_is_refused() -> None:
    request = {
        **REQUEST,
        "AlgorithmSpecification": {**REQUEST["AlgorithmSpecification"], "TrainingInputMode": "Pipe"},
        "InputDataConfig": [
            {
                "ChannelName": "remote_debug",
                "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": "s3://b/x"}},
            }
        ],
    }
    with pytest.raises(UserError, match="Pipe mode"):
        ha.channel_uri(request)


def test_role_names_counts_and_lifetimes() -> None:
    assert role_name(MI_ROLE) == MI_ROLE_NAME
    assert role_name("arn:aws-cn:iam::123456789012:role/Plain") == "Plain"
    assert role_name("RemoteDebugManagedInstance") == "RemoteDebugManagedInstance"
    assert ha.instance_count({"ResourceConfig": {"InstanceCount": 4}}) == 4
    assert ha.instance_count({"ResourceConfig": {"InstanceGroups": [{"InstanceCount": 2}, {"InstanceCount": 3}]}}) == 5
    with pytest.raises(UserError, match="at most 1000"):
        ha.instance_count({"ResourceConfig": {"InstanceCount": 1001}})
    hour = timedelta(hours=1)
    # the registration window, whatever the runtime: a registered instance outlives its activation
    assert ha.lifetime({}, {}) == 2 * hour
    assert ha.lifetime({"StoppingCondition": {"MaxRuntimeInSeconds": 600}}, {}) == 2 * hour
    assert ha.lifetime({"StoppingCondition": {"MaxRuntimeInSeconds": 28 * 86400}}, {}) == 2 * hour
    spot = {"StoppingCondition": {"MaxRuntimeInSeconds": 3600, "MaxWaitTimeInSeconds": 5 * 3600}}
    assert ha.lifetime(spot, {}) == 4 * hour + 2 * hour  # the longest capacity wait that leaves the runtime
    long_spot = {"StoppingCondition": {"MaxRuntimeInSeconds": 3600, "MaxWaitTimeInSeconds": 40 * 86400}}
    assert ha.lifetime(long_spot, {}) == timedelta(days=30) - hour  # SSM takes 30 days at most
    # the laptop may widen (or narrow) the window for jobs whose instances start slowly
    assert ha.lifetime({}, {ha.ENV_REGISTRATION_WINDOW: "21600"}) == 6 * hour
    for bad in ("abc", "60", "nan", "-1", str(31 * 86400)):
        with pytest.raises(UserError, match=r"REMOTE_DEBUG_HYBRID_REGISTRATION_WINDOW=.* is not a number of seconds"):
            ha.lifetime({}, {ha.ENV_REGISTRATION_WINDOW: bad})
    assert ha.sdk_v2_channel_uri({"TrainingJobName": "j", "OutputDataConfig": {"S3OutputPath": "s3://b/out/"}}) == (
        "s3://b/out/j/remote_debug"  # an estimator without code (BYOC)
    )


# --- a capacity wait longer than the activation ------------------------------------------------------------


def test_a_job_that_waited_in_pending_past_its_activation_gets_a_new_one_before_its_nodes_read_it(
    session: StubbedSession, state: Path
) -> None:
    """SageMaker's Pending secondary status (a capacity wait) can outlast the 2 h activation: the laptop watching
    the job (attach, through the backend) makes a new one when the job leaves Pending, writes it over the job's
    ssm-activation.json, points the job's tag at it and deletes the old one - once, and never at the cost of the
    manifests."""
    session.expect_create()
    request = enable_hybrid(copy.deepcopy(REQUEST), session, state)
    sm = session.real.client("sagemaker")
    sm.create_training_job(**request)
    arn = sm.describe_training_job(TrainingJobName=JOB)["TrainingJobArn"]

    def described(secondary: str, waited: bool) -> dict[str, Any]:
        base = {k: v for k, v in request.items() if k not in ("Tags",)}
        transitions = [{"Status": "Starting", "StartTime": NOW}]
        if waited:
            transitions.append({"Status": "Pending", "StartTime": NOW})
        transitions.append({"Status": secondary, "StartTime": NOW})
        return {
            **base,
            "TrainingJobArn": arn,
            "TrainingJobStatus": "InProgress",
            "SecondaryStatus": secondary,
            "SecondaryStatusTransitions": transitions,
            "CreationTime": NOW,
            "ModelArtifacts": {"S3ModelArtifacts": ""},
        }

    clients = {
        "sagemaker": sm,
        "logs": session.real.client("logs"),
        "ssm": session.ssm,
        "s3": session.real.client("s3"),
    }
    later = NOW + timedelta(hours=3)  # the activation (2 h) has expired meanwhile
    renewed = "0a1b2c3d-9999-2222-3333-444455556666"
    old_entry = {
        "ActivationId": ACTIVATION_ID,
        "IamRole": MI_ROLE_NAME,
        "RegistrationLimit": 2,
        "ExpirationDate": NOW + timedelta(hours=2),
        "Expired": True,
    }
    session.stub.add_response(
        "describe_activations",
        {"ActivationList": [old_entry]},
        {"Filters": [{"FilterKey": "ActivationIds", "FilterValues": [ACTIVATION_ID]}]},
    )
    session.stub.add_response(
        "create_activation",
        {"ActivationId": renewed, "ActivationCode": "NewCode1234567890abcd"},
        {**expected_create(), "ExpirationDate": later + timedelta(hours=2)},
    )
    session.expect_delete()

    from remote_debug.laptop.aws.enable import hybrid_renewal
    from remote_debug.laptop.aws.sagemaker_backend import SageMakerBackend

    scripted = {"answer": described("Starting", waited=True)}
    sm.describe_training_job = lambda **_: scripted["answer"]
    original_now = ha._utcnow
    ha._utcnow = lambda: later
    try:
        # not yet: a job still Pending, or one that never waited, is left alone (no SSM call is stubbed for them)
        assert not hybrid_renewal.waited_for_capacity(described("Pending", waited=True))
        assert not hybrid_renewal.waited_for_capacity(described("Starting", waited=False))
        backend = SageMakerBackend(StatePaths(state), clients=clients.__getitem__, cache_seconds=0, log_interval=0)
        assert backend.manifests(JOB) == {"algo-1": None, "algo-2": None}
        backend.manifests(JOB)  # once per job: a second look makes no second activation
    finally:
        ha._utcnow = original_now
    assert s3_object(session, PACKAGE_URI)["ActivationId"] == renewed
    assert s3_object(session, PACKAGE_URI)["ActivationCode"] == "NewCode1234567890abcd"
    tags = {t["Key"]: t["Value"] for t in sm.list_tags(ResourceArn=arn)["Tags"]}
    assert tags["remote-debug:ssm-activation"] == renewed
    assert ha.pending() == {}  # the job's own now: nothing will release it as a failed launch
