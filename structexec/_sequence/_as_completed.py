"""``as_completed(*senders)`` (private module)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._core._adaptor_util import check_sender
from ._bounded import BoundedSequence
from ._iterate import _END, Pump
from ._protocol import SequenceSender

if TYPE_CHECKING:
    from ._protocol import SeqRcvr

__all__ = ["as_completed"]

_new = object.__new__


class _SendersOp(Pump):
    """Offers each sender itself as an item."""

    __slots__ = ("_i", "_senders")
    _i: int
    _senders: list[object]

    def _pull(self) -> object:
        i = self._i
        senders = self._senders
        if i >= len(senders):
            return _END
        self._i = i + 1
        s = senders[i]
        senders[i] = None  # started senders are not kept alive by the source
        return s


class _SendersSequence(SequenceSender[object]):
    __slots__ = ("_senders",)
    _senders: tuple[object, ...]

    def __init__(self, senders: tuple[object, ...]) -> None:
        self._senders = senders

    def connect(self, rcvr: SeqRcvr) -> _SendersOp:
        op = _new(_SendersOp)
        op._init(rcvr)
        op._senders = list(self._senders)
        op._i = 0
        return op


def _identity(s: object) -> object:
    return s


def as_completed(*senders: object) -> SequenceSender[Any]:
    """A sequence of the results of ``senders``, in the order in which they complete.

    All the senders (coroutine objects included: each runs in its own trio task under trio)
    are started at once when the sequence starts; each result is offered as an item
    (``just(*values)``) as soon as it is there. It replaces ``asyncio.as_completed`` and the
    trio idiom of a nursery whose tasks send into a memory channel. Bounded concurrency:
    ``sx.iterate(senders_or_coroutines) | sx.let_each(lambda s: s, max_concurrency=n)``.

    Errors: the first sender that fails stops all the others, and the consumer completes with
    that error once they all completed. Stops as for every sequence. Like any sender, a
    coroutine object can be consumed once: the sequence can be run once.

    Raises ``TypeError`` at once if an argument is not a sender or awaitable.
    """
    for i, s in enumerate(senders):
        check_sender("as_completed", f"senders[{i}]", s)
    if not senders:
        return BoundedSequence(_SendersSequence(()), _identity, 1, False, "as_completed")
    return BoundedSequence(
        _SendersSequence(senders), _identity, len(senders), False, "as_completed"
    )
