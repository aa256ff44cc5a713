"""SageMakerBackend: real training jobs, through the user's own AWS identity.

- ``describe``: DescribeTrainingJob (+ ListTags once) mapped onto :class:`JobInfo`: SageMaker's own
  TrainingJobStatus / SecondaryStatus, nodes ``algo-1..N`` from the resource config (instance
  groups included), and whether the job is debuggable, with the reason when it is not.
- ``manifests``: the nodes' manifest lines from CloudWatch Logs (``sagemaker_logs``), each checked
  against the job's secret: derived from this machine's key for the job (``keys.job_secret``), or,
  without that key, read from the job's Environment (the same trust: whoever may describe the job).
  Lines that fail are dropped, with one warning per job (docs/SECURITY.md).
- ``relay``: the ProxyCommand's byte stream, per the job's transport: ``ssm`` (SageMaker's native
  remote-debug target), ``hybrid`` (the node's own ``mi-`` managed instance) or ``direct`` (the
  node's VPC address through the user's bastion).

The ProxyCommand runs in a fresh process, possibly started by an IDE with another environment
than the ``attach`` that wrote the ssh entry.  So ``attach`` leaves a small hint per job in the
state dir (region, profile, transport, bastion, the nodes' addresses): the proxy then needs no
DescribeTrainingJob before starting its session, and uses the same account and region as attach.

Transport per job: the tag ``remote-debug:transport`` if set, else the spec's transport in the job
environment, else ``ssm``.  Direct: the bastion comes from the tag ``remote-debug:bastion`` or
``REMOTE_DEBUG_BASTION`` (``[user@]host[:port]``, as for ssh's ProxyJump).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, BinaryIO

from remote_debug.contract import spec
from remote_debug.contract.job_secret import SecretError, check_job_secret
from remote_debug.laptop.aws import clients as aws
from remote_debug.laptop.aws import ssm
from remote_debug.laptop.aws.access import access_error
from remote_debug.laptop.aws.sagemaker_logs import LOG_GROUP, ManifestLog
from remote_debug.laptop.aws.sagemaker_output import CloudWatchNodeOutput
from remote_debug.laptop.core import keys
from remote_debug.laptop.core.backend import Backend, Capabilities
from remote_debug.laptop.core.errors import AwsError, UnknownJobError, UserError
from remote_debug.laptop.core.jobinfo import TERMINAL, JobInfo, JobStatus, SageMakerJobDetails
from remote_debug.laptop.core.paths import StatePaths, private_dir
from remote_debug.oskit import osutil

ENV_BASTION = "REMOTE_DEBUG_BASTION"
# Secondary statuses during which the platform, not the job, is busy (instances, image, data).
PROVISIONING = (
    "Starting",
    "Pending",
    "LaunchingMLInstances",
    "PreparingTrainingStack",
    "Downloading",
    "DownloadingTrainingImage",
    "Restarting",
)
RECENT = timedelta(days=1)
LIST_LIMIT = 25
HINT_VERSION = 1

ClientFactory = Callable[[str], Any]
log = logging.getLogger(__name__)


def nodes_of(resource_config: dict[str, Any]) -> list[str]:
    """SageMaker names hosts algo-1..N across all instance groups."""
    count = int(resource_config.get("InstanceCount") or 0)
    if not count:
        count = sum(int(g.get("InstanceCount") or 0) for g in resource_config.get("InstanceGroups") or [])
    return [f"algo-{i}" for i in range(1, max(count, 1) + 1)]


def _timestamp(value: Any) -> float | None:
    return value.timestamp() if isinstance(value, datetime) else None


def training_job_status(value: Any) -> tuple[JobStatus, str]:
    """DescribeTrainingJob's TrainingJobStatus (absent: InProgress), and a note when it is a value this version
    does not know.  Such a value reads as InProgress: not terminal, so attach keeps watching and a later known
    status ends the job (reading it as Failed would refuse to attach to a live job and invent an exit code)."""
    raw = JobStatus.IN_PROGRESS.value if value is None else str(value)
    try:
        return JobStatus(raw), ""
    except ValueError:
        return JobStatus.IN_PROGRESS, f"unknown TrainingJobStatus {raw[:80]!r} (read as InProgress)"


def job_info(job: str, resp: dict[str, Any], tags: dict[str, str], region: str) -> JobInfo:
    status, unknown_status = training_job_status(resp.get("TrainingJobStatus"))
    secondary = str(resp.get("SecondaryStatus", ""))
    env = resp.get("Environment") or {}
    enabled = bool((resp.get("RemoteDebugConfig") or {}).get("EnableRemoteDebug"))
    asked = tags.get(aws.TAG_TRANSPORT) or env.get(spec.ENV_TRANSPORT) or spec.Transport.SSM
    transport = spec.Transport(asked) if asked in aws.SAGEMAKER_TRANSPORTS else spec.Transport.SSM
    why: str | None = None
    if spec.ENV_VERSION not in env and not any(k.startswith(aws.TAG_PREFIX) for k in tags):
        why = (
            f"job {job} was not started with remote-debug (its environment has no {spec.ENV_VERSION}): "
            "start it through remote_debug.enable(...)"
        )
    elif transport == spec.Transport.SSM and not enabled:
        why = (
            f"job {job} does not have SageMaker remote debugging enabled (RemoteDebugConfig.EnableRemoteDebug "
            f"is off): run 'remote-debug enable {job}' while it is Downloading or Training"
        )
    elif transport == spec.Transport.SSM and resp.get("EnableNetworkIsolation"):
        why = (
            f"job {job} runs with network isolation, which cuts the container off from every network (no SSM "
            "session or other transport reaches it): relaunch it without EnableNetworkIsolation to debug it"
        )
    transitions = resp.get("SecondaryStatusTransitions") or []
    message = str(transitions[-1].get("StatusMessage", "")) if transitions else ""
    message = "; ".join(m for m in (unknown_status, message) if m)
    return JobInfo(
        name=job,
        backend="sagemaker",
        status=status,
        secondary_status=secondary,
        nodes=nodes_of(resp.get("ResourceConfig") or {}),
        nproc_per_node=0,  # unknown until a rank reports the world size
        created=_timestamp(resp.get("CreationTime")) or 0.0,
        ended=_timestamp(resp.get("TrainingEndTime")),
        exit_code={JobStatus.COMPLETED: 0, JobStatus.FAILED: 1}.get(status),
        failure_reason=resp.get("FailureReason"),
        debuggable=why is None,
        why_not_debuggable=why,
        status_message=message,
        provisioning=status == JobStatus.IN_PROGRESS and secondary in PROVISIONING,
        details=SageMakerJobDetails(
            arn=resp.get("TrainingJobArn"),
            region=region,
            transport=transport,
            remote_debug_enabled=enabled,
            instance_type=(resp.get("ResourceConfig") or {}).get("InstanceType"),
        ),
    )


@dataclass
class JobHint:
    """What the proxy needs about a job, written by attach (no secrets: addresses and names)."""

    job: str
    region: str
    profile: str | None
    transport: spec.Transport
    bastion: str | None = None
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    version: int = HINT_VERSION


# [user@]host[:port]: a user, then a DNS name, an IPv4 or a bracketed IPv6 address; neither may
# start with "-" (ssh would read an option) nor hold a shell metacharacter (OpenSSH before 9.6 hands
# the host to a user's ProxyCommand through a shell).
_BASTION_RE = re.compile(
    r"(?:[A-Za-z0-9_][A-Za-z0-9._+-]*@)?(?:[A-Za-z0-9_][A-Za-z0-9._-]*|\[[0-9A-Fa-f:.]+\])(?::\d+)?"
)


def bastion_argv(bastion: str) -> list[str]:
    """``[user@]host[:port]`` -> ssh arguments naming the jump host, after ``--``.

    The value comes from a job tag anyone who may tag the job can set: one starting with ``-``
    would be an ssh option (``-oProxyCommand=...`` runs a command here), so it is refused, and the
    ``--`` keeps ssh from reading the destination as an option whatever it holds.
    """
    if not _BASTION_RE.fullmatch(bastion):
        raise UserError(
            f"bad bastion {bastion[:80]!r} (tag {aws.TAG_BASTION} or {ENV_BASTION}): use [user@]host[:port], "
            "letters, digits, '.', '_' and '-', not starting with '-'"
        )
    host, sep, port = bastion.rpartition(":")
    if sep and port.isdigit() and host and "]" not in port:
        return ["-p", port, "--", host]
    return ["--", bastion]


class SageMakerBackend(Backend):
    name = "sagemaker"
    capabilities = Capabilities(runs_here=False, remote=True)

    def __init__(
        self,
        paths: StatePaths | None = None,
        *,
        clients: ClientFactory | None = None,
        cache_seconds: float = 1.0,
        log_interval: float = 2.0,
        region: str | None = None,
    ) -> None:
        self.paths = paths or StatePaths.default()
        self._clients = clients
        # a training-job ARN's region: this backend's default (an explicit --region still wins),
        # without touching the process-wide AWS settings
        self.region = region
        self.cache_seconds = cache_seconds  # attach polls every 0.3 s; DescribeTrainingJob need not
        self.log_interval = log_interval
        self._described: dict[str, tuple[float, dict[str, Any]]] = {}
        self._tags: dict[str, dict[str, str]] = {}
        self._logs: dict[str, ManifestLog] = {}
        self._warned: set[str] = set()  # jobs whose refused manifest lines were reported (once per job)
        self._world: dict[str, int] = {}
        self._retired: set[str] = set()  # hybrid jobs whose activation this backend has retired
        self._renewed: set[str] = set()  # hybrid jobs whose expired activation this backend looked at

    # --- clients --------------------------------------------------------------------------------

    def client(self, service: str, profile: str | None = None, region: str | None = None) -> Any:
        if self._clients is not None:
            return self._clients(service)
        try:
            return aws.client(service, profile_name=profile, region=region or aws.settings().region or self.region)
        except Exception as exc:  # e.g. an SSO profile without sso_region: a broken config, not a traceback
            if not aws.is_error(exc):
                raise
            raise access_error(exc, f"AWS {service} client") from None

    @classmethod
    def create(cls, paths: StatePaths | None = None, *, region: str | None = None) -> SageMakerBackend:
        return cls(paths, region=region)

    def available(self) -> bool:
        """Cheap: whether AWS is configured at all (no network, no boto3)."""
        return self._clients is not None or self.region is not None or aws.configured()

    def no_such_job(self, job: str) -> str:
        if not self.available():
            return "AWS is not configured to look for a SageMaker job (pass --region / --profile, or set AWS_REGION)"
        # Say where SageMaker was asked: a launcher that pins its own region (boto3.Session(region_name=...))
        # puts the job where a plain shell does not look.
        region, source = (self.region, "the ARN") if self.region else aws.resolve_region()
        where = f"region {region} (from {source}), profile {aws.profile() or 'default'}" if region else "your region"
        return (
            f"no SageMaker training job by that name in {where}; a job launched in another region needs "
            "--region REGION (or AWS_REGION)"
        )

    # --- queries --------------------------------------------------------------------------------

    def _raw(self, job: str) -> dict[str, Any]:
        cached = self._described.get(job)
        now = time.monotonic()
        if cached and (cached[1].get("TrainingJobStatus") in TERMINAL or now - cached[0] < self.cache_seconds):
            return cached[1]
        sagemaker = self.client("sagemaker")
        try:
            resp: dict[str, Any] = sagemaker.describe_training_job(TrainingJobName=job)
        except Exception as exc:
            if not aws.is_error(exc):
                raise
            message = str(getattr(exc, "response", {}).get("Error", {}).get("Message", ""))
            # AWS says "Requested resource not found.", moto "Could not find training job ..."
            if aws.error_code(exc) in ("ValidationException", "ResourceNotFound") and re.search(
                r"not found|could not find", message, re.IGNORECASE
            ):
                raise UnknownJobError(
                    f"unknown job {job!r}: no local job, and no SageMaker training job by that name in "
                    f"{sagemaker.meta.region_name} (check --region / --profile)"
                ) from None
            raise AwsError(aws.describe_error(exc, f"describing SageMaker job {job}")) from None
        self._described[job] = (now, resp)
        return resp

    def _job_tags(self, job: str, arn: str | None) -> dict[str, str]:
        if job not in self._tags:
            tags: dict[str, str] = {}
            if arn:
                try:  # a user allowed to describe but not to list tags still gets a useful answer
                    listed = self.client("sagemaker").list_tags(ResourceArn=arn)
                    tags = {t["Key"]: t["Value"] for t in listed.get("Tags", [])}
                except Exception as exc:
                    if not aws.is_error(exc):
                        raise
            self._tags[job] = tags
        return self._tags[job]

    def has_job(self, job: str) -> bool:
        if self._hint_path(job).exists():
            return True
        if not self.available():
            return False
        try:
            self._raw(job)
        except UnknownJobError:
            return False
        return True

    def describe(self, job: str) -> JobInfo:
        return self._describe(job)[0]

    def _describe(self, job: str) -> tuple[JobInfo, dict[str, Any]]:
        resp = self._raw(job)
        region = str(self.client("sagemaker").meta.region_name)
        info = job_info(job, resp, self._job_tags(job, resp.get("TrainingJobArn")), region)
        world = self._world.get(job)
        if world and info.nodes:
            info.nproc_per_node = max(1, world // len(info.nodes))
        return info, resp

    def list_jobs(self) -> list[JobInfo]:
        """Debuggable jobs: every one in progress, and the most recent of the last day."""
        sagemaker = self.client("sagemaker")
        names: list[str] = []
        since = datetime.now(timezone.utc) - RECENT
        try:
            for query in (
                {"StatusEquals": JobStatus.IN_PROGRESS.value},
                {"CreationTimeAfter": since},
            ):
                page = sagemaker.list_training_jobs(
                    SortBy="CreationTime", SortOrder="Descending", MaxResults=LIST_LIMIT, **query
                )
                names += [s["TrainingJobName"] for s in page.get("TrainingJobSummaries", [])]
        except Exception as exc:
            if not aws.is_error(exc):
                raise
            raise access_error(exc, "listing SageMaker training jobs") from None
        jobs: list[JobInfo] = []
        for name in list(dict.fromkeys(names))[:LIST_LIMIT]:
            try:
                info = self.describe(name)
            except UnknownJobError:
                continue
            if info.debuggable:
                jobs.append(info)
        return sorted(jobs, key=lambda j: j.created)

    def manifests(self, job: str) -> dict[str, spec.NodeManifest | None]:
        info, resp = self._describe(job)
        reader = self._logs.get(job)
        if reader is None:
            reader = self._logs[job] = ManifestLog(
                lambda: self.client("logs"), job, min_interval=self.log_interval, secret=self._secret(job, resp)
            )
        # Nothing of ours is older than the job's start: the reader need not scan the log before it.
        # Until training has started (no TrainingStartTime yet), the job's creation bounds it.
        reader.since = _timestamp(resp.get("TrainingStartTime")) or _timestamp(resp.get("CreationTime"))
        reader.created = _timestamp(resp.get("CreationTime"))  # and nothing older than its creation is the job's
        reader.nodes = info.nodes
        merged = reader.manifests()
        if reader.refused and job not in self._warned:
            self._warned.add(job)
            if reader.secret is None:
                log.warning(
                    "cannot trust any manifest line of job %s: this machine has no key for it (%s) and its "
                    "environment no %s; attach from the machine that launched it",
                    job,
                    self.paths.job_key(job),
                    spec.ENV_JOB_SECRET,
                )
            else:
                log.warning("%s", reader.refusal_summary())
        out: dict[str, spec.NodeManifest | None] = {node: merged.get(node) for node in info.nodes}
        out.update({node: m for node, m in merged.items() if node not in out})
        world = next((r.world_size for m in merged.values() for r in m.ranks), 0)
        if world:
            self._world[job] = world
        self._renew_activation(job, info, resp, out)
        self._retire_activation(job, info, resp, out)
        self._save_hint(job, info, out)
        return out

    def node_output(self, job: str) -> CloudWatchNodeOutput:
        _, resp = self._describe(job)
        return CloudWatchNodeOutput(lambda: self.client("logs"), job, created=_timestamp(resp.get("CreationTime")))

    def waiting_for(self, job: str) -> str:
        """The log group, stream prefix, region and profile the manifests are read from, and what was seen: a job
        launched in another region than the one asked (a launcher's own ``region_name``) shows here."""
        reader = self._logs.get(job)
        region = self.client("logs").meta.region_name
        profile = aws.profile() or "default"
        seen = reader.seen() if reader is not None else "not read yet"
        return (
            f"the nodes' manifest lines in CloudWatch Logs group {LOG_GROUP}, streams {job}/..., region {region}, "
            f"profile {profile}; seen: {seen}"
        )

    def _renew_activation(
        self, job: str, info: JobInfo, resp: dict[str, Any], manifests: dict[str, spec.NodeManifest | None]
    ) -> None:
        """A hybrid job that waited in Pending past its activation's expiry gets a new one before its nodes read it
        (:mod:`remote_debug.laptop.aws.enable.hybrid_renewal`); once per job, and never at the cost of the attach."""
        if (
            job in self._renewed
            or (details := info.details_of(SageMakerJobDetails)) is None
            or details.transport != spec.Transport.HYBRID
        ):
            return
        if info.status in TERMINAL or any(m is not None and m.ssm_target for m in manifests.values()):
            return
        from remote_debug.laptop.aws.enable.hybrid_renewal import renew_if_stale, waited_for_capacity

        if not waited_for_capacity(resp):
            return
        self._renewed.add(job)
        try:
            renew_if_stale(
                resp,
                self._job_tags(job, resp.get("TrainingJobArn")),
                ssm=self.client("ssm"),
                s3=self.client("s3"),
                sagemaker=self.client("sagemaker"),
            )
        except Exception as exc:
            log.warning(
                "could not renew the expired SSM activation of job %s (its nodes cannot register): %s", job, exc
            )
        self._tags.pop(job, None)  # the activation tag may have changed

    def _retire_activation(
        self, job: str, info: JobInfo, resp: dict[str, Any], manifests: dict[str, spec.NodeManifest | None]
    ) -> None:
        """A hybrid job's SSM activation (and the file holding its code) is of no use once every node
        registered, or once the job ended: delete them then, once per job, rather than let them live
        until they expire.  The node may have done it already (with the retire policy); never raises."""
        if (
            job in self._retired
            or (details := info.details_of(SageMakerJobDetails)) is None
            or details.transport != spec.Transport.HYBRID
        ):
            return
        if info.status not in TERMINAL and not all(m is not None and m.ssm_target for m in manifests.values()):
            return
        from remote_debug.laptop.aws.enable.leftovers import retire_job

        self._retired.add(job)
        try:  # housekeeping: it must never cost the user the manifests (or the attach) it rides on
            retire_job(
                job, resp, self._job_tags(job, resp.get("TrainingJobArn")), ssm=self.client("ssm"), s3=self.client("s3")
            )
        except Exception as exc:
            log.warning("could not retire the SSM activation of job %s (remote-debug cleanup will): %s", job, exc)

    def _secret(self, job: str, resp: dict[str, Any]) -> str | None:
        """The job's secret: from this machine's key for the job, else from the job's Environment (None:
        neither, and no manifest line of the job can be trusted)."""
        try:
            return keys.job_secret(self.paths.job_key(job))
        except OSError:
            pass
        try:
            return check_job_secret(str((resp.get("Environment") or {}).get(spec.ENV_JOB_SECRET, "")))
        except SecretError:
            return None

    # --- control --------------------------------------------------------------------------------

    def stop(self, job: str) -> JobInfo:
        info = self.describe(job)
        if info.status in TERMINAL:
            return info
        try:
            self.client("sagemaker").stop_training_job(TrainingJobName=job)
        except Exception as exc:
            if not aws.is_error(exc):
                raise
            raise AwsError(aws.describe_error(exc, f"stopping SageMaker job {job}")) from None
        self._described.pop(job, None)
        return self.describe(job)

    # --- the hint for the proxy -----------------------------------------------------------------

    def _hint_path(self, job: str) -> Path:
        return self.paths.sagemaker_hint(job)

    def _make_hint(self, job: str, info: JobInfo) -> JobHint:
        tags = self._tags.get(job, {})
        details = info.details_of(SageMakerJobDetails)
        assert details is not None, "job_info() fills it"
        return JobHint(
            job=job,
            region=details.region,
            profile=aws.profile(),
            transport=details.transport,
            bastion=tags.get(aws.TAG_BASTION) or os.environ.get(ENV_BASTION) or None,
        )

    def _save_hint(self, job: str, info: JobInfo, manifests: dict[str, spec.NodeManifest | None]) -> None:
        hint = self._make_hint(job, info)
        hint.nodes = {
            node: {"sshd_host": m.sshd_host, "sshd_port": m.sshd_port, "ssm_target": m.ssm_target}
            for node, m in manifests.items()
            if m is not None
        }
        text = json.dumps(asdict(hint), indent=2, sort_keys=True) + "\n"
        path = self._hint_path(job)
        try:
            if path.read_text() == text:
                return
        except OSError:
            pass
        private_dir(path.parent)
        osutil.atomic_write_text(path, text, mode=0o600)

    def load_hint(self, job: str) -> JobHint | None:
        try:
            data = json.loads(self._hint_path(job).read_text())
            if data.get("version") != HINT_VERSION:
                return None
            hint = JobHint(**data)
            hint.transport = spec.Transport(hint.transport)  # ValueError: not ours, or from a future version
            return hint
        except (OSError, ValueError, TypeError):
            return None

    # --- the ProxyCommand -----------------------------------------------------------------------

    def relay(self, job: str, node: str, port: int, stdin: BinaryIO, stdout: BinaryIO) -> int:
        hint = self.load_hint(job)
        if hint is None or (hint.transport != spec.Transport.SSM and node not in hint.nodes):
            self.manifests(job)  # first use without attach (or a node that published later)
            hint = self.load_hint(job)
        if hint is None:
            raise UserError(f"cannot reach job {job}: its nodes have not published a manifest yet")
        explicit = aws.settings()
        profile = explicit.profile or hint.profile
        region = explicit.region or hint.region
        if hint.transport == spec.Transport.DIRECT:
            return self._relay_direct(hint, node, port, stdin, stdout)
        if hint.transport == spec.Transport.HYBRID:
            target = str(hint.nodes.get(node, {}).get("ssm_target") or "")
            if not target:
                raise UserError(
                    f"node {node} of job {job} has no SSM managed instance id (hybrid transport): see the "
                    "node's log for 'SSM hybrid registration failed'"
                )
        else:
            target = ssm.native_target(job, node)
        client = self.client("ssm", profile, region)
        return ssm.run_session(client, target, port, stdin, stdout, profile=profile or "")

    def _relay_direct(self, hint: JobHint, node: str, port: int, stdin: BinaryIO, stdout: BinaryIO) -> int:
        """``ssh -W <node address>:<port> <bastion>``: what OpenSSH's ProxyJump runs itself.

        Why not ``ProxyJump`` in the Host entry: our own tunnels (paramiko) speak ProxyCommand
        only, and one ProxyCommand for every transport keeps the IDE's OpenSSH and the tunnels on
        the same path to the same pinned key.
        """
        bastion = hint.bastion or os.environ.get(ENV_BASTION)
        if not bastion:
            raise UserError(
                f"job {hint.job} uses the direct transport but no bastion is known: tag the job with "
                f"{aws.TAG_BASTION}=[user@]host[:port] or set {ENV_BASTION}"
            )
        address = str(hint.nodes.get(node, {}).get("sshd_host") or "")
        if not address or address.startswith("127."):
            raise UserError(f"node {node} of job {hint.job} did not publish a VPC address for its sshd")
        client = shutil.which("ssh")
        if client is None:
            raise UserError("OpenSSH client 'ssh' not found: install it (apt install openssh-client)")
        argv = [client, "-W", f"{address}:{port}", *bastion_argv(bastion)]
        return subprocess.run(argv, stdin=stdin, stdout=stdout, check=False).returncode
