"""``from_aiter`` and ``from_channel``: trio-side sources (private module).

The producer is one coroutine, run as a sender (in its own trio task under trio, cancelled
by a stop request on the sequence's stop token): it awaits the next element, offers it, and
awaits the next sender (which completes at once when the pipeline has room). One task for
the whole sequence, never one per item.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Generic, TypeVar

import trio

from .._core._connect import connect_unchecked as connect
from .._core._env import get_env
from .._core._protocol import Sender
from .._core._queries import get_stop_token, query_or
from .._core._stop_token import never_stop_token
from ._protocol import SequenceSender, just_stopped, just_vals

if TYPE_CHECKING:
    from collections.abc import AsyncIterable, Awaitable, Callable

    from ._protocol import OpState, Rcvr, SeqRcvr

__all__ = ["from_aiter", "from_channel"]

T = TypeVar("T")
#: The source of a :class:`_CoroSequence` (an async iterable, a receive channel).
S = TypeVar("S")
_NEVER = never_stop_token()


class _NextOutcome(Sender[int]):
    """A next sender, awaited: gives 1 for ``set_value()`` (more items wanted) and 0 for
    ``set_stopped()``; an error is raised. A small sender of its own (no tag, so no domain
    transforms it), whose operation drops its references when it completes."""

    __slots__ = ("_ns",)
    _ns: object

    def __init__(self, ns: object) -> None:
        self._ns = ns

    def connect(self, rcvr: Rcvr) -> _NextOutcomeOp:
        return _NextOutcomeOp(self._ns, rcvr)


class _NextOutcomeOp:
    __slots__ = ("_ns", "_rcvr")
    _ns: object
    _rcvr: Rcvr  # None once completed

    def __init__(self, ns: object, rcvr: Rcvr) -> None:
        self._ns = ns
        self._rcvr = rcvr

    def get_env(self) -> object:
        return get_env(self._rcvr)

    def start(self) -> None:
        ns = self._ns
        self._ns = None
        connect(ns, self).start()

    def _take(self) -> Rcvr:
        rcvr = self._rcvr
        self._rcvr = None  # type: ignore[assignment]  # completed: drop the reference
        return rcvr

    def set_value(self, *vals: object) -> None:
        self._take().set_value(1)

    def set_error(self, err: object) -> None:
        self._take().set_error(err)

    def set_stopped(self) -> None:
        self._take().set_value(0)


async def _produce_aiter(src: AsyncIterable[object], rcvr: SeqRcvr) -> None:
    tok = query_or(get_env(rcvr), get_stop_token, _NEVER)
    ait = src.__aiter__()
    finished = False
    try:
        async for x in ait:
            if not await _NextOutcome(rcvr.set_next(just_vals((x,)))):
                break  # the consumer wants no more items
        else:
            finished = True
    finally:
        if not finished:
            aclose = getattr(ait, "aclose", None)
            if aclose is not None:
                await aclose()
    if tok.stop_requested():
        await just_stopped()


async def _produce_channel(ch: trio.abc.ReceiveChannel[object], rcvr: SeqRcvr) -> None:
    tok = query_or(get_env(rcvr), get_stop_token, _NEVER)
    receive = ch.receive
    while True:
        try:
            x = await receive()
        except trio.EndOfChannel:
            return
        if not await _NextOutcome(rcvr.set_next(just_vals((x,)))):
            break
    if tok.stop_requested():
        await just_stopped()


class _CoroSequence(SequenceSender[T], Generic[T, S]):
    __slots__ = ("_fn", "_name", "_src")
    _fn: Callable[[S, SeqRcvr], Awaitable[None]]
    _name: str
    _src: S

    def __init__(self, fn: Callable[[S, SeqRcvr], Awaitable[None]], src: S, name: str) -> None:
        self._fn = fn
        self._src = src
        self._name = name

    def connect(self, rcvr: SeqRcvr) -> OpState:
        op: OpState = connect(self._fn(self._src, rcvr), rcvr)
        return op

    def __repr__(self) -> str:
        return f"{self._name}({self._src!r})"


def from_aiter(aiterable: AsyncIterable[T]) -> SequenceSender[T]:
    """A sequence of the elements of an async iterable (an async generator, a trio receive
    channel, ...): item *i* is ``just(x_i)``.

    The elements are awaited in one coroutine, run as a sender: under trio in its own task,
    whose cancel scope is cancelled by a stop request on the sequence's stop token; the next
    element is awaited only when the pipeline has room (backpressure). The async iterator's
    ``aclose()`` is awaited when the sequence ends before it is exhausted (stop, error,
    ``take``), so an async generator's ``finally`` blocks run inside the sequence's operation,
    never after it. Under ``sync_wait`` without trio, an async iterator that awaits trio
    primitives fails with a clear ``RuntimeError``.

    Completion: ``set_value()`` at the end, ``set_error(e)`` if the iterator raises the
    ``Exception`` ``e``, ``set_stopped()`` after a stop request.

    Raises ``TypeError`` at once if ``aiterable`` has no ``__aiter__``.
    """
    if not callable(getattr(aiterable, "__aiter__", None)):
        raise TypeError(
            "from_aiter(): aiterable must be an async iterable (an async generator, an "
            f"object with __aiter__), got {type(aiterable).__name__}"
        )
    return _CoroSequence(_produce_aiter, aiterable, "from_aiter")


def from_channel(receive_channel: trio.abc.ReceiveChannel[T]) -> SequenceSender[T]:
    """A sequence of the values received from a trio ``ReceiveChannel``; it ends at
    ``trio.EndOfChannel`` (the sending side was closed).

    One value is received only when the pipeline has room for another item, so a full
    pipeline leaves values in the channel and the trio task that sends into it blocks on
    ``send`` (backpressure end to end). A stop request on the sequence's stop token cancels a
    pending ``receive``. The channel is not closed by the sequence (it belongs to the caller,
    who can read on after ``take``). Needs a trio run (the receive is awaited in a trio task).

    Completion: ``set_value()`` at ``EndOfChannel`` or when the consumer wants no more items,
    ``set_error(e)`` for an error of ``receive`` (``trio.ClosedResourceError`` when the
    receiving side was closed), ``set_stopped()`` after a stop request.

    Raises ``TypeError`` at once if ``receive_channel`` has no ``receive`` method.
    """
    if not callable(getattr(receive_channel, "receive", None)):
        raise TypeError(
            "from_channel(): receive_channel must be a trio ReceiveChannel (an object with "
            f"an async receive() method), got {type(receive_channel).__name__}"
        )
    return _CoroSequence(_produce_channel, receive_channel, "from_channel")
