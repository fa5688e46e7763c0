"""Timed schedulers: ``now``, ``schedule_after``, ``schedule_at`` (the time guide "Timed
schedulers").

There is no [exec] section for timed schedulers in C++26: this is an extension modelled on
stdexec's ``exec/timed_scheduler.hpp`` and libunifex's ``schedule_after``. A scheduler ``sch``
is *timed* when it has

* ``sch.now() -> float``: seconds on its own clock;
* ``sch.schedule_after(seconds) -> Sender[None]`` and ``sch.schedule_at(deadline) ->
  Sender[None]`` (``deadline`` on ``now()``'s clock): senders that complete ``set_value()`` on
  the scheduler once the time has come. A stop request on a pending timer completes it
  ``set_stopped()`` at once, on the requesting thread, and frees the timer. Completion
  signatures: ``set_value_t()``, ``set_stopped_t()`` (only ``set_value_t()`` when the
  environment's stop token is unstoppable, as for ``schedule``). Attributes:
  ``get_completion_scheduler[set_value_t]`` is ``sch``.

``seconds`` and ``deadline`` are real numbers (``int``, ``float``, ``Fraction``, ``Decimal``, numpy
scalars; not ``bool`` or ``str``: ``TypeError``). Negative or NaN ``seconds`` (NaN ``deadline``),
and a number too large for a float (``10**400``), raise ``ValueError`` when the sender is built; a
deadline in the past completes at once (on the scheduler, never inside ``start``); ``inf``
never fires until stopped.

Internal API for the schedulers (``_run_loop``, ``_trio_bridge``/``_trio_scheduler``,
``_parallel_scheduler``/``_timer_thread``, ``testing._manual``):

* :class:`TimerQueue` -- the deadline-ordered pending timers of one execution context
  (``sortedcontainers.SortedList`` of ``(deadline, seq, op)``: O(log n) insert and removal,
  FIFO among equal deadlines), guarded by one lock;
* :class:`TimerOp` -- the operation; its *owner* (the :class:`TimerOwner` protocol) gives the
  clock, the queue and how to wake the agent that serves it;
* :class:`TimerSender` -- the sender; a subclass names the operation class in ``_op_type``;
* :func:`check_seconds`, :func:`check_deadline` -- argument checks.
"""

from __future__ import annotations

import itertools
import math
import threading
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from sortedcontainers import SortedList

from .._core._args import real_seconds
from .._core._completion_signatures import completion_signatures
from .._core._env import TryEnv, get_env
from .._core._protocol import Sender, is_scheduler, twice_started
from .._core._queries import get_completion_scheduler, get_stop_token
from .._core._snapshot import TimerWait, no_children
from .._core._stop_token import is_unstoppable, stop_callback_for
from .._core._tags import set_stopped_t, set_value_t

__all__ = ["is_timed_scheduler", "now", "schedule_after", "schedule_at"]

_VALUE_Q = get_completion_scheduler[set_value_t]

#: The timed schedulers of the library, for the error message of the free functions.
TIMED_SCHEDULERS = (
    "sx.trio_scheduler(), sx.run_loop().get_scheduler() (also the scheduler inside "
    "sx.sync_wait), sx.get_parallel_scheduler() and structexec.testing.ManualScheduler"
)

if TYPE_CHECKING:
    from collections.abc import Callable

    class TimedScheduler(Protocol):
        """A timed scheduler as ``retry`` and ``timeout`` use it (the time guide): the sender
        ``schedule_after`` returns is only connected."""

        def schedule_after(self, seconds: float) -> object: ...

    from .._core._contracts import Receiver
    from .._core._stop_token import StopCallback


# --------------------------------------------------------------------------- arguments


_EXACT = 2**53  # ints up to this convert to float exactly (and never overflow)


def check_seconds(seconds: Any, fn: str = "schedule_after") -> float:
    """``seconds`` as a float; ``TypeError`` for what is not a real number, ``ValueError``
    (naming ``seconds``) when negative, NaN or too large for a float (``_core._args``)."""
    t = type(seconds)
    if t is float:  # the common cases
        if seconds >= 0.0:
            return seconds  # type: ignore[no-any-return]
    elif t is int and 0 <= seconds <= _EXACT:
        return float(seconds)
    return real_seconds(seconds, fn, "seconds")


