"""The node hook: ``python -m remote_debug.container [--] CMD...`` wraps a training job's entry command.

In order: read the debug spec, start the node's services (private sshd, node manifest and its
publication, see ``node``), run the command with our sitecustomize on its PYTHONPATH (so every
rank starts a listener), forward stop signals to it, and when it ends stop the services and record
how it ended.  Meanwhile a rank held for a post-mortem gets a line in the node's log, and a failed
command leaves SageMaker's failure file with the failing rank's exception line (``outcome``).

Stopping (SageMaker's StopTrainingJob: SIGTERM to the container's PID 1, SIGKILL 120 s later): the
hook forwards the signal to the command and, if the command has not ended within the stop grace
(``REMOTE_DEBUG_STOP_GRACE``, default 100 s), SIGKILLs every process it started - found by the
``REMOTE_DEBUG_HOOK_PID`` token in their environment, which also finds debugpy's adapters and other
processes that left the command's process tree.  When the command has ended, however it ended,
whatever still carries the token (daemonized stragglers) gets SIGTERM, then SIGKILL: the node's
services stop last, so a paused rank or a training loop that ignores SIGTERM cannot keep the node
past the platform's grace.

The one rule above all: the hook never breaks training.  A missing or invalid spec, a missing
sshd, an unwritable manifest dir - each is logged as one ``[remote-debug]`` line and recorded in
the manifest's ``errors``, and the command runs anyway.  The hook's exit code is the command's
(128+N when a signal N killed it, as a shell reports it), so the platform's view of the job is
unchanged.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType

from remote_debug.container.knobs import seconds_knob
from remote_debug.container.log import describe, log
from remote_debug.container.node.init_reaper import become_init_if_pid1
from remote_debug.container.node.keep_alive import KeepAlive
from remote_debug.container.node.outcome import HeldRankNotices, write_failure_file
from remote_debug.container.node.run_slot import RELEASE_SIGNAL, REPLACE_SIGNAL, RunEntry
from remote_debug.container.node.services import NodeServices
from remote_debug.container.node.sshd import set_parent_death_signal
from remote_debug.contract.spec import (
    ENV_CLAIMED_BY,
    ENV_HOOK_PID,
    ENV_MANIFEST_DIR,
    ENV_STOP_GRACE,
    ContractError,
    DebugSpec,
    NodeState,
)
from remote_debug.oskit.osutil import proc_stat

INJECT_DIR = Path(__file__).resolve().parents[1] / "inject"
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
USAGE = "usage: python -m remote_debug.container [--] COMMAND [ARGS...]"
DEFAULT_STOP_GRACE = 100.0  # SageMaker's SIGKILL comes 120 s after its SIGTERM: leave time to clean up
MAX_STOP_GRACE = 86400.0
SWEEP_GRACE = 2.0  # stragglers get SIGTERM, then SIGKILL after this long


def stop_grace(env: Mapping[str, str]) -> float:
    """Seconds between forwarding a stop and SIGKILLing what is left (``REMOTE_DEBUG_STOP_GRACE``); a bad
    value never disables the escalation."""
    return seconds_knob(env, ENV_STOP_GRACE, DEFAULT_STOP_GRACE, high=MAX_STOP_GRACE)


def processes_with_token(token: bytes) -> list[int]:
    """Pids (not ours) whose environment holds ``token`` (``b"NAME=value\0"``), from /proc."""
    found = []
    me = os.getpid()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                environ = b"\0" + fh.read()
        except OSError:  # gone, or not ours to read
            continue
        if b"\0" + token in environ and not _zombie(int(entry)):
            found.append(int(entry))
    return found


def _zombie(pid: int) -> bool:
    fields = proc_stat(pid)
    return fields is None or fields[0] == "Z"  # None: gone


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def exit_code_of(returncode: int) -> int:
    """Popen's returncode as a shell reports it: -N (killed by signal N) becomes 128+N."""
    return 128 - returncode if returncode < 0 else returncode


def child_env(base: dict[str, str], manifest_dir: Path) -> dict[str, str]:
    """The training command's environment: our sitecustomize first on PYTHONPATH, manifest dir set."""
    env = dict(base)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(INJECT_DIR), env.get("PYTHONPATH", "")) if p)
    env[ENV_MANIFEST_DIR] = str(manifest_dir)
    # the node's services run: Python processes of the command must not bootstrap a node daemon
    env[ENV_HOOK_PID] = str(os.getpid())
    # debugpy warns about frozen stdlib modules in every rank unless told this is understood.
    env.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    return env


def _terminal_signals_reach_child() -> bool:
    """True when we run in the foreground of a terminal: the command shares our process group (we
    do not move it), so the terminal's SIGINT/SIGHUP reach it directly."""
    for fd in (0, 1, 2):
        try:
            if os.isatty(fd):
                return os.tcgetpgrp(fd) == os.getpgrp()
        except OSError:
            continue
    return False


