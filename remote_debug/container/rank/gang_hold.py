"""Hold on failure, the whole gang: when one rank is held at its exception, every other rank is held too.

Without this, the first rank that dies of an uncaught exception is held (``hold``) and its peers run on
into their next collective, where they wait for it until the process-group timeout kills them with an
exception of their own - a misleading one, and the launcher's teardown takes the job down with it.  With
it, every rank of the job stays where it was at the moment of the failure, alive, for a debugger:

* **The channel is torch.distributed's default store** (``_get_default_store()``, a TCPStore every rank
  of the group reaches, on every node, through the job's own network; its client is thread-safe).  The
  failing rank puts ``{rank, error, failed_at, hold_until}`` under :data:`FAILED_KEY` with
  ``compare_set`` before it holds: the first failure in the job wins, whatever the nodes' clocks say, and
  a rank that fails a moment later learns it is not the root cause.  Every rank with hold on failure
  runs one quiet thread that, once a group exists, looks for that key with ``store.check`` every
  :data:`POLL_SECONDS` (one round trip to the store: measured 30 us of CPU, 65 us of wall time, with the store
  served by another process as torchrun's agent does; the thread sleeps otherwise - well under 0.1 % of a core,
  ``tests/container/test_gang_hold.py`` holds it to that).  Why not a signal, or the launcher:
  torchrun and mpirun know only their own node, a signal reaches no other node, and the ranks have no
  other channel to each other than the job's network - which the store already crosses.  A job without a
  torch.distributed group (mpi4py alone) keeps the single-rank hold.
* **A rank that learns of the failure** (a) raises its process-group timeout at once (``control.pause_safe``),
  (b) reports ``state="held"`` with ``held_for`` = the failed rank and its exception line, and (c) stays
  until released.  Its debugger is made reachable as the failed rank's is, and pydevd suspends its main
  thread where it is: a thread in Python code stops at its next line; a thread blocked in a collective
  (the usual place: waiting for the failed rank) or another C call can only stop when that call returns to
  Python - ``stacks`` shows where it waits meanwhile.  A debugger that attaches later is told the thread
  is stopped (pydevd tells only the client connected at the moment of a stop, so the stop is announced
  again).  A rank that runs to the end of its script meanwhile waits at exit.
* **Collectives already in flight** keep the timeout they started with (gloo and NCCL read it when an
  operation starts), and the peers of a failed rank are usually in one when it fails.  So as soon as the
  group exists, a rank with hold on failure makes its process-group timeout at least the hold plus
  :data:`TIMEOUT_MARGIN_SECONDS` (never lower than it is): a hold of H seconds means the job's collectives
  wait at least H seconds.  ``REMOTE_DEBUG_PG_TIMEOUT=0`` (leave the timeout alone) turns both raises off.
  A collective that times out anyway (a debugger kept the failed rank longer than that) raises in the
  peer; its excepthook holds it as well, with ``held_for`` set: never the job's failure reason.
* **Release**: when the failed rank's hold ends (its time ran out, or the debugger continued or
  detached), it sets :data:`RELEASED_KEY` and exits with its failure (exit code 1, as without the hold).
  Each peer then waits :data:`RELEASE_GRACE_SECONDS` for its launcher's own teardown (torchrun's SIGTERM
  on the failed rank's node, the platform stopping the other nodes) and otherwise ends itself with exit
  code 1 (``os._exit``: its main thread may be blocked in a collective that never returns).  A failed
  rank that vanished without saying so (SIGKILL) stops beating :data:`BEAT_KEY`; its peers end
  :data:`GONE_SECONDS` later, as when the store itself is gone.  The peers' documents name the failed
  rank, so the node's failure file (``node/outcome.py``) and ``jobs`` / ``attach`` / ``stacks`` name its
  exception, not the peers' exits.

Everything here is a courtesy to the user's debugging: each step is in try/except, logged once, and
a problem leaves the rank running as it would without the gang hold.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import math
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from remote_debug.container.log import describe, log, one_line
from remote_debug.container.rank import control
from remote_debug.container.rank.hold import PostMortem, Reporter, held
from remote_debug.container.threads import quiet_thread
from remote_debug.contract.spec import RankState, held_with_phrase

KEY_PREFIX = "remote_debug/gang_hold/"
FAILED_KEY = KEY_PREFIX + "failed"  # the first failure: GangFailure as JSON
RELEASED_KEY = KEY_PREFIX + "released"  # set by the failed rank as its hold ends
BEAT_KEY = KEY_PREFIX + "beat"  # a counter the failed rank adds to while it is held
POLL_SECONDS = 0.5  # a look at FAILED_KEY (and, while held, at RELEASED_KEY)
# a look for the process group before it exists (a dict lookup): seldom until torch.distributed is imported,
# often after it (the group's first collectives should start with the raised timeout)
IMPORT_POLL_SECONDS = 0.5
GROUP_POLL_SECONDS = 0.05
BEAT_SECONDS = 1.0
GONE_SECONDS = 15.0  # no beat, or no store, for this long: the failed rank is gone
RELEASE_GRACE_SECONDS = 3.0
STORE_DEADLINE = 5.0  # the most a store call may take in the excepthook
TIMEOUT_MARGIN_SECONDS = 60.0
STORE_ERROR_BACKOFF = 2.0

T = TypeVar("T")


@dataclass(frozen=True)
class GangFailure:
    """The first failure of the job, as the failing rank put it in the store."""

    rank: int
    error: str
    failed_at: float
    hold_until: float | None

    def encode(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def decode(cls, raw: bytes | str) -> GangFailure:
        data = json.loads(raw.decode("utf-8") if isinstance(raw, bytes) else raw)
        hold_until = data.get("hold_until")
        return cls(
            rank=int(data["rank"]),
            error=one_line(data.get("error") or "", 500),
            failed_at=float(data["failed_at"]),
            hold_until=float(hold_until) if isinstance(hold_until, (int, float)) else None,
        )


def default_store() -> Any:
    """The default process group's store, once the group exists (None before, and without torch.distributed)."""
    c10d: Any = sys.modules.get("torch.distributed.distributed_c10d")
    if c10d is None or getattr(getattr(c10d, "__spec__", None), "_initializing", False):
        return None  # not imported, or being imported by the main thread right now
    if not hasattr(c10d, "_get_default_store") or not c10d.is_initialized():
        return None
    return c10d._get_default_store()


