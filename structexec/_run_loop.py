"""``run_loop``: a FIFO execution context driven by the thread that calls ``run()``.

[exec.run.loop], REQUIREMENTS 18. Thread-safe: any thread may schedule onto the loop; the
work runs on the thread inside ``run()``, in FIFO order. An item checks its receiver's stop
token when it runs and completes ``set_stopped()`` if stop was requested (18.6).
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

from ._completion_signatures import completion_signatures
from ._env import get_env, get_stop_token, sched_attrs
from ._errors import terminate
from ._protocol import Sender, set_stopped_t, set_value_t, twice_started
from ._stop_token import is_unstoppable

__all__ = ["run_loop"]

_STARTING, _RUNNING, _FINISHING, _FINISHED = "starting", "running", "finishing", "finished"


class _RunLoopOp:
    __slots__ = ("_loop", "_rcvr", "_started")

    def __init__(self, loop: run_loop, rcvr: Any) -> None:
        self._loop = loop
        self._rcvr = rcvr
        self._started = False

    def start(self) -> None:
        if self._started:
            raise twice_started(self)
        self._started = True
        self._loop._push(self)

    def _execute(self) -> None:
        rcvr = self._rcvr
        if get_stop_token(get_env(rcvr)).stop_requested():
            rcvr.set_stopped()
        else:
            rcvr.set_value()


class _RunLoopSender(Sender[None]):
    __slots__ = ("_sch",)

    def __init__(self, sch: _RunLoopScheduler) -> None:
        self._sch = sch

    def connect(self, rcvr: Any) -> _RunLoopOp:
        return _RunLoopOp(self._sch._loop, rcvr)

    def get_env(self) -> Any:
        """``SCHED-ATTRS(sch)``: completions on value and stopped happen on the loop (18.2)."""
        return sched_attrs(self._sch)

    def get_completion_signatures(self, env: Any = None) -> completion_signatures:
        # P3941R1: infallible; stopped only where a stop request can arrive (18.9).
        if env is not None and is_unstoppable(get_stop_token(env)):
            return completion_signatures(set_value_t())
        return completion_signatures(set_value_t(), set_stopped_t())


class _RunLoopScheduler:
    """The scheduler of a :class:`run_loop`; equal iff from the same loop (18.2)."""

    __slots__ = ("_loop",)

    def __init__(self, loop: run_loop) -> None:
        self._loop = loop

    def schedule(self) -> _RunLoopSender:
        return _RunLoopSender(self)

    def __eq__(self, other: object) -> bool:
        if type(other) is _RunLoopScheduler:
            return other._loop is self._loop
        return NotImplemented  # let e.g. task_scheduler answer (symmetric equality, 23)

    def __hash__(self) -> int:
        return id(self._loop)

    def __repr__(self) -> str:
        return f"<run_loop scheduler of {self._loop!r}>"


class run_loop:
    """A FIFO queue of work run by the thread that calls :meth:`run` (REQUIREMENTS 18).

    * ``get_scheduler()``: a scheduler whose ``schedule()`` never completes inline; the work
      runs inside ``run()``. Schedulers from the same loop compare equal.
    * ``run()``: runs queued items in FIFO order, blocking while the queue is empty, until
      ``finish()`` has been called and the queue is empty. Items queued by running items run
      in the same ``run()``. Calling it on a finished loop raises ``RuntimeError``.
    * ``finish()``: thread-safe; wakes ``run()``. Calling it twice raises ``RuntimeError``.

    Dropping a loop that still holds work is a contract violation (18.8): the terminate
    handler is called.
    """

    __slots__ = ("__weakref__", "_lock", "_queue", "_sleeping", "_state", "_wake")

    def __init__(self) -> None:
        self._queue: deque[_RunLoopOp] = deque()
        self._lock = threading.Lock()
        # A binary semaphore, held while nobody sleeps in run(): released (once) by the
        # thread that gives a sleeping run() something to do. Cheaper than a Condition,
        # whose wait() allocates a lock per call.
        self._wake = threading.Lock()
        self._wake.acquire()
        self._sleeping = False
        self._state = _STARTING

    def get_scheduler(self) -> _RunLoopScheduler:
        return _RunLoopScheduler(self)

    def _push(self, op: _RunLoopOp) -> None:
        lock = self._lock
        lock.acquire()
        if self._state == _FINISHED:
            lock.release()
            raise RuntimeError("schedule() on a run_loop that has finished running")
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
            if queue:
                op = queue.popleft()
                lock.release()
                op._execute()
                continue
            if self._state == _FINISHING:
                self._state = _FINISHED
                lock.release()
                return
            self._sleeping = True
            lock.release()
            self._wake.acquire()  # until _push or finish releases it

    def finish(self) -> None:
        with self._lock:
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
        except AttributeError:
            return
        if queue or state == _RUNNING:
            terminate(f"run_loop destroyed with {len(queue)} queued items (REQUIREMENTS 18.8)")

    def __repr__(self) -> str:
        return f"<run_loop {self._state}, {len(self._queue)} queued>"
