"""Runs INSIDE an SDK venv (sagemaker 2.257.x or 3.x): build jobs with the real SDK under moto and
capture the exact CreateTrainingJob requests that leave botocore.

    python capture_sdk.py --out result.json SCENARIO...

A ``before-call`` handler appended to botocore's built-in handlers (as moto does for its own hook)
is registered by every botocore session, so it sees each request the SDK sends, after every other
handler - ours included - has had its say: what it records is the serialized JSON body.  The
pytest side validates those bodies against botocore's service model and asserts on them.

Each scenario returns {"requests": [...], "error": ..., "info": {...}}; errors are recorded, not
raised, so refusals can be asserted too.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import os
import tarfile
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ["SAGEMAKER_VALIDATE_ROLE"] = "false"  # v3 checks the role with iam:SimulatePrincipalPolicy
os.environ["SAGEMAKER_SUPPRESS_V2_WARNING"] = "1"

import botocore.handlers

CAPTURED: list[dict[str, Any]] = []


def _capture(params: dict[str, Any], model: Any, **_kwargs: Any) -> None:
    body = params.get("body") or b"{}"
    CAPTURED.append({"operation": model.name, "request": json.loads(body)})


for _op in ("CreateTrainingJob", "UpdateTrainingJob"):
    botocore.handlers.BUILTIN_HANDLERS.append((f"before-call.sagemaker.{_op}", _capture))

# The hybrid transport's SSM calls, which moto does not implement: answered here (after botocore
# has validated and serialized them) and recorded apart from CAPTURED (SageMaker requests only).
SSM_CALLS: list[dict[str, Any]] = []
FAKE_ACTIVATION = {"ActivationId": "0a1b2c3d-1111-2222-3333-444455556666", "ActivationCode": "DriverFakeCode0123456"}
FAIL_CREATE_TRAINING_JOB: list[bool] = []  # non-empty: CreateTrainingJob answers ResourceLimitExceeded


# The account's managed-instance tier the driver's SSM reports: "standard", so enable() warns.
FAKE_TIER = {"ServiceSetting": {"SettingId": "/ssm/managed-instance/activation-tier", "SettingValue": "standard"}}


def _fake_ssm(params: dict[str, Any], model: Any, **_kwargs: Any) -> Any:
    from botocore.awsrequest import AWSResponse

    SSM_CALLS.append({"operation": model.name, "request": json.loads(params.get("body") or b"{}")})
    answer = {"CreateActivation": FAKE_ACTIVATION, "GetServiceSetting": FAKE_TIER}.get(model.name, {})
    return AWSResponse(params["url"], 200, {}, None), answer


def _maybe_fail(params: dict[str, Any], **_kwargs: Any) -> Any:
    if not FAIL_CREATE_TRAINING_JOB:
        return None
    from botocore.awsrequest import AWSResponse

    error = {"Error": {"Code": "ResourceLimitExceeded", "Message": "no ml.g5.xlarge left"}}
    return AWSResponse(params["url"], 400, {}, None), error


for _op in ("CreateActivation", "DeleteActivation", "GetServiceSetting"):
    botocore.handlers.BUILTIN_HANDLERS.append((f"before-call.ssm.{_op}", _fake_ssm))
botocore.handlers.BUILTIN_HANDLERS.append(("before-call.sagemaker.CreateTrainingJob", _maybe_fail))  # after _capture

import boto3  # noqa: E402
from moto import mock_aws  # noqa: E402

REGION = "us-east-1"
ROLE = "arn:aws:iam::123456789012:role/SageMakerExecution"
IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.5-gpu-py311"
MI_ROLE = "arn:aws:iam::123456789012:role/RemoteDebugManagedInstance"
LAUNCHERS = Path(__file__).resolve().parents[3] / "templates" / "launchers"
SCENARIOS: dict[str, Callable[[Path], dict[str, Any]]] = {}


def scenario(fn: Callable[[Path], dict[str, Any]]) -> Callable[[Path], dict[str, Any]]:
    SCENARIOS[fn.__name__.replace("_", "-")] = fn
    return fn


def _refusal(call: Callable[..., object], *args: Any, **kwargs: Any) -> str | None:
    """What ``call(*args, **kwargs)`` (``enable()``, ``fit``) refused with, one line; None when it did not."""
    from remote_debug.laptop.core.errors import UserError

    try:
        call(*args, **kwargs)
    except UserError as exc:
        return str(exc)
    return None


def _source_dir(tmp: Path) -> Path:
    src = tmp / "src"
    src.mkdir(exist_ok=True)
    (src / "train.py").write_text("print('the user script, unchanged')\n")
    return src


def _load_launcher(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"launcher_{name}", LAUNCHERS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _s3_tar_members(uri: str) -> list[str]:
    bucket, _, key = uri[len("s3://") :].partition("/")
    body = boto3.client("s3", region_name=REGION).get_object(Bucket=bucket, Key=key)["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        return sorted(tar.getnames())


def _s3_keys(uri: str) -> list[str]:
    bucket, _, prefix = uri[len("s3://") :].partition("/")
    s3 = boto3.client("s3", region_name=REGION)
    keys: list[str] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys += [o["Key"][len(prefix) :].lstrip("/") for o in page.get("Contents", [])]
    return sorted(keys)


def _hybrid(train: Callable[[], Any], *, fail: bool = False) -> dict[str, Any]:
    """Start a hybrid job (train() after enable()); what went to SSM and into the remote_debug channel."""
    FAIL_CREATE_TRAINING_JOB[:] = [True] if fail else []
    error = None
    try:
        train()
    except Exception as exc:  # the SDK's own error for a failed CreateTrainingJob
        error = f"{type(exc).__name__}: {exc}"
    finally:
        FAIL_CREATE_TRAINING_JOB.clear()
    request = CAPTURED[-1]["request"]
    channel = next(c for c in request["InputDataConfig"] if c["ChannelName"] == "remote_debug")
    uri = channel["DataSource"]["S3DataSource"]["S3Uri"]
    bucket, _, prefix = uri[len("s3://") :].partition("/")
    try:
        body = boto3.client("s3", region_name=REGION).get_object(Bucket=bucket, Key=f"{prefix}/ssm-activation.json")
        activation_file = json.loads(body["Body"].read())
    except Exception as exc:
        activation_file = f"{type(exc).__name__}"
    from remote_debug.laptop.aws.enable import hybrid_activation

    return {
        "ssm_calls": list(SSM_CALLS),
        "activation_file": activation_file,
        "channel_uri": uri,
        "error": error,
        "pending": hybrid_activation.pending(),
    }


# --- SDK v2 ------------------------------------------------------------------------------------------


def _v2_session() -> Any:
    import sagemaker

    return sagemaker.Session(boto_session=boto3.Session(region_name=REGION))


def _v2_pytorch(tmp: Path, **kwargs: Any) -> Any:
    from sagemaker.pytorch import PyTorch

    defaults: dict[str, Any] = {
        "entry_point": "train.py",
        "source_dir": str(_source_dir(tmp)),
        "role": ROLE,
        "framework_version": "2.5.1",
        "py_version": "py311",
        "instance_type": "ml.g5.xlarge",
        "instance_count": 1,
        "environment": {"USER_VAR": "kept"},
        "sagemaker_session": _v2_session(),
        "base_job_name": "rd-test",
    }
    return PyTorch(**{**defaults, **kwargs})


def _v2_fit(estimator: Any, **enable_kwargs: Any) -> dict[str, Any]:
    import remote_debug

    enabled = remote_debug.enable(estimator, owner=enable_kwargs.pop("owner", None), **enable_kwargs)
    assert enabled is estimator
    estimator.fit(wait=False, logs=False)
    return {
        "job_name": estimator.latest_training_job.name,
        "sourcedir": _s3_tar_members(estimator.uploaded_code.s3_prefix),
        "dependencies": [os.path.basename(d) for d in estimator.dependencies],
    }


@scenario
def v2_pytorch_single(tmp: Path) -> dict[str, Any]:
    return _v2_fit(_v2_pytorch(tmp), ide="vscode", wait=30, ranks="all")


@scenario
def v2_pytorch_torchrun(tmp: Path) -> dict[str, Any]:
    estimator = _v2_pytorch(tmp, instance_count=2, distribution={"torch_distributed": {"enabled": True}})
    return _v2_fit(estimator, ranks="0,3", port_base=5678)


@scenario
def v2_pytorch_mpi(tmp: Path) -> dict[str, Any]:
    estimator = _v2_pytorch(
        tmp,
        instance_count=2,
        distribution={"mpi": {"enabled": True, "processes_per_host": 2, "custom_mpi_options": "--NCCL_DEBUG WARN"}},
    )
    return _v2_fit(estimator, owner="team-a")


@scenario
def v2_user_pythonpath(tmp: Path) -> dict[str, Any]:
    """The estimator's own PYTHONPATH is kept, after ours (the toolkit path's environment is the hook)."""
    estimator = _v2_pytorch(tmp, environment={"USER_VAR": "kept", "PYTHONPATH": "/opt/ml/code/lib"})
    return _v2_fit(estimator, owner="alice")


@scenario
def v2_direct(tmp: Path) -> dict[str, Any]:
    estimator = _v2_pytorch(tmp, subnets=["subnet-0123456789abcdef0"], security_group_ids=["sg-0123456789abcdef0"])
    return _v2_fit(estimator, owner="alice", transport="direct")


@scenario
def v2_pytorch_fit_twice(tmp: Path) -> dict[str, Any]:
    import remote_debug

    estimator = remote_debug.enable(_v2_pytorch(tmp))
    estimator.fit(wait=False, logs=False, job_name="rd-twice-1")
    estimator.fit(wait=False, logs=False, job_name="rd-twice-2")
    return {}


@scenario
def v2_generic_estimator_entrypoint(tmp: Path) -> dict[str, Any]:
    """A BYOC image with its own entry given to the SDK: the entry gets wrapped, nothing is shipped."""
    from sagemaker.estimator import Estimator

    import remote_debug

    estimator = Estimator(
        image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/my-byoc:latest",
        role=ROLE,
        instance_type="ml.m5.xlarge",
        instance_count=1,
        sagemaker_session=_v2_session(),
        container_entry_point=["python3", "/opt/program/train.py"],
        container_arguments=["--epochs", "3"],
    )
    remote_debug.enable(estimator, owner="alice")
    estimator.fit(wait=False, logs=False, job_name="rd-byoc")
    return {}


@scenario
def v2_hybrid(tmp: Path) -> dict[str, Any]:
    import remote_debug

    estimator = _v2_pytorch(tmp, instance_count=2)
    remote_debug.enable(estimator, owner="alice", transport="hybrid", hybrid_role=MI_ROLE)
    out = _hybrid(lambda: estimator.fit(wait=False, logs=False))
    out["sourcedir"] = _s3_tar_members(estimator.uploaded_code.s3_prefix)
    out["enable_remote_debug"] = bool(estimator._enable_remote_debug)
    return out


@scenario
def v2_hybrid_create_fails(tmp: Path) -> dict[str, Any]:
    import remote_debug

    estimator = remote_debug.enable(_v2_pytorch(tmp), owner="alice", transport="hybrid", hybrid_role=MI_ROLE)
    return _hybrid(lambda: estimator.fit(wait=False, logs=False), fail=True)


@scenario
def v2_refusals(tmp: Path) -> dict[str, Any]:
    from sagemaker.estimator import Estimator

    import remote_debug

    cases: dict[str, Callable[[], Any]] = {
        "network-isolation": lambda: _v2_pytorch(tmp, enable_network_isolation=True),
        "builtin-algorithm": lambda: Estimator(
            image_uri="382416733822.dkr.ecr.us-east-1.amazonaws.com/kmeans:1",
            role=ROLE,
            instance_type="ml.m5.xlarge",
            instance_count=1,
            sagemaker_session=_v2_session(),
        ),
        "job-name-on-sdk": lambda: _v2_pytorch(tmp),
        "s3-source-dir": lambda: _v2_pytorch(tmp, source_dir="s3://bucket/sourcedir.tar.gz"),
        "python-3.9": lambda: _v2_pytorch(tmp, framework_version="1.13.1", py_version="py39"),
        "direct-without-vpc": lambda: _v2_pytorch(tmp),
    }
    extra: dict[str, dict[str, Any]] = {
        "job-name-on-sdk": {"job_name": "x"},
        "direct-without-vpc": {"transport": "direct"},
    }
    out: dict[str, Any] = {}
    for name, make in cases.items():
        out[name] = _refusal(remote_debug.enable, make(), owner="alice", **extra.get(name, {}))
    return out


def _key_dirs() -> list[str]:
    """The jobs that have a client key pair in this driver's state dir (REMOTE_DEBUG_HOME)."""
    keys = Path(os.environ["REMOTE_DEBUG_HOME"]) / "keys"
    return sorted(p.name for p in keys.iterdir()) if keys.is_dir() else []


