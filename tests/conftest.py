"""Shared fixtures: a throwaway HOME/state dir, and cleanup of every local job a test launched; the
lanes' markers (``./dev unit`` runs what is not e2e, root or slow)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from remote_debug.laptop.core.paths import StatePaths
from tests.helpers import strict_aws

# every in-process boto3 request meets AWS's server-side checks (patterns, lengths), not only botocore's
strict_aws.install()

# --- markers: e2e, root, slow (registered in pyproject.toml) -----------------------------------------
# A test module that imports one of these starts real things (a job, the hook with its sshd, torchrun
# ranks, a private sshd, the emulator): all its tests are e2e.  Found by what the module imports, so a new
# test file is placed without editing a list.
# (named, not imported: conftest stays cheap to import)
_STARTERS = frozenset(
    {
        ("tests.helpers.hook_runs", "hook_run"),
        ("tests.helpers.jobs", "launch_job"),
        ("tests.helpers.live_session", "live_session"),
        ("tests.helpers.sshd", "private_sshd"),
        ("tests.helpers.adopt_targets", "plain_torchrun"),
        ("tests.helpers.adopt_targets", "plain_python"),
        ("remote_debug.emulator.service", "Emulator"),
        ("tests.emulator.test_ssm_shell", "running_emulator"),
    }
)
# fixtures that start real things: tests/container's ``run`` (the hook, its sshd), the SDK venvs' drivers
_E2E_FIXTURES = frozenset({"run", "sdk_runs"})
# modules that start real things through their own code (the CLI launching jobs, sshd and tunnels, a
# debuggee, the emulator's nodes), found by measuring the unit lane (`./dev unit --durations=30`)
_E2E_MODULES = frozenset(
    {
        "tests/cli/test_cli.py",
        "tests/cli/test_prune_cli.py",
        "tests/cli/test_sync_cli.py",
        "tests/emulator/test_nodes.py",
        "tests/emulator/test_training.py",
        "tests/local/test_adopt_sagemaker.py",
        "tests/local/test_dap_client.py",
        "tests/local/test_sync.py",
        "tests/local/test_tunnel_faults.py",
    }
)
# single tests of otherwise fast modules that took over 5 s in the unit lane (2 workers, a loaded machine)
_SLOW_TESTS = frozenset(
    {
        "tests/cli/test_bad_input.py::test_hostile_job_names_are_refused_by_every_command",
        "tests/cli/test_bad_input.py::test_real_subprocess_bad_input_is_one_line_exit_2",
        "tests/local/backends/test_sagemaker.py::test_relay_starts_the_transports_session",
        "tests/local/backends/test_sagemaker.py::test_a_wait_that_drags_on_says_what_it_waits_for_and_where",
        "tests/local/test_doctor.py::test_cli_json_and_exit_code",
        "tests/local/test_doctor.py::test_an_unreadable_tier_is_a_warning_with_the_permission_to_add",
        "tests/local/test_doctor.py::test_standard_tier_fails_a_hybrid_job_with_the_command_that_fixes_it",
        "tests/local/test_doctor.py::test_without_a_job_the_tier_is_a_warning_at_most",
        "tests/local/test_doctor.py::test_a_job_is_simulated_with_its_real_tags_and_the_remote_debug_condition_key",
        "tests/local/test_doctor.py::test_assumed_role_is_simulated_as_its_role",
        "tests/local/test_aws_access.py::test_jobs_json_says_why_sagemaker_was_not_listed_and_the_fix",
        "tests/local/test_vscode_launch.py::test_property_update_then_remove_is_identity",
        "tests/security/test_control_channel.py::test_a_slowloris_of_our_own_uid_holds_no_thread_and_no_answer_back",
        "tests/sagemaker/test_request.py::test_raw_request_through_moto",
        "tests/test_bench.py::test_bench_short_mode_reports_every_row",
        "tests/test_bench.py::test_bench_pycharm_rows_connect_and_untrace_a_pycharm_rank",
    }
)
# a skip condition about root (needs_second_user, network namespaces, PID namespaces) marks the test root
_ROOT_REASON = re.compile(r"\broot\b")


def _starts_real_things(module: object) -> bool:
    return any(
        (getattr(value, "__module__", None), getattr(value, "__qualname__", None)) in _STARTERS
        for value in vars(module).values()
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    e2e_by_module: dict[str, bool] = {}
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        if path not in e2e_by_module:
            module = getattr(item, "module", None)
            e2e_by_module[path] = (
                path in _E2E_MODULES or path.endswith("_e2e.py") or (module is not None and _starts_real_things(module))
            )
        if e2e_by_module[path] or _E2E_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.e2e)
        if item.nodeid.split("[", 1)[0] in _SLOW_TESTS:
            item.add_marker(pytest.mark.slow)
        if any(_ROOT_REASON.search(str(mark.kwargs.get("reason", ""))) for mark in item.iter_markers("skipif")):
            item.add_marker(pytest.mark.root)


def _kill_group(pid: int) -> None:
    """Kill a process group we started (nodes and supervisors run in their own sessions)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def cleanup_jobs(paths: StatePaths) -> None:
    if not paths.jobs_dir.is_dir():
        return
    from tests.helpers.hook_runs import kill_all

    for job_dir in paths.jobs_dir.iterdir():
        pid_file = job_dir / "supervisor.pid"
        if pid_file.exists():
            try:
                _kill_group(int(pid_file.read_text()))
            except ValueError:
                pass
        try:
            state = json.loads((job_dir / "job.json").read_text())
        except (OSError, ValueError):
            state = {}
        for pid in (state.get("node_pids") or {}).values():
            _kill_group(int(pid))
        # torchrun starts each rank in a session of its own: a SIGKILLed node leaves its ranks running
        # (a test that timed out left them holding ports and CPU for the tests after it); every process
        # of the job has its node's manifest dir, under the job's dir, in its environment
        kill_all(f"REMOTE_DEBUG_MANIFEST_DIR={job_dir}/")
        if state.get("netns"):  # multi-node jobs as root: the nodes' network namespaces
            from remote_debug.oskit import netns

            time.sleep(0.1)
            netns.delete([str(name) for name in state["netns"]])


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """HOME -> a temp dir (our state dir follows it).  OpenSSH ignores $HOME: tests pass -F."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("REMOTE_DEBUG_HOME", raising=False)
    for name in list(os.environ):
        if name.startswith("REMOTE_DEBUG_"):
            monkeypatch.delenv(name)
    paths = StatePaths.default()
    try:
        yield home
    finally:
        cleanup_jobs(paths)
        time.sleep(0.1)


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A live process of ours that is not a job (a pid that exists, for "job still alive" checks)."""
    proc = subprocess.Popen(["sleep", "300"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()
