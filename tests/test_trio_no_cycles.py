"""Finished coroutine tasks hosted by the trio bridge are freed by reference counting.

The trio bridge ([exec.as.awaitable], docs/internals.md) marks each hosted task; a mark that
kept its task after the coroutine finished made task -> context -> mark -> task a cycle, and
the fast path of ``await sx.when_all(coroutines)`` made when_all <-> child env one: garbage
that only the cycle collector frees.
"""

from __future__ import annotations

import pytest
import trio
from _helpers import cyclic_garbage_of

import structexec as sx


@pytest.mark.parametrize("path", ["when_all", "hosted"])
def test_finished_coroutine_tasks_leave_no_cyclic_garbage(path: str) -> None:
    """A coroutine hosted as a trio task (the general path of a coroutine sender, and the
    nursery fast path of ``await sx.when_all(coroutines)``) is freed by reference counting
    once it finishes: its host mark drops the task (no task -> context -> mark -> task
    cycle)."""

    async def work() -> int:
        await trio.lowlevel.checkpoint()
        return 1

    async def quiet() -> None:
        await trio.lowlevel.checkpoint()

    async def once() -> None:
        if path == "when_all":
            assert await sx.when_all(work(), work()) == (1, 1)
        else:
            async with sx.counting_scope() as scope:
                sx.spawn(sx.write_env(quiet(), sx.env()), scope.get_token())  # general path

    async def many() -> None:
        for _ in range(20):
            await once()

    async def run() -> int:
        await once()
        return await cyclic_garbage_of(many)  # the code under test's (tests/_helpers.py)

    assert trio.run(run) == 0