def _v2_byoc(**kwargs: Any) -> Any:
    """A generic Estimator of one's own image with its entry given (container_entry_point): the entry the hook wraps."""
    from sagemaker.estimator import Estimator

    defaults: dict[str, Any] = {
        "image_uri": "123456789012.dkr.ecr.us-east-1.amazonaws.com/my-byoc:latest",
        "role": ROLE,
        "instance_type": "ml.m5.xlarge",
        "instance_count": 2,
        "sagemaker_session": _v2_session(),
        "container_entry_point": ["python3", "/opt/program/train.py"],
        "environment": {"USER_VAR": "kept"},
    }
    return Estimator(**{**defaults, **kwargs})


def _untouched(estimator: Any) -> Any:
    """What enable() changes on an estimator: nothing of it may have changed when enable() refused."""
    return (estimator.dependencies, estimator._enable_remote_debug, estimator.environment)


@scenario
def v2_keep_alive(tmp: Path) -> dict[str, Any]:
    """Keep-alive needs the entry wrapped by the hook: a framework estimator's entry is the training toolkit
    (no container_entry_point), so enable() refuses it there - estimator untouched, no bundle, no key - and an
    estimator that names its entry (container_entry_point) gets it."""
    import remote_debug

    out: dict[str, Any] = {}
    toolkit = _v2_pytorch(tmp, max_run=7200)
    keys_before = _key_dirs()
    out["toolkit"] = _refusal(remote_debug.enable, toolkit, owner="alice", keep_alive=600)
    out["toolkit-untouched"] = _untouched(toolkit)
    out["toolkit-new-keys"] = sorted(set(_key_dirs()) - set(keys_before))
    byoc = remote_debug.enable(_v2_byoc(max_run=7200), owner="alice", keep_alive=600)
    byoc.fit(wait=False, logs=False, job_name="rd-byoc-keep-alive")
    out["job_name"] = byoc.latest_training_job.name
    return out


