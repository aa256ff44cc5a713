"""Multi-node locally with network isolation: 2 nodes x 2 torchrun ranks, each node in its own network
namespace (root only).  The laptop side reaches a node only through the relay (like SSM): a direct
connection to a node's sshd or rank port fails, attach through the ProxyCommand stops in all 4 ranks,
and the namespaces are gone after the job."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from remote_debug.laptop.attach.attacher import AttachOptions
from remote_debug.laptop.core.jobinfo import MachineJobDetails
from remote_debug.laptop.ide.headless_session import HeadlessPlan
from remote_debug.laptop.machine.job_dir import read_job_file
from remote_debug.oskit import netns
from tests.helpers.ddp_job import break_line, make_project
from tests.helpers.event_log import EventLog
from tests.helpers.jobs import launch_job

needs_netns = pytest.mark.skipif(not netns.available(), reason="network namespaces need root and iproute2")


def _our_namespaces(prefix: str) -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=15).stdout
    return [line.split()[0] for line in out.splitlines() if line.split() and line.split()[0].startswith(prefix + "-")]


def _refused(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(3)
        try:
            s.connect(("127.0.0.1", port))
        except OSError:
            return True
    return False


def _listeners(pid: int | str) -> dict[int, str]:
    """Listening TCP port -> socket inode, as seen from the network namespace of ``pid``."""
    out: dict[int, str] = {}
    for line in Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "0A":  # LISTEN
            out[int(fields[1].rsplit(":", 1)[1], 16)] = fields[9]
    return out


def assert_unreachable_from_laptop(node_pid: int, port: int) -> None:
    """The node's listener on ``port`` lives in another namespace, and the laptop cannot connect to it.

    Port numbers are per namespace, so another test's job may listen on the same number here: then
    the listener we find is not the node's (different socket), and connecting proves nothing."""
    assert os.readlink(f"/proc/{node_pid}/ns/net") != os.readlink("/proc/self/ns/net")
    inode = _listeners(node_pid).get(port)
    assert inode is not None, f"port {port} is not listening in the node's namespace"
    here = _listeners("self")
    assert inode not in here.values()
    if port not in here:
        assert _refused(port), f"port {port} of the node is reachable from the laptop side"


@needs_netns
def test_two_nodes_in_namespaces_attach_all_ranks_through_the_relay_only(
    home: Path, tmp_path: Path, job_namespaces: list[str]
) -> None:
    project = make_project(tmp_path)
    job = launch_job("isolated", project, nodes=2, nproc_per_node=2, wait_seconds=240)
    backend = job.backend
    state = read_job_file(job.paths.job_dir("isolated"))
    job_namespaces.extend(state["netns"])
    machine = job.info.details_of(MachineJobDetails) if job.info else None
    assert machine is not None
    assert machine.isolation == "netns" and state["isolation"] == "netns"
    prefix = state["node_netns"]["algo-1"].rsplit("-", 1)[0]
    assert sorted(_our_namespaces(prefix)) == sorted(state["netns"]) and len(state["netns"]) == 3
    listed = subprocess.run(
        [str(Path(__import__("sys").executable).parent / "remote-debug"), "jobs", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert [j["machine"]["isolation"] for j in json.loads(listed) if j["name"] == "isolated"] == ["netns"]

    # Every node publishes its sshd and both rank listeners, bound to 127.0.0.1 of ITS namespace:
    # the laptop (this process, in the original namespace) cannot connect to any of them.
    deadline = time.monotonic() + 240
    while True:
        manifests = backend.manifests("isolated")
        ready = [
            m for m in manifests.values() if m is not None and m.sshd_port and len([r for r in m.ranks if r.port]) == 2
        ]
        if len(ready) == 2:
            break
        assert time.monotonic() < deadline, f"nodes not ready: {manifests}"
        time.sleep(0.5)
    for m in ready:
        for port in [m.sshd_port, *(r.port for r in m.ranks)]:
            assert_unreachable_from_laptop(m.hook_pid, port)

    events = EventLog()
    plan = HeadlessPlan(breakpoints={str(project / "train.py"): [break_line(project / "train.py")]}, steps=1)
    result = job.attach(AttachOptions(workspace=project, headless=plan, ready_timeout=240), events.append)

    assert result.job.status == "Completed", result.job.failure_reason
    assert sorted((r.node, r.rank) for r in result.reports) == [
        ("algo-1", 0),
        ("algo-1", 1),
        ("algo-2", 2),
        ("algo-2", 3),
    ]
    for report in result.reports:
        assert report.error is None, report.error
        first = report.stops[0]
        assert first.line == break_line(project / "train.py")
        assert first.variables["rank"] == str(report.rank)
        assert first.variables["tensor"] == "Tensor[1] float32 cpu = [10.]"  # all_reduce of 1+2+3+4 across both nodes
    deadline = time.monotonic() + 30
    while _our_namespaces(prefix) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert _our_namespaces(prefix) == [], "the job's namespaces outlived it"


@needs_netns
def test_stop_removes_namespaces_and_no_netns_keeps_loopback(
    home: Path, tmp_path: Path, job_namespaces: list[str]
) -> None:
    project = make_project(tmp_path)
    job = launch_job("ns-stop", project, nodes=2, wait_seconds=120)
    backend, paths = job.backend, job.paths
    state = read_job_file(paths.job_dir("ns-stop"))
    job_namespaces.extend(state["netns"])
    prefix = state["node_netns"]["algo-1"].rsplit("-", 1)[0]
    assert len(_our_namespaces(prefix)) == 3
    deadline = time.monotonic() + 120
    while backend.describe("ns-stop").secondary_status == "Starting":  # the nodes run (in their namespaces)
        assert time.monotonic() < deadline, "nodes did not start"
        time.sleep(0.3)
    assert backend.stop("ns-stop", wait_seconds=60).status == "Stopped"
    assert _our_namespaces(prefix) == []

    info = launch_job("ns-off", project, nodes=2, netns=False).info
    assert info is not None and (machine := info.details_of(MachineJobDetails)) is not None
    assert machine.isolation == "loopback"
    assert read_job_file(paths.job_dir("ns-off"))["netns"] == []
    backend.stop("ns-off", wait_seconds=60)
