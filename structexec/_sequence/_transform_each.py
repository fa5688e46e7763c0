"""``transform_each``, ``then_each``, ``let_each`` (stdexec ``exec::transform_each``).

With ``max_concurrency=1`` (the default) the adaptor adds no operation of its own: it connects
its upstream to a small receiver that rewrites each item as it passes (``item | then(f)``,
``item | let_value(f)``, ``closure(item)``); the item stays lazy and its consumer starts it, one
at a time. With ``max_concurrency > 1`` the rewritten items run in the bounded stage of
``_bounded`` (up to ``n`` at once, results in completion order, or input order with
``ordered=True``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from .._algorithms._let import _LetValueSender
from .._algorithms._then import _ThenSender
from .._core._adaptor_util import async_fn_error, is_async_fn
from .._core._connect import connect_unchecked as connect
from .._core._env import get_env
from .._core._protocol import Sender
from ._bounded import BoundedSequence
from ._protocol import (
    SeqClosure,
    SequenceSender,
    check_callable,
    check_max_concurrency,
    is_sequence_sender,
    pipe_signature,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from .._core._protocol import Closure, MapClosure
    from ._protocol import OpState, SeqRcvr

__all__ = ["let_each", "then_each", "transform_each"]

A = TypeVar("A", bound=Any)
R = TypeVar("R")
F = TypeVar("F")
_new = object.__new__


class _MapRcvr(Generic[F]):
    """The receiver between a sequence and its consumer that rewrites every item with
    ``_f`` (a function of the item; ``take`` keeps its count there instead)."""

    __slots__ = ("_f", "_rcvr")
    _f: F
    _rcvr: SeqRcvr

    def __init__(self, rcvr: SeqRcvr, f: F) -> None:
        self._rcvr = rcvr
        self._f = f

    def get_env(self) -> object:
        return get_env(self._rcvr)

    def set_next(self, item: object) -> object:
        return self._rcvr.set_next(self._f(item))  # type: ignore[operator]  # F is callable here

    def set_value(self, *vals: object) -> None:
        self._rcvr.set_value(*vals)

    def set_error(self, err: object) -> None:
        self._rcvr.set_error(err)

    def set_stopped(self) -> None:
        self._rcvr.set_stopped()


class _MapSequence(SequenceSender[R]):
    __slots__ = ("_f", "_name", "_up")
    _f: Callable[[object], object]
    _name: str
    _up: object

    def __init__(self, up: object, f: Callable[[object], object], name: str) -> None:
        self._up = up
        self._f = f
        self._name = name

    def connect(self, rcvr: SeqRcvr) -> OpState:
        op: OpState = connect(self._up, _MapRcvr(rcvr, self._f))
        return op

    def __repr__(self) -> str:
        return f"{self._name}({self._up!r})"


class _ThenItem:
    """``item | then(f)`` as a function of the item (a small object: no closure per stage)."""

    __slots__ = ("_fn",)
    _fn: Callable[..., object]

    def __init__(self, fn: Callable[..., object]) -> None:
        self._fn = fn

    def __call__(self, item: object) -> _ThenSender:
        s = _new(_ThenSender)
        s._child = item
        s._fn = self._fn
        s._flat = None
        return s


class _LetItem:
    __slots__ = ("_fn",)
    _fn: Callable[..., object]

    def __init__(self, fn: Callable[..., object]) -> None:
        self._fn = fn

    def __call__(self, item: object) -> _LetValueSender:
        s = _new(_LetValueSender)
        s._child = item
        s._fn = self._fn
        return s


def _build(
    name: str,
    args: tuple[object, ...],
    mk: Callable[[object], object],
    max_concurrency: int,
    ordered: bool,
) -> object:
    check_max_concurrency(name, max_concurrency)
    if type(ordered) is not bool:
        raise TypeError(f"{name}(): ordered must be a bool, got {type(ordered).__name__}")

    def apply(seq: object) -> SequenceSender[object]:
        if max_concurrency == 1:
            return _MapSequence(seq, mk, name)
        return BoundedSequence(seq, mk, max_concurrency, ordered, name)

    if len(args) == 2:
        seq = args[0]
        if not is_sequence_sender(seq):
            raise TypeError(
                f"{name}(): seq must be a sequence sender (for example sx.iterate(xs)), got "
                f"{type(seq).__name__}"
            )
        return apply(seq)
    return SeqClosure(apply)


def _split(name: str, arg: str, args: tuple[object, ...]) -> object:
    if len(args) == 1:
        return args[0]
    if len(args) == 2:
        return args[1]
    raise TypeError(f"{name}() takes ({arg}) or (seq, {arg}), got {len(args)} positional arguments")


@overload
def then_each(f: Callable[[A], R], /) -> SeqClosure[A, R]: ...
@overload
def then_each(seq: SequenceSender[A], f: Callable[[A], R], /) -> SequenceSender[R]: ...
def then_each(*args: object) -> object:
    """``seq | then_each(f)``: every item ``i`` becomes ``i | then(f)`` ([exec.then]).

    ``f`` receives the item's datums and its result is the new item's value (``None`` for no
    datum, ``sx.values(a, b)`` for several). Items stay lazy: ``f`` runs when the consumer
    starts the item, on the agent where the item completed, once per item, in the sequence's
    order. An ``Exception`` from ``f`` makes that item fail (the consumer then stops the
    sequence and completes with it); a ``BaseException`` propagates from where ``f`` ran.

    Raises ``TypeError`` at once if ``f`` is not callable or is an ``async def`` function
    (use :func:`let_each` for those). Also ``then_each(seq, f)``.

    >>> import structexec as sx
    >>> sx.sync_wait(sx.to_list(sx.iterate([1, 2]) | sx.then_each(lambda x: x * 10)))
    ([10, 20],)
    """
    f = check_callable("then_each", "f", _split("then_each", "f", args))
    if is_async_fn(f):
        raise async_fn_error("then_each", f)
    return _build("then_each", args, _ThenItem(f), 1, False)


@overload
def let_each(
    f: Callable[[A], Awaitable[R]], /, *, max_concurrency: int = 1, ordered: bool = False
) -> SeqClosure[A, R]: ...
@overload
def let_each(
    seq: SequenceSender[A],
    f: Callable[[A], Awaitable[R]],
    /,
    *,
    max_concurrency: int = 1,
    ordered: bool = False,
) -> SequenceSender[R]: ...
def let_each(*args: object, max_concurrency: int = 1, ordered: bool = False) -> object:
    """``seq | let_each(f, max_concurrency=1, ordered=False)``: every item ``i`` becomes
    ``i | let_value(f)`` ([exec.let]): ``f`` returns a sender, or is an ``async def``
    function whose coroutine runs (in its own trio task under trio) as the next step.

    ``max_concurrency=n``: up to ``n`` items run at once, and each holds its slot until its
    result was delivered downstream, so at most ``n`` items are started and not yet delivered
    (memory O(n)); the producer is not asked for another item while all slots are taken
    (backpressure). Results come in completion order, or in input order with
    ``ordered=True``. With ``n == 1`` items run one at a time, in order, started by the
    consumer.

    Errors: an ``Exception`` from ``f`` or from its sender fails that item: the producer and
    every item in flight are stopped, and the consumer completes with the first error once
    they all completed (later errors become notes). Cancellation: a stop request on the
    consumer's token stops the producer and every item in flight (a coroutine's trio task is
    cancelled).

    Raises at once: ``TypeError`` if ``f`` is not callable or ``max_concurrency`` not an int,
    ``ValueError`` if ``max_concurrency < 1``. Also ``let_each(seq, f, ...)``.

    >>> import structexec as sx
    >>> sx.sync_wait(sx.to_list(sx.iterate([1, 2]) | sx.let_each(lambda x: sx.just(x + 1))))
    ([2, 3],)
    """
    f = check_callable("let_each", "f", _split("let_each", "f", args))
    return _build("let_each", args, _LetItem(f), max_concurrency, ordered)


@overload
def transform_each(
    closure: MapClosure[A, R], /, *, max_concurrency: int = 1, ordered: bool = False
) -> SeqClosure[A, R]: ...
@overload
def transform_each(
    closure: Closure[Any], /, *, max_concurrency: int = 1, ordered: bool = False
) -> SeqClosure[Any, Any]: ...
@overload
def transform_each(
    seq: SequenceSender[Any],
    closure: Closure[Any],
    /,
    *,
    max_concurrency: int = 1,
    ordered: bool = False,
) -> SequenceSender[Any]: ...
def transform_each(*args: object, max_concurrency: int = 1, ordered: bool = False) -> object:
    """``seq | transform_each(closure, max_concurrency=1, ordered=False)``: every item ``i``
    becomes ``i | closure``, for a sender adaptor closure such as
    ``sx.continues_on(par) | sx.then(g)`` ([exec.adapt.obj]; stdexec's
    ``exec::transform_each``).

    With ``sx.continues_on(sx.get_parallel_scheduler())`` in the closure, each item hops to the
    parallel scheduler, so ``max_concurrency=k`` runs ``k`` of them on the pool at once.
    Concurrency, order, backpressure, errors and stops as for :func:`let_each`.

    Raises at once: ``TypeError`` if ``closure`` is not a sender adaptor closure (or a callable
    taking a sender) or ``max_concurrency`` not an int, ``ValueError`` if
    ``max_concurrency < 1``. Also ``transform_each(seq, closure, ...)``.
    """
    c = _split("transform_each", "closure", args)
    if isinstance(c, Sender) or not callable(c):
        raise TypeError(
            "transform_each(): closure must be a sender adaptor closure such as "
            f"sx.then(f) or sx.continues_on(sch) | sx.then(f), got {type(c).__name__}"
        )
    return _build("transform_each", args, c, max_concurrency, ordered)


pipe_signature(then_each, 'f')


pipe_signature(let_each, 'f')


pipe_signature(transform_each, 'closure')
