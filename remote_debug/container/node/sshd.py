"""A private OpenSSH server for one training node.

Why our own sshd and not the image's: the image may have none running, MPI jobs already run one on
port 22 with their own keys, and we must not touch system files.  So every file sshd needs (host
key, config, authorized_keys, pid file, log) lives in one private state dir, the server listens on
127.0.0.1 only (the transport - SSM, a relay, a local TCP connection - reaches it from inside the
node) on a port other than 22, and it accepts exactly one public key, the laptop's.

The host key is generated here, per job, and its public half is published in the node manifest,
which reaches the laptop through an authenticated channel: that is what lets the laptop pin it
(StrictHostKeyChecking yes) instead of trusting on first use.

For a job on this machine, whose loopback every local user reaches, sshd does not listen itself: the
uid gate (``sshd_gate``) holds the port, closes other users' connections unread and runs ``sshd -i``
with the same config for each of ours (``start_sshd(uid_gate=True)``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from remote_debug.contract.spec import LOOPBACK
from remote_debug.oskit.osutil import proc_stat

ENV_SSHD = "REMOTE_DEBUG_SSHD"  # path of the sshd binary (tests point it at a missing file)
PRIVSEP_DIR = "/run/sshd"  # root sshd refuses to start without it ("Missing privilege separation directory")
HOST_KEY_NAME = "ssh_host_ed25519_key"
READY_TIMEOUT = 5.0
LOGIN_GRACE_S = 20  # sshd's LoginGraceTime (its default is 120 s)
MAX_STARTUPS = "20:30:200"  # start:rate:full (its default is 10:30:100)
PORT_ATTEMPTS = 3
GATE_MODULE = "remote_debug.container.node.sshd_gate"  # run as a program: see its docstring
GATE_MAX_SESSIONS = 64
GATE_READY_TIMEOUT = 15.0  # a Python start, not sshd's: slower on a loaded machine
# Where distributions put OpenSSH's sftp-server (Debian/Ubuntu, RHEL/Amazon Linux, Arch/Alpine, others).
SFTP_SERVERS = (
    "/usr/lib/openssh/sftp-server",
    "/usr/libexec/openssh/sftp-server",
    "/usr/lib/ssh/sftp-server",
    "/usr/libexec/sftp-server",
    "/usr/lib/sftp-server",
)


class SshdError(RuntimeError):
    """sshd could not be set up or started (message is one line)."""


def find_sshd() -> str:
    configured = os.environ.get(ENV_SSHD)
    if configured:
        # sshd re-executes itself per connection and insists on an absolute path for that.
        if os.sep in configured:
            return os.path.abspath(configured)
        return shutil.which(configured) or configured
    return shutil.which("sshd") or "/usr/sbin/sshd"


def current_user() -> str:
    """The login user: whoever runs the hook (a non-root sshd can only log in as itself anyway)."""
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:  # uid without a passwd entry (some containers): sshd will refuse it too, say so
        raise SshdError(f"uid {os.geteuid()} has no passwd entry, sshd cannot log anyone in") from None


def find_sftp_server() -> str | None:
    """OpenSSH's sftp-server binary, needed when sessions run through a ForceCommand (see ``ssh_session``)."""
    sshd_dir = Path(find_sshd()).resolve().parent
    candidates = [*SFTP_SERVERS, str(sshd_dir / "sftp-server"), shutil.which("sftp-server") or ""]
    for path in candidates:
        if path and os.path.isfile(path) and os.access(path, os.X_OK) and not any(c.isspace() for c in path):
            return path
    return None


