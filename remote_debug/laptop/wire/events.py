"""The attach/demo event stream, defined once: what ``remote-debug attach --json`` prints, one JSON line per event.

Each event is a frozen dataclass whose class attribute ``name`` is its wire name; ``to_json()`` is the line
(``{"event": name, "v": EVENTS_VERSION, **fields}``).  The VS Code extension's types are generated from these
classes (``python tools/generate_wire.py`` -> ``vscode-extension/src/generated/events.ts``),
and ``tests/local/test_events_schema.py`` fails when the committed copy differs.

Versioning: ``EVENTS_VERSION`` goes up when a field changes meaning or type, or is removed.  Adding an event or
an optional field does not bump it: readers ignore what they do not know.  Nor does adding a member to an enum
(the extension keeps a value it does not know, see vscode-extension/src/events.ts).

Field types are restricted to what the generator maps: str, int, float, bool, a ``StrEnum`` (a field with a
closed set of values: on the wire its value, in TypeScript a union of string literals), ``X | None``,
``list[X]``, ``dict[str, X]`` and nested frozen dataclasses (``Any`` only where a payload is really free-form).
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Union

from remote_debug.contract.spec import RankDebugger, RankState, StrEnum, format_rank_ranges
from remote_debug.laptop.core.jobinfo import JobStatus
from remote_debug.laptop.wire.documents import GroupAction as GroupAction

EVENTS_VERSION = 1
# The key of the human line (event_text.py) beside an event's fields in what ``--json`` prints: no field has it.
TEXT_KEY = "text"

# --- VS Code debug configuration names (launch.json and the extension's own sessions) -----------------
# One definition: vscode_launch.config_name/compound_name format these, and the generated TypeScript has
# the same templates and formatting functions.
CONFIG_NAME_PREFIX_TEMPLATE = "remote-debug: {job} "  # every configuration of a job (the space: job "a" vs "a-b")
CONFIG_NAME_TEMPLATE = CONFIG_NAME_PREFIX_TEMPLATE + "rank {rank} ({node})"
COMPOUND_NAME_TEMPLATE = CONFIG_NAME_PREFIX_TEMPLATE + "all ranks"
NODE_COMPOUND_NAME_TEMPLATE = CONFIG_NAME_PREFIX_TEMPLATE + "node {node}"  # a multi-node job's ranks of one node


def format_config_name(job: str, rank: int, node: str) -> str:
    return CONFIG_NAME_TEMPLATE.format(job=job, rank=rank, node=node)


def format_node_compound_name(job: str, node: str) -> str:
    return NODE_COMPOUND_NAME_TEMPLATE.format(job=job, node=node)


def format_compound_name(job: str, ranks: list[int] | None = None) -> str:
    """The compound of a job's configurations, named for what it holds: "all ranks" (``ranks`` None:
    every rank of the job), else "rank 0" / "ranks 0, 2" / "ranks 0-3, 6".  The extension never builds
    the partial names itself: it reads them from ``launch-json``'s ``compound``."""
    if ranks is None:
        return COMPOUND_NAME_TEMPLATE.format(job=job)
    return format_config_name_prefix(job) + format_rank_list(ranks)


def format_rank_list(ranks: list[int]) -> str:
    """ "rank 3", "ranks 0, 2", "ranks 0-3, 6" (:func:`~remote_debug.contract.spec.format_rank_ranges`)."""
    return ("rank " if len(set(ranks)) == 1 else "ranks ") + format_rank_ranges(ranks)


def format_config_name_prefix(job: str) -> str:
    return CONFIG_NAME_PREFIX_TEMPLATE.format(job=job)


def plural(count: int, singular: str, plural_form: str | None = None) -> str:
    """``1 job``, ``2 jobs``: counts in the sentences events and commands print."""
    return f"{count} {singular if count == 1 else (plural_form or singular + 's')}"


@dataclass(frozen=True, kw_only=True)
class Event:
    """Base of every event; subclasses set ``name`` (the wire name)."""

    name: ClassVar[str] = ""

    def to_json(self) -> dict[str, Any]:
        return {"event": self.name, "v": EVENTS_VERSION, **_fields_json(self)}


Emit = Callable[[Event], None]


def ignore(_: Event) -> None:
    """An :data:`Emit` that drops every event."""


