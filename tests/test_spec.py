"""The contract between laptop and job: the spec <-> environment, and the manifest documents."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest

from remote_debug.contract import spec
from remote_debug.contract.spec import (
    ContractError,
    DebugOptions,
    DebugSpec,
    NodeManifest,
    NodeState,
    RankDebugger,
    RankEndpoint,
    RankState,
    Transport,
)

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJExB6drpej4VU5APPdGydAYq4clP4mmQ5PSEGTtS4BX laptop"
SECRET = "5e" * 32  # any well-formed job secret: nothing here checks a proof


def _spec(**fields: Any) -> DebugSpec:
    """A spec; DebugOptions' fields (ide=, ranks=...) go into its options."""
    chosen = {f.name: fields.pop(f.name) for f in dataclasses.fields(DebugOptions) if f.name in fields}
    wiring = {"job_name": "my-job-1", "client_public_key": KEY, "job_secret": SECRET}
    return DebugSpec(**{**wiring, "options": DebugOptions(**chosen), **fields})


def _node(**fields: Any) -> NodeManifest:
    base: dict[str, Any] = dict(
        job_name="my-job-1",
        node="algo-1",
        hosts=["algo-1", "algo-2"],
        sshd_host="127.0.0.1",
        sshd_port=40022,
        ssh_user="root",
        host_public_key="ssh-ed25519 AAAAhost",
        code_dir="/opt/ml/code",
        state="running",
        hook_pid=42,
    )
    return NodeManifest(**{**base, **fields})


# --- spec <-> environment --------------------------------------------------------------------------


def test_env_round_trip() -> None:
    original = _spec(ide="pycharm", ranks=(0, 2), port_base=5700, sshd_port=2222, wait_seconds=1.5, transport="ssm")
    env = original.to_env()
    assert set(env) == set(spec.SPEC_ENV_NAMES)
    assert all(isinstance(v, str) for v in env.values())
    assert env[spec.ENV_RANKS] == "0,2" and env[spec.ENV_WAIT] == "1.5"
    assert DebugSpec.from_env(env) == original


def test_env_round_trip_defaults() -> None:
    original = _spec()
    env = original.to_env()
    assert env[spec.ENV_RANKS] == "all"
    assert DebugSpec.from_env(env) == original


def test_no_spec_in_env() -> None:
    assert DebugSpec.from_env({}) is None
    assert DebugSpec.from_env({"PATH": "/bin"}) is None


def test_from_env_fills_optional_fields() -> None:
    parsed = DebugSpec.from_env(
        {spec.ENV_VERSION: "1", spec.ENV_JOB: "j", spec.ENV_CLIENT_KEY: KEY, spec.ENV_JOB_SECRET: SECRET}
    )
    assert parsed == DebugSpec(job_name="j", client_public_key=KEY, job_secret=SECRET)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("all", None),
        ("", None),
        ("*", None),
        ("ALL", None),
        ("0", (0,)),
        ("2, 0,2", (0, 2)),
        ("0-2, 6", (0, 1, 2, 6)),
    ],
)
def test_parse_ranks(text: str, expected: tuple[int, ...] | None) -> None:
    assert spec.parse_ranks(text) == expected


@pytest.mark.parametrize("text", ["-1", "a", "0,,1", "1.5", "3-1", "\u00b2"])
def test_parse_ranks_rejects(text: str) -> None:
    with pytest.raises(ContractError, match="bad rank list"):
        spec.parse_ranks(text)


def test_selects() -> None:
    assert _spec().selects(7)
    assert _spec(ranks=(0, 2)).selects(2) and not _spec(ranks=(0, 2)).selects(1)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"job_name": "bad_name"}, "bad job name"),
        ({"job_name": "-starts-with-hyphen"}, "bad job name"),
        ({"job_name": "x" * 64}, "bad job name"),
        ({"job_name": ""}, "bad job name"),
        ({"ide": "emacs"}, "unknown IDE"),
        ({"transport": "carrier-pigeon"}, "unknown transport"),
        ({"port_base": 70000}, "out of range"),
        ({"port_base": -1}, "out of range"),
        ({"sshd_port": 65536}, "out of range"),
        ({"sshd_port": 22}, "port 22 is reserved"),
        ({"wait_seconds": -1}, "wait"),
        ({"wait_seconds": 8 * 24 * 3600}, "wait"),
        ({"client_public_key": "not a key"}, "client public key"),
        ({"client_public_key": "ssh-ed25519"}, "client public key"),
        ({"client_public_key": KEY + "\n" + KEY}, "client public key"),
        ({"client_public_key": "-----BEGIN OPENSSH PRIVATE KEY----- abc"}, "client public key"),
    ],
)
def test_validation_errors(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ContractError, match=message):
        _spec(**fields)


