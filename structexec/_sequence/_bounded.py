"""The bounded-concurrency stage behind ``let_each``/``transform_each`` with
``max_concurrency > 1`` and behind ``as_completed`` (private).

The stage starts each item itself, up to ``n`` at a time, and offers each result downstream
as a new item (``just(*values)``). Slots: an item takes a slot when it is started and gives
it back when its result has been *delivered* (the downstream next sender completed), so at
most ``n`` items are started and not yet delivered, and the stage holds at most ``n``
results (memory O(n)). The upstream next sender completes ``set_value()`` only once the item
has a slot: a full stage blocks its producer (backpressure).

Order: results are offered in completion order, or with ``ordered=True`` in input order (a
result waits, holding its slot, for the results before it).

Failures: an item's error is offered downstream as an item that fails (``just_error(e)``),
and the stage requests stop on its own stop source, which the producer and the items in flight
see; the consumer downstream records the error and stops everything. An item that completes
stopped while no stop was requested is offered as a stopped item the same way; one stopped
by a stop request is dropped. Errors are always offered (the consumer keeps the first and
attaches later ones as notes). When the downstream next sender completes
``set_stopped()`` (the consumer wants no more, as after ``take(n)``), the stage stops its
producer and its items and completes ``set_value()``. The stage completes only after the
producer completed and every item it started completed and was delivered or dropped.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import TYPE_CHECKING, ClassVar, TypeVar

import trio

from .._core._adaptor_util import is_async_fn
from .._core._connect import connect_unchecked as connect
from .._core._protocol import twice_started
from .._core._snapshot import ItemRecord, StageRecord, snapshot_roots
from ._protocol import (
    ERROR,
    STOPPED,
    VALUE,
    ItemNext,
    ItemOwner,
    SequenceSender,
    chained_stop,
    item_set_next,
    just_err,
    just_stopped,
    just_vals,
)
from ._trio_pool import TrioPool

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._core._stop_token import inplace_stop_source
    from ._protocol import OpState, SeqRcvr, StopToken

__all__ = ["BoundedSequence"]

T = TypeVar("T")

_new = object.__new__
#: A result that is dropped (its item completed after a stop): skipped by the ordered drain.
_SKIP = 3


class _BoundedOp(ItemOwner):
    __slots__ = (
        "__weakref__",
        "_active",
        "_delivered_n",
        "_delivering",
        "_env",
        "_lock",
        "_make",
        "_max",
        "_name",
        "_next_idx",
        "_next_out",
        "_no_more",
        "_op",
        "_ordered",
        "_peak",
        "_pool",
        "_rcvr",
        "_ready",
        "_rt",
        "_src",
        "_started",
        "_tok",
        "_up_done",
        "_waiters",
    )
    _active: int
    _delivered_n: int
    _delivering: bool
    _env: object
    _lock: threading.Lock
    _make: Callable[[object], object]
    _max: int
    _name: str
    _next_idx: int
    _next_out: int
    _no_more: bool
    _op: OpState | None
    _ordered: bool
    _peak: int
    _pool: TrioPool | None
    _rcvr: SeqRcvr
    _ready: dict[int, _Work]
    _rt: StopToken
    _src: inplace_stop_source
    _started: bool
    _tok: StopToken
    _up_done: tuple[int, object] | None
    _waiters: deque[_SlotNext]
    set_next: ClassVar[Callable[[_BoundedOp, object], ItemNext[_BoundedOp]]]

    def start(self) -> None:
        if self._started:
            raise twice_started(self)
        self._started = True
        pool = self._pool
        if pool is not None:
            pool.open(self._tok)
        self._op.start()  # type: ignore[union-attr]  # set by connect

    # -- upstream: items offered to the stage ---------------------------------------------

    def _seq_end(self, kind: int, data: object) -> None:
        with self._lock:
            self._up_done = (kind, data)
            done = self._active == 0
        if done:
            self._finish()

    def _finish(self) -> None:
        self._op = None
        pool = self._pool
        if pool is not None:
            self._pool = None
            pool.close()
        kind, data = self._up_done  # type: ignore[misc]  # set before _finish runs
        self._up_done = (kind, None)  # an error's traceback refers to this operation
        rcvr = self._rcvr
        if kind == ERROR:
            rcvr.set_error(data)
        elif self._rt.stop_requested():
            rcvr.set_stopped()
        elif kind == STOPPED and self._src.stop_requested():
            # Our own stop: the consumer wants no more, or a failure was offered downstream.
            rcvr.set_value()
        elif kind == STOPPED:
            rcvr.set_stopped()
        else:
            rcvr.set_value()

    # -- slots ------------------------------------------------------------------------------

    def _release(self, delivered: bool = False) -> None:
        w = None
        refuse = None
        idx = 0
        with self._lock:
            self._active -= 1
            if delivered:
                self._delivered_n += 1
            waiters = self._waiters
            if waiters:
                if self._tok.stop_requested():
                    refuse = list(waiters)
                    waiters.clear()
                else:
                    w = waiters.popleft()
                    self._active += 1
                    idx = self._next_idx
                    self._next_idx = idx + 1
            done = self._up_done is not None and self._active == 0
        if refuse is not None:
            for r in refuse:
                r._rcvr.set_stopped()
        elif w is not None:
            w._go(idx)
        elif done:
            self._finish()

    def _item_done(self, work: _Work, kind: int, data: object) -> None:
        """An item completed: deliver its result (or drop it), in the right order."""
        if kind == STOPPED and self._tok.stop_requested():
            kind = _SKIP  # stopped by a stop request: dropped
        elif kind != VALUE:
            # Offered downstream (an error after the first becomes a note there).
            self._src.request_stop()
        work._kind = kind
        work._data = data
        if not self._ordered:
            if kind == _SKIP:
                self._release()
            else:
                work._deliver()
            return
        with self._lock:
            self._ready[work._idx] = work
            if self._delivering:
                return
            self._delivering = True
        self._drain()

    def _drain(self) -> None:
        """Deliver ready results in input order, one at a time (``ordered=True``)."""
        lock = self._lock
        ready = self._ready
        while True:
            with lock:
                w = ready.pop(self._next_out, None)
                if w is None:
                    self._delivering = False
                    return
                self._next_out += 1
            if w._kind == _SKIP:
                self._release()
                continue
            if not w._deliver_ordered():
                return  # completes later; its completion resumes the drain

    def _delivered(self, kind: int) -> None:
        if kind != VALUE and not self._rt.stop_requested():
            # The consumer wants no more items (set_stopped) or ended the sequence (set_error:
            # it is recorded downstream): stop the producer and the items in flight.
            self._no_more = True
            self._src.request_stop()
        self._release(True)

    def _sx_describe(self) -> StageRecord | None:
        """The stage while it runs (started, not yet completed), for ``operation_tree()``
        (``_contracts.Describable``); ``None`` otherwise, and while another thread is still in
        ``connect``. In flight: items started and not yet delivered (or dropped); delivered:
        items whose delivery downstream completed. Never raises, takes no lock (the counts are
        read as they are)."""
        try:
            if not self._started or self._op is None:
                return None
            n = self._max
            return StageRecord(
                self._name,
                None if n >= 1 << 62 else n,
                self._active,
                self._delivered_n,
                bool(self._tok.stop_requested()),
            )
        except AttributeError:  # being set up by another thread
            return None


class _SlotNext(ItemNext[_BoundedOp]):
    """The next sender given to the producer for one item: completes once the item has a
    slot and was started (one object: sender, operation state)."""

    __slots__ = ()

    def start(self) -> None:
        op = self._owner
        with op._lock:
            if op._tok.stop_requested():
                go = -1
            elif op._active < op._max:
                op._active += 1
                if op._active > op._peak:
                    op._peak = op._active
                go = op._next_idx
                op._next_idx = go + 1
            else:
                # Several may wait: a producer that runs items concurrently (an upstream
                # bounded stage) offers its results concurrently.
                op._waiters.append(self)
                return
        if go < 0:
            self._rcvr.set_stopped()
        else:
            self._go(go)

    def _go(self, idx: int) -> None:
        op = self._owner
        item = self._item
        self._item = None
        w = _new(_Work)
        w._owner = op
        w._idx = idx
        w._kind = -1
        w._data = None
        w._inline = False
        w._pending = False
        pool = op._pool
        if pool is not None:
            pool.submit(w, item)
            self._rcvr.set_value()
            return
        try:
            s = op._make(item)
        except Exception as e:
            s = just_err(e)
        connect(s, w).start()
        self._rcvr.set_value()


_BoundedOp.set_next = item_set_next(_SlotNext)


class _Work:
    """One item in flight: the receiver of the item, then of its delivery downstream."""

    __slots__ = ("_data", "_idx", "_inline", "_kind", "_owner", "_pending")
    _data: object  # the item's values (a tuple) or error, until delivered
    _idx: int
    _inline: bool
    _kind: int
    _owner: _BoundedOp
    _pending: bool

    def get_env(self) -> object:
        return self._owner._env

    def set_value(self, *vals: object) -> None:
        if self._kind < 0:
            self._owner._item_done(self, VALUE, vals)
        else:
            self._after_delivery(VALUE)

    def set_error(self, err: object) -> None:
        if self._kind < 0:
            self._owner._item_done(self, ERROR, err)
        else:
            self._after_delivery(ERROR)

    def set_stopped(self) -> None:
        if self._kind < 0:
            self._owner._item_done(self, STOPPED, None)
        else:
            self._after_delivery(STOPPED)

    def _item_sender(self) -> object:
        kind = self._kind
        data = self._data
        self._data = None
        if kind == VALUE:
            return just_vals(data)  # type: ignore[arg-type]  # a tuple for VALUE
        if kind == ERROR:
            return just_err(data)
        return just_stopped()

    def _deliver(self) -> None:
        op = self._owner
        ns = op._rcvr.set_next(self._item_sender())
        connect(ns, self).start()

    def _deliver_ordered(self) -> bool:
        """Deliver; True if the delivery completed inside ``start``."""
        op = self._owner
        ns = op._rcvr.set_next(self._item_sender())
        self._inline = True
        self._pending = False  # set when the delivery completes inside start
        connect(ns, self).start()
        with op._lock:
            self._inline = False
            done: bool = self._pending
        return done

    def _after_delivery(self, kind: int) -> None:
        op = self._owner
        if not op._ordered:
            op._delivered(kind)
            return
        with op._lock:
            inline = self._inline
            if inline:
                # Completed inside start: _deliver_ordered returns True, the drain goes on.
                self._pending = True
        if kind != VALUE and not op._rt.stop_requested():
            op._no_more = True
            op._src.request_stop()
        op._release(True)
        if not inline:
            op._drain()

    def _sx_describe(self) -> ItemRecord | None:
        """The item while it runs (started, not yet completed), for ``operation_tree()``
        (``_contracts.Describable``); ``None`` otherwise, and while another thread is still
        setting it up. Never raises, takes no lock."""
        try:
            if self._kind >= 0 or self._data is not None:
                return None
            return ItemRecord(self._owner, self._idx)
        except AttributeError:  # being set up by another thread
            return None


class BoundedSequence(SequenceSender[T]):
    """``upstream`` with each item turned into ``make(item)`` and run ``max`` at a time."""

    __slots__ = ("_make", "_max", "_name", "_ordered", "_up")
    _make: Callable[[object], object]
    _max: int | None
    _name: str
    _ordered: bool
    _up: object

    def __init__(
        self, up: object, make: Callable[[object], object], n: int | None, ordered: bool, name: str
    ) -> None:
        self._up = up
        self._make = make
        self._max = n
        self._ordered = ordered
        self._name = name

    def connect(self, rcvr: SeqRcvr) -> _BoundedOp:
        op = _new(_BoundedOp)
        op._rcvr = rcvr
        op._rt, op._src, op._tok, op._env = chained_stop(rcvr)
        op._lock = threading.Lock()
        op._make = self._make
        op._max = self._max if self._max is not None else 1 << 62
        op._name = self._name
        op._delivered_n = 0
        op._ordered = self._ordered
        op._active = 0
        op._peak = 0
        op._next_idx = 0
        op._next_out = 0
        op._ready = {}
        op._delivering = False
        op._waiters = deque()
        op._up_done = None
        op._no_more = False
        op._started = False
        op._pool = None
        fn = getattr(self._make, "_fn", None)
        if (
            fn is not None
            and type(self._make).__name__ == "_LetItem"
            and is_async_fn(fn)
            and trio.lowlevel.in_trio_run()
        ):
            op._pool = TrioPool(op, fn)
        elif self._name == "as_completed" and trio.lowlevel.in_trio_run():
            op._pool = TrioPool(op, None)
        op._op = connect(self._up, op)
        return op

    def __repr__(self) -> str:
        return f"{self._name}({self._up!r}, max_concurrency={self._max})"


snapshot_roots(_BoundedOp, _Work)  # sx.operation_tree()
