"""``unstoppable(sndr)`` ([exec.unstoppable]).

``unstoppable(sndr)`` is ``write_env(sndr, prop(get_stop_token, never_stop_token()))``
([exec.unstoppable]): the same ``write_env`` sender, so it completes wherever its child completes.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, TypeVar, overload

from .._core._adaptor_util import UnaryAdaptor, early_child
from .._core._infallible import UNSTOPPABLE_ENV
from .._core._protocol import Sender
from ._write_env import _WriteEnvSender

__all__ = ["unstoppable"]

T = TypeVar("T")


class unstoppable_t(UnaryAdaptor):
    """``unstoppable(sndr)``: run ``sndr`` with a ``never_stop_token`` ([exec.unstoppable]).

    [exec.unstoppable]. Equivalent to ``write_env(sndr, prop(get_stop_token,
    never_stop_token()))`` (and it is that sender: its ``tag`` is ``write_env``). Inside,
    ``read_env(get_stop_token)`` gives ``never_stop_token()``; a stop request on the outer
    receiver's token never reaches the child; completions are forwarded unchanged. Also usable
    as ``sndr | unstoppable`` (an extension).

    Completion signatures: the child's, computed with a ``never_stop_token``
    ([exec.unstoppable]).

    Errors: none added; completions are forwarded unchanged.

    Cancellation: the child sees ``never_stop_token()``: a stop request on the receiver's token
    never reaches it.

    Example:

    >>> import structexec as sx
    >>> sx.sync_wait(sx.unstoppable(sx.read_env(sx.get_stop_token)))
    (never_stop_token(),)
    """

    __slots__ = ()
    _name = "unstoppable"

    def _apply(self, sndr: object) -> Sender[object]:
        r: Sender[object] = early_child(sndr, _WriteEnvSender(sndr, UNSTOPPABLE_ENV))
        return r

    if TYPE_CHECKING:
        # For type checkers: the value type is kept (docs/typing.md).
        @overload
        def __call__(self, /) -> unstoppable_t: ...
        @overload
        def __call__(self, sndr: Awaitable[T], /) -> Sender[T]: ...
        def __call__(self, *args: object) -> object: ...
        def __ror__(self, sndr: Awaitable[T]) -> Sender[T]: ...


unstoppable = unstoppable_t()
