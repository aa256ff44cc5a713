"""Errors the CLI turns into one line on stderr and exit code 2 (bad input, or a state we can't use)."""

from __future__ import annotations

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


class UnknownJobError(UserError):
    pass


class JobNotRunningError(UserError):
    pass


class AwsAccessError(UserError):
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
