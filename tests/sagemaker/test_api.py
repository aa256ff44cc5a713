"""The public surface: lazy ``remote_debug.enable``, SDK detection and version errors, the request hook."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import remote_debug
from remote_debug.laptop.aws.enable import api, bundle
from remote_debug.laptop.aws.enable import sdk_detect as sdk
from remote_debug.laptop.aws.enable.intercept import EVENT, MARKER_ENV, PendingEnable, marked
from remote_debug.laptop.core.errors import UserError
from remote_debug.laptop.core.paths import StatePaths


def test_importing_remote_debug_imports_neither_sdk_nor_boto3() -> None:
    code = (
        "import sys, remote_debug, remote_debug.laptop.aws.enable\n"
        "f = remote_debug.enable\n"
        "print(sorted(m for m in ('sagemaker', 'boto3', 'botocore') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"
    assert remote_debug.enable is api.enable
    with pytest.raises(AttributeError):
        remote_debug.no_such_thing  # noqa: B018


def _fake_sdk_class(module: str, *bases: str) -> type:
    parents = tuple(type(b, (), {"__module__": module}) for b in bases)
    return type("Thing", parents or (object,), {"__module__": module})


@pytest.mark.parametrize(
    ("module", "bases", "kind"),
    [
        ("sagemaker.pytorch.estimator", ("EstimatorBase",), "estimator"),
        ("sagemaker.train.model_trainer", ("ModelTrainer",), "trainer"),
        ("sagemaker.modules.train.model_trainer", ("ModelTrainer",), "trainer"),
        ("mypackage.things", ("EstimatorBase",), None),  # same name, not the SDK's
    ],
)
def test_sdk_objects_are_recognised_by_class(module: str, bases: tuple[str, ...], kind: str | None) -> None:
    assert api.sdk_kind(_fake_sdk_class(module, *bases)()) == kind


def test_unknown_targets_are_refused(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"got builtins\.str"):
        remote_debug.enable("my-job", key_dir=tmp_path)


def test_sdk_version_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    def version(installed: str | None) -> Any:
        def fake(name: str) -> str:
            if installed is None:
                raise importlib.metadata.PackageNotFoundError(name)
            return installed

        return fake

    monkeypatch.setattr(importlib.metadata, "version", version(None))
    with pytest.raises(UserError, match=r"needs the SageMaker Python SDK 2\.x, which is not installed: pip install"):
        sdk.require_sdk(2, "enable() of an estimator")
    monkeypatch.setattr(importlib.metadata, "version", version("3.27.0"))
    with pytest.raises(UserError, match=r"needs the SageMaker Python SDK 2\.x, but sagemaker 3\.27\.0 is installed"):
        sdk.require_sdk(2, "enable() of an estimator")
    monkeypatch.setattr(importlib.metadata, "version", version("2.200.1"))
    with pytest.raises(UserError, match=r"needs sagemaker >= 2\.222"):
        sdk.require_sdk(2, "x", (2, 222))
    monkeypatch.setattr(importlib.metadata, "version", version("2.257.7rc1"))
    assert sdk.require_sdk(2, "x", (2, 222)) == (2, 257, 7)


def test_request_hook_rewrites_only_its_own_requests() -> None:
    seen: list[dict[str, Any]] = []

    def apply(request: dict[str, Any]) -> dict[str, Any]:
        seen.append(request)
        return {**request, "Environment": {**request["Environment"], "REMOTE_DEBUG_JOB": request["TrainingJobName"]}}

    pending = PendingEnable(apply)
    other = PendingEnable(apply)
    mine = {"TrainingJobName": "j1", "Environment": marked({"A": "1"}, pending)}
    theirs = {"TrainingJobName": "j2", "Environment": marked(None, other)}
    unmarked = {"TrainingJobName": "j3"}
    for params in (mine, theirs, unmarked):
        pending.handler(params)
    assert mine == {"TrainingJobName": "j1", "Environment": {"A": "1", "REMOTE_DEBUG_JOB": "j1"}}
    assert MARKER_ENV in theirs["Environment"] and unmarked == {"TrainingJobName": "j3"}
    assert pending.jobs == ["j1"] and [r["TrainingJobName"] for r in seen] == ["j1"]


def test_request_hook_registration_is_keyed() -> None:
    registered: list[tuple[str, Any, str]] = []

    class Events:
        def register(self, event: str, handler: Any, unique_id: str) -> None:
            registered.append((event, handler, unique_id))

    class Client:
        class meta:
            events = Events()

    class Session:
        events = Events()

    pending = PendingEnable(lambda r: r)
    pending.install(boto_session=Session(), clients=[Client()])
    assert [(e, u) for e, _h, u in registered] == [(EVENT, pending.unique_id)] * 2
    assert EVENT == "before-parameter-build.sagemaker.CreateTrainingJob"


def test_bundle_is_cached_and_rebuilt_when_the_code_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = StatePaths(tmp_path)
    first = bundle.bundle_dir(paths)
    assert bundle.bundle_dir(paths) == first
    source = Path(bundle.__file__).parents[3] / "contract/spec.py"
    assert (first / "remote_debug" / "contract/spec.py").read_bytes() == source.read_bytes()
    monkeypatch.setattr(bundle, "_fingerprint", lambda _debugpy: "changed")
    second = bundle.bundle_dir(paths)
    assert second != first and second.name == "changed" and (second / "debugpy" / "__init__.py").exists()
    assert sorted(p.name for p in (tmp_path / "bundles").iterdir()) == sorted([first.name, "changed"])
