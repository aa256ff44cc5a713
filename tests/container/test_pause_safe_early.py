"""Pause-safe asked before the rank has a process group: the rank's retry waits out torch.distributed
being imported by the script's thread (a module in sys.modules whose attributes appear later), hooks
``init_process_group`` so the group is pause-safe before its first collective, and stops once applied
or on an error that will not go away.  Fake torch modules stand in sys.modules; the retry is the real one."""

from __future__ import annotations

import sys
import threading
import time
import types
from collections.abc import Iterator
from datetime import timedelta
from importlib.machinery import ModuleSpec
from typing import Any

import pytest

from remote_debug.container.rank import control
from remote_debug.container.rank.control import C10D_MODULE, DIST_MODULE, ControlServer
from remote_debug.contract import control_replies as replies
from remote_debug.contract.spec import ENV_PG_TIMEOUT, ControlOp
from tests.helpers.waiting import wait_for

RETRY = "remote-debug-pause-safe"


class FakeTorch:
    """torch.distributed and its c10d module, both "being imported": in sys.modules, their specs
    initialising, no functions yet (a read raises Python's own "partially initialized module")."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.dist = self._module(DIST_MODULE)
        self.c10d = self._module(C10D_MODULE)
        monkeypatch.setitem(sys.modules, DIST_MODULE, self.dist)
        monkeypatch.setitem(sys.modules, C10D_MODULE, self.c10d)
        self.group = False
        self.timeouts: list[timedelta] = []
        self.init_timeouts: list[timedelta | None] = []  # what init_process_group was called with

    @staticmethod
    def _module(name: str) -> Any:
        module = types.ModuleType(name)
        spec: Any = ModuleSpec(name, None)
        spec._initializing = True  # what importlib sets while the module's body runs
        module.__spec__ = spec
        return module

    def define_functions(self) -> None:
        """c10d's body ran (torch.distributed's import may still be under way)."""

        def init_process_group(backend: str, timeout: timedelta | None = None) -> str:
            self.group = True
            self.init_timeouts.append(timeout)
            return f"group {backend}"

        def set_pg_timeout(timeout: timedelta, group: object) -> None:
            self.timeouts.append(timeout)

        self.c10d.is_initialized = lambda: self.group
        self.c10d._set_pg_timeout = set_pg_timeout
        self.c10d.init_process_group = init_process_group

    def finish_import(self) -> None:
        self.c10d.__spec__._initializing = False
        self.dist.init_process_group = self.c10d.init_process_group  # `from .distributed_c10d import *`
        self.dist.__spec__._initializing = False


def _retries() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == RETRY}


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[ControlServer]:
    monkeypatch.setattr(control, "_logged", set())  # "logged once" starts afresh for each test
    server = ControlServer(lambda: 0, {ENV_PG_TIMEOUT: "600"})
    try:
        yield server
    finally:
        server._server.close()


def _ask(server: ControlServer) -> str:
    reply = server.handle({"op": ControlOp.PAUSE_SAFE})
    assert isinstance(reply, replies.Detail) and reply.detail is not None
    return reply.detail


def test_the_retry_outlives_a_half_imported_c10d_and_init_applies_the_timeout_before_returning(
    server: ControlServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    torch = FakeTorch(monkeypatch)
    before = _retries()
    assert _ask(server) == "pending: no process group yet"
    [retry] = _retries() - before
    time.sleep(0.3)  # several polls meet modules without functions: "not yet", never the end of the retry
    torch.define_functions()
    torch.c10d.__spec__._initializing = False
    time.sleep(0.3)  # c10d done but torch.distributed still importing: no group can exist, nothing hooked yet
    assert retry.is_alive() and not getattr(torch.c10d.init_process_group, "_remote_debug_pause_safe", False)

    torch.finish_import()
    wait_for(lambda: getattr(torch.dist.init_process_group, "_remote_debug_pause_safe", False), 5, "the hook")
    assert torch.dist.init_process_group is torch.c10d.init_process_group  # one wrapper, both names
    assert torch.dist.init_process_group("gloo") == "group gloo"  # the script's init, its result unchanged
    assert torch.init_timeouts == [timedelta(seconds=600)]  # its rendezvous outlasts a held peer too
    # applied before init returned: a collective started on the next line gets the long timeout
    assert torch.timeouts == [timedelta(seconds=600)]
    retry.join(5)
    assert not retry.is_alive()
    assert torch.timeouts == [timedelta(seconds=600)]  # and the retry did not apply it again
    assert "[remote-debug]" not in capsys.readouterr().err


def test_a_read_that_raises_attribute_error_after_the_import_still_means_not_yet(
    server: ControlServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The retry used to give up on "AttributeError: partially initialized module", whatever said so.
    torch = FakeTorch(monkeypatch)
    torch.define_functions()
    torch.finish_import()
    torch.c10d.init_process_group = torch.dist.init_process_group = None  # nothing to hook: polling alone

    def half_imported() -> bool:
        raise AttributeError(f"partially initialized module {C10D_MODULE!r} has no attribute 'GroupMember'")

    torch.c10d.is_initialized = half_imported
    before = _retries()
    assert _ask(server) == "pending: no process group yet"
    [retry] = _retries() - before
    time.sleep(0.3)
    assert retry.is_alive() and torch.timeouts == []
    torch.c10d.is_initialized = lambda: torch.group
    time.sleep(0.2)
    assert retry.is_alive() and torch.timeouts == []  # no group yet
    torch.group = True  # init_process_group, called through a name bound before any hook
    retry.join(5)
    assert not retry.is_alive()
    assert torch.timeouts == [timedelta(seconds=600)]
    assert "[remote-debug]" not in capsys.readouterr().err


def test_an_error_that_cannot_go_away_is_logged_once_and_ends_the_retry(
    server: ControlServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    torch = FakeTorch(monkeypatch)
    before = _retries()
    assert _ask(server) == "pending: no process group yet"
    [retry] = _retries() - before
    torch.define_functions()
    torch.finish_import()
    del torch.c10d._set_pg_timeout  # a torch without it
    wait_for(lambda: getattr(torch.dist.init_process_group, "_remote_debug_pause_safe", False), 5, "the hook")
    assert torch.dist.init_process_group("gloo") == "group gloo"  # init never fails for pause-safe
    retry.join(5)
    assert not retry.is_alive()
    err = capsys.readouterr().err
    assert err.count("cannot raise the process-group timeout: AttributeError:") == 1, err
    assert "has no _set_pg_timeout" in err

    torch.group = False
    assert torch.dist.init_process_group("gloo") == "group gloo"  # a second init: no second line
    assert "[remote-debug]" not in capsys.readouterr().err


def test_the_hook_leaves_the_scripts_own_init_failure_alone(
    server: ControlServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch = FakeTorch(monkeypatch)
    torch.define_functions()
    torch.finish_import()

    def refused(backend: str) -> None:
        raise RuntimeError("rendezvous refused")

    torch.c10d.init_process_group = torch.dist.init_process_group = refused
    before = _retries()
    assert _ask(server) == "pending: no process group yet"  # torch imported already: hooked at once
    [retry] = _retries() - before
    hooked = torch.dist.init_process_group
    assert hooked is not refused and hooked.__wrapped__ is refused and hooked.__name__ == "refused"
    with pytest.raises(RuntimeError, match="rendezvous refused"):
        hooked("gloo")
    assert torch.timeouts == [] and retry.is_alive()  # still pending: the script may init again
    torch.group = True
    retry.join(5)
    assert torch.timeouts == [timedelta(seconds=600)]


def test_pause_safe_off_starts_no_retry_and_hooks_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = FakeTorch(monkeypatch)
    torch.define_functions()
    torch.finish_import()
    original = torch.dist.init_process_group
    server = ControlServer(lambda: 0, {ENV_PG_TIMEOUT: "0"})
    try:
        before = _retries()
        assert _ask(server) == "disabled"
        assert _retries() - before == set()
        assert torch.dist.init_process_group is original
    finally:
        server._server.close()


def test_pause_safe_never_lowers_a_timeout_it_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    """A gang hold raised the timeout past its hold; an attach asking for its default must not lower it."""
    torch = FakeTorch(monkeypatch)
    torch.define_functions()
    torch.finish_import()
    torch.group = True
    monkeypatch.setattr(control, "_raised_to", 0.0)
    assert control.pause_safe(9000) == "process-group timeout 9000 s"
    assert control.pause_safe(7200) == "process-group timeout 9000 s"
    assert torch.timeouts == [timedelta(seconds=9000)] * 2


@pytest.mark.parametrize(
    ("call", "received"),
    [
        (lambda init: init("gloo", timedelta(seconds=3)), timedelta(seconds=600)),  # positional, shorter
        (lambda init: init("gloo", timeout=timedelta(seconds=3)), timedelta(seconds=600)),
        (lambda init: init(backend="gloo"), timedelta(seconds=600)),  # torch's default: raised
        (lambda init: init("gloo", timeout=timedelta(hours=5)), timedelta(hours=5)),  # longer: the script's
    ],
    ids=["positional", "keyword", "default", "longer"],
)
def test_init_gets_the_raised_timeout_for_its_rendezvous_and_never_a_shorter_one(
    server: ControlServer, monkeypatch: pytest.MonkeyPatch, call: Any, received: timedelta
) -> None:
    """A peer slowed by its debugger reaches init's rendezvous seconds late; the store waits in there
    run with the timeout init was given (a CI run failed on "DistStoreError: wait timeout after 3000ms")."""
    torch = FakeTorch(monkeypatch)
    torch.define_functions()
    torch.finish_import()
    monkeypatch.setattr(control, "_raised_to", 0.0)
    assert _ask(server) == "pending: no process group yet"
    assert call(torch.dist.init_process_group) == "group gloo"
    assert torch.init_timeouts == [received]


def test_arguments_that_do_not_bind_reach_init_unchanged(
    server: ControlServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch = FakeTorch(monkeypatch)
    torch.define_functions()
    torch.finish_import()
    assert _ask(server) == "pending: no process group yet"
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        torch.dist.init_process_group("gloo", bogus=1)  # the script's own mistake, as Python words it
    assert torch.init_timeouts == []
