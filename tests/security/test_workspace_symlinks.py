"""The files we edit inside a user's workspace are never read or written through a symlink (issue 13,
item 8).

A cloned repository decides what ``.vscode/launch.json`` or ``.idea/runConfigurations/<job>.xml``
are.  A link there to ``~/somewhere/secret`` used to be read (launch.json is edited in place, JSONC
preserved) and its content written back into the workspace, next to our entries - where the next
``git commit`` publishes it; a linked folder sent our writes elsewhere.  Each attack here: a link at
the file or at one of its folders.  Each time: a one-line UserError (exit 2 in the CLI), the link
and what it points at unchanged, no temp file left, and the secret's bytes in nothing we wrote.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from remote_debug.laptop.core.errors import UserError
from remote_debug.laptop.core.paths import StatePaths
from remote_debug.laptop.ide import pycharm_setup as pycharm
from remote_debug.laptop.ide import vscode_launch
from remote_debug.laptop.iterate.sync import Syncer, SyncMethod
from remote_debug.laptop.iterate.sync_files import open_inside
from tests.cli.test_cli import cli
from tests.helpers.jobs import launch_job

JOB = "train-42"


def _secret() -> bytes:
    return f"rd-secret-{secrets.token_hex(16)}".encode()


def _snapshot(root: Path) -> dict[str, tuple[str, bytes]]:
    """Every entry under ``root`` without following links: ("link", target) / ("file", bytes) / ("dir", b"")."""
    out: dict[str, tuple[str, bytes]] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            key = str(path.relative_to(root))
            if path.is_symlink():
                out[key] = ("link", os.readlink(path).encode())
            elif path.is_dir():
                out[key] = ("dir", b"")
            else:
                out[key] = ("file", path.read_bytes())
    return out


def _leaks(secret: bytes, *roots: Path) -> list[str]:
    """Regular files under ``roots`` (links not followed) holding ``secret``."""
    return [
        name
        for root in roots
        if root.exists()
        for name, (kind, data) in _snapshot(root).items()
        if kind == "file" and secret in data
    ]


def _check_untouched(before: dict[str, tuple[str, bytes]], *roots: Path) -> None:
    after: dict[str, tuple[str, bytes]] = {}
    for root in roots:
        after.update({f"{root}/{k}": v for k, v in _snapshot(root).items()})
    assert after == before
    assert not [k for k in after if k.endswith(".tmp")]  # no partial file anywhere


def _before(*roots: Path) -> dict[str, tuple[str, bytes]]:
    out: dict[str, tuple[str, bytes]] = {}
    for root in roots:
        out.update({f"{root}/{k}": v for k, v in _snapshot(root).items()})
    return out


def _targets(workspace: Path) -> list[vscode_launch.RankTarget]:
    return [
        vscode_launch.RankTarget(JOB, rank, "algo-1", "127.0.0.1", 40000 + rank, str(workspace), "/opt/ml/code")
        for rank in range(2)
    ]


def _one_line_refusal(exc: BaseException, path: Path) -> str:
    message = str(exc)
    assert isinstance(exc, UserError)  # the CLI prints it as one line and exits 2
    assert "\n" not in message and message.startswith(f"{path}: ")
    assert "symbolic link" in message
    return message


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path, StatePaths]:
    """(workspace, a folder outside it - "~/somewhere" -, our state dir)."""
    workspace, outside = tmp_path / "repo", tmp_path / "somewhere"
    workspace.mkdir()
    outside.mkdir()
    return workspace, outside, StatePaths(tmp_path / "state")


def test_launch_json_linked_to_a_secret_is_refused(layout: tuple[Path, Path, StatePaths]) -> None:
    """Attack: ``.vscode/launch.json -> ~/somewhere/secret``, the secret being valid JSON (so the
    JSONC editor would happily merge our entries into it and write the result into the repo)."""
    workspace, outside, paths = layout
    secret = _secret()
    (outside / "secret").write_bytes(b'{"configurations": [], "token": "' + secret + b'"}\n')
    (workspace / ".vscode").mkdir()
    (workspace / ".vscode" / "launch.json").symlink_to(outside / "secret")
    before = _before(workspace, outside)
    with pytest.raises(UserError) as raised:
        vscode_launch.update_launch_json(workspace, JOB, _targets(workspace), paths=paths)
    message = _one_line_refusal(raised.value, workspace / ".vscode" / "launch.json")
    assert "--no-launch-json" in message
    with pytest.raises(UserError):  # and taking "our" entries out does not go through it either
        vscode_launch.remove_job_configs(workspace, JOB, paths=paths)
    _check_untouched(before, workspace, outside)
    assert _leaks(secret, workspace, paths.root) == []
    assert secret not in message.encode()


def test_a_linked_vscode_folder_is_refused(layout: tuple[Path, Path, StatePaths]) -> None:
    """Attack: ``.vscode -> ~/somewhere`` (a folder holding a JSON secret named launch.json): our
    edit would read it and write into that folder, outside the workspace."""
    workspace, outside, paths = layout
    secret = _secret()
    (outside / "launch.json").write_bytes(b'{"version": "0.2.0", "configurations": [], "key": "' + secret + b'"}')
    (workspace / ".vscode").symlink_to(outside, target_is_directory=True)
    before = _before(workspace, outside)
    with pytest.raises(UserError) as raised:
        vscode_launch.update_launch_json(workspace, JOB, _targets(workspace), paths=paths)
    _one_line_refusal(raised.value, workspace / ".vscode")
    _check_untouched(before, workspace, outside)
    assert _leaks(secret, workspace, paths.root) == []


def test_a_dangling_vscode_link_is_refused_and_nothing_is_created_where_it_points(
    layout: tuple[Path, Path, StatePaths],
) -> None:
    """Attack: ``.vscode -> ~/somewhere/new`` (not there yet): nothing may be created through it."""
    workspace, outside, paths = layout
    (workspace / ".vscode").symlink_to(outside / "new", target_is_directory=True)
    before = _before(workspace, outside)
    with pytest.raises(UserError) as raised:
        vscode_launch.update_launch_json(workspace, JOB, _targets(workspace), paths=paths)
    _one_line_refusal(raised.value, workspace / ".vscode")
    _check_untouched(before, workspace, outside)


def test_a_plain_launch_json_is_still_edited(layout: tuple[Path, Path, StatePaths]) -> None:
    """Control: without links, the same call writes the entries (the refusals are not "always fail")."""
    workspace, _, paths = layout
    path = vscode_launch.update_launch_json(workspace, JOB, _targets(workspace), paths=paths)
    assert path == workspace / ".vscode" / "launch.json" and not path.is_symlink()
    assert b"remote-debug: train-42" in path.read_bytes()
    assert vscode_launch.remove_job_configs(workspace, JOB, paths=paths)
    assert not (workspace / ".vscode").exists()  # we made it, we took it away again


SECRET_XML = (
    b'<component name="ProjectRunConfigurationManager"><configuration name="%s">'
    b'<option name="PORT" value="31337" /></configuration></component>\n'
)


@pytest.mark.parametrize("linked", [".idea", ".idea/runConfigurations", f".idea/runConfigurations/{JOB}.xml"])
def test_pycharm_run_config_is_never_written_through_a_link(layout: tuple[Path, Path, StatePaths], linked: str) -> None:
    """Attack: a link at ``.idea``, ``.idea/runConfigurations`` or the run configuration itself, to a
    place outside the workspace that already holds a file of that name (with a secret in it)."""
    workspace, outside, _ = layout
    secret = _secret()
    rel = Path(".idea") / "runConfigurations" / f"{JOB}.xml"
    link = workspace / linked
    below = rel.relative_to(linked)  # what lies under the link's target
    target = outside / "target"
    victim = target / below if str(below) != "." else target
    victim.parent.mkdir(parents=True, exist_ok=True)
    victim.write_bytes(SECRET_XML % secret)
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target, target_is_directory=victim != target)
    before = _before(workspace, outside)
    with pytest.raises(UserError) as raised:
        pycharm.write_run_config(workspace, JOB, 23456)
    _one_line_refusal(raised.value, link)
    assert pycharm.existing_port(workspace, JOB) is None  # nor is the linked file's port read back
    _check_untouched(before, workspace, outside)
    assert _leaks(secret, workspace) == []


def test_a_plain_pycharm_run_config_is_still_written(layout: tuple[Path, Path, StatePaths]) -> None:
    workspace, _, _ = layout
    path = pycharm.write_run_config(workspace, JOB, 23456)
    assert path == workspace / ".idea" / "runConfigurations" / f"{JOB}.xml"
    assert pycharm.existing_port(workspace, JOB) == 23456


def test_attach_with_a_linked_idea_folder_exits_2_before_any_tunnel(home: Path, tmp_path: Path) -> None:
    """The CLI path: ``remote-debug attach JOB --ide pycharm`` in a repository whose ``.idea`` is a link
    refuses with one line and exit 2 (the run configuration is written before any tunnel)."""
    project, workspace, outside = tmp_path / "project", tmp_path / "repo", tmp_path / "somewhere"
    for d in (project, workspace, outside):
        d.mkdir()
    (project / "train.py").write_text("import time\ntime.sleep(60)\n")
    (workspace / ".idea").symlink_to(outside, target_is_directory=True)
    job = launch_job("symlinked-idea", project, wait_seconds=0)
    proc = cli("attach", job.name, "--ide", "pycharm", "--pycharm-build", "any", "--workspace", str(workspace))
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("remote-debug: error: ")]
    assert len(errors) == 1 and errors[0].startswith(f"remote-debug: error: {workspace / '.idea'}: is a symbolic link;")
    assert "never through a link" in errors[0]
    assert list(outside.iterdir()) == [] and (workspace / ".idea").is_symlink()


# --- sync: a file or folder swapped for a link while a sync runs (issue 29, item 7) -------------------
#
# The list is taken first, the files are read after: an attacker who can write in the workspace (a build
# step, a checkout of a hostile branch) swaps ``public.txt`` for a link to a secret, or a listed folder for a
# link to ~/.ssh, in between.  Each way of sending must read only what is still the listed regular file.

SYNC_METHODS = [
    pytest.param(SyncMethod.RSYNC, marks=pytest.mark.skipif(shutil.which("rsync") is None, reason="needs rsync")),
    SyncMethod.SFTP,
]


def _sync_setup(tmp_path: Path, name: str) -> tuple[Path, Path, bytes]:
    """(the job's workspace, a folder outside it holding the secret as ``secret`` and ``sub/id_x``, the secret)."""
    if not Path("/usr/sbin/sshd").exists():
        pytest.skip("needs OpenSSH's sshd")
    workspace, outside = tmp_path / "work", tmp_path / "dotssh"
    (workspace / "sub").mkdir(parents=True)
    outside.mkdir()
    (workspace / "train.py").write_text("import time\ntime.sleep(120)\n")
    launch_job(name, workspace, wait_seconds=0)
    secret = _secret()
    (outside / "secret").write_bytes(secret)
    (outside / "id_x").write_bytes(secret)
    # created after the launch (whose own copy would hold them): what this sync has to send
    (workspace / "public.txt").write_bytes(b"public, same size as nothing in particular\n")
    (workspace / "sub" / "id_x").write_bytes(b"a decoy key file\n")
    (workspace / "fine.py").write_text("ok\n")
    return workspace, outside, secret


def _swap(workspace: Path, outside: Path) -> None:
    """The attacker's move: the listed file and the listed folder become links out of the workspace."""
    (workspace / "public.txt").unlink()
    (workspace / "public.txt").symlink_to(outside / "secret")
    shutil.rmtree(workspace / "sub")
    (workspace / "sub").symlink_to(outside, target_is_directory=True)


def _node_files(name: str) -> Path:
    return StatePaths.default().job_dir(name) / "nodes"


@pytest.mark.parametrize("method", SYNC_METHODS)
def test_sync_sends_no_secret_when_files_are_swapped_for_links_after_the_listing(
    home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    method: SyncMethod,
) -> None:
    name = f"swap-after-list-{method}"
    workspace, outside, secret = _sync_setup(tmp_path, name)
    listed: list[str] = []
    collect = Syncer.collect

    def collect_then_swap(self: Syncer) -> object:
        files = collect(self)
        listed.extend(f.path for f in files.files)
        _swap(workspace, outside)  # between the listing and the reads
        return files

    monkeypatch.setattr(Syncer, "collect", collect_then_swap)
    with Syncer.open(name, method=method, timeout=60) as syncer:
        syncer.sync()
    assert {"public.txt", "sub/id_x", "fine.py"} <= set(listed)  # the attack's precondition: listed as files
    nodes = _node_files(name)
    assert [p.read_text() for p in nodes.glob("*/code/fine.py")] == ["ok\n"]  # the sync did run
    assert _leaks(secret, nodes) == []


@pytest.mark.parametrize("method", SYNC_METHODS)
def test_sync_sends_no_secret_when_a_file_is_swapped_between_the_check_and_the_read(
    home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    method: SyncMethod,
) -> None:
    """The swap lands right after the sender resolved the file's path (its check), before it opens it."""
    name = f"swap-after-check-{method}"
    workspace, outside, secret = _sync_setup(tmp_path, name)
    target = os.path.join(workspace, "public.txt")
    realpath: Callable[..., str] = os.path.realpath
    swapped: list[str] = []

    def check_then_swap(path: object, *args: object, **kwargs: object) -> str:
        resolved = realpath(path, *args, **kwargs)
        if str(path) == target and not swapped:
            (workspace / "public.txt").unlink()
            (workspace / "public.txt").symlink_to(outside / "secret")
            swapped.append(resolved)
        return resolved

    with Syncer.open(name, method=method, timeout=60) as syncer, monkeypatch.context() as patch:
        patch.setattr(os.path, "realpath", check_then_swap)
        syncer.sync()
    # the sender checked this very file right before reading it (rsync used to read it unchecked, by path)
    assert swapped, "the file was read without a check at the time of the read"
    nodes = _node_files(name)
    assert [p.read_text() for p in nodes.glob("*/code/fine.py")] == ["ok\n"]
    assert _leaks(secret, nodes) == []


def test_open_inside_opens_only_a_regular_file_reached_without_a_link_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The primitive both methods read through, without a job: in-workspace links are followed (the list
    sends them as what they point to); a link out, a FIFO, and a folder swapped after the check are not."""
    workspace, outside = tmp_path / "work", tmp_path / "out"
    (workspace / "d").mkdir(parents=True)
    outside.mkdir()
    (outside / "f").write_bytes(b"secret")
    (workspace / "d" / "f").write_bytes(b"mine")
    (workspace / "alias").symlink_to("d/f")
    (workspace / "out").symlink_to(outside / "f")
    os.mkfifo(workspace / "fifo")

    def read(rel: str) -> bytes | None:
        fd = open_inside(workspace, rel)
        if fd is None:
            return None
        with os.fdopen(fd, "rb") as fh:
            return fh.read()

    assert (read("d/f"), read("alias"), read("out"), read("fifo"), read("gone")) == (b"mine", b"mine", None, None, None)
    realpath = os.path.realpath

    def swap_after_check(path: str | Path) -> str:  # the folder becomes a link out between the check and the open
        resolved = realpath(path)
        if str(path).endswith("d/f"):
            shutil.rmtree(workspace / "d")
            (workspace / "d").symlink_to(outside, target_is_directory=True)
        return resolved

    monkeypatch.setattr(os.path, "realpath", swap_after_check)
    assert read("d/f") is None
