"""Deep synchronous chains do not overflow the stack (P3552R1 4.10)."""

from __future__ import annotations

import functools
import sys
import threading
from typing import Any

import structexec as sx
from structexec.testing import ManualScheduler


def test_recursive_let_value_loop_100000() -> None:
    n = 100_000

    def step(i: int) -> Any:
        return sx.just(i + 1) | sx.let_value(step) if i < n else sx.just(i)

    limit = sys.getrecursionlimit()
    assert limit <= 10_000  # the loop must not depend on a raised recursion limit
    assert sx.sync_wait(sx.just(0) | sx.let_value(step)) == (n,)


def test_10000_stage_pipeline_with_reduce() -> None:
    s = functools.reduce(lambda s, _: s | sx.then(lambda x: x + 1), range(10_000), sx.just(0))
    assert sx.sync_wait(s) == (10_000,)


def test_10000_stage_mixed_pipeline() -> None:
    def stage(s: Any, i: int) -> Any:
        if i % 3 == 0:
            return s | sx.then(lambda x: x + 1)
        if i % 3 == 1:
            return s | sx.upon_error(lambda e: 0)
        return s | sx.upon_stopped(lambda: 0)

    s = functools.reduce(stage, range(10_000), sx.just(0))
    assert sx.sync_wait(s) == (3334,)


def test_deep_let_loop_in_a_small_thread_stack() -> None:
    # The trampoline keeps the stack flat, so a thread with a small stack still copes. (1 MiB,
    # an eighth of the default: CPython 3.13's own C-recursion budget, which bounds e.g. the
    # deallocation of long object chains, assumes about that much.)
    old = threading.stack_size(1024 * 1024)
    try:
        out: list[Any] = []

        def step(i: int) -> Any:
            return sx.just(i + 1) | sx.let_value(step) if i < 20_000 else sx.just(i)

        t = threading.Thread(
            target=lambda: out.append(sx.sync_wait(sx.just(0) | sx.let_value(step)))
        )
        t.start()
        t.join()
    finally:
        threading.stack_size(old)
    assert out == [(20_000,)]


def test_let_loop_with_hops_completes_in_order() -> None:
    sch = ManualScheduler()
    seen: list[int] = []

    def step(i: int) -> Any:
        seen.append(i)
        if i == 50:
            return sx.just(i)
        nxt = sx.schedule(sch) if i % 10 == 0 else sx.just()
        return nxt | sx.let_value(lambda: step(i + 1))

    from structexec.testing import RecordingReceiver

    rec = RecordingReceiver()
    rec.run(sx.just(0) | sx.let_value(step))
    while not rec.done:
        sch.drain()
    assert rec.value == (50,)
    assert seen == list(range(51))


def test_deep_chains_with_a_custom_domain_active() -> None:
    # Creating a custom domain switches the transform machinery on for the process; deep
    # chains must stay flat (and linear-time) on that path too.
    class Passive(sx.default_domain):
        pass

    Passive()
    s = functools.reduce(lambda s, _: s | sx.then(lambda x: x + 1), range(10_000), sx.just(0))
    assert sx.sync_wait(s) == (10_000,)

    def step(i: int) -> Any:
        return sx.just(i + 1) | sx.let_value(step) if i < 20_000 else sx.just(i)

    assert sx.sync_wait(sx.just(0) | sx.let_value(step)) == (20_000,)


def test_let_loop_with_a_scheduler_hop_every_iteration_stays_flat() -> None:
    # Each iteration's let-env is SCHED-ENV(sch); nested receiver2s must collapse, or every
    # query and completion walks a chain as long as the loop (RecursionError at ~3,000).
    n = 5_000
    loop = sx.run_loop()
    t = threading.Thread(target=loop.run)
    t.start()
    sch = loop.get_scheduler()
    seen_threads: set[int] = set()

    def step(i: int) -> Any:
        if i == n:
            return sx.read_env(sx.get_scheduler) | sx.then(lambda s: (i, s))
        return (
            sx.schedule(sch)
            | sx.then(lambda: seen_threads.add(threading.get_ident()) or i + 1)
            | sx.let_value(step)
        )

    try:
        (result,) = sx.sync_wait(step(0))  # type: ignore[misc]
    finally:
        loop.finish()
        t.join()
    assert result == (n, sch)
    assert seen_threads == {t.ident}
