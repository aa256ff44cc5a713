"""The JSON documents the CLI prints (``--json``) that are not events nor a JobInfo, defined once.

Each is a frozen dataclass whose ``to_json()`` is what the command prints; the VS Code extension's types are
generated from them (``tools/generate_wire.py`` -> ``vscode-extension/src/generated/events.ts``, with the events and
JobInfo), and ``tests/local/test_events_schema.py`` fails when the committed copy differs.  Documents that have a
class elsewhere already (``adopt``'s, whose modules this wing may not import) are listed by the generator.

The same rules as the events (:mod:`remote_debug.laptop.wire.events`): adding a field or a document is compatible,
and the extension's parsers are tolerant (an older extension reads a newer CLI); renaming or removing a field is not.

``stacks --json`` is built piece by piece from the ranks' answers and py-spy, so its parts are TypedDicts (the
generator maps those too: a key of a ``total=False`` base is optional).  Stdlib + the contract only: ``version``
imports this and must stay quick.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any, TypedDict

from remote_debug.contract.spec import StrEnum

# --- ssh aliases --------------------------------------------------------------------------------------
# One definition: ssh_config.HostEntry.alias formats it, and the generated TypeScript has the same template
# (formatSshAlias); the extension finds a node's alias with it rather than by taking an alias apart.
SSH_ALIAS_TEMPLATE = "{node}.{job}"


def format_ssh_alias(job: str, node: str) -> str:
    return SSH_ALIAS_TEMPLATE.format(job=job, node=node)


class Document:
    """Base of the documents: ``to_json()`` is the printed JSON (enum members as their values)."""

    def to_json(self) -> dict[str, Any]:
        assert dataclasses.is_dataclass(self)
        return dataclasses.asdict(self, dict_factory=_plain_dict)


def _plain_dict(items: list[tuple[str, Any]]) -> dict[str, Any]:
    return {key: value.value if isinstance(value, enum.Enum) else value for key, value in items}


# --- version --json -----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class VersionInfo(Document):
    """``version --json``: the extension checks a minimum version and upgrades with ``python`` (``sys.executable``)."""

    version: str
    distribution: str
    python: str
    events_version: int  # EVENTS_VERSION of this CLI's attach --json stream


# --- jobs --json: why a backend's jobs are missing (stderr, one document a line) ---------------------


class ListingProblemKind(StrEnum):
    """Why a backend's jobs were not listed; all but ``unreachable`` and ``error`` are fixed with credentials,
    a profile or a region."""

    NO_CREDENTIALS = "no-credentials"
    SSO_EXPIRED = "sso-expired"
    PROFILE_NOT_FOUND = "profile-not-found"
    NO_REGION = "no-region"
    ACCESS_DENIED = "access-denied"
    UNREACHABLE = "unreachable"
    ERROR = "error"


@dataclass(frozen=True, kw_only=True)
class ListingProblem(Document):
    """``jobs --json`` keeps stdout the jobs it could list; for each backend it could not, stderr gets this."""

    unlisted: str  # the backend ("sagemaker")
    problem: ListingProblemKind
    message: str  # one line
    fix: str | None  # a command line that fixes it, e.g. "aws sso login --profile dev"
    profile: str | None
    region: str | None


# --- ssh-config --json --------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class SshConfigWritten(Document):
    """``ssh-config JOB --json``: the Host entries were written (``aliases``: one per node, ``format_ssh_alias``)."""

    aliases: list[str]
    config: str  # our ssh config file (the job's entries are included from it)
    user_config: str  # ~/.ssh/config
    user_config_changed: bool  # our Include line was added just now


@dataclass(frozen=True, kw_only=True)
class SshConfigPreview(Document):
    """``ssh-config JOB --dry-run --json``: what would be written."""

    aliases: list[str]
    dry_run: bool = True
    user_config_diff: str  # the Include line ~/.ssh/config would get ("" when it has it)
    job_config: str  # the job's Host entries


@dataclass(frozen=True, kw_only=True)
class SshJobEntriesRemoved(Document):
    """``ssh-config JOB --remove --json``: one job's entries are gone (``dry_run``: would be)."""

    removed_job: str
    aliases: list[str]
    known_hosts: int  # pinned host keys
    dry_run: bool


