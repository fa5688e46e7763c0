"""``parallel_scheduler`` and ``get_parallel_scheduler`` ([exec.par.scheduler]).

[exec.par.scheduler], [exec.bulk], docs/parallel.md; P2079R7 §4.1. The scheduler is a thin
*frontend*: it turns ``schedule()`` operations and ``bulk*`` operations into receiver proxies
and hands them to its *backend* (``system_context_replaceability``, ``_replacement_api.py``). The
bulk algorithms reach the backend through the domain mechanism: the scheduler answers
``get_domain`` with a domain whose ``transform_sender`` replaces ``bulk``, ``bulk_chunked``
and ``bulk_unchunked`` when the parallel scheduler is the predecessor's completion scheduler
or the receiver's scheduler ([exec.snd.expos], [exec.par.scheduler]).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from .._algorithms import _bulk as _bulk_mod
from .._algorithms import _then as _then_mod
from .._algorithms._timed import (
    TimerAttrs,
    TimerOp,
    TimerQueue,
    TimerSender,
    check_deadline,
    check_seconds,
)
from .._core import _domain as _domain_mod
from .._core._adaptor_util import close_op
from .._core._completion_signatures import completion_signatures, get_completion_signatures
from .._core._connect import connect
from .._core._domain import default_domain
from .._core._env import TryEnv, fwd_env, get_env
from .._core._errors import terminate
from .._core._protocol import Algorithm, Sender, completed_twice, twice_started
from .._core._queries import (
    _MISSING,
    QueryError,
    forward_progress_guarantee,
    get_completion_scheduler,
    get_completion_scheduler_t,
    get_domain,
    get_forward_progress_guarantee,
    get_scheduler,
    get_stop_token,
    query_or,
)
from .._core._snapshot import Waiting
from .._core._stop_token import (
    inplace_stop_source,
    inplace_stop_token,
    is_unstoppable,
    stop_callback_for,
)
from .._core._tags import set_error_t, set_stopped_t, set_value_t
from ._backend_error import BackendError
from ._remote_call import RemoteThenSender, is_remote_backend
from ._remote_work import CHUNKED, PER_INDEX, RemoteBulkWork, _copy_back_indices
from ._replacement_api import (
    NO_STORAGE,
    bulk_item_receiver_proxy,
    query_parallel_scheduler_backend,
    receiver_proxy,
)
from ._timer_thread import timer_queue, timer_wake

__all__ = ["get_parallel_scheduler", "parallel_scheduler"]

_UNSET: Any = object()
_link_lock = threading.Lock()

_SCHEDULE_SIGS = completion_signatures(set_value_t(), set_error_t(Exception), set_stopped_t())
_BULK_EXTRA_SIGS = completion_signatures(set_error_t(Exception), set_stopped_t())

_VALUE_SCHED = get_completion_scheduler[set_value_t]


# --------------------------------------------------------------------------- proxy helpers


def _resolve_token(op: Any) -> inplace_stop_token | None:
    """The ``inplace_stop_token`` a backend sees for ``op``'s consumer
    ([exec.sysctxrepl.recvproxy])."""
    try:
        t = get_stop_token(get_env(op._rcvr))
    except Exception:  # a broken environment: treat the consumer as unstoppable
        op._tok = None
        return None
    if type(t) is inplace_stop_token:
        op._tok = t
        return t
    if is_unstoppable(t) or not t.stop_possible():
        op._tok = None
        return None
    # Another stoppable token type: link an inplace_stop_source to it, once.
    with _link_lock:
        if op._tok is _UNSET:
            src = inplace_stop_source()
            op._link = stop_callback_for(t, src.request_stop)
            op._tok = src.get_token()
        tok: inplace_stop_token | None = op._tok
    return tok


def _close_link(op: Any) -> None:
    link = op._link
    if link is not None:
        op._link = None
        link.close()


def _backend_raised(op: Any, backend: Any, what: str, exc: Exception) -> None:
    """A backend raised from ``schedule*``: complete the operation with a ``BackendError``."""
    if op._state == 2:
        terminate(
            f"the parallel scheduler backend {backend!r} completed an operation and then raised "
            f"from {what}() ([exec.sysctxrepl.psb]: schedule*() must not raise; report "
            "failures by completing the receiver proxy with set_error instead)",
            exc,
        )
        return
    err = BackendError(
        f"the parallel scheduler backend {backend!r} raised from {what}(): "
        f"{type(exc).__name__}: {exc}"
    )
    err.__cause__ = exc
    op.set_error(err)


# --------------------------------------------------------------------------- schedule()


class _ProxyOp:
    """What the schedule and the bulk operation share as receiver proxies of the backend
    ([exec.sysctxrepl.recvproxy]): one completion at most, the stop-token link closed on
    completion, and the protected hooks behind ``try_query``."""

    __slots__ = ()  # the subclasses own the slots: _state, _link, _tok, _rcvr

    def _finish(self, what: str) -> None:
        """Enter the completed state (``what`` names the completion for the error)."""
        op: Any = self
        if op._state == 2:
            raise completed_twice(self, what)
        op._state = 2
        if op._link is not None:
            _close_link(self)

    def _sx_stop_token(self) -> inplace_stop_token | None:
        op: Any = self
        tok = op._tok
        if tok is _UNSET:
            return _resolve_token(self)
        r: inplace_stop_token | None = tok
        return r

    def _sx_query_env(self, q: Any) -> Any:
        op: Any = self
        return query_or(get_env(op._rcvr), q, _MISSING)


class _ScheduleOp(_ProxyOp, receiver_proxy):
    """The operation of ``schedule(sch)``; it is also the proxy the backend completes."""

    __slots__ = ("_backend", "_link", "_rcvr", "_state", "_tok")

    def __init__(self, backend: Any, rcvr: Any) -> None:
        self._backend = backend
        self._rcvr = rcvr
        self._state = 0
        self._tok: Any = _UNSET
        self._link: Any = None

    def start(self) -> None:
        if self._state:
            raise twice_started(self)
        self._state = 1
        try:
            self._backend.schedule(self, NO_STORAGE)
        except Exception as e:
            _backend_raised(self, self._backend, "schedule", e)

    def set_value(self) -> None:
        self._finish("set_value")
        self._rcvr.set_value()

    def set_error(self, err: BaseException) -> None:
        self._finish("set_error")
        self._rcvr.set_error(err)

    def set_stopped(self) -> None:
        self._finish("set_stopped")
        self._rcvr.set_stopped()

    def try_query(self, *args: Any) -> Any:
        if len(args) == 1 and args[0] is get_stop_token:  # the common question, fast
            tok = self._tok
            return _resolve_token(self) if tok is _UNSET else tok
        return super().try_query(*args)

    def __repr__(self) -> str:
        return f"<parallel_scheduler schedule operation on {self._backend!r}>"

    def _sx_describe(self) -> Waiting:
        """For ``operation_tree()`` (``_contracts.Describable``)."""
        return _ON_PARALLEL


_ON_PARALLEL = Waiting("on the parallel scheduler", "parallel_scheduler")


class _ScheduleAttrs(TryEnv):
    __slots__ = ("_sch",)
    _unsupported = "the parallel scheduler's sender does not support {q!r}"

    def __init__(self, sch: parallel_scheduler) -> None:
        self._sch = sch

    def _sx_try(self, q: Any, default: Any) -> Any:
        if q is _VALUE_SCHED:
            return self._sch
        if q is get_domain:
            return self._sch._dom
        return default


class _ScheduleSender(Sender[None]):
    """``schedule(parallel_scheduler)``: completes on one of the backend's agents
    ([exec.par.scheduler])."""

    __slots__ = ("_sch",)

    def __init__(self, sch: parallel_scheduler) -> None:
        self._sch = sch

    def connect(self, rcvr: Any) -> _ScheduleOp:
        return _ScheduleOp(self._sch._backend, rcvr)

    def get_env(self) -> _ScheduleAttrs:
        return _ScheduleAttrs(self._sch)

    def _sx_late_domain(self) -> Any:
        # get-domain-late ([exec.snd.expos]) of this sender is its attributes' get_domain:
        # the parallel scheduler's domain. Answered directly, it saves connect() a walk
        # through the environments.
        return self._sch._dom

    def get_completion_signatures(self, env: Any = None) -> completion_signatures:
        return _SCHEDULE_SIGS

    def __repr__(self) -> str:
        return f"schedule({self._sch!r})"


# --------------------------------------------------------------------------- timers


class _ParTimerOp(TimerOp):
    """A timer of a parallel scheduler: pending in the process-wide queue of
    ``_timer_thread``; when due, delivered on the backend by a ``schedule()`` operation whose
    receiver is a :class:`_TimerDelivery`."""

    __slots__ = ()

    def _deliver(self, err: BaseException | None) -> None:
        # On the backend's agent (or the timer thread, if the backend failed): the operation
        # was taken out of the queue (marked done), so a stop request no longer completes it.
        self._key = None
        cb = self._cb
        if cb is not None:
            self._cb = None
            cb.close()
        if err is None:
            self._rcvr.set_stopped()
        else:
            self._rcvr.set_error(err)


class _TimerDelivery:
    """The receiver of the ``schedule()`` operation that completes a due timer on the
    backend: ``set_value`` runs the timer's completion on the backend's agent; an error of the
    backend (it raised, or completed ``set_error``) or its ``set_stopped`` is passed on."""

    __slots__ = ("_op",)

    def __init__(self, op: _ParTimerOp) -> None:
        self._op = op

    def set_value(self) -> None:
        self._op._execute()

    def set_error(self, err: BaseException) -> None:
        self._op._deliver(err)

    def set_stopped(self) -> None:
        self._op._deliver(None)

    def get_env(self) -> Any:
        return get_env(self._op._rcvr)


class _ParTimerAttrs(TimerAttrs):
    __slots__ = ()
    _unsupported = "the parallel scheduler's timer sender does not support {q!r}"

    def _sx_try(self, q: Any, default: Any) -> Any:
        if q is _VALUE_SCHED:
            return self._sch
        if q is get_domain:
            return self._sch._dom
        return default


class _ParTimerSender(TimerSender):
    """``schedule_after(parallel_scheduler, s)`` / ``schedule_at(...)`` (docs/time.md "Timed
    schedulers"): completes on one of the backend's agents once the time has come."""

    __slots__ = ()
    _op_type = _ParTimerOp

    def _owner(self) -> parallel_scheduler:
        sch: parallel_scheduler = self._sch
        return sch

    def get_env(self) -> _ParTimerAttrs:
        return _ParTimerAttrs(self._sch)

    def get_completion_signatures(self, env: Any = None) -> completion_signatures:
        return _SCHEDULE_SIGS  # like schedule(): the backend can fail


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
      the scheduler's domain transforms them ([exec.snd.transform]; docs/parallel.md
      "Running any function remotely"). ``let_value`` functions stay in this process.

    * It is *timed* (docs/time.md "Timed schedulers"), whatever the backend: ``now()`` is
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

    def __init__(self, backend: Any) -> None:
        if not callable(getattr(backend, "schedule", None)):
            raise TypeError(
                "parallel_scheduler(backend) needs a parallel_scheduler_backend (an object with "
                f"schedule(), schedule_bulk_chunked() and schedule_bulk_unchunked()), got "
                f"{type(backend).__name__}; use sx.get_parallel_scheduler() for the default"
            )
        self._backend = backend
        self._dom = _remote_domain() if is_remote_backend(backend) else _ensure_domain()

    @property
    def backend(self) -> Any:
        """The backend this scheduler is bound to (``BACKEND-OF(sch)``)."""
        return self._backend

    def schedule(self) -> Sender[None]:
        """A sender that completes on one of the backend's agents ([exec.par.scheduler])."""
        return _ScheduleSender(self)

    # -- timed scheduler (docs/time.md "Timed schedulers")

    def now(self) -> float:
        """The parallel scheduler's clock: ``time.monotonic()`` (docs/time.md "Timed
        schedulers")."""
        return time.monotonic()

    def schedule_after(self, seconds: float) -> Sender[None]:
        """Completes on one of the backend's agents ``seconds`` after its start
        (docs/time.md "Timed schedulers")."""
        return _ParTimerSender(self, True, check_seconds(seconds))

    def schedule_at(self, deadline: float) -> Sender[None]:
        """Completes on one of the backend's agents once ``now() >= deadline``
        (docs/time.md "Timed schedulers")."""
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

    def _sx_try(self, q: Any, default: Any) -> Any:
        if q is get_forward_progress_guarantee:
            return forward_progress_guarantee.parallel
        if q is get_domain:
            return self._dom
        return default

    def query(self, q: Any, *args: Any) -> Any:
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
    called (C++ ``terminate``, docs/senders.md "What happens when things fail"); if the handler
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


