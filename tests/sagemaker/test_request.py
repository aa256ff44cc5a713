"""``remote_debug.enable(request_dict)``: the boto3-level core, exactly, and through moto."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import NoCredentialsError

import remote_debug
from remote_debug.laptop.aws.enable.bundle import CHANNEL_ROOT
from remote_debug.laptop.aws.enable.request import WRAP_SCRIPT, WRAP_SHELL, hook_program
from remote_debug.laptop.aws.enable.terms import EnableError
from remote_debug.laptop.core.errors import UserError
from tests.helpers.sagemaker_checks import (
    IMAGE,
    MOTO_USER_ID,
    ROLE,
    assert_debuggable,
    job_secret_of,
    public_key,
    spec_env,
    validate,
)

BASE: dict[str, Any] = {
    "TrainingJobName": "rd-raw-1",
    "RoleArn": ROLE,
    "AlgorithmSpecification": {
        "TrainingImage": IMAGE,
        "TrainingInputMode": "File",
        "ContainerEntrypoint": ["python3", "/opt/ml/input/data/code/train.py"],
        "ContainerArguments": ["--epochs", "2"],
    },
    "InputDataConfig": [
        {
            "ChannelName": "code",
            "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": "s3://b/code"}},
        }
    ],
    "OutputDataConfig": {"S3OutputPath": "s3://b/output"},
    "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 50},
    "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
    "Environment": {"USER_VAR": "kept", "PYTHONPATH": "/opt/ml/code/lib"},
    "Tags": [{"Key": "team", "Value": "ml"}],
}


def test_raw_request_exactly(state: Path) -> None:
    original = copy.deepcopy(BASE)
    out = remote_debug.enable(
        BASE,
        owner="alice",
        key_dir=state,
        ide="vscode",
        ranks="0,1",
        wait=120,
        sshd_port=2222,
        port_base=5678,
        package_uri="s3://b/rd/remote-debug",
    )
    assert original == BASE  # the input is not modified
    key = public_key(state, "rd-raw-1")
    env = spec_env(
        "rd-raw-1",
        key,
        secret=job_secret_of(state, "rd-raw-1"),
        package_root=CHANNEL_ROOT,
        ranks="0,1",
        wait="120",
        sshd_port="2222",
        port_base="5678",
        env_hook=False,
    )
    assert out == {
        **BASE,
        "AlgorithmSpecification": {
            **BASE["AlgorithmSpecification"],
            "ContainerEntrypoint": [
                WRAP_SHELL,
                "-c",
                WRAP_SCRIPT,
                hook_program(CHANNEL_ROOT),
                "python3",
                "/opt/ml/input/data/code/train.py",
            ],
        },
        "InputDataConfig": [
            *BASE["InputDataConfig"],
            {
                "ChannelName": "remote_debug",
                "DataSource": {
                    "S3DataSource": {
                        "S3DataType": "S3Prefix",
                        "S3Uri": "s3://b/rd/remote-debug",
                        "S3DataDistributionType": "FullyReplicated",
                    }
                },
                "InputMode": "File",
            },
        ],
        # the user's PYTHONPATH as given: the hook that runs the entry adds ours in front
        "Environment": {"USER_VAR": "kept", "PYTHONPATH": "/opt/ml/code/lib", **env},
        "RemoteDebugConfig": {"EnableRemoteDebug": True},
        "Tags": [
            {"Key": "team", "Value": "ml"},
            {"Key": "remote-debug:owner", "Value": "alice"},
            {"Key": "remote-debug:enabled", "Value": "spec-v1"},
        ],
    }
    validate("CreateTrainingJob", out)


def test_raw_request_through_moto(aws: None, state: Path) -> None:
    sagemaker = boto3.client("sagemaker", region_name="us-east-1")
    captured: list[dict[str, Any]] = []
    sagemaker.meta.events.register(
        "before-call.sagemaker.CreateTrainingJob", lambda params, **_: captured.append(json.loads(params["body"]))
    )
    request = {**BASE, "Environment": {"USER_VAR": "kept"}}
    sagemaker.create_training_job(**remote_debug.enable(request, key_dir=state))  # owner: STS (moto) caller
    [sent] = captured
    assert_debuggable(sent, state, package_root=CHANNEL_ROOT, owner=MOTO_USER_ID, user_env={"USER_VAR": "kept"})
    # moto keeps the entry and the tags (not the environment): what it stored is what we sent.
    described = sagemaker.describe_training_job(TrainingJobName="rd-raw-1")
    entry = sent["AlgorithmSpecification"]["ContainerEntrypoint"]
    assert described["AlgorithmSpecification"]["ContainerEntrypoint"] == entry
    assert sagemaker.list_tags(ResourceArn=described["TrainingJobArn"])["Tags"] == sent["Tags"]


def test_enabling_twice_changes_nothing_more(state: Path) -> None:
    once = remote_debug.enable(BASE, owner="alice", key_dir=state)
    twice = remote_debug.enable(once, owner="alice", key_dir=state)
    assert twice == once


VPC = {"SecurityGroupIds": ["sg-0123456789abcdef0"], "Subnets": ["subnet-0123456789abcdef0"]}


def test_other_transports(state: Path) -> None:
    # (hybrid, which also makes an SSM activation: test_hybrid_activation.py)
    request = {**{k: v for k, v in BASE.items() if k != "AlgorithmSpecification"}, "VpcConfig": VPC}
    out = remote_debug.enable(request, owner="alice", key_dir=state, transport="direct")
    assert "RemoteDebugConfig" not in out  # the native SSM target is not used: leave it as it was
    assert out["Environment"]["REMOTE_DEBUG_TRANSPORT"] == "direct"
    assert "AlgorithmSpecification" not in out
    validate("CreateTrainingJob", out)


def test_mpi_runs_forward_the_spec(state: Path) -> None:
    request = {
        **BASE,
        "HyperParameters": {
            "sagemaker_mpi_enabled": "true",
            "sagemaker_mpi_custom_mpi_options": '"--NCCL_DEBUG WARN -x REMOTE_DEBUG_JOB"',
        },
    }
    out = remote_debug.enable(remote_debug.enable(request, owner="a", key_dir=state), owner="a", key_dir=state)
    options = json.loads(out["HyperParameters"]["sagemaker_mpi_custom_mpi_options"])
    names = [n for n in out["Environment"] if n.startswith("REMOTE_DEBUG_")] + ["PYTHONPATH"]  # the user's
    assert options.split() == ["--NCCL_DEBUG", "WARN", "-x", "REMOTE_DEBUG_JOB"] + [
        t for n in names if n != "REMOTE_DEBUG_JOB" for t in ("-x", n)
    ]
    plain = remote_debug.enable(BASE, owner="a", key_dir=state)
    assert "HyperParameters" not in plain


def test_ranks_as_a_list(state: Path) -> None:
    out = remote_debug.enable(BASE, owner="alice", key_dir=state, ranks=[2, 0, 2])
    assert out["Environment"]["REMOTE_DEBUG_RANKS"] == "0,2"


def test_xgboost_framework_image_is_fine_with_a_script(state: Path) -> None:
    xgb = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-xgboost:1.7-1"
    request = {
        **BASE,
        "AlgorithmSpecification": {**BASE["AlgorithmSpecification"], "TrainingImage": xgb},
        "HyperParameters": {"sagemaker_program": '"train.py"'},
    }
    remote_debug.enable(request, owner="alice", key_dir=state)
    del request["HyperParameters"]
    with pytest.raises(EnableError, match="built-in algorithm"):
        remote_debug.enable(request, owner="alice", key_dir=state)


def _with(**changes: Any) -> dict[str, Any]:
    request = copy.deepcopy(BASE)
    for key, value in changes.items():
        if value is None:
            request.pop(key, None)
        else:
            request[key] = value
    return request


# the request is a dict, except where the refusal is about not being one
REFUSALS: list[tuple[str, dict[str, Any] | list[str], dict[str, Any], str]] = [
    (
        "network-isolation",
        _with(EnableNetworkIsolation=True),
        {},
        "network isolation (EnableNetworkIsolation), which cuts the container off from every network: no SSM session",
    ),
    (
        "python-3.9-image",
        _with(
            AlgorithmSpecification={
                **BASE["AlgorithmSpecification"],
                "TrainingImage": "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:1.13.1-gpu-py39-cu117-"
                "ubuntu20.04-sagemaker",
            }
        ),
        {},
        "image pytorch-training:1.13.1-gpu-py39-cu117-ubuntu20.04-sagemaker runs Python 3.9, but remote-debug runs "
        "in the job and needs Python >= 3.10 there: use an image with py310 or newer",
    ),
    (
        "python-2.7-image",
        _with(
            AlgorithmSpecification={
                **BASE["AlgorithmSpecification"],
                "TrainingImage": "520713654638.dkr.ecr.us-east-1.amazonaws.com/sagemaker-pytorch:0.4.0-cpu-py27",
            }
        ),
        {},
        "runs Python 2.7",
    ),
    (
        "direct-without-vpc",
        BASE,
        {"transport": "direct"},
        "transport='direct' connects to the nodes inside the job's VPC, but the job has no VpcConfig",
    ),
    (
        "algorithm-resource",
        _with(AlgorithmSpecification={"AlgorithmName": "my-marketplace-algo", "TrainingInputMode": "File"}),
        {},
        "algorithm resource",
    ),
    (
        "builtin-image",
        _with(
            AlgorithmSpecification={
                "TrainingImage": "382416733822.dkr.ecr.us-east-1.amazonaws.com/kmeans:1",
                "TrainingInputMode": "File",
            }
        ),
        {},
        "'kmeans' is a SageMaker built-in algorithm",
    ),
    ("bad-job-name", _with(TrainingJobName="bad_name!"), {}, "bad job name"),
    ("no-job-name", _with(TrainingJobName=None), {}, "no TrainingJobName"),
    ("long-env-value", _with(Environment={"BIG": "x" * 600}), {}, "environment variable BIG would be 600"),
    ("too-many-env", _with(Environment={f"V{i}": "1" for i in range(95)}), {}, "SageMaker allows 100"),
    ("bad-env-name", _with(Environment={"1BAD": "x"}), {}, "environment variable name '1BAD'"),
    ("bad-owner", BASE, {"owner": "bob; rm -rf"}, "not a valid tag value"),
    ("local-transport", BASE, {"transport": "local"}, "remote-debug launch --local"),
    ("bad-ide", BASE, {"ide": "emacs"}, "unknown IDE"),
    ("bad-ranks", BASE, {"ranks": "first"}, "bad rank list"),
    ("negative-rank", BASE, {"ranks": [-1]}, "ranks are 0 or more"),
    ("bad-port", BASE, {"sshd_port": 22}, "port 22 is reserved"),
    ("bad-package-uri", BASE, {"package_uri": "/tmp/bundle"}, "s3:// prefix"),
    (
        "channel-taken",
        _with(
            InputDataConfig=[
                {
                    "ChannelName": "remote_debug",
                    "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": "s3://b/x"}},
                }
            ]
        ),
        {"package_uri": "s3://b/rd"},
        "already has an input channel",
    ),
    ("not-a-target", ["not", "a", "dict"], {}, "request dict, a SageMaker SDK v2 estimator or a ModelTrainer"),
]


@pytest.mark.parametrize(("request_dict", "kwargs", "needle"), [r[1:] for r in REFUSALS], ids=[r[0] for r in REFUSALS])
def test_refusals_are_one_line_user_errors(state: Path, request_dict: Any, kwargs: dict[str, Any], needle: str) -> None:
    kwargs = {"owner": "alice", **kwargs}
    with pytest.raises(UserError) as info:
        remote_debug.enable(request_dict, key_dir=state, **kwargs)
    message = str(info.value)
    assert needle in message and "\n" not in message, message
    # Refused before anything was written: no key for a job that will not run.
    assert not (state / "keys").exists()


def test_owner_needs_credentials_or_an_explicit_value(state: Path) -> None:
    class NoCredentials:
        def client(self, _service: str) -> Any:
            class Sts:
                def get_caller_identity(self) -> Any:
                    raise NoCredentialsError()

            return Sts()

    with pytest.raises(EnableError, match=r"cannot tell the job's owner .*no AWS credentials.*owner='...'"):
        remote_debug.enable(BASE, key_dir=state, boto_session=NoCredentials())


def test_a_long_package_root_is_refused() -> None:
    from remote_debug.laptop.aws.enable.request import wrap_entrypoint

    with pytest.raises(EnableError, match="SageMaker allows 256"):
        wrap_entrypoint(["python3", "train.py"], "/opt/ml/" + "x" * 60)


def test_the_environment_limit_counts_the_key_before_it_is_made(state: Path) -> None:
    # 100 variables with the spec's 10 (the client key and job secret among them, made only after every check)
    fits = _with(Environment={"PYTHONPATH": "/x", **{f"V{i}": "1" for i in range(89)}})
    assert len(remote_debug.enable(fits, owner="alice", key_dir=state)["Environment"]) == 100
    over = _with(Environment={"PYTHONPATH": "/x", **{f"V{i}": "1" for i in range(90)}})
    with pytest.raises(EnableError, match="would have 101 environment variables"):
        remote_debug.enable(over, owner="alice", key_dir=state / "other")
    assert not (state / "other").exists()
    # enabling an enabled request again: its spec variables (the old key too) are replaced, not added
    again = remote_debug.enable(remote_debug.enable(fits, owner="alice", key_dir=state), owner="alice", key_dir=state)
    assert len(again["Environment"]) == 100


def test_python_3_10_and_unnamed_pythons_are_fine(state: Path) -> None:
    registry = "123456789012.dkr.ecr.us-east-1.amazonaws.com"
    for image in (
        "pytorch-training:2.0.0-gpu-py310-cu118-ubuntu20.04-sagemaker",
        "pytorch-training:2.5-gpu-py311",
        "pytorch-training:1.0.0-cpu-py3",
        "my-byoc:happy39",
        "my-byoc@sha256:" + "a" * 64,
    ):
        algorithm = {**BASE["AlgorithmSpecification"], "TrainingImage": f"{registry}/{image}"}
        request = _with(AlgorithmSpecification=algorithm)
        remote_debug.enable(request, owner="alice", key_dir=state)


def test_pythonpath_only_where_the_environment_carries_the_hook(state: Path) -> None:
    """A wrapped entry's hook puts our sitecustomize in front of the container's PYTHONPATH itself, so the
    request sets none (SageMaker's Environment would replace the image's ENV PYTHONPATH).  Without an entry
    (the SDK v2 toolkit path) the environment is the hook: ours first, the user's after it."""
    no_path = _with(Environment={"USER_VAR": "kept"})
    wrapped = remote_debug.enable(no_path, owner="alice", key_dir=state)
    assert "PYTHONPATH" not in wrapped["Environment"]
    assert "PYTHONPATH" not in remote_debug.enable(wrapped, owner="alice", key_dir=state)["Environment"]
    assert remote_debug.enable(BASE, owner="alice", key_dir=state)["Environment"]["PYTHONPATH"] == "/opt/ml/code/lib"

    no_entry = {k: v for k, v in BASE.items() if k != "AlgorithmSpecification"}
    no_entry["AlgorithmSpecification"] = {"TrainingImage": IMAGE, "TrainingInputMode": "File"}
    env_hook = remote_debug.enable(no_entry, owner="alice", key_dir=state)
    ours = f"{CHANNEL_ROOT}/remote_debug/container/inject"
    assert env_hook["Environment"]["PYTHONPATH"] == f"{ours}:/opt/ml/code/lib"
    # an entry added later: ours goes, the user's stays
    later = {**env_hook, "AlgorithmSpecification": BASE["AlgorithmSpecification"]}
    assert remote_debug.enable(later, owner="alice", key_dir=state)["Environment"]["PYTHONPATH"] == "/opt/ml/code/lib"


