"""The hooks through which ``sx.operation_tree()`` sees operation states: ``_sx_describe()`` and
``_sx_children()`` (``_core/_contracts.py`` ``Describable``, ``HasChildren``; the records of
``_core/_snapshot.py``; docs/internals.md "Introspection").

A state that describes itself is shown as it says, a state that names its children is walked
through them, and no hook raises on a state that is still being set up (made without
``__init__``, as another thread may be between allocating it and assigning its fields).
"""

from __future__ import annotations

import io
from typing import Any

import pytest

import structexec as sx
from structexec._algorithms._timed import TimerOp
from structexec._core import _contracts as c
from structexec._core._snapshot import ROOTS, Waiting
from structexec._parallel._parallel_scheduler import _ScheduleOp
from structexec._parallel._remote_call import RemoteThenOp
from structexec._scopes._introspect_build import HOSTED_LOCALS
from structexec._scopes._join import _JoinOp
from structexec._scopes._site import HOSTED_CODES
from structexec._trio._coroutine_sender import TrioHostedOp

_WAITS = (TimerOp, TrioHostedOp, _ScheduleOp, RemoteThenOp, _JoinOp)


def _all_subclasses(cls: type) -> list[type]:
    out = [cls]
    for sub in cls.__subclasses__():
        out.extend(_all_subclasses(sub))
    return out


class _Op:
    """A user's operation state: pending until :meth:`finish`."""

    def __init__(self, rcvr: Any, words: str | None, child: _Op | None) -> None:
        self._rcvr = rcvr
        self._words = words
        # kept under a name the slot walk never follows (an environment's): only a declared
        # _sx_children() leads there
        self._env = child

    def start(self) -> None:
        pass

    def finish(self) -> None:
        sx.set_value(self._rcvr)


class _Described(_Op):
    def _sx_describe(self) -> Waiting | None:
        return None if self._words is None else Waiting(self._words, "my_scheduler")


class _Parent(_Op):
    def _sx_children(self) -> tuple[object, ...]:
        return (self._env,)


class _Pending(sx.Sender[None]):
    def __init__(self, make: Any) -> None:
        self.make = make
        self.ops: list[_Op] = []

    def connect(self, rcvr: Any) -> _Op:
        op: _Op = self.make(rcvr)
        self.ops.append(op)
        return op

    def get_completion_signatures(self, env: Any = None) -> Any:
        return sx.completion_signatures(sx.set_value_t())


def _state_of(scope_name: str) -> tuple[str, str | None]:
    [s] = [s for s in sx.operation_tree() if s.name == scope_name]
    [op] = s.operations
    assert f"      {op.state}\n" in sx.dump(io.StringIO()) + "\n"  # printed as it is
    return op.state, op.scheduler


def _run_pending(make: Any, name: str) -> tuple[str, str | None]:
    """Spawn one pending operation made by ``make`` into a scope, take its state from a
    snapshot, then complete it and join the scope."""
    scope = sx.simple_counting_scope(name=name)
    sndr = _Pending(make)
    scope.spawn(sndr)
    try:
        return _state_of(name)
    finally:
        for op in sndr.ops:
            op.finish()
        sx.sync_wait(scope.join())


def test_a_state_that_describes_itself_is_shown_as_it_says() -> None:
    state, sched = _run_pending(
        lambda r: _Described(r, "waiting for the reply of the modem", None), "self-described"
    )
    assert (state, sched) == ("waiting for the reply of the modem", "my_scheduler")
    # nothing to show (None): the usual words
    assert _run_pending(lambda r: _Described(r, None, None), "quiet") == ("running", None)


def test_a_state_that_names_its_children_is_walked_through_them() -> None:
    def make(rcvr: Any) -> _Op:
        inner = _Described(None, "deep inside", None)
        return _Parent(rcvr, None, inner)

    assert _run_pending(make, "children") == ("deep inside", "my_scheduler")
    # without _sx_children the walk does not look under `_env` (an environment's name)
    assert _run_pending(
        lambda r: _Op(r, None, _Described(None, "hidden", None)), "no-children"
    ) == ("running", None)


class _Broken(_Op):
    def _sx_describe(self) -> Waiting | None:
        raise RuntimeError("a hook that fails")

    def _sx_children(self) -> tuple[object, ...]:
        raise RuntimeError("a hook that fails")


def test_a_hook_that_raises_does_not_break_the_snapshot() -> None:
    assert _run_pending(lambda r: _Broken(r, None, None), "broken") == ("running", None)


def test_the_library_states_declare_the_hooks() -> None:
    assert ROOTS, "no root class registered"
    for cls in [*ROOTS, *_WAITS]:
        assert isinstance(object.__new__(cls), c.Describable), cls
    assert isinstance(object.__new__(TimerOp), c.HasChildren)
    assert isinstance(object.__new__(_JoinOp), c.HasChildren)


@pytest.mark.parametrize(
    "cls",
    sorted({k for root in [*ROOTS, *_WAITS] for k in _all_subclasses(root)}, key=repr),
    ids=lambda k: k.__qualname__,
)
def test_no_hook_raises_on_a_state_being_set_up(cls: type) -> None:
    """A state allocated but not initialised yet (another thread between ``__new__`` and
    ``__init__``): its ``_sx_describe()`` answers ``None`` (or a constant wait), never
    raises; so does ``_sx_children()``."""
    o = object.__new__(cls)
    rec = o._sx_describe()  # type: ignore[attr-defined]
    assert rec is None or isinstance(rec, Waiting), (cls, rec)
    children = getattr(o, "_sx_children", None)
    if children is not None:
        assert isinstance(children(), tuple)


def test_every_hosted_wrapper_has_the_locals_the_tree_reads() -> None:
    """The tree reads a hosted task's coroutine, site, future state or operation from the
    frame of its wrapper by name: a wrapper whose variable was renamed fails here, not
    silently in ``sx.dump()``."""
    kinds = set(HOSTED_CODES.values())
    assert kinds == set(HOSTED_LOCALS), (kinds, set(HOSTED_LOCALS))
    for code, kind in HOSTED_CODES.items():
        missing = set(HOSTED_LOCALS[kind]) - set(code.co_varnames)
        assert not missing, (code.co_name, missing)
