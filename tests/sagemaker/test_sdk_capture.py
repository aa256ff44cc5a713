"""The exact CreateTrainingJob requests the real SageMaker SDKs send after ``remote_debug.enable``.

SDK v2 (sagemaker 2.257.x) and SDK v3 (sagemaker 3.x) each run in their own cached venv (see
``sdk_env``); a driver there builds estimators / trainers under moto and records the serialized
request bodies (``drivers/capture_sdk.py``).  Here every body is validated against botocore's
service model and the parts remote-debug owns are compared exactly.  Copies of all captured
requests are written to ``test-artifacts/sagemaker/`` for reading.
"""

from __future__ import annotations

from typing import Any

import pytest

from remote_debug.laptop.aws.enable.bundle import CHANNEL_NAME, CHANNEL_ROOT, CODE_ROOT, inject_dir
from remote_debug.laptop.aws.enable.request import WRAP_SCRIPT, WRAP_SHELL, hook_program
from tests.helpers.sagemaker_checks import MOTO_USER_ID, assert_debuggable, validate
from tests.sagemaker.conftest import SdkRun

pytestmark = pytest.mark.timeout(1800)  # a cold start creates both SDK venvs (about 3 minutes here)

V3_ENTRY = ["/bin/bash"]
V3_ARGUMENTS = ["-c", "chmod +x /opt/ml/input/data/sm_drivers/sm_train.sh && /opt/ml/input/data/sm_drivers/sm_train.sh"]
SHIPPED = (
    "remote_debug/__init__.py",
    "remote_debug/contract/spec.py",
    "remote_debug/container/node/hook.py",
    "remote_debug/container/inject/sitecustomize.py",
    "debugpy/__init__.py",
)
NOT_SHIPPED = ("remote_debug/laptop/", "remote_debug/cli/", "remote_debug/__main__.py")


def wrapped(package_root: str, *entry: str) -> list[str]:
    return [WRAP_SHELL, "-c", WRAP_SCRIPT, hook_program(package_root), *entry]


def assert_ships_bundle(files: list[str]) -> None:
    for name in SHIPPED:
        assert name in files, name
    for prefix in NOT_SHIPPED:
        assert not any(f.startswith(prefix) for f in files), prefix
    assert not any("__pycache__" in f for f in files)


@pytest.fixture(scope="module")
def v2(sdk_runs: dict[str, SdkRun]) -> SdkRun:
    return sdk_runs["v2"]


@pytest.fixture(scope="module")
def v3(sdk_runs: dict[str, SdkRun]) -> SdkRun:
    return sdk_runs["v3"]


# --- SDK v2 -----------------------------------------------------------------------------------------


def test_v2_pytorch_single_node(v2: SdkRun) -> None:
    result = v2.scenario("v2-pytorch-single")
    [request] = v2.requests("v2-pytorch-single")
    assert request["TrainingJobName"] == result["info"]["job_name"]
    assert_debuggable(
        request, v2.state_dir, package_root=CODE_ROOT, owner=MOTO_USER_ID, user_env={"USER_VAR": "kept"}, wait="30"
    )
    # The toolkit path: no entry to wrap; the user's script is the program, shipped unchanged.
    assert "ContainerEntrypoint" not in request["AlgorithmSpecification"]
    assert request["HyperParameters"]["sagemaker_program"] == '"train.py"'
    sourcedir = result["info"]["sourcedir"]
    assert "train.py" in sourcedir
    assert_ships_bundle(sourcedir)
    assert result["info"]["dependencies"] == ["remote_debug", "debugpy"]


def test_v2_pytorch_torchrun_multi_node(v2: SdkRun) -> None:
    [request] = v2.requests("v2-pytorch-torchrun")
    assert_debuggable(
        request,
        v2.state_dir,
        package_root=CODE_ROOT,
        owner=MOTO_USER_ID,
        user_env={"USER_VAR": "kept"},
        ranks="0,3",
        port_base="5678",
    )
    assert request["ResourceConfig"]["InstanceCount"] == 2
    assert request["HyperParameters"]["sagemaker_torch_distributed_enabled"] == "true"


def test_v2_mpi_forwards_the_spec_to_other_nodes(v2: SdkRun) -> None:
    [request] = v2.requests("v2-pytorch-mpi")
    assert_debuggable(request, v2.state_dir, package_root=CODE_ROOT, owner="team-a", user_env={"USER_VAR": "kept"})
    names = [n for n in request["Environment"] if n.startswith("REMOTE_DEBUG_")] + ["PYTHONPATH"]
    assert request["HyperParameters"]["sagemaker_mpi_custom_mpi_options"] == (
        '"--NCCL_DEBUG WARN ' + " ".join(f"-x {n}" for n in names) + '"'
    )


