"""What IAM authorizes for one AWS call: the actions, each on its resource, with the request's context.

:func:`authorizations` turns a call as the client sends it (service, operation, parameters) into the
checks AWS makes for it, with the context keys AWS documents for them and ``templates/iam`` conditions
on: ``aws:userid`` (and ``aws:username`` for IAM users), ``aws:RequestTag/*`` and ``aws:TagKeys`` from
the request's tags, ``aws:ResourceTag/*`` from the resource's real tags, ``sagemaker:EnableRemoteDebug``
from ``RemoteDebugConfig``, and SSM's ``ssm:resourceTag/aws:ssmmessages:target-id`` / ``session-id``.

Where one call needs more than one permission, all are listed, as AWS checks them: CreateTrainingJob
with ``Tags`` also needs ``sagemaker:AddTags`` on the new job (tag-on-create) and ``iam:PassRole`` on
its role; StartSession needs the target *and* the session document (``SSM-SessionManagerRunShell``, an
account's own document, when no DocumentName is given - a shell session).

Used by the emulator's ``--policy`` mode (:mod:`.enforce`) and by the tests that hold ``templates/iam``
to what every command sends.  Operations not listed here are checked as ``<service>:<Operation>`` on
``"*"`` without context.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from remote_debug.emulator.iam_policy import Context, Result, evaluate

SHELL_DOCUMENT = "SSM-SessionManagerRunShell"
TARGET_ID_KEY = "ssm:resourceTag/aws:ssmmessages:target-id"
SESSION_ID_KEY = "ssm:resourceTag/aws:ssmmessages:session-id"
ENABLE_REMOTE_DEBUG_KEY = "sagemaker:EnableRemoteDebug"
# SageMaker's native target (sagemaker-training-job:<job>_algo-<n>) has no documented resource ARN:
# policies (AWS's examples, templates/iam) allow it on "*" by its target-id tag, as doctor simulates it.
NATIVE_TARGET_RESOURCE = "*"
# botocore service name -> IAM service prefix, where they differ
_PREFIX = {"logs": "logs", "sagemaker": "sagemaker", "ssm": "ssm", "sts": "sts", "iam": "iam", "s3": "s3"}
_LOG_OPERATIONS = {"FilterLogEvents", "GetLogEvents", "DescribeLogStreams"}


@dataclass(frozen=True)
class Caller:
    """Who signed the request: what IAM's global keys say of them."""

    user_id: str  # ${aws:userid}: AIDA... for an IAM user, AROA...:<session> for a role session
    arn: str
    account: str

    @property
    def partition(self) -> str:
        return self.arn.split(":", 2)[1] if self.arn.count(":") >= 2 else "aws"

    def context(self) -> dict[str, str]:
        values = {"aws:userid": self.user_id, "aws:PrincipalArn": self.arn, "aws:PrincipalAccount": self.account}
        kind, _, name = self.arn.partition(":user/")
        if name and kind.endswith(f":{self.account}") and ":iam::" in kind:  # only IAM users have a username
            values["aws:username"] = name.rsplit("/", 1)[-1]
        return values


@dataclass(frozen=True)
class Authorization:
    """One permission a call needs: ``action`` on ``resource`` with ``context``."""

    action: str
    resource: str
    context: Mapping[str, str | list[str]] = field(default_factory=dict)

    def check(self, policies: Sequence[Mapping[str, Any]]) -> Result:
        return evaluate(policies, self.action, self.resource, self.context)


TagsOf = Callable[[str], Mapping[str, str] | None]  # a resource ARN -> its tags (None: unknown resource)
StarterOf = Callable[[str], str | None]  # a session id -> the aws:userid of whoever started it


def training_job_arn(partition: str, region: str, account: str, job: str) -> str:
    return f"arn:{partition}:sagemaker:{region}:{account}:training-job/{job}"


def document_arn(partition: str, region: str, account: str, document: str) -> str:
    """AWS's own documents (AWS-*) have no account in their ARN; an account's documents do."""
    owner = "" if document.startswith("AWS-") else account
    return f"arn:{partition}:ssm:{region}:{owner}:document/{document}"


def request_tags(tags: Any) -> dict[str, str | list[str]]:
    """``aws:RequestTag/<key>`` for each tag of the request, and ``aws:TagKeys``."""
    pairs = [(str(t.get("Key", "")), str(t.get("Value", ""))) for t in tags or []]
    out: dict[str, str | list[str]] = {f"aws:RequestTag/{k}": v for k, v in pairs}
    if pairs:
        out["aws:TagKeys"] = [k for k, _ in pairs]
    return out


def resource_tags(tags: Mapping[str, str] | None) -> dict[str, str | list[str]]:
    return {f"aws:ResourceTag/{k}": v for k, v in (tags or {}).items()}


