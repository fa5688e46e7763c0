"""``run_loop``: a FIFO execution context driven by the thread that calls ``run()``.

[exec.run.loop]. Thread-safe: any thread may schedule onto the loop; the
work runs on the thread inside ``run()``, in FIFO order. An item checks its receiver's stop
token when it runs and completes ``set_stopped()`` if stop was requested ([exec.run.loop.types]).

This module also holds the private plumbing the execution contexts share for a
``BaseException`` (``KeyboardInterrupt``, ``SystemExit``) that user code raises while an
execution context completes work on its own agent (the trio scheduler's drainer, a thread
pool worker): :data:`raised_sink` and :func:`deliver_raised` (see there).
"""

from __future__ import annotations

import _thread
import signal
import threading
import time
from collections import deque
from typing import TYPE_CHECKING

from .._algorithms import _timed
from .._algorithms._timed import TimerQueue, TimerSender, check_deadline, check_seconds
from .._core._env import get_env, sched_attrs
from .._core._errors import terminate
from .._core._queries import Query, query_or
from .._core._schedule_sender import ScheduleOp, ScheduleSender

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._algorithms._timed import TimerOp
    from .._core._contracts import Receiver

    #: A consumer's ``raised_sink``: takes a ``BaseException``, ``True`` when it took it.
    _Sink = Callable[[BaseException], object]

__all__ = ["run_loop"]

_STARTING, _RUNNING, _FINISHING, _FINISHED = "starting", "running", "finishing", "finished"
#: A loop whose only consumer has gone (``sync_wait`` left with a ``BaseException``): it is
#: finished, and work that other threads still schedule onto it is dropped (never run).
_ABANDONED = "abandoned"
#: The longest timeout a lock accepts (a deadline further away is waited for in steps).
_TIMEOUT_MAX = min(threading.TIMEOUT_MAX, 86400.0)


# --------------------------------------------------------------------------- raised sink


class raised_sink_t(Query):
    """Private forwarding query: who takes a ``BaseException`` raised while completing work.

    When user code (a ``then`` function, a bulk function, a task body resumed by a scheduler) raises
    a ``BaseException`` that is not an error datum (the senders guide "What happens when things
    fail") while an execution context completes work on its own agent (the trio scheduler's drainer,
    a thread pool worker), nobody up the stack waits for the result: the exception reaches the
    execution context, and the receivers between it and the final consumer can no longer complete.
    The execution context then asks the environment of the receiver it was completing for
    ``raised_sink``. A consumer that waits for the result (``await`` in a trio task, ``sync_wait``)
    answers with a callable ``sink(exc) -> bool``: it takes the exception (returns ``True``), raises
    it where it waits, as if the code had run there, and ignores any completion that still arrives
    afterwards. ``False`` (or no answer) means nobody took it: :func:`deliver_raised` then uses the
    fallback.
    """

    forwarding = True
    __slots__ = ()


raised_sink = raised_sink_t()


def _sigint_delivered() -> bool:
    try:
        return callable(signal.getsignal(signal.SIGINT))
    except Exception:  # pragma: no cover - no signal support
        return False


def _ctrl_c() -> None:
    """Deliver SIGINT to the main thread as a Ctrl-C does (a real signal where possible, so
    that a main thread blocked in a system call, e.g. trio waiting for I/O, wakes up)."""
    kill = getattr(signal, "pthread_kill", None)
    if kill is not None:
        try:
            kill(threading.main_thread().ident, signal.SIGINT)
            return
        except Exception:  # pragma: no cover - fall back to the simulated signal
            pass
    _thread.interrupt_main()  # pragma: no cover - no pthread_kill (Windows)


def sink_of(env: object) -> _Sink | None:
    """The ``raised_sink`` of ``env`` (an environment), or ``None``; never raises."""
    if env is None:
        return None
    try:
        sink: _Sink | None = query_or(env, raised_sink, None)
    except Exception:
        return None
    return sink


