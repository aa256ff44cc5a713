"""Whether a running rank may be adopted, checked for every rank before any is touched.

Adopting means running code inside someone's training process.  Each reason to refuse is checked
here, before the first rank is touched, so a refusal never leaves half a job adopted; each is one line
the user can act on:

* same uid as the rank.  Not merely "ptrace allowed": the rank agent admits debuggers of its own
  uid only (the control channel's and debugpy's uid gates), and the node's sshd runs as the adopter,
  so a root adopter of another user's rank would inject an agent nobody could reach;
* not traced already (``TracerPid``): a second tracer fails, and the rank may be stopped in a debugger;
* ptrace allowed, asked of the kernel (:mod:`.ptrace_access`): inside a container root may lack
  CAP_SYS_PTRACE, the host's Yama scope applies, seccomp may forbid the syscall - each named as such;
* Python 3.10+ (what the agent needs), and a way in: ``sys.remote_exec`` on 3.14+ (the caller
  must be the same version: the target's own executable), on 3.10-3.13 gdb when there is one, else our
  own ptrace call (:mod:`.ptrace_call`, x86-64): AWS's PyTorch images ship neither gdb nor sudo;
* not opted out: PEP 768's ``PYTHON_DISABLE_REMOTE_DEBUG`` / ``-X disable_remote_debug``, and ours,
  ``REMOTE_DEBUG_ADOPT=0``;
* sees our files: the agent is a file we write, and the rank must see it at the same path.

Where a rank cannot be adopted but py-spy can still read it (another user's rank read as root, no way in
on this architecture, seccomp refusing only the ptrace syscall), the refusal says so: its stacks are what
can be had (:attr:`AdoptRefused.stacks_pid`; the laptop names the command that fits the job).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from remote_debug.container.node import pyspy
from remote_debug.container.node.adopt import ptrace_access, ptrace_call
from remote_debug.container.node.adopt.procs import PROC, ProcError, RankProcess, python_version, read_status
from remote_debug.contract.spec import ENV_VERSION

OPT_OUT_ENV = "REMOTE_DEBUG_ADOPT"
MIN_PYTHON = (3, 10)
REMOTE_EXEC_PYTHON = (3, 14)  # PEP 768: sys.remote_exec


class AdoptRefused(Exception):
    """One line: why this job cannot be adopted (nothing was touched).  ``stacks_pid``: a rank py-spy can
    still read (its stacks are what can be had instead); ``reason`` is the line without that offer."""

    def __init__(self, reason: str, *, stacks_pid: int | None = None) -> None:
        offer = f"; its stacks can still be read: remote-debug stacks --no-hook --pid {stacks_pid}"
        super().__init__(reason + (offer if stacks_pid is not None else ""))
        self.reason = reason
        self.stacks_pid = stacks_pid


@dataclass(frozen=True)
class Way:
    """How code gets into a rank: ``remote_exec`` (3.14+), ``gdb`` or ``ptrace`` (a pending call)."""

    method: str
    python: tuple[int, int]
    tool: str  # gdb's path, the rank's own interpreter for remote_exec (its name only: see exe), "" for ptrace
    # remote_exec: (st_dev, st_ino) of the file the rank runs, as checked; the interpreter is run from that very
    # file (/proc/PID/exe), never from the path ``tool`` names, which anyone who can write there may replace
    exe: tuple[int, int] | None = None


def remote_exec_way(pid: int, version: tuple[int, int]) -> Way:
    """The ``sys.remote_exec`` way into ``pid`` (3.14+): its own interpreter, identified by the file it runs."""
    try:
        name = os.readlink(PROC / str(pid) / "exe").removesuffix(" (deleted)")
        found = os.stat(PROC / str(pid) / "exe")  # the magic link: the running file itself, even if deleted
    except OSError as exc:
        raise AdoptRefused(f"pid {pid}: its executable cannot be read ({exc.strerror})") from None
    return Way("remote_exec", version, name, (found.st_dev, found.st_ino))


def _readable(pid: int) -> int | None:
    """``pid`` when py-spy could read it (the stacks offered instead of adopting), else None."""
    return pid if pyspy.access_problem(pid) is None else None


def _pid_label(rank: RankProcess) -> str:
    return f"rank {rank.rank} (pid {rank.pid})"


def sees_same(pid: int, path: Path) -> bool:
    """Whether ``pid`` sees ``path`` (its nearest existing ancestor) as the same file as we do.

    Not "the same mount namespace": ``ip netns exec`` gives its command a mount namespace of its own (to bind
    /etc/netns files), yet /tmp and home are the same there.  What matters is that the rank can open the agent
    file we write, so the dir it goes into is compared through the rank's own root (``/proc/PID/root``)."""
    path = path.resolve()
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        ours = os.stat(path)
        theirs = os.stat(f"{PROC}/{pid}/root{path}")
    except OSError:
        return False
    return (ours.st_dev, ours.st_ino) == (theirs.st_dev, theirs.st_ino)


