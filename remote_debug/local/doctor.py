"""``remote-debug doctor [JOB]``: is this laptop (and that job) ready for debugging on SageMaker?

Every check says what it found and, when it fails, how to fix it.  Checks run in dependency
order and later ones are skipped, not failed, when an earlier one makes them meaningless (no
region -> no credentials check).  The IAM check asks IAM itself (SimulatePrincipalPolicy) about
the caller's effective permissions, including the SSM condition key SageMaker targets are scoped
by, and lists what is missing.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from remote_debug.local import aws, ssm
from remote_debug.local.backends.sagemaker import SageMakerBackend
from remote_debug.local.errors import UserError
from remote_debug.spec import Transport

OK, FAIL, WARN, SKIP = "ok", "fail", "warn", "skip"

# What attach/ssh/proxy need (required) and what launch/enable/stop need (recommended).
REQUIRED_ACTIONS: dict[str, str] = {
    "sagemaker:DescribeTrainingJob": "attach, jobs",
    "sagemaker:ListTrainingJobs": "jobs",
    "sagemaker:ListTags": "per-job transport settings",
    "logs:FilterLogEvents": "reading the nodes' manifests",
    "ssm:StartSession": "connecting (ssh ProxyCommand)",
    "ssm:TerminateSession": "closing sessions",
    "ssm:ResumeSession": "reconnecting dropped sessions",
}
RECOMMENDED_ACTIONS: dict[str, str] = {
    "sagemaker:CreateTrainingJob": "launching debuggable jobs",
    "sagemaker:UpdateTrainingJob": "remote-debug enable JOB",
    "sagemaker:StopTrainingJob": "remote-debug stop JOB",
    "sagemaker:AddTags": "tagging debuggable jobs",
}
POLICY_HINT = "attach the user policy from templates/iam (remote-debug-user.json) to your identity"
ASSUMED_ROLE_RE = re.compile(r"^arn:(aws[a-z-]*):sts::(\d{12}):assumed-role/([^/]+)/.+$")


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
    ) -> None:
        self._clients = clients
        self.which = which
        self.run_command = run
        # a job ARN's region: used unless --region (or injected clients) say otherwise
        self.region = region if not aws.settings().region else None
        self.backend = backend or SageMakerBackend(clients=clients, region=self.region)
        self.checks: list[Check] = []

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
        self.add(Check("region", OK, f"{region} (from {source})", data={"region": region}))
        return True

    def check_credentials(self) -> str | None:
        try:
            identity = self.client("sts").get_caller_identity()
        except UserError as exc:
            self.add(Check("credentials", FAIL, str(exc), "configure AWS access: aws configure / aws sso login"))
            return None
        except Exception as exc:
            if not aws.is_error(exc):
                raise
            self.add(Check("credentials", FAIL, aws.describe_error(exc, "sts GetCallerIdentity"),
                           "configure AWS access: aws configure / aws sso login, or pass --profile"))
            return None
        arn = str(identity["Arn"])
        self.add(Check("credentials", OK, arn, data={"account": identity.get("Account"), "arn": arn}))
        return arn

    def check_plugin(self) -> None:
        try:
            plugin = ssm.find_plugin(self.which)
        except UserError as exc:
            self.add(Check("session-manager-plugin", FAIL, str(exc).removesuffix(f": {ssm.INSTALL_HINT}"),
                           ssm.INSTALL_HINT))
            return
        self.add(Check("session-manager-plugin", OK, f"{plugin.version} at {plugin.path}",
                       data={"version": plugin.version, "path": plugin.path}))

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

    def principal_arn(self, caller_arn: str) -> str | None:
        """The IAM user/role behind the caller (an assumed-role session maps to its role)."""
        match = ASSUMED_ROLE_RE.match(caller_arn)
        if not match:
            return None if caller_arn.endswith(":root") else caller_arn
        partition, account, role = match.groups()
        try:  # the role's ARN carries its path (SSO roles live under /aws-reserved/...)
            return str(self.client("iam").get_role(RoleName=role)["Role"]["Arn"])
        except Exception:
            return f"arn:{partition}:iam::{account}:role/{role}"

    def check_iam(self, caller_arn: str, job: str | None) -> None:
        principal = self.principal_arn(caller_arn)
        if principal is None:
            self.add(Check("iam", OK, "the account root user may do everything"))
            return
        actions = {**REQUIRED_ACTIONS, **RECOMMENDED_ACTIONS}
        target = ssm.native_target(job or "example-job", "algo-1")
        try:
            result = self.client("iam").simulate_principal_policy(
                PolicySourceArn=principal,
                ActionNames=sorted(actions),
                ContextEntries=[{
                    "ContextKeyName": "ssm:resourceTag/aws:ssmmessages:target-id",
                    "ContextKeyValues": [target],
                    "ContextKeyType": "string",
                }],
            )
        except Exception as exc:  # advisory: whatever stops the simulation, the other checks still run
            detail = aws.describe_error(exc, "iam SimulatePrincipalPolicy")
            self.add(Check("iam", WARN, detail,
                           "allow iam:SimulatePrincipalPolicy on yourself to let doctor check permissions"))
            return
        decisions = {r["EvalActionName"]: r["EvalDecision"] for r in result.get("EvaluationResults", [])}
        table = [
            {"action": a, "decision": decisions.get(a, "unknown"), "needed_for": why,
             "required": a in REQUIRED_ACTIONS}
            for a, why in sorted(actions.items())
        ]
        missing = [row["action"] for row in table if row["required"] and row["decision"] != "allowed"]
        optional = [row["action"] for row in table if not row["required"] and row["decision"] != "allowed"]
        data = {"principal": principal, "actions": table}
        if missing:
            self.add(Check("iam", FAIL, f"{principal} lacks {', '.join(missing)}", POLICY_HINT, data))
        elif optional:
            self.add(Check("iam", WARN, f"{principal} lacks {', '.join(optional)} (launch/enable/stop)", POLICY_HINT,
                           data))
        else:
            self.add(Check("iam", OK, f"{principal}: every needed action is allowed", data=data))

    # --- one job --------------------------------------------------------------------------------

    def check_job(self, job: str) -> None:
        try:
            info = self.backend.describe(job)
        except UserError as exc:
            self.add(Check("job", FAIL, str(exc), "check the job name, --region and --profile"))
            return
        transport = info.sagemaker.transport if info.sagemaker else Transport.SSM
        state = f"{info.status} / {info.secondary_status}"
        self.add(Check("job state", OK if info.running else WARN, state,
                       "" if info.running else "only a running job can be debugged",
                       {"status": info.status, "secondary_status": info.secondary_status}))
        if not info.debuggable:
            self.add(Check("debugging enabled", FAIL, str(info.why_not_debuggable),
                           "use remote_debug.enable(...) at launch, or remote-debug enable JOB"))
            return
        enabled = info.sagemaker.remote_debug_enabled if info.sagemaker else None
        self.add(Check("debugging enabled", OK, f"transport {transport}",
                       data={"transport": transport, "remote_debug_config": enabled}))
        if not info.running or info.secondary_status != "Training":
            self.add(Check("ssm target", SKIP, "the job is not Training yet: its SSM target cannot be reached"))
            return
        manifests = self.backend.manifests(job)
        published = sorted(n for n, m in manifests.items() if m is not None and m.sshd_port)
        missing = sorted(n for n in manifests if n not in published)
        self.add(Check("manifests", OK if not missing else FAIL,
                       f"published by {', '.join(published) or 'no node'}" + (f"; missing {', '.join(missing)}"
                                                                               if missing else ""),
                       "" if not missing else "see the node's CloudWatch log for [remote-debug] lines"))
        if transport == Transport.DIRECT:
            self.add(Check("ssm target", SKIP, "direct transport: no SSM"))
            return
        first = published[0] if published else "algo-1"
        manifest = manifests.get(first)
        hybrid_target = manifest.ssm_target if manifest else ""
        target = ssm.native_target(job, first) if transport == Transport.SSM else hybrid_target
        if not target:
            self.add(Check("ssm target", FAIL, f"{first} published no managed instance id",
                           "see the node's log for 'SSM hybrid registration failed'"))
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
        self.check_plugin()
        self.check_openssh()
        if not self.check_region():
            self.add(Check("credentials", SKIP, "needs a region"))
            return
        caller = self.check_credentials()
        if caller:
            self.check_iam(caller, job)
            if job:
                self.check_job(job)


def passed(checks: list[Check]) -> bool:
    return all(c.status != FAIL for c in checks)
