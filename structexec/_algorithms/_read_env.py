"""``read_env(q)`` ([exec.read.env]): a sender that completes with a query of the receiver's
environment."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._core._completion_signatures import completion_signatures, dependent_sender_error
from .._core._env import get_env
from .._core._protocol import Algorithm, Sender, twice_started
from .._core._queries import QueryError
from .._core._tags import set_error_t, set_value_t

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._core._contracts import Receiver

__all__ = ["read_env"]


class _ReadEnvOp:
    __slots__ = ("_q", "_rcvr", "_started")

    def __init__(self, rcvr: Receiver, q: Callable[[object], object]) -> None:
        self._rcvr = rcvr
        self._q = q
        self._started = False

    def start(self) -> None:
        if self._started:
            raise twice_started(self)
        self._started = True
        try:
            v = self._q(get_env(self._rcvr))
        except Exception as e:
            self._rcvr.set_error(e)
            return
        self._rcvr.set_value(v)


class _ReadEnvSender(Sender[object]):
    __slots__ = ("_q",)
    _sx_completes_inline = True

    def __init__(self, q: Callable[[object], object]) -> None:
        self._q = q

    def connect(self, rcvr: Receiver) -> _ReadEnvOp:
        try:
            self._q(get_env(rcvr))
        except QueryError as e:
            raise TypeError(
                f"read_env({self._q!r}): the receiver's environment does not support this query "
                f"({e}); a non-forwarding query does not cross adaptors ([exec.fwd.env])"
            ) from None
        except Exception:
            pass  # supported but failing: start() completes with set_error (TRY-SET-VALUE)
        return _ReadEnvOp(rcvr, self._q)

    def get_completion_signatures(self, env: object = None) -> completion_signatures:
        if env is None:
            raise dependent_sender_error(
                "read_env() is a dependent sender: its signatures need an environment "
                "([exec.getcomplsigs])"
            )
        try:
            v = self._q(env)
        except QueryError as e:
            raise TypeError(f"read_env({self._q!r}) in an environment without it: {e}") from None
        return completion_signatures(set_value_t(type(v)), set_error_t(Exception))

    @property
    def data(self) -> object:
        return self._q

    def __repr__(self) -> str:
        return f"read_env({self._q!r})"


class read_env_t(Algorithm):
    """``read_env(q)``: completes inline with ``set_value(q(get_env(rcvr)))`` ([exec.read.env]).

    Connecting it to a receiver whose environment does not support ``q`` raises ``TypeError``
    (C++ rejects it at compile time). If the query raises, the result is ``set_error``.

    Completion signatures: ``set_value_t(T)`` with the query's answer,
    ``set_error_t(Exception)`` ([exec.read.env]).

    Errors: an exception raised by the query while answering completes ``set_error`` with it
    (TRY-SET-VALUE); a query the receiver's environment does not support makes ``connect`` raise
    ``TypeError`` ([exec.fwd.env]).

    Cancellation: none: it completes inline inside ``start``.

    Example:

    >>> import structexec as sx
    >>> sx.sync_wait(sx.read_env(sx.get_stop_token))
    (never_stop_token(),)
    """

    __slots__ = ()

    def __call__(self, q: object) -> Sender[Any]:
        if not callable(q):
            raise TypeError(f"read_env() needs a query object, got {type(q).__name__}")
        return _ReadEnvSender(q)


read_env = read_env_t()
_ReadEnvSender.tag = read_env
