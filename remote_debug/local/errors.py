"""Errors the CLI turns into one line on stderr and exit code 2 (bad input, or a state we can't use)."""

from __future__ import annotations


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
        self, message: str, *, problem: str, fix: str | None = None, profile: str | None = None,
        region: str | None = None,
    ) -> None:
        super().__init__(message)
        self.problem, self.fix, self.profile, self.region = problem, fix, profile, region
