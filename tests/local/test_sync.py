"""``sync``'s engine: the file list and its ignore rules (unit tests), then both methods end to end
against one real 2-node local job (launched with the CLI, shared by the module): what changed arrives,
an unchanged tree sends nothing, ignored files and symlinks out of the workspace never reach a node."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from remote_debug.laptop.core.errors import UserError
from remote_debug.laptop.core.paths import StatePaths
from remote_debug.laptop.iterate.sync import Syncer, SyncMethod
from remote_debug.laptop.iterate.sync_files import collect
from tests.conftest import cleanup_jobs

JOB = "syncpair"
NODES = ("algo-1", "algo-2")
SLEEPER = "import time\nfor i in range(6000):\n    time.sleep(0.1)\n"
METHODS = [
    pytest.param(SyncMethod.RSYNC, marks=pytest.mark.skipif(shutil.which("rsync") is None, reason="needs rsync")),
    SyncMethod.SFTP,
]


def tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def paths_of(root: Path, excludes: tuple[str, ...] = ()) -> list[str]:
    return [f.path for f in collect(root, excludes).files]


# --- the file list ---------------------------------------------------------------------------------------


def test_gitignore_rules_nested_files_negation_and_ours(tmp_path: Path) -> None:
    root = tree(
        tmp_path / "ws",
        {
            ".gitignore": "*.log\n!keep.log\nbuild/\n/data/\n!build/rescued.txt\n*.tmp\n",
            ".remote-debugignore": "*.ckpt\n!wanted.tmp\n",
            "train.py": "",
            "keep.log": "",
            "run.log": "",
            "model.ckpt": "",
            "wanted.tmp": "",
            "other.tmp": "",
            "build/out.o": "",
            "build/rescued.txt": "",  # nothing below an ignored folder comes back (git)
            "data/big.bin": "",
            "pkg/data/small.bin": "",  # /data/ is anchored to its own folder
            "pkg/.gitignore": "!debug.log\nlocal.cfg\n",  # deeper file wins over the root's
            "pkg/debug.log": "",
            "pkg/other.log": "",
            "pkg/local.cfg": "",
            "pkg/mod.py": "",
            "pkg/sub/local.cfg": "",  # a pattern without a slash matches at any depth below its file
            "secret.txt": "",
            "pkg/notes.csv": "",
            ".git/config": "",
            "pkg/.git": "gitdir: elsewhere",  # always skipped: a repo or a worktree's link
        },
    )
    assert paths_of(root) == [
        ".gitignore",
        ".remote-debugignore",
        "keep.log",
        "pkg/.gitignore",
        "pkg/data/small.bin",
        "pkg/debug.log",
        "pkg/mod.py",
        "pkg/notes.csv",
        "secret.txt",
        "train.py",
        "wanted.tmp",
    ]
    # --exclude: over every file's rules (pkg/.gitignore cannot bring debug.log back)
    assert paths_of(root, ("secret.txt", "*.csv", "debug.log")) == [
        ".gitignore",
        ".remote-debugignore",
        "keep.log",
        "pkg/.gitignore",
        "pkg/data/small.bin",
        "pkg/mod.py",
        "train.py",
        "wanted.tmp",
    ]


def test_list_holds_size_mtime_and_mode_and_skips_what_is_not_a_file(tmp_path: Path) -> None:
    root = tree(tmp_path / "ws", {"run.sh": "echo hi\n"})
    (root / "run.sh").chmod(0o750)
    os.utime(root / "run.sh", (1_700_000_000.7, 1_700_000_000.7))
    os.mkfifo(root / "pipe")  # opening it would block the sync forever
    (f,) = collect(root).files
    assert (f.path, f.size, f.mtime, f.mode) == ("run.sh", 8, 1_700_000_000, 0o750)


def test_symlinks_stay_inside_the_workspace(tmp_path: Path) -> None:
    outside = tree(tmp_path / "outside", {"id_x": "PRIVATE KEY", "dir/also": "x"})
    root = tree(tmp_path / "ws", {"real.py": "print(1)\n", "pkg/mod.py": "", "pkg/deep/x.py": ""})
    (root / "alias.py").symlink_to("real.py")  # inside: sent as the file it points to
    (root / "pkgalias").symlink_to("pkg")  # a folder inside: its files under the link's name
    (root / "secret").symlink_to(outside / "id_x")  # the attacker's
    (root / "keys").symlink_to(outside / "dir")
    (root / "chain").symlink_to("secret")  # inside by name, outside in the end
    (root / "dotdot").symlink_to("../outside/id_x")
    (root / "pkg" / "deep" / "up").symlink_to("../..")  # back up its own path: would never end
    (root / "dangling").symlink_to("nowhere")
    listed = collect(root)
    assert [f.path for f in listed.files] == [
        "alias.py",
        "pkg/deep/x.py",
        "pkg/mod.py",
        "pkgalias/deep/x.py",
        "pkgalias/mod.py",
        "real.py",
    ]
    assert next(f for f in listed.files if f.path == "alias.py").size == len("print(1)\n")
    assert sorted(listed.leaving_links) == ["chain", "dotdot", "keys", "secret"]


def test_source_that_is_no_folder_or_a_bad_pattern_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="is not a folder"):
        collect(tmp_path / "missing")
    with pytest.raises(UserError, match="bad ignore pattern in --exclude"):
        collect(tmp_path, ("ok/", "!"))
    # in a file, git skips a line it cannot read, and so do we
    tree(tmp_path / "ws", {".gitignore": "!\n*.log\nbad\\\n", "a.log": "", "a.py": "", "bad\\": ""})
    assert paths_of(tmp_path / "ws") == [".gitignore", "a.py", "bad\\"]


# --- end to end: one real 2-node job ---------------------------------------------------------------------


@dataclass
class Job:
    name: str
    project: Path
    home: Path
    paths: StatePaths

    def code(self, node: str) -> Path:
        return self.paths.job_dir(self.name) / "nodes" / node / "code"

    def on_node(self, node: str, rel: str) -> str | None:
        path = self.code(node) / rel
        return path.read_text() if path.exists() else None


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "remote_debug", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ),
    )


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Job]:
    if not Path("/usr/sbin/sshd").exists():
        pytest.skip("needs OpenSSH's sshd")
    base = tmp_path_factory.mktemp("sync")
    home = base / "home"
    home.mkdir()
    project = tree(base / "project", {"sleeper.py": SLEEPER})
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(home))
        for name in list(os.environ):
            if name.startswith("REMOTE_DEBUG_"):
                mp.delenv(name)
        paths = StatePaths.default()
        try:
            launched = cli(
                "launch",
                "--local",
                "--nodes",
                "2",
                "--name",
                JOB,
                "--source-dir",
                str(project),
                "--",
                "python",
                "sleeper.py",
            )
            assert launched.returncode == 0, launched.stderr
            yield Job(JOB, project, home, paths)
        finally:
            cli("stop", JOB, timeout=60)
            cleanup_jobs(paths)


def sync(job: Job, method: SyncMethod, **options: object) -> tuple[int, int, list[tuple[str, str, int, int]]]:
    """(files, bytes, per node (node, method, files, bytes)) of one sync in a fresh Syncer."""
    with Syncer.open(job.name, method=method, timeout=60, **options) as syncer:  # type: ignore[arg-type]
        event = syncer.sync()
    assert event.source == str(job.project)  # the job's own source dir, by default
    return event.files, event.bytes, [(n.node, n.method, n.files, n.bytes) for n in event.nodes]


@pytest.mark.parametrize("method", METHODS)
def test_changes_arrive_and_an_unchanged_tree_sends_nothing(job: Job, method: SyncMethod) -> None:
    folder = f"m_{method}"
    tree(job.project, {f"{folder}/a.py": "A = 1\n", f"{folder}/deep/er/b.py": "B = 22\n"})
    files, size, nodes = sync(job, method)
    assert (files, size) == (4, 2 * (6 + 7))
    assert nodes == [(n, str(method), 2, 13) for n in NODES]
    for node in NODES:
        assert job.on_node(node, f"{folder}/deep/er/b.py") == "B = 22\n"

    assert sync(job, method)[:2] == (0, 0)  # nothing changed: no file data at all

    (job.project / folder / "a.py").write_text("A = 'changed'\n")
    files, size, nodes = sync(job, method)
    assert (files, size) == (2, 2 * 14)
    for node in NODES:
        assert job.on_node(node, f"{folder}/a.py") == "A = 'changed'\n"
        assert not [p.name for p in (job.code(node) / folder).iterdir() if ".rd-sync-" in p.name]
    # the other method agrees that the node is current: both compare the same size and mtime
    other = SyncMethod.SFTP if method == SyncMethod.RSYNC else SyncMethod.RSYNC
    if shutil.which("rsync"):
        assert sync(job, other)[:2] == (0, 0)


@pytest.mark.parametrize("method", METHODS)
def test_rewrite_in_the_same_second_with_the_same_size_is_sent(job: Job, method: SyncMethod) -> None:
    """A quick check of size + whole-second mtime (rsync's) misses it; a Syncer that sent the old one does not."""
    path = job.project / f"same_{method}.py"
    path.write_text("X = 1\n")
    os.utime(path, ns=(1_700_000_000_100_000_000, 1_700_000_000_100_000_000))
    with Syncer.open(job.name, method=method) as syncer:
        syncer.sync()
        path.write_text("X = 2\n")
        os.utime(path, ns=(1_700_000_000_900_000_000, 1_700_000_000_900_000_000))
        assert syncer.sync().files == 2
    assert [job.on_node(n, path.name) for n in NODES] == ["X = 2\n"] * 2


@pytest.mark.parametrize("method", METHODS)
def test_ignored_files_never_reach_a_node(job: Job, method: SyncMethod) -> None:
    folder = f"ign_{method}"
    tree(
        job.project,
        {
            f"{folder}/.gitignore": "*.log\nout/\n",
            f"{folder}/.remote-debugignore": "*.ckpt\n",
            f"{folder}/code.py": "",
            f"{folder}/run.log": "",
            f"{folder}/out/x.bin": "",
            f"{folder}/m.ckpt": "",
            f"{folder}/secret.env": "",
        },
    )
    sync(job, method, excludes=["secret.env"])
    for node in NODES:
        sent = sorted(str(p.relative_to(job.code(node) / folder)) for p in (job.code(node) / folder).rglob("*"))
        assert sent == [".gitignore", ".remote-debugignore", "code.py"]


@pytest.mark.parametrize("method", METHODS)
def test_a_symlink_to_a_private_key_does_not_deliver_the_key(job: Job, method: SyncMethod) -> None:
    """The attacker's workspace: ``secret -> ~/.ssh/id_x`` (and the whole ~/.ssh behind a folder link)."""
    secret = f"-----BEGIN OPENSSH PRIVATE KEY----- {method} {os.urandom(8).hex()}"
    ssh_dir = job.home / ".ssh"
    ssh_dir.mkdir(mode=0o700, exist_ok=True)
    (ssh_dir / "id_x").write_text(secret)
    folder = job.project / f"evil_{method}"
    folder.mkdir()
    (folder / "secret").symlink_to(ssh_dir / "id_x")
    (folder / "sshdir").symlink_to(ssh_dir)
    (folder / "chain").symlink_to("secret")
    (folder / "fine.py").write_text("ok\n")
    (folder / "alias.py").symlink_to("fine.py")  # links inside the workspace: sent as what they point to
    tree(folder, {"inner/x.py": "x\n"})
    (folder / "innerlink").symlink_to("inner")
    with Syncer.open(job.name, method=method) as syncer:
        listed = syncer.collect()
        syncer.sync(listed)
    assert {f"evil_{method}/{n}" for n in ("secret", "sshdir", "chain")} <= set(listed.leaving_links)
    for node in NODES:
        assert job.on_node(node, f"evil_{method}/fine.py") == "ok\n"
        for rel, text in (("alias.py", "ok\n"), ("innerlink/x.py", "x\n")):
            copy = job.code(node) / f"evil_{method}" / rel
            assert not copy.is_symlink() and not copy.parent.is_symlink() and copy.read_text() == text
        for path in job.code(node).rglob("*"):
            if path.is_file() and not path.is_symlink():  # the launch's own copy keeps links as links
                assert secret.encode() not in path.read_bytes(), path


def test_one_node_only_and_the_bytes_seen_through_ssh(job: Job) -> None:
    (job.project / "only2.txt").write_text("for algo-2\n")
    files, _, nodes = sync(job, SyncMethod.AUTO, nodes=["algo-2"])
    assert files == 1 and [n[0] for n in nodes] == ["algo-2"]
    assert job.on_node("algo-1", "only2.txt") is None
    seen = cli("ssh", JOB, "--node", "algo-2", "--", "cat", "only2.txt")  # in the code dir, as the job sees it
    assert (seen.returncode, seen.stdout) == (0, "for algo-2\n"), seen.stderr


def test_stale_temporary_files_of_a_dropped_upload_are_removed(job: Job) -> None:
    """A connection that died mid-upload leaves its temporary file; the next sync of that folder removes
    it once nobody has written to it for a while."""
    (job.project / "stale").mkdir()
    (job.project / "stale" / "a.py").write_text("a\n")
    sync(job, SyncMethod.SFTP)
    left = job.code("algo-1") / "stale" / ".a.py.rd-sync-0123abcd"
    left.write_text("half")
    old = time.time() - 3600
    os.utime(left, (old, old))
    fresh = job.code("algo-1") / "stale" / ".a.py.rd-sync-fedc3210"  # maybe another sync's, right now
    fresh.write_text("half")
    (job.project / "stale" / "b.py").write_text("b\n")
    sync(job, SyncMethod.SFTP)
    assert not left.exists() and fresh.exists()
