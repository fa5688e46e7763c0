"""``iterate``, ``empty_sequence`` (stdexec ``exec::iterate``, ``exec::empty_sequence``).

The producer is a loop, not a recursion: when the next sender of an item completes inside its
own ``start`` (items that complete synchronously, as under ``sync_wait``), the loop goes on in
the same frame, so a million items need neither a million stack frames nor a trio task each.
When it completes later (on any thread), the loop resumes on that thread. A lock guards the
hand-off between the two, so a completion racing with the end of ``start`` is never lost.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, TypeVar

from .._core._connect import connect_unchecked as connect
from .._core._env import get_env
from .._core._protocol import twice_started
from .._core._queries import get_stop_token, query_or
from .._core._stop_token import never_stop_token
from ._protocol import ERROR, STOPPED, VALUE, SequenceSender, just_vals

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from ._protocol import Rcvr, SeqRcvr, StopToken

__all__ = ["empty_sequence", "iterate"]

T = TypeVar("T")
_NEVER = never_stop_token()
_END = object()
_new = object.__new__


class Pump:
    """The producer loop shared by the synchronous sources (private base).

    Subclasses implement ``_pull()`` (the next item sender, or ``_END``; an ``Exception`` ends
    the sequence with it) and may override ``_close()`` (run when the sequence ends before the
    source is exhausted). The operation is also the receiver of every next sender. A next
    sender whose ``connect`` or ``start`` raises an ``Exception`` ends the sequence with it.
    """

    __slots__ = ("_env", "_inline", "_lock", "_rcvr", "_ready", "_started", "_tok")
    _env: object
    _inline: bool
    _lock: threading.Lock
    _rcvr: SeqRcvr
    _ready: tuple[int, object] | None
    _started: bool
    _tok: StopToken  # None until started

    def _init(self, rcvr: SeqRcvr) -> None:
        self._rcvr = rcvr
        self._env = get_env(rcvr)
        self._tok = None  # type: ignore[assignment]
        self._lock = threading.Lock()
        self._inline = False
        self._ready = None
        self._started = False

    def _pull(self) -> object:  # pragma: no cover - overridden
        return _END

    def _close(self) -> None:
        pass

    def get_env(self) -> object:
        return self._env

    def start(self) -> None:
        if self._started:
            raise twice_started(self)
        self._started = True
        self._tok = query_or(self._env, get_stop_token, _NEVER)
        self._loop()

    def _loop(self) -> None:
        rcvr = self._rcvr
        tok = self._tok
        lock = self._lock
        while True:
            if tok.stop_requested():
                self._end(STOPPED, None, early=True)
                return
            try:
                item = self._pull()
            except Exception as e:
                self._end(ERROR, e, early=False)
                return
            if item is _END:
                self._end(VALUE, None, early=False)
                return
            ns = rcvr.set_next(item)
            self._inline = True
            self._ready = None
            try:
                connect(ns, self).start()
            except Exception as e:
                self._start_failed(e)
                return
            with lock:
                r = self._ready
                self._inline = False
            if r is None:
                return  # the next sender completes later and resumes the loop
            kind, data = r  # type: ignore[unreachable]  # set by set_value during start
            if kind != VALUE:
                self._next_ended(kind, data)
                return

    def _start_failed(self, exc: Exception) -> None:
        """Connecting or starting a next sender raised ``exc``, maybe inside the previous
        next sender's completion on another thread: the sequence ends with ``set_error(exc)``
        (the next sender never started) instead of the exception escaping that completion.
        If the next sender did complete first (``_ready`` is set), ``exc`` propagates: never
        a second completion."""
        with self._lock:
            r = self._ready
            self._inline = False
        if r is not None:
            raise exc
        self._end(ERROR, exc, early=True)

    def _next_ended(self, kind: int, data: object) -> None:
        if kind == ERROR:
            self._end(ERROR, data, early=True)
        elif self._tok.stop_requested():
            self._end(STOPPED, None, early=True)
        else:  # the consumer wants no more items: the sequence ends normally
            self._end(VALUE, None, early=True)

    def _end(self, kind: int, data: object, *, early: bool) -> None:
        if early:
            try:
                self._close()
            except Exception as e:
                if kind != ERROR:
                    kind, data = ERROR, e
        rcvr = self._rcvr
        if kind == VALUE:
            rcvr.set_value()
        elif kind == ERROR:
            rcvr.set_error(data)
        else:
            rcvr.set_stopped()

    # -- the receiver of the next senders --------------------------------------------------

    def _done(self, kind: int, data: object) -> None:
        with self._lock:
            if self._inline:
                self._ready = (kind, data)
                return
        if kind == VALUE:
            self._loop()
        else:
            self._next_ended(kind, data)

    def set_value(self, *vals: object) -> None:
        with self._lock:
            if self._inline:
                self._ready = (VALUE, None)
                return
        self._loop()

    def set_error(self, err: object) -> None:
        self._done(ERROR, err)

    def set_stopped(self) -> None:
        self._done(STOPPED, None)


class _IterateOp(Pump):
    __slots__ = ("_it", "_src")
    _it: Iterator[object] | None
    _src: Iterable[object]

    def _pull(self) -> object:
        it = self._it
        if it is None:
            it = self._it = iter(self._src)
        for x in it:
            s = _new(_JustSenderFast)
            s._vals = (x,)
            return s
        self._it = None
        return _END

    def _close(self) -> None:
        it = self._it
        self._it = None
        close = getattr(it, "close", None)
        if close is not None:
            close()


_JustSenderFast = type(just_vals(()))


class _IterateSender(SequenceSender[T]):
    __slots__ = ("_src",)
    _src: Iterable[T]

    def __init__(self, src: Iterable[T]) -> None:
        self._src = src

    def connect(self, rcvr: SeqRcvr) -> _IterateOp:
        op = _new(_IterateOp)
        op._init(rcvr)
        op._src = self._src
        op._it = None
        return op

    def __repr__(self) -> str:
        return f"iterate({self._src!r})"


def iterate(iterable: Iterable[T]) -> SequenceSender[T]:
    """A sequence of the elements of ``iterable``: item *i* is ``just(x_i)``.

    The model is stdexec's ``exec::iterate``. Elements are pulled one at a time, only when the
    pipeline has room for another item (backpressure: a generator is advanced lazily, never
    ahead of its consumer), so an endless generator is fine. The iterator is created when the
    operation starts, so a list can be iterated by several runs.

    Completion: ``set_value()`` when the iterable is exhausted or the consumer wants no more
    items; ``set_error(e)`` if advancing the iterator raises the ``Exception`` ``e`` (a
    ``BaseException`` propagates from where the iterator was advanced); ``set_stopped()`` when
    a stop was requested on the receiver's stop token, checked before each element.

    A generator (any iterator with ``close()``) is closed when the sequence ends before it is
    exhausted (stop, error, ``take``), so its ``finally`` blocks run at once.

    Raises ``TypeError`` at once if ``iterable`` is not iterable.

    >>> import structexec as sx
    >>> sx.sync_wait(sx.to_list(sx.iterate([1, 2, 3])))
    ([1, 2, 3],)
    """
    if not hasattr(iterable, "__iter__") and not hasattr(iterable, "__getitem__"):
        raise TypeError(
            f"iterate(): iterable must be iterable (a list, range, generator, ...), got "
            f"{type(iterable).__name__}"
        )
    return _IterateSender(iterable)


class EmptyOp:
    """The operation of a sequence with no items: ``set_value()`` as soon as it is started
    (``empty_sequence()``, ``take(0)``)."""

    __slots__ = ("_rcvr", "_started")
    _rcvr: Rcvr
    _started: bool

    def __init__(self, rcvr: Rcvr) -> None:
        self._rcvr = rcvr
        self._started = False

    def start(self) -> None:
        if self._started:
            raise twice_started(self)
        self._started = True
        self._rcvr.set_value()


class _EmptySequence(SequenceSender[Any]):
    __slots__ = ()

    def connect(self, rcvr: Rcvr) -> EmptyOp:
        return EmptyOp(rcvr)

    def __repr__(self) -> str:
        return "empty_sequence()"


def empty_sequence() -> SequenceSender[Any]:
    """A sequence with no items: completes ``set_value()`` as soon as it is started
    (stdexec's ``exec::empty_sequence``).

    >>> import structexec as sx
    >>> sx.sync_wait(sx.to_list(sx.empty_sequence()))
    ([],)
    """
    return _EmptySequence()
