"""CreateTrainingJob, run the way SageMaker runs it: statuses, channels, nodes, logs, artifacts.

A job's thread walks it through SageMaker's states, with AWS's status messages:

* ``InProgress``/``Starting`` - "Starting the training job", "Launching requested ML instances" (the
  nodes of :mod:`.nodes`), "Preparing the instances for training" (``/opt/ml/input/config``);
* ``Downloading`` - "Downloading input data" (the channels, :mod:`.channels`);
* ``Training`` - "Downloading the training image" (the image's local environment, :mod:`.images`),
  then "Training image download completed. Training in progress." once every node runs its command;
* ``Uploading`` - "Uploading generated training model" (``model.tar.gz``, ``output.tar.gz``);
* ``Completed`` / ``Failed`` ("Training job failed", ``FailureReason`` from the failing node) /
  ``Stopped`` (after ``Stopping``; secondary ``MaxRuntimeExceeded`` when the job outran
  ``StoppingCondition.MaxRuntimeInSeconds``, as the API reference files it under ``Stopped``).

A node's output goes line by line to CloudWatch Logs (:mod:`.logship`) and to
``<work_dir>/jobs/<job>/logs/algo-N.log``; every status change is also written to
``<work_dir>/jobs/<job>/describe.json``.  Everything of a job lives under ``<work_dir>/jobs/<job>``.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlparse

import boto3

from remote_debug.emulator import channels, jobrecord, runtime
from remote_debug.emulator.channels import ChannelError, S3Url
from remote_debug.emulator.endpoint_relay import EndpointRelay, listen_in
from remote_debug.emulator.errors import ApiError
from remote_debug.emulator.images import ImageMap
from remote_debug.emulator.jobrecord import DEFAULT_MAX_RUNTIME, Job, remote_debug_flag
from remote_debug.emulator.logship import LogShipper
from remote_debug.emulator.nodes import Cluster
from remote_debug.emulator.runtime import NodeRun
from remote_debug.emulator.sigv4 import Keys

STOP_GRACE = 120.0  # SageMaker: SIGTERM, then SIGKILL 120 s later
SHUTDOWN_GRACE = 5.0
FAILURE_GRACE = 10.0  # one node failed: the others get this long after SIGTERM
MAX_INSTANCES = 16
MAX_TAGS = 50
MAX_FAILURE_REASON = 1024
NOT_FOUND = "Requested resource not found."  # AWS's words for an unknown training job
TARGET_PREFIX = "sagemaker-training-job:"
# SageMaker's SSM agent in the container comes online some seconds after the job reaches Training (or after
# UpdateTrainingJob turns remote debugging on); until then StartSession answers TargetNotConnected.
AGENT_DELAY = 3.0
POLL = 0.2
DRAIN_TIMEOUT = 10.0  # reading what the nodes wrote after their commands exited
_CHECKPOINTS = "/opt/ml/checkpoints"

# module-level names: inside TrainingJobs, `list` is the ListTrainingJobs method
Tags = list[dict[str, str]]
Relays = list[EndpointRelay]


class _StopRequested(Exception):
    """The job was stopped before its containers started."""


class TrainingJobs:
    def __init__(
        self,
        *,
        work_dir: Path,
        endpoint_url: str,
        region: str,
        account_id: str,
        images: ImageMap,
        log_delay: float = 0.5,
        stop_grace: float = STOP_GRACE,
        agent_delay: float = AGENT_DELAY,
        keys: Keys | None = None,
    ) -> None:
        self.work_dir = work_dir
        # the emulator's key: its own calls (S3 inputs, CloudWatch Logs) and, as the role AWS would hand them,
        # its jobs' calls are signed with it (a job's own role key on AWS; None: any, for a bare moto server)
        self.keys = keys or Keys.generate()
        self.endpoint_url = endpoint_url
        self.region = region
        self.account_id = account_id
        self.images = images
        self.log_delay = log_delay
        self.stop_grace = stop_grace
        self.agent_delay = agent_delay
        self._lock = threading.RLock()
        self._jobs: dict[str, Job] = {}
        self._closing = False
        session = boto3.session.Session(
            aws_access_key_id=self.keys.access_key_id,
            aws_secret_access_key=self.keys.secret_access_key,
            region_name=region,
        )
        # clients are thread-safe once made; making them is not, so it happens here, once
        self._s3 = session.client("s3", endpoint_url=endpoint_url)
        self._logs = session.client("logs", endpoint_url=endpoint_url)

    # --- the API ---------------------------------------------------------------------------------

    def create(self, request: dict[str, Any]) -> dict[str, Any]:
        name = request["TrainingJobName"]
        arn = self._arn(name)
        algorithm = request.get("AlgorithmSpecification", {})
        if not algorithm.get("TrainingImage"):
            raise ApiError(
                "ValidationException",
                "the emulator runs training images only: give AlgorithmSpecification.TrainingImage "
                f"(AlgorithmName {algorithm.get('AlgorithmName', '')!r} names a built-in or Marketplace algorithm)",
            )
        if request.get("RemoteDebugConfig", {}).get("EnableRemoteDebug") and request.get("EnableNetworkIsolation"):
            raise ApiError("ValidationException", "Remote debugging is not supported with network isolation.")
        nodes = runtime.plan_nodes(request.get("ResourceConfig", {}))
        if not nodes:
            raise ApiError("ValidationException", "ResourceConfig asks for no instances.")
        if len(nodes) > MAX_INSTANCES:
            raise ApiError(
                "ResourceLimitExceeded",
                f"The emulator runs at most {MAX_INSTANCES} instances per training job; {len(nodes)} requested.",
            )
        if len(request.get("Tags", [])) > MAX_TAGS:
            raise ApiError("ValidationException", f"A resource can have at most {MAX_TAGS} tags.")
        with self._lock:
            if self._closing:
                raise ApiError("ServiceUnavailable", "The emulator is shutting down.", 503)
            if name in self._jobs:
                raise ApiError(
                    "ResourceInUse",
                    "Training job names must be unique within an AWS account and region, and a training job "
                    f"with this name already exists ({arn})",
                )
            job_dir = self.work_dir / "jobs" / name
            # a job of an earlier emulator run with the same state dir: its state, not ours any more
            shutil.rmtree(job_dir, ignore_errors=True)
            job_dir.mkdir(parents=True)
            now = time.time()
            job = Job(
                name=name,
                arn=arn,
                request=copy.deepcopy(request),
                dir=job_dir,
                nodes=nodes,
                created=now,
                last_modified=now,
                tags=[dict(tag) for tag in request.get("Tags", [])],
                remote_debug=remote_debug_flag(request.get("RemoteDebugConfig")),
                grace=self.stop_grace,
            )
            self._jobs[name] = job
            job.set_status("Starting", "Starting the training job")
            job.thread = threading.Thread(target=self._run, args=(job,), name=f"emulator-job-{name}", daemon=True)
            job.thread.start()
        return {"TrainingJobArn": arn}

    def describe(self, name: str) -> dict[str, Any]:
        with self._lock:
            return self._job(name).describe()

    def list(self, request: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            return jobrecord.list_page(list(self._jobs.values()), request)

    def stop(self, name: str) -> None:
        with self._lock:
            job = self._job(name)
            if job.status != "InProgress":
                raise ApiError(
                    "ValidationException",
                    f"The request was rejected because the training job is in status {job.status}.",
                )
            self._request_stop(job, "Stopped", self.stop_grace)

    def update(self, request: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            job = self._job(request["TrainingJobName"])
            if "RemoteDebugConfig" in request:
                if job.secondary not in ("Downloading", "Training"):
                    raise ApiError(
                        "ValidationException",
                        "RemoteDebugConfig can be updated only while the training job's secondary status is "
                        f"Downloading or Training; it is {job.secondary}.",
                    )
                enable = remote_debug_flag(request["RemoteDebugConfig"])
                if enable and job.request.get("EnableNetworkIsolation"):
                    raise ApiError("ValidationException", "Remote debugging is not supported with network isolation.")
                if enable and not job.remote_debug:
                    job.remote_debug_since = time.time()  # the agent starts now
                job.remote_debug = enable
            if "ResourceConfig" in request:
                job.request.setdefault("ResourceConfig", {}).update(copy.deepcopy(request["ResourceConfig"]))
            if "ProfilerConfig" in request:
                job.request.setdefault("ProfilerConfig", {}).update(copy.deepcopy(request["ProfilerConfig"]))
            if "ProfilerRuleConfigurations" in request:
                job.request["ProfilerRuleConfigurations"] = copy.deepcopy(request["ProfilerRuleConfigurations"])
            job.last_modified = time.time()
            job.snapshot()
            return {"TrainingJobArn": job.arn}

    def list_tags(self, arn: str) -> Tags:
        with self._lock:
            return [dict(tag) for tag in self._job_by_arn(arn).tags]

    def add_tags(self, arn: str, tags: Tags) -> None:
        with self._lock:
            job = self._job_by_arn(arn)
            merged = {tag["Key"]: dict(tag) for tag in job.tags}
            merged.update({tag["Key"]: dict(tag) for tag in tags})
            if len(merged) > MAX_TAGS:
                raise ApiError("ValidationException", f"A resource can have at most {MAX_TAGS} tags.")
            job.tags = list(merged.values())

    def delete_tags(self, arn: str, keys: Sequence[str]) -> None:
        with self._lock:
            job = self._job_by_arn(arn)
            job.tags = [tag for tag in job.tags if tag["Key"] not in set(keys)]

    def connector(self, target: str) -> tuple[str, Callable[[int], socket.socket]]:
        refused = ApiError("TargetNotConnected", f"{target} is not connected.")
        if not target.startswith(TARGET_PREFIX):
            raise refused
        name, sep, node = target[len(TARGET_PREFIX) :].rpartition("_")
        if not sep:
            raise refused
        with self._lock:
            job = self._jobs.get(name)
            if (
                job is None
                or not job.remote_debug
                or job.secondary != "Training"
                or job.cluster is None
                or node not in {n.name for n in job.nodes}
                or time.time() < self._agent_online_at(job)
            ):
                raise refused
            cluster = job.cluster

        def connect(port: int) -> socket.socket:
            return cluster.connect(node, port)

        return name, connect

    def _agent_online_at(self, job: Job) -> float:
        """When the job's SSM agent answers: ``agent_delay`` after Training began, or after remote debugging was
        turned on if that came later."""
        training = next((t["StartTime"] for t in reversed(job.transitions) if t["Status"] == "Training"), time.time())
        return max(training, job.remote_debug_since or 0.0) + self.agent_delay

    def shutdown(self) -> None:
        with self._lock:
            self._closing = True
            jobs = list(self._jobs.values())
            for job in jobs:
                if job.status == "InProgress":
                    self._request_stop(job, "Stopped", SHUTDOWN_GRACE)
                elif job.status == "Stopping":
                    job.grace = min(job.grace, SHUTDOWN_GRACE)
                    if job.kill_at is not None:
                        job.kill_at = min(job.kill_at, time.monotonic() + SHUTDOWN_GRACE)
                    job.wake.set()
        for job in jobs:
            if job.thread is not None:
                job.thread.join()

    # --- state -----------------------------------------------------------------------------------

    def _arn(self, name: str) -> str:
        return f"arn:aws:sagemaker:{self.region}:{self.account_id}:training-job/{name}"

    def _job(self, name: str) -> Job:
        job = self._jobs.get(name)
        if job is None:
            raise ApiError("ValidationException", NOT_FOUND)
        return job

    def _job_by_arn(self, arn: str) -> Job:
        name = arn.rpartition(":training-job/")[2]
        job = self._jobs.get(name)
        if job is None or job.arn != arn:
            raise ApiError("ValidationException", NOT_FOUND)
        return job

    def _advance(self, job: Job, secondary: str, message: str) -> None:
        """Move a running job on; a stop that came first wins."""
        with self._lock:
            if job.stop_reason is not None:
                raise _StopRequested
            job.set_status(secondary, message)

    def _request_stop(self, job: Job, reason: str, grace: float) -> None:
        job.stop_reason = reason
        job.grace = grace
        job.set_status("Stopping", "Stopping the training job", status="Stopping")
        job.wake.set()

    # --- the job's thread ------------------------------------------------------------------------

    def _run(self, job: Job) -> None:
        shipper: LogShipper | None = None
        relays: Relays = []
        cluster: Cluster | None = None
        outcome: tuple[str, str, str] | None = None  # (status, secondary, message)
        try:
            self._advance(job, "Starting", "Launching requested ML instances")
            node_image = self.images.resolve(job.request["AlgorithmSpecification"]["TrainingImage"]).node
            cluster = Cluster(job.name, job.dir, [node.name for node in job.nodes], node_image)
            with self._lock:
                job.cluster = cluster
            cluster.create()
            self._advance(job, "Starting", "Preparing the instances for training")
            for node in job.nodes:
                runtime.write_config(cluster.root(node.name), node, job.nodes, job.request)
            if not job.request.get("EnableNetworkIsolation"):
                relays = self._relays(cluster)  # isolated: no route out of the node, as on AWS
            self._advance(job, "Downloading", "Downloading input data")
            self._download(job, cluster)
            self._advance(job, "Training", "Downloading the training image")
            shipper = LogShipper(self._logs, delay=self.log_delay, on_error=lambda text: self._note(job, text))
            self._start(job, cluster, shipper)
            self._wait(job, cluster)
            self._drain(job, cluster)
            outcome = self._finish(job, cluster)
        except _StopRequested:
            outcome = ("Stopped", "Stopped", "Training job stopped")
        except ChannelError as exc:
            outcome = self._failure(job, f"ClientError: {exc}")
        except Exception as exc:  # the emulator's own trouble (namespaces, S3 down): the job fails, not us
            outcome = self._failure(job, f"InternalServerError: {type(exc).__name__}: {exc}")
        finally:
            for relay in relays:
                relay.close()
            if cluster is not None:
                try:
                    cluster.destroy()
                except Exception as exc:
                    self._note(job, f"cannot remove the nodes: {exc}")
            # the nodes are gone, so their pipes are closed: the readers end, then the last lines ship
            deadline = time.monotonic() + DRAIN_TIMEOUT
            for node in job.nodes:
                for reader in node.readers:
                    reader.join(max(0.0, deadline - time.monotonic()))
            if shipper is not None:
                shipper.close()
            for log_file in job.log_files:
                log_file.close()
            with self._lock:
                job.cluster = None
                status, secondary, message = outcome or ("Failed", "Failed", "Training job failed")
                if job.training_start is not None and job.training_end is None:
                    job.training_end = time.time()
                job.set_status(secondary, message, status=status)

    def _failure(self, job: Job, reason: str) -> tuple[str, str, str]:
        with self._lock:
            job.failure_reason = reason[:MAX_FAILURE_REASON]
        return ("Failed", "Failed", "Training job failed")

    def _note(self, job: Job, text: str) -> None:
        with contextlib.suppress(OSError), open(job.dir / "emulator.log", "a", encoding="utf-8") as log:
            log.write(f"{datetime.now().isoformat(timespec='seconds')} {text}\n")

    def _relays(self, cluster: Cluster) -> Relays:
        url = urlparse(self.endpoint_url)
        target = (url.hostname or "127.0.0.1", url.port or (443 if url.scheme == "https" else 80))
        relays = []
        try:
            for host in cluster.hosts:
                listener = listen_in(cluster.node(host).namespace, "127.0.0.1", target[1])
                relays.append(EndpointRelay(listener, target, host))
        except BaseException:
            for relay in relays:
                relay.close()
            raise
        return relays

    def _download(self, job: Job, cluster: Cluster) -> None:
        algorithm = job.request.get("AlgorithmSpecification", {})
        inputs = job.request.get("InputDataConfig", [])
        for channel in inputs:
            channels.check_channel(channel, algorithm)
        count = len(job.nodes)
        for channel in inputs:
            objects = channels.channel_objects(self._s3, channel)
            distribution = channel["DataSource"]["S3DataSource"].get("S3DataDistributionType", "FullyReplicated")
            for index, node in enumerate(job.nodes):
                mine = channels.shard(objects, index, count) if distribution == "ShardedByS3Key" else objects
                target = cluster.root(node.name) / "input" / "data" / channel["ChannelName"]
                channels.download(self._s3, mine, target, channel["ChannelName"])
        checkpoints = self._checkpoint_dir(job)
        if checkpoints is not None:
            url = S3Url.parse(job.request["CheckpointConfig"]["S3Uri"])
            keys = channels.list_keys(self._s3, url.bucket, url.key)
            folder = url.key.rstrip("/") + "/" if url.key else ""
            objects = [(url.bucket, key, PurePosixPath(key[len(folder) :])) for key in keys if key.startswith(folder)]
            for node in job.nodes:
                channels.download(self._s3, objects, cluster.root(node.name) / checkpoints, "checkpoints")

    def _checkpoint_dir(self, job: Job) -> PurePosixPath | None:
        """CheckpointConfig's LocalPath relative to /opt/ml; None without one (or outside /opt/ml)."""
        config = job.request.get("CheckpointConfig")
        if not config:
            return None
        local = PurePosixPath(config.get("LocalPath", _CHECKPOINTS))
        try:
            return local.relative_to("/opt/ml")
        except ValueError:
            self._note(job, f"checkpoints at {local} are not synced: the emulator syncs paths under /opt/ml only")
            return None

    def _start(self, job: Job, cluster: Cluster, shipper: LogShipper) -> None:
        image = self.images.resolve(job.request["AlgorithmSpecification"]["TrainingImage"])
        if runtime.needs_mpi_sshd(job.request.get("HyperParameters", {})):
            cluster.start_mpi_sshd()
        argv = runtime.command(job.request, image)
        logs_dir = job.dir / "logs"
        logs_dir.mkdir(exist_ok=True)
        envs = {}
        for node in job.nodes:
            gpus = self.images.gpus(node.instance_type)
            shim = runtime.gpu_shim(job.dir / "gpu-shim" / node.name, gpus, node.instance_type) if gpus else None
            envs[node.name] = runtime.node_environment(
                node=node,
                image=image,
                shim_dir=shim,
                job_name=job.name,
                job_arn=job.arn,
                region=self.region,
                endpoint_url=None if job.request.get("EnableNetworkIsolation") else self.endpoint_url,
                environment=job.request.get("Environment", {}),
                keys=self.keys,
            )
            node.stream = f"{job.name}/{node.name}-{int(time.time())}"
            shipper.open_stream(node.stream)
        # under the lock: a stop either comes before the first spawn or finds every node to signal
        with self._lock:
            if job.stop_reason is not None:
                raise _StopRequested
            job.training_start = time.time()
            for node in job.nodes:
                log_file = open(logs_dir / f"{node.name}.log", "a", encoding="utf-8")  # noqa: SIM115 - closed by _run
                job.log_files.append(log_file)
                node.proc = cluster.spawn(
                    node.name, argv, env=envs[node.name], cwd="/", stdout=subprocess.PIPE, stderr=subprocess.PIPE
                )
                runtime.start_readers(node, functools.partial(shipper.put, node.stream), log_file, threading.Lock())
            job.set_status("Training", "Training image download completed. Training in progress.")

    def _wait(self, job: Job, cluster: Cluster) -> None:
        """Until every node's command has exited; stops, failures and MaxRuntime handled on the way."""
        max_runtime = job.request.get("StoppingCondition", {}).get("MaxRuntimeInSeconds", DEFAULT_MAX_RUNTIME)
        killed = False
        while True:
            for node in job.nodes:
                if node.exit_code is None and node.proc is not None:
                    code = node.proc.poll()
                    if code is not None:
                        node.exit_code = code
                        with self._lock:
                            # a node that fails after a stop was asked for is part of the stop
                            if code != 0 and job.failed is None and job.stop_reason is None:
                                job.failed = node
            if all(node.exit_code is not None for node in job.nodes):
                return
            now = time.monotonic()
            terminate = False
            with self._lock:
                started = job.training_start or time.time()
                if job.stop_reason is None and job.failed is None and time.time() - started > max_runtime:
                    self._request_stop(job, "MaxRuntimeExceeded", self.stop_grace)
                if job.kill_at is None and (job.stop_reason is not None or job.failed is not None):
                    grace = job.grace if job.stop_reason is not None else min(FAILURE_GRACE, job.grace)
                    job.kill_at = now + grace
                    terminate = True
                kill_due = job.kill_at is not None and now >= job.kill_at
            # signalled outside the lock: finding a node's processes scans /proc
            if terminate:
                cluster.signal_all(signal.SIGTERM)
            if kill_due and not killed:
                cluster.signal_all(signal.SIGKILL)
                killed = True
            job.wake.wait(POLL)
            job.wake.clear()

    def _drain(self, job: Job, cluster: Cluster) -> None:
        """Every node's command has exited: end what it left running, read its output to the end."""
        # A container ends with its main process; daemons it started (sshd, orted) would otherwise
        # hold the output pipes open and the readers would never see the end.
        cluster.signal_all(signal.SIGKILL)
        deadline = time.monotonic() + DRAIN_TIMEOUT
        for node in job.nodes:
            for reader in node.readers:
                reader.join(max(0.0, deadline - time.monotonic()))

    def _finish(self, job: Job, cluster: Cluster) -> tuple[str, str, str]:
        with self._lock:
            failed = job.failed
        if failed is not None:
            return self._failure(job, self._failure_reason(cluster, failed))
        with self._lock:
            job.set_status("Uploading", "Uploading generated training model")
        self._upload(job, cluster)
        with self._lock:
            reason = job.stop_reason
        if reason is None:
            return ("Completed", "Completed", "Training job completed")
        if reason == "MaxRuntimeExceeded":
            return ("Stopped", "MaxRuntimeExceeded", "The job stopped because it exceeded the maximum allowed runtime.")
        return ("Stopped", "Stopped", "Training job stopped")

    def _failure_reason(self, cluster: Cluster, node: NodeRun) -> str:
        """SageMaker's words: ``AlgorithmError: <the failure file>, exit code: N``.

        Without a failure file AWS leaves the text empty; the emulator puts the node's last error
        line there instead, which is what a person looks for first."""
        text = ""
        with contextlib.suppress(OSError):
            text = (cluster.root(node.name) / "output" / "failure").read_text(encoding="utf-8", errors="replace")
        text = text.strip() or node.last_error_line()
        code = node.exit_code or 0
        if code < 0:
            code = 128 - code  # killed by signal N: what Docker reports, 128 + N
        return f"AlgorithmError: {text}, exit code: {code}"

    def _upload(self, job: Job, cluster: Cluster) -> None:
        output = S3Url.parse(job.request["OutputDataConfig"]["S3OutputPath"]).join(job.name, "output")
        staging = job.dir / "upload"
        roots = [cluster.root(node.name) for node in job.nodes]
        # algo-1's file wins where nodes wrote the same name (launchers save on rank 0)
        for source, archive in (("model", "model.tar.gz"), ("output/data", "output.tar.gz")):
            channels.tar_directories([root / source for root in roots], staging / archive)
            channels.upload(self._s3, staging / archive, output.join(archive))
        with self._lock:
            job.model_artifacts = str(output.join("model.tar.gz"))
        checkpoints = self._checkpoint_dir(job)
        if checkpoints is not None:
            target = S3Url.parse(job.request["CheckpointConfig"]["S3Uri"])
            for root in roots:
                directory = root / checkpoints
                for path in sorted(directory.rglob("*")) if directory.is_dir() else []:
                    if path.is_file() and not path.is_symlink():
                        channels.upload(self._s3, path, target.join(path.relative_to(directory).as_posix()))
