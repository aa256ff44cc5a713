"""Every JSON document the CLI prints, and every reply of a rank's control channel, has one typed definition:
the CLI builds its output from it, the extension's types are generated from it (test_events_schema.py checks
the committed copy), and the shapes are the ones the extension and older ranks read."""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from remote_debug.cli.jobs import unlisted
from remote_debug.contract import control_replies as replies
from remote_debug.contract import spec
from remote_debug.contract.spec import ContractError
from remote_debug.laptop.aws.access import PROBLEMS
from remote_debug.laptop.connection.ssh_config import HostEntry
from remote_debug.laptop.core.errors import AwsAccessError, UserError
from remote_debug.laptop.wire import documents, event_text
from remote_debug.laptop.wire import events as ev
from tools import generate_wire

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ROOT / "vscode-extension" / "src" / "generated" / "events.ts"


def test_every_document_has_a_generated_interface() -> None:
    ts = GENERATED.read_text(encoding="utf-8")
    for cls in documents.DOCUMENT_TYPES:
        assert f"export interface {cls.__name__} {{" in ts, cls
    for name in ("AdoptCandidate", "AdoptOutcome", "AdoptedRank", "StackThread", "RankStacks", "SshEntries"):
        assert f"export interface {name} {{" in ts, name
    assert "export function formatSshAlias(job: string, node: string): string {" in ts


def test_typed_dict_keys_of_a_total_false_base_are_optional() -> None:
    lines = generate_wire._ts_fields(documents.RankStacks, {})
    assert "  control_error?: string;" in lines and "  error: string | null;" in lines
    assert "  hold_seconds_left: number | null;" in lines


def test_the_cli_prints_no_dict_literal() -> None:
    """A ``print_json({...})`` in a command is a document nobody else can type: build a document instead."""
    offenders = []
    for path in sorted((ROOT / "remote_debug" / "cli").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", None) == "print_json"
                and node.args
                and isinstance(node.args[0], ast.Dict)
                and path.name not in _NOT_READ_BY_THE_EXTENSION
            ):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders


# every command's document is typed (laptop/wire/documents.py), read by the extension or not
_NOT_READ_BY_THE_EXTENSION: set[str] = set()


def test_documents_print_the_shapes_the_extension_reads() -> None:
    version = documents.VersionInfo(version="1.0", distribution="d", python="/p", events_version=1)
    assert list(version.to_json()) == ["version", "distribution", "python", "events_version"]
    written = documents.SshConfigWritten(aliases=["a.j"], config="/c", user_config="/u", user_config_changed=True)
    assert written.to_json() == {"aliases": ["a.j"], "config": "/c", "user_config": "/u", "user_config_changed": True}
    preview = documents.SshConfigPreview(aliases=["a.j"], user_config_diff="", job_config="Host a.j")
    assert preview.to_json() == {"aliases": ["a.j"], "dry_run": True, "user_config_diff": "", "job_config": "Host a.j"}
    removed = documents.SshEntriesRemoved(
        removed_jobs=[documents.SshEntries(job="j", aliases=["a.j"], known_hosts=1)],
        restored="/u",
        changed=False,
        dry_run=True,
        user_config_diff="",
    )
    assert removed.to_json()["removed_jobs"] == [{"job": "j", "aliases": ["a.j"], "known_hosts": 1}]
    assert documents.Released(job="j", released=["algo-1"]).to_json() == {"job": "j", "released": ["algo-1"]}


def test_a_listing_problem_is_one_of_the_kinds_the_extension_knows() -> None:
    assert {k.value for k in documents.ListingProblemKind} == set(PROBLEMS)
    error = AwsAccessError("token expired", problem="sso-expired", fix="aws sso login", profile="dev", region="r")
    line = json.dumps(unlisted("sagemaker", error).to_json())
    assert json.loads(line) == {
        "unlisted": "sagemaker",
        "problem": "sso-expired",
        "message": "token expired",
        "fix": "aws sso login",
        "profile": "dev",
        "region": "r",
    }
    assert unlisted("sagemaker", UserError("odd\nthing")).problem is documents.ListingProblemKind.ERROR


def test_the_ssh_alias_has_one_format() -> None:
    assert documents.format_ssh_alias("job-1", "algo-2") == "algo-2.job-1"
    entry = HostEntry(
        job="job-1",
        node="algo-2",
        user="u",
        port=22,
        host_public_key="ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB",
        identity_file=Path("/k"),
        proxy_command="proxy %h %p",
    )
    assert entry.alias == documents.format_ssh_alias("job-1", "algo-2")


# --- the control channel's replies ------------------------------------------------------------------------


def _wire(reply: replies.Reply) -> dict[str, Any]:
    data = json.loads(json.dumps(reply.to_json()))
    assert isinstance(data, dict)
    return data


