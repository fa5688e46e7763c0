"""Timed schedulers (docs/time.md "Timed schedulers").

* ``await sx.schedule_after(trio_sch, 0)`` vs ``await trio.sleep(0)``: at most 1.5x;
* 10,000 pending ``schedule_after`` timers spawned into a ``counting_scope``, then
  ``request_stop``, vs 10,000 trio tasks in ``trio.sleep`` cancelled: at most 1.5x (per timer,
  spawn + stop + join);
* ``sx.operation_tree()`` over 50,000 pending ``schedule_after`` timers spawned into a
  ``counting_scope`` inside trio: at most 5 us per pending operation (docs/debugging.md);
* ``run_loop`` with N = 1e3, 1e4, 1e5 timers (random deadlines within 20 ms, all fired):
  per-timer cost, informational (it should grow like log n: a ``SortedList`` insert and a
  slice of the due ones).
"""

from __future__ import annotations

import random
import time

import trio

import structexec as sx
from _harness import Bench, Pair, row, timeit_trio


@row(metric="await sx.schedule_after(trio_sch, 0) vs await trio.sleep(0)", target=1.5)
def await_schedule_after_zero(b: Bench) -> Pair:
    async def sx_op(k: int) -> None:
        s = sx.schedule_after(sx.trio_scheduler(), 0)
        for _ in range(k):
            await s

    async def trio_op(k: int) -> None:
        for _ in range(k):
            await trio.sleep(0)

    n = b.n(50_000)
    return timeit_trio(sx_op, n, batch=True), timeit_trio(trio_op, n, batch=True)


@row(
    metric="await sx.timeout(sx.just(1), 10) vs with trio.fail_after(10): await trio.sleep(0)",
    target=1.5,
)
def timeout_overhead(b: Bench) -> Pair:
    """The cost of a timeout that does not fire: structexec races the work with a timer of
    the trio scheduler; trio's side is a cancel scope with a deadline around a checkpoint
    (awaiting ``sx.just(1)`` alone costs less than a checkpoint)."""

    async def sx_op(k: int) -> None:
        s = sx.timeout(sx.just(1), 10)
        for _ in range(k):
            await s

    async def trio_op(k: int) -> None:
        for _ in range(k):
            with trio.fail_after(10):
                await trio.sleep(0)

    n = b.n(20_000)
    return timeit_trio(sx_op, n, batch=True), timeit_trio(trio_op, n, batch=True)


def _stop_timers_cost(n: int) -> float:
    async def main() -> float:
        sch = sx.trio_scheduler()
        t0 = time.perf_counter()
        async with sx.counting_scope() as scope:
            s = sx.schedule_after(sch, 3600)
            spawn = scope.spawn
            for _ in range(n):
                spawn(s)
            await trio.lowlevel.checkpoint()
            scope.request_stop()
        return (time.perf_counter() - t0) / n

    return trio.run(main)


def _cancel_sleepers_cost(n: int) -> float:
    async def main() -> float:
        t0 = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(n):
                nursery.start_soon(trio.sleep, 3600)
            await trio.lowlevel.checkpoint()
            nursery.cancel_scope.cancel()
        return (time.perf_counter() - t0) / n

    return trio.run(main)


@row(
    metric="10k schedule_after timers spawned, then request_stop vs 10k trio.sleep tasks cancelled",
    unit="us/op",
    target=1.5,
)
def stop_pending_timers(b: Bench) -> Pair:
    n = b.n(10_000)
    _stop_timers_cost(min(n, 1000))  # warm-up
    return _stop_timers_cost(n), _cancel_sleepers_cost(n)


@row(
    metric="sx.operation_tree() over 50k pending schedule_after timers, per operation",
    unit="us/op",
    limit=5.0,
)
def operation_tree_of_pending_timers(b: Bench) -> Pair:
    return _operation_tree_cost(b.n(50_000)), None


def _operation_tree_cost(n: int) -> float:
    # n timers spawned into one scope, all pending; one snapshot taken as a warm-up, then the
    # second one timed (the trio loop is blocked for that long).
    async def main() -> float:
        async with sx.counting_scope() as scope:
            sch = sx.trio_scheduler()
            for _ in range(n):
                scope.spawn(sx.schedule_after(sch, 3600))
            await trio.lowlevel.checkpoint()
            sx.operation_tree()
            t0 = time.perf_counter()
            tree = sx.operation_tree()
            dt = time.perf_counter() - t0
            assert sum(len(s.operations) for s in tree) >= n
            del tree
            scope.request_stop()
        return dt / n

    return trio.run(main)


def _run_loop_timers_cost(n: int) -> float:
    # Start n timers (deadlines in the future, in random order: each a SortedList insert),
    # wait until all are due (not measured), then run() fires them all.
    rnd = random.Random(1)
    offsets = [rnd.random() * 0.02 for _ in range(n)]
    loop = sx.run_loop()
    sch = loop.get_scheduler()
    rcvr = _Count(loop, n)
    base = sch.now() + 0.05 + n * 10e-6
    ops = [sx.connect(sx.schedule_at(sch, base + d), rcvr) for d in offsets]
    t0 = time.perf_counter()
    for op in ops:
        op.start()
    t_start = time.perf_counter() - t0
    time.sleep(max(0.0, base + 0.021 - sch.now()))
    t1 = time.perf_counter()
    loop.run()
    return (t_start + time.perf_counter() - t1) / n


class _Count:
    __slots__ = ("left", "loop")

    def __init__(self, loop: sx.run_loop, n: int) -> None:
        self.loop = loop
        self.left = n

    def get_env(self) -> object:
        return sx.env()

    def set_value(self) -> None:
        self.left -= 1
        if not self.left:
            self.loop.finish()

    def set_stopped(self) -> None:  # pragma: no cover - nobody stops them
        self.set_value()

    def set_error(self, e: object) -> None:  # pragma: no cover - timers never fail
        raise AssertionError(e)


for _n in (1_000, 10_000, 100_000):

    def _mk(n: int) -> None:
        @row(
            metric=f"run_loop: {n:,} timers started and fired, per timer",
            unit="us/op",
            note="informational: grows like log n (SortedList)",
        )
        def run_loop_timers(b: Bench) -> Pair:
            return _run_loop_timers_cost(b.n(n, minimum=100)), None

        run_loop_timers.__name__ = f"run_loop_timers_{n}"

    _mk(_n)
