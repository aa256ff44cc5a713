"""The one interface every job backend implements (local jobs now, SageMaker next).

Everything above this seam (attach, ssh config, proxy, IDE configs) is backend-agnostic: it asks
for a job's state and node manifests, and for a byte stream to a node's sshd.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from typing import Any, BinaryIO

from remote_debug.spec import NodeManifest

# SageMaker's TrainingJobStatus values; SecondaryStatus adds detail (Starting, Downloading, Training, ...).
IN_PROGRESS = "InProgress"
COMPLETED = "Completed"
FAILED = "Failed"
STOPPING = "Stopping"
STOPPED = "Stopped"
TERMINAL = (COMPLETED, FAILED, STOPPED)


@dataclass
class JobInfo:
    name: str
    backend: str
    status: str
    secondary_status: str
    nodes: list[str]
    nproc_per_node: int = 1
    created: float = 0.0
    ended: float | None = None
    exit_code: int | None = None
    failure_reason: str | None = None
    debuggable: bool = True
    source_dir: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def running(self) -> bool:
        return self.status in (IN_PROGRESS, STOPPING)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class Backend(ABC):
    name: str

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
