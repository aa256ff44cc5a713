"""The human lines `attach`/`demo` print for their events (the JSON lines are the events themselves)."""

from __future__ import annotations

from remote_debug.cli.output import _DESCRIBE, describe_event

# One event of each kind, with the fields attach emits (see remote_debug/local/attach.py and friends).
SAMPLES = [
    ({"event": "launched", "job": "j", "nodes": 2, "nproc_per_node": 4, "workspace": "/ws"},
     "launched job j (2 x 4 ranks); workspace /ws"),
    ({"event": "rank-attached", "rank": 1}, "rank 1: debugger attached"),
    ({"event": "job-status", "job": "j", "status": "InProgress", "secondary_status": "Downloading", "message": ""},
     "job j: InProgress / Downloading"),
    ({"event": "waiting", "what": "nodes", "nodes": ["algo-1", "algo-2"]},
     "waiting for nodes to start: algo-1, algo-2"),
    ({"event": "ssh-config", "aliases": ["algo-1.j"]}, "ssh entries written (algo-1.j): try `ssh algo-1.j`"),
    ({"event": "node-connected", "node": "algo-1", "alias": "algo-1.j"}, "connected to algo-1.j"),
    ({"event": "rank-ready", "rank": 0, "node": "algo-1", "local_port": 4000, "remote_port": 5000, "ide": "vscode"},
     "rank 0 on algo-1: debugger at 127.0.0.1:4000"),
    ({"event": "rank-unavailable", "rank": 1, "node": "algo-1", "state": "skipped", "error": None},
     "rank 1 on algo-1 has no debugger (skipped: )"),
    ({"event": "launch-json", "path": "/ws/.vscode/launch.json", "compound": "remote-debug: j all ranks"},
     "VS Code: /ws/.vscode/launch.json has 'remote-debug: j all ranks'"),
    ({"event": "ready", "ranks": [0, 1]}, "ready: ranks [0, 1]"),
    ({"event": "stopped", "rank": 0, "file": "t.py", "line": 3, "reason": "breakpoint", "variables": {"x": "1"}},
     "rank 0 stopped at t.py:3 (breakpoint): {'x': '1'}"),
    ({"event": "rank-detached", "rank": 0}, "rank 0 detached"),
    ({"event": "reconnected", "node": "algo-1"}, "reconnected to algo-1"),
    ({"event": "tunnel-down", "node": "algo-1", "error": "EOF"}, "tunnel to algo-1 is down, retrying: EOF"),
    ({"event": "warning", "message": "slow"}, "warning: slow"),
    ({"event": "pycharm-build", "build": "263.1", "source": "/opt/pycharm", "installed": "263.1.2", "others": []},
     "PyCharm build 263.1 from /opt/pycharm, pydevd-pycharm 263.1.2 installed"),
    ({"event": "pycharm-config", "name": "j", "port": 7000, "path": "/ws/.idea/x.xml", "steps": ["a", "b"]},
     "PyCharm run configuration 'j' (port 7000) written to /ws/.idea/x.xml\n  1. a\n  2. b"),
    ({"event": "rank-connected", "rank": 0, "node": "algo-1"}, "rank 0 on algo-1: connected to PyCharm's debug server"),
    ({"event": "ide-not-listening", "rank": 0, "node": "algo-1", "message": "start it"},
     "rank 0 on algo-1 is waiting: start it"),
    ({"event": "rank-failed", "rank": 1, "node": "algo-1", "error": "ValueError: x", "traceback": "Traceback\n  line\n",
      "held": False}, "rank 1 on algo-1 failed: ValueError: x\n    Traceback\n      line"),
    ({"event": "job-ended", "status": "Failed", "exit_code": 1, "failure_reason": "rank 1 failed"},
     "job ended: Failed, exit code 1 (rank 1 failed)"),
]


def test_every_described_event_has_its_line() -> None:
    assert {e["event"] for e, _ in SAMPLES} == set(_DESCRIBE)
    for event, line in SAMPLES:
        assert describe_event(event) == line


def test_pycharm_ready_held_failure_and_quiet_events() -> None:
    pycharm = {"event": "rank-ready", "rank": 0, "node": "algo-1", "local_port": 4000, "remote_port": 5000,
               "ide": "pycharm"}
    assert describe_event(pycharm) == (
        "rank 0 on algo-1: its localhost:5000 leads to PyCharm's debug server at 127.0.0.1:4000"
    )
    held = describe_event({"event": "rank-failed", "rank": 0, "node": "a", "error": "E", "held": True})
    assert held is not None and held.startswith("rank 0 on a failed: E; held for a post-mortem")
    assert describe_event({"event": "pause-safe", "rank": 1}) is None  # not worth a line
    assert describe_event({}) is None
