"""The laptop's half of a rank's control channel: the counterpart of ``container/rank/control.py``.

A rank answers on its node's 127.0.0.1:``control_port`` (a daemon thread of the rank, so it answers
while the main thread is blocked in a collective).  One JSON line in, one JSON line out, per
connection (the ops: :class:`remote_debug.contract.spec.ControlOp`; the replies:
:mod:`remote_debug.contract.control_replies`), each with the job's control token;
reached through the node's SSH connection (:meth:`NodeTunnel.open_channel`).  The token goes out only
after whoever listens on the port proved the job secret for the rank the document names
(:func:`prove_rank`): a rank that died without a last word leaves its port free for anyone to bind.

- ``listen``: start the rank's debug listener (lazy ranks), or put tracing back after a detach;
  the reply's ``port`` is the listener on the node.  It also makes the rank pause-safe.
- ``pause-safe``: raise the rank's process-group timeout, so a peer paused in a debugger does not
  make its collectives time out (``detail: "pending"``: applied when the process group starts).
- ``stacks``: ``sys._current_frames()`` of the rank: every thread's stack, no tracer installed (the
  debugger's own threads only when asked); a rank held for a post-mortem shows where it raised.
- ``run-on``: a rank in its wait window leaves it now (:class:`WaitRelease`: attach did not select it).
- ``connect``: a PyCharm rank connects out to the IDE now, through the reverse forward to its node port
  (set up first); the reply comes at once (``status``: "connecting", "attached"), the connection after.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import paramiko

from remote_debug.contract import control_replies as replies
from remote_debug.contract import job_secret, spec
from remote_debug.contract.control_replies import Frame, ThreadStack
from remote_debug.laptop.connection.tunnels import NodeTunnel
from remote_debug.laptop.core.errors import UserError, reason
from remote_debug.oskit import osutil, peer_uid

REQUEST_TIMEOUT = 15.0
# control requests one command keeps in flight: ranks answer in parallel (a "listen" is mostly the rank
# importing debugpy, on the rank's own CPU), and a node's requests share its one SSH connection
FAN_OUT = 16

_Item = TypeVar("_Item")
_Answer = TypeVar("_Answer")


def fan_out(items: Sequence[_Item], ask: Callable[[_Item], _Answer], workers: int = FAN_OUT) -> list[_Answer]:
    """``ask`` each item, up to ``workers`` at a time; the answers in the items' order.  ``ask`` handles
    its own errors (one rank's trouble is not the others')."""
    if len(items) <= 1:
        return [ask(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(workers, len(items)), thread_name_prefix="rank-control") as pool:
        return list(pool.map(ask, items))


@dataclass(frozen=True)
class Listening:
    port: int  # the rank's debug listener on its node's 127.0.0.1
    detail: str | None


__all__ = ["Frame", "ThreadStack"]  # the stacks reply's parts, defined in the contract


# Checks a port of a rank (the rank, the port, "control"/"debug") before it is used - jobs on this
# machine, ``local_port_guard``: the reason to refuse it (one line), None when the rank's own uid holds it.
PortGuard = Callable[[spec.RankEndpoint, int, str], str | None]


class ListenerTables:
    """Who listens on which loopback port of each network namespace, read once for the many ranks that share it.

    Each read of ``/proc/<pid>/net/tcp`` costs ~2 ms of kernel time however few sockets the namespace holds (the
    kernel walks the machine's whole socket table): 64 ranks asked at once (``stacks``) paid it 128 times.  A
    namespace's table is kept ``TTL`` s and trusted only for a port it lists; a port it does not list (a debug
    listener that has just started) is read afresh.  The stale side is harmless: whether the rank's process
    still lives is checked on every request, and the rank proves itself before the token goes out."""

    TTL = 1.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._locks: dict[int, threading.Lock] = {}
        self._tables: dict[int, tuple[float, dict[int, set[int]]]] = {}

    def owners(self, pid: int, port: int) -> set[int]:
        """The uids listening on 127.0.0.1:``port`` in process ``pid``'s network namespace (empty: nobody)."""
        proc_net = Path(f"/proc/{pid}/net")
        try:
            namespace = os.stat(f"/proc/{pid}/ns/net").st_ino
        except OSError:  # not ours to look at, or gone: no sharing, the plain read says what there is
            return peer_uid.listener_owners(port, proc_net)
        with self._lock:
            lock = self._locks.setdefault(namespace, threading.Lock())
        with lock:  # one read per namespace, whichever rank's request comes first
            taken, table = self._tables.get(namespace, (0.0, {}))
            if port in table and time.monotonic() - taken <= self.TTL:
                return set(table[port])
            for _ in range(peer_uid.PROC_READS):  # a table that changes while it is read can skip a line
                table = peer_uid.listening_table(proc_net)
                if port in table:
                    break
            self._tables[namespace] = (time.monotonic(), table)
            return set(table.get(port, set()))


