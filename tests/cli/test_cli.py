"""The CLI as users run it (a subprocess): bad input is one line + exit 2 and leaves no files;
jobs/stop/ssh/demo work against real local jobs."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from remote_debug.laptop.core.paths import StatePaths

SLEEPER = "import time\nfor i in range(600):\n    time.sleep(0.1)\n"


def cli(*args: str, timeout: float = 120, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "remote_debug", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ),
        cwd=cwd,
    )


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("remote-debug: error: "), proc.stderr
    for needle in needles:
        assert needle in lines[0]


def files_under(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else []


@pytest.fixture
def src(tmp_path: Path) -> Path:
    d = tmp_path / "src"
    d.mkdir()
    (d / "sleeper.py").write_text(SLEEPER)
    (d / "quick.py").write_text("print('quick done')\n")
    return d


def wait_for(predicate, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def job_status(name: str) -> str:
    out = cli("jobs", "--json")
    return str(next(j["status"] for j in json.loads(out.stdout) if j["name"] == name))


def test_bad_input_is_one_line_exit_2_and_writes_nothing(home: Path, src: Path) -> None:
    state = StatePaths.default().root
    assert_one_line_error(cli("attach", "no-such-job"), "unknown job")
    assert_one_line_error(
        cli("launch", "--local", "--name", "bad;name$(reboot)", "--source-dir", str(src), "--", "python", "quick.py"),
        "bad job name",
    )
    assert_one_line_error(cli("launch", "--local", "--name", "x" * 200, "--", "python", "quick.py"), "bad job name")
    assert_one_line_error(
        cli(
            "launch", "--local", "--name", "ok", "--source-dir", str(src), "--ranks", "0,x", "--", "python", "quick.py"
        ),
        "bad rank list",
    )
    assert_one_line_error(
        cli(
            "launch",
            "--local",
            "--name",
            "ok",
            "--sshd-port",
            "70000",
            "--source-dir",
            str(src),
            "--",
            "python",
            "quick.py",
        ),
        "Invalid value for '--sshd-port'",
        "65535",
    )
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        assert_one_line_error(
            cli(
                "launch",
                "--local",
                "--name",
                "ok",
                "--debug-port",
                str(port),
                "--source-dir",
                str(src),
                "--",
                "python",
                "quick.py",
            ),
            f"debug port {port} is in use",
        )
    assert_one_line_error(
        cli("launch", "--local", "--name", "ok", "--source-dir", str(src / "nope"), "--", "python", "quick.py"),
        "does not exist",
    )
    assert_one_line_error(cli("ssh-config", "no-such-job"), "unknown job")
    assert files_under(state) == []  # no partial jobs, keys or configs
    assert not (home / ".ssh").exists()


def test_attach_to_finished_job_and_malformed_manifest(home: Path, src: Path) -> None:
    assert (
        cli("launch", "--local", "--name", "quick", "--source-dir", str(src), "--", "python", "quick.py").returncode
        == 0
    )
    wait_for(lambda: job_status("quick") == "Completed")
    assert_one_line_error(cli("attach", "quick"), "job quick is Completed")

    assert (
        cli("launch", "--local", "--name", "sleepy", "--source-dir", str(src), "--", "python", "sleeper.py").returncode
        == 0
    )
    job_dir = StatePaths.default().job_dir("sleepy")
    node_json = job_dir / "nodes/algo-1/remote-debug/manifest/node.json"
    wait_for(lambda: job_status("sleepy") == "InProgress" and node_json.exists())
    wait_for(lambda: "node_pids" in json.loads((job_dir / "job.json").read_text()))
    hook_pid = int(json.loads((job_dir / "job.json").read_text())["node_pids"]["algo-1"])
    os.kill(hook_pid, signal.SIGSTOP)  # freeze the hook so it cannot rewrite the manifest we break
    try:
        node_json.write_text('{"version": 1, "job_name": "sleepy", "node": ')  # truncated by a broken writer
        assert_one_line_error(cli("attach", "sleepy", "--ranks", "3", "--workspace", str(src)), "unknown ranks [3]")
        assert_one_line_error(cli("attach", "sleepy", "--workspace", str(src)), "malformed manifest")
    finally:
        os.kill(hook_pid, signal.SIGCONT)
    # nothing of ours was written: no ssh entries, no Include in ~/.ssh/config, no launch.json
    assert not (home / ".ssh").exists()
    assert not StatePaths.default().ssh_dir.exists()
    assert not (src / ".vscode").exists()
    stopped = cli("stop", "sleepy", "--json")
    assert stopped.returncode == 0 and json.loads(stopped.stdout)["status"] == "Stopped"


def test_jobs_stop_and_ssh_into_a_node(home: Path, src: Path) -> None:
    launched = cli(
        "launch", "--local", "--name", "longrun", "--source-dir", str(src), "--json", "--", "python", "sleeper.py"
    )
    assert launched.returncode == 0, launched.stderr
    assert json.loads(launched.stdout)["status"] == "InProgress"
    wait_for(
        lambda: (
            cli("jobs", "--json").stdout
            and next(j for j in json.loads(cli("jobs", "--json").stdout) if j["name"] == "longrun")["secondary_status"]
            == "Training"
        )
    )
    user_config = home / ".ssh" / "config"
    user_config.parent.mkdir(mode=0o700)
    user_config.write_bytes(b"Host *\r\n  ServerAliveInterval 30\r\nMatch host foo\r\n  User bar")
    original = user_config.read_bytes()
    dry = cli("ssh-config", "longrun", "--dry-run", "--json")
    assert dry.returncode == 0 and json.loads(dry.stdout)["aliases"] == ["algo-1.longrun"]
    assert user_config.read_bytes() == original  # --dry-run writes nothing
    first = cli("ssh-config", "longrun", "--json")
    assert json.loads(first.stdout)["aliases"] == ["algo-1.longrun"]
    written = user_config.read_bytes()
    assert written.startswith(b"Include ") and written.endswith(original)
    assert cli("ssh-config", "longrun", "--json").returncode == 0
    assert user_config.read_bytes() == written  # idempotent
    effective = subprocess.run(
        ["ssh", "-G", "-F", str(user_config), "algo-1.longrun"], capture_output=True, text=True, check=True
    ).stdout
    assert "hostkeyalias remote-debug.algo-1.longrun" in effective
    assert "stricthostkeychecking true" in effective
    assert "remote_debug proxy" in effective
    assert cli("ssh-config", "--remove").returncode == 0
    assert user_config.read_bytes() == original  # restored byte for byte

    who = cli("ssh", "longrun", "--", "echo $SSH_CONNECTION")  # one word: a remote command line
    assert who.returncode == 0 and who.stdout.startswith("127.0.0.1 "), who.stderr
    # options after the job name, as the help and the README write it: `ssh JOB --node N -- CMD`
    named = cli("ssh", "longrun", "--node", "algo-1", "--", "hostname")
    assert named.returncode == 0 and named.stdout.strip() == socket.gethostname(), named.stderr
    # each word after `--` arrives whole, and the remote exit code is ours
    assert cli("ssh", "longrun", "--", "sh", "-c", "exit 7").returncode == 7
    hello = cli("ssh", "longrun", "--", "python3", "-c", "print('hello world')")
    assert (hello.returncode, hello.stdout) == (0, "hello world\n"), hello.stderr
    words = cli("ssh", "longrun", "--", "printf", "[%s]\\n", "a  b", "*", "$HOME", "it's")
    assert words.stdout == "[a  b]\n[*]\n[$HOME]\n[it's]\n", words.stderr

    job_dir = StatePaths.default().job_dir("longrun")
    state = json.loads((job_dir / "job.json").read_text())
    node_pid = int(state["node_pids"]["algo-1"])
    stopped = cli("stop", "longrun", "--json")
    assert json.loads(stopped.stdout)["status"] == "Stopped"
    wait_for(
        lambda: (
            not Path(f"/proc/{node_pid}").exists()
            or Path(f"/proc/{node_pid}/stat").read_text().split(") ")[1].startswith("Z")
        ),
        timeout=10,
    )
    # AWS-style states, machine-readable
    listed = json.loads(cli("jobs", "--json").stdout)
    assert [(j["name"], j["status"]) for j in listed] == [("longrun", "Stopped")]


def test_demo_headless_json_stops_every_rank(home: Path) -> None:
    proc = cli("demo", "--headless", "--json", timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    assert result["exit_code"] == 0
    assert [r["rank"] for r in result["ranks"]] == [0, 1]
    for r in result["ranks"]:
        assert r["file"].endswith("train_ddp.py")
        assert r["variables"]["rank"] == str(r["rank"])
        assert r["variables"]["world_size"] == "2"
        after_step = r["stops"][1]
        assert after_step["line"] == r["line"] + 1
        assert after_step["variables"]["shard_marker"] == str(r["rank"] * 100 + int(r["variables"]["step"]))


def test_no_netns_keeps_nodes_on_loopback_and_jobs_json_says_so(home: Path, src: Path) -> None:
    out = cli(
        "launch",
        "--local",
        "--name",
        "flat",
        "--nodes",
        "2",
        "--no-netns",
        "--source-dir",
        str(src),
        "--json",
        "--",
        "python",
        "quick.py",
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["machine"]["isolation"] == "loopback"
    listed = json.loads(cli("jobs", "--json").stdout)
    assert [j["machine"]["isolation"] for j in listed if j["name"] == "flat"] == ["loopback"]
    wait_for(lambda: job_status("flat") in ("Completed", "Failed"), 120)
    assert job_status("flat") == "Completed"


@pytest.mark.skipif(os.geteuid() != 0, reason="multi-node local jobs run in network namespaces as root")
def test_ssh_node_option_reaches_that_node(home: Path, src: Path) -> None:
    """The README's multi-node form: `remote-debug ssh JOB --node algo-2 -- CMD` runs CMD on algo-2."""
    launched = cli(
        "launch", "--local", "--nodes", "2", "--name", "pair", "--source-dir", str(src), "--", "python", "sleeper.py"
    )
    assert launched.returncode == 0, launched.stderr
    try:
        second = cli("ssh", "pair", "--node", "algo-2", "--", "sh", "-c", 'echo "$(hostname) $SM_CURRENT_HOST"; exit 3')
        assert (second.returncode, second.stdout) == (3, "algo-2 algo-2\n"), second.stderr
        missing = cli("ssh", "pair", "--node", "algo-3", "--", "true")
        assert_one_line_error(missing, "no node 'algo-3'", "algo-1, algo-2")
    finally:
        cli("stop", "pair")
