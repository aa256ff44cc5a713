"""Fixtures for the container tests: a client key pair and a clean hook environment."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.hook_runs import HookRun, base_env, hook_run, make_key


def _require(tool: str) -> None:
    if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists():
        pytest.skip(f"{tool} is not installed")


@pytest.fixture(scope="session")
def client_key(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """(private key path, public key line) of the 'laptop'."""
    _require("ssh-keygen")
    path = tmp_path_factory.mktemp("client") / "id_ed25519"
    return path, make_key(path)


@pytest.fixture
def run(tmp_path: Path, client_key: tuple[Path, str]) -> Iterator[HookRun]:
    """A hook run with a default spec; tests adjust ``run.env`` before ``run.start(...)``."""
    _require("sshd")
    with hook_run(tmp_path, base_env(tmp_path, client_key[1])) as job:
        yield job
