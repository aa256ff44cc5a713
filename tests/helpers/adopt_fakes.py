"""Fakes at ``adopt JOB``'s boundaries: a SageMaker client that records every call (validated against botocore's
model) and a node's shell (the ShellSession seam) that keeps the container's files as a set of paths and answers
the adopter's commands as a cooperative node does.  Shared by the adopt and IAM tests."""

from __future__ import annotations

import datetime as dt
import json
import shlex
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import botocore.session
from botocore import xform_name
from botocore.exceptions import ClientError
from botocore.validate import validate_parameters

from remote_debug.container.node.adopt import node_dir
from remote_debug.laptop.aws.ssm_shell import ShellError

REGION = "us-east-1"
ACCOUNT = "123456789012"
_SESSION = botocore.session.get_session()

Answer = dict[str, Any] | Callable[[dict[str, Any]], dict[str, Any]] | Exception


class Recorder:
    """A botocore-shaped client of ``service``: each call's parameters are checked against the service model,
    recorded as (operation, params) and answered from ``answers`` (an operation's dict, function or error)."""

    def __init__(self, service: str, answers: dict[str, Answer] | None = None, region: str = REGION) -> None:
        self.service = service
        self.model = _SESSION.get_service_model(service)
        self._operations = {xform_name(op): op for op in self.model.operation_names}
        self.answers = answers or {}
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.meta = SimpleNamespace(region_name=region, endpoint_url=f"https://{service}.{region}.amazonaws.com")

    def get_paginator(self, name: str) -> Any:
        """One page: the operation's answer (what a paginator yields when there is no next token)."""
        call = getattr(self, name)
        return SimpleNamespace(paginate=lambda **params: iter([call(**params)]))

    def __getattr__(self, name: str) -> Callable[..., dict[str, Any]]:
        operation = self._operations.get(name)
        if operation is None:
            raise AttributeError(name)

        def call(**params: Any) -> dict[str, Any]:
            validate_parameters(params, self.model.operation_model(operation).input_shape)
            self.calls.append((operation, params))
            answer = self.answers.get(operation, {})
            if isinstance(answer, Exception):
                raise answer
            return answer(params) if callable(answer) else answer

        return call


def denied(operation: str, message: str = "not authorized") -> ClientError:
    return ClientError({"Error": {"Code": "AccessDeniedException", "Message": message}}, operation)


class PlainJob:
    """A running SageMaker job launched WITHOUT remote_debug (no spec, no tags, remote debugging off), as
    DescribeTrainingJob / UpdateTrainingJob / ListTags / AddTags answer for it."""

    def __init__(self, name: str = "plain-job", nodes: int = 2, tags: dict[str, str] | None = None) -> None:
        self.name, self.nodes = name, nodes
        self.arn = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-job/{name}"
        self.enabled = False
        self.tags = dict(tags or {})

    def client(self, **overrides: Answer) -> Recorder:
        answers: dict[str, Answer] = {
            "DescribeTrainingJob": lambda _p: self.describe(),
            "UpdateTrainingJob": self._update,
            "ListTags": lambda _p: {"Tags": [{"Key": k, "Value": v} for k, v in self.tags.items()]},
            "AddTags": self._add_tags,
            "StopTrainingJob": {},
        }
        answers.update(overrides)
        return Recorder("sagemaker", answers)

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "TrainingJobName": self.name,
            "TrainingJobArn": self.arn,
            "TrainingJobStatus": "InProgress",
            "SecondaryStatus": "Training",
            "ModelArtifacts": {"S3ModelArtifacts": "s3://b/m"},
            "AlgorithmSpecification": {"TrainingImage": "img", "TrainingInputMode": "File"},
            "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": self.nodes, "VolumeSizeInGB": 30},
            "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
            "CreationTime": dt.datetime(2026, 1, 1),
            "Environment": {},
        }
        if self.enabled:
            out["RemoteDebugConfig"] = {"EnableRemoteDebug": True}
        return out

    def _update(self, params: dict[str, Any]) -> dict[str, Any]:
        self.enabled = bool(params["RemoteDebugConfig"]["EnableRemoteDebug"])
        return {"TrainingJobArn": self.arn}

    def _add_tags(self, params: dict[str, Any]) -> dict[str, Any]:
        self.tags.update({t["Key"]: t["Value"] for t in params["Tags"]})
        return {"Tags": params["Tags"]}


