"""The fast-path registry (``structexec._core._fastpaths``): the switches the property tests
flip, and the table of fast ``await`` handlers that the sender modules fill in
([exec.as.awaitable], [exec.when.all], [exec.schedule])."""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import Any

import pytest
import trio

import structexec as sx
from structexec._core import _fastpaths
from structexec._core._fastpaths import FAST, FAST_AWAIT, register_fast_await


def test_every_switch_is_on_by_default_and_named() -> None:
    assert set(_fastpaths.FastPaths.__slots__) == {
        "fuse_then",
        "fuse_just",
        "spawn",
        "spawn_coro",
        "when_all_nursery",
    }
    assert all(getattr(FAST, n) is True for n in _fastpaths.FastPaths.__slots__)
    assert "spawn=True" in repr(FAST)


def test_the_sender_modules_registered_their_fast_awaits() -> None:
    """when_all (nursery of the awaiting task), the trio scheduler's schedule and timer
    senders: each registered by the module that knows the fast way to await it."""
    from structexec._algorithms._when_all import _WhenAllSender
    from structexec._trio._trio_scheduler import _TrioScheduleSender, _TrioTimerSender

    assert {_WhenAllSender, _TrioScheduleSender, _TrioTimerSender} <= set(FAST_AWAIT)
    with pytest.raises(RuntimeError, match="already has a fast await handler"):
        register_fast_await(_WhenAllSender, lambda sndr, run: None)


class _Seven(sx.Sender[int]):
    """``just(7)``; awaited through the general path unless a fast handler says otherwise."""

    def get_completion_signatures(self, env: Any = None) -> Any:
        return sx.completion_signatures(sx.set_value_t(int))

    def connect(self, rcvr: Any) -> Any:
        self.connected = True
        return sx.connect(sx.just(7), rcvr)


@pytest.fixture
def handler_calls() -> Iterator[list[str]]:
    """Registers a fast handler for ``_Seven`` that never applies (returns ``None``)."""
    calls: list[str] = []

    def handler(sndr: _Seven, run: object) -> None:
        calls.append("asked")

    register_fast_await(_Seven, handler)
    try:
        yield calls
    finally:
        del FAST_AWAIT[_Seven]


async def test_a_fast_handler_that_does_not_apply_returns_to_the_general_path(
    handler_calls: list[str],
) -> None:
    s = _Seven()
    assert await s == 7
    assert handler_calls == ["asked"]
    assert s.connected  # the general path connected it


async def test_a_fast_handler_that_applies_replaces_the_general_path(
    handler_calls: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    handler = FAST_AWAIT[_Seven]

    def applying(sndr: _Seven, run: object) -> Any:
        handler_calls.append("asked")

        def fast() -> Generator[Any, Any, int]:
            handler_calls.append("fast")
            yield from trio.lowlevel.checkpoint().__await__()  # noqa: ASYNC105
            return 8

        return fast()

    monkeypatch.setitem(FAST_AWAIT, _Seven, applying)
    s = _Seven()
    assert await s == 8
    assert handler_calls == ["asked", "fast"]
    assert not hasattr(s, "connected")  # never connected: the handler's generator ran instead
    assert handler is not applying


def test_schedule_of_another_runs_scheduler_takes_the_general_path() -> None:
    """The trio scheduler's fast await applies only in a task of its own run: a scheduler of
    another run (here: one that has finished) goes through the general path, which raises
    ``RuntimeError`` from ``start`` (docs/trio.md)."""
    other = trio.run(_get_trio_scheduler)

    async def main() -> None:
        with pytest.raises(RuntimeError):
            await sx.schedule(other)
        assert await sx.schedule(sx.trio_scheduler()) is None  # own run: the fast path

    trio.run(main)


async def _get_trio_scheduler() -> Any:
    return sx.trio_scheduler()