# --------------------------------------------------------------------------- bulk


class _BulkOp(_ProxyOp, bulk_item_receiver_proxy):
    """The operation of a bulk sender on a parallel scheduler; also the backend's proxy."""

    __slots__ = (
        "_backend",
        "_child",
        "_copy_back",
        "_f",
        "_link",
        "_mode",
        "_parallel",
        "_partial",
        "_rcvr",
        "_shape",
        "_state",
        "_tok",
        "_unchunked",
        "_vals",
    )
    #: ``execute(b, e)`` of an unchunked proxy is the calls ``execute(i, i + 1)`` for ``i`` in
    #: ``[b, e)`` (a fast path the thread pool uses; [exec.sysctxrepl.psb] still holds).
    _sx_range_ok = True

    def __init__(
        self,
        backend: Any,
        rcvr: Any,
        mode: int,
        unchunked: bool,
        parallel: bool,
        shape: int,
        f: Callable[..., Any],
    ) -> None:
        self._backend = backend
        self._rcvr = rcvr
        self._mode = mode
        self._unchunked = unchunked
        self._parallel = parallel
        self._shape = shape
        self._f = f
        self._vals: tuple[Any, ...] = ()
        self._state = 0
        self._tok: Any = _UNSET
        self._link: Any = None
        self._child: Any = None
        self._copy_back: tuple[int, ...] | None = None
        self._partial = False  # a chunk skipped indices because stop was requested

    def start(self) -> None:
        if self._state:
            raise twice_started(self)
        self._state = 1
        child = self._child
        if type(child) is _Fused:
            if self._backend._sx_submit_anywhere:
                # schedule(sch) | bulk on a backend that only submits the work elsewhere:
                # hand it the work now instead of hopping to one of its agents first
                # (nothing runs in between; the backend checks the stop token itself).
                self._child = None
                self._launch(())
                return
            child = self._child = connect(child.sndr, _BulkChildReceiver(self))
        child.start()

    def close(self) -> None:
        """Never started: close the predecessor's operation
        (docs/senders.md "Writing your own sender")."""
        if not self._state:
            self._state = 1
            child, self._child = self._child, None
            if type(child) is not _Fused:
                close_op(child)

    # -- the child's completions (through _BulkChildReceiver)

    def _launch(self, vals: tuple[Any, ...]) -> None:
        self._vals = vals
        shape = self._shape
        n = shape if self._parallel else (1 if shape else 0)
        backend = self._backend
        if self._unchunked:
            what = "schedule_bulk_unchunked"
            try:
                backend.schedule_bulk_unchunked(n, self, NO_STORAGE)
            except Exception as e:
                _backend_raised(self, backend, what, e)
        else:
            what = "schedule_bulk_chunked"
            try:
                backend.schedule_bulk_chunked(n, self, NO_STORAGE)
            except Exception as e:
                _backend_raised(self, backend, what, e)

    # -- the proxy

    def execute(self, b: int, e: int) -> None:
        """``f(b, e, *vals)`` (chunked) or ``f(i, *vals)`` for ``i`` in ``[b, e)``.

        A per-index chunk checks the consumer's stop token before each index and skips the
        rest of the chunk once stop is requested; the operation then completes
        ``set_stopped()`` whatever the backend reports ([exec.bulk]).
        """
        f = self._f
        vals = self._vals
        if not self._parallel:
            b, e = 0, self._shape
        if self._mode == CHUNKED:
            f(b, e, *vals)
            return
        tok = self._tok
        if tok is _UNSET:
            tok = _resolve_token(self)
        src = tok._source if tok is not None else None
        if src is None:
            if not vals:
                for i in range(b, e):
                    f(i)
            elif len(vals) == 1:
                v = vals[0]
                for i in range(b, e):
                    f(i, v)
            else:
                for i in range(b, e):
                    f(i, *vals)
            return
        for i in range(b, e):
            if src._requested:
                self._partial = True
                return
            f(i, *vals)

    def try_query(self, *args: Any) -> Any:
        if len(args) == 1 and args[0] is get_stop_token:  # the common question, fast
            tok = self._tok
            return _resolve_token(self) if tok is _UNSET else tok
        return super().try_query(*args)

    def remote_work(self) -> RemoteBulkWork:
        cb = self._copy_back
        if cb is None:
            cb = self._copy_back = _copy_back_indices(self._vals, self._shape)
        return RemoteBulkWork(self._mode, self._f, self._vals, self._shape, self._parallel, cb)

    def merge(self, b: int, e: int, parts: tuple[Any, ...]) -> None:
        cb = self._copy_back
        if cb is None:
            raise RuntimeError("merge() called before remote_work()")
        if not self._parallel:
            b = 0
        vals = self._vals
        for k, part in zip(cb, parts):
            if len(part):
                vals[k][b : b + len(part)] = part

    @property
    def _sx_handoff(self) -> bool:
        """Completing this proxy is a hand-off when completing its receiver is
        (contracts.HandOff): the proxy itself only checks and forwards."""
        return getattr(self._rcvr, "_sx_handoff", False) is True

    def set_value(self) -> None:
        self._finish("set_value")
        vals = self._vals
        self._vals = ()
        if self._partial:
            self._rcvr.set_stopped()
        else:
            self._rcvr.set_value(*vals)

    def set_error(self, err: BaseException) -> None:
        self._finish("set_error")
        self._vals = ()
        self._rcvr.set_error(err)

    def set_stopped(self) -> None:
        self._finish("set_stopped")
        self._vals = ()
        self._rcvr.set_stopped()

    def __repr__(self) -> str:
        return f"<parallel_scheduler bulk operation on {self._backend!r}>"


