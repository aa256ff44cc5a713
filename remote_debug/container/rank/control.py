"""A rank's control channel: a loopback TCP listener served by a daemon thread of the rank.

It is a separate thread, so it answers while the rank's main thread is blocked in a collective or
a C call (a signal handler would not run then).  Reached only through the node's sshd, like the
debug port.  One JSON line in, one JSON line out, per connection (the ops: ``spec.ControlOp``; the replies:
``contract.control_replies``, which the laptop reads):

* ``{"op": "listen"}`` -> ``{"ok": true, "port": N}``: start debugpy now (lazy listeners) and make
  collectives pause-safe (see ``pause_safe``);
* ``{"op": "pause-safe"}`` -> ``{"ok": true, "detail": ...}``: a debugger attached somewhere in the
  job: raise this rank's process-group timeout so a paused peer does not kill the job;
* ``{"op": "stacks"}`` -> ``{"ok": true, "threads": [{"name", "frames": [{"file", "line",
  "function"}], "exception", "internal"}]}``: every thread's current Python stack, from
  ``sys._current_frames()`` (no tracing installed, no ptrace); the debugger's own threads (debugpy's,
  ours) only with ``"all_threads": true``.  A rank held for a post-mortem (``hold``) reports the
  exception's traceback for the held thread, and the exception line; with PyTorch's Flight Recorder on,
  ``"collectives"``: per process group, the newest collective the rank entered (``flight_recorder``);
* ``{"op": "run-on"}`` -> ``{"ok": true, "detail": ...}``: leave the wait window now (attach chose
  other ranks), see ``rank._wait_for_client``;
* ``{"op": "connect"}`` -> ``{"ok": true, "status": "connecting"|"attached", "detail": ...}``: a PyCharm
  rank connects out to the IDE now, from a background thread (``pycharm_rank``), and is made pause-safe.

Every request carries ``"auth"``: the job's control token (``job_secret.control_token``), which only
a process that can read the job's environment (the laptop derives it from the job's key) can know.
A connection from another local user is closed before it is read (``peer_uid``).

The laptop proves the rank before it sends the token or any request: its first line is
``{"challenge": NONCE}``, answered with ``{"ok": true, "proof": ...}`` (``job_secret.rank_proof``: an
HMAC under the job secret over the nonce, this pid and this port); its request follows on the same
connection.  Whoever binds the port of a rank that died (its document still names the port) cannot
answer, and learns nothing.  A request without a challenge first is still served (the token is
checked as before): the proof protects the client, not the rank.

Stdlib only; torch is used only when the rank already imported ``torch.distributed``.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import inspect
import json
import os
import queue
import selectors
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from remote_debug.container.knobs import seconds_knob
from remote_debug.container.log import describe, log
from remote_debug.container.rank import flight_recorder, hold
from remote_debug.container.threads import quiet_thread
from remote_debug.contract import control_replies as replies
from remote_debug.contract import job_secret
from remote_debug.contract.spec import ENV_JOB_SECRET, ENV_PG_TIMEOUT, LOOPBACK, ControlOp
from remote_debug.oskit import peer_uid

MAX_REQUEST = 4096
REQUEST_DEADLINE = 5.0  # seconds from accept to a complete request line (and to send the reply)
MAX_PENDING = 32  # connections waiting for their request line; a new one evicts the oldest
MAX_WORKERS = 4  # threads running requests ("listen" may take seconds)
LOGGED_REFUSALS = 5  # refusals logged one by one; the rest are only counted
DEFAULT_PG_TIMEOUT_SECONDS = 7200.0  # long enough for a debugging session
MAX_PG_TIMEOUT_SECONDS = 365 * 24 * 3600.0  # anything beyond is a typo (and timedelta has a limit)
PENDING_POLL_SECONDS = 0.05  # raise the timeout this soon after a late init_process_group
C10D_MODULE = "torch.distributed.distributed_c10d"
DIST_MODULE = "torch.distributed"
NO_GROUP = "no process group"  # pause_safe's "not yet": the rank raises it itself once the group exists
_HOOK_MARK = "_remote_debug_pause_safe"  # on our init_process_group wrapper: never wrapped twice


def pg_timeout_seconds(env: Mapping[str, str]) -> float:
    """``REMOTE_DEBUG_PG_TIMEOUT``: 0 leaves the process-group timeout alone."""
    return seconds_knob(env, ENV_PG_TIMEOUT, DEFAULT_PG_TIMEOUT_SECONDS, high=MAX_PG_TIMEOUT_SECONDS)


_raised_to = 0.0  # the highest timeout pause_safe set in this process


def pause_safe(seconds: float) -> str:
    """Raise the default process group's timeout to ``seconds`` (a rank paused at a breakpoint
    must not make its peers' collectives time out and torchrun kill the job).

    Gloo and NCCL both honour ``_set_pg_timeout`` for new collectives.  GPU jobs also have NCCL's
    watchdog, which is configured only by environment variables read when the process group is
    created: set ``TORCH_NCCL_ENABLE_MONITORING=0`` (or a long ``TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC``)
    in the job's environment when ranks are to be paused for long (see docs/PERFORMANCE.md).
    Not undone on detach: collectives already in flight keep the timeout they started with, and a
    long timeout costs nothing while the job runs.

    :data:`NO_GROUP` means "not yet" (torch not imported, still being imported, or no
    ``init_process_group`` yet); an exception is an error that will not go away.
    """
    if seconds <= 0:
        return "disabled"
    c10d: Any = sys.modules.get(C10D_MODULE)
    if c10d is None or _still_importing(c10d):
        return NO_GROUP
    try:
        initialised = c10d.is_initialized()
    except (AttributeError, ImportError):  # a module torch is still importing, whatever its spec says
        return NO_GROUP
    if not initialised:
        return NO_GROUP
    set_timeout = getattr(c10d, "_set_pg_timeout", None)
    if set_timeout is None:  # a torch older than _set_pg_timeout: no way to raise it
        raise AttributeError(f"{C10D_MODULE} has no _set_pg_timeout (torch too old)")
    global _raised_to
    # never lower it: a gang hold raised it past the hold, and an attach asking for its 2 h must not undo that
    seconds = max(seconds, _raised_to)
    set_timeout(timedelta(seconds=seconds), None)
    _raised_to = seconds
    return f"process-group timeout {seconds:g} s"


def _still_importing(c10d: Any) -> bool:
    """The training script's own thread may be importing torch.distributed as the IDE attaches: the
    module is already in sys.modules but its functions are not yet defined (a read then raises
    AttributeError "partially initialized module").  No process group can exist before that import
    ends.  Both modules are asked: c10d is done a moment before the package that imports it is."""
    try:
        for module in (sys.modules.get(DIST_MODULE), c10d):
            if module is not None and getattr(module.__spec__, "_initializing", False):
                return True
        return not hasattr(c10d, "is_initialized")
    except (AttributeError, ImportError):  # an odd module object mid-import: not yet, never an error
        return True


def _hook_init_process_group(seconds: float, on_applied: Callable[[], None]) -> None:
    """Make ``init_process_group`` raise the timeout itself, before it returns.

    Why: the pending retry polls every :data:`PENDING_POLL_SECONDS`, and a rank that calls
    ``all_reduce`` right after ``init_process_group`` (rank 1 while rank 0 is held at a breakpoint
    just after init) starts it with the script's short timeout before the next poll; a collective in
    flight keeps the timeout it started with.  Wrapping the function in both namespaces
    (``torch.distributed`` copies it from c10d) is what every caller reaches unless it bound the
    name itself before this ran (``from torch.distributed import init_process_group``), for which
    the poll remains.  Installed only while pause-safe is pending, once c10d is fully imported (the
    retry checks again on every poll, so a rebinding is wrapped too).  Cheaper and less intrusive
    than an import hook, and safe when torch's internals differ: the wrapper calls the original with
    the script's arguments (only a shorter ``timeout`` raised, so the group's rendezvous outlasts a
    held peer too: ``_with_raised_timeout``), then applies the timeout, and logs any failure of its own once.
    """
    try:
        c10d: Any = sys.modules.get(C10D_MODULE)
        if c10d is None or _still_importing(c10d):
            return
        wrapped: dict[int, Callable[..., Any]] = {}  # id(original) -> its wrapper: one wrapper for both names
        namespaces: tuple[Any, ...] = (c10d, sys.modules.get(DIST_MODULE))
        for module in namespaces:
            current = getattr(module, "init_process_group", None) if module is not None else None
            if not callable(current) or getattr(current, _HOOK_MARK, False):
                continue
            if id(current) not in wrapped:
                wrapped[id(current)] = _applying_after(current, seconds, on_applied)
            module.init_process_group = wrapped[id(current)]
    except Exception as exc:  # never let a torch we do not know break the rank: the poll remains
        _log_once(f"cannot hook init_process_group (the timeout is raised by polling): {describe(exc)}")


def _applying_after(init: Callable[..., Any], seconds: float, on_applied: Callable[[], None]) -> Callable[..., Any]:
    try:
        signature: inspect.Signature | None = inspect.signature(init)
    except (TypeError, ValueError):  # a builtin or odd callable: called as it is
        signature = None

    @functools.wraps(init)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        args, kwargs = _with_raised_timeout(signature, seconds, args, kwargs)
        result = init(*args, **kwargs)  # its exceptions are the script's, untouched
        try:
            if pause_safe(seconds) != NO_GROUP:
                on_applied()
        except Exception as exc:
            _log_once(f"cannot raise the process-group timeout: {describe(exc)}")
        return result

    setattr(init_process_group, _HOOK_MARK, True)
    return init_process_group


def _with_raised_timeout(
    signature: inspect.Signature | None, seconds: float, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The script's arguments to ``init_process_group``, its ``timeout`` raised to pause-safe's.

    Why: the group's rendezvous inside ``init_process_group`` (the store waits in which every rank
    publishes its address) runs with that timeout, before any collective.  A rank held by its
    debugger, or slowed by tracing while torch imports, reaches it seconds after its peers, and a
    peer waiting with the script's short timeout fails the job there.  Never lowers a longer
    timeout the script asked for; arguments that do not bind are passed unchanged (the script's own
    TypeError is what it gets)."""
    if signature is None or "timeout" not in signature.parameters:
        return args, kwargs
    try:
        bound = signature.bind_partial(*args, **kwargs)
    except TypeError:
        return args, kwargs
    asked = bound.arguments.get("timeout")
    raised = timedelta(seconds=max(seconds, _raised_to))
    if asked is None or (isinstance(asked, timedelta) and asked < raised):
        bound.arguments["timeout"] = raised
    return bound.args, bound.kwargs


