"""What a laptop command knows about a job, whatever its backend: :class:`JobInfo` and its parts.

``jobs --json``, ``launch --json`` and ``stop --json`` print a :class:`JobInfo`; the VS Code extension's
type for it is generated from here (``events_typescript.py``).  Stdlib + the contract only, so the event
schema and its generator can import it without loading any backend (boto3, paramiko, cryptography).
"""

from __future__ import annotations

import enum
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from remote_debug.contract.spec import (
    ContractError,
    NodeManifest,
    RankState,
    StrEnum,
    Transport,
    failure_order,
    format_rank_ranges,
    held_phrase,
    held_with_phrase,
    kept_alive_phrase,
    read_node_manifest,
    root_cause,
)


class JobStatus(StrEnum):
    """A job's status: SageMaker's TrainingJobStatus (local jobs mirror it); ``secondary_status`` adds the
    detail (Starting, Downloading, Training, ...)."""

    IN_PROGRESS = "InProgress"
    COMPLETED = "Completed"
    FAILED = "Failed"
    STOPPING = "Stopping"
    STOPPED = "Stopped"


# The job has ended.  A frozenset of StrEnum members also matches the plain API strings (same hash and
# equality as their values), e.g. a cached DescribeTrainingJob response.
TERMINAL: frozenset[JobStatus] = frozenset({JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.STOPPED})


@dataclass(frozen=True)
class JobRef:
    """A job as the user named it: its name, and the region of a training-job ARN if one was given
    (which then applies to this job only, unless --region says otherwise)."""

    name: str
    region: str | None = None


class Isolation(StrEnum):
    """How the nodes of a job on this machine are kept apart."""

    NETNS = "netns"  # every node in its own network namespace, reached only through the relay (as root)
    LOOPBACK = "loopback"  # all nodes on this machine's loopback


@dataclass
class PlatformDetails:
    """What one platform knows of a job beyond :class:`JobInfo`'s common fields (``JobInfo.details``).

    A platform's details are a subclass registered with :func:`platform_details` under its JSON key:
    ``jobs --json`` prints one key per registered platform (that job's details, the others null), the shape
    the extension's generated types have always read.  A new platform adds its class here and registers it;
    JobInfo itself does not change."""

    PLATFORM: ClassVar[str] = ""


PLATFORM_DETAILS: dict[str, type[PlatformDetails]] = {}  # JSON key -> details class, in the JSON's order
_Details = TypeVar("_Details", bound=PlatformDetails)


def platform_details(cls: type[_Details]) -> type[_Details]:
    """Register ``cls`` (a :class:`PlatformDetails` dataclass) under its ``PLATFORM`` key."""
    if not cls.PLATFORM or cls.PLATFORM in PLATFORM_DETAILS:
        raise ValueError(f"{cls.__name__}: a platform's details need a PLATFORM key of their own")
    PLATFORM_DETAILS[cls.PLATFORM] = cls
    return cls


@platform_details
@dataclass
class MachineJobDetails(PlatformDetails):
    """A job of this machine (``launch --local``)."""

    PLATFORM: ClassVar[str] = "machine"

    job_dir: str
    isolation: Isolation
    node_netns: dict[str, str] = field(default_factory=dict)
    node_addresses: dict[str, str] = field(default_factory=dict)


@platform_details
@dataclass
class SageMakerJobDetails(PlatformDetails):
    """A SageMaker training job."""

    PLATFORM: ClassVar[str] = "sagemaker"

    arn: str | None
    region: str
    transport: Transport  # SSM, HYBRID or DIRECT (never LOCAL)
    remote_debug_enabled: bool  # RemoteDebugConfig.EnableRemoteDebug
    instance_type: str | None = None


@dataclass
class HeldRank:
    """A rank that died of an uncaught exception and is kept alive for a post-mortem debugger
    (``launch --hold-on-failure``): attach to it before ``seconds_left`` runs out."""

    rank: int
    node: str
    seconds_left: int | None  # None: its hook did not say (an older one)
    error: str | None  # the exception line (of ``held_for``'s, for a rank held with it)
    # its failure came first in the job (torchelastic's "root cause"): listed first
    root_cause: bool = False
    # held with this rank, which failed (hold on failure holds the whole job), not at an exception of its own
    held_for: int | None = None

    @property
    def note(self) -> str:
        """``rank 1 held for post-mortem, 87 s left`` (``jobs``, the node log)."""
        return f"rank {self.rank} {held_phrase(self.seconds_left)}"


def held_ranks(manifests: Mapping[str, NodeManifest | None], now: float | None = None) -> list[HeldRank]:
    """The held ranks in a job's manifests (node -> NodeManifest or None): the root cause first, then the
    others that failed (by time), then the ranks held with a failed one, by rank (``spec.failure_order``)."""
    now = time.time() if now is None else now
    node_of = {(r.rank, r.pid): node for node, m in manifests.items() if m is not None for r in m.ranks}
    ranks = [r for m in manifests.values() if m is not None for r in m.ranks]
    cause = root_cause(ranks)
    return [
        HeldRank(
            r.rank,
            node_of[(r.rank, r.pid)],
            r.hold_seconds_left(now),
            r.error if r.held_for is None else r.held_for_error,
            root_cause=r.world_size > 1 and cause is not None and (cause.rank, cause.pid) == (r.rank, r.pid),
            held_for=r.held_for,
        )
        for r in failure_order(ranks)
        if r.state == RankState.HELD
    ]


