"""What the nodes of a job on this machine printed: each node's log file (``logs/algo-N.log`` in the job dir).

The supervisor hands every node's hook one file for its stdout and stderr, which the launcher (torchrun) and the
ranks inherit: the file holds the whole run, from its first line, as the node wrote it.  Files carry no time
stamps, so neither do the lines read here.  Reading is incremental (a byte offset per node); a line is returned
once its newline is there, so a reader following a running job never cuts a line in two.
"""

from __future__ import annotations

from pathlib import Path

from remote_debug.laptop.core.backend import NodeLine, NodeOutput

# one read takes at most this much of each node's file: a long log is printed as it is read, never held whole
# (callers read until a read returns nothing)
READ_CHUNK = 4 << 20


class FileNodeOutput(NodeOutput):
    def __init__(self, files: dict[str, Path]) -> None:
        self.files = files  # node -> its log file, in node order
        self._offsets = dict.fromkeys(files, 0)
        self._partial = dict.fromkeys(files, b"")  # a node's line so far, until its newline
        self._full: set[str] = set()  # nodes whose last read filled READ_CHUNK: more is there

    @property
    def behind(self) -> bool:
        return bool(self._full)

    def read(self, *, final: bool = False) -> list[NodeLine]:
        out: list[NodeLine] = []
        for node, path in self.files.items():
            out += self._read_node(node, path, final=final)
        return out

    def _read_node(self, node: str, path: Path, *, final: bool) -> list[NodeLine]:
        try:
            with open(path, "rb") as f:
                f.seek(self._offsets[node])
                data = f.read(READ_CHUNK)
        except FileNotFoundError:
            return []  # the node has not started yet
        self._offsets[node] += len(data)
        if len(data) == READ_CHUNK:
            self._full.add(node)
        else:
            self._full.discard(node)
        whole, newline, rest = (self._partial[node] + data).rpartition(b"\n")
        self._partial[node] = rest
        texts = whole.split(b"\n") if newline else []
        if final and node not in self._full and rest:  # the file's end: its last line will get no newline now
            texts.append(rest)
            self._partial[node] = b""
        return [NodeLine(node, t.decode(errors="replace").rstrip("\r")) for t in texts]

    def where(self) -> str:
        first = next(iter(self.files.values()), None)
        return f"the nodes' log files in {first.parent}" if first is not None else "no node"
