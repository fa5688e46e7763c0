"""``timeout`` and ``stop_after``: race a sender against a timer of the receiver's scheduler.

Extensions (not in the C++ draft), built on the race operation of ``_when_any``: the work is
child 0, the timer ``sch.schedule_after(seconds)`` child 1, and the first completion decides, as
in ``when_any``. The timer's ``set_value()`` arrives as ``set_error(TimeoutError(...))``
(``timeout``) or ``set_stopped()`` (``stop_after``); its ``set_stopped()`` (it was asked to stop:
the work finished first, or the receiver asked) arrives as ``set_stopped()``.

The clock is the scheduler of the receiver's environment (``get_scheduler``), which must be
*timed*: ``now()``, ``schedule_after(seconds)``, ``schedule_at(deadline)``. ``connect`` raises
``TypeError`` when there is none, saying how to provide one.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, NoReturn, TypeVar, overload

from .._core._adaptor_util import BinaryAdaptor, early_child
from .._core._args import real_seconds
from .._core._completion_signatures import completion_signatures, get_completion_signatures
from .._core._env import fwd_env, get_env
from .._core._protocol import Sender, WidenClosure
from .._core._queries import get_scheduler, query_or
from .._core._tags import set_error_t, set_stopped_t
from ._when_any import ERROR, STOPPED, RaceOp, RaceReceiver, child_env_for

if TYPE_CHECKING:
    from .._core._contracts import Env, Receiver
    from .._core._tags import _Signature
    from ._timed import TimedScheduler

__all__ = ["stop_after", "timeout"]

T = TypeVar("T")

_MISSING = object()


def is_timed_scheduler(sch: object) -> bool:
    """True for a scheduler with ``now()``, ``schedule_after(s)`` and ``schedule_at(t)``."""
    return all(callable(getattr(sch, m, None)) for m in ("now", "schedule_after", "schedule_at"))


def _check_seconds(name: str, seconds: object) -> float:
    if type(seconds) is float and seconds >= 0.0:  # the common case
        return seconds
    return real_seconds(seconds, f"{name}()", "seconds")


def _timed_scheduler_of(name: str, env: object) -> TimedScheduler:
    sch: TimedScheduler = query_or(env, get_scheduler, _MISSING)
    if sch is not _MISSING and is_timed_scheduler(sch):
        return sch
    what = (
        "the receiver's environment has no scheduler (get_scheduler)"
        if sch is _MISSING
        else f"the receiver's scheduler {sch!r} is not timed (it lacks now(), "
        "schedule_after() or schedule_at())"
    )
    raise TypeError(
        f"{name}() needs a timed scheduler as its clock, but {what}. Provide one: await the "
        "sender from a trio task (trio's scheduler), run it with sx.sync_wait (the run_loop's "
        "scheduler), or write one into the environment with "
        "sx.write_env(sndr, sx.prop(sx.get_scheduler, timed_sch))"
    )


class _TimerReceiver(RaceReceiver):
    """The timer's receiver: ``set_value()`` (the time passed) arrives as the timeout's
    completion; ``set_stopped()`` as stopped."""

    __slots__ = ("_seconds", "_stop")

    def __init__(self, op: RaceOp, seconds: float, stop: bool) -> None:
        super().__init__(op, 1)
        self._seconds = seconds
        self._stop = stop

    def set_value(self, *vals: object) -> None:
        if self._stop:
            RaceReceiver.set_stopped(self)
            return
        if self._done:
            RaceReceiver.set_value(self)  # raises completed_twice
        self._done = True
        err = TimeoutError(f"timeout: the work did not complete within {self._seconds:g} s")
        self._op._arrive(1, ERROR, err)

    def set_stopped(self) -> None:
        if self._done:
            RaceReceiver.set_stopped(self)  # raises completed_twice
        self._done = True
        self._op._arrive(1, STOPPED, None)


class _TimeoutSender(Sender[object]):
    __slots__ = ("_child", "_seconds")
    _stop = False

    def __init__(self, child: object, seconds: float) -> None:
        self._child = child
        self._seconds = seconds

    def connect(self, rcvr: Receiver) -> RaceOp:
        name = "stop_after" if self._stop else "timeout"
        sch = _timed_scheduler_of(name, get_env(rcvr))
        timer = sch.schedule_after(self._seconds)
        op = RaceOp(rcvr, 2, -1, name)
        op.connect_children(
            (self._child, timer),
            [RaceReceiver(op, 0), _TimerReceiver(op, self._seconds, self._stop)],
        )
        return op

    def get_env(self) -> Env:
        return fwd_env(get_env(self._child))

    def get_completion_signatures(self, env: object = None) -> completion_signatures | None:
        """The work's, plus ``set_error_t(TimeoutError)`` (``timeout``) and ``set_stopped_t()``."""
        sigs = get_completion_signatures(self._child, child_env_for(env))
        if sigs is None:
            return None
        extra: list[_Signature] = [set_stopped_t()]
        if not self._stop:
            extra.append(set_error_t(TimeoutError))
        return sigs | completion_signatures(*extra)

    @property
    def data(self) -> object:
        return self._seconds

    @property
    def children(self) -> tuple[object, ...]:
        return (self._child,)

    def __repr__(self) -> str:
        return f"{self.tag!r}({self._child!r}, {self._seconds:g})"


