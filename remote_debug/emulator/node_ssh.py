"""The MPI side of a DLC image on the emulated nodes: sshd on port 22, root logins by key.

Laid out under ``work_dir`` only (the host's ``/root/.ssh`` and ``/etc/ssh`` are never written):

* ``work_dir/ssh/``: the job's client key pair (one per job, as every container of a DLC job shares
  the image's key);
* ``work_dir/nodes/<node>/ssh/``: the node's host key, ``sshd_config``, pid file and ``sshd.log``;
* ``work_dir/nodes/<node>/home/``: the upper layer of the node's ``/root`` overlay, holding its
  ``.ssh`` (key pair, ``authorized_keys``, ``known_hosts``, ``config``).

``known_hosts`` pins every node's host key under ``algo-N`` and its address, and the client config
says ``StrictHostKeyChecking yes``: ``ssh algo-2`` from algo-1 (mpirun) and the toolkit's paramiko
probe (which loads ``~/.ssh/known_hosts``) both meet a known key, and a wrong one is refused.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from remote_debug.emulator.node_model import ClusterError, Node

SSHD = "/usr/sbin/sshd"  # absolute: sshd re-executes itself and refuses a relative path
SSHD_CONFIG = "/etc/ssh/sshd_config"
SSHD_ARGV = [SSHD, "-D", "-e"]  # the config is the node's /etc/ssh/sshd_config (bound by node_enter)
SSHD_ENV: Mapping[str, str] = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/root",
    "LANG": "C.UTF-8",
}
PORT = 22
LISTEN_TIMEOUT = 15.0
KEY = "id_ed25519"


@dataclass(frozen=True)
class NodeSsh:
    dir: Path  # work_dir/nodes/<node>/ssh
    home_upper: Path  # upper layer of the node's /root
    home_work: Path  # overlayfs's scratch dir (same filesystem as the upper layer)

    @property
    def host_key(self) -> Path:
        return self.dir / "ssh_host_ed25519_key"

    @property
    def sshd_config(self) -> Path:
        return self.dir / "sshd_config"

    @property
    def log(self) -> Path:
        return self.dir / "sshd.log"


def layout(node: Node) -> NodeSsh:
    return NodeSsh(dir=node.dir / "ssh", home_upper=node.dir / "home", home_work=node.dir / "home.work")


def _run(argv: list[str]) -> str:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ClusterError(f"{argv[0]} failed: {exc}") from None
    if proc.returncode != 0:
        detail = " ".join((proc.stderr or proc.stdout).split()) or f"exit code {proc.returncode}"
        raise ClusterError(f"{' '.join(argv[:2])} ... failed: {detail}")
    return proc.stdout


def _keygen(path: Path, comment: str) -> str:
    """A fresh ed25519 key at ``path`` (0600); returns the public key's ``type base64``."""
    path.unlink(missing_ok=True)
    path.with_name(path.name + ".pub").unlink(missing_ok=True)
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)])
    return " ".join(path.with_name(path.name + ".pub").read_text().split()[:2])


def _write(path: Path, text: str, mode: int = 0o600) -> None:
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)


def _sshd_config(ssh: NodeSsh, job: str) -> str:
    return "\n".join(
        [
            f"# remote-debug emulator, job {job}: this node's sshd (bound over /etc/ssh/sshd_config in the node)",
            f"Port {PORT}",
            f"HostKey {ssh.host_key}",
            f"PidFile {ssh.dir / 'sshd.pid'}",
            "PermitRootLogin prohibit-password",
            "PubkeyAuthentication yes",
            "AuthenticationMethods publickey",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            # PAM's session modules (loginuid, systemd) expect a booted system; keys need none of it
            "UsePAM no",
            "StrictModes yes",
            "AuthorizedKeysFile .ssh/authorized_keys",
            "X11Forwarding no",
            "PrintMotd no",
            "AcceptEnv LANG LC_*",
            "Subsystem sftp internal-sftp",
            "",
        ]
    )


