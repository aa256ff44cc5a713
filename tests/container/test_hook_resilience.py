"""The hook never breaks training: failures of ours are logged and the command runs, codes pass through."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from remote_debug.contract import spec
from tests.helpers.hook_runs import PYTHON, REPO, WAIT_SCRIPT, HookRun, alive, base_env, hook_run, wait_for

EXIT_SCRIPT = """\
import pathlib, sys
pathlib.Path(sys.argv[1], "ran").write_text("yes")
sys.exit(int(sys.argv[2]))
"""


def _script(run: HookRun, text: str, name: str = "train.py") -> str:
    path = run.root / name
    path.write_text(text)
    return str(path)


def test_exit_code_passes_through_and_marks_failure(run: HookRun) -> None:
    run.start(PYTHON, _script(run, EXIT_SCRIPT), str(run.marks), "3")
    assert run.wait() == 3
    assert (run.marks / "ran").exists()
    node = run.node()
    assert node["state"] == "failed" and node["exit_code"] == 3
    assert run.rank(0)["state"] == "finished"  # a clean sys.exit(3) is not an uncaught exception


def test_uncaught_exception_marks_rank_failed(run: HookRun) -> None:
    run.start(PYTHON, _script(run, "raise ValueError('boom\\nsecond line')\n"))
    assert run.wait() == 1
    rank = run.rank(0)
    assert rank["state"] == "failed"
    assert rank["error"] == "ValueError: boom second line"
    assert "Traceback" in run.stderr  # the original excepthook still ran


def test_sshd_missing_still_runs_command(run: HookRun) -> None:
    run.env["REMOTE_DEBUG_SSHD"] = "/nonexistent/sshd"
    run.start(PYTHON, _script(run, EXIT_SCRIPT), str(run.marks), "0")
    assert run.wait() == 0
    assert (run.marks / "ran").exists()
    node = run.node()
    assert node["state"] == "completed" and node["sshd_port"] == 0 and node["host_public_key"] == ""
    assert len(node["errors"]) == 1 and node["errors"][0].startswith("sshd failed:")
    assert "/nonexistent/sshd" in node["errors"][0]
    assert "[remote-debug] sshd failed:" in run.stderr
    assert run.rank(0)["port"] > 0  # the ranks still listen (reachable once someone fixes transport)


def test_sshd_that_fails_to_start_still_runs_command(run: HookRun) -> None:
    fake = run.root / "fake-sshd"
    fake.write_text("#!/bin/sh\necho 'fake sshd: cannot do that' >&2\nexit 1\n")
    fake.chmod(0o755)
    run.env["REMOTE_DEBUG_SSHD"] = str(fake)
    run.start(PYTHON, _script(run, EXIT_SCRIPT), str(run.marks), "0")
    assert run.wait() == 0
    errors = run.node()["errors"]
    assert len(errors) == 1 and "sshd failed" in errors[0] and "fake sshd: cannot do that" in errors[0]


def test_invalid_spec_still_runs_command(run: HookRun) -> None:
    run.env[spec.ENV_JOB] = "bad_name!"
    run.start(PYTHON, _script(run, EXIT_SCRIPT), str(run.marks), "5")
    assert run.wait() == 5
    assert (run.marks / "ran").exists()
    lines = [line for line in run.stderr.splitlines() if line.startswith("[remote-debug]")]
    assert len(lines) == 1 and "invalid debug spec" in lines[0] and "bad job name" in lines[0]
    assert not run.manifest_dir.exists()  # no spec, nothing published, no listener started


def test_no_spec_runs_command_untouched(run: HookRun) -> None:
    for name in spec.SPEC_ENV_NAMES:
        run.env.pop(name, None)
    script = "import os, sys; print(os.environ.get('PYTHONPATH')); sys.exit(4)\n"
    run.start(PYTHON, _script(run, script))
    assert run.wait() == 4
    assert run.stdout.strip() == str(REPO)  # no sitecustomize injected
    assert "[remote-debug]" not in run.stderr
    assert not run.manifest_dir.exists()


def test_command_not_found_exits_127(run: HookRun) -> None:
    run.start("/nonexistent/train-command", "--flag")
    assert run.wait() == 127
    assert "[remote-debug] cannot run '/nonexistent/train-command'" in run.stderr
    node = run.node()
    assert node["state"] == "failed" and node["exit_code"] == 127


def test_command_killed_by_signal_exits_128_plus_n(run: HookRun) -> None:
    run.start(PYTHON, _script(run, "import os, signal; os.kill(os.getpid(), signal.SIGKILL)\n"))
    assert run.wait() == 128 + signal.SIGKILL
    assert run.node()["exit_code"] == 128 + signal.SIGKILL


TERM_SCRIPT = """\
import os, pathlib, signal, sys, time
marks = pathlib.Path(sys.argv[1])
def on_term(signum, frame):
    (marks / "got-term").write_text(str(signum))
    sys.exit(7)