# --- the events, in the order an attach usually prints them ---------------------------------------


@dataclass(frozen=True, kw_only=True)
class Launched(Event):
    """``demo``: the example job was started."""

    name: ClassVar[str] = "launched"
    job: str
    workspace: str
    nodes: int
    nproc_per_node: int


@dataclass(frozen=True, kw_only=True)
class JobStatusEvent(Event):
    """The platform is still starting the job (SageMaker: Starting -> Downloading -> Training)."""

    name: ClassVar[str] = "job-status"
    job: str
    status: JobStatus
    secondary_status: str  # open-ended (SageMaker's SecondaryStatus)
    message: str = ""


@dataclass(frozen=True, kw_only=True)
class Waiting(Event):
    name: ClassVar[str] = "waiting"
    what: str  # "nodes"
    nodes: list[str]
    seconds: float = 0  # how long this wait has lasted (0: it has just begun)
    detail: str = ""  # where the wait looks and what it saw (log group, region, profile; files), once it drags on


@dataclass(frozen=True, kw_only=True)
class SshConfig(Event):
    name: ClassVar[str] = "ssh-config"
    aliases: list[str]
    config: str


@dataclass(frozen=True, kw_only=True)
class NodeConnected(Event):
    name: ClassVar[str] = "node-connected"
    node: str
    alias: str


@dataclass(frozen=True, kw_only=True)
class PycharmBuild(Event):
    """``--ide pycharm`` with a real PyCharm: the build whose pydevd-pycharm the ranks must match."""

    name: ClassVar[str] = "pycharm-build"
    build: str
    source: str
    others: list[str]
    installed: str | None = None


@dataclass(frozen=True, kw_only=True)
class PycharmConfig(Event):
    name: ClassVar[str] = "pycharm-config"
    path: str
    config_name: str = field(metadata={"json": "name"})  # on the wire "name": that is the class's wire name here
    port: int
    steps: list[str]


@dataclass(frozen=True, kw_only=True)
class RankListening(Event):
    """A lazy rank started its debug listener when asked through its control channel (PyCharm: the rank was
    asked to connect out to the IDE through ``remote_port``, its node port; ``detail`` says how it went)."""

    name: ClassVar[str] = "rank-listening"
    rank: int
    node: str
    remote_port: int
    detail: str | None = None


@dataclass(frozen=True, kw_only=True)
class RankReady(Event):
    """A rank is forwarded: VS Code attaches to 127.0.0.1:local_port (PyCharm: the IDE port)."""

    name: ClassVar[str] = "rank-ready"
    rank: int
    node: str
    local_port: int
    remote_port: int
    state: RankState
    ide: RankDebugger  # what the rank runs (JSON key and values as before: "vscode" | "pycharm")
    code_dir: str  # the job's code dir on that node (remoteRoot of the path mapping)


@dataclass(frozen=True, kw_only=True)
class RankUnavailable(Event):
    name: ClassVar[str] = "rank-unavailable"
    rank: int
    node: str
    state: RankState
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class PauseSafe(Event):
    """A rank's process-group timeout was raised, so a peer paused in a debugger does not time it out."""

    name: ClassVar[str] = "pause-safe"
    rank: int
    node: str
    detail: str | None = None


@dataclass(frozen=True, kw_only=True)
class LaunchJson(Event):
    name: ClassVar[str] = "launch-json"
    path: str
    compound: str
    configurations: list[str]


@dataclass(frozen=True, kw_only=True)
class Ready(Event):
    name: ClassVar[str] = "ready"
    ranks: list[int]


@dataclass(frozen=True, kw_only=True)
class RankConnected(Event):
    """PyCharm: a rank's reverse-forwarded connection reached the IDE's debug server."""

    name: ClassVar[str] = "rank-connected"
    rank: int
    node: str
    ide_port: int


@dataclass(frozen=True, kw_only=True)
class IdeNotListening(Event):
    """PyCharm: a rank connected, but nothing listens on the IDE port (said once per rank)."""

    name: ClassVar[str] = "ide-not-listening"
    rank: int
    node: str
    message: str


@dataclass(frozen=True, kw_only=True)
class RankAttached(Event):
    """A headless debugger attached (``pydevd``: the rank's pydevd version, headless PyCharm only)."""

    name: ClassVar[str] = "rank-attached"
    rank: int
    node: str
    pydevd: str | None = None


