"""The request core with its side effects: the job's client key pair, and its hybrid activation.

Shared by ``enable()`` on request dicts and by the SDK wrappers' request hooks (``sdk_v2``,
``sdk_v3``), which run it on the SDK's final CreateTrainingJob request.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import remote_debug.laptop.aws.enable.hybrid_activation as hybrid_activation
from remote_debug.contract.spec import DebugOptions
from remote_debug.laptop.aws.clients import TAG_ACTIVATION
from remote_debug.laptop.aws.enable.bundle import CHANNEL_ROOT
from remote_debug.laptop.aws.enable.request import draft_request
from remote_debug.laptop.aws.enable.terms import EnableError, JobTransport
from remote_debug.laptop.core.keys import ensure_job_key, job_secret
from remote_debug.laptop.core.paths import StatePaths


def enable_with_key(
    request: Mapping[str, Any],
    options: DebugOptions,
    *,
    transport: JobTransport | None = None,
    owner: str,
    paths: StatePaths,
    job_name: str | None = None,
    package_root: str = CHANNEL_ROOT,
    package_uri: str | None = None,
    activations: hybrid_activation.Activations | None = None,
) -> dict[str, Any]:
    """:func:`~remote_debug.laptop.aws.enable.request.enable_request` with the job's client key pair (created on
    first use, private key 0600); for the hybrid transport (``activations`` required) plus the job's SSM
    activation.  ``transport``: SageMaker's native SSM target unless given."""
    transport = JobTransport() if transport is None else transport
    if transport.hybrid != (activations is not None):
        raise EnableError("internal: the hybrid transport, and only it, takes an SSM activation maker")
    # Every refusal first: a request we refuse must not leave a key pair (or an activation) behind.
    draft = draft_request(
        request,
        options,
        transport=transport,
        owner=owner,
        job_name=job_name,
        package_root=package_root,
        package_uri=package_uri,
    )
    previous = hybrid_activation.tag_value(request.get("Tags"), TAG_ACTIVATION)
    if previous:  # an earlier enable() of this request, not submitted: its activation goes (if ours)
        hybrid_activation.release(previous, "replaced by a new enable()")
    if activations is None:
        key_path, public_key = ensure_job_key(paths, draft.job_name)
        return draft.finish(public_key, job_secret(key_path))
    activation_id = activations.create(draft.request, owner=owner)
    try:
        key_path, public_key = ensure_job_key(paths, draft.job_name)
        return hybrid_activation.with_activation_tag(draft.finish(public_key, job_secret(key_path)), activation_id)
    except BaseException:
        hybrid_activation.release(activation_id, "enable() failed")
        raise
