"""``remote-debug run`` and ``release``: the laptop's side of iterating on a kept-alive job.

Everything goes over the job's own ssh (OpenSSH with our generated entries, as ``remote-debug ssh``),
so nothing here depends on the backend: a local job, the emulator and SageMaker are driven alike.
Each node runs ``python -m remote_debug.container.node.run_command`` with the job's interpreter (the ssh session
names it, see ``ssh_session``):

1. every node starts at once; the rendezvous master (the first node) with ``--port auto``: it picks a
   port free on that node and says it first, and every other node reads it from its stdin;
2. every node's output streams back, each line tagged with its node (and with its rank when a rank
   printed it: ranks prefix their lines with ``[rank N]`` during a run);
3. Ctrl-C closes the ssh sessions' stdin: each node stops its run (SIGTERM to the run's process group)
   and stays up; the exit code is then 130;
4. the run's exit code is the first failing node's (in node order), else 0.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from remote_debug.contract import spec
from remote_debug.laptop.connection.job_connection import JobConnection
from remote_debug.laptop.core.errors import UserError
from remote_debug.laptop.wire import events

RANK_PREFIX = re.compile("^" + re.escape(spec.RANK_OUTPUT_PREFIX).replace(re.escape("{rank}"), r"(\d+)"))
STOP_WAIT = 20.0  # after Ctrl-C: how long the nodes get to stop their runs before we close ssh
PORT_WAIT = 60.0  # how long the master node may take to take over (stopping a run or the training command)
REFUSED = 2  # a node's `rerun` refused (one line on stderr): our exit code too


def node_command(*args: str) -> str:
    """The shell command line that runs ``rerun`` on a node with the job's interpreter."""
    return f'"${spec.RERUN_PYTHON_ENV}" -m {spec.RERUN_MODULE} ' + shlex.join(args)


def ssh_argv(connection: JobConnection, alias: str, remote: str) -> list[str]:
    client = shutil.which("ssh")
    if client is None:
        raise UserError("OpenSSH client 'ssh' not found: install it (apt install openssh-client)")
    # -T: no terminal (a run's output is lines, and stdin EOF is how a node learns we are gone)
    return [client, "-T", "-F", str(connection.paths.ssh_config), alias, remote]


@dataclass
class NodeRun:
    node: str
    alias: str
    proc: subprocess.Popen[bytes] | None = None
    code: int | None = None
    errors: list[str] = field(default_factory=list)  # what the node said on stderr


