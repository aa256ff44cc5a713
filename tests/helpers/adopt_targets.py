"""Jobs started WITHOUT remote_debug, for the adopt tests: a plain torchrun, or a plain Python process.

Their environment is scrubbed of anything of ours (no spec, no sitecustomize on PYTHONPATH), exactly as a
job someone launched by hand.  Each runs in its own session and is killed with its whole process group
by the fixture that started it, even when the test fails.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from tests.helpers.hook_runs import free_port

PYENV = Path.home() / ".pyenv" / "versions"
if not PYENV.is_dir():
    PYENV = Path("/root/.pyenv/versions")


def pyenv_python(minor: str) -> Path | None:
    """pyenv's python3.N (e.g. "3.12"), when this machine has it."""
    for version in sorted(PYENV.glob(f"{minor}.*"), reverse=True):
        exe = version / "bin" / f"python{minor}"
        if exe.exists():
            return exe
    return None


def plain_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("REMOTE_DEBUG_", "SM_", "OMPI_", "PMI_", "PYTEST_"))
        and k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "PYTHONPATH")
    }
    env.update(extra)
    return env


class Plain:
    """A started process tree; ``stop()`` kills its process group."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str], log: Path) -> None:
        self.log = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.pid = self.proc.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)


@contextlib.contextmanager
def plain_torchrun(project: Path, nproc: int = 2, script: str = "train.py") -> Iterator[Plain]:
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(nproc),
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(port),
        script,
    ]
    job = Plain(argv, project, plain_env(), project.parent / "torchrun.log")
    try:
        yield job
    finally:
        job.stop()


@contextlib.contextmanager
def plain_python(project: Path, python: Path | str, script: str = "train.py") -> Iterator[Plain]:
    job = Plain([str(python), script], project, plain_env(), project.parent / "python.log")
    try:
        yield job
    finally:
        job.stop()


def wait_file(path: Path, timeout: float, what: str) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            return path.read_text()
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what} ({path})")
