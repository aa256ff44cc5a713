"""The failure file a failed torchrun job leaves (SageMaker's FailureReason is "AlgorithmError: " + its
text): the failing rank's exception line, not the launcher's last words (real hook, torchrun, gloo)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from remote_debug.container.node import outcome
from remote_debug.contract import spec
from tests.helpers.hook_runs import HookRun

# Rank 1 raises; rank 0 waits in a barrier for it, and torchrun ends it with SIGTERM.
SCRIPT = """\
import time
import torch.distributed as dist
dist.init_process_group("gloo")
if dist.get_rank() == 1:
    time.sleep(0.5)
    raise ValueError("bad 42")
dist.barrier()
"""


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_torchrun_job_fails_with_the_failing_ranks_exception_line(run: HookRun) -> None:
    output = run.root / "output"
    output.mkdir()
    run.env["SM_OUTPUT_DIR"] = str(output)
    script = run.root / "job.py"
    script.write_text(SCRIPT)
    run.start_torchrun(script)
    assert run.wait(90) == 1, run.stderr
    # what the job printed last is torchrun's summary, which says nothing of the exception
    printed = [line for line in run.stderr.splitlines() if line.strip() and not line.startswith("[remote-debug]")]
    assert "ChildFailedError" in run.stderr and printed[-1] == "=" * 60, printed[-3:]
    assert (output / "failure").read_text() == "ValueError: bad 42 (rank 1)"


def _rank(rank: int, state: spec.RankState, error: str | None, failed_at: float | None) -> spec.RankEndpoint:
    return spec.RankEndpoint(
        rank=rank, local_rank=rank, world_size=4, port=0, pid=100 + rank, state=state, error=error, failed_at=failed_at
    )


def test_the_first_rank_to_fail_is_the_cause(tmp_path: Path) -> None:
    ranks = [
        _rank(0, spec.RankState.FAILED, "RuntimeError: Connection closed by peer", 20.0),  # of rank 2's failure
        _rank(1, spec.RankState.FINISHED, None, None),
        _rank(2, spec.RankState.HELD, "ValueError: bad 42", 10.0),  # first, and still held
        _rank(3, spec.RankState.FAILED, "OSError: older hook", None),  # no time: after the timed ones
    ]
    for r in ranks:
        spec.write_rank_manifest(tmp_path, r)
    (tmp_path / "rank-9.json").write_text("{broken")  # skipped, not fatal
    cause = outcome.root_cause(spec.read_rank_documents(tmp_path, skip_broken=True))
    assert cause is not None and cause.rank == 2
    assert outcome.failure_text(cause) == "ValueError: bad 42 (rank 2)"
    assert outcome.root_cause([ranks[1]]) is None  # no exception: the platform's own reason stands


def test_the_failure_file_goes_where_sagemaker_reads_it_and_nowhere_else(tmp_path: Path) -> None:
    assert outcome.output_dir({"SM_OUTPUT_DIR": "/x/output"}) == Path("/x/output")
    config = tmp_path / "opt-ml" / "input" / "config"
    assert outcome.output_dir({"SM_INPUT_CONFIG_DIR": str(config)}) is None  # not a SageMaker node
    config.mkdir(parents=True)
    (config / "resourceconfig.json").write_text(json.dumps({"current_host": "algo-1", "hosts": ["algo-1"]}))
    assert outcome.output_dir({"SM_INPUT_CONFIG_DIR": str(config)}) == tmp_path / "opt-ml" / "output"
