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
CreateTrainingJob fails is deleted (see :mod:`~remote_debug.laptop.aws.enable.hybrid_activation`).  Sessions
to its managed instances need the account's advanced-instances tier: ``enable()`` reads it and warns
(``warnings``, category :class:`~remote_debug.laptop.aws.enable.terms.RemoteDebugWarning`) unless it is set.
``transport="direct"`` needs the job in a VPC (``VpcConfig``).

``keep_alive=S`` keeps every node up S seconds after the training command ends (for ``remote-debug sync`` /
``run``; ``release`` / ``stop`` end it sooner).  On SageMaker that hold is billed and runs inside the job's
``MaxRuntimeInSeconds``: ``enable()`` says so once (a ``RemoteDebugWarning``), and refuses a keep-alive that
does not fit in the job's maximum runtime.  Only the hook that wraps the job's entry can hold a node, so a
keep-alive needs a ``ContainerEntrypoint`` (a request that names one, an SDK v2 estimator with
``container_entry_point``, a ModelTrainer with ``source_code``): without one it is refused.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import remote_debug.laptop.aws.enable.hybrid_activation as hybrid_activation
import remote_debug.laptop.aws.enable.sdk_v2 as sdk_v2
import remote_debug.laptop.aws.enable.sdk_v3 as sdk_v3
from remote_debug.contract.spec import (
    ContractError,
    DebugOptions,
    RankDebugger,
    RankSelection,
    parse_choice,
    parse_ranks,
)
from remote_debug.laptop.aws.enable.keyed_request import enable_with_key
from remote_debug.laptop.aws.enable.owner import resolve_owner
from remote_debug.laptop.aws.enable.request import (
    check_keep_alive_entry,
    check_runtime,
    check_supported,
    has_entrypoint,
    keep_alive_note,
    max_runtime,
)
from remote_debug.laptop.aws.enable.terms import EnableError, JobTransport, RemoteDebugWarning
from remote_debug.laptop.core.paths import StatePaths


def enable(
    target: Any,
    *,
    ide: str = "vscode",
    ranks: str | Sequence[int] = "all",
    wait: float = 0,
    sshd_port: int = 0,
    port_base: int = 0,
    transport: str = "ssm",
    hybrid_role: str | None = None,
    hold_on_failure: float = 0,
    keep_alive: float = 0,
    job_name: str | None = None,
    owner: str | None = None,
    key_dir: str | Path | None = None,
    package_uri: str | None = None,
    boto_session: Any = None,
) -> Any:
    """Make ``target`` debuggable; see the module docstring for what ``target`` may be.

    The job's Python must be 3.10 or newer: an image whose tag (or an SDK v2 estimator whose
    ``py_version``) names an older one is refused.  Without a ``ContainerEntrypoint`` to wrap (SDK v2
    framework estimators), the hook comes in through the job's ``PYTHONPATH``, which then replaces an
    ``ENV PYTHONPATH`` of the image: give that value in the request's (or estimator's) environment, where
    it is kept after ours.

    ide, ranks ("all" or "0,2" or [0, 2]), wait (seconds each rank waits for a debugger),
    sshd_port / port_base (0: any free port), transport ("ssm" = SageMaker's native SSM target;
    "hybrid", "direct"): the debug spec.  hybrid_role (required for "hybrid", refused otherwise): the
    IAM role, name or ARN, of the nodes' SSM managed instances.  hold_on_failure: seconds a rank that
    dies of an uncaught exception stays alive, stopped at the exception for a post-mortem attach, before
    it exits with the same failure (0: exit at once).  keep_alive: seconds every node stays up after the
    training command ends, success or failure, until ``remote-debug release JOB`` / ``stop JOB`` (0: the job
    ends with the command); billed, and inside ``MaxRuntimeInSeconds`` (SDK v2: ``max_run``; ModelTrainer:
    ``StoppingCondition``), which must exceed it; it needs the entry wrapped by the hook (a ``ContainerEntrypoint``;
    refused for an SDK v2 estimator without ``container_entry_point``, whose training toolkit is the entry).
    owner: the owner tag's value (default: your ``aws:userid`` from STS).  key_dir: the remote-debug state dir
    holding per-job keys (default ``~/.remote-debug``, or ``$REMOTE_DEBUG_HOME``).  Request dicts only: job_name
    (else the request's ``TrainingJobName``), package_uri (an S3 prefix holding :func:`bundle_dir`, added as
    the ``remote-debug`` input channel; "hybrid" writes the job's ``ssm-activation.json`` there, so
    it must be this job's own prefix), boto_session (for STS when owner is not given; "hybrid": SSM
    and S3 in the job's region, and SageMaker clients created from it afterwards delete the
    activation if CreateTrainingJob fails - for another client, see
    :func:`~remote_debug.laptop.aws.enable.hybrid_activation.watch_client`).
    """
    # What the user chose, checked once, before any side effect; everything below passes it on.
    route = JobTransport.parse(transport, hybrid_role)
    options = debug_options(
        ide=ide,
        ranks=ranks,
        wait=wait,
        sshd_port=sshd_port,
        port_base=port_base,
        hold_on_failure=hold_on_failure,
        keep_alive=keep_alive,
    )
    paths = StatePaths(Path(key_dir).expanduser().absolute()) if key_dir is not None else StatePaths.default()
    if isinstance(target, Mapping):
        check_supported(target)
        # all three again on the final request: here, before STS is asked
        check_keep_alive_entry(options.keep_alive, wrapped=has_entrypoint(target))
        check_runtime(target, options.keep_alive)
        resolved_owner = resolve_owner(owner, boto_session)
        activations, session = None, None
        if route.hybrid:
            from remote_debug.laptop.aws import clients as aws

            assert route.hybrid_role is not None  # JobTransport checked it
            session = boto_session if boto_session is not None else aws.session()
            activations = hybrid_activation.Activations.for_session(route.hybrid_role, session)
        out = enable_with_key(
            target,
            options,
            transport=route,
            owner=resolved_owner,
            paths=paths,
            job_name=job_name,
            package_uri=package_uri,
            activations=activations,
        )
        if activations is not None:
            hybrid_activation.watch_all(session)  # SageMaker clients made from it from now on
            hybrid_activation.warn_unless_advanced_tier(activations.ssm)  # an account setting: not a refusal
        _note_keep_alive(options, max_runtime(out)[0])
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
        enabled = sdk_v2.enable_estimator(target, options, route, owner=owner, paths=paths)
        _note_keep_alive(options, sdk_v2.max_runtime(target))
        return enabled
    enabled = sdk_v3.enable_model_trainer(target, options, route, owner=owner, paths=paths)
    _note_keep_alive(options, sdk_v3.max_runtime(target))
    return enabled


