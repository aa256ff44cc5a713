"""Which editor an attach serves (``--ide``), and the one place that says what its ranks must run.

The job only knows what its ranks run (:class:`~remote_debug.contract.spec.RankDebugger`); whose files
an attach writes (VS Code's launch.json entries, PyCharm's run configuration) is decided here, on the
laptop.  A new editor that speaks DAP (or a pydevd server) is a member here and an ``IdeSide``: neither
the contract nor the job changes.  Stdlib + the contract only: the CLI imports it to parse ``--ide``.
"""

from __future__ import annotations

from remote_debug.contract.spec import RankDebugger, StrEnum


class Editor(StrEnum):
    """The editor you debug from: what ``--ide`` names, and whose configuration an attach writes."""

    VSCODE = "vscode"  # launch.json entries; the built-in DAP client (``--headless``) plays it without one
    PYCHARM = "pycharm"  # a run configuration for PyCharm's Python Debug Server; headless: the built-in server

    @property
    def debugger(self) -> RankDebugger:
        """What the job's ranks must run for this editor (the job is launched with it)."""
        return _DEBUGGER[self]

    @classmethod
    def for_debugger(cls, debugger: RankDebugger) -> Editor:
        """The editor a job launched for ``debugger`` is attached with (what ``--ide`` to suggest)."""
        return next(editor for editor, runs in _DEBUGGER.items() if runs == debugger)


_DEBUGGER = {Editor.VSCODE: RankDebugger.DEBUGPY, Editor.PYCHARM: RankDebugger.PYDEVD}