@dataclass(frozen=True, kw_only=True)
class Stopped(Event):
    """Headless: a rank stopped at a breakpoint or after a step."""

    name: ClassVar[str] = "stopped"
    rank: int
    node: str
    file: str
    line: int
    function: str
    reason: str
    variables: dict[str, str]


@dataclass(frozen=True, kw_only=True)
class LogpointHit(Event):
    """Headless (``--log FILE:LINE:MESSAGE``): a rank passed a logpoint, which printed ``message`` (its ``{expr}``
    replaced by their values) without stopping it; ``file`` is the local path the logpoint was set in."""

    name: ClassVar[str] = "logpoint"
    rank: int
    node: str
    file: str
    line: int
    message: str


@dataclass(frozen=True, kw_only=True)
class RankPrinted(Event):
    """Headless (``--show-output``): a line a rank printed while the debugger was attached (``stream``: DAP's output
    category, ``stdout`` or ``stderr``)."""

    name: ClassVar[str] = "rank-output"
    rank: int
    node: str
    line: str
    stream: str = "stdout"


@dataclass(frozen=True, kw_only=True)
class RankDetached(Event):
    name: ClassVar[str] = "rank-detached"
    rank: int
    node: str
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class RankFailed(Event):
    """A rank died of an uncaught exception; ``held``: it waits (hold on failure) for a post-mortem debugger;
    ``root_cause``: its failure came first in the job (torchelastic's "root cause": the others' follow from it),
    reported before the others'."""

    name: ClassVar[str] = "rank-failed"
    rank: int
    node: str
    pid: int
    error: str | None = None
    traceback: str | None = None
    held: bool = False
    root_cause: bool = False


@dataclass(frozen=True, kw_only=True)
class RankHeld(Event):
    """Hold on failure, the whole gang: rank ``held_for`` failed (its ``rank-failed`` comes first), and this rank
    is held with it, paused where it was, until that rank's hold ends; ``error``: that rank's exception line."""

    name: ClassVar[str] = "rank-held"
    rank: int
    node: str
    pid: int
    held_for: int
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class RankRestarted(Event):
    """A rank's process was replaced (``remote-debug run`` started the entry again): the old one's debug
    session ends, and a ``rank-ready`` for the new process follows on the same ``local_port``."""

    name: ClassVar[str] = "rank-restarted"
    rank: int
    node: str
    pid: int  # the new process
    old_pid: int
    run: int  # the node's run: 1 for the first `remote-debug run`, ...


@dataclass(frozen=True, kw_only=True)
class Reconnected(Event):
    name: ClassVar[str] = "reconnected"
    node: str


@dataclass(frozen=True, kw_only=True)
class TunnelDown(Event):
    name: ClassVar[str] = "tunnel-down"
    node: str
    error: str


@dataclass(frozen=True, kw_only=True)
class WarningEvent(Event):
    """Something the user should know; ``code`` names the kind when a reader may act on it
    (``debugger-refused``), ``rank``/``node`` say where."""

    name: ClassVar[str] = "warning"
    message: str
    code: str | None = None
    rank: int | None = None
    node: str | None = None


@dataclass(frozen=True, kw_only=True)
class BreakpointsMissed(Event):
    """``attach --headless --break``: no rank stopped at a breakpoint (a wrong line or file, code that does not
    run there): ``breakpoints`` as ``FILE:LINE`` (relative to the workspace when in it), ``ranks`` the ranks that
    were debugged.  The attach then exits 1."""

    name: ClassVar[str] = "breakpoints-missed"
    breakpoints: list[str]
    ranks: list[int]


class DetachReason(StrEnum):
    """Why an attach left a job that still runs."""

    STOPS_DONE = "stops-done"  # headless: every rank had its stops (without --follow)
    INTERRUPTED = "interrupted"  # Ctrl-C (SIGINT)


@dataclass(frozen=True, kw_only=True)
class Detached(Event):
    """The attach ended and the job runs on (its debuggers detached, its tunnels closed); instead of
    ``job-ended``.  ``status``: the job's status when known."""

    name: ClassVar[str] = "detached"
    job: str
    reason: DetachReason
    status: JobStatus | None = None


