"""``sx.each(seq)``: iterate a sequence in trio code with ``async with ... async for``
(private module)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Generic, TypeVar

import trio

from ._into_channel import into_channel
from ._protocol import check_sequence

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from contextlib import AbstractAsyncContextManager
    from types import TracebackType

    from ._protocol import SequenceSender

__all__ = ["each"]

T = TypeVar("T")


class _Items(Generic[T]):
    """The async iterator of :class:`each`: receives from a 0-size memory channel."""

    __slots__ = ("_owner", "_recv")
    _owner: each[T]
    _recv: trio.MemoryReceiveChannel[T]

    def __init__(self, owner: each[T], recv: trio.MemoryReceiveChannel[T]) -> None:
        self._owner = owner
        self._recv = recv

    def __aiter__(self) -> _Items[T]:
        return self

    async def __anext__(self) -> T:
        try:
            v: T = await self._recv.receive()
        except trio.EndOfChannel:
            err = self._owner._error
            if err is not None:
                self._owner._error = None
                raise err from None
            raise StopAsyncIteration from None
        return v


class each(Generic[T]):
    """``async with sx.each(seq) as items: async for v in items: ...``: the values of a
    sequence in a trio task, with the producer running in its own task.

    Entering the block opens a nursery and starts the sequence in one of its tasks, which sends
    each item's value (as ``await`` of the item would give it) into a memory channel of size
    0: the producer runs at most one item ahead of the loop body. The iterator is a plain
    object (no async generator): it never holds an open cancel scope across a ``yield`` to
    the caller, and ``break``, ``return`` or an exception in the body are safe.

    Leaving the block (at the end, on ``break``, on an exception or a trio cancellation)
    requests stop on the sequence (its producer and items in flight) and waits for it. An
    exception raised in the body comes out of the ``async with`` as it was raised (not in an
    exception group), as from trio's ``as_safe_channel``. An error of the sequence is raised
    by the ``async for`` (the next ``__anext__``), after everything stopped.

    Raises ``TypeError`` at once if ``seq`` is not a sequence sender.
    """

    __slots__ = ("_cs", "_error", "_nm", "_seq")
    _cs: trio.CancelScope | None
    _error: BaseException | None
    _nm: AbstractAsyncContextManager[trio.Nursery] | None
    _seq: SequenceSender[T]

    def __init__(self, seq: SequenceSender[T]) -> None:
        check_sequence("each()", "seq", seq)
        self._seq = seq
        self._error = None
        self._nm = None
        self._cs = None

    async def _run(self, send: trio.MemorySendChannel[T]) -> None:
        try:
            await into_channel(self._seq, send, close=False)
        except Exception as e:
            self._error = e
        finally:
            send.close()

    async def __aenter__(self) -> AsyncIterator[T]:
        if self._nm is not None:
            raise RuntimeError("each(): this object was entered already; make a new one")
        send, recv = trio.open_memory_channel[T](0)
        self._nm = nm = trio.open_nursery()
        nursery = await nm.__aenter__()
        self._cs = nursery.cancel_scope
        nursery.start_soon(self._run, send)
        return _Items(self, recv)

    async def __aexit__(
        self,
        et: type[BaseException] | None,
        e: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        self._cs.cancel()  # type: ignore[union-attr]  # set by __aenter__
        try:
            await self._nm.__aexit__(None, None, None)  # type: ignore[union-attr]
        except BaseException as exc:
            if e is None:
                raise
            raise exc from e
        return False
