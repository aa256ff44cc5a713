"""Reverse forwards on a NodeTunnel: several node ports on one transport each reach their own handler
(paramiko keeps one handler per transport), and they come back after the transport is cut."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import paramiko

from remote_debug.laptop.connection.job_connection import JobConnection, endpoint_for
from remote_debug.laptop.connection.tunnels import NodeTunnel, ReverseHandler
from remote_debug.laptop.core.paths import StatePaths
from remote_debug.laptop.machine.backend import LaunchRequest
from remote_debug.laptop.platforms import MachineBackend


def answering(tag: bytes) -> ReverseHandler:
    def handler(chan: paramiko.Channel, _origin: tuple[str, int]) -> None:
        try:
            chan.sendall(tag + b":" + chan.recv(100))
        finally:
            chan.close()

    return handler


def ask(port: int, timeout: float = 20) -> bytes:
    """Connect to the node's end of a reverse forward (here: this machine's loopback) and ask."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                s.sendall(b"ping")
                s.settimeout(5)
                reply = s.recv(100)
                if reply:
                    return reply
        except OSError:
            pass
        assert time.monotonic() < deadline, f"no answer on node port {port}"
        time.sleep(0.2)


def test_reverse_forwards_dispatch_by_port_and_survive_a_reconnect(home: Path, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    paths = StatePaths.default()
    backend = MachineBackend(paths)
    backend.launch(LaunchRequest(command=["sleep", "120"], name="rev", source_dir=src))
    tunnel: NodeTunnel | None = None
    try:
        connection = JobConnection(backend, "rev", paths)
        manifests = connection.wait_for_manifests(60)
        entries = connection.write_ssh_entries(manifests, edit_user_config=False)
        tunnel = NodeTunnel(endpoint_for(entries[0], paths))
        tunnel.connect()
        port_a = tunnel.reverse_forward(0, answering(b"A"))
        port_b = tunnel.reverse_forward(0, answering(b"B"))
        assert port_a != port_b
        assert ask(port_a) == b"A:ping" and ask(port_b) == b"B:ping"

        # Cut the transport (the relay dies, as when an SSM session drops).
        assert tunnel._proxy is not None
        tunnel._proxy.process.kill()
        deadline = time.monotonic() + 10
        while tunnel.alive:
            assert time.monotonic() < deadline, "transport did not notice the cut"
            time.sleep(0.1)
        deadline = time.monotonic() + 30
        while True:  # sshd may hold the old session's ports for a moment: the tunnel retries
            tunnel.ensure_connected()
            if not tunnel._reverse_pending:
                break
            assert time.monotonic() < deadline, f"reverse forwards not restored: {tunnel._reverse_pending}"
            time.sleep(0.3)
        assert tunnel.reconnects == 1
        assert ask(port_a) == b"A:ping" and ask(port_b) == b"B:ping"  # same node ports as before
    finally:
        if tunnel is not None:
            tunnel.close()
        backend.stop("rev", wait_seconds=30)
