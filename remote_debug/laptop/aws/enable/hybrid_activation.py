"""The hybrid transport's SSM activation: created by ``enable()``, handed to the job, retired early.

``transport="hybrid"`` replaces SageMaker's native remote debugging (``RemoteDebugConfig`` stays
off): every node runs its own amazon-ssm-agent, registered as an SSM managed instance (``mi-...``)
with a *hybrid activation*, and publishes that id in its manifest (``container/node/hybrid.py``).  This
module is the laptop half.

**The activation.**  One ``ssm:CreateActivation`` per job, made when the job's final request is
known (raw dicts: in ``enable()``; SDK objects: when ``fit()`` / ``train()`` sends
CreateTrainingJob, see ``intercept``)::

    IamRole            = enable(hybrid_role=...): the managed instances' role (trusts ssm.amazonaws.com,
                         AmazonSSMManagedInstanceCore; templates/iam/managed-instance-role-trust.json);
                         an ARN is reduced to the [path/]name SSM wants
    RegistrationLimit  = the job's instance count (instance groups included)
    ExpirationDate     = now + the registration window (REGISTRATION_WINDOW, 2 h; the laptop's
                         REMOTE_DEBUG_HYBRID_REGISTRATION_WINDOW seconds override it) + for managed spot
                         the capacity wait (MaxWaitTimeInSeconds - MaxRuntimeInSeconds); see lifetime()
    DefaultInstanceName= the job name
    Tags               = remote-debug:owner (managed instances inherit the activation's tags: that is
                         what templates/iam/hybrid-user-policy.json scopes sessions by), remote-debug:job,
                         and remote-debug:execution-role = the job's RoleArn (what
                         templates/iam/hybrid-execution-role-policy.json scopes deregistration by:
                         ``ssm:resourceTag/remote-debug:execution-role`` = ``${aws:PrincipalArn}``)

The activation only has to outlive the wait for the job's instances: a node registers when its hook
starts, right after SageMaker has started the instance, pulled the image and downloaded the inputs
(``Starting`` + ``Downloading``: minutes, tens of minutes for big GPU instances and images); the
registration of an instance outlives the activation's expiry and deletion.  SSM documents no minimum
``ExpirationDate`` (botocore's model has none; at most 30 days, 24 h when omitted).

**Delivery.**  The activation code is a credential: it goes into no part of the request
(``Environment``, ``HyperParameters``, tags and the entry are shown to anyone allowed to describe
the job) and onto no local disk.  It is written from memory, with ``s3:PutObject``, as
``ssm-activation.json`` = ``{"ActivationId", "ActivationCode", "Region", "S3Uri"}`` (``S3Uri``: where
the file itself is, so that the node can retire it) at the root of the job's ``remote-debug`` input
channel, which SageMaker downloads to ``/opt/ml/input/data/remote_debug/ssm-activation.json`` - the
path the container reads by default (``container/hybrid.DEFAULT_ACTIVATION_FILE``).  Next to it goes
``ssm-activation.txt`` (:data:`NOTE_FILE`, no secret): the channel must never become empty when the
activation file is deleted while the job runs - SageMaker fails a (restarted) job whose S3Prefix
channel has no object.  Both carry the activation id as S3 metadata (:data:`METADATA_ACTIVATION`), so
that retiring one job's files never deletes another job's in a shared prefix.  The channel is, per path:

* raw request dicts: ``package_uri`` (the prefix holding the bundle; it must be the job's own, as in
  ``templates/launchers/boto3_request.py``), or a ``remote-debug`` channel the request already has;
* SDK v3 / late v2 ``ModelTrainer``: the per-job prefix the SDK uploaded the bundle channel to
  (``<base job name>/<job>/input/remote-debug``);
* SDK v2 estimators: their bundle travels inside ``sourcedir.tar.gz``, which the SDK has already
  uploaded when it sends CreateTrainingJob - the moment ``enable()`` learns the job's name and makes
  the activation - and an estimator without ``entry_point`` ships no code at all.  So the request
  gets a ``remote-debug`` channel of its own next to the job's code
  (``.../<job>/source/remote-debug``; no code: ``<S3OutputPath>/<job>/remote-debug``) holding only
  the activation file (and its note).  The package still runs from ``/opt/ml/code``, and the
  container finds the file at its default path.

The job is tagged ``remote-debug:transport=hybrid`` (the laptop picks its transport from that tag)
and ``remote-debug:ssm-activation=<activation id>`` (not a secret: the id cannot register anything
without the code).

**The account's instance tier.**  Session Manager refuses sessions to hybrid managed instances
unless the account's managed-instance tier (``/ssm/managed-instance/activation-tier``, per region) is
``advanced``.  That is no part of the request, so ``enable()`` does not refuse the job; once the job is
accepted it reads the setting (``ssm:GetServiceSetting``) and, unless it is ``advanced``, warns
(:class:`~remote_debug.laptop.aws.enable.terms.RemoteDebugWarning`) with the command that changes it.

**No leaked activations or registrations.**

* An activation whose CreateTrainingJob fails (an error response, or no response at all) is deleted
  at once, with its ``ssm-activation.json``: handlers on ``after-call`` / ``after-call-error`` of
  ``sagemaker.CreateTrainingJob`` (:func:`watch`).  SDK objects: always.  Raw dicts: on clients
  created from ``enable(boto_session=...)`` after ``enable()``, and on any client given to
  :func:`watch_client`.  :func:`discard` deletes the activation of a request that will not be
  submitted after all; enabling a request again replaces (deletes) its earlier activation.
* Once the job runs, the activation and its ``ssm-activation.json`` are *retired* (deleted) as soon as
  every node has registered (``RegistrationsCount`` reached ``RegistrationLimit``) or the job has
  ended, whichever comes first, by whoever sees it first (:mod:`~remote_debug.laptop.aws.enable.leftovers`):
  the job's first node, which watches the activation after registering (``container/node/hybrid.py``; the
  execution role needs ``templates/iam/hybrid-execution-role-retire-policy.json``), and the laptop
  (:func:`~remote_debug.laptop.aws.enable.leftovers.retire_job`; ``remote-debug cleanup``).
* Each node deregisters its own managed instance when it exits (``ssm:DeregisterManagedInstance``,
  ``container/node/hybrid.py``; ``templates/iam/hybrid-execution-role-policy.json``); a node that could not
  logs the exact ``aws ssm deregister-managed-instance`` command, and ``remote-debug cleanup`` finds it.
* Whatever escapes all that (a process killed between ``enable()`` and CreateTrainingJob, a job that
  ends while nobody looks, an execution role without the retire policy) expires with the short
  ``ExpirationDate`` above and registers at most ``RegistrationLimit`` instances; ``remote-debug
  cleanup`` lists and deletes it.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from remote_debug.laptop.aws.clients import TAG_ACTIVATION, TAG_OWNER, TAG_PREFIX
from remote_debug.laptop.aws.enable.bundle import CHANNEL_NAME
from remote_debug.laptop.aws.enable.terms import (
    TAGS_MAX,
    EnableError,
    RemoteDebugWarning,
    describe_aws_error,
    role_name,
)

log = logging.getLogger(__name__)

ACTIVATION_FILE = "ssm-activation.json"
# Next to it, no secret: keeps the channel non-empty once the activation file is retired (a restarted
# job downloads its channels again, and SageMaker fails an S3Prefix channel without objects).
NOTE_FILE = "ssm-activation.txt"
NOTE_TEXT = (
    "remote-debug: this channel carried the SSM hybrid activation of a training job (ssm-activation.json).\n"
    "It is deleted once every node of the job has registered, or when the job ends; this note stays so that\n"
    "the channel is never empty.  'remote-debug cleanup' removes both once the job has ended.\n"
)
TAG_JOB = TAG_PREFIX + "job"  # on the activation: the job it was made for
METADATA_ACTIVATION = "remote-debug-activation"  # S3 metadata of both files: the activation they belong to
TAG_ROLE = TAG_PREFIX + "execution-role"  # on the activation: the job's RoleArn (the deregistration scope)
TAG_VALUE_MAX = 256  # SSM's limit
MAX_LIFETIME = timedelta(days=30) - timedelta(hours=1)  # SSM takes up to 30 days; an hour for clock skew
# From CreateTrainingJob to the last node's hook: SageMaker starts the instances (minutes; big GPU
# instances tens of minutes), pulls the image (DLC GPU images are 10-20 GB) and downloads File-mode
# inputs.  Twice the slow end of that; a job that needs longer (huge inputs, a training plan that
# starts later) sets ENV_REGISTRATION_WINDOW on the laptop.
REGISTRATION_WINDOW = timedelta(hours=2)
ENV_REGISTRATION_WINDOW = "REMOTE_DEBUG_HYBRID_REGISTRATION_WINDOW"  # seconds, read by enable()
MIN_REGISTRATION_WINDOW = timedelta(minutes=10)
DEFAULT_MAX_RUNTIME = 86400  # SageMaker's default MaxRuntimeInSeconds
REGISTRATION_LIMIT_MAX = 1000  # botocore's model of CreateActivation
_SUBMIT_DIRECTORY = "sagemaker_submit_directory"  # SDK v2: s3://.../<job>/source/sourcedir.tar.gz

# laptop/aws/ssm.py's ACTIVATION_TIER_SETTING (this package may not import it; a test keeps them equal)
TIER_SETTING = "/ssm/managed-instance/activation-tier"
ADVANCED_TIER = "advanced"

EVENT_SUFFIX = "sagemaker.CreateTrainingJob"
CONTEXT_KEY = "remote_debug_ssm_activation"  # in botocore's per-call context: our activation's id
_IDS = ("remote-debug-hybrid-remember", "remote-debug-hybrid-after-call", "remote-debug-hybrid-after-error")


def instance_count(request: Mapping[str, Any]) -> int:
    """The job's instances, which each register once: the activation's ``RegistrationLimit``."""
    resources = request.get("ResourceConfig") or {}
    count = int(resources.get("InstanceCount") or 0)
    if not count:
        count = sum(int(g.get("InstanceCount") or 0) for g in resources.get("InstanceGroups") or [])
    if count < 1:
        raise EnableError("the request has no ResourceConfig.InstanceCount, which the hybrid transport needs")
    if count > REGISTRATION_LIMIT_MAX:
        raise EnableError(
            f"an SSM activation registers at most {REGISTRATION_LIMIT_MAX} instances; the job has {count}"
        )
    return count


def registration_window(env: Mapping[str, str] | None = None) -> timedelta:
    """:data:`REGISTRATION_WINDOW`, or the laptop's ``REMOTE_DEBUG_HYBRID_REGISTRATION_WINDOW`` (seconds)."""
    raw = (os.environ if env is None else env).get(ENV_REGISTRATION_WINDOW, "").strip()
    if not raw:
        return REGISTRATION_WINDOW
    try:
        window = timedelta(seconds=float(raw))
    except (ValueError, OverflowError):
        window = timedelta(0)
    if not MIN_REGISTRATION_WINDOW <= window <= MAX_LIFETIME:
        raise EnableError(
            f"{ENV_REGISTRATION_WINDOW}={raw[:40]!r} is not a number of seconds from "
            f"{MIN_REGISTRATION_WINDOW.total_seconds():g} to {MAX_LIFETIME.total_seconds():g} (the time the job's "
            "instances may take to start and register with SSM)"
        )
    return window


