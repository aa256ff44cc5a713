"""The Session Manager data channel, driven by AWS's real session-manager-plugin (and the codec's unit tests).

The plugin runs exactly as the AWS CLI runs it: the StartSession response in the environment variable
``AWS_SSM_START_SESSION_RESPONSE`` and ``<plugin> AWS_SSM_START_SESSION_RESPONSE <region> StartSession
<profile> <parameters JSON> <ssm endpoint>``. The endpoint is a small fake SSM API (ResumeSession and
TerminateSession, the only calls the plugin makes itself) that records what the plugin asked.
"""

from __future__ import annotations

import contextlib
import getpass
import hashlib
import json
import os
import shlex
import shutil
import socket
import statistics
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from remote_debug.emulator import ssm_messages as m
from remote_debug.emulator.ssm_channel import DataChannelServer, Session
from tests.helpers.hook_runs import free_port, kill_all, listen_addresses, make_key, wait_for
from tests.helpers.sshd import private_sshd
from tests.helpers.ssm_plugin import EchoServer

PLUGIN = Path(
    os.environ.get("REMOTE_DEBUG_SSM_PLUGIN") or "/work/shared/tools/session-manager-plugin/session-manager-plugin"
)
needs_plugin = pytest.mark.skipif(
    not os.access(PLUGIN, os.X_OK), reason=f"AWS session-manager-plugin not at {PLUGIN} (set REMOTE_DEBUG_SSM_PLUGIN)"
)
SSH = shutil.which("ssh")
needs_ssh = pytest.mark.skipif(SSH is None or not Path("/usr/sbin/sshd").exists(), reason="needs OpenSSH")
SSH_DOC, PF_DOC = "AWS-StartSSHSession", "AWS-StartPortForwardingSession"
REGION = "eu-west-3"


# --- the codec ---------------------------------------------------------------------------------------


def test_client_message_layout_and_round_trip() -> None:
    mid = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
    message = m.ClientMessage(
        m.INPUT_STREAM_DATA,
        -7 + 2**40,
        m.PayloadType.OUTPUT,
        b"payload",
        flags=1,
        created_date=1_700_000_000_123,
        message_id=mid,
    )
    raw = m.encode(message)
    assert len(raw) == 120 + 7
    assert raw[:4] == (116).to_bytes(4, "big")
    assert raw[4:36] == b"input_stream_data".ljust(32, b" ")
    assert raw[64:80] == bytes.fromhex("8899aabbccddeeff0011223344556677")  # low half first, as the Go code
    assert raw[80:112] == hashlib.sha256(b"payload").digest()
    assert raw[112:120] == (1).to_bytes(4, "big") + (7).to_bytes(4, "big")
    assert m.decode(raw) == message


def test_decode_refuses_what_does_not_add_up() -> None:
    good = m.encode(m.ClientMessage(m.OUTPUT_STREAM_DATA, 3, m.PayloadType.OUTPUT, b"abc"))
    tampered = good[:-1] + b"x"
    with pytest.raises(m.ClientMessageError, match="digest"):
        m.decode(tampered)
    for cut in (0, 10, 119, len(good) - 1):
        with pytest.raises(m.ClientMessageError):
            m.decode(good[:cut])
    with pytest.raises(m.ClientMessageError, match="length"):
        m.decode(good + b"extra")
    with pytest.raises(m.ClientMessageError, match="header length"):
        m.decode((117).to_bytes(4, "big") + good[4:])
    big = m.encode(m.ClientMessage(m.OUTPUT_STREAM_DATA, 0, 1, b"x" * 100))
    with pytest.raises(m.ClientMessageError, match="limit"):
        m.decode(big, max_payload=99)
    huge_claim = good[:116] + (2**32 - 1).to_bytes(4, "big") + good[120:]
    with pytest.raises(m.ClientMessageError):
        m.decode(huge_claim)
    no_date = good[:40] + bytes(8) + good[48:]
    with pytest.raises(m.ClientMessageError, match="CreatedDate"):
        m.decode(no_date)


