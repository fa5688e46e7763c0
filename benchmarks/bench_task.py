"""``@sx.task``: the cost of awaits inside a task.

Each row measures structexec and its plain-trio baseline in the same call (see
``_harness.py``). The targets:

* ``await sx.just(i)`` in a task on the trio scheduler vs ``await trio.lowlevel.checkpoint()``:
  at most 0.5x (a sender that completes inside ``start`` continues the task's loop without
  going through trio);
* a task awaiting another task vs a trio coroutine awaiting another coroutine plus a
  checkpoint: at most 1.5x (the awaited task runs as a frame of the same loop, in the same
  trio task).

Informational rows: the same loops under ``sync_wait`` (driven by structexec's own loop on a
``run_loop``), an await whose sender completes on another thread (affinity: the task hops
back onto the trio thread), and the cost of starting a task from plain trio code (it gets its
own trio task).
"""

from __future__ import annotations

import threading
import time

import trio
import trio.lowlevel

import structexec as sx
from _harness import Bench, Pair, row, timeit_sync, timeit_trio, trio_checkpoint_cost


@sx.task
async def _await_just_loop(n: int) -> None:
    for i in range(n):
        await sx.just(i)


@row(metric="task on trio: await sx.just(i) vs trio checkpoint", unit="us/op", target=0.5)
def task_await_just(b: Bench) -> Pair:
    async def run(n: int) -> None:
        await _await_just_loop(n)

    n = b.n(200_000)
    return timeit_trio(run, n, batch=True), trio_checkpoint_cost(n)


@sx.task
async def _leaf() -> int:
    return 1


@sx.task
async def _await_task_loop(n: int) -> None:
    for _ in range(n):
        await _leaf()


async def _coro_leaf() -> int:
    return 1


async def _await_coro_loop(n: int) -> None:
    for _ in range(n):
        await _coro_leaf()
        await trio.lowlevel.checkpoint()


@row(
    metric="task on trio awaiting a task vs coroutine awaiting a coroutine + checkpoint",
    unit="us/op",
    target=1.5,
)
def task_await_task(b: Bench) -> Pair:
    async def run(n: int) -> None:
        await _await_task_loop(n)

    n = b.n(100_000)
    return timeit_trio(run, n, batch=True), timeit_trio(_await_coro_loop, n, batch=True)


@row(metric="task under sync_wait: await sx.just(i) (info)", unit="us/op")
def task_sync_wait_just(b: Bench) -> Pair:
    n = b.n(200_000)

    def run(k: int) -> None:
        sx.sync_wait(_await_just_loop(k))

    return timeit_sync(run, n, batch=True), None


@row(metric="task under sync_wait: await a task (info)", unit="us/op")
def task_sync_wait_task(b: Bench) -> Pair:
    n = b.n(100_000)

    def run(k: int) -> None:
        sx.sync_wait(_await_task_loop(k))

    return timeit_sync(run, n, batch=True), None


@row(
    metric="task on trio: await a sender completing on another thread vs trio.to_thread (info)",
    unit="us/op",
)
def task_await_other_thread(b: Bench) -> Pair:
    n = b.n(5_000)

    def measure() -> tuple[float, float]:
        loop = sx.run_loop()
        worker = threading.Thread(target=loop.run)
        worker.start()
        sch = loop.get_scheduler()

        @sx.task
        async def hops(k: int) -> None:
            for _ in range(k):
                await sx.schedule(sch)

        async def main() -> tuple[float, float]:
            await hops(10)
            t0 = time.perf_counter()
            await hops(n)
            t1 = time.perf_counter()
            for _ in range(n):
                await trio.to_thread.run_sync(_nothing)
            t2 = time.perf_counter()
            return (t1 - t0) / n, (t2 - t1) / n

        try:
            return trio.run(main)
        finally:
            loop.finish()
            worker.join()

    return measure()


def _nothing() -> None:
    pass


@row(metric="await a task from plain trio code vs nursery.start_soon + wait (info)", unit="us/op")
def await_task_from_trio(b: Bench) -> Pair:
    n = b.n(10_000)

    async def via_task() -> None:
        await _leaf()

    async def via_nursery() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_coro_leaf)

    return timeit_trio(via_task, n), timeit_trio(via_nursery, n)
