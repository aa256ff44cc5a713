"""Carry one connection's bytes both ways, between the IDE's side (a socket) and the rank's side (a socket or a
paramiko channel, which is selectable), until either side closes.  The plain forwards (:mod:`tunnels`,
:mod:`reverse`) hand each chunk over as it is; the taps (:mod:`dap_tap`, :mod:`pydevd_tap`) split it into
messages first."""

from __future__ import annotations

import select
from collections.abc import Callable
from typing import Any

CHUNK = 65536
IDLE_LOOK_SECONDS = 30.0  # with nothing to read, how often a half-closed channel is noticed


def pump(ide: Any, rank: Any, from_ide: Callable[[bytes], None], from_rank: Callable[[bytes], None]) -> None:
    """Hand every chunk read from ``ide`` to ``from_ide`` and from ``rank`` to ``from_rank``; return when either
    side reads its end (or a channel was closed or reached EOF while nothing came).  Errors are the caller's."""
    watched = [ide, rank]
    while True:
        readable, _, _ = select.select(watched, [], [], IDLE_LOOK_SECONDS)
        if not readable:
            if getattr(rank, "closed", False) or getattr(rank, "eof_received", False):
                return
            continue
        if ide in readable:
            data = ide.recv(CHUNK)
            if not data:
                return
            from_ide(data)
        if rank in readable:
            data = rank.recv(CHUNK)
            if not data:
                return
            from_rank(data)
