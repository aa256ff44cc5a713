"""A warning never ends in an empty reason (issue 29, item 7).

paramiko raises a bare ``EOFError()`` when a node's SSH connection ends under a channel being opened,
our proxy a bare ``TimeoutError()`` when the relay says nothing, a dropped socket ``ConnectionResetError()``:
``str()`` of each is "".  Formatted as ``f"...: {exc}"`` the warning read
``rank 1: pause-safe failed: cannot reach control port 7001 on algo-1: `` or just ``... failed: `` - a
warning that says something failed and not what.  Each case here drives the real path (PauseSafe asking a
rank through RankControl over a tunnel whose channel fails that way) and reads the warning it emits.
"""

from __future__ import annotations

import secrets
from types import SimpleNamespace

import paramiko
import pytest

from remote_debug.contract import spec
from remote_debug.laptop.attach.pause_safe import PauseSafe
from remote_debug.laptop.connection.rank_control import RankControl
from remote_debug.laptop.core.errors import reason
from remote_debug.laptop.wire import events as ev


class _FailingTunnel:
    """A node's tunnel whose channels fail with ``exc`` (what paramiko / the proxy raise)."""

    def __init__(self, exc: BaseException) -> None:
        self.endpoint = SimpleNamespace(alias="algo-1")
        self.exc = exc

    def open_channel(self, remote_port: int, origin: tuple[str, int] = ("127.0.0.1", 0)) -> paramiko.Channel:
        raise self.exc


def _rank() -> spec.RankEndpoint:
    return spec.RankEndpoint(
        rank=1, local_rank=1, world_size=2, port=0, pid=4242, state=spec.RankState.IDLE, control_port=7001
    )


def _manifests(r: spec.RankEndpoint) -> dict[str, spec.NodeManifest]:
    node = spec.NodeManifest(
        job_name="job",
        node="algo-1",
        hosts=["algo-1"],
        sshd_host="127.0.0.1",
        sshd_port=2222,
        ssh_user="root",
        host_public_key="ssh-ed25519 AAAA",
        code_dir="/opt/ml/code",
        ranks=[r],
    )
    return {"algo-1": node}


@pytest.mark.parametrize(
    ("exc", "words"),
    [
        (EOFError(), "connection closed"),
        (TimeoutError(), "timed out"),
        (ConnectionResetError(), "connection reset"),
        (paramiko.SSHException(), "SSHException"),
    ],
)
def test_pause_safe_warning_names_a_reason_for_an_empty_message(exc: BaseException, words: str) -> None:
    assert str(exc) == ""  # the attack's precondition: the exception itself says nothing
    control = RankControl(_FailingTunnel(exc), secrets.token_hex(32))  # type: ignore[arg-type]
    emitted: list[ev.Event] = []
    PauseSafe(lambda node: control, emitted.append).announce(_manifests(_rank()), force=True)
    warnings = [e.message for e in emitted if isinstance(e, ev.WarningEvent)]
    assert len(warnings) == 1, emitted
    message = warnings[0]
    assert message.startswith("rank 1: pause-safe failed: ")
    assert not message.rstrip().endswith(":"), f"empty reason: {message!r}"
    assert words in message, message


def test_reason_keeps_a_message_and_folds_it_to_one_line() -> None:
    assert reason(OSError("no route\n  to host")) == "no route to host"
    assert reason(TimeoutError()) == "timed out (TimeoutError)"
    assert reason(KeyError()) == "KeyError"
