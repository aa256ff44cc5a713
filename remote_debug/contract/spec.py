"""The contract between the laptop side (``laptop/``) and the job side (``container/``).

Two documents cross the boundary, and both are versioned:

* the **debug spec** travels *into* the job as environment variables (SageMaker passes a job's
  ``Environment`` to every node, a local job gets the same variables), so nothing in the user's
  training script or launcher has to change;
* the **manifest** travels *out* of the job: one node document (written by the hook) and one rank
  document per debuggable rank process (written by that rank).  The laptop reads them through a
  channel the user's identity can read (a file for local jobs).

The spec is what the user chose (:class:`DebugOptions`: the ranks' debugger, ranks, ports, wait window, hold on
failure - the one options type of ``launch``, ``remote_debug.enable()`` and the SDK wrappers) plus
the job's wiring (its name, the per-job client key, the transport).  Every closed set of values is
an enum (:class:`RankDebugger`, :class:`Transport`, :class:`NodeState`, :class:`RankState`) whose values are
the strings on the wire, so the environment and the JSON documents read exactly as they always did
(and a member still equals its string).

This module is stdlib-only because the container side imports it inside the training image.
Everything here validates its input: a malformed spec or manifest raises :class:`ContractError`
with a one-line message, never a KeyError from deep inside.
"""

from __future__ import annotations

import enum
import json
import math
import os
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from remote_debug.contract.job_secret import SecretError, check_job_secret
from remote_debug.oskit.osutil import atomic_write_text

# Versions: a reader refuses a document of another version (one line: use the same remote-debug on both
# sides), and it refuses values its enums do not know.  So a new field with a default may be added
# without a bump, but a new enum member (a rank state, a transport) or a changed meaning raises the
# version: an older laptop must say "update" rather than misread a node.
SPEC_VERSION = 1
MANIFEST_VERSION = 1

# Debug listeners, control channels and (except with the direct transport) sshd bind the node's IPv4
# loopback only: whoever connects to debugpy can run arbitrary code, so the only way in is SSH.
LOOPBACK = "127.0.0.1"
MAX_WAIT_SECONDS = 7 * 24 * 3600  # the longest wait window / hold on failure: a week

# SageMaker's TrainingJobName pattern; we use it for local jobs too, which keeps job names safe
# inside ssh Host patterns, file names and shell command lines.
JOB_NAME_RE = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")
NODE_NAME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9._-]{0,62}$")
SSM_INSTANCE_RE = re.compile(r"^(mi|i)-[0-9a-f]{8,17}$")  # managed instance ids of the hybrid transport

# --- environment variable names (the spec) -------------------------------------------------------
ENV_VERSION = "REMOTE_DEBUG_SPEC_VERSION"
ENV_JOB = "REMOTE_DEBUG_JOB"
ENV_IDE = "REMOTE_DEBUG_IDE"
ENV_RANKS = "REMOTE_DEBUG_RANKS"
ENV_PORT_BASE = "REMOTE_DEBUG_PORT_BASE"
ENV_SSHD_PORT = "REMOTE_DEBUG_SSHD_PORT"
ENV_WAIT = "REMOTE_DEBUG_WAIT"
ENV_CLIENT_KEY = "REMOTE_DEBUG_CLIENT_PUBKEY"
# The per-job secret (``remote_debug.contract.job_secret``): proves control requests and manifest lines.
ENV_JOB_SECRET = "REMOTE_DEBUG_JOB_SECRET"
ENV_TRANSPORT = "REMOTE_DEBUG_TRANSPORT"
# Seconds a rank that dies of an uncaught exception stays alive for a post-mortem debugger (0 = off).
# Optional: written only when set, so specs without it look exactly as before.
ENV_HOLD_ON_FAILURE = "REMOTE_DEBUG_HOLD_ON_FAILURE"
# Seconds every node stays up after the training command ends (success or failure), for ``sync`` / ``run``
# / ``release`` (0 = off).  Optional like the hold: written only when set.
ENV_KEEP_ALIVE = "REMOTE_DEBUG_KEEP_ALIVE"
SPEC_ENV_NAMES = (
    ENV_VERSION,
    ENV_JOB,
    ENV_IDE,
    ENV_RANKS,
    ENV_PORT_BASE,
    ENV_SSHD_PORT,
    ENV_WAIT,
    ENV_CLIENT_KEY,
    ENV_JOB_SECRET,
    ENV_TRANSPORT,
)
SPEC_OPTIONAL_ENV_NAMES = (ENV_HOLD_ON_FAILURE, ENV_KEEP_ALIVE)

