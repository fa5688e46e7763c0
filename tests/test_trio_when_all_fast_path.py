"""``await sx.when_all(<coroutines>)`` in a trio task: the nursery fast path vs the general path.

[exec.when.all] (values in argument order, first error wins and stops the siblings, an error beats a
stop, stopped, waits for all), docs/trio.md "Awaiting a sender",
docs/trio.md "trio cancellation becomes a stop request",
docs/trio.md "Coroutines are senders; a stop request cancels them",
docs/scopes.md "The nursery face: `async with`" (trio cancellation <-> stop request);
docs/trio.md "Awaiting a sender" (values convention), docs/trio.md "What happens when things fail"
(errors as they are, BaseException never an error; Cancelled vs Stopped).

``structexec._trio._when_all_nursery`` runs the coroutine children of an awaited ``when_all`` as
tasks of a nursery of the awaiting task (module docstring there). Every scenario here runs through
both paths -- the fast path and the general path (``FAST.when_all_nursery = False``: hosted
system tasks, each in its own shielded cancel scope, behind the generic when_all operation) --
and asserts identical observable outcomes: the value, the exception's type and identity,
Cancelled vs Stopped, the (virtual-clock) times and order of the children's events, that every
child has finished before the await returns or raises, what the next checkpoint does after a
value that arrived despite a cancellation, and no leaked task. Each run also records which path
its children ran on (the parent nursery of the child task), so a test cannot silently compare the
general path with itself.

Documented differences (asserted in ``test_documented_differences``, so that they cannot change
unnoticed): the child tasks' ``parent_nursery`` is the new nursery instead of the system
nursery; a ``trio.Cancelled`` seen inside a child because the awaiting task was cancelled
carries that cancellation's trio metadata (``reason``) instead of an ``"explicit"`` cancel with
no reason; a deadline put on an enclosing scope while the children run is visible to them
(``trio.current_effective_deadline()``).

Corners that the fast path leaves to the general path: a child that is not a fresh coroutine
object, a finite deadline on the awaiting task (hosted children do not see it), an active
custom domain, an await inside a structexec-hosted coroutine.

When children return values despite a ``KeyboardInterrupt`` that trio delivers to the waiting
main task (SIGINT), the general path returns them and raises it at the next checkpoint; the
fast path raises it from the await (``test_sigint_while_the_main_task_waits``).

Findings about the general path itself (the fast path matches them):
``await sx.read_env(sx.get_stop_token)`` inside a child gives a token that never fires (the token of
an ``await`` belongs to that one operation, docs/trio.md "Awaiting a sender"); a
``KeyboardInterrupt`` escaping a child is raised from the await (the general path's hosted task
hands it to the await's raised_sink).
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import signal
import sys
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
import trio
import trio.testing
from _helpers import pinned_domain_dispatch
from hypothesis import given, settings
from hypothesis import strategies as st

import structexec as sx
from structexec._core._fastpaths import FAST
from structexec._trio import _trio_compat
from structexec._trio import _when_all_nursery as wan
from structexec.testing import no_leaks
from structexec.testing import strategies as sxst

if sys.version_info < (3, 11):
    from exceptiongroup import (  # type: ignore[import-not-found, unused-ignore]
        BaseExceptionGroup,
        ExceptionGroup,
    )


@contextmanager
def fast_path(on: bool) -> Iterator[None]:
    """Select the path; pretend no custom domain exists (other test modules may create one)."""
    old = FAST.when_all_nursery
    FAST.when_all_nursery = on
    try:
        with pinned_domain_dispatch(on=False):
            yield
    finally:
        FAST.when_all_nursery = old


def which_path() -> str:
    """``"nursery"`` in a task of a user nursery (fast path), ``"system"`` in a system task."""
    task = trio.lowlevel.current_task()
    nursery = task.parent_nursery
    assert nursery is not None
    return "system" if nursery.parent_task is trio.lowlevel.current_root_task() else "nursery"


class Ctx:
    """What one run of a scenario records."""

    def __init__(self) -> None:
        self.t0 = trio.current_time()
        self.log: list[tuple[float, str]] = []
        self.paths: set[str] = set()
        self.errs: dict[str, BaseException] = {}
        self.seen: dict[str, Any] = {}

    def ev(self, what: str) -> None:
        self.log.append((round(trio.current_time() - self.t0, 6), what))

    def here(self) -> None:
        self.paths.add(which_path())

    def err(self, key: str, cls: type[BaseException] = ValueError) -> BaseException:
        e = cls(key)
        self.errs[key] = e
        return e

    def key(self, e: BaseException) -> Any:
        for k, v in self.errs.items():
            if v is e:
                return k
        if isinstance(e, BaseExceptionGroup):
            return (type(e).__name__, tuple(self.key(x) for x in e.exceptions))
        return ("unknown", type(e).__name__, str(e))


@dataclass
class Outcome:
    result: tuple[Any, ...]
    log: list[tuple[float, str]]
    paths: set[str]
    after: str | None = None  # the next checkpoint after a value: "ok" or "Cancelled"
    seen: dict[str, Any] = field(default_factory=dict)

    def comparable(self) -> tuple[Any, ...]:
        # Events of one virtual instant may come in any order (trio shuffles its batches).
        return (self.result, sorted(self.log), self.after, self.seen)


Maker = Callable[[Ctx], Coroutine[Any, Any, Any]]


async def _cancel_at(cs: trio.CancelScope, t: float) -> None:
    await trio.sleep(t)
    cs.cancel()


async def run_case(
    makers: list[Maker],
    *,
    fast: bool,
    cancel_at: float | None = None,
    pre_cancel: bool = False,
    collect: bool = True,
) -> Outcome:
    """Await ``when_all`` of the made coroutines on one path and record what happened.

    ``cancel_at``: another task cancels the awaiting task's scope after that many (virtual)
    seconds -- a ``cancel()``, not a deadline, so that the fast path stays eligible.
    ``collect``: let ``no_leaks`` run the garbage collector (slow; the property test skips it).
    """
    with fast_path(fast):
        ctx = Ctx()
        result: tuple[Any, ...] = ("none",)
        after = None
        async with no_leaks(collect=collect), trio.open_nursery() as outer:
            with trio.CancelScope() as cs:
                if pre_cancel:
                    cs.cancel()
                if cancel_at is not None:
                    outer.start_soon(_cancel_at, cs, cancel_at)
                try:
                    v = await sx.when_all(*[m(ctx) for m in makers])
                except trio.Cancelled:
                    result = ("Cancelled",)
                    ctx.ev("await done")
                    raise
                except sx.Stopped:
                    result = ("Stopped",)
                except Exception as e:
                    result = ("error", type(e).__name__, ctx.key(e))
                else:
                    result = ("value", v)
                if result[0] != "Cancelled":
                    ctx.ev("await done")
                if result[0] == "value":
                    after = "Cancelled"
                    await trio.lowlevel.checkpoint()
                    after = "ok"
            outer.cancel_scope.cancel()
        # Every child event happened before the await returned or raised ([exec.when.all]).
        assert ctx.log[-1][1] == "await done", ctx.log
        return Outcome(result, ctx.log, ctx.paths, after, ctx.seen)


async def both(makers: list[Maker], **kw: Any) -> Outcome:
    """Run on both paths, check each ran where it should, and that the outcomes agree."""
    fast = await run_case(makers, fast=True, **kw)
    general = await run_case(makers, fast=False, **kw)
    assert fast.paths == {"nursery"} and general.paths == {"system"}, (fast.paths, general.paths)
    assert fast.comparable() == general.comparable(), (fast, general)
    return fast


# --------------------------------------------------------------------------- child behaviours


def ret(i: int, v: Any, delay: float | None = None) -> Maker:
    async def child(ctx: Ctx) -> Any:
        ctx.here()
        try:
            if delay is not None:
                await trio.sleep(delay)
            return v
        finally:
            ctx.ev(f"{i} end")

    return child


def fail(i: int, delay: float | None = 1, cls: type[BaseException] = ValueError) -> Maker:
    async def child(ctx: Ctx) -> Any:
        ctx.here()
        try:
            if delay is not None:
                await trio.sleep(delay)
            raise ctx.err(f"e{i}", cls)
        finally:
            ctx.ev(f"{i} end")

    return child


def forever(i: int) -> Maker:
    async def child(ctx: Ctx) -> Any:
        ctx.here()
        try:
            await trio.sleep_forever()
        finally:
            ctx.ev(f"{i} unwound")

    return child


def stopped(i: int, delay: float = 1) -> Maker:
    """Awaits a sender that completes stopped: ``sx.Stopped`` escapes the coroutine."""

    async def child(ctx: Ctx) -> Any:
        ctx.here()
        try:
            await trio.sleep(delay)
            await sx.just_stopped()
        finally:
            ctx.ev(f"{i} end")

    return child


def catch_cancel(i: int, v: Any = None, raise_it: bool = False, cleanup: float = 0) -> Maker:
    """Sleeps until cancelled, then returns ``v`` (or raises), after ``cleanup`` seconds."""

    async def child(ctx: Ctx) -> Any:
        ctx.here()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            ctx.ev(f"{i} cancelled")
            with trio.CancelScope(shield=True):
                await trio.sleep(cleanup)
            if raise_it:
                raise ctx.err(f"late{i}") from None
            return v
        finally:
            ctx.ev(f"{i} end")

    return child


def shielded(i: int, delay: float, v: Any = None) -> Maker:
    async def child(ctx: Ctx) -> Any:
        ctx.here()
        with trio.CancelScope(shield=True):
            await trio.sleep(delay)
        ctx.ev(f"{i} end")
        return v

    return child


# ------------------------------------------------------------------------- values ([exec.when.all])


@pytest.mark.parametrize(
    ("outs", "expected"),
    [
        ([None, None], None),
        ([1, None], 1),
        ([None, "b"], "b"),
        ([1, 2], (1, 2)),
        ([(1, 2), None], (1, 2)),  # a returned tuple is one datum
        ([(1, 2), 3], ((1, 2), 3)),
        ([sx.values(1, 2), 3], (1, 2, 3)),
        ([sx.values(), sx.values()], None),
        ([sx.values(None), None], None),
        ([sx.values(None), sx.values(None)], (None, None)),
        ([1, sx.values(2, 3), None, (4,)], (1, 2, 3, (4,))),
        ([7], 7),
    ],
)
async def test_values_in_argument_order(
    outs: list[Any], expected: Any, autojump_clock: trio.testing.MockClock
) -> None:
    # Children finish in reverse argument order: the result is still in argument order.
    n = len(outs)
    makers = [ret(i, v, delay=float(n - i)) for i, v in enumerate(outs)]
    out = await both(makers)
    assert out.result == ("value", expected)
    assert out.after == "ok"
    # Immediately returning children (no checkpoint at all) too.
    out = await both([ret(i, v) for i, v in enumerate(outs)])
    assert out.result == ("value", expected)


# --------------------------------------------------------------------------- errors
# ([exec.when.all])


async def test_first_error_wins_cancels_siblings_and_is_raised_as_is(
    autojump_clock: trio.testing.MockClock,
) -> None:
    out = await both([forever(0), fail(1, delay=1), fail(2, delay=2), ret(3, 5, delay=3)])
    assert out.result == ("error", "ValueError", "e1")  # the object itself, not a group
    assert sorted(out.log) == [
        (1.0, "0 unwound"),
        (1.0, "1 end"),
        (1.0, "2 end"),
        (1.0, "3 end"),
        (1.0, "await done"),
    ]


async def test_error_identity_and_traceback_kept(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def boom(raised: list[BaseException]) -> None:
        e = ValueError("mine")
        raised.append(e)
        await trio.sleep(1)
        raise e

    for fast in (True, False):
        raised: list[BaseException] = []
        t0 = trio.current_time()
        with fast_path(fast), pytest.raises(ValueError) as info:
            await sx.when_all(boom(raised), _sleep(5))
        assert info.value is raised[0]
        assert info.value.__context__ is None and info.value.__cause__ is None
        assert any(f.co_name == "boom" for f in _frames(info.value.__traceback__))
        assert trio.current_time() - t0 == 1.0  # the sleeping sibling was cancelled


async def _sleep(t: float) -> None:
    await trio.sleep(t)


def _frames(tb: Any) -> Iterator[Any]:
    while tb is not None:
        yield tb.tb_frame.f_code
        tb = tb.tb_next


async def test_errors_are_never_exception_groups(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Two errors in the same instant: one of them (trio picks the order) is raised, alone.
    for fast in (True, False):
        with fast_path(fast):
            errs = [KeyError("a"), KeyError("b")]

            async def raise_at(e: BaseException) -> None:
                await trio.sleep(1)
                raise e

            with pytest.raises(KeyError) as info:
                await sx.when_all(raise_at(errs[0]), raise_at(errs[1]))
            assert any(info.value is e for e in errs)


async def test_error_after_stopped_child_wins(autojump_clock: trio.testing.MockClock) -> None:
    # Child 0 ends stopped at t=1; child 1 is cancelled by that stop and raises: error wins.
    out = await both([stopped(0, delay=1), catch_cancel(1, raise_it=True, cleanup=2)])
    assert out.result == ("error", "ValueError", "late1")
    # ... also when the error comes from a child that ignores the stop for a while.
    out = await both([stopped(0, delay=1), fail(1, delay=None), shielded(2, 3)])
    assert out.result == ("error", "ValueError", "e1")


async def test_exception_group_from_a_child_is_one_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """[exec.when.all], docs/senders.md "What happens when things fail": an ExceptionGroup a child
    raises is one error datum, as it is."""

    def group_child(i: int) -> Maker:
        async def child(ctx: Ctx) -> Any:
            ctx.here()
            await trio.sleep(1)
            e = ExceptionGroup("g", [ctx.err("inner")])
            ctx.errs["group"] = e
            raise e

        return child

    out = await both([group_child(0), forever(1)])
    assert out.result == ("error", "ExceptionGroup", "group")


async def test_cancelled_inside_a_childs_group_is_removed_like_a_cancel_scope_does(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """docs/trio.md "Coroutines are senders; a stop request cancels them": a child with its own
    nursery, cancelled: its group loses the Cancelled (trio's CancelScope.__exit__ in the general
    path; the same split in the fast path)."""

    def nursery_child(i: int, fail_in_cleanup: bool) -> Maker:
        async def child(ctx: Ctx) -> Any:
            async def cleanup_fail() -> None:
                try:
                    await trio.sleep_forever()
                finally:
                    if fail_in_cleanup:
                        raise ctx.err("cleanup")

            ctx.here()
            try:
                async with trio.open_nursery() as n:
                    n.start_soon(cleanup_fail)
                    n.start_soon(trio.sleep_forever)
            finally:
                ctx.ev(f"{i} end")

        return child

    # Only Cancelled in the group: the child ends stopped (not a crash, not an error).
    out = await both([stopped(0, delay=1), nursery_child(1, False)])
    assert out.result == ("Stopped",)
    # Cancelled + ValueError: the error is what remains of the group after the split.
    out = await both([stopped(0, delay=1), nursery_child(1, True)])
    assert out.result == ("error", "ExceptionGroup", ("ExceptionGroup", ("cleanup",)))
    out = await both([nursery_child(0, True)], cancel_at=2)
    assert out.result == ("error", "ExceptionGroup", ("ExceptionGroup", ("cleanup",)))


# ------------------------------------------------------------------------ stopped ([exec.when.all])


async def test_stopped_child_stops_siblings_and_raises_stopped(
    autojump_clock: trio.testing.MockClock,
) -> None:
    out = await both([forever(0), stopped(1, delay=1), ret(2, 3, delay=2)])
    assert out.result == ("Stopped",)
    assert (1.0, "0 unwound") in out.log and (1.0, "2 end") in out.log


async def test_stopped_child_and_a_later_trio_cancellation_gives_cancelled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The task's cancellation while it waits (t=2, a sibling still shielded until t=3)
    turns the stopped result into trio.Cancelled (docs/task.md 'How "stopped" unwinds a task',
    docs/trio.md "trio cancellation becomes a stop request")."""
    out = await both([stopped(0, delay=1), shielded(1, 3)], cancel_at=2)
    assert out.result == ("Cancelled",)
    assert (3.0, "await done") in out.log
    # The cancellation after the completion: Stopped.
    out = await both([stopped(0, delay=1), shielded(1, 3)], cancel_at=4)
    assert out.result == ("Stopped",)


