"""A rank debugged from PyCharm: connect OUT to PyCharm's debug server when asked, and never hang the job.

PyCharm's "Python Debug Server" waits for ranks to connect to it (``pydevd_pycharm.settrace``); the
rank reaches it through its node port, which the laptop reverse-forwards (``pycharm_link``).

Like a debugpy rank, a PyCharm rank costs nothing until a debugger is wanted: it starts *idle*
(pydevd not even imported) with a control channel.  Then:

* ``attach --ide pycharm`` sets up the reverse forward and asks through the control channel
  (``connect``): the rank connects from a background thread - the main thread may be busy or
  blocked in a collective - and pydevd traces every thread (:class:`PyCharmDebugger`);
* with ``--wait S`` the rank instead tries during its first S seconds, before the script runs on,
  so breakpoints on the first lines stop too;
* when PyCharm goes away (Stop, an IDE restart, the tunnel dropped) pydevd disposes itself; the rank
  then removes the tracer from every thread (``trace_switch``: the idle cost again) and is idle,
  ready to be asked again - the attach asks when the IDE's port is back;
* with ``--hold-on-failure`` a crashed rank connects and PyCharm stops at the exception (``hold``).

Every wait is bounded: the path is proven before ``settrace`` (``pycharm_link``), and a watchdog
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
import socket
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

from remote_debug.container import node_env
from remote_debug.container.log import describe, log
from remote_debug.container.rank import pycharm_top_level
from remote_debug.container.rank.control import ControlServer
from remote_debug.container.rank.hold import ExcInfo, FailureHook, traceback_frames, track_unhandled_stops
from remote_debug.container.rank.pycharm_link import Connection, connect_within, node_port
from remote_debug.container.rank.reporter import FINAL_STATES, RankIdentity, RankReporter, install_exit_reporting
from remote_debug.container.rank.trace_switch import TraceSwitch, uses_sys_monitoring
from remote_debug.container.threads import quiet_thread
from remote_debug.contract.pycharm_spec import PYDEVD_DIST, satisfies
from remote_debug.contract.spec import LOOPBACK, ContractError, DebugSpec, RankEndpoint, RankState

ENV_PATH_MAPPINGS = "PATHS_FROM_ECLIPSE_TO_PYTHON"  # read by pydevd_file_utils when it is imported
RUN_GRACE = 15.0  # a proven handshake gets this long for the IDE's breakpoints + "run"
WATCH_SECONDS = 0.5
ASK_WINDOW = 15.0  # a "connect" request: how long the rank tries (the IDE may still be starting)


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

    from remote_debug.container.rank import tensor_view

    tensor_view.install()  # pydevd is loaded: the tensor view goes in before the IDE can ask (never raises)
    done, forced = threading.Event(), threading.Event()
    debuggers: list[Any] = []
    until = max(deadline, time.monotonic() + RUN_GRACE)
    quiet_thread(lambda: _release_when(done, forced, until, debuggers), "remote-debug-settrace").start()
    try:
        with _handed_over(pydevd, conn, debuggers):
            # 127.0.0.1 rather than "localhost": the tunnel listens on IPv4 loopback only.
            pydevd_pycharm.settrace(LOOPBACK, port=port, suspend=False, **output_kwargs(pydevd_pycharm.settrace, True))
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
    """Publish this rank idle (or waiting, with ``--wait``), reachable through its control channel."""
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

    debugger = PyCharmDebugger(rank, port, env)
    waiting = spec.wait_seconds > 0
    try:
        control = ControlServer(_connects_out, env, on_run_on=debugger.run_on, on_connect=debugger.request)
        endpoint = replace(endpoint, control_port=control.port)
    except Exception as exc:  # nobody can ask: only the wait window can connect this rank
        log(f"rank {rank}: control channel not started: {describe(exc)}")
    # Published before the first try: the laptop reads the port here to set up the reverse forward.
    reporter = RankReporter(
        directory, replace(endpoint, port=port, state=RankState.WAITING if waiting else RankState.IDLE)
    )
    debugger.reporter = reporter
    debugger.failure_hook = install_exit_reporting(
        reporter, hold_seconds=spec.hold_on_failure, debugger=debugger if endpoint.control_port else None
    )
    if waiting:
        debugger.connect_in_window(time.monotonic() + spec.wait_seconds, spec.wait_seconds)
    return reporter


class PyCharmDebugger:
    """pydevd-pycharm in this rank: connected on request, tracing removed when the IDE goes away,
    connected again when asked.  Also the hold's :class:`~remote_debug.container.rank.hold.PostMortem`."""

    def __init__(self, rank: int, port: int, env: Mapping[str, str]) -> None:
        self.rank = rank
        self.port = port  # the node port the laptop reverse-forwards to PyCharm
        self.env = env
        self.reporter: RankReporter | None = None
        self.failure_hook: FailureHook | None = None
        self.tracing = TraceSwitch()
        self.sessions = 0  # PyCharm sessions so far (a new one after the first needs pydevd reset)
        self._lock = threading.Lock()
        self._connecting = False
        self._py_db: Any = None  # the live session's debugger
        self._window_stop = threading.Event()  # "run-on": leave the wait window
        self._window_open = False

    # --- asking ------------------------------------------------------------------------------------

    def live(self) -> bool:
        db = self._py_db
        return db is not None and not getattr(db, "pydb_disposed", False) and _global_debugger() is db

    def request(self, window: float = ASK_WINDOW) -> str:
        """The control channel's "connect": try to reach PyCharm for ``window`` seconds from a background
        thread (the main thread may be blocked in a collective); answers at once."""
        with self._lock:
            if self.live():
                return "attached"
            if self._connecting:
                return "connecting"
            self._connecting = True
        deadline = time.monotonic() + window
        quiet_thread(lambda: self._connect(deadline, window), "remote-debug-pycharm-connect").start()
        return "connecting"

    def connect_in_window(self, deadline: float, seconds: float) -> None:
        """``--wait``: try on the calling (main) thread until ``deadline``, or until "run-on"."""
        with self._lock:
            self._connecting = True
            self._window_open = True
        try:
            self._connect(deadline, seconds, stop=self._window_stop)
        finally:
            self._window_open = False

    def run_on(self) -> str:
        """The control channel's "run-on": attach selected other ranks, so leave the wait window now."""
        if not self._window_open:
            return "not waiting"
        self._window_stop.set()
        return "leaving the wait window"

    def _connect(self, deadline: float, seconds: float, stop: threading.Event | None = None) -> None:
        reporter = self.reporter
        assert reporter is not None
        try:
            conn, reason = connect_within(self.port, deadline, stop)
            if conn is None:
                log(
                    f"rank {self.rank}: no PyCharm debugger within {seconds:g} s ({reason}); training runs on, "
                    "and 'remote-debug attach JOB --ide pycharm' can connect it later"
                )
                reporter.update(state=RankState.IDLE, error=reason, unless=(*FINAL_STATES, RankState.HELD))
                return
            started = time.monotonic()
            try:
                attached, why = self._attach(conn, deadline)
            except Exception as exc:  # pydevd failed inside: the rank must train on regardless
                attached, why = False, f"pydevd failed: {describe(exc)}"
            if not attached:
                log(f"rank {self.rank}: PyCharm debugger not attached ({why}); training runs on without it")
                self._untrace()
                reporter.update(state=RankState.IDLE, error=why, unless=(*FINAL_STATES, RankState.HELD))
                return
            self.sessions += 1
            log(
                f"rank {self.rank}: PyCharm debugger attached via localhost:{self.port} "
                f"in {time.monotonic() - started:.2f} s" + (f" (session {self.sessions})" if self.sessions > 1 else "")
            )
            reporter.update(state=RankState.ATTACHED, error="", unless=(*FINAL_STATES, RankState.HELD))
            quiet_thread(self._watch, "remote-debug-pycharm-watch").start()
        finally:
            with self._lock:
                self._connecting = False

    # --- one session -------------------------------------------------------------------------------

    def _attach(self, conn: Connection, deadline: float) -> tuple[bool, str]:
        hello = conn.hello
        # pydevd names frames by their real path: map the real code dir, or symlinked dirs never match.
        code_dir = os.path.realpath(node_env.rank_code_dir(sys.orig_argv, self.env) or node_env.code_dir(self.env))
        mappings = merged_path_mappings(os.environ.get(ENV_PATH_MAPPINGS), hello.ide_root if hello else "", code_dir)
        if mappings is not None:
            os.environ[ENV_PATH_MAPPINGS] = mappings
            _apply_path_mappings(mappings)  # a second session: pydevd_file_utils read the variable already
        if hello and hello.build:
            have = installed_pydevd()
            if have and not _safe_satisfies(have, hello.build):
                log(
                    f"rank {self.rank}: pydevd-pycharm {have} does not match PyCharm build {hello.build}; "
                    f"install 'pydevd-pycharm~={hello.build}' in the job (debugging may misbehave)"
                )
        os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
        if self.sessions:
            _forget_last_session()
        attached, why = settrace(conn, self.port, deadline)
        if not attached:
            return False, why
        self._py_db = _global_debugger()
        if self._py_db is not None and not pycharm_top_level.install(self._py_db):
            log(f"rank {self.rank}: pydevd-pycharm has no trace_dispatch to wrap: a top-level loop may overflow")
        if self.failure_hook is not None:
            self.failure_hook.reinstall()  # pydevd put its own excepthook there (it would exit the process)
        track_unhandled_stops()
        # settrace put pydevd's tracer into every thread in one attempt, which a thread starting another
        # one at that moment misses (see TraceSwitch): once more, with receipts and retries
        if not uses_sys_monitoring():
            try:
                self.tracing.set(True)
            except Exception as exc:
                log(f"rank {self.rank}: cannot check tracing after connecting: {describe(exc)}")
        return True, ""

    def _watch(self) -> None:
        """Until PyCharm goes away (pydevd disposes itself and lets paused threads run): then untrace."""
        reporter = self.reporter
        assert reporter is not None
        while reporter.state not in FINAL_STATES:
            if not self.live():
                self._py_db = None
                self._untrace()
                log(f"rank {self.rank}: PyCharm debugger gone; tracing removed (attach again to reconnect)")
                reporter.update(state=RankState.IDLE, unless=(*FINAL_STATES, RankState.HELD))
                return
            with contextlib.suppress(Exception):
                self.tracing.retry()
            time.sleep(WATCH_SECONDS)

    def _untrace(self) -> None:
        """No tracer left in any thread, output no longer copied for the IDE, our excepthook back."""
        if self.failure_hook is not None:
            self.failure_hook.reinstall()
        _end_output_redirect()
        if "pydevd" not in sys.modules or uses_sys_monitoring():
            return
        try:
            self.tracing.set(False)
        except Exception as exc:
            log(f"rank {self.rank}: cannot remove tracing after PyCharm left: {describe(exc)}")

    # --- the post-mortem hold (hold.PostMortem) ----------------------------------------------------

    def start(self) -> str:
        self.request(window=ASK_WINDOW)
        return f"PyCharm, through node port {self.port}"

    def attached(self) -> bool:
        if not self.live():
            if not self._connecting:
                self.request(window=ASK_WINDOW)  # PyCharm may have come back: try again
            return False
        return bool(getattr(self._py_db, "ready_to_run", True))

    def stop_at(self, excinfo: ExcInfo) -> None:
        """Stop the calling thread at the exception, as PyCharm's own post-mortem stop does."""
        from _pydevd_bundle import pydevd_breakpoints
        from _pydevd_bundle.pydevd_additional_thread_info import set_additional_thread_info

        py_db = self._py_db
        frames = traceback_frames(excinfo)
        if py_db is None or not frames:
            return
        thread = threading.current_thread()
        info = set_additional_thread_info(thread)
        hook = sys.excepthook
        sys.excepthook = pydevd_breakpoints.dummy_excepthook  # pydevd would print the traceback once more
        info.is_tracing += 1
        try:
            py_db.stop_on_unhandled_exception(thread, frames[-1], {id(f): f for f in frames}, excinfo)
        finally:
            info.is_tracing -= 1
            sys.excepthook = hook


