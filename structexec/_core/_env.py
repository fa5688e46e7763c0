"""Queries and environments: ``Query``, ``prop``, ``env``, forwarding, the standard queries.

[exec.queryable], [exec.prop], [exec.env], [exec.get.env], [exec.fwd.env], [exec.queries]
([exec.queryable], [exec.env], [exec.queries], docs/senders.md "Environments and queries").

An *environment* is any object with a method ``query(q, *args)`` that returns the answer or
raises :class:`QueryError` when it does not support ``q``. A *query* is a callable object:
``get_scheduler(env)`` is ``env.query(get_scheduler)``. Users write their own queries as
instances of a subclass of :class:`Query`.
"""

from __future__ import annotations

import enum
from typing import Any, ClassVar, Generic, TypeVar

from ._stop_token import never_stop_token
from ._tags import set_error_t, set_stopped_t, set_value_t

__all__ = [
    "Query",
    "QueryError",
    "env",
    "forward_progress_guarantee",
    "forwarding_query",
    "get_allocator",
    "get_await_completion_adaptor",
    "get_completion_scheduler",
    "get_delegation_scheduler",
    "get_domain",
    "get_env",
    "get_forward_progress_guarantee",
    "get_scheduler",
    "get_stop_token",
    "prop",
]

T = TypeVar("T")
_MISSING: Any = object()


class QueryError(LookupError):
    """Raised by ``env.query(q)`` when the environment does not support ``q``.

    C++ makes an unsupported query ill-formed; Python needs to tell "not supported" apart from
    "supported, and the answer is ``None``" ([exec.queryable.general]). It is a ``LookupError``.
    """


class Query:
    """Base class for query objects ([exec.queryable.general], [exec.fwd.env]).

    A query is called with an environment: ``q(env, *args)`` is ``env.query(q, *args)``. Set the
    class attribute ``forwarding = True`` to make the query forwarding: adaptors pass forwarding
    queries from a receiver's environment on to their children's receivers ([exec.fwd.env]);
    others stop at the first adaptor. A user query that is not supported raises
    :class:`QueryError` naming the query and the environment.
    """

    forwarding: ClassVar[bool] = False
    __slots__ = ()

    def __call__(self, e: Any, *args: Any) -> Any:
        m = getattr(e, "query", None)
        if m is None:
            raise QueryError(f"{type(e).__name__} is not an environment: it has no query() method")
        return m(self, *args)

    def query(self, q: object, *args: Any) -> Any:
        if q is forwarding_query:
            return type(self).forwarding
        raise QueryError(f"query {self!r} does not answer {q!r}")

    def __repr__(self) -> str:
        return type(self).__name__.removesuffix("_t")


class _ForwardingQuery(Query):
    """``forwarding_query(q)``: ``True`` when ``q`` is a forwarding query ([exec.fwd.env]).

    Adaptors pass forwarding queries of a receiver's environment on to their children's
    receivers (``FWD-ENV``); other queries stop at the first adaptor. The answer is
    ``q.query(forwarding_query)`` when ``q`` answers it (it must be a ``bool``, else
    ``TypeError``), else the class attribute ``forwarding`` of a :class:`Query` subclass, else
    ``False``. ``forwarding_query`` itself is not forwarding.

    Example:

    >>> import structexec as sx
    >>> sx.forwarding_query(sx.get_stop_token)
    True
    """

    forwarding = False

    def __call__(self, q: Any, *args: Any) -> bool:
        """``forwarding_query(q)``: is ``q`` forwarding? ([exec.fwd.env])."""
        fast = getattr(q, "forwarding", None)
        m = getattr(q, "query", None)
        if m is not None:
            try:
                r = m(self)
            except QueryError:
                pass
            else:
                if not isinstance(r, bool):
                    raise TypeError(f"{q!r}.query(forwarding_query) must return a bool, got {r!r}")
                return r
        return bool(fast)


