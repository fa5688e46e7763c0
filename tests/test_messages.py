"""Messages that say what happened and what applies: awaiting asyncio (or trio) in a coroutine
that structexec drives off the trio scheduler, ``async with`` a scope outside trio, and a task
that ignores a stop because it sits in a shielded cancel scope (``sx.dump()``,
docs/debugging.md)."""

from __future__ import annotations

import asyncio
import io
from typing import Any

import pytest
import trio

import structexec as sx

# --------------------------------------------------------------------------- foreign awaits


def test_an_asyncio_future_awaited_under_sync_wait_is_named() -> None:
    loop = asyncio.new_event_loop()
    try:

        async def body() -> None:
            await loop.create_future()

        with pytest.raises(RuntimeError) as ei:
            sx.sync_wait(body())
    finally:
        loop.close()
    msg = str(ei.value)
    assert msg.startswith(
        "this coroutine awaited an asyncio future (<Future pending>), but it is driven by "
        "structexec, whose runtime is trio: asyncio futures, tasks and primitives cannot be "
        "awaited in a coroutine that structexec runs, on any scheduler."
    )
    assert "awaited yielded" not in msg and "trio primitives can only" not in msg


def test_asyncio_sleep_under_sync_wait_is_named() -> None:
    async def body() -> None:
        await asyncio.sleep(0)

    with pytest.raises(RuntimeError) as ei:
        sx.sync_wait(body())
    assert str(ei.value).startswith(
        "this coroutine awaited an awaitable that yielded None, as asyncio.sleep(0) does, but "
        "it is driven by structexec"
    )


def test_a_trio_primitive_under_sync_wait_is_named() -> None:
    async def body() -> None:
        await trio.sleep(0)

    with pytest.raises(RuntimeError) as ei:
        sx.sync_wait(body())
    msg = str(ei.value)
    assert msg.startswith(
        "trio primitives can only be awaited when the coroutine runs on the trio scheduler; "
        "this coroutine is driven by structexec off the trio scheduler and awaited a trio "
        "primitive (it yielded trio's CancelShieldedCheckpoint). Await structexec senders here"
    )
    assert "awaited yielded" not in msg


# --------------------------------------------------------------------------- scopes outside trio


@pytest.mark.parametrize("cls", [sx.counting_scope, sx.simple_counting_scope])
def test_async_with_a_scope_under_asyncio_says_what_applies(cls: Any) -> None:
    scope = cls()

    async def main() -> None:
        async with scope:
            pass  # pragma: no cover - never entered

    with pytest.raises(RuntimeError) as ei:
        asyncio.run(main())
    msg = str(ei.value)
    assert msg.startswith(f"`async with {cls.__name__}()` needs a running trio event loop")
    assert "sx.sync_wait(scope.join())" in msg
    assert "scheduler obtained inside the run" not in msg

    # the failed entry left the scope usable: it opens under trio afterwards
    async def under_trio() -> str:
        async with scope as s:
            s.start_soon(trio.sleep, 0)
        return str(scope.state)

    assert trio.run(under_trio) == "joined"


# --------------------------------------------------------------------------- shielded tasks


async def stubborn() -> None:
    with trio.CancelScope(shield=True):  # no stop reaches it
        await trio.sleep(10)


def _state_of(scope: Any, name: str) -> str:
    (op,) = [o for o in scope.outstanding() if o.description.startswith(name)]
    return str(op.state)


async def test_dump_shows_a_task_in_a_shielded_cancel_scope(autojump_clock: Any) -> None:
    async with sx.counting_scope(name="shielded") as scope:
        scope.start_soon(stubborn)
        scope.start_soon(trio.sleep, 10)
        await trio.sleep(1)
        assert "; in a shielded cancel scope (a stop cannot cancel it)" in _state_of(
            scope, "stubborn"
        )
        assert "shielded" not in _state_of(scope, "sleep")
        scope.request_stop()
        await trio.sleep(0)
        text = sx.dump(io.StringIO())
        lines = text.splitlines()
        (i,) = [k for k, ln in enumerate(lines) if "- start_soon stubborn()" in ln]
        assert lines[i + 1].strip().startswith("in trio task, awaiting in ")
        assert lines[i + 1].endswith(
            "; in a shielded cancel scope (a stop cannot cancel it); stop requested"
        )


async def waits() -> None:
    await trio.sleep(10)


@pytest.mark.parametrize("how", ["spawn", "spawn_future"])
async def test_a_spawned_coroutine_is_shielded_only_by_its_own_scope(
    autojump_clock: Any, how: str
) -> None:
    # A coroutine spawned into an entered scope runs in a cancel scope of the library's (which
    # a stop cancels): only a shield of the coroutine's own is reported.
    async with sx.counting_scope() as scope:
        keep = [getattr(scope, how)(stubborn()), getattr(scope, how)(waits())]
        await trio.sleep(1)
        assert "shielded" in _state_of(scope, "stubborn()")
        assert "shielded" not in _state_of(scope, "waits()")
        scope.request_stop()
    del keep
