"""The core of ``enable()``: a CreateTrainingJob request dict in, a debuggable request dict out.

Everything else (the SDK wrappers, the launcher templates) ends up here, so what a job gets is
decided in one place and can be checked against botocore's model:

* ``Environment`` gains the debug spec (``spec.DebugSpec.to_env()``: IDE, ranks, ports, wait,
  the per-job client *public* key, transport).
* where the request names the entry (``AlgorithmSpecification.ContainerEntrypoint``: BYOC, SDK v3
  drivers), the entry is wrapped so the hook runs it: ``/bin/sh -c <find python> <hook program>
  <original entry...>``; ``ContainerArguments`` are left alone (the container still gets them
  after the entry) and the user's script is never touched.  A job whose image lacks python or the
  shipped package runs the original entry unchanged, after one log line.  The hook puts our
  sitecustomize on the command's ``PYTHONPATH`` itself, in front of the image's own, so the request
  sets no ``PYTHONPATH``: one in ``Environment`` would replace the image's ``ENV PYTHONPATH``.
* where it does not (the SDK v2 training toolkit runs ``python <sagemaker_program>``, torchrun or
  mpirun itself), ``PYTHONPATH`` = our ``inject`` dir, then the request's own ``PYTHONPATH`` if it has
  one, so every Python process of the job - launchers, torchrun/MPI ranks, on every node - imports
  our sitecustomize: ranks get a debug listener, and the first process of a node without a hook
  starts the node's sshd + manifest in the background (``container/node/bootstrap.py``).  SageMaker's
  ``Environment`` replaces the image's ``ENV`` of the same name, so an image's own ``PYTHONPATH`` is
  lost on this path: pass it in the request's (or the estimator's) environment to keep it.  (The
  toolkit hands its child processes ``PYTHONPATH`` = its own ``sys.path``, which includes ours: no
  toolkit-side way around it.)
* ``RemoteDebugConfig={"EnableRemoteDebug": true}`` for the ``ssm`` transport (SageMaker's native
  SSM target ``sagemaker-training-job:<job>_algo-<n>`` exists only then); never for ``hybrid``,
  which replaces it with the node's own SSM agent (see :mod:`~remote_debug.laptop.aws.enable.hybrid_activation`
  for its activation, which ``keyed.enable_with_key`` adds on top of this request);
* tags ``remote-debug:owner`` (the caller's ``aws:userid``, what IAM policies compare with
  ``${aws:userid}``) and ``remote-debug:enabled``; ``hybrid`` adds ``remote-debug:transport=hybrid``
  (the laptop picks the job's transport from it);
* SDK v2 MPI jobs: ``-x NAME`` for each spec variable in the toolkit's custom mpirun options,
  because mpirun starts the ranks of other nodes through ssh, whose sessions do not inherit the
  container environment.

Refused with one line (:class:`EnableError`): network isolation and built-in / Marketplace
algorithms (SageMaker offers no remote debugging there), images whose tag names a Python older than
the hook's 3.10 (``...:1.13.1-gpu-py39-...``: the job would run, undebuggable), ``transport='direct'``
without ``VpcConfig``, a keep-alive that does not fit in ``StoppingCondition.MaxRuntimeInSeconds``
(SageMaker stops the job there, hold or not), a keep-alive without a ``ContainerEntrypoint`` to wrap (only
the hook can hold a node after its command: in env-hook mode the image's own entry - the SDK v2 training
toolkit - is the container's process, and the node ends with it), bad names, values SageMaker would reject.
Every refusal happens in :func:`draft_request`, before the job's client key is known (or made):
the draft lacks only the key, which :meth:`DraftRequest.finish` puts in.
"""

from __future__ import annotations

