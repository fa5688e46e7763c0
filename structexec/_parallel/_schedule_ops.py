"""The parallel scheduler's ``schedule()`` operation and its timers ([exec.par.scheduler],
[exec.sysctxrepl.recvproxy]; the time guide "Timed schedulers").

The scheduler (``_parallel_scheduler``) is a thin frontend: its operations are the *receiver
proxies* its backend completes. This module holds what every proxy shares (one completion at
most, the consumer's stop token resolved once and linked when it is not an
``inplace_stop_token``, a backend that raises from ``schedule*`` reported as
``BackendError``), the ``schedule()`` operation and sender, and the timers of
``schedule_after``/``schedule_at``, which are delivered on the backend by a ``schedule()``
operation. The bulk operation, the other proxy, is in ``_parallel_bulk``.
"""

from __future__ import annotations

import enum
import threading
from typing import TYPE_CHECKING, Final

from .._algorithms._timed import TimerAttrs, TimerOp, TimerSender
from .._core._completion_signatures import completion_signatures
from .._core._env import TryEnv, get_env
from .._core._errors import terminate
from .._core._protocol import Sender, completed_twice, twice_started
from .._core._queries import (
    _MISSING,
    get_completion_scheduler,
    get_domain,
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
from ._replacement_api import NO_STORAGE, receiver_proxy

if TYPE_CHECKING:
    from .._core._contracts import Env, Rcvr
    from .._core._stop_token import StopCallback
    from ._parallel_scheduler import parallel_scheduler
    from ._replacement_api import BackendHooks

__all__: list[str] = []


class _Unset(enum.Enum):
    UNSET = 0


#: ``_tok`` of a proxy whose consumer's stop token has not been resolved yet.
_UNSET: Final = _Unset.UNSET
_link_lock = threading.Lock()

_SCHEDULE_SIGS = completion_signatures(set_value_t(), set_error_t(Exception), set_stopped_t())

_VALUE_SCHED = get_completion_scheduler[set_value_t]

# --------------------------------------------------------------------------- proxy helpers


def _resolve_token(op: _ProxyOp) -> inplace_stop_token | None:
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
        tok = op._tok
        if tok is _UNSET:
            src = inplace_stop_source()
            op._link = stop_callback_for(t, src.request_stop)
            tok = op._tok = src.get_token()
    return tok


def _backend_raised(op: _ProxyOp, backend: object, what: str, exc: Exception) -> None:
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

    __slots__ = ("_link", "_rcvr", "_state", "_tok")
    #: 0 not started, 1 started, 2 completed
    _state: int
    #: the consumer's stop token as the backend sees it (``None``: unstoppable), once resolved
    _tok: inplace_stop_token | _Unset | None
    #: the link from another stoppable token type to ``_tok``'s source
    _link: StopCallback | None
    _rcvr: Rcvr

    if TYPE_CHECKING:

        def set_error(self, err: BaseException) -> None: ...

    def _finish(self, what: str) -> None:
        """Enter the completed state (``what`` names the completion for the error)."""
        if self._state == 2:
            raise completed_twice(self, what)
        self._state = 2
        link = self._link
        if link is not None:
            self._link = None
            link.close()

    def try_query(self, *args: object) -> object:
        if len(args) == 1 and args[0] is get_stop_token:  # the common question, fast
            tok = self._tok
            return _resolve_token(self) if tok is _UNSET else tok
        # a base of the operation: the next class in its MRO is a receiver_proxy
        return super().try_query(*args)  # type: ignore[misc]

    def _sx_stop_token(self) -> inplace_stop_token | None:
        tok = self._tok
        if tok is _UNSET:
            return _resolve_token(self)
        return tok

    def _sx_query_env(self, q: object) -> object:
        return query_or(get_env(self._rcvr), q, _MISSING)


class _ScheduleOp(_ProxyOp, receiver_proxy):
    """The operation of ``schedule(sch)``; it is also the proxy the backend completes."""

    __slots__ = ("_backend",)

    def __init__(self, backend: BackendHooks, rcvr: Rcvr) -> None:
        self._backend = backend
        self._rcvr = rcvr
        self._state = 0
        self._tok = _UNSET
        self._link = None

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

    def __repr__(self) -> str:
        return f"<parallel_scheduler schedule operation on {self._backend!r}>"

    def _sx_describe(self) -> Waiting:
        """For ``operation_tree()`` (``_contracts.Describable``)."""
        return _ON_PARALLEL


_ON_PARALLEL = Waiting("on the parallel scheduler", "parallel_scheduler")


def _par_attrs_try(self: _ScheduleAttrs | _ParTimerAttrs, q: object, default: object) -> object:
    """``_sx_try`` of the attributes of the parallel scheduler's senders (``schedule`` and the
    timers): its own completion scheduler and domain ([exec.par.scheduler])."""
    if q is _VALUE_SCHED:
        return self._sch
    if q is get_domain:
        return self._sch._dom
    return default


class _ScheduleAttrs(TryEnv):
    __slots__ = ("_sch",)
    _unsupported = "the parallel scheduler's sender does not support {q!r}"

    def __init__(self, sch: parallel_scheduler) -> None:
        self._sch = sch

    _sx_try = _par_attrs_try


class _ScheduleSender(Sender[None]):
    """``schedule(parallel_scheduler)``: completes on one of the backend's agents
    ([exec.par.scheduler])."""

    __slots__ = ("_sch",)

    def __init__(self, sch: parallel_scheduler) -> None:
        self._sch = sch

    def connect(self, rcvr: Rcvr) -> _ScheduleOp:
        return _ScheduleOp(self._sch._backend, rcvr)

    def get_env(self) -> _ScheduleAttrs:
        return _ScheduleAttrs(self._sch)

    def _sx_late_domain(self) -> object:
        # get-domain-late ([exec.snd.expos]) of this sender is its attributes' get_domain:
        # the parallel scheduler's domain. Answered directly, it saves connect() a walk
        # through the environments.
        return self._sch._dom

    def get_completion_signatures(self, env: object = None) -> completion_signatures:
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

    def get_env(self) -> Env:
        return get_env(self._op._rcvr)


class _ParTimerAttrs(TimerAttrs):
    __slots__ = ()
    _unsupported = "the parallel scheduler's timer sender does not support {q!r}"

    _sx_try = _par_attrs_try


class _ParTimerSender(TimerSender):
    """``schedule_after(parallel_scheduler, s)`` / ``schedule_at(...)`` (the time guide "Timed
    schedulers"): completes on one of the backend's agents once the time has come."""

    __slots__ = ()
    _op_type = _ParTimerOp

    def _owner(self) -> parallel_scheduler:
        sch: parallel_scheduler = self._sch
        return sch

    def get_env(self) -> _ParTimerAttrs:
        return _ParTimerAttrs(self._sch)

    def get_completion_signatures(self, env: object = None) -> completion_signatures:
        return _SCHEDULE_SIGS  # like schedule(): the backend can fail
