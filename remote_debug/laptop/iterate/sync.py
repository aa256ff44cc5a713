"""``remote-debug sync JOB``: the workspace into every node's code dir, incrementally, over the job's ssh.

One file list (``sync_files.collect``: git's ignore rules, ``.remote-debugignore``, ``--exclude``, no
symlink out of the workspace) feeds one of two ways of sending, per node:

* rsync, when it is installed here and on the node: ``rsync --files-from=- --from0`` through OpenSSH
  with the job's own ssh entries (``ssh -F <job's config>``, the pinned host key and ProxyCommand
  ``remote-debug proxy``, as ``remote-debug ssh`` uses them).  The first ssh (``command -v rsync`` on the
  node) becomes a ControlMaster the rsync runs share, so a re-sync costs no new login (0.15 s instead of
  0.3-0.6 s); masters end with the Syncer (``-O exit``), or idle out after MUX_PERSIST_SECONDS.
  rsync reads by path and follows links, so it reads a private staged tree of the list (hard links of
  the files as ``open_inside`` opened them: ``sync_stage.py``), never the workspace itself;
* sftp otherwise, in-process on the node's existing SSH connection (``NodeTunnel.open_sftp``): the
  node's files are listed a folder at a time and a file is sent when its size or mtime differ; it is
  written under a temporary name in its own folder and renamed over the old one (``posix-rename``), so
  a rank importing mid-sync never sees half a file, and stamped with the local mtime so the next sync
  sees it current.  SFTP_STREAMS sessions send files side by side (a file costs a few round trips).

Both decide "current" as rsync's quick check does (same size, same whole-second mtime); a Syncer that
sent a file also sends it again when it was rewritten since with the same size in the same second (its
nanosecond mtime tells), which an editor's quick saves under ``--watch`` would otherwise slip through.

Both copy in-workspace symlinks as what they point to, set the local permission bits and mtime, and
never delete anything on the node.  An interrupted upload leaves no partial file: rsync removes its
temporary file itself; sftp removes its own on the way out (over a new connection when a terminal's
Ctrl-C took the ProxyCommand, and so the old one, with it), and one a connection that dropped left
behind is removed by the next sync of that folder once it is STALE_TEMP_SECONDS old.

``--watch`` (:meth:`Syncer.watch`) listens for changes with watchdog (inotify here; events coalesced
for DEBOUNCE_SECONDS), and falls back to polling the file list every POLL_SECONDS where watchdog cannot
watch the tree (inotify's watch limit): either way a change is a new file list, and only a list that
differs from the last one synced starts a sync.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import queue
import re
import secrets
import shlex
import shutil
import stat
import subprocess
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_all
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import paramiko

from remote_debug.contract.spec import StrEnum
from remote_debug.laptop.connection.job_connection import JobConnection
from remote_debug.laptop.core import interrupts
from remote_debug.laptop.core.errors import JobNotRunningError, UserError, reason
from remote_debug.laptop.core.jobinfo import TERMINAL, JobInfo, JobRef
from remote_debug.laptop.core.paths import StatePaths
from remote_debug.laptop.iterate.sync_files import FileList, LocalFile, collect, exclude_rules, open_inside
from remote_debug.laptop.iterate.sync_stage import staged
from remote_debug.laptop.wire import events
from remote_debug.oskit import osutil

T = TypeVar("T")

DEBOUNCE_SECONDS = 0.2  # --watch: changes closer together than this are one sync
POLL_SECONDS = 0.5  # --watch without watchdog: how often the file list is taken again
RETRY_SECONDS = 2.0  # --watch: a failed sync is tried again after this long
JOB_CHECK_SECONDS = 10.0  # --watch: how often it asks whether the job ended (then it stops, exit code 2)
STALE_TEMP_SECONDS = 60.0  # an sftp temporary file nobody wrote to for this long was left by a dropped link
MUX_PERSIST_SECONDS = 60  # an rsync ControlMaster left behind (a killed sync) ends after this long idle
CHUNK = 256 * 1024
SFTP_STREAMS = 4  # SFTP sessions per node sending files side by side
TEMP_INFIX = ".rd-sync-"  # .<name>.rd-sync-<8 hex>: sftp's temporary names
_TEMP_RE = re.compile(r"^\..+" + re.escape(TEMP_INFIX) + r"[0-9a-f]{8}$")
SSH_FAILED = 255  # OpenSSH's own failures (the remote command's code otherwise)
# rsync: 24 = files vanished before they could be sent; 23 = some not sent (checked: only vanished ones)
_RSYNC_VANISHED = (23, 24)
# watchdog's events that mean something was written (not "opened", "closed_no_write": our own reads)
_WRITE_EVENTS = frozenset({"created", "deleted", "modified", "moved", "closed"})


class SyncMethod(StrEnum):
    AUTO = "auto"
    RSYNC = "rsync"
    SFTP = "sftp"


@dataclass(frozen=True)
class SyncTarget:
    node: str
    alias: str  # its ssh Host entry
    code_dir: str
    method: SyncMethod  # RSYNC or SFTP, chosen when the Syncer opened


class _Cancelled(Exception):
    """Ctrl-C (or another node's failure) while this node was being synced."""


def source_dir(explicit: Path | None, info: JobInfo | None = None) -> Path:
    """What to sync: ``--source``, else the folder the job was launched from if it still exists, else
    the current folder."""
    if explicit is not None:
        if not explicit.exists():
            raise UserError(f"source {explicit} does not exist: give --source an existing folder")
        if not explicit.is_dir():
            raise UserError(f"source {explicit} is not a folder: give --source a folder")
        return explicit.absolute()
    if info is not None and info.source_dir and Path(info.source_dir).is_dir():
        return Path(info.source_dir)
    return Path.cwd()


class Syncer:
    """Syncs one workspace into a running job's nodes; keeps its connections between syncs (``--watch``).

    Open it with :meth:`open`, close it (or use ``with``) to end the connections."""

    def __init__(
        self, connection: JobConnection, source: Path, targets: list[SyncTarget], excludes: Sequence[str] = ()
    ) -> None:
        self.connection, self.source, self.targets = connection, source, targets
        self.excludes = list(excludes)
        self._sftp: dict[str, list[paramiko.SFTPClient]] = {}  # node -> its sessions
        self._cancel = threading.Event()
        self._mux_dir: str | None = None
        # (node, temporary file) an interrupted upload could not remove: its connection went with the
        # Ctrl-C (the terminal's SIGINT reaches the ProxyCommand too); removed over a new connection
        self._orphans: list[tuple[str, str]] = []
        # path -> (size, mtime_ns) of every file as the last sync left it: a file rewritten since with the
        # same size in the same second looks current to the quick check (rsync's too), and is sent anyway
        self._sent: dict[str, tuple[int, int]] = {}
        self._rsync = shutil.which("rsync") or "rsync"
        self._ssh = shutil.which("ssh") or "ssh"

    @classmethod
    def open(
        cls,
        job: str | JobRef,
        *,
        source: Path | None = None,
        nodes: Sequence[str] = (),
        excludes: Sequence[str] = (),
        method: SyncMethod = SyncMethod.AUTO,
        timeout: float = 60.0,
        paths: StatePaths | None = None,
    ) -> Syncer:
        """Check the job runs and the source is a folder, wait for the nodes' sshd, write their ssh
        entries and pick each node's method; one-line errors for what the user can fix."""
        if source is not None:
            source_dir(source)  # bad input before any job is looked at
        exclude_rules(excludes)
        connection = JobConnection.open(job, paths)
        try:
            info = connection.describe()
            if info.status in TERMINAL:
                raise JobNotRunningError(f"job {connection.job} is {info.status}: nothing to sync to")
            src = source_dir(source, info)
            manifests = connection.wait_for_manifests(timeout)
            unknown = [n for n in nodes if n not in manifests]
            if unknown:
                have = ", ".join(sorted(manifests))
                raise UserError(f"job {connection.job} has no node {unknown[0]!r}: it has {have}")
            entries = connection.write_ssh_entries(manifests, edit_user_config=False)
            chosen = [e for e in entries if not nodes or e.node in nodes]
            syncer = cls(connection, src, [], excludes)
            try:
                syncer.targets = syncer._choose(
                    [(e.node, e.alias, manifests[e.node].code_dir) for e in chosen], SyncMethod(method)
                )
            except BaseException:
                syncer.close()
                raise
            return syncer
        except BaseException:
            connection.close()
            raise

    def __enter__(self) -> Syncer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- choosing a method ------------------------------------------------------------------------

    def _ssh_words(self) -> list[str]:
        """OpenSSH with the job's own entries, as ``remote-debug ssh`` runs it, sharing one
        ControlMaster per node between the rsync check and every rsync run of this Syncer."""
        if self._mux_dir is None:  # made before any thread asks (see _choose)
            self._mux_dir = tempfile.mkdtemp(prefix="rd-sync-")  # short: a socket path has ~100 bytes
        return [
            self._ssh,
            "-F",
            str(self.connection.paths.job_ssh_config(self.connection.job)),
            "-o",
            "BatchMode=yes",
            "-o",
            "ControlMaster=auto",
            "-o",
            f"ControlPath={self._mux_dir}/%C",
            "-o",
            f"ControlPersist={MUX_PERSIST_SECONDS}",
        ]

    def _node_has_rsync(self, alias: str) -> bool:
        proc = subprocess.run(
            [*self._ssh_words(), alias, "command -v rsync"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if proc.returncode == SSH_FAILED:
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise UserError(f"ssh to {alias} failed: {last}; check the job with 'remote-debug doctor JOB'")
        return proc.returncode == 0 and bool(proc.stdout.strip())

    def _choose(self, nodes: list[tuple[str, str, str]], wanted: SyncMethod) -> list[SyncTarget]:
        if wanted == SyncMethod.SFTP:
            return [SyncTarget(n, a, d, SyncMethod.SFTP) for n, a, d in nodes]
        here = shutil.which("rsync") is not None and shutil.which("ssh") is not None
        if not here:
            if wanted == SyncMethod.RSYNC:
                raise UserError(
                    "rsync (or OpenSSH's ssh) is not installed here: install it (apt install rsync "
                    "openssh-client) or use --method sftp"
                )
            return [SyncTarget(n, a, d, SyncMethod.SFTP) for n, a, d in nodes]
        self._ssh_words()  # the ControlMaster folder: one, before the threads
        with ThreadPoolExecutor(max_workers=len(nodes) or 1) as pool:
            has = list(pool.map(lambda n: self._node_has_rsync(n[1]), nodes))
        targets = []
        for (node, alias, code_dir), ok in zip(nodes, has, strict=True):
            if not ok and wanted == SyncMethod.RSYNC:
                raise UserError(f"node {node} has no rsync: install it in the job's image or use --method sftp")
            targets.append(SyncTarget(node, alias, code_dir, SyncMethod.RSYNC if ok else SyncMethod.SFTP))
        return targets

    # --- syncing --------------------------------------------------------------------------------

    def collect(self) -> FileList:
        return collect(self.source, self.excludes)

    def sync(self, files: FileList | None = None) -> events.Synced:
        """One sync of ``files`` (default: the list taken now) to every target, nodes in parallel.

        The work runs in threads: a Ctrl-C (which Python raises in the main thread only) never lands
        mid-packet; it makes each node stop at its next chunk and clean up, then it is raised here."""
        files = files if files is not None else self.collect()
        started = time.monotonic()
        self._cancel.clear()
        forced = {
            f.path
            for f in files.files
            if (was := self._sent.get(f.path)) is not None
            and was[0] == f.size
            and was[1] != f.mtime_ns
            and was[1] // 1_000_000_000 == f.mtime
        }
        pool = ThreadPoolExecutor(max_workers=len(self.targets) or 1, thread_name_prefix="sync")
        try:
            with contextlib.ExitStack() as stack:
                # rsync reads its own files by path, following links: it gets a staged copy of the list instead
                stage = (
                    stack.enter_context(staged(files, self.connection.paths.root / "sync-stage"))
                    if any(t.method == SyncMethod.RSYNC for t in self.targets)
                    else None
                )
                results = self._gather([pool.submit(self._sync_node, t, files, forced, stage) for t in self.targets])
        except BaseException:
            self._remove_orphans()
            raise
        finally:
            pool.shutdown(wait=False)
        self._sent = {f.path: (f.size, f.mtime_ns) for f in files.files}
        return events.Synced(
            job=self.connection.job,
            source=str(files.root),
            files=sum(r.files for r in results),
            bytes=sum(r.bytes for r in results),
            seconds=round(time.monotonic() - started, 3),
            nodes=results,
        )

    def _gather(self, futures: list[Future[T]]) -> list[T]:
        """The futures' results; on the first failure (or Ctrl-C) the others are told to stop and waited
        for, and the failure that started it is raised (not a sibling's _Cancelled)."""
        try:
            return [f.result() for f in futures]
        except BaseException as exc:
            self._cancel.set()
            wait_all(futures, timeout=30)
            if isinstance(exc, _Cancelled):
                for f in futures:
                    cause = None if not f.done() or f.cancelled() else f.exception()
                    if isinstance(cause, Exception) and not isinstance(cause, _Cancelled):
                        raise cause from None
            raise

    def _sync_node(
        self, target: SyncTarget, files: FileList, forced: set[str], stage: tuple[Path, list[LocalFile]] | None
    ) -> events.NodeSynced:
        started = time.monotonic()
        if target.method == SyncMethod.RSYNC:
            assert stage is not None
            top, listed = stage
            count, size = self._rsync_node(target, top, listed)
            if forced:  # a second run that skips the quick check, for those alone
                more = self._rsync_node(target, top, [f for f in listed if f.path in forced], ["--ignore-times"])
                count, size = count + more[0], size + more[1]
        else:
            count, size = self._sftp_node(target, files, forced)
        return events.NodeSynced(
            node=target.node,
            method=str(target.method),
            files=count,
            bytes=size,
            seconds=round(time.monotonic() - started, 3),
        )

    # --- rsync ----------------------------------------------------------------------------------

    def _rsync_node(
        self, target: SyncTarget, root: Path, files: list[LocalFile], extra: Sequence[str] = ()
    ) -> tuple[int, int]:
        if not files:
            return 0, 0
        rsh = " ".join(shlex.quote(word) for word in self._ssh_words())  # rsync splits -e with quotes
        argv = [
            self._rsync,
            "-e",
            rsh,
            "--files-from=-",
            "--from0",
            # the staged tree (sync_stage.py) holds no links: in-workspace ones were resolved into it, and
            # without -l / --copy-links rsync skips one rather than follow it
            "--times",
            "--perms",
            "--omit-dir-times",
            "--out-format=%i %l %n",
            *extra,
            f"{root}/",
            f"{target.alias}:{target.code_dir.rstrip('/')}/",
        ]
        listing = b"".join(os.fsencode(f.path) + b"\0" for f in files)
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            out, err = self._communicate(proc, listing)
        except BaseException:
            osutil.end_process(proc)  # rsync removes its temporary file on the node when its sender goes
            raise
        stderr = err.decode(errors="replace").strip().splitlines()
        vanished_only = all(
            "No such file or directory" in line or line.startswith("rsync error:") or "vanished" in line
            for line in stderr
        )
        if proc.returncode != 0 and not (proc.returncode in _RSYNC_VANISHED and vanished_only):
            last = stderr[-1] if stderr else "no output"
            raise UserError(f"rsync to {target.alias} failed (exit {proc.returncode}): {last}")
        count = size = 0
        for line in out.decode(errors="replace").splitlines():
            flags, length, _name = [*line.split(" ", 2), "", ""][:3]
            if flags.startswith("<f") and length.isdigit():  # a file whose data went to the node
                count, size = count + 1, size + int(length)
        return count, size

    def _communicate(self, proc: subprocess.Popen[bytes], data: bytes) -> tuple[bytes, bytes]:
        first: bytes | None = data
        while True:
            try:
                out, err = proc.communicate(first, timeout=0.2)
                return out or b"", err or b""
            except subprocess.TimeoutExpired:
                first = None
            if self._cancel.is_set():
                raise _Cancelled()

    # --- sftp -----------------------------------------------------------------------------------

    def _clients(self, node: str, want: int) -> list[paramiko.SFTPClient]:
        """``want`` SFTP sessions on the node's one SSH connection (kept for the next sync)."""
        clients = [c for c in self._sftp.get(node, []) if not c.sock.closed]
        while len(clients) < want:
            clients.append(self.connection.tunnel(node).open_sftp())
        self._sftp[node] = clients
        return clients

    def _sftp_node(self, target: SyncTarget, files: FileList, forced: set[str]) -> tuple[int, int]:
        """List the node's folders, then send what differs over SFTP_STREAMS sessions at once: a file
        costs a few round trips (open, attributes, close, rename), which one session would wait for in turn."""
        lister = self._clients(target.node, 1)[0]
        by_folder: dict[str, list[LocalFile]] = defaultdict(list)
        for f in files.files:
            by_folder[posixpath.dirname(f.path)].append(f)
        todo: list[tuple[LocalFile, str]] = []
        for folder in sorted(by_folder):
            remote_dir = posixpath.join(target.code_dir, folder) if folder else target.code_dir
            have = self._remote_folder(lister, target.code_dir, folder, files)
            for f in by_folder[folder]:
                name = posixpath.basename(f.path)
                attrs = have.get(name)
                if (
                    attrs is not None
                    and stat.S_ISREG(attrs.st_mode or 0)
                    and attrs.st_size == f.size
                    and attrs.st_mtime == f.mtime
                    and f.path not in forced
                ):
                    continue
                todo.append((f, posixpath.join(remote_dir, name)))
        if not todo:
            return 0, 0
        free: queue.SimpleQueue[paramiko.SFTPClient] = queue.SimpleQueue()
        for client in self._clients(target.node, min(SFTP_STREAMS, len(todo))):
            free.put(client)

        def send(f: LocalFile, final: str) -> int | None:
            if self._cancel.is_set():
                raise _Cancelled()
            client = free.get()
            try:
                return self._upload(target.node, client, files.root, f, final)
            finally:
                free.put(client)

        pool = ThreadPoolExecutor(max_workers=min(SFTP_STREAMS, len(todo)), thread_name_prefix=f"sftp-{target.node}")
        try:  # on a failure the others stop at their next chunk and remove their temporary files
            sent = self._gather([pool.submit(send, f, final) for f, final in todo])
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        done = [n for n in sent if n is not None]
        return len(done), sum(done)

    def _remote_folder(
        self, client: paramiko.SFTPClient, code_dir: str, folder: str, files: FileList
    ) -> dict[str, paramiko.SFTPAttributes]:
        """The node's entries of ``folder`` by name (it is made, with its parents, when missing); our
        temporary files that a dropped connection left behind are removed."""
        path = posixpath.join(code_dir, folder) if folder else code_dir
        try:
            listing = client.listdir_attr(path)
        except FileNotFoundError:
            parts = folder.split("/") if folder else []
            for i in range(len(parts) + 1):
                rel = "/".join(parts[:i])
                here = posixpath.join(code_dir, rel) if rel else code_dir
                with contextlib.suppress(OSError):  # there already (or racing another sync): stat says
                    client.mkdir(here, files.dir_modes.get(rel, 0o755))
                if not stat.S_ISDIR(client.stat(here).st_mode or 0):
                    raise UserError(f"cannot sync {folder}/: {here} on the node is not a folder") from None
            return {}
        now = time.time()
        for attrs in listing:
            if _TEMP_RE.match(attrs.filename) and now - (attrs.st_mtime or 0) > STALE_TEMP_SECONDS:
                with contextlib.suppress(OSError):
                    client.remove(posixpath.join(path, attrs.filename))
        return {a.filename: a for a in listing}

    def _upload(self, node: str, client: paramiko.SFTPClient, root: Path, f: LocalFile, final: str) -> int | None:
        """Send one file under a temporary name, then rename it over ``final``; the bytes sent, or None
        when the file vanished (or became a link out of the workspace) since the list was taken."""
        fd = open_inside(root, f.path)  # checked and opened in one go: a link swapped in is not followed
        if fd is None:
            return None
        src = os.fdopen(fd, "rb")  # closed below, after the temporary file is dealt with
        head, name = posixpath.split(final)
        temp = posixpath.join(head, f".{name}{TEMP_INFIX}{secrets.token_hex(4)}")
        with src:
            st = os.fstat(src.fileno())
            sent = 0
            try:
                with client.open(temp, "wb") as dst:
                    dst.set_pipelined(True)
                    while chunk := src.read(CHUNK):
                        if self._cancel.is_set():
                            raise _Cancelled()
                        dst.write(chunk)
                        sent += len(chunk)
                    dst.chmod(stat.S_IMODE(st.st_mode))
                    dst.utime((int(st.st_atime), int(st.st_mtime)))
                client.posix_rename(temp, final)
            except BaseException:
                try:
                    client.remove(temp)
                except Exception:
                    self._orphans.append((node, temp))
                raise
        return sent

    def _remove_orphans(self) -> None:
        orphans, self._orphans = self._orphans, []
        if orphans:
            self._drop_sftp()
        for node, temp in orphans:
            with contextlib.suppress(Exception):
                self._clients(node, 1)[0].remove(temp)

    # --- --watch ------------------------------------------------------------------------------------

    def watch(
        self, last: FileList, report: Callable[[events.Synced, FileList], None], warn: Callable[[str], None]
    ) -> None:
        """Sync again whenever the file list changes, until Ctrl-C (KeyboardInterrupt) or the job ends
        (JobNotRunningError).  A failed sync is reported through ``warn`` and tried again."""
        changed = threading.Event()
        observer = _observer(self.source, changed)
        if observer is None:
            warn(f"cannot watch {self.source} for changes (inotify): looking every {POLL_SECONDS:g} s instead")
        changed.set()  # a look right away: what changed since ``last`` was taken, before anyone watched
        signature = last.signature()
        job_checked = time.monotonic()
        try:
            while True:
                interrupts.check()
                if time.monotonic() - job_checked > JOB_CHECK_SECONDS:
                    job_checked = time.monotonic()
                    self._stop_if_ended()
                if observer is not None:
                    if not changed.wait(POLL_SECONDS):
                        continue
                    while changed.is_set():  # coalesce a burst (an editor's save, a git checkout)
                        changed.clear()
                        time.sleep(DEBOUNCE_SECONDS)
                else:
                    time.sleep(POLL_SECONDS)
                files = self.collect()
                if files.signature() == signature:
                    continue
                try:
                    synced = self.sync(files)
                except (UserError, OSError, EOFError, paramiko.SSHException) as exc:
                    self._stop_if_ended()
                    warn(f"sync failed, trying again: {reason(exc)}")
                    self._drop_sftp()
                    time.sleep(RETRY_SECONDS)
                    changed.set()
                    continue
                signature = files.signature()
                report(synced, files)
        finally:
            if observer is not None:
                observer.stop()
                observer.join(timeout=5)

    def _stop_if_ended(self) -> None:
        ended = self.connection.ended()
        if ended is not None:
            raise JobNotRunningError(f"job {self.connection.job} is {ended.status}: stopped watching")

    # --- the end ----------------------------------------------------------------------------------

    def _drop_sftp(self) -> None:
        for clients in self._sftp.values():
            for client in clients:
                with contextlib.suppress(Exception):
                    client.close()
        self._sftp.clear()

    def close(self) -> None:
        self._drop_sftp()
        if self._mux_dir is not None:
            base = self._ssh_words()
            for target in self.targets:
                if target.method == SyncMethod.RSYNC:
                    with contextlib.suppress(OSError, subprocess.SubprocessError):
                        subprocess.run(
                            [*base, "-O", "exit", target.alias],
                            stdin=subprocess.DEVNULL,
                            capture_output=True,
                            timeout=10,
                        )
            shutil.rmtree(self._mux_dir, ignore_errors=True)
            self._mux_dir = None
        self.connection.close()


def _observer(source: Path, changed: threading.Event) -> Any:
    """A started watchdog observer that sets ``changed`` on every write below ``source`` (``.git`` aside),
    or None when the tree cannot be watched so."""
    try:
        from watchdog.events import FileSystemEvent, FileSystemEventHandler
        from watchdog.observers import Observer
    except ImportError:
        return None

    def in_git(path: str) -> bool:
        try:
            return ".git" in Path(path).relative_to(source).parts
        except ValueError:
            return False

    class Handler(FileSystemEventHandler):
        def on_any_event(self, event: FileSystemEvent) -> None:
            if event.event_type not in _WRITE_EVENTS:
                return
            paths = [os.fsdecode(p) for p in (event.src_path, getattr(event, "dest_path", "")) if p]
            if paths and all(in_git(p) for p in paths):
                return  # git's own bookkeeping: a commit changes no file of the workspace
            changed.set()

    observer = Observer()
    try:
        observer.schedule(Handler(), str(source), recursive=True)
        observer.start()
    except OSError:
        with contextlib.suppress(Exception):
            observer.stop()
        return None
    return observer
