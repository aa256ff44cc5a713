"""Security checks on a live session (tests/helpers/live_session.py): VS Code mode, rank 0 paused at a
breakpoint and rank 1 attached and running, while the tests scan what an attacker on the node or the
laptop could look at - /proc/<pid>/net/tcp* and /proc/<pid>/fd (listeners), /proc/*/cmdline and
/proc/*/environ (secrets), the files we wrote (modes, contents), sshd's effective config - and
finally change the node's host key under the same alias.

The session is shared by the tests of this module (one job instead of five); the host-key test
comes last because it leaves the node with a key nobody trusts.
"""

from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from remote_debug.laptop.attach.attacher import Attacher, AttachOptions
from remote_debug.laptop.connection.job_connection import endpoint_for, host_entries
from remote_debug.laptop.connection.tunnels import HostKeyMismatchError, NodeTunnel
from remote_debug.laptop.core.errors import UserError
from remote_debug.laptop.core.paths import user_ssh_config
from tests.helpers.hook_runs import scan_for_secrets, wait_for
from tests.helpers.live_session import Session, live_session, scan_listeners

pytestmark = pytest.mark.skipif(not Path("/usr/sbin/sshd").exists(), reason="needs OpenSSH's sshd")

JOB = "sec"


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    """VS Code mode: rank 0 stopped at the breakpoint, rank 1 attached and running, launch.json written."""
    with live_session(
        tmp_path_factory.mktemp("security"),
        JOB,
        "vscode",
        lambda seen: {("stopped", 0), ("rank-attached", 1), ("launch-json", None)} <= seen,
    ) as s:
        yield s


# --- 1. listeners ------------------------------------------------------------------------------------


def test_every_listener_of_the_session_is_on_loopback(session: Session) -> None:
    ports = scan_listeners(session)
    # The scan saw every kind of listener we open: sshd, each rank's control channel and debug
    # listener (pydevd in the rank serves DAP itself: no adapter process), and the attach's local forwards.
    m = session.manifest()
    assert len(m.ranks) == 2
    assert ports.get(m.sshd_port) == "sshd"
    for r in m.ranks:
        assert ports.get(r.control_port) == "rank", (r.rank, ports)
        assert ports.get(r.port) == "rank", (r.rank, ports)
    forwards = [e["local_port"] for e in session.events if e["event"] == "rank-ready"]
    assert len(forwards) == 2 and all(ports.get(p) == "attach (this process)" for p in forwards)


# --- 4. secrets in argv / environ ----------------------------------------------------------------------


def test_no_secret_in_any_command_line_or_unexpected_environment(session: Session) -> None:
    secrets = session.secrets()
    argv = scan_for_secrets(secrets, "cmdline")
    assert argv.scanned > len(session.pids()) >= 8
    assert argv.offenders == []
    # Private keys are in no process's environment either (AWS credentials are, by design: they
    # are the user's environment, inherited by what the user runs).
    environ = scan_for_secrets(session.private_key_material(), "environ")
    assert environ.offenders == []
    print(
        f"\n[security] secrets: {len(secrets)} strings, {argv.scanned} command lines and "
        f"{environ.scanned} environments scanned, offenders: {argv.offenders + environ.offenders}"
    )


