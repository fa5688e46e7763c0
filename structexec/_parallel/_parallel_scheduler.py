"""``parallel_scheduler`` and ``get_parallel_scheduler`` ([exec.par.scheduler]).

[exec.par.scheduler], [exec.bulk], the parallel guide; P2079R7 §4.1. The scheduler is a thin
*frontend*: it turns ``schedule()`` operations and ``bulk*`` operations into receiver proxies
and hands them to its *backend* (``system_context_replaceability``, ``_replacement_api.py``). The
bulk algorithms reach the backend through the domain mechanism: the scheduler answers
``get_domain`` with a domain whose ``transform_sender`` replaces ``bulk``, ``bulk_chunked``
and ``bulk_unchunked`` when the parallel scheduler is the predecessor's completion scheduler
or the receiver's scheduler ([exec.snd.expos], [exec.par.scheduler]).

Its operations are in ``_schedule_ops`` (``schedule()`` and the timers) and
``_parallel_bulk`` (the bulk operation); this module holds the scheduler and its domains.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from .._algorithms import _bulk as _bulk_mod
from .._algorithms import _then as _then_mod
from .._algorithms._timed import TimerOp, TimerQueue, check_deadline, check_seconds
from .._core import _domain as _domain_mod
from .._core._domain import default_domain
from .._core._env import get_env
from .._core._errors import terminate
from .._core._protocol import Sender
from .._core._queries import (
    _MISSING,
    QueryError,
    forward_progress_guarantee,
    get_domain,
    get_forward_progress_guarantee,
    get_scheduler,
    query_or,
)
from ._parallel_bulk import _bulk_parts, _ParBulkSender
from ._parallel_bulk import _BulkOp as _BulkOp  # the scheduler's operations, reached here
from ._remote_call import RemoteThenSender, is_remote_backend
from ._replacement_api import query_parallel_scheduler_backend
from ._schedule_ops import _VALUE_SCHED, _ParTimerSender, _ScheduleSender, _TimerDelivery
from ._schedule_ops import _ScheduleOp as _ScheduleOp  # the scheduler's operations, reached here
from ._timer_thread import timer_queue, timer_wake

if TYPE_CHECKING:
    from ._replacement_api import BackendHooks

__all__ = ["get_parallel_scheduler", "parallel_scheduler"]

# --------------------------------------------------------------------------- the scheduler


class parallel_scheduler:
    """A scheduler that runs work on the process-wide parallel backend ([exec.par.scheduler]).

    Get one with :func:`get_parallel_scheduler` ([exec.par.scheduler]). As an extension,
    ``parallel_scheduler(backend)`` makes one bound to a given backend without replacing the
    process-wide one (C++ has no public constructor).

    * Two parallel schedulers compare equal iff they share the same backend object
      ([exec.par.scheduler]).
    * ``get_forward_progress_guarantee(sch)`` is ``forward_progress_guarantee.parallel``
      ([exec.par.scheduler]).
    * ``schedule()`` returns a sender whose operation calls ``backend.schedule(r, s)`` when
      started and completes through the proxy ``r`` ([exec.par.scheduler]): ``set_value()`` on one
      of the backend's agents (threads), ``set_stopped()`` when the consumer's stop token was
      stopped before the work ran ([exec.par.scheduler]), or ``set_error(exc)``; it is therefore
      *fallible* (P3941R1 §3.2). Its ``get_completion_scheduler[set_value_t]`` is this scheduler
      ([exec.par.scheduler]).
    * ``bulk``, ``bulk_chunked`` and ``bulk_unchunked`` whose predecessor completes on this
      scheduler (or that run under ``on``/``starts_on`` with it) call the backend's
      ``schedule_bulk_chunked``/``schedule_bulk_unchunked`` ([exec.par.scheduler]). With the
      ``par``/``par_unseq`` policies the backend spreads the iterations over its agents;
      with ``seq``/``unseq`` it gets a shape of 1 and the one call runs every iteration in
      order (the policy permits no parallelism, [exec.bulk]). The values the
      predecessor sent are sent on after the iterations ([exec.bulk], [exec.par.scheduler]).
    * On a backend that runs work in other processes (``ProcessPoolBackend``,
      ``DaskBackend``), ``then``/``upon_error``/``upon_stopped`` functions that run on the
      scheduler (after ``schedule``, ``continues_on`` or a ``bulk`` on it, or inside
      ``starts_on(sch, ...)``) run on the backend's workers, consecutive stages in one call:
      the scheduler's domain transforms them ([exec.snd.transform]; the parallel guide
      "Running any function remotely"). ``let_value`` functions stay in this process.

    * It is *timed* (the time guide "Timed schedulers"), whatever the backend: ``now()`` is
      ``time.monotonic()``; ``schedule_after(seconds)``/``schedule_at(deadline)`` give senders
      whose pending timers wait in one process-wide queue served by one daemon thread; when
      a timer is due, the thread hands its completion to the backend as a ``schedule()``
      does, so ``set_value()`` runs on one of the backend's agents. A stop request on a
      pending timer completes it ``set_stopped()`` at once; a backend failure completes it
      with that error.

    Errors of the backend itself (it raised, lost a worker process, lost its cluster)
    complete the operation with :class:`structexec.backends.BackendError`; the scheduler
    stays usable.
    """

    __slots__ = ("_backend", "_dom")

    def __init__(self, backend: Any) -> None:  # any object with the backend's methods
        if not callable(getattr(backend, "schedule", None)):
            raise TypeError(
                "parallel_scheduler(backend) needs a parallel_scheduler_backend (an object with "
                f"schedule(), schedule_bulk_chunked() and schedule_bulk_unchunked()), got "
                f"{type(backend).__name__}; use sx.get_parallel_scheduler() for the default"
            )
        self._backend: BackendHooks = backend
        self._dom: _ParallelDomain = (
            _remote_domain() if is_remote_backend(backend) else _ensure_domain()
        )

    @property
    def backend(self) -> Any:
        """The backend this scheduler is bound to (``BACKEND-OF(sch)``)."""
        return self._backend

    def schedule(self) -> Sender[None]:
        """A sender that completes on one of the backend's agents ([exec.par.scheduler])."""
        return _ScheduleSender(self)

    # -- timed scheduler (docs/time.md "Timed schedulers")

    def now(self) -> float:
        """The parallel scheduler's clock: ``time.monotonic()`` (the time guide "Timed
        schedulers")."""
        return time.monotonic()

    def schedule_after(self, seconds: float) -> Sender[None]:
        """Completes on one of the backend's agents ``seconds`` after its start
        (the time guide "Timed schedulers")."""
        return _ParTimerSender(self, True, check_seconds(seconds))

    def schedule_at(self, deadline: float) -> Sender[None]:
        """Completes on one of the backend's agents once ``now() >= deadline``
        (the time guide "Timed schedulers")."""
        return _ParTimerSender(self, False, check_deadline(deadline))

    # -- the TimerOwner protocol of _algorithms._timed: one queue and thread for the process

    @property
    def _timer_queue(self) -> TimerQueue:
        return timer_queue

    def _timer_now(self) -> float:
        return time.monotonic()

    def _timer_ready(self, op: TimerOp) -> None:
        # The deadline has passed: complete on the backend, as schedule() does.
        _ScheduleOp(self._backend, _TimerDelivery(op)).start()  # type: ignore[arg-type]

    def _timer_wake(self, empty: bool) -> None:
        timer_wake(empty)

    def _sx_try(self, q: object, default: object) -> object:
        if q is get_forward_progress_guarantee:
            return forward_progress_guarantee.parallel
        if q is get_domain:
            return self._dom
        return default

    def query(self, q: object, *args: object) -> Any:
        """Answers ``get_forward_progress_guarantee`` (``parallel``) and ``get_domain``."""
        r = self._sx_try(q, _MISSING)
        if r is _MISSING:
            raise QueryError(f"parallel_scheduler does not support {q!r}")
        return r

    def __eq__(self, other: object) -> bool:
        return type(other) is parallel_scheduler and other._backend is self._backend

    def __hash__(self) -> int:
        return hash((parallel_scheduler, id(self._backend)))

    def __repr__(self) -> str:
        return f"<parallel_scheduler on {self._backend!r}>"


