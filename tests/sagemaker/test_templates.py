"""templates/: IAM policies that IAM would accept, with real action names; Dockerfile snippet; launchers."""

from __future__ import annotations

import json
import os
import py_compile
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import botocore.session
import pytest

from remote_debug import DISTRIBUTION

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
POLICIES = sorted((TEMPLATES / "iam").glob("*.json"))

# IAM service prefix -> botocore service name (the operation names are the API action names).
SERVICES = {"sagemaker": "sagemaker", "ssm": "ssm", "logs": "logs", "iam": "iam", "sts": "sts", "s3": "s3"}
# Actions that are permissions without an API operation of the same name, as AWS documents them
# (iam:PassRole; the SSM agent's message channels, an API botocore does not model).
PERMISSION_ONLY = {
    "iam:PassRole",
    "ssmmessages:CreateControlChannel",
    "ssmmessages:CreateDataChannel",
    "ssmmessages:OpenControlChannel",
    "ssmmessages:OpenDataChannel",
}
CONDITION_OPERATORS = {
    "StringEquals",
    "StringEqualsIfExists",
    "StringLike",
    "Null",
    "Bool",
    "BoolIfExists",
    "ArnLike",
    "ArnEquals",
}
_SESSION = botocore.session.get_session()


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _actions(policy: dict[str, Any]) -> list[str]:
    return [a for statement in policy["Statement"] for a in _list(statement["Action"])]


def test_there_are_policies_for_the_user_and_the_execution_role() -> None:
    names = {p.name for p in POLICIES}
    assert {"user-policy.json", "execution-role-policy.json"} <= names


@pytest.mark.parametrize("path", POLICIES, ids=[p.name for p in POLICIES])
def test_policy_is_well_formed(path: Path) -> None:
    policy = json.loads(path.read_text())
    assert set(policy) == {"Version", "Statement"} and policy["Version"] == "2012-10-17"
    sids = [s["Sid"] for s in policy["Statement"]]
    assert len(sids) == len(set(sids)) and all(re.fullmatch(r"[A-Za-z0-9]+", s) for s in sids)
    for statement in policy["Statement"]:
        assert statement["Effect"] == "Allow"
        trust = "Principal" in statement
        assert set(statement) <= {"Sid", "Effect", "Action", "Resource", "Condition", "Principal"}
        assert ("Resource" in statement) != trust  # identity policies name resources; trust policies principals
        for resource in _list(statement.get("Resource", [])):
            assert resource == "*" or resource.startswith("arn:aws:"), resource
        for operator, keys in statement.get("Condition", {}).items():
            assert operator in CONDITION_OPERATORS, operator
            assert all(isinstance(v, str) for value in keys.values() for v in _list(value))
        assert "*" not in "".join(_list(statement["Action"])), "no wildcard actions"


@pytest.mark.parametrize("path", POLICIES, ids=[p.name for p in POLICIES])
def test_actions_are_real(path: Path) -> None:
    available = set(_SESSION.get_available_services())
    for action in _actions(json.loads(path.read_text())):
        prefix, _, name = action.partition(":")
        if action in PERMISSION_ONLY:
            # Checked as far as botocore can: iam:PassRole is indeed no IAM operation, and ssmmessages
            # has no model at all (if one appears, this fails and its actions get checked for real).
            if prefix in available:
                assert name not in _SESSION.get_service_model(SERVICES[prefix]).operation_names, action
            else:
                assert prefix == "ssmmessages", action
            continue
        operations = _SESSION.get_service_model(SERVICES[prefix]).operation_names
        assert name in operations, f"{action} is not an operation of {prefix}"


