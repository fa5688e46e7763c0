"""The rule of what leaves an ``async with`` scope block, as pure functions
(``structexec._scopes._exit``): checked without trio, and against what a trio nursery, a
``counting_scope`` and a ``simple_counting_scope`` used as nurseries raise for the same
outcomes (docs/scopes.md "What happens when things fail")."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

import structexec as sx
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


def test_outcome_absorbs_nothing_while_an_enclosing_cancellation_is_passed_on() -> None:
    # As a trio cancel scope whose parent is cancelled too: the block's own Cancelled is not
    # taken out; with nothing else to pass on, it leaves (a nursery's exit would pass it on).
    own, enclosing = trio.Cancelled._create(), trio.Cancelled._create()
    assert _exit.outcome([], own, cancelled_here=True) is None
    out = _exit.outcome([], own, cancelled=enclosing, cancelled_here=True)
    assert out is not None and _exit.has_cancelled(out)


# -- against a trio nursery, and the scopes used as nurseries


@dataclass(frozen=True)
class Case:
    """One block: what the body raises (and whether before the children ran), what each
    child raises (or ``"sleep"``: it sleeps 5 s), whether the body cancels the block itself,
    the strictness, and the enclosing cancellation: ``None``, ``"before"`` (the enclosing
    cancel scope is cancelled before the block is entered), ``"body"`` (the body cancels
    it), ``"deadline"`` (its deadline passes while the body sleeps)."""

    body: str | None
    children: tuple[str, ...]
    body_first: bool
    cancel_here: bool
    strict: bool
    enclosing: str | None = None


_KINDS: dict[str, Callable[[], BaseException]] = {
    "ValueError": lambda: ValueError("v"),
    "TypeError": lambda: TypeError("t"),
    "KeyError": lambda: KeyError("k"),
    "group": lambda: ExceptionGroup("user", [ValueError("in group")]),
    "KeyboardInterrupt": lambda: KeyboardInterrupt("ki"),
    "SystemExit": lambda: SystemExit("se"),
}
_ERRORS = ["ValueError", "TypeError", "KeyError"]
_INTERRUPTS = ["KeyboardInterrupt", "SystemExit"]

cases = st.builds(
    Case,
    body=st.none() | st.sampled_from(sorted(_KINDS)),
    children=st.lists(st.sampled_from([*_ERRORS, *_INTERRUPTS, "sleep"]), max_size=3).map(tuple),
    body_first=st.booleans(),
    cancel_here=st.booleans(),
    strict=st.booleans(),
    enclosing=st.sampled_from([None, "before", "body", "deadline"]),
)

#: The three blocks run with the same program: a trio nursery, and the scopes as nurseries.
OPENERS: dict[str, Callable[..., Any]] = {
    "nursery": trio.open_nursery,
    "counting_scope": sx.counting_scope,
    "simple_counting_scope": sx.simple_counting_scope,
}


@dataclass
class Ran:
    """What a block did: what left it (``inner``), what left the enclosing cancel scope
    around it (``outer``), the exceptions raised in the block in the order they were raised
    (``("body" | "child", exception)``), and whether the enclosing cancel scope was cancelled
    when the block was left."""

    inner: BaseException | None
    outer: BaseException | None
    log: list[tuple[str, BaseException]]
    enclosing_cancelled: bool


async def _block(
    case: Case, opener: Callable[..., Any], log: list[tuple[str, BaseException]]
) -> Ran:
    async def child(kind: str) -> None:
        if kind == "sleep":
            try:
                await trio.sleep(5)
            except BaseException as e:
                log.append(("child", e))
                raise
            return
        e = _KINDS[kind]()
        log.append(("child", e))
        raise e

    enclosing = trio.CancelScope()
    if case.enclosing == "before":
        enclosing.cancel()
    elif case.enclosing == "deadline":
        enclosing.deadline = trio.current_time() + 1
    inner = outer = None
    cancelled_at_exit = False
    try:
        with enclosing:
            try:
                async with opener(strict_exception_groups=case.strict) as n:
                    try:
                        for kind in case.children:
                            n.start_soon(child, kind)
                        if case.enclosing == "body":
                            enclosing.cancel()
                        if case.cancel_here:
                            n.cancel_scope.cancel()
                            await trio.lowlevel.checkpoint()  # the body ends Cancelled
                        if not case.body_first:
                            with trio.CancelScope(shield=True):
                                await trio.testing.wait_all_tasks_blocked()  # children ran
                        if case.enclosing == "deadline":
                            await trio.sleep(2)  # the deadline passes: the body ends Cancelled
                        if case.body is not None:
                            raise _KINDS[case.body]()
                    except BaseException as e:
                        log.append(("body", e))
                        raise
            except BaseException as e:
                inner = e
                cancelled_at_exit = enclosing.cancel_called
                raise
            cancelled_at_exit = enclosing.cancel_called
    except BaseException as e:
        outer = e
    return Ran(inner, outer, log, cancelled_at_exit)


def _run(case: Case, which: str) -> Ran:
    log: list[tuple[str, BaseException]] = []

    async def main() -> Ran:
        return await _block(case, OPENERS[which], log)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", trio.TrioDeprecationWarning)  # strict=False
        return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def _rule(case: Case, ran: Ran) -> BaseException | None:
    """The outcomes the block saw, given to the pure rule: the children's errors and
    interrupts in the order they were raised; the body's exception after the errors that
    came before it; an enclosing cancellation to pass on if the enclosing scope was
    cancelled when the block was left and a ``Cancelled`` reached the body or a child (a
    nursery is never the source of one; a body's ``Cancelled`` is then that one). Otherwise
    a body's ``Cancelled`` is the block's own (``cancel_here``, or a child failed), which
    the block takes out."""
    errors: list[BaseException] = []
    interrupts: list[BaseException] = []
    body: BaseException | None = None
    arrived = 0
    cancelled: BaseException | None = None
    for who, e in ran.log:
        if isinstance(e, trio.Cancelled):
            if ran.enclosing_cancelled:
                cancelled = cancelled or e
            elif who == "body":
                body = e
        elif who == "body":
            body, arrived = e, len(errors)
        elif isinstance(e, Exception):
            errors.append(e)
        else:
            interrupts.append(e)
    return _exit.outcome(
        errors,
        body,
        arrived=arrived,
        interrupts=interrupts,
        cancelled=cancelled,
        cancelled_here=case.cancel_here or isinstance(body, trio.Cancelled),
        strict=case.strict,
    )


def _leaf_shape(e: BaseException | None) -> Any:
    """``e`` as nested lists of type names."""
    if e is None:
        return None
    if isinstance(e, BaseExceptionGroup):
        return [_leaf_shape(x) for x in e.exceptions]
    return type(e).__name__


def _interrupts_last(e: BaseException | None, body: BaseException | None) -> Any:
    """:func:`_leaf_shape`, with the top group's interrupts that are not the body's own
    after its other members (a nursery lists them in the order they arrived, a scope after
    the errors: docs/scopes.md, the notes of "What happens when things fail")."""
    if not isinstance(e, BaseExceptionGroup):
        return _leaf_shape(e)
    first = [m for m in e.exceptions if m is body or not _exit.is_interrupt(m)]
    last = [m for m in e.exceptions if m is not body and _exit.is_interrupt(m)]
    return [_leaf_shape(x) for x in first + last]


def _escaping(e: BaseException | None) -> BaseException | None:
    """What a cancelled cancel scope around the block lets out of ``e``: its ``Cancelled``s
    taken out, a loose group of one collapsed (as trio's ``CancelScope.__exit__``)."""
    if e is None or isinstance(e, trio.Cancelled):
        return None
    if isinstance(e, BaseExceptionGroup):
        rest = e.split(trio.Cancelled)[1]
        return None if rest is None else _trio_compat.collapse_exception_group(rest)
    return e


def _view(e: BaseException | None, enclosing_cancelled: bool, body: BaseException | None) -> Any:
    """What the code around the block can tell of ``e``: its shape; when the enclosing scope
    was cancelled, ``"Cancelled"`` for cancellations alone, else the shape of what leaves
    the enclosing scope (how many ``Cancelled``s a group holds, and where, is the
    nursery's business: trio adds one per cancelled child)."""
    if not enclosing_cancelled or e is None:
        return _interrupts_last(e, body)
    left = _escaping(e)
    return "Cancelled" if left is None else _interrupts_last(left, body)


def _bare_identity(got: BaseException | None, raised: list[BaseException]) -> Any:
    """Which of the raised exceptions left itself (not in a group made for it), if any. (A
    group's identity is not compared: trio's cancel scope may hand on a copy of it.)"""
    if got is None or isinstance(got, BaseExceptionGroup):
        return None
    return next((i for i, m in enumerate(raised) if got is m), -1)


def _sorted(shape: Any) -> Any:
    """``shape`` with every group's members sorted (trio runs new tasks in a random order)."""
    if isinstance(shape, list):
        return sorted((_sorted(x) for x in shape), key=repr)
    return shape


def _check(case: Case, which: str, ran: Ran) -> None:
    want = _rule(case, ran)
    body = next((e for who, e in ran.log if who == "body"), None)
    raised = [e for _, e in ran.log]
    where = (which, case, ran.log, ran.enclosing_cancelled)
    assert _view(want, ran.enclosing_cancelled, body) == _view(
        ran.inner, ran.enclosing_cancelled, body
    ), where
    # What leaves the enclosing cancel scope is exactly what leaves the rule's block there.
    outer_want = _escaping(want) if ran.enclosing_cancelled else want
    assert _interrupts_last(outer_want, body) == _interrupts_last(ran.outer, body), where
    assert _bare_identity(outer_want, raised) == _bare_identity(ran.outer, raised), where


def _compare(case: Case) -> None:
    if case.cancel_here and case.body is not None:
        # A body cancelled by its block cannot raise afterwards (the checkpoint raised).
        case = Case(None, case.children, case.body_first, True, case.strict, case.enclosing)
    ran = {which: _run(case, which) for which in OPENERS}
    for which, r in ran.items():
        _check(case, which, r)
    # counting_scope as a nursery: the same outcome as trio's, up to the order of arrival
    # (trio runs new tasks in a random order). (simple_counting_scope's work is not
    # cancelled by a failing sibling nor by an enclosing cancellation: compared with the
    # rule only.)
    t, c = ran["nursery"], ran["counting_scope"]
    assert t.enclosing_cancelled == c.enclosing_cancelled, case
    assert _sorted(_view(t.inner, t.enclosing_cancelled, None)) == _sorted(
        _view(c.inner, c.enclosing_cancelled, None)
    ), (case, t.log, c.log)
    assert _sorted(_leaf_shape(t.outer)) == _sorted(_leaf_shape(c.outer)), (case, t.log, c.log)


@settings(deadline=None, max_examples=150)
@given(cases)
def test_rule_matches_a_nursery_and_the_scopes(case: Case) -> None:
    _compare(case)


@pytest.mark.parametrize("strict", [True, False])
def test_rule_matches_a_nursery_on_a_known_case(strict: bool) -> None:
    # The body fails first, then two children (in trio's order): all three, in the order
    # they failed, in one group.
    case = Case("KeyError", ("ValueError", "TypeError"), True, False, strict)
    ran = _run(case, "nursery")
    made = [e for who, e in ran.log if who == "child"]
    assert _leaf_shape(ran.inner) == ["KeyError", *(type(e).__name__ for e in made)]
    assert sorted(type(e).__name__ for e in made) == ["TypeError", "ValueError"]
    assert _leaf_shape(_rule(case, ran)) == _leaf_shape(ran.inner)
    _compare(case)


@pytest.mark.parametrize("which", ["nursery", "counting_scope"])
def test_a_task_cancelled_from_outside_passes_the_cancellation_on(which: str) -> None:
    # The enclosing scope is cancelled; a child is cancelled by it at once; the body waits
    # (shielded) until it has ended and leaves normally. As a nursery, the block passes the
    # child's Cancelled on: the code after the block does not run. (counting_scope's exit
    # left nothing when no work was left to wait for, and the code after the block ran.)
    case = Case(None, ("sleep",), False, False, True, "before")
    ran = _run(case, which)
    assert [(who, type(e)) for who, e in ran.log] == [("child", trio.Cancelled)]
    assert ran.inner is not None and _exit.has_cancelled(ran.inner)
    assert _escaping(ran.inner) is None and ran.outer is None


@pytest.mark.parametrize(
    "case",
    [
        Case(None, ("KeyboardInterrupt", "ValueError"), True, False, True),
        Case("ValueError", ("SystemExit",), False, False, True),
        Case("KeyboardInterrupt", ("TypeError",), False, False, False),
        Case(None, ("KeyboardInterrupt",), True, False, False, "deadline"),
        Case("SystemExit", ("sleep", "ValueError"), True, False, True, "before"),
        Case(None, ("ValueError", "sleep", "KeyboardInterrupt"), False, True, True, "body"),
    ],
)
def test_interrupts_beside_errors_and_an_enclosing_cancellation(case: Case) -> None:
    _compare(case)