def lifetime(request: Mapping[str, Any], env: Mapping[str, str] | None = None) -> timedelta:
    """How long the activation stays usable: the shortest time that still lets every node register.

    A node registers as soon as its hook starts, i.e. once SageMaker has started its instance and
    downloaded the image and the inputs: the registration window.  A managed spot job may first wait
    for capacity, as long as ``MaxWaitTimeInSeconds - MaxRuntimeInSeconds`` and still get its whole
    runtime.  The job's runtime itself does not count: a registered instance stays registered after
    its activation expires (or is deleted), and a restarted job has no registration left anyway
    (``RegistrationLimit`` is the instance count).
    """
    stopping = request.get("StoppingCondition") or {}
    runtime = timedelta(seconds=int(stopping.get("MaxRuntimeInSeconds") or DEFAULT_MAX_RUNTIME))
    wait = timedelta(seconds=int(stopping.get("MaxWaitTimeInSeconds") or 0))  # spot: waiting + running
    capacity = max(wait - runtime, timedelta(0))
    return min(registration_window(env) + capacity, MAX_LIFETIME)


def execution_role_tag(request: Mapping[str, Any]) -> str:
    """The job's execution role ARN, as the activation's (and so its instances') ``remote-debug:execution-role``
    tag: the only instances the job's nodes may deregister (``${aws:PrincipalArn}`` in the role's policy)."""
    role = request.get("RoleArn")
    if not isinstance(role, str) or not role.startswith("arn:") or ":role/" not in role:
        raise EnableError("the request has no RoleArn (the job's execution role), which the hybrid transport tags")
    if len(role) > TAG_VALUE_MAX:
        raise EnableError(
            f"the job's RoleArn is {len(role)} characters, over the {TAG_VALUE_MAX} of an SSM tag value: the hybrid "
            "transport tags its activation with it (use a role with a shorter path)"
        )
    return role