# --------------------------------------------------------------------------- trio cancellation


async def test_cancellation_stops_children_waits_for_all_then_cancelled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    out = await both([forever(0), catch_cancel(1, cleanup=2), ret(2, 1, delay=5)], cancel_at=1)
    assert out.result == ("Cancelled",)
    assert sorted(out.log) == [
        (1.0, "0 unwound"),
        (1.0, "1 cancelled"),
        (1.0, "2 end"),
        (3.0, "1 end"),
        (3.0, "await done"),
    ]


async def test_values_despite_cancellation_are_returned_then_cancelled_at_checkpoint(
    autojump_clock: trio.testing.MockClock,
) -> None:
    out = await both([catch_cancel(0, v="a", cleanup=1), catch_cancel(1, v="b")], cancel_at=1)
    assert out.result == ("value", ("a", "b"))
    assert out.after == "Cancelled"
    # A child that never checkpoints returns its value even when cancelled before the await.
    out = await both([ret(0, 1), ret(1, 2)], pre_cancel=True)
    assert out.result == ("value", (1, 2))
    assert out.after == "Cancelled"


async def test_cancelled_before_the_await(autojump_clock: trio.testing.MockClock) -> None:
    """docs/trio.md "trio cancellation becomes a stop request": a task already cancelled when it
    awaits; children that never checkpoint still deliver their values."""
    out = await both([ret(0, 1), forever(1)], pre_cancel=True)
    assert out.result == ("Cancelled",)
    out = await both([ret(0, 1), catch_cancel(1, v=2)], pre_cancel=True)
    assert out.result == ("value", (1, 2))
    out = await both([catch_cancel(0, raise_it=True), forever(1)], pre_cancel=True)
    assert out.result == ("error", "ValueError", "late0")


