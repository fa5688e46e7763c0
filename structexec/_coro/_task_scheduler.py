"""``task_scheduler``: a type-erased infallible scheduler ([exec.task.scheduler]).

P3552R1 4.5 (it is the default ``scheduler_type`` of ``task``) and P3941R1 (it is infallible,
and so must be the scheduler it wraps).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._algorithms._timed import is_timed_scheduler, now, schedule_after, schedule_at
from .._core._completion_signatures import completion_signatures
from .._core._connect import connect_unchecked as connect
from .._core._env import TryEnv, get_env
from .._core._infallible import check_infallible
from .._core._protocol import Sender
from .._core._queries import QueryError, get_completion_scheduler, get_stop_token, query_or
from .._core._stop_token import is_unstoppable
from .._core._tags import set_error_t, set_stopped_t, set_value_t

if TYPE_CHECKING:
    from .._core._contracts import OpState, Rcvr, Sched

__all__ = ["task_scheduler"]

_VALUE_ONLY = completion_signatures(set_value_t())
_VALUE_STOPPED = completion_signatures(set_value_t(), set_stopped_t())


class _TsAttrs(TryEnv):
    """Attributes of the ts-sender: completions happen on the ``task_scheduler``
    ([exec.task.scheduler])."""

    __slots__ = ("_inner", "_ts")
    _unsupported = "the schedule sender of {self._ts!r} does not support {q!r}"

    def __init__(self, ts: task_scheduler, inner: object) -> None:
        self._ts = ts
        self._inner = inner

    def _sx_try(self, q: object, default: object) -> object:
        if (
            q is get_completion_scheduler[set_value_t]
            or q is get_completion_scheduler[set_stopped_t]
        ):
            return self._ts
        if q is get_completion_scheduler[set_error_t]:
            return default
        return query_or(get_env(self._inner), q, default)


class _TsSender(Sender[None]):
    """``ts-sender``: wraps ``schedule(SCHED(ts))`` and connects straight through
    ([exec.task.scheduler])."""

    __slots__ = ("_inner", "_ts")

    def __init__(self, ts: task_scheduler, inner: object) -> None:
        self._ts = ts
        self._inner = inner

    def connect(self, rcvr: Rcvr) -> OpState:
        # The wrapped sender's operation completes the receiver directly: a ts-sender adds no
        # operation state and no hop ([exec.task.scheduler] "state").
        return connect(self._inner, rcvr)

    def get_env(self) -> _TsAttrs:
        return _TsAttrs(self._ts, self._inner)

    def get_completion_signatures(self, env: object = None) -> completion_signatures:
        # P3941R1: only set_value_t() under an unstoppable token, else also set_stopped_t().
        if env is not None and is_unstoppable(get_stop_token(env)):
            return _VALUE_ONLY
        return _VALUE_STOPPED

    @property
    def data(self) -> task_scheduler:
        return self._ts

    @property
    def children(self) -> tuple[object, ...]:
        return (self._inner,)

    def __repr__(self) -> str:
        return f"schedule({self._ts!r})"


class task_scheduler:
    """``task_scheduler(sch, alloc=None)``: type-erases any infallible scheduler ``sch``.

    [exec.task.scheduler], P3552R1 4.5, P3941R1. It is the default
    ``scheduler_type`` of :func:`task`.

    * ``task_scheduler(ts)`` of a ``task_scheduler`` is a copy that shares the wrapped
      scheduler, never a nested wrapper ([exec.task.scheduler]):
      ``task_scheduler(task_scheduler(s)).wrapped`` is ``s``.
    * ``sch`` must be *infallible* (P3941R1 Mandates, [exec.task.scheduler]): its ``schedule()``
      sender declares exactly ``set_value_t()`` when the environment's stop token is unstoppable. A
      fallible or undeclared scheduler (``parallel_scheduler``) raises ``TypeError``.
    * ``schedule()`` returns a sender that connects straight to ``schedule(sch)`` (no extra
      operation, [exec.task.scheduler]); its attributes name this ``task_scheduler`` as the
      completion scheduler ([exec.task.scheduler]); it declares ``set_value_t()`` and, unless the
      stop token is unstoppable, ``set_stopped_t()`` (P3941R1, 23.8).
    * Equality ([exec.task.scheduler]): ``ts == s`` is
      ``type(ts.wrapped) is type(s) and ts.wrapped == s``; ``ts1 == ts2`` is ``ts1 == ts2.wrapped``.
      ``s == ts`` gives the same answer when the other scheduler's ``__eq__`` returns
      ``NotImplemented`` for types it does not know (Python then asks ``ts``).
      ``hash(ts) == hash(ts.wrapped)``.
    * Queries (``get_forward_progress_guarantee``, ``get_domain``, ...) are forwarded to the
      wrapped scheduler.
    * ``alloc`` is accepted and ignored (: no allocator semantics in Python, [exec.task.scheduler]).
    """

    __slots__ = ("_sch",)
    _sch: Sched

    def __init__(self, sch: Sched, alloc: object = None) -> None:
        if type(sch) is task_scheduler:
            self._sch = sch._sch
            return
        check_infallible(sch, "task_scheduler")
        self._sch = sch

    @property
    def wrapped(self) -> Sched:
        """``SCHED(ts)``: the scheduler this one erases (never a ``task_scheduler``)."""
        return self._sch

    def schedule(self) -> Sender[None]:
        """``schedule(ts)``: a sender completing on the wrapped scheduler
        ([exec.task.scheduler])."""
        return _TsSender(self, self._sch.schedule())

    @property
    def timed(self) -> bool:
        """Whether the wrapped scheduler is timed (the time guide "Timed schedulers"): then
        ``now()``, ``schedule_after()`` and ``schedule_at()`` forward to it, so ``timeout``,
        ``stop_after`` and ``retry`` work inside a task whose scheduler is timed."""
        return is_timed_scheduler(self._sch)

    def now(self) -> float:
        """The wrapped timed scheduler's ``now()``; ``TypeError`` if it is not timed."""
        return now(self._sch)

    def schedule_after(self, seconds: float) -> Sender[None]:
        """A timer of the wrapped timed scheduler whose attributes name this scheduler as the
        completion scheduler, as :meth:`schedule` does; ``TypeError`` if it is not timed."""
        return _TsSender(self, schedule_after(self._sch, seconds))

    def schedule_at(self, deadline: float) -> Sender[None]:
        """As :meth:`schedule_after`, for an absolute ``deadline`` on the wrapped clock."""
        return _TsSender(self, schedule_at(self._sch, deadline))

    def query(self, q: object, *args: object) -> object:
        """Forwarded to the wrapped scheduler."""
        m = getattr(self._sch, "query", None)
        if m is None:
            raise QueryError(f"{self!r} does not support {q!r}")
        return m(q, *args)

    def _sx_try(self, q: object, default: object) -> object:
        return query_or(self._sch, q, default)

    def __eq__(self, other: object) -> bool:
        sch = self._sch
        if type(other) is task_scheduler:
            other = other._sch
        if type(sch) is not type(other):
            return False
        return bool(sch == other)

    def __hash__(self) -> int:
        return hash(self._sch)

    def __repr__(self) -> str:
        return f"task_scheduler({self._sch!r})"
