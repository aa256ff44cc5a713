"""The laptop side's errors are one tree (``remote_debug.laptop.core.errors``) with one mapping at the CLI
boundary (``remote_debug.cli.exit_for``): every error a user can fix ends in one line and exit code 2, a
Ctrl-C in "interrupted" and 130, and the third-party errors (paramiko's, botocore's, the OS's) in the same
one line they always did (issue 30, item 3)."""

from __future__ import annotations

import errno
import importlib
import json
import pkgutil
import subprocess
import sys

import paramiko
import pytest
from botocore.exceptions import ClientError, NoCredentialsError

import remote_debug
from remote_debug.cli import application as app_module
from remote_debug.cli import exit_for, main
from remote_debug.contract.spec import ContractError
from remote_debug.laptop.core import errors
from remote_debug.laptop.core.errors import EXIT_INTERRUPTED, UserError

KINDS = (
    errors.BadInputError,
    errors.NotFoundError,
    errors.JobStateError,
    errors.LocalStateError,
    errors.AwsError,
    errors.ToolError,
    errors.TransportError,
)


def _every_user_error() -> set[type[UserError]]:
    """Every UserError subclass of the laptop side and the CLI, after importing all their modules."""
    for package in ("remote_debug.laptop", "remote_debug.cli"):
        root = importlib.import_module(package)
        for module in pkgutil.walk_packages(root.__path__, f"{package}."):
            if not module.name.endswith("__main__"):
                importlib.import_module(module.name)
    importlib.import_module("remote_debug.sagemaker")
    found: set[type[UserError]] = set()
    todo: list[type[UserError]] = [UserError]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub.__module__.startswith(remote_debug.__name__) and sub not in found:
                found.add(sub)
                todo.append(sub)
    return found


def _instance(cls: type[UserError], message: str) -> UserError:
    # without the class's own __init__: some take keyword facts (AwsAccessError's problem, CommandTimeout's
    # session_usable) that play no part in how the error is printed
    exc = cls.__new__(cls)
    Exception.__init__(exc, message)
    return exc


def _run_main(
    raised: BaseException, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> tuple[int, str]:
    """``remote-debug version`` whose command raises ``raised``: (exit code, stderr)."""

    def command(**_: object) -> object:
        raise raised

    monkeypatch.setattr(app_module, "app", command)
    monkeypatch.setattr(sys, "argv", ["remote-debug", "version"])
    with pytest.raises(SystemExit) as ended:
        main()
    code = ended.value.code
    return (code if isinstance(code, int) else -1), capsys.readouterr().err


def test_every_user_error_is_written_in_the_tree_under_one_of_its_kinds() -> None:
    found = _every_user_error()
    assert set(KINDS) <= found
    doc = errors.__doc__ or ""
    for cls in found:
        assert cls.__module__ == errors.__name__, f"{cls.__name__}: defined outside the tree ({cls.__module__})"
        assert f" {cls.__name__} " in doc, f"{cls.__name__}: missing from the tree drawn in errors.py's docstring"
        if cls not in KINDS:
            assert issubclass(cls, KINDS), f"{cls.__name__}: a UserError of no kind"


def test_every_user_error_ends_the_cli_in_one_line_and_exit_code_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    classes: set[type[UserError]] = {UserError, *_every_user_error()}
    for cls in classes:
        code, err = _run_main(_instance(cls, "what is wrong:\n  what to do"), capsys, monkeypatch)
        assert (code, err.splitlines()) == (2, ["remote-debug: error: what is wrong: what to do"]), cls
    # the names tests and callers import from the modules that raise them still work
    from remote_debug.laptop.aws.ssm_shell import CommandTimeout
    from remote_debug.sagemaker import EnableError

    assert CommandTimeout("slow", session_usable=False).session_usable is False
    assert issubclass(EnableError, errors.BadInputError)


@pytest.mark.parametrize(
    ("raised", "code", "line"),
    [
        (KeyboardInterrupt(), EXIT_INTERRUPTED, "remote-debug: error: interrupted"),
        (
            errors.JobNotRunningError("job j is Stopped:\nnothing to attach to"),
            2,
            "remote-debug: error: job j is Stopped: nothing to attach to",
        ),
        (ContractError("bad job name 'a b'"), 2, "remote-debug: error: bad job name 'a b'"),
        (
            paramiko.SSHException("Error reading SSH protocol banner"),
            2,
            "remote-debug: error: ssh connection to the job failed: Error reading SSH protocol banner; "
            "check the job with 'remote-debug doctor JOB'",
        ),
        (
            paramiko.SSHException(),  # paramiko's bare ones still name what failed
            2,
            "remote-debug: error: ssh connection to the job failed: SSHException; "
            "check the job with 'remote-debug doctor JOB'",
        ),
        (
            OSError(errno.ENOSPC, "No space left on device", "/home/u/.ssh/config"),
            2,
            "remote-debug: error: No space left on device (/home/u/.ssh/config): free some space, then retry",
        ),
        (
            ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"),
            2,
            "remote-debug: error: Connection refused: retry; 'remote-debug doctor' checks the set-up",
        ),
        (
            ClientError({"Error": {"Code": "AccessDeniedException", "Message": "not allowed"}}, "ListTrainingJobs"),
            2,
            "remote-debug: error: asking AWS: access denied (not allowed): run 'remote-debug doctor' to see "
            "missing IAM permissions",
        ),
        (
            NoCredentialsError(),
            2,
            "remote-debug: error: asking AWS: no AWS credentials found: run 'aws configure' or 'aws sso login', "
            "or pass --profile",
        ),
    ],
)
def test_the_boundary_says_each_error_in_one_line_with_its_exit_code(
    raised: BaseException,
    code: int,
    line: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    got_code, err = _run_main(raised, capsys, monkeypatch)
    assert (got_code, err.splitlines()) == (code, [line])


def test_a_bug_keeps_its_traceback(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    def command(**_: object) -> object:
        raise KeyError("a bug")

    monkeypatch.setattr(app_module, "app", command)
    monkeypatch.setattr(sys, "argv", ["remote-debug", "version"])
    with pytest.raises(KeyError):
        main()
    assert exit_for(SystemExit(3)) is None  # sys.exit in a command goes on as raised


def test_the_mapping_imports_neither_paramiko_nor_botocore() -> None:
    # a command that never loaded them (jobs, stacks) must not pay for their import on its way out
    probe = (
        "import json, sys; from remote_debug.cli import exit_for; "
        "outcomes = [exit_for(e) for e in (RuntimeError('bug'), OSError(2, 'gone'))]; "
        "print(json.dumps([outcomes, 'paramiko' in sys.modules, 'botocore' in sys.modules]))"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    outcomes, paramiko_loaded, botocore_loaded = json.loads(proc.stdout)
    assert outcomes == [None, ["gone: retry; 'remote-debug doctor' checks the set-up", 2]]
    assert (paramiko_loaded, botocore_loaded) == (False, False)
