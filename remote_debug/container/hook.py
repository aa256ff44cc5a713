"""The node hook: ``python -m remote_debug.container [--] CMD...`` wraps a training job's entry command.

In order: read the debug spec, start the node's private sshd, publish the node manifest, run the
command with our sitecustomize on its PYTHONPATH (so every rank starts a listener), forward stop
signals to it, and when it ends stop sshd and record how it ended.

The one rule above all: the hook never breaks training.  A missing or invalid spec, a missing
sshd, an unwritable manifest dir - each is logged as one ``[remote-debug]`` line and recorded in
the manifest's ``errors``, and the command runs anyway.  The hook's exit code is the command's
(128+N when a signal N killed it, as a shell reports it), so the platform's view of the job is
unchanged.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from types import FrameType

from remote_debug.container import node_env
from remote_debug.container.log import describe, log, one_line
from remote_debug.container.sshd import (
    LOOPBACK,
    Sshd,
    SshdError,
    current_user,
    set_parent_death_signal,
    start_sshd,
)
from remote_debug.spec import (
    ENV_CLAIMED_BY,
    ENV_MANIFEST_DIR,
    ENV_STATE_DIR,
    ContractError,
    DebugSpec,
    NodeManifest,
    write_node_manifest,
)

INJECT_DIR = Path(__file__).resolve().parent / "inject"
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
USAGE = "usage: python -m remote_debug.container [--] COMMAND [ARGS...]"


def exit_code_of(returncode: int) -> int:
    """Popen's returncode as a shell reports it: -N (killed by signal N) becomes 128+N."""
    return 128 - returncode if returncode < 0 else returncode


def child_env(base: dict[str, str], manifest_dir: Path) -> dict[str, str]:
    """The training command's environment: our sitecustomize first on PYTHONPATH, manifest dir set."""
    env = dict(base)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(INJECT_DIR), env.get("PYTHONPATH", "")) if p)
    env[ENV_MANIFEST_DIR] = str(manifest_dir)
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
        self.sshd: Sshd | None = None
        self.manifest: NodeManifest | None = None
        self.manifest_dir: Path | None = None
        self.own_state_dir: Path | None = None  # removed at exit when we created it

    # --- signals -------------------------------------------------------------------------------

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        # Python runs this in the main thread, also while it is blocked in Popen.wait().
        if self.stop_signal is None:
            self.stop_signal = signum
        child = self.child
        if child is None or child.returncode is not None:
            return
        if signum in (signal.SIGINT, signal.SIGHUP) and _terminal_signals_reach_child():
            # Ctrl-C / hangup already went to the whole foreground group, the command included; a
            # second copy from us could cut its own cleanup short (torchrun re-raises on each one).
            return
        self._forwarded = True
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)

    def _install_signal_handlers(self) -> None:
        for sig in FORWARDED_SIGNALS:
            signal.signal(sig, self._on_signal)

    # --- manifest ------------------------------------------------------------------------------

    def _publish(self, **changes: object) -> None:
        if self.manifest is None or self.manifest_dir is None:
            return
        self.manifest = replace(self.manifest, **changes)  # type: ignore[arg-type]
        try:
            write_node_manifest(self.manifest_dir, self.manifest)
        except OSError as exc:
            log(f"cannot write node manifest in {self.manifest_dir}: {describe(exc)}")

    def _error(self, message: str) -> None:
        log(message)
        if self.manifest is not None:
            self._publish(errors=[*self.manifest.errors, one_line(message)])

    # --- setup ---------------------------------------------------------------------------------

    def _setup(self, spec: DebugSpec) -> dict[str, str]:
        """Manifest + sshd; returns the command's environment.  Failures are recorded, not raised."""
        identity = node_env.identify()
        self.manifest_dir = node_env.manifest_dir(spec.job_name, identity.node)
        try:
            user = current_user()
        except SshdError as exc:
            user = os.environ.get("USER", "")
            self._error(f"sshd failed: {exc}")
        self.manifest = NodeManifest(
            job_name=spec.job_name, node=identity.node, hosts=identity.hosts, sshd_host=LOOPBACK,
            sshd_port=0, ssh_user=user, host_public_key="", code_dir=node_env.code_dir(),
            state="starting", hook_pid=os.getpid(),
        )
        self._publish()
        self._start_sshd(spec)
        return child_env(dict(os.environ), self.manifest_dir)

    def _start_sshd(self, spec: DebugSpec) -> None:
        try:
            explicit = os.environ.get(ENV_STATE_DIR)
            if explicit:
                state_dir = Path(explicit)
            else:
                state_dir = self.own_state_dir = Path(tempfile.mkdtemp(prefix="remote-debug-sshd-"))
            self.sshd = start_sshd(state_dir, spec.client_public_key, spec.sshd_port)
        except (SshdError, OSError) as exc:
            self._error(f"sshd failed: {exc if isinstance(exc, SshdError) else describe(exc)}")
            return
        sshd = self.sshd
        self._publish(sshd_port=sshd.port, ssh_user=sshd.user, host_public_key=sshd.host_public_key)

    def _teardown(self) -> None:
        if self.sshd is not None:
            try:
                self.sshd.stop()
            except Exception as exc:
                log(f"stopping sshd failed: {describe(exc)}")
        if self.own_state_dir is not None:  # holds the host's private key: do not leave it behind
            shutil.rmtree(self.own_state_dir, ignore_errors=True)

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
        self._publish(state="running")
        return exit_code_of(self.child.wait())

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
        try:
            if spec is not None:
                try:
                    env = self._setup(spec)
                    if self.sshd is not None:
                        log(
                            f"node {self.manifest.node if self.manifest else '?'}: sshd on 127.0.0.1:"
                            f"{self.sshd.port}, manifest in {self.manifest_dir} "
                            f"(ready in {time.monotonic() - started:.2f} s)"
                        )
                except Exception as exc:  # a bug of ours must not cost the user their training run
                    self._error(f"hook setup failed: {describe(exc)}")
                    env = child_env(dict(os.environ), self.manifest_dir) if self.manifest_dir else None
            code = self._run_command(env)
        finally:
            self._teardown()
        state = "stopped" if self.stop_signal is not None else ("completed" if code == 0 else "failed")
        self._publish(state=state, exit_code=code)
        return code


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "--":
        args = args[1:]
    if not args:
        print(USAGE, file=sys.stderr)
        return 2
    return Hook(args).run()