async def test_mixed_cancellation_outcomes(autojump_clock: trio.testing.MockClock) -> None:
    """docs/trio.md "trio cancellation becomes a stop request", [exec.when.all]: stopped beats a
    value; an error beats the cancellation."""
    # One child returns despite the cancellation, the other ends stopped: Cancelled.
    out = await both([catch_cancel(0, v=1), forever(1)], cancel_at=1)
    assert out.result == ("Cancelled",)
    # An error raised while unwinding wins over the cancellation.
    out = await both([catch_cancel(0, raise_it=True, cleanup=1), forever(1)], cancel_at=1)
    assert out.result == ("error", "ValueError", "late0")


# --------------------------------------------------------------------------- what children see


class WaitForStop(sx.Sender[Any]):
    """Completes with ``"stop seen"`` when its receiver's stop token fires ([exec.as.awaitable],
    docs/trio.md "Awaiting a sender")."""

    def connect(self, rcvr: Any) -> Any:
        return _WaitForStopOp(rcvr)


class _WaitForStopOp:
    def __init__(self, rcvr: Any) -> None:
        self.rcvr = rcvr
        self.cb: Any = None

    def start(self) -> None:
        tok = sx.get_stop_token(sx.get_env(self.rcvr))
        self.cb = sx.stop_callback_for(tok, self._fire)

    def _fire(self) -> None:
        self.rcvr.set_value("stop seen")


