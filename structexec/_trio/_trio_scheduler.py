"""``trio_scheduler()``: the scheduler of the current trio run (the trio guide "The trio
scheduler").

A ``schedule()`` operation is put on a FIFO queue owned by the run and completed by one
long-lived system task (the *drainer*) that runs the queued operations in order. So the
operation

* never completes inline: ``start`` only queues it, the stack unwinds (P3552R1 4.10);
* always completes on the trio thread, wherever it was started (other threads go through
  ``TrioToken.run_sync_soon``; the trio guide "trio cancellation becomes a stop request");
* runs in FIFO order, from structexec's own queue rather than trio's run queue, which trio
  randomises (the trio guide "The trio scheduler");
* is infallible (P3941R1): it completes ``set_value()``, or ``set_stopped()`` only if its
  receiver's stop token was stopped before it ran.

``await sx.schedule(sx.trio_scheduler())`` in a trio task takes a shortcut: it is a trio
checkpoint (the task yields to the trio scheduler once and resumes on the trio thread; if the
task's trio cancellation hits first, stop was requested before the operation ran and it raises
``trio.Cancelled``, exactly like :func:`trio.lowlevel.checkpoint`). The only thing this skips
is the FIFO queue, whose order is not observable for an awaiting task: the order in which
woken trio tasks resume is trio's (randomised) order anyway.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any, NoReturn

import trio

from .._algorithms._timed import TimerOp, TimerSender, check_deadline, check_seconds
from .._core._env import TryEnv, get_env
from .._core._fastpaths import register_fast_await
from .._core._protocol import Sender
from .._core._queries import forward_progress_guarantee, get_forward_progress_guarantee
from .._core._schedule_sender import ScheduleAttrs, ScheduleOp, ScheduleSender
from .._schedulers._run_loop import deliver_raised, sink_of
from . import _trio_bridge
from ._trio_bridge import RunState, current_run

if TYPE_CHECKING:
    from .._core._contracts import Rcvr

__all__ = ["trio_scheduler"]

_checkpoint = trio.lowlevel.checkpoint


class _TrioScheduleOp(ScheduleOp):
    # _execute is called by the drainer (or the run_sync_soon entry queue) on the trio thread.
    __slots__ = ()

    def _raised(self, exc: BaseException) -> None:
        # The completion raised a BaseException (KeyboardInterrupt, SystemExit: user code
        # that ran in it, e.g. a then-function; an Exception would have become set_error):
        # the drainer carries on with the other operations, and the exception goes to the
        # consumer waiting for this work (``await`` raises it in the awaiting task,
        # sync_wait in its caller); with none, a KeyboardInterrupt goes to trio as a Ctrl-C
        # does and anything else is a terminate (``deliver_raised``).
        try:
            sink = sink_of(get_env(self._rcvr))
        except Exception:
            sink = None
        deliver_raised(sink, exc, "a completion on the trio scheduler")


class _TrioTimerOp(TimerOp):
    # _execute is called by the timer server (or the drainer, for a deadline already passed).
    __slots__ = ()
    _raised = _TrioScheduleOp._raised


class _TrioTimerSender(TimerSender):
    """``schedule_after(trio_scheduler(), s)`` / ``schedule_at(...)`` (the time guide "Timed
    schedulers")."""

    __slots__ = ()
    _op_type = _TrioTimerOp

    def _owner(self) -> RunState:
        run: RunState = self._sch._run
        return run


class _TrioScheduleAttrs(ScheduleAttrs):
    __slots__ = ()
    _unsupported = "the trio scheduler's sender does not support {q!r}"


class _TrioScheduleSender(ScheduleSender):
    """``trio_scheduler().schedule()``: completes on the trio thread, never inline."""

    __slots__ = ()
    _attrs_type = _TrioScheduleAttrs

    def connect(self, rcvr: Rcvr) -> _TrioScheduleOp:
        return _TrioScheduleOp(self._sch._run.schedule, rcvr)

    def __repr__(self) -> str:
        return "schedule(trio_scheduler())"


class _TrioScheduler(TryEnv):
    """The scheduler of one trio run; see :func:`trio_scheduler`.

    Queries (``query``, through ``_sx_try``): ``get_forward_progress_guarantee`` is
    ``weakly_parallel``. One thread runs every trio task cooperatively: an agent that blocks
    (without awaiting) blocks all the others, so trio tasks are not concurrent agents; they do
    make progress once started as long as nothing blocks.
    """

    __slots__ = ("_run",)
    _sx_trio_scheduler = True
    _unsupported = "trio_scheduler() does not support {q!r}"

    def __init__(self, run: RunState) -> None:
        self._run = run

    def schedule(self) -> Sender[None]:
        """A sender that completes on the trio thread of this run, never inline
        (the trio guide "The trio scheduler")."""
        return _TrioScheduleSender(self)

    def now(self) -> float:
        """The run's clock, ``trio.current_time()`` (readable from any thread; the time guide
        "Timed schedulers")."""
        return self._run._timer_now()

    def schedule_after(self, seconds: float) -> Sender[None]:
        """Completes on the trio thread ``seconds`` after its start (the time guide "Timed
        schedulers")."""
        return _TrioTimerSender(self, True, check_seconds(seconds))

    def schedule_at(self, deadline: float) -> Sender[None]:
        """Completes on the trio thread once ``now() >= deadline`` (the time guide "Timed
        schedulers")."""
        return _TrioTimerSender(self, False, check_deadline(deadline))

    def _sx_try(self, q: object, default: object) -> object:
        if q is get_forward_progress_guarantee:
            return forward_progress_guarantee.weakly_parallel
        return default

    def __eq__(self, other: object) -> bool:
        if type(other) is _TrioScheduler:
            return other._run is self._run
        return NotImplemented  # let e.g. task_scheduler answer (symmetric equality, 23)

    def __hash__(self) -> int:
        return id(self._run)

    def __await__(self) -> NoReturn:
        raise TypeError(
            "a scheduler is not awaitable; to hop onto the trio thread, await "
            "sx.schedule(scheduler) (a sender)"
        )

    def __repr__(self) -> str:
        state = "finished" if self._run.finished else "running"
        return f"<trio_scheduler of a {state} trio run>"


_trio_bridge.scheduler_class = _TrioScheduler


def trio_scheduler() -> _TrioScheduler:
    """The scheduler of the trio run this is called in (the trio guide "The trio scheduler").

    ``sx.schedule(sch)`` gives a sender that completes on the trio thread of this run, after
    ``start`` has returned (never inline, so deep chains unwind the stack), in FIFO order of
    the starts, from any thread (off the trio thread through ``TrioToken.run_sync_soon``). It
    is infallible in the sense of P3941R1: asked with an environment whose stop token is
    unstoppable, its sender declares exactly ``completion_signatures(set_value_t())``; with a
    stoppable token it completes ``set_stopped()`` if stop was requested before it ran.
    The sender's attributes name this scheduler as ``get_completion_scheduler`` for
    ``set_value_t`` and ``set_stopped_t``.

    Every call in one run returns the same object; schedulers of the same run compare equal,
    those of different runs do not. ``get_forward_progress_guarantee(sch)`` is
    ``weakly_parallel``: trio runs its tasks cooperatively on one thread, so a task that
    blocks without awaiting blocks every other task (they are not ``concurrent`` agents).

    Raises ``RuntimeError`` when called outside ``trio.run``. Starting one of its operations
    after the run has finished raises ``RuntimeError`` in the starting thread (never a hang).
    ``await sx.schedule(sch)`` inside the run costs one trio checkpoint and, like a
    checkpoint, raises ``trio.Cancelled`` in a cancelled scope.

    It is a *timed* scheduler (the time guide "Timed schedulers"): ``sch.now()`` is the run's
    ``trio.current_time()``; ``sx.schedule_after(sch, s)``/``sx.schedule_at(sch, d)`` complete on
    the trio thread once the time has come (a ``trio.testing.MockClock`` drives them), from
    any thread; ``await sx.schedule_after(sch, s)`` in a task of the run is ``trio.sleep(s)``.
    """
    sch: _TrioScheduler = current_run().sched
    return sch


# --------------------------------------------------------------------------- fast awaits


def _await_schedule(sndr: _TrioScheduleSender, run: RunState) -> Generator[Any, Any, None] | None:
    """``await schedule(trio_scheduler())`` by a task of its own run: one checkpoint
    (``_fastpaths.FAST_AWAIT``; any other run takes the general path)."""
    if sndr._sch._run is not run:
        return None
    return _checkpoint().__await__()


def _await_timer(sndr: _TrioTimerSender, run: RunState) -> Generator[Any, Any, None] | None:
    """``await schedule_after/schedule_at(trio_scheduler(), t)`` by a task of its own run:
    trio's own sleep (a cancellation raises ``trio.Cancelled``, as on the general path)."""
    if sndr._sch._run is not run:
        return None
    if sndr._after:
        return trio.sleep(sndr._t).__await__()  # noqa: ASYNC105
    return trio.sleep_until(sndr._t).__await__()


register_fast_await(_TrioScheduleSender, _await_schedule)
register_fast_await(_TrioTimerSender, _await_timer)
