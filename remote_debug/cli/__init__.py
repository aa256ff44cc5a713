"""The ``remote-debug`` command line: thin commands that call ``remote_debug.local``.

One module per subcommand; every command takes ``--json``; bad input is one line on stderr and
exit code 2 (see :func:`main`).
"""

from __future__ import annotations

import errno
import sys

import paramiko
from typer import Abort, Exit
from typer.exceptions import TyperException

# Importing the command modules registers them on ``app``.
from remote_debug.cli import (  # noqa: F401
    attach,
    cleanup,
    demo,
    doctor,
    emulator,
    enable,
    jobs,
    launch,
    proxy,
    prune,
    run,
    ssh,
    ssh_config,
    stacks,
    stop,
    sync,
)
from remote_debug.cli.app import app
from remote_debug.cli.output import error_line
from remote_debug.local.errors import UserError
from remote_debug.spec import ContractError

__all__ = ["app", "main"]


def _usage_error(exc: TyperException) -> int:
    """typer's usage errors (unknown option, missing JOB, a value of the wrong type) as one line.

    Standalone typer prints a multi-line box; the promise is one actionable line, which also keeps
    the VS Code extension's error parsing to a single rule.
    """
    if type(exc).__name__ == "NoArgsIsHelpError":  # bare "remote-debug": the help *is* the message
        exc.show()  # type: ignore[attr-defined]
        return 2
    message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
    ctx = getattr(exc, "ctx", None)
    hint = f" (see '{ctx.command_path} -h')" if ctx is not None else ""
    error_line(f"{message}{hint}")
    code = getattr(exc, "exit_code", 2)
    return code if isinstance(code, int) else 2


# what to do about the OSErrors a user can fix on their machine; others (a refused connection, a
# broken pipe) get a plain hint
_FILE_ERROR_HINTS = {
    errno.ENOSPC: "free some space, then retry",
    errno.EDQUOT: "free some space (disk quota), then retry",
    errno.EROFS: "the file system is read-only: use a writable HOME or workspace",
    errno.EACCES: "fix the permissions, then retry",
    errno.EPERM: "fix the permissions, then retry",
}


def main() -> None:
    try:
        result = app(standalone_mode=False)
    except (UserError, ContractError) as exc:
        error_line(str(exc))
        sys.exit(2)
    except TyperException as exc:  # click's UsageError & co.
        sys.exit(_usage_error(exc))
    except OSError as exc:
        # disk full, read-only HOME, permissions: what failed and on which file, nothing else.  A
        # write that fails this way has left the old file in place (atomic writes).
        where = f" ({exc.filename})" if exc.filename else ""
        hint = _FILE_ERROR_HINTS.get(exc.errno or 0, "retry; 'remote-debug doctor' checks the set-up")
        error_line(f"{exc.strerror or exc}{where}: {hint}")
        sys.exit(2)
    except paramiko.SSHException as exc:
        error_line(f"ssh connection to the job failed: {exc}; check the job with 'remote-debug doctor JOB'")
        sys.exit(2)
    except (KeyboardInterrupt, Abort):
        error_line("interrupted")
        sys.exit(130)
    except Exit as exc:
        sys.exit(exc.exit_code)
    sys.exit(result if isinstance(result, int) else 0)
