"""``just``, ``just_error``, ``just_stopped`` ([exec.just])."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn, TypeVar, overload

from .._core._completion_signatures import completion_signatures
from .._core._protocol import Algorithm, Sender, twice_started
from .._core._tags import set_error_t, set_stopped_t, set_value_t

if TYPE_CHECKING:
    from .._core._contracts import Receiver

__all__ = ["just", "just_error", "just_stopped"]

T = TypeVar("T")
U = TypeVar("U")
V = TypeVar("V")
_new = object.__new__


class _JustOp:
    __slots__ = ("_rcvr", "_started", "_vals")

    def __init__(self, rcvr: Receiver, vals: tuple[object, ...]) -> None:
        self._rcvr = rcvr
        self._vals = vals
        self._started = False

    def start(self) -> None:
        if self._started:
            raise twice_started(self)
        self._started = True
        self._rcvr.set_value(*self._vals)


class _JustSender(Sender[object]):
    __slots__ = ("_vals",)
    _sx_completes_inline = True

    def __init__(self, vals: tuple[object, ...]) -> None:
        self._vals = vals

    def connect(self, rcvr: Receiver) -> _JustOp:
        # _JustOp(rcvr, self._vals) without the __init__ frame (the await hot path)
        op = _new(_JustOp)
        op._rcvr = rcvr
        op._vals = self._vals
        op._started = False
        return op

    def get_completion_signatures(self, env: object = None) -> completion_signatures:
        return completion_signatures(set_value_t(*(type(v) for v in self._vals)))

    @property
    def data(self) -> object:
        return self._vals

    def __repr__(self) -> str:
        return f"just({', '.join(map(repr, self._vals))})"


_JUST_NOTHING = _JustSender(())


class just_t(Algorithm):
    """``just(*vals)``: completes ``set_value(*vals)`` inside ``start`` ([exec.just]).

    The datums are sent as they are (no copy, [exec.just]); the sender can be connected
    any number of times ([exec.snd.concepts]). ``await sx.just()`` gives ``None``,
    ``await sx.just(x)`` gives ``x`` and ``await sx.just(a, b)`` gives ``(a, b)``
    (the trio guide "Awaiting a sender").

    Completion signatures: ``set_value_t(*types of vals)`` ([exec.just]).

    Errors: none.

    Cancellation: none: completes inline inside ``start``, stop tokens are not consulted.

    Example:

    >>> import structexec as sx
    >>> sx.sync_wait(sx.just(1, 2))
    (1, 2)
    """

    __slots__ = ()

    @overload
    def __call__(self) -> Sender[None]: ...
    @overload
    def __call__(self, v: T, /) -> Sender[T]: ...
    @overload
    def __call__(self, v: T, u: U, /) -> Sender[tuple[T, U]]: ...
    @overload
    def __call__(self, v: T, u: U, w: V, /) -> Sender[tuple[T, U, V]]: ...
    @overload
    def __call__(self, *vals: object) -> Sender[tuple[Any, ...]]: ...
    def __call__(self, *vals: object) -> Sender[object]:
        # A sender is an immutable, reusable value ([exec.snd.concepts]): every ``just()`` can
        # be the same one.
        if vals:
            s = _new(_JustSender)  # _JustSender(vals) without the __init__ frame
            s._vals = vals
            return s
        return _JUST_NOTHING


class _JustErrorOp:
    __slots__ = ("_err", "_rcvr", "_started")

    def __init__(self, rcvr: Receiver, err: object) -> None:
        self._rcvr = rcvr
        self._err = err
        self._started = False

    def start(self) -> None:
        if self._started:
            raise twice_started(self)
        self._started = True
        self._rcvr.set_error(self._err)


class _JustErrorSender(Sender[NoReturn]):
    __slots__ = ("_err",)
    _sx_completes_inline = True

    def __init__(self, err: object) -> None:
        self._err = err

    def connect(self, rcvr: Receiver) -> _JustErrorOp:
        return _JustErrorOp(rcvr, self._err)

    def get_completion_signatures(self, env: object = None) -> completion_signatures:
        return completion_signatures(set_error_t(type(self._err)))

    @property
    def data(self) -> object:
        return self._err

    def __repr__(self) -> str:
        return f"just_error({self._err!r})"


class just_error_t(Algorithm):
    """``just_error(err)``: completes ``set_error(err)`` inside ``start`` ([exec.just]).

    Exactly one datum, and not ``None`` ([exec.general]); other arities raise ``TypeError``
    when the sender is built.

    Completion signatures: ``set_error_t(type(err))`` ([exec.just]).

    Errors: always completes ``set_error(err)``; ``sync_wait`` raises an exception datum as it
    is, wraps others in ``ErrorValue``.

    Cancellation: none: completes inline inside ``start``.

    Example:

    >>> import structexec as sx
    >>> sx.sync_wait(sx.just_error(ValueError('x')))
    Traceback (most recent call last):
    ...
    ValueError: x
    """

    __slots__ = ()

    def __call__(self, *args: object) -> Sender[NoReturn]:
        if len(args) != 1:
            raise TypeError(f"just_error() takes exactly one error datum, got {len(args)}")
        if args[0] is None:
            raise TypeError(
                "just_error(None): None is not a valid error datum ([exec.just]); send an "
                "exception or another object"
            )
        return _JustErrorSender(args[0])


class _JustStoppedOp:
    __slots__ = ("_rcvr", "_started")

    def __init__(self, rcvr: Receiver) -> None:
        self._rcvr = rcvr
        self._started = False

    def start(self) -> None:
        if self._started:
            raise twice_started(self)
        self._started = True
        self._rcvr.set_stopped()


class _JustStoppedSender(Sender[NoReturn]):
    __slots__ = ()
    _sx_completes_inline = True

    def connect(self, rcvr: Receiver) -> _JustStoppedOp:
        return _JustStoppedOp(rcvr)

    def get_completion_signatures(self, env: object = None) -> completion_signatures:
        return completion_signatures(set_stopped_t())

    def __repr__(self) -> str:
        return "just_stopped()"


class just_stopped_t(Algorithm):
    """``just_stopped()``: completes ``set_stopped()`` inside ``start`` ([exec.just]).

    Completion signatures: ``set_stopped_t()`` ([exec.just]).

    Errors: none.

    Cancellation: always completes ``set_stopped()``, inline inside ``start``.

    Example:

    >>> import structexec as sx
    >>> sx.sync_wait(sx.just_stopped()) is None
    True
    """

    __slots__ = ()

    def __call__(self, *args: object) -> Sender[NoReturn]:
        if args:
            raise TypeError(f"just_stopped() takes no arguments, got {len(args)}")
        return _JustStoppedSender()


just = just_t()
just_error = just_error_t()
just_stopped = just_stopped_t()
_JustSender.tag = just
_JustErrorSender.tag = just_error
_JustStoppedSender.tag = just_stopped
