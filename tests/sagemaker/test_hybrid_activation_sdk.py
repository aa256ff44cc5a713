"""``enable(..., transport="hybrid")`` through the real SageMaker SDKs (v2 PyTorch estimator, v3
ModelTrainer), in their cached venvs (``drivers/capture_sdk.py``: moto, with the SSM calls answered
by the driver after botocore has validated and serialized them).

Shows that the activation is made for the job the SDK names, lands in the job's ``remote_debug``
channel and nowhere in the request, and is deleted when the SDK's own CreateTrainingJob fails -
i.e. the failure hooks sit on the clients the SDKs really use.
"""

from __future__ import annotations

import json
import time
from typing import Any

import botocore.session
import pytest
from botocore.validate import validate_parameters

from remote_debug.laptop.aws.enable.bundle import CHANNEL_NAME, CHANNEL_ROOT, CODE_ROOT, inject_dir
from tests.helpers.sagemaker_checks import validate
from tests.sagemaker.conftest import SdkRun

pytestmark = pytest.mark.timeout(1800)  # a cold start creates both SDK venvs

ACTIVATION_ID = "0a1b2c3d-1111-2222-3333-444455556666"  # drivers/capture_sdk.FAKE_ACTIVATION
CODE = "DriverFakeCode0123456"
_SSM = botocore.session.get_session().get_service_model("ssm")


def validate_ssm(call: dict[str, Any]) -> None:
    validate_parameters(call["request"], _SSM.operation_model(call["operation"]).input_shape)


def assert_hybrid_job(run: SdkRun, scenario: str, *, package_root: str, instances: int) -> dict[str, Any]:
    info: dict[str, Any] = run.scenario(scenario)["info"]
    [request] = run.requests(scenario)
    validate("CreateTrainingJob", request)
    job = request["TrainingJobName"]
    assert CODE not in json.dumps(request)  # environment, hyperparameters, tags, entry: nowhere
    assert "RemoteDebugConfig" not in request
    assert request["Environment"]["REMOTE_DEBUG_TRANSPORT"] == "hybrid"
    if package_root == CODE_ROOT:  # SDK v2's toolkit path: the environment carries the hook
        assert request["Environment"]["PYTHONPATH"] == inject_dir(package_root)
    else:  # a wrapped entry: the hook sets it, in front of the image's own
        assert "PYTHONPATH" not in request["Environment"]
    tags = {t["Key"]: t["Value"] for t in request["Tags"]}
    assert tags["remote-debug:transport"] == "hybrid" and tags["remote-debug:ssm-activation"] == ACTIVATION_ID
    assert tags["remote-debug:owner"] == "alice"

    tier, create = info["ssm_calls"]  # the tier when enable() is called, the activation when the job starts
    for call in (tier, create):
        validate_ssm(call)
    assert (tier["operation"], tier["request"]) == (
        "GetServiceSetting",
        {"SettingId": "/ssm/managed-instance/activation-tier"},
    )
    # the driver's account is on the standard tier: one warning, with the fix, at the launcher's line
    [warning] = run.scenario(scenario)["warnings"]
    assert "--setting-value advanced --region us-east-1" in warning["message"]
    assert warning["filename"].endswith("capture_sdk.py")
    params = create["request"]
    assert {k: v for k, v in params.items() if k != "ExpirationDate"} == {
        "Description": f"remote-debug hybrid transport of SageMaker training job {job}",
        "DefaultInstanceName": job,
        "IamRole": "RemoteDebugManagedInstance",
        "RegistrationLimit": instances,
        "Tags": [
            {"Key": "remote-debug:owner", "Value": "alice"},
            {"Key": "remote-debug:job", "Value": job},
            {"Key": "remote-debug:execution-role", "Value": request["RoleArn"]},
        ],
    }
    # the registration window (2 h), not the job's runtime; made during this session
    assert abs(params["ExpirationDate"] - (time.time() + 2 * 3600)) < 1800

    channel = next(c for c in request["InputDataConfig"] if c["ChannelName"] == CHANNEL_NAME)
    assert channel["DataSource"]["S3DataSource"]["S3Uri"] == info["channel_uri"]
    assert channel.get("InputMode", "File") == "File"
    assert info["activation_file"] == {
        "ActivationId": ACTIVATION_ID,
        "ActivationCode": CODE,
        "Region": "us-east-1",
        "S3Uri": f"{info['channel_uri']}/ssm-activation.json",
    }
    assert info["error"] is None and info["pending"] == {}
    return info


@pytest.mark.parametrize("major", ["v2", "v3"])
def test_hybrid_job_through_the_sdk(sdk_runs: dict[str, SdkRun], major: str) -> None:
    run = sdk_runs[major]
    if major == "v2":
        info = assert_hybrid_job(run, "v2-hybrid", package_root=CODE_ROOT, instances=2)
        # The bundle still ships in sourcedir.tar.gz; the activation does not (its own channel does).
        assert "remote_debug/container/node/hybrid.py" in info["sourcedir"]
        assert not any("ssm-activation" in name for name in info["sourcedir"])
        [request] = run.requests("v2-hybrid")
        assert info["channel_uri"].endswith(f"/{request['TrainingJobName']}/source/remote_debug")
        assert info["enable_remote_debug"] is False
    else:
        info = assert_hybrid_job(run, "v3-hybrid", package_root=CHANNEL_ROOT, instances=2)
        [request] = run.requests("v3-hybrid")
        # The SDK's own per-job channel (the bundle's), not one of ours.
        assert info["channel_uri"].endswith(f"/{request['TrainingJobName']}/input/remote_debug")


@pytest.mark.parametrize("major", ["v2", "v3"])
def test_failed_sdk_create_training_job_deletes_the_activation(sdk_runs: dict[str, SdkRun], major: str) -> None:
    run = sdk_runs[major]
    scenario = f"{major}-hybrid-create-fails"
    info = run.scenario(scenario)["info"]
    assert "ResourceLimitExceeded" in info["error"]
    tier, create, delete = info["ssm_calls"]
    for call in (tier, create, delete):
        validate_ssm(call)
    assert [c["operation"] for c in (tier, create, delete)] == [
        "GetServiceSetting",
        "CreateActivation",
        "DeleteActivation",
    ]
    assert delete["request"] == {"ActivationId": ACTIVATION_ID}
    assert info["activation_file"] == "NoSuchKey"  # the file went with it
    assert info["pending"] == {}
    [request] = run.requests(scenario)
    assert CODE not in json.dumps(request)
