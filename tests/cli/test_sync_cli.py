"""``remote-debug sync`` as users run it (a subprocess) against one real 1-node local job: the human line
and the ``--json`` event, one-line errors with exit code 2, ``--watch`` picking up a save until Ctrl-C
(exit 130), and a Ctrl-C mid-upload that leaves no partial file on the node."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from remote_debug.laptop.core.paths import StatePaths
from remote_debug.laptop.wire import events
from remote_debug.laptop.wire.event_text import size_text, synced_line
from tests.conftest import cleanup_jobs
from tests.helpers.waiting import wait_for

JOB = "synccli"
SLEEPER = "import time\nfor i in range(6000):\n    time.sleep(0.1)\n"
HUMAN = re.compile(r"^synced (\d+) files? \(([\d.]+ k?B)\) to 1 node in \d+\.\d\d s \((rsync|sftp)\)$")
METHODS = [
    pytest.param("rsync", marks=pytest.mark.skipif(shutil.which("rsync") is None, reason="needs rsync")),
    "sftp",
]


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "remote_debug", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ),
    )


def popen(*args: str, new_session: bool = False) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "remote_debug", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
        start_new_session=new_session,
    )


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("remote-debug: error: "), proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


class Project:
    def __init__(self, root: Path, home: Path) -> None:
        self.root, self.home = root, home
        self.code = StatePaths.default().job_dir(JOB) / "nodes" / "algo-1" / "code"

    def write(self, rel: str, text: str) -> None:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Project]:
    if not Path("/usr/sbin/sshd").exists():
        pytest.skip("needs OpenSSH's sshd")
    base = tmp_path_factory.mktemp("synccli")
    home = base / "home"
    home.mkdir()
    root = base / "project"
    root.mkdir()
    (root / "sleeper.py").write_text(SLEEPER)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(home))
        for name in list(os.environ):
            if name.startswith("REMOTE_DEBUG_"):
                mp.delenv(name)
        paths = StatePaths.default()
        try:
            launched = cli("launch", "--local", "--name", JOB, "--source-dir", str(root), "--", "python", "sleeper.py")
            assert launched.returncode == 0, launched.stderr
            yield Project(root, home)
        finally:
            cli("stop", JOB, timeout=60)
            cleanup_jobs(paths)


def test_human_line_and_json_event(project: Project) -> None:
    project.write("pkg/model.py", "W = 42\n")
    human = cli("sync", JOB)
    assert human.returncode == 0, human.stderr
    match = HUMAN.match(human.stdout.strip())
    assert match and match.group(1, 2) == ("1", "7 B"), human.stdout
    seen = cli("ssh", JOB, "--", "cat", "pkg/model.py")  # through the job's ssh, in its code dir
    assert (seen.returncode, seen.stdout) == (0, "W = 42\n"), seen.stderr

    project.write("pkg/model.py", "W = 'forty-two'\n")
    out = cli("sync", JOB, "--json", "--method", "sftp")
    assert out.returncode == 0, out.stderr
    (line,) = out.stdout.splitlines()
    event = events.from_json(json.loads(line))  # strict: exactly the schema the extension's types follow
    assert isinstance(event, events.Synced)
    assert (event.job, event.source, event.files, event.bytes) == (JOB, str(project.root), 1, 16)
    assert [(n.node, n.method, n.files, n.bytes) for n in event.nodes] == [("algo-1", "sftp", 1, 16)]

    again = json.loads(cli("sync", JOB, "--json").stdout)  # unchanged: no file data at all
    assert (again["files"], again["bytes"]) == (0, 0)


def test_human_wording() -> None:
    assert [size_text(n) for n in (0, 999, 12_400, 3_000_000, 5 * 10**15)] == [
        "0 B",
        "999 B",
        "12.4 kB",
        "3.0 MB",
        "5000.0 TB",
    ]
    two = events.Synced(
        job="j",
        source="/w",
        files=6,
        bytes=24_800,
        seconds=0.414,
        nodes=[
            events.NodeSynced(node=n, method="rsync", files=3, bytes=12_400, seconds=0.4) for n in ("algo-1", "algo-2")
        ],
    )
    assert synced_line(two) == "synced 3 files (12.4 kB) to 2 nodes in 0.41 s (rsync)"
    mixed = events.Synced(
        job="j",
        source="/w",
        files=1,
        bytes=5,
        seconds=1.0,
        nodes=[
            events.NodeSynced(node="algo-1", method="rsync", files=1, bytes=5, seconds=1.0),
            events.NodeSynced(node="algo-2", method="sftp", files=0, bytes=0, seconds=0.1),
        ],
    )
    assert synced_line(mixed) == (
        "synced 1 file (5 B: algo-1: 1 file, 5 B; algo-2: 0 files, 0 B) to 2 nodes in 1.00 s (rsync, sftp)"
    )


def test_bad_input_is_one_line_and_exit_2(project: Project, tmp_path: Path) -> None:
    assert_one_line_error(cli("sync", "no-such-job"), "unknown job")
    assert_one_line_error(cli("sync", JOB, "--source", str(tmp_path / "nope")), "does not exist")
    (tmp_path / "file").write_text("")
    assert_one_line_error(cli("sync", JOB, "--source", str(tmp_path / "file")), "is not a folder")
    assert_one_line_error(cli("sync", JOB, "--node", "algo-2"), "no node 'algo-2'", "algo-1")
    assert_one_line_error(cli("sync", JOB, "--exclude", "!"), "bad ignore pattern")
    assert_one_line_error(cli("sync", JOB, "--method", "scp"), "--method")
    done = project.root.parent / "quick"
    done.mkdir()
    (done / "quick.py").write_text("print('done')\n")
    assert (
        cli("launch", "--local", "--name", "quick", "--source-dir", str(done), "--", "python", "quick.py").returncode
        == 0
    )

    def completed() -> bool:
        jobs = json.loads(cli("jobs", "--json").stdout)
        return any(j["name"] == "quick" and j["status"] == "Completed" for j in jobs)

    wait_for(completed, 60, "the quick job to complete")
    assert_one_line_error(cli("sync", "quick"), "job quick is Completed", "nothing to sync to")


def test_watch_picks_up_a_save_until_ctrl_c(project: Project) -> None:
    project.write("watched.py", "V = 0\n")
    proc = popen("sync", JOB, "--watch", "--json")
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    try:
        wait_for(lambda: len(lines) >= 1 or proc.poll() is not None, 60, "the first sync")
        assert proc.poll() is None, proc.stderr.read()  # type: ignore[union-attr]
        assert (project.code / "watched.py").read_text() == "V = 0\n"
        project.write("watched.py", "V = 'saved'\n")
        wait_for(lambda: (project.code / "watched.py").read_text() == "V = 'saved'\n", 20, "the save to arrive")
        project.write("sub/new.py", "N = 1\n")  # a new folder too
        wait_for(lambda: (project.code / "sub" / "new.py").exists(), 20, "the new file to arrive")
        wait_for(lambda: len(lines) >= 3, 10, "its line (the file lands just before it is printed)")
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)  # stdout is the reader's; stderr holds a few lines
    reader.join(5)
    err = proc.stderr.read()  # type: ignore[union-attr]
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "remote-debug: stopped watching: the job keeps running", err
    synced = [json.loads(line) for line in lines]
    assert len(synced) >= 3 and all(e["event"] == "synced" for e in synced)
    assert sum(e["files"] for e in synced[1:]) >= 2


@pytest.mark.parametrize("method", METHODS)
def test_ctrl_c_mid_upload_leaves_no_partial_file(project: Project, method: str) -> None:
    """Ctrl-C as a terminal sends it: to the whole process group (rsync, ssh and the ProxyCommand too)."""
    big = project.root / f"big_{method}.bin"
    with big.open("wb") as fh:
        fh.truncate(400 * 1000 * 1000)  # sparse: quick to make, as slow to send as any
    proc = popen("sync", JOB, "--method", method, new_session=True)
    try:

        def uploading() -> bool:
            assert proc.poll() is None, proc.communicate()
            return any(p.name.startswith(f".{big.name}.") for p in project.code.iterdir())

        wait_for(uploading, 60, "the upload to start")
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    big.unlink()
    assert proc.returncode == 130, err
    assert err.strip().splitlines() == ["remote-debug: sync interrupted: no partial file was left"]
    left = [p.name for p in project.code.iterdir() if big.name in p.name]
    assert left == [], left  # no temporary file, and no half file under the real name
