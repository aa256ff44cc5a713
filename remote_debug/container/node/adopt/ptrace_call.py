"""Call a few functions inside a running process with nothing but ``ptrace`` (Linux x86-64, stdlib ctypes).

AWS's PyTorch training images ship no gdb, and no sudo to install one, so the two calls gdb makes for
:mod:`.inject` (``mmap`` for a page, then ``Py_AddPendingCall(PyRun_SimpleString, page)``) are made here
directly, at the addresses :mod:`.elf_symbols` read before the rank is touched:

1. ``PTRACE_SEIZE`` + ``PTRACE_INTERRUPT`` the main thread only (gdb stops every thread; the rank's other
   threads - NCCL's, the DataLoader's, a thread holding the GIL - keep running), and save its registers;
2. per call: ``rip`` = the function, the System V argument registers, ``rsp`` moved below the red zone and
   aligned as after a ``call``, with a return address of 0 pushed, ``orig_rax = -1``; continue, and wait
   for the ``SIGSEGV`` at address 0 that the function's ``ret`` causes; ``rax`` is the result;
3. restore the registers, re-send any signal that arrived meanwhile (suppressed while our code ran, so
   the target's handlers never ran on our registers), detach.

A thread stopped in a system call (``time.sleep``, a socket read) must neither have that syscall "restarted"
with our registers when we continue (``orig_rax = -1``, ``rax = 0``), nor lose it afterwards: the saved
registers keep the real ``orig_rax`` and ``-ERESTART*`` result, so after the restore the kernel restarts the
sleep exactly as after any signal (lose ``orig_rax`` there and ``time.sleep`` raises errno 514/516).

Every path restores and detaches: a timeout interrupts the call and restores the registers (the call is
abandoned: ``mmap`` and ``Py_AddPendingCall`` hold no state across a stop), the target exiting ends the
session, a crash inside a call (a SIGSEGV elsewhere than 0) restores the registers as they were.  The whole
session runs in a thread of its own: the kernel detaches a tracee when its tracer *thread* exits, so even a
tracee that never reaches a stop (uninterruptible sleep) is let go when that thread ends.

aarch64 is not done (no machine here to test it on): :func:`supported` says so in one line, and the caller
falls back to gdb or refuses.
"""

from __future__ import annotations

import ctypes
import os
import platform
import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

PTRACE_GETREGS = 12
PTRACE_SETREGS = 13
PTRACE_CONT = 7
PTRACE_DETACH = 17
PTRACE_SEIZE = 0x4206
PTRACE_INTERRUPT = 0x4207
PTRACE_EVENT_STOP = 128
WALL = 0x40000000  # __WALL: wait for the tracee whatever kind of child it is to us
SYS_TGKILL_X86_64 = 234
RED_ZONE = 128
CALL_TIMEOUT = 10.0  # one call (mmap, Py_AddPendingCall): microseconds when it works
STOP_TIMEOUT = 10.0  # until the interrupted thread stops (a thread in D state may take a while)
_STOP_SIGNALS = {signal.SIGSTOP, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU}


class PtraceError(Exception):
    """One line: the call could not be made (the target is left running, with its registers as they were)."""

    def __init__(self, message: str, errno_: int = 0) -> None:
        super().__init__(message)
        self.errno = errno_


class _Regs(ctypes.Structure):
    """``struct user_regs_struct`` of x86-64 (``sys/user.h``)."""

    _fields_ = [
        (name, ctypes.c_ulonglong)
        for name in (
            "r15",
            "r14",
            "r13",
            "r12",
            "rbp",
            "rbx",
            "r11",
            "r10",
            "r9",
            "r8",
            "rax",
            "rcx",
            "rdx",
            "rsi",
            "rdi",
            "orig_rax",
            "rip",
            "cs",
            "eflags",
            "rsp",
            "ss",
            "fs_base",
            "gs_base",
            "ds",
            "es",
            "fs",
            "gs",
        )
    ]


_ARG_REGS = ("rdi", "rsi", "rdx", "rcx", "r8", "r9")
_libc = ctypes.CDLL(None, use_errno=True)
_libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
_libc.ptrace.restype = ctypes.c_long


def supported() -> str | None:
    """None where this module works, else why not (one line)."""
    if os.uname().sysname != "Linux":
        return "calling into a process without gdb needs Linux"
    machine = platform.machine()
    if machine not in ("x86_64", "AMD64"):
        return f"calling into a process without gdb is done for x86-64 only, not {machine}: install gdb"
    return None