def stopped_from_stop_callback(rcvr: Receiver) -> None:
    """``rcvr.set_stopped()`` from a stop callback: a stop request took a queued operation
    (a pending timer, ...) out and completes it on the requesting thread.

    A ``BaseException`` that user code raises in that completion (an ``upon_stopped``
    function raising ``KeyboardInterrupt``) goes to the receiver's :data:`raised_sink`, as
    when an execution context's agent completes work: if the consumer takes it (a scope
    inside ``async with`` raises it at its exit, an ``await`` or ``sync_wait`` where it
    waits), the operation is done and the stop request returns normally. Otherwise it
    propagates from ``request_stop()`` (the stop source's rule for a ``BaseException`` from a
    callback); the consumer's sink, if any, has then marked the work ended (a scope's work
    releases its association). An ``Exception`` propagates (a completion that raises: the
    stop source calls the terminate handler).
    """
    try:
        rcvr.set_stopped()
    except Exception:
        raise
    except BaseException as exc:
        sink = sink_of(get_env(rcvr))
        if sink is not None:
            try:
                if sink(exc) is True:
                    return
            except Exception:  # a broken sink: the exception goes on
                pass
        raise


_timed.STOPPED_BY_REQUEST[0] = stopped_from_stop_callback


def deliver_raised(sink: _Sink | None, exc: BaseException, where: str) -> bool:
    """Hand ``exc`` (raised by user code on an execution context's agent) to its consumer.

    ``sink`` is the consumer's :data:`raised_sink` (``None`` if it has none). Returns
    ``True`` if the sink took ``exc``. Otherwise: a ``KeyboardInterrupt`` is delivered as a
    Ctrl-C is (SIGINT to the main thread: under ``trio.run`` on the main thread, trio raises
    ``KeyboardInterrupt`` in the main task and out of ``trio.run``); any other
    ``BaseException``, or a ``KeyboardInterrupt`` while SIGINT is ignored, calls the
    terminate handler (nobody can receive it). Returns ``False`` then. Raises only what the
    terminate handler raises.
    """
    if sink is not None:
        try:
            if sink(exc) is True:
                return True
        except Exception:  # a broken sink: fall back
            pass
    if isinstance(exc, KeyboardInterrupt) and _sigint_delivered():
        _ctrl_c()
        return False
    terminate(
        f"{type(exc).__name__} raised by {where}, and no consumer waits for that work to "
        "receive it (a BaseException is never an error completion): catch it inside the "
        "function, or consume the work with await or sync_wait, which re-raise it",
        exc,
    )
    return False


class _RunLoopOp(ScheduleOp):
    __slots__ = ()


class _RunLoopSender(ScheduleSender):
    __slots__ = ()
    #: ``SCHED-ATTRS(sch)``: completions on value and stopped happen on the loop
    #: ([exec.run.loop.types]).
    _attrs_type = sched_attrs

    def connect(self, rcvr: Receiver) -> _RunLoopOp:
        return _RunLoopOp(self._sch._loop._push, rcvr)


class _RunLoopTimerSender(TimerSender):
    __slots__ = ()

    def _owner(self) -> run_loop:
        loop: run_loop = self._sch._loop
        return loop


class _RunLoopScheduler:
    """The scheduler of a :class:`run_loop`; equal iff from the same loop
    ([exec.run.loop.types]).

    It is a *timed* scheduler (the time guide "Timed schedulers"): ``now()`` is
    ``time.monotonic()``, ``schedule_after(seconds)``/``schedule_at(deadline)`` complete on the
    loop once the time has come.
    """

    __slots__ = ("_loop",)

    def __init__(self, loop: run_loop) -> None:
        self._loop = loop

    def schedule(self) -> _RunLoopSender:
        return _RunLoopSender(self)

    def now(self) -> float:
        """The loop's clock: ``time.monotonic()`` (the time guide "Timed schedulers")."""
        return time.monotonic()

    def schedule_after(self, seconds: float) -> _RunLoopTimerSender:
        """Completes on the loop ``seconds`` after its start (the time guide "Timed schedulers")."""
        return _RunLoopTimerSender(self, True, check_seconds(seconds))

    def schedule_at(self, deadline: float) -> _RunLoopTimerSender:
        """Completes on the loop once ``now() >= deadline`` (the time guide "Timed schedulers")."""
        return _RunLoopTimerSender(self, False, check_deadline(deadline))

    def __eq__(self, other: object) -> bool:
        if type(other) is _RunLoopScheduler:
            return other._loop is self._loop
        return NotImplemented  # let e.g. task_scheduler answer (symmetric equality, 23)

    def __hash__(self) -> int:
        return id(self._loop)

    def __repr__(self) -> str:
        return f"<run_loop scheduler of {self._loop!r}>"