@scenario
def v2_keep_alive_refusals(tmp: Path) -> dict[str, Any]:
    """A keep-alive that does not fit in max_run: refused at enable(), the estimator untouched; and, after an
    enable() that accepted it, fit() refuses what no longer fits - max_run lowered below it, or the entry the hook
    was to wrap taken away - before any key is made."""
    import remote_debug

    out: dict[str, Any] = {}
    for name, max_run, keep_alive in (("over-max-run", 3600, 3600), ("over-default-max-run", None, 90000)):
        estimator = _v2_byoc(**({} if max_run is None else {"max_run": max_run}))
        out[name] = _refusal(remote_debug.enable, estimator, owner="alice", keep_alive=keep_alive)
        out[f"{name}-untouched"] = _untouched(estimator)
    keys_before = _key_dirs()
    for name, change in (
        ("lowered-after-enable", {"max_run": 300}),
        ("entry-dropped-after-enable", {"container_entry_point": None}),
    ):
        estimator = remote_debug.enable(_v2_byoc(max_run=7200), owner="alice", keep_alive=600)
        for attribute, value in change.items():
            setattr(estimator, attribute, value)
        out[name] = _refusal(estimator.fit, wait=False, logs=False, job_name=f"rd-{name}")
    out["new-keys"] = sorted(set(_key_dirs()) - set(keys_before))
    return out