def test_control_payloads() -> None:
    got = m.decode(m.encode(m.ClientMessage(m.INPUT_STREAM_DATA, 5, m.PayloadType.OUTPUT, b"x")))
    ack = m.acknowledge(got)
    assert (ack.message_type, ack.sequence_number, ack.flags) == (m.ACKNOWLEDGE, 0, 3)
    assert m.parse_acknowledge(ack.payload) == 5
    assert json.loads(ack.payload)["AcknowledgedMessageId"] == str(got.message_id)
    closed = json.loads(m.channel_closed("s-1", "t", "bye").payload)
    assert (closed["SessionId"], closed["Output"], closed["MessageType"]) == ("s-1", "bye", "channel_closed")
    request = json.loads(m.handshake_request("3.3.1611.0", "Port", {"portNumber": "22"}))
    assert request["RequestedClientActions"][0]["ActionParameters"] == {
        "SessionType": "Port",
        "Properties": {"portNumber": "22"},
    }
    response = m.parse_handshake_response(
        json.dumps(
            {
                "ClientVersion": "1.2.650.0",
                "Errors": None,
                "ProcessedClientActions": [{"ActionType": "SessionType", "ActionStatus": 2, "Error": "nope"}],
            }
        ).encode()
    )
    assert response.client_version == "1.2.650.0" and "nope" in response.errors[0]
    assert m.parse_flag(m.flag_payload(m.PayloadTypeFlag.TERMINATE_SESSION)) == 2
    with pytest.raises(m.ClientMessageError):
        m.parse_open_data_channel('{"ClientId": "c"}')
    with pytest.raises(m.ClientMessageError):
        m.parse_acknowledge(b"[]")


def test_smux_parser_reassembles_frames() -> None:
    stream = m.encode_smux(m.SMUX_SYN, 3) + m.encode_smux(m.SMUX_PSH, 3, b"hello") + m.encode_smux(m.SMUX_FIN, 3)
    parser = m.SmuxParser()
    frames = [f for i in range(len(stream)) for f in parser.feed(stream[i : i + 1])]
    assert frames == [m.SmuxFrame(0, 3), m.SmuxFrame(2, 3, b"hello"), m.SmuxFrame(1, 3)]
    with pytest.raises(m.ClientMessageError):
        list(m.SmuxParser().feed(bytes([2, 0, 0, 0, 1, 0, 0, 0])))


# --- fixtures ----------------------------------------------------------------------------------------


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5)


class RecordingConnector:
    def __init__(self) -> None:
        self.ports: list[int] = []

    def __call__(self, port: int) -> socket.socket:
        self.ports.append(port)
        return connect(port)


@pytest.fixture
def server() -> Iterator[DataChannelServer]:
    s = DataChannelServer()
    s.start()
    try:
        yield s
    finally:
        s.close()


def test_open_session_validates_like_the_api(server: DataChannelServer) -> None:
    s = server.open_session(target="mi-1", document=SSH_DOC, parameters={}, connect=connect, owner="alice")
    assert s.port == 22 and s.session_id.startswith("alice-") and len(s.session_id) == len("alice-") + 17
    int(s.session_id[-17:], 16)
    assert s.stream_url == f"ws://127.0.0.1:{server.port}/v1/data-channel/{s.session_id}?role=publish_subscribe"
    bad: list[tuple[str, dict[str, list[str]], str]] = [
        ("AWS-StartInteractiveCommand", {}, "alice"),
        (PF_DOC, {}, "alice"),  # portNumber is required
        (PF_DOC, {"portNumber": ["0"]}, "alice"),
        (PF_DOC, {"portNumber": ["22"], "host": ["x"]}, "alice"),
        (SSH_DOC, {"portNumber": ["22", "23"]}, "alice"),
        (SSH_DOC, {"portNumber": ["65536"]}, "alice"),
        (SSH_DOC, {}, "bad owner/"),
    ]
    for document, parameters, owner in bad:
        with pytest.raises(ValueError):
            server.open_session(target="mi-1", document=document, parameters=parameters, connect=connect, owner=owner)
    resumed = server.resume(s.session_id)
    assert resumed.token_value != s.token_value and resumed.session_id == s.session_id
    assert server.sessions() == [resumed]
    assert server.terminate(s.session_id) and not server.terminate(s.session_id)
    with pytest.raises(KeyError):
        server.resume(s.session_id)


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    e = EchoServer()
    try:
        yield e
    finally:
        e.close()


