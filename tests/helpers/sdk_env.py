"""One cached virtualenv per SageMaker SDK major, so both majors are tested against the real SDK.

SDK v2 and v3 cannot share an environment (v3 removed ``sagemaker.estimator``), and neither
belongs in the project's own venv (the SDK is an optional extra).  Each venv is created once under
``<repo>/.cache/sdk-v2`` / ``sdk-v3`` (git-ignored) and reused while its stamp - the requirement
lines below - is unchanged.  This repo is installed editable with ``--no-deps``, so code changes
never need a reinstall.  A file lock serialises creation between concurrent test runs.

Run as a script to create them ahead of time: ``python tests/helpers/sdk_env.py v2 v3``.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from filelock import FileLock

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache"

# What each venv holds.  moto[server], cryptography, debugpy: the drivers fake AWS in-process,
# create the per-job key pair and ship debugpy (this repo is installed without its dependencies).
REQUIREMENTS: dict[str, tuple[str, ...]] = {
    "v2": ("sagemaker==2.257.*", "moto[server]>=5", "cryptography", "debugpy>=1.8"),
    "v3": ("sagemaker>=3,<4", "moto[server]>=5", "cryptography", "debugpy>=1.8"),
}
INSTALL_TIMEOUT = 1500  # seconds; a cold install of either SDK took ~1-2 min here


class SdkEnvError(RuntimeError):
    pass


def venv_dir(major: str) -> Path:
    return CACHE / f"sdk-{major}"


def python_of(major: str) -> Path:
    return venv_dir(major) / "bin" / "python"


def _stamp(major: str) -> str:
    return "\n".join((*REQUIREMENTS[major], f"editable:{REPO}")) + "\n"


def _run(args: list[str], log: Path) -> None:
    with log.open("a") as out:
        out.write(f"$ {' '.join(args)}\n")
        out.flush()
        proc = subprocess.run(args, stdout=out, stderr=subprocess.STDOUT, timeout=INSTALL_TIMEOUT, check=False)
    if proc.returncode != 0:
        tail = log.read_text().splitlines()[-15:]
        raise SdkEnvError(f"{' '.join(args[:4])}... failed ({proc.returncode}); see {log}:\n" + "\n".join(tail))


def ensure(major: str) -> Path:
    """The python of the SDK ``major`` venv, creating the venv when missing or stale."""
    if major not in REQUIREMENTS:
        raise SdkEnvError(f"unknown SDK major {major!r}")
    CACHE.mkdir(exist_ok=True)
    target = venv_dir(major)
    stamp_file = target / ".remote-debug-stamp"
    with FileLock(str(CACHE / f"sdk-{major}.lock"), timeout=INSTALL_TIMEOUT + 60):
        if python_of(major).exists() and stamp_file.exists() and stamp_file.read_text() == _stamp(major):
            return python_of(major)
        started = time.monotonic()
        log = CACHE / f"sdk-{major}.log"
        log.write_text("")
        if not python_of(major).exists():
            # The base interpreter, not this venv's: a venv made from a venv python still works,
            # but sys._base_executable keeps the chain short.
            base = getattr(sys, "_base_executable", sys.executable)
            _run([base, "-m", "venv", str(target)], log)
        pip = [str(python_of(major)), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        _run([*pip, *REQUIREMENTS[major]], log)
        _run([*pip, "--no-deps", "-e", str(REPO)], log)
        stamp_file.write_text(_stamp(major))
        with log.open("a") as out:
            out.write(f"created in {time.monotonic() - started:.1f} s\n")
        return python_of(major)


if __name__ == "__main__":
    for name in sys.argv[1:] or sorted(REQUIREMENTS):
        t0 = time.monotonic()
        print(f"{name}: {ensure(name)} ({time.monotonic() - t0:.1f} s)", flush=True)
