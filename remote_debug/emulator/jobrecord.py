"""A training job as the API shows it: its record, its status transitions, Describe and List answers.

Shapes follow botocore's SageMaker model (``DescribeTrainingJobResponse``, ``TrainingJobSummary``);
timestamps are epoch-second floats, which botocore parses as it parses AWS's.  The record also
carries the handles of the job's run (its thread, nodes, stop state), which only
:mod:`.training` touches.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from remote_debug.emulator.access import write_private
from remote_debug.emulator.errors import ApiError
from remote_debug.emulator.nodes import Cluster
from remote_debug.emulator.runtime import NodeRun

DEFAULT_MAX_RUNTIME = 86400  # what AWS fills in when StoppingCondition has none
TERMINAL = ("Completed", "Failed", "Stopped")
DEFAULT_PAGE = 10

# What DescribeTrainingJob echoes from CreateTrainingJob, as given.
ECHOED = (
    "HyperParameters",
    "AlgorithmSpecification",
    "RoleArn",
    "InputDataConfig",
    "OutputDataConfig",
    "ResourceConfig",
    "VpcConfig",
    "StoppingCondition",
    "EnableNetworkIsolation",
    "EnableInterContainerTrafficEncryption",
    "EnableManagedSpotTraining",
    "CheckpointConfig",
    "DebugHookConfig",
    "DebugRuleConfigurations",
    "TensorBoardOutputConfig",
    "ExperimentConfig",
    "ProfilerConfig",
    "ProfilerRuleConfigurations",
    "Environment",
    "RetryStrategy",
    "InfraCheckConfig",
    "ServerlessJobConfig",
    "MlflowConfig",
    "ModelPackageConfig",
)


@dataclass
class Job:
    name: str
    arn: str
    request: dict[str, Any]
    dir: Path
    nodes: list[NodeRun]
    created: float
    grace: float  # SIGTERM -> SIGKILL, for a stop
    status: str = "InProgress"
    secondary: str = "Starting"
    transitions: list[dict[str, Any]] = field(default_factory=list)
    last_modified: float = 0.0
    failure_reason: str | None = None
    training_start: float | None = None
    training_end: float | None = None
    model_artifacts: str = ""
    remote_debug: bool | None = None
    remote_debug_since: float | None = None  # when UpdateTrainingJob turned it on (None: from the start)
    tags: list[dict[str, str]] = field(default_factory=list)
    # the run
    stop_reason: str | None = None  # "Stopped" or "MaxRuntimeExceeded"
    kill_at: float | None = None  # monotonic time SIGKILL is due (SIGTERM went out)
    failed: NodeRun | None = None
    cluster: Cluster | None = None
    wake: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    log_files: list[IO[str]] = field(default_factory=list)

    def set_status(self, secondary: str, message: str, status: str | None = None) -> None:
        """A new secondary status, or a new message within the current one (AWS updates it in place)."""
        now = time.time()
        last = self.transitions[-1] if self.transitions else None
        if last is not None and last["Status"] == secondary:
            last["StatusMessage"] = message
        else:
            if last is not None:
                last["EndTime"] = now
            self.transitions.append({"Status": secondary, "StartTime": now, "StatusMessage": message})
        self.secondary = secondary
        if status is not None:
            self.status = status
        if self.status in TERMINAL:
            self.transitions[-1]["EndTime"] = now
        self.last_modified = now
        self.snapshot()

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {key: copy.deepcopy(self.request[key]) for key in ECHOED if key in self.request}
        out.update(
            {
                "TrainingJobName": self.name,
                "TrainingJobArn": self.arn,
                # required by the model: empty until the artifacts are uploaded
                "ModelArtifacts": {"S3ModelArtifacts": self.model_artifacts},
                "TrainingJobStatus": self.status,
                "SecondaryStatus": self.secondary,
                "CreationTime": self.created,
                "LastModifiedTime": self.last_modified,
                "SecondaryStatusTransitions": copy.deepcopy(self.transitions),
            }
        )
        out.setdefault("StoppingCondition", {}).setdefault("MaxRuntimeInSeconds", DEFAULT_MAX_RUNTIME)
        for flag in ("EnableNetworkIsolation", "EnableInterContainerTrafficEncryption", "EnableManagedSpotTraining"):
            out.setdefault(flag, False)
        if self.failure_reason is not None:
            out["FailureReason"] = self.failure_reason
        if self.training_start is not None:
            out["TrainingStartTime"] = self.training_start
        if self.training_end is not None:
            out["TrainingEndTime"] = self.training_end
            # whole seconds, at least 1 (the API's minimum): a job that ran is billed
            seconds = max(1, math.ceil(self.training_end - (self.training_start or self.training_end)))
            out["TrainingTimeInSeconds"] = seconds
            out["BillableTimeInSeconds"] = seconds
        if self.remote_debug is not None:
            out["RemoteDebugConfig"] = {"EnableRemoteDebug": self.remote_debug}
        return out

    def summary(self) -> dict[str, Any]:
        summary: dict[str, Any] = {
            "TrainingJobName": self.name,
            "TrainingJobArn": self.arn,
            "CreationTime": self.created,
            "LastModifiedTime": self.last_modified,
            "TrainingJobStatus": self.status,
            "SecondaryStatus": self.secondary,
        }
        if self.training_end is not None:
            summary["TrainingEndTime"] = self.training_end
        return summary

    def snapshot(self) -> None:
        # for people and post-mortems: what DescribeTrainingJob said last; 0600, its Environment holds the job
        # secret (the emulator's state dir is 0700 too)
        with contextlib.suppress(OSError):
            write_private(self.dir / "describe.json", json.dumps(self.describe(), indent=1))


def remote_debug_flag(config: dict[str, Any] | None) -> bool | None:
    if config is None or "EnableRemoteDebug" not in config:
        return None
    return bool(config["EnableRemoteDebug"])


def list_page(jobs: Sequence[Job], request: dict[str, Any]) -> dict[str, Any]:
    """A ListTrainingJobs answer: filters, AWS's default order (CreationTime, Ascending), pages of 10."""
    contains = str(request.get("NameContains", "")).lower()
    status = request.get("StatusEquals")
    bounds: Sequence[tuple[Any, Callable[[Job], float], bool]] = [
        (request.get("CreationTimeAfter"), lambda j: j.created, True),
        (request.get("CreationTimeBefore"), lambda j: j.created, False),
        (request.get("LastModifiedTimeAfter"), lambda j: j.last_modified, True),
        (request.get("LastModifiedTimeBefore"), lambda j: j.last_modified, False),
    ]
    chosen = []
    for job in jobs:
        if contains and contains not in job.name.lower():
            continue
        if status and job.status != status:
            continue
        if request.get("WarmPoolStatusEquals") or request.get("TrainingPlanArnEquals"):
            continue  # no warm pools or training plans here
        if not all(_in_bound(value, key(job), after) for value, key, after in bounds if value is not None):
            continue
        chosen.append(job)
    sort_key: Callable[[Job], Any] = {
        "Name": lambda j: j.name,
        "Status": lambda j: j.status,
    }.get(request.get("SortBy", "CreationTime"), lambda j: j.created)
    chosen.sort(key=sort_key, reverse=request.get("SortOrder", "Ascending") == "Descending")
    start = _decode_token(request.get("NextToken"))
    size = int(request.get("MaxResults", DEFAULT_PAGE))
    answer: dict[str, Any] = {"TrainingJobSummaries": [job.summary() for job in chosen[start : start + size]]}
    if start + size < len(chosen):
        answer["NextToken"] = _encode_token(start + size)
    return answer


def _timestamp(value: Any) -> float:
    # botocore sends JSON-protocol timestamps as epoch numbers; accept ISO text from hand-made calls
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, datetime):
        return value.timestamp()
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise ApiError("ValidationException", f"{value!r} is not a timestamp.") from None


def _in_bound(value: Any, actual: float, after: bool) -> bool:
    bound = _timestamp(value)
    return actual > bound if after else actual < bound


def _encode_token(offset: int) -> str:
    return base64.urlsafe_b64encode(json.dumps({"offset": offset}).encode()).decode()


def _decode_token(token: str | None) -> int:
    if not token:
        return 0
    try:
        offset = json.loads(base64.urlsafe_b64decode(token.encode()))["offset"]
    except (ValueError, KeyError, TypeError):
        raise ApiError("ValidationException", "Invalid pagination token.") from None
    if not isinstance(offset, int) or offset < 0:
        raise ApiError("ValidationException", "Invalid pagination token.")
    return offset
