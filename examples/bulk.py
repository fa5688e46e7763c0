"""Data-parallel work on the parallel scheduler, from trio: threads, processes or a dask cluster.

    python examples/bulk.py              # the default backend: one thread pool per process
    python examples/bulk.py --processes  # worker processes (pure-Python CPU work in parallel)
    python examples/bulk.py --dask       # a dask.distributed cluster (structexec[dask] extra)

The program is the same in all three cases; only the backend changes, in one line in
``choose_backend``. ``--dask`` starts a small local cluster on 127.0.0.1; to use a real one,
pass its address instead (``DaskBackend("tcp://scheduler:8786")``).
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
import time
from typing import Any

import trio

import structexec as sx
from structexec.backends import DaskBackend, ProcessPoolBackend

N_BLOCKS = 8
BLOCK_SIZE = 2 << 20  # 2 MiB


def digest(i: int, blocks: list[bytes], out: list[str], where: list[str]) -> None:
    """One iteration of ``bulk``: hash block ``i`` and say where it ran.

    Module-level functions and plain lists: the process and dask backends pickle them, and
    copy elements ``[b, e)`` of ``out`` and ``where`` back after each chunk.
    """
    out[i] = hashlib.sha256(blocks[i]).hexdigest()[:12]
    where[i] = f"pid {os.getpid()} {threading.current_thread().name}"


def count_primes(b: int, e: int, counts: list[int]) -> None:
    """One chunk of ``bulk_chunked``: for each i in [b, e), count the primes below 2000*i."""
    for i in range(b, e):
        limit = 2000 * i
        sieve = bytearray([1]) * max(limit, 2)
        sieve[0:2] = b"\0\0"
        for p in range(2, int(limit**0.5) + 1):
            if sieve[p]:
                sieve[p * p :: p] = bytes(len(range(p * p, limit, p)))
        counts[i] = sum(sieve[:limit])


def slow_item(i: int) -> None:
    time.sleep(0.01)


async def main() -> None:
    sch = sx.get_parallel_scheduler()
    print(f"backend: {sch.backend!r}")

    # 1. bulk: one call per index, spread over the backend's agents; the values the
    #    predecessor sent are passed to every call and sent on afterwards.
    blocks = [bytes([i]) * BLOCK_SIZE for i in range(N_BLOCKS)]
    out = [""] * N_BLOCKS
    where = [""] * N_BLOCKS
    t0 = time.perf_counter()
    blocks, out, where = await (
        sx.just(blocks, out, where)
        | sx.continues_on(sch)
        | sx.bulk(sx.par, N_BLOCKS, digest)
        | sx.continues_on(sx.trio_scheduler())  # back on the trio thread
    )
    print(f"hashed {N_BLOCKS} x {BLOCK_SIZE >> 20} MiB in {time.perf_counter() - t0:.3f} s")
    for i in range(N_BLOCKS):
        print(f"  block {i}: {out[i]}  ({where[i]})")

    # 2. bulk_chunked: the backend cuts the range into chunks; f gets [b, e).
    counts = [0] * 40
    t0 = time.perf_counter()
    counts = await (
        sx.just(counts)
        | sx.continues_on(sch)
        | sx.bulk_chunked(sx.par, 40, count_primes)
        | sx.continues_on(sx.trio_scheduler())
    )
    print(
        f"primes below 2000*i for i < 40 (last: {counts[-1]}) in {time.perf_counter() - t0:.3f} s"
    )

    # 3. trio cancellation stops the bulk work: no new chunk starts, running per-index
    #    chunks stop at the next index, and the await raises Cancelled once all have returned.
    t0 = time.perf_counter()
    with trio.move_on_after(0.2):
        await (sx.schedule(sch) | sx.bulk(sx.par, 100_000, slow_item))
    print(
        f"1000 s of work cancelled after 0.2 s; the await returned after "
        f"{time.perf_counter() - t0:.2f} s"
    )


def start_local_dask_cluster() -> Any:
    import distributed

    cluster = distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        host="127.0.0.1",
        dashboard_address=None,
        scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},  # no fixed port 8787
    )
    return cluster


def choose_backend() -> Any:
    """Install the backend asked for on the command line; return what to close at the end."""
    if "--dask" in sys.argv:
        backend = DaskBackend(start_local_dask_cluster())  # or DaskBackend("tcp://host:8786")
    elif "--processes" in sys.argv:
        backend = ProcessPoolBackend()
    else:
        return None  # the default: the process-wide thread pool
    sx.set_parallel_scheduler_backend(lambda: backend)  # the one line that changes
    return backend


if __name__ == "__main__":
    backend = choose_backend()
    try:
        trio.run(main)
    finally:
        if isinstance(backend, DaskBackend):
            cluster = backend.client.cluster
            backend.close()
            cluster.close()
        elif isinstance(backend, ProcessPoolBackend):
            backend.shutdown()
