"""Queue a few lines of Python into a running interpreter, the way PEP 768 does it.

Nothing here runs code *during* the interruption.  Stock ``debugpy --pid`` has gdb call into the
target and import debugpy right there, holding the target stopped for seconds and taking the GIL from
inside a stopped process: with two threads contending for the GIL it hung 8 of 8 times, and killing
the stuck gdb crashed the target (``../shared/notes/injection.md``).  Instead:

* Python 3.14+: ``sys.remote_exec(pid, script)``, run by the target's own interpreter version (the
  caller must be the same major.minor);
* Python 3.10-3.13: gdb loads only libc's and libpython's symbols (seconds saved), maps a page in
  the target with ``mmap`` (a syscall: no lock, unlike ``malloc``/``strdup`` a stopped thread may be
  inside of), writes the code there word by word, and calls
  ``Py_AddPendingCall(PyRun_SimpleString, page)``, which only appends to a queue (safe without the
  GIL by contract).  The interpreter's main thread runs it at its next eval-breaker check, with the
  GIL, as ordinary Python; a thread blocked in C runs it when it returns;
* Python 3.10-3.13 without gdb (AWS's PyTorch images have none, nor sudo to install it): the same two
  calls made by :mod:`.ptrace_call` (x86-64), which stops only the main thread, for milliseconds.

The queued code must never raise: a pending call that fails becomes an exception in whatever the
main thread was doing, i.e. in the user's training step.  So it is a ``try``/``except BaseException``
around ``exec`` of a file, and the file (the agent's bootstrap, see ``agent.py``) logs its own errors.

gdb is never killed while it may be inside the call (that crashed targets): a gdb that outlives
:data:`GDB_TIMEOUT_SECONDS` is left running and reported.  gdb's command file holds only the
bootstrap's path, never a secret.
"""

from __future__ import annotations

import ctypes
import os
import re
import struct
import subprocess
import tempfile
from pathlib import Path

from remote_debug.container.node.adopt import elf_symbols, ptrace_call
from remote_debug.container.node.adopt.checks import Way

GDB_TIMEOUT_SECONDS = 60.0
REMOTE_EXEC_TIMEOUT_SECONDS = 30.0
PAGE = 4096
# gdb settings that must hold before it attaches: no symbol loading beyond what we name, no thread library,
# auto-loaded scripts (python-gdb.py), no debuginfod lookups (no network), no questions.
_GDB_INIT = (
    "set auto-solib-add off",
    "set libthread-db-search-path /nonexistent",  # no thread debugging: we call on the thread gdb stopped
    "set auto-load off",
    "set debuginfod enabled off",
    "set pagination off",
    "set confirm off",
)
_RESULT = re.compile(r"^\$\d+ = (-?\d+)\s*$", re.MULTILINE)


class InjectError(Exception):
    """One line: the code could not be queued in that process."""


def pending_code(bootstrap: Path) -> str:
    """What the target runs: the bootstrap file, exceptions contained (see the module docstring)."""
    path = str(bootstrap)
    return (
        "try:\n"
        f"    exec(compile(open({path!r}).read(), {path!r}, 'exec'), {{'__name__': '__remote_debug_adopt__'}})\n"
        "except BaseException:\n"
        "    pass\n"
    )


def gdb_commands(code: str, addresses: dict[str, int] | None = None) -> list[str]:
    """The gdb commands that queue ``code`` as a pending call (after attach, with -iex _GDB_INIT).

    ``addresses`` (:func:`elf_symbols.resolve`, read before gdb attaches): the three functions called by address,
    so gdb reads no symbols while the rank is stopped; without them gdb loads libc's and libpython's."""
    data = code.encode() + b"\0"
    if len(data) > PAGE:
        raise InjectError(f"the code to queue is {len(data)} bytes; at most {PAGE - 1} fit")
    data += b"\0" * (-len(data) % 8)
    if addresses is not None:
        mmap, add_pending, run_string = (hex(addresses[n]) for n in ("mmap", "Py_AddPendingCall", "PyRun_SimpleString"))
        commands = []
    else:
        mmap, add_pending, run_string = "mmap", "Py_AddPendingCall", "PyRun_SimpleString"
        commands = [
            r"sharedlibrary libpython",  # the static interpreter has the symbols in its executable anyway
            r"sharedlibrary libc\.so",
        ]
    commands += [
        # mmap(NULL, PAGE, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0); the cast tells gdb the
        # prototype (libc has no debug info here)
        f"set $rd_page = ((void *(*)(void *, unsigned long, int, int, int, long)) {mmap})(0, {PAGE}, 3, 0x22, -1, 0)",
        "print (long) $rd_page",
    ]
    for offset in range(0, len(data), 8):
        (word,) = struct.unpack("<q", data[offset : offset + 8])
        commands.append(f"set {{long}}($rd_page + {offset}) = {word}")
    commands.append(f"print ((int (*)(void *, void *)) {add_pending})((void *) {run_string}, $rd_page)")
    commands.append("detach")
    return commands


