"""Errors the CLI turns into one line on stderr and exit code 2 (bad input, or a state we can't use)."""

from __future__ import annotations


class UserError(Exception):
    """Something the user can fix: the message is one actionable line."""


class UnknownJobError(UserError):
    pass


class JobNotRunningError(UserError):
    pass
