"""What a job built by ``enable()`` does when it starts, run for real on this machine.

The container is simulated by a Python that does NOT have remote_debug or debugpy installed (the
system one), a bundle directory standing in for the ``remote-debug`` channel / ``/opt/ml/code``, and
the request's own ``Environment`` and ``ContainerEntrypoint``.  sshd is pointed at a missing binary
(the hook logs that and carries on), so these tests need no root and open no port but debugpy's.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from remote_debug.contract.spec import DebugOptions
from remote_debug.laptop.aws.enable.bundle import bundle_dir, inject_dir
from remote_debug.laptop.aws.enable.keyed_request import enable_with_key
from remote_debug.laptop.core.paths import StatePaths
from tests.helpers.sagemaker_checks import IMAGE, ROLE

COMMAND = 'echo "hook=$REMOTE_DEBUG_HOOK_PID"; echo "pythonpath=$PYTHONPATH"; exit 7'


def _foreign_python() -> str | None:
    """A python in which remote_debug is not importable (as in a stock training image)."""
    for candidate in ("/usr/bin/python3", getattr(sys, "_base_executable", "")):
        if not candidate or not os.path.exists(candidate):
            continue
        probe = subprocess.run(
            [candidate, "-c", "import remote_debug"],
            cwd="/",
            capture_output=True,
            timeout=30,
            check=False,
            env={"PATH": "/usr/bin:/bin"},
        )
        if probe.returncode != 0:
            return candidate
    return None


@pytest.fixture(scope="module")
def python3() -> str:
    found = _foreign_python()
    if found is None:
        pytest.skip("no Python without remote_debug on this machine to play the training image's")
    return found


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The bundle under a short path: the hook program names it, and must stay within 256 characters
    (as ``/opt/ml/input/data/remote_debug`` does)."""
    real = bundle_dir(StatePaths(tmp_path_factory.mktemp("state")))
    short = Path(tempfile.mkdtemp(prefix="rd-", dir="/tmp"))
    (short / "b").symlink_to(real)
    yield short / "b"
    shutil.rmtree(short)


