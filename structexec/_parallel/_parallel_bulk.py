"""The bulk operation of a parallel scheduler ([exec.par.scheduler], [exec.bulk],
[exec.sysctxrepl.psb]).

``bulk``, ``bulk_chunked`` and ``bulk_unchunked`` senders that run on a parallel scheduler
become a :class:`_ParBulkSender` (the scheduler's domain transforms them, in
``_parallel_scheduler``). Its operation, :class:`_BulkOp`, is the *bulk item receiver proxy*
the backend drives: it starts the predecessor, then calls ``schedule_bulk_chunked`` or
``schedule_bulk_unchunked`` with the shape (1 when the policy permits no parallelism), runs
``execute(b, e)`` for the backend on its agents (or hands a remote backend the picklable
``remote_work()`` and merges the chunks' results back), and sends the predecessor's values
on once the backend completes it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._algorithms import _bulk as _bulk_mod
from .._core._adaptor_util import close_op
from .._core._completion_signatures import completion_signatures, get_completion_signatures
from .._core._connect import connect
from .._core._env import TryEnv, fwd_env, get_env
from .._core._protocol import Algorithm, Sender, twice_started
from .._core._queries import get_completion_scheduler_t, query_or
from .._core._tags import set_error_t, set_stopped_t
from ._remote_work import CHUNKED, PER_INDEX, RemoteBulkWork, _copy_back_indices
from ._replacement_api import NO_STORAGE, bulk_item_receiver_proxy
from ._schedule_ops import (
    _UNSET,
    _VALUE_SCHED,
    _backend_raised,
    _ProxyOp,
    _resolve_token,
    _ScheduleSender,
)

if TYPE_CHECKING:
    from .._core._contracts import Env, OpState, Rcvr
    from ._parallel_scheduler import parallel_scheduler
    from ._replacement_api import BackendHooks

__all__: list[str] = []

_BULK_EXTRA_SIGS = completion_signatures(set_error_t(Exception), set_stopped_t())

class _BulkOp(_ProxyOp, bulk_item_receiver_proxy):
    """The operation of a bulk sender on a parallel scheduler; also the backend's proxy."""

    __slots__ = (
        "_backend",
        "_child",
        "_copy_back",
        "_f",
        "_mode",
        "_parallel",
        "_partial",
        "_shape",
        "_unchunked",
        "_vals",
    )
    #: ``execute(b, e)`` of an unchunked proxy is the calls ``execute(i, i + 1)`` for ``i`` in
    #: ``[b, e)`` (a fast path the thread pool uses; [exec.sysctxrepl.psb] still holds).
    _sx_range_ok = True

    def __init__(
        self,
        backend: BackendHooks,
        rcvr: Rcvr,
        mode: int,
        unchunked: bool,
        parallel: bool,
        shape: int,
        f: Callable[..., object],
    ) -> None:
        self._backend = backend
        self._rcvr = rcvr
        self._mode = mode
        self._unchunked = unchunked
        self._parallel = parallel
        self._shape = shape
        self._f = f
        #: the predecessor's values: passed to ``f``, and the sequences a remote chunk
        #: writes into are sliced (``merge``), so they are used as what they are
        self._vals: tuple[Any, ...] = ()
        self._state = 0
        self._tok = _UNSET
        self._link = None
        self._child: OpState | _Fused | None = None
        self._copy_back: tuple[int, ...] | None = None
        self._partial = False  # a chunk skipped indices because stop was requested

    def start(self) -> None:
        if self._state:
            raise twice_started(self)
        self._state = 1
        child = self._child
        if isinstance(child, _Fused):
            if self._backend._sx_submit_anywhere:
                # schedule(sch) | bulk on a backend that only submits the work elsewhere:
                # hand it the work now instead of hopping to one of its agents first
                # (nothing runs in between; the backend checks the stop token itself).
                self._child = None
                self._launch(())
                return
            child = self._child = connect(child.sndr, _BulkChildReceiver(self))
        if child is not None:  # (None only once closed, and start() raised above)
            child.start()

    def close(self) -> None:
        """Never started: close the predecessor's operation
        (the senders guide "Writing your own sender")."""
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

    def __init__(self, sndr: _ScheduleSender) -> None:
        self.sndr = sndr


class _BulkChildReceiver:
    """Receives the predecessor's completion and launches the bulk work ([exec.par.scheduler])."""

    __slots__ = ("_op",)

    def __init__(self, op: _BulkOp) -> None:
        self._op = op

    def set_value(self, *vals: object) -> None:
        self._op._launch(vals)

    def set_error(self, err: object) -> None:
        op = self._op
        op._state = 2
        op._rcvr.set_error(err)

    def set_stopped(self) -> None:
        op = self._op
        op._state = 2
        op._rcvr.set_stopped()

    def get_env(self) -> Env:
        return fwd_env(get_env(self._op._rcvr))


class _ParBulkAttrs(TryEnv):
    __slots__ = ("_child", "_sch")
    _unsupported = "the parallel bulk sender does not support {q!r}"

    def __init__(self, sch: parallel_scheduler, child: object) -> None:
        self._sch = sch
        self._child = child

    def _sx_try(self, q: object, default: object) -> object:
        if q is _VALUE_SCHED:
            return self._sch
        if type(q) is get_completion_scheduler_t:
            return default
        return query_or(fwd_env(get_env(self._child)), q, default)


class parallel_bulk_t(Algorithm):
    """Tag of the senders that run ``bulk*`` on a parallel scheduler's backend (private)."""

    __slots__ = ()


_parallel_bulk = parallel_bulk_t()


class _ParBulkSender(Sender[object]):
    """What ``bulk*`` becomes on a parallel scheduler ([exec.par.scheduler])."""

    __slots__ = ("_algo", "_child", "_f", "_policy", "_sch", "_shape")
    tag = _parallel_bulk

    def __init__(
        self,
        sch: parallel_scheduler,
        algo: object,
        child: object,
        policy: object,
        shape: int,
        f: Callable[..., object],
    ) -> None:
        self._sch = sch
        self._algo = algo
        self._child = child
        self._policy = policy
        self._shape = shape
        self._f = f

    def connect(self, rcvr: Rcvr) -> _BulkOp:
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

    def get_completion_signatures(self, env: object = None) -> completion_signatures | None:
        cs = get_completion_signatures(self._child, env)
        if cs is None:
            return None
        return cs | _BULK_EXTRA_SIGS

    @property
    def data(self) -> tuple[object, object, int, Callable[..., object]]:
        return (self._algo, self._policy, self._shape, self._f)

    @property
    def children(self) -> tuple[object]:
        return (self._child,)

    def __repr__(self) -> str:
        return (
            f"{self._algo!r}({self._child!r}, {self._policy!r}, {self._shape!r}) on {self._sch!r}"
        )


def _is_parallel_policy(policy: object) -> bool:
    return getattr(policy, "parallel", False) is True


def _bulk_parts(sndr: Any) -> tuple[object, object, int, Callable[..., object]] | None:
    """``(child, policy, shape, f)`` of a bulk sender (any sender with a bulk tag: its
    properties are read as they are), or ``None``."""
    try:
        return sndr.child, sndr.policy, sndr.shape, sndr.f
    except AttributeError:
        return None


