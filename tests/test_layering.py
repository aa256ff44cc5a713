"""The house rules, checked on the source (AST only: nothing is imported).

The package is split first by where code runs, then by role.  Each *wing* below may import only the
wings listed for it (and itself); :data:`WINGS` is the map docs/ARCHITECTURE.md draws.

* ``contract``, ``oskit``: the one contract between the sides and the OS helpers both need - stdlib only.
* ``container.*`` runs inside the training image: the standard library, debugpy/pydevd and the two
  wings above.  The rank agent (``container.rank``), which runs in every training process, may not
  import the node side (``container.node``); the node side may use the rank agent's pieces.
* ``laptop.*``: the user's side, in layers: ``core`` < ``wire`` < ``aws``, ``machine`` < ``platforms`` <
  ``connection`` < ``ide``, ``iterate`` < ``attach`` < ``adopt``, ``diagnose``, ``prune`` < ``cli``.
* Product code has no special case for the emulator: only the ``remote-debug emulator`` command
  imports ``remote_debug.emulator`` (the product reaches it through ``AWS_ENDPOINT_URL``, as AWS).
* No import cycles, in Python (module-level and function-level imports both count; ``if TYPE_CHECKING:``
  does not) or in the VS Code extension's TypeScript (``import type`` does not: it is erased).

Edges: ``import a.b`` is an edge to ``a.b``; ``from pkg import name`` to ``pkg.name`` when that is a
module, else to ``pkg``.  The parent packages Python imports on the way are not edges: every
submodule would otherwise depend on its package's ``__init__``, which usually imports it back.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "remote_debug"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE
EXTENSION_SRC = ROOT.parent / "vscode-extension" / "src"

CONTAINER_SHARED = "container.shared"  # the few container modules both rooms use
_CONTAINER_SHARED_MODULES = ("container", "container.log", "container.knobs", "container.threads", "container.node_env")
_BASE = ("contract", "oskit")
_CONTAINER_BASE = (*_BASE, CONTAINER_SHARED)
_LAPTOP_BASE = (*_BASE, "laptop.core")
# wing -> the wings it may import (besides itself)
WINGS: dict[str, tuple[str, ...]] = {
    "oskit": (),
    "contract": ("oskit",),
    CONTAINER_SHARED: _BASE,
    "container.rank": _CONTAINER_BASE,
    "container.node": (*_CONTAINER_BASE, "container.rank"),
    "container.inject": (*_CONTAINER_BASE, "container.rank", "container.node"),  # sitecustomize: every process
    "container.__main__": (*_CONTAINER_BASE, "container.rank", "container.node"),
    "laptop.core": _BASE,
    "laptop.wire": _LAPTOP_BASE,
    "laptop.aws": _LAPTOP_BASE,
    "laptop.machine": _LAPTOP_BASE,
    "laptop.platforms": (*_LAPTOP_BASE, "laptop.aws", "laptop.machine"),
    "laptop.connection": (*_LAPTOP_BASE, "laptop.wire", "laptop.platforms"),
    "laptop.ide": (*_LAPTOP_BASE, "laptop.wire", "laptop.connection"),
    "laptop.iterate": (*_LAPTOP_BASE, "laptop.wire", "laptop.connection"),
    "laptop.attach": (
        *_LAPTOP_BASE,
        "laptop.wire",
        "laptop.platforms",
        "laptop.connection",
        "laptop.ide",
        "laptop.machine",
    ),
    "laptop.adopt": (*_LAPTOP_BASE, CONTAINER_SHARED, "container.node", "laptop.aws", "laptop.machine"),
    "laptop.diagnose": (
        *_LAPTOP_BASE,
        "container.node",
        "laptop.wire",
        "laptop.aws",
        "laptop.machine",
        "laptop.platforms",
        "laptop.connection",
    ),
    "laptop.prune": (
        *_LAPTOP_BASE,
        "laptop.wire",
        "laptop.machine",
        "laptop.platforms",
        "laptop.connection",
        "laptop.ide",
    ),
    "emulator": _BASE,  # a separate program: AWS on this machine, reached over HTTP only
    "sagemaker": ("laptop.aws",),  # the public facade of enable()
    "cli": ("*",),
    "console": ("cli", "laptop.core", "laptop.connection"),
    "__main__": ("console",),
    "": ("laptop.aws",),  # remote_debug/__init__.py: the lazy remote_debug.enable
    "laptop": (),
    "examples": (),
}
CONTAINER_THIRD_PARTY = ("debugpy", "pydevd")  # and pydevd_*, _pydevd*, _pydev* (debugpy's vendored pydevd)
# the one container module that may use the AWS SDK, optionally (an image without boto3 falls back to the stdlib)
CONTAINER_OPTIONAL = {f"{PACKAGE}.container.node.aws_sdk": ("boto3", "botocore")}


def wing_of(module: str) -> str:
    """The wing a module of the package belongs to (``remote_debug.laptop.ide.vscode`` -> ``laptop.ide``)."""
    rest = module[len(PACKAGE) + 1 :] if module != PACKAGE else ""
    if rest in _CONTAINER_SHARED_MODULES:
        return CONTAINER_SHARED
    parts = rest.split(".")
    if parts[0] in ("container", "laptop") and len(parts) > 1:
        return ".".join(parts[:2])
    return parts[0]


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the imported module (dotted; may be outside the package)
    path: Path
    line: int

    def __str__(self) -> str:
        return f"{self.path.relative_to(ROOT.parent)}:{self.line}: {self.source} imports {self.target}"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement under ``node``, at any depth, except in ``if TYPE_CHECKING:`` bodies."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _type_checking(child.test):
            for stmt in child.orelse:
                yield from _import_nodes_of(stmt)
            continue
        yield from _import_nodes_of(child)


def _import_nodes_of(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node
    yield from _import_nodes(node)


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> list[Import]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in _import_nodes(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:  # relative: from the importing module's package upwards
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = []
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                targets.append(candidate if candidate in modules else base)
        found += [Import(name, t, path, node.lineno) for t in dict.fromkeys(targets) if t != name]
    return found


def all_imports() -> list[Import]:
    modules = package_modules()
    return [imp for name, path in modules.items() for imp in imports_of(name, path, modules)]


def _within(target: str, prefix: str) -> bool:
    return target == prefix or target.startswith(prefix + ".")


def test_every_module_has_a_wing_with_rules() -> None:
    homeless = sorted({wing_of(m) for m in package_modules()} - set(WINGS))
    assert not homeless, f"wings without rules in WINGS (add them, and to docs/ARCHITECTURE.md): {homeless}"


def test_each_wing_imports_only_the_wings_below_it() -> None:
    bad = []
    for imp in all_imports():
        if imp.target.split(".")[0] != PACKAGE:
            continue
        source, target = wing_of(imp.source), wing_of(imp.target)
        allowed = WINGS.get(source, ())
        if source != target and "*" not in allowed and target not in allowed:
            bad.append(f"{imp}  ({source} may import {', '.join(allowed) or 'nothing else'})")
    assert not bad, "imports across the house rules (tests/test_layering.py WINGS):\n" + "\n".join(bad)


def container_allows_third_party(source: str, target: str) -> bool:
    top = target.split(".")[0]
    return (
        top in sys.stdlib_module_names
        or top in CONTAINER_THIRD_PARTY
        or top.startswith(("pydevd_", "_pydevd", "_pydev"))
        or top in CONTAINER_OPTIONAL.get(source, ())
    )


def test_container_imports_only_stdlib_and_debuggers_from_outside() -> None:
    bad = [
        imp
        for imp in all_imports()
        if _within(imp.source, f"{PACKAGE}.container")
        and imp.target.split(".")[0] != PACKAGE
        and not container_allows_third_party(imp.source, imp.target)
    ]
    assert not bad, "the container side runs inside the training image: stdlib and debugpy/pydevd only:\n" + "\n".join(
        str(imp) for imp in bad
    )


def test_contract_and_oskit_are_standard_library_only() -> None:
    bad = [
        imp
        for imp in all_imports()
        if wing_of(imp.source) in ("contract", "oskit")
        and imp.target.split(".")[0] not in (PACKAGE, *sys.stdlib_module_names)
    ]
    assert not bad, "contract/ and oskit/ run on both sides: stdlib only:\n" + "\n".join(str(i) for i in bad)


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm: the strongly connected components with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def one_cycle(component: list[str], edges: dict[tuple[str, str], Import]) -> list[Import]:
    """A shortest cycle through the component's first module, as the imports that make it."""
    members = set(component)
    start = component[0]
    previous: dict[str, Import] = {}
    frontier = [start]
    while frontier:
        following = []
        for v in frontier:
            for (a, b), imp in sorted(edges.items()):
                if a != v or b not in members:
                    continue
                if b == start:
                    path = [imp]
                    while path[0].source != start:
                        path.insert(0, previous[path[0].source])
                    return path
                if b not in previous:
                    previous[b] = imp
                    following.append(b)
        frontier = following
    raise AssertionError(f"no cycle through {start}")  # cannot happen in a strongly connected component


