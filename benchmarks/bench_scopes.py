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
  task (tracemalloc);
* ``scope.spawn(coro)`` and ``scope.spawn_future(coro)`` + ``await`` vs ``scope.start_soon``
  (target: within 1.3x), and ``spawn_future(coro)`` + ``await`` vs aioresult's
  ``ResultCapture.start_soon`` + ``wait_done()`` + ``result()``;
* ``scope.spawn(just() | then(f))`` vs a minimal pure-Python model of the same protocol steps
  (:class:`FloorScope`: a plain class per protocol role, no checks), in the same run;
* the trio floors of the scope rows (informational): the trio objects an empty block,
  ``scope.start_soon`` and ``scope.spawn(coro)`` need, without structexec, beside the real
  thing and beside the nursery baseline.
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
    timeit_sync,
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


# --------------------------------------------------------------------------- coroutines


async def _aone() -> int:
    return 1


def scope_spawn_coro_cost(n: int) -> float:
    """``scope.spawn(async_noop())`` inside ``async with counting_scope()`` (exit included)."""

    async def spawn(k: int) -> None:
        async with sx.counting_scope() as scope:
            for _ in range(k):
                scope.spawn(_anoop())

    return timeit_trio(spawn, n, batch=True)


def scope_spawn_future_coro_cost(n: int) -> float:
    """``scope.spawn_future(coro())`` for ``n`` coroutines returning 1, then ``await`` each."""

    async def spawn(k: int) -> None:
        async with sx.counting_scope() as scope:
            futs = [scope.spawn_future(_aone()) for _ in range(k)]
            for f in futs:
                await f

    return timeit_trio(spawn, n, batch=True)


def aioresult_cost(n: int) -> float | None:
    """aioresult: ``ResultCapture.start_soon(nursery, coro_fn)`` for ``n`` tasks returning 1,
    then ``await rc.wait_done()`` and ``rc.result()`` for each (None without aioresult)."""
    try:
        from aioresult import ResultCapture
    except ImportError:
        return None

    async def spawn(k: int) -> None:
        async with trio.open_nursery() as nursery:
            rcs = [ResultCapture.start_soon(nursery, _aone) for _ in range(k)]
            for rc in rcs:
                await rc.wait_done()
                rc.result()

    return timeit_trio(spawn, n, batch=True)


@row(
    metric="scope.spawn(async_noop()) vs scope.start_soon(async_noop), throughput",
    unit="ops/s",
    better="higher",
    target=0.77,  # time within 1.3x
)
def spawn_coro(b: Bench) -> Pair:
    n = b.n(20_000)
    s, base = _abba(lambda: scope_spawn_coro_cost(n), lambda: scope_start_soon_cost(n))
    return _per_second(s), _per_second(base)


@row(
    metric="scope.spawn_future(coro()) + await vs scope.start_soon(async_noop), throughput",
    unit="ops/s",
    better="higher",
    target=0.77,  # time within 1.3x
)
def spawn_future_coro(b: Bench) -> Pair:
    n = b.n(20_000)
    s, base = _abba(lambda: scope_spawn_future_coro_cost(n), lambda: scope_start_soon_cost(n))
    return _per_second(s), _per_second(base)


@row(
    metric="scope.spawn_future(coro()) + await vs aioresult start_soon + wait_done, throughput",
    unit="ops/s",
    better="higher",
    target=1.0,
)
def spawn_future_aioresult(b: Bench) -> Pair:
    n = b.n(20_000)
    s, base = _abba(lambda: scope_spawn_future_coro_cost(n), lambda: aioresult_cost(n))
    return _per_second(s), _per_second(base)


# --------------------------------------------------------------------------- floor model
#
# The minimal pure-Python model of ``scope.spawn(just() | then(f))``: a plain class per
# protocol role (sender, operation, receiver, scope), the same steps in the same order
# (build the sender, connect the spawn receiver, try-associate under the scope's lock, start,
# run f, complete, disassociate under the lock), and no checks, environments or trampolines.
# Self-contained, so bench_floor.py can import it: ``from bench_scopes import FloorScope``.