def check_rank(rank: RankProcess, *, gdb: str | None = None, sees: Path | None = None) -> Way:
    """The way into ``rank``; AdoptRefused with one line when there is none.  ``sees``: a dir the rank must see
    as we do (where its agent file will be)."""
    label = _pid_label(rank)
    try:
        status = read_status(rank.pid)
    except ProcError as exc:
        raise AdoptRefused(f"{label}: {exc}") from None
    uid = int(status.get("Uid", "-1").split()[0])
    if uid != os.geteuid():
        raise AdoptRefused(
            f"{label} runs as uid {uid}, not as you (uid {os.geteuid()}): adopt it as the user that runs "
            "the job (its debugger admits that user only)",
            stacks_pid=_readable(rank.pid),
        )
    if ENV_VERSION in rank.env:
        raise AdoptRefused(f"{label} was started with remote-debug already: attach to its job instead")
    tracer = status.get("TracerPid", "0")
    if tracer not in ("", "0"):
        raise AdoptRefused(f"{label} is being traced by pid {tracer} (a debugger or strace): end that first")
    refused = ptrace_access.problem(rank.pid)
    if refused is not None:
        # seccomp blocks the syscall only: py-spy --nonblocking reads memory without it
        seccomp = refused.startswith("a seccomp profile")
        raise AdoptRefused(f"cannot trace {label}: {refused}", stacks_pid=_readable(rank.pid) if seccomp else None)
    opt_out = rank.env.get(OPT_OUT_ENV, "").strip() == "0"
    if opt_out or rank.env.get("PYTHON_DISABLE_REMOTE_DEBUG") or _x_option(rank.argv, "disable_remote_debug"):
        raise AdoptRefused(f"{label} opted out of remote debugging ({_opt_out_name(rank, opt_out)})")
    if sees is not None and not sees_same(rank.pid, sees):
        raise AdoptRefused(f"{label} does not see {sees} as we do (another container?): run adopt inside it")
    version = python_version(rank.pid)
    if version is None:
        raise AdoptRefused(f"{label} is not a Python process")
    if version < MIN_PYTHON:
        raise AdoptRefused(f"{label} runs Python {version[0]}.{version[1]}: adopt needs Python 3.10 or newer")
    if version >= REMOTE_EXEC_PYTHON:
        return remote_exec_way(rank.pid, version)
    tool = gdb or shutil.which("gdb")
    if tool is not None:
        return Way("gdb", version, tool)
    unsupported = ptrace_call.supported()
    if unsupported is None:
        return Way("ptrace", version, "")
    raise AdoptRefused(
        f"{label} runs Python {version[0]}.{version[1]} and {unsupported}", stacks_pid=_readable(rank.pid)
    )


def check_all(ranks: Sequence[RankProcess], *, gdb: str | None = None, sees: Path | None = None) -> dict[int, Way]:
    """pid -> way for every rank, or AdoptRefused for the first that cannot be adopted."""
    if not ranks:
        raise AdoptRefused("no ranks found (no Python process with torchrun/MPI rank variables under that pid)")
    return {rank.pid: check_rank(rank, gdb=gdb, sees=sees) for rank in ranks}


def _x_option(argv: Sequence[str], name: str) -> bool:
    args = list(argv[1:])
    for i, arg in enumerate(args):
        if arg == "-X" and i + 1 < len(args) and args[i + 1].split("=")[0] == name:
            return True
        if arg.startswith("-X") and arg[2:].split("=")[0] == name:
            return True
        if not arg.startswith("-"):
            break  # the script: what follows are its arguments, not the interpreter's
    return False


def _opt_out_name(rank: RankProcess, ours: bool) -> str:
    if ours:
        return f"{OPT_OUT_ENV}=0"
    if rank.env.get("PYTHON_DISABLE_REMOTE_DEBUG"):
        return "PYTHON_DISABLE_REMOTE_DEBUG"
    return "-X disable_remote_debug"