#: ``forwarding_query(q)`` is ``True`` when adaptors forward ``q`` to their children.
forwarding_query = _ForwardingQuery()


def query_or(e: Any, q: Any, default: Any) -> Any:
    """``query-with-default``: ``q(e)`` if ``e`` supports it, else ``default``
    ([exec.snd.expos])."""
    f = getattr(e, "_sx_try", None)
    if f is not None:
        return f(q, default)
    m = getattr(e, "query", None)
    if m is None:
        return default
    try:
        return m(q)
    except QueryError:
        return default


class TryEnv:
    """Base of the library's environments that answer through ``_sx_try`` (private).

    Subclasses implement ``_sx_try(q, default)``, the fast lookup :func:`query_or` uses, and
    inherit ``query(q)`` from it: the answer, or :class:`QueryError` with the message
    ``_unsupported`` (formatted with ``q`` and ``self``) when ``_sx_try`` gives the default.
    Queries with extra arguments are answered as without them.
    """

    __slots__ = ()
    _unsupported: ClassVar[str] = "the environment does not support {q!r}"

    def _sx_try(self, q: Any, default: Any) -> Any:
        return default

    def query(self, q: Any, *args: Any) -> Any:
        r = self._sx_try(q, _MISSING)
        if r is _MISSING:
            raise QueryError(self._unsupported.format(q=q, self=self))
        return r


