"""Profile and region resolution: --profile/--region, AWS_PROFILE, AWS_REGION > AWS_DEFAULT_REGION, profiles."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from remote_debug.laptop.aws import clients as aws
from remote_debug.laptop.core.errors import UserError

AWS_VARS = (
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_PROFILE",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
)


@pytest.fixture(autouse=True)
def clean(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    for name in AWS_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    aws.configure()
    yield tmp_path
    aws.configure()


def _profiles(home: Path) -> None:
    (home / ".aws").mkdir()
    (home / ".aws" / "config").write_text(
        "[default]\nregion = eu-central-1\n\n[profile dev]\nregion = ap-south-1\n\n[profile bare]\noutput = json\n"
    )
    (home / ".aws" / "credentials").write_text(
        "[default]\naws_access_key_id = AKIDEFAULT\naws_secret_access_key = s\n\n"
        "[dev]\naws_access_key_id = AKIDEV\naws_secret_access_key = s\n\n"
        "[bare]\naws_access_key_id = AKIBARE\naws_secret_access_key = s\n"
    )


def test_nothing_configured() -> None:
    assert not aws.configured()
    assert aws.resolve_region() == (None, "")
    with pytest.raises(UserError) as info:
        aws.session()
    assert "AWS_REGION" in str(info.value) and "AWS_DEFAULT_REGION" in str(info.value) and "--region" in str(info.value)


def test_aws_region_is_honoured_although_botocore_ignores_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    assert aws.configured()
    assert aws.resolve_region() == ("eu-west-1", "AWS_REGION")
    client = aws.client("sagemaker")
    assert client.meta.region_name == "eu-west-1"


def test_aws_region_beats_aws_default_region_and_flag_beats_both(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    assert aws.resolve_region()[0] == "eu-west-1"
    aws.configure(region="sa-east-1")
    assert aws.resolve_region() == ("sa-east-1", "--region")
    assert aws.client("ssm").meta.region_name == "sa-east-1"


def test_profile_region_and_precedence(clean: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _profiles(clean)
    assert aws.configured()
    assert aws.resolve_region() == ("eu-central-1", "profile default")
    monkeypatch.setenv("AWS_PROFILE", "dev")
    assert aws.profile() == "dev"
    assert aws.resolve_region() == ("ap-south-1", "profile dev")
    session = aws.session()
    assert session.profile_name == "dev" and session.region_name == "ap-south-1"
    assert session.get_credentials().access_key == "AKIDEV"
    aws.configure(profile="bare")  # --profile beats AWS_PROFILE; this one has no region
    assert aws.profile() == "bare"
    with pytest.raises(UserError, match="no AWS region"):
        aws.session()
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-2")
    assert aws.session().region_name == "us-east-2"


def test_unknown_profile_is_one_line(clean: Path) -> None:
    _profiles(clean)
    aws.configure(profile="nope", region="us-east-1")
    with pytest.raises(UserError, match="AWS profile 'nope' not found"):
        aws.session()


def test_cli_global_options_reach_aws(clean: Path) -> None:
    """`remote-debug --region R --profile P CMD` sets what aws.py resolves, in a fresh process."""
    code = (
        "import sys; from remote_debug.cli.application import app; from remote_debug.laptop.aws import clients as aws\n"
        "from remote_debug.cli import doctor\n"
        "@app.command('probe')\n"
        "def probe() -> None:\n"
        "    print(aws.settings().profile, aws.resolve_region()[0], aws.resolve_region()[1])\n"
        "app(['--profile', 'dev', '--region', 'eu-north-1', 'probe'])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["dev", "eu-north-1", "--region"], out.stderr


def test_configured_check_imports_no_boto3(clean: Path) -> None:
    """Local-only use must not pay for boto3: `jobs` and the local proxy never import it."""
    code = (
        "import sys; from remote_debug.laptop.aws import clients as aws\n"
        "from remote_debug.laptop.platforms import all_backends\n"
        "print(aws.configured(), len(all_backends()), 'boto3' in sys.modules, 'botocore' in sys.modules)\n"
    )
    env = {"HOME": str(clean), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert out.stdout.split() == ["False", "1", "False", "False"], out.stderr
