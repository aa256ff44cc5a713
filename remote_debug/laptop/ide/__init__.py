"""The IDE side of an attach: VS Code, headless (the built-in DAP client) and PyCharm."""

from __future__ import annotations

from pathlib import Path

from remote_debug.laptop.ide.base import IdeSide, RankForward
from remote_debug.laptop.ide.editor import Editor
from remote_debug.laptop.ide.headless import HeadlessIde
from remote_debug.laptop.ide.headless_session import HeadlessPlan
from remote_debug.laptop.ide.pycharm import PyCharmIde, PyCharmOptions
from remote_debug.laptop.ide.vscode import VsCodeIde
from remote_debug.laptop.wire import events

__all__ = ["Editor", "HeadlessIde", "IdeSide", "PyCharmIde", "PyCharmOptions", "RankForward", "VsCodeIde", "ide_side"]


def ide_side(
    editor: Editor,
    job: str,
    workspace: Path,
    emit: events.Emit,
    *,
    headless: HeadlessPlan | None,
    write_launch_json: bool,
    pycharm: PyCharmOptions,
    runs_here: bool,
) -> IdeSide:
    """The side for ``--ide`` (and ``--headless``); ``runs_here``: the job's ranks use this machine's
    Python environment (PyCharm then checks the pydevd-pycharm installed here)."""
    if editor == Editor.PYCHARM:  # headless: the built-in pydevd server stands in for PyCharm
        return PyCharmIde(job, workspace, pycharm, headless, emit, local_job=runs_here)
    if headless is not None:
        return HeadlessIde(job, workspace, emit, headless, write_launch_json=write_launch_json)
    return VsCodeIde(job, workspace, emit, write_launch_json=write_launch_json)
