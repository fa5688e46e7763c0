"""``stopped_as_optional`` and ``stopped_as_error`` ([exec.stopped.opt], [exec.stopped.err]).

[exec.stopped.opt], [exec.stopped.err]. Both turn the stopped channel into something else, so the
resulting sender never completes stopped: ``stopped_as_optional`` into the value ``None``
(Python's empty ``optional``), ``stopped_as_error(err)`` into ``set_error(err)``. The draft
specifies them as lowerings to ``let_stopped`` at ``connect``; these are their
``transform_sender`` methods, used when a domain is consulted, and the default ``connect``
does the same work directly with one forwarding receiver instead of two operations.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, NoReturn, TypeVar, overload

from .._core._adaptor_util import (
    BinaryAdaptor,
    InlineAsChild,
    UnaryAdaptor,
    UnarySender,
    early_child,
)
from .._core._completion_signatures import (
    completion_signatures,
    dependent_sender_error,
    get_completion_signatures,
)
from .._core._connect import connect_unchecked as connect
from .._core._env import fwd_env, get_env
from .._core._protocol import Sender, WidenClosure, is_sender
from .._core._tags import set_error_t, set_stopped_t, set_value_t
from .._core._values import values
from ._just import just, just_error
from ._let import let_stopped
from ._then import then

if TYPE_CHECKING:
    from .._core._contracts import OperationState, Receiver

__all__ = ["stopped_as_error", "stopped_as_optional"]

T = TypeVar("T")


# --------------------------------------------------------------------------- stopped_as_optional


def _make_optional(*ts: object) -> values:
    """``optional<V>(in_place, ts...)``: one datum (a tuple for several)."""
    if len(ts) == 1:
        return values(ts[0])
    if not ts:
        return values()
    return values(ts)


def _just_none() -> Sender[None]:
    """``just(optional<V>())``: the empty optional is ``None``."""
    return just(None)


class _OptionalReceiver:
    __slots__ = ("_rcvr", "set_error")

    def __init__(self, rcvr: Receiver) -> None:
        self._rcvr = rcvr
        self.set_error = rcvr.set_error

    def get_env(self) -> object:
        # Made when asked: work that never queries its environment does not pay for it.
        return fwd_env(get_env(self._rcvr))

    def set_value(self, *vals: object) -> None:
        if len(vals) == 1:
            self._rcvr.set_value(vals[0])
        elif vals:
            self._rcvr.set_value(vals)
        else:  # void child with unknown signatures: forwarded as it is (permissive)
            self._rcvr.set_value()

    def set_stopped(self) -> None:
        self._rcvr.set_value(None)


def _check_optional(child: object, env: object) -> bool:
    """[exec.stopped.opt]: the child must have exactly one value signature, with at least one datum.

    Returns False when the check could not be made without an environment.
    """
    try:
        cs = get_completion_signatures(child, env)
    except dependent_sender_error:
        return False
    if cs is None:
        return True
    vs = [s for s in cs if type(s) is set_value_t]
    if len(vs) != 1 or not vs[0].args:
        what = (
            "no value completion"
            if not vs
            else ("a void value (set_value_t())" if len(vs) == 1 else f"{len(vs)} value signatures")
        )
        raise TypeError(
            f"stopped_as_optional(): the child {child!r} has {what}; it needs exactly one value "
            "signature with at least one datum, because the stopped case becomes the value None "
            "([exec.stopped.opt]). For a void child, map stopped explicitly, e.g. "
            "sndr | sx.then(lambda: True) | sx.stopped_as_optional, or use "
            "sx.upon_stopped / sx.stopped_as_error"
        )
    return True


class _StoppedAsOptionalSender(UnarySender):
    __slots__ = ("_checked",)

    def __init__(self, child: object) -> None:
        self._child = child
        self._checked = False  # True once checked without an environment

    def connect(self, rcvr: Receiver) -> OperationState:
        if not self._checked:
            self._checked = _check_optional(self._child, None)
            if not self._checked:
                _check_optional(self._child, fwd_env(get_env(rcvr)))
        op: OperationState = connect(self._child, _OptionalReceiver(rcvr))
        return op

    def lower(self) -> Sender[object]:
        """``let_stopped(then(child, make-optional), lambda: just(None))`` ([exec.stopped.opt])."""
        return let_stopped(then(self._child, _make_optional), _just_none)

    def get_completion_signatures(self, env: object = None) -> completion_signatures | None:
        """One value signature ``set_value_t(V)`` (``V`` may be ``None``) and the child's errors."""
        cs = get_completion_signatures(self._child, None if env is None else fwd_env(env))
        if cs is None:
            return None
        _check_optional(self._child, None if env is None else fwd_env(env))
        (v,) = [s for s in cs if type(s) is set_value_t]
        val = v.args[0] if len(v.args) == 1 else tuple
        errs = [s for s in cs if type(s) is set_error_t]
        return completion_signatures(set_value_t(val), *errs)

    def __repr__(self) -> str:
        return f"stopped_as_optional({self._child!r})"


