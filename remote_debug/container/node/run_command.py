"""The node's side of ``remote-debug run`` and ``remote-debug release``, run in an ssh session:

    "$REMOTE_DEBUG_NODE_PYTHON" -m remote_debug.container.node.run_command start [--port P|auto] [--wait S] [-- CMD...]
    "$REMOTE_DEBUG_NODE_PYTHON" -m remote_debug.container.node.run_command release

``start`` runs the entry the hook ran (``run_slot.RunEntry``: same command, environment and cwd, so
torchrun gets the same world size and the ranks get the hook), or CMD, as run ``n+1`` of the node:

1. it takes the run slot; a run still on is stopped first (SIGTERM to its ``rerun``, which stops its
   command), and a training command still running is stopped by the hook (``REPLACE_SIGNAL``);
2. a fresh rendezvous port: ``--port auto`` (the master node) binds port 0 on this node and prints
   ``{"master_port": P}`` as its first line, which the laptop passes on to the other nodes, started at
   the same time with ``--port stdin`` (the port's line on their stdin), or later with ``--port P``;
3. the command runs in a session of its own; its output (each rank's lines prefixed ``[rank N]`` by the
   rank itself, see ``rank_output``) streams to our stdout, i.e. the laptop;
4. EOF on stdin (the laptop's ``run`` ended: Ctrl-C, a lost connection) or SIGTERM/SIGHUP/SIGINT stops
   the command (SIGTERM to its process group, SIGKILL after ``STOP_GRACE``); the node stays up;
5. the exit code is the command's.  While the slot is held the hook's keep-alive clock does not run.

Refusals are one line on stderr and exit code 2 (a job launched without keep-alive, a session that does
not see the node's private dir).  Stdlib only: this runs in the training image.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import FrameType

from remote_debug.container.node.run_slot import (
    NODE_DIR_ENV,
    RELEASE_SIGNAL,
    REPLACE_SIGNAL,
    RunEntry,
    RunRecord,
    RunSlot,
    run_environment,
    with_master_port,
)
from remote_debug.container.rank import output_prefix as rank_output
from remote_debug.contract.spec import ENV_WAIT, RELEASE_ACK, ContractError, NodeManifest, NodeState, read_node_manifest
from remote_debug.oskit.osutil import proc_stat

PREFIX_ENV = rank_output.PREFIX_ENV  # "1": every rank prefixes its output lines with "[rank N] "
RUN_ENV = "REMOTE_DEBUG_RUN"  # the run number, in the run's environment
STOP_GRACE = 10.0  # SIGTERM, then SIGKILL: a run is stopped for the next one, which should not wait long
SLOT_WAIT = 30.0  # how long a new run waits for the previous one to let go of the slot
REPLACE_WAIT = 130.0  # ...and for the hook to stop the training command (its stop grace is at most 100 s by default)


class Refused(Exception):
    """One line for the user; exit code 2."""


def _node_dir() -> Path:
    raw = os.environ.get(NODE_DIR_ENV, "")
    if not raw:
        raise Refused(
            "this ssh session does not see the node's private dir (the node's sshd runs sessions without the "
            "job's environment: OpenSSH's sftp-server is missing there), so it cannot run the entry again"
        )
    return Path(raw)


def _entry(node_dir: Path) -> RunEntry:
    try:
        entry = RunEntry.read(node_dir)
    except OSError:
        raise Refused(
            "this job was launched without --keep-alive: its nodes end with the training command, so there is "
            "nothing to run again; launch it with --keep-alive SECONDS"
        ) from None
    except ValueError as exc:
        raise Refused(f"this node's run entry is unreadable: {exc}") from None
    if entry.keep_alive <= 0:
        raise Refused("this job was launched without --keep-alive: launch it with --keep-alive SECONDS")
    return entry


def _say(message: str) -> None:
    sys.stderr.write(f"[remote-debug] {message}\n")
    sys.stderr.flush()


def free_port() -> int:
    """A port free on this node now (the rendezvous master binds it a moment later)."""
    with socket.socket() as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


class Rerun:
    def __init__(self, node_dir: Path, entry: RunEntry) -> None:
        self.node_dir, self.entry = node_dir, entry
        self.slot = RunSlot(node_dir)
        self.child: subprocess.Popen[bytes] | None = None
        self.stopping = threading.Event()
        self.number = 0

    # --- taking over the node ------------------------------------------------------------------

    def take_slot(self) -> None:
        if self.slot.try_take():
            return
        previous = RunRecord.read(self.node_dir)
        if previous is not None and previous.exit_code is None:
            _say(f"stopping run {previous.run} first")
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(previous.pid, signal.SIGTERM)
        deadline = time.monotonic() + SLOT_WAIT
        while not self.slot.try_take():
            if time.monotonic() > deadline:
                raise Refused(f"the previous run on this node did not stop within {SLOT_WAIT:g} s")
            time.sleep(0.1)

    def replace_training_command(self) -> None:
        """The hook's training command still runs: have the hook stop it (the node then holds)."""
        manifest = self._manifest()
        if manifest is None or manifest.state != NodeState.RUNNING or manifest.kept_alive_until is not None:
            return
        if manifest.run != 0:
            return  # a run of ours was on (we hold its slot now): nothing of the hook's runs
        _say("stopping the training command; the node stays up")
        try:
            os.kill(self.entry.hook_pid, REPLACE_SIGNAL)
        except (ProcessLookupError, PermissionError) as exc:
            raise Refused(f"cannot reach the node's hook (pid {self.entry.hook_pid}): {exc}") from None
        # the command's end, not the manifest: the hook holds the node at once, and sees our slot taken
        deadline = time.monotonic() + REPLACE_WAIT
        while _running(self.entry.command_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _running(self.entry.command_pid):
            raise Refused(f"the training command did not stop within {REPLACE_WAIT:g} s")
        manifest = self._manifest()
        if manifest is not None and manifest.state != NodeState.RUNNING:
            raise Refused(f"the node ended ({manifest.state}) instead of staying up")

    def _manifest(self) -> NodeManifest | None:
        try:
            return read_node_manifest(Path(self.entry.manifest_dir))
        except (OSError, ContractError):
            return None

    # --- the run -------------------------------------------------------------------------------

    def claim_number(self) -> int:
        """The next run's number, on record at once: the hook reads it when it sees the slot taken."""
        previous = RunRecord.read(self.node_dir)
        self.number = (previous.run if previous is not None else 0) + 1
        RunRecord(self.number, os.getpid()).write(self.node_dir)
        return self.number

    def start(self, command: list[str], port: int | None, wait: float | None) -> int:
        number = self.number
        overrides = {PREFIX_ENV: "1", RUN_ENV: str(number), "PYTHONUNBUFFERED": "1"}
        if port is not None:
            command = with_master_port(command, port)
            overrides["MASTER_PORT"] = str(port)
        if wait is not None:
            overrides[ENV_WAIT] = f"{wait:g}"
        env = run_environment(self.entry, overrides)
        cwd = self.entry.cwd if os.path.isdir(self.entry.cwd) else None
        try:
            self.child = subprocess.Popen(
                command,
                env=env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            RunRecord(number, os.getpid(), 127).write(self.node_dir)
            raise Refused(f"cannot run {command[0]!r}: {exc.strerror or exc}") from None
        threading.Thread(target=self._watch_stdin, name="rerun-stdin", daemon=True).start()
        assert self.child.stdout is not None
        out = sys.stdout.buffer
        for line in iter(self.child.stdout.readline, b""):
            with contextlib.suppress(OSError):  # the laptop went away: keep draining, the stop is coming
                out.write(line)
                out.flush()
        code = self.child.wait()
        code = 128 - code if code < 0 else code
        RunRecord(number, os.getpid(), code).write(self.node_dir)
        return code

    def stop(self) -> None:
        """Stop the command's whole session: SIGTERM, then SIGKILL after STOP_GRACE."""
        if self.stopping.is_set():
            return
        self.stopping.set()
        child = self.child
        if child is None or child.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signal.SIGTERM)

        def escalate() -> None:
            if child.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(child.pid, signal.SIGKILL)

        timer = threading.Timer(STOP_GRACE, escalate)
        timer.daemon = True
        timer.start()

    def _watch_stdin(self) -> None:
        """EOF on stdin: the laptop's `run` is gone (Ctrl-C or a lost link): stop the run, keep the node."""
        with contextlib.suppress(OSError, ValueError):
            while os.read(0, 4096):
                pass
        self.stop()

    def on_signal(self, _signum: int, _frame: FrameType | None) -> None:
        self.stop()


def _port_from_stdin() -> int:
    line = b""
    while not line.endswith(b"\n"):
        chunk = os.read(0, 1)  # byte by byte: what follows on stdin is not ours to consume (EOF = stop)
        if not chunk:
            raise Refused("the laptop went away before it sent the rendezvous port")
        line += chunk
    text = line.decode("ascii", "replace").strip()
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise Refused(f"bad rendezvous port from the laptop: {text[:20]!r}")
    return int(text)


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (not gone, not a zombie waiting for its parent)."""
    fields = proc_stat(pid) if pid > 0 else None
    return fields is not None and fields[0] != "Z"


def _start(args: argparse.Namespace) -> int:
    node_dir = _node_dir()
    entry = _entry(node_dir)
    rerun = Rerun(node_dir, entry)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, rerun.on_signal)
    rerun.take_slot()
    try:
        rerun.claim_number()
        rerun.replace_training_command()
        port: int | None = None
        if args.port == "auto":
            port = free_port()
            print(json.dumps({"master_port": port}), flush=True)
        elif args.port == "stdin":  # the laptop started every node at once and sends the master's port
            port = _port_from_stdin()
        elif args.port:
            port = int(args.port)
        command = list(args.command or entry.command)
        if command and command[0] == "--":
            command = command[1:]
        if not command:
            raise Refused("no command to run")
        if rerun.stopping.is_set():
            return 130
        return rerun.start(command, port, args.wait)
    finally:
        rerun.slot.release()


def _release() -> int:
    entry = _entry(_node_dir())
    print(RELEASE_ACK, flush=True)  # before the signal: the node may end this session before its exit status
    try:
        os.kill(entry.hook_pid, RELEASE_SIGNAL)
    except ProcessLookupError:
        return 0  # the node is ending anyway
    except PermissionError as exc:
        raise Refused(f"cannot reach the node's hook (pid {entry.hook_pid}): {exc}") from None
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m remote_debug.container.node.run_command")
    sub = parser.add_subparsers(dest="what", required=True)
    start = sub.add_parser("start", help="run the entry (or CMD) again on this node")
    start.add_argument("--port", default="", help="rendezvous port; 'auto': a free one (printed first); 'stdin': read")
    start.add_argument("--wait", type=float, default=None, help="seconds each rank waits for a debugger")
    start.add_argument("command", nargs=argparse.REMAINDER)
    sub.add_parser("release", help="end this node's keep-alive now")
    args = parser.parse_args(argv)
    try:
        if args.what == "release":
            return _release()
        if args.port not in ("", "auto", "stdin") and not args.port.isdigit():
            raise Refused(f"bad --port {args.port!r}: a number, 'auto' or 'stdin'")
        return _start(args)
    except Refused as exc:
        _say(str(exc))
        return 2


if __name__ == "__main__":
    sys.exit(main())
