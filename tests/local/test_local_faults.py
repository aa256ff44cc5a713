"""Local faults: the user's files survive concurrent attaches, Ctrl-C at any moment, a full disk and
a read-only HOME.  Every check compares the real bytes on disk before and after."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import json5
import pytest

from remote_debug.laptop.connection import ssh_config
from remote_debug.laptop.core import dir_lock
from remote_debug.laptop.core.paths import StatePaths
from remote_debug.laptop.ide import vscode_launch
from tests.helpers.jobs import launch_job

ROOT = Path(__file__).resolve().parents[2]
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB7dnjpCsVN6hQ7kBQQ2XyvqtWFm8qv4U3s0DgV2c9m1"


def make_fake_job(
    paths: StatePaths,
    job: str,
    supervisor_pid: int,
    *,
    sshd_port: int = 2222,
    host_key: str = KEY,
    user: str = "root",
    ranks: int = 2,
) -> Path:
    """A running 1-node local job as the laptop sees it (job.json, a live supervisor pid, node.json
    and rank-N.json), without starting one: what is under test is what the laptop does with it.
    Returns the node's manifest dir."""
    job_dir = paths.job_dir(job)
    manifest_dir = job_dir / "nodes" / "algo-1" / "remote-debug" / "manifest"
    manifest_dir.mkdir(parents=True)
    (job_dir / "supervisor.pid").write_text(f"{supervisor_pid}\n")
    state = {"status": "InProgress", "secondary_status": "Training", "nodes": ["algo-1"], "nproc_per_node": ranks}
    (job_dir / "job.json").write_text(json.dumps({**state, "created": time.time()}))
    node = {
        "version": 1,
        "job_name": job,
        "node": "algo-1",
        "hosts": ["algo-1"],
        "sshd_host": "127.0.0.1",
        "sshd_port": sshd_port,
        "ssh_user": user,
        "host_public_key": host_key,
        "code_dir": "/opt/ml/code",
        "state": "running",
        "hook_pid": supervisor_pid,
    }
    (manifest_dir / "node.json").write_text(json.dumps(node))
    for r in range(ranks):
        rank = {"version": 1, "rank": r, "local_rank": r, "world_size": ranks, "port": 0, "pid": 1, "state": "idle"}
        (manifest_dir / f"rank-{r}.json").write_text(json.dumps({**rank, "control_port": 3333 + r}))
    return manifest_dir