def channel_uri(request: Mapping[str, Any]) -> str:
    """The S3 prefix of the request's ``remote-debug`` channel: where ``ssm-activation.json`` goes."""
    default_mode = (request.get("AlgorithmSpecification") or {}).get("TrainingInputMode", "File")
    for channel in request.get("InputDataConfig") or []:
        if channel.get("ChannelName") != CHANNEL_NAME:
            continue
        source = (channel.get("DataSource") or {}).get("S3DataSource") or {}
        uri = source.get("S3Uri")
        if (
            source.get("S3DataType", "S3Prefix") != "S3Prefix"
            or not isinstance(uri, str)
            or not uri.startswith("s3://")
        ):
            raise EnableError(
                f"the {CHANNEL_NAME!r} input channel must be an S3Prefix on s3:// for the hybrid transport "
                "(its ssm-activation.json is written there)"
            )
        if channel.get("InputMode", default_mode) == "Pipe":
            raise EnableError(f"the {CHANNEL_NAME!r} input channel must not be in Pipe mode: the hook reads files")
        return uri
    raise EnableError(
        f"transport='hybrid' hands the job its SSM activation as {ACTIVATION_FILE} in the {CHANNEL_NAME!r} input "
        "channel: pass package_uri='s3://...' (the job's own prefix for the bundle)"
    )


