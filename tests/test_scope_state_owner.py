"""One owner per invariant: the association state of the counting scopes
([exec.counting.scopes.general]: the lock, the count, the seven states, the joins) is read and
written only by ``structexec/_scopes/_state.py`` (docs/internals.md §1).

Parses every module of ``structexec/_scopes`` with ``ast`` (nothing is imported) and fails on
an attribute access ``x._lock``, ``x._count`` or ``x._state`` outside ``_state.py``, and on an
import of the state constants or transition tables from anywhere but ``_state.py``.
"""

from __future__ import annotations

import ast
import gc
import weakref
from pathlib import Path

import pytest

import structexec as sx
from structexec._scopes._state import AssociationState

SCOPES = Path(__file__).resolve().parent.parent / "structexec" / "_scopes"
OWNER = "_state.py"
OWNED = frozenset({"_lock", "_count", "_state", "_joiners"})
TABLES = frozenset(
    {
        "UNUSED",
        "OPEN",
        "CLOSED",
        "OPEN_JOINING",
        "CLOSED_JOINING",
        "UNUSED_CLOSED",
        "JOINED",
        "ACCEPTS",
        "JOINING",
        "AFTER_CLOSE",
        "GOOD_TO_DROP",
        "JOIN_AT_ONCE",
        "NAMES",
    }
)


def _modules() -> list[Path]:
    return sorted(p for p in SCOPES.glob("*.py") if p.name != OWNER)


def _violations(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in OWNED:
            found.append(f"line {node.lineno}: .{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            names = {a.name for a in node.names} & TABLES
            if names:
                found.append(f"line {node.lineno}: imports {sorted(names)} from {node.module}")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in {"getattr", "setattr", "hasattr"}
            and len(node.args) >= 2
        ):
            # getattr(scope, "_state") and friends are accesses too
            a = node.args[1]
            if isinstance(a, ast.Constant) and a.value in OWNED:
                found.append(f"line {node.lineno}: {node.func.id}(..., {a.value!r})")
    return found


def test_the_scopes_package_is_where_we_look() -> None:
    names = {p.name for p in SCOPES.glob("*.py")}
    assert {OWNER, "_counting_scope.py", "_join.py", "_nursery.py", "_spawn.py"} <= names


@pytest.mark.parametrize("path", _modules(), ids=lambda p: p.name)
def test_only_the_state_module_touches_the_association_state(path: Path) -> None:
    found = _violations(path.read_text(encoding="utf-8"))
    assert not found, (
        f"{path.name} touches the scope's association state directly ({'; '.join(found)}): "
        "call the methods of the scope's _state.AssociationState instead (scope._assoc: "
        "try_associate, disassociate, start_join, close, ...)"
    )


def test_the_state_module_owns_them() -> None:
    # The checker sees what it is meant to see: the owner itself has them all.
    found = " ".join(_violations((SCOPES / OWNER).read_text(encoding="utf-8")))
    for name in ("_lock", "_count", "_state", "_joiners"):
        assert f".{name}" in found


@pytest.mark.parametrize(
    ("source", "bad"),
    [
        ("scope._count += 1", True),
        ("lock = self._scope._lock", True),
        ("x = getattr(s, '_state', 0)", True),
        ("from ._state import ACCEPTS", True),
        ("from ._state import AssociationState", False),
        ("scope._assoc.try_associate()", False),
        ("self._phase = 1", False),
    ],
)
def test_the_checker(source: str, bad: bool) -> None:
    assert bool(_violations(source)) is bad


# --------------------------------------------------------------------------- composition


@pytest.mark.parametrize("kind", ["simple_counting_scope", "counting_scope"])
def test_a_scope_owns_its_state_which_keeps_no_reference_to_it(kind: str) -> None:
    """The association state is an object the scope owns (``scope._assoc``), not a base class;
    the token holds it directly; nothing in the state leads back to the scope, so a dropped
    scope is freed at once, without the cycle collector (its ``ResourceWarning``, if any,
    comes when the last reference goes)."""
    scope = getattr(sx, kind)(name="owned")
    assoc = scope._assoc
    assert not isinstance(scope, AssociationState) and type(assoc) is AssociationState
    assert scope.get_token()._assoc is assoc
    seen, todo = set(), [assoc]
    while todo:  # everything reachable from the state
        o = todo.pop()
        if id(o) in seen or isinstance(o, type):
            continue
        seen.add(id(o))
        assert o is not scope, "the association state refers back to its scope"
        todo.extend(gc.get_referents(o))
    ref = weakref.ref(scope)
    gc.disable()
    try:
        del scope
        assert ref() is None
    finally:
        gc.enable()
    assert assoc.state == "unused" and repr(assoc) == f"<{kind} 'owned' unused, 0 associated>"
