"""Bare ``sx.spawn(..., scope.get_token())`` inside ``async with``: it behaves as
``scope.spawn`` (docs/scopes.md "The nursery face: `async with`")."""

from __future__ import annotations

import threading

import trio

import structexec as sx


async def test_spawn_task_with_bare_token_runs_on_trio_scheduler() -> None:
    ran: list[tuple[int, object]] = []

    @sx.task
    async def work(x: int) -> None:
        sch = await sx.read_env(sx.get_scheduler)
        await trio.sleep(0)  # trio primitives work: the task runs on the trio scheduler
        ran.append((threading.get_ident(), sch))

    async with sx.counting_scope() as scope:
        sx.spawn(work(1), scope.get_token())
        fut = sx.spawn_future(work(2), scope.get_token())
        await fut
    assert len(ran) == 2
    assert {t for t, _ in ran} == {threading.get_ident()}
    assert all(s == sx.trio_scheduler() for _, s in ran)


async def test_spawn_coroutine_with_bare_token_is_hosted_and_cancelled_by_scope() -> None:
    events: list[str] = []

    async def sleeper() -> None:
        try:
            await trio.sleep_forever()
        finally:
            events.append("cancelled")

    async with sx.counting_scope() as scope:
        sx.spawn(sleeper(), scope.get_token())
        await trio.sleep(0.01)
        scope.request_stop()
    assert events == ["cancelled"]


def test_bare_token_outside_async_with_has_no_scheduler() -> None:
    scope = sx.counting_scope()
    seen: list[object] = []
    sx.spawn(sx.read_env(sx.get_stop_token) | sx.then(seen.append), scope.get_token())
    assert len(seen) == 1 and seen[0].stop_possible()  # type: ignore[attr-defined]
    scope.close()
    sx.sync_wait(scope.join())