def test_the_package_channel_name_is_a_shell_identifier() -> None:
    """SDK v3's sm_train.sh sources ``export SM_CHANNEL_<NAME>=...`` for every channel under ``set -e``:
    a name like ``remote-debug`` is not a valid identifier there and failed every v3 job (found by the
    emulator's ModelTrainer case, tests/emulator/test_sagemaker_e2e.py)."""
    import re

    from remote_debug.laptop.aws.enable.bundle import CHANNEL_NAME, CHANNEL_ROOT

    assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", f"SM_CHANNEL_{CHANNEL_NAME.upper()}")
    assert f"/opt/ml/input/data/{CHANNEL_NAME}" == CHANNEL_ROOT


# Every shape of request enable() produces, as SageMaker's server would check it: each string against its
# member's pattern (the whole value, "." matching no line terminator) and every maximum length.  botocore's own
# validation never looks at patterns, which let a multi-line hook program into ContainerEntrypoint.
_SHAPES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("wrapped entry", {}, {}),
    (
        "wrapped, every option",
        {},
        {
            "ide": "pycharm",
            "ranks": [0, 3],
            "wait": 600,
            "sshd_port": 2222,
            "port_base": 5678,
            "hold_on_failure": 900,
            "keep_alive": 1800,
            "package_uri": "s3://b/rd/remote-debug",
        },
    ),
    (
        "direct transport",
        {"VpcConfig": {"Subnets": ["subnet-1"], "SecurityGroupIds": ["sg-1"]}},
        {"transport": "direct"},
    ),
    (
        "toolkit (env hook)",
        {
            "AlgorithmSpecification": {"TrainingImage": IMAGE, "TrainingInputMode": "File"},
            "HyperParameters": {
                "sagemaker_program": '"train.py"',
                "sagemaker_submit_directory": '"s3://b/src/sourcedir.tar.gz"',
            },
        },
        {"package_uri": "s3://b/rd/remote-debug"},
    ),
    (
        "toolkit MPI",
        {
            "AlgorithmSpecification": {"TrainingImage": IMAGE, "TrainingInputMode": "File"},
            "HyperParameters": {
                "sagemaker_program": '"train.py"',
                "sagemaker_mpi_enabled": "true",
                "sagemaker_mpi_custom_mpi_options": '"-x NCCL_DEBUG"',
            },
        },
        {},
    ),
    (
        "SDK v3 drivers",
        {
            "AlgorithmSpecification": {
                "TrainingImage": IMAGE,
                "TrainingInputMode": "File",
                "ContainerEntrypoint": ["/bin/bash"],
                "ContainerArguments": [
                    "-c",
                    "chmod +x /opt/ml/input/data/sm_drivers/sm_train.sh && /opt/ml/input/data/sm_drivers/sm_train.sh",
                ],
            }
        },
        {"keep_alive": 60},
    ),
]