def get_parallel_scheduler() -> parallel_scheduler:
    """The parallel scheduler of the current backend ([exec.par.scheduler]).

    Calls :func:`query_parallel_scheduler_backend` and returns a scheduler bound to the
    result. Schedulers from successive calls compare equal while the backend is unchanged
    ([exec.par.scheduler]). If the backend factory produced ``None``, the terminate handler is
    called (C++ ``terminate``, the senders guide "What happens when things fail"); if the handler
    returns, ``RuntimeError`` is raised.
    """
    b = query_parallel_scheduler_backend()
    if b is None:
        msg = (
            "query_parallel_scheduler_backend() returned None: the factory installed with "
            "set_parallel_scheduler_backend() produced no backend ([exec.par.scheduler]): "
            "make the factory return a backend, or pass None to restore the default"
        )
        terminate(msg)
        raise RuntimeError(msg)
    return parallel_scheduler(b)


def _scheduler_for(sndr: object, child: object, env: object) -> parallel_scheduler | None:
    sch = query_or(get_env(child), _VALUE_SCHED, None)
    if type(sch) is parallel_scheduler:
        return sch
    sch = query_or(get_env(sndr), _VALUE_SCHED, None)
    if type(sch) is parallel_scheduler:
        return sch
    sch = query_or(env, get_scheduler, None)
    if type(sch) is parallel_scheduler:
        return sch
    return None


