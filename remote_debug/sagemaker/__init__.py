"""Making SageMaker training jobs debuggable: ``remote_debug.enable(...)`` and ``remote-debug enable JOB``.

Layered so that the boto3 request is the single source of truth:

* :mod:`~remote_debug.sagemaker.request` - the core: a CreateTrainingJob request dict in, a
  debuggable request dict out (spec in ``Environment``, ``RemoteDebugConfig``, owner tags, the entry
  wrapped with the container hook).  Everything else reuses it.
* :mod:`~remote_debug.sagemaker.sdk_v2` / :mod:`~remote_debug.sagemaker.sdk_v3` - thin wrappers
  for the SageMaker Python SDK (v2 estimators; v3 and late-v2 ``ModelTrainer``): they ship the
  package into the job with the SDK's own means, switch on native remote debugging, and hand the
  final CreateTrainingJob request to the core (see :mod:`~remote_debug.sagemaker.intercept`).
* :mod:`~remote_debug.sagemaker.update` - UpdateTrainingJob for a job that is already running.

Nothing here imports the SageMaker SDK (or boto3) at import time: the SDK is an optional extra,
and a missing or wrong SDK is reported when it is used, as one line.
"""

from __future__ import annotations

from typing import Any

__all__ = ["EnableError", "enable", "enable_request"]


def __getattr__(name: str) -> Any:
    # Lazy, so ``import remote_debug.sagemaker`` stays cheap and boto3-free.
    if name == "enable":
        from remote_debug.sagemaker.api import enable

        return enable
    if name in ("enable_request", "EnableError"):
        from remote_debug.sagemaker import request as core

        return getattr(core, name)
    raise AttributeError(f"module 'remote_debug.sagemaker' has no attribute {name!r}")
