"""Nothing of the laptop's reaches the job over our ssh connections, and nothing hostile in a user's
own ssh config or in a job tag runs here (issue 13: items 5 and 9).

- Client side: our generated Host block is read first (the Include on the first line of
  ``~/.ssh/config``), so its ``ForwardAgent no`` & co. beat a user's ``Host *`` that turns them on.
  Checked with ``ssh -G`` on the real Include path and with real connections.
- Server side: the job's sshd refuses agent, X11, streamlocal and tun forwarding and user rc files
  (``sshd -T``), and a forced ``ssh -A`` leaves no agent socket in the job.  What the product needs
  (``-L``, ``-W``, ``-D``, ``-R`` on loopback, sftp, scp) still works.
- The direct transport's ``ssh -W ... -- <bastion>``: a bastion tag that is an ssh option (or a
  shell payload) is refused at input, and the ``--`` leaves such a value inert anyway.

Every ssh here passes ``-F <throwaway user config>``: OpenSSH reads ``~`` from the passwd entry,
never $HOME.  The job's sshd and the ssh-agent are started by these tests and stopped by pid.
"""

from __future__ import annotations

import getpass
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from remote_debug.container.node import sshd as job_sshd
from remote_debug.contract import spec
from remote_debug.laptop.aws import sagemaker_backend as sagemaker
from remote_debug.laptop.aws.sagemaker_backend import JobHint, SageMakerBackend, bastion_argv
from remote_debug.laptop.connection import ssh_config
from remote_debug.laptop.connection.ssh_config import HostEntry
from remote_debug.laptop.core.errors import UserError
from remote_debug.laptop.core.paths import StatePaths
from tests.helpers.hook_runs import listen_addresses, make_key, wait_for
from tests.helpers.sshd import private_sshd
from tests.local.test_ssh_config import RELAY  # a stdin/stdout <-> TCP relay, run inside the job

SSH = shutil.which("ssh")
SSHD = job_sshd.find_sshd()
pytestmark = pytest.mark.skipif(
    SSH is None or not os.path.exists(SSHD) or shutil.which("ssh-agent") is None,
    reason="needs the OpenSSH client, server and ssh-agent",
)

JOB = "hardening"
ALIAS = f"algo-1.{JOB}"
# inside the job: is there an agent socket, and can ssh-add reach an agent (0 lists keys, 2 no agent)
PROBE = 'echo "sock=${SSH_AUTH_SOCK:-unset}"; ssh-add -l >/dev/null 2>&1; echo "agent=$?"'
LOOPBACK_HEX = {"0100007F", "00000000000000000000000001000000"}  # 127.0.0.1 and ::1 in /proc/net/tcp*
# run in the job (same machine): talk to the reverse forward, then say where its listener is bound
REVERSE_PROBE = """
import socket, sys
port = int(sys.argv[1])
with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
    s.sendall(b"through -R\\n"); s.shutdown(socket.SHUT_WR)
    print(s.makefile("rb").read().decode().strip())
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    for line in open(table).read().splitlines()[1:]:
        f = line.split()
        address, port_hex = f[1].rsplit(":", 1)
        if int(port_hex, 16) == port and f[3] == "0A":
            print("listen", address)
"""