async def test_stop_token_and_scheduler_seen_inside_children(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """docs/trio.md "Awaiting a sender", [exec.as.awaitable], [exec.when.all]: what senders awaited
    inside a child see (the trio scheduler; a stop token reached by the when_all's stop and by the
    awaiting task's cancellation)."""

    def looker(i: int) -> Maker:
        async def child(ctx: Ctx) -> Any:
            ctx.here()
            tok = await sx.read_env(sx.get_stop_token)
            sch = await sx.read_env(sx.get_scheduler)
            ctx.seen["scheduler is trio"] = sch == sx.trio_scheduler()
            ctx.seen["token stoppable"] = tok.stop_possible()
            # A sender awaited in the child sees a stop request when the when_all stops.
            got = await WaitForStop()
            ctx.seen["read_env token fired"] = tok.stop_requested()
            ctx.seen["deadline"] = trio.current_effective_deadline()
            ctx.ev(f"{i} {got}")
            return got

        return child

    out = await both([looker(0), fail(1, delay=1)])
    assert out.result == ("error", "ValueError", "e1")
    assert (1.0, "0 stop seen") in out.log
    assert out.seen == {
        "scheduler is trio": True,
        "token stoppable": True,
        # Both paths: the token read by read_env also carries when_all's stop ([exec.connect],
        # [exec.when.all]).
        "read_env token fired": True,
        "deadline": -math.inf,  # the child is cancelled
    }
    out = await both([looker(0)], cancel_at=1)
    assert out.result == ("value", "stop seen")
    assert out.after == "Cancelled"


async def test_sx_task_awaited_inside_children(autojump_clock: trio.testing.MockClock) -> None:
    """An ``sx.task`` awaited in a child runs in the child's trio task with the trio
    scheduler, and the when_all's stop reaches it ([exec.task],
    docs/trio.md "Awaiting a sender")."""

    @sx.task
    async def work(ctx: Ctx, i: int) -> None:
        ctx.seen[f"{i} scheduler is trio"] = await sx.read_env(sx.get_scheduler) == (
            sx.trio_scheduler()
        )
        try:
            await trio.sleep_forever()
        finally:
            ctx.ev(f"task {i} unwound")

    def child(i: int) -> Maker:
        async def body(ctx: Ctx) -> Any:
            ctx.here()
            try:
                return await work(ctx, i)
            finally:
                ctx.ev(f"{i} end")

        return body

    out = await both([child(0), fail(1, delay=1)])
    assert out.result == ("error", "ValueError", "e1")
    assert (1.0, "task 0 unwound") in out.log
    out = await both([child(0), stopped(1, delay=1)])
    assert out.result == ("Stopped",)
    out = await both([child(0), child(1)], cancel_at=2)
    assert out.result == ("Cancelled",)
    assert out.seen == {"0 scheduler is trio": True, "1 scheduler is trio": True}


async def test_task_metadata_seen_inside_children(autojump_clock: trio.testing.MockClock) -> None:
    """docs/scopes.md "The nursery face: `async with`" (hosted tasks): name, context copy,
    KeyboardInterrupt protection and effective deadline inside a child are those of the general
    path's hosted system task."""

    var: contextvars.ContextVar[str] = contextvars.ContextVar("var")

    def probe(i: int) -> Maker:
        async def child(ctx: Ctx) -> Any:
            ctx.here()
            ctx.seen[f"{i} var"] = var.get("unset")
            var.set(f"set by {i}")
            ctx.seen[f"{i} name"] = trio.lowlevel.current_task().name
            ctx.seen[f"{i} ki protected"] = trio.lowlevel.currently_ki_protected()
            ctx.seen[f"{i} deadline"] = trio.current_effective_deadline()
            await trio.lowlevel.checkpoint()
            return i

        return child

    var.set("outer")
    out = await both([probe(0), probe(1)])
    assert out.result == ("value", (0, 1))
    assert out.seen["0 var"] == "outer" and out.seen["1 var"] == "outer"
    assert out.seen["0 name"].endswith("probe.<locals>.child")
    assert out.seen["0 ki protected"] is True
    assert out.seen["0 deadline"] == math.inf
    assert var.get() == "outer"


async def test_nested_when_all_inside_children(autojump_clock: trio.testing.MockClock) -> None:
    """[exec.when.all] nested: inner when_all awaits (fast inside fast, general inside general)."""

    def nested(i: int, inner: list[Maker]) -> Maker:
        async def child(ctx: Ctx) -> Any:
            ctx.here()
            try:
                return await sx.when_all(*[m(ctx) for m in inner])
            finally:
                ctx.ev(f"{i} end")

        return child

    out = await both([nested(0, [ret(10, 1, delay=1), ret(11, sx.values(2, 3))]), ret(1, 4)])
    assert out.result == ("value", ((1, 2, 3), 4))
    out = await both([nested(0, [forever(10), fail(11, delay=2)]), forever(1)])
    assert out.result == ("error", "ValueError", "e11")
    out = await both([nested(0, [forever(10), stopped(11, delay=2)]), forever(1)])
    assert out.result == ("Stopped",)
    out = await both([nested(0, [forever(10), ret(11, 1)]), forever(1)], cancel_at=1)
    assert out.result == ("Cancelled",)


async def test_same_coroutine_twice(autojump_clock: trio.testing.MockClock) -> None:
    """[exec.connect]: one coroutine object passed twice fails the same way on both paths: a
    ``TypeError`` at the second connect."""
    for fast in (True, False):

        async def once() -> int:
            await trio.sleep(1)
            return 1

        c = once()
        with fast_path(fast), pytest.raises(TypeError, match="already connected"):
            await sx.when_all(c, c)


# --------------------------------------------------------------------------- BaseException


@pytest.mark.parametrize("variant", ["sibling pending", "last child", "shielded"])
def test_keyboard_interrupt_in_a_child_is_raised_like_the_general_path(variant: str) -> None:
    """docs/senders.md "What happens when things fail": never an error datum. The general path's
    hosted task hands the exception to the await's raised_sink: the siblings are stopped and the
    await raises it, so ``trio.run`` raises it as it raises a nursery child's (no
    TrioInternalError). The fast path does the same, once the stopped siblings have finished."""

    def run(fast: bool) -> list[str]:
        log: list[str] = []
        ki = KeyboardInterrupt("child")

        async def boom() -> None:
            log.append(which_path())
            await trio.sleep(2)
            raise ki

        async def slow() -> None:
            try:
                await trio.sleep(1 if variant == "last child" else 10)
            finally:
                log.append("slow end")

        async def main() -> None:
            with fast_path(fast), trio.CancelScope(shield=variant == "shielded"):
                try:
                    await sx.when_all(boom(), slow())
                except (trio.Cancelled, sx.Stopped) as e:  # pragma: no cover - the old way
                    log.append(f"await raised {type(e).__name__}")
                    raise

        with pytest.raises(KeyboardInterrupt) as info:
            trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
        assert info.value is ki
        return log

    fast, general = run(True), run(False)
    assert fast[0] == "nursery" and general[0] == "system"
    assert fast[1:] == general[1:] == ["slow end"]


@pytest.fixture
def default_sigint() -> Iterator[None]:
    """trio delivers SIGINT as KeyboardInterrupt only with Python's default handler, and CI
    may start the suite with SIGINT ignored: install the default for the test."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


@pytest.mark.usefixtures("default_sigint")
@pytest.mark.parametrize("children_return", [False, True])
def test_sigint_while_the_main_task_waits(children_return: bool) -> None:
    """Control-C while the main task awaits: the children are stopped and, once they have
    finished, the await raises the KeyboardInterrupt alone (no group), as in the general path.
    Documented difference: if the children return values despite the stop, the general path
    returns them and raises the KeyboardInterrupt at the next checkpoint; the fast path raises
    it from the await."""

    def run(fast: bool) -> list[str]:
        log: list[str] = []

        async def ctrl_c() -> str:
            try:
                await trio.sleep(1)
                signal.raise_signal(signal.SIGINT)  # a KI-protected task: goes to main
                await trio.sleep(1)
            except trio.Cancelled:
                log.append("ctrl_c cancelled")
                if not children_return:
                    raise
            return "a"

        async def other() -> str:
            try:
                await trio.sleep(10)
            except trio.Cancelled:
                if not children_return:
                    raise
            return "b"

        async def main() -> None:
            with fast_path(fast):
                try:
                    v = await sx.when_all(ctrl_c(), other())
                except BaseException as e:
                    log.append(f"await raised {type(e).__name__}")
                    raise
                log.append(f"await returned {v!r}")
                await trio.lowlevel.checkpoint()

        with pytest.raises(KeyboardInterrupt):
            trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
        return log

    fast, general = run(True), run(False)
    if not children_return:
        assert fast == general == ["ctrl_c cancelled", "await raised KeyboardInterrupt"]
    else:  # the documented difference
        assert general == ["ctrl_c cancelled", "await returned ('a', 'b')"]
        assert fast == ["ctrl_c cancelled", "await raised KeyboardInterrupt"]


def _contains(exc: BaseException | None, target: BaseException) -> bool:
    seen: set[int] = set()
    todo = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if e is target:
            return True
        todo += [e.__cause__, e.__context__]
        if isinstance(e, BaseExceptionGroup):
            todo += list(e.exceptions)
    return False


# --------------------------------------------------------------------------- fallbacks


async def test_fallback_corners_take_the_general_path(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Corners the fast path leaves to the general path ([exec.connect] non-coroutine children,
    docs/scopes.md "The nursery face: `async with`" deadlines, 9.x custom domains, [exec.connect]
    hosted coroutines)."""

    paths: list[str] = []

    async def child() -> int:
        paths.append(which_path())
        await trio.lowlevel.checkpoint()
        return 1

    with fast_path(True):
        assert await sx.when_all(child(), child()) == (1, 1)
        assert paths == ["nursery", "nursery"]
        # A child that is not a coroutine object.
        paths.clear()
        assert await sx.when_all(child(), sx.just(2)) == (1, 2)
        assert paths == ["system"]
        # A finite deadline on the awaiting task (hosted children would not see it).
        paths.clear()
        with trio.move_on_after(100):
            assert await sx.when_all(child(), child()) == (1, 1)
        assert paths == ["system", "system"]
        # Inside a structexec-hosted coroutine.
        paths.clear()

        async def hosted() -> Any:
            return await sx.when_all(child(), child())

        assert await sx.when_all(hosted(), sx.just()) == (1, 1)
        assert paths == ["system", "system"]
        # A custom domain exists that may transform when_all: one customising every
        # algorithm, or one listing when_all.
        paths.clear()
        with pinned_domain_dispatch(on=True, all=True):
            assert await sx.when_all(child(), child()) == (1, 1)
        assert paths == ["system", "system"]
        paths.clear()
        with pinned_domain_dispatch(on=True, all=False, tags=frozenset({sx.when_all})):
            assert await sx.when_all(child(), child()) == (1, 1)
        assert paths == ["system", "system"]
        # One that customises only other algorithms (the parallel scheduler's bulk domain)
        # cannot reach a when_all of coroutines: the fast path stays.
        paths.clear()
        with pinned_domain_dispatch(on=True, all=False, tags=frozenset({sx.bulk, sx.bulk_chunked})):
            assert await sx.when_all(child(), child()) == (1, 1)
        assert paths == ["nursery", "nursery"]


async def test_private_deadline_check_agrees_with_trio_current_effective_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``_deadline_is_finite`` reads trio's private CancelStatus chain: it must say what
    ``trio.current_effective_deadline()`` says (finite or not) in every kind of nesting."""

    async def check(expected: bool) -> None:
        public = trio.current_effective_deadline()
        assert (public not in (math.inf, -math.inf)) is expected
        status = _trio_compat.cancel_status(trio.lowlevel.current_task())
        assert wan._deadline_is_finite(status) is expected
        assert wan._deadline_is_finite(None) is expected  # the public fallback
        await trio.lowlevel.cancel_shielded_checkpoint()

    await check(False)
    with trio.move_on_after(10):
        await check(True)
        with trio.CancelScope(shield=True):
            await check(False)
            with trio.CancelScope(relative_deadline=5):
                await check(True)
        with trio.CancelScope():
            await check(True)
            async with trio.open_nursery() as n:
                n.start_soon(check, True)
    with trio.CancelScope(shield=True, deadline=trio.current_time() + 5):
        await check(True)
    with trio.CancelScope() as cs:
        cs.cancel()
        await check(False)  # cancelled: -inf
        with trio.CancelScope(shield=True):
            await check(False)
    with trio.CancelScope(deadline=trio.current_time() + 5) as cs:
        cs.cancel()
        await check(False)


async def test_without_trios_private_cancel_status_the_outcomes_still_agree(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fast path reads ``Task._cancel_status.effectively_cancelled`` (private trio state)
    when the last child finishes; without it, it looks when the awaiting task resumes."""

    monkeypatch.setattr(wan, "_cancel_status", lambda task: None)  # the shim's fallback
    out = await both([stopped(0, delay=1), shielded(1, 3)], cancel_at=2)
    assert out.result == ("Cancelled",)
    out = await both([stopped(0, delay=1), shielded(1, 3)], cancel_at=4)
    assert out.result == ("Stopped",)
    out = await both([forever(0), ret(1, 1)], cancel_at=1)
    assert out.result == ("Cancelled",)


async def test_used_coroutine_raises_type_error_as_in_the_general_path() -> None:
    """[exec.connect], docs/senders-adaptors.md: a started coroutine is rejected with the same
    TypeError."""

    async def child() -> int:
        return 1

    msgs = []
    for fast in (True, False):
        c = child()
        assert await c == 1
        fresh = child()
        with fast_path(fast), pytest.raises(TypeError) as info:
            await sx.when_all(fresh, c)
        msgs.append(str(info.value))
        fresh.close()
    assert msgs[0] == msgs[1] and "already been started" in msgs[0]


def test_outside_trio_the_same_error() -> None:
    """docs/trio.md "Awaiting a sender": awaiting outside trio raises the same RuntimeError on both
    paths."""

    async def child() -> int:
        return 1

    async def main(fast: bool, coros: list[Any]) -> None:
        with fast_path(fast):
            await sx.when_all(*coros)

    msgs = []
    for fast in (True, False):
        coros = [child(), child()]
        with pytest.raises(RuntimeError) as info:
            asyncio.run(main(fast, coros))
        msgs.append(str(info.value))
        for c in coros:  # neither path started them
            c.close()
    assert msgs[0] == msgs[1] and "trio" in msgs[0]


# --------------------------------------------------------------------------- differences


async def test_documented_differences(autojump_clock: trio.testing.MockClock) -> None:
    """What the fast path shows differently, on purpose
    (docs/scopes.md "The nursery face: `async with`"; module docstring): the child's parent nursery,
    and the trio metadata of a Cancelled from the awaiting task's scope."""
    seen: dict[bool, tuple[str, str | None]] = {}

    async def child(fast: bool) -> None:
        try:
            await trio.sleep_forever()
        except trio.Cancelled as e:
            seen[fast] = (which_path(), e.reason)
            raise

    for fast in (True, False):
        async with trio.open_nursery() as n:
            with fast_path(fast), trio.CancelScope() as cs:
                n.start_soon(_cancel_with_reason, cs)
                await sx.when_all(child(fast))
    assert seen[True] == ("nursery", "because")
    assert seen[False] == ("system", None)

    deadlines: dict[bool, float] = {}

    async def reader(fast: bool) -> None:
        await trio.sleep(2)
        deadlines[fast] = trio.current_effective_deadline()

    async def set_deadline(cs: trio.CancelScope) -> None:
        await trio.sleep(1)
        cs.deadline = trio.current_time() + 50

    for fast in (True, False):
        async with trio.open_nursery() as n:
            with fast_path(fast), trio.CancelScope() as cs:
                n.start_soon(set_deadline, cs)
                await sx.when_all(reader(fast))
    assert deadlines[True] != math.inf
    assert deadlines[False] == math.inf


async def _cancel_with_reason(cs: trio.CancelScope) -> None:
    await trio.sleep(1)
    cs.cancel(reason="because")


# --------------------------------------------------------------------------- property


VALS = st.sampled_from([None, 0, "x", (1, 2), sx.values(), sx.values(1, 2)])
TIMES = st.integers(0, 3)


def behaviour(nested: bool) -> st.SearchStrategy[tuple[Any, ...]]:
    simple = st.one_of(
        st.tuples(st.just("ret"), VALS),
        st.tuples(st.just("sleep_ret"), TIMES, VALS),
        st.tuples(st.just("raise"), TIMES),
        st.tuples(st.just("forever")),
        st.tuples(st.just("catch_ret"), VALS, TIMES),
        st.tuples(st.just("catch_raise"), TIMES),
        st.tuples(st.just("stopped"), TIMES),
        st.tuples(st.just("shielded"), TIMES, VALS),
    )
    if not nested:
        return simple
    return st.one_of(simple, st.tuples(st.just("nested"), st.lists(simple, min_size=1, max_size=2)))


def make(b: tuple[Any, ...], i: int) -> Maker:
    """Child ``i``; every timed action happens at ``t + i/100`` so that no two collide."""
    off = i / 100
    kind = b[0]
    if kind == "ret":
        return ret(i, b[1])
    if kind == "sleep_ret":
        return ret(i, b[2], delay=b[1] + off)
    if kind == "raise":
        return fail(i, delay=b[1] + off)
    if kind == "forever":
        return forever(i)
    if kind == "catch_ret":
        return catch_cancel(i, v=b[1], cleanup=b[2] + off)
    if kind == "catch_raise":
        return catch_cancel(i, raise_it=True, cleanup=b[1] + off)
    if kind == "stopped":
        return stopped(i, delay=b[1] + off)
    if kind == "shielded":
        return shielded(i, b[1] + off, b[2])
    inner = [make(sub, 10 * (i + 1) + j) for j, sub in enumerate(b[1])]

    async def child(ctx: Ctx) -> Any:
        ctx.here()
        try:
            return await sx.when_all(*[m(ctx) for m in inner])
        finally:
            ctx.ev(f"{i} end")

    return child


@settings(deadline=None, max_examples=sxst.max_examples(120))
@given(
    behaviours=st.lists(behaviour(nested=True), min_size=1, max_size=4),
    cancel=st.one_of(st.none(), st.just("pre"), st.integers(0, 5)),
)
def test_property_fast_and_general_paths_agree(
    behaviours: list[tuple[Any, ...]], cancel: Any
) -> None:
    """Random children (value / None / raise / sleep then return / sleep forever / catch the
    cancellation and return or raise / stopped / shielded / a nested when_all) and a random
    trio cancellation of the awaiting task: both paths give the same outcome (16,
    docs/trio.md "trio cancellation becomes a stop request")."""
    makers = [make(b, i) for i, b in enumerate(behaviours)]
    # Children that sleep forever need someone to cancel: the awaiting task's scope is
    # always cancelled in the end (at t=100 if not earlier).
    kw: dict[str, Any] = {"cancel_at": 100.005}
    if cancel == "pre":
        kw = {"pre_cancel": True}
    elif cancel is not None:
        kw = {"cancel_at": cancel + 0.005}

    def run(fast: bool) -> Outcome:
        async def main() -> Outcome:
            return await run_case(makers, fast=fast, collect=False, **kw)

        return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))

    fast, general = run(True), run(False)
    assert fast.paths == {"nursery"} and general.paths == {"system"}
    assert fast.comparable() == general.comparable(), (fast, general)