def authorizations(
    service: str,
    operation: str,
    params: Mapping[str, Any],
    *,
    region: str,
    caller: Caller,
    tags_of: TagsOf = lambda _arn: None,
    starter_of: StarterOf = lambda _id: None,
) -> list[Authorization]:
    """Every permission AWS checks for ``operation`` of ``service`` called with ``params``."""
    base: dict[str, str | list[str]] = {**caller.context(), "aws:RequestedRegion": region}
    partition, account = caller.partition, caller.account
    prefix = _PREFIX.get(service, service)
    action = f"{prefix}:{operation}"

    def with_context(*extra: Mapping[str, str | list[str]]) -> dict[str, str | list[str]]:
        out = dict(base)
        for values in extra:
            out.update(values)
        return out

    if service == "sagemaker":
        if "TrainingJobName" in params:
            arn = training_job_arn(partition, region, account, str(params["TrainingJobName"]))
        else:
            arn = str(params.get("ResourceArn") or "*")
        tags = resource_tags(tags_of(arn)) if arn != "*" else {}
        remote_debug = params.get("RemoteDebugConfig") or {}
        debug: dict[str, str | list[str]] = (
            {ENABLE_REMOTE_DEBUG_KEY: str(bool(remote_debug["EnableRemoteDebug"])).lower()}
            if "EnableRemoteDebug" in remote_debug
            else {}
        )
        if operation == "CreateTrainingJob":
            requested = request_tags(params.get("Tags"))
            out = [Authorization(action, arn, with_context(requested, debug))]
            if params.get("Tags"):
                out.append(Authorization("sagemaker:AddTags", arn, with_context(requested)))
            out.append(
                Authorization(
                    "iam:PassRole",
                    str(params.get("RoleArn", "")),
                    with_context({"iam:PassedToService": "sagemaker.amazonaws.com"}),
                )
            )
            return out
        if operation == "UpdateTrainingJob":
            return [Authorization(action, arn, with_context(tags, debug))]
        if operation == "AddTags":
            return [Authorization(action, arn, with_context(tags, request_tags(params.get("Tags"))))]
        if operation == "DeleteTags":
            return [Authorization(action, arn, with_context(tags, {"aws:TagKeys": list(params.get("TagKeys", []))}))]
        return [Authorization(action, arn, with_context(tags))]
    if service == "ssm" and operation == "StartSession":
        target = str(params.get("Target", ""))
        if target.startswith("mi-"):
            resource = f"arn:{partition}:ssm:{region}:{account}:managed-instance/{target}"
        elif target.startswith("i-"):
            resource = f"arn:{partition}:ec2:{region}:{account}:instance/{target}"
        else:
            resource = NATIVE_TARGET_RESOURCE
        document = str(params.get("DocumentName") or SHELL_DOCUMENT)
        instance_tags = _ssm_tags(tags_of(resource)) if resource != NATIVE_TARGET_RESOURCE else {}
        return [
            Authorization(action, resource, with_context({TARGET_ID_KEY: target}, instance_tags)),
            Authorization(action, document_arn(partition, region, account, document), with_context()),
        ]
    instance = str(
        params.get("InstanceId")
        or (params.get("ResourceId") if params.get("ResourceType") == "ManagedInstance" else "")
        or ""
    )
    if service == "ssm" and instance.startswith("mi-"):  # DeregisterManagedInstance, ListTagsForResource, ...
        resource = f"arn:{partition}:ssm:{region}:{account}:managed-instance/{instance}"
        return [Authorization(action, resource, with_context(_ssm_tags(tags_of(resource))))]
    if service == "ssm" and operation in ("TerminateSession", "ResumeSession"):
        session = str(params.get("SessionId", ""))
        starter = starter_of(session)
        return [
            Authorization(
                action,
                f"arn:{partition}:ssm:{region}:{account}:session/{session}",
                with_context({SESSION_ID_KEY: starter} if starter else {}),
            )
        ]
    if service == "logs" and operation in _LOG_OPERATIONS:
        group = str(params.get("logGroupName") or params.get("logGroupIdentifier") or "*")
        if group.startswith("arn:"):
            group = group.split(":log-group:", 1)[-1].removesuffix(":*")
        stream = params.get("logStreamName")
        suffix = f":log-stream:{stream}" if operation == "GetLogEvents" and stream else ":*"
        return [
            Authorization(action, f"arn:{partition}:logs:{region}:{account}:log-group:{group}{suffix}", with_context())
        ]
    return [Authorization(action, "*", with_context())]


def _ssm_tags(tags: Mapping[str, str] | None) -> dict[str, str | list[str]]:
    """A managed instance's tags as SSM exposes them to conditions."""
    return {f"ssm:resourceTag/{k}": v for k, v in (tags or {}).items()}


def check_all(policies: Sequence[Mapping[str, Any]], needed: list[Authorization]) -> list[tuple[Authorization, Result]]:
    """Each needed permission with its decision."""
    return [(a, a.check(policies)) for a in needed]


def denial_message(caller: Caller, authorization: Authorization, result: Result) -> str:
    """AWS's AccessDeniedException wording for a denied permission."""
    why = (
        "with an explicit deny in an identity-based policy"
        if result.decision.value == "explicitDeny"
        else f"because no identity-based policy allows the {authorization.action} action"
    )
    return (
        f"User: {caller.arn} is not authorized to perform: {authorization.action} on resource: "
        f"{authorization.resource} {why}"
    )


__all__ = ["Authorization", "Caller", "Context", "authorizations", "check_all", "denial_message"]