class _FloorJust:
    __slots__ = ("vals",)

    def __init__(self, *vals: Any) -> None:
        self.vals = vals

    def __or__(self, adaptor: Any) -> Any:
        return adaptor(self)

    def connect(self, rcvr: Any) -> _FloorJustOp:
        return _FloorJustOp(self.vals, rcvr)


class _FloorJustOp:
    __slots__ = ("rcvr", "vals")

    def __init__(self, vals: tuple[Any, ...], rcvr: Any) -> None:
        self.vals = vals
        self.rcvr = rcvr

    def start(self) -> None:
        self.rcvr.set_value(*self.vals)


class _FloorThen:
    __slots__ = ("child", "f")

    def __init__(self, child: Any, f: Callable[..., Any]) -> None:
        self.child = child
        self.f = f

    def connect(self, rcvr: Any) -> Any:
        return self.child.connect(_FloorThenRcvr(self.f, rcvr))


class _FloorThenRcvr:
    __slots__ = ("f", "rcvr")

    def __init__(self, f: Callable[..., Any], rcvr: Any) -> None:
        self.f = f
        self.rcvr = rcvr

    def set_value(self, *vals: Any) -> None:
        self.rcvr.set_value(self.f(*vals))


def floor_then(f: Callable[..., Any]) -> Callable[[Any], _FloorThen]:
    return lambda child: _FloorThen(child, f)


class _FloorSpawnRcvr:
    __slots__ = ("scope",)

    def __init__(self, scope: FloorScope) -> None:
        self.scope = scope

    def set_value(self, *vals: Any) -> None:
        self.scope.disassociate()


class FloorScope:
    """The model scope: a count under a lock; ``spawn`` connects, associates and starts."""

    __slots__ = ("count", "lock")

    def __init__(self) -> None:
        import threading

        self.lock = threading.Lock()
        self.count = 0

    def try_associate(self) -> bool:
        with self.lock:
            self.count += 1
        return True

    def disassociate(self) -> None:
        with self.lock:
            self.count -= 1

    def spawn(self, sndr: Any) -> None:
        op = sndr.connect(_FloorSpawnRcvr(self))
        if self.try_associate():
            op.start()


def floor_spawn_cost(n: int) -> float:
    """The model: ``scope.spawn(just() | then(noop))`` building the sender each time."""

    def spawn(k: int) -> None:
        scope = FloorScope()
        for _ in range(k):
            scope.spawn(_FloorJust() | floor_then(_noop))
        assert scope.count == 0

    return timeit_sync(spawn, n, batch=True)


def scope_spawn_then_cost(n: int) -> float:
    """``scope.spawn(sx.just() | sx.then(noop))`` building the sender each time, without
    ``async with`` (the floor model has no nursery either); the join included."""

    def spawn(k: int) -> None:
        scope = sx.counting_scope()
        for _ in range(k):
            scope.spawn(sx.just() | sx.then(_noop))
        sx.sync_wait(scope.join())

    return timeit_sync(spawn, n, batch=True)


@row(
    metric="scope.spawn(just() | then(noop)) vs floor model of the same protocol steps, per spawn",
    unit="us/op",
    better="lower",
    target=2.0,
)
def spawn_floor(b: Bench) -> Pair:
    n = b.n(50_000)
    return _abba(lambda: scope_spawn_then_cost(n), lambda: floor_spawn_cost(n))


# --------------------------------------------------------------------------- trio floors
#
# What the scope rows cannot go below with trio's public API (benchmarks/README.md
# "session 6, scope rows"): the trio objects each path needs, with no structexec code.
#
# * ``counting_scope`` as a nursery needs two nurseries (the watcher's, whose cancel scope is
#   ``scope.cancel_scope``, and the hosted tasks') and the body's cancel scope
#   (docs/internals.md §5): :func:`_floor_block`.
# * ``scope.start_soon`` needs a wrapper coroutine around the user's (the association is
#   released and errors recorded when the task ends) and a locked count: :func:`_floor_start_soon`.
# * ``scope.spawn(coro)`` needs that plus a shielded cancel scope per task (spawned work sees
#   its stop token, not an enclosing cancellation; a future's abandon cancels its one task):
#   :func:`_floor_spawn_coro`.