class FakeSsm:
    """The two SSM calls the plugin makes itself, wired to the data channel server; records them."""

    def __init__(self, server: DataChannelServer) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
                operation = self.headers.get("X-Amz-Target", "").rsplit(".", 1)[-1]
                outer.calls.append((operation, body))
                status, answer = 200, {"SessionId": body.get("SessionId")}
                try:
                    if operation == "ResumeSession":
                        s = server.resume(body["SessionId"])
                        answer.update(TokenValue=s.token_value, StreamUrl=s.stream_url)
                    elif operation == "TerminateSession":
                        server.terminate(body["SessionId"])
                    else:
                        raise KeyError(operation)
                except KeyError:
                    status, answer = 400, {"__type": "DoesNotExistException", "message": "no such session"}
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/x-amz-json-1.1")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(10)


@pytest.fixture
def fake_ssm(server: DataChannelServer) -> Iterator[FakeSsm]:
    f = FakeSsm(server)
    try:
        yield f
    finally:
        f.close()


@dataclass
class Plugin:
    proc: subprocess.Popen[bytes]
    session_id: str
    out: bytearray = field(default_factory=bytearray)
    reader: threading.Thread | None = None

    def _read(self) -> None:
        assert self.proc.stdout is not None
        while chunk := os.read(self.proc.stdout.fileno(), 65536):
            self.out += chunk

    def wait_for(self, needle: bytes, timeout: float = 20) -> None:
        try:
            wait_for(lambda: needle in self.out or None, timeout, f"{needle!r} from the plugin")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; its stdout so far: {bytes(self.out[:300])!r}") from None

    @property
    def stream(self) -> bytes:
        """stdout after the plugin's own "Starting session" line."""
        banner = f"\nStarting session with SessionId: {self.session_id}\n".encode()
        assert self.out.startswith(banner), bytes(self.out[:200])
        return bytes(self.out[len(banner) :])

    def exited(self, timeout: float) -> int:
        return self.proc.wait(timeout)


