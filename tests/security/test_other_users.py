"""Another local user against a live session (issue 13, item 1): ``nobody`` (via ``setpriv``) connects
to every listener of a local job and its attach - the ranks' debugpy ports, their control channels,
the attach's forwards - and speaks the protocol a real attacker would (DAP ``initialize``, a control
request).  Before the uid gate the adapter answered and the control channel obeyed; that user could
also hold a forward open and lock the real IDE out ("already has a debugger attached").

The session (tests/helpers/live_session.py): 1 node x 2 ranks, VS Code mode, attached headless.
"""

from __future__ import annotations

import json
import socket
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from remote_debug.laptop.attach.attacher import UID_CHECK_UNAVAILABLE, Attacher, AttachOptions
from remote_debug.laptop.connection.job_connection import endpoint_for, host_entries
from remote_debug.laptop.connection.tunnels import NodeTunnel
from remote_debug.laptop.core.paths import StatePaths
from remote_debug.laptop.ide.headless_session import HeadlessPlan
from remote_debug.laptop.platforms import MachineBackend
from remote_debug.oskit import peer_uid
from tests.helpers.event_log import EventLog
from tests.helpers.hook_runs import wait_for
from tests.helpers.live_session import Session, live_session
from tests.helpers.second_user import needs_second_user, nobody, python_as_nobody
from tests.helpers.ssm_plugin import echo_server
from tests.local.test_local_faults import make_fake_job

pytestmark = pytest.mark.skipif(not Path("/usr/sbin/sshd").exists(), reason="needs OpenSSH's sshd")

JOB = "others"

# What the attacker does with each port: a DAP initialize and a control request (the two protocols
# behind our listeners); whatever comes back is reported.
PROBE = textwrap.dedent(
    """
    import json, os, socket, sys, time
    task = json.load(sys.stdin)
    body = json.dumps({"seq": 1, "type": "request", "command": "initialize",
                       "arguments": {"adapterID": "debugpy", "clientID": "attacker"}}).encode()
    dap = b"Content-Length: %d\\r\\n\\r\\n" % len(body) + body
    control = json.dumps({"op": "stacks"}).encode() + b"\\n"
    report = {"uid": os.getuid(), "ports": {}}
    for port in task["ports"]:
        outcome = {}
        for name, payload in (("dap", dap), ("control", control)):
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=5)
            except OSError as exc:
                outcome[name] = "connect failed: %s" % exc
                continue
            s.settimeout(task["wait"])
            try:
                s.sendall(payload)
                data = b""
                while len(data) < 4096:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                outcome[name] = data.decode(errors="replace")[:300]
            except socket.timeout:
                outcome[name] = "timeout: " + data.decode(errors="replace")[:300]
            except OSError as exc:
                outcome[name] = "closed: %s" % type(exc).__name__
            finally:
                s.close()
        report["ports"][str(port)] = outcome
    json.dump(report, sys.stdout)
    """
)

# Holds a connection to one port open (the real IDE comes next), says "holding", then waits.
HOLD = textwrap.dedent(
    """
    import socket, sys, time
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
    print("holding", flush=True)
    time.sleep(60)
    """
)


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    """Rank 0 stopped at the breakpoint, rank 1 attached and running."""
    with live_session(
        tmp_path_factory.mktemp("others"), JOB, "vscode", lambda seen: {("stopped", 0), ("rank-attached", 1)} <= seen
    ) as s:
        yield s


def _forwards(session: Session) -> dict[int, int]:
    """rank -> the attach's local forward port."""
    return {e["rank"]: e["local_port"] for e in session.events if e["event"] == "rank-ready"}


@needs_second_user
def test_another_user_reaches_no_debugger_and_no_control_channel(session: Session) -> None:
    m = session.manifest()
    ports = {
        "rank debug port": [r.port for r in m.ranks],
        "rank control port": [r.control_port for r in m.ranks],
        "attach forward": list(_forwards(session).values()),
    }
    every = [p for group in ports.values() for p in group]
    assert len(every) == 6 and all(every), ports
    result = subprocess.run(
        python_as_nobody(PROBE),
        input=json.dumps({"ports": every, "wait": 3}),
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin"},
        cwd="/",
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["uid"] == nobody().pw_uid
    answered = {
        port: outcome
        for port, outcome in report["ports"].items()
        if any(text and not text.startswith("closed") for text in outcome.values())
    }
    # Every connection was closed without one byte of answer: no DAP response, no control reply.
    assert answered == {}, answered
    # ...and each refusal was told: the attach's forwards as a warning event, the ranks in their log
    refused = [e for e in session.events if e["event"] == "warning" and e.get("code") == "connection-refused"]
    assert len(refused) >= 2 * len(ports["attach forward"])
    assert all("belongs to uid" in e["message"] for e in refused)
    print(
        f"\n[security] as nobody: {len(every)} ports x 2 protocols -> {len(every) * 2} connections, "
        f"0 answered; {len(refused)} refusals reported by the attach"
    )


@needs_second_user
def test_another_user_holding_a_forward_does_not_lock_the_ide_out(session: Session) -> None:
    """A one-debugger forward (as the attach makes for each rank) to a fresh echo service on the node:
    nobody connects first and holds on; our client must still get through."""
    m = session.manifest()
    tunnel = NodeTunnel(endpoint_for(host_entries(JOB, {"algo-1": m}, session.paths)[0], session.paths))
    refused: list[str] = []
    tunnel.on_foreign = refused.append
    with echo_server() as echo:
        try:
            local = tunnel.forward(echo.port, exclusive="the echo of job others")
            holder = subprocess.Popen(
                python_as_nobody(HOLD, str(local)),
                stdout=subprocess.PIPE,
                text=True,
                env={"PATH": "/usr/bin:/bin"},
                cwd="/",
            )
            try:
                assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
                wait_for(lambda: refused, 10, "the stranger's connection to be refused")
                with socket.create_connection(("127.0.0.1", local), timeout=10) as ours:
                    ours.sendall(b"ping\n")
                    assert ours.recv(64) == b"ping\n"  # through, not "already has a debugger attached"
            finally:
                holder.kill()
                holder.wait(10)
        finally:
            tunnel.close()
    assert len(refused) == 1 and "belongs to uid" in refused[0] and tunnel.refused_foreign == 1


def test_where_no_uid_can_be_told_attach_says_so_once(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not Linux: the forwards cannot tell who connects, and the user hears it once, at the start."""
    sleeper = subprocess.Popen(["sleep", "120"])
    try:
        paths = StatePaths.default()
        make_fake_job(paths, "nouid", sleeper.pid)  # its sshd (port 2222) is not there: attach then fails
        monkeypatch.setattr(peer_uid, "supported", lambda *_: False)
        events = EventLog()
        options = AttachOptions(workspace=home, headless=HeadlessPlan(breakpoints={}), ready_timeout=3)
        with pytest.raises(Exception):  # noqa: B017 - whichever way connecting fails; the warning came first
            Attacher(MachineBackend(paths), "nouid", options, events.append, paths).run()
    finally:
        sleeper.kill()
        sleeper.wait(10)
    warned = [e for e in events if e.get("code") == "uid-check-unavailable"]
    assert len(warned) == 1 and warned[0]["message"] == UID_CHECK_UNAVAILABLE
    assert events.index(warned[0]) < next(i for i, e in enumerate(events) if e["event"] == "ssh-config")
