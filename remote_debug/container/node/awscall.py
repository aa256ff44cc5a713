"""One signed AWS JSON call from inside the container, with the standard library only.

The container side must not depend on boto3, yet the hybrid transport has to deregister its
managed instance when the job ends (a leaked registration counts against the account's quota and
stays listed as a stale node).  That is a single ``ssm:DeregisterManagedInstance`` call, so we
sign it ourselves (Signature Version 4) with the job's execution-role credentials, which SageMaker
serves on the container credentials endpoint.  Tests check the signature against botocore's.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from remote_debug.container.node import aws_sdk

CONTAINER_CREDENTIALS_HOST = "http://169.254.170.2"
TIMEOUT = 10.0


class AwsCallError(RuntimeError):
    """A failed call (message is one line; ``code``: the service's error code, when the SDK made the call)."""

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Credentials:
    access_key: str
    secret_key: str
    token: str | None = None


def credentials_from(env: Mapping[str, str]) -> Credentials:
    """Static credentials from the environment, else the container credentials endpoint."""
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        return Credentials(env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"], env.get("AWS_SESSION_TOKEN"))
    relative = env.get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")
    url = CONTAINER_CREDENTIALS_HOST + relative if relative else env.get("AWS_CONTAINER_CREDENTIALS_FULL_URI")
    if not url:
        raise AwsCallError("no AWS credentials in the container (no AWS_CONTAINER_CREDENTIALS_* or AWS_ACCESS_KEY_ID)")
    request = urllib.request.Request(url)
    if env.get("AWS_CONTAINER_AUTHORIZATION_TOKEN"):
        request.add_header("Authorization", env["AWS_CONTAINER_AUTHORIZATION_TOKEN"])
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            data = json.loads(response.read())
        return Credentials(data["AccessKeyId"], data["SecretAccessKey"], data.get("Token"))
    except (OSError, ValueError, KeyError) as exc:
        raise AwsCallError(f"cannot read container credentials from {url}: {exc}") from None


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def sign(
    *,
    method: str,
    url: str,
    headers: Mapping[str, str],
    body: bytes,
    region: str,
    service: str,
    credentials: Credentials,
    amz_date: str,
) -> dict[str, str]:
    """``headers`` plus X-Amz-Date, the session token and Authorization (SigV4, all headers signed)."""
    parts = urllib.parse.urlsplit(url)
    out = {**headers, "Host": parts.netloc, "X-Amz-Date": amz_date}
    if credentials.token:
        out["X-Amz-Security-Token"] = credentials.token
    canonical = sorted((k.lower(), " ".join(v.split())) for k, v in out.items())
    signed_headers = ";".join(k for k, _ in canonical)
    canonical_request = "\n".join(
        [
            method,
            urllib.parse.quote(parts.path or "/", safe="/~"),
            "&".join(sorted(parts.query.split("&"))) if parts.query else "",
            "".join(f"{k}:{v}\n" for k, v in canonical),
            signed_headers,
            hashlib.sha256(body).hexdigest(),
        ]
    )
    scope = f"{amz_date[:8]}/{region}/{service}/aws4_request"
    string_to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical_request.encode()).hexdigest()]
    )
    key = _hmac(("AWS4" + credentials.secret_key).encode(), amz_date[:8])
    for part in (region, service, "aws4_request"):
        key = _hmac(key, part)
    signature = hmac.new(key, string_to_sign.encode(), hashlib.sha256).hexdigest()
    out["Authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={credentials.access_key}/{scope}, "
        f"SignedHeaders={signed_headers}, Signature={signature}"
    )
    return out


def ssm_endpoint(region: str, env: Mapping[str, str]) -> str:
    # the same per-service override boto3 honours (VPC endpoints, tests)
    return env.get("AWS_ENDPOINT_URL_SSM") or env.get("AWS_ENDPOINT_URL") or f"https://ssm.{region}.amazonaws.com/"


def call_ssm(operation: str, params: Mapping[str, Any], region: str, env: Mapping[str, str] | None = None) -> Any:
    """POST one AmazonSSM JSON operation; returns the decoded response or raises AwsCallError.  Through the SDK
    (every credential source) where the image has boto3, else signed here (:mod:`.aws_sdk`)."""
    env = os.environ if env is None else env
    if aws_sdk.available(env):
        try:
            return aws_sdk.call("ssm", operation, params, region)
        except aws_sdk.SdkCallError as exc:
            raise AwsCallError(str(exc), exc.code) from None
    url = ssm_endpoint(region, env)
    body = json.dumps(params).encode()
    headers = sign(
        method="POST",
        url=url,
        body=body,
        region=region,
        service="ssm",
        credentials=credentials_from(env),
        headers={"Content-Type": "application/x-amz-json-1.1", "X-Amz-Target": f"AmazonSSM.{operation}"},
        amz_date=time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()),
    )
    headers.pop("Host")  # urllib sets it from the URL
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            text = response.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:300]
        raise AwsCallError(f"{operation} failed: HTTP {exc.code} {' '.join(detail.split())}") from None
    except OSError as exc:
        raise AwsCallError(f"{operation} failed: {exc}") from None
    return json.loads(text) if text.strip() else {}
