"""What the hybrid transport leaves in AWS, and retiring it as early as it may go.

A hybrid job has, besides itself: its SSM activation, ``ssm-activation.json`` (which holds the
activation *code*, a credential) and ``ssm-activation.txt`` in its ``remote-debug`` S3 channel, and one
SSM managed instance (``mi-...``) per node (see :mod:`~remote_debug.laptop.aws.enable.hybrid_activation`).

**Retiring a job's activation.**  The activation and ``ssm-activation.json`` are needed only until
every node has registered; so they go once ``RegistrationsCount`` has reached ``RegistrationLimit``
(the job's instance count), or the job has ended, whichever comes first.  Two parties can see that
moment, and either may do it (deleting twice is harmless):

* the job's first node (``container/node/hybrid.py``): it is there when the last node registers, also for
  a fire-and-forget job nobody looks at - but only if the execution role may
  (``templates/iam/hybrid-execution-role-retire-policy.json``: ``ssm:DeleteActivation`` cannot be
  scoped to one activation, so that policy is an administrator's choice);
* the laptop, with the user's identity, which made the activation: :func:`retire_job` whenever it
  looks at the job, and ``remote-debug cleanup`` (:class:`Leftovers`) for everything at once.

What neither deletes expires on its own (the short ``ExpirationDate``, ``hybrid_activation.lifetime``).

**Managed instances** are deregistered by their own node when it exits; one whose node could not
(killed, no permission) stays registered after the job: ``remote-debug cleanup`` deregisters the
instances of *ended* jobs only, never those of a running job.  ``ssm-activation.txt`` (no secret)
goes once the job has ended, with the activation file.

**Only the caller's own.**  Activations and instances count as ours when their ``remote-debug:owner``
tag is the owner (by default the caller's ``aws:userid``, as ``enable()`` tags them); S3 files through
the job's own tags (owner, ``remote-debug:transport=hybrid``).  An activation whose job does not exist
(``enable()`` killed before CreateTrainingJob) is a leftover once expired or :data:`NO_JOB_GRACE` old,
so that cleanup never races a request that is about to be submitted.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from remote_debug.laptop.aws import clients as aws
from remote_debug.laptop.aws.clients import TAG_ACTIVATION, TAG_OWNER, TAG_TRANSPORT
from remote_debug.laptop.aws.enable.hybrid_activation import METADATA_ACTIVATION, TAG_JOB, channel_files, channel_uri
from remote_debug.laptop.aws.enable.terms import EnableError, describe_aws_error
from remote_debug.laptop.core.errors import AwsError

log = logging.getLogger(__name__)

ACTIVATION = "activation"
INSTANCE = "managed-instance"
OBJECT = "s3-object"
ENDED = frozenset({"Completed", "Failed", "Stopped"})  # TrainingJobStatus values after which nothing runs
NO_JOB_GRACE = timedelta(hours=1)
HYBRID = "hybrid"
_GONE = ("InvalidActivation", "InvalidActivationId", "InvalidInstanceId", "NoSuchKey")  # already deleted


@dataclass(frozen=True)
class Leftover:
    """One thing to delete: ``id`` is an activation id, an ``mi-`` id or an ``s3://`` URI."""

    kind: str
    id: str
    job: str
    why: str

    def __str__(self) -> str:
        return f"{self.kind} {self.id} of job {self.job}: {self.why}"

    def to_json(self) -> dict[str, str]:
        return asdict(self)


@dataclass(frozen=True)
class JobView:
    """What retiring needs to know of a job; ``status`` None: there is no such job."""

    name: str
    status: str | None
    tags: Mapping[str, str] = field(default_factory=dict)
    channel: str | None = None  # the remote-debug channel's S3 prefix

    @classmethod
    def of(cls, name: str, described: Mapping[str, Any], tags: Mapping[str, str]) -> JobView:
        try:
            channel: str | None = channel_uri(described)
        except EnableError:  # no (usable) remote-debug channel: no file of ours
            channel = None
        return cls(name, str(described.get("TrainingJobStatus") or ""), dict(tags), channel)

    @property
    def ended(self) -> bool:
        return self.status in ENDED

    @property
    def hybrid(self) -> bool:
        return self.tags.get(TAG_TRANSPORT) == HYBRID


def _tags(listed: Any) -> dict[str, str]:
    return {str(t["Key"]): str(t.get("Value", "")) for t in listed or [] if isinstance(t, Mapping) and "Key" in t}


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


def _code(exc: BaseException) -> str:
    return aws.error_code(exc)


def _not_found(exc: BaseException) -> bool:
    if not aws.is_error(exc):
        return False
    message = str(getattr(exc, "response", {}).get("Error", {}).get("Message", ""))
    return _code(exc) in ("ValidationException", "ResourceNotFound") and bool(
        re.search(r"not found|could not find", message, re.IGNORECASE)
    )


