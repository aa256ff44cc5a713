"""Job backends behind one interface (:class:`~remote_debug.laptop.core.backend.Backend`)."""

from __future__ import annotations

from remote_debug.laptop.aws import clients as aws
from remote_debug.laptop.aws.sagemaker_backend import SageMakerBackend
from remote_debug.laptop.core.backend import Backend
from remote_debug.laptop.core.errors import UnknownJobError
from remote_debug.laptop.core.jobinfo import JobInfo, JobRef
from remote_debug.laptop.core.paths import StatePaths
from remote_debug.laptop.machine.backend import MachineBackend

__all__ = [
    "Backend",
    "JobInfo",
    "JobRef",
    "MachineBackend",
    "SageMakerBackend",
    "all_backends",
    "backend_for",
    "job_ref",
]


def all_backends(paths: StatePaths | None = None) -> list[Backend]:
    # Local jobs come first and win on a name clash: they are the ones the user just started on this
    # machine, and asking them costs a file lookup.  SageMaker joins only when AWS is configured at
    # all (checked without boto3 or network), so local-only use never waits for AWS.
    backends: list[Backend] = [MachineBackend(paths)]
    sagemaker = SageMakerBackend(paths)
    if sagemaker.available():
        backends.append(sagemaker)
    return backends


def job_ref(job_or_arn: str) -> JobRef:
    """A job name, or the name inside a SageMaker training-job ARN with the ARN's region (which
    applies to that job, unless --region says otherwise).  Changes no global setting."""
    return JobRef(*aws.parse_training_job(job_or_arn))


def backend_for(job: str | JobRef, paths: StatePaths | None = None) -> Backend:
    ref = job if isinstance(job, JobRef) else job_ref(job)
    local = MachineBackend(paths)
    if local.has_job(ref.name):
        return local
    # has_job looks at the hint attach left first (no AWS call: the ProxyCommand's case, possibly in
    # an IDE's environment without AWS variables), then asks SageMaker if AWS is configured.
    sagemaker = SageMakerBackend(paths, region=ref.region)
    if sagemaker.has_job(ref.name):
        return sagemaker
    if not sagemaker.available():
        raise UnknownJobError(
            f"unknown job {ref.name!r}: no local job by that name (remote-debug jobs lists them), and AWS is not "
            "configured to look for a SageMaker job (pass --region / --profile, or set AWS_REGION)"
        )
    # Say where SageMaker was asked: a launcher that pins its own region (boto3.Session(region_name=...)) puts
    # the job where a plain shell does not look.
    region, source = (ref.region, "the ARN") if ref.region else aws.resolve_region()
    where = f"region {region} (from {source}), profile {aws.profile() or 'default'}" if region else "your region"
    raise UnknownJobError(
        f"unknown job {ref.name!r}: no local job, and no SageMaker training job by that name in {where}; a job "
        "launched in another region needs --region REGION (or AWS_REGION); 'remote-debug jobs' lists jobs"
    )
