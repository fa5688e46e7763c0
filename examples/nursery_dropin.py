"""A counting_scope where trio code expects a nursery.

Run: .venv/bin/python examples/nursery_dropin.py

Each section is code written for ``trio.open_nursery()`` with the nursery replaced by
``sx.counting_scope()`` and nothing else changed, plus what the scope adds (senders,
``request_stop()``). See docs/scopes.md "The nursery face".
"""

from __future__ import annotations

import sys

import trio
import trio.testing

import structexec as sx

if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup  # type: ignore[import-not-found, unused-ignore]


async def worker(
    name: str, log: list[str], *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED
) -> None:
    task_status.started(name)
    try:
        await trio.sleep_forever()
    except trio.Cancelled:
        log.append(f"{name} cancelled")
        raise


async def main() -> None:
    # 1. nursery.cancel_scope.cancel() ends the block, children cancelled, nothing raised.
    log: list[str] = []
    async with sx.counting_scope() as nursery:
        nursery.start_soon(worker, "a", log)
        print("1. started:", await nursery.start(worker, "b", log))
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    print("1. after cancel_scope.cancel():", sorted(log))

    # 2. A failing child cancels its siblings and the body; the errors come out in an
    #    ExceptionGroup, as from a nursery (so `except* ValueError:` works too).
    async def fail() -> None:
        await trio.testing.wait_all_tasks_blocked()
        raise ValueError("boom")

    log.clear()
    try:
        async with sx.counting_scope() as nursery:
            nursery.start_soon(worker, "sibling", log)
            nursery.start_soon(fail)
            await trio.sleep_forever()
    except BaseExceptionGroup as group:
        matched, _ = group.split(ValueError)
        assert matched is not None
        print("2. ExceptionGroup:", [str(e) for e in matched.exceptions], sorted(log))

    # 3. The task tree is trio's: a child's parent is the task that opened the scope.
    me = trio.lowlevel.current_task()
    parents: list[bool] = []

    async def child() -> None:
        nursery_of_child = trio.lowlevel.current_task().parent_nursery
        parents.append(nursery_of_child is not None and nursery_of_child.parent_task is me)

    async with sx.counting_scope() as nursery:
        nursery.start_soon(child)
    print("3. child's parent is the opener:", parents == [True])

    # 4. An enclosing timeout cancels the children, as for a nursery.
    log.clear()
    with trio.move_on_after(0.05) as timeout:
        async with sx.counting_scope() as nursery:
            nursery.start_soon(worker, "timed", log)
    print("4. move_on_after:", timeout.cancelled_caught, log)

    # 5. What a nursery cannot do: stop the work and keep the body running, and hand
    #    results back from spawned senders.
    log.clear()
    async with sx.counting_scope() as scope:
        scope.start_soon(worker, "work", log)
        answer = scope.spawn_future(sx.just(6) | sx.then(lambda x: x * 7))
        await trio.testing.wait_all_tasks_blocked()
        scope.request_stop()
        await trio.sleep(0.01)  # the body is not cancelled by request_stop()
        print("5. after request_stop:", log, "the body still runs; answer =", await answer)


if __name__ == "__main__":
    trio.run(main)
