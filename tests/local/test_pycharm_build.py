"""PyCharm on the laptop without PyCharm: build detection on fabricated install trees of each OS
layout, the version policy, the run configuration (parsed back), and the hello line's contract."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from remote_debug.contract.pycharm_spec import Hello, normalize_build, requirement, satisfies
from remote_debug.contract.spec import ContractError
from remote_debug.laptop.core.errors import UserError
from remote_debug.laptop.ide import pycharm_setup as pycharm


def product_info(directory: Path, build: str, code: str = "PY", version: str = "2024.1") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    info = {"name": "PyCharm", "version": version, "buildNumber": build, "productCode": code}
    (directory / "product-info.json").write_text(json.dumps(info))
    return directory


def build_txt(directory: Path, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "build.txt").write_text(text + "\n")
    return directory


def builds(system: str, home: Path, env: dict[str, str], root: Path) -> list[tuple[str, str]]:
    return [(i.build, i.path.name) for i in pycharm.find_installs(system, home, env, root)]


def test_linux_layouts(tmp_path: Path) -> None:
    root, home = tmp_path / "root", tmp_path / "home"
    product_info(root / "opt" / "pycharm-2023.3", "233.13135.95")  # tarball in /opt
    product_info(root / "snap" / "pycharm-community" / "current", "241.15989.155", code="PC")
    # Toolbox 1.x: apps/<id>/ch-0/<build>/, here with only the older build.txt
    build_txt(home / ".local/share/JetBrains/Toolbox/apps/PyCharm-P/ch-0/241.14494.241", "PY-241.14494.241")
    # Toolbox 2.x: a flat dir per product
    product_info(home / ".local/share/JetBrains/Toolbox/apps/pycharm-professional", "243.22562.220")
    product_info(root / "opt" / "idea-IU", "243.1.1", code="IU")  # another IDE: ignored
    product_info(root / "opt" / "pycharm-eap", "251.SNAPSHOT")  # no release build: ignored
    found = builds("linux", home, {}, root)
    assert found == [
        ("243.22562.220", "pycharm-professional"),
        ("241.15989.155", "current"),
        ("241.14494.241", "241.14494.241"),
        ("233.13135.95", "pycharm-2023.3"),
    ]


def test_macos_layouts(tmp_path: Path) -> None:
    root, home = tmp_path / "root", tmp_path / "home"
    product_info(root / "Applications" / "PyCharm.app" / "Contents" / "Resources", "241.14494.241")
    build_txt(home / "Applications" / "PyCharm CE.app" / "Contents" / "Resources", "PC-233.11799.259")
    toolbox = home / "Library/Application Support/JetBrains/Toolbox/apps/PyCharm-P/ch-0/242.20224.428"
    product_info(toolbox / "PyCharm.app" / "Contents" / "Resources", "242.20224.428")
    found = builds("darwin", home, {}, root)
    assert found == [
        ("242.20224.428", "PyCharm.app"),
        ("241.14494.241", "PyCharm.app"),
        ("233.11799.259", "PyCharm CE.app"),
    ]
    best = pycharm.find_installs("darwin", home, {}, root)[0]
    assert "build 242.20224.428" in best.describe()


def test_windows_layouts(tmp_path: Path) -> None:
    program_files, local = tmp_path / "Program Files", tmp_path / "AppData" / "Local"
    product_info(program_files / "JetBrains" / "PyCharm 2024.1", "241.14494.241")
    product_info(local / "Programs" / "PyCharm Professional", "243.22562.220")  # Toolbox 2.x
    build_txt(local / "JetBrains/Toolbox/apps/PyCharm-C/ch-0/233.13135.95", "PC-233.13135.95")  # Toolbox 1.x
    env = {"ProgramFiles": str(program_files), "LOCALAPPDATA": str(local)}
    found = builds("win32", tmp_path / "home", env, tmp_path / "nothing")
    assert found == [
        ("243.22562.220", "PyCharm Professional"),
        ("241.14494.241", "PyCharm 2024.1"),
        ("233.13135.95", "233.13135.95"),
    ]


def test_explicit_home_and_choice(tmp_path: Path) -> None:
    custom = product_info(tmp_path / "somewhere" / "pc", "241.14494.241")
    found = pycharm.find_installs("linux", tmp_path / "home", {pycharm.ENV_PYCHARM_HOME: str(custom)}, tmp_path)
    choice = pycharm.choose_build(None, found)
    assert choice.build == "241.14494.241" and str(custom) in choice.source
    assert pycharm.choose_build("PY-233.13135.95", found).build == "233.13135.95"  # the flag wins
    assert not pycharm.choose_build("any", []).checked
    with pytest.raises(UserError, match="--pycharm-build"):
        pycharm.choose_build(None, [])
    with pytest.raises(UserError, match="not a release build"):
        pycharm.choose_build("251.SNAPSHOT", [])


def test_version_policy() -> None:
    assert normalize_build("PY-241.14494.241") == "241.14494.241"
    assert requirement("PC-233.13135.95") == "pydevd-pycharm~=233.13135.95"
    assert satisfies("241.14494.241", "241.14494.241")
    assert satisfies("241.14494.300", "241.14494.241")  # a later bug-fix release of the same build line
    assert not satisfies("241.14494.100", "241.14494.241")
    assert not satisfies("241.15989.155", "241.14494.241")
    assert not satisfies("263.7307.50", "241.14494.241")
    assert satisfies("241.99.1", "241.14494") is False and satisfies("241.20000.1", "241.14494")
    assert not satisfies("241.14494.241.dev1", "241.14494.241")
    with pytest.raises(ContractError):
        requirement("2024.1")


def test_local_pydevd_check() -> None:
    choice = pycharm.choose_build("241.14494.241", [])
    assert pycharm.check_local_pydevd(choice, installed="241.14494.241") == "241.14494.241"
    with pytest.raises(UserError, match=r"pip install 'pydevd-pycharm~=241\.14494\.241'"):
        pycharm.check_local_pydevd(choice, installed="263.7307.50")
    assert pycharm.job_requirement("241.14494.241") == "pydevd-pycharm~=241.14494.241"


def test_run_configuration_parses_back(tmp_path: Path) -> None:
    workspace = tmp_path / "myproject"
    workspace.mkdir()
    path = pycharm.write_run_config(workspace, "train-42", 23456)
    assert path == workspace / ".idea" / "runConfigurations" / "train-42.xml"
    root = ET.parse(path).getroot()
    assert root.tag == "component" and root.get("name") == "ProjectRunConfigurationManager"
    config = root.find("configuration")
    assert config is not None
    assert config.get("type") == "PyRemoteDebugConfigurationType"
    assert config.get("factoryName") == "Python Remote Debug"
    assert config.get("name") == "remote-debug: train-42"
    options = {o.get("name"): o.get("value") for o in config.findall("option")}
    assert options["PORT"] == "23456" and options["HOST"] == "localhost"
    module = config.find("module")
    assert module is not None and module.get("name") == "myproject"
    assert config.find("PathMappingSettings/option[@name='pathMappings']/list") is not None
    assert pycharm.existing_port(workspace, "train-42") == 23456
    assert pycharm.existing_port(workspace, "other") is None
    steps = pycharm.user_steps("train-42", 23456, workspace)
    assert len(steps) == 2 and "remote-debug: train-42" in steps[0] and "Resume" in steps[1]


def test_hello_line_contract() -> None:
    hello = Hello(ok=True, ide_root="/home/me/proj", build="241.14494.241")
    line = hello.encode()
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert Hello.decode(line) == hello
    refused = Hello.decode(Hello(ok=False, error="nothing listens").encode())
    assert not refused.ok and refused.error == "nothing listens"
    with pytest.raises(ContractError, match="version 9"):
        Hello.decode(b'REMOTE-DEBUG-PYCHARM/9 {"ok":true}\n')
    with pytest.raises(ContractError):
        Hello.decode(b"501\t1\t1.1\n")