@scenario
def v2_model_trainer(tmp: Path) -> dict[str, Any]:
    """Late v2's ModelTrainer (sagemaker.modules.train): same wrapper as v3."""
    from sagemaker.modules import Session
    from sagemaker.modules.configs import Compute, SourceCode
    from sagemaker.modules.train import ModelTrainer

    import remote_debug

    trainer = ModelTrainer(
        training_image=IMAGE,
        role=ROLE,
        base_job_name="rd-modules",
        source_code=SourceCode(source_dir=str(_source_dir(tmp)), entry_script="train.py"),
        compute=Compute(instance_type="ml.g5.xlarge", instance_count=1),
        sagemaker_session=Session(boto_session=boto3.Session(region_name=REGION)),
    )
    remote_debug.enable(trainer, owner="alice")
    trainer.train(wait=False, logs=False)
    return {}


@scenario
def launcher_v2(tmp: Path) -> dict[str, Any]:
    launcher = _load_launcher("sdk_v2_pytorch")
    info = {}
    for name, estimator in (
        ("single", launcher.single_node(ROLE, session=_v2_session())),
        ("torchrun", launcher.torchrun_multi_node(ROLE, nodes=2, session=_v2_session())),
    ):
        estimator.fit(wait=False, logs=False)
        info[name] = _s3_tar_members(estimator.uploaded_code.s3_prefix)
    return info


