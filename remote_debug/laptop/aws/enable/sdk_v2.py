"""``enable()`` for SageMaker SDK v2 estimators (``Estimator``, ``PyTorch`` and the other frameworks).

What the estimator gets, with the SDK's own means:

* ``dependencies`` += the bundle's ``remote_debug/`` and ``debugpy/``: the SDK copies dependencies
  into the root of ``sourcedir.tar.gz``, the toolkit extracts that to ``/opt/ml/code``, so the
  package root in the container is ``/opt/ml/code``;
* ``enable_remote_debug`` (SageMaker's native SSM access; for the ``ssm`` transport);
* ``hybrid`` transport instead: on CreateTrainingJob, the job's SSM activation, in a ``remote-debug``
  input channel added next to the job's uploaded code (``sourcedir.tar.gz`` is already in S3 by
  then; see :mod:`~remote_debug.laptop.aws.enable.hybrid_activation`);
* ``environment`` += a one-off token, which the request hook (``intercept``) swaps for the debug
  spec once ``fit()`` has named the job.

How the hook starts here: the toolkit's ``train`` process starts before the code is extracted, and
then runs ``python <sagemaker_program>`` (or torchrun / mpirun) from ``/opt/ml/code``.  There is no
entry to wrap (``ContainerEntrypoint`` is not set), so the job relies on ``PYTHONPATH``: the first
Python process started from the extracted code imports our sitecustomize, which starts the node's
sshd + manifest in the background (``container/node/bootstrap.py``) and a debug listener in each rank.
The estimator's own ``PYTHONPATH`` (``environment=``) is kept after ours; an image's ``ENV PYTHONPATH``
is not (the job's environment replaces it, and the toolkit passes its own ``sys.path`` on as the
children's ``PYTHONPATH``): repeat it in ``environment=`` if the image needs it.

Refused at ``enable()`` already where the estimator says so: network isolation, a ``py_version`` (or
``image_uri`` tag) older than Python 3.10, ``transport='direct'`` without ``subnets``, a keep-alive that does
not fit in ``max_run`` (the request core checks the final request's ``MaxRuntimeInSeconds`` again), and any
keep-alive without ``container_entry_point``: the toolkit's process is the container's entry, which the node
daemon cannot outlive, so only an estimator whose entry the hook wraps can hold its nodes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import remote_debug.laptop.aws.enable.hybrid_activation as hybrid_activation
from remote_debug.contract.spec import DebugOptions, Transport
from remote_debug.laptop.aws.enable.bundle import CODE_ROOT, bundle_dir, is_bundle_part
from remote_debug.laptop.aws.enable.intercept import PendingEnable, marked
from remote_debug.laptop.aws.enable.keyed_request import enable_with_key
from remote_debug.laptop.aws.enable.owner import resolve_owner
from remote_debug.laptop.aws.enable.request import (
    check_image,
    check_keep_alive,
    check_keep_alive_entry,
    check_py_version,
)
from remote_debug.laptop.aws.enable.sdk_detect import require_sdk
from remote_debug.laptop.aws.enable.terms import EnableError, JobTransport, direct_needs_vpc, network_isolation_error
from remote_debug.laptop.core.paths import StatePaths

WHAT = "enable() of a SageMaker SDK v2 estimator"
NO_ENTRY = "the estimator has no container_entry_point (the training toolkit runs the image's default `train`)"


def enable_estimator(
    estimator: Any, options: DebugOptions, transport: JobTransport, *, owner: str | None, paths: StatePaths
) -> Any:
    require_sdk(2, WHAT)
    session = estimator.sagemaker_session
    if getattr(session, "local_mode", False) or not hasattr(getattr(session, "sagemaker_client", None), "meta"):
        raise EnableError(
            "SageMaker local mode is not supported: debug on this machine with `remote-debug launch --local`"
        )
    if not hasattr(estimator, "_enable_remote_debug"):
        raise EnableError("this sagemaker version has no enable_remote_debug: upgrade to sagemaker >= 2.222")
    if estimator.enable_network_isolation():
        raise network_isolation_error("enable_network_isolation=True")
    if getattr(estimator, "algorithm_arn", None):
        raise EnableError(
            "AlgorithmEstimator runs a built-in or Marketplace algorithm, which SageMaker cannot debug remotely"
        )
    entry_point = getattr(estimator, "entry_point", None)
    check_image(getattr(estimator, "image_uri", None), has_script=bool(entry_point))
    check_py_version(getattr(estimator, "py_version", None))
    if transport.kind == Transport.DIRECT:
        direct_needs_vpc(bool(getattr(estimator, "subnets", None)))
    check_keep_alive_entry(
        options.keep_alive, wrapped=bool(getattr(estimator, "container_entry_point", None)), why=NO_ENTRY
    )
    check_keep_alive(options.keep_alive, max_runtime(estimator), setting="max_run")

    resolved_owner = resolve_owner(owner, session.boto_session)  # may fail: before changing anything

    if entry_point:
        _ship_bundle(estimator, paths)
    # Without an entry point (a bring-your-own image) nothing can be shipped: the image must have
    # remote-debug installed (templates/byoc), and an explicit container_entry_point gets wrapped.
    if transport.kind == Transport.SSM:
        estimator._enable_remote_debug = True
    apply = request_rewriter(options, transport, owner=resolved_owner, paths=paths, boto_session=session.boto_session)
    pending = PendingEnable(apply)
    estimator.environment = marked(estimator.environment, pending)
    pending.install(boto_session=session.boto_session, clients=[session.sagemaker_client])
    if transport.hybrid:
        hybrid_activation.watch_all(session.boto_session, [session.sagemaker_client])
        hybrid_activation.warn_unless_advanced_tier(session.boto_session.client("ssm"))
    return estimator


def max_runtime(estimator: Any) -> Any:
    """The estimator's ``max_run`` (its job's MaxRuntimeInSeconds; the SDK's default is 24 h), as given: a
    number, or a pipeline variable (which only the pipeline's run resolves)."""
    return getattr(estimator, "max_run", None)


def request_rewriter(
    options: DebugOptions, transport: JobTransport, *, owner: str, paths: StatePaths, boto_session: Any
) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """What the request hook does to an SDK v2 CreateTrainingJob request (no SDK needed here)."""
    activations = None
    if transport.hybrid:
        assert transport.hybrid_role is not None  # JobTransport checked it
        activations = hybrid_activation.Activations.for_session(transport.hybrid_role, boto_session)

    def apply(request: dict[str, Any]) -> dict[str, Any]:
        # hybrid: the activation's channel is the job's own, next to its code (the bundle is in the code)
        package_uri = hybrid_activation.sdk_v2_channel_uri(request) if activations is not None else None
        return enable_with_key(
            request,
            options,
            transport=transport,
            owner=owner,
            paths=paths,
            package_root=CODE_ROOT,
            package_uri=package_uri,
            activations=activations,
        )

    return apply


def _ship_bundle(estimator: Any, paths: StatePaths) -> None:
    source_dir = getattr(estimator, "source_dir", None)
    if isinstance(source_dir, str) and source_dir.lower().startswith("s3://"):
        raise EnableError(
            "source_dir is on S3, so the SDK does not repack it and remote_debug cannot be shipped with it: "
            "use a local source_dir, or install remote-debug-training in the image (templates/byoc)"
        )
    bundle = bundle_dir(paths)
    ours = [str(bundle / "remote_debug"), str(bundle / "debugpy")]
    # An earlier enable() of the same estimator left a (possibly older) bundle: replace it.
    kept = [d for d in (estimator.dependencies or []) if not is_bundle_part(str(d), paths)]
    estimator.dependencies = [*kept, *ours]
