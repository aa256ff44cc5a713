"""``adopt`` against another local user (issue 29, items 4, 6 and 7), each attack played as ``nobody``.

* item 4: ``adopt JOB`` prepared each node's dir at a predictable ``/tmp/remote-debug-adopt-<job>`` (``mkdir -p``,
  chmod, then an owner check of ``DIR/..``): a link planted there, re-pointed after the check, made root run
  the attacker's bundle.  Played here through a real root shell on this machine (``LocalShell``: the same
  commands the SSM shell gets), the attacker re-pointing its links and trying to swap ours after every step
  that checked the dir;
* item 6: another user's process under one of root's, whose ``exe (deleted)`` path is now a FIFO, hung root's
  ``adopt --list`` for good;
* item 7: on Python 3.14 the interpreter that calls ``sys.remote_exec`` was run by the path the target was
  started from, which its owner (here: the owner of the dir) may replace.  No Python 3.14 here: the swap is
  played on a real process, and the planted file must not run (the real interpreter answers instead).
"""

from __future__ import annotations

import io
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from remote_debug.container.node.adopt import node_dir
from remote_debug.contract import spec
from remote_debug.laptop.adopt import sagemaker_job as adopt
from remote_debug.laptop.aws.ssm_shell import ShellSession, _check_command
from remote_debug.laptop.core.errors import UserError
from tests.helpers.second_user import ATTACKER_PYTHON, as_nobody, needs_second_user, nobody, python_as_nobody

pytestmark = needs_second_user


class LocalShell(ShellSession):
    """The node's root shell, as ``ShellSession`` drives it, on this machine: each command through ``sh -c``
    (its checks and ``put_file`` are ShellSession's own); ``after(command)`` runs between two round trips."""

    def __init__(self, after: Callable[[str], None]) -> None:  # no plugin, no terminal: nothing of the parent's
        self.target = "local-node"
        self.after = after
        self.commands: list[str] = []

    def run_bytes(self, command: str, timeout: float = 60.0) -> tuple[int, bytes]:
        _check_command(command)
        self.commands.append(command)
        proc = subprocess.run(
            ["sh", "-c", command],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            cwd="/",
        )
        self.after(command)
        return proc.returncode, proc.stdout

    def _usable_now(self) -> bool:
        return True

    def close(self) -> None:
        pass


def _package(main: str) -> dict[str, str]:
    return {
        "remote_debug/__init__.py": "",
        "remote_debug/container/__init__.py": "",
        "remote_debug/container/__main__.py": main,
    }


