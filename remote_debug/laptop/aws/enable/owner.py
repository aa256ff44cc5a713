"""The owner tag's value: who enabled debugging on a job.

By default the caller's ``UserId`` from STS GetCallerIdentity - exactly what IAM policies see as
``${aws:userid}`` (``AIDA...`` for an IAM user, ``AROA...:<session>`` for an assumed role), so a
policy can say "only the owner may update or stop this job" with
``aws:ResourceTag/remote-debug:owner = ${aws:userid}`` (see ``templates/iam``).
"""

from __future__ import annotations

from typing import Any

from remote_debug.laptop.aws.enable.request import check_owner
from remote_debug.laptop.aws.enable.terms import EnableError
from remote_debug.laptop.core.errors import UserError


def resolve_owner(owner: str | None, boto_session: Any = None) -> str:
    """``owner`` when given (validated), else the caller's ``aws:userid`` through ``boto_session``."""
    if owner is not None:
        return check_owner(owner)
    from remote_debug.laptop.aws import clients as aws

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


def claim_job(client: Any, arn: str, owner: str) -> bool:
    """Tag a job nobody owns with ``owner`` (the caller's ``aws:userid``); True if it was tagged.  A job with an
    owner keeps it.  ``enable JOB`` and ``adopt JOB`` do this first on a job launched without remote_debug, since
    templates/iam/user-policy.json lets a user update, tag and stop only jobs tagged as theirs, and tag an unowned
    one only with themselves as owner.  AWS errors propagate (the caller words them)."""
    from remote_debug.laptop.aws.clients import TAG_OWNER

    listed = client.list_tags(ResourceArn=arn)
    if any(tag.get("Key") == TAG_OWNER for tag in listed.get("Tags") or []):
        return False
    client.add_tags(ResourceArn=arn, Tags=[{"Key": TAG_OWNER, "Value": owner}])
    return True
