"""Shared checks: requests against botocore's service model, spec environments, key files."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import botocore.session
from botocore.validate import validate_parameters

from remote_debug.contract.job_secret import derive_job_secret
from remote_debug.emulator.constraints import constraint_errors, validation_message
from remote_debug.laptop.aws.enable.bundle import inject_dir
from remote_debug.laptop.aws.enable.intercept import MARKER_ENV

ROLE = "arn:aws:iam::123456789012:role/SageMakerExecution"
IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.5-gpu-py311"
MOTO_USER_ID = "AKIAIOSFODNN7EXAMPLE"  # what moto's GetCallerIdentity answers

_MODEL = botocore.session.get_session().get_service_model("sagemaker")


def validate(operation: str, params: dict[str, Any]) -> None:
    """Raise unless ``params`` is a valid ``operation`` request: for botocore, and for SageMaker's server
    (patterns, whole value, "." matching no line terminator; maximum lengths)."""
    shape = _MODEL.operation_model(operation).input_shape
    validate_parameters(params, shape)
    errors = constraint_errors(shape, params)
    assert not errors, validation_message(errors)


def public_key(state_dir: Path, job: str) -> str:
    """The job's public key line, after checking the private key is 0600 in a 0700 dir."""
    key = state_dir / "keys" / job / "id_ed25519"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE(key.parent.stat().st_mode) == 0o700
    return (key.parent / "id_ed25519.pub").read_text().strip()


def job_secret_of(state_dir: Path, job: str) -> str:
    """The job secret the laptop derives from the job's private key (what the request must carry)."""
    return derive_job_secret((state_dir / "keys" / job / "id_ed25519").read_bytes())


def spec_env(
    job: str,
    key: str,
    *,
    secret: str,
    package_root: str,
    ide: str = "vscode",
    ranks: str = "all",
    wait: str = "0",
    port_base: str = "0",
    sshd_port: str = "0",
    transport: str = "ssm",
    env_hook: bool = True,
    keep_alive: str = "",
) -> dict[str, str]:
    """What enable() puts in Environment; ``env_hook``: no entry to wrap, so our sitecustomize comes in
    through PYTHONPATH (a wrapped entry gets it from the hook, and keeps the image's PYTHONPATH);
    ``keep_alive``: REMOTE_DEBUG_KEEP_ALIVE's value, absent when ""."""
    return {
        "REMOTE_DEBUG_SPEC_VERSION": "1",
        "REMOTE_DEBUG_JOB": job,
        "REMOTE_DEBUG_IDE": ide,
        "REMOTE_DEBUG_RANKS": ranks,
        "REMOTE_DEBUG_PORT_BASE": port_base,
        "REMOTE_DEBUG_SSHD_PORT": sshd_port,
        "REMOTE_DEBUG_WAIT": wait,
        "REMOTE_DEBUG_CLIENT_PUBKEY": key,
        "REMOTE_DEBUG_JOB_SECRET": secret,
        "REMOTE_DEBUG_TRANSPORT": transport,
        **({"REMOTE_DEBUG_KEEP_ALIVE": keep_alive} if keep_alive else {}),
        **({"PYTHONPATH": inject_dir(package_root)} if env_hook else {}),
    }


def assert_debuggable(
    request: dict[str, Any],
    state_dir: Path,
    *,
    package_root: str,
    owner: str,
    user_env: dict[str, str] | None = None,
    **spec: str,
) -> None:
    """The parts remote-debug owns, exactly; plus botocore validation of the whole request."""
    validate("CreateTrainingJob", request)
    job = request["TrainingJobName"]
    key = public_key(state_dir, job)
    wrapped = bool(request["AlgorithmSpecification"].get("ContainerEntrypoint"))
    expected = spec_env(
        job, key, secret=job_secret_of(state_dir, job), package_root=package_root, env_hook=not wrapped, **spec
    )
    assert request["Environment"] == {**(user_env or {}), **expected}
    assert MARKER_ENV not in request["Environment"]
    assert request["RemoteDebugConfig"] == {"EnableRemoteDebug": True}
    ours = [t for t in request["Tags"] if t["Key"].startswith("remote-debug:")]
    assert ours == [
        {"Key": "remote-debug:owner", "Value": owner},
        {"Key": "remote-debug:enabled", "Value": "spec-v1"},
    ]