class _StopAfterSender(_TimeoutSender):
    __slots__ = ()
    _stop = True


class _TimedAdaptor(BinaryAdaptor):
    """What ``timeout`` and ``stop_after`` share: ``adaptor(sndr, seconds)`` or, piped,
    ``sndr | adaptor(seconds)``; ``seconds`` checked when the sender is built."""

    __slots__ = ()
    _arg = "seconds"
    _sender: type[_TimeoutSender]

    @overload
    def __call__(self, seconds: float, /) -> WidenClosure[NoReturn]: ...
    @overload
    def __call__(self, sndr: Awaitable[T], seconds: float, /) -> Sender[T]: ...
    def __call__(self, *args: object) -> object:
        return self._build(args)

    def _check_arg(self, seconds: object) -> None:
        if isinstance(seconds, Sender):  # timeout(sndr): the seconds are missing
            raise TypeError(
                f"{self._name}() takes (sender, seconds) or (seconds): seconds is missing"
            )
        _check_seconds(self._name, seconds)

    def _make(self, sndr: object, seconds: object) -> Sender[object]:
        s = _check_seconds(self._name, seconds)
        return early_child(sndr, self._sender(sndr, s))


class timeout_t(_TimedAdaptor):
    """``timeout(sndr, seconds)`` / ``sndr | timeout(seconds)``: fail with ``TimeoutError`` when
    ``sndr`` takes longer than ``seconds``.

    An extension (not in the C++ draft) built like ``when_any`` (modelled on stdexec's
    ``exec/when_any.hpp``) with the children's stop token of [exec.when.all]. The trio
    equivalent is ``with trio.fail_after(seconds):``. At ``start`` the work is started, then a
    timer ``sch.schedule_after(seconds)`` of the receiver's scheduler (``get_scheduler``, which
    must be timed: ``now()``, ``schedule_after()``, ``schedule_at()``). The first completion
    decides: the work's (passed through) or the timer's, ``set_error(TimeoutError(...))``; the
    other one gets a stop request, and the result is delivered only after both have completed.
    So work that ignores the stop request delays the ``TimeoutError`` until it completes (no
    orphan work), and what it then sends is discarded. Ties: the work and the timer due at the
    same instant: the one whose completion arrives first wins; a clock that fires equal
    deadlines in the order they were scheduled lets work scheduled before the timer win.

    Raises ``TypeError`` at call for a non-sender or non-number ``seconds``, ``ValueError`` for
    negative or NaN ``seconds``, ``TypeError`` at ``connect`` when the receiver's environment has
    no timed scheduler (the message says how to provide one).

    Completion signatures: the work's, plus ``set_error_t(TimeoutError)`` and
    ``set_stopped_t()``.

    Errors: the work's errors; ``TimeoutError`` when the time passed first (an exception the
    work then completes with is attached to it as a note).

    Cancellation: a stop request on the receiver's token stops the work and the timer; the
    result is ``set_stopped()`` unless the work or the timer had completed before.

    Example:

    >>> import structexec as sx
    >>> sx.just(1) | sx.timeout(5)
    timeout(just(1), 5)
    """

    __slots__ = ()
    _name = "timeout"
    _sender = _TimeoutSender


class stop_after_t(_TimedAdaptor):
    """``stop_after(sndr, seconds)`` / ``sndr | stop_after(seconds)``: stop ``sndr`` after
    ``seconds``; complete ``set_stopped()`` if the time passed first.

    An extension (not in the C++ draft) built like ``when_any`` (modelled on stdexec's
    ``exec/when_any.hpp``) with the children's stop token of [exec.when.all]. The trio
    equivalent is ``with trio.move_on_after(seconds):`` (the ``set_stopped()`` is the "moved
    on"; ``sx.stopped_as_optional`` turns it into ``None``). Same rules as ``timeout``, with
    ``set_stopped()`` instead of ``TimeoutError``: the first completion decides, the other side
    gets a stop request, and the result is delivered after both have completed.

    Raises ``TypeError`` at call for a non-sender or non-number ``seconds``, ``ValueError`` for
    negative or NaN ``seconds``, ``TypeError`` at ``connect`` when the receiver's environment has
    no timed scheduler.

    Completion signatures: the work's, plus ``set_stopped_t()``.

    Errors: the work's errors, when the work completes first.

    Cancellation: a stop request on the receiver's token stops the work and the timer; the
    result is ``set_stopped()`` unless the work completed before.

    Example:

    >>> import structexec as sx
    >>> sx.just(1) | sx.stop_after(0.5)
    stop_after(just(1), 0.5)
    """

    __slots__ = ()
    _name = "stop_after"
    _sender = _StopAfterSender


timeout = timeout_t()
stop_after = stop_after_t()
_TimeoutSender.tag = timeout
_StopAfterSender.tag = stop_after
