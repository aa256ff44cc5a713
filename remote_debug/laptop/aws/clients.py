"""AWS profile, region and clients for the laptop side, resolved in one place.

Precedence, as the AWS CLI v2 has it: ``--profile`` / ``--region`` (the global CLI options, see
``cli/application.py``), then ``AWS_PROFILE`` and ``AWS_REGION`` > ``AWS_DEFAULT_REGION``, then the
profile's ``region`` in ``~/.aws/config``.  The region is always passed to boto3 explicitly: the
botocore here ignores ``AWS_REGION`` (only ``AWS_DEFAULT_REGION`` and profiles), while users and
every other SDK set ``AWS_REGION``.

boto3 is imported lazily: local-only use (``jobs``, ``attach`` of a local job, the proxy of a
local node) must not pay for it, nor for a credential lookup that may probe the instance metadata
service.  :func:`configured` answers "is AWS set up at all?" from the environment and the
presence of config files alone.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from remote_debug.contract.spec import Transport, check_job_name
from remote_debug.laptop.core.errors import AwsAccessError, AwsError

if TYPE_CHECKING:
    import boto3

REGION_VARS = ("AWS_REGION", "AWS_DEFAULT_REGION")
NO_REGION = (
    "no AWS region: pass --region REGION, or set AWS_REGION or AWS_DEFAULT_REGION (or 'region' in your AWS profile)"
)
# --- the tags enable() writes on a training job and the SageMaker backend reads ---------------------
TAG_PREFIX = "remote-debug:"
TAG_OWNER = TAG_PREFIX + "owner"
TAG_ENABLED = TAG_PREFIX + "enabled"
TAG_TRANSPORT = TAG_PREFIX + "transport"  # picks the job's transport (else the spec's, else ssm)
TAG_ACTIVATION = TAG_PREFIX + "ssm-activation"  # hybrid: the activation's id (not a secret; the code is)
TAG_BASTION = TAG_PREFIX + "bastion"  # direct: [user@]host[:port] of the jump host
# how a SageMaker job can be reached ("local" is for jobs on this machine)
SAGEMAKER_TRANSPORTS = (Transport.SSM, Transport.HYBRID, Transport.DIRECT)

TRAINING_JOB_ARN_RE = re.compile(r"^arn:aws[a-z-]*:sagemaker:([a-z0-9-]+):\d{12}:training-job/(.+)$")
# Retries for throttling (FilterLogEvents allows a few calls per second per account) and short
# timeouts: a ProxyCommand that hangs leaves the IDE hanging with it.
CLIENT_CONFIG: dict[str, Any] = {
    "retries": {"mode": "standard", "max_attempts": 5},
    "connect_timeout": 10,
    "read_timeout": 30,
}


@dataclass(frozen=True)
class Settings:
    profile: str | None = None
    region: str | None = None


_settings = Settings()
_lock = threading.Lock()
_sessions: dict[tuple[str | None, str], boto3.Session] = {}


def configure(profile: str | None = None, region: str | None = None) -> None:
    """Set the explicit choices (the CLI's global ``--profile`` / ``--region``)."""
    global _settings
    with _lock:
        _settings = Settings(profile or None, region or None)
        _sessions.clear()


def parse_training_job(job_or_arn: str) -> tuple[str, str | None]:
    """A training-job name or ARN -> (its name, the ARN's region or None); ContractError for a bad name."""
    match = TRAINING_JOB_ARN_RE.fullmatch(job_or_arn.strip())
    name, region = (match.group(2), match.group(1)) if match else (job_or_arn.strip(), None)
    return check_job_name(name), region


def settings() -> Settings:
    return _settings


def profile() -> str | None:
    return _settings.profile or os.environ.get("AWS_PROFILE") or None


def resolve_region(profile_name: str | None = None) -> tuple[str | None, str]:
    """(region, where it came from) without any network call; (None, "") when there is none."""
    if _settings.region:
        return _settings.region, "--region"
    for var in REGION_VARS:
        value = os.environ.get(var, "").strip()
        if value:
            return value, var
    if not _config_files_exist():
        return None, ""
    import botocore.session

    try:
        session = botocore.session.Session(profile=profile_name or profile())
        region = session.get_config_variable("region")
    except Exception:  # a broken or missing profile: session() reports it properly
        return None, ""
    return (str(region), f"profile {profile_name or profile() or 'default'}") if region else (None, "")


def _config_files_exist() -> bool:
    home = Path.home() / ".aws"
    config = Path(os.environ.get("AWS_CONFIG_FILE") or home / "config")
    credentials = Path(os.environ.get("AWS_SHARED_CREDENTIALS_FILE") or home / "credentials")
    return config.is_file() or credentials.is_file()


def configured() -> bool:
    """Whether AWS is set up enough to be worth asking about a job (no network, no boto3 import)."""
    if _settings.profile or _settings.region:
        return True
    if any(os.environ.get(v) for v in (*REGION_VARS, "AWS_PROFILE", "AWS_ACCESS_KEY_ID")):
        return True
    return _config_files_exist()


def session(profile_name: str | None = None, region: str | None = None) -> boto3.Session:
    """A boto3 session for the resolved (or given) profile and region; UserError when there is none."""
    profile_name = profile_name or profile()
    if profile_name and not _profile_exists(profile_name):
        raise AwsAccessError(
            f"AWS profile {profile_name!r} not found in ~/.aws/config or ~/.aws/credentials: "
            "check --profile / AWS_PROFILE (aws configure list-profiles)",
            problem="profile-not-found",
            fix="aws configure list-profiles",
            profile=profile_name,
        )
    if not region:
        region, _source = resolve_region(profile_name)
    if not region:
        raise AwsAccessError(NO_REGION, problem="no-region", profile=profile_name)
    key = (profile_name, region)
    with _lock:
        cached = _sessions.get(key)
        if cached is not None:
            return cached
    import boto3
    from botocore.exceptions import ProfileNotFound

    try:
        made = boto3.Session(profile_name=profile_name, region_name=region)
    except ProfileNotFound:
        raise AwsError(
            f"AWS profile {profile_name!r} not found in ~/.aws/config or ~/.aws/credentials: "
            "check --profile / AWS_PROFILE (aws configure list-profiles)"
        ) from None
    with _lock:
        _sessions[key] = made
    return made


def _profile_exists(profile_name: str) -> bool:
    """Whether a config file names the profile (else botocore's region lookup just finds no region)."""
    import botocore.session

    try:
        return profile_name in botocore.session.Session().available_profiles
    except Exception:  # an unreadable config file: let boto3 say what is wrong with it
        return True


def client(service: str, *, profile_name: str | None = None, region: str | None = None) -> Any:
    from botocore.config import Config

    return session(profile_name, region).client(service, config=Config(**CLIENT_CONFIG))


def error_kind(exc: BaseException) -> str:
    """What a botocore error says about access, in one word: ``no-credentials``, ``partial-credentials``,
    ``sso`` (token missing or expired), ``expired`` (the service said the credentials expired),
    ``profile-not-found``, ``broken-config``, ``no-region``, ``unreachable``, ``access-denied``, or ``other``.
    The one classification :func:`describe_error` and ``aws_access`` (``jobs --json``'s problems) share."""
    from botocore.exceptions import (
        ClientError,
        EndpointConnectionError,
        InvalidConfigError,
        NoCredentialsError,
        NoRegionError,
        PartialCredentialsError,
        ProfileNotFound,
        SSOError,
        TokenRetrievalError,
    )

    kinds: tuple[tuple[type[BaseException] | tuple[type[BaseException], ...], str], ...] = (
        (NoCredentialsError, "no-credentials"),
        (PartialCredentialsError, "partial-credentials"),
        ((TokenRetrievalError, SSOError), "sso"),  # SSOTokenLoadError: never logged in
        (ProfileNotFound, "profile-not-found"),
        (InvalidConfigError, "broken-config"),  # e.g. an sso-session without sso_region
        (NoRegionError, "no-region"),
        (EndpointConnectionError, "unreachable"),
    )
    for types, kind in kinds:
        if isinstance(exc, types):
            return kind
    if isinstance(exc, ClientError):
        code = error_code(exc)
        if code in ("ExpiredToken", "ExpiredTokenException", "RequestExpired"):
            return "expired"
        if "AccessDenied" in code or code in ("UnauthorizedOperation", "UnrecognizedClientException"):
            return "access-denied"
    return "other"


def describe_error(exc: BaseException, what: str) -> str:
    """One actionable line for a botocore error raised while doing ``what``."""
    kind = error_kind(exc)
    if kind == "no-credentials":
        return f"{what}: no AWS credentials found: run 'aws configure' or 'aws sso login', or pass --profile"
    if kind == "sso":
        named = f" --profile {profile()}" if profile() else ""
        return f"{what}: the AWS SSO session has expired or was never started: run 'aws sso login{named}'"
    if kind == "no-region":
        return f"{what}: {NO_REGION}"
    if kind == "unreachable":
        return f"{what}: cannot reach AWS ({exc}): check the network, a proxy, or the region"
    if kind == "expired":
        return f"{what}: the AWS credentials have expired: refresh them (aws sso login / new keys)"
    response = getattr(exc, "response", None)
    if isinstance(response, dict):  # a ClientError: the service's own code and message
        error = response.get("Error", {})
        code, message = str(error.get("Code", "")), " ".join(str(error.get("Message", "")).split())
        if kind == "access-denied":
            return f"{what}: access denied ({message}): run 'remote-debug doctor' to see missing IAM permissions"
        return f"{what}: {code}: {message}"
    return f"{what}: {type(exc).__name__}: {' '.join(str(exc).split())}"


def is_error(exc: BaseException) -> bool:
    """Whether ``exc`` comes from botocore (so :func:`describe_error` has something to say)."""
    return type(exc).__module__.startswith("botocore")


def error_code(exc: BaseException) -> str:
    response = getattr(exc, "response", None)
    return str(response.get("Error", {}).get("Code", "")) if isinstance(response, dict) else ""
