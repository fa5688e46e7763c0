"""``filter_each(pred)``: keep the items whose value satisfies ``pred`` (private module)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar, overload

from .._core._connect import connect_unchecked as connect
from .._core._env import get_env
from ._protocol import (
    OneShotNext,
    SeqClosure,
    SequenceSender,
    await_value,
    check_callable,
    check_sequence,
    just_err,
    just_stopped,
    just_vals,
    pipe_signature,
)
from ._transform_each import _MapRcvr

if TYPE_CHECKING:
    from ._protocol import OpState, SeqRcvr

__all__ = ["filter_each"]

T = TypeVar("T")
_new = object.__new__


class _FilterRcvr(_MapRcvr[Callable[[object], object]]):
    """``_f`` is the predicate."""

    __slots__ = ()

    def set_next(self, item: object) -> _FilterNext:
        n = _new(_FilterNext)
        n._item = item
        n._down = self._rcvr
        n._pred = self._f
        n._rcvr = None  # type: ignore[assignment]  # not connected yet
        return n


class _FilterNext(OneShotNext):
    """The next sender of one item: runs the item, asks ``pred``, and offers the item
    downstream (forwarding that next sender's completion) or asks for the next one."""

    __slots__ = ("_down", "_item", "_pred")
    _down: SeqRcvr
    _item: object
    _pred: Callable[[object], object]

    def _copy(self) -> _FilterNext:
        n = _new(_FilterNext)
        n._item = self._item
        n._down = self._down
        n._pred = self._pred
        n._rcvr = None  # type: ignore[assignment]  # not connected yet
        return n

    def get_env(self) -> object:
        return get_env(self._down)

    def start(self) -> None:
        item = self._item
        self._item = None
        connect(item, self).start()

    def _offer(self, s: object) -> None:
        connect(self._down.set_next(s), self._rcvr).start()

    def set_value(self, *vals: object) -> None:
        try:
            keep = self._pred(await_value(vals))
        except Exception as e:
            self._offer(just_err(e))
            return
        if keep:
            self._offer(just_vals(vals))
        else:
            self._rcvr.set_value()

    def set_error(self, err: object) -> None:
        self._offer(just_err(err))

    def set_stopped(self) -> None:
        self._offer(just_stopped())


class _FilterSequence(SequenceSender[T]):
    __slots__ = ("_pred", "_up")
    _pred: Callable[[object], object]
    _up: object

    def __init__(self, up: object, pred: Callable[[object], object]) -> None:
        self._up = up
        self._pred = pred

    def connect(self, rcvr: SeqRcvr) -> OpState:
        op: OpState = connect(self._up, _FilterRcvr(rcvr, self._pred))
        return op

    def __repr__(self) -> str:
        return f"filter_each({self._up!r})"


@overload
def filter_each(pred: Callable[[T], object], /) -> SeqClosure[T, T]: ...
@overload
def filter_each(seq: SequenceSender[T], pred: Callable[[T], object], /) -> SequenceSender[T]: ...
def filter_each(*args: object) -> object:
    """``seq | filter_each(pred)``: keep the items whose value ``v`` (as ``await`` of the item
    would give it) makes ``pred(v)`` true; the others are dropped.

    The filter must know an item's value, so it starts each item itself, when the producer
    offers it, and offers a kept item downstream as ``just(*values)``. Order is kept. An
    ``Exception`` raised by ``pred`` or by the item is offered downstream as a failing item
    (the consumer stops the sequence and completes with it); a ``BaseException`` propagates.

    Raises ``TypeError`` at once if ``pred`` is not callable. Also ``filter_each(seq, pred)``.

    >>> import structexec as sx
    >>> sx.sync_wait(sx.to_list(sx.iterate(range(6)) | sx.filter_each(lambda v: v % 2)))
    ([1, 3, 5],)
    """
    if len(args) == 1:
        pred = check_callable("filter_each", "pred", args[0])
        return SeqClosure(lambda s: _FilterSequence(s, pred))
    if len(args) == 2:
        seq, p = args
        check_sequence("filter_each()", "seq", seq)
        return _FilterSequence(seq, check_callable("filter_each", "pred", p))
    raise TypeError(f"filter_each() takes (pred) or (seq, pred), got {len(args)} arguments")


pipe_signature(filter_each, 'pred')
