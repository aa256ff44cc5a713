"""A running job's processes, read from ``/proc``: which are its ranks, and what each one is.

``remote-debug adopt`` and ``stacks --no-hook`` start from one pid the user knows - a torchrun/mpirun
launcher, or one rank - and need the job's ranks.  A rank is a Python process whose environment
carries the rank variables the launchers set (torchrun's ``RANK``/``LOCAL_RANK``/``WORLD_SIZE``, Open
MPI's ``OMPI_COMM_WORLD_*``); its own children (DataLoader workers, a compile subprocess) inherit
those variables, so only the topmost process of each chain is the rank.  A tree with no such variable
under a Python process is a single-process job: that process is rank 0 of 1.

``/proc/PID/environ`` is the environment the process *started* with (later ``os.environ`` changes
are invisible): exactly what the launcher gave the rank.  Reading it needs the same uid (or
CAP_SYS_PTRACE), which is also what attaching needs; an unreadable process is reported, not guessed.
Stdlib only: this runs where the ranks run (the laptop for local jobs, the instance on SageMaker).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from remote_debug.container.rank.agent import launcher_of

PROC = Path("/proc")
RANK_VARS = (
    ("RANK", "LOCAL_RANK", "WORLD_SIZE"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE"),
)
# a torchrun node's index among the job's nodes (SageMaker's toolkit passes --node_rank)
NODE_RANK_VARS = ("GROUP_RANK", "OMPI_COMM_WORLD_NODE_RANK")
_PYTHON_EXE = re.compile(r"python(\d+(\.\d+)?)?$")
_LIBPYTHON = re.compile(r"/libpython(\d+)\.(\d+)[a-z]*\.so")


class ProcError(Exception):
    """A process that cannot be read (gone, or not ours)."""


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    ppid: int
    uid: int
    argv: tuple[str, ...]
    comm: str


@dataclass(frozen=True)
class RankProcess:
    """One rank of a running job, as its launcher started it."""

    pid: int
    rank: int
    local_rank: int
    world_size: int
    node_rank: int
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(repr=False, compare=False)


def read_environ(pid: int) -> dict[str, str]:
    """The environment ``pid`` started with; ProcError when it is gone or not readable by us."""
    try:
        raw = (PROC / str(pid) / "environ").read_bytes()
    except FileNotFoundError:
        raise ProcError(f"process {pid} does not exist") from None
    except PermissionError:
        raise ProcError(f"process {pid} belongs to another user") from None
    except OSError as exc:
        raise ProcError(f"process {pid}: {exc.strerror}") from None
    env: dict[str, str] = {}
    for item in raw.split(b"\0"):
        name, sep, value = item.partition(b"=")
        if sep:
            env[name.decode(errors="replace")] = value.decode(errors="replace")
    return env


def read_status(pid: int) -> dict[str, str]:
    """``/proc/PID/status`` as name -> value (Uid, TracerPid, CapEff, ...)."""
    try:
        text = (PROC / str(pid) / "status").read_text()
    except FileNotFoundError:
        raise ProcError(f"process {pid} does not exist") from None
    except OSError as exc:
        raise ProcError(f"process {pid}: {exc.strerror}") from None
    fields: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep:
            fields[name.strip()] = value.strip()
    return fields


def proc_info(pid: int) -> ProcInfo:
    status = read_status(pid)
    try:
        argv = tuple(a.decode(errors="replace") for a in (PROC / str(pid) / "cmdline").read_bytes().split(b"\0")[:-1])
    except OSError:
        argv = ()
    try:
        uid = int(status.get("Uid", "-1").split()[0])
        ppid = int(status.get("PPid", "0"))
    except (ValueError, IndexError):
        raise ProcError(f"process {pid}: unreadable /proc status") from None
    return ProcInfo(pid=pid, ppid=ppid, uid=uid, argv=argv, comm=status.get("Name", ""))


def children_map() -> dict[int, list[int]]:
    """ppid -> child pids of every process we can see (one pass over /proc)."""
    children: dict[int, list[int]] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited meanwhile
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last ')'
        rest = stat[stat.rfind(")") + 2 :].split()
        if len(rest) >= 2 and rest[1].isdigit():
            children.setdefault(int(rest[1]), []).append(int(entry.name))
    return children


def descendants(pid: int, children: Mapping[int, list[int]] | None = None) -> list[int]:
    """Every descendant of ``pid``, parents before their children."""
    children = children_map() if children is None else children
    found: list[int] = []
    todo = sorted(children.get(pid, []))
    while todo:
        child = todo.pop(0)
        found.append(child)
        todo.extend(sorted(children.get(child, [])))
    return found


def cwd(pid: int) -> str | None:
    """``pid``'s working directory, None when it is gone or not ours to read."""
    try:
        return os.readlink(PROC / str(pid) / "cwd")
    except OSError:
        return None