def test_v2_keeps_the_estimators_pythonpath_after_ours(v2: SdkRun) -> None:
    [request] = v2.requests("v2-user-pythonpath")
    assert "ContainerEntrypoint" not in request["AlgorithmSpecification"]  # the toolkit path: env-based hook
    assert request["Environment"]["PYTHONPATH"] == f"{inject_dir(CODE_ROOT)}:/opt/ml/code/lib"


def test_v2_direct_transport_in_a_vpc(v2: SdkRun) -> None:
    [request] = v2.requests("v2-direct")
    validate("CreateTrainingJob", request)
    assert request["VpcConfig"] == {
        "SecurityGroupIds": ["sg-0123456789abcdef0"],
        "Subnets": ["subnet-0123456789abcdef0"],
    }
    assert request["Environment"]["REMOTE_DEBUG_TRANSPORT"] == "direct"
    assert "RemoteDebugConfig" not in request


def test_v2_each_fit_gets_its_own_job_spec_and_key(v2: SdkRun) -> None:
    first, second = v2.requests("v2-pytorch-fit-twice")
    assert (first["TrainingJobName"], second["TrainingJobName"]) == ("rd-twice-1", "rd-twice-2")
    for request in (first, second):
        assert_debuggable(
            request, v2.state_dir, package_root=CODE_ROOT, owner=MOTO_USER_ID, user_env={"USER_VAR": "kept"}
        )
    keys = {r["Environment"]["REMOTE_DEBUG_CLIENT_PUBKEY"] for r in (first, second)}
    assert len(keys) == 2


def test_v2_container_entry_point_is_wrapped(v2: SdkRun) -> None:
    [request] = v2.requests("v2-generic-estimator-entrypoint")
    assert_debuggable(request, v2.state_dir, package_root=CODE_ROOT, owner="alice")
    algorithm = request["AlgorithmSpecification"]
    assert algorithm["ContainerEntrypoint"] == wrapped(CODE_ROOT, "python3", "/opt/program/train.py")
    assert algorithm["ContainerArguments"] == ["--epochs", "3"]


def test_v2_refusals_are_one_line(v2: SdkRun) -> None:
    refusals = v2.scenario("v2-refusals")["info"]
    expected = {
        "network-isolation": "network isolation (enable_network_isolation=True), which cuts the container off "
        "from every network: no SSM session",
        "builtin-algorithm": "'kmeans' is a SageMaker built-in algorithm",
        "job-name-on-sdk": "fit(job_name=...)",
        "s3-source-dir": "source_dir is on S3",
        "python-3.9": "py_version='py39' runs Python 3.9, but remote-debug runs in the job and needs Python >= 3.10",
        "direct-without-vpc": "transport='direct' connects to the nodes inside the job's VPC, but the job has no "
        "VpcConfig",
    }
    for case, needle in expected.items():
        message = refusals[case]
        assert message is not None and needle in message and "\n" not in message, (case, message)
    assert v2.requests("v2-refusals") == []


def test_v2_modules_model_trainer(v2: SdkRun) -> None:
    [request] = v2.requests("v2-model-trainer")
    assert_debuggable(request, v2.state_dir, package_root=CHANNEL_ROOT, owner="alice")
    assert request["AlgorithmSpecification"]["ContainerEntrypoint"] == wrapped(CHANNEL_ROOT, *V3_ENTRY)
    assert request["AlgorithmSpecification"]["ContainerArguments"] == V3_ARGUMENTS
    assert CHANNEL_NAME in [c["ChannelName"] for c in request["InputDataConfig"]]


def test_v2_launcher_examples(v2: SdkRun) -> None:
    result = v2.scenario("launcher-v2")
    single, multi = v2.requests("launcher-v2")
    for request in (single, multi):
        assert_debuggable(request, v2.state_dir, package_root=CODE_ROOT, owner=MOTO_USER_ID, wait="600")
        assert request["HyperParameters"]["sagemaker_program"] == '"train.py"'
    assert multi["ResourceConfig"]["InstanceCount"] == 2
    assert multi["HyperParameters"]["sagemaker_torch_distributed_enabled"] == "true"
    for files in result["info"].values():
        assert "train.py" in files
        assert_ships_bundle(files)


# --- SDK v3 -----------------------------------------------------------------------------------------


def _assert_v3(run: SdkRun, scenario: str, owner: str, **spec: str) -> dict[str, Any]:
    result = run.scenario(scenario)
    [request] = run.requests(scenario)
    assert_debuggable(
        request, run.state_dir, package_root=CHANNEL_ROOT, owner=owner, user_env={"USER_VAR": "kept"}, **spec
    )
    algorithm = request["AlgorithmSpecification"]
    # The SDK's own entry, run by the hook; its arguments untouched.
    assert algorithm["ContainerEntrypoint"] == wrapped(CHANNEL_ROOT, *V3_ENTRY)
    assert algorithm["ContainerArguments"] == V3_ARGUMENTS
    channels = {c["ChannelName"]: c for c in request["InputDataConfig"]}
    assert {"code", "sm_drivers", CHANNEL_NAME} <= set(channels)
    assert_ships_bundle(result["info"]["remote_debug_channel"])
    return request