def queue_with_gdb(pid: int, code: str, gdb: str, *, timeout: float = GDB_TIMEOUT_SECONDS) -> None:
    """Queue ``code`` in ``pid`` through gdb; InjectError (one line) when it did not get queued."""
    addresses = elf_symbols.resolve(pid, ("Py_AddPendingCall", "PyRun_SimpleString"), libc_only=("mmap",))
    commands = gdb_commands(code, addresses)
    with tempfile.NamedTemporaryFile("w", prefix="remote-debug-gdb-", suffix=".gdb", delete=False) as fh:
        fh.write("\n".join(commands) + "\n")
        script = fh.name
    # --readnever: no DWARF (pyenv's interpreters carry seconds of it); the ELF symbols the fallback names need
    # are still read, and with addresses none at all are
    argv = [
        gdb,
        "-nx",
        "-batch",
        "--readnever",
        *(a for line in _GDB_INIT for a in ("-iex", line)),
        "-p",
        str(pid),
        "-x",
        script,
    ]
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a Ctrl-C at the adopter's terminal must not reach gdb mid-call
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # never kill it: a gdb killed inside an inferior call leaves the target crashed
        raise InjectError(
            f"gdb (pid {proc.pid}) has not finished with pid {pid} after {timeout:g} s; it is left running "
            "because killing it mid-call would crash the process"
        ) from None
    finally:
        if proc.returncode is not None:
            os.unlink(script)
    results = [int(v) for v in _RESULT.findall(out)]
    if len(results) < 2:
        raise InjectError(f"gdb could not queue code in pid {pid}: {_last_line(err or out)}")
    page, queued = results[0], results[-1]
    if page in (0, -1):
        raise InjectError(f"gdb could not map a page in pid {pid}")
    if queued != 0:
        raise InjectError(f"pid {pid}'s pending-call queue is full (Py_AddPendingCall returned {queued}); retry")


def queue_with_ptrace(pid: int, code: str, *, timeout: float = ptrace_call.CALL_TIMEOUT) -> ptrace_call.Session:
    """Queue ``code`` in ``pid`` without gdb: the same two calls, made by :mod:`.ptrace_call` (x86-64)."""
    data = code.encode() + b"\0"
    if len(data) > PAGE:
        raise InjectError(f"the code to queue is {len(data)} bytes; at most {PAGE - 1} fit")
    addresses = elf_symbols.resolve(pid, ("Py_AddPendingCall", "PyRun_SimpleString"), libc_only=("mmap",))
    if addresses is None:  # gdb could still look them up through its own symbol reader; we cannot
        raise InjectError(f"pid {pid} exports no Py_AddPendingCall/PyRun_SimpleString/mmap we can find: install gdb")
    calls = [
        # mmap(NULL, PAGE, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0): see the module docstring
        ptrace_call.Call(addresses["mmap"], (0, PAGE, 3, 0x22, -1, 0)),
        ptrace_call.Call(addresses["Py_AddPendingCall"], (addresses["PyRun_SimpleString"], "$0"), write=("$0", data)),
    ]
    try:
        session = ptrace_call.call(pid, calls, timeout=timeout)
    except ptrace_call.PtraceError as exc:
        raise InjectError(str(exc)) from None
    page, queued = session.results[0], ctypes.c_int(session.results[1] & 0xFFFF_FFFF).value
    if page in (0, 0xFFFF_FFFF_FFFF_FFFF):
        raise InjectError(f"could not map a page in pid {pid}")
    if queued != 0:
        raise InjectError(f"pid {pid}'s pending-call queue is full (Py_AddPendingCall returned {queued}); retry")
    return session


def queue_with_remote_exec(pid: int, script: Path, way: Way, *, timeout: float = REMOTE_EXEC_TIMEOUT_SECONDS) -> None:
    """Python 3.14+: ``sys.remote_exec`` from the target's own interpreter (same version by construction).

    That interpreter is the file the target runs, opened through ``/proc/PID/exe`` and executed through our
    descriptor of it (``/proc/self/fd/N``), after checking it is the file :func:`checks.remote_exec_way` saw:
    the path it was started from (``way.tool``, still its argv[0], which is where Python finds its stdlib) may
    have been replaced since by whoever can write there, and root would run whatever lies there now."""
    try:
        fd = os.open(f"/proc/{pid}/exe", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise InjectError(f"cannot open pid {pid}'s executable: {exc.strerror}") from None
    try:
        found = os.fstat(fd)
        if way.exe is not None and (found.st_dev, found.st_ino) != way.exe:
            raise InjectError(f"pid {pid} runs another executable than the one checked (a new process?): retry")
        try:
            proc = subprocess.run(
                [
                    way.tool,
                    "-I",
                    "-c",
                    "import sys; sys.remote_exec(int(sys.argv[1]), sys.argv[2])",
                    str(pid),
                    str(script),
                ],
                executable=f"/proc/self/fd/{fd}",
                pass_fds=(fd,),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            raise InjectError(f"sys.remote_exec into pid {pid} did not return within {timeout:g} s") from None
        except OSError as exc:
            raise InjectError(f"could not run {way.tool}: {exc.strerror}") from None
    finally:
        os.close(fd)
    if proc.returncode != 0:
        raise InjectError(f"sys.remote_exec into pid {pid} failed: {_last_line(proc.stderr)}")


def queue(pid: int, way: Way, bootstrap: Path) -> None:
    """Queue the agent's bootstrap file in ``pid`` (remote_exec reports a script's exception itself,
    through ``sys.unraisablehook``, never into the interrupted code: the file is passed as it is)."""
    if way.method == "remote_exec":
        # UNTESTED here: no Python 3.14 on these machines (pyenv has 3.10-3.13); a thin seam on purpose
        queue_with_remote_exec(pid, bootstrap, way)
    elif way.method == "ptrace":
        queue_with_ptrace(pid, pending_code(bootstrap))
    else:
        queue_with_gdb(pid, pending_code(bootstrap), way.tool)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("warning:")]
    return lines[-1] if lines else "no output"
