"""The container's own AWS calls through the SDK, where the image has it: every credential source AWS has.

The stdlib signer (:mod:`.awscall`) knows two sources: static keys in the environment and the container
credentials endpoint (``AWS_CONTAINER_CREDENTIALS_*``).  An execution environment can give others - a web identity
token (``AWS_WEB_IDENTITY_TOKEN_FILE``), a shared config or credentials file, a ``credential_process``, EC2's
instance metadata, the EKS pod identity endpoint - and the calls then failed with "no AWS credentials".  AWS's
own training images (DLCs) ship boto3, whose credential chain knows them all, so where it imports, it makes the
call; elsewhere :mod:`.awscall` does, as before.

The only container module that imports anything beyond the standard library and the debuggers, and only
optionally (tests/test_layering.py allows it here): the hook never needs boto3 to run.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any


class SdkCallError(RuntimeError):
    """A call the SDK made and the service refused (``code``: the service's error code)."""

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.code = code


def available(env: Mapping[str, str]) -> bool:
    """Whether calls go through the SDK: boto3 imports, and ``env`` is this process's own environment (the
    SDK's credential chain reads ``os.environ``; an explicit other environment keeps the stdlib path)."""
    if env is not os.environ:
        return False
    try:
        import boto3  # noqa: F401
    except ImportError:
        return False
    return True


def call(service: str, operation: str, params: Mapping[str, Any], region: str) -> Any:
    """``operation`` (``"DeregisterManagedInstance"``) of ``service`` with the SDK's credential chain; the
    endpoint overrides (``AWS_ENDPOINT_URL_<SERVICE>``, ``AWS_ENDPOINT_URL``) are the SDK's own."""
    import boto3
    from botocore import xform_name
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        client = boto3.session.Session(region_name=region).client(
            service, config=Config(connect_timeout=10, read_timeout=10, retries={"max_attempts": 3})
        )
        answer = dict(getattr(client, xform_name(operation))(**params))
        answer.pop("ResponseMetadata", None)  # the decoded body, as the stdlib path returns it
        return answer
    except ClientError as exc:
        error = exc.response.get("Error", {})
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", "?")
        code = str(error.get("Code", ""))
        raise SdkCallError(
            f"{operation} failed: HTTP {status} {code} {error.get('Message', '')}".strip(), code
        ) from None
    except BotoCoreError as exc:  # no credentials anywhere in the chain, an unreachable endpoint, ...
        raise SdkCallError(f"{operation} failed: {exc}") from None