signal.signal(signal.SIGTERM, on_term)
(marks / "started").write_text(str(os.getpid()))
time.sleep(60)
"""


def test_sigterm_is_forwarded_and_sshd_stopped(run: HookRun) -> None:
    run.start(PYTHON, _script(run, TERM_SCRIPT), str(run.marks))
    wait_for(lambda: (run.marks / "started").exists(), 30, "the script to start")
    sshd_pid = int((run.state_dir / "sshd.pid").read_text())
    assert alive(sshd_pid)
    assert run.proc is not None
    os.kill(run.proc.pid, signal.SIGTERM)
    assert run.wait(20) == 7
    assert (run.marks / "got-term").read_text() == str(int(signal.SIGTERM))
    assert not alive(sshd_pid)
    node = run.node()
    assert node["state"] == "stopped" and node["exit_code"] == 7


def test_sigterm_default_action_gives_143(run: HookRun) -> None:
    run.start(PYTHON, _script(run, WAIT_SCRIPT), str(run.marks))
    wait_for(lambda: (run.marks / "started").exists(), 30, "the script to start")
    assert run.proc is not None
    os.kill(run.proc.pid, signal.SIGTERM)
    assert run.wait(20) == 143
    assert run.node()["state"] == "stopped"


USER_SITECUSTOMIZE = """\
import os, pathlib
pathlib.Path(os.environ["USER_SC_MARKER"]).write_text(str(os.getpid()))
USER_SITECUSTOMIZE_RAN = True
"""


def test_users_own_sitecustomize_still_runs(run: HookRun) -> None:
    user_site = run.root / "user-site"
    user_site.mkdir()
    (user_site / "sitecustomize.py").write_text(USER_SITECUSTOMIZE)
    marker = run.root / "user-sc-ran"
    run.env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(user_site)])
    run.env["USER_SC_MARKER"] = str(marker)
    script = "import os, sitecustomize; print(os.getpid(), sitecustomize.__file__)\n"
    run.start(PYTHON, _script(run, script))
    assert run.wait() == 0, run.stderr
    pid, module_file = run.stdout.split()
    assert marker.read_text() == pid  # theirs ran in the training process...
    assert module_file == str(user_site / "sitecustomize.py")  # ...and is what `import sitecustomize` gives
    assert run.rank(0)["pid"] == int(pid)  # ...and ours ran too


def test_env_injection_without_hook(tmp_path: Path, client_key: tuple[Path, str]) -> None:
    """sitecustomize alone (no hook, package not on sys.path): the rank still listens and reports
    in the default manifest dir, <tmp>/remote-debug/<job>/<node>."""
    env = base_env(tmp_path, client_key[1], job="no-hook")
    for name in (spec.ENV_MANIFEST_DIR, spec.ENV_STATE_DIR):
        env.pop(name)
    env["PYTHONPATH"] = str(REPO / "remote_debug" / "container" / "inject")
    env["TMPDIR"] = str(tmp_path)
    env["SM_CURRENT_HOST"] = "algo-2"
    expected_dir = tmp_path / "remote-debug" / "no-hook" / "algo-2"
    with hook_run(tmp_path, {**env, spec.ENV_MANIFEST_DIR: str(expected_dir)}) as run:
        script = _script(run, "import remote_debug, sys; print(remote_debug.__file__)\n")
        result = subprocess.run([PYTHON, script], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == str(REPO / "remote_debug" / "__init__.py")
        rank = run.rank(0)
        assert rank["port"] > 0 and rank["state"] == "finished"


def test_unselected_rank_is_skipped(run: HookRun) -> None:
    run.env[spec.ENV_RANKS] = "1"
    started = time.monotonic()
    run.start(PYTHON, _script(run, EXIT_SCRIPT), str(run.marks), "0")
    assert run.wait() == 0
    rank = run.rank(0)
    assert rank["state"] == "skipped" and rank["port"] == 0 and rank["error"] is None
    assert time.monotonic() - started < 30


def test_pycharm_rank_without_a_wait_starts_idle_and_never_tries_by_itself(run: HookRun) -> None:
    # A PyCharm rank connects out only when attach asks (control channel) or while it waits (--wait):
    # with no wait it trains at once, idle, and tries nothing.
    run.env[spec.ENV_IDE] = "pycharm"
    run.start(PYTHON, _script(run, EXIT_SCRIPT), str(run.marks), "0")
    assert run.wait() == 0
    rank = run.rank(0)
    assert rank["state"] == "finished" and rank["port"] != 0 and rank["ide"] == "pycharm"
    assert rank["control_port"] > 0 and rank["error"] is None
    assert "PyCharm" not in run.stderr


def test_pycharm_rank_waiting_without_a_tunnel_runs_on_and_says_why(run: HookRun) -> None:
    # With a wait window and no reverse tunnel it tries for the window, then trains on, idle.
    run.env[spec.ENV_IDE] = "pycharm"
    run.env[spec.ENV_WAIT] = "1"
    run.start(PYTHON, _script(run, EXIT_SCRIPT), str(run.marks), "0")
    assert run.wait() == 0
    rank = run.rank(0)
    assert rank["state"] == "finished" and "no tunnel" in rank["error"]
    assert "rank 0: no PyCharm debugger within 1 s" in run.stderr


def test_usage_without_command() -> None:
    result = subprocess.run(
        [PYTHON, "-m", "remote_debug.container", "--"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2 and "usage:" in result.stderr


SIGINT_SCRIPT = """\
import pathlib, signal, sys, time
marks = pathlib.Path(sys.argv[1])
count = 0
def on_int(signum, frame):
    global count
    count += 1
