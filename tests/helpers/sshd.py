"""A throwaway OpenSSH server on 127.0.0.1 (public key only) for tests that need a real sshd."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SSHD = "/usr/sbin/sshd"


@dataclass(frozen=True)
class PrivateSshd:
    port: int
    directory: Path  # holds host, host.pub, authorized_keys, sshd_config

    @property
    def authorized_keys(self) -> Path:
        return self.directory / "authorized_keys"

    @property
    def host_key_line(self) -> str:
        """``ssh-ed25519 AAAA...`` without the comment."""
        return " ".join((self.directory / "host.pub").read_text().split()[:2])


@contextlib.contextmanager
def private_sshd(parent: Path, authorized_keys: str = "") -> Iterator[PrivateSshd]:
    if not os.path.exists(SSHD):
        pytest.skip("OpenSSH server not installed")
    d = Path(tempfile.mkdtemp(prefix="sshd-", dir=parent))
    os.chmod(d, 0o700)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / "host")], check=True)
    (d / "authorized_keys").write_text(authorized_keys)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (d / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {d / 'host'}\nPidFile {d / 'pid'}\n"
        f"AuthorizedKeysFile {d / 'authorized_keys'}\nUsePAM no\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nAuthenticationMethods publickey\nStrictModes no\n"
        "PermitRootLogin prohibit-password\n"
    )
    os.makedirs("/run/sshd", exist_ok=True)
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(d / "sshd_config")], stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.fail("private sshd did not start")
                time.sleep(0.05)
        yield PrivateSshd(port, d)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
