"""Pure pieces of the container side: node identity, rank identity, launcher detection, sshd setup."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest

from remote_debug.container import node_env
from remote_debug.container.node.hook import child_env, exit_code_of
from remote_debug.container.node.sshd import SshdError, prepare_state_dir, render_config, start_sshd
from remote_debug.container.rank.agent import launcher_of, rank_identity
from remote_debug.container.rank.reporter import RankIdentity
from remote_debug.contract import spec
from tests.helpers.hook_runs import PYTHON, alive, listen_addresses, make_key, wait_for

# --- node identity ---------------------------------------------------------------------------------


def _config_dir(tmp_path: Path, data: object) -> dict[str, str]:
    (tmp_path / "resourceconfig.json").write_text(json.dumps(data))
    return {"SM_INPUT_CONFIG_DIR": str(tmp_path)}


def test_node_from_resourceconfig_wins_over_forwarded_env(tmp_path: Path) -> None:
    # mpirun -x forwards the master's SM_* to every rank (tests/container/test_toolkit_mpi.py)
    env = {
        **_config_dir(tmp_path, {"current_host": "algo-2", "hosts": ["algo-1", "algo-2"]}),
        "SM_CURRENT_HOST": "algo-1",
        "SM_HOSTS": '["algo-1", "algo-2"]',
    }
    assert node_env.identify(env) == node_env.NodeIdentity("algo-2", ["algo-1", "algo-2"])


def test_node_from_sagemaker_env_without_resourceconfig(tmp_path: Path) -> None:
    env = {
        "SM_INPUT_CONFIG_DIR": str(tmp_path / "missing"),
        "SM_CURRENT_HOST": "algo-2",
        "SM_HOSTS": '["algo-1", "algo-2"]',
    }
    assert node_env.identify(env) == node_env.NodeIdentity("algo-2", ["algo-1", "algo-2"])
    partial = {**_config_dir(tmp_path, {"hosts": ["algo-1", "algo-2", "algo-3"]}), "SM_CURRENT_HOST": "algo-3"}
    assert node_env.identify(partial) == node_env.NodeIdentity("algo-3", ["algo-1", "algo-2", "algo-3"])


def test_node_from_resourceconfig(tmp_path: Path) -> None:
    env = _config_dir(tmp_path, {"current_host": "algo-3", "hosts": ["algo-1", "algo-2", "algo-3"]})
    assert node_env.identify(env) == node_env.NodeIdentity("algo-3", ["algo-1", "algo-2", "algo-3"])


def test_node_defaults_without_config(tmp_path: Path) -> None:
    env = {"SM_INPUT_CONFIG_DIR": str(tmp_path / "missing"), "SM_HOSTS": "not json"}
    assert node_env.identify(env) == node_env.NodeIdentity("algo-1", ["algo-1"])


def test_broken_resourceconfig_falls_back(tmp_path: Path) -> None:
    (tmp_path / "resourceconfig.json").write_text("{broken")
    assert node_env.identify({"SM_INPUT_CONFIG_DIR": str(tmp_path)}).node == "algo-1"


def test_odd_node_names_are_made_safe() -> None:
    assert node_env.safe_node_name("algo-1") == "algo-1"
    assert node_env.safe_node_name("host with/slash") == "host-with-slash"
    assert node_env.safe_node_name("///") == "algo-1"


def test_code_dir_and_manifest_dir(tmp_path: Path) -> None:
    assert node_env.code_dir({"REMOTE_DEBUG_CODE_DIR": str(tmp_path)}) == str(tmp_path)
    assert node_env.code_dir({}) == os.getcwd()
    assert node_env.manifest_dir("job", "algo-1", {"REMOTE_DEBUG_MANIFEST_DIR": str(tmp_path)}) == tmp_path
    assert node_env.manifest_dir("job", "algo-2", {}).parts[-3:] == ("remote-debug", "job", "algo-2")


# --- rank identity and launchers -------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["python", "-m", "torch.distributed.run", "--nproc_per_node", "2", "train.py"],
        ["python", "-u", "-m", "torch.distributed.launch", "train.py"],
        ["/venv/bin/python", "/venv/bin/torchrun", "--nproc_per_node=2", "train.py"],
        ["python", "-m", "debugpy", "--listen", "5679", "train.py"],
        ["python", "-mpip", "install", "x"],
        ["python", "-m", "remote_debug.container", "--", "python", "train.py"],
        ["python", "-X", "frozen_modules=off", "-m", "pip", "list"],
        ["python", "-c", "import torch; print(torch.__version__)"],
        ["/usr/bin/python3", "/usr/local/bin/train"],  # SageMaker training toolkit
        ["python", "-m", "sagemaker_training.cli.train"],
        ["python3", "/opt/ml/input/data/sm_drivers/distributed_drivers/basic_script_driver.py"],
        ["python3", "/opt/ml/input/data/sm_drivers/scripts/environment.py"],
    ],
)
def test_launchers_are_recognised(argv: list[str]) -> None:
    assert launcher_of(argv) is not None
    assert rank_identity({}, argv) is None


@pytest.mark.parametrize(
    "argv",
    [
        ["python", "train.py", "-m", "pip"],  # arguments of the script are not Python's
        ["python", "-u", "train.py"],
        ["python", "-m", "my_project.train"],
        ["python", "-W", "ignore", "train.py"],
        ["python", "/opt/ml/code/train"],
        ["python", "/opt/ml/code/train.py"],
    ],
)
def test_training_processes_are_not_launchers(argv: list[str]) -> None:
    assert launcher_of(argv) is None
    assert rank_identity({}, argv) == RankIdentity(0, 0, 1)


def test_torchrun_and_mpi_variables() -> None:
    launcher = ["python", "-m", "torch.distributed.run", "train.py"]
    torchrun_env = {"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8"}
    assert rank_identity(torchrun_env, launcher) == RankIdentity(5, 1, 8)
    mpi = {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_SIZE": "4"}
    assert rank_identity(mpi, ["python", "train.py"]) == RankIdentity(3, 0, 4)
    with pytest.raises(ValueError, match="RANK"):
        rank_identity({"RANK": "x"}, ["python", "train.py"])


def test_exit_codes_like_a_shell() -> None:
    assert exit_code_of(0) == 0 and exit_code_of(3) == 3 and exit_code_of(-15) == 143


def test_child_env_prepends_inject_dir(tmp_path: Path) -> None:
    env = child_env({"PYTHONPATH": "/a:/b"}, tmp_path)
    inject, rest = env["PYTHONPATH"].split(os.pathsep, 1)
    assert (Path(inject) / "sitecustomize.py").is_file() and rest == "/a:/b"
    assert env["REMOTE_DEBUG_MANIFEST_DIR"] == str(tmp_path)
    assert env["PYDEVD_DISABLE_FILE_VALIDATION"] == "1"
    assert child_env({}, tmp_path)["PYTHONPATH"] == inject


# --- sshd ------------------------------------------------------------------------------------------


def test_render_config_is_locked_down(tmp_path: Path) -> None:
    text = render_config(tmp_path, 40022, "someone")
    lines = set(text.splitlines())
    for expected in (
        "Port 40022",
        "ListenAddress 127.0.0.1",
        "UsePAM no",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "AuthenticationMethods publickey",
        "PermitRootLogin prohibit-password",
        "AllowUsers someone",
        "X11Forwarding no",
        f'AuthorizedKeysFile "{tmp_path}/authorized_keys"',
    ):
        assert expected in lines
    assert "0.0.0.0" not in text


def test_state_dir_is_made_private(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    prepare_state_dir(state)
    assert state.stat().st_mode & 0o777 == 0o700


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create a dir owned by someone else")
def test_state_dir_owned_by_someone_else_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    os.chown(state, 65534, 65534)
    with pytest.raises(SshdError, match="owned by uid 65534"):
        prepare_state_dir(state)


def test_sshd_on_a_taken_fixed_port_fails_cleanly(tmp_path: Path) -> None:
    public = make_key(tmp_path / "client")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(SshdError, match=f"127.0.0.1:{port}.*(in use|Cannot bind)"):
            start_sshd(tmp_path / "state", public, port)


def test_sshd_start_and_stop(tmp_path: Path) -> None:
    public = make_key(tmp_path / "client")
    server = start_sshd(tmp_path / "state", public)
    try:
        assert listen_addresses(server.port) == ["0100007F"]
        assert (tmp_path / "state" / "authorized_keys").read_text() == public + "\n"
        assert server.host_public_key.startswith("ssh-ed25519 ") and len(server.host_public_key.split()) == 2
        assert int((tmp_path / "state" / "sshd.pid").read_text()) == server.pid
    finally:
        server.stop()
    assert not alive(server.pid)
    assert listen_addresses(server.port) == []


def test_sshd_dies_with_the_hook(tmp_path: Path) -> None:
    """The parent-death signal: a SIGKILLed hook does not leave its sshd behind."""
    public = make_key(tmp_path / "client")
    code = (
        "import sys; from pathlib import Path; from remote_debug.container.node.sshd import start_sshd\n"
        f"s = start_sshd(Path({str(tmp_path / 'state')!r}), {public!r}); print(s.pid, flush=True)\n"
        "import os, signal; os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    result = subprocess.run(
        [PYTHON, "-c", code], capture_output=True, text=True, timeout=60, cwd=Path(__file__).resolve().parents[2]
    )
    pid = int(result.stdout.split()[0])
    try:
        wait_for(lambda: not alive(pid), 10, "sshd to exit after its parent died")
    finally:
        if alive(pid):
            os.kill(pid, 9)


def test_sshd_retries_when_it_loses_the_race_for_a_free_port(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import remote_debug.container.node.sshd as sshd_module

    public = make_key(tmp_path / "client")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        ports = [taken.getsockname()[1]]  # first "free" port: someone grabbed it meanwhile
        real_free_port = sshd_module.free_port
        monkeypatch.setattr(sshd_module, "free_port", lambda: ports.pop() if ports else real_free_port())
        server = start_sshd(tmp_path / "state", public)
        try:
            assert server.port != taken.getsockname()[1]
            assert "Address already in use" in (tmp_path / "state" / "sshd.log").read_text()
        finally:
            server.stop()


# --- tuning knobs in seconds: one parser, a bad value is logged and the default used ----------------


@pytest.mark.parametrize(
    ("raw", "seconds", "logged"),
    [
        ("", 7200.0, False),
        ("0", 0.0, False),
        ("60", 60.0, False),
        ("soon", 7200.0, True),
        ("-5", 7200.0, True),
        ("nan", 7200.0, True),
        ("inf", 7200.0, True),
    ],
)
def test_pg_timeout_knob(raw: str, seconds: float, logged: bool, capsys: pytest.CaptureFixture[str]) -> None:
    from remote_debug.container.rank.control import pg_timeout_seconds

    assert pg_timeout_seconds({spec.ENV_PG_TIMEOUT: raw}) == seconds
    err = capsys.readouterr().err
    assert (f"[remote-debug] {spec.ENV_PG_TIMEOUT}={raw!r} is not a number of seconds" in err) == logged
    assert err.count("\n") == logged and (not logged or err.rstrip().endswith("using 7200"))


@pytest.mark.parametrize(("raw", "seconds"), [("", 300.0), ("120", 120.0), ("0", 300.0), ("x", 300.0), ("1e9", 300.0)])
def test_install_timeout_knob(raw: str, seconds: float) -> None:
    from remote_debug.container.node.sshd_install import ENV_INSTALL_TIMEOUT, install_timeout

    assert install_timeout({ENV_INSTALL_TIMEOUT: raw}) == seconds


def test_quiet_threads_are_invisible_to_debugpy() -> None:
    from remote_debug.container.threads import quiet_thread

    thread = quiet_thread(lambda: None, "remote-debug-test")
    assert thread.daemon and thread.pydev_do_not_trace and thread.is_pydev_daemon_thread  # type: ignore[attr-defined]


def test_pause_safe_waits_out_a_torch_distributed_import_in_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An IDE attaching while the script's main thread imports torch.distributed found the module in
    # sys.modules without its functions yet and logged "cannot raise the process-group timeout:
    # AttributeError: partially initialized module" into the rank's output (seen in the rerun e2e).
    import importlib
    import sys
    import threading

    from remote_debug.container.rank.control import pause_safe

    name = "torch.distributed.distributed_c10d"
    (tmp_path / "slow_c10d.py").write_text(
        "import sys, threading\n"
        f"sys.modules[{name!r}] = sys.modules[__name__]\n"
        "READY = threading.Event(); GO = threading.Event()\n"
        "sys.modules['slow_c10d_gate'] = (READY, GO)\n"
        "READY.set(); GO.wait(10)\n"
        "def is_initialized():\n    return True\n"
        "def _set_pg_timeout(timeout, group):\n    global APPLIED\n    APPLIED = timeout\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.delitem(sys.modules, "slow_c10d", raising=False)
    importer = threading.Thread(target=importlib.import_module, args=("slow_c10d",))
    importer.start()
    try:
        wait_for(lambda: "slow_c10d_gate" in sys.modules, 10, "the import to be under way")
        assert pause_safe(600) == "no process group"  # mid-import: not an error
        gate: Any = sys.modules["slow_c10d_gate"]  # (READY, GO): not a module
        gate[1].set()
        importer.join(10)
        assert pause_safe(600) == "process-group timeout 600 s"  # and applied once the import is done
        assert str(sys.modules[name].APPLIED) == "0:10:00"
    finally:
        if "slow_c10d_gate" in sys.modules:
            held: Any = sys.modules.pop("slow_c10d_gate")
            held[1].set()
        importer.join(10)
        for module in (name, "slow_c10d"):  # no fake torch left for the worker's next tests
            sys.modules.pop(module, None)
