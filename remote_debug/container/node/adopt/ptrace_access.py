"""Whether the kernel lets us trace a process, and if not, exactly why, in one line the user can act on.

Inside a container "you are root" proves little: root there may lack ``CAP_SYS_PTRACE`` (docker drops it
unless ``--cap-add SYS_PTRACE``), the host's Yama ``ptrace_scope`` applies to every container, and a
seccomp profile may refuse the ``ptrace`` system call itself.  So the answer is asked of the kernel, without
touching the process: opening ``/proc/PID/mem`` runs the same ``ptrace_may_access(PTRACE_MODE_ATTACH)``
check as ``PTRACE_SEIZE`` (uids, the capability subset rule, Yama, LSMs).  Only seccomp is not in that
check (it filters the syscall, not the access): when our own status says a filter is installed, a
``ptrace`` request that must fail with ESRCH (we trace nothing) is made, and EPERM means the filter said no.
(A filter that *kills* on ptrace would kill us here; docker's profiles return an errno instead.)

Then the reason is worked out from ``/proc/*/status``, most specific first: another uid, Yama's scope, the
target holding capabilities we lack, and otherwise "the kernel refused" (an LSM, a non-dumpable process).
Stdlib only: runs where the ranks run.
"""

from __future__ import annotations

import ctypes
import errno
import os
from pathlib import Path

CAP_SYS_PTRACE = 19
YAMA_SCOPE = Path("/proc/sys/kernel/yama/ptrace_scope")
PTRACE_GETREGS = 12
FIX_CAP = "docker run --cap-add SYS_PTRACE, or root outside the container"


def status(pid: int | str) -> dict[str, str]:
    """``/proc/PID/status`` as a dict (empty when unreadable)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    return {k: v.strip() for k, _, v in (line.partition(":") for line in text.splitlines())}


def _caps(fields: dict[str, str], name: str) -> int:
    try:
        return int(fields.get(name, "0"), 16)
    except ValueError:
        return 0


def has_cap(fields: dict[str, str], cap: int) -> bool:
    return bool(_caps(fields, "CapEff") >> cap & 1)


def yama_scope() -> int:
    try:
        return int(YAMA_SCOPE.read_text().strip())
    except (OSError, ValueError):
        return 0  # no Yama: classic ptrace rules (same uid)


def problem(pid: int) -> str | None:
    """Why we may not trace ``pid`` (one line), or None when we may."""
    try:
        with open(f"/proc/{pid}/mem", "rb"):
            pass
    except FileNotFoundError:
        return f"process {pid} does not exist (it ended?)"
    except PermissionError:
        return why_refused(pid)
    except OSError as exc:
        return f"process {pid}: {exc.strerror}"
    if seccomp_blocks_ptrace():
        return (
            "a seccomp profile forbids the ptrace system call here (docker's default on kernels before 4.8, or "
            "a custom profile): run the container with --security-opt seccomp=unconfined or --cap-add SYS_PTRACE"
        )
    return None


def why_refused(pid: int) -> str:
    """The kernel said no to tracing ``pid``: the most specific reason /proc shows, and what to do."""
    ours, theirs = status("self"), status(pid)
    capable = has_cap(ours, CAP_SYS_PTRACE)
    uid = theirs.get("Uid", "").split()[:1]
    if uid and int(uid[0]) != os.geteuid() and not capable:
        return f"process {pid} runs as uid {uid[0]}, not as you (uid {os.geteuid()}): run adopt as that user"
    scope = yama_scope()
    if scope >= 3:
        return "ptrace is disabled on this machine (kernel.yama.ptrace_scope=3, until reboot): nothing can adopt"
    if scope == 2 and not capable:
        return (
            f"kernel.yama.ptrace_scope=2 lets only CAP_SYS_PTRACE trace, and your CapEff lacks it: run adopt "
            f"with it ({FIX_CAP})"
        )
    if scope == 1 and not capable:
        return (
            f"kernel.yama.ptrace_scope=1 (set on the host; containers share it) lets a process trace only its "
            f"own children without CAP_SYS_PTRACE, which your CapEff lacks: run adopt with it ({FIX_CAP}), or "
            "sysctl kernel.yama.ptrace_scope=0 on the host"
        )
    if _caps(theirs, "CapPrm") & ~_caps(ours, "CapPrm") and not capable:
        return (
            f"process {pid} holds capabilities you lack, and without CAP_SYS_PTRACE in your CapEff (a container "
            f"started without it?) the kernel refuses to trace it: run adopt with CAP_SYS_PTRACE ({FIX_CAP})"
        )
    return (
        f"the kernel refuses to let you trace process {pid} (a security module such as AppArmor or SELinux, "
        "or a process that made itself undumpable): run adopt as root on the host"
    )


def seccomp_blocks_ptrace() -> bool:
    """Whether a seccomp filter of ours refuses ``ptrace`` (see the module docstring)."""
    if status("self").get("Seccomp", "0") != "2":
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    ctypes.set_errno(0)
    # we trace nobody, so the kernel answers ESRCH; a filter's errno (docker: EPERM) means it never got there
    libc.ptrace(PTRACE_GETREGS, os.getpid(), None, None)
    return ctypes.get_errno() == errno.EPERM
