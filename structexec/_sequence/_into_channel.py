"""``into_channel(seq, send_channel, close=True)`` (private module).

Each item's value is sent with ``send_nowait`` when the channel has room (no trio task, no
checkpoint) and otherwise by awaiting ``send`` in a trio task, whose completion is the item's
next sender: a full channel holds the producer back (trio's backpressure).
"""

from __future__ import annotations

import threading
from typing import Any

import trio

from .._core._connect import connect_unchecked as connect
from .._core._protocol import Sender
from ._consume import ConsumerOp, _ConsumerSender
from ._protocol import ERROR, STOPPED, SequenceSender, await_value, check_sequence

__all__ = ["into_channel"]

_new = object.__new__
_get_ident = threading.get_ident
_WouldBlock = trio.WouldBlock


async def _send(ch: Any, v: Any) -> None:
    await ch.send(v)


class _IntoChannelOp(ConsumerOp):
    __slots__ = ("_ch", "_close", "_nowait", "_thread", "_token")
    _ch: Any
    _close: Any
    _nowait: Any
    _thread: Any
    _token: Any
    _name = "into_channel"

    def _setup(self, ch: Any, close: bool) -> None:
        self._ch = ch
        self._close = close
        self._nowait = getattr(ch, "send_nowait", None)
        if trio.lowlevel.in_trio_run():
            self._thread = _get_ident()
            self._token: Any = trio.lowlevel.current_trio_token()
        else:
            self._thread = None
            self._token = None

    def set_next(self, item: Any) -> Any:
        n = _new(_ChanNext)
        n._owner = self
        n._item = item
        n._rcvr = None
        n._phase = 0
        return n

    def _finish(self, kind: int, data: Any) -> None:
        if self._close:
            close = getattr(self._ch, "close", None)
            if close is not None:
                if self._token is not None and _get_ident() != self._thread:
                    self._token.run_sync_soon(close)
                else:
                    close()
        ConsumerOp._finish(self, kind, data)


class _ChanNext:
    __slots__ = ("_item", "_owner", "_phase", "_rcvr")
    _item: Any
    _owner: Any
    _phase: Any
    _rcvr: Any
    sender_concept = True

    def connect(self, rcvr: Any) -> Any:
        if self._rcvr is not None:
            n = _new(_ChanNext)
            n._owner = self._owner
            n._item = self._item
            n._rcvr = None
            n._phase = 0
            return n.connect(rcvr)
        self._rcvr = rcvr
        return self

    def get_env(self) -> Any:
        return self._owner._env

    def start(self) -> None:
        item = self._item
        self._item = None
        connect(item, self).start()

    def set_value(self, *vals: Any) -> None:
        if self._phase:
            self._rcvr.set_value()
            return
        owner = self._owner
        v = await_value(vals)
        nowait = owner._nowait
        if nowait is not None and owner._thread == _get_ident():
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
        self._phase = 1
        connect(_send(owner._ch, v), self).start()

    def set_error(self, err: Any) -> None:
        self._owner._fail(ERROR, err)
        self._rcvr.set_stopped()

    def set_stopped(self) -> None:
        self._owner._fail(STOPPED, None)
        self._rcvr.set_stopped()


def into_channel(
    seq: SequenceSender[Any], send_channel: trio.abc.SendChannel[Any], close: bool = True
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