def test_no_import_cycles() -> None:
    modules = package_modules()
    edges: dict[tuple[str, str], Import] = {}
    for imp in all_imports():
        if imp.target in modules:
            edges.setdefault((imp.source, imp.target), imp)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for a, b in edges:
        graph[a].add(b)
    cycles = [one_cycle(component, edges) for component in strongly_connected(graph)]
    assert not cycles, "import cycles between remote_debug modules:\n" + "\n".join(
        " -> ".join([cycle[0].source, *(imp.target for imp in cycle)]) + "".join(f"\n    {imp}" for imp in cycle)
        for cycle in cycles
    )


# The extension: relative imports of its own modules; ``import type`` is erased by tsc, so no edge.
_TS_IMPORT = re.compile(r"^\s*(?:import|export)\s+(?!type\b)[^;]*?\bfrom\s+[\"'](\.[^\"']+)[\"']", re.M | re.S)


def extension_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in sorted(EXTENSION_SRC.rglob("*.ts")):
        name = str(path.relative_to(EXTENSION_SRC).with_suffix(""))
        targets = set()
        for spec in _TS_IMPORT.findall(path.read_text(encoding="utf-8")):
            resolved = (path.parent / spec).resolve()
            target = resolved.with_suffix(".ts") if resolved.suffix in ("", ".js") else resolved
            targets.add(str(target.relative_to(EXTENSION_SRC).with_suffix("")))
        graph[name] = targets
    return graph