@pytest.fixture
def job(tmp_path: Path, python3: str) -> Iterator[dict[str, Any]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(python3)
    manifest = tmp_path / "manifest"
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "TMPDIR": str(tmp_path),
        "REMOTE_DEBUG_MANIFEST_DIR": str(manifest),
        "REMOTE_DEBUG_SSHD": str(tmp_path / "no-sshd"),
        "REMOTE_DEBUG_INSTALL_SSHD": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    info: dict[str, Any] = {"dir": tmp_path, "env": env, "manifest": manifest}
    yield info
    _stop_node_daemon(manifest)


def _stop_node_daemon(manifest: Path) -> None:
    """A node daemon we caused to start follows its parent's life; make sure it is gone."""
    lock = manifest / "node-daemon.lock"
    try:
        pid = int(lock.read_text().strip() or 0)
    except (OSError, ValueError):
        return
    deadline = time.monotonic() + 10
    while pid and time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    if pid:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _request(tmp: Path, package_root: str, entry: list[str] | None, **options: Any) -> dict[str, Any]:
    request: dict[str, Any] = {
        "TrainingJobName": "rd-start-1",
        "RoleArn": ROLE,
        "AlgorithmSpecification": {"TrainingImage": IMAGE, "TrainingInputMode": "File"},
        "OutputDataConfig": {"S3OutputPath": "s3://b/out"},
    }
    if entry:
        request["AlgorithmSpecification"]["ContainerEntrypoint"] = entry
    return enable_with_key(
        request, DebugOptions(**options), owner="tester", paths=StatePaths(tmp / "laptop"), package_root=package_root
    )


def _run(argv: list[str], job: dict[str, Any], request: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    env = {**request["Environment"], **job["env"]}
    return subprocess.run(argv, env=env, cwd=job["dir"], capture_output=True, text=True, timeout=120, check=False)


def test_wrapped_entry_runs_under_the_hook(job: dict[str, Any], bundle: Path) -> None:
    request = _request(job["dir"], str(bundle), ["/bin/sh", "-c", COMMAND])
    proc = _run(request["AlgorithmSpecification"]["ContainerEntrypoint"], job, request)
    assert proc.returncode == 7, proc.stderr  # the command's exit code is the job's
    assert re.search(r"^hook=\d+$", proc.stdout, re.M), proc.stdout + proc.stderr
    # The hook puts its own inject dir (resolved) on the command's PYTHONPATH; the request sets none.
    [pythonpath] = re.findall(r"^pythonpath=(.*)$", proc.stdout, re.M)
    assert pythonpath.split(":") == [inject_dir(str(bundle.resolve()))]
    node = json.loads(next(job["manifest"].rglob("node.json")).read_text())
    assert (node["job_name"], node["exit_code"]) == ("rd-start-1", 7)


def test_wrapped_entry_keeps_the_images_pythonpath(job: dict[str, Any], bundle: Path) -> None:
    """An image with ``ENV PYTHONPATH=/image/lib``: SageMaker's Environment replaces an image ENV of the
    same name, so the request must not carry PYTHONPATH for the image's to reach the training command."""
    request = _request(job["dir"], str(bundle), ["/bin/sh", "-c", COMMAND])
    image_env = {"PYTHONPATH": "/image/lib"}
    env = {**job["env"], **image_env, **request["Environment"]}  # docker run -e over the image's ENV
    proc = subprocess.run(
        request["AlgorithmSpecification"]["ContainerEntrypoint"],
        env=env,
        cwd=job["dir"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 7, proc.stderr
    [pythonpath] = re.findall(r"^pythonpath=(.*)$", proc.stdout, re.M)
    assert pythonpath.split(":") == [inject_dir(str(bundle.resolve())), "/image/lib"]


def test_without_the_package_the_entry_runs_unchanged(job: dict[str, Any], tmp_path: Path) -> None:
    request = _request(job["dir"], "/nonexistent/remote-debug", ["/bin/sh", "-c", COMMAND])
    proc = _run(request["AlgorithmSpecification"]["ContainerEntrypoint"], job, request)
    assert proc.returncode == 7
    assert "hook=\n" in proc.stdout
    assert "[remote-debug] no hook: " in proc.stderr


def test_without_python_the_entry_runs_unchanged(job: dict[str, Any], bundle: Path, tmp_path: Path) -> None:
    request = _request(job["dir"], str(bundle), ["/bin/sh", "-c", COMMAND])
    empty = tmp_path / "empty"
    empty.mkdir()
    job["env"]["PATH"] = str(empty)  # no python3, no python
    proc = _run(request["AlgorithmSpecification"]["ContainerEntrypoint"], job, request)
    assert proc.returncode == 7
    assert "hook=\n" in proc.stdout


def test_environment_alone_debugs_every_python_process(job: dict[str, Any], bundle: Path) -> None:
    """The SDK v2 toolkit path: no entry to wrap; ``python train.py`` with the job's environment.

    The shipped bundle alone (no remote_debug or debugpy in that python) gives the rank a listener
    and starts the node's services in the background.
    """
    code = job["dir"] / "code"
    code.mkdir()
    (code / "train.py").write_text(
        "import json, debugpy, remote_debug\n"
        "print(json.dumps({'debugpy': debugpy.__file__, 'remote_debug': remote_debug.__file__}))\n"
    )
    request = _request(job["dir"], str(bundle), None)
    assert "ContainerEntrypoint" not in request["AlgorithmSpecification"]
    # eager: start debugpy at once (listeners are lazy by default), so the bundle's own debugpy must listen
    env = {**request["Environment"], **job["env"], "REMOTE_DEBUG_LISTEN": "eager"}
    proc = subprocess.run(
        ["python3", "train.py"], env=env, cwd=code, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    [line] = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    where = json.loads(line)
    assert where["debugpy"].startswith(str(bundle)) and where["remote_debug"].startswith(str(bundle)), where
    rank = json.loads(next(job["manifest"].rglob("rank-0.json")).read_text())
    assert rank["port"] > 0 and rank["state"] == "finished"
    deadline = time.monotonic() + 20
    while not list(job["manifest"].rglob("node.json")):
        assert time.monotonic() < deadline, "the node daemon did not publish a node manifest"
        time.sleep(0.2)


def test_bundle_holds_only_the_container_side(bundle: Path) -> None:
    root = bundle.resolve()
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    ours = [f for f in files if f.startswith("remote_debug/")]
    assert "remote_debug/container/inject/sitecustomize.py" in ours
    laptop_side = ("remote_debug/laptop/", "remote_debug/cli/", "remote_debug/laptop/aws/enable/")
    assert not [f for f in ours if f.startswith(laptop_side)]
    assert not [f for f in files if "__pycache__" in f or f.endswith(".pyc")]
    assert (bundle / "debugpy" / "__init__.py").is_file()
    assert shutil.disk_usage(bundle).total > 0
