"""The per-rank debug listener, started from ``inject/sitecustomize.py`` in every Python process.

Every Python process the hook starts imports our sitecustomize, so this code decides, once per
process and cheaply, whether the process is a *rank* (a torchrun/MPI worker, or the only process
of a single-process job) that should get a debugpy listener, or something else (a launcher,
debugpy's own adapter, a DataLoader worker, a subprocess of a rank) that must be left alone.

A rank that claims the listener sets ``REMOTE_DEBUG_CLAIMED_BY`` in its environment; every
process it starts inherits that variable and stays out.  Launchers are recognised by their command
line, because they have no rank of their own yet their children do.

The listener binds 127.0.0.1 only: debugpy lets whoever connects run arbitrary code, so the only
way in is through the node's sshd.  Each rank reports itself in a rank document next to the node
manifest (port, pid, state), and keeps its state current as clients come and go.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType

from remote_debug.container import node_env
from remote_debug.container.log import describe, log, one_line
from remote_debug.spec import (
    ENV_CLAIMED_BY,
    ContractError,
    DebugSpec,
    RankEndpoint,
    check_port,
    write_rank_manifest,
)

LOOPBACK = "127.0.0.1"
POLL_SECONDS = 0.5  # how often the watcher looks at debugpy's "client connected" flag

# Modules and console scripts that start ranks rather than being one.  Their children carry
# RANK/LOCAL_RANK (or OMPI_*) and get listeners; the launcher itself must not claim rank 0,
# or its children would inherit the claim and never listen.
LAUNCHER_MODULES = (
    "torch.distributed.run", "torch.distributed.launch", "debugpy", "pip", "ensurepip", "venv",
    "remote_debug", "accelerate.commands.launch", "accelerate.commands.accelerate_cli",
    "deepspeed.launcher.runner", "deepspeed.launcher.launch",
    "sagemaker_training",  # the SageMaker training toolkit runs the user's script as a subprocess
)
LAUNCHER_SCRIPTS = ("torchrun", "debugpy", "pip", "pip3", "accelerate", "deepspeed", "remote-debug")
# SageMaker SDK v3 (ModelTrainer) runs the user's script from Python driver scripts shipped in
# an "sm_drivers" channel (sm_train.sh -> .../sm_drivers/distributed_drivers/*_driver.py).
LAUNCHER_DIRS = ("sm_drivers", "container_drivers")


@dataclass(frozen=True)
class RankIdentity:
    rank: int
    local_rank: int
    world_size: int


def _env_int(env: Mapping[str, str], name: str) -> int | None:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw[:40]!r} is not a number") from None


def launcher_of(argv: Sequence[str]) -> str | None:
    """What ``argv`` (``sys.orig_argv``) launches, if it is a launcher or not a training process.

    Returns a short description (for logs/tests) or None for a process that may be a training job.
    ``python -c CODE`` counts as a helper, not a job: shell entry scripts run such one-liners
    (version checks, downloads), and claiming one would make it wait for a debugger.
    """
    args = list(argv[1:])
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "-m" or (arg.startswith("-m") and not arg.startswith("--")):
            module = args[i + 1] if arg == "-m" and i + 1 < len(args) else arg[2:]
            for launcher in LAUNCHER_MODULES:
                if module == launcher or module.startswith(launcher + "."):
                    return f"-m {module}"
            return None
        if arg == "-c" or (arg.startswith("-c") and not arg.startswith("--")):
            return "-c"
        if arg in ("-W", "-X", "--check-hash-based-pycs"):  # options that take a separate value
            i += 2
            continue
        if arg.startswith("-") and arg != "-":
            i += 1
            continue
        return _launcher_script(arg)
    return None


def _launcher_script(path: str) -> str | None:
    script = os.path.basename(path)
    if script in LAUNCHER_SCRIPTS:
        return script
    parent = os.path.dirname(path)
    # The SageMaker training toolkit's console script is called "train" (a bin dir entry);
    # a user's "train.py" or "./train" in a code dir is a job.
    if script == "train" and os.path.basename(parent) == "bin":
        return path
    if any(part in LAUNCHER_DIRS for part in parent.split(os.sep)):
        return path
    return None


def rank_identity(env: Mapping[str, str], argv: Sequence[str]) -> RankIdentity | None:
    """This process's rank, or None when it is a launcher/helper that must not claim one.

    torchrun's variables win over MPI's; a process with neither is a single-process job (rank 0
    of 1) unless its command line says it is a launcher.
    """
    for rank_var, local_var, size_var in (
        ("RANK", "LOCAL_RANK", "WORLD_SIZE"),
        ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE"),
    ):
        rank = _env_int(env, rank_var)
        if rank is None:
            continue
        local_rank = _env_int(env, local_var)
        world_size = _env_int(env, size_var)
        return RankIdentity(
            rank=rank,
            local_rank=rank if local_rank is None else local_rank,
            world_size=max(rank + 1, world_size or 1),
        )
    if launcher_of(argv) is not None:
        return None
    return RankIdentity(rank=0, local_rank=0, world_size=1)


class RankReporter:
    """This rank's document in the manifest dir, rewritten atomically on every state change.

    Several threads report (main, the wait window, the connection watcher, atexit), hence the lock.
    """

    def __init__(self, directory: Path, endpoint: RankEndpoint) -> None:
        self.directory = directory
        self.endpoint = endpoint
        self._lock = threading.Lock()
        self._write_failed = False
        self._write()

    def update(
        self, *, state: str | None = None, error: str | None = None, unless: tuple[str, ...] = ()
    ) -> None:
        with self._lock:
            if self.endpoint.state in unless:
                return
            new = replace(
                self.endpoint,
                state=self.endpoint.state if state is None else state,
                error=self.endpoint.error if error is None else one_line(error),
            )
            if new == self.endpoint:
                return
            self.endpoint = new
            self._write()

    @property
    def state(self) -> str:
        return self.endpoint.state

    def _write(self) -> None:
        try:
            write_rank_manifest(self.directory, self.endpoint)
        except OSError as exc:
            if not self._write_failed:  # one line per process is enough
                self._write_failed = True
                log(f"cannot write rank manifest in {self.directory}: {describe(exc)}")


def _quiet_thread(target: Callable[[], None], name: str) -> threading.Thread:
    """A daemon thread that debugpy neither traces nor lists (it is ours, not the user's)."""
    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.pydev_do_not_trace = True  # type: ignore[attr-defined]
    thread.is_pydev_daemon_thread = True  # type: ignore[attr-defined]
    return thread


def _watch_connection(reporter: RankReporter, idle_state: list[str]) -> None:
    """Keep the state in step with debugpy's client flag (attach after the wait window, detach)."""
    import debugpy

    final = ("finished", "failed")
    while reporter.state not in final:
        connected = debugpy.is_client_connected()
        if connected:
            reporter.update(state="attached", unless=final)
        else:
            reporter.update(state=idle_state[0], unless=(*final, "waiting"))
        time.sleep(POLL_SECONDS)


def _wait_for_client(reporter: RankReporter, seconds: float, rank: int, idle_state: list[str]) -> None:
    """Block up to ``seconds`` for a client; debugpy returns only after the client's configurationDone,
    so breakpoints the IDE sets on attach are in place before the training script runs on."""
    import debugpy

    attached = threading.Event()

    def wait() -> None:
        try:
            debugpy.wait_for_client()
        except Exception as exc:  # should not happen; never let it take the rank down
            log(f"waiting for a debugger failed in rank {rank}: {describe(exc)}")
            return
        if debugpy.is_client_connected():
            attached.set()

    waiter = _quiet_thread(wait, "remote-debug-wait")
    waiter.start()
    if attached.wait(seconds):
        reporter.update(state="attached")
        return
    # wait_for_client.cancel only exists once the waiter is inside wait_for_client: retry briefly.
    for _ in range(50):
        try:
            debugpy.wait_for_client.cancel()
            break
        except RuntimeError:
            if not waiter.is_alive():
                break
            time.sleep(0.02)
    if attached.is_set():  # attached just as the window closed
        reporter.update(state="attached")
        return
    idle_state[0] = "running"
    log(f"no debugger attached to rank {rank} within {seconds:g} s; running on")
    reporter.update(state="running")


def _install_exit_reporting(reporter: RankReporter) -> None:
    previous = sys.excepthook

    def excepthook(
        exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None
    ) -> None:
        with contextlib.suppress(Exception):
            reporter.update(state="failed", error=describe(exc))
        previous(exc_type, exc, tb)

    sys.excepthook = excepthook
    # Python runs sys.excepthook before atexit handlers, so "failed" is already set and kept.
    atexit.register(lambda: reporter.update(state="finished", unless=("failed", "skipped")))


def activate(env: Mapping[str, str] | None = None, argv: Sequence[str] | None = None) -> RankReporter | None:
    """Start this process's debug listener if it is a selected rank; never raises.

    Returns the reporter of a claimed rank (listening or skipped), None when the process stays out.
    """
    try:
        return _activate(os.environ if env is None else env, sys.orig_argv if argv is None else argv)
    except Exception as exc:
        log(f"debug listener not started in pid {os.getpid()}: {describe(exc)}")
        return None


def _activate(env: Mapping[str, str], argv: Sequence[str]) -> RankReporter | None:
    if env.get(ENV_CLAIMED_BY):
        return None  # a child of a rank (adapter, DataLoader worker, subprocess): the parent has it
    try:
        spec = DebugSpec.from_env(env)
    except ContractError as exc:
        log(f"invalid debug spec, not debugging pid {os.getpid()}: {exc}")
        return None
    if spec is None:
        return None
    identity = rank_identity(env, argv)
    if identity is None:
        return None  # a launcher: its children are the ranks
    # Claim before debugpy starts its adapter subprocess, which must inherit the claim.
    os.environ[ENV_CLAIMED_BY] = str(os.getpid())

    directory = node_env.manifest_dir(spec.job_name, node_env.identify(env).node, env)
    endpoint = RankEndpoint(
        rank=identity.rank, local_rank=identity.local_rank, world_size=identity.world_size,
        port=0, pid=os.getpid(), state="skipped", ide=spec.ide,
    )
    if not spec.selects(identity.rank):
        return RankReporter(directory, endpoint)
    if spec.ide == "pycharm":
        # The rank connects out to PyCharm instead of listening; imported here, not at the top, so
        # a debugpy rank never loads pydevd-pycharm (the two cannot share a process).
        from remote_debug.container import pycharm_rank

        return pycharm_rank.activate(spec, identity, directory, endpoint, env)

    requested = spec.port_base + identity.local_rank if spec.port_base else 0
    try:
        check_port(requested, f"debug port for local rank {identity.local_rank}")
        # Without this, pydevd prints a frozen-modules warning into every rank's output.
        os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
        import debugpy

        _host, port = debugpy.listen((LOOPBACK, requested))
    except Exception as exc:  # port taken, adapter failed to start: report, run on undebugged
        error = f"debug listener failed: {describe(exc)}"
        log(f"rank {identity.rank}: {error}")
        return RankReporter(directory, replace(endpoint, error=error))

    waiting = spec.wait_seconds > 0
    reporter = RankReporter(
        directory, replace(endpoint, port=int(port), state="waiting" if waiting else "listening")
    )
    _install_exit_reporting(reporter)
    idle_state = ["listening"]  # what "no client" means: "running" once a wait window has passed
    if waiting:
        _wait_for_client(reporter, spec.wait_seconds, identity.rank, idle_state)
    _quiet_thread(lambda: _watch_connection(reporter, idle_state), "remote-debug-watch").start()
    return reporter
