"""The sender/receiver protocol: completion functions, ``start``, base classes, pipes.

[exec.async.ops], [exec.opstate], [exec.recv], [exec.set.value], [exec.set.error],
[exec.set.stopped], [exec.snd.concepts], [exec.adapt.obj] ([exec.async.ops]).

A *sender* is any object with ``connect(rcvr)`` (or an awaitable, [exec.snd.concepts]); a
*receiver* is any object with ``set_value(*vals)``, ``set_error(err)`` and ``set_stopped()``
(and optionally ``get_env()``); an *operation state* is any object with ``start()``. The base
classes below are conveniences: ``Sender`` adds ``await`` support and typing, ``Closure`` adds
the pipe operator. The completion tags (``set_value_t``, ...) are in ``_tags.py``.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Generator
from typing import TYPE_CHECKING, Any, ClassVar, Generic, NoReturn, TypeVar, overload

from . import _hooks
from ._env import EMPTY_ENV
from ._signature import DocumentedSignature

if TYPE_CHECKING:
    from typing import TypeGuard

    from ._completion_signatures import completion_signatures
    from ._contracts import Env, OpState, Rcvr, Sched

__all__ = [
    "Closure",
    "MapClosure",
    "OperationState",
    "Receiver",
    "Sender",
    "WidenClosure",
    "is_scheduler",
    "is_sender",
    "set_error",
    "set_stopped",
    "set_value",
    "start",
]

T_co = TypeVar("T_co", covariant=True)
R = TypeVar("R")
T = TypeVar("T")
In_contra = TypeVar("In_contra", contravariant=True)
Out_co = TypeVar("Out_co", covariant=True)


def set_value(rcvr: Rcvr, *vals: object) -> None:
    """Complete ``rcvr`` with values: ``rcvr.set_value(*vals)`` ([exec.set.value])."""
    rcvr.set_value(*vals)


def set_error(rcvr: Rcvr, err: object) -> None:
    """Complete ``rcvr`` with one error datum ([exec.set.error], [exec.set.value],
    [exec.set.stopped], [exec.general]).

    ``None`` is never a valid error datum (C++'s null ``exception_ptr``): it raises ``TypeError``.
    """
    if err is None:
        raise TypeError(
            "set_error(rcvr, None): None is not a valid error datum ([exec.set.error]); send "
            "an exception or another object"
        )
    rcvr.set_error(err)


def set_stopped(rcvr: Rcvr) -> None:
    """Complete ``rcvr`` as stopped: ``rcvr.set_stopped()`` ([exec.set.stopped])."""
    rcvr.set_stopped()


def start(op: OpState) -> None:
    """Start an operation state: ``op.start()`` ([exec.opstate.start]).

    An operation may complete inside ``start`` ([exec.async.ops]). Library operation states
    raise ``RuntimeError`` when started twice ([exec.async.ops]).
    """
    op.start()


# --------------------------------------------------------------------------- base classes


class Sender(Generic[T_co]):
    """Base class for senders ([exec.snd.concepts]).

    Subclasses implement ``connect(rcvr)`` returning an operation state, and may implement
    ``get_env()`` (attributes) and ``get_completion_signatures(env=None)``. The base class adds
    ``await sndr`` for trio code (the trio guide "Awaiting a sender": ``None`` for no datums, the
    datum, or a tuple of several) and the pipe operator through :class:`Closure`. ``T_co`` is what
    awaiting the sender gives. Structural decomposition for transforms ([exec.snd.concepts]):
    ``tag``, ``data`` and ``children``.
    """

    __slots__ = ()
    sender_concept: ClassVar[bool] = True
    tag: ClassVar[object] = None

    def connect(self, rcvr: Any) -> OpState:
        raise TypeError(f"{type(self).__name__} derives from sx.Sender but has no connect()")

    def get_env(self) -> Env:
        return EMPTY_ENV

    def get_completion_signatures(self, env: object = None) -> completion_signatures | None:
        return None

    @property
    def data(self) -> object:
        return None

    @property
    def children(self) -> tuple[object, ...]:
        return ()

    def __await__(self) -> Generator[object, object, T_co]:
        return _hooks.await_sender(self)

    if TYPE_CHECKING:
        # For type checkers only (at run time ``sndr | c`` is ``c.__ror__(sndr)``): offering
        # the closure's type from the left lets mypy infer the parameter of a lambda given to
        # ``then``/``let_value`` from the sender's value type (docs/typing.md).
        @overload
        def __or__(self, c: MapClosure[T_co, R], /) -> Sender[R]: ...
        @overload
        def __or__(self, c: WidenClosure[R], /) -> Sender[T_co | R]: ...
        def __or__(self, c: object, /) -> Sender[object]: ...


class Receiver:
    """Base class for receivers ([exec.recv], [exec.recv.concepts]).

    Implement ``set_value(*vals)``, ``set_error(err)`` and ``set_stopped()`` (none may raise)
    and, optionally, ``get_env()``; without it the environment is ``sx.env()``.
    """

    __slots__ = ()
    receiver_concept: ClassVar[bool] = True

    def get_env(self) -> Env:
        return EMPTY_ENV


class OperationState:
    """Base class for operation states ([exec.opstate], [exec.opstate.start]).

    Implement ``start()``; it must not raise. Operation states cannot be copied ([exec.opstate]).
    """

    __slots__ = ()
    operation_state_concept: ClassVar[bool] = True

    def start(self) -> None:
        raise TypeError(f"{type(self).__name__} derives from sx.OperationState but has no start()")

    def __copy__(self) -> NoReturn:
        raise TypeError(
            "operation states cannot be copied or moved ([exec.opstate.general]); connect the "
            "sender again instead"
        )

    def __deepcopy__(self, memo: object) -> NoReturn:
        raise TypeError(
            "operation states cannot be copied or moved ([exec.opstate.general]); connect the "
            "sender again instead"
        )


def twice_started(op: object) -> RuntimeError:
    return RuntimeError(
        f"{type(op).__name__} was started twice; an operation state may be started at most once "
        "([exec.opstate.start]): connect the sender again for a second run"
    )


def completed_twice(rcvr: object, how: str) -> RuntimeError:
    return RuntimeError(
        f"{type(rcvr).__name__}.{how}() called after the operation had already completed; "
        "an operation completes exactly once ([exec.async.ops]): complete a receiver once"
    )


# --------------------------------------------------------------------------- closures and pipes


class Closure(Generic[R]):
    """A sender adaptor closure: ``then(f)``, ``continues_on(sch)``, ... ([exec.adapt.obj]).

    ``sndr | c`` is ``c(sndr)`` ([exec.adapt.obj]); ``c | d`` is a closure ``e`` with
    ``e(s) == d(c(s))`` ([exec.adapt.obj]). A closure is not a sender ([exec.adapt.obj]).
    """

    __slots__ = ("_fn",)

    def __init__(self, fn: Callable[[Any], Sender[R]]) -> None:
        self._fn = fn

    def __call__(self, sndr: Any) -> Sender[R]:
        if not is_sender(sndr):
            raise TypeError(
                f"a sender adaptor closure was applied to {type(sndr).__name__}, which is not a "
                "sender"
            )
        return self._fn(sndr)

    def __ror__(self, sndr: Any) -> Sender[R]:
        return self(sndr)

    def __or__(self, other: Closure[Any]) -> Closure[Any]:
        if not isinstance(other, Closure):
            return NotImplemented
        first = self

        def composed(s: Any) -> Sender[Any]:
            return other(first(s))

        return Closure(composed)


class MapClosure(Closure[Any], Generic[In_contra, Out_co]):
    """For type checkers: the type of a closure that turns a sender of ``In`` into a sender of
    ``Out`` (``then(f)``, ``let_value(f)``; the typing guide). The objects are closures of other
    (private) classes; this class only names their type."""

    __slots__ = ()

    if TYPE_CHECKING:

        def __ror__(self, sndr: Awaitable[In_contra]) -> Sender[Out_co]: ...
        def __call__(self, sndr: Awaitable[In_contra]) -> Sender[Out_co]: ...
        @overload
        def __or__(self, other: MapClosure[Out_co, R]) -> MapClosure[In_contra, R]: ...
        @overload
        def __or__(self, other: WidenClosure[R]) -> MapClosure[In_contra, Out_co | R]: ...
        @overload
        def __or__(self, other: Closure[R]) -> MapClosure[In_contra, R]: ...
        def __or__(self, other: object) -> Any: ...


class WidenClosure(Closure[Any], Generic[Out_co]):
    """For type checkers: the type of a closure that turns a sender of ``T`` into a sender of
    ``T | Out`` (``upon_error(f)``, ``let_stopped(f)``); ``WidenClosure[NoReturn]`` keeps the
    value type (``continues_on(sch)``, ``write_env(env)``; the typing guide). The objects are
    closures of other (private) classes; this class only names their type."""

    __slots__ = ()

    if TYPE_CHECKING:

        def __ror__(self, sndr: Awaitable[T]) -> Sender[T | Out_co]: ...
        def __call__(self, sndr: Awaitable[T]) -> Sender[T | Out_co]: ...
        @overload
        def __or__(self, other: WidenClosure[R]) -> WidenClosure[Out_co | R]: ...
        @overload
        def __or__(self, other: MapClosure[Any, R]) -> MapClosure[Any, R]: ...
        @overload
        def __or__(self, other: Closure[R]) -> Closure[R]: ...
        def __or__(self, other: object) -> Any: ...


def is_sender(x: object) -> bool:
    """True for senders: objects with ``connect()``, and awaitables ([exec.snd.concepts],
    the trio guide "Coroutines are senders; a stop request cancels them").

    Closures, schedulers and receivers are not senders.
    """
    if isinstance(x, (Sender, Closure)):
        return isinstance(x, Sender)
    if callable(getattr(x, "connect", None)):
        return True
    return inspect.isawaitable(x)


def is_scheduler(x: object) -> TypeGuard[Sched]:
    """True for schedulers: objects with a callable ``schedule()`` ([exec.sched])."""
    return callable(getattr(x, "schedule", None)) and not isinstance(x, type)


class Algorithm:
    """Base of the algorithm objects (``sx.then`` is an instance of ``then_t``).

    The algorithm object is the sender's ``tag`` ([exec.snd.concepts]); a domain recognises the
    senders it customises by their tag. A tag may define ``transform_sender(sndr, env)`` (a
    lowering applied at connect, [exec.domain.default]) and ``apply_sender(sndr, *args)``
    ([exec.domain.default]).
    """

    __slots__ = ()

    #: ``inspect.signature(sx.then)`` is the documented call, not the generic ``*args``.
    __signature__ = DocumentedSignature()

    def __repr__(self) -> str:
        return type(self).__name__.removesuffix("_t")