@dataclass(frozen=True, kw_only=True)
class JobEnded(Event):
    name: ClassVar[str] = "job-ended"
    status: JobStatus
    exit_code: int | None = None
    failure_reason: str | None = None


# --- `remote-debug sync` and `remote-debug run` (their --json lines) ------------------------------------


@dataclass(frozen=True, kw_only=True)
class NodeSynced:
    """One node's part of :class:`Synced`."""

    node: str
    method: str  # "rsync" or "sftp"
    files: int  # files whose data was sent
    bytes: int  # file data sent
    seconds: float


@dataclass(frozen=True, kw_only=True)
class Synced(Event):
    """``sync`` copied the workspace into every node's code dir (``--watch``: once per change)."""

    name: ClassVar[str] = "synced"
    job: str
    source: str  # the local folder whose contents are at the code dir
    files: int
    bytes: int
    seconds: float
    nodes: list[NodeSynced] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class RunStarted(Event):
    """``run`` started the entry (or the given command) again on every node."""

    name: ClassVar[str] = "run-started"
    job: str
    run: int
    nodes: list[str]
    command: list[str]
    master_port: int | None = None  # the fresh rendezvous port, when the launcher has one


@dataclass(frozen=True, kw_only=True)
class RunOutput(Event):
    """A line the run printed; ``rank`` when a rank printed it (else the launcher)."""

    name: ClassVar[str] = "run-output"
    node: str
    line: str
    rank: int | None = None


@dataclass(frozen=True, kw_only=True)
class RunEnded(Event):
    """The run ended on every node (``exit_code``: the first non-zero node's, else 0); the nodes are kept."""

    name: ClassVar[str] = "run-ended"
    job: str
    run: int
    exit_code: int
    exit_codes: dict[str, int] = field(default_factory=dict)  # node -> its launcher's code
    interrupted: bool = False  # Ctrl-C stopped it


@dataclass(frozen=True, kw_only=True)
class StopSummary:
    """One stop of a rank, in :class:`Summary`."""

    file: str
    line: int
    function: str
    reason: str
    variables: dict[str, str]


@dataclass(frozen=True, kw_only=True)
class RankSummary:
    """One rank's headless session, in :class:`Summary` (``file``/``line``/``variables``: its first stop)."""

    rank: int
    node: str
    file: str | None = None
    line: int | None = None
    variables: dict[str, str]
    stops: list[StopSummary]
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class Summary(Event):
    """``attach --headless --json``: the last line, after ``job-ended``."""

    name: ClassVar[str] = "summary"
    job: str
    exit_code: int | None = None
    ranks: list[RankSummary]


# --- many ranks, one debugger: all-stop and the group actions (laptop/attach/rank_group.py) ------------


@dataclass(frozen=True, kw_only=True)
class AllStop(Event):
    """A rank stopped (``reason``: DAP's, e.g. "breakpoint", "exception", "pause", "step") and all-stop pauses
    every other rank that runs: ``pausing``."""

    name: ClassVar[str] = "all-stop"
    rank: int
    reason: str
    pausing: list[int]


@dataclass(frozen=True, kw_only=True)
class AllPaused(Event):
    """Every rank a debugger is attached to is stopped now, ``seconds`` after ``rank`` stopped first (None:
    after Pause All)."""

    name: ClassVar[str] = "all-paused"
    rank: int | None
    ranks: list[int]
    seconds: float


@dataclass(frozen=True, kw_only=True)
class RankWaiting(Event):
    """A rank asked to pause (or to step) has not stopped after ``seconds``: it runs native code (a collective
    waiting for paused ranks, I/O) and stops when it returns to Python."""

    name: ClassVar[str] = "rank-waiting"
    rank: int
    action: GroupAction
    seconds: float


@dataclass(frozen=True, kw_only=True)
class GroupActed(Event):
    """A group action reached ``ranks``; ``origin``: who asked ("rank 0" when all-stop followed one rank's
    Continue, else "remote-debug ranks")."""

    name: ClassVar[str] = "group-action"
    action: GroupAction
    ranks: list[int]
    origin: str


