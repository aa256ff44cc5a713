"""``remote-debug proxy HOST PORT``: the ProxyCommand in every generated ssh Host entry.

ssh runs ``python -m remote_debug proxy ...``, whose fast path (``remote_debug.console``) goes to
:func:`remote_debug.laptop.connection.proxy.main` without loading the CLI; this command is what that path falls
back to for ``--help`` and usage errors, so they read like every other command's.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from remote_debug.cli.application import MAX_PORT, app
from remote_debug.laptop.connection.proxy import run_proxy
from remote_debug.laptop.core.paths import StatePaths


@app.command()
def proxy(
    host: Annotated[str, typer.Argument(help="The Host alias <node>.<job> (ssh's %h).")],
    port: Annotated[int, typer.Argument(min=0, max=MAX_PORT, help="The port (ssh's %p).")],
    state_dir: Annotated[
        Path | None, typer.Option("--state-dir", help="remote-debug's state dir (default: ~/.remote-debug).")
    ] = None,
) -> None:
    """Relay ssh's stdin/stdout to a job node's sshd (used by ssh, not by people)."""
    paths = StatePaths(state_dir.absolute()) if state_dir else StatePaths.default()
    raise typer.Exit(run_proxy(host, port, paths, sys.stdin.buffer, sys.stdout.buffer))