LISTENERS = ListenerTables()


def local_port_guard(rank: spec.RankEndpoint, port: int, what: str) -> str | None:
    """Why ``port`` (``rank``'s control or debug port) must not be used, None when the rank's own uid
    listens there; for the ranks of a job on this machine, whose ports are loopback ports of this host
    or of a namespace we made (read through ``/proc/<rank pid>/net``: the rank's own namespace)."""
    gone = osutil.process_gone(rank.pid, rank.start_ticks)
    if gone:
        return f"rank {rank.rank}'s process is gone ({gone}): its {what} port may be anyone's now"
    uid = peer_uid.process_euid(rank.pid)
    owners = LISTENERS.owners(rank.pid, port)
    if uid is None or not owners:
        return f"nothing of rank {rank.rank} listens on its {what} port 127.0.0.1:{port}"
    strangers = sorted(owners - {uid})
    if strangers:
        return (
            f"127.0.0.1:{port}, rank {rank.rank}'s {what} port, is held by uid "
            f"{', '.join(map(str, strangers))}, not the job's uid {uid}: another local user took it"
        )
    return None


class RankControl:
    """The control channels of the ranks on one node; ``secret`` is the job's (``keys.job_secret``):
    every request carries its control token, without which a rank answers nothing.

    Before the token (or anything else) goes out, the rank proves itself (:func:`prove_rank`): the port
    in a rank document may belong to someone else by now (the rank died without a last word, and
    another process bound the port).  ``guard`` (jobs on this machine) also checks who listens on the
    control port, and on the debug port a ``listen`` names, before either is used."""

    def __init__(self, tunnel: NodeTunnel, secret: str, guard: PortGuard | None = None) -> None:
        self.tunnel = tunnel
        self._secret = secret
        self._token = job_secret.control_token(secret)
        self.guard = guard

    def request(
        self, rank: spec.RankEndpoint, payload: dict[str, Any], timeout: float = REQUEST_TIMEOUT
    ) -> dict[str, Any]:
        """One JSON-line request to ``rank``'s control channel; raises ``OSError`` (connection or protocol
        trouble, or not the rank behind the port) or ``UserError`` (the rank said no)."""
        control_port = rank.control_port
        where = f"control port {control_port} on {self.tunnel.endpoint.alias}"
        refused = self.guard(rank, control_port, "control") if self.guard is not None else None
        if refused:
            raise OSError(f"not using {where}: {refused}")
        try:
            chan = self.tunnel.open_channel(control_port)
        except (paramiko.ChannelException, paramiko.SSHException, EOFError) as exc:
            raise OSError(f"cannot reach {where}: {reason(exc)}") from None
        try:
            chan.settimeout(timeout)
            prove_rank(chan, self._secret, rank, where)
            data = exchange(chan, {**payload, "auth": self._token})
        except (TimeoutError, paramiko.SSHException, EOFError) as exc:
            raise OSError(f"{where}: {reason(exc)}") from None
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
        reply = self.request(rank, {"op": spec.ControlOp.LISTEN})
        try:
            listening = replies.Listening.read(reply)
            port = spec.check_port(listening.port, "debug port from the control channel", allow_zero=False)
        except (ValueError, spec.ContractError) as exc:
            raise OSError(f"rank {rank.rank} answered 'listen' without a usable port: {exc}") from None
        refused = self.guard(rank, port, "debug") if self.guard is not None else None
        if refused:
            raise OSError(f"not using debug port {port} on {self.tunnel.endpoint.alias}: {refused}")
        return Listening(port, listening.detail)

    def pause_safe(self, rank: spec.RankEndpoint) -> str | None:
        return replies.Detail.read(self.request(rank, {"op": spec.ControlOp.PAUSE_SAFE})).detail

    def stacks(self, rank: spec.RankEndpoint, *, all_threads: bool = False) -> list[ThreadStack]:
        """The rank's threads; the debugger's own only with ``all_threads`` (a rank of an older hook
        leaves out pydevd's marked ones whatever is asked)."""
        return self.stacks_reply(rank, all_threads=all_threads).threads

    def stacks_reply(self, rank: spec.RankEndpoint, *, all_threads: bool = False) -> replies.Stacks:
        """The rank's whole ``stacks`` answer: its threads (as :meth:`stacks`), and its process groups' newest
        collectives when the job has PyTorch's Flight Recorder on."""
        payload: dict[str, Any] = {"op": spec.ControlOp.STACKS}
        if all_threads:
            payload["all_threads"] = True
        try:
            reply = replies.Stacks.read(self.request(rank, payload))
        except (ValueError, TypeError) as exc:
            raise OSError(f"rank {rank.rank} answered 'stacks' with something else: {exc}") from None
        if all_threads:
            return reply
        return dataclasses.replace(reply, threads=[t for t in reply.threads if not t.internal])

    def connect(self, rank: spec.RankEndpoint) -> Listening:
        """Ask a PyCharm rank to connect out to the IDE now; ``detail``: its status and pause-safe detail."""
        reply = replies.Connecting.read(self.request(rank, {"op": spec.ControlOp.CONNECT}))
        return Listening(rank.port, "; ".join(x for x in (reply.status, reply.detail) if x) or None)

    def run_on(self, rank: spec.RankEndpoint) -> str | None:
        """End the rank's wait window now; the reply's detail ("leaving the wait window", "not waiting")."""
        return replies.Detail.read(self.request(rank, {"op": spec.ControlOp.RUN_ON})).detail


