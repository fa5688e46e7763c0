"""A counting scope behaves as a trio nursery where the spec forces no difference.

[exec.scope.counting]; docs/scopes.md "Which one do I want?". Every test runs the same code
against ``trio.open_nursery()`` and ``sx.counting_scope()`` (the ``opener`` fixture), so any
difference shows up as a failing parameter.
"""

from __future__ import annotations

import contextvars
import sys
import traceback
from collections.abc import Callable
from typing import Any

import pytest
import trio
import trio.testing
from _helpers import cyclic_garbage_of
from _subproc import HangGuard

import structexec as sx

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup, ExceptionGroup


@pytest.fixture(params=["nursery", "counting_scope"])
def opener(request: pytest.FixtureRequest) -> Callable[[], Any]:
    if request.param == "nursery":
        return trio.open_nursery
    return sx.counting_scope


@pytest.fixture(autouse=True)
async def hang_guard() -> Any:
    g = HangGuard(trio.lowlevel.current_trio_token(), 15.0)
    yield
    g.close()


async def test_cancel_scope_cancel_cancels_body_and_children(
    opener: Callable[[], Any], autojump_clock: trio.testing.MockClock
) -> None:
    events: list[str] = []

    async def child() -> None:
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            events.append("child")
            raise

    async with opener() as n:
        n.start_soon(child)
        await trio.sleep(1)
        n.cancel_scope.cancel()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            events.append("body")
            raise
    assert sorted(events) == ["body", "child"]
    assert trio.current_time() == pytest.approx(1)
    assert n.cancel_scope.cancelled_caught


async def test_cancel_scope_cancel_stops_associated_senders() -> None:
    """For a counting_scope the cancel also requests stop: senders see their token fire."""
    toks: list[Any] = []
    async with sx.counting_scope() as scope:
        scope.spawn(sx.read_env(sx.get_stop_token) | sx.then(toks.append))
        assert not toks[0].stop_requested()
        scope.cancel_scope.cancel(reason="enough")
        await trio.sleep(0)
    assert toks[0].stop_requested()
    assert scope.cancel_scope.cancelled_caught


async def test_cancel_scope_deadline(
    opener: Callable[[], Any], autojump_clock: trio.testing.MockClock
) -> None:
    async with opener() as n:
        n.start_soon(trio.sleep_forever)
        n.cancel_scope.relative_deadline = 5
        await trio.sleep_forever()
    assert trio.current_time() == pytest.approx(5)


async def test_enclosing_cancellation_cancels_children_at_once(
    opener: Callable[[], Any], autojump_clock: trio.testing.MockClock
) -> None:
    """A nursery's children are cancelled by an enclosing cancel scope as soon as it is
    cancelled, while the body still runs; so are a counting_scope's hosted tasks."""
    events: list[str] = []

    async def child() -> None:
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            events.append(f"child at {trio.current_time():.0f}")
            raise

    with trio.move_on_after(1):
        async with opener() as n:
            n.start_soon(child)
            with trio.CancelScope(shield=True):
                await trio.sleep(3)  # the body is shielded; the child is not
            events.append("body done")
    assert events == ["child at 1", "body done"]


async def test_simple_counting_scope_children_are_not_cancelled_by_enclosing_scope(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The deliberate difference: simple_counting_scope's work cannot be cancelled."""
    done: list[float] = []

    async def child() -> None:
        await trio.sleep(3)
        done.append(trio.current_time())

    with trio.move_on_after(1):
        async with sx.simple_counting_scope() as scope:
            scope.start_soon(child)
    assert done == [pytest.approx(3)]
    with pytest.raises(RuntimeError, match="only inside"):
        _ = sx.simple_counting_scope().cancel_scope  # not entered yet


var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="outer")


async def test_each_task_gets_its_own_copy_of_the_context(opener: Callable[[], Any]) -> None:
    seen: list[str] = []

    def make(tag: str) -> Any:
        var.set(tag)  # runs when the task is created: must not leak into the caller

        async def body() -> None:
            seen.append(var.get())
            var.set("changed in task")

        return body()

    async with opener() as n:
        n.start_soon(make, "a")
        n.start_soon(make, "b")
    assert var.get() == "outer"
    assert sorted(seen) == ["a", "b"]


async def test_child_traceback_starts_at_the_users_function(opener: Callable[[], Any]) -> None:
    async def failing() -> None:
        raise ValueError("x")

    with pytest.raises(ExceptionGroup) as ei:
        async with opener() as n:
            n.start_soon(failing)
    (err,) = ei.value.exceptions
    first = traceback.extract_tb(err.__traceback__)[0]
    assert first.name == "failing"


async def test_group_context_is_not_the_body_exception(opener: Callable[[], Any]) -> None:
    """The exit's group contains the body's exception; its __context__ must not point back at
    it (a context loop)."""

    async def failing() -> None:
        raise ValueError("child")

    with pytest.raises(BaseExceptionGroup) as ei:
        async with opener() as n:
            n.start_soon(failing)
            try:
                await trio.sleep_forever()
            finally:
                raise KeyError("body")
    group = ei.value
    assert group.__context__ is None or group.__context__ not in group.exceptions


async def test_no_cyclic_garbage_after_an_enclosing_cancellation(
    opener: Callable[[], Any],
) -> None:
    """An enclosing cancellation leaves nothing for the cycle collector (as a nursery)."""

    async def run_once() -> None:
        with trio.CancelScope() as cs:
            async with opener() as n:
                n.start_soon(trio.sleep_forever)
                cs.cancel()
                await trio.sleep_forever()

    await run_once()  # warm-up: caches, lazily created objects
    assert await cyclic_garbage_of(run_once) == 0  # the code under test's (tests/_helpers.py)


async def test_entering_while_cancelled(opener: Callable[[], Any]) -> None:
    reached: list[str] = []
    with trio.CancelScope() as cs:
        cs.cancel()
        async with opener():
            reached.append("body")
            await trio.sleep(0)
            reached.append("unreachable")
    assert reached == ["body"]