@dataclass
class Session:
    """What one ptrace session did: the calls' results, and how long the thread was held stopped."""

    results: list[int] = field(default_factory=list)
    stopped_seconds: float = 0.0
    reinjected: list[int] = field(default_factory=list)  # signals that arrived meanwhile, sent again


@dataclass(frozen=True)
class Call:
    """``function(*args)``; ``write``: (address, bytes) written before the call, address taken from an
    earlier call's result when it is the string ``"$0"`` (the first call's)."""

    function: int
    args: tuple[int | str, ...] = ()
    write: tuple[str, bytes] | None = None


def call(pid: int, calls: Sequence[Call], *, timeout: float = CALL_TIMEOUT) -> Session:
    """Make ``calls`` in order on ``pid``'s main thread; PtraceError (one line) when not all were made.

    An argument ``"$N"`` is call N's result (e.g. the page ``mmap`` returned)."""
    problem = supported()
    if problem:
        raise PtraceError(problem)
    outcome: list[Session | BaseException] = []

    def run() -> None:
        try:
            outcome.append(_session(pid, calls, timeout))
        except BaseException as exc:  # re-raised in the caller's thread
            outcome.append(exc)

    # a thread of its own: its exit detaches the tracee whatever happened (see the module docstring)
    worker = threading.Thread(target=run, name=f"ptrace-{pid}", daemon=True)
    worker.start()
    worker.join()
    result = outcome[0]
    if isinstance(result, BaseException):
        raise result
    return result


def _ptrace(request: int, pid: int, addr: int = 0, data: int | ctypes.c_void_p | None = 0) -> int:
    ctypes.set_errno(0)
    value = _libc.ptrace(request, pid, ctypes.c_void_p(addr), data)
    if value == -1 and ctypes.get_errno():
        err = ctypes.get_errno()
        raise PtraceError(f"ptrace of pid {pid}: {os.strerror(err)}", err)
    return int(value)


def _getregs(pid: int) -> _Regs:
    regs = _Regs()
    _ptrace(PTRACE_GETREGS, pid, 0, ctypes.cast(ctypes.byref(regs), ctypes.c_void_p))
    return regs


def _setregs(pid: int, regs: _Regs) -> None:
    _ptrace(PTRACE_SETREGS, pid, 0, ctypes.cast(ctypes.byref(regs), ctypes.c_void_p))


class _Exited(Exception):
    pass


def _wait(pid: int, deadline: float) -> int | None:
    """The tracee's next wait status, None at ``deadline``; _Exited when it is gone."""
    pause = 0.0002
    while True:
        try:
            got, status = os.waitpid(pid, os.WNOHANG | WALL)
        except ChildProcessError:
            raise _Exited() from None
        if got == pid:
            if os.WIFEXITED(status) or os.WIFSIGNALED(status):
                raise _Exited()
            return status
        if time.monotonic() >= deadline:
            return None
        time.sleep(pause)
        pause = min(pause * 2, 0.01)


def _session(pid: int, calls: Sequence[Call], timeout: float) -> Session:
    session = Session()
    pending: list[int] = []  # signals to send again once our registers are gone
    try:
        _ptrace(PTRACE_SEIZE, pid, 0, 0)
    except PtraceError as exc:
        raise PtraceError(f"cannot trace pid {pid}: {os.strerror(exc.errno)}", exc.errno) from None
    try:
        _ptrace(PTRACE_INTERRUPT, pid)
        started = time.monotonic()
        try:
            _until_interrupted(pid, started + STOP_TIMEOUT, pending)
        except _Exited:
            raise PtraceError(f"pid {pid} exited") from None
        saved = _getregs(pid)
        try:
            for one in calls:
                session.results.append(_one_call(pid, saved, one, session.results, timeout, pending))
        except _Exited:
            raise PtraceError(f"pid {pid} exited during the call") from None
        finally:
            _restore(pid, saved)
        session.stopped_seconds = time.monotonic() - started
    except BaseException:
        _let_go(pid, pending, session)
        raise
    _let_go(pid, pending, session)
    return session


