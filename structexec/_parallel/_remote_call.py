"""``then``/``upon_error``/``upon_stopped`` on a remote parallel scheduler ([exec.then],
[exec.par.scheduler], the parallel guide "Running any function remotely").

When the backend of a parallel scheduler runs work in other processes (a process pool, a dask
cluster: a backend with ``_sx_submit_call``), its domain transforms a chain of ``then``/
``upon_*`` stages that runs on the scheduler's agents into a :class:`RemoteThenSender`
([exec.snd.transform], as stdexec's GPU schedulers do for ``then``). Its operation starts the
chain's predecessor (the *base*); when the base completes, the stages from the first one that
matches the completion to the end of the chain are shipped to a worker in one call
(:class:`RemoteCallWork`), and only the final result comes back. The values between stages
never leave the worker.

* A function returning a value, or raising, behaves as the local chain does: the error keeps
  its type. What cannot be pickled fails with ``UnpicklableWorkError`` before anything is
  sent (the backend names the function or value).
* Stop: a stop request that arrives before the call is handed to a worker cancels it; the
  chain then continues with a stopped completion at the cancelled stage (a later
  ``upon_stopped`` stage still runs). What a stop does to a running call is the backend's
  business (documented on each backend). A chain that runs because its base was stopped
  (``upon_stopped``) is not itself cancellable.
* The completion arrives on one of the scheduler's agents (the process-wide thread pool),
  like every completion of a remote backend.
* ``schedule(sch) | then(f)`` on a backend that accepts submissions from any thread
  (``_sx_submit_anywhere``) sends the call from the thread that starts the operation, without
  a hop to the scheduler's agent first.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from .._core._adaptor_util import close_op
from .._core._connect import connect_unchecked as connect
from .._core._env import fwd_env, get_env
from .._core._protocol import Algorithm, Sender, completed_twice, twice_started
from .._core._queries import get_stop_token, query_or
from .._core._snapshot import Waiting
from .._core._stop_token import never_stop_token, stop_callback_for
from ._backend_error import BackendError
from ._remote_work import ERROR, STOPPED, VALUE, RemoteCallWork

if TYPE_CHECKING:
    from .._core._contracts import Env, OpState, Rcvr
    from .._core._stop_token import StopCallback, StopToken
    from ._parallel_scheduler import parallel_scheduler
    from ._replacement_api import BackendHooks, RemoteCallHandle

#: A chain's stages: ``(kind, function)`` pairs (``kind``: ``VALUE`` for ``then``, ``ERROR``
#: for ``upon_error``, ``STOPPED`` for ``upon_stopped``).
Stages = tuple[tuple[int, Callable[..., object]], ...]

__all__ = ["RemoteThenSender", "is_remote_backend"]


def is_remote_backend(backend: object) -> bool:
    """True for a backend whose ``then`` functions run in other processes."""
    return getattr(type(backend), "_sx_submit_call", None) is not None


class remote_then_t(Algorithm):
    """Tag of the senders that run ``then``/``upon_*`` stages on a remote backend (private)."""

    __slots__ = ()


_remote_then = remote_then_t()

class _Fused(enum.Enum):
    FUSED = 0


#: ``RemoteThenOp._child`` for ``schedule(sch) | then(...)`` sent from the starting thread.
_FUSED: Final = _Fused.FUSED


class RemoteThenSender(Sender[object]):
    """What a chain of ``then``/``upon_*`` stages on a remote parallel scheduler becomes."""

    __slots__ = ("_base", "_fused", "_orig", "_sch", "_stages")
    tag = _remote_then

    def __init__(
        self, sch: parallel_scheduler, base: object, stages: Stages, fused: bool, orig: object
    ) -> None:
        self._sch = sch
        self._base = base
        self._stages = stages
        self._fused = fused
        self._orig = orig

    def connect(self, rcvr: Rcvr) -> RemoteThenOp:
        op = RemoteThenOp(self._sch._backend, rcvr, self._stages)
        if self._fused and self._sch._backend._sx_submit_anywhere:
            op._child = _FUSED
            op._base = self._base
        else:
            op._child = connect(self._base, _BaseReceiver(op))
        return op

    def get_env(self) -> Env:
        return get_env(self._orig)

    @property
    def data(self) -> Stages:
        return self._stages

    @property
    def children(self) -> tuple[object]:
        return (self._base,)

    def __repr__(self) -> str:
        return f"{self._orig!r} on {self._sch!r}"


class _BaseReceiver:
    """Receives the base's completion and dispatches the remote call."""

    __slots__ = ("_op",)

    def __init__(self, op: RemoteThenOp) -> None:
        self._op = op

    def set_value(self, *vals: object) -> None:
        self._op._base_done(VALUE, vals)

    def set_error(self, err: object) -> None:
        self._op._base_done(ERROR, err)

    def set_stopped(self) -> None:
        self._op._base_done(STOPPED, None)

    def get_env(self) -> Env:
        return fwd_env(get_env(self._op._rcvr))