import copy
import json
import math
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from remote_debug.contract.spec import (
    ENV_CLIENT_KEY,
    ENV_JOB_SECRET,
    SPEC_OPTIONAL_ENV_NAMES,
    SPEC_VERSION,
    ContractError,
    DebugOptions,
    DebugSpec,
    Transport,
    check_job_name,
    spec_env,
)
from remote_debug.laptop.aws.clients import TAG_ACTIVATION, TAG_ENABLED, TAG_OWNER, TAG_TRANSPORT
from remote_debug.laptop.aws.enable.bundle import CHANNEL_NAME, CHANNEL_ROOT, inject_dir
from remote_debug.laptop.aws.enable.terms import (
    TAGS_MAX,
    EnableError,
    JobTransport,
    direct_needs_vpc,
    network_isolation_error,
)

# SageMaker's limits (botocore's model of CreateTrainingJob).
ENV_KEY_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
ENV_VALUE_MAX = 512
ENV_MAX = 100
TAG_VALUE_MAX = 256
ENTRY_ITEM_MAX = 256
_TAG_PUNCTUATION = set("_.:/=+-@")

# The entry wrapper.  $0 is the hook program below and "$@" the original entry; no python (or a
# python that cannot import the hook) means the original entry runs exactly as it would have.
WRAP_SHELL = "/bin/sh"
WRAP_SCRIPT = 'P=$(command -v python3 || command -v python) || exec "$@"; exec "$P" -c "$0" "$@"'
# One line: SageMaker checks every ContainerEntrypoint item against the model's pattern ``.*`` on its
# server, whole value, where "." matches no line terminator, and refuses the job with a
# ValidationException otherwise (botocore, moto and SDKs never check patterns).  The try/except a
# fallback needs cannot share a line with other statements, so it is exec'd from a string whose line
# breaks are escapes ("\n"), not characters.
_HOOK_PROGRAM = (
    "import os,sys;sys.path.append({root!r});"
    'exec("try:from remote_debug.container.node.hook import main\\n'
    "except Exception as e:sys.stderr.write('[remote-debug] no hook: %s\\\\n'%e);"
    'os.execvp(sys.argv[1],sys.argv[1:])");'
    "sys.exit(main())"
)

# Repositories of SageMaker's built-in algorithm images (from the SDK's image_uri_config).  The
# XGBoost framework image doubles as the built-in algorithm: it is one only without a script.
BUILTIN_ALGORITHM_REPOS = frozenset(
    {
        "blazingtext",
        "factorization-machines",
        "forecasting-deepar",
        "image-classification",
        "ipinsights",
        "kmeans",
        "knn",
        "lda",
        "linear-learner",
        "ntm",
        "object-detection",
        "object2vec",
        "pca",
        "randomcutforest",
        "semantic-segmentation",
        "seq2seq",
        "xgboost",
    }
)
SCRIPT_MODE_ONLY_REPOS = frozenset({"sagemaker-xgboost"})
PROGRAM_HYPERPARAMETER = "sagemaker_program"

# The container side is Python 3.10+ code (pyproject's requires-python).  SageMaker's framework images
# name their Python in the tag ("2.5-gpu-py311", "1.13.1-gpu-py39-cu117-ubuntu20.04-sagemaker") and SDK
# v2 estimators in py_version ("py39"); "py3" alone (old images) says nothing.
MIN_PYTHON = (3, 10)
_PY_TAG_RE = re.compile(r"(?:^|[-_.])py([23])(\d{1,2})(?=$|[-_.])")
_PY_VERSION_RE = re.compile(r"^py([23])(\d{1,2})$")

# MaxRuntimeInSeconds when the request's StoppingCondition has none (botocore's model: "The default value is 1
# day").  A keep-alive's hold runs inside it: SageMaker stops the job at that limit, and bills every second of it.
DEFAULT_MAX_RUNTIME = 24 * 3600
MAX_RUNTIME_SETTING = "StoppingCondition.MaxRuntimeInSeconds"

# SDK v2 training toolkit: (flag, mpirun options) hyperparameters of the runners that use mpirun.
MPI_HYPERPARAMETERS = (
    ("sagemaker_mpi_enabled", "sagemaker_mpi_custom_mpi_options"),
    ("sagemaker_distributed_dataparallel_enabled", "sagemaker_distributed_dataparallel_custom_mpi_options"),
)