# --- SDK v3 ------------------------------------------------------------------------------------------


def _v3_session() -> Any:
    from sagemaker.core.helper.session_helper import Session

    return Session(boto_session=boto3.Session(region_name=REGION))


def _v3_trainer(tmp: Path, **kwargs: Any) -> Any:
    from sagemaker.train import ModelTrainer
    from sagemaker.train.configs import Compute, SourceCode

    defaults: dict[str, Any] = {
        "training_image": IMAGE,
        "role": ROLE,
        "base_job_name": "rd-test",
        "source_code": SourceCode(source_dir=str(_source_dir(tmp)), entry_script="train.py"),
        "compute": Compute(instance_type="ml.g5.xlarge", instance_count=1),
        "environment": {"USER_VAR": "kept"},
        "sagemaker_session": _v3_session(),
    }
    return ModelTrainer(**{**defaults, **kwargs})


def _v3_train(trainer: Any, **enable_kwargs: Any) -> dict[str, Any]:
    import remote_debug

    assert remote_debug.enable(trainer, **enable_kwargs) is trainer
    trainer.train(wait=False, logs=False)
    request = CAPTURED[-1]["request"]
    channel = next(c for c in request["InputDataConfig"] if c["ChannelName"] == "remote_debug")
    return {"remote_debug_channel": _s3_keys(channel["DataSource"]["S3DataSource"]["S3Uri"])}


@scenario
def v3_single(tmp: Path) -> dict[str, Any]:
    return _v3_train(_v3_trainer(tmp), ide="vscode", wait=30)


@scenario
def v3_torchrun(tmp: Path) -> dict[str, Any]:
    from sagemaker.train.configs import Compute
    from sagemaker.train.distributed import Torchrun

    trainer = _v3_trainer(
        tmp,
        distributed=Torchrun(process_count_per_node=2),
        compute=Compute(instance_type="ml.g5.12xlarge", instance_count=2),
    )
    return _v3_train(trainer, ranks=[0, 2], owner="team-a")


@scenario
def v3_direct(tmp: Path) -> dict[str, Any]:
    from sagemaker.train.configs import Networking

    networking = Networking(subnets=["subnet-0123456789abcdef0"], security_group_ids=["sg-0123456789abcdef0"])
    return _v3_train(_v3_trainer(tmp, networking=networking), owner="alice", transport="direct")


@scenario
def v3_hybrid(tmp: Path) -> dict[str, Any]:
    from sagemaker.train.configs import Compute

    import remote_debug

    trainer = _v3_trainer(tmp, compute=Compute(instance_type="ml.g5.xlarge", instance_count=2))
    remote_debug.enable(trainer, owner="alice", transport="hybrid", hybrid_role=MI_ROLE)
    return _hybrid(lambda: trainer.train(wait=False, logs=False))


@scenario
def v3_hybrid_create_fails(tmp: Path) -> dict[str, Any]:
    import remote_debug

    trainer = remote_debug.enable(_v3_trainer(tmp), owner="alice", transport="hybrid", hybrid_role=MI_ROLE)
    return _hybrid(lambda: trainer.train(wait=False, logs=False), fail=True)


@scenario
def v3_refusals(tmp: Path) -> dict[str, Any]:
    from sagemaker.train.configs import Networking

    import remote_debug

    old_image = f"{IMAGE.partition(':')[0]}:1.13.1-gpu-py39-cu117-ubuntu20.04-sagemaker"
    cases: dict[str, tuple[Callable[[], Any], dict[str, Any]]] = {
        "network-isolation": (lambda: _v3_trainer(tmp, networking=Networking(enable_network_isolation=True)), {}),
        "python-3.9": (lambda: _v3_trainer(tmp, training_image=old_image), {}),
        "direct-without-vpc": (lambda: _v3_trainer(tmp), {"transport": "direct"}),
    }
    out: dict[str, Any] = {}
    for name, (make, kwargs) in cases.items():
        out[name] = _refusal(remote_debug.enable, make(), owner="a", **kwargs)
    return out


