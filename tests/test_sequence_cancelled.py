"""A ``trio.Cancelled`` raised by a user callable of ``then_each`` / ``let_each`` is never an
error datum (decision: a ``BaseException`` from a user callable is never turned into
``set_error``; [exec.then], [exec.let]), and the pipeline stops its other items and its
producer and waits for them, as a nursery cancels its other tasks when one raises
(docs/streams.md "What happens when things fail")."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import trio
import trio.testing

import structexec as sx


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


async def _a_cancelled() -> trio.Cancelled:
    """A ``trio.Cancelled`` caught from a cancel scope this task cancelled itself."""
    with trio.CancelScope() as cs:
        cs.cancel()
        try:
            await trio.sleep(1)
        except trio.Cancelled as c:
            return c
    raise AssertionError("not cancelled")  # pragma: no cover


@pytest.mark.parametrize("n", [2, 3])
async def test_let_each_callable_reraising_its_own_cancelled(
    n: int, autojump_clock: Any
) -> None:
    # max_concurrency > 1: the bounded stage runs the coroutines (in its worker tasks).
    log: list[str] = []

    def gen() -> Iterator[int]:
        try:
            yield from range(10)
        finally:
            log.append("gen closed")

    async def f(i: int) -> int:
        if i == 0:
            await trio.sleep(1)
            raise await _a_cancelled()
        try:
            await trio.sleep(100)
        finally:
            log.append(f"end {i}")
        return i

    with pytest.raises(sx.Stopped):  # stopped, never an error datum (no ErrorValue)
        await sx.to_list(sx.iterate(gen()) | sx.let_each(f, max_concurrency=n))
    # The other items in flight were cancelled and the generator closed, at once, and the
    # consumer completed only after they ended; the caller's scope was not cancelled.
    assert sorted(log) == sorted([f"end {i}" for i in range(1, n)] + ["gen closed"])
    assert trio.current_time() == pytest.approx(1)
    await trio.sleep(0)  # the task itself goes on: nothing cancelled it


async def test_a_nursery_in_the_same_situation(autojump_clock: Any) -> None:
    # The nursery cancels the other tasks as the pipeline stops its other items; it then
    # absorbs the Cancelled in its own (cancelled) scope, where the pipeline completes
    # stopped: a stopped item stops the whole stream, as a stopped child stops when_all.
    log: list[str] = []

    async def f(i: int) -> None:
        if i == 0:
            await trio.sleep(1)
            raise await _a_cancelled()
        try:
            await trio.sleep(100)
        finally:
            log.append(f"end {i}")

    async with trio.open_nursery() as nursery:
        for i in range(3):
            nursery.start_soon(f, i)
    assert sorted(log) == ["end 1", "end 2"]
    assert trio.current_time() == pytest.approx(1)


@pytest.mark.parametrize("n", [1, 3])
async def test_item_cancelled_by_its_own_cancel_scope_is_a_value(
    n: int, autojump_clock: Any
) -> None:
    # The coroutine's own scope catches its cancellation: the item completes with a value,
    # as the task would in a nursery.
    async def g(i: int) -> int:
        with trio.move_on_after(i + 1):
            await trio.sleep(100)
        return i

    got = await sx.to_list(sx.iterate(range(5)) | sx.let_each(g, max_concurrency=n))
    assert sorted(got) == list(range(5))


@pytest.mark.parametrize("n", [1, 2])
async def test_then_each_callable_raising_cancelled_propagates(n: int) -> None:
    caught = await _a_cancelled()
    calls: list[int] = []

    def h(i: int) -> int:
        calls.append(i)
        if i == 1:
            raise caught
        return i

    seq = sx.iterate([0, 1, 2])
    if n == 1:
        seq = seq | sx.then_each(h)
    else:
        seq = seq | sx.transform_each(sx.then(h), max_concurrency=n)
    with pytest.raises(trio.Cancelled) as ei:  # raised as it is: not an error datum
        await sx.to_list(seq)
    assert ei.value is caught
    assert 1 in calls
