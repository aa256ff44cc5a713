"""The container side on SageMaker: code dir, sshd installation (behind its seams), the manifest's log
lines, the hybrid registration (up to the amazon-ssm-agent seam) and its signed deregistration."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from remote_debug.container import node_env
from remote_debug.container.node import awscall
from remote_debug.container.node import sshd_install as install
from remote_debug.container.node.hybrid import Activation, HybridError, HybridRegistration
from remote_debug.container.node.publish import ManifestPublisher, lines_enabled
from remote_debug.contract import manifest_lines as mlines
from remote_debug.contract import spec
from tests.helpers.fake_aws import FakeSsm
from tests.helpers.hook_runs import PYTHON, WAIT_SCRIPT, HookRun, wait_for

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJExB6drpej4VU5APPdGydAYq4clP4mmQ5PSEGTtS4BX"
SECRET = "5e" * 32  # the job secret: the key of the manifest lines' MAC


def _lines(text: str, secret: str = SECRET) -> list[mlines.ManifestLine]:
    """The manifest lines in ``text`` (a node's stdout), each proven with the job's ``secret``."""
    return [line for t in text.splitlines() if (line := mlines.parse_manifest_line(t, secret=secret))]


# --- code dir and address ---------------------------------------------------------------------------


def test_code_dir_on_sagemaker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ml = tmp_path / "opt" / "ml"
    toolkit, channel = ml / "code", ml / "input" / "data" / "code"
    channel.mkdir(parents=True)
    (channel / "train.py").write_text("")
    monkeypatch.chdir(tmp_path)
    assert node_env.code_dir({}, ml_root=str(ml)) == str(channel)  # SDK v3: the code channel
    toolkit.mkdir()
    (toolkit / "train.py").write_text("")
    assert node_env.code_dir({}, ml_root=str(ml)) == str(toolkit)  # SDK v2 toolkit / BYOC convention
    monkeypatch.chdir(channel)  # the v3 drivers cd into their channel: where we run decides
    assert node_env.code_dir({}, ml_root=str(ml)) == str(channel)
    assert node_env.code_dir({"REMOTE_DEBUG_CODE_DIR": str(tmp_path)}, ml_root=str(ml)) == str(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert node_env.code_dir({}, ml_root=str(tmp_path / "nothing")) == str(tmp_path)  # cwd, as before


def test_node_address(tmp_path: Path) -> None:
    assert node_env.interface_ipv4("lo") == "127.0.0.1"
    assert node_env.interface_ipv4("no-such-if0") is None
    assert node_env.node_address({"REMOTE_DEBUG_SSHD_ADDRESS": "10.1.2.3"}) == "10.1.2.3"
    config = tmp_path / "resourceconfig.json"
    config.write_text(json.dumps({"current_host": "algo-1", "hosts": ["algo-1"], "network_interface_name": "lo"}))
    assert node_env.node_address({"SM_INPUT_CONFIG_DIR": str(tmp_path)}) == "127.0.0.1"


# --- installing openssh-server (behind seams: no real apt run) -------------------------------------


def _which(*present: str) -> Any:
    return lambda name: f"/usr/bin/{name}" if name in present else None


def test_install_plan_per_image() -> None:
    apt = install.plan_install(_which("apt-get", "yum"), euid=0)
    assert isinstance(apt, install.InstallPlan) and apt.manager == "apt-get"
    assert apt.commands[0] == ["/usr/bin/apt-get", "update", "-qq"]
    assert apt.commands[1][-1] == "openssh-server" and "--no-install-recommends" in apt.commands[1]
    assert apt.env == {"DEBIAN_FRONTEND": "noninteractive"}
    yum = install.plan_install(_which("yum"), euid=0)
    assert isinstance(yum, install.InstallPlan)
    assert yum.commands == [["/usr/bin/yum", "install", "-y", "openssh-server"]]
    assert "needs root" in str(install.plan_install(_which("apt-get"), euid=1000))
    assert "no apt-get, dnf, microdnf or yum" in str(install.plan_install(_which(), euid=0))


def test_install_only_on_sagemaker_unless_told() -> None:
    assert not install.should_install({})  # a local job: never touch the user's machine
    assert install.should_install({"TRAINING_JOB_ARN": "arn:aws:sagemaker:us-west-2:1:training-job/j"})
    assert not install.should_install({"TRAINING_JOB_ARN": "arn:aws:x", install.ENV_INSTALL: "0"})
    assert install.should_install({install.ENV_INSTALL: "1"})


def test_install_steps_log_and_stop_at_the_first_failure(capsys: pytest.CaptureFixture[str]) -> None:
    ran: list[tuple[list[str], str, float]] = []

    def runner(argv: list[str], env: dict[str, str], timeout: float) -> tuple[int, str]:
        ran.append((argv, env.get("DEBIAN_FRONTEND", ""), timeout))
        return (0, "ok") if argv[1] == "update" else (100, "E: Unable to locate package openssh-server")

    reason = install.install_sshd({install.ENV_INSTALL_TIMEOUT: "120"}, which=_which("apt-get"), euid=0, runner=runner)
    assert [argv[1] for argv, _, _ in ran] == ["update", "install"]
    assert ran[0][1] == "noninteractive" and 0 < ran[1][2] <= 120
    assert reason is not None and "apt-get install failed (exit 100): E: Unable to locate package" in reason
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("[remote-debug] sshd is not installed: installing openssh-server with apt-get")
    assert "add openssh-server to the image" in lines[-1]


def test_install_is_bounded_in_time() -> None:
    now = [0.0]

    def runner(argv: list[str], env: dict[str, str], timeout: float) -> tuple[int, str]:
        now[0] += 50  # apt-get update ate the budget
        return 0, ""

    reason = install.install_sshd(
        {install.ENV_INSTALL_TIMEOUT: "40"}, which=_which("apt-get"), euid=0, runner=runner, clock=lambda: now[0]
    )
    assert reason is not None and "timed out after 40 s" in reason


def test_install_success_and_real_runner_timeout(tmp_path: Path) -> None:
    assert install.install_sshd({}, which=_which("dnf"), euid=0, runner=lambda a, e, t: (0, "Complete!")) is None
    code, detail = install.run_command(["sleep", "5"], dict(os.environ), 0.3)
    assert (code, detail) == (124, "timed out after 0.3 s")


def test_missing_sshd_on_sagemaker_is_installed_in_the_background(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """The decision in the node services: no sshd binary, on SageMaker -> the installer seam runs
    (training would not wait for it), then sshd starts and is published."""
    if shutil.which("sshd") is None and not Path("/usr/sbin/sshd").exists():
        pytest.skip("sshd is not installed")
    from remote_debug.container.node import services as node_module
    from remote_debug.container.node import sshd_install as install
    from remote_debug.container.node.sshd import find_sshd as real_find

    installed: list[str] = []

    def install_sshd(env: object) -> None:
        installed.append("yes")

    monkeypatch.setattr(node_module, "find_sshd", lambda: str(tmp_path / "no-sshd-yet"))
    monkeypatch.setattr(install, "install_sshd", install_sshd)
    env = {
        **spec.DebugSpec(
            job_name="inst", client_public_key=KEY, job_secret=SECRET, transport=spec.Transport.SSM
        ).to_env(),
        "TRAINING_JOB_ARN": "arn:aws:sagemaker:us-west-2:123456789012:training-job/inst",
        spec.ENV_MANIFEST_DIR: str(tmp_path / "manifest"),
        spec.ENV_STATE_DIR: str(tmp_path / "state"),
        "SM_INPUT_CONFIG_DIR": str(tmp_path),
        "PATH": os.environ["PATH"],
    }
    services = node_module.NodeServices(spec.DebugSpec.from_env(env), env)  # type: ignore[arg-type]
    try:
        services.start()
        assert services.installer is not None
        services.installer.join(30)
        assert installed == ["yes"] and services.sshd is not None
        argv = services.sshd.process.args
        assert isinstance(argv, list) and real_find() == argv[0]
        node = json.loads((tmp_path / "manifest" / "node.json").read_text())
        assert node["sshd_port"] == services.sshd.port
    finally:
        services.finish(spec.NodeState.COMPLETED, 0)
    out = capfd.readouterr().out
    merged = mlines.merge_manifest_lines(_lines(out))
    assert merged["algo-1"].state == "completed" and merged["algo-1"].sshd_port > 0


# --- the manifest's log lines -----------------------------------------------------------------------


def test_publisher_emits_one_line_per_changed_document(tmp_path: Path) -> None:
    directory = tmp_path / "manifest"
    node = spec.NodeManifest(
        job_name="pub",
        node="algo-1",
        hosts=["algo-1"],
        sshd_host="127.0.0.1",
        sshd_port=2222,
        ssh_user="root",
        host_public_key=KEY,
        code_dir="/opt/ml/code",
    )
    spec.write_node_manifest(directory, node)
    read_fd, write_fd = os.pipe()
    publisher = ManifestPublisher(directory, "algo-1", secret=SECRET, fd=write_fd)
    assert publisher.poll() == 1 and publisher.poll() == 0  # unchanged: nothing new
    spec.write_rank_manifest(directory, spec.RankEndpoint(rank=0, local_rank=0, world_size=1, port=3000, pid=1))
    (directory / "rank-1.json").write_text("{broken")
    assert publisher.poll() == 1
    os.close(write_fd)
    with os.fdopen(read_fd) as fh:
        lines = _lines(fh.read())
    assert [line.seq for line in lines] == [1, 2]
    merged = mlines.merge_manifest_lines(lines)
    assert merged["algo-1"].sshd_port == 2222 and [r.port for r in merged["algo-1"].ranks] == [3000]


def test_publisher_repeats_a_changed_document_a_few_times_then_goes_quiet(tmp_path: Path) -> None:
    """A copy of a document's line at 5, 30 and 120 s after it changed (a line the training toolkit
    cut in two is lost; a later copy lands elsewhere in the output), then nothing until it changes
    again; a late poll writes one copy, not a burst; stopping writes the copies still due."""
    directory = tmp_path / "manifest"
    node = spec.NodeManifest(
        job_name="pub",
        node="algo-1",
        hosts=["algo-1"],
        sshd_host="127.0.0.1",
        sshd_port=2222,
        ssh_user="root",
        host_public_key=KEY,
        code_dir="/opt/ml/code",
    )
    spec.write_node_manifest(directory, node)
    read_fd, write_fd = os.pipe()
    now = [1000.0]
    publisher = ManifestPublisher(directory, "algo-1", secret=SECRET, fd=write_fd, clock=lambda: now[0])
    assert publisher.repeat_after == (5.0, 30.0, 120.0)
    sent = []
    for t in (0, 4.9, 5, 6, 29, 30, 31, 119, 120, 121, 5000):
        now[0] = 1000.0 + t
        sent.append(publisher.poll())
    assert sent == [1, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0]
    spec.write_node_manifest(directory, replace(node, state=spec.NodeState.COMPLETED))  # a change starts a new schedule
    spec.write_rank_manifest(directory, spec.RankEndpoint(rank=0, local_rank=0, world_size=1, port=3000, pid=1))
    assert publisher.poll() == 2
    now[0] += 200  # a poll long overdue: one copy of each, not three
    assert publisher.poll() == 2 and publisher.poll() == 0
    spec.write_node_manifest(directory, replace(node, state=spec.NodeState.STOPPED))
    publisher.stop()  # the final state, then its copy at once: there is no later
    os.close(write_fd)
    with os.fdopen(read_fd) as fh:
        raw = fh.read().splitlines()
    lines = [mlines.parse_manifest_line(text, secret=SECRET) for text in raw]
    assert len(raw) == 4 + 2 + 2 + 2
    assert len(set(raw[:4])) == 1  # copies are the same line, byte for byte (same boot and seq)
    assert [line.document.state for line in lines[-2:] if line] == ["stopped", "stopped"]


def test_lines_only_for_sagemaker_transports() -> None:
    local = spec.DebugSpec(job_name="j", client_public_key=KEY, job_secret=SECRET)
    assert not lines_enabled(local, {}) and lines_enabled(local, {"REMOTE_DEBUG_MANIFEST_LINES": "1"})
    ssm = spec.DebugSpec(job_name="j", client_public_key=KEY, job_secret=SECRET, transport=spec.Transport.SSM)
    assert lines_enabled(ssm, {})


@pytest.mark.parametrize("transport", ["ssm", "direct"])
def test_hook_publishes_node_and_rank_lines_on_stdout(run: HookRun, transport: str) -> None:
    run.env[spec.ENV_TRANSPORT] = transport
    run.env["REMOTE_DEBUG_SSHD_ADDRESS"] = "127.0.0.2"  # direct: sshd on the node's "VPC" address
    script = run.root / "train.py"
    script.write_text(WAIT_SCRIPT)
    run.start(PYTHON, str(script), str(run.marks))
    wait_for(lambda: (run.marks / "started").exists(), 60, "the command to start")

    def published() -> dict[str, spec.NodeManifest] | None:
        merged = mlines.merge_manifest_lines(_lines(run.stdout, run.env[spec.ENV_JOB_SECRET]))
        node = merged.get("algo-1")
        return merged if node is not None and node.sshd_port and node.ranks else None

    merged = wait_for(published, 30, "node and rank lines on stdout")
    node = merged["algo-1"]
    assert node.sshd_host == ("127.0.0.2" if transport == "direct" else "127.0.0.1")
    assert node.host_public_key.startswith("ssh-ed25519 ") and node.ranks[0].port > 0
    assert node.state == "running"
    run.release()
    assert run.wait(30) == 0
    final = mlines.merge_manifest_lines(_lines(run.stdout, run.env[spec.ENV_JOB_SECRET]))
    assert final["algo-1"].state == "completed" and final["algo-1"].exit_code == 0
    assert final["algo-1"].ranks[0].state == "finished"
    assert "[remote-debug] manifest" not in run.stderr  # the channel is stdout; diagnostics stay on stderr


def test_local_transport_prints_no_lines(run: HookRun) -> None:
    script = run.root / "train.py"
    script.write_text("print('hello')\n")
    run.start(PYTHON, str(script))
    assert run.wait(60) == 0
    assert run.stdout == "hello\n"


# --- hybrid: registration up to the amazon-ssm-agent seam --------------------------------------------


class FakeAgent:
    binary = "/usr/bin/amazon-ssm-agent"

    def __init__(self, present: bool = True) -> None:
        self.present = present
        self.calls: list[str] = []

    def available(self) -> bool:
        return self.present

    def register(self, activation: Activation) -> None:
        self.calls.append(f"register {activation.activation_id} {activation.region}")

    def instance_id(self) -> str:
        return "mi-0123456789abcdef0"

    def start(self) -> None:
        self.calls.append("start")

    def stop(self) -> None:
        self.calls.append("stop")

    def clear(self) -> None:
        self.calls.append("clear")


def _activation(tmp_path: Path) -> dict[str, str]:
    path = tmp_path / "ssm-activation.json"
    path.write_text(json.dumps({"ActivationId": "act-1", "ActivationCode": "CODE-SECRET", "Region": "us-west-2"}))
    return {"REMOTE_DEBUG_SSM_ACTIVATION_FILE": str(path)}


def test_hybrid_registers_and_deregisters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    agent, gone = FakeAgent(), []
    hybrid = HybridRegistration(
        _activation(tmp_path),
        agent=agent,  # type: ignore[arg-type]
        deregister=lambda mi, region: gone.append((mi, region)),
    )
    assert hybrid.start() == "mi-0123456789abcdef0"
    hybrid.stop()
    hybrid.stop()  # idempotent
    assert agent.calls == ["register act-1 us-west-2", "start", "stop", "clear"]
    assert gone == [("mi-0123456789abcdef0", "us-west-2")]
    assert "CODE-SECRET" not in capsys.readouterr().err
    assert "CODE-SECRET" not in repr(Activation.load(_activation(tmp_path)))


def test_hybrid_failures_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(HybridError, match="amazon-ssm-agent is not installed"):
        HybridRegistration(_activation(tmp_path), agent=FakeAgent(present=False)).start()  # type: ignore[arg-type]
    with pytest.raises(HybridError, match="no SSM activation at"):
        HybridRegistration({"REMOTE_DEBUG_SSM_ACTIVATION_FILE": str(tmp_path / "none")}, agent=FakeAgent()).start()  # type: ignore[arg-type]

    def refuse(mi: str, region: str) -> None:
        raise awscall.AwsCallError("DeregisterManagedInstance failed: HTTP 400 AccessDenied")

    hybrid = HybridRegistration(_activation(tmp_path), agent=FakeAgent(), deregister=refuse)  # type: ignore[arg-type]
    hybrid.start()
    hybrid.stop()
    err = capsys.readouterr().err
    assert "aws ssm deregister-managed-instance --instance-id mi-0123456789abcdef0 --region us-west-2" in err


def test_deregistration_is_a_correctly_signed_call(tmp_path: Path) -> None:
    """The stdlib SigV4 signature equals botocore's, and the call reaches a (fake) SSM endpoint."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    body = json.dumps({"InstanceId": "mi-0123456789abcdef0"}).encode()
    url = "https://ssm.us-west-2.amazonaws.com/"
    headers = {"Content-Type": "application/x-amz-json-1.1", "X-Amz-Target": "AmazonSSM.DeregisterManagedInstance"}
    creds = awscall.Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "session-token")
    ours = awscall.sign(
        method="POST",
        url=url,
        headers=headers,
        body=body,
        region="us-west-2",
        service="ssm",
        credentials=creds,
        amz_date="20260101T120000Z",
    )
    request = AWSRequest("POST", url, data=body, headers={**headers, "X-Amz-Date": "20260101T120000Z"})
    request.context["timestamp"] = "20260101T120000Z"
    auth = SigV4Auth(Credentials(creds.access_key, creds.secret_key, creds.token), "ssm", "us-west-2")
    request.headers["X-Amz-Security-Token"] = "session-token"
    request.headers["Host"] = "ssm.us-west-2.amazonaws.com"
    canonical = auth.canonical_request(request)
    expected = auth.signature(auth.string_to_sign(request, canonical), request)
    assert ours["Authorization"].endswith(f"Signature={expected}")

    with FakeSsm() as fake:
        env = {"AWS_ENDPOINT_URL_SSM": fake.url, "AWS_ACCESS_KEY_ID": "AKID", "AWS_SECRET_ACCESS_KEY": "secret"}
        assert (
            awscall.call_ssm("DeregisterManagedInstance", {"InstanceId": "mi-0123456789abcdef0"}, "us-west-2", env)
            == {}
        )
        assert fake.calls("DeregisterManagedInstance") == [{"InstanceId": "mi-0123456789abcdef0"}]
        fake.failures["DeregisterManagedInstance"] = (400, "InvalidInstanceId", "no such instance")
        with pytest.raises(awscall.AwsCallError, match=r"HTTP 400.*InvalidInstanceId"):
            awscall.call_ssm("DeregisterManagedInstance", {"InstanceId": "mi-0123456789abcdef0"}, "us-west-2", env)


