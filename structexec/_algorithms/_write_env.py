"""``write_env`` ([exec.write.env]).

``write_env(sndr, e)`` runs ``sndr`` with the receiver environment
``JOIN-ENV(e, FWD-ENV(get_env(rcvr)))``: the written queries win, are visible even when they are not
forwarding queries, and the outer receiver's non-forwarding queries are hidden ([exec.write.env]).
It completes wherever its child completes, which ``affine_on`` relies on ([exec.write.env]).
``unstoppable`` (``_unstoppable``) builds the same sender.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NoReturn, TypeVar, overload

from .._core._adaptor_util import (
    BinaryAdaptor,
    InlineAsChild,
    UnarySender,
    WriteEnvReceiver,
    early_child,
)
from .._core._completion_signatures import completion_signatures, dependent_sender_error
from .._core._connect import connect_unchecked as connect
from .._core._env import EMPTY_ENV, fwd_env, join_env
from .._core._protocol import Sender, WidenClosure

if TYPE_CHECKING:
    from .._core._contracts import OperationState, Receiver

__all__ = ["write_env"]

T = TypeVar("T")


class _WriteEnvSender(InlineAsChild, UnarySender):
    __slots__ = ("_env",)

    def __init__(self, child: object, e: object) -> None:
        self._child = child
        self._env = e

    def connect(self, rcvr: Receiver) -> OperationState:
        # The operation adds nothing to start(): the child's operation state is the result.
        op: OperationState = connect(self._child, WriteEnvReceiver(rcvr, self._env))  # type: ignore[arg-type]
        return op

    def get_completion_signatures(self, env: object = None) -> completion_signatures | None:
        """The child's signatures in the joined environment ([exec.write.env])."""
        m = getattr(self._child, "get_completion_signatures", None)
        if m is None:
            return None
        if env is not None:
            r: completion_signatures | None = m(join_env(self._env, fwd_env(env)))  # type: ignore[arg-type]
            return r
        try:
            r = m(None)
        except dependent_sender_error as dep:
            # The written env may be all the child needs (write_env(read_env(q), prop(q, v))).
            try:
                r = m(self._env)
            except TypeError:
                raise dep from None
        return r

    @property
    def data(self) -> object:
        return self._env

    def __repr__(self) -> str:
        return f"write_env({self._child!r}, {self._env!r})"


class write_env_t(BinaryAdaptor):
    """``write_env(sndr, env)``: run ``sndr`` with ``env`` joined in front of the receiver's.

    [exec.write.env]. The child's receiver environment is
    ``JOIN-ENV(env, FWD-ENV(get_env(rcvr)))``:

    * queries answered by ``env`` take precedence over the receiver's;
    * they are visible to the child even if they are not forwarding queries;
    * the receiver's own non-forwarding queries are hidden.

    Completions are forwarded unchanged; the completion signatures are the child's in the joined
    environment ([exec.write.env]). ``env`` is any object with a ``query`` method (``sx.prop``,
    ``sx.env``). ``write_env(env)`` (no sender) returns a closure, so ``sndr | write_env(env)``
    works too (an extension: the draft has no closure form, [exec.write.env]). Raises ``TypeError``
    for a non-sender or a non-environment.

    Completion signatures: the child's, computed in the joined environment ([exec.write.env]).

    Errors: none added; completions are forwarded unchanged.

    Cancellation: the receiver's stop token is forwarded unless ``env`` answers
    ``get_stop_token`` itself.

    Example:

    >>> import structexec as sx
    >>> sx.sync_wait(sx.write_env(sx.read_env(sx.get_allocator), sx.prop(sx.get_allocator, 'a')))
    ('a',)
    """

    __slots__ = ()
    _name = "write_env"
    _arg = "env"

    @overload
    def __call__(self, env: object, /) -> WidenClosure[NoReturn]: ...
    @overload
    def __call__(self, sndr: Sender[T], env: object, /) -> Sender[T]: ...
    def __call__(self, *args: object) -> object:
        return self._build(args)

    def _check_arg(self, e: object) -> None:
        if e is EMPTY_ENV:
            return
        if not callable(getattr(e, "query", None)) or isinstance(e, type):
            raise TypeError(
                "write_env(): env must be an environment (an object with a query() method such "
                f"as sx.prop(q, v) or sx.env(...)), got {type(e).__name__}"
            )

    def _make(self, sndr: object, e: object) -> Sender[object]:
        self._check_arg(e)
        return early_child(sndr, _WriteEnvSender(sndr, e))


write_env = write_env_t()
_WriteEnvSender.tag = write_env