def check_deadline(deadline: object, fn: str = "schedule_at") -> float:
    """``deadline`` as a float; ``ValueError`` (naming ``deadline``) when NaN or too large."""
    if type(deadline) is float and deadline == deadline:
        return deadline
    return real_seconds(deadline, fn, "deadline", negative=True)


# --------------------------------------------------------------------------- the queue


class TimerQueue:
    """Pending timers in deadline order, FIFO among equal deadlines.

    ``items`` is a ``SortedList`` of ``(deadline, seq, op)``; ``seq`` is unique, so ``op`` is
    never compared. Every access holds ``lock`` (the owner's lock may be passed in).
    """

    __slots__ = ("_seq", "closed", "items", "lock")

    def __init__(self, lock: Any = None) -> None:
        # A lock or a Condition (the parallel scheduler's timer thread waits on it).
        self.lock: Any = threading.Lock() if lock is None else lock
        self.items: SortedList = SortedList()
        self._seq = itertools.count()
        #: Set by :meth:`close`: no timer will fire any more; one started now completes
        #: ``set_stopped()`` at once.
        self.closed = False

    def earliest(self) -> float:
        """The earliest pending deadline (``inf`` when none); hold ``lock``."""
        items = self.items
        return items[0][0] if items else math.inf

    def pop_due(self, now: float) -> list[TimerOp]:
        """Take out (marked done) the timers whose deadline is ``<= now``, in order; hold
        ``lock``."""
        items = self.items
        if not items or items[0][0] > now or now == math.inf:
            return []
        i = items.bisect_right((now, math.inf))
        due = [key[2] for key in items.islice(0, i)]
        del items[:i]
        for op in due:
            op._state = _DONE
        return due

    def pop_first(self, now: float) -> tuple[float, int, TimerOp] | None:
        """Take out (marked done) the earliest timer if its deadline is ``<= now``, else
        ``None``; hold ``lock``."""
        items = self.items
        if not items or items[0][0] > now or items[0][0] == math.inf:
            return None
        key: tuple[float, int, TimerOp] = items.pop(0)
        key[2]._state = _DONE
        return key

    def clear(self) -> None:
        """Forget every pending timer (its owner has gone); hold ``lock``."""
        for key in self.items:
            key[2]._state = _DONE
        self.items.clear()

    def close(self) -> list[TimerOp]:
        """No timer will fire any more (the owner is ending): take out (marked done) and
        return every pending timer, for the owner to complete with
        :meth:`TimerOp._owner_ended`; a timer started from now on completes stopped at once.
        Hold ``lock``."""
        self.closed = True
        ops = [key[2] for key in self.items]
        self.clear()
        return ops

    def __len__(self) -> int:
        return len(self.items)


class TimerOwner(Protocol):
    """What a :class:`TimerOp` needs from its execution context."""

    @property
    def _timer_queue(self) -> TimerQueue: ...

    def _timer_now(self) -> float:
        """The context's clock (any thread)."""

    def _timer_ready(self, op: TimerOp) -> None:
        """Run ``op._execute()`` on the context's agent soon (the deadline has passed)."""

    def _timer_wake(self, empty: bool) -> None:
        """The earliest deadline changed (``empty``: no timer is left); any thread."""


_INIT, _PENDING, _DONE = 0, 1, 2


def _set_stopped(rcvr: Receiver) -> None:
    rcvr.set_stopped()


#: How a stop request completes a pending timer: ``_schedulers._run_loop`` (a layer above,
#: always imported by the package) replaces it with ``stopped_from_stop_callback``, which
#: hands a ``BaseException`` raised by user code in that completion to the consumer's
#: ``raised_sink`` (docs/time.md "Timed schedulers").
STOPPED_BY_REQUEST: list[Callable[[Receiver], None]] = [_set_stopped]


