"""Moving work between the trio scheduler, ``run_loop`` threads and other threads.

Hops between trio and threads; [exec.starts.on], [exec.continues.on], [exec.schedule.from],
[exec.on] (``starts_on``, ``continues_on``, ``on``), docs/trio.md "Threads" and
docs/task.md "On the trio scheduler", docs/trio.md "The trio scheduler", docs/trio.md "Threads";
docs/trio.md "trio cancellation becomes a stop request", docs/trio.md "The trio scheduler". Every
step records ``threading.get_ident()``; every thread a test starts is joined.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import trio
import trio.testing

import structexec as sx
from structexec.testing import RecordingReceiver


@contextmanager
def loop_thread(name: str) -> Iterator[tuple[Any, threading.Thread]]:
    """A run_loop driven by its own thread; finished and joined on exit."""
    loop = sx.run_loop()
    t = threading.Thread(target=loop.run, name=name)
    t.start()
    try:
        yield loop.get_scheduler(), t
    finally:
        loop.finish()
        t.join(10)
        assert not t.is_alive()


def here() -> int:
    return threading.get_ident()


def mark(steps: list[tuple[str, int]], name: str) -> Any:
    def f(*args: Any) -> Any:
        steps.append((name, here()))
        return sx.values(*args)

    return f


# -------------------------------------------------------------------- hops between trio and threads


async def test_starts_on_run_loop_thread_then_back_on_trio() -> None:
    trio_thread = here()
    steps: list[tuple[str, int]] = []
    with loop_thread("A") as (a, ta):
        v = await sx.starts_on(a, sx.just(1) | sx.then(mark(steps, "on A")))
        steps.append(("after await", here()))
    assert v == 1
    assert steps == [("on A", ta.ident), ("after await", trio_thread)]


async def test_continues_on_trio_from_a_run_loop_thread() -> None:
    trio_thread = here()
    sch = sx.trio_scheduler()
    steps: list[tuple[str, int]] = []
    with loop_thread("A") as (a, ta):
        s = (
            sx.starts_on(a, sx.just("x") | sx.then(mark(steps, "A")))
            | sx.continues_on(sch)
            | sx.then(mark(steps, "trio"))
        )
        assert await s == "x"
    assert steps == [("A", ta.ident), ("trio", trio_thread)]


async def test_hops_trio_a_trio_b_trio() -> None:
    """Four hops, each checked: trio -> A -> trio -> B -> trio."""
    trio_thread = here()
    sch = sx.trio_scheduler()
    steps: list[tuple[str, int]] = []
    with loop_thread("A") as (a, ta), loop_thread("B") as (b, tb):
        s = (
            sx.just(0)
            | sx.then(mark(steps, "start"))
            | sx.continues_on(a)
            | sx.then(mark(steps, "A"))
            | sx.continues_on(sch)
            | sx.then(mark(steps, "trio 1"))
            | sx.continues_on(b)
            | sx.then(mark(steps, "B"))
            | sx.continues_on(sch)
            | sx.then(mark(steps, "trio 2"))
        )
        assert await s == 0
    assert steps == [
        ("start", trio_thread),
        ("A", ta.ident),
        ("trio 1", trio_thread),
        ("B", tb.ident),
        ("trio 2", trio_thread),
    ]


async def test_on_runs_there_and_comes_back_to_the_trio_scheduler() -> None:
    """on(A, s) started by a plain thread whose receiver names the trio scheduler: the work
    runs on A and the completion comes back to the trio thread ([exec.on])."""
    trio_thread = here()
    sch = sx.trio_scheduler()
    steps: list[tuple[str, int]] = []
    rec = RecordingReceiver(extra_env=sx.prop(sx.get_scheduler, sch))
    with loop_thread("A") as (a, ta):
        starter = threading.Thread(
            target=rec.run, args=(sx.on(a, sx.just(5) | sx.then(mark(steps, "A"))),)
        )
        starter.start()
        await trio.to_thread.run_sync(starter.join)
        with trio.fail_after(5):
            await rec.wait_trio()
    assert starter.ident != trio_thread
    assert steps == [("A", ta.ident)]
    assert rec.value == (5,)
    assert rec.thread == trio_thread


async def test_on_from_trio_task_returns_to_trio() -> None:
    trio_thread = here()
    steps: list[tuple[str, int]] = []
    with loop_thread("A") as (a, ta):
        s = sx.on(a, sx.just(2) | sx.then(mark(steps, "A"))) | sx.then(mark(steps, "after on"))
        assert await s == 2
    assert steps == [("A", ta.ident), ("after on", trio_thread)]


async def test_on_closure_form_runs_the_closure_on_trio() -> None:
    """sndr | on(trio, closure): sndr on A, closure on trio, then back to A ([exec.on])."""
    trio_thread = here()
    sch = sx.trio_scheduler()
    steps: list[tuple[str, int]] = []
    with loop_thread("A") as (a, ta):
        s = sx.starts_on(
            a,
            sx.just(3)
            | sx.then(mark(steps, "A before"))
            | sx.on(sch, sx.then(mark(steps, "trio closure")))
            | sx.then(mark(steps, "A after")),
        )
        assert await s == 3
    assert steps == [
        ("A before", ta.ident),
        ("trio closure", trio_thread),
        ("A after", ta.ident),
    ]


async def test_plain_threads_start_work_that_hops_onto_trio() -> None:
    trio_thread = here()
    sch = sx.trio_scheduler()
    recs = [RecordingReceiver() for _ in range(8)]
    starters: list[int] = []
    lock = threading.Lock()

    def start(rec: RecordingReceiver) -> None:
        with lock:
            starters.append(here())
        rec.run(sx.just(here()) | sx.continues_on(sch) | sx.then(lambda t: (t, here())))

    threads = [threading.Thread(target=start, args=(r,)) for r in recs]
    for t in threads:
        t.start()
    for t in threads:
        await trio.to_thread.run_sync(t.join)
    for rec in recs:
        with trio.fail_after(5):
            await rec.wait_trio()
    for rec, t in zip(recs, threads):
        started_on, ran_on = rec.value[0]
        assert started_on == t.ident != trio_thread
        assert ran_on == trio_thread
        assert rec.thread == trio_thread


async def test_trio_to_thread_worker_hops_back_with_continues_on() -> None:
    trio_thread = here()
    sch = sx.trio_scheduler()

    def in_worker() -> Any:
        worker = here()
        got = sx.sync_wait(sx.just(worker) | sx.continues_on(sch) | sx.then(lambda w: (w, here())))
        return worker, got

    worker, got = await trio.to_thread.run_sync(in_worker)
    assert got == ((worker, trio_thread),)
    assert worker != trio_thread


async def test_coroutine_started_on_trio_from_a_worker_thread(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """sync_wait(starts_on(trio, coro)) from a trio.to_thread worker: the coroutine is hosted
    on trio (it can use trio.sleep) and sync_wait returns on the worker."""
    trio_thread = here()
    sch = sx.trio_scheduler()

    async def uses_trio() -> int:
        await trio.sleep(1)
        return here()

    def in_worker() -> Any:
        return here(), sx.sync_wait(sx.starts_on(sch, uses_trio()))

    worker, got = await trio.to_thread.run_sync(in_worker)
    assert got == (trio_thread,)
    assert worker != trio_thread


async def test_coroutine_started_on_a_run_loop_is_driven_there() -> None:
    """starts_on(A, coro) from trio: the coroutine runs on A's thread (driver); awaiting a
    trio primitive there is a clear error (docs/task.md "What a task is")."""
    trio_thread = here()

    async def body() -> int:
        await sx.just()
        return here()

    async def uses_trio() -> None:
        await trio.sleep(0)

    with loop_thread("A") as (a, ta):
        assert await sx.starts_on(a, body()) == ta.ident
        with pytest.raises(RuntimeError, match="trio primitives can only be awaited"):
            await sx.starts_on(a, uses_trio())
    assert here() == trio_thread


async def test_cancel_while_the_work_is_on_another_thread(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A trio cancellation reaches work queued on a run_loop thread as a stop request."""
    gate = threading.Event()
    steps: list[tuple[str, int]] = []
    with loop_thread("A") as (a, _):
        # Block A so that the scheduled item is still queued when the cancellation arrives.
        blocker = RecordingReceiver()
        blocker.run(sx.starts_on(a, sx.just() | sx.then(lambda: gate.wait(10))))

        async def release() -> None:
            await trio.sleep(2)  # after the cancellation at t=1
            steps.append(("released", here()))
            gate.set()

        async with trio.open_nursery() as n:
            n.start_soon(release)
            with trio.move_on_after(1) as cs:
                try:
                    await sx.starts_on(a, sx.just() | sx.then(mark(steps, "A")))
                finally:
                    steps.append(("await raised", here()))
        await trio.to_thread.run_sync(blocker.wait)
    assert cs.cancelled_caught
    # The await waited for the queued item
    # (docs/trio.md "trio cancellation becomes a stop request"), which then ran stopped, not the
    # work.
    assert [s for s, _ in steps] == ["released", "await raised"]


# --------------------------------------------------------------------------- sync_wait and trio


async def test_sync_wait_refuses_on_the_trio_thread() -> None:
    with pytest.raises(RuntimeError, match="running trio"):
        sx.sync_wait(sx.just(1))


async def test_sync_wait_refuses_in_a_system_task_and_callbacks() -> None:
    errors: list[BaseException] = []

    def cb() -> None:
        try:
            sx.sync_wait(sx.just(1))
        except RuntimeError as e:
            errors.append(e)

    trio.lowlevel.current_trio_token().run_sync_soon(cb)
    await trio.testing.wait_all_tasks_blocked()
    assert len(errors) == 1


async def test_sync_wait_works_from_to_thread() -> None:
    res = await trio.to_thread.run_sync(lambda: sx.sync_wait(sx.just(1, 2)))
    assert res == (1, 2)


def test_sync_wait_works_after_trio_run_returned() -> None:
    async def main() -> None:
        await sx.just()

    trio.run(main)
    assert sx.sync_wait(sx.just(3)) == (3,)