def _client_config(job: str) -> str:
    return (
        f"# remote-debug emulator, job {job}: every node's host key is pinned in known_hosts\n"
        "Host *\n"
        "    StrictHostKeyChecking yes\n"
        "    BatchMode yes\n"
        f"    IdentityFile ~/.ssh/{KEY}\n"
    )


def prepare(job: str, work_dir: Path, nodes: Sequence[Node]) -> dict[str, NodeSsh]:
    """Keys and configs for every node; nothing is started.  Returns each node's layout."""
    for tool in (SSHD, "ssh-keygen", "ssh"):
        if shutil.which(tool) is None:
            raise ClusterError(f"MPI jobs need OpenSSH ({tool} missing): apt-get install openssh-server openssh-client")
    # sshd's privilege-separation chroot; openssh-server's tmpfiles.d makes it at boot, and an empty
    # root-owned directory is all it is.
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)

    client_dir = work_dir / "ssh"
    client_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    client_pub = _keygen(client_dir / KEY, f"root@{job}")
    client_key = (client_dir / KEY).read_text()

    layouts = {n.name: layout(n) for n in nodes}
    pins: dict[str, str] = {}
    for n in nodes:
        ssh = layouts[n.name]
        ssh.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        pins[n.name] = _keygen(ssh.host_key, f"{n.name}@{job}")
        _write(ssh.sshd_config, _sshd_config(ssh, job), 0o644)
        _run([SSHD, "-t", "-f", str(ssh.sshd_config)])
    known = "".join(f"{n.name},{n.address} {pins[n.name]}\n" for n in nodes)

    root_mode = os.stat("/root").st_mode & 0o7777 if os.path.isdir("/root") else 0o700
    for n in nodes:
        ssh = layouts[n.name]
        shutil.rmtree(ssh.home_work, ignore_errors=True)  # overlayfs wants an empty work dir
        ssh.home_work.mkdir(mode=0o700, parents=True)
        dot_ssh = ssh.home_upper / ".ssh"
        dot_ssh.mkdir(mode=0o700, parents=True, exist_ok=True)
        ssh.home_upper.chmod(root_mode)  # the merged /root takes the upper layer's mode
        # Opaque: the host's own /root/.ssh (if any) stays out of the nodes, only the job's key is there.
        with contextlib.suppress(OSError):
            os.setxattr(dot_ssh, "trusted.overlay.opaque", b"y")
        _write(dot_ssh / KEY, client_key)
        _write(dot_ssh / f"{KEY}.pub", f"{client_pub} root@{job}\n", 0o644)
        _write(dot_ssh / "authorized_keys", f"{client_pub} root@{job}\n")
        _write(dot_ssh / "known_hosts", known + f"localhost,127.0.0.1 {pins[n.name]}\n", 0o644)
        _write(dot_ssh / "config", _client_config(job))
    return layouts


def wait_listening(sshds: Mapping[str, subprocess.Popen[bytes]], layouts: Mapping[str, NodeSsh]) -> None:
    """Until every node's sshd listens on port 22; a daemon that died is reported with its last log line.

    Read from the daemon's own /proc/<pid>/net/tcp{,6} (its namespace's table) rather than by
    connecting, which would log an aborted key exchange in every node."""
    deadline = time.monotonic() + LISTEN_TIMEOUT
    pending = dict(sshds)
    while pending:
        for name, proc in list(pending.items()):
            if proc.poll() is not None:
                raise ClusterError(f"sshd on {name} exited ({proc.returncode}): {_last_line(layouts[name].log)}")
            if _listening(proc.pid, PORT):
                del pending[name]
        if not pending:
            return
        if time.monotonic() > deadline:
            first = next(iter(pending))
            raise ClusterError(f"sshd did not listen on port {PORT} of {', '.join(pending)}: see {layouts[first].log}")
        time.sleep(0.05)


def _listening(pid: int, port: int) -> bool:
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                return True
    return False


def _last_line(path: Path) -> str:
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return f"see {path}"
    return lines[-1].strip() if lines else f"see {path}"