class _ParallelDomain(default_domain):
    """The domain of every ``parallel_scheduler`` ([exec.par.scheduler]).

    ``transform_sender(sndr, env)`` replaces ``bulk``, ``bulk_chunked`` and
    ``bulk_unchunked`` senders that run on a parallel scheduler (the predecessor's value
    completion scheduler, or else the receiver's ``get_scheduler``) with a sender whose
    operation calls the backend; everything else gets the default transform. Without an
    environment (the construction-time transform) it changes nothing.
    """

    # Only bulk senders are customised: connecting anything else skips this domain.
    customized_tags = frozenset((_bulk_mod.bulk, _bulk_mod.bulk_chunked, _bulk_mod.bulk_unchunked))

    def transform_sender(self, sndr: object, env: object = None) -> object:
        if env is None or type(sndr) is _ParBulkSender or type(sndr) is _ScheduleSender:
            return sndr
        algo = getattr(sndr, "tag", None)
        if algo is not None and (
            algo is getattr(_bulk_mod, "bulk", _MISSING)
            or algo is getattr(_bulk_mod, "bulk_chunked", _MISSING)
            or algo is getattr(_bulk_mod, "bulk_unchunked", _MISSING)
        ):
            parts = _bulk_parts(sndr)
            if parts is not None:
                child, policy, shape, f = parts
                sch = _scheduler_for(sndr, child, env)
                if sch is not None:
                    return _ParBulkSender(sch, algo, child, policy, max(0, int(shape)), f)
        return super().transform_sender(sndr, env)


_DOMAIN: _ParallelDomain | None = None


def _ensure_domain() -> _ParallelDomain:
    """Create the parallel scheduler's domain (which switches the domain machinery on)."""
    global _DOMAIN
    if _DOMAIN is None:
        _DOMAIN = _ParallelDomain()
    return _DOMAIN