signal.signal(signal.SIGINT, on_int)
(marks / "started").write_text("")
deadline = time.monotonic() + 30
while not (marks / "release").exists() and time.monotonic() < deadline:
    time.sleep(0.05)
time.sleep(0.5)  # a forwarded duplicate would land by now
(marks / "sigints").write_text(str(count))
"""


def test_ctrl_c_on_a_terminal_reaches_the_command_once(run: HookRun) -> None:
    """In a terminal's foreground the command shares our process group and gets Ctrl-C from the
    terminal itself; the hook must not forward a second copy."""
    import fcntl
    import termios

    master, slave = os.openpty()

    def controlling_tty() -> None:  # runs in the hook's process, a new session leader
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    script = _script(run, SIGINT_SCRIPT)
    run.marks.mkdir(exist_ok=True)
    run.proc = subprocess.Popen(
        [PYTHON, "-m", "remote_debug.container", "--", PYTHON, script, str(run.marks)],
        env=run.env,
        cwd=run.root,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
        preexec_fn=controlling_tty,
    )
    os.close(slave)
    try:
        wait_for(lambda: (run.marks / "started").exists(), 30, "the script to start")
        os.write(master, b"\x03")  # Ctrl-C typed on the terminal
        time.sleep(0.3)
        run.release()
        assert run.wait(30) == 0
    finally:
        os.close(master)
    assert (run.marks / "sigints").read_text() == "1"
    assert run.node()["state"] == "stopped"


def test_command_not_executable_exits_126(run: HookRun) -> None:
    script = run.root / "no-shebang"
    script.write_bytes(b"\x7fELF-but-not-really")
    script.chmod(0o755)
    run.start(str(script))
    assert run.wait() == 126
    assert "[remote-debug] cannot run" in run.stderr
    assert run.node()["exit_code"] == 126