# One process writing ``rounds`` attaches' worth of files for its own job: ssh entries + the
# Include in ~/.ssh/config + its launch.json entries, exactly the calls attach makes.
WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from remote_debug.laptop.connection import ssh_config
    from remote_debug.laptop.ide import vscode_launch
    from remote_debug.laptop.core.paths import StatePaths

    job, workspace, rounds = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    paths = StatePaths.default()
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB7dnjpCsVN6hQ7kBQQ2XyvqtWFm8qv4U3s0DgV2c9m1"
    for i in range(rounds):
        nodes = [f"algo-{n}" for n in range(1, 2 + i % 2)]
        entries = [
            ssh_config.HostEntry(job, node, "root", 2222, key, paths.job_key(job), "proxy %h %p") for node in nodes
        ]
        ssh_config.write_job_entries(paths, job, entries)
        ssh_config.ensure_include(paths)
        targets = [
            vscode_launch.RankTarget(job, r, "algo-1", "127.0.0.1", 40000 + r, str(workspace), "/opt/ml/code")
            for r in range(1 + i % 3)
        ]
        vscode_launch.update_launch_json(workspace, job, targets)
    """
)


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMOTE_DEBUG_")}
    env.update(HOME=str(home), PYTHONPATH=str(ROOT))
    return env


def test_concurrent_attaches_for_different_jobs_lose_nothing(home: Path, tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / ".vscode").mkdir(parents=True)
    user_launch = '{\n    // mine\n    "version": "0.2.0",\n'
    user_launch += '    "configurations": [\n        {"name": "me"},\n    ],\n}\n'
    (workspace / ".vscode" / "launch.json").write_text(user_launch)
    (home / ".ssh").mkdir(mode=0o700)
    (home / ".ssh" / "config").write_bytes(b"Host *\r\n    User me\r\n")
    jobs = ["job-a", "job-b", "job-c"]
    rounds = 20
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, job, str(workspace), str(rounds)],
            env=_env(home),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for job in jobs
    ]
    errors = []
    for p in procs:
        _, err = p.communicate(timeout=120)
        if p.returncode:
            errors.append(err.strip().splitlines()[-1])
    assert not errors, errors
    # every job's last round is in launch.json (rank counts of round 19: 1 + 19 % 3 = 2 ranks)
    data = json5.loads((workspace / ".vscode" / "launch.json").read_text())
    names = [c["name"] for c in data["configurations"]]
    assert names[0] == "me"
    for job in jobs:
        assert [n for n in names if n.startswith(f"remote-debug: {job} ")] == [
            f"remote-debug: {job} rank 0 (algo-1)",
            f"remote-debug: {job} rank 1 (algo-1)",
        ], names
        assert f"remote-debug: {job} all ranks" in [c["name"] for c in data["compounds"]]
    paths = StatePaths(home / ".remote-debug")
    for job in jobs:
        assert "Host algo-1." + job in paths.job_ssh_config(job).read_text()
    user = (home / ".ssh" / "config").read_bytes()
    assert user.endswith(b"Host *\r\n    User me\r\n") and user.count(b"Include") == 1
    leftovers = [p for p in [*workspace.rglob("*"), *home.rglob("*")] if p.name.endswith(".tmp")]
    assert not leftovers


# --- the lock around read-modify-writes ------------------------------------------------------------


def test_no_flock_on_nfs_warns_once_and_still_writes(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """On NFS, flock on a read-only directory fd fails with ENOLCK/EBADF: attach must still write
    its files (the unless-changed check before each rename still guards the user's file), with one
    warning per folder, not a misleading "cannot write" error or a 30 s wait."""
    workspace = tmp_path / "ws"
    (workspace / ".vscode").mkdir(parents=True)
    (home / ".ssh").mkdir(mode=0o700)
    paths, job = StatePaths.default(), "nfs"

    def no_locks(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    monkeypatch.setattr(ssh_config, "LOCK_TIMEOUT_S", 0.3)  # the old code waited for the lock, then failed
    entry = ssh_config.HostEntry(job, "algo-1", "root", 2222, KEY, paths.job_key(job), "proxy %h %p")
    target = vscode_launch.RankTarget(job, 0, "algo-1", "127.0.0.1", 40000, str(workspace), "/opt/ml/code")
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            ssh_config.write_job_entries(paths, job, [entry])
            ssh_config.ensure_include(paths)
            vscode_launch.update_launch_json(workspace, job, [target])
    assert f"Host algo-1.{job}" in paths.job_ssh_config(job).read_text()
    assert (home / ".ssh" / "config").read_text().startswith(ssh_config.include_line(paths))
    assert "remote-debug: nfs rank 0" in (workspace / ".vscode" / "launch.json").read_text()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, warnings  # one per folder, not one per edit
    assert all("No locks available" in w and "without a lock" in w for w in warnings), warnings


def test_ctrl_c_right_after_the_lock_is_closed_closes_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """os.close releases the descriptor even when a Ctrl-C is raised right after it: closing "again"
    would close whatever file another thread (paramiko's socket) got under that number meanwhile."""
    folder = tmp_path / "folder"
    folder.mkdir()
    real_close = os.close
    reused: list[int] = []

    def close(fd: int) -> None:
        if not reused and os.path.samestat(os.fstat(fd), os.stat(folder)):
            real_close(fd)
            reused.append(os.open(os.devnull, os.O_RDONLY))  # another thread's new file, same number
            raise KeyboardInterrupt
        real_close(fd)

    monkeypatch.setattr(os, "close", close)
    with pytest.raises(KeyboardInterrupt), dir_lock.locked(folder, what="a file"):
        pass
    monkeypatch.undo()
    assert reused, "the lock was not closed through os.close"
    try:
        os.fstat(reused[0])  # EBADF if the lock closed it a second time
    finally:
        with contextlib.suppress(OSError):
            os.close(reused[0])
    with dir_lock.locked(folder, what="a file", timeout=0.2):  # and the lock is free again
        pass


# --- disk full / read-only HOME ------------------------------------------------------------------

PAGE = 4096


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs (root only): HOME and the workspace live on it, so it can fill up or go read-only."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (disk-full / read-only HOME tests)")
    mnt = tmp_path / "fs"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m,mode=0755", "tmpfs", str(mnt)], capture_output=True)
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(fs: Path, leave_pages: int = 0) -> None:
    """Fill ``fs`` to the last page, then give back ``leave_pages`` pages."""
    fd = os.open(fs / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        chunk = b"\0" * 65536
        while True:
            try:
                os.write(fd, chunk)
            except OSError:
                if len(chunk) == 1:
                    break
                chunk = chunk[: len(chunk) // 2]
        size = os.fstat(fd).st_size
        os.ftruncate(fd, max(0, size - leave_pages * PAGE))
    finally:
        os.close(fd)


def snapshot(root: Path) -> dict[str, bytes | None]:
    return {
        str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
        for p in sorted(root.rglob("*"))
        if p.name != "filler"
    }


def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "remote_debug", *args], capture_output=True, text=True, env=_env(home), timeout=60
    )


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("remote-debug: error: "), proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


USER_SSH = b"# my config\r\nHost *\r\n    User me\r\n" + b"# padding\n" * 6000  # 60 KB: more than the pages left
USER_LAUNCH = '{\n    "version": "0.2.0",\n    "configurations": [{"name": "me"}],\n' + "    // pad\n" * 6000 + "}\n"


@pytest.fixture
def sleeper() -> Iterator[int]:
    proc = subprocess.Popen(["sleep", "300"])
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def _setup(fs: Path, supervisor: int) -> tuple[Path, Path, StatePaths]:
    home, workspace = fs / "home", fs / "ws"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_bytes(USER_SSH)
    (workspace / ".vscode").mkdir(parents=True)
    (workspace / ".vscode" / "launch.json").write_text(USER_LAUNCH)
    paths = StatePaths(home / ".remote-debug")
    make_fake_job(paths, "job-a", supervisor)
    make_fake_job(paths, "job-b", supervisor)
    return home, workspace, paths


def _targets(workspace: Path, job: str) -> list[vscode_launch.RankTarget]:
    return [vscode_launch.RankTarget(job, 0, "algo-1", "127.0.0.1", 40000, str(workspace), "/opt/ml/code")]


def test_disk_full_is_one_line_and_leaves_every_file_as_it_was(
    small_fs: Path, sleeper: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, workspace, paths = _setup(small_fs, sleeper)
    monkeypatch.setenv("HOME", str(home))
    assert cli(home, "ssh-config", "job-a").returncode == 0  # an earlier attach's files exist
    manifest = paths.job_dir("job-a") / "nodes" / "algo-1" / "remote-debug" / "manifest" / "node.json"
    manifest.write_text(manifest.read_text().replace('"sshd_port": 2222', '"sshd_port": 2345'))  # must rewrite
    (home / ".ssh" / "config").write_bytes(USER_SSH)  # the user took our line out again
    fill(small_fs)
    before = snapshot(small_fs)
    assert_one_line_error(cli(home, "ssh-config", "job-a"), "No space left on device")  # rewrite job-a
    assert_one_line_error(cli(home, "ssh-config", "job-b"), "No space left on device")  # new job
    with pytest.raises(vscode_launch.LaunchJsonError) as info:
        vscode_launch.update_launch_json(workspace, "job-a", _targets(workspace, "job-a"), paths=paths)
    assert "No space left on device" in str(info.value) and "\n" not in str(info.value)
    assert snapshot(small_fs) == before  # byte for byte, and no temp files
    # room for our small files but not for the user's big ones: the edit of the user's file fails
    # after our own note about it was written; the note is rolled back
    os.unlink(small_fs / "filler")
    fill(small_fs, leave_pages=3)
    before = snapshot(small_fs)
    with pytest.raises(ssh_config.SshConfigError, match="No space left on device"):
        ssh_config.ensure_include(paths)
    with pytest.raises(vscode_launch.LaunchJsonError, match="No space left on device"):
        vscode_launch.update_launch_json(workspace, "job-b", _targets(workspace, "job-b"), paths=paths)
    assert snapshot(small_fs) == before


def test_read_only_home_is_one_line_and_leaves_every_file_as_it_was(
    small_fs: Path, sleeper: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, workspace, paths = _setup(small_fs, sleeper)
    monkeypatch.setenv("HOME", str(home))
    assert cli(home, "ssh-config", "job-a").returncode == 0
    vscode_launch.update_launch_json(workspace, "job-a", _targets(workspace, "job-a"), paths=paths)
    manifest = paths.job_dir("job-a") / "nodes" / "algo-1" / "remote-debug" / "manifest" / "node.json"
    manifest.write_text(manifest.read_text().replace('"sshd_port": 2222', '"sshd_port": 2345'))
    before = snapshot(small_fs)
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    try:
        assert_one_line_error(cli(home, "ssh-config", "job-a"), "Read-only file system")
        assert_one_line_error(cli(home, "ssh-config", "job-b"), "Read-only file system")
        assert_one_line_error(cli(home, "ssh-config", "--remove"), "Read-only file system")
        for edit in (
            lambda: vscode_launch.update_launch_json(workspace, "job-b", _targets(workspace, "job-b"), paths=paths),
            lambda: vscode_launch.remove_job_configs(workspace, "job-a", paths=paths),
        ):
            with pytest.raises(vscode_launch.LaunchJsonError, match="Read-only file system"):
                edit()
        assert snapshot(small_fs) == before
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(small_fs)], check=False)


# --- Ctrl-C at any moment ------------------------------------------------------------------------

SLEEPER = "import time\nfor i in range(900):\n    time.sleep(0.1)\n"
OLD_SSH = b"# mine\r\nHost *.corp\r\n    User me\r\n"  # CRLF, as some users have it
OLD_LAUNCH = '{\n    // mine\n    "configurations": [\n        {"name": "me", "type": "debugpy"},\n    ],\n}\n'


def _check_user_files(home: Path, workspace: Path, paths: StatePaths, job: str) -> list[str]:
    """Each file is its old bytes or a complete, valid new file; returns which ones were new."""
    new: list[str] = []
    user = (home / ".ssh" / "config").read_bytes()
    if user != OLD_SSH:
        line = ssh_config.include_line(paths).encode()
        assert user == line + b"\r\n" + OLD_SSH, user
        new.append("~/.ssh/config")
    ssh = shutil.which("ssh")
    conf = paths.job_ssh_config(job)
    if conf.exists():
        text = conf.read_text()
        assert text.endswith(f"    {ssh_config.HARDENING[-1]}\n") and f"Host algo-1.{job}\n" in text, text
        for config in (conf, home / ".ssh" / "config"):
            if ssh is not None:  # OpenSSH itself parses it
                argv = [ssh, "-G", "-F", str(config), f"algo-1.{job}"]
                assert subprocess.run(argv, capture_output=True, timeout=30).returncode == 0
        new.append("job ssh config")
    known = paths.job_known_hosts(job)
    if known.exists():
        lines = known.read_text().splitlines(keepends=True)
        assert lines and all(len(x.split()) == 3 and x.endswith("\n") for x in lines), lines
        new.append("known_hosts")
    launch = workspace / ".vscode" / "launch.json"
    text = launch.read_text()
    if text != OLD_LAUNCH:
        names = [c["name"] for c in json5.loads(text)["configurations"]]
        assert names == ["me", f"remote-debug: {job} rank 0 (algo-1)"], names
        new.append("launch.json")
    leftovers = [str(p) for p in [*home.rglob("*"), *workspace.rglob("*")] if p.name.endswith(".tmp")]
    assert not leftovers, leftovers
    return new


def _reset(home: Path, workspace: Path, paths: StatePaths) -> None:
    (home / ".ssh" / "config").write_bytes(OLD_SSH)
    (workspace / ".vscode" / "launch.json").write_text(OLD_LAUNCH)
    shutil.rmtree(paths.ssh_dir, ignore_errors=True)
    shutil.rmtree(paths.root / "vscode", ignore_errors=True)


def test_ctrl_c_at_any_moment_of_attach_leaves_old_or_complete_files(home: Path, tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / ".vscode").mkdir(parents=True)
    (workspace / "train.py").write_text(SLEEPER)
    (home / ".ssh").mkdir(mode=0o700)
    job = launch_job("ctrl-c", workspace, command=["python", "train.py"])
    paths = job.paths
    job.wait_status(("InProgress",))
    argv = [sys.executable, "-m", "remote_debug", "attach", job.name, "--json", "--workspace", str(workspace)]

    def attach_until(stop_at: float | str) -> tuple[int, dict[str, float]]:
        """Run attach; SIGINT it ``stop_at`` s after start, or once it printed event ``stop_at``
        (an event is printed after the write it reports, whatever the machine's load).
        Returns (rc, event times)."""
        seen: dict[str, float] = {}
        start = time.monotonic()
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(home), text=True)
        try:
            if isinstance(stop_at, str):
                assert proc.stdout is not None
                for line in proc.stdout:
                    seen[json.loads(line)["event"]] = time.monotonic() - start
                    if stop_at in seen:
                        break
                assert stop_at in seen, (seen, proc.stderr.read() if proc.stderr else "")
            else:
                time.sleep(stop_at)
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        # -2: interrupted while Python still imports; "Fatal Python error": while it imports its site module
        # (before any code of ours runs): Python's own traceback either way
        if proc.returncode != -signal.SIGINT and "Fatal Python error: init_import_site" not in err:
            assert "Traceback" not in err, err
        if "Fatal Python error: init_import_site" in err:  # killed by the signal inside Python's start-up
            return -signal.SIGINT, seen
        return proc.returncode, seen

    _reset(home, workspace, paths)
    _, seen = attach_until("ready")  # a full run: when the writes happen on this machine, now
    # launch.json's entries name the attach's ports: the Ctrl-C gives them back, the user's bytes stay
    # (tests/security/test_stale_launch_ports.py)
    assert _check_user_files(home, workspace, paths, job.name) == [
        "~/.ssh/config",
        "job ssh config",
        "known_hosts",
    ]
    first, last = seen["ssh-config"], seen["launch-json"]
    # ten moments: three before the first write (one while Python still imports), five among the writes,
    # one just after the last; the last moment is not a time but the launch-json event, printed once every
    # write is done
    among = [first + (last - first) * i / 4 for i in range(5)]
    moments: list[float | str] = [0.3, 0.7 * first, 0.95 * first, *among, last + 0.05, "launch-json"]
    outcomes = []
    for moment in moments:
        _reset(home, workspace, paths)
        rc, _ = attach_until(moment)
        assert rc in (130, -signal.SIGINT), rc  # interrupted, not crashed (-2: before Python's handler)
        outcomes.append(len(_check_user_files(home, workspace, paths, job.name)))
        assert (workspace / ".vscode" / "launch.json").read_text() == OLD_LAUNCH
    # the moments did span the writes (timed moments shift with the machine's load; 0.3 s is still importing)
    assert min(outcomes[:3]) < 3 and outcomes[-1] == 3, outcomes