class _RemoteParallelDomain(_ParallelDomain):
    """The domain of a ``parallel_scheduler`` whose backend runs work in other processes
    (the parallel guide "Running any function remotely").

    Besides the bulk algorithms, ``transform_sender(sndr, env)`` replaces a chain of
    ``then``/``upon_error``/``upon_stopped`` stages that runs on such a scheduler (its
    predecessor's value completion scheduler is the scheduler; or the predecessor has none
    and the receiver's ``get_scheduler`` is the scheduler, as inside
    ``starts_on(sch, ...)``) with a sender that ships the stages' functions to the backend's
    workers in one call ([exec.snd.transform], [exec.then]). It exists only once a scheduler
    on such a backend has been made, so programs without one never pay for it.
    """

    # The then-chains reach it through ``_domain.DISPATCH.then_hook`` (cheaper for every other then
    # of the program than declaring the then tags here); ``transform_sender`` answers
    # about them all the same.
    customized_tags = _ParallelDomain.customized_tags

    def transform_sender(self, sndr: object, env: object = None) -> object:
        if env is not None and isinstance(sndr, _then_mod._ThenBase):
            r = _remote_then_for(sndr, env)
            if r is not None:
                return r
        return super().transform_sender(sndr, env)


_REMOTE_DOMAIN: _RemoteParallelDomain | None = None


def _remote_domain() -> _RemoteParallelDomain:
    global _REMOTE_DOMAIN
    _ensure_domain()
    if _REMOTE_DOMAIN is None:
        _REMOTE_DOMAIN = _RemoteParallelDomain()
        _domain_mod.DISPATCH.then_hook = _then_hook
    return _REMOTE_DOMAIN


def _then_hook(sndr: Any, rcvr: Any) -> RemoteThenSender | None:
    """``_domain.DISPATCH.then_hook``: the remote form of a then-chain being connected to ``rcvr``,
    or ``None`` (see :class:`_RemoteParallelDomain`).

    The same rule as its ``transform_sender``, with cheap questions first: a chain whose
    predecessor completes on another scheduler, or has none and runs where the receiver's
    domain is not a remote parallel scheduler's, is left alone without asking the receiver
    for its scheduler (which can cost: ``sync_wait`` would make its ``run_loop``)."""
    flat = sndr._flatten()
    base = flat[0]
    if type(base) is _ScheduleSender:  # schedule(sch) | then(...): sch completes it
        sch = base._sch
        cls = type(sch._backend)
        if type(sch) is parallel_scheduler and getattr(cls, "_sx_submit_call", None) is not None:
            # (is_remote_backend; fused as _remote_then decides it for this base)
            fused = hasattr(cls, "_sx_submit_anywhere")
            return RemoteThenSender(sch, base, flat[1], fused, sndr)
        return None
    sch = query_or(get_env(base), _VALUE_SCHED, None)
    if sch is None:
        if type(rcvr) in _domain_mod.NO_DOMAIN_ENV:
            return None
        env = get_env(rcvr)
        if query_or(env, get_domain, None) is not _REMOTE_DOMAIN:
            return None
        sch = query_or(env, get_scheduler, None)
    if type(sch) is not parallel_scheduler or not is_remote_backend(sch._backend):
        return None
    return _remote_then(sndr, flat, sch)


def _remote_then_for(sndr: _then_mod._ThenBase, env: object) -> RemoteThenSender | None:
    """The remote form of the ``then`` chain ``sndr``, if it runs on a remote scheduler."""
    flat = sndr._flatten()
    sch = query_or(get_env(flat[0]), _VALUE_SCHED, None)
    if sch is None:
        sch = query_or(env, get_scheduler, None)
    if type(sch) is not parallel_scheduler or not is_remote_backend(sch._backend):
        return None
    return _remote_then(sndr, flat, sch)


def _remote_then(
    sndr: _then_mod._ThenBase, flat: _then_mod._Flat, sch: parallel_scheduler
) -> RemoteThenSender:
    base = flat[0]
    fused = (
        type(base) is _ScheduleSender
        and base._sch._backend is sch._backend
        and hasattr(type(sch._backend), "_sx_submit_anywhere")
    )
    return RemoteThenSender(sch, base, flat[1], fused, sndr)
