"""``ProcessPoolBackend``: bulk work in worker processes ([exec.sysctxrepl.psb])."""

from __future__ import annotations

import collections
import os
import pickle
import threading
from collections.abc import Callable
from concurrent.futures import CancelledError, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from functools import partial
from multiprocessing.context import BaseContext
from types import FunctionType
from typing import TYPE_CHECKING

from .._core._queries import get_stop_token
from .._parallel._remote_work import RemoteBulkWork
from ._common import (
    BackendError,
    UnpicklableWorkError,
    WorkerDiedError,
    call_payload_dumps,
    pickle_call,
    pickle_work,
)
from ._pool_worker import (
    _CACHE_SIZE,
    _by_reference,
    _default_context,
    _dumps,
    _fixed_stages,
    _init_worker,
    _run_call,
    _run_chunk,
    _work_dumps,
)
from ._remote import RemoteBackend, RemoteCall, RemoteJob, complete, complete_soon
from ._thread_pool import default_thread_pool

if TYPE_CHECKING:
    import ctypes

    from .._parallel._remote_call import RemoteThenOp
    from .._parallel._remote_work import RemoteCallWork
    from .._parallel._replacement_api import bulk_item_receiver_proxy

    #: Flags and pids shared with the worker processes (``RawArray("b"/"i", n)``).
    _Bytes = ctypes.Array[ctypes.c_byte]
    _Ints = ctypes.Array[ctypes.c_int]
    #: What a worker returns: pickled bytes, or ``None`` (a chunk with nothing to send back,
    #: a call that a stop request cancelled before it ran).
    _Result = Future[bytes | None]

__all__ = ["ProcessPoolBackend"]

#: ``concurrent.futures.Future._state`` of a future that has its result or exception.
_FINISHED = "FINISHED"
#: Number of cooperative stop flags shared with the workers (bulk operations in flight at
#: once that can be stopped while running; more still run, and stop between chunks).
_NSLOTS = 256
#: Remote calls in the pool per worker process. One: a call handed to the pool starts at once,
#: so a stop request never waits for a busy worker to skip a call (two would keep the
#: workers busier with tiny calls, but a stop could then only complete a call waiting in the
#: pool when a worker became free).
_CALLS_PER_WORKER = 1

# --------------------------------------------------------------------------- the backend


