"""Job backends behind one interface (:class:`~remote_debug.local.backends.base.Backend`)."""

from __future__ import annotations

from remote_debug.local import aws
from remote_debug.local.backends.base import Backend, JobInfo
from remote_debug.local.backends.machine import MachineBackend
from remote_debug.local.backends.sagemaker import SageMakerBackend, parse_job
from remote_debug.local.errors import UnknownJobError
from remote_debug.local.paths import StatePaths
from remote_debug.spec import check_job_name

__all__ = ["Backend", "JobInfo", "MachineBackend", "SageMakerBackend", "all_backends", "backend_for", "job_name"]


def all_backends(paths: StatePaths | None = None) -> list[Backend]:
    # Local jobs come first and win on a name clash: they are the ones the user just started on this
    # machine, and asking them costs a file lookup.  SageMaker joins only when AWS is configured at
    # all (checked without boto3 or network), so local-only use never waits for AWS.
    backends: list[Backend] = [MachineBackend(paths)]
    sagemaker = SageMakerBackend(paths)
    if sagemaker.available():
        backends.append(sagemaker)
    return backends


def job_name(job_or_arn: str) -> str:
    """A job name, or the name inside a SageMaker training-job ARN (whose region then applies,
    unless --region says otherwise)."""
    name, region = parse_job(job_or_arn)
    if region and not aws.settings().region:
        aws.configure(profile=aws.settings().profile, region=region)
    return check_job_name(name)


def backend_for(job: str, paths: StatePaths | None = None) -> Backend:
    job = job_name(job)
    local = MachineBackend(paths)
    if local.has_job(job):
        return local
    # has_job looks at the hint attach left first (no AWS call: the ProxyCommand's case, possibly in
    # an IDE's environment without AWS variables), then asks SageMaker if AWS is configured.
    sagemaker = SageMakerBackend(paths)
    if sagemaker.has_job(job):
        return sagemaker
    if not sagemaker.available():
        raise UnknownJobError(
            f"unknown job {job!r}: no local job by that name (remote-debug jobs lists them), and AWS is not "
            "configured to look for a SageMaker job (pass --region / --profile, or set AWS_REGION)"
        )
    raise UnknownJobError(f"unknown job {job!r}: run 'remote-debug jobs' to list jobs")
