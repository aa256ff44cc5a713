"""The emulator's endpoint, reachable from inside a node at the same URL as on the host.

A node has its own network namespace (see :mod:`.nodes`): its ``127.0.0.1`` is not the host's, so
``AWS_ENDPOINT_URL=http://127.0.0.1:<port>`` would reach nothing there.  On a real instance the
SageMaker platform gives the container a route to AWS; here a listener on the node's own
``127.0.0.1:<port>`` (made by a thread that entered the node's namespace: the socket keeps it)
relays each connection to the emulator on the host.  Code in the job, the toolkit fetching
``sagemaker_submit_directory`` included, then uses the very URL the launcher used.
"""

from __future__ import annotations

import contextlib
import socket
import threading

from remote_debug.oskit import netns

_CHUNK = 64 * 1024


def listen_in(namespace: str, host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` inside the network namespace ``namespace``."""

    def listen() -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(64)
        return sock

    return netns.run_in(namespace, listen, f"listening on {host}:{port}")


class EndpointRelay:
    """Accepts on ``listener`` (inside a node) and pipes each connection to ``target`` (on the host)."""

    def __init__(self, listener: socket.socket, target: tuple[str, int], name: str) -> None:
        self._listener = listener
        self._target = target
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._thread = threading.Thread(target=self._accept_loop, name=f"emulator-relay-{name}", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        with self._lock:
            conns = list(self._open)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=5)

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                inner, _ = self._listener.accept()
            except OSError:
                return  # closed
            try:
                outer = socket.create_connection(self._target, timeout=10)
            except OSError:
                inner.close()  # the emulator is going away: the client sees a reset, as it would
                continue
            outer.settimeout(None)
            pair = _Pair(inner, outer)
            with self._lock:
                self._open.update((inner, outer))
            for source, sink in ((inner, outer), (outer, inner)):
                threading.Thread(target=self._pipe, args=(pair, source, sink), daemon=True).start()

    def _pipe(self, pair: _Pair, source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                data = source.recv(_CHUNK)
                if not data:
                    break
                sink.sendall(data)
        except OSError:
            pass
        # half-close only: the other direction may still carry the answer
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)
        if pair.one_direction_done():
            with self._lock:
                self._open.difference_update(pair.sockets)
            for sock in pair.sockets:
                sock.close()


class _Pair:
    """The two sockets of one relayed connection; the second direction to finish closes both."""

    def __init__(self, inner: socket.socket, outer: socket.socket) -> None:
        self.sockets = (inner, outer)
        self._left = 2
        self._lock = threading.Lock()

    def one_direction_done(self) -> bool:
        with self._lock:
            self._left -= 1
            return self._left == 0
