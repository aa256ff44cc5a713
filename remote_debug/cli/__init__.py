"""The ``remote-debug`` command line: thin commands that call ``remote_debug.laptop``.

One module per subcommand; every command takes ``--json``; bad input is one line on stderr and
exit code 2 (see :func:`exit_for`, the one mapping from an exception to a line and an exit code).

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

from typer import Abort, Exit, Typer
from typer.exceptions import TyperException

from remote_debug.cli import application as _app_module
from remote_debug.cli.output import error_line
from remote_debug.contract.spec import ContractError
from remote_debug.laptop.aws import clients as aws
from remote_debug.laptop.core.errors import EXIT_INTERRUPTED, EXIT_USER_ERROR, UserError, reason

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
    "logs": "logs",
    "proxy": "proxy",
    "prune": "prune",
    "ranks": "ranks",
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


def __getattr__(name: str) -> Typer:
    # ``from remote_debug.cli import app``: the application with every command
    if name == "app":
        load_commands()
        return _app_module.app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["app", "exit_for", "main"]


def _usage_error(exc: TyperException) -> tuple[str | None, int]:
    """typer's usage errors (unknown option, missing JOB, a value of the wrong type) as one line.

    Standalone typer prints a multi-line box; the promise is one actionable line, which also keeps
    the VS Code extension's error parsing to a single rule.
    """
    if _is_help_request(exc):  # bare "remote-debug": the help *is* the message (main shows it)
        return None, EXIT_USER_ERROR
    message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
    ctx = getattr(exc, "ctx", None)
    hint = f" (see '{ctx.command_path} -h')" if ctx is not None else ""
    code = getattr(exc, "exit_code", EXIT_USER_ERROR)
    return f"{message}{hint}", code if isinstance(code, int) else EXIT_USER_ERROR


def _is_help_request(exc: BaseException) -> bool:
    # by name: typer keeps the class in a private module (typer._click), which may move
    return type(exc).__name__ == "NoArgsIsHelpError"


# what to do about the OSErrors a user can fix on their machine; others (a refused connection, a
# broken pipe) get a plain hint
_FILE_ERROR_HINTS = {
    errno.ENOSPC: "free some space, then retry",
    errno.EDQUOT: "free some space (disk quota), then retry",
    errno.EROFS: "the file system is read-only: use a writable HOME or workspace",
    errno.EACCES: "fix the permissions, then retry",
    errno.EPERM: "fix the permissions, then retry",
}


def _os_error(exc: OSError) -> str:
    # disk full, read-only HOME, permissions: what failed and on which file, nothing else.  A
    # write that fails this way has left the old file in place (atomic writes).
    where = f" ({exc.filename})" if exc.filename else ""
    hint = _FILE_ERROR_HINTS.get(exc.errno or 0, "retry; 'remote-debug doctor' checks the set-up")
    return f"{exc.strerror or exc}{where}: {hint}"


def _raised_by(exc: BaseException, module: str, *names: str) -> bool:
    """Whether ``exc`` is one of the classes ``names`` of ``module``, by class (subclasses too), without
    importing ``module``: a command that never loaded it (paramiko ~0.1 s, boto3 more) cannot have raised
    its errors, and the CLI should not pay for the import on its way out."""
    loaded = sys.modules.get(module)
    classes = tuple(c for c in (getattr(loaded, n, None) for n in names) if isinstance(c, type))
    return bool(classes) and isinstance(exc, classes)


def exit_for(exc: BaseException) -> tuple[str | None, int] | None:
    """The CLI's one mapping from the exception that ended a command to (its line, the exit code).

    The line is printed as ``remote-debug: error: <line>`` on stderr (None: nothing to print).  None
    instead of a pair: not an error the user can fix (a bug), whose traceback is the report.  The
    kinds of errors are those of ``remote_debug.laptop.core.errors``; the rest are the errors of code
    that cannot raise them (the contract, the container's py-spy helper, typer, the OS, paramiko,
    botocore), said in the same one line.
    """
    if isinstance(exc, (KeyboardInterrupt, Abort)):
        return "interrupted", EXIT_INTERRUPTED
    if isinstance(exc, Exit):
        return None, exc.exit_code
    if isinstance(exc, UserError):
        return str(exc), exc.exit_code
    # a bad job name, rank list or manifest; py-spy missing or refused: each message is one actionable line
    if isinstance(exc, ContractError) or _raised_by(exc, "remote_debug.container.node.pyspy", "PyspyError"):
        return str(exc), EXIT_USER_ERROR
    if isinstance(exc, TyperException):  # click's UsageError & co.
        return _usage_error(exc)
    if isinstance(exc, OSError):  # before paramiko's: its NoValidConnectionsError is an OSError
        return _os_error(exc), EXIT_USER_ERROR
    if _raised_by(exc, "paramiko", "SSHException"):
        return (
            f"ssh connection to the job failed: {reason(exc)}; check the job with 'remote-debug doctor JOB'",
            EXIT_USER_ERROR,
        )
    if _raised_by(exc, "botocore.exceptions", "BotoCoreError", "ClientError"):
        # a call no command wrapped with what it was doing: still one line, with the fix for access problems
        return aws.describe_error(exc, "asking AWS"), EXIT_USER_ERROR
    return None


def main() -> None:
    load_commands(sys.argv[1:])
    try:
        result = _app_module.app(standalone_mode=False)
    except BaseException as exc:  # SystemExit and bugs: exit_for gives None, they go on as raised
        outcome = exit_for(exc)
        if outcome is None:
            raise
        line, code = outcome
        if _is_help_request(exc):
            exc.show()  # type: ignore[attr-defined]
        elif line is not None:
            error_line(line)
        sys.exit(code)
    sys.exit(result if isinstance(result, int) else 0)