def test_interrupt_before_every_system_call_of_the_writes(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deterministic complement of the test above: KeyboardInterrupt in place of the 1st, 2nd, ...
    os-level call of attach's writes (ssh entries, Include, launch.json): every point a Ctrl-C can
    land between two system calls, not just the ones a timer happens to hit."""
    workspace = tmp_path / "ws"
    (workspace / ".vscode").mkdir(parents=True)
    (home / ".ssh").mkdir(mode=0o700)
    paths, job = StatePaths.default(), "ctrl-c"
    entry = ssh_config.HostEntry(job, "algo-1", "root", 2222, KEY, paths.job_key(job), "proxy %h %p")
    target = vscode_launch.RankTarget(job, 0, "algo-1", "127.0.0.1", 40000, str(workspace), "/opt/ml/code")
    hooked = ("open", "write", "fsync", "close", "replace", "rename", "chmod", "unlink", "mkdir", "rmdir")
    n, finished = 0, False
    while not finished:
        n += 1
        _reset(home, workspace, paths)
        calls = 0

        def hook(real: Callable[..., Any], at: int = n) -> Callable[..., Any]:
            def call(*args: Any, **kwargs: Any) -> Any:
                nonlocal calls
                calls += 1
                if calls == at:
                    raise KeyboardInterrupt
                return real(*args, **kwargs)

            return call

        with monkeypatch.context() as m:
            for name in hooked:
                m.setattr(os, name, hook(getattr(os, name)))
            try:
                ssh_config.write_job_entries(paths, job, [entry])
                ssh_config.ensure_include(paths)
                vscode_launch.update_launch_json(workspace, job, [target])
                finished = True
            except KeyboardInterrupt:
                pass
        _check_user_files(home, workspace, paths, job)
    assert n > 20  # the writes made that many system calls, each one interrupted once
