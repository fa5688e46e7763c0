"""Any function on a dask cluster, inside a scope: fan out, stop half-way, see the tree.

Run: python examples/cluster.py   (needs ``pip install 'structexec[dask]'``;
docs/parallel.md "Running any function remotely" explains it)

1. Start a ``LocalCluster`` on 127.0.0.1 (two worker processes, no dashboard) and a parallel
   scheduler on it. ``sx.schedule(par) | sx.then(f)`` now runs ``f`` on a worker: the same
   line runs on a thread with the default backend, or in a process with
   ``ProcessPoolBackend``.
2. Fan out 1,000 calls through a scope with ``spawn_future``; when half of them have
   finished, ``request_stop()`` the scope: the calls still queued on the cluster are
   cancelled there (``client.cancel``) and never run; the few running ones are abandoned.
   Before that, while calls are in flight, the scope's part of ``sx.operation_tree()``
   (and ``sx.dump()``) says where each one is: ``running on dask worker tcp://...`` or
   ``queued on the dask cluster``.
3. Close everything: no worker process is left behind.
"""

from __future__ import annotations

import collections
import functools
import io
import os
import time

import trio

import structexec as sx

N = 1_000


def crunch(i: int) -> tuple[int, int]:
    """Pure-Python CPU work, the kind that does not get faster on threads."""
    total = 0
    for k in range(30_000):
        total += (k * i) % 7
    return total, os.getpid()


async def fan_out(par: sx.parallel_scheduler) -> None:
    pids: set[int] = set()
    t0 = time.monotonic()
    async with sx.counting_scope(name="crunch") as scope:
        futures = [
            scope.spawn_future(sx.schedule(par) | sx.then(functools.partial(crunch, i)))
            for i in range(N)
        ]
        for fut in futures[: N // 2]:
            _, pid = await fut
            pids.add(pid)
        print(f"1. {N // 2} of {N} calls done in {time.monotonic() - t0:.1f}s, on worker "
              f"processes {sorted(pids)} (this process is {os.getpid()})")
        # The other calls are in flight: the tree says where each one is.
        (info,) = [s for s in sx.operation_tree() if s.name == "crunch"]
        where = collections.Counter(_where(op.state) for op in info.operations)
        print(f"2. while the other calls run, sx.operation_tree() shows counting_scope 'crunch' "
              f"[{info.state}, {info.count} associated]: "
              + ", ".join(f"{n} {w}" for w, n in sorted(where.items())))
        lines = sx.dump(io.StringIO()).splitlines()
        k = next((i for i, line in enumerate(lines) if "running on dask worker" in line),
                 next(i for i, line in enumerate(lines) if "queued on the dask" in line))
        print("   sx.dump() of one of them:", *lines[k - 1 : k + 1], sep="\n   ")
        t1 = time.monotonic()
        scope.request_stop()  # half-way: the calls still queued on the cluster are cancelled
    print(f"3. request_stop(): the scope closed {time.monotonic() - t1:.2f}s later")
    values = stopped = 0
    for fut in futures[N // 2 :]:
        try:
            await fut
            values += 1
        except sx.Stopped:
            stopped += 1
    print(f"4. of the other {N // 2} calls, {values} had finished and {stopped} were stopped "
          "(cancelled on the cluster: they never ran)")


def _where(state: str) -> str:
    """``"running on dask worker"``, ``"queued on the dask cluster"``, ``"finished"`` (the
    value waits in its future) or ``"completing"`` (a result on its way back)."""
    for what in ("running on dask worker", "queued on the dask cluster", "finished"):
        if state.startswith(what):
            return what
    return "completing"


def main() -> None:
    try:
        import distributed
    except ImportError:
        print("examples/cluster.py needs dask.distributed: pip install 'structexec[dask]'")
        return
    from structexec.backends import DaskBackend

    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, host="127.0.0.1", dashboard_address=None
    )
    with cluster, DaskBackend(cluster) as backend:
        workers = set(backend.client.run(os.getpid).values())
        par = sx.parallel_scheduler(backend)
        trio.run(fan_out, par)
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = sorted(pid for pid in workers if _alive(pid))
    print("5. cluster closed: workers", f"still running: {left}" if left else "gone")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # an exited child not yet reaped is a zombie: not running
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return True


if __name__ == "__main__":
    main()
