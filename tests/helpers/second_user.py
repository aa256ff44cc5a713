"""Playing another local user: ``nobody`` through ``setpriv`` (root only), running the system's Python.

The venv's interpreter may live where another user cannot enter (/root/.pyenv), so the system's plays the
attacker, with ``-I -S`` (nothing of ours on its path).
"""

from __future__ import annotations

import os
import pwd
import shutil

import pytest

ATTACKER_PYTHON = "/usr/bin/python3"
needs_second_user = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None or not os.access(ATTACKER_PYTHON, os.X_OK),
    reason=f"plays a second user: needs root, setpriv and {ATTACKER_PYTHON}",
)


def nobody() -> pwd.struct_passwd:
    return pwd.getpwnam("nobody")


def as_nobody(*argv: str) -> list[str]:
    """``argv`` run as nobody (no supplementary groups)."""
    user = nobody()
    return ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups", *argv]


def python_as_nobody(code: str, *args: str) -> list[str]:
    """``code`` in the system's Python, as nobody."""
    return as_nobody(ATTACKER_PYTHON, "-I", "-S", "-c", code, *args)