@dataclass(frozen=True, kw_only=True)
class SshEntries:
    """One job's entries, in :class:`SshEntriesRemoved`."""

    job: str
    aliases: list[str]
    known_hosts: int


@dataclass(frozen=True, kw_only=True)
class SshEntriesRemoved(Document):
    """``ssh-config --remove --json``: every job's entries and our Include line in ~/.ssh/config are gone."""

    removed_jobs: list[SshEntries] = field(default_factory=list)
    restored: str  # ~/.ssh/config
    changed: bool  # it had our Include line
    dry_run: bool
    user_config_diff: str


# --- release --json -----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Released(Document):
    """``release JOB --json``: the kept-alive job's nodes end now."""

    job: str
    released: list[str]  # its nodes


# --- doctor --json -----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class DoctorCheck:
    """One check of ``doctor``: ``status`` is ok, warn, fail or skip; ``fix`` the command or step that helps."""

    name: str
    status: str
    detail: str
    fix: str
    data: dict[str, Any]  # the facts behind it (a version, a tier, a region...)


@dataclass(frozen=True, kw_only=True)
class DoctorReport(Document):
    """``doctor --json`` (exit code 1 when not ``ok``)."""

    ok: bool
    checks: list[DoctorCheck]


# --- enable JOB --json --------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class EnableReport(Document):
    """``enable JOB --json``: SageMaker's native remote debugging on a running job."""

    job: str
    updated: bool  # False: it was on already
    status: str
    secondary_status: str
    has_spec: bool  # the job runs remote-debug's hook (it was created with remote_debug.enable())
    claimed: bool  # a job nobody owned was tagged with the caller as its owner first
    region: str
    region_source: str  # where the region came from (--region, a profile, the environment...)


# --- cleanup --json -----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class LeftoverItem:
    """One thing the hybrid transport left in AWS: ``id`` an activation id, an ``mi-`` id or an ``s3://`` URI."""

    kind: str
    id: str
    job: str
    why: str
    error: str | None  # why deleting it failed (``--yes``); None: deleted, or only listed


@dataclass(frozen=True, kw_only=True)
class CleanupReport(Document):
    """``cleanup --json``: what the caller's hybrid jobs left behind, and whether it was deleted."""

    region: str
    owner: str
    days: int
    deleted: bool  # --yes: each item was deleted unless it has an error
    leftovers: list[LeftoverItem]


# --- emulator --json ----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class EmulatorStarted(Document):
    """``emulator --json``: where the emulator listens, and the access key it made at this start."""

    endpoint_url: str
    region: str
    state: str  # its state dir
    access_key_id: str
    secret_access_key: str


# --- stacks --json ------------------------------------------------------------------------------------


class StackFrame(TypedDict):
    file: str
    line: int
    function: str


class _StackThreadFromPyspy(TypedDict, total=False):
    # py-spy's reading only
    main: bool
    os_id: int | None
    active: bool | None
    owns_gil: bool | None


class StackThread(_StackThreadFromPyspy):
    """One thread's stack, outermost frame first; ``exception``: a rank held for a post-mortem, where it raised."""

    name: str
    frames: list[StackFrame]
    exception: str | None
    internal: bool  # the debugger's own thread (only with --all-threads)


class GroupCollectives(TypedDict):
    """One process group of a rank as its PyTorch Flight Recorder saw it (the job has it on)."""

    group: str  # the group's name: the same on every member
    desc: str | None  # "default_pg", or what new_group was given
    ranks: list[int] | None  # its members' global ranks (None: not known)
    last_entered: int  # sequence id of the newest collective the rank entered (0: none yet)
    last_completed: int | None
    op: str | None  # what last_entered is, e.g. "all_reduce"


class _RankStacksOptional(TypedDict, total=False):
    control_error: str  # the control channel did not answer: read with py-spy instead
    blocked_in_native: bool  # py-spy: the main thread is in native code
    nonblocking: bool  # py-spy read it without stopping it
    dump_seconds: float
    root_cause: bool  # its failure came first in the job (torchelastic's "root cause"): listed first
    held_for: int  # held with this rank, which failed (hold on failure holds every rank): not its own failure
    collectives: list[GroupCollectives]  # the job has PyTorch's Flight Recorder on: each of the rank's groups


