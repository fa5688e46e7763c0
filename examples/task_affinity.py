"""`@sx.task` coroutines and scheduler affinity.

A task is an `async def` decorated with `@sx.task`. Calling it runs nothing; it returns a
sender that you can await, pass to `when_all`, spawn into a scope or `sync_wait`. Inside, you
await senders (and, on the trio scheduler, trio primitives).

Scheduler affinity: however an awaited sender finishes -- on a worker thread of the parallel
scheduler, on another thread's run_loop -- the task continues on *its* scheduler. In trio
that means "back on the trio thread", so the code between awaits can touch trio objects and
your own single-threaded state without locks.

This example prints, for each step, the thread it runs on (trio.run, and later sync_wait, run
on the main thread, `MainThread`; the parallel scheduler's workers are `structexec-parallel-N`):

1. a task on the trio scheduler hops to the parallel scheduler for CPU work and comes back;
2. the same task awaits a nested task and trio primitives;
3. a stop request unwinds a task: `finally` runs, the task completes "stopped";
4. the same task body under `sync_wait` (no trio): affinity to the waiting thread;
5. with `inline_scheduler` as the scheduler type, affinity is off.

Run: python examples/task_affinity.py
"""

from __future__ import annotations

import threading

import trio

import structexec as sx


def where() -> str:
    return threading.current_thread().name


def crunch(n: int) -> int:
    """CPU work; runs on a parallel-scheduler thread."""
    print(f"    crunch({n}) on {where()}")
    return sum(i * i for i in range(n))


@sx.task
async def square_sum(n: int) -> int:
    """A nested task: runs on the scheduler of the task that awaits it."""
    return await sx.starts_on(sx.get_parallel_scheduler(), sx.just(n) | sx.then(crunch))


@sx.task
async def pipeline() -> int:
    print(f"  task starts on {where()}")
    # 1. Hop to the parallel scheduler for CPU work ...
    a = await sx.starts_on(sx.get_parallel_scheduler(), sx.just(10_000) | sx.then(crunch))
    # ... and we are back on the trio thread (affinity).
    print(f"  after the parallel work: {where()}")
    # 2. Await a nested task (it runs on this task's trio task, no new trio task) ...
    b = await square_sum(1_000)
    print(f"  after the nested task: {where()}")
    # ... and trio primitives: this task runs in a trio task.
    send, recv = trio.open_memory_channel[int](1)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(send.send, a + b)
        total = await recv.receive()
    await trio.sleep(0.01)
    print(f"  after trio primitives: {where()}")
    return total


@sx.task
async def patient() -> None:
    try:
        print("  patient task waits for a long time...")
        await trio.sleep(3600)
    finally:
        print(f"  ...its finally block runs on {where()} after the stop request")


async def trio_main() -> None:
    print("1-2. a task on the trio scheduler")
    total = await pipeline()
    print(f"  result {total}")

    print("3. stopping a task: stop request -> the trio sleep is cancelled -> stopped")
    async with sx.counting_scope() as scope:
        scope.spawn(patient())
        await trio.sleep(0.05)
        scope.request_stop()
    print("  the scope joined; the task completed 'stopped' (no error)")


@sx.task
async def portable() -> str:
    """Only structexec senders: runs on any scheduler."""
    before = where()
    worker_name = await sx.starts_on(sx.get_parallel_scheduler(), sx.just() | sx.then(where))
    return f"started on {before}, work on {worker_name}, resumed on {where()}"


class NoAffinity:
    """A task Environment: inline_scheduler as the scheduler type turns affinity off."""

    scheduler_type = sx.inline_scheduler


@sx.task(environment=NoAffinity)
async def free_floating() -> str:
    before = where()
    worker_name = await sx.starts_on(sx.get_parallel_scheduler(), sx.just() | sx.then(where))
    return f"started on {before}, work on {worker_name}, resumed on {where()}"


def main() -> None:
    trio.run(trio_main)

    print("4. the same kind of task under sync_wait (affinity to the waiting thread)")
    (msg,) = sx.sync_wait(portable())  # type: ignore[misc]
    print(f"  {msg}")

    print("5. inline_scheduler as scheduler_type: no affinity")
    (msg,) = sx.sync_wait(free_floating())  # type: ignore[misc]
    print(f"  {msg}")

    # Awaiting a trio primitive off the trio scheduler is an error with advice:
    @sx.task
    async def needs_trio() -> None:
        await trio.sleep(1)

    try:
        sx.sync_wait(needs_trio())
    except RuntimeError as e:
        first = str(e).split(". ")[0]
        print(f"6. a trio primitive under sync_wait raises RuntimeError:\n  {first}.")


if __name__ == "__main__":
    main()
