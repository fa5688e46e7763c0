"""Counting scopes vs trio nurseries and anyio task handles.

Every row measures structexec and its baseline in the same call:

* spawning a plain sender into a ``counting_scope`` vs ``nursery.start_soon(async_noop)``
  (both including the work running to completion and the block's exit);
* ``scope.start_soon(async_noop)`` vs ``nursery.start_soon(async_noop)``;
* an empty ``async with sx.counting_scope()`` vs an empty ``async with trio.open_nursery()``,
  and ten nested scopes (one child each) vs ten nested nurseries;
* ``spawn_future`` + awaiting the result vs anyio's ``start_soon`` + awaiting its
  ``TaskHandle`` (anyio >= 4.14, trio backend);
* ``request_stop()`` with 5,000 hosted sleeping tasks vs ``nursery.cancel_scope.cancel()``
  with 5,000 sleepers (time from the request until the block has exited, per task);
* memory per pending spawned sender (one that completes only on stop) vs one sleeping trio
  task (tracemalloc).
"""

from __future__ import annotations

import gc
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import trio
import trio.testing

import structexec as sx
from _harness import (
    Bench,
    Pair,
    anyio_start_soon_and_wait_handle_cost,
    row,
    timeit_trio,
    trio_cancel_sleepers_cost,
    trio_start_soon_cost,
)


async def _anoop() -> None:
    pass


def _noop() -> None:
    pass


def _per_second(cost: float | None) -> float | None:
    return None if cost is None else 1.0 / cost


def _abba(sx_cost: Callable[[], float | None], base_cost: Callable[[], float | None]) -> Pair:
    """Measure baseline, structexec, structexec, baseline; the better of each side.

    The machine is shared and the first of two back-to-back measurements tends to differ
    from the second; alternating the order cancels that out.
    """
    b1 = base_cost()
    s1 = sx_cost()
    s2 = sx_cost()
    b2 = base_cost()
    s = None if s1 is None or s2 is None else min(s1, s2)
    b = None if b1 is None or b2 is None else min(b1, b2)
    return s, b


# --------------------------------------------------------------------------- spawn


def spawn_fresh_cost(n: int) -> float:
    """``sx.spawn(sx.just() | sx.then(noop), token)`` per spawn, building the sender each time,
    into a counting_scope opened with ``async with`` (its exit included)."""

    async def spawn(k: int) -> None:
        async with sx.counting_scope() as scope:
            tok = scope.get_token()
            for _ in range(k):
                sx.spawn(sx.just() | sx.then(_noop), tok)

    return timeit_trio(spawn, n, batch=True)


def spawn_prebuilt_cost(n: int) -> float:
    """The same with the sender built once (a sender is a reusable description of work, as
    the function given to ``start_soon`` is)."""

    async def spawn(k: int) -> None:
        async with sx.counting_scope() as scope:
            tok = scope.get_token()
            s = sx.just() | sx.then(_noop)
            for _ in range(k):
                sx.spawn(s, tok)

    return timeit_trio(spawn, n, batch=True)


@row(
    metric="spawn(just() | then(noop)) into counting_scope vs nursery.start_soon, throughput",
    unit="ops/s",
    better="higher",
    target=3.0,
)
def spawn_fresh(b: Bench) -> Pair:
    n = b.n(20_000)
    s, base = _abba(lambda: spawn_fresh_cost(n), lambda: trio_start_soon_cost(n))
    return _per_second(s), _per_second(base)


@row(
    metric="spawn(prebuilt just() | then(noop)) into counting_scope vs nursery.start_soon, "
    "throughput",
    unit="ops/s",
    better="higher",
    target=3.0,
)
def spawn_prebuilt(b: Bench) -> Pair:
    n = b.n(20_000)
    s, base = _abba(lambda: spawn_prebuilt_cost(n), lambda: trio_start_soon_cost(n))
    return _per_second(s), _per_second(base)


# --------------------------------------------------------------------------- start_soon


def scope_start_soon_cost(n: int) -> float:
    async def spawn(k: int) -> None:
        async with sx.counting_scope() as scope:
            for _ in range(k):
                scope.start_soon(_anoop)

    return timeit_trio(spawn, n, batch=True)


@row(
    metric="scope.start_soon(async_noop) vs nursery.start_soon, throughput",
    unit="ops/s",
    better="higher",
    target=0.8,
)
def start_soon(b: Bench) -> Pair:
    n = b.n(20_000)
    s, base = _abba(lambda: scope_start_soon_cost(n), lambda: trio_start_soon_cost(n))
    return _per_second(s), _per_second(base)


# --------------------------------------------------------------------------- open and close


async def _empty_scope() -> None:
    async with sx.counting_scope():
        pass


async def _empty_nursery() -> None:
    async with trio.open_nursery():
        pass


@row(
    metric="empty `async with counting_scope()` vs empty `async with open_nursery()`",
    unit="us/op",
    better="lower",
    target=2.0,
)
def open_close(b: Bench) -> Pair:
    n = b.n(20_000)
    return _abba(lambda: timeit_trio(_empty_scope, n), lambda: timeit_trio(_empty_nursery, n))


def _nested(opener: Callable[[], Any], depth: int) -> Callable[[], Any]:
    async def nest() -> None:
        async def level(d: int) -> None:
            if d:
                async with opener() as s:
                    s.start_soon(_anoop)
                    await level(d - 1)

        await level(depth)

    return nest