class _Fused:
    """``_BulkOp._child`` for ``schedule(sch) | bulk(...)`` on a backend with
    ``_sx_submit_anywhere``: the schedule sender, connected only if the backend says no at
    ``start``."""

    __slots__ = ("sndr",)

    def __init__(self, sndr: Any) -> None:
        self.sndr = sndr


class _BulkChildReceiver:
    """Receives the predecessor's completion and launches the bulk work ([exec.par.scheduler])."""

    __slots__ = ("_op",)

    def __init__(self, op: _BulkOp) -> None:
        self._op = op

    def set_value(self, *vals: Any) -> None:
        self._op._launch(vals)

    def set_error(self, err: Any) -> None:
        op = self._op
        op._state = 2
        op._rcvr.set_error(err)

    def set_stopped(self) -> None:
        op = self._op
        op._state = 2
        op._rcvr.set_stopped()

    def get_env(self) -> Any:
        return fwd_env(get_env(self._op._rcvr))


class _ParBulkAttrs(TryEnv):
    __slots__ = ("_child", "_sch")
    _unsupported = "the parallel bulk sender does not support {q!r}"

    def __init__(self, sch: parallel_scheduler, child: Any) -> None:
        self._sch = sch
        self._child = child

    def _sx_try(self, q: Any, default: Any) -> Any:
        if q is _VALUE_SCHED:
            return self._sch
        if type(q) is get_completion_scheduler_t:
            return default
        return query_or(fwd_env(get_env(self._child)), q, default)


