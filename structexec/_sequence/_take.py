"""``take(n)`` and ``take_until(trigger)`` (libunifex ``take_until``; private module)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, TypeVar

from .._core._adaptor_util import check_sender
from .._core._connect import connect_unchecked as connect
from .._core._env import get_env
from .._core._protocol import twice_started
from ._iterate import EmptyOp
from ._protocol import (
    ERROR,
    STOPPED,
    VALUE,
    SeqClosure,
    SeqEnd,
    SequenceSender,
    add_error_note,
    chained_stop,
    check_sequence,
    just_stopped,
    pipe_signature,
)
from ._transform_each import _MapRcvr

if TYPE_CHECKING:
    from .._core._stop_token import inplace_stop_source
    from ._protocol import OpState, Rcvr, SeqRcvr, StopToken

__all__ = ["take", "take_until"]

T = TypeVar("T")
_new = object.__new__


class _ThenNoMore:
    """The next sender of the last item ``take`` lets through: the downstream next sender,
    then ``set_stopped()`` (no more items) instead of ``set_value()``."""

    __slots__ = ("_ns", "_rcvr")
    _ns: object
    _rcvr: Rcvr  # None until connected
    sender_concept = True

    def __init__(self, ns: object) -> None:
        self._ns = ns
        self._rcvr = None  # type: ignore[assignment]

    def connect(self, rcvr: Rcvr) -> _ThenNoMore:
        op = _ThenNoMore(self._ns)
        op._rcvr = rcvr
        return op

    def start(self) -> None:
        ns = self._ns
        self._ns = None  # the next sender's operation refers to this one: no cycle
        connect(ns, self).start()

    def get_env(self) -> object:
        return get_env(self._rcvr)

    def set_value(self, *vals: object) -> None:
        self._rcvr.set_stopped()

    def set_error(self, err: object) -> None:
        self._rcvr.set_error(err)

    def set_stopped(self) -> None:
        self._rcvr.set_stopped()


class _TakeRcvr(_MapRcvr[int]):
    """``_f`` is ``n``."""

    __slots__ = ("_count", "_lock")
    _count: int
    _lock: threading.Lock

    def set_next(self, item: object) -> object:
        with self._lock:
            self._count += 1
            k = self._count
        n = self._f
        if k > n:
            return just_stopped()
        ns = self._rcvr.set_next(item)
        return _ThenNoMore(ns) if k == n else ns


class _TakeSequence(SequenceSender[T]):
    __slots__ = ("_n", "_up")
    _n: int
    _up: object

    def __init__(self, up: object, n: int) -> None:
        self._up = up
        self._n = n

    def connect(self, rcvr: SeqRcvr) -> OpState:
        if self._n == 0:
            return EmptyOp(rcvr)  # the upstream is never connected: nothing runs
        r = _TakeRcvr(rcvr, self._n)
        r._count = 0
        r._lock = threading.Lock()
        op: OpState = connect(self._up, r)
        return op

    def __repr__(self) -> str:
        return f"take({self._up!r}, {self._n})"


def take(*args: object) -> Any:
    """``seq | take(n)``: the first ``n`` items of ``seq``, then the end.

    After the ``n``-th item was delivered, its next sender completes ``set_stopped()`` so the
    producer starts no further item and the sequence completes ``set_value()`` (a generator
    behind ``iterate`` is closed; a channel behind ``from_channel`` is not read again).
    ``take(0)`` never starts the upstream sequence.

    Raises at once: ``TypeError`` if ``n`` is not an int, ``ValueError`` if ``n < 0``.
    Also ``take(seq, n)``.

    >>> import structexec as sx
    >>> sx.sync_wait(sx.to_list(sx.iterate(range(100)) | sx.take(3)))
    ([0, 1, 2],)
    """
    if len(args) not in (1, 2):
        raise TypeError(f"take() takes (n) or (seq, n), got {len(args)} arguments")
    n = args[-1]
    if type(n) is bool or not isinstance(n, int):
        raise TypeError(f"take(): n must be an int >= 0, got {type(n).__name__}")
    if n < 0:
        raise ValueError(f"take(): n must be >= 0, got {n}")
    if len(args) == 2:
        check_sequence("take()", "seq", args[0])
        return _TakeSequence(args[0], n)
    return SeqClosure(lambda s: _TakeSequence(s, n))


class _TakeUntilOp(SeqEnd):
    __slots__ = (
        "__weakref__",
        "_env",
        "_err",
        "_fired",
        "_left",
        "_lock",
        "_rcvr",
        "_rt",
        "_src",
        "_started",
        "_trig_op",
        "_up_kind",
        "_up_op",
    )
    _env: object
    _err: object
    _fired: bool
    _left: int
    _lock: threading.Lock
    _rcvr: SeqRcvr
    _rt: StopToken
    _src: inplace_stop_source
    _started: bool
    _trig_op: OpState | None
    _up_kind: int
    _up_op: OpState | None

    def start(self) -> None:
        if self._started:
            raise twice_started(self)
        self._started = True
        self._trig_op.start()  # type: ignore[union-attr]  # set by connect
        self._up_op.start()  # type: ignore[union-attr]

    def get_env(self) -> object:
        return self._env

    def set_next(self, item: object) -> object:
        return self._rcvr.set_next(item)

    def _seq_end(self, kind: int, data: object) -> None:
        self._up_kind = kind
        if kind == ERROR:
            self._record(data)
        self._src.request_stop()  # stop the trigger
        self._one_done()

    def _record(self, err: object) -> None:
        with self._lock:
            if self._err is None:
                self._err = err
                return
        add_error_note(self._err, err, "take_until")

    def _trigger_done(self, kind: int, data: object) -> None:
        if kind == VALUE:
            self._fired = True
        elif kind == ERROR:
            self._record(data)
        if kind != STOPPED:
            self._src.request_stop()  # stop the sequence
        self._one_done()

    def _one_done(self) -> None:
        with self._lock:
            self._left -= 1
            if self._left:
                return
        self._up_op = self._trig_op = None
        rcvr = self._rcvr
        err = self._err
        self._err = None  # the error's traceback refers to this operation: no cycle
        if err is not None:
            rcvr.set_error(err)
        elif self._rt.stop_requested() or (self._up_kind == STOPPED and not self._fired):
            rcvr.set_stopped()
        else:
            rcvr.set_value()


class _TriggerRcvr(SeqEnd):
    __slots__ = ("_op",)
    _op: _TakeUntilOp

    def __init__(self, op: _TakeUntilOp) -> None:
        self._op = op

    def get_env(self) -> object:
        return self._op._env

    def _seq_end(self, kind: int, data: object) -> None:
        self._op._trigger_done(kind, data)


class _TakeUntilSequence(SequenceSender[T]):
    __slots__ = ("_trigger", "_up")
    _trigger: object
    _up: object

    def __init__(self, up: object, trigger: object) -> None:
        self._up = up
        self._trigger = trigger

    def connect(self, rcvr: SeqRcvr) -> _TakeUntilOp:
        op = _new(_TakeUntilOp)
        op._rcvr = rcvr
        op._rt, op._src, _, op._env = chained_stop(rcvr)
        op._lock = threading.Lock()
        op._err = None
        op._fired = False
        op._left = 2
        op._up_kind = VALUE
        op._started = False
        op._trig_op = connect(self._trigger, _TriggerRcvr(op))
        op._up_op = connect(self._up, op)
        return op

    def __repr__(self) -> str:
        return f"take_until({self._up!r}, {self._trigger!r})"


def take_until(*args: object) -> Any:
    """``seq | take_until(trigger)``: the items of ``seq`` until the sender ``trigger``
    completes with a value; then the producer is stopped (a pending ``receive`` on a channel
    is cancelled, a generator closed) and the sequence completes ``set_value()``.

    ``trigger`` is started with the sequence and sees a stop request when the sequence ends
    first; the sequence completes only after both completed. An error of the trigger ends the
    sequence with that error; a trigger that completes stopped ends it as stopped only if the
    stop came from the consumer. Items already started when the trigger fires run to the
    end and are delivered.

    Raises ``TypeError`` at once if ``trigger`` is not a sender. Also
    ``take_until(seq, trigger)``.
    """
    if len(args) not in (1, 2):
        raise TypeError(
            f"take_until() takes (trigger) or (seq, trigger), got {len(args)} arguments"
        )
    trigger = args[-1]
    check_sender("take_until", "trigger", trigger)
    if len(args) == 2:
        check_sequence("take_until()", "seq", args[0])
        return _TakeUntilSequence(args[0], trigger)
    return SeqClosure(lambda s: _TakeUntilSequence(s, trigger))


pipe_signature(take, 'n')


pipe_signature(take_until, 'trigger')
