"""Hold on failure: a rank that dies of an uncaught exception waits for a post-mortem debugger, stopped at
the exception, then exits exactly as it would have without the hold (real hook, sshd, debugpy)."""

from __future__ import annotations

import json
import re
import socket
import time
from pathlib import Path
from typing import Any

import pytest

import remote_debug
from remote_debug.contract import job_secret, spec
from remote_debug.laptop.connection.rank_control import exchange
from remote_debug.laptop.core.errors import UserError
from tests.helpers.hook_runs import JOB_SECRET, PYTHON, HookRun, MiniDap, base_env, hook_run, wait_for

# The rank waits for the test's "go" mark, then raises from inside a function with telling locals.
CRASH_SCRIPT = """\
import pathlib, sys, time
def compute(n):
    bad_value = n * 6
    label = "step-" + str(n)
    marks = pathlib.Path(sys.argv[1])
    deadline = time.monotonic() + 60
    while not (marks / "go").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    raise ValueError(f"bad {bad_value}")  # RAISE
compute(7)
"""
RAISE_LINE = next(i for i, line in enumerate(CRASH_SCRIPT.splitlines(), 1) if "# RAISE" in line)


def _start(run: HookRun, *, hold: float, listen: str = "lazy") -> None:
    run.env[spec.ENV_HOLD_ON_FAILURE] = f"{hold:g}"
    run.env[spec.ENV_LISTEN] = listen
    script = run.root / "train.py"
    script.write_text(CRASH_SCRIPT)
    run.start(PYTHON, str(script), str(run.marks))


def _traceback(stderr: str) -> str:
    """The traceback block Python printed (without our own [remote-debug] lines)."""
    lines = [line for line in stderr.splitlines() if not line.startswith("[remote-debug]")]
    start = lines.index("Traceback (most recent call last):")
    return "\n".join(lines[start:]).replace(str(PYTHON), "PY")


def _stacks(port: int, **options: Any) -> list[dict[str, Any]]:
    """The rank's "stacks" over its control channel, as the laptop asks (``options``: e.g. all_threads)."""
    payload = {"op": "stacks", "auth": job_secret.control_token(JOB_SECRET), **options}
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        reply = json.loads(exchange(sock, payload))
    assert reply["ok"], reply
    threads: list[dict[str, Any]] = reply["threads"]
    return threads


def _held(run: HookRun) -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        doc = run.rank_if_any(0)
        return doc if doc is not None and doc["state"] == "held" and doc["port"] else None

    return wait_for(ready, 30, "the rank to be held with a listener")


def _attach(port: int, filters: list[str]) -> MiniDap:
    dap = MiniDap(port)
    dap.initialize()
    attach = dap.send("attach", justMyCode=False)
    dap.event("initialized")
    assert dap.response_to(dap.send("setExceptionBreakpoints", filters=filters))["success"]
    assert dap.response_to(dap.send("configurationDone"))["success"]
    dap.response_to(attach)
    return dap


def _top_frame(dap: MiniDap, thread: int) -> tuple[dict[str, Any], dict[str, str]]:
    frames = dap.response_to(dap.send("stackTrace", threadId=thread))["body"]["stackFrames"]
    scopes = dap.response_to(dap.send("scopes", frameId=frames[0]["id"]))["body"]["scopes"]
    variables = dap.response_to(dap.send("variables", variablesReference=scopes[0]["variablesReference"]))
    return frames[0], {v["name"]: v["value"] for v in variables["body"]["variables"]}


def test_held_rank_is_stopped_at_the_exception_then_fails_as_before(
    run: HookRun, tmp_path_factory: Any, client_key: Any
) -> None:
    _start(run, hold=60)  # lazy: no debugpy in the rank until the hold starts it
    (run.marks / "go").write_text("")
    doc = _held(run)
    assert doc["error"] == "ValueError: bad 42"
    assert f"line {RAISE_LINE}, in compute" in doc["traceback"] and "ValueError: bad 42" in doc["traceback"]
    assert run.node()["state"] == "running"  # the job is still in progress while held
    assert run.proc is not None and run.proc.poll() is None

    dap = _attach(doc["port"], [])  # no exception filters: the hold stops anyway
    try:
        stopped = dap.event("stopped")["body"]
        assert stopped["reason"] == "exception" and stopped["description"] == "bad 42"
        frame, variables = _top_frame(dap, stopped["threadId"])
        assert (frame["name"], frame["line"]) == ("compute", RAISE_LINE)
        assert variables["bad_value"] == "42" and variables["label"] == "'step-7'" and variables["n"] == "7"
        dap.send("continue", threadId=stopped["threadId"])
        code = run.wait(30)
    finally:
        dap.close()
    assert code == 1
    assert run.rank(0)["state"] == "failed" and run.node()["exit_code"] == 1
    held_traceback = _traceback(run.stderr)

    # the same job without the hold: same exit code, same traceback
    root = tmp_path_factory.mktemp("nohold")
    with hook_run(root, base_env(root, client_key[1])) as plain:
        _start(plain, hold=0)
        (plain.marks / "go").write_text("")
        assert plain.wait(30) == 1
        assert re.sub(r"/[^\"]*/train.py", "train.py", _traceback(plain.stderr)) == re.sub(
            r"/[^\"]*/train.py", "train.py", held_traceback
        )
        assert plain.rank(0)["state"] == "failed"


def test_hold_without_a_debugger_ends_after_its_seconds(run: HookRun) -> None:
    _start(run, hold=3)
    (run.marks / "go").write_text("")
    _held(run)
    held_at = time.monotonic()
    assert run.wait(30) == 1
    waited = time.monotonic() - held_at
    assert 2.0 <= waited < 10, waited
    assert "ValueError: bad 42" in _traceback(run.stderr)
    assert "no debugger within 3 s" in run.stderr
    assert run.rank(0)["state"] == "failed" and run.node()["state"] == "failed"


