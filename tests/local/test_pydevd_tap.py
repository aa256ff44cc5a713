"""PydevdTap on real sockets: pydevd's lines pass unchanged however they are cut, the tap's own commands and
their answers stay between it and the rank, and what it tells PyCharm reads as pydevd's own messages."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import unquote

from remote_debug.laptop.connection import pydevd_tap
from remote_debug.laptop.connection.pydevd_tap import Line, LineSplitter, PydevdTap
from remote_debug.laptop.ide.pydevd_server import parse_suspend

SUSPEND = (
    '<xml><thread id="pid_7_id_1" stop_reason="111" message="" suspend_type="trace">'
    '<frame id="3" name="step" file="/w/train.py" line="12"></frame></thread></xml>'
)


class Recorder:
    def __init__(self) -> None:
        self.ide_said: list[Line] = []
        self.rank_said: list[Line] = []
        self.ended = threading.Event()
        self.replace: dict[int, Line | None] = {}  # cmd -> what the rank's message of that cmd becomes

    def opened(self, session: PydevdTap) -> None:
        pass

    def from_ide(self, session: PydevdTap, line: Line) -> None:
        self.ide_said.append(line)

    def from_rank(self, session: PydevdTap, line: Line) -> Line | None:
        self.rank_said.append(line)
        return self.replace.get(line.cmd, line)

    def closed(self, session: PydevdTap) -> None:
        self.ended.set()


@contextmanager
def _tapped(hooks: object) -> Iterator[tuple[socket.socket, socket.socket, PydevdTap]]:
    """(PyCharm's end, the rank's end, the tap between them)."""
    ide, ide_tap = socket.socketpair()
    rank, rank_tap = socket.socketpair()
    tap = PydevdTap(ide_tap, rank_tap, hooks)  # type: ignore[arg-type]
    pump = threading.Thread(target=tap.run, daemon=True)
    pump.start()
    try:
        yield ide, rank, tap
    finally:
        ide.close()
        rank.close()
        pump.join(5)
        ide_tap.close()
        rank_tap.close()


def _read(sock: socket.socket, size: int) -> bytes:
    sock.settimeout(5)
    data = b""
    while len(data) < size:
        data += sock.recv(size - len(data))
    return data


def _read_line(sock: socket.socket) -> bytes:
    sock.settimeout(5)
    data = b""
    while not data.endswith(b"\n"):
        data += sock.recv(1)
    return data


def test_the_splitter_gives_whole_lines_however_the_bytes_arrive() -> None:
    splitter = LineSplitter()
    stream = b"501\t1\t1.1%09UNIX%09ID\n101\t3\t\n105\t2\t%3Cxml%3E\n"
    lines = [line for i in range(len(stream)) for line in splitter.feed(stream[i : i + 1])]
    assert lines == [b"501\t1\t1.1%09UNIX%09ID\n", b"101\t3\t\n", b"105\t2\t%3Cxml%3E\n"]
    assert splitter.feed(b"106\t4\tpid_1") == [] and splitter.feed(b"\t108\n") == [b"106\t4\tpid_1\t108\n"]
    # PyCharm's commands are not quoted: a "\r" in an expression is inside its line, as pydevd reads it
    assert splitter.feed(b"113\t5\tx = 1\ry = 2\n") == [b"113\t5\tx = 1\ry = 2\n"]


def test_lines_pass_unchanged_both_ways_in_any_pieces() -> None:
    hooks = Recorder()
    suspend = pydevd_tap.encode(Line(105, 2, SUSPEND))
    from_rank = suspend + b"not pydevd at all\n" + b"106\t4\tpid_7_id_1\t108\n"
    from_ide = b"501\t1\t1.1\tUNIX\tID\n111\t3\t1\tpython-line\t/w/train.py\t12\tNone\tNone\tNone\tNone\tFalse\tNONE\n"
    with _tapped(hooks) as (ide, rank, _tap):
        for i in range(0, len(from_rank), 7):  # cut anywhere, even inside the quoted text
            rank.sendall(from_rank[i : i + 7])
        for i in range(0, len(from_ide), 5):
            ide.sendall(from_ide[i : i + 5])
        assert _read(ide, len(from_rank)) == from_rank
        assert _read(rank, len(from_ide)) == from_ide
    assert [(m.cmd, m.seq) for m in hooks.rank_said] == [(105, 2), (106, 4)]
    assert hooks.rank_said[0].text == SUSPEND  # unquoted for the hook
    assert [(m.cmd, m.seq) for m in hooks.ide_said] == [(501, 1), (111, 3)]


def test_a_hook_may_rewrite_or_drop_what_the_rank_says() -> None:
    hooks = Recorder()
    marked = Line(105, 2, pydevd_tap.with_message(SUSPEND, "[remote-debug] All-stop: rank 1"))
    hooks.replace = {105: marked, 106: None}
    with _tapped(hooks) as (ide, rank, _tap):
        rank.sendall(b"106\t4\tpid_7_id_1\t108\n" + pydevd_tap.encode(Line(105, 2, SUSPEND)))
        line = _read_line(ide)
    parsed = pydevd_tap.parse(line)
    assert parsed is not None and parsed.cmd == 105 and parsed.seq == 2
    # what PyCharm's parser (and the headless stand-in's) reads of it: the same stop, with the group's note
    suspend = parse_suspend(parsed.text)
    assert (suspend.thread_id, suspend.reason, suspend.line) == ("pid_7_id_1", "111", 12)
    assert suspend.message == "[remote-debug] All-stop: rank 1"
    assert parsed.text.count("message=") == 1  # pydevd-pycharm's empty one replaced
    # a stop with a text of its own (a log breakpoint's) keeps it
    logged = SUSPEND.replace('message=""', 'message="loss%3D0.3"')
    assert pydevd_tap.with_message(logged, "[remote-debug] Pause All") == logged


def test_our_commands_use_seqs_pycharm_never_does_and_their_answers_stay_with_us() -> None:
    hooks = Recorder()
    answers: list[Line] = []
    with _tapped(hooks) as (ide, rank, tap):
        first = tap.request(pydevd_tap.CMD_LIST_THREADS, "", answers.append)
        second = tap.request(pydevd_tap.CMD_THREAD_SUSPEND, "*")
        # pydevd's numbering: the IDE's commands odd, its own messages even, an answer with its command's seq
        assert first % 2 == 1 and second == first + 2 and first > pydevd_tap.INJECTED_SEQ
        assert _read_line(rank) == f"102\t{first}\t\n".encode()
        assert _read_line(rank) == f"105\t{second}\t*\n".encode()
        threads = '<xml><thread name="MainThread" id="pid_7_id_1" /></xml>'
        rank.sendall(pydevd_tap.encode(Line(502, first, threads)))  # the answer to ours
        rank.sendall(pydevd_tap.encode(Line(901, second, "no such thing")))  # an error about ours
        rank.sendall(b"105\t6\t" + pydevd_tap.encode(Line(0, 0, SUSPEND)).split(b"\t", 2)[2])  # the rank's own
        line = _read_line(ide)
        assert line.startswith(b"105\t6\t")  # the first thing PyCharm got: the answers were not for it
        tap.say("rank 1: All-stop: rank 0\n")
        said = pydevd_tap.parse(_read_line(ide))
    assert [(a.cmd, a.text) for a in answers] == [(502, threads)]
    assert said is not None and said.cmd == pydevd_tap.CMD_WRITE_TO_CONSOLE
    assert said.seq % 2 == 0 and said.seq >= pydevd_tap.INJECTED_SEQ
    # pydevd's io message: the text quoted once more inside the XML (PyCharm unquotes it)
    assert said.text.startswith('<xml><io s="') and 'ctx="1"' in said.text
    assert unquote(said.text.split('s="', 1)[1].split('"', 1)[0]) == "rank 1: All-stop: rank 0\n"


def test_close_ends_the_connection_on_both_sides() -> None:
    hooks = Recorder()
    with _tapped(hooks) as (ide, rank, tap):
        tap.close()
        ide.settimeout(5)
        rank.settimeout(5)
        assert ide.recv(10) == b"" and rank.recv(10) == b""
        assert hooks.ended.wait(5)
