"""Pause-safe reaches every rank while a debugger is attached, including ranks that report after
discovery finished and ranks torchrun restarted (a new process with the same rank number)."""

from __future__ import annotations

from remote_debug.contract import spec
from remote_debug.laptop.attach.pause_safe import PauseSafe
from remote_debug.laptop.wire import events as ev


def manifests(ranks: list[spec.RankEndpoint]) -> dict[str, spec.NodeManifest]:
    node = spec.NodeManifest(
        job_name="job",
        node="algo-1",
        hosts=["algo-1"],
        sshd_host="127.0.0.1",
        sshd_port=2222,
        ssh_user="root",
        host_public_key="ssh-ed25519 AAAA",
        code_dir="/opt/ml/code",
        ranks=list(ranks),
    )
    return {"algo-1": node}


class RecordingControl:
    """Stands in for the node's control channels: records each request."""

    def __init__(self) -> None:
        self.requests: list[tuple[int, str]] = []

    def pause_safe(self, r: spec.RankEndpoint) -> str:
        self.requests.append((r.control_port, "pause-safe"))
        return "process-group timeout 7200 s"


def rank(number: int, pid: int, control_port: int) -> spec.RankEndpoint:
    return spec.RankEndpoint(
        rank=number,
        local_rank=number,
        world_size=3,
        port=0,
        pid=pid,
        state=spec.RankState.IDLE,
        control_port=control_port,
    )


def test_late_and_restarted_ranks_are_made_pause_safe() -> None:
    control = RecordingControl()
    emitted: list[ev.Event] = []
    tracker = PauseSafe(lambda node: control, emitted.append)  # type: ignore[arg-type,return-value]
    # discovery done: rank 0 is being debugged (its "listen" made it pause-safe), rank 1 reported
    tracker.done(rank(0, 100, 7000))
    tracker.announce(manifests([rank(0, 100, 7000), rank(1, 101, 7001)]), force=True)
    assert control.requests == [(7001, "pause-safe")]

    # rank 2 reports only now, and torchrun restarted rank 1 (new pid, new control port): both are asked
    # at once, within the retry interval too (rank 0 may be stopped already: their next collective
    # must not start with the short timeout)
    later = manifests([rank(0, 100, 7000), rank(1, 201, 7101), rank(2, 102, 7002)])
    tracker.announce(later)
    assert sorted(control.requests[1:]) == [(7002, "pause-safe"), (7101, "pause-safe")]
    assert sorted(e.rank for e in emitted if isinstance(e, ev.PauseSafe)) == [1, 1, 2]

    # nothing new: nobody is asked twice
    tracker.announce(later)
    tracker.announce(later, force=True)
    assert len(control.requests) == 3


class FailingOnceControl(RecordingControl):
    def __init__(self) -> None:
        super().__init__()
        self.fail = True

    def pause_safe(self, r: spec.RankEndpoint) -> str:
        if self.fail:
            self.requests.append((r.control_port, "refused"))
            raise OSError("connection refused")
        return super().pause_safe(r)


def test_a_rank_whose_answer_failed_is_asked_again_after_the_retry_interval() -> None:
    control = FailingOnceControl()
    emitted: list[ev.Event] = []
    tracker = PauseSafe(lambda node: control, emitted.append)  # type: ignore[arg-type,return-value]
    seen = manifests([rank(1, 101, 7001)])
    tracker.announce(seen)
    assert control.requests == [(7001, "refused")]
    assert any(isinstance(e, ev.WarningEvent) for e in emitted)
    control.fail = False
    tracker.announce(seen)  # within RETRY_SECONDS of the failed round: not again yet
    assert control.requests == [(7001, "refused")]
    tracker.announce(seen, force=True)  # the interval is over (or a new debuggee): asked again
    assert control.requests == [(7001, "refused"), (7001, "pause-safe")]
