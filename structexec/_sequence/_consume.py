"""The consumers ``ignore_all_values``, ``to_list``, ``reduce`` (stdexec
``exec::ignore_all_values``): a sequence in, a plain sender out.

A consumer owns a stop source, joined with its receiver's stop token; the sequence and every
item see the joined token. The consumer starts each item inside the item's next sender. The
first error of an item (or of the consumer's own function) is recorded and stops the producer
and every item in flight; the consumer completes with it only when the sequence completed
(which happens after every next sender completed, so nothing outlives the operation). Later
errors become notes on the first. An item that completes stopped stops the whole sequence,
as a stopped child stops ``when_all`` ([exec.when.all]).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, ClassVar, TypeVar

from .._core._connect import connect_unchecked as connect
from .._core._protocol import Sender
from ._protocol import (
    ERROR,
    STOPPED,
    FailStops,
    ItemOwner,
    ItemRcvrNext,
    add_error_note,
    chained_stop,
    check_callable,
    item_set_next,
)
from ._protocol import check_sequence as _check_sequence

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._core._stop_token import inplace_stop_source
    from ._protocol import ItemNext, OpState, Rcvr, SequenceSender

__all__ = ["ConsumerOp", "ignore_all_values", "reduce", "to_list"]

T = TypeVar("T")
A = TypeVar("A")
_new = object.__new__


class ConsumerOp(ItemOwner, FailStops):
    """The operation of a consumer; also the receiver of the sequence (private base).

    Subclasses implement ``_take(vals)`` (one item's value; an ``Exception`` it raises is an
    error of the consumer) and ``_result()`` (the datums of ``set_value`` at the end).
    """

    __slots__ = (
        "__weakref__",
        "_env",
        "_err",
        "_lock",
        "_op",
        "_rcvr",
        "_src",
        "_started",
        "_stopped",
    )
    _env: object
    _err: object
    _lock: threading.Lock
    _op: OpState | None
    _rcvr: Rcvr
    _src: inplace_stop_source
    _started: bool
    _stopped: bool
    _name = "consumer"
    set_next: ClassVar[Callable[[ConsumerOp, object], ItemNext[ConsumerOp]]]
    #: ``_setup(*args)``: the consumer's own arguments (``reduce``: ``f, init``).
    _setup: Callable[..., None]

    def _init(self, seq: object, rcvr: Rcvr) -> None:
        self._rcvr = rcvr
        _, self._src, _, self._env = chained_stop(rcvr)
        self._err = None
        self._stopped = False
        self._lock = threading.Lock()
        self._started = False
        self._op = connect(seq, self)

    def _take(self, vals: tuple[object, ...]) -> None:
        pass

    def _result(self) -> tuple[object, ...]:
        return ()

    # -- completion of the sequence ---------------------------------------------------------

    def _seq_end(self, kind: int, data: object) -> None:
        self._op = None
        rcvr = self._rcvr
        err = self._err
        self._err = None  # the error's traceback refers to this operation: no cycle
        if err is not None:
            if kind == ERROR:
                add_error_note(err, data, self._name)
            rcvr.set_error(err)
            return
        if kind == ERROR:
            rcvr.set_error(data)
            return
        if kind == STOPPED or self._stopped:
            rcvr.set_stopped()
            return
        try:
            res = self._result()
        except Exception as e:
            rcvr.set_error(e)
            return
        rcvr.set_value(*res)


class _ConsumeNext(ItemRcvrNext[ConsumerOp]):
    """The next sender of one item; connected once, it is its own operation state and the
    receiver of the item (one object per item)."""

    __slots__ = ()
    start = ItemRcvrNext._run_item

    def set_value(self, *vals: object) -> None:
        owner = self._owner
        try:
            owner._take(vals)
        except Exception as e:
            owner._fail(ERROR, e)
            self._rcvr.set_stopped()
            return
        self._rcvr.set_value()

    def set_error(self, err: object) -> None:
        self._owner._fail(ERROR, err)
        self._rcvr.set_stopped()

    def set_stopped(self) -> None:
        self._owner._fail(STOPPED, None)
        self._rcvr.set_stopped()


ConsumerOp.set_next = item_set_next(_ConsumeNext)


class _ConsumerSender(Sender[T]):
    __slots__ = ("_args", "_op_cls", "_seq")
    _args: tuple[object, ...]
    _op_cls: type[ConsumerOp]
    _seq: SequenceSender[object]

    def __init__(
        self, op_cls: type[ConsumerOp], seq: SequenceSender[object], args: tuple[object, ...]
    ) -> None:
        self._op_cls = op_cls
        self._seq = seq
        self._args = args

    def connect(self, rcvr: Rcvr) -> ConsumerOp:
        op = _new(self._op_cls)
        op._setup(*self._args)
        op._init(self._seq, rcvr)
        return op

    def __repr__(self) -> str:
        return f"{self._op_cls._name}({self._seq!r})"


class _IgnoreOp(ConsumerOp):
    __slots__ = ()
    _name = "ignore_all_values"

    def _setup(self) -> None:
        pass


class _ToListOp(ConsumerOp):
    __slots__ = ("_list",)
    _list: list[object]
    _name = "to_list"

    def _setup(self) -> None:
        self._list = []

    def _take(self, vals: tuple[object, ...]) -> None:
        n = len(vals)
        self._list.append(vals[0] if n == 1 else (None if n == 0 else vals))

    def _result(self) -> tuple[object, ...]:
        return (self._list,)


class _ReduceOp(ConsumerOp):
    __slots__ = ("_acc", "_f", "_flock")
    _acc: object
    _f: Callable[[object, object], object]
    _flock: threading.Lock
    _name = "reduce"

    def _setup(self, f: Callable[[object, object], object], init: object) -> None:
        self._f = f
        self._acc = init
        self._flock = threading.Lock()

    def _take(self, vals: tuple[object, ...]) -> None:
        n = len(vals)
        v = vals[0] if n == 1 else (None if n == 0 else vals)
        with self._flock:  # items may complete on several threads at once
            self._acc = self._f(self._acc, v)

    def _result(self) -> tuple[object, ...]:
        return (self._acc,)


def ignore_all_values(seq: SequenceSender[object]) -> Sender[None]:
    """Run a sequence for its effects: start every item, drop the values; a plain sender
    completing ``set_value()`` (stdexec's ``exec::ignore_all_values``).

    Items are started one after another as the sequence offers them (concurrency comes from the
    adaptors, such as ``let_each(f, max_concurrency=n)``).

    Errors: the first error of an item stops the producer and every item in flight (through
    the stop token that the sequence and its items see); the sender completes with that error
    once the sequence completed. Later errors are attached to it as notes. An error of the
    sequence itself is delivered the same way.

    Cancellation: a stop request on the receiver's token stops the producer and the items in
    flight; the sender then completes ``set_stopped()`` once the sequence completed. An item
    that completes stopped stops the whole sequence (as a stopped child stops ``when_all``,
    [exec.when.all]).

    Raises ``TypeError`` at once if ``seq`` is not a sequence sender.
    """
    _check_sequence("ignore_all_values()", "seq", seq)
    return _ConsumerSender(_IgnoreOp, seq, ())


def to_list(seq: SequenceSender[T]) -> Sender[list[T]]:
    """Collect a sequence into a list: a plain sender completing ``set_value(list)``.

    Each element is what ``await`` of the item would give ([exec.as.awaitable] and the values
    convention): ``None`` for no datum, the datum, or a tuple of several. Elements are in the
    order in which items completed (the order of the sequence unless an adaptor ran items
    concurrently without ``ordered=True``). Errors and stops as for
    :func:`ignore_all_values`. Memory grows with the number of items (use :func:`reduce` or
    :func:`into_channel` for endless sequences).

    >>> import structexec as sx
    >>> sx.sync_wait(sx.to_list(sx.iterate([1, 2]) | sx.then_each(str)))
    (['1', '2'],)
    """
    _check_sequence("to_list()", "seq", seq)
    return _ConsumerSender(_ToListOp, seq, ())


def reduce(seq: SequenceSender[T], f: Callable[[A, T], A], init: A) -> Sender[A]:
    """Fold a sequence: ``acc = f(acc, v)`` for every item's value ``v`` (as ``await`` would
    give it), starting from ``init``; completes ``set_value(acc)``.

    ``f`` runs where the item completed, one call at a time (a lock serialises calls when items
    complete on several threads). An ``Exception`` raised by ``f`` is an error of the sequence:
    it stops the producer and every item in flight, and the sender completes with it; a
    ``BaseException`` (``KeyboardInterrupt``) propagates from where ``f`` was called. Errors
    and stops otherwise as for :func:`ignore_all_values`.

    Raises ``TypeError`` at once if ``seq`` is not a sequence sender or ``f`` not callable.

    >>> import structexec as sx
    >>> sx.sync_wait(sx.reduce(sx.iterate(range(5)), lambda a, v: a + v, 0))
    (10,)
    """
    _check_sequence("reduce()", "seq", seq)
    check_callable("reduce", "f", f)
    return _ConsumerSender(_ReduceOp, seq, (f, init))
