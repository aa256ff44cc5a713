"""Our .dynsym reader finds the addresses gdb itself finds, in a shared-libpython and a static interpreter.

The injector calls these three functions by address so that gdb reads no symbols while the rank is stopped; a
wrong address would call into the middle of some other function in the user's process.  gdb (code we did not
write) is the referee.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from remote_debug.container.node.adopt import elf_symbols
from tests.helpers.adopt_targets import pyenv_python

NAMES = ("Py_AddPendingCall", "PyRun_SimpleString")
INTERPRETERS = {
    "shared libpython (pyenv 3.12)": pyenv_python("3.12"),
    "static (Debian's python3)": Path("/usr/bin/python3") if Path("/usr/bin/python3").exists() else None,
}


def gdb_address(pid: int, name: str) -> int:
    out = subprocess.run(
        ["gdb", "-nx", "-batch", "--readnever", "-p", str(pid), "-ex", f"print (long) &{name}"],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    match = re.search(r"^\$1 = (-?\d+)$", out, re.MULTILINE)
    assert match, out
    return int(match.group(1))


@pytest.mark.skipif(shutil.which("gdb") is None, reason="needs gdb")
@pytest.mark.parametrize("label", list(INTERPRETERS))
def test_addresses_match_gdbs(label: str) -> None:
    python = INTERPRETERS[label]
    if python is None:
        pytest.skip(f"no {label} here")
    proc = subprocess.Popen(
        [str(python), "-c", "print('up', flush=True); import time; time.sleep(120)"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "up\n"  # loaded: libc and libpython mapped
        found = elf_symbols.resolve(proc.pid, NAMES, libc_only=("mmap",))
        assert found is not None
        for name in NAMES:
            assert found[name] == gdb_address(proc.pid, name), name
        assert found["mmap"] == gdb_address(proc.pid, "mmap")
    finally:
        proc.kill()
        proc.wait()


def test_a_process_without_libpython_has_no_addresses() -> None:
    proc = subprocess.Popen(["sleep", "60"])
    try:
        assert elf_symbols.resolve(proc.pid, NAMES, libc_only=("mmap",)) is None
    finally:
        proc.kill()
        proc.wait()