_logged: set[str] = set()


def _log_once(message: str) -> None:
    """An error that repeats (every init, every poll) is worth one line in the rank's output."""
    if message not in _logged:
        _logged.add(message)
        log(message)


def thread_stacks(*, all_threads: bool = False) -> list[replies.ThreadStack]:
    """Every thread's Python stack (outermost frame first); the debugger's own threads (debugpy's and
    remote_debug's) only with ``all_threads``, marked ``internal``.  The thread a post-mortem hold
    keeps alive shows the exception's traceback, not the excepthook it waits in."""
    threads = {t.ident: t for t in threading.enumerate()}
    held = hold.held()
    result = []
    for ident, frame in sys._current_frames().items():
        thread = threads.get(ident)
        stack = traceback.extract_stack(frame)
        internal = _internal(thread, stack)
        if internal and not all_threads:
            continue
        exception = None
        if held is not None and held.thread == ident:
            _type, exc, tb = held.excinfo
            stack = traceback.extract_tb(tb)  # where it raised, as Python printed it
            exception = describe(exc)
        result.append(
            replies.ThreadStack(
                name=thread.name if thread is not None else f"thread-{ident}",
                frames=[replies.Frame(file=f.filename, line=f.lineno or 0, function=f.name) for f in stack],
                exception=exception,
                internal=internal,
            )
        )
    return result


