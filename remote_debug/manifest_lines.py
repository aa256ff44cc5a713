"""The manifest as log lines: how a SageMaker node's manifest documents reach the laptop (contract).

On SageMaker the node publishes each manifest document as ONE line on the training job's stdout,
which the platform already ships to CloudWatch Logs (group /aws/sagemaker/TrainingJobs, stream
<job>/algo-<n>-<epoch>).  The laptop reads the lines back with FilterLogEvents under the user's
own AWS identity: no credentials, boto3 or network access are needed in the container, and the
channel is authenticated end to end (which is what lets the laptop pin the host key in it).

    [remote-debug] manifest {"boot":"..","doc":{..},"kind":"node","node":"algo-1","seq":3,"v":1}

``boot`` names one run of the node's hook (a restarted node starts afresh), ``seq`` orders the
documents of one boot (CloudWatch timestamps have millisecond resolution and may tie).  The line
may follow other output on the same log event (a progress bar without a newline), so readers
look for the prefix anywhere in a message.

A line may also arrive cut in two: AWS's training toolkit reads a training process's output in
64 KiB chunks and prints each chunk's lines, so a line across a chunk boundary becomes two log
events.  The head (prefix + JSON that ends early) is a :class:`CutManifestLine`, which readers skip:
the node writes each line again a few times after it changed (``container/publish.py``).  The tail
has no prefix, and is not even returned by the readers' filter.  Rejoining the two is not safe:
the toolkit strips whitespace at the cut, so head + tail can differ from what was written.

Stdlib only, like :mod:`remote_debug.spec`: the container side imports it inside the training image.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, replace

from remote_debug.spec import NODE_NAME_RE, ContractError, NodeManifest, RankEndpoint, json_int, require_mapping

MANIFEST_LINE_PREFIX = "[remote-debug] manifest "
MANIFEST_LINE_VERSION = 1
_LITERALS = ("null", "true", "false", "-")


class CutManifestLine(ContractError):
    """A manifest line that ends before its JSON does: the head of a line a log pipeline cut in two."""


@dataclass(frozen=True)
class ManifestLine:
    node: str
    boot: str
    seq: int
    document: NodeManifest | RankEndpoint


def format_manifest_line(node: str, document: NodeManifest | RankEndpoint, *, boot: str, seq: int) -> str:
    """The log line (without a line ending) that carries ``document``; compact JSON, one line."""
    body = {
        "v": MANIFEST_LINE_VERSION,
        "node": node,
        "kind": "node" if isinstance(document, NodeManifest) else "rank",
        "boot": boot,
        "seq": seq,
        "doc": document.to_json(),
    }
    return MANIFEST_LINE_PREFIX + json.dumps(body, separators=(",", ":"), sort_keys=True)


def parse_manifest_line(text: str) -> ManifestLine | None:
    """The document in a log message, None when the message carries none; CutManifestLine when it
    ends early (see the module docstring), ContractError if mangled."""
    at = text.find(MANIFEST_LINE_PREFIX)
    if at < 0:
        return None
    body = text[at + len(MANIFEST_LINE_PREFIX) :].strip()
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        # The text ran out before the JSON did: an error at its very end, in a literal cut short
        # ("nul", "tru", "-"), or inside a string that never closes (a line has no newline in it,
        # so the string ran to the end of the text).
        rest = body[exc.pos :]
        if rest == "" or any(word.startswith(rest) for word in _LITERALS) or exc.msg.startswith("Unterminated string"):
            raise CutManifestLine(f"manifest log line cut after {len(body)} characters of JSON") from None
        raise ContractError(f"malformed manifest log line: {exc.msg} at column {exc.colno}") from None
    d = require_mapping(data, "manifest log line")
    if d.get("v") != MANIFEST_LINE_VERSION:
        raise ContractError(
            f"manifest log line version {d.get('v')!r} is not supported (this remote_debug speaks "
            f"{MANIFEST_LINE_VERSION}): use the same remote-debug version in the job and on the laptop"
        )
    node, boot, kind = d.get("node"), d.get("boot"), d.get("kind")
    if not isinstance(node, str) or not NODE_NAME_RE.fullmatch(node) or not isinstance(boot, str):
        raise ContractError("manifest log line lacks a valid 'node' or 'boot'")
    document: NodeManifest | RankEndpoint
    if kind == "node":
        document = NodeManifest.from_json(d.get("doc"))
    elif kind == "rank":
        document = RankEndpoint.from_json(d.get("doc"))
    else:
        raise ContractError(f"manifest log line has an unknown kind {kind!r}")
    return ManifestLine(node=node, boot=boot, seq=json_int(d, "seq"), document=document)


def merge_manifest_lines(lines: Iterable[ManifestLine]) -> dict[str, NodeManifest]:
    """Node name -> its current manifest (ranks filled in), from lines in the order they were logged.

    The newest boot of a node wins (a node that restarted published afresh; its old ranks are
    gone); within a boot the highest ``seq`` of each document wins, whatever order equal
    timestamps came back in.
    """
    boots: dict[str, str] = {}
    nodes: dict[tuple[str, str], tuple[int, NodeManifest]] = {}
    ranks: dict[tuple[str, str], dict[int, tuple[int, RankEndpoint]]] = {}
    for line in lines:
        key = (line.node, line.boot)
        if isinstance(line.document, NodeManifest):
            if key not in nodes:
                boots[line.node] = line.boot  # first document of a newer boot
            if line.seq >= nodes.get(key, (-1, None))[0]:
                nodes[key] = (line.seq, line.document)
        else:
            per_rank = ranks.setdefault(key, {})
            if line.seq >= per_rank.get(line.document.rank, (-1, None))[0]:
                per_rank[line.document.rank] = (line.seq, line.document)
    out: dict[str, NodeManifest] = {}
    for node, boot in boots.items():
        manifest = replace(nodes[(node, boot)][1])
        manifest.ranks = sorted((ep for _, ep in ranks.get((node, boot), {}).values()), key=lambda r: r.rank)
        out[node] = manifest
    return out
