"""``into_variant`` ([exec.into.variant]).

Python has no ``variant<tuple<...>...>``: the single datum that ``into_variant`` sends is the
tuple of the child's datums (the trio guide "Awaiting a sender").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._core._adaptor_util import InlineAsChild, UnaryAdaptor, UnarySender, early_child
from .._core._completion_signatures import completion_signatures, get_completion_signatures
from .._core._connect import connect_unchecked as connect
from .._core._env import fwd_env, get_env
from .._core._protocol import Sender
from .._core._tags import set_value_t

if TYPE_CHECKING:
    from .._core._contracts import OperationState, Receiver

__all__ = ["into_variant"]


class _IntoVariantReceiver:
    __slots__ = ("_env", "_set_value", "set_error", "set_stopped")

    def __init__(self, rcvr: Receiver) -> None:
        self._set_value = rcvr.set_value
        self.set_error = rcvr.set_error
        self.set_stopped = rcvr.set_stopped
        self._env = fwd_env(get_env(rcvr))

    def get_env(self) -> object:
        return self._env

    def set_value(self, *vals: object) -> None:
        self._set_value(vals)


class _IntoVariantSender(InlineAsChild, UnarySender):
    __slots__ = ()

    def __init__(self, child: object) -> None:
        self._child = child

    def connect(self, rcvr: Receiver) -> OperationState:
        # Nothing to do at start: the child's operation state is the result.
        op: OperationState = connect(self._child, _IntoVariantReceiver(rcvr))
        return op

    def get_completion_signatures(self, env: object = None) -> completion_signatures | None:
        """``set_value_t(tuple)`` plus the child's error and stopped signatures
        ([exec.into.variant])."""
        cs = get_completion_signatures(self._child, None if env is None else fwd_env(env))
        if cs is None:
            return None
        rest = [s for s in cs if type(s) is not set_value_t]
        if cs.count_of(set_value_t):
            return completion_signatures(set_value_t(tuple), *rest)
        return completion_signatures(*rest)

    def __repr__(self) -> str:
        return f"into_variant({self._child!r})"


class into_variant_t(UnaryAdaptor):
    """``into_variant(sndr)`` / ``sndr | into_variant``: send the values as one tuple.

    [exec.into.variant]. ``set_value(*a)`` becomes ``set_value(tuple(a))``, exactly one datum:
    ``just(1, 2)`` gives ``(1, 2)``, ``just()`` gives ``()``. Errors and stopped are forwarded
    unchanged. Useful to give a sender with several possible value shapes a single one (``when_all``
    needs that, [exec.when.all]). ``into_variant()`` is the closure itself.

    Completion signatures: ``set_value_t(tuple)`` and the child's error and stopped signatures
    ([exec.into.variant]).

    Errors: the child's errors pass through.

    Cancellation: none of its own; ``set_stopped()`` passes through.

    Example:

    >>> import structexec as sx
    >>> sx.sync_wait(sx.just(1, 2) | sx.into_variant)
    ((1, 2),)
    """

    __slots__ = ()
    _name = "into_variant"

    def _apply(self, sndr: object) -> Sender[object]:
        r: Sender[object] = early_child(sndr, _IntoVariantSender(sndr))
        return r


into_variant = into_variant_t()
_IntoVariantSender.tag = into_variant
