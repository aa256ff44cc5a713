"""``remote-debug doctor [JOB]``: is this machine ready for debugging (local jobs, and SageMaker's)?

Every check says what it found and, when it fails, how to fix it.  Checks run in dependency
order and later ones are skipped, not failed, when an earlier one makes them meaningless (no
region -> no credentials check).

The local pieces (OpenSSH, the sshd local jobs run, debugpy, torchrun) are always checked.  AWS is
optional: its checks count when asked (``--aws``, a SageMaker job to check, ``--profile``/``--region``);
when AWS is merely configured (AWS variables, ``~/.aws``: what ``jobs`` goes by too) they run as
advice, a failure shown as a warning; otherwise they are shown as skipped.  A machine that only runs
local jobs passes.

The IAM check asks IAM itself (SimulatePrincipalPolicy) about the caller's effective permissions,
each action against the resource it is really called on (the job's ARN, the CloudWatch log group,
the ``AWS-StartSSHSession`` document, the caller's sessions), with the context values the request
would carry and ``templates/iam`` conditions on (``aws:userid``, the owner tag ``enable()`` writes,
``sagemaker:EnableRemoteDebug``, which AWS documents for turning remote debugging on, SSM's
``aws:ssmmessages:*`` session and target tags).  For a given job, ``aws:ResourceTag/...`` are the job's
real tags (ListTags): a job someone else owns, or one nobody tagged, is simulated as what it is.
An action IAM cannot judge without a context value doctor cannot know (``MissingContextValues``: a
condition on a key of the caller's own policies) is reported as such, never as allowed.

The hybrid transport needs one more account setting: Session Manager refuses sessions to hybrid
(``mi-``) managed instances unless the region's instance tier is "advanced" (GetServiceSetting).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from remote_debug.container.node.sshd import ENV_SSHD, SshdError, find_sshd, start_sshd
from remote_debug.contract.spec import Transport
from remote_debug.laptop.aws import clients as aws
from remote_debug.laptop.aws import ssm
from remote_debug.laptop.aws.sagemaker_backend import SageMakerBackend
from remote_debug.laptop.aws.sagemaker_logs import LOG_GROUP
from remote_debug.laptop.core.errors import UserError
from remote_debug.laptop.core.jobinfo import SageMakerJobDetails
from remote_debug.oskit import netns, peer_uid

OK, FAIL, WARN, SKIP = "ok", "fail", "warn", "skip"
ALLOWED, UNDETERMINED = "allowed", "undetermined"  # UNDETERMINED: IAM needs a context value we cannot give


@dataclass(frozen=True)
class Permission:
    """One action doctor simulates, on the resource it is called on (an ARN template: ``{partition}``,
    ``{region}``, ``{account}``, ``{job}``; ``*`` for actions and targets without one)."""

    action: str
    resource: str
    needed_for: str
    required: bool  # attach/ssh/proxy need it; the others are for launch/enable/stop


TRAINING_JOB_ARN = "arn:{partition}:sagemaker:{region}:{account}:training-job/{job}"
# CloudWatch Logs authorizes a log group's actions on "log-group:<name>:*"
LOG_GROUP_ARN = "arn:{partition}:logs:{region}:{account}:log-group:" + LOG_GROUP + ":*"
# AWS-owned documents have no account in their ARN
DOCUMENT_ARN = "arn:{partition}:ssm:{region}::document/" + ssm.DOCUMENT
SESSION_ARN = "arn:{partition}:ssm:{region}:{account}:session/*"
# SageMaker's native target has no documented resource ARN: policies (AWS's examples, templates/iam)
# allow it on "*" by its aws:ssmmessages:target-id tag, which the simulation is given.
NATIVE_TARGET = "*"
PERMISSIONS: tuple[Permission, ...] = (
    Permission("sagemaker:DescribeTrainingJob", TRAINING_JOB_ARN, "attach, jobs", True),
    Permission("sagemaker:ListTrainingJobs", "*", "jobs", True),
    Permission("sagemaker:ListTags", TRAINING_JOB_ARN, "per-job transport settings", True),
    Permission("logs:FilterLogEvents", LOG_GROUP_ARN, "reading the nodes' manifests", True),
    Permission("ssm:StartSession", NATIVE_TARGET, "connecting (ssh ProxyCommand) to the job's node", True),
    Permission("ssm:StartSession", DOCUMENT_ARN, f"connecting: the {ssm.DOCUMENT} document", True),
    Permission("ssm:TerminateSession", SESSION_ARN, "closing your sessions", True),
    Permission("ssm:ResumeSession", SESSION_ARN, "reconnecting your dropped sessions", True),
    Permission("sagemaker:CreateTrainingJob", TRAINING_JOB_ARN, "launching debuggable jobs", False),
    Permission("sagemaker:AddTags", TRAINING_JOB_ARN, "tagging debuggable jobs", False),
    Permission("sagemaker:UpdateTrainingJob", TRAINING_JOB_ARN, "remote-debug enable JOB", False),
    Permission("sagemaker:StopTrainingJob", TRAINING_JOB_ARN, "remote-debug stop JOB", False),
)
EXAMPLE_JOB = "example-job"  # the job doctor simulates without one
# the client key of doctor's trial sshd: a well-formed public key nobody has the private half of (no login happens)
DOCTOR_CLIENT_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJExB6drpej4VU5APPdGydAYq4clP4mmQ5PSEGTtS4BX doctor"
OWNER_TAG_KEYS = (f"aws:RequestTag/{aws.TAG_OWNER}", f"aws:ResourceTag/{aws.TAG_OWNER}")
ENABLE_REMOTE_DEBUG_KEY = "sagemaker:EnableRemoteDebug"  # on CreateTrainingJob/UpdateTrainingJob (AWS's docs)
TARGET_ID_KEY = "ssm:resourceTag/aws:ssmmessages:target-id"
SESSION_ID_KEY = "ssm:resourceTag/aws:ssmmessages:session-id"
POLICY_HINT = "attach templates/iam/user-policy.json to your identity (see templates/iam/README.md)"
AWS_CHECKS = ("session-manager-plugin", "region", "credentials", "iam", "hybrid instance tier")
AWS_SKIPPED = "skipped (local only; --aws to check)"
ASSUMED_ROLE_RE = re.compile(r"^arn:(aws[a-z-]*):sts::(\d{12}):assumed-role/([^/]+)/.+$")
IAM_USER_RE = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:user/(?:.*/)?([^/]+)$")


@dataclass(frozen=True)
class Identity:
    """The caller, from STS GetCallerIdentity."""

    arn: str
    user_id: str  # what IAM policies see as ${aws:userid} (and what enable() tags jobs with)
    account: str

    @property
    def partition(self) -> str:
        return self.arn.split(":", 2)[1] if self.arn.count(":") >= 2 else "aws"


@dataclass
class Check:
    name: str
    status: str
    detail: str
    fix: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


Clients = Callable[[str], Any]
Runner = Callable[[list[str]], "subprocess.CompletedProcess[str]"]


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL)


class Doctor:
    def __init__(
        self,
        *,
        clients: Clients | None = None,
        which: Callable[[str], str | None] = shutil.which,
        run: Runner = _run,
        backend: SageMakerBackend | None = None,
        region: str | None = None,
        check_aws: bool | None = None,
    ) -> None:
        self._clients = clients
        self.which = which
        self.run_command = run
        # Asked for: --aws, injected clients, a job ARN's region, --profile/--region.  Otherwise AWS is
        # still looked at when it is configured at all, but only as advice: a laptop whose ~/.aws
        # serves other work must not fail `doctor` for local jobs.
        self.aws_asked = (
            bool(check_aws)
            or clients is not None
            or region is not None
            or bool(aws.settings().profile or aws.settings().region)
        )
        self.check_aws = check_aws if check_aws is not None else (self.aws_asked or aws.configured())
        # a job ARN's region: used unless --region (or injected clients) say otherwise
        self.region = region if not aws.settings().region else None
        self.backend = backend or SageMakerBackend(clients=clients, region=self.region)
        self.checks: list[Check] = []
        self.found_region = ""  # check_region()'s answer: the region every AWS call of doctor goes to

    def client(self, service: str) -> Any:
        return self._clients(service) if self._clients is not None else aws.client(service, region=self.region)

    def add(self, check: Check) -> Check:
        self.checks.append(check)
        return check

    # --- the laptop -----------------------------------------------------------------------------

    def check_region(self) -> bool:
        if self._clients is not None:  # injected clients carry their region
            region: str | None = str(self.client("sts").meta.region_name)
            source = "the given clients"
        elif self.region:
            region, source = self.region, "the job ARN"
        else:
            region, source = aws.resolve_region()
        if not region:
            self.add(Check("region", FAIL, "no AWS region configured", aws.NO_REGION))
            return False
        self.found_region = region
        self.add(Check("region", OK, f"{region} (from {source})", data={"region": region}))
        return True

    def check_credentials(self) -> Identity | None:
        try:
            identity = self.client("sts").get_caller_identity()
        except UserError as exc:
            self.add(Check("credentials", FAIL, str(exc), "configure AWS access: aws configure / aws sso login"))
            return None
        except Exception as exc:
            if not aws.is_error(exc):
                raise
            self.add(
                Check(
                    "credentials",
                    FAIL,
                    aws.describe_error(exc, "sts GetCallerIdentity"),
                    "configure AWS access: aws configure / aws sso login, or pass --profile",
                )
            )
            return None
        arn = str(identity["Arn"])
        self.add(Check("credentials", OK, arn, data={"account": identity.get("Account"), "arn": arn}))
        return Identity(arn, str(identity.get("UserId", "")), str(identity.get("Account", "")))

    def check_plugin(self) -> None:
        try:
            plugin = ssm.find_plugin(self.which)
        except UserError as exc:
            self.add(
                Check("session-manager-plugin", FAIL, str(exc).removesuffix(f": {ssm.INSTALL_HINT}"), ssm.INSTALL_HINT)
            )
            return
        self.add(
            Check(
                "session-manager-plugin",
                OK,
                f"{plugin.version} at {plugin.path}",
                data={"version": plugin.version, "path": plugin.path},
            )
        )

    def check_openssh(self) -> None:
        client = self.which("ssh")
        if client is None:
            self.add(Check("openssh", FAIL, "ssh not found", "install the OpenSSH client (apt install openssh-client)"))
            return
        try:
            proc = self.run_command([client, "-V"])
        except (OSError, subprocess.SubprocessError) as exc:
            self.add(Check("openssh", FAIL, f"ssh -V failed: {exc}", "reinstall the OpenSSH client"))
            return
        version = (proc.stderr or proc.stdout).strip().splitlines()
        match = re.search(r"OpenSSH_(\d+)\.(\d+)", version[0] if version else "")
        if not match:
            self.add(Check("openssh", WARN, f"not OpenSSH: {version[:1]}", "VS Code Remote-SSH needs OpenSSH"))
        elif (int(match.group(1)), int(match.group(2))) < (7, 6):
            self.add(Check("openssh", FAIL, version[0], "upgrade OpenSSH to 7.6 or newer"))
        else:
            self.add(Check("openssh", OK, version[0]))

    def check_sshd(self) -> None:
        """The OpenSSH server local jobs run (the hook's private sshd, how attach and ssh reach a node)."""
        configured = os.environ.get(ENV_SSHD)
        path = find_sshd()  # the one the hook will start
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            where = f"{ENV_SSHD}={configured}" if configured else "sshd (on PATH, or /usr/sbin/sshd)"
            self.add(
                Check(
                    "sshd",
                    FAIL,
                    f"{where} not found",
                    "install the OpenSSH server (apt install openssh-server): local jobs run their own sshd",
                )
            )
            return
        # Found is not enough: a binary missing a library, or one that refuses the config the hook writes, fails
        # every local job's node.  So start it as the hook does (a throwaway key, a free loopback port) and stop it.
        with tempfile.TemporaryDirectory(prefix="remote-debug-doctor-") as scratch:
            try:
                # (gated as a local job's node gates it, where the system can tell a socket's owner)
                trial = start_sshd(
                    Path(scratch) / "sshd", DOCTOR_CLIENT_KEY, ready_timeout=15.0, uid_gate=peer_uid.supported()
                )
            except (SshdError, OSError) as exc:
                self.add(
                    Check(
                        "sshd",
                        FAIL,
                        f"{path} does not start: {' '.join(str(exc).split())[:300]}",
                        "fix or reinstall the OpenSSH server (apt install --reinstall openssh-server): "
                        "local jobs run their own sshd",
                    )
                )
                return
            trial.stop()
        self.add(Check("sshd", OK, path, data={"path": path}))

    def check_debugpy(self) -> None:
        """debugpy, which every rank of a VS Code (or headless) job listens with."""
        if importlib.util.find_spec("debugpy") is None:
            self.add(Check("debugpy", FAIL, "not installed in this Python", "pip install debugpy"))
            return
        self.add(Check("debugpy", OK, _version("debugpy")))

    def check_torchrun(self) -> None:
        """torch, whose torchrun starts the ranks of a local job with more than one (advisory)."""
        if importlib.util.find_spec("torch") is None:
            self.add(
                Check(
                    "torchrun",
                    WARN,
                    "torch is not installed: local jobs can have one rank per node only",
                    "pip install torch (for launch --local --nproc-per-node N, or --nodes N)",
                )
            )
            return
        self.add(Check("torchrun", OK, f"torch {_version('torch')}"))

    def check_netns(self) -> None:
        """Whether multi-node local jobs get a network namespace per node, as separate instances have."""
        if netns.available():
            self.add(Check("network namespaces", OK, "each node of a multi-node local job gets its own"))
        else:
            self.add(
                Check(
                    "network namespaces",
                    SKIP,
                    "multi-node local jobs share this machine's loopback (namespaces need root and iproute2)",
                )
            )

    def principal_arn(self, caller_arn: str) -> str | None:
        """The IAM user/role behind the caller (an assumed-role session maps to its role)."""
        match = ASSUMED_ROLE_RE.fullmatch(caller_arn)
        if not match:
            return None if caller_arn.endswith(":root") else caller_arn
        partition, account, role = match.groups()
        try:  # the role's ARN carries its path (SSO roles live under /aws-reserved/...)
            return str(self.client("iam").get_role(RoleName=role)["Role"]["Arn"])
        except Exception:
            return f"arn:{partition}:iam::{account}:role/{role}"

    def simulation_context(
        self, caller: Identity, principal: str, job: str, job_tags: dict[str, str] | None = None
    ) -> list[dict[str, Any]]:
        """The context values the real requests carry and our policies condition on.  ``job_tags``: the
        job's real tags; None (no job given) simulates a job tagged as enable() tags the caller's jobs."""
        values: dict[str, str] = {
            "aws:userid": caller.user_id,
            # enable() and adopt tag with the caller's id; "own jobs" are the ones tagged so
            OWNER_TAG_KEYS[0]: caller.user_id,
            TARGET_ID_KEY: ssm.native_target(job, "algo-1"),
            # SSM tags each session with the aws:userid of whoever started it
            SESSION_ID_KEY: caller.user_id,
        }
        tags = {aws.TAG_OWNER: caller.user_id} if job_tags is None else job_tags
        values.update({f"aws:ResourceTag/{k}": v for k, v in tags.items()})
        user = IAM_USER_RE.fullmatch(principal)
        if user:  # only IAM users have an aws:username
            values["aws:username"] = user.group(1)
        entries = [
            {"ContextKeyName": k, "ContextKeyValues": [v], "ContextKeyType": "string"} for k, v in values.items() if v
        ]
        # every remote-debug launch and enable turns it on: what an admin's condition on it would see
        entries.append(
            {"ContextKeyName": ENABLE_REMOTE_DEBUG_KEY, "ContextKeyValues": ["true"], "ContextKeyType": "boolean"}
        )
        return entries

    def job_tags(self, caller: Identity, job: str) -> dict[str, str] | None:
        """The job's real tags (None when ListTags fails: the simulation assumes the caller's own job)."""
        arn = TRAINING_JOB_ARN.format(
            partition=caller.partition, region=self.found_region, account=caller.account, job=job
        )
        try:
            listed = self.client("sagemaker").list_tags(ResourceArn=arn)
        except Exception as exc:
            if not aws.is_error(exc):
                raise
            return None  # ListTags is simulated too: a denial shows there
        return {str(t["Key"]): str(t.get("Value", "")) for t in listed.get("Tags") or []}

    def check_iam(self, caller: Identity, job: str | None) -> None:
        principal = self.principal_arn(caller.arn)
        if principal is None:
            self.add(Check("iam", OK, "the account root user may do everything"))
            return
        names = {
            "partition": caller.partition,
            "region": self.found_region,
            "account": caller.account,
            "job": job or EXAMPLE_JOB,
        }
        rows = [(p, p.resource.format(**names)) for p in PERMISSIONS]
        context = self.simulation_context(
            caller, principal, job or EXAMPLE_JOB, self.job_tags(caller, job) if job else None
        )
        outcomes: dict[tuple[str, str], tuple[str, list[str]]] = {}
        try:
            # One call per resource: a call's ResourceArns apply to every action in it.
            for resource in dict.fromkeys(r for _p, r in rows):
                actions = sorted({p.action for p, r in rows if r == resource})
                result = self.client("iam").simulate_principal_policy(
                    PolicySourceArn=principal,
                    ActionNames=actions,
                    ResourceArns=[resource],
                    ContextEntries=context,
                )
                outcomes.update(_outcomes(result.get("EvaluationResults", []), resource))
        except Exception as exc:  # advisory: whatever stops the simulation, the other checks still run
            detail = aws.describe_error(exc, "iam SimulatePrincipalPolicy") if aws.is_error(exc) else str(exc)
            self.add(
                Check(
                    "iam", WARN, detail, "allow iam:SimulatePrincipalPolicy on yourself to let doctor check permissions"
                )
            )
            return
        table: list[dict[str, Any]] = []
        for permission, resource in rows:
            decision, missing = outcomes.get((permission.action, resource), ("unknown", []))
            table.append(
                {
                    "action": permission.action,
                    "resource": resource,
                    "decision": decision,
                    "missing_context": missing,
                    "needed_for": permission.needed_for,
                    "required": permission.required,
                }
            )
        data = {"principal": principal, "actions": table}
        denied = _names(r for r in table if r["required"] and r["decision"] not in (ALLOWED, UNDETERMINED))
        unknown = [r for r in table if r["decision"] == UNDETERMINED]
        optional = _names(r for r in table if not r["required"] and r["decision"] not in (ALLOWED, UNDETERMINED))
        if denied:
            self.add(Check("iam", FAIL, f"{principal} lacks {', '.join(denied)}", POLICY_HINT, data))
        elif unknown:
            keys = sorted({k for r in unknown for k in r["missing_context"]})
            self.add(
                Check(
                    "iam",
                    WARN,
                    f"IAM cannot tell whether {principal} may {', '.join(_names(unknown))} without the context "
                    f"value(s) {', '.join(keys)}, which your policies' conditions use and doctor cannot know",
                    "check that those conditions hold where you connect from",
                    data,
                )
            )
        elif optional:
            self.add(
                Check("iam", WARN, f"{principal} lacks {', '.join(optional)} (launch/enable/stop)", POLICY_HINT, data)
            )
        else:
            self.add(Check("iam", OK, f"{principal}: every needed action is allowed", data=data))

    def check_activation_tier(self, *, hybrid_job: str | None = None) -> None:
        """Whether Session Manager may reach hybrid (``mi-``) managed instances here: the advanced tier.
        A hybrid job fails without it; without a job it is a warning (only the hybrid transport needs it)."""
        region = self.found_region
        fix = ssm.advanced_tier_fix(region)
        try:
            tier = ssm.activation_tier(self.client("ssm"))
        except Exception as exc:  # advisory, like the IAM check: the other checks still run
            what = f"ssm GetServiceSetting {ssm.ACTIVATION_TIER_SETTING}"
            detail = aws.describe_error(exc, what) if aws.is_error(exc) else f"{what}: {type(exc).__name__}: {exc}"
            self.add(
                Check(
                    "hybrid instance tier",
                    WARN,
                    f"{detail}; cannot tell whether hybrid sessions work",
                    f"allow ssm:GetServiceSetting (templates/iam); the tier is set with: {fix}",
                )
            )
            return
        if tier == ssm.ADVANCED_TIER:
            self.add(Check("hybrid instance tier", OK, f"advanced in {region}", data={"tier": tier}))
            return
        what = f"job {hybrid_job} uses the hybrid transport, but" if hybrid_job else "transport='hybrid' only:"
        self.add(
            Check(
                "hybrid instance tier",
                FAIL if hybrid_job else WARN,
                f"{what} the managed-instance tier is {tier or 'unset'} in {region}, and Session Manager refuses "
                "sessions to hybrid (mi-) managed instances below the advanced tier",
                fix,
                {"tier": tier},
            )
        )

    # --- one job --------------------------------------------------------------------------------

    def check_job(self, job: str) -> None:
        try:
            info = self.backend.describe(job)
        except UserError as exc:
            self.add(Check("job", FAIL, str(exc), "check the job name, --region and --profile"))
            return
        details = info.details_of(SageMakerJobDetails)
        transport = details.transport if details else Transport.SSM
        state = f"{info.status} / {info.secondary_status}"
        self.add(
            Check(
                "job state",
                OK if info.running else WARN,
                state,
                "" if info.running else "only a running job can be debugged",
                {"status": info.status, "secondary_status": info.secondary_status},
            )
        )
        if not info.debuggable:
            self.add(
                Check(
                    "debugging enabled",
                    FAIL,
                    str(info.why_not_debuggable),
                    "use remote_debug.enable(...) at launch, or remote-debug enable JOB",
                )
            )
            return
        details = info.details_of(SageMakerJobDetails)
        enabled = details.remote_debug_enabled if details else None
        self.add(
            Check(
                "debugging enabled",
                OK,
                f"transport {transport}",
                data={"transport": transport, "remote_debug_config": enabled},
            )
        )
        if transport == Transport.HYBRID:
            self.check_activation_tier(hybrid_job=job)
        if not info.running or info.secondary_status != "Training":
            self.add(Check("ssm target", SKIP, "the job is not Training yet: its SSM target cannot be reached"))
            return
        manifests = self.backend.manifests(job)
        published = sorted(n for n, m in manifests.items() if m is not None and m.sshd_port)
        missing = sorted(n for n in manifests if n not in published)
        self.add(
            Check(
                "manifests",
                OK if not missing else FAIL,
                f"published by {', '.join(published) or 'no node'}"
                + (f"; missing {', '.join(missing)}" if missing else ""),
                "" if not missing else "see the node's CloudWatch log for [remote-debug] lines",
            )
        )
        if transport == Transport.DIRECT:
            self.add(Check("ssm target", SKIP, "direct transport: no SSM"))
            return
        first = published[0] if published else "algo-1"
        manifest = manifests.get(first)
        hybrid_target = manifest.ssm_target if manifest else ""
        target = ssm.native_target(job, first) if transport == Transport.SSM else hybrid_target
        if not target:
            self.add(
                Check(
                    "ssm target",
                    FAIL,
                    f"{first} published no managed instance id",
                    "see the node's log for 'SSM hybrid registration failed'",
                )
            )
            return
        port = manifest.sshd_port if manifest and manifest.sshd_port else 22
        client = self.client("ssm")
        try:
            session = ssm.start_session(client, target, port)
        except UserError as exc:
            self.add(Check("ssm target", FAIL, str(exc), "see the IAM check and templates/iam for the execution role"))
            return
        ssm.terminate(client, str(session["SessionId"]))
        self.add(Check("ssm target", OK, f"{target} accepts sessions"))

    # --- all ------------------------------------------------------------------------------------

    def run(self, job: str | None = None) -> list[Check]:
        try:
            self._run(job)
        except Exception as exc:  # an unexpected answer must still leave a report, not a traceback
            detail = aws.describe_error(exc, "doctor") if aws.is_error(exc) else f"{type(exc).__name__}: {exc}"
            self.add(Check("doctor", FAIL, " ".join(detail.split()), "run again; report it if it persists"))
        return self.checks

    def _run(self, job: str | None) -> None:
        self.check_openssh()
        self.check_sshd()
        self.check_debugpy()
        self.check_torchrun()
        self.check_netns()
        if not self.check_aws and not job:
            for name in AWS_CHECKS:
                self.add(Check(name, SKIP, AWS_SKIPPED))
            return
        first_aws = len(self.checks)
        try:
            self._run_aws(job)
        finally:
            if not (self.aws_asked or job):
                for check in self.checks[first_aws:]:
                    if check.status == FAIL:
                        check.status = WARN
                        check.fix = "; ".join(part for part in (check.fix, "--aws makes this a failure") if part)

    def _run_aws(self, job: str | None) -> None:
        self.check_plugin()
        if not self.check_region():
            self.add(Check("credentials", SKIP, "needs a region"))
            return
        caller = self.check_credentials()
        if caller:
            self.check_iam(caller, job)
            if job:
                self.check_job(job)  # checks the tier for a hybrid job
            else:
                self.check_activation_tier()


def _outcomes(results: Iterable[Mapping[str, Any]], resource: str) -> dict[tuple[str, str], tuple[str, list[str]]]:
    """(action, resource) -> (decision, missing context keys) from SimulatePrincipalPolicy's results.

    With ResourceArns, IAM reports per resource (``ResourceSpecificResults``, where it also lists the
    missing context values); for "*" at the top.  A decision that depends on a missing context value
    is not one: unless a Deny applies anyway, it is ``undetermined``."""
    out = {}
    for result in results:
        decision = str(result.get("EvalDecision", "unknown"))
        missing = [str(k) for k in result.get("MissingContextValues") or []]
        for specific in result.get("ResourceSpecificResults") or []:
            if specific.get("EvalResourceName") == resource:
                decision = str(specific.get("EvalResourceDecision", decision))
                missing += [str(k) for k in specific.get("MissingContextValues") or []]
        missing = sorted(set(missing))
        if missing and decision != "explicitDeny":
            decision = UNDETERMINED
        out[(str(result.get("EvalActionName")), resource)] = (decision, missing)
    return out


def _names(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """The actions of ``rows`` (once each; StartSession has two rows: the node and the document)."""
    return list(dict.fromkeys(str(r["action"]) for r in rows))


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "installed (version unknown)"


def passed(checks: list[Check]) -> bool:
    return all(c.status != FAIL for c in checks)
