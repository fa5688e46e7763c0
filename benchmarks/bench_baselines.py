"""Baseline-only sanity rows: what plain trio, anyio, asyncio and thread pools cost here.

They have no structexec side; each has a generous absolute ``limit`` that only a broken
harness or a pathologically slow machine misses. They give the scale against which the
structexec rows in the other ``bench_*.py`` modules are read, and show the harness works.
"""

from __future__ import annotations

from _harness import (
    Bench,
    Pair,
    anyio_start_soon_and_wait_handle_cost,
    anyio_start_soon_cost,
    asyncio_taskgroup_cost,
    row,
    threadpool_submit_result_cost,
    trio_cancel_sleepers_cost,
    trio_checkpoint_cost,
    trio_start_cost,
    trio_start_soon_cost,
    trio_to_thread_cost,
)


@row(metric="baseline: trio checkpoint, per await", unit="us/op", limit=50)
def checkpoint(b: Bench) -> Pair:
    return None, trio_checkpoint_cost(b.n(50_000))


@row(metric="baseline: trio nursery.start_soon(noop), per spawn", unit="us/op", limit=200)
def trio_spawn(b: Bench) -> Pair:
    return None, trio_start_soon_cost(b.n(20_000))


@row(metric="baseline: trio await nursery.start(fn), per spawn", unit="us/op", limit=400)
def trio_start(b: Bench) -> Pair:
    return None, trio_start_cost(b.n(10_000))


@row(metric="baseline: anyio start_soon (trio backend), per spawn", unit="us/op", limit=300)
def anyio_spawn(b: Bench) -> Pair:
    return None, anyio_start_soon_cost(b.n(20_000))


@row(
    metric="baseline: anyio start_soon + await TaskHandle (trio), per spawn",
    unit="us/op",
    limit=400,
)
def anyio_spawn_wait(b: Bench) -> Pair:
    return None, anyio_start_soon_and_wait_handle_cost(b.n(20_000))


@row(metric="baseline: asyncio TaskGroup.create_task, per spawn", unit="us/op", limit=200)
def asyncio_spawn(b: Bench) -> Pair:
    return None, asyncio_taskgroup_cost(b.n(20_000))


@row(
    metric="baseline: trio cancel of 1000 sleepers (200 quick), per sleeper",
    unit="us/op",
    limit=200,
)
def trio_cancel(b: Bench) -> Pair:
    return None, trio_cancel_sleepers_cost(1000 if not b.quick else 200)


@row(metric="baseline: ThreadPoolExecutor submit+result, per op", unit="us/op", limit=500)
def threadpool(b: Bench) -> Pair:
    return None, threadpool_submit_result_cost(b.n(20_000))


@row(metric="baseline: trio.to_thread.run_sync round trip", unit="us/op", limit=2000)
def to_thread(b: Bench) -> Pair:
    return None, trio_to_thread_cost(b.n(2_000))