def _note_keep_alive(options: DebugOptions, limit: Any) -> None:
    """One warning per enable() that keeps nodes up: the hold is billed, and runs inside the job's maximum runtime
    (``limit``, seconds, when known).  Attributed to the line that called enable() (stacklevel 3: this, enable())."""
    if options.keep_alive:
        warnings.warn(keep_alive_note(options.keep_alive, limit), RemoteDebugWarning, stacklevel=3)


def debug_options(
    *,
    ide: str = "vscode",
    ranks: str | Sequence[int] = "all",
    wait: float = 0,
    sshd_port: int = 0,
    port_base: int = 0,
    hold_on_failure: float = 0,
    keep_alive: float = 0,
) -> DebugOptions:
    """enable()'s keyword arguments as :class:`~remote_debug.contract.spec.DebugOptions`, or one-line EnableError.

    Lenient as a Python API is: numbers may come as numeric strings, ranks as "0,2" or a list."""
    try:
        return DebugOptions(
            # "vscode" / "pycharm": the editor, named as the spec names what its ranks run
            ide=parse_choice(RankDebugger, ide, "IDE"),
            ranks=_rank_selection(ranks),
            port_base=int(port_base),
            sshd_port=int(sshd_port),
            wait_seconds=float(wait),
            hold_on_failure=float(hold_on_failure),
            keep_alive=float(keep_alive),
        )
    except (ContractError, TypeError, ValueError) as exc:
        raise EnableError(str(exc)) from None


def _rank_selection(ranks: str | Sequence[int]) -> RankSelection:
    return parse_ranks(ranks) if isinstance(ranks, str) else tuple(sorted({int(r) for r in ranks}))


def sdk_kind(target: Any) -> str | None:
    """ "estimator" (SDK v2), "trainer" (ModelTrainer), or None - by class name, without importing the SDK."""
    for cls in type(target).__mro__:
        module = cls.__module__ or ""
        if not module.startswith("sagemaker."):
            continue
        if cls.__name__ == "EstimatorBase":
            return "estimator"
        if cls.__name__ == "ModelTrainer":
            return "trainer"
    return None