def _tarball(files: dict[str, str]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _bundle_main(log: Path, who: str) -> str:
    """A stand-in for ``python -m remote_debug.container``: notes who ran it and with what, answers as a node."""
    return (
        "import json, os, sys\n"
        f"with open({str(log)!r}, 'a') as fh:\n"
        f"    fh.write({who!r} + ' ' + ' '.join(sys.argv[1:]) + '\\n')\n"
        "if sys.argv[1:3] == ['--adopt-node', '--probe']:\n"
        "    print(json.dumps({'roots': [int(os.environ.get('RD_TEST_ROOT', '1'))], 'ranks': [], 'gdb': None,\n"
        "                      'code_dir': None, 'refusal': None}))\n"
        "elif sys.argv[1:2] == ['--adopt-node']:\n"
        "    print(json.dumps({'already': False, 'ranks': []}))\n"
    )


ATTACKER = r"""
import os, sys
tmp, job, evil = sys.argv[1:4]
for name in sorted(os.listdir(tmp)):
    if not name.startswith("remote-debug-adopt-" + job):
        continue
    path = os.path.join(tmp, name)
    target = evil if name == "remote-debug-adopt-" + job else os.path.join(evil, "algo-1")
    fresh = os.path.join(tmp, ".rd-evil-" + job)
    try:
        os.symlink(target, fresh)
        os.rename(fresh, path)  # our own link: re-pointed; the adopter's dir: refused (sticky /tmp)
    except OSError:
        pass
    finally:
        if os.path.lexists(fresh):
            os.unlink(fresh)
"""


@pytest.fixture
def scene(tmp_path: Path) -> Iterator[dict[str, Path | str]]:
    """The job's name, a root-owned world-readable decoy dir (as /dev/shm is), the attacker's planted tree (a
    bundle under evil/algo-1), its links at the names adopt used or may use, and the log of who ran a bundle."""
    job = f"doors-{secrets.token_hex(4)}"
    log = tmp_path / "ran.log"
    decoy = Path(f"/tmp/rd-decoy-{job}")
    decoy.mkdir(mode=0o755)
    evil = Path(f"/tmp/rd-evil-{job}")
    planted = {f"algo-1/bundle-fp0/{name}": text for name, text in _package(_bundle_main(log, "planted")).items()}
    plant = (
        "import os, sys\n"
        "evil, job, decoy, files = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]\n"
        "for name, text in zip(files[::2], files[1::2]):\n"
        "    os.makedirs(os.path.dirname(os.path.join(evil, name)), exist_ok=True)\n"
        "    open(os.path.join(evil, name), 'w').write(text)\n"
        "os.symlink(decoy, '/tmp/remote-debug-adopt-' + job)\n"  # the old, predictable name
        "os.symlink(os.path.join(evil, 'algo-1'), '/tmp/remote-debug-adopt-' + job + '.algo-1.zzzzzzzz')\n"
        "os.makedirs('/tmp/remote-debug-adopt-' + job + '.algo-1.yyyyyyyy/bundle-fp0', mode=0o700)\n"
    )
    subprocess.run(
        python_as_nobody(plant, str(evil), job, str(decoy), *(x for item in planted.items() for x in item)), check=True
    )
    try:
        yield {"job": job, "log": log, "decoy": decoy, "evil": evil}
    finally:
        for path in Path("/tmp").glob(f"remote-debug-adopt-{job}*"):
            if path.is_symlink() or not path.is_dir():
                path.unlink()
            else:
                shutil.rmtree(path)
        shutil.rmtree(evil, ignore_errors=True)
        shutil.rmtree(decoy, ignore_errors=True)


def test_a_link_at_the_nodes_dir_re_pointed_after_the_check_never_runs_the_attackers_bundle(
    scene: dict[str, Path | str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job, log, decoy, evil = str(scene["job"]), Path(scene["log"]), Path(scene["decoy"]), scene["evil"]

    def attacker(command: str) -> None:
        """After every step that checked the dir's owner, the attacker re-points its links at its own tree
        and tries to put a link in place of the adopter's dir."""
        if "stat" in command or "O_NOFOLLOW" in command:
            subprocess.run(python_as_nobody(ATTACKER, "/tmp", job, str(evil)), check=True)

    root = subprocess.Popen(["sleep", "60"], stdout=subprocess.DEVNULL)  # the training tree's root (its fd 1)
    monkeypatch.setenv("RD_TEST_ROOT", str(root.pid))
    access = adopt.NodeAccess("algo-1", LocalShell(attacker), "")
    try:
        try:
            adopt._prepare(access, job, "fp0", _tarball(_package(_bundle_main(log, "ours"))))
            debug = spec.DebugSpec(
                job_name=job,
                client_public_key="ssh-ed25519 AAAA",
                job_secret=secrets.token_hex(32),
                transport=spec.Transport.SSM,
                options=spec.DebugOptions(),
            )
            adopt._adopt(access, debug)
        except UserError:
            pass  # refused is fine; what ran is the question
        ran = log.read_text().splitlines() if log.exists() else []
        assert not [line for line in ran if line.startswith("planted")], ran
        assert ran[:1] == ["ours --adopt-node --probe"], ran  # and adopting went on with our own bundle
        assert "ours --adopt-node request.json" in ran, ran
        assert oct(decoy.stat().st_mode & 0o777) == oct(0o755)  # nothing chmodded through a link
        made = Path(access.dir)
        assert made.name.startswith(f"remote-debug-adopt-{job}.algo-1.") and not made.is_symlink()
        assert (made.stat().st_uid, made.stat().st_mode & 0o777) == (0, 0o700)
        assert not (made / "daemon.env").exists() and not (made / "request.json").exists()
    finally:
        root.kill()
        root.wait()


def test_a_re_adoption_takes_only_a_real_dir_of_ours(scene: dict[str, Path | str]) -> None:
    """The attacker's link and dir under the names a re-adoption looks for are passed over; our earlier dir
    is found again (its ranks use it)."""
    job = str(scene["job"])
    shell = LocalShell(lambda _command: None)
    first = adopt.NodeAccess("algo-1", shell, "", python=sys.executable)
    code, out = shell.run(node_dir.make_command(sys.executable, job, "algo-1"))
    assert code == 0 and out.startswith("new "), out
    made = out.split()[1]
    code, again = shell.run(node_dir.make_command(sys.executable, job, "algo-1"))
    assert (code, again.split()) == (0, ["old", made])
    first.dir = made
    # a file an earlier step wrote is used only with the content that step sent
    sums = adopt._put(first, "daemon.env", b"A=1\n")
    assert adopt._run_in(first, ". ./daemon.env && echo $A", sums) == (0, "1\n")
    Path(made, "daemon.env").write_text("A=2\n")
    with pytest.raises(UserError, match=r"daemon.env in .* is not the file uploaded; nothing was run"):
        adopt._run_in(first, "echo ran", sums)
    # the guard refuses the dir once it is no longer what we made (here root itself swaps it for a link)
    os.rename(made, made + "-moved")
    os.symlink(made + "-moved", made)
    with pytest.raises(UserError, match=r"^on algo-1: .* is not our private dir"):
        adopt._run_in(first, "echo ran")


def test_the_bundle_root_unpacks_on_a_node_is_owned_by_root_not_by_the_laptops_uid(tmp_path: Path) -> None:
    """The laptop user's uid (here nobody's: we chown the built bundle to it) may be another user's on the node;
    root's tar keeps the archive's owners, and that user could then rewrite the code root and the ranks run."""
    from remote_debug.laptop.aws.enable.bundle import bundle_dir
    from remote_debug.laptop.core.paths import StatePaths

    paths = StatePaths(tmp_path / "state")
    built = bundle_dir(paths)
    for dirpath, dirnames, filenames in os.walk(built):
        for name in [*dirnames, *filenames]:
            os.lchown(os.path.join(dirpath, name), nobody().pw_uid, nobody().pw_gid)
    _fingerprint, tarball = adopt.bundle_tarball(paths)
    (tmp_path / "bundle.tar.gz").write_bytes(tarball)
    (tmp_path / "node").mkdir()
    subprocess.run(["tar", "-xzf", str(tmp_path / "bundle.tar.gz"), "-C", str(tmp_path / "node")], check=True)
    owners = {
        (tmp_path / "node" / dirpath / name).lstat().st_uid
        for dirpath, dirnames, filenames in os.walk(tmp_path / "node")
        for name in [*dirnames, *filenames]
    }
    assert owners == {0}


# --- item 6: a FIFO at another user's exe path --------------------------------------------------------------


@pytest.fixture
def fifo_child(tmp_path: Path) -> Iterator[int]:
    """A root process (not ours: reparented) whose child runs as nobody from nobody's copy of a static
    python3, whose path is then a FIFO: ``/proc/PID/exe`` reads ``.../python3 (deleted)``."""
    home = Path(f"/tmp/rd-fifo-{secrets.token_hex(4)}")
    home.mkdir(mode=0o755)
    os.chown(home, nobody().pw_uid, nobody().pw_gid)
    shutil.copy(ATTACKER_PYTHON, home / "python3")
    os.chown(home / "python3", nobody().pw_uid, nobody().pw_gid)
    pidfile = tmp_path / "parent.pid"
    child = " ".join(as_nobody(str(home / "python3"), "-I", "-S", "-c", '"import time; time.sleep(120)"'))
    subprocess.run(["sh", "-c", f"sh -c 'echo $$ > {pidfile}; {child} & wait' >/dev/null 2>&1 &"], check=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not (pidfile.exists() and pidfile.read_text().strip()):
        time.sleep(0.05)
    parent = int(pidfile.read_text())
    try:
        while time.monotonic() < deadline and not _children(parent):
            time.sleep(0.05)
        (kid,) = _children(parent)
        while time.monotonic() < deadline and "python3" not in os.readlink(f"/proc/{kid}/exe"):
            time.sleep(0.05)  # setpriv has exec'd the copy
        swap = "import os, sys; os.unlink(sys.argv[1]); os.mkfifo(sys.argv[1] + ' (deleted)')"
        subprocess.run(python_as_nobody(swap, str(home / "python3")), check=True)
        assert os.readlink(f"/proc/{kid}/exe") == f"{home}/python3 (deleted)"
        yield kid
    finally:
        for pid in (*_children(parent), parent):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(home, ignore_errors=True)


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def test_a_fifo_at_another_users_exe_path_does_not_hang_the_list(fifo_child: int) -> None:
    code = (
        "import json; from remote_debug.laptop.adopt.candidates import list_candidates; "
        "print(json.dumps([c.pid for c in list_candidates({})]))"
    )
    try:
        listed = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=20, cwd=Path(__file__).parents[2]
        )
    except subprocess.TimeoutExpired:
        pytest.fail("adopt --list hung on another user's FIFO")
    assert listed.returncode == 0, listed.stderr
    assert fifo_child not in [int(p) for p in listed.stdout.strip().strip("[]").split(",") if p.strip()]


# --- item 7: sys.remote_exec's interpreter, by the path the target was started from ------------------------


def test_the_interpreter_swapped_at_the_targets_exe_path_is_not_run(tmp_path: Path) -> None:
    """Root's target runs a copy of python from a dir nobody owns; nobody swaps the file at that path for a
    script.  Python 3.14's way in must run the file the target runs, not that script:
    here the real interpreter (3.11, without ``sys.remote_exec``) answers, and the script never ran."""
    from remote_debug.container.node.adopt import checks, inject

    home = Path(f"/tmp/rd-exe-{secrets.token_hex(4)}")
    home.mkdir(mode=0o755)
    os.chown(home, nobody().pw_uid, nobody().pw_gid)
    exe = home / "python3.14"
    shutil.copy(ATTACKER_PYTHON, exe)
    target = subprocess.Popen([str(exe), "-I", "-S", "-c", "import time; time.sleep(60)"])
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and os.readlink(f"/proc/{target.pid}/exe") != str(exe):
            time.sleep(0.05)
        way = checks.remote_exec_way(target.pid, (3, 14))  # what check_rank answers for a 3.14 rank
        assert way.tool == str(exe)
        planted = '#!/bin/sh\nid -u > "$(dirname "$0")/ran"\n'
        swap = (
            "import os, sys; p = sys.argv[1]; open(p + '.new', 'w').write(sys.argv[2]); "
            "os.chmod(p + '.new', 0o755); os.rename(p + '.new', p)"
        )
        subprocess.run(python_as_nobody(swap, str(exe), planted), check=True)
        assert exe.read_text() == planted
        script = tmp_path / "agent.py"
        script.write_text("pass\n")
        with pytest.raises(inject.InjectError, match=r"sys\.remote_exec into pid \d+ failed: .*remote_exec"):
            inject.queue_with_remote_exec(target.pid, script, way, timeout=20)
        assert not (home / "ran").exists(), "root ran the file planted at the target's exe path"
    finally:
        target.kill()
        target.wait()
        shutil.rmtree(home, ignore_errors=True)


def test_a_fifo_at_a_deleted_executables_path_does_not_hang_adopt_pid(tmp_path: Path) -> None:
    """``adopt --pid`` reads the exported symbols of the rank's executable before it injects.  Root's rank runs
    a python from a dir nobody owns; nobody deletes the file and puts a FIFO at its path, which the maps still
    name.  The symbols come from the file the rank runs, at once and the same as before the swap."""
    home = Path(f"/tmp/rd-elf-{secrets.token_hex(4)}")
    home.mkdir(mode=0o755)
    os.chown(home, nobody().pw_uid, nobody().pw_gid)
    exe = home / "python3"
    shutil.copy(ATTACKER_PYTHON, exe)
    target = subprocess.Popen([str(exe), "-I", "-S", "-c", "import time; time.sleep(60)"])
    code = (
        "import json, sys; from remote_debug.container.node.adopt import elf_symbols; print(json.dumps("
        "elf_symbols.resolve(int(sys.argv[1]), ('Py_AddPendingCall', 'PyRun_SimpleString'), libc_only=('mmap',))))"
    )
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and os.readlink(f"/proc/{target.pid}/exe") != str(exe):
            time.sleep(0.05)
        before = subprocess.run(
            [sys.executable, "-c", code, str(target.pid)],
            capture_output=True,
            text=True,
            timeout=30,
            cwd=Path(__file__).parents[2],
            check=True,
        ).stdout
        swap = "import os, sys; os.unlink(sys.argv[1]); os.mkfifo(sys.argv[1])"
        subprocess.run(python_as_nobody(swap, str(exe)), check=True)
        try:
            after = subprocess.run(
                [sys.executable, "-c", code, str(target.pid)],
                capture_output=True,
                text=True,
                timeout=20,
                cwd=Path(__file__).parents[2],
                check=True,
            ).stdout
        except subprocess.TimeoutExpired:
            pytest.fail("reading the rank's symbols hung on a FIFO at its executable's path")
        assert after == before and before.strip() != "null"
    finally:
        target.kill()
        target.wait()
        shutil.rmtree(home, ignore_errors=True)
