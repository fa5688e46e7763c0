"""Declared dependencies and imports agree: every third-party
module the package imports is declared, as a dependency or in an extra, and every
dependency is imported somewhere in the package."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parent.parent

#: Import name -> distribution name, where they differ or one distribution provides several.
DISTRIBUTION = {"distributed": "dask", "_pytest": "pytest"}


def _declared() -> tuple[set[str], set[str]]:
    """(core dependencies, dependencies of any extra), as normalised distribution names."""
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]

    def names(reqs: list[str]) -> set[str]:
        return {re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0].lower().replace("_", "-") for r in reqs}

    extras: set[str] = set()
    for reqs in meta.get("optional-dependencies", {}).values():
        extras |= names(reqs)
    return names(meta["dependencies"]), extras


def _imported() -> dict[str, list[str]]:
    """Third-party top-level modules imported by the package -> where."""
    found: dict[str, list[str]] = {}
    stdlib = set(sys.stdlib_module_names)
    for path in sorted((ROOT / "structexec").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        # ``if TYPE_CHECKING:`` blocks never run: type checkers bring their own
        # ``typing_extensions`` stubs, so an import there is not a run-time dependency.
        checking_only = {
            id(n)
            for block in ast.walk(tree)
            if isinstance(block, ast.If) and ast.unparse(block.test).endswith("TYPE_CHECKING")
            for stmt in block.body
            for n in ast.walk(stmt)
        }
        for node in ast.walk(tree):
            if id(node) in checking_only:
                continue
            mods: list[str] = []
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                mods = [node.module]
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "import_module"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                mods = [node.args[0].value]
            for m in mods:
                top = m.split(".")[0]
                if top in stdlib or top == "structexec":
                    continue
                found.setdefault(DISTRIBUTION.get(top, top).lower().replace("_", "-"), []).append(
                    f"{rel}:{node.lineno}"
                )
    return found


def test_every_imported_module_is_declared() -> None:
    core, extras = _declared()
    missing = {d: where for d, where in _imported().items() if d not in core | extras}
    assert not missing, f"imported but not declared in pyproject.toml: {missing}"


def test_every_core_dependency_is_imported() -> None:
    core, _ = _declared()
    imported = _imported()
    unused = sorted(d for d in core if d not in imported)
    assert not unused, f"declared in pyproject.toml but imported nowhere: {unused}"


def test_the_scan_sees_the_known_imports() -> None:
    imported = _imported()
    for dist in ("trio", "cloudpickle", "dask", "sortedcontainers"):
        assert dist in imported, dist
    assert "typing-extensions" not in imported
    assert "outcome" not in imported
