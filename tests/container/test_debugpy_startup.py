"""debugpy's environment report is built only when some debugpy log takes it (rank and adapter)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import debugpy

from remote_debug.contract.spec import ENV_CLAIMED_BY

ADAPTER_DIR = str(Path(debugpy.__file__).parent / "adapter")

# a rank's listen(), with the report's builder replaced by one that counts its calls
RANK = textwrap.dedent(
    """
    import json, sys
    from debugpy.common import log
    built = []
    real = log.get_environment_description
    log.get_environment_description = lambda header: built.append(header) or real(header)
    from remote_debug.container.rank.debugpy_startup import skip_unread_environment_report
    assert skip_unread_environment_report() and skip_unread_environment_report()  # twice: patched once
    import debugpy
    debugpy.listen(("127.0.0.1", 0))
    print(json.dumps(built))
    """
)

ADAPTER = textwrap.dedent(
    """
    import json, sys
    from remote_debug.container.rank.debugpy_startup import in_adapter
    patched = in_adapter(argv=[sys.executable, sys.argv[1], "--for-server", "1"])
    from debugpy.common import log
    built = []
    log.get_environment_description = lambda header: built.append(header) or header
    log.describe_environment("debugpy.adapter startup environment:")  # as the adapter's __main__ does
    print(json.dumps([patched, built]))
    """
)


def _run(code: str, *args: str, env: dict[str, str]) -> str:
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip().splitlines()[-1]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEBUGPY_LOG")}
    return {**env, "PYDEVD_DISABLE_FILE_VALIDATION": "1", **extra}


def test_a_rank_without_debugpy_logs_never_builds_the_report() -> None:
    assert _run(RANK, env=_env()) == "[]"


def test_with_debugpy_logging_on_the_rank_still_writes_the_full_report(tmp_path: Path) -> None:
    assert _run(RANK, env=_env(DEBUGPY_LOG_DIR=str(tmp_path))) == '["Initial environment:"]'
    logs = "".join(p.read_text(errors="replace") for p in tmp_path.glob("debugpy.server*.log"))
    assert "Initial environment:" in logs and "sys.path" in logs  # what the report is for


def test_the_adapter_of_one_of_our_ranks_skips_it_too() -> None:
    assert _run(ADAPTER, ADAPTER_DIR, env=_env(**{ENV_CLAIMED_BY: "1"})) == "[true, []]"


def test_any_other_process_is_left_alone() -> None:
    # not claimed by a rank of ours: not our adapter, not patched, the report is built as debugpy does
    env = {k: v for k, v in _env().items() if k != ENV_CLAIMED_BY}
    assert _run(ADAPTER, ADAPTER_DIR, env=env) == '[false, ["debugpy.adapter startup environment:"]]'
