"""Offline stand-ins for the AWS pieces moto lacks, each checked against the real contract.

- :class:`FakeSsm`: a local HTTP endpoint speaking the AmazonSSM JSON protocol for StartSession,
  TerminateSession and DeregisterManagedInstance.  Requests are validated against botocore's
  service model and responses against its output shapes; boto3 in any process reaches it through
  ``AWS_ENDPOINT_URL_SSM`` (which is how a ProxyCommand subprocess finds it).
- :func:`install_fake_plugin`: an executable ``session-manager-plugin`` that checks the AWS CLI's
  invocation contract (argv shape, the response in the environment variable named by argv[1], no
  token in argv), records it, and relays stdio to ``127.0.0.1:<portNumber>`` - what the SSM agent
  in the node does with an AWS-StartSSHSession session.  It is OUR reading of the contract: new tests
  use AWS's real plugin against the emulator instead (:mod:`tests.ssm_plugin`, as tests/local/test_ssm.py
  and test_doctor.py do); it stays only for tests/local/backends/test_sagemaker.py and
  tests/security/test_transport_secrets.py until they move over.
- :class:`ScriptedSageMaker`: DescribeTrainingJob answers that follow a status script
  (Starting -> Downloading -> Training -> Completed/Failed), served on a real botocore client
  (a ``before-call`` handler, as botocore's Stubber does) and validated against the output shape.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import botocore.session
import pytest
from botocore.validate import validate_parameters

SSM_MODEL = botocore.session.get_session().get_service_model("ssm")
SAGEMAKER_MODEL = botocore.session.get_session().get_service_model("sagemaker")
TOKEN_PREFIX = "SECRET-TOKEN-"


class FakeSsm:
    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.failures: dict[str, tuple[int, str, str]] = {}  # operation -> (status, code, message)
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status, answer = fake.handle(self.headers.get("X-Amz-Target", ""), body,
                                             self.headers.get("Authorization", ""))
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
        report = validate_parameters(params, model.input_shape)  # raises ParamValidationError
        del report
        with self._lock:
            self.requests.append((operation, params))
        if operation in self.failures:
            status, code, message = self.failures[operation]
            return status, {"__type": code, "message": message}
        if operation == "StartSession":
            n = next(self._ids)
            answer: dict[str, Any] = {
                "SessionId": f"rd-test-{n:04d}",
                "TokenValue": f"{TOKEN_PREFIX}{n:04d}",
                "StreamUrl": f"wss://ssmmessages.us-west-2.amazonaws.com/v1/data-channel/rd-test-{n:04d}"
                "?role=publish_subscribe",
            }
        elif operation == "TerminateSession":
            answer = {"SessionId": params["SessionId"]}
        elif operation == "DeregisterManagedInstance":
            answer = {}
        else:
            return 400, {"__type": "InvalidAction", "message": f"{operation} is not faked"}
        validate_parameters(answer, model.output_shape)
        return 200, answer


PLUGIN_SOURCE = r'''
import json, os, socket, sys, threading, time, uuid
LOG = os.environ.get("FAKE_PLUGIN_LOG", "")
VERSION = os.environ.get("FAKE_PLUGIN_VERSION", "1.2.707.0")

def fail(message):
    sys.stderr.write("fake session-manager-plugin: " + message + "\n")
    sys.exit(3)

argv = sys.argv
if argv[1:] == ["--version"]:
    print(VERSION)
    sys.exit(0)
if len(argv) != 7:
    fail("expected 6 arguments, got %d" % (len(argv) - 1))
name, region, operation, profile, request, endpoint = argv[1:]
if name != "AWS_SSM_START_SESSION_RESPONSE":
    fail("argv[1] must name the environment variable holding the response, got %r" % name[:40])
response = json.loads(os.environ[name])
if sorted(response) != ["SessionId", "StreamUrl", "TokenValue"]:
    fail("response keys %r" % sorted(response))
if any(response["TokenValue"] in a for a in argv):
    fail("the session token is on the command line")
if operation != "StartSession" or not region or not endpoint.startswith(("http://", "https://")):
    fail("bad operation/region/endpoint %r %r %r" % (operation, region, endpoint))
params = json.loads(request)
port = int(params["Parameters"]["portNumber"][0])
if params["DocumentName"] != "AWS-StartSSHSession" or not params["Target"]:
    fail("bad request %r" % params)
record = {"argv": argv[1:], "session_id": response["SessionId"], "request": params, "pid": os.getpid(),
          "started": time.time()}
with open(os.path.join(LOG, "plugin-%s.json" % uuid.uuid4().hex), "w") as fh:
    json.dump(record, fh)
# What the SSM agent in the node does for AWS-StartSSHSession: connect to localhost:<portNumber>.
sock = socket.create_connection(("127.0.0.1", port))
def upstream():
    fd = sys.stdin.fileno()
    while True:
        data = os.read(fd, 65536)
        if not data:
            break
        sock.sendall(data)
    try:
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass
threading.Thread(target=upstream, daemon=True).start()
out = sys.stdout.fileno()
while True:
    data = sock.recv(65536)
    if not data:
        break
    while data:
        data = data[os.write(out, data):]
'''


def install_fake_plugin(bin_dir: Path, log_dir: Path) -> Path:
    """Write the stand-in ``session-manager-plugin`` into ``bin_dir`` (put it first on PATH)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    log_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / "session-manager-plugin"
    path.write_text(f"#!{sys.executable}\n{PLUGIN_SOURCE}")
    path.chmod(0o755)
    return path


def plugin_records(log_dir: Path) -> list[dict[str, Any]]:
    records = [json.loads(p.read_text()) for p in log_dir.glob("plugin-*.json")]
    return sorted(records, key=lambda r: r["started"])


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
        "AlgorithmSpecification": {"TrainingImage": "123.dkr.ecr.us-west-2.amazonaws.com/img:1",
                                   "TrainingInputMode": "File"},
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
        self, client: Any, script: Callable[[int, str], dict[str, Any]], tags: list[dict[str, str]] | None = None,
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

    from remote_debug.local import aws

    for name in AWS_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", region)
    aws.configure()
    with mock_aws():
        yield
    aws.configure()


@contextlib.contextmanager
def echo_server() -> Iterator[int]:
    """A TCP echo server on 127.0.0.1 (what a node's sshd is to a relay, for these tests); its port."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                while data := conn.recv(65536):
                    conn.sendall(data)

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield server.getsockname()[1]
    finally:
        server.close()
