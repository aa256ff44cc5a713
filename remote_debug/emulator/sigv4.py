"""SigV4 on every request the emulator serves, checked as AWS checks it.

The emulator runs as root and its API starts processes (CreateTrainingJob's ``ContainerEntrypoint``), returns
job secrets (DescribeTrainingJob's ``Environment``) and opens shells in nodes (StartSession): a loopback port
keeps other machines out, not other users of this one.  So the emulator makes an access key at start
(:meth:`Keys.generate`), prints it for its user, and serves only requests signed with it (or with an access key
made inside the emulator: moto's IAM users and STS sessions, the ``--policy`` mode's callers).

The signature is recomputed with botocore's own SigV4 code over what arrived: the method, the path as sent,
the query, exactly the headers the client says it signed, and the body's SHA-256 (or the signed
``X-Amz-Content-SHA256``, which S3 clients send instead: an S3 body is streamed to moto, not held here to be
hashed; changing it in flight would take a man in the middle of a loopback connection); compared in
constant time.  A request more than five minutes from our clock is refused, as AWS refuses it.
"""

from __future__ import annotations

import hmac
import secrets
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.compat import HTTPHeaders
from botocore.credentials import Credentials

ALGORITHM = "AWS4-HMAC-SHA256"
MAX_SKEW = timedelta(minutes=5)  # AWS's own limit between the request's X-Amz-Date and its clock
AMZ_DATE = "%Y%m%dT%H%M%SZ"
_KEY_ALPHABET = string.ascii_uppercase + "234567"  # what AWS access key ids are made of

SecretOf = Callable[[str], "str | None"]  # access key id -> its secret, None when unknown


@dataclass(frozen=True)
class Keys:
    """An access key pair."""

    access_key_id: str
    secret_access_key: str

    @classmethod
    def generate(cls) -> Keys:
        """A fresh pair, shaped like AWS's (AKIA + 16, 40 characters of secret)."""
        key_id = "AKIA" + "".join(secrets.choice(_KEY_ALPHABET) for _ in range(16))
        return cls(key_id, secrets.token_urlsafe(30))

    def env(self) -> dict[str, str]:
        return {"AWS_ACCESS_KEY_ID": self.access_key_id, "AWS_SECRET_ACCESS_KEY": self.secret_access_key}


class AuthError(Exception):
    """A refused signature.  ``kind`` is one of :data:`KINDS`; each protocol words it its own way (server.py)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


KINDS = ("missing", "malformed", "unknown_key", "mismatch", "expired")


@dataclass(frozen=True)
class Signer:
    """Who signed a verified request, and for which region and service."""

    access_key: str
    region: str
    service: str


def scope_service(environ: Mapping[str, Any]) -> str:
    """The service named by the Authorization header's credential scope ("" if none): a hint for error shapes."""
    try:
        return _parse(str(environ.get("HTTP_AUTHORIZATION", "")))[0].split("/")[3]
    except (AuthError, IndexError):
        return ""


def _parse(header: str) -> tuple[str, list[str], str]:
    """(credential, signed header names, signature) of an Authorization header."""
    algorithm, _, rest = header.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise AuthError("malformed", f"Authorization header requires the {ALGORITHM} algorithm")
    fields: dict[str, str] = {}
    for part in rest.split(","):
        name, eq, value = part.strip().partition("=")
        if eq:
            fields[name] = value.strip()
    missing = [name for name in ("Credential", "SignedHeaders", "Signature") if not fields.get(name)]
    if missing:
        raise AuthError("malformed", f"Authorization header requires '{missing[0]}' parameter")
    return fields["Credential"], fields["SignedHeaders"].split(";"), fields["Signature"]


