"""The attach event stream is defined once (remote_debug/laptop/wire/events.py): the VS Code extension's types are
generated from it, and every event survives the trip to JSON and back."""

from __future__ import annotations

import ast
import dataclasses
import difflib
import enum
import io
import json
import typing
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any, Union

import pytest

from remote_debug.cli.output import event_printer
from remote_debug.contract import spec
from remote_debug.contract.spec import RankDebugger, RankState
from remote_debug.laptop.aws.sagemaker_backend import job_info
from remote_debug.laptop.core.jobinfo import TERMINAL, Isolation, JobInfo, JobStatus, MachineJobDetails
from remote_debug.laptop.core.paths import StatePaths
from remote_debug.laptop.ide import vscode_launch
from remote_debug.laptop.ide.headless_session import RankReport, StopRecord
from remote_debug.laptop.machine.backend import MachineBackend
from remote_debug.laptop.wire import events as ev
from tools import generate_wire

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ROOT / "vscode-extension" / "src" / "generated" / "events.ts"


def test_the_extension_types_are_generated_from_the_events() -> None:
    fresh = generate_wire.typescript(generate_wire.typescript_extra())
    committed = GENERATED.read_text(encoding="utf-8")
    if fresh != committed:
        diff = "".join(
            difflib.unified_diff(
                committed.splitlines(keepends=True),
                fresh.splitlines(keepends=True),
                "vscode-extension/src/generated/events.ts (committed)",
                "python tools/generate_wire.py",
            )
        )
        pytest.fail(
            "the extension's wire types differ from their Python definitions: run "
            "`npm run generate` in vscode-extension/ (or python tools/generate_wire.py "
            "--out vscode-extension/src/generated/events.ts) and commit the result\n" + diff
        )