def hostile_user_config(marker: Path) -> str:
    """A user's own ``Host *`` that turns on everything a job node must not get."""
    return (
        "Host *\n"
        "    ForwardAgent yes\n"
        "    ForwardX11 yes\n"
        "    ForwardX11Trusted yes\n"
        "    PermitLocalCommand yes\n"
        f"    LocalCommand touch {marker}\n"
        "    GatewayPorts yes\n"
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Echo:
    """A TCP echo server on 127.0.0.1 (the job's side of a forward: job and laptop are this machine)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = int(self.sock.getsockname()[1])
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    @staticmethod
    def _echo(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    def close(self) -> None:
        self.sock.close()


@dataclass
class World:
    root: Path
    paths: StatePaths
    user_config: Path  # the user's ~/.ssh/config: our Include line first, then their hostile Host *
    marker: Path  # LocalCommand's trace: it must never exist
    agent_sock: Path
    server: job_sshd.Sshd

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "SSH_AUTH_SOCK", "SSH_AGENT_PID")}
        return {**env, "SSH_AUTH_SOCK": str(self.agent_sock)}

    def ssh(
        self, *args: str, command: str | None = PROBE, timeout: float = 60, input: bytes | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        assert SSH is not None
        argv = [SSH, "-F", str(self.user_config), "-o", "BatchMode=yes", "-o", "ConnectTimeout=15", *args, ALIAS]
        argv += [command] if command is not None else []
        return subprocess.run(
            argv,
            capture_output=True,
            timeout=timeout,
            env=self.env(),
            input=input,
            stdin=None if input is not None else subprocess.DEVNULL,
        )


def _start_agent(directory: Path) -> subprocess.Popen[bytes]:
    """``ssh-agent -D`` (foreground: its pid is the Popen's, stopped by that pid)."""
    sock = directory / "agent.sock"
    agent = subprocess.Popen(
        ["ssh-agent", "-D", "-a", str(sock)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: sock.exists() or agent.poll() is not None, 10, "ssh-agent's socket")
        assert agent.poll() is None, "ssh-agent exited"
    except BaseException:
        _stop(agent)
        raise
    return agent


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(5)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("hardening")
    os.chmod(root, 0o700)
    client_key = root / "id_job"
    client_public = make_key(client_key)
    marker = root / "local-command-ran"
    relay = root / "relay.py"
    relay.write_text(RELAY)
    paths = StatePaths(root / "state")
    user_config = root / "home" / ".ssh" / "config"
    user_config.parent.mkdir(parents=True, mode=0o700)
    user_config.write_text(hostile_user_config(marker))
    agent = _start_agent(root)
    server: job_sshd.Sshd | None = None
    try:
        agent_key = root / "id_laptop"  # the laptop's own key, only in the agent
        make_key(agent_key)
        env = {**os.environ, "SSH_AUTH_SOCK": str(root / "agent.sock")}
        subprocess.run(["ssh-add", "-q", str(agent_key)], env=env, check=True, timeout=30, capture_output=True)
        listed = subprocess.run(["ssh-add", "-l"], env=env, capture_output=True, text=True, timeout=30)
        assert listed.returncode == 0, listed.stderr  # the agent is live and holds the key
        # the job's own sshd, exactly as the hook starts it (its config: container/sshd.render_config)
        server = job_sshd.start_sshd(root / "sshd-state", client_public)
        entry = HostEntry(
            job=JOB,
            node="algo-1",
            user=server.user,
            port=server.port,
            host_public_key=server.host_public_key,
            identity_file=client_key,
            proxy_command=f'"{sys.executable}" "{relay}" 127.0.0.1 %p',
        )
        ssh_config.write_job_entries(paths, JOB, [entry])
        ssh_config.ensure_include(paths, user_config)  # the product's path: Include on line 1
        assert user_config.read_text().startswith(ssh_config.include_line(paths) + "\n")
        yield World(root, paths, user_config, marker, root / "agent.sock", server)
    finally:
        if server is not None:
            server.stop()
        _stop(agent)


def ssh_g(config: Path, alias: str) -> dict[str, str]:
    assert SSH is not None
    out = subprocess.run(
        [SSH, "-G", "-F", str(config), alias],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    ).stdout
    return {k: v for k, _, v in (line.partition(" ") for line in out.splitlines())}


def probe(result: subprocess.CompletedProcess[bytes]) -> dict[str, str]:
    out = result.stdout.decode(errors="replace")
    return dict(re.findall(r"^(sock|agent)=(.*)$", out, re.MULTILINE))


# --- item 5, client side: our Host block wins over the user's Host * -------------------------------


def test_ssh_G_resolves_forwarding_off_for_our_alias_whatever_the_user_config_says(world: World) -> None:
    """Attack: the user's own ``Host *`` turns on agent and X11 forwarding, a LocalCommand and
    GatewayPorts; through the Include on line 1, our alias must resolve every one of them off."""
    ours = ssh_g(world.user_config, ALIAS)
    theirs = ssh_g(world.user_config, "elsewhere.example")  # the hostile config is live for other hosts
    for option in ("forwardagent", "forwardx11", "forwardx11trusted", "permitlocalcommand", "gatewayports"):
        assert theirs[option] == "yes", option
        assert ours[option] == "no", option
    assert ours["stricthostkeychecking"] == "true" and ours["hostkeyalias"] == f"remote-debug.{ALIAS}"


def test_a_hostile_user_config_forwards_no_agent_and_runs_no_local_command(world: World) -> None:
    """Attack: ``Host * / ForwardAgent yes`` (+ LocalCommand) in the user's config, a real connection to
    the job: ssh does not even ask for agent forwarding, the job sees no agent, the command never runs."""
    result = world.ssh("-v")
    assert result.returncode == 0, result.stderr.decode(errors="replace")[-2000:]
    assert b"Requesting authentication agent forwarding" not in result.stderr
    assert probe(result) == {"sock": "unset", "agent": "2"}
    assert not world.marker.exists(), "the user's LocalCommand ran for a job connection"


# --- item 5, server side: the job's sshd ------------------------------------------------------------


def test_sshd_T_shows_the_job_sshd_refuses_agent_x11_streamlocal_tunnels_and_rc(tmp_path: Path) -> None:
    """Attack surface on the job: what sshd would grant to any client that asks (``sshd -T``)."""
    state = job_sshd.prepare_state_dir(tmp_path / "state")
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(state / job_sshd.HOST_KEY_NAME)],
        check=True,
        timeout=30,
    )
    config = state / "sshd_config"
    config.write_text(job_sshd.render_config(state, free_port(), getpass.getuser()))
    os.makedirs(job_sshd.PRIVSEP_DIR, exist_ok=True)
    out = subprocess.run([SSHD, "-T", "-f", str(config)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    effective = {k: v for k, _, v in (line.partition(" ") for line in out.stdout.splitlines())}
    assert {
        k: effective[k]
        for k in (
            "allowagentforwarding",
            "allowstreamlocalforwarding",
            "x11forwarding",
            "permittunnel",
            "permituserrc",
            "gatewayports",
            "permituserenvironment",
        )
    } == {
        "allowagentforwarding": "no",
        "allowstreamlocalforwarding": "no",
        "x11forwarding": "no",
        "permittunnel": "no",
        "permituserrc": "no",
        "gatewayports": "no",
        "permituserenvironment": "no",
    }
    # what the product needs stays on: TCP forwards both ways, sftp for the editors
    assert effective["allowtcpforwarding"] == "yes" and effective["subsystem"].startswith("sftp internal-sftp")


def test_forced_ssh_A_leaves_no_agent_in_the_job(world: World, tmp_path: Path) -> None:
    """Attack: ``ssh -A`` on the command line (it beats every config file): the client asks, the
    job's sshd refuses, no SSH_AUTH_SOCK and no agent inside.  Control: the same probe against a
    stock sshd does see the laptop's agent, so the probe would notice a forwarded one."""
    result = world.ssh("-v", "-A")
    assert result.returncode == 0, result.stderr.decode(errors="replace")[-2000:]
    assert b"Requesting authentication agent forwarding" in result.stderr  # -A did ask
    assert probe(result) == {"sock": "unset", "agent": "2"}
    assert not world.marker.exists()

    key = tmp_path / "control_key"
    public = make_key(key)
    with private_sshd(tmp_path, public + "\n") as stock:  # OpenSSH's defaults: agent forwarding allowed
        known = tmp_path / "known_hosts"
        known.write_text(f"control {stock.host_key_line}\n")  # pinned like ours
        assert SSH is not None
        control = subprocess.run(
            [
                SSH,
                "-F",
                "/dev/null",
                "-A",
                "-i",
                str(key),
                "-o",
                "IdentitiesOnly=yes",
                "-o",
                "BatchMode=yes",
                "-o",
                "StrictHostKeyChecking=yes",
                "-o",
                f"UserKnownHostsFile={known}",
                "-o",
                "HostKeyAlias=control",
                "-p",
                str(stock.port),
                f"{getpass.getuser()}@127.0.0.1",
                PROBE,
            ],
            capture_output=True,
            timeout=60,
            env=world.env(),
            stdin=subprocess.DEVNULL,
        )
    assert control.returncode == 0, control.stderr
    seen = probe(control)
    assert seen["sock"] != "unset" and seen["agent"] == "0", seen


def test_streamlocal_forwarding_is_refused(world: World) -> None:
    """Attack: a unix-socket forward into the job (``-R <socket path>:...``), e.g. to plant a socket
    that impersonates an agent or a daemon there: sshd refuses it (our channels are TCP only)."""
    sock = world.root / "planted.sock"
    result = world.ssh("-o", "ExitOnForwardFailure=yes", "-R", f"{sock}:127.0.0.1:9", command="true")
    assert result.returncode == 255, result.stderr.decode(errors="replace")
    assert b"remote port forwarding failed" in result.stderr
    assert not sock.exists()


# --- what the product needs still works (regression guard, and GatewayPorts on the laptop) ----------


def _socks5_connect(port: int, target_port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"\x05\x01\x00")
    assert s.recv(2) == b"\x05\x00"
    s.sendall(b"\x05\x01\x00\x01" + socket.inet_aton("127.0.0.1") + struct.pack(">H", target_port))
    reply = s.recv(10)
    assert reply[:2] == b"\x05\x00", reply
    return s


def _roundtrip(s: socket.socket, data: bytes) -> bytes:
    with s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        return s.makefile("rb").read()


def _background(world: World, *args: str) -> subprocess.Popen[bytes]:
    assert SSH is not None
    argv = [
        SSH,
        "-F",
        str(world.user_config),
        "-o",
        "BatchMode=yes",
        "-o",
        "ExitOnForwardFailure=yes",
        "-N",
        *args,
        ALIAS,
    ]
    return subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=world.env()
    )


def _listening(proc: subprocess.Popen[bytes], port: int) -> list[str]:
    def up() -> list[str] | None:
        if proc.poll() is not None:
            raise AssertionError(f"ssh exited: {proc.stderr.read().decode() if proc.stderr else ''}")
        return listen_addresses(port) or None

    return wait_for(up, 30, f"ssh to listen on {port}")


def test_local_and_dynamic_forwards_work_and_stay_on_loopback(world: World) -> None:
    """``-L`` (our forwards, IDEs) and ``-D`` (Remote-SSH) work; with the user's ``GatewayPorts yes``,
    a forward without a bind address would listen on every address of the laptop, letting the LAN
    reach the job's debug ports: ours keep it on loopback."""
    echo = Echo()
    local, dynamic = free_port(), free_port()
    proc = _background(world, "-L", f"{local}:127.0.0.1:{echo.port}", "-D", str(dynamic))
    try:
        assert set(_listening(proc, local)) <= LOOPBACK_HEX
        assert set(_listening(proc, dynamic)) <= LOOPBACK_HEX
        assert _roundtrip(socket.create_connection(("127.0.0.1", local), timeout=10), b"via -L") == b"via -L"
        assert _roundtrip(_socks5_connect(dynamic, echo.port), b"via -D") == b"via -D"
    finally:
        _stop(proc)
        echo.close()


def test_stdio_and_reverse_forwards_and_file_copies_work(world: World) -> None:
    """``ssh -W`` (direct-tcpip, as ProxyJump), ``-R`` on loopback (PyCharm's reverse tunnels), sftp,
    scp, and scp's legacy protocol (an exec channel, as rsync uses)."""
    echo = Echo()
    try:
        w = world.ssh("-W", f"127.0.0.1:{echo.port}", command=None, input=b"via -W")
        assert (w.returncode, w.stdout) == (0, b"via -W"), w.stderr
        script = world.root / "reverse_probe.py"
        script.write_text(REVERSE_PROBE)
        rport = free_port()
        r = world.ssh(
            "-o",
            "ExitOnForwardFailure=yes",
            "-R",
            f"0.0.0.0:{rport}:127.0.0.1:{echo.port}",
            command=f'"{sys.executable}" "{script}" {rport}',
        )
        assert r.returncode == 0, r.stderr
        lines = r.stdout.decode().splitlines()
        assert lines[0] == "through -R"
        listening = {line.split()[1] for line in lines[1:]}
        assert listening and listening <= LOOPBACK_HEX  # asked for 0.0.0.0, bound to loopback: GatewayPorts no
    finally:
        echo.close()
    payload = os.urandom(4096)
    src = world.root / "payload.bin"
    src.write_bytes(payload)
    batch = world.root / "sftp.batch"
    batch.write_text(f'put "{src}" "{world.root / "via-sftp.bin"}"\n')
    assert SSH is not None
    for argv in (
        ["sftp", "-F", str(world.user_config), "-o", "BatchMode=yes", "-b", str(batch), ALIAS],
        ["scp", "-F", str(world.user_config), "-o", "BatchMode=yes", str(src), f"{ALIAS}:{world.root / 'via-scp.bin'}"],
        [
            "scp",
            "-O",
            "-F",
            str(world.user_config),
            "-o",
            "BatchMode=yes",
            str(src),
            f"{ALIAS}:{world.root / 'via-scp-O.bin'}",
        ],
    ):
        done = subprocess.run(argv, capture_output=True, timeout=60, env=world.env(), stdin=subprocess.DEVNULL)
        assert done.returncode == 0, (argv[:2], done.stderr)
    for name in ("via-sftp.bin", "via-scp.bin", "via-scp-O.bin"):
        assert (world.root / name).read_bytes() == payload, name
    assert not world.marker.exists()


# --- item 9: the direct transport's bastion -------------------------------------------------------


def test_direct_transport_passes_double_dash_before_the_bastion() -> None:
    assert bastion_argv("ec2-user@bastion.example:2200") == ["-p", "2200", "--", "ec2-user@bastion.example"]
    assert bastion_argv("bastion.example") == ["--", "bastion.example"]
    assert bastion_argv("10.0.0.5") == ["--", "10.0.0.5"]


def _relay_direct(tmp_path: Path, bastion: str) -> tuple[int, list[str]]:
    """The ProxyCommand's direct relay as the product runs it, with an ``ssh`` on PATH that records
    its argv and then runs the real client (``-F`` a config with a shell ProxyCommand, as many
    users have: a host name reaching it unquoted would run)."""
    assert SSH is not None
    user_config = tmp_path / "user_config"
    user_config.write_text("Host *\n    ProxyCommand sh -c 'exec nc %h %p'\n")
    fake = tmp_path / "bin" / "ssh"
    fake.parent.mkdir(exist_ok=True)
    argv_file = tmp_path / "argv"
    fake.write_text(
        f"#!/bin/sh\nprintf '%s\\n' \"$@\" > '{argv_file}'\n"
        f"exec '{SSH}' -F '{user_config}' -o BatchMode=yes -o ConnectTimeout=3 \"$@\"\n"
    )
    fake.chmod(0o755)
    hint = JobHint(
        job="direct-job",
        region="us-east-1",
        profile=None,
        transport=spec.Transport.DIRECT,
        bastion=bastion,
        nodes={"algo-1": {"sshd_host": "10.0.3.7", "sshd_port": 2222}},
    )
    backend = SageMakerBackend(StatePaths(tmp_path / "state"), clients=lambda service: None)
    old_path = os.environ["PATH"]
    os.environ["PATH"] = f"{fake.parent}{os.pathsep}{old_path}"
    try:
        with open(os.devnull, "rb") as stdin, open(tmp_path / "out", "wb") as stdout:
            code = backend._relay_direct(hint, "algo-1", 2222, stdin, stdout)
    finally:
        os.environ["PATH"] = old_path
    return code, argv_file.read_text().splitlines() if argv_file.exists() else []


@pytest.mark.parametrize(
    "payload",
    [
        "-oProxyCommand=touch {marker}",
        "$(touch {marker})",
        "x;touch {marker}",
        "`touch {marker}`@bastion",
        "-oLocalCommand=touch {marker}",
    ],
)
def test_a_hostile_bastion_is_refused_at_input_and_nothing_runs(tmp_path: Path, payload: str) -> None:
    """Attack: the job tag ``remote-debug:bastion`` (or REMOTE_DEBUG_BASTION) holds an ssh option or a
    shell payload.  Refused before any ssh runs (one-line UserError -> exit 2)."""
    marker = tmp_path / "pwned"
    bastion = payload.format(marker=marker)
    with pytest.raises(UserError, match=r"^bad bastion .*\[user@\]host\[:port\]") as raised:
        _relay_direct(tmp_path, bastion)
    assert "\n" not in str(raised.value)
    assert not (tmp_path / "argv").exists(), "ssh ran"
    assert not marker.exists()


def test_even_past_the_input_check_the_double_dash_keeps_a_bastion_inert(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defence in depth: with the input check switched off, the real ssh gets the hostile value after
    ``--``, as a host name (which it then rejects), never as an option: the payload does not run."""
    monkeypatch.setattr(sagemaker, "_BASTION_RE", re.compile(r".*", re.DOTALL))
    marker = tmp_path / "pwned"
    code, argv = _relay_direct(tmp_path, f"-oProxyCommand=touch {marker}")
    assert argv[:3] == ["-W", "10.0.3.7:2222", "--"] and argv[3] == f"-oProxyCommand=touch {marker}"
    assert code == 255
    time.sleep(0.2)
    assert not marker.exists()
