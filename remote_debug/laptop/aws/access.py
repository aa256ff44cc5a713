"""Why AWS could not be asked, as a kind a program can branch on and a fix a person can run.

``remote-debug jobs --json`` reports a backend it could not list with these (the VS Code extension shows a
warning with the fix instead of an empty list that reads "no jobs yet").  The kinds:

* ``no-credentials``: nothing to sign with (no keys, no profile with credentials);
* ``sso-expired``: an IAM Identity Center (SSO) profile whose token is missing or expired, or credentials
  that expired: ``aws sso login --profile P`` for an SSO profile;
* ``profile-not-found``: AWS_PROFILE / --profile names a profile that is in neither config file;
* ``no-region``; ``access-denied`` (IAM); ``unreachable`` (network, proxy, endpoint); ``error``: the rest.
"""

from __future__ import annotations

import shlex

from remote_debug.laptop.aws import clients as aws
from remote_debug.laptop.core.errors import AwsAccessError

PROBLEMS = (
    "no-credentials",
    "sso-expired",
    "profile-not-found",
    "no-region",
    "access-denied",
    "unreachable",
    "error",
)
# aws.error_kind's words that are not a problem's own (the others are; "expired" depends on the profile)
_PROBLEM_OF_KIND = {
    "partial-credentials": "no-credentials",
    "broken-config": "no-credentials",  # the profile cannot give credentials as written: set it up again
    "sso": "sso-expired",
    "other": "error",
}


def is_sso_profile(profile_name: str | None) -> bool:
    """Whether the profile signs in through IAM Identity Center (``sso_session`` or the legacy
    ``sso_start_url``); reads the config files only."""
    try:
        import botocore.session

        scoped = botocore.session.Session(profile=profile_name).get_scoped_config()
    except Exception:  # a missing or broken profile: not one we can say more about
        return False
    return bool(scoped.get("sso_session") or scoped.get("sso_start_url"))


def problem_and_fix(kind: str, profile_name: str | None, sso: bool) -> tuple[str, str | None]:
    """The problem for an :func:`aws.error_kind` met with ``profile_name`` (``sso``: an IAM Identity Center
    profile), and a command line that mends it when one command does."""
    named = f" --profile {shlex.quote(profile_name)}" if profile_name else ""
    expired = "sso-expired" if sso else "no-credentials"  # an SSO profile logs in again; others need new keys
    problem = expired if kind == "expired" else _PROBLEM_OF_KIND.get(kind, kind)
    if kind == "broken-config":
        return problem, f"aws configure{' sso' if sso else ''}{named}"
    if problem == "sso-expired" or (problem == "no-credentials" and sso):
        return problem, f"aws sso login{named}"
    if problem == "no-credentials":
        return problem, f"aws configure{named}"
    if problem == "profile-not-found":
        return problem, "aws configure list-profiles"
    if problem == "access-denied":
        return problem, "remote-debug doctor --aws"
    return problem, None


def access_error(exc: BaseException, what: str) -> AwsAccessError:
    """``exc`` (botocore's, or a UserError of ours) while doing ``what``, with its kind and fix."""
    if isinstance(exc, AwsAccessError):
        return exc
    profile_name = aws.profile()
    botocore_error = aws.is_error(exc)
    kind = aws.error_kind(exc) if botocore_error else "other"
    problem, fix = problem_and_fix(kind, profile_name, is_sso_profile(profile_name))
    message = aws.describe_error(exc, what) if botocore_error else f"{what}: {exc}"
    region = aws.settings().region or aws.resolve_region(profile_name)[0]
    return AwsAccessError(message, problem=problem, fix=fix, profile=profile_name, region=region)
