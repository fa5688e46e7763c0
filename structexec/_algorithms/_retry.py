"""``retry``: an extension modelled on libunifex's ``retry_when`` (no [exec.*] section
specifies it).

The attempts and the waits between them are iterations of the loop of ``_repeat``
(:class:`~structexec._algorithms._repeat.LoopOp`): an attempt that fails with a retryable error
is followed by a timer sender ``sch.schedule_after(seconds)`` of the *timed* scheduler of the
receiver's environment (``get_scheduler``), then by the next attempt. A timed scheduler has
``now() -> float``, ``schedule_after(seconds)`` and ``schedule_at(deadline)``; its timer
senders complete ``set_value()`` when due and ``set_stopped()`` at once on a stop request.
Without a delay no scheduler is needed and the next attempt starts at once (inline attempts
then loop in constant stack, as ``repeat_n`` does).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable
from typing import TYPE_CHECKING, NoReturn, TypeVar, overload

from .._core._adaptor_util import check_sender, early_child
from .._core._args import real_seconds
from .._core._completion_signatures import completion_signatures, get_completion_signatures
from .._core._env import fwd_env, get_env
from .._core._protocol import Algorithm, Closure, Sender, WidenClosure
from .._core._queries import _MISSING, get_scheduler, query_or
from .._core._tags import set_error_t, set_stopped_t
from ._repeat import _DONE, LoopOp, check_count

if TYPE_CHECKING:
    from .._core._contracts import Env, Receiver
    from .._core._tags import _Signature
    from ._timed import TimedScheduler


__all__ = ["retry"]

T = TypeVar("T")


def _timed_scheduler(env: object, delay: float) -> TimedScheduler:
    """The timed scheduler of ``env`` (``get_scheduler``), or ``TypeError`` saying how to
    provide one."""
    sch: TimedScheduler = query_or(env, get_scheduler, _MISSING)
    if sch is not _MISSING and callable(getattr(sch, "schedule_after", None)):
        return sch
    what = (
        "has no scheduler (get_scheduler)"
        if sch is _MISSING
        else f"has the scheduler {sch!r}, which is not timed (it has no schedule_after())"
    )
    raise TypeError(
        f"retry(delay={delay!r}) waits between attempts on the timed scheduler of the receiver's "
        f"environment, but the environment {what}. Provide a timed scheduler (one with now(), "
        "schedule_after() and schedule_at()), e.g. sndr | sx.retry(...) | "
        "sx.write_env(sx.prop(sx.get_scheduler, timed_sch)), or run the retry on it with "
        "sx.starts_on(timed_sch, ...); or use delay=0"
    )


class _RetryOp(LoopOp):
    __slots__ = ("_child", "_k", "_left", "_params", "_sch", "_waiting")

    def __init__(self, rcvr: Receiver, sndr: _RetrySender) -> None:
        self._child = sndr._child
        self._params = sndr
        self._left = sndr._attempts  # attempts left including the running one; None: unlimited
        self._k = 0  # retries so far
        self._waiting = False  # the running iteration is the timer
        self._sch = _timed_scheduler(get_env(rcvr), sndr._delay) if sndr._delay > 0 else None
        LoopOp.__init__(self, rcvr, sndr._child)

    def set_value(self, *vals: object) -> None:
        self._completed("set_value")
        if self._waiting:  # the delay is over: the next attempt
            self._waiting = False
            self._next = self._child
            self._again()
            return
        self._state = _DONE
        self._rcvr.set_value(*vals)

    def set_error(self, err: object) -> None:
        self._completed("set_error")
        p = self._params
        left = self._left
        if self._waiting or not isinstance(err, p._retry_on) or (left is not None and left <= 1):
            self._finish_error(err)
            return
        if left is not None:
            self._left = left - 1
        k = self._k
        self._k = k + 1
        delay = p._delay
        if delay > 0:
            try:
                d = delay * p._backoff**k
            except OverflowError:
                d = math.inf
            if d > 0:
                try:
                    sch = self._sch
                    self._next = sch.schedule_after(d)  # type: ignore[union-attr]
                except Exception as e:
                    self._finish_error(e)
                    return
                self._waiting = True
                self._again()
                return
        self._next = self._child
        self._again()


class _RetrySender(Sender[object]):
    __slots__ = ("_attempts", "_backoff", "_child", "_delay", "_retry_on")

    def __init__(
        self,
        child: object,
        attempts: int | None,
        delay: float,
        backoff: float,
        retry_on: type[BaseException] | tuple[type[BaseException], ...],
    ) -> None:
        self._child = child
        self._attempts = attempts
        self._delay = delay
        self._backoff = backoff
        self._retry_on = retry_on

    def connect(self, rcvr: Receiver) -> _RetryOp:
        return _RetryOp(rcvr, self)

    def get_env(self) -> Env:
        return fwd_env(get_env(self._child))

    @property
    def children(self) -> tuple[object, ...]:
        return (self._child,)

    @property
    def data(self) -> object:
        return (self._attempts, self._delay, self._backoff, self._retry_on)

    def get_completion_signatures(self, env: object = None) -> completion_signatures | None:
        """The child's signatures, ``set_stopped_t()``, and with a delay the timer's errors."""
        cs = get_completion_signatures(self._child, None if env is None else fwd_env(env))
        if cs is None:
            return None
        extra: list[_Signature] = [set_stopped_t()]
        if self._delay > 0 and env is not None:
            sch = query_or(env, get_scheduler, _MISSING)
            after = getattr(sch, "schedule_after", None)
            if callable(after):
                tcs = get_completion_signatures(after(self._delay), fwd_env(env))
                if tcs is not None:
                    extra += [s for s in tcs if type(s) is set_error_t]
        return cs | completion_signatures(*extra)

    def __repr__(self) -> str:
        return (
            f"retry({self._child!r}, attempts={self._attempts!r}, delay={self._delay!r}, "
            f"backoff={self._backoff!r}, retry_on={self._retry_on!r})"
        )


def _check_seconds(name: str, x: object) -> float:
    return real_seconds(x, "retry()", name, inf=False)


def _check_retry_on(x: object) -> type[BaseException] | tuple[type[BaseException], ...]:
    if isinstance(x, type) and issubclass(x, BaseException):
        return x
    if (
        isinstance(x, tuple)
        and x
        and all(isinstance(c, type) and issubclass(c, BaseException) for c in x)
    ):
        return x
    raise TypeError(
        f"retry(): retry_on must be an exception class or a non-empty tuple of them, got {x!r}"
    )


class retry_t(Algorithm):
    """``retry(sndr, attempts=None, delay=0.0, backoff=1.0, retry_on=Exception)``: run ``sndr``
    again after a retryable error.

    An extension modelled on libunifex's ``retry_when`` (no [exec.*] section specifies it; it
    is an adaptor in the sense of [exec.adapt]). ``sndr`` runs; on ``set_error(e)`` where ``e``
    is an instance of ``retry_on`` (a class or a tuple of classes) and attempts remain, it waits
    ``delay * backoff**k`` seconds (``k``: retries so far, so the first wait is ``delay``) and
    runs ``sndr`` again. ``attempts`` counts every run, the first included (``None``: no
    limit). Values, stopped, other errors and the last attempt's error pass through.
    ``sndr | sx.retry(attempts=3)`` pipes; ``sx.retry()`` is a closure with the defaults.

    The wait uses the *timed* scheduler of the receiver's environment (``get_scheduler``,
    [exec.get.scheduler]): ``sch.schedule_after(seconds)``. It is needed only when
    ``delay > 0``; ``connect`` then raises ``TypeError`` when the environment has no scheduler
    or one without ``schedule_after``. With ``delay == 0`` (or ``backoff == 0`` after the first
    wait) the next attempt starts at once. A wait that overflows a float is infinite.

    Completion signatures: the child's (values, errors, stopped) and ``set_stopped_t()``;
    with a delay, also the error signatures of the timer sender when the environment is known;
    ``None`` when the child's are unknown.

    Errors: errors that are not retried, and the last attempt's error, pass through; an error
    of the timer sender ends the retry with it. An exception from the first attempt's
    ``start()`` propagates; an ``Exception`` from the ``start()`` of a later attempt or of a
    wait (made on behalf of a completion) ends the retry with ``set_error`` (not retried).
    At build: ``TypeError`` for a non-sender,
    a non-``int`` ``attempts``, a non-number ``delay``/``backoff`` (``int``, ``float``,
    ``Fraction``, ``Decimal``... as every time of the library; not ``bool`` or ``str``), an
    unknown keyword or a ``retry_on`` that is not an exception class or a tuple of them;
    ``ValueError`` for ``attempts < 1`` and for a negative, NaN, infinite or too large
    ``delay`` or ``backoff`` (``backoff`` may be below 1: shrinking waits).

    Cancellation: each attempt and each wait sees the receiver's stop token; a stop request
    during a wait completes ``set_stopped()`` at once (the timer stops), one between attempts
    completes ``set_stopped()`` instead of the next attempt.

    Example:

    >>> import structexec as sx
    >>> tries = []
    >>> def flaky():
    ...     tries.append(1)
    ...     if len(tries) < 3:
    ...         raise ConnectionError("try again")
    ...     return "ok"
    >>> sx.sync_wait(sx.just() | sx.then(flaky) | sx.retry(attempts=5))
    ('ok',)
    >>> len(tries)
    3
    """

    __slots__ = ()
    _name = "retry"

    @overload
    def __call__(
        self,
        /,
        *,
        attempts: int | None = None,
        delay: float = 0.0,
        backoff: float = 1.0,
        retry_on: type[BaseException] | tuple[type[BaseException], ...] = Exception,
    ) -> WidenClosure[NoReturn]: ...
    @overload
    def __call__(
        self,
        sndr: Awaitable[T],
        /,
        *,
        attempts: int | None = None,
        delay: float = 0.0,
        backoff: float = 1.0,
        retry_on: type[BaseException] | tuple[type[BaseException], ...] = Exception,
    ) -> Sender[T]: ...
    def __call__(
        self,
        *args: object,
        attempts: object = None,
        delay: object = 0.0,
        backoff: object = 1.0,
        retry_on: object = Exception,
        **unknown: object,
    ) -> object:
        if unknown:
            raise TypeError(
                f"retry() got an unexpected keyword argument {next(iter(unknown))!r}; it takes "
                "one sender (or none, for a closure) and the keywords attempts, delay, backoff "
                "and retry_on"
            )
        if len(args) > 1:
            raise TypeError(
                f"retry() takes one sender and keyword arguments, got {len(args)} positional "
                "arguments"
            )
        n = None if attempts is None else check_count("retry", "attempts", attempts, 1)
        d = _check_seconds("delay", delay)
        b = _check_seconds("backoff", backoff)
        on = _check_retry_on(retry_on)

        def make(sndr: object) -> Sender[object]:
            r: Sender[object] = early_child(sndr, _RetrySender(sndr, n, d, b, on))
            return r

        if not args:
            return Closure(make)
        check_sender("retry", "sndr", args[0])
        return make(args[0])


retry = retry_t()
_RetrySender.tag = retry
