"""Benchmark registry, timers and reusable baselines.

A benchmark *row* is a function decorated with :func:`row`. It measures one metric for
structexec and for a baseline **in the same run** and returns the pair
``(structexec, baseline)``; either side may be ``None`` (a baseline-only sanity row, or a
structexec-only row with an absolute limit). Values are raw SI numbers: **seconds per
operation** for time metrics, **operations per second** for throughput metrics. The harness
converts seconds to the row's display unit (``"us/op"``, ``"ms/op"``, ...).

The harness calls each row ``reps`` times (5, or 3 with ``--quick``) and reports the median of
each side separately. The ratio is always ``structexec / baseline``:

- ``better="lower"`` (time, cost): ``ok`` when ``ratio <= target``;
- ``better="higher"`` (throughput): ``ok`` when ``ratio >= target``.

``reps`` (optional) overrides the number of repetitions for one row: a row that repeats its
own measurements (the scaling rows of ``bench_scaling.py``, which run up to N = 1e5) sets 1.

``limit`` is an optional absolute bound, in the display unit, on the structexec value (or on
the baseline value when the row has no structexec side); for ``better="lower"`` the value must
be ``<= limit``, for ``"higher"`` ``>= limit``. A row with neither ``target`` nor ``limit``
is informational (``ok`` shows ``-``).

A row function takes no argument or one :class:`Bench` argument; use ``b.n(10_000)`` to get an
iteration count that ``--quick`` scales down::

    from _harness import Bench, row, timeit_trio, trio_checkpoint_cost

    @row(metric="await just() vs trio checkpoint", unit="us/op", better="lower", target=3.0)
    def await_just(b: Bench) -> tuple[float, float]:
        import structexec as sx

        async def op() -> None:
            await sx.just()

        n = b.n(20_000)
        return timeit_trio(op, n), trio_checkpoint_cost(n)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import importlib.metadata
import inspect
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import trio
import trio.testing

__all__ = [
    "REGISTRY",
    "Bench",
    "Pair",
    "Row",
    "anyio_start_soon_and_wait_handle_cost",
    "anyio_start_soon_cost",
    "anyio_version",
    "asyncio_taskgroup_cost",
    "median",
    "row",
    "threadpool_submit_result_cost",
    "timeit_asyncio",
    "timeit_sync",
    "timeit_trio",
    "trio_cancel_sleepers_cost",
    "trio_checkpoint_cost",
    "trio_start_cost",
    "trio_start_soon_cost",
    "trio_to_thread_cost",
]

Better = Literal["lower", "higher"]
Pair = tuple[float | None, float | None]

# --------------------------------------------------------------------------- registry


@dataclass
class Bench:
    """What a row function gets: the run's settings."""

    quick: bool = False
    #: --quick divides iteration counts by this factor (see :meth:`n`).
    quick_factor: int = 10

    def n(self, full: int, minimum: int = 1) -> int:
        """An iteration count: ``full`` normally, ``full // quick_factor`` with ``--quick``."""
        return max(minimum, full // self.quick_factor if self.quick else full)


@dataclass
class Row:
    """One registered benchmark row."""

    metric: str
    unit: str
    better: Better
    target: float | None
    limit: float | None
    fn: Callable[..., Pair]
    module: str
    note: str = ""
    #: Repetitions for this row, overriding the run's ``--reps`` (a row that repeats its
    #: measurements itself, e.g. a scaling row that runs up to N = 1e5, sets 1).
    reps: int | None = None
    #: Filled by the runner.
    samples: list[Pair] = field(default_factory=list)

    @property
    def scale(self) -> float:
        """Factor from the raw SI value to the display unit."""
        return _unit_scale(self.unit)

    def target_text(self) -> str:
        parts = []
        op = "<=" if self.better == "lower" else ">="
        if self.target is not None:
            parts.append(f"{op}{self.target:g}x")
        if self.limit is not None:
            parts.append(f"{op}{self.limit:g} {self.unit}")
        return " & ".join(parts) if parts else "-"

    def call(self, bench: Bench) -> Pair:
        params = inspect.signature(self.fn).parameters
        result: object = self.fn(bench) if params else self.fn()
        if not (isinstance(result, tuple) and len(result) == 2):
            raise TypeError(
                f"row {self.metric!r} must return (structexec, baseline), got {result!r}"
            )
        sx, base = result
        return (None if sx is None else float(sx), None if base is None else float(base))


REGISTRY: list[Row] = []

_SCALES = {"s": 1.0, "ms": 1e3, "us": 1e6, "µs": 1e6, "ns": 1e9}


def _unit_scale(unit: str) -> float:
    head = unit.split("/", 1)[0].strip()
    return _SCALES.get(head, 1.0)


def row(
    *,
    metric: str,
    unit: str = "us/op",
    better: Better = "lower",
    target: float | None = None,
    limit: float | None = None,
    note: str = "",
    reps: int | None = None,
) -> Callable[[Callable[..., Pair]], Callable[..., Pair]]:
    """Register a benchmark row (see the module docstring for the semantics)."""
    if better not in ("lower", "higher"):
        raise ValueError(f"better must be 'lower' or 'higher', not {better!r}")

    def deco(fn: Callable[..., Pair]) -> Callable[..., Pair]:
        REGISTRY.append(
            Row(
                metric=metric,
                unit=unit,
                better=better,
                target=target,
                limit=limit,
                fn=fn,
                module=fn.__module__,
                note=note,
                reps=reps,
            )
        )
        return fn

    return deco


def median(xs: list[float]) -> float:
    return statistics.median(xs)


# --------------------------------------------------------------------------- timers


def _prepare() -> None:
    gc.collect()


def timeit_sync(fn: Callable[..., object], n: int, *, batch: bool = False) -> float:
    """Seconds per operation of a synchronous callable.

    ``batch=False``: calls ``fn()`` ``n`` times. ``batch=True``: calls ``fn(n)`` once (it does
    ``n`` operations itself). A short warm-up run precedes the measurement.
    """
    warm = max(1, min(n // 10, 100))
    if batch:
        fn(warm)
    else:
        for _ in range(warm):
            fn()
    _prepare()
    t0 = time.perf_counter()
    if batch:
        fn(n)
    else:
        for _ in range(n):
            fn()
    return (time.perf_counter() - t0) / n


def timeit_trio(
    async_fn: Callable[..., Awaitable[object]], n: int, *, batch: bool = False
) -> float:
    """Seconds per operation of an async function, measured inside one ``trio.run``.

    ``batch=False``: awaits ``async_fn()`` ``n`` times. ``batch=True``: awaits
    ``async_fn(n)`` once. Start-up of the trio run is not measured; a warm-up run is done in
    the same ``trio.run`` first.
    """

    async def main() -> float:
        warm = max(1, min(n // 10, 100))
        if batch:
            await async_fn(warm)
        else:
            for _ in range(warm):
                await async_fn()
        _prepare()
        t0 = time.perf_counter()
        if batch:
            await async_fn(n)
        else:
            for _ in range(n):
                await async_fn()
        return (time.perf_counter() - t0) / n

    return trio.run(main)


def timeit_asyncio(
    async_fn: Callable[..., Awaitable[object]], n: int, *, batch: bool = False
) -> float:
    """Like :func:`timeit_trio`, inside one ``asyncio.run``."""

    async def main() -> float:
        warm = max(1, min(n // 10, 100))
        if batch:
            await async_fn(warm)
        else:
            for _ in range(warm):
                await async_fn()
        _prepare()
        t0 = time.perf_counter()
        if batch:
            await async_fn(n)
        else:
            for _ in range(n):
                await async_fn()
        return (time.perf_counter() - t0) / n

    return asyncio.run(main())


# --------------------------------------------------------------------------- baselines
# Each returns seconds per operation (None when the baseline is not available here).


async def _noop() -> None:
    pass


def trio_checkpoint_cost(n: int) -> float:
    """``await trio.lowlevel.checkpoint()``: one trip through the trio scheduler."""
    return timeit_trio(trio.lowlevel.checkpoint, n)


def trio_start_soon_cost(n: int) -> float:
    """``nursery.start_soon(noop)`` per spawn, including running the tasks to completion
    (the nursery exit)."""

    async def spawn(k: int) -> None:
        async with trio.open_nursery() as nursery:
            for _ in range(k):
                nursery.start_soon(_noop)

    return timeit_trio(spawn, n, batch=True)


def trio_start_cost(n: int) -> float:
    """``await nursery.start(fn)`` per spawn: the ``task_status`` handshake, sequentially."""

    async def started(*, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()

    async def spawn(k: int) -> None:
        async with trio.open_nursery() as nursery:
            for _ in range(k):
                await nursery.start(started)

    return timeit_trio(spawn, n, batch=True)


def anyio_version() -> str | None:
    """The installed anyio version, or None (anyio has no ``__version__``)."""
    try:
        return importlib.metadata.version("anyio")
    except importlib.metadata.PackageNotFoundError:
        return None


def _anyio_run_trio(async_fn: Callable[..., Awaitable[float]], *args: object) -> float:
    import anyio

    result: float = anyio.run(async_fn, *args, backend="trio")
    return result


def anyio_start_soon_cost(n: int) -> float | None:
    """anyio ``TaskGroup.start_soon(noop)`` per spawn on the trio backend, including the tasks
    running to completion. None without anyio."""
    if anyio_version() is None:
        return None
    import anyio

    async def main() -> float:
        async def spawn(k: int) -> None:
            async with anyio.create_task_group() as tg:
                for _ in range(k):
                    tg.start_soon(_noop)

        await spawn(max(1, min(n // 10, 100)))
        _prepare()
        t0 = time.perf_counter()
        await spawn(n)
        return (time.perf_counter() - t0) / n

    return _anyio_run_trio(main)


def anyio_start_soon_and_wait_handle_cost(n: int) -> float | None:
    """anyio >= 4.14: ``handle = tg.start_soon(noop)`` then ``await handle`` per spawn (spawn and
    get the result back, the closest anyio analogue of ``spawn_future``), on the trio backend.
    All ``n`` are spawned first, then awaited. None without anyio >= 4.14 (no TaskHandle)."""
    if anyio_version() is None:
        return None
    import anyio

    if not hasattr(anyio, "TaskHandle"):
        return None

    async def main() -> float:
        async def spawn(k: int) -> None:
            async with anyio.create_task_group() as tg:
                handles = [tg.start_soon(_noop) for _ in range(k)]
                for h in handles:
                    await h

        await spawn(max(1, min(n // 10, 100)))
        _prepare()
        t0 = time.perf_counter()
        await spawn(n)
        return (time.perf_counter() - t0) / n

    return _anyio_run_trio(main)


def asyncio_taskgroup_cost(n: int) -> float | None:
    """``asyncio.TaskGroup.create_task(noop())`` per spawn, including completion. None before
    Python 3.11 (no TaskGroup)."""
    task_group: Any = getattr(asyncio, "TaskGroup", None)
    if task_group is None:
        return None

    async def spawn(k: int) -> None:
        async with task_group() as tg:
            for _ in range(k):
                tg.create_task(_noop())

    return timeit_asyncio(spawn, n, batch=True)


def trio_cancel_sleepers_cost(k: int) -> float:
    """Cancelling ``k`` tasks blocked in ``trio.sleep_forever`` in one nursery: seconds **per
    sleeper** from ``nursery.cancel_scope.cancel()`` until the nursery has exited (all tasks
    unwound). Spawning the sleepers is not measured."""

    async def main() -> float:
        t0 = 0.0
        async with trio.open_nursery() as nursery:
            for _ in range(k):
                nursery.start_soon(trio.sleep_forever)
            await trio.testing.wait_all_tasks_blocked()
            _prepare()
            t0 = time.perf_counter()
            nursery.cancel_scope.cancel()
        return (time.perf_counter() - t0) / k

    return trio.run(main)


def threadpool_submit_result_cost(
    n: int, *, max_workers: int | None = None, sequential: bool = False
) -> float:
    """``concurrent.futures.ThreadPoolExecutor``: submit a no-op and get its result, per op.

    ``sequential=False`` (throughput): submit all ``n``, then wait for all results.
    ``sequential=True`` (latency): submit one, wait for its result, repeat.
    The pool is created (and warmed up) outside the measurement.
    """

    def noop() -> None:
        pass

    with concurrent.futures.ThreadPoolExecutor(max_workers=max_workers) as pool:
        for f in [pool.submit(noop) for _ in range(64)]:
            f.result()
        _prepare()
        t0 = time.perf_counter()
        if sequential:
            for _ in range(n):
                pool.submit(noop).result()
        else:
            futures = [pool.submit(noop) for _ in range(n)]
            for f in futures:
                f.result()
        return (time.perf_counter() - t0) / n


def trio_to_thread_cost(n: int) -> float:
    """``await trio.to_thread.run_sync(noop)`` per call, sequentially, from a trio task: the
    round trip trio -> worker thread -> trio."""

    def noop() -> None:
        pass

    async def op() -> None:
        await trio.to_thread.run_sync(noop)

    return timeit_trio(op, n)