@scenario
def v3_keep_alive(tmp: Path) -> dict[str, Any]:
    from sagemaker.train.configs import StoppingCondition

    trainer = _v3_trainer(tmp, stopping_condition=StoppingCondition(max_runtime_in_seconds=7200))
    return _v3_train(trainer, owner="alice", keep_alive=600)


@scenario
def v3_keep_alive_refusals(tmp: Path) -> dict[str, Any]:
    """ModelTrainer's default max runtime (3600 s) cannot hold a keep-alive of 3600 s, and a trainer without
    source_code has no entry for the hook to wrap: both refused at enable(), the trainer untouched, no key made."""
    from sagemaker.train.configs import StoppingCondition

    import remote_debug

    trainer = _v3_trainer(tmp)
    out: dict[str, Any] = {"max-runtime": trainer.stopping_condition.max_runtime_in_seconds}
    keys_before = _key_dirs()
    out["over-default-max-runtime"] = _refusal(remote_debug.enable, trainer, owner="alice", keep_alive=3600)
    out["channels"] = [c.channel_name for c in trainer.input_data_config or []]
    out["environment"] = trainer.environment
    # no source_code: ModelTrainer sends no ContainerEntrypoint, the image's own entry runs - nothing to wrap
    imaged = _v3_trainer(tmp, source_code=None, stopping_condition=StoppingCondition(max_runtime_in_seconds=7200))
    out["no-source-code"] = _refusal(remote_debug.enable, imaged, owner="alice", keep_alive=600)
    out["no-source-code-untouched"] = ([c.channel_name for c in imaged.input_data_config or []], imaged.environment)
    out["new-keys"] = sorted(set(_key_dirs()) - set(keys_before))
    return out


@scenario
def launcher_v3(tmp: Path) -> dict[str, Any]:
    launcher = _load_launcher("sdk_v3_model_trainer")
    launcher.single_node(ROLE, REGION, session=_v3_session()).train(wait=False, logs=False)
    launcher.torchrun_multi_node(ROLE, REGION, nodes=2, session=_v3_session()).train(wait=False, logs=False)
    return {}


# --- any venv ----------------------------------------------------------------------------------------


@scenario
def launcher_boto3(tmp: Path) -> dict[str, Any]:
    launcher = _load_launcher("boto3_request")
    session = boto3.Session(region_name=REGION)
    session.client("s3").create_bucket(Bucket="rd-bucket")
    launcher.upload(session, "rd-bucket", "rd-boto3-1")
    sm = session.client("sagemaker")
    sm.create_training_job(**launcher.single_node("rd-boto3-1", ROLE, IMAGE, "rd-bucket", session=session))
    sm.create_training_job(**launcher.torchrun_multi_node("rd-boto3-2", ROLE, IMAGE, "rd-bucket", session=session))
    return {"uploaded": _s3_keys("s3://rd-bucket/rd-boto3-1/remote-debug")[:3]}


@scenario
def import_launchers(tmp: Path) -> dict[str, Any]:
    """Each launcher that fits this venv's SDK imports cleanly (and the boto3 one everywhere)."""
    import importlib.metadata

    major = importlib.metadata.version("sagemaker").split(".")[0]
    names = ["boto3_request", "sdk_v2_pytorch" if major == "2" else "sdk_v3_model_trainer"]
    for name in names:
        _load_launcher(name)
    return {"imported": names}


def run(name: str) -> dict[str, Any]:
    CAPTURED.clear()
    SSM_CALLS.clear()
    result: dict[str, Any] = {"requests": [], "error": None, "info": {}}
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp, mock_aws(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result["info"] = SCENARIOS[name](Path(tmp))
        except Exception as exc:
            result["error"] = f"{type(exc).__name__}: {exc}"
            result["traceback"] = traceback.format_exc()
        result["requests"] = list(CAPTURED)
    # remote-debug's own warnings, and where Python shows them (the line that called remote_debug)
    result["warnings"] = [
        {"message": str(w.message), "filename": w.filename}
        for w in caught
        if w.category.__name__ == "RemoteDebugWarning"
    ]
    result["seconds"] = round(time.monotonic() - started, 2)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("scenarios", nargs="+")
    args = parser.parse_args()
    results = {name: run(name) for name in args.scenarios}
    Path(args.out).write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
