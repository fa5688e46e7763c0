"""The trio runtime: ``await sndr``, the trio scheduler, coroutine senders.

Each row measures structexec and its plain-trio baseline in the same call (see
``_harness.py``). The targets:

* ``await sx.just(1)`` vs ``await trio.lowlevel.checkpoint()``: at most 0.5x (an awaited
  sender that completes inside ``start`` never yields to trio);
* ``await sx.schedule(sx.trio_scheduler())`` vs a checkpoint: at most 1.5x;
* ``await sx.when_all(c1(), c2())`` of two trivial coroutines vs a nursery running them:
  at most 1.5x.

Informational rows show the general paths (a schedule operation going through the FIFO queue,
a completion from another thread, trio cancellation of an awaited sender).
"""

from __future__ import annotations

import threading

import trio
import trio.lowlevel

import structexec as sx
from _harness import Bench, Pair, row, timeit_trio, trio_checkpoint_cost, trio_to_thread_cost


async def _noop() -> None:
    pass


async def _forever() -> None:
    await trio.sleep_forever()


@row(metric="await sx.just(1) vs trio checkpoint", unit="us/op", target=0.5)
def await_just(b: Bench) -> Pair:
    j = sx.just(1)

    async def op() -> None:
        await j

    n = b.n(100_000)
    return timeit_trio(op, n), trio_checkpoint_cost(n)


@row(metric="await sx.schedule(trio_scheduler()) vs trio checkpoint", unit="us/op", target=1.5)
def await_schedule(b: Bench) -> Pair:
    async def op(k: int) -> None:
        s = sx.schedule(sx.trio_scheduler())
        for _ in range(k):
            await s

    n = b.n(50_000)
    return timeit_trio(op, n, batch=True), trio_checkpoint_cost(n)


@row(
    metric="await sx.when_all(c1(), c2()) vs nursery running c1, c2",
    unit="us/op",
    target=1.5,
)
def await_when_all_coroutines(b: Bench) -> Pair:
    async def sx_op() -> None:
        await sx.when_all(_noop(), _noop())

    async def trio_op() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_noop)
            nursery.start_soon(_noop)

    n = b.n(10_000)
    return timeit_trio(sx_op, n), timeit_trio(trio_op, n)


@row(
    metric="await schedule(trio)|then(f) (FIFO queue path) vs trio checkpoint",
    unit="us/op",
    note="informational: the general path (a receiver other than the awaiting task's)",
)
def await_schedule_then(b: Bench) -> Pair:
    async def op(k: int) -> None:
        s = sx.schedule(sx.trio_scheduler()) | sx.then(lambda: None)
        for _ in range(k):
            await s

    n = b.n(20_000)
    return timeit_trio(op, n, batch=True), trio_checkpoint_cost(n)


@row(
    metric="await a coroutine sender (starts_on inline) vs nursery running it",
    unit="us/op",
    note="informational: one hosted trio task per await",
)
def await_coroutine_sender(b: Bench) -> Pair:
    inline = sx.inline_scheduler()

    async def sx_op() -> None:
        await sx.starts_on(inline, _noop())

    async def trio_op() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_noop)

    n = b.n(10_000)
    return timeit_trio(sx_op, n), timeit_trio(trio_op, n)


@row(
    metric="cancel an awaiting task (stop -> set_stopped -> Cancelled) vs cancel trio.sleep",
    unit="us/op",
    note="informational: move_on_after(0) around an awaited sender that waits for stop",
)
def cancel_awaiting(b: Bench) -> Pair:
    async def sx_op() -> None:
        with trio.CancelScope() as cs:
            cs.cancel()
            await sx.starts_on(sx.inline_scheduler(), _forever())

    async def trio_op() -> None:
        with trio.CancelScope() as cs:
            cs.cancel()
            await trio.sleep_forever()

    n = b.n(5_000)
    return timeit_trio(sx_op, n), timeit_trio(trio_op, n)


@row(
    metric="await a hop to a run_loop thread and back vs trio.to_thread.run_sync",
    unit="us/op",
    note="informational: the worker thread completes the awaited sender (run_sync_soon)",
)
def cross_thread_completion(b: Bench) -> Pair:
    n = b.n(2_000)
    loop = sx.run_loop()
    worker = threading.Thread(target=loop.run)
    worker.start()
    try:
        s = sx.schedule(loop.get_scheduler())

        async def op() -> None:
            await s

        sx_cost = timeit_trio(op, n)
    finally:
        loop.finish()
        worker.join()
    return sx_cost, trio_to_thread_cost(n)
