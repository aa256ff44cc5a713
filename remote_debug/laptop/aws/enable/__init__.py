"""Making SageMaker training jobs debuggable: ``remote_debug.enable(...)`` and ``remote-debug enable JOB``.

Layered so that the boto3 request is the single source of truth:

* :mod:`~remote_debug.laptop.aws.enable.request` - the core: a CreateTrainingJob request dict in, a
  debuggable request dict out (spec in ``Environment``, ``RemoteDebugConfig``, owner tags, the entry
  wrapped with the container hook).  Everything else reuses it.
* :mod:`~remote_debug.laptop.aws.enable.sdk_v2` / :mod:`~remote_debug.laptop.aws.enable.sdk_v3` - thin wrappers
  for the SageMaker Python SDK (v2 estimators; v3 and late-v2 ``ModelTrainer``): they ship the
  package into the job with the SDK's own means, switch on native remote debugging, and hand the
  final CreateTrainingJob request to the core (see :mod:`~remote_debug.laptop.aws.enable.intercept`).
* :mod:`~remote_debug.laptop.aws.enable.update` - UpdateTrainingJob for a job that is already running.

What the user chose is one :class:`~remote_debug.contract.spec.DebugOptions` (the same type ``launch`` uses),
built once by ``enable()``; how the laptop reaches the job is one
:class:`~remote_debug.laptop.aws.enable.terms.JobTransport`.  Both are passed down as they are.

Layers, bottom up (no module imports one above it): ``common`` (EnableError, tags, JobTransport) ->
``bundle`` -> ``request`` -> ``hybrid_activation``, ``owner`` -> ``keyed`` (key pair + activation) ->
``intercept``, ``sdk`` -> ``sdk_v2``, ``sdk_v3`` -> ``api`` (``enable()``); ``update`` stands apart
(it shares only ``common``'s network-isolation message).

From the laptop side (``remote_debug.laptop``) this package uses only ``errors`` (UserError, the
one-line error the CLI turns into exit code 2), ``aws`` (session(), is_error(), describe_error(),
parse_training_job()), ``keys`` (ensure_job_key()) and ``paths`` (StatePaths) - checked by
``tests/test_layering.py``.

Nothing here imports the SageMaker SDK (or boto3) at import time: the SDK is an optional extra,
and a missing or wrong SDK is reported when it is used, as one line.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DebugOptions", "EnableError", "JobTransport", "RemoteDebugWarning", "enable", "enable_request"]


def __getattr__(name: str) -> Any:
    # Lazy, so ``import remote_debug.laptop.aws.enable`` stays cheap and boto3-free.
    if name == "enable":
        from remote_debug.laptop.aws.enable.api import enable

        return enable
    if name == "enable_request":
        from remote_debug.laptop.aws.enable.request import enable_request

        return enable_request
    if name in ("EnableError", "JobTransport", "RemoteDebugWarning"):
        from remote_debug.laptop.aws.enable import terms as common

        return getattr(common, name)
    if name == "DebugOptions":
        from remote_debug.contract.spec import DebugOptions

        return DebugOptions
    raise AttributeError(f"module 'remote_debug.laptop.aws.enable' has no attribute {name!r}")
