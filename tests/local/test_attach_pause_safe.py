"""Pause-safe reaches every rank while a debugger is attached, including ranks that report after
discovery finished and ranks torchrun restarted (a new process with the same rank number)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from remote_debug import spec
from remote_debug.local.attach import Attacher, AttachOptions, RankForward
from remote_debug.local.paths import StatePaths


class ChangingBackend:
    """Only what the pause-safe step reads: the job's manifests, as the test changes them."""

    name = "fake"

    def __init__(self) -> None:
        self.ranks: list[spec.RankEndpoint] = []

    def manifests(self, job: str) -> dict[str, spec.NodeManifest | None]:
        node = spec.NodeManifest(
            job_name=job, node="algo-1", hosts=["algo-1"], sshd_host="127.0.0.1", sshd_port=2222,
            ssh_user="root", host_public_key="ssh-ed25519 AAAA", code_dir="/opt/ml/code", ranks=list(self.ranks),
        )
        return {"algo-1": node}


class RecordingTunnel:
    """Stands in for the node's SSH connection: records each control-channel request."""

    def __init__(self) -> None:
        self.requests: list[tuple[int, str]] = []

    def request(self, port: int, payload: dict[str, Any]) -> dict[str, Any]:
        self.requests.append((port, str(payload["op"])))
        return {"detail": "process-group timeout 7200 s"}


def rank(number: int, pid: int, control_port: int) -> spec.RankEndpoint:
    return spec.RankEndpoint(rank=number, local_rank=number, world_size=3, port=0, pid=pid, state="idle",
                             control_port=control_port)


def test_late_and_restarted_ranks_are_made_pause_safe(tmp_path: Path) -> None:
    backend = ChangingBackend()
    events: list[dict[str, Any]] = []
    attacher = Attacher(backend, "job", AttachOptions(workspace=tmp_path), events.append, StatePaths(tmp_path))  # type: ignore[arg-type]
    tunnel = RecordingTunnel()
    attacher.tunnels = {"algo-1": tunnel}  # type: ignore[dict-item]
    # discovery done: rank 0 is being debugged (its "listen" made it pause-safe), rank 1 reported
    backend.ranks = [rank(0, 100, 7000), rank(1, 101, 7001)]
    attacher.forwards = {0: RankForward(0, "algo-1", 5000, 6000, "/opt/ml/code")}
    attacher._pause_safe.add((0, 100))
    attacher._manifests = {n: m for n, m in backend.manifests("job").items() if m is not None}
    attacher._announce_pause_safe(force=True)
    assert tunnel.requests == [(7001, "pause-safe")]

    # rank 2 reports only now, and torchrun restarted rank 1 (new pid, new control port)
    backend.ranks = [rank(0, 100, 7000), rank(1, 201, 7101), rank(2, 102, 7002)]
    attacher._pause_safe_next = 0.0  # the retry interval has passed
    attacher._refresh_manifests(force=True)
    attacher._announce_pause_safe()
    assert sorted(tunnel.requests[1:]) == [(7002, "pause-safe"), (7101, "pause-safe")]
    assert sorted(e["rank"] for e in events if e["event"] == "pause-safe") == [1, 1, 2]

    # nothing new: nobody is asked twice
    attacher._pause_safe_next = 0.0
    attacher._refresh_manifests(force=True)
    attacher._announce_pause_safe()
    assert len(tunnel.requests) == 3
