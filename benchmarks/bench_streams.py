"""Sequence senders (docs/streams.md) against the trio code they replace.

* per item: ``iterate(range(N)) | then_each(f) | reduce`` under ``sync_wait`` vs a trio
  producer task sending through a memory channel to a consumer task applying ``f``: at most
  0.5x the time;
* 100,000 items through ``let_each(async f, max_concurrency=16)`` (``f`` awaits
  ``trio.sleep(0)``) vs 16 trio worker tasks reading one memory channel: at least 0.8x the
  throughput;
* memory: tracemalloc peak of ``from_channel -> let_each(max_concurrency=16) ->
  into_channel`` at 1e4 and 1e6 items (1e5 with ``--quick``): flat, at most 1.3x;
* ``as_completed`` of 10,000 coroutines vs ``asyncio.as_completed`` of the asyncio
  equivalent: at most 1.0x the time.
"""

from __future__ import annotations

import asyncio
import gc
import time
import tracemalloc

import trio

import structexec as sx
from _harness import Bench, Pair, row, timeit_sync


def _f(x: int) -> int:
    return x + 1


def _add(a: int, v: int) -> int:
    return a + v


@row(
    metric="iterate|then_each|reduce under sync_wait vs trio producer->channel->consumer, per item",
    unit="us/op",
    target=0.5,
)
def per_item(b: Bench) -> Pair:
    n = b.n(200_000)

    def ours(k: int) -> None:
        sx.sync_wait(sx.reduce(sx.iterate(range(k)) | sx.then_each(_f), _add, 0))

    async def theirs(k: int) -> int:
        send, recv = trio.open_memory_channel[int](0)
        total = 0

        async def producer() -> None:
            async with send:
                for i in range(k):
                    await send.send(i)

        async def consumer() -> None:
            nonlocal total
            async for v in recv:
                total += _f(v)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(producer)
            nursery.start_soon(consumer)
        return total

    base_n = max(1, n // 10)  # the trio baseline is slow: fewer items, same per-item cost
    t0 = time.perf_counter()
    trio.run(theirs, base_n)
    base = (time.perf_counter() - t0) / base_n
    return timeit_sync(ours, n, batch=True), base


async def _sleep0(x: int) -> int:
    await trio.sleep(0)
    return x


@row(
    metric="let_each(async f, max_concurrency=16) vs 16 trio workers on one channel",
    unit="items/s",
    better="higher",
    target=0.8,
)
def let_each_throughput(b: Bench) -> Pair:
    n = b.n(100_000)

    async def ours() -> float:
        t0 = time.perf_counter()
        await sx.ignore_all_values(sx.iterate(range(n)) | sx.let_each(_sleep0, max_concurrency=16))
        return n / (time.perf_counter() - t0)

    async def theirs() -> float:
        send, recv = trio.open_memory_channel[int](0)
        t0 = time.perf_counter()

        async def worker(r: trio.MemoryReceiveChannel[int]) -> None:
            async with r:
                async for v in r:
                    await _sleep0(v)

        async with trio.open_nursery() as nursery:
            for _ in range(16):
                nursery.start_soon(worker, recv.clone())
            await recv.aclose()
            async with send:
                for i in range(n):
                    await send.send(i)
        return n / (time.perf_counter() - t0)

    return trio.run(ours), trio.run(theirs)


def _peak(n: int) -> float:
    async def main() -> float:
        s_in, r_in = trio.open_memory_channel[int](16)
        s_out, r_out = trio.open_memory_channel[int](16)

        async def feed() -> None:
            async with s_in:
                for i in range(n):
                    await s_in.send(i)

        async def drain() -> None:
            async for _ in r_out:
                pass

        async def just_it(x: int) -> int:
            return x

        gc.collect()
        tracemalloc.start()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(feed)
                nursery.start_soon(drain)
                seq = sx.from_channel(r_in) | sx.let_each(sx.just, max_concurrency=16)
                await sx.into_channel(seq, s_out)
            return float(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()

    return trio.run(main)


@row(
    metric="memory: peak of from_channel->let_each(16)->into_channel, big N vs 1e4 items",
    unit="B",
    target=1.3,
    reps=1,
)
def memory_flat(b: Bench) -> Pair:
    big = 100_000 if b.quick else 1_000_000
    return _peak(big), _peak(10_000)


@row(
    metric="as_completed of 10,000 coroutines vs asyncio.as_completed",
    unit="ms/op",
    target=1.0,
)
def as_completed_10k(b: Bench) -> Pair:
    k = b.n(10_000, minimum=1_000)

    async def c_trio(i: int) -> int:
        await trio.sleep(0)
        return i

    async def ours() -> float:
        t0 = time.perf_counter()
        got = await sx.to_list(sx.as_completed(*(c_trio(i) for i in range(k))))
        assert len(got) == k
        return time.perf_counter() - t0

    async def c_asyncio(i: int) -> int:
        await asyncio.sleep(0)
        return i

    async def theirs() -> float:
        t0 = time.perf_counter()
        got = [await f for f in asyncio.as_completed([c_asyncio(i) for i in range(k)])]
        assert len(got) == k
        return time.perf_counter() - t0

    return trio.run(ours), asyncio.run(theirs())


@row(metric="as_completed of 10,000 coroutines vs trio nursery+memory channel (informational)",
     unit="ms/op")
def as_completed_10k_trio(b: Bench) -> Pair:
    # trio's floor for the same work: each coroutine in a task of a nursery, sending its
    # result into a memory channel that the caller reads (the trio idiom as_completed
    # replaces), in the same run as the row above.
    k = b.n(10_000, minimum=1_000)

    async def c_trio(i: int) -> int:
        await trio.sleep(0)
        return i

    async def ours() -> float:
        t0 = time.perf_counter()
        got = await sx.to_list(sx.as_completed(*(c_trio(i) for i in range(k))))
        assert len(got) == k
        return time.perf_counter() - t0

    async def theirs() -> float:
        t0 = time.perf_counter()
        send, recv = trio.open_memory_channel[int](k)
        got = []

        async def one(i: int) -> None:
            await send.send(await c_trio(i))

        async def run_all() -> None:
            async with send, trio.open_nursery() as inner:
                for i in range(k):
                    inner.start_soon(one, i)

        async with trio.open_nursery() as n:
            n.start_soon(run_all)
            async for v in recv:
                got.append(v)
        assert len(got) == k
        return time.perf_counter() - t0

    return trio.run(ours), trio.run(theirs)
