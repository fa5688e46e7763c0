"""``merge(*seqs)`` and ``merge_each(max_concurrency=None)`` (stdexec ``exec::merge``,
``exec::merge_each``; private module).

``merge_each`` consumes a sequence whose items' values are sequence senders and runs up to
``max_concurrency`` of these inner sequences at once, forwarding their items downstream as
they come (interleaved). ``merge(*seqs)`` is ``merge_each`` of ``iterate(seqs)``, unbounded.
An outer slot is held until its inner sequence completed. Each next sender handed to an inner
producer is watched: when the consumer wants no more items, every inner sequence and the
outer one are stopped and the merge completes ``set_value()``. The first error (of an outer
item or an inner sequence) stops everything and is delivered once everything completed;
later ones become notes.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import TYPE_CHECKING, Any, ClassVar

from .._core._connect import connect_unchecked as connect
from .._core._env import get_env
from ._iterate import _IterateSender
from ._protocol import (
    ERROR,
    STOPPED,
    FailStops,
    ItemOwner,
    ItemRcvrNext,
    OneShotNext,
    SeqClosure,
    SequenceSender,
    chained_stop,
    check_max_concurrency,
    check_sequence,
    is_sequence_sender,
    item_set_next,
    pipe_signature,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._core._stop_token import inplace_stop_source
    from ._protocol import ItemNext, OpState, SeqRcvr, StopToken

__all__ = ["merge", "merge_each"]

_new = object.__new__


class _MergeOp(ItemOwner, FailStops):
    __slots__ = (
        "__weakref__",
        "_active",
        "_env",
        "_err",
        "_lock",
        "_max",
        "_no_more",
        "_op",
        "_rcvr",
        "_rt",
        "_src",
        "_started",
        "_stopped",
        "_tok",
        "_up_done",
        "_waiters",
    )
    _active: int
    _env: object
    _err: object
    _lock: threading.Lock
    _max: int
    _no_more: bool
    _op: OpState | None
    _rcvr: SeqRcvr
    _rt: StopToken
    _src: inplace_stop_source
    _started: bool
    _stopped: bool
    _tok: StopToken
    _up_done: int | None
    _waiters: deque[_OuterNext]
    _name = "merge"
    set_next: ClassVar[Callable[[_MergeOp, object], ItemNext[_MergeOp]]]

    def _seq_end(self, kind: int, data: object) -> None:
        if kind == ERROR:
            self._fail(ERROR, data)
        with self._lock:
            self._up_done = kind
            done = self._active == 0
        if done:
            self._finish()

    def _release(self) -> None:
        w = refuse = None
        with self._lock:
            self._active -= 1
            waiters = self._waiters
            if waiters:
                if self._tok.stop_requested():
                    refuse = list(waiters)
                    waiters.clear()
                else:
                    w = waiters.popleft()
                    self._active += 1
            done = self._up_done is not None and self._active == 0
        if refuse is not None:
            for r in refuse:
                r._rcvr.set_stopped()
        elif w is not None:
            w._go()
        elif done:
            self._finish()

    def _finish(self) -> None:
        self._op = None
        rcvr = self._rcvr
        err = self._err
        self._err = None  # the error's traceback refers to this operation: no cycle
        if err is not None:
            rcvr.set_error(err)
        elif (
            self._rt.stop_requested()
            or self._stopped
            or (self._up_done == STOPPED and not self._no_more)
        ):
            rcvr.set_stopped()
        else:
            rcvr.set_value()


class _OuterNext(ItemRcvrNext[_MergeOp]):
    """The next sender of one outer item: waits for a slot, runs the item, starts the inner
    sequence that is its value, then asks for the next outer item."""

    __slots__ = ()

    def start(self) -> None:
        op = self._owner
        with op._lock:
            if op._tok.stop_requested():
                go = False
            elif op._active < op._max:
                op._active += 1
                go = True
            else:
                # Several may wait: an outer sequence that runs items concurrently offers
                # them concurrently.
                op._waiters.append(self)
                return
        if go:
            self._go()
        else:
            self._rcvr.set_stopped()

    _go = ItemRcvrNext._run_item

    def set_value(self, *vals: object) -> None:
        op = self._owner
        if len(vals) != 1 or not is_sequence_sender(vals[0]):
            op._fail(
                ERROR,
                TypeError(
                    "merge_each(): each item of the outer sequence must send one sequence "
                    f"sender, got {vals!r}"
                ),
            )
            op._release()
            self._rcvr.set_stopped()
            return
        inner = _new(_Inner)
        inner._owner = op
        connect(vals[0], inner).start()
        self._rcvr.set_value()

    def set_error(self, err: object) -> None:
        op = self._owner
        op._fail(ERROR, err)
        op._release()
        self._rcvr.set_stopped()

    def set_stopped(self) -> None:
        op = self._owner
        if not op._tok.stop_requested():
            op._fail(STOPPED, None)
        op._release()
        self._rcvr.set_stopped()


_MergeOp.set_next = item_set_next(_OuterNext)


class _Inner:
    """The receiver of one inner sequence: forwards its items downstream (watching each next
    sender) and gives the outer slot back when it completes."""

    __slots__ = ("_owner",)
    _owner: _MergeOp

    def get_env(self) -> object:
        return self._owner._env

    def set_next(self, item: object) -> _Watch:
        op = self._owner
        w = _new(_Watch)
        w._owner = op
        w._ns = op._rcvr.set_next(item)
        w._rcvr = None  # type: ignore[assignment]  # not connected yet
        return w

    def set_value(self, *vals: object) -> None:
        self._owner._release()

    def set_error(self, err: object) -> None:
        op = self._owner
        op._fail(ERROR, err)
        op._release()

    def set_stopped(self) -> None:
        op = self._owner
        if not op._tok.stop_requested():
            op._fail(STOPPED, None)
        op._release()


class _Watch(OneShotNext):
    """A downstream next sender, watched: ``set_stopped()`` without a stop request means the
    consumer wants no more items, so every producer of the merge is stopped."""

    __slots__ = ("_ns", "_owner")
    _ns: object
    _owner: _MergeOp

    def _copy(self) -> _Watch:
        n = _new(_Watch)
        n._owner = self._owner
        n._ns = self._ns
        n._rcvr = None  # type: ignore[assignment]  # not connected yet
        return n

    def get_env(self) -> object:
        return get_env(self._rcvr)

    def start(self) -> None:
        ns = self._ns
        self._ns = None  # the next sender's operation refers to this one: no cycle
        connect(ns, self).start()

    def set_value(self, *vals: object) -> None:
        self._rcvr.set_value()

    def set_error(self, err: object) -> None:
        self._rcvr.set_error(err)

    def set_stopped(self) -> None:
        op = self._owner
        if not op._rt.stop_requested():
            op._no_more = True
            op._src.request_stop()
        self._rcvr.set_stopped()


class _MergeSequence(SequenceSender[Any]):
    __slots__ = ("_max", "_up")
    _max: int | None
    _up: object

    def __init__(self, up: object, n: int | None) -> None:
        self._up = up
        self._max = n

    def connect(self, rcvr: SeqRcvr) -> _MergeOp:
        op = _new(_MergeOp)
        op._rcvr = rcvr
        op._rt, op._src, op._tok, op._env = chained_stop(rcvr)
        op._lock = threading.Lock()
        op._max = self._max if self._max is not None else 1 << 62
        op._active = 0
        op._waiters = deque()
        op._up_done = None
        op._err = None
        op._stopped = False
        op._no_more = False
        op._started = False
        op._op = connect(self._up, op)
        return op

    def __repr__(self) -> str:
        return f"merge_each({self._up!r}, max_concurrency={self._max})"


def merge(*seqs: SequenceSender[Any]) -> SequenceSender[Any]:
    """One sequence of the items of all ``seqs``, interleaved as they come (stdexec's
    ``exec::merge``).

    All the sequences run at once; the merge completes ``set_value()`` when all completed.
    The first error of one of them stops the others and is delivered once all completed
    (later errors become notes); a stop request on the consumer's token stops them all. When
    the consumer wants no more items (``take``), every sequence is stopped and the merge
    completes ``set_value()``. ``merge()`` of nothing is an empty sequence.

    Raises ``TypeError`` at once if an argument is not a sequence sender.

    >>> import structexec as sx
    >>> sorted(sx.sync_wait(sx.to_list(sx.merge(sx.iterate([1, 2]), sx.iterate([3]))))[0])
    [1, 2, 3]
    """
    for i, s in enumerate(seqs):
        check_sequence("merge()", f"seqs[{i}]", s)
    return _MergeSequence(_IterateSender(seqs), None)


def merge_each(*args: object, max_concurrency: int | None = None) -> Any:
    """``outer | merge_each(max_concurrency=None)``: flatten a sequence of sequences (stdexec's
    ``exec::merge_each``): each item of ``outer`` sends a sequence sender, and the items of
    up to ``max_concurrency`` of these inner sequences (all of them for ``None``) are forwarded
    interleaved, as they come. The next outer item is pulled only when a slot is free.

    Errors, stops and early ends as for :func:`merge`; an outer item that does not send
    exactly one sequence sender is an error (``TypeError``).

    Raises at once: ``TypeError`` for a bad ``max_concurrency`` type, ``ValueError`` if it is
    below 1. Also ``merge_each(outer, max_concurrency=...)``.
    """
    check_max_concurrency("merge_each", max_concurrency, allow_none=True)
    if len(args) == 1:
        check_sequence("merge_each()", "seq", args[0])
        return _MergeSequence(args[0], max_concurrency)
    if args:
        raise TypeError(f"merge_each() takes at most one positional argument, got {len(args)}")
    n = max_concurrency
    return SeqClosure(lambda s: _MergeSequence(s, n))


pipe_signature(merge_each)
