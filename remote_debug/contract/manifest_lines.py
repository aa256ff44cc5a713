"""The manifest as log lines: how a SageMaker node's manifest documents reach the laptop (contract).

On SageMaker the node publishes each manifest document as ONE line on the training job's stdout,
which the platform already ships to CloudWatch Logs (group /aws/sagemaker/TrainingJobs, stream
<job>/algo-<n>-<epoch>).  The laptop reads the lines back with FilterLogEvents under the user's
own AWS identity: no credentials, boto3 or network access are needed in the container.  That
identity authenticates the log group, not the writer: what lets the laptop pin a host key from a
line is the line's own MAC (below).

    [remote-debug] manifest {"boot":"..","doc":{..},"kind":"node","mac":"..","node":"algo-1","seq":3,
                             "started":1700000000000,"v":1}

``boot`` names one run of the node's hook (a restarted node starts afresh) and ``started`` is that
run's wall-clock start (ms); ``seq`` orders the documents of one boot (CloudWatch timestamps have
millisecond resolution and may tie).  The line may follow other output on the same log event (a
progress bar without a newline), so readers look for the prefix anywhere in a message.

Proof (issue 13): anyone allowed to write to the job's log group can log such a line, in any
stream, with any timestamp.  So every line carries ``mac``, an HMAC (``job_secret.manifest_mac``,
keyed by the job's secret, which only the job's environment and the laptop holding the job's key
know) over the canonical JSON of the rest of the body (sorted keys, compact separators).  A reader
drops a line whose MAC is missing or wrong (:class:`UnprovenManifestLine`), whatever stream it came
in: under MPI the workers' output lands in algo-1's stream, so a stream proves nothing about a node.
What a MAC cannot stop, a replay of a genuine line, :func:`merge_manifest_lines` makes harmless: the
newest boot is the one that *started* last (MAC'd), never the one logged last, and within a boot the
first host key, SSM target, sshd address and port are kept (see there).

A line may also arrive cut in two: AWS's training toolkit reads a training process's output in
64 KiB chunks and prints each chunk's lines, so a line across a chunk boundary becomes two log
events.  The head (prefix + JSON that ends early) is a :class:`CutManifestLine`, which readers skip:
the node writes each line again a few times after it changed (``container/node/publish.py``).  The tail
has no prefix, and is not even returned by the readers' filter.  Rejoining the two is not safe:
the toolkit strips whitespace at the cut, so head + tail can differ from what was written.

Stdlib only, like :mod:`remote_debug.contract.spec`: the container side imports it inside the training image.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from remote_debug.contract.job_secret import mac_matches, manifest_mac
from remote_debug.contract.spec import (
    NODE_NAME_RE,
    ContractError,
    NodeManifest,
    RankEndpoint,
    json_int,
    require_mapping,
)

MANIFEST_LINE_PREFIX = "[remote-debug] manifest "
MANIFEST_LINE_VERSION = 1
_LITERALS = ("null", "true", "false", "-")
# What a genuine node never changes within one boot (``node.py`` sets each once): the first non-empty value of
# each is kept, and a later document of that boot with another value is refused (merge_manifest_lines).
PINNED_FIELDS = ("host_public_key", "ssm_target", "sshd_host", "sshd_port")


class CutManifestLine(ContractError):
    """A manifest line that ends before its JSON does: the head of a line a log pipeline cut in two."""


class UnprovenManifestLine(ContractError):
    """A manifest line without a valid MAC of the job's secret (forged, another job's, another version's,
    or mangled): readers drop it, and may say how many they dropped, but never stop on it."""


@dataclass(frozen=True)
class ManifestLine:
    """One proven line (only :func:`parse_manifest_line` makes them from log text)."""

    node: str
    boot: str
    started: int  # the boot's wall-clock start, ms since the epoch (the node's clock)
    seq: int
    document: NodeManifest | RankEndpoint


def _payload(body: Mapping[str, Any]) -> bytes:
    """What the MAC covers: the body without ``mac``, as canonical JSON."""
    return json.dumps({k: v for k, v in body.items() if k != "mac"}, separators=(",", ":"), sort_keys=True).encode()


def format_manifest_line(
    node: str, document: NodeManifest | RankEndpoint, *, boot: str, started: int, seq: int, secret: str
) -> str:
    """The log line (without a line ending) that carries ``document``, MAC'd with the job's ``secret``;
    compact JSON, one line."""
    body: dict[str, Any] = {
        "v": MANIFEST_LINE_VERSION,
        "node": node,
        "kind": "node" if isinstance(document, NodeManifest) else "rank",
        "boot": boot,
        "started": started,
        "seq": seq,
        "doc": document.to_json(),
    }
    body["mac"] = manifest_mac(secret, _payload(body))
    return MANIFEST_LINE_PREFIX + json.dumps(body, separators=(",", ":"), sort_keys=True)


def parse_manifest_line(text: str, *, secret: str | None) -> ManifestLine | None:
    """The document in a log message, None when the message carries none; CutManifestLine when it
    ends early (see the module docstring); UnprovenManifestLine when it is mangled or its MAC is not
    ``secret``'s (None: no secret to check it with, so no line is proven); ContractError when a proven
    line is not one this version reads."""
    at = text.find(MANIFEST_LINE_PREFIX)
    if at < 0:
        return None
    body = text[at + len(MANIFEST_LINE_PREFIX) :].strip()
    if body and not body.startswith("{"):
        return None  # prose that happens to start like a line ("[remote-debug] manifest publisher: ...")
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        # The text ran out before the JSON did: an error at its very end, in a literal cut short
        # ("nul", "tru", "-"), or inside a string that never closes (a line has no newline in it,
        # so the string ran to the end of the text).
        rest = body[exc.pos :]
        if rest == "" or any(word.startswith(rest) for word in _LITERALS) or exc.msg.startswith("Unterminated string"):
            raise CutManifestLine(f"manifest log line cut after {len(body)} characters of JSON") from None
        raise UnprovenManifestLine(f"malformed manifest log line: {exc.msg} at column {exc.colno}") from None
    d = require_mapping(data, "manifest log line")
    if secret is None or not mac_matches(secret, _payload(d), d.get("mac")):
        if secret is None:
            what = "cannot be checked: there is no job secret to check it with"
        else:
            what = "carries no MAC" if "mac" not in d else "carries a MAC that is not of this job's secret"
        if d.get("v") != MANIFEST_LINE_VERSION:
            what += (
                f" (and says version {repr(d.get('v'))[:20]}, this remote-debug speaks {MANIFEST_LINE_VERSION}: "
                "use the same remote-debug version in the job and on the laptop)"
            )
        raise UnprovenManifestLine(f"manifest log line of {str(d.get('node'))[:40]!r} {what}")
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
    try:
        started, seq = json_int(d, "started"), json_int(d, "seq")
    except KeyError as exc:
        raise ContractError(f"manifest log line lacks {exc}") from None
    return ManifestLine(node=node, boot=boot, started=started, seq=seq, document=document)


BootKey = tuple[str, str, int]  # (node, boot, started)
# a boot's pinned fields: name -> (value, seq of the document that set it)
Pins = dict[BootKey, dict[str, tuple[object, int]]]


def merge_manifest_lines(
    lines: Iterable[ManifestLine],
    *,
    on_refused: Callable[[ManifestLine, str], None] | None = None,
    pins: Pins | None = None,
) -> dict[str, NodeManifest]:
    """Node name -> its current manifest (ranks filled in), from proven lines in any order.

    The newest boot of a node wins: the one with the latest ``started`` (a node that restarted
    published afresh; its old ranks are gone).  Not the one logged last: a genuine line of an older
    boot replayed into the log later would otherwise take the node back to a dead sshd.  Within a
    boot the highest ``seq`` of each document wins, whatever order equal timestamps came back in.

    Within a boot, :data:`PINNED_FIELDS` are kept as first set (in ``seq`` order): a node document
    that changes one is refused (``on_refused(line, why)``), even with a valid MAC.  A genuine node
    never changes them within a boot (``container/node/services.py`` sets each once, sshd starts once), so this
    refuses nothing genuine; it means even a holder of the secret (anyone who can read the job's
    Environment) cannot move a key, target or port of a boot the laptop already pinned, only announce
    a new boot.  Rank ports are not pinned: a rank may restart within a boot and report anew.

    ``pins`` (kept by a reader across its polls, updated here) makes the first value *read* win, as
    docs/SECURITY.md promises: a document with a lower ``seq`` that arrives later (a holder of the
    secret backdating one) cannot take the place of a value already pinned; only a genuine earlier
    document that pinned nothing yet (the node's "starting" one, its fields still empty) is passed over.
    """
    node_docs: dict[tuple[str, str, int], list[ManifestLine]] = {}
    ranks: dict[tuple[str, str, int], dict[int, ManifestLine]] = {}
    for line in lines:
        key = (line.node, line.boot, line.started)
        if isinstance(line.document, NodeManifest):
            node_docs.setdefault(key, []).append(line)
        else:
            per_rank = ranks.setdefault(key, {})
            held = per_rank.get(line.document.rank)
            if held is None or line.seq >= held.seq:
                per_rank[line.document.rank] = line
    newest: dict[str, tuple[int, str]] = {}  # node -> (started, boot) of its newest boot
    for node, boot, started in node_docs:
        if (started, boot) > newest.get(node, (-1, "")):
            newest[node] = (started, boot)
    out: dict[str, NodeManifest] = {}
    for node, (started, boot) in newest.items():
        key = (node, boot, started)
        pinned = pins.setdefault(key, {}) if pins is not None else {}
        current: NodeManifest | None = None
        for line in sorted(node_docs[key], key=lambda item: item.seq):  # stable: equal seqs keep their order
            doc = line.document
            assert isinstance(doc, NodeManifest)
            differs = [name for name in PINNED_FIELDS if name in pinned and getattr(doc, name) != pinned[name][0]]
            if differs and all(not getattr(doc, name) and line.seq < pinned[name][1] for name in differs):
                continue  # an earlier document of the boot, from before the value was set: superseded
            if differs:
                if on_refused is not None:
                    on_refused(line, f"{node} changed its {' and '.join(differs)} within one boot")
                continue
            pinned.update(
                {
                    name: (getattr(doc, name), line.seq)
                    for name in PINNED_FIELDS
                    if name not in pinned and getattr(doc, name)
                }
            )
            current = doc
        if current is None:
            continue  # every document of this boot was refused against values pinned in an earlier read
        manifest = replace(current)
        ep = ranks.get(key, {}).values()
        manifest.ranks = sorted(
            (item.document for item in ep if isinstance(item.document, RankEndpoint)), key=lambda r: r.rank
        )
        out[node] = manifest
    return out
