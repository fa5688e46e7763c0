"""The rule of what leaves an ``async with`` scope block, as pure functions
(``structexec._scopes._exit``): checked without trio, and against what a trio nursery raises
for the same outcomes (docs/scopes.md "What happens when things fail")."""

from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from structexec._scopes import _exit
from structexec._trio import _trio_compat

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup, ExceptionGroup

# -- without trio: the rule on plain exceptions


def shape(e: BaseException | None) -> Any:
    """``e`` as nested lists: a group is the list of its members' shapes, a leaf is
    ``(type name, message)``."""
    if e is None:
        return None
    if isinstance(e, BaseExceptionGroup):
        return [shape(x) for x in e.exceptions]
    return (type(e).__name__, str(e))


def test_errors_in_order_of_arrival_with_the_body_between() -> None:
    a, b, body = ValueError("a"), TypeError("b"), KeyError("body")
    out, ours = _exit.combine([a, b], [], body, 1, None, True)
    assert ours and shape(out) == [("ValueError", "a"), ("KeyError", "'body'"), ("TypeError", "b")]
    assert out is not None and out.exceptions[1] is body  # type: ignore[attr-defined]


def test_interrupts_after_the_errors_and_cancellation() -> None:
    err, ki = ValueError("e"), KeyboardInterrupt("ki")
    cancelled = RuntimeError("stands for the passed-on cancellation")
    out, ours = _exit.combine([err], [ki], None, 0, cancelled, True)
    assert ours and [type(x) for x in out.exceptions] == [  # type: ignore[union-attr]
        ValueError,
        RuntimeError,
        KeyboardInterrupt,
    ]


def test_a_lone_interrupt_is_bare_and_takes_the_body_exception_along() -> None:
    ki = KeyboardInterrupt()
    assert _exit.combine([], [ki], None, 0, None, True) == (ki, False)
    body = ValueError("body")
    out, ours = _exit.combine([], [ki], body, 0, None, True)
    assert ours and shape(out) == [("ValueError", "body"), ("KeyboardInterrupt", "")]


def test_a_group_made_by_a_loose_block_carries_trios_note() -> None:
    out, _ = _exit.combine([ValueError()], [], None, 0, None, False)
    assert _trio_compat.LOOSE_NOTE in getattr(out, "__notes__", [])
    out, _ = _exit.combine([ValueError()], [], None, 0, None, True)
    assert not hasattr(out, "__notes__")


def test_combine_does_not_mutate_its_inputs() -> None:
    errors: list[BaseException] = [ValueError()]
    interrupts: list[BaseException] = [KeyboardInterrupt()]
    _exit.combine(errors, interrupts, TypeError(), 0, None, True)
    _exit.combine([], interrupts, TypeError(), 0, None, True)
    assert len(errors) == 1 and len(interrupts) == 1


def test_finish_strict_wraps_a_lone_exception_loose_lets_the_body_through() -> None:
    body = ValueError("body")
    out = _exit.finish(body, body, False, True)
    assert shape(out) == [("ValueError", "body")]
    assert _exit.finish(body, body, False, False) is None  # the body's own, unchanged
    user = ExceptionGroup("user", [ValueError("x")])
    assert shape(_exit.finish(user, user, False, True)) == [[("ValueError", "x")]]
    assert _exit.finish(user, user, False, False) is None  # a user's group is left alone


def test_outcome_of_nothing_is_nothing() -> None:
    assert _exit.outcome([], None) is None
    assert _exit.outcome([], None, strict=False) is None


# -- against a trio nursery


@dataclass(frozen=True)
class Case:
    """One block: what the body raises (and whether before the children ran), what each
    child raises, whether the body cancels the block itself, the strictness."""

    body: str | None
    children: tuple[str, ...]
    body_first: bool
    cancel_here: bool
    strict: bool


_KINDS = {
    "ValueError": lambda: ValueError("v"),
    "TypeError": lambda: TypeError("t"),
    "KeyError": lambda: KeyError("k"),
    "group": lambda: ExceptionGroup("user", [ValueError("in group")]),
}

