"""``DaskBackend``: bulk work on a dask.distributed cluster ([exec.sysctxrepl.psb]).

``distributed`` is imported only when a ``DaskBackend`` is created, so that
``import structexec.backends`` works without the ``dask`` extra.
"""

from __future__ import annotations

import concurrent.futures
import importlib
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from functools import partial
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

from .._core._queries import get_stop_token
from ._common import (
    BackendError,
    ClusterError,
    UnpicklableWorkError,
    WorkerDiedError,
    call_payload_dumps,
    dumps_or_cloudpickle,
    pickle_call,
    pickle_work,
    run_call_remotely,
    run_chunk_remotely,
)
from ._remote import RemoteBackend, RemoteCall, RemoteJob, complete_soon

if TYPE_CHECKING:
    from typing import TypeAlias

    from .._parallel._remote_call import RemoteThenOp
    from .._parallel._remote_work import RemoteCallWork
    from .._parallel._replacement_api import bulk_item_receiver_proxy

    #: Where each chunk's future came from: ``[b, e)`` by the future's key.
    _Ranges = Mapping[object, tuple[object, object]]
    #: ``distributed.Client`` and ``distributed.Future``: their methods are not annotated
    #: (``mypy --strict`` rejects calls to them), so they are used dynamically, under these
    #: names.
    Client: TypeAlias = Any
    Future: TypeAlias = Any

__all__ = ["DaskBackend"]

#: Seconds between two checks of the stop flag inside a running chunk (each is a round trip
#: to the scheduler, about 0.3 ms on a local cluster).
STOP_POLL_INTERVAL = 0.05
#: Above this many bytes of pickled work per operation, the work is scattered to the cluster
#: once instead of travelling inside every task.
SCATTER_THRESHOLD = 1 << 20


# --------------------------------------------------------------------------- worker side


def _dask_chunk(payload: bytes, b: int, e: int, flag: str | None) -> bytes:
    """Runs on a dask worker: unpickle the work, run one chunk ``[b, e)``, return the
    pickled ``(stopped, parts)``.

    The results are pickled here, so that results that cannot be pickled fail the chunk
    with an :class:`UnpicklableWorkError` naming the element (instead of failing later in
    dask's transfer, where it looks like a lost cluster), and a ``BaseException`` of the
    function becomes an error (instead of killing the worker thread or process, which hangs
    an in-process cluster and makes dask retry the chunk on every worker): see
    :func:`run_chunk_remotely`.
    """
    cloudpickle: Any = importlib.import_module("cloudpickle")
    should_stop: Callable[[], bool] | None = None
    if flag is not None:
        event: Any = importlib.import_module("distributed").Event(flag)
        if event.is_set():
            return bytes(cloudpickle.dumps((True, ())))
        last = time.monotonic()

        def should_stop() -> bool:
            nonlocal last
            now = time.monotonic()
            if now - last < STOP_POLL_INTERVAL:
                return False
            last = now
            return bool(event.is_set())

    work = cloudpickle.loads(payload)
    blob = run_chunk_remotely(
        work, b, e, should_stop, cloudpickle.dumps, cloudpickle.loads, "DaskBackend",
        "cloudpickle",
    )
    return cast(bytes, blob)  # never None without none_if_done


#: Keys of calls a stop request cancelled, in this worker process (see ``_cancel_batch``).
_cancelled_calls: set[str] = set()
_CANCELLED_CAP = 100_000


def _dask_call(payload: bytes, key: str) -> bytes | None:
    """Runs on a dask worker: run a pickled ``RemoteCallWork`` (see
    :func:`run_call_remotely`); the values come back pickled, so that values that cannot be
    pickled fail here with a clear error. A call whose key a stop request cancelled returns
    ``None`` without running (the scheduler may learn of a task after its cancellation: it
    reads submissions in the background)."""
    if key in _cancelled_calls:
        _cancelled_calls.discard(key)
        return None
    cloudpickle: Any = importlib.import_module("cloudpickle")
    return run_call_remotely(payload, cloudpickle.loads, dumps_or_cloudpickle, "DaskBackend")


def _forget_calls(keys: list[str]) -> None:
    """Runs on every dask worker: remember keys of cancelled calls (see :func:`_dask_call`)."""
    if len(_cancelled_calls) > _CANCELLED_CAP:
        _cancelled_calls.clear()
    _cancelled_calls.update(keys)