class RankStacks(_RankStacksOptional):
    """One rank's threads (``source``: "control", its control channel, or "py-spy"); ``error``: it could not be read."""

    rank: int
    node: str | None
    pid: int
    state: str | None
    hold_seconds_left: int | None
    source: str
    threads: list[StackThread]
    error: str | None


class StackClass(TypedDict):
    """Ranks whose stacks are the same (``stacks``' hang view), in the order printed: the odd ones first.

    ``frames``: the class's thread (the main one), outermost first; ``summary``: the call path as the header
    line prints it (innermost frame first); ``blocked_in_native``: None when not known (a control channel's
    reading says True only for a wait in a torch.distributed collective); ``error``: why these ranks could not
    be read; ``exception``: a rank held for a post-mortem, what it raised (``frames``: where)."""

    ranks: list[int]
    ranges: str  # "0-62", "0-3,5,7-9"
    count: int
    thread: str | None
    frames: list[StackFrame]
    summary: str
    blocked_in_native: bool | None
    error: str | None
    exception: str | None
    root_cause: bool
    in_debugger: bool  # stopped in the debugger (breakpoint, pause, step): ``frames`` end where it stopped


class StuckCollective(TypedDict):
    """A collective some members of its process group entered and others never did (Flight Recorder)."""

    group: str
    desc: str | None
    seq: int  # the collective's sequence id in its group
    op: str | None
    entered: list[int]  # global ranks waiting in it
    missing: list[int]  # members that never entered it
    unknown: list[int]  # members whose Flight Recorder could not be read
    summary: str  # the line printed


class _StacksReportOptional(TypedDict, total=False):
    pid: int  # --pid: the process tree that was read
    source: str  # --no-hook / --pid: "py-spy" for every rank
    code_dirs: dict[str, str]  # node -> the job's code dir there (a job of this machine: one copy per node)
    classes: list[StackClass]  # the ranks grouped by stack, as printed (stack_classes.py)
    collectives: list[StuckCollective]  # from the Flight Recorder; empty when off or nothing is stuck


class StacksReport(_StacksReportOptional):
    """``stacks --json``: every selected rank (``ranks``: in rank order, the flat form), and the same ranks grouped
    by stack (``classes``)."""

    job: str | None
    ranks: list[RankStacks]


# --- ranks ACTION JOB --json: the group of a running attach ------------------------------------------


class GroupAction(StrEnum):
    """What one action does to every rank a debugger is attached to (``remote-debug ranks ACTION JOB``)."""

    CONTINUE = "continue"
    PAUSE = "pause"
    STEP = "step"  # step over, in each rank
    DETACH = "detach"


class RankPhase(StrEnum):
    """Where a rank of an attach's group is."""

    RUNNING = "running"
    STOPPED = "stopped"
    PAUSING = "pausing"  # asked to pause; not stopped yet (in native code: a collective, I/O)
    STEPPING = "stepping"  # stepping; not stopped yet


@dataclass(frozen=True, kw_only=True)
class RankInGroup:
    rank: int
    phase: RankPhase
    reason: str  # why it stopped last ("breakpoint", "pause", ...); "" unless stopped
    by_group: bool  # stopped by all-stop or Pause All, not by its own breakpoint or step


@dataclass(frozen=True, kw_only=True)
class GroupReply(Document):
    """``ranks ACTION JOB --json``: what the action reached, in every running attach of the job."""

    job: str
    action: str  # a GroupAction, or "status"
    attaches: int  # the running attaches of the job that answered
    ranks: list[int]  # the ranks the action reached
    status: list[RankInGroup] = field(default_factory=list)  # every rank with a debugger, after the action


DOCUMENT_TYPES: tuple[type[Any], ...] = (
    VersionInfo,
    ListingProblem,
    SshConfigWritten,
    SshConfigPreview,
    SshJobEntriesRemoved,
    SshEntriesRemoved,
    Released,
    StacksReport,
    DoctorReport,
    EnableReport,
    CleanupReport,
    EmulatorStarted,
    GroupReply,
)
