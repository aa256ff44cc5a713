"""Names with control characters pass no validator (issue 13, item 4).

``re.match`` with ``$`` accepted ``"algo-1\\n"``: ``$`` matches before a final newline.  A manifest naming
that node produced a broken ``Host`` block after which every ssh the user ran failed, and
``launch --name $'nl\\n'`` was accepted.  Every validator of a whole value now uses ``fullmatch``; this
property test puts a control character anywhere in an otherwise valid name (the end included) and
asks every place a name from outside comes in.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remote_debug.contract import spec
from remote_debug.contract.manifest_lines import format_manifest_line, parse_manifest_line
from remote_debug.laptop.connection import ssh_config
from remote_debug.laptop.connection.proxy import split_alias
from remote_debug.laptop.core.errors import UserError

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJExB6drpej4VU5APPdGydAYq4clP4mmQ5PSEGTtS4BX"
SECRET = "5e" * 32
CONTROL = st.sampled_from([chr(c) for c in [*range(0x20), 0x7F, 0x85, 0x2028]])


@st.composite
def poisoned(draw: st.DrawFn, valid: str) -> str:
    """``valid`` with a control character inserted somewhere (often at the very end)."""
    char = draw(CONTROL)
    at = draw(st.one_of(st.just(len(valid)), st.integers(0, len(valid))))
    return valid[:at] + char + valid[at:]


def _node_json(node: str) -> dict[str, object]:
    valid = spec.NodeManifest(
        job_name="my-job-1",
        node="algo-1",
        hosts=["algo-1"],
        sshd_host="127.0.0.1",
        sshd_port=40022,
        ssh_user="root",
        host_public_key=KEY,
        code_dir="/opt/ml/code",
        state=spec.NodeState.RUNNING,
        hook_pid=42,
    ).to_json()
    return {**valid, "node": node}


@settings(max_examples=300, deadline=None)
@given(job=poisoned("my-job-1"), node=poisoned("algo-1"))
def test_no_validator_takes_a_control_character(job: str, node: str) -> None:
    assert spec.JOB_NAME_RE.fullmatch("my-job-1") and spec.NODE_NAME_RE.fullmatch("algo-1")  # the base is fine
    with pytest.raises(spec.ContractError):
        spec.check_job_name(job)
    with pytest.raises(spec.ContractError):
        spec.NodeManifest.from_json(_node_json(node))
    with pytest.raises(spec.ContractError):
        ssh_config.HostEntry(
            job="my-job-1",
            node=node,
            user="root",
            port=2222,
            host_public_key=KEY,
            identity_file=Path("/k"),
            proxy_command="true",
        )
    with pytest.raises(spec.ContractError):
        ssh_config.HostEntry(
            job=job,
            node="algo-1",
            user="root",
            port=2222,
            host_public_key=KEY,
            identity_file=Path("/k"),
            proxy_command="true",
        )
    with pytest.raises(UserError):
        split_alias(f"{node}.my-job-1")  # the ProxyCommand's %h, as ssh hands it over


@settings(max_examples=200, deadline=None)
@given(node=poisoned("algo-1"))
def test_a_manifest_line_naming_such_a_node_is_refused(node: str) -> None:
    # A genuine line (the job's MAC) that names such a node: JSON escapes the character, so the line
    # stays one line and its MAC checks out - the name is what must fail.
    document = spec.NodeManifest.from_json(_node_json("algo-1"))
    line = format_manifest_line(node, document, boot="b", started=1, seq=1, secret=SECRET)
    with pytest.raises(spec.ContractError, match="node"):
        parse_manifest_line(line, secret=SECRET)


def test_the_reported_case_exactly() -> None:
    """The two cases the review demonstrated, spelled out."""
    with pytest.raises(spec.ContractError):
        spec.NodeManifest.from_json(_node_json("algo-1\n"))
    with pytest.raises(spec.ContractError):
        spec.check_job_name("nl\n")
    assert spec.check_job_name("nl") == "nl"