def test_v3_model_trainer_single_node(v3: SdkRun) -> None:
    _assert_v3(v3, "v3-single", MOTO_USER_ID, wait="30")


def test_v3_model_trainer_torchrun_multi_node(v3: SdkRun) -> None:
    request = _assert_v3(v3, "v3-torchrun", "team-a", ranks="0,2")
    assert request["ResourceConfig"] == {"InstanceType": "ml.g5.12xlarge", "InstanceCount": 2, "VolumeSizeInGB": 30}


def test_v3_refusals_are_one_line(v3: SdkRun) -> None:
    refusals = v3.scenario("v3-refusals")["info"]
    expected = {
        "network-isolation": "network isolation (Networking(enable_network_isolation=True)), which cuts the "
        "container off from every network: no SSM session",
        "python-3.9": "image pytorch-training:1.13.1-gpu-py39-cu117-ubuntu20.04-sagemaker runs Python 3.9",
        "direct-without-vpc": "the job has no VpcConfig",
    }
    for case, needle in expected.items():
        message = refusals[case]
        assert message is not None and needle in message and "\n" not in message, (case, message)
    assert v3.requests("v3-refusals") == []


def test_v3_direct_transport_in_a_vpc(v3: SdkRun) -> None:
    [request] = v3.requests("v3-direct")
    validate("CreateTrainingJob", request)
    assert request["VpcConfig"]["Subnets"] == ["subnet-0123456789abcdef0"]
    assert request["Environment"]["REMOTE_DEBUG_TRANSPORT"] == "direct"
    assert "RemoteDebugConfig" not in request
    assert "PYTHONPATH" not in request["Environment"]  # a wrapped entry (sm_train.sh): the hook sets it


def test_v3_launcher_examples(v3: SdkRun) -> None:
    v3.scenario("launcher-v3")
    single, multi = v3.requests("launcher-v3")
    for request in (single, multi):
        assert_debuggable(request, v3.state_dir, package_root=CHANNEL_ROOT, owner=MOTO_USER_ID, wait="600")
        assert request["AlgorithmSpecification"]["ContainerEntrypoint"] == wrapped(CHANNEL_ROOT, *V3_ENTRY)
    assert multi["ResourceConfig"]["InstanceCount"] == 2


# --- raw boto3 launcher and imports, in both venvs ---------------------------------------------------


@pytest.mark.parametrize("major", ["v2", "v3"])
def test_boto3_launcher_example(sdk_runs: dict[str, SdkRun], major: str) -> None:
    run = sdk_runs[major]
    result = run.scenario("launcher-boto3")
    single, multi = run.requests("launcher-boto3")
    for request in (single, multi):
        assert_debuggable(
            request,
            run.state_dir,
            package_root=CHANNEL_ROOT,
            owner=MOTO_USER_ID,
            user_env={"SM_HP_STEPS": "1000"},
            wait="600",
        )
        job = request["TrainingJobName"]
        assert request["InputDataConfig"][-1] == {
            "ChannelName": CHANNEL_NAME,
            "DataSource": {
                "S3DataSource": {
                    "S3DataType": "S3Prefix",
                    "S3Uri": f"s3://rd-bucket/{job}/remote-debug",
                    "S3DataDistributionType": "FullyReplicated",
                }
            },
            "InputMode": "File",
        }
    assert single["AlgorithmSpecification"]["ContainerEntrypoint"] == wrapped(
        CHANNEL_ROOT, "python3", "/opt/ml/input/data/code/train.py"
    )
    assert multi["AlgorithmSpecification"]["ContainerEntrypoint"][4:7] == ["torchrun", "--nnodes", "2"]
    assert result["info"]["uploaded"]


@pytest.mark.parametrize("major", ["v2", "v3"])
def test_launchers_import_cleanly(sdk_runs: dict[str, SdkRun], major: str) -> None:
    imported = sdk_runs[major].scenario("import-launchers")["info"]["imported"]
    assert imported == ["boto3_request", "sdk_v2_pytorch" if major == "v2" else "sdk_v3_model_trainer"]


def test_every_captured_request_validates(sdk_runs: dict[str, SdkRun]) -> None:
    count = 0
    for run in sdk_runs.values():
        if run.skip_reason:
            continue
        for result in run.results.values():
            for captured in result["requests"]:
                validate(captured["operation"], captured["request"])
                count += 1
    assert count >= 15
