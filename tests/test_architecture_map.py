"""docs/ARCHITECTURE.md is the map of the house: every module of the package is named on it.

A module counts as named when its path appears with at least its folder (``rank/agent.py``,
``laptop/ide/vscode.py``), or, for a module at the package's top, its file name (``console.py``).
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "remote_debug"
MAP = REPO / "docs" / "ARCHITECTURE.md"


def named_paths(text: str) -> set[str]:
    return set(re.findall(r"[\w./-]+\.py", text))


def unnamed_modules(text: str) -> list[str]:
    named = named_paths(text)
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "__init__.py":
            continue
        rel = path.relative_to(PACKAGE)
        forms = {"/".join(rel.parts[i:]) for i in range(len(rel.parts) - 1)} or {rel.name}
        if not any(any(n == f or n.endswith("/" + f) for n in named) for f in forms):
            missing.append(str(rel))
    return missing


def test_every_module_is_on_the_map() -> None:
    missing = unnamed_modules(MAP.read_text(encoding="utf-8"))
    assert not missing, f"modules docs/ARCHITECTURE.md does not name (add a line to their wing): {missing}"


def test_the_check_can_fail() -> None:
    assert "laptop/ide/vscode.py" in unnamed_modules("`laptop/ide/base.py`")
    assert "laptop/ide/vscode.py" not in unnamed_modules("`ide/vscode.py`")
    assert "laptop/ide/vscode.py" in unnamed_modules("`vscode.py`"), "a bare file name is ambiguous below the top"
