"""Queries: the ``Query`` base, ``QueryError``, ``query_or`` and the standard queries.

[exec.queries]: [exec.fwd.env] (``forwarding_query``), [exec.get.allocator],
[exec.get.stop.token], [exec.get.domain], [exec.get.scheduler],
[exec.get.delegation.scheduler], [exec.get.fwd.progress], [exec.get.compl.sched],
[exec.get.await.adapt]; [exec.queryable.general] (the senders guide "Environments and queries").

A *query* is a callable object: ``get_scheduler(env)`` is ``env.query(get_scheduler)``. Users
write their own queries as instances of a subclass of :class:`Query`. An environment that does
not support a query raises :class:`QueryError`. The environments themselves (``prop``, ``env``,
``get_env``, ``FWD-ENV``, ...) are in ``_env``.
"""

from __future__ import annotations

import enum
from typing import Any, ClassVar

from ._stop_token import never_stop_token
from ._tags import set_error_t, set_stopped_t, set_value_t

__all__ = [
    "Query",
    "QueryError",
    "forward_progress_guarantee",
    "forwarding_query",
    "get_allocator",
    "get_await_completion_adaptor",
    "get_completion_scheduler",
    "get_delegation_scheduler",
    "get_domain",
    "get_forward_progress_guarantee",
    "get_scheduler",
    "get_stop_token",
]

_MISSING = object()


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

    def __call__(self, e: object, *args: object) -> Any:
        m = getattr(e, "query", None)
        if m is None:
            raise QueryError(f"{type(e).__name__} is not an environment: it has no query() method")
        return m(self, *args)

    def query(self, q: object, *args: object) -> bool:
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

    def __call__(self, q: object, *args: object) -> bool:
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


def query_or(e: object, q: object, default: object) -> Any:
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


# --------------------------------------------------------------------------- standard queries


class _ForwardingStdQuery(Query):
    forwarding = True
    __slots__ = ()


class get_stop_token_t(_ForwardingStdQuery):
    """``get_stop_token(env)``: the stop token, or ``never_stop_token()`` when unsupported.

    [exec.get.stop.token]. Forwarding.
    """

    __slots__ = ()

    def __call__(self, e: object, *args: object) -> Any:
        r = query_or(e, self, _MISSING)
        if r is _MISSING:
            return never_stop_token()
        return r


class _NoDefaultQuery(_ForwardingStdQuery):
    __slots__ = ()

    def __call__(self, e: object, *args: object) -> Any:
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

    def __init__(self, tag: type) -> None:
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
        self._cache: dict[object, get_completion_scheduler_t] = {}

    def __getitem__(self, tag: object) -> get_completion_scheduler_t:
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

    def __call__(self, sch: object, *args: object) -> forward_progress_guarantee:
        if not callable(getattr(sch, "schedule", None)):
            raise TypeError(
                f"get_forward_progress_guarantee() needs a scheduler, got {type(sch).__name__}"
            )
        r: forward_progress_guarantee = query_or(
            sch, self, forward_progress_guarantee.weakly_parallel
        )
        return r


get_forward_progress_guarantee = get_forward_progress_guarantee_t()