class TimerOp:
    """The operation of a timer sender.

    ``start``: stopped already → ``set_stopped()`` at once. Else the deadline (``now() +
    seconds`` for ``schedule_after``, taken at ``start``) has passed → ``owner._timer_ready``
    (the agent calls ``_execute`` soon, like ``schedule``). Else a stop callback is registered
    and the operation goes into the owner's queue; when the deadline comes the owner takes it
    out (``TimerQueue.pop_due``) and calls ``_execute`` on its agent. A stop request while it
    is queued takes it out and completes ``set_stopped()`` on the requesting thread.
    """

    __slots__ = ("_after", "_cb", "_key", "_owner", "_rcvr", "_started", "_state", "_t")

    def __init__(self, owner: TimerOwner, rcvr: Receiver, after: bool, t: float) -> None:
        self._owner = owner
        self._rcvr = rcvr
        self._after = after
        self._t = t
        self._cb: StopCallback | None = None
        self._key: tuple[float, int, TimerOp] | None = None
        self._state = _INIT
        self._started = False

    def start(self) -> None:
        if self._started:
            raise twice_started(self)
        self._started = True
        owner = self._owner
        tok = get_stop_token(get_env(self._rcvr))
        if tok.stop_requested():
            self._state = _DONE
            self._rcvr.set_stopped()
            return
        now = owner._timer_now()
        deadline = now + self._t if self._after else self._t
        if deadline <= now and owner._timer_ready is not None:
            self._state = _DONE
            owner._timer_ready(self)
            return
        if tok.stop_possible():
            self._cb = stop_callback_for(tok, self._on_stop)
        q: TimerQueue = owner._timer_queue
        with q.lock:
            early = self._state != _INIT  # the callback ran inside its constructor
            if early:
                first = False
            elif q.closed:  # the owner ended meanwhile: no timer fires any more
                self._state = _DONE
                first = False
            else:
                self._state = _PENDING
                key = self._key = (deadline, next(q._seq), self)
                items = q.items
                items.add(key)
                first = items[0] is key
        if first:
            owner._timer_wake(False)
        elif early:
            cb, self._cb = self._cb, None
            if cb is not None:
                cb.close()
        elif self._state == _DONE:  # the queue was closed (see above)
            self._owner_ended()

    def _on_stop(self) -> None:
        # On the thread that requested stop (or inside start, if it raced with it).
        q: TimerQueue = self._owner._timer_queue
        empty = False
        with q.lock:
            st = self._state
            if st == _DONE:
                return  # taken by the owner: _execute completes it
            self._state = _DONE
            if st == _PENDING:
                q.items.remove(self._key)
                empty = not q.items
        self._key = None
        cb, self._cb = self._cb, None
        if cb is not None:
            cb.close()
        if st == _PENDING:
            self._owner._timer_wake(empty)
        STOPPED_BY_REQUEST[0](self._rcvr)

    def _owner_ended(self) -> None:
        """The owner ended with this timer pending (``TimerQueue.close`` marked it done): it
        will never fire, so it completes ``set_stopped()`` now, on the calling thread (as a
        stop request would; a ``BaseException`` from user code in that completion goes to the
        consumer's ``raised_sink``, else propagates)."""
        self._key = None
        cb = self._cb
        if cb is not None:
            self._cb = None
            cb.close()  # waits for an _on_stop running on another thread (it returns early)
        STOPPED_BY_REQUEST[0](self._rcvr)

    def _execute(self) -> None:
        # On the owner's agent, after pop_due (or _timer_ready) marked it done.
        self._key = None
        cb = self._cb
        if cb is not None:
            self._cb = None
            cb.close()  # waits for an _on_stop running on another thread (it returns early)
        rcvr = self._rcvr
        if get_stop_token(get_env(rcvr)).stop_requested():
            rcvr.set_stopped()
        else:
            rcvr.set_value()

    def _sx_describe(self) -> TimerWait | None:
        """The deadline while the timer is queued, for ``operation_tree()``
        (``_contracts.Describable``); ``None`` when it is not (not started, or done). Never
        raises, takes no lock."""
        key = getattr(self, "_key", None)
        if key is None:
            return None
        owner = self._owner
        return TimerWait(key[0], owner, owner._timer_now)

    _sx_children = no_children  # a walk down pending work ends at a timer


class TimerAttrs(TryEnv):
    """A timer sender's attributes: the scheduler completes ``set_value`` (a stop request
    completes ``set_stopped`` on the requesting thread)."""

    __slots__ = ("_sch",)
    _unsupported = "the timer sender of {self._sch!r} does not support {q!r}"

    def __init__(self, sch: Any) -> None:  # subclasses read their scheduler's fields
        self._sch = sch

    def _sx_try(self, q: object, default: object) -> object:
        if q is _VALUE_Q:
            return self._sch
        return default


