"""A process's Python stacks read from outside with py-spy: no hook, no control channel, no GIL needed.

``remote-debug stacks --no-hook`` (and ``adopt``, for a rank that has not run the injected agent yet)
need a stack from ranks that cannot answer themselves: a job started without our hook, or a rank whose
main thread is blocked in native code (a collective, a long C call) and so never reaches the Python
code we queued for it.  py-spy reads the interpreter's frames from the process's memory
(``process_vm_readv``); by default it also stops the process with ptrace for the ~20 ms of the read, so
the stack is consistent.  Where ptrace is refused but memory reads are not (a seccomp profile that blocks
``ptrace`` only), ``--nonblocking`` reads the running process instead.

Stdlib only (runs where the ranks run: this machine for local jobs, the instance on SageMaker).
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

ENV_PYSPY = "REMOTE_DEBUG_PYSPY"  # the py-spy binary to use (else next to our Python, else PATH)
DUMP_TIMEOUT = 10.0  # a dump takes 0.02-0.04 s; a slower one is stuck (e.g. a process in D state)
MISSING = "py-spy not found: pip install py-spy"
# The debugger's own threads (debugpy's, pydevd's, ours), known by the file of their entry frame
# (the first below threading's bootstrap), as container/rank/control.py tells them apart from inside.
_DEBUGGER_PARTS = ("/debugpy/", "/pydevd", "/_pydevd", "/_pydev_", "/remote_debug/container/")


# how py-spy's errors say "the kernel said no" (std::io errors, and nix's for ptrace)
_REFUSED = ("os error 13", "os error 1)", "EPERM", "EACCES")


class PyspyError(Exception):
    """One line the user can act on: py-spy is missing, or cannot read that process."""


@dataclass(frozen=True)
class Frame:
    function: str
    file: str  # as the code object has it (py-spy's full filename)
    line: int


@dataclass(frozen=True)
class ThreadDump:
    name: str  # threading's name when py-spy finds it, else "MainThread" / the OS thread id
    os_id: int | None  # the kernel's thread id (the pid for the main thread)
    active: bool  # py-spy: the OS had it running (/proc/TID/stat state R), not idle in a wait
    owns_gil: bool  # py-spy: it held the GIL at the time of the read
    frames: tuple[Frame, ...]  # outermost first, as a traceback prints them (py-spy: innermost first)
    main: bool = False
    internal: bool = False  # a debugger thread (debugpy's, remote_debug's)


@dataclass(frozen=True)
class ProcessDump:
    pid: int
    threads: tuple[ThreadDump, ...]
    seconds: float  # how long py-spy took
    nonblocking: bool  # read without stopping the process (ptrace was refused)

    @property
    def main_thread(self) -> ThreadDump | None:
        return next((t for t in self.threads if t.main), None)


def find_pyspy() -> str:
    """The py-spy binary: ``REMOTE_DEBUG_PYSPY``, else the one installed beside this Python (the venv's
    bin, where ``pip install py-spy`` puts it, even when the venv is not activated), else PATH."""
    chosen = os.environ.get(ENV_PYSPY, "").strip()
    if chosen:
        if os.path.isfile(chosen) and os.access(chosen, os.X_OK):
            return chosen
        raise PyspyError(f"{MISSING} ({ENV_PYSPY}={chosen} is not an executable file: fix or unset it)")
    # not resolved: a venv's python is a symlink to the base interpreter, and py-spy is in the venv
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    if os.path.isfile(beside) and os.access(beside, os.X_OK):
        return beside
    found = shutil.which("py-spy")
    if found:
        return found
    raise PyspyError(MISSING)


def dump(pid: int, *, timeout: float = DUMP_TIMEOUT, pyspy: str | None = None) -> ProcessDump:
    """Every Python thread of ``pid``, read by ``py-spy dump --json``; PyspyError with one line when it
    cannot be read (py-spy missing, the process gone or another user's, not Python, ptrace refused)."""
    binary = pyspy or find_pyspy()
    problem = access_problem(pid)
    if problem:
        raise PyspyError(problem)
    started = time.monotonic()
    stopped_before = _state(pid) == "T"
    try:
        out = _run(binary, pid, timeout, nonblocking=False)
        nonblocking = False
    except _PtraceRefused:
        # seccomp/AppArmor may forbid ptrace itself while still allowing process_vm_readv
        out = _run(binary, pid, timeout, nonblocking=True)
        nonblocking = True
    except PyspyError:
        if not stopped_before and _state(pid) == "T":
            # py-spy was killed (timeout) while it had the process stopped: let it run again
            _continue(pid)
        raise
    return ProcessDump(
        pid=pid, threads=parse_dump(pid, out), seconds=time.monotonic() - started, nonblocking=nonblocking
    )


class _PtraceRefused(Exception):
    pass


def _run(binary: str, pid: int, timeout: float, *, nonblocking: bool) -> str:
    argv = [binary, "dump", "--pid", str(pid), "--json", *(["--nonblocking"] if nonblocking else [])]
    # no Rust backtrace in py-spy's error: its first line is what we report
    env = {**os.environ, "RUST_BACKTRACE": "0", "RUST_LIB_BACKTRACE": "0"}
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise PyspyError(
            f"py-spy did not read process {pid} within {timeout:g} s (is it stuck in the kernel?)"
        ) from None
    except OSError as exc:
        raise PyspyError(f"{MISSING} (cannot run {binary}: {exc.strerror})") from None
    if proc.returncode == 0:
        return proc.stdout
    raise _failure(pid, proc.stderr, nonblocking=nonblocking)


def _failure(pid: int, stderr: str, *, nonblocking: bool) -> Exception:
    """py-spy's error as one line about what to do."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    first = next((line.removeprefix("Error:").strip() for line in lines if line.startswith("Error:")), "")
    text = " ".join(lines)
    if not os.path.exists(f"/proc/{pid}"):
        return PyspyError(f"process {pid} does not exist (it ended?)")
    if "Failed to suspend process" in text and not nonblocking:
        return _PtraceRefused()
    if any(mark in text for mark in _REFUSED):
        return PyspyError(refusal(pid))
    if "python" in text.lower() or "Bad address" in text:
        return PyspyError(
            f"process {pid} ({_comm(pid)}) is not a Python process py-spy can read: {first or text}"[:300]
        )
    return PyspyError(f"py-spy could not read process {pid}: {first or text or 'no error message'}"[:300])


def access_problem(pid: int) -> str | None:
    """Why we may not read ``pid`` (one line), or None when we may.

    Opening ``/proc/PID/environ`` is the kernel's ptrace read check (``ptrace_may_access``): the answer
    py-spy would get, without running it."""
    try:
        with open(f"/proc/{pid}/environ", "rb"):
            return None
    except FileNotFoundError:
        return f"process {pid} does not exist (it ended?)"
    except PermissionError:
        return refusal(pid)
    except OSError as exc:
        return f"process {pid}: {exc.strerror}"


def refusal(pid: int) -> str:
    """The kernel refused to let us read ``pid``: whose it is, and what to do."""
    uid = _uid(pid)
    if uid is not None and uid != os.geteuid():
        return (
            f"process {pid} belongs to {_user(uid)}, not to you ({_user(os.geteuid())}): "
            "run remote-debug as that user (or as root)"
        )
    return (
        f"not allowed to read process {pid} (the kernel refuses ptrace: kernel.yama.ptrace_scope, a container "
        "without CAP_SYS_PTRACE, or a process with more privileges than you): run as root, or allow ptrace "
        "(docker run --cap-add SYS_PTRACE)"
    )


def parse_dump(pid: int, text: str) -> tuple[ThreadDump, ...]:
    """py-spy's ``dump --json`` (a list of threads, frames innermost first) as typed threads."""
    try:
        raw = json.loads(text)
    except ValueError:
        raise PyspyError(f"py-spy printed no JSON for process {pid}: {text.strip()[:120]!r}") from None
    if not isinstance(raw, list):
        raise PyspyError(f"py-spy printed unexpected JSON for process {pid} (not a list of threads)")
    threads = [_thread(pid, t) for t in raw if isinstance(t, dict)]
    if threads and all(t.os_id is None for t in threads):
        # py-spy found no OS thread ids: the interpreter lists the newest thread first, so the main
        # thread is the last one (with ids, a process whose main thread has exited has none)
        last = threads[-1]
        threads[-1] = replace(last, main=True, name=last.name if last.os_id is not None else "MainThread")
    return tuple(sorted(threads, key=lambda t: not t.main))  # the main thread first: where users look


def _thread(pid: int, raw: dict[str, Any]) -> ThreadDump:
    os_id = raw.get("os_thread_id")
    os_id = os_id if isinstance(os_id, int) else None
    main = os_id == pid
    frames = tuple(
        Frame(function=str(f.get("name", "?")), file=str(f.get("filename", "?")), line=_int(f.get("line")))
        for f in reversed(raw.get("frames") or [])
        if isinstance(f, dict)
    )
    name = raw.get("thread_name")
    if not isinstance(name, str) or not name:
        name = "MainThread" if main else str(os_id if os_id is not None else raw.get("thread_id", "?"))
    return ThreadDump(
        name=name,
        os_id=os_id,
        active=raw.get("active") is True,
        owns_gil=raw.get("owns_gil") is True,
        frames=frames,
        main=main,
        internal=_internal(frames),
    )


def _int(value: Any) -> int:
    return value if isinstance(value, int) else 0


def _internal(frames: Sequence[Frame]) -> bool:
    entry = next((f for f in frames if os.path.basename(f.file) != "threading.py"), None)
    return entry is not None and entry is not frames[0] and any(p in entry.file for p in _DEBUGGER_PARTS)


def blocked_in_native(thread: ThreadDump | None) -> bool:
    """Whether ``thread`` (usually the main one) is blocked in native code: its innermost Python frame
    called into C (a collective's wait, a sleep, I/O, a lock) and that call has not returned.

    The signal is py-spy's ``active`` being false for a thread that has Python frames.  py-spy takes it
    from the kernel (``/proc/PID/task/TID/stat`` state other than R: asleep in a wait) and also calls a
    thread idle when its innermost frame is ``threading`` wait or ``selectors`` select.  CPython never
    sleeps in the kernel while it executes bytecode, so an idle thread with Python frames is inside a C
    call; such a thread runs code queued for it (``Py_AddPendingCall``, ``sys.remote_exec``) only once
    that call returns.

    ``owns_gil`` is deliberately not part of it: a C call that blocks *without* releasing the GIL (a badly
    behaved extension, ``ctypes.PyDLL``) is blocked all the same (py-spy then says owns_gil=true), and on
    versions where py-spy cannot find the GIL's holder it says false for every thread.  Limits: it is one
    sample - a thread waiting a few milliseconds to take the GIL back, or in a short ``time.sleep`` loop,
    is reported blocked at that instant - and a thread busy in C (on CPU, GIL released) is reported not
    blocked, as is a GIL-holding C call that is computing.
    """
    return thread is not None and bool(thread.frames) and not thread.active


def format_threads(threads: Iterable[ThreadDump], *, all_threads: bool = False, indent: str = "  ") -> list[str]:
    """The threads as ``remote-debug stacks`` prints them: a traceback per thread, innermost frame last."""
    lines: list[str] = []
    for t in threads:
        if t.internal and not all_threads:
            continue
        what = " (debugger)" if t.internal else ""
        if t.main and blocked_in_native(t):
            what += " (blocked in native code)"
        lines.append(f"{indent}thread {t.name}{what}:")
        for f in t.frames:
            lines.append(f'{indent}  File "{f.file}", line {f.line}, in {f.function}')
    return lines


def format_dump(process: ProcessDump, *, all_threads: bool = False) -> str:
    """``pid N (from py-spy)`` and its threads, in ``remote-debug stacks``'s style."""
    how = ", without stopping it" if process.nonblocking else ""
    return "\n".join(
        [f"pid {process.pid} (from py-spy{how})", *format_threads(process.threads, all_threads=all_threads)]
    )


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
    except OSError:
        return ""
    rest = stat[stat.rfind(")") + 2 :].split()  # comm may hold spaces and parentheses
    return rest[0] if rest else ""


def _continue(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGCONT)
    except OSError:
        pass


def _uid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("Uid:"):
                    return int(line.split()[1])  # the real uid: whose process it is
    except (OSError, ValueError, IndexError):
        pass
    return None


def _user(uid: int) -> str:
    try:
        return f"user {pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as fh:
            return fh.read().strip() or "?"
    except OSError:
        return "?"
