"""``remote-debug enable JOB``: switch on SageMaker's native remote debugging for a running job.

UpdateTrainingJob takes ``RemoteDebugConfig`` (shape ``RemoteDebugConfigForUpdate``) and SageMaker
accepts it only while the job's SecondaryStatus is ``Downloading`` or ``Training``, so we describe
the job first and refuse other states with one line instead of a ValidationException.

What this does and does not give: native remote debugging is the SSM target
``sagemaker-training-job:<job>_algo-<n>``.  Our hook (sshd, manifest, per-rank listeners) is only in
jobs created through ``remote_debug.enable()``, whose environment holds the debug spec; for
other jobs the result says so (``has_spec``), because ``attach`` will not find ranks there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from remote_debug.contract.spec import ENV_VERSION
from remote_debug.laptop.aws.clients import parse_training_job
from remote_debug.laptop.aws.enable.owner import claim_job
from remote_debug.laptop.aws.enable.terms import network_isolation_error
from remote_debug.laptop.core.errors import NotUpdatableError as NotUpdatableError

UPDATABLE_STATES = ("Downloading", "Training")


@dataclass(frozen=True)
class EnableResult:
    job: str
    updated: bool  # False: remote debugging was already on
    status: str
    secondary_status: str
    has_spec: bool  # whether the job runs remote-debug's hook (created with remote_debug.enable())
    claimed: bool = False  # a job nobody owned was tagged with the caller as its owner first

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def enable_running_job(client: Any, job: str, owner: Callable[[], str] | None = None) -> EnableResult:
    """DescribeTrainingJob, then UpdateTrainingJob if the job is in an updatable state.  ``owner``: who the caller
    is (``aws:userid``), asked only for a job launched without remote_debug, which is claimed first when nobody owns
    it (:func:`~remote_debug.laptop.aws.enable.owner.claim_job`)."""
    name, _region = parse_training_job(job)
    description = client.describe_training_job(TrainingJobName=name)
    status = str(description.get("TrainingJobStatus", ""))
    secondary = str(description.get("SecondaryStatus", ""))
    has_spec = ENV_VERSION in (description.get("Environment") or {})
    if (description.get("RemoteDebugConfig") or {}).get("EnableRemoteDebug"):
        return EnableResult(name, False, status, secondary, has_spec)
    if description.get("EnableNetworkIsolation"):
        raise NotUpdatableError(f"job {name}: {network_isolation_error('EnableNetworkIsolation')}")
    if secondary not in UPDATABLE_STATES:
        raise NotUpdatableError(
            f"job {name} is {secondary or status} ({status}): SageMaker turns on remote debugging only while a job "
            f"is {' or '.join(UPDATABLE_STATES)}"
            + ("; create the next run with remote_debug.enable()" if status != "InProgress" else "; try again then")
        )
    claimed = False
    if not has_spec and owner is not None:
        claimed = claim_job(client, str(description["TrainingJobArn"]), owner())
    client.update_training_job(TrainingJobName=name, RemoteDebugConfig={"EnableRemoteDebug": True})
    return EnableResult(name, True, status, secondary, has_spec, claimed)
