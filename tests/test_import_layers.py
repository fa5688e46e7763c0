"""The modules of the structexec package form layers: no import cycle, imports only go down the
layers, the core never imports trio, nothing imports the facade (docs/internals.md "The layers").

Each module is parsed with :mod:`ast` (nothing is imported), and every import of another
structexec module becomes an edge of the module graph:

* imports at module level and inside functions, methods and class bodies alike: a deferred
  import still makes the importing module depend on the imported one;
* relative imports are resolved against the importing module's package; ``from . import x`` and
  ``from pkg import x`` are an edge to the submodule ``pkg.x`` when ``x`` is a module of the
  package, and to the package ``pkg`` (its ``__init__``) otherwise;
* importing ``pkg.sub.mod`` from outside ``pkg.sub`` also runs ``pkg/sub/__init__.py`` first, so
  it is an edge to that subpackage too (never to the root ``structexec``, which is always
  imported before any of its modules);
* imports inside ``if TYPE_CHECKING:`` are left out: they never run (their ``else:`` runs).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import structexec

PACKAGE = "structexec"
ROOT = Path(structexec.__file__).resolve().parent


@dataclass(frozen=True)
class Edge:
    importer: str
    imported: str
    lineno: int

    def __str__(self) -> str:
        return f"{self.importer} -> {self.imported} (line {self.lineno})"


def _module_files() -> dict[str, Path]:
    """Every module of the package, by dotted name (a package by its own name)."""
    modules: dict[str, Path] = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = [PACKAGE, *path.relative_to(ROOT).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


MODULES = _module_files()


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _runtime_imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements of ``tree`` that can run: all but those under ``if TYPE_CHECKING``."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
            continue
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def _owning_module(dotted: str) -> str | None:
    """The longest prefix of ``dotted`` that is a structexec module (``None`` if outside it)."""
    parts = dotted.split(".")
    while parts:
        name = ".".join(parts)
        if name in MODULES:
            return name
        parts.pop()
    return None


def _with_parent_packages(importer: str, target: str) -> Iterator[str]:
    """``target`` and the subpackages that importing it runs first, as seen from ``importer``."""
    yield target
    parts = target.split(".")[:-1]
    while len(parts) > 1:  # the root package is always imported already
        package = ".".join(parts)
        if importer != package and not importer.startswith(package + "."):
            yield package
        parts.pop()


def _targets(importer: str, node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    if isinstance(node, ast.Import):
        for alias in node.names:
            target = _owning_module(alias.name)
            if target is not None:
                yield target
        return
    if node.level:
        base = importer.split(".") if _is_package(importer) else importer.split(".")[:-1]
        if node.level > 1:
            base = base[: len(base) - (node.level - 1)]
        source = ".".join([*base, *([node.module] if node.module else [])])
    else:
        source = node.module or ""
    if source not in MODULES:
        target = _owning_module(source)
        if target is not None:
            yield target
        return
    for alias in node.names:
        submodule = f"{source}.{alias.name}"
        yield submodule if submodule in MODULES else source


def import_edges() -> list[Edge]:
    edges: set[Edge] = set()
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in _runtime_imports(tree):
            for target in _targets(name, node):
                for imported in _with_parent_packages(name, target):
                    if imported != name:
                        edges.add(Edge(name, imported, node.lineno))
    return sorted(edges, key=lambda e: (e.importer, e.imported, e.lineno))


def _graph(edges: list[Edge]) -> dict[str, dict[str, Edge]]:
    graph: dict[str, dict[str, Edge]] = {name: {} for name in MODULES}
    for edge in edges:
        graph[edge.importer].setdefault(edge.imported, edge)
    return graph


def strongly_connected_components(graph: dict[str, dict[str, Edge]]) -> list[list[str]]:
    """Tarjan's algorithm (iterative); only the components with a cycle, each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(graph[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = counter
                    counter += 1
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(graph[succ])))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component: list[str] = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found)


def _shortest_cycle(graph: dict[str, dict[str, Edge]], start: str, members: set[str]) -> list[Edge]:
    """A shortest cycle through ``start`` inside one strongly connected component."""
    previous: dict[str, Edge] = {}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for succ, edge in graph[node].items():
                if succ not in members:
                    continue
                if succ == start:
                    cycle = [edge]
                    while node != start:
                        cycle.append(previous[node])
                        node = previous[node].importer
                    return cycle[::-1]
                if succ not in previous:
                    previous[succ] = edge
                    following.append(succ)
        frontier = following
    raise AssertionError(f"{start} is on no cycle")


