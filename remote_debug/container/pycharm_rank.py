"""A rank debugged from PyCharm: connect OUT to PyCharm's debug server, and never hang the job.

With debugpy a rank listens and the IDE connects in; PyCharm's "Python Debug Server" is the other
way round: the rank calls ``pydevd_pycharm.settrace(host, port)`` and connects to the IDE.  The
rank connects to a port on its node's loopback (published in its rank document), which the
laptop's SSH connection reverse-forwards to the port PyCharm listens on.

The hazard (measured): with the reverse tunnel up but nothing listening in the IDE, ``settrace``
blocks forever - sshd accepts the connection, the far end closes it, and pydevd spins waiting for
the IDE's "run" command that never comes.  So nothing here calls ``settrace`` on an unproven path:

1. connect to the node port ourselves, retrying within the spec's wait window (the laptop may set
   the tunnel up, and the user start PyCharm's debug server, while the rank waits);
2. prove the far end is a live pydevd server: our laptop forwarder writes a hello line first
   (``pycharm_spec.Hello``: IDE reachable?  project root?  build?), then the IDE's own first
   command arrives (PyCharm's handshake sends CMD_VERSION as soon as it accepts).  EOF, a
   "not ok" hello, or silence until the deadline mean: no debugger, run on;
3. only then call ``settrace`` - on that very socket (handed to pydevd in place of its own
   connect, so the IDE sees one connection per rank, never a probe), with a watchdog that
   releases ``settrace``'s wait for the IDE's "run" if the connection dies or the deadline passes.

This module never imports debugpy: both ship a ``_pydevd_bundle`` and cannot share a process.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import inspect
import json
import os
import re
import socket
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any

from remote_debug.container import node_env
from remote_debug.container.common import quiet_thread
from remote_debug.container.control import ControlServer
from remote_debug.container.log import describe, log
from remote_debug.container.reporter import FINAL_STATES, RankIdentity, RankReporter, install_exit_reporting
from remote_debug.pycharm_spec import HELLO_MAX_BYTES, HELLO_PREFIX, PYDEVD_DIST, Hello, satisfies
from remote_debug.spec import LOOPBACK, ContractError, DebugSpec, RankEndpoint, RankState, check_port

ENV_PATH_MAPPINGS = "PATHS_FROM_ECLIPSE_TO_PYTHON"  # read by pydevd_file_utils when it is imported
RETRY_REFUSED = 0.5  # no tunnel on the node port yet: cheap to retry (a refused connect on loopback)
RETRY_NO_IDE = 1.0  # tunnel up, IDE not answering: each try costs an SSH channel and a laptop connect
HANDSHAKE_GRACE = 3.0  # a connection made just before the window closes still gets this long to answer
RUN_GRACE = 15.0  # likewise for the IDE's breakpoints + "run" after a proven handshake
WATCH_SECONDS = 0.5
# The IDE's first bytes on a pydevd connection: a command id and a tab ("501\t1\t1.1\tUNIX\tID").
_PYDEVD_LINE = re.compile(rb"^\d{3}\t")


@dataclass
class Connection:
    sock: socket.socket
    hello: Hello | None  # None: the far end is a plain `ssh -R`, not our forwarder


class NoDebugger(Exception):
    """This attempt found no debugger behind the node port (the message says why, one line)."""


def node_port(spec: DebugSpec, identity: RankIdentity) -> int:
    """The node-loopback port this rank connects to: ``port_base + local_rank``, or a free port.

    A free port is only free when we look; the laptop asks the node's sshd to listen on it a
    moment later.  Losing that race shows up on the laptop as a failed forward for this rank.
    """
    if spec.port_base:
        return check_port(spec.port_base + identity.local_rank, f"PyCharm port for local rank {identity.local_rank}")
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


# --- proving the path ----------------------------------------------------------------------------


def _recv_peek(sock: socket.socket, deadline: float, enough: int) -> bytes:
    """Peek (without consuming) until ``enough`` bytes or a newline are buffered, EOF, or deadline."""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        sock.settimeout(remaining)
        data = sock.recv(HELLO_MAX_BYTES, socket.MSG_PEEK)
        if not data or len(data) >= enough or b"\n" in data:
            return data
        time.sleep(0.01)  # a partial line is buffered: MSG_PEEK would return at once, so pace the loop


def _read_exact(sock: socket.socket, count: int) -> bytes:
    out = b""
    while len(out) < count:
        chunk = sock.recv(count - len(out))
        if not chunk:
            raise NoDebugger("the tunnel closed during the hello")
        out += chunk
    return out


def _await_ide(sock: socket.socket, deadline: float) -> Hello | None:
    """Consume our forwarder's hello (if any) and wait for the IDE's first command (left unread)."""
    try:
        data = _recv_peek(sock, deadline, len(HELLO_PREFIX))
    except TimeoutError:
        raise NoDebugger("connected, but nothing answered through the tunnel in time") from None
    if not data:
        raise NoDebugger("the tunnel is up but nothing answered on the laptop (is PyCharm's debug server running?)")
    hello: Hello | None = None
    if data.startswith(HELLO_PREFIX):
        try:  # the rest of the line may still be on its way
            data = _recv_peek(sock, deadline, HELLO_MAX_BYTES)
        except TimeoutError:
            raise NoDebugger("the laptop's hello did not arrive in time") from None
        end = data.find(b"\n")
        if end < 0:
            raise NoDebugger("malformed hello from the laptop")
        try:
            hello = Hello.decode(_read_exact(sock, end + 1))
        except ContractError as exc:
            raise NoDebugger(str(exc)) from None
        if not hello.ok:
            raise NoDebugger(hello.error or "the laptop reports no debugger")
        try:
            data = _recv_peek(sock, deadline, 4)
        except TimeoutError:
            raise NoDebugger("the IDE accepted the connection but did not start the pydevd handshake") from None
        if not data:
            raise NoDebugger("the IDE closed the connection right away")
    if not _PYDEVD_LINE.match(data):
        raise NoDebugger("the far end of the tunnel does not speak pydevd's protocol")
    return hello


def connect(port: int, deadline: float) -> Connection:
    """One attempt: a connection whose far end is proven to be a pydevd debug server."""
    remaining = deadline - time.monotonic()
    try:
        sock = socket.create_connection((LOOPBACK, port), timeout=max(0.5, min(5.0, remaining)))
    except ConnectionRefusedError:
        raise NoDebugger(f"no tunnel on localhost:{port} (run 'remote-debug attach JOB --ide pycharm')") from None
    except OSError as exc:
        raise NoDebugger(f"cannot connect to localhost:{port}: {describe(exc)}") from None
    try:
        # pydevd sends one small message per event: without this each waits for the previous ACK.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        hello = _await_ide(sock, max(deadline, time.monotonic() + HANDSHAKE_GRACE))
    except OSError as exc:  # reset while waiting: the same as EOF
        sock.close()
        raise NoDebugger(f"the tunnel failed: {describe(exc)}") from None
    except BaseException:
        sock.close()
        raise
    sock.settimeout(None)  # pydevd's reader blocks on recv
    return Connection(sock, hello)


def connect_within(port: int, deadline: float) -> tuple[Connection | None, str]:
    """Try until ``deadline`` (at least once); returns the connection or the last reason for none."""
    while True:
        try:
            return connect(port, deadline), ""
        except NoDebugger as exc:
            reason = str(exc)
        pause = RETRY_REFUSED if reason.startswith("no tunnel") else RETRY_NO_IDE
        if time.monotonic() + pause >= deadline:
            return None, reason
        time.sleep(pause)


# --- settrace ------------------------------------------------------------------------------------


def merged_path_mappings(existing: str | None, ide_root: str, code_dir: str) -> str | None:
    """``PATHS_FROM_ECLIPSE_TO_PYTHON`` with (IDE project root -> job code dir) added.

    Mappings the user set in the job come first and win; an unparsable value is left alone.
    """
    if not ide_root:
        return existing
    pairs: list[Any] = []
    if existing:
        try:
            loaded = json.loads(existing)
        except ValueError:
            return existing
        if not isinstance(loaded, list):
            return existing
        pairs = loaded
    ours = [ide_root, code_dir]
    if ours not in pairs:
        pairs.append(ours)
    return json.dumps(pairs)


def output_kwargs(settrace: Any, to_server: bool) -> dict[str, bool]:
    """settrace's output-redirect keywords: ``stdout_to_server`` now, ``stdoutToServer`` in older builds."""
    try:
        params = inspect.signature(settrace).parameters
    except (TypeError, ValueError):
        return {}
    for out_name, err_name in (("stdout_to_server", "stderr_to_server"), ("stdoutToServer", "stderrToServer")):
        if out_name in params and err_name in params:
            return {out_name: to_server, err_name: to_server}
    return {}