def sdk_v2_channel_uri(request: Mapping[str, Any]) -> str:
    """Where an SDK v2 job's activation goes: next to its uploaded code, else under its output path."""
    submit: Any = (request.get("HyperParameters") or {}).get(_SUBMIT_DIRECTORY)
    try:
        submit = json.loads(submit) if isinstance(submit, str) else submit  # the SDK JSON-encodes them
    except ValueError:
        pass
    if isinstance(submit, str) and submit.startswith("s3://") and "/" in submit[len("s3://") :]:
        return f"{submit.rsplit('/', 1)[0]}/{CHANNEL_NAME}"
    output = (request.get("OutputDataConfig") or {}).get("S3OutputPath")
    if isinstance(output, str) and output.startswith("s3://"):
        return f"{output.rstrip('/')}/{request['TrainingJobName']}/{CHANNEL_NAME}"
    raise EnableError("the job has neither uploaded code nor an s3:// output path to put its SSM activation next to")


def _split(uri: str, name: str = ACTIVATION_FILE) -> tuple[str, str]:
    bucket, _, prefix = uri[len("s3://") :].partition("/")
    return bucket, "/".join(p for p in (prefix.strip("/"), name) if p)


def channel_files(channel: str) -> tuple[str, str, str]:
    """(bucket, activation file key, note key) in the ``remote-debug`` channel at the S3 prefix ``channel``."""
    bucket, key = _split(channel)
    return bucket, key, _split(channel, NOTE_FILE)[1]