def test_the_containers_calls_use_the_sdks_credential_chain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Credentials from a source only the SDK knows (a shared credentials file, as a web identity or pod identity
    would be): the stdlib signer found none ("no AWS credentials in the container"); with boto3 in the image (AWS's
    DLCs ship it), the deregistration is made and signed with them."""
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    credentials = tmp_path / "credentials"
    credentials.write_text("[default]\naws_access_key_id = AKIAFROMTHEFILE\naws_secret_access_key = secret\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(awscall.AwsCallError, match="no AWS credentials in the container"):
        awscall.credentials_from(os.environ)  # what the stdlib path alone can find
    with FakeSsm() as fake:
        monkeypatch.setenv("AWS_ENDPOINT_URL_SSM", fake.url)
        assert awscall.call_ssm("DeregisterManagedInstance", {"InstanceId": "mi-0123456789abcdef0"}, "us-west-2") == {}
        assert fake.calls("DeregisterManagedInstance") == [{"InstanceId": "mi-0123456789abcdef0"}]
        assert fake.signers == ["AKIAFROMTHEFILE"]
        fake.failures["DeregisterManagedInstance"] = (400, "InvalidInstanceId", "no such instance")
        with pytest.raises(awscall.AwsCallError, match=r"HTTP 400 InvalidInstanceId") as refused:
            awscall.call_ssm("DeregisterManagedInstance", {"InstanceId": "mi-0123456789abcdef0"}, "us-west-2")
        assert refused.value.code == "InvalidInstanceId"


def test_container_credentials_endpoint(tmp_path: Path) -> None:
    with pytest.raises(awscall.AwsCallError, match="no AWS credentials in the container"):
        awscall.credentials_from({})
    server = subprocess.Popen(
        [
            PYTHON,
            "-c",
            "import http.server, json\n"
            "class H(http.server.BaseHTTPRequestHandler):\n"
            "    def log_message(self, *a): pass\n"
            "    def do_GET(self):\n"
            "        body = json.dumps({'AccessKeyId': 'AK', 'SecretAccessKey': 'SK', 'Token': 'T',\n"
            "                           'path': self.path})\n"
            "        self.send_response(200); self.end_headers(); self.wfile.write(body.encode())\n"
            "s = http.server.HTTPServer(('127.0.0.1', 0), H); print(s.server_address[1], flush=True)\n"
            "s.handle_request()\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        creds = awscall.credentials_from({"AWS_CONTAINER_CREDENTIALS_FULL_URI": f"http://127.0.0.1:{port}/creds"})
        assert creds == awscall.Credentials("AK", "SK", "T")
    finally:
        server.kill()
        server.communicate()  # reaps it and closes its stdout pipe


def test_hybrid_node_publishes_its_managed_instance_and_deregisters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    from remote_debug.container.node import services as node_module

    gone: list[str] = []
    monkeypatch.setattr(
        node_module,
        "HybridRegistration",
        lambda env: HybridRegistration(
            {**env, **_activation(tmp_path)},
            agent=FakeAgent(),  # type: ignore[arg-type]
            deregister=lambda mi, region: gone.append(mi),
        ),
    )
    env = {
        **spec.DebugSpec(
            job_name="hyb", client_public_key=KEY, job_secret=SECRET, transport=spec.Transport.HYBRID
        ).to_env(),
        spec.ENV_MANIFEST_DIR: str(tmp_path / "manifest"),
        spec.ENV_STATE_DIR: str(tmp_path / "state"),
        "SM_INPUT_CONFIG_DIR": str(tmp_path),
        "PATH": os.environ["PATH"],
    }
    services = node_module.NodeServices(spec.DebugSpec.from_env(env), env)  # type: ignore[arg-type]
    try:
        services.start()
        wait_for(
            lambda: json.loads((tmp_path / "manifest" / "node.json").read_text())["ssm_target"],
            30,
            "the managed instance id in the manifest",
        )
    finally:
        services.finish(spec.NodeState.COMPLETED, 0)
    assert gone == ["mi-0123456789abcdef0"]
    lines = _lines(capfd.readouterr().out)
    assert mlines.merge_manifest_lines(lines)["algo-1"].ssm_target == "mi-0123456789abcdef0"
