"""A rank's control channel against local attackers (issue 13, items 2 and 7).

The server under test is the rank's own (``container/rank/control.py``), run in this process with a
recording ``listen``; the clients are real sockets - the laptop's side of the protocol
(``rank_control.exchange``), ``nobody`` via ``setpriv``, and trickling connections.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import textwrap
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from remote_debug.container import threads
from remote_debug.container.rank import control
from remote_debug.container.rank.control import ControlServer
from remote_debug.contract import job_secret
from remote_debug.contract.spec import ENV_JOB_SECRET, ENV_PG_TIMEOUT
from remote_debug.laptop.connection.rank_control import exchange
from tests.helpers.hook_runs import wait_for
from tests.helpers.second_user import ATTACKER_PYTHON, as_nobody, needs_second_user

SECRET = job_secret.derive_job_secret(b"this job's private key")
OTHER_JOB = job_secret.derive_job_secret(b"another job's private key")

# Opens N connections to the port and trickles one byte into each every 0.5 s, never a newline;
# prints "open N" once all are open, then goes on until killed.
TRICKLE = textwrap.dedent(
    """
    import socket, sys, time
    port, count = int(sys.argv[1]), int(sys.argv[2])
    conns = []
    for _ in range(count):
        try:
            conns.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        except OSError:
            pass
    print("open", len(conns), flush=True)
    while True:
        for c in list(conns):
            try:
                c.send(b"{")
            except OSError:
                conns.remove(c)
                try:
                    conns.append(socket.create_connection(("127.0.0.1", port), timeout=5))  # come back
                except OSError:
                    pass
        time.sleep(0.5)
    """
)


class Rank:
    """A control server as a rank runs it, with ``listen`` recorded."""

    def __init__(self, secret: str | None = SECRET) -> None:
        self.listens = 0
        env = {ENV_PG_TIMEOUT: "0", **({ENV_JOB_SECRET: secret} if secret else {})}
        self.server = ControlServer(self._listen, env)
        self.port = self.server.port

    def _listen(self) -> int:
        self.listens += 1
        return 4242

    def ask(self, payload: dict[str, Any], timeout: float = 10) -> dict[str, Any]:
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as sock:
            reply: dict[str, Any] = json.loads(exchange(sock, payload) or b"{}")
        return reply

    def close(self) -> None:
        self.server._server.close()


@pytest.fixture
def rank() -> Iterator[Rank]:
    r = Rank()
    try:
        yield r
    finally:
        r.close()


def _token(secret: str) -> str:
    return job_secret.control_token(secret)


def test_only_the_jobs_token_makes_a_rank_listen(rank: Rank) -> None:
    attempts: list[dict[str, Any]] = [
        {"op": "listen"},  # no proof at all
        {"op": "listen", "auth": ""},
        {"op": "listen", "auth": "0" * 64},
        {"op": "listen", "auth": _token(OTHER_JOB)},  # another job's token (its laptop's key)
        {"op": "listen", "auth": SECRET},  # the secret itself is not the token
        {"op": "listen", "auth": {"token": _token(SECRET)}},
        {"op": "stacks"},
        {"op": "pause-safe", "auth": None},
    ]
    replies = [rank.ask(a) for a in attempts]
    refusal = {"ok": False, "error": "not authorised: the request lacks the job's token"}
    assert all(r == refusal for r in replies), replies
    assert rank.listens == 0
    assert rank.server.refused == len(attempts)
    # the laptop's request (the token derived from the job's key) is served
    assert rank.ask({"op": "listen", "auth": _token(SECRET)})["port"] == 4242 and rank.listens == 1
    stacks = rank.ask({"op": "stacks", "auth": _token(SECRET)})
    assert stacks["ok"] and any(t["frames"] for t in stacks["threads"])
    print(f"\n[security] control channel: {len(attempts)} requests without the job's token -> {len(attempts)} refused")


def test_a_rank_without_a_secret_obeys_nobody() -> None:
    r = Rank(secret=None)
    try:
        assert not r.ask({"op": "listen", "auth": _token(SECRET)})["ok"]
        assert r.listens == 0
    finally:
        r.close()


def _timed_stacks(rank: Rank) -> float:
    started = time.monotonic()
    reply = rank.ask({"op": "stacks", "auth": _token(SECRET)}, timeout=5)
    assert reply["ok"], reply
    return time.monotonic() - started


def _server_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith("remote-debug-control"))


def _trickle(rank: Rank, count: int, argv_prefix: list[str], python: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [*argv_prefix, python, "-I", "-S", "-c", TRICKLE, str(rank.port), str(count)],
        stdout=subprocess.PIPE,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        cwd="/",
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().split()
    assert line[:1] == ["open"], line
    return proc


def _slowloris(rank: Rank, argv_prefix: list[str], python: str) -> tuple[float, int]:
    """500 trickling connections for 3 s; the slowest of five ``stacks`` meanwhile, and the most
    threads the server ran."""
    before = _server_threads()
    proc = _trickle(rank, 500, argv_prefix, python)
    try:
        worst, most = 0.0, 0
        for _ in range(5):
            time.sleep(0.6)
            worst = max(worst, _timed_stacks(rank))
            most = max(most, _server_threads() - before)
        return worst, most
    finally:
        proc.kill()
        proc.wait(10)


@needs_second_user
def test_another_users_slowloris_is_shut_out_at_once(rank: Rank) -> None:
    worst, threads = _slowloris(rank, as_nobody(), ATTACKER_PYTHON)
    assert worst < 1.0
    assert threads <= 1 + control.MAX_WORKERS
    assert rank.server.refused >= 500  # every connection, and every come-back, closed at accept
    print(
        f"\n[security] 500 trickling connections as nobody: stacks answered in <= {worst * 1000:.0f} ms, "
        f"{rank.server.refused} connections refused, {threads} server threads"
    )


def test_a_slowloris_of_our_own_uid_holds_no_thread_and_no_answer_back(rank: Rank) -> None:
    """Where the uid cannot tell (a process of the job itself, a platform without /proc/net/tcp): the
    trickle holds sockets, never threads, and the oldest make room for new connections."""
    worst, threads = _slowloris(rank, [], shutil.which("python3") or ATTACKER_PYTHON)
    assert worst < 1.0
    assert threads <= 1 + control.MAX_WORKERS  # before: a thread per connection (500)
    assert rank.server.refused >= 500 - control.MAX_PENDING  # evicted to make room
    print(
        f"\n[security] 500 trickling connections (own uid): stacks answered in <= {worst * 1000:.0f} ms, "
        f"{threads} server threads, {rank.server.refused} evicted"
    )


def test_a_request_that_never_completes_is_dropped_at_the_deadline(rank: Rank, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(control, "REQUEST_DEADLINE", 0.5)
    with socket.create_connection(("127.0.0.1", rank.port), timeout=5) as sock:
        sock.sendall(b'{"op": ')
        started = time.monotonic()
        assert sock.recv(100) == b""  # closed, without an answer
    assert time.monotonic() - started < 3  # 0.5 s and the loop's turn, not the 10 s a recv timeout allowed
    wait_for(lambda: rank.server.refused == 1, 5, "the refusal to be counted")


def test_no_thread_to_be_had_still_answers(rank: Rank, monkeypatch: pytest.MonkeyPatch) -> None:
    """A process out of threads: starting one raises RuntimeError.  Before, that killed the accept loop
    and the rank never answered again."""
    real = threads.quiet_thread

    def exhausted(target: Any, name: str) -> threading.Thread:
        thread = real(target, name)

        def refuse() -> None:
            raise RuntimeError("can't start new thread")

        thread.start = refuse  # type: ignore[method-assign]
        return thread

    monkeypatch.setattr(control, "quiet_thread", exhausted)
    for _ in range(3):
        assert rank.ask({"op": "listen", "auth": _token(SECRET)}, timeout=5)["port"] == 4242
    assert rank.listens == 3
