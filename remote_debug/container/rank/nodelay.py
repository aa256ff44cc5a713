"""TCP_NODELAY on debugpy's own sockets, so stepping is not paced by Nagle + delayed ACK.

debugpy (1.8) never sets TCP_NODELAY on the sockets between the debuggee (pydevd), its adapter
subprocess and the IDE: a DAP ``next`` then takes ~44 ms (a small write waits for the peer's
delayed ACK), and setting it on the client side alone changes nothing.  With it set in the
debuggee and in the adapter a step takes a few ms.

:func:`enable` patches the two places those sockets come from, in THIS process:

* ``debugpy.common.sockets._new_sock``: every listener and client socket of the adapter and of
  ``debugpy.listen()`` (Linux copies TCP_NODELAY from a listener to the sockets it accepts);
* ``pydevd.start_client``: the debuggee's connection to its adapter;
* ``pydevd.create_server_socket``: the DAP server of a rank that has no adapter process
  (``debugpy.listen(in_process_debug_adapter=True)``, our default).

It runs in two kinds of process: a rank, right before ``debugpy.listen()`` (``debuggee=True``),
and debugpy's adapter subprocess, from our ``sitecustomize`` (the adapter inherits the hook's
PYTHONPATH; it is recognised by its command line and by the claim a rank leaves in the
environment).  Anything else returns at once.  Never raises: a failure only costs latency.
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import sys
from collections.abc import Callable, Sequence
from typing import Any

from remote_debug.container.log import describe, log
from remote_debug.contract.spec import ENV_CLAIMED_BY

_MARK = "_remote_debug_nodelay"


def enable(*, debuggee: bool = False, argv: Sequence[str] | None = None) -> bool:
    """Set TCP_NODELAY on debugpy's sockets in this process; True when something was patched.

    ``debuggee=True``: this process is a rank about to call ``debugpy.listen()``.  Otherwise only a
    debugpy adapter spawned by one of our ranks is patched (see the module docstring).
    """
    try:
        if debuggee:
            return _patch_debuggee()
        parent = our_rank_adapter(argv)
        if parent is None:
            return False
        return _patch_adapter(parent)
    except Exception as exc:  # never break the process for a latency optimisation
        log(f"TCP_NODELAY not set on debugpy sockets in pid {os.getpid()}: {describe(exc)}")
        return False


def _set_nodelay(sock: Any) -> None:
    with contextlib.suppress(OSError, AttributeError, TypeError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _wrap(factory: Callable[..., Any]) -> Callable[..., Any]:
    """``factory`` returning a socket -> the same, with TCP_NODELAY set on the result (idempotent)."""
    if getattr(factory, _MARK, False):
        return factory

    @functools.wraps(factory)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        sock = factory(*args, **kwargs)
        _set_nodelay(sock)
        return sock

    setattr(wrapper, _MARK, True)
    return wrapper


def _patch_sockets_module() -> None:
    from debugpy.common import sockets

    sockets._new_sock = _wrap(sockets._new_sock)


def _patch_debuggee() -> bool:
    _patch_sockets_module()
    import debugpy.server  # noqa: F401 - puts debugpy's vendored pydevd on sys.path
    import pydevd
    from _pydevd_bundle import pydevd_comm

    # pydevd imported start_client by name; PyDB.connect looks it up in pydevd's globals.
    pydevd.start_client = _wrap(pydevd.start_client)
    pydevd_comm.start_client = _wrap(pydevd_comm.start_client)
    # the same for the server socket of a rank that serves DAP itself (in-process adapter); the
    # sockets it accepts inherit TCP_NODELAY from it
    pydevd.create_server_socket = _wrap(pydevd.create_server_socket)
    return True


def our_rank_adapter(argv: Sequence[str] | None = None) -> str | None:
    """The dir holding the ``debugpy`` package when THIS process (``argv``: ``sys.orig_argv``) is debugpy's
    adapter spawned by one of our ranks (which leaves its claim in the environment), else None: what every
    patch of the adapter (TCP_NODELAY, the uid gate, the start-up report) checks first."""
    parent = adapter_parent(sys.orig_argv if argv is None else argv)
    return parent if parent is not None and os.environ.get(ENV_CLAIMED_BY) else None


def adapter_parent(argv: Sequence[str]) -> str | None:
    """The dir holding the ``debugpy`` package when ``argv`` runs debugpy's adapter, else None.

    debugpy.listen() starts ``python <site-packages>/debugpy/adapter --for-server ...``.
    """
    if len(argv) < 2:
        return None
    path = os.path.normpath(argv[1])
    if os.path.basename(path) != "adapter" or os.path.basename(os.path.dirname(path)) != "debugpy":
        return None
    if not os.path.isdir(path):
        return None
    return os.path.dirname(os.path.dirname(os.path.abspath(path)))


def _patch_adapter(parent: str) -> bool:
    import_adapter_debugpy(parent)
    _patch_sockets_module()
    return True


def import_adapter_debugpy(parent: str) -> None:
    """Import the adapter's own copy of debugpy, the way its __main__ would (it then skips its own
    sys.path dance because debugpy is already in sys.modules)."""
    if "debugpy" not in sys.modules:
        sys.path.insert(0, parent)
        try:
            __import__("debugpy")
        finally:
            with contextlib.suppress(ValueError):
                sys.path.remove(parent)