class TimerSender(Sender[None]):
    """``schedule_after(sch, s)`` / ``schedule_at(sch, d)``; subclasses set ``_op_type`` and
    ``_owner_of(sch)``."""

    __slots__ = ("_after", "_sch", "_t")
    _op_type: ClassVar[type[TimerOp]] = TimerOp

    def __init__(self, sch: Any, after: bool, t: float) -> None:
        self._sch = sch
        self._after = after
        self._t = t

    def _owner(self) -> Any:  # pragma: no cover - every subclass overrides it
        """The timer queue's owner (a ``TimerOwner``): each timed scheduler's sender
        subclass returns its own (run loop, trio run, parallel scheduler, ManualScheduler)."""
        raise NotImplementedError(
            f"{type(self).__name__} must define _owner(): a TimerSender subclass names the "
            "scheduler whose timer queue it uses"
        )

    def connect(self, rcvr: Receiver) -> TimerOp:
        return self._op_type(self._owner(), rcvr, self._after, self._t)

    def get_env(self) -> TimerAttrs:
        return TimerAttrs(self._sch)

    def get_completion_signatures(self, env: object = None) -> completion_signatures:
        if env is not None and is_unstoppable(get_stop_token(env)):
            return completion_signatures(set_value_t())
        return completion_signatures(set_value_t(), set_stopped_t())

    def __repr__(self) -> str:
        if self._after:
            return f"schedule_after({self._sch!r}, {self._t!r})"
        return f"schedule_at({self._sch!r}, {self._t!r})"


# --------------------------------------------------------------------------- public API


def is_timed_scheduler(x: object) -> bool:
    """Is ``x`` a scheduler with ``now()``, ``schedule_after(seconds)`` and
    ``schedule_at(deadline)`` (the time guide "Timed schedulers")? A scheduler that forwards
    them (``task_scheduler``) is timed when its ``timed`` attribute is true.

    >>> import structexec as sx
    >>> sx.is_timed_scheduler(sx.run_loop().get_scheduler())
    True
    >>> sx.is_timed_scheduler(sx.inline_scheduler())
    False
    """
    if not is_scheduler(x):
        return False
    if not all(callable(getattr(x, m, None)) for m in ("now", "schedule_after", "schedule_at")):
        return False
    # A scheduler that forwards the timed methods to another one (task_scheduler) says with
    # its ``timed`` attribute whether that one is timed.
    return bool(getattr(x, "timed", True))


def _timed(sch: object, fn: str) -> Any:
    if not is_timed_scheduler(sch):
        what = "scheduler" if is_scheduler(sch) else "object"
        raise TypeError(
            f"{fn}() needs a timed scheduler (with now(), schedule_after() and "
            f"schedule_at()), got the {what} {sch!r}; the timed schedulers are "
            f"{TIMED_SCHEDULERS} (inline_scheduler is not timed)"
        )
    return sch


def now(sch: object) -> float:
    """``sch.now()``: the current time of a timed scheduler, in seconds on its own clock
    (the time guide "Timed schedulers"); ``TypeError`` for a scheduler that is not timed."""
    t: float = _timed(sch, "now").now()
    return t


def schedule_after(sch: object, seconds: float) -> Sender[None]:
    """A sender that completes ``set_value()`` on ``sch`` after ``seconds`` (from its start)
    (the time guide "Timed schedulers").

    Completion signatures: ``set_value_t()``, ``set_stopped_t()``. Cancellation: a stop request
    while the timer is pending completes ``set_stopped()`` at once and frees the timer. Errors:
    ``ValueError`` now for negative or NaN ``seconds``; ``TypeError`` for a scheduler that is
    not timed. ``0`` completes at once (on ``sch``, not inside ``start``); ``inf`` never.

    >>> import structexec as sx
    >>> sx.sync_wait(sx.read_env(sx.get_scheduler)
    ...     | sx.let_value(lambda s: sx.schedule_after(s, 0.01) | sx.then(lambda: "tick")))
    ('tick',)
    """
    s = check_seconds(seconds)
    snd: Sender[None] = _timed(sch, "schedule_after").schedule_after(s)
    return snd


def schedule_at(sch: object, deadline: float) -> Sender[None]:
    """A sender that completes ``set_value()`` on ``sch`` once ``now(sch) >= deadline``
    (the time guide "Timed schedulers"). A deadline in the past completes at once (on ``sch``);
    ``inf`` never. ``ValueError`` now for a NaN ``deadline``; ``TypeError`` for a scheduler that
    is not timed."""
    d = check_deadline(deadline)
    snd: Sender[None] = _timed(sch, "schedule_at").schedule_at(d)
    return snd