class WaitRelease:
    """Ranks waiting for a debugger (``--wait``) that this attach did not select are told to run on.

    Without it, ``attach --ranks 0`` leaves every other rank idling through its whole wait window (and
    rank 0 blocked in its first collective with them).  Each rank process is told once; one that cannot
    be reached now is tried again at the next call, one that refuses (an older hook) is left alone.
    """

    def __init__(self, control: Callable[[str], RankControl]) -> None:
        self.control = control  # node -> its RankControl (JobConnection.control)
        self._done: set[tuple[int, int]] = set()  # (rank, pid)

    def release(self, manifests: Mapping[str, spec.NodeManifest], selected: spec.RankSelection) -> list[int]:
        """Tell the waiting ranks outside ``selected`` to run on; the ranks told (None selects all: none)."""
        if selected is None:
            return []
        told = []
        for node, m in manifests.items():
            for r in m.ranks:
                key = (r.rank, r.pid)
                if r.rank in selected or r.state != spec.RankState.WAITING or not r.control_port or key in self._done:
                    continue
                try:
                    control = self.control(node)
                except (UserError, OSError):  # no tunnel to the node yet: the next call tries again
                    continue
                try:
                    control.run_on(r)
                except UserError:  # it refused, e.g. an older hook that does not know "run-on": left alone
                    self._done.add(key)
                    continue
                except OSError:  # unreachable just now: the next call tries again
                    continue
                self._done.add(key)
                told.append(r.rank)
        return sorted(told)


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


MAX_PROOF_LINE = 4096


def prove_rank(conn: _Stream, secret: str, rank: spec.RankEndpoint, where: str) -> None:
    """Challenge whoever listens on ``rank``'s control port to prove the job secret, for this rank's pid
    and port (``job_secret.rank_proof``); raises OSError when it cannot.  Nothing else has been sent
    yet: a stranger on the port learns a random nonce, not the token."""
    challenge = job_secret.new_challenge()
    conn.sendall(json.dumps({"challenge": challenge}).encode() + b"\n")
    data = b""
    while not data.endswith(b"\n") and len(data) < MAX_PROOF_LINE:
        chunk = conn.recv(MAX_PROOF_LINE)  # the rank sends nothing more before it has the request
        if not chunk:
            break
        data += chunk
    try:
        answer = json.loads(data)
    except ValueError:
        answer = None
    proof = answer.get("proof") if isinstance(answer, dict) else None
    if not job_secret.proof_matches(secret, challenge, rank.pid, rank.control_port, proof):
        raise OSError(
            f"{where} did not prove it is rank {rank.rank} (pid {rank.pid}) of this job: "
            "not sending it the job's token (the rank may have died and another process taken its port)"
        )
