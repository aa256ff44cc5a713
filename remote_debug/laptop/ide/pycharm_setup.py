"""PyCharm on the laptop: which build is installed, what the job must install, and the run configuration.

* **Build detection** reads ``product-info.json`` (``buildNumber``) or ``build.txt`` (``PY-241.14494.241``)
  of standard installs on Linux, macOS and Windows, JetBrains Toolbox (1.x ``apps/<id>/ch-0/<build>``
  and 2.x flat layouts) and snaps.  Several installs: the newest build wins and the others are
  reported; ``--pycharm-build`` overrides everything.
* **Version policy**: the job needs ``pydevd-pycharm~=<build>`` (``pycharm_spec.requirement``).
  Local jobs run in this interpreter, so we check what is installed here; SageMaker jobs get the
  requirement string (:func:`job_requirement`) added to their dependencies.
* **Run configuration**: ``.idea/runConfigurations/<job>.xml``, a "Python Debug Server" on the
  port the reverse tunnels lead to.  Written with ElementTree (no string templates), atomically, and
  never through a symlink (``.idea``, ``runConfigurations`` or the file): the repository decides those.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from remote_debug.contract import spec
from remote_debug.contract.pycharm_spec import PYDEVD_DIST, normalize_build, requirement, satisfies
from remote_debug.laptop.core.errors import BadInputError, UserError
from remote_debug.oskit import osutil

DEFAULT_IDE_PORT = 12345  # what PyCharm's docs and most hand-made setups use; --pycharm-port changes it
ANY_BUILD = "any"  # --pycharm-build any: no version check (headless stand-in or test debug servers)
ENV_PYCHARM_HOME = "REMOTE_DEBUG_PYCHARM_HOME"  # an install dir to use instead of searching
PRODUCT_CODES = ("PY", "PC", "PCA", "PCC", "PCP")  # Professional, Community, and older editions
CONFIG_TYPE = "PyRemoteDebugConfigurationType"
CONFIG_FACTORY = "Python Remote Debug"


@dataclass(frozen=True)
class Install:
    path: Path  # the install dir (a macOS .app bundle, or the dir holding bin/ and lib/)
    build: str  # "241.14494.241"
    version: str  # marketing version "2024.1" when known, else ""
    product: str  # "PY", "PC", ...

    def describe(self) -> str:
        name = "PyCharm" + (" Community" if self.product == "PC" else "")
        return f"{name} {self.version or '?'} (build {self.build}) at {self.path}"


def _build_key(build: str) -> tuple[int, ...]:
    return tuple(int(p) for p in build.split("."))


def read_install(path: Path) -> Install | None:
    """The PyCharm build installed at ``path`` (install dir or .app bundle), or None if it is not one."""
    roots = [path, path / "Contents" / "Resources"]  # macOS keeps both files in Contents/Resources
    for root in roots:
        info = root / "product-info.json"
        try:
            data = json.loads(info.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict):
            continue
        product = str(data.get("productCode", ""))
        if product not in PRODUCT_CODES:
            return None  # another JetBrains IDE (IntelliJ, DataSpell...) in a searched dir
        try:
            build = normalize_build(str(data.get("buildNumber", "")))
        except spec.ContractError:
            continue  # a snapshot build: maybe build.txt says more
        return Install(path, build, str(data.get("version", "")), product)
    for root in roots:
        try:
            text = (root / "build.txt").read_text(encoding="utf-8").strip()
        except OSError:
            continue
        product, sep, _ = text.partition("-")
        if not sep or product not in PRODUCT_CODES:
            return None
        try:
            return Install(path, normalize_build(text), "", product)
        except spec.ContractError:
            return None
    return None


def candidate_dirs(system: str, home: Path, env: Mapping[str, str], root: Path = Path("/")) -> list[Path]:
    """Where PyCharm installs live on ``system`` ("linux", "darwin", "win32").

    ``root`` prefixes absolute locations so tests can fabricate them; Windows locations come from
    the environment (``ProgramFiles``, ``LOCALAPPDATA``), as they do on Windows.
    """
    out: list[Path] = []

    def add(base: Path, *patterns: str) -> None:
        for pattern in patterns:
            try:
                out.extend(sorted(base.glob(pattern)))
            except OSError:
                continue

    explicit = env.get(ENV_PYCHARM_HOME)
    if explicit:
        out.append(Path(explicit))
    if system == "darwin":
        for apps in (root / "Applications", home / "Applications"):  # Toolbox 2.x installs to ~/Applications
            add(apps, "PyCharm*.app")
        toolbox = home / "Library" / "Application Support" / "JetBrains" / "Toolbox" / "apps"
        add(toolbox, "PyCharm-*/ch-*/*/PyCharm*.app", "pycharm*/PyCharm*.app")
    elif system == "win32":
        for var in ("ProgramFiles", "ProgramW6432", "ProgramFiles(x86)"):
            if env.get(var):
                add(Path(env[var]) / "JetBrains", "PyCharm*")
        local = env.get("LOCALAPPDATA")
        if local:
            add(Path(local) / "Programs", "PyCharm*")  # Toolbox 2.x
            add(Path(local) / "JetBrains" / "Toolbox" / "apps", "PyCharm-*/ch-*/*", "pycharm*")
    else:
        for base in (root / "opt", root / "opt" / "jetbrains", root / "usr" / "share", root / "usr" / "local"):
            add(base, "pycharm*", "PyCharm*")
        add(root / "snap", "pycharm*/current")
        add(home, "pycharm*", "PyCharm*", "Applications/pycharm*", ".local/pycharm*")
        toolbox = home / ".local" / "share" / "JetBrains" / "Toolbox" / "apps"
        add(toolbox, "PyCharm-*/ch-*/*", "pycharm*")
    seen: set[Path] = set()
    unique = []
    for p in out:
        if p not in seen and p.is_dir():
            seen.add(p)
            unique.append(p)
    return unique


def find_installs(
    system: str | None = None, home: Path | None = None, env: Mapping[str, str] | None = None, root: Path = Path("/")
) -> list[Install]:
    """Every PyCharm install found, newest build first."""
    system = system or ("darwin" if sys.platform == "darwin" else "win32" if sys.platform == "win32" else "linux")
    installs = [
        i
        for d in candidate_dirs(system, home or Path.home(), os.environ if env is None else env, root)
        if (i := read_install(d)) is not None
    ]
    return sorted(installs, key=lambda i: _build_key(i.build), reverse=True)


@dataclass(frozen=True)
class BuildChoice:
    build: str  # normalized, or ANY_BUILD
    source: str  # "--pycharm-build", or the install it came from
    others: tuple[str, ...] = ()  # other installs found, for the user's information

    @property
    def checked(self) -> bool:
        return self.build != ANY_BUILD


def choose_build(explicit: str | None, installs: Iterable[Install] | None = None) -> BuildChoice:
    """The PyCharm build to match: ``explicit`` (``--pycharm-build``), else the newest install found.

    Refuses (one line) when neither gives one: a wrong pydevd-pycharm fails silently in PyCharm.
    """
    if explicit:
        if explicit.strip().lower() == ANY_BUILD:
            return BuildChoice(ANY_BUILD, "--pycharm-build any")
        try:
            return BuildChoice(normalize_build(explicit), "--pycharm-build")
        except spec.ContractError as exc:
            raise BadInputError(str(exc)) from None
    found = list(find_installs() if installs is None else installs)
    if not found:
        raise UserError(
            "cannot find PyCharm on this machine to match pydevd-pycharm to it: pass --pycharm-build BUILD "
            "(Help > About shows it, e.g. 241.14494.241)"
        )
    best = found[0]
    return BuildChoice(best.build, best.describe(), tuple(i.describe() for i in found[1:]))


def job_requirement(build: str | None = None) -> str:
    """The dependency a job debugged from this laptop's PyCharm needs, e.g. ``pydevd-pycharm~=241.14494.241``.

    For ``remote_debug.enable(..., ide="pycharm")`` and SageMaker launches: ``build`` as the user
    gave it, else the detected one; UserError when neither is known.
    """
    choice = choose_build(build)
    if not choice.checked:
        return PYDEVD_DIST
    return requirement(choice.build)


def installed_pydevd() -> str | None:
    """pydevd-pycharm's version in this interpreter (without importing it: it must not meet debugpy)."""
    try:
        return importlib.metadata.version(PYDEVD_DIST)
    except importlib.metadata.PackageNotFoundError:
        return None


