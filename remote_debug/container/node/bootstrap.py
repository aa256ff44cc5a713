"""Node services without the hook: the first Python process on a node starts a node daemon.

When the job's entry command cannot be wrapped - the SageMaker training toolkit (SDK v2) and the
SDK v3 drivers run the user's script themselves - ``enable()`` only adds the spec and our
``inject`` dir on ``PYTHONPATH`` to the job environment.  Then every Python process runs our
sitecustomize, and :func:`maybe_start_node_daemon` makes the first one on the node start, in the
background,

    python -m remote_debug.container --node-daemon --parent-pid <pid>

which runs the same :class:`~remote_debug.container.node.services.NodeServices` as the hook (sshd, manifest,
log lines) for as long as that process lives, then cleans up.  Ranks proceed as with the hook.  What
the daemon cannot do is hold the node after the training command (keep-alive): the process it follows
is the container's entry, and the node ends with it; ``enable()`` refuses a keep-alive here, and a
daemon that finds one in its spec says so in one log line.

Exactly one daemon per node: the daemon takes an exclusive ``flock`` on ``node-daemon.lock`` in the
node's manifest dir and exits at once if another holds it.  A flock rather than an O_EXCL file:
the kernel drops it when its holder dies, so a SIGKILLed daemon never leaves a stale lock that
would keep the next one from starting.  Processes that start later see ``REMOTE_DEBUG_HOOK_PID``
(inherited from the starter) or a live daemon's pid in the lock file and do nothing.

Which process the daemon outlives: the starting Python process, or - when that was started by a
shell such as SDK v3's ``sm_train.sh``, which runs a short helper script before the driver - that
shell, which lives for the whole job.  Short-lived helpers (``python -c``, pip) never start one.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import IO

from remote_debug.container.threads import quiet_thread
from remote_debug.contract.spec import ENV_CLAIMED_BY, ENV_HOOK_PID, ENV_KEEP_ALIVE, ENV_VERSION, NodeState
from remote_debug.oskit.osutil import pid_alive

DAEMON_FLAG = "--node-daemon"
LOCK_NAME = "node-daemon.lock"
POLL_SECONDS = 0.5
SHELLS = ("sh", "bash", "dash", "zsh", "ash", "ksh")
HELPER_MODULES = ("pip", "ensurepip", "venv", "remote_debug", "debugpy", "pydevd", "site")
HELPER_SCRIPTS = ("pip", "pip3", "debugpy")
PACKAGE_ROOT = str(Path(__file__).resolve().parents[3])  # the dir that holds remote_debug/


# --- in every Python process (from sitecustomize): cheap checks first ------------------------------


def is_helper(argv: Sequence[str]) -> bool:
    """A process that must not start the daemon: one-liners, installers, our own processes."""
    args = list(argv[1:])
    for i, arg in enumerate(args):
        if arg == "-c" or (arg.startswith("-c") and not arg.startswith("--")):
            return True
        if arg == "-m" or (arg.startswith("-m") and not arg.startswith("--")):
            module = args[i + 1] if arg == "-m" and i + 1 < len(args) else arg[2:]
            return module.split(".")[0] in HELPER_MODULES
        if not arg.startswith("-"):
            return os.path.basename(arg) in HELPER_SCRIPTS
    return False


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def watched_pid(pid: int, ppid: int) -> int:
    """The process whose life the daemon follows (see the module docstring)."""
    return ppid if ppid > 0 and _comm(ppid) in SHELLS else pid


def running_daemon(lock: Path) -> int | None:
    """The pid of the live daemon named in ``lock``, if any (no locking: a probe must not take it)."""
    try:
        # every Python process of the node reads this: never through a link, never blocked by a FIFO
        fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            text = os.read(fd, 64).decode() if stat.S_ISREG(os.fstat(fd).st_mode) else ""
        finally:
            os.close(fd)
        pid = int(text.strip() or 0)
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    return pid if pid_alive(pid) and DAEMON_FLAG.encode() in cmdline else None


def _reap(proc: subprocess.Popen[bytes]) -> None:
    quiet_thread(proc.wait, "remote-debug-reap").start()


def maybe_start_node_daemon(env: Mapping[str, str] | None = None, argv: Sequence[str] | None = None) -> int | None:
    """Start the node daemon if this is the first Python process of a node without a hook.

    Returns the daemon's pid when one was started.  Never raises: a debugging aid must not fail
    the user's process.
    """
    env = os.environ if env is None else env
    if ENV_VERSION not in env or env.get(ENV_HOOK_PID) or env.get(ENV_CLAIMED_BY):
        return None  # no spec, a hook or daemon already serves this node, or a rank's child
    try:
        return _start(env, list(sys.orig_argv if argv is None else argv))
    except Exception as exc:
        from remote_debug.container.log import describe, log

        log(f"node daemon not started: {describe(exc)}")
        return None


def _start(env: Mapping[str, str], argv: list[str]) -> int | None:
    if is_helper(argv):
        return None
    from remote_debug.container import node_env
    from remote_debug.contract.spec import ContractError, DebugSpec

    try:
        spec = DebugSpec.from_env(env)
    except ContractError:
        return None  # the rank's activation reports the invalid spec
    if spec is None:
        return None
    directory = node_env.manifest_dir(spec.job_name, node_env.identify(env).node, env)
    running = running_daemon(directory / LOCK_NAME)
    if running is not None:
        os.environ[ENV_HOOK_PID] = str(running)
        return None
    watch = watched_pid(os.getpid(), os.getppid())
    child_env = dict(env)
    child_env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH", ""), PACKAGE_ROOT) if p)
    # Claimed: under MPI the first Python process of a node is a rank, and the daemon would inherit
    # its OMPI_COMM_WORLD_RANK and take itself for that rank (sitecustomize), waiting for a debugger
    # instead of starting sshd. run_daemon drops the claim.
    child_env[ENV_CLAIMED_BY] = "node-daemon"
    proc = subprocess.Popen(
        [sys.executable, "-m", "remote_debug.container", DAEMON_FLAG, "--parent-pid", str(watch)],
        env=child_env,
        stdin=subprocess.DEVNULL,
        close_fds=True,
        start_new_session=True,  # the job's process-group signals (Ctrl-C, killpg) are for training
    )
    os.environ[ENV_HOOK_PID] = str(proc.pid)  # what this process starts from now on inherits it
    _reap(proc)
    return proc.pid


# --- the daemon ------------------------------------------------------------------------------------


class NodeLock:
    """An exclusive flock on a file holding the owner's pid; released by the kernel if we die."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh: IO[str] | None = None

    def acquire(self) -> bool:
        import fcntl

        from remote_debug.container import node_env

        node_env.prepare_manifest_dir(self.path.parent)
        # never through a link (O_NOFOLLOW), never a FIFO that hangs us (O_NONBLOCK), only a file of ours:
        # a lock file planted by another user would have us truncate whatever it points at
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            os.close(fd)
            raise node_env.UnsafeManifestDir(f"lock file {self.path} is not a file of ours: refusing it")
        fh = os.fdopen(fd, "r+")  # held open for as long as we hold the lock
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.close()
            return False
        fh.seek(0)
        fh.truncate()
        fh.write(f"{os.getpid()}\n")
        fh.flush()
        self._fh = fh
        return True

    def release(self) -> None:
        if self._fh is None:
            return
        with contextlib.suppress(OSError):
            self._fh.truncate(0)  # a reader must not take a recycled pid for a daemon
        self._fh.close()  # closing drops the flock
        self._fh = None