def tag_value(tags: Any, key: str) -> str | None:
    for tag in tags or []:
        if isinstance(tag, Mapping) and tag.get("Key") == key:
            value = tag.get("Value")
            return str(value) if value is not None else None
    return None


def with_activation_tag(request: Mapping[str, Any], activation_id: str) -> dict[str, Any]:
    out = dict(request)
    tags = [dict(t) for t in out.get("Tags") or [] if t.get("Key") != TAG_ACTIVATION]
    tags.append({"Key": TAG_ACTIVATION, "Value": activation_id})
    if len(tags) > TAGS_MAX:
        raise EnableError(f"the job would have {len(tags)} tags; SageMaker allows {TAGS_MAX}")
    out["Tags"] = tags
    return out


# --- what this process created and has not handed to a running job yet ------------------------------


@dataclass
class _Created:
    activation_id: str
    job: str
    bucket: str
    key: str
    ssm: Any = field(repr=False)
    s3: Any = field(repr=False)


_lock = threading.Lock()
_pending: dict[str, _Created] = {}


def pending() -> dict[str, str]:
    """Activation id -> job, for the activations not (yet) owned by a created job."""
    with _lock:
        return {a: c.job for a, c in _pending.items()}


def release(activation_id: str, why: str) -> bool:
    """Delete a pending activation of ours and its ``ssm-activation.json``; never raises.

    False when the activation is not pending here (another process's, or its job was created).
    """
    with _lock:
        created = _pending.pop(activation_id, None)
        # a newer activation for the same job may have replaced the file already: keep that one
        file_reused = created is not None and any(
            (c.bucket, c.key) == (created.bucket, created.key) for c in _pending.values()
        )
    if created is None:
        return False
    try:
        created.ssm.delete_activation(ActivationId=activation_id)
        log.info("deleted SSM activation %s of job %s (%s)", activation_id, created.job, why)
    except Exception as exc:
        region = getattr(getattr(created.ssm, "meta", None), "region_name", None) or "<region>"
        log.warning(
            "%s; it expires by itself, or run `aws ssm delete-activation --activation-id %s --region %s`",
            describe_aws_error(exc, f"deleting SSM activation {activation_id} of job {created.job} ({why})"),
            activation_id,
            region,
        )
    if not file_reused:
        for key in (created.key, _note_key(created.key)):
            try:
                created.s3.delete_object(Bucket=created.bucket, Key=key)
            except Exception as exc:
                log.warning("%s", describe_aws_error(exc, f"deleting s3://{created.bucket}/{key}"))
    return True


def adopt(activation_id: str) -> None:
    """An activation made for a job that already exists (a renewal): no CreateTrainingJob will confirm it, and
    none may release it."""
    with _lock:
        _pending.pop(activation_id, None)


def _note_key(activation_key: str) -> str:
    return activation_key[: -len(ACTIVATION_FILE)] + NOTE_FILE


def discard(request: Mapping[str, Any]) -> bool:
    """Delete the activation ``enable()`` made for ``request`` (a job that will not be started after all)."""
    activation_id = tag_value(request.get("Tags"), TAG_ACTIVATION)
    return bool(activation_id) and release(str(activation_id), "discarded")


# --- CreateTrainingJob outcome -----------------------------------------------------------------------


