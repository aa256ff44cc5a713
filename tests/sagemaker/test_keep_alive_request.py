"""``keep_alive`` on SageMaker: the request, the SDK wrappers and ``launch --keep-alive``.

A kept-alive job's nodes stay up after the training command ends, inside the job's
``MaxRuntimeInSeconds`` and billed: ``enable()`` carries the seconds in the job's environment
(``REMOTE_DEBUG_KEEP_ALIVE``, absent when 0), says once that the hold is billed, and refuses a keep-alive
that does not fit in the maximum runtime - before any key pair (or anything else) is written.  Only the
hook that wraps the job's entry can hold a node: a keep-alive for a job without a ``ContainerEntrypoint``
(env-hook mode: the SDK v2 framework estimator, whose entry is AWS's training toolkit) is refused the
same way, and the node daemon of such a job says in its log that it cannot hold.
Requests are validated against botocore's service model, through moto where it helps; the SDK
wrappers run in the SDK venvs (``drivers/capture_sdk.py``).
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import boto3
import pytest

import remote_debug
from remote_debug.contract import spec
from remote_debug.laptop.aws.enable.bundle import CHANNEL_ROOT, CODE_ROOT, inject_dir
from remote_debug.laptop.aws.enable.request import draft_request, wrap_entrypoint
from remote_debug.laptop.aws.enable.terms import EnableError, RemoteDebugWarning
from remote_debug.laptop.core.errors import UserError
from tests.cli.test_bad_input import assert_refused, run_cli, snapshot
from tests.helpers.sagemaker_checks import MOTO_USER_ID, assert_debuggable, validate
from tests.sagemaker.conftest import SdkRun
from tests.sagemaker.test_request import BASE

REPO = Path(__file__).resolve().parents[2]


def note(keep_alive: str, limit: str) -> str:
    """The one warning line of a kept-alive enable(), exactly."""
    return (
        f"keep_alive={keep_alive}: every node stays up to {keep_alive} s after the training command ends (until "
        "`remote-debug release JOB` or `remote-debug stop JOB` ends it sooner); SageMaker bills that time like "
        f"training, and it counts against the job's MaxRuntimeInSeconds of {limit} s"
    )


def refusal(keep_alive: str, whose: str, setting: str, largest: str) -> str:
    """A keep-alive that does not fit in the maximum runtime, exactly."""
    return (
        f"keep-alive {keep_alive} s does not fit in {whose}, which the hold counts against (SageMaker stops the job "
        f"there): raise {setting} to more than {keep_alive} s plus the training's own run time, or {largest}"
    )


REQUEST_SETTING = "StoppingCondition.MaxRuntimeInSeconds"


def unwrapped(keep_alive: str, why: str) -> str:
    """A keep-alive for a job whose entry the hook does not wrap, exactly (``why``: what the caller lacks)."""
    return (
        f"keep-alive {keep_alive} s needs the job's entry wrapped by remote-debug's hook, but {why}: the image's own "
        "entry runs the training and each node ends with it; use a ContainerEntrypoint (an SDK v3 ModelTrainer with "
        "source_code, a BYOC entrypoint such as SDK v2 Estimator(container_entry_point=[...]), or "
        "templates/launchers/boto3_request.py), or drop the keep-alive"
    )


NO_REQUEST_ENTRY = "the request has no AlgorithmSpecification.ContainerEntrypoint"
NO_ESTIMATOR_ENTRY = (
    "the estimator has no container_entry_point (the training toolkit runs the image's default `train`)"
)
NO_TRAINER_ENTRY = "the trainer has no source_code (the image's own entry runs)"


_AS_IS = object()


def _request(condition: Any = _AS_IS, *, entry: bool = True) -> dict[str, Any]:
    """A copy of BASE (MaxRuntimeInSeconds 3600), with another StoppingCondition if given; None leaves it out.
    ``entry=False``: without BASE's ContainerEntrypoint (and its arguments): the image's own entry runs."""
    request = copy.deepcopy(BASE)
    if condition is None:
        del request["StoppingCondition"]
    elif condition is not _AS_IS:
        request["StoppingCondition"] = condition
    if not entry:
        del request["AlgorithmSpecification"]["ContainerEntrypoint"]
        del request["AlgorithmSpecification"]["ContainerArguments"]
    return request


def _enable(request: Any, state: Path, **kwargs: Any) -> tuple[Any, list[warnings.WarningMessage]]:
    """enable() with every warning recorded (none filtered, none deduplicated)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = remote_debug.enable(request, key_dir=state, **{"owner": "alice", **kwargs})
    return out, caught