def run_daemon(parent_pid: int) -> int:
    from remote_debug.container import node_env
    from remote_debug.container.log import describe, log
    from remote_debug.container.node.services import NodeServices
    from remote_debug.contract.spec import ContractError, DebugSpec

    try:
        spec = DebugSpec.from_env()
    except ContractError as exc:
        log(f"node daemon: invalid debug spec: {exc}")
        return 0
    if spec is None:
        return 0
    os.environ.pop(ENV_CLAIMED_BY, None)
    os.environ[ENV_HOOK_PID] = str(os.getpid())
    directory = node_env.manifest_dir(spec.job_name, node_env.identify().node)
    lock = NodeLock(directory / LOCK_NAME)
    try:
        if not lock.acquire():
            return 0  # another process started the node's daemon first
    except OSError as exc:  # a manifest dir or lock file of another user: no node services, training runs
        log(f"node daemon not started: {describe(exc)}")
        return 0
    if spec.keep_alive > 0:
        # enable() refuses this (no entry to wrap); a hand-made environment must not fail silently either
        log(
            f"keep-alive needs the entry wrapped by the hook; this node ends with its command "
            f"({ENV_KEEP_ALIVE}={spec.keep_alive:g} ignored)"
        )
    stop = threading.Event()

    def on_term(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_term)
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    node = NodeServices(spec)
    try:
        try:
            node.start()
            node.publish(state=NodeState.RUNNING)
            if node.sshd is not None and node.manifest is not None:
                log(
                    f"node daemon for pid {parent_pid} on {node.manifest.node}: sshd on "
                    f"{node.manifest.sshd_host}:{node.sshd.port}, manifest in {node.manifest_dir}"
                )
        except Exception as exc:
            node.error(f"node daemon setup failed: {describe(exc)}")
        while pid_alive(parent_pid) and not stop.wait(POLL_SECONDS):
            pass
    finally:
        node.finish(NodeState.STOPPED if stop.is_set() else NodeState.COMPLETED, None)
        lock.release()
    return 0


def main(argv: Sequence[str]) -> int:
    """``--node-daemon --parent-pid PID``."""
    args = list(argv)
    try:
        pid = int(args[args.index("--parent-pid") + 1])
    except (ValueError, IndexError):
        print(f"usage: python -m remote_debug.container {DAEMON_FLAG} --parent-pid PID", file=sys.stderr)
        return 2
    return run_daemon(pid)