# --- 3 + 5. files we wrote ----------------------------------------------------------------------------


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_files_we_wrote_are_private_and_hold_no_secrets(session: Session) -> None:
    paths = session.paths
    key = paths.job_key(JOB)
    assert _mode(key) == 0o600
    assert _mode(key.parent) == 0o700 and _mode(key.parent.parent) == 0o700
    hook_dir = session.sshd_config().parent
    assert _mode(hook_dir) == 0o700
    for name in ("ssh_host_ed25519_key", "authorized_keys", "sshd_config"):
        assert _mode(hook_dir / name) == 0o600, name
    written = [
        paths.ssh_config,
        paths.job_ssh_config(JOB),
        paths.job_known_hosts(JOB),
        user_ssh_config(),
        session.project / ".vscode" / "launch.json",
    ]
    for path in written:
        assert path.exists(), path
        assert _mode(path) & 0o022 == 0, (path, oct(_mode(path)))  # nobody else may rewrite them
    for directory in {p.parent for p in written}:
        assert _mode(directory) & 0o022 == 0, directory
    secrets = session.secrets()
    for path in written:
        text = path.read_text()
        assert "PRIVATE KEY" not in text and not [s for s in secrets if s in text], path
    # StrictHostKeyChecking: "yes" in what we wrote, never "no" / accept-new anywhere, and the
    # effective value for our alias (OpenSSH's own resolution through the user's config) is yes.
    for path in written[:4]:
        values = re.findall(r"(?im)^\s*StrictHostKeyChecking[\s=]+(\S+)", path.read_text())
        assert set(values) <= {"yes"}, (path, values)
    effective = subprocess.run(
        ["ssh", "-F", str(user_ssh_config()), "-G", f"algo-1.{JOB}"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    assert "stricthostkeychecking true" in effective
    assert f"userknownhostsfile {paths.job_known_hosts(JOB)}" in effective
    print(
        f"\n[security] files: {len(written)} written files + {3 + 2} key/sshd files checked for modes, "
        f"{len(written)} for {len(secrets)} secret strings"
    )


# --- 3. sshd: public key only ----------------------------------------------------------------------------


def test_sshd_accepts_public_keys_only(session: Session, tmp_path: Path) -> None:
    config = session.sshd_config()
    proc = subprocess.run(["/usr/sbin/sshd", "-T", "-f", str(config)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    effective = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line)
    m = session.manifest()
    expected = {
        "passwordauthentication": "no",
        "kbdinteractiveauthentication": "no",
        "permitemptypasswords": "no",
        "pubkeyauthentication": "yes",
        "authenticationmethods": "publickey",
        "permitrootlogin": "without-password",  # how sshd -T spells prohibit-password
        "hostbasedauthentication": "no",
        "gatewayports": "no",  # reverse forwards (PyCharm) stay on the node's loopback
        "allowusers": m.ssh_user,
        "authorizedkeysfile": str(config.parent / "authorized_keys"),
        "listenaddress": f"127.0.0.1:{m.sshd_port}",
    }
    assert {k: effective.get(k) for k in expected} == expected

    # A real password login (askpass would answer) is refused before any password is asked for.
    asked = tmp_path / "asked"
    askpass = tmp_path / "askpass"
    askpass.write_text(f"#!/bin/sh\necho asked >> {asked}\necho hunter2\n")
    askpass.chmod(0o700)
    env = {**os.environ, "SSH_ASKPASS": str(askpass), "SSH_ASKPASS_REQUIRE": "force", "DISPLAY": ":0"}
    attempt = subprocess.run(
        [
            "ssh",
            "-F",
            str(session.paths.ssh_config),
            "-o",
            "PubkeyAuthentication=no",
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "PreferredAuthentications=password,keyboard-interactive",
            "-o",
            "NumberOfPasswordPrompts=1",
            "-l",
            "root",
            f"algo-1.{JOB}",
            "true",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    assert attempt.returncode == 255
    assert "Permission denied (publickey)" in attempt.stderr, attempt.stderr
    assert not asked.exists()
    print(
        f"\n[security] sshd -T: {len(expected)} settings checked; password login: rc {attempt.returncode}, "
        f"{attempt.stderr.strip().splitlines()[-1]!r}"
    )


# --- 2. host key change (last: it leaves the node with an untrusted key) ----------------------------------


def _presented_key(port: int) -> str:
    proc = subprocess.run(
        ["ssh-keyscan", "-t", "ed25519", "-p", str(port), "127.0.0.1"], capture_output=True, text=True, timeout=15
    )
    fields = proc.stdout.split()
    return " ".join(fields[1:3]) if len(fields) >= 3 else ""


def test_a_node_whose_host_key_changed_is_refused_and_not_repinned(session: Session) -> None:
    paths = session.paths
    m = session.manifest()
    known_hosts = paths.job_known_hosts(JOB)
    watched = [known_hosts, paths.job_ssh_config(JOB), paths.ssh_config, user_ssh_config()]
    before = {p: p.read_bytes() for p in watched}
    assert _presented_key(m.sshd_port) == m.host_public_key
    ok = subprocess.run(
        ["ssh", "-F", str(paths.ssh_config), "-o", "BatchMode=yes", f"algo-1.{JOB}", "echo", "in-job"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert ok.returncode == 0 and ok.stdout.strip() == "in-job", ok.stderr  # the pinned key works

    # The node's sshd restarts with a new host key (same port, same alias): what an impostor, or a
    # node rebuilt behind the same name, would present.
    hook_dir = session.sshd_config().parent
    host_key = hook_dir / "ssh_host_ed25519_key"
    for p in (host_key, host_key.with_name(host_key.name + ".pub")):
        p.unlink()
    subprocess.run(["ssh-keygen", "-t", "ed25519", "-N", "", "-q", "-C", "", "-f", str(host_key)], check=True)
    new_key = " ".join(host_key.with_name(host_key.name + ".pub").read_text().split()[:2])
    os.kill(session.sshd_pid(), signal.SIGHUP)  # sshd re-executes itself and reloads its host keys
    wait_for(lambda: _presented_key(m.sshd_port) == new_key, 20, "sshd to present the new host key")

    # Real OpenSSH through our generated entry: refused, loudly.
    ssh = subprocess.run(
        ["ssh", "-F", str(paths.ssh_config), "-o", "BatchMode=yes", f"algo-1.{JOB}", "true"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert ssh.returncode == 255
    assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in ssh.stderr and "verification failed" in ssh.stderr

    # Our paramiko tunnel: refused with a one-line message.
    tunnel = NodeTunnel(endpoint_for(host_entries(JOB, {"algo-1": m}, paths)[0], paths))
    try:
        with pytest.raises(HostKeyMismatchError) as refused:
            tunnel.connect()
    finally:
        tunnel.close()
    assert "does not match the key the job published" in str(refused.value) and "\n" not in str(refused.value)

    # A second attach run (the manifest still says the old key): refused the same way, nothing written.
    with pytest.raises(UserError, match="does not match the key the job published"):
        Attacher(
            session.job.backend,
            JOB,
            AttachOptions(workspace=session.project, write_launch_json=False, ready_timeout=20),
            lambda e: None,
            paths,
        ).run()

    # Nothing was re-pinned: our files are byte for byte what they were, and OpenSSH wrote no
    # known_hosts of its own under this HOME.
    assert {p: p.read_bytes() for p in watched} == before
    assert new_key.split()[1] not in known_hosts.read_text()
    assert not (session.home / ".ssh" / "known_hosts").exists()
    print(
        f"\n[security] host key change: ssh rc {ssh.returncode}, tunnel + re-attach refused, "
        f"{len(watched)} files unchanged"
    )
