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

import os
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from remote_debug.container import node_env
from remote_debug.container.log import describe, log
from remote_debug.container.rank import output_prefix as rank_output
from remote_debug.container.rank.control import ControlServer
from remote_debug.container.rank.hold import ExcInfo, stop_at_exception, track_unhandled_stops
from remote_debug.container.rank.reporter import FINAL_STATES, RankIdentity, RankReporter, install_exit_reporting
from remote_debug.container.rank.trace_switch import TraceSwitch, uses_sys_monitoring
from remote_debug.container.threads import quiet_thread
from remote_debug.contract.spec import (
    ALREADY_ATTACHED,
    DEBUGPY_ADAPTERS,
    ENV_CLAIMED_BY,
    ENV_DEBUGPY_ADAPTER,
    ENV_LISTEN,
    ENV_UNTRACE_ON_DETACH,
    LOOPBACK,
    ContractError,
    DebugSpec,
    RankDebugger,
    RankEndpoint,
    RankState,
    check_port,
)

POLL_SECONDS = 0.5  # how often the watcher looks at debugpy's "client connected" flag
RETRACE_GRACE_SECONDS = 5.0  # a "listen" with no client seen within this (a session shorter than a poll): untrace

# Modules and console scripts that start ranks rather than being one.  Their children carry
# RANK/LOCAL_RANK (or OMPI_*) and get listeners; the launcher itself must not claim rank 0,
# or its children would inherit the claim and never listen.
LAUNCHER_MODULES = (
    "torch.distributed.run",
    "torch.distributed.launch",
    "debugpy",
    "pip",
    "ensurepip",
    "venv",
    "remote_debug",
    "accelerate.commands.launch",
    "accelerate.commands.accelerate_cli",
    "deepspeed.launcher.runner",
    "deepspeed.launcher.launch",
    "sagemaker_training",  # the SageMaker training toolkit runs the user's script as a subprocess
)
LAUNCHER_SCRIPTS = ("torchrun", "debugpy", "pip", "pip3", "accelerate", "deepspeed", "remote-debug")
# SageMaker SDK v3 (ModelTrainer) runs the user's script from Python driver scripts shipped in
# an "sm_drivers" channel (sm_train.sh -> .../sm_drivers/distributed_drivers/*_driver.py).
LAUNCHER_DIRS = ("sm_drivers", "container_drivers")


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


def _watch_connection(
    reporter: RankReporter, idle_state: list[RankState], on_poll: Callable[[bool], None] | None = None
) -> None:
    """Keep the state in step with debugpy's client flag (attach after the wait window, detach);
    ``on_poll(connected)`` runs at every look."""
    import debugpy

    track_unhandled_stops()  # before any client can attach: see hold.py
    while reporter.state not in FINAL_STATES:
        connected = debugpy.is_client_connected()
        # a "held" rank (failed, kept for a post-mortem: see hold.py) says so whether attached or not
        if connected:
            reporter.update(state=RankState.ATTACHED, unless=(*FINAL_STATES, RankState.HELD))
        else:
            reporter.update(state=idle_state[0], unless=(*FINAL_STATES, RankState.WAITING, RankState.HELD))
        if on_poll is not None:
            try:
                on_poll(connected)
            except Exception as exc:  # never let it take the rank down
                log(f"debugger {'attach' if connected else 'detach'} handling failed: {describe(exc)}")
        time.sleep(POLL_SECONDS)