def _env(**changes: str | None) -> dict[str, str]:
    env = _spec().to_env()
    for name, value in changes.items():
        if value is None:
            env.pop(name)
        else:
            env[name] = value
    return env


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({spec.ENV_VERSION: "2"}, "version 2 is not supported"),
        ({spec.ENV_VERSION: "one"}, "is not a number"),
        ({spec.ENV_JOB: None}, f"missing {spec.ENV_JOB}"),
        ({spec.ENV_CLIENT_KEY: ""}, f"missing {spec.ENV_CLIENT_KEY}"),
        ({spec.ENV_PORT_BASE: "lots"}, "bad number"),
        ({spec.ENV_SSHD_PORT: "22"}, "port 22 is reserved"),
        ({spec.ENV_WAIT: "soon"}, "bad number"),
        ({spec.ENV_RANKS: "first"}, "bad rank list"),
        ({spec.ENV_JOB: "has space"}, "bad job name"),
    ],
)
def test_from_env_errors(changes: dict[str, str | None], message: str) -> None:
    with pytest.raises(ContractError, match=message):
        DebugSpec.from_env(_env(**changes))


def test_contract_errors_are_one_line() -> None:
    with pytest.raises(ContractError) as info:
        _spec(job_name="a\nb" * 100)
    assert "\n" not in str(info.value)


# --- manifests -------------------------------------------------------------------------------------


def test_node_and_rank_round_trip_and_merge(tmp_path: Path) -> None:
    node = _node(errors=["sshd failed: x"], exit_code=None)
    spec.write_node_manifest(tmp_path, node)
    r1 = RankEndpoint(rank=1, local_rank=1, world_size=2, port=5701, pid=11, state=RankState.ATTACHED)
    r0 = RankEndpoint(rank=0, local_rank=0, world_size=2, port=5700, pid=10)
    spec.write_rank_manifest(tmp_path, r1)
    spec.write_rank_manifest(tmp_path, r0)
    merged = spec.read_node_manifest(tmp_path)
    assert merged is not None
    assert merged.ranks == [r0, r1]  # sorted by rank, whatever order they were written in
    merged.ranks = []
    assert merged == node
    on_disk = json.loads((tmp_path / spec.NODE_MANIFEST_FILE).read_text())
    assert "ranks" not in on_disk  # ranks live in their own documents
    assert sorted(p.name for p in tmp_path.iterdir()) == ["node.json", "rank-0.json", "rank-1.json"]


def test_rank_rewrite_replaces_document(tmp_path: Path) -> None:
    spec.write_node_manifest(tmp_path, _node())
    ep = RankEndpoint(rank=0, local_rank=0, world_size=1, port=5700, pid=10)
    spec.write_rank_manifest(tmp_path, ep)
    ep.state = RankState.FINISHED
    spec.write_rank_manifest(tmp_path, ep)
    merged = spec.read_node_manifest(tmp_path)
    assert merged is not None and [r.state for r in merged.ranks] == ["finished"]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # no temp files left


def test_missing_node_manifest_is_none(tmp_path: Path) -> None:
    assert spec.read_node_manifest(tmp_path) is None
    assert spec.read_node_manifest(tmp_path / "nope") is None


def test_malformed_json(tmp_path: Path) -> None:
    (tmp_path / spec.NODE_MANIFEST_FILE).write_text('{"job_name": ')
    with pytest.raises(ContractError, match="malformed manifest"):
        spec.read_node_manifest(tmp_path)


def test_malformed_rank_json(tmp_path: Path) -> None:
    spec.write_node_manifest(tmp_path, _node())
    (tmp_path / "rank-0.json").write_text("not json")
    with pytest.raises(ContractError, match=r"malformed manifest .*rank-0\.json"):
        spec.read_node_manifest(tmp_path)