def _forget_last_session() -> None:
    """pydevd-pycharm is made for one settrace per process: after a session ended, reset what it kept,
    so that settrace connects again (as its own ``settrace_forked`` does)."""
    import pydevd

    pydevd.connected = False
    pydevd.SetupHolder.setup = None


def _apply_path_mappings(mappings: str) -> None:
    file_utils = sys.modules.get("pydevd_file_utils")
    if file_utils is None:
        return  # read from the environment when pydevd imports it
    with contextlib.suppress(Exception):
        file_utils.setup_client_server_paths(json.loads(mappings))


def _end_output_redirect() -> None:
    """Undo settrace's copy of stdout/stderr for the IDE: with nobody reading it, it would grow for the
    rest of the run (and be sent in one burst at the next session)."""
    for name in ("stdout", "stderr"):
        original = getattr(sys, f"{name}_original", None)
        if original is not None and hasattr(sys, f"_pydevd_{name[3:]}_buffer_"):
            setattr(sys, name, original)
            delattr(sys, f"_pydevd_{name[3:]}_buffer_")
            delattr(sys, f"{name}_original")


def _safe_satisfies(installed: str, build: str) -> bool:
    try:
        return satisfies(installed, build)
    except ContractError:
        return True  # an unusual build string is the laptop's business; do not nag every rank
