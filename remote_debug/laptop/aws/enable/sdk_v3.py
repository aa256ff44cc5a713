"""``enable()`` for ``ModelTrainer``: SDK v3 ``sagemaker.train`` and late v2 ``sagemaker.modules.train``.

What the trainer gets, with the SDK's own means:

* ``input_data_config`` += an input channel ``remote-debug`` holding the bundle (``remote_debug/``
  and ``debugpy/``): the SDK uploads a local directory given as a channel, and ``train(input_data_config=...)``
  merges its channels with these by name.  The user's ``source_dir`` stays untouched (copying
  ``remote_debug`` into it would change their tree, and ``SourceCode`` has no ``dependencies``).
  Package root in the container: ``/opt/ml/input/data/remote_debug``;
* ``with_remote_debug_config(RemoteDebugConfig(enable_remote_debug=True))`` for the ``ssm`` transport;
  ``hybrid`` instead: on CreateTrainingJob, the job's SSM activation is written into the per-job S3
  prefix the SDK uploaded the ``remote-debug`` channel to
  (see :mod:`~remote_debug.laptop.aws.enable.hybrid_activation`);
* ``environment`` += a one-off token that the request hook (``intercept``) swaps for the spec.

How the hook starts here: ModelTrainer sets ``ContainerEntrypoint: ["/bin/bash"]`` and runs its
drivers through ``sm_train.sh``.  The core wraps that entry, so the hook (sshd, manifest, signal
forwarding, exit code) is the parent of ``sm_train.sh``; it can, because channels are in place
when the container starts.  The ``PYTHONPATH`` sitecustomize then gives each rank its listener
(basic script, torchrun and MPI drivers alike).  A trainer without ``source_code`` (the image's own
entry) falls back to the sitecustomize starting the node's services, as with SDK v2; it cannot keep its
nodes alive (``keep_alive`` is refused there).
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import remote_debug.laptop.aws.enable.hybrid_activation as hybrid_activation
from remote_debug.contract.spec import DebugOptions, Transport
from remote_debug.laptop.aws.enable.bundle import CHANNEL_NAME, CHANNEL_ROOT, bundle_dir, is_bundle_part
from remote_debug.laptop.aws.enable.intercept import PendingEnable, marked
from remote_debug.laptop.aws.enable.keyed_request import enable_with_key
from remote_debug.laptop.aws.enable.owner import resolve_owner
from remote_debug.laptop.aws.enable.request import check_image, check_keep_alive, check_keep_alive_entry
from remote_debug.laptop.aws.enable.sdk_detect import require_sdk
from remote_debug.laptop.aws.enable.terms import EnableError, JobTransport, direct_needs_vpc, network_isolation_error
from remote_debug.laptop.core.paths import StatePaths

MAX_RUNTIME_SETTING = "stopping_condition.max_runtime_in_seconds"  # StoppingCondition(max_runtime_in_seconds=...)
# without source_code ModelTrainer sends no ContainerEntrypoint: the image's own entry runs (env-hook mode)
NO_ENTRY = "the trainer has no source_code (the image's own entry runs)"

# (module prefix of the class, configs module, SDK major, minimum version)
FLAVOURS = (
    ("sagemaker.train.", "sagemaker.train.configs", 3, ()),
    ("sagemaker.modules.", "sagemaker.modules.configs", 2, ()),
)


def enable_model_trainer(
    trainer: Any, options: DebugOptions, transport: JobTransport, *, owner: str | None, paths: StatePaths
) -> Any:
    configs = _configs_for(trainer)
    if str(getattr(trainer, "training_mode", "")).upper().endswith("LOCAL_CONTAINER"):
        raise EnableError(
            "ModelTrainer local mode is not supported: debug on this machine with `remote-debug launch --local`"
        )
    if getattr(trainer, "algorithm_name", None):
        raise EnableError(
            f"the trainer runs the algorithm {trainer.algorithm_name!r} (built-in or Marketplace), "
            "which SageMaker cannot debug remotely"
        )
    networking = getattr(trainer, "networking", None)
    if networking is not None and getattr(networking, "enable_network_isolation", False):
        raise network_isolation_error("Networking(enable_network_isolation=True)")
    image = getattr(trainer, "training_image", None)
    check_image(image if isinstance(image, str) else None, has_script=getattr(trainer, "source_code", None) is not None)
    if transport.kind == Transport.DIRECT:
        direct_needs_vpc(networking is not None and bool(getattr(networking, "subnets", None)))
    # here for the line that called enable(); the request core checks the request train() sends again
    check_keep_alive_entry(options.keep_alive, wrapped=getattr(trainer, "source_code", None) is not None, why=NO_ENTRY)
    check_keep_alive(options.keep_alive, max_runtime(trainer), setting=MAX_RUNTIME_SETTING)

    if not hasattr(trainer, "with_remote_debug_config"):
        raise EnableError("this ModelTrainer has no with_remote_debug_config: upgrade the SageMaker SDK")
    boto_session = trainer.sagemaker_session.boto_session
    resolved_owner = resolve_owner(owner, boto_session)  # may fail: before changing anything

    activations = None
    if transport.hybrid:
        assert transport.hybrid_role is not None  # JobTransport checked it
        activations = hybrid_activation.Activations.for_session(transport.hybrid_role, boto_session)
    _add_bundle_channel(trainer, configs, paths)
    if transport.kind == Transport.SSM:
        trainer.with_remote_debug_config(configs.RemoteDebugConfig(enable_remote_debug=True))

    def apply(request: dict[str, Any]) -> dict[str, Any]:
        return enable_with_key(
            request,
            options,
            transport=transport,
            owner=resolved_owner,
            paths=paths,
            package_root=CHANNEL_ROOT,
            activations=activations,
        )

    pending = PendingEnable(apply)
    trainer.environment = marked(trainer.environment, pending)
    clients = _training_job_clients(trainer, boto_session)
    pending.install(boto_session=boto_session, clients=clients)
    if activations is not None:
        hybrid_activation.watch_all(boto_session, clients)
        hybrid_activation.warn_unless_advanced_tier(activations.ssm)
    return trainer


def max_runtime(trainer: Any) -> Any:
    """The trainer's ``stopping_condition.max_runtime_in_seconds`` (ModelTrainer fills in 3600 when not given),
    or None when it has none."""
    return getattr(getattr(trainer, "stopping_condition", None), "max_runtime_in_seconds", None)


def _configs_for(trainer: Any) -> Any:
    module = type(trainer).__module__
    for prefix, configs_module, major, minimum in FLAVOURS:
        if module.startswith(prefix):
            require_sdk(major, f"enable() of {module}.ModelTrainer", minimum)
            try:
                return importlib.import_module(configs_module)
            except ImportError as exc:
                raise EnableError(f"cannot import {configs_module} ({exc}): reinstall the SageMaker SDK") from None
    raise EnableError(
        f"unknown ModelTrainer flavour {module}: supported are sagemaker.train and sagemaker.modules.train"
    )


def _add_bundle_channel(trainer: Any, configs: Any, paths: StatePaths) -> None:
    bundle = str(bundle_dir(paths))
    channels = list(trainer.input_data_config or [])
    kept = []
    for channel in channels:
        if getattr(channel, "channel_name", None) != CHANNEL_NAME:
            kept.append(channel)
        elif not is_bundle_part(str(getattr(channel, "data_source", "")), paths):
            raise EnableError(
                f"the trainer already has an input channel named {CHANNEL_NAME!r}, which remote-debug uses for its "
                "package: rename yours"
            )
    trainer.input_data_config = [*kept, configs.InputData(channel_name=CHANNEL_NAME, data_source=bundle)]


def _training_job_clients(trainer: Any, boto_session: Any) -> list[Any]:
    """The client ``TrainingJob.create`` will use, from sagemaker-core's per-session cache.

    Asked through the very class the trainer's module calls, after the session-level handler is
    registered, so that a client created now inherits it and one cached earlier gets it too.
    Best effort: the session-level registration covers clients created later anyway.
    """
    training_job = getattr(sys.modules.get(type(trainer).__module__), "TrainingJob", None)
    get_client = getattr(training_job, "get_sagemaker_client", None)
    if get_client is None:
        return []
    try:
        return [get_client(session=boto_session, region_name=None)]
    except Exception:  # e.g. no region yet: train() will fail with the SDK's own message
        return []
