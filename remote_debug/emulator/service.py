"""The emulator as one object: moto's server, the training-job API, SSM sessions, on one loopback URL.

``Emulator(state_dir).start()`` serves ``http://127.0.0.1:<port>``: point boto3, the SDKs, the AWS
CLI and ``remote-debug`` itself at it with ``AWS_ENDPOINT_URL`` and they run unchanged.
:meth:`Emulator.close` stops every job (as StopTrainingJob would, with a short grace), closes the SSM
sessions and the listeners.
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app

from remote_debug.contract.spec import LOOPBACK
from remote_debug.emulator import janitor
from remote_debug.emulator.access import GatedWSGIServer, admitted_uids, secure_dir, write_private
from remote_debug.emulator.enforce import PolicyEnforcer, moto_caller
from remote_debug.emulator.errors import ApiError
from remote_debug.emulator.images import ImageMap
from remote_debug.emulator.server import Call, Forward, Front
from remote_debug.emulator.sigv4 import Keys
from remote_debug.emulator.ssm_channel import SHELL_DOCUMENT, DataChannelServer
from remote_debug.emulator.ssm_shell import open_shell
from remote_debug.emulator.training import AGENT_DELAY, TrainingJobs

CREDENTIALS_FILE = "credentials.env"  # in the state dir, 0600: the lines to export, for scripts and tests
ACCOUNT_ID = "123456789012"  # moto's default account: S3, IAM and STS answers name it too
DEFAULT_REGION = "us-east-1"
# X-Amz-Target prefixes -> botocore service names: the services whose operations the front serves (see
# _routes), and those left to moto whose requests it holds to AWS's server-side constraints first
SERVED_TARGETS = {"SageMaker": "sagemaker", "AmazonSSM": "ssm"}
CHECKED_TARGETS = {"Logs_20140328": "logs"}
SSH_DOCUMENT = "AWS-StartSSHSession"
PORT_FORWARDING_DOCUMENT = "AWS-StartPortForwardingSession"
SESSION_DOCUMENTS = (SSH_DOCUMENT, PORT_FORWARDING_DOCUMENT, SHELL_DOCUMENT)
_TRAINING_JOB_ARN = re.compile(r"^arn:aws[a-z-]*:sagemaker:[a-z0-9-]+:\d{12}:training-job/")
_OWNER = re.compile(r"[^A-Za-z0-9_.@+=-]")


# StartSession's rate per account and region, as a token bucket: (tokens per second, burst).  AWS throttles it
# (ThrottlingException, "Rate exceeded"); the numbers are a model of a per-account API quota, not AWS's own.
SESSION_RATE = (3.0, 5)


class Throttle:
    """A token bucket per region: ``take`` answers ThrottlingException as AWS does once the burst is spent."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate, self.burst = rate, burst
        self._tokens: dict[str, tuple[float, float]] = {}  # region -> (tokens, when counted)
        self._lock = threading.Lock()

    def take(self, region: str) -> None:
        with self._lock:
            now = time.monotonic()
            tokens, then = self._tokens.get(region, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - then) * self.rate)
            if tokens < 1:
                self._tokens[region] = (tokens, now)
                raise ApiError("ThrottlingException", "Rate exceeded")
            self._tokens[region] = (tokens - 1, now)