def cycles(edges: list[Edge]) -> list[list[Edge]]:
    """For each module on a cycle, a shortest cycle through it (each distinct cycle once)."""
    graph = _graph(edges)
    seen: set[frozenset[Edge]] = set()
    result: list[list[Edge]] = []
    for component in strongly_connected_components(graph):
        members = set(component)
        for start in component:
            cycle = _shortest_cycle(graph, start, members)
            key = frozenset(cycle)
            if key not in seen:
                seen.add(key)
                result.append(cycle)
    return result


def _describe(cycle: list[Edge]) -> str:
    return "\n".join(["  cycle:", *(f"    {edge}" for edge in cycle)])


def test_the_parser_sees_the_package() -> None:
    # A guard for the tests below: they pass vacuously if the walk finds no module or no edge.
    assert f"{PACKAGE}._core._protocol" in MODULES
    assert f"{PACKAGE}.backends" in MODULES
    edges = import_edges()
    assert Edge(f"{PACKAGE}", f"{PACKAGE}._core._protocol", 0) not in edges
    assert any(e.importer == PACKAGE and e.imported == f"{PACKAGE}._core._protocol" for e in edges)
    assert any(e.importer == f"{PACKAGE}.backends" for e in edges)


def test_cycle_finder_finds_cycles() -> None:
    a, b, c = (f"{PACKAGE}._{n}" for n in "abc")
    p = f"{PACKAGE}._core._protocol"
    fake = [Edge(a, b, 1), Edge(b, c, 2), Edge(c, a, 3), Edge(a, p, 4)]
    graph: dict[str, dict[str, Edge]] = {a: {}, b: {}, c: {}, p: {}}
    for edge in fake:
        graph[edge.importer][edge.imported] = edge
    assert strongly_connected_components(graph) == [sorted([a, b, c])]


def test_no_import_cycles() -> None:
    found = cycles(import_edges())
    assert not found, "import cycles between structexec modules:\n" + "\n".join(
        _describe(cycle) for cycle in found
    )


def _is_private(name: str) -> bool:
    return any(part.startswith("_") for part in name.split(".")[1:])


#: Private modules that may import the package facade, and why.
FACADE_CLIENTS = {
    # The sender-tree strategies build senders by their public names (getattr(sx, "then"), ...)
    # and print reproducers written with ``sx.``: a client of the public API, above the facade.
    f"{PACKAGE}.testing._tree_nodes": "builds senders by public name",
    f"{PACKAGE}.testing._tree_when_all": "builds senders by public name",
    f"{PACKAGE}.testing._tree_scopes": "builds senders by public name",
    f"{PACKAGE}.testing._timed_tree": "builds timed senders by public name",
}


def test_private_modules_do_not_import_the_package_facade() -> None:
    # structexec/__init__.py re-exports every private module; a private module that imported it
    # back would depend on every other module of the package.
    edges = [e for e in import_edges() if e.imported == PACKAGE and _is_private(e.importer)]
    offenders = [str(e) for e in edges if e.importer not in FACADE_CLIENTS]
    assert not offenders, "private modules importing structexec/__init__.py:\n" + "\n".join(
        offenders
    )
    # Keep the list of exceptions exact.
    assert {e.importer for e in edges} == set(FACADE_CLIENTS)