class parallel_bulk_t(Algorithm):
    """Tag of the senders that run ``bulk*`` on a parallel scheduler's backend (private)."""

    __slots__ = ()


_parallel_bulk = parallel_bulk_t()


class _ParBulkSender(Sender[Any]):
    """What ``bulk*`` becomes on a parallel scheduler ([exec.par.scheduler])."""

    __slots__ = ("_algo", "_child", "_f", "_policy", "_sch", "_shape")
    tag = _parallel_bulk

    def __init__(
        self, sch: parallel_scheduler, algo: Any, child: Any, policy: Any, shape: int, f: Any
    ) -> None:
        self._sch = sch
        self._algo = algo
        self._child = child
        self._policy = policy
        self._shape = shape
        self._f = f

    def connect(self, rcvr: Any) -> _BulkOp:
        algo = self._algo
        unchunked = algo is _bulk_mod.bulk_unchunked
        mode = CHUNKED if algo is _bulk_mod.bulk_chunked else PER_INDEX
        parallel = _is_parallel_policy(self._policy)
        backend = self._sch._backend
        op = _BulkOp(backend, rcvr, mode, unchunked, parallel, self._shape, self._f)
        child = self._child
        if (
            type(child) is _ScheduleSender
            and child._sch._backend is backend
            and hasattr(type(backend), "_sx_submit_anywhere")
        ):
            # (connect would not transform the schedule sender: its late domain is always
            # the parallel domain, whose transform of schedule is the identity.)
            op._child = _Fused(child)
        else:
            op._child = connect(child, _BulkChildReceiver(op))
        return op

    def get_env(self) -> _ParBulkAttrs:
        return _ParBulkAttrs(self._sch, self._child)

    def get_completion_signatures(self, env: Any = None) -> completion_signatures | None:
        cs = get_completion_signatures(self._child, env)
        if cs is None:
            return None
        return cs | _BULK_EXTRA_SIGS

    @property
    def data(self) -> Any:
        return (self._algo, self._policy, self._shape, self._f)

    @property
    def children(self) -> tuple[Any, ...]:
        return (self._child,)

    def __repr__(self) -> str:
        return (
            f"{self._algo!r}({self._child!r}, {self._policy!r}, {self._shape!r}) on {self._sch!r}"
        )


