"""The parallel scheduler and its backends ([exec.par.scheduler], [exec.sysctxrepl],
docs/parallel.md).

* bulk over GIL-releasing work (``hashlib.sha256`` over 8 blocks of 4 MiB) on the default
  backend against the same ``bulk`` with ``seq`` (sequential, on the calling thread): the
  parallel run must take at most 1/1.5 of the time (``<=0.667x``) on a 2-core machine;
* a ``schedule()`` round trip on the default backend (connect and start ``schedule(sch)``,
  block on a lock that the completion releases: the same steps as ``submit(noop).result()``)
  against ``concurrent.futures.ThreadPoolExecutor.submit(noop).result()`` with as many
  threads: at most 1.5x; and, for information, the same through ``sync_wait``, which adds
  the consumer's own cost (a private ``run_loop`` and its condition variable);
* ``bulk_chunked`` of 10,000 trivial items on ``DaskBackend`` (a local cluster: two
  single-threaded workers, TCP on 127.0.0.1) against the same chunks submitted with
  ``client.map`` and gathered directly: at most 1.2x the time (at least 0.833x the
  throughput). Both sides send the results of each chunk back to this process and write
  them into one list;
* a ``ProcessPoolBackend`` round trip (``sync_wait(schedule(sch) | bulk(par, 1, f))``, two
  workers) against a bare ``ProcessPoolExecutor(2).submit(f, 0).result()`` with the same start
  method: at most 1.2x; for information the same from trio (``await``) against
  ``trio_parallel.run_sync`` and against loky's reusable executor (rows n/a without them).
"""

from __future__ import annotations

import atexit
import gc
import hashlib
import os
import statistics
import threading
import time
from typing import Any

import structexec as sx
from _harness import Bench, Pair, row

# --------------------------------------------------------------------------- GIL-releasing bulk

_BLOCKS: list[bytes] | None = None


def _blocks() -> list[bytes]:
    global _BLOCKS
    if _BLOCKS is None:
        _BLOCKS = [bytes([i]) * (4 << 20) for i in range(8)]
    return _BLOCKS


def _hash_block(i: int, blocks: list[bytes], out: list[bytes]) -> None:
    out[i] = hashlib.sha256(blocks[i]).digest()


def _time_bulk(first: Any, policy: Any) -> float:
    blocks = _blocks()
    out: list[bytes] = [b""] * 8
    t0 = time.perf_counter()
    sx.sync_wait(first | sx.then(lambda: sx.values(blocks, out)) | sx.bulk(policy, 8, _hash_block))
    return time.perf_counter() - t0


@row(
    metric="bulk sha256 8x4MiB, default backend, vs bulk(seq)",
    unit="ms/op",
    better="lower",
    target=round(1 / 1.5, 3),
    note="target: at least 1.5x faster than seq on 2 cores",
)
def bulk_sha256(b: Bench) -> Pair:
    sch = sx.get_parallel_scheduler()
    par_times, seq_times = [], []
    _time_bulk(sx.schedule(sch), sx.par)  # warm up the pool
    for _ in range(3 if b.quick else 7):
        seq_times.append(_time_bulk(sx.just(), sx.seq))
        par_times.append(_time_bulk(sx.schedule(sch), sx.par))
    return statistics.median(par_times), statistics.median(seq_times)


# --------------------------------------------------------------------------- schedule round trip


class _Waiter:
    """The leanest blocking consumer: a receiver that releases a lock (like Future.result)."""

    __slots__ = ("lock",)

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.lock.acquire()

    def set_value(self) -> None:
        self.lock.release()

    def set_error(self, err: object) -> None:
        self.lock.release()

    def set_stopped(self) -> None:
        self.lock.release()