def _wait_for_client(reporter: RankReporter, seconds: float, rank: int, listener: _Listener) -> None:
    """Block up to ``seconds`` for a client; debugpy returns only after the client's configurationDone,
    so breakpoints the IDE sets on attach are in place before the training script runs on.

    An attach that selected other ranks (``attach --ranks``) ends the window early through the control
    channel ("run-on", :meth:`_Listener.run_on`): a rank nobody will debug must not idle its peers."""
    import debugpy

    attached = threading.Event()
    wake = listener.window_wake

    def wait() -> None:
        try:
            debugpy.wait_for_client()
        except Exception as exc:  # should not happen; never let it take the rank down
            log(f"waiting for a debugger failed in rank {rank}: {describe(exc)}")
            return
        if debugpy.is_client_connected():
            attached.set()
            wake.set()

    started = time.monotonic()
    waiter = quiet_thread(wait, "remote-debug-wait")
    waiter.start()
    try:
        wake.wait(seconds)
    finally:
        listener.window_open = False
    if attached.is_set():
        reporter.update(state=RankState.ATTACHED)
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
        reporter.update(state=RankState.ATTACHED)
        return
    listener.idle_state[0] = RankState.RUNNING
    if listener.run_on_asked:
        log(
            f"rank {rank}: attach selected other ranks; leaving the wait window after "
            f"{time.monotonic() - started:.1f} s, running on"
        )
    else:
        log(f"no debugger attached to rank {rank} within {seconds:g} s; running on")
    reporter.update(state=RankState.RUNNING)


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
    if rank_output.wanted(env, identity.world_size):  # a reader of the node's output tells ranks apart by it
        rank_output.prefix_output(identity.rank)
    # Claim before debugpy starts its adapter subprocess, which must inherit the claim.
    os.environ[ENV_CLAIMED_BY] = str(os.getpid())

    directory = node_env.manifest_dir(spec.job_name, node_env.identify(env).node, env)
    endpoint = RankEndpoint(
        rank=identity.rank,
        local_rank=identity.local_rank,
        world_size=identity.world_size,
        port=0,
        pid=os.getpid(),
        state=RankState.SKIPPED,
        ide=spec.ide,
        code_dir=node_env.rank_code_dir(argv, env),  # where the laptop's path mappings must point, for this rank
    )
    if not spec.selects(identity.rank):
        # no debugger here, but the control channel still makes the rank pause-safe (its peers may
        # be paused at breakpoints) and answers "stacks"
        try:
            endpoint = replace(endpoint, control_port=ControlServer(_not_selected, env).port)
        except Exception as exc:
            log(f"rank {identity.rank}: control channel not started: {describe(exc)}")
        skipped = RankReporter(directory, endpoint)
        # its crash is still news for attach (with the traceback); it is held with a peer that failed (gang_hold)
        install_exit_reporting(skipped, hold_seconds=spec.hold_on_failure)
        return skipped
    if spec.ide == RankDebugger.PYDEVD:
        # The rank connects out to PyCharm instead of listening; imported here, not at the top, so
        # a debugpy rank never loads pydevd-pycharm (the two cannot share a process).
        from remote_debug.container.rank import pycharm_rank

        return pycharm_rank.activate(spec, identity, directory, endpoint, env)

    requested = spec.port_base + identity.local_rank if spec.port_base else 0
    # Without this, pydevd prints a frozen-modules warning into every rank's output.
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    waiting = spec.wait_seconds > 0
    # Waiting ranks need the listener at once; otherwise debugpy (and its tracer, which slows
    # call-heavy Python several times) starts only when a debugger asks through the control channel.
    lazy = not waiting and env.get(ENV_LISTEN, "lazy").strip().lower() != "eager"
    listener = _Listener(identity.rank, identity.local_rank, requested)
    listener.untrace_on_detach = env.get(ENV_UNTRACE_ON_DETACH, "1").strip() != "0"
    listener.in_process = _adapter_choice(env) == "in-process"
    listener.window_open = waiting  # from now: a "run-on" that comes before the wait starts still counts
    control: ControlServer | None = None
    try:
        control = ControlServer(listener.listen, env, on_run_on=listener.run_on)
    except Exception as exc:  # no control channel: fall back to listening at once
        log(f"rank {identity.rank}: control channel not started: {describe(exc)}")
        lazy = False
    endpoint = replace(endpoint, control_port=control.port if control is not None else 0)
    if lazy:
        reporter = RankReporter(directory, replace(endpoint, state=RankState.IDLE))
        listener.reporter = reporter
        install_exit_reporting(reporter, hold_seconds=spec.hold_on_failure, debugger=listener)
        return reporter
    try:
        port = listener.start_debugpy()
    except Exception as exc:  # port taken, adapter failed to start: report, run on undebugged
        listener.window_open = False  # no window after all
        error = f"debug listener failed: {describe(exc)}"
        log(f"rank {identity.rank}: {error}")
        return RankReporter(directory, replace(endpoint, error=error))

    reporter = RankReporter(
        directory, replace(endpoint, port=port, state=RankState.WAITING if waiting else RankState.LISTENING)
    )
    listener.reporter = reporter
    install_exit_reporting(reporter, hold_seconds=spec.hold_on_failure, debugger=listener)
    if waiting:
        _wait_for_client(reporter, spec.wait_seconds, identity.rank, listener)
    listener.watch()
    return reporter


