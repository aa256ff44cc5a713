"""The emulator's HTTP front: one URL for every AWS service the SageMaker path calls.

moto's server answers the generic services (S3, CloudWatch Logs, STS, IAM, most of SSM and SageMaker);
this front takes, before moto sees them, the calls moto does not model the way the SageMaker path
needs (see ``/work/shared/notes/aws-contracts.md``): moto's training jobs are ``Completed`` at birth
and never run, and it has no SSM sessions.  Those are served by :mod:`.training` and
:mod:`.ssm_channel`.  Every request we serve is validated against botocore's model of the
operation, and so is every answer, so the emulator cannot drift from what AWS accepts and returns.

JSON-protocol services name the operation in ``X-Amz-Target`` (``SageMaker.CreateTrainingJob``,
``AmazonSSM.StartSession``); the region and the caller's access key come from the SigV4
``Authorization`` header.  Signatures are not checked: the emulator is a local test bench, reachable on
loopback only.  IAM is, when asked (``authorize``: the ``--policy`` mode, see :mod:`.enforce`).
"""

from __future__ import annotations

import io
import json
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import botocore.session
from botocore.model import OperationModel, ServiceModel
from botocore.validate import ParamValidator

from remote_debug.emulator.constraints import constraint_errors, validation_message
from remote_debug.emulator.errors import ApiError

Handler = Callable[["Call"], dict[str, Any]]
StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]
# (service, operation, params, region, access key) -> None, or ApiError (AccessDeniedException): see enforce.py
Authorize = Callable[[str, str, dict[str, Any], str, str], None]

_CREDENTIAL = re.compile(r"Credential=([^/,\s]+)/\d{8}/([a-z0-9-]+)/([a-z0-9-]+)/aws4_request")
MAX_BODY = 16 * 1024 * 1024  # CreateTrainingJob is at most a few hundred KiB; anything far larger is an error


class Forward(Exception):
    """Raised by a handler to leave the request to moto after all (e.g. tags of a non-training-job ARN)."""


@dataclass(frozen=True)
class Call:
    """One validated request to an operation the front serves."""

    service: str  # botocore's service name: "sagemaker", "ssm"
    operation: str  # "CreateTrainingJob"
    params: dict[str, Any]
    region: str
    access_key: str


class _Models:
    """botocore's service models, loaded once (loading one takes ~50 ms)."""

    def __init__(self) -> None:
        self._session = botocore.session.get_session()
        self._services: dict[str, ServiceModel] = {}
        self._lock = threading.Lock()

    def operation(self, service: str, operation: str) -> OperationModel:
        with self._lock:
            if service not in self._services:
                self._services[service] = self._session.get_service_model(service)
        return self._services[service].operation_model(operation)


def _validate(shape: Any, params: dict[str, Any], what: str, *, server_side: bool = True) -> None:
    """``params`` against ``shape``; ``server_side``: also AWS's own checks of a request (answers are held to the
    model's shapes only: the constraints are what a service accepts, not what it returns)."""
    if shape is None:
        if params:
            raise ApiError("ValidationException", f"{what} takes no parameters")
        return
    report = ParamValidator().validate(params, shape)
    if report.has_errors():
        raise ApiError("ValidationException", " ".join(report.generate_report().split()))
    if server_side:
        _check_constraints(shape, params)


def _check_constraints(shape: Any, params: dict[str, Any]) -> None:
    """AWS's server-side checks (patterns, lengths) that botocore's validator leaves out."""
    errors = constraint_errors(shape, params)
    if errors:
        raise ApiError("ValidationException", validation_message(errors))


