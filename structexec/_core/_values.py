"""``values(*xs)``: several value datums from one function result ([exec.then]).

A ``then``/``upon_*``/``let_*`` function returns one object, and C++ sends one datum per return
value ([exec.then]). Python needs a way to send zero, one or several: ``None`` is no datum, a
plain object (a tuple included) one datum, and ``values(*xs)`` the datums ``xs``. The same rule
maps a coroutine's result, and ``await`` maps several datums back to a tuple. ``values`` is an
extension of the library, not part of the protocol (``_protocol``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._contracts import Rcvr

__all__ = ["send_result", "values"]


class values(tuple):  # type: ignore[type-arg]
    """Return ``sx.values(a, b)`` from a ``then`` function to send several datums.

    the trio guide "Awaiting a sender": a function's ``None`` means "no datum" and a returned tuple
    is one datum; ``values(*xs)`` sends ``xs`` as separate datums, and ``values(None)`` sends one
    ``None``.
    """

    __slots__ = ()

    def __new__(cls, *xs: object) -> values:
        return tuple.__new__(cls, xs)

    def __repr__(self) -> str:
        return f"values{tuple.__repr__(self)}"


def send_result(rcvr: Rcvr, result: object) -> None:
    """Complete ``rcvr`` with a function's or coroutine's result by the rule above: ``None``
    sends no datum, ``values(*xs)`` the datums ``xs``, anything else one datum. The one place
    that maps a coroutine's result to ``set_value`` (the coroutine loop, ``task``, coroutine
    senders, the direct path of ``scope.spawn_future(coro)``)."""
    if result is None:
        rcvr.set_value()
    elif type(result) is values:
        rcvr.set_value(*result)
    else:
        rcvr.set_value(result)
