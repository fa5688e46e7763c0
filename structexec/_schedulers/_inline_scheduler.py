"""``inline_scheduler`` ([exec.inline.scheduler])."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._core._completion_signatures import completion_signatures
from .._core._env import TryEnv
from .._core._protocol import Sender, twice_started
from .._core._queries import get_completion_scheduler
from .._core._tags import set_value_t

if TYPE_CHECKING:
    from .._core._contracts import Env, Receiver

__all__ = ["inline_scheduler"]


class _InlineOp:
    __slots__ = ("_rcvr", "_started")

    def __init__(self, rcvr: Receiver) -> None:
        self._rcvr = rcvr
        self._started = False

    def start(self) -> None:
        if self._started:
            raise twice_started(self)
        self._started = True
        self._rcvr.set_value()


class _InlineAttrs(TryEnv):
    """The schedule sender's attributes: only the value completion scheduler
    ([exec.inline.scheduler])."""

    __slots__ = ()
    _unsupported = "inline_scheduler's sender does not support {q!r}"

    def _sx_try(self, q: object, default: object) -> object:
        if q is get_completion_scheduler[set_value_t]:
            return _INLINE
        return default


class _InlineSender(Sender[None]):
    __slots__ = ()
    _sx_completes_inline = True

    def connect(self, rcvr: Receiver) -> _InlineOp:
        return _InlineOp(rcvr)

    def get_env(self) -> Env:
        return _INLINE_ATTRS

    def get_completion_signatures(self, env: object = None) -> completion_signatures:
        return _SIGS


class inline_scheduler:
    """A scheduler whose ``schedule()`` completes ``set_value()`` inside ``start``
    ([exec.inline.scheduler]).

    All instances compare equal. It is infallible (its sender declares exactly
    ``set_value_t()``), so it can be a ``task``'s ``scheduler_type`` to turn affinity off.
    """

    __slots__ = ()

    def __new__(cls) -> inline_scheduler:
        return _INLINE if "_INLINE" in globals() else super().__new__(cls)

    def schedule(self) -> Sender[None]:
        return _INLINE_SENDER

    def __eq__(self, other: object) -> bool:
        if isinstance(other, inline_scheduler):
            return True
        return NotImplemented  # let e.g. task_scheduler answer (symmetric equality, 23)

    def __hash__(self) -> int:
        return hash(inline_scheduler)

    def __repr__(self) -> str:
        return "inline_scheduler()"


_INLINE = inline_scheduler()
_INLINE_ATTRS = _InlineAttrs()
_INLINE_SENDER = _InlineSender()  # stateless: one instance serves every schedule()
_SIGS = completion_signatures(set_value_t())
