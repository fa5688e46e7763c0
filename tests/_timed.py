"""Test doubles for the racing tests: a virtual-clock *timed* scheduler and a gate sender.

``VirtualClock`` implements the timed-scheduler contract the racing algorithms code against
(``now()``, ``schedule_after(seconds)``, ``schedule_at(deadline)``; timers complete
``set_value()`` when due and ``set_stopped()`` at once on a stop request) with time that moves
only when the test calls ``advance()``. Timers due at the same instant fire in the order they
were started. ``Gate`` is work that ignores stop requests and completes when the test says.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from typing import Any

import structexec as sx

_QUEUED, _DONE = 1, 2


class _TimerOp:
    def __init__(self, clock: VirtualClock, rcvr: Any, at: float | None, after: float) -> None:
        self._clock = clock
        self._rcvr = rcvr
        self._at = at
        self._after = after
        self._state = 0
        self._cb: Any = None

    def start(self) -> None:
        clock = self._clock
        tok = sx.get_stop_token(sx.get_env(self._rcvr))
        if tok.stop_requested():
            self._state = _DONE
            self._rcvr.set_stopped()
            return
        with clock._lock:
            deadline = self._at if self._at is not None else clock._t + self._after
            self._state = _QUEUED
            heapq.heappush(clock._heap, (deadline, next(clock._seq), self))
            clock.started += 1
        cb = sx.stop_callback_for(tok, self._on_stop)
        with clock._lock:
            if self._state == _QUEUED:
                self._cb = cb
                return
        cb.close()

    def _on_stop(self) -> None:
        clock = self._clock
        with clock._lock:
            if self._state != _QUEUED:
                return
            self._state = _DONE
            clock._heap = [e for e in clock._heap if e[2] is not self]
            heapq.heapify(clock._heap)
            clock.stopped += 1
        cb, self._cb = self._cb, None
        if cb is not None:
            cb.close()
        self._rcvr.set_stopped()

    def _fire(self) -> None:
        cb, self._cb = self._cb, None
        if cb is not None:
            cb.close()
        self._rcvr.set_value()


class _TimerSender(sx.Sender[None]):
    def __init__(self, clock: VirtualClock, at: float | None, after: float) -> None:
        self._clock = clock
        self._at = at
        self._after = after

    def connect(self, rcvr: Any) -> _TimerOp:
        return _TimerOp(self._clock, rcvr, self._at, self._after)

    def get_completion_signatures(self, env: Any = None) -> sx.completion_signatures:
        return sx.completion_signatures(sx.set_value_t(), sx.set_stopped_t())

    def __repr__(self) -> str:
        return f"timer(at={self._at}, after={self._after})"


class VirtualClock:
    """A timed scheduler with a manual virtual clock (see the module docstring)."""

    def __init__(self, t: float = 0.0) -> None:
        self._t = t
        self._heap: list[tuple[float, int, _TimerOp]] = []
        self._seq = itertools.count()
        self._lock = threading.Lock()
        self.started = 0
        self.stopped = 0
        self.fired = 0

    def now(self) -> float:
        return self._t

    def schedule(self) -> sx.Sender[None]:
        return _TimerSender(self, None, 0.0)

    def schedule_after(self, seconds: float) -> sx.Sender[None]:
        return _TimerSender(self, None, seconds)

    def schedule_at(self, deadline: float) -> sx.Sender[None]:
        return _TimerSender(self, deadline, 0.0)

    def pending(self) -> int:
        with self._lock:
            return len(self._heap)

    def advance(self, dt: float = 0.0) -> int:
        """Move the clock by ``dt`` and fire every timer now due, earliest (then first
        started) first, one at a time; timers started meanwhile that are due fire too."""
        with self._lock:
            self._t += dt
        n = 0
        while True:
            with self._lock:
                if not self._heap or self._heap[0][0] > self._t:
                    return n
                _, _, op = heapq.heappop(self._heap)
                op._state = _DONE
                self.fired += 1
            op._fire()
            n += 1

    def env(self) -> Any:
        return sx.prop(sx.get_scheduler, self)

    def __repr__(self) -> str:
        return f"VirtualClock(t={self._t})"


class Gate:
    """Work that ignores stop requests: each started operation waits in :attr:`ops` until the
    test completes it (``gate.ops[0].set_value(1)``); :attr:`stop_seen` says whether its stop
    token was stopped when it completed."""

    def __init__(self) -> None:
        self.ops: list[Any] = []
        self.started = 0
        self.completed = 0

    def sender(self) -> sx.Sender[Any]:
        gate = self

        class Op:
            def __init__(self, rcvr: Any) -> None:
                self.rcvr = rcvr

            def start(self) -> None:
                gate.started += 1
                gate.ops.append(self)

            def stop_requested(self) -> bool:
                return bool(sx.get_stop_token(sx.get_env(self.rcvr)).stop_requested())

            def set_value(self, *vals: Any) -> None:
                gate.completed += 1
                self.rcvr.set_value(*vals)

            def set_error(self, err: Any) -> None:
                gate.completed += 1
                self.rcvr.set_error(err)

            def set_stopped(self) -> None:
                gate.completed += 1
                self.rcvr.set_stopped()

        class S(sx.Sender[Any]):
            def connect(self, rcvr: Any) -> Op:
                return Op(rcvr)

            def __repr__(self) -> str:
                return "gate"

        return S()
