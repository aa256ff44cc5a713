"""``keep_alive`` on SageMaker: the request, the SDK wrappers and ``launch --keep-alive``.

A kept-alive job's nodes stay up after the training command ends, inside the job's
``MaxRuntimeInSeconds`` and billed: ``enable()`` carries the seconds in the job's environment
(``REMOTE_DEBUG_KEEP_ALIVE``, absent when 0), says once that the hold is billed, and refuses a keep-alive
that does not fit in the maximum runtime - before any key pair (or anything else) is written.
Requests are validated against botocore's service model, through moto where it helps; the SDK
wrappers run in the SDK venvs (``drivers/capture_sdk.py``).
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

import remote_debug
from remote_debug import spec
from remote_debug.local.errors import UserError
from remote_debug.sagemaker.bundle import CHANNEL_ROOT, CODE_ROOT
from remote_debug.sagemaker.common import EnableError, RemoteDebugWarning
from tests.cli.test_bad_input import assert_refused, run_cli, snapshot
from tests.fake_aws import moto_cloud
from tests.sagemaker.conftest import SdkRun
from tests.sagemaker.helpers import MOTO_USER_ID, assert_debuggable, validate
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


_AS_IS = object()


def _request(condition: Any = _AS_IS) -> dict[str, Any]:
    """A copy of BASE (MaxRuntimeInSeconds 3600), with another StoppingCondition if given; None leaves it out."""
    request = copy.deepcopy(BASE)
    if condition is None:
        del request["StoppingCondition"]
    elif condition is not _AS_IS:
        request["StoppingCondition"] = condition
    return request


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with moto_cloud(monkeypatch, "us-east-1"):
        yield


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
    assert_debuggable(out, state, package_root=CHANNEL_ROOT, owner="alice",
                      user_env={"USER_VAR": "kept", "PYTHONPATH": "/opt/ml/code/lib"}, keep_alive=value)
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
    assert_debuggable(sent, state, package_root=CHANNEL_ROOT, owner=MOTO_USER_ID,
                      user_env={"USER_VAR": "kept"}, keep_alive="1800")
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
    ("equal-to-max-runtime", _request(), 3600,
     refusal("3600", f"the job's {REQUEST_SETTING} (3600 s)", REQUEST_SETTING, "keep alive at most 3599 s")),
    ("over-max-runtime", _request(condition={"MaxRuntimeInSeconds": 900}), 1200.5,
     refusal("1200.5", f"the job's {REQUEST_SETTING} (900 s)", REQUEST_SETTING, "keep alive at most 899 s")),
    ("over-the-default-day", _request(condition=None), 86400,
     refusal("86400", f"SageMaker's default {REQUEST_SETTING} (86400 s: none given)", REQUEST_SETTING,
             "keep alive at most 86399 s")),
    ("one-second-runtime", _request(condition={"MaxRuntimeInSeconds": 1}), 1,
     refusal("1", f"the job's {REQUEST_SETTING} (1 s)", REQUEST_SETTING, "drop the keep-alive")),
]


@pytest.mark.parametrize(("request_dict", "keep_alive", "message"), [r[1:] for r in KEEP_ALIVE_REFUSALS],
                         ids=[r[0] for r in KEEP_ALIVE_REFUSALS])
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


@pytest.mark.parametrize(("keep_alive", "needle"), [
    (-1, "keep-alive -1.0 s is out of range: use 0 (end with the command) up to a week"),
    (float("nan"), "keep-alive nan s is out of range"),
    (spec.MAX_WAIT_SECONDS + 1, "is out of range"),
    ("soon", "could not convert string to float"),
])
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
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "state")], capture_output=True, text=True,
                          env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "900\n"
    assert proc.stderr.count("SageMaker bills that time") == 1, proc.stderr
    [line] = [line for line in proc.stderr.splitlines() if "RemoteDebugWarning" in line]
    assert line == f"{script}:5: RemoteDebugWarning: {note('900', '3600')}"


# --- the SDK wrappers ----------------------------------------------------------------------------------


def _warnings(run: SdkRun, scenario: str) -> list[str]:
    return [w["message"] for w in run.results[scenario]["warnings"]]


def test_sdk_v2_estimator_keep_alive(sdk_runs: dict[str, SdkRun]) -> None:
    v2 = sdk_runs["v2"]
    result = v2.scenario("v2-keep-alive")
    [request] = v2.requests("v2-keep-alive")
    assert request["TrainingJobName"] == result["info"]["job_name"]
    assert_debuggable(request, v2.state_dir, package_root=CODE_ROOT, owner="alice", user_env={"USER_VAR": "kept"},
                      keep_alive="600")
    assert request["StoppingCondition"]["MaxRuntimeInSeconds"] == 7200  # the estimator's max_run
    assert _warnings(v2, "v2-keep-alive") == [note("600", "7200")]


def test_sdk_v2_refuses_a_keep_alive_over_max_run(sdk_runs: dict[str, SdkRun]) -> None:
    v2 = sdk_runs["v2"]
    info = v2.scenario("v2-keep-alive-refusals")["info"]
    assert info["over-max-run"] == refusal("3600", "the job's max_run (3600 s)", "max_run", "keep alive at most 3599 s")
    assert info["over-default-max-run"] == refusal(
        "90000", "the job's max_run (86400 s)", "max_run", "keep alive at most 86399 s"
    )
    for case in ("over-max-run", "over-default-max-run"):  # refused before the estimator was changed
        assert info[f"{case}-untouched"] == [[], None, {"USER_VAR": "kept"}], case
    # max_run lowered after enable(): fit() refuses the final request, before its key pair is made
    assert info["lowered-after-enable"] == refusal(
        "600", f"the job's {REQUEST_SETTING} (300 s)", REQUEST_SETTING, "keep alive at most 299 s"
    )
    assert info["new-keys"] == []
    assert v2.requests("v2-keep-alive-refusals") == []
    assert _warnings(v2, "v2-keep-alive-refusals") == [note("600", "7200")]  # the enable() that was accepted


def test_sdk_v3_model_trainer_keep_alive(sdk_runs: dict[str, SdkRun]) -> None:
    v3 = sdk_runs["v3"]
    v3.scenario("v3-keep-alive")
    [request] = v3.requests("v3-keep-alive")
    assert_debuggable(request, v3.state_dir, package_root=CHANNEL_ROOT, owner="alice", user_env={"USER_VAR": "kept"},
                      keep_alive="600")
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
    assert v3.requests("v3-keep-alive-refusals") == []
    assert _warnings(v3, "v3-keep-alive-refusals") == []


# --- the command line ------------------------------------------------------------------------------------


LAUNCH = ["launch", "--local", "--name", "ka-job"]


def test_launch_keep_alive_reaches_the_jobs_spec(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``launch --keep-alive`` goes into the job's DebugOptions, which the local backend turns into its env."""
    from remote_debug.local.backends import MachineBackend

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


@pytest.mark.parametrize(("value", "needles"), [
    ("-1", ["'--keep-alive'", "greater than or equal to 0"]),
    ("inf", ["'--keep-alive'", "604800"]),
    ("nan", ["'--keep-alive'", "604800"]),
    ("soon", ["'--keep-alive'", "a valid number"]),
])
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
