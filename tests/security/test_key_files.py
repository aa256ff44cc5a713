"""The laptop's per-job private key: 0600 in 0700 dirs however it was left on disk, so that OpenSSH
(which refuses a key others can read) and the user's privacy both hold.  The live-session test
checks the modes of a fresh attach; these cover keys that were already there."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

from remote_debug.laptop.core.keys import ensure_job_key
from remote_debug.laptop.core.paths import StatePaths


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _openssh_public_key(key: Path) -> subprocess.CompletedProcess[str]:
    """What OpenSSH makes of the private key (it refuses keys with loose modes)."""
    return subprocess.run(
        ["ssh-keygen", "-y", "-f", str(key)], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL
    )


def test_a_reused_key_with_loose_modes_is_made_private_again(tmp_path: Path) -> None:
    paths = StatePaths(tmp_path / "state")
    key, public = ensure_job_key(paths, "job")
    # e.g. restored from a backup or copied with `cp -r` under a permissive umask
    key.chmod(0o644)
    key.parent.chmod(0o755)
    key.parent.parent.chmod(0o755)
    assert "bad permissions" in _openssh_public_key(key).stderr  # what the user would hit in ssh
    again, same = ensure_job_key(paths, "job")
    assert (again, same) == (key, public)
    assert _mode(key) == 0o600 and _mode(key.parent) == 0o700 and _mode(key.parent.parent) == 0o700
    derived = _openssh_public_key(key)
    assert derived.returncode == 0 and derived.stdout.split()[:2] == public.split()[:2]


def test_a_stale_temporary_file_does_not_lend_its_mode_to_a_new_key(tmp_path: Path) -> None:
    paths = StatePaths(tmp_path / "state")
    stale = paths.job_key("job").with_name("id_ed25519.tmp")
    stale.parent.mkdir(parents=True)
    stale.write_text("left over from an interrupted run\n")
    stale.chmod(0o644)
    key, _ = ensure_job_key(paths, "job")
    assert _mode(key) == 0o600
    assert not stale.exists()