def _all_imports(module: str) -> set[str]:
    """Every structexec module ``module`` imports, ``TYPE_CHECKING`` imports included."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    nodes = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    return {target for node in nodes for target in _targets(module, node)}


def test_task_driver_knows_frames_only_by_protocol() -> None:
    # The driver steps task frames through the TaskFrame protocol it declares; _task.py
    # implements it and imports the driver. Not even a type-checking import goes back.
    assert f"{PACKAGE}._coro._task_driver" in _all_imports(f"{PACKAGE}._coro._task")
    assert f"{PACKAGE}._coro._task" not in _all_imports(f"{PACKAGE}._coro._task_driver")


def test_replacement_api_does_not_know_its_backends() -> None:
    # [exec.sysctxrepl]: the interface module neither defines nor imports an implementation;
    # the package facade installs the default one's factory.
    imported = _all_imports(f"{PACKAGE}._parallel._replacement_api")
    assert not {m for m in imported if m.startswith(f"{PACKAGE}.backends")}, imported


@pytest.mark.parametrize(
    ("source", "importer", "expected"),
    [
        ("from ._env import env", "structexec._core._protocol", ["structexec._core._env"]),
        ("from . import _env", "structexec._core._protocol", ["structexec._core._env"]),
        (
            "from .._core._env import env",
            "structexec._algorithms._then",
            ["structexec._core", "structexec._core._env"],
        ),
        (
            "from .._core import _env",
            "structexec._algorithms._then",
            ["structexec._core", "structexec._core._env"],
        ),
        (
            "from .._core import _env",
            "structexec.backends._common",
            ["structexec._core", "structexec._core._env"],
        ),
        ("from . import _common", "structexec.backends", ["structexec.backends._common"]),
        (
            "from ..backends import BackendError",
            "structexec._parallel._replacement_api",
            ["structexec.backends"],
        ),
        (
            "from ..backends._common import BackendError",
            "structexec._parallel._replacement_api",
            ["structexec.backends", "structexec.backends._common"],
        ),
        ("from ._common import BackendError", "structexec.backends._thread_pool",
         ["structexec.backends._common"]),
        (
            "import structexec.backends",
            "structexec._parallel._replacement_api",
            ["structexec.backends"],
        ),
        (
            "from structexec import BackendError",
            "structexec._parallel._replacement_api",
            ["structexec"],
        ),
        ("import trio", "structexec._algorithms._then", []),
        (
            "def f():\n    from ._task import _TaskOp\n",
            "structexec._coro._task_driver",
            ["structexec._coro._task"],
        ),
        (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ._task import _TaskOp\n",
            "structexec._coro._task_driver",
            [],
        ),
        (
            "import typing\nif typing.TYPE_CHECKING:\n    pass\nelse:\n    from ._task import T\n",
            "structexec._coro._task_driver",
            ["structexec._coro._task"],
        ),
    ],
)
def test_edges_of_one_module(source: str, importer: str, expected: list[str]) -> None:
    found: set[str] = set()
    for node in _runtime_imports(ast.parse(source)):
        for target in _targets(importer, node):
            found.update(t for t in _with_parent_packages(importer, target) if t != importer)
    assert sorted(found) == expected


#: The layers, bottom first (docs/internals.md "The layers"). A module may import modules of
#: its own layer and of lower ones; layers of the same rank do not import each other.
LAYERS = {
    "_core": 0,
    "_algorithms": 1,
    "_schedulers": 2,
    "_trio": 3,
    "_parallel": 3,
    "_coro": 4,
    "_sequence": 4,
    "_scopes": 5,
    "backends": 6,
    "testing": 7,
}


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_every_private_module_is_in_a_layer() -> None:
    # Nothing private is left flat in structexec/ (the facade and the subpackages only).
    flat = [m for m in MODULES if m.count(".") == 1 and _layer(m) not in LAYERS]
    assert not flat, f"modules outside the layered subpackages: {flat}"


def test_imports_only_go_down_the_layers() -> None:
    upward = []
    for edge in import_edges():
        if edge.importer == PACKAGE:
            continue  # the facade re-exports everything
        mine, theirs = _layer(edge.importer), _layer(edge.imported)
        if theirs == "" or mine == theirs:
            continue
        if LAYERS[theirs] >= LAYERS[mine] and edge.importer not in FACADE_CLIENTS:
            upward.append(str(edge))
    assert not upward, "imports that go up (or across) the layers:\n" + "\n".join(upward)


def test_the_core_never_imports_trio() -> None:
    offenders = []
    for name, path in MODULES.items():
        if _layer(name) != "_core":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                mods = [node.module or ""]
            else:
                continue
            if any(m == "trio" or m.startswith("trio.") for m in mods):
                offenders.append(f"{name} (line {node.lineno})")
    assert not offenders, f"_core modules importing trio: {offenders}"


def test_layer_checks_catch_an_upward_import() -> None:
    # A guard: the rule above is not vacuous.
    assert LAYERS[_layer("structexec._scopes._spawn")] > LAYERS[_layer("structexec._core._env")]
    assert _layer("structexec._core._env") == "_core"
