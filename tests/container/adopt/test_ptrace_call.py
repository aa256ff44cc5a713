"""The gdb-free injector (``ptrace_call`` + ``inject.queue_with_ptrace``) on real interpreters.

AWS's PyTorch images have no gdb: this is what adopts their ranks.  Each target is a plain Python process
started here; the queued code writes a file from the target's own main thread, which is the only proof
that counts (the injector returning says nothing about the target).  Targets: busy in a Python loop,
blocked in ``time.sleep`` (a syscall the interruption must let the kernel restart: a lost ``orig_rax`` makes
the sleep fail with errno 516), two threads contending for the GIL (what hung stock ``debugpy --pid``),
Python 3.11-3.13 (pyenv) and Debian's static python3.  Then the hard paths: a signal that arrives while the
target is held reaches its handler afterwards; the target exiting, hanging or crashing inside a call is
reported in one line and never leaves it stopped or traced.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from remote_debug.container.node.adopt import elf_symbols, inject, ptrace_call
from tests.helpers.adopt_targets import pyenv_python
from tests.helpers.hook_runs import wait_for

pytestmark = pytest.mark.skipif(ptrace_call.supported() is not None, reason=str(ptrace_call.supported()))

TARGET = textwrap.dedent(
    """
    import os, pathlib, signal, sys, threading, time
    marks, mode = pathlib.Path(sys.argv[1]), sys.argv[2]
    def spin():
        while True:
            pass
    def on_usr1(signum, frame):
        with open(marks / "usr1", "a") as fh:
            fh.write("1")
    signal.signal(signal.SIGUSR1, on_usr1)
    if mode == "gil":
        threading.Thread(target=spin, daemon=True).start()
    (marks / "ready").write_text("")
    while True:
        if mode == "sleep":
            try:
                time.sleep(0.8)
            except BaseException as exc:
                (marks / "error").write_text(repr(exc))
                raise
            (marks / "slept").write_text("")
        else:
            sum(range(1000))
    """
)


def queued(out: Path) -> str:
    """Code that proves it ran in the target's main thread."""
    main = "threading.current_thread() is threading.main_thread()"
    return f"import threading; open({str(out)!r}, 'w').write(str({main}))"


@contextlib.contextmanager
def target(tmp_path: Path, python: Path | str, mode: str) -> Iterator[subprocess.Popen[bytes]]:
    script = tmp_path / "target.py"
    script.write_text(TARGET)
    proc = subprocess.Popen(
        [str(python), "-I", str(script), str(tmp_path), mode], stdin=subprocess.DEVNULL, start_new_session=True
    )
    try:
        wait_for(lambda: (tmp_path / "ready").exists() or proc.poll() is not None, 30, "the target to start")
        assert proc.poll() is None
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def untraced_and_running(pid: int) -> None:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    status = dict(line.split(":\t", 1) for line in lines if ":\t" in line)
    assert status["TracerPid"].strip() == "0", status["TracerPid"]
    assert status["State"].split()[0] not in ("T", "t"), status["State"]


PYTHONS = {
    "3.11 busy": (pyenv_python("3.11") or sys.executable, "busy"),
    "3.11 sleeping": (pyenv_python("3.11") or sys.executable, "sleep"),
    "3.11 GIL contention": (pyenv_python("3.11") or sys.executable, "gil"),
    "3.12 GIL contention": (pyenv_python("3.12"), "gil"),
    "3.13 GIL contention": (pyenv_python("3.13"), "gil"),
    "static python3 sleeping": (Path("/usr/bin/python3") if Path("/usr/bin/python3").exists() else None, "sleep"),
}


@pytest.mark.parametrize("label", list(PYTHONS))
def test_code_is_queued_and_runs_in_the_main_thread(tmp_path: Path, label: str) -> None:
    python, mode = PYTHONS[label]
    if python is None:
        pytest.skip(f"no interpreter for {label} here")
    with target(tmp_path, python, mode) as proc:
        if mode == "sleep":
            time.sleep(0.3)  # inside time.sleep(0.8) now: the interruption lands in clock_nanosleep
        out = tmp_path / "ran"
        session = inject.queue_with_ptrace(proc.pid, queued(out))
        untraced_and_running(proc.pid)
        assert wait_for(lambda: out.exists() and out.read_text(), 10, "the queued code to run") == "True"
        if mode == "sleep":
            (tmp_path / "slept").unlink(missing_ok=True)
            wait_for(lambda: (tmp_path / "slept").exists() or (tmp_path / "error").exists(), 10, "another sleep")
            assert not (tmp_path / "error").exists(), (tmp_path / "error").read_text()
        assert proc.poll() is None
        assert session.stopped_seconds < 5.0  # milliseconds when quiet; a loaded 2-core box is slow
        print(f"{label}: main thread held {session.stopped_seconds * 1000:.1f} ms")