class RemoteThenOp:
    """The operation of a :class:`RemoteThenSender`.

    ``_state``: 0 not started, 1 started, 2 completed. ``_call`` is the backend's handle of
    the call in flight (``where()`` says where it runs, for ``sx.operation_tree()``).
    """

    __slots__ = (
        "__weakref__",
        "_backend",
        "_base",
        "_call",
        "_child",
        "_gen",
        "_idx",
        "_lock",
        "_rcvr",
        "_stages",
        "_state",
        "_stop_cb",
        "_sx_handoff",
    )

    def __init__(self, backend: BackendHooks, rcvr: Rcvr, stages: Stages) -> None:
        self._backend = backend
        self._rcvr = rcvr
        self._stages = stages
        self._state = 0
        self._child: OpState | _Fused | None = None
        self._base: object = None
        self._call: RemoteCallHandle | None = None
        self._stop_cb: StopCallback | None = None
        self._idx = 0
        self._gen = 0
        self._lock = threading.Lock()
        #: Completing this operation is a hand-off when completing its receiver is
        #: (contracts.HandOff): the backend may then complete it on its callback thread.
        #: Read once here, where the receiver is known, not on that thread.
        self._sx_handoff: bool = getattr(rcvr, "_sx_handoff", False) is True

    def start(self) -> None:
        if self._state:
            raise twice_started(self)
        self._state = 1
        child = self._child
        if child is _FUSED:
            self._child = None
            self._base = None
            self._dispatch(VALUE, (), 0)
            return
        if child is not None:  # (None only once closed, and start() raised above)
            child.start()

    def close(self) -> None:
        """Never started: close the base's operation
        (the senders guide "Writing your own sender")."""
        if not self._state:
            self._state = 2
            child, self._child = self._child, None
            if child is not None and child is not _FUSED:
                close_op(child)

    def where(self) -> str:
        """Where the call is, in words (for ``sx.operation_tree()``)."""
        call = self._call
        if call is None:
            return "waiting for its predecessor"
        return str(call.where())

    # -- the base's completion, and the calls

    def _base_done(self, kind: int, data: object) -> None:
        self._child = None
        self._dispatch(kind, data, 0)

    def _token(self) -> StopToken | None:
        """The receiver's stop token, or ``None`` when it cannot stop (no token, an
        unstoppable one, or ``stop_possible()`` false): ``get_stop_token`` and
        ``is_unstoppable`` without their frames (the round trip's hot path)."""
        try:
            tok: StopToken | None = query_or(get_env(self._rcvr), get_stop_token, None)
        except Exception:
            return None
        if tok is None:
            return None
        cls = type(tok)
        if cls is never_stop_token or getattr(cls, "unstoppable", False) is True:
            return None
        if not tok.stop_possible():
            return None
        return tok

    def _dispatch(self, kind: int, data: object, start: int) -> None:
        """Send the stages from the first one at or after ``start`` that matches ``kind``;
        with none, complete the receiver with ``kind``/``data`` as they are."""
        stages = self._stages
        idx = start
        n = len(stages)
        while idx < n and stages[idx][0] != kind:
            idx += 1
        if idx == n:
            self._complete(kind, data)
            return
        tok = self._token() if kind != STOPPED else None
        if tok is not None and tok.stop_requested():
            self._dispatch(STOPPED, None, idx + 1)  # cancelled before it was sent
            return
        self._idx = idx
        work = RemoteCallWork(stages[idx:], kind, data)
        gen = self._gen
        try:
            call = self._backend._sx_submit_call(work, self)
        except Exception as exc:
            if not isinstance(exc, (BackendError, TypeError)):
                err = BackendError(
                    f"the parallel scheduler backend {self._backend!r} could not run "
                    f"{work!r}: {type(exc).__name__}: {exc}"
                )
                err.__cause__ = exc
                exc = err
            self._complete(ERROR, exc)
            return
        # The call may have completed already, on another thread (``_gen`` counts reports).
        with self._lock:
            if self._gen == gen:
                self._call = call
        if tok is not None:
            cb: StopCallback | None = stop_callback_for(tok, call.cancel)  # may cancel at once
            with self._lock:
                if self._gen == gen:
                    self._stop_cb = cb
                    cb = None
            if cb is not None:
                cb.close()

    def remote_done(self, kind: int, data: object) -> None:
        """The backend's report of the call (on one of the scheduler's agents, or on its
        callback thread when completing is a hand-off): ``VALUE`` with the tuple of values,
        ``ERROR`` with the error, ``STOPPED`` when the call was cancelled before it ran."""
        with self._lock:
            self._gen += 1
            self._call = None
            cb, self._stop_cb = self._stop_cb, None
        if cb is not None:
            cb.close()
        if kind == VALUE and self._state != 2:  # (_complete, without its frame)
            self._state = 2
            self._rcvr.set_value(*data)  # type: ignore[misc]
        elif kind == STOPPED:
            self._dispatch(STOPPED, None, self._idx + 1)
        else:
            self._complete(kind, data)

    def _complete(self, kind: int, data: Any) -> None:  # the values tuple, or the error
        if self._state == 2:
            raise completed_twice(self, ("set_value", "set_error", "set_stopped")[kind])
        self._state = 2
        rcvr = self._rcvr
        if kind == VALUE:
            rcvr.set_value(*data)
        elif kind == ERROR:
            rcvr.set_error(data)
        else:
            rcvr.set_stopped()

    def __repr__(self) -> str:
        return f"<remote then operation on {self._backend!r}>"

    def _sx_describe(self) -> Waiting | None:
        """Where the call in flight is, for ``operation_tree()`` (``_contracts.Describable``;
        the parallel guide); ``None`` before it is sent."""
        if getattr(self, "_call", None) is None:
            return None
        return Waiting(str(self.where()), "parallel_scheduler")