# Per-node variables: not part of the job-wide spec (SageMaker gives every node the same
# Environment), set by whoever starts a node (the local backend, or the hook itself).
ENV_MANIFEST_DIR = "REMOTE_DEBUG_MANIFEST_DIR"  # where this node's manifest documents live
ENV_STATE_DIR = "REMOTE_DEBUG_STATE_DIR"  # private dir of the hook (sshd keys/config)
# Set inside a rank process once it has claimed the listener, inherited by its children (debugpy's
# adapter, DataLoader workers, subprocesses) so that they never start a second listener.
ENV_CLAIMED_BY = "REMOTE_DEBUG_CLAIMED_BY"
# Set by the node hook (or the node daemon) for everything it starts: a Python process that sees it
# knows the node's sshd and manifest are taken care of and does not bootstrap a daemon of its own.
ENV_HOOK_PID = "REMOTE_DEBUG_HOOK_PID"
# Rank tuning knobs, read by each rank from its environment (not part of the job-wide spec):
# "lazy" (default): a rank starts debugpy only when asked through its control channel;
# "eager": debugpy listens from the start (as with a wait window, which always listens eagerly).
ENV_LISTEN = "REMOTE_DEBUG_LISTEN"
# Seconds the torch.distributed process-group timeout is raised to once a debugger is announced
# (default 7200); 0 leaves it alone.
ENV_PG_TIMEOUT = "REMOTE_DEBUG_PG_TIMEOUT"
# After the last debugger detaches, a rank removes pydevd's tracer from every thread (idle cost again)
# and puts it back on the next attach; "0" keeps the tracer installed (debugpy's own behaviour)
ENV_UNTRACE_ON_DETACH = "REMOTE_DEBUG_UNTRACE_ON_DETACH"
# Where a rank's debugpy speaks DAP: "in-process" (default: pydevd in the rank serves the debug port,
# no adapter process per rank) or "subprocess" (debugpy's own default: an adapter process per rank
# relays between the IDE and pydevd)
ENV_DEBUGPY_ADAPTER = "REMOTE_DEBUG_DEBUGPY_ADAPTER"
DEBUGPY_ADAPTERS = ("in-process", "subprocess")
# "0": a rank's debugger shows tensors and arrays as pydevd does (their repr, every attribute) instead
# of the one-line metadata view of container/rank/tensor_view.py (the default)
ENV_TENSOR_VIEW = "REMOTE_DEBUG_TENSOR_VIEW"
# What a rank's debug port (and the laptop's forward to it) answers a second debugger with, after
# "rank N" / "rank N of job J"; the headless attach recognises it
ALREADY_ATTACHED = "already has a debugger attached; detach it first"
# Seconds the node hook gives the command after forwarding a stop signal (SIGTERM) before it SIGKILLs
# whatever the command started (default 100: SageMaker SIGKILLs the container 120 s after its SIGTERM)
ENV_STOP_GRACE = "REMOTE_DEBUG_STOP_GRACE"

# `remote-debug run` / `release` (iterate on a kept-alive node): the laptop runs, over the job's ssh,
#   "$REMOTE_DEBUG_NODE_PYTHON" -m remote_debug.container.node.run_command start|release ...
# (the ssh session names the job's interpreter); ranks of a run prefix their output lines with
# "[rank N] "; `release` says RELEASE_ACK before it tells the hook (which may then end the session).
RERUN_MODULE = "remote_debug.container.node.run_command"
RERUN_PYTHON_ENV = "REMOTE_DEBUG_NODE_PYTHON"
RANK_OUTPUT_PREFIX = "[rank {rank}] "
RELEASE_ACK = "released"

NODE_MANIFEST_FILE = "node.json"
RANK_MANIFEST_GLOB = "rank-*.json"
# A failed node's word on why, in its output dir (/opt/ml/output on SageMaker): SageMaker's FailureReason is
# "AlgorithmError: " + the file's first FAILURE_REASON_LIMIT characters.  The hook writes it (the failing
# rank's exception line) unless the job did; the local supervisor reads it as SageMaker does.
FAILURE_FILE = "failure"
FAILURE_REASON_LIMIT = 1024


class ContractError(ValueError):
    """A spec or manifest that does not follow this contract (message is one line, actionable)."""


# --- the choices (values as they travel: environment variables and JSON) -------------------------

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:  # pragma: no cover - Python 3.10

    class StrEnum(str, enum.Enum):
        """``enum.StrEnum`` of Python 3.11: a member is its value wherever a str is expected."""

        def __str__(self) -> str:
            return str(self.value)

        def __format__(self, format_spec: str) -> str:
            return str(self.value).__format__(format_spec)


class RankDebugger(StrEnum):
    """What every selected rank of a job runs, which decides the direction of the debug connection.

    Which editor the laptop serves (and which of its files an attach writes) is the laptop's business
    (``laptop/ide/editor.py``): any DAP client can debug a DEBUGPY rank, any pydevd server a PYDEVD one.
    The values are the strings the spec (``REMOTE_DEBUG_IDE``) and the rank documents (``"ide"``) have
    always carried, named after the first editor of each kind: an older hook or laptop knows only those.
    """

    DEBUGPY = "vscode"  # debugpy: each rank listens, a DAP client connects in through the tunnel
    PYDEVD = "pycharm"  # pydevd-pycharm: each rank connects out to a pydevd server (PyCharm's "Python Debug Server")


class Transport(StrEnum):
    """How the laptop's ssh reaches a node's sshd."""

    LOCAL = "local"  # a job on this machine: a relay to the node's loopback (or into its network namespace)
    SSM = "ssm"  # SageMaker's native remote debugging: SSM target sagemaker-training-job:<job>_algo-<n>
    HYBRID = "hybrid"  # the node's own amazon-ssm-agent, registered as a managed instance ("mi-...")
    DIRECT = "direct"  # the node's VPC address: sshd listens there instead of on loopback


