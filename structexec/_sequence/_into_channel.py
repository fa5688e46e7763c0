"""``into_channel(seq, send_channel, close=True)`` (private module).

Each item's value is sent with ``send_nowait`` when the channel has room and no value waits
(no trio task, no checkpoint); otherwise it joins a queue that one trio task (the send loop,
started when needed and ended when the queue is empty) sends from with ``await send``, and the
item's next sender completes when its value was sent: a full channel holds the producer back
(trio's backpressure). The queue holds at most one value per item in flight. Values from
another thread are handed to the trio thread first, so the order of sends is the order in
which items completed. The consumer completes only after the send loop ended.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import TYPE_CHECKING, Any

import trio

from .._core._connect import connect_unchecked as connect
from ._consume import ConsumerOp, _ConsumerSender
from ._protocol import ERROR, STOPPED, ItemRcvrNext, await_value, check_sequence

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._core._protocol import Sender
    from ._protocol import SequenceSender

__all__ = ["into_channel"]

_new = object.__new__
_get_ident = threading.get_ident
_WouldBlock = trio.WouldBlock


async def _send(ch: trio.abc.SendChannel[object], v: object) -> None:
    await ch.send(v)


async def _send_loop(op: _IntoChannelOp) -> None:
    """The one trio task that awaits ``send`` while values are waiting (one task for a run of
    sends that would block, never one per value)."""
    pending = op._pending
    send = op._ch.send
    while pending:
        await send(pending[0][0])
        n = pending.popleft()[1]
        n._rcvr.set_value()


class _LoopRcvr:
    __slots__ = ("_op",)

    def __init__(self, op: _IntoChannelOp) -> None:
        self._op = op

    def get_env(self) -> object:
        return self._op._env

    def set_value(self, *vals: object) -> None:
        self._op._loop_done(None)

    def set_error(self, err: object) -> None:
        self._op._loop_done(err)

    def set_stopped(self) -> None:
        self._op._loop_done(_STOPPED)


_STOPPED = object()


class _IntoChannelOp(ConsumerOp):
    __slots__ = ("_busy", "_ch", "_close", "_held", "_nowait", "_pending", "_thread", "_token")
    _busy: bool
    _ch: trio.abc.SendChannel[object]
    _close: bool
    _held: tuple[int, object] | None
    _nowait: Callable[[object], object] | None
    _pending: deque[tuple[object, _ChanNext]]
    _thread: int | None
    _token: trio.lowlevel.TrioToken | None
    _name = "into_channel"

    def _setup(self, ch: trio.abc.SendChannel[object], close: bool) -> None:
        self._ch = ch
        self._close = close
        self._pending = deque()
        self._busy = False
        self._held = None
        self._nowait = getattr(ch, "send_nowait", None)
        if trio.lowlevel.in_trio_run():
            self._thread = _get_ident()
            self._token = trio.lowlevel.current_trio_token()
        else:
            self._thread = None
            self._token = None

    def set_next(self, item: object) -> _ChanNext:  # type: ignore[override]
        n = _new(_ChanNext)
        n._owner = self
        n._item = item
        n._rcvr = None  # type: ignore[assignment]  # not connected yet
        n._phase = 0
        return n

    def _enqueue(self, v: object, n: _ChanNext) -> None:
        """On the trio thread: ``v`` waits for room in the channel (the send-loop task)."""
        self._pending.append((v, n))
        if not self._busy:
            self._busy = True
            connect(_send_loop(self), _LoopRcvr(self)).start()

    def _loop_done(self, res: object) -> None:
        pending = self._pending
        if res is not None:
            first = True
            while pending:
                n = pending.popleft()[1]
                if first and res is not _STOPPED:
                    self._fail(ERROR, res)
                elif first:
                    self._fail(STOPPED, None)
                first = False
                n._rcvr.set_stopped()
        self._busy = False
        held = self._held
        if held is not None:
            self._held = None
            self._finish_now(*held)

    def _seq_end(self, kind: int, data: object) -> None:
        if self._busy:  # the send-loop task is still running: complete when it ended
            self._held = (kind, data)
            return
        self._finish_now(kind, data)

    def _finish_now(self, kind: int, data: object) -> None:
        if self._close:
            close = getattr(self._ch, "close", None)
            if close is not None:
                if self._token is not None and _get_ident() != self._thread:
                    self._token.run_sync_soon(close)
                else:
                    close()
        ConsumerOp._seq_end(self, kind, data)


class _ChanNext(ItemRcvrNext[_IntoChannelOp]):
    __slots__ = ("_phase",)
    _phase: int

    def _copy(self) -> _ChanNext:
        n = _new(_ChanNext)
        n._owner = self._owner
        n._item = self._item
        n._rcvr = None  # type: ignore[assignment]  # not connected yet
        n._phase = 0
        return n

    start = ItemRcvrNext._run_item

    def set_value(self, *vals: object) -> None:
        if self._phase:
            self._rcvr.set_value()
            return
        owner = self._owner
        v = await_value(vals)
        if owner._thread == _get_ident():
            nowait = owner._nowait
            if nowait is not None and not owner._pending:  # never overtake a waiting value
                try:
                    nowait(v)
                except _WouldBlock:
                    pass
                except Exception as e:
                    owner._fail(ERROR, e)
                    self._rcvr.set_stopped()
                    return
                else:
                    self._rcvr.set_value()
                    return
            owner._enqueue(v, self)
            return
        if owner._token is not None:  # another thread: hand the value to the trio thread
            owner._token.run_sync_soon(owner._enqueue, v, self)
            return
        self._phase = 1
        connect(_send(owner._ch, v), self).start()

    def set_error(self, err: object) -> None:
        self._owner._fail(ERROR, err)
        self._rcvr.set_stopped()

    def set_stopped(self) -> None:
        self._owner._fail(STOPPED, None)
        self._rcvr.set_stopped()


def into_channel(
    seq: SequenceSender[object], send_channel: trio.abc.SendChannel[Any], close: bool = True
) -> Sender[None]:
    """Send every item's value (as ``await`` of the item would give it) into a trio
    ``SendChannel``, in the order items complete; a plain sender completing ``set_value()``
    with no datum.

    Every value is sent as ``await send_channel.send(v)`` would send it (``send_nowait`` when
    the channel has room): a full channel holds the producer back. The channel is closed
    (``close()``) when the sequence ends, whatever the outcome, unless ``close=False``. Needs
    a trio run. Errors and stops as for :func:`ignore_all_values`; a send that fails (the
    receiving side was closed: ``trio.BrokenResourceError``) is an error of the sequence.

    Raises ``TypeError`` at once if ``seq`` is not a sequence sender or ``send_channel`` has no
    ``send`` method.
    """
    check_sequence("into_channel()", "seq", seq)
    if not callable(getattr(send_channel, "send", None)):
        raise TypeError(
            "into_channel(): send_channel must be a trio SendChannel (an object with an async "
            f"send() method), got {type(send_channel).__name__}"
        )
    if type(close) is not bool:
        raise TypeError(f"into_channel(): close must be a bool, got {type(close).__name__}")
    return _ConsumerSender(_IntoChannelOp, seq, (send_channel, close))
