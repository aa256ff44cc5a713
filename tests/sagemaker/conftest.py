"""Fixtures for the SageMaker side: the SDK venv runs (one driver process per SDK major, shared by
every test of the session) and botocore-model validation of captured requests."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import sdk_env
from tests.helpers.fake_aws import moto_cloud

DRIVER = Path(__file__).resolve().parent / "drivers" / "capture_sdk.py"
ARTIFACTS = sdk_env.REPO / "test-artifacts" / "sagemaker"

# Scenarios of drivers/capture_sdk.py run in each SDK's venv.
SCENARIOS: dict[str, tuple[str, ...]] = {
    "v2": (
        "v2-pytorch-single",
        "v2-pytorch-torchrun",
        "v2-pytorch-mpi",
        "v2-pytorch-fit-twice",
        "v2-user-pythonpath",
        "v2-direct",
        "v2-generic-estimator-entrypoint",
        "v2-refusals",
        "v2-model-trainer",
        "launcher-v2",
        "launcher-boto3",
        "import-launchers",
        "v2-hybrid",
        "v2-hybrid-create-fails",
        "v2-keep-alive",
        "v2-keep-alive-refusals",
    ),
    "v3": (
        "v3-single",
        "v3-torchrun",
        "v3-refusals",
        "v3-direct",
        "launcher-v3",
        "launcher-boto3",
        "import-launchers",
        "v3-hybrid",
        "v3-hybrid-create-fails",
        "v3-keep-alive",
        "v3-keep-alive-refusals",
    ),
}
DRIVER_TIMEOUT = 600


@dataclass
class SdkRun:
    major: str
    state_dir: Path  # REMOTE_DEBUG_HOME of the driver: where the per-job keys were written
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    skip_reason: str | None = None

    def scenario(self, name: str) -> dict[str, Any]:
        if self.skip_reason:
            pytest.skip(self.skip_reason)
        result = self.results[name]
        assert result["error"] is None, f"{name}: {result['error']}\n{result.get('traceback', '')}"
        return result

    def requests(self, name: str) -> list[dict[str, Any]]:
        return [r["request"] for r in self.scenario(name)["requests"] if r["operation"] == "CreateTrainingJob"]


def _run_driver(major: str, root: Path, out: dict[str, SdkRun]) -> None:
    run = SdkRun(major, root / "state")
    out[major] = run
    try:
        python = sdk_env.ensure(major)
    except sdk_env.SdkEnvError as exc:  # only a real install failure skips, with the pip output
        run.skip_reason = f"SageMaker SDK {major} could not be installed here: {exc}"
        return
    home = root / "home"
    home.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "REMOTE_DEBUG_"))}
    env.update({"HOME": str(home), "REMOTE_DEBUG_HOME": str(run.state_dir), "PYTHONDONTWRITEBYTECODE": "1"})
    result_file = root / "result.json"
    log = root / "driver.log"
    with log.open("w") as fh:
        proc = subprocess.run(
            [str(python), str(DRIVER), "--out", str(result_file), *SCENARIOS[major]],
            stdout=fh,
            stderr=subprocess.STDOUT,
            env=env,
            timeout=DRIVER_TIMEOUT,
            check=False,
        )
    if proc.returncode != 0 or not result_file.exists():
        raise AssertionError(f"SDK {major} driver failed ({proc.returncode}):\n" + log.read_text()[-4000:])
    run.results = json.loads(result_file.read_text())
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for name, result in run.results.items():
        label = name if name.startswith(major) else f"{major}-{name}"
        (ARTIFACTS / f"{label}.json").write_text(json.dumps(result["requests"], indent=1) + "\n")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The SDK runs are set up within the first test that needs them: allow them the installs' and the
    drivers' own limits (pyproject's 300 s cut a set-up that was still within both on a loaded machine)."""
    for item in items:
        if "sdk_runs" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.timeout(sdk_env.INSTALL_TIMEOUT + DRIVER_TIMEOUT + 60))


@pytest.fixture(scope="session")
def sdk_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, SdkRun]]:
    """Both SDK majors, each driven once in its own venv; the two run side by side (venv creation
    is mostly waiting on pip, the drivers use one core each)."""
    out: dict[str, SdkRun] = {}
    errors: list[BaseException] = []

    def worker(major: str) -> None:
        try:
            _run_driver(major, tmp_path_factory.mktemp(f"sdk-{major}"), out)
        except BaseException as exc:  # reported below, in the test that asked
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(m,)) for m in SCENARIOS]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    yield out


@pytest.fixture
def state(tmp_path: Path) -> Path:
    """The laptop state dir of a test that calls enable() or builds requests (keys, bundles)."""
    return tmp_path / "state"


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """moto's AWS in us-east-1 for the test (S3 for bundles, STS, IAM)."""
    with moto_cloud(monkeypatch, "us-east-1"):
        yield