def test_client_breaking_on_uncaught_sees_one_stop_and_detaching_ends_the_hold(run: HookRun) -> None:
    """An IDE attached before the crash with "uncaught" on (VS Code's default) gets pydevd's own stop;
    the hold must not stop a second time, and a detach lets the rank exit."""
    _start(run, hold=60, listen="eager")
    doc = wait_for(lambda: (d := run.rank_if_any(0)) is not None and d["port"] and d, 30, "a listener")
    dap = _attach(doc["port"], ["uncaught"])
    try:
        (run.marks / "go").write_text("")
        stopped = dap.event("stopped")["body"]
        assert stopped["reason"] == "exception"
        frame, variables = _top_frame(dap, stopped["threadId"])
        assert frame["name"] == "compute" and variables["bad_value"] == "42"
        dap.response_to(dap.send("disconnect"))
        code = run.wait(30)
    finally:
        dap.close()
    assert code == 1
    assert "ValueError: bad 42" in _traceback(run.stderr)
    assert run.rank(0)["state"] == "failed"


def test_held_rank_says_how_long_it_waits_and_shows_where_it_raised(run: HookRun) -> None:
    """The rank document has the hold's end, the node log says the rank is held, and ``stacks`` shows
    the exception's frames (not the excepthook it waits in, nor debugpy's threads)."""
    _start(run, hold=20)
    (run.marks / "go").write_text("")
    doc = _held(run)
    assert 15 < doc["hold_until"] - time.time() <= 20, doc["hold_until"]
    assert doc["failed_at"] <= time.time()
    # the seconds left when the node saw it: 20 at once, fewer on a machine slow to start the hook's watcher (a
    # fresh clone compiles every module first), within the same 15-20 s the document's hold_until allows above
    line = re.compile(
        r"\[remote-debug\] node algo-1: rank 0 held for post-mortem, (1[5-9]|20) s left: "
        r"ValueError: bad 42"
    )
    wait_for(lambda: line.search(run.stderr), 10, "the held rank's line in the node log")

    threads = _stacks(doc["control_port"])
    # debugpy runs in the rank now (the hold started it): its threads are not the user's
    assert [t["name"] for t in threads] == ["MainThread"], threads
    [main] = threads
    assert main["exception"] == "ValueError: bad 42"
    assert [(f["function"], f["line"]) for f in main["frames"]] == [
        ("<module>", RAISE_LINE + 1),
        ("compute", RAISE_LINE),
    ]
    everything = _stacks(doc["control_port"], all_threads=True)
    assert len(everything) > 1 and all(t["internal"] for t in everything if t["name"] != "MainThread")


def test_the_failure_file_has_the_exception_line_and_a_file_of_the_job_wins(
    run: HookRun, tmp_path_factory: Any, client_key: Any
) -> None:
    output = run.root / "output"
    output.mkdir()
    run.env["SM_OUTPUT_DIR"] = str(output)
    _start(run, hold=0)
    (run.marks / "go").write_text("")
    assert run.wait(30) == 1
    assert (output / "failure").read_text() == "ValueError: bad 42"
    assert "[remote-debug] failure reason: ValueError: bad 42" in run.stderr

    # the command wrote its own (as AWS's training toolkit does): it is left alone
    (output / "failure").write_text("ExecuteUserScriptError: ...")
    root = tmp_path_factory.mktemp("again")
    with hook_run(root, {**base_env(root, client_key[1]), "SM_OUTPUT_DIR": str(output)}) as again:
        _start(again, hold=0)
        (again.marks / "go").write_text("")
        assert again.wait(30) == 1
    assert (output / "failure").read_text() == "ExecuteUserScriptError: ..."


# --- the option on its way into the job: spec <-> env, SageMaker's enable() -------------------------

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKey test"
SECRET = "5e" * 32  # any well-formed job secret: nothing here checks a proof


def test_spec_carries_the_hold_only_when_set() -> None:
    plain = spec.DebugSpec(job_name="j", client_public_key=KEY, job_secret=SECRET)
    assert spec.ENV_HOLD_ON_FAILURE not in plain.to_env()  # jobs without it look exactly as before
    held = spec.DebugSpec(
        job_name="j", client_public_key=KEY, job_secret=SECRET, options=spec.DebugOptions(hold_on_failure=90)
    )
    env = held.to_env()
    assert env[spec.ENV_HOLD_ON_FAILURE] == "90" and spec.DebugSpec.from_env(env) == held
    for bad in ("-1", "nan", "inf", "1e9", "soon"):
        with pytest.raises(spec.ContractError) as info:
            spec.DebugSpec.from_env({**env, spec.ENV_HOLD_ON_FAILURE: bad})
        assert "\n" not in str(info.value)


def test_enable_puts_the_hold_into_the_training_job_request(tmp_path: Path) -> None:
    request = {
        "TrainingJobName": "held-job",
        "AlgorithmSpecification": {"TrainingImage": "img", "TrainingInputMode": "File"},
        "RoleArn": "arn:aws:iam::123456789012:role/r",
        "OutputDataConfig": {"S3OutputPath": "s3://b/o"},
        "ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 10},
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
    }
    out = remote_debug.enable(request, hold_on_failure=300, owner="me", key_dir=tmp_path)
    assert out["Environment"][spec.ENV_HOLD_ON_FAILURE] == "300"
    with pytest.raises(UserError, match=re.escape("hold on failure -5.0 s is out of range")):
        remote_debug.enable(request, hold_on_failure=-5, owner="me", key_dir=tmp_path / "other")
    assert not (tmp_path / "other").exists()  # refused before any key was made