def _until_interrupted(pid: int, deadline: float, pending: list[int]) -> None:
    """Until our PTRACE_INTERRUPT's stop; a signal that comes first is held back for later."""
    while True:
        status = _wait(pid, deadline)
        if status is None:
            raise PtraceError(f"pid {pid}'s main thread did not stop within {STOP_TIMEOUT:g} s (uninterruptible?)")
        sig, event = os.WSTOPSIG(status), status >> 16
        if event == PTRACE_EVENT_STOP:
            if sig in _STOP_SIGNALS:  # it was stopped (Ctrl-Z, SIGSTOP): running code there breaks job control
                raise PtraceError(f"pid {pid} is stopped (SIGSTOP or Ctrl-Z): continue it (kill -CONT {pid}) first")
            return
        pending.append(sig)  # a signal on its way in: deliver it after we are done, not onto our call
        _ptrace(PTRACE_CONT, pid, 0, 0)


def _one_call(pid: int, saved: _Regs, one: Call, results: list[int], timeout: float, pending: list[int]) -> int:
    def value(arg: int | str) -> int:
        return results[int(arg[1:])] if isinstance(arg, str) else arg

    if len(one.args) > len(_ARG_REGS):
        raise PtraceError(f"at most {len(_ARG_REGS)} arguments")
    if one.write is not None:
        address, data = value(one.write[0]), one.write[1]
        fd = os.open(f"/proc/{pid}/mem", os.O_RDWR)
        try:
            if os.pwrite(fd, data, address) != len(data):
                raise PtraceError(f"short write into pid {pid}")
        finally:
            os.close(fd)
    regs = _Regs.from_buffer_copy(saved)
    # below the red zone (leaf functions keep data there without moving rsp), 16-aligned, then the return
    # address 0 "pushed": on entry rsp % 16 == 8, as right after a call instruction
    rsp = ((saved.rsp - RED_ZONE - 256) & ~0xF) - 8
    fd = os.open(f"/proc/{pid}/mem", os.O_RDWR)
    try:
        os.pwrite(fd, b"\0" * 8, rsp)
    finally:
        os.close(fd)
    regs.rsp = rsp
    regs.rip = one.function
    for name, arg in zip(_ARG_REGS, one.args, strict=False):  # checked above: no more args than registers
        setattr(regs, name, value(arg) & 0xFFFF_FFFF_FFFF_FFFF)
    regs.rax = 0  # no vector registers used (varargs convention)
    # -1: no syscall to restart on our registers.  rax = 0 alone already keeps the kernel from restarting (it
    # restarts only on an -ERESTART* in rax); this makes it not depend on that
    regs.orig_rax = 0xFFFF_FFFF_FFFF_FFFF
    regs.eflags &= ~0x400  # DF clear, as the ABI promises at a call
    _setregs(pid, regs)
    _ptrace(PTRACE_CONT, pid, 0, 0)
    deadline = time.monotonic() + timeout
    while True:
        status = _wait(pid, deadline)
        if status is None:  # stuck inside (a lock?): take the thread back; the caller restores its registers
            _ptrace(PTRACE_INTERRUPT, pid)
            if _wait(pid, time.monotonic() + STOP_TIMEOUT) is None:
                raise PtraceError(f"pid {pid} did not stop again after a call that hung")
            raise PtraceError(f"the call into pid {pid} did not return within {timeout:g} s")
        sig, event = os.WSTOPSIG(status), status >> 16
        if event == 0 and sig == signal.SIGSEGV:
            now = _getregs(pid)
            if now.rip == 0:
                return int(now.rax)
            raise PtraceError(f"the call into pid {pid} faulted at {now.rip:#x}")
        if event == 0:
            pending.append(sig)  # not for our code: the target's handler runs after the restore
        _ptrace(PTRACE_CONT, pid, 0, 0)


def _restore(pid: int, saved: _Regs) -> None:
    try:
        _setregs(pid, saved)
    except PtraceError:  # gone, or not stopped (a hung call that would not stop again): nothing to put back
        pass


def _let_go(pid: int, pending: list[int], session: Session) -> None:
    """Send the held-back signals again (they wait while it is stopped), then detach; never raises."""
    for sig in dict.fromkeys(pending):  # standard signals do not queue twice anyway
        if _libc.syscall(SYS_TGKILL_X86_64, pid, pid, sig) == 0:
            session.reinjected.append(sig)
    try:
        _ptrace(PTRACE_DETACH, pid, 0, 0)
    except PtraceError:  # ESRCH: gone, or not stopped (then our thread's exit detaches it)
        pass