class Hook:
    def __init__(self, command: Sequence[str]) -> None:
        self.command = list(command)
        self.child: subprocess.Popen[bytes] | None = None
        self.stop_signal: int | None = None  # the first stop signal we received, if any
        self._forwarded = False  # whether the command got a stop signal from us
        self.node: NodeServices | None = None
        self.notices: HeldRankNotices | None = None
        self.token = f"{ENV_HOOK_PID}={os.getpid()}\0".encode()  # in the environment of all we start
        self.grace = stop_grace(os.environ)
        self._escalation: threading.Timer | None = None
        self.keep_alive: KeepAlive | None = None  # with --keep-alive: the hold after the command
        self.replaced = False  # `remote-debug run` had the training command stopped to replace it
        self._env: dict[str, str] | None = None  # the command's environment (a run gets the same)

    # --- signals -------------------------------------------------------------------------------

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        # Python runs this in the main thread, also while it is blocked in Popen.wait().
        if self.stop_signal is None:
            self.stop_signal = signum
        if self.keep_alive is not None:
            self.keep_alive.stop()
        child = self.child
        if child is None or child.returncode is not None:
            return
        if signum in (signal.SIGINT, signal.SIGHUP) and _terminal_signals_reach_child():
            # Ctrl-C / hangup already went to the whole foreground group, the command included; a
            # second copy from us could cut its own cleanup short (torchrun re-raises on each one).
            return
        self._forward(signum)

    def _forward(self, signum: int) -> None:
        child = self.child
        if child is None:
            return
        self._forwarded = True
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)
        if self._escalation is None:  # the first stop starts the clock; later ones do not reset it
            self._escalation = threading.Timer(self.grace, self._escalate)
            self._escalation.daemon = True
            self._escalation.start()

    def _escalate(self) -> None:
        """The command outlived the stop grace (it ignores SIGTERM, or a rank hangs): SIGKILL it and
        everything it started, so the node's services can still stop before the platform's SIGKILL."""
        child = self.child
        if child is None or child.poll() is not None:
            return
        # By the token, not child.pid: poll() says "running" while the main thread's wait() holds the
        # lock, even just after it reaped the child, whose pid may then be reused.  The command (it
        # carries the token too, unless it cleared its environment) and all it started.
        victims = processes_with_token(self.token)
        if not victims and child.returncode is None:
            victims = [child.pid]  # a command that dropped our environment
        log(
            f"the command did not stop within {self.grace:g} s of signal {self.stop_signal}: "
            f"killing {len(victims)} process(es)"
        )
        _signal_all(victims, signal.SIGKILL)

    def _sweep(self) -> None:
        """After the command ended: end whatever it started that is still running (daemonized children,
        debugpy adapters, a rank orphaned by its launcher) - SIGTERM, then SIGKILL."""
        victims = processes_with_token(self.token)
        if not victims:
            return
        log(f"the command ended; stopping {len(victims)} process(es) it left running")
        _signal_all(victims, signal.SIGTERM)
        deadline = time.monotonic() + SWEEP_GRACE
        while victims and time.monotonic() < deadline:
            time.sleep(0.05)
            victims = [p for p in victims if not _zombie(p)]
        _signal_all(victims, signal.SIGKILL)

    def _on_replace(self, _signum: int, _frame: FrameType | None) -> None:
        """``remote-debug run`` replaces the training command: stop it (as a stop would, grace and all),
        and the node holds instead of ending."""
        child = self.child
        if self.keep_alive is None or self.stop_signal is not None or child is None or child.returncode is not None:
            return
        if not self.replaced:
            log("stopping the training command: `remote-debug run` replaces it")
            self.replaced = True
            self._forward(signal.SIGTERM)

    def _on_release(self, _signum: int, _frame: FrameType | None) -> None:
        if self.keep_alive is not None:
            self.keep_alive.release()

    def _install_signal_handlers(self) -> None:
        for sig in FORWARDED_SIGNALS:
            signal.signal(sig, self._on_signal)
        signal.signal(REPLACE_SIGNAL, self._on_replace)
        signal.signal(RELEASE_SIGNAL, self._on_release)

    # --- the command ---------------------------------------------------------------------------

    @staticmethod
    def _child_setup() -> None:
        """Runs in the child before exec: if the hook dies without forwarding a stop (SIGKILL), the
        command gets SIGTERM rather than training on, orphaned, with nobody reporting on it."""
        set_parent_death_signal(signal.SIGTERM)

    def _run_command(self, env: dict[str, str] | None) -> int:
        if self.stop_signal is not None:  # stopped while we were setting up: do not start training
            log(f"received signal {self.stop_signal} before the command started; not starting it")
            return 128 + self.stop_signal
        try:
            self.child = subprocess.Popen(self.command, env=env, preexec_fn=self._child_setup)
        except OSError as exc:  # as a shell reports it: 127 not found, 126 found but not runnable
            code = 127 if isinstance(exc, FileNotFoundError) else 126
            log(f"cannot run {self.command[0]!r}: {describe(exc)}")
            return code
        # A signal that arrived between fork and the assignment above was not forwarded yet.
        if self.stop_signal is not None and not self._forwarded:
            self._on_signal(self.stop_signal, None)
        if self.node is not None:
            self.node.publish(state=NodeState.RUNNING)
            self._write_run_entry()
        code = exit_code_of(self.child.wait())
        if self._escalation is not None:
            self._escalation.cancel()
        return code

    # --- keep-alive ------------------------------------------------------------------------------

    def _node_dir(self) -> Path | None:
        """The hook's private dir that ssh sessions are told about (None: sessions do not see the job)."""
        node = self.node
        return node.sessions.state_dir if node is not None and node.sessions is not None else None

    def _write_run_entry(self) -> None:
        """What `remote-debug run` starts again: written while the command runs (a run may replace it)."""
        node_dir, node = self._node_dir(), self.node
        if self.keep_alive is None or node_dir is None or node is None or node.manifest_dir is None:
            return
        try:
            RunEntry(
                command=self.command,
                env=dict(self._env if self._env is not None else os.environ),
                cwd=os.getcwd(),
                hook_pid=os.getpid(),
                keep_alive=self.keep_alive.seconds,
                manifest_dir=str(node.manifest_dir),
                command_pid=self.child.pid if self.child is not None else 0,
            ).write(node_dir)
        except OSError as exc:
            log(f"cannot record the entry for `remote-debug run`: {describe(exc)}")

    def _hold(self, code: int) -> int:
        """Keep the node up after the command (``--keep-alive``); the job's exit code is the command's,
        or, when a run replaced the command, the last run's."""
        keep = self.keep_alive
        if keep is None or (self.stop_signal is not None and not self.replaced):
            return code
        self._write_run_entry()  # sshd may have come up (after an install) only while the command ran
        keep.node_dir = self._node_dir()
        last = keep.hold(code)
        return last if self.replaced and last is not None else code

    def _watch_ranks(self, node: NodeServices) -> None:
        """A line in the node's log when a rank is held for a post-mortem (see ``outcome``)."""
        if node.manifest_dir is None:
            return
        try:
            name = node.manifest.node if node.manifest is not None else "?"
            self.notices = HeldRankNotices(node.manifest_dir, name)
            self.notices.start()
        except Exception as exc:  # a notice is a courtesy
            log(f"cannot watch the ranks: {describe(exc)}")

    def run(self) -> int:
        self._install_signal_handlers()
        started = time.monotonic()
        # The hook is a fresh start: a claim inherited from whoever started us is not ours.
        os.environ.pop(ENV_CLAIMED_BY, None)
        spec: DebugSpec | None = None
        try:
            spec = DebugSpec.from_env()
        except ContractError as exc:
            log(f"invalid debug spec, running the command without debugging: {exc}")
        env: dict[str, str] | None = None
        code = 1
        try:
            if spec is not None:
                node = self.node = NodeServices(spec)
                try:
                    node.start()
                    if node.sshd is not None and node.manifest is not None:
                        log(
                            f"node {node.manifest.node}: sshd on {node.manifest.sshd_host}:{node.sshd.port}, "
                            f"manifest in {node.manifest_dir} (ready in {time.monotonic() - started:.2f} s)"
                        )
                except Exception as exc:  # a bug of ours must not cost the user their training run
                    node.error(f"hook setup failed: {describe(exc)}")
                if node.manifest_dir is not None:
                    env = self._env = child_env(dict(os.environ), node.manifest_dir)
                    self._watch_ranks(node)
                if spec.keep_alive > 0:
                    name = node.manifest.node if node.manifest is not None else "?"
                    self.keep_alive = KeepAlive(spec.keep_alive, self._node_dir(), node.publish, name)
            code = self._run_command(env)
            if self.node is not None:  # ranks the command's end took down (SIGTERM, SIGKILL) said nothing
                self.node.settle_ranks()
            code = self._hold(code)
        finally:
            try:
                self._sweep()
            except Exception as exc:  # never let cleanup change how the job ended
                log(f"stopping leftover processes failed: {describe(exc)}")
            if self.notices is not None:
                self.notices.stop()
            if self.node is not None and self.node.manifest_dir is not None and code != 0 and self.stop_signal is None:
                reason = write_failure_file(self.node.manifest_dir, os.environ)
                if reason:
                    log(f"failure reason: {reason}")
            if self.node is not None:
                if self.stop_signal is not None:
                    state = NodeState.STOPPED
                else:
                    state = NodeState.COMPLETED if code == 0 else NodeState.FAILED
                self.node.finish(state, code)
        return code


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "--":
        args = args[1:]
    if not args:
        print(USAGE, file=sys.stderr)
        return 2
    become_init_if_pid1()  # the container's PID 1 must reap orphans (init_reaper.py)
    return Hook(args).run()
