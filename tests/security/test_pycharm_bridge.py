"""The PyCharm bridge never hands a rank to another user's program on the IDE port (issue 13, item 1).

PyCharm's debug server port is a well-known one (12345 by default).  When PyCharm is not running,
another local user may listen there; whoever accepts a rank's connection drives pydevd in the rank,
i.e. runs code in the job.  ``nobody`` (via ``setpriv``) listens on the port and reports every byte
it receives; the rank's side of the reverse forward is one end of a socket pair (the bridge only
needs ``sendall``/``recv``/``close`` of its channel).
"""

from __future__ import annotations

import json
import socket
import subprocess
import textwrap
import threading
from typing import Any, cast

import paramiko

from remote_debug.contract.pycharm_spec import Hello
from remote_debug.laptop.connection.reverse import IdeBridge
from tests.helpers.second_user import needs_second_user, nobody, python_as_nobody

# Listens, prints its port, accepts what comes for 3 s and reports the bytes it received.
FAKE_IDE = textwrap.dedent(
    """
    import json, socket, sys, time
    server = socket.create_server(("127.0.0.1", 0))
    print(server.getsockname()[1], flush=True)
    server.settimeout(3)
    got = b""
    try:
        conn, _ = server.accept()
        conn.settimeout(2)
        while True:
            chunk = conn.recv(4096)
            if not chunk:
                break
            got += chunk
    except OSError:
        pass
    print(json.dumps({"received": got.decode(errors="replace")}), flush=True)
    """
)


@needs_second_user
def test_a_rank_is_not_handed_to_another_users_program_on_the_ide_port() -> None:
    fake = subprocess.Popen(python_as_nobody(FAKE_IDE), stdout=subprocess.PIPE, text=True, cwd="/")
    events: list[dict[str, Any]] = []
    rank_side, bridge_side = socket.socketpair()
    try:
        assert fake.stdout is not None
        port = int(fake.stdout.readline())
        bridge = IdeBridge(port, ide_root="/ws", emit=lambda e: events.append(e.to_json()))
        serving = threading.Thread(
            target=bridge.handler_for(0, "algo-1", 40001), args=(cast(paramiko.Channel, bridge_side), ("127.0.0.1", 0))
        )
        serving.start()
        rank_side.settimeout(10)
        hello = Hello.decode(rank_side.makefile("rb").readline())
        with_pydevd = b"501\t1\t" + b"x" * 40 + b"\n"  # what the rank's pydevd would say next
        try:
            rank_side.sendall(with_pydevd)
        except OSError:
            pass  # closed already: nothing to carry it
        serving.join(10)
        report = json.loads(fake.stdout.readline())
    finally:
        rank_side.close()
        fake.kill()
        fake.wait(10)
    assert not hello.ok and f"belongs to uid {nobody().pw_uid}" in hello.error
    assert report["received"] == ""  # not one byte of the rank reached the stranger
    told = [e for e in events if e["event"] == "ide-not-listening"]
    assert len(told) == 1 and "not connecting the rank" in told[0]["message"]