# --- the request --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("keep_alive", "value"), [(600, "600"), (90.5, "90.5"), ("1800", "1800"), (3599, "3599")])
def test_keep_alive_lands_in_the_environment(state: Path, keep_alive: Any, value: str) -> None:
    out, caught = _enable(BASE, state, keep_alive=keep_alive)
    assert_debuggable(
        out,
        state,
        package_root=CHANNEL_ROOT,
        owner="alice",
        user_env={"USER_VAR": "kept", "PYTHONPATH": "/opt/ml/code/lib"},
        keep_alive=value,
    )
    assert out["StoppingCondition"] == {"MaxRuntimeInSeconds": 3600}  # ours to check, never to change
    assert [str(w.message) for w in caught] == [note(value, "3600")]
    assert caught[0].category is RemoteDebugWarning
    assert caught[0].filename == __file__  # attributed to the line that called enable()


@pytest.mark.parametrize("keep_alive", [0, 0.0, "0"])
def test_no_keep_alive_no_variable_no_warning(state: Path, keep_alive: Any) -> None:
    out, caught = _enable(BASE, state, keep_alive=keep_alive)
    assert spec.ENV_KEEP_ALIVE not in out["Environment"]
    assert caught == []
    validate("CreateTrainingJob", out)
    default, _ = _enable(BASE, state)
    assert default == out


def test_the_default_max_runtime_is_a_day(state: Path) -> None:
    for request in (_request(condition=None), _request(condition={"MaxWaitTimeInSeconds": 90000})):
        out, caught = _enable(request, state, keep_alive=86399)
        assert out["Environment"][spec.ENV_KEEP_ALIVE] == "86399"
        assert "MaxRuntimeInSeconds" not in (out.get("StoppingCondition") or {})  # SageMaker's default stays so
        assert [str(w.message) for w in caught] == [note("86399", "86400")]
        validate("CreateTrainingJob", out)


def test_keep_alive_through_moto(aws: None, state: Path) -> None:
    sagemaker = boto3.client("sagemaker", region_name="us-east-1")
    captured: list[dict[str, Any]] = []
    sagemaker.meta.events.register(
        "before-call.sagemaker.CreateTrainingJob", lambda params, **_: captured.append(json.loads(params["body"]))
    )
    request = _request(condition={"MaxRuntimeInSeconds": 7200})
    request["Environment"] = {"USER_VAR": "kept"}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sagemaker.create_training_job(**remote_debug.enable(request, key_dir=state, keep_alive=1800))
    [sent] = captured
    assert_debuggable(
        sent, state, package_root=CHANNEL_ROOT, owner=MOTO_USER_ID, user_env={"USER_VAR": "kept"}, keep_alive="1800"
    )
    described = sagemaker.describe_training_job(TrainingJobName="rd-raw-1")
    assert described["StoppingCondition"]["MaxRuntimeInSeconds"] == 7200
    assert [str(w.message) for w in caught] == [note("1800", "7200")]


def test_mpi_runs_forward_the_keep_alive_too(state: Path) -> None:
    request = {**BASE, "HyperParameters": {"sagemaker_mpi_enabled": "true"}}
    out, _ = _enable(request, state, keep_alive=60)
    options = json.loads(out["HyperParameters"]["sagemaker_mpi_custom_mpi_options"]).split()
    assert options[options.index(spec.ENV_KEEP_ALIVE) - 1] == "-x"


def test_enabling_again_replaces_the_keep_alive(state: Path) -> None:
    """The options of the last enable() decide: a keep-alive left from an earlier one would hold (and bill) nodes."""
    once, _ = _enable(BASE, state, keep_alive=600, hold_on_failure=30)
    again, _ = _enable(once, state, keep_alive=0)
    assert spec.ENV_KEEP_ALIVE not in again["Environment"]
    assert spec.ENV_HOLD_ON_FAILURE not in again["Environment"]
    assert again == _enable(BASE, state)[0]
    assert _enable(once, state, keep_alive=1200)[0]["Environment"][spec.ENV_KEEP_ALIVE] == "1200"


