"""Scaling: per-operation time and memory as the number of operations N grows.

For each operation, the structexec path and its trio / asyncio baseline are run at
N = 1e3, 1e4, 1e5 (and 1e6 where that is cheap), in the same process:

* spawn: ``sx.spawn(just() | then(noop), tok)`` into a ``counting_scope`` vs
  ``nursery.start_soon(noop)``;
* start_soon: ``scope.start_soon(noop)`` vs ``nursery.start_soon(noop)``;
* spawn_future: ``scope.spawn_future(just(1))``, then await each, vs asyncio
  ``ensure_future(noop())``, then await each;
* request_stop: ``scope.request_stop()`` with N hosted sleepers vs ``cancel_scope.cancel()``
  with N sleepers (per task);
* when_all with values: ``await sx.when_all(*N coroutines returning i)`` vs a trio nursery
  gathering N results; without values: coroutines returning ``None`` vs a nursery running them;
* ``sync_wait(when_all(*N x just(i)))`` vs ``asyncio.gather`` of N coroutines;
* nested scopes: N levels of nested ``counting_scope`` (N = 10, 100, 300: the depth is bounded
  by the recursion limit) vs nested nurseries, per level;
* let_value loop: ``sync_wait`` of an N-iteration ``let_value`` loop vs an N-iteration trio
  loop awaiting a coroutine;
* await in a task: an ``@sx.task`` awaiting ``sx.just(i)`` N times vs N
  ``trio.lowlevel.checkpoint()``.

**Growth** is the per-op time at the largest N over the per-op time at the smallest N;
above 1.5x the case is flagged super-linear. The small-N time is the median of several
runs (up to 5), the large-N time the median of 3 runs up to N = 1e4, one run above (a run
of 1e5 operations averages the noise itself); run.py runs these rows once (``reps=1``).

Two ways to run it:

* ``benchmarks/run.py --only bench_scaling``: one row per case, ``structexec`` and
  ``baseline`` columns holding the *growth* of each side (unit ``x``), and their ratio with
  the target 1.5: structexec's per-op cost may grow at most 1.5x as fast as its baseline's
  (``--check`` fails otherwise). The baselines grow too (a trio task costs more per task
  with 1e5 of them alive: allocation and the cyclic garbage collector), so an absolute bound
  would flag trio's own growth on a loaded machine; a structexec path that turned quadratic
  (``when_all`` collecting values by tuple concatenation grew 49x from 1e3 to 1e5) fails
  either way. Plus memory rows for the cases whose memory must stay O(1) or linear. N goes
  to 1e5 (1e4 with ``--quick``).
* ``python benchmarks/bench_scaling.py [--quick] [--max N]``: the full table, time and
  memory (tracemalloc peak per op, a separate run) for every N, with a ``super-linear``
  column.
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio
import trio.testing

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # run as a script
    sys.path.insert(0, str(HERE))

import structexec as sx  # noqa: E402
from _harness import Bench, Pair, row  # noqa: E402

GROWTH_LIMIT = 1.5

# --------------------------------------------------------------------------- helpers


async def _anoop() -> None:
    pass


def _noop() -> None:
    pass


def _clock_trio(body: Callable[[int], Any], n: int) -> float:
    """Seconds per op of ``await body(n)`` inside a fresh ``trio.run`` (after a small warm-up
    in the same run)."""

    async def main() -> float:
        await body(min(n, 100))
        gc.collect()
        t0 = time.perf_counter()
        await body(n)
        return (time.perf_counter() - t0) / n

    return trio.run(main)


def _clock_sync(body: Callable[[int], Any], n: int) -> float:
    body(min(n, 100))
    gc.collect()
    t0 = time.perf_counter()
    body(n)
    return (time.perf_counter() - t0) / n


# --------------------------------------------------------------------------- cases
# Each side is a function n -> seconds per op. Memory is measured by running the same
# function under tracemalloc (peak bytes during the run, per op).


def sx_spawn(n: int) -> float:
    async def body(k: int) -> None:
        async with sx.counting_scope() as scope:
            tok = scope.get_token()
            spawn, just, then = sx.spawn, sx.just, sx.then
            for _ in range(k):
                spawn(just() | then(_noop), tok)

    return _clock_trio(body, n)


def trio_start_soon(n: int) -> float:
    async def body(k: int) -> None:
        async with trio.open_nursery() as nursery:
            for _ in range(k):
                nursery.start_soon(_anoop)

    return _clock_trio(body, n)


def sx_start_soon(n: int) -> float:
    async def body(k: int) -> None:
        async with sx.counting_scope() as scope:
            for _ in range(k):
                scope.start_soon(_anoop)

    return _clock_trio(body, n)


def sx_spawn_future(n: int) -> float:
    async def body(k: int) -> None:
        async with sx.counting_scope() as scope:
            s = sx.just(1)
            futs = [scope.spawn_future(s) for _ in range(k)]
            for f in futs:
                await f

    return _clock_trio(body, n)


def asyncio_task_await(n: int) -> float:
    async def body(k: int) -> None:
        tasks = [asyncio.ensure_future(_anoop()) for _ in range(k)]
        for t in tasks:
            await t

    async def main() -> float:
        await body(min(n, 100))
        gc.collect()
        t0 = time.perf_counter()
        await body(n)
        return (time.perf_counter() - t0) / n

    return asyncio.run(main())


def sx_request_stop(n: int) -> float:
    async def main() -> float:
        t0 = 0.0
        async with sx.counting_scope() as scope:
            for _ in range(n):
                scope.start_soon(trio.sleep_forever)
            await trio.testing.wait_all_tasks_blocked()
            gc.collect()
            t0 = time.perf_counter()
            scope.request_stop()
        return (time.perf_counter() - t0) / n

    return trio.run(main)


def trio_cancel(n: int) -> float:
    async def main() -> float:
        t0 = 0.0
        async with trio.open_nursery() as nursery:
            for _ in range(n):
                nursery.start_soon(trio.sleep_forever)
            await trio.testing.wait_all_tasks_blocked()
            gc.collect()
            t0 = time.perf_counter()
            nursery.cancel_scope.cancel()
        return (time.perf_counter() - t0) / n

    return trio.run(main)


async def _ret(i: int) -> int:
    return i


def _when_all_coros(values: bool) -> Callable[[int], float]:
    fn: Any = _ret if values else (lambda i: _anoop())

    def cost(n: int) -> float:
        async def body(k: int) -> None:
            await sx.when_all(*[fn(i) for i in range(k)])

        return _clock_trio(body, n)

    return cost


def _nursery_gather(values: bool) -> Callable[[int], float]:
    def cost(n: int) -> float:
        async def body(k: int) -> None:
            results: list[Any] = [None] * k

            async def run(i: int) -> None:
                results[i] = await _ret(i) if values else await _anoop()

            async with trio.open_nursery() as nursery:
                for i in range(k):
                    nursery.start_soon(run, i)

        return _clock_trio(body, n)

    return cost


def sx_sync_wait_when_all(n: int) -> float:
    def body(k: int) -> None:
        sx.sync_wait(sx.when_all(*[sx.just(i) for i in range(k)]))

    return _clock_sync(body, n)


def asyncio_gather(n: int) -> float:
    def body(k: int) -> None:
        async def main() -> None:
            await asyncio.gather(*[_ret(i) for i in range(k)])

        asyncio.run(main())

    return _clock_sync(body, n)


def _nested(opener: Callable[[], Any]) -> Callable[[int], float]:
    def cost(depth: int) -> float:
        async def body(k: int) -> None:
            async def level(d: int) -> None:
                async with opener() as s:
                    s.start_soon(_anoop)
                    if d > 1:
                        await level(d - 1)

            # Per level: run the k-deep nest once (k levels).
            await level(k)

        return _clock_trio(body, depth)

    return cost


def sx_let_loop(n: int) -> float:
    def body(k: int) -> None:
        def step(i: int) -> Any:
            if i >= k:
                return sx.just(i)
            return sx.just(i + 1) | sx.let_value(step)

        sx.sync_wait(sx.just(0) | sx.let_value(step))

    return _clock_sync(body, n)


def trio_await_loop(n: int) -> float:
    async def body(k: int) -> None:
        i = 0
        while i < k:
            i = await _ret(i + 1)

    return _clock_trio(body, n)


@sx.task
async def _task_await_just(k: int) -> None:
    for i in range(k):
        await sx.just(i)


def sx_task_await(n: int) -> float:
    async def body(k: int) -> None:
        await _task_await_just(k)

    return _clock_trio(body, n)


def trio_checkpoints(n: int) -> float:
    async def body(k: int) -> None:
        for _ in range(k):
            await trio.lowlevel.checkpoint()

    return _clock_trio(body, n)


@dataclass
class Case:
    name: str
    sx: Callable[[int], float]
    base: Callable[[int], float]
    base_name: str
    #: the sizes this case runs at, smallest first (the full table; run.py rows use the
    #: smallest and the largest <= its cap)
    sizes: tuple[int, ...] = (1_000, 10_000, 100_000)


_ALL = (1_000, 10_000, 100_000, 1_000_000)
CASES = [
    Case("spawn(just|then)", sx_spawn, trio_start_soon, "nursery.start_soon", _ALL),
    Case("scope.start_soon", sx_start_soon, trio_start_soon, "nursery.start_soon"),
    Case("spawn_future + await", sx_spawn_future, asyncio_task_await, "asyncio task + await"),
    Case("request_stop, per task", sx_request_stop, trio_cancel, "cancel_scope.cancel()"),
    Case(
        "await when_all(coros), values",
        _when_all_coros(True),
        _nursery_gather(True),
        "nursery gather",
    ),
    Case(
        "await when_all(coros), no values",
        _when_all_coros(False),
        _nursery_gather(False),
        "nursery",
    ),
    Case("sync_wait(when_all(N x just))", sx_sync_wait_when_all, asyncio_gather, "gather", _ALL),
    Case(
        "nested scopes, per level",
        _nested(sx.counting_scope),
        _nested(trio.open_nursery),
        "nested nurseries",
        (10, 100, 300),
    ),
    Case("let_value loop, per iteration", sx_let_loop, trio_await_loop, "trio loop", _ALL),
    Case("task: await sx.just(i)", sx_task_await, trio_checkpoints, "trio checkpoint", _ALL),
]


def per_op(cost: Callable[[int], float], n: int, largest: int) -> float:
    """Per-op seconds at ``n``: the median of ``min(5, largest // n)`` runs, and of at least
    3 up to 1e4 operations (one run of 1e5 operations averages the noise itself)."""
    runs = min(5, max(largest // n, 3 if n <= 10_000 else 1))
    return statistics.median(cost(n) for _ in range(runs))


def growth(cost: Callable[[int], float], small: int, large: int) -> float:
    return per_op(cost, large, large) / per_op(cost, small, large)


def peak_bytes_per_op(cost: Callable[[int], float], n: int) -> float:
    """tracemalloc peak during a run of ``n`` ops, per op (the warm-up is included: it is
    at most 100 ops)."""
    gc.collect()
    tracemalloc.start()
    try:
        cost(n)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return peak / n


# --------------------------------------------------------------------------- run.py rows


def _sizes(case: Case, b: Bench) -> tuple[int, int]:
    cap = 10_000 if b.quick else 100_000
    sizes = [s for s in case.sizes if s <= cap] or [case.sizes[0]]
    if case.sizes[0] < 1_000:  # nested scopes: depth, not count
        sizes = [case.sizes[0], case.sizes[1] if b.quick else case.sizes[-1]]
    return sizes[0], sizes[-1]


def _growth_row(case: Case) -> Callable[[Bench], Pair]:
    def fn(b: Bench) -> Pair:
        small, large = _sizes(case, b)
        return growth(case.sx, small, large), growth(case.base, small, large)

    fn.__name__ = f"growth_{case.name}"
    return fn


for _case in CASES:
    row(
        metric=f"growth of per-op time, {_case.name} vs {_case.base_name}, "
        f"N {_case.sizes[0]:,} -> "
        + ("300 (quick: 100)" if _case.sizes[0] < 1000 else "1e5 (quick: 1e4)"),
        unit="x",
        better="lower",
        target=GROWTH_LIMIT,
        reps=1,
        note="structexec / baseline columns: each side's per-op time at the largest N over "
        "the smallest; the target bounds structexec's growth relative to its baseline's",
    )(_growth_row(_case))


def let_loop_retained_bytes(n: int) -> float:
    """Bytes still held per iteration between 10% and 100% of an n-iteration let_value loop
    under sync_wait (tracemalloc)."""
    marks: dict[int, int] = {}
    lo = n // 10

    def step(i: int) -> Any:
        if i in (lo, n):
            marks[i] = tracemalloc.get_traced_memory()[0]
        if i >= n:
            return sx.just(i)
        return sx.just(i + 1) | sx.let_value(step)

    gc.collect()
    tracemalloc.start()
    try:
        sx.sync_wait(sx.just(0) | sx.let_value(step))
    finally:
        tracemalloc.stop()
    return max(0.0, (marks[n] - marks[lo]) / (n - lo))


def trio_loop_retained_bytes(n: int) -> float:
    """The same for a trio coroutine looping n times over an await."""
    marks: dict[int, int] = {}
    lo = n // 10

    async def main() -> None:
        i = 0
        while i < n:
            if i == lo:
                marks[i] = tracemalloc.get_traced_memory()[0]
            i = await _ret(i + 1)
        marks[n] = tracemalloc.get_traced_memory()[0]

    gc.collect()
    tracemalloc.start()
    try:
        trio.run(main)
    finally:
        tracemalloc.stop()
    return max(0.0, (marks[n] - marks[lo]) / (n - lo))


@row(
    metric="let_value loop under sync_wait: bytes held per finished iteration vs a trio loop",
    unit="B",
    better="lower",
    limit=16.0,
)
def let_loop_memory(b: Bench) -> Pair:
    n = b.n(100_000)
    return let_loop_retained_bytes(n), trio_loop_retained_bytes(n)


@row(
    metric="sync_wait(when_all(N x just)): peak bytes per child, N = 1e5 (1e4 quick) vs 1e3",
    unit="B",
    better="lower",
    target=1.5,
)
def when_all_memory_growth(b: Bench) -> Pair:
    large = 10_000 if b.quick else 100_000
    return peak_bytes_per_op(sx_sync_wait_when_all, large), peak_bytes_per_op(
        sx_sync_wait_when_all, 1_000
    )


# --------------------------------------------------------------------------- full table


def _fmt_t(s: float) -> str:
    return f"{s * 1e6:.2f}"


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="per-op time and memory of each case at each N")
    ap.add_argument("--quick", action="store_true", help="N up to 1e4")
    ap.add_argument("--max", type=int, default=1_000_000, help="largest N (default 1e6)")
    ap.add_argument("--no-memory", action="store_true", help="skip the tracemalloc runs")
    ap.add_argument("--only", help="substring of a case name")
    args = ap.parse_args(argv)
    cap = 10_000 if args.quick else args.max
    print(
        "| case | N | structexec us/op | baseline us/op | ratio | structexec B/op | baseline B/op |"
    )
    print("|---|---|---|---|---|---|---|")
    for case in CASES:
        if args.only and args.only not in case.name:
            continue
        sizes = [s for s in case.sizes if s <= cap] or [case.sizes[0]]
        largest = sizes[-1]
        first: tuple[float, float] | None = None
        last: tuple[float, float] = (0.0, 0.0)
        for n in sizes:
            t_sx = per_op(case.sx, n, largest)
            t_b = per_op(case.base, n, largest)
            if first is None:
                first = (t_sx, t_b)
            last = (t_sx, t_b)
            if args.no_memory:
                m_sx = m_b = "-"
            else:
                m_sx = f"{peak_bytes_per_op(case.sx, n):.0f}"
                m_b = f"{peak_bytes_per_op(case.base, n):.0f}"
            print(
                f"| {case.name} (vs {case.base_name}) | {n:,} | {_fmt_t(t_sx)} | "
                f"{_fmt_t(t_b)} | {t_sx / t_b:.2f}x | {m_sx} | {m_b} |",
                flush=True,
            )
        assert first is not None
        g_sx, g_b = last[0] / first[0], last[1] / first[1]
        flag = "SUPER-LINEAR" if g_sx > GROWTH_LIMIT else "linear"
        print(
            f"| {case.name}: growth {sizes[0]:,} -> {largest:,} | | {g_sx:.2f}x | {g_b:.2f}x "
            f"| {g_sx / g_b:.2f}x | {flag} | |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