def free_port(address: str = LOOPBACK) -> int:
    """A port the kernel considers free right now on ``address`` (never 22: it is not ephemeral)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((address, 0))
        return int(s.getsockname()[1])


def prepare_state_dir(path: Path) -> Path:
    """Create ``path`` 0700 and make sure we own it.

    We run sshd with ``StrictModes no`` because StrictModes also inspects every parent of the
    authorized_keys file, and /tmp (where state dirs of tests and most containers live) is
    world-writable, so sshd would refuse the key.  The property StrictModes protects - nobody else
    can replace authorized_keys or the host key - we check here instead: the dir is ours and 0700,
    and sticky /tmp keeps others from renaming it away.
    """
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = path.lstat()  # checked before the chmod: never chmod a link's target or another user's folder
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise SshdError(f"state dir {path} is a symbolic link or not a folder: refusing to trust it")
    if st.st_uid != os.geteuid():
        raise SshdError(f"state dir {path} is owned by uid {st.st_uid}, not by us: refusing to trust it")
    os.chmod(path, 0o700)
    st = path.lstat()
    if stat.S_IMODE(st.st_mode) & 0o077:
        raise SshdError(f"state dir {path} is accessible to others (mode {stat.S_IMODE(st.st_mode):o})")
    return path


def _quote(path: Path) -> str:
    # sshd_config splits arguments on whitespace but honours double quotes.
    text = str(path)
    if '"' in text or "\n" in text:
        raise SshdError(f"path {text!r} cannot be written into sshd_config")
    return f'"{text}"'


def render_config(
    state: Path,
    port: int,
    user: str,
    listen_address: str = LOOPBACK,
    *,
    force_command: str | None = None,
    sftp_server: str | None = None,
) -> str:
    """The config; with ``force_command`` (and the ``sftp_server`` it needs) every session runs through
    it - ``ssh_session``, which makes a session look like the job and end with it."""
    # SSM transports reach sshd from inside the node, so it listens on loopback and nobody else may
    # connect; only the direct (VPC) transport listens on the node's own address, reached through
    # the user's bastion - still public-key only, with the host key pinned from the manifest.
    lines = [
        "# written by remote_debug for this job only",
        f"Port {port}",
        f"ListenAddress {listen_address}",
        f"HostKey {_quote(state / HOST_KEY_NAME)}",
        f"PidFile {_quote(state / 'sshd.pid')}",
        f"AuthorizedKeysFile {_quote(state / 'authorized_keys')}",
        "StrictModes no",  # see prepare_state_dir: we check ownership and modes ourselves
        "UsePAM no",
        "PubkeyAuthentication yes",
        "AuthenticationMethods publickey",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "PermitRootLogin prohibit-password",
        f"AllowUsers {user}",
        "AllowTcpForwarding yes",  # the debug ports are forwarded through this connection
        # Only TCP forwards (-L, -W, -D, and -R for PyCharm's reverse tunnels, bound to loopback):
        # nothing of the laptop's (agent, X display) reaches the job, and a login runs no ~/.ssh/rc
        # or ~/.ssh/environment that the image (or a training script) left in the user's home.
        "GatewayPorts no",
        "AllowAgentForwarding no",
        "AllowStreamLocalForwarding no",  # our control channel and ranks are TCP on loopback
        "X11Forwarding no",
        "PermitTunnel no",
        "PermitUserRC no",
        "PermitUserEnvironment no",
        "PermitTTY yes",
        "UseDNS no",
        "PrintMotd no",
        # Keepalives keep idle SSM sessions up, and end a connection whose link hangs (no FIN/RST) within
        # 30 s: its forwarded debug sessions close and a rank paused at a breakpoint runs on.
        "ClientAliveInterval 10",
        "ClientAliveCountMax 3",
        # Unauthenticated connections are bounded: anyone who can reach the port (every local user, for
        # a job on a shared machine) could otherwise hold sshd's default 100 pre-auth slots for its
        # default 120 s each and lock the developers out.  Our own login (key exchange + one public
        # key) takes well under a second, a few over SSM: 20 s frees a held slot 6x sooner.  Past 20
        # pending connections sshd drops new ones at random (30 %, rising), and all past 200: some of
        # ours get through, and our relay (``remote-debug proxy``) tries again when dropped.
        # PerSourcePenalties (OpenSSH 9.8) would not help: every local connection comes from loopback.
        # A local job's sshd also sits behind the uid gate (sshd_gate): other users never reach it.
        f"LoginGraceTime {LOGIN_GRACE_S}",
        f"MaxStartups {MAX_STARTUPS}",
    ]
    if force_command and sftp_server:
        if "\n" in force_command or "\n" in sftp_server:
            raise SshdError("a session command cannot be written into sshd_config")
        # A forced command runs subsystems too (their command in SSH_ORIGINAL_COMMAND): internal-sftp
        # cannot run that way, the binary can.
        lines += [f"Subsystem sftp {sftp_server}", f"ForceCommand {force_command}"]
    else:
        lines.append("Subsystem sftp internal-sftp")  # editors copy files over sftp; needs no sftp-server binary
    return "\n".join(lines) + "\n"


def _run(argv: list[str], what: str) -> None:
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        raise SshdError(f"{what}: {exc}") from None
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        raise SshdError(f"{what} (exit {proc.returncode}): {detail[-1] if detail else 'no output'}")


def _log_since(path: Path, offset: int) -> str:
    """What sshd logged after ``offset``, folded to one line (the last few lines say why it stopped)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            lines = fh.read().decode(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return "; ".join(line.strip() for line in lines[-3:])


def _child_setup() -> None:
    """Runs in the sshd child before exec: own process group, and die with the hook.

    The group lets stop() reach the listener without signalling the hook's group; the parent-death
    signal (Linux) takes sshd down even if the hook itself is SIGKILLed, so no stray server is left
    listening with the job's key after the job is gone.
    """
    os.setpgid(0, 0)
    set_parent_death_signal(signal.SIGTERM)


def set_parent_death_signal(sig: int) -> None:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(sig), 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except Exception:  # not Linux, or no libc: best effort only
        pass


def _children_of(pid: int) -> list[int]:
    """Direct children of ``pid`` (Linux /proc): sshd's per-connection processes."""
    out = []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not entry.isdigit():
            continue
        fields = proc_stat(entry)  # state, then the parent's pid
        if fields is not None and len(fields) > 1 and fields[1] == str(pid):
            out.append(int(entry))
    return out


@dataclass
class Sshd:
    """A running private sshd; ``stop()`` it when the job ends."""

    process: subprocess.Popen[bytes]
    port: int
    user: str
    host_public_key: str  # "ssh-ed25519 AAAA..." (type and base64, no comment)
    state_dir: Path
    log_path: Path
    gated: bool = False  # True: ``process`` is the uid gate (``sshd_gate``), which runs ``sshd -i`` per connection

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self, timeout: float = 3.0) -> None:
        """terminate -> wait -> kill, for the listener and the connections it forked.

        sshd's listener exits on SIGTERM without touching open sessions (each re-exec'd connection
        process sits in its own session), so we end those too: the job is over, and a session
        outliving it would keep the laptop's tunnels pointing at nothing.  Behind the uid gate the
        listener is the gate and its children are the ``sshd -i`` of each connection: the same.
        """
        if self.process.poll() is not None:
            return
        victims = _children_of(self.process.pid)
        for pid in [self.process.pid, *victims]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for pid in victims:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def _wait_ready(proc: subprocess.Popen[bytes], address: str, port: int, pid_file: Path, deadline: float) -> bool:
    """True once our sshd has bound ``port`` and it accepts TCP; False if sshd exited first.

    A TCP connect alone is not proof: if someone else holds the port, the connect succeeds while
    our sshd is still failing to bind.  sshd writes its PidFile only after binding, so we wait for
    our own pid there first.
    """
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            bound = pid_file.read_text().strip() == str(proc.pid)
        except OSError:
            bound = False
        if bound:
            try:
                with socket.create_connection((address, port), timeout=0.5):
                    return True
            except OSError:
                pass
        time.sleep(0.02)
    return False


