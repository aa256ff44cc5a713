"""The emulator's HTTP front: one URL for every AWS service the SageMaker path calls.

moto's server answers the generic services (S3, CloudWatch Logs, STS, IAM, most of SSM and SageMaker);
this front takes, before moto sees them, the calls moto does not model the way the SageMaker path
needs (see ``/work/shared/notes/aws-contracts.md``): moto's training jobs are ``Completed`` at birth
and never run, and it has no SSM sessions.  Those are served by :mod:`.training` and
:mod:`.ssm_channel`.  Every request we serve is validated against botocore's model of the
operation, and so is every answer, so the emulator cannot drift from what AWS accepts and returns.

JSON-protocol services name the operation in ``X-Amz-Target`` (``SageMaker.CreateTrainingJob``,
``AmazonSSM.StartSession``); the region and the caller's access key come from the SigV4
``Authorization`` header, whose SigV4 signature is checked on every request, served or forwarded, before
anything else (:mod:`.sigv4`; ``secret_of`` knows the keys); a refusal is worded as the protocol of the
request words it (JSON, S3's XML, the query services' XML).  IAM is checked when asked (``authorize``: the
``--policy`` mode, see :mod:`.enforce`).
"""

from __future__ import annotations

import io
import json
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from html import escape
from typing import Any

import botocore.session
from botocore.model import OperationModel, ServiceModel
from botocore.validate import ParamValidator

from remote_debug.emulator.constraints import constraint_errors, validation_message
from remote_debug.emulator.errors import ApiError
from remote_debug.emulator.sigv4 import AuthError, SecretOf, needs_body, scope_service, verify

Handler = Callable[["Call"], dict[str, Any]]
StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]
# (service, operation, params, region, access key) -> None, or ApiError (AccessDeniedException): see enforce.py
Authorize = Callable[[str, str, dict[str, Any], str, str], None]

_CREDENTIAL = re.compile(r"Credential=([^/,\s]+)/\d{8}/([a-z0-9-]+)/([a-z0-9-]+)/aws4_request")
MAX_BODY = 16 * 1024 * 1024  # CreateTrainingJob is at most a few hundred KiB; anything far larger is an error
# how each protocol names a refused signature: (JSON services, S3, query services such as STS and IAM)
_AUTH_CODES = {
    "missing": ("MissingAuthenticationTokenException", "AccessDenied", "MissingAuthenticationToken"),
    "malformed": ("IncompleteSignatureException", "AuthorizationHeaderMalformed", "IncompleteSignature"),
    "unknown_key": ("UnrecognizedClientException", "InvalidAccessKeyId", "InvalidClientTokenId"),
    "mismatch": ("InvalidSignatureException", "SignatureDoesNotMatch", "SignatureDoesNotMatch"),
    "expired": ("InvalidSignatureException", "RequestTimeTooSkewed", "SignatureDoesNotMatch"),
}


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

    def __init__(
        self,
        fallback: WsgiApp,
        targets: dict[str, str],
        checked: dict[str, str] | None = None,
        authorize: Authorize | None = None,
        *,
        secret_of: SecretOf,
    ) -> None:
        self.fallback = fallback
        self.secret_of = secret_of  # access key id -> secret: every request is signed with one of these keys
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
        try:  # first of all: an unsigned or wrongly signed request reaches neither a handler nor moto
            verify(environ, _read_body(environ) if needs_body(environ) else None, self.secret_of)
        except AuthError as exc:
            return _refuse(environ, exc, start_response)
        except ApiError as exc:  # an unreadable or oversized body
            return _refuse(environ, AuthError("malformed", exc.message), start_response, exc.status)
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


def _refuse(
    environ: dict[str, Any], exc: AuthError, start_response: StartResponse, status: int = 403
) -> Iterable[bytes]:
    """A refused signature as the service would answer it: JSON for X-Amz-Target services, else S3's or the
    query protocol's XML error."""
    json_code, s3_code, query_code = _AUTH_CODES[exc.kind]
    message = escape(exc.message)
    if environ.get("HTTP_X_AMZ_TARGET"):
        payload = json.dumps({"__type": json_code, "message": exc.message}).encode()
        kind = "application/x-amz-json-1.1"
    elif scope_service(environ) == "s3" or not str(environ.get("CONTENT_TYPE", "")).startswith(
        "application/x-www-form-urlencoded"
    ):
        if exc.kind == "unknown_key":  # S3's own words for it
            message = "The AWS Access Key Id you provided does not exist in our records."
        payload = (
            f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{s3_code}</Code><Message>{message}'
            "</Message><RequestId>0</RequestId></Error>"
        ).encode()
        kind = "application/xml"
    else:
        payload = (
            f"<ErrorResponse><Error><Type>Sender</Type><Code>{query_code}</Code><Message>{message}</Message>"
            "</Error><RequestId>0</RequestId></ErrorResponse>"
        ).encode()
        kind = "text/xml"
    start_response(
        f"{status} Forbidden" if status == 403 else f"{status} Error",
        [("Content-Type", kind), ("Content-Length", str(len(payload)))],
    )
    return [payload]


def _signer(environ: dict[str, Any]) -> tuple[str, str]:
    """(access key id, region) from the SigV4 Authorization header (verified by then)."""
    match = _CREDENTIAL.search(str(environ.get("HTTP_AUTHORIZATION", "")))
    if match is None:
        return "anonymous", "us-east-1"
    return match.group(1), match.group(2)
