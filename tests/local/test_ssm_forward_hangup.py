"""The port-forwarding proxy ends its SSM session even when ssh's SIGHUP comes in the middle of its clean-up.

ssh sends its ProxyCommand SIGHUP as it exits, often just after the relay ended by itself (sshd closed the
connection): that SIGHUP must not kill the proxy between ending the plugin and TerminateSession, or the session
stays open on the target (seen in CI).  A real process plays it: a plugin stand-in that serves one connection and
then waits for more (as the real plugin does with smux), and a TerminateSession that takes a second."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

PROXY = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from remote_debug.laptop.aws import ssm_forward

    marks = Path(sys.argv[1])
    PLUGIN = '''
    import socket, sys, time
    server = socket.socket()
    server.bind(("127.0.0.1", int(sys.argv[1])))
    server.listen()
    print("Waiting for connections...", flush=True)
    conn, _ = server.accept()
    conn.sendall(b"bye")
    conn.close()
    time.sleep(600)  # the real plugin waits for the next connection
    '''

    def launch(params, response):
        return [sys.executable, "-c", PLUGIN, params["Parameters"]["localPortNumber"][0]], None

    def terminate(session_id):
        (marks / "terminating").write_text(session_id)
        time.sleep(1.0)
        (marks / "terminated").write_text(session_id)

    code = ssm_forward.run_forwarding(
        "target", 22, sys.stdin.buffer, sys.stdout.buffer,
        start=lambda params: {"SessionId": "s-1"}, launch=launch, terminate=terminate,
    )
    (marks / "returned").write_text(str(code))
    """
)


def test_a_sighup_during_the_clean_up_waits_for_terminate_session(tmp_path: Path) -> None:
    script = tmp_path / "proxy.py"
    script.write_text(PROXY)
    marks = tmp_path / "marks"
    marks.mkdir()
    proxy = subprocess.Popen(
        [sys.executable, str(script), str(marks)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=os.getcwd()
    )
    try:
        deadline = time.monotonic() + 30
        while not (marks / "terminating").exists():  # the relay ended by itself: the clean-up has begun
            assert proxy.poll() is None and time.monotonic() < deadline, "the proxy never began its clean-up"
            time.sleep(0.02)
        os.kill(proxy.pid, signal.SIGHUP)  # ssh exits now
        proxy.wait(30)
        assert (marks / "terminated").read_text() == "s-1"  # TerminateSession was not cut short
        assert (marks / "returned").read_text() == "0"
        assert proxy.stdout is not None and proxy.stdout.read() == b"bye"
    finally:
        if proxy.poll() is None:
            proxy.kill()
            proxy.wait()
        for pipe in (proxy.stdin, proxy.stdout):
            if pipe is not None:
                pipe.close()
