"""``remote-debug logs`` and ``attach --log``: bad input is one line on stderr and exit code 2, before any job is
looked up (the real command line, as a user types it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

CLI = [sys.executable, "-m", "remote_debug"]


@pytest.mark.parametrize(
    "args, said",
    [
        (["attach", "j", "--headless", "--log", "train.py:12"], "use FILE:LINE:MESSAGE"),
        (["attach", "j", "--headless", "--log", "train.py:x:loss={loss}"], "use FILE:LINE:MESSAGE"),
        (["attach", "j", "--headless", "--log", "train.py:0:loss={loss}"], "use FILE:LINE:MESSAGE"),
        (["attach", "j", "--headless", "--log", "train.py:3:loss={loss"], "a '{' without its '}'"),
        (["attach", "j", "--headless", "--log", "train.py:3:loss={1 +}"], "{1 +} is not a Python expression"),
        (["attach", "j", "--log", "train.py:3:loss={loss}"], "--log needs --headless"),
        (["attach", "j", "--show-output"], "--show-output needs --headless"),
        (["logs", "j", "--ranks", "x"], "bad rank list"),
        (["logs", "j", "--tail", "-1"], "--tail"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(home: Path, args: list[str], said: str) -> None:
    del home
    done = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done
    assert done.stderr.count("\n") == 1 and said in done.stderr, done.stderr
    assert done.stderr.startswith("remote-debug: error: ") and not done.stdout