def _wait_gate(proc: subprocess.Popen[bytes], pid_file: Path, deadline: float) -> bool:
    """True once the gate accepts (it writes its pid file then; we bound the port ourselves before
    starting it, so nobody else can hold it); False if the gate exited first."""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        with contextlib.suppress(OSError):
            if pid_file.read_text().strip() == str(proc.pid):
                return True
        time.sleep(0.02)
    return False


def _bind(address: str, port: int) -> socket.socket:
    """The gate's listening socket (bound here so that a taken port fails the start at once)."""
    sock = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # what sshd does: TIME_WAIT only, never a listener
        sock.bind((address, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def _gate_env() -> dict[str, str]:
    """The hook's environment, with this package importable whatever the hook's sys.path was."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[3])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env


def start_sshd(
    state_dir: Path,
    client_public_key: str,
    port: int = 0,
    *,
    log_file: IO[bytes] | None = None,
    ready_timeout: float = READY_TIMEOUT,
    listen_address: str = LOOPBACK,
    force_command: str | None = None,
    sftp_server: str | None = None,
    uid_gate: bool = False,
) -> Sshd:
    """Start sshd for ``client_public_key`` on ``listen_address``:``port`` (0 = a free one); raise SshdError.

    ``log_file`` receives sshd's log (``-e``); by default ``sshd.log`` in the state dir, so that
    sshd's chatter about every probe and login stays out of the training output.  ``force_command`` /
    ``sftp_server``: see :func:`render_config`.  ``uid_gate`` (jobs on this machine, where every local
    user reaches loopback): the port is held by ``sshd_gate``, which admits only our own uid's
    connections and runs ``sshd -i`` with the same config for each; otherwise sshd listens itself.
    """
    if uid_gate and not sys.executable:
        raise SshdError("no Python interpreter path (sys.executable) to run the sshd uid gate with")
    if port == 22:
        raise SshdError("port 22 is reserved for the job's own sshd (MPI): pick another")
    binary = find_sshd()
    if not os.path.isfile(binary):
        raise SshdError(f"no sshd binary at {binary}: install openssh-server in the image or set {ENV_SSHD}")
    state = prepare_state_dir(state_dir)
    user = current_user()
    if os.geteuid() == 0:
        with contextlib.suppress(FileExistsError):
            os.makedirs(PRIVSEP_DIR, mode=0o755)

    key = state / HOST_KEY_NAME
    if not key.exists():
        _run(["ssh-keygen", "-t", "ed25519", "-N", "", "-q", "-C", "", "-f", str(key)], "ssh-keygen failed")
    fields = (state / f"{HOST_KEY_NAME}.pub").read_text().split()
    host_public_key = " ".join(fields[:2])

    authorized = state / "authorized_keys"
    authorized.write_text(client_public_key.strip() + "\n")
    os.chmod(authorized, 0o600)

    log_path = state / "sshd.log"
    pid_file = state / "sshd.pid"
    config = state / "sshd_config"
    fixed = port != 0
    last_error = ""
    for _attempt in range(1 if fixed else PORT_ATTEMPTS):
        # free_port() without an argument on loopback: the signature tests substitute
        chosen = port if fixed else (free_port() if listen_address == LOOPBACK else free_port(listen_address))
        with contextlib.suppress(FileNotFoundError):
            pid_file.unlink()  # a stale one from an earlier run must not pass for ours
        config.write_text(
            render_config(state, chosen, user, listen_address, force_command=force_command, sftp_server=sftp_server)
        )
        os.chmod(config, 0o600)
        _run([binary, "-t", "-f", str(config)], "sshd rejected its config")
        own_log = log_file is None
        offset = log_path.stat().st_size if own_log and log_path.exists() else 0
        listener: socket.socket | None = None
        argv = [binary, "-D", "-e", "-f", str(config)]
        if uid_gate:
            try:
                listener = _bind(listen_address, chosen)
            except OSError as exc:
                last_error = f"cannot bind: {exc.strerror or exc}"
                if fixed or exc.errno != errno.EADDRINUSE:
                    break
                continue
            argv = [
                sys.executable,
                "-m",
                GATE_MODULE,
                str(listener.fileno()),
                str(GATE_MAX_SESSIONS),
                str(os.geteuid()),
                str(pid_file),
                "--",
                binary,
                "-i",
                "-e",
                "-f",
                str(config),
            ]
        sink: IO[bytes] = open(log_path, "ab") if log_file is None else log_file  # noqa: SIM115
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=sink,
                close_fds=True,
                pass_fds=(listener.fileno(),) if listener is not None else (),
                env=_gate_env() if uid_gate else None,
                preexec_fn=_child_setup,  # the hook has no threads of its own at this point
            )
        except OSError as exc:
            raise SshdError(f"cannot run {argv[0]}: {exc}") from None
        finally:
            if own_log:
                sink.close()  # the child holds its own copy of the descriptor
            if listener is not None:
                listener.close()  # likewise: the gate's copy is the one that listens
        if uid_gate:
            ready = _wait_gate(proc, pid_file, time.monotonic() + max(ready_timeout, GATE_READY_TIMEOUT))
        else:
            ready = _wait_ready(proc, listen_address, chosen, pid_file, time.monotonic() + ready_timeout)
        if ready:
            return Sshd(proc, chosen, user, host_public_key, state, log_path, gated=uid_gate)
        exited = proc.poll() is not None
        Sshd(proc, chosen, user, host_public_key, state, log_path).stop()
        last_error = _log_since(log_path, offset) if own_log else ""
        if not exited or "Address already in use" not in last_error:
            break  # only a lost race for a free port is worth another try
    where = f"{listen_address}:{port}" if fixed else f"a free port on {listen_address}"
    raise SshdError(f"sshd did not start on {where}: {last_error or 'not listening within the timeout'}")