cases = st.builds(
    Case,
    body=st.none() | st.sampled_from(sorted(_KINDS)),
    children=st.lists(st.sampled_from(["ValueError", "TypeError", "KeyError"]), max_size=3).map(
        tuple
    ),
    body_first=st.booleans(),
    cancel_here=st.booleans(),
    strict=st.booleans(),
)


async def _nursery_block(
    case: Case, made: list[BaseException], body: list[BaseException]
) -> BaseException | None:
    """Run the case in a trio nursery; what left the block (``made``: the children's
    exceptions in the order they were raised; ``body``: the body's)."""

    async def child(kind: str) -> None:
        e = _KINDS[kind]()
        made.append(e)
        raise e

    try:
        async with trio.open_nursery(strict_exception_groups=case.strict) as n:
            for kind in case.children:
                n.start_soon(child, kind)
            if case.cancel_here:
                n.cancel_scope.cancel()
                await trio.lowlevel.checkpoint()  # the body ends with the block's Cancelled
            if not case.body_first:
                with trio.CancelScope(shield=True):
                    await trio.testing.wait_all_tasks_blocked()  # the children have failed
            if case.body is not None:
                e = _KINDS[case.body]()
                body.append(e)
                raise e
    except BaseException as e:
        return e
    return None


def _run_nursery(
    case: Case,
) -> tuple[BaseException | None, list[BaseException], BaseException | None]:
    """What left the nursery block, the children's exceptions, the body's."""
    made: list[BaseException] = []
    body: list[BaseException] = []

    async def main() -> BaseException | None:
        return await _nursery_block(case, made, body)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", trio.TrioDeprecationWarning)  # strict=False
        got = trio.run(main)
    return got, made, (body[0] if body else None)


def _rule(
    case: Case, errors: list[BaseException], body_exc: BaseException | None
) -> BaseException | None:
    """The same outcomes given to the pure rule: the errors the children raised in order,
    the body's exception (a body cancelled by its block has none of its own) after the
    errors that came before it."""
    arrived = 0 if case.body_first else len(errors)
    return _exit.outcome(
        errors, body_exc, arrived=arrived, cancelled_here=case.cancel_here, strict=case.strict
    )


def _leaf_shape(e: BaseException | None) -> Any:
    if e is None:
        return None
    if isinstance(e, BaseExceptionGroup):
        return [_leaf_shape(x) for x in e.exceptions]
    return type(e).__name__


def _bare_identity(got: BaseException | None, raised: list[BaseException]) -> Any:
    """Which of the raised exceptions left itself (not in a group made for it), if any. (A
    group's identity is not compared: trio's cancel scope may hand on a copy of it.)"""
    if got is None or isinstance(got, BaseExceptionGroup):
        return None
    return next((i for i, m in enumerate(raised) if got is m), -1)


@settings(deadline=None, max_examples=120)
@given(cases)
def test_rule_matches_a_trio_nursery(case: Case) -> None:
    if case.cancel_here and case.body is not None:
        # A body cancelled by its block cannot raise afterwards (the checkpoint raised).
        case = Case(None, case.children, case.body_first, True, case.strict)
    got, made, body = _run_nursery(case)
    want = _rule(case, made, body)
    raised = [*made, *([] if body is None else [body])]
    assert _leaf_shape(want) == _leaf_shape(got), case
    assert _bare_identity(want, raised) == _bare_identity(got, raised), case


@pytest.mark.parametrize("strict", [True, False])
def test_rule_matches_a_nursery_on_a_known_case(strict: bool) -> None:
    # The body fails first, then two children (in trio's order): all three, in the order
    # they failed, in one group.
    case = Case("KeyError", ("ValueError", "TypeError"), True, False, strict)
    got, made, body = _run_nursery(case)
    assert _leaf_shape(got) == ["KeyError", *(type(e).__name__ for e in made)]
    assert sorted(type(e).__name__ for e in made) == ["TypeError", "ValueError"]
    assert _leaf_shape(_rule(case, made, body)) == _leaf_shape(got)