def _debugger_dirs() -> tuple[str, ...]:
    """Where the debugger's code lives: debugpy (its vendored pydevd included) and remote_debug."""
    dirs = [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]  # the remote_debug package
    for name in ("debugpy", "pydevd"):
        module = sys.modules.get(name)
        path = getattr(module, "__file__", None)
        if path:
            dirs.append(os.path.dirname(os.path.abspath(path)))
    return tuple(d + os.sep for d in dirs)


def _internal(thread: threading.Thread | None, stack: traceback.StackSummary) -> bool:
    """A thread of the debugger rather than of the training script.

    Ours and some of pydevd's carry pydevd's marks; pydevd also takes its own threads out of
    ``threading``'s table, so those are known by where they run: the first frame below threading's
    bootstrap (their ``run``) is in debugpy's code.  Only that entry frame counts: a user's thread
    stopped at a breakpoint has pydevd's frames too, but at the innermost end.
    """
    if thread is not None:
        return bool(getattr(thread, "is_pydev_daemon_thread", False) or getattr(thread, "pydev_do_not_trace", False))
    entry = next((f for f in stack if os.path.basename(f.filename) != "threading.py"), None)
    return entry is not None and os.path.abspath(entry.filename).startswith(_debugger_dirs())


def _line(reply: replies.Reply) -> bytes:
    return json.dumps(reply.to_json()).encode() + b"\n"