class RunDriver:
    """One ``remote-debug run`` of a job: start it on every node, stream, stop on request."""

    def __init__(
        self, connection: JobConnection, emit: events.Emit, output: Callable[[events.RunOutput], None]
    ) -> None:
        self.connection = connection
        self.emit = emit
        self.output = output
        self.nodes: list[NodeRun] = []
        self.interrupted = False
        self._threads: list[threading.Thread] = []
        self.run = 0

    def start(self, command: list[str], wait: float | None, timeout: float) -> events.RunStarted:
        info = self.connection.require_running()
        manifests = self.connection.wait_for_manifests(timeout)
        entries = self.connection.write_ssh_entries(manifests, edit_user_config=False)
        by_node = {e.node: e.alias for e in entries}
        order = [n for n in info.nodes if n in by_node] or sorted(by_node)
        self.nodes = [NodeRun(n, by_node[n]) for n in order]
        run = self.run = max((m.run for m in manifests.values()), default=0) + 1
        options = [] if wait is None else ["--wait", f"{wait:g}"]
        tail = ["--", *command] if command else []
        master, *others = self.nodes
        # every node at once (ssh, the session, the interpreter); the others get the master's port on stdin
        self._spawn(master, node_command("start", "--port", "auto", *options, *tail))
        for node in others:
            self._spawn(node, node_command("start", "--port", "stdin", *options, *tail))
        port = self._master_port(master)
        for node in others:
            assert node.proc is not None and node.proc.stdin is not None
            try:
                node.proc.stdin.write(f"{port}\n".encode())
                node.proc.stdin.flush()
            except OSError:  # that node's ssh already ended: its exit code tells
                pass
        started = events.RunStarted(
            job=self.connection.job,
            run=run,
            nodes=[n.node for n in self.nodes],
            command=list(command),
            master_port=port,
        )
        self.emit(started)
        for node in self.nodes:
            self._pump(node)
        return started

    def _spawn(self, node: NodeRun, remote: str) -> None:
        node.proc = subprocess.Popen(
            ssh_argv(self.connection, node.alias, remote),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        thread = threading.Thread(target=self._read_stderr, args=(node,), daemon=True, name=f"run-err-{node.node}")
        thread.start()
        self._threads.append(thread)

    def _master_port(self, master: NodeRun) -> int:
        """The first line of the master node's ``rerun``: ``{"master_port": P}``."""
        assert master.proc is not None and master.proc.stdout is not None
        found: list[int] = []

        def read() -> None:
            assert master.proc is not None and master.proc.stdout is not None
            line = master.proc.stdout.readline()
            try:
                found.append(int(json.loads(line)["master_port"]))
            except (ValueError, KeyError, TypeError):
                pass

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(PORT_WAIT)
        if found:
            return found[0]
        code = master.proc.wait(timeout=5) if not reader.is_alive() else None
        self._close_all()
        said = master.errors[-1] if master.errors else f"ssh exited with code {code}"
        raise UserError(f"{master.node}: cannot start the run: {said}")

    def _pump(self, node: NodeRun) -> None:
        """Stream a node's output (the master's first line, its port, was read by _master_port)."""

        def read() -> None:
            assert node.proc is not None and node.proc.stdout is not None
            for raw in iter(node.proc.stdout.readline, b""):
                line = raw.decode("utf-8", "replace").rstrip("\r\n")
                match = RANK_PREFIX.match(line)
                rank = int(match.group(1)) if match else None
                self.output(events.RunOutput(node=node.node, line=line[match.end() :] if match else line, rank=rank))

        thread = threading.Thread(target=read, daemon=True, name=f"run-out-{node.node}")
        thread.start()
        self._threads.append(thread)

    def _read_stderr(self, node: NodeRun) -> None:
        assert node.proc is not None and node.proc.stderr is not None
        for raw in iter(node.proc.stderr.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            if not line:
                continue
            node.errors.append(line.removeprefix("[remote-debug] "))
            self.output(events.RunOutput(node=node.node, line=line, rank=None))

    def wait(self) -> events.RunEnded:
        """Until every node's run ended (Ctrl-C: :meth:`interrupt`, then wait again)."""
        for node in self.nodes:
            if node.proc is not None:
                node.code = node.proc.wait()
        for thread in self._threads:
            thread.join(timeout=2)
        return self.ended()

    def ended(self) -> events.RunEnded:
        codes = {n.node: (n.code if n.code is not None else -1) for n in self.nodes}
        failing = next((c for c in codes.values() if c != 0), 0)
        if self.interrupted:
            failing = 130
        return events.RunEnded(
            job=self.connection.job,
            run=self.run,
            exit_code=failing,
            exit_codes=codes,
            interrupted=self.interrupted,
        )

    def refusal(self) -> str | None:
        """A node's one-line refusal (``rerun`` exits 2), if every node refused."""
        refused = [n for n in self.nodes if n.code == REFUSED and n.errors]
        return refused[0].errors[-1] if refused and len(refused) == len(self.nodes) else None

    def interrupt(self) -> None:
        """Ctrl-C: end each node's run (EOF on its stdin), wait for them, then close ssh."""
        self.interrupted = True
        for node in self.nodes:
            if node.proc is not None and node.proc.stdin is not None:
                try:
                    node.proc.stdin.close()
                except OSError:
                    pass
        deadline = time.monotonic() + STOP_WAIT
        for node in self.nodes:
            if node.proc is None:
                continue
            try:
                node.code = node.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                node.proc.terminate()
                node.code = node.proc.wait()

    def _close_all(self) -> None:
        for node in self.nodes:
            if node.proc is not None and node.proc.poll() is None:
                node.proc.terminate()
                node.proc.wait()


def release(connection: JobConnection, timeout: float) -> list[str]:
    """End the keep-alive of every node now; returns the nodes told.  A node that refuses (no
    keep-alive) makes it a UserError."""
    connection.require_running()
    manifests = connection.wait_for_manifests(timeout)
    entries = connection.write_ssh_entries(manifests, edit_user_config=False)
    told = []
    for entry in entries:
        done = subprocess.run(
            ssh_argv(connection, entry.alias, node_command("release")),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
        )
        # "released" comes before the node's hook is told, and the node may end the session (ssh's 255)
        # before that word reaches us: then the node's own document says whether it is ending
        refused = done.returncode == REFUSED and "[remote-debug]" in done.stderr
        if (
            done.returncode != 0
            and spec.RELEASE_ACK not in done.stdout.split()
            and (refused or not _ending(connection, entry.node))
        ):
            said = done.stderr.strip().splitlines()[-1:] or [f"ssh exited with code {done.returncode}"]
            raise UserError(f"{entry.node}: {said[0].removeprefix('[remote-debug] ')}")
        told.append(entry.node)
    return told


def _ending(connection: JobConnection, node: str, timeout: float = 10.0) -> bool:
    """Whether the node left its hold (its document no longer says "running"), within ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            manifest = connection.manifests().get(node)
        except Exception:  # the job is gone: ended
            return True
        if manifest is None or manifest.state != spec.NodeState.RUNNING:
            return True
        time.sleep(0.2)
    return False