def _remember(params: Mapping[str, Any], context: dict[str, Any] | None = None, **_kwargs: Any) -> None:
    activation_id = tag_value(params.get("Tags"), TAG_ACTIVATION)
    if context is None or not activation_id:
        return
    with _lock:
        ours = activation_id in _pending
    if ours:
        context[CONTEXT_KEY] = activation_id


def _after_call(http_response: Any = None, context: dict[str, Any] | None = None, **_kwargs: Any) -> None:
    activation_id = (context or {}).get(CONTEXT_KEY)
    if not activation_id:
        return
    status = int(getattr(http_response, "status_code", 0) or 0)
    if 200 <= status < 300:
        with _lock:  # the job exists: its nodes register, and deregister when they exit
            _pending.pop(activation_id, None)
    else:
        release(activation_id, f"CreateTrainingJob failed with HTTP {status}")


def _after_call_error(
    exception: BaseException | None = None, context: dict[str, Any] | None = None, **_kwargs: Any
) -> None:
    activation_id = (context or {}).get(CONTEXT_KEY)
    if activation_id:
        release(activation_id, f"CreateTrainingJob failed: {type(exception).__name__ if exception else 'no response'}")


def watch(events: Any) -> None:
    """Delete our activation when the CreateTrainingJob carrying it fails.

    ``events``: a boto3 session's ``events`` (clients created from it later inherit the handlers) or
    a client's ``meta.events``.  Registration is keyed: doing it twice is harmless.  The request is
    read last in ``before-parameter-build``, after ``intercept`` has rewritten it.
    """
    events.register_last(f"before-parameter-build.{EVENT_SUFFIX}", _remember, unique_id=_IDS[0])
    events.register(f"after-call.{EVENT_SUFFIX}", _after_call, unique_id=_IDS[1])
    events.register(f"after-call-error.{EVENT_SUFFIX}", _after_call_error, unique_id=_IDS[2])


def watch_client(sagemaker_client: Any) -> Any:
    """:func:`watch` on a SageMaker client (for raw requests sent through a client made elsewhere)."""
    watch(sagemaker_client.meta.events)
    return sagemaker_client


def watch_all(boto_session: Any = None, clients: Iterable[Any] = ()) -> None:
    if boto_session is not None:
        watch(boto_session.events)
    for client in clients:
        watch_client(client)


# --- the account's instance tier ----------------------------------------------------------------------


def warn_unless_advanced_tier(ssm_client: Any) -> str | None:
    """Warn (``RemoteDebugWarning``) unless Session Manager may reach hybrid managed instances in the
    client's region; returns the tier read, or None when it could not be read (warned too)."""
    region = getattr(ssm_client.meta, "region_name", None) or "<region>"
    fix = (
        f"aws ssm update-service-setting --setting-id {TIER_SETTING} --setting-value {ADVANCED_TIER} "
        f"--region {region} (the advanced-instances tier is charged per instance-hour)"
    )
    try:
        setting = ssm_client.get_service_setting(SettingId=TIER_SETTING)["ServiceSetting"]
        tier = str(setting.get("SettingValue", "")).strip().lower()
    except Exception as exc:  # best effort: the job itself is fine either way
        what = f"reading {TIER_SETTING}"
        warnings.warn(
            f"transport='hybrid': could not check the SSM managed-instance tier ({describe_aws_error(exc, what)}); "
            f"Session Manager reaches the job's mi- instances only with the advanced tier: {fix}",
            RemoteDebugWarning,
            stacklevel=_caller_level(),
        )
        return None
    if tier != ADVANCED_TIER:
        warnings.warn(
            f"transport='hybrid': the SSM managed-instance tier is {tier or 'unset'} in {region}, and Session Manager "
            f"refuses sessions to the job's hybrid (mi-) managed instances below the advanced tier: {fix}",
            RemoteDebugWarning,
            stacklevel=_caller_level(),
        )
    return tier