def current_pg_timeout() -> float | None:
    """The default group's collective timeout in seconds (the shortest of its backends'); None: unknown."""
    c10d: Any = sys.modules.get("torch.distributed.distributed_c10d")
    torch: Any = sys.modules.get("torch")
    if c10d is None or torch is None or not c10d.is_initialized():
        return None
    group = c10d._get_default_group()
    found = []
    for device in ("cpu", "cuda"):
        with contextlib.suppress(Exception):
            found.append(group._get_backend(torch.device(device)).options._timeout.total_seconds())
    return min(found) if found else None


def _within(seconds: float, call: Callable[[], T]) -> T:
    """``call()`` on a quiet thread, given up after ``seconds`` (TimeoutError): the excepthook must not hang
    on a store that stopped answering."""
    result: list[T] = []
    error: list[BaseException] = []

    def run() -> None:
        try:
            result.append(call())
        except BaseException as exc:
            error.append(exc)

    thread = quiet_thread(run, "remote-debug-gang-store")
    thread.start()
    thread.join(seconds)
    if error:
        raise error[0]
    if not result:
        raise TimeoutError(f"the job's store did not answer within {seconds:g} s")
    return result[0]


class GangHold:
    """One rank's part in holding the whole job after a failure (one per rank process with hold on failure)."""

    def __init__(
        self,
        reporter: Reporter,
        rank: int,
        hold_seconds: float,
        debugger: PostMortem | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.reporter = reporter
        self.rank = rank
        self.hold_seconds = hold_seconds
        self.debugger = debugger
        self.pg_timeout = control.pg_timeout_seconds(os.environ if env is None else env)  # 0: leave it alone
        self.failure: GangFailure | None = None  # another rank's failure this rank is held for
        self.root = False  # this rank failed first: the others are held for it
        self._released = threading.Event()
        self._lock = threading.Lock()
        self._store: Any | None = None
        self._logged: set[str] = set()
        self._at_exit = False  # the main thread waits in _wait_at_exit: nothing there to pause

    # --- what the excepthook (hold.FailureHook) asks ---------------------------------------------------

    def held_for(self) -> int | None:
        """The rank whose failure this rank is held for (None: not held for another's failure)."""
        failure = self.failure
        return failure.rank if failure is not None else None

    def holding(self) -> bool:
        """Held for another rank's failure, and not released yet."""
        return self.failure is not None and not self._released.is_set()

    def announce(self, error: str, failed_at: float, hold_until: float | None) -> int | None:
        """This rank is about to be held at its exception: tell the job.  The rank whose failure holds the
        job (this one, or one that failed first); None when there is no process group (or no store)."""
        try:
            store = default_store()
            if store is None:
                return None
            mine = GangFailure(self.rank, one_line(error, 500), failed_at, hold_until)
            winner = GangFailure.decode(
                _within(STORE_DEADLINE, lambda: store.compare_set(FAILED_KEY, "", mine.encode()))
            )
        except Exception as exc:
            self._log_once("announce", f"rank {self.rank}: cannot tell the other ranks to hold: {describe(exc)}")
            return None
        if winner.rank == self.rank:
            self.root = True
            self._store = store
            quiet_thread(self._beat, "remote-debug-gang-beat").start()
            log(f"rank {self.rank} failed first: the job's other ranks are held with it")
            return self.rank
        self._mark_held_for(winner)
        return winner.rank

    def release(self) -> None:
        """This rank's hold ended: the ranks held with it may go (a no-op unless it failed first)."""
        if not self.root or self._released.is_set():
            return
        self._released.set()
        store = self._store
        try:
            if store is not None:
                _within(STORE_DEADLINE, lambda: store.set(RELEASED_KEY, "1"))
        except Exception as exc:  # the peers end when the beat stops
            self._log_once("release", f"rank {self.rank}: cannot release the other ranks: {describe(exc)}")

    # --- the watcher -------------------------------------------------------------------------------------

    def start(self) -> None:
        quiet_thread(self._watch, "remote-debug-gang-hold").start()
        atexit.register(self._wait_at_exit)

    def _watch(self) -> None:
        try:
            while not self.root:
                store = self._wait_for_group()
                self._raise_timeout(self.hold_seconds + TIMEOUT_MARGIN_SECONDS, only_up=True)
                failure = self._poll(store)
                if failure is not None:
                    if failure.rank != self.rank:  # (this rank's own failure: the excepthook has it)
                        self._held(store, failure)
                    return
        except Exception as exc:  # never let it take the rank down
            self._log_once("watch", f"rank {self.rank}: holding the job after a failure is off: {describe(exc)}")

    def _wait_for_group(self) -> Any:
        while True:
            store = default_store()
            if store is not None:
                return store
            imported = "torch.distributed.distributed_c10d" in sys.modules
            time.sleep(GROUP_POLL_SECONDS if imported else IMPORT_POLL_SECONDS)

    def _poll(self, store: Any) -> GangFailure | None:
        """Look for the job's first failure until there is one (returned), or the group is gone (None: the
        caller waits for the next one)."""
        while not self.root:
            if default_store() is not store:  # destroy_process_group(): wait for another group
                return None
            try:
                if store.check([FAILED_KEY]):
                    return GangFailure.decode(store.get(FAILED_KEY))
            except Exception as exc:
                self._log_once("poll", f"rank {self.rank}: cannot look for a failed rank: {describe(exc)}")
                time.sleep(STORE_ERROR_BACKOFF)
            time.sleep(POLL_SECONDS)
        return None

    def _held(self, store: Any, failure: GangFailure) -> None:
        """Held for ``failure``: until the failed rank's hold ends, then end with its failure."""
        self._mark_held_for(failure)
        if self.debugger is not None:
            try:
                where = self.debugger.start()
                self.reporter.update(state=RankState.HELD)  # a lazy listener that started reported "listening"
                log(f"rank {self.rank}: a debugger can attach ({where})")
            except Exception as exc:
                self._log_once("debugger", f"rank {self.rank}: no debugger for the hold: {describe(exc)}")
        # a debugger attached already drives this rank (it may be stopped at a breakpoint): no pause of ours
        attached = suspended = self._attached()
        beat, beat_seen, last_answer = -1, time.monotonic(), time.monotonic()
        while True:
            now = time.monotonic()
            try:
                if store.check([RELEASED_KEY]):
                    why = f"rank {failure.rank}'s hold ended"
                    break
                count = int(store.add(BEAT_KEY, 0))
                last_answer = now
                if count != beat:
                    beat, beat_seen = count, now
                elif now - beat_seen > GONE_SECONDS:
                    why = f"rank {failure.rank} stopped answering for {GONE_SECONDS:g} s"
                    break
            except Exception as exc:
                self._log_once("held", f"rank {self.rank}: cannot reach the job's store: {describe(exc)}")
                if now - last_answer > GONE_SECONDS:
                    why = f"the job's store is gone ({describe(exc)})"
                    break
            suspended = suspended or self._suspend_main()
            now_attached = self._attached()
            if now_attached and not attached:
                self._announce_stop()
            attached = now_attached
            time.sleep(POLL_SECONDS)
        self._end(why)

    def _mark_held_for(self, failure: GangFailure) -> None:
        """Raise the timeout, say so in the rank document and the log; once."""
        with self._lock:
            if self.failure is not None:
                return
            self.failure = failure
        left = failure.hold_until - time.time() if failure.hold_until is not None else self.hold_seconds
        self._raise_timeout(max(left, 0.0) + TIMEOUT_MARGIN_SECONDS, only_up=False)
        try:
            self.reporter.update(
                # a rank without a debugger (not selected) stays "skipped": nothing to attach to
                state=RankState.HELD if self.debugger is not None else None,
                held_for=failure.rank,
                held_for_error=failure.error or None,
                hold_until=failure.hold_until,
                unless=(RankState.FINISHED, RankState.FAILED),
            )
        except Exception as exc:
            self._log_once("report", f"rank {self.rank}: cannot report the hold: {describe(exc)}")
        log(
            f"rank {self.rank} {held_with_phrase(failure.rank)} ({failure.error}): paused where it was until "
            f"rank {failure.rank}'s hold ends"
        )

    def _raise_timeout(self, seconds: float, *, only_up: bool) -> None:
        """The process-group timeout to at least ``seconds`` (``only_up``: only when it is known to be lower)."""
        if self.pg_timeout <= 0:
            return  # REMOTE_DEBUG_PG_TIMEOUT=0: the user's timeout stays
        target = min(max(seconds, self.pg_timeout if not only_up else 0.0), control.MAX_PG_TIMEOUT_SECONDS)
        try:
            current = current_pg_timeout()
            if current is not None and current >= target:
                return
            if only_up and current is None:
                return  # unknown: raising to the hold could lower it
            detail = control.pause_safe(target)
            if not only_up:
                log(f"rank {self.rank}: {detail}")
        except Exception as exc:
            self._log_once("timeout", f"rank {self.rank}: cannot raise the process-group timeout: {describe(exc)}")

    def _beat(self) -> None:
        """While this (failed) rank is held: a sign of life for the ranks held with it."""
        store = self._store
        while store is not None and not self._released.wait(BEAT_SECONDS):
            try:
                store.add(BEAT_KEY, 1)
            except Exception as exc:
                self._log_once("beat", f"rank {self.rank}: cannot reach the job's store: {describe(exc)}")

    def _end(self, why: str) -> None:
        """Released: leave the launcher its own teardown, then end with exit code 1 (as a failed job's ranks)."""
        failure = self.failure
        cause = f"rank {failure.rank}" if failure is not None else "another rank"
        log(f"rank {self.rank}: {why}; it ends with the job ({cause}'s failure)")
        self._released.set()
        time.sleep(RELEASE_GRACE_SECONDS)
        with contextlib.suppress(Exception):
            self.reporter.update(state=RankState.FAILED, unless=(RankState.FINISHED, RankState.FAILED))
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(1)

    def _wait_at_exit(self) -> None:
        """A rank that reached the end of its script while held waits there (the watcher ends it)."""
        self._at_exit = True
        while self.holding():
            time.sleep(0.2)

    # --- the debugger: pydevd, debugpy's or PyCharm's ---------------------------------------------------

    def _attached(self) -> bool:
        if self.debugger is None or "pydevd" not in sys.modules:
            return False  # (a lazy rank's debugger is not even loaded)
        try:
            return self.debugger.attached()
        except Exception:
            return False

    def _suspend_main(self) -> bool:
        """Ask pydevd to suspend the main thread where it is (at its next line of Python); False: no pydevd yet."""
        py_db = _pydevd()
        if py_db is None:
            return False
        if held() is not None or self._at_exit:
            return True  # the main thread waits in our excepthook (an exception of its own) or at exit
        try:
            from _pydevd_bundle.pydevd_comm_constants import CMD_THREAD_SUSPEND

            main = threading.main_thread()
            try:
                py_db.set_suspend(main, CMD_THREAD_SUSPEND, suspend_other_threads=False, is_pause=True)
            except TypeError:  # a pydevd without is_pause
                py_db.set_suspend(main, CMD_THREAD_SUSPEND)
        except Exception as exc:
            self._log_once("suspend", f"rank {self.rank}: cannot pause the main thread: {describe(exc)}")
        return True

    def _announce_stop(self) -> None:
        """Tell the debugger that just attached that the main thread is stopped (pydevd told nobody)."""
        py_db = _pydevd()
        main = threading.main_thread()
        info = getattr(main, "additional_info", None)
        if py_db is None or info is None or not getattr(info, "is_in_wait_loop", False):
            return  # not stopped (yet): blocked in C, it stops when it returns, and pydevd says so itself
        try:
            from _pydevd_bundle.pydevd_comm_constants import CMD_THREAD_SUSPEND
            from _pydevd_bundle.pydevd_constants import get_thread_id

            notification = py_db._threads_suspended_single_notification
            notification.send_suspend_notification(get_thread_id(main), main, CMD_THREAD_SUSPEND)
        except Exception as exc:
            self._log_once("announce-stop", f"rank {self.rank}: cannot show the paused thread: {describe(exc)}")

    def _log_once(self, kind: str, line: str) -> None:
        if kind not in self._logged:
            self._logged.add(kind)
            log(line)


def _pydevd() -> Any | None:
    pydevd: Any = sys.modules.get("pydevd")
    try:
        return pydevd.get_global_debugger() if pydevd is not None else None
    except Exception:
        return None


def start(reporter: Reporter, rank: int, hold_seconds: float, debugger: PostMortem | None) -> GangHold | None:
    """This rank's gang hold, watching (None: hold on failure is off, or it could not start)."""
    if not hold_seconds > 0 or not math.isfinite(hold_seconds):
        return None
    try:
        gang = GangHold(reporter, rank, hold_seconds, debugger)
        gang.start()
        return gang
    except Exception as exc:
        log(f"rank {rank}: holding the job after a failure is off: {describe(exc)}")
        return None
