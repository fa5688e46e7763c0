"""Hand-offs between the parallel scheduler and trio
(docs/trio.md "trio cancellation becomes a stop request", docs/parallel.md,
docs/trio.md "Awaiting a sender", docs/trio.md "trio cancellation becomes a stop request",
[exec.sysctxrepl.recvproxy], 12.x continues_on)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import trio

import structexec as sx
from structexec.backends import ThreadPoolBackend


@pytest.fixture(scope="module")
def pool() -> Iterator[ThreadPoolBackend]:
    with ThreadPoolBackend(2, thread_name_prefix="trio-pool") as p:
        yield p


async def test_work_on_the_pool_resumes_on_the_trio_thread() -> None:
    trio_thread = threading.get_ident()
    where: list[int] = []

    def f() -> int:
        where.append(threading.get_ident())
        return 5

    sndr = (
        sx.schedule(sx.get_parallel_scheduler())
        | sx.then(f)
        | sx.continues_on(sx.trio_scheduler())
        | sx.then(lambda x: (x, threading.get_ident()))
    )
    value, after = await sndr
    assert value == 5
    assert where[0] != trio_thread
    assert after == trio_thread
    assert threading.get_ident() == trio_thread


async def test_bulk_on_the_pool_then_back_to_trio() -> None:
    trio_thread = threading.get_ident()
    out = [0] * 64
    sndr = (
        sx.schedule(sx.get_parallel_scheduler())
        | sx.then(lambda: out)
        | sx.bulk(sx.par, 64, lambda i, o: o.__setitem__(i, threading.get_ident()))
        | sx.continues_on(sx.trio_scheduler())
        | sx.then(lambda o: threading.get_ident())
    )
    assert await sndr == trio_thread
    assert trio_thread not in out


async def test_trio_cancellation_stops_the_bulk_work(pool: ThreadPoolBackend) -> None:
    """The trio cancellation arrives while both pool threads are inside an index: each one
    finishes that index and runs no other (a per-index chunk checks the stop token before
    each index); the await ends only after every index that ran has returned."""
    sch = sx.parallel_scheduler(pool)
    done: list[int] = []
    running = threading.Event()
    release = threading.Event()

    def f(i: int) -> None:
        running.set()
        release.wait(30)  # until the stop was requested (the bound only guards a hang)
        done.append(i)

    async def cancel_once_an_index_runs(cs: trio.CancelScope) -> None:
        await trio.to_thread.run_sync(running.wait, 30)
        cs.cancel()  # the stop request reaches the bulk now...
        release.set()  # ...before the running indices return

    async with trio.open_nursery() as nursery:
        with trio.CancelScope() as cs:
            nursery.start_soon(cancel_once_an_index_runs, cs)
            await (
                sx.schedule(sch) | sx.bulk(sx.par, 10_000, f) | sx.continues_on(sx.trio_scheduler())
            )
    assert cs.cancelled_caught
    n = len(done)
    assert 0 < n <= 2  # the indices that were running on the two threads, no other
    await trio.sleep(0.02)
    assert len(done) == n  # every execute happened before the completion ([exec.sysctxrepl.psb])


async def test_trio_cancellation_of_schedule_before_it_runs(pool: ThreadPoolBackend) -> None:
    """A stop request that arrives while the item is queued completes it stopped
    ([exec.par.scheduler])."""
    sch = sx.parallel_scheduler(pool)
    blocker = threading.Event()
    # Occupy both pool threads so that the next schedule() stays queued.
    busy = [sx.connect(sx.schedule(sch) | sx.then(blocker.wait), _Sink()) for _ in range(2)]
    for op in busy:
        op.start()
    ran: list[int] = []

    async def cancel_then_unblock(cs: trio.CancelScope) -> None:
        await trio.sleep(0.02)
        cs.cancel()  # the awaiting task asks the queued item to stop...
        await trio.sleep(0.01)
        blocker.set()  # ...and the item sees the request when a thread picks it up

    async with trio.open_nursery() as nursery:
        with trio.CancelScope() as cs:
            nursery.start_soon(cancel_then_unblock, cs)
            await (sx.schedule(sch) | sx.then(lambda: ran.append(1)))
        assert cs.cancelled_caught
    assert ran == []


class _Sink:
    def set_value(self, *a: object) -> None:
        pass

    def set_error(self, e: object) -> None:
        pass

    def set_stopped(self) -> None:
        pass