class Leftovers:
    """Finds and deletes the hybrid transport's leftovers of ``owner`` with the given boto3 clients."""

    def __init__(
        self, *, sagemaker: Any, ssm: Any, s3: Any, owner: str, now: Callable[[], datetime] | None = None
    ) -> None:
        self.sagemaker, self.ssm, self.s3, self.owner = sagemaker, ssm, s3, owner
        self.now = now or _utcnow
        self._jobs: dict[str, JobView] = {}

    # --- reading ----------------------------------------------------------------------------------

    def _call(self, what: str, fn: Callable[..., Any], **params: Any) -> Any:
        try:
            return fn(**params)
        except Exception as exc:
            if not aws.is_error(exc):
                raise
            raise AwsError(describe_aws_error(exc, what)) from None

    def _pages(self, client: Any, operation: str, what: str, **params: Any) -> Iterator[dict[str, Any]]:
        try:
            yield from client.get_paginator(operation).paginate(**params)
        except Exception as exc:
            if not aws.is_error(exc):
                raise
            raise AwsError(describe_aws_error(exc, what)) from None

    def job(self, name: str) -> JobView:
        if name not in self._jobs:
            try:
                described = self.sagemaker.describe_training_job(TrainingJobName=name)
            except Exception as exc:
                if not _not_found(exc):
                    if not aws.is_error(exc):
                        raise
                    raise AwsError(describe_aws_error(exc, f"describing SageMaker job {name}")) from None
                self._jobs[name] = JobView(name, None)
                return self._jobs[name]
            listed = self._call(
                f"listing the tags of job {name}", self.sagemaker.list_tags, ResourceArn=described["TrainingJobArn"]
            )
            self._jobs[name] = JobView.of(name, described, _tags(listed.get("Tags")))
        return self._jobs[name]

    def activations(self) -> list[dict[str, Any]]:
        """The owner's activations made by ``enable()`` (tagged with the owner and a job)."""
        found = []
        for page in self._pages(self.ssm, "describe_activations", "listing SSM activations"):
            for activation in page.get("ActivationList", []):
                tags = _tags(activation.get("Tags"))
                if tags.get(TAG_OWNER) == self.owner and tags.get(TAG_JOB):
                    found.append(activation)
        return found

    def instances(self) -> list[tuple[str, str]]:
        """(managed instance id, job) of the owner's instances registered with an ``enable()`` activation."""
        found = []
        pages = self._pages(
            self.ssm,
            "describe_instance_information",
            "listing SSM managed instances",
            Filters=[{"Key": f"tag:{TAG_OWNER}", "Values": [self.owner]}],
        )
        for page in pages:
            for info in page.get("InstanceInformationList", []):
                instance = str(info.get("InstanceId", ""))
                if not instance.startswith("mi-"):
                    continue
                listed = self._call(
                    f"listing the tags of {instance}",
                    self.ssm.list_tags_for_resource,
                    ResourceType="ManagedInstance",
                    ResourceId=instance,
                )
                tags = _tags(listed.get("TagList"))
                if tags.get(TAG_OWNER) == self.owner and tags.get(TAG_JOB):  # the filter, checked
                    found.append((instance, tags[TAG_JOB]))
        return found

    def ended_hybrid_jobs(self, since: timedelta) -> list[JobView]:
        """The owner's hybrid jobs created in the last ``since`` that have ended."""
        views = []
        pages = self._pages(
            self.sagemaker,
            "list_training_jobs",
            "listing SageMaker training jobs",
            CreationTimeAfter=self.now() - since,
        )
        for page in pages:
            for summary in page.get("TrainingJobSummaries", []):
                if summary.get("TrainingJobStatus") not in ENDED:
                    continue
                name = str(summary["TrainingJobName"])
                if name not in self._jobs:  # ListTags first: no DescribeTrainingJob of other people's jobs
                    listed = self._call(
                        f"listing the tags of job {name}",
                        self.sagemaker.list_tags,
                        ResourceArn=summary["TrainingJobArn"],
                    )
                    tags = _tags(listed.get("Tags"))
                    if tags.get(TAG_OWNER) != self.owner or tags.get(TAG_TRANSPORT) != HYBRID:
                        continue
                views.append(self.job(name))
        return views

    def owned_file(self, uri: str, activation_id: str | None) -> bool:
        """Whether ``uri`` exists and was written for ``activation_id`` (``enable()`` stores the id as the
        object's metadata): a channel prefix shared by several jobs against the rules holds the newest
        job's file, which an older job's retirement must leave alone."""
        bucket, _, key = uri[len("s3://") :].partition("/")
        try:
            head = self.s3.head_object(Bucket=bucket, Key=key)
        except Exception as exc:
            if not aws.is_error(exc):
                raise
            status = getattr(exc, "response", {}).get("ResponseMetadata", {}).get("HTTPStatusCode")
            if status != 404 and _code(exc) not in ("404", "NoSuchKey", "NotFound"):
                log.warning("%s", describe_aws_error(exc, f"looking for {uri}"))
            return False
        written_for = (head.get("Metadata") or {}).get(METADATA_ACTIVATION)
        return written_for is None or activation_id is None or written_for == activation_id

    # --- deciding ---------------------------------------------------------------------------------

    def retirement(self, view: JobView, activation: Mapping[str, Any] | None) -> list[Leftover]:
        """What of one existing job may go now: its activation (``activation``: as DescribeActivations
        lists it; None when it is gone) and files, once every node registered or the job has ended."""
        registered = int((activation or {}).get("RegistrationsCount") or 0)
        limit = int((activation or {}).get("RegistrationLimit") or 1)
        if view.ended:
            why = f"the job is {view.status}"
        elif activation is None:
            why = "its activation is gone"
        elif registered >= limit:
            why = f"every node registered ({registered}/{limit})"
        elif activation.get("Expired"):
            why = "the activation expired"
        else:
            return []  # nodes still to register: the running job needs both
        out = []
        if activation is not None:
            out.append(Leftover(ACTIVATION, str(activation["ActivationId"]), view.name, why))
        if view.channel:
            bucket, key, note = channel_files(view.channel)
            activation_id = view.tags.get(TAG_ACTIVATION) or (activation or {}).get("ActivationId")
            for name in (key, note) if view.ended else (key,):  # the note keeps a running job's channel
                uri = f"s3://{bucket}/{name}"
                if self.owned_file(uri, activation_id):
                    out.append(Leftover(OBJECT, uri, view.name, why))
        return out

    def find(self, since: timedelta) -> list[Leftover]:
        """Every leftover of the owner in this region (S3 files: of jobs created within ``since``)."""
        found: list[Leftover] = []
        done: set[str] = set()
        for activation in self.activations():
            tags = _tags(activation.get("Tags"))
            view = self.job(tags[TAG_JOB])
            if view.status is None:
                created = activation.get("CreatedDate")
                old = isinstance(created, datetime) and self.now() - created > NO_JOB_GRACE
                if activation.get("Expired") or old:
                    why = "its job was never created"
                    found.append(Leftover(ACTIVATION, str(activation["ActivationId"]), view.name, why))
                continue
            done.add(view.name)  # its files are decided with its activation
            found += self.retirement(view, activation)
        for instance, job in self.instances():
            view = self.job(job)
            if view.status is None or view.ended:
                why = "its job was never created" if view.status is None else f"the job is {view.status}"
                found.append(Leftover(INSTANCE, instance, job, why))
        for view in self.ended_hybrid_jobs(since):
            if view.name not in done:
                found += self.retirement(view, None)
        unique: dict[tuple[str, str], Leftover] = {}
        for item in found:
            unique.setdefault((item.kind, item.id), item)
        return list(unique.values())

    # --- deleting ---------------------------------------------------------------------------------

    def delete(self, item: Leftover) -> str | None:
        """Delete one leftover; None when done (or already gone), else the one-line error."""
        try:
            if item.kind == ACTIVATION:
                self.ssm.delete_activation(ActivationId=item.id)
            elif item.kind == INSTANCE:
                self.ssm.deregister_managed_instance(InstanceId=item.id)
            else:
                bucket, _, key = item.id[len("s3://") :].partition("/")
                self.s3.delete_object(Bucket=bucket, Key=key)
        except Exception as exc:
            if not aws.is_error(exc):
                raise
            if _code(exc) in _GONE:
                return None
            verb = "deregistering" if item.kind == INSTANCE else "deleting"
            return describe_aws_error(exc, f"{verb} {item.kind} {item.id} of job {item.job}")
        return None


