"""A rank killed by a signal leaves a promise someone else can keep (issue 29, item 2).

A rank writes its document's last state at exit; SIGKILL (the OOM killer) or torchrun's SIGTERM after a
peer failed skip that, and with ``--keep-alive`` the node stays up for the whole hold.  The review bound
the dead rank's freed control port as ``nobody``, received the job's control token, made ``stacks``
print its forged frames and answered ``listen`` with its own DAP port, which ``attach`` then exposed.

The scene (one kept-alive local job, 1 node x 2 ranks): rank 1 is SIGKILLed while the node's hook is
stopped (SIGSTOP: the reader's own check is seen alone), then the hook goes on; ``nobody`` binds the
freed control port and plays a control server that logs every line it receives and answers forged
stacks / listen, plus a DAP port.  Three layers are each played on their own:

* the documents of dead ranks become final - by the reader (pid and start time) and by the node;
* the control channel proves the rank (a nonce answered with an HMAC of the job secret) before the
  token or any request goes out - asked of the squatter directly, and through a relay to a live rank;
* for jobs on this machine, who listens on a rank's port is checked before use.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from remote_debug.container.rank.control import ControlServer
from remote_debug.contract import job_secret, spec
from remote_debug.contract.spec import ENV_JOB_SECRET, ENV_PG_TIMEOUT, RankEndpoint, RankState
from remote_debug.laptop.attach.attacher import Attacher, AttachOptions
from remote_debug.laptop.connection.job_connection import JobConnection
from remote_debug.laptop.connection.rank_control import RankControl
from remote_debug.laptop.machine.backend import MachineBackend, settle_gone_ranks
from remote_debug.laptop.machine.job_dir import NodeLayout
from remote_debug.oskit import osutil
from tests.conftest import cleanup_jobs
from tests.helpers.event_log import EventLog
from tests.helpers.hook_runs import TOKEN_ENV, free_port, kill_all, wait_for
from tests.helpers.jobs import LocalJob, launch_job
from tests.helpers.live_session import IDLE_UNTIL_DONE, throwaway_home
from tests.helpers.second_user import needs_second_user, nobody, python_as_nobody

pytestmark = pytest.mark.skipif(not Path("/usr/sbin/sshd").exists(), reason="needs OpenSSH's sshd")

JOB = "dead-promise"
FORGED = "forged_by_the_squatter"

SCRIPT = IDLE_UNTIL_DONE

# nobody's control server on the freed ports (argv: DAP port, then the control ports): every connection
# and line it receives is printed; a challenge gets a made-up proof, "stacks" forged frames, "listen"
# the DAP port it also holds.
SQUATTER = textwrap.dedent(
    """
    import json, socket, sys, threading, time
    dap_port, ports = int(sys.argv[1]), [int(p) for p in sys.argv[2:]]
    out = threading.Lock()
    def say(*words):
        with out:
            print(*words, flush=True)
    def serve(conn, port):
        data = b""
        conn.settimeout(30)
        try:
            while True:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
                while b"\\n" in data:
                    line, data = data.split(b"\\n", 1)
                    say("line", port, line.decode(errors="replace"))
                    try:
                        msg = json.loads(line)
                    except ValueError:
                        msg = {}
                    if "challenge" in msg:
                        reply = {"ok": True, "proof": "0" * 64}
                    elif msg.get("op") == "listen":
                        reply = {"ok": True, "port": dap_port}
                    else:
                        reply = {"ok": True, "pid": 1, "threads": [{"name": "MainThread", "frames": [
                            {"file": "/squatter/%s.py" % FORGED, "line": 666, "function": FORGED}]}]}
                    conn.sendall(json.dumps(reply).encode() + b"\\n")
        except OSError:
            return
        finally:
            conn.close()
    def accept(server, port):
        while True:
            conn, _ = server.accept()
            say("conn", port)
            threading.Thread(target=serve, args=(conn, port), daemon=True).start()
    FORGED = "forged_by_the_squatter"
    for port in [dap_port, *ports]:
        deadline = time.monotonic() + 20
        while True:
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
                break
            except OSError:
                s.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        s.listen(16)
        threading.Thread(target=accept, args=(s, port), daemon=True).start()
        say("bound", port)
    time.sleep(600)
    """
)


class Squatter:
    """``nobody`` holding ports, and what it received (its printed lines)."""

    def __init__(self, dap_port: int, control_ports: list[int]) -> None:
        self.dap_port = dap_port
        self.proc = subprocess.Popen(
            python_as_nobody(SQUATTER, str(dap_port), *map(str, control_ports)),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        wait_for(
            lambda: (
                sum(line.startswith("bound") for line in self.lines) == 1 + len(control_ports)
                or self.proc.poll() is not None
            ),
            30,
            "nobody to bind the freed ports",
        )
        assert self.proc.poll() is None, self.lines

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def received(self, since: int = 0) -> list[str]:
        """The lines it received; ``since``: only after that many of its printed lines (``len(lines)``)."""
        return [line for line in self.lines[since:] if line.startswith("line ")]

    def connections(self) -> int:
        return sum(line.startswith("conn ") for line in self.lines)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


@dataclass
class Scene:
    job: LocalJob
    manifest_dir: Path
    hook_pid: int
    before: dict[int, RankEndpoint]  # the rank documents as the live ranks wrote them
    killed: RankEndpoint  # rank 1's, before its SIGKILL
    reader_view: dict[int, RankEndpoint] = field(default_factory=dict)  # the backend's, hook stopped
    disk_while_stopped: dict[int, RankEndpoint] = field(default_factory=dict)
    disk_after: dict[int, RankEndpoint] = field(default_factory=dict)  # once the hook went on
    squatter: Squatter | None = None
    env: dict[str, str] = field(default_factory=dict)

    @property
    def token(self) -> str:
        return job_secret.control_token(self.connection().secret)

    def connection(self) -> JobConnection:
        conn = JobConnection(self.job.backend, JOB, self.job.paths)
        conn.write_ssh_entries(conn.manifests(), edit_user_config=False)
        return conn


def _docs(directory: Path) -> dict[int, RankEndpoint]:
    return {r.rank: r for r in spec.read_rank_documents(directory, skip_broken=True)}


def _published(directory: Path) -> dict[int, RankEndpoint] | None:
    docs = _docs(directory)
    return docs if len(docs) == 2 and all(r.control_port for r in docs.values()) else None


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scene]:
    if os.geteuid() != 0:
        pytest.skip("plays a second user: needs root")
    root = tmp_path_factory.mktemp("dead-rank")
    mp = pytest.MonkeyPatch()
    _home, project, done = throwaway_home(root, SCRIPT, mp)
    token = f"{TOKEN_ENV}={root}\0"
    job: LocalJob | None = None
    s: Scene | None = None
    try:
        job = launch_job(JOB, project, nproc_per_node=2, keep_alive=300)
        manifest_dir = NodeLayout(job.paths.job_dir(JOB), "algo-1").manifest_dir
        before = wait_for(lambda: _published(manifest_dir), 90, "both ranks to publish their control ports")
        node = spec.read_node_manifest(manifest_dir)
        assert node is not None and node.hook_pid
        s = Scene(job, manifest_dir, node.hook_pid, before, before[1], env=dict(os.environ))
        os.kill(s.hook_pid, signal.SIGSTOP)  # the node cannot look: only the reader's check is left
        try:
            os.kill(s.killed.pid, signal.SIGKILL)
            wait_for(lambda: not osutil.pid_alive(s.killed.pid), 10, "rank 1 to die")
            s.disk_while_stopped = _docs(manifest_dir)
            manifests = job.backend.manifests(JOB)
            s.reader_view = {r.rank: r for r in (manifests["algo-1"].ranks if manifests["algo-1"] else [])}
        finally:
            os.kill(s.hook_pid, signal.SIGCONT)
        with contextlib.suppress(AssertionError):  # before the fix it never comes: the tests say so
            wait_for(lambda: _docs(manifest_dir)[1].control_port == 0, 10, "the node to settle rank 1")
        s.disk_after = _docs(manifest_dir)
        s.squatter = Squatter(free_port(), [s.killed.control_port])
        yield s
    finally:
        done.write_text("")
        if s is not None and s.squatter is not None:
            s.squatter.stop()
        if job is not None:
            with contextlib.suppress(Exception):
                job.backend.stop(JOB, wait_seconds=20)
            cleanup_jobs(job.paths)
        kill_all(token)
        mp.undo()


# --- the documents -------------------------------------------------------------------------------


@needs_second_user
def test_the_reader_takes_a_killed_ranks_document_for_final(scene: Scene) -> None:
    stale = scene.disk_while_stopped[1]
    assert stale.control_port == scene.killed.control_port  # the node could not look: still the promise
    seen = scene.reader_view[1]
    assert (seen.state, seen.port, seen.control_port) == (RankState.FAILED, 0, 0), seen


def test_a_reused_pid_is_not_the_rank() -> None:
    """A document whose pid now belongs to another process (its start time differs) names a dead rank;
    the same pid with its own start time is the rank."""
    with subprocess.Popen(["sleep", "60"]) as other:
        try:
            ticks = osutil.process_start_ticks(other.pid)
            assert ticks is not None
            reused = RankEndpoint(
                rank=3,
                local_rank=1,
                world_size=4,
                port=0,
                pid=other.pid,
                state=RankState.IDLE,
                control_port=40123,
                start_ticks=ticks - 1,
            )
            running = replace(reused, rank=4, start_ticks=ticks)
            node = spec.NodeManifest(
                job_name="j",
                node="algo-1",
                hosts=["algo-1"],
                sshd_host="127.0.0.1",
                sshd_port=0,
                ssh_user="u",
                host_public_key="",
                code_dir="/c",
                ranks=[reused, running],
            )
            settled = settle_gone_ranks({"algo-1": node})["algo-1"]
            assert settled is not None
            assert [(r.rank, r.state, r.control_port) for r in settled.ranks] == [
                (3, RankState.FAILED, 0),
                (4, RankState.IDLE, 40123),
            ]
        finally:
            other.kill()


@needs_second_user
def test_the_node_makes_a_killed_ranks_document_final(scene: Scene) -> None:
    after = scene.disk_after[1]
    assert (after.state, after.port, after.control_port) == (RankState.FAILED, 0, 0), after
    assert after.pid == scene.killed.pid and after.start_ticks is not None


# --- the whole attack ----------------------------------------------------------------------------


@needs_second_user
def test_stacks_prints_no_forged_frames_and_the_token_stays_home(scene: Scene) -> None:
    assert scene.squatter is not None
    start = len(scene.squatter.lines)
    proc = subprocess.run(
        [sys.executable, "-m", "remote_debug", "stacks", JOB, "--flat"],  # each rank's own line
        capture_output=True,
        text=True,
        timeout=120,
        env=scene.env,
    )
    assert FORGED not in proc.stdout + proc.stderr, proc.stdout
    assert "rank 1 has failed" in proc.stdout, proc.stdout
    assert not any(scene.token in line or '"auth"' in line for line in scene.squatter.received(start))


# --- each layer on its own -------------------------------------------------------------------------


@needs_second_user
def test_the_rank_proof_keeps_the_token_from_a_squatter(scene: Scene) -> None:
    """The stale document as it was (no reader check, no port check): the squatter must prove the rank."""
    assert scene.squatter is not None
    start = len(scene.squatter.lines)
    conn = scene.connection()
    try:
        control = RankControl(conn.tunnel("algo-1"), conn.secret)  # no port guard: the proof alone
        with pytest.raises(OSError, match="did not prove it is rank 1"):
            control.stacks(scene.killed)
        with pytest.raises(OSError, match="did not prove it is rank 1"):
            control.listen(scene.killed)
    finally:
        conn.close()
    received = scene.squatter.received(start)
    assert received and all('"challenge"' in line for line in received), received  # it was asked, and no more
    assert not any(scene.token in line or '"op"' in line for line in received)


@needs_second_user
def test_a_foreign_listener_on_a_ranks_port_is_refused_before_use(scene: Scene) -> None:
    """A live process of the job (the hook) and the squatted port: the port's owner is not the job's uid."""
    assert scene.squatter is not None
    live = replace(scene.killed, pid=scene.hook_pid, start_ticks=osutil.process_start_ticks(scene.hook_pid))
    conn = scene.connection()
    connections = scene.squatter.connections()
    try:
        with pytest.raises(OSError, match=f"held by uid {nobody().pw_uid}"):
            conn.control("algo-1").stacks(live)
    finally:
        conn.close()
    time.sleep(0.5)
    assert scene.squatter.connections() == connections  # refused before anything reached it


def _judged(event: dict[str, Any]) -> bool:
    waits_for_a_run = event["event"] == "waiting" and str(event.get("what", "")).startswith("the ranks of run")
    return event["event"] in ("rank-unavailable", "rank-ready") or waits_for_a_run


@needs_second_user
def test_attach_does_not_point_at_the_squatter(scene: Scene, tmp_path: Path) -> None:
    """Last: ends the job.  Before the fix, attach asked the squatter to listen and exposed its DAP port."""
    assert scene.squatter is not None
    start = len(scene.squatter.lines)
    events = EventLog()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    options = AttachOptions(workspace=workspace, edit_user_ssh_config=False, ranks=(1,))
    errors: list[BaseException] = []

    def attach() -> None:
        try:
            Attacher(MachineBackend(scene.job.paths), JOB, options, events.append, scene.job.paths).run()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=attach, daemon=True)
    thread.start()
    try:
        # rank 1's death ended the command on this kept-alive node (torchrun stopped rank 0): the attach judges rank 1
        # unavailable, or waits for the ranks of the next run (`remote-debug run`); either way it exposes nothing
        wait_for(
            lambda: any(_judged(e) for e in events) or errors,
            60,
            "attach to judge rank 1",
        )
        time.sleep(1.0)
    finally:
        scene.job.backend.stop(JOB, wait_seconds=20)
        thread.join(30)
    assert not errors, errors
    ready = [e for e in events if e["event"] == "rank-ready"]
    assert not [e for e in ready if e.get("remote_port") == scene.squatter.dap_port], ready
    assert not any(scene.token in line for line in scene.squatter.received(start))
    launch = workspace / ".vscode" / "launch.json"
    text = launch.read_text() if launch.exists() else ""
    for e in ready:
        assert str(e.get("local_port")) not in text, text


# --- the proof, in-process -------------------------------------------------------------------------

SECRET = job_secret.derive_job_secret(b"this job's private key")


class _Endpoint:
    alias = "test-node"


class _Tunnel:
    """A NodeTunnel's one method the control client uses, straight to this host's loopback."""

    endpoint = _Endpoint()

    def open_channel(self, port: int) -> socket.socket:
        return socket.create_connection(("127.0.0.1", port), timeout=10)


@contextlib.contextmanager
def _rank() -> Iterator[ControlServer]:
    server = ControlServer(lambda: 4242, {ENV_PG_TIMEOUT: "0", ENV_JOB_SECRET: SECRET})
    try:
        yield server
    finally:
        server._server.close()


def _doc(port: int, pid: int) -> RankEndpoint:
    return RankEndpoint(rank=0, local_rank=0, world_size=1, port=0, pid=pid, state=RankState.IDLE, control_port=port)


def test_a_rank_proves_itself_and_answers() -> None:
    with _rank() as server:
        stacks = RankControl(_Tunnel(), SECRET).stacks(_doc(server.port, os.getpid()))  # type: ignore[arg-type]
    assert any(t.name == "MainThread" for t in stacks)


def test_a_proof_relayed_from_another_rank_does_not_fit() -> None:
    """A squatter on a dead rank's port passes the challenge on to a live rank of the job: the answer is
    that rank's (its port), not the one the document names, and the token stays home."""
    received: list[bytes] = []
    with _rank() as live, socket.create_server(("127.0.0.1", 0)) as relay:

        def serve() -> None:
            conn, _ = relay.accept()
            with conn, socket.create_connection(("127.0.0.1", live.port), timeout=10) as upstream:
                line = conn.recv(4096)
                received.append(line)
                upstream.sendall(line)
                conn.sendall(upstream.recv(4096))
                received.append(conn.recv(4096))  # what the client sends after the proof

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        with pytest.raises(OSError, match="did not prove"):
            RankControl(_Tunnel(), SECRET).stacks(_doc(relay.getsockname()[1], os.getpid()))  # type: ignore[arg-type]
        thread.join(10)
    assert b"challenge" in received[0]
    assert all(job_secret.control_token(SECRET).encode() not in r for r in received)


def test_a_request_without_a_challenge_is_still_served() -> None:
    """Older clients (and the tests' helpers) send the token at once: the rank still checks it."""
    with _rank() as server, socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(json.dumps({"op": "stacks", "auth": job_secret.control_token(SECRET)}).encode() + b"\n")
        reply = json.loads(sock.makefile().readline())
    assert reply["ok"] is True
