"""Exposition-only ``stop-when`` ([exec.stop.when]).

``stop_when(sndr, t)`` fuses an extra stop token ``t`` into ``sndr``: once connected to a
receiver ``r`` whose token is ``rt``, the child sees a stop request from ``t`` *or* ``rt``.
It is how ``counting_scope.token.wrap`` makes ``request_stop()`` reach every associated
sender, and how ``spawn_future`` adds its own stop source.

* ``t`` unstoppable: ``stop_when(sndr, t)`` is ``sndr`` itself ([exec.stop.when]).
* ``rt`` unstoppable: the child's ``get_stop_token`` is ``t`` ([exec.stop.when]).
* otherwise the child's token is a :class:`combined_stop_token` of ``t`` and ``rt``
  ([exec.stop.when]): ``stop_requested()`` and ``stop_possible()`` are the ``or`` of the two, and a
  callback registered on it runs when either stops, at most once. ``stop_when`` registers no
  callback of its own, so nothing of its own is left registered when the child completes
  ([exec.stop.when]); the child deregisters what it registered on the combined token, which
  deregisters it from both underlying tokens.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._core._adaptor_util import close_op
from .._core._completion_signatures import get_completion_signatures
from .._core._connect import connect_unchecked as connect
from .._core._env import fwd_env, get_env
from .._core._protocol import Algorithm, Sender
from .._core._queries import QueryError, get_stop_token, query_or
from .._core._stop_token import combined_stop_token, is_unstoppable

if TYPE_CHECKING:
    from .._core._completion_signatures import completion_signatures
    from .._core._contracts import Env, OperationState, Receiver, StopToken

__all__: list[str] = []


class StopTokenEnv:
    """``JOIN-ENV(prop(get_stop_token, tok), base)`` without the generic machinery."""

    __slots__ = ("_base", "_tok")

    def __init__(self, tok: StopToken, base: object) -> None:
        self._tok = tok
        self._base = base

    def _sx_try(self, q: object, default: object) -> object:
        if q is get_stop_token:
            return self._tok
        return query_or(self._base, q, default)

    def query(self, q: object, *args: object) -> object:
        if q is get_stop_token and not args:
            return self._tok
        m = getattr(self._base, "query", None)
        if m is None:
            raise QueryError(f"the environment does not support {q!r}")
        return m(q, *args)


def child_token(t: StopToken, rt: StopToken) -> StopToken:
    """The token the child of ``stop-when`` sees, given the receiver's token ``rt``
    ([exec.stop.when])."""
    if is_unstoppable(rt):
        return t
    return combined_stop_token(t, rt)


class _StopWhenOp:
    """The operation; also the child's receiver (it forwards every completion unchanged)."""

    __slots__ = ("_env", "_op", "_rcvr")

    def __init__(self, rcvr: Receiver, env: object) -> None:
        self._rcvr = rcvr
        self._env = env
        self._op: OperationState | None = None

    def start(self) -> None:
        op = self._op
        if op is None:
            raise RuntimeError("start() on a stop_when operation that was closed (dropped)")
        op.start()

    def close(self) -> None:
        """Never started: close the child's operation
        (the senders guide "Writing your own sender")."""
        op, self._op = self._op, None
        if op is not None:
            close_op(op)

    def get_env(self) -> object:
        return self._env

    def set_value(self, *vals: object) -> None:
        self._rcvr.set_value(*vals)

    def set_error(self, err: object) -> None:
        self._rcvr.set_error(err)

    def set_stopped(self) -> None:
        self._rcvr.set_stopped()


class stop_when_t(Algorithm):
    """The ``stop-when`` adaptor object (exposition-only in the spec; private here)."""

    __slots__ = ()

    def __call__(self, sndr: object, token: StopToken) -> object:
        if is_unstoppable(token):
            return sndr  # [exec.stop.when]
        return _StopWhenSender(sndr, token)


stop_when = stop_when_t()


class _StopWhenSender(Sender[object]):
    __slots__ = ("_child", "_token")
    tag = stop_when

    def __init__(self, child: object, token: StopToken) -> None:
        self._child = child
        self._token = token

    def connect(self, rcvr: Receiver) -> _StopWhenOp:
        e = get_env(rcvr)
        tok = child_token(self._token, get_stop_token(e))
        op = _StopWhenOp(rcvr, StopTokenEnv(tok, fwd_env(e)))
        op._op = connect(self._child, op)
        return op

    def get_env(self) -> Env:
        return fwd_env(get_env(self._child))

    def get_completion_signatures(self, env: object = None) -> completion_signatures | None:
        if env is None:
            return get_completion_signatures(self._child)
        tok = child_token(self._token, get_stop_token(env))
        return get_completion_signatures(self._child, StopTokenEnv(tok, fwd_env(env)))

    @property
    def data(self) -> object:
        return self._token

    @property
    def children(self) -> tuple[object, ...]:
        return (self._child,)

    def __repr__(self) -> str:
        return f"stop_when({self._child!r}, {self._token!r})"