class stopped_as_optional_t(UnaryAdaptor):
    """``stopped_as_optional(sndr)`` / ``sndr | stopped_as_optional``: stopped becomes ``None``.

    [exec.stopped.opt]. ``set_value(v)`` is forwarded as
    ``set_value(v)``; several datums become one tuple; ``set_stopped()`` becomes
    ``set_value(None)``; errors are forwarded. It never completes stopped.
    ``sync_wait(stopped_as_optional(just(5)))`` is ``(5,)``. Note that a child whose value is
    itself ``None`` cannot be told apart from a stop.

    The child must have one value signature with at least one datum ([exec.stopped.opt]):
    ``connect`` raises ``TypeError`` when the child's declared signatures are void (``just()``,
    ``just_stopped()``) or have several value signatures. A child with unknown signatures that sends
    no datum at run time has its ``set_value()`` forwarded unchanged.

    Completion signatures: ``set_value_t(T)`` for the child's one value signature, the child's
    error signatures; never stopped ([exec.stopped.opt]).

    Errors: the child's errors pass through; ``connect`` raises ``TypeError`` for a child
    without exactly one value signature with a datum.

    Cancellation: a stopped child completes ``set_value(None)``.

    Example:

    >>> import structexec as sx
    >>> sx.sync_wait(sx.just(5) | sx.stopped_as_optional)
    (5,)
    """

    __slots__ = ()
    _name = "stopped_as_optional"

    def _apply(self, sndr: object) -> Sender[object]:
        r: Sender[object] = early_child(sndr, _StoppedAsOptionalSender(sndr))
        return r

    if TYPE_CHECKING:
        # For type checkers: a stop becomes ``None`` (docs/typing.md).
        @overload
        def __call__(self, /) -> stopped_as_optional_t: ...
        @overload
        def __call__(self, sndr: Awaitable[T], /) -> Sender[T | None]: ...
        def __call__(self, *args: object) -> object: ...
        def __ror__(self, sndr: Awaitable[T]) -> Sender[T | None]: ...

    def transform_sender(self, sndr: object, env: object = None) -> object:
        """The lowering to ``let_stopped(then(...), ...)`` at ``connect`` ([exec.stopped.opt],
        [exec.snd.transform])."""
        if env is None or not isinstance(sndr, _StoppedAsOptionalSender):
            return sndr
        _check_optional(sndr._child, fwd_env(env))
        return sndr.lower()


# --------------------------------------------------------------------------- stopped_as_error


class _JustError:
    """``[err]() { return just_error(err); }`` (picklable when ``err`` is)."""

    __slots__ = ("err",)

    def __init__(self, err: object) -> None:
        self.err = err

    def __call__(self) -> Sender[NoReturn]:
        return just_error(self.err)