KEEP_ALIVE_REFUSALS: list[tuple[str, dict[str, Any], Any, str]] = [
    (
        "equal-to-max-runtime",
        _request(),
        3600,
        refusal("3600", f"the job's {REQUEST_SETTING} (3600 s)", REQUEST_SETTING, "keep alive at most 3599 s"),
    ),
    (
        "over-max-runtime",
        _request(condition={"MaxRuntimeInSeconds": 900}),
        1200.5,
        refusal("1200.5", f"the job's {REQUEST_SETTING} (900 s)", REQUEST_SETTING, "keep alive at most 899 s"),
    ),
    (
        "over-the-default-day",
        _request(condition=None),
        86400,
        refusal(
            "86400",
            f"SageMaker's default {REQUEST_SETTING} (86400 s: none given)",
            REQUEST_SETTING,
            "keep alive at most 86399 s",
        ),
    ),
    (
        "one-second-runtime",
        _request(condition={"MaxRuntimeInSeconds": 1}),
        1,
        refusal("1", f"the job's {REQUEST_SETTING} (1 s)", REQUEST_SETTING, "drop the keep-alive"),
    ),
]


@pytest.mark.parametrize(
    ("request_dict", "keep_alive", "message"),
    [r[1:] for r in KEEP_ALIVE_REFUSALS],
    ids=[r[0] for r in KEEP_ALIVE_REFUSALS],
)
def test_a_keep_alive_that_does_not_fit_is_refused(
    state: Path, request_dict: dict[str, Any], keep_alive: Any, message: str
) -> None:
    original = copy.deepcopy(request_dict)
    with warnings.catch_warnings(record=True) as caught, pytest.raises(EnableError) as info:
        warnings.simplefilter("always")
        remote_debug.enable(request_dict, owner="alice", key_dir=state, keep_alive=keep_alive)
    assert str(info.value) == message
    assert isinstance(info.value, UserError)  # the CLI's one line and exit code 2
    assert caught == []  # no billing note for a job that will not run
    assert request_dict == original
    assert not state.exists()  # no key pair, no bundle: nothing written


NO_ENTRY_REFUSALS: list[tuple[str, dict[str, Any], Any, str]] = [
    ("no-entrypoint", _request(entry=False), 600, unwrapped("600", NO_REQUEST_ENTRY)),
    (
        "empty-entrypoint",
        {**BASE, "AlgorithmSpecification": {**BASE["AlgorithmSpecification"], "ContainerEntrypoint": []}},
        "90.5",
        unwrapped("90.5", NO_REQUEST_ENTRY),
    ),
    # before the maximum runtime: a bigger MaxRuntimeInSeconds would not make it hold
    ("no-entrypoint-over-max-runtime", _request(entry=False), 7200, unwrapped("7200", NO_REQUEST_ENTRY)),
]


@pytest.mark.parametrize(
    ("request_dict", "keep_alive", "message"), [r[1:] for r in NO_ENTRY_REFUSALS], ids=[r[0] for r in NO_ENTRY_REFUSALS]
)
def test_a_keep_alive_without_an_entry_to_wrap_is_refused(
    state: Path, request_dict: dict[str, Any], keep_alive: Any, message: str
) -> None:
    """Env-hook mode (no ContainerEntrypoint: the image's own entry, e.g. AWS's training toolkit, is the container's
    process): the node daemon cannot outlive it, so a keep-alive would be silently ignored - refused in one line
    naming what works, before any key, warning or AWS call."""

    class NoAws:
        def client(self, service: str) -> Any:
            raise AssertionError(f"asked {service} before refusing")

    original = copy.deepcopy(request_dict)
    with warnings.catch_warnings(record=True) as caught, pytest.raises(EnableError) as info:
        warnings.simplefilter("always")
        remote_debug.enable(request_dict, key_dir=state, keep_alive=keep_alive, boto_session=NoAws())
    assert str(info.value) == message
    assert "\n" not in message
    assert isinstance(info.value, UserError)  # the CLI's one line and exit code 2
    assert caught == []  # no billing note for a job that will not run
    assert request_dict == original
    assert not state.exists()  # no key pair, no bundle: nothing written