@dataclass
class Runner:
    """Starts the plugin (or ssh with the plugin as its ProxyCommand); the fixture stops all of them."""

    tmp: Path
    endpoint: str
    token: str = field(default_factory=lambda: f"rd-ssm-test-{uuid.uuid4()}")
    started: list[Plugin] = field(default_factory=list)

    def env(self, session: Session, token_value: str | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        response = {
            "SessionId": session.session_id,
            "TokenValue": token_value or session.token_value,
            "StreamUrl": session.stream_url,
        }
        env.update(
            AWS_SSM_START_SESSION_RESPONSE=json.dumps(response),
            AWS_ACCESS_KEY_ID="testing",
            AWS_SECRET_ACCESS_KEY="testing",
            AWS_EC2_METADATA_DISABLED="true",
            AWS_CONFIG_FILE=str(self.tmp / "no-aws-config"),
            AWS_SHARED_CREDENTIALS_FILE=str(self.tmp / "no-aws-credentials"),
            RD_TEST_TOKEN=self.token,
        )
        return env

    def argv(
        self, session: Session, document: str, parameters: dict[str, list[str]], endpoint: str | None = None
    ) -> list[str]:
        request = {"Target": session.target, "DocumentName": document, "Parameters": parameters}
        return [
            str(PLUGIN),
            "AWS_SSM_START_SESSION_RESPONSE",
            REGION,
            "StartSession",
            "",
            json.dumps(request),
            endpoint or self.endpoint,
        ]

    def plugin(
        self,
        session: Session,
        document: str,
        parameters: dict[str, list[str]],
        *,
        token_value: str | None = None,
        endpoint: str | None = None,
    ) -> Plugin:
        proc = subprocess.Popen(
            self.argv(session, document, parameters, endpoint),
            env=self.env(session, token_value),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        plugin = Plugin(proc, session.session_id)
        plugin.reader = threading.Thread(target=plugin._read, daemon=True)
        plugin.reader.start()
        self.started.append(plugin)
        return plugin

    def stop(self) -> None:
        for plugin in self.started:
            if plugin.proc.poll() is None:
                plugin.proc.kill()
            plugin.proc.wait(10)
            if plugin.reader is not None:
                plugin.reader.join(10)
            for pipe in (plugin.proc.stdin, plugin.proc.stdout):
                if pipe is not None:
                    with contextlib.suppress(OSError):
                        pipe.close()
        kill_all(self.token)  # ssh and the plugins it ran as ProxyCommand


@pytest.fixture
def runner(tmp_path: Path, fake_ssm: FakeSsm) -> Iterator[Runner]:
    if not os.access(PLUGIN, os.X_OK):
        pytest.skip(f"AWS session-manager-plugin not at {PLUGIN} (set REMOTE_DEBUG_SSM_PLUGIN)")
    r = Runner(tmp_path, fake_ssm.url)
    try:
        yield r
    finally:
        r.stop()


def feed(plugin: Plugin, data: bytes) -> threading.Thread:
    def write() -> None:
        assert plugin.proc.stdin is not None
        with contextlib.suppress(OSError):
            plugin.proc.stdin.write(data)
            plugin.proc.stdin.flush()

    t = threading.Thread(target=write, daemon=True)
    t.start()
    return t


def echo_round(local_port: int, size: int) -> bool:
    data = os.urandom(size)
    with socket.create_connection(("127.0.0.1", local_port), timeout=20) as c:
        writer = threading.Thread(target=c.sendall, args=(data,), daemon=True)
        writer.start()
        got = bytearray()
        while len(got) < size and (chunk := c.recv(65536)):
            got += chunk
        writer.join(20)
    return bytes(got) == data


# --- the real plugin ---------------------------------------------------------------------------------


@needs_plugin
def test_ssh_session_relays_bytes_both_ways(
    server: DataChannelServer, echo: EchoServer, runner: Runner, fake_ssm: FakeSsm
) -> None:
    recorder = RecordingConnector()
    ports = recorder.ports
    session = server.open_session(
        target="mi-1", document=SSH_DOC, parameters={"portNumber": [str(echo.port)]}, connect=recorder, owner="alice"
    )
    plugin = runner.plugin(session, SSH_DOC, {"portNumber": [str(echo.port)]})
    data = os.urandom(2 * 1024 * 1024)  # the plugin reads stdin 1 KiB at a time with a 1 ms pause: ~2.5 s
    feed(plugin, data)
    banner = len(f"\nStarting session with SessionId: {session.session_id}\n")
    wait_for(lambda: len(plugin.out) >= banner + len(data) or None, 60, "the echo of 2 MiB")
    assert hashlib.sha256(plugin.stream).hexdigest() == hashlib.sha256(data).hexdigest()
    assert ports == [echo.port] and echo.accepted == 1
    assert plugin.proc.stdin is not None
    plugin.proc.stdin.close()  # what ssh does at the end: the plugin exits on its own...
    assert plugin.exited(10) == 0
    assert [s.session_id for s in server.sessions()] == [session.session_id]  # ...and the session stays resumable
    assert fake_ssm.calls == []  # no AWS call on the way


@needs_plugin
@needs_ssh
def test_real_openssh_through_the_plugin(server: DataChannelServer, runner: Runner, tmp_path: Path) -> None:
    server.disconnect_timeout = 1.0
    key = tmp_path / "id"
    with private_sshd(tmp_path, make_key(key)) as sshd:
        (tmp_path / "known_hosts").write_text(f"node-1 {sshd.host_key_line}\n")
        for command in (["echo", "hello"], ["exit", "3"]):
            result, _ = ssh_via_plugin(server, runner, tmp_path, sshd.port, command)
            assert (result.returncode, result.stdout) == ((0, "hello\n") if command[0] == "echo" else (3, "")), (
                result.stderr
            )
        # ssh exits without a word to the service (the plugin just loses its stdin): the sessions end
        # when their data channels have stayed away for the disconnect timeout, closing sshd's end.
        wait_for(lambda: not server.sessions() or None, 10, "the sessions to end after the disconnect timeout")


def ssh_via_plugin(
    server: DataChannelServer, runner: Runner, tmp_path: Path, port: int, command: list[str]
) -> tuple[subprocess.CompletedProcess[str], float]:
    assert SSH is not None
    parameters = {"portNumber": [str(port)]}
    session = server.open_session(
        target="node-1", document=SSH_DOC, parameters=parameters, connect=connect, owner="alice"
    )
    proxy = " ".join(shlex.quote(a) for a in runner.argv(session, SSH_DOC, parameters))
    argv = [
        SSH,
        "-F",
        "/dev/null",
        "-i",
        str(tmp_path / "id"),
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        "BatchMode=yes",
        "-o",
        f"UserKnownHostsFile={tmp_path / 'known_hosts'}",
        "-o",
        "HostKeyAlias=node-1",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        f"ProxyCommand={proxy}",
        f"{getpass.getuser()}@node-1",
        *command,
    ]
    started = time.monotonic()
    result = subprocess.run(
        argv, env=runner.env(session), capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )
    return result, time.monotonic() - started


@needs_plugin
@needs_ssh
def test_ssh_login_time_through_plugin_and_emulator(server: DataChannelServer, runner: Runner, tmp_path: Path) -> None:
    """The issue's budget: ssh login through the ProxyCommand + real plugin + emulator <= 1.5 s."""
    key = tmp_path / "id"
    with private_sshd(tmp_path, make_key(key)) as sshd:
        (tmp_path / "known_hosts").write_text(f"node-1 {sshd.host_key_line}\n")
        times = []
        for _ in range(5):
            result, elapsed = ssh_via_plugin(server, runner, tmp_path, sshd.port, ["true"])
            assert result.returncode == 0, result.stderr
            times.append(elapsed)
    print(
        f"ssh ... true through session-manager-plugin + emulator: median {statistics.median(times):.3f} s "
        f"of {[round(t, 3) for t in times]}"
    )
    assert statistics.median(times) <= 1.5


@needs_plugin
def test_port_forwarding_with_a_local_port(server: DataChannelServer, echo: EchoServer, runner: Runner) -> None:
    local = free_port()
    parameters = {"portNumber": [str(echo.port)], "localPortNumber": [str(local)]}
    session = server.open_session(target="mi-1", document=PF_DOC, parameters=parameters, connect=connect, owner="bob")
    plugin = runner.plugin(session, PF_DOC, parameters)
    plugin.wait_for(b"Waiting for connections")
    assert f"Port {local} opened".encode() in plugin.out
    assert echo_round(local, 256 * 1024)  # one connection, then another: both work
    assert echo_round(local, 256 * 1024)
    pair = [threading.Thread(target=lambda: results.append(echo_round(local, 512 * 1024))) for _ in range(2)]
    results: list[bool] = []
    for t in pair:
        t.start()
    for t in pair:
        t.join(60)
    assert results == [True, True]  # two at once (smux streams)
    with socket.create_connection(("127.0.0.1", local), timeout=10) as c:
        c.sendall(b"QUIT")  # the target closes: the local client sees the end
        assert c.recv(10) == b""
    wait_for(lambda: echo.accepted == 5 or None, 10, "five connections at the target")
    assert server.terminate(session.session_id)
    assert plugin.exited(10) == 0
    assert b"Exiting session with sessionId" in plugin.out


@needs_plugin
def test_wrong_token_gets_no_stream(
    server: DataChannelServer, echo: EchoServer, runner: Runner, fake_ssm: FakeSsm
) -> None:
    recorder = RecordingConnector()
    ports = recorder.ports
    session = server.open_session(
        target="mi-1", document=SSH_DOC, parameters={"portNumber": [str(echo.port)]}, connect=recorder, owner="alice"
    )
    # With no SSM endpoint to resume through, a refused token leaves the plugin without a stream.
    nowhere = f"http://127.0.0.1:{free_port()}"
    plugin = runner.plugin(session, SSH_DOC, {}, token_value=session.token_value[::-1], endpoint=nowhere)
    feed(plugin, b"ping")
    time.sleep(3)
    assert plugin.stream == b"" and ports == [] and echo.accepted == 0
    plugin.proc.kill()  # upstream's plugin keeps waiting for a session type; it is stopped here
    # The refusal did not use up the real token: the right one still opens the channel.
    good = runner.plugin(session, SSH_DOC, {})
    feed(good, b"ping")
    good.wait_for(b"ping")
    assert ports == [echo.port]
    # A used token is refused too; what lets a client back in is ResumeSession, which the plugin
    # calls by itself (an IAM-signed call in AWS) to get a fresh token.
    again = runner.plugin(session, SSH_DOC, {}, endpoint=nowhere)
    time.sleep(2)
    assert again.stream == b""
    third = runner.plugin(
        server.open_session(
            target="mi-1", document=SSH_DOC, parameters={"portNumber": [str(echo.port)]}, connect=connect, owner="carol"
        ),
        SSH_DOC,
        {},
        token_value="not-the-token",
    )
    feed(third, b"pong")
    third.wait_for(b"pong")
    assert [c[0] for c in fake_ssm.calls] == ["ResumeSession"]


@needs_plugin
def test_terminate_makes_the_plugin_exit(server: DataChannelServer, echo: EchoServer, runner: Runner) -> None:
    session = server.open_session(
        target="mi-1", document=SSH_DOC, parameters={"portNumber": [str(echo.port)]}, connect=connect, owner="alice"
    )
    plugin = runner.plugin(session, SSH_DOC, {})
    feed(plugin, b"ping")
    plugin.wait_for(b"ping")
    assert server.terminate(session.session_id)
    assert plugin.exited(10) == 0
    assert plugin.stream.endswith(f"\n\nExiting session with sessionId: {session.session_id}.\n\n".encode())
    assert server.sessions() == []
    wait_for(lambda: all(not t.is_alive() for t in echo.threads) or None, 10, "the target's connection to close")


@needs_plugin
def test_refused_target_port_ends_the_plugin(server: DataChannelServer, runner: Runner) -> None:
    dead = free_port()
    session = server.open_session(
        target="mi-1", document=SSH_DOC, parameters={"portNumber": [str(dead)]}, connect=connect, owner="alice"
    )
    plugin = runner.plugin(session, SSH_DOC, {})
    # Upstream's plugin exits 0 on channel_closed whatever the reason; the reason is on stdout.
    assert plugin.exited(10) == 0
    reason = f"Unable to connect to specified port {dead}: Connection refused"
    assert f"SessionId: {session.session_id} : {reason}".encode() in plugin.stream
    assert server.sessions() == []
    # Port forwarding: the local connection is closed at once and the session stays up for the next one.
    local = free_port()
    parameters = {"portNumber": [str(dead)], "localPortNumber": [str(local)]}
    forwarding = server.open_session(
        target="mi-1", document=PF_DOC, parameters=parameters, connect=connect, owner="alice"
    )
    pf = runner.plugin(forwarding, PF_DOC, parameters)
    pf.wait_for(b"Waiting for connections")
    for _ in range(2):
        with socket.create_connection(("127.0.0.1", local), timeout=10) as c:
            c.sendall(b"hello")
            assert c.recv(10) == b""
    pf.wait_for(b"Connection to destination port failed")
    assert pf.proc.poll() is None and [s.session_id for s in server.sessions()] == [forwarding.session_id]


@needs_plugin
@needs_ssh
def test_refused_port_fails_ssh_quickly(server: DataChannelServer, runner: Runner, tmp_path: Path) -> None:
    make_key(tmp_path / "id")
    (tmp_path / "known_hosts").write_text("")
    result, elapsed = ssh_via_plugin(server, runner, tmp_path, free_port(), ["true"])
    # ssh skips the plugin's text before the SSH banner, so the reason is not in its message.
    assert result.returncode == 255 and elapsed < 10, result.stderr
    assert "kex_exchange_identification: Connection closed by remote host" in result.stderr


class DroppingProxy:
    """A TCP relay to the data channel server whose connections the test can cut, like a network drop."""

    def __init__(self, upstream: int) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.upstream = upstream
        self.socks: list[socket.socket] = []
        self.threads: list[threading.Thread] = []
        self._accept = threading.Thread(target=self._serve, daemon=True)
        self._accept.start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.upstream))
            self.socks += [client, server]
            for a, b in ((client, server), (server, client)):
                t = threading.Thread(target=self._pump, args=(a, b), daemon=True)
                self.threads.append(t)
                t.start()

    @staticmethod
    def _pump(a: socket.socket, b: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := a.recv(65536):
                b.sendall(data)

    def drop(self) -> None:
        for s in list(self.socks):  # not the plugin's reconnection, which may come in meanwhile
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() (close() alone does not)
        self.listener.close()
        self._accept.join(10)
        self.drop()
        for t in self.threads:
            t.join(10)


@needs_plugin
def test_dropped_connection_resumes_with_the_stream_intact(
    server: DataChannelServer, echo: EchoServer, runner: Runner, fake_ssm: FakeSsm
) -> None:
    session = server.open_session(
        target="mi-1", document=SSH_DOC, parameters={"portNumber": [str(echo.port)]}, connect=connect, owner="alice"
    )
    proxy = DroppingProxy(server.port)
    try:
        via_proxy = Session(
            **{**session.__dict__, "stream_url": session.stream_url.replace(f":{server.port}/", f":{proxy.port}/")}
        )
        plugin = runner.plugin(via_proxy, SSH_DOC, {})
        first, second = os.urandom(200_000), os.urandom(200_000)
        feed(plugin, first).join(30)
        wait_for(lambda: plugin.stream == first or None, 30, "the first half's echo")
        channel = server._channels[session.session_id]  # (private: no API says "the plugin is back")
        dropped = channel.ws
        proxy.drop()
        wait_for(lambda: fake_ssm.calls or None, 30, "the plugin to call ResumeSession")
        # Only once it is back: upstream's plugin exits if stdin has data while it reconnects.
        wait_for(lambda: channel.ws not in (None, dropped) or None, 30, "the plugin's new connection")
        feed(plugin, second).join(30)
        wait_for(
            lambda: len(plugin.stream) >= len(first + second) or None,
            60,
            f"the second half's echo (SSM calls: {fake_ssm.calls})",
        )
        assert plugin.stream == first + second
        assert fake_ssm.calls == [("ResumeSession", {"SessionId": session.session_id})]
        assert echo.accepted == 1  # the same TCP connection to the target all along
    finally:
        proxy.close()


@needs_plugin
def test_close_leaves_nothing_behind(echo: EchoServer, runner: Runner, tmp_path: Path) -> None:
    def sockets() -> set[str]:
        links = set()
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                links.add(os.readlink(f"/proc/self/fd/{fd}"))
        return {link for link in links if link.startswith("socket:")}

    threads_before, sockets_before = set(threading.enumerate()), sockets()
    server = DataChannelServer()
    server.start()
    fake = FakeSsm(server)
    runner.endpoint = fake.url
    try:
        ssh = server.open_session(
            target="mi-1", document=SSH_DOC, parameters={"portNumber": [str(echo.port)]}, connect=connect, owner="alice"
        )
        local = free_port()
        parameters = {"portNumber": [str(echo.port)], "localPortNumber": [str(local)]}
        pf = server.open_session(target="mi-1", document=PF_DOC, parameters=parameters, connect=connect, owner="bob")
        server.open_session(target="mi-2", document=SSH_DOC, parameters={}, connect=connect, owner="carol")
        stdio = runner.plugin(ssh, SSH_DOC, {})
        feed(stdio, b"ping")
        stdio.wait_for(b"ping")
        forwarder = runner.plugin(pf, PF_DOC, parameters)
        forwarder.wait_for(b"Waiting for connections")
        held = socket.create_connection(("127.0.0.1", local), timeout=10)
        held.sendall(b"hold")
        assert held.recv(4) == b"hold"
        server.close()
        server.close()  # idempotent
        assert stdio.exited(10) == 0 and forwarder.exited(10) == 0
        assert b"Session Manager emulator stopped." in stdio.out
        assert held.recv(10) == b""
        held.close()
        assert listen_addresses(server.port) == []
        with pytest.raises(RuntimeError):
            server.open_session(target="mi-1", document=SSH_DOC, parameters={}, connect=connect, owner="alice")
    finally:
        server.close()
        fake.close()
    wait_for(lambda: all(not t.is_alive() for t in echo.threads) or None, 10, "the target's connections to close")
    assert set(threading.enumerate()) <= threads_before | set(echo.threads) | {echo._accept} | {
        p.reader for p in runner.started
    }
    runner.stop()
    assert {t for t in set(threading.enumerate()) - threads_before if t.is_alive()} <= {echo._accept}
    assert sockets() <= sockets_before | {f"socket:[{os.stat(f'/proc/self/fd/{echo.listener.fileno()}').st_ino}]"}