def retire_job(job: str, described: Mapping[str, Any], tags: Mapping[str, str], *, ssm: Any, s3: Any) -> list[Leftover]:
    """The laptop's part while it looks at a job (attach, ssh, ...): retire the hybrid job's activation
    and activation file if every node has registered or the job has ended.  Never raises; returns what
    it deleted.  Each call costs a DescribeActivations (and a HeadObject per file): call it when every
    node has published its managed instance, and when the job has ended - not on every poll."""
    view = JobView.of(job, described, tags)
    activation_id = tags.get(TAG_ACTIVATION)
    if not view.hybrid or not activation_id:
        return []
    leftovers = Leftovers(sagemaker=None, ssm=ssm, s3=s3, owner=tags.get(TAG_OWNER, ""))
    try:
        listed = ssm.describe_activations(Filters=[{"FilterKey": "ActivationIds", "FilterValues": [activation_id]}])
        activation = next(iter(listed.get("ActivationList") or []), None)
        plan = leftovers.retirement(view, activation)
    except Exception as exc:
        log.info("%s", describe_aws_error(exc, f"checking the SSM activation of job {job}"))
        return []
    done = []
    for item in plan:
        try:
            error = leftovers.delete(item)
        except Exception as exc:  # the caller is busy with the job: never fail it for this
            error = f"deleting {item}: {type(exc).__name__}: {exc}"
        if error:
            log.info("%s; 'remote-debug cleanup' retries, and the activation expires by itself", error)
        else:
            done.append(item)
    return done
