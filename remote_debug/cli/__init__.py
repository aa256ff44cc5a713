"""The ``remote-debug`` command line: thin commands that call ``remote_debug.local``.

One module per subcommand; every command takes ``--json``; bad input is one line on stderr and
exit code 2 (see :func:`main`).
"""

from __future__ import annotations

import sys

# Importing the command modules registers them on ``app``.
from remote_debug.cli import attach, demo, doctor, enable, jobs, launch, proxy, ssh, ssh_config, stacks, stop  # noqa: F401
from remote_debug.cli.app import app
from remote_debug.cli.output import error_line
from remote_debug.local.errors import UserError
from remote_debug.spec import ContractError

__all__ = ["app", "main"]


def main() -> None:
    try:
        app()
    except (UserError, ContractError) as exc:
        error_line(str(exc))
        sys.exit(2)
    except KeyboardInterrupt:
        error_line("interrupted")
        sys.exit(130)
