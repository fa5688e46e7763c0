"""``ManualScheduler``: a scheduler whose work runs exactly when the test says.

[exec.sched], [exec.schedule] ("ManualSched"), 2.16, 6, [exec.run.loop.types] and P3941R1 3.2
(infallible schedulers).
"""

from __future__ import annotations

import math
import threading
from typing import TYPE_CHECKING, Any

from .._algorithms._timed import TimerQueue, TimerSender, check_deadline, check_seconds
from .._core._completion_signatures import completion_signatures
from .._core._env import get_env
from .._core._protocol import Sender
from .._core._queries import (
    QueryError,
    forward_progress_guarantee,
    get_completion_scheduler,
    get_forward_progress_guarantee,
    get_stop_token,
)
from .._core._schedule_sender import ScheduleAttrs, ScheduleOp, ScheduleSender
from .._core._stop_token import stop_callback_for
from .._core._tags import set_error_t
from .._schedulers._run_loop import stopped_from_stop_callback

if TYPE_CHECKING:
    from .._algorithms._timed import TimerOp
    from .._core._stop_token import StopCallback
    from ._protocols import ReceiverLike
    from ._thread_sched import ThreadScheduler

__all__ = ["ManualScheduler"]


class _Current(threading.local):
    sch: ManualScheduler | ThreadScheduler | None = None


_current = _Current()

_IDLE, _QUEUED, _RUNNING, _DONE = 0, 1, 2, 3
_ERROR_Q = get_completion_scheduler[set_error_t]


class _ManualOp(ScheduleOp):
    """The operation of ``sch.schedule()``: queued by ``start`` (``ManualScheduler._enqueue``),
    completed by ``run_one``."""

    __slots__ = ("_cb", "_sch", "_state")

    def __init__(self, sch: ManualScheduler, rcvr: ReceiverLike) -> None:
        super().__init__(sch._enqueue, rcvr)
        self._sch = sch
        self._state = _IDLE
        self._cb: StopCallback | None = None

    def _on_stop(self) -> None:
        # Runs on the thread that requested stop (or inside start if it already had).
        sch = self._sch
        with sch._lock:
            if self._state != _QUEUED:
                return  # already taken by run_one, which will see the stop request
            sch._queue.remove(self)
            self._state = _DONE
            sch.stopped_eagerly += 1
        cb, self._cb = self._cb, None
        if cb is not None:
            cb.close()
        stopped_from_stop_callback(self._rcvr)  # a BaseException: the consumer's raised_sink

    def _run(self, exc: BaseException | None) -> None:
        # The caller has taken the op out of the queue and set _RUNNING under the lock.
        cb, self._cb = self._cb, None
        if cb is not None:
            cb.close()  # waits if _on_stop runs on another thread; it then returns early
        self._state = _DONE
        rcvr = self._rcvr
        prev = _current.sch
        _current.sch = self._sch
        try:
            if get_stop_token(get_env(rcvr)).stop_requested():
                rcvr.set_stopped()
            elif exc is not None:
                rcvr.set_error(exc)
            else:
                rcvr.set_value()
        finally:
            _current.sch = prev


class _ManualAttrs(ScheduleAttrs):
    __slots__ = ()

    def _sx_try(self, q: object, default: object) -> object:
        if q is _ERROR_Q and not self._sch.infallible:
            return self._sch  # a fallible scheduler also completes set_error on its agent
        return ScheduleAttrs._sx_try(self, q, default)


class _ManualSender(ScheduleSender):
    __slots__ = ()
    _attrs_type = _ManualAttrs

    def connect(self, rcvr: ReceiverLike) -> _ManualOp:
        sch = self._sch
        e = get_env(rcvr)
        with sch._lock:
            sch.envs.append(e)
        return _ManualOp(sch, rcvr)

    def get_completion_signatures(self, env: object = None) -> completion_signatures:
        sigs = ScheduleSender.get_completion_signatures(self, env)
        if self._sch.infallible:
            return sigs
        return completion_signatures(*sigs, set_error_t(Exception))

    def __repr__(self) -> str:
        return f"schedule({self._sch!r})"


class _ManualTimerSender(TimerSender):
    __slots__ = ()

    def _owner(self) -> ManualScheduler:
        sch: ManualScheduler = self._sch
        return sch

    def connect(self, rcvr: ReceiverLike) -> TimerOp:
        sch = self._sch
        e = get_env(rcvr)
        with sch._lock:
            sch.envs.append(e)
        return TimerSender.connect(self, rcvr)