# --------------------------------------------------------------------------- the backend


class DaskBackend(RemoteBackend):
    """Runs bulk work, and ``then``/``upon_*`` functions, on a dask.distributed cluster
    (``pip install structexec[dask]``).

    ``DaskBackend(client_or_address, *, chunks_per_thread=4)``: ``client_or_address`` is a
    ``distributed.Client``, a cluster object (``LocalCluster``, a dask-jobqueue or
    dask-kubernetes cluster: anything with ``scheduler_address``), or a scheduler address such
    as ``"tcp://127.0.0.1:8786"``. For a cluster or an address the backend creates (and
    :meth:`close` closes) its own client; connecting blocks, so create the backend before
    entering trio or through ``trio.to_thread.run_sync``. Then
    ``sx.set_parallel_scheduler_backend(lambda: backend)`` points every parallel scheduler
    at the cluster; nothing else in the program changes.

    * ``schedule(r, s)`` stays local: it runs on the process-wide thread pool.
    * ``schedule_bulk_chunked``/``schedule_bulk_unchunked``: on the backend's control
      thread (so the caller, for instance the trio thread, never blocks on the network), the
      work (function and values) is pickled with cloudpickle; if that fails the operation
      completes with :class:`UnpicklableWorkError` naming the object, before any chunk runs.
      Functions defined in ``__main__`` or in a notebook travel by value; functions from a
      module must be importable on the workers. The range is cut into
      ``min(n, chunks_per_thread * total worker threads)`` chunks (dask costs about a
      millisecond per task, so chunks should be big), submitted with ``client.map``; work
      bigger than 1 MiB is scattered once rather than shipped with every task.
    * Results come back as on :class:`ProcessPoolBackend`: elements ``[b, e)`` of lists,
      ``bytearray``/``array.array`` and numpy arrays with at least ``shape`` elements are
      copied into the parent's objects once every chunk has finished (fetched with one
      ``gather`` on the client's callback thread); the operation then completes on the
      process-wide thread pool.
    * Errors keep their original type (dask re-raises the chunk's exception, with its remote
      traceback); the operation completes ``set_error`` with the first one once every chunk
      has returned. When the consumer can be stopped, the first error also stops the other
      chunks the way a stop request does (below); otherwise they run to the end.
    * Stop: dask cannot interrupt a running task, so a stop request sets a
      ``distributed.Event`` that queued chunks check before they start (they then return at
      once) and running per-index chunks check every 50 ms; the operation completes
      ``set_stopped()`` after every chunk has returned. The event is only created for
      consumers that can be stopped.
    * Results that cannot be pickled on the way back (an element the function stored in a
      list that is copied back) complete the operation with :class:`UnpicklableWorkError`
      naming the element. A ``KeyboardInterrupt``/``SystemExit`` raised by the function on
      a worker completes it with :class:`BackendError` (it neither kills the worker nor
      interrupts this program); an exception that cannot be pickled back likewise.
    * ``then``/``upon_error``/``upon_stopped`` functions that run on the scheduler are sent
      to the cluster as one task per chain of stages (the parallel guide "Running any
      function remotely"), pickled first (pickle, else cloudpickle: ``UnpicklableWorkError``
      names what fails); results of finished calls are fetched together, one ``gather`` per
      batch, on the control thread. A stop request cancels the call's task
      (``client.cancel``, batched) and tells the workers its key, so that a queued call never
      runs; dask cannot stop a running task, so a running call is abandoned: the operation
      completes ``set_stopped()`` and the task's result is dropped. A call whose workers keep
      dying is rerun by dask, then fails with :class:`WorkerDiedError`.
      ``sx.operation_tree()`` shows ``running on dask worker <address>`` (asking the
      scheduler at most twice a second) or ``queued on the dask cluster``.
    * A cluster that goes away (the scheduler dies, the client is closed) completes the
      operation with :class:`ClusterError` saying what dask reported; nothing hangs. A
      worker that dies mid-chunk is dask's business: it reruns the chunk elsewhere and
      gives up after a few attempts (``distributed.scheduler.allowed-failures``); the
      operation then completes with :class:`WorkerDiedError` (``__cause__``: dask's
      ``KilledWorker``).

    ``close()`` closes the client if the backend created it, and stops the control thread;
    the backend is also a context manager.
    """

    def __init__(self, client_or_address: object, *, chunks_per_thread: int = 4) -> None:
        try:
            cloudpickle: Any = importlib.import_module("cloudpickle")
            distributed: Any = importlib.import_module("distributed")
        except ImportError as exc:  # pragma: no cover - depends on the installation
            raise ImportError(
                "DaskBackend needs dask.distributed: pip install 'structexec[dask]'"
            ) from exc
        if isinstance(chunks_per_thread, bool) or not isinstance(chunks_per_thread, int):
            raise TypeError(
                "DaskBackend(chunks_per_thread): expected an int, got "
                f"{type(chunks_per_thread).__name__}"
            )
        if chunks_per_thread < 1:
            raise ValueError(
                f"DaskBackend(chunks_per_thread): must be >= 1, got {chunks_per_thread}"
            )
        self._distributed: ModuleType = distributed
        self._dumps: Callable[[object], bytes] = cloudpickle.dumps
        self._loads: Callable[[bytes], Any] = cloudpickle.loads
        c = client_or_address
        if isinstance(c, distributed.Client):
            self._client: Client = c
            self._owns_client = False
        elif isinstance(c, str) or hasattr(c, "scheduler_address"):
            self._client = distributed.Client(c, set_as_default=False)
            self._owns_client = True
        else:
            raise TypeError(
                "DaskBackend() needs a distributed.Client, a cluster or a scheduler address "
                f"such as 'tcp://127.0.0.1:8786', got {type(c).__name__}"
            )
        self._chunks_per_thread = chunks_per_thread
        self._control_lock = threading.Lock()
        self._control: concurrent.futures.ThreadPoolExecutor | None = None
        self._closed = False
        self._threads = self._total_threads()
        #: Remote calls whose result is on the cluster, fetched together by one gather on
        #: the control thread; calls a stop request cancels, cancelled together likewise.
        self._calls_lock = threading.Lock()
        self._ready: list[tuple[_DaskCall, Future]] = []
        self._to_cancel: list[_DaskCall] = []
        self._processing: tuple[float, dict[str, str]] = (0.0, {})

    @property
    def client(self) -> Client:
        """The ``distributed.Client`` the backend submits to."""
        return self._client

    def _total_threads(self) -> int:
        # The client refreshes its cached scheduler identity periodically; use it when it
        # has the totals, else ask the scheduler once (a blocking round trip).
        info = getattr(self._client, "_scheduler_identity", None) or {}
        t = info.get("total_threads") if hasattr(info, "get") else None
        if not t:
            try:
                t = sum(self._client.nthreads().values())
            except Exception:
                t = 0
        return max(1, int(t or 1))

    def _threads_now(self) -> int:
        info = getattr(self._client, "_scheduler_identity", None) or {}
        t = info.get("total_threads") if hasattr(info, "get") else None
        if t:
            self._threads = int(t)
        return self._threads

    def _control_submit(self, fn: Callable[[], object]) -> None:
        with self._control_lock:
            if self._closed:
                raise RuntimeError(f"{self!r} has been closed")
            ex = self._control
            if ex is None:
                ex = self._control = concurrent.futures.ThreadPoolExecutor(
                    1, thread_name_prefix="structexec-dask-control"
                )
        ex.submit(fn)

    def close(self) -> None:
        """Stop the control thread and close the client if this backend created it."""
        with self._control_lock:
            self._closed = True
            ex = self._control
            self._control = None
        if ex is not None:
            ex.shutdown(wait=True)
        if self._owns_client:
            self._client.close()

    def _close(self) -> None:
        self.close()

    # -- parallel_scheduler_backend (schedule and the shape check: RemoteBackend)

    def _bulk(self, n: int, r: bulk_item_receiver_proxy) -> None:
        """Bulk work of either form: chunks of ``[0, n)`` as dask tasks."""
        self._control_submit(lambda: self._dispatch(n, r))

    def _dispatch(self, n: int, r: bulk_item_receiver_proxy) -> None:
        """On the control thread: check, pickle and submit the chunks of one operation."""
        try:
            self._dispatch_unguarded(n, r)
        except BaseException as exc:  # a bug here must not leave the operation hanging
            err = ClusterError(f"DaskBackend failed to submit the bulk work: {exc!r}")
            err.__cause__ = exc
            complete_soon(partial(r.set_error, err))
            if not isinstance(exc, Exception):
                raise

    def _dispatch_unguarded(self, n: int, r: bulk_item_receiver_proxy) -> None:
        tok = r.try_query(get_stop_token)
        if tok is not None and tok.stop_requested():
            complete_soon(r.set_stopped)
            return
        if n == 0:
            complete_soon(r.set_value)
            return
        try:
            payload = pickle_work(r.remote_work(), self._dumps, "DaskBackend", "cloudpickle")
        except UnpicklableWorkError as unpicklable:
            complete_soon(partial(r.set_error, unpicklable))
            return
        client = self._client
        if client.status not in ("running", "connecting", "newly-created"):
            err = ClusterError(
                f"DaskBackend cannot run the bulk work: the dask client is {client.status} "
                "(the cluster went away or the client was closed)"
            )
            complete_soon(partial(r.set_error, err))
            return
        nchunks = min(n, self._chunks_per_thread * self._threads_now())
        size = -(-n // nchunks)
        bs = list(range(0, n, size))
        es = [min(b + size, n) for b in bs]
        k = len(bs)
        flag = f"structexec-stop-{uuid.uuid4().hex}" if tok is not None else None
        job = RemoteJob(r)
        scattered: Future | None = None
        data: bytes | Future = payload
        try:
            if len(payload) > SCATTER_THRESHOLD:
                scattered = client.scatter(payload, hash=False)
                data = scattered
            futures = client.map(
                _dask_chunk,
                [data] * k,
                bs,
                es,
                [flag] * k,
                pure=False,
                key=[f"structexec-bulk-{uuid.uuid4().hex}-{i}" for i in range(k)],
            )
        except Exception as exc:
            failed = ClusterError(
                f"DaskBackend could not submit the bulk work ({type(exc).__name__}: {exc}); "
                "the cluster went away or the client was closed"
            )
            failed.__cause__ = exc
            complete_soon(partial(r.set_error, failed))
            return
        event_set = False

        def stop_chunks() -> None:
            nonlocal event_set
            if flag is not None:
                event_set = True
                try:
                    self._control_submit(lambda: self._set_event(flag))
                except RuntimeError:
                    pass

        def release() -> None:
            if flag is not None and event_set:
                try:
                    self._control_submit(lambda: self._clear_event(flag))
                except RuntimeError:
                    pass
            if scattered is not None:
                scattered.release()

        finished: list[Future] = []
        ranges = {fut.key: (b, e) for fut, b, e in zip(futures, bs, es)}
        job.on_stop = stop_chunks
        job.on_finish = release
        job.collect = lambda: self._collect(job, finished, ranges)
        job.remaining = k
        job.watch(tok)
        on_done = self._on_done(job, finished, ranges)
        for fut in futures:
            fut.add_done_callback(on_done)

    def _set_event(self, flag: str) -> None:
        try:
            self._distributed.Event(flag, client=self._client).set()
        except Exception:
            pass  # the cluster is gone: the chunks' futures will report it

    def _clear_event(self, flag: str) -> None:
        try:
            self._distributed.Event(flag, client=self._client).clear()
        except Exception:
            pass

    def _chunk_error(
        self, fut: Future, ranges: _Ranges, call: _DaskCall | None = None
    ) -> BaseException:
        """The error of a failed chunk: the function's own, or what dask says went wrong."""
        exc: BaseException = fut.exception()
        if isinstance(exc, self._distributed.KilledWorker):
            b, e = ranges.get(fut.key, ("?", "?"))
            what = call.describe() if call else f"chunk [{b}, {e}) of a bulk operation"
            died = WorkerDiedError(
                f"dask workers died while running {what} on "
                f"{self!r}, and dask gave up on it ({type(exc).__name__}: {exc}). A worker "
                "dies when the bulk function (or a library it calls) ends the process: "
                "os._exit, a crash, a signal, out of memory; the workers' logs say which"
            )
            died.__cause__ = exc
            return died
        return exc

    def _on_done(
        self, job: RemoteJob, finished: list[Future], ranges: _Ranges
    ) -> Callable[[Future], None]:
        def on_done(fut: Future) -> None:
            # Runs on the client's callback thread. Results are fetched all at once when the
            # last chunk has finished (one round trip instead of one per chunk); an error is
            # fetched at once, to stop the other chunks early.
            try:
                status = fut.status
                if status == "finished":
                    with job.lock:
                        finished.append(fut)
                elif status == "error":
                    job.fail(self._chunk_error(fut, ranges))
                elif job.stop_requested and job.error is None:
                    job.stopped = True
                elif status == "lost" and self._client.status == "running":
                    # The worker that held the chunk (or its result) died, while the cluster
                    # is up: the same failure as KilledWorker, reported the same way.
                    job.fail(self._worker_lost(fut, ranges))
                else:
                    job.fail(self._lost(fut, status))
            except Exception as exc:
                job.fail(self._lost(fut, "unavailable", exc))
            finally:
                job.chunk_done()

        return on_done

    def _collect(
        self, job: RemoteJob, finished: list[Future], ranges: dict[object, tuple[int, int]]
    ) -> None:
        """Fetch the results of the finished chunks and merge them (before the completion)."""
        if job.error is not None or not finished:
            return
        try:
            results = self._client.gather(finished)
        except Exception as exc:
            job.fail(self._lost(finished[0], "unavailable", exc), stop_others=False)
            return
        for fut, blob in zip(finished, results):
            b, e = ranges[fut.key]
            try:
                stopped, parts = self._loads(blob)
            except Exception as exc:
                unreadable = UnpicklableWorkError(
                    f"DaskBackend cannot read the results of chunk [{b}, {e}) of a bulk "
                    f"operation in this process ({type(exc).__name__}: {exc}); the values "
                    "copied back must be importable here as well as on the workers"
                )
                unreadable.__cause__ = exc
                job.fail(unreadable, stop_others=False)
                continue
            if stopped:
                job.stopped = True
            else:
                job.merge(b, e, parts)
        finished.clear()  # release the keys on the cluster now

    def _worker_lost(self, fut: Future, ranges: _Ranges) -> WorkerDiedError:
        b, e = ranges.get(fut.key, ("?", "?"))
        return WorkerDiedError(
            f"dask workers died while running chunk [{b}, {e}) of a bulk operation on "
            f"{self!r}: the worker that held the chunk or its result is gone (dask reported "
            "the future lost). A worker dies when the bulk function (or a library it calls) "
            "ends the process: os._exit, a crash, a signal, out of memory; the workers' logs "
            "say which"
        )

    def _lost(self, fut: Future, status: str, exc: BaseException | None = None) -> ClusterError:
        reason = ""
        state_exc = getattr(getattr(fut, "_state", None), "exception", None)
        if exc is None and state_exc is not None:
            exc = state_exc
        if exc is not None:
            reason = f": {type(exc).__name__}: {exc}"
        client_status = self._client.status
        if client_status == "running":
            # The client is connected: do not blame the cluster for what dask reported.
            why = "dask could not deliver it although the client is still connected"
        else:
            why = "the cluster went away or the client was closed"
        err = ClusterError(
            f"a chunk of a bulk operation on {self!r} was {status}{reason} "
            f"(client status: {client_status}); {why}"
        )
        err.__cause__ = exc
        return err

    # -- remote calls (then/upon_* on a remote scheduler)

    def _sx_submit_call(self, work: RemoteCallWork, op: RemoteThenOp) -> _DaskCall:
        """Send one remote call as a dask task: pickle it now (``UnpicklableWorkError`` names
        what fails), submit it (this does not block: the client's own thread sends it)."""
        if self._closed:
            raise BackendError(f"{self!r} has been closed")
        payload = pickle_call(work, call_payload_dumps, "DaskBackend", "cloudpickle")
        client = self._client
        if client.status not in ("running", "connecting", "newly-created"):
            raise ClusterError(
                f"DaskBackend cannot run the call: the dask client is {client.status} "
                "(the cluster went away or the client was closed)"
            )
        call = _DaskCall(self, payload, op, work)
        key = f"structexec-call-{uuid.uuid4().hex}"
        try:
            fut = client.submit(_dask_call, payload, key, key=key, pure=False)
        except Exception as exc:
            failed = ClusterError(
                f"DaskBackend could not submit the call ({type(exc).__name__}: {exc}); the "
                "cluster went away or the client was closed"
            )
            failed.__cause__ = exc
            raise failed from None
        call.fut = fut
        call.key = key
        call.payload = b""
        fut.add_done_callback(partial(self._call_done, call))
        return call

    def _call_done(self, call: _DaskCall, fut: Future) -> None:
        # On the client's callback thread.
        try:
            status = fut.status
            if status == "finished":
                with self._calls_lock:
                    self._ready.append((call, fut))
                    first = len(self._ready) == 1
                if first:
                    self._control_submit(self._gather_ready)
                return
            call.fut = None  # release the key on the cluster (the future is ``fut``)
            if status == "error":
                call.report(1, self._chunk_error(fut, {fut.key: ("the call", "")}, call))
            elif status == "cancelled" and call.cancelled:
                pass  # reported by _cancel_batch, once the workers know
            elif status == "lost" and self._client.status == "running":
                call.report(1, self._call_lost(call))
            else:
                call.report(1, self._lost(fut, status))
        except Exception as exc:
            call.report(1, self._lost(fut, "unavailable", exc))

    def _gather_ready(self) -> None:
        """On the control thread: fetch the results of every finished call in one gather."""
        with self._calls_lock:
            batch, self._ready = self._ready, []
        if not batch:
            return
        try:
            results = self._client.gather([f for _, f in batch], errors="skip")
        except Exception as exc:
            for call, fut in batch:
                call.report(1, self._lost(fut, "unavailable", exc))
            return
        if len(results) != len(batch):  # some were lost meanwhile: fetch one by one
            for call, fut in batch:
                try:
                    call.report(0, fut.result())
                except Exception as exc:
                    call.report(1, self._lost(fut, "unavailable", exc))
            return
        for (call, _), blob in zip(batch, results):
            call.fut = None  # release the key on the cluster
            call.report(0, blob)

    def _cancel_call(self, call: _DaskCall) -> None:
        """A stop request: cancel the call's task on the cluster (batched, on the control
        thread); dask then reports the future cancelled, queued or running."""
        if call.fut is None:
            return
        call.cancelled = True
        with self._calls_lock:
            self._to_cancel.append(call)
            first = len(self._to_cancel) == 1
        if first:
            try:
                self._control_submit(self._cancel_batch)
            except RuntimeError:
                pass

    def _cancel_batch(self) -> None:
        """On the control thread: cancel the tasks of stopped calls. The scheduler reads
        submissions in the background, so a task may reach it after its cancellation: every
        worker is also told the keys (a task that starts anyway returns at once without
        running the call), and the cancellation is repeated once they know."""
        with self._calls_lock:
            batch, self._to_cancel = self._to_cancel, []
        if batch:
            try:
                client = self._client
                futs = [c.fut for c in batch if c.fut is not None]
                client.cancel(futs)
                client.run(_forget_calls, [c.key for c in batch])
                client.cancel(futs)
                del futs
            except Exception:
                pass  # the cluster is gone: nothing will run the calls
            for call in batch:
                call.fut = None
                call.report(2, None)

    def _call_where(self, call: _DaskCall) -> str:
        key = call.key
        when, proc = self._processing
        now = time.monotonic()
        if now - when > 0.5:
            proc = {}
            try:
                got = self._client.sync(self._client.scheduler.processing, callback_timeout=2)
                for addr, keys in (got or {}).items():
                    for k in keys:
                        proc[str(k)] = addr
            except Exception:
                pass
            self._processing = (now, proc)
        addr = proc.get(str(key))
        if addr is not None:
            return f"running on dask worker {addr} (task {key})"
        return f"queued on the dask cluster of {self!r} (task {key})"

    def _call_lost(self, call: _DaskCall) -> WorkerDiedError:
        return WorkerDiedError(
            f"dask workers died while running {call.describe()} on {self!r}: the worker that "
            "held the call or its result is gone (dask reported the future lost). A worker "
            "dies when the function (or a library it calls) ends the process: os._exit, a "
            "crash, a signal, out of memory; the workers' logs say which"
        )

    def __repr__(self) -> str:
        addr = getattr(getattr(self._client, "scheduler", None), "address", None)
        return f"<DaskBackend {addr or self._client!r}>"


class _DaskCall(RemoteCall):
    """One remote call on a :class:`DaskBackend` (a dask task)."""

    __slots__ = ("cancelled", "fut", "key")
    backend: DaskBackend

    def __init__(
        self, backend: DaskBackend, payload: bytes, op: RemoteThenOp, work: RemoteCallWork
    ) -> None:
        super().__init__(backend, payload, op, work)
        self.fut: Future | None = None
        self.key = ""
        self.cancelled = False

    def cancel(self) -> None:
        self.backend._cancel_call(self)

    def where(self) -> str:
        return str(self.backend._call_where(self))
