"""``remote_debug.container.node.pyspy``: real py-spy on real processes - the function and line a process is in,
whether its main thread is blocked in native code, and one line when it cannot be read."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from remote_debug.container.node import pyspy
from tests.helpers.second_user import ATTACKER_PYTHON, as_nobody, needs_second_user, nobody

ROOT = Path(__file__).resolve().parents[2]
needs_pyspy = pytest.mark.skipif(
    not os.path.exists(os.path.join(os.path.dirname(sys.executable), "py-spy")) and shutil.which("py-spy") is None,
    reason="py-spy is not installed (pip install py-spy)",
)
pytestmark = needs_pyspy

# each mode parks the main thread in a function of its own, at a line the tests read from the file
TARGET = textwrap.dedent(
    """
    import ctypes, pathlib, sys, threading, time

    def sleepy_function():
        time.sleep(300)  # SLEEP-LINE

    def hold_the_gil():
        ctypes.PyDLL(None).sleep(300)  # GIL-LINE: libc's sleep called without releasing the GIL

    def spin():
        while True:  # SPIN-LINE
            pass

    def worker_loop():
        while True:
            time.sleep(1)

    threading.Thread(target=worker_loop, name="worker", daemon=True).start()
    pathlib.Path(sys.argv[2]).write_text("")
    {"sleep": sleepy_function, "gil": hold_the_gil, "spin": spin}[sys.argv[1]]()
    """
)


def line_of(path: Path, mark: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if mark in line)


class Targets:
    """Python processes the test starts (killed by pid at the end, even on failure)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.script = root / "target.py"
        self.script.write_text(TARGET)
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, mode: str, argv_prefix: tuple[str, ...] = (), python: str = sys.executable) -> int:
        ready = self.root / f"ready-{len(self.procs)}"
        proc = subprocess.Popen([*argv_prefix, python, str(self.script), mode, str(ready)], stdin=subprocess.DEVNULL)
        self.procs.append(proc)
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert proc.poll() is None, f"target exited with {proc.returncode}"
            assert time.monotonic() < deadline, "target did not start"
            time.sleep(0.05)
        time.sleep(0.2)  # from the mark into its function
        return proc.pid

    def stop(self) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait()


@pytest.fixture
def targets(tmp_path: Path) -> Iterator[Targets]:
    tmp_path.chmod(0o755)  # a second user's target must read its script
    t = Targets(tmp_path)
    try:
        yield t
    finally:
        t.stop()


def test_a_sleeping_process_shows_its_function_and_line_and_is_blocked_in_native_code(targets: Targets) -> None:
    pid = targets.start("sleep")
    process = pyspy.dump(pid)
    assert process.pid == pid and not process.nonblocking
    main = process.main_thread
    assert main is not None and main.name == "MainThread" and main.os_id == pid and main.main
    assert process.threads[0] is main  # the main thread first
    # outermost first, as a traceback
    assert [(f.function, f.line) for f in main.frames] == [
        ("<module>", len(TARGET.strip().splitlines()) + 1),
        ("sleepy_function", line_of(targets.script, "SLEEP-LINE")),
    ]
    assert main.frames[-1].file == str(targets.script)
    assert not main.active and pyspy.blocked_in_native(main)
    worker = next(t for t in process.threads if t.name == "worker")
    assert worker.frames[-1].function == "worker_loop" and not worker.internal and not worker.main
    assert process.seconds < 5

    text = pyspy.format_dump(process)
    lines = text.splitlines()
    assert lines[0] == f"pid {pid} (from py-spy)"
    assert lines[1] == "  thread MainThread (blocked in native code):"
    assert lines[3] == f'    File "{targets.script}", line {line_of(targets.script, "SLEEP-LINE")}, in sleepy_function'
    assert "  thread worker:" in lines


def test_a_c_call_holding_the_gil_is_blocked_too_and_a_busy_loop_is_not(targets: Targets) -> None:
    gil = pyspy.dump(targets.start("gil")).main_thread
    assert gil is not None and gil.frames[-1].function == "hold_the_gil"
    assert gil.frames[-1].line == line_of(targets.script, "GIL-LINE")
    # why owns_gil is not the signal: this call blocks with the GIL held
    assert gil.owns_gil and not gil.active and pyspy.blocked_in_native(gil)

    spinning = pyspy.dump(targets.start("spin")).main_thread
    assert spinning is not None and spinning.frames[-1].function == "spin"
    assert spinning.active and not pyspy.blocked_in_native(spinning)


