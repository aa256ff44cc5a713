"""The node's pieces of `remote-debug run`: the rendezvous port rewrite, the run slot, rank output prefixes,
and the hold's clock (``keep_alive.KeepAlive``) driven by a real second process holding the slot."""

from __future__ import annotations

import io
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from remote_debug.container.node.keep_alive import KeepAlive
from remote_debug.container.node.run_slot import RunEntry, RunRecord, RunSlot, with_master_port
from remote_debug.container.rank.output_prefix import PrefixedStream


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (["torchrun", "--master_port", "29500", "t.py"], ["torchrun", "--master_port=4242", "t.py"]),
        (
            ["torchrun", "--master-port=29500", "t.py", "--master_port", "1"],  # the script's own flag is left alone
            ["torchrun", "--master-port=4242", "t.py", "--master_port", "1"],
        ),
        (["torchrun", "--rdzv_endpoint", "algo-1:29400", "t.py"], ["torchrun", "--rdzv_endpoint=algo-1:4242", "t.py"]),
        (["torchrun", "--rdzv-endpoint=algo-1", "t.py"], ["torchrun", "--rdzv-endpoint=algo-1:4242", "t.py"]),
        (["python", "train.py", "--lr", "1"], ["python", "train.py", "--lr", "1"]),
    ],
)
def test_the_rendezvous_port_is_replaced_wherever_torchrun_takes_it(command: list[str], expected: list[str]) -> None:
    assert with_master_port(command, 4242) == expected


def test_rank_lines_are_prefixed_once_per_line_however_they_are_written() -> None:
    out = io.StringIO()
    stream = PrefixedStream(out, "[rank 3] ")
    stream.write("a")
    stream.write("b\nc\n\n")
    stream.write("d")
    stream.write("\n")
    print("e", file=stream)
    assert out.getvalue() == "[rank 3] ab\n[rank 3] c\n\n[rank 3] d\n[rank 3] e\n"


class _Writes(io.StringIO):
    """A stream that records each write it gets: what would reach the pipe, one write at a time."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    def write(self, s: str) -> int:
        self.writes.append(s)
        return super().write(s)


def test_a_printed_line_reaches_the_shared_pipe_in_one_write() -> None:
    """Every rank of a node prints into one pipe: ``print`` writes its text and its newline apart, and a line
    written in two pieces let another rank's line land inside it (a CI run read
    ``rank 3 step 877 loss nan[rank 2] rank 2 step 877 loss nan``)."""
    out = _Writes()
    stream = PrefixedStream(out, "[rank 2] ")
    print("step 877 loss nan", file=stream)
    stream.write("two\nlines\n")
    assert out.writes == ["[rank 2] step 877 loss nan\n", "[rank 2] two\n[rank 2] lines\n"]
    stream.write("a prompt: ")
    assert out.writes[2:] == []  # held until its newline...
    stream.flush()
    assert out.writes[2:] == ["[rank 2] a prompt: "]  # ...or a flush, and the line goes on unprefixed
    stream.write("yes\n")
    assert out.writes[3:] == ["yes\n"] and out.getvalue().endswith("[rank 2] a prompt: yes\n")


def test_the_entry_is_private_and_round_trips(tmp_path: Path) -> None:
    entry = RunEntry(["python", "t.py"], {"REMOTE_DEBUG_JOB_SECRET": "s"}, "/code", 42, 60.0, "/m", 43)
    entry.write(tmp_path)
    assert (tmp_path / "run-entry.json").stat().st_mode & 0o777 == 0o600  # it holds the job secret
    assert RunEntry.read(tmp_path) == entry


def _holder(node_dir: Path, seconds: float) -> subprocess.Popen[str]:
    """Another process that takes the slot for ``seconds`` and records the run's exit code 5."""
    code = (
        "import sys, time; from pathlib import Path;"
        "from remote_debug.container.node.run_slot import RunSlot, RunRecord;"
        f"d = Path({str(node_dir)!r}); s = RunSlot(d); assert s.try_take();"
        "RunRecord(1, 0).write(d); print('taken', flush=True);"
        f"time.sleep({seconds}); RunRecord(1, 0, 5).write(d)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "taken"
    return proc


def test_the_slot_is_busy_exactly_while_another_process_holds_it(tmp_path: Path) -> None:
    slot = RunSlot(tmp_path)
    assert not slot.busy()
    holder = _holder(tmp_path, 0.5)
    assert slot.busy() and not RunSlot(tmp_path).try_take()
    holder.wait(10)
    assert not slot.busy()  # the kernel dropped the lock with its holder
    assert RunRecord.read(tmp_path) == RunRecord(1, 0, 5)


def test_the_hold_clock_stops_during_a_run_and_starts_again_after_it(tmp_path: Path) -> None:
    published: list[dict[str, object]] = []
    keep = KeepAlive(0.6, tmp_path, lambda **changes: published.append(changes), "algo-1")
    holder = _holder(tmp_path, 1.2)  # longer than the hold: the node must not end under a run
    started = time.monotonic()
    last = keep.hold(0)
    held = time.monotonic() - started
    holder.wait(10)
    assert held >= 1.2 + 0.6 - 0.25, held  # the run, then a full hold again
    assert last == 5  # the run's exit code, from its record
    assert published[0]["kept_alive_until"] is not None
    assert {"kept_alive_until": None, "run": 1} in published
    assert published[-1]["run"] == 1 and published[-1]["kept_alive_until"] is not None


def test_release_and_stop_end_the_hold_at_once(tmp_path: Path) -> None:
    for end in ("release", "stop"):
        keep = KeepAlive(300, tmp_path, lambda **changes: None, "algo-1")
        threading.Timer(0.3, getattr(keep, end)).start()
        started = time.monotonic()
        assert keep.hold(0) is None  # no run ran
        assert time.monotonic() - started < 2, end