class NodeState(StrEnum):
    """A node document's ``state``: its hook's (or node daemon's) life."""

    STARTING = "starting"
    RUNNING = "running"  # the training command runs
    COMPLETED = "completed"  # it exited 0
    FAILED = "failed"  # it exited otherwise
    STOPPED = "stopped"  # a stop signal (StopTrainingJob, Ctrl-C) ended it


class RankState(StrEnum):
    """A rank document's ``state``."""

    IDLE = "idle"  # lazy: no debugpy loaded yet; it listens when asked through its control channel
    LISTENING = "listening"  # debugpy listens, no client
    WAITING = "waiting"  # in the wait window (PyCharm: trying to reach the IDE)
    ATTACHED = "attached"  # a debugger is connected
    RUNNING = "running"  # the wait window passed (or the PyCharm session ended): training runs on
    FINISHED = "finished"  # the process exited
    FAILED = "failed"  # it died of an uncaught exception (see ``traceback``)
    SKIPPED = "skipped"  # not selected (REMOTE_DEBUG_RANKS): no debugger, control channel only
    HELD = "held"  # died of an uncaught exception, kept alive for a post-mortem debugger (hold on failure)


class ControlOp(StrEnum):
    """A request on a rank's control channel: one JSON line ``{"op": ...}`` to the rank's ``control_port``.

    ``container/rank/control.py`` serves them in the rank; ``laptop/connection/rank_control.py`` asks them through the
    node's SSH connection.
    """

    LISTEN = "listen"  # start the debug listener (lazy ranks) / put tracing back; the reply has "port"
    PAUSE_SAFE = "pause-safe"  # raise the process-group timeout; the reply's "detail" says how
    STACKS = "stacks"  # every thread's Python stack; the reply has "threads" ("all_threads": debugger's too)
    # leave the wait window now and run on (attach did not select this rank); the reply's "detail" says
    # whether it was waiting.  A rank of an older hook refuses it ("unknown op"), which changes nothing.
    RUN_ON = "run-on"
    # a PyCharm rank: connect out to the IDE through your node port now (the laptop has set up the reverse
    # forward), from a background thread; the reply's "status" is "connecting" or "attached" at once
    CONNECT = "connect"


Choice = TypeVar("Choice", bound=StrEnum)


def parse_choice(kind: type[Choice], value: object, what: str) -> Choice:
    """``value`` as a member of ``kind``, or a one-line ContractError that names the choices."""
    try:
        return kind(value)
    except (ValueError, TypeError):
        choices = ", ".join(member.value for member in kind)
        raise ContractError(f"unknown {what} {str(value)[:80]!r}: use one of {choices}") from None


RankSelection = tuple[int, ...] | None  # None means every rank


# The one rank grammar: the CLI's ``--ranks``, the spec's REMOTE_DEBUG_RANKS, and the extension's settings
# (vscode-extension/src/ranks.ts parses the same; both test suites check the cases in
# vscode-extension/test/unit/fixtures/wire-vectors.json).
_ALL_RANKS = ("", "all", "*")
_RANK_PART_RE = re.compile(r"([0-9]+)(?:\s*-\s*([0-9]+))?")  # [0-9], not \d: int() refuses some of \d's digits
# A range says how many ranks it stands for, and each is one item: "0-99999999999" must not build them all.
RANK_RANGE_LIMIT = 100_000


def parse_ranks(text: str) -> RankSelection:
    """``"all"``, ``"*"`` (any case) or nothing -> None (every rank); else comma-separated ranks and ``a-b``
    ranges, e.g. ``"0-2, 6"`` -> (0, 1, 2, 6), sorted and without repeats.  Global ranks, as torchrun's RANK
    numbers them.  A one-line ContractError ("bad rank list ...") for anything else."""
    text = text.strip()
    if text.lower() in _ALL_RANKS:
        return None
    out: set[int] = set()
    for part in text.split(","):
        match = _RANK_PART_RE.fullmatch(part.strip())
        if match is None:
            raise ContractError(
                f"bad rank list {text[:80]!r}: use 'all' or comma-separated ranks and ranges like '0,2' or '0-3,8'"
            )
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        if last < first or last - first >= RANK_RANGE_LIMIT:
            raise ContractError(
                f"bad rank list {text[:80]!r}: the range {part.strip()!r} must go up, "
                f"and over at most {RANK_RANGE_LIMIT} ranks"
            )
        out.update(range(first, last + 1))
    return tuple(sorted(out))


def format_ranks(ranks: RankSelection) -> str:
    """The selection as the spec's variable carries it ("all", "0,2"): what an older hook's parser reads."""
    return "all" if ranks is None else ",".join(str(r) for r in ranks)


def format_rank_ranges(ranks: Iterable[int], sep: str = ", ") -> str:
    """Ranks for people, short: ``"0-7"``, ``"0, 2-4, 9"`` (each run of two or more consecutive ranks as a
    range; sorted, without repeats; ``sep`` between the runs).  The extension formats them the same
    (rankRanges); it parses back."""
    ordered = sorted(set(ranks))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if j == i else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return sep.join(parts)


