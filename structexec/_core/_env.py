"""Environments: ``prop``, ``env``, ``get_env``, ``FWD-ENV``, ``JOIN-ENV``, ``SCHED-ATTRS``,
``SCHED-ENV`` and the ``TryEnv`` base.

[exec.queryable], [exec.prop], [exec.env], [exec.get.env], [exec.snd.expos] (the senders guide
"Environments and queries").

An *environment* is any object with a method ``query(q, *args)`` that returns the answer or
raises ``QueryError`` when it does not support ``q``. The queries themselves (the ``Query`` base,
``QueryError``, ``query_or`` and the standard queries of [exec.queries]) are in ``_queries``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from ._queries import (
    _MISSING,
    QueryError,
    forwarding_query,
    get_completion_scheduler_t,
    get_domain,
    get_scheduler,
    query_or,
)
from ._tags import set_error_t

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._contracts import Env, Sched

__all__ = ["env", "get_env", "prop"]

T = TypeVar("T")


class TryEnv:
    """Base of the library's environments that answer through ``_sx_try`` (private).

    Subclasses implement ``_sx_try(q, default)``, the fast lookup :func:`query_or` uses, and
    inherit ``query(q)`` from it: the answer, or :class:`QueryError` with the message
    ``_unsupported`` (formatted with ``q`` and ``self``) when ``_sx_try`` gives the default.
    Queries with extra arguments are answered as without them.
    """

    __slots__ = ()
    _unsupported: ClassVar[str] = "the environment does not support {q!r}"

    def _sx_try(self, q: object, default: object) -> object:
        return default

    def query(self, q: object, *args: object) -> object:
        r = self._sx_try(q, _MISSING)
        if r is _MISSING:
            raise QueryError(self._unsupported.format(q=q, self=self))
        return r


class _EmptyEnv(TryEnv):
    """``env()``: supports no query."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "env()"


EMPTY_ENV = _EmptyEnv()