def test_the_request_core_refuses_it_too(state: Path) -> None:
    """The request core (what the SDK wrappers' request hooks run on the final request) refuses it by itself, before
    the key: an SDK object that lost its entry after enable() cannot slip through."""
    options = spec.DebugOptions(keep_alive=600)
    with pytest.raises(EnableError) as info:
        draft_request(_request(entry=False), options, owner="alice")
    assert str(info.value) == unwrapped("600", NO_REQUEST_ENTRY)
    wrapped = draft_request(BASE, options, owner="alice")  # with the entry: accepted, the entry wrapped
    assert wrapped.env_hook is False
    assert wrapped.request["AlgorithmSpecification"]["ContainerEntrypoint"][:2] == ["/bin/sh", "-c"]


def test_no_entry_without_keep_alive_is_debuggable_as_before(state: Path) -> None:
    """Env-hook mode itself stays: our sitecustomize on PYTHONPATH, the image's own entry, no keep-alive variable."""
    out, caught = _enable(_request(entry=False), state, keep_alive=0)
    validate("CreateTrainingJob", out)
    assert "ContainerEntrypoint" not in out["AlgorithmSpecification"]
    # ours first, then the request's own
    assert out["Environment"]["PYTHONPATH"] == f"{inject_dir(CHANNEL_ROOT)}:/opt/ml/code/lib"
    assert out["Environment"][spec.ENV_JOB] == "rd-raw-1"
    assert spec.ENV_KEEP_ALIVE not in out["Environment"]
    assert caught == []


@pytest.mark.parametrize(
    ("keep_alive", "needle"),
    [
        (-1, "keep-alive -1.0 s is out of range: use 0 (end with the command) up to a week"),
        (float("nan"), "keep-alive nan s is out of range"),
        (spec.MAX_WAIT_SECONDS + 1, "is out of range"),
        ("soon", "could not convert string to float"),
    ],
)
def test_bad_keep_alive_values(state: Path, keep_alive: Any, needle: str) -> None:
    with pytest.raises(EnableError) as info:
        remote_debug.enable(BASE, owner="alice", key_dir=state, keep_alive=keep_alive)
    assert needle in str(info.value) and "\n" not in str(info.value)
    assert not state.exists()


@pytest.mark.parametrize("limit", ["7200", float("inf"), float("nan"), True])
def test_a_limit_that_is_not_a_number_is_left_to_botocore(state: Path, limit: Any) -> None:
    """Not a number of seconds: botocore's validation refuses the request when it is sent, not enable()."""
    out, caught = _enable(_request(condition={"MaxRuntimeInSeconds": limit}), state, keep_alive=600)
    assert out["Environment"][spec.ENV_KEEP_ALIVE] == "600"
    [line] = [str(w.message) for w in caught]
    assert line.endswith("counts against the job's MaxRuntimeInSeconds"), line


def test_refused_before_the_owner_is_asked(state: Path) -> None:
    """The maximum runtime is the request's own: no AWS call (STS for the owner) before the refusal."""

    class NoAws:
        def client(self, service: str) -> Any:
            raise AssertionError(f"asked {service} before refusing")

    with pytest.raises(EnableError, match="does not fit in the job's"):
        remote_debug.enable(BASE, key_dir=state, keep_alive=7200, boto_session=NoAws())
    assert not state.exists()


LAUNCHER = """
import sys, remote_debug
request = {request!r}
for _ in range(3):  # one line, however often the launcher enables (Python's default warning filter)
    out = remote_debug.enable(request, owner="alice", key_dir=sys.argv[1], keep_alive=900)
print(out["Environment"]["REMOTE_DEBUG_KEEP_ALIVE"])
"""


def test_the_billing_line_is_printed_once(tmp_path: Path) -> None:
    """A real launcher process under Python's default warning filters: the note reaches stderr once."""
    script = tmp_path / "launch.py"
    script.write_text(LAUNCHER.format(request=BASE))
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "state")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "900\n"
    assert proc.stderr.count("SageMaker bills that time") == 1, proc.stderr
    [line] = [line for line in proc.stderr.splitlines() if "RemoteDebugWarning" in line]
    assert line == f"{script}:5: RemoteDebugWarning: {note('900', '3600')}"


# --- the SDK wrappers ----------------------------------------------------------------------------------


def _warnings(run: SdkRun, scenario: str) -> list[str]:
    return [w["message"] for w in run.results[scenario]["warnings"]]