def python_version(pid: int) -> tuple[int, int] | None:
    """The major.minor of the Python interpreter running as ``pid``, or None when it is not Python.

    From the libpython it maps (a shared build) or its executable's name (``python3.12``); a static
    ``python3`` with no version in its name is asked through its own executable.
    """
    try:
        maps = (PROC / str(pid) / "maps").read_text()
    except OSError:
        maps = ""
    found = _LIBPYTHON.search(maps)
    if found:
        return int(found.group(1)), int(found.group(2))
    try:
        exe = os.readlink(PROC / str(pid) / "exe")
    except OSError:
        return None
    name = os.path.basename(exe.removesuffix(" (deleted)"))
    match = _PYTHON_EXE.search(name)
    if match is None:
        return None
    version = re.fullmatch(r"python(\d+)\.(\d+)", name)
    if version:
        return int(version.group(1)), int(version.group(2))
    return _version_from_binary(pid)


# A static interpreter is some MB; a bigger "exe" is not read whole (another user's process could run anything).
MAX_EXE_BYTES = 256 * 1024 * 1024


def _version_from_binary(pid: int) -> tuple[int, int] | None:
    """A static interpreter's version, from the ``Py_GetVersion`` string compiled into it (no exec).

    Read through ``/proc/PID/exe``, the file the process runs, never the path ``readlink`` names: that path
    (``... (deleted)`` once the file was replaced) may now hold anything anyone put there, a FIFO that would
    block this read forever among them.  O_NONBLOCK, a regular file only, at most :data:`MAX_EXE_BYTES`."""
    try:
        fd = os.open(PROC / str(pid) / "exe", os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(MAX_EXE_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)
    # every CPython binary carries its own "python3.N" library path (sys.path's default entries)
    versions = re.findall(rb"lib/python(3)\.(\d+)\b", data)
    if not versions:
        return None
    major, minor = max(set(versions), key=versions.count)
    return int(major), int(minor)


def _env_int(env: Mapping[str, str], name: str) -> int | None:
    try:
        return int(env[name])
    except (KeyError, ValueError):
        return None


def rank_of(pid: int, env: Mapping[str, str], argv: Iterable[str]) -> RankProcess | None:
    """The rank ``pid`` is, from its environment; None when it carries no rank variables."""
    for rank_var, local_var, size_var in RANK_VARS:
        rank = _env_int(env, rank_var)
        if rank is None:
            continue
        local_rank = _env_int(env, local_var)
        world_size = _env_int(env, size_var)
        node_rank = next((v for v in (_env_int(env, n) for n in NODE_RANK_VARS) if v is not None), 0)
        return RankProcess(
            pid=pid,
            rank=rank,
            local_rank=rank if local_rank is None else local_rank,
            world_size=max(rank + 1, world_size or 1),
            node_rank=node_rank,
            argv=tuple(argv),
            env=env,
        )
    return None


def find_ranks(root: int, children: Mapping[int, list[int]] | None = None) -> list[RankProcess]:
    """The ranks of the process tree at ``root`` (root included), ordered by rank.

    ProcError when ``root`` cannot be read.  A descendant that carries the same rank as its parent is
    that rank's helper (DataLoader worker), not a rank; so are non-Python processes.
    """
    children = children_map() if children is None else children
    info = proc_info(root)
    ranks: list[RankProcess] = []
    claimed: set[int] = set()  # pids under a rank: its helpers

    def visit(pid: int) -> None:
        if pid in claimed:
            return
        try:
            env = read_environ(pid)
        except ProcError:
            return  # gone meanwhile, or another user's helper: not a rank of ours
        rank = rank_of(pid, env, proc_info(pid).argv) if python_version(pid) else None
        if rank is not None:
            ranks.append(rank)
            claimed.update(descendants(pid, children))
            return
        for child in sorted(children.get(pid, [])):
            visit(child)

    visit(root)
    if not ranks and python_version(root) and launcher_of(info.argv) is None:
        # no rank variables anywhere below: a single-process job
        ranks.append(
            RankProcess(
                pid=root,
                rank=0,
                local_rank=0,
                world_size=1,
                node_rank=0,
                argv=info.argv,
                env=read_environ(root),
            )
        )
    return sorted(ranks, key=lambda r: r.rank)


NETNS_DIR = Path("/run/netns")


def net_namespace(pid: int) -> str | None:
    """``pid``'s network namespace when it is not ours: its ``ip netns`` name, else its /proc path (valid for as
    long as the process lives, which is as long as anyone needs to reach it)."""
    try:
        theirs = os.stat(PROC / str(pid) / "ns" / "net").st_ino
        if theirs == os.stat(PROC / "self" / "ns" / "net").st_ino:
            return None
    except OSError:
        return None
    try:
        for entry in sorted(NETNS_DIR.iterdir()):
            try:
                if os.stat(entry).st_ino == theirs:
                    return entry.name
            except OSError:
                continue
    except OSError:
        pass
    return str(PROC / str(pid) / "ns" / "net")
