"""The emulator's opt-in IAM mode (``remote-debug emulator --policy FILE``): every call it serves, and the
JSON-protocol calls it leaves to moto (CloudWatch Logs, the rest of SageMaker and SSM), is evaluated with
the given identity policies for the caller, and refused as AWS refuses it (``AccessDeniedException``,
AWS's wording) when any permission it needs is denied.

The caller is who moto's STS says the access key belongs to (GetCallerIdentity answers the same): an IAM
user made in the emulator (``iam create-user`` + ``create-access-key``) is ``AIDA...`` with its own ARN;
the emulator's own key (the only other one it accepts, see :mod:`.sigv4`) is moto's default user.  So two
users with two key pairs see each other's jobs as AWS would show them to two people under ``templates/iam``.
Query- and REST-protocol services (S3, IAM, STS) are not checked: the SageMaker path's permissions are
JSON-protocol ones.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from remote_debug.emulator.errors import ApiError
from remote_debug.emulator.iam_policy import PolicyError, statements
from remote_debug.emulator.iam_requests import Caller, TagsOf, authorizations, denial_message

Identify = Callable[[str, str], Caller]  # (access key id, region) -> the caller


def load_policies(path: Path) -> list[dict[str, Any]]:
    """The identity policies in ``path``: one policy document, or a JSON list of them."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise PolicyError(f"cannot read the policy {path}: {exc}") from None
    policies = data if isinstance(data, list) else [data]
    if not all(isinstance(p, dict) for p in policies):
        raise PolicyError(f"{path}: a policy document is a JSON object")
    statements(policies)  # a malformed document fails now, not on the first call
    return policies


def moto_caller(account: str) -> Identify:
    """The caller as moto's STS names it for GetCallerIdentity (what enable() tags jobs with)."""

    def identify(access_key: str, region: str) -> Caller:
        from moto.sts.models import sts_backends
        from moto.utilities.utils import get_partition

        backend = sts_backends[account][get_partition(region)]
        user_id, arn, owner = backend.get_caller_identity(access_key, region)
        return Caller(str(user_id), str(arn), str(owner))

    return identify


class PolicyEnforcer:
    """Called by the front with each request before it is served (or forwarded)."""

    def __init__(
        self,
        policies: list[dict[str, Any]],
        *,
        identify: Identify,
        tags_of: TagsOf,
        session_key: Callable[[str], str | None],
    ) -> None:
        statements(policies)
        self.policies = policies
        self.identify = identify
        self.tags_of = tags_of
        self.session_key = session_key  # a session id -> the access key that started it

    def __call__(self, service: str, operation: str, params: Mapping[str, Any], region: str, access_key: str) -> None:
        caller = self.identify(access_key, region)

        def starter(session_id: str) -> str | None:
            key = self.session_key(session_id)
            return self.identify(key, region).user_id if key else None

        needed = authorizations(
            service, operation, params, region=region, caller=caller, tags_of=self.tags_of, starter_of=starter
        )
        for authorization in needed:
            result = authorization.check(self.policies)
            if not result.allowed:
                raise ApiError("AccessDeniedException", denial_message(caller, authorization, result))