@dataclass(frozen=True)
class DraftRequest:
    """A request made debuggable but for the job's client key: every refusal has already happened.

    ``enable()`` makes the job's key pair only for a draft, so a request it refuses leaves no key
    behind for a job that never runs.  ``request`` is the final request without the key (its
    ``Environment`` has every other spec variable; room for the key is counted), fit for what needs
    the job's shape before the key exists (the hybrid transport's SSM activation).
    """

    request: dict[str, Any]
    job_name: str
    options: DebugOptions
    transport: JobTransport
    package_root: str
    user_environment: dict[str, Any]  # the request's own Environment, as given
    env_hook: bool = True  # no entry to wrap: the hook comes in through PYTHONPATH (see the module doc)

    def finish(self, public_key: str, job_secret: str) -> dict[str, Any]:
        """The debuggable request, with ``public_key`` (the job's client key, ``keys.ensure_job_key``)
        and ``job_secret`` (derived from its private key, ``keys.job_secret``)."""
        try:
            spec = DebugSpec(
                job_name=self.job_name,
                client_public_key=public_key,
                job_secret=job_secret,
                transport=self.transport.kind,
                options=self.options,
            )
        except ContractError as exc:
            raise EnableError(str(exc)) from None
        out = copy.deepcopy(self.request)
        env = spec.to_env()
        out["Environment"] = _environment(self.user_environment, env, self.package_root, env_hook=self.env_hook)
        _forward_to_mpi(out, [*env, *(["PYTHONPATH"] if "PYTHONPATH" in out["Environment"] else [])])
        return out


def draft_request(
    request: Mapping[str, Any],
    options: DebugOptions,
    *,
    transport: JobTransport | None = None,
    owner: str,
    job_name: str | None = None,
    package_root: str = CHANNEL_ROOT,
    package_uri: str | None = None,
) -> DraftRequest:
    """Everything :func:`enable_request` does but the client key, refusals included (the input is not
    modified).  ``transport``: the native SSM target unless given."""
    transport = JobTransport() if transport is None else transport
    if not isinstance(request, Mapping):
        raise EnableError(f"expected a CreateTrainingJob request dict, got {type(request).__name__}")
    out: dict[str, Any] = copy.deepcopy(dict(request))
    name = job_name or out.get("TrainingJobName")
    if not isinstance(name, str) or not name:
        raise EnableError("the request has no TrainingJobName: set it (or pass job_name=...)")
    try:
        out["TrainingJobName"] = check_job_name(name)
    except ContractError as exc:
        raise EnableError(str(exc)) from None
    check_supported(out)
    algorithm = out.get("AlgorithmSpecification")
    wrapped = has_entrypoint(out)
    check_keep_alive_entry(options.keep_alive, wrapped=wrapped)
    check_runtime(out, options.keep_alive)
    if transport.kind == Transport.DIRECT:
        direct_needs_vpc(bool((out.get("VpcConfig") or {}).get("Subnets")))

    user_environment = copy.deepcopy(dict(out.get("Environment") or {}))
    # every spec variable but the key, which is not made yet (its name is counted)
    out["Environment"] = _environment(
        user_environment,
        spec_env(name, transport.kind, options),
        package_root,
        env_hook=not wrapped,
        to_come=(ENV_CLIENT_KEY, ENV_JOB_SECRET),
    )
    if wrapped:
        assert isinstance(algorithm, Mapping)
        out["AlgorithmSpecification"] = {
            **algorithm,
            "ContainerEntrypoint": wrap_entrypoint(list(algorithm["ContainerEntrypoint"]), package_root),
        }
    if transport.kind == Transport.SSM:
        out["RemoteDebugConfig"] = {**(out.get("RemoteDebugConfig") or {}), "EnableRemoteDebug": True}
    out["Tags"] = _tags(out.get("Tags"), owner, transport.kind)
    if package_uri:
        out["InputDataConfig"] = _with_package_channel(out.get("InputDataConfig"), package_uri)
    return DraftRequest(out, name, options, transport, package_root, user_environment, env_hook=not wrapped)


