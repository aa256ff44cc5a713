"""Adopt the ranks of one node: find them, check them all, queue the agent in each, confirm each.

Runs where the ranks run: called in-process by ``remote-debug adopt --pid`` for a job of this machine,
and on a SageMaker instance (over an SSM shell session) for ``adopt JOB``:
``python -m remote_debug.container --adopt-node --probe`` finds this node's ranks and checks them (one
JSON line, :func:`probe`), then ``--adopt-node REQUEST`` adopts them (the request file holds the job's
environment; the answer is one JSON line).

Success is what the rank itself reports - its rank document in the node's manifest dir, with its pid -
never gdb's exit code (gdb exits 0 when the queued code later fails).  A rank whose document does not
appear within the confirm window is "pending": its main thread is in native code (a collective, a long
C call) and runs the queued agent when it returns to Python.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from remote_debug.container.node import pyspy
from remote_debug.container.node.adopt import inject
from remote_debug.container.node.adopt.checks import AdoptRefused, Way, check_all
from remote_debug.container.node.adopt.procs import (
    PROC,
    ProcError,
    RankProcess,
    children_map,
    find_ranks,
    python_version,
    rank_of,
    read_environ,
)
from remote_debug.container.rank.adopted_entry import bootstrap_source
from remote_debug.contract.spec import ENV_MANIFEST_DIR, ENV_STATE_DIR, ContractError, read_rank_documents
from remote_debug.oskit import osutil

CONFIRM_SECONDS = 10.0
INJECT_PARALLEL = 4  # gdb (or a ptrace thread) per rank; one at a time per target (a second tracer gets EPERM)
PACKAGE_DIR = Path(__file__).resolve().parents[3]  # .../remote_debug


@dataclass
class AdoptedRank:
    rank: int
    pid: int
    node: str
    state: str  # "idle"/"listening"/... (its rank document's state), or "pending", or "failed"
    note: str | None = None


@dataclass
class NodeResult:
    node: str
    ranks: list[AdoptedRank] = field(default_factory=list)
    already: bool = False  # every rank had been adopted before: nothing was done

    def to_json(self) -> str:
        return json.dumps(asdict(self))


def node_ranks(roots: Sequence[int]) -> list[RankProcess]:
    """The ranks under every root pid (a launcher, or a rank itself), each once."""
    children = children_map()
    seen: dict[int, RankProcess] = {}
    for root in roots:
        for rank in find_ranks(root, children):
            seen.setdefault(rank.pid, rank)
    return sorted(seen.values(), key=lambda r: r.rank)


def make_bundle(directory: Path) -> Path:
    """A dir holding only ``remote_debug`` and ``debugpy`` (links to this installation's), for sys.path."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    found = importlib.util.find_spec("debugpy")
    packages = {"remote_debug": PACKAGE_DIR}
    if found is not None and found.submodule_search_locations:
        packages["debugpy"] = Path(next(iter(found.submodule_search_locations)))
    for name, target in packages.items():
        link = directory / name
        if link.is_symlink() and Path(os.readlink(link)) == target:
            continue
        tmp = directory / f".{name}.{os.getpid()}"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(target, target_is_directory=True)
        os.replace(tmp, link)
    return directory


def _documents(manifest_dir: Path) -> dict[int, str]:
    """pid -> state of every rank document in the node's manifest dir."""
    try:
        return {doc.pid: str(doc.state) for doc in read_rank_documents(manifest_dir, skip_broken=True)}
    except (ContractError, OSError):
        return {}


def adopt_node(
    node: str,
    roots: Sequence[int],
    env: dict[str, str],
    *,
    confirm_seconds: float = CONFIRM_SECONDS,
    gdb: str | None = None,
    ranks: Sequence[RankProcess] | None = None,
    ways: dict[int, Way] | None = None,
) -> NodeResult:
    """Adopt every rank under ``roots``.  ``env``: the spec and this node's dirs (manifest, state), as the
    hook would give a rank.  AdoptRefused (nothing touched) when any rank cannot be adopted."""
    manifest_dir = Path(env[ENV_MANIFEST_DIR])
    state_dir = Path(env[ENV_STATE_DIR])
    found = list(ranks) if ranks is not None else node_ranks(roots)
    ways = ways if ways is not None else check_all(found, gdb=gdb, sees=state_dir)
    before = _documents(manifest_dir)
    errors: dict[int, str] = {}
    todo = [r for r in found if r.pid not in before]
    result = NodeResult(node=node, already=not todo)
    if todo:
        bundle = make_bundle(state_dir / "bundle")
        config = state_dir / "adopt-config.json"
        osutil.atomic_write_text(config, json.dumps({"env": env}) + "\n", mode=0o600)
        bootstrap = state_dir / "adopt-agent.py"
        osutil.atomic_write_text(bootstrap, bootstrap_source(bundle, config), mode=0o600)

        def one(rank: RankProcess) -> None:
            try:
                inject.queue(rank.pid, ways[rank.pid], bootstrap)
            except inject.InjectError as exc:
                errors[rank.pid] = str(exc)

        with ThreadPoolExecutor(max_workers=INJECT_PARALLEL) as pool:
            list(pool.map(one, todo))
        deadline = time.monotonic() + confirm_seconds
        docs = _documents(manifest_dir)
        while any(r.pid not in docs and r.pid not in errors for r in todo) and time.monotonic() < deadline:
            time.sleep(0.1)
            docs = _documents(manifest_dir)
    else:
        docs = before
    for rank in found:
        if rank.pid in docs:
            note = "adopted before" if rank.pid in before else None
            result.ranks.append(AdoptedRank(rank.rank, rank.pid, node, docs[rank.pid], note))
        elif rank.pid in errors:
            result.ranks.append(AdoptedRank(rank.rank, rank.pid, node, "failed", errors[rank.pid]))
        else:
            result.ranks.append(AdoptedRank(rank.rank, rank.pid, node, "pending", pending_note(rank.pid)))
    return result


def pending_note(pid: int) -> str:
    """Why a rank has not run its agent yet, with where it waits (py-spy, when it is there: the stack is
    what the user wants to see of a hung rank, and the only one to be had until the rank returns)."""
    note = "blocked in native code; the debugger attaches when it returns to Python"
    try:
        main = pyspy.dump(pid, timeout=5.0).main_thread
    except pyspy.PyspyError:
        return note
    if main is None or not main.frames:
        return note
    top = main.frames[-1]  # frames run outermost first: the last is where it waits
    return f"{note} (main thread in {top.function}, {top.file}:{top.line})"


def _namespaces(pid: int | str) -> tuple[int, int] | None:
    """The (mount, network) namespace inodes of ``pid``; None when unreadable."""
    try:
        return os.stat(PROC / str(pid) / "ns" / "mnt").st_ino, os.stat(PROC / str(pid) / "ns" / "net").st_ino
    except OSError:
        return None


def container_roots() -> list[int]:
    """The topmost process of each training tree in this container: the ancestors of every rank here.

    A rank is any Python process of our mount and network namespaces with torchrun/MPI rank variables; from
    it we go up while the parent is still in those namespaces.  On SageMaker that ends at the container's PID 1
    (a PID namespace of its own); in the emulator, which has no PID namespace, at the command the node was
    started with (its parent, the emulator, lives outside the node's namespaces): either way the process whose
    stdout is the container's log, and whose end is the node's end.
    """
    ours = _namespaces("self")
    children = children_map()
    parents = {child: parent for parent, kids in children.items() for child in kids}
    roots: list[int] = []
    for pid in sorted(parents):
        if _namespaces(pid) != ours or pid == os.getpid():
            continue
        try:
            env = read_environ(pid)
        except ProcError:
            continue
        if rank_of(pid, env, ()) is None or python_version(pid) is None:
            continue
        top = pid
        while parents.get(top, 0) > 0 and _namespaces(parents[top]) == ours:
            top = parents[top]
        if top not in roots:
            roots.append(top)
    return roots


def probe() -> dict[str, object]:
    """What the laptop needs to know of this node before adopting anything: its roots, its ranks, gdb, and the
    one line why they cannot be adopted (``refusal``), checked exactly as :func:`adopt_node` will."""
    roots = container_roots()
    answer: dict[str, object] = {
        "uid": os.geteuid(),
        "roots": roots,
        "ranks": [],
        "gdb": shutil.which("gdb"),
        "code_dir": None,
        "refusal": None,
        "stacks": False,
    }
    try:
        ranks = node_ranks(roots)
        answer["ranks"] = [{"rank": r.rank, "pid": r.pid, "python": list(python_version(r.pid) or ())} for r in ranks]
        check_all(ranks)
    except AdoptRefused as exc:
        # the reason alone: the laptop names the stacks command that fits the job ("--pid" means nothing there)
        answer["refusal"], answer["stacks"] = exc.reason, exc.stacks_pid is not None
        return answer
    except ProcError as exc:
        answer["refusal"] = str(exc)
        return answer
    try:  # where the first rank runs: what the IDE's workspace maps to
        answer["code_dir"] = os.readlink(PROC / str(ranks[0].pid) / "cwd")
    except OSError:
        pass
    return answer


def main(argv: Sequence[str]) -> int:
    """``--adopt-node REQUEST``: REQUEST is a JSON file {"node", "roots", "env"}; prints a NodeResult line.
    ``--adopt-node --probe``: prints :func:`probe`'s line."""
    if list(argv[:1]) == ["--probe"]:
        print(json.dumps(probe()))
        sys.stdout.flush()
        return 0
    try:
        request = json.loads(Path(argv[0]).read_text())
        result = adopt_node(str(request["node"]), [int(p) for p in request["roots"]], dict(request["env"]))
    except (IndexError, OSError, ValueError, KeyError) as exc:
        print(json.dumps({"error": f"bad adopt request: {exc}"}))
        return 2
    except AdoptRefused as exc:
        print(json.dumps({"error": str(exc)}))
        return 2
    print(result.to_json())
    sys.stdout.flush()
    return 0
