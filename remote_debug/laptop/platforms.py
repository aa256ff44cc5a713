"""Job backends behind one interface (:class:`~remote_debug.laptop.core.backend.Backend`), found through
one table: :data:`PLATFORMS`.

A new platform (Kubernetes, HyperPod...) is a module with its ``Backend`` subclass plus one
:func:`register` line here; ``jobs``, ``attach``, ``stop``, ``ssh`` and the ProxyCommand then know its jobs.
A backend's module is imported only when it is asked for (``MachineBackend`` or ``SageMakerBackend`` here
too): ``remote-debug --help`` and local-only use never pay for a cloud SDK's imports.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from remote_debug.laptop.aws import clients as aws
from remote_debug.laptop.core.backend import Backend
from remote_debug.laptop.core.errors import UnknownJobError
from remote_debug.laptop.core.jobinfo import JobInfo, JobRef
from remote_debug.laptop.core.paths import StatePaths

if TYPE_CHECKING:  # at run time these come from __getattr__, on first use
    from remote_debug.laptop.aws.sagemaker_backend import SageMakerBackend
    from remote_debug.laptop.machine.backend import MachineBackend

__all__ = [
    "PLATFORMS",
    "Backend",
    "JobInfo",
    "JobRef",
    "MachineBackend",
    "Platform",
    "SageMakerBackend",
    "all_backends",
    "backend_for",
    "job_ref",
    "register",
]


@dataclass(frozen=True)
class Platform:
    """Where jobs run, as the laptop finds them: a ``Backend`` class, named by module so it loads lazily."""

    name: str  # the backend's ``name`` (JobInfo.backend, the ``jobs`` column)
    module: str  # the module that defines it
    backend_class: str  # its name in that module: a Backend subclass

    def backend_type(self) -> type[Backend]:
        found = getattr(importlib.import_module(self.module), self.backend_class)
        if not (isinstance(found, type) and issubclass(found, Backend)):
            raise TypeError(f"platform {self.name}: {self.module}.{self.backend_class} is not a Backend")
        return found

    def backend(self, paths: StatePaths | None = None, *, region: str | None = None) -> Backend:
        return self.backend_type().create(paths, region=region)


# In the order a job name is looked up (and ``jobs`` lists): jobs on this machine first, they win on a
# name clash - they are the ones the user just started here, and asking them costs a file lookup.
PLATFORMS: list[Platform] = []


def register(platform: Platform) -> None:
    """Add a platform (after those registered before it); its name must be new."""
    if any(p.name == platform.name for p in PLATFORMS):
        raise ValueError(f"platform {platform.name!r} is registered already")
    PLATFORMS.append(platform)


register(Platform("local", "remote_debug.laptop.machine.backend", "MachineBackend"))
register(Platform("sagemaker", "remote_debug.laptop.aws.sagemaker_backend", "SageMakerBackend"))

# names this module has always offered, each imported on first use (PEP 562)
_LAZY = {"MachineBackend": "local", "SageMakerBackend": "sagemaker"}


def __getattr__(name: str) -> Any:
    platform = _LAZY.get(name)
    if platform is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return next(p for p in PLATFORMS if p.name == platform).backend_type()


def all_backends(paths: StatePaths | None = None) -> list[Backend]:
    # A backend joins only when it can be asked at all (SageMaker: AWS configured, checked without boto3
    # or network), so local-only use never waits for AWS.
    return [backend for backend in (p.backend(paths) for p in PLATFORMS) if backend.available()]


def job_ref(job_or_arn: str) -> JobRef:
    """A job name, or the name inside a SageMaker training-job ARN with the ARN's region (which
    applies to that job, unless --region says otherwise).  Changes no global setting."""
    return JobRef(*aws.parse_training_job(job_or_arn))


def backend_for(job: str | JobRef, paths: StatePaths | None = None) -> Backend:
    ref = job if isinstance(job, JobRef) else job_ref(job)
    # has_job is cheap: a file lookup, or (SageMaker) the hint attach left first - no AWS call, the
    # ProxyCommand's case, possibly in an IDE's environment without AWS variables - then the API if AWS
    # is configured at all.  Each platform's backend is made (its module imported) only when the ones before
    # it do not have the job: a local job's ProxyCommand and CLI never import SageMaker's.
    backends: list[Backend] = []
    for platform in PLATFORMS:
        backend = platform.backend(paths, region=ref.region)
        if backend.has_job(ref.name):
            return backend
        backends.append(backend)
    looked = ", and ".join(backend.no_such_job(ref.name) for backend in backends)
    raise UnknownJobError(f"unknown job {ref.name!r}: {looked}; 'remote-debug jobs' lists jobs")
