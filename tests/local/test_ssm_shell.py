"""ShellSession: commands over an SSM shell session, with AWS's real plugin against the emulator's nodes.

The product code reaches the emulator only through the endpoint URL of its boto3 client, as it reaches AWS.
Skipped where nodes cannot run (not root, no namespaces) or the plugin binary is missing.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from remote_debug.laptop.aws import ssm
from remote_debug.laptop.aws.ssm_shell import CommandTimeout, ShellError, ShellSession
from tests.emulator.test_ssm_shell import Running, gone, needs_nodes, running_emulator, target
from tests.helpers.ssm_plugin import needs_plugin, plugin_version, real_plugin

pytestmark = [needs_nodes, needs_plugin, pytest.mark.timeout(180)]
JOB = "driven"


@pytest.fixture(scope="module")
def emu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    with running_emulator(tmp_path_factory.mktemp("ssm-shell-driver")) as running:
        running.start_job(JOB, nodes=2)
        yield running


@pytest.fixture
def shells(emu: Running) -> Iterator[Callable[..., ShellSession]]:
    """Opens ShellSessions to nodes of the job; every one is closed after the test, even a failed one."""
    opened: list[ShellSession] = []

    def open_shell(node: str = "algo-1", job: str = JOB, **options: Any) -> ShellSession:
        options.setdefault("plugin", ssm.Plugin(str(real_plugin()), plugin_version()))
        session = ShellSession.for_node(emu.client("ssm"), job, node, **options)
        opened.append(session)
        session.start()
        return session

    try:
        yield open_shell
    finally:
        for session in opened:
            session.close()


def open_ids(emu: Running) -> list[str]:
    return [s.session_id for s in emu.emulator.channel.sessions()]


def test_root_in_each_node(shells: Callable[..., ShellSession]) -> None:
    first, second = shells("algo-1"), shells("algo-2")
    assert first.run("whoami") == (0, "root\n")
    assert first.run("hostname") == (0, "algo-1\n")
    assert second.run("hostname") == (0, "algo-2\n")  # the shell really is in the node


def test_exit_status_and_output_come_back_exactly(shells: Callable[..., ShellSession]) -> None:
    shell = shells()
    assert shell.run("printf abc") == (0, "abc")  # no trailing newline
    assert shell.run("printf 'out\\n'; printf err >&2; exit 7") == (7, "out\nerr")  # stderr is the terminal too
    assert shell.run("false") == (1, "")
    assert shell.run("echo line1; echo; echo '  indented  '") == (0, "line1\n\n  indented  \n")
    # text that looks like our framing (the printf formats, hex tokens, an exit status) is just output
    lookalike = "printf '%s%s %d\\n' 0123456789abcdef fedcba9876543210 \"$?\"; 0123456789abcdeffedcba9876543210 0"
    assert shell.run(f"cat <<'EOF'\n{lookalike}\nEOF") == (0, lookalike + "\n")
    assert shell.run("printf '%s%s %d\\n' aa bb 3; echo after") == (0, "aabb 3\nafter\n")
    # bytes the terminal would otherwise translate (CR, NL -> CRNL) or that are not UTF-8
    assert shell.run_bytes("printf 'a\\r\\nb\\000\\001\\377\\033[0m'") == (0, b"a\r\nb\x00\x01\xff\x1b[0m")
    assert shell.run_bytes("head -c 300000 /dev/zero | tr '\\000' x") == (0, b"x" * 300000)
    # a syntax error is the command's failure, not a lost line; `exit` ends only the command; stdin is empty
    code, output = shell.run("if then fi")
    assert code == 2 and "Syntax error" in output
    assert shell.run("exit 3") == (3, "")
    assert shell.run("cat; echo done") == (0, "done\n")
    assert shell.run('echo "it\'s $((6 * 7))"') == (0, "it's 42\n")
    assert shell.check("echo fine") == "fine\n"
    with pytest.raises(ShellError, match=r"^`ls /nonexistent` failed on .* \(exit status 2\): ls: .*nonexistent"):
        shell.check("ls /nonexistent")


def test_commands_a_terminal_cannot_take_are_refused(shells: Callable[..., ShellSession]) -> None:
    shell = shells()
    for bad in ("", "  ", "echo \x03", "echo a\rb", "echo " + "x" * 5000):
        with pytest.raises(ValueError):
            shell.run(bad)
    assert shell.run("echo " + "y" * 3000) == (0, "y" * 3000 + "\n")  # long, but under a terminal line


def test_put_file_uploads_a_mebibyte_into_the_node(emu: Running, shells: Callable[..., ShellSession]) -> None:
    shell = shells("algo-2")
    data = os.urandom(1 << 20)
    digest = hashlib.sha256(data).hexdigest()
    shell.put_file("/opt/ml/input/rd-upload.bin", data, 0o640)
    assert shell.check("sha256sum /opt/ml/input/rd-upload.bin").split()[0] == digest
    assert shell.check("stat -c %a /opt/ml/input/rd-upload.bin") == "640\n"
    assert shell.check("ls /opt/ml/input").split() == ["config", "data", "rd-upload.bin"]  # no temporary left
    on_host = emu.node_root(JOB, "algo-2") / "input" / "rd-upload.bin"
    assert hashlib.sha256(on_host.read_bytes()).hexdigest() == digest  # in algo-2's /opt/ml...
    assert not (emu.node_root(JOB, "algo-1") / "input" / "rd-upload.bin").exists()  # ...not algo-1's
    assert shell.read_file("/opt/ml/input/rd-upload.bin") == data
    shell.put_file("/opt/ml/input/rd-upload.bin", b"", 0o600)  # replaced atomically, even by nothing
    assert on_host.read_bytes() == b"" and on_host.stat().st_mode & 0o777 == 0o600
    with pytest.raises(ShellError, match=r"^`umask 077"):
        shell.put_file("/nonexistent-dir/x", b"data")


def test_timeout_interrupts_the_command_and_the_session_stays_usable(
    emu: Running, shells: Callable[..., ShellSession]
) -> None:
    shell = shells()
    started = time.monotonic()
    with pytest.raises(CommandTimeout) as timed_out:
        shell.run("sh -c 'echo $$ > /opt/ml/rd-sleep.pid; exec sleep 600'", timeout=1)
    assert time.monotonic() - started < 6
    message = str(timed_out.value)
    assert "\n" not in message and "did not finish within 1 s" in message and "still usable" in message
    assert timed_out.value.session_usable
    assert shell.run("echo still here") == (0, "still here\n")
    assert gone(int((emu.node_root(JOB, "algo-1") / "rd-sleep.pid").read_text()))  # Ctrl-C reached it


def test_timeout_ignoring_ctrl_c_closes_the_session(emu: Running, shells: Callable[..., ShellSession]) -> None:
    shell = shells()
    shell_pid = int(shell.check("echo $$"))
    with pytest.raises(CommandTimeout, match=r"did not stop on Ctrl-C: closed the session$") as timed_out:
        shell.run("trap '' INT; sleep 600", timeout=1)
    assert not timed_out.value.session_usable
    assert shell.proc is not None and shell.proc.poll() is not None  # the plugin is gone
    assert gone(shell_pid)
    assert shell.session_id not in open_ids(emu)
    with pytest.raises(ShellError, match="is closed"):
        shell.run("echo too late")


def test_close_kills_the_shell_and_the_plugin(emu: Running, shells: Callable[..., ShellSession]) -> None:
    shell = shells()
    shell_pid = int(shell.check("echo $$"))
    assert os.path.exists(f"/proc/{shell_pid}")
    assert shell.session_id in open_ids(emu)
    shell.close()
    assert shell.proc is not None and shell.proc.returncode is not None
    assert gone(shell_pid), f"the node's shell {shell_pid} outlived close()"
    assert shell.session_id not in open_ids(emu)
    shell.close()  # idempotent


def test_context_manager_closes_on_failure(emu: Running) -> None:
    plugin = ssm.Plugin(str(real_plugin()), plugin_version())
    with contextlib.ExitStack() as stack, pytest.raises(RuntimeError, match="boom"):
        shell = stack.enter_context(ShellSession.for_node(emu.client("ssm"), JOB, "algo-2", plugin=plugin))
        shell_pid = int(shell.check("echo $$"))
        raise RuntimeError("boom")
    assert gone(shell_pid)
    assert shell.proc is not None and shell.proc.returncode is not None
    assert shell.session_id not in open_ids(emu)


def test_a_job_that_is_not_running_is_one_line(emu: Running, shells: Callable[..., ShellSession]) -> None:
    emu.create_job("driven-done", code="pass")
    emu.wait_job("driven-done", lambda d: d["TrainingJobStatus"] == "Completed")
    before = open_ids(emu)
    for job, node in (("driven-done", "algo-1"), (JOB, "algo-3")):
        with pytest.raises(ShellError) as refused:
            shells(node, job=job)
        message = str(refused.value)
        assert "\n" not in message
        assert message.startswith(f"SSM target {target(job, node)} is not connected: the job must be in Training")
    assert open_ids(emu) == before


def test_a_missing_plugin_is_one_line_and_costs_no_session(
    emu: Running, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no session-manager-plugin on it
    before = open_ids(emu)
    shell = ShellSession.for_node(emu.client("ssm"), JOB, "algo-1")
    with pytest.raises(ssm.PluginError, match=r"^session-manager-plugin not found on PATH: install") as missing:
        shell.start()
    assert "\n" not in str(missing.value)
    assert shell.session_id is None and open_ids(emu) == before
    shell.close()


def test_a_plugin_that_gives_up_terminates_the_session(emu: Running, shells: Callable[..., ShellSession]) -> None:
    quitter = ssm.Plugin("/bin/true", "1.2.650.0")  # starts, and exits before any shell answers
    with pytest.raises(ShellError, match=r"^the shell session to .* ended") as failed:
        shells(plugin=quitter)
    assert "\n" not in str(failed.value)
    assert not any(s.target == target(JOB, "algo-1") for s in emu.emulator.channel.sessions())


def test_timings(shells: Callable[..., ShellSession], record_property: Callable[[str, object], None]) -> None:
    started = time.monotonic()
    shell = shells("algo-2")
    start = time.monotonic() - started
    rounds = []
    for _ in range(20):
        began = time.monotonic()
        assert shell.run("true") == (0, "")
        rounds.append(time.monotonic() - began)
    data = os.urandom(1 << 20)
    began = time.monotonic()
    shell.put_file("/opt/ml/rd-timing.bin", data)
    upload = time.monotonic() - began
    report = (
        f"session start {start:.2f} s, round trip median {statistics.median(rounds) * 1000:.1f} ms, "
        f"1 MiB upload {upload:.2f} s"
    )
    record_property("timings", report)
    print(report)
    assert start < 15 and statistics.median(rounds) < 1 and upload < 60


@pytest.mark.parametrize("login_shell", [("bash",), ("bash", "--login"), ("sh", "-l")])
def test_other_shells_of_images(
    shells: Callable[..., ShellSession], monkeypatch: pytest.MonkeyPatch, login_shell: tuple[str, ...]
) -> None:
    # The agent runs `sh`: dash on Debian/Ubuntu images, bash (readline, bracketed paste) on Amazon Linux ones.
    from remote_debug.emulator import ssm_shell as emulated

    monkeypatch.setattr(emulated, "SHELL_ARGV", login_shell)
    shell = shells()
    assert shell.run("printf abc; printf err >&2") == (0, "abcerr")
    assert shell.run("echo $0; exit 4") == (4, f"{login_shell[0]}\n")
    assert shell.run("if then fi")[0] == 2
    with pytest.raises(CommandTimeout, match="still usable"):
        shell.run("sleep 600", timeout=1)
    assert shell.run("hostname") == (0, "algo-1\n")