@contextlib.contextmanager
def _handed_over(pydevd: ModuleType, conn: Connection, debuggers: list[Any]) -> Iterator[None]:
    """Make pydevd use our proven socket instead of opening a second connection to the IDE.

    Also hands the watchdog the debugger object: ``PyDB.connect`` is the caller, and its ``self``
    is the instance settrace waits on.  (The global-debugger slot is no substitute: a connection
    that dies at once unregisters the debugger before a poller may ever see it.)
    """
    original = getattr(pydevd, "start_client", None)
    used = False

    def start_client(host: str, port: int) -> socket.socket:
        nonlocal used
        if not used and original is not None:
            used = True
            caller = sys._getframe(1).f_locals.get("self")
            if caller is not None and hasattr(caller, "ready_to_run"):
                debuggers.append(caller)
            return conn.sock
        assert original is not None
        return original(host, port)  # type: ignore[no-any-return]

    if original is None:  # a pydevd without this seam: it connects itself to the path just proven
        conn.sock.close()
        yield
        return
    pydevd.start_client = start_client  # type: ignore[attr-defined]
    try:
        yield
    finally:
        pydevd.start_client = original  # type: ignore[attr-defined]
        if not used:
            conn.sock.close()


def _global_debugger() -> Any:
    try:
        from _pydevd_bundle.pydevd_constants import GlobalDebuggerHolder
    except ImportError:
        return None
    return GlobalDebuggerHolder.global_dbg


