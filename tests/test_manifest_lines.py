"""The manifest as log lines (remote_debug/manifest_lines.py): the SageMaker channel of the contract."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from remote_debug import manifest_lines
from remote_debug.spec import ContractError, NodeManifest, RankEndpoint

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJExB6drpej4VU5APPdGydAYq4clP4mmQ5PSEGTtS4BX"


def _node(**fields: Any) -> NodeManifest:
    base: dict[str, Any] = dict(
        job_name="job-1", node="algo-1", hosts=["algo-1", "algo-2"], sshd_host="127.0.0.1", sshd_port=40022,
        ssh_user="root", host_public_key=KEY, code_dir="/opt/ml/code", state="running", hook_pid=7,
    )
    return NodeManifest(**{**base, **fields})


def _rank(rank: int, **fields: Any) -> RankEndpoint:
    return RankEndpoint(**{"rank": rank, "local_rank": rank, "world_size": 2, "port": 41000 + rank, "pid": 9,
                           **fields})


def test_line_round_trip_is_one_compact_line() -> None:
    node = _node(ssm_target="mi-0123456789abcdef0")
    line = manifest_lines.format_manifest_line("algo-1", node, boot="b1", seq=3)
    assert line.startswith("[remote-debug] manifest {") and "\n" not in line
    assert len(line.encode()) < 1024  # well under PIPE_BUF: one atomic write on the job's stdout
    parsed = manifest_lines.parse_manifest_line(line)
    assert parsed == manifest_lines.ManifestLine(node="algo-1", boot="b1", seq=3, document=node)
    rank = manifest_lines.parse_manifest_line(manifest_lines.format_manifest_line("algo-1", _rank(1), boot="b1", seq=4))
    assert rank is not None and rank.document == _rank(1)


def test_line_found_after_other_output_and_ignored_when_absent() -> None:
    line = manifest_lines.format_manifest_line("algo-2", _node(node="algo-2"), boot="b", seq=1)
    parsed = manifest_lines.parse_manifest_line("epoch 3: 45%|####      " + line)  # a progress bar without newline
    assert parsed is not None and parsed.node == "algo-2"
    assert manifest_lines.parse_manifest_line("loss 0.1") is None


@pytest.mark.parametrize(("text", "message"), [
    ("[remote-debug] manifest {not json", "malformed manifest log line"),
    ('[remote-debug] manifest {"v": 2}', "version 2 is not supported"),
    ('[remote-debug] manifest {"v": 1, "node": "bad node", "boot": "b", "seq": 1}', "valid 'node'"),
    ('[remote-debug] manifest {"v": 1, "node": "algo-1", "boot": "b", "seq": 1, "kind": "x", "doc": {}}',
     "unknown kind"),
    ('[remote-debug] manifest {"v": 1, "node": "algo-1", "boot": "b", "seq": 1, "kind": "node", "doc": {}}',
     "node manifest lacks"),
])
def test_bad_lines_are_contract_errors(text: str, message: str) -> None:
    with pytest.raises(ContractError, match=message) as raised:
        manifest_lines.parse_manifest_line(text)
    assert not isinstance(raised.value, manifest_lines.CutManifestLine)  # mangled, not merely cut short


@pytest.mark.parametrize("document", [
    _node(ssm_target="mi-0123456789abcdef0", exit_code=-9, errors=["sshd failed: no apt-get"]),
    _rank(3, error=None, control_port=41999),
], ids=["node", "rank"])
def test_a_line_cut_anywhere_is_a_cut_line_not_a_broken_manifest(document: NodeManifest | RankEndpoint) -> None:
    """AWS's training toolkit cuts a line that straddles its 64 KiB read in two (and strips the
    whitespace at the cut): the head is "not yet" for a reader, never an error that stops attach."""
    line = manifest_lines.format_manifest_line("algo-1", document, boot="b1", seq=7)
    for end in range(len(line)):
        for head in (line[:end], line[:end].strip()):
            try:
                parsed = manifest_lines.parse_manifest_line("epoch 3 " + head)
            except manifest_lines.CutManifestLine:
                continue
            assert parsed is None, head  # the prefix itself was cut: not ours at all
    assert manifest_lines.parse_manifest_line(line) is not None


def test_bad_ssm_target_is_refused() -> None:
    data = _node().to_json()
    data["ssm_target"] = "i-; rm -rf"
    with pytest.raises(ContractError, match="bad SSM target"):
        NodeManifest.from_json(data)
    data.pop("ssm_target")  # documents of older hooks have none
    assert NodeManifest.from_json(data).ssm_target == ""


def _lines(*items: tuple[str, str, int, NodeManifest | RankEndpoint]) -> list[manifest_lines.ManifestLine]:
    return [manifest_lines.ManifestLine(node=n, boot=b, seq=s, document=d) for n, b, s, d in items]


def test_merge_latest_document_of_each_kind_per_node() -> None:
    starting = _node(state="starting", sshd_port=0)
    running = _node()
    merged = manifest_lines.merge_manifest_lines(_lines(
        ("algo-1", "b1", 1, starting),
        ("algo-1", "b1", 3, _rank(0, state="waiting")),
        ("algo-1", "b1", 2, running),  # same millisecond, came back out of order: seq decides
        ("algo-1", "b1", 4, _rank(1)),
        ("algo-1", "b1", 5, _rank(0, state="attached")),
        ("algo-2", "c1", 1, _node(node="algo-2")),
    ))
    assert set(merged) == {"algo-1", "algo-2"}
    assert merged["algo-1"].state == "running" and merged["algo-1"].sshd_port == 40022
    assert [(r.rank, r.state) for r in merged["algo-1"].ranks] == [(0, "attached"), (1, "listening")]
    assert merged["algo-2"].ranks == []


def test_merge_prefers_the_newest_boot_of_a_node() -> None:
    old, new = _node(sshd_port=1111), _node(sshd_port=2222)
    merged = manifest_lines.merge_manifest_lines(_lines(
        ("algo-1", "old", 1, old),
        ("algo-1", "old", 2, _rank(0)),
        ("algo-1", "new", 1, new),  # the node restarted (a managed spot restart, a second daemon)
    ))
    assert merged["algo-1"].sshd_port == 2222
    assert merged["algo-1"].ranks == []  # the old boot's ranks are gone


def test_merge_does_not_alias_the_parsed_documents() -> None:
    node = _node()
    merged = manifest_lines.merge_manifest_lines(_lines(("algo-1", "b", 1, node), ("algo-1", "b", 2, _rank(0))))
    assert node.ranks == [] and merged["algo-1"].ranks != []
    assert replace(merged["algo-1"], ranks=[]) == node
    assert json.loads(manifest_lines.format_manifest_line("algo-1", merged["algo-1"], boot="b", seq=1)[24:])["doc"].get(
        "ranks") is None  # rank documents are never part of the node document
