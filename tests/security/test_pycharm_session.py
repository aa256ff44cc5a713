"""PyCharm mode adds listeners of its own - each rank's node port is a reverse forward that sshd opens
on the node, and the IDE's debug server listens on the laptop: scanned on a live session
(tests/helpers/live_session.py) with both ranks connected to the headless pydevd stand-in."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.helpers.hook_runs import scan_for_secrets
from tests.helpers.live_session import live_session, scan_listeners

pytestmark = [
    pytest.mark.skipif(not Path("/usr/sbin/sshd").exists(), reason="needs OpenSSH's sshd"),
    # looked up, not imported: pydevd-pycharm must never be loaded into a process that may load debugpy
    pytest.mark.skipif(importlib.util.find_spec("pydevd_pycharm") is None, reason="pydevd-pycharm is not installed"),
]


def test_pycharm_session_listeners_and_command_lines(tmp_path_factory: pytest.TempPathFactory) -> None:
    ready = {("rank-connected", 0), ("rank-connected", 1)}
    # PyCharm ranks connect out during their wait window (they cannot be started later on demand)
    with live_session(
        tmp_path_factory.mktemp("security-pycharm"), "sec-pyc", "pycharm", ready.issubset, wait_seconds=60
    ) as s:
        ports = scan_listeners(s)
        m = s.manifest()
        assert ports.get(m.sshd_port) == "sshd"
        ready_events = [e for e in s.events if e["event"] == "rank-ready"]
        assert len(ready_events) == 2
        for e in ready_events:
            assert ports.get(e["remote_port"]) == "sshd", (e, ports)  # the reverse forward, on the node
            assert ports.get(e["local_port"]) == "attach (this process)", (e, ports)  # the IDE's server
        for r in m.ranks:  # PyCharm ranks have a control channel (pause-safe, stacks) since it was added
            assert not r.control_port or ports.get(r.control_port) == "rank", (r.rank, ports)
        argv = scan_for_secrets(s.secrets(), "cmdline")
        assert argv.offenders == []
        # what attach wrote for the IDE and ssh (headless writes no run configuration) holds no secret
        written = [p for p in s.project.rglob("*") if p.is_file() and p.name != "train.py"]
        written += [s.paths.ssh_config, s.paths.job_ssh_config(s.name), s.paths.job_known_hosts(s.name)]
        leaks = [p for p in written if "PRIVATE KEY" in p.read_text() or any(x in p.read_text() for x in s.secrets())]
        assert leaks == []
        print(
            f"[security] sec-pyc secrets: {argv.scanned} command lines and {len(written)} files scanned, "
            f"offenders: {argv.offenders + leaks}"
        )