class Front:
    """A WSGI app: the operations registered here, validated both ways; everything else to ``fallback``.

    ``targets`` maps the ``X-Amz-Target`` prefix of a JSON service to botocore's service name;
    ``checked`` does the same for services left to ``fallback`` whose requests are held to the
    server-side constraints first (see the module doc).
    """

    def __init__(self, fallback: WsgiApp, targets: dict[str, str], checked: dict[str, str] | None = None,
                 authorize: Authorize | None = None) -> None:
        self.fallback = fallback
        self.authorize = authorize  # the opt-in IAM mode: every checked request, served or forwarded
        self.targets = targets
        self.checked = {**targets, **(checked or {})}
        self.handlers: dict[tuple[str, str], Handler] = {}
        self.models = _Models()

    def route(self, service: str, operation: str, handler: Handler) -> None:
        self.models.operation(service, operation)  # an unknown name fails now, not on the first call
        self.handlers[(service, operation)] = handler

    def _ours(self, environ: dict[str, Any]) -> tuple[str, str] | None:
        prefix, _, operation = str(environ.get("HTTP_X_AMZ_TARGET", "")).partition(".")
        service = self.targets.get(prefix)
        if service is None or (service, operation) not in self.handlers:
            return None
        return service, operation

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        ours = self._ours(environ)
        try:
            if ours is None:
                self._check_forwarded(environ)
                return self.fallback(environ, start_response)
            service, operation = ours
            body = _read_body(environ)
            status, answer = 200, self._serve(service, operation, body, environ)
        except Forward:
            return self.fallback(environ, start_response)
        except ApiError as exc:
            status, answer = exc.status, {"__type": exc.code, "message": exc.message}
        except Exception as exc:  # a bug of ours: say so as AWS says it, keep serving
            status, answer = 500, {"__type": "InternalFailure", "message": f"{type(exc).__name__}: {exc}"}
        payload = json.dumps(answer).encode()
        start_response(
            f"{status} {'OK' if status == 200 else 'Error'}",
            [("Content-Type", "application/x-amz-json-1.1"), ("Content-Length", str(len(payload)))],
        )
        return [payload]

    def _check_forwarded(self, environ: dict[str, Any]) -> None:
        """Hold a JSON-protocol request that moto will serve to AWS's server-side constraints."""
        prefix, _, operation = str(environ.get("HTTP_X_AMZ_TARGET", "")).partition(".")
        service = self.checked.get(prefix)
        if service is None:
            return
        try:
            shape = self.models.operation(service, operation).input_shape
        except Exception:  # an operation botocore does not know: moto answers it as it does
            return
        try:
            params = json.loads(_read_body(environ) or b"{}")
        except ValueError:
            return  # moto's own SerializationException
        if isinstance(params, dict):
            _check_constraints(shape, params)
            if self.authorize is not None:
                access_key, region = _signer(environ)
                self.authorize(service, operation, params, region, access_key)

    def _serve(self, service: str, operation: str, body: bytes, environ: dict[str, Any]) -> dict[str, Any]:
        model = self.models.operation(service, operation)
        try:
            params = json.loads(body or b"{}")
        except ValueError:
            raise ApiError("SerializationException", "the request body is not JSON") from None
        if not isinstance(params, dict):
            raise ApiError("SerializationException", "the request body is not a JSON object")
        _validate(model.input_shape, params, operation)
        access_key, region = _signer(environ)
        if self.authorize is not None:
            self.authorize(service, operation, params, region, access_key)
        answer = self.handlers[(service, operation)](Call(service, operation, params, region, access_key))
        try:
            _validate(model.output_shape, answer, f"{operation} response", server_side=False)
        except ApiError as exc:  # our bug, not the caller's: a 500, as AWS reports its own failures
            raise ApiError("InternalFailure", f"the emulator's answer breaks the model: {exc.message}", 500) from None
        return answer


def _read_body(environ: dict[str, Any]) -> bytes:
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        raise ApiError("SerializationException", "bad Content-Length") from None
    if length > MAX_BODY:
        raise ApiError("ValidationException", f"request body over {MAX_BODY} bytes", 413)
    stream = environ["wsgi.input"]
    body: bytes = stream.read(length) if length else b""
    environ["wsgi.input"] = io.BytesIO(body)  # moto reads it again when a handler forwards the call
    return body


def _signer(environ: dict[str, Any]) -> tuple[str, str]:
    """(access key id, region) from the SigV4 Authorization header; defaults for unsigned calls."""
    match = _CREDENTIAL.search(str(environ.get("HTTP_AUTHORIZATION", "")))
    if match is None:
        return "anonymous", "us-east-1"
    return match.group(1), match.group(2)
