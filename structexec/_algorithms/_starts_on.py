"""``starts_on(sch, sndr)`` ([exec.starts.on]).

Start ``sndr`` on an agent of ``sch``; the completion is not transferred back ([exec.starts.on]).
The child's receiver environment is ``JOIN-ENV(SCHED-ENV(sch), FWD-ENV(env))``, so it sees
``get_scheduler == sch`` and ``sch``'s domain ([exec.starts.on]).

The draft lowers ``starts_on`` to ``let_value(schedule(sch), lambda: sndr)`` at ``connect``.
This module implements that lowering directly, with the same observable behaviour
([exec.starts.on]): ``schedule(sch)`` runs with the receiver's stop token; its error or stopped
completion is the result and ``sndr`` is never started; otherwise ``sndr`` is started, through
the trampoline, on the scheduler's agent. If that start raises an ``Exception`` (a scheduler
that no longer takes work, a broken sender) the exception is the result, ``set_error``, instead
of escaping the scheduling operation's completion. One difference is deliberate: ``sndr`` is
*connected* when the ``starts_on`` sender is connected (connecting runs no user code), so what
C++ rejects at compile time (an unsupported ``read_env`` query, ``on`` without a scheduler, ...)
raises ``TypeError`` from ``connect`` rather than arriving as ``set_error`` (the adaptors
guide). For the same reason ``starts_on`` has no default ``transform_sender``; a custom domain
still sees the ``starts_on`` sender (tag ``starts_on``, ``data`` the scheduler) and may replace
it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from .._core._adaptor_util import (
    ChildOp,
    SchedulerAdaptorSender,
    check_scheduler,
    check_sender,
    close_op,
    early,
    sched_domain,
    with_schedule_failures,
)
from .._core._completion_signatures import completion_signatures, get_completion_signatures
from .._core._connect import connect_unchecked as connect
from .._core._env import fwd_env, get_env, join_env, sched_env
from .._core._protocol import Algorithm, Sender, completed_twice
from .._core._trampoline import trampoline_start

if TYPE_CHECKING:
    from .._core._contracts import Env, OperationState, Receiver, Sched

__all__ = ["starts_on"]

T = TypeVar("T")


class _ChildReceiver:
    """The child's receiver: environment ``JOIN-ENV(SCHED-ENV(sch), FWD-ENV(env))``
    ([exec.starts.on]); each completion notes itself in ``_done``, then forwards.

    It is also the child's start sink (``_trampoline``): a child whose ``start`` raises an
    ``Exception`` before completing never started, and the exception is the result; if it
    did complete (``_done``: a contract violation, or the receiver's own completion raised),
    the exception propagates instead of producing a second completion.
    """

    __slots__ = ("_done", "_env", "_rcvr")

    def __init__(self, rcvr: Receiver, sch: Sched) -> None:
        self._rcvr = rcvr
        self._env = join_env(sched_env(sch), fwd_env(get_env(rcvr)))
        self._done = False

    def get_env(self) -> Env:
        return self._env

    def set_value(self, *vals: object) -> None:
        self._done = True
        self._rcvr.set_value(*vals)

    def set_error(self, err: object) -> None:
        self._done = True
        self._rcvr.set_error(err)

    def set_stopped(self) -> None:
        self._done = True
        self._rcvr.set_stopped()

    def _sx_start_failed(self, exc: Exception) -> None:
        if self._done:
            raise exc
        self._done = True
        self._rcvr.set_error(exc)


class _StartsOnOp(ChildOp):
    """The operation; it is also the receiver of ``schedule(sch)`` (its operation is ``_op``).

    A failed or stopped scheduling operation is the result; the child never starts
    ([exec.starts.on]).
    """

    __slots__ = ("_child_op", "_child_rcvr")

    def __init__(self, rcvr: Receiver) -> None:
        self._rcvr = rcvr
        self._state = 0
        self._op = None
        self._child_op: OperationState | None = None
        self._child_rcvr: _ChildReceiver | None = None

    def set_value(self, *vals: object) -> None:
        if self._state == 2:
            raise completed_twice(self, "set_value")
        self._state = 2
        self._op = None
        # An Exception from the child's start becomes its set_error (_ChildReceiver).
        trampoline_start(self._child_op, self._child_rcvr)  # type: ignore[arg-type]

    # The child will never start: close its operation now
    # (docs/senders.md "Writing your own sender"), then complete.

    def _drop_child(self) -> None:
        op, self._child_op = self._child_op, None
        if op is not None:
            close_op(op)

    def set_error(self, err: object) -> None:
        if self._state != 2:
            self._drop_child()
        ChildOp.set_error(self, err)

    def set_stopped(self) -> None:
        if self._state != 2:
            self._drop_child()
        ChildOp.set_stopped(self)

    def close(self) -> None:
        """Never started: close the scheduling operation and the child's
        (the senders guide "Writing your own sender")."""
        if self._state == 0:
            ChildOp.close(self)
            self._drop_child()


class _StartsOnSender(SchedulerAdaptorSender):
    __slots__ = ()

    def __init__(self, sch: object, child: object) -> None:
        self._sch = sch  # type: ignore[assignment]
        self._child = child

    def connect(self, rcvr: Receiver) -> _StartsOnOp:
        op = _StartsOnOp(rcvr)
        op._op = connect(self._sch.schedule(), op)
        # The child's receiver: env JOIN-ENV(SCHED-ENV(sch), FWD-ENV(env)) ([exec.starts.on]).
        cr = op._child_rcvr = _ChildReceiver(rcvr, self._sch)
        op._child_op = connect(self._child, cr)
        return op

    def get_completion_signatures(self, env: object = None) -> completion_signatures | None:
        """The child's signatures (in the child's environment) plus the scheduling sender's
        error and stopped ones."""
        senv = sched_env(self._sch)
        cenv = senv if env is None else join_env(senv, fwd_env(env))
        child = get_completion_signatures(self._child, cenv)
        return with_schedule_failures(child, self._sch, None if env is None else fwd_env(env))

    def __repr__(self) -> str:
        return f"starts_on({self._sch!r}, {self._child!r})"


class starts_on_t(Algorithm):
    """``starts_on(sch, sndr)``: start ``sndr`` on an agent of ``sch`` ([exec.starts.on]).

    [exec.starts.on]. ``sndr`` completes wherever it completes (nothing transfers it back; use
    ``on(sch, sndr)`` for a round trip). Inside, ``read_env(get_scheduler)`` is ``sch``. If
    ``schedule(sch)`` fails or is stopped (it sees the receiver's stop token), that is the result
    and ``sndr`` never starts. The domain used at construction is ``sch``'s ([exec.starts.on]).
    Raises ``TypeError`` for a non-scheduler or a non-sender; not pipeable
   .

    Completion signatures: the child's, plus the error and stopped signatures of
    ``schedule(sch)`` ([exec.starts.on]).

    Errors: an error of ``schedule(sch)`` is the result and ``sndr`` never starts; the child's
    errors pass through; an ``Exception`` raised by the child's ``start`` (made inside the
    scheduling completion, maybe on another thread) is the result, ``set_error``.

    Cancellation: ``schedule(sch)`` and the child see the receiver's stop token; a stopped
    schedule operation completes ``set_stopped()``.

    Example:

    >>> import structexec as sx
    >>> sx.sync_wait(sx.starts_on(sx.inline_scheduler(), sx.just(1)))
    (1,)
    """

    __slots__ = ()

    def __call__(self, sch: object, sndr: Sender[T]) -> Sender[T]:
        check_scheduler("starts_on", "sch", sch)
        check_sender("starts_on", "sndr", sndr)
        r: Sender[T] = early(sched_domain(sch), _StartsOnSender(sch, sndr))
        return r

    def transform_env(self, sndr: Sender[object], env: object) -> object:
        """``JOIN-ENV(SCHED-ENV(sch), FWD-ENV(env))`` ([exec.starts.on])."""
        return join_env(sched_env(sndr.data), fwd_env(env))  # type: ignore[arg-type]


starts_on = starts_on_t()
_StartsOnSender.tag = starts_on