def _node_json(**changes: Any) -> dict[str, Any]:
    data = _node().to_json()
    for key, value in changes.items():
        if value is None:
            data.pop(key)
        else:
            data[key] = value
    return data


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "not a JSON object"),
        (_node_json(sshd_port="40022"), "must be an integer"),
        (_node_json(sshd_port=True), "must be an integer"),
        (_node_json(hook_pid=1.5), "must be an integer"),
        (_node_json(sshd_port=70000), "out of range"),
        (_node_json(version=2), "version 2 is not supported"),
        (_node_json(node="../etc"), "bad node name"),
        (_node_json(job_name="bad_job"), "bad job name"),
        (_node_json(host_public_key="ssh-ed25519"), "host key"),
        (_node_json(ssh_user=None), "ssh_user"),
        (_node_json(hosts=None), "hosts"),
        (_node_json(hosts="algo-1"), "must be a list"),
    ],
)
def test_node_manifest_errors(data: Any, message: str) -> None:
    with pytest.raises(ContractError, match=message):
        NodeManifest.from_json(data)


def _rank_json(**changes: Any) -> dict[str, Any]:
    data = RankEndpoint(rank=0, local_rank=0, world_size=1, port=5700, pid=1).to_json()
    for key, value in changes.items():
        if value is None:
            data.pop(key)
        else:
            data[key] = value
    return data


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("rank", "not a JSON object"),
        (_rank_json(port="5700"), "must be an integer"),
        (_rank_json(port=-1), "out of range"),
        (_rank_json(version=0), "version 0 is not supported"),
        (_rank_json(pid=None), "lacks 'pid'"),
    ],
)
def test_rank_manifest_errors(data: Any, message: str) -> None:
    with pytest.raises(ContractError, match=message):
        RankEndpoint.from_json(data)


def test_manifest_optional_fields_default() -> None:
    data = _rank_json()
    for key in ("state", "ide", "error"):
        data.pop(key)
    ep = RankEndpoint.from_json(data)
    assert (ep.state, ep.ide, ep.error) == ("listening", "vscode", None)
    node = _node_json()
    for key in ("state", "exit_code", "errors"):
        node.pop(key)
    parsed = NodeManifest.from_json(node)
    assert (parsed.state, parsed.exit_code, parsed.errors) == ("starting", None, [])


def test_env_format_is_unchanged_byte_for_byte() -> None:
    env = _spec(
        ide="pycharm",
        ranks=(0, 2),
        port_base=5700,
        sshd_port=2222,
        wait_seconds=1.5,
        transport="hybrid",
        hold_on_failure=90,
    ).to_env()
    assert list(env.items()) == [
        (spec.ENV_VERSION, "1"),
        (spec.ENV_JOB, "my-job-1"),
        (spec.ENV_IDE, "pycharm"),
        (spec.ENV_RANKS, "0,2"),
        (spec.ENV_PORT_BASE, "5700"),
        (spec.ENV_SSHD_PORT, "2222"),
        (spec.ENV_WAIT, "1.5"),
        (spec.ENV_CLIENT_KEY, KEY),
        (spec.ENV_JOB_SECRET, SECRET),
        (spec.ENV_TRANSPORT, "hybrid"),
        (spec.ENV_HOLD_ON_FAILURE, "90"),
    ]
    assert all(type(v) is str for v in env.values())  # plain str, not enum members


def test_enums_are_their_values() -> None:
    # what the job's spec and rank documents carry since before the editor and the debugger were told apart
    assert [d.value for d in RankDebugger] == ["vscode", "pycharm"]
    assert [t.value for t in Transport] == ["local", "ssm", "hybrid", "direct"]
    assert [s.value for s in NodeState] == ["starting", "running", "completed", "failed", "stopped"]
    assert "idle" in [s.value for s in RankState]  # lazy ranks write it
    # a StrEnum member equals its string (manifests compare both ways); mypy calls that non-overlapping
    assert RankDebugger.PYDEVD == "pycharm" and str(RankDebugger.PYDEVD) == "pycharm" and f"{RankState.HELD}" == "held"  # type: ignore[comparison-overlap]
    assert json.dumps({"state": RankState.FAILED}) == '{"state": "failed"}'
    parsed = _spec(ide="pycharm", transport="ssm")
    assert parsed.ide is RankDebugger.PYDEVD and parsed.transport is Transport.SSM