class ProcessPoolBackend(RemoteBackend):
    """Runs bulk work, and ``then``/``upon_*`` functions, in a pool of worker processes
    (``concurrent.futures``).

    ``ProcessPoolBackend(max_workers=None, *, mp_context=None)``: ``max_workers`` processes
    (default ``os.cpu_count()``), started on first use with ``mp_context`` (default
    ``forkserver`` where available, else ``spawn``; both re-import the main module in the
    workers, so scripts need an ``if __name__ == "__main__":`` guard). Pure-Python CPU work
    runs in parallel here, unlike on threads.

    * ``schedule(r, s)`` stays in this process: it runs on the process-wide thread pool
      (continuations are local code).
    * ``schedule_bulk_chunked``/``schedule_bulk_unchunked``: the function and the values
      the predecessor sent are pickled once *before any work starts*: with :mod:`pickle`
      when it can, else with cloudpickle, so lambdas, closures and functions defined in
      ``__main__`` travel by value (functions of importable modules by reference); if that
      fails the operation completes with :class:`UnpicklableWorkError` (a ``TypeError``)
      naming the object. The range is cut into ``min(n, 4 * max_workers)`` chunks, submitted
      to the pool; each worker runs its chunk on its own copy of the values. **What comes
      back**: for each value that is a list, ``bytearray``, ``array.array`` or numpy array
      with at least ``shape`` elements, the elements ``[b, e)`` of every finished chunk are
      copied into the parent's object (the bulk idiom "iteration ``i`` writes element
      ``i``"); other changes a chunk makes stay in the worker. Return values of the bulk
      function are ignored, as on every backend.
    * Completions run on the process-wide thread pool, except when the consumer of the bulk
      is ``await`` in trio or ``sync_wait``, which are woken from the pool's result thread
      directly. And once the workers run, ``schedule(sch) | bulk(...)`` submits the chunks
      from the thread that starts it, without hopping to the thread pool first: a round trip
      wakes as many threads as a bare ``ProcessPoolExecutor`` round trip.
    * A stop request cancels the chunks not yet started and sets a shared flag that running
      per-index chunks check every 64 iterations; the operation then completes
      ``set_stopped()`` after every chunk has returned. The first exception from the
      function completes ``set_error`` with it (its original type; ``__cause__`` carries the
      remote traceback) and stops the rest the same way.
    * A worker process that dies (``os._exit``, a signal, out of memory) completes the
      operation with :class:`WorkerDiedError`; the pool is replaced, so the backend stays
      usable.
    * ``then``/``upon_error``/``upon_stopped`` functions that run on the scheduler are sent
      to a worker with their arguments, consecutive stages in one call, and only the result
      comes back (the parallel guide "Running any function remotely"): pickled before anything
      is sent (``UnpicklableWorkError`` names what fails). At most one call per worker is
      in the pool at once; the others wait in the backend's own queue. A stop request
      removes a queued call at once, and flags one handed to the pool that has not started
      (it then returns without running): either completes ``set_stopped()`` and never runs.
      A call already running is not interrupted: it runs to the end and its outcome is
      delivered.
      ``sx.operation_tree()`` shows ``queued in ...`` or ``running on worker process <pid>``.
    * A ``KeyboardInterrupt``/``SystemExit`` raised by the function in a worker, or an
      exception that cannot be pickled back, completes the operation with
      :class:`BackendError` naming it (it neither interrupts this program nor kills the
      worker); results that cannot be pickled back, with :class:`UnpicklableWorkError`
      naming the element (the parallel guide, "What happens when things fail").

    ``shutdown(wait=True)`` stops the worker processes; the backend is a context manager.
    """

    def __init__(
        self, max_workers: int | None = None, *, mp_context: BaseContext | None = None
    ) -> None:
        if max_workers is None:
            max_workers = os.cpu_count() or 1
        if isinstance(max_workers, bool) or not isinstance(max_workers, int):
            raise TypeError(
                f"ProcessPoolBackend(max_workers): expected an int or None, got "
                f"{type(max_workers).__name__}"
            )
        if max_workers < 1:
            raise ValueError(f"ProcessPoolBackend(max_workers): must be >= 1, got {max_workers}")
        self._max_workers = max_workers
        self._ctx = mp_context if mp_context is not None else _default_context()
        self._lock = threading.Lock()
        self._executor: ProcessPoolExecutor | None = None
        self._flags: _Bytes | None = None
        self._free = list(range(_NSLOTS - 1, -1, -1))
        self._closed = False
        self._work_dumps = _work_dumps()
        #: Pickled work by ``(f, mode, shape, parallel)``, for work without values whose
        #: function travels by reference (the bytes then never change): see _payload.
        self._payloads: dict[tuple[object, int, int, bool], bytes] = {}
        #: Remote calls (``then`` on a remote scheduler): at most ``_CALLS_PER_WORKER *
        #: max_workers`` are in the pool at once, each with a slot of ``_pids`` (where its
        #: worker writes its pid) and of ``_call_flags`` (set by a stop request: a call that
        #: has not started then returns without running); the others wait here, where a stop
        #: request removes them at once.
        self._pids: _Ints | None = None
        self._call_flags: _Bytes | None = None
        nslots = _CALLS_PER_WORKER * max_workers
        self._call_slots = list(range(nslots - 1, -1, -1))
        self._call_queue: collections.deque[_PoolCall] = collections.deque()
        #: Pickled calls by ``id(stages)`` (the stages kept alongside, so that the id stays
        #: theirs), for chains without values whose functions cannot change
        #: (:func:`_fixed_stages`).
        self._call_payloads: dict[int, tuple[object, bytes]] = {}

    @property
    def _sx_submit_anywhere(self) -> bool:  # type: ignore[override]
        """The bulk work may be submitted from the caller's thread while the executor runs
        (contracts.SubmitAnywhere); starting the worker processes happens on the backend's
        own thread."""
        return self._executor is not None

    @property
    def max_workers(self) -> int:
        """The number of worker processes."""
        return self._max_workers

    def _get_executor(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._closed:
                raise RuntimeError(f"{self!r} has been shut down")
            ex = self._executor
            if ex is None:
                if self._flags is None:
                    self._flags = self._ctx.RawArray("b", _NSLOTS)
                    nslots = _CALLS_PER_WORKER * self._max_workers
                    self._pids = self._ctx.RawArray("i", nslots)
                    self._call_flags = self._ctx.RawArray("b", nslots)
                ex = self._executor = ProcessPoolExecutor(
                    self._max_workers,
                    mp_context=self._ctx,
                    initializer=_init_worker,
                    initargs=(self._flags, self._pids, self._call_flags),
                )
            return ex

    def _broken(self, ex: ProcessPoolExecutor) -> None:
        """Replace a broken pool (the next operation gets a fresh one).

        Called from the pool's own manager thread while it fails the pending futures, so
        the old pool is shut down later, from another thread, and nothing is cancelled.
        """
        with self._lock:
            if self._executor is ex:
                self._executor = None
            else:
                return
        default_thread_pool().call_soon(lambda: ex.shutdown(wait=False))

    def _take_slot(self) -> int:
        with self._lock:
            return self._free.pop() if self._free else -1

    def _release_slot(self, slot: int) -> None:
        if slot < 0:
            return
        with self._lock:
            flags = self._flags
            if flags is not None:  # (made with the pool, before any slot is taken)
                flags[slot] = 0
            self._free.append(slot)

    def shutdown(self, wait: bool = True) -> None:
        """Stop the worker processes; later work completes with ``BackendError``.

        Remote calls still waiting for a worker complete with ``BackendError``; calls in the
        pool are cancelled if they have not started, and waited for (``wait=True``) if they
        have."""
        with self._lock:
            self._closed = True
            ex = self._executor
            self._executor = None
            queued = list(self._call_queue)
            self._call_queue.clear()
            flags, pids = self._call_flags, self._pids
            if flags is not None and pids is not None:  # calls in the pool not started yet
                free = set(self._call_slots)
                for slot in range(len(flags)):
                    if slot not in free and not pids[slot]:
                        flags[slot] = 1
        for call in queued:
            call.report(1, BackendError(f"{self!r} was shut down before the call ran"))
        if ex is not None:
            ex.shutdown(wait=wait, cancel_futures=True)

    def _close(self) -> None:
        self.shutdown(wait=True)

    # -- parallel_scheduler_backend (schedule and the shape check: RemoteBackend)

    def _bulk(self, n: int, r: bulk_item_receiver_proxy) -> None:
        """Bulk work of either form: chunks of ``[0, n)`` in the worker processes."""
        ex = self._get_executor()  # raises once shut down: the frontend reports it
        tok = r.try_query(get_stop_token)
        if tok is not None and tok.stop_requested():
            complete_soon(r.set_stopped)
            return
        if n == 0:
            complete_soon(r.set_value)
            return
        try:
            payload, reuse = self._payload(r)
        except UnpicklableWorkError as err:
            complete_soon(partial(r.set_error, err))
            return
        if n == 1 and tok is None:
            # One chunk, and nothing can ask it to stop (``sync_wait``): no stop flag, no
            # stop callback, no other chunk to cancel.
            try:
                fut = ex.submit(_run_chunk, payload, 0, 1, -1, reuse)
            except (BrokenProcessPool, RuntimeError) as exc:
                job = RemoteJob(r)
                job.remaining = 1
                self._submit_failed(ex, exc, job, [], 1)
                return
            fut.add_done_callback(partial(self._one_done, r, ex))
            return
        nchunks = min(n, 4 * self._max_workers)
        size = -(-n // nchunks)
        ranges = [(b, min(b + size, n)) for b in range(0, n, size)]
        slot = self._take_slot()
        job = RemoteJob(r)
        futures: list[_Result] = []
        flags = self._flags

        def stop_chunks() -> None:
            if slot >= 0 and flags is not None:
                flags[slot] = 1
            for f in futures:
                f.cancel()

        job.on_stop = stop_chunks
        job.on_finish = lambda: self._release_slot(slot)
        job.remaining = len(ranges)
        # Everything of ours is set up before the first submission: a submission wakes the
        # pool's threads, and the less this thread runs (holding the GIL) between that and
        # blocking, the sooner they run (it matters on a loaded machine).
        job.watch(tok)
        on_done = self._on_done
        for k, (b, e) in enumerate(ranges):
            cb = on_done(job, ex, b, e)
            try:
                fut = ex.submit(_run_chunk, payload, b, e, slot, reuse)
            except (BrokenProcessPool, RuntimeError) as exc:
                self._submit_failed(ex, exc, job, futures, len(ranges) - k)
                return
            futures.append(fut)
            fut.add_done_callback(cb)

    def _submit_died(
        self, ex: ProcessPoolExecutor, exc: BaseException, what: str
    ) -> WorkerDiedError:
        """``ex.submit`` of ``what`` raised ``exc``: a broken pool is marked so; the error to
        report, caused by ``exc``."""
        if isinstance(exc, BrokenProcessPool):
            self._broken(ex)
        died = WorkerDiedError(
            f"ProcessPoolBackend could not submit {what}: {exc} (a worker process died)"
        )
        died.__cause__ = exc
        return died

    def _submit_failed(
        self,
        ex: ProcessPoolExecutor,
        exc: BaseException,
        job: RemoteJob,
        futures: list[_Result],
        unsubmitted: int,
    ) -> None:
        """The pool broke (or was shut down) while we were submitting."""
        job.fail(self._submit_died(ex, exc, "a chunk"), stop_others=False)
        for f in futures:
            f.cancel()
        for _ in range(unsubmitted):
            job.chunk_done()  # the chunks never submitted; the last one completes

    def _payload(self, r: bulk_item_receiver_proxy) -> tuple[bytes, bool]:
        """The pickled work of ``r`` and whether a worker may reuse what it unpickled.

        Work without values whose function is a module-level function travels by
        reference (module and name): its bytes depend only on the function and the shape,
        so they are pickled once and kept (checked on each use: the module still binds
        that name to that function, or the work is pickled afresh), and a worker that has
        unpickled them may run the same object again (nothing in it changes).
        """
        work = r.remote_work()
        f = getattr(work, "f", None)
        if (
            type(work) is RemoteBulkWork
            and not work.vals
            and type(f) is FunctionType
            and _by_reference(f)
        ):
            key = (f, work.mode, work.shape, work.parallel)
            payload = self._payloads.get(key)
            if payload is not None:
                return payload, True
            try:
                payload = _dumps(work)
            except Exception:
                pass  # pickle_work below names the culprit
            else:
                if len(self._payloads) >= _CACHE_SIZE:
                    self._payloads.clear()
                self._payloads[key] = payload
                return payload, True
        return pickle_work(work, self._work_dumps, "ProcessPoolBackend", "cloudpickle"), False

    def _one_done(self, r: bulk_item_receiver_proxy, ex: ProcessPoolExecutor, fut: _Result) -> None:
        """The done callback of a bulk operation of one chunk without a stop token: a chunk
        that ran to the end with nothing to copy back completes ``r`` directly; any other
        outcome goes through :meth:`_on_done`."""
        try:
            done = fut.exception() is None and fut.result() is None
        except BaseException:
            done = False  # cancelled (shutdown): _on_done says so
        if done:
            complete(r, r.set_value)
            return
        job = RemoteJob(r)
        job.remaining = 1
        self._on_done(job, ex, 0, 1)(fut)

    def _on_done(
        self, job: RemoteJob, ex: ProcessPoolExecutor, b: int, e: int
    ) -> Callable[[_Result], None]:
        def on_done(fut: _Result) -> None:
            # Runs on the pool's manager thread, which swallows what a callback raises: the
            # chunk is counted as done whatever happens, or the operation would never end.
            try:
                try:
                    exc = fut.exception()
                except CancelledError:
                    job.stopped = True
                    return
                if exc is None:
                    res = fut.result()
                    if res is None:
                        return  # ran to the end, nothing to copy back
                    stopped, parts = pickle.loads(res)
                    if stopped:
                        job.stopped = True
                    else:
                        job.merge(b, e, parts)
                elif isinstance(exc, BrokenProcessPool):
                    self._broken(ex)
                    err = WorkerDiedError(
                        f"a worker process died while running chunk [{b}, {e}) of a bulk "
                        f"operation ({exc}); the pool has been replaced, so the next operation "
                        "runs normally. A worker dies when the bulk function (or a library it "
                        "calls) ends the process: os._exit, a crash, a signal, out of memory"
                    )
                    err.__cause__ = exc
                    # Every other chunk fails the same way; cancelling them now would race
                    # with the pool's own clean-up.
                    job.fail(err, stop_others=False)
                else:
                    job.fail(exc)
            except Exception as exc:
                failed = BackendError(
                    f"ProcessPoolBackend could not read the outcome of chunk [{b}, {e}) of a "
                    f"bulk operation: {type(exc).__name__}: {exc}"
                )
                failed.__cause__ = exc
                job.fail(failed)
            finally:
                job.chunk_done()

        return on_done

    # -- remote calls (then/upon_* on a remote scheduler)

    def _sx_submit_call(self, work: RemoteCallWork, op: RemoteThenOp) -> _PoolCall:
        """Send one remote call: pickle it now (``UnpicklableWorkError`` names what fails),
        then hand it to a free worker, or queue it until one is free.

        The round trip's hot path: everything of ours is done before the submission (which
        wakes the pool's threads, and the less this thread then runs holding the GIL, the
        sooner they run), and the call itself is the future's done callback."""
        if self._closed:
            raise BackendError(f"{self!r} has been shut down")
        stages = work.stages
        reuse = False
        data = work.data
        if work.kind == 0 and type(data) is tuple and not data and _fixed_stages(stages):
            # Pickled once per chain (the bytes cannot change), unpickled once per worker.
            reuse = True
            hit = self._call_payloads.get(id(stages))
            if hit is not None and hit[0] is stages:
                payload = hit[1]
            else:
                payload = _dumps(work)
                if len(self._call_payloads) >= _CACHE_SIZE:
                    self._call_payloads.clear()
                self._call_payloads[id(stages)] = (stages, payload)
        else:
            try:
                payload = _dumps(work)
            except Exception:
                payload = b"__main__"  # pickle_call below names the culprit, or cloudpickles
            if b"__main__" in payload:  # (see call_payload_dumps)
                payload = pickle_call(
                    work, call_payload_dumps, "ProcessPoolBackend", "cloudpickle"
                )
        with self._lock:
            if self._closed:
                raise BackendError(f"{self!r} has been shut down")
            ex = self._executor
            slot = self._call_slots.pop() if self._call_slots and ex is not None else -1
        if slot >= 0 and ex is not None:
            # A free worker and a running pool: submit first, then make the call (nothing
            # can reach it before it is returned; a future already done runs its callback
            # at once).
            try:
                fut = ex.submit(_run_call, payload, slot, reuse)
            except (BrokenProcessPool, RuntimeError) as exc:
                call = _PoolCall(self, payload, op, work)
                call.slot = slot
                call.state = 1
                self._submit_call_failed(call, ex, exc)
                return call
            call = _PoolCall(self, payload, op, work)
            call.slot = slot
            call.state = 1
            call.reuse = reuse
            call.ex = ex
            call.fut = fut
            fut.add_done_callback(call)  # _PoolCall.__call__
            return call
        call = _PoolCall(self, payload, op, work)
        call.reuse = reuse
        with self._lock:
            if self._closed:
                raise BackendError(f"{self!r} has been shut down")
            if not self._call_slots:
                self._call_queue.append(call)
                return call
            call.slot = self._call_slots.pop()
            call.state = 1
        self._send(call)
        return call

    def _send(self, call: _PoolCall) -> None:
        """Submit a call that holds a slot to the pool (made if need be)."""
        try:
            ex = self._get_executor()
        except RuntimeError as exc:
            self._call_finished(call, None)
            call.report(1, BackendError(f"{self!r} cannot run the call: {exc}"))
            return
        call.ex = ex
        try:
            fut = ex.submit(_run_call, call.payload, call.slot, call.reuse)
        except (BrokenProcessPool, RuntimeError) as exc:
            self._submit_call_failed(call, ex, exc)
            return
        call.fut = fut
        fut.add_done_callback(call)  # _PoolCall.__call__

    def _submit_call_failed(
        self, call: _PoolCall, ex: ProcessPoolExecutor, exc: BaseException
    ) -> None:
        died = self._submit_died(ex, exc, "the call")
        self._call_finished(call, None)
        call.report(1, died)

    def _call_finished(self, call: _PoolCall, ex: ProcessPoolExecutor | None) -> None:
        """Give the call's slot to the next queued call (sent at once) or free it."""
        slot = call.slot
        call.slot = -1
        call.state = 2
        if slot < 0:
            return
        with self._lock:
            pids, cflags = self._pids, self._call_flags
            if pids is not None and cflags is not None:
                pids[slot] = 0
                cflags[slot] = 0
            nxt = self._call_queue.popleft() if self._call_queue else None
            if nxt is not None:
                nxt.slot = slot
                nxt.state = 1
            else:
                self._call_slots.append(slot)
        if nxt is not None:
            if ex is not None and self._executor is ex:
                self._send(nxt)
            else:  # the pool broke: a new one is made on another thread than its manager
                default_thread_pool().call_soon(partial(self._send, nxt))

    def _call_done(self, call: _PoolCall, ex: ProcessPoolExecutor, fut: _Result) -> None:
        # On the pool's manager thread. (The future keeps its done callback, the call:
        # forget the future, or the two would form a cycle.)
        call.fut = None
        call.ex = None
        kind: int
        data: object
        try:
            exc = fut.exception()
        except CancelledError:
            kind, data = 2, None
        else:
            if exc is None:
                res = fut.result()
                kind, data = (0, res) if res is not None else (2, None)  # None: cancelled
            elif isinstance(exc, BrokenProcessPool):
                self._broken(ex)
                died = WorkerDiedError(
                    f"a worker process died while running {call.describe()} ({exc}); the pool "
                    "has been replaced, so the next call runs normally. A worker dies when the "
                    "function (or a library it calls) ends the process: os._exit, a crash, a "
                    "signal, out of memory"
                )
                died.__cause__ = exc
                kind, data = 1, died
            else:
                kind, data = 1, exc
        if kind == 2 and self._closed:
            kind, data = 1, BackendError(f"{self!r} was shut down before the call ran")
        self._call_finished(call, ex)
        call.report(kind, data)

    def _cancel_call(self, call: _PoolCall) -> None:
        with self._lock:
            if call.state != 0:
                queued = False
                if call.state == 1 and call.slot >= 0 and self._call_flags is not None:
                    self._call_flags[call.slot] = 1  # not started yet: it will not run
            else:
                try:
                    self._call_queue.remove(call)
                except ValueError:
                    return
                call.state = 2
                queued = True
        if queued:
            call.report(2, None)
            return
        fut = call.fut
        if fut is not None:
            fut.cancel()  # succeeds only while the pool has not handed it to a worker

    def _call_where(self, call: _PoolCall) -> str:
        if call.state == 0:
            with self._lock:
                try:
                    ahead = self._call_queue.index(call)
                except ValueError:
                    ahead = -1
            if ahead >= 0:
                return f"queued in {self!r} ({ahead} calls ahead), waiting for a worker"
        if call.state == 1:
            slot = call.slot
            pids = self._pids
            pid = pids[slot] if pids is not None and 0 <= slot < len(pids) else 0
            if pid:
                return f"running on worker process {pid} of {self!r}"
            return f"in the pool of {self!r}, waiting for a worker process"
        return f"finishing in {self!r}"

    def __repr__(self) -> str:
        return f"<ProcessPoolBackend max_workers={self._max_workers}>"


class _PoolCall(RemoteCall):
    """One remote call on a :class:`ProcessPoolBackend`; called with its future when that
    is done (its done callback)."""

    __slots__ = ("ex", "fut", "reuse", "slot", "state")
    backend: ProcessPoolBackend

    def __init__(
        self, backend: ProcessPoolBackend, payload: bytes, op: RemoteThenOp, work: RemoteCallWork
    ) -> None:
        super().__init__(backend, payload, op, work)
        self.fut: _Result | None = None
        #: The pool it was submitted to (while it is there).
        self.ex: ProcessPoolExecutor | None = None
        self.slot = -1
        #: 0 queued here, 1 in the pool, 2 finished
        self.state = 0
        #: A worker may run again what it unpickled for the same payload (_fixed_stages).
        self.reuse = False

    def __call__(self, fut: _Result) -> None:
        """The future's done callback, on the pool's manager thread: the round trip's hot
        path, so a call that returned values is reported here without more frames."""
        ex = self.ex
        if ex is None:  # (never: set before the submission)
            return
        backend = self.backend
        # A done future's outcome read directly (``result()`` and ``exception()`` each take
        # its condition's lock): a finished call that returned values, on a backend still
        # open, takes this path; every other outcome goes through _call_done.
        res = fut._result if getattr(fut, "_state", None) == _FINISHED else None
        if res is None or getattr(fut, "_exception", True) is not None or backend._closed:
            backend._call_done(self, ex, fut)
            return
        self.fut = None  # (the future keeps this callback: no cycle)
        self.ex = None
        backend._call_finished(self, ex)
        self.report(0, res)

    def cancel(self) -> None:
        self.backend._cancel_call(self)

    def where(self) -> str:
        return str(self.backend._call_where(self))
