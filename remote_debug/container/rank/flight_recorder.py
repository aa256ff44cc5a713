"""What PyTorch's Flight Recorder knows of a rank's collectives, for ``stacks``: which one it entered last.

With the Flight Recorder on (``TORCH_FR_BUFFER_SIZE``, or the older ``TORCH_NCCL_TRACE_BUFFER_SIZE``, > 0: the
variables torch reads) every process group records its last collectives, numbered per group the same way on
every member (``collective_seq_id``).  A hang's question, "who never entered the collective the others wait
in?", is then answered by comparing the newest number each member entered - the laptop does that
(``laptop/diagnose/stack_classes.py``); a rank only reports, per group, its newest entered and completed number.

Checked against torch 2.13 (CPU): gloo records its collectives too (``"gloo:all_reduce"``, state "scheduled",
``retired`` once done; ``pg_status`` per group: last enqueued/completed), read through
``torch._C._distributed_c10d._dump_fr_trace_json`` (older torch: ``_dump_nccl_trace_json``, NCCL only).  The
dump is read on the control thread while the main thread waits in the collective: torch's own dump-on-timeout
and debug server do the same from their threads.

Stdlib only; torch only when the rank already imported ``torch.distributed`` and initialised it.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Mapping
from typing import Any

from remote_debug.container.threads import quiet_thread
from remote_debug.contract import control_replies as replies

BUFFER_VARIABLES = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")  # torch's order: the first set wins
_DUMPERS = ("_dump_fr_trace_json", "_dump_nccl_trace_json")  # torch >= 2.8; older (NCCL only)


def buffer_size(environ: Mapping[str, str] = os.environ) -> int:
    """The Flight Recorder's buffer size as torch reads it (0: off)."""
    for name in BUFFER_VARIABLES:
        value = environ.get(name)
        if value is not None and value.strip():
            try:
                return int(value)
            except ValueError:
                return 0
    return 0


DUMP_WAIT_S = 2.0  # stacks answers without the collectives rather than wait longer for the dump
_dumping: threading.Thread | None = None  # a dump that has not returned: no second one beside it


def collectives() -> list[replies.GroupCollectives] | None:
    """This rank's process groups, each with the newest collective it entered (None: no Flight Recorder here).

    Never raises, never waits more than ``DUMP_WAIT_S``: a torch without the dump, one whose dump changed shape,
    or a dump stuck behind a lock of the hung backend leaves ``stacks`` as it was - it is asked during hangs."""
    global _dumping
    if buffer_size() <= 0:
        return None
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is None or not dist.is_available() or not dist.is_initialized():
            return None
    except Exception:  # whatever torch raises, stacks answers without the collectives
        return None
    if _dumping is not None and _dumping.is_alive():
        return None
    result: list[list[replies.GroupCollectives] | None] = []

    def read() -> None:
        try:
            dump = _dump()
            result.append(None if dump is None else summarize(dump, _groups(dist)))
        except Exception:  # a private torch API: whatever it raises, stacks answers without it
            result.append(None)

    _dumping = quiet_thread(read, "remote-debug-flight-recorder")
    _dumping.start()
    _dumping.join(DUMP_WAIT_S)
    return result[0] if result else None


def _dump() -> dict[str, Any] | None:
    c10d = sys.modules.get("torch._C._distributed_c10d")
    for name in _DUMPERS:
        dumper = getattr(c10d, name, None)
        if dumper is not None:
            # without collectives' stack traces: the JSON form has none (the pickled one would, at a cost)
            raw = json.loads(dumper(includeCollectives=True, onlyActive=False))
            return raw if isinstance(raw, dict) else None
    return None


def _groups(dist: Any) -> dict[str, tuple[str | None, list[int]]]:
    """Every process group this rank belongs to: name -> (description, members' global ranks).

    torch's own table (private, so guarded): the Flight Recorder's ``pg_config`` holds one entry per backend
    for gloo in torch 2.13 (checked: keyed "", ranks "[]"), so the members come from here."""
    world = getattr(getattr(dist, "distributed_c10d", None), "_world", None)
    names = getattr(world, "pg_names", None) or {}
    members = getattr(world, "pg_group_ranks", None) or {}
    groups: dict[str, tuple[str | None, list[int]]] = {}
    for pg, name in names.items():
        desc = getattr(pg, "group_desc", None)
        groups[str(name)] = (None if desc is None else str(desc), sorted(int(r) for r in members.get(pg, {})))
    return groups


def summarize(
    dump: Mapping[str, Any], groups: Mapping[str, tuple[str | None, list[int]]]
) -> list[replies.GroupCollectives]:
    """A Flight Recorder dump (its JSON form, as ``_dump_fr_trace_json`` returns it) reduced to one line per
    process group: the newest collective entered (its sequence id and op) and the newest completed.

    ``groups``: the process groups this rank belongs to (name -> description, members); a group there with no
    entry yet has entered nothing (0).  Point-to-point entries are left out: they are numbered apart."""
    status = dump.get("pg_status") or {}
    newest: dict[str, Mapping[str, Any]] = {}
    completed: dict[str, int] = {}
    for entry in dump.get("entries") or []:
        if not isinstance(entry, Mapping) or entry.get("is_p2p"):
            continue
        group = _group_name(entry.get("process_group"))
        seq = _int(entry.get("collective_seq_id"))
        if group is None or seq is None:
            continue
        if group not in newest or seq >= (_int(newest[group].get("collective_seq_id")) or 0):
            newest[group] = entry
        if entry.get("state") == "completed" or entry.get("retired") is True:
            completed[group] = max(completed.get(group, 0), seq)
    result = []
    for group in sorted(set(newest) | set(groups), key=_group_order):
        entry = newest.get(group, {})
        group_status = status.get(group) if isinstance(status, Mapping) else None
        entered = _int(entry.get("collective_seq_id")) or 0
        done = completed.get(group)
        if isinstance(group_status, Mapping):  # the group's own counters outlive the entries' ring buffer
            entered = max(entered, _int(group_status.get("last_enqueued_collective")) or 0)
            last_completed = _int(group_status.get("last_completed_collective"))
            if last_completed is not None and last_completed >= 0:
                done = max(done or 0, last_completed)
        desc, ranks = groups.get(group, (None, None))
        if desc is None and isinstance(entry.get("process_group"), list | tuple) and len(entry["process_group"]) > 1:
            desc = str(entry["process_group"][1])
        op = entry.get("profiling_name") if _int(entry.get("collective_seq_id")) == entered else None
        result.append(
            replies.GroupCollectives(
                group=group,
                desc=desc,
                ranks=ranks,
                last_entered=entered,
                last_completed=done,
                op=op_name(op) if isinstance(op, str) else None,
            )
        )
    return result


def op_name(profiling_name: str) -> str:
    """``"nccl:all_reduce"`` -> ``"all_reduce"``: the backend prefix says nothing the user needs here."""
    return profiling_name.split(":", 1)[-1]


def _group_name(process_group: Any) -> str | None:
    if isinstance(process_group, list | tuple) and process_group:
        return str(process_group[0])
    return None


def _group_order(name: str) -> tuple[int, str]:
    return (int(name), "") if name.isdigit() else (sys.maxsize, name)


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return None
    return None
