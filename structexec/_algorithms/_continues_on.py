"""``continues_on`` and ``schedule_from`` ([exec.continues.on], [exec.schedule.from]).

[exec.continues.on], [exec.schedule.from]. ``continues_on(sndr, sch)`` starts ``sndr`` where it is
started and delivers every completion (value, error and stopped) on an agent of ``sch``. At
``connect`` it becomes ``schedule_from(sch, sndr)``; its late domain is the destination scheduler's
([exec.snd.expos]), so a scheduler can customise the transition onto itself. The scheduling
operation is created at ``connect`` ([exec.schedule.from]); when the child completes its result is
stored and the scheduling operation is started ([exec.schedule.from]); the stored result is replayed
when the scheduling operation succeeds ([exec.schedule.from]), and discarded when it fails or is
stopped, in which case that error or stop goes to the receiver instead ([exec.schedule.from]). The
scheduling operation sees the receiver's stop token ([exec.schedule.from]).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn, TypeVar, overload

from .._core._adaptor_util import (
    BinaryAdaptor,
    ChildOp,
    SchedulerAdaptorSender,
    check_scheduler,
    check_sender,
    close_op,
    early,
    early_child,
    sched_domain,
    with_schedule_failures,
)
from .._core._completion_signatures import completion_signatures, get_completion_signatures
from .._core._connect import connect_unchecked as connect
from .._core._env import fwd_env, get_env, join_env, sched_attrs
from .._core._protocol import Algorithm, Sender, WidenClosure, completed_twice
from .._core._trampoline import trampoline_start

if TYPE_CHECKING:
    from .._core._contracts import Env, OperationState, Receiver

__all__ = ["continues_on", "schedule_from"]

T = TypeVar("T")
_VALUE, _ERROR, _STOPPED = 0, 1, 2


class _SchedReceiver:
    """Receiver of the scheduling operation ([exec.schedule.from] ``receiver-type``)."""

    __slots__ = ("_op",)

    def __init__(self, op: _ScheduleFromOp) -> None:
        self._op = op

    def get_env(self) -> object:
        return fwd_env(get_env(self._op._rcvr))

    def set_value(self, *vals: object) -> None:
        # Replay the stored completion on the scheduler's agent ([exec.schedule.from]).
        op = self._op
        kind = op._kind
        data = op._data
        op._data = op._sched_op = None  # done with it: no op <-> receiver cycle afterwards
        if kind == _VALUE:
            op._rcvr.set_value(*data)
        elif kind == _ERROR:
            op._rcvr.set_error(data)
        else:
            op._rcvr.set_stopped()

    def set_error(self, err: object) -> None:
        # The scheduling failure wins; the stored result is discarded ([exec.schedule.from]).
        op = self._op
        op._data = op._sched_op = None
        op._rcvr.set_error(err)

    def set_stopped(self) -> None:
        op = self._op
        op._data = op._sched_op = None
        op._rcvr.set_stopped()


class _ScheduleFromOp(ChildOp):
    """The operation; it is also the child's receiver (``_op`` is the child's operation)."""

    __slots__ = ("_data", "_kind", "_sched_op")

    def __init__(self, rcvr: Receiver) -> None:
        self._rcvr = rcvr
        self._state = 0
        self._kind = _VALUE
        self._data: Any = None  # the values tuple or the error datum, delivered on sch
        self._op = None
        self._sched_op: OperationState | None = None

    def close(self) -> None:
        """Never started: close the child's and the scheduling operation
        (the senders guide "Writing your own sender")."""
        if self._state == 0:
            ChildOp.close(self)
            sched_op, self._sched_op = self._sched_op, None
            close_op(sched_op)

    def set_value(self, *vals: object) -> None:
        if self._state == 2:
            raise completed_twice(self, "set_value")
        self._state = 2
        self._op = None
        self._data = vals
        trampoline_start(self._sched_op, self)  # type: ignore[arg-type]

    def set_error(self, err: object) -> None:
        if self._state == 2:
            raise completed_twice(self, "set_error")
        self._state = 2
        self._op = None
        self._kind = _ERROR
        self._data = err
        trampoline_start(self._sched_op, self)  # type: ignore[arg-type]

    def set_stopped(self) -> None:
        if self._state == 2:
            raise completed_twice(self, "set_stopped")
        self._state = 2
        self._op = None
        self._kind = _STOPPED
        trampoline_start(self._sched_op, self)  # type: ignore[arg-type]

    def _sx_start_failed(self, exc: Exception) -> None:
        """The start sink of the scheduling operation (``_trampoline``, also for a start
        queued by the trampoline): its start raised without completing it (the scheduler
        cannot take work any more, e.g. a trio scheduler whose run has finished): that is
        the scheduling failure, sent to the receiver in place of the stored result
        ([exec.schedule.from]), instead of an exception out of a completion. If the
        scheduling operation did complete (its receiver ran and cleared ``_sched_op``, and
        what it called raised), the exception is not ours to turn into a completion: it
        propagates."""
        if self._sched_op is None:
            raise exc
        self._data = self._sched_op = None
        self._rcvr.set_error(exc)


class _ScheduleFromBase(SchedulerAdaptorSender):
    __slots__ = ()

    def __init__(self, sch: object, child: object) -> None:
        self._sch = sch  # type: ignore[assignment]
        self._child = child

    def connect(self, rcvr: Receiver) -> _ScheduleFromOp:
        op = _ScheduleFromOp(rcvr)
        # The scheduling operation is part of the state, created at connect ([exec.schedule.from]).
        op._sched_op = connect(self._sch.schedule(), _SchedReceiver(op))
        op._op = connect(self._child, op)
        return op

    def get_env(self) -> Env:
        """``JOIN-ENV(SCHED-ATTRS(sch), FWD-ENV(get_env(child)))`` ([exec.continues.on])."""
        return join_env(sched_attrs(self._sch), fwd_env(get_env(self._child)))

    def _sx_late_domain(self) -> object:
        """The destination scheduler's domain ([exec.snd.expos])."""
        return sched_domain(self._sch)

    def get_completion_signatures(self, env: object = None) -> completion_signatures | None:
        """The child's signatures plus the scheduling sender's error and stopped ones."""
        fenv = None if env is None else fwd_env(env)
        return with_schedule_failures(get_completion_signatures(self._child, fenv), self._sch, fenv)

    def __repr__(self) -> str:
        return f"{self.tag!r}({self._child!r}, {self._sch!r})"