def test_manifest_json_is_unchanged_and_plain() -> None:
    ep = RankEndpoint(
        rank=1, local_rank=1, world_size=2, port=5701, pid=11, state=RankState.IDLE, ide=RankDebugger.PYDEVD
    )
    text = json.dumps(ep.to_json())
    assert text == (
        '{"rank": 1, "local_rank": 1, "world_size": 2, "port": 5701, "pid": 11, "state": "idle", "ide": "pycharm", '
        '"error": null, "version": 1, "control_port": 0, "traceback": null}'
    )
    assert type(ep.to_json()["state"]) is str and RankEndpoint.from_json(json.loads(text)) == ep
    node = _node().to_json()
    assert node["state"] == "running" and type(node["state"]) is str
    assert NodeManifest.from_json(node).state is NodeState.RUNNING


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({spec.ENV_IDE: "emacs"}, "unknown IDE 'emacs': use one of vscode, pycharm"),
        ({spec.ENV_TRANSPORT: "pigeon"}, "unknown transport 'pigeon': use one of local, ssm, hybrid, direct"),
        ({spec.ENV_HOLD_ON_FAILURE: "soon"}, "bad number"),
        ({spec.ENV_WAIT: "-1"}, "wait -1.0 s is out of range"),
    ],
)
def test_from_env_refuses_unknown_choices_in_one_line(changes: dict[str, str], message: str) -> None:
    with pytest.raises(ContractError, match=message) as info:
        DebugSpec.from_env(_env(**changes))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: RankEndpoint.from_json(_rank_json(state="sleeping")), "unknown rank state 'sleeping'"),
        (lambda: RankEndpoint.from_json(_rank_json(ide="emacs")), "unknown IDE 'emacs'"),
        (lambda: NodeManifest.from_json(_node_json(state="exploded")), "unknown node state 'exploded'"),
        (lambda: RankEndpoint(rank=0, local_rank=0, world_size=1, port=0, pid=1, state="nope"), "unknown rank state"),  # type: ignore[arg-type]
    ],
)
def test_manifests_refuse_unknown_states(make: Any, message: str) -> None:
    with pytest.raises(ContractError, match=message):
        make()


# --- options and wiring ------------------------------------------------------------------------------


def test_options_validate_themselves() -> None:
    # a string for an enum field (as parsed JSON has it) is converted: passing one is the point
    assert DebugOptions().ide is RankDebugger.DEBUGPY and DebugOptions(ide="pycharm").ide is RankDebugger.PYDEVD  # type: ignore[arg-type]
    cases: list[tuple[dict[str, Any], str]] = [
        ({"ide": "emacs"}, "unknown IDE"),
        ({"port_base": 70000}, "debug port base 70000 is out of range"),
        ({"sshd_port": 22}, "port 22 is reserved"),
        ({"wait_seconds": math.nan}, "wait nan s is out of range"),
        ({"hold_on_failure": -5.0}, "hold on failure -5.0 s is out of range"),
        ({"ranks": (-1, 0)}, "bad rank list"),
    ]
    for fields, message in cases:
        with pytest.raises(ContractError, match=message):
            DebugOptions(**fields)


def test_spec_is_options_plus_wiring() -> None:
    options = DebugOptions(
        ide=RankDebugger.PYDEVD, ranks=(1,), port_base=5700, sshd_port=2222, wait_seconds=3, hold_on_failure=4
    )
    debug = DebugSpec(job_name="j", client_public_key=KEY, job_secret=SECRET, transport=Transport.SSM, options=options)
    assert (debug.ide, debug.ranks, debug.port_base, debug.sshd_port, debug.wait_seconds, debug.hold_on_failure) == (
        RankDebugger.PYDEVD,
        (1,),
        5700,
        2222,
        3,
        4,
    )
    assert debug.selects(1) and not debug.selects(0)
    assert DebugSpec.from_env(debug.to_env()) == debug
    # what a job's environment holds before its key pair exists (enable() drafts with it)
    without_key = spec.spec_env("j", Transport.SSM, options)
    assert without_key == {
        k: v for k, v in debug.to_env().items() if k not in (spec.ENV_CLIENT_KEY, spec.ENV_JOB_SECRET)
    }


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, (7.0, "")),
        ("", (7.0, "")),
        ("  ", (7.0, "")),
        ("2.5", (2.5, "")),
        ("0", (0.0, "")),
        ("soon", (7.0, "X='soon' is not a number of seconds (0-10)")),
        ("-1", (7.0, "X='-1' is not a number of seconds (0-10)")),
        ("nan", (7.0, "X='nan' is not a number of seconds (0-10)")),
        ("11", (7.0, "X='11' is not a number of seconds (0-10)")),
    ],
)
def test_env_seconds(raw: str | None, expected: tuple[float, str]) -> None:
    env = {} if raw is None else {"X": raw}
    assert spec.env_seconds(env, "X", 7.0, low=0, high=10) == expected


def test_env_seconds_unbounded_names_no_range() -> None:
    assert spec.env_seconds({"X": "-3"}, "X", 0.0) == (-3.0, "")
    assert spec.env_seconds({"X": "x"}, "X", 0.0) == (0.0, "X='x' is not a number of seconds")
