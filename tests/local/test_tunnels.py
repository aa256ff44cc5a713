"""NodeTunnel: one pinned SSH connection per node through the ProxyCommand; forwards survive a
dropped transport (the IDE's ports stay the same) and the tunnel re-establishes itself."""

from __future__ import annotations

import time
from pathlib import Path

from remote_debug.laptop.connection.job_connection import JobConnection, endpoint_for
from remote_debug.laptop.connection.rank_control import RankControl
from remote_debug.laptop.connection.tunnels import NodeTunnel
from remote_debug.laptop.core.paths import StatePaths
from remote_debug.laptop.ide.dap_client import DapClient
from remote_debug.laptop.machine.backend import LaunchRequest, free_port
from remote_debug.laptop.platforms import MachineBackend


def test_forward_survives_a_dropped_transport(home: Path, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "sleeper.py").write_text("import time\nfor i in range(600):\n    time.sleep(0.1)\n")
    paths = StatePaths.default()
    backend = MachineBackend(paths)
    backend.launch(LaunchRequest(command=["python", "sleeper.py"], name="flaky", source_dir=src))
    tunnel: NodeTunnel | None = None
    try:
        deadline = time.monotonic() + 60
        while True:
            manifests = JobConnection(backend, "flaky", paths).wait_for_manifests(60)
            ranks = manifests["algo-1"].ranks
            if ranks and (ranks[0].port or ranks[0].control_port):
                break
            assert time.monotonic() < deadline
            time.sleep(0.2)
        entries = JobConnection(backend, "flaky", paths).write_ssh_entries(manifests, edit_user_config=False)
        tunnel = NodeTunnel(endpoint_for(entries[0], paths))
        tunnel.connect()
        # an idle rank (lazy listeners) starts debugpy when asked through its control channel
        assert ranks[0].state == "idle" and ranks[0].port == 0
        rank_port = RankControl(tunnel, JobConnection(backend, "flaky", paths).secret).listen(ranks[0]).port
        # probe the rank's control listener: a bare connect+close on debugpy's own port can leave its
        # adapter without an answer for the next client, so nothing of ours probes debug ports
        assert tunnel.probe(ranks[0].control_port)
        assert not tunnel.probe(free_port())  # nothing listens there on the node: the channel is refused
        local_port = tunnel.forward(rank_port)

        with DapClient.connect("127.0.0.1", local_port, timeout=20) as client:
            assert client.capabilities.get("supportsConfigurationDoneRequest")

        # Cut the transport under the tunnel (the relay process dies, as when an SSM session drops).
        old = tunnel._proxy
        assert old is not None
        old.process.kill()
        deadline = time.monotonic() + 10
        while tunnel.alive:
            assert time.monotonic() < deadline, "transport did not notice the cut"
            time.sleep(0.1)
        assert tunnel.ensure_connected() is True
        assert tunnel.reconnects == 1
        assert tunnel.ensure_connected() is False  # reported once
        # the dead relay was reaped and its pipes closed (paramiko's close left a zombie and 3 fds)
        assert old.process.returncode is not None
        assert old.process.stdout is not None and old.process.stdout.closed
        assert tunnel.forward(rank_port) == local_port  # the IDE's port did not change
        with DapClient.connect("127.0.0.1", local_port, timeout=20) as client:
            assert client.capabilities.get("supportsConfigurationDoneRequest")
    finally:
        if tunnel is not None:
            tunnel.close()
        backend.stop("flaky", wait_seconds=30)
