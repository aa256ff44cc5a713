"""Layering rules of the package, checked on its source (AST only: nothing is imported).

* ``remote_debug/container/**`` runs inside the training image: it imports the standard library,
  debugpy / pydevd (or pydevd-pycharm), the contract modules (``remote_debug.spec``,
  ``remote_debug.pycharm_spec``, ``remote_debug.manifest_lines``, ``remote_debug.job_secret``),
  the stdlib helpers both sides share (``remote_debug.osutil``, ``remote_debug.peer_uid``,
  ``remote_debug.dap_wire``) and itself -
  nothing from the laptop side, no other package.
* No import cycles between ``remote_debug`` modules: module-level and function-level imports both
  count (a function-level import still makes the two modules depend on each other); imports under
  ``if TYPE_CHECKING:`` do not (they never run).
* ``remote_debug/sagemaker`` uses only a small, deliberate part of the laptop side
  (:data:`SAGEMAKER_MAY_IMPORT`, see ``remote_debug/sagemaker/__init__.py``).
* Product code has no special case for the emulator: only the ``remote-debug emulator`` command
  imports ``remote_debug.emulator`` (the product reaches it through ``AWS_ENDPOINT_URL``, as AWS).

Edges: ``import a.b`` is an edge to ``a.b``; ``from pkg import name`` to ``pkg.name`` when that is a
module, else to ``pkg``.  The parent packages Python imports on the way are not edges: every
submodule would otherwise depend on its package's ``__init__``, which usually imports it back.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "remote_debug"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE

CONTAINER = f"{PACKAGE}.container"
# the contract, and the stdlib helpers both sides share
CONTAINER_MAY_IMPORT = (
    f"{PACKAGE}.spec",
    f"{PACKAGE}.pycharm_spec",
    f"{PACKAGE}.manifest_lines",
    f"{PACKAGE}.job_secret",  # the per-job secret: control tokens and manifest MACs
    f"{PACKAGE}.osutil",
    f"{PACKAGE}.peer_uid",  # which local user opened a loopback connection
    f"{PACKAGE}.dap_wire",  # DAP framing: a rank refusing a second debugger speaks it too
)
CONTAINER_THIRD_PARTY = ("debugpy", "pydevd")  # and pydevd_*, _pydevd*, _pydev* (debugpy's vendored pydevd)
# the one container module that may use the AWS SDK, optionally (an image without boto3 falls back to the stdlib)
CONTAINER_OPTIONAL = {f"{PACKAGE}.container.aws_sdk": ("boto3", "botocore")}
SAGEMAKER_MAY_IMPORT = (
    f"{PACKAGE}.local.errors",  # UserError: the one-line error the CLI turns into exit code 2
    f"{PACKAGE}.local.aws",  # session(), is_error(), describe_error()
    f"{PACKAGE}.local.keys",  # ensure_job_key(): the job's client key pair
    f"{PACKAGE}.local.paths",  # StatePaths: where keys and bundles live
)


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


# --- (a) the container side ------------------------------------------------------------------------


def container_allows(target: str) -> bool:
    top = target.split(".")[0]
    if top == PACKAGE:
        return target == PACKAGE or _within(target, CONTAINER) or target in CONTAINER_MAY_IMPORT
    return (
        top in sys.stdlib_module_names
        or top in CONTAINER_THIRD_PARTY
        or top.startswith(("pydevd_", "_pydevd", "_pydev"))
    )


def test_container_imports_only_stdlib_debuggers_and_the_contract() -> None:
    bad = [imp for imp in all_imports() if _within(imp.source, CONTAINER) and not container_allows(imp.target)
           and imp.target.split(".")[0] not in CONTAINER_OPTIONAL.get(imp.source, ())]
    assert not bad, (
        "the container side runs inside the training image: stdlib, debugpy/pydevd and "
        f"{', '.join(CONTAINER_MAY_IMPORT)} only:\n" + "\n".join(str(imp) for imp in bad)
    )


# --- (b) no cycles -----------------------------------------------------------------------------------


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
        " -> ".join([cycle[0].source, *(imp.target for imp in cycle)])
        + "".join(f"\n    {imp}" for imp in cycle)
        for cycle in cycles
    )


# --- (c) what sagemaker/ may use of the laptop side --------------------------------------------------


def test_sagemaker_uses_only_the_public_laptop_surface() -> None:
    bad = [
        imp
        for imp in all_imports()
        if _within(imp.source, f"{PACKAGE}.sagemaker")
        and _within(imp.target, f"{PACKAGE}.local")
        and imp.target not in SAGEMAKER_MAY_IMPORT
    ]
    assert not bad, (
        f"remote_debug/sagemaker may import from remote_debug.local only {', '.join(SAGEMAKER_MAY_IMPORT)}:\n"
        + "\n".join(str(imp) for imp in bad)
    )


# --- (d) the emulator is reached over HTTP only --------------------------------------------------------

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
    assert any(imp.source == f"{CONTAINER}.hook" and imp.target == f"{PACKAGE}.spec" for imp in imports)
    assert any(_within(imp.source, f"{PACKAGE}.sagemaker") and imp.target in SAGEMAKER_MAY_IMPORT for imp in imports)
    assert not container_allows(f"{PACKAGE}.local.aws") and not container_allows("boto3")
    assert container_allows("_pydevd_bundle.pydevd_constants") and container_allows("json")
    assert strongly_connected({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
