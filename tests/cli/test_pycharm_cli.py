"""``--ide pycharm`` on the command line: a job that PyCharm could not debug correctly is refused
with one line and exit 2, before anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from remote_debug.laptop.core.paths import StatePaths
from tests.cli.test_cli import assert_one_line_error, cli, files_under


@pytest.fixture
def src(tmp_path: Path) -> Path:
    d = tmp_path / "src"
    d.mkdir()
    (d / "quick.py").write_text("print('quick done')\n")
    return d


def test_launch_refuses_without_a_known_pycharm_build(home: Path, src: Path) -> None:
    # No PyCharm is installed on this machine (and HOME is empty): nothing to match pydevd-pycharm to.
    proc = cli("launch", "--local", "--ide", "pycharm", "--source-dir", str(src), "--", "python", "quick.py")
    assert_one_line_error(proc, "cannot find PyCharm", "--pycharm-build")
    assert files_under(StatePaths.default().jobs_dir) == []


def test_launch_refuses_a_pydevd_pycharm_of_another_build(home: Path, src: Path) -> None:
    proc = cli(
        "launch", "--local", "--ide", "pycharm", "--pycharm-build", "PY-241.14494.241",
        "--source-dir", str(src), "--", "python", "quick.py",
    )  # fmt: skip
    assert_one_line_error(proc, "does not match PyCharm build 241.14494.241", "pydevd-pycharm~=241.14494.241")
    assert files_under(StatePaths.default().jobs_dir) == []


def test_pycharm_options_need_ide_pycharm(home: Path) -> None:
    assert_one_line_error(cli("attach", "somejob", "--pycharm-port", "23456"), "need --ide pycharm")
    assert_one_line_error(cli("attach", "somejob", "--ide", "emacs"), "'--ide'", "is not one of 'vscode', 'pycharm'")
