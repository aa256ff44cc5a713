"""Bad input through the real command line: one line on stderr, exit code 2, and no files written.

Each case runs ``remote_debug.cli.main()`` in-process with its argv (the same function the
``remote-debug`` script calls), which keeps ~80 invocations fast; a few run as real subprocesses
too.  "No files written" compares a snapshot (path, bytes, mode) of HOME — which holds the state
dir, ~/.ssh and the workspace — before and after each command.

The malformed-manifest cases use a job that exists only as its state files (job.json, a live
stand-in supervisor process, node.json / rank-N.json): reading and validating manifests is what is
under test, and no sshd is needed to get there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import NoReturn

import pytest

from remote_debug.cli import main
from remote_debug.laptop.core.paths import StatePaths
from tests.local.test_local_faults import make_fake_job

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB7dnjpCsVN6hQ7kBQQ2XyvqtWFm8qv4U3s0DgV2c9m1"
JOB = "fake"

HOSTILE_NAMES = [
    "a;rm -rf ~",
    "$(touch /tmp/pwned)",
    "`id`",
    "job\nHost *\n  ProxyCommand evil",
    "job\r",
    "nl\n",  # a trailing newline: re's $ matches before it (issue 13)
    "algo\t1",
    "a b",
    "..",
    "../../etc",
    "a/b",
    "x" * 300,
    "ünïcödé",
    "job.with.dots",
    "%h%p",
    "*",
    "'quoted'",
    '"dq"',
    "job\x00nul",
    "-",
    "-rf",
]


def snapshot(root: Path) -> dict[str, tuple[bytes | None, int]]:
    out: dict[str, tuple[bytes | None, int]] = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        out[str(p.relative_to(root))] = (p.read_bytes() if p.is_file() else None, st.st_mode)
    return out


def run_cli(*args: str) -> tuple[int, str, str]:
    """``remote-debug ARGS`` in-process; returns (exit code, stdout, stderr)."""
    import contextlib
    import io

    def no_exec(*_: object) -> NoReturn:  # "remote-debug ssh" ends in execv: never replace pytest
        raise AssertionError(f"remote-debug {' '.join(args)} got as far as exec'ing ssh")

    out, err = io.StringIO(), io.StringIO()
    argv, execv = sys.argv, os.execv
    sys.argv, os.execv = ["remote-debug", *args], no_exec
    code: int | str | None = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main()
    except SystemExit as exc:
        code = exc.code
    finally:
        sys.argv, os.execv = argv, execv
    return (code if isinstance(code, int) else (0 if code is None else 1)), out.getvalue(), err.getvalue()


def assert_refused(args: list[str], *needles: str) -> str:
    code, _, err = run_cli(*args)
    lines = err.strip().splitlines()
    assert code == 2, (args, code, err)
    assert len(lines) == 1 and lines[0].startswith("remote-debug: error: "), (args, err)
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], (args, lines[0])
    return lines[0]


def node_doc(**changes: object) -> dict[str, object]:
    doc: dict[str, object] = {
        "version": 1,
        "job_name": JOB,
        "node": "algo-1",
        "hosts": ["algo-1"],
        "sshd_host": "127.0.0.1",
        "sshd_port": 2222,
        "ssh_user": "root",
        "host_public_key": KEY,
        "code_dir": "/opt/ml/code",
        "state": "running",
        "hook_pid": 1,
    }
    doc.update(changes)
    return doc


def rank_doc(rank: int = 0, **changes: object) -> dict[str, object]:
    doc: dict[str, object] = {
        "version": 1,
        "rank": rank,
        "local_rank": rank,
        "world_size": 2,
        "port": 0,
        "pid": 1,
        "state": "idle",
        "control_port": 3333,
    }
    doc.update(changes)
    return doc


@pytest.fixture
def fake_job(home: Path, sleeper: subprocess.Popen[bytes]) -> Path:
    """A running 1-node x 2-rank local job as the laptop sees it; returns its manifest dir."""
    return make_fake_job(StatePaths.default(), JOB, sleeper.pid)


# --- hostile names -------------------------------------------------------------------------------


def test_hostile_job_names_are_refused_by_every_command(home: Path, tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (home / ".ssh").mkdir()
    (home / ".ssh" / "config").write_bytes(b"Host *\n    User me\n")
    before, ws_before = snapshot(home), snapshot(workspace)
    tried = 0
    for name in HOSTILE_NAMES:
        # after "--" a name is the JOB argument even when it starts with "-"
        commands = [
            ["attach", "--workspace", str(workspace), "--", name],
            ["attach", "--headless", "--json", "--", name],
            ["ssh-config", "--", name],
            ["ssh-config", "--dry-run", "--", name],
            ["ssh-config", "--remove", "--", name],
            ["stacks", "--", name],
            ["stop", "--", name],
            ["ssh", "--", name, "true"],
            ["launch", "--local", "--name", name, "--source-dir", str(workspace), "--", "python", "x.py"],
        ]
        if not name.startswith("-"):  # and as users type it
            commands += [["attach", name], ["ssh-config", name], ["stacks", name], ["stop", name]]
        for args in commands:
            line = assert_refused(args)
            assert "\n" not in line and "\r" not in line and "\x00" not in line
            assert len(line) < 400  # a 300-character name is cut, not echoed whole
            tried += 1
    assert snapshot(home) == before and snapshot(workspace) == ws_before
    assert tried >= 200


def test_usage_errors_are_one_line_too(home: Path) -> None:
    before = snapshot(home)
    assert_refused(["attach"], "Missing argument")
    assert_refused(["attach", "job", "--bogus"], "No such option")
    assert_refused(["attach", "job", "--timeout", "soon"], "--timeout")
    assert_refused(["launch", "--local", "--nodes", "many", "--", "python", "x.py"], "--nodes")
    assert_refused(["no-such-command"], "no-such-command")
    assert snapshot(home) == before


# --- out-of-range numbers, unknown choices and unknown ranks ------------------------------------

LAUNCH = ["launch", "--local", "--name", "ok"]
IDE_CHOICES = "is not one of 'vscode', 'pycharm'"

# (argv, what the error line must say...).  Ranges and choices are typer's (min/max, Enum): "Invalid value
# for '--x': ..." names the option and the bound; --timeout is refused by cli.application.positive_seconds.
OUT_OF_RANGE: list[tuple[list[str], ...]] = [
    (["attach", JOB, "--ide", "pycharm", "--pycharm-port", "70000"], ["'--pycharm-port'", "65535"]),
    (["attach", JOB, "--ide", "pycharm", "--pycharm-port", "-1"], ["'--pycharm-port'", "greater than or equal to 0"]),
    (["attach", JOB, "--ranks", "7"], ["unknown ranks [7]"]),
    (["attach", JOB, "--ranks", "0,1,2"], ["unknown ranks [2]"]),
    (["attach", JOB, "--ranks", "-1"], ["bad rank list"]),
    (["attach", JOB, "--ranks", "0,,1"], ["bad rank list"]),
    (["attach", JOB, "--ranks", "99999999999999999999999"], ["unknown ranks"]),
    (["attach", JOB, "--ide", "emacs"], ["'--ide'", f"'emacs' {IDE_CHOICES}"]),
    (["attach", JOB, "--ide", "PyCharm"], ["'--ide'", IDE_CHOICES]),
    (["attach", JOB, "--timeout", "-5"], ["'--timeout'", "use a positive number"]),
    (["attach", JOB, "--timeout", "nan"], ["'--timeout'", "use a positive number"]),
    (["attach", JOB, "--timeout", "inf"], ["'--timeout'", "use a positive number"]),
    (["attach", JOB, "--timeout", "0"], ["'--timeout'", "use a positive number"]),
    (["attach", JOB, "--headless", "--break", "train.py:0"], ["bad breakpoint"]),
    (["attach", JOB, "--headless", "--break", "train.py"], ["bad breakpoint"]),
    (["attach", JOB, "--headless", "--steps", "-3"], ["'--steps'", "greater than or equal to 0"]),
    (["attach", JOB, "--headless", "--max-stops", "-1"], ["'--max-stops'", "greater than or equal to 0"]),
    (["attach", JOB, "--workspace", "/no/such/dir"], ["is not a directory"]),
    (["stacks", JOB, "--ranks", "5"], ["ranks [5]"]),
    (["stacks", JOB, "--timeout", "0"], ["'--timeout'"]),
    (["ssh-config", JOB, "--timeout", "-1"], ["'--timeout'"]),
    (["ssh-config", JOB, "--dry-run", "--timeout", "nan"], ["'--timeout'"]),
    (["ssh", "--node", "algo-9", JOB, "--", "true"], ["algo-9"]),
    (["ssh", "--node", "../x", JOB, "--", "true"], ["node"]),
    (["ssh", "--timeout", "inf", JOB, "--", "true"], ["'--timeout'"]),
    ([*LAUNCH, "--debug-port", "65536", "--", "python", "x.py"], ["'--debug-port'", "65535"]),
    ([*LAUNCH, "--sshd-port", "-2", "--", "python", "x.py"], ["'--sshd-port'", "greater than or equal to 0"]),
    ([*LAUNCH, "--nodes", "0", "--", "python", "x.py"], ["'--nodes'", "greater than or equal to 1"]),
    ([*LAUNCH, "--nodes", "65", "--", "python", "x.py"], ["'--nodes'", "less than or equal to 64"]),
    ([*LAUNCH, "--nproc-per-node", "0", "--", "python", "x.py"], ["'--nproc-per-node'"]),
    ([*LAUNCH, "--wait", "-1", "--", "python", "x.py"], ["'--wait'", "greater than or equal to 0"]),
    ([*LAUNCH, "--wait", "nan", "--", "python", "x.py"], ["'--wait'"]),
    ([*LAUNCH, "--wait", "inf", "--", "python", "x.py"], ["'--wait'", "604800"]),
    ([*LAUNCH, "--hold-on-failure", "-1", "--", "python", "x.py"], ["'--hold-on-failure'"]),
    ([*LAUNCH, "--hold-on-failure", "nan", "--", "python", "x.py"], ["'--hold-on-failure'"]),
    ([*LAUNCH, "--ide", "emacs", "--", "python", "x.py"], ["'--ide'", IDE_CHOICES]),
    (["demo", "--nodes", "0"], ["'--nodes'"]),
    (["demo", "--nproc-per-node", "65"], ["'--nproc-per-node'", "64"]),
    (["demo", "--wait", "-1"], ["'--wait'"]),
    (["demo", "--ide", "emacs"], ["'--ide'", IDE_CHOICES]),
    (["demo", "--ide", "pycharm", "--pycharm-port", "65536"], ["'--pycharm-port'", "65535"]),
]


@pytest.mark.parametrize(("args", "needles"), OUT_OF_RANGE, ids=[" ".join(case[0]) for case in OUT_OF_RANGE])
def test_numbers_out_of_range_and_unknown_ranks(
    home: Path, fake_job: Path, args: list[str], needles: list[str]
) -> None:
    before = snapshot(home)
    line = assert_refused(args, *needles)
    if "Invalid value for" in line:  # typer's own checks also say where to look
        assert line.endswith(f"(see 'remote-debug {args[0]} -h')"), line
    assert snapshot(home) == before


# --- malformed manifests -------------------------------------------------------------------------

DEEP = "[" * 50_000 + "]" * 50_000

MALFORMED: list[tuple[str, str | bytes, str]] = [
    # (file, content, what the error line must say)
    ("node.json", '{"version": 1, "job_name": "fake", "node": ', "malformed manifest"),  # truncated
    ("node.json", "", "malformed manifest"),
    ("node.json", b"\xff\xfe{}", "not UTF-8"),
    ("node.json", DEEP, "malformed manifest"),
    ("node.json", "[]", "not a JSON object"),
    ("node.json", "null", "not a JSON object"),
    ("node.json", json.dumps(node_doc(version=99)), "version 99 is not supported"),
    ("node.json", json.dumps(node_doc(version="1")), "'version'"),
    ("node.json", json.dumps(node_doc(sshd_port=70000)), "out of range"),
    ("node.json", json.dumps(node_doc(sshd_port=-1)), "out of range"),
    ("node.json", json.dumps(node_doc(sshd_port="2222")), "'sshd_port'"),
    ("node.json", json.dumps(node_doc(sshd_port=True)), "'sshd_port'"),
    ("node.json", json.dumps(node_doc(hosts="algo-1")), "'hosts'"),
    ("node.json", json.dumps(node_doc(errors=5)), "node manifest"),
    ("node.json", json.dumps(node_doc(node="../../etc")), "bad node name"),
    ("node.json", json.dumps(node_doc(node="algo-1\nHost *")), "bad node name"),
    ("node.json", json.dumps(node_doc(job_name="x;y")), "bad job name"),
    ("node.json", json.dumps(node_doc(ssh_user="root\n  ProxyCommand sh")), "bad ssh user"),
    ("node.json", json.dumps(node_doc(ssh_user="%h")), "bad ssh user"),
    ("node.json", json.dumps(node_doc(host_public_key="ssh-ed25519")), "host key"),
    ("node.json", json.dumps(node_doc(host_public_key=KEY + "\n@cert-authority * evil")), "host key"),
    ("node.json", json.dumps({k: v for k, v in node_doc().items() if k != "ssh_user"}), "'ssh_user'"),
    ("rank-1.json", '{"version": 1, "rank": 1, "local_', "malformed manifest"),  # truncated
    ("rank-1.json", b"\x80", "not UTF-8"),
    ("rank-1.json", DEEP, "malformed manifest"),
    ("rank-1.json", json.dumps(rank_doc(1, version=2)), "version 2 is not supported"),
    ("rank-1.json", json.dumps({**rank_doc(1), "rank": "1"}), "'rank'"),
    ("rank-1.json", json.dumps(rank_doc(1, port=65536)), "out of range"),
    ("rank-1.json", json.dumps(rank_doc(1, control_port=-3)), "out of range"),
    ("rank-1.json", json.dumps(rank_doc(1, world_size=None)), "'world_size'"),
    ("rank-1.json", "[1, 2]", "not a JSON object"),
    ("rank-1.json", json.dumps({k: v for k, v in rank_doc(1).items() if k != "pid"}), "'pid'"),
]


@pytest.mark.parametrize(("name", "content", "needle"), MALFORMED, ids=[f"{m[0]}-{i}" for i, m in enumerate(MALFORMED)])
def test_malformed_manifests_are_one_line_errors(
    home: Path, fake_job: Path, tmp_path: Path, name: str, content: str | bytes, needle: str
) -> None:
    (fake_job / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (home / ".ssh").mkdir()
    (home / ".ssh" / "config").write_bytes(b"# mine\r\nHost *\r\n")
    before, ws_before = snapshot(home), snapshot(workspace)
    for args in (
        ["attach", JOB, "--workspace", str(workspace), "--timeout", "1"],
        ["attach", JOB, "--headless", "--json", "--workspace", str(workspace), "--timeout", "1"],
        ["ssh-config", JOB, "--timeout", "1"],
        ["ssh-config", JOB, "--dry-run", "--timeout", "1"],
        ["stacks", JOB, "--timeout", "1"],
    ):
        assert_refused(args, needle)
    assert snapshot(home) == before and snapshot(workspace) == ws_before


def test_real_subprocess_bad_input_is_one_line_exit_2(home: Path, fake_job: Path) -> None:
    """The same promise through the installed entry point (what the VS Code extension runs)."""
    (fake_job / "node.json").write_bytes(b"\xff")
    before = snapshot(home)
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMOTE_DEBUG_")}
    exe = Path(sys.executable).with_name("remote-debug")
    for args in (["attach", JOB, "--ranks", "7"], ["attach", JOB], ["attach", "a\nb"], ["attach", "--nope"]):
        proc = subprocess.run([str(exe), *args], capture_output=True, text=True, env=env, timeout=60)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("remote-debug: error: "), proc.stderr
    assert snapshot(home) == before