def check_job_name(name: str) -> str:
    if not JOB_NAME_RE.fullmatch(name):
        raise ContractError(
            f"bad job name {name[:80]!r}: use 1-63 letters, digits and hyphens, starting with a letter or digit"
        )
    return name


def check_port(port: int, what: str, *, allow_zero: bool = True) -> int:
    if not (0 if allow_zero else 1) <= port <= 65535:
        raise ContractError(
            f"{what} {port} is out of range: use 1-65535" + (" (or 0 for any free port)" if allow_zero else "")
        )
    return port


def _seconds_text(value: float) -> str:
    """31536000, not 3.1536e+07: a bound the user reads in a message."""
    return str(int(value)) if value == int(value) else f"{value:g}"


def env_seconds(
    env: Mapping[str, str], name: str, default: float, *, low: float = -math.inf, high: float = math.inf
) -> tuple[float, str]:
    """Seconds from ``env[name]``, and what was wrong with it ("" when nothing was).

    Unset or blank: ``default``.  Not a number, or outside ``[low, high]`` (NaN included): ``default``
    and one line naming the bad value.  One parser, and the caller decides what a bad value means:
    the spec refuses it (ContractError), a container tuning knob logs it and goes on with the default.
    """
    raw = env.get(name, "").strip()
    if not raw:
        return default, ""
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if low <= value <= high:  # False for NaN
        return value, ""
    bounds = f" ({_seconds_text(low)}-{_seconds_text(high)})" if math.isfinite(low) and math.isfinite(high) else ""
    return default, f"{name}={raw[:40]!r} is not a number of seconds{bounds}"


@dataclass(frozen=True)
class DebugOptions:
    """What the user chose for a job's debugging: the same for ``launch``, ``remote_debug.enable()``
    and the SageMaker SDK wrappers.  Validated on construction (one-line ContractError); a str
    ``ide`` becomes a :class:`RankDebugger`."""

    # what the ranks run; named ``ide`` as the spec's variable and ``enable(ide="vscode"|"pycharm")`` name it
    ide: RankDebugger = RankDebugger.DEBUGPY
    ranks: RankSelection = None  # global ranks that get a debugger; None: every rank
    port_base: int = 0  # listener of local rank r binds 127.0.0.1:(port_base + r); 0 = ephemeral
    sshd_port: int = 0  # 0 = any free port; 22 is refused (MPI jobs run their own sshd there)
    wait_seconds: float = 0.0  # how long each rank waits for a debugger before running on
    hold_on_failure: float = 0.0  # seconds a rank that raised stays alive for a post-mortem attach
    # seconds every node stays up after the training command ends, or until ``release`` / ``stop``: the
    # job's sshd, manifests and ssh entries stay valid, and ``run`` can start the entry again
    keep_alive: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "ide", parse_choice(RankDebugger, self.ide, "IDE"))
        if self.ranks is not None and any(r < 0 for r in self.ranks):
            raise ContractError(f"bad rank list {list(self.ranks)!r}: ranks are 0 or more")
        check_port(self.port_base, "debug port base")
        check_port(self.sshd_port, "sshd port")
        if self.sshd_port == 22:
            raise ContractError("sshd port 22 is reserved (MPI jobs run their own sshd there): pick another or 0")
        if not (0 <= self.wait_seconds <= MAX_WAIT_SECONDS):  # NaN fails too
            raise ContractError(f"wait {self.wait_seconds} s is out of range: use 0 (never wait) up to a week")
        if not (0 <= self.hold_on_failure <= MAX_WAIT_SECONDS):
            raise ContractError(
                f"hold on failure {self.hold_on_failure} s is out of range: use 0 (exit at once) up to a week"
            )
        if not (0 <= self.keep_alive <= MAX_WAIT_SECONDS):
            raise ContractError(
                f"keep-alive {self.keep_alive} s is out of range: use 0 (end with the command) up to a week"
            )

    def selects(self, rank: int) -> bool:
        return self.ranks is None or rank in self.ranks


