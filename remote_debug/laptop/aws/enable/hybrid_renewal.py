"""A hybrid job's activation made anew when the job comes out of a capacity wait it outlived.

The activation ``enable()`` makes lives for the registration window (2 h, plus a managed spot job's capacity wait:
:func:`~remote_debug.laptop.aws.enable.hybrid_activation.lifetime`).  SageMaker's ``Pending`` secondary status - a job
waiting for capacity, on-demand included - can last longer than that, and its nodes then start with an expired
activation and never register: the job runs undebuggable.  SSM cannot extend an activation (there is no
UpdateActivation), so the laptop that watches the job (``attach``, through the SageMaker backend) makes a new one
when the job leaves ``Pending`` with its activation expired or about to: the same role, limit and tags, written
over the job's ``ssm-activation.json`` before the nodes download their channels (``Starting``, ``Downloading``),
the job's ``remote-debug:ssm-activation`` tag pointed at it, and the old one deleted.

What it cannot do: a job nobody watches while it leaves ``Pending`` keeps its old activation; a node that already
downloaded the old file does not read the new one (it logs that its registration failed, and ``remote-debug
cleanup`` retires what is left).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

from remote_debug.laptop.aws.clients import TAG_ACTIVATION, TAG_OWNER
from remote_debug.laptop.aws.enable import hybrid_activation

log = logging.getLogger(__name__)

# Renewed when it expires within this: the nodes still have to start their instances and download their inputs.
RENEW_MARGIN = timedelta(minutes=30)
BEFORE_REGISTRATION = ("Starting", "Downloading")  # the channels (and the activation file) are not read yet
WAITED = "Pending"


def waited_for_capacity(described: Mapping[str, Any]) -> bool:
    """Whether the job came out of ``Pending`` and its nodes have not read their channels yet."""
    transitions = described.get("SecondaryStatusTransitions") or []
    return str(described.get("SecondaryStatus", "")) in BEFORE_REGISTRATION and any(
        t.get("Status") == WAITED for t in transitions
    )


def renew_if_stale(
    described: Mapping[str, Any],
    tags: Mapping[str, str],
    *,
    ssm: Any,
    s3: Any,
    sagemaker: Any,
    now: Callable[[], datetime] | None = None,
) -> str | None:
    """The new activation's id when the job's was expired (or expiring within :data:`RENEW_MARGIN`), else None.
    AWS errors propagate: the caller logs them (a renewal must never cost an attach)."""
    old_id = tags.get(TAG_ACTIVATION)
    owner = tags.get(TAG_OWNER)
    if not old_id or not owner or not waited_for_capacity(described):
        return None
    listed = ssm.describe_activations(Filters=[{"FilterKey": "ActivationIds", "FilterValues": [old_id]}])
    old = next(iter(listed.get("ActivationList") or []), None)
    clock = now or (lambda: datetime.now(timezone.utc))
    if old is None:
        log.warning(
            "the SSM activation %s of job %s is gone: its nodes cannot register",
            old_id,
            described.get("TrainingJobName"),
        )
        return None
    expires = old.get("ExpirationDate")
    if not old.get("Expired") and isinstance(expires, datetime) and expires > clock() + RENEW_MARGIN:
        return None
    activations = hybrid_activation.Activations(str(old["IamRole"]), ssm, s3, now=now)
    new_id = activations.create(dict(described), owner=owner)
    hybrid_activation.adopt(new_id)  # the job exists: this one is the job's now, not pending on a CreateTrainingJob
    sagemaker.add_tags(ResourceArn=described["TrainingJobArn"], Tags=[{"Key": TAG_ACTIVATION, "Value": new_id}])
    try:
        ssm.delete_activation(ActivationId=old_id)
    except Exception as exc:  # expired ones go by themselves; a leftover is cleanup's
        log.info("could not delete the replaced SSM activation %s: %s", old_id, exc)
    log.warning(
        "job %s waited for capacity past its SSM activation: made a new one (%s) for its nodes",
        described.get("TrainingJobName"),
        new_id,
    )
    return new_id