def test_sdk_v2_estimator_keep_alive(sdk_runs: dict[str, SdkRun]) -> None:
    """The framework estimator (no container_entry_point: the toolkit is the entry) is refused; an estimator that
    names its entry, which the hook wraps, keeps its nodes alive."""
    v2 = sdk_runs["v2"]
    info = v2.scenario("v2-keep-alive")["info"]
    assert info["toolkit"] == unwrapped("600", NO_ESTIMATOR_ENTRY)
    assert info["toolkit-untouched"] == [[], None, {"USER_VAR": "kept"}]  # no bundle shipped, nothing changed
    assert info["toolkit-new-keys"] == []
    [request] = v2.requests("v2-keep-alive")
    assert request["TrainingJobName"] == info["job_name"] == "rd-byoc-keep-alive"
    assert_debuggable(
        request, v2.state_dir, package_root=CODE_ROOT, owner="alice", user_env={"USER_VAR": "kept"}, keep_alive="600"
    )
    entry = wrap_entrypoint(["python3", "/opt/program/train.py"], CODE_ROOT)
    assert request["AlgorithmSpecification"]["ContainerEntrypoint"] == entry
    assert request["StoppingCondition"]["MaxRuntimeInSeconds"] == 7200  # the estimator's max_run
    assert _warnings(v2, "v2-keep-alive") == [note("600", "7200")]  # the accepted enable() only


def test_sdk_v2_refuses_a_keep_alive_over_max_run(sdk_runs: dict[str, SdkRun]) -> None:
    v2 = sdk_runs["v2"]
    info = v2.scenario("v2-keep-alive-refusals")["info"]
    assert info["over-max-run"] == refusal("3600", "the job's max_run (3600 s)", "max_run", "keep alive at most 3599 s")
    assert info["over-default-max-run"] == refusal(
        "90000", "the job's max_run (86400 s)", "max_run", "keep alive at most 86399 s"
    )
    for case in ("over-max-run", "over-default-max-run"):  # refused before the estimator was changed
        assert info[f"{case}-untouched"] == [[], None, {"USER_VAR": "kept"}], case
    # max_run lowered, or the entry taken away, after enable(): fit() refuses the final request, before its key
    assert info["lowered-after-enable"] == refusal(
        "600", f"the job's {REQUEST_SETTING} (300 s)", REQUEST_SETTING, "keep alive at most 299 s"
    )
    assert info["entry-dropped-after-enable"] == unwrapped("600", NO_REQUEST_ENTRY)
    assert info["new-keys"] == []
    assert v2.requests("v2-keep-alive-refusals") == []
    assert _warnings(v2, "v2-keep-alive-refusals") == [note("600", "7200")] * 2  # the enable()s that were accepted


def test_sdk_v3_model_trainer_keep_alive(sdk_runs: dict[str, SdkRun]) -> None:
    v3 = sdk_runs["v3"]
    v3.scenario("v3-keep-alive")
    [request] = v3.requests("v3-keep-alive")
    assert_debuggable(
        request, v3.state_dir, package_root=CHANNEL_ROOT, owner="alice", user_env={"USER_VAR": "kept"}, keep_alive="600"
    )
    assert request["StoppingCondition"]["MaxRuntimeInSeconds"] == 7200
    assert _warnings(v3, "v3-keep-alive") == [note("600", "7200")]


def test_sdk_v3_refuses_a_keep_alive_over_the_trainers_runtime(sdk_runs: dict[str, SdkRun]) -> None:
    v3 = sdk_runs["v3"]
    info = v3.scenario("v3-keep-alive-refusals")["info"]
    assert info["max-runtime"] == 3600  # ModelTrainer's default, not SageMaker's day
    setting = "stopping_condition.max_runtime_in_seconds"
    assert info["over-default-max-runtime"] == refusal(
        "3600", f"the job's {setting} (3600 s)", setting, "keep alive at most 3599 s"
    )
    assert (info["channels"], info["environment"], info["new-keys"]) == ([], {"USER_VAR": "kept"}, [])
    # no source_code: no ContainerEntrypoint for the hook to wrap
    assert info["no-source-code"] == unwrapped("600", NO_TRAINER_ENTRY)
    assert info["no-source-code-untouched"] == [[], {"USER_VAR": "kept"}]
    assert v3.requests("v3-keep-alive-refusals") == []
    assert _warnings(v3, "v3-keep-alive-refusals") == []


# --- the command line ------------------------------------------------------------------------------------


LAUNCH = ["launch", "--local", "--name", "ka-job"]


