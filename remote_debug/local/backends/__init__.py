"""Job backends behind one interface (:class:`~remote_debug.local.backends.base.Backend`)."""

from __future__ import annotations

from remote_debug.local.backends.base import Backend, JobInfo
from remote_debug.local.backends.local import LocalBackend
from remote_debug.local.errors import UnknownJobError
from remote_debug.local.paths import StatePaths
from remote_debug.spec import check_job_name

__all__ = ["Backend", "JobInfo", "LocalBackend", "all_backends", "backend_for"]


def all_backends(paths: StatePaths | None = None) -> list[Backend]:
    # The SageMaker backend joins this list when it exists; local jobs win on a name clash because
    # they are the ones the user just started on this machine.
    return [LocalBackend(paths)]


def backend_for(job: str, paths: StatePaths | None = None) -> Backend:
    check_job_name(job)
    for backend in all_backends(paths):
        if backend.has_job(job):
            return backend
    raise UnknownJobError(f"unknown job {job!r}: run 'remote-debug jobs' to list jobs")