@dataclass
class _Waiting:
    deadline: float  # monotonic
    data: bytes = b""
    challenged: bool = False  # the client's challenge was answered: the next line is its request


class ControlServer:
    """The rank's control listener: one thread multiplexes every connection (``selectors``), and at
    most :data:`MAX_WORKERS` threads run requests.

    Why not a thread per connection: a local process trickling bytes into many connections held a
    thread each (480 after 36 s), and when threads ran out the accept loop died.  Now a connection
    costs a socket until its line is complete or :data:`REQUEST_DEADLINE` s have passed since it
    was accepted (whichever first), at most :data:`MAX_PENDING` wait at once (a new one evicts the
    oldest: a real client sends its line at once, a trickle is what waits), and nothing that a
    client does makes the loop raise.

    A connection is served only if it comes from our own uid (``peer_uid``) and the request carries
    the job's control token (``job_secret``): proof that the sender can read the job's environment.
    """

    def __init__(
        self,
        on_listen: Callable[[], int],
        env: Mapping[str, str],
        on_run_on: Callable[[], str] | None = None,
        on_connect: Callable[[], str] | None = None,
    ) -> None:
        self.on_listen = on_listen
        self.on_run_on = on_run_on  # None: this rank never waits for a debugger
        self.on_connect = on_connect  # None: not a PyCharm rank
        self.pg_timeout = pg_timeout_seconds(env)
        self._secret = env.get(ENV_JOB_SECRET, "").strip()
        self._check_uid = peer_uid.supported()
        self._lock = threading.Lock()
        self._pending = False
        self.refused = 0  # connections or requests turned away (uid, token, eviction, deadline)
        self._server = socket.socket()
        self._server.bind((LOOPBACK, 0))
        self._server.listen(64)
        self._server.setblocking(False)
        self.port = int(self._server.getsockname()[1])
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._server, selectors.EVENT_READ)
        self._waiting: dict[socket.socket, _Waiting] = {}  # insertion order = accept order
        self._work: queue.SimpleQueue[tuple[socket.socket, bytes]] = queue.SimpleQueue()
        self._workers = 0
        self._idle_workers = 0
        quiet_thread(self._loop, "remote-debug-control").start()

    # --- the one loop ------------------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            try:
                if not self._turn():
                    return
            except Exception as exc:  # a bug or a resource shortage: never stop answering
                log(f"control channel: {describe(exc)}")
                time.sleep(0.05)

    def _turn(self) -> bool:
        """One round of the loop; False once the listener is closed."""
        now = time.monotonic()
        timeout = min((w.deadline for w in self._waiting.values()), default=now + 60) - now
        for key, _ in self._selector.select(max(0.0, timeout)):
            if key.fileobj is self._server:
                if not self._accept():
                    return False
            else:
                self._read(key.fileobj)  # type: ignore[arg-type]
        now = time.monotonic()
        for conn in [c for c, w in self._waiting.items() if w.deadline <= now]:
            self._drop(conn, "no complete request in time")
        return True

    def _accept(self) -> bool:
        for _ in range(64):  # everything queued, but let the waiting connections have their turn
            try:
                conn, _ = self._server.accept()
            except (BlockingIOError, InterruptedError):
                return True
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    log(f"control channel: cannot accept: {describe(exc)}")
                    time.sleep(0.05)  # the backlog keeps them; try again soon
                    return True
                return False  # closed
            if self._check_uid:
                verdict = peer_uid.peer_verdict(conn)
                if not verdict.allowed:
                    self._refuse(conn, verdict.reason)
                    continue
            if len(self._waiting) >= MAX_PENDING:
                self._drop(next(iter(self._waiting)), f"more than {MAX_PENDING} connections waiting")
            conn.setblocking(False)
            self._waiting[conn] = _Waiting(time.monotonic() + REQUEST_DEADLINE)
            self._selector.register(conn, selectors.EVENT_READ)
        return True

    def _read(self, conn: socket.socket) -> None:
        waiting = self._waiting.get(conn)
        if waiting is None:
            return
        try:
            chunk = conn.recv(MAX_REQUEST)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        waiting.data += chunk
        if not waiting.challenged and b"\n" in waiting.data:
            first, rest = waiting.data.split(b"\n", 1)
            answer = self._challenge_answer(first)
            if answer is not None:  # the client asks us to prove the rank first: its request comes after
                waiting.challenged, waiting.data = True, rest
                waiting.deadline = time.monotonic() + REQUEST_DEADLINE  # its request comes a round trip later
                if not self._send_now(conn, answer):
                    self._drop(conn, "the answer to its challenge could not be sent")
                    return
        if chunk and b"\n" not in waiting.data and len(waiting.data) < MAX_REQUEST:
            return
        self._selector.unregister(conn)
        del self._waiting[conn]
        if not chunk and not waiting.data:
            conn.close()  # connected and went away
            return
        self._hand_over(conn, waiting.data.split(b"\n", 1)[0])

    def _challenge_answer(self, line: bytes) -> bytes | None:
        """The answer to a challenge line ``{"challenge": NONCE}`` (None: the line is a request), see
        ``job_secret.rank_proof``: bound to this process and this port, as the rank document names them."""
        try:
            message = json.loads(line)
        except ValueError:
            return None
        if not isinstance(message, dict) or "challenge" not in message or "op" in message:
            return None
        try:
            proof = job_secret.rank_proof(self._secret, message["challenge"], os.getpid(), self.port)
        except job_secret.SecretError as exc:  # a malformed nonce, or no usable secret here
            return _line(replies.Refused(error=f"cannot answer the challenge: {exc}"))
        return _line(replies.Proof(proof=proof))

    @staticmethod
    def _send_now(conn: socket.socket, data: bytes) -> bool:
        """A short answer from the loop itself (a fresh connection's buffer takes it whole)."""
        try:
            return conn.send(data) == len(data)
        except OSError:
            return False

    def _drop(self, conn: socket.socket, why: str) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(conn)
        self._waiting.pop(conn, None)
        self._refuse(conn, why)

    def _refuse(self, conn: socket.socket, why: str) -> None:
        self._count_refusal(f"a connection: {why}")
        conn.close()

    def _count_refusal(self, what: str) -> None:
        self.refused += 1
        if self.refused <= LOGGED_REFUSALS:
            log(
                f"control channel refused {what}"
                + (" (further refusals are counted, not logged)" if self.refused == LOGGED_REFUSALS else "")
            )

    # --- requests ------------------------------------------------------------------------------------

    def _hand_over(self, conn: socket.socket, line: bytes) -> None:
        """Run the request on a worker: "listen" may take seconds, and the loop must keep answering."""
        self._work.put((conn, line))
        with self._lock:
            start = self._idle_workers == 0 and self._workers < MAX_WORKERS
            if start:
                self._workers += 1
        if start:
            try:
                quiet_thread(self._worker, "remote-debug-control-worker").start()
            except RuntimeError as exc:  # no thread to be had: the ones running will get to it
                with self._lock:
                    self._workers -= 1
                    alone = self._workers == 0
                log(f"control channel: cannot start a worker: {describe(exc)}")
                if alone:  # nobody will: answer here, late rather than never
                    self._serve(*self._work.get())

    def _worker(self) -> None:
        while True:
            with self._lock:
                self._idle_workers += 1
            try:
                conn, line = self._work.get()
            finally:
                with self._lock:
                    self._idle_workers -= 1
            try:
                self._serve(conn, line)
            except Exception as exc:
                log(f"control channel: {describe(exc)}")

    def _serve(self, conn: socket.socket, line: bytes) -> None:
        with conn:
            try:
                request = json.loads(line or b"{}")
                if not self._authorised(request):
                    self._count_refusal("a request without the job's control token")
                    reply: replies.Reply = replies.Refused(error="not authorised: the request lacks the job's token")
                else:
                    reply = self.handle(request)
            except Exception as exc:  # a bad request never takes the rank down
                reply = replies.Refused(error=describe(exc))
            try:
                conn.setblocking(True)
                conn.settimeout(REQUEST_DEADLINE)
                conn.sendall(_line(reply))
            except OSError:
                pass

    def _authorised(self, request: Any) -> bool:
        if not self._secret or not isinstance(request, dict):
            return False
        try:
            return job_secret.token_matches(self._secret, request.get("auth"))
        except job_secret.SecretError:  # a malformed secret in the environment: nobody gets in
            return False

    def handle(self, request: Any) -> replies.Reply:
        op = request.get("op") if isinstance(request, dict) else None
        if op == ControlOp.LISTEN:
            port = self.on_listen()
            return replies.Listening(port=port, detail=self._pause_safe())
        if op == ControlOp.PAUSE_SAFE:
            return replies.Detail(detail=self._pause_safe())
        if op == ControlOp.STACKS:
            threads = thread_stacks(all_threads=request.get("all_threads") is True)
            return replies.Stacks(pid=os.getpid(), threads=threads, collectives=flight_recorder.collectives())
        if op == ControlOp.RUN_ON:
            return replies.Detail(detail=self.on_run_on() if self.on_run_on is not None else "not waiting")
        if op == ControlOp.CONNECT:
            if self.on_connect is None:
                return replies.Refused(error="this rank does not connect out to an IDE (it is not a PyCharm rank)")
            return replies.Connecting(status=self.on_connect(), detail=self._pause_safe())
        return replies.Refused(error=f"unknown op {op!r}")

    def _pause_safe(self) -> str:
        try:
            detail = pause_safe(self.pg_timeout)
        except Exception as exc:
            log(f"cannot raise the process-group timeout: {describe(exc)}")
            return f"failed: {describe(exc)}"
        if detail == NO_GROUP:
            # attached before init_process_group: raise it as soon as the group exists
            with self._lock:
                if not self._pending:
                    self._pending = True
                    applied = threading.Event()
                    _hook_init_process_group(self.pg_timeout, applied.set)  # torch imported: hooked now
                    retry = functools.partial(self._apply_when_initialised, applied)
                    quiet_thread(retry, "remote-debug-pause-safe").start()
            return "pending: no process group yet"
        return detail

    def _apply_when_initialised(self, applied: threading.Event) -> None:
        """Poll until the default process group exists, then raise its timeout.  Everything short of
        that is "not yet" (torch not imported, half-imported by the script's thread, no group yet);
        hook ``init_process_group`` as soon as c10d is imported, so that the group gets the timeout
        before its first collective (``_hook_init_process_group``).  Ends once applied (by the hook
        or here), or on an error that will not go away (logged once)."""
        while not applied.wait(PENDING_POLL_SECONDS):  # a few dict reads a poll: no hot spin, no long GIL hold
            try:
                detail = pause_safe(self.pg_timeout)
            except Exception as exc:  # the hooked init may have said it already
                _log_once(f"cannot raise the process-group timeout: {describe(exc)}")
                return
            if detail != NO_GROUP:
                return
            _hook_init_process_group(self.pg_timeout, applied.set)