async def _floor_block() -> None:
    async with trio.open_nursery(), trio.open_nursery():
        with trio.CancelScope():  # noqa: ASYNC100 - the body's cancel scope, empty here
            pass


class _FloorCount:
    __slots__ = ("count", "lock")

    def __init__(self) -> None:
        import threading

        self.lock = threading.Lock()
        self.count = 0


def _floor_task(c: _FloorCount, fn: Callable[[], Any]) -> Any:
    return _floor_wrapper(c, fn())


async def _floor_wrapper(c: _FloorCount, coro: Any) -> None:
    try:
        await coro
    finally:
        with c.lock:
            c.count -= 1


async def _floor_cs_wrapper(c: _FloorCount, coro: Any, cs: trio.CancelScope) -> None:
    try:
        with cs:
            await coro
    finally:
        with c.lock:
            c.count -= 1


def floor_start_soon_cost(n: int) -> float:
    async def spawn(k: int) -> None:
        c = _FloorCount()
        async with trio.open_nursery() as nursery:
            for _ in range(k):
                with c.lock:
                    c.count += 1
                nursery.start_soon(_floor_task, c, _anoop)

    return timeit_trio(spawn, n, batch=True)


def floor_spawn_coro_cost(n: int) -> float:
    async def spawn(k: int) -> None:
        c = _FloorCount()
        async with trio.open_nursery() as nursery:
            for _ in range(k):
                with c.lock:
                    c.count += 1
                nursery.start_soon(_floor_cs_wrapper, c, _anoop(), trio.CancelScope(shield=True))

    return timeit_trio(spawn, n, batch=True)


@row(
    metric="empty `async with counting_scope()` vs its trio floor (two nurseries and a "
    "cancel scope, empty)",
    unit="us/op",
    better="lower",
)
def open_close_floor(b: Bench) -> Pair:
    n = b.n(20_000)
    return _abba(lambda: timeit_trio(_empty_scope, n), lambda: timeit_trio(_floor_block, n))


@row(
    metric="trio floor of a counting_scope block (two nurseries and a cancel scope) vs an "
    "empty nursery",
    unit="us/op",
    better="lower",
)
def floor_block_vs_nursery(b: Bench) -> Pair:
    n = b.n(20_000)
    return _abba(lambda: timeit_trio(_floor_block, n), lambda: timeit_trio(_empty_nursery, n))


@row(
    metric="scope.start_soon(async_noop) vs its floor (nursery.start_soon of a wrapper "
    "coroutine with a locked count), per task",
    unit="us/op",
    better="lower",
)
def start_soon_floor(b: Bench) -> Pair:
    n = b.n(20_000)
    return _abba(lambda: scope_start_soon_cost(n), lambda: floor_start_soon_cost(n))


@row(
    metric="scope.spawn(async_noop()) vs its floor (the start_soon floor plus a shielded "
    "cancel scope per task), per task",
    unit="us/op",
    better="lower",
)
def spawn_coro_floor(b: Bench) -> Pair:
    n = b.n(20_000)
    return _abba(lambda: scope_spawn_coro_cost(n), lambda: floor_spawn_coro_cost(n))


@row(
    metric="the floor of scope.spawn(coro) vs the floor of scope.start_soon (the cost of "
    "the per-task cancel scope), per task",
    unit="us/op",
    better="lower",
)
def cancel_scope_floor(b: Bench) -> Pair:
    n = b.n(20_000)
    return _abba(lambda: floor_spawn_coro_cost(n), lambda: floor_start_soon_cost(n))
