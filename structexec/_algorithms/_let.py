"""``let_value``, ``let_error``, ``let_stopped`` ([exec.let]).

On the matching completion the datums are kept in the operation state, ``f(*datums)`` returns
a second sender, which is connected and started; its completion is the result ([exec.let]).
The second operation is started through the trampoline and the receivers of nested ``let``
operations collapse when they add nothing to the environment, so a recursive ``let_value``
loop of 100,000 iterations that completes inline needs neither 100,000 stack frames nor a
chain of 100,000 forwarding receivers (P3552R1 4.10).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar, overload

from .._core._adaptor_util import ChildOp, FnAdaptor, UnarySender
from .._core._connect import connect_unchecked as connect
from .._core._domain import completion_domain
from .._core._env import EMPTY_ENV, fwd_env, get_env, join_env, prop, sched_env
from .._core._protocol import (
    MapClosure,
    Sender,
    WidenClosure,
    completed_twice,
    is_sender,
)
from .._core._queries import _MISSING, get_completion_scheduler, get_domain, query_or
from .._core._tags import set_error_t, set_stopped_t, set_value_t
from .._core._trampoline import trampoline_start

if TYPE_CHECKING:
    from .._core._contracts import OperationState, Receiver

__all__ = ["let_error", "let_stopped", "let_value"]

R = TypeVar("R")
T = TypeVar("T")
# ``bound=Any``: see ``_then.py`` (unannotated lambdas under pyright; docs/typing.md).
A = TypeVar("A", bound=Any)
B = TypeVar("B", bound=Any)
C = TypeVar("C", bound=Any)
D = TypeVar("D", bound=Any)
E = TypeVar("E", bound=Any)
F = TypeVar("F", bound=Any)
_VALUE, _ERROR, _STOPPED = 0, 1, 2
_TAGS = (set_value_t, set_error_t, set_stopped_t)


class _LetReceiver2:
    """``receiver2``: forwards to the outer receiver, env ``JOIN-ENV(let-env, FWD-ENV(env))``.

    ``_holder`` is the let operation whose ``_op2`` keeps alive the operation that completes
    to this receiver (see :meth:`_LetOp._matched`).
    """

    __slots__ = ("_holder", "_letenv", "_rcvr")

    def __init__(self, rcvr: Receiver, letenv: object, holder: _LetOp | None = None) -> None:
        self._rcvr = rcvr
        self._letenv = letenv
        self._holder = holder

    def get_env(self) -> object:
        return join_env(self._letenv, fwd_env(get_env(self._rcvr)))  # type: ignore[arg-type]

    # Each completion first forgets the holder: holder -> its _op2 -> ... -> this receiver ->
    # holder is a reference cycle, which must not outlive the work (reference counting, not
    # the cycle collector, frees a finished let).

    def set_value(self, *vals: object) -> None:
        self._holder = None
        self._rcvr.set_value(*vals)

    def set_error(self, err: object) -> None:
        self._holder = None
        self._rcvr.set_error(err)

    def set_stopped(self) -> None:
        self._holder = None
        self._rcvr.set_stopped()

    def _sx_start_failed(self, exc: Exception) -> None:
        """The start sink of the second operation (``_trampoline``): its ``start`` raised
        ``exc``. ``_holder`` is set before that start and cleared by every completion, so
        ``None`` here means this receiver completed (the operation completed before raising, a
        contract violation, or the receiver's completion raised): the exception propagates.
        Otherwise the operation never started and ``exc`` is the result."""
        if self._holder is None:
            raise exc
        self.set_error(exc)


def _shadows(new: object, old: object) -> bool:
    """Does the let-env ``new`` answer every query that the let-env ``old`` answers?"""
    if type(new) is sched_env:
        # SCHED-ENV answers get_scheduler always and get_domain if its scheduler has one.
        return query_or(new._sch, get_domain, _MISSING) is not _MISSING or (
            type(old) is sched_env and query_or(old._sch, get_domain, _MISSING) is _MISSING
        )
    return type(old) is prop and type(new) is prop  # both prop(get_domain, d)


def _receiver2(rcvr: Receiver, letenv: object) -> _LetReceiver2:
    """Make ``receiver2`` for the outer receiver ``rcvr`` and let-env ``letenv`` ([exec.let]).

    A loop of nested lets would otherwise build one forwarding receiver (and one layer of
    environment) per iteration, so that completions and queries walk a chain as long as the
    loop. When ``rcvr`` is itself a ``receiver2``, the environments collapse: let-envs hold
    only forwarding queries, so ``JOIN-ENV(L2, FWD-ENV(JOIN-ENV(L1, FWD-ENV(e))))`` is
    ``JOIN-ENV(L1, FWD-ENV(e))`` when ``L2`` is empty, and ``JOIN-ENV(L2, FWD-ENV(e))`` when
    ``L2`` answers everything ``L1`` does.
    """
    if type(rcvr) is _LetReceiver2:
        if letenv is EMPTY_ENV:
            return rcvr
        old = rcvr._letenv
        if old is EMPTY_ENV or _shadows(letenv, old):
            return _LetReceiver2(rcvr._rcvr, letenv, rcvr._holder)
    return _LetReceiver2(rcvr, letenv)


class _LetOp(ChildOp):
    """The let operation; it is also the receiver of the first child.

    ``_op`` is the first child's operation, ``_op2`` the second's. The subclass for each
    algorithm overrides the completion it matches; the others are forwarded ([exec.let]).
    """

    __slots__ = ("_args", "_child", "_fn", "_op2")
    _kind = _VALUE

    def __init__(self, rcvr: Receiver, child: object, fn: Callable[..., object]) -> None:
        self._rcvr = rcvr
        self._child = child
        self._fn = fn
        self._state = 0
        self._op = None
        self._op2: OperationState | None = None
        self._args: object = None  # the datums given to fn, kept alive ([exec.let])

    def _letenv(self) -> object:
        attrs = get_env(self._child)
        if attrs is EMPTY_ENV:
            return EMPTY_ENV
        sch = query_or(attrs, get_completion_scheduler[_TAGS[self._kind]], _MISSING)
        if sch is not _MISSING:
            return sched_env(sch)
        dom = query_or(attrs, get_domain, _MISSING)
        if dom is _MISSING:
            dom = completion_domain(self._child, _MISSING)
        if dom is not _MISSING:
            return prop(get_domain, dom)
        return EMPTY_ENV

    def _matched(self, args: tuple[object, ...]) -> None:
        self._args = args  # kept alive until the second operation completes ([exec.let])
        rcvr = self._rcvr
        try:
            s2 = self._fn(*args)
            if not is_sender(s2):
                raise TypeError(
                    f"the function given to {('let_value', 'let_error', 'let_stopped')[self._kind]}"
                    f" must return a sender, but it returned {type(s2).__name__} ([exec.let])"
                )
            r2 = _receiver2(rcvr, self._letenv())
            op2 = self._op2 = connect(s2, r2)
        except Exception as e:
            rcvr.set_error(e)
            return
        # A loop of nested lets (``f`` returns ``just(...) | let_value(f)``): when this
        # operation is the second operation of an outer let whose receiver2 is collapsed into
        # r2 (``_receiver2``), the outer let (the holder) keeps alive, in its ``_op2``, the
        # operation of the current iteration. This operation's part is done: its first child
        # completed, ``f`` ran, and op2 will complete straight to r2, never through it. The
        # holder then keeps op2 instead, and this iteration (operation, datums) is freed as
        # soon as its frames return: a loop of N iterations holds O(1) operations, not N.
        h = r2._holder
        if h is not None and h._op2 is self:
            h._op2 = op2
            # Not kept here either: a frame up the stack that still refers to this operation
            # (the outermost let's, while the trampoline drains) must not keep the chain.
            self._op2 = None
        else:
            r2._holder = self
        try:
            # An Exception from op2's start becomes set_error on r2 (its start sink), even when
            # the start is queued and run by the trampoline's drain.
            trampoline_start(op2, r2)
        except BaseException:
            # A start() that raises (a contract violation, or a KeyboardInterrupt) completes
            # nothing: break holder -> op2 -> r2 -> holder here, or it outlives the work.
            r2._holder = None
            raise


class _LetValueOp(_LetOp):
    __slots__ = ()
    _kind = _VALUE

    def set_value(self, *vals: object) -> None:
        if self._state == 2:
            raise completed_twice(self, "set_value")
        self._state = 2
        self._op = None
        self._matched(vals)


class _LetErrorOp(_LetOp):
    __slots__ = ()
    _kind = _ERROR

    def set_error(self, err: object) -> None:
        if self._state == 2:
            raise completed_twice(self, "set_error")
        self._state = 2
        self._op = None
        self._matched((err,))


class _LetStoppedOp(_LetOp):
    __slots__ = ()
    _kind = _STOPPED

    def set_stopped(self) -> None:
        if self._state == 2:
            raise completed_twice(self, "set_stopped")
        self._state = 2
        self._op = None
        self._matched(())


class _LetSender(UnarySender):
    __slots__ = ("_fn",)
    _op_cls: type[_LetOp]

    def __init__(self, child: object, fn: Callable[..., object]) -> None:
        self._child = child
        self._fn = fn

    def connect(self, rcvr: Receiver) -> _LetOp:
        child = self._child
        op = self._op_cls(rcvr, child, self._fn)
        op._op = connect(child, op)
        return op

    @property
    def data(self) -> object:
        return self._fn

    def __repr__(self) -> str:
        return f"{self.tag!r}({self._child!r}, {getattr(self._fn, '__name__', self._fn)!r})"


class _LetValueSender(_LetSender):
    __slots__ = ()
    _op_cls = _LetValueOp


class _LetErrorSender(_LetSender):
    __slots__ = ()
    _op_cls = _LetErrorOp


class _LetStoppedSender(_LetSender):
    __slots__ = ()
    _op_cls = _LetStoppedOp


class _LetAlgorithm(FnAdaptor):
    __slots__ = ()
    _fn_kind = "a callable returning a sender"


class let_value_t(_LetAlgorithm):
    """``let_value(sndr, f)``: on ``set_value(*a)`` run the sender ``f(*a)`` ([exec.let]).

    The datums live in the operation state until ``f``'s sender completes ([exec.let]). The second
    sender sees ``get_scheduler`` equal to the child's value completion scheduler, if it has one
    ([exec.let]). If ``f`` raises or returns a non-sender, the result is ``set_error`` ([exec.let]).

    Completion signatures: the child's error and stopped signatures plus the completions of the
    senders ``f`` returns, and ``set_error_t(Exception)``; not known before ``f`` runs
    (``get_completion_signatures`` gives ``None``) ([exec.let]).

    Errors: an ``Exception`` from ``f``, from connecting or starting its sender, or ``f``
    returning a non-sender (``TypeError``), completes ``set_error``.

    Cancellation: the receiver's stop token reaches the child and the sender ``f`` returns.

    Example:

    >>> import structexec as sx
    >>> sx.sync_wait(sx.just(1) | sx.let_value(lambda x: sx.just(x, 2)))
    (1, 2)
    """

    __slots__ = ()
    _cls = _LetValueSender
    _name = "let_value"

    # ``f`` returns a sender or a coroutine object: either is an ``Awaitable[R]``. Arities as
    # for ``then`` (the sender's value type is ``None``, ``A`` or ``tuple[A, B]``).
    @overload
    def __call__(self, f: Callable[[A], Awaitable[R]], /) -> MapClosure[A, R]: ...
    @overload
    def __call__(self, f: Callable[[], Awaitable[R]], /) -> MapClosure[None, R]: ...
    @overload
    def __call__(self, f: Callable[[A, B], Awaitable[R]], /) -> MapClosure[tuple[A, B], R]: ...
    @overload
    def __call__(
        self, f: Callable[[A, B, C], Awaitable[R]], /
    ) -> MapClosure[tuple[A, B, C], R]: ...
    @overload
    def __call__(
        self, f: Callable[[A, B, C, D], Awaitable[R]], /
    ) -> MapClosure[tuple[A, B, C, D], R]: ...
    @overload
    def __call__(
        self, f: Callable[[A, B, C, D, E], Awaitable[R]], /
    ) -> MapClosure[tuple[A, B, C, D, E], R]: ...
    @overload
    def __call__(
        self, f: Callable[[A, B, C, D, E, F], Awaitable[R]], /
    ) -> MapClosure[tuple[A, B, C, D, E, F], R]: ...
    @overload
    def __call__(self, sndr: Awaitable[A], f: Callable[[A], Awaitable[R]], /) -> Sender[R]: ...
    @overload
    def __call__(self, sndr: Awaitable[None], f: Callable[[], Awaitable[R]], /) -> Sender[R]: ...
    @overload
    def __call__(
        self, sndr: Awaitable[tuple[A, B]], f: Callable[[A, B], Awaitable[R]], /
    ) -> Sender[R]: ...
    @overload
    def __call__(
        self, sndr: Awaitable[tuple[A, B, C]], f: Callable[[A, B, C], Awaitable[R]], /
    ) -> Sender[R]: ...
    @overload
    def __call__(
        self, sndr: Awaitable[tuple[A, B, C, D]], f: Callable[[A, B, C, D], Awaitable[R]], /
    ) -> Sender[R]: ...
    @overload
    def __call__(
        self, sndr: Awaitable[tuple[A, B, C, D, E]], f: Callable[[A, B, C, D, E], Awaitable[R]], /
    ) -> Sender[R]: ...
    @overload
    def __call__(
        self,
        sndr: Awaitable[tuple[A, B, C, D, E, F]],
        f: Callable[[A, B, C, D, E, F], Awaitable[R]],
        /,
    ) -> Sender[R]: ...
    def __call__(self, *args: object) -> object:
        return self._build(args)


class let_error_t(_LetAlgorithm):
    """``let_error(sndr, f)``: on ``set_error(e)`` run the sender ``f(e)`` ([exec.let]).

    Completion signatures: the child's value and stopped signatures plus the completions of the
    senders ``f`` returns, and ``set_error_t(Exception)``; not known before ``f`` runs
    (``get_completion_signatures`` gives ``None``) ([exec.let]).

    Errors: an ``Exception`` from ``f``, from connecting or starting its sender, or ``f``
    returning a non-sender (``TypeError``), completes ``set_error``.

    Cancellation: the receiver's stop token reaches the child and the sender ``f`` returns.

    Example:

    >>> import structexec as sx
    >>> sx.sync_wait(sx.just_error(1) | sx.let_error(lambda e: sx.just(e)))
    (1,)
    """

    __slots__ = ()
    _cls = _LetErrorSender
    _name = "let_error"

    @overload
    def __call__(self, f: Callable[[Any], Awaitable[R]], /) -> WidenClosure[R]: ...
    @overload
    def __call__(
        self, sndr: Awaitable[T], f: Callable[[Any], Awaitable[R]], /
    ) -> Sender[T | R]: ...
    def __call__(self, *args: object) -> object:
        return self._build(args)


class let_stopped_t(_LetAlgorithm):
    """``let_stopped(sndr, f)``: on ``set_stopped()`` run the sender ``f()`` ([exec.let]).

    Completion signatures: the child's value and error signatures plus the completions of the
    senders ``f`` returns, and ``set_error_t(Exception)``; not known before ``f`` runs
    (``get_completion_signatures`` gives ``None``) ([exec.let]).

    Errors: an ``Exception`` from ``f``, from connecting or starting its sender, or ``f``
    returning a non-sender (``TypeError``), completes ``set_error``.

    Cancellation: the receiver's stop token reaches the child and the sender ``f`` returns. A
    stopped child is replaced by ``f()``'s sender.

    Example:

    >>> import structexec as sx
    >>> sx.sync_wait(sx.just_stopped() | sx.let_stopped(lambda: sx.just(7)))
    (7,)
    """

    __slots__ = ()
    _cls = _LetStoppedSender
    _name = "let_stopped"

    @overload
    def __call__(self, f: Callable[[], Awaitable[R]], /) -> WidenClosure[R]: ...
    @overload
    def __call__(self, sndr: Awaitable[T], f: Callable[[], Awaitable[R]], /) -> Sender[T | R]: ...
    def __call__(self, *args: object) -> object:
        return self._build(args)


let_value = let_value_t()
let_error = let_error_t()
let_stopped = let_stopped_t()
_LetValueSender.tag = let_value
_LetErrorSender.tag = let_error
_LetStoppedSender.tag = let_stopped
