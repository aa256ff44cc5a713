"""What a kept-alive node shares between its hook and ``remote-debug run``: the entry and the run slot.

A node launched with keep-alive (``DebugOptions.keep_alive``) can run its entry again without a new
job: ``remote-debug run`` reaches each node over the job's ssh and runs ``rerun`` there, in an ssh
session.  That session sees the job's environment minus our wiring (``ssh_session``), so the hook
leaves what a run needs in its private dir (sshd's state dir, 0700; the ssh session is told where by
``NODE_DIR_ENV``):

* ``run-entry.json`` (0600): the command the hook ran, the environment it gave it (the debug spec
  with the job secret included: that is why it is private), its cwd, the hook's pid and the keep-alive;
* ``run.lock``: an flock the running ``rerun`` holds for its life - the hook's hold reads "a run is on"
  from it, and a crashed run never leaves it held;
* ``run.json``: the current (or last) run's number, its ``rerun`` pid and, once it ended, its exit code.

Signals to the hook (same user: sshd runs as the hook's user): SIGUSR1 asks it to stop the training
command so a run can replace it (the node then holds), SIGUSR2 ends the hold (``remote-debug release``).

Stdlib only: this runs in the training image.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from remote_debug.container.node.ssh_session import NODE_DIR_ENV, NODE_PYTHON_ENV
from remote_debug.oskit.osutil import atomic_write_bytes

__all__ = ["NODE_DIR_ENV", "NODE_PYTHON_ENV", "RunEntry", "RunRecord", "RunSlot"]
ENTRY_FILE = "run-entry.json"
RUN_LOCK = "run.lock"
RUN_FILE = "run.json"
REPLACE_SIGNAL = signal.SIGUSR1  # hook: stop the training command, a run replaces it
RELEASE_SIGNAL = signal.SIGUSR2  # hook: end the keep-alive now


@dataclass(frozen=True)
class RunEntry:
    """How the hook ran the training command: what ``rerun`` starts again."""

    command: list[str]
    env: dict[str, str]
    cwd: str
    hook_pid: int
    keep_alive: float
    manifest_dir: str
    command_pid: int = 0  # the training command's process: a run that replaces it waits for it to end

    def write(self, node_dir: Path) -> None:
        atomic_write_bytes(node_dir / ENTRY_FILE, json.dumps(asdict(self)).encode(), 0o600)

    @classmethod
    def read(cls, node_dir: Path) -> RunEntry:
        """Raises OSError (no entry: a job without keep-alive, or an older hook) or ValueError (mangled)."""
        data = json.loads((node_dir / ENTRY_FILE).read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError("run entry is not a JSON object")
        try:
            return cls(
                command=[str(a) for a in data["command"]],
                env={str(k): str(v) for k, v in data["env"].items()},
                cwd=str(data["cwd"]),
                hook_pid=int(data["hook_pid"]),
                keep_alive=float(data["keep_alive"]),
                manifest_dir=str(data["manifest_dir"]),
                command_pid=int(data.get("command_pid", 0)),
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"run entry lacks or mangles {exc}") from None


@dataclass
class RunRecord:
    """``run.json``: the node's current or last run."""

    run: int
    pid: int  # the `rerun` process that owns the run
    exit_code: int | None = None

    def write(self, node_dir: Path) -> None:
        atomic_write_bytes(node_dir / RUN_FILE, json.dumps(asdict(self)).encode(), 0o600)

    @classmethod
    def read(cls, node_dir: Path) -> RunRecord | None:
        try:
            data: Any = json.loads((node_dir / RUN_FILE).read_text(encoding="utf-8"))
            code = data.get("exit_code")
            return cls(int(data["run"]), int(data["pid"]), None if code is None else int(code))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None


class RunSlot:
    """The flock that says a run is on (``rerun`` holds it; the hook only looks)."""

    def __init__(self, node_dir: Path) -> None:
        self.path = node_dir / RUN_LOCK
        self._fd: int | None = None

    def busy(self) -> bool:
        """Whether some process holds the slot now (never blocks; False when it cannot tell)."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        finally:
            os.close(fd)  # closing drops our lock, if we got it
        return False

    def try_take(self) -> bool:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        return True

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


MASTER_PORT_OPTIONS = ("--master_port", "--master-port")
RDZV_OPTIONS = ("--rdzv_endpoint", "--rdzv-endpoint")


def with_master_port(command: Sequence[str], port: int) -> list[str]:
    """``command`` with torchrun's rendezvous port replaced by ``port`` (``--master_port P``,
    ``--master_port=P``, ``--rdzv_endpoint host:P``): the first such option only, the launcher's (the
    script's own arguments come after it).  A command without one is returned as it is (its launcher
    reads MASTER_PORT, which ``rerun`` sets too)."""
    args = list(command)
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if name not in MASTER_PORT_OPTIONS + RDZV_OPTIONS:
            continue
        if eq:
            return [*args[:i], f"{name}={_port_in(name, value, port)}", *args[i + 1 :]]
        if i + 1 < len(args):
            return [*args[:i], f"{name}={_port_in(name, args[i + 1], port)}", *args[i + 2 :]]
        return args
    return args


def _port_in(option: str, value: str, port: int) -> str:
    if option in MASTER_PORT_OPTIONS:
        return str(port)
    host, _, _ = value.rpartition(":")
    return f"{host or value}:{port}"


def run_environment(entry: RunEntry, overrides: Mapping[str, str]) -> dict[str, str]:
    return {**entry.env, **overrides}
