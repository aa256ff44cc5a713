"""Offline stand-ins for the AWS pieces moto lacks, each checked against the real contract.

- :class:`FakeSsm`: a local HTTP endpoint speaking the AmazonSSM JSON protocol for the one SSM call a node
  makes, DeregisterManagedInstance (moto has no managed instances).  Requests must be SigV4-signed and are
  validated against botocore's service model, answers against its output shapes; a test can make it
  answer an error.  Sessions are not here: StartSession, ResumeSession, TerminateSession and the data
  channel are the emulator's, driven by AWS's real session-manager-plugin (:mod:`tests.helpers.ssm_plugin`).
- :class:`ScriptedSageMaker`: DescribeTrainingJob answers that follow a status script
  (Starting -> Downloading -> Training -> Completed/Failed), served on a real botocore client
  (a ``before-call`` handler, as botocore's Stubber does) and validated against the output shape.
- :func:`moto_cloud`: moto's AWS with test credentials, none of the user's AWS settings.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import botocore.session
import pytest
from botocore.validate import validate_parameters

SSM_MODEL = botocore.session.get_session().get_service_model("ssm")
SSM_ANSWERS: dict[str, dict[str, Any]] = {"DeregisterManagedInstance": {}}  # operation -> its answer


class FakeSsm:
    """The SSM API of :data:`SSM_ANSWERS` on ``url``; :meth:`calls` are the validated requests, ``failures``
    the errors to answer instead."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.signers: list[str] = []  # the access key id each request was signed with
        self.failures: dict[str, tuple[int, str, str]] = {}  # operation -> (status, code, message)
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status, answer = fake.handle(
                    self.headers.get("X-Amz-Target", ""), body, self.headers.get("Authorization", "")
                )
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/x-amz-json-1.1")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeSsm:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(10)

    def calls(self, operation: str) -> list[dict[str, Any]]:
        with self._lock:
            return [body for op, body in self.requests if op == operation]

    def handle(self, target: str, body: bytes, authorization: str) -> tuple[int, dict[str, Any]]:
        operation = target.rpartition(".")[2]
        try:
            params = json.loads(body or b"{}")
            model = SSM_MODEL.operation_model(operation)
        except Exception as exc:
            return 400, {"__type": "SerializationException", "message": str(exc)}
        if not authorization.startswith("AWS4-HMAC-SHA256 Credential="):
            return 400, {"__type": "MissingAuthenticationTokenException", "message": "unsigned request"}
        validate_parameters(params, model.input_shape)  # raises ParamValidationError
        with self._lock:
            self.requests.append((operation, params))
            self.signers.append(authorization.split("Credential=", 1)[1].split("/", 1)[0])
        if operation in self.failures:
            status, code, message = self.failures[operation]
            return status, {"__type": code, "message": message}
        if operation not in SSM_ANSWERS:
            return 400, {"__type": "InvalidAction", "message": f"{operation} is not faked"}
        answer = SSM_ANSWERS[operation]
        validate_parameters(answer, model.output_shape)
        return 200, answer


# --- SageMaker DescribeTrainingJob by script ---------------------------------------------------------


def describe_response(
    job: str,
    status: str,
    secondary: str,
    *,
    environment: dict[str, str] | None = None,
    instance_count: int = 1,
    remote_debug: bool = True,
    failure: str | None = None,
    message: str = "",
    **extra: Any,
) -> dict[str, Any]:
    now = datetime.now(timezone.utc)
    resp: dict[str, Any] = {
        "TrainingJobName": job,
        "TrainingJobArn": f"arn:aws:sagemaker:us-west-2:123456789012:training-job/{job}",
        "ModelArtifacts": {"S3ModelArtifacts": f"s3://bucket/{job}/output/model.tar.gz"},
        "TrainingJobStatus": status,
        "SecondaryStatus": secondary,
        "AlgorithmSpecification": {
            "TrainingImage": "123.dkr.ecr.us-west-2.amazonaws.com/img:1",
            "TrainingInputMode": "File",
        },
        "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": instance_count, "VolumeSizeInGB": 30},
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
        "CreationTime": now,
        "RemoteDebugConfig": {"EnableRemoteDebug": remote_debug},
        "Environment": environment or {},
        "SecondaryStatusTransitions": [{"Status": secondary, "StartTime": now, "StatusMessage": message}],
    }
    if failure:
        resp["FailureReason"] = failure
    resp.update(extra)
    return resp


class ScriptedSageMaker:
    """Attach to a real botocore SageMaker client; answers come from ``script(call_number, job_name)``."""

    def __init__(
        self,
        client: Any,
        script: Callable[[int, str], dict[str, Any]],
        tags: list[dict[str, str]] | None = None,
        others: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        self.client = client
        self.script = script
        self.tags = tags or []
        self.others = others or {}  # operation name -> its (validated) answer
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self._n = itertools.count()
        # the request is recorded before botocore validates and serialises it, answered after
        client.meta.events.register("before-parameter-build.sagemaker.*", self._record)
        client.meta.events.register("before-call.sagemaker.*", self._answer)

    def _record(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        self.calls.append((model.name, dict(params)))

    def _answer(self, model: Any, **_: Any) -> Any:
        from botocore.awsrequest import AWSResponse

        if model.name == "DescribeTrainingJob":
            answer = self.script(next(self._n), str(self.calls[-1][1].get("TrainingJobName")))
        elif model.name == "ListTags":
            answer = {"Tags": self.tags}
        elif model.name in self.others:
            answer = self.others[model.name]
        else:
            return None  # not scripted: let it through (to moto, when active)
        if model.output_shape is not None:  # what Stubber checks for its responses
            validate_parameters(answer, model.output_shape)
        return AWSResponse("https://sagemaker.local", 200, {}, None), answer


AWS_VARS = ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE")


@contextlib.contextmanager
def moto_cloud(monkeypatch: pytest.MonkeyPatch, region: str) -> Iterator[None]:
    """moto's AWS with test credentials in ``region``; none of the user's AWS settings leak in."""
    from moto import mock_aws

    from remote_debug.laptop.aws import clients as aws

    for name in AWS_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", region)
    aws.configure()
    with mock_aws():
        yield
    aws.configure()
