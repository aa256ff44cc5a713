"""Fixtures the laptop side's end-to-end tests share."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from remote_debug.laptop.core.paths import StatePaths
from remote_debug.oskit import netns


@pytest.fixture
def job_namespaces(home: Path) -> Iterator[list[str]]:
    """Filled by the test with its job's network namespaces; deleted here even when the test fails,
    after the jobs' processes (a namespace lives while they run)."""
    names: list[str] = []
    try:
        yield names
    finally:
        from tests.conftest import cleanup_jobs

        cleanup_jobs(StatePaths.default())
        netns.delete(names)
