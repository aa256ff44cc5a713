"""A container whose Python is older than 3.10: the hook steps aside and training runs unchanged.

The hook is 3.10+ code.  ``python -m remote_debug.container -- CMD`` on an older interpreter must
say so in one line and run CMD exactly as without the hook; the modules Python imports before that
check (the package ``__init__`` files and ``__main__``) must therefore load on Python 3.6+.  No old
interpreter is installed here: the version is injected, and the files are parsed with 3.6's grammar.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from remote_debug.container import __main__ as entry
from remote_debug.container.node import bootstrap
from remote_debug.contract import spec
from tests.helpers.hook_runs import REPO

# Imported by ``python -m remote_debug.container`` before the version check, and sitecustomize,
# which every Python process of an injected job runs (whatever its version).
EARLY_FILES = [
    REPO / "remote_debug" / "__init__.py",
    REPO / "remote_debug" / "container" / "__init__.py",
    REPO / "remote_debug" / "container" / "__main__.py",
    REPO / "remote_debug" / "container" / "inject" / "sitecustomize.py",
]
OLD = (3, 8, 10)
SPEC_ENV = spec.DebugSpec(
    job_name="old-py",
    job_secret="5e" * 32,
    client_public_key="ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJExB6drpej4VU5APPdGydAYq4clP4mmQ5PSEGTtS4BX",
).to_env()


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REMOTE_DEBUG_", "SM_"))}
    env.update(SPEC_ENV, REMOTE_DEBUG_MANIFEST_DIR=str(tmp_path / "manifest"), PYTHONPATH=str(REPO), **extra)
    return env


def test_version_check() -> None:
    assert entry.old_python((3, 10, 0)) is None and entry.old_python((3, 12, 1)) is None
    assert entry.old_python() is None  # this interpreter
    message = entry.old_python((3, 9, 18))
    assert message == (
        "[remote-debug] remote_debug needs Python >= 3.10, found 3.9.18; running the training command without debugging"
    )
    assert entry.DAEMON_FLAG == bootstrap.DAEMON_FLAG
    # sitecustomize keeps copies (importing their modules is what an old interpreter must not do)
    site = {
        t.id: n.value.value
        for n in ast.parse(EARLY_FILES[3].read_text()).body
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
        for t in n.targets
        if isinstance(t, ast.Name)
    }
    assert site["_SPEC_VERSION_ENV"] == spec.ENV_VERSION
    assert site["_OLD_PYTHON_REPORTED"] == entry.OLD_PYTHON_REPORTED
    assert site["_CLAIMED_BY_ENV"] == spec.ENV_CLAIMED_BY


def test_old_python_runs_the_command_unchanged_in_place(tmp_path: Path) -> None:
    """The command replaces the hook's process (same pid, stdio, signals and exit code, as without
    the hook); one line on stderr; no sshd, no manifest; none of the 3.10+ modules is imported."""
    probe = (
        "import json, os, sys\n"
        "from remote_debug.container.__main__ import main\n"
        "def fake_exec(file, args):\n"
        "    mods = sorted(m for m in sys.modules if m.startswith('remote_debug'))\n"
        "    print(json.dumps({'file': file, 'args': args, 'modules': mods,\n"
        "                      'reported': os.environ.get('REMOTE_DEBUG_OLD_PYTHON_REPORTED')}))\n"
        "    os._exit(0)\n"
        f"sys.exit(main(sys.argv[1:], version={OLD!r}, execvp=fake_exec))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe, "--", "train.sh", "--lr", "0.1"],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert seen["file"] == "train.sh" and seen["args"] == ["train.sh", "--lr", "0.1"]
    assert seen["modules"] == ["remote_debug", "remote_debug.container", "remote_debug.container.__main__"]
    assert seen["reported"] == "1"  # the command's own Python processes do not say it again
    assert proc.stderr.splitlines() == [
        "[remote-debug] remote_debug needs Python >= 3.10, found 3.8.10; running the training command without debugging"
    ]


def test_old_python_real_exec_keeps_exit_code_and_output(tmp_path: Path) -> None:
    probe = (
        f"import sys\nfrom remote_debug.container.__main__ import main\nsys.exit(main(sys.argv[1:], version={OLD!r}))\n"
    )
    script = 'echo training-out; echo training-err >&2; echo "pid=$$"; exit 3'
    proc = subprocess.Popen(
        [sys.executable, "-c", probe, "--", "sh", "-c", script],
        env=_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 3
    assert out.splitlines() == ["training-out", f"pid={proc.pid}"]  # exec'd: the command is the same process
    assert err.splitlines()[0].endswith("found 3.8.10; running the training command without debugging")
    assert err.splitlines()[1:] == ["training-err"]
    assert not (tmp_path / "manifest").exists()
    missing = subprocess.run(
        [sys.executable, "-c", probe, "--", "no-such-command-rd"],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert missing.returncode == 127 and "no-such-command-rd" in missing.stderr.splitlines()[-1]
    assert len(missing.stderr.splitlines()) == 2


def test_old_python_node_daemon_is_not_started(tmp_path: Path) -> None:
    assert entry.main([entry.DAEMON_FLAG, "--parent-pid", "1"], version=OLD) == 0


def test_old_python_sitecustomize_skips_and_says_so_once(tmp_path: Path) -> None:
    """Env-only injection runs our sitecustomize in every Python process, whatever its version."""
    inject = REPO / "remote_debug" / "container" / "inject"
    probe = (
        "import sys\n"
        f"sys.version_info = {OLD!r}  # what the interpreter reports is all sitecustomize looks at\n"
        f"sys.path.insert(0, {str(inject)!r})\n"
        "import sitecustomize, os\n"
        "print(sorted(m for m in sys.modules if m.startswith('remote_debug')))\n"
        "print(os.environ.get('REMOTE_DEBUG_OLD_PYTHON_REPORTED'))\n"
    )
    env = _env(tmp_path)
    env.pop("PYTHONPATH")
    first = subprocess.run(
        [sys.executable, "-S", "-c", probe],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines() == ["[]", "1"]  # nothing of ours imported; children are told
    assert first.stderr.splitlines() == [
        "[remote-debug] remote_debug needs Python >= 3.10, found 3.8.10; debugging is off in this process"
    ]
    again = subprocess.run(
        [sys.executable, "-S", "-c", probe],
        env={**env, "REMOTE_DEBUG_OLD_PYTHON_REPORTED": "1"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert again.returncode == 0 and again.stderr == ""


def _annotations(tree: ast.AST) -> list[ast.expr]:
    found: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.annotation is not None:
            found.append(node.annotation)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None:
            found.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            found.append(node.annotation)
    return found


@pytest.mark.parametrize("path", EARLY_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_files_loaded_before_the_check_load_on_python_3_6(path: Path) -> None:
    source = path.read_text()
    # 3.6's grammar, in a separate interpreter as a build step would run it
    check = f"import ast, sys; ast.parse(open({str(path)!r}).read(), feature_version=(3, 6))"
    proc = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    tree = ast.parse(source)
    # what the grammar check cannot see: `from __future__ import annotations` is a SyntaxError before
    # 3.7, and annotations are evaluated at definition time (``X | None``, ``tuple[int]`` fail before
    # 3.10 / 3.9): only strings, plain names and None are safe
    futures = [
        a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "__future__" for a in n.names
    ]
    assert "annotations" not in futures
    unsafe = [
        ast.unparse(a)
        for a in _annotations(tree)
        if not (
            isinstance(a, ast.Name) or (isinstance(a, ast.Constant) and (a.value is None or isinstance(a.value, str)))
        )
    ]
    assert unsafe == []
