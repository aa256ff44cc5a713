"""The emulator's HTTP front: our operations validated both ways against botocore's models, the rest to moto.

Driven with real boto3 clients (which parse our answers with the same models) and with raw requests an
SDK without client-side validation could send.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any
from unittest import mock

import boto3
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import ClientError
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import make_server

from remote_debug.container.node import awscall
from remote_debug.emulator.errors import ApiError
from remote_debug.emulator.server import Call, Forward, Front
from remote_debug.emulator.service import CHECKED_TARGETS, SERVED_TARGETS

REGION = "eu-west-3"
KEYS = {"AKIDEXAMPLE": "secret"}  # the only key the front under test accepts
ARN = f"arn:aws:sagemaker:{REGION}:123456789012:training-job/job-1"


class Recorder:
    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.answer: dict[str, Any] = {}

    def __call__(self, call: Call) -> dict[str, Any]:
        self.calls.append(call)
        return self.answer


@pytest.fixture
def front() -> Iterator[tuple[str, Front]]:
    app = Front(
        DomainDispatcherApplication(create_backend_app), SERVED_TARGETS, checked=CHECKED_TARGETS, secret_of=KEYS.get
    )
    server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=MotoRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", app
    finally:
        server.shutdown()
        thread.join()
        server.server_close()


def client(url: str, service: str, validate: bool = True) -> Any:
    return boto3.client(
        service,
        endpoint_url=url,
        region_name=REGION,
        aws_access_key_id="AKIDEXAMPLE",
        aws_secret_access_key="secret",
        config=Config(parameter_validation=validate, retries={"max_attempts": 1}),
    )


def test_a_served_operation_gets_the_validated_request_with_region_and_caller(front: tuple[str, Front]) -> None:
    url, app = front
    handler = Recorder()
    handler.answer = {"SessionId": "AKIDEXAMPLE-0123456789abcdef0"}
    app.route("ssm", "TerminateSession", handler)
    answer = client(url, "ssm").terminate_session(SessionId="AKIDEXAMPLE-0123456789abcdef0")
    assert answer["SessionId"] == "AKIDEXAMPLE-0123456789abcdef0"
    (call,) = handler.calls
    assert (call.operation, call.region, call.access_key) == ("TerminateSession", REGION, "AKIDEXAMPLE")
    assert call.params == {"SessionId": "AKIDEXAMPLE-0123456789abcdef0"}


def test_a_request_the_model_refuses_never_reaches_the_handler(front: tuple[str, Front]) -> None:
    url, app = front
    handler = Recorder()
    app.route("sagemaker", "StopTrainingJob", handler)
    sm = client(url, "sagemaker", validate=False)  # an SDK without client-side checks sends this
    with pytest.raises(ClientError) as caught:
        sm.stop_training_job(TrainingJobName=["not", "a", "string"])
    assert caught.value.response["Error"]["Code"] == "ValidationException"
    assert "TrainingJobName" in caught.value.response["Error"]["Message"]
    assert handler.calls == []


def test_an_answer_outside_the_model_is_a_500_not_a_silent_drift(front: tuple[str, Front]) -> None:
    url, app = front
    handler = Recorder()
    handler.answer = {"TrainingJobArn": ARN, "NotInTheModel": 1}
    app.route("sagemaker", "UpdateTrainingJob", handler)
    with pytest.raises(ClientError) as caught:
        client(url, "sagemaker").update_training_job(TrainingJobName="job-1")
    assert caught.value.response["Error"]["Code"] == "InternalFailure"
    assert "NotInTheModel" in caught.value.response["Error"]["Message"]


def test_an_api_error_reaches_boto3_as_the_same_code(front: tuple[str, Front]) -> None:
    url, app = front

    def refuse(call: Call) -> dict[str, Any]:
        raise ApiError("TargetNotConnected", f"{call.params['Target']} is not connected.")

    app.route("ssm", "StartSession", refuse)
    with pytest.raises(ClientError) as caught:
        client(url, "ssm").start_session(Target="sagemaker-training-job:job-1_algo-1")
    assert caught.value.response["Error"]["Code"] == "TargetNotConnected"
    assert caught.value.response["Error"]["Message"] == "sagemaker-training-job:job-1_algo-1 is not connected."


def test_everything_else_is_moto(front: tuple[str, Front]) -> None:
    url, _app = front
    s3 = client(url, "s3")
    s3.create_bucket(Bucket="bucket-1", CreateBucketConfiguration={"LocationConstraint": REGION})
    s3.put_object(Bucket="bucket-1", Key="k", Body=b"payload")
    assert s3.get_object(Bucket="bucket-1", Key="k")["Body"].read() == b"payload"
    logs = client(url, "logs")
    logs.create_log_group(logGroupName="/aws/sagemaker/TrainingJobs")
    assert [g["logGroupName"] for g in logs.describe_log_groups()["logGroups"]] == ["/aws/sagemaker/TrainingJobs"]


def test_a_handler_can_leave_a_call_to_moto(front: tuple[str, Front]) -> None:
    url, app = front

    def training_jobs_only(call: Call) -> dict[str, Any]:
        if ":training-job/" not in call.params["ResourceArn"]:
            raise Forward
        return {"Tags": [{"Key": "ours", "Value": "1"}]}

    app.route("sagemaker", "ListTags", training_jobs_only)
    sm = client(url, "sagemaker")
    assert sm.list_tags(ResourceArn=ARN)["Tags"] == [{"Key": "ours", "Value": "1"}]
    other = f"arn:aws:sagemaker:{REGION}:123456789012:model/m"
    # moto answers (its own way) for a resource we do not own: the body reached it intact
    try:
        answer = sm.list_tags(ResourceArn=other)
        assert answer["Tags"] == []
    except ClientError as exc:
        assert exc.response["Error"]["Code"] != "InternalFailure"


def test_non_json_and_oversized_bodies_are_refused_in_one_line(front: tuple[str, Front]) -> None:
    url, app = front
    app.route("sagemaker", "StopTrainingJob", Recorder())
    headers = {"X-Amz-Target": "SageMaker.StopTrainingJob", "Content-Type": "application/x-amz-json-1.1"}
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(signed(url, b"{not json", headers), timeout=10)
    assert json.loads(caught.value.read())["__type"] == "SerializationException"
    with pytest.raises(urllib.error.HTTPError) as big:
        urllib.request.urlopen(
            urllib.request.Request(url, data=b"x", headers={**headers, "Content-Length": str(10**9)}), timeout=10
        )
    assert big.value.code == 413


def signed(
    url: str,
    body: bytes,
    headers: dict[str, str],
    key: str = "AKIDEXAMPLE",
    secret: str = "secret",
    when: datetime | None = None,
    service: str = "sagemaker",
) -> urllib.request.Request:
    """A raw request signed as botocore signs one (at ``when``, default now)."""
    request = AWSRequest(method="POST", url=url, data=body, headers=headers)
    auth = SigV4Auth(Credentials(key, secret), service, REGION)
    if when is None:
        auth.add_auth(request)
    else:
        with mock.patch("botocore.auth.datetime.datetime") as clock:
            clock.now.return_value = when.replace(tzinfo=None)
            clock.utcnow.return_value = when.replace(tzinfo=None)
            auth.add_auth(request)
    return urllib.request.Request(url, data=body, headers=dict(request.headers.items()))


def _refusal(request: urllib.request.Request) -> tuple[int, dict[str, Any]]:
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=10)
    return caught.value.code, json.loads(caught.value.read())


def test_every_request_needs_a_signature_with_a_known_key_and_a_current_date(front: tuple[str, Front]) -> None:
    url, app = front
    handler = Recorder()
    app.route("sagemaker", "StopTrainingJob", handler)
    headers = {"X-Amz-Target": "SageMaker.StopTrainingJob", "Content-Type": "application/x-amz-json-1.1"}
    body = json.dumps({"TrainingJobName": "job-1"}).encode()
    assert _refusal(urllib.request.Request(url, data=body, headers=headers)) == (
        403,
        {"__type": "MissingAuthenticationTokenException", "message": "Missing Authentication Token"},
    )
    code, answer = _refusal(signed(url, body, headers, secret="not-the-secret"))
    assert (code, answer["__type"]) == (403, "InvalidSignatureException") and "does not match" in answer["message"]
    code, answer = _refusal(signed(url, body, headers, key="AKIDSOMEONEELSE"))
    assert (code, answer["__type"]) == (403, "UnrecognizedClientException")
    stale = datetime.now(timezone.utc) - timedelta(minutes=6)
    code, answer = _refusal(signed(url, body, headers, when=stale))
    assert (code, answer["__type"]) == (403, "InvalidSignatureException") and "Signature expired" in answer["message"]
    tampered = signed(url, body, headers)
    tampered.data = json.dumps({"TrainingJobName": "job-2"}).encode()  # same length, other job
    assert _refusal(tampered)[1]["__type"] == "InvalidSignatureException"
    assert handler.calls == []  # none of them reached the handler
    urllib.request.urlopen(
        signed(url, body, headers, when=datetime.now(timezone.utc) - timedelta(minutes=4)), timeout=10
    ).read()  # within AWS's five minutes of skew
    assert [c.params for c in handler.calls] == [{"TrainingJobName": "job-1"}]


def test_the_containers_own_signer_is_accepted(front: tuple[str, Front]) -> None:
    """The in-job hook signs its SSM calls itself where the image has no boto3 (container/node/awscall.py)."""
    url, app = front
    handler = Recorder()
    handler.answer = {"SessionId": "s-1"}
    app.route("ssm", "TerminateSession", handler)
    body = json.dumps({"SessionId": "s-1"}).encode()
    headers = awscall.sign(
        method="POST",
        url=url + "/",
        body=body,
        region=REGION,
        service="ssm",
        credentials=awscall.Credentials("AKIDEXAMPLE", "secret", None),
        headers={"Content-Type": "application/x-amz-json-1.1", "X-Amz-Target": "AmazonSSM.TerminateSession"},
        amz_date=datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ"),
    )
    headers.pop("Host")
    with urllib.request.urlopen(urllib.request.Request(url + "/", data=body, headers=headers), timeout=10) as answer:
        assert json.loads(answer.read()) == {"SessionId": "s-1"}
    assert [c.access_key for c in handler.calls] == ["AKIDEXAMPLE"]


def test_forwarded_services_are_checked_too_and_refused_in_their_own_shape(front: tuple[str, Front]) -> None:
    url, _ = front
    s3 = client(url, "s3")
    s3.create_bucket(Bucket="signed-bucket", CreateBucketConfiguration={"LocationConstraint": REGION})
    key = "a dir/odd+name~(1)=&.txt"  # the path and query as S3 signs them
    s3.put_object(Bucket="signed-bucket", Key=key, Body=b"payload")
    assert s3.list_objects_v2(Bucket="signed-bucket", Prefix="a dir/")["Contents"][0]["Key"] == key
    assert s3.get_object(Bucket="signed-bucket", Key=key)["Body"].read() == b"payload"
    for service, operation, code in (
        ("s3", "list_buckets", "SignatureDoesNotMatch"),
        ("sts", "get_caller_identity", "SignatureDoesNotMatch"),
        ("logs", "describe_log_groups", "InvalidSignatureException"),
    ):
        wrong = boto3.client(
            service,
            endpoint_url=url,
            region_name=REGION,
            aws_access_key_id="AKIDEXAMPLE",
            aws_secret_access_key="guess",
            config=Config(retries={"max_attempts": 1}),
        )
        with pytest.raises(ClientError) as info:
            getattr(wrong, operation)()
        assert (info.value.response["Error"]["Code"], info.value.response["ResponseMetadata"]["HTTPStatusCode"]) == (
            code,
            403,
        ), service


def test_routing_an_operation_the_model_lacks_fails_at_once(front: tuple[str, Front]) -> None:
    _, app = front
    with pytest.raises(Exception, match=r"NoSuchOperation|OperationNotFound"):
        app.route("sagemaker", "NoSuchOperation", Recorder())


# --- what AWS checks on its servers, botocore does not ----------------------------------------------

OLD_HOOK_PROGRAM = (  # what enable() put in ContainerEntrypoint before: a program with line breaks
    "import os,sys\nsys.path.append('/opt/ml/input/data/remote-debug')\n"
    "try:from remote_debug.container.node.hook import main\nexcept Exception:os.execvp(sys.argv[1],sys.argv[1:])\n"
    "sys.exit(main())"
)


def _create_with_entry(sm: Any, entry: list[str]) -> None:
    sm.create_training_job(
        TrainingJobName="job-1",
        RoleArn="arn:aws:iam::123456789012:role/R",
        AlgorithmSpecification={"TrainingImage": "img:1", "TrainingInputMode": "File", "ContainerEntrypoint": entry},
        OutputDataConfig={"S3OutputPath": "s3://b/o"},
        ResourceConfig={"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 1},
        StoppingCondition={"MaxRuntimeInSeconds": 60},
    )


def test_a_line_break_in_an_entry_item_is_refused_as_sagemaker_refuses_it(front: tuple[str, Front]) -> None:
    """The model's pattern for a ContainerEntrypoint item is ``.*``: SageMaker matches it against the whole value
    with "." matching no line terminator, so a multi-line program is a ValidationException, never a job."""
    url, app = front
    handler = Recorder()
    app.route("sagemaker", "CreateTrainingJob", handler)
    sm = client(url, "sagemaker", validate=False)  # botocore itself never checks patterns; be sure it is the server
    with pytest.raises(ClientError) as caught:
        _create_with_entry(sm, ["/bin/sh", "-c", "x", OLD_HOOK_PROGRAM, "python", "train.py"])
    error = caught.value.response["Error"]
    assert error["Code"] == "ValidationException"
    assert error["Message"].startswith("1 validation error detected: Value '[/bin/sh, -c, x, import os,sys\n")
    assert error["Message"].endswith(
        "' at 'algorithmSpecification.containerEntrypoint' failed to satisfy constraint: "
        "Member must satisfy constraint: [Member must satisfy regular expression pattern: .*]"
    )
    for terminator in ("\r", "\u2028", "\u0085"):  # Java's other line terminators, which Python's "." matches
        with pytest.raises(ClientError):
            _create_with_entry(sm, ["python", f"a{terminator}b"])
    assert handler.calls == []
    handler.answer = {"TrainingJobArn": ARN}
    _create_with_entry(sm, ["python", "-c", "import os;print('one line')"])
    assert len(handler.calls) == 1


def test_lengths_tags_and_every_error_are_reported_together(front: tuple[str, Front]) -> None:
    url, app = front
    handler = Recorder()
    app.route("sagemaker", "AddTags", handler)
    sm = client(url, "sagemaker", validate=False)
    with pytest.raises(ClientError) as caught:
        sm.add_tags(
            ResourceArn=ARN,
            Tags=[
                {"Key": "ok", "Value": "ünïcode letters are fine"},
                {"Key": "k", "Value": "new\nline"},
                {"Key": "x" * 129, "Value": "v"},
            ],
        )
    message = caught.value.response["Error"]["Message"]
    assert message.startswith("2 validation errors detected: ")
    assert (
        "Value 'new\nline' at 'tags.2.member.value' failed to satisfy constraint: Member must satisfy "
        "regular expression pattern: ([\\p{L}\\p{Z}\\p{N}_.:/=+\\-@]*)" in message
    )
    assert (
        f"Value '{'x' * 129}' at 'tags.3.member.key' failed to satisfy constraint: Member must have length "
        "less than or equal to 128" in message
    )
    assert handler.calls == []


def test_operations_left_to_moto_are_checked_too(front: tuple[str, Front]) -> None:
    """CloudWatch Logs is moto's, but a name AWS refuses must not become a log group here."""
    url, _app = front
    logs = client(url, "logs", validate=False)
    with pytest.raises(ClientError) as caught:
        logs.create_log_group(logGroupName="/aws/sagemaker/Training Jobs")
    assert caught.value.response["Error"]["Code"] == "ValidationException"
    assert (
        "at 'logGroupName' failed to satisfy constraint: Member must satisfy regular expression pattern"
        in caught.value.response["Error"]["Message"]
    )
    assert " " not in "".join(g["logGroupName"] for g in logs.describe_log_groups()["logGroups"])
