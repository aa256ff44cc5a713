"""After a failure the root cause comes first (the rank whose failure came first, as torchelastic names it), and
ranks held with it (hold on failure holds the whole gang) are never taken for a failure of their own: the
contract's order, the node's failure file, ``jobs``' notes, ``stacks`` and ``attach``'s events."""

from __future__ import annotations

from pathlib import Path

import pytest

from remote_debug.container.node import outcome
from remote_debug.contract import spec
from remote_debug.laptop.attach import attacher as attacher_module
from remote_debug.laptop.attach.attacher import Attacher, AttachOptions
from remote_debug.laptop.connection import job_connection
from remote_debug.laptop.core.jobinfo import JobStatus, held_notes, held_ranks
from remote_debug.laptop.core.paths import StatePaths
from remote_debug.laptop.diagnose.stacks import _in_failure_order, format_stacks
from remote_debug.laptop.wire import events
from remote_debug.laptop.wire.documents import RankStacks
from tests.helpers.fake_backend import FakeBackend, FakeConnection

pytestmark = pytest.mark.timeout(10)
HELD, FAILED, RUNNING = spec.RankState.HELD, spec.RankState.FAILED, spec.RankState.RUNNING


def _rank(
    rank: int, state: spec.RankState, error: str | None = None, failed_at: float | None = None, **more: object
) -> spec.RankEndpoint:
    return spec.RankEndpoint(
        rank=rank,
        local_rank=rank % 2,
        world_size=4,
        port=0,
        pid=100 + rank,
        state=state,
        error=error,
        failed_at=failed_at,
        **more,  # type: ignore[arg-type]
    )


def _gang(now: float = 1000.0) -> list[spec.RankEndpoint]:
    """Rank 3 failed first and is held; 0-2 are held with it; rank 1 also met a collective's timeout meanwhile."""
    cause = "ValueError: bad batch 40"
    return [
        _rank(0, HELD, held_for=3, held_for_error=cause, hold_until=now + 60),
        _rank(1, HELD, "RuntimeError: timed out", now - 1, held_for=3, held_for_error=cause, hold_until=now + 60),
        _rank(2, HELD, held_for=3, held_for_error=cause, hold_until=now + 60),
        _rank(3, HELD, cause, now - 5, hold_until=now + 60),
    ]


def test_the_rank_the_others_are_held_for_is_the_root_cause_whatever_the_clocks_say() -> None:
    ranks = _gang()
    assert spec.root_cause(ranks) == ranks[3]
    assert [r.rank for r in spec.failure_order(ranks)] == [3, 0, 1, 2]
    # another node's clock ahead: rank 2 failed "earlier" by its clock, but the job's store named rank 3 first
    skewed = [*ranks[:2], _rank(2, FAILED, "OSError: later", 1.0), ranks[3]]
    assert spec.root_cause(skewed) == ranks[3]
    assert [r.rank for r in spec.failure_order(skewed)] == [3, 2, 0, 1]
    # without a gang hold: the first failure in time; ranks that did not fail last, by rank
    plain = [
        _rank(0, RUNNING),
        _rank(1, FAILED, "RuntimeError: peer gone", 20.0),
        _rank(2, FAILED, "ValueError: x", 10.0),
    ]
    assert [r.rank for r in spec.failure_order(plain)] == [2, 1, 0]
    assert spec.root_cause([_rank(0, HELD, held_for=3, held_for_error="E")]) is None  # its own ranks did not fail


def test_held_for_travels_in_the_rank_document_and_an_older_document_reads_without_it(tmp_path: Path) -> None:
    peer = _gang()[1]
    spec.write_rank_manifest(tmp_path, peer)
    [read] = spec.read_rank_documents(tmp_path)
    assert (read.held_for, read.held_for_error) == (3, "ValueError: bad batch 40") and read == peer
    older = spec.RankEndpoint.from_json({k: v for k, v in peer.to_json().items() if not k.startswith("held_for")})
    assert (older.held_for, older.held_for_error) == (None, None)
    assert "held_for" not in _rank(3, FAILED, "E", 1.0).to_json()  # written only when set
    gone = read.gone()
    assert gone.state == FAILED and gone.held_for == 3  # a peer that ended still names the rank it was held for


