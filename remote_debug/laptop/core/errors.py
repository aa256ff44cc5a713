"""The laptop side's errors, written out once: what the user can fix, by kind.

Every error a user can act on is a :class:`UserError`: its message is one actionable line (what is
wrong, and what to do), and the CLI prints it as ``remote-debug: error: <message>`` on stderr and
exits with its ``exit_code`` (2 for every kind: the VS Code extension and scripts tell "you can fix
this" from a crash, exit 1 with a traceback, by that code alone).  The CLI's one mapping from any
exception to (line, exit code) is ``remote_debug.cli.exit_for``.

The tree (module: where a class is defined when not here)::

    UserError                    exit 2; one line
    +-- BadInputError            an argument, an option or an enable() request that cannot be used as given
    |   +-- EnableError          enable() refuses the request (public: remote_debug.sagemaker.EnableError)
    +-- NotFoundError            what the user named does not exist
    |   +-- UnknownJobError      no backend knows the job
    +-- JobStateError            the job exists, in a state the command cannot use
    |   +-- JobNotRunningError   not (or no longer) running: nothing to attach, sync or read
    |   +-- JobEndedError        the ssh alias names a job that is over (the ProxyCommand's refusal)
    |   +-- NotUpdatableError    ``enable`` cannot turn debugging on in the running job
    |   +-- CannotTell           no backend can say whether the job has ended (prune)
    +-- LocalStateError          something on this machine remote-debug must not or cannot use as it is
    |   +-- UnsafeStateDir       a state folder another user controls
    |   +-- LockTimeout          another remote-debug held a lock for the whole timeout
    |   +-- AttachRefusedError   another IDE attach to the job runs
    |   +-- LaunchJsonError      launch.json cannot be edited safely
    |   +-- SshConfigError       the ssh config cannot be written
    +-- AwsError                 AWS could not be asked, or refused
    |   +-- AwsAccessError       no credentials, region or profile (``jobs --json`` lists it as a problem)
    |   +-- DocumentRefused      SSM refused AWS-StartSSHSession (the port-forwarding document may do)
    +-- ToolError                a program this needs is missing or broken on this machine
    |   +-- PluginError          the session-manager-plugin
    +-- TransportError           reaching the job failed
        +-- ShellError           an SSM shell session could not start, or a command on it failed
        |   +-- CommandTimeout   a command on it outlived its timeout
        +-- HostKeyMismatchError a node's host key is not the one its manifest pinned

Raise the most specific kind; a plain ``UserError`` still works (it is the kind "other").  Where an
error from elsewhere (botocore, an OSError) is caught to add what only the caller knows ("stopping job
X"), raise the tree's kind with that context.  Errors that are not the user's to fix (internal signals
such as ``DapError``, a bug) are not in the tree: the CLI lets them end in a traceback.

Errors from the wings that cannot import this one (``contract``, ``container``, ``emulator``) and whose
message is already one actionable line (``ContractError``, py-spy's, the emulator's) are mapped at the CLI
boundary, as are the third-party errors (typer's usage errors, OSError, paramiko's, botocore's) and Ctrl-C
(exit code :data:`EXIT_INTERRUPTED`).
"""

from __future__ import annotations

from typing import ClassVar

EXIT_USER_ERROR = 2  # the exit code of every UserError (and of a usage error)
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports a SIGINT: a script running remote-debug stops too

# What an exception whose message is empty means, in words: paramiko raises a bare EOFError() when the
# SSH connection ends, sockets and our proxy a bare TimeoutError(); "cannot reach X: " told nothing.
_NO_MESSAGE = {
    TimeoutError: "timed out",
    EOFError: "connection closed",
    ConnectionResetError: "connection reset",
    BrokenPipeError: "connection closed",
    ConnectionAbortedError: "connection aborted",
}


def reason(exc: BaseException) -> str:
    """``exc`` as one line for a warning or an error: its message (whitespace folded), or, when that is
    empty, what its type means ("timed out", "connection closed") or the type's name."""
    text = " ".join(str(exc).split())
    if text:
        return text
    for kind, words in _NO_MESSAGE.items():
        if isinstance(exc, kind):
            return f"{words} ({type(exc).__name__})"
    return type(exc).__name__


class UserError(Exception):
    """Something the user can fix: the message is one actionable line."""

    exit_code: ClassVar[int] = EXIT_USER_ERROR


# --- the kinds -----------------------------------------------------------------------------------


class BadInputError(UserError):
    """An argument, an option or a request that cannot be used as given."""


class NotFoundError(UserError):
    """What the user named does not exist."""


class JobStateError(UserError):
    """The job exists, in a state the command cannot use."""


class LocalStateError(UserError):
    """Something on this machine that remote-debug must not or cannot use as it is."""


class AwsError(UserError):
    """AWS could not be asked, or refused."""


class ToolError(UserError):
    """A program this needs is missing or broken on this machine."""


class TransportError(UserError):
    """Reaching the job failed (ssh, an SSM session)."""


# --- the errors, by kind -----------------------------------------------------------------------


class EnableError(BadInputError):
    """A job that cannot be made debuggable as asked (one actionable line)."""


class UnknownJobError(NotFoundError):
    pass


class JobNotRunningError(JobStateError):
    pass


class JobEndedError(JobStateError):
    """The alias names a job that is over: there is no sshd left to reach."""


class NotUpdatableError(JobStateError):
    pass


class CannotTell(JobStateError):
    """No backend can say whether the job has ended (not a local job; AWS not configured)."""


class UnsafeStateDir(LocalStateError):
    """A state folder that another user controls (owner, symlink, a replaceable parent): one line."""


class LockTimeout(LocalStateError):
    """Another process held the lock for the whole timeout (one line: what and how to go on)."""


class AttachRefusedError(LocalStateError):
    """Another IDE attach to the job runs; the message names it."""


class LaunchJsonError(LocalStateError):
    """launch.json exists but cannot be edited safely (message: path and what is wrong, one line)."""


class SshConfigError(LocalStateError):
    """The ssh config could not be written (full disk, read-only HOME); the message is one line."""


class AwsAccessError(AwsError):
    """AWS could not be asked: ``problem`` says why in one word, ``fix`` is a command line that mends it
    (or None), so that a listing can show it next to what it did list (``jobs --json``, the extension)."""

    def __init__(
        self,
        message: str,
        *,
        problem: str,
        fix: str | None = None,
        profile: str | None = None,
        region: str | None = None,
    ) -> None:
        super().__init__(message)
        self.problem, self.fix, self.profile, self.region = problem, fix, profile, region


class DocumentRefused(AwsError):
    """SSM refused ``AWS-StartSSHSession`` for the target: the port-forwarding document may do (ssm_forward.py)."""


class PluginError(ToolError):
    pass


class ShellError(TransportError):
    """A shell session could not start, or a command on it failed to complete."""


class CommandTimeout(ShellError):
    """A command outlived its timeout; ``session_usable`` says whether the session survived the interrupt."""

    def __init__(self, message: str, *, session_usable: bool) -> None:
        super().__init__(message)
        self.session_usable = session_usable


class HostKeyMismatchError(TransportError):
    pass