def test_no_import_cycles_in_the_extension() -> None:
    graph = extension_graph()
    assert sum(map(len, graph.values())) > 20, "the TypeScript parser found (almost) no imports"
    assert not strongly_connected(graph), f"import cycles in vscode-extension/src: {strongly_connected(graph)}"


# --- the emulator is reached over HTTP only --------------------------------------------------------

EMULATOR = f"{PACKAGE}.emulator"
EMULATOR_COMMAND = f"{PACKAGE}.cli.emulator"


def test_no_product_code_imports_the_emulator() -> None:
    bad = [
        imp
        for imp in all_imports()
        if _within(imp.target, EMULATOR) and not _within(imp.source, EMULATOR) and imp.source != EMULATOR_COMMAND
    ]
    assert not bad, "only the emulator command may import remote_debug.emulator:\n" + "\n".join(str(i) for i in bad)
    assert any(imp.source == EMULATOR_COMMAND and _within(imp.target, EMULATOR) for imp in all_imports())


def test_the_rules_see_imports() -> None:
    """The checks above would pass vacuously on a parser that finds nothing: make sure they do not."""
    imports = all_imports()
    assert any(
        imp.source == f"{PACKAGE}.container.node.hook" and imp.target == f"{PACKAGE}.contract.spec" for imp in imports
    )
    assert wing_of(f"{PACKAGE}.laptop.ide.vscode") == "laptop.ide"
    assert wing_of(f"{PACKAGE}.container.log") == CONTAINER_SHARED
    assert "laptop.aws" not in WINGS["container.rank"] and "container.node" not in WINGS["container.rank"]
    assert not container_allows_third_party(f"{PACKAGE}.container.rank.agent", "boto3")
    assert container_allows_third_party(f"{PACKAGE}.container.node.aws_sdk", "boto3")
    assert container_allows_third_party(f"{PACKAGE}.container.rank.agent", "_pydevd_bundle.pydevd_constants")
    assert strongly_connected({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert extension_graph()["extension"], "the extension's entry imports nothing?"
