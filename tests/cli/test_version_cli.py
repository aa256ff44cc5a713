"""``remote-debug version``: the installed distribution's real name and version, and an interpreter that
has it (the VS Code extension checks its minimum version with this, and upgrades with that interpreter)."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

from remote_debug import DISTRIBUTION, __version__
from remote_debug.laptop.wire.events import EVENTS_VERSION

CLI = Path(sys.executable).with_name("remote-debug")


def test_version_json_names_the_installed_distribution_and_its_python() -> None:
    out = subprocess.run([str(CLI), "version", "--json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    # what pip really installed under that name: a renamed pyproject without the constant fails here
    assert data["distribution"] == DISTRIBUTION == "remote-debug-training"
    assert data["version"] == importlib.metadata.version(DISTRIBUTION) == __version__
    assert data["events_version"] == EVENTS_VERSION
    # the interpreter the extension would run `-m pip install --upgrade` with has this very package
    probe = subprocess.run(
        [data["python"], "-c", "import remote_debug; print(remote_debug.__version__)"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert probe.stdout.strip() == data["version"], probe.stderr


def test_version_for_people_is_one_line() -> None:
    out = subprocess.run([str(CLI), "version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    [line] = out.stdout.splitlines()
    assert line.startswith(f"remote-debug {__version__} ({DISTRIBUTION};")