def test_not_python_gone_and_missing_py_spy_are_one_line(targets: Targets, monkeypatch: pytest.MonkeyPatch) -> None:
    sleeper = subprocess.Popen(["sleep", "300"])
    targets.procs.append(sleeper)  # stopped with the others
    with pytest.raises(pyspy.PyspyError) as not_python:
        pyspy.dump(sleeper.pid)
    assert f"process {sleeper.pid} (sleep) is not a Python process" in str(not_python.value)

    gone = subprocess.Popen(["true"])
    gone.wait()
    with pytest.raises(pyspy.PyspyError, match=f"process {gone.pid} does not exist"):
        pyspy.dump(gone.pid)

    pid = targets.start("sleep")
    monkeypatch.setenv(pyspy.ENV_PYSPY, str(targets.root / "no-such-py-spy"))
    with pytest.raises(pyspy.PyspyError) as missing:
        pyspy.dump(pid)
    message = str(missing.value)
    assert message.startswith("py-spy not found: pip install py-spy") and "REMOTE_DEBUG_PYSPY" in message
    assert "\n" not in message


@needs_second_user
def test_another_users_process_is_one_line_naming_its_owner(targets: Targets) -> None:
    """The container module run by a second user (the system's Python, as on an instance) on our process."""
    pid = targets.start("sleep")
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); from remote_debug.container.node import pyspy\n"
        "try:\n    pyspy.dump(int(sys.argv[2]), pyspy=sys.argv[3])\nexcept pyspy.PyspyError as e:\n    print(e)\n"
    )
    binary = pyspy.find_pyspy()
    proc = subprocess.run(
        as_nobody(ATTACKER_PYTHON, "-I", "-S", "-B", "-c", code, str(ROOT), str(pid), binary),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        f"process {pid} belongs to user root (uid 0), not to you (user nobody (uid {nobody().pw_uid})): "
        "run remote-debug as that user (or as root)"
    ]


# A seccomp filter that refuses the ptrace syscall (EPERM) and allows everything else - what a container
# profile that blocks ptrace but not process_vm_readv does - then execs its arguments.
NO_PTRACE = textwrap.dedent(
    """
    import ctypes, os, struct, sys
    def insn(code, k, jt=0, jf=0):
        return struct.pack("HBBI", code, jt, jf, k)
    program = b"".join([
        insn(0x20, 0),                    # load the syscall number
        insn(0x15, 101, 0, 1),            # ptrace (x86_64)?
        insn(0x06, 0x00050000 | 1),       # -> SECCOMP_RET_ERRNO | EPERM
        insn(0x06, 0x7FFF0000),           # -> SECCOMP_RET_ALLOW
    ])
    buf = ctypes.create_string_buffer(program)
    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
    prog = Prog(len(program) // 8, ctypes.addressof(buf))
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
    assert libc.prctl(22, 2, ctypes.byref(prog), 0, 0) == 0, ctypes.get_errno()  # PR_SET_SECCOMP, FILTER
    os.execv(sys.argv[1], sys.argv[1:])
    """
)


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the filter names x86_64's ptrace syscall number")
def test_ptrace_refused_reads_without_stopping_the_process(targets: Targets) -> None:
    pid = targets.start("sleep")
    wrapper = targets.root / "no_ptrace.py"
    wrapper.write_text(NO_PTRACE)
    code = (
        "import sys; from remote_debug.container.node import pyspy\n"
        "d = pyspy.dump(int(sys.argv[1])); m = d.main_thread\n"
        "print(d.nonblocking, m.frames[-1].function, m.frames[-1].line, pyspy.blocked_in_native(m))\n"
    )
    proc = subprocess.run(
        [sys.executable, str(wrapper), sys.executable, "-c", code, str(pid)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "sleepy_function", str(line_of(targets.script, "SLEEP-LINE")), "True"]
