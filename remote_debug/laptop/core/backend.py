"""The one interface every job backend implements: jobs on this machine, and SageMaker (``laptop/platforms.py``
lists them).

Everything above this seam (attach, ssh config, proxy, IDE configs) is backend-agnostic: it asks
for a job's state and node manifests, and for a byte stream to a node's sshd.  What differs between
backends is said by typed fields (:class:`~remote_debug.laptop.core.jobinfo.JobInfo`) and
:class:`Capabilities`, never by comparing a backend's name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import BinaryIO

from remote_debug.contract.spec import NodeManifest
from remote_debug.laptop.core.errors import JobStateError
from remote_debug.laptop.core.jobinfo import JobInfo
from remote_debug.laptop.core.paths import StatePaths


@dataclass(frozen=True)
class Capabilities:
    """What generic code may rely on, per backend."""

    # the job's processes run on this machine, in this interpreter's environment (so e.g. the
    # pydevd-pycharm installed here is the one the ranks use)
    runs_here: bool
    # reached through a cloud API with the user's credentials: it can be unreachable or refuse,
    # which must not hide the other backends' jobs
    remote: bool


@dataclass(frozen=True)
class NodeLine:
    """One line a node's training command wrote (its ranks' output, the launcher's, ours), as the backend keeps it."""

    node: str
    text: str  # without its newline
    time: float | None = None  # epoch seconds, where the backend stamps lines (CloudWatch); None for a plain file


class NodeOutput(ABC):
    """A job's node output, read from the start of the run: each :meth:`read` returns the lines that arrived since
    the previous one, in the order the backend keeps them (per node: as written).  A read takes a bounded amount:
    read until it returns nothing and is not :attr:`behind`."""

    @abstractmethod
    def read(self, *, final: bool = False) -> list[NodeLine]:
        """The new lines.  ``final``: the job has ended, nothing more comes: a last line without its newline is
        returned too (before, it may be a line still being written)."""

    @property
    def behind(self) -> bool:
        """Lines that are there already were left for the next read (a read takes a bounded amount): read again at
        once rather than after :meth:`poll_seconds`."""
        return False

    def poll_seconds(self) -> float:
        """A follower's pause between reads that found everything read."""
        return 0.2

    def settle_seconds(self) -> float:
        """How long after the job ended lines may still arrive (a log service delivers late): a reader that follows
        the job reads until then."""
        return 0.0

    def where(self) -> str:
        """Where the lines are read from, in a few words (for a user left waiting)."""
        return ""

    def since(self, epoch_seconds: float) -> NodeOutput | None:
        """A new reader of the same output that starts with the lines stamped at ``epoch_seconds`` or later, so that
        the last lines of a long run are found without reading it all (``logs --tail``); None when this output has no
        times to start from (a log file) or the time is before the run began (a reader from the start is the same)."""
        del epoch_seconds
        return None


class Backend(ABC):
    """A kind of job the laptop can reach; ``laptop/platforms.py`` registers each one."""

    name: str
    capabilities: Capabilities

    @classmethod
    @abstractmethod
    def create(cls, paths: StatePaths | None = None, *, region: str | None = None) -> Backend:
        """The backend as the platform table makes it: ``region`` is a training-job ARN's (None when the
        job was named otherwise); a backend without regions ignores it."""

    def available(self) -> bool:
        """Cheap (no network, no SDK import): whether this backend can be asked at all, e.g. its cloud
        is configured.  One that cannot is left out of ``jobs`` and of a job name's lookup."""
        return True

    def no_such_job(self, job: str) -> str:
        """Where this backend looked for ``job`` and did not find it, in a few words (``unknown job 'x':
        no local job by that name, and ...``): what to change to find it there."""
        return f"no {self.name} job by that name"

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

    def waiting_for(self, job: str) -> str:
        """Where :meth:`manifests` looks for the nodes' manifests and what it saw there, in a few words (for a
        user left waiting: which log group, region and profile, which files); "" when there is nothing to add."""
        return ""

    @abstractmethod
    def stop(self, job: str) -> JobInfo: ...

    def node_output(self, job: str) -> NodeOutput:
        """What the job's nodes printed, from the start of the run (``remote-debug logs``); raises UnknownJobError,
        or a JobStateError where this backend keeps no output of the job."""
        raise JobStateError(f"{self.name} jobs keep no output that remote-debug can read: see the platform's own logs")

    @abstractmethod
    def relay(self, job: str, node: str, port: int, stdin: BinaryIO, stdout: BinaryIO) -> int:
        """Carry an ssh byte stream between stdin/stdout and the node's sshd (the ProxyCommand seam).

        Local jobs: a TCP relay to the node's sshd.  SageMaker: ssm.start_session + the
        session-manager-plugin.  Returns an exit code for the proxy process.
        """