def enable_request(
    request: Mapping[str, Any],
    options: DebugOptions,
    *,
    transport: JobTransport | None = None,
    owner: str,
    public_key: str,
    job_secret: str,
    job_name: str | None = None,
    package_root: str = CHANNEL_ROOT,
    package_uri: str | None = None,
) -> dict[str, Any]:
    """A debuggable copy of ``request`` (the input is not modified).

    ``options``: what the user chose (IDE, ranks, ports, wait, hold); ``transport``: how the laptop
    reaches the job (default: SageMaker's native SSM target).  ``public_key`` is the job's client
    public key (see ``keys.ensure_job_key``); ``owner`` the value of the owner tag; ``package_root``
    where the bundle is in the container; ``package_uri`` an S3 prefix holding the bundle, added as
    the ``remote-debug`` input channel.
    """
    draft = draft_request(
        request,
        options,
        transport=transport,
        owner=owner,
        job_name=job_name,
        package_root=package_root,
        package_uri=package_uri,
    )
    return draft.finish(public_key, job_secret)


# --- refusals --------------------------------------------------------------------------------------


def check_supported(request: Mapping[str, Any]) -> None:
    """Refuse jobs that cannot be debugged remotely (network isolation, built-in/Marketplace algorithms,
    a Python too old for the hook)."""
    if request.get("EnableNetworkIsolation"):
        raise network_isolation_error("EnableNetworkIsolation")
    algorithm = request.get("AlgorithmSpecification") or {}
    if algorithm.get("AlgorithmName"):
        raise EnableError(
            f"the job runs the algorithm resource {algorithm['AlgorithmName']!r} (built-in or Marketplace), "
            "which SageMaker cannot debug remotely: use a framework or your own image"
        )
    hyperparameters = request.get("HyperParameters") or {}
    check_image(algorithm.get("TrainingImage"), has_script=PROGRAM_HYPERPARAMETER in hyperparameters)


def check_image(image: Any, *, has_script: bool) -> None:
    if not isinstance(image, str) or not image:
        return
    name, _, tag = image.rsplit("/", 1)[-1].split("@", 1)[0].partition(":")
    if name in BUILTIN_ALGORITHM_REPOS or (name in SCRIPT_MODE_ONLY_REPOS and not has_script):
        raise EnableError(
            f"{name!r} is a SageMaker built-in algorithm image, which cannot be debugged remotely: "
            "use a framework estimator with your own script, or your own image"
        )
    found = _PY_TAG_RE.search(tag)
    if found:
        check_python((int(found.group(1)), int(found.group(2))), f"image {name}:{tag}")


def check_py_version(py_version: Any) -> None:
    """An SDK v2 estimator's ``py_version`` ("py39"), where it names a Python."""
    found = _PY_VERSION_RE.fullmatch(py_version) if isinstance(py_version, str) else None
    if found:
        check_python((int(found.group(1)), int(found.group(2))), f"py_version={py_version!r}")


def check_python(python: tuple[int, int], source: str) -> None:
    """Refuse a job whose Python is older than the hook's: it would start, pay for its instances and
    run the training undebugged (the hook steps aside on an old Python), which is not what enable() is
    for; the image's tag or ``py_version`` says so for certain, so the launcher hears it now."""
    if python < MIN_PYTHON:
        wanted = ".".join(map(str, MIN_PYTHON))
        raise EnableError(
            f"{source} runs Python {python[0]}.{python[1]}, but remote-debug runs in the job and needs Python >= "
            f"{wanted} there: use an image with py{MIN_PYTHON[0]}{MIN_PYTHON[1]} or newer (SDK v2: a "
            f"framework_version that has py_version='py{MIN_PYTHON[0]}{MIN_PYTHON[1]}' or later)"
        )