EVENT_TYPES: tuple[type[Event], ...] = (
    Launched,
    JobStatusEvent,
    Waiting,
    SshConfig,
    NodeConnected,
    PycharmBuild,
    PycharmConfig,
    RankListening,
    RankReady,
    RankUnavailable,
    PauseSafe,
    LaunchJson,
    Ready,
    RankConnected,
    IdeNotListening,
    RankAttached,
    Stopped,
    LogpointHit,
    RankPrinted,
    RankDetached,
    RankFailed,
    RankHeld,
    RankRestarted,
    Reconnected,
    TunnelDown,
    WarningEvent,
    BreakpointsMissed,
    Detached,
    JobEnded,
    Summary,
    Synced,
    RunStarted,
    RunOutput,
    RunEnded,
    AllStop,
    AllPaused,
    RankWaiting,
    GroupActed,
)

_BY_NAME: dict[str, type[Event]] = {cls.name: cls for cls in EVENT_TYPES}


# --- JSON <-> dataclasses ----------------------------------------------------------------------------


def json_key(f: dataclasses.Field[Any]) -> str:
    """The field's key on the wire (a field may not be called ``name``: that is the event's class attribute)."""
    return str(f.metadata.get("json", f.name))


def _fields_json(obj: Any) -> dict[str, Any]:
    return {json_key(f): _to_json(getattr(obj, f.name)) for f in dataclasses.fields(obj)}


def _to_json(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _fields_json(value)
    if isinstance(value, enum.Enum):
        return value.value  # a plain str: the line never depends on how a member prints
    if isinstance(value, (list, tuple)):
        return [_to_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _to_json(v) for k, v in value.items()}
    return value


def from_json(d: dict[str, Any]) -> Event:
    """The event a JSON line (parsed) stands for; ValueError if it does not match the schema exactly.

    Strict (for tests and round trips): an unknown event or field, a missing field or a value of the wrong
    type is an error.  ``v`` may be absent; a different version is an error."""
    if not isinstance(d, dict):
        raise ValueError(f"an event is a JSON object, not {type(d).__name__}")
    name = d.get("event")
    cls = _BY_NAME.get(name) if isinstance(name, str) else None
    if cls is None:
        raise ValueError(f"unknown event {name!r}")
    version = d.get("v", EVENTS_VERSION)
    if version != EVENTS_VERSION:
        raise ValueError(f"event {name}: version {version!r}, expected {EVENTS_VERSION}")
    # "text": the human line the CLI adds to what it prints (event_text.with_text), not a field of the event
    rest = {k: v for k, v in d.items() if k not in ("event", "v", TEXT_KEY)}
    event = _dataclass_from_json(cls, rest, cls.name)
    assert isinstance(event, Event)
    return event


def _dataclass_from_json(cls: type[Any], data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected an object, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    known: set[str] = set()
    for f in dataclasses.fields(cls):
        key = json_key(f)
        known.add(key)
        if key in data:
            kwargs[f.name] = _value_from_json(hints[f.name], data[key], f"{where}.{key}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ValueError(f"{where}: missing field {key!r}")
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"{where}: unknown fields {unknown}")
    return cls(**kwargs)


def _value_from_json(tp: Any, value: Any, where: str) -> Any:
    if tp is Any:
        return value
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _value_from_json(arg, value, where)
            except ValueError as exc:
                errors.append(str(exc))
        raise ValueError("; ".join(errors) or f"{where}: null is not allowed")
    if origin is list:
        if not isinstance(value, list):
            raise ValueError(f"{where}: expected a list, got {type(value).__name__}")
        (item,) = typing.get_args(tp)
        return [_value_from_json(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ValueError(f"{where}: expected an object, got {type(value).__name__}")
        _, item = typing.get_args(tp)
        return {str(k): _value_from_json(item, v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _dataclass_from_json(tp, value, where)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        if not isinstance(value, str):
            raise ValueError(f"{where}: expected str, got {type(value).__name__} {value!r}")
        try:
            return tp(value)
        except ValueError:
            choices = ", ".join(repr(member.value) for member in tp)
            raise ValueError(f"{where}: unknown {tp.__name__} {value!r}: one of {choices}") from None
    if tp is bool:
        ok = isinstance(value, bool)
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif tp is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif tp is str:
        ok = isinstance(value, str)
    else:
        raise ValueError(f"{where}: type {tp!r} has no JSON mapping")
    if not ok:
        raise ValueError(f"{where}: expected {tp.__name__}, got {type(value).__name__} {value!r}")
    return value
