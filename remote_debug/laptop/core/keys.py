"""Per-job client key pairs.  The private key never leaves the laptop; the public key goes into the spec.

Generated with ``cryptography`` (already a paramiko dependency) instead of shelling out to
ssh-keygen, so there is no subprocess and the private key is created 0600 from the first byte.
"""

from __future__ import annotations

import os
from pathlib import Path

from remote_debug.contract.job_secret import derive_job_secret
from remote_debug.laptop.core.paths import StatePaths, private_dir


def ensure_job_key(paths: StatePaths, job: str) -> tuple[Path, str]:
    """Return (private key path, public key line), creating the pair on first use."""
    key_path = paths.job_key(job)
    pub_path = key_path.with_suffix(".pub")
    private_dir(key_path.parent.parent)
    private_dir(key_path.parent)
    if key_path.exists() and pub_path.exists():
        # A key restored or copied under a loose umask: OpenSSH refuses it ("bad permissions"), and
        # others could read it.  Ours, so make it private again rather than fail.
        os.chmod(key_path, 0o600)
        return key_path, pub_path.read_text().strip()
    # imported here: every ProxyCommand (one process per ssh connection) imports this module, and
    # only a launch makes a key (cryptography's import is ~12 ms of each proxy's start-up)
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private_bytes = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    )
    public_line = (
        key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
        + f" remote-debug:{job}"
    )
    tmp = key_path.with_name(key_path.name + ".tmp")
    # O_CREAT's mode applies only to a new file: a stale tmp (an interrupted run) is removed first,
    # and O_EXCL makes sure the key goes into a file created 0600 right here.
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(private_bytes)
    os.replace(tmp, key_path)
    pub_path.write_text(public_line + "\n")
    return key_path, public_line


def job_secret(key_path: Path) -> str:
    """The job secret (``remote_debug.contract.job_secret``) of the key pair whose private key is at ``key_path``.

    Derived, not stored: whoever holds the private key can attach, so nothing else needs keeping."""
    return derive_job_secret(key_path.read_bytes())
