"""Sequence senders: streams of items (docs/streams.md).

Coroutine objects are senders here: ``take_until(trio.sleep(t))`` passes one unawaited.

Values, order, in-flight peaks under ``MockClock``, backpressure, memory, errors, stops,
closing of generators, ``each()``, the parallel scheduler, and bad input at build time.
"""

from __future__ import annotations

import gc
import threading
import tracemalloc
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import trio
import trio.testing
from _helpers import cyclic_garbage_of, cyclic_garbage_of_sync
from _subproc import run_child

import structexec as sx

# --------------------------------------------------------------------------- protocol


def test_protocol_names() -> None:
    seq = sx.iterate([1])
    assert sx.is_sequence_sender(seq)
    assert isinstance(seq, sx.SequenceSender)
    assert not sx.is_sequence_sender(sx.just(1))
    assert not sx.is_sequence_sender(42)
    with pytest.raises(TypeError, match="set_next"):
        sx.set_next(object(), sx.just(1))


def test_a_user_sequence_sender_drives_set_next_by_hand() -> None:
    # A hand-written producer: offers items with sx.set_next and waits for each next sender.
    class Two(sx.SequenceSender[int]):
        def connect(self, rcvr: Any) -> Any:
            class Op:
                def start(self) -> None:
                    log = []

                    class R:
                        def set_value(self) -> None:
                            log.append("more")

                        def set_error(self, e: Any) -> None:
                            log.append("error")

                        def set_stopped(self) -> None:
                            log.append("stopped")

                    for x in (1, 2):
                        sx.connect(sx.set_next(rcvr, sx.just(x)), R()).start()
                    assert log == ["more", "more"]
                    rcvr.set_value()

            return Op()

    assert sx.sync_wait(sx.to_list(Two() | sx.then_each(lambda v: v * 3))) == ([3, 6],)


# --------------------------------------------------------------------------- basics


def test_iterate_consumers_without_trio() -> None:
    assert sx.sync_wait(sx.to_list(sx.iterate([1, 2, 3]))) == ([1, 2, 3],)
    assert sx.sync_wait(sx.reduce(sx.iterate(range(5)), lambda a, v: a + v, 0)) == (10,)
    assert sx.sync_wait(sx.ignore_all_values(sx.iterate(range(5)))) == ()
    assert sx.sync_wait(sx.to_list(sx.empty_sequence())) == ([],)
    # A list can be iterated by several runs (the iterator is made at start).
    s = sx.iterate([1, 2]) | sx.then_each(str)
    assert sx.sync_wait(sx.to_list(s)) == (["1", "2"],)
    assert sx.sync_wait(sx.to_list(s)) == (["1", "2"],)


def test_values_convention_per_item() -> None:
    seq = sx.iterate([1, 2, 3]) | sx.then_each(
        lambda v: None if v == 1 else (sx.values(v, v) if v == 2 else (v,))
    )
    assert sx.sync_wait(sx.to_list(seq)) == ([None, (2, 2), (3,)],)