def test_user_policy_scopes_what_the_issue_asks() -> None:
    policy = json.loads((TEMPLATES / "iam" / "user-policy.json").read_text())
    by_sid = {s["Sid"]: s for s in policy["Statement"]}
    sessions = by_sid["SshSessionsToTrainingContainersOnly"]
    assert sessions["Condition"] == {
        "StringLike": {"ssm:resourceTag/aws:ssmmessages:target-id": "sagemaker-training-job:*"}
    }
    own = by_sid["EnableAndStopOwnJobsOnly"]
    assert set(own["Action"]) == {"sagemaker:UpdateTrainingJob", "sagemaker:StopTrainingJob"}
    assert own["Condition"] == {"StringEquals": {"aws:ResourceTag/remote-debug:owner": "${aws:userid}"}}
    assert_own_sessions_only(by_sid["EndAndResumeOwnSessionsOnly"])
    assert {"sagemaker:DescribeTrainingJob", "ssm:StartSession"} <= set(_actions(policy))
    # tags: the caller as owner of a new job or of one nobody owns (adopt JOB), and never a new owner for one's own
    claim = by_sid["TagNewAndUnownedJobsWithTheCaller"]
    assert claim["Condition"] == {
        "StringEquals": {"aws:RequestTag/remote-debug:owner": "${aws:userid}"},
        "Null": {"aws:ResourceTag/remote-debug:owner": "true"},
    }
    assert by_sid["TagOwnJobsWithoutChangingTheOwner"]["Condition"] == {
        "StringEquals": {"aws:ResourceTag/remote-debug:owner": "${aws:userid}"},
        "StringEqualsIfExists": {"aws:RequestTag/remote-debug:owner": "${aws:userid}"},
    }
    # what doctor calls: the role behind an assumed-role session, the hybrid instance tier
    assert by_sid["DoctorFindsTheRoleBehindAnAssumedRoleSession"]["Action"] == "iam:GetRole"
    assert by_sid["DoctorReadsTheManagedInstanceTier"]["Resource"] == ACTIVATION_TIER
    role = json.loads((TEMPLATES / "iam" / "execution-role-policy.json").read_text())
    assert sorted(_actions(role)) == sorted(a for a in PERMISSION_ONLY if a.startswith("ssmmessages:"))


SNIPPET = TEMPLATES / "byoc" / "Dockerfile.snippet"
# pip options that take a value (the value is not a requirement)
_PIP_VALUE_OPTIONS = {
    "-r",
    "--requirement",
    "-c",
    "--constraint",
    "-i",
    "--index-url",
    "--extra-index-url",
    "-f",
    "--find-links",
    "-t",
    "--target",
    "--prefix",
    "--root",
    "--platform",
    "--python-version",
    "--implementation",
    "--abi",
}


