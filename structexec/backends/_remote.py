"""Book-keeping shared by the backends that run bulk chunks in other processes (private).

A :class:`RemoteJob` tracks the chunks of one bulk operation that run elsewhere (a process
pool, a dask cluster): it merges each chunk's results into the parent's values as the chunk
finishes, remembers the first error and whether a stop request cut the work short, and
completes the proxy once every chunk has finished, on the process-wide thread pool, so that
downstream work never runs on (and never blocks) the engine's own callback thread. The one
exception is a consumer whose completion is only a hand-off (``_sx_handoff``, see
``_core/_contracts.HandOff``: ``await`` in trio, ``sync_wait``): it runs no user code, so it
is completed on the callback thread at once, saving a thread hop per operation.
"""

from __future__ import annotations

import operator
import pickle
import threading
from collections.abc import Callable
from functools import partial
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from .._core._describe import describe_callable
from .._core._errors import terminate
from .._core._stop_token import inplace_stop_callback
from .._parallel._backend_error import BackendError
from .._parallel._replacement_api import (
    bulk_item_receiver_proxy,
    parallel_scheduler_backend,
    receiver_proxy,
)
from ._common import UnpicklableWorkError
from ._thread_pool import _completion_raised, default_thread_pool

if TYPE_CHECKING:
    from .._core._stop_token import inplace_stop_token
    from .._parallel._remote_call import RemoteThenOp
    from .._parallel._remote_work import RemoteCallWork

__all__ = ["RemoteBackend", "RemoteCall", "RemoteJob", "complete", "complete_soon"]


def complete_soon(fn: Callable[[], object]) -> None:
    """Run a completion on the process-wide thread pool."""
    default_thread_pool().call_soon(fn)


_B = TypeVar("_B", bound="RemoteBackend")


class RemoteBackend(parallel_scheduler_backend):
    """What the backends that run bulk work in other processes share ([exec.sysctxrepl.psb]):
    ``schedule`` stays in this process (continuations are local code: the process-wide
    thread pool completes them), both bulk forms go to :meth:`_bulk` with a checked shape, and
    the backend is a context manager whose exit calls :meth:`_close`."""

    #: ``schedule(sch) | bulk(...)`` may hand the bulk work to this backend from the thread
    #: that starts it (contracts.SubmitAnywhere): the bulk methods only submit the work.
    _sx_submit_anywhere = True

    def schedule(self, r: receiver_proxy, s: memoryview) -> None:
        """Complete ``r`` on the process-wide thread pool (continuations are local)."""
        default_thread_pool().schedule(r, s)

    def schedule_bulk_chunked(self, n: int, r: bulk_item_receiver_proxy, s: memoryview) -> None:
        """Run chunks of ``[0, n)`` remotely ([exec.sysctxrepl.psb])."""
        self._bulk(_shape(n), r)

    def schedule_bulk_unchunked(
        self, n: int, r: bulk_item_receiver_proxy, s: memoryview
    ) -> None:
        """Run every index of ``[0, n)`` remotely, as part of a chunk."""
        self._bulk(_shape(n), r)

    def _bulk(self, n: int, r: bulk_item_receiver_proxy) -> None:
        raise NotImplementedError  # pragma: no cover - every remote backend has its own

    def _close(self) -> None:
        raise NotImplementedError  # pragma: no cover - every remote backend has its own

    def _sx_submit_call(self, work: RemoteCallWork, op: RemoteThenOp) -> RemoteCall:
        """Send a remote call (``then``/``upon_*`` stages, the parallel guide "Running any
        function remotely"): pickle ``work`` now, raising ``UnpicklableWorkError`` naming
        what fails, then run it on a worker and report to ``op`` through the returned
        :class:`RemoteCall`."""
        raise NotImplementedError  # pragma: no cover - every remote backend has its own

    def __enter__(self: _B) -> _B:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._close()


def _shape(n: int) -> int:
    n = operator.index(n)
    if n < 0:
        raise ValueError(f"bulk shape must be >= 0, got {n}")
    return n


