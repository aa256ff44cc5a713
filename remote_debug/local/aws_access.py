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

from remote_debug.local import aws
from remote_debug.local.errors import AwsAccessError, UserError

PROBLEMS = (
    "no-credentials", "sso-expired", "profile-not-found", "no-region", "access-denied", "unreachable", "error",
)
_EXPIRED_CODES = ("ExpiredToken", "ExpiredTokenException", "RequestExpired")


def problem_of(exc: BaseException, profile_name: str | None = None) -> str:
    """The kind of a botocore error (or of our own AwsAccessError) met with ``profile_name``."""
    if isinstance(exc, AwsAccessError):
        return exc.problem
    from botocore.exceptions import (
        ClientError,
        EndpointConnectionError,
        NoCredentialsError,
        NoRegionError,
        PartialCredentialsError,
        ProfileNotFound,
        SSOError,
        TokenRetrievalError,
    )

    if isinstance(exc, (SSOError, TokenRetrievalError)):  # SSOTokenLoadError, UnauthorizedSSOTokenError too
        return "sso-expired"
    if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
        return "no-credentials"
    if isinstance(exc, ProfileNotFound):
        return "profile-not-found"
    if isinstance(exc, NoRegionError):
        return "no-region"
    if isinstance(exc, EndpointConnectionError):
        return "unreachable"
    if isinstance(exc, ClientError):
        code = aws.error_code(exc)
        if code in _EXPIRED_CODES:  # an SSO profile logs in again; other credentials need new keys
            return "sso-expired" if is_sso_profile(profile_name) else "no-credentials"
        if "AccessDenied" in code or code in ("UnauthorizedOperation", "UnrecognizedClientException"):
            return "access-denied"
    return "error"


def is_sso_profile(profile_name: str | None) -> bool:
    """Whether the profile signs in through IAM Identity Center (``sso_session`` or the legacy
    ``sso_start_url``); reads the config files only."""
    try:
        import botocore.session

        scoped = botocore.session.Session(profile=profile_name).get_scoped_config()
    except Exception:  # a missing or broken profile: not one we can say more about
        return False
    return bool(scoped.get("sso_session") or scoped.get("sso_start_url"))


def fix_for(problem: str, profile_name: str | None) -> str | None:
    """A command line that mends ``problem`` for ``profile_name``, when one command does."""
    named = f" --profile {shlex.quote(profile_name)}" if profile_name else ""
    sso = is_sso_profile(profile_name)
    if problem == "sso-expired" or (problem == "no-credentials" and sso):
        return f"aws sso login{named}"
    if problem == "no-credentials":
        return f"aws configure{named}"
    if problem == "profile-not-found":
        return "aws configure list-profiles"
    if problem == "access-denied":
        return "remote-debug doctor --aws"
    return None


def access_error(exc: BaseException, what: str) -> AwsAccessError:
    """``exc`` (botocore's, or a UserError of ours) while doing ``what``, with its kind and fix."""
    if isinstance(exc, AwsAccessError):
        return exc
    profile_name = aws.profile()
    problem = problem_of(exc, profile_name) if aws.is_error(exc) else "error"
    message = aws.describe_error(exc, what) if aws.is_error(exc) else f"{what}: {exc}"
    region = aws.settings().region or aws.resolve_region(profile_name)[0]
    fix = fix_for(problem, profile_name)
    if _is_broken_config(exc):  # a profile that cannot give credentials as written: set it up again
        named = f" --profile {shlex.quote(profile_name)}" if profile_name else ""
        problem, fix = "no-credentials", f"aws configure{' sso' if is_sso_profile(profile_name) else ''}{named}"
    return AwsAccessError(message, problem=problem, fix=fix, profile=profile_name, region=region)


def _is_broken_config(exc: BaseException) -> bool:
    from botocore.exceptions import InvalidConfigError

    return isinstance(exc, InvalidConfigError)


def describe_unlisted(backend: str, exc: UserError) -> dict[str, str | None]:
    """What ``jobs --json`` prints on stderr for a backend it could not list (one JSON object a line)."""
    error = exc if isinstance(exc, AwsAccessError) else None
    return {
        "unlisted": backend,
        "problem": error.problem if error else "error",
        "message": " ".join(str(exc).split()),
        "fix": error.fix if error else None,
        "profile": error.profile if error else aws.profile(),
        "region": error.region if error else aws.settings().region,
    }