class run_loop:
    """A FIFO queue of work run by the thread that calls :meth:`run` ([exec.run.loop]).

    * ``get_scheduler()``: a scheduler whose ``schedule()`` never completes inline; the work
      runs inside ``run()``. Schedulers from the same loop compare equal.
    * ``run()``: runs queued items in FIFO order, blocking while the queue is empty, until
      ``finish()`` has been called and the queue is empty. Items queued by running items run
      in the same ``run()``. Calling it on a finished loop raises ``RuntimeError``.
      An item that raises (a ``KeyboardInterrupt`` or ``SystemExit`` from user code; an
      ``Exception`` becomes an error completion), or a Ctrl-C while ``run()`` waits, leaves
      ``run()`` with that exception and the loop usable: it is no longer running, the items
      not yet run stay queued, and calling ``run()`` again goes on with them.
    * ``finish()``: thread-safe; wakes ``run()``. Calling it twice raises ``RuntimeError``.

    Dropping a loop that is running or still holds work is a contract violation
    ([exec.run.loop.ctor]): the terminate handler is called.

    Timers (the time guide "Timed schedulers"): the scheduler's ``schedule_after``/``schedule_at``
    operations wait in a deadline queue (a ``SortedList``, O(log n) per timer, FIFO among
    equal deadlines); ``run()`` moves the due ones to the end of the FIFO queue and, with
    nothing to run, sleeps until the earliest deadline or new work (a lock acquired with a
    timeout, no polling). A pending timer is queued work: ``run()`` returns after ``finish()``
    only when no timer is pending either.
    """

    __slots__ = ("__weakref__", "_lock", "_queue", "_sleeping", "_state", "_timers", "_wake")

    def __init__(self) -> None:
        self._queue: deque[_RunLoopOp | TimerOp] = deque()
        self._lock = threading.Lock()
        # A binary semaphore, held while nobody sleeps in run(): released (once) by the
        # thread that gives a sleeping run() something to do. Cheaper than a Condition,
        # whose wait() allocates a lock per call.
        self._wake = threading.Lock()
        self._wake.acquire()
        self._sleeping = False
        self._state = _STARTING
        self._timers: TimerQueue | None = None

    # -- timers (the TimerOwner protocol of _algorithms._timed) ---------------------------

    @property
    def _timer_queue(self) -> TimerQueue:
        q = self._timers
        if q is None:
            with self._lock:
                q = self._timers
                if q is None:
                    q = self._timers = TimerQueue(self._lock)
        return q

    def _timer_now(self) -> float:
        if self._state == _FINISHED:
            raise RuntimeError(
                "schedule_after()/schedule_at() on a run_loop that has finished running: start "
                "work on a loop before finish() lets run() return ([exec.run.loop.members])"
            )
        return time.monotonic()

    def _timer_ready(self, op: TimerOp) -> None:
        self._push(op)

    def _timer_wake(self, empty: bool) -> None:
        with self._lock:
            if self._sleeping:
                self._sleeping = False
                self._wake.release()

    def get_scheduler(self) -> _RunLoopScheduler:
        return _RunLoopScheduler(self)

    def _push(self, op: _RunLoopOp | TimerOp) -> None:
        lock = self._lock
        lock.acquire()
        if self._state == _FINISHED:
            lock.release()
            raise RuntimeError(
                "schedule() on a run_loop that has finished running: start work on a loop "
                "before finish() lets run() return ([exec.run.loop.members])"
            )
        if self._state == _ABANDONED:
            lock.release()
            return  # its consumer has gone: the work is dropped, never run
        self._queue.append(op)
        if self._sleeping:
            self._sleeping = False
            self._wake.release()
        lock.release()

    def run(self) -> None:
        lock = self._lock
        queue = self._queue
        with lock:
            if self._state not in (_STARTING, _FINISHING):
                raise RuntimeError(f"run_loop.run() called while the loop is {self._state}")
            if self._state == _STARTING:
                self._state = _RUNNING
        while True:
            lock.acquire()
            timers = self._timers
            if timers is not None and timers.items:
                now = time.monotonic()
                if timers.items[0][0] <= now:
                    queue.extend(timers.pop_due(now))
            if queue:
                op = queue.popleft()
                lock.release()
                try:
                    op._execute()
                except BaseException:
                    # The item raised (a BaseException from user code: an Exception would
                    # have become an error completion). It propagates to the caller of
                    # run(); the loop is left usable: call run() again to go on.
                    self._interrupted(False)
                    raise
                continue
            timeout = -1.0
            if timers is not None and timers.items:
                # Sleep until the earliest deadline (or new work, or an earlier timer).
                timeout = min(timers.items[0][0] - now, _TIMEOUT_MAX)
            elif self._state == _FINISHING:
                self._state = _FINISHED
                lock.release()
                return
            self._sleeping = True
            lock.release()
            try:
                if not self._wake.acquire(timeout=timeout):  # until _push/finish releases it
                    self._timed_out()
            except BaseException:
                # A signal handler raised (Ctrl-C while run() waits for work).
                self._interrupted(True)
                raise

    def _timed_out(self) -> None:
        """The sleep of ``run()`` ended at a deadline: no longer sleeping."""
        with self._lock:
            if self._sleeping:
                self._sleeping = False
            else:
                self._wake.acquire()  # a waker released it meanwhile: take it back

    def _interrupted(self, sleeping: bool) -> None:
        """``run()`` is left by an exception: not running any more, wake-up state restored."""
        with self._lock:
            if sleeping:
                if self._sleeping:
                    self._sleeping = False  # nobody released _wake: it is still held
                else:
                    self._wake.acquire()  # a waker released it meanwhile: take it back
            if self._state == _RUNNING:
                self._state = _STARTING

    def _abandon(self) -> None:
        """The consumer has gone (``sync_wait`` was left by a ``BaseException``).

        The loop ends up finished: queued work is dropped, later ``schedule()`` operations
        are dropped when started (never run, never raising into the starting thread), and a
        late ``finish()`` is a no-op. Dropping the loop then terminates nothing.
        """
        with self._lock:
            self._state = _ABANDONED
            self._queue.clear()
            if self._timers is not None:
                self._timers.clear()
            if self._sleeping:  # cannot happen (the consumer is not in run()), but be exact
                self._sleeping = False
                self._wake.release()

    def finish(self) -> None:
        with self._lock:
            if self._state == _ABANDONED:
                return
            if self._state not in (_STARTING, _RUNNING):
                raise RuntimeError(f"run_loop.finish() called while the loop is {self._state}")
            self._state = _FINISHING
            if self._sleeping:
                self._sleeping = False
                self._wake.release()

    def __del__(self) -> None:
        try:
            queue = self._queue
            state = self._state
            timers = len(self._timers) if self._timers is not None else 0
            if state == _ABANDONED:
                timers = 0  # its consumer has gone: its timers are dropped
        except AttributeError:
            return
        if queue or timers or state == _RUNNING:
            terminate(
                f"run_loop destroyed while {state} with {len(queue)} queued items and "
                f"{timers} pending timers "
                "([exec.run.loop.ctor]): call finish() and then run() until it returns before "
                "dropping a loop"
            )

    def __repr__(self) -> str:
        return f"<run_loop {self._state}, {len(self._queue)} queued>"
