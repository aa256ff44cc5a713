"""What every part of ``enable()`` shares: its error, limits, and how the laptop reaches the job.

The bottom of ``remote_debug/sagemaker``: it imports nothing else from the package but the contract and
the laptop's ``UserError`` and AWS names (the job's tags: ``laptop/aws/clients.py``), so the request core and the
hybrid activation can both build on it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from remote_debug.contract.spec import Transport
from remote_debug.laptop.aws.clients import SAGEMAKER_TRANSPORTS
from remote_debug.laptop.core.errors import EnableError as EnableError

TAGS_MAX = 50  # SageMaker's limit per job
ROLE_MAX = 64
_ROLE_RE = re.compile(r"^[\w+=,.@-]+(/[\w+=,.@-]+)*$")


class RemoteDebugWarning(UserWarning):
    """``enable()`` made the job debuggable, but something outside the request (an account setting)
    will keep the laptop from connecting, or the job will cost more than it says (a keep-alive's billed
    hold).  A ``warnings`` category, so a launcher can turn it into an error
    (``warnings.simplefilter("error", RemoteDebugWarning)``) or silence it."""


def network_isolation_error(setting: str) -> EnableError:
    """The refusal for a job with network isolation (``setting``: how the caller turned it on)."""
    return EnableError(
        f"the job uses network isolation ({setting}), which cuts the container off from every network: no SSM "
        "session (nor any other remote-debug transport) can reach it, so it cannot be debugged; turn network "
        "isolation off for debugging runs"
    )


def direct_needs_vpc(has_vpc: bool) -> None:
    """transport='direct' reaches a node at its address in the job's VPC: a job without one is refused."""
    if not has_vpc:
        raise EnableError(
            "transport='direct' connects to the nodes inside the job's VPC, but the job has no VpcConfig: give it "
            "subnets and security groups (boto3: VpcConfig; SDK v2: subnets=..., security_group_ids=...; "
            "ModelTrainer: Networking(subnets=..., security_group_ids=...)) or use transport='ssm'"
        )


@dataclass(frozen=True)
class JobTransport:
    """How the laptop will reach the job's nodes, chosen with ``enable(transport=...)``: part of the
    job's wiring (the spec's ``transport``), with what the hybrid transport needs besides.  Validated
    on construction, as one line; a str ``kind`` becomes a :class:`~remote_debug.contract.spec.Transport`."""

    kind: Transport = Transport.SSM  # SageMaker's native SSM target
    hybrid_role: str | None = None  # hybrid: the IAM role of the nodes' SSM managed instances

    @classmethod
    def parse(cls, transport: str, hybrid_role: str | None = None) -> JobTransport:
        """From ``enable()``'s keyword arguments."""
        return cls(Transport(_job_transport(transport)), hybrid_role)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", Transport(_job_transport(self.kind)))
        if self.kind == Transport.HYBRID:
            if not self.hybrid_role:
                raise EnableError(
                    "transport='hybrid' needs hybrid_role=...: the IAM role SSM gives the job's managed instances "
                    "(trusting ssm.amazonaws.com, with AmazonSSMManagedInstanceCore; see "
                    "templates/iam/managed-instance-role-trust.json)"
                )
            role_name(self.hybrid_role)
        elif self.hybrid_role is not None:
            raise EnableError(f"hybrid_role applies to transport='hybrid' only (transport is {str(self.kind)!r})")

    @property
    def hybrid(self) -> bool:
        return self.kind == Transport.HYBRID


def _job_transport(value: object) -> str:
    if value not in SAGEMAKER_TRANSPORTS:
        raise EnableError(
            f"transport {str(value)!r} does not reach a SageMaker job: use one of "
            f"{', '.join(SAGEMAKER_TRANSPORTS)} (local jobs: remote-debug launch --local)"
        )
    return str(value)


def role_name(role: str) -> str:
    """CreateActivation's ``IamRole`` (a role name, or ``path/name``); an IAM role ARN is reduced to it."""
    name = str(role).strip()
    if name.startswith("arn:"):
        _, found, name = name.partition(":role/")
        if not found:
            raise EnableError(
                f"hybrid_role {str(role)[:120]!r} is not an IAM role ARN (arn:aws:iam::<account>:role/...)"
            )
    if not name or len(name) > ROLE_MAX or not _ROLE_RE.fullmatch(name):
        raise EnableError(
            f"hybrid_role {str(role)[:120]!r} is not an IAM role name SSM accepts "
            f"(up to {ROLE_MAX} characters: a name or path/name, or the role's ARN)"
        )
    return name


def describe_aws_error(exc: BaseException, what: str) -> str:
    """One line for a failed AWS call (botocore's errors as the laptop describes them), or any other error."""
    from remote_debug.laptop.aws import clients as aws

    return aws.describe_error(exc, what) if aws.is_error(exc) else f"{what}: {type(exc).__name__}: {exc}"
