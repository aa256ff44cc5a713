"""Which local user opened a loopback TCP connection: the gate in front of every debug listener.

Binding 127.0.0.1 keeps other machines out, not other users of this one: anyone who connects to a
debugpy port runs code in the rank, and debugpy has no client token in ``listen`` mode.  So every
listener we own accepts a connection only from a socket that belongs to our own uid.

Linux tells it.  The client's socket is the one whose local address is the peer address of our
accepted socket and whose remote address is ours; its owner comes from the kernel's sock_diag
netlink interface, asked for exactly that 4-tuple (what ``ss`` uses; no privilege needed).  Where
netlink is unavailable, from ``/proc/net/tcp{,6}`` (one line per socket with its owner's uid),
read again when the line is missing: that file is produced page by page, and a table that changes
meanwhile (a flood of connections) can skip a line.  Where neither exists (macOS, Windows),
:func:`supported` is False and the callers say so once.

A connection whose client socket is gone or closed before we look (connect, send, close at once) is
refused: a closed socket lingers without an owner and is reported as uid 0, which would pass for
root's.  A real client keeps its socket open while it waits for our answer.  Stdlib only:
the container side uses it in every rank and in debugpy's adapter.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
from dataclasses import dataclass
from pathlib import Path

PROC_NET = Path("/proc/net")
_TABLES = ("tcp", "tcp6")
PROC_READS = 3  # attempts at /proc/net/tcp before "no such socket"
# sock_diag (linux/sock_diag.h, linux/inet_diag.h)
_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLM_F_REQUEST = 1
_NLMSG_ERROR = 2
_NO_COOKIE = 0xFFFFFFFF
_ALL_STATES = 0xFFFFFFFF
_DIAG_MSG_UID_OFFSET = 16 + 4 + 48 + 12  # nlmsghdr, 4 x u8, inet_diag_sockid, expires/rqueue/wqueue
# Only an ESTABLISHED socket counts.  One its program has closed lingers (FIN_WAIT, TIME_WAIT) without
# an owner and is reported as uid 0: a stranger could send a request, close at once and pass for root
# while the data waits in our buffer.  (A connection a listener has not accepted yet is ESTABLISHED and
# has the listener's owner: that is what checking a server we connected to relies on.)
_ESTABLISHED = 1


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    uid: int | None  # the peer socket's owner, None when unknown
    reason: str  # why it was refused ("" when allowed)


def supported(proc_net: Path = PROC_NET) -> bool:
    """Whether this system tells which uid owns a TCP socket."""
    return hasattr(socket, "AF_NETLINK") or (proc_net / "tcp").is_file()


def _hex_address(host: str, port: int, *, v6: bool) -> str:
    """An address as /proc/net/tcp{,6} prints it: the raw address bytes as native-endian 32-bit
    words, then the port in hex."""
    if v6:
        packed = socket.inet_pton(socket.AF_INET6, host if ":" in host else "::ffff:" + host)
    else:
        packed = socket.inet_aton(host)
    words = struct.unpack(f"={len(packed) // 4}I", packed)
    return "".join(f"{w:08X}" for w in words) + f":{port:04X}"


def _rows(proc_net: Path) -> list[tuple[bool, list[str]]]:
    rows: list[tuple[bool, list[str]]] = []
    for table in _TABLES:
        try:
            text = (proc_net / table).read_text()
        except OSError:
            continue
        rows.extend((table == "tcp6", line.split()) for line in text.splitlines()[1:])
    return rows


def _diag_owner(local: tuple[str, int], remote: tuple[str, int], family: int) -> int | None:
    """sock_diag's answer for the TCP socket ``local`` -> ``remote`` of ``family``; None if no such
    socket; raises OSError when netlink cannot be asked."""

    def packed(host: str) -> bytes:
        if family == socket.AF_INET:
            return socket.inet_pton(socket.AF_INET, host) + bytes(12)
        return socket.inet_pton(socket.AF_INET6, host if ":" in host else "::ffff:" + host)

    sockid = (
        struct.pack("!HH", local[1], remote[1])
        + packed(local[0])
        + packed(remote[0])
        + struct.pack("=III", 0, _NO_COOKIE, _NO_COOKIE)
    )
    request = struct.pack("=BBBBI", family, socket.IPPROTO_TCP, 0, 0, _ALL_STATES) + sockid
    header = struct.pack("=IHHII", 16 + len(request), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST, 1, 0)
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG) as nl:
        nl.settimeout(2)
        nl.sendto(header + request, (0, 0))
        answer = nl.recv(65536)
    (kind,) = struct.unpack_from("=H", answer, 4)
    if kind == _NLMSG_ERROR:
        (error,) = struct.unpack_from("=i", answer, 16)
        if -error == errno.ENOENT:
            return None
        raise OSError(-error, os.strerror(-error))
    (state,) = struct.unpack_from("=B", answer, 17)
    (uid,) = struct.unpack_from("=I", answer, _DIAG_MSG_UID_OFFSET)
    return int(uid) if state == _ESTABLISHED else None


def _proc_owner(local: tuple[str, int], remote: tuple[str, int], proc_net: Path) -> int | None:
    for v6, fields in _rows(proc_net):
        if len(fields) < 10:
            continue
        try:
            if fields[1] == _hex_address(*local, v6=v6) and fields[2] == _hex_address(*remote, v6=v6):
                return int(fields[7]) if int(fields[3], 16) == _ESTABLISHED else None
        except (OSError, ValueError):  # an IPv6 address in an IPv4 table, or the like
            continue
    return None


def socket_owner(local: tuple[str, int], remote: tuple[str, int], proc_net: Path = PROC_NET) -> int | None:
    """The uid owning the TCP socket bound to ``local`` and connected to ``remote``, None if none."""
    if hasattr(socket, "AF_NETLINK"):
        try:
            # an IPv4 connection may come from an IPv6 socket (::ffff:127.0.0.1)
            for family in (socket.AF_INET, socket.AF_INET6):
                owner = _diag_owner(local, remote, family)
                if owner is not None:
                    return owner
            return None
        except OSError:
            pass  # no sock_diag here (a container without it, an old kernel): the proc files
    for _ in range(PROC_READS):
        owner = _proc_owner(local, remote, proc_net)
        if owner is not None:
            return owner
    return None


_LISTEN = 10


def listener_owners(port: int, proc_net: Path = PROC_NET) -> set[int]:
    """The uids of the LISTEN sockets that would take a connection to 127.0.0.1:``port`` (bound to it,
    or to a wildcard address), from ``proc_net``'s tables: ``/proc/<pid>/net`` reads the network
    namespace of process ``pid`` (a job's node namespace).  Empty when nothing listens there."""
    wanted = {
        False: {_hex_address("127.0.0.1", port, v6=False), _hex_address("0.0.0.0", port, v6=False)},
        True: {_hex_address("127.0.0.1", port, v6=True), _hex_address("::", port, v6=True)},
    }
    owners: set[int] = set()
    for _ in range(PROC_READS):  # a table that changes while it is read can skip a line
        for v6, fields in _rows(proc_net):
            if len(fields) < 10:
                continue
            try:
                if fields[1] in wanted[v6] and int(fields[3], 16) == _LISTEN:
                    owners.add(int(fields[7]))
            except ValueError:
                continue
        if owners:
            break
    return owners


def listening_table(proc_net: Path = PROC_NET) -> dict[int, set[int]]:
    """Every port a connection to 127.0.0.1 would reach in ``proc_net``'s namespace (a LISTEN socket bound to it or
    to a wildcard address) -> the uids of those sockets: :func:`listener_owners` for all ports in one read (the
    kernel walks every socket of the machine for each read of a table, whatever its namespace holds)."""
    local = {
        False: {_hex_address("127.0.0.1", 0, v6=False)[:-5], _hex_address("0.0.0.0", 0, v6=False)[:-5]},
        True: {_hex_address("127.0.0.1", 0, v6=True)[:-5], _hex_address("::", 0, v6=True)[:-5]},
    }
    table: dict[int, set[int]] = {}
    for v6, fields in _rows(proc_net):
        if len(fields) < 10:
            continue
        address, _, port = fields[1].partition(":")
        try:
            if address in local[v6] and int(fields[3], 16) == _LISTEN:
                table.setdefault(int(port, 16), set()).add(int(fields[7]))
        except ValueError:
            continue
    return table


def process_euid(pid: int) -> int | None:
    """The effective uid of process ``pid`` (``/proc/<pid>/status``), None when unknown."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("Uid:"):
                    return int(line.split()[2])
    except (OSError, IndexError, ValueError):
        return None
    return None


def peer_verdict(conn: socket.socket, proc_net: Path = PROC_NET, uid: int | None = None) -> Verdict:
    """Whether the peer of an accepted TCP connection belongs to ``uid`` (default: ours)."""
    want = os.geteuid() if uid is None else uid
    try:
        ours = conn.getsockname()[:2]
        theirs = conn.getpeername()[:2]
    except OSError:
        return Verdict(False, None, "the connection closed before its owner could be checked")
    owner = socket_owner((theirs[0], theirs[1]), (ours[0], ours[1]), proc_net)
    if owner is None:
        return Verdict(False, None, f"no socket owner found for {theirs[0]}:{theirs[1]}")
    if owner != want:
        return Verdict(False, owner, f"connection from {theirs[0]}:{theirs[1]} belongs to uid {owner}, not {want}")
    return Verdict(True, owner, "")


def server_owner(conn: socket.socket) -> int | None:
    """The uid owning the socket that accepted our outgoing connection ``conn`` (a connection not accepted
    yet has its listener's owner), None if unknown: who is behind a port we connected to."""
    try:
        return socket_owner(conn.getpeername()[:2], conn.getsockname()[:2])
    except OSError:
        return None
