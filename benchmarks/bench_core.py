"""Core rows: sync_wait over a then-pipeline, connect+start of just()."""

from __future__ import annotations

from typing import Any

import structexec as sx
from _harness import Bench, row, timeit_sync


class _NullReceiver:
    __slots__ = ()

    def set_value(self, *vals: Any) -> None:
        pass

    def set_error(self, err: Any) -> None:
        pass

    def set_stopped(self) -> None:
        pass


def _inc(x: int) -> int:
    return x + 1


@row(
    metric="sync_wait(10-stage then) overhead per stage vs direct calls",
    unit="us/op",
    better="lower",
    limit=1.5,
)
def then_pipeline_per_stage(b: Bench) -> tuple[float, float]:
    fs = [_inc] * 10
    p: Any = sx.just(0)
    for f in fs:
        p = p | sx.then(f)

    def direct() -> int:
        x = 0
        for f in fs:
            x = f(x)
        return x

    n = b.n(20_000)
    piped = timeit_sync(lambda: sx.sync_wait(p), n)
    plain = timeit_sync(direct, n)
    # structexec side: the overhead per stage; baseline side: a direct call per stage.
    return (piped - plain) / 10, plain / 10


@row(
    metric="connect+start of just(x) vs a plain 2-argument call",
    unit="ns/op",
    better="lower",
    target=10.0,
)
def connect_start_just(b: Bench) -> tuple[float, float]:
    r = _NullReceiver()
    s = sx.just(1)
    connect, start = sx.connect, sx.start

    def f(a: int, c: int) -> int:
        return a

    n = b.n(200_000)
    return timeit_sync(lambda: start(connect(s, r)), n), timeit_sync(lambda: f(1, 2), n)


def _when_all_per_child(n: int) -> float:
    s = sx.when_all(*[sx.just(i) for i in range(n)])
    return timeit_sync(lambda: sx.sync_wait(s), 1) / n


@row(
    metric="sync_wait(when_all(N x just(i))) per child: N = 100,000 vs N = 1,000 (scaling)",
    unit="us/op",
    better="lower",
    target=1.5,
)
def when_all_scaling(b: Bench) -> tuple[float, float]:
    """Collecting the children's values is linear: the per-child cost at N = 100,000 stays
    within 1.5x of the cost at N = 1,000 (it was 120x while tuples were concatenated)."""
    big = 100_000 if not b.quick else 20_000
    return _when_all_per_child(big), _when_all_per_child(1_000)