class Emulator:
    def __init__(
        self,
        state_dir: Path,
        *,
        port: int = 0,
        region: str = DEFAULT_REGION,
        images: ImageMap | None = None,
        log_delay: float = 0.5,
        policy: list[dict[str, Any]] | None = None,
        agent_delay: float = AGENT_DELAY,
        session_rate: tuple[float, int] = SESSION_RATE,
        ssh_document: bool = True,
        keys: Keys | None = None,
    ) -> None:
        self.state_dir = state_dir
        # the only key (besides those made inside the emulator, see _secret_of) its API accepts: fresh per start
        self.keys = keys or Keys.generate()
        self.policy = policy  # identity policies every caller is held to (the --policy mode); None: no IAM
        self.port = port
        self.region = region
        self.images = images or ImageMap.default()
        self.log_delay = log_delay
        self.agent_delay = agent_delay  # seconds from Training (or from remote debug turned on) to sessions
        # False: native targets refuse AWS-StartSSHSession, which AWS does not document for them (shell sessions
        # and, in its samples, port forwarding only): what the product's port-forwarding fallback is for
        self.ssh_document = ssh_document
        self._sessions_throttle = Throttle(*session_rate)
        self._http: GatedWSGIServer | None = None
        self._thread: threading.Thread | None = None
        self.uids = admitted_uids()  # who may connect at all: the emulator's user and root
        self.channel = DataChannelServer(LOOPBACK, uids=self.uids)
        # one TrainingJobs per region, as AWS keeps them: a job, its ARN, its logs and its SSM targets live in
        # the region of the request that created it, and are unknown in every other region
        self._regions: dict[str, TrainingJobs] = {}
        self._regions_lock = threading.Lock()
        self._closing = False
        self._janitor: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        if self._http is None:
            raise RuntimeError("the emulator is not started")
        return f"http://{LOOPBACK}:{self._http.server_port}"

    def start(self) -> str:
        """Bind, start serving in a background thread, return the endpoint URL.  Raises StateDirError for a
        state dir that is not ours (or a symlink), OSError when the port is taken."""
        secure_dir(self.state_dir)
        front = Front(
            DomainDispatcherApplication(create_backend_app),
            SERVED_TARGETS,
            checked=CHECKED_TARGETS,
            authorize=self._enforcer(),
            secret_of=self._secret_of,
        )
        self._http = GatedWSGIServer(LOOPBACK, self.port, front, handler=MotoRequestHandler)
        self._http.uids = self.uids
        self._janitor = janitor.start(self.state_dir)  # cleans up if this process dies without close()
        exports = {**self.credentials_env(), "AWS_DEFAULT_REGION": self.region}
        write_private(self.state_dir / CREDENTIALS_FILE, "".join(f"{k}={v}\n" for k, v in exports.items()))
        self.channel.start()
        self.jobs_in(self.region)
        self._routes(front)
        self._thread = threading.Thread(target=self._http.serve_forever, name="emulator-http", daemon=True)
        self._thread.start()
        return self.url

    def close(self) -> None:
        """Stop the jobs (of every region), the sessions and the listeners; idempotent."""
        with self._regions_lock:
            self._closing = True
            regions = list(self._regions.values())
        for jobs in regions:
            jobs.shutdown()
        if self._janitor is not None:
            janitor.dismiss(self._janitor)
            self._janitor = None
        self.channel.close()
        if self._http is not None and self._thread is not None:
            self._http.shutdown()
            self._thread.join()
            self._http.server_close()
            self._thread = None

    def credentials_env(self) -> dict[str, str]:
        """What a client exports to use the emulator: its endpoint and its keys."""
        return {"AWS_ENDPOINT_URL": self.url, **self.keys.env()}

    def _secret_of(self, access_key: str) -> str | None:
        """The secret of ``access_key``: ours, or one made inside the emulator by a caller who had ours (moto's
        IAM users' keys, STS sessions): the --policy mode's callers."""
        if access_key == self.keys.access_key_id:
            return self.keys.secret_access_key
        return moto_secret(access_key)

    @property
    def jobs(self) -> TrainingJobs:
        """The training jobs of the emulator's default region."""
        return self.jobs_in(self.region)

    def jobs_in(self, region: str) -> TrainingJobs:
        """The training jobs of ``region``, made on its first call.  The default region's live in the state dir,
        any other's under ``regions/<region>/`` (a job name is unique per region, not per account)."""
        with self._regions_lock:
            jobs = self._regions.get(region)
            if jobs is None:
                if self._http is None:
                    raise RuntimeError("the emulator is not started")
                work_dir = self.state_dir if region == self.region else self.state_dir / "regions" / region
                jobs = self._regions[region] = TrainingJobs(
                    work_dir=work_dir,
                    endpoint_url=self.url,
                    region=region,
                    account_id=ACCOUNT_ID,
                    images=self.images,
                    log_delay=self.log_delay,
                    agent_delay=self.agent_delay,
                    keys=self.keys,
                )
                if self._closing:  # a call that raced close(): refused as every new job then is
                    jobs.shutdown()
            return jobs

    def __enter__(self) -> Emulator:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _enforcer(self) -> PolicyEnforcer | None:
        if self.policy is None:
            return None
        return PolicyEnforcer(
            self.policy,
            identify=moto_caller(ACCOUNT_ID),
            tags_of=self._job_tags,
            session_key=lambda session_id: session_id.rpartition("-")[0] or None,
        )

    def _job_tags(self, arn: str) -> dict[str, str] | None:
        """A training job's tags (aws:ResourceTag/...), None for anything else or a job that does not exist."""
        if not _TRAINING_JOB_ARN.match(arn):
            return None
        try:
            return {t["Key"]: t["Value"] for t in self.jobs_in(arn.split(":")[3]).list_tags(arn)}
        except ApiError:
            return None

    # --- the operations served here, not by moto -------------------------------------------------

    def _routes(self, front: Front) -> None:
        sm = "sagemaker"
        front.route(sm, "CreateTrainingJob", lambda c: self.jobs_in(c.region).create(c.params))
        front.route(sm, "DescribeTrainingJob", lambda c: self.jobs_in(c.region).describe(c.params["TrainingJobName"]))
        front.route(sm, "ListTrainingJobs", lambda c: self.jobs_in(c.region).list(c.params))
        front.route(sm, "StopTrainingJob", self._stop)
        front.route(sm, "UpdateTrainingJob", lambda c: self.jobs_in(c.region).update(c.params))
        front.route(sm, "AddTags", self._add_tags)
        front.route(sm, "ListTags", self._list_tags)
        front.route(sm, "DeleteTags", self._delete_tags)
        front.route("ssm", "StartSession", self._start_session)
        front.route("ssm", "ResumeSession", self._resume_session)
        front.route("ssm", "TerminateSession", self._terminate_session)

    def _stop(self, call: Call) -> dict[str, Any]:
        self.jobs_in(call.region).stop(call.params["TrainingJobName"])
        return {}

    def _training_jobs(self, call: Call) -> TrainingJobs:
        # tags of other SageMaker resources (models, endpoints) stay moto's
        if not _TRAINING_JOB_ARN.match(str(call.params.get("ResourceArn", ""))):
            raise Forward
        return self.jobs_in(call.region)  # an ARN of another region is unknown here, as in AWS

    def _add_tags(self, call: Call) -> dict[str, Any]:
        self._training_jobs(call).add_tags(call.params["ResourceArn"], call.params["Tags"])
        return {"Tags": call.params["Tags"]}

    def _list_tags(self, call: Call) -> dict[str, Any]:
        return {"Tags": self._training_jobs(call).list_tags(call.params["ResourceArn"])}

    def _delete_tags(self, call: Call) -> dict[str, Any]:
        self._training_jobs(call).delete_tags(call.params["ResourceArn"], call.params["TagKeys"])
        return {}

    def _start_session(self, call: Call) -> dict[str, Any]:
        jobs = self.jobs_in(call.region)
        self._sessions_throttle.take(call.region)
        target = call.params["Target"]
        document = call.params.get("DocumentName", SHELL_DOCUMENT)
        if document not in SESSION_DOCUMENTS:
            raise ApiError(
                "ValidationException",
                f"the emulator serves the documents {', '.join(SESSION_DOCUMENTS)}, not {document}",
            )
        if document == SSH_DOCUMENT and not self.ssh_document:
            raise ApiError(
                "InvalidDocument",
                f"Document {SSH_DOCUMENT} is not supported for target {target}: "
                f"use {PORT_FORWARDING_DOCUMENT} or a shell session",
            )
        owner = _OWNER.sub("", call.access_key)[:64] or "emulator"
        if document == SHELL_DOCUMENT:  # an interactive shell in the node (ssm_shell.py)
            session = open_shell(self.channel, jobs, target, call.params.get("Parameters", {}), owner)
            return {"SessionId": session.session_id, "TokenValue": session.token_value, "StreamUrl": session.stream_url}
        _job, connect = jobs.connector(target)
        try:
            session = self.channel.open_session(
                target=target,
                document=document,
                parameters=call.params.get("Parameters", {}),
                connect=connect,
                owner=owner,
            )
        except ValueError as exc:
            raise ApiError("ValidationException", str(exc)) from None
        return {"SessionId": session.session_id, "TokenValue": session.token_value, "StreamUrl": session.stream_url}

    def _resume_session(self, call: Call) -> dict[str, Any]:
        try:
            session = self.channel.resume(call.params["SessionId"])
        except KeyError:
            raise ApiError("DoesNotExistException", f"session {call.params['SessionId']} does not exist") from None
        return {"SessionId": session.session_id, "TokenValue": session.token_value, "StreamUrl": session.stream_url}

    def _terminate_session(self, call: Call) -> dict[str, Any]:
        # AWS answers a terminated or unknown session's TerminateSession with its id all the same
        self.channel.terminate(call.params["SessionId"])
        return {"SessionId": call.params["SessionId"]}


def moto_secret(access_key: str) -> str | None:
    """The secret moto's IAM (create-access-key) or STS (assume-role, get-session-token) made for ``access_key``."""
    from moto.iam.models import iam_backends
    from moto.sts.models import sts_backends

    for user in list(iam_backends[ACCOUNT_ID]["aws"].users.values()):
        for key in list(user.access_keys):
            if key.access_key_id == access_key and key.status == "Active":
                return str(key.secret_access_key)
    role = sts_backends[ACCOUNT_ID]["aws"].get_assumed_role_from_access_key(access_key)
    return None if role is None else str(role.secret_access_key)
