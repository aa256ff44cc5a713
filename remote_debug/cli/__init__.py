"""The ``remote-debug`` command line: thin commands that call ``remote_debug.laptop``.

One module per subcommand; every command takes ``--json``; bad input is one line on stderr and
exit code 2 (see :func:`main`).

A command registers on ``app`` when its module is imported.  :func:`main` imports only the module of
the command on its command line (all of them for ``--help``, or for a name it does not know, so typer
lists them all): importing every command costs ~0.3 s, and ``stacks`` or ``jobs`` should not pay for
``attach``'s json5 and paramiko's.  ``from remote_debug.cli import app`` (tests, in-process callers)
still gets every command.
"""

from __future__ import annotations

import errno
import importlib
import sys
from collections.abc import Sequence

from typer import Abort, Exit
from typer.exceptions import TyperException

from remote_debug.cli import application as _app_module
from remote_debug.cli.output import error_line
from remote_debug.contract.spec import ContractError
from remote_debug.laptop.core.errors import UserError

# command name -> the module of remote_debug.cli that registers it, in the order --help lists them
COMMAND_MODULES: dict[str, str] = {
    "adopt": "adopt",
    "attach": "attach",
    "cleanup": "cleanup",
    "demo": "demo",
    "doctor": "doctor",
    "emulator": "emulator",
    "enable": "enable",
    "jobs": "jobs",
    "launch": "launch",
    "proxy": "proxy",
    "prune": "prune",
    "run": "run",
    "release": "run",
    "ssh": "ssh",
    "ssh-config": "ssh_config",
    "stacks": "stacks",
    "stop": "stop",
    "sync": "sync",
    "version": "version",
}
# the options of ``remote-debug`` itself (``global_options``) that take a value
_GLOBAL_VALUE_OPTIONS = ("--profile", "--region")


def invoked_command(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` (without the program name) names, None when it names none (``--help``)."""
    args = iter(argv)
    for arg in args:
        if arg in _GLOBAL_VALUE_OPTIONS:
            next(args, None)
        elif not arg.startswith("-"):
            return arg
    return None


def load_commands(argv: Sequence[str] | None = None) -> None:
    """Register the command ``argv`` names, or every command (``argv`` None, or no known command)."""
    name = None if argv is None else invoked_command(argv)
    modules = [COMMAND_MODULES[name]] if name in COMMAND_MODULES else list(dict.fromkeys(COMMAND_MODULES.values()))
    for module in modules:
        importlib.import_module(f"remote_debug.cli.{module}")


def __getattr__(name: str) -> object:
    # ``from remote_debug.cli import app``: the application with every command
    if name == "app":
        load_commands()
        return _app_module.app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
    load_commands(sys.argv[1:])
    try:
        result = _app_module.app(standalone_mode=False)
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
    except (KeyboardInterrupt, Abort):
        error_line("interrupted")
        sys.exit(130)
    except Exit as exc:
        sys.exit(exc.exit_code)
    except Exception as exc:  # last: typer's Abort and Exit are Exceptions too
        if not _is_ssh_error(exc):
            raise
        error_line(f"ssh connection to the job failed: {exc}; check the job with 'remote-debug doctor JOB'")
        sys.exit(2)
    sys.exit(result if isinstance(result, int) else 0)


def _is_ssh_error(exc: BaseException) -> bool:
    """A paramiko SSHException, without importing paramiko (~0.1 s) for commands that never load it."""
    paramiko = sys.modules.get("paramiko")
    return paramiko is not None and isinstance(exc, paramiko.SSHException)