def _adapter_choice(env: Mapping[str, str]) -> str:
    """REMOTE_DEBUG_DEBUGPY_ADAPTER, or the default; an unknown value is logged and means the default
    (a rank never fails for a setting of the debugger)."""
    value = env.get(ENV_DEBUGPY_ADAPTER, "").strip() or DEBUGPY_ADAPTERS[0]
    if value not in DEBUGPY_ADAPTERS:
        log(f"{ENV_DEBUGPY_ADAPTER}={value!r} is not one of {', '.join(DEBUGPY_ADAPTERS)}; using {DEBUGPY_ADAPTERS[0]}")
        return DEBUGPY_ADAPTERS[0]
    return value


def _not_selected() -> int:
    raise RuntimeError("this rank is not selected for debugging (REMOTE_DEBUG_RANKS)")


class _Listener:
    """debugpy's listener of this rank, started once: at activation (eager) or on request (lazy)."""

    def __init__(self, rank: int, local_rank: int, requested: int) -> None:
        self.rank = rank
        self.local_rank = local_rank
        self.requested = requested
        self.port = 0
        self.reporter: RankReporter | None = None
        # what "no client" means: "running" once a wait window has passed
        self.idle_state = [RankState.LISTENING]
        self.untraced = False  # tracing removed after a detach
        self._untrace_failed = False
        self.untrace_on_detach = True  # REMOTE_DEBUG_UNTRACE_ON_DETACH=0 keeps the tracer after a detach
        self.in_process = True  # pydevd serves DAP itself (REMOTE_DEBUG_DEBUGPY_ADAPTER, see start_debugpy)
        self._seen_client = False  # a client was connected since tracing was (re)installed
        self._armed_at: float | None = None  # when "listen" last asked for tracing
        self._lock = threading.Lock()
        self.tracing = TraceSwitch()
        # the wait window: open while the rank waits for a debugger; set wakes the wait (an attach, or
        # the control channel's "run-on")
        self.window_open = False
        self.window_wake = threading.Event()
        self.run_on_asked = False

    def start_debugpy(self) -> int:
        """``debugpy.listen()`` on loopback; the port a debugger connects to.

        By default pydevd in the rank serves DAP itself (``in_process_debug_adapter``) instead of
        debugpy starting an adapter process per rank to relay between the IDE and pydevd: at 64 ranks
        on a node those 64 Python start-ups were half of an attach's CPU (docs/PERFORMANCE.md).  What
        the adapter gave that a rank still needs is put back: our uid gate and one debugger at a time
        on the port, a vanished debugger lets the rank run on (``dap_server``), TCP_NODELAY
        (``nodelay``)."""
        check_port(self.requested, f"debug port for local rank {self.local_rank}")
        __import__("remote_debug.container.rank.nodelay", fromlist=["enable"]).enable(debuggee=True)
        from remote_debug.container.rank import dap_server, debugpy_gate
        from remote_debug.container.rank.debugpy_startup import skip_unread_environment_report

        skip_unread_environment_report()  # 2/3 of the CPU listen() costs, see there
        # raise rather than listen ungated: pydevd's own DAP server takes our uid only; or, with an
        # adapter process, pydevd connects only to an adapter of our own uid (the adapter gates its
        # listeners itself, from sitecustomize)
        if self.in_process:
            dap_server.prepare(f"rank {self.rank} {ALREADY_ATTACHED}")
        else:
            debugpy_gate.gate_debuggee()
        import debugpy
        import debugpy.server  # loads pydevd, as listen() would: the tensor view goes in before it listens

        from remote_debug.container.rank import tensor_view

        tensor_view.install()  # before any debugger can connect (it never raises)
        _host, port = debugpy.listen((LOOPBACK, self.requested), in_process_debug_adapter=self.in_process)
        self.port = int(port)
        # listen() put pydevd's tracer into every thread in one attempt, which a thread starting another
        # one at that moment misses (see TraceSwitch): once more, with receipts and retries
        if not uses_sys_monitoring():
            try:
                self.tracing.set(True)
            except Exception as exc:  # listen() did its own attempt: a rank keeps that one
                log(f"rank {self.rank}: cannot check tracing after listen: {describe(exc)}")
        return self.port

    def watch(self) -> None:
        reporter = self.reporter
        assert reporter is not None
        quiet_thread(
            lambda: _watch_connection(reporter, self.idle_state, self._client_poll), "remote-debug-watch"
        ).start()

    def _client_poll(self, connected: bool) -> None:
        """After the last client left, tracing goes (idle cost again); it comes back on attach.

        Tracing is removed once a client was seen and is gone, or when nobody came within
        RETRACE_GRACE_SECONDS of a "listen" that put it back (a session shorter than a poll).
        A rank nobody ever attached to keeps what debugpy.listen() installed (eager/wait ranks).
        """
        with self._lock:
            self.tracing.retry()
            if connected:
                self._retrace_locked()
                self._seen_client = True
                return
            if self.untraced:
                return
            grace_over = self._armed_at is not None and time.monotonic() - self._armed_at > RETRACE_GRACE_SECONDS
            if (self._seen_client or grace_over) and self.untrace_on_detach and not self._untrace_failed:
                try:
                    self.tracing.set(False)
                except Exception as exc:  # e.g. pydevd on sys.monitoring (3.12+): keep tracing, say so once
                    self._untrace_failed = True
                    log(f"rank {self.rank}: cannot remove tracing after detach: {describe(exc)}")
                    return
                self.untraced = True
                self._seen_client = False
                self._armed_at = None
                log(f"rank {self.rank}: debugger gone; tracing removed")

    def _retrace_locked(self) -> None:
        if self.untraced:
            self.tracing.set(True)
            self.untraced = False
            log(f"rank {self.rank}: tracing back on")

    def run_on(self) -> str:
        """The control channel's "run-on": leave the wait window now (attach selected other ranks)."""
        if not self.window_open:
            return "not waiting"
        self.run_on_asked = True
        self.window_wake.set()
        return "leaving the wait window"

    # --- the post-mortem hold's view of this debugger (hold.PostMortem) ---

    def start(self) -> str:
        return f"port {self.listen()}"

    def attached(self) -> bool:
        import debugpy

        return bool(debugpy.is_client_connected())

    def stop_at(self, excinfo: ExcInfo) -> None:
        stop_at_exception(excinfo)

    def listen(self) -> int:
        """The control channel's "listen": start debugpy unless it runs (tracing back on, if it was
        removed at a detach); the port it listens on."""
        with self._lock:
            if self.port:
                self._retrace_locked()
                self._armed_at = time.monotonic()
                return self.port
            try:
                port = self.start_debugpy()
            except Exception as exc:
                error = f"debug listener failed: {describe(exc)}"
                log(f"rank {self.rank}: {error}")
                if self.reporter is not None:
                    self.reporter.update(error=error)
                raise
            self._armed_at = time.monotonic()
            log(f"rank {self.rank}: debug listener started on request (port {port})")
            if self.reporter is not None:
                self.reporter.update(port=port, state=RankState.LISTENING, unless=FINAL_STATES)
                self.watch()
            return port