def test_control_replies_keep_their_wire_shape() -> None:
    assert _wire(replies.Refused(error="no")) == {"ok": False, "error": "no"}
    assert _wire(replies.Proof(proof="p")) == {"ok": True, "proof": "p"}
    assert _wire(replies.Listening(port=5678, detail="d")) == {"ok": True, "port": 5678, "detail": "d"}
    assert _wire(replies.Detail(detail="not waiting")) == {"ok": True, "detail": "not waiting"}
    status = replies.ConnectStatus.CONNECTING
    assert _wire(replies.Connecting(status=status, detail=None)) == {"ok": True, "status": "connecting", "detail": None}
    stacks = replies.Stacks(
        pid=7,
        threads=[replies.ThreadStack(name="Main", frames=[replies.Frame(file="t.py", line=3, function="f")])],
    )
    assert _wire(stacks) == {
        "ok": True,
        "pid": 7,
        "threads": [
            {
                "name": "Main",
                "frames": [{"file": "t.py", "line": 3, "function": "f"}],
                "exception": None,
                "internal": False,
            }
        ],
    }


def test_control_replies_read_back_what_the_rank_sent() -> None:
    assert replies.Listening.read(_wire(replies.Listening(port=5678, detail="d"))) == replies.Listening(
        port=5678, detail="d"
    )
    stacks = replies.Stacks(pid=7, threads=[replies.ThreadStack(name="T", frames=[], exception="E", internal=True)])
    assert replies.Stacks.read(_wire(stacks)) == stacks
    assert replies.Connecting.read({"ok": True, "status": "attached"}).status == "attached"
    assert replies.Detail.read({"ok": True}).detail is None


def test_control_replies_tolerate_more_and_refuse_less() -> None:
    newer = {"ok": True, "port": 1, "detail": None, "added_later": [1]}
    assert replies.Listening.read(newer).port == 1  # a newer rank's extra fields are ignored
    with pytest.raises(ValueError, match="without a port"):
        replies.Listening.read({"ok": True, "port": "5678"})
    with pytest.raises(ValueError, match="without a port"):
        replies.Listening.read({"ok": True, "port": True})
    with pytest.raises(ValueError, match="not a list"):
        replies.Stacks.read({"ok": True, "threads": {}})
    assert replies.Stacks.read({"ok": True}).threads == []  # an older rank: no threads, no pid


# --- the formats both languages build: shared test vectors (vscode-extension/test/unit/wire.test.ts reads them too)

VECTORS = json.loads((ROOT / "vscode-extension" / "test" / "unit" / "fixtures" / "wire-vectors.json").read_text())


@pytest.mark.parametrize("vector", VECTORS["ssh_alias"], ids=lambda v: v["alias"])
def test_ssh_alias_vectors(vector: dict[str, str]) -> None:
    assert documents.format_ssh_alias(vector["job"], vector["node"]) == vector["alias"]


def test_configuration_name_vectors() -> None:
    for v in VECTORS["config_name"]:
        assert ev.format_config_name(v["job"], v["rank"], v["node"]) == v["name"]
    for v in VECTORS["compound_name"]:
        assert ev.format_compound_name(v["job"]) == v["name"]


@pytest.mark.parametrize("vector", VECTORS["rank_text"], ids=lambda v: repr(v["text"]))
def test_rank_grammar_vectors(vector: dict[str, Any]) -> None:
    """`--ranks` takes what the extension's settings take: the one grammar, the same cases."""
    if "error" in vector:
        with pytest.raises(ContractError, match="bad rank list"):
            spec.parse_ranks(vector["text"])
    else:
        parsed = spec.parse_ranks(vector["text"])
        assert (None if parsed is None else list(parsed)) == vector["ranks"]


def test_rank_ranges_vectors() -> None:
    for v in VECTORS["rank_ranges"]:
        assert spec.format_rank_ranges(v["ranks"]) == v["text"]
        if v["ranks"]:  # the short form parses back
            assert spec.parse_ranks(v["text"]) == tuple(sorted(set(v["ranks"])))
    assert ev.format_compound_name("j", [0, 1, 2, 3, 6]) == "remote-debug: j ranks 0-3, 6"
    assert ev.format_compound_name("j", [2]) == "remote-debug: j rank 2"


# --- every event's human line, worded once (laptop/wire/event_text.py): the CLI prints it, --json carries it


def test_every_event_has_its_wording_and_json_carries_it() -> None:
    assert set(event_text.WORDING) == set(ev.EVENT_TYPES)
    for cls in ev.EVENT_TYPES:
        assert not any(ev.json_key(f) == ev.TEXT_KEY for f in dataclasses.fields(cls)), cls
    event = ev.RankRestarted(rank=2, node="algo-2", pid=70, old_pid=60, run=1)
    line = event_text.with_text(event)
    assert line["text"] == "rank 2 on algo-2 restarted (run 1, pid 70): attaching to the new process"
    assert ev.from_json(json.loads(json.dumps(line))) == event  # a reader of the event ignores its text
