"""The one interface every job backend implements: jobs on this machine, and SageMaker.

Everything above this seam (attach, ssh config, proxy, IDE configs) is backend-agnostic: it asks
for a job's state and node manifests, and for a byte stream to a node's sshd.  What differs between
backends is said by typed fields (:class:`JobInfo`) and :class:`Capabilities`, never by comparing a
backend's name.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from typing import Any, BinaryIO

from remote_debug.spec import NodeManifest, StrEnum, Transport


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


@dataclass(frozen=True)
class Capabilities:
    """What generic code may rely on, per backend."""

    # the job's processes run on this machine, in this interpreter's environment (so e.g. the
    # pydevd-pycharm installed here is the one the ranks use)
    runs_here: bool
    # reached through a cloud API with the user's credentials: it can be unreachable or refuse,
    # which must not hide the other backends' jobs
    remote: bool


@dataclass
class MachineJobDetails:
    """A job of this machine (``launch --local``)."""

    job_dir: str
    isolation: str  # "netns": every node in its own network namespace; "loopback": all on this machine's
    node_netns: dict[str, str] = field(default_factory=dict)
    node_addresses: dict[str, str] = field(default_factory=dict)


@dataclass
class SageMakerJobDetails:
    arn: str | None
    region: str
    transport: Transport  # SSM, HYBRID or DIRECT (never LOCAL)
    remote_debug_enabled: bool  # RemoteDebugConfig.EnableRemoteDebug
    instance_type: str | None = None


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
    machine: MachineJobDetails | None = None
    sagemaker: SageMakerJobDetails | None = None

    @property
    def running(self) -> bool:
        return self.status in (JobStatus.IN_PROGRESS, JobStatus.STOPPING)

    def to_json(self) -> dict[str, Any]:
        """What ``jobs --json`` prints: JSON types only (an enum member becomes its value)."""
        return asdict(self, dict_factory=_plain_dict)


def _plain_dict(items: list[tuple[str, Any]]) -> dict[str, Any]:
    return {key: value.value if isinstance(value, enum.Enum) else value for key, value in items}


class Backend(ABC):
    name: str
    capabilities: Capabilities

    @abstractmethod
    def has_job(self, job: str) -> bool:
        """Whether this backend knows the job (cheap; used to route a job name to a backend)."""

    @abstractmethod
    def list_jobs(self) -> list[JobInfo]: ...

    @abstractmethod
    def describe(self, job: str) -> JobInfo:
        """The job's state; raises UnknownJobError."""

    @abstractmethod
    def manifests(self, job: str) -> dict[str, NodeManifest | None]:
        """Node name -> that node's manifest (None until the node has published one)."""

    @abstractmethod
    def stop(self, job: str) -> JobInfo: ...

    @abstractmethod
    def relay(self, job: str, node: str, port: int, stdin: BinaryIO, stdout: BinaryIO) -> int:
        """Carry an ssh byte stream between stdin/stdout and the node's sshd (the ProxyCommand seam).

        Local jobs: a TCP relay to the node's sshd.  SageMaker: ssm.start_session + the
        session-manager-plugin.  Returns an exit code for the proxy process.
        """
