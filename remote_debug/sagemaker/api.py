"""``remote_debug.enable(target, ...)``: one call that makes a SageMaker training job debuggable.

``target`` is one of

* a CreateTrainingJob request dict (boto3 level): returns a new, debuggable dict;
* a SageMaker Python SDK v2 estimator (``sagemaker.estimator.Estimator``, ``sagemaker.pytorch.PyTorch``
  and the other framework estimators): configured in place and returned;
* a ``ModelTrainer`` (SDK v3 ``sagemaker.train``, or ``sagemaker.modules.train`` in late v2):
  configured in place and returned.

For SDK objects the job-specific parts (spec, key, tags, entry wrapping) are applied to the
CreateTrainingJob request the SDK sends on ``fit()``/``train()`` (see ``intercept``), so each run
of the estimator gets its own key and the spec names the real job.

``transport="hybrid"`` (with ``hybrid_role=``) also creates the job's SSM hybrid activation and
puts it in the job's ``remote-debug`` input channel, never in the request; an activation whose
CreateTrainingJob fails is deleted (see :mod:`~remote_debug.sagemaker.hybrid_activation`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from remote_debug.local.keys import ensure_job_key
from remote_debug.local.paths import StatePaths
from remote_debug.sagemaker import hybrid_activation
from remote_debug.sagemaker.bundle import CHANNEL_ROOT
from remote_debug.sagemaker.owner import resolve_owner
from remote_debug.sagemaker.request import (
    HYBRID_TRANSPORT,
    NATIVE_TRANSPORT,
    TAG_ACTIVATION,
    DebugOptions,
    EnableError,
    check_supported,
    enable_request,
)
from remote_debug.spec import ContractError, check_job_name


def enable(
    target: Any,
    *,
    ide: str = "vscode",
    ranks: str | Sequence[int] = "all",
    wait: float = 0,
    sshd_port: int = 0,
    port_base: int = 0,
    transport: str = NATIVE_TRANSPORT,
    hybrid_role: str | None = None,
    hold_on_failure: float = 0,
    job_name: str | None = None,
    owner: str | None = None,
    key_dir: str | Path | None = None,
    package_uri: str | None = None,
    boto_session: Any = None,
) -> Any:
    """Make ``target`` debuggable; see the module docstring for what ``target`` may be.

    ide, ranks ("all" or "0,2" or [0, 2]), wait (seconds each rank waits for a debugger),
    sshd_port / port_base (0: any free port), transport ("ssm" = SageMaker's native SSM target;
    "hybrid", "direct"): the debug spec.  hybrid_role (required for "hybrid", refused otherwise): the
    IAM role, name or ARN, of the nodes' SSM managed instances.  hold_on_failure: seconds a rank that
    dies of an uncaught exception stays alive, stopped at the exception for a post-mortem attach, before
    it exits with the same failure (0: exit at once).  owner: the owner tag's value (default:
    your ``aws:userid`` from STS).  key_dir: the remote-debug state dir holding per-job keys (default
    ``~/.remote-debug``, or ``$REMOTE_DEBUG_HOME``).  Request dicts only: job_name (else the
    request's ``TrainingJobName``), package_uri (an S3 prefix holding :func:`bundle_dir`, added as
    the ``remote-debug`` input channel; "hybrid" writes the job's ``ssm-activation.json`` there, so
    it must be this job's own prefix), boto_session (for STS when owner is not given; "hybrid": SSM
    and S3 in the job's region, and SageMaker clients created from it afterwards delete the
    activation if CreateTrainingJob fails - for another client, see
    :func:`~remote_debug.sagemaker.hybrid_activation.watch_client`).
    """
    options = DebugOptions(
        ide=ide, ranks=ranks, wait=wait, sshd_port=sshd_port, port_base=port_base, transport=transport,
        hybrid_role=hybrid_role, hold_on_failure=hold_on_failure,
    )
    paths = StatePaths(Path(key_dir).expanduser().absolute()) if key_dir is not None else StatePaths.default()
    if isinstance(target, Mapping):
        check_supported(target)
        resolved_owner = resolve_owner(owner, boto_session)
        activations, session = None, None
        if options.transport == HYBRID_TRANSPORT:
            from remote_debug.local import aws

            assert options.hybrid_role is not None  # DebugOptions checked it
            session = boto_session if boto_session is not None else aws.session()
            activations = hybrid_activation.Activations.for_session(options.hybrid_role, session)
        out = enable_with_key(
            target, options, owner=resolved_owner, paths=paths, job_name=job_name, package_uri=package_uri,
            activations=activations,
        )
        if activations is not None:
            hybrid_activation.watch_all(session)  # SageMaker clients made from it from now on
        return out
    kind = sdk_kind(target)
    if kind is None:
        raise EnableError(
            f"enable() takes a CreateTrainingJob request dict, a SageMaker SDK v2 estimator or a ModelTrainer; "
            f"got {type(target).__module__}.{type(target).__qualname__}"
        )
    if job_name is not None:
        raise EnableError(
            "job_name applies to request dicts: the SDK names the job when it starts it "
            "(SDK v2: estimator.fit(job_name=...); ModelTrainer: base_job_name)"
        )
    if package_uri is not None or boto_session is not None:
        raise EnableError("package_uri and boto_session apply to request dicts: the SDK object has its own session")
    if kind == "estimator":
        from remote_debug.sagemaker import sdk_v2

        return sdk_v2.enable_estimator(target, options, owner=owner, paths=paths)
    from remote_debug.sagemaker import sdk_v3

    return sdk_v3.enable_model_trainer(target, options, owner=owner, paths=paths)


def enable_with_key(
    request: Mapping[str, Any],
    options: DebugOptions,
    *,
    owner: str,
    paths: StatePaths,
    job_name: str | None = None,
    package_root: str = CHANNEL_ROOT,
    package_uri: str | None = None,
    activations: hybrid_activation.Activations | None = None,
) -> dict[str, Any]:
    """:func:`enable_request` with the job's client key pair (created on first use, private key 0600);
    for the hybrid transport (``activations`` required) plus the job's SSM activation."""
    if (options.transport == HYBRID_TRANSPORT) != (activations is not None):
        raise EnableError("internal: the hybrid transport, and only it, takes an SSM activation maker")
    name = job_name or request.get("TrainingJobName")
    if not isinstance(name, str) or not name:
        raise EnableError("the request has no TrainingJobName: set it (or pass job_name=...)")
    try:
        check_job_name(name)
    except ContractError as exc:
        raise EnableError(str(exc)) from None
    # A dry run with a stand-in key of the real key's shape first: a request we refuse must not
    # leave a key pair behind for a job that never runs.
    build = partial(
        enable_request, request, options, owner=owner, job_name=name, package_root=package_root,
        package_uri=package_uri,
    )
    dry = build(public_key=f"ssh-ed25519 {'A' * 68} remote-debug:{name}")
    previous = hybrid_activation.tag_value(request.get("Tags"), TAG_ACTIVATION)
    if previous:  # an earlier enable() of this request, not submitted: its activation goes (if ours)
        hybrid_activation.release(previous, "replaced by a new enable()")
    if activations is None:
        _key_path, public_key = ensure_job_key(paths, name)
        out = build(public_key=public_key)
    else:
        activation_id = activations.create(dry, owner=owner)
        try:
            _key_path, public_key = ensure_job_key(paths, name)
            out = hybrid_activation.with_activation_tag(build(public_key=public_key), activation_id)
        except BaseException:
            hybrid_activation.release(activation_id, "enable() failed")
            raise
    return out


def sdk_kind(target: Any) -> str | None:
    """"estimator" (SDK v2), "trainer" (ModelTrainer), or None - by class name, without importing the SDK."""
    for cls in type(target).__mro__:
        module = cls.__module__ or ""
        if not module.startswith("sagemaker."):
            continue
        if cls.__name__ == "EstimatorBase":
            return "estimator"
        if cls.__name__ == "ModelTrainer":
            return "trainer"
    return None