def held_notes(held: list[HeldRank]) -> list[str]:
    """One line per rank held at its own exception (``rank 3 held for post-mortem, 87 s left (root cause)``),
    and one for all the ranks held with a failed one (``ranks 0-2 held with rank 3, which failed``)."""
    own = [h for h in held if h.held_for is None]
    notes = [h.note + (" (root cause)" if h.root_cause and len(held) > 1 else "") for h in own]
    for failed in sorted({h.held_for for h in held if h.held_for is not None}):
        ranks = [h.rank for h in held if h.held_for == failed]
        notes.append(f"{plural_ranks(ranks)} {held_with_phrase(failed)}")
    return notes


def plural_ranks(ranks: list[int]) -> str:
    """``rank 0``, ``ranks 0-2, 5``."""
    return ("rank " if len(ranks) == 1 else "ranks ") + format_rank_ranges(ranks)


def keep_alive_state(manifests: Mapping[str, NodeManifest | None], now: float | None = None) -> tuple[int | None, int]:
    """(seconds until a kept-alive job ends, the run its nodes are on): the seconds are None unless every
    node that reported holds (the soonest hold counts: one node ending ends the job), the run is the highest."""
    now = time.time() if now is None else now
    known = [m for m in manifests.values() if m is not None]
    run = max((m.run for m in known), default=0)
    holds = [m.kept_alive_until for m in known]
    if not known or any(h is None for h in holds):
        return None, run
    return max(0, round(min(h for h in holds if h is not None) - now)), run


def read_manifests(manifest_dirs: Mapping[str, Path]) -> dict[str, NodeManifest | None]:
    """The node manifests of a job on this machine; one that cannot be read counts as none (listing jobs
    must not fail over one broken document)."""
    manifests: dict[str, NodeManifest | None] = {}
    for node, directory in manifest_dirs.items():
        try:
            manifests[node] = read_node_manifest(directory)
        except (OSError, ContractError):
            continue
    return manifests


@dataclass
class JobInfo:
    name: str
    backend: str
    status: JobStatus
    secondary_status: str  # open-ended (SageMaker has many): a str, not an enum
    nodes: list[str]
    nproc_per_node: int = 1
    created: float = 0.0
    ended: float | None = None
    exit_code: int | None = None
    failure_reason: str | None = None
    debuggable: bool = True
    source_dir: str | None = None
    why_not_debuggable: str | None = None  # one line, when not debuggable
    status_message: str = ""  # the platform's latest word on the status (SageMaker's StatusMessage)
    # the platform is still starting instances / pulling the image: its time, not the nodes'
    provisioning: bool = False
    code_dirs: dict[str, str] = field(default_factory=dict)  # node -> the job's code dir there, when known
    logs: dict[str, str] = field(default_factory=dict)  # node -> its log file, when on this machine
    # the platform's own (one PlatformDetails subclass per platform; JSON: a key per registered platform)
    details: PlatformDetails | None = None
    # ranks kept alive for a post-mortem debugger (jobs on this machine; SageMaker's would cost a log query)
    held_ranks: list[HeldRank] = field(default_factory=list)
    # keep-alive (``launch --keep-alive``): seconds until the job ends when every node holds (its command
    # and any re-run ended); None while something runs, or without keep-alive
    kept_alive_seconds_left: int | None = None
    # the entry's run the nodes are on: 0 the training command, n the n-th ``remote-debug run``
    run: int = 0

    @property
    def running(self) -> bool:
        return self.status in (JobStatus.IN_PROGRESS, JobStatus.STOPPING)

    @property
    def notes(self) -> list[str]:
        """What a person should know beyond the status, one line each: ``rank 1 held for post-mortem,
        87 s left``."""
        kept = [] if self.kept_alive_seconds_left is None else [kept_alive_phrase(self.kept_alive_seconds_left)]
        if kept and self.secondary_status.startswith(kept[0].split(",")[0]):
            kept = []  # the secondary status says it already (local jobs)
        return [*kept, *held_notes(self.held_ranks)]

    def details_of(self, kind: type[_Details]) -> _Details | None:
        """This job's details if its platform's are ``kind`` (``info.details_of(MachineJobDetails)``)."""
        return self.details if isinstance(self.details, kind) else None

    def to_json(self) -> dict[str, Any]:
        """What ``jobs --json`` prints: JSON types only (an enum member becomes its value); ``details`` as
        one key per registered platform, in place."""
        plain = asdict(self, dict_factory=_plain_dict)
        out: dict[str, Any] = {}
        for key, value in plain.items():
            if key != "details":
                out[key] = value
                continue
            for platform, kind in PLATFORM_DETAILS.items():
                out[platform] = value if isinstance(self.details, kind) else None
        return out


def _plain_dict(items: list[tuple[str, Any]]) -> dict[str, Any]:
    return {key: value.value if isinstance(value, enum.Enum) else value for key, value in items}