def _caller_level() -> int:
    """The ``stacklevel`` that attributes a warning to the first frame outside remote_debug (the launcher
    line that called enable(), or fit() for SDK objects), however deep the call came from."""
    level, frame = 1, sys._getframe(1)  # 1: the function calling warnings.warn
    while frame.f_back is not None and frame.f_globals.get("__name__", "").startswith("remote_debug."):
        frame, level = frame.f_back, level + 1
    return level


# --- creating one ------------------------------------------------------------------------------------


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


@dataclass
class Activations:
    """Makes the activation of a job and writes its file; ``ssm`` and ``s3`` are boto3 clients."""

    role: str
    ssm: Any = field(repr=False)
    s3: Any = field(repr=False)
    now: Callable[[], datetime] | None = None  # None: the clock (_utcnow)

    def __post_init__(self) -> None:
        self.role = role_name(self.role)

    @classmethod
    def for_session(cls, role: str, boto_session: Any) -> Activations:
        from botocore.config import Config

        # CreateActivation is not idempotent: no retries beyond throttling and transient errors.
        config = Config(retries={"mode": "standard", "max_attempts": 3}, connect_timeout=10, read_timeout=30)
        return cls(role, boto_session.client("ssm", config=config), boto_session.client("s3", config=config))

    @property
    def region(self) -> str:
        return str(self.ssm.meta.region_name)

    def create(self, request: Mapping[str, Any], *, owner: str) -> str:
        """The activation id, pending until CreateTrainingJob succeeds (see :func:`watch`)."""
        job = str(request["TrainingJobName"])
        bucket, key, note = channel_files(channel_uri(request))  # refusals first: no side effect
        count = instance_count(request)
        expires = (self.now or _utcnow)() + lifetime(request)
        tags = [
            {"Key": TAG_OWNER, "Value": owner},
            {"Key": TAG_JOB, "Value": job},
            {"Key": TAG_ROLE, "Value": execution_role_tag(request)},
        ]
        try:
            made = self.ssm.create_activation(
                Description=f"remote-debug hybrid transport of SageMaker training job {job}"[:256],
                DefaultInstanceName=job,
                IamRole=self.role,
                RegistrationLimit=count,
                ExpirationDate=expires,
                Tags=tags,
            )
        except Exception as exc:
            if isinstance(exc, EnableError):
                raise
            what = f"creating the SSM activation of job {job} (hybrid transport)"
            raise EnableError(describe_aws_error(exc, what)) from None
        activation_id = str(made["ActivationId"])
        body = json.dumps(
            {
                "ActivationId": activation_id,
                "ActivationCode": made["ActivationCode"],
                "Region": self.region,
                "S3Uri": f"s3://{bucket}/{key}",
            }
        ).encode()
        try:
            mine = {METADATA_ACTIVATION: activation_id}
            note_body = NOTE_TEXT.encode()
            self.s3.put_object(Bucket=bucket, Key=note, Body=note_body, ContentType="text/plain", Metadata=mine)
            self.s3.put_object(Bucket=bucket, Key=key, Body=body, ContentType="application/json", Metadata=mine)
        except Exception as exc:
            try:
                self.ssm.delete_activation(ActivationId=activation_id)
            except Exception as cleanup:
                log.warning("%s", describe_aws_error(cleanup, f"deleting SSM activation {activation_id}"))
            try:  # the note alone is no secret, but nothing of a refused job stays behind
                self.s3.delete_object(Bucket=bucket, Key=note)
            except Exception as cleanup:
                log.debug("%s", describe_aws_error(cleanup, f"deleting s3://{bucket}/{note}"))
            raise EnableError(
                describe_aws_error(exc, f"writing the SSM activation of job {job} to s3://{bucket}/{key}")
            ) from None
        with _lock:
            _pending[activation_id] = _Created(activation_id, job, bucket, key, self.ssm, self.s3)
        return activation_id