def _is_parallel_policy(policy: Any) -> bool:
    return getattr(policy, "parallel", False) is True


def _bulk_parts(sndr: Any) -> tuple[Any, Any, int, Any] | None:
    """``(child, policy, shape, f)`` of a bulk sender, or ``None``."""
    try:
        return sndr.child, sndr.policy, sndr.shape, sndr.f
    except AttributeError:
        return None


def _scheduler_for(sndr: Any, child: Any, env: Any) -> parallel_scheduler | None:
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

    def transform_sender(self, sndr: Any, env: Any = None) -> Any:
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


_DOMAIN: Any = None


def _ensure_domain() -> Any:
    """Create the parallel scheduler's domain (which switches the domain machinery on)."""
    global _DOMAIN
    if _DOMAIN is None:
        _DOMAIN = _ParallelDomain()
    return _DOMAIN


class _RemoteParallelDomain(_ParallelDomain):
    """The domain of a ``parallel_scheduler`` whose backend runs work in other processes
    (docs/parallel.md "Running any function remotely").

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

    def transform_sender(self, sndr: Any, env: Any = None) -> Any:
        if env is not None and isinstance(sndr, _then_mod._ThenBase):
            r = _remote_then_for(sndr, env)
            if r is not None:
                return r
        return super().transform_sender(sndr, env)


_REMOTE_DOMAIN: Any = None


def _remote_domain() -> Any:
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
    base = sndr._flatten()[0]
    sch = query_or(get_env(base), _VALUE_SCHED, None)
    env = get_env(rcvr)
    if sch is None:
        if (
            type(rcvr) in _domain_mod.NO_DOMAIN_ENV
            or query_or(env, get_domain, None) is not _REMOTE_DOMAIN
        ):
            return None
    elif type(sch) is not parallel_scheduler or not is_remote_backend(sch._backend):
        return None
    return _remote_then_for(sndr, env)


def _remote_then_for(sndr: Any, env: Any) -> RemoteThenSender | None:
    """The remote form of the ``then`` chain ``sndr``, if it runs on a remote scheduler."""
    base, stages, _ = sndr._flatten()
    sch = query_or(get_env(base), _VALUE_SCHED, None)
    if sch is None:
        sch = query_or(env, get_scheduler, None)
    if type(sch) is not parallel_scheduler or not is_remote_backend(sch._backend):
        return None
    fused = (
        type(base) is _ScheduleSender
        and base._sch._backend is sch._backend
        and hasattr(type(sch._backend), "_sx_submit_anywhere")
    )
    return RemoteThenSender(sch, base, stages, fused, sndr)
