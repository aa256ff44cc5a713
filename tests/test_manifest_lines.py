"""The manifest as log lines (remote_debug/contract/manifest_lines.py): the SageMaker channel of the contract."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from remote_debug.contract import job_secret, manifest_lines
from remote_debug.contract.spec import ContractError, NodeManifest, RankEndpoint

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJExB6drpej4VU5APPdGydAYq4clP4mmQ5PSEGTtS4BX"
SECRET = job_secret.derive_job_secret(b"tests/test_manifest_lines")
OTHER_SECRET = job_secret.derive_job_secret(b"another job")
STARTED = 1_700_000_000_000


def _node(**fields: Any) -> NodeManifest:
    base: dict[str, Any] = dict(
        job_name="job-1",
        node="algo-1",
        hosts=["algo-1", "algo-2"],
        sshd_host="127.0.0.1",
        sshd_port=40022,
        ssh_user="root",
        host_public_key=KEY,
        code_dir="/opt/ml/code",
        state="running",
        hook_pid=7,
    )
    return NodeManifest(**{**base, **fields})


def _rank(rank: int, **fields: Any) -> RankEndpoint:
    return RankEndpoint(**{"rank": rank, "local_rank": rank, "world_size": 2, "port": 41000 + rank, "pid": 9, **fields})


def _format(
    node: str,
    document: NodeManifest | RankEndpoint,
    *,
    boot: str = "b1",
    seq: int = 1,
    started: int = STARTED,
    secret: str = SECRET,
) -> str:
    return manifest_lines.format_manifest_line(node, document, boot=boot, started=started, seq=seq, secret=secret)


def _parse(text: str, secret: str | None = SECRET) -> manifest_lines.ManifestLine | None:
    return manifest_lines.parse_manifest_line(text, secret=secret)


def _signed(body: dict[str, Any], secret: str = SECRET) -> str:
    """A line of ``body`` with a valid MAC, whatever the body says (what only the job could write)."""
    payload = json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
    return manifest_lines.MANIFEST_LINE_PREFIX + json.dumps({**body, "mac": job_secret.manifest_mac(secret, payload)})


def test_line_round_trip_is_one_compact_line() -> None:
    node = _node(ssm_target="mi-0123456789abcdef0")
    line = _format("algo-1", node, seq=3)
    assert line.startswith("[remote-debug] manifest {") and "\n" not in line
    assert len(line.encode()) < 1024  # well under PIPE_BUF: one atomic write on the job's stdout
    parsed = _parse(line)
    assert parsed == manifest_lines.ManifestLine(node="algo-1", boot="b1", started=STARTED, seq=3, document=node)
    rank = _parse(_format("algo-1", _rank(1), seq=4))
    assert rank is not None and rank.document == _rank(1)


def test_line_found_after_other_output_and_ignored_when_absent() -> None:
    line = _format("algo-2", _node(node="algo-2"), boot="b")
    parsed = _parse("epoch 3: 45%|####      " + line)  # a progress bar without newline
    assert parsed is not None and parsed.node == "algo-2"
    assert _parse("loss 0.1") is None
    assert _parse("[remote-debug] manifest publisher: OSError") is None  # prose, not a line


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[remote-debug] manifest {not json", "malformed manifest log line"),
        ('[remote-debug] manifest {"v": 2}', "carries no MAC .*says version 2, this remote-debug speaks 1"),
        (_signed({"v": 2}), "version 2 is not supported"),
        (_signed({"v": 1, "node": "bad node", "boot": "b", "started": 1, "seq": 1}), "valid 'node'"),
        (
            _signed({"v": 1, "node": "algo-1", "boot": "b", "started": 1, "seq": 1, "kind": "x", "doc": {}}),
            "unknown kind",
        ),
        (
            _signed({"v": 1, "node": "algo-1", "boot": "b", "started": 1, "seq": 1, "kind": "node", "doc": {}}),
            "node manifest lacks",
        ),
        (
            _signed({"v": 1, "node": "algo-1", "boot": "b", "seq": 1, "kind": "rank", "doc": _rank(0).to_json()}),
            "lacks 'started'",
        ),
    ],
)
def test_bad_lines_are_contract_errors(text: str, message: str) -> None:
    with pytest.raises(ContractError, match=message) as raised:
        _parse(text)
    assert not isinstance(raised.value, manifest_lines.CutManifestLine)  # mangled, not merely cut short


def test_a_line_without_the_jobs_mac_is_unproven() -> None:
    """Missing, wrong, another job's, or a body changed after signing: refused before anything in it
    is read (a reader counts these and goes on: never an error that would stop an attach)."""
    genuine = _format("algo-1", _node())
    body = json.loads(genuine[len(manifest_lines.MANIFEST_LINE_PREFIX) :])
    assert _parse(genuine) is not None
    forged = {**body, "doc": {**body["doc"], "sshd_port": 2222}}
    unsigned = {k: v for k, v in body.items() if k != "mac"}
    for text in (
        manifest_lines.MANIFEST_LINE_PREFIX + json.dumps(unsigned),  # no MAC
        manifest_lines.MANIFEST_LINE_PREFIX + json.dumps(forged),  # the genuine MAC on a changed body
        manifest_lines.MANIFEST_LINE_PREFIX + json.dumps({**body, "mac": "0" * 64}),
        manifest_lines.MANIFEST_LINE_PREFIX + json.dumps({**body, "mac": 7}),
        _format("algo-1", _node(), secret=OTHER_SECRET),  # another job's secret
        _signed({**unsigned, "started": STARTED + 1}, secret=OTHER_SECRET),
    ):
        with pytest.raises(manifest_lines.UnprovenManifestLine):
            _parse(text)
    with pytest.raises(manifest_lines.UnprovenManifestLine, match="no job secret"):
        _parse(genuine, secret=None)  # nothing to check it with: nothing is proven
    # the MAC covers the canonical body, not its spelling: key order and spacing do not matter
    assert _parse(manifest_lines.MANIFEST_LINE_PREFIX + json.dumps(body, indent=None, sort_keys=False)) is not None


@pytest.mark.parametrize(
    "document",
    [
        _node(ssm_target="mi-0123456789abcdef0", exit_code=-9, errors=["sshd failed: no apt-get"]),
        _rank(3, error=None, control_port=41999),
    ],
    ids=["node", "rank"],
)
def test_a_line_cut_anywhere_is_a_cut_line_not_a_broken_manifest(document: NodeManifest | RankEndpoint) -> None:
    """AWS's training toolkit cuts a line that straddles its 64 KiB read in two (and strips the
    whitespace at the cut): the head is "not yet" for a reader, never an error that stops attach."""
    line = _format("algo-1", document, seq=7)
    for end in range(len(line)):
        for head in (line[:end], line[:end].strip()):
            try:
                parsed = _parse("epoch 3 " + head)
            except manifest_lines.CutManifestLine:
                continue
            assert parsed is None, head  # the prefix itself was cut: not ours at all
    assert _parse(line) is not None


def test_bad_ssm_target_is_refused() -> None:
    data = _node().to_json()
    data["ssm_target"] = "i-; rm -rf"
    with pytest.raises(ContractError, match="bad SSM target"):
        NodeManifest.from_json(data)
    data.pop("ssm_target")  # documents of older hooks have none
    assert NodeManifest.from_json(data).ssm_target == ""


def _lines(*items: tuple[str, str, int, NodeManifest | RankEndpoint]) -> list[manifest_lines.ManifestLine]:
    """Lines of boots that started at STARTED (boot "new*": a second later)."""
    return [
        manifest_lines.ManifestLine(node=n, boot=b, started=STARTED + 1000 * b.startswith("new"), seq=s, document=d)
        for n, b, s, d in items
    ]


def test_merge_latest_document_of_each_kind_per_node() -> None:
    starting = _node(state="starting", sshd_port=0)
    running = _node()
    merged = manifest_lines.merge_manifest_lines(
        _lines(
            ("algo-1", "b1", 1, starting),
            ("algo-1", "b1", 3, _rank(0, state="waiting")),
            ("algo-1", "b1", 2, running),  # same millisecond, came back out of order: seq decides
            ("algo-1", "b1", 4, _rank(1)),
            ("algo-1", "b1", 5, _rank(0, state="attached")),
            ("algo-2", "c1", 1, _node(node="algo-2")),
        )
    )
    assert set(merged) == {"algo-1", "algo-2"}
    assert merged["algo-1"].state == "running" and merged["algo-1"].sshd_port == 40022
    assert [(r.rank, r.state) for r in merged["algo-1"].ranks] == [(0, "attached"), (1, "listening")]
    assert merged["algo-2"].ranks == []


def test_merge_prefers_the_newest_boot_of_a_node() -> None:
    old, new = _node(sshd_port=1111), _node(sshd_port=2222)
    lines = _lines(
        ("algo-1", "old", 1, old),
        ("algo-1", "old", 2, _rank(0)),
        ("algo-1", "new", 1, new),  # the node restarted (a managed spot restart, a second daemon)
    )
    merged = manifest_lines.merge_manifest_lines(lines)
    assert merged["algo-1"].sshd_port == 2222
    assert merged["algo-1"].ranks == []  # the old boot's ranks are gone
    # newest means started last, not logged last: the old boot's lines replayed after the new one change nothing
    assert manifest_lines.merge_manifest_lines([lines[2], lines[0], lines[1]])["algo-1"].sshd_port == 2222


def test_merge_keeps_the_first_key_target_and_port_of_a_boot() -> None:
    """A genuine node sets its host key, SSM target, sshd address and port once per boot: a later document
    of the same boot that changes one is refused, even with a valid MAC; others of the boot still count."""
    refused: list[tuple[int, str]] = []
    merged = manifest_lines.merge_manifest_lines(
        _lines(
            ("algo-1", "b", 4, _node(host_public_key="ssh-ed25519 AAAAother", ssm_target="mi-0123456789abcdef0")),
            ("algo-1", "b", 1, _node(state="starting", sshd_port=0, host_public_key="")),  # logged late: seq decides
            ("algo-1", "b", 2, _node()),
            ("algo-1", "b", 3, _node(ssm_target="mi-0123456789abcdef0", state="running")),  # first target: fine
            ("algo-1", "b", 5, _node(ssm_target="mi-0fedcba9876543210", sshd_port=2222)),
            ("algo-1", "b", 6, _node(ssm_target="mi-0123456789abcdef0", sshd_host="10.0.0.9")),
            ("algo-1", "b", 7, _node(ssm_target="mi-0123456789abcdef0", state="stopped")),
            ("algo-1", "b", 8, _node(ssm_target="", state="stopped")),  # a target cleared is a target changed
        ),
        on_refused=lambda line, why: refused.append((line.seq, why)),
    )
    node = merged["algo-1"]
    assert (node.host_public_key, node.sshd_port, node.ssm_target, node.state) == (
        KEY,
        40022,
        "mi-0123456789abcdef0",
        "stopped",
    )
    assert refused == [
        (4, "algo-1 changed its host_public_key within one boot"),
        (5, "algo-1 changed its ssm_target and sshd_port within one boot"),
        (6, "algo-1 changed its sshd_host within one boot"),
        (8, "algo-1 changed its ssm_target within one boot"),
    ]


def test_merge_does_not_alias_the_parsed_documents() -> None:
    node = _node()
    merged = manifest_lines.merge_manifest_lines(_lines(("algo-1", "b", 1, node), ("algo-1", "b", 2, _rank(0))))
    assert node.ranks == [] and merged["algo-1"].ranks != []
    assert replace(merged["algo-1"], ranks=[]) == node
    assert (
        json.loads(_format("algo-1", merged["algo-1"], boot="b")[24:])["doc"].get("ranks") is None
    )  # rank documents are never part of the node document
