"""The direct path of ``scope.spawn(coro)`` and ``scope.spawn_future(coro)`` agrees with the
general path ([exec.spawn], [exec.spawn.future]; docs/internals.md §3).

Inside ``async with sx.counting_scope()``, on its trio thread, a coroutine object given to
``scope.spawn`` takes :func:`structexec._scopes._spawn_coro.spawn_coro` (its task goes straight
into the hosted nursery, with its own shielded cancel scope that the scope's stop cancels).
``structexec._scopes.FAST.spawn_coro = False`` sends the same calls through the
general machinery (the coroutine as a sender: ``connect``, ``TrioHostedOp``, a stop callback).

The property test draws coroutines that return nothing, return a value, raise, complete
stopped, swallow a stop and return, sleep, or wait for the stop; spawns them (some from inside
other spawned coroutines), requests stop or cancels the block at a random point, and compares
everything observable: the events with the trio clock (the tasks' as a multiset: trio runs
ready tasks in a random order), the task names, what leaves the block, and the scope's count
and state.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import trio
import trio.testing
from _helpers import cyclic_garbage_of
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import structexec as sx
from structexec._core._fastpaths import FAST
from structexec._scopes import _spawn_coro

_trio_random = trio._core._run._r  # shuffles each batch of ready tasks (under hypothesis)

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup  # type: ignore[import-not-found, unused-ignore]

SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

KINDS = ("none", "value", "raise", "stopped", "swallow", "sleep", "forever", "child")


@contextmanager
def direct(on: bool) -> Iterator[None]:
    old = FAST.spawn_coro
    FAST.spawn_coro = on
    try:
        yield
    finally:
        FAST.spawn_coro = old


def _show(x: Any) -> Any:
    if isinstance(x, BaseExceptionGroup):
        return (type(x).__name__, tuple(sorted(map(repr, (_show(e) for e in x.exceptions)))))
    if isinstance(x, BaseException):
        return (type(x).__name__, str(x)[:60])
    return x


def _run(case: dict[str, Any]) -> list[Any]:
    log: list[Any] = []

    async def work(i: int, kind: str, scope: Any) -> Any:
        log.append(("start", i, trio.current_time(), trio.lowlevel.current_task().name))
        try:
            if kind == "none":
                return None
            if kind == "value":
                return i
            if kind == "raise":
                raise ValueError(i)
            if kind == "stopped":
                await sx.just_stopped()
            if kind == "swallow":
                try:
                    await sx.just_stopped()
                except sx.Stopped:
                    return None
            if kind == "sleep":
                await trio.sleep(1 + i % 3)
                return None
            if kind == "forever":
                await trio.sleep_forever()
            if kind == "child":
                scope.spawn(work(100 + i, "sleep", scope))
                await trio.sleep(0.5)
            return None
        finally:
            log.append(("end", i, trio.current_time()))

    async def main() -> None:
        out: Any = None
        scope = sx.counting_scope()
        try:
            async with scope:
                for i, kind in enumerate(case["kinds"]):
                    if i == case["stop_at"]:
                        if case["how"] == "request_stop":
                            scope.request_stop()
                        else:
                            scope.cancel_scope.cancel()
                    scope.spawn(work(i, kind, scope))
                    log.append(("count", scope.count))
                if case["body_sleeps"]:
                    await trio.sleep(2)
                if case["stop_at"] >= len(case["kinds"]):
                    scope.request_stop()
        except BaseException as e:
            out = e
        log.append(("out", _show(out), scope.state, scope.count, trio.current_time()))

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    return log


@SETTINGS
@given(
    st.fixed_dictionaries(
        {
            "kinds": st.lists(st.sampled_from(KINDS), min_size=1, max_size=6),
            "stop_at": st.integers(0, 7),
            "how": st.sampled_from(["request_stop", "cancel"]),
            "body_sleeps": st.booleans(),
        }
    )
)
def test_property_direct_and_general_spawn_of_a_coroutine_agree(case: dict[str, Any]) -> None:
    state = _trio_random.getstate()
    with direct(True):
        fast = _run(case)
    _trio_random.setstate(state)
    with direct(False):
        general = _run(case)
    # trio runs a batch of ready tasks in a random order: the tasks' events are compared as a
    # multiset, the body's (counts, what left the block) in order.
    assert [e for e in fast if e[0] in ("count", "out")] == [
        e for e in general if e[0] in ("count", "out")
    ]
    assert sorted(map(repr, fast)) == sorted(map(repr, general))


def _run_futures(case: dict[str, Any]) -> list[Any]:
    log: list[Any] = []

    async def work(i: int, kind: str) -> Any:
        log.append(("start", i, trio.current_time(), trio.lowlevel.current_task().name))
        try:
            if kind == "value":
                return i
            if kind == "values":
                return sx.values(i, i)
            if kind == "raise":
                raise ValueError(i)
            if kind == "stopped":
                await sx.just_stopped()
            if kind == "swallow":
                try:
                    await sx.just_stopped()
                except sx.Stopped:
                    return i
            if kind == "sleep":
                await trio.sleep(1 + i % 3)
                return i
            if kind == "forever":
                await trio.sleep_forever()
            return None
        finally:
            log.append(("end", i, trio.current_time()))

    async def main() -> None:
        out: Any = None
        scope = sx.counting_scope()
        try:
            async with scope:
                futs = []
                for i, kind in enumerate(case["kinds"]):
                    if i == case["stop_at"]:
                        scope.request_stop()
                    futs.append(scope.spawn_future(work(i, kind)))
                    log.append(("count", scope.count))
                for i, (f, use, kind) in enumerate(zip(futs, case["uses"], case["kinds"])):
                    if use == "await" and kind == "forever":
                        use = "timeout"  # (only a stop ends it: the request comes below)
                    if use == "await":
                        try:
                            log.append(("got", i, await f, trio.current_time()))
                        except BaseException as e:
                            log.append(("got", i, _show(e), trio.current_time()))
                    elif use == "close":
                        f.close()
                        log.append(("closed", i, scope.count))
                    elif use == "timeout":
                        with trio.move_on_after(1.5):
                            try:
                                log.append(("got", i, await f, trio.current_time()))
                            except BaseException as e:
                                log.append(("got", i, _show(e), trio.current_time()))
                                raise
                scope.request_stop()  # ends the work still running (kept futures' too)
        except BaseException as e:
            out = e
        log.append(("out", _show(out), scope.state, scope.count, trio.current_time()))

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    return log


FUTURE_KINDS = ("none", "value", "values", "raise", "stopped", "swallow", "sleep", "forever")


@SETTINGS
@given(
    st.integers(1, 6).flatmap(
        lambda n: st.fixed_dictionaries(
            {
                "kinds": st.lists(st.sampled_from(FUTURE_KINDS), min_size=n, max_size=n),
                "uses": st.lists(
                    st.sampled_from(["await", "close", "keep", "timeout"]), min_size=n, max_size=n
                ),
                "stop_at": st.integers(0, 7),
            }
        )
    )
)
def test_property_direct_and_general_spawn_future_of_a_coroutine_agree(
    case: dict[str, Any],
) -> None:
    """``scope.spawn_future(coro)``: results, errors, stops, abandoning (``close()``, a
    consumer stopped by a timeout), unconsumed errors at the exit, on both paths."""
    # The same order of ready tasks in both runs (trio shuffles each batch with this generator
    # under hypothesis).
    state = _trio_random.getstate()
    with direct(True):
        fast = _run_futures(case)
    _trio_random.setstate(state)
    with direct(False):
        general = _run_futures(case)
    keep = ("count", "out", "got", "closed")
    assert [e for e in fast if e[0] in keep] == [e for e in general if e[0] in keep]
    assert sorted(map(repr, fast)) == sorted(map(repr, general))


def test_the_switch_chooses_the_path(monkeypatch: Any) -> None:
    """``FAST.spawn_coro`` decides whether ``scope.spawn(coro)`` takes the direct path."""
    calls: list[Any] = []
    real = _spawn_coro.spawn_coro

    def spy(scope: Any, coro: Any) -> None:
        calls.append(coro)
        real(scope, coro)

    monkeypatch.setattr("structexec._scopes._counting_scope.spawn_coro", spy)
    futures: list[Any] = []
    real_future = _spawn_coro.spawn_future_coro

    def spy_future(scope: Any, coro: Any) -> Any:
        futures.append(coro)
        return real_future(scope, coro)

    monkeypatch.setattr("structexec._scopes._counting_scope.spawn_future_coro", spy_future)

    async def noop() -> None:
        pass

    async def main() -> None:
        async with sx.counting_scope() as scope:
            scope.spawn(noop())
            await scope.spawn_future(noop())
            with direct(False):
                scope.spawn(noop())
                await scope.spawn_future(noop())
        async with sx.simple_counting_scope() as simple:
            simple.spawn(noop())  # no direct path
            await simple.spawn_future(noop())

    trio.run(main)
    assert len(calls) == 1
    assert len(futures) == 1


@pytest.mark.parametrize("on", [True, False])
def test_keyboard_interrupt_of_a_spawned_coroutine_leaves_the_block(on: bool) -> None:
    """A ``KeyboardInterrupt`` raised by the coroutine ends the work and leaves the block (in
    the strict group, as a nursery child's), on both paths; the sibling is cancelled."""
    seen: list[str] = []

    async def boom() -> None:
        raise KeyboardInterrupt

    async def sibling() -> None:
        try:
            await trio.sleep_forever()
        finally:
            seen.append("sibling ended")

    async def main() -> None:
        scope = sx.counting_scope()
        with pytest.raises(BaseExceptionGroup) as info:
            async with scope:
                scope.spawn(sibling())
                scope.spawn(boom())
        assert [type(e) for e in info.value.exceptions] == [KeyboardInterrupt]
        assert scope.state == "joined"
        assert scope.count == 0

    with direct(on):
        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert seen == ["sibling ended"]


def test_stop_from_another_thread_cancels_a_directly_spawned_coroutine() -> None:
    """``request_stop()`` from another thread reaches the coroutine's own cancel scope."""

    async def main() -> None:
        ended: list[str] = []

        async def waits() -> None:
            try:
                await trio.sleep_forever()
            finally:
                ended.append("cancelled")

        async with sx.counting_scope() as scope:
            scope.spawn(waits())
            await trio.testing.wait_all_tasks_blocked()
            await trio.to_thread.run_sync(scope.request_stop)
        assert ended == ["cancelled"]

    trio.run(main)


@pytest.mark.parametrize("kind", ["none", "stopped", "cancelled"])
def test_directly_spawned_coroutines_leave_no_cyclic_garbage(kind: str) -> None:
    """A finished direct task is freed by reference counting: its host mark no longer holds
    the task (task -> context -> mark -> task was a cycle). Also when the work
    completes stopped or is stopped by the scope. (Not checked for errors: an exception
    leaving the block keeps its frames in its traceback, as in plain trio.)"""

    async def work() -> None:
        if kind == "stopped":
            await sx.just_stopped()
        if kind == "cancelled":
            await trio.sleep_forever()

    async def main() -> None:
        async with sx.counting_scope() as scope:
            for _ in range(50):
                scope.spawn(work())
                f = scope.spawn_future(work())
                f.close()
            if kind == "cancelled":
                await trio.testing.wait_all_tasks_blocked()
                scope.request_stop()

    async def warm() -> None:
        async with sx.counting_scope() as scope:
            scope.spawn(work())
            scope.spawn_future(work()).close()
            if kind == "cancelled":
                await trio.testing.wait_all_tasks_blocked()
                scope.request_stop()

    async def run() -> int:
        await warm()
        return await cyclic_garbage_of(main)  # the code under test's (tests/_helpers.py)

    assert trio.run(run) == 0