def check_local_pydevd(choice: BuildChoice, installed: str | None = None) -> str | None:
    """For local jobs (they run in this interpreter): the installed version, or a one-line UserError."""
    have = installed_pydevd() if installed is None else installed
    if not choice.checked:
        if have is None:
            raise UserError(f"pydevd-pycharm is not installed: run pip install {PYDEVD_DIST}")
        return have
    want = requirement(choice.build)
    python = sys.executable
    if have is None:
        raise UserError(f"pydevd-pycharm is not installed for local jobs: run {python} -m pip install '{want}'")
    if not satisfies(have, choice.build):
        raise UserError(
            f"pydevd-pycharm {have} does not match PyCharm build {choice.build} ({choice.source}): "
            f"run {python} -m pip install '{want}'"
        )
    return have


# --- run configuration ---------------------------------------------------------------------------


def config_name(job: str) -> str:
    return f"remote-debug: {job}"


def run_config_path(workspace: Path, job: str) -> Path:
    return workspace / ".idea" / "runConfigurations" / f"{spec.check_job_name(job)}.xml"


def run_config_xml(job: str, port: int, module: str) -> bytes:
    """A "Python Debug Server" run configuration listening on ``port``.

    Path mappings stay empty on purpose: the ranks map paths themselves (PATHS_FROM_ECLIPSE_TO_PYTHON
    from the forwarder's hello), so a second mapping in the IDE could only disagree with it.
    "Suspend after connect" only changes the snippet PyCharm shows; our ranks call settrace with
    suspend=False and stop at your breakpoints.
    """
    spec.check_port(port, "PyCharm port", allow_zero=False)
    component = ET.Element("component", name="ProjectRunConfigurationManager")
    config = ET.SubElement(
        component,
        "configuration",
        default="false",
        name=config_name(job),
        type=CONFIG_TYPE,
        factoryName=CONFIG_FACTORY,
    )
    ET.SubElement(config, "module", name=module)
    ET.SubElement(config, "option", name="PORT", value=str(port))
    ET.SubElement(config, "option", name="HOST", value="localhost")
    mappings = ET.SubElement(config, "PathMappingSettings")
    ET.SubElement(ET.SubElement(mappings, "option", name="pathMappings"), "list")
    ET.SubElement(config, "option", name="REDIRECT_OUTPUT", value="true")
    ET.SubElement(config, "option", name="SUSPEND_AFTER_CONNECT", value="false")
    ET.SubElement(config, "method", v="2")
    ET.indent(component, space="  ")
    return bytes(ET.tostring(component, encoding="utf-8", xml_declaration=False)) + b"\n"