class _EmptyEnv(TryEnv):
    """``env()``: supports no query."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "env()"


EMPTY_ENV: Any = _EmptyEnv()


class prop(Generic[T]):
    """``prop(q, v)``: an environment answering exactly one query ([exec.prop]).

    ``prop(q, v).query(q)`` returns ``v`` itself; every other query is unsupported. Immutable.
    """

    __slots__ = ("_q", "_v")
    _q: Any
    _v: T

    def __init__(self, query: Any, value: T) -> None:
        object.__setattr__(self, "_q", query)
        object.__setattr__(self, "_v", value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("prop is immutable")

    def query(self, q: Any, *args: Any) -> Any:
        if q is self._q or q == self._q:
            return self._v
        raise QueryError(f"prop({self._q!r}, ...) does not support {q!r}")

    def _sx_try(self, q: Any, default: Any) -> Any:
        if q is self._q or q == self._q:
            return self._v
        return default

    def __repr__(self) -> str:
        return f"prop({self._q!r}, {self._v!r})"


class env:
    """``env(e0, e1, ...)``: the first sub-environment that supports a query answers it.

    [exec.env]. ``env()`` supports nothing. Any object with a ``query``
    method can be a sub-environment. Immutable.
    """

    __slots__ = ("_envs",)
    _envs: tuple[Any, ...]

    def __init__(self, *envs: Any) -> None:
        object.__setattr__(self, "_envs", envs)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("env is immutable")

    def query(self, q: Any, *args: Any) -> Any:
        for e in self._envs:
            m = getattr(e, "query", None)
            if m is None:
                continue
            try:
                return m(q, *args)
            except QueryError:
                continue
        raise QueryError(f"no sub-environment of {self!r} supports {q!r}")

    def _sx_try(self, q: Any, default: Any) -> Any:
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

    def __init__(self, e: Any) -> None:
        self._e = e

    def query(self, q: Any, *args: Any) -> Any:
        if getattr(q, "forwarding", False) is True or forwarding_query(q):
            m = getattr(self._e, "query", None)
            if m is not None:
                return m(q, *args)
        raise QueryError(f"{q!r} is not supported (non-forwarding queries do not cross adaptors)")

    def _sx_try(self, q: Any, default: Any) -> Any:
        if getattr(q, "forwarding", False) is True or forwarding_query(q):
            return query_or(self._e, q, default)
        return default


def fwd_env(e: Any) -> Any:
    """``FWD-ENV(e)``, avoiding a second wrapper around an already forwarding-only env."""
    if type(e) is _FwdEnv or e is EMPTY_ENV:
        return e
    return _FwdEnv(e)


class _JoinEnv:
    """``JOIN-ENV(e1, e2)`` ([exec.snd.expos]): ``e1`` first, then ``e2``."""

    __slots__ = ("_a", "_b")

    def __init__(self, a: Any, b: Any) -> None:
        self._a = a
        self._b = b

    def query(self, q: Any, *args: Any) -> Any:
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

    def _sx_try(self, q: Any, default: Any) -> Any:
        r = query_or(self._a, q, _MISSING)
        if r is not _MISSING:
            return r
        return query_or(self._b, q, default)


def join_env(a: Any, b: Any) -> Any:
    """``JOIN-ENV(a, b)``, skipping empty sides."""
    if a is EMPTY_ENV:
        return b
    if b is EMPTY_ENV:
        return a
    return _JoinEnv(a, b)


def get_env(obj: Any) -> Any:
    """``get_env(o)``: ``o.get_env()`` if defined, else ``env()`` ([exec.get.env]).

    For a sender this is its *attributes*; for a receiver its *environment*.
    """
    m = getattr(obj, "get_env", None)
    if m is None:
        return EMPTY_ENV
    return m()


# --------------------------------------------------------------------------- standard queries


class _ForwardingStdQuery(Query):
    forwarding = True
    __slots__ = ()


class get_stop_token_t(_ForwardingStdQuery):
    """``get_stop_token(env)``: the stop token, or ``never_stop_token()`` when unsupported.

    [exec.get.stop.token]. Forwarding.
    """

    __slots__ = ()

    def __call__(self, e: Any, *args: Any) -> Any:
        r = query_or(e, self, _MISSING)
        if r is _MISSING:
            return never_stop_token()
        return r


class _NoDefaultQuery(_ForwardingStdQuery):
    __slots__ = ()

    def __call__(self, e: Any, *args: Any) -> Any:
        m = getattr(e, "query", None)
        if m is None:
            raise QueryError(f"{type(e).__name__} is not an environment: it has no query() method")
        try:
            return m(self, *args)
        except QueryError:
            raise QueryError(
                f"the environment {e!r} does not provide {self!r}; add it with "
                f"sx.write_env(sender, sx.prop(sx.{self!r}, value))"
            ) from None


class get_scheduler_t(_NoDefaultQuery):
    """``get_scheduler(env)``: the scheduler to start work on; no default.

    [exec.get.scheduler].
    """

    __slots__ = ()


class get_delegation_scheduler_t(_NoDefaultQuery):
    """``get_delegation_scheduler(env)``: the forward-progress delegation scheduler
    ([exec.get.delegation.scheduler])."""

    __slots__ = ()


class get_allocator_t(_NoDefaultQuery):
    """``get_allocator(env)``: the allocator; any object in Python, no default
    ([exec.get.allocator])."""

    __slots__ = ()


class get_domain_t(_NoDefaultQuery):
    """``get_domain(env)``: the domain used to customise algorithms; no default ([exec.get.domain],
    9)."""

    __slots__ = ()


class get_await_completion_adaptor_t(_NoDefaultQuery):
    """``get_await_completion_adaptor(env)``: adaptor applied by ``as_awaitable``
    ([exec.get.await.adapt], [exec.as.awaitable])."""

    __slots__ = ()


class get_completion_scheduler_t(_NoDefaultQuery):
    """``get_completion_scheduler[tag](attrs)``: where completions with ``tag`` happen.

    [exec.get.compl.sched]. Only ``set_value_t``, ``set_error_t`` and
    ``set_stopped_t`` are valid tags; indexing with anything else raises ``TypeError``.
    """

    __slots__ = ("tag",)

    def __init__(self, tag: Any) -> None:
        self.tag = tag

    def __repr__(self) -> str:
        return f"get_completion_scheduler[{self.tag.__name__}]"


class _CompletionSchedulerFactory:
    """``get_completion_scheduler[tag]``: the query for the scheduler a sender completes on
    ([exec.get.compl.sched]).

    ``tag`` is ``sx.set_value_t``, ``sx.set_error_t`` or ``sx.set_stopped_t`` (anything else raises
    ``TypeError``); the result is a forwarding query, the same object for the same tag. Asked of a
    sender's attributes (``get_env(sndr)``), it answers the scheduler on whose agent that
    completion happens, when the sender knows it; ``QueryError`` otherwise.

    Example:

    >>> import structexec as sx
    >>> sch = sx.inline_scheduler()
    >>> sx.get_completion_scheduler[sx.set_value_t](sx.get_env(sx.schedule(sch))) == sch
    True
    """

    __slots__ = ("_cache",)

    def __init__(self) -> None:
        self._cache: dict[Any, get_completion_scheduler_t] = {}

    def __getitem__(self, tag: Any) -> get_completion_scheduler_t:
        q = self._cache.get(tag)
        if q is None:
            if tag not in (set_value_t, set_error_t, set_stopped_t):
                raise TypeError(
                    "get_completion_scheduler[...] takes sx.set_value_t, sx.set_error_t or "
                    f"sx.set_stopped_t, not {tag!r} ([exec.get.compl.sched])"
                )
            q = self._cache[tag] = get_completion_scheduler_t(tag)
        return q

    def __repr__(self) -> str:
        return "get_completion_scheduler"


get_stop_token = get_stop_token_t()
get_scheduler = get_scheduler_t()
get_delegation_scheduler = get_delegation_scheduler_t()
get_allocator = get_allocator_t()
get_domain = get_domain_t()
get_await_completion_adaptor = get_await_completion_adaptor_t()
#: ``get_completion_scheduler[sx.set_value_t]`` etc.
get_completion_scheduler = _CompletionSchedulerFactory()


class forward_progress_guarantee(enum.Enum):
    """The forward-progress guarantee of a scheduler's agents ([exec.get.fwd.progress])."""

    concurrent = "concurrent"
    parallel = "parallel"
    weakly_parallel = "weakly_parallel"


