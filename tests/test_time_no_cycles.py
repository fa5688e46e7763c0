"""The time adaptors leave no cyclic garbage: a finished race, timeout, retry or timer is freed
by reference counting, on every completion (value, error, stopped), under ``sync_wait`` (the
``run_loop``'s timers), under trio, and spawned into a scope that is asked to stop.

A race's children's receivers point back to its operation (``RaceOp``): the operation drops
them when it completes. The frame that raises a sender's error out of ``sync_wait`` or out of
an ``await`` is in the error's traceback: it keeps no local pointing to the error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import trio
import trio.testing
from _helpers import cyclic_garbage_of, cyclic_garbage_of_sync

import structexec as sx

pytestmark = pytest.mark.filterwarnings("ignore::structexec.StuckWorkWarning")


def _boom(*_: Any) -> Any:
    raise ValueError("boom")


def _flaky() -> Callable[[], int]:
    """Fails on the first call, succeeds on the second, and so on."""
    calls = [0]

    def f() -> int:
        calls[0] += 1
        if calls[0] % 2:
            raise ConnectionError("again")
        return 7

    return f


# name -> (the sender, given the receiver's timed scheduler; the expected outcome)
# outcomes: ("value", v) with v what `await` returns, ("error", type), ("stopped",)
PATHS: dict[str, tuple[Callable[[Any], Any], tuple[Any, ...]]] = {
    "timeout fired": (
        lambda s: sx.schedule_after(s, 0.05) | sx.timeout(0.001),
        ("error", TimeoutError),
    ),
    "timeout not fired": (
        lambda s: sx.schedule_after(s, 0.001) | sx.then(lambda: 1) | sx.timeout(5),
        ("value", 1),
    ),
    "timeout of an error": (
        lambda s: sx.just() | sx.then(_boom) | sx.timeout(5),
        ("error", ValueError),
    ),
    "timeout of a stop": (lambda s: sx.just_stopped() | sx.timeout(5), ("stopped",)),
    "stop_after fired": (lambda s: sx.schedule_after(s, 0.05) | sx.stop_after(0.001), ("stopped",)),
    "when_any of timers": (
        lambda s: sx.when_any(
            sx.schedule_after(s, 0.001) | sx.then(lambda: 1),
            sx.schedule_after(s, 0.05) | sx.then(lambda: 2),
        ),
        ("value", 1),
    ),
    "when_any error": (
        lambda s: sx.when_any(sx.schedule_after(s, 0.05), sx.just() | sx.then(_boom)),
        ("error", ValueError),
    ),
    "when_any stopped": (
        lambda s: sx.when_any(sx.schedule_after(s, 0.05), sx.just_stopped()),
        ("stopped",),
    ),
    "stop_when trigger first": (
        lambda s: sx.stop_when(sx.schedule_after(s, 0.05), sx.schedule_after(s, 0.001)),
        ("stopped",),
    ),
    "stop_when source first": (
        lambda s: sx.stop_when(
            sx.schedule_after(s, 0.001) | sx.then(lambda: 3), sx.schedule_after(s, 0.05)
        ),
        ("value", 3),
    ),
    "stop_when error": (
        lambda s: sx.stop_when(sx.just() | sx.then(_boom), sx.schedule_after(s, 0.05)),
        ("error", ValueError),
    ),
    "retry with delay": (
        lambda s: sx.just() | sx.then(_flaky()) | sx.retry(attempts=3, delay=0.001),
        ("value", 7),
    ),
    "retry with delay, error": (
        lambda s: sx.just() | sx.then(_boom) | sx.retry(attempts=2, delay=0.001),
        ("error", ValueError),
    ),
    "schedule_after": (lambda s: sx.schedule_after(s, 0.001) | sx.then(lambda: 4), ("value", 4)),
}


def _on_clock(make: Callable[[Any], Any]) -> Any:
    """The sender ``make(sch)`` where ``sch`` is the receiver's scheduler (its clock)."""
    return sx.read_env(sx.get_scheduler) | sx.let_value(make)


@pytest.mark.parametrize("path", list(PATHS))
def test_time_adaptors_under_sync_wait_leave_no_cyclic_garbage(path: str) -> None:
    make, expected = PATHS[path]
    outcomes: list[tuple[Any, ...]] = []

    def once() -> None:
        try:
            r = sx.sync_wait(_on_clock(make))
        except Exception as e:
            outcomes.append(("error", type(e)))
        else:
            outcomes.append(("stopped",) if r is None else ("value", *r))

    once()
    n = cyclic_garbage_of_sync(lambda: [once() for _ in range(5)])
    assert set(outcomes) == {expected}  # the path under test was taken every time
    assert n == 0


@pytest.mark.parametrize("path", list(PATHS))
async def test_time_adaptors_under_trio_leave_no_cyclic_garbage(
    path: str, autojump_clock: trio.testing.MockClock
) -> None:
    make, expected = PATHS[path]
    outcomes: list[tuple[Any, ...]] = []

    async def once() -> None:
        try:
            r = await _on_clock(make)
        except sx.Stopped:
            outcomes.append(("stopped",))
        except Exception as e:
            outcomes.append(("error", type(e)))
        else:
            outcomes.append(("value", r))

    async def five() -> None:
        for _ in range(5):
            await once()

    await once()
    n = await cyclic_garbage_of(five)
    assert set(outcomes) == {expected}
    assert n == 0


async def test_timeouts_spawned_into_a_stopped_scope_leave_no_cyclic_garbage(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """100 spawns of ``schedule_after(sch, 3600) | timeout(1800)``, then ``request_stop()``:
    every race completes stopped and is freed by reference counting."""
    done: list[int] = []

    async def run() -> None:
        async with sx.counting_scope() as scope:
            sch = sx.trio_scheduler()
            for _ in range(100):
                scope.spawn(
                    sx.schedule_after(sch, 3600)
                    | sx.timeout(1800)
                    | sx.upon_stopped(lambda: done.append(1))
                )
            await trio.sleep(1)
            assert scope.count == 100
            scope.request_stop()
        assert trio.current_time() < 1800  # stopped, not timed out

    await run()
    done.clear()
    assert await cyclic_garbage_of(run) == 0
    assert len(done) == 100


def test_timeouts_spawned_into_a_stopped_scope_under_sync_wait_leave_no_cyclic_garbage() -> None:
    """The same with the ``run_loop``'s timers: spawned into a scope outside trio, stopped,
    joined with ``sync_wait``."""
    done: list[int] = []

    def run() -> None:
        scope = sx.counting_scope()

        def body(sch: Any) -> Any:
            for _ in range(20):
                race = sx.schedule_after(sch, 3600) | sx.timeout(1800)
                scope.spawn(
                    sx.write_env(race, sx.prop(sx.get_scheduler, sch))  # the timeout's clock
                    | sx.upon_stopped(lambda: done.append(1))
                )
            assert scope.count == 20
            scope.request_stop()
            return scope.join()

        sx.sync_wait(_on_clock(body))

    run()
    done.clear()
    assert cyclic_garbage_of_sync(run) == 0
    assert len(done) == 20