class prop(Generic[T]):
    """``prop(q, v)``: an environment answering exactly one query ([exec.prop]).

    ``prop(q, v).query(q)`` returns ``v`` itself; every other query is unsupported. Immutable.
    """

    __slots__ = ("_q", "_v")
    _q: object
    _v: T

    def __init__(self, query: object, value: T) -> None:
        object.__setattr__(self, "_q", query)
        object.__setattr__(self, "_v", value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("prop is immutable")

    def query(self, q: object, *args: object) -> T:
        if q is self._q or q == self._q:
            return self._v
        raise QueryError(f"prop({self._q!r}, ...) does not support {q!r}")

    def _sx_try(self, q: object, default: object) -> object:
        if q is self._q or q == self._q:
            return self._v
        return default

    def __repr__(self) -> str:
        return f"prop({self._q!r}, {self._v!r})"


class env:
    """``env(e0, e1, ...)``: the first sub-environment that supports a query answers it.

    [exec.env]. ``env()`` supports nothing. Any object with a ``query``
    method can be a sub-environment; anything else raises ``TypeError`` naming its position.
    Immutable.
    """

    __slots__ = ("_envs",)
    _envs: tuple[Env, ...]

    def __init__(self, *envs: Env) -> None:
        for i, e in enumerate(envs):
            if not callable(getattr(e, "query", None)):
                raise TypeError(
                    f"env(): argument #{i} must be an environment (an object with a query() "
                    f"method, such as sx.prop(q, v) or sx.env(...)), got {type(e).__name__}"
                )
        object.__setattr__(self, "_envs", envs)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("env is immutable")

    def query(self, q: object, *args: object) -> Any:
        for e in self._envs:
            m = getattr(e, "query", None)
            if m is None:
                continue
            try:
                return m(q, *args)
            except QueryError:
                continue
        raise QueryError(f"no sub-environment of {self!r} supports {q!r}")

    def _sx_try(self, q: object, default: object) -> object:
        for e in self._envs:
            r = query_or(e, q, _MISSING)
            if r is not _MISSING:
                return r
        return default

    def __repr__(self) -> str:
        return f"env({', '.join(map(repr, self._envs))})"


class _FwdEnv:
    """``FWD-ENV(e)``: only the forwarding queries of ``e`` ([exec.snd.expos])."""

    __slots__ = ("_e",)

    def __init__(self, e: object) -> None:
        self._e = e

    def query(self, q: object, *args: object) -> object:
        if getattr(q, "forwarding", False) is True or forwarding_query(q):
            m = getattr(self._e, "query", None)
            if m is not None:
                return m(q, *args)
        raise QueryError(f"{q!r} is not supported (non-forwarding queries do not cross adaptors)")

    def _sx_try(self, q: object, default: object) -> object:
        if getattr(q, "forwarding", False) is True or forwarding_query(q):
            return query_or(self._e, q, default)
        return default


def fwd_env(e: object) -> Env:
    """``FWD-ENV(e)``, avoiding a second wrapper around an already forwarding-only env.
    ``e`` is any environment (an object without ``query`` answers nothing)."""
    if type(e) is _FwdEnv:
        return e
    if e is EMPTY_ENV:
        return EMPTY_ENV
    return _FwdEnv(e)


class _JoinEnv:
    """``JOIN-ENV(e1, e2)`` ([exec.snd.expos]): ``e1`` first, then ``e2``."""

    __slots__ = ("_a", "_b")

    def __init__(self, a: Env, b: Env) -> None:
        self._a = a
        self._b = b

    def query(self, q: object, *args: object) -> object:
        if args:
            try:
                return self._a.query(q, *args)
            except QueryError:
                return self._b.query(q, *args)
        r = query_or(self._a, q, _MISSING)
        if r is not _MISSING:
            return r
        m = getattr(self._b, "query", None)
        if m is None:
            raise QueryError(f"{q!r} is not supported")
        return m(q)

    def _sx_try(self, q: object, default: object) -> object:
        r = query_or(self._a, q, _MISSING)
        if r is not _MISSING:
            return r
        return query_or(self._b, q, default)


def join_env(a: Env, b: Env) -> Env:
    """``JOIN-ENV(a, b)``, skipping empty sides."""
    if a is EMPTY_ENV:
        return b
    if b is EMPTY_ENV:
        return a
    return _JoinEnv(a, b)


def get_env(obj: object) -> Env:
    """``get_env(o)``: ``o.get_env()`` if defined, else ``env()`` ([exec.get.env]).

    For a sender this is its *attributes*; for a receiver its *environment*.
    """
    m: Callable[[], Env] | None = getattr(obj, "get_env", None)
    if m is None:
        return EMPTY_ENV
    return m()


# --------------------------------------------------------------------------- SCHED-ATTRS / ENV


class _SchedAttrs(TryEnv):
    """``SCHED-ATTRS(sch)`` ([exec.snd.expos]): completion scheduler for value and stopped."""

    __slots__ = ("_sch",)
    _unsupported = "scheduler attributes do not support {q!r}"

    def __init__(self, sch: Sched) -> None:
        self._sch = sch

    def _sx_try(self, q: object, default: object) -> object:
        if type(q) is get_completion_scheduler_t:
            return default if q.tag is set_error_t else self._sch
        if q is get_domain:
            return query_or(self._sch, get_domain, default)
        return default


class _SchedEnv(TryEnv):
    """``SCHED-ENV(sch)`` ([exec.snd.expos]): ``get_scheduler`` and ``get_domain``."""

    __slots__ = ("_sch",)
    _unsupported = "scheduler environment does not support {q!r}"

    def __init__(self, sch: Sched) -> None:
        self._sch = sch

    def _sx_try(self, q: object, default: object) -> object:
        if q is get_scheduler:
            return self._sch
        if q is get_domain:
            return query_or(self._sch, get_domain, default)
        return default


sched_attrs = _SchedAttrs
sched_env = _SchedEnv