def dockerfile(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile: comments dropped, continuation lines joined."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue  # (Docker also drops comment lines inside a continued instruction)
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        instruction, _, arguments = (pending + stripped).partition(" ")
        out.append((instruction.upper(), arguments.strip()))
        pending = ""
    return out


def pip_installs(run: str) -> list[list[str]]:
    """The arguments after ``install`` of each pip install in a RUN line's shell commands."""
    installs = []
    for command in re.split(r"&&|\|\||;", run):
        words = shlex.split(command)
        for i, word in enumerate(words[:-1]):
            if re.fullmatch(r"(.*/)?pip3?", word) and words[i + 1] == "install":  # also `python -m pip install`
                installs.append(words[i + 2 :])
    return installs


def requirements(arguments: list[str]) -> tuple[list[str], list[str]]:
    """(project names asked of an index, local paths) among pip install's arguments."""
    names, paths = [], []
    skip = False
    for word in arguments:
        if skip:
            skip = False
        elif word.startswith("-"):
            skip = word in _PIP_VALUE_OPTIONS
        elif "/" in word or word.endswith(".whl") or word.startswith("."):
            paths.append(word)
        else:
            match = re.match(r"[A-Za-z0-9._-]+", word)
            assert match, word
            names.append(re.sub(r"[-_.]+", "-", match.group()).lower())
    return names, paths


ACTIVATION_TIER = "arn:aws:ssm:*:*:servicesetting/ssm/managed-instance/activation-tier"


def assert_own_sessions_only(statement: dict[str, Any]) -> None:
    """AWS's form ("Allow a user to end only sessions they started"): SSM tags each session with the
    ``aws:userid`` of whoever started it.  A session's id starts with the user or role-session name, so
    ``session/${aws:userid}-*`` matches no session at all."""
    assert set(statement["Action"]) == {"ssm:TerminateSession", "ssm:ResumeSession"}
    assert statement["Resource"] == "arn:aws:ssm:*:*:session/*"
    assert statement["Condition"] == {"StringLike": {"ssm:resourceTag/aws:ssmmessages:session-id": "${aws:userid}"}}


def test_hybrid_user_policy_ends_own_sessions_and_reads_the_tier() -> None:
    policy = json.loads((TEMPLATES / "iam" / "hybrid-user-policy.json").read_text())
    by_sid = {s["Sid"]: s for s in policy["Statement"]}
    assert_own_sessions_only(by_sid["EndAndResumeOwnSessionsOnly"])
    tier = by_sid["CheckTheManagedInstanceTier"]  # enable(transport="hybrid") checks it
    assert tier["Action"] == "ssm:GetServiceSetting" and tier["Resource"] == ACTIVATION_TIER


def test_no_policy_scopes_sessions_by_an_id_prefix() -> None:
    for path in POLICIES:
        assert "session/${aws:userid}" not in path.read_text(), path.name


# the file name pip wheel gives this project's wheel: the distribution name, normalized (PEP 427)
WHEEL_PREFIX = re.sub(r"[-_.]+", "_", DISTRIBUTION).lower() + "-"


def test_byoc_snippet_installs_this_project_from_a_wheel_not_pypi() -> None:
    text = SNIPPET.read_text()
    instructions = dockerfile(text)
    runs = [args for name, args in instructions if name == "RUN"]
    installs = [pip_installs(run) for run in runs]
    asked = [requirements(args) for per_run in installs for args in per_run]
    # PyPI's "remote-debug" is another project (and would shadow the bundle enable() ships)
    assert all("remote-debug" not in names for names, _ in asked), asked
    wheels = [
        (args, paths)
        for per_run in installs
        for args in per_run
        for names, paths in [requirements(args)]
        if any(WHEEL_PREFIX in p for p in paths)
    ]
    assert len(wheels) == 1, asked
    args, [wheel] = wheels[0]
    assert wheel.endswith(".whl") and "--no-deps" in args  # the laptop's dependencies stay out of the image
    copies = [shlex.split(args) for name, args in instructions if name == "COPY"]
    assert any(wheel.startswith(dest) for *_sources, dest in copies), (wheel, copies)
    assert "pip wheel" in text and "python -m build" in text  # how to make that wheel is documented
    assert "openssh-server" in text
    assert any(names == ["debugpy"] for names, _ in asked)
    # amazon-ssm-agent only when asked for (hybrid transport), never started at build time
    assert "ARG REMOTE_DEBUG_HYBRID=0" in text and "amazon-ssm-agent.deb" in text
    assert 'if [ "$REMOTE_DEBUG_HYBRID" = "1" ]' in text


def test_byoc_entrypoint_runs_the_training_command_when_sagemaker_says_train(tmp_path: Path) -> None:
    """``docker run <image> train``, as SageMaker runs a training image: the image's training command
    runs, under the hook, with its exit code passed on.  The image's files are under ``root``."""
    instructions = dockerfile(SNIPPET.read_text())
    [entrypoint] = [json.loads(args) for name, args in instructions if name == "ENTRYPOINT"]
    [cmd] = [json.loads(args) for name, args in instructions if name == "CMD"]
    image_env: dict[str, str] = {}
    for name, args in instructions:
        if name == "ENV":
            key, _, value = shlex.split(args)[0].partition("=")
            image_env[key] = value
    root = tmp_path / "image"
    bin_dir = root / "usr" / "local" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
    (bin_dir / "python").chmod(0o755)
    code = root / "opt" / "ml" / "code"
    code.mkdir(parents=True)
    report = tmp_path / "report.json"
    (code / "train.py").write_text(
        "import json, os, sys\n"
        f"with open({str(report)!r}, 'w') as out:\n"
        "    parent = open(f'/proc/{os.getppid()}/cmdline').read().split('\\0')\n"
        "    json.dump({'argv': sys.argv, 'parent': parent}, out)\n"
        "sys.exit(7)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REMOTE_DEBUG_", "SM_", "PYTHON"))}
    env.update({k: v.replace("/opt/", f"{root}/opt/") for k, v in image_env.items()})
    env["PATH"] = f"{bin_dir}:/usr/bin:/bin"
    proc = subprocess.run([*entrypoint, "train"], cwd=root, env=env, capture_output=True, text=True, timeout=60)
    assert report.exists(), (proc.returncode, proc.stderr)
    assert cmd == ["train"]  # and `docker run <image>` trains too
    ran = json.loads(report.read_text())
    assert ran["argv"] == [str(code / "train.py")]
    assert ran["parent"][1:4] == ["-m", "remote_debug.container", "--"]  # the hook is its parent
    assert proc.returncode == 7  # SageMaker sees the training command's exit code
    # Any other command runs as given (under the hook too): `docker run <image> sh -c 'exit 3'`.
    other = subprocess.run([*entrypoint, "sh", "-c", "exit 3"], cwd=root, env=env, timeout=60)
    assert other.returncode == 3


@pytest.mark.parametrize("path", sorted((TEMPLATES / "launchers").rglob("*.py")), ids=lambda p: p.name)
def test_launchers_compile(path: Path, tmp_path: Path) -> None:
    # Importing each against its SDK is tested in the SDK venvs (test_sdk_capture.py).
    py_compile.compile(str(path), cfile=str(tmp_path / "x.pyc"), doraise=True)