class _Recompute(SigV4Auth):  # type: ignore[misc]
    """botocore's SigV4 over exactly the headers the client signed, and the query as AWS canonicalises it."""

    def __init__(self, credentials: Credentials, service: str, region: str, signed: list[str]) -> None:
        super().__init__(credentials, service, region)
        self._signed = signed

    def headers_to_sign(self, request: AWSRequest) -> HTTPHeaders:
        headers = HTTPHeaders()
        for name in self._signed:
            headers[name] = request.headers.get(name, "")
        return headers

    def canonical_query_string(self, request: AWSRequest) -> str:
        query = urlsplit(request.url).query
        pairs = []
        for pair in query.split("&") if query else []:
            key, _, value = pair.partition("=")
            pairs.append((quote(unquote(key), safe="-_.~"), quote(unquote(value), safe="-_.~")))
        return "&".join(f"{key}={value}" for key, value in sorted(pairs))

    def _normalize_url_path(self, path: str) -> str:
        # S3 signs its path as sent; every other service the path encoded once more (botocore's S3SigV4Auth)
        return path if self._service_name == "s3" else str(super()._normalize_url_path(path))


def _header(environ: Mapping[str, Any], name: str) -> str:
    if name in ("content-type", "content-length"):
        return str(environ.get(name.upper().replace("-", "_"), ""))
    return str(environ.get("HTTP_" + name.upper().replace("-", "_"), ""))


def needs_body(environ: Mapping[str, Any]) -> bool:
    """Whether checking this request hashes its body (False: S3's signed X-Amz-Content-SHA256 stands for it)."""
    return not _header(environ, "x-amz-content-sha256")


def verify(environ: Mapping[str, Any], body: bytes | None, secret_of: SecretOf, now: datetime | None = None) -> Signer:
    """The signer of a WSGI request, or :class:`AuthError`.  ``body``: the request's body, None when
    :func:`needs_body` said it is not needed."""
    header = str(environ.get("HTTP_AUTHORIZATION", ""))
    if not header:
        raise AuthError("missing", "Missing Authentication Token")
    credential, signed, signature = _parse(header)
    parts = credential.split("/")
    if len(parts) != 5 or parts[4] != "aws4_request":
        raise AuthError("malformed", f"Credential should be scoped to a valid region: {credential}")
    access_key, day, region, service, _ = parts
    if "host" not in signed or "x-amz-date" not in signed:
        raise AuthError("malformed", "Signed headers must include host and x-amz-date")
    amz_date = _header(environ, "x-amz-date")
    try:
        when = datetime.strptime(amz_date, AMZ_DATE).replace(tzinfo=timezone.utc)
    except ValueError:
        raise AuthError("malformed", f"X-Amz-Date {amz_date!r} is not in the form {AMZ_DATE}") from None
    if amz_date[:8] != day:
        raise AuthError("malformed", f"Credential scope date {day} does not match X-Amz-Date {amz_date}")
    clock = now or datetime.now(timezone.utc)
    if when < clock - MAX_SKEW:
        raise AuthError(
            "expired",
            f"Signature expired: {amz_date} is now earlier than "
            f"{(clock - MAX_SKEW).strftime(AMZ_DATE)} ({clock.strftime(AMZ_DATE)} - 5 min.)",
        )
    if when > clock + MAX_SKEW:
        raise AuthError(
            "expired",
            f"Signature not yet current: {amz_date} is still later than "
            f"{(clock + MAX_SKEW).strftime(AMZ_DATE)} ({clock.strftime(AMZ_DATE)} + 5 min.)",
        )
    secret = secret_of(access_key)
    if secret is None:
        raise AuthError("unknown_key", "The security token included in the request is invalid.")
    content_sha = _header(environ, "x-amz-content-sha256")
    headers = {name: _header(environ, name) for name in signed}
    if content_sha:
        headers["X-Amz-Content-SHA256"] = content_sha
    path = str(environ.get("RAW_URI") or environ.get("REQUEST_URI") or environ.get("PATH_INFO") or "/")
    request = AWSRequest(
        method=str(environ.get("REQUEST_METHOD", "GET")),
        url=f"http://{_header(environ, 'host') or 'localhost'}{path}",
        headers=headers,
        data=body or b"",
    )
    request.context["timestamp"] = amz_date
    auth = _Recompute(Credentials(access_key, secret), service, region, signed)
    expected = auth.signature(auth.string_to_sign(request, auth.canonical_request(request)), request)
    if not hmac.compare_digest(str(expected).encode(), signature.encode()):
        raise AuthError(
            "mismatch",
            "The request signature we calculated does not match the signature you provided. "
            "Check your AWS Secret Access Key and signing method.",
        )
    return Signer(access_key, region, service)