PROBE: dict[str, Any] = {
    "roots": [4242],
    "ranks": [{"rank": 0, "pid": 4243, "python": [3, 11, 9]}],
    "gdb": "/usr/bin/gdb",
    "code_dir": "/opt/ml/code",
    "refusal": None,
}


class FakeShell:
    """One node's root shell: ``files`` is what exists in the container (paths; a dir exists while anything is
    under it).  ``commands`` is every command run, in order."""

    def __init__(self, node: str, probe: dict[str, Any] | None = None) -> None:
        self.node = node
        self.probe = PROBE if probe is None else probe
        self.files: set[str] = set()
        self.commands: list[str] = []
        self.uploads: list[str] = []
        self.closed = False

    def exists(self, path: str) -> bool:
        return any(f == path or f.startswith(path.rstrip("/") + "/") for f in self.files)

    def put_file(self, path: str, data: bytes, mode: int = 0o600, *, wrap: Any = None) -> None:
        del data, mode
        guarded = self._guarded(wrap(":")) if wrap is not None else None
        if guarded is not None and not path.startswith("/"):  # a name in the private dir the guard enters
            path = f"{guarded[0]}/{path}"
        self.uploads.append(path)
        self.files.add(path)

    def check(self, command: str, timeout: float = 60.0) -> str:
        code, output = self.run(command, timeout)
        if code != 0:
            raise ShellError(f"{command} failed on {self.node}")
        return output

    @staticmethod
    def _guarded(command: str) -> tuple[str, str] | None:
        """(private dir, sh command) of a command run behind node_dir's guard; None for any other."""
        try:
            words = shlex.split(command)
        except ValueError:
            return None
        if len(words) < 6 or words[1:4] != ["-I", "-c", node_dir.SOURCE] or words[4] != "in":
            return None
        return words[5], words[-1]

    def _make(self, prefix: str) -> str:
        """node_dir's ``make``: an earlier dir of this job and node, else a new one."""
        for path in sorted(self.files):
            name = path.split("/")[2] if path.startswith("/tmp/") and path.count("/") > 2 else ""
            if name.startswith(prefix):
                return f"old /tmp/{name}"
        self.files.add(f"/tmp/{prefix}fake0001/.")
        return f"new /tmp/{prefix}fake0001"

    def run(self, command: str, timeout: float = 60.0) -> tuple[int, str]:
        del timeout
        self.commands.append(command)
        if command == "id -u":
            return 0, "0\n"
        if "sys.version_info" in command:
            return 0, "/usr/bin/python3\n"
        cwd = ""
        guarded = self._guarded(command)
        if guarded is not None:
            cwd, command = guarded
        elif node_dir.SOURCE in command:
            return 0, self._make(shlex.split(command)[-1]) + "\n"

        def at(path: str) -> str:
            return path if path.startswith("/") or not cwd else f"{cwd}/{path}"

        words = shlex.split(command.replace("&&", " && ").replace(";", " ; "))
        if words[:2] in (["test", "-e"], ["test", "-d"]):
            return (0 if self.exists(at(words[2])) else 1), ""
        if "tar -xzf" in command:
            bundle = at(words[words.index("mv") + 2])
            self.files.add(bundle + "/remote_debug/__init__.py")
            self.files.discard(at(words[words.index("-xzf") + 1]))
            return 0, ""
        if words[:2] == ["rm", "-rf"]:
            for path in map(at, words[2:]):
                self.files = {f for f in self.files if not (f == path or f.startswith(path + "/"))}
            return 0, ""
        if "--adopt-node --probe" in command:
            return 0, json.dumps(self.probe) + "\n"
        if "--adopt-node" in command:
            ranks = [
                {"rank": r["rank"], "pid": r["pid"], "node": self.node, "state": "listening"}
                for r in self.probe["ranks"]
            ]
            return 0, json.dumps({"already": False, "ranks": ranks}) + "\n"
        return 0, ""

    def close(self) -> None:
        self.closed = True
