"""Argument checks shared by the public entry points (private helper).

Every API that takes a time (``schedule_after``/``schedule_at`` and the timed schedulers'
methods, ``timeout``, ``stop_after``, ``retry(delay=, backoff=)``, ``stop_grace=``,
``set_stop_grace``, ``ManualScheduler.advance``) accepts the same numbers through
:func:`real_seconds`: ``int``, ``float``, ``fractions.Fraction``, ``decimal.Decimal`` and any
other type with ``__float__`` (numpy scalars), but not ``bool``, ``str``, ``bytes`` or
``complex``. The number becomes a ``float``; the checks raise ``TypeError``/``ValueError`` when
the sender or scope is built, naming the function and the argument
(the adaptors guide).
"""

from __future__ import annotations

import math
from typing import Any

__all__: list[str] = []

#: What a number of seconds may be, for messages.
SECONDS_ACCEPTED = (
    "a real number of seconds (int, float, fractions.Fraction, decimal.Decimal or another "
    "type with __float__; not bool or str)"
)


def short_repr(x: object, n: int = 40) -> str:
    """``repr(x)``, cut to ``n`` characters (a 400-digit int stays readable)."""
    try:
        r = repr(x)
    except Exception:  # pragma: no cover - a broken __repr__
        r = f"<{type(x).__name__} object>"
    return r if len(r) <= n else r[: n - 3] + "..."


def real_seconds(x: Any, fn: str, name: str, *, negative: bool = False, inf: bool = True) -> float:
    """``x`` as a float, or the ``TypeError``/``ValueError`` that names ``fn`` and ``name``.

    ``negative``: negative numbers are accepted (a deadline); ``inf``: ``math.inf`` is (a wait
    that never ends). NaN is never accepted, nor a number too large for a float (``10**400``).
    """
    t = type(x)
    if t is float:
        v: float = x
    else:
        if t is not int and (
            isinstance(x, (str, bytes, bytearray, bool, complex)) or not hasattr(t, "__float__")
        ):
            raise TypeError(f"{fn}: {name} must be a number: {SECONDS_ACCEPTED}; got {t.__name__}")
        try:
            v = float(x)
        except OverflowError:
            never = " (use math.inf for a wait that never ends)" if inf else ""
            raise ValueError(
                f"{fn}: {name} is too large for a float number of seconds, got "
                f"{short_repr(x)}{never}"
            ) from None
        except (TypeError, ValueError) as e:
            raise TypeError(
                f"{fn}: {name} must be a number: {SECONDS_ACCEPTED}; got {t.__name__} "
                f"({e})"
            ) from None
    if v != v:
        if negative:
            raise ValueError(f"{fn}: {name} must not be NaN")
        raise ValueError(f"{fn}: {name} must be {_RANGE[inf]}, got {short_repr(x)}")
    if not inf and (v == math.inf or v == -math.inf):
        raise ValueError(f"{fn}: {name} must be {_RANGE[inf]}, got {short_repr(x)}")
    if not negative and v < 0.0:
        raise ValueError(f"{fn}: {name} must be {_RANGE[inf]}, got {short_repr(x)}")
    return v


_RANGE = {True: ">= 0 (and not NaN)", False: "finite and >= 0"}