def test_a_signal_arriving_while_the_target_is_held_reaches_its_handler_afterwards(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = ptrace_call._ptrace

    def interrupting(request: int, pid: int, addr: int = 0, data: object = 0) -> int:
        if request == ptrace_call.PTRACE_INTERRUPT:
            os.kill(pid, signal.SIGUSR1)  # on its way in as we stop it: held back, then sent again
        return real(request, pid, addr, data)  # type: ignore[arg-type]

    monkeypatch.setattr(ptrace_call, "_ptrace", interrupting)
    with target(tmp_path, sys.executable, "busy") as proc:
        out = tmp_path / "ran"
        session = inject.queue_with_ptrace(proc.pid, queued(out))
        assert session.reinjected == [signal.SIGUSR1]
        wait_for(lambda: out.exists(), 10, "the queued code to run")
        assert (
            wait_for(
                lambda: (tmp_path / "usr1").exists() and (tmp_path / "usr1").read_text(), 10, "the SIGUSR1 handler"
            )
            == "1"
        )
        untraced_and_running(proc.pid)


def _libc_function(pid: int, name: str) -> int:
    found = elf_symbols.resolve(pid, (), libc_only=(name,))
    assert found, name
    return found[name]


def test_a_call_that_hangs_is_abandoned_and_the_target_runs_on(tmp_path: Path) -> None:
    with target(tmp_path, sys.executable, "busy") as proc:
        pause = _libc_function(proc.pid, "pause")
        started = time.monotonic()
        with pytest.raises(ptrace_call.PtraceError, match=r"did not return within 0.5 s"):
            ptrace_call.call(proc.pid, [ptrace_call.Call(pause)], timeout=0.5)
        assert time.monotonic() - started < 5
        untraced_and_running(proc.pid)
        out = tmp_path / "ran"  # its registers are its own again: it runs on, and can be injected
        inject.queue_with_ptrace(proc.pid, queued(out))
        assert wait_for(lambda: out.exists() and out.read_text(), 10, "the queued code to run") == "True"


def test_a_call_that_faults_leaves_the_target_as_it_was(tmp_path: Path) -> None:
    with target(tmp_path, sys.executable, "busy") as proc:
        with pytest.raises(ptrace_call.PtraceError, match=r"faulted at 0x8"):
            ptrace_call.call(proc.pid, [ptrace_call.Call(8)])
        untraced_and_running(proc.pid)
        time.sleep(0.2)
        assert proc.poll() is None


def test_a_target_that_exits_during_the_call_is_reported(tmp_path: Path) -> None:
    with target(tmp_path, sys.executable, "busy") as proc:
        exit_ = _libc_function(proc.pid, "_exit")
        with pytest.raises(ptrace_call.PtraceError, match=rf"pid {proc.pid} exited during the call"):
            ptrace_call.call(proc.pid, [ptrace_call.Call(exit_, (7,))])
        # it is our child too, and the tracer's wait took its exit status: only its end can be checked
        wait_for(lambda: not Path(f"/proc/{proc.pid}").exists() or proc.poll() is not None, 10, "its end")


def test_a_stopped_process_is_refused_and_left_stopped(tmp_path: Path) -> None:
    with target(tmp_path, sys.executable, "busy") as proc:
        os.kill(proc.pid, signal.SIGSTOP)
        wait_for(lambda: "T" in Path(f"/proc/{proc.pid}/stat").read_text().split()[2], 10, "the stop")
        with pytest.raises(inject.InjectError, match=r"is stopped .*kill -CONT"):
            inject.queue_with_ptrace(proc.pid, queued(tmp_path / "ran"))
        os.kill(proc.pid, signal.SIGCONT)
        time.sleep(0.2)
        untraced_and_running(proc.pid)