RUN_CONFIG_DIRS = (".idea", "runConfigurations")


def _refuse_link(exc: osutil.UnsafePathError) -> UserError:
    # a link here is the repository's choice, not the user's: we would write (or read) elsewhere
    return UserError(
        f"{exc.filename}: {exc.strerror}; remote-debug writes PyCharm run configurations only into real "
        "folders and files (never through a link): replace it with a real one, or attach with another --workspace"
    )


def write_run_config(workspace: Path, job: str, port: int) -> Path:
    """Write ``.idea/runConfigurations/<job>.xml``, never through a symlink (folder or file)."""
    path = run_config_path(workspace, job)
    xml = run_config_xml(job, port, workspace.name or "project")
    folder: osutil.NoFollowDir | None = None
    try:
        folder = osutil.NoFollowDir(workspace, RUN_CONFIG_DIRS, create=True)
        with folder:
            folder.write(path.name, xml)  # atomic: a Ctrl-C or a full disk leaves the old file whole
    except OSError as exc:
        if folder is not None:
            folder.remove_created()  # a folder we made for a file that was never written
        if isinstance(exc, osutil.UnsafePathError):
            raise _refuse_link(exc) from None
        raise UserError(f"{path}: cannot write it ({exc.strerror}); free space or fix permissions and retry") from None
    return path


def existing_port(workspace: Path, job: str) -> int | None:
    """The port of a run configuration written earlier for ``job`` (so re-attaching keeps it).

    Read without following links: a linked file is not ours (write_run_config then refuses it)."""
    try:
        name = run_config_path(workspace, job).name
        with osutil.NoFollowDir(workspace, RUN_CONFIG_DIRS) as folder:
            data = folder.read(name)
        if data is None:
            return None
        root = ET.fromstring(data)
    except (OSError, ET.ParseError, spec.ContractError):
        return None
    option = root.find("./configuration/option[@name='PORT']")
    value = option.get("value", "") if option is not None else ""
    return int(value) if value.isdigit() else None


def user_steps(job: str, port: int, workspace: Path) -> list[str]:
    """The two things the user does in PyCharm (printed by attach/demo)."""
    return [
        f"In PyCharm, open {workspace}, set your breakpoints, then start the run configuration "
        f"'{config_name(job)}' (Run > Debug; a Python Debug Server on port {port}). "
        "Every rank connects to it as soon as it runs, now or later; stop and start it any time.",
        "Each rank stops at your breakpoints (one process per rank in the Threads view): inspect it, "
        "then press Resume (F9) - the other ranks wait in their next collective until it runs on.",
    ]