class _ScheduleFromSender(_ScheduleFromBase):
    __slots__ = ()

    def __repr__(self) -> str:
        return f"schedule_from({self._sch!r}, {self._child!r})"


class _ContinuesOnSender(_ScheduleFromBase):
    __slots__ = ()


class schedule_from_t(Algorithm):
    """``schedule_from(sch, sndr)``: complete ``sndr``'s result on ``sch`` ([exec.schedule.from]).

    [exec.schedule.from]. The building block of ``continues_on`` (and of ``affine_on``); user code
    normally writes ``continues_on``. ``sndr`` starts on the current agent; when it completes, its
    result is kept and ``schedule(sch)`` (connected at ``connect`` time, [exec.schedule.from], with
    the receiver's stop token, [exec.schedule.from]) is started; on its success the kept result is
    delivered on ``sch``'s agent; if the scheduling completes with an error or stopped, that is
    delivered instead and the kept result is dropped ([exec.schedule.from]). Not pipeable.

    Completion signatures: the child's, plus the error and stopped signatures of
    ``schedule(sch)`` ([exec.schedule.from]).

    Errors: as ``continues_on``.

    Cancellation: as ``continues_on``.

    Example:

    >>> import structexec as sx
    >>> sx.sync_wait(sx.schedule_from(sx.inline_scheduler(), sx.just(1)))
    (1,)
    """

    __slots__ = ()

    def __call__(self, sch: object, sndr: Sender[T]) -> Sender[T]:
        check_scheduler("schedule_from", "sch", sch)
        check_sender("schedule_from", "sndr", sndr)
        r: Sender[T] = early(sched_domain(sch), _ScheduleFromSender(sch, sndr))
        return r


class continues_on_t(BinaryAdaptor):
    """``continues_on(sndr, sch)`` / ``sndr | continues_on(sch)``: finish on ``sch``.

    [exec.continues.on]. ``sndr`` is started on the current agent; value, error and stopped
    completions are all delivered on an agent of ``sch`` (a trio user's "hop to that thread, then
    continue"). Attributes: ``get_completion_scheduler`` for ``set_value_t`` and ``set_stopped_t``
    is ``sch``, for ``set_error_t`` it is the child's ([exec.continues.on]), because a failing
    ``schedule`` reports its error on an unspecified agent ([exec.on], [exec.starts.on],
    [exec.continues.on]). At ``connect`` it becomes ``schedule_from(sch, sndr)``; the domain
    consulted is ``sch``'s ([exec.snd.expos]). Raises ``TypeError`` for a non-sender or a
    non-scheduler.

    Completion signatures: the child's, plus the error and stopped signatures of
    ``schedule(sch)`` ([exec.continues.on]).

    Errors: the child's errors are delivered on ``sch``; an error of the hop itself is delivered
    on an unspecified agent.

    Cancellation: the receiver's stop token reaches the child and the hop; a stopped hop
    completes ``set_stopped()``.

    Example:

    >>> import structexec as sx
    >>> sx.sync_wait(sx.just(1) | sx.continues_on(sx.inline_scheduler()))
    (1,)
    """

    __slots__ = ()
    _name = "continues_on"
    _arg = "sch"

    @overload
    def __call__(self, sch: object, /) -> WidenClosure[NoReturn]: ...
    @overload
    def __call__(self, sndr: Sender[T], sch: object, /) -> Sender[T]: ...
    def __call__(self, *args: object) -> object:
        return self._build(args)

    def _check_arg(self, sch: object) -> None:
        check_scheduler("continues_on", "sch", sch)

    def _make(self, sndr: object, sch: object) -> Sender[object]:
        check_scheduler("continues_on", "sch", sch)
        return early_child(sndr, _ContinuesOnSender(sch, sndr))

    def transform_sender(self, sndr: object, env: object = None) -> object:
        """The late lowering ``continues_on(sndr, sch)`` → ``schedule_from(sch, sndr)``
        ([exec.snd.transform])."""
        if env is None or not isinstance(sndr, _ContinuesOnSender):
            return sndr
        return _ScheduleFromSender(sndr._sch, sndr._child)


schedule_from = schedule_from_t()
continues_on = continues_on_t()
_ScheduleFromSender.tag = schedule_from
_ContinuesOnSender.tag = continues_on
