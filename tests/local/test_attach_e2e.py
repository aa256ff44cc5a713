"""The spine, end to end with real parts: local job (torchrun ranks) -> hook (sshd + debugpy per rank)
-> manifest -> ssh entries + pinned keys -> one SSH connection per node via the ProxyCommand ->
DAP client stopped in every rank."""

from __future__ import annotations

import json
from pathlib import Path

import json5
import pytest

from remote_debug.laptop.attach.attacher import AttachOptions
from remote_debug.laptop.ide.headless_session import HeadlessPlan
from remote_debug.laptop.wire import events as ev
from tests.helpers.ddp_job import break_line, make_project
from tests.helpers.event_log import EventLog
from tests.helpers.jobs import launch_job


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path)


def keeping_launch_json(emit: ev.Emit, seen: list[str]) -> ev.Emit:
    """``emit``, and launch.json's text as the attach wrote it (it gives its entries back when it ends)."""

    def both(event: ev.Event) -> None:
        if isinstance(event, ev.LaunchJson):
            seen.append(Path(event.path).read_text())
        emit(event)

    return both


@pytest.mark.parametrize(("nodes", "nproc"), [(1, 2), (2, 1)], ids=["1node-2ranks", "2nodes-1rank"])
def test_headless_attach_stops_in_every_torchrun_rank_through_ssh(
    home: Path, project: Path, nodes: int, nproc: int
) -> None:
    job = launch_job("spine", project, nodes=nodes, nproc_per_node=nproc, wait_seconds=90)
    events = EventLog()
    plan = HeadlessPlan(breakpoints={str(project / "train.py"): [break_line(project / "train.py")]}, steps=1)
    written: list[str] = []
    result = job.attach(AttachOptions(workspace=project, headless=plan), keeping_launch_json(events.append, written))

    assert result.job.status == "Completed", result.job.failure_reason
    assert result.job.exit_code == 0
    assert [r.rank for r in result.reports] == [0, 1]
    assert [r.node for r in result.reports] == (["algo-1", "algo-1"] if nodes == 1 else ["algo-1", "algo-2"])
    assert sorted(e["node"] for e in events if e["event"] == "node-connected") == [
        f"algo-{i + 1}" for i in range(nodes)
    ]
    for report in result.reports:
        assert report.error is None
        first, after_step = report.stops[0], report.stops[1]
        assert Path(first.file).name == "train.py" and first.line == break_line(project / "train.py")
        assert first.variables["rank"] == str(report.rank)
        assert first.variables["tensor"] == "Tensor[1] float32 cpu = [3.]"  # all_reduce of 1 + 2 happened
        assert after_step.line == first.line + 1
        assert after_step.variables["secret"] == str(1000 + 7 * report.rank)
    # The DAP client talked to local forwards, never to the ranks' own ports.
    for fwd in result.forwards:
        assert fwd.local_port != fwd.remote_port
    # One launch.json config per rank + the compound, in the workspace, while the attach ran; given back after.
    [launch] = written
    assert not (project / ".vscode").exists()
    assert "remote-debug: spine rank 0 (algo-1)" in launch and "remote-debug: spine all ranks" in launch
    assert f"remote-debug: spine rank 1 (algo-{nodes})" in launch
    kinds = [e["event"] for e in events]
    assert kinds.index("ssh-config") < kinds.index("rank-ready") < kinds.index("job-ended")


def test_job_env_and_layout_mirror_sagemaker(home: Path, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "dump.py").write_text(
        "import json, os, pathlib\n"
        "keys = ['TRAINING_JOB_NAME', 'SM_CURRENT_HOST', 'SM_HOSTS', 'SM_NUM_CPUS', 'SM_MODEL_DIR', 'SM_HP_LR']\n"
        "out = {k: os.environ.get(k) for k in keys}\n"
        "out['cwd'] = os.getcwd()\n"
        "cfg = pathlib.Path(os.environ['SM_INPUT_CONFIG_DIR'], 'resourceconfig.json')\n"
        "out['resourceconfig'] = json.loads(cfg.read_text())\n"
        "pathlib.Path(os.environ['SM_MODEL_DIR'], 'env.json').write_text(json.dumps(out))\n"
    )
    job = launch_job("shape", src, ["python", "dump.py"], nodes=2, hyperparameters={"lr": "0.1"})
    assert job.info is not None and job.info.nodes == ["algo-1", "algo-2"]
    # Two nodes x 1 rank runs under torchrun; both nodes write their env.
    assert job.wait_status(("Completed", "Failed")) == "Completed", job.backend.describe("shape").failure_reason
    job_dir = job.paths.job_dir("shape")
    for node in ("algo-1", "algo-2"):
        env = json.loads((job_dir / "nodes" / node / "model" / "env.json").read_text())
        assert env["TRAINING_JOB_NAME"] == "shape"
        assert env["SM_CURRENT_HOST"] == node
        assert json.loads(env["SM_HOSTS"]) == ["algo-1", "algo-2"]
        assert int(env["SM_NUM_CPUS"]) >= 1
        assert env["SM_HP_LR"] == "0.1"
        assert env["cwd"] == str(job_dir / "nodes" / node / "code")
        assert env["resourceconfig"]["current_host"] == node
        assert env["resourceconfig"]["hosts"] == ["algo-1", "algo-2"]
        assert (job_dir / "logs" / f"{node}.log").exists()


def test_a_job_whose_source_is_a_subfolder_of_the_workspace_maps_that_subfolder(home: Path, tmp_path: Path) -> None:
    """``launch --source-dir <ws>/training``: the code dir holds the contents of training/, so the folder
    here that maps to it is training/, not the workspace (else no breakpoint binds: <ws>/training/x.py
    would be looked for at <code dir>/training/x.py).  launch.json and the headless session both."""
    workspace = tmp_path / "ws"
    script = workspace / "training" / "train.py"
    script.parent.mkdir(parents=True)
    script.write_text("import os\nvalue = 41 + 1\nprint('value', value)  # SUBFOLDER-BREAK\n")
    job = launch_job("subfolder", workspace, source_dir=script.parent, wait_seconds=90)
    written: list[str] = []
    result = job.attach(
        AttachOptions(workspace=workspace, headless=HeadlessPlan(breakpoints={str(script): [3]})),
        keeping_launch_json(ev.ignore, written),
    )

    assert result.job.status == "Completed", result.job.failure_reason
    [report] = result.reports
    assert report.error is None
    [stop] = report.stops
    assert (stop.file, stop.line, stop.variables["value"]) == (str(script), 3, "42")
    [forward] = result.forwards
    [config] = json5.loads(written[0])["configurations"]
    assert config["pathMappings"] == [{"localRoot": "${workspaceFolder}/training", "remoteRoot": forward.code_dir}]
