"""TCP_NODELAY on debugpy's own sockets (debuggee and adapter), checked on the sockets, not by timing."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import debugpy
import pytest

from remote_debug.container.rank import nodelay
from remote_debug.contract.spec import DEBUGPY_ADAPTERS, ENV_CLAIMED_BY

ADAPTER_DIR = str(Path(debugpy.__file__).parent / "adapter")

DEBUGGEE = textwrap.dedent(
    """
    import gc, socket, sys
    from remote_debug.container.rank import nodelay
    assert nodelay.enable(debuggee=True)
    import debugpy
    from remote_debug.laptop.ide.dap_client import attach_and_configure
    in_process = sys.argv[1:] == ["in-process"]
    _, port = debugpy.listen(("127.0.0.1", 0), in_process_debug_adapter=in_process)
    client = attach_and_configure("127.0.0.1", port, timeout=60)
    ours = []
    for obj in gc.get_objects():
        if isinstance(obj, socket.socket) and obj.fileno() >= 0 and obj.type == socket.SOCK_STREAM:
            try:
                peer = obj.getpeername()
            except OSError:
                continue
            if peer[1] == port:  # the test client's own socket
                continue
            # pydevd's connection to its adapter, or (in-process) the debugger's connection pydevd accepted
            ours.append(obj.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
    client.close()
    print(ours)
    """
)

ADAPTER = textwrap.dedent(
    """
    import socket, sys
    from remote_debug.container.rank import nodelay
    assert nodelay.enable(argv=[sys.executable, sys.argv[1], "--for-server", "1"])
    from debugpy.common import sockets
    listener = sockets.create_server("127.0.0.1", 0)
    client = socket.create_connection(listener.getsockname())
    accepted, _ = listener.accept()
    out = sockets.create_client()
    print([s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) for s in (listener, accepted, out)])
    """
)


def _run(code: str, *args: str, env: dict[str, str]) -> str:
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("adapter", DEBUGPY_ADAPTERS)
def test_debuggee_dap_connection_has_nodelay(adapter: str) -> None:
    """To its adapter process, or from the IDE when pydevd serves DAP itself."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMOTE_DEBUG_")}
    env["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"
    result = _run(DEBUGGEE, adapter, env=env)
    assert result.startswith("[") and "0" not in result and result != "[]", result


def test_adapter_sockets_get_nodelay_only_in_our_ranks_adapters() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMOTE_DEBUG_")}
    assert _run(ADAPTER, ADAPTER_DIR, env={**env, ENV_CLAIMED_BY: "1"}) == "[1, 1, 1]"
    # not an adapter, or an adapter that no rank of ours started: untouched
    assert nodelay.enable(argv=[sys.executable, "train.py"]) is False
    saved = os.environ.pop(ENV_CLAIMED_BY, None)
    try:
        assert nodelay.enable(argv=[sys.executable, ADAPTER_DIR, "--for-server", "1"]) is False
    finally:
        if saved is not None:
            os.environ[ENV_CLAIMED_BY] = saved
