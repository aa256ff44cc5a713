"""Where a rank's code is, from the script it runs: what the laptop's path mappings point at for that rank.

The node's guess (``node_env.code_dir``) is made when the node starts: under the SDK v2 training toolkit that is
before the code reaches ``/opt/ml/code``, and a channel with another name (``/opt/ml/input/data/src``) was never
a candidate - breakpoints given by workspace path then bound in no rank.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from remote_debug.container.node_env import rank_code_dir, script_of
from remote_debug.contract import spec


@pytest.mark.parametrize(
    ("argv", "script"),
    [
        (["python3", "train.py"], "train.py"),
        (["/usr/bin/python3", "-u", "-W", "ignore", "/opt/ml/code/train.py", "--epochs", "2"], "/opt/ml/code/train.py"),
        (["python", "-X", "dev", "-B", "src/train.py"], "src/train.py"),
        (["python", "-m", "mpi4py", "-rc", "thread_level=multiple", "train_mpi.py"], "train_mpi.py"),  # MPI ranks
        (["python", "-mmpi4py", "train_mpi.py"], "train_mpi.py"),
        (["python", "-c", "import train"], None),
        (["python", "-m", "torch.distributed.run", "train.py"], None),  # a module runs, not the script
        (["python"], None),
        (["python", "-"], None),
    ],
)
def test_the_script_a_rank_runs(argv: list[str], script: str | None) -> None:
    assert script_of(argv) == script


def test_the_root_that_holds_the_script(tmp_path: Path) -> None:
    ml = tmp_path / "ml"
    for folder in ("code/pkg", "input/data/src/tools", "input/data/code", "elsewhere"):
        (ml / folder).mkdir(parents=True)
    env: dict[str, str] = {}
    # the toolkit's: python train.py, run in /opt/ml/code
    assert rank_code_dir(["python", "train.py"], env, cwd=str(ml / "code"), ml_root=str(ml)) == str(ml / "code")
    # a script in a subfolder of the code still maps from the code's root (breakpoints in pkg/ and in the script)
    assert rank_code_dir(["python", str(ml / "code/pkg/run.py")], env, ml_root=str(ml)) == str(ml / "code")
    # any input channel: the channel is the root
    assert rank_code_dir(["python", str(ml / "input/data/src/tools/train.py")], env, ml_root=str(ml)) == str(
        ml / "input/data/src"
    )
    # the launcher's own code dir (local jobs) and the v3 drivers' SM_SOURCE_DIR win where they hold the script
    assert rank_code_dir(
        ["python", str(ml / "elsewhere/train.py")], {"REMOTE_DEBUG_CODE_DIR": str(ml)}, ml_root=str(ml)
    ) == str(ml)
    assert rank_code_dir(
        ["python", str(ml / "input/data/code/t.py")], {"SM_SOURCE_DIR": str(ml / "input/data")}, ml_root=str(ml)
    ) == str(ml / "input/data")
    # outside any of them: the script's own folder, real path (pydevd names frames by real paths)
    (tmp_path / "link").symlink_to(ml / "elsewhere")
    assert rank_code_dir(["python", str(tmp_path / "link/train.py")], env, ml_root=str(ml)) == str(ml / "elsewhere")
    assert rank_code_dir(["python", "-c", "pass"], env, ml_root=str(ml)) is None


def test_the_ranks_code_dir_wins_over_the_nodes_guess() -> None:
    node = spec.NodeManifest(
        job_name="j",
        node="algo-1",
        hosts=["algo-1"],
        sshd_host="127.0.0.1",
        sshd_port=1,
        ssh_user="root",
        host_public_key="ssh-ed25519 AAAA",
        code_dir="/",
    )
    told = spec.RankEndpoint(rank=0, local_rank=0, world_size=1, port=1, pid=1, code_dir="/opt/ml/code")
    old_hook = spec.RankEndpoint(rank=1, local_rank=1, world_size=2, port=2, pid=2)
    assert node.code_dir_of(told) == "/opt/ml/code"
    assert node.code_dir_of(old_hook) == "/"
    # on the wire: written when known, read back, and a document without it still reads
    assert spec.RankEndpoint.from_json(told.to_json()).code_dir == "/opt/ml/code"
    assert "code_dir" not in old_hook.to_json()
    assert spec.RankEndpoint.from_json(old_hook.to_json()).code_dir is None
