"""The emulator is no root command service for other local users (issue 29, item 1).

``remote-debug emulator`` runs as root (its nodes are namespaces) and its API starts processes, returns job
secrets and opens shells in nodes.  Before the fix it served every request on its loopback port without
checking a signature: as ``nobody`` (via ``setpriv``), one unsigned CreateTrainingJob with a
``ContainerEntrypoint`` ran ``id`` as root, DescribeTrainingJob returned a job's Environment (its secret),
StartSession opened a root shell in a node, ResumeSession handed out a fresh token for anyone's session and
TerminateSession ended it; the state dir (the README put it under /tmp) was world-readable and held the job
requests.  Now: SigV4 with the emulator's own generated key on every request, a peer-uid gate on its listeners
(the HTTP API and the SSM data channel), and a 0700 state dir with 0600 files, refused when it is not ours.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from remote_debug.emulator.access import StateDirError
from remote_debug.emulator.nodes import available
from remote_debug.emulator.service import CREDENTIALS_FILE, Emulator
from tests.helpers.second_user import needs_second_user, nobody, python_as_nobody

WHY_NO_NODES = available()
pytestmark = [
    needs_second_user,
    pytest.mark.skipif(WHY_NO_NODES is not None, reason=f"emulated nodes unavailable: {WHY_NO_NODES}"),
    pytest.mark.timeout(300),
]
REGION = "us-east-1"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/byoc:1"
ROLE = "arn:aws:iam::123456789012:role/R"
SECRET = "rd-job-secret-0123456789abcdef-DOORS"  # what the victim's job carries in its Environment
VICTIM = "victim-job"

# The attacker: the system's Python as nobody, stdlib only.  Sends each request (prepared by the test: raw,
# unsigned, or signed with a key the attacker guessed) and reports the status and body, or the error.
ATTACKER = r"""
import json, socket, sys, urllib.request, urllib.error
out = []
for r in json.loads(sys.argv[1]):
    if r.get("raw"):  # bytes on a socket, the first line of the answer back
        try:
            s = socket.create_connection(("127.0.0.1", r["port"]), timeout=10)
            s.sendall(r["raw"].encode())
            data = b""
            while b"\r\n" not in data:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
            text = data.decode(errors="replace")
            out.append({"status": text.split("\r\n")[0], "body": text})
        except OSError as exc:
            out.append({"error": repr(exc)})
        continue
    req = urllib.request.Request(r["url"], data=r["body"].encode(), headers=r["headers"], method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as answer:
            out.append({"status": answer.status, "body": answer.read().decode(errors="replace")})
    except urllib.error.HTTPError as exc:
        out.append({"status": exc.code, "body": exc.read().decode(errors="replace")})
    except Exception as exc:
        out.append({"error": repr(exc)})
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def shared() -> Iterator[Path]:
    """A folder like /tmp that nobody can reach: where the README put the emulator's state, and the marker."""
    folder = Path(tempfile.mkdtemp(prefix="rd-emulator-doors-", dir="/tmp"))
    os.chmod(folder, 0o1777)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def emulator(shared: Path) -> Iterator[Emulator]:
    """The emulator (as root, as users run it) with the victim's job in Training, remote debug on."""
    service = Emulator(shared / "state", region=REGION, log_delay=0.1, agent_delay=0.0)
    try:
        service.start()
        client(service, "s3").create_bucket(Bucket="doors")
        client(service, "sagemaker").create_training_job(**job_request(VICTIM, "import time; time.sleep(600)"))
        deadline = time.monotonic() + 60
        while client(service, "sagemaker").describe_training_job(TrainingJobName=VICTIM)["SecondaryStatus"] != (
            "Training"
        ):
            assert time.monotonic() < deadline, "the victim's job never reached Training"
            time.sleep(0.2)
        yield service
    finally:
        service.close()


def client(service: Emulator, name: str) -> Any:
    keys = service.keys
    return boto3.client(
        name,
        endpoint_url=service.url,
        region_name=REGION,
        aws_access_key_id=keys.access_key_id,
        aws_secret_access_key=keys.secret_access_key,
    )


def job_request(name: str, code: str, entrypoint: list[str] | None = None) -> dict[str, Any]:
    return {
        "TrainingJobName": name,
        "RoleArn": ROLE,
        "AlgorithmSpecification": {
            "TrainingImage": IMAGE,
            "TrainingInputMode": "File",
            "ContainerEntrypoint": entrypoint or [sys.executable, "-c", code],
        },
        "OutputDataConfig": {"S3OutputPath": "s3://doors/out"},
        "ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 1},
        "StoppingCondition": {"MaxRuntimeInSeconds": 900},
        "Environment": {"REMOTE_DEBUG_JOB_SECRET": SECRET},
        "RemoteDebugConfig": {"EnableRemoteDebug": True},
    }


def request(url: str, target: str, params: dict[str, Any], key: tuple[str, str] | None = None) -> dict[str, Any]:
    """A JSON-protocol request: unsigned, or signed with ``key`` (access key id, secret) as botocore signs."""
    service = "ssm" if target.startswith("AmazonSSM.") else "sagemaker"
    body = json.dumps(params)
    headers = {"X-Amz-Target": target, "Content-Type": "application/x-amz-json-1.1"}
    if key is not None:
        signing = AWSRequest(method="POST", url=url, data=body.encode(), headers=headers)
        SigV4Auth(Credentials(*key), service, REGION).add_auth(signing)
        headers = dict(signing.headers.items())
    return {"url": url, "headers": headers, "body": body}


def as_nobody(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    done = subprocess.run(
        python_as_nobody(ATTACKER, json.dumps(requests)), capture_output=True, text=True, timeout=120, check=True
    )
    answers: list[dict[str, Any]] = json.loads(done.stdout)
    return answers


def as_root(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same requests from our own uid: past the uid gate, so only the signature check stands."""
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", ATTACKER, json.dumps(requests)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    answers: list[dict[str, Any]] = json.loads(done.stdout)
    return answers


def refused(answer: dict[str, Any]) -> bool:
    """Closed before an answer (the uid gate) or a 4xx refusal (the signature check)."""
    return "error" in answer or (isinstance(answer.get("status"), int) and 400 <= answer["status"] < 500)


def job_names(service: Emulator) -> list[str]:
    summaries = client(service, "sagemaker").list_training_jobs()["TrainingJobSummaries"]
    return [s["TrainingJobName"] for s in summaries]


def test_an_unsigned_create_training_job_from_nobody_runs_nothing(emulator: Emulator, shared: Path) -> None:
    marker = shared / "pwned-unsigned"
    attack = job_request("pwned-unsigned", "", ["/bin/sh", "-c", f"id > {marker}"])
    [answer] = as_nobody([request(emulator.url, "SageMaker.CreateTrainingJob", attack)])
    time.sleep(2)  # a job that was created would have run by now
    assert refused(answer), answer
    assert "pwned-unsigned" not in job_names(emulator) and not marker.exists()


def test_a_request_signed_with_a_guessed_key_is_refused(emulator: Emulator, shared: Path) -> None:
    marker = shared / "pwned-guessed"
    attack = job_request("pwned-guessed", "", ["/bin/sh", "-c", f"id > {marker}"])
    guesses = [("testing", "testing"), (emulator.keys.access_key_id, "not-the-secret")]  # the old documented keys
    from_nobody = as_nobody([request(emulator.url, "SageMaker.CreateTrainingJob", attack, key) for key in guesses])
    from_us = as_root([request(emulator.url, "SageMaker.CreateTrainingJob", attack, key) for key in guesses])
    time.sleep(2)
    assert all(refused(a) for a in from_nobody), from_nobody
    # from our own uid the signature check alone refuses them, in AWS's words
    assert [(a["status"], json.loads(a["body"])["__type"]) for a in from_us] == [
        (403, "UnrecognizedClientException"),
        (403, "InvalidSignatureException"),
    ], from_us
    assert "pwned-guessed" not in job_names(emulator) and not marker.exists()
    with pytest.raises(ClientError, match="UnrecognizedClientException"):  # boto3 with the old documented keys
        boto3.client(
            "sagemaker",
            endpoint_url=emulator.url,
            region_name=REGION,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        ).list_training_jobs()


def test_describe_training_job_does_not_give_nobody_the_job_secret(emulator: Emulator) -> None:
    describe = {"TrainingJobName": VICTIM}
    answers = as_nobody(
        [
            request(emulator.url, "SageMaker.DescribeTrainingJob", describe),
            request(emulator.url, "SageMaker.DescribeTrainingJob", describe, ("testing", "testing")),
        ]
    )
    assert all(refused(a) for a in answers), answers
    assert SECRET not in json.dumps(answers)
    # the job's owner still sees it
    environment = client(emulator, "sagemaker").describe_training_job(TrainingJobName=VICTIM)["Environment"]
    assert environment["REMOTE_DEBUG_JOB_SECRET"] == SECRET


def test_nobody_cannot_open_resume_or_end_a_session(emulator: Emulator) -> None:
    target = f"sagemaker-training-job:{VICTIM}_algo-1"
    ssm = client(emulator, "ssm")
    victim = ssm.start_session(
        Target=target, DocumentName="AWS-StartPortForwardingSession", Parameters={"portNumber": ["22"]}
    )
    session_id = victim["SessionId"]
    before = [s for s in emulator.channel.sessions() if s.session_id == session_id]
    try:
        answers = as_nobody(
            [
                request(emulator.url, "AmazonSSM.StartSession", {"Target": target}),  # a root shell in the node
                request(emulator.url, "AmazonSSM.ResumeSession", {"SessionId": session_id}),
                request(emulator.url, "AmazonSSM.TerminateSession", {"SessionId": session_id}),
                request(emulator.url, "AmazonSSM.StartSession", {"Target": target}, ("testing", "testing")),
            ]
        )
        assert all(refused(a) for a in answers), answers
        assert not any("TokenValue" in a.get("body", "") for a in answers)
        # the victim's session is as it was: not ended, its token not replaced; no session of nobody's
        assert [s for s in emulator.channel.sessions() if s.session_id == session_id] == before
        assert [s.session_id for s in emulator.channel.sessions()] == [session_id]
        # the data channel (the plugin's WebSocket) does not even let nobody knock with the victim's URL
        path = victim["StreamUrl"].split(str(emulator.channel.port), 1)[1]
        [knock] = as_nobody(
            [
                {
                    "raw": f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                    "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                    "Sec-WebSocket-Version: 13\r\n\r\n",
                    "port": emulator.channel.port,
                }
            ]
        )
        assert "101" not in knock.get("status", ""), knock
    finally:
        ssm.terminate_session(SessionId=session_id)


def test_the_state_dir_and_its_secrets_are_closed_to_nobody(emulator: Emulator) -> None:
    state = emulator.state_dir
    secret_files = [state / CREDENTIALS_FILE, state / "jobs" / VICTIM / "describe.json"]
    assert all(f.is_file() for f in secret_files)
    assert SECRET in secret_files[1].read_text() and emulator.keys.secret_access_key in secret_files[0].read_text()
    probe = (
        "import json, os, sys\nfound = []\n"
        "for top, dirs, files in os.walk(sys.argv[1], onerror=lambda e: found.append('denied ' + str(e))):\n"
        "    for name in files:\n"
        "        try:\n            found.append(open(os.path.join(top, name), errors='replace').read())\n"
        "        except OSError as exc:\n            found.append('denied ' + str(exc))\n"
        "for path in sys.argv[2:]:\n"
        "    try:\n        found.append(open(path).read())\n"
        "    except OSError as exc:\n        found.append('denied ' + str(exc))\n"
        "print(json.dumps(found))"
    )
    done = subprocess.run(
        python_as_nobody(probe, str(state), *map(str, secret_files)),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    seen = json.loads(done.stdout)
    assert SECRET not in done.stdout and emulator.keys.secret_access_key not in done.stdout
    assert seen and all(entry.startswith("denied ") for entry in seen), seen[:3]
    assert (os.lstat(state).st_mode & 0o777) == 0o700
    assert all((os.lstat(f).st_mode & 0o777) == 0o600 for f in secret_files)


def test_a_state_dir_of_another_user_or_a_symlink_is_refused(shared: Path) -> None:
    theirs = shared / "theirs"
    theirs.mkdir()
    os.chown(theirs, nobody().pw_uid, nobody().pw_gid)
    link = shared / "link"
    link.symlink_to(theirs)
    for state, words in ((theirs, "belongs to uid"), (link, "is a symlink")):
        service = Emulator(state, region=REGION)
        try:
            with pytest.raises(StateDirError, match=words):
                service.start()
        finally:
            service.close()
        assert list(theirs.iterdir()) == [] and os.lstat(theirs).st_uid == nobody().pw_uid  # left as it was
    cli = subprocess.run(
        [sys.executable, "-m", "remote_debug", "emulator", "--state", str(link)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    lines = cli.stderr.strip().splitlines()
    assert cli.returncode == 2 and len(lines) == 1 and "is a symlink" in lines[0], (cli.returncode, cli.stderr)