def _release_when(done: threading.Event, forced: threading.Event, deadline: float, debuggers: list[Any]) -> None:
    """Watchdog for settrace's wait for the IDE's "run": pydevd loops on ``ready_to_run`` with no
    timeout; if the connection dies (pydevd disposes itself) or the deadline passes, set the flag
    so that settrace returns, and tell the caller to undo it."""
    db = None
    while not done.wait(0.1):
        db = (debuggers[0] if debuggers else None) or _global_debugger() or db
        if db is None:
            continue
        if getattr(db, "pydb_disposed", False) or time.monotonic() > deadline:
            forced.set()
            db.ready_to_run = True
            return


def settrace(conn: Connection, port: int, deadline: float) -> tuple[bool, str]:
    """Start pydevd on ``conn``; (attached, reason when not).  Bounded by ``deadline`` (+RUN_GRACE)."""
    import pydevd
    import pydevd_pycharm

    done, forced = threading.Event(), threading.Event()
    debuggers: list[Any] = []
    until = max(deadline, time.monotonic() + RUN_GRACE)
    quiet_thread(lambda: _release_when(done, forced, until, debuggers), "remote-debug-settrace").start()
    try:
        with _handed_over(pydevd, conn, debuggers):
            # 127.0.0.1 rather than "localhost": the tunnel listens on IPv4 loopback only.
            pydevd_pycharm.settrace(
                LOOPBACK, port=port, suspend=False, **output_kwargs(pydevd_pycharm.settrace, True)
            )
    except Exception:
        with contextlib.suppress(Exception):  # undo whatever tracing pydevd installed before failing
            pydevd_pycharm.stoptrace()
        raise
    finally:
        done.set()
    if forced.is_set():
        with contextlib.suppress(Exception):
            pydevd_pycharm.stoptrace()
        return False, "the IDE connected but never told the rank to run (connection lost or too slow)"
    return True, ""