def has_entrypoint(request: Mapping[str, Any]) -> bool:
    """Whether the request names its entry (``AlgorithmSpecification.ContainerEntrypoint``), which the hook
    then wraps; without one the hook comes in through ``PYTHONPATH`` (env-hook mode, see the module doc)."""
    algorithm = request.get("AlgorithmSpecification")
    return isinstance(algorithm, Mapping) and bool(algorithm.get("ContainerEntrypoint"))


REQUEST_WITHOUT_ENTRY = "the request has no AlgorithmSpecification.ContainerEntrypoint"


def check_keep_alive_entry(keep_alive: float, *, wrapped: bool, why: str = REQUEST_WITHOUT_ENTRY) -> None:
    """Refuse a keep-alive for a job whose entry the hook does not wrap (``wrapped`` False; ``why``: what the
    caller lacks, in its own terms).  Only the hook, as the parent of the training command, can hold a node after
    the command ends; in env-hook mode the image's own entry (the SDK v2 training toolkit) is the container's
    process, the node daemon cannot outlive it, and the job would end with its command - keep-alive silently
    ignored, ``remote-debug run`` with no node to run on."""
    if not keep_alive or wrapped:
        return
    raise EnableError(
        f"keep-alive {_seconds(keep_alive)} s needs the job's entry wrapped by remote-debug's hook, but {why}: the "
        "image's own entry runs the training and each node ends with it; use a ContainerEntrypoint (an SDK v3 "
        "ModelTrainer with source_code, a BYOC entrypoint such as SDK v2 Estimator(container_entry_point=[...]), or "
        "templates/launchers/boto3_request.py), or drop the keep-alive"
    )


def max_runtime(request: Mapping[str, Any]) -> tuple[Any, bool]:
    """The request's ``MaxRuntimeInSeconds`` as given, and whether it is SageMaker's default (none given)."""
    stopping = request.get("StoppingCondition")
    given = stopping.get("MaxRuntimeInSeconds") if isinstance(stopping, Mapping) else None
    return (DEFAULT_MAX_RUNTIME, True) if given is None else (given, False)


def check_runtime(request: Mapping[str, Any], keep_alive: float) -> None:
    """Refuse a ``keep_alive`` (seconds) that does not fit in the request's ``MaxRuntimeInSeconds``."""
    limit, default = max_runtime(request)
    check_keep_alive(keep_alive, limit, setting=MAX_RUNTIME_SETTING, default=default)


def check_keep_alive(keep_alive: float, limit: Any, *, setting: str, default: bool = False) -> None:
    """Refuse a keep-alive (seconds) that does not fit in the job's maximum runtime ``limit``: the hold comes
    after the training command, inside the same ``MaxRuntimeInSeconds``, so a keep-alive of the whole limit or
    more would leave the training no time at all.  ``setting``: how the caller names the limit (the request's
    field, an SDK argument); ``default``: the limit is SageMaker's own, not given.  A limit that is not a number
    (an SDK pipeline variable, a bad value SageMaker's validation will refuse) is not checked here."""
    limit = _finite(limit)
    if not keep_alive or limit is None or limit > keep_alive:
        return
    given = _seconds(keep_alive)
    whose = (
        f"SageMaker's default {setting} ({_seconds(limit)} s: none given)"
        if default
        else (f"the job's {setting} ({_seconds(limit)} s)")
    )
    largest = f"keep alive at most {int(limit) - 1} s" if limit >= 2 else "drop the keep-alive"
    raise EnableError(
        f"keep-alive {given} s does not fit in {whose}, which the hold counts against (SageMaker stops the job "
        f"there): raise {setting} to more than {given} s plus the training's own run time, or {largest}"
    )


