"""The owner tag's value: who enabled debugging on a job.

By default the caller's ``UserId`` from STS GetCallerIdentity - exactly what IAM policies see as
``${aws:userid}`` (``AIDA...`` for an IAM user, ``AROA...:<session>`` for an assumed role), so a
policy can say "only the owner may update or stop this job" with
``aws:ResourceTag/remote-debug:owner = ${aws:userid}`` (see ``templates/iam``).
"""

from __future__ import annotations

from typing import Any

from remote_debug.local.errors import UserError
from remote_debug.sagemaker.common import EnableError
from remote_debug.sagemaker.request import check_owner


def resolve_owner(owner: str | None, boto_session: Any = None) -> str:
    """``owner`` when given (validated), else the caller's ``aws:userid`` through ``boto_session``."""
    if owner is not None:
        return check_owner(owner)
    from remote_debug.local import aws

    try:
        session = boto_session if boto_session is not None else aws.session()
        identity = session.client("sts").get_caller_identity()
    except EnableError:
        raise
    except Exception as exc:
        if not aws.is_error(exc) and not isinstance(exc, UserError):
            raise
        message = str(exc) if isinstance(exc, UserError) else aws.describe_error(exc, "asking STS who you are")
        raise EnableError(f"cannot tell the job's owner ({message}); or pass owner='...'") from None
    return check_owner(str(identity["UserId"]))