class _ErrorReceiver:
    __slots__ = ("_env", "_err", "_set_error", "set_error", "set_value")

    def __init__(self, rcvr: Receiver, err: object) -> None:
        self.set_value = rcvr.set_value
        self.set_error = self._set_error = rcvr.set_error
        self._err = err
        self._env = fwd_env(get_env(rcvr))

    def get_env(self) -> object:
        return self._env

    def set_stopped(self) -> None:
        self._set_error(self._err)


class _StoppedAsErrorSender(InlineAsChild, UnarySender):
    __slots__ = ("_err",)

    def __init__(self, child: object, err: object) -> None:
        self._child = child
        self._err = err

    def connect(self, rcvr: Receiver) -> OperationState:
        op: OperationState = connect(self._child, _ErrorReceiver(rcvr, self._err))
        return op

    def lower(self) -> Sender[object]:
        """``let_stopped(child, lambda: just_error(err))`` ([exec.stopped.err])."""
        return let_stopped(self._child, _JustError(self._err))

    def get_completion_signatures(self, env: object = None) -> completion_signatures | None:
        """The child's signatures, ``set_stopped_t()`` replaced by ``set_error_t(type(err))``."""
        cs = get_completion_signatures(self._child, None if env is None else fwd_env(env))
        if cs is None:
            return None
        rest = [s for s in cs if type(s) is not set_stopped_t]
        if cs.sends_stopped:
            rest.append(set_error_t(type(self._err)))
        return completion_signatures(*rest)

    @property
    def data(self) -> object:
        return self._err

    def __repr__(self) -> str:
        return f"stopped_as_error({self._child!r}, {self._err!r})"


class stopped_as_error_t(BinaryAdaptor):
    """``stopped_as_error(sndr, err)`` / ``sndr | stopped_as_error(err)``: stopped becomes an error.

    [exec.stopped.err]. ``set_stopped()`` becomes ``set_error(err)``;
    values and errors are forwarded; it never completes stopped. ``err`` is any object but
    ``None`` ([exec.general]), typically an exception, which ``sync_wait`` or ``await``
    then raise. The lowering to ``let_stopped(sndr, lambda: just_error(err))`` is its
    ``transform_sender``.

    Completion signatures: the child's value and error signatures plus
    ``set_error_t(type(err))``; never stopped ([exec.stopped.err]).

    Errors: the child's errors pass through.

    Cancellation: a stopped child completes ``set_error(err)``.

    Example:

    >>> import structexec as sx
    >>> sx.sync_wait(sx.just(1) | sx.stopped_as_error(KeyError('k')))
    (1,)
    """

    __slots__ = ()
    _name = "stopped_as_error"
    _arg = "err"

    @overload
    def __call__(self, err: object, /) -> WidenClosure[NoReturn]: ...
    @overload
    def __call__(self, sndr: Sender[T], err: object, /) -> Sender[T]: ...
    def __call__(self, *args: object) -> object:
        return self._build(args)

    def _check_arg(self, err: object) -> None:
        if err is None:
            raise TypeError(
                "stopped_as_error(): None is not a valid error datum ([exec.stopped.err])"
            )
        if is_sender(err) and not isinstance(err, BaseException):
            raise TypeError(
                "stopped_as_error(err) got a sender where the error datum belongs; write "
                "stopped_as_error(sndr, err) or sndr | stopped_as_error(err)"
            )

    def _make(self, sndr: object, err: object) -> Sender[object]:
        self._check_arg(err)
        return early_child(sndr, _StoppedAsErrorSender(sndr, err))

    def transform_sender(self, sndr: object, env: object = None) -> object:
        """The lowering to ``let_stopped(sndr, lambda: just_error(err))`` ([exec.stopped.err],
        [exec.snd.transform])."""
        if env is None or not isinstance(sndr, _StoppedAsErrorSender):
            return sndr
        return sndr.lower()


stopped_as_optional = stopped_as_optional_t()
stopped_as_error = stopped_as_error_t()
_StoppedAsOptionalSender.tag = stopped_as_optional
_StoppedAsErrorSender.tag = stopped_as_error
