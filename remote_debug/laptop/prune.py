"""``remote-debug prune``: remove what remote-debug wrote for jobs that have ended, and nothing else.

What we write per job, and where it is found again:

- ``<state>/jobs/<job>/``: a local job's whole tree (code copy, logs, manifests, job.json);
- ``<state>/keys/<job>/``: the job's client key pair (local and SageMaker jobs);
- ``<state>/ssh/jobs/<job>.conf`` + ``<state>/ssh/known_hosts.d/<job>``: its Host entries and pinned keys;
- ``<state>/sagemaker/<job>.json``: the proxy's hint for a SageMaker job;
- its configurations and compound in every launch.json recorded under ``<state>/vscode/``
  (:func:`launch_record.recorded_files`); removed through :func:`vscode_launch.remove_job_configs`,
  which gives the user's bytes back and leaves other entries as they are.

A job is pruned only when its backend says it has ended (local jobs: job.json and no process left;
SageMaker: DescribeTrainingJob, in the region the proxy's hint names).  A job we cannot ask about, or
that no backend knows, is kept and the reason shown: removing the key of a job that still runs in
another region would lock the user out of it.  Without its key and job dir, though, what is left of a
job (Host entries, launch.json configurations, the hint) is of no use and attach writes it again: that
goes even when no backend knows the job.  The launch.json configurations go first: if the file cannot
be edited, nothing else of that job is removed, so a later prune finds the job again.  A recorded
launch.json we cannot read at all (the user broke its syntax) is reported; the entries in it of jobs
pruned meanwhile go with a later prune, once it reads again (they are then all that is left of them).

One exception to "ended jobs only": the entries of an attach that was killed (its attach lock file
still names it, and nobody holds the lock) go whatever the job's state, as the next attach would do:
they name ports nobody of ours holds any more (:func:`vscode_launch.give_back_dead_attaches`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from remote_debug.contract import spec
from remote_debug.laptop.connection import ssh_config
from remote_debug.laptop.core.errors import CannotTell as CannotTell
from remote_debug.laptop.core.errors import UnknownJobError, UserError
from remote_debug.laptop.core.jobinfo import TERMINAL, JobInfo
from remote_debug.laptop.core.paths import StatePaths, job_names_in
from remote_debug.laptop.ide import launch_record, vscode_launch
from remote_debug.laptop.machine.job_dir import read_job_file
from remote_debug.laptop.platforms import MachineBackend, SageMakerBackend
from remote_debug.laptop.wire import events
from remote_debug.oskit import netns as netns_mod
from remote_debug.oskit import osutil

DAY_SECONDS = 86400.0
_ENTRY_PREFIX = events.format_config_name_prefix("")[:-1]  # "remote-debug: " (before the job name)
_PRUNING = ".pruning-"  # a job dir on its way out: renamed first, so no half-removed job is ever listed

Lookup = Callable[[str], JobInfo]


def default_lookup(paths: StatePaths) -> Lookup:
    """A job's state: this machine's jobs first, then SageMaker in the region the hint names."""
    local = MachineBackend(paths)

    def lookup(job: str) -> JobInfo:
        if local.has_job(job):
            return local.describe(job)
        hint = SageMakerBackend(paths).load_hint(job)
        remote = SageMakerBackend(paths, region=hint.region if hint else None)
        if not remote.available():
            raise CannotTell(
                "not a local job, and AWS is not configured to ask SageMaker about it (pass --region / --profile)"
            )
        return remote.describe(job)

    return lookup


@dataclass
class Leftovers:
    """Everything of ours that names one job."""

    job: str
    job_dir: Path | None = None
    key_dir: Path | None = None
    hint: Path | None = None
    ssh: ssh_config.JobEntries | None = None
    launch_json: dict[Path, int] = field(default_factory=dict)  # file -> our entries of this job in it

    def parts(self) -> list[str]:
        """What would go, as the words of a sentence."""
        out = []
        if self.job_dir:
            out.append("job dir")
        if self.key_dir:
            out.append("key")
        if self.ssh and self.ssh.aliases:
            out.append(events.plural(len(self.ssh.aliases), "Host entry", "Host entries"))
        if self.ssh and self.ssh.known_hosts:
            out.append(events.plural(self.ssh.known_hosts, "known_hosts line"))
        if self.hint:
            out.append("SageMaker hint")
        for path, n in self.launch_json.items():
            out.append(f"{events.plural(n, 'launch.json config')} in {path}")
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "job_dir": str(self.job_dir) if self.job_dir else None,
            "key_dir": str(self.key_dir) if self.key_dir else None,
            "sagemaker_hint": str(self.hint) if self.hint else None,
            "host_entries": self.ssh.aliases if self.ssh else [],
            "known_hosts_lines": self.ssh.known_hosts if self.ssh else 0,
            "launch_json": [{"path": str(p), "configs": n} for p, n in self.launch_json.items()],
        }


@dataclass
class JobOutcome:
    """One job's line in prune's answer: pruned, kept (and why), or failed (and what went wrong)."""

    job: str
    status: str | None  # JobStatus when a backend answered
    leftovers: Leftovers
    kept: str | None = None  # why it is kept; None when it is (or would be) pruned
    error: str | None = None  # why pruning it failed (nothing of it was removed after the failing step)
    ended: float | None = None

    @property
    def pruned(self) -> bool:
        return self.kept is None and self.error is None

    def to_json(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "status": self.status,
            "ended": self.ended,
            "pruned": self.pruned,
            "kept": self.kept,
            "error": self.error,
            "leftovers": self.leftovers.to_json(),
        }


class Pruner:
    def __init__(self, paths: StatePaths | None = None, lookup: Lookup | None = None, now: float | None = None) -> None:
        self.paths = paths or StatePaths.default()
        self.lookup = lookup or default_lookup(self.paths)
        self.now = time.time() if now is None else now

    # --- what is there --------------------------------------------------------------------------

    def _launch_entries(self) -> tuple[dict[str, dict[Path, int]], dict[Path, str]]:
        """job -> {launch.json: our entries of that job}; and the files that could not be read."""
        found: dict[str, dict[Path, int]] = {}
        unreadable: dict[Path, str] = {}
        for path in launch_record.recorded_files(self.paths):
            try:
                names = launch_record.read_entry_names(path)
            except UserError as exc:
                unreadable[path] = str(exc)
                continue
            for name in names:
                # "remote-debug: <job> ...", the entries vscode_launch owns (the blank after the job included)
                job, blank, _ = name.removeprefix(_ENTRY_PREFIX).partition(" ")
                if name.startswith(_ENTRY_PREFIX) and blank and spec.JOB_NAME_RE.fullmatch(job):
                    per_file = found.setdefault(job, {})
                    per_file[path] = per_file.get(path, 0) + 1
        return found, unreadable

    def inventory(self) -> tuple[list[Leftovers], dict[Path, str]]:
        """Every job something of ours names, with what that is; and the launch.json files we could not read."""
        paths = self.paths
        launch, unreadable = self._launch_entries()
        local_jobs = job_names_in(paths.jobs_dir)
        keyed = job_names_in(paths.keys_dir)
        hinted = job_names_in(paths.sagemaker_hints_dir, ".json")
        names = local_jobs | keyed | hinted | set(ssh_config.jobs_with_entries(paths)) | set(launch)
        out = []
        for job in sorted(names):
            entries = ssh_config.job_entries(paths, job)
            out.append(
                Leftovers(
                    job=job,
                    job_dir=paths.job_dir(job) if job in local_jobs else None,
                    key_dir=paths.job_key(job).parent if job in keyed else None,
                    hint=paths.sagemaker_hint(job) if job in hinted else None,
                    ssh=None if entries.empty else entries,
                    launch_json=dict(sorted(launch.get(job, {}).items())),
                )
            )
        return out, unreadable

    # --- whether a job may go -------------------------------------------------------------------

    def _verdict(self, left: Leftovers, older_than_days: float | None) -> JobOutcome:
        try:
            info = self.lookup(left.job)
        except (UserError, spec.ContractError) as exc:
            return self._unknown(left, exc, older_than_days)
        outcome = JobOutcome(left.job, str(info.status), left, ended=info.ended)
        if info.status not in TERMINAL:
            outcome.kept = "it is still running"
        elif left.job_dir is not None and (pid := self._live_process(left.job_dir)):
            outcome.kept = f"its process {pid} still runs: stop it with 'remote-debug stop {left.job}' first"
        elif older_than_days is not None and self._too_recent(info.ended or info.created, older_than_days):
            outcome.kept = f"it ended less than {older_than_days:g} days ago (--older-than)"
        return outcome

    def _unknown(self, left: Leftovers, exc: Exception, older_than_days: float | None) -> JobOutcome:
        """No backend says the job has ended.  Its key and job dir stay (they cannot be made again, and
        the job may run where we cannot see it); without them, what is left (Host entries, launch.json
        configurations, the hint) is of no use and ``attach`` writes it again: that goes."""
        why = (
            "no backend knows this job (check --region / --profile)"
            if isinstance(exc, UnknownJobError)
            else f"cannot tell whether it has ended: {' '.join(str(exc).split())}"
        )
        outcome = JobOutcome(left.job, None, left)
        if left.key_dir is not None or left.job_dir is not None:
            outcome.kept = why
        elif older_than_days is not None and self._too_recent(self._written(left), older_than_days):
            outcome.kept = f"{why}; and its files are less than {older_than_days:g} days old (--older-than)"
        return outcome

    def _too_recent(self, since: float | None, days: float) -> bool:
        return since is None or self.now - since < days * DAY_SECONDS

    def _written(self, left: Leftovers) -> float | None:
        """When we last wrote something of the job (its files' newest mtime)."""
        files = [self.paths.job_ssh_config(left.job), self.paths.job_known_hosts(left.job), *left.launch_json]
        if left.hint:
            files.append(left.hint)
        times = []
        for path in files:
            with contextlib.suppress(OSError):
                times.append(path.stat().st_mtime)
        return max(times, default=None)

    @staticmethod
    def _live_process(job_dir: Path) -> int | None:
        """A process of the local job that still runs (its end was never recorded: the supervisor was
        killed), whose files we must not pull away."""
        try:
            state = read_job_file(job_dir)
        except spec.ContractError:
            return None
        if state.get("ended"):
            return None
        pids = [*(state.get("node_pids") or {}).values()]
        with contextlib.suppress(OSError, ValueError):
            pids.append((job_dir / "supervisor.pid").read_text().strip())
        for pid in pids:
            with contextlib.suppress(TypeError, ValueError):
                if osutil.pid_alive(int(pid)):
                    return int(pid)
        return None

    # --- removing -------------------------------------------------------------------------------

    def _remove(self, left: Leftovers) -> None:
        """Everything of the job, launch.json first (see the module's docstring)."""
        for path in left.launch_json:
            vscode_launch.remove_job_configs(path.parent.parent, left.job, paths=self.paths)
        if left.ssh is not None:
            ssh_config.remove_job_entries(self.paths, left.job)
        if left.hint is not None:
            left.hint.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                left.hint.parent.rmdir()
        if left.key_dir is not None:
            _remove_key_dir(left.key_dir)
        if left.job_dir is not None:
            self._remove_job_dir(left.job_dir)

    def _remove_job_dir(self, job_dir: Path) -> None:
        namespaces: list[str] = []
        with contextlib.suppress(spec.ContractError):
            namespaces = [str(n) for n in read_job_file(job_dir).get("netns") or []]
        netns_mod.delete(namespaces)  # normally gone with the supervisor; not if it was killed
        doomed = job_dir.with_name(f".{job_dir.name}{_PRUNING}{os.getpid()}")
        os.rename(job_dir, doomed)  # from here on no command sees a half-removed job
        shutil.rmtree(doomed)

    def _sweep(self) -> None:
        """Job dirs an interrupted prune renamed but did not finish removing (not another one's at work)."""
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            for path in self.paths.jobs_dir.iterdir():
                owner = path.name.rpartition(_PRUNING)[2] if path.name.startswith(".") and _PRUNING in path.name else ""
                if owner.isdigit() and not osutil.pid_alive(int(owner)):
                    shutil.rmtree(path, ignore_errors=True)

    def run(self, *, dry_run: bool = False, older_than_days: float | None = None) -> PruneResult:
        if not dry_run:
            # an attach that was killed (SIGKILL) left entries naming ports nobody of ours holds, also
            # for a job that still runs: they go whatever the job's state (its lock says its attach is dead)
            with contextlib.suppress(UserError, OSError):  # a file it cannot edit is reported below
                vscode_launch.give_back_dead_attaches(self.paths)
        leftovers, unreadable = self.inventory()
        outcomes = []
        for left in leftovers:
            outcome = self._verdict(left, older_than_days)
            if outcome.kept is None and not dry_run:
                try:
                    self._remove(left)
                except (UserError, OSError) as exc:
                    outcome.error = _one_line(exc)
            outcomes.append(outcome)
        if not dry_run:
            self._sweep()
        return PruneResult(outcomes, unreadable, dry_run)


def _remove_key_dir(key_dir: Path) -> None:
    # only the files we make (keys.ensure_job_key): anything else someone put there stays, and its folder too
    for name in ("id_ed25519", "id_ed25519.pub", "id_ed25519.tmp"):
        (key_dir / name).unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        key_dir.rmdir()
    with contextlib.suppress(OSError):
        key_dir.parent.rmdir()


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, OSError) and not isinstance(exc, UserError):
        where = f" ({exc.filename})" if exc.filename else ""
        return f"{exc.strerror or exc}{where}"
    return " ".join(str(exc).split())


@dataclass
class PruneResult:
    outcomes: list[JobOutcome]
    unreadable: dict[Path, str]  # launch.json files we have entries in but could not read
    dry_run: bool

    @property
    def failed(self) -> bool:
        """Something could not be removed (a job's files, or entries in a launch.json we could not read)."""
        return any(o.error for o in self.outcomes) or bool(self.unreadable)

    def to_json(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "jobs": [o.to_json() for o in self.outcomes],
            "unreadable_launch_json": [{"path": str(p), "error": e} for p, e in self.unreadable.items()],
        }