@pytest.mark.filterwarnings("ignore:keep_alive=")
@pytest.mark.parametrize(("changes", "options"), [s[1:] for s in _SHAPES], ids=[s[0] for s in _SHAPES])
def test_every_request_shape_passes_the_servers_own_checks(
    state: Path, changes: dict[str, Any], options: dict[str, Any]
) -> None:
    from remote_debug.emulator.constraints import constraint_errors, validation_message

    request = {**copy.deepcopy(BASE), **copy.deepcopy(changes)}
    out = remote_debug.enable(request, owner="alice@example.com", key_dir=state, **options)
    shape = (
        boto3.client("sagemaker", region_name="us-east-1")
        .meta.service_model.operation_model("CreateTrainingJob")
        .input_shape
    )
    errors = constraint_errors(shape, out)
    assert not errors, validation_message(errors)
    again = remote_debug.enable(out, owner="alice@example.com", key_dir=state, **options)  # enabling twice, too
    assert not constraint_errors(shape, again)
    for item in (out.get("AlgorithmSpecification") or {}).get("ContainerEntrypoint", []):
        assert "\n" not in item and "\r" not in item


def test_the_hook_program_is_one_line_within_an_items_limit() -> None:
    program = hook_program(CHANNEL_ROOT)
    assert program.splitlines() == [program]
    assert len(program) <= 256  # SageMaker's limit for one entry item