def keep_alive_note(keep_alive: float, limit: Any = None) -> str:
    """The one line ``enable()`` warns with when the job keeps its nodes up (``limit``: the job's maximum runtime
    in seconds, when known)."""
    known = _finite(limit)
    within = "" if known is None else f" of {_seconds(known)} s"
    return (
        f"keep_alive={_seconds(keep_alive)}: every node stays up to {_seconds(keep_alive)} s after the training "
        f"command ends (until `remote-debug release JOB` or `remote-debug stop JOB` ends it sooner); SageMaker bills "
        f"that time like training, and it counts against the job's MaxRuntimeInSeconds{within}"
    )


def _finite(value: Any) -> float | None:
    """``value`` if it is a finite number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _seconds(value: float) -> str:
    """3600, not 3600.0 or 3.6e+03: (finite) seconds as the user reads them in a message."""
    return str(int(value)) if value == int(value) else f"{value:.3f}".rstrip("0").rstrip(".")


# --- the pieces ------------------------------------------------------------------------------------


def _environment(
    existing: Any,
    spec_vars: Mapping[str, str],
    package_root: str,
    *,
    env_hook: bool = True,
    to_come: Sequence[str] = (),
) -> dict[str, str]:
    """The job's environment: the request's own, the spec, and (``env_hook``: no entry to wrap) our
    sitecustomize first on PYTHONPATH; checked against SageMaker's limits, with room for the variables
    named in ``to_come``."""
    # an earlier enable()'s optional spec variables (hold, keep-alive) go: the options given now decide, and a
    # keep-alive left behind would keep (and bill) nodes nobody asked for
    env = {str(k): str(v) for k, v in dict(existing or {}).items() if k not in SPEC_OPTIONAL_ENV_NAMES}
    env.update(spec_vars)
    ours = inject_dir(package_root)
    given = env.get("PYTHONPATH")
    if env_hook:
        theirs = [p for p in (given or "").split(":") if p and p != ours]
        env["PYTHONPATH"] = ":".join([ours, *theirs])  # ours first: Python imports the first sitecustomize
    elif given is not None and ours in given.split(":"):  # set by an earlier enable(): the user's part stays
        theirs = [p for p in given.split(":") if p != ours]
        if any(theirs):
            env["PYTHONPATH"] = ":".join(theirs)
        else:
            del env["PYTHONPATH"]
    # else: the request's own PYTHONPATH as given, or none.  The hook puts ours in front of whatever the
    # container has - the image's ENV PYTHONPATH, which a value here would replace.
    count = len(env.keys() | set(to_come))
    if count > ENV_MAX:
        raise EnableError(f"the job would have {count} environment variables; SageMaker allows {ENV_MAX}")
    for key, value in env.items():
        if not ENV_KEY_RE.fullmatch(key) or len(key) > ENV_VALUE_MAX:
            raise EnableError(
                f"environment variable name {key[:80]!r} is not accepted by SageMaker ([A-Za-z_][A-Za-z0-9_]*)"
            )
        if len(value) > ENV_VALUE_MAX:
            raise EnableError(
                f"environment variable {key} would be {len(value)} characters; SageMaker allows {ENV_VALUE_MAX}"
            )
    return env


def _forward_to_mpi(request: dict[str, Any], names: Sequence[str]) -> None:
    hyperparameters = request.get("HyperParameters")
    if not isinstance(hyperparameters, Mapping):
        return
    updated = dict(hyperparameters)
    for flag, options_key in MPI_HYPERPARAMETERS:
        if _decode(updated.get(flag)) not in (True, "true", "True"):
            continue
        current = _decode(updated.get(options_key, ""))
        options = current if isinstance(current, str) else ""
        tokens = options.split()
        present = {tokens[i + 1].split("=", 1)[0] for i, t in enumerate(tokens[:-1]) if t == "-x"}
        options = " ".join([*tokens, *(f"-x {n}" for n in names if n not in present)])
        # The SDK JSON-encodes hyperparameters and the toolkit json-decodes them: keep that shape.
        updated[options_key] = json.dumps(options)
    request["HyperParameters"] = updated


def _decode(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def hook_program(package_root: str) -> str:
    return _HOOK_PROGRAM.format(root=package_root)


def wrap_entrypoint(entry: list[str], package_root: str) -> list[str]:
    """``ContainerEntrypoint`` with the hook in front (idempotent: a wrapped entry is re-wrapped)."""
    if entry[:3] == [WRAP_SHELL, "-c", WRAP_SCRIPT]:
        entry = entry[4:]
    wrapped = [WRAP_SHELL, "-c", WRAP_SCRIPT, hook_program(package_root), *entry]
    too_long = [item for item in wrapped if len(item) > ENTRY_ITEM_MAX]
    if too_long:
        raise EnableError(
            f"wrapped ContainerEntrypoint item would be {len(too_long[0])} characters (SageMaker allows "
            f"{ENTRY_ITEM_MAX}): use a shorter package root than {package_root!r}"
        )
    if len(wrapped) > 100:
        raise EnableError("ContainerEntrypoint would have more than 100 items: shorten the entry command")
    return wrapped


def _tags(existing: Any, owner: str, transport: Transport = Transport.SSM) -> list[dict[str, str]]:
    ours = (TAG_OWNER, TAG_ENABLED, TAG_TRANSPORT, TAG_ACTIVATION)  # an earlier enable()'s are replaced
    tags = [dict(t) for t in (existing or []) if t.get("Key") not in ours]
    tags += [{"Key": TAG_OWNER, "Value": owner}, {"Key": TAG_ENABLED, "Value": f"spec-v{SPEC_VERSION}"}]
    count = len(tags)
    if transport == Transport.HYBRID:
        tags.append({"Key": TAG_TRANSPORT, "Value": Transport.HYBRID.value})
        count += 2  # and TAG_ACTIVATION, added once the activation exists (hybrid_activation)
    if count > TAGS_MAX:
        raise EnableError(f"the job would have {count} tags; SageMaker allows {TAGS_MAX}")
    return tags


def check_owner(owner: str) -> str:
    """``owner`` if SageMaker accepts it as a tag value."""
    ok = len(owner) <= TAG_VALUE_MAX and all(
        ch.isalnum() or unicodedata.category(ch).startswith("Z") or ch in _TAG_PUNCTUATION for ch in owner
    )
    if not owner or not ok:
        raise EnableError(
            f"owner {owner[:80]!r} is not a valid tag value: 1-{TAG_VALUE_MAX} letters, digits, spaces and _.:/=+-@"
        )
    return owner


def _with_package_channel(channels: Any, uri: str) -> list[dict[str, Any]]:
    if not uri.startswith("s3://"):
        raise EnableError(f"package_uri must be an s3:// prefix holding the bundle, got {uri[:80]!r}")
    out = [dict(c) for c in (channels or [])]
    for channel in out:
        if channel.get("ChannelName") == CHANNEL_NAME:
            if (channel.get("DataSource") or {}).get("S3DataSource", {}).get("S3Uri") == uri:
                return out  # an earlier enable() with the same package_uri
            raise EnableError(
                f"the request already has an input channel named {CHANNEL_NAME!r}: remove it or drop package_uri"
            )
    out.append(
        {
            "ChannelName": CHANNEL_NAME,
            "DataSource": {
                "S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": uri, "S3DataDistributionType": "FullyReplicated"}
            },
            # Files even when the job streams its data (Pipe): the hook needs a directory.
            "InputMode": "File",
        }
    )
    return out


def upload_bundle(s3_client: Any, bundle: Path, uri: str) -> int:
    """Upload the bundle directory's files under the ``s3://bucket/prefix`` ``uri``; returns the count."""
    if not uri.startswith("s3://"):
        raise EnableError(f"expected an s3:// URI, got {uri[:80]!r}")
    bucket, _, prefix = uri[len("s3://") :].partition("/")
    prefix = prefix.strip("/")
    count = 0
    for path in sorted(p for p in bundle.rglob("*") if p.is_file()):
        key = "/".join(part for part in (prefix, path.relative_to(bundle).as_posix()) if part)
        s3_client.upload_file(str(path), bucket, key)
        count += 1
    return count
