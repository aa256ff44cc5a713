"""The laptop's half of a rank's control channel: the counterpart of ``container/control.py``.

A rank answers on its node's 127.0.0.1:``control_port`` (a daemon thread of the rank, so it answers
while the main thread is blocked in a collective).  One JSON line in, one JSON line out, per
connection (the ops: :class:`remote_debug.spec.ControlOp`), each with the job's control token;
reached through the node's SSH connection (:meth:`NodeTunnel.open_channel`).

- ``listen``: start the rank's debug listener (lazy ranks), or put tracing back after a detach;
  the reply's ``port`` is the listener on the node.  It also makes the rank pause-safe.
- ``pause-safe``: raise the rank's process-group timeout, so a peer paused in a debugger does not
  make its collectives time out (``detail: "pending"``: applied when the process group starts).
- ``stacks``: ``sys._current_frames()`` of the rank: every thread's stack, no tracer installed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

import paramiko

from remote_debug import job_secret, spec
from remote_debug.local.errors import UserError
from remote_debug.local.tunnels import NodeTunnel

REQUEST_TIMEOUT = 15.0


@dataclass(frozen=True)
class Listening:
    port: int  # the rank's debug listener on its node's 127.0.0.1
    detail: str | None


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    function: str


@dataclass(frozen=True)
class ThreadStack:
    name: str
    frames: list[Frame]  # outermost first, as a traceback prints them


class RankControl:
    """The control channels of the ranks on one node; ``secret`` is the job's (``keys.job_secret``):
    every request carries its control token, without which a rank answers nothing."""

    def __init__(self, tunnel: NodeTunnel, secret: str) -> None:
        self.tunnel = tunnel
        self._token = job_secret.control_token(secret)

    def request(self, control_port: int, payload: dict[str, Any], timeout: float = REQUEST_TIMEOUT) -> dict[str, Any]:
        """One JSON-line request; raises ``OSError`` (connection or protocol trouble) or ``UserError``
        (the rank said no)."""
        where = f"control port {control_port} on {self.tunnel.endpoint.alias}"
        try:
            chan = self.tunnel.open_channel(control_port)
        except (paramiko.ChannelException, paramiko.SSHException, EOFError) as exc:
            raise OSError(f"cannot reach {where}: {exc}") from None
        try:
            chan.settimeout(timeout)
            data = exchange(chan, {**payload, "auth": self._token})
        except (TimeoutError, paramiko.SSHException, EOFError) as exc:
            raise OSError(f"{where}: {exc or 'timed out'}") from None
        finally:
            chan.close()
        try:
            reply = json.loads(data)
        except ValueError:
            raise OSError(f"{where} sent no answer") from None
        if not isinstance(reply, dict) or not reply.get("ok"):
            error = reply.get("error") if isinstance(reply, dict) else None
            raise UserError(f"{self.tunnel.endpoint.alias}: {payload.get('op')} refused: {error or reply!r}")
        return reply

    def listen(self, rank: spec.RankEndpoint) -> Listening:
        reply = self.request(rank.control_port, {"op": spec.ControlOp.LISTEN})
        try:
            port = spec.check_port(int(reply["port"]), "debug port from the control channel", allow_zero=False)
        except (KeyError, ValueError, TypeError) as exc:
            raise OSError(f"rank {rank.rank} answered 'listen' without a usable port: {exc}") from None
        return Listening(port, _detail(reply))

    def pause_safe(self, rank: spec.RankEndpoint) -> str | None:
        return _detail(self.request(rank.control_port, {"op": spec.ControlOp.PAUSE_SAFE}))

    def stacks(self, rank: spec.RankEndpoint) -> list[ThreadStack]:
        reply = self.request(rank.control_port, {"op": spec.ControlOp.STACKS})
        return [
            ThreadStack(
                name=str(t.get("name", "")),
                frames=[
                    Frame(str(f.get("file", "")), int(f.get("line", 0)), str(f.get("function", "")))
                    for f in t.get("frames", [])
                ],
            )
            for t in reply.get("threads", [])
        ]


class _Stream(Protocol):
    def sendall(self, data: bytes, /) -> Any: ...
    def recv(self, size: int, /) -> bytes: ...


def exchange(conn: _Stream, payload: dict[str, Any]) -> bytes:
    """The protocol's one round: a JSON line out, the reply line back (as bytes; b"" if none came)."""
    conn.sendall(json.dumps(payload).encode() + b"\n")
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def _detail(reply: dict[str, Any]) -> str | None:
    detail = reply.get("detail")
    return None if detail is None else str(detail)
