"""Completion signatures ([exec.cmplsig], [exec.getcomplsigs]).

A sender declares what it can complete with by a method ``get_completion_signatures(env=None)``
returning :class:`completion_signatures`. Senders without the method have unknown signatures,
and ``get_completion_signatures`` returns ``None`` for them; the library is then permissive at
run time (the adaptors guide).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from ._tags import _Signature, set_error_t, set_stopped_t, set_value_t

__all__ = ["completion_signatures", "dependent_sender_error", "get_completion_signatures"]


class dependent_sender_error(TypeError):
    """Raised when a sender's signatures depend on an environment and none was given
    ([exec.getcomplsigs])."""


class completion_signatures:
    """An ordered set of completion signatures ([exec.cmplsig]).

    ``completion_signatures(sx.set_value_t(int), sx.set_error_t(Exception), sx.set_stopped_t())``.
    Supports ``len``, iteration, ``in``, ``|`` (union), ``count_of(tag)``, ``value_types``,
    ``error_types`` and ``sends_stopped``.
    """

    __slots__ = ("_sigs",)

    def __init__(self, *sigs: _Signature) -> None:
        seen: dict[_Signature, None] = {}
        for s in sigs:
            if not isinstance(s, _Signature):
                raise TypeError(
                    "completion_signatures() takes signatures such as sx.set_value_t(int), "
                    f"sx.set_error_t(Exception) or sx.set_stopped_t(), got {s!r}"
                )
            seen[s] = None
        self._sigs = tuple(seen)

    def __iter__(self) -> Iterator[_Signature]:
        return iter(self._sigs)

    def __len__(self) -> int:
        return len(self._sigs)

    def __contains__(self, sig: object) -> bool:
        return sig in self._sigs

    def __eq__(self, other: object) -> bool:
        return isinstance(other, completion_signatures) and set(self._sigs) == set(other._sigs)

    def __hash__(self) -> int:
        return hash(frozenset(self._sigs))

    def __or__(self, other: completion_signatures) -> completion_signatures:
        return completion_signatures(*self._sigs, *other._sigs)

    def __repr__(self) -> str:
        return f"completion_signatures({', '.join(map(repr, self._sigs))})"

    def count_of(self, tag: type) -> int:
        """How many signatures have the tag ``tag`` (``sx.set_value_t`` etc.)."""
        return sum(1 for s in self._sigs if type(s) is tag)

    @property
    def value_types(self) -> list[tuple[object, ...]]:
        """The datum types of each value signature (``value_types_of_t``)."""
        return [s.args for s in self._sigs if type(s) is set_value_t]

    @property
    def error_types(self) -> list[object]:
        """The error types (``error_types_of_t``)."""
        return [s.args[0] for s in self._sigs if type(s) is set_error_t]

    @property
    def sends_stopped(self) -> bool:
        """True if ``set_stopped_t()`` is among the signatures."""
        return any(type(s) is set_stopped_t for s in self._sigs)

    @staticmethod
    def union(sets: Iterable[completion_signatures | None]) -> completion_signatures | None:
        """Union of several signature sets; ``None`` (unknown) if any is unknown."""
        out: list[_Signature] = []
        for s in sets:
            if s is None:
                return None
            out.extend(s)
        return completion_signatures(*out)


def get_completion_signatures(sndr: object, env: object = None) -> completion_signatures | None:
    """The completion signatures of ``sndr`` in ``env``, or ``None`` when unknown
    ([exec.getcomplsigs]).

    A dependent sender (one like ``read_env`` whose signatures depend on the environment)
    raises :class:`dependent_sender_error` when no environment is given.
    """
    m = getattr(sndr, "get_completion_signatures", None)
    if m is None:
        return None
    r = m(env)
    if r is not None and not isinstance(r, completion_signatures):
        raise TypeError(
            f"{type(sndr).__name__}.get_completion_signatures() returned {r!r}; it must return "
            "sx.completion_signatures(...) or None"
        )
    return r
