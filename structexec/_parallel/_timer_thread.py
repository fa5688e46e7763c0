"""The process-wide timer queue of the parallel scheduler (the time guide "Which schedulers are
timed", the parallel guide "The scheduler").

Every pending ``schedule_after``/``schedule_at`` timer of every parallel scheduler waits in ONE
:class:`~structexec._algorithms._timed.TimerQueue`, served by ONE daemon thread
(``structexec-timers``). The thread is started lazily when a timer becomes the earliest and no
thread runs; it sleeps on a condition variable with a timeout until the earliest deadline or a
change of it (a timer added first, or stopped), takes out the due timers and hands each to
its owner's ``_timer_ready`` (the parallel scheduler passes it to its backend, as a
``schedule()``). It exits when no timer is pending, is a daemon and registers nothing at exit,
so it never keeps the interpreter alive.
"""

from __future__ import annotations

import math
import os
import threading
import time

from .._algorithms._timed import TimerQueue
from .._core._errors import terminate

__all__ = ["timer_queue", "timer_wake"]

#: The pending timers of every parallel scheduler; its lock is the condition the thread waits on.
timer_queue = TimerQueue(threading.Condition(threading.Lock()))
_running = False  # a serving thread exists (read and written under timer_queue.lock)


def timer_wake(empty: bool) -> None:
    """The earliest deadline changed (``TimerOwner._timer_wake``): wake the thread, or start it
    when a timer is pending and none runs; any thread."""
    global _running
    q = timer_queue
    cond = q.lock
    with cond:
        if _running:
            cond.notify()
            return
        if not q.items:
            return
        _running = True
    try:
        threading.Thread(target=_serve, name="structexec-timers", daemon=True).start()
    except BaseException:
        with cond:
            _running = False
        raise


def _serve() -> None:
    global _running
    q = timer_queue
    cond = q.lock
    monotonic = time.monotonic
    while True:
        with cond:
            while True:
                if not q.items:
                    _running = False
                    return
                now = monotonic()
                due = q.pop_due(now)
                if due:
                    break
                d = q.earliest()
                cond.wait(None if d == math.inf else d - now)  # inf: until notified
        for op in due:
            try:
                op._owner._timer_ready(op)
            except BaseException as e:  # the backend reports failures through the proxy
                terminate(f"a parallel scheduler timer could not be handed to {op._owner!r}", e)


def _after_fork_in_child() -> None:
    # The serving thread does not exist in the child: forget the parent's timers.
    global _running
    timer_queue.lock = threading.Condition(threading.Lock())
    timer_queue.clear()
    _running = False


if hasattr(os, "register_at_fork"):  # pragma: no branch - every POSIX CPython has it
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _pending() -> int:  # for tests
    with timer_queue.lock:
        return len(timer_queue.items)


def _thread_running() -> bool:  # for tests
    return _running