@dataclass(frozen=True)
class DebugSpec:
    """What a job must do for debugging: the user's :class:`DebugOptions` plus the job's wiring (its
    name, the per-job client key, the transport).  Serialised as environment variables."""

    job_name: str
    client_public_key: str  # an OpenSSH public key line; public, so fine in the job environment
    job_secret: str  # derived from the private key (contract/job_secret.py): as private as the job environment
    transport: Transport = Transport.LOCAL
    options: DebugOptions = field(default_factory=DebugOptions)
    version: int = SPEC_VERSION

    def __post_init__(self) -> None:
        check_job_name(self.job_name)
        object.__setattr__(self, "transport", parse_choice(Transport, self.transport, "transport"))
        check_client_key(self.client_public_key)
        try:
            check_job_secret(self.job_secret)
        except SecretError as exc:
            raise ContractError(str(exc)) from None

    # The options, read where the job uses them (``spec.ide``, ``spec.wait_seconds``...).
    @property
    def ide(self) -> RankDebugger:
        return self.options.ide

    @property
    def ranks(self) -> RankSelection:
        return self.options.ranks

    @property
    def port_base(self) -> int:
        return self.options.port_base

    @property
    def sshd_port(self) -> int:
        return self.options.sshd_port

    @property
    def wait_seconds(self) -> float:
        return self.options.wait_seconds

    @property
    def hold_on_failure(self) -> float:
        return self.options.hold_on_failure

    @property
    def keep_alive(self) -> float:
        return self.options.keep_alive

    def selects(self, rank: int) -> bool:
        return self.options.selects(rank)

    def to_env(self) -> dict[str, str]:
        return spec_env(
            self.job_name, self.transport, self.options, self.client_public_key, self.job_secret, version=self.version
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> DebugSpec | None:
        """The spec in ``env`` (default ``os.environ``), or None when the job has no debug spec."""
        env = os.environ if env is None else env
        raw_version = env.get(ENV_VERSION)
        if raw_version is None:
            return None
        try:
            version = int(raw_version)
        except ValueError:
            raise ContractError(f"{ENV_VERSION}={raw_version!r} is not a number") from None
        if version != SPEC_VERSION:
            raise ContractError(
                f"debug spec version {version} is not supported by this remote_debug (speaks {SPEC_VERSION}): "
                "install the same remote-debug version in the job as on the laptop"
            )
        missing = [n for n in (ENV_JOB, ENV_CLIENT_KEY, ENV_JOB_SECRET) if not env.get(n)]
        if missing:
            raise ContractError(f"debug spec is missing {', '.join(missing)}")
        try:
            port_base, sshd_port = int(env.get(ENV_PORT_BASE, "0")), int(env.get(ENV_SSHD_PORT, "0"))
        except ValueError as exc:
            raise ContractError(f"debug spec has a bad number: {exc}") from None
        options = DebugOptions(
            ide=parse_choice(RankDebugger, env.get(ENV_IDE, RankDebugger.DEBUGPY), "IDE"),
            ranks=parse_ranks(env.get(ENV_RANKS, "all")),
            port_base=port_base,
            sshd_port=sshd_port,
            wait_seconds=_spec_seconds(env, ENV_WAIT),
            hold_on_failure=_spec_seconds(env, ENV_HOLD_ON_FAILURE),
            keep_alive=_spec_seconds(env, ENV_KEEP_ALIVE),
        )
        return cls(
            job_name=env[ENV_JOB],
            client_public_key=env[ENV_CLIENT_KEY],
            job_secret=env[ENV_JOB_SECRET],
            transport=parse_choice(Transport, env.get(ENV_TRANSPORT, Transport.LOCAL), "transport"),
            options=options,
            version=version,
        )


def spec_env(
    job_name: str,
    transport: Transport,
    options: DebugOptions,
    client_public_key: str | None = None,
    job_secret: str | None = None,
    *,
    version: int = SPEC_VERSION,
) -> dict[str, str]:
    """The spec's environment variables (``DebugSpec.to_env``).  Without ``client_public_key`` and
    ``job_secret`` their variables are left out: a job's environment as far as it is known before its
    key pair is made (``enable()`` refuses a request it cannot take before it makes a key)."""
    key = {} if client_public_key is None else {ENV_CLIENT_KEY: client_public_key.strip()}
    if job_secret is not None:
        key[ENV_JOB_SECRET] = job_secret
    hold = {ENV_HOLD_ON_FAILURE: f"{options.hold_on_failure:g}"} if options.hold_on_failure else {}
    if options.keep_alive:
        hold[ENV_KEEP_ALIVE] = f"{options.keep_alive:g}"
    return {
        ENV_VERSION: str(version),
        ENV_JOB: job_name,
        ENV_IDE: options.ide.value,
        ENV_RANKS: format_ranks(options.ranks),
        ENV_PORT_BASE: str(options.port_base),
        ENV_SSHD_PORT: str(options.sshd_port),
        ENV_WAIT: f"{options.wait_seconds:g}",
        **key,
        ENV_TRANSPORT: transport.value,
        **hold,  # optional: specs without a hold look exactly as before it existed
    }


def check_client_key(key: str) -> str:
    line = key.strip()
    if len(line.split()) < 2 or "\n" in line or not line.startswith(("ssh-", "ecdsa-", "sk-")):
        raise ContractError("client public key must be one OpenSSH public key line (e.g. 'ssh-ed25519 AAAA...')")
    return key


def _spec_seconds(env: Mapping[str, str], name: str) -> float:
    value, problem = env_seconds(env, name, 0.0)  # the range is DebugOptions' to check
    if problem:
        raise ContractError(f"debug spec has a bad number: {problem}")
    return value


# --- manifest ------------------------------------------------------------------------------------


_OPTIONAL_RANK_FIELDS = ("failed_at", "hold_until", "code_dir", "start_ticks", "held_for", "held_for_error")


@dataclass
class RankEndpoint:
    """One debuggable rank process, as it reports itself."""

    rank: int  # global rank
    local_rank: int
    world_size: int
    port: int  # debug listener on the node's 127.0.0.1 (0 when no listener)
    pid: int
    state: RankState = RankState.LISTENING
    ide: RankDebugger = RankDebugger.DEBUGPY  # what the rank runs ("ide": the document's key)
    error: str | None = None
    version: int = MANIFEST_VERSION
    # the rank's control channel on the node's 127.0.0.1 (0: none, e.g. older hooks or PyCharm
    # ranks): starts the debug listener on request ("idle" ranks), answers "stacks"
    control_port: int = 0
    # the uncaught exception's traceback (bounded) of a "failed"/"held" rank, as Python printed it
    traceback: str | None = None
    # when (wall clock, Unix seconds) the uncaught exception reached the excepthook: the first failure
    # of a node's ranks is the root cause (what the failure file reports); None for older hooks
    failed_at: float | None = None
    # a "held" rank: when (wall clock, Unix seconds) its hold ends and it exits with the failure
    hold_until: float | None = None
    # where this rank's code is (the root holding the script it runs: remoteRoot of the IDE's path mappings);
    # None: it runs no script file, or an older hook - the node's code_dir applies (see code_dir_of)
    code_dir: str | None = None
    # when the rank process started (``/proc/<pid>/stat`` field 22, clock ticks after boot): with ``pid`` it
    # names one process, so a reader on the rank's machine tells a rank that died without a last word from
    # one that runs (pids are reused); None for older hooks (then the pid alone is checked)
    start_ticks: int | None = None
    # hold on failure, the whole gang: this rank is held (state "held") or was, because rank ``held_for`` of the
    # job failed first - not at an exception of its own (``error``, if any, is one it met while held, such as
    # a collective that timed out: a consequence, never the job's failure reason).  ``held_for_error`` is
    # that rank's exception line, as every rank learnt it (the failure reason of a node whose own ranks
    # did not fail).  None for a rank held at its own exception, and for older hooks.
    held_for: int | None = None
    held_for_error: str | None = None

    def __post_init__(self) -> None:
        # whoever builds one (a rank, a reader, a test) gets the enums, and unknown values are refused
        self.state = parse_choice(RankState, self.state, "rank state")
        self.ide = parse_choice(RankDebugger, self.ide, "IDE")

    def gone(self) -> RankEndpoint:
        """This document made final for a rank process that is gone; ``self`` when it is final already.

        A rank that said how it ended ("finished", "failed") is left as it is: readers use no port of
        theirs.  Any other ended without a last word (SIGKILL, the OOM killer, the SIGTERM of a stop or
        of torchrun after a peer failed skip its exit handlers) and keeps no port to promise: one it held
        is free for anyone to bind now.  It becomes "failed" without an error of its own (``attach``
        reports uncaught exceptions, and a stopped job's ranks end this way too); a "skipped" rank (not
        debugged, it reports no end) just loses its control port."""
        if self.state in (RankState.FINISHED, RankState.FAILED):
            return self
        if self.state == RankState.SKIPPED:
            return self if not self.port and not self.control_port else replace(self, port=0, control_port=0)
        return replace(self, state=RankState.FAILED, port=0, control_port=0, hold_until=None)

    def hold_seconds_left(self, now: float) -> int | None:
        """Whole seconds until a held rank exits with its failure (None when not held, or not said)."""
        if self.state != RankState.HELD or self.hold_until is None:
            return None
        return max(0, round(self.hold_until - now))

    def to_json(self) -> dict[str, Any]:
        # plain JSON values, and never one a reader would refuse (the fields are assignable)
        state, ide = parse_choice(RankState, self.state, "rank state"), parse_choice(RankDebugger, self.ide, "IDE")
        data = asdict(self) | {"state": state.value, "ide": ide.value}
        for key in _OPTIONAL_RANK_FIELDS:  # written only when set: documents without them read as before
            if data[key] is None:
                del data[key]
        return data

    @classmethod
    def from_json(cls, data: Any) -> RankEndpoint:
        d = require_mapping(data, "rank manifest")
        try:
            ep = cls(
                rank=json_int(d, "rank"),
                local_rank=json_int(d, "local_rank"),
                world_size=json_int(d, "world_size"),
                port=json_int(d, "port"),
                pid=json_int(d, "pid"),
                state=parse_choice(RankState, d.get("state", RankState.LISTENING), "rank state"),
                ide=parse_choice(RankDebugger, d.get("ide", RankDebugger.DEBUGPY), "IDE"),
                error=None if d.get("error") is None else str(d["error"]),
                version=json_int(d, "version"),
                control_port=json_int(d, "control_port") if "control_port" in d else 0,
                traceback=None if d.get("traceback") is None else str(d["traceback"]),
                failed_at=_json_time(d, "failed_at"),
                hold_until=_json_time(d, "hold_until"),
                code_dir=None if d.get("code_dir") is None else str(d["code_dir"]),
                start_ticks=json_int(d, "start_ticks") if d.get("start_ticks") is not None else None,
                held_for=json_int(d, "held_for") if d.get("held_for") is not None else None,
                held_for_error=None if d.get("held_for_error") is None else str(d["held_for_error"]),
            )
        except KeyError as exc:
            raise ContractError(f"rank manifest lacks {exc.args[0]!r}") from None
        _check_version(ep.version, "rank manifest")
        check_port(ep.port, "rank manifest port")
        check_port(ep.control_port, "rank manifest control port")
        return ep


@dataclass
class NodeManifest:
    """What the laptop needs to reach one node: its sshd, pinned host key, and its ranks."""

    job_name: str
    node: str  # "algo-1"
    hosts: list[str]
    sshd_host: str  # address the transport relays to, as seen from the node (LOOPBACK, or its VPC address)
    sshd_port: int  # 0 when sshd failed to start (see errors)
    ssh_user: str
    host_public_key: str  # "ssh-ed25519 AAAA..." (no comment)
    code_dir: str
    state: NodeState = NodeState.STARTING
    hook_pid: int = 0
    exit_code: int | None = None
    errors: list[str] = field(default_factory=list)
    ranks: list[RankEndpoint] = field(default_factory=list)  # filled from rank documents on read
    ssm_target: str = ""  # hybrid transport: the node's managed instance id ("mi-..."), else ""
    version: int = MANIFEST_VERSION
    # keep-alive (DebugOptions.keep_alive): while no command runs on a kept-alive node, when (wall clock,
    # Unix seconds) its hold ends; None while the training command or a re-run runs, and without keep-alive
    kept_alive_until: float | None = None
    # which run of the entry the node is on: 0 the training command, n the n-th ``remote-debug run``
    run: int = 0

    def __post_init__(self) -> None:
        self.state = parse_choice(NodeState, self.state, "node state")

    def code_dir_of(self, rank: RankEndpoint) -> str:
        """Where ``rank``'s code is: what the rank itself reports (the root of the script it runs), else the
        node's guess (which can predate the code's arrival, or miss a channel with another name)."""
        return rank.code_dir or self.code_dir

    def to_json(self) -> dict[str, Any]:
        d = asdict(self) | {"state": parse_choice(NodeState, self.state, "node state").value}
        d.pop("ranks")  # ranks are separate documents, written by the ranks themselves
        return d

    @classmethod
    def from_json(cls, data: Any) -> NodeManifest:
        d = require_mapping(data, "node manifest")
        if not isinstance(d.get("hosts", []), list):
            raise ContractError("node manifest field 'hosts' must be a list of host names")
        try:
            m = cls(
                job_name=str(d["job_name"]),
                node=str(d["node"]),
                hosts=[str(h) for h in d["hosts"]],
                sshd_host=str(d["sshd_host"]),
                sshd_port=json_int(d, "sshd_port"),
                ssh_user=str(d["ssh_user"]),
                host_public_key=str(d["host_public_key"]),
                code_dir=str(d["code_dir"]),
                state=parse_choice(NodeState, d.get("state", NodeState.STARTING), "node state"),
                hook_pid=json_int(d, "hook_pid"),
                exit_code=None if d.get("exit_code") is None else json_int(d, "exit_code"),
                errors=[str(e) for e in d.get("errors", [])],
                ssm_target=str(d.get("ssm_target") or ""),  # absent in documents of older hooks
                version=json_int(d, "version"),
                kept_alive_until=_json_time(d, "kept_alive_until"),  # absent before keep-alive existed
                run=json_int(d, "run") if "run" in d else 0,
            )
        except (KeyError, TypeError) as exc:
            raise ContractError(f"node manifest lacks or mangles {exc.args[0]!r}") from None
        _check_version(m.version, "node manifest")
        check_job_name(m.job_name)
        if not NODE_NAME_RE.fullmatch(m.node):
            raise ContractError(f"node manifest has a bad node name {m.node[:80]!r}")
        check_port(m.sshd_port, "node manifest sshd port")
        if m.host_public_key and (len(m.host_public_key.split()) < 2 or "\n" in m.host_public_key):
            raise ContractError("node manifest host key is not one OpenSSH public key line")
        if m.ssm_target and not SSM_INSTANCE_RE.fullmatch(m.ssm_target):
            raise ContractError(f"node manifest has a bad SSM target {m.ssm_target[:80]!r}")
        return m


def rank_manifest_name(rank: int) -> str:
    return f"rank-{rank}.json"


def write_node_manifest(directory: Path, manifest: NodeManifest) -> None:
    atomic_write_text(directory / NODE_MANIFEST_FILE, json.dumps(manifest.to_json(), indent=2) + "\n")


def write_rank_manifest(directory: Path, endpoint: RankEndpoint) -> None:
    atomic_write_text(directory / rank_manifest_name(endpoint.rank), json.dumps(endpoint.to_json(), indent=2) + "\n")


def read_node_manifest(directory: Path) -> NodeManifest | None:
    """The node document merged with its rank documents; None if the node has not written one yet."""
    path = directory / NODE_MANIFEST_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    manifest = NodeManifest.from_json(_loads(data, path))
    manifest.ranks = read_rank_documents(directory)
    return manifest


def read_rank_documents(directory: Path, *, skip_broken: bool = False) -> list[RankEndpoint]:
    """The rank documents in a manifest dir, by rank.  A broken one raises ContractError, or with
    ``skip_broken`` is left out (the node's own readers: reporting it is the laptop's job)."""
    ranks = []
    for rank_path in sorted(directory.glob(RANK_MANIFEST_GLOB)):
        try:
            ranks.append(RankEndpoint.from_json(_loads(rank_path.read_bytes(), rank_path)))
        except FileNotFoundError:  # replaced between glob and read
            continue
        except (OSError, ValueError):  # ContractError is a ValueError
            if not skip_broken:
                raise
    return sorted(ranks, key=lambda r: r.rank)


def root_cause(ranks: Iterable[RankEndpoint]) -> RankEndpoint | None:
    """The rank whose failure came first - torchelastic's "root cause" - among ``ranks`` (any number of
    nodes' documents): the rank its peers say they are held for (hold on failure: the job's store named
    the first failure, whatever the nodes' clocks say), else of the ranks that died of (or are held at)
    an exception of their own, the earliest ``failed_at`` (documents of older hooks, without a time,
    after the timed ones, by rank).  A rank held for another's failure is never the root cause."""
    ranks = list(ranks)
    named = {r.held_for for r in ranks if r.held_for is not None}
    own = sorted(
        (r for r in ranks if _failed_itself(r)),
        key=lambda r: (r.rank not in named, r.failed_at is None, r.failed_at or 0.0, r.rank),
    )
    return own[0] if own else None


def _failed_itself(r: RankEndpoint) -> bool:
    """Died of (or is held at) an uncaught exception of its own."""
    return bool(r.error) and r.held_for is None and r.state in (RankState.FAILED, RankState.HELD)


def failure_order(ranks: Iterable[RankEndpoint]) -> list[RankEndpoint]:
    """``ranks`` as the user reads about them after a failure: the root cause first, then the others
    that failed at an exception of their own (by time), then the ranks held for another's failure and
    the rest (by rank)."""
    ranks = list(ranks)
    cause = root_cause(ranks)

    def key(r: RankEndpoint) -> tuple[int, float, int]:
        if cause is not None and (r.rank, r.pid) == (cause.rank, cause.pid):
            return (0, 0.0, r.rank)
        if _failed_itself(r):
            return (1, r.failed_at if r.failed_at is not None else math.inf, r.rank)
        return (2, 0.0, r.rank)

    return sorted(ranks, key=key)


def held_phrase(seconds_left: int | None) -> str:
    """``held for post-mortem, 87 s left``: one wording for the node log, ``jobs`` and ``stacks``."""
    return "held for post-mortem" + (f", {seconds_left} s left" if seconds_left is not None else "")


def held_with_phrase(failed_rank: int) -> str:
    """``held with rank 3, which failed``: a rank held for another's failure, paused where it was until that
    rank's hold ends (one wording for the node log, ``jobs``, ``stacks``)."""
    return f"held with rank {failed_rank}, which failed"


def kept_alive_phrase(seconds_left: int) -> str:
    """``kept alive, 87 s left``: one wording for the node log, ``jobs`` and the job's secondary status."""
    return f"kept alive, {seconds_left} s left"


def read_failure_file(output_dir: Path) -> str | None:
    """A node's failure file (see FAILURE_FILE) as one line; None when there is none (or it is empty)."""
    try:
        with open(output_dir / FAILURE_FILE, encoding="utf-8", errors="replace") as fh:
            text = fh.read(FAILURE_REASON_LIMIT)
    except OSError:
        return None
    return " ".join(text.split()) or None


def _loads(data: bytes, path: Path) -> Any:
    try:
        text = data.decode("utf-8")  # what the writers write, whatever the reader's locale says
    except UnicodeDecodeError as exc:
        raise ContractError(f"malformed manifest {path}: not UTF-8 text (byte {exc.start})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ContractError(f"malformed manifest {path}: {exc.msg} at line {exc.lineno}") from None
    except RecursionError:  # json's C decoder recurses once per nesting level
        raise ContractError(f"malformed manifest {path}: nested too deeply") from None


def require_mapping(data: Any, what: str) -> Mapping[str, Any]:
    """``data`` if it is a JSON object; a one-line ContractError otherwise."""
    if not isinstance(data, Mapping):
        raise ContractError(f"{what} is not a JSON object")
    return data


def _json_time(d: Mapping[str, Any], key: str) -> float | None:
    """``d[key]`` as a finite number of seconds, None when absent or null (documents of older hooks)."""
    value = d.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ContractError(f"manifest field {key!r} must be a number of seconds, got {str(value)[:40]!r}")
    return float(value)


def json_int(d: Mapping[str, Any], key: str) -> int:
    """``d[key]`` as an int (not a bool); a one-line ContractError otherwise (KeyError when absent)."""
    value = d[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise ContractError(f"manifest field {key!r} must be an integer, got {value!r}")
    return value


def _check_version(version: int, what: str) -> None:
    if version != MANIFEST_VERSION:
        raise ContractError(
            f"{what} version {version} is not supported (this remote_debug speaks {MANIFEST_VERSION}): "
            "use the same remote-debug version in the job and on the laptop"
        )