def test_launch_keep_alive_reaches_the_jobs_spec(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``launch --keep-alive`` goes into the job's DebugOptions, which the local backend turns into its env."""
    from remote_debug.laptop.platforms import MachineBackend

    seen: list[Any] = []

    def launch(_self: Any, request: Any) -> Any:
        seen.append(request)
        raise UserError("stopped before starting the job")

    monkeypatch.setattr(MachineBackend, "launch", launch)
    code, _, err = run_cli(*LAUNCH, "--keep-alive", "45.5", "--source-dir", str(home), "--", "python", "x.py")
    assert (code, err.strip()) == (2, "remote-debug: error: stopped before starting the job")
    [request] = seen
    assert request.options.keep_alive == 45.5
    assert spec.spec_env("ka-job", spec.Transport.LOCAL, request.options)[spec.ENV_KEEP_ALIVE] == "45.5"
    code, _, _ = run_cli(*LAUNCH, "--source-dir", str(home), "--", "python", "x.py")
    assert seen[-1].options.keep_alive == 0
    assert spec.ENV_KEEP_ALIVE not in spec.spec_env("ka-job", spec.Transport.LOCAL, seen[-1].options)


@pytest.mark.parametrize(
    ("value", "needles"),
    [
        ("-1", ["'--keep-alive'", "greater than or equal to 0"]),
        ("inf", ["'--keep-alive'", "604800"]),
        ("nan", ["'--keep-alive'", "604800"]),
        ("soon", ["'--keep-alive'", "a valid number"]),
    ],
)
def test_launch_refuses_bad_keep_alive(home: Path, value: str, needles: list[str]) -> None:
    before = snapshot(home)
    assert_refused([*LAUNCH, "--keep-alive", value, "--source-dir", str(home), "--", "python", "x.py"], *needles)
    assert snapshot(home) == before


def test_enable_on_a_running_job_takes_no_keep_alive(home: Path) -> None:
    """A running job's Environment is fixed at CreateTrainingJob: ``enable JOB`` (UpdateTrainingJob) has no
    ``--keep-alive`` to offer, and says so as one line before anything is asked of AWS."""
    before = snapshot(home)
    assert_refused(["enable", "some-job", "--keep-alive", "600"], "--keep-alive")
    assert snapshot(home) == before


# --- the node daemon (env-hook mode) -------------------------------------------------------------------------

DAEMON = """
import sys
import remote_debug.container.node.services as node

class NoServices:  # the daemon's loop and its log, without sshd
    sshd = manifest = None
    def __init__(self, spec): pass
    def start(self): pass
    def publish(self, **_): pass
    def error(self, message): print(message, file=sys.stderr)
    def finish(self, *_): pass

node.NodeServices = NoServices
from remote_debug.container.node.bootstrap import run_daemon
sys.exit(run_daemon(int(sys.argv[1])))
"""


@pytest.mark.parametrize("keep_alive", [600, 0])
def test_the_node_daemon_says_it_cannot_keep_the_node_alive(tmp_path: Path, keep_alive: float) -> None:
    """A hand-made job environment with a keep-alive but no hook (enable() refuses that): the node daemon, which
    ends with the process it follows, says so in one line instead of ignoring it silently."""
    from remote_debug.laptop.core.keys import ensure_job_key, job_secret
    from remote_debug.laptop.core.paths import StatePaths

    key_path, public_key = ensure_job_key(StatePaths(tmp_path / "state"), "daemon-job")
    debug = spec.DebugSpec(
        job_name="daemon-job",
        client_public_key=public_key,
        job_secret=job_secret(key_path),
        transport=spec.Transport.SSM,
        options=spec.DebugOptions(keep_alive=keep_alive),
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "TMPDIR": str(tmp_path),
        "PYTHONPATH": str(REPO),
        "SM_CURRENT_HOST": "algo-2",
        **debug.to_env(),
    }
    ended = subprocess.Popen([sys.executable, "-c", "pass"])  # the process it follows: over already
    ended.wait()
    script = tmp_path / "daemon.py"
    script.write_text(DAEMON)
    proc = subprocess.run(
        [sys.executable, str(script), str(ended.pid)], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    said = [line for line in proc.stderr.splitlines() if "keep-alive" in line]
    if keep_alive:
        assert said == [
            "[remote-debug] keep-alive needs the entry wrapped by the hook; this node ends with its command "
            "(REMOTE_DEBUG_KEEP_ALIVE=600 ignored)"
        ], proc.stderr
    else:
        assert said == [], proc.stderr