class get_forward_progress_guarantee_t(Query):
    """``get_forward_progress_guarantee(sch)``; default ``weakly_parallel``
    ([exec.get.fwd.progress]).

    Raises ``TypeError`` for an object that is not a scheduler.
    """

    __slots__ = ()

    def __call__(self, sch: Any, *args: Any) -> Any:
        if not callable(getattr(sch, "schedule", None)):
            raise TypeError(
                f"get_forward_progress_guarantee() needs a scheduler, got {type(sch).__name__}"
            )
        return query_or(sch, self, forward_progress_guarantee.weakly_parallel)


get_forward_progress_guarantee = get_forward_progress_guarantee_t()


# --------------------------------------------------------------------------- SCHED-ATTRS / ENV


class _SchedAttrs(TryEnv):
    """``SCHED-ATTRS(sch)`` ([exec.snd.expos]): completion scheduler for value and stopped."""

    __slots__ = ("_sch",)
    _unsupported = "scheduler attributes do not support {q!r}"

    def __init__(self, sch: Any) -> None:
        self._sch = sch

    def _sx_try(self, q: Any, default: Any) -> Any:
        if type(q) is get_completion_scheduler_t:
            return default if q.tag is set_error_t else self._sch
        if q is get_domain:
            return query_or(self._sch, get_domain, default)
        return default


class _SchedEnv(TryEnv):
    """``SCHED-ENV(sch)`` ([exec.snd.expos]): ``get_scheduler`` and ``get_domain``."""

    __slots__ = ("_sch",)
    _unsupported = "scheduler environment does not support {q!r}"

    def __init__(self, sch: Any) -> None:
        self._sch = sch

    def _sx_try(self, q: Any, default: Any) -> Any:
        if q is get_scheduler:
            return self._sch
        if q is get_domain:
            return query_or(self._sch, get_domain, default)
        return default


sched_attrs = _SchedAttrs
sched_env = _SchedEnv
