"""A state dir, or a folder in it, that another local user controls is refused, never taken over
(issue 29, item 5).

On a shared machine ``REMOTE_DEBUG_HOME`` (or the default manifest dir under /tmp) may name a folder
another user made first.  Before the fix we chmodded it 0700 (root can) and wrote job keys and ssh
config into it: its owner kept control, could rename job dirs, and one file planted under
``ssh/jobs/`` was read by every ssh of the victim.  A lock file planted as a symlink in the /tmp
manifest dir made the node daemon truncate whatever it pointed at.

``nobody`` (via ``setpriv``) makes the folders and links; every refusal is one line (CLI: exit 2) and
leaves the folder's mode and contents as they were.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from remote_debug.container import node_env
from remote_debug.container.node import bootstrap
from remote_debug.container.node import sshd as job_sshd
from remote_debug.laptop.connection import ssh_config
from remote_debug.laptop.connection.ssh_config import HostEntry
from remote_debug.laptop.core import keys
from remote_debug.laptop.core.paths import StatePaths, UnsafeStateDir
from tests.helpers.second_user import as_nobody, needs_second_user, nobody

pytestmark = needs_second_user
JOB = "owned"


def run_cli(*args: str) -> tuple[int, str, str]:
    """``remote-debug ARGS`` as the user runs it (this process's environment: HOME, REMOTE_DEBUG_HOME)."""
    proc = subprocess.run(
        [sys.executable, "-m", "remote_debug", *args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=180,
    )
    return proc.returncode, proc.stdout, proc.stderr


PLANTED = "Host *\n    ProxyCommand sh -c 'touch /tmp/pwned'\n"


@pytest.fixture
def shared(home: Path) -> Iterator[Path]:
    """A sticky, world-writable folder like /tmp, that ``nobody`` can reach."""
    del home
    folder = Path(tempfile.mkdtemp(prefix="rd-shared-", dir="/tmp"))
    os.chmod(folder, 0o1777)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def nobody_runs(*argv: str) -> None:
    subprocess.run(as_nobody(*argv), check=True, timeout=30)


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def contents(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def assert_cli_refuses(needle: str) -> None:
    code, out, err = run_cli("stop", JOB)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, (code, out, err)
    assert needle in lines[0] and "REMOTE_DEBUG_HOME" in lines[0], lines[0]


def entry(paths: StatePaths) -> HostEntry:
    return HostEntry(
        job=JOB,
        node="algo-1",
        user="root",
        port=2222,
        host_public_key="ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKey",
        identity_file=paths.job_key(JOB),
        proxy_command="remote-debug proxy %h %p",
    )


def test_a_state_dir_owned_by_another_user_is_refused_not_chmodded(
    shared: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nobody made REMOTE_DEBUG_HOME (0755, theirs): before the fix ``launch``'s key went into it, 0700 by
    our chmod, and nobody still owned the folder.  Now: one line, exit 2, nothing written or chmodded."""
    state = shared / "state"
    nobody_runs("mkdir", "-m", "0755", str(state))
    monkeypatch.setenv("REMOTE_DEBUG_HOME", str(state))
    assert_cli_refuses("owned by uid")
    with pytest.raises(UnsafeStateDir, match="owned by uid"):
        keys.ensure_job_key(StatePaths(state), JOB)  # a caller that skipped default()'s check
    assert mode(state) == 0o755 and contents(state) == []


def test_a_symlinked_subdir_is_refused(home: Path, shared: Path) -> None:
    """Our state dir, but its ``ssh`` folder is a link into nobody's folder: the ssh config must not be
    written there (nor its target chmodded)."""
    target = shared / "theirs"
    nobody_runs("mkdir", "-m", "0777", str(target))
    paths = StatePaths(home / ".remote-debug")
    paths.root.mkdir(mode=0o700)
    paths.ssh_dir.symlink_to(target)
    assert_cli_refuses("symbolic link")
    with pytest.raises(UnsafeStateDir, match="symbolic link"):
        ssh_config.write_job_entries(paths, JOB, [entry(paths)])
    assert mode(target) == 0o777 and contents(target) == []


def test_a_planted_file_in_another_users_ssh_jobs_folder_is_refused(home: Path) -> None:
    """``ssh/jobs`` belongs to nobody (made when the folder was theirs), who planted a config there that
    every ssh of ours would include."""
    paths = StatePaths(home / ".remote-debug")
    paths.job_ssh_configs_dir.mkdir(parents=True, mode=0o755)
    planted = paths.job_ssh_configs_dir / "x.conf"
    planted.write_text(PLANTED)
    user = nobody()
    for path in (paths.job_ssh_configs_dir, planted):
        os.chown(path, user.pw_uid, user.pw_gid)
    assert_cli_refuses("owned by uid")
    with pytest.raises(UnsafeStateDir, match="owned by uid"):
        ssh_config.write_job_entries(paths, JOB, [entry(paths)])
    assert mode(paths.job_ssh_configs_dir) == 0o755 and os.stat(paths.job_ssh_configs_dir).st_uid == user.pw_uid
    assert planted.read_text() == PLANTED and not paths.ssh_config.exists()


def test_a_file_of_another_user_left_in_our_ssh_jobs_folder_is_refused(home: Path) -> None:
    """``ssh/jobs`` is ours (0700) but still holds a file nobody planted while they could write there:
    ssh would include it (or refuse every connection over its owner).  Refused in one line, left as is."""
    paths = StatePaths(home / ".remote-debug")
    paths.job_ssh_configs_dir.mkdir(parents=True, mode=0o700)
    planted = paths.job_ssh_configs_dir / "x.conf"
    planted.write_text(PLANTED)
    os.chown(planted, nobody().pw_uid, nobody().pw_gid)
    assert_cli_refuses("owned by uid")
    assert planted.read_text() == PLANTED and os.stat(planted).st_uid == nobody().pw_uid


@pytest.fixture
def temp_base(shared: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The node's temp dir (where the default manifest dir lies) is ``shared``."""
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    return shared


def test_a_tmp_manifest_dir_made_by_another_user_is_refused(temp_base: Path) -> None:
    """nobody made ``<tmp>/remote-debug`` first: the node daemon must not lock (or publish) in it."""
    nobody_runs("mkdir", "-m", "0777", str(temp_base / "remote-debug"))
    directory = node_env.default_manifest_dir(JOB, "algo-1")
    with pytest.raises(node_env.UnsafeManifestDir, match="owned by uid") as refused:
        bootstrap.NodeLock(directory / bootstrap.LOCK_NAME).acquire()
    assert "\n" not in str(refused.value)
    assert mode(temp_base / "remote-debug") == 0o777 and contents(temp_base / "remote-debug") == []


def test_a_symlinked_tmp_manifest_root_is_refused(temp_base: Path) -> None:
    """nobody got ``<tmp>/remote-debug`` in first, as a link to a folder of theirs."""
    theirs = temp_base / "theirs"
    nobody_runs("mkdir", "-m", "0777", str(theirs))
    nobody_runs("ln", "-s", str(theirs), str(temp_base / "remote-debug"))
    directory = node_env.default_manifest_dir(JOB, "algo-1")
    with pytest.raises(node_env.UnsafeManifestDir, match="symbolic link"):
        bootstrap.NodeLock(directory / bootstrap.LOCK_NAME).acquire()
    assert mode(theirs) == 0o777 and contents(theirs) == []


def test_a_lock_file_planted_as_a_symlink_is_refused(temp_base: Path, tmp_path: Path) -> None:
    """The lock file in the manifest dir is a link to a file of the victim's: before the fix the daemon
    opened it through the link and truncated that file to write its pid."""
    victim = tmp_path / "precious"
    victim.write_text("keep me\n")
    directory = node_env.prepare_manifest_dir(node_env.default_manifest_dir(JOB, "algo-1"))
    (directory / bootstrap.LOCK_NAME).symlink_to(victim)
    with pytest.raises(OSError):
        bootstrap.NodeLock(directory / bootstrap.LOCK_NAME).acquire()
    assert victim.read_text() == "keep me\n"
    assert bootstrap.running_daemon(directory / bootstrap.LOCK_NAME) is None


def test_a_lock_file_planted_as_a_fifo_hangs_nobody(temp_base: Path) -> None:
    """Every Python process of a node reads the lock file (``running_daemon``): a FIFO there must not
    hang it, nor the daemon that takes the lock."""
    directory = node_env.prepare_manifest_dir(node_env.default_manifest_dir(JOB, "algo-1"))
    os.mkfifo(directory / bootstrap.LOCK_NAME)
    assert bootstrap.running_daemon(directory / bootstrap.LOCK_NAME) is None
    with pytest.raises(node_env.UnsafeManifestDir, match="not a file of ours"):
        bootstrap.NodeLock(directory / bootstrap.LOCK_NAME).acquire()


def test_the_job_sshds_state_dir_of_another_user_is_not_chmodded(shared: Path) -> None:
    """The hook's sshd state dir (host key, authorized_keys) made first by nobody: refused before any chmod
    (the check used to come after making it 0700, which root can do to anyone's folder)."""
    theirs = shared / "sshd-state"
    nobody_runs("mkdir", "-m", "0777", str(theirs))
    with pytest.raises(job_sshd.SshdError, match="owned by uid"):
        job_sshd.prepare_state_dir(theirs)
    assert mode(theirs) == 0o777
    link = shared / "sshd-link"
    link.symlink_to(theirs)
    with pytest.raises(job_sshd.SshdError, match="symbolic link"):
        job_sshd.prepare_state_dir(link)
    assert mode(theirs) == 0o777