def test_a_node_whose_ranks_were_only_held_names_the_failed_ranks_exception(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    for r in _gang()[:2]:  # node algo-1: ranks 0 and 1, held with rank 3 of algo-2
        spec.write_rank_manifest(tmp_path, r)
    assert outcome.write_failure_file(tmp_path, {"SM_OUTPUT_DIR": str(tmp_path / "out")}) == (
        "ValueError: bad batch 40 (rank 3)"
    )
    assert outcome.held_line(_gang()[0], 1000.0) == (
        "rank 0 held with rank 3, which failed, 60 s left: ValueError: bad batch 40"
    )


def test_jobs_lists_the_root_cause_first_and_the_held_ranks_in_one_line() -> None:
    nodes = {"algo-1": _gang()[:2], "algo-2": _gang()[2:]}
    manifests: dict[str, spec.NodeManifest | None] = {
        node: spec.NodeManifest(
            job_name="j", node=node, hosts=list(nodes), sshd_host=spec.LOOPBACK, sshd_port=0, ssh_user="u",
            host_public_key="", code_dir="/c", ranks=ranks,
        )
        for node, ranks in nodes.items()
    }  # fmt: skip
    held = held_ranks(manifests, now=1000.0)
    assert [(h.rank, h.node, h.root_cause, h.held_for, h.error) for h in held] == [
        (3, "algo-2", True, None, "ValueError: bad batch 40"),
        (0, "algo-1", False, 3, "ValueError: bad batch 40"),
        (1, "algo-1", False, 3, "ValueError: bad batch 40"),
        (2, "algo-2", False, 3, "ValueError: bad batch 40"),
    ]
    assert held_notes(held) == [
        "rank 3 held for post-mortem, 60 s left (root cause)",
        "ranks 0-2 held with rank 3, which failed",
    ]
    assert held_notes(held[:1]) == ["rank 3 held for post-mortem, 60 s left"]  # alone: nothing to tell apart


def test_stacks_puts_the_root_cause_first_and_says_so() -> None:
    def stacks(r: spec.RankEndpoint) -> RankStacks:
        return {
            "rank": r.rank, "node": "algo-1" if r.rank < 2 else "algo-2", "pid": r.pid, "state": str(r.state),
            "hold_seconds_left": 60, "source": "control", "threads": [], "error": None,
        }  # fmt: skip

    ranks = _gang()
    ordered = _in_failure_order([stacks(r) for r in ranks], ranks)
    assert [(r["rank"], r.get("root_cause"), r.get("held_for")) for r in ordered] == [
        (3, True, None),
        (0, None, 3),
        (1, None, 3),
        (2, None, 3),
    ]
    lines = format_stacks({"job": "j", "ranks": ordered}).splitlines()
    assert lines[0] == "rank 3 (algo-2, pid 103): held for post-mortem, 60 s left (root cause)"
    assert lines[2] == "rank 0 (algo-1, pid 100): held with rank 3, which failed"


def test_attach_reports_the_root_cause_first_then_the_ranks_held_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(attacher_module, "POLL_SECONDS", 0.001)
    monkeypatch.setattr(attacher_module, "LOCAL_MANIFEST_POLL_SECONDS", 0.0)
    monkeypatch.setattr(job_connection, "POLL_SECONDS", 0.001)
    backend = FakeBackend(nodes=2, nproc_per_node=2)
    for r in range(4):
        backend.add_rank(r, node="algo-1" if r < 2 else "algo-2")

    def gang(b: FakeBackend) -> None:
        for doc in _gang():
            live = b.rank(doc.rank)
            live.state, live.error, live.failed_at = doc.state, doc.error, doc.failed_at
            live.held_for, live.held_for_error, live.traceback = doc.held_for, doc.held_for_error, None

    backend.steps = [lambda b: None, lambda b: None, gang, lambda b: None, lambda b: b.end(JobStatus.FAILED)]
    seen: list[events.Event] = []
    workspace = tmp_path / "ws"
    workspace.mkdir()
    Attacher(
        backend,
        backend.job,
        AttachOptions(workspace=workspace, edit_user_ssh_config=False, ready_timeout=5),
        seen.append,
        StatePaths(tmp_path / "state"),
        connection=lambda b, job, paths, emit: FakeConnection(b, job, paths, emit),
    ).run()
    faults = [e for e in seen if isinstance(e, (events.RankFailed, events.RankHeld))]
    assert [(type(e).__name__, e.rank) for e in faults] == [
        ("RankFailed", 3),
        ("RankHeld", 0),
        ("RankHeld", 1),
        ("RankHeld", 2),
    ]
    first = faults[0]
    assert isinstance(first, events.RankFailed) and first.root_cause and first.held
    assert all(
        isinstance(e, events.RankHeld) and (e.held_for, e.error) == (3, "ValueError: bad batch 40") for e in faults[1:]
    )