def test_a_million_synchronous_items_need_no_stack() -> None:
    n = 200_000
    seq = sx.iterate(range(n)) | sx.then_each(lambda v: v + 1) | sx.filter_each(lambda v: v % 2)
    assert sx.sync_wait(sx.reduce(seq, lambda a, v: a + 1, 0)) == (n // 2,)
    seq2 = sx.iterate(range(n)) | sx.let_each(sx.just, max_concurrency=8, ordered=True)
    assert sx.sync_wait(sx.reduce(seq2, lambda a, v: a + 1, 0)) == (n,)


def test_pipe_forms_and_call_forms_agree() -> None:
    c = sx.then_each(lambda v: v + 1) | sx.filter_each(lambda v: v > 1) | sx.take(2)
    assert sx.sync_wait(sx.to_list(sx.iterate(range(10)) | c)) == ([2, 3],)
    seq = sx.take(sx.filter_each(sx.then_each(sx.iterate(range(10)), str), bool), 1)
    assert sx.sync_wait(sx.to_list(seq)) == (["0"],)


def test_filter_take_merge_merge_each() -> None:
    evens = sx.iterate(range(10)) | sx.filter_each(lambda v: v % 2 == 0)
    assert sx.sync_wait(sx.to_list(evens)) == ([0, 2, 4, 6, 8],)
    assert sx.sync_wait(sx.to_list(sx.iterate(range(10)) | sx.take(0))) == ([],)
    assert sx.sync_wait(sx.to_list(sx.iterate(range(10)) | sx.take(3))) == ([0, 1, 2],)
    (m,) = sx.sync_wait(
        sx.to_list(sx.merge(sx.iterate([1, 2]), sx.iterate([3]), sx.empty_sequence()))
    )
    assert sorted(m) == [1, 2, 3]
    assert sx.sync_wait(sx.to_list(sx.merge())) == ([],)
    outer = sx.iterate([sx.iterate([1, 2]), sx.iterate([3, 4])])
    assert sx.sync_wait(sx.to_list(outer | sx.merge_each(max_concurrency=1))) == ([1, 2, 3, 4],)
    (both,) = sx.sync_wait(sx.to_list(sx.merge_each(outer)))
    assert sorted(both) == [1, 2, 3, 4]
    # take after a merge of endless sources stops every source.
    closed = []

    def endless(tag: str) -> Iterator[str]:
        try:
            while True:
                yield tag
        finally:
            closed.append(tag)

    (got,) = sx.sync_wait(
        sx.to_list(sx.merge(sx.iterate(endless("a")), sx.iterate(endless("b"))) | sx.take(5))
    )
    # Under sync_wait the first source fills the five items inline; the second one was then
    # never advanced (its generator never started), and the first one was closed.
    assert got == ["a"] * 5
    assert closed == ["a"]


# --------------------------------------------------------------------------- trio sources


async def test_from_channel_then_into_channel() -> None:
    s_in, r_in = trio.open_memory_channel[int](5)
    s_out, r_out = trio.open_memory_channel[str](5)
    got: list[str] = []
    async with trio.open_nursery() as n:

        async def feed() -> None:
            async with s_in:
                for i in range(20):
                    await s_in.send(i)

        async def drain() -> None:
            async for v in r_out:
                got.append(v)

        n.start_soon(feed)
        n.start_soon(drain)
        await sx.into_channel(sx.from_channel(r_in) | sx.then_each(str), s_out)
    assert got == [str(i) for i in range(20)]


async def test_as_completed_in_completion_order(autojump_clock: trio.testing.MockClock) -> None:
    # Virtual time: the three sleeps start in one instant, so their deadlines keep the order
    # of their durations (with the real clock, a pause of this thread between two starts
    # could reorder them).
    async def c(i: int, d: float) -> int:
        await trio.sleep(d)
        return i

    got = await sx.to_list(sx.as_completed(c(0, 0.03), c(1, 0.01), c(2, 0.02), sx.just(3)))
    assert got == [3, 1, 2, 0]


async def test_from_aiter_closes_async_generator_when_ended_early() -> None:
    log = []

    async def agen() -> AsyncIterator[int]:
        try:
            for i in range(100):
                yield i
        finally:
            log.append("aclose")

    assert await sx.to_list(sx.from_aiter(agen()) | sx.take(3)) == [0, 1, 2]
    assert log == ["aclose"]  # closed inside the operation, before it completed


def test_iterate_closes_generator_when_ended_early() -> None:
    log = []

    def gen() -> Iterator[int]:
        try:
            yield from range(100)
        finally:
            log.append("close")

    assert sx.sync_wait(sx.to_list(sx.iterate(gen()) | sx.take(2))) == ([0, 1],)
    assert log == ["close"]
    log.clear()
    with pytest.raises(ValueError):
        sx.sync_wait(sx.ignore_all_values(sx.iterate(gen()) | sx.then_each(_fail_at(4))))
    assert log == ["close"]


def _fail_at(k: int) -> Any:
    def f(v: int) -> int:
        if v == k:
            raise ValueError(f"item {v}")
        return v

    return f


# --------------------------------------------------------------------------- concurrency rules


class _Flight:
    """Counts items started and not yet delivered (delivery = the consumer's reduce step)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = 0
        self.peak = 0
        self.started: list[int] = []

    def start(self, i: int) -> None:
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
            self.started.append(i)

    def deliver(self, acc: list[int], v: int) -> list[int]:
        with self.lock:
            self.now -= 1
        acc.append(v)
        return acc


DURATIONS = [5.1, 1.2, 4.3, 2.4, 3.5, 1.6, 1.7, 6.8, 2.9, 2.05, 3.15, 1.25]


@pytest.mark.parametrize("n", [1, 3, 5])
@pytest.mark.parametrize("ordered", [False, True])
@pytest.mark.parametrize("async_fn", [False, True])
async def test_at_most_n_in_flight_and_order(
    n: int, ordered: bool, async_fn: bool, autojump_clock: Any
) -> None:
    # async_fn: let_each(async def) (under trio: items run in worker tasks); else a plain
    # function returning a coroutine (each coroutine in a task of its own).
    fl = _Flight()

    async def work(i: int) -> int:
        await trio.sleep(DURATIONS[i])
        return i

    async def counted(i: int) -> int:
        fl.start(i)
        return await work(i)

    def begin(i: int) -> Any:
        fl.start(i)  # counted when the item is started (trio runs new tasks in any order)
        return work(i)

    seq = sx.iterate(range(len(DURATIONS))) | sx.let_each(
        counted if async_fn else begin, max_concurrency=n, ordered=ordered
    )
    got = await sx.reduce(seq, fl.deliver, [])
    assert fl.peak == n  # the bound is reached and never exceeded
    if async_fn:
        assert sorted(fl.started) == list(range(len(DURATIONS)))
    else:
        assert fl.started == list(range(len(DURATIONS)))  # pulled in order
    if ordered or n == 1:
        assert got == list(range(len(DURATIONS)))
    else:
        assert sorted(got) == list(range(len(DURATIONS)))
        assert got != list(range(len(DURATIONS)))  # completion order differs here
    # Completion order is what a simulation of n workers gives.
    if not ordered and n > 1:
        assert got == _simulate(n)


def _simulate(n: int) -> list[int]:
    # Items start when a slot frees; finishing order by (end time, start index).
    t_free = [0.0] * n
    ends = []
    for i, d in enumerate(DURATIONS):
        k = min(range(n), key=lambda j: t_free[j])
        start = t_free[k]
        t_free[k] = start + d
        ends.append((start + d, i))
    assert len({round(e, 6) for e, _ in ends}) == len(ends)  # no ties: the order is defined
    return [i for _, i in sorted(ends)]


async def test_backpressure_blocks_the_sending_task(autojump_clock: Any) -> None:
    send, recv = trio.open_memory_channel[int](0)
    sent = []
    snapshot = []

    async def work(i: int) -> int:
        await trio.sleep(10)
        return i

    async def feed() -> None:
        async with send:
            for i in range(10):
                await send.send(i)
                sent.append(i)

    async def watch() -> None:
        await trio.sleep(5)
        snapshot.append(len(sent))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(feed)
        nursery.start_soon(watch)
        got = await sx.to_list(sx.from_channel(recv) | sx.let_each(work, max_concurrency=2))
    # At t=5: two items run, the third was received and waits for a slot; the sender is
    # blocked on the fourth.
    assert snapshot == [3]
    assert sorted(got) == list(range(10))


def _peak_bytes(n: int) -> int:
    """The tracemalloc peak above the start of a run of ``n`` items (the least of two runs:
    other threads of the process, such as pool threads of earlier tests, allocate too)."""
    seq = sx.iterate(range(n)) | sx.let_each(sx.just, max_concurrency=16) | sx.then_each(str)
    peaks = []
    for _ in range(2):
        gc.collect()
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            sx.sync_wait(sx.ignore_all_values(seq))
            peaks.append(tracemalloc.get_traced_memory()[1] - base)
        finally:
            tracemalloc.stop()
    return min(peaks)


def test_memory_is_constant_in_the_number_of_items() -> None:
    # O(number of items) would be a megabyte or more at 20,000 items (tens of bytes per item at
    # least); the bound leaves room for noise only. (benchmarks/bench_streams.py measures 1e6.)
    small = _peak_bytes(1_000)
    big = _peak_bytes(20_000)
    assert big <= 2 * small + 100_000, (small, big)


# --------------------------------------------------------------------------- parallel scheduler


def test_items_hopped_to_the_parallel_scheduler() -> None:
    par = sx.get_parallel_scheduler()
    main = threading.get_ident()
    fl = _Flight()
    threads = set()
    gate = threading.Barrier(2, timeout=10)

    def f(i: int) -> int:
        threads.add(threading.get_ident())
        if i < 2:
            gate.wait()  # the first two items run at once on the pool (it has >= 2 threads)
        return i * 2

    def begin(i: int) -> int:
        fl.start(i)
        return i

    seq = (
        sx.iterate(range(30))
        | sx.then_each(begin)
        | sx.transform_each(sx.continues_on(par) | sx.then(f), max_concurrency=2)
    )
    (got,) = sx.sync_wait(sx.reduce(seq, fl.deliver, []))
    assert sorted(got) == [i * 2 for i in range(30)]
    assert fl.peak == 2
    assert main not in threads
    seq2 = sx.iterate(range(30)) | sx.transform_each(
        sx.continues_on(par) | sx.then(lambda i: i), max_concurrency=4, ordered=True
    )
    assert sx.sync_wait(sx.to_list(seq2)) == (list(range(30)),)


async def test_parallel_items_under_trio() -> None:
    par = sx.get_parallel_scheduler()
    seq = sx.iterate(range(50)) | sx.transform_each(
        sx.continues_on(par) | sx.then(lambda i: i + 1), max_concurrency=4
    )
    got = await sx.to_list(seq)
    assert sorted(got) == list(range(1, 51))


# --------------------------------------------------------------------------- errors


async def test_first_error_stops_everything_and_waits(autojump_clock: Any) -> None:
    log: list[str] = []

    async def work(i: int) -> int:
        try:
            if i == 2:
                await trio.sleep(1)
                raise ValueError("first")
            if i == 3:
                try:
                    await trio.sleep(100)
                except trio.Cancelled:
                    raise KeyError("second") from None
            await trio.sleep(100)
            return i
        finally:
            log.append(f"end {i}")

    pulled = []
    seq = (
        sx.iterate(range(10))
        | sx.then_each(lambda i: pulled.append(i) or i)
        | sx.let_each(work, max_concurrency=4)
    )
    with pytest.raises(ValueError, match="first") as ei:
        await sx.to_list(seq)
    # Every item in flight ended before the error came out; no further item was started.
    assert sorted(log) == ["end 0", "end 1", "end 2", "end 3"]
    assert sorted(pulled) == [0, 1, 2, 3]  # no further item was started
    assert trio.current_time() < 2  # the sleepers were cancelled, not waited for
    notes = getattr(ei.value, "__notes__", [])
    assert any("second" in n for n in notes)


@pytest.mark.parametrize(
    "where", ["then_each", "let_each", "filter_each", "reduce", "generator", "item"]
)
def test_exception_in_every_user_callable(where: str) -> None:
    boom = ValueError("boom")

    def bad(*a: Any) -> Any:
        raise boom

    def gen() -> Iterator[int]:
        yield 1
        raise boom

    src = sx.iterate(gen()) if where == "generator" else sx.iterate([1, 2, 3])
    if where == "then_each":
        src = src | sx.then_each(bad)
    elif where == "let_each":
        src = src | sx.let_each(bad, max_concurrency=2)
    elif where == "filter_each":
        src = src | sx.filter_each(bad)
    elif where == "item":
        src = src | sx.let_each(lambda v: sx.just_error(boom))
    consumer = sx.reduce(src, bad, 0) if where == "reduce" else sx.to_list(src)
    with pytest.raises(ValueError) as ei:
        sx.sync_wait(consumer)
    assert ei.value is boom


@pytest.mark.parametrize("where", ["then_each", "filter_each", "reduce", "generator"])
@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit])
def test_base_exception_in_a_user_callable_propagates(where: str, exc: type) -> None:
    def bad(*a: Any) -> Any:
        raise exc

    def gen() -> Iterator[int]:
        yield 1
        raise exc

    src = sx.iterate(gen()) if where == "generator" else sx.iterate([1, 2])
    if where == "then_each":
        src = src | sx.then_each(bad)
    elif where == "filter_each":
        src = src | sx.filter_each(bad)
    consumer = sx.reduce(src, bad, 0) if where == "reduce" else sx.to_list(src)
    with pytest.raises(exc):
        sx.sync_wait(consumer)


@pytest.mark.parametrize("n", [1, 2])
async def test_base_exception_in_let_each_coroutine(n: int) -> None:
    async def bad(v: int) -> int:
        raise KeyboardInterrupt

    with pytest.raises(BaseException) as ei:
        await sx.to_list(sx.iterate([1]) | sx.let_each(bad, max_concurrency=n))
    # KeyboardInterrupt as it is, or inside the exception group of the hosting nursery.
    assert "KeyboardInterrupt" in repr(ei.value)


async def test_async_generator_raising_and_closed_channel() -> None:
    async def agen() -> AsyncIterator[int]:
        yield 1
        raise ValueError("agen")

    with pytest.raises(ValueError, match="agen"):
        await sx.to_list(sx.from_aiter(agen()))
    _send, recv = trio.open_memory_channel[int](1)
    await recv.aclose()
    with pytest.raises(trio.ClosedResourceError):
        await sx.to_list(sx.from_channel(recv))
    send2, recv2 = trio.open_memory_channel[int](1)
    await recv2.aclose()
    with pytest.raises(trio.BrokenResourceError):
        await sx.into_channel(sx.iterate([1, 2]), send2)


# --------------------------------------------------------------------------- stops


async def test_trio_cancellation_stops_producer_and_items(autojump_clock: Any) -> None:
    log: list[str] = []

    def gen() -> Iterator[int]:
        try:
            yield from range(100)
        finally:
            log.append("gen closed")

    async def work(i: int) -> int:
        try:
            await trio.sleep(100)
        finally:
            log.append(f"end {i}")
        return i

    with trio.move_on_after(5) as cs:
        await sx.to_list(sx.iterate(gen()) | sx.let_each(work, max_concurrency=3))
    assert cs.cancelled_caught
    assert sorted(log) == ["end 0", "end 1", "end 2", "gen closed"]
    assert trio.current_time() == pytest.approx(5)


async def test_stop_from_the_consumers_token_with_from_channel(autojump_clock: Any) -> None:
    _send, recv = trio.open_memory_channel[int](0)
    src = sx.inplace_stop_source()

    async def stopper() -> None:
        await trio.sleep(3)
        src.request_stop()

    consumer = sx.write_env(
        sx.to_list(sx.from_channel(recv)), sx.prop(sx.get_stop_token, src.get_token())
    )
    async with trio.open_nursery() as n:
        n.start_soon(stopper)
        with pytest.raises(sx.Stopped):
            await consumer
    assert trio.current_time() == pytest.approx(3)


async def test_take_until_stops_a_pending_receive(autojump_clock: Any) -> None:
    send, recv = trio.open_memory_channel[int](10)
    for i in range(3):
        send.send_nowait(i)
    got = await sx.to_list(
        sx.from_channel(recv)
        | sx.take_until(
            trio.sleep(  # noqa: ASYNC105
                7
            )
        )
    )
    assert got == [0, 1, 2]
    assert trio.current_time() == pytest.approx(7)
    # The trigger is stopped when the sequence ends first.
    got2 = await sx.to_list(
        sx.iterate([1, 2])
        | sx.take_until(
            trio.sleep(  # noqa: ASYNC105
                1000
            )
        )
    )
    assert got2 == [1, 2]
    assert trio.current_time() == pytest.approx(7)


# --------------------------------------------------------------------------- each()


async def test_each_iterates_and_runs_one_ahead() -> None:
    pulled = []
    got = []
    seq = sx.iterate(range(5)) | sx.then_each(lambda v: pulled.append(v) or v)
    async with sx.each(seq) as items:
        assert not hasattr(items, "asend")  # a plain iterator, not an async generator
        async for v in items:
            await trio.sleep(0.001)
            assert len(pulled) <= v + 2  # at most one item ahead of the body
            got.append(v)
    assert got == [0, 1, 2, 3, 4]


async def test_each_break_closes_the_generator() -> None:
    log = []

    def gen() -> Iterator[int]:
        try:
            yield from range(100)
        finally:
            log.append("closed")

    async with sx.each(sx.iterate(gen())) as items:
        async for v in items:
            if v == 2:
                break
    assert log == ["closed"]


async def test_each_body_exception_comes_out_as_raised() -> None:
    with pytest.raises(KeyError) as ei:
        async with sx.each(sx.iterate(range(10))) as items:
            async for v in items:
                if v == 3:
                    raise KeyError("body")
    assert type(ei.value) is KeyError


async def test_each_sequence_error_raised_by_the_loop() -> None:
    got = []
    with pytest.raises(ValueError, match="item 2"):
        async with sx.each(sx.iterate(range(10)) | sx.then_each(_fail_at(2))) as items:
            async for v in items:
                got.append(v)
    assert got == [0, 1]


async def test_each_cancelled_from_outside(autojump_clock: Any) -> None:
    log = []

    async def slow(v: int) -> int:
        try:
            await trio.sleep(10)
        finally:
            log.append(v)
        return v

    with trio.move_on_after(15):
        async with sx.each(sx.iterate(range(10)) | sx.let_each(slow)) as items:
            async for _ in items:
                pass
    assert log == [0, 1]  # the second item was cancelled at t=15


# --------------------------------------------------------------------------- bad input


def test_bad_arguments_rejected_at_build_time() -> None:
    with pytest.raises(TypeError, match="f must be callable"):
        sx.then_each(None)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="iterable"):
        sx.iterate(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_concurrency"):
        sx.let_each(sx.just, max_concurrency=0)
    with pytest.raises(TypeError, match="max_concurrency"):
        sx.transform_each(sx.then(str), max_concurrency=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="n must be >= 0"):
        sx.take(-1)
    with pytest.raises(TypeError, match="n must be an int"):
        sx.take("3")
    with pytest.raises(TypeError, match="pred must be callable"):
        sx.filter_each(3)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="trigger must be a sender"):
        sx.take_until(3)
    with pytest.raises(TypeError, match="seqs"):
        sx.merge(sx.just(1))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_concurrency"):
        sx.merge_each(max_concurrency=0)
    with pytest.raises(TypeError, match="sequence sender"):
        sx.to_list(sx.just(1))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="async"):
        sx.then_each(_async_fn)
    with pytest.raises(TypeError, match="receive_channel"):
        sx.from_channel([1])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="aiterable"):
        sx.from_aiter([1])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="send_channel"):
        sx.into_channel(sx.iterate([1]), [])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="closure"):
        sx.transform_each(sx.just(1))  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="senders"):
        sx.as_completed(3)


async def _async_fn(v: int) -> int:
    return v


# --------------------------------------------------------------------------- cycles


def test_no_cyclic_garbage_sync() -> None:
    def run() -> None:
        seq = (
            sx.iterate(range(20))
            | sx.let_each(sx.just, max_concurrency=3, ordered=True)
            | sx.filter_each(bool)
        )
        sx.sync_wait(sx.to_list(seq | sx.take(5)))
        sx.sync_wait(sx.to_list(sx.merge(sx.iterate([1]), sx.iterate([2]))))

    assert cyclic_garbage_of_sync(run) == 0


async def test_no_cyclic_garbage_trio() -> None:
    async def run() -> None:
        send, recv = trio.open_memory_channel[int](10)
        for i in range(3):
            send.send_nowait(i)
        await send.aclose()
        await sx.to_list(
            sx.from_channel(recv)
            | sx.take_until(
                trio.sleep(  # noqa: ASYNC105
                    1000
                )
            )
        )
        async with sx.each(sx.iterate(range(3))) as items:
            async for _ in items:
                pass

    assert await cyclic_garbage_of(run) == 0


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


SIGINT_CHILD = """
import trio
import structexec as sx

log = []

async def work(i):
    try:
        await trio.sleep(3600)
    finally:
        log.append(i)
    return i

async def main():
    send, recv = trio.open_memory_channel(0)

    async def feed():
        i = 0
        try:
            while True:
                await send.send(i)
                i += 1
        finally:
            log.append("feed")

    started = []

    def begin(i):
        started.append(i)
        if len(started) == 3:
            ready()
        return work(i)

    async with trio.open_nursery() as n:
        n.start_soon(feed)
        await sx.ignore_all_values(sx.from_channel(recv) | sx.let_each(begin, max_concurrency=3))

try:
    trio.run(main)
except BaseException as e:  # KeyboardInterrupt, inside the group of the nursery
    print("interrupted", leaf_names(e), sorted(map(str, log)))
"""


def test_real_sigint_stops_a_pipeline_cleanly() -> None:
    r = run_child(SIGINT_CHILD, timeout=60, sigint_after_ready=True)
    assert not r.timed_out, r
    assert r.returncode == 0, r
    # The three items in flight and the feeding task all ran their finally blocks.
    assert "interrupted ['KeyboardInterrupt'] ['0', '1', '2', 'feed']" in r.stdout, r


@pytest.mark.parametrize("ordered", [False, True])
def test_thread_race_stress(ordered: bool) -> None:
    # Items complete on pool threads while the producer runs on another: a tiny switch
    # interval makes the hand-offs between threads race (lost wake-ups would hang, a slot
    # counted twice would break the peak, a result delivered twice would break the list).
    import sys

    par = sx.get_parallel_scheduler()
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        for _ in range(5):
            fl = _Flight()

            seq = (
                sx.iterate(range(300))
                | sx.then_each(lambda i, fl=fl: fl.start(i) or i)
                | sx.transform_each(
                    sx.continues_on(par) | sx.then(lambda i: i * 2),
                    max_concurrency=3,
                    ordered=ordered,
                )
            )
            (got,) = sx.sync_wait(sx.reduce(seq, fl.deliver, []))
            assert sorted(got) == [i * 2 for i in range(300)]
            if ordered:
                assert got == [i * 2 for i in range(300)]
            assert fl.peak <= 3
            # An early end (take) while items are in flight on the pool.
            seq2 = sx.iterate(range(10_000)) | sx.transform_each(
                sx.continues_on(par) | sx.then(lambda i: i), max_concurrency=3, ordered=ordered
            )
            (first,) = sx.sync_wait(sx.to_list(seq2 | sx.take(7)))
            assert len(first) == 7
    finally:
        sys.setswitchinterval(old)


async def test_into_channel_send_loop_backpressure_error_and_threads() -> None:
    # A channel of size 0 whose reader is slow: values wait in the send loop, in order.
    send, recv = trio.open_memory_channel[int](0)
    got: list[int] = []
    async with trio.open_nursery() as n:

        async def reader() -> None:
            async for v in recv:
                await trio.sleep(0)
                got.append(v)

        n.start_soon(reader)
        await sx.into_channel(sx.iterate(range(50)), send)
    assert got == list(range(50))
    # The reader goes away after two values: the send that blocks fails, and so does the run.
    send2, recv2 = trio.open_memory_channel[int](0)
    async with trio.open_nursery() as n:

        async def quitter() -> None:
            async with recv2:
                await recv2.receive()
                await recv2.receive()

        n.start_soon(quitter)
        with pytest.raises(trio.BrokenResourceError):
            await sx.into_channel(sx.iterate(range(50)), send2)
    # Values that complete on pool threads are sent from the trio thread.
    par = sx.get_parallel_scheduler()
    send3, recv3 = trio.open_memory_channel[int](0)
    got3: list[int] = []
    async with trio.open_nursery() as n:

        async def reader3() -> None:
            async for v in recv3:
                got3.append(v)

        n.start_soon(reader3)
        seq = sx.iterate(range(40)) | sx.transform_each(
            sx.continues_on(par) | sx.then(lambda i: i), max_concurrency=3, ordered=True
        )
        await sx.into_channel(seq, send3)
    assert got3 == list(range(40))


async def test_ordered_stage_delivers_one_at_a_time_to_a_lazy_async_stage() -> None:
    # The ordered stage offers its next result only when the previous one was delivered, even
    # when delivering means running a coroutine downstream (a stage after it).
    async def ck(v: int) -> int:
        await trio.lowlevel.checkpoint()
        return v

    src = (14, 6, 10, 3, 13, 0, 2)
    for _ in range(20):
        seq = sx.iterate(src) | sx.let_each(ck, max_concurrency=3, ordered=True) | sx.let_each(ck)
        assert await sx.to_list(seq) == list(src)


async def test_stop_requested_from_another_thread() -> None:
    # The stop callback runs on the requesting thread; the worker tasks are cancelled on the
    # trio thread (through run_sync_soon).
    log: list[int] = []
    started = trio.Event()

    async def work(i: int) -> int:
        try:
            if i == 2:
                started.set()
            await trio.sleep(1000)
        finally:
            log.append(i)
        return i

    src = sx.inplace_stop_source()
    consumer = sx.write_env(
        sx.to_list(sx.iterate(range(100)) | sx.let_each(work, max_concurrency=3)),
        sx.prop(sx.get_stop_token, src.get_token()),
    )
    async with trio.open_nursery() as n:

        async def stopper() -> None:
            await started.wait()
            await trio.to_thread.run_sync(src.request_stop)

        n.start_soon(stopper)
        with pytest.raises(sx.Stopped):
            await consumer
    assert sorted(log) == [0, 1, 2]  # cancelled (real time: a hang would hit the suite timeout)