def _round_trips(b: Bench, consumer: str) -> Pair:
    import concurrent.futures

    sch = sx.get_parallel_scheduler()
    workers = os.cpu_count() or 1
    n = b.n(5_000, 500)
    block = max(50, n // 10)
    s = sx.schedule(sch)

    def via_connect() -> None:
        w = _Waiter()
        sx.connect(s, w).start()
        w.lock.acquire()

    def via_sync_wait() -> None:
        sx.sync_wait(s)

    ours_fn = via_connect if consumer == "connect" else via_sync_wait

    def noop() -> None:
        pass

    ours = theirs = 0.0
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        for _ in range(100):  # warm up both pools
            ours_fn()
            pool.submit(noop).result()
        # Interleave blocks of both, so that load from elsewhere hits both sides alike.
        for _ in range(n // block):
            t0 = time.perf_counter()
            for _ in range(block):
                ours_fn()
            t1 = time.perf_counter()
            for _ in range(block):
                pool.submit(noop).result()
            t2 = time.perf_counter()
            ours += t1 - t0
            theirs += t2 - t1
    count = (n // block) * block
    return ours / count, theirs / count


@row(
    metric="schedule() round trip, default backend, vs ThreadPoolExecutor submit().result()",
    unit="us/op",
    better="lower",
    target=1.5,
)
def schedule_round_trip(b: Bench) -> Pair:
    return _round_trips(b, "connect")


@row(
    metric="sync_wait(schedule(sch)), default backend, vs ThreadPoolExecutor submit().result()",
    unit="us/op",
    note="informational: adds sync_wait's own cost (a private run_loop) to the round trip",
)
def schedule_round_trip_sync_wait(b: Bench) -> Pair:
    return _round_trips(b, "sync_wait")


# ------------------------------------------------------------------- process pool round trip

_PROC: dict[str, Any] = {}


def _proc_noop(i: int) -> None:
    pass


def _proc() -> dict[str, Any]:
    """One ProcessPoolBackend and one bare ProcessPoolExecutor, same size and start method."""
    if _PROC:
        return _PROC
    import concurrent.futures

    from structexec.backends import ProcessPoolBackend
    from structexec.backends._process_pool import _default_context

    workers = min(2, os.cpu_count() or 1)
    backend = ProcessPoolBackend(workers)
    pool = concurrent.futures.ProcessPoolExecutor(workers, mp_context=_default_context())
    _PROC.update(backend=backend, pool=pool, sch=sx.parallel_scheduler(backend))

    def close() -> None:
        backend.shutdown()
        pool.shutdown()

    atexit.register(close)
    return _PROC


def _interleaved(b: Bench, ours: Any, theirs: Any, n: int) -> Pair:
    """Per-op medians of blocks of ``ours()`` and ``theirs()`` (each runs ``n`` ops),
    alternated so that load from elsewhere hits both alike."""
    ours()
    theirs()  # warm up: workers started, modules imported in them
    mine, base = [], []
    for _ in range(3 if b.quick else 5):
        gc.collect()
        base.append(theirs() / n)
        gc.collect()
        mine.append(ours() / n)
    return statistics.median(mine), statistics.median(base)


@row(
    metric="ProcessPoolBackend round trip, sync_wait(schedule | bulk(1)), vs "
    "ProcessPoolExecutor submit().result()",
    unit="us/op",
    better="lower",
    target=1.2,
)
def process_pool_round_trip(b: Bench) -> Pair:
    d = _proc()
    sndr = sx.schedule(d["sch"]) | sx.bulk(sx.par, 1, _proc_noop)
    pool = d["pool"]
    n = b.n(200, 40)

    def ours() -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            sx.sync_wait(sndr)
        return time.perf_counter() - t0

    def theirs() -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            pool.submit(_proc_noop, 0).result()
        return time.perf_counter() - t0

    return _interleaved(b, ours, theirs, n)


@row(
    metric="ProcessPoolBackend round trip from trio, await (schedule | bulk(1)), vs "
    "trio_parallel.run_sync",
    unit="us/op",
    note="informational; n/a without trio_parallel",
)
def process_pool_round_trip_trio(b: Bench) -> Pair:
    import trio

    try:
        import trio_parallel
    except ImportError:
        trio_parallel = None
    d = _proc()
    sndr = sx.schedule(d["sch"]) | sx.bulk(sx.par, 1, _proc_noop)
    n = b.n(200, 40)

    async def ours() -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            await sndr
        return time.perf_counter() - t0

    async def theirs() -> float:
        if trio_parallel is None:
            return 0.0
        t0 = time.perf_counter()
        for _ in range(n):
            await trio_parallel.run_sync(_proc_noop, 0)
        return time.perf_counter() - t0

    async def main() -> Pair:
        # One run: trio_parallel keeps its workers per run.
        await ours()
        await theirs()  # warm up
        mine, base = [], []
        for _ in range(3 if b.quick else 5):
            gc.collect()
            base.append(await theirs() / n)
            gc.collect()
            mine.append(await ours() / n)
        return statistics.median(mine), (
            statistics.median(base) if trio_parallel is not None else None
        )

    return trio.run(main)


@row(
    metric="ProcessPoolBackend round trip, sync_wait(schedule | bulk(1)), vs loky reusable "
    "executor submit().result()",
    unit="us/op",
    note="informational (the engine decision, docs/internals.md); n/a without loky",
)
def process_pool_round_trip_loky(b: Bench) -> Pair:
    try:
        import loky
    except ImportError:
        return None, None
    d = _proc()
    sndr = sx.schedule(d["sch"]) | sx.bulk(sx.par, 1, _proc_noop)
    pool = loky.get_reusable_executor(max_workers=min(2, os.cpu_count() or 1))
    n = b.n(200, 40)

    def ours() -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            sx.sync_wait(sndr)
        return time.perf_counter() - t0

    def theirs() -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            pool.submit(_proc_noop, 0).result()
        return time.perf_counter() - t0

    return _interleaved(b, ours, theirs, n)


# --------------------------------------------------------------------------- dask throughput

_DASK: dict[str, Any] = {}


def _dask() -> dict[str, Any] | None:
    if _DASK:
        return _DASK
    try:
        import distributed
    except ImportError:
        return None
    from structexec.backends import DaskBackend

    cluster = distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=False,
        protocol="tcp",
        host="127.0.0.1",
        dashboard_address=None,
        scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
    )
    client = distributed.Client(cluster, set_as_default=False)
    backend = DaskBackend(client)
    _DASK.update(cluster=cluster, client=client, backend=backend)

    def close() -> None:
        backend.close()
        client.close()
        cluster.close()

    atexit.register(close)
    return _DASK


N_ITEMS = 10_000


def _fill(b: int, e: int, out: list[int]) -> None:
    for i in range(b, e):
        out[i] = i


def _chunk(b: int, e: int) -> tuple[list[int]]:
    # Wrapped in a 1-tuple like the backend's own chunk results: dask serialises a bare
    # top-level list of 1,250 ints element by element (about 15x slower to gather here),
    # which would make the baseline look worse than it need be.
    return (list(range(b, e)),)


@row(
    metric="bulk_chunked 10,000 trivial items, DaskBackend, vs client.map of the same chunks",
    unit="items/s",
    better="higher",
    target=round(1 / 1.2, 3),
    note="target: at most 1.2x the time of client.map + gather",
)
def dask_bulk_chunked(b: Bench) -> Pair:
    d = _dask()
    if d is None:
        return None, None
    backend, client = d["backend"], d["client"]
    sch = sx.parallel_scheduler(backend)
    # The same chunks the backend makes: 4 per worker thread.
    nthreads = sum(client.nthreads().values())
    nchunks = min(N_ITEMS, 4 * nthreads)
    size = -(-N_ITEMS // nchunks)
    bs = list(range(0, N_ITEMS, size))
    es = [min(x + size, N_ITEMS) for x in bs]

    def ours() -> float:
        out = [0] * N_ITEMS
        t0 = time.perf_counter()
        sx.sync_wait(sx.just(out) | sx.continues_on(sch) | sx.bulk_chunked(sx.par, N_ITEMS, _fill))
        dt = time.perf_counter() - t0
        assert out[-1] == N_ITEMS - 1
        return N_ITEMS / dt

    def direct() -> float:
        out = [0] * N_ITEMS
        t0 = time.perf_counter()
        futures = client.map(_chunk, bs, es, pure=False)
        for x, (part,) in zip(bs, client.gather(futures)):
            out[x : x + len(part)] = part
        dt = time.perf_counter() - t0
        assert out[-1] == N_ITEMS - 1
        return N_ITEMS / dt

    ours()
    direct()  # warm up both paths
    mine, theirs = [], []
    # Blocks of each side: back-to-back alternation lets one side's clean-up (key
    # releases on the scheduler) land in the other's measurement.
    for _ in range(2 if b.quick else 4):
        gc.collect()
        theirs.extend(direct() for _ in range(3))
        time.sleep(0.05)
        gc.collect()
        mine.extend(ours() for _ in range(3))
        time.sleep(0.05)
    return statistics.median(mine), statistics.median(theirs)


# ---------------------------------------------------- any function remotely (remote then)
#
# Each row first checks that the function really runs in another process (a pid that is
# not this one), then times structexec and the library's own idiom in the same run.


def _remote_f(x: int) -> int:
    return x + 1


def _pid(*_: Any) -> int:
    return os.getpid()


_LOOPS_PER_S = 0


def _calibrate() -> int:
    global _LOOPS_PER_S
    n = 2_000_000
    t0 = time.perf_counter()
    total = 0
    for k in range(n):
        total += k & 7
    _LOOPS_PER_S = int(n / (time.perf_counter() - t0))
    return _LOOPS_PER_S


def _check_remote(sch: Any) -> None:
    (pid,) = sx.sync_wait(sx.schedule(sch) | sx.then(_pid))
    if pid == os.getpid():
        raise AssertionError("the then function ran in this process, not on a worker")


@row(
    metric="remote then round trip, sync_wait(schedule | then(partial(f, x))), "
    "ProcessPoolBackend(2), vs ProcessPoolExecutor(2).submit(f, x).result()",
    unit="us/op",
    better="lower",
    target=1.2,
)
def remote_then_process_pool(b: Bench) -> Pair:
    import functools

    d = _proc()
    _check_remote(d["sch"])
    sndr = sx.schedule(d["sch"]) | sx.then(functools.partial(_remote_f, 41))
    pool = d["pool"]
    n = b.n(200, 40)

    def ours() -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            sx.sync_wait(sndr)
        return time.perf_counter() - t0

    def theirs() -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            pool.submit(_remote_f, 41).result()
        return time.perf_counter() - t0

    return _interleaved(b, ours, theirs, n)


_DASK_PROCS: dict[str, Any] = {}


def _dask_procs() -> dict[str, Any] | None:
    """A LocalCluster of two single-threaded worker *processes* (so that where a function
    ran is a pid), TCP on 127.0.0.1, no dashboard."""
    if _DASK_PROCS:
        return _DASK_PROCS
    try:
        import distributed
    except ImportError:
        return None
    from structexec.backends import DaskBackend

    cluster = distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        protocol="tcp",
        host="127.0.0.1",
        dashboard_address=None,
    )
    client = distributed.Client(cluster, set_as_default=False)
    backend = DaskBackend(client)
    _DASK_PROCS.update(
        cluster=cluster, client=client, backend=backend, sch=sx.parallel_scheduler(backend)
    )

    def close() -> None:
        backend.close()
        client.close()
        cluster.close()

    atexit.register(close)
    return _DASK_PROCS


@row(
    metric="remote then round trip, sync_wait(schedule | then(partial(f, x))), DaskBackend "
    "(2 worker processes), vs client.submit(f, x, pure=False).result()",
    unit="ms/op",
    better="lower",
    target=1.1,
)
def remote_then_dask(b: Bench) -> Pair:
    import functools

    d = _dask_procs()
    if d is None:
        return None, None
    _check_remote(d["sch"])
    client = d["client"]
    sndr = sx.schedule(d["sch"]) | sx.then(functools.partial(_remote_f, 41))
    n = b.n(60, 15)

    def ours() -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            sx.sync_wait(sndr)
        return time.perf_counter() - t0

    def theirs() -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            client.submit(_remote_f, 41, pure=False).result()
        return time.perf_counter() - t0

    return _interleaved(b, ours, theirs, n)


@row(
    metric="1,000 remote calls, sync_wait(when_all(schedule | then(partial(f, i)) ...)), "
    "DaskBackend, vs client.gather(client.map(f, range(1000), pure=False))",
    unit="ms/op",
    better="lower",
    target=1.2,
)
def remote_then_dask_1000(b: Bench) -> Pair:
    import functools

    d = _dask_procs()
    if d is None:
        return None, None
    _check_remote(d["sch"])
    client, sch = d["client"], d["sch"]
    xs = list(range(1000))
    want = [x + 1 for x in xs]

    def ours() -> float:
        sndr = sx.when_all(
            *[sx.schedule(sch) | sx.then(functools.partial(_remote_f, x)) for x in xs]
        )
        t0 = time.perf_counter()
        r = sx.sync_wait(sndr)
        dt = time.perf_counter() - t0
        assert list(r or ()) == want
        return dt

    def theirs() -> float:
        t0 = time.perf_counter()
        r = client.gather(client.map(_remote_f, xs, pure=False))
        dt = time.perf_counter() - t0
        assert r == want
        return dt

    ours()
    theirs()  # warm up
    mine, base = [], []
    for _ in range(2 if b.quick else 3):
        gc.collect()
        base.append(theirs())
        time.sleep(0.05)
        gc.collect()
        mine.append(ours())
        time.sleep(0.05)
    return statistics.median(mine), statistics.median(base)


@row(
    metric="8 calls of a 0.5 s CPU-bound function, when_all of remote thens on "
    "ProcessPoolBackend(2), vs the 8 calls one after the other in this process",
    unit="ms/op",
    better="lower",
    target=round(1 / 1.7, 3),
    note="target: a speed-up of at least 1.7x on 2 workers",
    reps=1,
)
def remote_then_cpu_speedup(b: Bench) -> Pair:
    import functools

    d = _proc()
    sch = d["sch"]
    _check_remote(sch)
    _calibrate()
    burn = functools.partial(_burn_for, _LOOPS_PER_S, 0.5)
    sndr = sx.when_all(*[sx.schedule(sch) | sx.then(burn) for _ in range(8)])
    sx.sync_wait(sx.when_all(*[sx.schedule(sch) | sx.then(_pid) for _ in range(4)]))  # warm

    def ours() -> float:
        t0 = time.perf_counter()
        sx.sync_wait(sndr)
        return time.perf_counter() - t0

    def serial() -> float:
        t0 = time.perf_counter()
        for _ in range(8):
            burn()
        return time.perf_counter() - t0

    mine, base = [], []
    for _ in range(1 if b.quick else 5):
        base.append(serial())
        mine.append(ours())
    return statistics.median(mine), statistics.median(base)


def _burn_for(loops_per_s: int, seconds: float) -> int:
    """Pure-Python CPU work for about ``seconds`` at ``loops_per_s`` (measured here, passed
    to the workers so that both sides do the same work)."""
    total = 0
    for k in range(int(seconds * loops_per_s)):
        total += k & 7
    return total