class RemoteJob:
    """One bulk operation's chunks in flight (see the module docstring)."""

    __slots__ = (
        "_stop_cb",
        "collect",
        "error",
        "lock",
        "on_finish",
        "on_stop",
        "r",
        "remaining",
        "stop_requested",
        "stopped",
    )

    def __init__(self, r: bulk_item_receiver_proxy) -> None:
        self.r: bulk_item_receiver_proxy | None = r
        self.lock = threading.Lock()
        self.remaining = 0
        self.error: BaseException | None = None
        self.stopped = False
        self.stop_requested = False
        self._stop_cb: inplace_stop_callback | None = None
        #: Called (on the thread that requested stop, or the one that recorded an error)
        #: to stop the chunks still queued or running: set a flag, cancel futures.
        self.on_stop: Callable[[], None] | None = None
        #: Called once, before the completion, to release resources (slots, events, ...).
        self.on_finish: Callable[[], None] | None = None
        #: Called once, when every chunk has finished and before anything else, to fetch and
        #: merge results that were not merged chunk by chunk.
        self.collect: Callable[[], None] | None = None

    def watch(self, tok: inplace_stop_token | None) -> None:
        """Request cooperative stop of the chunks when ``tok`` is stopped."""
        if tok is not None:
            self._stop_cb = inplace_stop_callback(tok, self._stop)

    def _stop(self) -> None:
        with self.lock:
            if self.stop_requested:
                return
            self.stop_requested = True
        fn = self.on_stop
        if fn is not None:
            fn()

    def fail(self, exc: BaseException, *, stop_others: bool = True) -> None:
        """Record ``exc`` (the first error wins) and, by default, stop the other chunks."""
        with self.lock:
            if self.error is None:
                self.error = exc
        if stop_others:
            self._stop()

    def merge(self, b: int, e: int, parts: tuple[Any, ...]) -> None:
        """Bring a chunk's results into the parent's values (an ``execute`` of the contract)."""
        r = self.r
        if parts and r is not None:  # (``r`` is dropped only once every chunk has finished)
            try:
                r.merge(b, e, parts)
            except Exception as exc:
                self.fail(exc)

    def chunk_done(self) -> None:
        """One chunk has finished (whatever the outcome); the last one completes the proxy."""
        with self.lock:
            self.remaining -= 1
            last = self.remaining == 0
        if last:
            self.finish()

    def finish(self) -> None:
        collect = self.collect
        if collect is not None:
            self.collect = None
            try:
                collect()
            except Exception as exc:  # the operation must complete whatever happens
                failed = BackendError(
                    f"fetching the results of a remote bulk operation failed: "
                    f"{type(exc).__name__}: {exc}"
                )
                failed.__cause__ = exc
                self.fail(failed, stop_others=False)
        cb = self._stop_cb
        if cb is not None:
            self._stop_cb = None
            cb.close()
        fin = self.on_finish
        if fin is not None:
            self.on_finish = None
            try:
                fin()
            except Exception as exc:
                terminate("releasing the resources of a remote bulk operation raised", exc)
        r = self.r
        if r is None:
            return  # (finished already)
        self.r = None
        fn: Callable[[], object]
        if self.error is not None:
            fn = partial(r.set_error, self.error)
        elif self.stopped:
            fn = r.set_stopped
        else:
            fn = r.set_value
        complete(r, fn)


def complete(r: receiver_proxy | RemoteThenOp, fn: Callable[[], object]) -> None:
    """Run ``fn``, a completion of the proxy ``r``, from an engine's callback thread: at once
    when completing ``r`` is a hand-off, else on the process-wide thread pool."""
    if getattr(r, "_sx_handoff", False) is True:
        # The consumer only records the result and wakes its waiter (contracts.HandOff:
        # ``await`` in trio, ``sync_wait``): complete here, one thread hop fewer.
        try:
            fn()
        except BaseException as exc:
            _completion_raised(r, exc)
    else:
        complete_soon(fn)


_report_lock = threading.Lock()
_loads = pickle.loads


class RemoteCall:
    """One remote call (a chain of ``then``/``upon_*`` stages sent to a worker) in flight.

    ``report(kind, data)`` is called once, from any thread, by the backend: ``0`` with the
    pickled tuple of values the worker sent back, ``1`` with an error, ``2`` when the call
    was cancelled before it ran. The operation is then told on the process-wide thread pool
    (or at once, when completing it is a hand-off), never on the engine's callback thread.
    ``cancel()`` and ``where()`` are the backend's (stop requests, ``sx.operation_tree()``).
    """

    __slots__ = ("backend", "op", "payload", "stages")

    def __init__(
        self, backend: RemoteBackend, payload: bytes, op: RemoteThenOp, work: RemoteCallWork
    ) -> None:
        self.backend = backend
        self.payload = payload
        self.op: RemoteThenOp | None = op
        self.stages = work.stages

    def report(self, kind: int, data: object) -> None:
        with _report_lock:  # the first report wins (a finish may race with a cancel)
            op = self.op
            if op is None:
                return
            self.op = None
        self.payload = b""
        if op._sx_handoff:
            # The consumer only records the result and wakes its waiter (contracts.HandOff:
            # ``await`` in trio, ``sync_wait``): deliver here, one thread hop fewer.
            try:
                if kind == 0:
                    try:
                        data = _loads(data)  # type: ignore[arg-type]
                    except Exception as exc:
                        kind, data = 1, _unreadable(self, exc)
                op.remote_done(kind, data)
            except BaseException as exc:
                _completion_raised(op, exc)
        else:
            complete_soon(partial(_deliver, op, kind, data, self))

    def describe(self) -> str:
        """``"the call of parse, check"`` (the stages' functions)."""
        return "the call of " + ", ".join(describe_callable(f) for _, f in self.stages)

    def cancel(self) -> None:
        raise NotImplementedError  # pragma: no cover - every remote backend has its own

    def where(self) -> str:
        raise NotImplementedError  # pragma: no cover - every remote backend has its own


def _deliver(op: RemoteThenOp, kind: int, data: Any, call: RemoteCall) -> None:
    # ``data``: the pickled values (``kind`` 0), else the error or ``None``
    if kind == 0:
        try:
            data = _loads(data)
        except Exception as exc:
            kind, data = 1, _unreadable(call, exc)
    op.remote_done(kind, data)


def _unreadable(call: RemoteCall, exc: Exception) -> UnpicklableWorkError:
    err = UnpicklableWorkError(
        f"{call.backend!r} cannot read the result of {call.describe()} in this process "
        f"({type(exc).__name__}: {exc}); what a remote function returns must be "
        "importable here as well as on the workers"
    )
    err.__cause__ = exc
    return err