def _watch_session(reporter: RankReporter) -> None:
    """Once PyCharm goes away (pydevd disposes itself and lets paused threads run), say so."""
    db = _global_debugger()
    while reporter.state not in FINAL_STATES:
        if db is None or getattr(db, "pydb_disposed", False) or _global_debugger() is not db:
            reporter.update(state=RankState.RUNNING, unless=FINAL_STATES)
            return
        time.sleep(WATCH_SECONDS)


def installed_pydevd() -> str | None:
    try:
        return importlib.metadata.version(PYDEVD_DIST)
    except importlib.metadata.PackageNotFoundError:
        return None


def _conflict() -> str | None:
    if "debugpy" in sys.modules:
        return "debugpy is already loaded in this process and cannot share it with pydevd-pycharm"
    if importlib.util.find_spec("pydevd_pycharm") is None:
        return "pydevd-pycharm is not installed in the job: add 'pydevd-pycharm~=<your PyCharm build>'"
    return None


def _connects_out() -> int:
    raise RuntimeError("a PyCharm rank connects out to the IDE; it has no listener to start")


def activate(
    spec: DebugSpec, identity: RankIdentity, directory: Path, endpoint: RankEndpoint, env: Mapping[str, str]
) -> RankReporter:
    """Connect this rank to PyCharm within the wait window, or report why not and run on."""
    rank = identity.rank
    problem = _conflict()
    if problem:
        log(f"rank {rank}: not debugging with PyCharm: {problem}")
        return RankReporter(directory, replace(endpoint, error=problem))
    try:
        port = node_port(spec, identity)
    except (ContractError, OSError) as exc:
        log(f"rank {rank}: not debugging with PyCharm: {describe(exc)}")
        return RankReporter(directory, replace(endpoint, error=describe(exc)))

    try:
        # no "listen" here (the rank connects out), but attach's pause-safe and `stacks` reach it
        endpoint = replace(endpoint, control_port=ControlServer(_connects_out, env).port)
    except Exception as exc:
        log(f"rank {rank}: control channel not started: {describe(exc)}")
    started = time.monotonic()
    deadline = started + spec.wait_seconds
    # Published before the first try: the laptop reads the port here to set up the reverse forward.
    reporter = RankReporter(directory, replace(endpoint, port=port, state=RankState.WAITING))
    install_exit_reporting(reporter)
    conn, reason = connect_within(port, deadline)
    if conn is None:
        log(
            f"rank {rank}: no PyCharm debugger within {spec.wait_seconds:g} s ({reason}); "
            "training runs on without the debugger"
        )
        reporter.update(state=RankState.RUNNING, error=reason)
        return reporter

    hello = conn.hello
    # pydevd names frames by their real path: map the real code dir, or symlinked dirs never match.
    code_dir = os.path.realpath(node_env.code_dir(env))
    mappings = merged_path_mappings(os.environ.get(ENV_PATH_MAPPINGS), hello.ide_root if hello else "", code_dir)
    if mappings is not None:
        os.environ[ENV_PATH_MAPPINGS] = mappings
    if hello and hello.build:
        have = installed_pydevd()
        if have and not _safe_satisfies(have, hello.build):
            log(
                f"rank {rank}: pydevd-pycharm {have} does not match PyCharm build {hello.build}; "
                f"install 'pydevd-pycharm~={hello.build}' in the job (debugging may misbehave)"
            )
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    try:
        attached, why = settrace(conn, port, deadline)
    except Exception as exc:  # pydevd failed inside: the rank must train on regardless
        attached, why = False, f"pydevd failed: {describe(exc)}"
    if not attached:
        log(f"rank {rank}: PyCharm debugger not attached ({why}); training runs on without the debugger")
        reporter.update(state=RankState.RUNNING, error=why)
        return reporter
    log(f"rank {rank}: PyCharm debugger attached via localhost:{port} in {time.monotonic() - started:.2f} s")
    reporter.update(state=RankState.ATTACHED)
    quiet_thread(lambda: _watch_session(reporter), "remote-debug-pycharm-watch").start()
    return reporter


def _safe_satisfies(installed: str, build: str) -> bool:
    try:
        return satisfies(installed, build)
    except ContractError:
        return True  # an unusual build string is the laptop's business; do not nag every rank