class ManualScheduler:
    """A scheduler whose ``schedule()`` operations wait in a queue until the test runs them.

     (``ManualSched``), 2.16, 6.1-6.6; P3941R1 3.2 for ``infallible``.

    * ``schedule()`` returns a sender; starting its operation appends it to the queue and
      returns (it never completes inline). :attr:`pending` is the queue length,
      :attr:`started` counts operations ever started, :attr:`ran` items run.
    * ``run_one(index=0)`` takes the item at ``index`` out of the queue and completes it on the
      calling thread: ``set_stopped()`` if its receiver's stop token has a stop request,
      else ``set_error(exc)`` if :meth:`fail_next` armed a failure, else ``set_value()``.
      While the completion runs, ``ManualScheduler.current()`` on that thread is this
      scheduler (a marker for affinity tests, [exec.get.compl.sched]). ``run_one`` raises
      ``IndexError`` when there is no such item.
    * ``drain(limit=100_000)`` runs items in FIFO order, including items queued by running
      items, until the queue is empty; returns how many ran; raises ``RuntimeError`` past
      ``limit`` (a livelock).
    * ``infallible=True`` (the default): the schedule sender declares
      ``set_value_t()`` plus ``set_stopped_t()`` unless the environment's stop token is
      unstoppable, so it is *infallible* in the P3941R1 sense (``affine_on`` and ``task``
      accept it). ``ManualScheduler(infallible=False)`` also declares
      ``set_error_t(Exception)`` and allows :meth:`fail_next`.
    * ``stop_eagerly=False``: when true, a stop request on a queued operation's token takes it
      out of the queue and completes it ``set_stopped()`` at once on the requesting thread
      (like a cancellable timer), instead of when the item is run.
    * :attr:`envs` lists the receiver environment of every connected schedule operation (so
      a test can check which stop token or scheduler an algorithm passed down).
    * Attributes of the schedule sender: ``get_completion_scheduler[set_value_t]`` and
      ``[set_stopped_t]`` (and ``[set_error_t]`` when fallible) are this scheduler.
    * Equality is identity; every method is thread-safe (items run on the thread that calls
      ``run_one``/``drain``).

    It is a *timed* scheduler on virtual time (the time guide "Timed schedulers"):

    * ``now()`` starts at ``0.0`` and moves only with :meth:`advance`;
    * ``schedule_after(seconds)``/``schedule_at(deadline)`` (or ``sx.schedule_after(sch, s)``)
      give senders whose started operations wait in a deadline queue (:attr:`pending_timers`,
      :attr:`next_deadline`), apart from the ``schedule()`` queue that ``run_one``/``drain``
      serve. A deadline already reached (``schedule_after(0)``) waits for the next
      ``advance`` too (``advance(0)`` fires it);
    * ``advance(seconds)`` moves ``now()`` forward and completes, on the calling thread, every
      timer due by then (including timers started by those completions), in deadline order
      and FIFO among equal deadlines; while a timer completes, ``now()`` is its deadline;
    * a stop request on a pending timer takes it out of the queue and completes it
      ``set_stopped()`` at once on the requesting thread (whatever ``stop_eagerly`` says).
    """

    def __init__(
        self, name: str | None = None, *, infallible: bool = True, stop_eagerly: bool = False
    ) -> None:
        self.name = name
        self.infallible = infallible
        self._stop_eagerly = stop_eagerly
        self._lock = threading.Lock()
        self._queue: list[_ManualOp] = []
        self._failures: list[BaseException] = []
        self.envs: list[Any] = []
        self.started = 0
        self.ran = 0
        self.stopped_eagerly = 0
        self._now = 0.0
        self._timers = TimerQueue(self._lock)

    # -- virtual time (docs/time.md "Timed schedulers") -----------------------------------

    def now(self) -> float:
        """The virtual time: ``0.0`` at creation, moved by :meth:`advance`."""
        return self._now

    def schedule_after(self, seconds: float) -> Sender[None]:
        """A sender that completes on this scheduler once :meth:`advance` has moved ``now()``
        ``seconds`` past its start."""
        return _ManualTimerSender(self, True, check_seconds(seconds))

    def schedule_at(self, deadline: float) -> Sender[None]:
        """A sender that completes on this scheduler once :meth:`advance` has moved ``now()``
        to ``deadline``."""
        return _ManualTimerSender(self, False, check_deadline(deadline))

    def advance(self, seconds: float) -> int:
        """Move ``now()`` forward by ``seconds`` (finite, ``>= 0``) and complete the timers due
        by then on the calling thread, in deadline order (FIFO among equal deadlines); return
        how many completed."""
        s = check_seconds(seconds, "advance")
        if math.isinf(s):
            raise ValueError("advance: seconds must be finite")
        with self._lock:
            target = self._now + s
        n = 0
        q = self._timers
        while True:
            with self._lock:
                key = q.pop_first(target)
                if key is None:
                    self._now = max(self._now, target)
                    return n
                self._now = max(self._now, key[0])
            prev = _current.sch
            _current.sch = self
            try:
                key[2]._execute()
            finally:
                _current.sch = prev
            n += 1

    @property
    def pending_timers(self) -> int:
        """How many started timer operations wait for their deadline."""
        return len(self._timers)

    @property
    def next_deadline(self) -> float:
        """The earliest pending deadline (``inf`` when no timer is pending)."""
        with self._lock:
            return self._timers.earliest()

    # the TimerOwner protocol of _algorithms._timed
    _timer_ready = None  # a due timer waits for the next advance()

    @property
    def _timer_queue(self) -> TimerQueue:
        return self._timers

    def _timer_now(self) -> float:
        return self._now

    def _timer_wake(self, empty: bool) -> None:
        pass

    @staticmethod
    def current() -> ManualScheduler | ThreadScheduler | None:
        """The testing scheduler whose item is completing on this thread, or ``None``.

        A ``ManualScheduler`` while ``run_one``/``drain`` completes one of its items, a
        :class:`ThreadScheduler` on its worker thread ([exec.get.compl.sched] marker).
        """
        return _current.sch

    def schedule(self) -> Sender[None]:
        """A sender that completes on this scheduler when the test runs its item
        ([exec.schedule])."""
        return _ManualSender(self)

    def query(self, q: object, *args: object) -> object:
        """Scheduler queries: ``get_forward_progress_guarantee`` is ``weakly_parallel``."""
        if q is get_forward_progress_guarantee:
            return forward_progress_guarantee.weakly_parallel
        raise QueryError(f"{self!r} does not support {q!r}")

    def _enqueue(self, op: _ManualOp) -> None:
        # ScheduleOp.start: queue a started operation; with stop_eagerly, a stop request takes
        # it out of the queue again (_ManualOp._on_stop).
        with self._lock:
            op._state = _QUEUED
            self._queue.append(op)
            self.started += 1
        if self._stop_eagerly:
            tok = get_stop_token(get_env(op._rcvr))
            if tok.stop_possible():
                op._cb = stop_callback_for(tok, op._on_stop)

    @property
    def pending(self) -> int:
        """How many started operations wait in the queue."""
        return len(self._queue)

    def fail_next(self, exc: BaseException, count: int = 1) -> None:
        """Make the next ``count`` items that run (and are not stopped) complete ``set_error(exc)``.

        Only for ``ManualScheduler(infallible=False)``: an infallible scheduler declares that
        it never completes with an error (P3941R1 3.2), so this raises ``TypeError`` there.
        """
        if self.infallible:
            raise TypeError(
                "fail_next() on an infallible ManualScheduler: its schedule sender declares no "
                "set_error completion (P3941R1); create it with ManualScheduler(infallible=False)"
            )
        if exc is None:
            raise TypeError(
                "fail_next(None): None is not a valid error datum ([exec.general]); pass an "
                "exception"
            )
        with self._lock:
            self._failures.extend([exc] * count)

    def _take(self, index: int) -> tuple[_ManualOp, BaseException | None]:
        with self._lock:
            q = self._queue
            if not q:
                raise IndexError(f"{self!r}: no queued item to run")
            op = q.pop(index)
            op._state = _RUNNING
            self.ran += 1
            exc = None
            if self._failures and not get_stop_token(get_env(op._rcvr)).stop_requested():
                exc = self._failures.pop(0)
            return op, exc

    def run_one(self, index: int = 0) -> None:
        """Run the queued item at ``index`` (FIFO position) on the calling thread."""
        op, exc = self._take(index)
        op._run(exc)

    def drain(self, limit: int = 100_000) -> int:
        """Run items in FIFO order until none is queued; return how many ran."""
        n = 0
        while self._queue:
            if n >= limit:
                raise RuntimeError(f"{self!r}.drain(): more than {limit} items; a livelock?")
            try:
                op, exc = self._take(0)
            except IndexError:  # another thread emptied the queue
                break
            op._run(exc)
            n += 1
        return n

    def __repr__(self) -> str:
        name = f" {self.name!r}" if self.name else ""
        return f"<ManualScheduler{name} {len(self._queue)} pending>"
