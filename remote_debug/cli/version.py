"""``remote-debug version [--json]``: what is installed, for people and for the VS Code extension.

The extension asks for ``--json`` to check a minimum version and to offer an upgrade with the same
interpreter (``python``); ``events_version`` is the version of the ``attach --json`` event stream.
"""

from __future__ import annotations

import sys
from typing import Annotated

from remote_debug import DISTRIBUTION, __version__
from remote_debug.cli.application import app, flag
from remote_debug.cli.output import console, print_json
from remote_debug.laptop.wire.documents import VersionInfo
from remote_debug.laptop.wire.events import EVENTS_VERSION


@app.command()
def version(as_json: Annotated[bool, flag("--json", help="Print JSON.")] = False) -> None:
    """Show the installed version, its distribution name on PyPI and the Python it runs on."""
    if as_json:
        print_json(
            VersionInfo(
                version=__version__, distribution=DISTRIBUTION, python=sys.executable, events_version=EVENTS_VERSION
            ).to_json()
        )
        return
    console.print(
        f"remote-debug {__version__} ({DISTRIBUTION}; Python {sys.version.split()[0]} at {sys.executable})",
        markup=False,
        highlight=False,
    )