def test_the_generator_writes_only_what_changed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "generated" / "events.ts"
    assert generate_wire.main(["--out", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == GENERATED.read_text(encoding="utf-8")
    written = out.stat().st_mtime_ns
    assert generate_wire.main(["--out", str(out)]) == 0
    assert out.stat().st_mtime_ns == written  # same text: the file is left alone (no rebuild for npm watchers)
    out.write_text("// stale\n", encoding="utf-8")
    assert generate_wire.main(["--out", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == GENERATED.read_text(encoding="utf-8")
    assert generate_wire.main([]) == 0
    assert capsys.readouterr().out == out.read_text(encoding="utf-8")
    assert generate_wire.main(["--python"]) == 2


def _all_subclasses(cls: type[Any]) -> set[type[Any]]:
    found = set(cls.__subclasses__())
    for sub in list(found):
        found |= _all_subclasses(sub)
    return found


def test_wire_names_are_unique_and_every_event_is_listed() -> None:
    names = [cls.name for cls in ev.EVENT_TYPES]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    assert all(names), "every event has a wire name"
    assert {c for c in _all_subclasses(ev.Event) if c.__module__ == ev.__name__} == set(ev.EVENT_TYPES)
    for cls in ev.EVENT_TYPES:
        assert dataclasses.is_dataclass(cls)
        assert cls.__dataclass_params__.frozen, cls  # type: ignore[attr-defined]
        assert all(f.kw_only for f in dataclasses.fields(cls)), cls
        assert "name" not in {f.name for f in dataclasses.fields(cls)}, "name is the wire name"


# --- a sample of every event, built from its type hints ---------------------------------------------


def _sample(tp: Any, *, none: bool) -> Any:
    origin = typing.get_origin(tp)
    if origin is Union or str(origin) == "<class 'types.UnionType'>":
        args = typing.get_args(tp)
        if none and type(None) in args:
            return None
        return _sample(next(a for a in args if a is not type(None)), none=none)
    if origin is list:
        return [_sample(typing.get_args(tp)[0], none=none)]
    if origin is dict:
        return {"key": _sample(typing.get_args(tp)[1], none=none)}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _instance(tp, none=none)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return list(tp)[-1]
    return {str: "text", int: 7, float: 1.5, bool: True}[tp]


def _instance(cls: type[Any], *, none: bool) -> Any:
    hints = typing.get_type_hints(cls)
    return cls(**{f.name: _sample(hints[f.name], none=none) for f in dataclasses.fields(cls)})


SAMPLES = [
    pytest.param(_instance(cls, none=none), id=f"{cls.name}-{'nulls' if none else 'values'}")
    for cls in ev.EVENT_TYPES
    for none in (False, True)
]


@pytest.mark.parametrize("event", SAMPLES)
def test_every_event_round_trips_through_its_json_line(event: ev.Event) -> None:
    line = json.dumps(event.to_json())  # JSON types only: no default= needed
    data = json.loads(line)
    assert list(data)[:2] == ["event", "v"] and data["event"] == event.name and data["v"] == ev.EVENTS_VERSION
    assert ev.from_json(data) == event
    printed = io.StringIO()
    with redirect_stdout(printed):
        event_printer(True)(event)
    assert ev.from_json(json.loads(printed.getvalue())) == event  # what `attach --json` prints


def test_from_json_is_strict() -> None:
    good = ev.Ready(ranks=[0]).to_json()
    assert ev.from_json({k: v for k, v in good.items() if k != "v"}) == ev.Ready(ranks=[0])
    with pytest.raises(ValueError, match="unknown event"):
        ev.from_json({"event": "nope"})
    with pytest.raises(ValueError, match="unknown fields"):
        ev.from_json({**good, "extra": 1})
    with pytest.raises(ValueError, match="missing field"):
        ev.from_json({"event": "ready", "v": 1})
    with pytest.raises(ValueError, match="expected int"):
        ev.from_json({**good, "ranks": ["0"]})
    with pytest.raises(ValueError, match="expected int"):
        ev.from_json({**good, "ranks": [True]})
    with pytest.raises(ValueError, match="version"):
        ev.from_json({**good, "v": ev.EVENTS_VERSION + 1})
    config = ev.PycharmConfig(path="/p", config_name="remote-debug: j", port=5678, steps=[])
    assert config.to_json()["name"] == "remote-debug: j"  # the field's wire name
    assert ev.from_json(config.to_json()) == config


# --- the fields with a closed set of values: StrEnums, TypeScript unions -------------------------------


def _interface(ts: str, name: str) -> str:
    start = ts.index(f"export interface {name} {{")
    return ts[start : ts.index("\n}", start)]


def test_enum_fields_are_named_unions_in_the_typescript() -> None:
    ts = generate_wire.typescript(generate_wire.typescript_extra())
    assert "export type RankDebugger = 'vscode' | 'pycharm';" in ts
    assert "export type JobStatus = 'InProgress' | 'Completed' | 'Failed' | 'Stopping' | 'Stopped';" in ts
    union = "export type RankState =\n" + "".join(f"  | '{s.value}'\n" for s in RankState).rstrip("\n") + ";"
    assert union in ts
    for alias in ("RankDebugger", "JobStatus", "RankState"):
        assert ts.count(f"export type {alias} =") == 1, "declared once, referenced by name"
    ready = _interface(ts, "RankReadyEvent")
    assert "  state: RankState;" in ready and "  ide: RankDebugger;" in ready
    assert "  state: RankState;" in _interface(ts, "RankUnavailableEvent")
    for name in ("JobStatusEvent", "JobEndedEvent", "JobInfo"):
        assert "  status: JobStatus;" in _interface(ts, name), name
    assert "  secondary_status: string;" in _interface(ts, "JobInfo"), "open-ended: stays a string"
    assert ts.index("export type JobStatus") < ts.index("export interface JobStatusEvent")


def test_the_generator_maps_only_str_enums() -> None:
    class Number(enum.Enum):
        ONE = 1

    with pytest.raises(TypeError, match="only a StrEnum"):
        generate_wire._ts_type(Number, {})
    with pytest.raises(TypeError, match="two types named RankState"):
        # mypy reads the functional enum API only on enum.Enum itself, not on our StrEnum
        clash = spec.StrEnum("RankState", {"X": "x"})  # type: ignore[call-overload]
        generate_wire._ts_type(clash, {"RankState": RankState})


ENUM_EVENTS = [
    ev.RankReady(
        rank=0,
        node="algo-1",
        local_port=4000,
        remote_port=5000,
        state=RankState.IDLE,
        ide=RankDebugger.PYDEVD,
        code_dir="/opt/ml/code",
    ),
    ev.RankUnavailable(rank=1, node="algo-1", state=RankState.SKIPPED),
    ev.JobStatusEvent(job="j", status=JobStatus.IN_PROGRESS, secondary_status="Downloading"),
    ev.JobEnded(status=JobStatus.FAILED, exit_code=1, failure_reason="OOM"),
]


@pytest.mark.parametrize("event", ENUM_EVENTS, ids=lambda e: e.name)
def test_enum_fields_travel_as_plain_strings(event: ev.Event) -> None:
    fields = {f.name: getattr(event, f.name) for f in dataclasses.fields(event)}
    plain = {k: v.value if isinstance(v, enum.Enum) else v for k, v in fields.items()}
    assert any(isinstance(v, enum.Enum) for v in fields.values())
    as_strings = {"event": event.name, "v": ev.EVENTS_VERSION, **plain}
    assert event.to_json() == as_strings
    assert json.dumps(event.to_json()) == json.dumps(as_strings)  # byte for byte
    assert not any(isinstance(v, enum.Enum) for v in event.to_json().values()), "to_json: JSON types only"
    assert "State." not in json.dumps(event.to_json()) and "IDE." not in json.dumps(event.to_json())
    back = ev.from_json(json.loads(json.dumps(event.to_json())))
    assert back == event
    for key, value in fields.items():
        if isinstance(value, enum.Enum):
            assert getattr(back, key) is value, "from_json gives the member, not the string"


def test_from_json_refuses_a_value_outside_the_enum() -> None:
    good = ENUM_EVENTS[0].to_json()
    with pytest.raises(ValueError, match=r"rank-ready\.state: unknown RankState 'hibernating': one of 'idle'"):
        ev.from_json({**good, "state": "hibernating"})
    with pytest.raises(ValueError, match=r"rank-ready\.ide: unknown RankDebugger 'emacs'"):
        ev.from_json({**good, "ide": "emacs"})
    with pytest.raises(ValueError, match="unknown RankState 'IDLE'"):
        ev.from_json({**good, "state": "IDLE"})  # the member's name is not its value
    with pytest.raises(ValueError, match=r"rank-ready\.state: expected str, got int"):
        ev.from_json({**good, "state": 1})
    with pytest.raises(ValueError, match="unknown JobStatus 'Expired'"):
        ev.from_json(ev.JobEnded(status=JobStatus.STOPPED).to_json() | {"status": "Expired"})


# --- JobInfo (`jobs --json`; its TypeScript type is generated too) -------------------------------------


def _job(status: JobStatus) -> JobInfo:
    return JobInfo(
        name="j",
        backend="local",
        status=status,
        secondary_status="Training",
        nodes=["algo-1"],
        details=MachineJobDetails(job_dir="/jobs/j", isolation=Isolation.LOOPBACK),
    )


def test_job_info_json_is_what_plain_strings_gave() -> None:
    data = _job(JobStatus.IN_PROGRESS).to_json()
    assert type(data["status"]) is str and data["status"] == "InProgress"
    plain: dict[str, object] = {}
    for key, value in (dataclasses.asdict(_job(JobStatus.IN_PROGRESS)) | {"status": "InProgress"}).items():
        # the platform's details sit where the extension has always read them: a key per platform, in place
        plain |= {"machine": value, "sagemaker": None} if key == "details" else {key: value}
    assert json.dumps(data) == json.dumps(plain)
    assert json.dumps(data, default=str) == json.dumps(plain)  # as print_json writes it
    assert _job(JobStatus.STOPPING).running and not _job(JobStatus.STOPPED).running
    assert all(isinstance(s, JobStatus) for s in TERMINAL)
    assert "Completed" in TERMINAL and "InProgress" not in TERMINAL  # a raw API string works too


def test_sagemaker_status_maps_to_the_enum_and_an_unknown_one_reads_as_in_progress() -> None:
    def info(**resp: str) -> JobInfo:
        return job_info("j", {"SecondaryStatus": "Training", **resp}, {}, "us-east-1")

    assert info(TrainingJobStatus="Completed").status is JobStatus.COMPLETED
    assert info(TrainingJobStatus="Completed").exit_code == 0
    assert info().status is JobStatus.IN_PROGRESS  # absent: still starting
    odd = info(TrainingJobStatus="Expired")
    assert odd.status is JobStatus.IN_PROGRESS and odd.exit_code is None
    assert odd.status_message == "unknown TrainingJobStatus 'Expired' (read as InProgress)"
    assert odd.to_json()["status"] == "InProgress"


def test_an_unknown_status_in_a_local_job_file_is_a_contract_error(tmp_path: Path) -> None:
    paths = StatePaths(tmp_path)
    job_dir = paths.job_dir("j")
    job_dir.mkdir(parents=True)
    (job_dir / "job.json").write_text(json.dumps({"name": "j", "status": "Completed", "nodes": ["algo-1"]}))
    backend = MachineBackend(paths)
    assert backend.describe("j").status is JobStatus.COMPLETED
    (job_dir / "job.json").write_text(json.dumps({"name": "j", "status": "Expired", "nodes": ["algo-1"]}))
    with pytest.raises(spec.ContractError, match=r"unknown job status in .*job\.json 'Expired'"):
        backend.describe("j")
    assert backend.list_jobs() == []  # left out, as an unreadable job.json is


# --- the emit sites -----------------------------------------------------------------------------------


def test_headless_stops_and_the_summary_round_trip() -> None:
    stop = StopRecord("/ws/train.py", 12, "main", "breakpoint", {"rank": "0"})
    stopped = stop.event(0, "algo-1")
    assert ev.from_json(stopped.to_json()) == stopped
    assert stopped.to_json() == {"event": "stopped", "v": 1, "rank": 0, "node": "algo-1", **vars(stop)}
    report = RankReport(0, "algo-1", [stop, StopRecord("/ws/train.py", 13, "main", "step", {})])
    summary = ev.Summary(job="j", exit_code=0, ranks=[report.summary(), RankReport(1, "algo-2", error="EOF").summary()])
    assert ev.from_json(summary.to_json()) == summary
    assert summary.to_json()["ranks"][0] == report.to_json()  # demo --json prints the same rank objects
    assert report.to_json() == {
        "rank": 0,
        "node": "algo-1",
        "file": "/ws/train.py",
        "line": 12,
        "variables": {"rank": "0"},
        "stops": [vars(s) for s in report.stops],
        "error": None,
    }


def _event_constructions() -> list[tuple[str, int, str, set[str]]]:
    """(file, line, event class, keyword names) of every ``ev.X(...)``/``X(...)`` event built in remote_debug/."""
    classes = {cls.__name__ for cls in ev.EVENT_TYPES}
    found = []
    for path in sorted((ROOT / "remote_debug").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in classes:
                keywords = {k.arg for k in node.keywords if k.arg is not None}
                found.append((str(path.relative_to(ROOT)), node.lineno, name, keywords))
    return found


def test_emit_sites_build_typed_events_with_known_fields() -> None:
    sites = _event_constructions()
    assert sites, "the emit sites construct events from remote_debug.laptop.wire.events"
    by_name = {cls.__name__: cls for cls in ev.EVENT_TYPES}
    for where, line, name, keywords in sites:
        fields = {f.name for f in dataclasses.fields(by_name[name])}
        assert keywords <= fields, f"{where}:{line}: {name} has no fields {sorted(keywords - fields)}"


def test_no_event_is_written_as_a_dict_literal() -> None:
    """The stream has one definition: an ``{"event": ...}`` literal in remote_debug/ is a second one."""
    offenders = []
    for path in sorted((ROOT / "remote_debug").rglob("*.py")):
        if path.name == "events.py" and path.parent.name == "wire":
            continue  # Event.to_json
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            keys = {k.value for k in node.keys if isinstance(k, ast.Constant)} if isinstance(node, ast.Dict) else set()
            # a DAP message ({"type": "event", "event": "stopped"}) is the debug protocol's, not our stream's
            if isinstance(node, ast.Dict) and "event" in keys and "type" not in keys:
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, f"build events with remote_debug.laptop.wire.events instead: {offenders}"


def test_configuration_names_have_one_definition() -> None:
    assert vscode_launch.config_name("j", 3, "algo-2") == "remote-debug: j rank 3 (algo-2)"
    assert vscode_launch.compound_name("j") == "remote-debug: j all ranks"
    assert vscode_launch.config_name("{job}", 0, "n") == "remote-debug: {job} rank 0 (n)"
    for name in (vscode_launch.config_name("j", 0, "n"), vscode_launch.compound_name("j")):
        assert name.startswith(ev.format_config_name_prefix("j"))
    ts = GENERATED.read_text(encoding="utf-8")
    for template in (ev.CONFIG_NAME_TEMPLATE, ev.COMPOUND_NAME_TEMPLATE, ev.CONFIG_NAME_PREFIX_TEMPLATE):
        assert f"'{template}'" in ts