@row(
    metric="10 nested scopes, each with one start_soon child, vs nested nurseries, per level",
    unit="us/op",
    better="lower",
    target=2.0,
)
def nested(b: Bench) -> Pair:
    n = b.n(2_000)
    s, base = _abba(
        lambda: timeit_trio(_nested(sx.counting_scope, 10), n),
        lambda: timeit_trio(_nested(trio.open_nursery, 10), n),
    )
    return (None if s is None else s / 10), (None if base is None else base / 10)


# --------------------------------------------------------------------------- spawn_future


def spawn_future_await_cost(n: int) -> float:
    """``scope.spawn_future(sx.just(1))`` for ``n`` futures, then ``await`` each one."""

    async def spawn(k: int) -> None:
        async with sx.counting_scope() as scope:
            s = sx.just(1)
            futs = [scope.spawn_future(s) for _ in range(k)]
            for f in futs:
                await f

    return timeit_trio(spawn, n, batch=True)


@row(
    metric="spawn_future + await result vs anyio start_soon + await TaskHandle, throughput",
    unit="ops/s",
    better="higher",
    target=2.0,
)
def spawn_future_await(b: Bench) -> Pair:
    n = b.n(20_000)
    s, base = _abba(
        lambda: spawn_future_await_cost(n), lambda: anyio_start_soon_and_wait_handle_cost(n)
    )
    return _per_second(s), _per_second(base)


# --------------------------------------------------------------------------- request_stop


def scope_request_stop_cost(k: int) -> float:
    """``request_stop()`` on a counting_scope hosting ``k`` tasks in ``trio.sleep_forever``:
    seconds per task from the request until the ``async with`` block has exited."""

    async def main() -> float:
        t0 = 0.0
        async with sx.counting_scope() as scope:
            for _ in range(k):
                scope.start_soon(trio.sleep_forever)
            await trio.testing.wait_all_tasks_blocked()
            gc.collect()
            t0 = time.perf_counter()
            scope.request_stop()
        return (time.perf_counter() - t0) / k

    return trio.run(main)


@row(
    metric="request_stop() with 5000 hosted sleepers vs cancel_scope.cancel(), per task",
    unit="us/op",
    better="lower",
    target=1.0,
)
def request_stop(b: Bench) -> Pair:
    k = 5000 if not b.quick else 1000
    return _abba(lambda: scope_request_stop_cost(k), lambda: trio_cancel_sleepers_cost(k))


# --------------------------------------------------------------------------- memory


class _UntilStopped(sx.Sender[None]):
    """A sender that completes (stopped) only when its stop token fires."""

    __slots__ = ()

    def connect(self, rcvr: Any) -> _UntilStoppedOp:
        return _UntilStoppedOp(rcvr)


class _UntilStoppedOp:
    __slots__ = ("_cb", "_rcvr")

    def __init__(self, rcvr: Any) -> None:
        self._rcvr = rcvr
        self._cb: Any = None

    def start(self) -> None:
        self._cb = sx.stop_callback_for(sx.get_stop_token(sx.get_env(self._rcvr)), self._fire)

    def _fire(self) -> None:
        cb, self._cb = self._cb, None
        if cb is not None:
            cb.close()
        self._rcvr.set_stopped()


def pending_spawn_bytes(k: int) -> float:
    """tracemalloc bytes per sender spawned into a counting_scope and pending until stop."""
    scope = sx.counting_scope()
    tok = scope.get_token()
    s = _UntilStopped()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(k):
            sx.spawn(s, tok)
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert scope.count == k
    scope.request_stop()
    sx.sync_wait(scope.join())
    return (after - before) / k


def trio_sleeping_task_bytes(k: int) -> float:
    """tracemalloc bytes per trio task parked in ``trio.sleep_forever`` in a nursery."""

    async def main() -> float:
        async with trio.open_nursery() as nursery:
            gc.collect()
            tracemalloc.start()
            try:
                before = tracemalloc.get_traced_memory()[0]
                for _ in range(k):
                    nursery.start_soon(trio.sleep_forever)
                await trio.testing.wait_all_tasks_blocked()
                after = tracemalloc.get_traced_memory()[0]
            finally:
                tracemalloc.stop()
            nursery.cancel_scope.cancel()
        return (after - before) / k

    return trio.run(main)


@row(
    metric="memory per pending spawned sender vs a sleeping trio task",
    unit="B",
    better="lower",
    target=0.5,
)
def pending_memory(b: Bench) -> Pair:
    k = b.n(20_000)
    return pending_spawn_bytes(k), trio_sleeping_task_bytes(k)


# --------------------------------------------------------------------------- introspection


def operation_tree_cost(k: int) -> float:
    """Seconds per pending operation for one ``sx.operation_tree()`` of a scope with ``k``
    pending spawned senders (the snapshot walks the heap once; docs/debugging.md)."""
    scope = sx.counting_scope(name="bench")
    tok = scope.get_token()
    s = _UntilStopped()
    for _ in range(k):
        sx.spawn(s, tok)
    try:
        sx.operation_tree()  # warm-up
        t = time.perf_counter()
        tree = sx.operation_tree()
        dt = time.perf_counter() - t
        assert sum(len(x.operations) for x in tree if x.name == "bench") == k
    finally:
        scope.request_stop()
        sx.sync_wait(scope.join())
    return dt / k


@row(
    metric="sx.operation_tree() of a scope with 1,000 pending spawned senders, per operation "
    "(debugging only, not on any hot path)",
    unit="us/op",
    better="lower",
)
def operation_tree(b: Bench) -> Pair:
    return operation_tree_cost(b.n(1_000)), None
