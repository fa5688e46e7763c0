"""``ThreadPoolBackend``: the default parallel scheduler backend ([exec.par.scheduler],
[exec.sysctxrepl], the parallel guide "Data parallelism: `bulk`")."""

from __future__ import annotations

import operator
import os
import queue
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any

from .._core._errors import terminate
from .._core._queries import get_stop_token
from .._parallel._backend_error import BackendError
from .._parallel._replacement_api import parallel_scheduler_backend
from .._schedulers._run_loop import deliver_raised, raised_sink

__all__ = ["ThreadPoolBackend", "default_thread_pool"]

#: Largest chunk the pool hands out: bounds the time between two stop checks and keeps the
#: load balanced when the iterations are cheap and numerous.
MAX_CHUNK = 1 << 16
#: Chunks per worker thread (dynamic scheduling: idle threads take the next chunk).
CHUNKS_PER_WORKER = 4


class _Local(threading.local):
    pool: ThreadPoolBackend | None = None


_local = _Local()


def _plan(n: int, workers: int) -> tuple[int, int]:
    """``(nchunks, size)`` for ``n`` iterations on ``workers`` threads."""
    if n <= 0:
        return 0, 1
    nchunks = min(n, max(workers * CHUNKS_PER_WORKER, -(-n // MAX_CHUNK)))
    size = -(-n // nchunks)
    return -(-n // size), size


# --------------------------------------------------------------------------- work items
# A queue item is ``(fn, arg)``; a worker calls ``fn(arg)``.


def _run_schedule(r: Any) -> None:
    tok = r.try_query(get_stop_token)
    if tok is not None and tok.stop_requested():
        r.set_stopped()
    else:
        r.set_value()


def _run_call(fn: Callable[[], object]) -> None:
    fn()


def _completion_raised(r: Any, exc: BaseException) -> None:
    """Completing the proxy ``r`` on a worker raised ``exc``; the worker carries on.

    An ``Exception`` out of a completion is a contract violation (terminate); a
    ``BaseException`` raised by user code run in it (a ``then`` function: ``KeyboardInterrupt``,
    ``SystemExit``) goes to the consumer's ``raised_sink`` (``deliver_raised``).
    """
    try:
        if isinstance(exc, Exception):
            terminate(
                "a completion raised on a parallel scheduler thread ([exec.recv.concepts]: "
                "completions must not raise; an adaptor turns a function's exception into "
                "set_error)",
                exc,
            )
            return
        sink = None
        if r is not None:
            try:
                sink = r.try_query(raised_sink)
            except Exception:
                sink = None
        deliver_raised(sink, exc, "a completion on a parallel scheduler thread")
    except BaseException:
        pass  # the terminate handler raised: it has seen exc; keep the worker alive


class _Job:
    """The shared state of one bulk operation: a chunk dispenser and a participant count."""

    __slots__ = (
        "active",
        "error",
        "lock",
        "n",
        "nchunks",
        "next",
        "per_index",
        "r",
        "raised",
        "size",
        "stopped",
        "tok",
    )

    def __init__(
        self, r: Any, n: int, nchunks: int, size: int, tok: Any, per_index: bool, active: int
    ) -> None:
        self.r = r
        self.n = n
        self.nchunks = nchunks
        self.size = size
        self.tok = tok
        self.per_index = per_index
        self.active = active
        self.next = 0
        self.error: BaseException | None = None
        self.raised: BaseException | None = None  # a BaseException from the bulk function
        self.stopped = False
        self.lock = threading.Lock()

    def fail(self, exc: BaseException) -> None:
        with self.lock:
            if self.error is None:
                self.error = exc

    def fail_raised(self, exc: BaseException) -> None:
        with self.lock:
            if self.raised is None:
                self.raised = exc
            if self.error is None:
                self.error = exc  # stops the hand-out of chunks

    def leave(self) -> None:
        """A participant is done; the last one completes the proxy (after every execute)."""
        with self.lock:
            self.active -= 1
            last = self.active == 0
        if not last:
            return
        r = self.r
        self.r = None
        raised = self.raised
        if raised is not None:
            self.raised = self.error = None
            self._deliver(r, raised)
            return
        try:
            if self.error is not None:
                r.set_error(self.error)
            elif self.stopped:
                r.set_stopped()
            else:
                r.set_value()
        except BaseException as exc:
            _completion_raised(r, exc)

    @staticmethod
    def _deliver(r: Any, raised: BaseException) -> None:
        # A bulk function raised a BaseException (KeyboardInterrupt, SystemExit): never an
        # error datum. The consumer waiting for the work raises it (raised_sink) and the
        # operation is abandoned; with no such consumer the operation completes stopped
        # (nothing waits for it forever) and the exception is delivered by the fallback
        # (KeyboardInterrupt as a Ctrl-C, anything else a terminate).
        try:
            sink = r.try_query(raised_sink)
        except Exception:
            sink = None
        if sink is not None:
            try:
                if sink(raised) is True:
                    return
            except Exception:
                pass
        try:
            r.set_stopped()
        except BaseException as exc:
            _completion_raised(r, exc)
        try:
            deliver_raised(None, raised, "a bulk function on a parallel scheduler thread")
        except BaseException:
            pass  # the terminate handler raised: it has seen the exception


def _run_participant(job: _Job) -> None:
    r = job.r
    lock = job.lock
    tok = job.tok
    n = job.n
    size = job.size
    nchunks = job.nchunks
    per_index = job.per_index
    try:
        while True:
            lock.acquire()
            c = job.next
            if c >= nchunks or job.error is not None or job.stopped:
                lock.release()
                break
            if tok is not None and tok.stop_requested():
                job.stopped = True
                lock.release()
                break
            job.next = c + 1
            lock.release()
            b = c * size
            e = b + size
            if e > n:
                e = n
            if per_index:
                for i in range(b, e):
                    r.execute(i, i + 1)
            else:
                r.execute(b, e)
    except Exception as exc:
        job.fail(exc)
    except BaseException as exc:
        job.fail_raised(exc)
    job.leave()


def _abandon_participant(job: _Job, exc: BaseException) -> None:
    job.fail(exc)
    job.leave()


_ABANDON: dict[Any, Callable[[Any, BaseException], object]] = {
    _run_schedule: lambda r, exc: r.set_error(exc),
    _run_participant: _abandon_participant,
    _run_call: lambda fn, exc: fn(),
}


# --------------------------------------------------------------------------- the backend


class ThreadPoolBackend(parallel_scheduler_backend):
    """A pool of threads that runs parallel scheduler work; the default backend.

    ``ThreadPoolBackend(max_workers=None)``: ``max_workers`` threads (default
    ``os.cpu_count()``), started on first use, daemonic. The process-wide default backend is
    one such pool, created lazily and shared by every default ``parallel_scheduler``
    ([exec.par.scheduler], P2079R7 §5.6: one shared context, no oversubscription); make your
    own only to give some work a separate pool.

    * ``schedule(r, s)``: a worker completes ``r.set_value()``, or ``r.set_stopped()`` if the
      consumer's stop token was stopped by then ([exec.par.scheduler]).
    * ``schedule_bulk_chunked(n, r, s)`` / ``schedule_bulk_unchunked(n, r, s)``: the range
      is cut into ``min(n, max(4 * max_workers, ceil(n / 65536)))`` equal chunks; up to
      ``max_workers`` threads take chunks one after another until none is left (idle threads
      steal the remaining ones, so uneven work balances). A stop request is honoured between
      chunks: no new chunk starts and the operation completes ``set_stopped()`` once the
      running chunks return. An exception from the bulk function stops the hand-out the
      same way and becomes ``set_error`` with that exception. The last thread to finish
      completes the operation, after every ``execute`` ([exec.sysctxrepl.psb]). Nothing is allocated
      per index.

    Python threads run Python code one at a time (the GIL): the pool speeds up work that
    releases the GIL (``hashlib``, numpy, I/O, compression) or runs on a free-threaded
    interpreter. For pure-Python CPU work use :class:`ProcessPoolBackend` or
    :class:`DaskBackend`.

    ``shutdown(wait=True)`` stops the threads (work submitted afterwards completes with a
    :class:`BackendError`); the pool is also a context manager. ``running_on_worker()`` tells
    whether the calling thread is one of this pool's.
    """

    __slots__ = ("_lock", "_max_workers", "_prefix", "_queue", "_state", "_threads")

    def __init__(self, max_workers: int | None = None, *, thread_name_prefix: str = "") -> None:
        if max_workers is None:
            max_workers = os.cpu_count() or 1
        if isinstance(max_workers, bool) or not isinstance(max_workers, int):
            raise TypeError(
                f"ThreadPoolBackend(max_workers): expected an int or None, got "
                f"{type(max_workers).__name__}"
            )
        if max_workers < 1:
            raise ValueError(f"ThreadPoolBackend(max_workers): must be >= 1, got {max_workers}")
        self._max_workers = max_workers
        self._prefix = thread_name_prefix or f"structexec-pool-{id(self):x}"
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._state = 0  # 0: no threads yet, 1: running, 2: shut down

    @property
    def max_workers(self) -> int:
        """The number of worker threads."""
        return self._max_workers

    # -- the queue

    def _start(self) -> None:
        with self._lock:
            if self._state == 2:
                raise RuntimeError(f"{self!r} has been shut down")
            if self._state == 0:
                for k in range(self._max_workers):
                    t = threading.Thread(
                        target=self._worker, name=f"{self._prefix}-{k}", daemon=True
                    )
                    t.start()
                    self._threads.append(t)
                self._state = 1

    def _put(self, fn: Callable[[Any], None], arg: Any) -> None:
        if self._state != 1:
            self._start()
        self._queue.put((fn, arg))

    def call_soon(self, fn: Callable[[], object]) -> None:
        """Run ``fn()`` on one of the pool's threads (used by other backends to complete)."""
        self._put(_run_call, fn)

    def _worker(self) -> None:
        _local.pool = self
        get = self._queue.get
        while True:
            item = get()
            if item is None:
                return
            try:
                item[0](item[1])
            except BaseException as exc:
                # Only a completion can raise here (bulk participants catch what the bulk
                # function raises): the proxy of a schedule() item, else unknown.
                _completion_raised(item[1] if item[0] is _run_schedule else None, exc)
            item = None

    def running_on_worker(self) -> bool:
        """Whether the calling thread is one of this pool's worker threads."""
        return _local.pool is self

    def shutdown(self, wait: bool = True) -> None:
        """Stop the worker threads once the queued work has run; idempotent.

        Work submitted after ``shutdown`` completes with :class:`BackendError` (the frontend
        reports that ``schedule`` raised ``RuntimeError``). With ``wait=True`` (the default)
        this joins the threads; it must not be called from one of them.
        """
        with self._lock:
            if self._state == 2:
                threads: list[threading.Thread] = []
            else:
                threads = self._threads
                self._threads = []
                self._state = 2
                for _ in threads:
                    self._queue.put(None)
        if wait:
            if any(t is threading.current_thread() for t in threads):
                raise RuntimeError("ThreadPoolBackend.shutdown(wait=True) from one of its threads")
            for t in threads:
                t.join()
            self._abandon_orphans()

    def _abandon_orphans(self) -> None:
        # Items that raced with shutdown and landed behind the sentinels.
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if item is None:
                continue
            fn, arg = item
            err = BackendError(f"{self!r} was shut down before this work could run")
            try:
                _ABANDON[fn](arg, err)
            except BaseException as exc:
                terminate("completing abandoned parallel scheduler work raised", exc)

    def __enter__(self) -> ThreadPoolBackend:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.shutdown(wait=True)

    # -- parallel_scheduler_backend

    def schedule(self, r: Any, s: memoryview) -> None:
        """Complete ``r`` on a worker thread ([exec.sysctxrepl.psb])."""
        self._put(_run_schedule, r)

    def schedule_bulk_chunked(self, n: int, r: Any, s: memoryview) -> None:
        """Run ``r.execute(b, e)`` over chunks of ``[0, n)`` on the workers
        ([exec.sysctxrepl.psb])."""
        self._bulk(n, r, False)

    def schedule_bulk_unchunked(self, n: int, r: Any, s: memoryview) -> None:
        """Run ``r.execute(i, i + 1)`` for each ``i`` in ``[0, n)`` on the workers
        ([exec.sysctxrepl.psb])."""
        self._bulk(n, r, True)

    def _bulk(self, n: int, r: Any, unchunked: bool) -> None:
        n = operator.index(n)
        if n < 0:
            raise ValueError(f"bulk shape must be >= 0, got {n}")
        tok = r.try_query(get_stop_token)
        workers = self._max_workers
        nchunks, size = _plan(n, workers)
        # An unchunked frontend proxy runs [b, e) as the calls execute(i, i + 1) would.
        per_index = unchunked and not getattr(r, "_sx_range_ok", False)
        participants = max(1, min(workers, nchunks))
        job = _Job(r, n, nchunks, size, tok, per_index, participants)
        if self._state != 1:
            self._start()
        put = self._queue.put
        for _ in range(participants):
            put((_run_participant, job))

    def __repr__(self) -> str:
        state = ("idle", "running", "shut down")[self._state]
        return f"<ThreadPoolBackend max_workers={self._max_workers} {state}>"


# --------------------------------------------------------------------------- the default

_default: ThreadPoolBackend | None = None
_default_lock = threading.Lock()


def default_thread_pool() -> ThreadPoolBackend:
    """The process-wide default pool (created on first use, recreated after a shutdown)."""
    global _default
    pool = _default
    if pool is not None and pool._state != 2:
        return pool
    with _default_lock:
        if _default is None or _default._state == 2:
            _default = ThreadPoolBackend(thread_name_prefix="structexec-parallel")
        return _default


def _after_fork_in_child() -> None:
    global _default
    _default = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
